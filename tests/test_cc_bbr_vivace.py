"""BBR v1 and PCC Vivace: their rules on hand-made monitor intervals, and their behaviour on a link.

The rule tests feed ``MIStats`` to a jitted ``on_interval``; the link tests run each controller
once per model on a batch of two links (a clean 10 Mbps / 40 ms dumbbell with a one-BDP buffer,
and a lossy one with staggered starts), so that each configuration compiles once.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.api import link_from_flags, run_controller
from ccjax.cc import bbr as bbr_mod
from ccjax.cc import vivace as viv_mod
from ccjax.cc.base import Decision
from ccjax.cc.bbr import BBR, CWND_MIN_PKTS, DRAIN, PACING_GAINS, PROBE_BW, PROBE_RTT, STARTUP
from ccjax.cc.vivace import K_HIGH, K_NONE, PROBING, Vivace
from ccjax.sim.stats import MIAccum, MIStats, finalize, hist_add
from ccjax.units import PACKET_BYTES, mbps_to_bytes_per_s

MSS = float(PACKET_BYTES)
RTT = 0.04
TICK = 1e-3


def mi(acked: float = 0.0, lost: float = 0.0, inflight: float = 0.0, sent: float = 0.0,
       dur: float = RTT, rtt: float = RTT, rtt_halves: tuple[float, float] | None = None,
       base_rtt: float = RTT) -> MIStats:
    """One flow's monitor interval of ``dur`` seconds; byte counts in bytes."""
    s = MIStats.initial(1, 8, jnp.full(1, base_rtt, jnp.float32), TICK)
    f = lambda v: jnp.full(1, v, jnp.float32)  # noqa: E731
    h1, h2 = rtt_halves if rtt_halves is not None else (rtt, rtt)
    fb = acked + lost
    return s.replace(
        duration_s=f(dur), acked_bytes=f(acked), lost_bytes=f(lost), sent_bytes=f(sent),
        rtt_samples=f(acked), rtt_mean=f(0.5 * (h1 + h2)), rtt_min=f(min(h1, h2, rtt)),
        rtt_max=f(max(h1, h2, rtt)), rtt_first_half=f(h1), rtt_second_half=f(h2),
        send_rate=f(sent / dur), delivery_rate=f(acked / dur),
        loss_rate=f(lost / fb if fb > 0 else 0.0), inflight=f(inflight), srtt=f(rtt))


def val(x) -> float:
    return float(np.asarray(x)[0])


@functools.cache
def stepper(ctl):
    return jax.jit(ctl.on_interval)


# ------------------------------------------------------------------------------------------------
# BBR: the state machine on hand-made MIs

BW = mbps_to_bytes_per_s(10.0)  # bytes/s
BDP = BW * RTT


def test_bbr_startup_exits_after_three_rounds_without_growth():
    c = BBR()
    p = c.default_params(1)
    s, d = c.init(p, jnp.full(1, RTT))
    assert val(d.rate) == pytest.approx(bbr_mod.HIGH_GAIN * 10 * MSS / RTT, rel=1e-5)
    step = stepper(c)
    # The initial window goes out; nothing is acked yet.
    s, d = step(s, mi(sent=10 * MSS, inflight=10 * MSS), p)
    # Delivery rates (as fractions of 10 Mbps): doubling, then below +25% of the last growth
    # (0.4 -> 0.4 -> 0.44 -> 0.48 < 0.5) for three rounds. Each MI's ACKs cover the bytes in
    # flight at the previous one, so every MI ends a round.
    fracs = [0.1, 0.2, 0.4, 0.4, 0.44]
    modes, counts = [], []
    for fr in fracs:
        b = fr * BDP
        s, d = step(s, mi(acked=b, sent=2 * b, inflight=b), p)
        modes.append(int(s.mode[0]))
        counts.append(int(s.full_bw_cnt[0]))
    assert counts == [0, 0, 0, 1, 2]
    assert modes == [STARTUP] * 5
    # BtlBw follows the maximum of the samples (ACK interval = MI + one tick).
    assert val(s.btlbw) == pytest.approx(0.44 * BW * RTT / (RTT + TICK), rel=1e-4)
    # The third round without 25% growth: the pipe is full, DRAIN while more than a BDP flies.
    b = 0.48 * BDP
    s, d = step(s, mi(acked=b, sent=2 * b, inflight=3 * BDP), p)
    assert int(s.full_bw_cnt[0]) == 3 and bool(s.full_bw_reached[0])
    assert int(s.mode[0]) == DRAIN
    assert val(d.rate) == pytest.approx(bbr_mod.DRAIN_GAIN * val(s.btlbw) * 0.99, rel=1e-4)
    # Once the flight is down to the estimated BDP: PROBE_BW, never starting in the 3/4 phase.
    s, d = step(s, mi(acked=3 * BDP, sent=0.1 * BDP, inflight=0.1 * BDP), p)
    assert int(s.mode[0]) == PROBE_BW
    assert int(s.cycle_idx[0]) != 1


