"""Sweeps: spec expansion and validation, grouping by static shape, the batched program against
a trial run alone, resume after a kill, failure isolation, ``ccjax results``, and landmark
schedules (MOCC Figure 16's omega sweep)."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.agents.landmarks import BOOTSTRAP, simplex_grid
from ccjax.cli import main
from ccjax.errors import ConfigError
from ccjax.sweep import Ledger, load_spec, load_trial, read_curve, results, run_sweep
from ccjax.sweep.batch import Group, balanced
from ccjax.sweep.runner import _reached
from ccjax.sweep.schedule import trial_schedule
from ccjax.sweep.spec import list_sweeps, presets_dir, spec_from_dict
from ccjax.train.schedules import AllAtOnce, TwoPhase, spread

#: every trial tiny: 8 envs x 4 steps, 4 iterations in chunks of 2, a 4-link pool, 2 eval links
TINY = {"train": {"schedule": "fixed", "iters": 4, "chunk": 2, "n_envs": 8, "n_steps": 4,
                  "eval_links": 2, "eval_steps": 8},
        "env": {"pool": 4, "episode_len": 20, "preference": [0.45, 0.35, 0.2]},
        "agent": {"n_minibatches": 2}}


def _spec(axes=None, random=None, set_extra=None, **top):
    base = {t: dict(v) for t, v in TINY.items()}
    for k, v in (set_extra or {}).items():
        t, _, kk = k.partition(".")
        base.setdefault(t, {})[kk] = v
    d = {"name": "t", "algo": "ppo-mocc", "set": base, "axes": axes or {}, **top}
    if random is not None:
        d["random"] = random
    return spec_from_dict(d, "t.toml")


def _toml_value(v) -> str:
    return json.dumps(v)  # numbers, strings and lists of them read the same in TOML


def _write_spec(path: Path, axes: dict, sweep: dict) -> Path:
    lines = ['name = "tiny"', 'algo = "ppo-mocc"', "[set]"]
    for t, kv in TINY.items():
        lines += [f"{t}.{k} = {_toml_value(v)}" for k, v in kv.items()]
    lines.append("[axes]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in axes.items()]
    lines.append("[sweep]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in sweep.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# -- expansion ------------------------------------------------------------------------------------
def test_grid_expansion_is_the_product_with_linked_axes():
    ent = [{"hyper": {"ent_start": 0.01, "ent_end": 0.001}},
           {"hyper": {"ent_start": 0.1, "ent_end": 0.01}}]
    s = _spec({"hyper": {"lr": [3e-4, 1e-3]}, "entropy": ent, "seed": [0, 1]})
    assert len(s.trials) == 8
    # the last axis varies fastest; a linked axis moves its keys together
    assert [t.point for t in s.trials[:3]] == [
        {"hyper.lr": 3e-4, "hyper.ent_start": 0.01, "hyper.ent_end": 0.001, "seed": 0},
        {"hyper.lr": 3e-4, "hyper.ent_start": 0.01, "hyper.ent_end": 0.001, "seed": 1},
        {"hyper.lr": 3e-4, "hyper.ent_start": 0.1, "hyper.ent_end": 0.01, "seed": 0}]
    t = s.trials[5]
    assert t.cfg.hyper["lr"] == 1e-3 and t.cfg.hyper["ent_start"] == 0.01 and t.seed == 1
    assert t.cfg.hyper["clip"] == 0.2  # the preset's value where no axis sets it
    assert t.cfg.train["n_envs"] == 8 and t.preference == (0.45, 0.35, 0.2)
    ids = [t.id for t in s.trials]
    assert len(set(ids)) == 8 and all(len(i) == 12 for i in ids)
    again = _spec({"hyper": {"lr": [3e-4, 1e-3]}, "entropy": ent, "seed": [0, 1]})
    assert [t.id for t in again.trials] == ids  # deterministic ids
    assert len(s.groups()) == 1  # hyperparameters and seeds share one program


def test_random_expansion_is_seeded_and_crossed_with_the_grid():
    rnd = {"n": 5, "seed": 3, "hyper": {"lr": {"log_uniform": [1e-4, 1e-2]},
                                        "clip": {"uniform": [0.1, 0.3]},
                                        "gamma": {"choice": [0.98, 0.99]}}}
    s = _spec({"seed": [0, 1]}, random=rnd)
    assert len(s.trials) == 10
    a = [t.point for t in s.trials if t.seed == 0]
    b = [{k: v for k, v in t.point.items() if k != "seed"} for t in s.trials if t.seed == 1]
    assert [{k: v for k, v in p.items() if k != "seed"} for p in a] == b  # same samples per seed
    for p in a:
        assert 1e-4 <= p["hyper.lr"] <= 1e-2 and 0.1 <= p["hyper.clip"] <= 0.3
        assert p["hyper.gamma"] in (0.98, 0.99)
    assert len({p["hyper.lr"] for p in a}) == 5
    assert [t.id for t in _spec({"seed": [0, 1]}, random=rnd).trials] == [t.id for t in s.trials]
    other = _spec({"seed": [0, 1]}, random={**rnd, "seed": 4})
    assert other.trials[0].point["hyper.lr"] != s.trials[0].point["hyper.lr"]


@pytest.mark.parametrize("kw, msg", [
    ({"axes": {"hyper": {"lrr": [1e-3]}}}, "hyper.lrr is invalid in t.toml [axes]: unknown key"),
    ({"axes": {"hyper": {"clip": [0.2, 1.5]}}}, "hyper.clip=1.5 is invalid"),
    ({"axes": {"hyper": {"lr": 1e-3}}}, "axes.hyper.lr=0.001 is invalid"),
    ({"axes": {"foo.bar": [1]}}, "axes key 'foo.bar' is invalid"),
    ({"axes": {"seed": [0, -1]}}, "seed=-1 is invalid"),
    ({"axes": {"env": {"preference": [[0.5, 0.5, 0.5]]}}}, "env.preference"),
    ({"axes": {"train": {"n_envs": [8, 2.5]}}}, "train.n_envs=2.5 is invalid"),
    ({"axes": {"ent": [{"hyper": {"ent_start": 0.1}}, {"hyper": {"ent_end": 0.1}}]}},
     "axes.ent is invalid"),
    ({"axes": {"hyper": {"lr": [1e-3, 1e-3]}}}, "same configuration"),
    ({"set_extra": {"train.schedule": "two-phase"}},
     "env.preference is invalid in t.toml with train.schedule='two-phase'"),
    ({"set_extra": {"hyper.gamma": 2.0}}, "hyper.gamma=2.0 is invalid in t.toml [set]"),
    ({"set_extra": {"env.scenario": "nowhere"}}, "nowhere"),
    ({"random": {"n": 2, "hyper": {"lr": {"normal": [0, 1]}}}}, "random.hyper.lr"),
    ({"random": {"n": 2, "hyper": {"lr": {"log_uniform": [0.0, 1e-3]}}}},
     "random.hyper.lr.log_uniform"),
    ({"random": {"n": 2, "hyper": {"clip": {"uniform": [0.1, 1.0]}}}}, "hyper.clip=1.0"),
    ({"random": {"n": 2, "train": {"n_envs": {"uniform": [8, 16]}}}}, "train.n_envs"),
    ({"random": {"n": 0, "hyper": {"lr": {"choice": [1e-3]}}}}, "random.n=0 is invalid"),
    ({"axes": {"hyper": {"lr": [1e-3]}}, "random": {"n": 1, "hyper": {"lr": {"choice": [1]}}}},
     "hyper.lr is invalid in t.toml: both"),
    # keys a sweep never reads: no convergence stop, its own evaluation period
    ({"set_extra": {"train.patience": 3}},
     "train.patience=3 is invalid in t.toml [set]: a sweep trains every trial for train.iters"),
    ({"axes": {"train": {"converge_tol": [0.1, 0.2]}}},
     "train.converge_tol=0.1 is invalid in t.toml [axes]: a sweep trains"),
    ({"set_extra": {"train.eval_every": 2}}, "evaluates every sweep.eval_every iterations"),
    ({"sweep": {"batch": -1}}, "sweep.batch=-1 is invalid"),
    ({"sweep": {"batches": 2}}, "sweep.batches is invalid"),
    ({"algo": "ppo-nope"}, "algo='ppo-nope' is invalid"),
    ({"extra": 1}, "unknown key 'extra'"),
])
def test_bad_specs_are_one_line_errors_naming_the_key(kw, msg):
    with pytest.raises(ConfigError) as e:
        _spec(**kw)
    assert msg in str(e.value)
    assert "\n" not in str(e.value)


def test_static_keys_split_groups_dynamic_keys_do_not():
    s = _spec({"agent": {"hidden": [[16], [8, 8]]}, "hyper": {"lr": [1e-3, 3e-4]},
               "env": {"preference": [[0.45, 0.35, 0.2], [0.8, 0.1, 0.1]]}, "seed": [0, 1]})
    groups = s.groups()
    assert len(groups) == 2
    for trials in groups.values():
        assert len(trials) == 8
        assert len({tuple(t.cfg.agent["hidden"]) for t in trials}) == 1
        # hyperparameters, preferences and seeds all vary inside one group
        assert len({(t.cfg.hyper["lr"], t.preference, t.seed) for t in trials}) == 8


def test_batch_size_rule(monkeypatch):
    import ccjax.sweep.batch as B

    assert [balanced(n, 64) for n in (1, 64, 65, 128, 130)] == [1, 64, 33, 64, 44]
    free, source = B.free_memory_bytes()
    assert free > 0 and source
    g = Group(_spec({"seed": [0]}).trials[0].cfg, 0)

    # a program needing 100 MiB per trial against 1 GiB free: half of it holds 5 trials
    monkeypatch.setattr(g, "chunk_program", lambda T, n: T)
    monkeypatch.setattr(B, "memory_bytes", lambda T: T * (100 << 20))
    monkeypatch.setattr(B, "free_memory_bytes", lambda: (1 << 30, "test"))
    size, info = g.plan_batch(64, None)
    assert info["tried"] == 64 and size == balanced(64, 5) == 5
    assert g.plan_batch(3, None)[0] == 3
    assert g.plan_batch(64, 16) == (16, {"rule": "requested", "batch": 16})
    monkeypatch.setattr(B, "memory_bytes", lambda T: None)  # no analysis: the whole group
    assert g.plan_batch(40, None)[0] == 40


def test_ledger_transitions(tmp_path):
    s = _spec({"seed": [0, 1, 2]})
    led = Ledger(tmp_path)
    led.add(s.trials)
    led.add(s.trials)  # inserted once, whatever the number of calls
    assert led.ids() == [t.id for t in s.trials]
    a, b, c = (t.id for t in s.trials)
    led.start([a, b], "g/1", 2)
    led.finish(a, "done", metrics={"reward": 0.5, "iterations": 4},
               timings={"compile_s": 1.0, "train_s": 2.0, "eval_s": 0.1})
    led.finish(b, "failed", reason="diverged: non-finite value_loss at iteration 2",
               metrics={"iterations": 2, "evals": [{"iteration": 2, "reward": float("nan")}]})
    led.start([a, c], "g/2", 2)  # a is done: not started again
    assert led.counts() == {"pending": 0, "running": 1, "done": 1, "failed": 1}
    assert led.requeue_running() == [c]
    rows = {r["id"]: r for r in led.rows()}
    assert rows[a]["attempts"] == 1 and rows[a]["status"] == "done" and rows[a]["reward"] == 0.5
    assert json.loads(rows[b]["metrics"])["evals"][0]["reward"] is None  # NaN stored as null
    assert rows[c]["status"] == "pending" and rows[c]["attempts"] == 1
    led.close()


def test_progress_bar_runs_off_a_terminal():
    from ccjax.sweep.runner import _Bar

    bar = _Bar(4, True)
    bar.set_done(1)
    bar.start_batch("g/1-of-2", 10)
    bar.advance(5, "train reward mean 0.5")
    bar.trial_done()
    bar.close()
    _Bar(4, False).advance(1, "")  # disabled: a no-op


def test_shipped_hparam_spec():
    assert "ppo-mocc-hparams" in list_sweeps()
    s = load_spec("ppo-mocc-hparams")
    assert len(s.trials) >= 64 and len(s.groups()) == 1
    keys = set().union(*(t.point for t in s.trials))
    assert {"hyper.lr", "hyper.ent_start", "hyper.ent_end", "hyper.clip", "seed"} <= keys
    assert {t.seed for t in s.trials} == {0, 1, 2, 3}
    from ccjax.sweep.spec import presets_dir

    for line in (presets_dir() / "ppo-mocc-hparams.toml").read_text().splitlines():
        st = line.strip()
        if "=" in st and not st.startswith(("#", "name", "description", "algo")):
            assert "#" in st, f"no reason given for {st!r}"


# -- a real sweep: killed after its first batch, resumed ------------------------------------------
_DRIVER = textwrap.dedent("""
    import os, signal, sys
    from ccjax.sweep import run_sweep

    starts = []

    def kill_at_second_batch(event, ids):
        if event == "start":
            starts.append(ids)
            if len(starts) == 2:  # the second batch is marked running: a hard kill now
                os.kill(os.getpid(), signal.SIGKILL)

    run_sweep(sys.argv[1], sys.argv[2], batch=int(sys.argv[3]),
              callback=kill_at_second_batch)
