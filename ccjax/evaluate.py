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

* ``utilization``: the flow's bytes across the bottleneck / the link's capacity over the run
  (``ccjax.metrics.link_utilization``; MOCC Fig. 5(a-d) "link utilization", Eq. 2's O_thr);
* ``latency_ratio``: mean RTT / base RTT, the mean packet-weighted over delivered bytes as
  ``ccjax simulate`` reports it (``ccjax.metrics.latency_ratio``; MOCC Fig. 5(e-h)); 1 = no
  queueing;
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
import math
import os
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
from ccjax.sim.run import RunResult, make_timeline, run, summarize
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
    tick_s: float
    n_links: int
    rows: list[dict] = field(default_factory=list)
    per_link: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def write_csv(self, path: str | os.PathLike) -> Path:
        """Write the table (one row per method) as CSV."""
        p = Path(path)
        keys = ["method", "kind", "preference", *COLUMNS, "links"]
        with p.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            for r in self.rows:
                pref = r["preference"]
                w.writerow({**r, "preference": ";".join(f"{x:g}" for x in pref)})
        return p


def resolve_method(name: str | os.PathLike, preference: Sequence[float] | None = None,
                   kind: str | None = None) -> Method:
    """A controller name (``cubic``, ``bbr``, ...) or a policy directory (holding
    ``policy.json``; the file's own path works too). With ``kind=None`` names win over
    directories (give ``./cubic`` for a directory called ``cubic``); ``kind="controller"`` or
    ``"policy"`` accepts only that kind. ``preference`` replaces a model's own."""
    from ccjax.envs.build import check_preference

    require(kind in (None, "controller", "policy"), "kind", kind, "controller or policy")
    label = os.fspath(name)
    known = ", ".join(sorted(CONTROLLERS))
    if kind != "policy" and label in CONTROLLERS:
        return Method(label, CONTROLLERS[label], "controller", None)
    if kind == "controller":
        raise ConfigError(f"cc={label!r} is invalid: known controllers are {known}")
    p = Path(label)
    if p.name == "policy.json" and p.is_file():
        p = p.parent
    if not (p.is_dir() and (p / "policy.json").is_file()):
        what = "" if kind == "policy" else f"neither a controller ({known}) nor "
        raise ConfigError(f"{'model' if kind else 'method'}={label!r} is invalid: {what}"
                          "a directory holding policy.json")
    w = None if preference is None else check_preference(preference)
    pc = load_policy_controller(p, w)
    if pc.pref_dim and pc.preference is None:
        raise ConfigError(f"preference=None is invalid for {label!r}: the model stores no "
                          "preference; pass one (w_thr,w_lat,w_loss)")
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
    require(isinstance(seed, int | np.integer) and not isinstance(seed, bool) and seed >= 0,
            "seed", seed, "an integer >= 0")
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


def _link_row(res: RunResult, i: int, w: np.ndarray) -> dict:
    """Flow 0's metrics on link ``i`` (definitions in the module doc)."""
    s = summarize(res, i)
    fl = s["flows"][0]
    delivered = float(np.asarray(res.series.delivered[i, :, 0]).sum())
    cap_bytes = float(np.asarray(res.series.cap_bytes[i]).sum())
    util = float(metrics.link_utilization(delivered, cap_bytes, axis=None))
    lat = float(metrics.latency_ratio(fl["mean_rtt_ms"], fl["base_rtt_ms"]))
    p95 = float(metrics.one_way_delay_from_rtt(fl["p95_rtt_ms"], fl["base_rtt_ms"]))
    dropped = float(np.asarray(res.series.dropped[i, :, 0]).sum())
    loss = float(metrics.loss_rate(dropped, fl["sent_bytes"]))
    reward = float(metrics.mocc_reward(w, util, 1.0, fl["mean_rtt_ms"], fl["base_rtt_ms"], loss))
    return {"utilization": util, "latency_ratio": lat, "p95_delay_ms": p95, "loss_rate": loss,
            "reward": reward, "throughput_mbps": float(fl["throughput_mbps"]),
            "link_utilization": float(s["link"]["utilization"]),
            "capacity_mbps": float(s["link"]["capacity_mbps"]),
            "base_rtt_ms": float(fl["base_rtt_ms"])}


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
    from ccjax.envs.build import check_preference

    _check(links, duration_s, seed, model, tick_s, init_rate_frac)
    if not methods:
        raise ConfigError("methods=[] is invalid: name at least one controller or policy "
                          "directory")
    w_given = None if preference is None else tuple(float(x) for x in
                                                    check_preference(preference))
    resolved: list[Method] = []
    for m in methods:
        m = m if isinstance(m, Method) else resolve_method(m, w_given)
        if m.label not in {r.label for r in resolved}:  # keep order, drop repeats
            resolved.append(m)

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

    w_default = w_given or next((m.preference for m in resolved if m.preference), None) \
        or EQUAL_PREFERENCE
    cfg, horizon = plan(specs, duration_s, n_flows=n_flows, tick_s=tick_s, model=model)
    batch = build_links(specs, cfg, horizon)
    B = len(specs)
    cap = np.asarray(capacity.mean_rate_jnp(batch.sched)) / cfg.tick_s  # bytes/s per link
    # the keys of ccjax.api.simulate: one per link, split from the seed
    keys = jax.random.split(jax.random.PRNGKey(int(seed)), B)
    timeline = make_timeline(duration_s, duration_s, cfg.tick_s)  # totals only

    out = EvalResult(scenario=label, seed=int(seed), duration_s=float(duration_s), model=model,
                     tick_s=float(cfg.tick_s), n_links=B)
    for m in resolved:
        w = np.asarray(m.preference or w_default, np.float64)
        params = _batched_params(m, B, cfg.n_flows, cap, init_rate_frac)
        res = run(cfg, m.controller, batch, params, keys, timeline)
        per = []
        for i, spec in enumerate(specs):
            row = {"method": m.label, "link": i, **_link_row(res, i, w),
                   "buffer_pkts": float(spec.buffer_pkts), "random_loss": float(spec.loss)}
            per.append(row)
        out.per_link.extend(per)
        mean = {c: float(np.mean([r[c] for r in per])) for c in COLUMNS}
        out.rows.append({"method": m.label, "kind": m.kind, "preference": [float(x) for x in w],
                         **mean, "links": B, "compile_s": res.compile_s, "run_s": res.wall_s})
    return out
