"""BBR v1 (Cardwell et al., ACM Queue 2016; draft-cardwell-iccrg-bbr-congestion-control-00;
Linux ``net/ipv4/tcp_bbr.c``), at the granularity of one monitor interval per RTprop.

BBR models the path by two numbers and paces at the first, capping what is in flight with their
product:

* ``BtlBw``: the windowed maximum of delivery-rate samples over the last 10 round trips
  (draft §4.1.1, Linux ``bbr_bw_rtts = CYCLE_LEN + 2``);
* ``RTprop``: the windowed minimum RTT over the last 10 s (draft §4.1.2.3,
  ``bbr_min_rtt_win_sec``).

A state machine chooses the gains (draft §4.3; Linux ``bbr_update_model``):

* STARTUP: pacing and cwnd gain ``2/ln2 ~ 2.885``; the pipe is full once BtlBw has not grown by
  25% in three consecutive rounds (``bbr_check_full_bw_reached``);
* DRAIN: pacing gain ``ln2/2`` (Linux: ``1/high_gain``), cwnd gain still ``2/ln2``, until the
  bytes in flight are at most one BDP (``bbr_check_drain``);
* PROBE_BW: the eight-phase pacing-gain cycle ``[5/4, 3/4, 1, 1, 1, 1, 1, 1]``, cwnd gain 2
  (``bbr_is_next_cycle_phase``): a phase lasts one RTprop; the 5/4 phase in addition lasts until
  the flight reaches ``5/4 BDP`` or a loss is seen, the 3/4 phase ends early once the flight is
  down to one BDP. The cycle starts at a random phase other than 3/4;
* PROBE_RTT: entered when RTprop has not been refreshed (a strictly lower sample, Linux's
  ``bbr_update_min_rtt``; the draft's ``BBRUpdateRTprop`` also refreshes on an equal one, which on
  a link of fixed delay postpones PROBE_RTT for as long as the queue empties) for 10 s; the
  window drops to 4 packets (``bbr_cwnd_min_target``) and stays there for
  ``max(200 ms, one round)`` counted from when the flight first fell to 4 packets; then RTprop's
  timestamp restarts, the window before PROBE_RTT is restored and BBR returns to PROBE_BW (or to
  STARTUP if the pipe was never full).

How the per-ACK machinery maps onto MIs (one MI = one RTprop estimate):

* Delivery-rate sample: the MI's ACK rate, computed as Linux does (``tcp_rate.c``) as
  ``delivered / max(send interval, ACK interval)``: the ACK interval is the MI plus one tick
  (the simulator reports a tick's ACKs together, and a group of packets admitted in one tick
  leaves the queue at once, so an MI's ACKs can cover up to about a tick more of bottleneck
  time), lengthened when the RTT fell over the MI (ACKs bunched by a draining queue); the send
  interval is where the acked bytes were sent (the MI shifted back by their RTTs), whose rate
  is taken from the send rates of the last ``SND_HIST`` MIs. Without these bounds the maximum
  filter turns the ACK-count jitter of short MIs (+-2 packets of 33 at 10 Mbps and 40 ms) into
  an estimate above capacity (single 10 Mbps flow, 1 ms ticks: +3% at 80 ms RTT, +15-20% at
  5-10 ms, packet model), and BBR keeps a standing queue with losses; with them the estimate
  stays within -5%..+9% in the same runs. An MI without ACKs gives no sample and changes no
  estimate.
* Round trips are counted as Linux does (``next_rtt_delivered``), by bytes: at a round start the
  bytes then in flight are noted; the round ends at the MI in which all of them have been
  reported (acked or lost). The simulator reports feedback in sending order, so this is exact up
  to the MI boundary. Under queueing a round is longer than an MI, and several MIs share a round.
* The BtlBw filter is a ring of per-round maxima over the last 10 rounds (an exact windowed max;
  Linux's ``minmax`` keeps three samples as an approximation of the same thing). Samples taken
  while the sender is application limited (during PROBE_RTT and until its packets are all
  reported, Linux ``tp->app_limited``) only count when they raise the estimate, and such rounds
  do not age the filter (so a long PROBE_RTT cannot empty it, as with Linux's ``minmax``, which
  only expires samples when a new one arrives).
* RTprop's sample: the MI's lowest RTT (``rtt_min``); ``stats.min_rtt`` is the sender's lifetime
  minimum and never expires, so it cannot be used.
* The window follows ``bbr_set_cwnd``: once the pipe is full ``cwnd = min(cwnd + acked, target)``,
  before that it grows by the acked bytes while below the target, where
  ``target = cwnd_gain * BDP + 3 send quanta`` (+2 packets in the 5/4 phase,
  ``bbr_quantization_budget``); a quantum is what the pacer releases in 1 ms (Linux's TSO
  autosizing goal, at least 2 packets, at most 64 KB), which here is one tick of sending. The
  window changes only in MIs with ACKs, never goes below 4 packets, and is 4 packets in PROBE_RTT.
  With one MI per RTprop the growth is not Linux's doubling per round: the window set at an MI's
  end governs the next MI's sends, so an MI acks what the window of two MIs back sent, and
  STARTUP's window follows the Fibonacci numbers, about 1.62x per round (measured, 100 Mbps,
  100 ms: 10, 20, 30, 50, 80, 130, 210, 338 packets; BtlBw reached 0.9 of the link at 1.2 s where
  doubling would take about 1.0 s). Sub-RTT MIs in STARTUP, as NewReno's slow start has, are the
  known remedy, not taken: BtlBw samples over shorter MIs are noisier in the packet model.
* In the default (paced) packet model a tick's packets leave the queue as one group, and an
  MI's delivery-rate sample, padded by one tick, runs about 2 % above capacity on average (one
  flow, 10 Mbps, 40 ms, 1 BDP: BtlBw 1.02 C, up to 1.05 C; the 10-round max filter keeps the upper
  tail), so BBR keeps a standing queue of most of the buffer and loses about 1 % of its packets
  after STARTUP; the ACK-clocked sender (``window_sender="ack-clocked"``), whose departures are
  spread over the ticks they leave in, gives 0.995 C and no loss there.
* PROBE_BW's 5/4 and 3/4 phases end where a per-ACK sender leaves them, not at the next MI
  end: once the 5/4 phase has lasted an RTprop with the flight short of its target, or when the
  3/4 phase begins, the next MI is cut to the time the flight takes to reach the target at
  ``(gain x 0.99 - 1) x BtlBw`` (at least a tick, at most an RTprop). Checked only at MI ends,
  the 5/4 phase ran a whole RTprop more and the one-RTprop 3/4 phase could not drain it: one
  flow at 12 Mbps, 40 ms, 1 BDP (ACK-clocked delivery, 10 s) kept 10.4 ms queued on average,
  6.7 ms now; ns-3.37's TcpBbr 4.9 ms (seeds 1 and 2, 10 s). Cut MIs give no BtlBw sample,
  so the 5/4 phase cuts its MIs only for its first ``CUT_PHASE_RTPROPS`` RTprops: with spare
  capacity its flight never reaches the target, and whole MIs' samples then let BtlBw grow as
  a per-ACK sender's do.
* The pacing rate is ``gain * BtlBw * (1 - 1%)`` (``bbr_pacing_margin_percent``) and, until the
  pipe is full, never decreases (``bbr_set_pacing_rate``); before the first sample it is
  ``2/ln2 * init_cwnd / RTT`` (``bbr_init_pacing_rate_from_rtt``).
* Time (phase lengths, PROBE_RTT's 200 ms, RTprop's 10 s) is the controller's own clock, the sum
  of the MI durations. MI lengths are whole ticks, so "one RTprop has passed" allows half a tick.
* An MI in which nothing was sent, acked, lost or in flight is idle (the flow has not started or
  has stopped): RTprop's timer does not run, as Linux does not probe RTT right after idle.

Random start phase: the Controller API carries no PRNG key, so the phase is drawn from a
deterministic integer hash (murmur3's finalizer) of the flow's ``phase_seed`` parameter (its flow
index by default, so flows with one base RTT draw different phases), the bit pattern of its base
RTT and the number of PROBE_BW entries so far. Nothing in the hash is the flow's position in the
array ``on_interval`` is handed: on the CPU the batch driver hands it only the flows whose MI
ended, gathered across the batch (``sim.compact``). Integer hashing is exact on every backend, so
CPU and GPU runs, and a link alone or in any batch, draw the same phases; change ``phase_seed``
to draw others.

Loss: BBR v1 does not react to loss (besides leaving the 5/4 phase); Linux's packet conservation
during fast recovery (``bbr_set_cwnd_to_recover_or_restore``) is a per-ACK refinement that is left
out here.

Windows and rates are in bytes and bytes/s; one packet is one 1500-byte MSS. Times are float32
seconds since the flow's first MI: sub-millisecond precision for runs of up to about an hour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Decision
from ccjax.units import PACKET_BYTES

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats

MSS = float(PACKET_BYTES)
STARTUP, DRAIN, PROBE_BW, PROBE_RTT = 0, 1, 2, 3
#: Linux ``bbr_high_gain = BBR_UNIT * 2885 / 1000 + 1``: 2/ln2, the smallest gain that doubles
#: the sending rate every round (draft §4.3.2.1).
HIGH_GAIN = 2.0 / math.log(2.0)
#: Linux ``bbr_drain_gain = BBR_UNIT * 1000 / 2885``: the inverse of the startup gain.
DRAIN_GAIN = math.log(2.0) / 2.0
#: draft §4.3.4.3 / Linux ``bbr_pacing_gain``
PACING_GAINS = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
CYCLE_LEN = len(PACING_GAINS)
#: rounds in the BtlBw window (Linux ``bbr_bw_rtts = CYCLE_LEN + 2``)
BW_RTTS = CYCLE_LEN + 2
#: Linux ``bbr_cwnd_min_target``: the window floor and the PROBE_RTT window, packets.
CWND_MIN_PKTS = 4.0
#: MIs of send-rate history kept for the delivery-rate bound (covers RTTs up to 4 RTprop)
SND_HIST = 4
#: PROBE_BW's 5/4 phase cuts its MIs to end where the flight meets its target only while it
#: is younger than this many RTprops (cut MIs give no BtlBw sample). One flow at 12 Mbps,
#: 40 ms, 1 BDP, ACK-clocked, 10 s, mean queueing delay: 11.9 ms with 1 (a single cut), 8.1
#: with 2, 6.7 with 3 and without a bound; a link going from 10 to 30 Mbps is filled within
#: 1 s with a bound of 3, and in 4.5 s without one.
CUT_PHASE_RTPROPS = 3.0
#: rates and windows never exceed these (bytes/s, bytes): float32 state stays finite.
MAX_RATE = 1e12
MAX_CWND = 1e12


class BBRParams(struct.PyTreeNode):
    high_gain: jnp.ndarray  # (F,) STARTUP pacing and cwnd gain (2/ln2)
    drain_gain: jnp.ndarray  # (F,) DRAIN pacing gain (ln2/2)
    cwnd_gain: jnp.ndarray  # (F,) PROBE_BW cwnd gain (2)
    full_bw_thresh: jnp.ndarray  # (F,) growth that counts as "still growing" (1.25)
    full_bw_rounds: jnp.ndarray  # (F,) rounds without it that mean a full pipe (3)
    rtprop_win_s: jnp.ndarray  # (F,) RTprop filter window, s (10)
    probe_rtt_s: jnp.ndarray  # (F,) time at 4 packets in PROBE_RTT, s (0.2)
    pacing_margin: jnp.ndarray  # (F,) pace this fraction below the model (0.01)
    quantum_s: jnp.ndarray  # (F,) send quantum as time at the pacing rate, s (1 ms)
    init_cwnd_pkts: jnp.ndarray  # (F,) initial window, packets (RFC 6928: 10)
    phase_seed: jnp.ndarray  # (F,) int32 salt of the random PROBE_BW start phase (default:
                             # the flow index)


class BBRState(struct.PyTreeNode):
    mode: jnp.ndarray  # (F,) int32: STARTUP, DRAIN, PROBE_BW, PROBE_RTT
    clock: jnp.ndarray  # (F,) s: sum of the durations of all MIs so far
    bw_ring: jnp.ndarray  # (F, BW_RTTS) bytes/s: max delivery rate of each of the last rounds
    bw_rounds: jnp.ndarray  # (F,) int32 rounds that aged the BtlBw filter (not app limited)
    rounds: jnp.ndarray  # (F,) int32 round trips so far
    round_left: jnp.ndarray  # (F,) bytes still to be reported before the round ends
    app_left: jnp.ndarray  # (F,) bytes sent while app limited (PROBE_RTT) still unreported
    delivered: jnp.ndarray  # (F,) bytes acked so far, saturating at the initial window
    full_bw: jnp.ndarray  # (F,) bytes/s: BtlBw at the last 25% growth
    full_bw_cnt: jnp.ndarray  # (F,) int32 rounds since then
    full_bw_reached: jnp.ndarray  # (F,) bool
    rtprop: jnp.ndarray  # (F,) s
    rtprop_stamp: jnp.ndarray  # (F,) s on the clock: when RTprop was last refreshed
    cycle_idx: jnp.ndarray  # (F,) int32 PROBE_BW phase
    cycle_stamp: jnp.ndarray  # (F,) s: when the phase started
    bw_entries: jnp.ndarray  # (F,) int32 PROBE_BW entries so far (varies the random phase)
    probe_rtt_done: jnp.ndarray  # (F,) s: when PROBE_RTT may end; < 0: not yet at 4 packets
    probe_rtt_round_done: jnp.ndarray  # (F,) bool: a round has passed at 4 packets
    prior_cwnd: jnp.ndarray  # (F,) bytes: window before PROBE_RTT
    cwnd: jnp.ndarray  # (F,) bytes
    pacing_rate: jnp.ndarray  # (F,) bytes/s
    pacing_gain: jnp.ndarray  # (F,) gain of the current decision (for inspection)
    snd_hist: jnp.ndarray  # (F, SND_HIST) bytes/s: send rates of the last MIs, newest first
    cut: jnp.ndarray  # (F,) bool: the MI now running was cut short to end a gain phase

    @property
    def btlbw(self) -> jnp.ndarray:
        """(F,) bytes/s: the BtlBw estimate (0 before the first sample)."""
        return self.bw_ring.max(-1)


def _fmix32(h: jnp.ndarray) -> jnp.ndarray:
    """murmur3's 32-bit finalizer: a bijective avalanche mix of uint32 values."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def random_start_phase(base_rtt_s: jnp.ndarray, seed: jnp.ndarray,
                       entry: jnp.ndarray) -> jnp.ndarray:
    """(F,) int32 PROBE_BW start phase, uniform over the seven phases other than 3/4.

    Linux ``bbr_reset_probe_bw_mode``: ``cycle_idx = CYCLE_LEN - 1 - rand(bbr_cycle_rand = 7)``,
    then one advance, i.e. one of phases 2..7 and 0. Drawn from a hash of each flow's ``seed``
    (its flow index by default), its base RTT's bits and the entry count, elementwise: a flow's
    phase does not depend on where in the array it sits (see the module docstring)."""
    rtt_bits = jax.lax.bitcast_convert_type(jnp.asarray(base_rtt_s, jnp.float32), jnp.uint32)
    h = _fmix32(seed.astype(jnp.uint32) * jnp.uint32(0x9E3779B9) + jnp.uint32(0x632BE5AB))
    h = _fmix32(h ^ rtt_bits)
    h = _fmix32(h ^ entry.astype(jnp.uint32))
    r = (h % jnp.uint32(CYCLE_LEN - 1)).astype(jnp.int32)  # 0..6
    return (CYCLE_LEN - 1 - r + 1) % CYCLE_LEN  # 7 - r, then advance once: {0, 2, ..., 7}


