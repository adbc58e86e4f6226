"""The ns-3 reference dumbbell (``sims/ns3/dumbbell.cc`` through ``ccjax.ns3``) on its own.

Before ns-3 can judge ccjax, its own numbers must be physically consistent. Short runs (3 to 60
simulated seconds, each test a few seconds of wall time once the program is built) check that
one NewReno flow fills the link with a queueing delay the buffer bounds, that nothing is dropped
when the buffer cannot overflow, that random loss is measured at its rate, that equal flows share
and that a shorter RTT wins, and that every run obeys the same accounting identities.

ns-3 must be installed (``apt-get install libns3-dev libgsl-dev``, ns-3.37); without it every
test here fails with that message. They never skip: CI installs ns-3.
"""

from __future__ import annotations

import json
import math
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from ccjax import ns3
from ccjax.errors import ConfigError

PKT_BITS = 1500 * 8
PAYLOAD_RATIO = 1448 / 1500


def _require_ns3() -> None:
    if not ns3.available():
        pytest.fail("ns-3 is not installed: install with `apt-get install libns3-dev "
                    "libgsl-dev` (these tests need it; they do not skip)", pytrace=False)


def _run(*args, **kw) -> dict:
    """``ns3.run_dumbbell``, failing the test (not erroring it) when ns-3 is missing."""
    _require_ns3()
    return ns3.run_dumbbell(*args, **kw)


def _bdp_pkts(bw_mbps: float, rtt_ms: float) -> float:
    return bw_mbps * 1e6 * rtt_ms * 1e-3 / PKT_BITS


def _jain(x: list[float]) -> float:
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x))


def _check_physics(res: dict) -> None:
    """Identities and bounds every run must satisfy."""
    link, cfg, flows = res["link"], res["config"], res["flows"]
    cap = link["capacity_mbps"]
    buf = link["buffer_pkts"]
    pkt_ms = PKT_BITS / (cap * 1e6) * 1e3
    measured = cfg["duration_s"] - cfg["warmup_s"]
    jitter_ms = link["jitter_us"] * 1e-3

    assert link["other_drops"] == 0  # the bottleneck is the only queue that drops
    assert 0.0 <= link["utilization"] <= 1.0 + 1e-3
    # the same packets counted leaving A and arriving at B: they differ by what is on the
    # bottleneck wire at the window's edges, and (egress loss) by the packets lost after it
    delivered_mbps = sum(f["throughput_mbps"] * f["active_s"] for f in flows) / measured
    lost_on_link = link["random_losses"] * PKT_BITS / 1e6 / measured if cfg["loss_at"] == \
        "egress" else 0.0
    edge = 2 * cap * link["btl_delay_ms"] * 1e-3 / measured + 2 * PKT_BITS / 1e6 / measured
    assert abs(link["utilization"] * cap - lost_on_link - delivered_mbps) <= edge + 1e-3 * cap
    # queueing delay (waiting, without the packet's own transmission) is bounded by the buffer
    assert 0.0 <= link["mean_queue_delay_ms"] <= link["max_queue_delay_ms"] + 1e-9
    assert link["max_queue_delay_ms"] <= buf * pkt_ms + 1e-6
    assert 0.0 <= link["drop_rate"] <= 1.0
    assert link["pkts_offered"] == sum(f["pkts_offered"] for f in flows)
    assert link["queue_drops"] == sum(f["queue_drops"] for f in flows)
    assert link["random_losses"] == sum(f["random_losses"] for f in flows)
    for f in flows:
        if f["active_s"] <= 0 or f["rtt_samples"] == 0:
            continue
        base = f["base_rtt_ms"]
        # every packet pays at least its transmission at the bottleneck; at most the full buffer,
        # the jitter, its own and its ACK's transmissions (1 ms is a generous bound on the latter)
        assert f["min_rtt_ms"] >= base + pkt_ms - 1e-6
        assert f["min_rtt_ms"] <= f["mean_rtt_ms"] <= f["max_rtt_ms"]
        assert f["min_rtt_ms"] <= f["p95_rtt_ms"] <= f["max_rtt_ms"]
        assert f["max_rtt_ms"] <= base + (buf + 1) * pkt_ms + jitter_ms + 1.0
        assert 0.0 <= f["loss_rate"] <= 1.0
        assert f["goodput_mbps"] <= f["throughput_mbps"] * PAYLOAD_RATIO * 1.001 + 1e-6
        assert f["throughput_mbps"] <= cap * (1 + 1e-3) + PKT_BITS / 1e6 / f["active_s"]
        assert len(f["throughput_series_mbps"]) == math.ceil(
            cfg["duration_s"] / cfg["interval_s"] - 1e-9)


