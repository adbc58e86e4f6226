"""``ccjax bench sim``: simulator throughput, compile time measured separately.

Two workloads: the default scenario of ``ccjax simulate`` (constant-rate flows) and a 4-flow
CUBIC dumbbell; for the latter also the ratio of ccjax's simulated flow-seconds per wall-clock
second (packet model, batch 1024) to ns-3's on the same dumbbell, both measured in the same run.
The ratio compares like with like: ccjax runs the sender ns-3 runs, as the cross-validation
does (``validation``: ns-3's CUBIC arithmetic, ACK-clocked, PRR recovery, lost
retransmissions; ns-3 gets one buffer packet fewer, as its device also holds the packet on the
wire), an extra workload row
``cubic-ns3``; the ratio of ccjax's default CUBIC (paced, RFC 9438) is given beside it.

An *env-step* is one monitor interval (MI) of one link, the unit an RL environment steps in; a
*flow-tick* is one tick of one flow. Both are counted from the run itself (completed MIs of each
link's first flow, and ticks x flows), never estimated.
"""

from __future__ import annotations

import platform
import sys

import jax
import numpy as np

from ccjax.api import link_from_flags, run_controller, simulate
from ccjax.cc.registry import get_controller

#: the default scenario of ``ccjax simulate`` (the guide): 2 flows over 12 Mbps, 40 ms RTT
DEFAULT_LINK = dict(flows=2, bw_mbps=12.0, rtt_ms=(40.0,), start_s=(0.0, 5.0))
DEFAULT_RATE_MBPS = 8.0
#: the controller workload: 4 CUBIC flows over the default 12 Mbps / 40 ms link, 1-BDP buffer
CUBIC_LINK = dict(flows=4, bw_mbps=12.0, rtt_ms=(40.0,), start_s=(0.0,))


def _cpu_model() -> str:
    """The CPU's model name (``platform.processor()`` is empty on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _machine() -> dict:
    import os

    return {"platform": platform.platform(), "processor": _cpu_model(),
            "cpus": os.cpu_count(), "jax": jax.__version__, "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()], "command": sys.argv}


def _row(workload: str, model: str, b: int, flows: int, best, duration_s: float) -> dict:
    mis = int(np.asarray(best.state.mi_count)[:, 0].sum())
    ticks = best.timeline.total_ticks
    return {
        "workload": workload, "model": model, "batch": b, "flows": flows,
        "env_steps_per_s": mis / best.wall_s,
        "flow_ticks_per_s": b * flows * ticks / best.wall_s,
        "link_ticks_per_s": b * ticks / best.wall_s,
        "flow_seconds_per_s": b * flows * duration_s / best.wall_s,
        "compile_s": best.compile_s, "run_s": best.wall_s,
        "sim_seconds": duration_s, "ticks_per_env_step": b * ticks / max(mis, 1),
    }


def _best(fn, repeats: int):
    """The repeat with the shortest run, with the first repeat's compile time: each repeat
    compiles afresh, and the first, cold one is what a user's first call pays."""
    best = cold = None
    for _ in range(repeats):
        res = fn()
        cold = res.compile_s if cold is None else cold
        if best is None or res.wall_s < best.wall_s:
            best = res
    best.compile_s = cold
    return best