def _gain_of(cycle_idx: jnp.ndarray) -> jnp.ndarray:
    return jnp.asarray(PACING_GAINS, jnp.float32)[jnp.clip(cycle_idx, 0, CYCLE_LEN - 1)]


@dataclass(frozen=True)
class BBR:
    name: str = "bbr"
    #: on_interval is elementwise over flows (``sim.compact``)
    per_flow: ClassVar[bool] = True

    def default_params(self, n_flows: int) -> BBRParams:
        full = lambda v, dt=jnp.float32: jnp.full(n_flows, v, dt)  # noqa: E731
        return BBRParams(high_gain=full(HIGH_GAIN), drain_gain=full(DRAIN_GAIN),
                         cwnd_gain=full(2.0), full_bw_thresh=full(1.25),
                         full_bw_rounds=full(3, jnp.int32), rtprop_win_s=full(10.0),
                         probe_rtt_s=full(0.2), pacing_margin=full(0.01),
                         quantum_s=full(1e-3), init_cwnd_pkts=full(10.0),
                         phase_seed=jnp.arange(n_flows, dtype=jnp.int32))

    def init(self, params: BBRParams, base_rtt_s: jnp.ndarray):
        p = params
        rtt = jnp.broadcast_to(jnp.asarray(base_rtt_s, jnp.float32), p.init_cwnd_pkts.shape)
        cwnd = p.init_cwnd_pkts * MSS
        z = jnp.zeros_like(cwnd)
        zi = jnp.zeros(cwnd.shape, jnp.int32)
        # bbr_init_pacing_rate_from_rtt: high_gain * init_cwnd / RTT (the handshake's RTT).
        rate = p.high_gain * cwnd / jnp.maximum(rtt, 1e-6)
        state = BBRState(
            mode=zi + STARTUP, clock=z, bw_ring=jnp.zeros(cwnd.shape + (BW_RTTS,), jnp.float32),
            bw_rounds=zi, rounds=zi, round_left=z, app_left=z, delivered=z, full_bw=z,
            full_bw_cnt=zi, full_bw_reached=jnp.zeros(cwnd.shape, bool),
            # The handshake gives the first RTT sample (as the simulator's SRTT starts there).
            rtprop=rtt, rtprop_stamp=z, cycle_idx=zi, cycle_stamp=z, bw_entries=zi,
            probe_rtt_done=z - 1.0, probe_rtt_round_done=jnp.zeros(cwnd.shape, bool),
            prior_cwnd=cwnd, cwnd=cwnd, pacing_rate=rate, pacing_gain=p.high_gain + z,
            snd_hist=jnp.zeros(cwnd.shape + (SND_HIST,), jnp.float32),
            cut=jnp.zeros(cwnd.shape, bool))
        return state, Decision(rate=rate, cwnd=cwnd, mi_s=rtt,
                                      mi_round=jnp.zeros(rate.shape, bool))

    def on_interval(self, state: BBRState, stats: MIStats, params: BBRParams):
        p, s = params, state
        tick = stats.tick_s
        now = s.clock + jnp.maximum(stats.duration_s, 0.0)
        acked = jnp.maximum(stats.acked_bytes, 0.0)
        lost = jnp.maximum(stats.lost_bytes, 0.0)
        reported = acked + lost
        inflight = jnp.maximum(stats.inflight, 0.0)
        sent = jnp.maximum(stats.sent_bytes, 0.0)
        idle = (sent <= 0) & (reported <= 0) & (inflight <= 0)
        rtprop = s.rtprop

        # --- Rounds (bbr_update_bw): a round ends once the bytes in flight at its start have all
        # been reported; the next starts there.
        round_start = (reported > 0) & (reported >= s.round_left)
        rounds = s.rounds + round_start.astype(jnp.int32)
        round_left = jnp.where(round_start, inflight, jnp.maximum(s.round_left - reported, 0.0))

        # --- Delivery-rate sample (tcp_rate.c): delivered / max(send interval, ACK interval),
        # which keeps bunched ACKs from inflating the estimate (see the module docstring).
        # ACK interval: the MI, plus one tick (ACKs are reported per tick, so an MI's ACKs may
        # have left the bottleneck over one tick more), plus (first RTT - last RTT) when the RTT
        # fell over the MI (estimated from the half means, half an MI apart). Send interval: the
        # acked bytes left the sender between ``start - rtt_max`` and ``end - rtt_min``; the
        # rate they were sent at is the overlap-weighted send rate of the MIs in that span.
        dur = jnp.maximum(stats.duration_s, 1e-9)
        # (an MI cut short to end a gain phase where it would end per ACK, below, gives no
        # sample: over fewer ticks a tick's bunched ACKs weigh more, and the max filter keeps
        # the high ones)
        rate_ok = (acked > 0) & (stats.duration_s > 0) & ~s.cut
        fall = jnp.nan_to_num(2.0 * (stats.rtt_first_half - stats.rtt_second_half))
        interval = dur + jnp.clip(fall, 0.0, 1e3) + tick
        ack_rate = jnp.clip(jnp.nan_to_num(acked / interval), 0.0, MAX_RATE)
        snd = jnp.concatenate([jnp.clip(jnp.nan_to_num(stats.send_rate), 0.0, MAX_RATE)[..., None],
                               s.snd_hist], -1)  # (F, SND_HIST + 1), index m = MIs back
        m = jnp.arange(SND_HIST + 1, dtype=jnp.float32)
        # span of send times in MI durations back from the MI end: [rtt_min/D, 1 + rtt_max/D]
        a = jnp.clip(stats.rtt_min / dur, 0.0, SND_HIST + 1.0)[..., None]
        b = jnp.clip(1.0 + stats.rtt_max / dur, 0.0, SND_HIST + 1.0)[..., None]
        ov = jnp.clip(jnp.minimum(m + 1.0, b) - jnp.maximum(m, a), 0.0, 1.0)
        snd_bound = jnp.sum(ov * snd, -1) / jnp.maximum(jnp.sum(ov, -1), 1e-6)
        snd_bound = jnp.where(jnp.sum(ov, -1) > 0, snd_bound, MAX_RATE)
        sample = jnp.where(rate_ok, jnp.minimum(ack_rate, snd_bound), 0.0)
        snd_hist = snd[..., :SND_HIST]
        app_limited = (s.mode == PROBE_RTT) | (s.app_left > 0)
        btlbw_old = s.bw_ring.max(-1)
        # An application-limited sample only counts if it raises the estimate, and its round does
        # not age the filter (tcp_bbr.c: "!rs->is_app_limited || bw >= bbr_max_bw(sk)").
        new_slot = round_start & ~app_limited
        bw_rounds = s.bw_rounds + new_slot.astype(jnp.int32)
        use = rate_ok & (~app_limited | (sample >= btlbw_old))
        slot = (jnp.arange(BW_RTTS)[None, :] == (bw_rounds % BW_RTTS)[..., None])
        ring = jnp.where(slot & new_slot[..., None], 0.0, s.bw_ring)  # the slot's old round expires
        ring = jnp.where(slot & use[..., None], jnp.maximum(ring, sample[..., None]), ring)
        btlbw = ring.max(-1)
        app_left = jnp.where(s.mode == PROBE_RTT, inflight, jnp.maximum(s.app_left - reported, 0.0))

        quantum = jnp.clip(s.pacing_rate * p.quantum_s, 2.0 * MSS, 65536.0)

        def inflight_target(bw, min_rtt, gain, idx):
            # bbr_inflight = bbr_quantization_budget(bbr_bdp): gain * BDP, three send quanta for
            # the pacer's bursts, and two packets more in the 5/4 phase (idx 0; -1: no phase).
            extra = jnp.where(idx == 0, 2.0 * MSS, 0.0)
            return gain * bw * min_rtt + 3.0 * quantum + extra

        # --- PROBE_BW gain cycle (bbr_update_cycle_phase / bbr_is_next_cycle_phase).
        full_length = (now - s.cycle_stamp) >= rtprop - 0.5 * tick
        g = _gain_of(s.cycle_idx)
        up = full_length & ((lost > 0)
                            | (inflight >= inflight_target(btlbw, rtprop, g, s.cycle_idx)))
        down = full_length | (inflight <= inflight_target(btlbw, rtprop, 1.0, s.cycle_idx))
        advance = (s.mode == PROBE_BW) & jnp.where(g > 1.0, up, jnp.where(g < 1.0, down,
                                                                            full_length))
        cycle_idx = jnp.where(advance, (s.cycle_idx + 1) % CYCLE_LEN, s.cycle_idx)
        cycle_stamp = jnp.where(advance, now, s.cycle_stamp)

        # --- Full pipe (bbr_check_full_bw_reached): only at round starts, until reached.
        check = round_start & ~s.full_bw_reached & ~app_limited
        grew = btlbw >= s.full_bw * p.full_bw_thresh
        full_bw = jnp.where(check & grew, btlbw, s.full_bw)
        full_bw_cnt = jnp.where(check, jnp.where(grew, 0, s.full_bw_cnt + 1), s.full_bw_cnt)
        reached = s.full_bw_reached | (check & (full_bw_cnt >= p.full_bw_rounds))

        # --- STARTUP -> DRAIN -> PROBE_BW (bbr_check_drain).
        mode = jnp.where((s.mode == STARTUP) & reached, DRAIN, s.mode)
        drained = (mode == DRAIN) & (inflight <= inflight_target(btlbw, rtprop, 1.0, -1))
        bw_entries = s.bw_entries
        start_phase = random_start_phase(stats.base_rtt, p.phase_seed, bw_entries)
        mode = jnp.where(drained, PROBE_BW, mode)
        cycle_idx = jnp.where(drained, start_phase, cycle_idx)
        cycle_stamp = jnp.where(drained, now, cycle_stamp)
        bw_entries = bw_entries + drained.astype(jnp.int32)

        # --- RTprop (bbr_update_min_rtt): a lower sample, or any sample once the filter expired.
        expired = (now - s.rtprop_stamp) > p.rtprop_win_s
        has_rtt = (stats.rtt_samples > 0) & jnp.isfinite(stats.rtt_min) & (stats.rtt_min > 0)
        upd = has_rtt & ((stats.rtt_min < rtprop) | expired)
        rtprop = jnp.where(upd, stats.rtt_min, rtprop)
        # An idle flow's filter does not age (no PROBE_RTT right after idle).
        rtprop_stamp = jnp.where(upd | idle, now, s.rtprop_stamp)

        cwnd = jnp.clip(s.cwnd, CWND_MIN_PKTS * MSS, MAX_CWND)
        enter = expired & ~idle & (mode != PROBE_RTT)
        # bbr_save_cwnd (no loss recovery here, so the window itself)
        prior_cwnd = jnp.where(enter, cwnd, s.prior_cwnd)
        mode = jnp.where(enter, PROBE_RTT, mode)
        probe_rtt_done = jnp.where(enter, -1.0, s.probe_rtt_done)
        round_done = jnp.where(enter, False, s.probe_rtt_round_done)

        # PROBE_RTT: hold 4 packets for max(200 ms, one round) after the flight first gets there.
        in_prt = mode == PROBE_RTT
        arm = in_prt & (probe_rtt_done < 0) & (inflight <= CWND_MIN_PKTS * MSS)
        armed = in_prt & (probe_rtt_done >= 0) & ~enter
        probe_rtt_done = jnp.where(arm, now + p.probe_rtt_s, probe_rtt_done)
        round_left = jnp.where(arm, inflight, round_left)  # next_rtt_delivered = delivered
        round_done = jnp.where(arm, False, round_done | (armed & round_start))
        leave = armed & round_done & (now >= probe_rtt_done)
        rtprop_stamp = jnp.where(leave, now, rtprop_stamp)
        start_phase = random_start_phase(stats.base_rtt, p.phase_seed, bw_entries)
        mode = jnp.where(leave, jnp.where(reached, PROBE_BW, STARTUP), mode)
        cycle_idx = jnp.where(leave & reached, start_phase, cycle_idx)
        cycle_stamp = jnp.where(leave & reached, now, cycle_stamp)
        bw_entries = bw_entries + (leave & reached).astype(jnp.int32)
        probe_rtt_done = jnp.where(leave, -1.0, probe_rtt_done)

        # --- Pacing rate (bbr_set_pacing_rate).
        pacing_gain = jnp.where(mode == STARTUP, p.high_gain,
                                jnp.where(mode == DRAIN, p.drain_gain,
                                          jnp.where(mode == PROBE_BW, _gain_of(cycle_idx), 1.0)))
        rate = pacing_gain * btlbw * (1.0 - p.pacing_margin)
        rate = jnp.where(btlbw > 0, rate, s.pacing_rate)
        rate = jnp.where(reached, rate, jnp.maximum(rate, s.pacing_rate))
        rate = jnp.clip(rate, MSS / jnp.maximum(rtprop, 1e-6), MAX_RATE)

        # --- Window (bbr_set_cwnd), changed only by ACKs.
        cwnd_gain = jnp.where((mode == STARTUP) | (mode == DRAIN), p.high_gain,
                              jnp.where(mode == PROBE_BW, p.cwnd_gain, 1.0))
        target = inflight_target(btlbw, rtprop, cwnd_gain,
                                 jnp.where(mode == PROBE_BW, cycle_idx, -1))
        # before any ACK: grow freely up to the initial window's worth of deliveries
        free = jnp.maximum(p.init_cwnd_pkts * MSS - s.delivered, 0.0)
        grown_full = jnp.minimum(cwnd + acked, target)
        grown_start = jnp.maximum(jnp.minimum(cwnd + acked, jnp.maximum(target, cwnd)),
                                  cwnd + jnp.minimum(acked, free))
        cwnd_new = jnp.where(reached, grown_full, grown_start)
        cwnd_new = jnp.where(acked > 0, cwnd_new, cwnd)
        cwnd_new = jnp.where(leave, jnp.maximum(cwnd_new, prior_cwnd), cwnd_new)
        cwnd_new = jnp.clip(cwnd_new, CWND_MIN_PKTS * MSS, MAX_CWND)
        cwnd_new = jnp.where(mode == PROBE_RTT, CWND_MIN_PKTS * MSS, cwnd_new)
        delivered = jnp.minimum(s.delivered + acked, p.init_cwnd_pkts * MSS)

        # One MI per RTprop estimate (at least one tick; the simulator rounds to ticks), except
        # where a per-ACK sender would leave a PROBE_BW gain phase within the next RTprop
        # (bbr_is_next_cycle_phase checks on every ACK): the 5/4 phase, once it has lasted an
        # RTprop, ends when the flight reaches its target, and the 3/4 phase ends once the
        # flight is down to one BDP. Checked only at MI ends, the 5/4 phase ran a whole RTprop
        # more (0.25 BDP more queue) and the one-RTprop 3/4 phase could not drain it (see the
        # module docstring for what a lone flow kept queued). The next MI ends where the
        # flight, growing or falling at (gain x 0.99 - 1) x BtlBw, meets the target; the 3/4
        # phase's MIs end by the phase's RTprop. A cut MI gives no BtlBw sample (above), so
        # the 5/4 phase cuts its MIs only until it is ``CUT_PHASE_RTPROPS`` old: where the
        # flight does not reach the target (spare capacity: the link sped up, a flow left) it
        # goes on in whole MIs, whose samples let BtlBw and the pacing rate grow as a per-ACK
        # sender's would (cut MI after cut MI had BtlBw frozen, then expired to 0).
        new_g = _gain_of(cycle_idx)
        in_bw = mode == PROBE_BW
        age = now - cycle_stamp
        excess = jnp.maximum(jnp.abs(new_g * (1.0 - p.pacing_margin) - 1.0) * btlbw, 1e-6)
        t_up = (inflight_target(btlbw, rtprop, new_g, cycle_idx) - inflight) / excess
        t_down = (inflight - inflight_target(btlbw, rtprop, 1.0, cycle_idx)) / excess
        cont = (in_bw & (new_g > 1.0) & (age >= rtprop - 0.5 * tick)
                & (age < CUT_PHASE_RTPROPS * rtprop))
        mi = jnp.maximum(rtprop, tick)
        mi = jnp.where(cont, jnp.clip(t_up, tick, rtprop), mi)
        mi = jnp.where(in_bw & (new_g < 1.0),
                       jnp.clip(t_down, tick, jnp.maximum(rtprop - age, tick)), mi)
        new = BBRState(
            mode=mode, clock=now, bw_ring=ring, bw_rounds=bw_rounds, rounds=rounds,
            round_left=round_left, app_left=app_left, delivered=delivered, full_bw=full_bw,
            full_bw_cnt=full_bw_cnt, full_bw_reached=reached, rtprop=rtprop,
            rtprop_stamp=rtprop_stamp, cycle_idx=cycle_idx, cycle_stamp=cycle_stamp,
            bw_entries=bw_entries, probe_rtt_done=probe_rtt_done,
            probe_rtt_round_done=round_done, prior_cwnd=prior_cwnd, cwnd=cwnd_new,
            pacing_rate=rate, pacing_gain=pacing_gain, snd_hist=snd_hist,
            cut=mi < rtprop - 0.5 * tick)
        return new, Decision(rate=rate, cwnd=cwnd_new, mi_s=mi,
                                    mi_round=jnp.zeros(rate.shape, bool))
