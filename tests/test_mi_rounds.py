"""MIs that end with the round (``Decision.mi_round``): at the first tick whose reports cover
everything the flow had in flight when the MI began, as a per-ACK TCP counts its rounds (ns-3
``TcpVegas``'s ``m_begSndNxt``, Linux ``tcp_vegas``'s ``beg_snd_nxt``), or at ``mi_s``."""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.cc.base import Decision
from ccjax.cc.const import FixedWindow, WindowParams
from ccjax.sim import LinkSpec
from ccjax.units import PACKET_BYTES as PKT

from .helpers import tick_trace


@dataclass(frozen=True)
class RoundWindow(FixedWindow):
    """A fixed window whose MIs are rounds, capped at ``mi_rtts`` smoothed RTTs."""

    name: str = "round-window"

    def _decide(self, params: WindowParams, srtt: jnp.ndarray) -> Decision:
        return Decision(rate=jnp.zeros_like(params.cwnd), cwnd=params.cwnd,
                        mi_s=params.mi_rtts * srtt, mi_round=jnp.ones(params.cwnd.shape, bool))


def _trace(sender: str, cap_rtts: float, loss: float = 0.0, window: float = 10.0):
    spec = LinkSpec(bandwidth_mbps=(10.0,), buffer_pkts=100, loss=loss, rtt_ms=(40.0,),
                    start_s=(0.0,))
    ctl = RoundWindow()
    params = ctl.default_params(1, cwnd_pkts=window).replace(
        mi_rtts=jnp.full(1, cap_rtts, jnp.float32))
    _, _, _, r = tick_trace(spec, "packet", None, 2.0, window_sender=sender, controller=ctl,
                            params=params)
    return r


@pytest.mark.parametrize("sender", ["paced", "ack-clocked"])
@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_a_round_ends_at_the_report_of_the_last_byte_in_flight_when_it_began(sender, loss):
    """Between two MI ends the reports (ACKs and loss reports) first reach the flight at the
    first one exactly at the second, never a tick earlier; with a cap of ten RTTs no MI hits the
    cap, so there is one MI per round: about one per RTT, not one per ten."""
    r = _trace(sender, cap_rtts=10.0, loss=loss)
    reported = r["acked"][:, 0] + r["lost"][:, 0]
    ends = np.flatnonzero(r["mi_done"][:, 0])
    # A round lasts the RTT of the packet sent last before it began: 41 ticks (40 ms and the
    # packet's 1.2 ms), less the time since that packet left. (An ACK-clocked sender sends for
    # a tick's reports at the next tick, as ns-3 sets m_begSndNxt before it sends for the ACK
    # that ends a round: a round that ends amid an ACK train is followed by one over the rest of
    # the train.)
    gaps = np.diff(ends)
    assert 38 <= np.median(gaps) <= 41 and gaps.max() <= 42
    lost_now = np.diff(r["lost"][:, 0], prepend=0.0) > 0
    rounds = 0
    for d0, d1 in zip(ends[:-1], ends[1:], strict=True):
        need = r["flight"][d0, 0] - 0.5
        # not a tick late
        assert reported[d1 - 1] - reported[d0] < need or need <= 0
        if lost_now[d1]:
            continue  # a window sender's MI also ends at a loss report (``sim.core``)
        assert reported[d1] - reported[d0] >= need and reported[d1] > reported[d1 - 1]
        rounds += 1
    assert rounds > 0.6 * len(ends)
    if loss:
        assert r["lost"][-1, 0] > 10 * PKT


@pytest.mark.parametrize("sender", ["paced", "ack-clocked"])
def test_a_round_ends_at_mi_s_if_that_comes_first(sender):
    """With a cap of half an RTT the MIs end at the cap, every 21 ticks (half the smoothed
    RTT of 41 ms), before their rounds: a round of a 40 ms link lasts about 40 ticks. (The first
    MIs are left out: before the first report a round with nothing in flight at its start
    ends at the first report, and the smoothed RTT still moves.)"""
    r = _trace(sender, cap_rtts=0.5)
    ends = np.flatnonzero(r["mi_done"][:, 0])
    gaps = np.diff(ends[5:])
    assert len(ends) > 80 and gaps.min() >= 20 and gaps.max() <= 21