""")


def sweep_killed_at_second_batch(spec_path: Path, out: Path, d: Path, batch: int) -> None:
    """Run the sweep of ``spec_path`` into ``out`` in a child process (``_DRIVER``, written in
    ``d``) that SIGKILLs itself when its second batch of ``batch`` trials starts."""
    env = dict(os.environ)
    # share this session's compilation cache (tests/conftest.py) with the child
    env.update(JAX_COMPILATION_CACHE_DIR=jax.config.jax_compilation_cache_dir,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    (d / "driver.py").write_text(_DRIVER)
    p = subprocess.run([sys.executable, str(d / "driver.py"), str(spec_path), str(out),
                        str(batch)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """4 trials (seed 0, 1 x lr 1e-3 and an lr that diverges) in batches of 2, each batch one
    healthy and one diverging trial, evaluated after 2 and 4 iterations; the sweep process is
    SIGKILLed when its second batch starts, then resumed here."""
    d = tmp_path_factory.mktemp("sweep")
    spec_path = _write_spec(d / "tiny.toml", {"seed": [0, 1], "hyper.lr": [1e-3, 1e30]},
                            {"eval_every": 2})
    out = d / "out"
    sweep_killed_at_second_batch(spec_path, out, d, batch=2)
    led = Ledger(out)
    killed = {r["id"]: r for r in led.rows()}
    led.close()
    summary = run_sweep(spec_path, out, batch=2, resume=True)
    led = Ledger(out)
    final = {r["id"]: r for r in led.rows()}
    led.close()
    return dict(spec=load_spec(spec_path), out=out, killed=killed, final=final,
                summary=summary)


def test_resume_after_kill_runs_each_trial_once(killed_and_resumed):
    k = killed_and_resumed
    spec, killed, final = k["spec"], k["killed"], k["final"]
    ids = [t.id for t in spec.trials]
    first, second = ids[:2], ids[2:]
    # at the kill: the first batch recorded, the second marked running
    assert sorted(killed[i]["status"] for i in first) == ["done", "failed"]
    assert [killed[i]["status"] for i in second] == ["running", "running"]
    # after the resume: every trial exactly once, finished
    assert sorted(final) == sorted(ids)
    assert sorted(r["status"] for r in final.values()) == ["done", "done", "failed", "failed"]
    for i in first:  # not rerun
        assert final[i]["attempts"] == 1
        assert final[i]["started"] == killed[i]["started"]
        assert final[i]["ended"] == killed[i]["ended"]
    for i in second:  # rerun once
        assert final[i]["attempts"] == 2 and final[i]["started"] > killed[i]["started"]
    assert [b["trials"] for b in k["summary"]["batches"]] == [2]
    curves = sorted(p.name for p in (k["out"] / "curves").iterdir())
    assert curves == sorted(f"{i}.parquet" for i in ids)  # no temporary file left behind
    # nothing left to do: a second resume runs no batch and changes no row
    again = run_sweep(spec, k["out"], resume=True)
    assert again["batches"] == [] and again["done"] == 2 and again["failed"] == 2
    with pytest.raises(ConfigError, match="holds a sweep already"):
        run_sweep(spec, k["out"])


def test_diverging_trial_fails_alone(killed_and_resumed):
    k = killed_and_resumed
    for t in k["spec"].trials:
        row = k["final"][t.id]
        if t.cfg.hyper["lr"] > 1:
            assert row["status"] == "failed"
            assert row["reason"].startswith("diverged: non-finite")
            assert "iteration" in row["reason"]
        else:  # its batch-mate trained to the end and was evaluated
            assert row["status"] == "done" and row["reason"] is None
            assert row["iterations"] == 4 and 0.0 <= row["reward"] <= 1.0
            assert math.isfinite(row["train_reward"]) and row["best_iteration"] in (2, 4)
            assert (k["out"] / "trials" / t.id / "policy" / "policy.json").is_file()
            curve = read_curve(k["out"] / "curves" / f"{t.id}.parquet")
            assert [r["iteration"] for r in curve] == [1, 2, 3, 4]
            evals = [r["eval_reward"] for r in curve]
            assert evals[0] is None and evals[2] is None  # evaluated at 2 and 4 only
            assert max(evals[1], evals[3]) == pytest.approx(row["best_reward"])
            assert evals[3] == pytest.approx(row["reward"])


def test_batched_trial_equals_the_trial_alone(killed_and_resumed):
    """Seed 1 at lr 1e-3 trained in a batch beside a diverging trial; alone (the drivers'
    un-batched chunks, started as ccjax.train.Trainer starts a run) it computes the same: the
    same curves, evaluations, and the best evaluated parameters in its checkpoint."""
    from ccjax.agents.drivers import init_runner, make_chunk
    from ccjax.train.setup import Evaluator, build

    k = killed_and_resumed
    spec = k["spec"]
    trial = next(t for t in spec.trials if t.seed == 1 and t.cfg.hyper["lr"] < 1)
    s = build(trial.cfg, spec.pool_seed)
    key = jax.random.PRNGKey(trial.seed)
    state = s.agent.init(jax.random.fold_in(key, 0), s.env.spec, s.hyper)
    runner = init_runner(s.venv, s.agent, state, s.params, jax.random.fold_in(key, 1))
    prefs = jnp.broadcast_to(jnp.asarray(trial.preference, jnp.float32), (2, s.venv.n, 3))
    chunk = make_chunk(s.venv, s.agent, trial.cfg.train["n_steps"], 2)
    ev = Evaluator(s, 1, trial.cfg.train["eval_links"], trial.cfg.train["eval_steps"])
    w = np.asarray([trial.preference], np.float32)
    states, rewards, losses, evals = {}, [], [], {}
    for it in (2, 4):  # two chunks of 2 iterations, an evaluation after each
        state, runner, (m, st) = chunk(state, runner, s.params, prefs)
        rewards += list(np.asarray(st.reward))
        losses += list(np.asarray(m.policy_loss))
        states[it], evals[it] = state, float(ev(state, w)["reward"][0])
    curve = read_curve(k["out"] / "curves" / f"{trial.id}.parquet")
    np.testing.assert_allclose([r["reward"] for r in curve], rewards, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose([r["policy_loss"] for r in curve], losses, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose([curve[1]["eval_reward"], curve[3]["eval_reward"]],
                               [evals[2], evals[4]], rtol=1e-4, atol=1e-6)
    row = k["final"][trial.id]
    assert row["reward"] == pytest.approx(evals[4], rel=1e-4, abs=1e-6)
    _, saved, prog = load_trial(k["out"], trial.id)
    assert prog["trial"] == trial.id and prog["best_iteration"] == row["best_iteration"]
    best = states[row["best_iteration"]]
    for a, b in zip(jax.tree.leaves(saved.actor), jax.tree.leaves(best.actor), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_load_trial_names_a_missing_batch_checkpoint(killed_and_resumed, tmp_path):
    import shutil

    k = killed_and_resumed
    done = next(i for i, r in k["final"].items() if r["status"] == "done")
    copy = tmp_path / "copy"
    shutil.copytree(k["out"], copy)
    ref = json.loads(k["final"][done]["metrics"])["checkpoint"]
    shutil.rmtree(copy / "batches" / ref["batch"])
    with pytest.raises(ConfigError, match=f"trial='{done}' is invalid: its batch checkpoint"):
        load_trial(copy, done)
    failed = next(i for i, r in k["final"].items() if r["status"] == "failed")
    with pytest.raises(ConfigError, match="its status is failed"):
        load_trial(copy, failed)


# -- ccjax results ---------------------------------------------------------------------------------
def test_results_prints_sorts_filters_and_writes_csv(killed_and_resumed, capsys, tmp_path):
    out = str(killed_and_resumed["out"])
    assert main(["results", out]) == 0
    text = capsys.readouterr().out
    for t in killed_and_resumed["spec"].trials:
        assert t.id in text
    assert "hyper.lr" in text and "diverged" in text

    done = results(out, filters=["status=done"], sort="reward", descending=True)
    assert len(done) == 2 and done[0]["reward"] >= done[1]["reward"]
    assert [r["status"] for r in results(out, filters=["hyper.lr<1"])] == ["done", "done"]
    assert len(results(out, filters=["seed=1", "status!=done"])) == 1
    assert len(results(out, limit=1)) == 1

    path = tmp_path / "r.csv"
    assert main(["results", out, "--filter", "status=done", "--sort", "reward", "--desc",
                 "--csv", str(path), "--limit", "5"]) == 0
    rows = list(csv.DictReader(open(path, newline="")))
    assert [r["id"] for r in rows] == [r["id"] for r in done]
    assert {"hyper.lr", "seed", "reward", "status", "train_s"} <= set(rows[0])
    capsys.readouterr()
    assert main(["results", out, "--filter", "lr~3"]) == 2
    assert "filter='lr~3' is invalid" in capsys.readouterr().err
    assert main(["results", out, "--sort", "nope"]) == 2
    assert main(["results", str(tmp_path)]) == 2


def test_sweep_cli_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('algo = "ppo-mocc"\n[set]\ntrain.schedule = "fixed"\ntrain.iters = 2\n'
                   "[axes]\nhyper.clip = [0.2, 3.0]\n")
    assert main(["sweep", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hyper.clip=3.0 is invalid" in err
    assert not (tmp_path / "o").exists()  # nothing written, nothing traced
    assert main(["sweep", "no-such-sweep"]) == 2
    assert main(["sweep", str(bad), "--batch", "0"]) == 2
    assert main(["sweep", "ppo-mocc-hparams", "--set", "hyper.lr=0.1"]) == 2
    assert "set hyper.lr is invalid: ppo-mocc-hparams.toml sweeps it" in capsys.readouterr().err
    assert main(["sweep", "ppo-mocc-hparams", "--set", "train.iters=0"]) == 2
    assert "train.iters=0 is invalid in --set" in capsys.readouterr().err
    s = load_spec("ppo-mocc-hparams", {"train.iters": 2, "train.n_envs": 8})
    assert {t.cfg.train["iters"] for t in s.trials} == {2} and len(s.trials) >= 64


def test_a_sweep_folder_that_is_a_file_or_empty_is_refused_before_the_lock(tmp_path):
    (tmp_path / "FILE").write_text("x")
    for out, msg in ((tmp_path / "FILE", "a file, not a folder"),
                     (tmp_path / "FILE" / "s", "on the way to it is a file"),
                     ("", "out='' is invalid: a folder's path")):
        with pytest.raises(ConfigError, match=msg):
            run_sweep(_spec(axes={"seed": [0, 1]}), out, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["FILE"]


def test_results_refuse_a_filter_no_number_passes(tmp_path):
    from ccjax.sweep.ledger import select

    rows = [{"reward": 0.5, "status": "done"}, {"reward": None, "status": "pending"}]
    for f in ("reward<abc", "reward<nan", "reward=true"):
        with pytest.raises(ConfigError, match=f"filter='{f}' is invalid: reward holds numbers"):
            select(rows, [f])
    assert select(rows, ["reward<0.75"]) == rows[:1]
    assert select(rows, ["reward>=inf"]) == []
    with pytest.raises(ConfigError, match="--desc is invalid without --sort"):
        select(rows, descending=True)


def test_one_process_per_sweep_directory_and_broken_ledgers(tmp_path, capsys):
    from ccjax.dirlock import DirLock
    from ccjax.sweep.runner import _open

    spec = _spec(axes={"seed": [0, 1]})
    out = tmp_path / "s"
    # a sweep another process runs (its lock held): a second run or resume stops, one line
    with DirLock(out, "sweep"):
        with pytest.raises(ConfigError, match=r"is in use: another process \(pid \d+\)"):
            run_sweep(spec, out, progress=False)
    # a ledger killed while it was being set up (tables, no trials) starts afresh
    Ledger(out).close()
    ledger = _open(spec, out, resume=False)
    assert len(ledger.ids()) == 2
    ledger.close()
    # ... and one that is, after that, refused without --resume
    with pytest.raises(ConfigError, match="holds a sweep already"):
        _open(spec, out, resume=False)
    # a ledger that is not a database: one line, exit 2, for results and resume
    (out / "ledger.sqlite").write_bytes(os.urandom(4096))
    for f in ("ledger.sqlite-wal", "ledger.sqlite-shm"):
        (out / f).unlink(missing_ok=True)
    assert main(["results", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a readable sweep ledger" in err
    with pytest.raises(ConfigError, match="not a readable sweep ledger"):
        run_sweep(spec, out, resume=True, progress=False)

    # a resumed sweep whose [prefeval] differs from its stored evaluation's is refused before it
    # trains (its trials are pending: training would start)
    from ccjax.sweep.prefeval import _resolved, parse_prefeval, prefeval_dir

    out2 = tmp_path / "p"
    pe = {"preferences": 2, "links": 1, "duration_s": 1.0}
    _open(_spec(axes={"seed": [0, 1]}, prefeval=pe), out2, resume=False).close()
    prefeval_dir(out2).mkdir()
    (prefeval_dir(out2) / "spec.json").write_text(
        json.dumps(_resolved(parse_prefeval({**pe, "preferences": 3}))))
    with pytest.raises(ConfigError, match="prefeval preferences=2 is invalid"):
        run_sweep(_spec(axes={"seed": [0, 1]}, prefeval=pe), out2, resume=True, progress=False)
    assert {r["status"] for r in Ledger.existing(out2).rows()} == {"pending"}


# -- landmark schedules (MOCC Figure 16): steps as static groups, seeds batched within a step,
# each trial trained and evaluated on its own landmarks (checked against the drivers'
# un-batched chunk), the best state exported, iter_99 recorded, resume after a crash. In this
# file, after the fixed-preference sweep, so the programs they share are compiled once.

#: landmark trials of TINY's shapes (8 envs x 4 steps, 4 iterations in chunks of 2, 2 eval links),
#: so the compiled chunk is shared through the compilation cache with the sweep above
TINY_LM = {"train": {"schedule": "all-at-once", "iters": 4, "chunk": 2, "n_envs": 8, "n_steps": 4,
                     "eval_links": 2, "eval_steps": 8},
           "env": {"pool": 4, "episode_len": 20},
           "agent": {"n_minibatches": 2}}
#: omega = 1 and 3: the one-landmark grid evaluates at one preference, as a fixed-preference
#: trial does, so only the omega = 3 evaluation program is compiled anew (each takes ~13 s of
#: CPU to compile)
STEPS = (1 / 3, 0.25)


def _lm_spec(axes=None, set_extra=None, sweep=None):
    base = {t: dict(v) for t, v in TINY_LM.items()}
    for k, v in (set_extra or {}).items():
        t, _, kk = k.partition(".")
        base.setdefault(t, {})[kk] = v
    d = {"name": "lm", "algo": "ppo-mocc", "set": base,
         "axes": axes if axes is not None else {"train": {"landmarks_step": list(STEPS)},
                                                "seed": [0, 1]},
         "sweep": sweep or {"eval_every": 2, "batch": 2}}
    return spec_from_dict(d, "lm.toml")


@pytest.fixture(scope="module")
def crashed_and_resumed(tmp_path_factory):
    """Two landmark steps x two seeds; the sweep crashes when its second group starts (the
    first group recorded, the second marked running) and is resumed."""
    out = tmp_path_factory.mktemp("lm") / "out"
    spec = _lm_spec()
    starts = []

    def crash_at_second_batch(event, ids):
        if event == "start":
            starts.append(ids)
            if len(starts) == 2:
                raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        run_sweep(spec, out, callback=crash_at_second_batch)
    led = Ledger(out)
    crashed = {r["id"]: r for r in led.rows()}
    led.close()
    summary = run_sweep(spec, out, resume=True)
    led = Ledger(out)
    final = {r["id"]: r for r in led.rows()}
    led.close()
    return dict(spec=spec, out=out, crashed=crashed, final=final, summary=summary)


@pytest.mark.slow  # the fixture: two small sweeps' compiles and runs (~25 s of CPU)
def test_steps_are_static_groups_and_seeds_batch_together(crashed_and_resumed):
    k = crashed_and_resumed
    spec, final = k["spec"], k["final"]
    groups = spec.groups()
    assert len(groups) == 2
    for trials in groups.values():
        steps = {t.cfg.train["landmarks_step"] for t in trials}
        assert len(steps) == 1 and {t.seed for t in trials} == {0, 1}
        # both seeds of a step trained in one batch: one compiled program, vmapped
        assert len({final[t.id]["batch"] for t in trials}) == 1
        assert {final[t.id]["batch_size"] for t in trials} == {2}
        # and their chosen states share one checkpoint, a slot each
        refs = [json.loads(final[t.id]["metrics"])["checkpoint"] for t in trials]
        assert len({r["batch"] for r in refs}) == 1
        assert sorted(r["slot"] for r in refs) == [0, 1]
    assert len({final[t.id]["batch"] for t in spec.trials}) == 2
    assert len(list((k["out"] / "batches").iterdir())) == 2


def test_resume_after_a_crash_reruns_only_the_unfinished_group(crashed_and_resumed):
    k = crashed_and_resumed
    first, second = list(k["spec"].groups().values())
    assert [k["crashed"][t.id]["status"] for t in first] == ["done", "done"]
    assert [k["crashed"][t.id]["status"] for t in second] == ["running", "running"]
    for t in first:  # not rerun
        assert k["final"][t.id]["attempts"] == 1
        assert k["final"][t.id]["ended"] == k["crashed"][t.id]["ended"]
    for t in second:
        assert k["final"][t.id]["attempts"] == 2 and k["final"][t.id]["status"] == "done"
    assert [b["trials"] for b in k["summary"]["batches"]] == [2]


def test_each_trial_trains_and_is_evaluated_on_its_own_landmarks(crashed_and_resumed):
    k = crashed_and_resumed
    for trials in k["spec"].groups().values():
        step = trials[0].cfg.train["landmarks_step"]
        grid = simplex_grid(step)
        group = Group(trials[0].cfg, k["spec"].pool_seed)
        # what the environments train on: environment i on landmark i mod omega, every trial
        w = np.asarray(group.prefs(trials, 0, 2))
        assert w.shape == (2, len(trials), 8, 3)
        np.testing.assert_allclose(w, np.broadcast_to(spread(grid, 8), w.shape), atol=1e-7)
        assert group.n_eval_prefs == len(grid)
        for t in trials:
            row = k["final"][t.id]
            m = json.loads(row["metrics"])
            # the best evaluation, landmark by landmark, is the trial's own landmark set
            got = np.asarray([x["w"] for x in m["landmarks"]])
            np.testing.assert_allclose(got, grid, atol=1e-6)
            assert np.mean([x["reward"] for x in m["landmarks"]]) == pytest.approx(
                row["best_reward"], rel=1e-5)
            assert [e["iteration"] for e in m["evals"]] == [2, 4]
            # a landmark-trained policy has no single preference (as `ccjax train` exports it)
            pol = json.loads((k["out"] / "trials" / t.id / "policy" / "policy.json").read_text())
            assert pol["preference"] is None
            # iter_99: the first evaluation within 1% of the best
            assert row["iter_99"] in (2, 4) and row["iter_99"] <= row["best_iteration"]
            first = next(e for e in m["evals"] if e["iteration"] == row["iter_99"])
            assert first["reward"] >= 0.99 * row["best_reward"]
            assert all(e["reward"] < 0.99 * row["best_reward"] for e in m["evals"]
                       if e["iteration"] < row["iter_99"])
            # the training wall time up to iter_99: the curve's at that iteration
            curve = read_curve(k["out"] / "curves" / f"{t.id}.parquet")
            at = next(r["wall_s"] for r in curve if r["iteration"] == row["iter_99"])
            assert row["train_99_s"] == pytest.approx(at)
            assert 0 < row["train_99_s"] <= row["train_s"]


@pytest.mark.slow  # compiles the reference Evaluator at 3 landmarks (~15 s of CPU)
def test_landmark_trial_equals_the_trial_alone(crashed_and_resumed):
    """Seed 1 at step 1/4 (omega = 3), trained beside seed 0: alone (the drivers' un-batched
    chunk fed all-at-once's preferences, ccjax.train's Evaluator at the 3 landmarks) it computes
    the same curves and landmark evaluations, and its checkpoint holds the best state."""
    from ccjax.agents.drivers import init_runner, make_chunk
    from ccjax.train.setup import Evaluator, build

    k = crashed_and_resumed
    spec = k["spec"]
    trial = next(t for t in spec.trials if t.seed == 1 and t.cfg.train["landmarks_step"] == 0.25)
    s = build(trial.cfg, spec.pool_seed)
    key = jax.random.PRNGKey(trial.seed)
    state = s.agent.init(jax.random.fold_in(key, 0), s.env.spec, s.hyper)
    runner = init_runner(s.venv, s.agent, state, s.params, jax.random.fold_in(key, 1))
    sched = AllAtOnce(8, step=0.25)  # what `ccjax train --schedule all-at-once` feeds its envs
    seg = sched.segment(0, [])
    prefs = jnp.asarray(np.stack([seg.prefs(i) for i in range(2)]))
    chunk = make_chunk(s.venv, s.agent, 4, 2)
    ev = Evaluator(s, len(sched.eval_prefs), 2, 8)
    states, rewards, evals, per = {}, [], {}, {}
    for it in (2, 4):
        state, runner, (m, st) = chunk(state, runner, s.params, prefs)
        rewards += list(np.asarray(st.reward))
        res = ev(state, sched.eval_prefs)
        states[it], evals[it], per[it] = state, float(res["reward"].mean()), res["reward"]
    curve = read_curve(k["out"] / "curves" / f"{trial.id}.parquet")
    np.testing.assert_allclose([r["reward"] for r in curve], rewards, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose([curve[1]["eval_reward"], curve[3]["eval_reward"]],
                               [evals[2], evals[4]], rtol=1e-4, atol=1e-6)
    row = k["final"][trial.id]
    best = row["best_iteration"]
    assert best == max((2, 4), key=lambda i: evals[i])
    landmarks = json.loads(row["metrics"])["landmarks"]
    np.testing.assert_allclose([x["reward"] for x in landmarks], per[best], rtol=1e-4,
                               atol=1e-6)
    _, saved, prog = load_trial(k["out"], trial.id)
    assert prog["best_iteration"] == best and "landmarks" not in prog
    for a, b in zip(jax.tree.leaves(saved.actor), jax.tree.leaves(states[best].actor),
                    strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_prefeval_takes_a_landmark_trained_policy(crashed_and_resumed):
    """A landmark-trained policy stores no preference (as `ccjax train` exports it); the
    preference evaluation runs it at each of its preferences. Settings as tests/test_plots.py's
    (4 preferences x 2 fluid links of 2 s), so the compiled program is shared."""
    from ccjax.sweep.prefeval import parse_prefeval, preference_set, read_results, run_prefeval

    k = crashed_and_resumed
    tid = next(t.id for t in k["spec"].trials if t.cfg.train["landmarks_step"] == 0.25)
    spec = parse_prefeval({"preferences": 4, "links": 2, "duration_s": 2.0, "model": "fluid",
                           "classic": []})
    out = run_prefeval(k["out"], spec, trials=[tid])
    assert out["trials_evaluated"] == [tid]
    _, trials, _ = read_results(k["out"])
    rows = trials[tid]
    np.testing.assert_allclose(np.unique(np.stack([rows["w_thr"], rows["w_lat"],
                                                   rows["w_loss"]], 1), axis=0),
                               np.unique(preference_set(4, 0), axis=0), atol=1e-9)
    assert len(rows["reward"]) == 8 and np.all(np.isfinite(rows["reward"]))


def test_results_show_iter_99(crashed_and_resumed):
    rows = results(crashed_and_resumed["out"], sort="train.landmarks_step")
    assert [r["train.landmarks_step"] for r in rows] == [0.25, 0.25, 1 / 3, 1 / 3]
    assert all(r["iter_99"] in (2, 4) for r in rows)


def test_two_phase_sweep_trains_the_trainers_sequence(tmp_path):
    """Two-phase in a sweep: the bootstrap vectors spread over the environments, then one
    landmark at a time in Algorithm 1's order, ``visit_iters`` each, cycling; the same
    preferences ``ccjax train``'s TwoPhase gives, iteration by iteration."""
    spec = _lm_spec({"seed": [0, 1]}, {"train.schedule": "two-phase", "train.landmarks_step": 0.25,
                                    "train.bootstrap_iters": 2, "train.visit_iters": 1})
    sched = trial_schedule(spec.trials[0].cfg)
    ref = TwoPhase(8, step=0.25, bootstrap_iters=2, visit_iters=1, max_cycles=3)
    want = []
    for k in range(1 + 3 * 3):  # the bootstrap segment, then 3 cycles of 3 visits
        seg = ref.segment(k, [float(i) for i in range(k)])  # rising: never converged
        want += [seg.prefs(i) for i in range(seg.n_iters)]
    np.testing.assert_allclose(sched.prefs(0, len(want)), np.stack(want), atol=1e-7)
    np.testing.assert_allclose(sched.prefs(0, 1)[0], spread(np.asarray(BOOTSTRAP), 8))
    assert not sched.stationary
    summary = run_sweep(spec, tmp_path / "out")
    assert summary["done"] == 2
    led = Ledger(tmp_path / "out")
    for r in led.rows():
        assert len(json.loads(r["metrics"])["landmarks"]) == 3  # evaluated at every landmark
        assert (tmp_path / "out" / "trials" / r["id"] / "policy" / "policy.json").is_file()
    led.close()


