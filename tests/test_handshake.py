"""The connection's opening (``LinkSpec.handshake``, ``LinkSpec.access_ms``): when a flow's data
and SYN meet the bottleneck queue, and the RTT estimate the handshake leaves."""

from __future__ import annotations

import numpy as np
import pytest

from ccjax.errors import ConfigError
from ccjax.sim import LinkSpec
from ccjax.units import PACKET_BYTES, mbps_to_bytes_per_s
from ccjax.validation import ns3_access_ms
from tests.helpers import tick_trace


def _first_send_tick(sent: np.ndarray, f: int) -> int:
    return int(np.argmax(sent[:, f] > 0))


@pytest.mark.parametrize(("handshake", "access", "first"),
                         [(False, None, 0), (False, (10.0,), 10), (True, None, 40),
                          (True, (10.0,), 50)])
def test_data_starts_after_the_handshake_and_the_access_delay(handshake, access, first):
    # One 40 ms flow: its packets meet the queue access_ms after they are sent, and with the
    # handshake its data follows one base RTT (SYN, SYN-ACK) after its start.
    spec = LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,), buffer_pkts=50.0,
                    handshake=handshake, access_ms=access)
    _, _, _, rec = tick_trace(spec, "packet", None, 0.12, window_pkts=10.0,
                              window_sender="ack-clocked")
    assert _first_send_tick(rec["sent"], 0) == first
    # the RTT estimate holds until ACKs come back: the SYN's sample, the base RTT (nothing
    # queued met it, and its own transmission is nil), or without a handshake the least RTT a
    # data packet sees, the base RTT and its transmission (1500 bytes at 10 Mbps: 1.2 ms)
    tx_s = PACKET_BYTES * 8 / 10e6
    expect = 0.040 if handshake else 0.040 + tx_s
    assert rec["srtt"][first + 39, 0] == pytest.approx(expect)


def test_the_handshake_sample_carries_the_queue_the_syn_met():
    """Flow 0 (20 ms) sends 30 packets at once from tick 20 into a 10 Mbps link (1.2 ms per
    packet). A 40 ms flow whose SYN crosses the bottleneck at tick 25 waits behind that backlog,
    and its RTT estimate starts from base + the wait (RFC 6298 §2); one whose SYN crossed at
    tick 10, before flow 0's data, starts from its base RTT."""
    rate = mbps_to_bytes_per_s(10.0) * 1e-3  # bytes per 1 ms tick
    for syn_at, queued in ((0.025, True), (0.010, False)):
        spec = LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(20.0, 40.0), start_s=(0.0, syn_at),
                        buffer_pkts=100.0, handshake=True)
        _, _, _, rec = tick_trace(spec, "packet", None, 0.11, window_pkts=30.0,
                                  window_sender="ack-clocked")
        t = int(round(syn_at * 1e3))
        assert _first_send_tick(rec["sent"], 1) == t + 40
        est = rec["srtt"][t, 1]
        # before the SYN crosses: the least RTT a data packet sees (base + its transmission)
        assert rec["srtt"][t - 1, 1] == pytest.approx(0.040 + PACKET_BYTES / rate * 1e-3)
        if queued:
            # the backlog after ticks 20-24 of service: 30 packets less five ticks' worth
            wait_s = (30 * PACKET_BYTES - 5 * rate) / rate * 1e-3
            assert est == pytest.approx(0.040 + wait_s, abs=1.5e-3)
            assert est > 0.040 + 0.02
        else:
            assert est == pytest.approx(0.040)
        # it stays the estimate until the flow's own ACKs come back
        assert rec["srtt"][t + 40 + 39, 1] == pytest.approx(est)


@pytest.mark.parametrize(("kw", "field"), [
    (dict(access_ms=(1.0,)), "access_ms"),  # one per flow
    (dict(access_ms=(-1.0, 0.0)), "access_ms"),
    (dict(access_ms=(25.0, 0.0)), "access_ms"),  # more than half of 40 ms
    (dict(access_ms=(float("nan"), 0.0)), "access_ms"),
    (dict(handshake="yes"), "handshake"),
])
def test_bad_handshake_or_access_is_a_clear_error(kw, field):
    with pytest.raises(ConfigError, match=f"^{field}="):
        LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0, 60.0), start_s=(0.0, 0.0), **kw)


def test_a_flow_whose_data_would_start_after_the_run_or_its_stop_is_refused():
    from ccjax.api import link_from_flags, simulate

    spec = link_from_flags(flows=2, bw_mbps=10.0, rtt_ms=[40.0, 300.0], start_s=[0.0, 0.75],
                           handshake=True)
    with pytest.raises(ConfigError, match=r"^start_s=0.75 is invalid \(link 0, flow 1\)"):
        simulate([spec], cc="newreno", duration_s=1.0)
    with pytest.raises(ConfigError, match="^stop_s=0.03 is invalid"):
        LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,), stop_s=(0.03,), handshake=True)


def test_ns3_access_delays_are_the_dumbbells():
    # sims/ns3/dumbbell.cc: access link rtt/2 - btlDelay, btlDelay = min(rtt)/4
    assert ns3_access_ms([20.0, 100.0]) == [5.0, 45.0]
    assert ns3_access_ms([40.0, 40.0]) == [10.0, 10.0]
    assert ns3_access_ms([20.0, 47.0, 73.0, 100.0]) == [5.0, 18.5, 31.5, 45.0]
