"""Scenario presets and the scenario loader/sampler (ccjax.sim.scenario)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import jax
import numpy as np
import pytest

from ccjax.errors import ConfigError
from ccjax.sim.link import LinkSpec
from ccjax.sim.scenario import Scenario, list_scenarios, load_scenario, presets_dir

PRESETS = [
    "astraea-three-flows", "astraea-train", "astraea-train-loss", "aurora-train",
    "auto-cellular", "auto-fairness", "auto-hybrid",
    "auto-random-loss", "auto-rapid-change", "auto-satellite", "auto-train", "dumbbell",
    "mocc-test", "mocc-train", "pareto-advance", "zixia-step",
]

# The ranges each paper states (or the preset's documented choice), written out independently of
# the TOML files so that a typo in a preset fails here: (bandwidth Mbps, RTT ms, buffer packets,
# loss, flow count), each as an inclusive (lo, hi); None = not checked (derived from BDP).
PAPER_RANGES = {
    "aurora-train": ((1.2, 6.0), (100, 1000), (2, 2981), (0, 0.05), (1, 1)),
    "mocc-train": ((1, 5), (20, 100), (2, 3000), (0, 0.03), (1, 1)),
    "mocc-test": ((10, 50), (20, 400), (500, 5000), (0, 0.10), (1, 1)),
    "auto-satellite": ((42, 42), (800, 800), (1500, 1500), (0.0074, 0.0074), (1, 1)),
    "auto-cellular": ((3.04, 3.04), (260, 260), (426, 426), (0.006, 0.006), (1, 1)),
    "auto-train": ((1.12, 5.6), (100, 1000), (2, 2981), (0, 0.05), (1, 1)),
    "auto-fairness": ((20, 20), (100, 100), (200, 200), (0, 0), (2, 2)),
    "auto-hybrid": ((42, 42), (840, 840), (1500, 1500), (0.0074, 0.0074), (1, 1)),
    "auto-rapid-change": ((2, 10), (100, 100), None, (0.01, 0.01), (1, 1)),
    "auto-random-loss": ((12, 12), (200, 200), (200, 200), (0, 0.08), (1, 1)),
    "zixia-step": ((12, 60), (20, 20), (100, 100), (0.01, 0.01), (1, 1)),
    "pareto-advance": ((5, 100), (90, 90), (300, 300), (0, 0), (1, 1)),
    "astraea-train": ((40, 160), (10, 140), None, (0, 0), (2, 5)),
    "astraea-train-loss": ((40, 160), (10, 140), None, (0, 0.01), (2, 5)),
    "astraea-three-flows": ((100, 100), (30, 30), (250, 250), (0, 0), (3, 3)),
    "dumbbell": ((12, 12), (40, 40), (40, 40), (0, 0), (2, 2)),
}


def _in(v: float, lo_hi: tuple[float, float]) -> bool:
    lo, hi = lo_hi
    return lo - 1e-9 <= v <= hi + 1e-9


def _write(tmp_path: Path, text: str, name: str = "bad.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


BASE = """
duration_s = 10
[link]
bandwidth_mbps = 10
buffer_pkts = 100
[flows]
rtt_ms = 40
"""


# ---------------------------------------------------------------------------------------------
# presets


def test_list_scenarios_has_every_preset():
    assert set(PRESETS) <= set(list_scenarios())
    assert set(PAPER_RANGES) == set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_and_samples_valid_links(name):
    s = load_scenario(name)
    assert s.name == name and s.source and s.description
    assert s.duration_s > 0 and 1 <= s.max_flows <= 4096
    specs = s.sample(0, 8)
    assert len(specs) == 8
    bw_r, rtt_r, buf_r, loss_r, n_r = PAPER_RANGES[name]
    for sp in specs:
        assert isinstance(sp, LinkSpec)
        assert _in(sp.n_flows, n_r) and sp.n_flows <= s.max_flows
        assert all(_in(b, bw_r) for b in sp.bandwidth_mbps)
        assert all(_in(r, rtt_r) for r in sp.rtt_ms)
        assert sp.buffer_pkts >= 1 and sp.buffer_pkts == int(sp.buffer_pkts)
        if buf_r is not None:
            assert _in(sp.buffer_pkts, buf_r)
        assert _in(sp.loss, loss_r)
        assert all(0 <= t < s.duration_s for t in sp.start_s)
        assert list(sp.start_s) == sorted(sp.start_s)
        assert all(0 <= t < s.duration_s for t in sp.steps_s)
        # ...and within the scenario's own parsed distributions.
        L, F = s.link, s.flows
        if L.bandwidth_mbps is not None:
            assert all(_in(b, (L.bandwidth_mbps.lo, L.bandwidth_mbps.hi))
                       for b in sp.bandwidth_mbps)
        assert all(_in(r, (F.rtt_ms.lo, F.rtt_ms.hi)) for r in sp.rtt_ms)
        assert _in(sp.loss, (L.loss.lo, L.loss.hi))


@pytest.mark.parametrize("name", PRESETS)
def test_preset_values_are_commented(name):
    """Every value in a preset says where it comes from (a trailing # comment)."""
    text = (presets_dir() / f"{name}.toml").read_text()
    for line in text.splitlines():
        m = re.match(r"\s*([A-Za-z_]+)\s*=", line)
        if m and m.group(1) not in ("name", "description", "source"):
            assert "#" in line, f"{name}: no comment on {line!r}"


def test_same_seed_same_links_different_seed_different_links():
    s = load_scenario("astraea-train")
    a, b, c = s.sample(7, 8), s.sample(7, 8), s.sample(8, 8)
    assert a == b
    assert a != c
    assert s.sample(7, 3) == a[:3]  # one stream, links drawn in order
    assert s.sample(np.random.default_rng(7), 8) == a
    k = s.sample(jax.random.key(3), 4)
    assert k == s.sample(jax.random.PRNGKey(3), 4)  # typed and raw keys agree
    assert k != s.sample(jax.random.key(4), 4)


def test_bad_seed_and_n_links():
    s = load_scenario("dumbbell")
    with pytest.raises(ConfigError, match="n_links"):
        s.sample(0, 0)
    with pytest.raises(TypeError):
        s.sample("x", 1)


def test_unknown_name_lists_available_presets():
    with pytest.raises(ConfigError) as e:
        load_scenario("no-such-scenario")
    msg = str(e.value)
    assert "no-such-scenario" in msg and "\n" not in msg
    for name in PRESETS:
        assert name in msg


def test_dumbbell_defaults():
    (sp,) = load_scenario("dumbbell").sample(0, 1)
    assert sp.bandwidth_mbps == (12.0,) and sp.rtt_ms == (40.0, 40.0)
    assert sp.buffer_pkts == 40.0  # 1 BDP: 12 Mbps x 40 ms / 1500 B
    assert sp.loss == 0.0 and sp.stop_s is None and sp.start_s == (0.0, 0.0)


def test_astraea_flows_arrive_and_leave_with_own_rtts():
    s = load_scenario("astraea-train")
    specs = s.sample(1, 16)
    assert all(sp.stop_s is not None for sp in specs)
    assert all(sp.start_s[0] == 0.0 for sp in specs)
    assert any(t > 0 for sp in specs for t in sp.start_s)
    assert any(t < s.duration_s for sp in specs for t in sp.stop_s)  # some leave early
    assert any(len(set(sp.rtt_ms)) > 1 for sp in specs)
    assert len({sp.n_flows for sp in specs}) > 1
    for sp in specs:  # buffer = factor x BDP(bandwidth, largest RTT), factor in [0.1, 16]
        bdp = sp.bandwidth_mbps[0] * 1e6 / 8 * max(sp.rtt_ms) * 1e-3 / 1500
        assert 0.1 * bdp - 1 <= sp.buffer_pkts <= 16 * bdp + 1


def test_astraea_three_flows_schedule():
    """Section 5.1.1: three flows at 100 Mbps, 30 ms, 1 BDP, started 40 s apart, 120 s each."""
    (sp,) = load_scenario("astraea-three-flows").sample(0, 1)
    assert sp.bandwidth_mbps == (100.0,) and sp.rtt_ms == (30.0, 30.0, 30.0)
    assert sp.buffer_pkts == 250.0  # 100 Mbps x 30 ms / 1500 B
    assert sp.start_s == (0.0, 40.0, 80.0) and sp.stop_s == (120.0, 160.0, 200.0)


FIXED = """
duration_s = 10
[link]
bandwidth_mbps = {uniform = [10, 20]}
buffer_pkts = {uniform = [50, 100]}
[flows]
"""


def test_fixed_per_flow_lists(tmp_path):
    s = load_scenario(_write(tmp_path, FIXED + """rtt_ms = [20, 40, 60]
start_s = [0, 1, 1]
stop_s = [9, 5, 20]
controllers = ["agent", "cubic", "bbr"]
""", "lists.toml"))
    assert s.max_flows == 3 and s.flows.controllers == ("agent", "cubic", "bbr")
    for sp in s.sample(3, 4):
        assert sp.rtt_ms == (20.0, 40.0, 60.0)
        assert sp.start_s == (0.0, 1.0, 1.0) and sp.stop_s == (9.0, 5.0, 20.0)
    # lists draw nothing: the drawn fields are those of the same scenario without them
    plain = load_scenario(_write(tmp_path, FIXED + "count = 3\nrtt_ms = 20\n", "plain.toml"))
    for a, b in zip(s.sample(5, 6), plain.sample(5, 6), strict=True):
        assert a.bandwidth_mbps == b.bandwidth_mbps and a.buffer_pkts == b.buffer_pkts


def test_stagger_and_varying_count(tmp_path):
    s = load_scenario(_write(tmp_path, FIXED + """count = {int_uniform = [2, 4]}
rtt_ms = [10, 20, 30, 40]
stagger_s = 2
lifetime_s = 3
""", "stagger.toml"))
    specs = s.sample(0, 16)
    assert len({sp.n_flows for sp in specs}) > 1
    for sp in specs:
        n = sp.n_flows
        assert sp.start_s == tuple(2.0 * i for i in range(n))
        assert sp.stop_s == tuple(2.0 * i + 3.0 for i in range(n))
        assert sp.rtt_ms == (10.0, 20.0, 30.0, 40.0)[:n]


def test_rapid_change_schedule():
    s = load_scenario("auto-rapid-change")
    for sp in s.sample(0, 4):
        assert sp.steps_s == tuple(5.0 * i for i in range(12)) and sp.period_s is None
        assert len(set(sp.bandwidth_mbps)) == 12


def test_zixia_periodic_steps():
    (sp,) = load_scenario("zixia-step").sample(0, 1)
    assert sp.bandwidth_mbps == (12.0, 60.0) and sp.steps_s == (0.0, 10.0)
    assert sp.period_s == 20.0


def test_pareto_mixes_fixed_and_stepping_links():
    specs = load_scenario("pareto-advance").sample(0, 64)
    fixed = [sp for sp in specs if len(sp.bandwidth_mbps) == 1]
    steps = [sp for sp in specs if len(sp.bandwidth_mbps) == 2]
    assert fixed and steps and len(fixed) + len(steps) == 64
    assert all(sp.period_s == 10.0 and sp.steps_s == (0.0, 5.0) for sp in steps)
    assert any(sp.bandwidth_mbps[0] > sp.bandwidth_mbps[1] for sp in steps)  # random phase


# ---------------------------------------------------------------------------------------------
# loading by path, traces


def test_load_by_path(tmp_path):
    p = _write(tmp_path, 'name = "mine"\n' + BASE, "mine.toml")
    for arg in (p, str(p)):
        s = load_scenario(arg)
        assert s.name == "mine" and s.path == p.resolve()
    (sp,) = Scenario.from_toml(p).sample(0, 1)
    assert sp.bandwidth_mbps == (10.0,) and sp.buffer_pkts == 100.0
    with pytest.raises(ConfigError, match="no such file"):
        load_scenario(tmp_path / "missing.toml")


def test_trace_scenario(tmp_path):
    (tmp_path / "traces").mkdir()
    stamps = [1, 1, 2, 3, 3, 4, 5, 6, 7, 8, 8, 10]  # 12 packets per 10 ms = 14.4 Mbps
    (tmp_path / "traces" / "tiny.trace").write_text("\n".join(map(str, stamps)) + "\n")
    other = tmp_path / "other.trace"
    other.write_text("5\n10\n")
    p = _write(tmp_path, f"""
duration_s = 5
[link]
buffer_bdp = 1
[link.capacity]
kind = "trace"
files = ["traces/tiny.trace", "{other}"]
[flows]
rtt_ms = 50
""", "trace.toml")
    s = load_scenario(p)
    specs = s.sample(0, 16)
    tiny = [sp for sp in specs if sp.trace_name.endswith("tiny.trace")]
    assert tiny and len(tiny) < 16  # both files get drawn
    sp = tiny[0]
    assert sp.trace is not None and sp.trace.dtype == np.int64
    np.testing.assert_array_equal(sp.trace, stamps)
    assert not sp.trace.flags.writeable  # one array shared by all links from that file
    assert sp.buffer_pkts == 60.0  # 14.4 Mbps x 50 ms / 1500 B


def test_trace_missing_file_names_the_field(tmp_path):
    p = _write(tmp_path, """
duration_s = 10
[link]
buffer_pkts = 100
[link.capacity]
kind = "trace"
files = ["nope.trace"]
[flows]
rtt_ms = 40
""")
    with pytest.raises(ConfigError, match=r"link\.capacity\.files\[0\].*no such file"):
        load_scenario(p)


# ---------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize(
    ("text", "field", "why"),
    [
        (BASE.replace("bandwidth_mbps = 10", "bandwidth_mbps = {uniform = [5, 1]}"),
         "link.bandwidth_mbps={'uniform': [5, 1]}", "lo must be <= hi"),
        (BASE.replace("bandwidth_mbps = 10", "bandwidth_mbps = -3"),
         "link.bandwidth_mbps=-3", "> 0"),
        (BASE.replace("bandwidth_mbps = 10", "bandwidth_mbps = {uniform = [-1, 5]}"),
         "link.bandwidth_mbps=", "> 0"),
        (BASE.replace("bandwidth_mbps = 10", "bandwidth_mbps = {normal = [5, 1]}"),
         "link.bandwidth_mbps=", "unknown distribution kind 'normal'"),
        (BASE.replace("bandwidth_mbps = 10", "bandwidth_mbps = {uniform = [1, 2], choice = [1]}"),
         "link.bandwidth_mbps=", "exactly one distribution kind"),
        (BASE.replace("bandwidth_mbps = 10", "bandwidth_mbps = {log_uniform = [0, 2]}"),
         "link.bandwidth_mbps=", "lo > 0"),
        (BASE.replace("bandwidth_mbps = 10", "bandwidth_mbps = 'fast'"),
         "link.bandwidth_mbps='fast'", "must be a number"),
        (BASE.replace("bandwidth_mbps = 10", "bandwith_mbps = 10"),
         "link.bandwith_mbps=10", "unknown key"),
        (BASE + "colour = 'red'\n", "flows.colour='red'", "unknown key"),
        ("speed = 1\n" + BASE, "speed=1", "unknown key"),
        (BASE.replace("buffer_pkts = 100", "buffer_pkts = 0.5"), "link.buffer_pkts=0.5", ">= 1"),
        (BASE.replace("buffer_pkts = 100", "buffer_pkts = 100\nbuffer_bdp = 1"),
         "link.buffer_pkts=100", "exactly one"),
        (BASE.replace("buffer_pkts = 100", "buffer_bdp = -1"), "link.buffer_bdp=-1", "> 0"),
        (BASE.replace("buffer_pkts = 100", "buffer_pkts = 100\nloss = 1.0"),
         "link.loss=1.0", "< 1"),
        (BASE.replace("buffer_pkts = 100", "buffer_pkts = 100\nloss = -0.1"),
         "link.loss=-0.1", ">= 0"),
        (BASE.replace("rtt_ms = 40", "rtt_ms = 0"), "flows.rtt_ms=0", "> 0"),
        (BASE.replace("rtt_ms = 40", ""), "flows.rtt_ms is missing", "required"),
        (BASE + "count = {uniform = [1, 3]}\n", "flows.count=", "whole numbers"),
        (BASE + "count = {int_uniform = [1.5, 3]}\n", "flows.count=", "integer"),
        (BASE + "count = 0\n", "flows.count=0", ">= 1"),
        (BASE + "start_s = -1\n", "flows.start_s=-1", ">= 0"),
        (BASE + "lifetime_s = 0\n", "flows.lifetime_s=0", "> 0"),
        (BASE + "start_s = {uniform = [0, 10]}\n", "flows.start_s=", "< duration_s"),
        (BASE + "shared_rtt = 1\n", "flows.shared_rtt=1", "true or false"),
        ("max_flows = 1\n" + BASE + "count = 3\n", "max_flows=1", ">= the largest"),
        (BASE.replace("duration_s = 10", "duration_s = 0"), "duration_s=0", "> 0"),
        (BASE.replace("duration_s = 10", ""), "duration_s is missing", "required"),
        (BASE.replace("[flows]", '[link.capacity]\nkind = "wavy"\n[flows]'),
         "link.capacity.kind='wavy'", "one of constant, steps, trace"),
        (BASE.replace("[flows]", '[link.capacity]\nkind = "steps"\n[flows]'),
         "link.capacity.interval_s is missing", "time between"),
        (BASE.replace("[flows]", '[link.capacity]\nkind = "steps"\ninterval_s = 0\n[flows]'),
         "link.capacity.interval_s=0", "> 0"),
        (BASE.replace("[flows]", '[link.capacity]\nkind = "steps"\ninterval_s = 1e-4\n[flows]'),
         "link.capacity.interval_s=", "too short"),
        (BASE.replace("[flows]", '[link.capacity]\nkind = "steps"\ninterval_s = 1\n'
                      'values_mbps = [12, 60]\n[flows]'),
         "link.bandwidth_mbps=10", "not used"),
        (BASE.replace("bandwidth_mbps = 10\n", "").replace(
            "[flows]", '[link.capacity]\nkind = "steps"\ninterval_s = 1\n'
            'values_mbps = [12, -60]\n[flows]'),
         "link.capacity.values_mbps=", "> 0 Mbps"),
        (BASE.replace("bandwidth_mbps = 10\n", ""), "link.bandwidth_mbps is missing", "required"),
        (BASE.replace("[flows]", '[link.capacity]\nkind = "constant"\nfiles = []\n[flows]'),
         "link.capacity.files=[]", "unknown key"),
        ("duration_s = [", "bad.toml", "invalid TOML"),
        (BASE.replace("buffer_pkts = 100", "buffer_pkts = 100\njitter_ms = -1"),
         "link.jitter_ms=-1", ">= 0"),
        (BASE.replace("buffer_pkts = 100", "buffer_pkts = 100\njitter_ms = 40"),
         "link.jitter_ms=40", "below every RTT the flows can draw (flows.rtt_ms from 40 ms)"),
        (BASE.replace("rtt_ms = 40", "rtt_ms = {uniform = [10, 40]}\naccess_ms = 6"),
         "flows.access_ms=6", "at most half of every RTT the flows can draw (5 ms"),
        (BASE + "access_ms = {uniform = [-1, 2]}\n", "flows.access_ms=", ">= 0"),
        (BASE + "handshake = 'yes'\n", "flows.handshake='yes'", "true or false"),
        (BASE + "handshake = true\nstart_s = 9.97\n", "flows.start_s=9.97",
         "with flows.handshake a flow's data can start 10.01 s in, not before duration_s (10 s)"),
        (BASE + "access_ms = 20\nhandshake = true\nlifetime_s = {uniform = [0.05, 5]}\n",
         "flows.lifetime_s=", "with flows.handshake and flows.access_ms a flow must live longer "
                              "than its data takes to start, up to 60 ms"),
        (BASE + "access_ms = 20\nlifetime_s = 0.02\n", "flows.lifetime_s=0.02",
         "with flows.access_ms a flow must live longer"),
        (BASE.replace("rtt_ms = 40", "rtt_ms = [40, 0]"), "flows.rtt_ms=[40, 0]",
         "allowed: values must be > 0 ms"),
        (BASE.replace("rtt_ms = 40", "rtt_ms = [40, 'x']"), "flows.rtt_ms=",
         "allowed: a non-empty list of numbers"),
        (BASE.replace("rtt_ms = 40", "rtt_ms = [40, 50]\nshared_rtt = true"),
         "flows.shared_rtt=True", "allowed: false with a list"),
        (BASE.replace("rtt_ms = 40", "rtt_ms = [40, 50]\ncount = 3"), "flows.rtt_ms=[40, 50]",
         "allowed: one value per flow, 3"),
        (BASE + "count = 2\nstart_s = [3, 1]\n", "flows.start_s=[3, 1]",
         "allowed: non-decreasing"),
        (BASE + "count = 2\nstart_s = [0, 10]\n", "flows.start_s=[0, 10]", "< duration_s"),
        (BASE + "count = 2\nstart_s = [0, 1]\nfirst_at_zero = true\n",
         "flows.first_at_zero=True", "allowed: absent with a list"),
        (BASE + "count = 3\nstagger_s = 5\n", "flows.stagger_s=5", "< duration_s"),
        (BASE + "stagger_s = -1\n", "flows.stagger_s=-1", "allowed: a number >= 0"),
        (BASE + "stagger_s = 1\nstart_s = 0\n", "flows.stagger_s=1",
         "allowed: not with flows.start_s"),
        (BASE + "count = 2\nstagger_s = 4\nstop_s = [5, 3]\n", "flows.stop_s=[5, 3]",
         "allowed: each flow's stop time after its start (flow 1: 3 s <= 4 s)"),
        (BASE + "stop_s = 3\n", "flows.stop_s=3", "allowed: a list of stop times"),
        (BASE + "stop_s = [3]\nlifetime_s = 2\n", "flows.stop_s=[3]",
         "allowed: not with flows.lifetime_s"),
        (BASE + "count = 2\ncontrollers = ['agent', 'reno2']\n", "flows.controllers=",
         "allowed: 'agent' or a controller name"),
        (BASE + "controllers = 'cubic'\n", "flows.controllers='cubic'",
         "allowed: a non-empty list of names"),
        (BASE + "handshake = true\nstop_s = [0.03]\n", "flows.stop_s=[0.03]",
         "with flows.handshake each flow's stop time after its data starts"),
    ],
)
def test_bad_toml_raises_one_line_config_error(tmp_path, text, field, why):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert msg.split(": ", 1)[0].endswith("bad.toml"), msg  # names the file first
    assert field in msg, msg
    assert why in msg, msg
    assert "\n" not in msg, msg


