"""Scenarios: a distribution over bottleneck links and flow schedules, loaded from TOML presets.

A learned congestion controller is trained and judged on *many* links, not one, and the papers
it reproduces (Aurora, MOCC, AUTO, Astraea, Pareto, ZiXia) each describe their link population as
ranges ("bandwidth 1-5 Mbps, queue 2-2981 packets, ..."). A ``Scenario`` holds such a population
and ``Scenario.sample`` draws concrete, validated ``LinkSpec`` values from it, deterministically
from a seed, so that a batch of links can be built and simulated at once.

TOML schema (every table and key is checked; an unknown key is an error)::

    name = "astraea-train"            # optional, defaults to the file name
    description = "..."               # optional
    source = "Liao et al., EuroSys'24, Table 3"   # citation, optional for user files
    duration_s = 30                   # run length, > 0
    max_flows = 5                     # optional, defaults to the largest flow count

    [link]
    bandwidth_mbps = {uniform = [40, 160]}   # needed by kind "constant", by "steps" without
                                              # values_mbps (one draw per change point) and by
                                              # "poisson" (its mean rate, one draw per link)
    buffer_bdp = {log_uniform = [0.1, 16]}   # exactly one of buffer_bdp / buffer_pkts
    loss = 0.0                                # random loss probability, [0, 1); default 0
    jitter_ms = 1.2                           # senders' per-packet jitter width, one draw per
                                              # link (LinkSpec.jitter_ms); default 0; below every
                                              # RTT the flows can draw

    [link.capacity]                   # optional; default kind = "constant"
    kind = "steps"                    # "constant" | "steps" | "trace" | "poisson"
    values_mbps = [12, 60]            # steps: fixed cycle, or {choice = [[12, 60], [50]]}
    interval_s = 10                   # steps: time between changes (a distribution)
    redraw_interval = true            # steps: draw interval_s at every change (else once a link)
    random_phase = false              # steps with values_mbps: start the cycle at a random value
    files = ["traces/lte.trace"]      # trace: mahimahi files, one drawn per link; relative paths
                                      # are relative to the TOML file
    period_s = 60                     # poisson: length of the generated trace before it repeats
                                      # (default duration_s); see "Poisson capacity" below

    [flows]
    count = {int_uniform = [2, 5]}    # flows per link, default 1
    rtt_ms = {uniform = [10, 140]}    # base RTT (propagation, both ways)
    shared_rtt = false                # true (default): one RTT draw per link for all its flows
    start_s = {uniform = [0, 10]}     # per-flow start time, default 0; sorted (flow 0 first)
    first_at_zero = true              # flow 0 starts at t = 0 (default false)
    lifetime_s = {uniform = [15, 30]} # per-flow lifetime; absent = every flow runs to the end
    handshake = true                  # each flow opens with SYN/SYN-ACK: data one RTT after its
                                      # start (LinkSpec.handshake); default false
    access_ms = {uniform = [0, 10]}   # per-flow one-way delay from the sender to the bottleneck
                                      # (LinkSpec.access_ms); absent = 0; at most half of every
                                      # RTT the flows can draw

Fixed per-flow schedules (evaluation runs: Astraea §5.1.1's three flows started 40 s apart,
§5.1.2's RTTs of 40-200 ms) are lists, one value per flow (flow 0 first); a link of n flows
takes the first n. Each list holds as many values as the largest ``count``, which defaults to
the lists' length. Lists draw nothing, so they never shift the draws of the other fields::

    rtt_ms = [40, 80, 120, 160, 200]  # flow i's base RTT (instead of a distribution; then
                                      # shared_rtt must be false or absent)
    start_s = [0, 40, 80]             # flow i's start time, non-decreasing
    stagger_s = 40                    # or: flow i starts at i x stagger_s (not with start_s)
    stop_s = [120, 160, 200]          # flow i's stop time, after its start (not with lifetime_s)
    controllers = ["agent", "cubic"]  # who sends on flow i: "agent" (the policy being trained or
                                      # evaluated) or a classic controller's name (ccjax.cc)

A distribution is a plain number (a constant), ``{uniform = [lo, hi]}``,
``{log_uniform = [lo, hi]}`` (uniform in log space, lo > 0), ``{choice = [a, b, ...]}`` (each
value equally likely) or ``{int_uniform = [lo, hi]}`` (integers, both ends included).

Poisson capacity (``kind = "poisson"``): each link gets its own mahimahi-style delivery trace
(``ccjax.sim.capacity.poisson_stamps``) whose one-packet delivery opportunities arrive as a
Poisson process at the link's ``bandwidth_mbps`` (exponential gaps), as emulated cellular links
are (AUTO section 5.2.2). The trace is generated from the sample's seed, so the same seed gives
the same trace; it then runs exactly as a ``trace`` link does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccjax.errors import ConfigError
from ccjax.sim.capacity import poisson_stamps
from ccjax.sim.link import MAX_BUFFER_PKTS, LinkSpec
from ccjax.sim.trace import load_mahimahi, mean_rate_bytes_per_s
from ccjax.units import PACKET_BYTES, mbps_to_bytes_per_s

__all__ = [
    "Capacity",
    "Dist",
    "FlowDist",
    "LinkDist",
    "Scenario",
    "list_scenarios",
    "load_scenario",
    "presets_dir",
]

DIST_KINDS = ("uniform", "log_uniform", "choice", "int_uniform")
CAPACITY_KINDS = ("constant", "steps", "trace", "poisson")
#: Upper bound on the capacity segments one sampled link may need: the segment count is a static
#: shape of the compiled simulator (``SimConfig.schedule_len``), so it must stay modest.
MAX_SEGMENTS = 10_000
#: Longest ``period_s`` of a poisson trace. Its schedule has up to one segment per millisecond
#: (``trace_segments``: one per change in the per-ms count; about 350 a second at 3 Mbps), and
#: that count is the compiled simulator's static ``schedule_len``, so an hour caps it at 3.6e6.
MAX_POISSON_PERIOD_S = 3600.0
#: Most delivery opportunities one poisson trace may hold (int64 stamps: 80 MB), so a fast link
#: with a long period fails on load rather than exhausting memory on sampling.
MAX_POISSON_PKTS = 10_000_000

_DIST_HELP = (
    "a number or one of {uniform = [lo, hi]}, {log_uniform = [lo, hi]}, "
    "{choice = [a, b, ...]}, {int_uniform = [lo, hi]}"
)


# ----------------------------------------------------------------------------------------------
# Distributions


@dataclass(frozen=True)
class Dist:
    """One scalar distribution: ``kind`` in const/uniform/log_uniform/choice/int_uniform.

    ``params`` is ``(value,)`` for const, ``(lo, hi)`` for the ranges and the values for choice.
    A const draws no random numbers, so adding a constant field never shifts other draws.
    """

    kind: str
    params: tuple[float, ...]

    @property
    def lo(self) -> float:
        """Smallest value the distribution can produce."""
        return float(min(self.params))

    @property
    def hi(self) -> float:
        """Largest value the distribution can produce."""
        return float(max(self.params))

    @property
    def is_const(self) -> bool:
        return self.kind == "const" or self.lo == self.hi

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draw ``size`` values (float64; integral values for int_uniform)."""
        p = self.params
        if self.kind == "const":
            return np.full(size, p[0], dtype=np.float64)
        if self.kind == "uniform":
            return rng.uniform(p[0], p[1], size)
        if self.kind == "log_uniform":
            return np.exp(rng.uniform(math.log(p[0]), math.log(p[1]), size))
        if self.kind == "choice":
            return np.asarray(p, dtype=np.float64)[rng.integers(0, len(p), size)]
        if self.kind == "int_uniform":
            return rng.integers(int(p[0]), int(p[1]) + 1, size).astype(np.float64)
        raise AssertionError(self.kind)  # parse_dist admits no other kind

    def draw(self, rng: np.random.Generator) -> float:
        """Draw one value."""
        return float(self.sample(rng, 1)[0])


