"""``run_sweep``: a spec's trials, group by group and batch by batch, into a sweep directory.

For each static group (``ccjax.sweep.spec``) the pending trials are cut into batches
(``Group.plan_batch``); a batch is initialised, trained for ``train.iters`` iterations in compiled
chunks of ``train.chunk`` (``ccjax.sweep.batch``), evaluated, and recorded
(``ccjax.sweep.ledger``). Between chunks the loop checks every trial for non-finite losses or
parameters: a trial that diverged is recorded ``failed`` at once, with the iteration and what
went non-finite, and its slot is masked (overwritten by a healthy trial's, results discarded)
while the rest of the batch goes on. The losses are the agent's own metrics (``losses``: those
named ``*loss*``, and PPO's entropy and KL), the parameters everything it learns
(``ccjax.sweep.batch.learnable``), so any registered agent kind is checked the same way. A
batch whose last slots would be empty is padded with copies of its last trial, so every batch of
a group reuses one compiled program.

A trial that trains to the end with finite numbers may still have collapsed (a learning rate of
1e4 drives PPO-MOCC's tanh units into saturation: the same action at every MI, the rate pinned
at a bound). ``degenerate`` judges each finished trial's final evaluation; a collapsed one is
recorded ``done`` with ``degenerate`` = 1 and the why in its ``reason``, and, as a diverged
trial, it is left out of the preference evaluation and so of the Pareto figures and the best
trial they pick (``ccjax.sweep.prefeval``).

A spec with a ``[prefeval]`` table then evaluates every finished trial on its preference grid
(``ccjax.sweep.prefeval``; trials already evaluated are skipped).

With ``sweep.eval_every`` > 0 the trials are also evaluated every that many iterations, and each
trial's best evaluated state is what its checkpoint and exported policy hold (as
``ccjax train``'s ``policy/`` does); otherwise the final state is. What is kept of the best
state is ``ccjax.sweep.batch.kept``'s part: the agent state without its replay buffer (copying
an off-policy agent's buffer at every better evaluation would cost more than the training), and
``load_trial`` gives it back with an empty buffer. A trial on a landmark schedule
(``ccjax.sweep.schedule``) is evaluated at every landmark and scored by the mean landmark reward,
as ``ccjax train`` keeps ``best/``; its metrics keep the per-landmark results of its best
evaluation (``landmarks``). Every trial records ``iter_99``, the first evaluated iteration within
1% of its best evaluation, and ``train_99_s``, its batch's training wall time up to there.

Backends. ``run_batch`` trains one batch and writes nothing: it hands every trial's end to a
sink as a ``ccjax.sweep.record.TrialOutcome``, after the ``BatchCheckpoint`` that holds its
finished trials' states. The local backend (the default) runs the batches
here one after another and records each outcome as it comes; ``backend="ray"``
(``ccjax.sweep.ray_backend``) runs the same ``run_batch`` on Ray workers, one batch per worker,
and records what they send back. Either way the driver alone writes the store, through
``ccjax.sweep.record.record``, and marks a batch's trials ``running`` before it starts.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ccjax.dirlock import DirLock
from ccjax.errors import ConfigError
from ccjax.sweep.batch import Group, kept, with_kept
from ccjax.sweep.ledger import Ledger
from ccjax.sweep.record import (
    EVAL_FIELDS,
    BatchCheckpoint,
    TrialOutcome,
    batch_checkpoint,
    make_outcome,
    policy_files,
    reconcile,
    record,
    sweep_files,
)
from ccjax.sweep.spec import SweepSpec, Trial, load_spec
from ccjax.train.store import CheckpointDamaged, Checkpoints, check_out_dir, write_json

#: metrics checked for divergence beside every ``*loss*`` one: they go non-finite with the
#: policy (PPO's, as the sweep checked them before agents were a registry)
_ALSO_CHECKED = ("entropy", "approx_kl")
_STAT_FIELDS = ("reward", "utilization", "latency_ratio", "loss_rate", "episode_return")
_EVAL_FIELDS = EVAL_FIELDS
BACKENDS = ("local", "ray")

Callback = Callable[[str, list[str]], None]
Sink = Callable[[TrialOutcome | BatchCheckpoint], None]


def default_out(spec: SweepSpec) -> Path:
    return Path("runs") / "sweeps" / spec.name


def run_sweep(spec: SweepSpec | str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
              *, batch: int | None = None, resume: bool = False, progress: bool = False,
              log: Callable[[str], None] | None = None,
              callback: Callback | None = None, backend: str = "local",
              ray_address: str | None = None, ray_workers: int | None = None,
              ray_cpus: float = 1.0) -> dict[str, Any]:
    """Run (or, with ``resume``, continue) a sweep into ``out`` (default
    ``runs/sweeps/<name>``). ``batch`` caps the trials per compiled batch (default: the spec's
    ``sweep.batch``, else chosen from device memory). ``callback(event, trial_ids)`` is called
    with ``"start"`` after a batch's trials are marked running and ``"end"`` after they are
    recorded. ``backend="ray"`` trains the batches on a Ray cluster (``ray_address``, else a
    local instance; at most ``ray_workers`` workers of one GPU each, or of ``ray_cpus`` CPUs
    where the cluster has no GPU; ``ccjax.sweep.ray_backend``). Returns a summary (counts by
    status, wall time, the batches run)."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    if batch is not None and (not isinstance(batch, int) or batch < 1):
        raise ConfigError(f"batch={batch!r} is invalid: an integer >= 1 (or omit it for the "
                          "automatic size)")
    check_backend(backend, ray_address, ray_workers, ray_cpus)
    if backend == "ray":
        from ccjax.sweep import ray_backend
    # an empty path, a file or a file on the way: refused now, not by the lock after compiling
    out = check_out_dir(out) if out is not None else default_out(spec)
    say = log or (lambda s: None)
    # before the lock makes the folder; a ledger deleted beside its trials' files is rebuilt
    # from their outcome files (``_open``)
    if resume and not (out / "ledger.sqlite").is_file() and not sweep_files(out):
        raise ConfigError(f"out={str(out)!r} is invalid for --resume: no ledger.sqlite there")
    if resume and spec.prefeval is not None:  # a changed [prefeval]: now, not after training
        from ccjax.sweep.prefeval import check_prefeval

        check_prefeval(out, spec.prefeval)
    # one process per sweep directory: a second one would take this one's running trials for
    # interrupted ones and train them again (``ccjax.dirlock``)
    with DirLock(out, "sweep"):
        ledger = _open(spec, out, resume, say)
        t_start = time.perf_counter()
        bar = _Bar(len(spec.trials), progress)
        try:
            requeued = ledger.requeue_running()
            if requeued:
                say(f"resuming: {len(requeued)} interrupted trial(s) will run again")
            status = ledger.status()
            bar.set_done(sum(1 for s in status.values() if s in ("done", "failed")))
            groups = spec.groups()
            pending = {gid: [t for t in trials if status.get(t.id) == "pending"]
                       for gid, trials in groups.items()}
            pending = {gid: p for gid, p in pending.items() if p}
            requested = batch or spec.batch or None
            if backend == "ray":
                batches, planned, where = ray_backend.run(
                    spec, pending, requested, ledger, out, bar, say, callback,
                    address=ray_address, max_workers=ray_workers, cpus=ray_cpus)
            else:
                batches, planned = _run_local(spec, pending, requested, ledger, out, bar, say,
                                              callback)
                where = {"backend": jax.default_backend(), "machine": platform.platform()}
        finally:
            bar.close()
            counts = ledger.counts()
            degenerate = ledger.degenerate_count()
            ledger.close()
        summary = {"out": str(out), "name": spec.name, "trials": len(spec.trials), **counts,
                   "degenerate": degenerate,
                   "wall_s": round(time.perf_counter() - t_start, 3), "batches": batches,
                   "groups": planned, "executor": backend, **where}
        if spec.prefeval is not None and counts["done"]:  # the spec's [prefeval], resumable
            from ccjax.sweep.prefeval import run_prefeval

            summary["prefeval"] = run_prefeval(out, spec.prefeval, log=say, progress=progress)
        return summary


