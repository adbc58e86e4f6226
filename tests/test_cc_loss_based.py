"""NewReno and CUBIC: their textbook behaviour, rule by rule and on a link.

The rule tests feed hand-made monitor intervals (``MIStats``) to ``on_interval``; the link tests
run the packet and fluid models on a clean dumbbell.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.api import link_from_flags, run_controller
from ccjax.cc.cubic import Cubic
from ccjax.cc.newreno import MSS, NO_HOLE, NewReno
from ccjax.sim.stats import MIStats

RTT = 0.04


def mi(acked_pkts: float, lost_pkts: float = 0.0, inflight_pkts: float = 0.0,
       dur: float = RTT, rtt: float = RTT) -> MIStats:
    """One flow's monitor interval of ``dur`` seconds with the given feedback."""
    s = MIStats.initial(1, 8, jnp.full(1, rtt, jnp.float32), 1e-3)
    f = lambda v: jnp.full(1, v, jnp.float32)  # noqa: E731
    return s.replace(duration_s=f(dur), acked_bytes=f(acked_pkts * MSS),
                     lost_bytes=f(lost_pkts * MSS), rtt_samples=f(acked_pkts * MSS),
                     inflight=f(inflight_pkts * MSS), sent_bytes=f(acked_pkts * MSS))


def pkts(x) -> float:
    return float(np.asarray(x)[0]) / MSS


# ------------------------------------------------------------------------------------------------
# NewReno (RFC 5681, RFC 6582)


def test_a_loss_is_a_new_episode_by_where_the_lost_packet_lies_in_the_stream():
    # RFC 6582's recover point: with the simulator's stream positions (``MIStats.lost_seq``,
    # ``sent_pkts``), a loss of a packet sent before the last reduction is that episode's tail
    # however many ACKs came first, and one sent after it is a new episode even while packets
    # of the old flight are still being reported.
    c = NewReno()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS), ssthresh=jnp.full(1, 30 * MSS))  # in CA
    f = lambda v: jnp.full(1, v, jnp.float32)  # noqa: E731
    at = lambda st, seq, sent: st.replace(lost_seq=f(seq), sent_pkts=f(sent))  # noqa: E731
    s, d = c.on_interval(s, at(mi(acked_pkts=37, lost_pkts=3, inflight_pkts=40), 30, 100), p)
    assert pkts(d.cwnd) == pytest.approx(20.0) and float(s.ep.recover[0]) == 100.0
    # 60 packets acked (more than the 40 of the old flight), then a lost packet sent at 95
    s, d = c.on_interval(s, at(mi(acked_pkts=60, inflight_pkts=20), 0, 120), p)
    s, d = c.on_interval(s, at(mi(acked_pkts=19, lost_pkts=1, inflight_pkts=20), 95, 140), p)
    assert float(s.ep.recoveries[0]) == 1.0 and pkts(d.cwnd) >= 20.0  # the old episode's tail
    # a packet sent at 101 is lost while the old flight is still being reported
    s2, _ = c.init(p, jnp.full(1, RTT))
    s2 = s2.replace(cwnd=jnp.full(1, 40 * MSS), ssthresh=jnp.full(1, 30 * MSS))
    s2, _ = c.on_interval(s2, at(mi(acked_pkts=37, lost_pkts=3, inflight_pkts=40), 30, 100), p)
    s2, d2 = c.on_interval(s2, at(mi(acked_pkts=9, lost_pkts=1, inflight_pkts=30), 101, 110), p)
    assert float(s2.ep.recoveries[0]) == 2.0 and pkts(d2.cwnd) == pytest.approx(15.0, rel=0.05)


def test_a_loss_at_the_recover_point_is_the_episodes_tail_whatever_float32_rounds():
    # A packet sent in the tick that brings a loss report lies at the recover point itself. Its
    # position travels through the delay line as bytes x position in float32, and the recover
    # point is the running byte count / MSS: at 50 Mbps after 11.5 s (about 47,700 packets)
    # the two came apart by 0.004 packets, and the drop counted as a second episode (one
    # NewReno flow, 50 Mbps, 1 BDP, with a drop order tried on 2026-11-28 that turned that
    # packet away: the window halved twice). Positions step by whole packets, so only one at
    # least a packet past the recover point starts a new episode.
    c = NewReno()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 300 * MSS), ssthresh=jnp.full(1, 200 * MSS))
    f = lambda v: jnp.full(1, v, jnp.float32)  # noqa: E731
    at = lambda st, seq, sent: st.replace(lost_seq=f(seq), sent_pkts=f(sent))  # noqa: E731
    s, _ = c.on_interval(s, at(mi(acked_pkts=299, lost_pkts=1, inflight_pkts=300), 47379.29,
                               47713.3203), p)
    assert float(s.ep.recoveries[0]) == 1.0
    tail, _ = c.on_interval(s, at(mi(acked_pkts=4, lost_pkts=1, inflight_pkts=300), 47713.3242,
                                  47877.33), p)
    assert float(tail.ep.recoveries[0]) == 1.0
    new, _ = c.on_interval(s, at(mi(acked_pkts=4, lost_pkts=1, inflight_pkts=300), 47714.3242,
                                 47877.33), p)
    assert float(new.ep.recoveries[0]) == 2.0


