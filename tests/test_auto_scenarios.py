"""AUTO's (Li et al., USENIX ATC'21) scenario presets and the poisson capacity kind.

The ranges below are written out from the paper, independently of the TOML files, so that a typo
in a preset fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ccjax.errors import ConfigError
from ccjax.sim import capacity
from ccjax.sim.link import LinkSpec
from ccjax.sim.scenario import load_scenario, presets_dir
from ccjax.sim.trace import mean_rate_bytes_per_s, trace_segments
from ccjax.units import PACKET_BYTES, mbps_to_bytes_per_s

AUTO_PRESETS = ["auto-train", "auto-cellular", "auto-random-loss", "auto-fairness",
                "auto-satellite", "auto-hybrid", "auto-rapid-change"]

CELLULAR_MBPS = 3.04  # AUTO section 5.2.2


def _write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _poisson_toml(capacity_lines: str = "", bw: str = "bandwidth_mbps = 3.04",
                  flows: str = "rtt_ms = 260") -> str:
    return f"""
duration_s = 20
[link]
{bw}
buffer_pkts = 100
[link.capacity]
kind = "poisson"
{capacity_lines}
[flows]
{flows}
"""


# ---------------------------------------------------------------------------------------------
# every AUTO preset


@pytest.mark.parametrize("name", AUTO_PRESETS)
def test_auto_preset_loads_and_samples(name: str) -> None:
    s = load_scenario(name)
    assert s.name == name and s.description
    assert s.source.startswith("Li et al.") and "AUTO" in s.source
    specs = s.sample(0, 4)
    assert len(specs) == 4 and all(isinstance(sp, LinkSpec) for sp in specs)
    for sp in specs:
        assert sp.n_flows <= s.max_flows
        assert all(0 <= t < s.duration_s for t in sp.start_s)


@pytest.mark.parametrize("name", AUTO_PRESETS)
def test_auto_preset_values_are_commented(name: str) -> None:
    """Every value says where it comes from or why it was chosen (a trailing # comment)."""
    for line in (presets_dir() / f"{name}.toml").read_text().splitlines():
        m = re.match(r"\s*([A-Za-z_]+)\s*=", line)
        if m and m.group(1) not in ("name", "description", "source"):
            assert "#" in line, f"{name}: no comment on {line!r}"


# ---------------------------------------------------------------------------------------------
# auto-train: Table 1


def test_auto_train_links_lie_in_table_1_ranges() -> None:
    s = load_scenario("auto-train")
    specs = s.sample(3, 400)
    bw = np.array([mbps_to_bytes_per_s(sp.bandwidth_mbps[0]) for sp in specs])
    # 100-500 packets/s of 1400 B (section 5.2.3: [1.12, 5.6] Mbps), in bytes/s
    lo, hi = 100 * 1400, 500 * 1400
    assert np.all((bw >= lo) & (bw <= hi))
    assert bw.min() < lo * 1.1 and bw.max() > hi * 0.95  # the range is covered, not a corner
    assert all(len(sp.bandwidth_mbps) == 1 and sp.trace is None for sp in specs)  # constant
    q = np.array([sp.buffer_pkts for sp in specs])
    assert np.all((q >= 2) & (q <= 2981)) and np.all(q == np.round(q))
    # log-uniform: the median sits near the geometric mean sqrt(2 * 2981) = 77 packets, far
    # below the arithmetic midpoint 1491 a uniform draw would give
    assert 40 < np.median(q) < 150
    loss = np.array([sp.loss for sp in specs])
    assert np.all((loss >= 0) & (loss <= 0.05)) and loss.max() > 0.045
    rtt = np.array([sp.rtt_ms[0] for sp in specs])
    assert np.all((rtt >= 100) & (rtt <= 1000))  # 50-500 ms one-way latency, RTT = 2x
    assert all(sp.n_flows == 1 for sp in specs)


# ---------------------------------------------------------------------------------------------
# auto-cellular: poisson capacity


def test_cellular_keeps_the_paper_link() -> None:
    s = load_scenario("auto-cellular")
    assert s.link.capacity.kind == "poisson"
    for sp in s.sample(0, 3):
        assert sp.rtt_ms == (260.0,) and sp.loss == 0.006 and sp.buffer_pkts == 426
        assert sp.trace is not None and sp.bandwidth_mbps == (CELLULAR_MBPS,)


def test_poisson_mean_rate_and_exponential_gaps() -> None:
    s = load_scenario("auto-cellular")
    specs = s.sample(7, 6)
    want = mbps_to_bytes_per_s(CELLULAR_MBPS)
    rates, counts, periods = [], 0, 0.0
    for sp in specs:
        st = sp.trace
        assert st is not None and st.dtype == np.int64 and np.all(np.diff(st) >= 0)
        assert st[-1] >= s.duration_s * 1e3  # covers the run without repeating
        r = mean_rate_bytes_per_s(st)
        rates.append(r)
        counts += len(st)
        periods += st[-1] * 1e-3
        assert r == pytest.approx(want, rel=0.03)  # ~15,000 opportunities: sd 0.8 %
        # the compiled schedule delivers what the trace does
        t, rate, per = trace_segments(st, 1e-3)
        sched = capacity.build_schedule(t, rate, per)
        assert capacity.mean_rate(sched) * 1e3 == pytest.approx(r, rel=1e-5)
        # exponential gaps: coefficient of variation 1 (a constant-rate link's would be ~0);
        # flooring to whole ms changes it by well under 1 %
        gaps = np.diff(st).astype(np.float64)
        assert gaps.mean() == pytest.approx(PACKET_BYTES / want * 1e3, rel=0.03)
        assert 0.95 < gaps.std() / gaps.mean() < 1.05
    assert counts * PACKET_BYTES / periods == pytest.approx(want, rel=0.01)  # pooled
    assert len(set(rates)) == len(rates)  # every link has its own trace


def test_poisson_same_seed_same_schedule_different_seeds_differ() -> None:
    s = load_scenario("auto-cellular")
    a, b, c = s.sample(11, 2), s.sample(11, 2), s.sample(12, 2)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.trace, y.trace)
        assert x == y and x.trace_name == y.trace_name
    assert not np.array_equal(a[0].trace[:1000], c[0].trace[:1000])
    assert not np.array_equal(a[0].trace[:1000], a[1].trace[:1000])  # links differ too
    assert s.sample(11, 1)[0] == a[0]  # the first links of a larger sample are the same
    assert not a[0].trace.flags.writeable