def _probe_bw_state(c: BBR, p, bw: float = BW):
    """A flow in PROBE_BW with BtlBw = ``bw`` and RTprop = RTT (the state after DRAIN)."""
    s, _ = c.init(p, jnp.full(1, RTT))
    ring = jnp.zeros_like(s.bw_ring).at[:, 0].set(bw)
    return s.replace(mode=jnp.full(1, PROBE_BW, jnp.int32), bw_ring=ring,
                     full_bw_reached=jnp.ones(1, bool), full_bw=jnp.full(1, bw, jnp.float32),
                     cycle_idx=jnp.full(1, 2, jnp.int32), cwnd=jnp.full(1, 2 * bw * RTT),
                     pacing_rate=jnp.full(1, bw, jnp.float32),
                     snd_hist=jnp.full_like(s.snd_hist, bw))


def test_bbr_probe_bw_cycles_through_the_eight_gains():
    c = BBR()
    p = c.default_params(1)
    s = _probe_bw_state(c, p)
    step = stepper(c)
    gains, cwnds, btls = [], [], []
    for k in range(26):
        g = val(s.pacing_gain) if k else 1.0
        # The flight follows the gain: 5/4 BDP (and the quanta) is reached in the 5/4 phase.
        infl = 2.0 * BDP if g > 1 else BDP
        s, d = step(s, mi(acked=BDP, sent=g * BDP, inflight=infl), p)
        gains.append(val(s.pacing_gain))
        cwnds.append(val(d.cwnd))
        btls.append(val(s.btlbw))
        assert val(d.rate) == pytest.approx(gains[-1] * val(s.btlbw) * 0.99, rel=1e-4)
    assert int(s.mode[0]) == PROBE_BW
    # One phase per RTprop: 16 consecutive MIs are two rotations of the eight-phase cycle.
    ref = list(PACING_GAINS)
    i = gains.index(1.25)
    assert gains[i:i + 16] == pytest.approx(ref + ref)
    # cwnd = 2 BDP + 3 quanta (2 packets each at this rate), 2 packets more in the 5/4 phase.
    for g, w, btl in zip(gains, cwnds, btls, strict=True):
        assert w == pytest.approx(2 * btl * RTT + 6 * MSS + (2 * MSS if g > 1 else 0), rel=1e-4)