def test_newreno_slow_start_doubles_per_rtt():
    c = NewReno()
    p = c.default_params(1)
    s, d = c.init(p, jnp.full(1, RTT))
    assert pkts(d.cwnd) == pytest.approx(10.0)
    for expect in (20.0, 40.0, 80.0):
        s, d = c.on_interval(s, mi(acked_pkts=pkts(s.cwnd), inflight_pkts=pkts(s.cwnd)), p)
        assert pkts(d.cwnd) == pytest.approx(expect)
    assert float(d.rate[0]) == 0.0  # window-based: paced at cwnd/srtt


def test_newreno_halves_once_per_loss_episode_and_grows_one_packet_per_rtt():
    c = NewReno()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS), ssthresh=jnp.full(1, 30 * MSS))  # in CA
    # A loss episode: 3 packets lost with 40 in flight -> ssthresh = cwnd = 20 packets.
    s, d = c.on_interval(s, mi(acked_pkts=37, lost_pkts=3, inflight_pkts=40), p)
    assert pkts(d.cwnd) == pytest.approx(20.0)
    assert pkts(s.ssthresh) == pytest.approx(20.0)
    # The next RTT reports the rest of the same episode (packets sent before the reduction,
    # some of them lost as well): no second reduction, no growth.
    s, d = c.on_interval(s, mi(acked_pkts=35, lost_pkts=5, inflight_pkts=20), p)
    assert pkts(d.cwnd) == pytest.approx(20.0)
    # Congestion avoidance: a window of ACKs per RTT grows the window by one packet.
    for k in range(1, 6):
        w = pkts(s.cwnd)
        s, d = c.on_interval(s, mi(acked_pkts=w, inflight_pkts=w), p)
        assert pkts(d.cwnd) == pytest.approx(20.0 + k, rel=2e-3)
    # A new loss (of a packet sent after the reduction) halves again.
    w = pkts(s.cwnd)
    s, d = c.on_interval(s, mi(acked_pkts=w - 1, lost_pkts=1, inflight_pkts=w), p)
    assert pkts(d.cwnd) == pytest.approx(w / 2, rel=1e-3)
    # Two episodes counted (the run summary's ``recoveries``), the tail of the first not again.
    assert float(s.ep.recoveries[0]) == 2.0 and float(s.ep.timeouts[0]) == 0.0


def test_newreno_slow_start_loss_halves_the_window_its_acks_had_grown():
    """In slow start a per-ACK sender has sent the growth of every ACK before the loss report,
    so FlightSize at the reduction includes it (RFC 5681 eq. 2 and 4; ns-3 halves
    BytesInFlight): an MI that began at 40 packets, acked 30 and reported a loss halves 70,
    not the 40 the MI-granular sender had out."""
    c = NewReno()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS))  # slow start: ssthresh is still the initial one
    s, d = c.on_interval(s, mi(acked_pkts=30, lost_pkts=1, inflight_pkts=40), p)
    assert pkts(s.ssthresh) == pytest.approx(35.0) and pkts(d.cwnd) == pytest.approx(35.0)
    # Slow start that reaches ssthresh (50) within the MI owes only the growth up to it.
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS), ssthresh=jnp.full(1, 50 * MSS))
    s, d = c.on_interval(s, mi(acked_pkts=30, lost_pkts=1, inflight_pkts=40), p)
    assert pkts(s.ssthresh) == pytest.approx(25.0) and pkts(d.cwnd) == pytest.approx(25.0)
    # In congestion avoidance nothing is owed: FlightSize / 2.
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS), ssthresh=jnp.full(1, 30 * MSS))
    s, d = c.on_interval(s, mi(acked_pkts=30, lost_pkts=1, inflight_pkts=40), p)
    assert pkts(s.ssthresh) == pytest.approx(20.0) and pkts(d.cwnd) == pytest.approx(20.0)


def test_newreno_ns3_pipe_halves_one_packet_less_than_the_flight():
    """``ns3_pipe``: ns-3 halves RFC 6675's pipe at the third duplicate ACK, one packet below
    the flight when the hole is reported (three SACKed out, two limited-transmit sends in);
    without it the whole flight is halved."""
    c = NewReno()
    p = c.default_params(1).replace(ns3_pipe=jnp.ones(1, bool))
    s0, _ = c.init(p, jnp.full(1, RTT))
    s0 = s0.replace(cwnd=jnp.full(1, 40 * MSS), ssthresh=jnp.full(1, 30 * MSS))
    s, d = c.on_interval(s0, mi(acked_pkts=30, lost_pkts=1, inflight_pkts=40), p)
    assert pkts(s.ssthresh) == pytest.approx(19.5) and pkts(d.cwnd) == pytest.approx(19.5)
    s, _ = c.on_interval(s0, mi(acked_pkts=30, lost_pkts=1, inflight_pkts=40),
                         c.default_params(1))
    assert pkts(s.ssthresh) == pytest.approx(20.0)


def test_newreno_timeout_resets_to_one_packet():
    c = NewReno()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS))
    # Nothing comes back for more than the 1 s minimum RTO while 40 packets are out.
    for _ in range(30):
        s, d = c.on_interval(s, mi(acked_pkts=0, inflight_pkts=40), p)
    assert pkts(d.cwnd) == pytest.approx(1.0)
    assert pkts(s.ssthresh) == pytest.approx(20.0)
    assert float(s.ep.timeouts[0]) == 1.0 and float(s.ep.recoveries[0]) == 0.0


