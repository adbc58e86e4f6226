"""Trials as one compiled program: a batch of T trials of one static group trains together.

How trials map onto the program. A trial is (seed, hyperparameters, preference) over a static
group's environment, agent kind and network shapes. Its learner state (whatever the agent of the
group's ``agent.kind`` keeps: ``PPOState``, ``EnvelopeState`` with its replay buffer, ...; each
holds its own dynamic hyperparameters) and its runner (environment states, last observation,
action in effect, PRNG key) are stacked along a leading trial axis of size T. The batch reaches
the agent only through the registry's API (``ccjax.agents.registry``: ``init``, ``act``,
``update``, ``plan_run``, ``actor_params``, ``metric_names``). One iteration then is

* the rollout: one ``VecEnv`` of T x N environments (``TrialVecEnv``) steps every trial's
  environments at once, and the agent acts with ``vmap(agent.act)`` over the trial axis (each
  trial's policy on its own N observations, with its own key);
* the update: ``vmap(agent.update)`` over the trial axis, each trial's trajectory, key and
  hyperparameters (learning rate, clip, entropy schedule, ...) its own.

Why the environments are flattened rather than ``vmap``ped over trials: ``VecEnv.step`` runs its
MI loop as a ``while_loop`` and its episode resets under a ``cond``; under an outer ``vmap`` both
become per-tick ``select``s over every trial's delay lines (measured on the 2-core CPU while two
training jobs ran: 4 trials x 16 environments x 3 iterations took 1.3 s vmapped against 0.04 s
for one trial alone). Flattened, the MI loop and the reset stay one loop and one ``cond`` for the
whole batch, as for a single run with T x N environments.

Equivalence with a trial run alone: nothing in the program reduces across trials except the MI
loop's "any MI still running" and the reset's "any episode ended", and both only decide how
long to loop or whether to compute a reset; an environment whose MI has ended is not ticked
(``core.tick``'s ``live`` mask) and a reset replaces only the environments whose episode ended.
Every trial's keys are split exactly as ``drivers.rollout`` / ``drivers._chunk`` split a single
run's (``TrialVecEnv.reset`` draws trial t's fresh episodes from trial t's key, split N ways as
``VecEnv.reset`` does), and a trial is initialised as ``ccjax.train.Trainer`` initialises a run
of the same seed. So a trial in a batch computes what it computes alone, up to floating-point
reassociation in the batched matrix products (``tests/test_sweep.py`` checks this). The same
independence is why a trial that diverges (NaN) cannot poison the others: its NaNs stay in its
own slice. Once detected, its slice is overwritten with a copy of a healthy trial's (results
discarded), so a NaN sending rate never again reaches a simulator tick and lengthens the batch's
MI loop (bounded only by ``max_mi_ticks`` without a tick budget).

Which preference each environment trains on is the trial's schedule (``ccjax.sweep.schedule``):
its own ``env.preference`` (fixed), its landmarks (all-at-once: environment i on landmark
i mod ω; two-phase: the bootstrap vectors, then one landmark at a time), or a draw per episode
(the group's training parameters then carry ``pref_draw``, as ``ccjax train`` sets them). The
program takes them as an (iterations, T, N, K) array, K = ``env.spec.n_objectives``, so trials
of a group may train on different preferences.

What a sweep keeps of a trial (``kept``): its agent state without replay buffers. The best
evaluated state of every trial is held beside the training states and overwritten, slot by slot,
whenever an evaluation improves on it; a replay buffer (the envelope agent's holds up to 200k
transitions) would be copied at every such evaluation and written into the batch checkpoint,
yet it is training data, not the model. Everything else is kept: the networks (exported), and
the optimiser state, target network, iteration counter and hyperparameters, small beside the
networks' multiples, from which ``load_trial`` returns a state that training can continue
from (PPO's whole state, as before; an envelope state with an empty buffer). Divergence is
judged on the same part (``learnable``), less the hyperparameters: a trial's given values, not
something training makes non-finite.

Evaluation is ``ccjax.train.setup.Evaluator``'s protocol for every trial at once: the
deterministic policy on ``train.eval_links`` links drawn from the scenario with the pool seed
plus ``EVAL_SEED_OFFSET``, the same links and initial rates for every trial (so trials compare
like with like), each trial at each of its evaluation preferences (its own preference, or every
landmark), ``train.eval_steps`` batch steps.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ccjax.agents.base import Agent, Trajectory
from ccjax.agents.drivers import (
    Runner,
    init_runner,
    rollout_stats,
    scan_rollout,
    set_preference,
    split_step_key,
)
from ccjax.agents.replay import ReplayState
from ccjax.algos import AlgoConfig
from ccjax.devices import FALLBACK_FREE_BYTES, free_memory_bytes  # noqa: F401 - re-exported
from ccjax.envs.build import make_single_flow
from ccjax.envs.single_flow import EnvParams
from ccjax.envs.vec import VecEnv, param_axes
from ccjax.sweep.schedule import TrialSchedule, trial_schedule
from ccjax.sweep.spec import Trial
from ccjax.train.setup import EVAL_SEED_OFFSET, build, env_kwargs, make_agent

#: fraction of the free device memory a batch may plan to use (the rest: fragmentation, the
#: host's own arrays, the estimate's error)
MEMORY_FRACTION = 0.5
#: the largest batch the automatic rule tries first
MAX_AUTO_BATCH = 256
# (free_memory_bytes and its FALLBACK_FREE_BYTES live in ccjax.devices, where the simulator's
# memory check reads them too; imported here, where the batch rule and its tests use them)


@dataclass(frozen=True)
class TrialVecEnv(VecEnv):
    """``n`` = T x N environments, T trials of N each, trial-major. Stepping is ``VecEnv``'s;
    only the reset differs: its key is (T, 2), one per trial, and trial t's N environments draw
    from ``split(key[t], N)``, which is what a ``VecEnv`` of N alone draws from ``key[t]``."""

    trials: int = 1

    def reset(self, key: jnp.ndarray, params: EnvParams) -> tuple[jnp.ndarray, Any]:
        per = self.n // self.trials
        keys = jax.vmap(lambda k: jax.random.split(k, per))(key)
        keys = keys.reshape((self.n,) + keys.shape[2:])
        return jax.vmap(self.env.reset, in_axes=(0, param_axes(params)))(keys, params)


def _flat(T: int, N: int):
    return lambda x: x.reshape((T * N,) + x.shape[2:])


def _unflat(T: int, N: int):
    return lambda x: x.reshape((T, N) + x.shape[1:])


def _flat_runner(r: Runner, T: int, N: int) -> Runner:
    """Trial-major runner (every leaf (T, N, ...)) -> the environments flattened, keys (T, 2)."""
    f = _flat(T, N)
    return r.replace(env_state=jax.tree.map(f, r.env_state), obs=f(r.obs), critic=f(r.critic),
                     action=f(r.action), aux=jax.tree.map(f, r.aux))


def _unflat_runner(r: Runner, T: int, N: int) -> Runner:
    u = _unflat(T, N)
    return r.replace(env_state=jax.tree.map(u, r.env_state), obs=u(r.obs), critic=u(r.critic),
                     action=u(r.action), aux=jax.tree.map(u, r.aux))


def rollout_trials(venv: TrialVecEnv, agent: Agent, states: Any, runner: Runner,
                   params: EnvParams, n_steps: int, explore: bool = True
                   ) -> tuple[Runner, Trajectory]:
    """``drivers.rollout`` for T trials: ``runner`` has the environments flattened (T x N) and
    one key per trial; each trial acts with its own state and key. The trajectory's leaves are
    (n_steps, T x N, ...)."""
    T = venv.trials
    N = venv.n // T
    flat, unflat = _flat(T, N), _unflat(T, N)
    act = jax.vmap(lambda s, o, k: agent.act(s, o, k, explore))

    def choose(r: Runner, k_act: jnp.ndarray) -> tuple[Any, Any]:
        new_a, new_aux = act(states, unflat(r.obs), k_act)
        return flat(new_a), jax.tree.map(flat, new_aux)

    # each trial's key splits as a run's alone does
    return scan_rollout(venv, runner, params, n_steps, choose, jax.vmap(split_step_key))


def _per_trial(tr: Trajectory, T: int, N: int) -> Trajectory:
    """(n_steps, T x N, ...) -> (T, n_steps, N, ...): each trial's own trajectory."""
    split = lambda x: jnp.moveaxis(x.reshape((x.shape[0], T, N) + x.shape[2:]), 1, 0)  # noqa
    return jax.tree.map(split, tr)


