"""PCC Vivace (Dong et al., "PCC Vivace: Online-Learning Congestion Control", NSDI 2018), at the
granularity of one monitor interval per smoothed RTT.

Vivace is rate-based: it sends at a rate ``r``, measures the utility of a rate over a monitor
interval (MI) and moves ``r`` up the utility's gradient. The utility of sending at ``x`` Mbps:

    u(x) = x^t - b x dRTT/dT - c x L,   t = 0.9, b = 900, c = 11.35

with ``dRTT/dT`` the MI's latency gradient (seconds of RTT per second, dimensionless) and ``L``
its loss rate. ``x`` is in Mbps of 10^6 bits (the paper's unit; the PCC code divides bits/s by
2^20, 4.9% less, which shifts the balance of the terms by about that much).

Latency gradient. Per MI, ``(rtt_second_half - rtt_first_half) / (duration / 2)`` over the RTT
samples of its ACKs (the halves' means lie half an MI apart; Vivace fits a regression line over
the same samples). It counts as 0 when

* its magnitude is below 0.01 (the PCC code's filter against low-magnitude RTT noise), or
* it is not significant: within ``grad_noise_z = 3`` standard errors of 0, the standard error
  coming from the spread of the MI's RTT samples about the trend (see ``latency_gradient``).
  The PCC code likewise ignores a gradient smaller than its regression error. This matters in
  the packet model: at 10 Mbps and 1 ms ticks, packets sent in one tick leave the queue
  together and the RTT samples of a steady sender below capacity jitter by ~0.5 ms, enough for
  ``|dRTT/dT| > 0.01`` in 40% of its 40 ms MIs; without the test that noise, times ``b = 900``,
  drives the rate.

Negative gradients (a draining queue) count as 0 by default, as in PCC's released utility code
(``PccUtilityManager::CalculateUtilityProportional``: ``if (rtt_gradient < 0) rtt_gradient =
0``); the formula as printed rewards them, which ``reward_drain=True`` restores. It is a
choice the released code made, and the default here does not buy a longer queue: at 10 Mbps /
40 ms with a one-BDP buffer (packet model, 20 s, both flows from time 0), rewarding drains
lowered a lone flow's utilization from 0.947 to 0.908 (mean queueing delay 2.6 and 4.0 ms), and
two competing flows' from 0.970 to 0.900, with their mean queueing delay 10.0 and 15.3 ms and
drop rates 1.3 % and 5.1 %. (Before the noise test used the RTT's exact variance, the default's
two flows kept 18 ms queued and dropped 3.5 %.)

Rate control:

* starting phase: the rate doubles every MI while the utility grows; at the first drop the rate
  falls back to the last rate whose utility grew, and online learning starts;
* online learning: two MIs at ``r(1+eps)`` and ``r(1-eps)``, ``eps = 0.05`` (the order alternates
  between rounds, where PCC randomises it, so that neither probe always sees the queue the other
  left), give the gradient ``gamma = (u(r(1+eps)) - u(r(1-eps))) / (2 eps r)`` (utility per
  Mbps). One pair per round: PCC's code runs two pairs and moves only when both agree; a
  two-pair variant made no material difference on a clean link, with two flows or under 1-3 %
  random loss (measured by a review, 10 Mbps, 40 ms), and one pair reacts in half the time;
* the step is ``m(tau) theta0 gamma`` Mbps, ``theta0 = 1`` (the PCC code's
  ``kUtilityGradientToRateChangeFactor``); the confidence amplifier ``m(tau)`` grows with
  consecutive steps in the same direction, with the PCC code's schedule (``tau`` += 1/2 up to 3,
  then += 1; ``m = tau + 1`` below 3, ``2 tau - 2`` below 6, ``4 tau - 14`` below 9, then
  ``9 tau - 50``) and its swing buffer (after a direction change, ``tau`` starts growing only
  after as many same-direction steps as there were recent reversals, at most 2);
* the dynamic change boundary caps a step at ``omega r``, ``omega = omega0 + k delta``,
  ``omega0 = 0.05``, ``delta = 0.1``: ``k`` grows by one per step that hits the cap and shrinks
  by one per step that does not;
* a direction change resets ``tau`` and ``k``: the turning step is capped at ``omega0 r`` and
  leaves ``k = 0`` whether or not it hit that cap (the PCC code resets them before and again
  after capping), so the step after it is capped at ``omega0 r`` as well.

How MIs map here. The ACKs, losses and RTT samples of what is sent in one MI of one RTT come
back during the next one: the statistics of MI ``j`` describe the packets of MI ``j-1``. The
controller keeps the rate of the previous MI and scores *it* with the feedback of the current
one; a probing round is three MIs: the two probes, then one MI at ``r`` while the second
probe's feedback arrives, after which the step is taken. ``x`` is the target rate of the scored
MI (the PCC code scores the rate it measured, which differs from it only by pacing noise). An MI
without feedback (nothing acked or lost: the flow has not started, or an outage) scores
nothing: the starting phase waits, and a probing round whose probes were not both scored is
repeated at the same rate.

Window: none (``cwnd = inf``): Vivace is purely rate-based (PCC's sender does not limit the bytes
in flight). The rate stays between ``min_pkts_per_rtt`` packets per smoothed RTT (default 2, so
MIs carry feedback) and 1e12 bytes/s; it starts at ``init_cwnd_pkts`` (10) packets per base RTT,
as PCC derives its initial rate from the initial window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Decision
from ccjax.units import PACKET_BYTES

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats

MSS = float(PACKET_BYTES)
STARTING, PROBING = 0, 1
#: kinds of MI, i.e. what the feedback of that MI is used for
K_NONE, K_START, K_HIGH, K_LOW = 0, 1, 2, 3
#: bytes/s per Mbps (the utility's unit)
BYTES_PER_MBPS = 1e6 / 8.0
MAX_RATE = 1e12


class VivaceParams(struct.PyTreeNode):
    t: jnp.ndarray  # (F,) throughput exponent (0.9)
    b: jnp.ndarray  # (F,) latency-gradient coefficient (900)
    c: jnp.ndarray  # (F,) loss coefficient (11.35)
    eps: jnp.ndarray  # (F,) probing step (0.05)
    theta0: jnp.ndarray  # (F,) Mbps of step per unit of gradient (utility per Mbps) (1)
    omega0: jnp.ndarray  # (F,) initial change boundary, fraction of the rate (0.05)
    delta: jnp.ndarray  # (F,) boundary increment per consecutive hit (0.1)
    max_swing: jnp.ndarray  # (F,) swing buffer size (PCC code: 2)
    grad_filter: jnp.ndarray  # (F,) |dRTT/dT| below this counts as 0 (0.01)
    grad_noise_z: jnp.ndarray  # (F,) ... and so does one within this many standard errors (3)
    reward_drain: jnp.ndarray  # (F,) bool: negative gradients raise the utility (False)
    init_cwnd_pkts: jnp.ndarray  # (F,) initial rate, packets per base RTT (10)
    min_pkts_per_rtt: jnp.ndarray  # (F,) rate floor, packets per smoothed RTT (2)
    mi_rtts: jnp.ndarray  # (F,) MI length in smoothed RTTs (1)


class VivaceState(struct.PyTreeNode):
    mode: jnp.ndarray  # (F,) int32: STARTING or PROBING
    rate: jnp.ndarray  # (F,) bytes/s: the base rate r
    mi_rate: jnp.ndarray  # (F,) bytes/s: rate of the MI that is ending
    mi_kind: jnp.ndarray  # (F,) int32: its kind (K_*)
    fb_rate: jnp.ndarray  # (F,) bytes/s: rate of the MI before, whose feedback is arriving
    fb_kind: jnp.ndarray  # (F,) int32
    pos: jnp.ndarray  # (F,) int32: position of the ending MI in the probing round (0, 1, 2)
    high_first: jnp.ndarray  # (F,) bool: this round probes r(1+eps) first
    u_high: jnp.ndarray  # (F,) utility of r(1+eps)
    u_low: jnp.ndarray  # (F,) utility of r(1-eps)
    have_high: jnp.ndarray  # (F,) bool
    have_low: jnp.ndarray  # (F,) bool
    best_rate: jnp.ndarray  # (F,) bytes/s: starting phase, last rate whose utility grew
    best_u: jnp.ndarray  # (F,) its utility
    have_best: jnp.ndarray  # (F,) bool
    direction: jnp.ndarray  # (F,) last step's sign (+1, -1; 0 before the first)
    tau: jnp.ndarray  # (F,) confidence amplifier's count
    k: jnp.ndarray  # (F,) dynamic boundary's count
    swing: jnp.ndarray  # (F,) swing buffer: direction changes not yet followed by steady steps
    utility: jnp.ndarray  # (F,) last utility computed (for inspection)
    gradient: jnp.ndarray  # (F,) last gamma (for inspection)


def _noise_variance(stats: MIStats, g: jnp.ndarray, dur: jnp.ndarray) -> jnp.ndarray:
    """(F,) s^2: the RTT noise about the trend within the MI's halves.

    The pooled variance within the two halves is the MI's exact RTT variance less the part that
    the halves' different means explain, ``p (1 - p) (h2 - h1)^2 = (h2 - mean) (mean - h1)``
    (``p`` the first half's share of the samples); a linear trend ``g`` adds ``(g d / 2)^2 / 12``
    to it (``d`` the MI's duration, samples spread evenly over each half), which is taken off."""
    mean, h1, h2 = stats.rtt_mean, stats.rtt_first_half, stats.rtt_second_half
    within = stats.rtt_var - jnp.maximum((h2 - mean) * (mean - h1), 0.0)
    return jnp.maximum(jnp.nan_to_num(within - (g * dur) ** 2 / 48.0), 0.0)


def latency_gradient(stats: MIStats, grad_filter: jnp.ndarray,
                     noise_z: jnp.ndarray) -> jnp.ndarray:
    """dRTT/dT over the MI's RTT samples (s/s); 0 when below ``grad_filter`` in magnitude or not
    significant at ``noise_z`` standard errors.

    The estimate is the difference of the two half-MI means over half an MI; for ``n`` samples
    (acked packets) of noise ``sigma`` its standard error is ``4 sigma / (sqrt(n) duration)``.
    ``sigma^2`` is the spread of the RTT samples within the halves, from the MI's exact RTT
    variance (``MIStats.rtt_var``), less the share of a linear trend (``_noise_variance``). A
    noise-free linear trend sampled evenly over the MI leaves no spread and always counts (when
    above ``grad_filter``); sampled unevenly within a half (ACKs bunched at its ends) it leaves
    some, which can drop a trend measured over few packets. RTT jitter alone rarely counts
    (PCC's code likewise ignores a gradient smaller than its regression error). In the packet
    model at 10 Mbps and 1 ms ticks the RTTs of a steady sender below capacity jitter by about
    0.5 ms (packets sent in one tick leave the queue together), which without the test gives
    ``|dRTT/dT| > 0.01`` in 40% of its 40 ms MIs."""
    dur = jnp.maximum(stats.duration_s, 1e-9)
    g = jnp.nan_to_num((stats.rtt_second_half - stats.rtt_first_half) / (0.5 * dur))
    g = jnp.where(stats.rtt_samples > 0, jnp.clip(g, -10.0, 10.0), 0.0)
    n = jnp.maximum(stats.rtt_samples / MSS, 1.0)
    se = 4.0 * jnp.sqrt(_noise_variance(stats, g, dur)) / (jnp.sqrt(n) * dur)
    return jnp.where((jnp.abs(g) < grad_filter) | (jnp.abs(g) <= noise_z * se), 0.0, g)


def utility(rate_bytes: jnp.ndarray, rtt_gradient: jnp.ndarray, loss_rate: jnp.ndarray,
            params: VivaceParams) -> jnp.ndarray:
    """Vivace's utility ``x^t - b x dRTT/dT - c x L`` with ``x`` in Mbps."""
    x = jnp.maximum(rate_bytes, 0.0) / BYTES_PER_MBPS
    return x ** params.t - params.b * x * rtt_gradient - params.c * x * loss_rate


def amplifier(tau: jnp.ndarray) -> jnp.ndarray:
    """m(tau): the PCC code's confidence amplifier (``pcc_vivace_rate_controller.cpp``)."""
    return jnp.where(tau < 3, tau + 1.0, jnp.where(tau < 6, 2.0 * tau - 2.0,
                                                   jnp.where(tau < 9, 4.0 * tau - 14.0,
                                                             9.0 * tau - 50.0)))


@dataclass(frozen=True)
class Vivace:
    name: str = "vivace"
    #: on_interval is elementwise over flows (``sim.compact``)
    per_flow: ClassVar[bool] = True

    def default_params(self, n_flows: int) -> VivaceParams:
        full = lambda v: jnp.full(n_flows, v, jnp.float32)  # noqa: E731
        return VivaceParams(t=full(0.9), b=full(900.0), c=full(11.35), eps=full(0.05),
                            theta0=full(1.0), omega0=full(0.05), delta=full(0.1),
                            max_swing=full(2.0),
                            grad_filter=full(0.01), grad_noise_z=full(3.0),
                            reward_drain=jnp.zeros(n_flows, bool),
                            init_cwnd_pkts=full(10.0),
                            min_pkts_per_rtt=full(2.0), mi_rtts=full(1.0))

    def _decide(self, rate, srtt, params: VivaceParams) -> Decision:
        # Rate-based: pace at the rate, no window; one MI per smoothed RTT.
        return Decision(rate=rate, cwnd=jnp.full_like(rate, jnp.inf),
                        mi_s=params.mi_rtts * jnp.maximum(srtt, 1e-6),
                        mi_round=jnp.zeros(rate.shape, bool))

    def init(self, params: VivaceParams, base_rtt_s: jnp.ndarray):
        p = params
        rtt = jnp.broadcast_to(jnp.asarray(base_rtt_s, jnp.float32), p.t.shape)
        rate = jnp.clip(p.init_cwnd_pkts * MSS / jnp.maximum(rtt, 1e-6), 1.0, MAX_RATE)
        z = jnp.zeros_like(rate)
        zi = jnp.zeros(rate.shape, jnp.int32)
        f = jnp.zeros(rate.shape, bool)
        state = VivaceState(
            mode=zi + STARTING, rate=rate, mi_rate=rate, mi_kind=zi + K_START, fb_rate=rate,
            fb_kind=zi + K_NONE, pos=zi, high_first=jnp.ones(rate.shape, bool), u_high=z,
            u_low=z, have_high=f, have_low=f, best_rate=rate, best_u=z, have_best=f,
            direction=z, tau=z, k=z, swing=z, utility=z, gradient=z)
        return state, self._decide(rate, rtt, p)

    def on_interval(self, state: VivaceState, stats: MIStats, params: VivaceParams):
        p, s = params, state
        floor = p.min_pkts_per_rtt * MSS / jnp.maximum(stats.srtt, 1e-6)
        acked = jnp.maximum(stats.acked_bytes, 0.0)
        lost = jnp.maximum(stats.lost_bytes, 0.0)
        fb = (acked + lost) > 0

        # Utility of the previous MI, from this MI's feedback.
        g = latency_gradient(stats, p.grad_filter, p.grad_noise_z)
        # PCC's code scores only inflation (a draining queue earns nothing); the formula as
        # printed also rewards negative gradients (``reward_drain``).
        g = jnp.where(p.reward_drain, g, jnp.maximum(g, 0.0))
        loss = jnp.where(fb, jnp.clip(jnp.nan_to_num(stats.loss_rate), 0.0, 1.0), 0.0)
        u = utility(s.fb_rate, g, loss, p)
        scored = fb & (s.fb_kind != K_NONE)

        # --- Starting phase: double while the utility grows (PCC's STARTING state).
        starting = s.mode == STARTING
        st_score = starting & scored & (s.fb_kind == K_START)
        worse = st_score & s.have_best & (u < s.best_u)
        better = st_score & ~worse
        best_rate = jnp.where(better, s.fb_rate, s.best_rate)
        best_u = jnp.where(better, u, s.best_u)
        have_best = s.have_best | better
        # Double per MI with feedback (an MI before the flow starts, or in an outage, waits).
        start_rate = jnp.where(fb, 2.0 * s.mi_rate, s.mi_rate)
        leave_start = worse

        # --- Probing rounds: score the probes, step after the round's third MI.
        probing = s.mode == PROBING
        pr_score = probing & scored
        u_high = jnp.where(pr_score & (s.fb_kind == K_HIGH), u, s.u_high)
        u_low = jnp.where(pr_score & (s.fb_kind == K_LOW), u, s.u_low)
        have_high = s.have_high | (pr_score & (s.fb_kind == K_HIGH))
        have_low = s.have_low | (pr_score & (s.fb_kind == K_LOW))
        decide = probing & (s.pos == 2)
        step_ok = decide & have_high & have_low

        r = s.rate
        r_mbps = jnp.maximum(r / BYTES_PER_MBPS, 1e-9)
        gamma = (u_high - u_low) / (2.0 * p.eps * r_mbps)  # utility per Mbps
        gamma = jnp.clip(jnp.nan_to_num(gamma), -1e9, 1e9)
        d = jnp.where(gamma >= 0, 1.0, -1.0)
        # Direction change: amplifier and boundary restart, the swing buffer fills (PCC code).
        turn = d != s.direction
        tau = jnp.where(turn, 0.0, s.tau)
        k = jnp.where(turn, 0.0, s.k)
        swing = jnp.where(turn, jnp.minimum(s.swing + 1.0, p.max_swing), s.swing)
        step = amplifier(tau) * p.theta0 * gamma  # Mbps
        # Same direction again: the amplifier grows only once the swing buffer is empty.
        grow = ~turn & (swing <= 0)
        tau = jnp.where(grow, tau + jnp.where(tau < 3, 0.5, 1.0), tau)
        swing = jnp.where(~turn, jnp.maximum(swing - 1.0, 0.0), swing)
        bound = (p.omega0 + k * p.delta) * r_mbps
        hit = jnp.abs(step) > bound
        step = jnp.where(hit, d * bound, step)
        k = jnp.where(hit, k + 1.0, jnp.maximum(k - 1.0, 0.0))
        # A turn leaves k at 0 even when its step hit the cap (the PCC code resets the amplifier
        # and the allowance again after capping), so the next step is capped at omega0 too.
        k = jnp.where(turn, 0.0, k)
        new_r = jnp.clip(r + step * BYTES_PER_MBPS, floor, MAX_RATE)

        rate = jnp.where(step_ok, new_r, r)
        direction = jnp.where(step_ok, d, s.direction)
        tau = jnp.where(step_ok, jnp.minimum(tau, 1e3), s.tau)
        k = jnp.where(step_ok, jnp.minimum(k, 1e3), s.k)
        swing = jnp.where(step_ok, swing, s.swing)
        have_high = jnp.where(decide, False, have_high)
        have_low = jnp.where(decide, False, have_low)
        high_first = jnp.where(decide, ~s.high_first, s.high_first)

        # --- Entering online learning from the starting phase: base rate = the last good one.
        rate = jnp.where(leave_start, best_rate, rate)
        rate = jnp.where(starting & ~leave_start, jnp.clip(start_rate, floor, MAX_RATE), rate)
        mode = jnp.where(leave_start, PROBING, s.mode)

        # --- The next MI: its position in the round and its rate.
        pos_next = jnp.where(leave_start | decide, 0, (s.pos + 1) % 3)
        rate = jnp.clip(rate, floor, MAX_RATE)
        hi = rate * (1.0 + p.eps)
        lo = rate * (1.0 - p.eps)
        first = jnp.where(high_first, hi, lo)
        second = jnp.where(high_first, lo, hi)
        probe_rate = jnp.where(pos_next == 0, first, jnp.where(pos_next == 1, second, rate))
        kind_first = jnp.where(high_first, K_HIGH, K_LOW)
        kind_second = jnp.where(high_first, K_LOW, K_HIGH)
        probe_kind = jnp.where(pos_next == 0, kind_first,
                               jnp.where(pos_next == 1, kind_second, K_NONE))
        in_probe = mode == PROBING
        next_rate = jnp.where(in_probe, probe_rate, rate)
        next_kind = jnp.where(in_probe, probe_kind, K_START)
        next_rate = jnp.clip(jnp.nan_to_num(next_rate, nan=1.0), floor, MAX_RATE)

        new = VivaceState(
            mode=mode, rate=rate, mi_rate=next_rate, mi_kind=next_kind.astype(jnp.int32),
            fb_rate=s.mi_rate, fb_kind=s.mi_kind, pos=jnp.where(in_probe, pos_next, 0),
            high_first=high_first, u_high=u_high, u_low=u_low, have_high=have_high,
            have_low=have_low, best_rate=best_rate, best_u=best_u, have_best=have_best,
            direction=direction, tau=tau, k=k, swing=swing, utility=jnp.where(scored, u, s.utility),
            gradient=jnp.where(step_ok, gamma, s.gradient))
        return new, self._decide(next_rate, stats.srtt, p)