def test_bbr_gain_phases_end_within_an_mi_where_a_per_ack_sender_would_leave_them():
    """bbr_is_next_cycle_phase checks every ACK: the 5/4 phase, once an RTprop old, ends when
    the flight reaches 5/4 BDP (and the quanta), the 3/4 phase once it is down to one BDP. At
    MI granularity the MI that follows is cut to end there: its length is the gap over the rate
    at which the flight grows or falls, (gain x 0.99 - 1) x BtlBw. Such a short MI gives no
    BtlBw sample (a few ticks' ACKs are too coarse a rate)."""
    c = BBR()
    p = c.default_params(1)
    s = _probe_bw_state(c, p).replace(cycle_idx=jnp.zeros(1, jnp.int32))
    step = stepper(c)
    q = 2 * MSS  # the send quantum at 10 Mbps: one ms of sending, at least two packets
    up = 1.25 * BDP + 3 * q + 2 * MSS  # the 5/4 phase's inflight target
    # An RTprop in the 5/4 phase, the flight 0.05 BDP short of the target: the phase goes on
    # for the time the flight takes to grow by that much at 0.2375 BtlBw
    s, d = step(s, mi(acked=BDP, sent=1.25 * BDP, inflight=up - 0.05 * BDP), p)
    assert int(s.cycle_idx[0]) == 0
    assert val(d.mi_s) == pytest.approx(0.05 * RTT / (1.25 * 0.99 - 1), rel=1e-3)
    # that short MI's ACKs, however many, leave BtlBw alone; the flight is there: the 3/4
    # phase begins, cut to the time the flight takes to fall to one BDP (and the quanta)
    short = val(d.mi_s)
    assert bool(s.cut[0])
    # (a send history that would not bound the sample: without the rule it would count)
    s = s.replace(snd_hist=jnp.full_like(s.snd_hist, 4 * BW))
    s, d = step(s, mi(acked=2 * BW * short, sent=4 * BW * short, dur=short,
                      inflight=up + 0.01 * BDP), p)
    assert val(s.btlbw) == pytest.approx(BW, rel=1e-6)
    assert int(s.cycle_idx[0]) == 1
    expect = (up + 0.01 * BDP - (BDP + 3 * q)) / ((1 - 0.75 * 0.99) * BW)
    assert val(d.mi_s) == pytest.approx(min(expect, RTT), rel=1e-3)
    # at its end the flight is down to one BDP: the 3/4 phase is over (before an RTprop)
    s, d = step(s, mi(acked=BDP / 4, sent=0.2 * BDP, dur=val(d.mi_s), inflight=BDP), p)
    assert int(s.cycle_idx[0]) == 2
    assert val(d.mi_s) == pytest.approx(RTT, rel=1e-6)
    # already at the target when the 3/4 phase begins (a loss ends the 5/4 phase): one tick
    s = _probe_bw_state(c, p).replace(cycle_idx=jnp.zeros(1, jnp.int32))
    s, d = step(s, mi(acked=BDP, lost=MSS, sent=1.25 * BDP, inflight=BDP), p)
    assert int(s.cycle_idx[0]) == 1 and val(d.mi_s) == pytest.approx(TICK)


def test_bbr_probes_spare_capacity_in_whole_mis_once_the_5_4_phase_is_old():
    """With spare capacity the 5/4 phase's flight levels off below its target (what is sent
    is delivered), so the phase lasts; it cuts its MIs only while it is younger than
    ``CUT_PHASE_RTPROPS`` RTprops, then goes on in whole MIs whose delivery-rate samples raise
    BtlBw and the pacing rate, as a per-ACK sender's do (cut MI after cut MI, with no sample,
    had BtlBw frozen and then expired)."""
    c = BBR()
    p = c.default_params(1)
    s = _probe_bw_state(c, p).replace(cycle_idx=jnp.zeros(1, jnp.int32),
                                      snd_hist=jnp.full((1, bbr_mod.SND_HIST), 1.25 * BW))
    step = stepper(c)
    dur, btl, ages = RTT, [], []
    for _ in range(16):
        rate = val(s.pacing_rate) if val(s.pacing_rate) > 0 else BW
        # it levels off a little below the target (all of it is delivered)
        q = min(max(val(s.pacing_rate) * 1e-3, 2 * MSS), 65536.0)
        flight = 1.25 * val(s.btlbw) * RTT + 3 * q + 2 * MSS - 0.1 * val(s.btlbw) * RTT
        s, d = step(s, mi(acked=rate * dur, sent=rate * dur, dur=dur, inflight=flight), p)
        dur = val(d.mi_s)
        btl.append(val(s.btlbw))
        ages.append(val(s.clock - s.cycle_stamp))
        assert int(s.cycle_idx[0]) == 0  # never reaches the target: still probing
        if ages[-1] >= bbr_mod.CUT_PHASE_RTPROPS * RTT:
            assert dur == pytest.approx(RTT, rel=1e-6)  # whole MIs from there on
    assert btl[-1] > 1.5 * BW  # and their samples grew BtlBw