def check_backend(backend: str, address: str | None, workers: int | None, cpus: float) -> None:
    """One-line ``ConfigError`` for a backend or Ray option that cannot work, before anything
    runs (Ray's absence included)."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is invalid: one of {', '.join(BACKENDS)}")
    if backend != "ray":
        for name, v, default in (("ray_address", address, None), ("ray_workers", workers, None),
                                 ("ray_cpus", cpus, 1.0)):
            if v != default:
                raise ConfigError(f"{name}={v!r} is invalid without backend='ray' (the local "
                                  "backend runs here)")
        return
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ConfigError(f"ray_address={address!r} is invalid: a Ray address such as "
                          "'auto', 'HOST:6379' or 'ray://HOST:10001' (omit it for a local "
                          "instance)")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ConfigError(f"ray_workers={workers!r} is invalid: an integer >= 1 (omit it for "
                          "as many as the cluster holds)")
    if (isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not math.isfinite(cpus)
            or cpus <= 0):
        raise ConfigError(f"ray_cpus={cpus!r} is invalid: CPUs per worker, a number > 0")
    # Ray is imported (and its absence reported) before the sweep directory is touched
    from ccjax.sweep.ray_backend import require_ray

    require_ray()


def cut_batches(gid: str, pending: list[Trial], size: int) -> list[tuple[str, list[Trial]]]:
    """A group's pending trials as (label, trials) batches of ``size`` (the last may be
    shorter: ``run_batch`` pads it), in expansion order."""
    n = -(-len(pending) // size)
    return [(f"{gid}/{bi + 1}-of-{n}", pending[bi * size:(bi + 1) * size]) for bi in range(n)]


def begin_batch(ledger: Ledger, trials: list[Trial], label: str,
                callback: Callback | None) -> list[str]:
    """Mark a batch's trials ``running`` (one transaction) before it trains."""
    ids = [t.id for t in trials]
    ledger.start(ids, label, len(ids))
    if callback is not None:
        callback("start", ids)
    return ids


