"""The tick a run needs for the controllers it runs: some measure queues finer than 1 ms.

The packet model moves a tick's packets as one group: they reach the queue together and a
flow's RTT samples within a tick carry the delay of the group's last byte. A controller whose
target queue is a packet or two (Copa: ``1 / delta`` = 2 packets, Arun & Balakrishnan 2018 §2)
cannot see that queue once a tick carries more than about one packet at the bottleneck rate:
at 50 Mbps a 1 ms tick holds 4.2 packets, Copa reads the group's own spread as standing queue
and settles at 0.58 of the link (one flow, 40 ms, 1 BDP, 10 s; 0.75 at 0.5 ms ticks, 0.92 at
0.25 ms, 0.98 at 0.1 ms; at 20 Mbps 0.75 at 1 ms and 0.94 at 0.5 ms).

Such a controller declares ``packets_per_tick`` (the most packets a tick may carry at the
link's rate), and a run that includes it uses a tick no longer than that many packet times at
its fastest link: ``tick_s`` given to ``simulate``, ``run_controller`` and ``evaluate`` is the
longest tick, the run takes the longest tick of the 1-2-5 series (1, 0.5, 0.2, 0.1 ms ...) that
fits, and its output records the tick it used. Only the packet model needs it: the fluid
model has no groups, and refining its tick gains nothing (Copa there, one flow, 50 Mbps,
40 ms, 1 BDP, 10 s: utilization 0.91 at 1 ms ticks, 0.83 at 0.2 ms).

A link's rate here is its highest scheduled bandwidth, or a trace's mean rate: the simulator
spreads each millisecond's delivery opportunities evenly over it, so a trace's milliseconds
busier than its mean still carry more than one packet per tick; resolving the busiest
millisecond instead would multiply the run's cost by the trace's peak-to-mean ratio.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from ccjax.sim.link import LinkSpec
from ccjax.sim.trace import mean_rate_bytes_per_s
from ccjax.units import PACKET_BYTES


def _members(controller: Any) -> Iterable[Any]:
    """A controller and, for a ``Mix``, its members."""
    yield controller
    for c in getattr(controller, "controllers", ()) or ():
        yield from _members(c)


def packets_per_tick(controllers: Iterable[Any]) -> float | None:
    """The fewest packets per tick any of ``controllers`` (objects) allows; None if none
    declares a limit."""
    limits = [float(c.packets_per_tick) for ctl in controllers for c in _members(ctl)
              if getattr(c, "packets_per_tick", None) is not None]
    return min(limits) if limits else None


def link_rate_bytes_per_s(spec: LinkSpec) -> float:
    """The rate a tick must resolve on this link: the highest scheduled bandwidth, or the
    trace's mean rate."""
    if spec.trace is not None:
        return float(mean_rate_bytes_per_s(spec.trace))
    return max(float(b) for b in spec.bandwidth_mbps) * 1e6 / 8.0


def _series_floor(x: float) -> float:
    """The largest value of the 1-2-5 series (..., 1e-4, 2e-4, 5e-4, 1e-3, ...) <= x."""
    e = math.floor(math.log10(x) + 1e-12)
    for m in (5.0, 2.0, 1.0):
        v = m * 10.0 ** e
        if v <= x * (1 + 1e-9):
            return v
    return 10.0 ** (e - 1) * 5.0


def resolve_tick(tick_s: float, controllers: Iterable[Any], specs: Sequence[LinkSpec],
                 model: str) -> float:
    """``tick_s``, or in the packet model a finer tick of the 1-2-5 series where a controller of
    the run needs one (module doc). ``tick_s`` must already be valid."""
    limit = packets_per_tick(controllers)
    if model != "packet" or limit is None or not specs:
        return tick_s
    rate = max(link_rate_bytes_per_s(s) for s in specs)
    longest = limit * PACKET_BYTES / rate
    if tick_s <= longest * (1 + 1e-9):
        return tick_s
    return max(_series_floor(longest), 1e-6)