def test_a_lone_bbr_flow_drains_what_its_probes_queue():
    """One BBR flow at 12 Mbps, 40 ms, one BDP of buffer, ACK-clocked delivery (whose BtlBw
    samples are the link's rate): with the gain phases ending where a per-ACK sender leaves
    them, the queue each 5/4 probe builds is drained; checked only at MI ends the 5/4 phase ran
    an RTprop too long and the queue held 10.4 ms on average (ns-3.37's TcpBbr: 4.9 ms)."""
    spec = link_from_flags(flows=1, bw_mbps=12.0, rtt_ms=[40.0])
    res = run_controller([spec], BBR(), duration_s=10.0, window_sender="ack-clocked")
    link = res.summary(0)["link"]
    assert link["utilization"] > 0.95
    assert link["mean_queue_delay_ms"] < 8.0, link


def test_bbr_random_start_phase_is_deterministic_and_never_the_drain_phase():
    rtts = jnp.linspace(0.01, 0.2, 64, dtype=jnp.float32)
    z = jnp.zeros(64, jnp.int32)
    ph = np.asarray(bbr_mod.random_start_phase(rtts, z, z))
    assert set(ph.tolist()) <= {0, 2, 3, 4, 5, 6, 7}
    assert len(set(ph.tolist())) == 7  # all seven phases occur
    np.testing.assert_array_equal(ph, np.asarray(bbr_mod.random_start_phase(rtts, z, z)))
    other = np.asarray(bbr_mod.random_start_phase(rtts, z + 1, z))
    assert (other != ph).any()  # the seed changes the draw


def test_bbr_start_phase_follows_the_flow_not_its_position_in_the_array():
    # On the CPU the batch driver hands on_interval only the flows whose MI ended, gathered
    # across the batch (sim.compact): a flow's draw must be the same at any position.
    F = 16
    seeds = BBR().default_params(F).phase_seed
    np.testing.assert_array_equal(np.asarray(seeds), np.arange(F))
    rtts = jnp.full(F, 0.04, jnp.float32)  # one base RTT for all
    entry = jnp.ones(F, jnp.int32)
    ph = np.asarray(bbr_mod.random_start_phase(rtts, seeds, entry))
    assert len(set(ph.tolist())) > 1  # flows with one base RTT do not all cycle in step
    for i in (0, 5, 15):
        one = bbr_mod.random_start_phase(rtts[i:i + 1], seeds[i:i + 1], entry[i:i + 1])
        assert int(one[0]) == ph[i]
    perm = np.random.default_rng(0).permutation(F)
    np.testing.assert_array_equal(
        np.asarray(bbr_mod.random_start_phase(rtts[perm], seeds[perm], entry[perm])), ph[perm])


def test_bbr_probe_rtt_after_ten_seconds_without_a_new_min():
    c = BBR()
    p = c.default_params(1)
    s = _probe_bw_state(c, p)
    step = stepper(c)
    t, entered = 0.0, None
    # RTT samples never go below RTprop: the filter expires 10 s after the last refresh.
    while entered is None and t < 11.0:
        s, d = step(s, mi(acked=BDP, sent=BDP, inflight=BDP, rtt=RTT + 0.002), p)
        t += RTT
        if int(s.mode[0]) == PROBE_RTT:
            entered = t
    assert entered == pytest.approx(10.0, abs=RTT + 1e-3)
    assert val(d.cwnd) == CWND_MIN_PKTS * MSS
    prior = val(s.prior_cwnd)
    # The flight drains to 4 packets; 4 packets per round come back; after max(200 ms, a round)
    # at 4 packets BBR returns to PROBE_BW with its old window.
    left = None
    for _ in range(20):
        s, d = step(s, mi(acked=4 * MSS, sent=4 * MSS, inflight=4 * MSS), p)
        t += RTT
        if int(s.mode[0]) != PROBE_RTT:
            left = t
            break
        assert val(d.cwnd) == CWND_MIN_PKTS * MSS
    assert left is not None and left - entered >= 0.2
    assert int(s.mode[0]) == PROBE_BW
    assert val(d.cwnd) >= prior
    # RTprop's timer restarted: no PROBE_RTT again for the next 9 s.
    assert val(s.rtprop_stamp) == pytest.approx(val(s.clock))


