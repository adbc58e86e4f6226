"""Unpaced, ACK-clocked window senders (``SimConfig.window_sender = "ack-clocked"``) and the
spread delivery of packet groups they need."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccjax.api import link_from_flags, simulate
from ccjax.cc.newreno import NewReno
from ccjax.errors import ConfigError
from ccjax.sim import LinkSpec, SimConfig
from ccjax.sim.core import _allocate_packets
from ccjax.units import PACKET_BYTES as PKT

from .helpers import tick_trace

MODELS = ["fluid", "packet"]


@pytest.mark.parametrize("model", MODELS)
def test_conservation_every_tick(model):
    """sent = acked + lost + queued + in flight at every tick, with bursts spread over ticks."""
    spec = LinkSpec(bandwidth_mbps=(10.0,), buffer_pkts=20, loss=0.02, rtt_ms=(30.0, 70.0),
                    start_s=(0.0, 0.4), stop_s=(1.5, 2.0))
    _, _, _, r = tick_trace(spec, model, None, 2.5, window_sender="ack-clocked",
                            controller=NewReno())
    resid = r["sent"] - r["acked"] - r["lost"] - r["queue"] - r["inflight"]
    assert np.abs(resid).max() <= 1e-5 * r["sent"].max() + 1e-3
    assert r["lost"][-1].sum() > 0 and r["queue"].max() > 0
    assert np.allclose(r["sent"][-1], r["acked"][-1] + r["lost"][-1], rtol=1e-5)


def test_a_burst_leaves_at_the_link_rate_and_the_window_follows_its_acks():
    """A window of 10 packets on an idle 10 Mbps link (1.2 ms per packet): sent at once (nothing
    in flight), delivered one packet per serialization time, not as one group; afterwards every
    tick sends exactly what the last tick's ACKs freed (a fixed window has nothing to grow)."""
    spec = LinkSpec(bandwidth_mbps=(10.0,), buffer_pkts=100, rtt_ms=(40.0,), start_s=(0.0,))
    _, _, _, r = tick_trace(spec, "packet", None, 0.5, window_pkts=10,
                            window_sender="ack-clocked")
    sent = np.diff(r["sent"][:, 0], prepend=0.0) / PKT
    deliv = np.diff(r["delivered"][:, 0], prepend=0.0) / PKT
    acked = np.diff(r["acked"][:, 0], prepend=0.0) / PKT
    assert sent[0] == 10 and sent[1:41].sum() == 0
    assert deliv.max() == 1  # spaced by the bottleneck (12 ticks, within spread_ticks = 16)
    first = np.flatnonzero(deliv)[:10]
    assert np.all(np.diff(first) >= 1) and first[-1] - first[0] >= 10  # 9 gaps of 1.2 ms
    # ACK clocking: from the first ACK on, sends equal the previous tick's ACKs
    a0 = int(np.argmax(acked > 0))
    assert np.array_equal(sent[a0 + 1:], acked[a0:-1])
    assert acked.sum() > 30  # several windows went round


@pytest.mark.parametrize("model", MODELS)
def test_slow_start_queues_before_the_window_reaches_the_bdp(model):
    """Unpaced slow start sends two packets per packet acked, at twice the bottleneck's rate:
    a queue builds in every round (as in ns-3, whose senders are not paced), while a sender
    paced at cwnd/srtt puts no queue on the link until its window passes the BDP."""
    spec = link_from_flags(flows=1, bw_mbps=50.0, rtt_ms=[40.0], buffer_pkts=2000)
    # windows 10, 20, 40, 80 by 0.17 s: below the BDP of 167 packets
    kw = dict(cc="newreno", duration_s=0.17, model=model, series_interval_s=0.01)
    clocked = simulate([spec], window_sender="ack-clocked", **kw).summary()["link"]
    paced = simulate([spec], **kw).summary()["link"]
    assert max(clocked["queue_series_pkts"]) > 5.0
    assert max(paced["queue_series_pkts"]) < 2.0