def trial_chunk(venv: TrialVecEnv, agent: Agent, n_steps: int, n_iters: int):
    """``drivers._chunk`` for T trials: ``chunk(states, runner, params, prefs)`` with
    ``states`` and ``runner`` trial-major and ``prefs`` (n_iters, T, N, K); returns the new
    states and runner and (metrics, stats) with leaves (n_iters, T, ...)."""
    T = venv.trials
    N = venv.n // T
    flat = _flat(T, N)

    def iteration(carry, pref):
        states, r, params = carry
        pref = flat(pref)
        r = set_preference(venv, r, params, pref)  # the observation carries it (MOCC 3.1)
        r, tr = rollout_trials(venv, agent, states, r, params.replace(pref=pref), n_steps)
        ks = jax.vmap(jax.random.split)(r.key)  # as _chunk: key, k_upd = split(runner.key)
        r = r.replace(key=ks[:, 0])
        trials = _per_trial(tr, T, N)
        states, metrics = jax.vmap(agent.update)(states, trials, ks[:, 1])
        return (states, r, params), (metrics, jax.vmap(rollout_stats)(trials))

    def chunk(states, runner: Runner, params: EnvParams, prefs: jnp.ndarray):
        r = _flat_runner(runner, T, N)
        (states, r, _), out = jax.lax.scan(iteration, (states, r, params), prefs,
                                           length=n_iters)
        return states, _unflat_runner(r, T, N), out

    return chunk