# ------------------------------------------------------------------------------------------------
# Vivace: utility and gradient step


def test_vivace_utility_and_latency_filter():
    p = Vivace().default_params(1)
    x = 10.0  # Mbps
    r = jnp.full(1, mbps_to_bytes_per_s(x))
    u = viv_mod.utility(r, jnp.full(1, 0.02), jnp.full(1, 0.05), p)
    assert val(u) == pytest.approx(x**0.9 - 900 * x * 0.02 - 11.35 * x * 0.05, rel=1e-5)
    assert val(viv_mod.utility(r, jnp.zeros(1), jnp.zeros(1), p)) == pytest.approx(x**0.9)
    # Latency gradient from the half-MI means: (h2 - h1) / (duration / 2).
    g = viv_mod.latency_gradient(mi(acked=30 * MSS, rtt_halves=(0.040, 0.041)), p.grad_filter,
                                 p.grad_noise_z)
    assert val(g) == pytest.approx(0.001 / 0.02, rel=1e-4)
    # |dRTT/dT| below 0.01 counts as 0 (0.0002 s over 20 ms = 0.01 - a little).
    g = viv_mod.latency_gradient(mi(acked=30 * MSS, rtt_halves=(0.040, 0.040199)),
                                 p.grad_filter, p.grad_noise_z)
    assert val(g) == 0.0


def _vivace_round(c, p, s, feedback):
    """Run one probing round (three MIs) from the round's start; ``feedback(kind)`` gives the
    (rtt halves, loss) that the MI of that kind produces."""
    step = stepper(c)
    for _ in range(3):
        h, loss = feedback(int(s.fb_kind[0]))
        pk = 30.0
        s, d = step(s, mi(acked=(1 - loss) * pk * MSS, lost=loss * pk * MSS, sent=pk * MSS,
                          rtt_halves=h), p)
    return s, d


_FLAT = ((RTT, RTT), 0.0)  # a probing MI's feedback: no RTT trend, no loss


def _inflated(kind):
    """Feedback where the probe at r(1+eps) inflated the RTT by 2 ms."""
    return ((RTT, RTT + 0.002), 0.0) if kind == K_HIGH else _FLAT


def _probing_at(c, p, r0, **extra):
    """Vivace in online learning at ``r0``, the MI now ending the last one of a round."""
    s, _ = c.init(p, jnp.full(1, RTT))
    return s.replace(mode=jnp.full(1, PROBING, jnp.int32), rate=jnp.full(1, r0),
                     mi_rate=jnp.full(1, r0), mi_kind=jnp.full(1, K_NONE, jnp.int32),
                     fb_kind=jnp.full(1, K_NONE, jnp.int32), pos=jnp.full(1, 2, jnp.int32),
                     **extra)


def test_vivace_gradient_step_follows_the_utility():
    c = Vivace()
    p = c.default_params(1)
    r0 = mbps_to_bytes_per_s(8.0)
    s = _probing_at(c, p, r0)
    flat = _FLAT
    s, d = _vivace_round(c, p, s, lambda kind: flat)  # no probe scored yet: no step
    s0 = s
    assert val(s.rate) == pytest.approx(r0)
    # Next round, clean feedback: the higher rate has the higher utility (x^0.9), so the rate
    # rises by theta0 * gamma, gamma = (u(1.05 r) - u(0.95 r)) / (0.1 r) (Mbps), at most 5%.
    s, d = _vivace_round(c, p, s, lambda kind: flat)
    x = 8.0
    gamma = ((1.05 * x) ** 0.9 - (0.95 * x) ** 0.9) / (0.1 * x)
    assert val(s.gradient) == pytest.approx(gamma, rel=1e-3)
    assert val(s.rate) == pytest.approx(r0 + min(gamma, 0.05 * x) * mbps_to_bytes_per_s(1.0),
                                        rel=1e-4)
    assert val(d.rate) > r0  # the next round probes around the higher rate

    # The same round, but r(1+eps) inflated the RTT: lower utility up there, the rate falls
    # by the change boundary (5%).
    s, d = _vivace_round(c, p, s0, _inflated)
    assert val(s.gradient) < 0
    assert val(s.rate) == pytest.approx(0.95 * r0, rel=1e-4)