def test_poisson_trace_does_not_shift_the_other_draws(tmp_path: Path) -> None:
    """The trace has its own stream: a longer or faster trace leaves RTT and loss draws alone."""
    def draws(capacity_lines: str, bw: str) -> list[tuple[float, float]]:
        text = _poisson_toml(capacity_lines, bw, "rtt_ms = {uniform = [20, 200]}")
        text = text.replace("buffer_pkts = 100", "buffer_pkts = 100\nloss = {uniform = [0, 0.1]}")
        sc = load_scenario(_write(tmp_path, text))
        return [(sp.rtt_ms[0], sp.loss) for sp in sc.sample(5, 4)]

    base = draws("", "bandwidth_mbps = 3.04")
    assert draws("period_s = 5", "bandwidth_mbps = 3.04") == base
    assert draws("", "bandwidth_mbps = 12") == base


def test_poisson_period_and_bdp_buffer(tmp_path: Path) -> None:
    text = _poisson_toml("period_s = 4").replace("buffer_pkts = 100", "buffer_bdp = 1")
    s = load_scenario(_write(tmp_path, text))
    assert s.link.capacity.period_s == 4.0
    sp = s.sample(0, 1)[0]
    assert 4000 <= sp.trace[-1] < 4100  # the first arrival at or past 4 s ends the period
    # 1 BDP at the trace's realised mean rate (as for file traces), 260 ms: about 66 packets
    bdp = mean_rate_bytes_per_s(sp.trace) * 0.26 / PACKET_BYTES
    assert sp.buffer_pkts == max(1, round(bdp))