@dataclass(frozen=True)
class _Bound:
    """Allowed values of one field, used to check a distribution's support on load."""

    lo: float = -math.inf
    lo_open: bool = False
    hi: float = math.inf
    hi_open: bool = False
    integer: bool = False
    unit: str = ""

    def ok(self, v: float) -> bool:
        if not math.isfinite(v):
            return False
        if self.integer and v != int(v):
            return False
        if v < self.lo or (self.lo_open and v == self.lo):
            return False
        return not (v > self.hi or (self.hi_open and v == self.hi))

    def describe(self) -> str:
        parts = []
        if self.lo > -math.inf:
            parts.append(f"{'>' if self.lo_open else '>='} {self.lo:g}")
        if self.hi < math.inf:
            parts.append(f"{'<' if self.hi_open else '<='} {self.hi:g}")
        what = "integers" if self.integer else "values"
        return f"{what} must be {' and '.join(parts)}{' ' + self.unit if self.unit else ''}"


_POSITIVE = {"lo": 0.0, "lo_open": True}


class _Where:
    """Names the file in error messages: ``sims/foo.toml: link.loss=... is invalid: ...``."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, key: str, value: object, why: str) -> ConfigError:
        return ConfigError(f"{self.origin}: {key}={value!r} is invalid: {why}")

    def missing(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"{self.origin}: {key} is missing: {why}")


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _parse_dist(raw: object, key: str, where: _Where, bound: _Bound) -> Dist:
    """Turn a TOML value into a ``Dist``, checking its syntax and that its support is allowed."""
    if _is_number(raw):
        d = Dist("const", (float(raw),))
    elif isinstance(raw, dict):
        if len(raw) != 1:
            raise where.fail(key, raw, f"needs exactly one distribution kind ({_DIST_HELP})")
        ((kind, args),) = raw.items()
        if kind not in DIST_KINDS:
            raise where.fail(key, raw, f"unknown distribution kind {kind!r}; use "
                             + ", ".join(DIST_KINDS))
        if kind == "choice":
            if not isinstance(args, list) or not args or not all(_is_number(a) for a in args):
                raise where.fail(key, raw, "choice needs a non-empty list of numbers")
            d = Dist("choice", tuple(float(a) for a in args))
        else:
            if (not isinstance(args, list) or len(args) != 2
                    or not all(_is_number(a) for a in args)):
                raise where.fail(key, raw, f"{kind} needs [lo, hi], two numbers")
            lo, hi = float(args[0]), float(args[1])
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise where.fail(key, raw, "lo and hi must be finite")
            if lo > hi:
                raise where.fail(key, raw, "lo must be <= hi")
            if kind == "log_uniform" and lo <= 0:
                raise where.fail(key, raw, "log_uniform needs lo > 0")
            if kind == "int_uniform" and not all(isinstance(a, int) for a in args):
                raise where.fail(key, raw, "int_uniform needs integer lo and hi")
            d = Dist(kind, (lo, hi))
    else:
        raise where.fail(key, raw, f"must be {_DIST_HELP}")
    if bound.integer and d.kind in ("uniform", "log_uniform") and d.lo != d.hi:
        raise where.fail(key, raw, "needs whole numbers: use a number, int_uniform or choice")
    for v in d.params:
        if not bound.ok(v):
            raise where.fail(key, raw, bound.describe())
    return d


# ----------------------------------------------------------------------------------------------
# Scenario


@dataclass(frozen=True)
class Capacity:
    """How a link's capacity varies over time (see the module docstring for the TOML keys).

    ``cycles`` holds the candidate ``values_mbps`` cycles (one is drawn per link; a single-value
    cycle is a constant link). ``None`` means step values are drawn from the link's bandwidth
    distribution at each change point.
    """

    kind: str = "constant"
    cycles: tuple[tuple[float, ...], ...] | None = None
    interval_s: Dist | None = None
    redraw_interval: bool = True
    random_phase: bool = False
    files: tuple[Path, ...] = ()
    traces: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)
    #: poisson: seconds of generated trace (it repeats after that); None: the scenario's duration
    period_s: float | None = None


@dataclass(frozen=True)
class LinkDist:
    """Distribution of one link's bandwidth, buffer, random loss and capacity variation."""

    bandwidth_mbps: Dist | None
    buffer_pkts: Dist | None
    buffer_bdp: Dist | None
    loss: Dist
    capacity: Capacity
    #: the senders' jitter width, ms (``LinkSpec.jitter_ms``); None: none
    jitter_ms: Dist | None = None


