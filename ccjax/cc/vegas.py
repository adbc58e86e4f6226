"""TCP Vegas (Brakmo & Peterson, IEEE JSAC 1995; Linux ``tcp_vegas.c``), one MI per smoothed RTT.

Vegas keeps a few of its own packets in the bottleneck queue, no more: once per RTT it compares
the rate it would get with an empty queue (``Expected = cwnd / BaseRTT``) with the rate it gets
(``Actual = cwnd / RTT``) and turns the difference into packets (§3.2 of the paper):

    Diff = (Expected - Actual) * BaseRTT = cwnd * (1 - BaseRTT / RTT)   [packets]

which is exactly the number of the flow's packets sitting in the queue when its window is
``BDP + q`` and its RTT ``BaseRTT + q / C``. (Linux computes ``cwnd (RTT - BaseRTT) / BaseRTT``,
the same times ``RTT / BaseRTT``; ns-3's ``TcpVegas`` uses the paper's form, as here.) Congestion
avoidance then moves the window by one packet per RTT towards ``alpha <= Diff <= beta``
(defaults alpha = 2, beta = 4 packets, as Linux):
``Diff < alpha``: +1 packet, ``Diff > beta``: -1 packet, otherwise hold.

How the per-ACK sender maps to one MI per RTT:

* BaseRTT is the lowest RTT ever seen (``stats.min_rtt``; Linux ``baseRTT``), RTT is the lowest RTT
  sample of the RTT just ended (``stats.rtt_min``; Linux ``minRTT``, which filters out delayed-ACK
  and jitter noise). With fewer than three packets' RTT samples in the RTT the estimate is not
  trusted and the window grows as Reno's would (Linux: ``cntRTT <= 2``); an MI with no ACK at all
  then changes nothing.
* The RTTs reported in an MI are those of packets sent during the *previous* MI, under the
  previous window, so Diff uses that window (``cwnd_sent``). In congestion avoidance this hardly
  matters (the window moves by one packet per RTT), in slow start it does: the current window is
  already twice the one that produced the RTTs.
* Slow start (§3.3): the window doubles only every other RTT, "in between, the congestion window
  stays fixed so a valid comparison of the expected and actual rates can be made"; once Diff
  exceeds ``gamma`` (1 packet) Vegas leaves slow start with the window set to what the actual
  rate fills (Linux: ``cwnd = min(cwnd, target_cwnd + 1)``, "set cwnd to match the actual rate
  exactly: cwnd = (actual rate) * baseRTT", with ``target_cwnd = cwnd * BaseRTT / RTT``) and
  ``ssthresh`` lowered to it (Linux ``tcp_vegas_ssthresh``) so that it stays in congestion
  avoidance. Linux doubles every RTT; with a paced sender (the simulator paces at cwnd/srtt) the
  every-RTT doubling puts twice the bottleneck rate on the link for a whole RTT before the first
  RTT sample shows a queue, which overflowed a one-BDP buffer (0.4-1.2% loss at 10 Mbps, 40 ms);
  the paper's rule does not (``ss_every_other_rtt``, default on). The actual rate is also taken
  as measured, ``stats.delivery_rate`` (acked bytes over the MI), when that is the lower: after a
  doubling past the BDP the lowest RTT of the RTT is that of its first packets, sent before the
  queue built up, and ``cwnd * BaseRTT / RTT`` then keeps most of the overshoot (at 50 Mbps,
  40 ms: 1.8 BDP, a queue that Vegas' one packet per RTT took seconds to drain) where the
  delivery rate, the link's capacity, gives one BDP.
* Loss (Linux: Vegas is switched off outside the Open state, Reno handles the loss): a loss
  episode halves the window (``ssthresh = max(FlightSize / 2, 2 MSS)``, ``cwnd = ssthresh``), a
  retransmission timeout sets it to one packet and slow start resumes, exactly as ``newreno``
  (the shared ``Episodes`` tracker tells new episodes from the tail of the last one and runs the
  RFC 6298 timer). While an episode's packets are still being reported (recovery) the RTT samples
  describe the window before the reduction, so Vegas waits until they are through.
  ns-3's TcpVegas answers a loss differently (``TcpVegas::GetSsThresh``:
  ``ssthresh = max(min(ssthresh, cwnd - MSS), 2 MSS)``, i.e. one packet less than the window when
  Vegas has been steering it); ``ns3_loss`` selects that response (default off), which the
  cross-validation against ns-3 uses. ns-3 also lowers ssthresh through ``GetSsThresh`` where
  ``IncreaseWindow`` leaves slow start or shrinks the window, i.e. to one packet below the new
  window (``tcb->m_ssThresh = GetSsThresh (tcb, 0)`` after ``cwnd`` was set), where Linux
  (``tcp_vegas_ssthresh``) and the default here lower it to the window itself; ``ns3_loss``
  does that too. It matters at the next loss, which falls back to ssthresh. In slow start with
  ``ns3_rounds`` (below) the window ``GetSsThresh`` reads is the one ns-3's ACKs have grown so
  far, the round's starting window (``VegasState.w_round``) plus what was acked, not the
  doubled one ccjax sets ahead at the round's end, at a loss and at the timer; and a window
  doubles only with data out or acked (thirty-two ccjax seeds, ``scripts/score_matrix.py``,
  2026-11-29: 57 and 59 of the 60 Vegas scenarios within every tolerance against the two ns-3
  references, distance 27.2 and 24.6, from 54 and 58, 31.2 and 28.5; four flows' first windows
  into an 8-packet buffer lost 0.0041 of their packets, from 0.0160, where ns-3's lose 0.0032).
* ns-3's ``TcpVegas::IncreaseWindow`` does its arithmetic in whole segments: ``segCwnd = cwnd /
  MSS`` (integer division), ``targetCwnd = (uint32) (segCwnd * baseRtt / minRtt)`` (truncated),
  ``diff = segCwnd - targetCwnd``, and sets ``cwnd = segCwnd * MSS`` after ``segCwnd++``,
  ``segCwnd--`` or, leaving slow start, ``segCwnd = min(segCwnd, targetCwnd + 1)``, with no
  bound from the delivery rate (above). Truncating
  the target rounds Diff *up* to a whole packet: a queue of 1.2 packets reads as Diff = 2, so the
  window grows only while at most one packet is queued (here: while Diff <= 1) and the band in
  which it holds is 1 < Diff <= 4 rather than 2 <= Diff <= 4: ns-3's Vegas keeps about one packet
  less in the queue, and with the wider band two flows can hold shares further apart (the
  short-RTT flow keeps more of what slow start gave it). ns-3 also takes ``segCwnd`` from the
  window in force when the round ends, not from the one whose packets produced the round's RTTs
  (above): in congestion avoidance the two differ by the last step, in slow start the window
  now is the grown one, so ns-3 reads a larger Diff there and leaves slow start a round earlier.
  Under 1 % random loss at 50 Mbps, where Vegas slow-starts again after each timeout, that is
  what keeps ns-3's Vegas lower on the link (eight ccjax seeds, Jain of averaged throughputs:
  44 of the 60 Vegas scenarios within every tolerance with the older window, 49 with this one).
  In slow start ns-3's window at the round's end has grown by the round's ACKs (it grows per
  ACK and tests at the ACK that covers ``m_begSndNxt``), so ``segCwnd`` there is the window
  grown by this MI's ACKs. Traced (2 flows, 10 Mbps, 20 and 100 ms, 1 BDP): ns-3's 20 ms flow
  grew 10, 20, 37 and left at 32; ccjax's, reading the window before the MI's ACKs, left at 19,
  halfway through the round's ACK train, and the 100 ms flow, starting later into a shorter
  queue, left at 29 and ended at 23 to 30, where ns-3's ended at 31 to 34. With the grown
  window and the data packets' transmission time in their RTTs (``sim.core.
  rtt_correction_ticks``), thirty-two ccjax seeds (``scripts/score_matrix.py``, 2026-11-29):
  51 and 52 of the Vegas 60 within every tolerance against the two ns-3 references (distance
  34.1 and 35.4), from 51 and 50 (36.7 and 37.6); the grown window alone 49 and 49 (38.2 and
  40.0: one flow at 50 Mbps then left slow start at 128 packets where ns-3's leaves at 71).
  The cost: two flows at 50 Mbps under 1 % loss, which slow-start again after each timeout,
  leave it higher and keep 0.35 of the link where ns-3's keep 0.31 (the report's rows).
  ``ns3_segments`` selects all of this (default off: the paper's and Linux's real-valued Diff
  and windows), for the cross-validation. (With ``ns3_rounds``, below, the window now is
  already the one ns-3 has at the round's end.)
* ns-3's TcpVegas counts rounds, not RTTs: a round ends at the ACK that covers what was sent
  when the last one ended (``m_begSndNxt``; Linux ``beg_snd_nxt``), and in slow start its
  window grows a segment per ACK and sends the growth at once, so it doubles per round.
  ccjax's sender sends a window's growth in the MI after the window is set, so a slow start
  grown by each MI's ACKs lagged a round behind: 10, 20, 30, 50, 80 packets where ns-3's go
  10, 20, 40, 80, and Vegas's test met windows ns-3's never has. ``ns3_rounds`` ends slow
  start's MIs with the round (``Decision.mi_round``, at most ``ROUND_CAP_RTTS`` smoothed RTTs;
  a stalled sender keeps one-RTT MIs for its timer) and sets at each round's end what ns-3's
  window will be at the next one's: twice the window now, at most ssthresh; Diff is read
  from the window now. With the smoothed RTT moving once per ACK (``sim.core``, as ns-3's),
  thirty-two ccjax seeds (``scripts/score_matrix.py``, 2026-11-29): 53 and 55 of the Vegas
  60 within every tolerance against the two ns-3 references (distance 37.3 and 33.6), from
  51 and 52 (34.1 and 35.4); the rounds alone 48 and 49 (47.4 and 43.8); rounds in congestion
  avoidance as well 51 and 52 (43.6 and 40.5), so there the MIs stay one smoothed RTT (a round
  lasts about one then, and the MI also ends at each loss report); the variants were measured
  with a form that also grew a window without an estimate by a packet per MI in congestion
  avoidance, whatever was acked, which kept a flow that got few ACKs pushing into a full
  buffer. Default off.
* ns-3.37 hands a congestion control the RTT estimator's *smoothed* RTT (``TcpSocketBase::
  EstimateRtt`` sets ``m_lastRtt = m_rtt->GetEstimate ()``), not the sample, and
  ``TcpVegas::PktsAcked`` keeps the lowest of those over the round as its RTT and the lowest
  ever as BaseRTT. The smoothed RTT lags: it carries the queue of a round's ACK-clocked slow-start
  bursts into the next round's first ACKs, whose own samples show an empty queue, so ns-3's
  Vegas leaves slow start well below the BDP (one flow, 50 Mbps, 40 ms: at 71 packets) where
  the lowest sample would not. ``ns3_rtt`` selects this (``stats.srtt_min``, BaseRTT the
  lowest of it so far, from nothing: ns-3's ``m_baseRtt`` starts at ``Time::Max``, so where the
  handshake's sample carried a queue, ``LinkSpec.handshake``, the smoothed RTT starts from it and
  BaseRTT keeps some of it; default off: Linux's and the paper's lowest sample), for the
  cross-validation. BaseRTT takes only MIs with ACKs, as ``m_baseRtt`` only what ``PktsAcked``
  gets: an MI before the flow's first ACK repeats the smoothed RTT the flow holds (the SYN's
  sample, or the base RTT before the SYN), and counting it had set the BaseRTT of a 100 ms flow
  beside a 20 ms one to its SYN's empty-queue sample where ns-3's first data ACKs already carry
  the 20 ms flow's queue (2 flows, 50 Mbps, 20/100 ms, 1 BDP, no loss: shares 0.70/0.30 against
  ns-3's 0.63/0.37 before; thirty-two ccjax seeds, ``scripts/score_matrix.py``, the 60 Vegas
  scenarios within every tolerance 47 -> 50 against the report's ns-3 runs, 46 -> 49 against
  ten other ns-3 seeds).
* The window never drops below two packets by Vegas' own decrease (Linux), nor below one packet.

Windows are in bytes (what the simulator enforces), thresholds in packets of ``MSS`` bytes.
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
    SSTHRESH_INIT,
    Episodes,
    slow_start,
    stall_cwnd,
    track_episodes,
)

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats

#: RTT samples (in packets' worth of acked bytes) an MI needs for Vegas to trust its estimate
#: (Linux ``tcp_vegas_cong_avoid``: more than two).
MIN_SAMPLES_PKTS = 3.0
#: With ``ns3_rounds``, the longest an MI waits for its round's end, in smoothed RTTs: a round
#: lasts an RTT of its last packet, longer than the smoothed RTT while a queue builds.
ROUND_CAP_RTTS = 2.0


class VegasParams(struct.PyTreeNode):
    alpha: jnp.ndarray  # (F,) packets queued below which the window grows (Linux: 2)
    beta: jnp.ndarray  # (F,) packets queued above which it shrinks (Linux: 4)
    gamma: jnp.ndarray  # (F,) packets queued that end slow start (Linux: 1)
    ss_every_other_rtt: jnp.ndarray  # (F,) bool: slow start grows every other RTT (paper)
                                     # or every RTT (Linux, ns-3 TcpVegas)
    ns3_loss: jnp.ndarray  # (F,) bool: ns-3's TcpVegas::GetSsThresh (one packet below the
                           # window) on a loss (not Linux's half) and where Vegas lowers ssthresh
    ns3_segments: jnp.ndarray  # (F,) bool: ns-3's whole segments (TcpVegas::IncreaseWindow:
                               # truncated targetCwnd, integer diff and window), not real values
    ns3_rtt: jnp.ndarray  # (F,) bool: ns-3's RTT (TcpVegas::PktsAcked gets the smoothed RTT):
                          # RTT the lowest smoothed RTT of the round, BaseRTT the lowest ever
    ns3_rounds: jnp.ndarray  # (F,) bool: in slow start an MI is a round (ns-3's
                             # m_begSndNxt), up to ROUND_CAP_RTTS smoothed RTTs, and the window
                             # doubles per round as ns-3's per-ACK growth has it at the round's
                             # end; not one smoothed RTT, grown by the MI's ACKs
    init_cwnd_pkts: jnp.ndarray  # (F,) initial window, packets (RFC 6928: 10)
    mi_rtts: jnp.ndarray  # (F,) MI length in smoothed RTTs (one adjustment per RTT)
    min_rto_s: jnp.ndarray  # (F,) RFC 6298 §2.4: 1 s
    max_rto_s: jnp.ndarray  # (F,) RFC 6298 §2.5: 60 s


class VegasState(struct.PyTreeNode):
    cwnd: jnp.ndarray  # (F,) bytes: the window of the current MI
    cwnd_sent: jnp.ndarray  # (F,) bytes: the window of the previous MI (whose RTTs come back now)
    ssthresh: jnp.ndarray  # (F,) bytes
    ss_hold: jnp.ndarray  # (F,) bool: slow start holds the window this MI (grows every other)
    base_srtt: jnp.ndarray  # (F,) s: the lowest smoothed RTT so far (BaseRTT with ``ns3_rtt``)
    #: (F,) bytes: with ``ns3_rounds``, ns-3's window when its current slow-start round began,
    #: which its ACKs grow one segment each until the round's end (the window ccjax set ahead)
    w_round: jnp.ndarray
    ep: Episodes


def vegas_diff(cwnd_pkts: jnp.ndarray, base_rtt: jnp.ndarray, rtt: jnp.ndarray) -> jnp.ndarray:
    """Brakmo & Peterson §3.2: ``Diff = cwnd (1 - BaseRTT / RTT)`` packets, for any input.

    ``RTT`` is raised to at least ``BaseRTT`` (so Diff >= 0) and both to a microsecond, so that
    nothing divides by zero."""
    base = jnp.maximum(base_rtt, 1e-6)
    return cwnd_pkts * (1.0 - base / jnp.maximum(rtt, base))


@dataclass(frozen=True)
class Vegas:
    name: str = "vegas"
    #: on_interval is elementwise over flows (``sim.compact``)
    per_flow: ClassVar[bool] = True

    def default_params(self, n_flows: int) -> VegasParams:
        full = lambda v: jnp.full(n_flows, v, jnp.float32)  # noqa: E731
        return VegasParams(alpha=full(2.0), beta=full(4.0), gamma=full(1.0),
                           ss_every_other_rtt=jnp.ones(n_flows, bool),
                           ns3_loss=jnp.zeros(n_flows, bool),
                           ns3_segments=jnp.zeros(n_flows, bool),
                           ns3_rtt=jnp.zeros(n_flows, bool),
                           ns3_rounds=jnp.zeros(n_flows, bool), init_cwnd_pkts=full(10.0),
                           mi_rtts=full(1.0), min_rto_s=full(1.0), max_rto_s=full(60.0))

    def _decide(self, cwnd: jnp.ndarray, srtt: jnp.ndarray, params: VegasParams,
                by_round: jnp.ndarray) -> Decision:
        # Window-based: pace at cwnd/srtt (rate 0), at most cwnd in flight; one MI per RTT.
        # With ``ns3_rounds``, one per round where ``by_round`` (slow start; not a stalled
        # sender, which no report will reach: its MIs keep the time for its retransmission
        # timer), at most ROUND_CAP_RTTS smoothed RTTs.
        rounds = params.ns3_rounds & by_round
        mi = params.mi_rtts * srtt
        return Decision(rate=jnp.zeros_like(cwnd), cwnd=cwnd,
                        mi_s=jnp.where(rounds, ROUND_CAP_RTTS * mi, mi), mi_round=rounds)

    def init(self, params: VegasParams, base_rtt_s: jnp.ndarray):
        rtt = jnp.broadcast_to(jnp.asarray(base_rtt_s, jnp.float32), params.init_cwnd_pkts.shape)
        cwnd = params.init_cwnd_pkts * MSS  # RFC 6928 §2
        state = VegasState(cwnd=cwnd, cwnd_sent=cwnd, ssthresh=jnp.full_like(cwnd, SSTHRESH_INIT),
                           ss_hold=jnp.zeros(cwnd.shape, bool),
                           # ns-3's m_baseRtt starts at Time::Max and takes the lowest smoothed
                           # RTT its ACKs bring, which starts from the handshake's sample
                           base_srtt=jnp.where(params.ns3_rtt, jnp.inf, rtt),
                           w_round=cwnd, ep=Episodes.start(rtt))
        return state, self._decide(cwnd, rtt, params, cwnd < state.ssthresh)

    def on_interval(self, state: VegasState, stats: MIStats, params: VegasParams):
        p = params
        # Recovery: bytes of the last loss episode were still outstanding when this MI began,
        # so its RTT samples (partly) describe the window before the reduction.
        recovering = state.ep.in_recovery
        ep, ev = track_episodes(state.ep, stats, p.min_rto_s, p.max_rto_s)
        cwnd = jnp.maximum(state.cwnd, MSS)
        w_sent = jnp.maximum(state.cwnd_sent, MSS) / MSS  # packets

        # --- The estimate: Diff from the lowest RTT of this MI (the packets sent in the last).
        trusted = (stats.rtt_samples >= MIN_SAMPLES_PKTS * MSS) & ~recovering
        has = stats.rtt_samples > 0
        rtt = jnp.where(has, stats.rtt_min, stats.srtt)
        base = jnp.minimum(stats.min_rtt, rtt)
        # BaseRTT from ACKs only: ns-3's m_baseRtt is the lowest m_lastRtt that PktsAcked got,
        # so an MI without an ACK (before a flow's first, or one that starts late) leaves it
        # where it is (without a sample ``stats.srtt_min`` repeats the smoothed RTT, which before
        # the first ACK is the SYN's sample, or the base RTT before the SYN).
        base_srtt = jnp.minimum(state.base_srtt, jnp.where(has, stats.srtt_min, jnp.inf))
        rtt = jnp.where(p.ns3_rtt, stats.srtt_min, rtt)
        # (until the first ACK, no BaseRTT: the estimate is not trusted then anyway)
        base = jnp.where(p.ns3_rtt, jnp.where(jnp.isfinite(base_srtt), base_srtt, rtt), base)
        diff = vegas_diff(w_sent, base, rtt)
        # What the actual rate fills over BaseRTT (Linux target_cwnd = cwnd BaseRTT / RTT),
        # packets; no more than the measured delivery rate fills (see the module docstring).
        target = jnp.minimum(w_sent - diff, jnp.maximum(stats.delivery_rate, 0.0) * base / MSS)
        # ns-3's TcpVegas::IncreaseWindow counts in whole segments: segCwnd = cwnd / MSS
        # (integer division), targetCwnd = (uint32) (segCwnd * baseRtt / minRtt), diff = segCwnd
        # - targetCwnd. The truncation rounds Diff up to a whole packet (Diff < alpha = 2 only
        # while the queue holds at most one packet), and the window moves in whole segments.
        # segCwnd is the window now (ns-3 reads tcb->m_cWnd when the round ends), not the one
        # whose packets produced the RTTs (w_sent, the paper's and Linux's intent): a window
        # one packet up in CA, or the doubled one in slow start, reads a larger Diff.
        in_ss = cwnd < state.ssthresh
        # --- Reno, where Vegas has no estimate (RFC 5681 over the MI; only ACKs of data sent
        # after the last reduction count, as in newreno); in slow start also the window ns-3
        # reads at the round's end (below).
        reno_ss, rest = slow_start(cwnd, state.ssthresh, ev.acked_new)
        # With rounds (``ns3_rounds``) ns-3's window grows by one segment per ACK of a round in
        # slow start and sends the growth at once, so at the round's end it is twice what it
        # was at the round's start. ccjax's sender sends a window's growth in the MI after it
        # is set, so at a round's end it sets what ns-3's window will be at the end of the next
        # round: twice the window now (at most ssthresh). Grown by the round's ACKs instead, it
        # lagged a round behind: 10, 20, 30, 50, 80 packets where ns-3's go 10, 20, 40, 80.
        # (Congestion avoidance, where Vegas has no estimate, still grows by the ACKs that came:
        # a flow that gets few, beside flows that hold a small buffer full, grows slowly.)
        # Only with data out or acked: a flow yet to start, or one whose whole window was just
        # lost unseen, is in no round (doubled at each empty MI, a flow starting at 1 s had a
        # window of 40,960 packets by then; a flow whose first window was lost whole timed out
        # with ssthresh 39 where ns-3's has 9).
        live = (stats.acked_bytes > 0) | (stats.inflight > 0)
        doubled = p.ns3_rounds & live
        reno_ss = jnp.where(p.ns3_rounds,
                            jnp.where(live, slow_start(cwnd, state.ssthresh, cwnd)[0], cwnd),
                            reno_ss)
        # In slow start the window at the round's end has grown by the round's ACKs (ns-3 grows
        # it per ACK and tests Diff at the ACK that covers m_begSndNxt: traced, 10 Mbps, 20 ms,
        # 10 packets, 20, then 37 at the test, which left at 33). ccjax's MI has its ACKs in
        # aggregate, so ns-3's segCwnd is the window grown by this MI's (``reno_ss``); the
        # window before them read a round's test half a train early (that flow left at 19).
        # (With rounds that is the window now: set a round ahead, above.)
        seg_now = jnp.where(in_ss & ~(state.ss_hold & p.ss_every_other_rtt) & ~p.ns3_rounds,
                            reno_ss, cwnd)
        # (+1e-4: a window of k packets in float32 is k, not k - eps)
        seg = jnp.floor(seg_now / MSS + 1e-4)
        seg_target = jnp.floor(seg * (1.0 - vegas_diff(1.0, base, rtt)) + 1e-4)
        diff = jnp.where(p.ns3_segments, seg - seg_target, diff)
        # (ns-3's targetCwnd has no delivery-rate bound: with a flow's data and SYN meeting the
        # queue when ns-3's do, ``LinkSpec.handshake``, the bound took the slow-start exit of a
        # 100 ms flow beside a 20 ms one down to about 19 packets, where ns-3's leaves at 33.)
        target = jnp.where(p.ns3_segments, seg_target, target)

        reno = reno_ss + MSS * rest / reno_ss

        # ns-3 keeps the window in whole segments where Vegas sets it: cwnd = segCwnd * MSS,
        # with segCwnd = cwnd / MSS (integer division) moved by one or set to targetCwnd + 1.
        cwnd_v = jnp.where(p.ns3_segments, seg * MSS, cwnd)

        # --- Vegas slow start: double every other RTT (§3.3), leave it once Diff > gamma with the
        # window the actual rate fills, plus one packet (Linux).
        ss_grown = reno_ss
        ss_exit = diff > p.gamma
        ss_cwnd = jnp.where(ss_exit, jnp.minimum(cwnd_v, (target + 1.0) * MSS),
                            jnp.where(state.ss_hold & p.ss_every_other_rtt, cwnd, ss_grown))

        # --- Vegas congestion avoidance: one packet per RTT towards alpha <= Diff <= beta.
        step = jnp.where(diff < p.alpha, 1.0, jnp.where(diff > p.beta, -1.0, 0.0))
        ca_cwnd = jnp.maximum(cwnd_v + step * MSS, jnp.minimum(cwnd, 2.0 * MSS))

        vegas = jnp.where(in_ss, ss_cwnd, ca_cwnd)
        # During recovery the window holds (Linux and ns-3 leave it to loss recovery); Reno grows
        # it only where too few RTT samples came back for an estimate (Linux).
        cwnd_new = jnp.where(trusted, vegas, jnp.where(recovering, cwnd, reno))
        # Leaving slow start or shrinking in CA lowers ssthresh to the window, so that the flow
        # stays in congestion avoidance (Linux tcp_vegas_ssthresh, ns-3 GetSsThresh); after
        # every CA adjustment ssthresh is raised to at least 3/4 of the window (Linux
        # tcp_current_ssthresh, ns-3 TcpVegas::IncreaseWindow), so that it follows a window
        # that has grown and a loss does not fall back to a window long gone.
        shrink = trusted & (ss_exit & in_ss | ~in_ss & (step < 0))
        # (ns-3: GetSsThresh of the window just set, one packet below it; see ``ns3_loss``.)
        lowered = jnp.where(p.ns3_loss,
                            jnp.maximum(jnp.minimum(state.ssthresh, cwnd_new - MSS), 2.0 * MSS),
                            jnp.minimum(state.ssthresh, cwnd_new))
        ssthresh = jnp.where(shrink, lowered, state.ssthresh)
        ssthresh = jnp.where(trusted & ~in_ss, jnp.maximum(ssthresh, 0.75 * cwnd_new), ssthresh)

        # --- Loss episode and timeout: Reno's reactions (RFC 5681 eq. 4, RFC 6582, RFC 6298).
        # ns-3's GetSsThresh reads the window it has when the loss is found or the timer fires.
        # In slow start with rounds ccjax's window is already what ns-3's grows to by the round's
        # end (``reno_ss`` above); ns-3's has grown only by the round's ACKs so far: the round's
        # starting window (``w_round``) plus what this MI acked, at most doubled. (Four flows'
        # first windows into an 8-packet buffer: a flow that got one of ten packets through
        # found the loss at 11 packets in ns-3, ssthresh 10; ccjax's took ssthresh 19 from its
        # doubled window and sent 19 into the full queue. One that lost all ten times out at a
        # window of 10 in ns-3, ssthresh 9.)
        w_ns3 = jnp.minimum(state.w_round + stats.acked_bytes, 2.0 * state.w_round)
        w_found = jnp.where(in_ss & p.ns3_rounds, w_ns3, cwnd)
        ssthresh_red = jnp.where(
            p.ns3_loss, jnp.maximum(jnp.minimum(state.ssthresh, w_found - MSS), 2.0 * MSS),
            jnp.maximum(0.5 * ev.flight, 2.0 * MSS))
        cwnd_new = jnp.where(ev.loss, jnp.minimum(ssthresh_red, cwnd),
                             jnp.where(ev.timeout, MSS, cwnd_new))
        ssthresh = jnp.where(ev.loss | ev.timeout, ssthresh_red, ssthresh)
        cwnd_new = jnp.clip(cwnd_new, MSS, MAX_CWND)
        # The every-other-RTT rhythm of slow start restarts with a growth RTT after a reduction.
        ss_hold = jnp.where(ev.loss | ev.timeout, False, ~state.ss_hold)

        # ns-3's window at a round's end is where its next round starts (the window ccjax set
        # ahead, once all the round's ACKs came); after a reduction, the reduced window.
        w_round = jnp.where(ev.loss | ev.timeout, cwnd_new,
                            jnp.where(doubled & in_ss & (cwnd_new > cwnd), w_ns3,
                                      jnp.where(in_ss, state.w_round, cwnd_new)))
        new = VegasState(cwnd=cwnd_new, cwnd_sent=cwnd, ssthresh=ssthresh, ss_hold=ss_hold,
                         base_srtt=base_srtt, w_round=w_round, ep=ep)
        # (ns-3 counts rounds in congestion avoidance too; there a round lasts a smoothed RTT
        # but for the MI ends at loss reports, and one-RTT MIs measured closer to ns-3:
        # docs/validation-history.md, 2026-11-29)
        return new, self._decide(stall_cwnd(ep, cwnd_new), stats.srtt, p,
                                 ~ep.stalled & (cwnd_new < ssthresh))