def test_error_message_format_matches_documented_example(tmp_path, monkeypatch):
    (tmp_path / "sims").mkdir()
    _write(tmp_path / "sims", BASE.replace("bandwidth_mbps = 10",
                                           "bandwidth_mbps = {uniform = [5, 1]}"), "foo.toml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_scenario("sims/foo.toml")
    assert str(e.value) == ("sims/foo.toml: link.bandwidth_mbps={'uniform': [5, 1]} is invalid:"
                            " lo must be <= hi")


def test_distribution_kinds_sample_in_range(tmp_path):
    p = _write(tmp_path, """
duration_s = 10
[link]
bandwidth_mbps = {log_uniform = [1, 100]}
buffer_pkts = {choice = [10, 20, 40]}
loss = {uniform = [0, 0.1]}
[flows]
count = {int_uniform = [1, 3]}
rtt_ms = {choice = [10, 20]}
shared_rtt = false
""", "ok.toml")
    specs = load_scenario(p).sample(0, 200)
    bws = np.array([sp.bandwidth_mbps[0] for sp in specs])
    assert bws.min() >= 1 and bws.max() <= 100
    assert np.median(np.log(bws)) == pytest.approx(math.log(10), abs=0.5)  # log-uniform
    assert {sp.buffer_pkts for sp in specs} == {10.0, 20.0, 40.0}
    assert {sp.n_flows for sp in specs} == {1, 2, 3}
    assert {r for sp in specs for r in sp.rtt_ms} == {10.0, 20.0}
    assert all(0 <= sp.loss <= 0.1 for sp in specs)


def test_steps_with_sampled_interval_and_cycle(tmp_path):
    p = _write(tmp_path, """
duration_s = 20
[link]
buffer_bdp = 1
[link.capacity]
kind = "steps"
values_mbps = [10, 30, 20]
interval_s = {uniform = [1, 3]}
[flows]
rtt_ms = 100
""", "cyc.toml")
    specs = load_scenario(p).sample(3, 4)
    for sp in specs:
        assert sp.period_s is None
        assert sp.bandwidth_mbps[:3] == (10.0, 30.0, 20.0)
        assert all(sp.bandwidth_mbps[i] == (10.0, 30.0, 20.0)[i % 3]
                   for i in range(len(sp.bandwidth_mbps)))
        gaps = np.diff(sp.steps_s)
        assert np.all((gaps >= 1) & (gaps <= 3)) and sp.steps_s[-1] < 20
        assert 1 <= sp.buffer_pkts  # BDP from the time-average of the schedule
    assert len({sp.steps_s for sp in specs}) > 1
    # redraw_interval = false: one interval per link, so the schedule is periodic.
    p.write_text(p.read_text().replace('kind = "steps"', 'kind = "steps"\nredraw_interval = false'))
    for sp in load_scenario(p).sample(3, 4):
        assert sp.period_s is not None and len(sp.steps_s) == 3
        assert sp.period_s == pytest.approx(3 * sp.steps_s[1])


def test_handshake_access_and_jitter_reach_the_links(tmp_path):
    """``flows.handshake``, ``flows.access_ms`` (one draw per flow) and ``link.jitter_ms`` (one
    per link) reach the sampled ``LinkSpec``s; drawn after the older fields and only where given,
    so a scenario without them draws the same links as before they existed."""
    text = BASE.replace("rtt_ms = 40", "rtt_ms = {uniform = [20, 60]}\nshared_rtt = false\n"
                        "count = 3")
    plain = load_scenario(_write(tmp_path, text, "plain.toml"))
    full = load_scenario(_write(tmp_path, text.replace(
        "buffer_pkts = 100", "buffer_pkts = 100\njitter_ms = {uniform = [0.5, 2]}")
        + "handshake = true\naccess_ms = {uniform = [0, 10]}\n", "full.toml"))
    a, b = plain.sample(7, 20), full.sample(7, 20)
    for x, y in zip(a, b, strict=True):
        assert (x.handshake, x.access_ms, x.jitter_ms) == (False, None, 0.0)
        assert y.handshake and 0.5 <= y.jitter_ms <= 2.0
        assert len(y.access_ms) == 3 and all(0.0 <= v <= 10.0 for v in y.access_ms)
    # the first link's older fields are the same draws; later links follow a longer stream
    assert (a[0].rtt_ms, a[0].start_s, a[0].buffer_pkts) == (b[0].rtt_ms, b[0].start_s,
                                                             b[0].buffer_pkts)
    assert len({y.jitter_ms for y in b}) == 20 and len({y.access_ms for y in b}) == 20
    # constants draw nothing: the same links but for the fields themselves
    const = load_scenario(_write(tmp_path, text.replace(
        "buffer_pkts = 100", "buffer_pkts = 100\njitter_ms = 1.2") + "access_ms = 3\n",
        "const.toml"))
    for x, y in zip(a, const.sample(7, 20), strict=True):
        assert (x.rtt_ms, x.start_s) == (y.rtt_ms, y.start_s)
        assert y.jitter_ms == 1.2 and y.access_ms == (3.0, 3.0, 3.0) and not y.handshake