def test_one_newreno_flow_fills_the_link():
    bw, rtt = 10.0, 40.0
    buf = math.ceil(_bdp_pkts(bw, rtt))  # 1 BDP
    res = _run(1, bw, rtt, buf, 0.0, "newreno", 10.0)
    _check_physics(res)
    f, link = res["flows"][0], res["link"]
    assert link["utilization"] > 0.85
    assert 0.0 < link["mean_queue_delay_ms"] <= buf * PKT_BITS / (bw * 1e6) * 1e3
    assert f["mean_rtt_ms"] >= rtt
    assert f["throughput_mbps"] == pytest.approx(link["utilization"] * bw, rel=0.02)
    # 1448 of every 1500 bytes are payload; retransmissions count only in throughput
    assert f["goodput_mbps"] == pytest.approx(f["throughput_mbps"] * PAYLOAD_RATIO, rel=0.02)
    assert f["retransmissions"] == f["queue_drops"]  # every drop repaired once, none spurious
    assert res["sim"]["simulator"] == "ns-3.37"


def test_no_drops_when_the_buffer_cannot_overflow():
    # A window flow's queue grows at most at the capacity (slow start sends two packets per ACK,
    # one of which the link serves), so a buffer of capacity x duration + the initial window
    # cannot overflow within the run, and nothing may be lost or retransmitted.
    bw, rtt, duration = 10.0, 40.0, 3.0
    buf = math.ceil(bw * 1e6 / PKT_BITS * duration) + 10 + 1
    res = _run(1, bw, rtt, buf, 0.0, "newreno", duration)
    _check_physics(res)
    f, link = res["flows"][0], res["link"]
    assert link["queue_drops"] == 0 and link["drop_rate"] == 0.0
    assert f["loss_rate"] == 0.0 and f["retransmissions"] == 0
    assert link["max_queue_delay_ms"] > 10 * _bdp_pkts(bw, rtt)  # the queue did grow


def test_vegas_keeps_a_small_queue_and_no_drops():
    # Vegas (alpha=2, beta=4 packets in the queue) never fills a 4-BDP buffer
    bw, rtt = 10.0, 40.0
    buf = 4 * math.ceil(_bdp_pkts(bw, rtt))
    res = _run(1, bw, rtt, buf, 0.0, "vegas", 10.0, warmup_s=2.0)
    _check_physics(res)
    link = res["link"]
    assert link["queue_drops"] == 0
    assert link["utilization"] > 0.95
    assert link["mean_queue_delay_ms"] <= 5 * PKT_BITS / (bw * 1e6) * 1e3


def test_random_loss_is_measured_at_its_rate():
    # 4-BDP buffer: the lossy flow's window never reaches it, so the random loss is all there is
    bw, rtt, p = 10.0, 40.0, 0.01
    buf = 4 * math.ceil(_bdp_pkts(bw, rtt))
    res = _run(1, bw, rtt, buf, p, "newreno", 30.0, warmup_s=2.0, seed=1)
    _check_physics(res)
    f, link = res["flows"][0], res["link"]
    assert f["pkts_offered"] > 3000  # enough packets for a rate
    assert p / 1.5 <= f["random_losses"] / f["pkts_offered"] <= p * 1.5
    assert p / 1.5 <= f["loss_rate"] <= p * 1.5
    assert link["drop_rate"] == pytest.approx(f["loss_rate"])
    # Mathis et al.: rate ~ 1.22 MSS / (RTT sqrt(p)), about 3.5 Mbps here; far below capacity
    assert 2.0 < f["goodput_mbps"] < 6.0
    # Loss episodes are counted: at most one per lost packet, and most losses start one (the
    # window is ~10 packets, so two losses seldom share a window); every loss is retransmitted.
    assert 0.5 * f["random_losses"] <= f["recoveries"] <= f["random_losses"]
    assert f["retransmissions"] >= f["random_losses"]
    assert 0 <= f["timeouts"] < f["recoveries"]