@dataclass(frozen=True)
class FlowDist:
    """Distribution of the flows crossing one link: how many, their RTTs and lifetimes."""

    count: Dist
    rtt_ms: Dist
    shared_rtt: bool
    start_s: Dist
    first_at_zero: bool
    lifetime_s: Dist | None
    #: each flow opens with a handshake (``LinkSpec.handshake``)
    handshake: bool = False
    #: per-flow one-way sender-to-bottleneck delay, ms (``LinkSpec.access_ms``); None: 0
    access_ms: Dist | None = None
    #: fixed per-flow values (the module docstring's lists), one per flow slot; None: drawn
    rtt_list: tuple[float, ...] | None = None
    start_list: tuple[float, ...] | None = None
    stop_list: tuple[float, ...] | None = None
    #: flow i starts at i x ``stagger_s``; None: start times are drawn (or listed)
    stagger_s: float | None = None
    #: who sends on flow i: ``AGENT`` or a classic controller's name; None: not assigned (the
    #: caller's choice, as ``ccjax simulate --cc`` makes it)
    controllers: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Scenario:
    """A named distribution over links and flow schedules; ``sample`` draws ``LinkSpec`` values.

    Built by ``load_scenario`` / ``Scenario.from_toml`` / ``Scenario.from_dict``, which validate
    every field, so a loaded scenario always samples valid links.
    """

    name: str
    description: str
    source: str
    duration_s: float
    max_flows: int
    link: LinkDist
    flows: FlowDist
    path: Path | None = None

    # -- loading --------------------------------------------------------------------------

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> Scenario:
        """Load and validate a scenario TOML file; trace paths are resolved next to it."""
        p = Path(path)
        origin = _display(p)
        if not p.exists():
            raise ConfigError(f"scenario={origin!r} is invalid: no such file")
        from ccjax.presets import read_toml  # a folder too is one line there

        data = read_toml(p, origin)
        return cls.from_dict(data, origin=origin, base_dir=p.resolve().parent,
                             default_name=p.stem, path=p.resolve())

    @classmethod
    def from_dict(
        cls,
        data: dict[str, Any],
        *,
        origin: str = "<scenario>",
        base_dir: str | os.PathLike[str] | None = None,
        default_name: str = "scenario",
        path: Path | None = None,
    ) -> Scenario:
        """Validate a parsed TOML document (``origin`` prefixes every error message)."""
        return _parse(data, _Where(origin), Path(base_dir) if base_dir else Path.cwd(),
                      default_name, path)

    # -- sampling -------------------------------------------------------------------------

    def sample(self, seed_or_rng: Any, n_links: int) -> list[LinkSpec]:
        """Draw ``n_links`` links, deterministically from the seed.

        ``seed_or_rng`` is an int, a ``numpy.random.Generator`` (its stream is consumed), a
        ``numpy.random.SeedSequence`` or a JAX PRNG key (typed or raw ``uint32``). Links are drawn
        one after another from one stream, so the first k links of ``sample(s, n)`` equal
        ``sample(s, k)``.
        """
        if (not isinstance(n_links, (int, np.integer)) or isinstance(n_links, bool)
                or n_links < 1):
            raise ConfigError(f"n_links={n_links!r} is invalid: a positive integer")
        rng = _as_rng(seed_or_rng)
        return [self._sample_link(rng) for _ in range(int(n_links))]

    def _sample_link(self, rng: np.random.Generator) -> LinkSpec:
        L, F = self.link, self.flows
        n = int(F.count.draw(rng))
        cap, mean_mbps = self._sample_capacity(rng)
        # (fixed lists draw nothing: the other fields' draws are those without them)
        if F.rtt_list is not None:
            rtt = list(F.rtt_list[:n])
        else:
            rtt = ([F.rtt_ms.draw(rng)] * n if F.shared_rtt
                   else F.rtt_ms.sample(rng, n).tolist())
        if F.start_list is not None:
            start = np.asarray(F.start_list[:n], np.float64)
        elif F.stagger_s is not None:
            start = np.arange(n, dtype=np.float64) * F.stagger_s
        elif F.first_at_zero:
            start = np.concatenate([[0.0], np.sort(F.start_s.sample(rng, n - 1))])
        else:
            start = np.sort(F.start_s.sample(rng, n))
        stop = None
        if F.stop_list is not None:
            stop = list(F.stop_list[:n])
        elif F.lifetime_s is not None:
            stop = (start + F.lifetime_s.sample(rng, n)).tolist()
        if L.buffer_bdp is not None:
            bdp_pkts = mbps_to_bytes_per_s(mean_mbps) * max(rtt) * 1e-3 / PACKET_BYTES
            buf = L.buffer_bdp.draw(rng) * bdp_pkts
        else:
            assert L.buffer_pkts is not None
            buf = L.buffer_pkts.draw(rng)
        buf = float(max(1, round(buf)))
        loss = L.loss.draw(rng)
        # drawn after the older fields, and only where given: presets without them draw the
        # same links as before they existed
        jitter = 0.0 if L.jitter_ms is None else L.jitter_ms.draw(rng)
        access = None if F.access_ms is None else tuple(F.access_ms.sample(rng, n).tolist())
        return LinkSpec(**cap, buffer_pkts=buf, loss=loss, rtt_ms=tuple(rtt),
                        start_s=tuple(start.tolist()),
                        stop_s=None if stop is None else tuple(stop),
                        handshake=F.handshake, access_ms=access, jitter_ms=jitter)

    def _sample_capacity(self, rng: np.random.Generator) -> tuple[dict[str, Any], float]:
        """LinkSpec capacity fields and the link's time-average capacity (Mbps, for BDP)."""
        c = self.link.capacity
        if c.kind == "trace":
            i = int(rng.integers(0, len(c.traces)))
            stamps = c.traces[i]
            period_ms = max(int(stamps[-1]), 1)
            mean = stamps.size * PACKET_BYTES * 8 / (period_ms * 1e-3) / 1e6
            return {"trace": stamps, "trace_name": str(c.files[i])}, mean
        bw = self.link.bandwidth_mbps
        if c.kind == "poisson":
            assert bw is not None
            v = bw.draw(rng)
            # The trace gets its own stream, seeded by one draw from the link stream: the fields
            # drawn after it (RTT, buffer, loss, ...) do not shift with the trace's length.
            sub_seed = int(rng.integers(0, 2**63))
            stamps = poisson_stamps(np.random.default_rng(sub_seed), mbps_to_bytes_per_s(v),
                                    c.period_s if c.period_s is not None else self.duration_s)
            stamps.flags.writeable = False  # as file traces: LinkSpecs hold it, nobody edits it
            # bandwidth_mbps carries the nominal mean (the trace governs the link): reports and
            # the spec show the rate the scenario asked for (a 60 s trace realises it to ~1 %)
            mean = mean_rate_bytes_per_s(stamps) * 8 / 1e6  # realised, as for file traces
            return ({"trace": stamps, "trace_name": f"poisson({v:.6g} Mbps, seed {sub_seed})",
                     "bandwidth_mbps": (v,)}, mean)
        if c.kind == "constant":
            assert bw is not None
            v = bw.draw(rng)
            return {"bandwidth_mbps": (v,), "steps_s": (0.0,)}, v
        assert c.interval_s is not None
        T = self.duration_s
        if c.cycles is not None:
            cycle = c.cycles[int(rng.integers(0, len(c.cycles)))] if len(c.cycles) > 1 \
                else c.cycles[0]
            if c.random_phase and len(cycle) > 1:
                k = int(rng.integers(0, len(cycle)))
                cycle = cycle[k:] + cycle[:k]
            if len(cycle) == 1:
                return {"bandwidth_mbps": cycle, "steps_s": (0.0,)}, cycle[0]
            if c.interval_s.is_const or not c.redraw_interval:
                iv = c.interval_s.draw(rng)
                steps = tuple(float(i * iv) for i in range(len(cycle)))
                return ({"bandwidth_mbps": cycle, "steps_s": steps, "period_s": iv * len(cycle)},
                        float(np.mean(cycle)))
            next_value: Callable[[int], float] = lambda i: cycle[i % len(cycle)]
        else:
            assert bw is not None
            next_value = lambda i: bw.draw(rng)
        # A schedule without a period, generated up to the end of the run.
        fixed_iv = None if c.redraw_interval else c.interval_s.draw(rng)
        times, values = [0.0], [next_value(0)]
        while True:
            t = times[-1] + (fixed_iv if fixed_iv is not None else c.interval_s.draw(rng))
            if t >= T:
                break
            times.append(t)
            values.append(next_value(len(values)))
        ends = np.append(np.asarray(times[1:]), T)
        mean = float(np.sum(np.asarray(values) * (ends - np.asarray(times))) / T)
        return {"bandwidth_mbps": tuple(values), "steps_s": tuple(times)}, mean


