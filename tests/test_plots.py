"""Preference evaluation of a sweep's trials (ccjax prefeval) and the sweep figures (ccjax plot),
from one small real sweep: 2 learning rates x 2 seeds, 4 iterations, with a [prefeval] table of
4 preferences x 2 short fluid-model links and Cubic.

The sweep's settings are test_sweep.py's TINY trials in batches of 2, evaluated every 2
iterations: the same compiled programs, so the session's shared compilation cache
(tests/conftest.py) compiles them once for both files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ccjax.cli import main
from ccjax.errors import ConfigError
from ccjax.sweep import load_spec
from ccjax.sweep.prefeval import (
    COLUMNS,
    FORMAT_VERSION,
    parse_prefeval,
    preference_set,
    read_results,
)

N_PREFS, N_LINKS = 4, 2
SPEC = """
name = "tiny-prefeval"
algo = "ppo-mocc"
[set]
train.schedule = "fixed"
train.iters = 4
train.chunk = 2
train.n_envs = 8
train.n_steps = 4
train.eval_links = 2
train.eval_steps = 8
env.pool = 4
env.episode_len = 20
env.preference = [0.45, 0.35, 0.2]
agent.n_minibatches = 2
[axes]
hyper.lr = [1e-3, 3e-4]
seed = [0, 1]
[sweep]
batch = 2
eval_every = 2
[prefeval]
preferences = 4
links = 2
duration_s = 2.0
model = "fluid"
classic = ["cubic"]
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    d = tmp_path_factory.mktemp("prefeval")
    (d / "tiny.toml").write_text(SPEC)
    out = d / "out"
    assert main(["sweep", str(d / "tiny.toml"), "--out", str(out), "--quiet"]) == 0
    return out


def _parquet(path: Path) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    return {c: t.column(c).to_numpy() for c in t.column_names}


@pytest.mark.slow
def test_prefeval_files_follow_the_storage_contract(sweep):
    spec = json.loads((sweep / "prefeval" / "spec.json").read_text())
    assert {k: spec[k] for k in ("preferences", "links", "scenario", "seed", "duration_s",
                                 "model")} == {"preferences": N_PREFS, "links": N_LINKS,
                                               "scenario": "mocc-test", "seed": 0,
                                               "duration_s": 2.0, "model": "fluid"}
    W = np.asarray(spec["preference_values"])
    np.testing.assert_allclose(W, preference_set(N_PREFS, 0))
    np.testing.assert_allclose(W.sum(1), 1.0, atol=1e-12)
    assert len(spec["link_values"]) == N_LINKS and spec["classic"] == ["cubic"]
    ids = [t.id for t in load_spec(sweep.parent / "tiny.toml").trials]
    files = [sweep / "prefeval" / f"{t}.parquet" for t in ids]
    files.append(sweep / "prefeval" / "classic" / "cubic.parquet")
    for f in files:
        c = _parquet(f)
        assert list(c) == list(COLUMNS)
        assert len(c["pref"]) == N_PREFS * N_LINKS
        assert c["pref"].dtype.kind == "i" and c["link"].dtype.kind == "i"
        # preference-major, every (preference, link) once, the same preferences everywhere
        assert c["pref"].tolist() == [p for p in range(N_PREFS) for _ in range(N_LINKS)]
        assert c["link"].tolist() == list(range(N_LINKS)) * N_PREFS
        np.testing.assert_allclose(np.stack([c["w_thr"], c["w_lat"], c["w_loss"]], 1),
                                   np.repeat(W, N_LINKS, 0))
        assert np.all((c["reward"] >= 0) & (c["reward"] <= 1))
        assert np.all(c["utilization"] >= 0) and np.all(c["latency_ratio"] >= 1 - 1e-6)
        assert np.all(c["throughput_mbps"] >= 0) and np.all(c["p95_delay_ms"] > 0)
        assert set(c["method"]) == {f.stem}
        assert np.all(c["tick_s"] == 1e-3)  # the tick each method ran at (the spec's here)
    assert spec["version"] == FORMAT_VERSION == 3
    # a classic controller runs once per link and is scored with each preference (MOCC Eq. 2)
    c = _parquet(files[-1])
    for col in ("utilization", "latency_ratio", "loss_rate"):
        per_link = c[col].reshape(N_PREFS, N_LINKS)
        np.testing.assert_array_equal(per_link, np.broadcast_to(per_link[0], per_link.shape))
    o = np.stack([np.clip(c["utilization"], 0, 1), np.clip(1 / c["latency_ratio"], 0, 1),
                  1 - c["loss_rate"]], 1)
    np.testing.assert_allclose(c["reward"], (np.repeat(W, N_LINKS, 0) * o).sum(1), rtol=1e-5)


