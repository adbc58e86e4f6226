"""Unpaced, ACK-clocked window senders (``SimConfig.window_sender = "ack-clocked"``) and the
spread delivery of packet groups they need."""

from __future__ import annotations

import numpy as np
import pytest

from ccjax.api import link_from_flags, simulate
from ccjax.cc.newreno import NewReno
from ccjax.errors import ConfigError
from ccjax.sim import LinkSpec, SimConfig
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
