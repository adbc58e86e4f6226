"""The library's front door for simulation: what ``ccjax simulate`` and notebooks call.

``simulate`` validates everything (raising ``ConfigError``) before anything is traced, plans a
``SimConfig`` for the links, runs the batch in one compiled program and returns a ``RunResult``
whose ``summary(i)`` is the JSON object the CLI prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ccjax.cc.base import Controller
from ccjax.cc.mix import Mix, MixParams
from ccjax.cc.registry import EPISODE_CONTROLLERS, WINDOW_CONTROLLERS, get_controller
from ccjax.errors import ConfigError, require
from ccjax.sim.link import MODELS, WINDOW_SENDERS, LinkSpec, build_links, plan
from ccjax.sim.resolution import resolve_tick
from ccjax.sim.run import RunResult, make_timeline, run
from ccjax.units import check_rate_mbps, mbps_to_bytes_per_s


def _per_flow(values: Sequence[float], n: int, field: str) -> list[float]:
    v = list(values)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ConfigError(f"{field}={v} is invalid: give one value or one per flow ({n} flows)")
    return v


def _check_flows_start(links: Sequence[LinkSpec], duration_s: float) -> None:
    """Every flow must start within the run: one that starts at or after its end never sends,
    and its row of the summary would describe nothing."""
    for i, spec in enumerate(links):
        for f, st in enumerate(spec.start_s):
            if st >= duration_s:
                raise ConfigError(
                    f"start_s={st:g} is invalid (link {i}, flow {f}): before the run's end "
                    f"({duration_s:g} s); a flow that starts later never sends (give earlier "
                    "start times or a longer duration)")
            data = spec.data_start_s(f)
            if data >= duration_s:
                raise ConfigError(
                    f"start_s={st:g} is invalid (link {i}, flow {f}): with the handshake and "
                    f"access delay its data would start at {data:g} s, not before the run's end "
                    f"({duration_s:g} s); give an earlier start or a longer duration")


def _pad(values: list, n_real: int, n_flows: int, field: str) -> list:
    """One value, or one per flow of the widest link (``n_real``), extended to the compiled
    ``n_flows`` slots (the extra slots hold no flow); one per slot is taken as it is (a
    scenario's links sample their flow counts, so a list for every seed is one per slot, up to
    its ``max_flows``; the CLI refuses such a list for its one explicit dumbbell)."""
    if len(values) == n_flows:
        return list(values)
    v = _per_flow(values, n_real, field)
    return v + [v[-1]] * (n_flows - n_real)


def _check_sender_settings(links: Sequence[LinkSpec], names: Sequence[str], model: str,
                           window_sender: str, recovery: str, retx_loss: bool) -> None:
    """Refuse ``recovery="prr"`` and ``retx_loss`` where they would change nothing.

    ``names``: each flow slot's controller (link ``i`` runs the first ``n_flows`` of them).
    What reaches which flow (``sim.core.tick_begin``):

    * ``recovery="prr"`` bounds only window senders (``WINDOW_CONTROLLERS``); the one thing it
      does for the others is to retransmit their reported losses a tick later, which matters
      only with ``retx_loss``, to a flow that reads lost retransmissions
      (``EPISODE_CONTROLLERS``), on a link with random loss.
    * ``retx_loss`` draws lost retransmissions, which only ``EPISODE_CONTROLLERS`` read. With
      ``recovery="cut"`` a retransmission meets only the link's random loss; with "prr" a window
      sender's also meets drop-tail.

    ``window_sender`` is not checked: "ack-clocked" also delivers every flow's packets as the
    link serves them (``core._spread_group``), which moves rate-based flows' RTT samples too.
    Combinations the simulator's own config refuses (``SimConfig``: prr with paced senders or
    the fluid model, ``retx_loss`` with the fluid model) are left to its clearer message.
    """
    prr = recovery == "prr" and window_sender == "ack-clocked"
    if model != "packet" or (recovery != "cut" and not prr):
        return
    per_link = [({names[f] for f in range(s.n_flows)}, s.loss > 0) for s in links]
    used = ",".join(sorted(set().union(*(n for n, _ in per_link))))
    window = ", ".join(sorted(WINDOW_CONTROLLERS))
    episodes = ", ".join(sorted(EPISODE_CONTROLLERS))
    if prr and not any(n & WINDOW_CONTROLLERS or (retx_loss and n & EPISODE_CONTROLLERS and lossy)
                       for n, lossy in per_link):
        raise ConfigError(
            f"recovery='prr' is invalid with cc {used}: it is the loss recovery of window "
            f"senders ({window}) and no flow runs one, so it would change nothing; give "
            "recovery='cut' (the default)")
    if not retx_loss:
        return
    if not any(n & EPISODE_CONTROLLERS for n, _ in per_link):
        raise ConfigError(
            f"retx_loss=True is invalid with cc {used}: only controllers that track loss "
            f"episodes ({episodes}) react to a lost retransmission and no flow runs one, so it "
            "would change nothing; leave it off")
    if not any(n & EPISODE_CONTROLLERS and (lossy or (prr and n & WINDOW_CONTROLLERS))
               for n, lossy in per_link):
        # (only reached with recovery "cut": a "prr" that passed above has a window sender,
        # which tracks loss episodes, or random loss where a flow does)
        raise ConfigError(
            "retx_loss=True is invalid here: with recovery='cut' a retransmission meets only the "
            f"link's random loss, and the links whose flows react to a lost one ({episodes}) "
            "have none (loss=0), so none would be lost; give a loss > 0, or recovery='prr' with "
            f"window_sender='ack-clocked' and window senders ({window}), whose retransmissions "
            "also meet drop-tail")


def simulate(
    links: Sequence[LinkSpec],
    *,
    cc: str | Sequence[str] = "const",
    rate_mbps: float | Sequence[float] = 8.0,
    duration_s: float = 20.0,
    model: str = "packet",
    seed: int = 0,
    series_interval_s: float | None = None,
    tick_s: float = 1e-3,
    max_flows: int | None = None,
    window_sender: str = "paced",
    retx_loss: bool = False,
    recovery: str = "cut",
    preference: Sequence[float] | None = None,
) -> RunResult:
    """Simulate a batch of links, every flow driven by controller ``cc`` (one name, or one per
    flow: a controller's, a shipped model's such as ``mocc``, or a policy directory, each as
    ``ccjax.evaluate.resolve_method`` takes it; ``preference`` replaces the policies' own
    w_thr,w_lat,w_loss; a policy flow starts at ten packets per base RTT), for ``duration_s``
    seconds; returns the run with per-interval series, each
    ``series_interval_s`` long (default 0.1 s, or the whole run if it is shorter; an explicit
    value longer than the run is an error, not shortened). ``tick_s`` is the longest tick: a
    controller that needs a finer one (Copa, ``ccjax.sim.resolution``) gets it, and the run's
    config records the tick used. ``recovery="prr"`` and ``retx_loss`` are refused where they
    would change nothing (``_check_sender_settings``: no flow they reach)."""
    require(model in MODELS, "model", model, f"one of {', '.join(MODELS)}")
    require(math.isfinite(duration_s) and duration_s > 0, "duration_s", duration_s,
            "a finite number > 0 s")
    require(math.isfinite(tick_s) and 1e-6 <= tick_s <= 1.0, "tick_s", tick_s, "from 1e-6 to 1 s")
    if series_interval_s is None:
        series_interval_s = max(min(0.1, duration_s), tick_s)
    require(math.isfinite(series_interval_s) and tick_s <= series_interval_s <= duration_s,
            "series_interval_s", series_interval_s,
            f"from the tick ({tick_s:g} s) to the run's duration ({duration_s:g} s)")
    require(isinstance(seed, int | np.integer) and 0 <= seed < 2**32, "seed", seed,
            "an integer from 0 to 2**32 - 1")
    if not links:
        raise ConfigError("links=[] is invalid: at least one link is needed")
    n_real = n_flows = max(s.n_flows for s in links)
    if max_flows is not None:
        require(isinstance(max_flows, int) and max_flows >= 1, "max_flows", max_flows,
                "an integer >= 1")
        require(n_flows <= max_flows, "flows", n_flows, f"at most max_flows={max_flows}")
        n_flows = max_flows
    _check_flows_start(links, duration_s)
    names = [cc] if isinstance(cc, str) else list(cc)
    names = _pad(names, n_real, n_flows, "cc")
    distinct = sorted(set(names))
    from ccjax.cc.policy import PolicyController

    members = [resolve_cc(n, preference) for n in distinct]
    if preference is not None and not any(isinstance(c, PolicyController) for c in members):
        raise ConfigError(f"preference={list(preference)} is invalid with cc "
                          f"{','.join(distinct)}: it is for learned policies (a shipped model or "
                          "a policy directory), and no flow runs one")
    rates = [rate_mbps] if isinstance(rate_mbps, int | float | str) else list(rate_mbps)
    for r in rates:  # a bool is an int to Python, a string is no rate: neither is taken as one
        require(isinstance(r, int | float | np.integer | np.floating) and not isinstance(r, bool),
                "rate_mbps", r, "a number of Mbps (or one per flow)")
    per_flow_rates = len(rates) > 1
    rates = _pad(rates, n_real, n_flows, "rate_mbps")
    for f, (r, name) in enumerate(zip(rates, names, strict=True)):
        if name == "const":
            check_rate_mbps("rate_mbps", r)
        elif per_flow_rates and f < n_real and r != 0:
            # a per-flow list: the entry of a flow that sets its own rate would be ignored
            raise ConfigError(f"rate_mbps={r:g} for flow {f} is invalid: that flow runs {name}, "
                              "which sets its own rate; give 0 there (rates are for const flows)")

    require(window_sender in WINDOW_SENDERS, "window_sender", window_sender,
            f"one of {', '.join(WINDOW_SENDERS)}")
    _check_sender_settings(links, names, model, window_sender, recovery, bool(retx_loss))
    tick_s = resolve_tick(tick_s, members, links, model)
    cfg, horizon = plan(links, duration_s, n_flows=n_flows, tick_s=tick_s, model=model,
                        window_sender=window_sender, retx_loss=bool(retx_loss),
                        recovery=recovery)
    batch = build_links(links, cfg, horizon)
    member_params = []
    for c in members:
        p = c.default_params(n_flows)
        if c.name == "const":
            p = p.replace(rate=jnp.asarray([mbps_to_bytes_per_s(r) for r in rates], jnp.float32))
        member_params.append(p)
    if len(members) == 1:
        controller, params = members[0], member_params[0]
    else:
        controller = Mix(tuple(members))
        params = MixParams(index=jnp.asarray([distinct.index(n) for n in names], jnp.int32),
                           members=tuple(member_params))
    return _run_planned(cfg, batch, controller, params, duration_s, seed, series_interval_s)


def resolve_cc(name: str, preference: Sequence[float] | None) -> Controller:
    """The controller a flow's name stands for: a registered controller, or a learned policy
    (a shipped model or a policy directory)."""
    if not isinstance(name, str):
        raise ConfigError(f"cc={name!r} is invalid: a controller's name, a shipped model's name "
                          "or a policy directory")
    from ccjax.cc.registry import CONTROLLERS

    if name in CONTROLLERS:
        return get_controller(name)
    from ccjax.evaluate import resolve_method
    from ccjax.models import model_names

    try:
        return resolve_method(name, preference).controller
    except ConfigError:
        if Path(name).exists() or name in model_names():
            raise  # a policy that is there but cannot be loaded: say why
        raise ConfigError(
            f"cc={name!r} is invalid: known controllers are {', '.join(sorted(CONTROLLERS))}; "
            f"shipped models are {', '.join(model_names()) or 'none'}; or give a policy "
            "directory") from None


def _run_planned(cfg, batch, controller: Controller, params: Any, duration_s: float, seed: int,
                 series_interval_s: float, link_seeds: Sequence[int] | None = None
                 ) -> RunResult:
    B = int(jax.tree.leaves(batch)[0].shape[0])
    params = jax.tree.map(lambda x: jnp.broadcast_to(x, (B,) + jnp.shape(x)), params)
    if link_seeds is None:
        keys = jax.random.split(jax.random.PRNGKey(seed), B)
    else:
        keys = jnp.stack([jax.random.PRNGKey(s) for s in link_seeds])
    timeline = make_timeline(duration_s, series_interval_s, cfg.tick_s)
    return run(cfg, controller, batch, params, keys, timeline)


def run_controller(
    links: Sequence[LinkSpec],
    controller: Controller,
    params: Any = None,
    *,
    duration_s: float = 20.0,
    model: str = "packet",
    seed: int = 0,
    series_interval_s: float = 0.1,
    tick_s: float = 1e-3,
    link_seeds: Sequence[int] | None = None,
    window_sender: str = "paced",
    retx_loss: bool = False,
    recovery: str = "cut",
) -> RunResult:
    """Run a controller object (not a registered name) on every flow of ``links``.

    ``params`` are the controller's dynamic parameters for one link (flow axis ``F`` = the
    largest flow count); ``None`` takes ``controller.default_params(F)``. This is the entry point
    for controllers under development, tests, and parameter studies; unlike ``simulate`` it lets
    a flow start after the run's end (to look at a controller before its flow starts).
    ``link_seeds`` (one per link) makes each link's random draws its own, whatever else is in
    the batch; by default the links' keys are split from ``seed``."""
    require(model in MODELS, "model", model, f"one of {', '.join(MODELS)}")
    require(math.isfinite(duration_s) and duration_s > 0, "duration_s", duration_s,
            "a finite number > 0 s")
    require(isinstance(seed, int | np.integer) and 0 <= seed < 2**32, "seed", seed,
            "an integer from 0 to 2**32 - 1")
    if not links:
        raise ConfigError("links=[] is invalid: at least one link is needed")
    n_flows = max(s.n_flows for s in links)
    require(window_sender in WINDOW_SENDERS, "window_sender", window_sender,
            f"one of {', '.join(WINDOW_SENDERS)}")
    require(math.isfinite(tick_s) and 1e-6 <= tick_s <= 1.0, "tick_s", tick_s, "from 1e-6 to 1 s")
    tick_s = resolve_tick(tick_s, [controller], links, model)
    cfg, horizon = plan(links, duration_s, n_flows=n_flows, tick_s=tick_s, model=model,
                        window_sender=window_sender, retx_loss=bool(retx_loss),
                        recovery=recovery)
    batch = build_links(links, cfg, horizon)
    if link_seeds is not None:
        link_seeds = list(link_seeds)
        require(len(link_seeds) == len(links), "link_seeds", link_seeds,
                f"one integer seed per link ({len(links)})")
        for s in link_seeds:
            require(isinstance(s, int) and 0 <= s < 2**32, "link_seeds", s,
                    "integers from 0 to 2**32 - 1")
    if params is None:
        params = controller.default_params(n_flows)
    return _run_planned(cfg, batch, controller, params, duration_s, seed, series_interval_s,
                        link_seeds)