def bench_sim(batches=(1, 64, 1024, 8192), models=("fluid", "packet"), duration_s: float = 2.0,
              repeats: int = 2, tick_s: float = 1e-3, workloads=("const", "cubic"),
              ns3: bool = True, ns3_duration_s: float = 30.0) -> dict:
    """Run the benchmark; ``ns3=True`` also times ns-3 on the CUBIC dumbbell (needs ns-3)."""
    results = []
    if "const" in workloads:
        spec = link_from_flags(**{**DEFAULT_LINK, "start_s": (0.0, 0.0)})
        for model in models:
            for b in batches:
                best = _best(lambda spec=spec, b=b, model=model: simulate(
                    [spec] * b, rate_mbps=DEFAULT_RATE_MBPS, duration_s=duration_s, model=model,
                    series_interval_s=duration_s, tick_s=tick_s), repeats)
                results.append(_row("const", model, b, spec.n_flows, best, duration_s))
    if "cubic" in workloads:
        spec = link_from_flags(**CUBIC_LINK)
        cubic = get_controller("cubic")
        for model in models:
            for b in batches:
                best = _best(lambda spec=spec, b=b, model=model: run_controller(
                    [spec] * b, cubic, duration_s=duration_s, model=model,
                    series_interval_s=duration_s, tick_s=tick_s), repeats)
                results.append(_row("cubic", model, b, spec.n_flows, best, duration_s))
    out: dict = {"results": results, "machine": _machine(), "repeats": repeats}
    if "const" in workloads:
        out["scenario"] = {**DEFAULT_LINK, "start_s": [0.0, 0.0], "rate_mbps": DEFAULT_RATE_MBPS,
                           "cc": "const", "duration_s": duration_s, "tick_s": tick_s}
    if "cubic" in workloads:
        out["cubic_scenario"] = {**CUBIC_LINK, "buffer": "1 BDP", "cc": "cubic",
                                 "duration_s": duration_s, "tick_s": tick_s}
    if ns3 and "cubic" in workloads and "packet" in models:
        b = 1024 if 1024 in batches else max(batches)
        best = _best(lambda: _run_ns3_sender(b, duration_s, tick_s), repeats)
        results.append(_row("cubic-ns3", "packet", b, CUBIC_LINK["flows"], best, duration_s))
    if ns3 and "cubic" in workloads:
        out["ns3"] = _ns3_ratio(results, ns3_duration_s)
    return out


def _run_ns3_sender(b: int, duration_s: float, tick_s: float):
    """The CUBIC dumbbell with the sender ns-3 runs (``validation``'s like-for-like settings)."""
    from ccjax.validation import NS3_RECOVERY, NS3_WINDOW_SENDER, ns3_equivalent_params

    spec = link_from_flags(**CUBIC_LINK)
    cubic = get_controller("cubic")
    return run_controller([spec] * b, cubic, ns3_equivalent_params("cubic", cubic, spec.n_flows),
                          duration_s=duration_s, model="packet", series_interval_s=duration_s,
                          tick_s=tick_s, window_sender=NS3_WINDOW_SENDER["cubic"],
                          retx_loss=True, recovery=NS3_RECOVERY)


def _ns3_ratio(results: list[dict], duration_s: float) -> dict:
    """ns-3 on the CUBIC dumbbell, and ccjax's packet model at batch 1024 against it: with the
    same sender (``cubic-ns3``, the ratio) and with ccjax's default CUBIC."""
    from ccjax import ns3
    from ccjax.validation import NS3_HYSTART_DETECT

    ns3.build()
    spec = link_from_flags(**CUBIC_LINK)
    # as in ``validation.run_ns3_seeds``: ns-3's device holds the buffer plus the packet on the
    # wire, so one packet fewer is the same buffer as ccjax's
    buffer = max(1, int(spec.buffer_pkts) - 1)
    r = ns3.run_dumbbell(flows=spec.n_flows, bw_mbps=CUBIC_LINK["bw_mbps"],
                         rtt_ms=list(spec.rtt_ms), buffer_pkts=buffer, loss=0.0,
                         cc="cubic", duration_s=duration_s,
                         hystart_detect=NS3_HYSTART_DETECT)
    wall = float(r["sim"]["wall_s"])
    ns3_rate = spec.n_flows * duration_s / wall
    out = {"simulator": r["sim"].get("simulator", "ns-3"), "sim_seconds": duration_s,
           "wall_s": wall, "run_wall_s": r["sim"].get("run_wall_s"),
           "timed": "inside the program, from main() (process start-up and the build excluded)",
           "buffer_pkts": buffer, "argv": r["sim"].get("argv"),
           "flow_seconds_per_s": ns3_rate}

    def at_batch(workload: str) -> dict | None:
        ours = [x for x in results if x["workload"] == workload and x["model"] == "packet"]
        return next((x for x in ours if x["batch"] == 1024),
                    max(ours, key=lambda x: x["batch"], default=None))

    same, default = at_batch("cubic-ns3"), at_batch("cubic")
    if same is not None:
        out |= {"ccjax_batch": same["batch"],
                "ccjax_flow_seconds_per_s": same["flow_seconds_per_s"],
                "ratio": same["flow_seconds_per_s"] / ns3_rate}
    if default is not None:
        out |= {"default_cubic_batch": default["batch"],
                "default_cubic_flow_seconds_per_s": default["flow_seconds_per_s"],
                "default_cubic_ratio": default["flow_seconds_per_s"] / ns3_rate}
    return out


