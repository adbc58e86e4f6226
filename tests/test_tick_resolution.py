"""Copa needs a tick of at most one packet time (``ccjax.sim.resolution``): every entry point
runs it at such a tick and says so, or refuses where the tick is a training setting."""

import numpy as np
import pytest

from ccjax.api import link_from_flags, run_controller, simulate
from ccjax.cc.copa import Copa
from ccjax.cc.cubic import Cubic
from ccjax.cc.mix import Mix
from ccjax.envs.build import make_single_flow
from ccjax.errors import ConfigError
from ccjax.evaluate import evaluate
from ccjax.sim.link import LinkSpec
from ccjax.sim.resolution import link_rate_bytes_per_s, packets_per_tick, resolve_tick


def _link(bw: float, flows: int = 1) -> LinkSpec:
    return link_from_flags(flows=flows, bw_mbps=bw, rtt_ms=[40.0] * flows)


@pytest.mark.parametrize("bw, tick", [(50.0, 2e-4), (20.0, 5e-4), (12.0, 1e-3), (10.0, 1e-3),
                                      (200.0, 5e-5)])
def test_copa_gets_the_longest_tick_of_the_series_within_one_packet_time(bw, tick):
    got = resolve_tick(1e-3, [Copa()], [_link(10.0), _link(bw)], "packet")
    assert got == pytest.approx(tick)
    assert got <= 1500 * 8 / (max(bw, 10.0) * 1e6) * (1 + 1e-9)  # at most one packet time
    # a controller without a limit, and a tick already fine enough, are left alone
    assert resolve_tick(1e-3, [Cubic()], [_link(bw)], "packet") == 1e-3
    assert resolve_tick(4e-5, [Copa()], [_link(bw)], "packet") == 4e-5
    # the fluid model has no tick groups: its tick is left alone
    assert resolve_tick(1e-3, [Copa()], [_link(bw)], "fluid") == 1e-3
    # a Mix is as demanding as its most demanding member
    assert packets_per_tick([Mix((Cubic(), Copa()))]) == 1.0
    mixed = resolve_tick(1e-3, [Mix((Cubic(), Copa()))], [_link(bw)], "packet")
    assert mixed == pytest.approx(tick)


def test_a_trace_link_is_resolved_at_its_mean_rate():
    # 4 delivery opportunities per ms = 48 Mbps on average, bunched into one instant per ms
    stamps = np.repeat(np.arange(1, 1001), 4).astype(float)
    spec = LinkSpec(trace=stamps, rtt_ms=(40.0,))
    assert link_rate_bytes_per_s(spec) == pytest.approx(4 * 1500 * 1000, rel=0.01)
    assert resolve_tick(1e-3, [Copa()], [spec], "packet") == pytest.approx(2e-4)


def test_copa_fills_a_50_mbps_link_at_the_resolved_tick_and_the_run_records_it():
    res = simulate([_link(50.0)], cc="copa", duration_s=6.0)
    s = res.summary(0)
    assert s["sim"]["tick_s"] == pytest.approx(2e-4)
    # at 1 ms ticks it settled at about 0.58 of the link (ccjax.sim.resolution)
    assert s["link"]["utilization"] > 0.85
    # the standing queue stays a few packets (1/delta = 2 at 0.24 ms each), not a BDP
    assert s["link"]["mean_queue_delay_ms"] < 5.0
    # a run without Copa keeps the tick it was given
    assert simulate([_link(50.0)], cc="cubic", duration_s=0.5).summary(0)["sim"]["tick_s"] == 1e-3
    assert run_controller([_link(50.0)], Copa(), duration_s=0.5).cfg.tick_s == pytest.approx(2e-4)


def test_evaluate_runs_copa_at_its_tick_and_each_row_says_which():
    res = evaluate(["copa", "cubic"], links=[_link(50.0)], duration_s=1.0)
    ticks = {r["method"]: r["tick_s"] for r in res.rows}
    assert ticks["copa"] == pytest.approx(2e-4) and ticks["cubic"] == 1e-3
    assert res.tick_s == 1e-3


def test_copa_cross_traffic_at_a_too_coarse_training_tick_is_refused():
    with pytest.raises(ConfigError, match="cross='copa' is invalid with tick_s=0.001"):
        make_single_flow(links=[_link(50.0)], cross="copa", n_cross=1, pool=1, model="packet")
    make_single_flow(links=[_link(10.0)], cross="copa", n_cross=1, pool=1, model="packet")
    make_single_flow(links=[_link(50.0)], cross="copa", n_cross=1, pool=1)  # fluid: no groups