@pytest.mark.parametrize("kw, msg", [
    ({"set_extra": {"train.n_envs": 4}, "axes": {"train": {"landmarks_step": [0.2]}}},
     "train.n_envs=4 is invalid in lm.toml: all-at-once puts environment i on landmark i mod 6"),
    ({"set_extra": {"train.n_envs": 2}}, "on landmark i mod 3"),
    ({"set_extra": {"env.preference": [0.5, 0.3, 0.2]}},
     "env.preference is invalid in lm.toml with train.schedule='all-at-once'"),
    ({"axes": {"train": {"landmarks_step": [0.3]}}}, "train.landmarks_step=0.3 is invalid"),
    ({"set_extra": {"train.schedule": "two-phase", "train.n_envs": 2}, "axes": {}},
     "two-phase bootstraps on 3 preferences"),
])
def test_bad_landmark_specs_are_one_line_errors(kw, msg):
    with pytest.raises(ConfigError) as e:
        _lm_spec(**kw)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_reached_is_the_first_evaluation_within_one_percent():
    ev = [{"iteration": 60, "reward": 0.5}, {"iteration": 120, "reward": 0.895},
          {"iteration": 180, "reward": 0.9}, {"iteration": 240, "reward": 0.7}]
    assert _reached(ev, 0.9) == 120
    assert _reached(ev[:1] + ev[2:], 0.9) == 180
    neg = [{"iteration": 2, "reward": -1.0}, {"iteration": 4, "reward": -0.995}]
    assert _reached(neg, -0.99) == 4  # within 1% of |best| below a negative best
    assert _reached([{"iteration": 2, "reward": None}], 0.9) is None


