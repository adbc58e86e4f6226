"""What a sweep trial's environments train on, iteration by iteration, and what it is evaluated on.

A sweep trains every trial of a batch for the same ``train.iters`` iterations in one compiled
program, so a schedule here is a pure function of the iteration index (no stopping rule: a
trial cannot leave the batch's program early). The three schedules of ``ccjax train``
(``ccjax.train.schedules``) read that way:

* ``fixed``: every environment on the trial's ``env.preference``; evaluated at that preference.
* ``all-at-once``: MOCC's ω landmarks (``simplex_grid(train.landmarks_step)``) in every batch,
  environment i on landmark i mod ω, as ``AllAtOnce`` spreads them (``schedules.spread``);
  evaluated at every landmark, scored by the mean landmark reward (the quantity ``ccjax train``
  judges convergence and keeps ``best/`` by).
* ``two-phase``: MOCC §4.2: ``train.bootstrap_iters`` iterations on the three bootstrap vectors
  (spread over the environments, as ``TwoPhase``), then the landmarks in Algorithm 1's order,
  ``train.visit_iters`` iterations each with every environment on that landmark, cycling until
  the budget ends; evaluated and scored as all-at-once.

What ``ccjax train`` does and a sweep does not: stop on convergence (``max_cycles``,
``min_cycles``, ``converge_tol``, ``patience``). Those keys stay in a trial's config (and its id)
but a sweep's budget is ``train.iters``, and its evaluations come every ``sweep.eval_every``
iterations rather than at cycle ends. What replaces the stopping time in a sweep's record is the
first evaluated iteration that reached 99% of the trial's best evaluation (``ledger``'s
``iter_99``).

The landmarks depend only on ``train.landmarks_step``, a static key (it fixes the number of
evaluation preferences), so trials of one static group share their landmarks while seeds and
hyperparameters vary within the group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ccjax.agents.landmarks import BOOTSTRAP, simplex_grid, traversal_order
from ccjax.algos import AlgoConfig
from ccjax.train.schedules import spread

#: schedules a sweep runs
SCHEDULES = ("fixed", "all-at-once", "two-phase")


@dataclass(frozen=True)
class TrialSchedule:
    """One trial's training preferences per iteration and its evaluation preferences."""

    kind: str
    n_envs: int
    preference: tuple[float, float, float]  # the fixed schedule's (unused by the others)
    landmarks: np.ndarray  # (ω, 3) float32; (1, 3) the preference for "fixed"
    order: np.ndarray  # (ω, 3) the landmarks in Algorithm 1's order (two-phase)
    bootstrap_iters: int = 0
    visit_iters: int = 1

    @property
    def uses_landmarks(self) -> bool:
        return self.kind != "fixed"

    @property
    def stationary(self) -> bool:
        """True when every iteration trains on the same preferences (they can be cached)."""
        return self.kind != "two-phase"

    @property
    def eval_prefs(self) -> np.ndarray:
        """(P, 3): the preferences the trial is evaluated at (P = ω, or 1 for "fixed")."""
        return self.landmarks

    def iteration_prefs(self, it: int) -> np.ndarray:
        """(n_envs, 3): every environment's preference in iteration ``it`` (0-based)."""
        if self.kind == "fixed":
            return np.broadcast_to(self.landmarks[0], (self.n_envs, 3))
        if self.kind == "all-at-once":
            return spread(self.landmarks, self.n_envs)
        if it < self.bootstrap_iters:
            return spread(np.asarray(BOOTSTRAP, np.float32), self.n_envs)
        j = (it - self.bootstrap_iters) // self.visit_iters
        return np.broadcast_to(self.order[j % len(self.order)], (self.n_envs, 3))

    def prefs(self, start: int, n: int) -> np.ndarray:
        """(n, n_envs, 3): iterations ``start`` .. ``start + n - 1``."""
        return np.stack([self.iteration_prefs(start + i) for i in range(n)]).astype(np.float32)


def trial_schedule(cfg: AlgoConfig) -> TrialSchedule:
    """The schedule of a trial's config (validated by ``spec.load_spec`` beforehand)."""
    t = cfg.train
    kind = t.get("schedule", "two-phase")
    n = t.get("n_envs", 1024)
    w = cfg.env.get("preference", (1 / 3, 1 / 3, 1 / 3))
    pref = (float(w[0]), float(w[1]), float(w[2]))
    if kind == "fixed":
        one = np.asarray([pref], np.float32)
        return TrialSchedule(kind, n, pref, one, one)
    step = float(t.get("landmarks_step", 0.1))
    grid = simplex_grid(step)
    order = grid[traversal_order(grid, step)] if kind == "two-phase" else grid
    return TrialSchedule(kind, n, pref, grid.astype(np.float32), order.astype(np.float32),
                         bootstrap_iters=t.get("bootstrap_iters", 300) if kind == "two-phase"
                         else 0, visit_iters=t.get("visit_iters", 5))