@pytest.mark.slow
def test_a_grid_row_is_what_ccjax_eval_gives(sweep):
    """The batched grid (every preference x link in one program) against `evaluate` at one
    preference on the same links: the same numbers."""
    from ccjax.evaluate import evaluate

    spec = json.loads((sweep / "prefeval" / "spec.json").read_text())
    tid = next(p.stem for p in sorted((sweep / "prefeval").glob("*.parquet")))
    c = _parquet(sweep / "prefeval" / f"{tid}.parquet")
    p = 2
    w = spec["preference_values"][p]
    res = evaluate([str(sweep / "trials" / tid / "policy")], "mocc-test", N_LINKS, seed=0,
                   duration_s=2.0, preference=w, model="fluid")
    for i in range(N_LINKS):
        row = res.per_link[i]
        j = p * N_LINKS + i
        for col in ("reward", "utilization", "latency_ratio", "loss_rate", "throughput_mbps",
                    "p95_delay_ms"):
            assert c[col][j] == pytest.approx(row[col], rel=1e-5, abs=1e-7), col


@pytest.mark.slow
def test_prefeval_resumes_and_refuses_other_settings(sweep, capsys):
    pdir = sweep / "prefeval"
    trials = sorted(pdir.glob("*.parquet"))
    gone, kept = trials[0], trials[1:]
    before = {p: p.stat().st_mtime_ns for p in kept + [pdir / "classic" / "cubic.parquet"]}
    gone.unlink()
    capsys.readouterr()
    # no flags: the settings of prefeval/spec.json
    assert main(["prefeval", str(sweep), "--quiet"]) == 0
    assert "1 trial(s) and 0 controller(s) evaluated now, 3 trial(s) and 1 controller(s) " \
        "already done" in capsys.readouterr().out
    assert gone.is_file()
    assert {p: p.stat().st_mtime_ns for p in before} == before  # not rewritten
    assert not list(pdir.rglob("*.tmp"))
    # settings that change the rows are refused, and nothing is written
    spec_before = json.loads((pdir / "spec.json").read_text())
    assert main(["prefeval", str(sweep), "--links", "3", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "links=3 is invalid" in err and "links=2" in err
    assert json.loads((pdir / "spec.json").read_text()) == spec_before
    # results of an older format (whose Copa rows ran at the spec's tick) are refused
    (pdir / "spec.json").write_text(json.dumps({**spec_before, "version": 1}))
    assert main(["prefeval", str(sweep), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"version={FORMAT_VERSION} is invalid" in err
    assert "version=1" in err
    (pdir / "spec.json").write_text(json.dumps(spec_before))


def test_prefeval_spec_errors_are_one_line():
    for table, msg in [({"preferences": 0}, "prefeval.preferences=0 is invalid"),
                       ({"links": 1.5}, "prefeval.links=1.5 is invalid"),
                       ({"model": "ns3"}, "prefeval.model='ns3' is invalid"),
                       ({"classic": ["cubic", "reno2"]}, "'reno2' is not a controller"),
                       ({"prefs": 3}, "prefeval.prefs is invalid"),
                       ({"scenario": "nowhere"}, "nowhere"),
                       ({"duration_s": -1}, "prefeval.duration_s=-1 is invalid"),
                       # whole ticks of the tick it runs at, the scenario's duration too
                       ({"duration_s": 1.0005}, "prefeval.duration_s=1.0005 is invalid in t.toml"
                        " [prefeval]: a whole number of ticks of prefeval.tick_ms = 1 ms"),
                       ({"duration_s": 0.0005}, "at least one tick"),
                       ({"tick_ms": 0.7}, "prefeval.duration_s=30.0 (scenario 'mocc-test'")]:
        with pytest.raises(ConfigError) as e:
            parse_prefeval(table, "t.toml [prefeval]")
        assert msg in str(e.value) and "\n" not in str(e.value)
    p = parse_prefeval({"preferences": 3, "classic": ["bbr"]})
    assert p.preferences == 3 and p.classic == ("bbr",) and p.links == 10
    w = preference_set(1000, 7)
    assert np.all(w > 0) and np.allclose(w.sum(1), 1)
    assert abs(w.mean(0) - 1 / 3).max() < 0.03  # Dirichlet(1, 1, 1): uniform on the simplex
    np.testing.assert_array_equal(w, preference_set(1000, 7))


def test_prefeval_errors_without_a_sweep(tmp_path, capsys):
    assert main(["prefeval", str(tmp_path)]) == 2
    assert "not a sweep directory" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="no preference evaluation results"):
        read_results(tmp_path)


# -- the figures ---------------------------------------------------------------------------------
def _nonempty(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 2000


@pytest.mark.slow
def test_pareto_figure(sweep, tmp_path):
    from ccjax.plot.pareto import plot_pareto

    r = plot_pareto(sweep, tmp_path / "p.png")
    _nonempty(tmp_path / "p.png")
    assert len(r["series"]) == 4  # every trial (up to 6)
    assert all("hypervolume" in t for t in r["legend"][1:])
    assert any(t.startswith("hypervolume reference") for t in r["legend"])
    assert set(r["classic"]) == {"cubic"}
    for s in r["series"]:
        assert s["hypervolume"] > 0 and len(s["points"]) == N_PREFS
        assert 1 <= len(s["front"]) <= N_PREFS
    # the reference point: x = 0 and 1.1 x the worst latency ratio over trials and controllers
    worst = max([max(p[1] for p in s["points"]) for s in r["series"]]
                + [v[1] for v in r["classic"].values()])
    assert r["reference"] == (0.0, pytest.approx(1.1 * worst))
    one = plot_pareto(sweep, tmp_path / "p.pdf", x="throughput", y="p95_delay",
                      trials=[r["series"][1]["trial"]])
    _nonempty(tmp_path / "p.pdf")
    assert tmp_path.joinpath("p.pdf").read_bytes()[:4] == b"%PDF"
    assert [s["trial"] for s in one["series"]] == [r["series"][1]["trial"]]


@pytest.mark.slow
def test_ternary_cdf_and_curves_figures(sweep, tmp_path, capsys):
    assert main(["plot", "ternary", str(sweep), "-o", str(tmp_path / "t.png")]) == 0
    _nonempty(tmp_path / "t.png")
    assert "4 panel(s)" in capsys.readouterr().out

    from ccjax.plot.cdf import plot_cdf
    from ccjax.plot.curves import plot_curves

    r = plot_cdf(sweep, tmp_path / "c.png", by="trial")
    _nonempty(tmp_path / "c.png")
    assert [x["kind"] for x in r["lines"]] == ["trial"] * 4 + ["classic"]  # one per trial + cubic
    assert r["legend"][-1] == "cubic" and all(x["n"] == N_PREFS * N_LINKS for x in r["lines"])
    pooled = plot_cdf(sweep, tmp_path / "c.pdf")  # seeds pooled per learning rate
    _nonempty(tmp_path / "c.pdf")
    assert pooled["legend"] == ["lr=0.001 (2 seeds)", "lr=0.0003 (2 seeds)", "cubic"]
    assert [x["n"] for x in pooled["lines"]] == [2 * N_PREFS * N_LINKS] * 2 + [N_PREFS * N_LINKS]

    r = plot_curves(sweep, tmp_path / "k.png")
    _nonempty(tmp_path / "k.png")
    assert r["legend"] == ["mean, band min–max", "lr=0.001 (2 seeds)", "lr=0.0003 (2 seeds)"]
    assert all(x["iterations"] == [1.0, 2.0, 3.0, 4.0] for x in r["lines"])
    r = plot_curves(sweep, tmp_path / "k.pdf", metric="eval_reward", by="seed")
    _nonempty(tmp_path / "k.pdf")
    assert r["legend"][1:] == ["seed=0 (2 trials)", "seed=1 (2 trials)"]
    assert all(x["iterations"] == [2.0, 4.0] for x in r["lines"])  # evaluated every 2


def test_curves_of_a_training_run_directory(tmp_path):
    """A `ccjax train` directory: metrics.csv, and eval.csv averaged over preferences."""
    from ccjax.plot.curves import plot_curves
    from ccjax.train.store import CsvLog
    from ccjax.train.trainer import EVAL_FIELDS, METRIC_FIELDS

    run = tmp_path / "run"
    run.mkdir()
    m = CsvLog(run / "metrics.csv", METRIC_FIELDS)
    m.append([{"iteration": i, "phase": "fixed", "reward": 0.5 + 0.01 * i, "wall_s": i}
              for i in range(1, 6)])
    e = CsvLog(run / "eval.csv", EVAL_FIELDS)
    e.append([{"iteration": 5, "w_thr": w, "w_lat": 1 - w, "w_loss": 0.0, "reward": w}
              for w in (0.2, 0.6)])
    r = plot_curves(run, tmp_path / "r.png")
    _nonempty(tmp_path / "r.png")
    assert r["lines"][0]["mean"] == pytest.approx([0.51, 0.52, 0.53, 0.54, 0.55])
    r = plot_curves(run, tmp_path / "e.png", metric="eval_reward")
    assert r["lines"][0]["iterations"] == [5.0] and r["lines"][0]["mean"] == [pytest.approx(0.4)]
    with pytest.raises(ConfigError, match="by='seed' is invalid for a training run"):
        plot_curves(run, tmp_path / "e.png", by="seed")


@pytest.mark.slow
def test_plot_errors_are_one_line(sweep, tmp_path, capsys):
    cases = [
        (["plot", "cdf", str(tmp_path / "nowhere"), "-o", "x.png"], "no such directory"),
        (["plot", "pareto", str(sweep), "-o", str(tmp_path / "x.jpg")], "must end in .png"),
        (["plot", "curves", str(sweep), "-o", str(tmp_path / "x.png"), "--metric", "nope"],
         "metric='nope' is invalid: one of"),
        (["plot", "cdf", str(sweep), "-o", str(tmp_path / "x.png"), "--by", "hyper.clip"],
         "by='hyper.clip' is invalid: one of trial, hyper.lr, seed"),
        (["plot", "ternary", str(sweep), "-o", str(tmp_path / "x.png"), "--trial", "abc"],
         "trial='abc' is invalid"),
        (["plot", "pareto", str(tmp_path), "-o", str(tmp_path / "x.png")],
         "not a sweep directory"),
    ]
    for argv, msg in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err, err
    # a sweep without a preference evaluation
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "ledger.sqlite").write_bytes((sweep / "ledger.sqlite").read_bytes())
    assert main(["plot", "cdf", str(bare), "-o", str(tmp_path / "x.png")]) == 2
    assert "run `ccjax prefeval" in capsys.readouterr().err
    assert not list(tmp_path.glob("x.*"))
    assert os.listdir(bare) == ["ledger.sqlite"]


def test_legend_labels_name_the_axes_that_tell_trials_apart():
    from ccjax.plot.sweepdata import SweepTrials, groups, label

    steps = [(0.25, 288), (0.2, 288), (1 / 6, 290), (0.1, 288), (0.05, 342)]
    pts = {f"t{i}": {"train.landmarks_step": s, "train.n_envs": n, "seed": 0}
           for i, (s, n) in enumerate(steps)}
    st = SweepTrials(Path("."), list(pts), pts, dict.fromkeys(pts, "done"))
    # ω = C(1/step - 1, 2); n_envs moves with the step (a linked axis) and adds nothing
    assert [label(st, t, st.ids) for t in st.ids] == ["ω=3", "ω=6", "ω=10", "ω=36", "ω=171"]
    pts = {f"t{i}": {"hyper.lr": lr, "hyper.ent_start": e0, "hyper.ent_end": e1, "seed": sd}
           for i, (lr, (e0, e1), sd) in enumerate(
               (lr, e, sd) for lr in (1e-3, 3e-4) for e in ((0.01, 0.001), (0.1, 0.01))
               for sd in (0, 1))}
    st = SweepTrials(Path("."), list(pts), pts, dict.fromkeys(pts, "done"))
    g = groups(st, st.ids, None)  # seeds pooled
    assert [n for n, _ in g] == ["lr=0.001, ent_start=0.01", "lr=0.001, ent_start=0.1",
                                 "lr=0.0003, ent_start=0.01", "lr=0.0003, ent_start=0.1"]
    assert [m for _, m in g][0] == ["t0", "t1"]
    assert [n for n, _ in groups(st, st.ids, "hyper.lr")] == ["lr=0.001", "lr=0.0003"]
    assert label(st, "t0", ["t0"]) == "t0"  # nothing differs: the id


def test_per_preference_means_leave_out_a_link_without_latency():
    # ccjax.evaluate gives a link where the flow delivered nothing a NaN latency; a
    # preference's mean over links leaves it out, and a preference without rows is an error
    from ccjax.errors import ConfigError
    from ccjax.plot.sweepdata import Prefeval

    pe = Prefeval(spec={"preferences": 3}, trials={}, classic={})
    cols = {"pref": np.array([0, 0, 1, 1, 2, 2]),
            "latency_ratio": np.array([1.2, np.nan, 1.4, 1.6, np.nan, np.nan])}
    v = pe.per_pref(cols, "latency_ratio", "t")
    assert v[0] == pytest.approx(1.2) and v[1] == pytest.approx(1.5) and np.isnan(v[2])
    with pytest.raises(ConfigError, match=r"no rows for preference\(s\) \[1\]"):
        pe.per_pref({"pref": np.array([0, 2]), "latency_ratio": np.array([1.0, 1.0])},
                    "latency_ratio", "t")


@pytest.mark.slow
def test_pareto_figure_with_a_link_that_delivered_nothing(sweep, tmp_path):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ccjax.plot.pareto import plot_pareto

    d = tmp_path / "s"
    shutil.copytree(sweep, d)
    r0 = plot_pareto(d, tmp_path / "a.png")
    f = sorted((d / "prefeval").glob("*.parquet"))[0]
    tab = pq.read_table(f)
    lat = tab.column("latency_ratio").to_numpy().copy()
    pref, link = tab.column("pref").to_numpy(), tab.column("link").to_numpy()
    hit = (pref == 0) & (link == 0)
    lat[hit] = np.nan
    pq.write_table(tab.set_column(tab.schema.get_field_index("latency_ratio"), "latency_ratio",
                                  pa.array(lat)), f)
    r = plot_pareto(d, tmp_path / "b.png")
    s = next(x for x in r["series"] if x["trial"] == f.stem)
    want = float(np.mean(lat[(pref == 0) & ~hit]))  # the other links' mean
    assert s["points"][0][1] == pytest.approx(want)
    assert set(r["classic"]) == set(r0["classic"])


def test_run_plot_has_a_window_panel_where_a_flow_has_a_window(tmp_path, monkeypatch):
    """``ccjax simulate --plot``: throughput, RTT, window and queue; the window panel only where
    some flow has a window (a rate sender's series is all null), with that flow's series."""
    from matplotlib.figure import Figure

    from ccjax.plot import plot_run

    seen = []
    real = Figure.savefig

    def keep(fig, *a, **k):
        seen.append([(ax.get_ylabel(), [ln.get_ydata() for ln in ax.lines]) for ax in fig.axes])
        return real(fig, *a, **k)

    monkeypatch.setattr(Figure, "savefig", keep)

    def flow(cc, cwnd):
        return {"cc": cc, "base_rtt_ms": 40.0, "throughput_series_mbps": [1.0, 2.0, 3.0],
                "rtt_series_ms": [40.0, None, 41.0], "cwnd_series_pkts": cwnd}

    summary = {"sim": {"series_interval_s": 0.1},
               "link": {"queue_series_pkts": [0.0, 1.0, 2.0], "capacity_mbps": 10.0},
               "flows": [flow("const", [None, None, None]), flow("newreno", [None, 10.0, 20.0])]}
    plot_run(summary, tmp_path / "w.png")
    labels = [label for label, _ in seen[0]]
    assert labels == ["throughput (Mbps)", "RTT (ms)", "window (packets)", "queue (packets)"]
    (window,) = seen[0][2][1]
    np.testing.assert_allclose(window, [np.nan, 10.0, 20.0])
    summary["flows"][1] = flow("const", [None, None, None])
    plot_run(summary, tmp_path / "c.png")
    assert [label for label, _ in seen[1]] == ["throughput (Mbps)", "RTT (ms)", "queue (packets)"]
