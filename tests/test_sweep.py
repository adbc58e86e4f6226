"""Sweeps: spec expansion and validation, grouping by static shape, the batched program against
a trial run alone, resume after a kill, failure isolation, and ``ccjax results``."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.cli import main
from ccjax.errors import ConfigError
from ccjax.sweep import Ledger, load_spec, load_trial, read_curve, results, run_sweep
from ccjax.sweep.batch import Group, balanced
from ccjax.sweep.spec import list_sweeps, spec_from_dict

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

    run_sweep(sys.argv[1], sys.argv[2], batch=2, callback=kill_at_second_batch)
""")


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """4 trials (seed 0, 1 x lr 1e-3 and an lr that diverges) in batches of 2, each batch one
    healthy and one diverging trial, evaluated after 2 and 4 iterations; the sweep process is
    SIGKILLed when its second batch starts, then resumed here."""
    d = tmp_path_factory.mktemp("sweep")
    spec_path = _write_spec(d / "tiny.toml", {"seed": [0, 1], "hyper.lr": [1e-3, 1e30]},
                            {"eval_every": 2})
    out = d / "out"
    env = dict(os.environ)
    # share this session's compilation cache (tests/conftest.py) with the child
    env.update(JAX_COMPILATION_CACHE_DIR=jax.config.jax_compilation_cache_dir,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    (d / "driver.py").write_text(_DRIVER)
    p = subprocess.run([sys.executable, str(d / "driver.py"), str(spec_path), str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
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
    state = s.agent.init(jax.random.fold_in(key, 0), s.env.obs_dim, s.env.action_dim, s.hyper)
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