def old_ledger(path: Path) -> sqlite3.Connection:
    """A ledger file as sweeps wrote it before the later columns existed (open, uncommitted)."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE trials (id TEXT PRIMARY KEY, idx INTEGER NOT NULL, group_id TEXT "
               "NOT NULL, point TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, "
               "reason TEXT, attempts INTEGER NOT NULL DEFAULT 0, batch TEXT, batch_size "
               "INTEGER, iterations INTEGER, reward REAL, utilization REAL, latency_ratio REAL, "
               "loss_rate REAL, train_reward REAL, best_reward REAL, best_iteration INTEGER, "
               "metrics TEXT, compile_s REAL, train_s REAL, eval_s REAL, started REAL, "
               "ended REAL)")
    return db


def test_an_older_ledger_gains_the_new_columns(tmp_path):
    db = old_ledger(tmp_path / "ledger.sqlite")
    db.commit()
    db.close()
    led = Ledger(tmp_path)
    spec = _lm_spec({"seed": [0]}, {"train.landmarks_step": 0.25})
    led.add(spec.trials)
    tid = spec.trials[0].id
    led.start([tid], "g/1", 1)
    led.finish(tid, "done", metrics={"iterations": 4, "iter_99": 2},
               timings={"train_s": 3.0, "train_99_s": 1.5})
    row = led.rows()[0]
    assert row["iter_99"] == 2 and row["train_99_s"] == 1.5
    led.close()


def test_shipped_landmark_spec():
    s = load_spec("mocc-landmarks")
    assert len(s.trials) == 5 and len(s.groups()) == 5
    omegas = []
    for t in s.trials:
        assert t.cfg.name == "ppo-mocc" and t.cfg.train["schedule"] == "all-at-once"
        omega = len(simplex_grid(t.cfg.train["landmarks_step"]))
        omegas.append(omega)
        # every landmark the same number of environments, the batch near the preset's 288
        assert t.cfg.train["n_envs"] % omega == 0
        assert 288 <= t.cfg.train["n_envs"] < 288 + omega
    assert omegas == [3, 6, 10, 36, 171]
    assert s.eval_every > 0 and s.trials[0].cfg.train["iters"] % s.eval_every == 0
    text = (presets_dir() / "mocc-landmarks.toml").read_text()
    for line in text.splitlines():
        st = line.strip()
        if "=" in st and not st.startswith(("#", "name", "description", "algo", "omega")):
            assert "#" in st, f"no reason given for {st!r}"


@pytest.mark.parametrize("name", sorted(p.stem for p in presets_dir().glob("*.toml")))
def test_every_shipped_spec_loads_and_gives_its_reasons(name):
    """Each spec in sweeps/ expands into trials and static groups, and every value it
    sets says why (a line opening a multi-line axis is exempt; its entries are not)."""
    from ccjax.sweep.spec import presets_dir

    s = load_spec(name)
    assert s.trials and s.groups()
    for t in s.trials:
        assert t.cfg.train["iters"] >= 1 and t.cfg.name
    for line in (presets_dir() / f"{name}.toml").read_text().splitlines():
        st = line.strip()
        if ("=" in st and not st.startswith(("#", "name", "description", "algo"))
                and not st.endswith("[")):
            assert "#" in st, f"{name}: no reason given for {st!r}"


def test_a_spec_with_a_key_sweeps_ignore_loads_to_resume(tmp_path):
    # A sweep started before those keys were refused may hold one; it is in its trials' ids,
    # so only resuming may load it (the runner then requires the very trials its ledger holds).
    path = _write_spec(tmp_path / "old.toml", {"hyper.lr": [1e-3, 2e-3]}, {})
    path.write_text(path.read_text().replace("[axes]", "train.eval_every = 4\n[axes]"))
    with pytest.raises(ConfigError, match="train.eval_every=4 is invalid"):
        load_spec(path)
    assert len(load_spec(path, resuming=True).trials) == 2
    with pytest.raises(ConfigError, match="train.eval_every=4 is invalid"):
        load_spec(path)  # the allowance ends with the call