# ----------------------------------------------------------------------------------------------
# Parsing


def _take(table: dict[str, Any], allowed: Sequence[str], prefix: str, where: _Where) -> None:
    """Reject keys outside ``allowed`` (a typo must not silently fall back to a default)."""
    for k in table:
        if k not in allowed:
            raise where.fail(prefix + k, table[k], "unknown key; allowed: " + ", ".join(allowed))


def _table(data: dict[str, Any], key: str, prefix: str, where: _Where) -> dict[str, Any]:
    v = data.get(key, {})
    if not isinstance(v, dict):
        raise where.fail(prefix + key, v, "must be a table")
    return v


def _opt_dist(t: dict[str, Any], key: str, prefix: str, where: _Where,
              bound: _Bound) -> Dist | None:
    """``key``'s distribution where the table gives it, else None."""
    return _parse_dist(t[key], prefix + key, where, bound) if key in t else None


def _bool(t: dict[str, Any], key: str, prefix: str, where: _Where, default: bool) -> bool:
    v = t.get(key, default)
    if not isinstance(v, bool):
        raise where.fail(prefix + key, v, "must be true or false")
    return v


def _str(t: dict[str, Any], key: str, where: _Where, default: str) -> str:
    v = t.get(key, default)
    if not isinstance(v, str):
        raise where.fail(key, v, "must be a string")
    return v


