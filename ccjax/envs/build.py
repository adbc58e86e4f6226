"""Build a ``SingleFlowEnv`` and its ``EnvParams``, or a ``MultiFlowEnv`` and its
``MultiFlowParams``, from a scenario, validated before tracing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import jax.numpy as jnp
import numpy as np

from ccjax.cc.mix import Mix
from ccjax.cc.registry import get_controller
from ccjax.envs.actions import ACTION_MAPS, ASTRAEA_MIN_CWND_PKTS, WINDOW_ACTION_MAPS
from ccjax.envs.features import FEATURE_SETS
from ccjax.envs.multi_flow import MULTI_FLOW_FNS, MultiFlowEnv, MultiFlowParams
from ccjax.envs.rewards import OBJECTIVES, get_reward, objective_names
from ccjax.envs.single_flow import EnvParams, SingleFlowEnv
from ccjax.errors import ConfigError, require
from ccjax.sim.link import MODELS, LinkSpec, build_links, plan
from ccjax.sim.resolution import resolve_tick
from ccjax.sim.scenario import AGENT, Scenario, load_scenario
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


def _flow_controllers(names: Sequence[str], n_flows: int
                      ) -> tuple[np.ndarray, Any, Any]:
    """(agent mask (F,), the classic controller or None, its params) for a per-flow assignment:
    one name per flow slot, ``AGENT`` or a classic controller's. Several classic names share
    the link through a ``Mix`` (each flow runs its own)."""
    agent = np.asarray([n == AGENT for n in names], bool)
    classic = sorted({n for n in names if n != AGENT})
    if not classic:
        return agent, None, ()
    ctrls = [get_controller(n) for n in classic]
    if len(ctrls) == 1:
        return agent, ctrls[0], ctrls[0].default_params(n_flows)
    mix = Mix(tuple(ctrls))
    # (agent flows' index is the first member's: its decision is computed and dropped)
    index = jnp.asarray([classic.index(n) if n != AGENT else 0 for n in names], jnp.int32)
    return agent, mix, mix.default_params(n_flows).replace(index=index)


def make_multi_flow(
    scenario: str | Scenario = "astraea-train",
    *,
    pool: int = 256,
    seed: int = 0,
    model: str = "fluid",
    tick_s: float = 1e-3,
    fns: str = "astraea",
    history: int = 5,
    mtp_ms: float = 30.0,
    alpha: float = 0.025,
    init_cwnd_pkts: tuple[float, float] = (10.0, 10.0),
    cwnd_bounds_pkts: tuple[float, float] = (ASTRAEA_MIN_CWND_PKTS, 1e5),
    action_map: str = "astraea",
    controllers: Sequence[str] | None = None,
    max_flows: int | None = None,
    links: Sequence[LinkSpec] | None = None,
    duration_s: float | None = None,
) -> tuple[MultiFlowEnv, MultiFlowParams]:
    """The multi-flow environment over ``pool`` links drawn from ``scenario`` with ``seed`` (or
    over the given ``links``), and its default parameters.

    ``controllers`` names who sends on each flow slot: ``"agent"`` (the policy) or a classic
    controller; by default the scenario's ``flows.controllers``, else every flow is an agent.
    Episodes last ``duration_s`` (default: the scenario's; 60 s for given ``links``).
    Defaults are Astraea's: 30 ms MTP and alpha = 0.025 (Table 4), 5 steps of history."""
    require(isinstance(pool, int) and pool >= 1, "pool", pool, "an integer >= 1")
    require(model in MODELS, "model", model, f"one of {', '.join(MODELS)}")
    require(fns in MULTI_FLOW_FNS, "fns", fns, ", ".join(MULTI_FLOW_FNS))
    require(isinstance(history, int) and history >= 1, "history", history, "an integer >= 1")
    require(action_map in WINDOW_ACTION_MAPS, "action_map", action_map,
            ", ".join(WINDOW_ACTION_MAPS))
    require(math.isfinite(alpha) and 0 < alpha < 1, "alpha", alpha, "0 < alpha < 1")
    require(math.isfinite(mtp_ms) and mtp_ms * 1e-3 >= tick_s, "mtp_ms", mtp_ms,
            f">= one tick ({tick_s * 1e3:g} ms)")
    lo, hi = init_cwnd_pkts
    cmin, cmax = cwnd_bounds_pkts
    require(1 <= cmin < cmax and math.isfinite(cmax), "cwnd_bounds_pkts", cwnd_bounds_pkts,
            "1 <= min < max packets")
    require(cmin <= lo <= hi <= cmax, "init_cwnd_pkts", init_cwnd_pkts,
            f"min <= low <= high <= max of cwnd_bounds_pkts {cwnd_bounds_pkts}")
    sc = None
    if links is None:
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        specs = sc.sample(seed, pool)
        duration = sc.duration_s if duration_s is None else duration_s
        n_flows = max_flows or sc.max_flows
    else:
        specs = list(links)
        require(len(specs) >= 1, "links", specs, "at least one link")
        duration = 60.0 if duration_s is None else duration_s
        n_flows = max_flows or max(s.n_flows for s in specs)
    require(math.isfinite(duration) and duration > 0, "duration_s", duration, "> 0 s")
    if controllers is None and sc is not None:
        controllers = sc.flows.controllers
    names = list(controllers) if controllers is not None else [AGENT] * n_flows
    require(len(names) == n_flows, "controllers", names,
            f"one name per flow slot ({n_flows}: max_flows)")
    for n in names:
        if n != AGENT:
            get_controller(n)  # a one-line error for an unknown name
    agent, cross, cross_params = _flow_controllers(names, n_flows)
    if cross is not None:
        need = resolve_tick(tick_s, [cross], specs, model)
        if need < tick_s:
            raise ConfigError(f"tick_s={tick_s:g} is invalid: the classic flows "
                              f"({cross.name}) need a tick of at most {need:g} s at these "
                              "links' rates (ccjax.sim.resolution); give a finer tick_ms")
    cfg, horizon = plan(specs, duration, n_flows=n_flows, tick_s=tick_s, model=model)
    pool_params = build_links(specs, cfg, horizon)
    env = MultiFlowEnv(sim=cfg, fns=MULTI_FLOW_FNS[fns], history=history,
                       action_map=action_map, cross=cross)
    f32 = jnp.float32
    params = MultiFlowParams(
        links=pool_params, agent=jnp.asarray(agent), alpha=f32(alpha), mtp_s=f32(mtp_ms * 1e-3),
        init_lo=f32(lo), init_hi=f32(hi), min_cwnd=f32(cmin), max_cwnd=f32(cmax),
        end_tick=jnp.int32(horizon), cross=cross_params)
    return env, params


#: the keys of an algorithm preset's ``[env]`` table that ``multi_flow_kwargs`` reads
MULTI_FLOW_KEYS = ("scenario", "pool", "model", "tick_ms", "fns", "history", "mtp_ms", "alpha",
                   "init_cwnd_pkts", "cwnd_bounds_pkts", "action_map", "controllers",
                   "max_flows", "duration_s")


def multi_flow_kwargs(env: dict[str, Any]) -> dict[str, Any]:
    """``make_multi_flow``'s keyword arguments from an algorithm preset's ``[env]`` table
    (``tick_ms`` in ms, the rest as ``make_multi_flow`` names them); an unknown key is a
    one-line error. The trainer builds the environment as
    ``make_multi_flow(**multi_flow_kwargs(cfg.env), seed=seed)``."""
    for k in env:
        require(k in MULTI_FLOW_KEYS, f"env.{k}", env[k],
                "a key of the multi-flow environment: " + ", ".join(MULTI_FLOW_KEYS))
    kw: dict[str, Any] = {k: env[k] for k in MULTI_FLOW_KEYS if k in env and k != "tick_ms"}
    if "tick_ms" in env:
        kw["tick_s"] = float(env["tick_ms"]) / 1000.0
    for k in ("init_cwnd_pkts", "cwnd_bounds_pkts"):
        if k in kw:
            kw[k] = tuple(float(x) for x in kw[k])
    for k in ("mtp_ms", "alpha", "duration_s"):
        if k in kw:
            kw[k] = float(kw[k])
    return kw
