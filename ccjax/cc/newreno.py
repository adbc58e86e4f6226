"""TCP NewReno (RFC 5681 + RFC 6582), at the granularity of a monitor interval (MI).

A real sender updates its window on every ACK; here the controller hears from the simulator once
per MI (a quarter of a smoothed RTT by default, ``NEWRENO_MI_RTTS``), so each per-ACK rule of the
RFCs is applied to the MI's sums:

* slow start (RFC 5681 §3.1, eq. 2): ``cwnd += acked`` while ``cwnd < ssthresh``, i.e. the window
  doubles every RTT;
* congestion avoidance (RFC 5681 §3.1, eq. 3, ``cwnd += SMSS*SMSS/cwnd`` per ACK):
  ``cwnd += MSS * acked / cwnd``, i.e. one packet per RTT;
* a loss episode (RFC 5681 §3.2 step 2, eq. 4; RFC 6582 §3.2): ``ssthresh = max(FlightSize/2,
  2 MSS)``, ``cwnd = ssthresh`` (the window fast recovery leaves behind; the temporary inflation
  of §3.2 steps 3-4 only matters per ACK), no growth until the episode's recovery is over;
  FlightSize is a per-ACK sender's: in slow start it includes the growth of the MI's ACKs that
  came before the loss report, which a per-ACK sender has sent by then (see ``on_interval``);
* a retransmission timeout (RFC 6298, RFC 5681 §3.1 "loss window"): ``cwnd = 1 MSS``, slow start.

Loss episodes (RFC 6582's ``recover``). Losses reach the sender one RTT after the drop, so the
losses reported in the RTT after a reduction are of packets sent *before* it: the same
congestion event, which must not reduce the window again. RFC 6582 tells them apart by sequence
number (``recover`` = the highest sequence sent at the reduction). The simulator reports ACKs
and losses in sending order (one FIFO bottleneck, a fixed base RTT per flow), so the bytes in
flight at a reduction (``stats.inflight``) are exactly the first bytes reported after it; the
controller counts them down (``old_bytes``) and starts a new episode only when an MI reports
more lost bytes than old bytes left, i.e. when a packet sent after the reduction was certainly
lost. A first version tracked this by time (losses reported within one srtt of the reduction are
old); with MIs of one RTT the MI boundary falls a tick or two before the last old packet's report
(its RTT includes the full queue of the reduction moment, srtt lags behind it and MIs are whole
ticks), and 1-2 old losses per sawtooth then triggered a second halving; counting bytes has no
such edge. The same count gates growth: only ACKs beyond the old bytes grow the window, which
is RFC 6582's "no increase during recovery" at MI granularity.

Retransmission timeout. RFC 6298 §2: ``RTO = SRTT + max(G, 4 RTTVAR)``, at least 1 s (§2.4), at
most 60 s (§2.5), doubled on each back-to-back timeout (§5.5). The simulator keeps SRTT; RTTVAR
is kept here from one sample per MI (Vegas: one per RTT, the sampling rate RFC 6298 §3 was
designed for; NewReno and CUBIC in congestion avoidance: four per RTT, as a per-ACK sender
samples more often still). The
timer (§5.1, §5.2) runs while data is in flight and restarts whenever feedback
arrives; its expiry is checked at MI ends, so it fires up to one MI late. With the 1 s floor it
only fires when the path stops delivering for a second (e.g. an outage in a trace), or for a
lost retransmission: in the simulator nothing is ever lost silently, every sent byte is
eventually acked or reported lost, but with ``SimConfig.retx_loss`` the packet model also
reports (``MIStats.retx_lost_bytes``) which retransmissions of reported losses were lost again.
SACK recovery without RACK (RFC 6675; ns-3.37) cannot see that: the cumulative ACK stops at the
hole, nothing restarts the timer, and it fires one RTO after the retransmission
(``Episodes.hole_at``); until then the recovery stays open (no growth, no new episode).
A timeout is a loss episode of its own (RFC 6582 §4: later duplicate ACKs for data sent before
it do not start fast recovery).

The shared pieces (``Episodes`` and ``track_episodes``) are used by CUBIC as well, which follows
the same loss recovery and timeout rules (RFC 9438 §4.6, §4.8).

Times are float32 seconds since the flow's first MI: sub-millisecond precision for runs of up to
about two hours, plenty for RTT-scale decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Decision
from ccjax.units import PACKET_BYTES

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats

#: Sender maximum segment size. The simulator counts wire bytes of 1500-byte packets, and so do
#: windows here: one packet is one MSS.
MSS = float(PACKET_BYTES)
#: "arbitrarily high" initial ssthresh (RFC 5681 §3.1), finite so that no arithmetic meets inf.
SSTHRESH_INIT = 1e30
#: windows never exceed this (bytes): keeps float32 state finite whatever the input.
MAX_CWND = 1e12
#: RFC 6298 §5.5 doubles the RTO per back-to-back timeout; the cap (RFC 6298 §2.5's 60 s
#: maximum applies to the result as well) keeps the factor finite.
MAX_BACKOFF = 64.0
#: ``Episodes.hole_at`` when no lost retransmission is outstanding (finite: float32 state)
NO_HOLE = 1e30


# ------------------------------------------------------------------------------------------------
# Loss episodes and the retransmission timer (shared with CUBIC)


class Episodes(struct.PyTreeNode):
    """The sender's own clock, loss-episode bookkeeping and the RTO timer, per flow."""

    clock: jnp.ndarray  # (F,) s: sum of the durations of all MIs so far
    old_bytes: jnp.ndarray  # (F,) bytes outstanding at the last reduction not yet acked/lost
    progress_at: jnp.ndarray  # (F,) s: when the RTO timer (re)started
    rttvar: jnp.ndarray  # (F,) s: RFC 6298 RTTVAR
    backoff: jnp.ndarray  # (F,) RTO multiplier, 2^(back-to-back timeouts) (RFC 6298 §5.5)
    #: (F,) s: when the timer fires for a lost retransmission (``NO_HOLE``: none outstanding)
    hole_at: jnp.ndarray
    #: (F,) retransmission timeouts so far (RFC 6298 §5.4-5.6 expiries; ns-3's entries into
    #: CA_LOSS), reported per flow by the run summary as ``timeouts``
    timeouts: jnp.ndarray
    #: (F,) loss episodes so far, each one window reduction on a loss report (RFC 6582: one per
    #: window of data; ns-3's entries into CA_RECOVERY), reported as ``recoveries``
    recoveries: jnp.ndarray
    #: (F,) bytes of a loss no later packet revealed (``track_episodes``), still outstanding as
    #: the sender knows it until its timer fires (0: none). The sender is stalled meanwhile.
    blind: jnp.ndarray
    #: (F,) RFC 6582's "recover": packets the flow had sent at its last reduction; a loss of a
    #: packet sent after it starts a new episode, one sent before belongs to the last
    recover: jnp.ndarray

    @property
    def stalled(self) -> jnp.ndarray:
        """(F,) bool: the whole flight was lost unseen; the sender waits for its timer with the
        window full, so it sends nothing new (``stall_cwnd``)."""
        return self.blind > 0

    @property
    def in_recovery(self) -> jnp.ndarray:
        """(F,) bool: a loss episode is still being recovered (its packets still being reported,
        or a lost retransmission waiting for the timer)."""
        return (self.old_bytes > 0) | (self.hole_at < NO_HOLE)

    @classmethod
    def start(cls, base_rtt_s: jnp.ndarray) -> Episodes:
        z = jnp.zeros_like(base_rtt_s, jnp.float32)
        # RFC 6298 §2.2: after the first RTT sample R, RTTVAR <- R/2 (the handshake's sample is
        # the base RTT, as the simulator's SRTT starts there too).
        return cls(clock=z, old_bytes=z, progress_at=z, rttvar=0.5 * base_rtt_s + z,
                   backoff=jnp.ones_like(z), hole_at=jnp.full_like(z, NO_HOLE), timeouts=z,
                   recoveries=z, blind=z, recover=z)


