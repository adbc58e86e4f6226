"""Mixed controllers on one link, and batches sharded across CPU devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ccjax.api import link_from_flags, simulate
from ccjax.cc import registry
from ccjax.cc.const import FixedWindow
from ccjax.errors import ConfigError


def test_mixed_controllers_share_a_link(monkeypatch):
    monkeypatch.setitem(registry.CONTROLLERS, "fixed-window", FixedWindow())
    spec = link_from_flags(flows=3, bw_mbps=100.0, rtt_ms=(40.0,))
    s = simulate([spec], cc=["const", "fixed-window", "const"], rate_mbps=[5.0, 0.0, 7.0],
                 duration_s=4.0, model="fluid").summary()
    thr = [f["throughput_mbps"] for f in s["flows"]]
    assert thr[0] == pytest.approx(5.0, rel=1e-3)
    assert thr[2] == pytest.approx(7.0, rel=1e-3)
    # 10 packets per 40 ms RTT = 3 Mbps, less the first RTT's ramp
    assert thr[1] == pytest.approx(3.0 * 3.96 / 4.0, rel=0.02)
    # a rate for the window flow would be ignored, so it is refused, as is one for an empty slot
    with pytest.raises(ConfigError, match="flow 1 is invalid: that flow runs fixed-window"):
        simulate([spec], cc=["const", "fixed-window", "const"], rate_mbps=[5.0, 1.0, 7.0],
                 duration_s=1.0, model="fluid")
    with pytest.raises(ConfigError, match="at most 1e\\+06 Mbps"):
        simulate([spec], cc="const", rate_mbps=1e40, duration_s=1.0, model="fluid")
    for bad in (True, "8", [5.0, None, 7.0]):  # a bool is an int to Python; text is no rate
        with pytest.raises(ConfigError, match="rate_mbps=.* a number of Mbps"):
            simulate([spec], cc="const", rate_mbps=bad, duration_s=1.0, model="fluid")
    # the params ``run_controller`` takes as they are: a bad rate ran silently to NaN
    from ccjax.cc.const import Const
    for bad in (0.0, -5.0, float("nan"), 1e40):
        with pytest.raises(ConfigError, match="rate_mbps="):
            Const().default_params(2, rate_mbps=bad)


_SCRIPT = """
import json, sys
from ccjax.api import link_from_flags, simulate
import jax
specs = [link_from_flags(flows=2, bw_mbps=b, rtt_ms=(30.0, 50.0), loss=0.01)
         for b in (6, 9, 12, 20)]
res = simulate(specs, rate_mbps=[5.0, 6.0], duration_s=1.0, model="packet", seed=4)
# CUBIC is asked only where an MI ended, gathered per device (``sim.compact``, ``shard_map``)
cub = simulate(specs, cc="cubic", duration_s=2.0, model="packet", seed=4,
               window_sender="ack-clocked")
print(json.dumps({"devices": len(jax.devices()),
                  "sharded": len(res.series.delivered.sharding.device_set),
                  "cubic_sharded": len(cub.series.delivered.sharding.device_set),
                  "thr": [[f["throughput_mbps"] for f in res.summary(i)["flows"]]
                          for i in range(4)],
                  "cubic": [[f["throughput_mbps"] for f in cub.summary(i)["flows"]]
                            for i in range(4)],
                  "cubic_cwnd": [[f["cwnd_series_pkts"] for f in cub.summary(i)["flows"]]
                                 for i in range(4)]}))
"""


@pytest.mark.slow
def test_sharded_batch_equals_single_device():
    out = {}
    for n in (1, 2):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}",
                   JAX_PLATFORMS="cpu")
        p = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                           text=True, check=True)
        out[n] = json.loads(p.stdout.strip().splitlines()[-1])
    assert out[1]["devices"] == 1 and out[2]["devices"] == 2
    assert out[2]["sharded"] == 2 and out[2]["cubic_sharded"] == 2  # ran on both devices
    assert out[1]["thr"] == out[2]["thr"]
    assert out[1]["cubic"] == out[2]["cubic"]
    assert out[1]["cubic_cwnd"] == out[2]["cubic_cwnd"]  # the windows come out of shard_map too
    assert all(w is not None for link in out[1]["cubic_cwnd"] for f in link for w in f)


def test_link_seeds_make_a_link_independent_of_its_batch():
    """``run_controller(link_seeds=...)``: a link's random draws are its own, so its result is
    the same alone and in a batch; a wrong seed list is a clear error before anything runs."""
    from ccjax.api import link_from_flags, run_controller
    from ccjax.cc.newreno import NewReno
    from ccjax.errors import ConfigError

    a = link_from_flags(flows=1, bw_mbps=10.0, rtt_ms=[40.0], loss=0.01)
    b = link_from_flags(flows=1, bw_mbps=20.0, rtt_ms=[30.0], loss=0.02)
    alone = run_controller([a], NewReno(), duration_s=2.0, link_seeds=[7]).summary(0)
    batch = run_controller([b, a], NewReno(), duration_s=2.0, link_seeds=[3, 7]).summary(1)
    assert alone["flows"][0]["throughput_mbps"] == batch["flows"][0]["throughput_mbps"]
    assert alone["link"]["drop_rate"] == batch["link"]["drop_rate"]
    with pytest.raises(ConfigError, match="link_seeds"):
        run_controller([a, b], NewReno(), duration_s=1.0, link_seeds=[1])
    with pytest.raises(ConfigError, match="link_seeds"):
        run_controller([a], NewReno(), duration_s=1.0, link_seeds=[-1])