def test_run_summary_counts_timeouts_and_recoveries():
    """Each flow's ``timeouts`` and ``recoveries`` in the run summary are its controller's
    counts: timeouts only where retransmissions can be lost (``retx_loss``), an episode per
    reduction; a rate-based sender's summary has neither."""
    spec = link_from_flags(flows=2, bw_mbps=10.0, rtt_ms=[40.0], buffer_pkts=33, loss=0.03)
    runs = {r: run_controller([spec] * 4, NewReno(), duration_s=15.0, retx_loss=r)
            for r in (False, True)}
    for res in runs.values():
        ep = res.state.cc.ep
        for i in range(4):
            flows = res.summary(i)["flows"]
            assert [f["timeouts"] for f in flows] == [int(round(float(x)))
                                                     for x in np.asarray(ep.timeouts[i])]
            assert [f["recoveries"] for f in flows] == [int(round(float(x)))
                                                       for x in np.asarray(ep.recoveries[i])]
            for f in flows:
                lost_pkts = f["loss_rate"] * f["sent_bytes"] / MSS
                # 3 % random loss: a window of a few packets and an episode every few RTTs
                # (about 45 in 15 s), never more episodes than lost packets
                assert 20 < f["recoveries"] <= lost_pkts + 1e-6
    assert sum(f["timeouts"] for i in range(4) for f in runs[False].summary(i)["flows"]) == 0
    # ~3 % of the retransmissions of ~45 episodes per flow, 8 flows, are lost: a timeout each
    assert sum(f["timeouts"] for i in range(4) for f in runs[True].summary(i)["flows"]) > 5
    from ccjax.cc.const import Const

    flows = run_controller([spec], Const(), duration_s=1.0).summary(0)["flows"]
    assert "timeouts" not in flows[0] and "recoveries" not in flows[0]


def test_newreno_loss_no_later_packet_reveals_waits_for_the_timer():
    """A flow whose whole flight is lost, with nothing acked, gets no duplicate ACK: no fast
    retransmit, the sender stalls (one packet, the simulator's least window) and its timer
    fires one RTO after it started, seeing the lost window as in flight (ssthresh 5, not 2)."""
    c = NewReno()
    p = c.default_params(1)
    s, d = c.init(p, jnp.full(1, RTT))
    assert pkts(d.cwnd) == pytest.approx(10.0)
    # The first window of 10 goes out; an RTT later all 10 are reported lost, none acked.
    s, d = c.on_interval(s, mi(acked_pkts=0, inflight_pkts=10), p)
    s, d = c.on_interval(s, mi(acked_pkts=0, lost_pkts=10, inflight_pkts=0), p)
    assert pkts(d.cwnd) == pytest.approx(1.0)  # stalled: no fast recovery, no halving
    assert bool(s.ep.stalled[0]) and float(s.ep.recoveries[0]) == 0.0
    assert pkts(s.cwnd) == pytest.approx(10.0)  # kept for the reaction at the timer
    # The timer started at time 0 and fires at the 1 s minimum RTO: MIs of 40 ms until then.
    for k in range(22):
        s, d = c.on_interval(s, mi(acked_pkts=1.0 * (k % 2), inflight_pkts=1.0 - (k % 2)), p)
        assert pkts(d.cwnd) == pytest.approx(1.0) and float(s.ep.timeouts[0]) == 0.0
    s, d = c.on_interval(s, mi(acked_pkts=0, inflight_pkts=1), p)  # t = 1.0 s
    assert float(s.ep.timeouts[0]) == 1.0 and not bool(s.ep.stalled[0])
    assert pkts(d.cwnd) == pytest.approx(1.0)
    assert pkts(s.ssthresh) == pytest.approx(5.0)  # max(FlightSize / 2, 2 MSS), lost window
    # A loss with a later packet acked is an ordinary episode (fast retransmit).
    s2, d2 = c.init(p, jnp.full(1, RTT))
    s2, d2 = c.on_interval(s2, mi(acked_pkts=1, lost_pkts=9, inflight_pkts=2), p)
    # (RFC 5681 eq. 4 over the 2 packets in flight: 2 MSS)
    assert pkts(d2.cwnd) == pytest.approx(2.0) and float(s2.ep.recoveries[0]) == 1.0
    assert not bool(s2.ep.stalled[0])


@pytest.mark.parametrize("ctl", [NewReno(), Cubic()], ids=lambda c: c.name)
def test_a_timeouts_own_losses_reported_after_it_start_no_new_stall(ctl):
    """Losses of packets sent before a timeout, reported after it fired (their reports queued
    behind a long backlog), belong to the episode the timeout handled (RFC 6582's recover
    point): they neither pin the restarted window at one packet nor arm a second timer."""
    p = ctl.default_params(1)
    s, _ = ctl.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS))
    f = lambda v: jnp.full(1, v, jnp.float32)  # noqa: E731
    for _ in range(30):  # 40 packets out, nothing back for more than the 1 s RTO
        s, d = ctl.on_interval(s, mi(acked_pkts=0, inflight_pkts=40).replace(sent_pkts=f(40)), p)
    assert float(s.ep.timeouts[0]) == 1.0 and pkts(d.cwnd) == pytest.approx(1.0)
    # the old window's losses arrive now, nothing acked, nothing else in flight
    late = mi(acked_pkts=0, lost_pkts=10, inflight_pkts=0).replace(lost_seq=f(20), sent_pkts=f(41))
    s, d = ctl.on_interval(s, late, p)
    assert not bool(s.ep.stalled[0]) and float(s.ep.hole_at[0]) >= NO_HOLE
    assert float(s.ep.recoveries[0]) == 0.0
    # and the restarted slow start grows once ACKs go beyond the old window's 30 unreported
    s, d = ctl.on_interval(s, mi(acked_pkts=35, inflight_pkts=0).replace(sent_pkts=f(42)), p)
    assert pkts(d.cwnd) == pytest.approx(6.0)
    # a whole window lost after the timeout, with nothing acked, still waits for the timer
    lost_new = mi(acked_pkts=0, lost_pkts=2, inflight_pkts=0).replace(lost_seq=f(42),
                                                                     sent_pkts=f(44))
    s, d = ctl.on_interval(s, lost_new, p)
    assert bool(s.ep.stalled[0])