class EpisodeEvents(NamedTuple):
    loss: jnp.ndarray  # (F,) bool: a new loss episode starts: reduce the window
    timeout: jnp.ndarray  # (F,) bool: the retransmission timer expired
    acked_new: jnp.ndarray  # (F,) bytes acked this MI that were sent after the last reduction
    flight: jnp.ndarray  # (F,) bytes in flight at the MI end (RFC 5681 FlightSize)
    now: jnp.ndarray  # (F,) s: the clock at the end of this MI


def stall_cwnd(ep: Episodes, cwnd: jnp.ndarray) -> jnp.ndarray:
    """The window a controller decides while ``ep.stalled``: one packet, the least the
    simulator lets a sender have (``SimConfig.min_cwnd``; the sender then sends one packet
    per RTT where a stalled TCP sends none), its own window kept for the reaction at the
    timer."""
    return jnp.where(ep.stalled, MSS, cwnd)


def rto_s(rttvar: jnp.ndarray, backoff: jnp.ndarray, srtt: jnp.ndarray, tick_s: float,
          min_rto_s: jnp.ndarray, max_rto_s: jnp.ndarray) -> jnp.ndarray:
    """RFC 6298 §2.3-2.5 and §5.5: ``clip(SRTT + max(G, 4 RTTVAR), 1 s, 60 s) * backoff``,
    capped again at the maximum; the clock granularity G is the simulator's tick."""
    rto = jnp.clip(srtt + jnp.maximum(tick_s, 4.0 * rttvar), min_rto_s, max_rto_s)
    return jnp.minimum(rto * backoff, max_rto_s)