def _action_range(tr: Trajectory, T: int, P: int) -> jnp.ndarray:
    """(T, P): max - min of the action in effect over the MIs that ended (every step and link
    of a trial at a preference; each component of a vector action), NaN where none ended. 0 is
    a policy whose output does not depend on what it observes (``ccjax.sweep.runner.
    degenerate``)."""
    a = tr.action.reshape(tr.action.shape[:2] + (-1,)).astype(jnp.float32)  # (S, N, D)
    v = tr.valid[..., None]
    hi = jnp.where(v, a, -jnp.inf).max(0).reshape(T, P, -1).max(-1)
    lo = jnp.where(v, a, jnp.inf).min(0).reshape(T, P, -1).min(-1)
    return jnp.where(hi >= lo, hi - lo, jnp.nan)


def _all_finite(tree: Any) -> jnp.ndarray:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.ones((), bool)


def _fields(state: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(state)) if dataclasses.is_dataclass(
        state) else ()


def _replay_fields(state: Any) -> tuple[str, ...]:
    """The fields of an agent state that hold a replay buffer (``ccjax.agents.replay``)."""
    return tuple(n for n in _fields(state) if isinstance(getattr(state, n), ReplayState))


def kept(state: Any) -> Any:
    """What a sweep keeps of an agent state as a trial's best and checkpoints (module doc): the
    state with its replay buffers left out (None). Structural only, so it works on a stacked
    (T, ...) state and under ``jit`` / ``vmap``; a PPO state is returned whole."""
    names = _replay_fields(state)
    return state.replace(**dict.fromkeys(names)) if names else state


def with_kept(template: Any, part: Any) -> Any:
    """A full agent state from ``kept``'s ``part``, its replay buffers ``template``'s (a fresh
    ``agent.init``: empty)."""
    names = _replay_fields(template)
    return part.replace(**{n: getattr(template, n) for n in names}) if names else part


def learnable(state: Any) -> Any:
    """The part of an agent state whose finiteness says whether its trial diverged: ``kept``'s,
    less its hyperparameters (``hyper``: the trial's given values)."""
    part = kept(state)
    return part.replace(hyper=None) if "hyper" in _fields(part) else part


