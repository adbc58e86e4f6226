"""Sweeps of any registered agent kind: AUTO's envelope agent (replay buffer, per-episode
preferences, two objectives) through the normal sweep entry point: batched trials, NaN
quarantine, resume after a crash, the best state kept without its replay buffer, one exported
policy per finished trial. PPO's sweeps are tests/test_sweep.py's."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import traverse_util

from ccjax.errors import ConfigError
from ccjax.sweep import Ledger, load_spec, load_trial, read_curve, run_sweep
from ccjax.sweep.batch import Group, kept, learnable, with_kept
from ccjax.sweep.runner import losses
from ccjax.sweep.schedule import trial_schedule
from ccjax.sweep.spec import spec_from_dict
from ccjax.train.schedules import PerEpisode
from ccjax.train.setup import build

#: AUTO shrunk to seconds: a 16-wide trunk, a 64-transition buffer, batches of 16 (ready after
#: the first iteration), 8 environments x 4 steps with no tick budget (every step ends an MI,
#: so every step is a transition), 3 iterations evaluated after each on 1 link for 20 steps
TINY_AUTO = {
    "agent": {"hidden": [16], "head_width": 8, "replay_size": 64, "batch_size": 16,
              "updates_per_iter": 2, "n_prefs": 4, "n_envelope": 4},
    "env": {"pool": 4, "episode_len": 20},
    "train": {"iters": 3, "chunk": 3, "n_envs": 8, "n_steps": 4, "tick_budget": 0,
              "eval_links": 1, "eval_steps": 20},
}


def _write_spec(path: Path, axes: dict, sweep: dict, extra: dict | None = None) -> Path:
    lines = ['name = "auto-tiny"', 'algo = "auto"', "[set]"]
    for t, kv in TINY_AUTO.items():
        lines += [f"{t}.{k} = {json.dumps(v)}" for k, v in kv.items()]
    lines += [f"{k} = {json.dumps(v)}" for k, v in (extra or {}).items()]
    lines.append("[axes]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in axes.items()]
    lines.append("[sweep]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in sweep.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _spec_dict(set_extra: dict) -> dict:
    base = {t: dict(v) for t, v in TINY_AUTO.items()}
    for k, v in set_extra.items():
        t, _, kk = k.partition(".")
        base.setdefault(t, {})[kk] = v
    return {"name": "a", "algo": "auto", "set": base, "axes": {"seed": [0, 1]}}


# -- without training --------------------------------------------------------------------------
def test_episode_schedule_and_two_objectives_in_a_spec():
    s = spec_from_dict(_spec_dict({}), "a.toml")
    assert len(s.trials) == 2 and len(s.groups()) == 1  # seeds batch together
    t = s.trials[0]
    assert t.cfg.train["schedule"] == "episode" and t.preference == (0.5, 0.5)
    sched = trial_schedule(t.cfg)
    # evaluated where `ccjax train` evaluates the episode schedule
    np.testing.assert_allclose(sched.eval_prefs, PerEpisode(8, 2, 3).eval_prefs)
    assert sched.draw_per_episode and sched.stationary and not sched.fixed
    assert not sched.uses_landmarks
    assert sched.prefs(0, 2).shape == (2, 8, 2) and not sched.prefs(0, 2).any()
    # a fixed preference for AUTO's two objectives
    f = spec_from_dict(_spec_dict({"train.schedule": "fixed", "env.preference": [0.7, 0.3]}),
                       "a.toml")
    assert f.trials[0].preference == (0.7, 0.3)
    assert trial_schedule(f.trials[0].cfg).prefs(0, 1).shape == (1, 8, 2)


@pytest.mark.parametrize("set_extra, msg", [
    ({"env.preference": [0.7, 0.3]},
     "env.preference is invalid in a.toml with train.schedule='episode': every episode draws"),
    ({"train.schedule": "all-at-once"},
     "train.schedule='all-at-once' is invalid in a.toml with env.reward='auto'"),
    ({"train.schedule": "fixed", "env.preference": [0.5, 0.3, 0.2]}, "env.preference"),
    ({"train.schedule": "fixed", "env.preference": [0.5, 0.6]}, "env.preference"),
])
def test_bad_agent_specs_are_one_line_errors(set_extra, msg):
    with pytest.raises(ConfigError) as e:
        spec_from_dict(_spec_dict(set_extra), "a.toml")
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_prefeval_is_refused_for_two_objectives():
    # the preference evaluation (ccjax.sweep.prefeval) is MOCC's: 3-weight preferences
    d = {**_spec_dict({}), "prefeval": {"preferences": 2, "links": 1}}
    with pytest.raises(ConfigError, match=r"\[prefeval\] is invalid in a.toml with env.reward="
                       "'auto': the preference evaluation is MOCC's"):
        spec_from_dict(d, "a.toml")


def test_what_a_sweep_keeps_of_an_envelope_state():
    """The best state and the checkpoint leave the replay buffer out; divergence is judged on
    the learned part; a kept state is made whole again with a fresh (empty) buffer."""
    cfg = spec_from_dict(_spec_dict({}), "a.toml").trials[0].cfg
    s = build(cfg, 0)
    state = s.agent.init(jax.random.PRNGKey(0), s.env.spec, s.hyper)
    part = kept(state)
    assert part.replay is None and part.params is state.params and part.opt is state.opt
    assert learnable(state).hyper is None and learnable(state).replay is None
    whole = with_kept(state, part)
    assert whole.replay is state.replay
    assert jax.tree.structure(whole) == jax.tree.structure(state)
    # the checked metrics: the losses, not the buffer count or the homotopy weight
    assert losses(s.agent.metric_names) == ("critic_loss", "loss_a", "loss_b", "policy_loss",
                                            "entropy")
    g = Group(cfg, 0)
    assert bool(g.train_params.pref_draw) and not bool(g.eval_params.pref_draw)
    assert g.n_objectives == 2 and g.n_eval_prefs == 5


# -- a real sweep: two seeds x a sane and a diverging step size, crashed and resumed ------------
@pytest.fixture(scope="module")
def auto_sweep(tmp_path_factory):
    """4 trials (seed 0, 1 x lr 1e-3 and 1e30) in batches of 2 (each a healthy and a diverging
    trial), evaluated after every iteration; the sweep crashes when its second batch starts and
    is resumed."""
    d = tmp_path_factory.mktemp("auto")
    path = _write_spec(d / "auto.toml", {"seed": [0, 1], "hyper.lr": [1e-3, 1e30]},
                       {"batch": 2, "eval_every": 1})
    out = d / "out"
    starts = []

    def crash_at_second_batch(event, ids):
        if event == "start":
            starts.append(ids)
            if len(starts) == 2:
                raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        run_sweep(path, out, callback=crash_at_second_batch)
    led = Ledger(out)
    crashed = {r["id"]: r for r in led.rows()}
    led.close()
    summary = run_sweep(path, out, resume=True)
    led = Ledger(out)
    final = {r["id"]: r for r in led.rows()}
    led.close()
    return dict(spec=load_spec(path), out=out, crashed=crashed, final=final, summary=summary)


def test_auto_sweep_batches_quarantines_and_resumes(auto_sweep):
    k = auto_sweep
    spec, final, crashed = k["spec"], k["final"], k["crashed"]
    ids = [t.id for t in spec.trials]
    first, second = ids[:2], ids[2:]
    assert sorted(crashed[i]["status"] for i in first) == ["done", "failed"]
    assert [crashed[i]["status"] for i in second] == ["running", "running"]
    for i in first:  # not rerun
        assert final[i]["attempts"] == 1 and final[i]["ended"] == crashed[i]["ended"]
    for i in second:
        assert final[i]["attempts"] == 2
    assert [b["trials"] for b in k["summary"]["batches"]] == [2]
    for t in spec.trials:
        row = final[t.id]
        if t.cfg.hyper["lr"] > 1:  # diverged in the first update, alone in its batch
            assert row["status"] == "failed"
            assert row["reason"] == "diverged: non-finite critic_loss at iteration 1"
            assert not (k["out"] / "trials" / t.id).exists()
            continue
        assert row["status"] == "done" and row["iterations"] == 3
        m = json.loads(row["metrics"])
        assert [e["iteration"] for e in m["evals"]] == [1, 2, 3]
        assert row["best_reward"] == pytest.approx(max(e["reward"] for e in m["evals"]))
        # the best evaluation per evaluation preference, w_thr = 0.1 .. 0.9
        np.testing.assert_allclose([p["w"] for p in m["prefs"]],
                                   PerEpisode(8, 2, 3).eval_prefs, atol=1e-6)
        assert np.mean([p["reward"] for p in m["prefs"]]) == pytest.approx(row["best_reward"],
                                                                          rel=1e-5)
        curve = read_curve(k["out"] / "curves" / f"{t.id}.parquet")
        assert [r["iteration"] for r in curve] == [1, 2, 3]
        assert [r["buffer"] for r in curve] == [32.0, 64.0, 64.0]  # the agent's own metrics
        assert all(np.isfinite(r["critic_loss"]) for r in curve)


def test_auto_trial_checkpoint_and_policy_hold_the_best_parameters(auto_sweep):
    k = auto_sweep
    for t in k["spec"].trials:
        row = k["final"][t.id]
        if row["status"] != "done":
            continue
        cfg, state, prog = load_trial(k["out"], t.id)
        assert cfg.agent["kind"] == "envelope" and prog["trial"] == t.id
        assert prog["best_iteration"] == row["best_iteration"]
        # the replay buffer was never kept: the state comes back with an empty one
        assert int(state.replay.fill.sum()) == 0 and state.replay.data.obs.shape == (64, 52)
        assert int(state.iteration) == row["best_iteration"]  # the best state, not the last
        pol = k["out"] / "trials" / t.id / "policy"
        assert json.loads((pol / "policy.json").read_text())["preference"] is None
        with np.load(pol / "policy.npz") as z:
            saved = {n: z[n] for n in z.files}
        flat = traverse_util.flatten_dict(state.params["params"], sep="/")
        assert sorted(saved) == sorted(flat)
        for n, v in flat.items():
            np.testing.assert_allclose(saved[n], np.asarray(v), rtol=1e-6)