def track_episodes(ep: Episodes, stats: MIStats, min_rto_s: jnp.ndarray,
                   max_rto_s: jnp.ndarray) -> tuple[Episodes, EpisodeEvents]:
    """Advance the clock by one MI and classify it: new loss episode, timeout, or neither.

    Branch-free and safe for any input (the simulator evaluates it at every tick and keeps the
    result only where an MI ended): no division, nothing that can become NaN or inf.
    """
    now = ep.clock + jnp.maximum(stats.duration_s, 0.0)
    flight = jnp.maximum(stats.inflight, 0.0)
    acked = jnp.maximum(stats.acked_bytes, 0.0)
    lost = jnp.maximum(stats.lost_bytes, 0.0)
    reported = acked + lost

    # RFC 6298 §2.3: RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R'|, one sample R' per MI (per RTT, §3).
    has_rtt = stats.rtt_samples > 0
    rttvar = jnp.where(has_rtt, 0.75 * ep.rttvar + 0.25 * jnp.abs(stats.srtt - stats.rtt_mean),
                       ep.rttvar)
    rto = rto_s(rttvar, ep.backoff, stats.srtt, stats.tick_s, min_rto_s, max_rto_s)

    # Timeout: data outstanding and no ACK nor loss report for longer than the RTO (RFC 6298 §5).
    timeout = (reported <= 0) & (flight > 0) & (now - ep.progress_at >= rto)
    # A lost retransmission (``SimConfig.retx_loss``): the cumulative ACK stays at the hole, so
    # nothing restarts the timer and it fires one RTO after the retransmission was sent (RFC
    # 6298 §5; SACK recovery, RFC 6675, has no other way to learn it). Until then the recovery
    # goes on: no new episode, no growth.
    hole = ep.hole_at < NO_HOLE
    timeout = timeout | hole & (now >= ep.hole_at)
    new_hole = (stats.retx_lost_bytes > 0) & ~hole & ~timeout
    # A loss no later packet reveals: the flow's whole flight was lost and nothing was acked, so
    # no duplicate ACK (RFC 5681 §3.2, even with limited transmit, RFC 3042) and no SACK (RFC
    # 6675) tells the sender; its retransmission timer does, one RTO after it started (RFC
    # 6298 §5.1, ``progress_at``). Meanwhile the lost window is outstanding as the sender knows
    # it: it sends nothing new and its reaction at the timeout sees that flight. (ns-3, four
    # flows' first windows into a buffer of 8 packets: two or three flows lose theirs whole and
    # time out 1 s later.) The simulator reports every loss one RTT after it; here the report
    # of a blind one is held back to the timer.
    # Only a loss of a packet sent after the last reduction (``after`` below) is blind: a
    # timeout's own lost window, reported after the timer fired (its reports queued behind a
    # long backlog, e.g. a trace outage), belongs to the episode the timeout handled; held back
    # as a new one it pinned the restarted window at one packet until a second, spurious
    # timeout (CUBIC, 2 flows, 40 ms, an outage from 1.5 to 3 s: the RTO at 3.04 s, the old
    # losses reported at 3.08 s, the next timeout at 5.04 s).
    by_seq = stats.lost_seq > 0
    # (positions step by whole packets, but both come out of float32 sums: at 50 Mbps after
    # 11.5 s a drop at the recover point itself came back 0.004 packets past it and started a
    # second episode, so a new one needs a packet sent at least one past it; half a packet
    # absorbs the rounding)
    after = jnp.where(by_seq, stats.lost_seq > ep.recover + 0.5, lost > ep.old_bytes)
    blind = (lost > 0) & after & (acked <= 0) & (flight <= 0) & ~hole & ~timeout
    hole_at = jnp.where(timeout, NO_HOLE,
                        jnp.where(new_hole, now + rto,
                                  jnp.where(blind, ep.progress_at + rto, ep.hole_at)))
    holding = (hole | blind) & ~timeout
    # RFC 6582's "recover": a loss starts a new episode only if the lost packet was sent after
    # the last reduction. The simulator's loss reports carry where the lost packets lie in the
    # flow's stream (``MIStats.lost_seq``, packets sent when each was sent), compared with what
    # had been sent at the reduction (``recover``). Stats without positions (built by hand)
    # fall back to the byte count: the first ``old_bytes`` reported after a reduction are the
    # packets that were in flight at it, so, reports arriving in sending order, the MI's
    # losses include a packet sent after the reduction for certain only if there are more of
    # them than old bytes left to report, and new losses reported while old bytes remain pass
    # for the last episode's tail. Measured against the stored ns-3 runs (eight ccjax seeds),
    # positions instead of the count: 152 -> 154 scenarios within every tolerance, distance
    # 112.6 -> 112.4 (seeds 9-16: 154 -> 154, 113.2 -> 109.3). (``after`` is computed above.)
    loss = (lost > 0) & after & ~timeout & ~holding
    old_here = jnp.minimum(ep.old_bytes, reported)
    # ACKs beyond the old bytes acknowledge data sent after the reduction: only those grow the
    # window (RFC 6582 §3.2: during recovery the window is not increased).
    acked_new = jnp.where(holding, 0.0, jnp.minimum(acked, reported - old_here))
    reduce = loss | timeout

    blind_before = ep.blind
    ep = Episodes(
        clock=now,
        # Everything in flight at a reduction belongs to the episode just handled.
        old_bytes=jnp.where(reduce, flight, ep.old_bytes - old_here),
        # RFC 6298 §5.3: restart the timer when an ACK arrives; §5.2: stop it when nothing is
        # outstanding (so a flow idle before its start time does not time out when it starts);
        # §5.6: restart it after a timeout.
        progress_at=jnp.where((reported > 0) | (flight <= 0) | timeout, now, ep.progress_at),
        rttvar=rttvar,
        # RFC 6298 §5.5 doubles the RTO per timeout; an ACK of new data ends the backoff (§5.7).
        backoff=jnp.where(timeout, jnp.minimum(2.0 * ep.backoff, MAX_BACKOFF),
                          jnp.where(acked > 0, 1.0, ep.backoff)),
        hole_at=hole_at,
        timeouts=ep.timeouts + timeout.astype(jnp.float32),
        recoveries=ep.recoveries + loss.astype(jnp.float32),
        blind=jnp.where(timeout, 0.0, jnp.where(blind, lost, ep.blind)),
        recover=jnp.where(reduce, stats.sent_pkts, ep.recover),
    )
    # The reaction to the timer sees the blind loss's bytes as in flight (they were, to the
    # sender); the episode bookkeeping above counts only what is still unreported.
    flight_seen = jnp.where(timeout, jnp.maximum(flight, blind_before), flight)
    return ep, EpisodeEvents(loss=loss, timeout=timeout, acked_new=acked_new, flight=flight_seen,
                             now=now)