def link_from_flags(
    *, flows: int = 2, bw_mbps: float = 12.0, rtt_ms: Sequence[float] = (40.0,),
    start_s: Sequence[float] | None = None, stop_s: Sequence[float] | None = None,
    buffer_pkts: float | None = None, loss: float = 0.0, trace: np.ndarray | None = None,
    trace_name: str = "trace", handshake: bool = False,
    access_ms: Sequence[float] | None = None, jitter_ms: float = 0.0,
) -> LinkSpec:
    """An explicit dumbbell: ``flows`` flows over one bottleneck. ``buffer_pkts`` defaults to one
    bandwidth-delay product of the largest RTT (at least one packet), at ``bw_mbps`` or, with a
    ``trace`` (which replaces ``bw_mbps``), at the trace's mean rate. ``handshake``,
    ``access_ms`` (one value or one per flow) and ``jitter_ms``: see ``LinkSpec``."""
    require(isinstance(flows, int) and flows >= 1, "flows", flows, "an integer >= 1")
    rtts = _per_flow(rtt_ms, flows, "rtt_ms")
    starts = _per_flow(start_s if start_s is not None else [0.0], flows, "start_s")
    stops = _per_flow(stop_s, flows, "stop_s") if stop_s is not None else None
    if trace is None:
        check_rate_mbps("bw_mbps", bw_mbps)
    if buffer_pkts is None:
        for r in rtts:
            require(math.isfinite(r) and r > 0, "rtt_ms", r, "a number > 0 ms")
        if trace is None:
            rate = mbps_to_bytes_per_s(bw_mbps)
        else:
            from ccjax.sim.trace import mean_rate_bytes_per_s, validate_stamps

            validate_stamps(np.asarray(trace), trace_name)
            rate = mean_rate_bytes_per_s(np.asarray(trace))
        bdp = rate * max(rtts) * 1e-3 / 1500.0
        buffer_pkts = float(max(1, round(bdp)))
    return LinkSpec(bandwidth_mbps=(bw_mbps,), buffer_pkts=buffer_pkts, loss=loss, rtt_ms=rtts,
                    start_s=starts, stop_s=stops, trace=trace, trace_name=trace_name,
                    handshake=handshake,
                    access_ms=None if access_ms is None else _per_flow(access_ms, flows,
                                                                       "access_ms"),
                    jitter_ms=jitter_ms)