def _quiet_flows(res, i: int) -> list[dict]:
    """The flows of link ``i`` that lost their whole first window: one packet per RTT (0.3 Mbps;
    ns-3's sends none) until their timer fires at 1 s."""
    return [f for f in res.summary(i)["flows"] if max(f["throughput_series_mbps"][:2]) < 0.5]


def test_first_windows_into_a_small_buffer_are_admitted_flow_by_flow():
    """Four ACK-clocked flows of different RTTs send their first windows (40 packets) at once
    into a buffer of 8 (no handshake): drop-tail admits them one flow's burst after another, so
    some flows lose theirs whole and learn it only from their timer, about 1 s later; paced
    senders are not affected."""
    spec = link_from_flags(flows=4, bw_mbps=10.0, rtt_ms=[40.0, 41.0, 42.0, 43.0], buffer_pkts=8)
    res = run_controller([spec] * 4, NewReno(), duration_s=1.5, window_sender="ack-clocked",
                         series_interval_s=0.5)
    for i in range(4):
        flows = res.summary(i)["flows"]
        assert sum(f["timeouts"] for f in flows) >= 2
        quiet = _quiet_flows(res, i)
        assert len(quiet) >= 2 and all(f["timeouts"] == 1 for f in quiet)
        assert all(f["timeouts"] == 0 for f in flows if f not in quiet)
    paced = run_controller([spec] * 4, NewReno(), duration_s=1.5, window_sender="paced")
    assert all(f["timeouts"] == 0 for i in range(4) for f in paced.summary(i)["flows"])


def test_first_windows_sent_together_are_admitted_as_the_jitter_interleaves_them():
    """The same four flows with one RTT: their first windows reach the queue together and the
    senders' jitter interleaves them, so drop-tail admits some of most flows' windows; a flow
    loses its whole window only where all of the first arrivals are the others' (about one of
    the 4 flows per link: ``test_jittered_admission_draws``), not three flows every time."""
    spec = link_from_flags(flows=4, bw_mbps=10.0, rtt_ms=[40.0], buffer_pkts=8)
    res = run_controller([spec] * 8, NewReno(), duration_s=1.5, window_sender="ack-clocked",
                         series_interval_s=0.5, link_seeds=list(range(8)))
    quiet = [_quiet_flows(res, i) for i in range(8)]
    assert all(f["timeouts"] == 1 for q in quiet for f in q)
    counts = [len(q) for q in quiet]
    assert min(counts) <= 1 and sum(counts) <= 16, counts  # one after another: 3 on every link


def test_jittered_admission_draws():
    """``core._jittered_admission``: exactly the room (or all) admitted, never more than a flow
    sent; two windows of 10 into room for 9 leave one flow with nothing with probability 2/10
    (the first arrival of one window after the ninth record of the other: 1/10 each way); a
    flow's draws do not depend on the flow slots padded after it."""
    import jax

    from ccjax.sim.core import _jittered_admission

    keys = jax.random.split(jax.random.key(0), 4000)
    draw = jax.jit(jax.vmap(_jittered_admission, in_axes=(0, None, None)))
    two = np.asarray(draw(keys, jnp.array([10.0, 10.0]), jnp.float32(9.0)))
    assert np.all(two.sum(1) == 9.0) and np.all(two <= 10.0)
    assert 0.17 < np.mean(two.min(1) == 0.0) < 0.23
    padded = np.asarray(draw(keys, jnp.array([10.0, 10.0, 0.0, 0.0]), jnp.float32(9.0)))
    np.testing.assert_array_equal(padded[:, :2], two)
    assert np.all(padded[:, 2:] == 0.0)
    four = np.asarray(draw(keys, jnp.full(4, 10.0), jnp.float32(9.0)))
    assert np.all(four.sum(1) == 9.0)
    assert 0.85 < np.mean((four == 0.0).sum(1)) < 1.05  # flows with nothing, per link
    # room for all, and windows past the drawn 16 packets (their tails come last, in turn)
    assert np.all(np.asarray(draw(keys[:50], jnp.array([3.0, 2.0]), jnp.float32(100.0)))
                  == [3.0, 2.0])
    big = np.asarray(draw(keys[:50], jnp.array([20.0, 30.0]), jnp.float32(40.0)))
    assert np.all(big.sum(1) == 40.0) and np.all(big[:, 0] == 20.0)