#: MIs per smoothed RTT in slow start (at least; ``mi_length``). A per-ACK sender reacts to a
#: loss report at once; one answering once per MI reacts up to an MI later, and in slow start
#: its window doubles per RTT meanwhile, so one-RTT MIs lost about twice the packets ns-3's
#: per-ACK NewReno loses when slow start overflows the buffer. Short MIs keep the reaction close
#: to the ACK that brought the news (growth is by acked bytes, so the doubling per RTT is the
#: same for any MI length; the tick, 1 ms, is the floor).
SLOW_START_MIS_PER_RTT = 16.0

#: NewReno's MI in smoothed RTTs in congestion avoidance. The same reason as in slow start: a loss
#: is answered up to an MI after its report, meanwhile the window is the old one, and a per-ACK
#: sender answers at once. Growth is by acked bytes (one MSS per window of ACKs), the same for any
#: MI length, and the controller runs every tick anyway, so short MIs cost nothing. Measured
#: against ns-3 (the 60 NewReno scenarios of ``validation.full_matrix``, lost retransmissions on,
#: eight ccjax seeds each): within every tolerance 46 with one-RTT MIs (slow start a quarter),
#: 49 with quarter-RTT MIs (slow start a quarter as well), 51 with quarter-RTT MIs and slow start
#: a sixteenth; with two seeds 42, 44 and 44.
#: (Since then the simulator also ends a window sender's MI at the tick that reports a loss, so
#: the reaction itself no longer waits for the MI's end; the short MIs still make the growth
#: between reports closer to per-ACK.)
NEWRENO_MI_RTTS = 0.25


