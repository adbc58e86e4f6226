"""Algorithm presets, training schedules, the training loop's run directory and resume."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from ccjax.agents.landmarks import BOOTSTRAP, simplex_grid, traversal_order
from ccjax.algos import _ALLOWED, SCHEMA, list_algos, load_algo
from ccjax.errors import ConfigError
from ccjax.train import adapt, make_schedule, train
from ccjax.train.schedules import AllAtOnce, Fixed, TwoPhase, converged, spread


def test_presets_load_with_sources():
    assert {"ppo-mocc", "aurora"} <= set(list_algos())
    m = load_algo("ppo-mocc")
    assert m.agent["hidden"] == [64, 32] and m.agent["pref_dim"] == 3
    assert (m.hyper["lr"], m.hyper["clip"], m.hyper["gamma"]) == (1e-3, 0.2, 0.99)
    assert (m.hyper["ent_start"], m.hyper["ent_end"], m.hyper["ent_iters"]) == (0.01, 0.001, 1000)
    assert m.env["alpha"] == 0.025 and m.env["history"] == 10
    assert m.train["landmarks_step"] == 0.1
    a = load_algo("aurora")
    assert a.agent["hidden"] == [32, 16] and a.agent["pref_dim"] == 0
    assert a.env["reward"] == "aurora"
    # every value in the shipped presets carries a comment (its source or the reason)
    from ccjax.algos import presets_dir

    for name in ("ppo-mocc", "aurora"):
        for line in (presets_dir() / f"{name}.toml").read_text().splitlines():
            s = line.strip()
            if "=" in s and not s.startswith("#") and not s.startswith(("name", "description",
                                                                        "source")):
                assert "#" in s, f"{name}.toml: no source for {s!r}"


@pytest.mark.parametrize("ov, msg", [
    ({"train.landmarks_step": 0.5}, "train.landmarks_step=0.5 is invalid"),
    ({"hyper.clip": 1.5}, "hyper.clip=1.5 is invalid"),
    ({"agent.hidden": [64, -1]}, "agent.hidden"),
    ({"train.schedule": "random"}, "train.schedule='random' is invalid"),
    ({"train.bogus": 1}, "unknown key"),
    ({"nokey": 1}, "use table.key"),
    ({"train.n_envs": 2.5}, "train.n_envs=2.5 is invalid"),
])
def test_bad_overrides_are_one_line_errors(ov, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        load_algo("ppo-mocc", ov)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("key", [f"{t}.{k}" for t, keys in SCHEMA.items() for k in keys])
def test_every_key_states_what_it_allows(key):
    # a value of no key's type: every error says what is allowed, never "the allowed range"
    with pytest.raises(ConfigError) as e:
        load_algo("ppo-mocc", {key: {}})
    assert str(e.value).endswith(f": {_ALLOWED[key.partition('.')[2]]}")
    assert "allowed range" not in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("ov, msg", [
    ({"agent.pn_width": 0}, "agent.pn_width=0 is invalid in overrides: an integer > 0"),
    ({"hyper.lr": 0}, "hyper.lr=0 is invalid in overrides: a finite number > 0"),
    ({"hyper.gamma": 2.0}, "a number in (0, 1]"),
    ({"train.n_envs": 1}, "train.n_envs=1 is invalid in overrides: an integer >= 2"),
    ({"env.tick_ms": 200}, "a number in (0, 100] ms"),
    ({"env.init_rate": [0.3, math.inf]}, "[low, high] of finite numbers"),
    ({"env.rate_bounds_pkts": [10.0, math.inf]}, "[min, max] of finite numbers"),
    ({"agent.n_minibatches": 33, "train.n_envs": 4, "train.n_steps": 8},
     "agent.n_minibatches=33 is invalid with train.n_envs=4 x train.n_steps=8 = 32 samples"),
])
def test_range_errors_state_the_range(ov, msg):
    with pytest.raises(ConfigError) as e:
        load_algo("ppo-mocc", ov)
    assert msg in str(e.value)
    # as many minibatches as samples is the most an update can split them into
    load_algo("ppo-mocc", {"agent.n_minibatches": 32, "train.n_envs": 4, "train.n_steps": 8})


def test_unknown_preset_and_bad_file(tmp_path):
    with pytest.raises(ConfigError, match="no such preset"):
        load_algo("ppo-nope")
    p = tmp_path / "x.toml"
    p.write_text("[agent]\nhidden = [64]\nwidth = 3\n")
    with pytest.raises(ConfigError, match="agent.width is invalid in x.toml: unknown key"):
        load_algo(str(p))


def test_two_phase_schedule_follows_algorithm_1():
    s = TwoPhase(12, step=0.1, bootstrap_iters=30, visit_iters=5, max_cycles=3)
    seg = s.segment(0, [])
    assert seg.phase == "bootstrap" and seg.n_iters == 30 and seg.evaluate
    boot = seg.prefs(0)
    assert boot.shape == (12, 3)
    # the environments are split evenly between MOCC's three bootstrap preferences
    for w in BOOTSTRAP:
        assert np.isclose(boot, w).all(1).sum() == 4
    grid = simplex_grid(0.1)
    order = grid[traversal_order(grid, 0.1)]
    for k in range(36):
        seg = s.segment(1 + k, [0.5])
        assert seg.phase == "traverse" and seg.cycle == 1 and seg.n_iters == 5
        np.testing.assert_allclose(seg.prefs(0), np.broadcast_to(order[k], (12, 3)), atol=1e-6)
        assert seg.evaluate == (k == 35)
    assert s.max_iters == 30 + 3 * 36 * 5
    # after the cap of cycles there is nothing left
    assert s.segment(1 + 3 * 36, [0.5, 0.6, 0.7, 0.8]) is None


def test_convergence_stops_traversal():
    assert not converged([0.5], 1, 0.01)
    assert not converged([0.80, 0.801], 1, 0.01)  # one cycle is not enough (patience 2)
    assert converged([0.80, 0.801, 0.79], 1, 0.01)
    assert not converged([0.80, 0.79, 0.85], 1, 0.01)
    assert converged([0.80, 0.801], 1, 0.01, patience=1)
    s = TwoPhase(6, step=0.25, bootstrap_iters=2, visit_iters=1, max_cycles=10, min_cycles=2)
    # evals: after bootstrap, then after each cycle of 3 visits
    assert s.segment(1 + 3, [0.5, 0.7]) is not None  # cycle 2 starts: only one cycle judged
    assert s.segment(1 + 6, [0.5, 0.7, 0.7001]) is not None  # one flat cycle: go on
    assert s.segment(1 + 9, [0.5, 0.7, 0.7001, 0.69]) is None  # two flat cycles: stop


def test_all_at_once_has_the_same_budget():
    a = AllAtOnce(72, step=0.1, bootstrap_iters=180, visit_iters=5, max_cycles=4)
    t = TwoPhase(72, step=0.1, bootstrap_iters=180, visit_iters=5, max_cycles=4)
    assert a.max_iters == t.max_iters
    seg = a.segment(0, [])
    p = seg.prefs(0)
    # every landmark trains in the same batch, twice each with 72 envs
    assert len(np.unique(p, axis=0)) == 36
    np.testing.assert_allclose(p, spread(simplex_grid(0.1), 72))


def test_requirement_replay_batches():
    pool = np.asarray(simplex_grid(0.25), np.float32)
    f = Fixed(8, (0.5, 0.2, 0.3), iters=20, eval_every=8, replay=pool, probe=pool, seed=3)
    seg = f.segment(0, [])
    assert seg.n_current == 4 and seg.n_iters == 8
    p = seg.prefs(2)
    # MOCC Eq. 6: half on the current preference, half on one stored old preference
    np.testing.assert_allclose(p[:4], np.broadcast_to([0.5, 0.2, 0.3], (4, 3)), atol=1e-6)
    assert len(np.unique(p[4:], axis=0)) == 1
    assert any(np.allclose(p[4], w) for w in pool)
    # a pure function of (seed, iteration): a resumed run replays the same preferences
    np.testing.assert_array_equal(p, f.segment(0, []).prefs(2))
    olds = {tuple(f.segment(k, []).prefs(i)[4]) for k in range(3) for i in range(4)}
    assert len(olds) > 1
    assert f.segment(2, []).n_iters == 4 and f.segment(3, []) is None
    assert f.eval_prefs.shape == (1 + len(pool), 3)
    no = Fixed(8, (0.5, 0.2, 0.3), iters=8)
    assert no.segment(0, []).n_current == 0


TINY = {"train.n_envs": 8, "train.n_steps": 8, "train.bootstrap_iters": 4,
        "train.visit_iters": 1, "train.landmarks_step": 0.25, "train.max_cycles": 2,
        "train.min_cycles": 2, "train.eval_links": 1, "train.eval_steps": 8, "train.chunk": 2,
        "env.pool": 4, "train.checkpoint_every": 2, "train.adapt_iters": 4,
        "train.eval_every": 2, "env.episode_len": 20, "agent.n_minibatches": 2,
        "train.anneal": "linear"}


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_train_resume_and_adapt(tmp_path):
    cfg = load_algo("ppo-mocc", TINY)
    out = tmp_path / "run"
    # a run stopped after 5 iterations (as if killed), then resumed to the end
    s1 = train(cfg, out, progress=False, max_iters=5)
    assert not s1["done"] and s1["iterations"] == 5
    with pytest.raises(ConfigError, match="holds a run already"):
        train(cfg, out, progress=False)
    s2 = train(cfg, out, resume=True, progress=False)
    assert s2["done"]
    total = 4 + 2 * 3  # bootstrap + two cycles over the 3 landmarks of step 1/4
    assert s2["iterations"] == total
    rows = _rows(out / "metrics.csv")
    assert [int(r["iteration"]) for r in rows] == list(range(1, total + 1))
    assert [r["phase"] for r in rows[:4]] == ["bootstrap"] * 4
    # PPO1's linear schedule over the planned run, unbroken by the resume at iteration 5
    lr = cfg.hyper["lr"]
    assert [float(r["lr"]) for r in rows] == pytest.approx(
        [lr * (1 - i / total) for i in range(total)], rel=1e-5)
    ev = _rows(out / "eval.csv")
    # one evaluation of the 3 landmarks after the bootstrap and after each cycle, each once
    assert len(ev) == 3 * 3
    assert len({(r["iteration"], r["w_thr"], r["w_lat"]) for r in ev}) == len(ev)
    assert all(0.0 <= float(r["reward"]) <= 1.0 for r in ev)
    assert (out / "policy" / "policy.json").is_file()
    meta = json.loads((out / "policy" / "policy.json").read_text())
    assert meta["network"]["pref_dim"] == 3 and meta["network"]["hidden"] == [64, 32]
    # a different config cannot resume this run
    with pytest.raises(ConfigError, match="differs"):
        train(load_algo("ppo-mocc", {**TINY, "hyper.lr": 3e-4}), out, resume=True,
              progress=False)

    # best/ holds the whole learner state of the best evaluation, which adapt continues from
    assert sorted(p.name for p in (out / "best").iterdir() if p.name.isdigit()) == [
        str(s2["best_iteration"])]
    a = adapt(out, (0.5, 0.2, 0.3), tmp_path / "ad", progress=False)
    assert a["done"] and a["iterations"] == 4
    src_meta = json.loads((tmp_path / "ad" / "config.json").read_text())["meta"]
    assert src_meta["from_iteration"] == s2["best_iteration"]
    arows = _rows(tmp_path / "ad" / "metrics.csv")
    # an adaptation anneals over its own 4 iterations, from the source's iteration on
    assert [float(r["lr"]) for r in arows] == pytest.approx(
        [lr, 0.75 * lr, 0.5 * lr, 0.25 * lr], rel=1e-5)
    assert all(r["reward_replay"] != "" for r in arows)
    aev = _rows(tmp_path / "ad" / "eval.csv")
    # the new preference and the 3 stored landmarks, evaluated before adapting and every 2
    # iterations
    assert len(aev) == 3 * 4
    assert {r["iteration"] for r in aev} == {"0", "2", "4"}
    # (without replay: tests/test_adapt.py)
    with pytest.raises(ConfigError, match="preference"):
        adapt(out, (0.5, 0.5, 0.5), tmp_path / "bad", progress=False)
    # a resumed adaptation must be the same adaptation: preference, replay and length
    for kw, key in (({"preference": (0.2, 0.2, 0.6)}, "preference"),
                    ({"replay": False}, "replay"), ({"iters": 8}, "iters")):
        args = {"preference": (0.5, 0.2, 0.3), **kw}
        with pytest.raises(ConfigError, match=f"{key} differs"):
            adapt(out, args.pop("preference"), tmp_path / "ad", resume=True, progress=False,
                  **args)
    # nothing to do, or a folder without a run to resume: refused before anything is built
    for bad in ({"max_iters": 0}, {"max_iters": -3}):
        with pytest.raises(ConfigError, match="max_iters"):
            train(cfg, tmp_path / "x", progress=False, **bad)
    with pytest.raises(ConfigError, match="no config.json"):
        adapt(out, (0.5, 0.2, 0.3), tmp_path / "empty", resume=True, progress=False)
    assert not (tmp_path / "empty").exists()
    # one process per run directory: another one's lock stops a second, in one line
    from ccjax.dirlock import DirLock

    with DirLock(out, "training run"), pytest.raises(ConfigError, match="is in use"):
        train(cfg, out, resume=True, progress=False)


def test_fixed_schedule_needs_iters():
    cfg = load_algo("ppo-mocc", {"train.schedule": "fixed"})
    with pytest.raises(ConfigError, match="train.iters is missing"):
        make_schedule(cfg)


@pytest.mark.slow
def test_aurora_trains_on_one_preference_and_exports(tmp_path):
    cfg = load_algo("aurora", {**{k: v for k, v in TINY.items() if k not in
                                  ("train.bootstrap_iters", "train.visit_iters",
                                   "train.landmarks_step", "train.max_cycles",
                                   "train.min_cycles", "train.adapt_iters")},
                               "train.iters": 4, "env.reward": "mocc",
                               "env.preference": [0.45, 0.35, 0.2]})
    s = train(cfg, tmp_path / "aurora", progress=False)
    assert s["done"] and s["iterations"] == 4
    ev = _rows(tmp_path / "aurora" / "eval.csv")
    # evaluated before training and every 2 iterations, on its one preference
    assert [r["iteration"] for r in ev] == ["0", "2", "4"]
    meta = json.loads((tmp_path / "aurora" / "policy" / "policy.json").read_text())
    assert meta["network"]["pref_dim"] == 0 and meta["network"]["hidden"] == [32, 16]
    assert meta["preference"] is None


@pytest.mark.slow
def test_a_kill_between_the_checkpoint_and_the_export_is_mended_on_resume(tmp_path, monkeypatch):
    # best/ and policy/ are written after the checkpoint that records a new best evaluation;
    # a run killed in between resumes from that checkpoint and exports it then, so they never
    # hold a model that eval.csv and summary.json do not
    from ccjax.train.store import Checkpoints
    from ccjax.train.trainer import Trainer

    cfg = load_algo("ppo-mocc", TINY)
    out = tmp_path / "run"
    real = Trainer._export

    def killed(self, state, prog):
        raise KeyboardInterrupt  # the kill, after the checkpoint

    monkeypatch.setattr(Trainer, "_export", killed)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, out, progress=False)
    monkeypatch.setattr(Trainer, "_export", real)
    ck = Checkpoints(out / "checkpoints")
    at, prog = ck.latest(), ck.progress()
    ck.close()
    assert prog["best_iteration"] == prog["iteration"] == at
    assert not (out / "best").exists() and not (out / "policy").exists()
    s = train(cfg, out, resume=True, progress=False, max_iters=at)  # no further iteration
    assert s["best_iteration"] == at
    best = Checkpoints(out / "best", keep=1)
    assert best.latest() == at
    best.close()
    assert (out / "policy" / "policy.json").is_file()


def test_a_run_started_with_an_option_its_schedule_ignores_still_resumes(tmp_path, monkeypatch):
    # Runs made before the schedule's option rules may hold such an option (``--iters`` with
    # two-phase); a resume is held to its own config.json instead, so it is not stranded.
    import json

    import ccjax.train as T
    from ccjax.algos import load_algo
    from ccjax.errors import ConfigError

    class Built(Exception):
        pass

    def built(*a, **k):
        raise Built

    monkeypatch.setattr(T, "build", built)
    cfg = load_algo("ppo-mocc", {"train.iters": 3})
    with pytest.raises(ConfigError, match="only the fixed schedule uses it"):
        T.train(cfg, tmp_path / "new")
    run = tmp_path / "old"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(
        {"algo": cfg.to_dict(), "seed": 0, "schedule": "TwoPhase", "meta": {}}, default=str))
    with pytest.raises(Built):
        T.train(cfg, run, resume=True)
    # and a different option still stops a resume, naming the key
    with pytest.raises(ConfigError, match="train.iters differs"):
        T.train(load_algo("ppo-mocc", {"train.iters": 4}), run, resume=True)
