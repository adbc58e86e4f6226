"""What a sweep trial's environments train on, iteration by iteration, and what it is evaluated on.

A sweep trains every trial of a batch for the same ``train.iters`` iterations in one compiled
program, so a schedule here is a pure function of the iteration index (no stopping rule: a
trial cannot leave the batch's program early). The four schedules of ``ccjax train``
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
* ``episode``: AUTO's Algorithm 1, one preference per episode drawn by the environment itself
  (``EnvParams.pref_draw``, which the batch sets for such a trial as ``ccjax train`` does), so
  the per-iteration preference array is zeros the environment ignores; evaluated at
  ``PerEpisode.eval_prefs`` (w_thr = 0.1 .. 0.9 for two objectives) and scored by their mean, as
  ``ccjax train`` keeps ``best/``.

A preference has one weight per objective of the trial's reward (K: 3 for MOCC's, 2 for AUTO's;
``ccjax.envs.rewards.OBJECTIVES``), so every array below is (..., K). The landmark schedules are
MOCC's, on the 3-objective simplex (``spec`` refuses them for another K).

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
from ccjax.train.schedules import PerEpisode, spread

#: schedules a sweep runs
SCHEDULES = ("fixed", "all-at-once", "two-phase", "episode")
#: the schedules that train on MOCC's landmarks (3 objectives)
LANDMARK_SCHEDULES = ("all-at-once", "two-phase")


def n_objectives(cfg: AlgoConfig) -> int:
    """K, the weights of a preference: the objectives of the config's reward (without building
    the environment, whose ``spec.n_objectives`` is the same number)."""
    from ccjax.envs.rewards import objective_names

    return len(objective_names(cfg.env.get("reward", "mocc")))


def default_preference(k: int) -> tuple[float, ...]:
    """The preference of a config that sets none: equal weights (MOCC's 1/3 each)."""
    return tuple(1.0 / k for _ in range(k))


@dataclass(frozen=True)
class TrialSchedule:
    """One trial's training preferences per iteration and its evaluation preferences."""

    kind: str
    n_envs: int
    preference: tuple[float, ...]  # the fixed schedule's, K weights (unused by the others)
    landmarks: np.ndarray  # (ω, K) float32; (1, K) the preference for "fixed"; (P, K) the
    #                        evaluation preferences for "episode"
    order: np.ndarray  # (ω, K) the landmarks in Algorithm 1's order (two-phase)
    bootstrap_iters: int = 0
    visit_iters: int = 1

    @property
    def n_objectives(self) -> int:
        return int(self.landmarks.shape[1])

    @property
    def uses_landmarks(self) -> bool:
        return self.kind in LANDMARK_SCHEDULES

    @property
    def fixed(self) -> bool:
        """One preference for the whole run: the policy is exported with it."""
        return self.kind == "fixed"

    @property
    def draw_per_episode(self) -> bool:
        """Every episode draws its own preference (``EnvParams.pref_draw``)."""
        return self.kind == "episode"

    @property
    def stationary(self) -> bool:
        """True when every iteration trains on the same preferences (they can be cached)."""
        return self.kind != "two-phase"

    @property
    def eval_prefs(self) -> np.ndarray:
        """(P, K): the preferences the trial is evaluated at (P = ω, 1 for "fixed", the
        episode schedule's evaluation preferences for "episode")."""
        return self.landmarks

    def iteration_prefs(self, it: int) -> np.ndarray:
        """(n_envs, K): every environment's preference in iteration ``it`` (0-based)."""
        k = self.n_objectives
        if self.kind == "fixed":
            return np.broadcast_to(self.landmarks[0], (self.n_envs, k))
        if self.kind == "episode":
            # unused: each episode draws its own; the compiled chunk takes this shape
            return np.zeros((self.n_envs, k), np.float32)
        if self.kind == "all-at-once":
            return spread(self.landmarks, self.n_envs)
        if it < self.bootstrap_iters:
            return spread(np.asarray(BOOTSTRAP, np.float32), self.n_envs)
        j = (it - self.bootstrap_iters) // self.visit_iters
        return np.broadcast_to(self.order[j % len(self.order)], (self.n_envs, k))

    def prefs(self, start: int, n: int) -> np.ndarray:
        """(n, n_envs, K): iterations ``start`` .. ``start + n - 1``."""
        return np.stack([self.iteration_prefs(start + i) for i in range(n)]).astype(np.float32)


def trial_schedule(cfg: AlgoConfig) -> TrialSchedule:
    """The schedule of a trial's config (validated by ``spec.load_spec`` beforehand)."""
    t = cfg.train
    kind = t.get("schedule", "two-phase")
    n = t.get("n_envs", 1024)
    k = n_objectives(cfg)
    pref = tuple(float(x) for x in cfg.env.get("preference", default_preference(k)))
    if kind == "fixed":
        one = np.asarray([pref], np.float32)
        return TrialSchedule(kind, n, pref, one, one)
    if kind == "episode":
        # the evaluation preferences `ccjax train` uses for this schedule (one definition)
        ev = np.asarray(PerEpisode(n, k, t["iters"]).eval_prefs, np.float32)
        return TrialSchedule(kind, n, pref, ev, ev)
    step = float(t.get("landmarks_step", 0.1))
    grid = simplex_grid(step)
    order = grid[traversal_order(grid, step)] if kind == "two-phase" else grid
    return TrialSchedule(kind, n, pref, grid.astype(np.float32), order.astype(np.float32),
                         bootstrap_iters=t.get("bootstrap_iters", 300) if kind == "two-phase"
                         else 0, visit_iters=t.get("visit_iters", 5))
