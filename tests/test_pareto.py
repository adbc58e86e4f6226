"""Pareto fronts and 2-D hypervolume on hand-made point sets (ccjax.pareto)."""

from __future__ import annotations

import numpy as np
import pytest

from ccjax.errors import ConfigError
from ccjax.pareto import hypervolume_2d, pareto_front, pareto_mask

#: (utilization, latency ratio): more utilization and less latency are better
PTS = [(0.5, 1.2), (0.9, 2.0), (0.7, 1.5), (0.6, 1.6), (0.4, 1.3), (0.9, 2.5)]


def test_front_keeps_the_non_dominated_points_sorted():
    mask = pareto_mask(PTS)
    # (0.6, 1.6) loses to (0.7, 1.5); (0.4, 1.3) to (0.5, 1.2); (0.9, 2.5) to (0.9, 2.0)
    assert mask.tolist() == [True, True, True, False, False, False]
    np.testing.assert_array_equal(pareto_front(PTS), [[0.5, 1.2], [0.7, 1.5], [0.9, 2.0]])
    # duplicates: neither dominates the other; the front lists the point once
    assert pareto_mask([(1, 1), (1, 1)]).tolist() == [True, True]
    assert pareto_front([(1, 1), (1, 1)]).tolist() == [[1.0, 1.0]]
    # other directions: both maximized
    assert pareto_mask([(1, 1), (2, 2), (3, 0)], maximize=(True, True)).tolist() == \
        [False, True, True]
    assert pareto_front(np.zeros((0, 2))).shape == (0, 2)


def test_hypervolume_exact_values():
    ref = (0.0, 3.0)
    # one point: the rectangle to the reference
    assert hypervolume_2d([(0.5, 1.0)], ref) == pytest.approx(0.5 * 2.0)
    # the staircase of three front points, by hand: strips of the union of rectangles
    # (0.5, 1.2): 0.5 x 1.8; (0.7, 1.5) adds (0.7 - 0.5) x 1.5; (0.9, 2.0) adds 0.2 x 1.0
    want = 0.5 * 1.8 + 0.2 * 1.5 + 0.2 * 1.0
    assert hypervolume_2d(PTS, ref) == pytest.approx(want)
    # dominated points and repeats add nothing
    assert hypervolume_2d(PTS + [(0.1, 2.9), (0.5, 1.2)], ref) == pytest.approx(want)
    # points no better than the reference in one objective add nothing
    assert hypervolume_2d([(0.0, 1.0), (0.5, 3.0), (0.5, 3.5)], ref) == 0.0
    assert hypervolume_2d(np.zeros((0, 2)), ref) == 0.0
    # both minimized: area between (1, 3), (2, 1) and the reference (4, 4) = 3 + 6 - 2 = 7
    assert hypervolume_2d([(1, 3), (2, 1)], (4, 4), maximize=(False, False)) == \
        pytest.approx(7.0)


def test_hypervolume_grows_when_the_front_improves():
    ref = (0.0, 3.0)
    base = hypervolume_2d(PTS, ref)
    assert hypervolume_2d(PTS + [(0.8, 1.4)], ref) > base  # a new non-dominated point
    better = [(x + 0.05, y) for x, y in PTS]
    assert hypervolume_2d(better, ref) > base


@pytest.mark.parametrize("pts", [[(1.0, float("nan"))], [(1.0, 2.0, 3.0)], [1.0, 2.0]])
def test_bad_points_are_config_errors(pts):
    with pytest.raises(ConfigError, match="points is invalid"):
        hypervolume_2d(pts, (0, 3))