def bench_train(algo: str = "ppo-mocc", n_envs: int = 1024, iters: int = 20,
                overrides: dict | None = None, seed: int = 0, shard: bool = False) -> dict:
    """PPO training throughput on the preset's environment: one compiled chunk of ``iters``
    iterations (rollout + update) timed after compiling it ahead of time.

    Reported: *batch env-steps/s* (n_envs x n_steps x iters / wall: steps of the vectorised
    environment, some cut short by the tick budget) and *env-steps/s* (completed MIs, i.e.
    transitions the learner trains on, per wall second), the wall time of one iteration and the
    compile time, on whatever backend JAX runs."""
    import time

    import jax.numpy as jnp

    from ccjax.agents.drivers import compile_chunk, env_mesh, init_runner
    from ccjax.agents.landmarks import simplex_grid
    from ccjax.algos import load_algo
    from ccjax.train.schedules import PerEpisode, spread
    from ccjax.train.setup import build

    cfg = load_algo(algo, {**(overrides or {}), "train.n_envs": n_envs})
    s = build(cfg, seed)
    key = jax.random.PRNGKey(seed)
    state = s.agent.init(key, s.env.spec, s.hyper)
    runner = init_runner(s.venv, s.agent, state, s.params, jax.random.fold_in(key, 1))
    # MOCC's 36 landmarks, or for another number of objectives the episode schedule's points
    K = s.env.spec.n_objectives
    grid = simplex_grid(0.1) if K == 3 else PerEpisode(n_envs, K, 1).eval_prefs
    prefs = jnp.asarray(np.broadcast_to(spread(grid, n_envs), (iters, n_envs, K)))
    n_steps = cfg.train.get("n_steps", 32)
    t0 = time.perf_counter()
    fn, place = compile_chunk(s.venv, s.agent, n_steps, iters, state, runner, s.params, prefs,
                              shard=shard)
    compile_s = time.perf_counter() - t0
    # one untimed chunk first: episodes start at their first MI (3 x one-way latency), which
    # is not the steady state
    state, runner, _ = fn(*place((state, runner, s.params, prefs)))
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    state, runner, (_, st) = fn(*place((state, runner, s.params, prefs)))
    jax.block_until_ready(state)
    wall = time.perf_counter() - t0
    valid = float(np.asarray(st.valid_steps).sum())
    return {"algo": cfg.name, "scenario": cfg.env.get("scenario"), "n_envs": n_envs,
            "n_steps": n_steps, "iters": iters, "tick_budget": s.venv.tick_budget,
            "model": cfg.env.get("model"), "compile_s": compile_s, "wall_s": wall,
            "iteration_s": wall / iters, "batch_env_steps_per_s": n_envs * n_steps * iters / wall,
            "env_steps_per_s": valid / wall, "valid_frac": valid / (n_envs * n_steps * iters),
            "devices_used": len(jax.devices()) if shard and env_mesh(n_envs) else 1,
            "machine": _machine()}


