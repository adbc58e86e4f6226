"""ccjax.agents.landmarks: MOCC's landmark grid, neighbour graph and Algorithm 1 order (§4.2)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from ccjax.agents.landmarks import BOOTSTRAP, neighbours, simplex_grid, traversal_order
from ccjax.errors import ConfigError

STEPS = [0.25, 0.2, 1 / 6, 0.1, 0.05]


def _index_of(points: np.ndarray, w) -> int:
    hits = np.flatnonzero(np.all(np.abs(points - np.asarray(w)) < 1e-9, axis=1))
    assert hits.size == 1, w
    return int(hits[0])


def _bfs(adj: list[list[int]], source: int, allowed: set[int]) -> dict[int, int]:
    """Graph distances from ``source`` through vertices in ``allowed`` only."""
    dist = {source: 0}
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if v in allowed and v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


# --------------------------------------------------------------------------------------------
# simplex_grid


@pytest.mark.parametrize(
    ("step", "count"),
    # C(n-1, 2); the paper's footnote 7 says 12 for 1/6, which is an erratum.
    [(0.25, 3), (0.2, 6), (1 / 6, 10), (0.1, 36), (0.05, 171)],
)
def test_grid_counts(step, count):
    pts = simplex_grid(step)
    assert pts.shape == (count, 3)
    assert pts.dtype == np.float64
    n = round(1 / step)
    assert count == math.comb(n - 1, 2)


@pytest.mark.parametrize("step", STEPS)
def test_grid_on_open_simplex_multiples_of_step_and_unique(step):
    pts = simplex_grid(step)
    n = round(1 / step)
    np.testing.assert_allclose(pts.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(pts > 0) and np.all(pts < 1)
    units = pts * n
    np.testing.assert_allclose(units, np.rint(units), atol=1e-9)
    assert np.all(np.rint(units) >= 1)
    assert len({tuple(r) for r in np.rint(units).astype(int).tolist()}) == len(pts)
    # Documented order: ascending lexicographically by (w_thr, w_lat).
    keys = [tuple(r) for r in np.rint(units[:, :2]).astype(int).tolist()]
    assert keys == sorted(keys)


def test_grid_step_01_values():
    pts = simplex_grid(0.1)
    assert pts.min() == pytest.approx(0.1) and pts.max() == pytest.approx(0.8)
    for w in BOOTSTRAP + ((0.8, 0.1, 0.1), (0.1, 0.8, 0.1), (0.4, 0.5, 0.1)):
        _index_of(pts, w)


@pytest.mark.parametrize("step", [0.1 + 1e-12, 1 / 6 * (1 - 1e-10), np.float64(0.2), 1 / 3])
def test_grid_accepts_float_spellings_of_1_over_n(step):
    n = round(1 / float(step))
    assert len(simplex_grid(step)) == math.comb(n - 1, 2)


@pytest.mark.parametrize(
    "step", [0.3, 0, 0.0, -0.1, 0.5, 1.0, float("nan"), float("inf"), 1e-9, 0.1 + 1e-6, True]
)
def test_grid_bad_step_raises_config_error(step):
    with pytest.raises(ConfigError) as exc:
        simplex_grid(step)
    msg = str(exc.value)
    assert "landmarks_step" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="landmarks_step"):
        neighbours(np.zeros((0, 3)), step)
    with pytest.raises(ConfigError, match="landmarks_step"):
        traversal_order(np.zeros((0, 3)), step)


def test_grid_bad_step_string():
    with pytest.raises(ConfigError, match="landmarks_step"):
        simplex_grid("0.1")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# neighbours


def test_neighbour_examples_from_the_paper():
    pts = simplex_grid(0.1)
    adj = neighbours(pts, 0.1)
    a = _index_of(pts, (0.2, 0.4, 0.4))
    assert _index_of(pts, (0.2, 0.5, 0.3)) in adj[a]
    assert _index_of(pts, (0.1, 0.5, 0.4)) in adj[a]
    assert _index_of(pts, (0.1, 0.3, 0.6)) not in adj[a]


@pytest.mark.parametrize("step", STEPS)
def test_neighbour_graph_is_the_one_step_lattice(step):
    pts = simplex_grid(step)
    adj = neighbours(pts, step)
    n = round(1 / step)
    units = np.rint(pts * n).astype(int)
    assert len(adj) == len(pts)
    for i, nbrs in enumerate(adj):
        assert nbrs == sorted(set(nbrs)) and i not in nbrs
        for j in nbrs:
            assert i in adj[j]  # undirected
        # Brute force: at most two components differ, each by at most one step.
        expect = [
            j
            for j in range(len(pts))
            if j != i
            and np.count_nonzero(units[i] != units[j]) <= 2
            and np.abs(units[i] - units[j]).max() <= 1
        ]
        assert nbrs == expect


def test_degrees_at_step_01():
    pts = simplex_grid(0.1)
    deg = np.array([len(a) for a in neighbours(pts, 0.1)])
    assert deg.min() == 2 and deg.max() == 6
    for corner in [(0.8, 0.1, 0.1), (0.1, 0.8, 0.1), (0.1, 0.1, 0.8)]:
        assert deg[_index_of(pts, corner)] == 2
    assert deg[_index_of(pts, (0.3, 0.3, 0.4))] == 6


def test_neighbours_rejects_points_off_the_grid():
    with pytest.raises(ConfigError, match="points"):
        neighbours(np.array([[0.15, 0.45, 0.4]]), 0.1)
    with pytest.raises(ConfigError, match="points"):
        neighbours(np.array([[0.0, 0.5, 0.5]]), 0.1)  # a zero weight is off the open simplex
    with pytest.raises(ConfigError, match="points"):
        neighbours(np.ones(3), 0.1)


# --------------------------------------------------------------------------------------------
# traversal_order (Algorithm 1)


def _assert_regions_are_nearest(pts, step, order, seeds, size):
    """Check Algorithm 1's regions and the fallback tail; return the region sizes.

    Region r holds min(size, #reachable) vertices: those at minimum graph distance from its
    seed among the vertices not taken by earlier regions (distances measured through untaken
    vertices only), listed in non-decreasing distance. A region that runs out of reachable
    vertices is short, and whatever is left comes last, in non-decreasing graph distance from
    the last non-empty region.
    """
    adj = neighbours(pts, step)
    untaken = set(range(len(pts)))
    start, sizes, last = 0, [], []
    for seed in seeds:
        dist = _bfs(adj, seed, untaken)
        reachable = set(dist) & untaken
        k = min(size, len(reachable))
        region = [int(v) for v in order[start : start + k]]
        if seed in untaken:
            assert region[0] == seed
        assert set(region) <= reachable
        d_region = [dist[v] for v in region]
        assert d_region == sorted(d_region)
        others = [dist.get(v, math.inf) for v in untaken - set(region)]
        assert max(d_region, default=0) <= min(others, default=math.inf)
        untaken -= set(region)
        start += k
        sizes.append(k)
        last = region or last
    tail = [int(v) for v in order[start:]]
    assert set(tail) == untaken
    if tail:
        full = set(range(len(pts)))
        d_tail = [min(_bfs(adj, s, full).get(v, math.inf) for s in last) for v in tail]
        assert d_tail == sorted(d_tail)
    return sizes


@pytest.mark.parametrize("step", STEPS)
def test_traversal_is_a_permutation(step):
    pts = simplex_grid(step)
    order = traversal_order(pts, step)
    assert order.dtype == np.int64
    assert sorted(order.tolist()) == list(range(len(pts)))


def test_traversal_step_01_regions_follow_the_bootstraps():
    pts = simplex_grid(0.1)
    order = traversal_order(pts, 0.1)
    seeds = [_index_of(pts, w) for w in BOOTSTRAP]
    assert [order[0], order[12], order[24]] == seeds
    assert _assert_regions_are_nearest(pts, 0.1, order, seeds, 12) == [12, 12, 12]


def test_traversal_step_01_matches_the_notes():
    # notes/mocc.md §3.3 lists Algorithm 1's order with lexicographic tie-breaking, which is
    # this module's grid order, so the whole sequence must match.
    notes = [
        # region 1
        (6, 3, 1), (5, 3, 2), (5, 4, 1), (6, 2, 2), (7, 2, 1), (4, 3, 3),
        (4, 4, 2), (4, 5, 1), (5, 2, 3), (6, 1, 3), (7, 1, 2), (8, 1, 1),
        # region 2
        (1, 6, 3), (1, 5, 4), (1, 7, 2), (2, 5, 3), (2, 6, 2), (1, 4, 5),
        (1, 8, 1), (2, 4, 4), (2, 7, 1), (3, 4, 3), (3, 5, 2), (3, 6, 1),
        # region 3
        (3, 1, 6), (2, 1, 7), (2, 2, 6), (3, 2, 5), (4, 1, 5), (1, 1, 8),
        (1, 2, 7), (1, 3, 6), (2, 3, 5), (3, 3, 4), (4, 2, 4), (5, 1, 4),
    ]  # fmt: skip
    pts = simplex_grid(0.1)
    got = [tuple(r) for r in np.rint(pts[traversal_order(pts, 0.1)] * 10).astype(int).tolist()]
    assert got == notes


def test_traversal_step_005_regions():
    pts = simplex_grid(0.05)
    order = traversal_order(pts, 0.05)
    seeds = [_index_of(pts, w) for w in BOOTSTRAP]
    sizes = _assert_regions_are_nearest(pts, 0.05, order, seeds, 57)  # ⌈171 / 3⌉
    # The first two regions fence off corners of the triangle, so the third runs out of
    # reachable vertices and the fallback BFS appends the rest.
    assert sizes[:2] == [57, 57] and sizes[2] < 57
    assert [order[0], order[57], order[114]] == seeds


@pytest.mark.parametrize(
    ("step", "seeds_units", "size"),
    [
        # Bootstraps off the grid snap to their L1-nearest landmark.
        (0.25, [(2, 1, 1), (1, 2, 1), (1, 1, 2)], 1),
        (0.2, [(3, 1, 1), (1, 3, 1), (1, 1, 3)], 2),
        (1 / 6, [(3, 2, 1), (1, 3, 2), (2, 1, 3)], 4),
    ],
)
def test_traversal_snaps_off_grid_bootstraps(step, seeds_units, size):
    pts = simplex_grid(step)
    n = round(1 / step)
    order = traversal_order(pts, step)
    seeds = [_index_of(pts, np.array(u) / n) for u in seeds_units]
    sizes = _assert_regions_are_nearest(pts, step, order, seeds, size)
    assert [order[i] for i in np.cumsum([0] + sizes[:-1])] == seeds


def test_traversal_merges_coinciding_seeds():
    pts = simplex_grid(0.25)
    # Both snap to ⟨0.5, 0.25, 0.25⟩, so there is one region of all 3 vertices.
    order = traversal_order(pts, 0.25, bootstrap=[(0.6, 0.3, 0.1), (0.55, 0.25, 0.2)])
    assert order[0] == _index_of(pts, (0.5, 0.25, 0.25))
    assert sorted(order.tolist()) == [0, 1, 2]


def test_traversal_exhausted_region_falls_back_to_bfs():
    # A path of 8 landmarks (w_loss = 0.1). Region 1 from 0.4 takes {0.4, 0.3, 0.5, 0.2}; region
    # 2 from 0.8 reaches only {0.8, 0.7, 0.6} before running into region 1, so 0.1 is appended
    # afterwards by the fallback BFS.
    thr = np.arange(1, 9) / 10
    pts = np.stack([thr, 0.9 - thr, np.full(8, 0.1)], axis=1)
    order = traversal_order(pts, 0.1, bootstrap=[(0.4, 0.5, 0.1), (0.8, 0.1, 0.1)])
    np.testing.assert_allclose(pts[order, 0], [0.4, 0.3, 0.5, 0.2, 0.8, 0.7, 0.6, 0.1])


def test_traversal_disconnected_points_still_a_permutation():
    pts = np.array([[0.1, 0.1, 0.8], [0.8, 0.1, 0.1], [0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
    order = traversal_order(pts, 0.1, bootstrap=[(0.8, 0.1, 0.1)])
    assert order.tolist()[:2] == [1, 2]
    assert sorted(order.tolist()) == [0, 1, 2, 3]


def test_traversal_rejects_bad_bootstrap():
    pts = simplex_grid(0.1)
    for bad in ([], [(0.5, 0.5)], [(float("nan"), 0.5, 0.5)], [(0.5, 0.5), (0.2, 0.3, 0.5)]):
        with pytest.raises(ConfigError, match="bootstrap"):
            traversal_order(pts, 0.1, bootstrap=bad)
