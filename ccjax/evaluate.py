"""Evaluate classic controllers and trained policies on the same links (MOCC §6.1, Fig. 5 and 6).

``evaluate(["cubic", "bbr", "runs/mocc"], scenario="mocc-test", links=10)`` samples the links
once (``Scenario.sample(seed, links)``) and runs every method on all of them, one compiled batch
per method, through the simulator's own driver (``ccjax.sim.run.run``: the same planning, links,
keys and runner as ``ccjax simulate --scenario X --links N --seed S``, so a classic controller's
numbers here equal that command's up to float summation order; ``const`` runs at its default
10 Mbps, where ``simulate`` passes ``--rate-mbps``). A trained policy runs as a controller
(``ccjax.cc.policy.PolicyController``), so classic and learned senders share one code path.

Metrics, per link, of flow 0 (the only flow of MOCC's single-flow test links; on multi-flow
links every flow runs the method and flow 0 is the one reported), then averaged over links with
equal weight (MOCC Fig. 6 treats every network condition as one case):

* ``utilization``: the flow's bytes across the bottleneck / the link's capacity over the time
  the flow was active (``ccjax.metrics.link_utilization``; MOCC Fig. 5(a-d) "link
  utilization", Eq. 2's O_thr);
* ``latency_ratio``: mean RTT / base RTT, the mean packet-weighted over delivered bytes as
  ``ccjax simulate`` reports it (``ccjax.metrics.latency_ratio``; MOCC Fig. 5(e-h)); 1 = no
  queueing; NaN on a link where the flow delivered nothing (no RTT was measured), and the
  means over links leave such links out of the two latency columns;
* ``p95_delay_ms``: 95th-percentile one-way delay = base RTT / 2 + the p95 queueing delay from
  the simulator's delay histogram (``ccjax.metrics.one_way_delay_from_rtt``; Pareto §V-A);
* ``loss_rate``: bytes lost (random loss and drop-tail) / bytes sent (``ccjax.metrics.loss_rate``,
  MOCC Eq. 2's "lost packets / total packets");
* ``reward``: MOCC's w^T O (``ccjax.metrics.mocc_reward``) with O from the run's totals above
  (O_thr = utilization, O_lat = base / mean RTT, O_loss = 1 - loss rate). MOCC averages per-MI
  rewards over an episode and does not say how Fig. 6 aggregates; a whole-run O is what the
  other columns report and does not depend on a method's MI length;
* ``throughput_mbps``: the flow's delivered bytes per second it was active.

Initial rate of a policy: 0.5 x each link's mean capacity (``init_rate_frac``). The controller
cannot know the capacity (``PolicyController`` alone starts at 10 packets per base RTT), but
Aurora and MOCC are trained from U(0.3, 1.5) x capacity (Aurora's ``network_sim.py``), and a
start far outside that range measures how the policy copes with a state it never saw rather than
the operating point Fig. 5 compares. 0.5 lies inside the training range and below capacity, so
the run starts without a standing queue or losses that the start itself would cause, and the
policy must find the capacity itself, as the classic controllers (which start from their
initial windows) must.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ccjax import metrics
from ccjax.cc.base import Controller
from ccjax.cc.policy import PolicyController, load_policy_controller
from ccjax.cc.registry import CONTROLLERS
from ccjax.errors import ConfigError, require
from ccjax.sim import capacity
from ccjax.sim.link import MODELS, LinkSpec, build_links, plan
from ccjax.sim.resolution import resolve_tick
from ccjax.sim.run import (
    RunResult,
    Timeline,
    check_memory,
    make_runner,
    make_timeline,
    run,
    summarize,
)
from ccjax.sim.scenario import Scenario, load_scenario

#: initial rate of a policy, as a fraction of each link's mean capacity (see the module doc)
DEFAULT_INIT_RATE_FRAC = 0.5
#: the preference rewards are scored with when neither the caller nor a model gives one
EQUAL_PREFERENCE = (1 / 3, 1 / 3, 1 / 3)
#: the per-method columns, in table order
COLUMNS = ("utilization", "latency_ratio", "p95_delay_ms", "loss_rate", "reward",
           "throughput_mbps")


@dataclass(frozen=True)
class Method:
    """One thing to evaluate: a registered controller, or a trained policy directory."""

    label: str  # as the caller named it
    controller: Controller
    kind: str  # "controller" or "policy"
    preference: tuple[float, ...] | None  # what a policy runs at (None: classic, or Aurora)


@dataclass
class EvalResult:
    """The table (``rows``: one dict per method, ``COLUMNS`` averaged over links) and its
    per-link rows (``per_link``: one dict per method and link, with the link's parameters)."""

    scenario: str
    seed: int
    duration_s: float
    model: str
    tick_s: float  # the longest tick; each row's ``tick_s`` is the one its method ran at
    n_links: int
    rows: list[dict] = field(default_factory=list)
    per_link: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def write_csv(self, path: str | os.PathLike) -> Path:
        """Write the table (one row per method) as CSV."""
        p = Path(path)
        keys = ["method", "kind", "preference", *COLUMNS, "links", "tick_s"]
        with p.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            for r in self.rows:
                pref = r["preference"]
                w.writerow({**r, "preference": ";".join(f"{x:g}" for x in pref)})
        return p


def resolve_method(name: str | os.PathLike, preference: Sequence[float] | None = None,
                   kind: str | None = None) -> Method:
    """A controller name (``cubic``, ``bbr``, ...), a shipped model's name (``mocc``; see
    ``ccjax models`` and ``ccjax.models``) or a policy directory (holding ``policy.json``; the
    file's own path works too). Names win over directories: controllers first, then shipped
    models (give ``./cubic`` or ``./mocc`` for a directory of that name). ``kind="controller"``
    accepts controller and shipped model names, ``kind="policy"`` shipped models and
    directories. ``preference`` replaces a model's own."""
    from ccjax.models import model_names, shipped_model

    require(kind in (None, "controller", "policy"), "kind", kind, "controller or policy")
    label = os.fspath(name)
    known = ", ".join(sorted(CONTROLLERS))
    shipped = shipped_model(label) if label not in CONTROLLERS else None
    if kind != "policy" and label in CONTROLLERS:
        return Method(label, CONTROLLERS[label], "controller", None)
    if kind == "controller" and shipped is None:
        raise ConfigError(f"cc={label!r} is invalid: known controllers are {known}; shipped "
                          f"models are {', '.join(model_names()) or 'none'}")
    if shipped is not None:
        p = shipped.path
    else:
        p = Path(label)
        if p.name == "policy.json" and p.is_file():
            p = p.parent
        if not (p.is_dir() and (p / "policy.json").is_file()):
            what = "" if kind == "policy" else f"neither a controller ({known}) nor "
            models = ", ".join(model_names()) or "none"
            raise ConfigError(f"{'model' if kind else 'method'}={label!r} is invalid: {what}"
                              f"a shipped model ({models}) nor a directory holding policy.json")
    pc = load_policy_controller(p, preference)  # checked against the model's own objectives
    if pc.pref_dim and pc.preference is None:
        names = ",".join("w_" + n for n in pc.objectives)
        raise ConfigError(f"preference=None is invalid for {label!r}: the model stores no "
                          f"preference; pass one ({names})")
    # named for the caller's label, so two policies on one link are two members of a Mix
    pc = dataclasses.replace(pc, name=label)
    return Method(label, pc, "policy", pc.preference if pc.pref_dim else None)


def _check(links: int | Sequence[LinkSpec], duration_s: float | None, seed: int, model: str,
           tick_s: float, init_rate_frac: float) -> None:
    if isinstance(links, int | np.integer) and not isinstance(links, bool):
        require(links >= 1, "links", int(links), "an integer >= 1")
    else:
        require(isinstance(links, Sequence) and len(links) >= 1
                and all(isinstance(s, LinkSpec) for s in links), "links", links,
                "an integer >= 1 or a non-empty list of LinkSpec")
    require(model in MODELS, "model", model, f"one of {', '.join(MODELS)}")
    if duration_s is not None:
        require(isinstance(duration_s, int | float) and math.isfinite(duration_s)
                and duration_s > 0, "duration_s", duration_s, "> 0 s")
    require(isinstance(tick_s, int | float) and 1e-6 <= tick_s <= 1.0, "tick_s", tick_s,
            "from 1e-6 to 1 s")
    # the bound ``ccjax.api.simulate`` sets: a seed that one accepts, the other does too
    require(isinstance(seed, int | np.integer) and not isinstance(seed, bool)
            and 0 <= seed < 2**32, "seed", seed, "an integer from 0 to 2**32 - 1")
    require(isinstance(init_rate_frac, int | float) and math.isfinite(init_rate_frac)
            and init_rate_frac > 0, "init_rate_frac", init_rate_frac,
            "> 0 (a fraction of the link's capacity)")


def _batched_params(method: Method, n_links: int, n_flows: int, cap_bytes_s: np.ndarray,
                    init_rate_frac: float) -> Any:
    """The method's parameters with a leading link axis."""
    ctl = method.controller
    p = ctl.default_params(n_flows)
    p = jax.tree.map(lambda x: jnp.broadcast_to(x, (n_links,) + jnp.shape(x)), p)
    if isinstance(ctl, PolicyController):
        init = init_rate_frac * np.asarray(cap_bytes_s, np.float64)
        p = p.replace(init_rate=jnp.asarray(np.broadcast_to(init[:, None], (n_links, n_flows)),
                                            jnp.float32))
    return p


def _mean_over_links(values: Sequence[float]) -> float:
    """The mean over the links that have the value (a latency is NaN where the flow delivered
    nothing); NaN if none has it."""
    v = np.asarray(values, np.float64)
    ok = ~np.isnan(v)
    return float(v[ok].mean()) if ok.any() else math.nan


def _link_row(res: RunResult, i: int, w: np.ndarray) -> dict:
    """Flow 0's metrics on link ``i`` (definitions in the module doc)."""
    s = summarize(res, i)
    fl = s["flows"][0]
    delivered = float(np.asarray(res.series.delivered[i, :, 0]).sum())
    # the capacity the link offered while the flow was active (as ``throughput_mbps`` counts
    # only those seconds): a flow that starts late is not charged for the time before it
    lengths = np.asarray(res.timeline.lengths(), np.float64)
    active = np.asarray(res.series.active_ticks[i, :, 0], np.float64) / lengths
    cap_bytes = float((np.asarray(res.series.cap_bytes[i], np.float64) * active).sum())
    util = float(metrics.link_utilization(delivered, cap_bytes, axis=None))
    # a flow that delivered nothing has no RTT sample: its latency is unknown (NaN, left out of
    # the means over links), not the base RTT summarize reports, and MOCC's O_lat is 0 for it
    mean_rtt = float(fl["mean_rtt_ms"]) if delivered > 0 else math.nan
    p95_rtt = float(fl["p95_rtt_ms"]) if delivered > 0 else math.nan
    # latency ratios divide by the least RTT a data packet sees (as the environment's MI
    # statistics do), one-way delays subtract half the propagation RTT
    lat = float(metrics.latency_ratio(mean_rtt, fl["rtt_floor_ms"]))
    p95 = float(metrics.one_way_delay_from_rtt(p95_rtt, fl["base_rtt_ms"]))
    dropped = float(np.asarray(res.series.dropped[i, :, 0]).sum())
    loss = float(metrics.loss_rate(dropped, fl["sent_bytes"]))
    reward = float(metrics.mocc_reward(w, util, 1.0, mean_rtt, fl["rtt_floor_ms"], loss))
    return {"utilization": util, "latency_ratio": lat, "p95_delay_ms": p95, "loss_rate": loss,
            "reward": reward, "throughput_mbps": float(fl["throughput_mbps"]),
            "mean_rtt_ms": mean_rtt,
            "link_utilization": float(s["link"]["utilization"]),
            "capacity_mbps": float(s["link"]["capacity_mbps"]),
            "base_rtt_ms": float(fl["base_rtt_ms"]), "rtt_floor_ms": float(fl["rtt_floor_ms"])}


def _resolve_links(scenario: str | Scenario, links: int | Sequence[LinkSpec], seed: int,
                   duration_s: float | None) -> tuple[list[LinkSpec], str, float, int]:
    """(link specs, scenario label, duration, flows per link) of an evaluation: ``links`` links
    sampled from ``scenario`` with ``seed``, or the explicit links."""
    sc = scenario if isinstance(scenario, Scenario) else None
    if isinstance(links, int | np.integer):
        sc = sc or load_scenario(scenario)
        specs = sc.sample(int(seed), int(links))
        label = sc.name
    else:
        specs = list(links)
        label = sc.name if sc is not None else "links"
    if duration_s is None:
        sc = sc or load_scenario(scenario)
        duration_s = float(sc.duration_s)
    n_flows = max(s.n_flows for s in specs)
    if sc is not None and isinstance(links, int | np.integer):
        n_flows = max(n_flows, sc.max_flows)
    return specs, label, float(duration_s), n_flows


def evaluate(
    methods: Sequence[str | os.PathLike | Method],
    scenario: str | Scenario = "mocc-test",
    links: int | Sequence[LinkSpec] = 10,
    *,
    seed: int = 0,
    duration_s: float | None = None,
    preference: Sequence[float] | None = None,
    model: str = "packet",
    tick_s: float = 1e-3,
    init_rate_frac: float = DEFAULT_INIT_RATE_FRAC,
) -> EvalResult:
    """Run every method on the same links and return the table (see the module doc).

    ``methods`` are names or directories (``resolve_method``) or resolved ``Method`` values.
    ``links`` is a count to sample from ``scenario`` with ``seed``, or explicit links.
    ``duration_s`` defaults to the scenario's. ``preference`` is the w a MOCC policy runs at
    (default: the model's own) and the w every reward is scored with (default: the first
    model's preference, else equal weights); each row records the w it used. Everything is
    checked, and every policy loaded, before anything is compiled."""

    _check(links, duration_s, seed, model, tick_s, init_rate_frac)
    if not methods:
        raise ConfigError("methods=[] is invalid: name at least one controller or policy "
                          "directory")
    w_given = None if preference is None else tuple(float(x) for x in
                                                    check_any_preference(preference))
    resolved: list[Method] = []
    for m in methods:
        m = m if isinstance(m, Method) else resolve_method(m, w_given)
        if m.label not in {r.label for r in resolved}:  # keep order, drop repeats
            resolved.append(m)

    specs, label, duration_s, n_flows = _resolve_links(scenario, links, seed, duration_s)
    w_default = w_given or next((m.preference for m in resolved if m.preference), None) \
        or EQUAL_PREFERENCE
    B = len(specs)
    # the keys of ccjax.api.simulate: one per link, split from the seed
    keys = jax.random.split(jax.random.PRNGKey(int(seed)), B)
    setups: dict[float, tuple] = {}

    def setup(tick: float) -> tuple:
        """The links planned for one tick (a method may need a finer one than ``tick_s``)."""
        if tick not in setups:
            cfg, horizon = plan(specs, duration_s, n_flows=n_flows, tick_s=tick, model=model)
            batch = build_links(specs, cfg, horizon)
            cap = np.asarray(capacity.mean_rate_jnp(batch.sched)) / cfg.tick_s  # bytes/s
            setups[tick] = (cfg, batch, cap, make_timeline(duration_s, duration_s, cfg.tick_s))
        return setups[tick]

    out = EvalResult(scenario=label, seed=int(seed), duration_s=float(duration_s), model=model,
                     tick_s=float(tick_s), n_links=B)
    for m in resolved:
        w = scoring_weights(m.preference or w_default)
        cfg, batch, cap, timeline = setup(resolve_tick(tick_s, [m.controller], specs,
                                                       model))
        params = _batched_params(m, B, cfg.n_flows, cap, init_rate_frac)
        res = run(cfg, m.controller, batch, params, keys, timeline)
        per = []
        for i, spec in enumerate(specs):
            row = {"method": m.label, "link": i, **_link_row(res, i, w),
                   "buffer_pkts": float(spec.buffer_pkts), "random_loss": float(spec.loss)}
            per.append(row)
        out.per_link.extend(per)
        mean = {c: _mean_over_links([r[c] for r in per]) for c in COLUMNS}
        out.rows.append({"method": m.label, "kind": m.kind, "preference": [float(x) for x in w],
                         **mean, "links": B, "tick_s": float(cfg.tick_s),
                         "compile_s": res.compile_s, "run_s": res.wall_s})
    return out


# ---- one method on a grid of preferences x links (MOCC Fig. 6: 100 objectives x 10 networks)

#: compiled runners by (config, traced controller, timeline, batch): trials of a sweep share
#: network shapes, so their preference grids reuse one program (a few entries at most)
_RUNNERS: dict[tuple, Any] = {}
_RUNNERS_MAX = 8


@dataclass
class PreferenceGrid:
    """``evaluate_preferences``' result: ``rows`` holds one dict per (preference, link),
    preference-major (``pref``, ``w_thr``, ``w_lat``, ``w_loss``, ``link`` and the per-link
    columns of ``EvalResult.per_link``: ``COLUMNS``, ``mean_rtt_ms``, ``base_rtt_ms``,
    ``rtt_floor_ms``, ``capacity_mbps``, ``buffer_pkts``, ``random_loss``). ``simulated``
    counts the links the simulator ran (preferences x links for a MOCC policy; the links once
    for a method whose sending does not depend on the preference, rescored per preference)."""

    method: str
    kind: str
    scenario: str
    seed: int
    duration_s: float
    model: str
    tick_s: float  # the tick the method ran at (``tick_s`` or finer, ``ccjax.sim.resolution``)
    n_links: int
    n_preferences: int
    simulated: int
    programs: int  # compiled batches run (several when max_links splits the grid)
    compile_s: float
    run_s: float
    rows: list[dict] = field(default_factory=list)


def _traced(ctl: Controller) -> Controller:
    """The controller as the compiled program sees it. A policy's weights, preference, rate
    bounds and other defaults reach the program through its ``PolicyParams``, so two policies
    of the same network shape compile to the same program."""
    if isinstance(ctl, PolicyController):
        return dataclasses.replace(ctl, actor=None, preference=None, name="policy")
    return ctl


def _run_cached(cfg: Any, ctl: Controller, timeline: Timeline, links: Any, params: Any,
                keys: jnp.ndarray) -> tuple[RunResult, float]:
    """``ccjax.sim.run.run`` with the compiled program kept for the next call of the same
    shapes; returns (result, seconds spent compiling in this call)."""
    from ccjax.devices import batch_mesh, shard_batch

    B = int(links.buffer_bytes.shape[0])
    check_memory(cfg, B, timeline)  # before anything is traced
    links, params, keys = shard_batch((links, params, keys), B)
    tctl = _traced(ctl)
    key = (cfg, tctl, timeline, B)
    compile_s = 0.0
    fn = _RUNNERS.get(key)
    if fn is None:
        t0 = time.perf_counter()
        fn = make_runner(cfg, tctl, timeline, batch_mesh(B)).lower(links, params, keys).compile()
        compile_s = time.perf_counter() - t0
        if len(_RUNNERS) >= _RUNNERS_MAX:
            _RUNNERS.pop(next(iter(_RUNNERS)))
        _RUNNERS[key] = fn
    t0 = time.perf_counter()
    state, series, qend, cwnd = fn(links, params, keys)
    jax.block_until_ready(series)
    wall = time.perf_counter() - t0
    # numpy once, so the per-link summaries below index host arrays
    res = RunResult(cfg=cfg, timeline=timeline, links=jax.tree.map(np.asarray, links),
                    state=state, series=jax.tree.map(np.asarray, series),
                    queue_end=np.asarray(qend), wall_s=wall, compile_s=compile_s,
                    cwnd_end=np.asarray(cwnd))
    return res, compile_s


def check_any_preference(w: Sequence[float]) -> np.ndarray:
    """A preference of MOCC's three objectives or AUTO's two (throughput, delay), on the
    simplex; which one a policy takes, its controller checks when it loads."""
    from ccjax.envs.build import check_preference
    from ccjax.envs.rewards import OBJECTIVES

    names = OBJECTIVES["auto"] if len(list(w)) == 2 else OBJECTIVES["mocc"]
    return check_preference(w, names=names)


def scoring_weights(w: Sequence[float]) -> np.ndarray:
    """The three weights a run's MOCC reward is scored with: the preference itself, or for
    AUTO's two (w_thr, w_delay) MOCC's (w_thr, w_delay, 0), its latency objective being base
    RTT over RTT as AUTO's delay objective is that minus 1 (``ccjax.envs.rewards``)."""
    v = np.asarray([float(x) for x in w], np.float64)
    return v if v.shape == (3,) else np.asarray([v[0], v[1], 0.0])


def check_preferences(preferences: Any) -> np.ndarray:
    """An (N, 3) array of preferences, each on the simplex (``check_preference``)."""
    from ccjax.envs.build import check_preference

    try:
        w = np.asarray(preferences, np.float64)
    except (TypeError, ValueError):
        raise ConfigError("preferences is invalid: an (N, 3) array of w_thr,w_lat,w_loss "
                          "rows") from None
    require(w.ndim == 2 and w.shape[0] >= 1 and w.shape[1] == 3, "preferences",
            f"shape {w.shape}", "an (N, 3) array with N >= 1")
    for i, row in enumerate(w):
        check_preference(row, f"preferences[{i}]")
    return w


def evaluate_preferences(
    method: str | os.PathLike | Method,
    preferences: Any,
    scenario: str | Scenario = "mocc-test",
    links: int | Sequence[LinkSpec] = 10,
    *,
    seed: int = 0,
    duration_s: float | None = None,
    model: str = "packet",
    tick_s: float = 1e-3,
    init_rate_frac: float = DEFAULT_INIT_RATE_FRAC,
    max_links: int | None = None,
) -> PreferenceGrid:
    """One method at every preference on every link: MOCC Fig. 6's protocol (§6.1: "100
    uniformly distributed objectives x 10 network conditions", every case scored with its own
    w^T O).

    A MOCC policy runs once per (preference, link): the links are tiled once per preference
    and the whole grid is one batched program (the preference is a per-link parameter of the
    policy, DESIGN principle 2), in programs of at most ``max_links`` simulated links when
    given (the last one padded, so one compilation serves all). Link ``l`` gets the same PRNG
    key at every preference, the key ``evaluate`` gives it: a row equals ``evaluate([method],
    scenario, links, seed=seed, preference=w)``'s link ``l``. A classic controller (or a policy
    without a preference input) sends the same whatever w is, so it runs once on the links and
    each link's totals are scored with every preference. Metrics and reward: as ``evaluate``
    (module doc)."""
    _check(links, duration_s, seed, model, tick_s, init_rate_frac)
    W = check_preferences(preferences)
    if max_links is not None:
        require(isinstance(max_links, int | np.integer) and not isinstance(max_links, bool)
                and max_links >= 1, "max_links", max_links, "an integer >= 1 (or None)")
    m = method if isinstance(method, Method) else resolve_method(method, W[0])
    specs, label, duration_s, n_flows = _resolve_links(scenario, links, seed, duration_s)
    M, N = len(specs), len(W)
    per_pref = bool(isinstance(m.controller, PolicyController) and m.controller.pref_dim)
    cfg, horizon = plan(specs, duration_s, n_flows=n_flows,
                        tick_s=resolve_tick(tick_s, [m.controller], specs, model),
                        model=model)
    timeline = make_timeline(duration_s, duration_s, cfg.tick_s)  # totals only
    link_keys = jax.random.split(jax.random.PRNGKey(int(seed)), M)
    out = PreferenceGrid(method=m.label, kind=m.kind, scenario=label, seed=int(seed),
                         duration_s=float(duration_s), model=model, tick_s=float(cfg.tick_s),
                         n_links=M, n_preferences=N, simulated=0, programs=0, compile_s=0.0,
                         run_s=0.0)

    def extra(i: int) -> dict:
        return {"buffer_pkts": float(specs[i].buffer_pkts), "random_loss": float(specs[i].loss)}

    if not per_pref:
        batch = build_links(specs, cfg, horizon)
        cap = np.asarray(capacity.mean_rate_jnp(batch.sched)) / cfg.tick_s
        params = _batched_params(m, M, cfg.n_flows, cap, init_rate_frac)
        res, c = _run_cached(cfg, m.controller, timeline, batch, params, link_keys)
        out.simulated, out.programs = M, 1
        out.compile_s, out.run_s = c, res.wall_s
        base = [_link_row(res, i, W[0]) for i in range(M)]

        def col(k: str) -> np.ndarray:
            return np.asarray([r[k] for r in base], np.float64)[None, :]

        # every (preference, link) reward at once: (N, 1, 3) weights against (1, M) totals
        rewards = np.asarray(metrics.mocc_reward(W[:, None, :], col("utilization"), 1.0,
                                                 col("mean_rtt_ms"), col("rtt_floor_ms"),
                                                 col("loss_rate")), np.float64)
        for p, w in enumerate(W):
            for i, r in enumerate(base):
                out.rows.append({"pref": p, "w_thr": float(w[0]), "w_lat": float(w[1]),
                                 "w_loss": float(w[2]), "link": i, **r,
                                 "reward": float(rewards[p, i]), **extra(i)})
        return out

    # prefs per program: the whole grid, or as many whole preferences as max_links holds
    P = N if max_links is None else max(1, min(N, int(max_links) // M))
    batch = build_links(specs * P, cfg, horizon)  # preference-major: index = p * M + link
    cap = np.asarray(capacity.mean_rate_jnp(batch.sched)) / cfg.tick_s
    params0 = _batched_params(m, P * M, cfg.n_flows, cap, init_rate_frac)
    keys = jnp.tile(link_keys, (P, 1))
    for start in range(0, N, P):
        real = list(range(start, min(start + P, N)))
        idx = real + [real[-1]] * (P - len(real))  # padding: copies of the last, dropped
        w_links = np.repeat(W[idx], M, axis=0)  # (P * M, 3)
        pref = jnp.asarray(np.broadcast_to(w_links[:, None, :], (P * M, cfg.n_flows, 3)),
                           jnp.float32)
        res, c = _run_cached(cfg, m.controller, timeline, batch, params0.replace(pref=pref),
                             keys)
        out.programs += 1
        out.compile_s += c
        out.run_s += res.wall_s
        for j, p in enumerate(real):
            for i in range(M):
                row = _link_row(res, j * M + i, W[p])
                out.rows.append({"pref": p, "w_thr": float(W[p][0]), "w_lat": float(W[p][1]),
                                 "w_loss": float(W[p][2]), "link": i, **row, **extra(i)})
    out.simulated = out.programs * P * M
    return out
