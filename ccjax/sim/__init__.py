"""The vectorized bottleneck simulator (see DESIGN.md, "The simulator")."""

from ccjax.sim.core import SimState, Totals, in_flight, init_state, tick
from ccjax.sim.link import LinkParams, LinkSpec, SimConfig, build_links, plan
from ccjax.sim.run import RunResult, Timeline, make_runner, make_timeline, run, summarize
from ccjax.sim.stats import MIStats

__all__ = [
    "LinkParams", "LinkSpec", "MIStats", "RunResult", "SimConfig", "SimState", "Timeline",
    "Totals", "build_links", "in_flight", "init_state", "make_runner", "make_timeline", "plan",
    "run", "summarize", "tick",
]