def test_first_windows_of_equal_rtt_flows_leave_the_queue_interleaved():
    """Two ACK-clocked flows' first windows (20 packets, 24 ms of queue at 10 Mbps) sent
    together: with one base RTT they leave interleaved and both see the same mean queueing
    delay, half the group's (ns-3's jitter mixes them); with different RTTs (which never meet
    with their first windows in ns-3) one flow's window queues behind the other's."""
    def first_window_delays(rtts: list[float]) -> list[list[float]]:
        spec = link_from_flags(flows=2, bw_mbps=10.0, rtt_ms=rtts, buffer_pkts=100)
        res = run_controller([spec] * 3, NewReno(), duration_s=0.03,
                             window_sender="ack-clocked", link_seeds=[1, 2, 3])
        return [[f["mean_rtt_ms"] - f["base_rtt_ms"] for f in res.summary(i)["flows"]]
                for i in range(3)]

    for a, b in first_window_delays([40.0, 40.0]):
        assert a == pytest.approx(b, abs=0.5) and 11.0 < a < 16.0
    for a, b in first_window_delays([40.0, 41.0]):
        assert abs(a - b) > 10.0  # 5 ms for the flow queued first, 20 ms for the other


def test_newreno_lost_retransmission_waits_for_the_timer():
    """A lost retransmission (``SimConfig.retx_loss``) holds the recovery open: no growth and no
    new episode while ACKs keep coming, then the RTO (1 s minimum) resets the window."""
    c = NewReno()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS), ssthresh=jnp.full(1, 30 * MSS))  # in CA
    lost = mi(acked_pkts=39, lost_pkts=1, inflight_pkts=40)
    s, d = c.on_interval(s, lost.replace(retx_lost_bytes=jnp.full(1, MSS)), p)
    assert pkts(d.cwnd) == pytest.approx(20.0)  # the episode's reduction, as without the hole
    assert bool(s.ep.in_recovery[0])
    # 24 RTTs (0.96 s) of ACKs, one with a fresh loss: the window neither grows nor halves again.
    for k in range(24):
        s, d = c.on_interval(s, mi(acked_pkts=20 - (k == 10), lost_pkts=float(k == 10),
                                   inflight_pkts=20), p)
        assert pkts(d.cwnd) == pytest.approx(20.0)
    # The timer fires one RTO (the 1 s minimum) after the retransmission, i.e. at the end of the
    # 26th MI of 40 ms: one packet, and slow start from there.
    s, d = c.on_interval(s, mi(acked_pkts=20, inflight_pkts=20), p)
    assert pkts(d.cwnd) == pytest.approx(1.0)
    assert pkts(s.ssthresh) == pytest.approx(10.0)
    assert float(s.ep.hole_at[0]) >= NO_HOLE / 2  # the hole is repaired by the timeout
    # What was in flight at the timeout is reported first (no growth), then slow start.
    s, d = c.on_interval(s, mi(acked_pkts=20, inflight_pkts=1), p)
    assert pkts(d.cwnd) == pytest.approx(1.0)
    s, d = c.on_interval(s, mi(acked_pkts=1, inflight_pkts=1), p)
    assert pkts(d.cwnd) == pytest.approx(2.0)


def test_retx_loss_draws_lost_retransmissions_at_the_random_loss_rate():
    """The packet model reports lost retransmissions only with ``retx_loss``, at the link's
    random loss rate; without it the run is the same, draw for draw."""
    from dataclasses import dataclass

    from flax import struct

    from ccjax.errors import ConfigError
    from ccjax.sim.link import SimConfig

    class Sums(struct.PyTreeNode):
        inner: object
        lost: jnp.ndarray
        retx_lost: jnp.ndarray

    @dataclass(frozen=True)
    class Counting:  # NewReno, summing what the MIs report
        name: str = "counting"

        def default_params(self, n):
            return NewReno().default_params(n)

        def init(self, p, rtt):
            st, d = NewReno().init(p, rtt)
            return Sums(st, jnp.zeros(1), jnp.zeros(1)), d

        def on_interval(self, s, stats, p):
            st, d = NewReno().on_interval(s.inner, stats, p)
            return Sums(st, s.lost + stats.lost_bytes, s.retx_lost + stats.retx_lost_bytes), d

    spec = link_from_flags(flows=1, bw_mbps=10.0, rtt_ms=[40.0], buffer_pkts=133, loss=0.05)
    runs = {r: run_controller([spec] * 8, Counting(), duration_s=20.0, retx_loss=r)
            for r in (False, True)}
    ref = run_controller([spec] * 8, NewReno(), duration_s=20.0)
    assert np.array_equal(np.asarray(ref.series.sent), np.asarray(runs[False].series.sent))
    assert float(runs[False].state.cc.retx_lost.sum()) == 0.0
    lost = float(runs[True].state.cc.lost.sum()) / MSS
    retx = float(runs[True].state.cc.retx_lost.sum()) / MSS
    assert lost > 400
    # binomial(lost, 0.05): mean 0.05 lost, sd ~ sqrt(0.05 / lost) < 0.011
    assert 0.05 - 0.035 < retx / lost < 0.05 + 0.035
    # Its draws have their own key: on a link without random loss nothing else changes.
    clean = link_from_flags(flows=2, bw_mbps=10.0, rtt_ms=[40.0], buffer_pkts=20)
    a, b = (run_controller([clean], NewReno(), duration_s=10.0, retx_loss=r) for r in (False, True))
    assert np.array_equal(np.asarray(a.series.sent), np.asarray(b.series.sent))
    assert float(np.asarray(a.series.dropped).sum()) > 0  # drop-tail losses were retransmitted
    with pytest.raises(ConfigError, match="retx_loss"):
        SimConfig(model="fluid", retx_loss=True)


