"""Copa (Arun & Balakrishnan, NSDI 2018), default mode, with four MIs per smoothed RTT.

Copa aims at the sending rate ``lambda_t = 1 / (delta * d_q)`` packets/s (§2, eq. 1), where
``d_q = RTTstanding - RTTmin`` is the queueing delay it measures: at that rate every flow keeps
``1 / delta`` of its own packets in the bottleneck queue (a lone flow at capacity C has
``d_q = 1 / (delta C)``; n flows share it equally with ``n / delta`` packets queued). The rules
(§2.1-2.2), per ACK:

* ``RTTstanding`` = the lowest RTT of the last ``srtt / 2`` (low enough to skip jitter and
  delayed-ACK noise, recent enough to see the queue the sender's own window makes);
  ``RTTmin`` = the lowest RTT seen (the paper takes it over 10 s; here over the whole run,
  ``stats.min_rtt``, which equals it on the fixed-propagation paths of the simulator);
* current rate ``lambda = cwnd / RTTstanding``; if ``lambda <= lambda_t`` then
  ``cwnd += v / (delta cwnd)`` else ``cwnd -= v / (delta cwnd)`` (packets), i.e. ``v / delta``
  packets per RTT of ACKs;
* velocity ``v``: once per RTT the window is compared with the one an RTT ago, giving the
  direction (up or down); the same direction as the RTT before counts up, and from the third
  such RTT on ``v`` doubles each RTT; a change of direction resets ``v`` to 1. As in the authors'
  implementation (mvfst ``Copa.cpp``), an ACK that moves the window against the recorded
  direction while ``v > 1`` resets ``v`` to 1 at once (a large ``v`` meant for the other
  direction would overshoot otherwise);
* slow start: the window doubles per RTT (``cwnd += acked``) while the rule says "increase" and
  ends at the first "decrease"; direction is not tracked during its increases (mvfst);
* pacing at ``2 cwnd / RTTstanding`` (§4), the window capping the bytes in flight.

The controller sees one monitor interval (MI) of ``srtt / 4`` at a time (``mi_rtts = 0.25``) and
keeps the lowest RTT of the previous MI: the lower of that and ``stats.rtt_min`` of the MI just
ended is the minimum over the last ``srtt / 2``, which is RTTstanding at the MI's end exactly as
the paper's sliding window gives it, without an RTT sample history. The window is adjusted four
times per RTT, each time by the sum of the per-ACK steps of the MI's ACKs
(``v MSS acked / (delta cwnd)`` bytes, ``v / (4 delta)`` packets per quarter RTT at full
utilisation). Four decisions per RTT come closer to the paper's per-ACK sender than two (MIs of
``srtt / 2``, whose own minimum is RTTstanding too): each decision moves the window by half as
much on information half as old, so it overshoots the target less. Shorter MIs would
leave few samples per MI at small windows. Direction is tracked on the MI's own clock, once at
least an srtt (less half an MI, for the rounding of MI lengths to ticks) has passed since the
last record.

Copa's standing queue is ``1 / delta`` packets (2 by default): a simulator whose tick carries
several packets (the packet model moves a tick's packets as one group, and their RTT samples
carry the group's last byte's delay) shows Copa the group's own spread as standing queue, and
it settles below capacity (one flow, 50 Mbps, 40 ms, 1 BDP, 10 s: utilization 0.58 at 1 ms
ticks, 0.75 at 0.5 ms, 0.92 at 0.25 ms, 0.98 at 0.1 ms). Copa therefore declares
``packets_per_tick = 1``: a run with a Copa flow uses a tick of at most one packet time at its
fastest link (``ccjax.sim.resolution``; 0.2 ms at 50 Mbps, 1 ms up to 12 Mbps).

Loss and timeouts. Copa's default mode does not react to loss (§2: the delay rule alone sets the
window; loss reactions belong to its competitive mode, not implemented here), so losses change
nothing. A retransmission timeout (RFC 6298 timer from ``newreno.Episodes``: nothing came back
for an RTO while data was outstanding) means the path's state is unknown: the window drops to
the minimum (two packets, mvfst ``minCwndInMss``; mvfst does the same on persistent congestion),
``v`` to 1, and slow start resumes, leaving again at the first "decrease".

No NaN or inf from any input: an MI without RTT samples keeps the last RTTstanding, its ACK sum
(zero) leaves the window alone, and every division has a positive floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Decision
from ccjax.cc.newreno import MAX_CWND, MSS, Episodes, stall_cwnd, track_episodes

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats

#: "no RTT sample in this MI" (s): finite, so that min() and comparisons need no inf.
NO_SAMPLE = 1e9
#: keeps ``v`` (and so every window step) finite; 2^20 covers any realistic BDP.
MAX_VELOCITY = float(2**20)


class CopaParams(struct.PyTreeNode):
    delta: jnp.ndarray  # (F,) delta, 1/packets: the flow keeps 1/delta packets queued (0.5)
    init_cwnd_pkts: jnp.ndarray  # (F,) initial window, packets (10, as TCP)
    min_cwnd_pkts: jnp.ndarray  # (F,) window floor, packets (mvfst: 2)
    pacing_gain: jnp.ndarray  # (F,) pacing rate = gain * cwnd / RTTstanding (§4: 2)
    velocity_rtts: jnp.ndarray  # (F,) same-direction RTTs before v doubles (§2.2: 3)
    mi_rtts: jnp.ndarray  # (F,) MI length in smoothed RTTs (0.25: RTTstanding = two MIs)
    min_rto_s: jnp.ndarray  # (F,) RFC 6298 §2.4: 1 s
    max_rto_s: jnp.ndarray  # (F,) RFC 6298 §2.5: 60 s


class CopaState(struct.PyTreeNode):
    cwnd: jnp.ndarray  # (F,) bytes
    rtt_standing: jnp.ndarray  # (F,) s: lowest RTT of the last two MIs (srtt/2) with samples
    prev_min: jnp.ndarray  # (F,) s: lowest RTT of the previous MI; NO_SAMPLE if it had none
    velocity: jnp.ndarray  # (F,) v >= 1
    direction: jnp.ndarray  # (F,) +1 up, -1 down, 0 none yet
    same: jnp.ndarray  # (F,) RTTs in a row the direction stayed the same
    rec_cwnd: jnp.ndarray  # (F,) bytes: window at the last direction record
    rec_time: jnp.ndarray  # (F,) s on the episode clock: time of that record
    slow_start: jnp.ndarray  # (F,) bool
    ep: Episodes


def copa_increase(cwnd: jnp.ndarray, rtt_standing: jnp.ndarray, rtt_min: jnp.ndarray,
                  delta: jnp.ndarray) -> jnp.ndarray:
    """§2.1: ``cwnd / RTTstanding <= MSS / (delta d_q)``, multiplied out (no division, so it
    holds for d_q = 0, where the target rate is infinite)."""
    d_q = jnp.maximum(rtt_standing - rtt_min, 0.0)
    return delta * d_q * cwnd <= MSS * rtt_standing


@dataclass(frozen=True)
class Copa:
    name: str = "copa"
    #: on_interval is elementwise over flows (``sim.compact``)
    per_flow: ClassVar[bool] = True
    #: RTTstanding needs a tick of at most one packet time at the bottleneck
    #: (``ccjax.sim.resolution``; module doc)
    packets_per_tick: ClassVar[float] = 1.0

    def default_params(self, n_flows: int) -> CopaParams:
        full = lambda v: jnp.full(n_flows, v, jnp.float32)  # noqa: E731
        return CopaParams(delta=full(0.5), init_cwnd_pkts=full(10.0), min_cwnd_pkts=full(2.0),
                          pacing_gain=full(2.0), velocity_rtts=full(3.0), mi_rtts=full(0.25),
                          min_rto_s=full(1.0), max_rto_s=full(60.0))

    def _decide(self, cwnd: jnp.ndarray, rtt_standing: jnp.ndarray, srtt: jnp.ndarray,
                params: CopaParams) -> Decision:
        rate = params.pacing_gain * cwnd / jnp.maximum(rtt_standing, 1e-6)
        return Decision(rate=rate, cwnd=cwnd, mi_s=params.mi_rtts * srtt,
                        mi_round=jnp.zeros(rate.shape, bool))

    def init(self, params: CopaParams, base_rtt_s: jnp.ndarray):
        rtt = jnp.broadcast_to(jnp.asarray(base_rtt_s, jnp.float32), params.init_cwnd_pkts.shape)
        cwnd = params.init_cwnd_pkts * MSS
        z = jnp.zeros_like(cwnd)
        state = CopaState(cwnd=cwnd, rtt_standing=rtt, prev_min=jnp.full_like(cwnd, NO_SAMPLE),
                          velocity=jnp.ones_like(cwnd), direction=z, same=z, rec_cwnd=cwnd,
                          rec_time=z, slow_start=jnp.ones(cwnd.shape, bool),
                          ep=Episodes.start(rtt))
        return state, self._decide(cwnd, rtt, rtt, params)

    def on_interval(self, state: CopaState, stats: MIStats, params: CopaParams):
        p = params
        ep, ev = track_episodes(state.ep, stats, p.min_rto_s, p.max_rto_s)
        min_cwnd = jnp.maximum(p.min_cwnd_pkts, 1.0) * MSS
        cwnd = jnp.clip(state.cwnd, MSS, MAX_CWND)
        acked = jnp.maximum(stats.acked_bytes, 0.0)
        delta = jnp.maximum(p.delta, 1e-6)

        # RTTstanding: the lowest RTT of the last two MIs (srtt/2); none arrived: keep the last.
        cur_min = jnp.where(stats.rtt_samples > 0, stats.rtt_min, NO_SAMPLE)
        window_min = jnp.minimum(cur_min, state.prev_min)
        rtt_standing = jnp.where(window_min < NO_SAMPLE, window_min, state.rtt_standing)
        rtt_standing = jnp.maximum(rtt_standing, 1e-6)
        rtt_min = jnp.minimum(stats.min_rtt, rtt_standing)
        up = copa_increase(cwnd, rtt_standing, rtt_min, delta)

        # --- Velocity (§2.2), once per RTT: the direction of the window over the last RTT.
        # Not during slow start's increases (mvfst).
        track = ~(up & state.slow_start)
        due = track & (ev.now - state.rec_time + 0.5 * stats.duration_s >= stats.srtt)
        new_dir = jnp.where(cwnd > state.rec_cwnd, 1.0, -1.0)
        kept = new_dir == state.direction
        same = jnp.where(kept, state.same + 1.0, 0.0)
        doubled = jnp.where(same >= p.velocity_rtts,
                            jnp.minimum(2.0 * state.velocity, MAX_VELOCITY), state.velocity)
        velocity = jnp.where(kept, doubled, 1.0)
        velocity = jnp.where(due, velocity, state.velocity)
        same = jnp.where(due, same, state.same)
        direction = jnp.where(due, new_dir, state.direction)
        rec_cwnd = jnp.where(due, cwnd, state.rec_cwnd)
        rec_time = jnp.where(due, ev.now, state.rec_time)
        # A step against the recorded direction while v > 1: v restarts at 1 with that direction
        # (mvfst changeDirection), the record restarting now.
        step_dir = jnp.where(up, 1.0, -1.0)
        flip = ~(up & state.slow_start) & (direction != step_dir) & (velocity > 1.0)
        velocity = jnp.where(flip, 1.0, velocity)
        same = jnp.where(flip, 0.0, same)
        direction = jnp.where(flip, step_dir, direction)
        rec_cwnd = jnp.where(flip, cwnd, rec_cwnd)
        rec_time = jnp.where(flip, ev.now, rec_time)

        # --- The window: +-v/(delta cwnd) packets per ACK, summed over the MI's ACKs; slow start
        # doubles per RTT (cwnd += acked) until the first decrease.
        step = velocity * MSS * acked / (delta * cwnd)
        ca = jnp.where(up, cwnd + step, jnp.maximum(cwnd - step, jnp.minimum(cwnd, min_cwnd)))
        ss = cwnd + jnp.minimum(acked, cwnd)
        cwnd_new = jnp.where(up & state.slow_start, ss, ca)
        slow_start = state.slow_start & up

        # --- Timeout: back to the minimum window, v = 1, slow start. Loss: nothing (default mode).
        t = ev.timeout
        cwnd_new = jnp.where(t, min_cwnd, cwnd_new)
        velocity = jnp.where(t, 1.0, velocity)
        same = jnp.where(t, 0.0, same)
        direction = jnp.where(t, 0.0, direction)
        rec_cwnd = jnp.where(t, min_cwnd, rec_cwnd)
        rec_time = jnp.where(t, ev.now, rec_time)
        slow_start = slow_start | t
        cwnd_new = jnp.clip(cwnd_new, MSS, MAX_CWND)

        new = CopaState(cwnd=cwnd_new, rtt_standing=rtt_standing, prev_min=cur_min,
                        velocity=velocity, direction=direction, same=same, rec_cwnd=rec_cwnd,
                        rec_time=rec_time, slow_start=slow_start, ep=ep)
        return new, self._decide(stall_cwnd(ep, cwnd_new), rtt_standing, stats.srtt, p)
