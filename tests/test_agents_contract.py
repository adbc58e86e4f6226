"""The agent contract, over the registry: every algorithm preset (``algos/*.toml``; a new one
joins without editing this file) initialises from its environment's spec, acts, updates,
trains a few iterations with checkpoints, restores them bit for bit, resumes, exports a policy
that runs as a controller (JAX) and in the NumPy deployment with the same actions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.agents.drivers import init_runner
from ccjax.agents.registry import KINDS
from ccjax.algos import agent_kind, list_algos, load_algo
from ccjax.train.setup import build

pytestmark = pytest.mark.slow

#: small sizes every preset takes; the schedule is made a short fixed-length one
SMALL = {"train.n_envs": 4, "train.n_steps": 4, "env.pool": 2, "train.eval_links": 1,
         "train.eval_steps": 8, "train.chunk": 2, "train.checkpoint_every": 2,
         "train.tick_budget": 0}  # every step ends an MI, whatever the links' RTTs
KIND_SMALL = {"ppo": {"agent.n_minibatches": 2},
              "envelope": {"agent.batch_size": 8, "agent.replay_size": 64,
                           "agent.updates_per_iter": 2, "agent.hidden": [8, 8, 8],
                           "agent.head_width": 8}}


def small(name: str, **extra):
    cfg = load_algo(name)
    kind = agent_kind(cfg.agent)
    over = {**SMALL, **KIND_SMALL[kind], **extra}
    sched = cfg.train.get("schedule", "two-phase")
    if sched in ("two-phase", "all-at-once"):
        over.update({"train.schedule": "fixed", "train.iters": 4, "train.eval_every": 2})
    else:
        over.update({"train.iters": 4, "train.eval_every": 2})
    return load_algo(name, over)


def test_every_kind_has_a_preset():
    assert {agent_kind(load_algo(n).agent) for n in list_algos()} == set(KINDS)


@pytest.mark.parametrize("name", list_algos())
def test_init_act_update(name):
    cfg = small(name)
    s = build(cfg, 0)
    spec = s.env.spec
    state = s.agent.init(jax.random.PRNGKey(0), spec, s.hyper)
    runner = init_runner(s.venv, s.agent, state, s.params, jax.random.PRNGKey(1))
    assert runner.obs.shape == (4, spec.obs_dim)
    assert runner.critic.shape == (4, spec.critic_dim)
    a, _ = s.agent.act(state, runner.obs, jax.random.PRNGKey(2), False)
    if spec.action.kind == "discrete":
        assert a.shape == (4,) and a.dtype == jnp.int32
        assert bool(jnp.all((a >= 0) & (a < spec.action.n)))
    else:
        assert a.shape == (4, spec.action.n)
    # the runner holds the action in effect, of the same shape and kind
    assert runner.action.shape == a.shape and runner.action.dtype == a.dtype


@pytest.mark.parametrize("name", list_algos())
def test_train_checkpoint_restore_and_resume(name, tmp_path):
    from ccjax.train import train
    from ccjax.train.store import Checkpoints

    cfg = small(name)
    out = tmp_path / "run"
    first = train(cfg, out, progress=False, max_iters=2)
    assert first["iterations"] == 2 and not first["done"]
    s = build(cfg, 0)
    template = s.agent.init(jax.random.PRNGKey(0), s.env.spec, s.hyper)
    ck = Checkpoints(out / "checkpoints")
    state, prog = ck.restore(template)
    ck.close()
    assert prog["iteration"] == 2 and int(state.iteration) == 2
    # restoring twice gives the same bits
    ck = Checkpoints(out / "checkpoints")
    again, _ = ck.restore(template)
    ck.close()
    for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    done = train(cfg, out, progress=False, resume=True)
    assert done["iterations"] == 4 and done["done"]
    assert (out / "policy").is_dir()
    import csv

    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4]  # none lost or repeated
    for k in s.agent.metric_names:  # the agent's own metrics, finite
        assert all(np.isfinite(float(r[k])) for r in rows), k