def test_poisson_stamps_direct() -> None:
    rng = np.random.default_rng(0)
    st = capacity.poisson_stamps(rng, 1.2e6, 2.0)  # 800 packets/s for 2 s
    assert st[-1] >= 2000 and np.sum(st < 2000) == len(st) - 1
    assert len(st) == pytest.approx(1600, rel=0.1)
    slow = capacity.poisson_stamps(np.random.default_rng(1), 10.0, 0.001)  # 1/150 packets/s
    assert len(slow) >= 1  # always at least the opportunity that ends the period
    with pytest.raises(ValueError):
        capacity.poisson_stamps(rng, 0.0, 1.0)
    with pytest.raises(ValueError):
        capacity.poisson_stamps(rng, 1e6, float("nan"))


@pytest.mark.parametrize("cap_lines, bw, field, why", [
    ("period_s = 0", None, "link.capacity.period_s=0", "from 0.001 to 3600 s"),
    ("period_s = -5", None, "link.capacity.period_s=-5", "from 0.001 to 3600 s"),
    ("period_s = 1e9", None, "link.capacity.period_s=1000000000.0", "3600 s"),
    ('period_s = "30"', None, "link.capacity.period_s='30'", "must be a number"),
    ("period_s = true", None, "link.capacity.period_s=True", "must be a number"),
    ("rate_mbps = 3", None, "link.capacity.rate_mbps=3", "unknown key; allowed: kind, period_s"),
    ("", "", "link.bandwidth_mbps is missing", "mean rate of the poisson deliveries"),
    ("", "bandwidth_mbps = 0", "link.bandwidth_mbps=0", "> 0 Mbps"),
    ("period_s = 3600", "bandwidth_mbps = 100", "link.bandwidth_mbps=100",
     "shorter link.capacity.period_s"),
])
def test_bad_poisson_parameter_is_a_one_line_config_error(
        tmp_path: Path, cap_lines: str, bw: str | None, field: str, why: str) -> None:
    text = _poisson_toml(cap_lines, "bandwidth_mbps = 3.04" if bw is None else bw)
    with pytest.raises(ConfigError) as e:
        load_scenario(_write(tmp_path, text, "bad.toml"))
    msg = str(e.value)
    assert "\n" not in msg and "bad.toml: " in msg
    assert field in msg and why in msg, msg


def test_unknown_capacity_kind_lists_poisson(tmp_path: Path) -> None:
    text = _poisson_toml().replace('kind = "poisson"', 'kind = "poison"')
    with pytest.raises(ConfigError, match=r"link\.capacity\.kind='poison'.*poisson"):
        load_scenario(_write(tmp_path, text))


def test_poisson_link_runs_end_to_end() -> None:
    """The generated trace plans, compiles and runs; the link's capacity is the trace's."""
    from ccjax.api import simulate

    s = load_scenario("auto-cellular")
    sp = s.sample(0, 1)[0]
    res = simulate([sp], cc="cubic", duration_s=3.0)
    summ = res.summary(0)
    st = sp.trace
    served_3s = np.sum(st < 3000) * PACKET_BYTES * 8 / 3.0 / 1e6  # the first 3 s's capacity
    assert summ["link"]["capacity_mbps"] == pytest.approx(served_3s, rel=0.02)
    assert 0.05 < summ["link"]["utilization"] <= 1.0


# ---------------------------------------------------------------------------------------------
# auto-random-loss, auto-fairness


def test_random_loss_draws_the_paper_points_including_8_percent() -> None:
    s = load_scenario("auto-random-loss")
    losses = {sp.loss for sp in s.sample(0, 200)}
    assert 0.08 in losses and 0.0 in losses  # exactly, not approached by a uniform draw
    assert losses == {i / 100 for i in range(9)}
    sp = s.sample(0, 1)[0]
    assert sp.bandwidth_mbps == (12.0,) and sp.rtt_ms == (200.0,) and sp.buffer_pkts == 200


def test_fairness_dumbbell() -> None:
    s = load_scenario("auto-fairness")
    assert s.duration_s == 30 and s.max_flows == 2
    for sp in s.sample(0, 3):
        assert sp.n_flows == 2 and sp.bandwidth_mbps == (20.0,) and sp.trace is None
        assert sp.rtt_ms == (100.0, 100.0) and sp.buffer_pkts == 200 and sp.loss == 0.0
        assert sp.start_s == (0.0, 0.0) and sp.stop_s is None