@pytest.mark.parametrize("model", MODELS)
def test_ack_clocked_newreno_fills_the_link(model):
    spec = link_from_flags(flows=2, bw_mbps=10.0, rtt_ms=[40.0], buffer_pkts=33)
    s = simulate([spec], cc="newreno", duration_s=15.0, model=model,
                 window_sender="ack-clocked").summary()
    assert s["link"]["utilization"] > 0.95
    assert 0.0 < s["link"]["drop_rate"] < 0.05
    thr = [f["throughput_mbps"] for f in s["flows"]]
    assert min(thr) > 0.3 * max(thr)


def test_rate_based_senders_are_unaffected():
    """``window_sender`` changes only window-based flows: a constant-rate sender is paced."""
    spec = link_from_flags(flows=1, bw_mbps=10.0, rtt_ms=[40.0], buffer_pkts=100)
    kw = dict(cc="const", rate_mbps=5.0, duration_s=1.0, seed=3)
    a = simulate([spec], window_sender="ack-clocked", **kw).summary()
    b = simulate([spec], **kw).summary()
    assert a["flows"][0]["throughput_mbps"] == pytest.approx(b["flows"][0]["throughput_mbps"])
    assert a["link"]["mean_queue_delay_ms"] < 1.5  # 5 of 10 Mbps: at most a packet queued


def test_bad_window_sender_is_refused():
    with pytest.raises(ConfigError, match="window_sender"):
        SimConfig(window_sender="bursty")
    spec = link_from_flags(flows=1, bw_mbps=10.0, rtt_ms=[40.0])
    with pytest.raises(ConfigError, match="window_sender=.*paced, ack-clocked"):
        simulate([spec], cc="newreno", window_sender="unpaced")


def test_no_flow_is_always_queued_first():
    """Four identical ACK-clocked Vegas flows with a 40 ms RTT (a multiple of 4 ticks): their
    bursts recur at the same tick phase every round, so an order fixed by the tick (flow
    ``t mod F`` first) queued flow 0 ahead of the others every round; it saw the smallest delays
    and kept the largest share on every one of eight links (measured). The first flow of a tick's
    group is drawn at random: which flow ends up ahead varies from link to link."""
    spec = link_from_flags(flows=4, bw_mbps=50.0, rtt_ms=[40.0] * 4, buffer_pkts=167)
    res = simulate([spec] * 8, cc="vegas", duration_s=5.0, model="packet",
                   window_sender="ack-clocked", seed=0)
    top = [int(np.argmax([f["throughput_mbps"] for f in res.summary(i)["flows"]]))
           for i in range(8)]
    assert top.count(0) <= 5, top
    assert len(set(top)) >= 2, top


def _retx_lost_total(r) -> np.ndarray:
    """(F,) bytes of retransmissions lost over a ``tick_trace`` run: each tick's increment of
    the MI accumulator (which an MI end latches into ``last`` and clears)."""
    done = r["mi_done"]
    now = np.where(done, r["retx_lost_last"], r["retx_lost_mi"])
    before = np.vstack([np.zeros_like(now[:1]), np.where(done, 0.0, r["retx_lost_mi"])[:-1]])
    return (now - before).sum(0)


def _newreno_trace(recovery: str, flows: int = 1, duration_s: float = 4.0, rtt_ms: float = 40.0,
                   buffer_pkts: int = 8, loss: float = 0.0, **kw):
    spec = link_from_flags(flows=flows, bw_mbps=10.0, rtt_ms=[rtt_ms], buffer_pkts=buffer_pkts,
                           loss=loss)
    return tick_trace(spec, "packet", None, duration_s, window_sender="ack-clocked",
                      controller=NewReno(), recovery=recovery, **kw)[3]