def test_random_loss_after_the_link_uses_capacity():
    bw, rtt, p = 10.0, 40.0, 0.01
    buf = 4 * math.ceil(_bdp_pkts(bw, rtt))
    res = _run(1, bw, rtt, buf, p, "newreno", 20.0, loss_at="egress", seed=1)
    _check_physics(res)
    link = res["link"]
    assert link["random_losses"] > 0
    # lost packets crossed the link: utilization exceeds what was delivered
    assert link["utilization"] * bw > res["flows"][0]["throughput_mbps"]


def test_two_equal_flows_share_fairly():
    bw, rtt = 10.0, 40.0
    buf = math.ceil(_bdp_pkts(bw, rtt))
    res = _run(2, bw, rtt, buf, 0.0, "newreno", 20.0)
    _check_physics(res)
    thr = [f["throughput_mbps"] for f in res["flows"]]
    assert _jain(thr) > 0.9
    assert res["link"]["utilization"] > 0.9


def test_shorter_rtt_gets_more_newreno():
    res = _run(2, 10.0, [20.0, 80.0], 17, 0.0, "newreno", 30.0, warmup_s=5.0)
    _check_physics(res)
    short, long_ = (f["throughput_mbps"] for f in res["flows"])
    assert short > 1.5 * long_


def test_shorter_rtt_gets_more_cubic():
    # CUBIC's window growth does not depend on the RTT, so its RTT unfairness is mild (theory:
    # throughput ~ RTT^-1/4 at equal loss rates) and a single run's shares swing with its
    # slow (tens of seconds) oscillation: average the 20 ms flow's share over four seeds. The
    # buffer is one BDP of the 20 ms flow (17 packets); with one BDP of the 80 ms flow the
    # standing queue evens the RTTs and ns-3's shares come out about equal.
    def share(seed: int) -> float:
        res = _run(2, 10.0, [20.0, 80.0], 17, 0.0, "cubic", 60.0, warmup_s=5.0,
                               seed=seed, interval_s=1.0)
        _check_physics(res)
        a, b = (f["throughput_mbps"] for f in res["flows"])
        return a / (a + b)

    _require_ns3()
    with ThreadPoolExecutor(max_workers=2) as ex:
        shares = list(ex.map(share, range(4)))
    assert sum(shares) / len(shares) > 0.53, shares


def test_bbr_single_flow_fills_the_link_with_a_small_queue():
    bw, rtt = 10.0, 40.0
    buf = math.ceil(_bdp_pkts(bw, rtt))
    res = _run(1, bw, rtt, buf, 0.0, "bbr", 25.0, warmup_s=5.0)
    _check_physics(res)
    link = res["link"]
    assert link["utilization"] > 0.93  # ProbeRTT costs ~2 % (200 ms at 4 packets every 10 s)
    assert link["mean_queue_delay_ms"] < 0.5 * buf * PKT_BITS / (bw * 1e6) * 1e3
    assert link["queue_drops"] == 0


def test_a_stopped_flow_stops_sending():
    res = _run(2, 10.0, 40.0, 34, 0.0, "newreno", 10.0, start_s=[0.0, 2.0],
                           stop_s=[5.0, 10.0], interval_s=0.5)
    _check_physics(res)
    first, second = res["flows"]
    assert first["active_s"] == pytest.approx(5.0) and second["active_s"] == pytest.approx(8.0)
    assert max(first["throughput_series_mbps"][12:]) == 0.0  # nothing after 6 s
    assert max(second["throughput_series_mbps"][:4]) == 0.0  # nothing before 2 s
    assert sum(second["throughput_series_mbps"][14:]) / 6 > 0.9 * 10.0  # then it has the link


def test_same_seed_same_run():
    kw = dict(flows=2, bw_mbps=10.0, rtt_ms=[30.0, 50.0], buffer_pkts=20, loss=0.005,
              cc=["cubic", "newreno"], duration_s=5.0, seed=7)
    a, b = _run(**kw), _run(**kw)
    assert a["flows"] == b["flows"]
    assert a["link"] == b["link"]
    c = _run(**{**kw, "seed": 8})
    assert c["flows"] != a["flows"]