# ------------------------------------------------------------------------------------------------
# CUBIC (RFC 9438)


def test_cubic_window_follows_the_cubic_after_a_loss():
    c = Cubic()
    p = c.default_params(1).replace(reno_friendly=jnp.zeros(1, bool))
    s, _ = c.init(p, jnp.full(1, RTT))
    w0 = 100.0
    s = s.replace(cwnd=jnp.full(1, w0 * MSS), ssthresh=jnp.full(1, 50 * MSS))
    s, d = c.on_interval(s, mi(acked_pkts=99, lost_pkts=1, inflight_pkts=w0), p)
    # §4.6: multiplicative decrease by beta = 0.7; W_max = the window before (no fast
    # convergence on the first loss), K = cbrt(W_max (1 - beta) / C).
    assert pkts(d.cwnd) == pytest.approx(70.0, rel=1e-4)
    k = np.cbrt(w0 * 0.3 / 0.4)
    assert float(s.k[0]) == pytest.approx(k, rel=1e-4)
    # The recovery RTT: the rest of the episode's packets come back; the window holds.
    s, d = c.on_interval(s, mi(acked_pkts=w0 - 1, inflight_pkts=70), p)
    assert pkts(d.cwnd) == pytest.approx(70.0, rel=1e-4)
    t = RTT  # time since the reduction
    for _ in range(120):
        w = pkts(s.cwnd)
        s, d = c.on_interval(s, mi(acked_pkts=w, inflight_pkts=w), p)
        t += RTT
        # §4.2: after an MI whose ACKs cover the window, cwnd = W_cubic(t + RTT), clipped to
        # [cwnd, 1.5 cwnd] (Figure 1; t counts from the reduction).
        target = 0.4 * (t + RTT - k) ** 3 + w0
        assert pkts(d.cwnd) == pytest.approx(np.clip(target, w, 1.5 * w), rel=2e-3)
    assert pkts(d.cwnd) > w0  # convex region beyond W_max


def test_cubic_slow_start_loss_reduces_the_window_its_acks_had_grown():
    """RFC 9438 §4.6 with a per-ACK sender's FlightSize and window (as NewReno's): an MI that
    began at 40 packets in slow start, acked 30 and reported a loss reduces from 70; ns-3's
    arithmetic keeps the window at the MI's start (floor(0.7 x 40) = 28)."""
    c = Cubic()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS))
    s, d = c.on_interval(s, mi(acked_pkts=30, lost_pkts=1, inflight_pkts=40), p)
    assert pkts(s.ssthresh) == pytest.approx(49.0) and pkts(d.cwnd) == pytest.approx(49.0)
    assert float(s.w_max[0]) == pytest.approx(70.0)
    p3 = p.replace(ns3_integer=jnp.ones(1, bool), reno_friendly=jnp.zeros(1, bool))
    s, _ = c.init(p3, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS))
    s, d = c.on_interval(s, mi(acked_pkts=30, lost_pkts=1, inflight_pkts=40), p3)
    assert pkts(s.ssthresh) == pytest.approx(28.0)


def test_cubic_loss_after_a_timeout_never_raises_the_window():
    """After a timeout the old flight can exceed the window; a loss then reduces from the
    flight but never above the window (as NewReno)."""
    c = Cubic()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 40 * MSS), ssthresh=jnp.full(1, 30 * MSS))
    f = lambda v: jnp.full(1, v, jnp.float32)  # noqa: E731
    for _ in range(30):
        s, d = c.on_interval(s, mi(acked_pkts=0, inflight_pkts=40).replace(sent_pkts=f(100)), p)
    assert float(s.ep.timeouts[0]) == 1.0
    s, d = c.on_interval(s, mi(acked_pkts=2, inflight_pkts=39).replace(sent_pkts=f(101)), p)
    before = pkts(s.cwnd)
    s, d = c.on_interval(s, mi(acked_pkts=2, lost_pkts=1, inflight_pkts=38).replace(
        lost_seq=f(101), sent_pkts=f(102)), p)
    assert float(s.ep.recoveries[0]) == 1.0 and pkts(s.cwnd) <= before


def test_cubic_fast_convergence_lowers_w_max():
    c = Cubic()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 60 * MSS), w_max=jnp.full(1, 100.0),
                  ssthresh=jnp.full(1, 50 * MSS), in_epoch=jnp.ones(1, bool))
    s, _ = c.on_interval(s, mi(acked_pkts=59, lost_pkts=1, inflight_pkts=60), p)
    assert float(s.w_max[0]) == pytest.approx(60 * 1.7 / 2, rel=1e-4)  # §4.7


def _ns3_cubic():
    c = Cubic()
    p = c.default_params(1).replace(reno_friendly=jnp.zeros(1, bool),
                                    ns3_integer=jnp.ones(1, bool))
    s, _ = c.init(p, jnp.full(1, RTT))
    return c, p, s


