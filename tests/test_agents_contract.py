"""The agent contract, over the registry: every algorithm preset (``algos/*.toml``; a new one
joins without editing this file) initialises from its environment's spec, acts, updates,
and exports a policy that runs as a controller (JAX) and in the NumPy deployment with the same
actions (``check_export_runs_everywhere``, on the run ``test_resume_exact.py`` trains, kills
and resumes bit for bit for every preset)."""

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
         "train.eval_steps": 8, "train.chunk": 1, "train.checkpoint_every": 1,
         "train.tick_budget": 0}  # every step ends an MI, whatever the links' RTTs
KIND_SMALL = {"ppo": {"agent.n_minibatches": 2},
              "envelope": {"agent.batch_size": 8, "agent.replay_size": 64,
                           "agent.updates_per_iter": 2, "agent.hidden": [8, 8, 8],
                           "agent.head_width": 8}}


def small_overrides(name: str, **extra) -> dict:
    """The overrides ``small`` loads ``name`` with (``--set`` pairs on a command line)."""
    cfg = load_algo(name)
    kind = agent_kind(cfg.agent)
    over = {**SMALL, **KIND_SMALL[kind]}
    sched = cfg.train.get("schedule", "two-phase")
    if sched in ("two-phase", "all-at-once"):
        over.update({"train.schedule": "fixed", "train.iters": 2, "train.eval_every": 2})
    else:
        over.update({"train.iters": 2, "train.eval_every": 2})
    return {**over, **extra}


def small(name: str, **extra):
    return load_algo(name, small_overrides(name, **extra))


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


def check_export_runs_everywhere(name: str, cfg, run, tmp_path) -> None:
    """The trained run in ``run`` (``ccjax train``'s folder of ``cfg``): its agent metrics are
    finite, its best state restores, and that state exported runs as a controller: the agent,
    the exported JAX network and the NumPy deployment take the same greedy actions, and
    ``ccjax eval`` runs it. Called by ``test_resume_exact.py`` on its uninterrupted run, so the
    contract's training, checkpoint and resume part is trained once per preset there."""
    import csv

    from ccjax import deploy
    from ccjax.agents.export import deterministic_action, load_policy, save_policy
    from ccjax.evaluate import evaluate
    from ccjax.sim.link import LinkSpec
    from ccjax.train.store import Checkpoints

    s = build(cfg, 0)
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    for k in s.agent.metric_names:  # the agent's own metrics, finite
        assert all(np.isfinite(float(r[k])) for r in rows), k
    template = s.agent.init(jax.random.PRNGKey(0), s.env.spec, s.hyper)
    ck = Checkpoints(run / "best")
    state, _ = ck.restore(template)
    ck.close()
    # weights away from their initial scale, so the actions are not all near one value
    state = state.replace(**{f: jax.tree.map(lambda x: x * 30.0, getattr(state, f))
                             for f in ("actor", "params") if hasattr(state, f)})
    pref = None if not s.env.pref_dim else [1.0 / s.env.pref_dim] * s.env.pref_dim
    d = save_policy(tmp_path / "policy", s.agent, s.agent.actor_params(state), s.env, s.params,
                    algo=name, preference=pref)
    assert (run / "policy" / "policy.json").is_file()  # the run exported its own too
    loaded = load_policy(d)
    runner = init_runner(s.venv, s.agent, state, s.params, jax.random.PRNGKey(1))
    obs = jax.random.normal(jax.random.PRNGKey(4), (16, s.env.spec.obs_dim))
    k = s.env.pref_dim  # random histories, the preference kept on the simplex
    obs = jnp.concatenate([runner.obs, obs.at[:, :k].set(runner.obs[0, :k])])
    agent_a, _ = s.agent.act(state, obs, jax.random.PRNGKey(0), False)
    jax_a = deterministic_action(loaded.meta, loaded.module, loaded.params, obs)
    np_a = deploy.load(d).actions(np.asarray(obs, np.float64))
    if s.env.spec.action.kind == "discrete":
        np.testing.assert_array_equal(np.asarray(agent_a), np.asarray(jax_a))
        np.testing.assert_array_equal(np.asarray(jax_a), np.asarray(np_a).reshape(-1))
    else:
        np.testing.assert_allclose(np.asarray(agent_a).reshape(-1), np.asarray(jax_a).reshape(-1),
                                   rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(np.asarray(jax_a).reshape(-1), np.asarray(np_a).reshape(-1),
                                   rtol=1e-4, atol=1e-6)
    res = evaluate([str(d)], links=[LinkSpec(bandwidth_mbps=(10.0,),
                                           rtt_ms=(40.0,), buffer_pkts=50)],
                   duration_s=2.0)
    row = res.rows[0]
    assert 0.0 < row["utilization"] <= 1.0 and np.isfinite(row["latency_ratio"])

