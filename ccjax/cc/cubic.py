"""CUBIC (RFC 9438), at the granularity of a monitor interval (a quarter of a smoothed RTT).

After a congestion event CUBIC grows its window as a cubic function of the time since the event
(RFC 9438 §4.2, Figure 1), in packets and seconds:

    W_cubic(t) = C (t - K)^3 + W_max,   K = cbrt((W_max - cwnd_epoch) / C)   (Figure 2)

concave up to the window where the last loss happened (W_max, reached after K seconds), a
plateau there, then convex probing beyond it. Because t is wall-clock time, not RTTs, the growth
does not depend on the RTT; so that CUBIC is never slower than Reno where Reno does well (short
RTTs, small BDPs), it also tracks the window ``W_est`` an AIMD(alpha_cubic, beta_cubic) flow
would have (§4.3, "Reno-friendly region") and uses it whenever it is the larger.

The per-ACK rules are applied to the MI's sums, as in ``newreno``:

* §4.2: at an MI end the target is ``W_cubic(t + RTT)`` (where the window should be one RTT
  later), bounded to ``[cwnd, 1.5 cwnd]``; §4.4/§4.5 add ``(target - cwnd)/cwnd`` per acked
  segment, which over an MI whose ACKs cover the window (``acked >= cwnd``) reaches the target;
  the increase is scaled down when fewer ACKs came back.
* §4.3: ``W_est += alpha * segments_acked / cwnd`` with ``alpha = 3 (1 - beta) / (1 + beta)``,
  and ``alpha = 1`` once ``W_est >= cwnd_prior`` (the window before the last reduction);
  ``cwnd = max(cubic update, W_est)`` (the RFC sets cwnd to W_est when W_cubic(t) < W_est; taking
  the larger of the two, as Linux does, also keeps the window non-decreasing at the boundary).
* §4.6: on a loss episode ``ssthresh = max(FlightSize * beta, 2 MSS)``, ``cwnd = ssthresh``,
  ``cwnd_prior`` = the window before; §4.7 fast convergence lowers ``W_max`` to
  ``cwnd (1 + beta) / 2`` if the window did not get back to the previous ``W_max``.
* t is measured from the reduction ("since the last reduction"); during the following RTT the
  window holds at ``cwnd_epoch`` while the losses of packets sent before the reduction come in
  (the same episode: NewReno's recovery, shared from ``newreno``), then follows W_cubic.
* §4.10 allows a slow start that exits before a loss; Linux and ns-3 use HyStart (Ha & Rhee,
  "Taming the elephants", 2011; Linux tcp_cubic.c, ns-3 TcpCubic) by default. Its delay test is
  kept here, per round (= per MI: one RTT in slow start while HyStart is on): with at least
  ``hystart_low_window`` packets (16) in the window, slow start ends (ssthresh = cwnd) once
  the round's minimum RTT exceeds the path's minimum by ``clamp(min_rtt / 8, 4 ms, 16 ms)``.
  The ACK-train test measures the spacing of individual ACKs, which an MI's sums do not carry,
  so it is left out (and left out of ns-3's side when the two are compared:
  ``HyStartDetect = DELAY``).
* §4.8 timeout: as NewReno (1 MSS, slow start; ssthresh uses beta_cubic); the following CA stage
  starts with ``K = 0`` and ``W_max = W_est = cwnd`` at its beginning. §4.10: slow start as
  RFC 5681 (this is also how CA starts after the initial slow start ends in a loss).

Windows are kept in bytes (what the simulator enforces) and converted to packets (MSS = one
1500-byte packet) where the RFC's constants need them: C = 0.4 is in packets/s^3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Decision
from ccjax.cc.newreno import (
    MAX_CWND,
    MSS,
    NO_HOLE,
    SSTHRESH_INIT,
    Episodes,
    mi_length,
    slow_start,
    stall_cwnd,
    track_episodes,
)

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats


class CubicParams(struct.PyTreeNode):
    c: jnp.ndarray  # (F,) C, packets / s^3 (RFC 9438 §5: 0.4)
    beta: jnp.ndarray  # (F,) beta_cubic, multiplicative decrease (§4.6: 0.7)
    fast_convergence: jnp.ndarray  # (F,) bool (§4.7: SHOULD, disabled for a lone flow)
    reno_friendly: jnp.ndarray  # (F,) bool: use the Reno-friendly region (§4.3)
    init_cwnd_pkts: jnp.ndarray  # (F,) initial window, packets (RFC 6928: 10)
    mi_rtts: jnp.ndarray  # (F,) MI length in smoothed RTTs
    min_rto_s: jnp.ndarray  # (F,) RFC 6298 §2.4: 1 s
    max_rto_s: jnp.ndarray  # (F,) RFC 6298 §2.5: 60 s
    hystart: jnp.ndarray  # (F,) bool: HyStart's delay test ends slow start (Linux, ns-3 default)
    hystart_low_window: jnp.ndarray  # (F,) packets: no HyStart below this window (Linux: 16)
    ns3_integer: jnp.ndarray  # (F,) bool: ns-3 TcpCubic's whole-segment arithmetic (see below)


#: CUBIC's MI in smoothed RTTs in congestion avoidance (``mi_length``). A per-ACK sender moves
#: its window towards the target a little with every ACK (RFC 9438 §4.4: ``(target - cwnd) /
#: cwnd`` per acked segment); quarter-RTT MIs apply that growth four times per RTT, closer to it
#: than one step per RTT. Measured against ns-3 (the 60 CUBIC scenarios of
#: ``validation.full_matrix``, ACK-clocked, eight ccjax seeds): within every tolerance 43 with
#: one-RTT MIs, 45 with a sixteenth in slow start, 46 with that and quarter-RTT MIs after it.
CUBIC_MI_RTTS = 0.25

#: HyStart's delay threshold bounds (Linux tcp_cubic.c HYSTART_DELAY_MIN/MAX, ns-3 defaults)
HYSTART_DELAY_MIN_S = 0.004
HYSTART_DELAY_MAX_S = 0.016


class CubicState(struct.PyTreeNode):
    cwnd: jnp.ndarray  # (F,) bytes
    ssthresh: jnp.ndarray  # (F,) bytes
    w_max: jnp.ndarray  # (F,) packets: window before the last reduction (after §4.7); 0: unset
    k: jnp.ndarray  # (F,) s: time W_cubic takes to get back to W_max (Figure 2)
    epoch_start: jnp.ndarray  # (F,) s on the episode clock: t = now - epoch_start
    in_epoch: jnp.ndarray  # (F,) bool: a congestion-avoidance stage has started
    w_est: jnp.ndarray  # (F,) packets: Reno-friendly estimate (§4.3)
    cwnd_prior: jnp.ndarray  # (F,) packets: cwnd before the last reduction (§4.6)
    origin: jnp.ndarray  # (F,) packets: the plateau of this epoch (ns-3 mode: m_bicOriginPoint)
    bank: jnp.ndarray  # (F,) segments: ns-3 TcpCubic's m_cWndCnt, never reset (``Cubic._ns3``)
    ep: Episodes


def w_cubic(t: jnp.ndarray, k: jnp.ndarray, w_max: jnp.ndarray, c: jnp.ndarray) -> jnp.ndarray:
    """RFC 9438 §4.2 Figure 1, packets."""
    return c * (t - k) ** 3 + w_max


def cubic_k(w_max: jnp.ndarray, cwnd_epoch: jnp.ndarray, c: jnp.ndarray) -> jnp.ndarray:
    """RFC 9438 §4.2 Figure 2; 0 when the epoch starts at or above W_max."""
    return jnp.cbrt(jnp.maximum(w_max - cwnd_epoch, 0.0) / c)


@dataclass(frozen=True)
class Cubic:
    name: str = "cubic"
    #: on_interval is elementwise over flows (``sim.compact``)
    per_flow: ClassVar[bool] = True

    def default_params(self, n_flows: int) -> CubicParams:
        full = lambda v, dt=jnp.float32: jnp.full(n_flows, v, dt)  # noqa: E731
        return CubicParams(c=full(0.4), beta=full(0.7), fast_convergence=full(True, bool),
                           reno_friendly=full(True, bool), init_cwnd_pkts=full(10.0),
                           mi_rtts=full(CUBIC_MI_RTTS), min_rto_s=full(1.0), max_rto_s=full(60.0),
                           hystart=full(True, bool), hystart_low_window=full(16.0),
                           ns3_integer=full(False, bool))

    def _decide(self, cwnd: jnp.ndarray, srtt: jnp.ndarray, params: CubicParams,
                ssthresh: jnp.ndarray) -> Decision:
        # Window-based: pace at cwnd/srtt (rate 0), at most cwnd in flight. MIs as NewReno's
        # (``mi_length``: ``mi_rtts`` RTTs, a sixteenth in slow start), except that HyStart's
        # delay test compares whole rounds, so with it on slow start keeps one-RTT MIs.
        short = mi_length(params.mi_rtts, srtt, cwnd, ssthresh)
        mi = jnp.where(params.hystart & (cwnd < ssthresh), srtt, short)
        return Decision(rate=jnp.zeros_like(cwnd), cwnd=cwnd, mi_s=mi,
                        mi_round=jnp.zeros(cwnd.shape, bool))

    def init(self, params: CubicParams, base_rtt_s: jnp.ndarray):
        rtt = jnp.broadcast_to(jnp.asarray(base_rtt_s, jnp.float32), params.init_cwnd_pkts.shape)
        cwnd = params.init_cwnd_pkts * MSS  # RFC 6928 §2
        z = jnp.zeros_like(cwnd)
        state = CubicState(cwnd=cwnd, ssthresh=jnp.full_like(cwnd, SSTHRESH_INIT), w_max=z, k=z,
                           epoch_start=z, in_epoch=jnp.zeros(cwnd.shape, bool), w_est=z,
                           cwnd_prior=z, origin=z, bank=z, ep=Episodes.start(rtt))
        return state, self._decide(cwnd, rtt, params, state.ssthresh)

    def on_interval(self, state: CubicState, stats: MIStats, params: CubicParams):
        p = params
        ep, ev = track_episodes(state.ep, stats, p.min_rto_s, p.max_rto_s)
        now = ev.now
        cwnd = jnp.maximum(state.cwnd, MSS)
        # Only ACKs of data sent after the last reduction grow the window (the losses and ACKs
        # of the episode's own packets come in during the RTT after it: RFC 6582 recovery).
        acked = ev.acked_new
        grow = ~(ev.loss | ev.timeout)

        # --- Slow start (§4.10 -> RFC 5681), while cwnd < ssthresh.
        in_ss = cwnd < state.ssthresh
        ss_cwnd, _ = slow_start(cwnd, state.ssthresh, acked)
        # HyStart's delay test (see the module docstring): the round's minimum RTT against the
        # path's minimum plus clamp(min/8, 4 ms, 16 ms); on exit, ssthresh = cwnd.
        eta = jnp.clip(stats.min_rtt / 8.0, HYSTART_DELAY_MIN_S, HYSTART_DELAY_MAX_S)
        hy_exit = (p.hystart & in_ss & grow & (stats.rtt_samples > 0)
                   & (cwnd >= p.hystart_low_window * MSS)
                   & (stats.rtt_min >= stats.min_rtt + eta))
        ss_cwnd = jnp.where(hy_exit, cwnd, ss_cwnd)

        # --- Congestion avoidance. A stage that starts without a reduction (slow start reached
        # ssthresh after a timeout, or HyStart ended it) has K = 0 and W_max = W_est = cwnd at its
        # beginning (§4.8, §4.10); W_max was reset to 0 at the timeout so max() picks cwnd.
        w = cwnd / MSS  # packets
        fresh = ~state.in_epoch
        w_max = jnp.where(fresh, jnp.maximum(state.w_max, w), state.w_max)
        k = jnp.where(fresh, cubic_k(state.w_max, w, p.c), state.k)
        epoch_start = jnp.where(fresh, now, state.epoch_start)
        w_est = jnp.where(fresh, w, state.w_est)

        t = now - epoch_start
        # §4.2: the target one RTT ahead, bounded so that growth is non-decreasing and slower
        # than slow start.
        target = jnp.clip(w_cubic(t + stats.srtt, k, w_max, p.c), w, 1.5 * w)
        acked_pkts = acked / MSS
        # §4.4/§4.5: (target - cwnd)/cwnd per acked segment, i.e. the target once a window of
        # ACKs has come back (never beyond it).
        w_ca = w + (target - w) * jnp.minimum(acked_pkts / w, 1.0)
        # §4.3: Reno-friendly estimate, alpha -> 1 once it is back at the window before the loss.
        alpha_cubic = 3.0 * (1.0 - p.beta) / (1.0 + p.beta)
        alpha = jnp.where(w_est >= state.cwnd_prior, 1.0, alpha_cubic)
        w_est = w_est + alpha * acked_pkts / w
        w_ca = jnp.where(p.reno_friendly, jnp.maximum(w_ca, w_est), w_ca)

        cwnd_new = jnp.where(grow, jnp.where(in_ss, ss_cwnd, w_ca * MSS), cwnd)
        # CA state advances only in a CA MI that is not in recovery.
        ca = grow & ~in_ss
        in_epoch = state.in_epoch | ca
        w_max = jnp.where(ca, w_max, state.w_max)
        k = jnp.where(ca, k, state.k)
        epoch_start = jnp.where(ca, epoch_start, state.epoch_start)
        w_est = jnp.where(ca, w_est, state.w_est)
        cwnd_prior = state.cwnd_prior

        # --- Loss episode: §4.7 fast convergence, then §4.6 multiplicative decrease; the new
        # CA stage starts now, with cwnd_epoch = the reduced window.
        # FlightSize and the window are a per-ACK sender's (as NewReno's): in slow start each
        # ACK before the loss report grew the window and sent that growth at once, and here
        # the window moves at MI ends, so this MI's slow-start growth (``ss_cwnd - cwnd``) is
        # added. With HyStart's one-RTT slow-start MIs it is up to a window (one flow, 20 Mbps,
        # 40 ms, 5-packet buffer: ssthresh 70 packets without it, 91.7 with it; with HyStart
        # off, whose slow-start MIs are 1/16 RTT, 85.4 without it and 91 with it). ns-3's
        # arithmetic (``ns3_integer``) keeps the window at the MI's start: there
        # the growth moved ccjax away from ns-3 (docs/validation-history.md).
        owed = jnp.where(ev.loss & in_ss & ~p.ns3_integer, ss_cwnd - cwnd, 0.0)
        # (the window at the loss in packets: a sum, then one division, so that no compiled
        # form of it differs from another by a fused multiply-add; ``w`` when nothing is owed)
        w_loss = (cwnd + owed) / MSS
        w_max_loss = jnp.where(p.fast_convergence & (w_loss < state.w_max),
                               w_loss * (1.0 + p.beta) / 2.0, w_loss)
        ssthresh_red = jnp.maximum((ev.flight + owed) * p.beta, 2.0 * MSS)
        w_epoch = ssthresh_red / MSS
        w_max = jnp.where(ev.loss, w_max_loss, w_max)
        k = jnp.where(ev.loss, cubic_k(w_max_loss, w_epoch, p.c), k)
        epoch_start = jnp.where(ev.loss, now, epoch_start)
        in_epoch = jnp.where(ev.loss, True, in_epoch)
        w_est = jnp.where(ev.loss, w_epoch, w_est)
        cwnd_prior = jnp.where(ev.loss | ev.timeout, w_loss, cwnd_prior)
        # A reduction never raises the window (after a timeout the flight can exceed it).
        cwnd_new = jnp.where(ev.loss, jnp.minimum(ssthresh_red, cwnd + owed), cwnd_new)

        # --- Timeout (§4.8): one packet, slow start to ssthresh = beta * FlightSize, and a fresh
        # CA stage (K = 0, W_max = cwnd) when slow start ends.
        cwnd_new = jnp.where(ev.timeout, MSS, cwnd_new)
        w_max = jnp.where(ev.timeout, 0.0, w_max)
        in_epoch = jnp.where(ev.timeout, False, in_epoch)

        ssthresh = jnp.where(ev.loss | ev.timeout, ssthresh_red,
                             jnp.where(hy_exit, cwnd, state.ssthresh))
        origin = jnp.where(ca, jnp.maximum(w_max, w), state.origin)

        # --- ns-3.37 TcpCubic's arithmetic (``ns3_integer``), the reference ccjax is compared
        # with in docs/validation.md; see ``_ns3``.
        n3 = self._ns3(state, stats, p, ev, w, acked, in_ss, ss_cwnd, grow)
        sel = p.ns3_integer
        cwnd_new = jnp.where(sel, n3["cwnd"], cwnd_new)
        ssthresh = jnp.where(sel, jnp.where(ev.loss | ev.timeout, n3["ssthresh"],
                                            jnp.where(hy_exit, cwnd, state.ssthresh)), ssthresh)
        w_max = jnp.where(sel, n3["w_max"], w_max)
        k = jnp.where(sel, n3["k"], k)
        epoch_start = jnp.where(sel, n3["epoch_start"], epoch_start)
        in_epoch = jnp.where(sel, n3["in_epoch"], in_epoch)
        origin = jnp.where(sel, n3["origin"], origin)

        cwnd_new = jnp.clip(cwnd_new, MSS, MAX_CWND)
        new = CubicState(cwnd=cwnd_new, ssthresh=ssthresh, w_max=w_max, k=k,
                         epoch_start=epoch_start, in_epoch=in_epoch, w_est=w_est,
                         cwnd_prior=cwnd_prior, origin=origin,
                         bank=jnp.where(sel, n3["bank"], state.bank), ep=ep)
        return new, self._decide(stall_cwnd(ep, cwnd_new), stats.srtt, p, ssthresh)

    @staticmethod
    def _ns3(state: CubicState, stats: MIStats, p: CubicParams, ev, w, acked, in_ss, ss_cwnd,
             grow) -> dict:
        """ns-3.37 TcpCubic (``IncreaseWindow``, ``Update``, ``GetSsThresh``) with the ACK
        accounting of ns-3.37's ``TcpSocketBase::ProcessAck``, per MI.

        What it does differently from the RFC, read in its source:

        * windows are whole segments (``segCwnd``), ``m_lastMaxCwnd`` (W_max) an integer:
          ``floor(segCwnd (1 + beta) / 2)`` under fast convergence, and ssthresh
          ``max(floor(segCwnd beta), 2)`` segments, from cwnd (not FlightSize);
        * the epoch starts at the first congestion-avoidance ACK after recovery, with
          ``K = cbrt((W_max - segCwnd) / C)`` and origin W_max, or K = 0 and origin segCwnd when
          the window is already at or above W_max;
        * the target is ``origin -+ floor(C |t + min_rtt - K|^3)``: the cubic offset truncated
          to whole segments, so within cbrt(1/C) = 1.36 s either side of K the target is the
          origin itself; ``cnt = max(floor(segCwnd / (target - segCwnd)), 2)`` below it,
          ``100 segCwnd`` at or above it, at most 20 with no W_max (before the first loss and
          after a timeout, ``CubicReset``);
        * congestion avoidance adds the call's acked segments to a counter, ``m_cWndCnt``, and
          grows the window one segment (at most one per call) whenever the counter reaches cnt,
          taking cnt off it. Nothing ever resets the counter: on a plateau (cnt = 100 segCwnd)
          it banks every ACK, and after the next reduction, when cnt is small again, the bank
          pays one segment per ACK, so the window climbs back to the target at up to twice per
          RTT instead of 1.5x (``bank``);
        * ``ProcessAck`` hands congestion control the whole cumulative ACK when it moves: the
          ACK that ends a fast recovery passes every segment the recovery covered (about the
          window before the loss), which goes to the counter.

        Per MI: the bank gains every segment acked outside slow start (ACKs of the episode's own
        packets included), except while a lost retransmission holds the cumulative ACK
        (``SimConfig.retx_loss``: ns-3 is in recovery then and passes nothing), and pays
        ``min(ACKs, floor(bank / cnt))`` segments, first up to the target at its cnt, then
        beyond it at ``100 segCwnd``.

        Left out: after a timeout (CA_LOSS) ns-3 passes each cumulative ACK below the recovery
        point whole, and slow start adds it all to the window at once, past ssthresh (RFC 3465
        allows 2 segments per ACK, 1 after a timeout; Linux stops slow start at ssthresh). When
        the timeout follows a lost retransmission and a hole beyond it is still open, the
        window restarts near everything the receiver got during the wait, up to thousands of
        segments at 50 Mbps (four 40 ms flows, 50 Mbps, 1 BDP, 1 % loss, seed 1: one flow's
        window went 1 -> 155 -> 3131 segments within 80 ms), and ns-3's drop rate in such runs
        reaches 10 to 35 %. Modelled here (measured, the 60 CUBIC scenarios against the stored
        ns-3 runs, eight ccjax seeds), a fifth of ccjax's runs under 1 % loss ran away to drop
        rates of 0.6 to 0.9 and 44 scenarios were within every tolerance, against 51 without
        it: ccjax's recovery refills the window as reports free it, where ns-3's PRR sends in
        proportion to what is delivered, so the burst after such a restart does not settle as
        ns-3's does.
        """
        seg = jnp.floor(w + 1e-4)
        a = acked / MSS  # ACKs of new data (ev.acked_new), segments
        acked_all = jnp.maximum(stats.acked_bytes, 0.0)
        last_max = state.w_max  # m_lastMaxCwnd; 0 = unset
        # Slow start (``ss_cwnd``, bytes, from ``on_interval``) banks nothing: IncreaseWindow
        # zeroes segmentsAcked after it.

        # --- Congestion avoidance.
        ca = grow & ~in_ss & (a > 0)
        fresh = ca & ~state.in_epoch
        k = jnp.where(fresh, jnp.where(last_max > seg, cubic_k(last_max, seg, p.c), 0.0),
                      state.k)
        origin = jnp.where(fresh, jnp.maximum(last_max, seg), state.origin)
        # The epoch began with the MI's first ACK of new data (ns-3: the first IncreaseWindow
        # after recovery); the share of the MI's ACKs that were new dates it.
        new_share = jnp.clip(acked / jnp.maximum(stats.acked_bytes, 1.0), 0.0, 1.0)
        epoch_start = jnp.where(fresh, ev.now - stats.duration_s * new_share,
                                state.epoch_start)
        t = ev.now - epoch_start + stats.min_rtt  # Update(): t = now + m_delayMin - epochStart
        delta = jnp.floor(p.c * jnp.abs(t - k) ** 3)
        target = jnp.where(t < k, origin - delta, origin + delta)
        clamp = jnp.where(last_max <= 0, 20.0, jnp.inf)  # m_cntClamp
        gap = jnp.maximum(target - seg, 0.0)
        cnt1 = jnp.maximum(jnp.minimum(jnp.floor(seg / jnp.maximum(gap, 1.0)), clamp), 2.0)
        cnt2 = jnp.maximum(jnp.minimum(100.0 * seg, clamp), 2.0)
        # The counter: every segment acked outside slow start, the episode's own packets
        # included (ns-3 passes them with the ACK that ends the recovery), except while a lost
        # retransmission holds the cumulative ACK (see the docstring).
        counted = ~in_ss & (state.ep.hole_at >= NO_HOLE)
        bank = state.bank + jnp.where(counted, acked_all / MSS, 0.0)
        calls = jnp.where(ca, jnp.ceil(a - 1e-6), 0.0)
        n1 = jnp.minimum(jnp.minimum(calls, jnp.floor(bank / cnt1)), gap)
        bank = bank - n1 * cnt1
        n2 = jnp.minimum(calls - n1, jnp.floor(bank / cnt2))
        bank = bank - n2 * cnt2
        cwnd = jnp.where(grow, jnp.where(in_ss, ss_cwnd, (w + n1 + n2) * MSS), w * MSS)
        # GetSsThresh: W_max with fast convergence, ssthresh from the window, whole segments.
        lm = jnp.where(p.fast_convergence & (seg < last_max), jnp.floor(seg * (1.0 + p.beta) / 2.0),
                       seg)
        ssthresh = jnp.maximum(jnp.floor(seg * p.beta), 2.0) * MSS
        cwnd = jnp.where(ev.loss, ssthresh, cwnd)
        cwnd = jnp.where(ev.timeout, MSS, cwnd)
        w_max = jnp.where(ev.timeout, 0.0, jnp.where(ev.loss, lm, last_max))  # CubicReset
        # A reduction ends the epoch (m_epochStart = Time::Min()); the next starts after recovery.
        in_epoch = jnp.where(ev.loss | ev.timeout, False, state.in_epoch | fresh)
        return dict(cwnd=cwnd, ssthresh=ssthresh, w_max=w_max, k=k, epoch_start=epoch_start,
                    in_epoch=in_epoch, origin=origin, bank=bank)