def test_vivace_turn_that_hits_the_cap_leaves_the_boundary_at_omega0():
    # The last step went up with k = 2 (a 25% boundary). A round whose high probe inflated the
    # RTT turns the rate down; that step hits the cap (5%). PCC's code resets the boundary's
    # count after capping too, so k stays 0 and the next step down is capped at 5% again (not
    # omega0 + delta = 15%).
    c = Vivace()
    p = c.default_params(1)
    r0 = mbps_to_bytes_per_s(8.0)
    s = _probing_at(c, p, r0, direction=jnp.ones(1), k=jnp.full(1, 2.0), tau=jnp.full(1, 2.0))
    s, _ = _vivace_round(c, p, s, lambda kind: _FLAT)  # no probe scored yet: no step
    assert val(s.rate) == pytest.approx(r0) and val(s.k) == 2.0
    s, _ = _vivace_round(c, p, s, _inflated)  # the turn, capped at omega0
    assert val(s.direction) == -1.0
    assert val(s.rate) == pytest.approx(0.95 * r0, rel=1e-5)
    assert val(s.k) == 0.0 and val(s.tau) == 0.0
    r1 = val(s.rate)
    s, _ = _vivace_round(c, p, s, _inflated)  # same direction: capped at omega0 again
    assert val(s.rate) == pytest.approx(0.95 * r1, rel=1e-5)
    assert val(s.k) == 1.0  # this step hit the cap


def _mi_from_samples(q_s: np.ndarray, w: np.ndarray, base: float = RTT) -> MIStats:
    """The MI of one flow with one ACK sample per tick: queueing delays ``q_s`` (s), acked bytes
    ``w``; accumulated with float32 as ``sim.core`` does (halves split at half the MI's ticks)
    and finalized by ``sim.stats.finalize``."""
    f32 = np.float32
    n = len(q_s)
    acc = MIAccum.zeros(1, 8)
    sums = dict(rtt_w=f32(0), rtt_sum=f32(0), rtt_sq=f32(0), h1_w=f32(0), h1_sum=f32(0),
                h2_w=f32(0), h2_sum=f32(0))
    hist = acc.hist
    for i, (q, wi) in enumerate(zip(q_s, w, strict=True)):
        rtt = f32(f32(base) + f32(q))
        wi = f32(wi)
        h = "h1" if i < 0.5 * n else "h2"
        sums["rtt_w"] += wi
        sums["rtt_sum"] += wi * rtt
        sums["rtt_sq"] += wi * (rtt - f32(base)) ** 2
        sums[h + "_w"] += wi
        sums[h + "_sum"] += wi * rtt
        hist = hist_add(hist, jnp.full(1, q / TICK, jnp.float32), jnp.full(1, wi))
    one = lambda v: jnp.full(1, v, jnp.float32)  # noqa: E731
    acc = acc.replace(ticks=one(n), sent=one(w.sum()), acked=one(w.sum()),
                      rtt_min=one(base + q_s.min()), rtt_max=one(base + q_s.max()),
                      srtt_min=one(base), hist=hist, qmax=one(q_s.max() / TICK),
                      **{k: one(v) for k, v in sums.items()})
    b = one(base)
    return finalize(acc, TICK, b, b, b, one(0.0), one(0.0))