def test_build_is_cached(monkeypatch):
    monkeypatch.delenv(ns3.PROGRAM_ENV, raising=False)
    _require_ns3()
    path = ns3.build()
    assert ns3.build() == path == ns3.binary_path()
    assert path.parent.name.startswith("dumbbell-")


def test_a_bundled_program_runs_the_same_dumbbell_where_ns3_is_not_installed(tmp_path,
                                                                             monkeypatch):
    """``ns3.bundle`` copies the program with every library it loads; through its own loader it
    needs nothing of the host's (run here with no environment and no library path), and
    ``$CCJAX_NS3_PROGRAM`` makes ``run_dumbbell`` use it, also through a link or a relative
    name and with a host preload set: the same run, bit for bit."""
    monkeypatch.delenv(ns3.PROGRAM_ENV, raising=False)
    _require_ns3()
    kw = dict(flows=2, bw_mbps=10.0, rtt_ms=[20.0, 100.0], buffer_pkts=40, loss=0.01,
              cc="cubic", duration_s=4.0, seed=3)
    built = ns3.run_dumbbell(**kw)
    prog = ns3.bundle(tmp_path / "b")
    libs = {p.name for p in (tmp_path / "b" / "lib").iterdir()}
    assert {"libns3-core.so.37", "libns3-internet.so.37", "libc.so.6"} <= libs
    assert any(n.startswith("ld-linux") for n in libs)
    assert prog.is_absolute() and not any(p.name.startswith(".b-") for p in tmp_path.iterdir())
    bare = subprocess.run(["/bin/sh", str(prog), "--flows=1", "--bwMbps=10", "--rttMs=40",
                           "--durationS=1", "--cc=TcpNewReno"], env={}, capture_output=True,
                          text=True, timeout=60)
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["link"]["utilization"] > 0.5

    monkeypatch.setenv(ns3.PROGRAM_ENV, str(prog))
    assert ns3.available() and ns3.build() == prog
    bundled = ns3.run_dumbbell(**kw)
    assert bundled["sim"]["argv"][0] == str(prog)
    assert bundled["flows"] == built["flows"] and bundled["link"] == built["link"]
    with pytest.raises(ConfigError, match="force=True is invalid"):
        ns3.build(force=True)

    # through a link in another folder, named relative to the working folder, with a preload
    # the bundled C library could not load: the wrapper finds its own folder and drops it
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "dumbbell").symlink_to(prog)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ns3.PROGRAM_ENV, "bin/dumbbell")
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/libpreload.so")
    assert ns3.build() == prog
    linked = ns3.run_dumbbell(**kw)
    assert linked["flows"] == built["flows"] and linked["link"] == built["link"]
    monkeypatch.delenv("LD_PRELOAD")

    # a bundle of another dumbbell.cc, of another machine type or without its record is
    # refused, before anything runs
    record = tmp_path / "b" / ns3.SOURCE_HASH_FILE
    machine = record.read_text().split()[1]
    for text, why in [("0" * 64 + f"\n{machine}\n", "built from another dumbbell.cc"),
                      (f"{ns3.source_sha256()}\nriscv128\n", "built for riscv128"),
                      (None, "no dumbbell.source-sha256 beside it")]:
        if text is None:
            record.unlink()
        else:
            record.write_text(text)
        assert not ns3.available()
        with pytest.raises(ConfigError, match=why):
            ns3.run_dumbbell(**kw)


@pytest.mark.parametrize("text, files", [
    # Debian 12
    ("\tlinux-vdso.so.1 (0x00007ffd3b5f2000)\n"
     "\tlibns3-core.so.37 => /lib/x86_64-linux-gnu/libns3-core.so.37 (0x00007f1)\n"
     "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n"
     "\t/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n",
     [("/lib64/ld-linux-x86-64.so.2", "ld-linux-x86-64.so.2"),
      ("/lib/x86_64-linux-gnu/libns3-core.so.37", "libns3-core.so.37"),
      ("/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6")]),
    # Arch and Fedora name the loader's file; an old vdso line has an empty target; a folder
    # with a space
    ("\tlinux-vdso.so.1 =>  (0x00007ffd3b5f2000)\n"
     "\tlibgsl.so.27 => /opt/my ns3/lib/libgsl.so.27 (0x00007f1)\n"
     "\t/lib64/ld-linux-x86-64.so.2 => /usr/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n",
     [("/usr/lib64/ld-linux-x86-64.so.2", "ld-linux-x86-64.so.2"),
      ("/opt/my ns3/lib/libgsl.so.27", "libgsl.so.27")]),
])
def test_ldd_output_gives_the_loader_first_and_each_library_by_its_soname(text, files):
    assert ns3.parse_ldd(text) == [(Path(p), n) for p, n in files]


