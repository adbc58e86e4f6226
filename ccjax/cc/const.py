"""Constant-rate sender: sends at a fixed pacing rate whatever the feedback.

The baseline of the simulator's own laws (a constant-rate flow below capacity sees no queue, above
capacity it fills the buffer) and the cross traffic of several papers (e.g. Astraea's and AUTO's
UDP-like competing flows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Decision

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats
from ccjax.units import PACKET_BYTES, check_rate_mbps, mbps_to_bytes_per_s


class ConstParams(struct.PyTreeNode):
    rate: jnp.ndarray  # (F,) bytes/s
    mi_rtts: jnp.ndarray  # (F,) MI length in smoothed RTTs


@dataclass(frozen=True)
class Const:
    name: str = "const"
    #: on_interval is elementwise over flows (``sim.compact``), so a ``Mix`` of it with the
    #: classic controllers keeps the CPU's fast path
    per_flow: ClassVar[bool] = True

    def default_params(self, n_flows: int, rate_mbps: float = 10.0) -> ConstParams:
        # checked here too: ``run_controller`` takes these params as they are, and a rate of 0,
        # below 0 or NaN ran silently to NaN
        check_rate_mbps("rate_mbps", rate_mbps)
        return ConstParams(
            rate=jnp.full(n_flows, mbps_to_bytes_per_s(rate_mbps), jnp.float32),
            # Aurora's monitor interval: half a smoothed RTT (PCC-RL network_sim.py).
            mi_rtts=jnp.full(n_flows, 0.5, jnp.float32),
        )

    def _decide(self, params: ConstParams, srtt: jnp.ndarray) -> Decision:
        return Decision(rate=params.rate, cwnd=jnp.full_like(params.rate, jnp.inf),
                        mi_s=params.mi_rtts * srtt, mi_round=jnp.zeros(params.rate.shape, bool))

    def init(self, params: ConstParams, base_rtt_s: jnp.ndarray):
        return (), self._decide(params, base_rtt_s)

    def on_interval(self, state, stats: MIStats, params: ConstParams):
        return state, self._decide(params, stats.srtt)


class WindowParams(struct.PyTreeNode):
    cwnd: jnp.ndarray  # (F,) bytes
    mi_rtts: jnp.ndarray  # (F,) MI length in smoothed RTTs


@dataclass(frozen=True)
class FixedWindow:
    """Window-based sender with a fixed cwnd, paced at cwnd/srtt (a testing and teaching aid)."""

    name: str = "fixed-window"
    per_flow: ClassVar[bool] = True

    def default_params(self, n_flows: int, cwnd_pkts: float = 10.0) -> WindowParams:
        return WindowParams(cwnd=jnp.full(n_flows, cwnd_pkts * PACKET_BYTES, jnp.float32),
                            mi_rtts=jnp.full(n_flows, 1.0, jnp.float32))

    def _decide(self, params: WindowParams, srtt: jnp.ndarray) -> Decision:
        return Decision(rate=jnp.zeros_like(params.cwnd), cwnd=params.cwnd,
                        mi_s=params.mi_rtts * srtt, mi_round=jnp.zeros(params.cwnd.shape, bool))

    def init(self, params: WindowParams, base_rtt_s: jnp.ndarray):
        return (), self._decide(params, base_rtt_s)

    def on_interval(self, state, stats: MIStats, params: WindowParams):
        return state, self._decide(params, stats.srtt)
