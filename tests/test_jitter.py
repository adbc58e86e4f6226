"""The senders' per-packet jitter (``LinkSpec.jitter_ms``): what it adds to the RTT samples, what it
leaves alone, and its checks."""

from __future__ import annotations

import numpy as np
import pytest

from ccjax.errors import ConfigError
from ccjax.sim import LinkSpec
from ccjax.units import PACKET_BYTES
from ccjax.validation import ns3_jitter_ms, scenario_from_flags
from tests.helpers import tick_trace

TX_S = PACKET_BYTES * 8 / 10e6  # one packet at 10 Mbps: 1.2 ms


def _run(model: str, jitter_ms: float, loss: float = 0.0, seed: int = 0):
    # one constant-rate flow at half of a 10 Mbps link: every RTT sample is the least a data
    # packet sees, what the pacer's bunching queues, and the jitter's draw
    spec = LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,), buffer_pkts=50.0, loss=loss,
                    jitter_ms=jitter_ms)
    return tick_trace(spec, model, 5.0, 2.0, seed=seed)


def _mean_rtt(s) -> float:
    return float(np.asarray(s.tot.rtt_sum)[0] / np.asarray(s.tot.rtt_w)[0])


def test_packet_model_rtt_samples_carry_a_uniform_draw():
    _, _, s0, rec0 = _run("packet", 0.0)
    _, _, s1, rec1 = _run("packet", 1.2)
    floor = 0.040 + TX_S
    # the same packets (the draws are the jitter's own: below), so the same queueing delays:
    # about 850 ticks with ACKs, one draw each, add half the width within 0.1 ms
    assert _mean_rtt(s1) - _mean_rtt(s0) == pytest.approx(0.6e-3, abs=1e-4)
    assert float(np.asarray(s0.min_rtt)[0]) == pytest.approx(floor, abs=1e-6)
    assert float(np.asarray(s1.min_rtt)[0]) == pytest.approx(floor, abs=0.05e-3)
    # the smoothed RTT, an average of draws, lies above the one without by [0, width), by
    # half the width on average, and not by a constant
    d = rec1["srtt"][500:, 0] - rec0["srtt"][500:, 0]
    assert d.min() >= -1e-6 and d.max() < 1.2e-3
    assert d.mean() == pytest.approx(0.6e-3, abs=0.15e-3)
    assert d.std() > 0.02e-3


def test_fluid_model_takes_the_mean():
    _, _, s0, _ = _run("fluid", 0.0)
    _, _, s1, rec1 = _run("fluid", 1.2)
    assert _mean_rtt(s1) - _mean_rtt(s0) == pytest.approx(0.6e-3, abs=1e-6)
    assert np.ptp(rec1["srtt"][500:, 0]) < 1e-6  # (a fluid sender's RTT has nothing to jitter)


def test_the_jitter_draws_leave_every_other_draw_alone():
    # a rate sender does not react to RTTs: with its own random stream, the jitter changes no
    # packet's fate (random loss here, 1 %)
    _, _, _, a = _run("packet", 0.0, loss=0.01, seed=3)
    _, _, _, b = _run("packet", 1.2, loss=0.01, seed=3)
    assert a["lost"][-1, 0] > 0
    for k in ("sent", "acked", "lost", "delivered", "dropped"):
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("bad", [-0.1, 40.0, 50.0, float("nan"), float("inf"), True, "1"])
def test_bad_jitter_is_a_clear_error(bad):
    with pytest.raises(ConfigError, match="^jitter_ms=.* below the shortest RTT"):
        LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0, 60.0), start_s=(0.0, 0.0), jitter_ms=bad)


def test_ns3_dumbbell_jitter_is_one_packet_time():
    # sims/ns3/dumbbell.cc: --jitterUs defaults to 1500 * 8 / bwMbps
    assert ns3_jitter_ms(10.0) == pytest.approx(1.2)
    assert ns3_jitter_ms(50.0) == pytest.approx(0.24)
    # `ccjax validate` refuses a link whose packet time reaches the RTT, before anything runs
    with pytest.raises(ConfigError, match=r"^bw_mbps=0.5 is invalid: at least 0.6 Mbps"):
        scenario_from_flags("vegas", 1, 0.5, [20.0], 1.0, 0.0, 10.0)
    assert scenario_from_flags("vegas", 1, 1.0, [20.0], 1.0, 0.0, 10.0).bw_mbps == 1.0


def test_the_draw_is_static_and_never_silently_dropped():
    from ccjax.sim.link import build_links, plan

    calm = LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,))
    shaky = LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,), jitter_ms=1.2)
    # links without jitter compile no draw; any link with it turns it on for the batch
    assert not plan([calm], 1.0, model="packet")[0].rtt_jitter
    cfg, horizon = plan([calm, shaky], 1.0, model="packet")
    assert cfg.rtt_jitter
    assert float(build_links([calm, shaky], cfg, horizon).jitter_s[1]) == pytest.approx(1.2e-3)
    # a config built without it refuses a link with jitter rather than ignore it
    cfg0, horizon0 = plan([calm], 1.0, model="packet")
    with pytest.raises(ConfigError, match=r"^jitter_ms=1.2 is invalid: 0 under a SimConfig"):
        build_links([shaky], cfg0, horizon0)
