"""Pareto fronts and the 2-D hypervolume of a set of achieved points.

A point is a pair of objectives, e.g. (utilization, latency ratio); ``maximize`` says for each
whether larger is better ((True, False) there: more utilization, less latency). Point a
*dominates* b when a is at least as good in both objectives and strictly better in one. The
front is the set of points no other point dominates.

The hypervolume of a set S with respect to a reference point r is the area of the region that S
dominates and that dominates r: the union over p in S of the rectangles between p and r
(Zitzler & Thiele 1998's S metric). It grows as the front moves away from r and as it spreads,
so one number compares fronts made against the same r; a point no better than r in some
objective adds nothing. In 2-D it is exact by one sweep over the points sorted on the first
objective.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ccjax.errors import ConfigError


def _as_min(points: Sequence[Sequence[float]] | np.ndarray,
            maximize: Sequence[bool]) -> np.ndarray:
    """(N, 2) float64 with every objective turned into one to minimize."""
    p = np.asarray(points, np.float64)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ConfigError(f"points is invalid: an (N, 2) array of objective pairs, got shape "
                          f"{p.shape}")
    if not np.all(np.isfinite(p)):
        raise ConfigError("points is invalid: every objective value must be finite")
    if len(maximize) != 2:
        raise ConfigError(f"maximize={list(maximize)!r} is invalid: one flag per objective (2)")
    return np.where(np.asarray(maximize, bool), -p, p)


def pareto_mask(points: Sequence[Sequence[float]] | np.ndarray,
                maximize: Sequence[bool] = (True, False)) -> np.ndarray:
    """(N,) bool: True where no other point dominates the point. Equal points dominate each
    other neither way, so duplicates on the front are all kept."""
    q = _as_min(points, maximize)
    if len(q) == 0:
        return np.zeros(0, bool)
    le = np.all(q[:, None, :] <= q[None, :, :], axis=-1)  # le[j, i]: j at least as good as i
    lt = np.any(q[:, None, :] < q[None, :, :], axis=-1)
    return ~np.any(le & lt, axis=0)


def pareto_front(points: Sequence[Sequence[float]] | np.ndarray,
                 maximize: Sequence[bool] = (True, False)) -> np.ndarray:
    """The front's distinct points (K, 2), sorted by the first objective ascending. With
    (True, False) the second then ascends too: the staircase from the low-latency end to the
    high-utilization end."""
    p = np.asarray(points, np.float64)
    front = p[pareto_mask(p, maximize)] if len(p) else p.reshape(0, 2)
    front = np.unique(front, axis=0)  # sorted by the first column, then the second
    return front


def hypervolume_2d(points: Sequence[Sequence[float]] | np.ndarray, ref: Sequence[float],
                   maximize: Sequence[bool] = (True, False)) -> float:
    """The area dominated by ``points`` and bounded by ``ref`` (module doc). 0 for no points or
    none strictly better than ``ref`` in both objectives."""
    q = _as_min(points, maximize)
    r = _as_min([ref], maximize)[0]
    q = q[np.all(q < r, axis=1)]
    if len(q) == 0:
        return 0.0
    q = q[np.lexsort((q[:, 1], q[:, 0]))]  # by the first objective, ties by the second
    area, best = 0.0, r[1]
    for x, y in q:
        if y < best:  # each new point below the staircase adds the strip it opens up
            area += (r[0] - x) * (best - y)
            best = y
    return float(area)
