"""Landmark schedules in sweeps (MOCC Figure 16): landmark steps as static groups, seeds batched
within a step, each trial trained and evaluated on its own landmarks (checked against the
drivers' un-batched chunk), the best state exported, iter_99 recorded, resume after a crash."""

from __future__ import annotations

import json
import sqlite3

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.agents.landmarks import BOOTSTRAP, simplex_grid
from ccjax.errors import ConfigError
from ccjax.sweep import Ledger, load_spec, load_trial, read_curve, results, run_sweep
from ccjax.sweep.batch import Group
from ccjax.sweep.runner import _reached
from ccjax.sweep.schedule import trial_schedule
from ccjax.sweep.spec import presets_dir, spec_from_dict
from ccjax.train.schedules import AllAtOnce, TwoPhase, spread

#: tiny trials, the shapes of tests/test_sweep.py's (so the compiled chunk is shared through the
#: session's compilation cache): 8 envs x 4 steps, 4 iterations in chunks of 2, 2 eval links
TINY = {"train": {"schedule": "all-at-once", "iters": 4, "chunk": 2, "n_envs": 8, "n_steps": 4,
                  "eval_links": 2, "eval_steps": 8},
        "env": {"pool": 4, "episode_len": 20},
        "agent": {"n_minibatches": 2}}
#: omega = 1 and 3: the one-landmark grid evaluates at one preference, as a fixed-preference
#: trial does, so only the omega = 3 evaluation program is compiled anew (each takes ~13 s of
#: CPU to compile)
STEPS = (1 / 3, 0.25)


def _spec(axes=None, set_extra=None, sweep=None):
    base = {t: dict(v) for t, v in TINY.items()}
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
    spec = _spec()
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
    assert len({final[t.id]["batch"] for t in spec.trials}) == 2


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
    state = s.agent.init(jax.random.fold_in(key, 0), s.env.obs_dim, s.env.action_dim, s.hyper)
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
    spec = _spec({"seed": [0, 1]}, {"train.schedule": "two-phase", "train.landmarks_step": 0.25,
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
        _spec(**kw)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_reached_is_the_first_evaluation_within_one_percent():
    ev = [{"iteration": 60, "reward": 0.5}, {"iteration": 120, "reward": 0.895},
          {"iteration": 180, "reward": 0.9}, {"iteration": 240, "reward": 0.7}]
    assert _reached(ev, 0.9) == 120
    assert _reached(ev[:1] + ev[2:], 0.9) == 180
    neg = [{"iteration": 2, "reward": -1.0}, {"iteration": 4, "reward": -0.995}]
    assert _reached(neg, -0.99) == 4  # within 1% of |best| below a negative best
    assert _reached([{"iteration": 2, "reward": None}], 0.9) is None


def test_an_older_ledger_gains_the_new_columns(tmp_path):
    db = sqlite3.connect(tmp_path / "ledger.sqlite")
    db.execute("CREATE TABLE trials (id TEXT PRIMARY KEY, idx INTEGER NOT NULL, group_id TEXT "
               "NOT NULL, point TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, "
               "reason TEXT, attempts INTEGER NOT NULL DEFAULT 0, batch TEXT, batch_size "
               "INTEGER, iterations INTEGER, reward REAL, utilization REAL, latency_ratio REAL, "
               "loss_rate REAL, train_reward REAL, best_reward REAL, best_iteration INTEGER, "
               "metrics TEXT, compile_s REAL, train_s REAL, eval_s REAL, started REAL, "
               "ended REAL)")
    db.commit()
    db.close()
    led = Ledger(tmp_path)
    spec = _spec({"seed": [0]}, {"train.landmarks_step": 0.25})
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