def plan_line(gid: str, gi: int, n_groups: int, n_pending: int, size: int,
              how: dict[str, Any]) -> str:
    n_batches = -(-n_pending // size)
    return (f"group {gid} ({gi + 1}/{n_groups}): {n_pending} trial(s) in {n_batches} "
            f"batch(es) of {size} ({_how(how)})")


def _run_local(spec: SweepSpec, pending: dict[str, list[Trial]], requested: int | None,
               ledger: Ledger, out: Path, bar: _Bar, say: Callable[[str], None],
               callback: Callback | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The local backend: each group's batches here, one after another, each outcome
    recorded as it comes."""
    batches: list[dict[str, Any]] = []
    planned: list[dict[str, Any]] = []
    n_groups = len(spec.groups())
    gidx = {gid: i for i, gid in enumerate(spec.groups())}

    def sink(o: TrialOutcome | BatchCheckpoint) -> None:
        record(ledger, out, o)
        if isinstance(o, TrialOutcome):
            bar.trial_done()

    for gid, trials in pending.items():
        group = Group(trials[0].cfg, spec.pool_seed)
        size, how = group.plan_batch(len(trials), requested)
        say(plan_line(gid, gidx[gid], n_groups, len(trials), size, how))
        for label, part in cut_batches(gid, trials, size):
            ids = begin_batch(ledger, part, label, callback)
            batches.append(run_batch(group, part, size, label, spec.eval_every, sink, bar, say))
            if callback is not None:
                callback("end", ids)
        planned.append({"group": gid, "trials": len(trials), "batch": size, "plan": how,
                        "compile_s": round(group.compile_s, 3)})
    return batches, planned


def _how(info: dict[str, Any]) -> str:
    if info.get("rule") == "requested":
        return "requested"
    need = info.get("need_bytes")
    if need is None:
        return "no memory analysis on this backend: the whole group"
    return (f"{info['tried']} trials need {need / 2**20:,.0f} MiB, "
            f"{info['free_bytes'] / 2**20:,.0f} MiB free ({info['free_source']})")


def _open(spec: SweepSpec, out: Path, resume: bool,
          say: Callable[[str], None] | None = None) -> Ledger:
    exists = (out / "ledger.sqlite").is_file()  # (a --resume without one: run_sweep refused it)
    out.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(out)
    # a ledger without trials was cut off while being set up (killed before its trials were
    # written): nothing ran, so it is started afresh, with or without --resume; unless trials'
    # files say otherwise (the ledger lost its rows): those are for --resume to restore
    started = exists and bool(ledger.ids())
    files = [] if started else sweep_files(out)
    if files and not resume:
        ledger.close()
        raise ConfigError(f"out={str(out)!r} is invalid: it holds a sweep's files ({files[0]}) "
                          "but its ledger has no trials (lost?); pass --resume to restore the "
                          "ledger from outcomes/<id>.json and continue, or choose a new "
                          "directory")
    if started and not resume:
        ledger.close()
        raise ConfigError(f"out={str(out)!r} is invalid: it holds a sweep already; pass "
                          "--resume to continue it or choose a new directory")
    if started:
        old = set(ledger.ids())
        new = {t.id for t in spec.trials}
        if old != new:
            ledger.close()
            raise ConfigError(f"--resume is invalid: the spec's trials differ from the sweep in "
                              f"{str(out)!r} ({len(new - old)} new, {len(old - new)} missing); "
                              "resume with the same spec, presets and --set values")
    else:
        ledger.set_meta("spec", spec.to_json())
        ledger.set_meta("created", time.time())
        write_json(out / "sweep.json", spec.to_json())
    ledger.add(spec.trials)
    try:
        restored = reconcile(ledger, out)
    except ConfigError:
        ledger.close()
        raise
    if restored and say is not None:
        say(f"resuming: {len(restored)} finished trial(s) the ledger had lost restored from "
            "their outcomes/<id>.json")
    return ledger


def losses(metric_names: tuple[str, ...]) -> tuple[str, ...]:
    """The training metrics a non-finite value of which fails a trial, in the agent's order
    (the order a reason names the first): the losses, and entropy and KL where reported. Not
    every metric: some are counts or schedules (the envelope's ``buffer``, ``lam``)."""
    return tuple(n for n in metric_names if "loss" in n or n in _ALSO_CHECKED)


#: ``degenerate``'s thresholds (its doc says why)
COLLAPSED_UTILIZATION = 0.1
COLLAPSE_FRACTION = 0.25
CONSTANT_ACTION = 1e-6


def degenerate(action_kind: str, action_range: float, utilization: float,
               peak_utilization: float, throughput_weight: float | None) -> str | None:
    """Why a trial that trained to the end with finite numbers has collapsed, or None. Judged
    on its final deterministic evaluation, either of:

    * the same action at every MI of every evaluation link and preference (``action_range``
      at most ``CONSTANT_ACTION``; box actions only): the policy no longer reads what it
      observes (saturated tanh units give bit-identical outputs), so it is an open-loop rate
      schedule, not a congestion controller, whatever its score. Not for discrete actions: a
      healthy policy may choose one multiplier (AUTO's x1) for a whole short evaluation;
    * utilization under ``COLLAPSED_UTILIZATION`` (10 % of the link) and under
      ``COLLAPSE_FRACTION`` of the highest the trial reached (a training iteration's mean, an
      evaluation), where the reward values throughput (``throughput_weight`` > 0, or no
      preference). This cannot flag a delay-preferring policy: below capacity the queue is
      empty, so the latency and loss objectives are already at their best (MOCC's base/RTT is
      1, AUTO's delay term 0), and any weight on throughput makes 10 % utilization strictly
      worse than sending near capacity; a trial that had reached 4x that utilization and fell
      below it lost its policy. A pure-delay preference (throughput weight 0) is never judged
      so.
    """
    if action_kind == "box" and math.isfinite(action_range) and action_range <= CONSTANT_ACTION:
        return (f"degenerate: the same action at every MI of the final evaluation (range "
                f"{action_range:.1g}): a saturated policy")
    values_throughput = throughput_weight is None or throughput_weight > 0
    if (values_throughput and math.isfinite(utilization) and math.isfinite(peak_utilization)
            and utilization < COLLAPSED_UTILIZATION
            and utilization < COLLAPSE_FRACTION * peak_utilization):
        return (f"degenerate: utilization {utilization:.3f} at the final evaluation, under "
                f"{COLLAPSED_UTILIZATION:g} and a quarter of the {peak_utilization:.3f} the "
                "trial reached")
    return None


def _judge(group: Group, slots: list[Trial], i: int, final: dict[str, np.ndarray],
           curve: list[dict[str, Any]], evals: list[dict[str, Any]]) -> str | None:
    """``degenerate`` for trial slot ``i`` of a batch after its final evaluation."""
    spec = group.setup.env.spec
    seen = [r["utilization"] for r in curve] + [e["utilization"] for e in evals]
    seen = [u for u in seen if u is not None and math.isfinite(u)]
    w: float | None = None
    if spec.pref_dim > 0:
        if "thr" not in spec.objective_names:
            w = 0.0  # no throughput objective to judge utilization by
        else:
            k = spec.objective_names.index("thr")
            w = float(np.max(group.eval_prefs([slots[i]])[0, :, k]))
    return degenerate(spec.action.kind, float(final["action_range"][i]),
                      float(final["utilization"][i]), max(seen, default=math.nan), w)


def _finite_or_none(x: Any) -> float | None:
    v = float(x)
    return v if math.isfinite(v) else None


def _nonfinite(m: dict[str, np.ndarray], st: dict[str, np.ndarray], i: int, it0: int,
               checked: tuple[str, ...]) -> str | None:
    """Why trial slot ``i`` diverged in this chunk (the first iteration and quantity among the
    ``checked`` metrics and the training reward), or None."""
    n = st["reward"].shape[0]
    for k in range(n):
        for name in checked:
            if not np.isfinite(m[name][k, i]):
                return f"diverged: non-finite {name} at iteration {it0 + k + 1}"
        if not np.isfinite(st["reward"][k, i]):
            return f"diverged: non-finite training reward at iteration {it0 + k + 1}"
    return None


def run_batch(group: Group, trials: list[Trial], size: int, label: str, eval_every: int,
              sink: Sink, bar: _Bar | None = None, say: Callable[[str], None] | None = None
              ) -> dict[str, Any]:
    """Train one batch of a group's trials (``size`` slots; fewer trials are padded) for the
    group's iterations and hand each trial's end to ``sink`` as a ``TrialOutcome``: a trial
    that diverges as soon as it is detected, the others after the final evaluation, with
    their policies, preceded by their states' ``BatchCheckpoint``. Writes nothing itself, so
    it runs where the store is not (a Ray worker). Returns the batch's record (sizes, counts,
    timings)."""
    bar = bar or _Bar(0, False)
    say = say or (lambda s: None)
    n_real = len(trials)
    slots = trials + [trials[-1]] * (size - n_real)  # padding: copies, results discarded
    compile0 = group.compile_s
    wall0 = time.time()
    states, runner = group.init(slots)
    agent = group.setup.agent
    names = tuple(agent.metric_names)
    checked = losses(names)
    iters, chunk, every = group.iters, group.chunk, eval_every
    alive = np.zeros(size, bool)
    alive[:n_real] = True
    reasons: dict[int, str] = {}
    curves: list[list[dict[str, Any]]] = [[] for _ in range(n_real)]
    evals: list[list[dict[str, Any]]] = [[] for _ in range(n_real)]
    best = np.full(size, -np.inf)
    best_it = np.zeros(size, int)
    # each trial's best evaluated state, less its replay buffer (batch.kept): a copy made at the
    # first evaluation (the chunk donates `states`), updated slot by slot after
    best_states: Any = None
    best_prefs: list[list[dict[str, Any]]] = [[] for _ in range(n_real)]
    # training wall time at each evaluation: a timing, kept out of the metrics (which must be
    # the same numbers wherever the batch runs, e.g. on a Ray worker)
    train_s_at: dict[int, float] = {}
    train_s = eval_s = 0.0
    it = 0
    bar.start_batch(label, iters)
    # a trial evaluated at several preferences keeps its best evaluation's results per
    # preference: its landmarks (the omega-one grid too), or the episode schedule's points
    per_pref = group.n_eval_prefs > 1 or group.schedule.uses_landmarks
    per_pref_key = "landmarks" if group.schedule.uses_landmarks else "prefs"

    def evaluate(states: Any, it: int) -> dict[str, np.ndarray]:
        nonlocal eval_s, best_states
        group.eval_program(size)  # compiled outside the timer (compile_s has it)
        t0 = time.perf_counter()
        per = group.evaluate(states, slots)  # (T, P): each trial at each evaluation preference
        eval_s += time.perf_counter() - t0
        # the action's spread is no result of the trial's (``degenerate`` reads it): the widest
        # over its evaluation preferences
        spread = per.pop("action_range").max(1)
        # the score: the reward at the trial's preference, or the mean over its evaluation
        # preferences (landmarks, the episode schedule's points)
        res = {k: v.mean(1) for k, v in per.items()}
        better = alive & np.isfinite(res["reward"]) & (res["reward"] > best)
        now = kept(states)
        if best_states is None:
            best_states = group.select(better, now, now)  # new buffers, not aliases
        elif better.any():
            best_states = group.select(better, now, best_states)
        best[better] = res["reward"][better]
        best_it[better] = it
        prefs = group.eval_prefs(slots)
        train_s_at[it] = train_s
        for i in range(n_real):
            if alive[i]:
                evals[i].append({"iteration": it, **{k: float(res[k][i]) for k in res}})
                if better[i] and per_pref:
                    best_prefs[i] = [{"w": [float(x) for x in prefs[i, j]],
                                      **{k: float(per[k][i, j]) for k in per}}
                                     for j in range(prefs.shape[1])]
        return {**res, "action_range": spread}

    def fail(i: int, why: str) -> None:
        alive[i] = False
        reasons[i] = why
        sink(make_outcome(trials[i].id, "failed", curves[i], evals[i], why, it, None,
                          _timings(group, compile0, train_s, eval_s)))
        say(f"trial {trials[i].id} {json.dumps(trials[i].point)}: {why}")

    while it < iters and alive[:n_real].any():
        n = min(chunk, iters - it)
        if every:
            n = min(n, every - it % every)
        fn = group.chunk_program(size, n)
        w = group.prefs(slots, it, n)
        t0 = time.perf_counter()
        states, runner, (m, st) = fn(states, runner, group.train_params, w)
        jax.block_until_ready(states)
        dt = time.perf_counter() - t0
        train_s += dt
        mh = {k: np.asarray(getattr(m, k)) for k in names}  # (n, T)
        sh = {k: np.asarray(getattr(st, k)) for k in _STAT_FIELDS + ("valid_steps",)}
        ok_params = group.finite(states)
        for i in range(n_real):
            if not alive[i]:
                continue
            for k in range(n):
                row = {"iteration": it + k + 1, "wall_s": train_s - dt * (n - 1 - k) / n,
                       "valid_frac": float(sh["valid_steps"][k, i])
                       / (group.n_envs * group.n_steps)}
                row.update({f: float(sh[f][k, i]) for f in _STAT_FIELDS})
                row.update({f: float(mh[f][k, i]) for f in names})
                curves[i].append(row)
        it += n
        newly = []
        for i in range(n_real):
            if not alive[i]:
                continue
            why = _nonfinite(mh, sh, i, it - n, checked)
            if why is None and not ok_params[i]:
                why = f"diverged: non-finite parameters after iteration {it}"
            if why is not None:
                fail(i, why)
                newly.append(i)
        healthy = np.flatnonzero(alive)
        if newly and healthy.size:
            # mask the diverged slots: a copy of a healthy trial keeps every number finite
            src = int(healthy[0])
            for i in newly:
                states = group.copy_slot(states, i, src)
                runner = group.copy_slot(runner, i, src)
                if best_states is not None:
                    best_states = group.copy_slot(best_states, i, src)
        if every and it % every == 0 and it < iters and healthy.size:
            res = evaluate(states, it)
            for i in range(n_real):
                if alive[i] and not np.isfinite(res["reward"][i]):
                    fail(i, f"diverged: non-finite evaluation reward at iteration {it}")
        bar.advance(n, _info(curves, alive, n_real))
    final = evaluate(states, it) if alive[:n_real].any() else None
    timings = _timings(group, compile0, train_s, eval_s)
    done: list[tuple[int, dict[str, Any]]] = []
    for i in range(n_real):
        if not alive[i]:
            continue
        assert final is not None
        if not np.isfinite(final["reward"][i]):
            fail(i, f"diverged: non-finite evaluation reward at iteration {it}")
            continue
        metrics = {k: float(final[k][i]) for k in _EVAL_FIELDS}
        tail = [r["reward"] for r in curves[i][-10:]]
        i99 = _reached(evals[i], float(best[i]))
        why = _judge(group, slots, i, final, curves[i], evals[i])
        metrics.update(iterations=it, train_reward=float(np.mean(tail)),
                       best_reward=float(best[i]), best_iteration=int(best_it[i]), iter_99=i99,
                       action_range=_finite_or_none(final["action_range"][i]),
                       degenerate=why)
        if why is not None:
            say(f"trial {trials[i].id} {json.dumps(trials[i].point)}: {why}")
        if best_prefs[i]:
            metrics[per_pref_key] = best_prefs[i]
        done.append((i, metrics))
    if done:
        # the finished trials' chosen states, gathered once and fetched to the host once: one
        # checkpoint for the batch (ccjax.sweep.record), then each trial's policy from it
        idx = np.asarray([i for i, _ in done])
        chosen = jax.device_get(jax.tree.map(lambda x: x[idx], best_states))
        ck = batch_checkpoint([trials[i] for i, _ in done], chosen, [m for _, m in done])
        sink(ck)
        actors = agent.actor_params(chosen)  # stacked: structural, as every agent's is
        for k, (i, metrics) in enumerate(done):
            metrics["checkpoint"] = {"batch": ck.key, "slot": k}
            actor = jax.tree.map(lambda x, k=k: x[k], actors)
            files = policy_files(group, trials[i], actor)
            i99 = metrics["iter_99"]
            mine = {**timings, "train_99_s": None if i99 is None else train_s_at[i99]}
            sink(make_outcome(trials[i].id, "done", curves[i], evals[i], metrics["degenerate"],
                              it, metrics, mine, files))
    n_done = len(done)
    rec = {"batch": label, "trials": n_real, "size": size, "done": n_done,
           "failed": len(reasons), "compile_s": round(timings["compile_s"], 3),
           "train_s": round(train_s, 3), "eval_s": round(eval_s, 3),
           "init_s": round(group.last_init_s, 3), "wall_s": round(time.time() - wall0, 3)}
    say(f"batch {label}: {n_real} trial(s) ({size} slots), {n_done} done, {len(reasons)} "
        f"failed; compile {rec['compile_s']:.1f} s, train {rec['train_s']:.1f} s, "
        f"eval {rec['eval_s']:.1f} s")
    return rec


def _reached(evals: list[dict[str, Any]], best: float, frac: float = 0.99) -> int | None:
    """The iteration of the first evaluation within ``1 - frac`` of ``best`` (relative to its
    magnitude, so a negative best works too). In a sweep this stands for ``ccjax train``'s
    stopping time (MOCC trains until convergence)."""
    for e in evals:
        r = e.get("reward")
        if r is not None and np.isfinite(r) and r >= best - (1 - frac) * abs(best):
            return int(e["iteration"])
    return None


def _timings(group: Group, compile0: float, train_s: float, eval_s: float) -> dict[str, float]:
    return {"compile_s": group.compile_s - compile0, "train_s": train_s, "eval_s": eval_s}


def _info(curves: list[list[dict[str, Any]]], alive: np.ndarray, n_real: int) -> str:
    last = [curves[i][-1]["reward"] for i in range(n_real) if alive[i] and curves[i]]
    if not last:
        return ""
    return f"train reward mean {np.mean(last):.3f} max {np.max(last):.3f}"


def load_trial(sweep_dir: str | os.PathLike[str], trial_id: str) -> tuple[Any, Any, dict]:
    """(AlgoConfig, agent state, progress JSON) of a finished trial, from its checkpoint. The
    state is what the sweep kept of the trial's best (``ccjax.sweep.batch.kept``): whole for
    PPO; an off-policy agent's with the empty replay buffer of a fresh ``init`` (the buffer is
    never checkpointed)."""
    from ccjax.algos import AlgoConfig
    from ccjax.train.setup import make_agent

    d = Path(sweep_dir)
    ledger = Ledger.existing(d)
    row = next((r for r in ledger.rows() if r["id"] == trial_id), None)
    ledger.close()
    if row is None:
        raise ConfigError(f"trial={trial_id!r} is invalid: not in {str(d)!r}")
    if row["status"] != "done":
        raise ConfigError(f"trial={trial_id!r} is invalid: its status is {row['status']}")
    c = json.loads(row["config"])
    cfg = AlgoConfig.from_dict({"name": c["algo"], **{t: c[t] for t in
                                                      ("agent", "hyper", "env", "train")}})
    from ccjax.train.setup import build

    setup = build(cfg, 0)
    agent, hyper = make_agent(cfg)
    full = agent.init(jax.random.PRNGKey(0), setup.env.spec, hyper)
    target = kept(full)
    ref = json.loads(row["metrics"] or "{}").get("checkpoint")
    if ref is None:  # a sweep recorded before batch checkpoints: one checkpoint per trial
        ck = Checkpoints(d / "trials" / trial_id / "checkpoint", keep=1)
        try:
            state, prog = ck.restore(target)
        except CheckpointDamaged as e:
            raise ConfigError(f"trial={trial_id!r} is invalid: its checkpoint cannot be read "
                              f"({e})") from None
        finally:
            ck.close()
        return cfg, with_kept(full, state), prog
    where = d / "batches" / ref["batch"] / "checkpoint"
    if not where.is_dir():
        raise ConfigError(f"trial={trial_id!r} is invalid: its batch checkpoint {str(where)!r} "
                          "is missing")
    ck = Checkpoints(where, keep=1)
    try:
        slots = ck.progress()["slots"]
        stacked = jax.tree.map(lambda x: np.zeros((len(slots),) + x.shape, x.dtype), target)
        state, _ = ck.restore(stacked)
    except Exception as e:  # CheckpointDamaged, or orbax failing on its progress JSON
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"trial={trial_id!r} is invalid: its batch checkpoint "
                          f"{str(where)!r} cannot be read ({why[:200]})") from None
    finally:
        ck.close()
    k = int(ref["slot"])
    if slots[k]["trial"] != trial_id:
        raise ConfigError(f"trial={trial_id!r} is invalid: slot {k} of batch checkpoint "
                          f"{ref['batch']} holds trial {slots[k]['trial']!r}")
    return cfg, with_kept(full, jax.tree.map(lambda x: jnp.asarray(x[k]), state)), slots[k]


class _Bar:
    """rich progress: trials finished (of the sweep) and iterations of the running batch."""

    def __init__(self, total: int, enabled: bool):
        self.p = None
        if not enabled:
            return
        from ccjax.progress import make_progress

        self.p = make_progress()
        self.p.start()
        self.trials = self.p.add_task("trials", total=total, info="")
        self.iters = self.p.add_task("batch", total=1, info="", visible=False)

    def set_done(self, n: int) -> None:
        if self.p is not None:
            self.p.update(self.trials, completed=n)

    def start_batch(self, label: str, iters: int) -> None:
        if self.p is not None:
            self.p.reset(self.iters, total=iters, description=f"batch {label}", info="",
                         visible=True)

    def advance(self, n: int, info: str) -> None:
        if self.p is not None:
            self.p.update(self.iters, advance=n, info=info)

    def trial_done(self) -> None:
        if self.p is not None:
            self.p.update(self.trials, advance=1)

    def close(self) -> None:
        if self.p is not None:
            self.p.stop()