def test_prr_sends_through_a_recovery_in_proportion_to_what_is_delivered():
    """RFC 6937: after a loss cuts NewReno's window, PRR keeps sending while the flight is
    above ssthresh (the new window), never ahead of CEIL(prr_delivered ssthresh / RecoverFS)
    - prr_out; below it, for the recovery's first RTT no more than the last tick delivered (as
    ns-3's SSRB before any retransmission is acked), after it no more than prr_delivered -
    prr_out (the conservative bound); the window cut at once ("cut") sends nothing until the
    flight has fallen under the window."""
    def bounds(r):
        on, flight = r["prr_on"][:-1, 0], r["flight"][:-1, 0]
        ssth = np.maximum(r["cwnd"][:-1, 0], PKT)
        deliv, out, fs = r["prr_delivered"][:-1, 0], r["prr_out"][:-1, 0], r["prr_fs"][:-1, 0]
        last, since, srtt = r["prr_last"][:-1, 0], r["prr_since"][:-1, 0], r["srtt"][:-1, 0]
        # (row i is the state after tick i, which the next tick, i + 1, starts from; 1 ms ticks)
        first_rtt = (np.arange(1, len(on) + 1) - since) * 1e-3 < srtt
        prop = np.ceil(deliv * ssth / np.maximum(fs, PKT) / PKT - 1e-6) * PKT - out
        crb = np.minimum(ssth - flight, np.where(first_rtt, last, deliv - out))
        allowed = np.maximum(np.where(flight > ssth, prop, crb), 0.0)
        busy = on & (flight > 0)
        # where the first RTT's bound held the sender: the banked prr_delivered - prr_out
        # would have let it send more
        early = (busy & (flight <= ssth) & first_rtt
                 & (np.minimum(ssth - flight, deliv - out) > last + 1e-3))
        return np.diff(r["sent"][:, 0], prepend=0.0)[1:], allowed, busy, flight > ssth, early

    r = _newreno_trace("prr")
    tick_sent, allowed, busy, above, _ = bounds(r)
    assert busy.sum() > 20, "no recovery to look at"
    assert np.all(tick_sent[busy] <= allowed[busy] + 1e-3)
    above = busy & above
    assert tick_sent[above].sum() >= 5 * PKT  # it kept sending through the reduction
    # (the proportional share: about ssthresh / RecoverFS of what was delivered, here a half)
    acked = np.diff(r["acked"][:, 0], prepend=0.0)[:-1]
    assert 0.3 < tick_sent[above].sum() / acked[above].sum() < 0.7
    # a slow-start overshoot into a deep buffer loses many packets, so the flight falls below
    # ssthresh within the recovery's first RTT, while the bank is still there
    deep = _newreno_trace("prr", duration_s=2.0, rtt_ms=20.0, buffer_pkts=40)
    d_sent, d_allowed, d_busy, _, early = bounds(deep)
    assert np.all(d_sent[d_busy] <= d_allowed[d_busy] + 1e-3)
    assert early.sum() >= 5

    c = _newreno_trace("cut")
    assert not c["prr_on"].any()
    sent_c = np.diff(c["sent"][:, 0], prepend=0.0)[1:]
    over = c["flight"][:-1, 0] > np.maximum(c["cwnd"][:-1, 0], PKT) + 1e-3
    assert over.sum() > 20 and sent_c[over].sum() == 0


def test_retransmissions_in_prr_meet_drop_tail():
    """Without random loss a retransmission is lost only to drop-tail, which it meets where the
    senders keep sending (recovery "prr": through their recoveries; here the flows that lost
    their whole first window meet the others' ACK clock), not when the window is cut at once
    (the queue drains first, and the simulator then leaves drop-tail out)."""
    prr = _retx_lost_total(_newreno_trace("prr", flows=4, duration_s=8.0, retx_loss=True))
    cut = _retx_lost_total(_newreno_trace("cut", flows=4, duration_s=8.0, retx_loss=True))
    assert prr.sum() >= PKT and cut.sum() == 0


def test_a_lost_retransmission_holds_prr_until_the_timer():
    """A lost retransmission keeps the cumulative ACK below RecoveryPoint, so the recovery does
    not end when its flight has been reported (ns-3.37 stays in CA_RECOVERY): PRR still bounds
    the sender until the timeout drops the window to one packet, and only that ends it."""
    r = _newreno_trace("prr", flows=2, duration_s=8.0, buffer_pkts=16, loss=0.05,
                       retx_loss=True)
    held, on, left = r["prr_held"], r["prr_on"], r["prr_left"]
    assert held.any(), "no lost retransmission to look at"
    assert not (held & ~on).any()
    # held past the point where everything in flight at its start was reported
    assert (held & (left <= 0)).any()
    # each held recovery ends at a timeout: the window at the floor
    ends = held[:-1] & ~held[1:]
    assert ends.any()
    assert np.all(r["cwnd"][1:][ends] <= PKT + 1e-3)