def test_mi_rtt_variance_is_exact_in_float32():
    # ``MIStats.rtt_var`` is the byte-weighted variance of the MI's RTT samples, accumulated in
    # float32 without cancelling away at a 35 ms standing queue with 0.1 ms of spread.
    rng = np.random.default_rng(0)
    q = 0.035 + rng.normal(0.0, 1e-4, 60)
    w = rng.integers(1, 3, 60) * MSS
    st = _mi_from_samples(q, w)
    rtt = (np.float32(RTT) + q.astype(np.float32)).astype(np.float64)
    want = np.average((rtt - np.average(rtt, weights=w)) ** 2, weights=w)
    assert np.sqrt(val(st.rtt_var)) == pytest.approx(np.sqrt(want), rel=0.05)
    assert val(MIStats.initial(1, 8, jnp.full(1, RTT), TICK).rtt_var) == 0.0
    empty = finalize(MIAccum.zeros(1, 8), TICK, jnp.full(1, RTT), jnp.full(1, RTT),
                     jnp.full(1, RTT), jnp.zeros(1), jnp.zeros(1))
    assert val(empty.rtt_var) == 0.0


def test_vivace_noise_test_keeps_a_clean_trend_and_drops_jitter():
    p = Vivace().default_params(1)
    lg = lambda st: val(viv_mod.latency_gradient(st, p.grad_filter, p.grad_noise_z))  # noqa: E731
    t = np.arange(40) * TICK  # a 40 ms MI, one packet acked per tick
    w = np.full(40, MSS)
    # A noise-free RTT rise of 0.05 s/s on a 10 to 35 ms standing queue always counts (the
    # queueing-delay histogram's 23% bins made a third of these look like noise).
    for q0 in np.arange(0.010, 0.035, 0.001):
        assert lg(_mi_from_samples(q0 + 0.05 * t, w)) == pytest.approx(0.05, rel=1e-2), q0
    # +-1 ms of jitter with a 0.3 ms step between the halves: |dRTT/dT| = 0.015 passes the 0.01
    # filter but not the noise test (standard error ~0.016).
    jitter = np.where(np.arange(40) % 2 == 0, 1e-3, -1e-3) + np.where(t < 0.02, 0.0, 3e-4)
    st = _mi_from_samples(0.020 + jitter, w)
    raw = (val(st.rtt_second_half) - val(st.rtt_first_half)) / 0.02
    assert raw == pytest.approx(0.015, rel=1e-2)
    assert lg(st) == 0.0


class _GradientProbe:
    """Sends at a constant rate and records Vivace's latency gradient of each MI (one MI per
    smoothed RTT, as Vivace), with the MI's mean queueing delay."""

    name = "gradient-probe"
    slots = 64

    def __init__(self, rate_mbps: float):
        self.rate = mbps_to_bytes_per_s(rate_mbps)

    def default_params(self, n_flows: int):
        return Vivace().default_params(n_flows)

    def _decide(self, srtt):
        return Decision(rate=jnp.full_like(srtt, self.rate), cwnd=jnp.full_like(srtt, jnp.inf),
                        mi_s=srtt, mi_round=jnp.zeros(srtt.shape, bool))

    def init(self, params, base_rtt_s):
        z = jnp.zeros(base_rtt_s.shape + (self.slots,))
        return (jnp.zeros(base_rtt_s.shape, jnp.int32), z, z), self._decide(base_rtt_s)

    def on_interval(self, state, stats, params):
        i, q, g = state
        at = (jnp.arange(self.slots) == jnp.minimum(i, self.slots - 1)[:, None])
        lg = viv_mod.latency_gradient(stats, params.grad_filter, params.grad_noise_z)
        q = jnp.where(at, (stats.rtt_mean - stats.base_rtt)[:, None], q)
        g = jnp.where(at, lg[:, None], g)
        return (i + 1, q, g), self._decide(stats.srtt)