def bench_sweep(spec: str = "ppo-mocc-hparams", trials: int = 64, iters: int = 10,
                envs: int | None = None, batch: int | None = None,
                overrides: dict | None = None, keep: str | None = None) -> dict:
    """The first ``trials`` trials of a sweep spec trained twice through the sweep engine
    (``Group`` programs and ``runner.run_batch``, recorded into a sweep directory as the local
    backend does): as vmapped batches (``batch`` trials each; default the spec's, else from
    device memory) and one after another (batch size 1: each trial alone, its program
    compiled once and reused). Every trial is ``iters`` iterations (and ``envs``
    environments, if given) and ends with its evaluation, its batch's checkpoint and its
    policy, as in a sweep.

    Each side first trains its first batch once untimed (results discarded): that compiles
    every program and pays every other one-time cost (small helper programs, first-use
    dispatch), so what is timed after it is the steady state. Per side: *compile_s* (the
    compiled programs, the batch-size probe included), *warmup_s* (the untimed batch's wall,
    compile included), *run_s* (wall of all its batches after the warm-up: training,
    divergence checks, evaluation, checkpoints, ledger), *train_s* (the compiled training
    chunks alone), *env_steps* (completed MIs the learners trained on, from the trials'
    curves) and the rates. The speed-ups are the one-after-another time over the vmapped one.
    The two sweep directories go to ``keep`` (``batched/``, ``sequential/``) if given, else to
    a temporary directory."""
    import dataclasses
    import os
    import tempfile
    import time
    from pathlib import Path

    from ccjax.errors import ConfigError
    from ccjax.sweep import Ledger, load_spec, read_curve
    from ccjax.sweep.batch import Group
    from ccjax.sweep.record import record
    from ccjax.sweep.runner import begin_batch, cut_batches, run_batch
    from ccjax.train.store import check_out_dir, write_json

    for name, v, lo in (("trials", trials, 1), ("iters", iters, 1), ("batch", batch, 1),
                        ("envs", envs, 2)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
            raise ConfigError(f"{name}={v!r} is invalid: an integer >= {lo}")
    if keep is not None:
        # a file, an empty path or a file on the way would fail after the warm-up compiled
        check_out_dir(keep, "keep")
        if Path(keep).is_dir() and any(Path(keep).iterdir()):
            raise ConfigError(f"keep={keep!r} is invalid: not empty; name a new or empty "
                              "folder")
    for key, flag in (("train.iters", "iters"), ("train.n_envs", "envs")):
        if key in (overrides or {}) and (key == "train.iters" or envs is not None):
            raise ConfigError(f"set {key} is invalid for bench sweep: give it as {flag}")
    ov = {**(overrides or {}), "train.iters": iters}
    if envs is not None:
        ov["train.n_envs"] = envs
    full = load_spec(spec, ov)  # every trial validated before anything is traced
    if trials > len(full.trials):
        raise ConfigError(f"trials={trials} is invalid: {full.name} has {len(full.trials)} "
                          "trials")
    sub = dataclasses.replace(full, trials=full.trials[:trials])
    groups = sub.groups()
    if len(groups) != 1:
        raise ConfigError(f"spec={spec!r} is invalid for bench sweep: its first {trials} "
                          f"trials form {len(groups)} static groups; the bench compares "
                          "the batches of one group")
    (gid, todo), = groups.items()
    cfg = todo[0].cfg
    n_envs, n_steps = cfg.train["n_envs"], cfg.train.get("n_steps", 32)
    load_before = os.getloadavg()

    def side(out: Path, requested: int | None) -> dict:
        group = Group(cfg, sub.pool_seed)
        size, _ = group.plan_batch(len(todo), requested)
        batches = cut_batches(gid, todo, size)
        t0 = time.perf_counter()
        run_batch(group, batches[0][1], size, "warm-up", sub.eval_every, lambda o: None)
        warmup_s = time.perf_counter() - t0
        out.mkdir(parents=True)
        ledger = Ledger(out)
        ledger.set_meta("spec", sub.to_json())
        write_json(out / "sweep.json", sub.to_json())
        ledger.add(todo)
        recs = []
        t0 = time.perf_counter()
        for label, part in batches:
            begin_batch(ledger, part, label, None)
            recs.append(run_batch(group, part, size, label, sub.eval_every,
                                  lambda o: record(ledger, out, o)))
        run_s = time.perf_counter() - t0
        counts = ledger.counts()
        ledger.close()
        rows = [r for t in todo for r in read_curve(out / "curves" / f"{t.id}.parquet")]
        steps = sum(r["valid_frac"] for r in rows) * n_envs * n_steps
        train_s = sum(x["train_s"] for x in recs)
        return {"batch": size, "batches": len(batches), "done": counts["done"],
                "failed": counts["failed"], "compile_s": group.compile_s,
                "compile_in_run_s": sum(x["compile_s"] for x in recs), "warmup_s": warmup_s,
                "run_s": run_s, "train_s": train_s, "eval_s": sum(x["eval_s"] for x in recs),
                "init_s": sum(x["init_s"] for x in recs), "env_steps": steps,
                "env_steps_per_s": steps / run_s, "train_env_steps_per_s": steps / train_s}

    with tempfile.TemporaryDirectory(prefix="ccjax-bench-sweep-") as tmp:
        root = Path(keep) if keep is not None else Path(tmp)
        batched = side(root / "batched", batch or sub.batch or None)
        sequential = side(root / "sequential", 1)
    return {"spec": sub.name, "algo": cfg.name, "scenario": cfg.env.get("scenario"),
            "trials": trials, "iters": iters, "n_envs": n_envs, "n_steps": n_steps,
            "batched": batched, "sequential": sequential,
            "speedup": sequential["run_s"] / batched["run_s"],
            "train_speedup": sequential["train_s"] / batched["train_s"],
            "load_before": list(load_before), "load_after": list(os.getloadavg()),
            "machine": _machine()}
