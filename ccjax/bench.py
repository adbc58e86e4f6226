"""``ccjax bench sim``: simulator throughput, compile time measured separately.

Two workloads: the default scenario of ``ccjax simulate`` (constant-rate flows) and a 4-flow
CUBIC dumbbell; for the latter also the ratio of ccjax's simulated flow-seconds per wall-clock
second (packet model, batch 1024) to ns-3's on the same dumbbell, both measured in the same run.

An *env-step* is one monitor interval (MI) of one link, the unit an RL environment steps in; a
*flow-tick* is one tick of one flow. Both are counted from the run itself (completed MIs of each
link's first flow, and ticks x flows), never estimated.
"""

from __future__ import annotations

import platform

import jax
import numpy as np

from ccjax.api import link_from_flags, run_controller, simulate
from ccjax.cc.registry import get_controller

#: the default scenario of ``ccjax simulate`` (README): 2 flows over 12 Mbps, 40 ms RTT
DEFAULT_LINK = dict(flows=2, bw_mbps=12.0, rtt_ms=(40.0,), start_s=(0.0, 5.0))
DEFAULT_RATE_MBPS = 8.0
#: the controller workload: 4 CUBIC flows over the default 12 Mbps / 40 ms link, 1-BDP buffer
CUBIC_LINK = dict(flows=4, bw_mbps=12.0, rtt_ms=(40.0,), start_s=(0.0,))


def _machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor(),
            "jax": jax.__version__, "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()]}


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
    best = None
    for _ in range(repeats):
        res = fn()
        if best is None or res.wall_s < best.wall_s:
            best = res
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
    out = {
        "results": results,
        "machine": _machine(),
        "scenario": {**DEFAULT_LINK, "start_s": [0.0, 0.0], "rate_mbps": DEFAULT_RATE_MBPS,
                     "cc": "const", "duration_s": duration_s, "tick_s": tick_s},
        "cubic_scenario": {**CUBIC_LINK, "buffer": "1 BDP", "cc": "cubic",
                           "duration_s": duration_s, "tick_s": tick_s},
    }
    if ns3 and "cubic" in workloads:
        out["ns3"] = _ns3_ratio(results, ns3_duration_s)
    return out


def _ns3_ratio(results: list[dict], duration_s: float) -> dict:
    """ns-3 on the CUBIC dumbbell, and ccjax's packet model at batch 1024 against it."""
    from ccjax import ns3

    ns3.build()
    spec = link_from_flags(**CUBIC_LINK)
    r = ns3.run_dumbbell(flows=spec.n_flows, bw_mbps=CUBIC_LINK["bw_mbps"],
                         rtt_ms=list(spec.rtt_ms), buffer_pkts=int(spec.buffer_pkts), loss=0.0,
                         cc="cubic", duration_s=duration_s)
    wall = float(r["sim"]["wall_s"])
    ns3_rate = spec.n_flows * duration_s / wall
    ours = [x for x in results if x["workload"] == "cubic" and x["model"] == "packet"]
    ref = next((x for x in ours if x["batch"] == 1024), max(ours, key=lambda x: x["batch"],
                                                             default=None))
    out = {"simulator": r["sim"].get("simulator", "ns-3"), "sim_seconds": duration_s,
           "wall_s": wall, "flow_seconds_per_s": ns3_rate}
    if ref is not None:
        out |= {"ccjax_batch": ref["batch"], "ccjax_flow_seconds_per_s": ref["flow_seconds_per_s"],
                "ratio": ref["flow_seconds_per_s"] / ns3_rate}
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
    from ccjax.train.schedules import spread
    from ccjax.train.setup import build

    cfg = load_algo(algo, {**(overrides or {}), "train.n_envs": n_envs})
    s = build(cfg, seed)
    key = jax.random.PRNGKey(seed)
    state = s.agent.init(key, s.env.obs_dim, s.env.action_dim, s.hyper)
    runner = init_runner(s.venv, s.agent, state, s.params, jax.random.fold_in(key, 1))
    prefs = jnp.asarray(np.broadcast_to(spread(simplex_grid(0.1), n_envs), (iters, n_envs, 3)))
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