def mi_length(mi_rtts: jnp.ndarray, srtt: jnp.ndarray, cwnd: jnp.ndarray,
              ssthresh: jnp.ndarray) -> jnp.ndarray:
    """MI length in seconds: ``mi_rtts`` smoothed RTTs, at most ``1 / SLOW_START_MIS_PER_RTT``
    of one in slow start."""
    ss = jnp.minimum(mi_rtts, 1.0 / SLOW_START_MIS_PER_RTT)
    return jnp.where(cwnd < ssthresh, ss, mi_rtts) * srtt


def slow_start(cwnd: jnp.ndarray, ssthresh: jnp.ndarray, acked: jnp.ndarray):
    """RFC 5681 §3.1 eq. 2 over one MI: grow by the acked bytes, not past ssthresh.

    Returns ``(cwnd, acked bytes left over for congestion avoidance)``."""
    inc = jnp.minimum(acked, jnp.maximum(ssthresh - cwnd, 0.0))
    return cwnd + inc, acked - inc


# ------------------------------------------------------------------------------------------------
# NewReno


class NewRenoParams(struct.PyTreeNode):
    init_cwnd_pkts: jnp.ndarray  # (F,) initial window, packets (RFC 6928: 10)
    mi_rtts: jnp.ndarray  # (F,) MI length in smoothed RTTs
    min_rto_s: jnp.ndarray  # (F,) RFC 6298 §2.4: 1 s
    max_rto_s: jnp.ndarray  # (F,) RFC 6298 §2.5: 60 s
    #: (F,) bool: FlightSize at a loss as ns-3.37 counts it (RFC 6675's pipe at the third
    #: duplicate ACK, one packet below the flight when the hole is reported; see on_interval)
    ns3_pipe: jnp.ndarray


class NewRenoState(struct.PyTreeNode):
    cwnd: jnp.ndarray  # (F,) bytes
    ssthresh: jnp.ndarray  # (F,) bytes
    ep: Episodes