def _parse(data: dict[str, Any], where: _Where, base_dir: Path, default_name: str,
           path: Path | None) -> Scenario:
    _take(data, ("name", "description", "source", "duration_s", "max_flows", "link", "flows"),
          "", where)
    name = _str(data, "name", where, default_name)
    if not name:
        raise where.fail("name", name, "must not be empty")
    description = _str(data, "description", where, "")
    source = _str(data, "source", where, "")
    if "duration_s" not in data:
        raise where.missing("duration_s", "the run length in seconds is required")
    duration = data["duration_s"]
    if not _is_number(duration) or not math.isfinite(duration) or duration <= 0:
        raise where.fail("duration_s", duration, "must be a number > 0 s")
    duration = float(duration)

    link = _parse_link(_table(data, "link", "", where), where, base_dir, duration)
    flows = _parse_flows(_table(data, "flows", "", where), where)
    start_key = "flows.stagger_s" if flows.stagger_s is not None else "flows.start_s"
    start_raw = data["flows"].get(start_key.split(".")[1])
    if flows.start_s.hi >= duration:
        raise where.fail(start_key, start_raw,
                         f"start times must be < duration_s ({duration:g} s); a flow starting "
                         "at or after the end never sends")

    rtt_lo, rtt_hi = flows.rtt_ms.lo, flows.rtt_ms.hi
    if link.jitter_ms is not None and link.jitter_ms.hi >= rtt_lo:
        raise where.fail("link.jitter_ms", data["link"]["jitter_ms"],
                         f"must stay below every RTT the flows can draw (flows.rtt_ms from "
                         f"{rtt_lo:g} ms)")
    if flows.access_ms is not None and flows.access_ms.hi > rtt_lo / 2:
        raise where.fail("flows.access_ms", data["flows"]["access_ms"],
                         f"must be at most half of every RTT the flows can draw ({rtt_lo / 2:g} "
                         f"ms: flows.rtt_ms from {rtt_lo:g} ms)")
    # a flow's data starts after its access delay, and one RTT later with the handshake
    lead_ms = ((flows.access_ms.hi if flows.access_ms is not None else 0.0)
               + (rtt_hi if flows.handshake else 0.0))
    what = " and ".join(w for w, on in (("flows.handshake", flows.handshake),
                                        ("flows.access_ms", flows.access_ms is not None)) if on)
    if lead_ms > 0 and flows.start_s.hi + 1e-3 * lead_ms >= duration:
        raise where.fail(start_key, start_raw if start_raw is not None else 0.0,
                         f"with {what} a flow's data can start "
                         f"{flows.start_s.hi + 1e-3 * lead_ms:g} s in, not before duration_s "
                         f"({duration:g} s); start flows earlier or run longer")
    if lead_ms > 0 and flows.stop_list is not None:
        starts = (flows.start_list if flows.start_list is not None
                  else flows.start_s.params if flows.stagger_s is not None
                  else (flows.start_s.hi,) * len(flows.stop_list))
        for i, (a, b) in enumerate(zip(starts, flows.stop_list, strict=True)):
            if b <= a + 1e-3 * lead_ms:
                raise where.fail("flows.stop_s", data["flows"]["stop_s"],
                                 f"allowed: with {what} each flow's stop time after its data "
                                 f"starts (flow {i}: {b:g} s <= {a + 1e-3 * lead_ms:g} s)")
    if lead_ms > 0 and flows.lifetime_s is not None and flows.lifetime_s.lo <= 1e-3 * lead_ms:
        raise where.fail("flows.lifetime_s", data["flows"]["lifetime_s"],
                         f"with {what} a flow must live longer than its data takes to start, "
                         f"up to {lead_ms:g} ms after its start time")

    max_hi = int(flows.count.hi)
    max_flows = data.get("max_flows", max_hi)
    if (not isinstance(max_flows, int) or isinstance(max_flows, bool)
            or not 1 <= max_flows <= 4096):
        raise where.fail("max_flows", max_flows, "must be an integer from 1 to 4096")
    if max_flows < max_hi:
        raise where.fail("max_flows", max_flows,
                         f"must be >= the largest flows.count ({max_hi})")
    return Scenario(name=name, description=description, source=source, duration_s=duration,
                    max_flows=max_flows, link=link, flows=flows, path=path)