def test_bad_recovery_is_refused():
    with pytest.raises(ConfigError, match="recovery='fast' is invalid: one of cut, prr"):
        SimConfig(recovery="fast")
    with pytest.raises(ConfigError, match="recovery='prr' is invalid: 'cut' with paced"):
        SimConfig(recovery="prr")
    with pytest.raises(ConfigError, match="'cut' with the fluid model"):
        SimConfig(recovery="prr", window_sender="ack-clocked", model="fluid")
    spec = link_from_flags(flows=1, bw_mbps=10.0, rtt_ms=[40.0])
    with pytest.raises(ConfigError, match="needs window_sender='ack-clocked'"):
        simulate([spec], cc="newreno", recovery="prr")


def test_prr_is_no_recovery_for_a_whole_flight_lost_unseen_nor_after_a_timeout():
    """Four first windows of 10 packets into an 8-packet buffer: flows that lose their whole
    window get no duplicate ACK and wait for their timer with nothing in flight (the controller
    drops its window to one packet meanwhile). That is no PRR recovery, and a window at the
    floor (the timeout) ends one, so slow start after it is not held to PRR's bound."""
    spec = link_from_flags(flows=4, bw_mbps=10.0, rtt_ms=[100.0], buffer_pkts=8)
    r = tick_trace(spec, "packet", None, 2.5, window_sender="ack-clocked",
                   controller=NewReno(), recovery="prr", retx_loss=True)[3]
    floor = r["cwnd"] <= PKT + 1e-3
    assert floor[100:].any(axis=0).sum() >= 1  # some flow waited for its timer
    assert r["prr_on"].any()  # and recoveries did happen
    assert not (r["prr_on"] & floor).any()


_admit = jax.jit(_allocate_packets)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=4),
       st.integers(0, 40), st.integers(0, 2**31 - 1))
def test_drop_tail_admits_the_ack_clock_before_the_growth(flows, space, seed):
    """Drop-tail with ACK-clocked senders (``sim.core._allocate_packets``): the packets that
    replace what left (``first``) take the room before a window's growth. Whole packets, never
    more than offered, as many as fit; the growth gets in only once every replacing packet has,
    and where the replacing packets alone overflow, no growth gets in at all."""
    first = np.array([f for f, _ in flows], np.float32)
    offered = first + np.array([g for _, g in flows], np.float32)
    pad = 4 - len(flows)  # one compiled shape
    first, offered = np.pad(first, (0, pad)), np.pad(offered, (0, pad))
    a = np.asarray(_admit(jnp.asarray(offered), jnp.float32(space), jax.random.PRNGKey(seed),
                          jnp.asarray(first)))
    assert np.all(a == np.round(a)) and np.all(a >= 0) and np.all(a <= offered)
    assert a.sum() == min(space, offered.sum())
    if first.sum() <= space:
        assert np.all(a >= first)
    else:
        assert np.all(a <= first)


def test_drop_tail_turns_away_the_growth_in_a_full_tick():
    """One tick's worth: flow 0 sends two packets that replace what left, flow 1 two such and
    one of growth, into room for four. Drop-tail turns away the growth (every draw); drawn
    without regard to the ACK clock, flow 0 would lose the packet in about two draws of five."""
    offered, first = jnp.asarray([2.0, 3.0]), jnp.asarray([2.0, 2.0])
    keys = jax.random.split(jax.random.PRNGKey(0), 200)
    clocked = jax.vmap(lambda k: _admit(offered, jnp.float32(4.0), k, first))(keys)
    assert np.all(np.asarray(clocked) == [2.0, 2.0])
    alike = np.asarray(jax.vmap(lambda k: _admit(offered, jnp.float32(4.0), k))(keys))
    assert np.all(alike.sum(1) == 4.0)
    assert 0.25 < np.mean(alike[:, 0] == 1.0) < 0.55


