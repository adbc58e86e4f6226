"""Build a ``SingleFlowEnv`` and its ``EnvParams`` from a scenario, validated before tracing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import jax.numpy as jnp
import numpy as np

from ccjax.cc.registry import get_controller
from ccjax.envs.actions import ACTION_MAPS
from ccjax.envs.features import FEATURE_SETS
from ccjax.envs.rewards import OBJECTIVES, get_reward, objective_names
from ccjax.envs.single_flow import EnvParams, SingleFlowEnv
from ccjax.errors import ConfigError, require
from ccjax.sim.link import MODELS, LinkSpec, build_links, plan
from ccjax.sim.resolution import resolve_tick
from ccjax.sim.scenario import Scenario, load_scenario
from ccjax.units import PACKET_BYTES


def check_preference(w: Sequence[float], field: str = "preference",
                     names: Sequence[str] = OBJECTIVES["mocc"]) -> np.ndarray:
    """A preference on the simplex: one weight >= 0 per objective (``names``: MOCC's thr, lat,
    loss by default; AUTO's thr, delay), summing to 1 (within 1e-6)."""
    what = f"{len(names)} numbers " + ",".join(f"w_{n}" for n in names)
    try:
        v = np.asarray([float(x) for x in w], np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{field}={w!r} is invalid: {what}") from None
    require(v.shape == (len(names),), field, list(w), what)
    require(bool(np.all(np.isfinite(v)) and np.all(v >= 0)), field, list(w),
            "weights >= 0 that sum to 1")
    require(abs(v.sum() - 1.0) <= 1e-6, field, list(w), f"weights that sum to 1 (sum {v.sum():g})")
    return v


def make_single_flow(
    scenario: str | Scenario = "mocc-train",
    *,
    pool: int = 256,
    seed: int = 0,
    model: str = "fluid",
    tick_s: float = 1e-3,
    history: int = 10,
    episode_len: int = 400,
    reward: str = "mocc",
    use_pref: bool = True,
    preference: Sequence[float] = (1 / 3, 1 / 3, 1 / 3),
    alpha: float = 0.025,
    init_rate: tuple[float, float] = (0.3, 1.5),
    rate_bounds_pkts: tuple[float, float] = (10.0, 1e5),
    mi_rtts: float = 0.5,
    log_ratios: bool = False,
    critic_features: bool = False,
    features: str = "mocc",
    action_map: str = "mocc",
    mi_min_rtts: float = float("inf"),
    cross: str | None = None,
    n_cross: int = 0,
    links: Sequence[LinkSpec] | None = None,
) -> tuple[SingleFlowEnv, EnvParams]:
    """The environment over ``pool`` links drawn from ``scenario`` with ``seed`` (or over the
    given ``links``), and its default parameters. ``cross`` names a classic controller that runs
    ``n_cross`` competing flows beside the agent, on the agent's RTT."""
    require(isinstance(pool, int) and pool >= 1, "pool", pool, "an integer >= 1")
    require(model in MODELS, "model", model, f"one of {', '.join(MODELS)}")
    require(isinstance(history, int) and history >= 1, "history", history, "an integer >= 1")
    require(isinstance(episode_len, int) and episode_len >= 1, "episode_len", episode_len,
            "an integer >= 1")
    reward_fn = get_reward(reward)
    names = objective_names(reward)
    if preference == (1 / 3, 1 / 3, 1 / 3) and len(names) != 3:
        preference = tuple([1.0 / len(names)] * len(names))  # the default: equal weights
    w = check_preference(preference, names=names)
    require(features in FEATURE_SETS, "features", features, ", ".join(FEATURE_SETS))
    require(action_map in ACTION_MAPS, "action_map", action_map, ", ".join(ACTION_MAPS))
    require(mi_min_rtts > 0 and not math.isnan(mi_min_rtts), "mi_min_rtts", mi_min_rtts,
            "> 0 minimum RTTs (inf: no cap)")
    require(math.isfinite(alpha) and alpha > 0, "alpha", alpha, "> 0")
    lo, hi = init_rate
    require(0 < lo <= hi, "init_rate", init_rate, "0 < low <= high (fractions of capacity)")
    rmin, rmax = rate_bounds_pkts
    require(0 < rmin < rmax, "rate_bounds_pkts", rate_bounds_pkts, "0 < min < max packets/s")
    require(math.isfinite(mi_rtts) and mi_rtts > 0, "mi_rtts", mi_rtts, "> 0 RTTs")
    require(isinstance(log_ratios, bool), "log_ratios", log_ratios, "true or false")
    require(isinstance(critic_features, bool), "critic_features", critic_features,
            "true or false")
    require(isinstance(n_cross, int) and n_cross >= 0, "n_cross", n_cross, "an integer >= 0")
    if cross is not None and n_cross == 0:
        raise ConfigError(f"n_cross=0 is invalid with cross={cross!r}: give n_cross >= 1")
    if cross is None and n_cross:
        raise ConfigError(f"n_cross={n_cross} is invalid without cross: name a controller")
    controller = get_controller(cross) if cross is not None else None

    if links is None:
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        specs = sc.sample(seed, pool)
        duration = sc.duration_s
    else:
        specs = list(links)
        require(len(specs) >= 1, "links", specs, "at least one link")
        duration = 60.0
    for s in specs:
        if s.n_flows != 1:
            raise ConfigError(f"flows={s.n_flows} is invalid: the single-flow environment takes "
                              "links of one flow (cross traffic comes from cross=/n_cross=)")
    if n_cross:
        specs = [replace(s, rtt_ms=tuple(s.rtt_ms) * (1 + n_cross),
                         start_s=tuple(s.start_s) * (1 + n_cross),
                         stop_s=None if s.stop_s is None else tuple(s.stop_s) * (1 + n_cross),
                         access_ms=(None if s.access_ms is None
                                    else tuple(s.access_ms) * (1 + n_cross)))
                 for s in specs]
    if controller is not None:
        # The training tick is the policy's clock (MIs, tick budgets): it is not refined for
        # the cross traffic as a run's is (ccjax.sim.resolution), so a too-coarse one is an error.
        need = resolve_tick(tick_s, [controller], specs, model)
        if need < tick_s:
            raise ConfigError(f"cross={cross!r} is invalid with tick_s={tick_s:g}: {cross} needs "
                              f"a tick of at most {need:g} s at these links' rates "
                              "(ccjax.sim.resolution); give a finer tick_ms")
    cfg, horizon = plan(specs, duration, n_flows=1 + n_cross, tick_s=tick_s, model=model)
    pool_params = build_links(specs, cfg, horizon)
    env = SingleFlowEnv(sim=cfg, history=history, episode_len=episode_len, use_pref=use_pref,
                        reward=reward_fn, cross=controller, log_ratios=log_ratios,
                        critic_features=critic_features, features=features,
                        action_map=action_map, objectives=tuple(names))
    f32 = jnp.float32
    params = EnvParams(
        links=pool_params, pref=jnp.asarray(w, f32), alpha=f32(alpha), init_lo=f32(lo),
        init_hi=f32(hi), min_rate=f32(rmin * PACKET_BYTES), max_rate=f32(rmax * PACKET_BYTES),
        mi_rtts=f32(mi_rtts), mi_min_rtts=f32(mi_min_rtts), pref_draw=jnp.zeros((), bool),
        cross=controller.default_params(1 + n_cross) if controller is not None else ())
    return env, params