@pytest.mark.parametrize("model", ["fluid", "packet"])
def test_vivace_counts_a_clean_rtt_rise_at_a_standing_queue(model):
    # A constant 10.5 Mbps sender on 10 and 10.2 Mbps links with deep buffers: the queue, and
    # the RTT, rise by 1 - C/r = 0.048 and 0.029 s per s of ACK arrivals. Through the
    # simulator's own MI statistics no MI of that rise at a 10-35 ms standing queue has its
    # gradient taken for noise (with the variance from the queueing-delay histogram, 2 of 9
    # such MIs were, in either model).
    links = [link_from_flags(flows=1, bw_mbps=bw, rtt_ms=[40.0], buffer_pkts=2000)
             for bw in (10.0, 10.2)]
    res = run_controller(links, _GradientProbe(10.5), duration_s=1.5, model=model)
    n, q, g = (np.asarray(a)[:, 0] for a in res.state.cc)
    for b, bw in enumerate((10.0, 10.2)):
        m = min(int(n[b]), _GradientProbe.slots)
        band = (q[b, :m] > 0.010) & (q[b, :m] < 0.035)
        assert band.sum() >= 5
        assert (g[b, :m][band] != 0).all(), (q[b, :m][band], g[b, :m][band])
        if model == "fluid":  # the packet model's rise has some jitter
            assert g[b, :m][band] == pytest.approx(1 - bw / 10.5, rel=0.05)


# ------------------------------------------------------------------------------------------------
# On a link


def _links():
    clean = link_from_flags(flows=1, bw_mbps=10.0, rtt_ms=[40.0])  # 1-BDP buffer (33 packets)
    lossy = link_from_flags(flows=3, bw_mbps=10.0, rtt_ms=[20.0, 40.0, 80.0],
                            start_s=[0.0, 2.0, 5.0], loss=0.02)
    return [clean, lossy]


@functools.cache
def _run(name: str, model: str):
    ctl = {"bbr": BBR(), "vivace": Vivace()}[name]
    return run_controller(_links(), ctl, duration_s=30.0, model=model)


def _assert_finite(res):
    for leaf in jax.tree.leaves(res.state.cc):
        a = np.asarray(leaf)
        if a.dtype.kind == "f":
            assert np.isfinite(a).all()
    dec = res.state.decision
    assert np.isfinite(np.asarray(dec.rate)).all() and (np.asarray(dec.rate) > 0).all()
    assert np.isfinite(np.asarray(dec.mi_s)).all()
    assert not np.isnan(np.asarray(dec.cwnd)).any()
    for i in range(2):
        s = res.summary(i)
        for f in s["flows"]:
            assert np.isfinite(f["throughput_series_mbps"]).all()
            assert f["throughput_mbps"] > 0.1
        assert np.isfinite(s["link"]["utilization"])


@pytest.mark.parametrize("model", ["packet", "fluid"])
def test_bbr_on_a_link(model):
    res = _run("bbr", model)
    s = res.summary(0)
    assert s["link"]["utilization"] > 0.9, s["link"]
    assert 0 < s["link"]["mean_queue_delay_ms"] < 40.0  # at most the buffer
    # BtlBw close to the capacity, RTprop close to the base RTT.
    btlbw = float(np.asarray(res.state.cc.btlbw)[0, 0])
    assert btlbw == pytest.approx(mbps_to_bytes_per_s(10.0), rel=0.07)
    assert float(np.asarray(res.state.cc.rtprop)[0, 0]) == pytest.approx(0.04, abs=0.003)
    assert int(np.asarray(res.state.cc.mode)[0, 0]) in (PROBE_BW, PROBE_RTT)
    # Random loss and staggered starts: no NaN or inf anywhere, every flow gets through.
    _assert_finite(res)
    assert res.summary(1)["link"]["utilization"] > 0.8  # BBR v1 shrugs off 2% random loss


@pytest.mark.parametrize("model", ["packet", "fluid"])
def test_vivace_on_a_link(model):
    res = _run("vivace", model)
    s = res.summary(0)
    assert s["link"]["utilization"] > 0.9, s["link"]
    # Latency-aware: the queue stays well below the buffer's 40 ms.
    assert s["link"]["mean_queue_delay_ms"] < 10.0, s["link"]
    assert s["link"]["drop_rate"] < 0.01
    assert int(np.asarray(res.state.cc.mode)[0, 0]) == PROBING
    _assert_finite(res)
