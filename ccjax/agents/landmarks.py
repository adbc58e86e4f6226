"""MOCC's landmark preference vectors, their neighbour graph and the fast-traversal order.

MOCC (Ma et al., EuroSys '22, §4.2) trains one policy network over ω "landmark" preferences
w = ⟨w_thr, w_lat, w_loss⟩: every w on a grid of step ``s`` with each w_i ∈ (0, 1) and
Σ w_i = 1 (ω = 36 at s = 0.1, Table 2). Training has two phases: bootstrapping on three
vectors (:data:`BOOTSTRAP`), then "fast traversing" the rest in the order of Algorithm 1
("Neighbourhood-based Objective Sorting"), which grows a Dijkstra region around each bootstrap
vector on the neighbour graph G and concatenates the regions.

Everything here is exact integer arithmetic on grid units: a landmark is stored as
``k / n`` with ``k`` an integer triple summing to ``n = 1 / step``, so no float rounding can
create duplicate points or miss a neighbour. Pure NumPy; nothing here is traced.

Grid order (used for every tie-break): rows ascending lexicographically by (w_thr, w_lat), i.e.
``(0.1, 0.1, 0.8), (0.1, 0.2, 0.7), ..., (0.8, 0.1, 0.1)`` at step 0.1. This order was chosen
so that :func:`traversal_order` at step 0.1 reproduces the order listed in the project's notes
(``/work/shared/papers/notes/mocc.md`` §3.3), which were produced with lexicographic ties.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Sequence

import numpy as np

from ccjax.errors import require

#: MOCC §4.2: the bootstrapped objectives, chosen "to cover different application requirements
#: as much as possible". Order matters: Algorithm 1 grows the regions in this order.
BOOTSTRAP: tuple[tuple[float, float, float], ...] = (
    (0.6, 0.3, 0.1),
    (0.1, 0.6, 0.3),
    (0.3, 0.1, 0.6),
)

#: Largest grid division accepted (ω = C(999, 2) ≈ 5·10^5 landmarks); guards against a step
#: like 1e-9 that would silently try to allocate an enormous grid. The paper's finest is 1/20.
MAX_DIVISIONS = 1000

_STEP_REL_TOL = 1e-9
_ALLOWED_STEP = (
    f"must be 1/n for an integer n in [3, {MAX_DIVISIONS}] (e.g. 0.25, 0.2, 1/6, 0.1, 0.05), "
    "so the open simplex has at least one landmark"
)


def _divisions(step: float) -> int:
    """Validate ``step`` and return the integer ``n`` with ``step == 1/n``.

    ``n >= 3`` because the open simplex (every w_i >= one step) needs at least three steps of
    mass; a relative tolerance of 1e-9 accepts the float spellings of 1/n (0.1, 1/6, ...).
    """
    is_real = isinstance(step, numbers.Real) and not isinstance(step, bool)
    require(is_real, "landmarks_step", step, _ALLOWED_STEP)
    s = float(step)
    require(math.isfinite(s) and s > 0.0, "landmarks_step", step, _ALLOWED_STEP)
    inv = 1.0 / s
    n = round(inv) if math.isfinite(inv) else 0
    ok = 3 <= n <= MAX_DIVISIONS and abs(n * s - 1.0) <= _STEP_REL_TOL
    require(ok, "landmarks_step", step, _ALLOWED_STEP)
    return n


def _grid_units(n: int) -> np.ndarray:
    """All integer triples ``(a, b, c) >= 1`` with ``a + b + c == n``, in grid order."""
    rows = [(a, b, n - a - b) for a in range(1, n - 1) for b in range(1, n - a)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def _to_units(points: np.ndarray, n: int) -> np.ndarray:
    """Convert landmark rows to integer grid units, checking they lie on the open grid."""
    pts = np.asarray(points, dtype=np.float64)
    require(
        pts.ndim == 2 and pts.shape[1] == 3,
        "points",
        f"array of shape {pts.shape}",
        "must be an (ω, 3) array of preference vectors",
    )
    scaled = pts * n
    units = np.rint(scaled).astype(np.int64)
    on_grid = bool(
        np.all(np.isfinite(scaled))
        and np.all(np.abs(scaled - units) <= 1e-6)
        and np.all(units >= 1)
        and np.all(units.sum(axis=1) == n)
    )
    require(
        on_grid,
        "points",
        f"array of shape {pts.shape}",
        f"every row must be a landmark of step 1/{n} (multiples of the step, > 0, summing to 1)",
    )
    return units


def simplex_grid(step: float) -> np.ndarray:
    """Return MOCC's landmark preference vectors at grid step ``step``, shape (ω, 3), float64.

    MOCC §4.2: the landmarks are "all weight vectors satisfying w_thr + w_lat + w_loss = 1,
    w_i ∈ (0, 1), at a given step size"; training never uses a zero component (§4.1). A row is
    ``(w_thr, w_lat, w_loss)``; every component is a positive multiple of ``step`` and each row
    sums to 1 (exactly ``k / n`` for integers ``k``; the float sum is within one ulp of 1).

    ``step`` must be ``1/n`` for an integer ``3 <= n <= MAX_DIVISIONS``, within a relative
    tolerance of 1e-9 (so 0.1 and 1/6 are accepted); anything else raises
    :class:`~ccjax.errors.ConfigError` naming ``landmarks_step``.

    The count is ω = C(n−1, 2): 3, 6, 10, 36, 171 for steps 1/4, 1/5, 1/6, 1/10, 1/20.
    MOCC's footnote 7 lists ω = 3, 6, **12**, 36, 171 for these steps; 12 is wrong for 1/6
    (the ten points are the triples of sixths ≥ 1/6), so this function returns 10 there.

    Order: ascending lexicographically by (w_thr, w_lat) — see the module docstring. Callers
    that tie-break by index (e.g. :func:`traversal_order`) inherit this order.
    """
    n = _divisions(step)
    return _grid_units(n).astype(np.float64) / n


def neighbours(points: np.ndarray, step: float) -> list[list[int]]:
    """Adjacency lists of MOCC's neighbour graph G over ``points`` (indices ascending).

    MOCC §4.2: two weight vectors are neighbours "if they differ in at most two dimensions and
    each dimension differs by less than the step size"; all edges have weight 1. Read
    literally ("< step") no two distinct grid points would be neighbours, and the paper's own
    examples at step 0.1 — ⟨0.2,0.4,0.4⟩–⟨0.2,0.5,0.3⟩ and ⟨0.2,0.4,0.4⟩–⟨0.1,0.5,0.4⟩ are
    neighbours, ⟨0.2,0.4,0.4⟩–⟨0.1,0.3,0.6⟩ is not — differ by exactly one step. So this uses
    "differs by at most one step". On the simplex that means moving one step of mass from one
    component to another (a triangular lattice): the "at most two dimensions" clause then holds
    automatically, since three ±1 differences cannot sum to 0. Degrees are 2 (corners) to 6.

    ``points`` is any (m, 3) array of landmarks of this step (typically
    ``simplex_grid(step)``); a row off the grid raises :class:`~ccjax.errors.ConfigError`.
    Identical rows are not neighbours of each other (they differ in no dimension).
    """
    n = _divisions(step)
    units = _to_units(points, n)
    # Look up the (at most six) one-step moves in a dict instead of comparing all pairs, so
    # fine grids stay O(ω).
    index: dict[tuple[int, ...], list[int]] = {}
    for i, row in enumerate(units.tolist()):
        index.setdefault(tuple(row), []).append(i)
    moves = [(src, dst) for src in range(3) for dst in range(3) if src != dst]
    adj: list[list[int]] = []
    for row in units.tolist():
        nbrs: list[int] = []
        for src, dst in moves:
            cand = list(row)
            cand[src] -= 1
            cand[dst] += 1
            nbrs.extend(index.get(tuple(cand), ()))
        adj.append(sorted(nbrs))
    return adj


def _nearest_index(units: np.ndarray, n: int, w: np.ndarray) -> int:
    """Index of the landmark nearest to ``w`` in L1, ties to the lower index."""
    dist = np.abs(units / n - w[None, :]).sum(axis=1)
    # Round so that float noise cannot break an exact tie in favour of a later index.
    return int(np.argmin(np.round(dist, 9)))


def traversal_order(
    points: np.ndarray,
    step: float,
    bootstrap: Sequence[Sequence[float]] = BOOTSTRAP,
) -> np.ndarray:
    """MOCC's fast-traversal order of the landmarks: Algorithm 1, returned as indices.

    MOCC §4.2, Algorithm 1 ("Neighbourhood-based Objective Sorting"): for each bootstrapped
    vertex O[i] in turn, run Dijkstra on G (unit weights, so BFS) from O[i] and append the
    nearest not-yet-visited vertices to L until the region holds ⌈|V| / |O|⌉ vertices; L is the
    concatenation of the regions and is the order in which phase 2 cycles through the
    objectives. At step 0.1 this gives three regions of 12.

    The pseudocode is ambiguous in places (notes §3.3, erratum 17); the choices here:

    * Distances are initialised as "v has an edge with O[i]" (the text says "with O", which
      would make the regions meaningless) and O[i]'s own distance is 0 (never set in the text).
    * Ties in distance go to the lower index, i.e. the :func:`simplex_grid` order.
    * Only vertices not taken by earlier regions are extracted or relaxed (line 21–22), so a
      region's distances are measured in G minus the earlier regions, with O[i] as the source
      even when an earlier region already took it (it is then not appended again, as in lines
      11–14, and its region still gets ⌈|V| / |O|⌉ new vertices).
    * A bootstrap vector that is not a landmark at this step (e.g. at 1/4 or 1/6) is replaced
      by its nearest landmark in L1 (ties to the lower index); seeds that coincide are merged,
      keeping the first, and |O| counts the distinct seeds.
    * A region stops early when no unvisited vertex is reachable from its seed (line 16 would
      otherwise pick an arbitrary vertex at distance ∞). Any vertices still unvisited after the
      last region are appended in BFS order over the whole of G from the last region's vertices
      (multi-source, ties to the lower index), so the result is always a permutation. This
      happens on the paper's grids: at step 0.05 the first two regions (57 each) fence off two
      corners, so the third region gets 51 and 6 corner landmarks come last; at 1/5 and 1/6
      the third region is just its seed.

    Args:
        points: the landmarks, an (ω, 3) array on the grid of ``step`` (normally
            ``simplex_grid(step)``).
        step: the grid step, validated as in :func:`simplex_grid`.
        bootstrap: the preference vectors to grow regions from, in order (default
            :data:`BOOTSTRAP`, MOCC §4.2).

    Returns:
        int64 array of shape (ω,): a permutation of ``range(ω)``; ``points[order]`` is the
        training order. With the default bootstrap at step 0.1 it starts with the index of
        ⟨0.6,0.3,0.1⟩, and ⟨0.1,0.6,0.3⟩ and ⟨0.3,0.1,0.6⟩ open the 2nd and 3rd regions of 12.
    """
    n = _divisions(step)
    units = _to_units(points, n)
    m = units.shape[0]
    try:
        boot = np.asarray(bootstrap, dtype=np.float64)
    except (TypeError, ValueError):  # ragged or non-numeric: report it as a config error
        boot = np.zeros((0,))
    require(
        boot.ndim == 2
        and boot.shape[0] >= 1
        and boot.shape[1] == 3
        and bool(np.all(np.isfinite(boot))),
        "bootstrap",
        bootstrap,
        "must be a non-empty sequence of finite (w_thr, w_lat, w_loss) triples",
    )
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    adj = neighbours(points, step)

    seeds: list[int] = []
    for w in boot:
        s = _nearest_index(units, n, w)
        if s not in seeds:
            seeds.append(s)
    visits_per_region = -(-m // len(seeds))  # ⌈|V| / |O|⌉, Algorithm 1 line 10

    visited = np.zeros(m, dtype=bool)
    order: list[int] = []
    last_region: list[int] = []
    for seed in seeds:
        if len(order) == m:  # "L is not full" (line 15)
            break
        region: list[int] = []
        if not visited[seed]:
            visited[seed] = True
            region.append(seed)
        # With unit weights Dijkstra is a BFS; processing each distance layer in index order
        # gives "minimum d, then lowest index" exactly as a priority queue keyed (d, index).
        layer = [seed]
        seen = {seed}
        while layer and len(region) < visits_per_region:
            nxt = sorted({v for u in layer for v in adj[u] if not visited[v] and v not in seen})
            seen.update(nxt)
            for v in nxt:
                if len(region) == visits_per_region:
                    break
                visited[v] = True
                region.append(v)
            layer = nxt
        order.extend(region)
        if region:
            last_region = region

    if len(order) < m:
        # Regions exhausted their reachable sets; finish with a BFS over all of G from the last
        # region so training continues next to where it left off.
        sources = last_region or [seeds[-1]]
        dist = np.full(m, -1, dtype=np.int64)
        queue = deque(sorted(sources))
        for s in queue:
            dist[s] = 0
        reached: list[tuple[int, int]] = []
        while queue:
            u = queue.popleft()
            for v in adj[u]:
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    queue.append(v)
                    reached.append((int(dist[v]), v))
        rest = [v for _, v in sorted(reached) if not visited[v]]
        # Vertices in another component of G (only possible for a hand-made subset of points)
        # go last, in index order, so the result is still a permutation.
        rest += [v for v in range(m) if not visited[v] and dist[v] < 0]
        order.extend(rest)
        visited[rest] = True

    return np.asarray(order, dtype=np.int64)