def _parse_link(t: dict[str, Any], where: _Where, base_dir: Path, duration: float) -> LinkDist:
    p = "link."
    _take(t, ("bandwidth_mbps", "buffer_pkts", "buffer_bdp", "loss", "capacity", "jitter_ms"), p,
          where)
    cap = _parse_capacity(_table(t, "capacity", p, where), where, base_dir, duration)

    bw = None
    needs_bw = (cap.kind in ("constant", "poisson")
                or (cap.kind == "steps" and cap.cycles is None))
    if "bandwidth_mbps" in t:
        if not needs_bw:
            why = ("not used with link.capacity.kind = 'trace'" if cap.kind == "trace"
                   else "not used with link.capacity.values_mbps; remove one of them")
            raise where.fail(p + "bandwidth_mbps", t["bandwidth_mbps"], why)
        bw = _parse_dist(t["bandwidth_mbps"], p + "bandwidth_mbps", where,
                         _Bound(**_POSITIVE, unit="Mbps"))
    elif needs_bw:
        why = ("the mean rate of the poisson deliveries is required" if cap.kind == "poisson"
               else "the link bandwidth is required")
        raise where.missing(p + "bandwidth_mbps", why)
    if cap.kind == "poisson":
        assert bw is not None
        period = cap.period_s if cap.period_s is not None else duration
        pkts = mbps_to_bytes_per_s(bw.hi) / PACKET_BYTES * period
        if pkts > MAX_POISSON_PKTS:
            raise where.fail(p + "bandwidth_mbps", t["bandwidth_mbps"],
                             f"a poisson trace at {bw.hi:g} Mbps over {period:g} s holds "
                             f"{pkts:.3g} packets, more than {MAX_POISSON_PKTS:g}; use a "
                             "shorter link.capacity.period_s")

    if ("buffer_pkts" in t) == ("buffer_bdp" in t):
        raise where.fail(p + "buffer_pkts", t.get("buffer_pkts"),
                         "give exactly one of link.buffer_pkts and link.buffer_bdp")
    buf_pkts = buf_bdp = None
    if "buffer_pkts" in t:
        buf_pkts = _parse_dist(t["buffer_pkts"], p + "buffer_pkts", where,
                               _Bound(lo=1.0, hi=MAX_BUFFER_PKTS, unit="packets"))
    else:
        buf_bdp = _parse_dist(t["buffer_bdp"], p + "buffer_bdp", where,
                              _Bound(**_POSITIVE, unit="x BDP"))
    loss = _parse_dist(t.get("loss", 0.0), p + "loss", where,
                       _Bound(lo=0.0, hi=1.0, hi_open=True, unit="(a probability)"))
    jitter = _opt_dist(t, "jitter_ms", p, where, _Bound(lo=0.0, unit="ms"))
    return LinkDist(bandwidth_mbps=bw, buffer_pkts=buf_pkts, buffer_bdp=buf_bdp, loss=loss,
                    capacity=cap, jitter_ms=jitter)


def _parse_capacity(t: dict[str, Any], where: _Where, base_dir: Path,
                    duration: float) -> Capacity:
    p = "link.capacity."
    kind = t.get("kind", "constant")
    if kind not in CAPACITY_KINDS:
        raise where.fail(p + "kind", kind, "must be one of " + ", ".join(CAPACITY_KINDS))
    if kind == "constant":
        _take(t, ("kind",), p, where)
        return Capacity()
    if kind == "trace":
        _take(t, ("kind", "files"), p, where)
        files = t.get("files")
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise where.fail(p + "files", files, "needs a non-empty list of trace file paths")
        paths, traces = [], []
        for i, f in enumerate(files):
            fp = Path(f).expanduser()
            fp = fp if fp.is_absolute() else base_dir / fp
            try:
                stamps = load_mahimahi(fp)
            except ConfigError as e:
                raise ConfigError(f"{where.origin}: {p}files[{i}]: {e}") from None
            stamps.flags.writeable = False  # shared by every LinkSpec drawn from this file
            traces.append(stamps)
            paths.append(fp)
        return Capacity(kind="trace", files=tuple(paths), traces=tuple(traces))
    if kind == "poisson":
        _take(t, ("kind", "period_s"), p, where)
        period = t.get("period_s")
        if period is not None and (not _is_number(period) or not math.isfinite(period)
                                   or not 1e-3 <= period <= MAX_POISSON_PERIOD_S):
            raise where.fail(p + "period_s", period,
                             f"must be a number from 0.001 to {MAX_POISSON_PERIOD_S:g} s")
        return Capacity(kind="poisson", period_s=None if period is None else float(period))

    _take(t, ("kind", "values_mbps", "interval_s", "redraw_interval", "random_phase"), p, where)
    if "interval_s" not in t:
        raise where.missing(p + "interval_s", "steps need the time between changes")
    interval = _parse_dist(t["interval_s"], p + "interval_s", where, _Bound(**_POSITIVE, unit="s"))
    if math.ceil(duration / interval.lo) + 1 > MAX_SEGMENTS:
        raise where.fail(p + "interval_s", t["interval_s"],
                         f"too short: duration_s / interval > {MAX_SEGMENTS} capacity segments")
    cycles = None
    if "values_mbps" in t:
        cycles = _parse_cycles(t["values_mbps"], p + "values_mbps", where)
    random_phase = _bool(t, "random_phase", p, where, False)
    if random_phase and cycles is None:
        raise where.fail(p + "random_phase", True, "only applies with link.capacity.values_mbps")
    return Capacity(kind="steps", cycles=cycles, interval_s=interval,
                    redraw_interval=_bool(t, "redraw_interval", p, where, True),
                    random_phase=random_phase)