def test_a_flow_loses_its_clock_only_once_every_growth_is_turned_away():
    """The drop order as the simulator runs it (``tick_begin``): four ACK-clocked NewReno flows
    fill a 50 Mbps link and its 20-packet buffer, without random loss. In a tick, the packets a
    flow sends beyond what its last tick's reports freed (``SimState.clock``) are its growth.
    Whenever drop-tail turns away more of some flow than its growth, every flow's growth that
    tick was turned away (drawn without regard to the clock, as before 2026-11-27, this fails);
    and ``clock`` is each tick's reports plus what of the last tick's clock went unspent (at
    most a packet)."""
    spec = LinkSpec(bandwidth_mbps=(50.0,), buffer_pkts=20, rtt_ms=(40.0, 40.0, 40.0, 40.0),
                    start_s=(0.0, 0.05, 0.1, 0.15))
    _, _, _, r = tick_trace(spec, "packet", None, 3.0, window_sender="ack-clocked",
                            controller=NewReno())
    send = np.diff(r["sent"], axis=0)
    drop = np.diff(r["dropped"], axis=0)
    reported = np.diff(r["acked"] + r["lost"], axis=0)
    clock_before = r["clock"][:-1]
    growth = send - np.minimum(send, clock_before)
    eps = 1.0
    over = (drop > growth + eps).any(axis=1)
    assert (drop > 0).any(axis=1).sum() > 20  # drop-tail was busy
    assert over.sum() > 0  # and sometimes the clock itself overflowed
    assert np.all(drop[over] >= growth[over] - eps)
    spent = np.minimum(send, clock_before)
    expect = reported + np.minimum(clock_before - spent, PKT)
    active = r["clock"][1:] > 0
    np.testing.assert_allclose(r["clock"][1:][active], expect[active], atol=1e-2)


@pytest.mark.parametrize("cc,buffer_pkts,loss,duration_s", [
    ("vegas", 8, 0.0, 0.3),  # first windows into a full queue
    ("vegas", 6, 0.01, 1.0),  # and where the same tick's reports also end a PRR recovery
    ("cubic", 6, 0.01, 1.0),
])
def test_loss_reports_that_empty_the_flight_with_acks_send_what_the_acks_clock(
        cc, buffer_pkts, loss, duration_s):
    """Four first windows of 10 packets (ns-3's arithmetic) into a 6- or 8-packet buffer, with
    ns-3's sender jitter: a flow that got one packet through learns of the other nine in the
    tick its ACK comes, with nothing left in flight. In PRR mode it sends next only what that
    ACK clocks (two packets in slow start), as a per-ACK sender does before its duplicate ACKs
    report the losses, not its whole window into the full queue (``Prr.emptied``); so also
    where those reports end a recovery, which otherwise refills the window at once."""
    from ccjax import validation
    from ccjax.cc.registry import get_controller

    spec = link_from_flags(flows=4, bw_mbps=10.0, rtt_ms=[40.0], buffer_pkts=buffer_pkts,
                           loss=loss, handshake=True, jitter_ms=1.2)
    ctl = get_controller(cc)
    r = tick_trace(spec, "packet", None, duration_s, controller=ctl,
                   window_sender="ack-clocked",
                   params=validation.ns3_equivalent_params(cc, ctl, 4, True),
                   recovery="prr", retx_loss=True)[3]
    e = r["prr_emptied"]
    ts, fs = np.nonzero(e[1:] & ~e[:-1])
    ts = ts + 1
    keep = ts + 1 < len(e)
    ts, fs = ts[keep], fs[keep]
    sent = np.diff(r["sent"], axis=0, prepend=0.0)
    acked = np.diff(r["acked"], axis=0, prepend=0.0)
    lost = np.diff(r["lost"], axis=0, prepend=0.0)
    assert len(ts) >= 1, "no emptied flight to look at"
    assert np.all(lost[ts, fs] > 0) and np.all(acked[ts, fs] > 0)
    assert np.all(r["flight"][ts, fs] <= 0.5)
    nxt = sent[ts + 1, fs]
    assert np.all((nxt > 0) & (nxt <= 2 * acked[ts, fs] + PKT))
    assert np.any(r["cwnd"][ts, fs] >= 2 * nxt + PKT)  # where the whole window went before
    assert not np.any(e[ts + 1, fs])  # it has sent: the flag is spent
    if loss > 0:  # the path the reports that end a recovery take
        assert np.any(r["prr_on"][ts - 1, fs]), "no recovery ended by such reports"
