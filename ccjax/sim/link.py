"""Static simulator configuration and the dynamic per-link parameter pytree.

Static (changes shapes or code paths, so a new value means a new compile): ``SimConfig``.
Dynamic (a batch of links is a ``vmap`` over it): ``LinkParams``. See DESIGN principle 2.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ccjax.errors import ConfigError, require
from ccjax.sim import capacity
from ccjax.sim.capacity import Schedule
from ccjax.sim.trace import trace_segments, validate_stamps
from ccjax.units import PACKET_BYTES, check_rate_mbps, mbps_to_bytes_per_s

MODELS = ("fluid", "packet")
#: the longest base RTT a link may have (100 s): the ACK delay line holds one slot per tick of it
MAX_RTT_MS = 1e5
#: the largest drop-tail buffer (1e9 packets, 1.5 TB, far beyond any router's): the queue counts
#: bytes in float32, which a buffer of about 2e35 packets overflows into inf (1e39 did)
MAX_BUFFER_PKTS = 1e9
#: the most ticks one run may last (1e9: 11.6 days at 1 ms ticks): ticks are int32, and a run's
#: last tick plus its delay lines (at most as long as the run, and the longest RTT's 1e8 ticks
#: at the finest 1 us tick) stays below ``NEVER_TICK``, the int32 maximum, which means "never"
MAX_TICKS = 10**9
#: how window-based senders (``Decision.rate == 0``) put their window on the wire
WINDOW_SENDERS = ("paced", "ack-clocked")
RECOVERIES = ("cut", "prr")


#: ``LinkParams.stop_tick`` and ``close_tick`` of a flow that never stops
NEVER_TICK = int(np.iinfo(np.int32).max)


@dataclass(frozen=True)
class SimConfig:
    """Static configuration of one compiled simulator.

    ``queue_horizon`` and ``ack_horizon`` are the lengths (ticks) of the two delay lines: the
    first must exceed the longest queueing delay a packet can see, the second the longest base
    RTT. ``plan()`` derives them from concrete links so users rarely set them by hand.
    """

    n_flows: int = 1
    tick_s: float = 1e-3
    model: str = "fluid"
    queue_horizon: int = 1024
    ack_horizon: int = 512
    schedule_len: int = 1
    rtt_bins: int = 64
    #: rate floor of every sender (bytes/s): nothing divides by zero, no sender stalls forever.
    min_rate: float = PACKET_BYTES / 1.0
    #: window floor (bytes): one packet, as a TCP sender after a timeout (RFC 5681 LW = 1 MSS).
    min_cwnd: float = float(PACKET_BYTES)
    #: packet model: stochastic rounding of each tick's packet count (see core.tick)
    pacing_jitter: bool = True
    #: window-based senders: "paced" at cwnd/srtt (Linux with the fq qdisc), or "ack-clocked":
    #: unpaced, each tick sending what the ACKs and loss reports of the last tick freed, at most
    #: two packets per packet reported (RFC 3465's L = 2), as ns-3's and Linux's default TCP do
    window_sender: str = "paced"
    #: ack-clocked: ticks over which a packet group is delivered as the link serves it (one
    #: tick's group of an ACK-clocked sender spans about two; a first window of 10 packets at
    #: 10 Mbps twelve); what a longer burst has left leaves with its last byte (late, never early)
    spread_ticks: int = 16
    #: packet model: each reported loss is retransmitted at once (in PRR, ``recovery``, the next
    #: tick, when it also meets drop-tail), and the retransmission is lost at the link's random
    #: loss rate (``MIStats.retx_lost_bytes``); a loss-based sender then
    #: waits for its retransmission timer, as RFC 6675 SACK recovery without RACK does (ns-3.37).
    #: Off: every loss is recovered by its first retransmission (Linux's RACK-TLP finds a lost
    #: retransmission within about an RTT)
    retx_loss: bool = False
    #: ack-clocked window senders' loss recovery. "cut": the window drops to the controller's
    #: reduced value at once and the sender waits until its flight is below it (RFC 5681/6582
    #: at MI granularity). "prr": RFC 6937 Proportional Rate Reduction with its conservative
    #: bound, ns-3.37's default recovery (``TcpPrrRecovery``): while the flight exceeds the
    #: reduced window the sender sends in proportion to what is delivered, then no more than is
    #: delivered, so it keeps sending through the recovery. Its retransmissions then compete
    #: for the buffer: with ``retx_loss`` each is also lost at the drop-tail share the other
    #: flows' packets met in the tick it is sent (see ``core.tick_begin``)
    recovery: str = "cut"
    #: the links' senders' jitter (``LinkSpec.jitter_ms``) is drawn into the RTT samples; static,
    #: so that links without it cost no draw (``plan`` sets it where a link has jitter, and
    #: ``build_links`` refuses a link with jitter under a config without it)
    rtt_jitter: bool = False

    def __post_init__(self) -> None:
        require(self.model in MODELS, "model", self.model, f"one of {', '.join(MODELS)}")
        require(self.window_sender in WINDOW_SENDERS, "window_sender", self.window_sender,
                f"one of {', '.join(WINDOW_SENDERS)}")
        require(isinstance(self.n_flows, int) and 1 <= self.n_flows <= 4096, "max_flows",
                self.n_flows, "an integer from 1 to 4096")
        require(1e-6 <= self.tick_s <= 1.0, "tick_s", self.tick_s, "from 1e-6 to 1 s")
        for name in ("queue_horizon", "ack_horizon", "schedule_len", "rtt_bins", "spread_ticks"):
            v = getattr(self, name)
            require(isinstance(v, int) and v >= 1, name, v, "a positive integer")
        require(self.rtt_bins >= 4, "rtt_bins", self.rtt_bins, "at least 4")
        require(self.min_rate > 0, "min_rate", self.min_rate, "> 0 bytes/s")
        require(self.min_cwnd > 0, "min_cwnd", self.min_cwnd, "> 0 bytes")
        require(not self.retx_loss or self.model == "packet", "retx_loss", self.retx_loss,
                "False with the fluid model (it draws whole retransmissions: packet model only)")
        require(self.recovery in RECOVERIES, "recovery", self.recovery,
                f"one of {', '.join(RECOVERIES)}")
        require(self.recovery == "cut" or self.window_sender == "ack-clocked", "recovery",
                self.recovery, "'cut' with paced window senders ('prr' needs "
                "window_sender='ack-clocked': a paced sender sends at cwnd/srtt)")
        require(self.recovery == "cut" or self.model == "packet", "recovery", self.recovery,
                "'cut' with the fluid model ('prr' counts whole packets, RFC 6937's CEIL: "
                "packet model only)")


class LinkParams(struct.PyTreeNode):
    """One bottleneck link and the flows that cross it (leading flow axis of size ``n_flows``)."""

    sched: Schedule  # capacity, bytes per tick
    buffer_bytes: jnp.ndarray  # drop-tail buffer
    loss: jnp.ndarray  # random loss probability per packet
    rtt_ticks: jnp.ndarray  # (F,) int32 base RTT (propagation, both ways)
    start_tick: jnp.ndarray  # (F,) int32 first tick the flow's data meets the queue
    stop_tick: jnp.ndarray  # (F,) int32 first tick the flow's data no longer meets it
    syn_tick: jnp.ndarray  # (F,) int32 tick the flow's SYN meets the queue (-1: no handshake)
    open_tick: jnp.ndarray  # (F,) int32 the flow's start time, at its sender (its life begins)
    close_tick: jnp.ndarray  # (F,) int32 the flow's stop time, at its sender (its life ends)
    present: jnp.ndarray  # (F,) bool: flow slot used at all
    jitter_s: jnp.ndarray  # () float32: the senders' per-packet jitter's width (``LinkSpec``)


@dataclass(frozen=True)
class LinkSpec:
    """A link described in edge units (what the CLI and presets give), validated on creation.

    ``bandwidth_mbps`` is a single value (constant capacity) or, with ``steps_s``, the values of a
    piecewise-constant schedule whose i-th value starts at ``steps_s[i]`` (``steps_s[0] == 0``).
    ``trace`` (mahimahi timestamps in ms) replaces the bandwidth entirely.
    """

    bandwidth_mbps: Sequence[float] = (12.0,)
    steps_s: Sequence[float] = (0.0,)
    period_s: float | None = None
    trace: np.ndarray | None = None
    trace_name: str = "trace"
    buffer_pkts: float = 100.0
    loss: float = 0.0
    rtt_ms: Sequence[float] = (40.0,)
    start_s: Sequence[float] = (0.0,)
    stop_s: Sequence[float] | None = None
    #: Each flow opens its connection first (TCP's SYN, SYN-ACK): its data starts one base RTT
    #: after its start time, and its RTT estimate starts from the handshake's sample (RFC 6298
    #: §2), the base RTT plus the queueing delay the SYN met at the bottleneck, as a real or
    #: ns-3 TCP's does. Off (default): data flows from the start time and the estimate starts at
    #: the base RTT.
    handshake: bool = False
    #: One-way delay (ms) from each sender to the bottleneck (default 0: the queue sits at the
    #: sender). A flow's packets reach the queue this long after they are sent; the flow's own
    #: RTT is ``rtt_ms`` all the same, so it shifts when the flow's packets meet the other
    #: flows' there: where flows with different RTTs start together (ns-3's dumbbell puts
    #: ``rtt/2 - btlDelay`` before the bottleneck), and when a SYN crosses it.
    access_ms: Sequence[float] | None = None
    #: The senders' per-packet jitter (ms): each data packet takes an extra delay drawn uniform
    #: in [0, jitter_ms) on its way to the bottleneck, FIFO, as the senders' access links in
    #: ns-3's dumbbell (``sims/ns3/dumbbell.cc``, one bottleneck packet time by default) and
    #: any real path's have. It enters the RTT samples, and with them the sender's smoothed RTT
    #: and what its controller measures: at 10 Mbps, ns-3's idle-path RTT is about half a packet
    #: time above the propagation RTT and the packet's transmission, and ns-3's Vegas, which
    #: compares data RTTs with the SYN's, reads about a packet of queue on an idle path (one flow,
    #: 40 ms, 1 % loss: its window averaged 22.5 packets, ccjax's 25.7 without the jitter). In the
    #: packet model each tick's ACKs carry one draw per flow, in the fluid model the mean,
    #: ``jitter_ms / 2``. What is not modelled: when the packets meet the queue and when their
    #: ACKs come back (ticks, whatever the jitter), the SYN's sample (ns-3's millisecond
    #: timestamps give a SYN sent on the millisecond the propagation RTT), and the queueing
    #: delay's histogram and quantiles (the queue's alone). So it must stay below the shortest
    #: RTT. Default 0: no jitter.
    jitter_ms: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.rtt_ms)
        require(n >= 1, "rtt_ms", list(self.rtt_ms), "at least one flow")
        if self.trace is None:
            bw = list(self.bandwidth_mbps)
            require(len(bw) >= 1, "bandwidth_mbps", bw, "at least one value")
            for b in bw:
                check_rate_mbps("bandwidth_mbps", b)
            st = list(self.steps_s)
            require(len(st) == len(bw), "steps_s", st,
                    f"one start time per bandwidth value ({len(bw)})")
            require(st[0] == 0.0, "steps_s", st, "must start at 0")
            require(all(b > a for a, b in zip(st, st[1:], strict=False)), "steps_s", st,
                    "strictly increasing times")
            if self.period_s is not None:
                require(self.period_s > st[-1], "period_s", self.period_s,
                        f"> the last step time {st[-1]} s")
        else:
            validate_stamps(np.asarray(self.trace), self.trace_name)
            require(np.asarray(self.trace).max() > 0 or len(self.trace) > 0, "trace",
                    self.trace_name, "at least one delivery opportunity")
        require(math.isfinite(self.buffer_pkts) and 1 <= self.buffer_pkts <= MAX_BUFFER_PKTS,
                "buffer_pkts", self.buffer_pkts,
                f"a number >= 1 packet and at most {MAX_BUFFER_PKTS:g} packets")
        require(0.0 <= self.loss < 1.0, "loss", self.loss, "a probability in [0, 1)")
        for r in self.rtt_ms:
            require(math.isfinite(r) and 0 < r <= MAX_RTT_MS, "rtt_ms", r,
                    f"a number > 0 ms and at most {MAX_RTT_MS:g} ms")
        require(len(self.start_s) == n, "start_s", list(self.start_s),
                f"one start time per flow ({n} flows)")
        for s in self.start_s:
            require(math.isfinite(s) and s >= 0, "start_s", s, "a time >= 0 s")
        require(isinstance(self.handshake, bool), "handshake", self.handshake, "true or false")
        if self.access_ms is not None:
            require(len(self.access_ms) == n, "access_ms", list(self.access_ms),
                    f"one delay per flow ({n} flows)")
            for a, r in zip(self.access_ms, self.rtt_ms, strict=True):
                require(math.isfinite(a) and 0 <= a <= r / 2, "access_ms", a,
                        f"a one-way delay >= 0 ms and at most half the flow's RTT ({r / 2:g} ms)")
        require(isinstance(self.jitter_ms, numbers.Real) and not isinstance(self.jitter_ms, bool)
                and math.isfinite(self.jitter_ms) and 0 <= self.jitter_ms < min(self.rtt_ms),
                "jitter_ms", self.jitter_ms,
                f"a width >= 0 ms and below the shortest RTT ({min(self.rtt_ms):g} ms)")
        if self.stop_s is not None:
            require(len(self.stop_s) == n, "stop_s", list(self.stop_s),
                    f"one stop time per flow ({n} flows)")
            for f, (a, b) in enumerate(zip(self.start_s, self.stop_s, strict=True)):
                # inf (or any time past the run's end): the flow sends to the end of the run
                require(not math.isnan(b) and b > a, "stop_s", b,
                        f"after the flow's start time {a} s (inf: never stops)")
                if self.handshake:
                    d = a + 1e-3 * self.rtt_ms[f]
                    require(b > d, "stop_s", b, f"after the flow's data starts, {d:g} s (its "
                            f"start time {a} s plus one RTT for the handshake)")

    def __eq__(self, other: object) -> bool:
        # Field-wise, with the trace compared as an array (the generated __eq__ cannot).
        if not isinstance(other, LinkSpec):
            return NotImplemented
        for f in self.__dataclass_fields__:
            a, b = getattr(self, f), getattr(other, f)
            if f == "trace":
                if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
                    return False
            elif (list(a) if isinstance(a, tuple | list) else a) != (
                    list(b) if isinstance(b, tuple | list) else b):
                return False
        return True

    __hash__ = None  # holds arrays

    def data_start_s(self, f: int) -> float:
        """When flow ``f``'s data first meets the queue: its start, plus its access delay, plus
        one base RTT with the handshake."""
        access = 0.0 if self.access_ms is None else self.access_ms[f]
        return self.start_s[f] + 1e-3 * (access + (self.rtt_ms[f] if self.handshake else 0.0))

    @property
    def n_flows(self) -> int:
        return len(self.rtt_ms)

    def segments(self, tick_s: float, horizon_ticks: int) -> tuple[np.ndarray, np.ndarray, float]:
        """(segment starts in ticks, bytes per tick, period in ticks)."""
        if self.trace is not None:
            return trace_segments(np.asarray(self.trace), tick_s)
        times = np.asarray(self.steps_s, dtype=np.float64) / tick_s
        rates = np.asarray([mbps_to_bytes_per_s(b) * tick_s for b in self.bandwidth_mbps])
        # A schedule without a period must not repeat within the run: give it a period past the
        # horizon, so the last value holds to the end.
        period = self.period_s / tick_s if self.period_s else max(horizon_ticks, times[-1]) + 2.0
        return times, rates, float(period)


def build_links(
    specs: Sequence[LinkSpec], config: SimConfig, horizon_ticks: int
) -> LinkParams:
    """Stack validated link specs into one batched ``LinkParams`` (leading axis = links)."""
    if not specs:
        raise ConfigError("links=[] is invalid: at least one link is needed")
    F = config.n_flows
    big = NEVER_TICK

    def ticks(s: float) -> int:
        # a time past int32's ticks lies past any run (2**31 ticks of 1 ms: 24 days): it stands
        # for "never" as the int32 maximum does, so nothing is lost
        t = s / config.tick_s
        return big if t >= big else int(round(t))

    out = []
    for i, spec in enumerate(specs):
        if spec.n_flows > F:
            raise ConfigError(
                f"flows={spec.n_flows} is invalid (link {i}): more than max_flows={F}"
            )
        t, r, per = spec.segments(config.tick_s, horizon_ticks)
        if len(t) > config.schedule_len:
            raise ConfigError(
                f"schedule_len={config.schedule_len} is invalid: link {i} needs {len(t)} segments"
            )
        sched = capacity.build_schedule(t, r, per, config.schedule_len)
        if float(sched.period_bytes) <= 0:
            raise ConfigError(f"bandwidth (link {i}) is invalid: the link never delivers a packet")
        rtt_ticks = [int(round(x * 1e-3 / config.tick_s)) for x in spec.rtt_ms]
        for x, rt in zip(spec.rtt_ms, rtt_ticks, strict=True):
            require(rt >= 1, "rtt_ms", x, f">= one tick ({config.tick_s * 1e3:g} ms); "
                    "use a smaller tick_s (--tick-ms)")
            require(rt < config.ack_horizon, "rtt_ms", x,
                    f"< ack_horizon x tick ({config.ack_horizon * config.tick_s * 1e3:g} ms)")
        require(spec.jitter_ms == 0 or config.rtt_jitter, "jitter_ms", spec.jitter_ms,
                f"0 under a SimConfig with rtt_jitter=False (link {i}; ``plan`` sets it for "
                "links with jitter)")
        pad = F - spec.n_flows
        # Times in the queue's frame: a flow's packets (and its SYN) meet the bottleneck
        # access_ms after they are sent; with the handshake its data follows one base RTT later.
        access = [0.0] * spec.n_flows if spec.access_ms is None else list(spec.access_ms)
        start = [ticks(spec.data_start_s(f)) for f in range(spec.n_flows)] + [0] * pad
        stop = ([big] * spec.n_flows if spec.stop_s is None
                else [ticks(s + a * 1e-3) for s, a in zip(spec.stop_s, access, strict=True)]
                ) + [0] * pad
        syn = ([ticks(s + a * 1e-3) for s, a in zip(spec.start_s, access, strict=True)]
               if spec.handshake else [-1] * spec.n_flows) + [-1] * pad
        out.append(LinkParams(
            sched=sched,
            buffer_bytes=np.float32(spec.buffer_pkts * PACKET_BYTES),
            loss=np.float32(spec.loss),
            rtt_ticks=np.asarray(rtt_ticks + [1] * pad, np.int32),
            start_tick=np.asarray(start, np.int32),
            stop_tick=np.asarray(stop, np.int32),
            syn_tick=np.asarray(syn, np.int32),
            open_tick=np.asarray([ticks(s) for s in spec.start_s] + [0] * pad, np.int32),
            close_tick=np.asarray(([big] * spec.n_flows if spec.stop_s is None
                                   else [ticks(s) for s in spec.stop_s]) + [0] * pad, np.int32),
            present=np.asarray([True] * spec.n_flows + [False] * pad),
            jitter_s=np.float32(spec.jitter_ms * 1e-3),
        ))
    return jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *out)


def plan(
    specs: Sequence[LinkSpec], duration_s: float, n_flows: int | None = None, **overrides
) -> tuple[SimConfig, int]:
    """Choose a ``SimConfig`` that fits these links for a run of ``duration_s``.

    Returns ``(config, horizon_ticks)``. The delay lines are sized from the links: the queue line
    covers the longest drain time of a full buffer (or the whole run, whichever is shorter), the
    ACK line the longest base RTT.
    """
    require(math.isfinite(duration_s) and duration_s > 0, "duration_s", duration_s, "> 0 s")
    base = SimConfig(n_flows=n_flows or max(s.n_flows for s in specs), **{
        k: v for k, v in overrides.items()
        if k in ("tick_s", "model", "rtt_bins", "window_sender", "spread_ticks", "retx_loss",
                  "recovery", "rtt_jitter")})
    tick = base.tick_s
    # checked as a float first: a duration of 1e300 s has no int32 tick count to overflow into
    require(duration_s / tick <= MAX_TICKS, "duration_s", duration_s,
            f"at most {MAX_TICKS:.0e} ticks, {MAX_TICKS * tick:g} s at the run's "
            f"{tick * 1e3:g} ms tick (the simulator counts ticks in int32)")
    horizon = int(math.ceil(duration_s / tick))
    k = 1
    qh = 1
    ah = 2
    for s in specs:
        t, r, per = s.segments(tick, horizon)
        k = max(k, len(t))
        sched = capacity.build_schedule(t, r, per)
        if float(sched.period_bytes) <= 0:
            raise ConfigError("bandwidth is invalid: the link never delivers a packet")
        drain = capacity.max_drain_ticks(sched, (s.buffer_pkts + 1) * PACKET_BYTES + float(r.max()))
        qh = max(qh, min(horizon + 2, int(math.ceil(drain)) + 2))
        ah = max(ah, max(int(round(x * 1e-3 / tick)) for x in s.rtt_ms) + 2)
    cfg = SimConfig(
        n_flows=base.n_flows, tick_s=tick, model=base.model, rtt_bins=base.rtt_bins,
        window_sender=base.window_sender, spread_ticks=base.spread_ticks,
        retx_loss=base.retx_loss, recovery=base.recovery,
        rtt_jitter=base.rtt_jitter or any(s.jitter_ms > 0 for s in specs),
        queue_horizon=overrides.get("queue_horizon", qh),
        ack_horizon=overrides.get("ack_horizon", ah), schedule_len=k,
    )
    return cfg, horizon