def test_cubic_ns3_mode_reduces_in_whole_segments():
    """ns-3 TcpCubic::GetSsThresh: ssthresh = max(floor(0.7 segCwnd), 2) segments, from cwnd;
    W_max = segCwnd, or floor(segCwnd (1 + beta) / 2) under fast convergence."""
    c, p, s = _ns3_cubic()
    s = s.replace(cwnd=jnp.full(1, 4.6 * MSS), ssthresh=jnp.full(1, 2 * MSS))
    s, d = c.on_interval(s, mi(acked_pkts=3, lost_pkts=1, inflight_pkts=1), p)
    assert pkts(d.cwnd) == pytest.approx(2.0)  # floor(4 x 0.7) = 2 (RFC: 0.7 x flight)
    assert float(s.w_max[0]) == 4.0
    assert not bool(s.in_epoch[0])  # the epoch restarts after recovery
    c, p, s = _ns3_cubic()  # a later episode, below that W_max
    s = s.replace(cwnd=jnp.full(1, 3 * MSS), ssthresh=jnp.full(1, 2 * MSS),
                  w_max=jnp.full(1, 4.0), in_epoch=jnp.ones(1, bool))
    s, d = c.on_interval(s, mi(acked_pkts=2, lost_pkts=1, inflight_pkts=1), p)
    assert float(s.w_max[0]) == 2.0  # 3 < W_max 4: floor(3 x 1.7 / 2)
    assert pkts(d.cwnd) == pytest.approx(2.0)  # max(floor(2.1), 2)


def test_cubic_ns3_mode_truncated_target_plateaus_at_w_max():
    """ns-3 TcpCubic::Update truncates C |t - K|^3 to whole segments: within cbrt(1 / C) =
    1.36 s either side of K the target is W_max itself, so a small window climbs straight back
    to W_max (at most 1.5x per RTT) and holds there, where the RFC's curve is still concave."""
    c, p, s = _ns3_cubic()
    s = s.replace(cwnd=jnp.full(1, 10 * MSS), ssthresh=jnp.full(1, 5 * MSS))
    s, d = c.on_interval(s, mi(acked_pkts=9, lost_pkts=1, inflight_pkts=10), p)
    assert pkts(d.cwnd) == pytest.approx(7.0)
    k = np.cbrt((10 - 7) / 0.4)  # 1.96 s
    t, seen = 0.0, []
    for _ in range(int((k + 1.3) / RTT)):
        w = pkts(s.cwnd)
        s, d = c.on_interval(s, mi(acked_pkts=w, inflight_pkts=w), p)
        t += RTT
        seen.append(pkts(d.cwnd))
        # Never a segment past the plateau before K + 1.36 s (at it: one per 100 windows).
        assert pkts(d.cwnd) < 11.0
    # Back at W_max = 10 well before K (the RFC's W_cubic(t) is below 9.9 until t = 1.5 s).
    first = next(i for i, w in enumerate(seen) if w >= 10.0 - 1e-3)
    assert (first + 1) * RTT < k - 1.36 + 0.3
    for _ in range(int(1.0 / RTT)):  # past K + 1.36 s the convex side adds whole segments
        w = pkts(s.cwnd)
        s, d = c.on_interval(s, mi(acked_pkts=w, inflight_pkts=w), p)
    assert pkts(d.cwnd) >= 11.0


def test_cubic_ns3_mode_ack_counter_is_never_reset():
    """ns-3 TcpCubic's m_cWndCnt: congestion avoidance adds every acked segment, grows one
    segment (at most one per ACK) when it reaches cnt, and nothing resets it. On a plateau
    (cnt = 100 segCwnd) it banks the ACKs; after a timeout (no W_max: cnt at most 20) the bank
    pays one segment per ACK, so the window doubles per RTT until the bank is spent."""
    c, p, s = _ns3_cubic()
    f = lambda v: jnp.full(1, v, jnp.float32)  # noqa: E731
    # A plateau at W_max = 10 (origin 10, K = 0: the target stays 10 for 1.36 s).
    s = s.replace(cwnd=f(10 * MSS), ssthresh=f(5 * MSS), w_max=f(10.0), origin=f(10.0),
                  k=f(0.0), epoch_start=f(0.0), in_epoch=jnp.ones(1, bool))
    for _ in range(30):
        s, d = c.on_interval(s, mi(acked_pkts=10, inflight_pkts=10), p)
    assert pkts(d.cwnd) == pytest.approx(10.0)  # 300 ACKs < cnt = 1000: no growth
    assert float(s.bank[0]) == pytest.approx(300.0)

    def after_timeout(bank: float) -> list[float]:
        t = s.replace(cwnd=f(2 * MSS), ssthresh=f(2 * MSS), w_max=f(0.0),
                      in_epoch=jnp.zeros(1, bool), bank=f(bank))
        seen = []
        for _ in range(6):
            w = pkts(t.cwnd)
            t, d = c.on_interval(t, mi(acked_pkts=w, inflight_pkts=w), p)
            seen.append(pkts(d.cwnd))
        return seen

    banked = after_timeout(300.0)
    assert banked[:3] == pytest.approx([4.0, 8.0, 16.0])  # one segment per ACK
    assert banked[-1] < 22.0  # ... until the 300 banked ACKs are spent (20 per segment)
    fresh = after_timeout(0.0)
    assert fresh[2] <= 3.0  # without the bank: one segment per 20 ACKs


