"""The command line: output shapes, plots, and one-line errors with exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ccjax.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code, err, *words):
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("ccjax: error:")
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_simulate_json_shape(capsys, tmp_path):
    png, pdf = tmp_path / "run.png", tmp_path / "run.pdf"
    code, out, _ = _run(capsys, "simulate", "--json", "--duration-s", "2", "--flows", "2",
                        "--rtt-ms", "20,60", "--start-s", "0,0.5", "--rate-mbps", "5,9",
                        "--model", "fluid", "--plot", str(png))
    assert code == 0
    d = json.loads(out)
    assert set(d) >= {"flows", "link", "sim"}
    assert len(d["flows"]) == 2
    for f in d["flows"]:
        for k in ("goodput_mbps", "throughput_mbps", "mean_rtt_ms", "p95_rtt_ms", "loss_rate",
                  "throughput_series_mbps"):
            assert k in f
        assert len(f["throughput_series_mbps"]) == 20  # 2 s at the 0.1 s default interval
    assert d["flows"][0]["mean_rtt_ms"] >= 20.0 and d["flows"][1]["mean_rtt_ms"] >= 60.0
    for k in ("utilization", "mean_queue_delay_ms", "drop_rate"):
        assert 0 <= d["link"][k]
    assert d["sim"]["model"] == "fluid" and d["sim"]["ticks"] == 2000
    assert d["sim"]["wall_s"] > 0 and d["sim"]["compile_s"] > 0
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    code, _, _ = _run(capsys, "simulate", "--duration-s", "1", "--plot", str(pdf))
    assert code == 0 and pdf.read_bytes()[:4] == b"%PDF"


def test_simulate_every_controller_on_one_link(capsys):
    """``--cc`` with one name per flow: every controller shares one link (a Mix)."""
    names = ["const", "newreno", "cubic", "vegas", "bbr", "copa", "vivace"]
    code, out, _ = _run(capsys, "simulate", "--json", "--duration-s", "10", "--flows", "7",
                        "--cc", ",".join(names), "--bw-mbps", "50", "--rate-mbps", "2",
                        "--start-s", "0")
    assert code == 0
    d = json.loads(out)
    assert [f["cc"] for f in d["flows"]] == names
    assert d["link"]["utilization"] > 0.9
    for f in d["flows"]:
        assert f["throughput_mbps"] > 0.1 and np.isfinite(f["mean_rtt_ms"])
    assert d["flows"][0]["throughput_mbps"] == pytest.approx(2.0, rel=0.1)  # const at 2 Mbps
    code, _, err = _run(capsys, "simulate", "--cc", "reno", "--duration-s", "1")
    _one_line_error(code, err, "cc")
    assert "newreno" in err and "vivace" in err  # lists what is allowed


def test_simulate_retx_loss_flag(capsys):
    """``--retx-loss`` runs in the packet model and is a one-line error with the fluid one."""
    args = ("simulate", "--json", "--duration-s", "3", "--flows", "1", "--cc", "newreno",
            "--loss", "0.05")
    code, out, _ = _run(capsys, *args, "--retx-loss")
    assert code == 0 and json.loads(out)["flows"][0]["throughput_mbps"] > 0
    code, _, err = _run(capsys, *args, "--retx-loss", "--model", "fluid")
    _one_line_error(code, err, "retx_loss", "packet")


def test_simulate_recovery_flag(capsys):
    """``--recovery prr`` runs with ACK-clocked window senders and is a one-line error with
    paced ones (the default), before anything runs."""
    args = ("simulate", "--json", "--duration-s", "3", "--flows", "2", "--cc", "newreno",
            "--buffer-pkts", "8", "--recovery", "prr")
    code, out, _ = _run(capsys, *args, "--window-sender", "ack-clocked", "--retx-loss")
    d = json.loads(out)
    assert code == 0 and d["link"]["utilization"] > 0.5
    assert (d["sim"]["window_sender"], d["sim"]["recovery"], d["sim"]["retx_loss"]) == (
        "ack-clocked", "prr", True)
    code, _, err = _run(capsys, *args)
    _one_line_error(code, err, "recovery", "ack-clocked")


def test_simulate_scenario_batch(capsys):
    code, out, _ = _run(capsys, "simulate", "--scenario", "mocc-train", "--links", "3",
                        "--duration-s", "1", "--json", "--rate-mbps", "2")
    assert code == 0
    d = json.loads(out)
    assert d["scenario"] == "mocc-train" and len(d["batch"]) == 3


def test_simulate_table(capsys):
    code, out, _ = _run(capsys, "simulate", "--duration-s", "1")
    assert code == 0 and "utilization" in out and "throughput" in out


@pytest.mark.parametrize("argv,words", [
    (["--bw-mbps", "-5"], ["bw_mbps", "> 0"]),
    (["--flows", "5", "--max-flows", "4"], ["flows=5", "max_flows=4"]),
    (["--scenario", "no-such-scenario"], ["no-such-scenario", "mocc-train"]),
    (["--loss", "1.5"], ["loss", "[0, 1)"]),
    (["--rtt-ms", "10,20,30", "--flows", "2"], ["rtt_ms"]),
    (["--model", "quantum"], ["model"]),
    (["--rate-mbps", "fast"], ["rate_mbps"]),
    (["--cc", "warp"], ["cc", "const"]),
    (["--plot", "out.gif"], ["plot", ".png"]),
    (["--duration-s", "0"], ["duration_s"]),
    # no list item is dropped, nothing is clamped or ignored, a flow must start within the run
    (["--cc", "cubic,,bbr"], ["cc=", "empty items"]),
    (["--rtt-ms", "40,"], ["rtt_ms=", "empty items"]),
    (["--start-s", "0,30", "--duration-s", "5"], ["start_s=30", "flow 1", "5 s"]),
    (["--stop-s", "nan"], ["stop_s"]),
    (["--seed", "4294967296"], ["seed=4294967296", "2**32"]),
    (["--series-interval-s", "5", "--duration-s", "1"], ["series_interval_s", "duration"]),
    (["--scenario", "dumbbell", "--loss", "0.1"], ["--loss", "--scenario"]),
    (["--cc", "cubic", "--rate-mbps", "5"], ["--rate-mbps", "const"]),
    (["--rtt-ms", "1e9"], ["rtt_ms", "100000 ms"]),
    (["--tick-ms", "nan"], ["tick_ms=nan"]),
    (["--max-flows", "0"], ["max_flows=0"]),
    (["--plot", ""], ["plot=''", ".png"]),
    (["--access-ms", "-1"], ["access_ms=-1", "at most half"]),
    (["--access-ms", "30", "--rtt-ms", "40"], ["access_ms=30", "20 ms"]),
    (["--access-ms", "1,2,3", "--flows", "2"], ["access_ms=", "one per flow"]),
    (["--scenario", "dumbbell", "--handshake"], ["--handshake", "--scenario"]),
    (["--jitter-ms", "-1"], ["jitter_ms=-1", "below the shortest RTT"]),
    (["--jitter-ms", "25", "--rtt-ms", "20,40"], ["jitter_ms=25", "20 ms"]),
    (["--scenario", "dumbbell", "--jitter-ms", "1"], ["--jitter-ms", "--scenario"]),
])
def test_simulate_invalid_input(capsys, argv, words):
    code, _, err = _run(capsys, "simulate", *argv)
    _one_line_error(code, err, *words)


def test_simulate_handshake_and_access_delay(capsys):
    # data meets the queue access_ms after its start, and one base RTT later with the handshake
    for extra, starts in (([], [0.0, 0.5]), (["--handshake"], [0.04, 0.58]),
                          (["--handshake", "--access-ms", "5,10"], [0.045, 0.59])):
        code, out, _ = _run(capsys, "simulate", "--json", "--cc", "newreno", "--duration-s", "1",
                            "--start-s", "0,0.5", "--rtt-ms", "40,80", "--bw-mbps", "10", *extra)
        assert code == 0, extra
        flows = json.loads(out)["flows"]
        assert [f["start_s"] for f in flows] == pytest.approx(starts), extra
        assert all(f["delivered_bytes"] > 0 for f in flows)


def test_simulate_jitter_adds_its_mean_to_the_rtt(capsys):
    # one constant-rate flow at half the link: the mean RTT is the propagation RTT, the
    # packet's transmission (1.2 ms at 10 Mbps), what the pacer's bunching queues (the same
    # packets in both runs) and the jitter's mean
    rtts = []
    for extra in ([], ["--jitter-ms", "1.2"]):
        code, out, _ = _run(capsys, "simulate", "--json", "--cc", "const", "--rate-mbps", "5",
                            "--flows", "1", "--bw-mbps", "10", "--duration-s", "1", *extra)
        assert code == 0, extra
        rtts.append(json.loads(out)["flows"][0]["mean_rtt_ms"])
    assert rtts[0] >= 41.2
    assert rtts[1] - rtts[0] == pytest.approx(0.6, abs=1e-3)


def test_simulate_flags_that_fit(capsys, tmp_path):
    # default start times fit a short run (every flow sends); one controller name per real
    # flow with spare compiled slots; a stop time of inf runs to the end
    code, out, _ = _run(capsys, "simulate", "--json", "--model", "fluid", "--duration-s", "1",
                        "--cc", "const,const", "--rate-mbps", "2,3", "--max-flows", "4",
                        "--stop-s", "inf,1e12")
    assert code == 0
    flows = json.loads(out)["flows"]
    assert [f["start_s"] for f in flows] == [0.0, 0.75]
    assert [f["stop_s"] for f in flows] == [None, None]  # never stops: null (JSON has no inf)
    assert all(f["delivered_bytes"] > 0 for f in flows)
    # a plot that cannot be written is refused before the run, in one line
    folder = tmp_path / "dir.png"
    folder.mkdir()
    for bad, word in ((folder, "folder"), (tmp_path / "f.txt" / "x.png", "not a folder")):
        (tmp_path / "f.txt").write_text("")
        code, out, err = _run(capsys, "simulate", "--duration-s", "1", "--plot", str(bad))
        _one_line_error(code, err, "plot=", word)
        assert out == ""
    # with a trace, the default buffer is one BDP at the trace's mean rate (2 packets per ms:
    # 24 Mbps, 40 ms: 80 packets), and --bw-mbps, which the trace replaces, is refused
    tr = tmp_path / "t.trace"
    tr.write_text("".join(f"{t}\n{t}\n" for t in range(1, 101)))
    from ccjax.api import link_from_flags
    from ccjax.sim.trace import load_mahimahi

    assert link_from_flags(flows=1, rtt_ms=[40.0], trace=load_mahimahi(tr)).buffer_pkts == 80
    code, _, err = _run(capsys, "simulate", "--trace", str(tr), "--bw-mbps", "5")
    _one_line_error(code, err, "--bw-mbps", "--trace")


def test_trace_errors(capsys, tmp_path):
    empty = tmp_path / "empty.trace"
    empty.write_text("")
    code, _, err = _run(capsys, "simulate", "--trace", str(empty))
    _one_line_error(code, err, "empty")
    dec = tmp_path / "dec.trace"
    dec.write_text("0\n5\n3\n")
    code, _, err = _run(capsys, "simulate", "--trace", str(dec))
    _one_line_error(code, err, "decrease")
    code, _, err = _run(capsys, "simulate", "--trace", str(tmp_path / "missing"))
    _one_line_error(code, err, "no such file")
    bad = tmp_path / "bad.trace"
    bad.write_text("0\nabc\n")
    code, _, err = _run(capsys, "simulate", "--trace", str(bad))
    _one_line_error(code, err, "line 2")


@pytest.mark.slow
def test_bench_json(capsys):
    code, out, _ = _run(capsys, "bench", "sim", "--batches", "1,4", "--models", "fluid",
                        "--duration-s", "0.5", "--ns3-duration-s", "2", "--json")
    assert code == 0
    d = json.loads(out)
    assert [(r["workload"], r["batch"]) for r in d["results"]] == [
        ("const", 1), ("const", 4), ("cubic", 1), ("cubic", 4)]
    for r in d["results"]:
        assert r["model"] == "fluid"
        assert r["env_steps_per_s"] > 0 and r["flow_ticks_per_s"] > 0 and r["compile_s"] > 0
    assert d["results"][2]["flows"] == 4
    # ns-3 on the same CUBIC dumbbell, and ccjax's rate against it (the largest batch run,
    # as 1024 is not among the batches here: the packet model was not run, so no ratio).
    n = d["ns3"]
    assert n["wall_s"] > 0 and n["flow_seconds_per_s"] > 0 and "ratio" not in n
    code, out, _ = _run(capsys, "bench", "sim", "--batches", "2", "--models", "packet",
                        "--duration-s", "0.5", "--workloads", "cubic", "--ns3-duration-s", "2",
                        "--json")
    d = json.loads(out)
    n = d["ns3"]
    # the ratio compares the same sender: ccjax runs ns-3's CUBIC (a row of its own), ns-3
    # gets the buffer less the packet on the wire (12 Mbps x 40 ms = 40 packets)
    assert [(r["workload"], r["batch"]) for r in d["results"]] == [("cubic", 2),
                                                                    ("cubic-ns3", 2)]
    same = d["results"][1]
    assert n["ccjax_batch"] == 2 and n["buffer_pkts"] == 39 and "--bufferPkts=39" in n["argv"]
    assert n["ccjax_flow_seconds_per_s"] == same["flow_seconds_per_s"]
    assert n["ratio"] == pytest.approx(n["ccjax_flow_seconds_per_s"] / n["flow_seconds_per_s"])
    assert n["default_cubic_ratio"] == pytest.approx(
        d["results"][0]["flow_seconds_per_s"] / n["flow_seconds_per_s"])
    assert d["machine"]["processor"] and d["repeats"] == 2


def test_bench_invalid(capsys):
    code, _, err = _run(capsys, "bench", "sim", "--batches", "0")
    _one_line_error(code, err, "batches")
    code, _, err = _run(capsys, "bench", "everything")
    _one_line_error(code, err, "bench")
    # another benchmark's flags are refused, not ignored; bad lists and numbers are one line
    for argv, words in ((["sim", "--trials", "0", "--shard"], ["--trials", "--shard", "sim"]),
                        (["train", "--models", "fluid"], ["--models", "train"]),
                        (["train", "--batches", "64,128"], ["batches"]),
                        (["sim", "--models", ","], ["models=", "empty items"]),
                        (["sim", "--batches", "abc"], ["batches='abc'", "integer"]),
                        (["sim", "--duration-s", "inf"], ["duration_s=inf", "finite"])):
        code, _, err = _run(capsys, "bench", *argv)
        _one_line_error(code, err, *words)


def _fake_validation(monkeypatch, got_util: float):
    """``validation.run_ns3``/``run_ccjax`` replaced by fixed figures: the CLI's verdict, table
    and exit status without running either simulator."""
    from ccjax import validation as v

    ref = v.Measured(0.95, 10.0, 0.010, [5.0, 4.0])
    spread = v.Spread(0.01, 0.5, 0.02, 0.009, 0.011)
    monkeypatch.setattr(v, "run_ns3", lambda sc, seeds, workers, **kw: [(ref, spread)])
    monkeypatch.setattr(v, "run_ccjax", lambda sc, model, seeds: [
        v.Measured(got_util, 10.5, 0.012, [5.0, 4.0])])


def test_validate_exit_status_and_table_follow_the_verdict(capsys, monkeypatch):
    args = ("validate", "--cc", "cubic", "--flows", "2", "--rtt-ms", "20,80")
    _fake_validation(monkeypatch, 0.90)  # 0.05 below ns-3: 1.7 tolerances of 0.03
    code, out, _ = _run(capsys, *args)
    assert code == 1
    assert "no: utilization 1.7 tol" in out and "outside: utilization 1.7 tol" in out
    assert "0.0045-0.0220" in out  # the loss range allowed: half the lowest seed, twice the top
    assert "RTT unfairness" in out  # unequal RTTs: the direction is checked
    _fake_validation(monkeypatch, 0.96)
    code, out, _ = _run(capsys, *args, "--json")
    d = json.loads(out)
    assert code == 0 and d["ok"] and d["outside"] == []
    assert d["tolerance"]["utilization"] == pytest.approx(0.03)
    assert d["tolerance"]["queue delay"] == pytest.approx(3.0)  # 15 % of 10 ms is less


@pytest.mark.parametrize("argv,words", [
    (["--cc", "bbr"], ["cc", "newreno, cubic, vegas"]),
    (["--flows", "2", "--rtt-ms", "20,40,60"], ["rtt_ms", "one per flow"]),
    (["--loss", "1"], ["loss", "[0, 1)"]),
    (["--buffer-bdp", "0"], ["buffer_bdp"]),
    (["--duration-s", "0.5"], ["duration_s", ">= 1 s"]),
    (["--rtt-ms", "0.5"], ["rtt_ms", "1 ms"]),
    (["--ns3-seeds", "1,1"], ["ns3_seeds", "distinct"]),
    (["--ns3-seeds", "0"], ["ns3_seeds"]),
    (["--ccjax-seeds", "0"], ["ccjax_seeds"]),
    (["--flows", "5000"], ["flows", "4000"]),
    (["--buffer-bdp", "1e9"], ["buffer_bdp", "1e8"]),
    (["--ns3-seeds", "3000000000"], ["ns3_seeds", "2**31"]),
    (["--workers", "0"], ["workers"]),
    # ccjax runs validation at 1 ms ticks and would round what ns-3 gets exactly
    (["--rtt-ms", "40.5"], ["rtt_ms=40.5", "whole number of ms"]),
    (["--duration-s", "30.0005"], ["duration_s=30.0005", "whole number of ms"]),
    (["--plot", "out/v.txt"], ["plot='out/v.txt'", ".png"]),
    (["--plot", "/proc/v.png"], ["plot='/proc/v.png'"]),
])
def test_validate_invalid_input_is_one_line_before_anything_runs(capsys, monkeypatch, argv,
                                                                 words):
    from ccjax import validation as v

    def ran(*a, **k):
        raise AssertionError("a simulator ran")

    monkeypatch.setattr(v, "run_ns3", ran)
    monkeypatch.setattr(v, "run_ccjax", ran)
    code, _, err = _run(capsys, "validate", *argv)
    _one_line_error(code, err, *words)


def _series(thr: list[list[float]], queue: list[float], cwnd: list[list[float]] | None = None):
    from ccjax import validation as v

    return v.RunSeries(0.1, 0.25, np.asarray(thr, float), np.asarray(queue, float),
                       cwnd_pkts=None if cwnd is None else np.asarray(cwnd, float))


def test_validate_plot_draws_both_simulators_after_the_verdict(capsys, monkeypatch, tmp_path):
    from ccjax import validation as v
    from ccjax.plot import validation as pv

    ref = v.Measured(0.95, 10.0, 0.010, [5.0, 4.0],
                     series=_series([[6, 5, 4], [3, 4, 5]], [10, 20, 30]))
    spread = v.Spread(0.01, 0.5, 0.02, 0.009, 0.011)
    got = v.Measured(0.94, 10.5, 0.012, [5.0, 4.0],
                     series=_series([[7, 6, 5], [2, 3, 4]], [12, 22, 28]))
    monkeypatch.setattr(v, "run_ns3", lambda sc, seeds, workers, **kw: [(ref, spread)])
    monkeypatch.setattr(v, "run_ccjax", lambda sc, model, seeds: [got])
    figs = []
    real_save = pv.save

    def keep(fig, path):
        figs.append([[(ln.get_xdata(), ln.get_ydata(), ln.get_linestyle()) for ln in ax.lines]
                     for ax in fig.axes])
        return real_save(fig, path)

    monkeypatch.setattr(pv, "save", keep)
    out_png = tmp_path / "figs" / "v.png"
    code, out, _ = _run(capsys, "validate", "--flows", "2", "--rtt-ms", "20,80",
                        "--plot", str(out_png))
    assert code == 0
    assert out.index("within every tolerance") < out.index(f"plot written to {out_png}")
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    thr, share, jain, queue = figs[0]
    # per flow: ns-3 solid, then ccjax dashed, at the intervals' ends (the last one shorter)
    for f, side in ((0, 0), (0, 1), (1, 0), (1, 1)):
        x, y, style = thr[2 * f + side]
        want = (ref if side == 0 else got).series.throughput_mbps[f]
        np.testing.assert_allclose(x, [0.1, 0.2, 0.25])
        np.testing.assert_allclose(y, want)
        assert style == ("-" if side == 0 else "--")
    # all flows together (the utilization), after the flows' lines
    np.testing.assert_allclose(thr[4][1], [9, 9, 9])
    np.testing.assert_allclose(thr[5][1], [9, 9, 9])
    np.testing.assert_allclose(share[0][1][-1], (0.6 + 0.5 + 0.2) / (0.9 + 0.9 + 0.45))
    np.testing.assert_allclose(share[1][1][-1], (0.7 + 0.6 + 0.25) / (0.9 + 0.9 + 0.45))
    np.testing.assert_allclose(jain[0][1], ref.series.jain)
    np.testing.assert_allclose(jain[1][1], got.series.jain)
    assert jain[0][1][-1] == pytest.approx(
        (1.3 + 0.95) ** 2 / (2 * (1.3 ** 2 + 0.95 ** 2)))
    np.testing.assert_allclose(queue[0][1], [10, 20, 30])
    np.testing.assert_allclose(queue[1][1], [12, 22, 28])
    # --json keeps stdout one JSON object
    code, out, _ = _run(capsys, "validate", "--flows", "2", "--rtt-ms", "20,80", "--json",
                        "--plot", str(tmp_path / "v.pdf"))
    assert code == 0 and json.loads(out)["ok"]
    assert (tmp_path / "v.pdf").read_bytes()[:4] == b"%PDF"
    # with both sides' windows, a window panel below the throughput's: ns-3's, then ccjax's
    ref.series = _series([[6, 5, 4], [3, 4, 5]], [10, 20, 30], [[10, 20, 15], [np.nan, 10, 20]])
    got.series = _series([[7, 6, 5], [2, 3, 4]], [12, 22, 28], [[10, 30, 16], [10, 12, 18]])
    figs.clear()
    code, _, _ = _run(capsys, "validate", "--flows", "2", "--rtt-ms", "20,80", "--plot",
                      str(out_png))
    assert code == 0 and len(figs[0]) == 5
    cwnd = figs[0][1]
    for f, side in ((0, 0), (0, 1), (1, 0), (1, 1)):
        x, y, style = cwnd[2 * f + side]
        np.testing.assert_allclose(x, [0.1, 0.2, 0.25])
        np.testing.assert_allclose(y, (ref if side == 0 else got).series.cwnd_pkts[f])
        assert style == ("-" if side == 0 else "--")
    np.testing.assert_allclose(figs[0][2][0][1], share[0][1])  # the share panel follows


def test_validate_help_states_the_tolerances(capsys):
    code, out, _ = _run(capsys, "validate", "--help")
    text = " ".join(out.split())
    assert code == 0 and "within 15 % or 3 ms" in text and "%%" not in text
    assert "Exit status 0 when every check holds, 1 when one does not, 2 for invalid" in text


def test_validate_runs_ns3_cubic_with_the_reports_hystart_unless_asked(capsys, monkeypatch):
    """``ccjax validate --cc cubic`` runs ns-3's TcpCubic with HyStart's delay test alone, as
    the report does, and ``--ns3-hystart both`` with ns-3's default; the choice is in the table's
    title and the JSON. Another controller has no HyStart: the flag is refused before anything
    runs."""
    from ccjax import validation as v

    asked = []
    ref = v.Measured(0.95, 10.0, 0.010, [9.5])
    spread = v.Spread(0.01, 0.5, 0.02, 0.009, 0.011)

    def ns3(sc, seeds, workers, hystart_detect=None):
        asked.append(hystart_detect)
        return [(ref, spread)]

    monkeypatch.setattr(v, "run_ns3", ns3)
    monkeypatch.setattr(v, "run_ccjax", lambda sc, model, seeds: [
        v.Measured(0.95, 10.2, 0.011, [9.5])])
    code, out, _ = _run(capsys, "validate", "--cc", "cubic")
    assert code == 0 and "HyStart delay" in out
    code, out, _ = _run(capsys, "validate", "--cc", "cubic", "--ns3-hystart", "both", "--json")
    assert code == 0 and json.loads(out)["ns3_hystart"] == "both"
    assert asked == [v.NS3_HYSTART_DETECT, "both"] and v.NS3_HYSTART_DETECT == "delay"
    code, out, _ = _run(capsys, "validate", "--cc", "newreno", "--json")
    assert code == 0 and json.loads(out)["ns3_hystart"] is None

    def ran(*a, **k):
        raise AssertionError("a simulator ran")

    monkeypatch.setattr(v, "run_ns3", ran)
    code, _, err = _run(capsys, "validate", "--cc", "vegas", "--ns3-hystart", "both")
    _one_line_error(code, err, "ns3_hystart", "--cc cubic")


def test_validate_a_failure_of_ns3_is_one_line_and_status_3(capsys, monkeypatch):
    from ccjax import validation as v

    def crash(*a, **k):
        raise RuntimeError("ns-3 dumbbell exited with code 134: abort\nbacktrace ...")

    monkeypatch.setattr(v, "run_ns3", crash)
    code, out, err = _run(capsys, "validate", "--cc", "newreno")
    assert code == 3 and out == ""
    assert err.strip() == "ccjax: error: ns-3 failed: ns-3 dumbbell exited with code 134: abort"


def test_ns3_bundle_refuses_a_folder_with_files_in_one_line(capsys, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    code, out, err = _run(capsys, "ns3-bundle", str(tmp_path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "does not exist yet or is empty" in err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
    # a folder that cannot be made (under a file) is refused before anything builds
    code, out, err = _run(capsys, "ns3-bundle", str(tmp_path / "keep.txt" / "sub"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "keep.txt is not a writable folder" in err


def test_a_prebuilt_ns3_program_that_is_missing_stops_validate_before_it_runs(capsys, monkeypatch,
                                                                             tmp_path):
    from ccjax import validation as v

    monkeypatch.setenv("CCJAX_NS3_PROGRAM", str(tmp_path / "dumbbell"))
    monkeypatch.setattr(v, "run_ccjax", lambda *a, **k: pytest.fail("ccjax ran"))
    code, out, err = _run(capsys, "validate", "--cc", "newreno")
    assert code == 2 and out == ""
    assert err.startswith("ccjax: error: CCJAX_NS3_PROGRAM=") and "not an executable" in err


@pytest.fixture
def no_run(monkeypatch):
    """Every run replaced by a failure: an input check must answer before anything is planned,
    traced or compiled, and a missing check fails here at once instead of running."""
    from ccjax import api, bench, evaluate, ns3

    def ran(*a, **k):
        raise AssertionError("it ran: the input was not refused first")

    monkeypatch.setattr(api, "simulate", ran)
    monkeypatch.setattr(evaluate, "plan", ran)
    monkeypatch.setattr(bench, "bench_sim", ran)
    monkeypatch.setattr(ns3, "build", ran)


@pytest.mark.parametrize("argv,words", [
    # RTTs and durations are whole ticks, never rounded to them
    (["--rtt-ms", "40.4"], ["rtt_ms=40.4", "whole number of ticks", "--tick-ms 1 ms"]),
    (["--tick-ms", "50", "--rtt-ms", "40"], ["rtt_ms=40.0", "--tick-ms 50 ms"]),
    (["--rtt-ms", "2.5", "--flows", "1"], ["rtt_ms=2.5", "whole number of ticks"]),
    (["--tick-ms", "3", "--duration-s", "3"], ["rtt_ms=40.0", "the default", "--tick-ms 3 ms"]),
    (["--duration-s", "0.0025"], ["duration_s=0.0025", "whole number of ticks"]),
    (["--duration-s", "0.0005"], ["duration_s=0.0005", "at least one tick"]),
    (["--rtt-ms", "inf"], ["rtt_ms=inf", "at most 100000 ms"]),
    (["--flows", "5000"], ["error: flows=5000", "4096"]),
    (["--scenario", ""], ["scenario=''", "preset"]),
    # an option given twice is refused, not decided by its last value
    (["--flows", "1", "--flows", "3"], ["--flows", "more than once"]),
    (["--cc", "cubic", "--cc=bbr"], ["--cc", "more than once"]),
    (["--flow", "1", "--flows", "3"], ["--flows", "more than once"]),  # an abbreviation
    (["--json", "--json"], ["--json", "more than once"]),
    # a plot that cannot be created there fails before the run, even where root may write
    (["--plot", "/proc/x.png"], ["plot='/proc/x.png' is invalid"]),
    (["--plot", "/sys/x.png"], ["plot='/sys/x.png' is invalid"]),
    # the tick a Copa run refines to is the one RTTs must fill (50 Mbps: 0.2 ms ticks)
    (["--cc", "copa", "--flows", "1", "--bw-mbps", "50", "--tick-ms", "0.3", "--rtt-ms", "30.3",
      "--duration-s", "0.9"], ["rtt_ms=30.3", "the run's 0.2 ms tick", "--tick-ms 0.3 ms"]),
    # one explicit dumbbell: a list for more flows than it has would go to empty slots
    (["--flows", "2", "--max-flows", "3", "--cc", "const,const,cubic"], ["cc=", "2 flows"]),
    (["--flows", "2", "--max-flows", "3", "--rate-mbps", "1,2,3"], ["rate_mbps=", "2 flows"]),
])
def test_simulate_refuses_before_it_runs(capsys, no_run, argv, words):
    code, out, err = _run(capsys, "simulate", *argv)
    _one_line_error(code, err, *words)
    assert out == ""


def test_a_trace_that_is_no_text_a_folder_or_too_long_is_one_line(capsys, no_run, tmp_path):
    from ccjax.errors import ConfigError
    from ccjax.sim.trace import validate_stamps

    binary = tmp_path / "binary.trace"
    binary.write_bytes(b"0\n\xff\xfe1\n")
    for path, words in ((binary, ["line 2", "not ASCII text"]),
                        (tmp_path, ["a folder"])):
        code, _, err = _run(capsys, "simulate", "--flows", "1", "--trace", str(path))
        _one_line_error(code, err, "trace=", *words)
    # a period longer than a day is refused (it is held per millisecond), also past int64
    for stamp in ("99999999999999", "9" * 30):
        long = tmp_path / "long.trace"
        long.write_text(f"0\n{stamp}\n")
        code, _, err = _run(capsys, "simulate", "--flows", "1", "--trace", str(long))
        _one_line_error(code, err, "line 2", "86400000 ms")
    with pytest.raises(ConfigError, match="at most 86400000 ms"):
        validate_stamps(np.asarray([0, 10**14]))


@pytest.mark.parametrize("argv,words", [
    (["--cc", "cubic", "--tick-ms", "5000"], ["tick_ms=5000", "from 0.001 to 1000 ms"]),
    (["--cc", "cubic", "--duration-s", "0.0005"], ["duration_s=0.0005", "at least one tick"]),
    (["--cc", "cubic", "--duration-s", "1.0005"], ["duration_s=1.0005", "whole number"]),
    (["--cc", "cubic", "--seed", "1180591620717411303424"],
     ["seed=1180591620717411303424", "2**32 - 1"]),
    (["--cc", "cubic", "--init-rate-frac", "7"], ["--init-rate-frac", "--model"]),
    (["--cc", "cubic,bbr,cubic"], ["cc=", "'cubic' more than once"]),
    (["--cc", "cubic", "--cc", "bbr"], ["--cc", "more than once"]),
    (["--cc", "cubic", "--csv", ""], ["csv=''"]),
    (["--cc", "cubic", "--csv", "/sys/x.csv"], ["csv='/sys/x.csv' is invalid"]),
    (["--cc", "cubic", "--csv", "{tmp}"], ["csv=", "a folder"]),
    (["--cc", "cubic", "--csv", "{tmp}/no/t.csv"], ["csv=", "does not exist"]),
])
def test_eval_refuses_before_it_runs(capsys, no_run, tmp_path, argv, words):
    code, out, err = _run(capsys, "eval", *(a.replace("{tmp}", str(tmp_path)) for a in argv))
    _one_line_error(code, err, *words)
    assert out == ""


def test_eval_prints_its_results_before_a_csv_that_fails_after_all(capsys, monkeypatch,
                                                                    tmp_path):
    from ccjax import evaluate as ev

    res = ev.EvalResult(scenario="mocc-test", seed=0, duration_s=1.0, model="packet",
                        tick_s=1e-3, n_links=1)
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: res)

    def fail(self, path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(ev.EvalResult, "write_csv", fail)
    code, out, err = _run(capsys, "eval", "--cc", "cubic", "--json", "--csv",
                          str(tmp_path / "t.csv"))
    assert json.loads(out)["scenario"] == "mocc-test"  # the run is not lost
    _one_line_error(code, err, "csv=", "Permission denied")


@pytest.mark.parametrize("argv,words", [
    (["--duration-s", "0.05", "--duration-s", "0.1"], ["--duration-s", "more than once"]),
    (["--no-ns3", "--ns3-duration-s", "5"], ["--ns3-duration-s", "--no-ns3"]),
    (["--workloads", "const", "--ns3-duration-s", "5"], ["--ns3-duration-s", "cubic"]),
    (["--tick-ms", "5000"], ["tick_ms=5000", "from 0.001 to 1000 ms"]),
    (["--duration-s", "0.0025"], ["duration_s=0.0025", "whole number of ticks"]),
    (["--duration-s", "1", "--tick-ms", "0.3"], ["duration_s=1.0", "--tick-ms 0.3 ms"]),
])
def test_bench_sim_refuses_before_it_runs(capsys, no_run, argv, words):
    code, out, err = _run(capsys, "bench", "sim", *argv)
    _one_line_error(code, err, *words)
    assert out == ""


def test_repeatable_options_stay_repeatable_and_others_are_refused_twice(capsys):
    from ccjax.cli import build_parser

    ap = build_parser()
    a = ap.parse_args(["bench", "sweep", "--set", "train.iters=2", "--set=hyper.lr=1e-3"])
    assert a.set == [("train.iters", 2), ("hyper.lr", 1e-3)]
    a = ap.parse_args(["results", "d", "--filter", "status=done", "--filter", "reward>0"])
    assert a.filter == ["status=done", "reward>0"]
    a = ap.parse_args(["plot", "pareto", "d", "-o", "x.png", "--trial", "a", "--trial", "b"])
    assert a.trial == ["a", "b"]
    code, _, err = _run(capsys, "plot", "pareto", "d", "-o", "x.png", "--out=y.png")
    _one_line_error(code, err, "-o/--out", "more than once")


def test_the_plot_path_check_leaves_files_as_they_were(tmp_path):
    from ccjax.cli import _check_csv_path
    from ccjax.plot import check_plot_path

    new, old = tmp_path / "new.png", tmp_path / "old.png"
    old.write_bytes(b"keep")
    # a dangling link is where the file will go (its target); it is neither removed nor refused
    (tmp_path / "link.png").symlink_to("target.png")
    (tmp_path / "link.csv").symlink_to("target.csv")
    for p in (new, old, tmp_path / "a" / "b" / "deep.png", tmp_path / "link.png"):
        assert check_plot_path(p) == p
    for p in (tmp_path / "new.csv", tmp_path / "link.csv"):
        _check_csv_path(str(p))
    assert sorted(x.name for x in tmp_path.iterdir()) == ["link.csv", "link.png", "old.png"]
    assert old.read_bytes() == b"keep"


def test_an_rtt_the_refined_tick_fills_is_taken(capsys, no_run):
    # Copa at 100 Mbps runs 0.1 ms ticks, so 40.5 ms is whole ticks there (not of --tick-ms)
    with pytest.raises(AssertionError, match="it ran"):
        _run(capsys, "simulate", "--cc", "copa", "--flows", "1", "--bw-mbps", "100",
             "--rtt-ms", "40.5", "--duration-s", "1")


def test_an_rtt_below_the_tick_names_the_flag():
    from ccjax.errors import ConfigError
    from ccjax.sim.link import LinkSpec, build_links, plan

    specs = [LinkSpec(rtt_ms=(0.4,))]
    cfg, horizon = plan(specs, 1.0)
    with pytest.raises(ConfigError, match=r"tick_s \(--tick-ms\)"):
        build_links(specs, cfg, horizon)


# -- training, sweeps and their results: refused before anything is built -----------------------
@pytest.fixture
def no_build(monkeypatch):
    """Every build, run and directory lock of training and sweeps replaced by a failure: an
    input check must answer before an environment is built or a program compiled (and before a
    run's folder is made)."""
    from ccjax import dirlock, train
    from ccjax.sweep import batch, runner
    from ccjax.train import setup, trainer

    def ran(*a, **k):
        raise AssertionError("it ran: the input was not refused first")

    for mod, name in ((train, "build"), (setup, "build"), (trainer.Trainer, "run"),
                      (runner, "_run_local"), (runner, "run_batch"), (batch, "Group"),
                      (dirlock.DirLock, "acquire")):
        monkeypatch.setattr(mod, name, ran)


@pytest.fixture
def runs(tmp_path):
    """tmp_path with FILE (a file), RUN (a two-phase run's config.json, 4 environments), BAD (a
    config.json cut short) and SW (a sweep of two pending trials)."""
    from ccjax.algos import load_algo
    from ccjax.sweep.runner import _open
    from ccjax.sweep.spec import spec_from_dict

    (tmp_path / "FILE").write_text("x")
    cfg = load_algo("ppo-mocc", {"train.n_envs": 4})
    (tmp_path / "RUN").mkdir()
    (tmp_path / "RUN" / "config.json").write_text(json.dumps(
        {"algo": cfg.to_dict(), "seed": 0, "schedule": "TwoPhase", "meta": {}}))
    (tmp_path / "BAD").mkdir()
    (tmp_path / "BAD" / "config.json").write_text('{"algo": {')
    spec = spec_from_dict({"name": "t", "algo": "ppo-mocc", "axes": {"seed": [0, 1]},
                           "set": {"train": {"schedule": "fixed", "iters": 2, "n_envs": 8,
                                             "n_steps": 4},
                                   "env": {"preference": [0.45, 0.35, 0.2]}}}, "t.toml")
    _open(spec, tmp_path / "SW", resume=False).close()
    return tmp_path


_ADAPT = ["adapt", "--from", "{tmp}/RUN", "--preference", "0.5,0.3,0.2"]


@pytest.mark.parametrize("argv,words", [
    # a run's, a sweep's or a benchmark's folder that is a file, under a file, or empty
    (["train", "--out", "{tmp}/FILE", "--max-iters", "1"], ["out=", "FILE", "a file, not a "
                                                             "folder"]),
    (["train", "--out", "{tmp}/FILE/run"], ["out=", "FILE' on the way to it is a file"]),
    (["train", "--out", ""], ["out=''", "a folder's path"]),
    ([*_ADAPT, "--out", "{tmp}/FILE"], ["out=", "a file, not a folder"]),
    ([*_ADAPT, "--out", ""], ["out=''", "a folder's path"]),
    (["sweep", "ppo-mocc-hparams", "--out", "{tmp}/FILE"], ["out=", "a file, not a folder"]),
    (["sweep", "ppo-mocc-hparams", "--out", ""], ["out=''", "a folder's path"]),
    (["bench", "sweep", "--keep", "{tmp}/FILE"], ["keep=", "a file, not a folder"]),
    (["bench", "sweep", "--keep", ""], ["keep=''", "a folder's path"]),
    # a run's config.json that is not JSON, to resume or to adapt from
    (["train", "--resume", "--out", "{tmp}/BAD"], ["BAD/config.json", "not a readable run "
                                                   "config"]),
    ([*_ADAPT[:2], "{tmp}/BAD", *_ADAPT[3:], "--out", "{tmp}/new"], ["BAD/config.json"]),
    # a resumed run with other settings: every key that differs named, before building
    (["train", "--n-envs", "8", "--resume", "--out", "{tmp}/RUN"],
     ["train.n_envs differs (4 there, 8 now)", "RUN"]),
    (["train", "--n-envs", "4", "--seed", "2", "--set", "hyper.lr=0.1", "--resume", "--out",
      "{tmp}/RUN"], ["hyper.lr differs (0.001 there, 0.1 now)", "seed differs (0 there, 2 now)"]),
    # options the schedule or the learner never reads
    (["train", "--out", "{tmp}/x", "--preference", "0.5,0.3,0.2"],
     ["env.preference=", "train.schedule='two-phase'", "only the fixed schedule"]),
    (["train", "--out", "{tmp}/x", "--schedule", "all-at-once", "--iters", "5"],
     ["train.iters=5", "train.schedule='all-at-once'", "only the fixed schedule"]),
    (["train", "--out", "{tmp}/x", "--schedule", "fixed", "--iters", "5", "--landmarks-step",
      "0.2"], ["train.landmarks_step=0.2", "'fixed'", "landmark schedules"]),
    (["train", "--out", "{tmp}/x", "--algo", "aurora", "--landmarks-step", "0.2"],
     ["train.landmarks_step=0.2", "'fixed'", "landmark schedules"]),
    (["train", "--out", "{tmp}/x", "--algo", "aurora", "--set", "train.max_cycles=2"],
     ["train.max_cycles=2", "landmark schedules"]),
    (["train", "--out", "{tmp}/x", "--algo", "aurora", "--preference", "0.5,0.3,0.2"],
     ["env.preference=", "agent.pref_dim=0", "env.reward='aurora'", "--reward mocc"]),
    (["train", "--out", "{tmp}/x", "--schedule", "all-at-once", "--n-envs", "4"],
     ["train.n_envs=4", "landmark i mod 36", "at least 36 environments"]),
    # a minibatch of no sample, an infinite rate, a range error that says the range
    (["train", "--out", "{tmp}/x", "--n-envs", "10", "--set", "train.n_steps=8", "--set",
      "agent.n_minibatches=100"], ["agent.n_minibatches=100", "= 80 samples", "at most 80"]),
    (["train", "--out", "{tmp}/x", "--set", "env.init_rate=[0.3,inf]"],
     ["env.init_rate=[0.3, inf]", "finite"]),
    (["train", "--out", "{tmp}/x", "--set", "env.rate_bounds_pkts=[10.0,inf]"],
     ["env.rate_bounds_pkts=[10.0, inf]", "finite"]),
    (["train", "--out", "{tmp}/x", "--set", "agent.pn_width=0"], ["pn_width=0", "an integer > 0"]),
    # a key a sweep never reads
    (["sweep", "ppo-mocc-hparams", "--set", "train.max_cycles=1"],
     ["train.max_cycles=1 is invalid in --set", "no convergence stop"]),
    (["sweep", "ppo-mocc-hparams", "--set", "train.eval_every=4"],
     ["train.eval_every=4", "sweep.eval_every"]),
    # results: a numeric column compared with text or NaN, --desc without --sort
    (["results", "{tmp}/SW", "--filter", "reward<abc"], ["filter='reward<abc'", "a number"]),
    (["results", "{tmp}/SW", "--filter", "hyper.lr<nan"], ["filter='hyper.lr<nan'", "a number"]),
    (["results", "{tmp}/SW", "--desc"], ["--desc", "without --sort"]),
    # prefeval: whole ticks of the tick it runs at, and the flag that gave a value
    (["prefeval", "{tmp}/SW", "--duration-s", "0.0005"],
     ["--duration-s=0.0005", "at least one tick", "prefeval.tick_ms = 1 ms"]),
    (["prefeval", "{tmp}/SW", "--duration-s", "1.0005"],
     ["--duration-s=1.0005", "a whole number of ticks"]),
    (["prefeval", "{tmp}/SW", "--links", "0"], ["--links=0 is invalid: an integer >= 1"]),
    (["prefeval", "{tmp}/SW", "--classic", "cubic,nope"], ["--classic=", "'nope'"]),
])
def test_training_and_sweeps_refuse_before_building(capsys, no_build, runs, argv, words):
    code, out, err = _run(capsys, *(a.replace("{tmp}", str(runs)) for a in argv))
    _one_line_error(code, err, *words)
    assert "--options" not in err
    assert not (runs / "x").exists() and not (runs / "new").exists()


def test_results_filter_compares_numbers_as_numbers(capsys, runs):
    code, out, _ = _run(capsys, "results", str(runs / "SW"), "--filter", "seed<1", "--json")
    assert code == 0 and [r["seed"] for r in json.loads(out)] == [0]
    code, out, _ = _run(capsys, "results", str(runs / "SW"), "--sort", "seed", "--desc",
                        "--json")
    assert code == 0 and [r["seed"] for r in json.loads(out)] == [1, 0]


def test_validate_averages_the_reports_ccjax_seeds_by_default():
    """``ccjax validate`` without ``--ccjax-seeds`` averages as many ccjax seeds as the report
    and the test suite do (``validation.CCJAX_SEEDS``), so its verdict is the report's."""
    from ccjax import validation as v
    from ccjax.cli import build_parser

    a = build_parser().parse_args(["validate", "--cc", "newreno"])
    assert a.ccjax_seeds == len(v.CCJAX_SEEDS)
    assert v.CCJAX_SEEDS == tuple(range(1, a.ccjax_seeds + 1))


@pytest.fixture
def no_plan(monkeypatch):
    """``api.simulate`` may validate but must not plan, build or run: a refusal is raised
    before anything is traced, and a missing check fails here at once instead of running."""
    from ccjax import api

    def ran(*a, **k):
        raise AssertionError("it was planned: the input was not refused first")

    monkeypatch.setattr(api, "plan", ran)
    monkeypatch.setattr(api, "_run_planned", ran)


_ACK = ["--window-sender", "ack-clocked"]


@pytest.mark.parametrize("argv,words", [
    # PRR bounds only window senders: for rate-based flows it changes nothing
    (["--cc", "const", "--flows", "1", *_ACK, "--recovery", "prr"],
     ["recovery='prr'", "cc const", "cubic, newreno, vegas", "change nothing"]),
    (["--cc", "bbr", *_ACK, "--recovery", "prr"], ["recovery='prr'", "cc bbr", "cubic, newreno"]),
    (["--cc", "bbr,vivace", *_ACK, "--recovery", "prr", "--loss", "0.01"],
     ["recovery='prr'", "cc bbr,vivace"]),
    # ... nor for Copa without lost retransmissions (with them it delays them a tick: allowed)
    (["--cc", "copa", *_ACK, "--recovery", "prr", "--loss", "0.01"], ["recovery='prr'"]),
    (["--cc", "copa", *_ACK, "--recovery", "prr", "--retx-loss"], ["recovery='prr'"]),
    # only controllers that track loss episodes read a lost retransmission
    (["--cc", "const", "--retx-loss", "--loss", "0.01"],
     ["retx_loss=True", "cc const", "copa, cubic, newreno, vegas", "change nothing"]),
    (["--cc", "bbr,vivace", "--retx-loss", "--loss", "0.01"], ["retx_loss=True", "bbr,vivace"]),
    # with recovery cut a retransmission meets only the random loss: none without it
    (["--cc", "cubic", "--retx-loss"], ["retx_loss=True", "loss=0", "recovery='prr'"]),
    (["--cc", "cubic", *_ACK, "--retx-loss"], ["retx_loss=True", "loss=0"]),
    # a scenario's links take the same check: dumbbell's have no random loss
    (["--scenario", "mocc-train", "--cc", "const", "--retx-loss"], ["retx_loss=True", "const"]),
    (["--scenario", "dumbbell", "--cc", "cubic", "--retx-loss"], ["retx_loss=True", "loss=0"]),
])
def test_simulate_refuses_sender_settings_that_change_nothing(capsys, no_plan, argv, words):
    code, out, err = _run(capsys, "simulate", "--duration-s", "1", *argv)
    _one_line_error(code, err, *words)
    assert out == ""


def test_sender_settings_are_taken_where_some_flow_feels_them(no_plan):
    """The combinations that reach a flow pass the check (and get to the planner)."""
    from ccjax.api import link_from_flags, simulate
    from ccjax.errors import ConfigError

    lossy, clean = link_from_flags(flows=2, loss=0.01), link_from_flags(flows=2)
    ack = {"window_sender": "ack-clocked"}
    for links, cc, kw in (
            ([clean], ["const", "cubic"], {**ack, "recovery": "prr"}),  # a window sender
            ([clean], "newreno", {**ack, "recovery": "prr", "retx_loss": True}),  # drop-tail
            ([lossy], "copa", {**ack, "recovery": "prr", "retx_loss": True}),
            ([lossy], ["bbr", "copa"], {"retx_loss": True}),
            ([clean, lossy], "vegas", {"retx_loss": True}),  # one lossy link is enough
            ([clean], "const", ack)):  # ack-clocked delivery moves rate-based flows' RTTs
        with pytest.raises(AssertionError, match="planned"):
            simulate(links, cc=cc, duration_s=1.0, model="packet", **kw)
    # a flow slot beyond a link's flows runs nothing there
    with pytest.raises(ConfigError, match="recovery='prr'"):
        simulate([link_from_flags(flows=1)], cc=["const", "cubic"], max_flows=2,
                 duration_s=1.0, model="packet", recovery="prr", **ack)


def test_the_refused_sender_settings_change_nothing():
    """What the check refuses is a no-op in the simulator (``run_controller`` does not check):
    PRR and lost retransmissions for constant-rate flows, and lost retransmissions without
    random loss under recovery cut. A change to ``sim.core`` that makes one of them matter
    fails here, and the check must follow."""
    from ccjax.api import link_from_flags, run_controller
    from ccjax.cc.registry import get_controller

    def run(cc: str, loss: float, **kw) -> str:
        s = run_controller([link_from_flags(flows=2, loss=loss, start_s=[0.0, 0.0])],
                           get_controller(cc), duration_s=0.6, model="packet", **kw).summary(0)
        for k in ("window_sender", "recovery", "retx_loss", "wall_s", "compile_s"):
            del s["sim"][k]
        return json.dumps(s, sort_keys=True)

    ack = {"window_sender": "ack-clocked", "retx_loss": True}
    assert run("const", 0.05, **ack) == run("const", 0.05, recovery="prr", **ack)
    assert run("const", 0.05) == run("const", 0.05, retx_loss=True)
    assert run("newreno", 0.0) == run("newreno", 0.0, retx_loss=True)
    # (and the comparison can tell: random loss makes lost retransmissions NewReno reads)
    assert run("newreno", 0.2) != run("newreno", 0.2, retx_loss=True)


def test_the_window_and_episode_controller_sets_follow_the_controllers():
    """``WINDOW_CONTROLLERS`` are the controllers that decide a rate of 0 (the simulator's
    window senders), ``EPISODE_CONTROLLERS`` those whose state tracks loss episodes (the readers
    of lost retransmissions); the sender-settings check relies on both."""
    import jax.numpy as jnp

    from ccjax.cc.newreno import Episodes
    from ccjax.cc.registry import CONTROLLERS, EPISODE_CONTROLLERS, WINDOW_CONTROLLERS

    assert WINDOW_CONTROLLERS <= EPISODE_CONTROLLERS <= set(CONTROLLERS)
    for name, c in CONTROLLERS.items():
        state, dec = c.init(c.default_params(2), jnp.full(2, 0.04))
        rate = np.asarray(dec.rate)
        assert (np.all(rate <= 0) if name in WINDOW_CONTROLLERS else np.all(rate > 0)), name
        assert isinstance(getattr(state, "ep", None), Episodes) == (name in EPISODE_CONTROLLERS)


def test_a_runs_json_holds_its_stop_times_and_scores_as_with_them_given(capsys):
    """Each flow's ``stop_s`` is in the JSON (null: never stops), so ``summary_metrics`` scores
    a run with departures from its JSON alone as with the stop times passed."""
    import math

    from ccjax.metrics import summary_metrics

    code, out, _ = _run(capsys, "simulate", "--json", "--model", "fluid", "--duration-s", "4",
                        "--bw-mbps", "8", "--rate-mbps", "4", "--flows", "3",
                        "--start-s", "0,1,1.5", "--stop-s", "3,inf,1e12", "--buffer-pkts", "50")
    assert code == 0

    def strict(c):
        raise ValueError(f"{c} is no JSON")

    d = json.loads(out, parse_constant=strict)  # NaN/Infinity would not be valid JSON
    assert [f["stop_s"] for f in d["flows"]] == [3.0, None, None]

    def score(s, **kw) -> str:
        return json.dumps(summary_metrics(s, hold_s=0.5, **kw), sort_keys=True)

    given = score(d, stop_s=[3.0, math.inf, None])
    assert score(d) == given
    assert [c["kind"] for c in json.loads(given)["convergence"]] == [
        "arrival", "arrival", "departure"]
    # an explicit stop_s wins over the JSON's, and without them the departure is lost
    bare = {**d, "flows": [{k: v for k, v in f.items() if k != "stop_s"} for f in d["flows"]]}
    assert score(bare) != given and score(d, stop_s=[None] * 3) == score(bare)


def test_series_count_each_slots_packets_when_they_left(capsys):
    """The guide (simulating.md) and ``sim.run.summarize``: a slot counts the packets that left
    the bottleneck in it, a packet group at its last byte, so a slot can exceed the capacity by
    up to one group and a neighbour is lower by as much; the running total never exceeds the
    capacity offered so far, and the series' mean is the run's utilization. (15 Mbps into 12: a
    backlog all run; a tick's pacer sends at most 2 x 1875 + 1500 bytes, three packets.)"""
    code, out, _ = _run(capsys, "simulate", "--json", "--cc", "const", "--rate-mbps", "15",
                        "--flows", "1", "--duration-s", "2")
    assert code == 0
    d = json.loads(out)
    util = np.asarray(d["link"]["utilization_series"])
    cap_slot = 12e6 / 8 * d["sim"]["series_interval_s"]  # bytes a slot can serve
    thr = np.asarray(d["flows"][0]["throughput_series_mbps"])
    np.testing.assert_allclose(thr, util * 12.0, rtol=1e-5)  # the one flow is the link's
    assert util.mean() == pytest.approx(d["link"]["utilization"], rel=1e-5)
    assert np.all(np.cumsum(util) <= np.arange(1, len(util) + 1) + 1e-5)
    group = 3 * 1500 / cap_slot
    assert util.max() <= 1.0 + group + 1e-5
    # the documented overshoot is there (counting each byte when it left would end it; then
    # the guide's description of the series and this test change with it)
    assert util.max() > 1.0