def _parse_cycles(raw: object, key: str, where: _Where) -> tuple[tuple[float, ...], ...]:
    """``[a, b, ...]`` (one cycle) or ``{choice = [[a, b], [c], ...]}`` (one cycle per link)."""
    if isinstance(raw, dict) and list(raw) == ["choice"] and isinstance(raw["choice"], list):
        candidates = raw["choice"]
        if not candidates:
            raise where.fail(key, raw, "choice needs at least one list of Mbps values")
    elif isinstance(raw, list):
        candidates = [raw]
    else:
        raise where.fail(key, raw, "must be a list of Mbps values or {choice = [[...], ...]}")
    out = []
    for c in candidates:
        if (not isinstance(c, list) or not c
                or not all(_is_number(v) and math.isfinite(v) and v > 0 for v in c)):
            raise where.fail(key, raw, "each cycle must be a non-empty list of numbers > 0 Mbps")
        out.append(tuple(float(v) for v in c))
    return tuple(out)


#: the name ``flows.controllers`` gives the flows the learned policy sends on
AGENT = "agent"


def _parse_list(raw: list, key: str, where: _Where, bound: _Bound) -> tuple[float, ...]:
    """A fixed per-flow list (``flows.rtt_ms = [...]`` and the like), each value in ``bound``."""
    if not raw or not all(_is_number(v) for v in raw):
        raise where.fail(key, raw, "allowed: a non-empty list of numbers, one per flow")
    for v in raw:
        if not bound.ok(float(v)):
            raise where.fail(key, raw, f"allowed: {bound.describe()}")
    return tuple(float(v) for v in raw)


def _parse_controllers(raw: object, key: str, where: _Where) -> tuple[str, ...]:
    from ccjax.cc.registry import CONTROLLERS  # (the registry imports the simulator)

    names = (AGENT, *sorted(CONTROLLERS))
    if not isinstance(raw, list) or not raw or not all(isinstance(c, str) for c in raw):
        raise where.fail(key, raw, f"allowed: a non-empty list of names, one per flow, each "
                         f"{AGENT!r} or a controller name (" + ", ".join(names[1:]) + ")")
    for c in raw:
        if c not in names:
            raise where.fail(key, raw, f"allowed: {AGENT!r} or a controller name ("
                             + ", ".join(names[1:]) + f"), not {c!r}")
    return tuple(raw)


def _parse_flows(t: dict[str, Any], where: _Where) -> FlowDist:
    p = "flows."
    _take(t, ("count", "rtt_ms", "shared_rtt", "start_s", "first_at_zero", "lifetime_s",
              "handshake", "access_ms", "stagger_s", "stop_s", "controllers"), p, where)
    lists = {k: t[k] for k in ("rtt_ms", "start_s", "stop_s", "controllers")
             if isinstance(t.get(k), list)}
    if "stop_s" in t and "stop_s" not in lists:
        raise where.fail(p + "stop_s", t["stop_s"], "allowed: a list of stop times, one per "
                         "flow (lifetime_s takes a distribution)")
    # the largest flow count: given, or the length of the fixed lists
    if "count" in t or not lists:
        count = _parse_dist(t.get("count", 1), p + "count", where,
                            _Bound(lo=1.0, hi=4096.0, integer=True, unit="flows"))
    else:
        count = Dist("const", (float(len(next(iter(lists.values())))),))
    n_max = int(count.hi)
    for k, v in lists.items():
        if len(v) != n_max:
            raise where.fail(p + k, v, f"allowed: one value per flow, {n_max} (the largest "
                             "flows.count)")
    if "rtt_ms" not in t:
        raise where.missing(p + "rtt_ms", "the flows' base RTT is required")
    rtt_list = start_list = stop_list = None
    if "rtt_ms" in lists:
        if t.get("shared_rtt", False):
            raise where.fail(p + "shared_rtt", True, "allowed: false with a list of per-flow "
                             "flows.rtt_ms (one RTT per flow)")
        rtt_list = _parse_list(lists["rtt_ms"], p + "rtt_ms", where,
                               _Bound(**_POSITIVE, unit="ms"))
        rtt = Dist("choice", rtt_list)  # its support, for the checks against every RTT
    else:
        rtt = _parse_dist(t["rtt_ms"], p + "rtt_ms", where, _Bound(**_POSITIVE, unit="ms"))
    stagger = None
    if "stagger_s" in t:
        v = t["stagger_s"]
        if not _is_number(v) or not math.isfinite(v) or v < 0:
            raise where.fail(p + "stagger_s", v, "allowed: a number >= 0 s (flow i starts at "
                             "i x stagger_s)")
        for other in ("start_s", "first_at_zero"):
            if other in t:
                raise where.fail(p + "stagger_s", v, f"allowed: not with flows.{other} (the "
                                 "stagger sets every start time, flow 0's at 0)")
        stagger = float(v)
        start = Dist("choice", tuple(i * stagger for i in range(n_max)))
    elif "start_s" in lists:
        if "first_at_zero" in t:
            raise where.fail(p + "first_at_zero", t["first_at_zero"], "allowed: absent with a "
                             "list of flows.start_s (the list gives flow 0's start)")
        start_list = _parse_list(lists["start_s"], p + "start_s", where,
                                 _Bound(lo=0.0, unit="s"))
        if any(b < a for a, b in zip(start_list, start_list[1:], strict=False)):
            raise where.fail(p + "start_s", lists["start_s"], "allowed: non-decreasing start "
                             "times (flow 0 first, as drawn start times are sorted)")
        start = Dist("choice", start_list)
    else:
        start = _parse_dist(t.get("start_s", 0.0), p + "start_s", where,
                            _Bound(lo=0.0, unit="s"))
    life = _opt_dist(t, "lifetime_s", p, where, _Bound(**_POSITIVE, unit="s"))
    if "stop_s" in lists:
        if life is not None:
            raise where.fail(p + "stop_s", lists["stop_s"], "allowed: not with flows.lifetime_s "
                             "(give one of them)")
        stop_list = _parse_list(lists["stop_s"], p + "stop_s", where, _Bound(lo=0.0, unit="s"))
        starts = (start_list if start_list is not None
                  else start.params if stagger is not None else None)
        for i, b in enumerate(stop_list):
            a = starts[i] if starts is not None else start.hi
            if b <= a:
                raise where.fail(p + "stop_s", lists["stop_s"], f"allowed: each flow's stop "
                                 f"time after its start (flow {i}: {b:g} s <= {a:g} s)")
    controllers = (_parse_controllers(t["controllers"], p + "controllers", where)
                   if "controllers" in t else None)
    access = _opt_dist(t, "access_ms", p, where, _Bound(lo=0.0, unit="ms"))
    return FlowDist(count=count, rtt_ms=rtt,
                    shared_rtt=_bool(t, "shared_rtt", p, where, rtt_list is None),
                    start_s=start, first_at_zero=_bool(t, "first_at_zero", p, where, False),
                    lifetime_s=life, handshake=_bool(t, "handshake", p, where, False),
                    access_ms=access, rtt_list=rtt_list, start_list=start_list,
                    stop_list=stop_list, stagger_s=stagger, controllers=controllers)