def test_cubic_reno_friendly_region_at_short_rtt():
    """§4.3: at a small BDP the Reno-friendly estimate dominates the (slow) cubic growth."""
    c = Cubic()
    rtt = 0.002
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, rtt))
    s = s.replace(cwnd=jnp.full(1, 20 * MSS), ssthresh=jnp.full(1, 10 * MSS))
    s, _ = c.on_interval(s, mi(acked_pkts=19, lost_pkts=1, inflight_pkts=20, dur=rtt, rtt=rtt), p)
    s, _ = c.on_interval(s, mi(acked_pkts=20, inflight_pkts=14, dur=rtt, rtt=rtt), p)
    w_start = pkts(s.cwnd)
    for _ in range(50):
        w = pkts(s.cwnd)
        s, _ = c.on_interval(s, mi(acked_pkts=w, inflight_pkts=w, dur=rtt, rtt=rtt), p)
    # The estimate alone: +alpha_cubic = 3 (1 - 0.7) / 1.7 ~ 0.53 packets per RTT until it is back
    # at the window before the loss (20), then +1 per RTT; the cubic term alone would add under
    # 1e-3 packets in 0.1 s (K = cbrt(20 * 0.3 / 0.4) ~ 2.5 s).
    w_est = 14.0
    for _ in range(50):
        w_est += 1.0 if w_est >= 20.0 else 3 * 0.3 / 1.7
    assert pkts(s.cwnd) - w_start == pytest.approx(w_est - 14.0, rel=0.05)


# ------------------------------------------------------------------------------------------------
# On a link


@pytest.mark.parametrize("model", ["packet", "fluid"])
@pytest.mark.parametrize("ctl", [NewReno(), Cubic()], ids=lambda c: c.name)
def test_fills_a_clean_link_and_shares_it(ctl, model):
    one = link_from_flags(flows=1, bw_mbps=10.0, rtt_ms=[40.0])  # 1-BDP buffer
    two = link_from_flags(flows=2, bw_mbps=10.0, rtt_ms=[40.0])
    res = run_controller([one, two], ctl, duration_s=30.0, model=model)
    for i in range(2):
        s = res.summary(i)
        assert s["link"]["utilization"] > 0.9, (i, s["link"])
        # The queue never exceeds the buffer: at most one BDP of delay.
        assert 0 < s["link"]["mean_queue_delay_ms"] < 40.0
        for f in s["flows"]:
            assert all(np.isfinite(f["throughput_series_mbps"]))
    thr = [f["throughput_mbps"] for f in res.summary(1)["flows"][:2]]
    assert sum(thr) ** 2 / (2 * sum(x * x for x in thr)) > 0.95  # Jain's index


def test_cubic_rtt_unfairness_direction():
    """A 20 ms Cubic flow gets more than an 80 ms one on a shared bottleneck."""
    spec = link_from_flags(flows=2, bw_mbps=10.0, rtt_ms=[20.0, 80.0], buffer_pkts=67)
    s = run_controller([spec], Cubic(), duration_s=40.0, model="packet").summary(0)
    short, long = (f["throughput_mbps"] for f in s["flows"][:2])
    assert short > 1.2 * long


def test_cubic_mi_lengths():
    """A quarter RTT in congestion avoidance, a sixteenth in slow start, except one RTT in slow
    start while HyStart is on (its delay test compares whole rounds)."""
    c = Cubic()
    for hystart, ss_mi in ((True, RTT), (False, RTT / 16)):
        p = c.default_params(1).replace(hystart=jnp.full(1, hystart))
        s, d = c.init(p, jnp.full(1, RTT))
        assert float(d.mi_s[0]) == pytest.approx(ss_mi)
        s, d = c.on_interval(s, mi(acked_pkts=5.0, lost_pkts=1.0, inflight_pkts=10.0), p)
        assert pkts(d.cwnd) >= pkts(s.ssthresh) - 1e-6  # out of slow start after the loss
        assert float(d.mi_s[0]) == pytest.approx(RTT / 4)


def test_cubic_hystart_delay_test_ends_slow_start():
    c = Cubic()
    p = c.default_params(1)
    s, _ = c.init(p, jnp.full(1, RTT))
    s = s.replace(cwnd=jnp.full(1, 32 * MSS))
    # The round's minimum RTT is 3 ms above the path's: below the 4 ms floor, slow start goes on.
    s1, d = c.on_interval(s, mi(acked_pkts=32, inflight_pkts=32).replace(
        rtt_min=jnp.full(1, RTT + 0.003)), p)
    assert pkts(d.cwnd) == pytest.approx(64.0)
    # 6 ms above (threshold clamp(40/8, 4, 16) = 5 ms): slow start ends at the current window.
    s2, d = c.on_interval(s, mi(acked_pkts=32, inflight_pkts=32).replace(
        rtt_min=jnp.full(1, RTT + 0.006)), p)
    assert pkts(d.cwnd) == pytest.approx(32.0)
    assert pkts(s2.ssthresh) == pytest.approx(32.0)
    # Disabled: slow start goes on whatever the delay.
    off = p.replace(hystart=jnp.zeros(1, bool))
    _, d = c.on_interval(s, mi(acked_pkts=32, inflight_pkts=32).replace(
        rtt_min=jnp.full(1, RTT + 0.006)), off)
    assert pkts(d.cwnd) == pytest.approx(64.0)


def test_cubic_hystart_avoids_the_slow_start_overshoot_in_a_deep_buffer():
    spec = link_from_flags(flows=1, bw_mbps=20.0, rtt_ms=[40.0], buffer_pkts=4 * 67)
    c = Cubic()
    on = run_controller([spec], c, duration_s=10.0).summary(0)
    off = run_controller([spec], c, c.default_params(1).replace(hystart=jnp.zeros(1, bool)),
                         duration_s=10.0).summary(0)
    assert on["link"]["drop_rate"] < 0.2 * off["link"]["drop_rate"]
    assert on["link"]["utilization"] > 0.9