def memory_bytes(compiled: Any) -> int | None:
    """Bytes a compiled program needs (arguments + outputs + temporaries - aliased), from XLA's
    ``memory_analysis()``; None where the backend does not report it."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not implemented on every backend
        return None
    if m is None:
        return None
    total = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
             - m.alias_size_in_bytes)
    return int(total) if total > 0 else None


def balanced(n: int, cap: int) -> int:
    """The batch size that splits n trials into the fewest batches of at most ``cap`` with the
    least padding: 65 trials at cap 64 become two batches of 33, not 64 + 1."""
    k = math.ceil(n / max(cap, 1))
    return math.ceil(n / k)


class Group:
    """What one static group needs, built once: the environment and link pool (drawn with the
    sweep's pool seed), the learner, the evaluation links, and the compiled programs by
    (batch size, iterations)."""

    def __init__(self, cfg: AlgoConfig, pool_seed: int):
        self.cfg = cfg
        self.setup = build(cfg, pool_seed)
        t = cfg.train
        self.n_envs = self.setup.venv.n
        self.n_steps = t.get("n_steps", 32)
        self.iters = t["iters"]
        self.chunk = t.get("chunk", 10)
        self.tick_budget = self.setup.venv.tick_budget
        self.eval_links = t.get("eval_links", 8)
        self.eval_steps = t.get("eval_steps", 200)
        self.eval_env, self.eval_params = make_single_flow(
            cfg.env.get("scenario", "mocc-train"), pool=self.eval_links,
            seed=pool_seed + EVAL_SEED_OFFSET, **env_kwargs(cfg))
        self.eval_key = jax.random.PRNGKey(pool_seed + EVAL_SEED_OFFSET)
        # the landmarks are static (train.landmarks_step), so one count for the whole group
        self.schedule = trial_schedule(cfg)
        self.n_eval_prefs = len(self.schedule.eval_prefs)
        self.n_objectives = self.setup.env.spec.n_objectives  # K, a preference's weights
        # the schedule is static too: a per-episode one has every environment draw its own
        # preference at each reset, set as ``ccjax train`` sets it
        self.train_params = self.setup.params
        if self.schedule.draw_per_episode:
            self.train_params = self.train_params.replace(pref_draw=jnp.ones((), bool))
        self.compile_s = 0.0
        self._programs: dict[tuple, Any] = {}
        self._schedules: dict[str, TrialSchedule] = {}
        self._prefs: dict[tuple, jnp.ndarray] = {}
        self._finite = jax.jit(jax.vmap(lambda s: _all_finite(learnable(s))))
        self._copy = jax.jit(lambda tree, i, j: jax.tree.map(lambda x: x.at[i].set(x[j]), tree))
        self._select = jax.jit(lambda m, a, b: jax.tree.map(
            lambda x, y: jnp.where(m.reshape(m.shape + (1,) * (x.ndim - 1)), x, y), a, b))

    # -- one trial's start, as ccjax.train.Trainer starts a run of the same seed --------------
    def _init_one(self, key: jnp.ndarray, hyper: Any, pref: jnp.ndarray):
        s = self.setup
        state = s.agent.init(jax.random.fold_in(key, 0), s.env.spec, hyper)
        # the run's own schedules over its train.iters (PPO: train.anneal), as `ccjax train`
        # plans a new run; train is static, so one plan for the group
        state = s.agent.plan_run(state, self.cfg.train, 0, self.iters)
        runner = init_runner(s.venv, s.agent, state, self.train_params.replace(pref=pref),
                             jax.random.fold_in(key, 1))
        return state, runner

    def _shapes(self) -> tuple[Any, Runner]:
        """One trial's (state, runner) as shapes."""
        s = self.setup
        return jax.eval_shape(self._init_one, jax.random.PRNGKey(0), s.hyper,
                              jnp.zeros(self.n_objectives, jnp.float32))

    def init(self, trials: list[Trial]) -> tuple[Any, Runner]:
        """Stacked (states, runner) for these trials, trial-major."""
        # each trial's hyperparameters as its agent kind builds them from its config (the
        # trials of a group differ only in dynamic values, so the static agent is the group's)
        args = [(jax.random.PRNGKey(t.seed), make_agent(t.cfg)[1],
                 jnp.asarray(t.preference, jnp.float32)) for t in trials]
        # one vmapped call for the batch (per-trial calls cost ~12 ms each on the 2-core CPU)
        stacked_args = jax.tree.map(lambda *x: jnp.stack(x), *args)
        init = self._compile(("init", len(trials)), jax.vmap(self._init_one), *stacked_args)
        t0 = time.perf_counter()
        stacked = init(*stacked_args)
        jax.block_until_ready(stacked)
        self.last_init_s = time.perf_counter() - t0
        return stacked

    def trial_schedule(self, trial: Trial) -> TrialSchedule:
        if trial.id not in self._schedules:
            self._schedules[trial.id] = trial_schedule(trial.cfg)
        return self._schedules[trial.id]

    def prefs(self, trials: list[Trial], start: int, n_iters: int) -> jnp.ndarray:
        """(n_iters, T, N, K): every environment's preference in iterations ``start`` ..
        ``start + n_iters - 1``, each trial's from its own schedule."""
        ids = tuple(t.id for t in trials)

        def make() -> jnp.ndarray:
            return jnp.asarray(np.stack([self.trial_schedule(t).prefs(start, n_iters)
                                         for t in trials], 1))

        if not self.schedule.stationary:
            return make()
        # a stationary schedule's array is the same for every chunk of a batch: built once
        if any(k[0] != ids for k in self._prefs):
            self._prefs.clear()  # a new batch
        if (ids, n_iters) not in self._prefs:
            self._prefs[(ids, n_iters)] = make()
        return self._prefs[(ids, n_iters)]

    def eval_prefs(self, trials: list[Trial]) -> np.ndarray:
        """(T, P, K): the preferences each trial is evaluated at."""
        return np.stack([self.trial_schedule(t).eval_prefs for t in trials]).astype(np.float32)

    # -- compiled programs -------------------------------------------------------------------
    def _compile(self, key: tuple, fn, *args, donate: tuple[int, ...] = ()) -> Any:
        if key not in self._programs:
            t0 = time.perf_counter()
            self._programs[key] = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
            self.compile_s += time.perf_counter() - t0
        return self._programs[key]

    def chunk_program(self, T: int, n_iters: int) -> Any:
        """The compiled chunk for T trials and ``n_iters`` iterations (AOT, from shapes). The
        states and runner passed in are donated (their buffers become the outputs: measured
        for ppo-mocc-hparams, 64 trials x 128 environments, XLA's analysis gave 3.0 GB of
        arguments, 3.0 GB of outputs and 3.1 GB of temporaries without donation), so a caller
        must not use them after the call."""
        if ("chunk", T, n_iters) in self._programs:  # before any tracing: called every chunk
            return self._programs[("chunk", T, n_iters)]
        s = self.setup
        venv = TrialVecEnv(s.env, T * self.n_envs, self.tick_budget, trials=T)
        fn = trial_chunk(venv, s.agent, self.n_steps, n_iters)
        states, runner = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((T,) + x.shape, x.dtype), self._shapes())
        prefs = jax.ShapeDtypeStruct((n_iters, T, self.n_envs, self.n_objectives), jnp.float32)
        return self._compile(("chunk", T, n_iters), fn, states, runner, self.train_params, prefs,
                             donate=(0, 1))

    def eval_program(self, T: int) -> Any:
        """Every trial at each of its P evaluation preferences on the same L links: P x L
        environments per trial, preference-major (as ``Evaluator``); results (T, P), each the
        mean over the links of the mean over the valid MIs."""
        if ("eval", T) in self._programs:  # before any tracing: called every evaluation
            return self._programs[("eval", T)]
        s = self.setup
        L, P, K = self.eval_links, self.n_eval_prefs, self.n_objectives
        venv = TrialVecEnv(self.eval_env, T * P * L, self.tick_budget, trials=T)
        single = VecEnv(self.eval_env, P * L, self.tick_budget)
        agent = s.agent
        links = jnp.tile(jnp.arange(L, dtype=jnp.int32), P)
        base = self.eval_params.replace(link_index=links)

        def start(state, prefs, key):
            p = base.replace(pref=jnp.repeat(prefs, L, 0))
            return init_runner(single, agent, state, p, key)

        def run(states, prefs, key):
            # every trial starts from the same key: the same links and initial rates
            runner = jax.vmap(start, in_axes=(0, 0, None))(states, prefs, key)
            p = self.eval_params.replace(pref=jnp.repeat(prefs.reshape(T * P, K), L, 0),
                                         link_index=jnp.tile(links, T))
            _, tr = rollout_trials(venv, agent, states, _flat_runner(runner, T, P * L), p,
                                   self.eval_steps, explore=False)
            w = tr.valid.astype(jnp.float32)
            cnt = jnp.maximum(w.sum(0), 1.0)
            m = lambda x: ((x * w).sum(0) / cnt).reshape(T, P, L).mean(2)  # noqa: E731
            return dict(reward=m(tr.reward), utilization=m(jnp.minimum(tr.info.utilization, 1)),
                        latency_ratio=m(tr.info.latency_ratio), loss_rate=m(tr.info.loss_rate),
                        action_range=_action_range(tr, T, P))

        states = jax.tree.map(lambda x: jax.ShapeDtypeStruct((T,) + x.shape, x.dtype),
                              self._shapes()[0])
        prefs = jax.ShapeDtypeStruct((T, P, K), jnp.float32)
        return self._compile(("eval", T), run, states, prefs, self.eval_key)

    def evaluate(self, states: Any, trials: list[Trial]) -> dict[str, np.ndarray]:
        """(T, P) reward, utilization, latency ratio and loss rate per evaluation preference,
        and ``action_range``: the spread of the deterministic action over every MI of every
        link (``_action_range``)."""
        fn = self.eval_program(len(trials))
        w = jnp.asarray(self.eval_prefs(trials))
        return {k: np.asarray(v) for k, v in fn(states, w, self.eval_key).items()}

    def finite(self, states: Any) -> np.ndarray:
        """(T,) bool: every float the trial learns (``learnable``: networks, optimiser, ...;
        not its replay buffer) is finite."""
        return np.asarray(self._finite(states))

    def copy_slot(self, tree: Any, dst: int, src: int) -> Any:
        return self._copy(tree, jnp.int32(dst), jnp.int32(src))

    def select(self, mask: np.ndarray, a: Any, b: Any) -> Any:
        """Per trial: ``a``'s slice where ``mask``, else ``b``'s (new buffers: ``a`` and ``b``
        may be donated afterwards)."""
        return self._select(jnp.asarray(mask), a, b)

    # -- batch size ----------------------------------------------------------------------------
    def plan_batch(self, n_trials: int, requested: int | None) -> tuple[int, dict[str, Any]]:
        """The batch size for ``n_trials`` pending trials of this group, and how it was chosen.

        ``requested`` (``--batch`` or the spec's ``sweep.batch``) caps it. Otherwise the rule:
        compile the chunk for B0 = min(n_trials, MAX_AUTO_BATCH) trials, read the bytes it needs
        from XLA's memory analysis, and keep B0 if that is at most MEMORY_FRACTION of the free
        device memory; else B = floor(B0 x MEMORY_FRACTION x free / need) (at least 1), taking
        the need as proportional to the trials (the shared link pool is counted per trial too,
        so the estimate errs on the safe side). Without a memory analysis, B0 is kept. The size
        is then balanced so the batches are equal (``balanced``)."""
        n0 = self.iters if self.chunk >= self.iters else self.chunk
        info: dict[str, Any] = {}
        if requested:
            cap = min(requested, n_trials)
            info["rule"] = "requested"
        else:
            b0 = min(n_trials, MAX_AUTO_BATCH)
            need = memory_bytes(self.chunk_program(b0, n0))
            free, source = free_memory_bytes()
            info.update(rule="memory", tried=b0, need_bytes=need, free_bytes=free,
                        free_source=source)
            if need is None or need <= MEMORY_FRACTION * free:
                cap = b0
            else:
                cap = max(1, int(b0 * MEMORY_FRACTION * free // need))
        b = balanced(n_trials, cap)
        info["batch"] = b
        return b, info