# ----------------------------------------------------------------------------------------------
# Seeds, presets


def _as_rng(seed: Any) -> np.random.Generator:
    """A numpy Generator from an int, Generator, SeedSequence or JAX PRNG key."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        if seed < 0:
            raise ConfigError(f"seed={int(seed)} is invalid: must be >= 0")
        return np.random.default_rng(int(seed))
    if hasattr(seed, "dtype") and hasattr(seed, "shape"):
        import jax

        try:
            data = np.asarray(jax.random.key_data(seed)).ravel()
        except (TypeError, ValueError) as e:
            raise TypeError(f"seed_or_rng: not a JAX PRNG key ({e})") from None
        return np.random.default_rng(data.astype(np.uint64))
    raise TypeError(
        f"seed_or_rng={seed!r}: expected an int, numpy Generator/SeedSequence or JAX PRNG key"
    )


def presets_dir() -> Path:
    """Where the named scenario presets live (``ccjax.presets``)."""
    from ccjax.presets import presets_dir as where

    return where("sims")


def list_scenarios() -> list[str]:
    """Names of the shipped presets (sorted), as accepted by ``load_scenario``."""
    d = presets_dir()
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def load_scenario(name_or_path: str | os.PathLike[str]) -> Scenario:
    """Load a preset by name (``"mocc-train"``) or a scenario TOML file by path.

    Anything that looks like a path (a ``PathLike``, a ``.toml`` suffix or a directory separator)
    is read as a file; anything else is a preset name.
    """
    s = os.fspath(name_or_path)
    looks_like_path = (not isinstance(name_or_path, str) or s.endswith(".toml")
                       or os.sep in s or "/" in s)
    p = presets_dir() / f"{s}.toml"
    if not looks_like_path and p.is_file():
        return Scenario.from_toml(p)
    # what the argument is when it is no scenario, said before "no such preset" or "invalid
    # TOML", which would name the wrong thing
    allowed = ("allowed: a preset name (see `ccjax scenarios`) or a scenario .toml file's "
               "path")
    if s and Path(s).is_dir():
        raise ConfigError(f"scenario={s!r} is invalid: it is a folder; {allowed}")
    if Path(s).suffix.lower() == ".trace":
        raise ConfigError(f"scenario={s!r} is invalid: a .trace file is a mahimahi trace, a "
                          "link's capacity, not a scenario (`ccjax simulate --trace PATH` runs "
                          "one; a scenario's [link.capacity] kind = \"trace\" names its files); "
                          f"{allowed}")
    if looks_like_path:
        return Scenario.from_toml(s)
    names = list_scenarios()
    raise ConfigError(
        f"scenario={s!r} is invalid: no such preset; available: "
        f"{', '.join(names) if names else '(none)'} (or give a path to a .toml file)"
    )


def _display(p: Path) -> str:
    """The path as error messages show it: relative to the working directory when inside it."""
    try:
        rel = os.path.relpath(p.resolve())
    except ValueError:  # pragma: no cover - different drive on Windows
        return str(p)
    return rel if not rel.startswith("..") else str(p.resolve())
