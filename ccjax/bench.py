"""``ccjax bench sim``: simulator throughput, compile time measured separately.

An *env-step* is one monitor interval (MI) of one link, the unit an RL environment steps in; a
*flow-tick* is one tick of one flow. Both are counted from the run itself (completed MIs of each
link's first flow, and ticks x flows), never estimated.
"""

from __future__ import annotations

import platform

import jax
import numpy as np

from ccjax.api import link_from_flags, simulate

#: the default scenario of ``ccjax simulate`` (README): 2 flows over 12 Mbps, 40 ms RTT
DEFAULT_LINK = dict(flows=2, bw_mbps=12.0, rtt_ms=(40.0,), start_s=(0.0, 5.0))
DEFAULT_RATE_MBPS = 8.0


def bench_sim(batches=(1, 64, 1024, 8192), models=("fluid", "packet"), duration_s: float = 2.0,
              repeats: int = 2, tick_s: float = 1e-3) -> dict:
    results = []
    spec = link_from_flags(**{**DEFAULT_LINK, "start_s": (0.0, 0.0)})
    for model in models:
        for b in batches:
            best = None
            for _ in range(repeats):
                res = simulate([spec] * b, rate_mbps=DEFAULT_RATE_MBPS, duration_s=duration_s,
                               model=model, series_interval_s=duration_s, tick_s=tick_s)
                if best is None or res.wall_s < best.wall_s:
                    best = res
            mis = int(np.asarray(best.state.mi_count)[:, 0].sum())
            ticks = best.timeline.total_ticks
            results.append({
                "model": model, "batch": b, "flows": spec.n_flows,
                "env_steps_per_s": mis / best.wall_s,
                "flow_ticks_per_s": b * spec.n_flows * ticks / best.wall_s,
                "link_ticks_per_s": b * ticks / best.wall_s,
                "compile_s": best.compile_s, "run_s": best.wall_s,
                "sim_seconds": duration_s, "ticks_per_env_step": b * ticks / max(mis, 1),
            })
    return {
        "results": results,
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "jax": jax.__version__, "backend": jax.default_backend(),
                    "devices": [str(d) for d in jax.devices()]},
        "scenario": {**DEFAULT_LINK, "start_s": [0.0, 0.0], "rate_mbps": DEFAULT_RATE_MBPS,
                     "cc": "const", "duration_s": duration_s, "tick_s": tick_s},
    }