@pytest.mark.parametrize("text, why", [
    ("\tlibns3-core.so.37 => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x1)\n",
     "ldd finds no libns3-core.so.37"),
    ("\tnot a dynamic executable\n", "names no ELF loader"),
    ("\tstatically linked\n", "names no ELF loader"),
])
def test_ldd_output_that_cannot_be_bundled_is_one_line(text, why):
    with pytest.raises(ConfigError, match=why) as e:
        ns3.parse_ldd(text, "prog")
    assert "\n" not in str(e.value)


def test_a_missing_prebuilt_program_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv(ns3.PROGRAM_ENV, str(tmp_path / "nothing"))
    assert not ns3.available()
    with pytest.raises(ConfigError, match=f"{ns3.PROGRAM_ENV}=.*not an executable file"):
        ns3.build()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    monkeypatch.delenv(ns3.PROGRAM_ENV)
    with pytest.raises(ConfigError, match="dest=.*does not exist yet or is empty"):
        ns3.bundle(tmp_path / "full")


@pytest.mark.parametrize("kw", [
    dict(flows=0),
    dict(rtt_ms=[20.0, 40.0, 60.0]),
    dict(loss=1.0),
    dict(cc="reno2"),
    dict(warmup_s=5.0),
    dict(buffer_pkts=0),
    dict(buffer_pkts=33.5),
    dict(bw_mbps=-1.0),
    dict(start_s=[0.0, 6.0]),
    dict(interval_s=0.0),
])
def test_invalid_input_is_a_config_error(kw):
    base = dict(flows=2, bw_mbps=10.0, rtt_ms=40.0, buffer_pkts=34, loss=0.0, cc="newreno",
                duration_s=5.0)
    with pytest.raises(ConfigError):
        ns3.run_dumbbell(**{**base, **kw})


def test_ccjax_validate_runs_one_dumbbell_in_both_simulators(capsys):
    """``ccjax validate``: ns-3 with each seed and ccjax with its seeds on the user's dumbbell,
    compared as the report compares; the verdict decides the exit status."""
    from ccjax import validation as v
    from ccjax.cli import main

    _require_ns3()
    code = main(["validate", "--cc", "newreno", "--bw-mbps", "10", "--rtt-ms", "40",
                 "--buffer-bdp", "1", "--duration-s", "5", "--ccjax-seeds", "2", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert d["scenario"] == {"cc": "newreno", "flows": 1, "bw_mbps": 10.0, "rtt_ms": [40.0],
                             "buffer_bdp": 1.0, "loss": 0.0, "duration_s": 5.0}
    assert d["ns3_seeds"] == [1, 2] and d["ccjax_seeds"] == 2 and d["model"] == "packet"
    assert set(d["checks"]) == {"utilization", "queue delay", "jain", "rtt unfairness", "loss"}
    assert d["ok"] == all(d["checks"].values()) and code == (0 if d["ok"] else 1)
    # one NewReno flow fills a 1-BDP link in both, within the tolerances (measured: 0.977
    # against 0.986)
    assert d["ns3"]["utilization"] > 0.95 and d["ccjax"]["utilization"] > 0.95 and d["ok"]
    # the reference is ns-3's two runs of this scenario, averaged
    runs = v.run_ns3_seeds([v.scenario_from_flags("newreno", 1, 10.0, [40.0], 1.0, 0.0, 5.0)],
                           (1, 2))[0]
    assert d["ns3"]["utilization"] == pytest.approx(np.mean([r.utilization for r in runs]))
    lo, hi = d["tolerance"]["loss"]
    assert lo == pytest.approx(min(r.loss_rate for r in runs) / 2)
    assert hi == pytest.approx(max(r.loss_rate for r in runs) * 2)