@dataclass(frozen=True)
class NewReno:
    name: str = "newreno"
    #: on_interval is elementwise over flows (``sim.compact``)
    per_flow: ClassVar[bool] = True

    def default_params(self, n_flows: int) -> NewRenoParams:
        full = lambda v: jnp.full(n_flows, v, jnp.float32)  # noqa: E731
        # Quarter-RTT MIs in congestion avoidance too (NEWRENO_MI_RTTS).
        return NewRenoParams(init_cwnd_pkts=full(10.0), mi_rtts=full(NEWRENO_MI_RTTS),
                             min_rto_s=full(1.0), max_rto_s=full(60.0),
                             ns3_pipe=jnp.zeros(n_flows, bool))

    def _decide(self, cwnd: jnp.ndarray, srtt: jnp.ndarray, params: NewRenoParams,
                ssthresh: jnp.ndarray) -> Decision:
        # Window-based: pace at cwnd/srtt (rate 0), at most cwnd in flight; MIs: ``mi_length``.
        return Decision(rate=jnp.zeros_like(cwnd), cwnd=cwnd,
                        mi_s=mi_length(params.mi_rtts, srtt, cwnd, ssthresh),
                        mi_round=jnp.zeros(cwnd.shape, bool))

    def init(self, params: NewRenoParams, base_rtt_s: jnp.ndarray):
        rtt = jnp.broadcast_to(jnp.asarray(base_rtt_s, jnp.float32), params.init_cwnd_pkts.shape)
        cwnd = params.init_cwnd_pkts * MSS  # RFC 6928 §2
        state = NewRenoState(cwnd=cwnd, ssthresh=jnp.full_like(cwnd, SSTHRESH_INIT),
                             ep=Episodes.start(rtt))
        return state, self._decide(cwnd, rtt, params, state.ssthresh)

    def on_interval(self, state: NewRenoState, stats: MIStats, params: NewRenoParams):
        ep, ev = track_episodes(state.ep, stats, params.min_rto_s, params.max_rto_s)
        cwnd = jnp.maximum(state.cwnd, MSS)  # never below one packet (the simulator's floor)

        # Growth: slow start up to ssthresh, the rest of the MI's ACKs in congestion avoidance
        # (RFC 5681 eq. 3 summed over the MI: +1 MSS per window of ACKs). Only ACKs of data sent
        # after the last reduction count (RFC 6582: no increase during recovery).
        grown, rest = slow_start(cwnd, state.ssthresh, ev.acked_new)
        cwnd_new = grown + MSS * rest / grown

        # RFC 5681 eq. 4 for both loss and timeout; the window drops to ssthresh after a loss
        # (RFC 6582 §3.2 step 3) and to the loss window of one packet after a timeout (§3.1).
        # FlightSize is a per-ACK sender's: in slow start each ACK before the loss report grew
        # its window and sent that growth at once (RFC 5681 eq. 2; ns-3 halves BytesInFlight
        # at recovery entry). The window here moves at MI ends, so the slow-start growth of
        # this MI's ACKs (``grown - cwnd``; 0 in congestion avoidance) is not in ``flight``
        # yet: it is added. Without it a slow-start overshoot halved to a window up to one
        # MI's ACKs short of a per-ACK sender's (one flow, 50 Mbps, 40 ms, 4 BDP, seed 1: 820
        # packets, the queue 17 short of the brim, the next loss 4 s later; ns-3: 833 packets
        # at the brim, the next loss 1.1 s later; with it 836 at the brim, 0.9 s).
        owed = jnp.where(ev.loss, grown - cwnd, 0.0)
        # ns-3.37 (``TcpSocketBase::EnterRecovery``) halves RFC 6675's pipe at the third
        # duplicate ACK: the three segments SACKed above the hole are out of it and the two
        # that limited transmit (RFC 3042) sent for the first two are in, one segment less than
        # the flight when the hole was reported, which is where the simulator reports it (the
        # SACKs come after). Traced: two flows, 10 Mbps, 40 ms, 0.25 BDP, ns-3 halved the
        # window less 2.4 packets (1.4 lost), ccjax less 1.9 (1.0 lost): ssthresh 9.9 against
        # 10.65 packets. (At higher rates some of the three share the hole's tick and are out
        # of the flight already; the packet subtracted then overshoots by up to as many.)
        pipe_less = jnp.where(params.ns3_pipe & ev.loss, MSS, 0.0)
        ssthresh_red = jnp.maximum(0.5 * (ev.flight + owed - pipe_less), 2.0 * MSS)
        # (A reduction never raises the window: after a timeout the flight can exceed cwnd.)
        cwnd_new = jnp.where(ev.loss, jnp.minimum(ssthresh_red, cwnd),
                             jnp.where(ev.timeout, MSS, cwnd_new))
        ssthresh = jnp.where(ev.loss | ev.timeout, ssthresh_red, state.ssthresh)
        cwnd_new = jnp.clip(cwnd_new, MSS, MAX_CWND)

        new = NewRenoState(cwnd=cwnd_new, ssthresh=ssthresh, ep=ep)
        return new, self._decide(stall_cwnd(ep, cwnd_new), stats.srtt, params, ssthresh)
