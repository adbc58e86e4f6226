"""Which preference every environment trains on, iteration by iteration (MOCC §4.2-4.3).

A schedule is a sequence of *segments*: a segment runs ``n_iters`` PPO iterations with a
preference per environment per iteration (``prefs(i)`` -> (n_envs, K)), and may end with a
deterministic evaluation. The trainer asks for segment ``k`` given the evaluations so far, so a
schedule that stops on convergence (two-phase, all-at-once) and one that resumes after a kill
are the same code: segment ``k`` is a pure function of ``k``, the seed and the history.

* ``TwoPhase``: MOCC's offline training. Phase 1 bootstraps on the three preferences of §4.2
  (the environments split evenly between them: how the paper mixes them is not said, and one
  batch holding all three is the vectorised reading); phase 2 visits the landmarks in
  Algorithm 1's order, ``visit_iters`` iterations each with every environment on that landmark,
  cycling; after each cycle all landmarks are evaluated and training stops when the mean
  landmark reward has not risen by ``converge_tol`` (relative) over its best for ``patience``
  cycles.
* ``AllAtOnce``: every landmark in every batch (environment i on landmark i mod K); evaluated
  after the same number of iterations as a traversal cycle, same stopping rule, and given the
  bootstrap's iterations as extra cycles so both variants have the same budget.
* ``Fixed``: one preference (Aurora, or a single-objective baseline on a preference), optionally
  with MOCC's requirement replay (Eq. 6): half the environments on the current preference, half
  on one old preference drawn uniformly per iteration from the stored pool, so the PPO loss is
  1/2 L(w_i) + 1/2 L(w_j).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ccjax.agents.landmarks import BOOTSTRAP, simplex_grid, traversal_order


@dataclass(frozen=True)
class Segment:
    phase: str  # "bootstrap" | "traverse" | "all" | "fixed" | "adapt"
    cycle: int  # traversal cycle (1-based), 0 in the bootstrap / fixed phases
    label: str  # the landmark visited, or what the batch holds
    n_iters: int
    prefs: Callable[[int], np.ndarray]  # iteration within the segment -> (n_envs, K)
    evaluate: bool  # evaluate (and judge convergence) when the segment ends
    n_current: int = 0  # > 0: only the first n_current envs hold the current preference (replay)


def spread(prefs: np.ndarray, n_envs: int) -> np.ndarray:
    """Environment i gets preference i mod K (every preference gets n/K environments)."""
    prefs = np.asarray(prefs, np.float32)
    return prefs[np.arange(n_envs) % len(prefs)]


def converged(evals: list[float], min_evals: int, tol: float, patience: int = 2) -> bool:
    """True when at least ``min_evals`` evaluations exist and the best of the last ``patience``
    is not ``tol`` (relative) above the best before them: the mean landmark reward stopped
    improving for ``patience`` cycles (a single noisy cycle does not end training)."""
    if len(evals) < max(min_evals, patience + 1):
        return False
    before, recent = max(evals[:-patience]), max(evals[-patience:])
    return (recent - before) < tol * max(abs(before), 1e-9)


@dataclass(frozen=True)
class _Landmarks:
    """What the two landmark schedules share: the grid, the budget and the stopping rule."""

    n_envs: int
    step: float = 0.1
    bootstrap_iters: int = 300
    visit_iters: int = 5
    max_cycles: int = 8
    min_cycles: int = 2
    converge_tol: float = 0.01
    patience: int = 2
    landmarks: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "landmarks", np.asarray(simplex_grid(self.step), np.float32))

    @property
    def eval_prefs(self) -> np.ndarray:
        return self.landmarks


@dataclass(frozen=True)
class TwoPhase(_Landmarks):
    order: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        order = traversal_order(self.landmarks.astype(np.float64), self.step)
        object.__setattr__(self, "order", self.landmarks[order])

    @property
    def max_iters(self) -> int:
        return self.bootstrap_iters + self.max_cycles * len(self.order) * self.visit_iters

    def segment(self, k: int, evals: list[float]) -> Segment | None:
        if k == 0 and self.bootstrap_iters > 0:
            boot = spread(np.asarray(BOOTSTRAP, np.float32), self.n_envs)
            return Segment("bootstrap", 0, "bootstrap", self.bootstrap_iters,
                           lambda i: boot, evaluate=True)
        j = k - (1 if self.bootstrap_iters > 0 else 0)
        K = len(self.order)
        cycle, pos = divmod(j, K)
        if cycle >= self.max_cycles:
            return None
        boot = 1 if self.bootstrap_iters > 0 else 0  # the bootstrap's evaluation comes first
        if pos == 0 and cycle > 0 and converged(evals, self.min_cycles + boot,
                                                self.converge_tol, self.patience):
            return None
        w = self.order[pos]
        batch = np.broadcast_to(w, (self.n_envs, len(w))).astype(np.float32)
        return Segment("traverse", cycle + 1, fmt(w), self.visit_iters, lambda i: batch,
                       evaluate=pos == K - 1)


@dataclass(frozen=True)
class AllAtOnce(_Landmarks):
    @property
    def cycle_iters(self) -> int:
        return len(self.landmarks) * self.visit_iters

    @property
    def n_cycles(self) -> int:
        # the bootstrap's iterations become extra cycles: both variants get the same budget
        return self.max_cycles + math.ceil(self.bootstrap_iters / self.cycle_iters)

    @property
    def max_iters(self) -> int:
        return self.n_cycles * self.cycle_iters

    def segment(self, k: int, evals: list[float]) -> Segment | None:
        if k >= self.n_cycles or (k > 0 and converged(evals, self.min_cycles,
                                                      self.converge_tol, self.patience)):
            return None
        batch = spread(self.landmarks, self.n_envs)
        return Segment("all", k + 1, f"all {len(self.landmarks)}", self.cycle_iters,
                       lambda i: batch, evaluate=True)


@dataclass(frozen=True)
class Fixed:
    """One preference for ``iters`` iterations, evaluated every ``eval_every``; with a
    non-empty ``replay`` pool, requirement replay (MOCC Eq. 6)."""

    n_envs: int
    preference: tuple[float, ...]
    iters: int
    eval_every: int = 8
    replay: np.ndarray | None = None  # (M, K) stored old preferences
    probe: np.ndarray | None = None  # (P, K) old preferences evaluated alongside
    seed: int = 0
    phase: str = "fixed"
    eval_at_start: bool = True  # evaluate the starting model too (adaptation's reference)

    @property
    def eval_prefs(self) -> np.ndarray:
        cur = np.asarray([self.preference], np.float32)
        if self.probe is None or len(self.probe) == 0:
            return cur
        return np.concatenate([cur, np.asarray(self.probe, np.float32)], 0)

    @property
    def max_iters(self) -> int:
        return self.iters

    def segment(self, k: int, evals: list[float]) -> Segment | None:
        block = evaluation_block(k, self.eval_every, self.iters)
        if block is None:
            return None
        start, n = block
        cur = np.broadcast_to(np.asarray(self.preference, np.float32),
                              (self.n_envs, len(self.preference)))
        if self.replay is None or len(self.replay) == 0:
            return Segment(self.phase, 0, fmt(self.preference), n, lambda i: cur, True)
        pool = np.asarray(self.replay, np.float32)
        half = self.n_envs // 2

        def prefs(i: int) -> np.ndarray:
            # one old preference per iteration, drawn uniformly (MOCC 4.3); a pure function of
            # (seed, iteration) so a resumed run draws the same ones
            rng = np.random.default_rng([self.seed, start + i])
            out = cur.copy()
            out[half:] = pool[rng.integers(len(pool))]
            return out

        return Segment(self.phase, 0, fmt(self.preference) + " +replay", n, prefs, True,
                       n_current=half)


@dataclass(frozen=True)
class PerEpisode:
    """Every episode draws its own preference uniformly from the simplex and keeps it (AUTO
    §3.3, Algorithm 1: "one omega per episode"): ``iters`` iterations, evaluated every
    ``eval_every`` at ``eval_prefs`` (for two objectives w_t = 0.1, 0.3, 0.5, 0.7, 0.9, the
    points AUTO's fronts are drawn through), the best evaluation (mean over them) exported."""

    n_envs: int
    n_objectives: int
    iters: int
    eval_every: int = 8
    phase: str = "episode"
    draw_per_episode: bool = True  # the trainer sets ``EnvParams.pref_draw``
    eval_at_start: bool = False

    @property
    def eval_prefs(self) -> np.ndarray:
        if self.n_objectives == 2:
            wt = np.asarray([0.1, 0.3, 0.5, 0.7, 0.9], np.float32)
            return np.stack([wt, 1.0 - wt], -1)
        return np.asarray(simplex_grid(0.25), np.float32)

    @property
    def max_iters(self) -> int:
        return self.iters

    def segment(self, k: int, evals: list[float]) -> Segment | None:
        block = evaluation_block(k, self.eval_every, self.iters)
        if block is None:
            return None
        _, n = block
        # the per-environment preference is unused (each episode draws its own); its shape
        # is what the compiled chunk takes
        zeros = np.zeros((self.n_envs, self.n_objectives), np.float32)
        return Segment(self.phase, 0, "w per episode", n, lambda i: zeros, True)


def evaluation_block(k: int, eval_every: int, iters: int) -> tuple[int, int] | None:
    """(first iteration, length) of segment ``k`` of a run of ``iters`` iterations evaluated
    every ``eval_every``, or None past its end (``Fixed``, ``PerEpisode``)."""
    start = k * eval_every
    if start >= iters:
        return None
    return start, min(eval_every, iters - start)


def fmt(w) -> str:
    return "<" + ",".join(f"{float(x):.2f}" for x in w) + ">"
