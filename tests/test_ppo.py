"""PPO-MOCC: shapes and determinism of the agent, GAE with the valid mask, and learning a simple
fixed-capacity link within a small budget."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.agents.base import Trajectory
from ccjax.agents.drivers import init_runner, make_chunk, rollout
from ccjax.agents.ppo import PPO, PPOAux, PPOHyper, with_anneal
from ccjax.agents.returns import gae
from ccjax.algos import load_algo
from ccjax.envs.build import make_single_flow
from ccjax.envs.spec import ActionSpace, EnvSpec
from ccjax.envs.vec import VecEnv
from ccjax.errors import ConfigError
from ccjax.sim.link import LinkSpec


def spec(obs_dim: int, pref_dim: int = 3) -> EnvSpec:
    """A one-action, MOCC-objective spec of ``obs_dim`` observation values."""
    return EnvSpec(obs_dim=obs_dim, critic_dim=0, action=ActionSpace("box", 1), n_objectives=3,
                   pref_dim=pref_dim, objective_names=("thr", "lat", "loss"))


def traj(obs, action, reward, done, valid, aux) -> Trajectory:
    """A trajectory whose next observations are the following steps' (the last repeats)."""
    T, N = reward.shape
    nxt = jnp.concatenate([obs[1:], obs[-1:]], 0)
    z = jnp.zeros((T, N, 0))
    return Trajectory(obs=obs, critic=z, action=action, aux=aux, reward=reward,
                      objectives=jnp.zeros((T, N, 3)), next_obs=nxt, next_critic=z,
                      terminated=done, truncated=jnp.zeros_like(done), done=done, valid=valid,
                      info=None)


def test_act_shapes_and_determinism():
    agent = PPO()
    st = agent.init(jax.random.PRNGKey(0), spec(33))
    obs = jax.random.normal(jax.random.PRNGKey(1), (5, 33))
    a1, aux1 = agent.act(st, obs, jax.random.PRNGKey(2), True)
    a2, aux2 = agent.act(st, obs, jax.random.PRNGKey(2), True)
    assert a1.shape == (5, 1) and aux1.logp.shape == (5,)
    np.testing.assert_array_equal(a1, a2)
    a3, _ = agent.act(st, obs, jax.random.PRNGKey(3), True)
    assert not np.allclose(a1, a3)
    m1, _ = agent.act(st, obs, jax.random.PRNGKey(2), False)
    m2, _ = agent.act(st, obs, jax.random.PRNGKey(9), False)
    np.testing.assert_array_equal(m1, m2)  # deterministic action = the mean
    # the preference reaches the actor through the preference sub-network
    obs2 = obs.at[:, :3].set(jnp.asarray([0.8, 0.1, 0.1]))
    st2 = st.replace(actor=jax.tree.map(lambda x: x + 0.1, st.actor))
    assert not np.allclose(agent.act(st2, obs, None, False)[0],
                           agent.act(st2, obs2, None, False)[0])
    aurora = PPO(hidden=(32, 16), pref_dim=0)
    sa = aurora.init(jax.random.PRNGKey(0), spec(30, 0))
    assert "pn" not in sa.actor["params"]["trunk"]


def test_log_std_bounds_hold_the_policy_std():
    """With ``log_std_bounds`` the policy's std stays within them whatever the parameter holds
    (an unbounded parameter in stable-baselines' PPO; networks.GaussianActor)."""
    obs = jax.random.normal(jax.random.PRNGKey(1), (4, 33))
    for bounds, want in [(None, 5.0), ((-2.0, 0.0), 0.0), ((1.0, 3.0), 3.0)]:
        agent = PPO(log_std_bounds=bounds)
        st = agent.init(jax.random.PRNGKey(0), spec(33))
        actor = {"params": {**st.actor["params"], "log_std": jnp.full((1,), 5.0)}}
        pi = agent.policy(actor, obs)
        np.testing.assert_allclose(np.log(np.asarray(pi.stddev())), want, rtol=1e-6)
        low = {"params": {**st.actor["params"], "log_std": jnp.full((1,), -9.0)}}
        got = float(np.log(np.asarray(agent.policy(low, obs).stddev()))[0, 0])
        assert got == pytest.approx(-9.0 if bounds is None else bounds[0])


def test_log_std_past_a_bound_can_come_back():
    """A ``log_std`` parameter pushed past a bound is projected back after each step, so the
    std can still shrink: the actor clips the parameter, a clip passes no gradient, and before
    the projection a parameter that went above the upper bound stayed there (measured: 0.006
    after a 400-iteration Aurora run that began at 0, the presets' upper bound, so std 1 for
    the whole run)."""
    agent = PPO(hidden=(8,), pref_dim=0, n_epochs=4, n_minibatches=2, log_std_bounds=(-2.0, 0.0))
    st = agent.init(jax.random.PRNGKey(0), spec(4, 0), PPOHyper.make(ent_start=0.0, ent_end=0.0))
    st = st.replace(actor={"params": {**st.actor["params"], "log_std": jnp.full((1,), 0.01)}})
    n = 256
    obs = jax.random.normal(jax.random.PRNGKey(1), (1, n, 4))
    action, aux = agent.act(st, obs[0], jax.random.PRNGKey(2), True)
    # one-step episodes rewarding actions near the mean: the update should narrow the policy
    batch = traj(obs, action[None], -jnp.abs(action[None, :, 0]), jnp.ones((1, n), bool),
                 jnp.ones((1, n), bool), jax.tree.map(lambda x: x[None], aux))
    new, m = agent.update(st, batch, jax.random.PRNGKey(3))
    log_std = float(new.actor["params"]["log_std"][0])
    assert -2.0 <= log_std < 0.0
    assert float(m.std) == pytest.approx(np.exp(log_std))


def test_entropy_schedule_is_linear():
    agent = PPO()
    st = agent.init(jax.random.PRNGKey(0), spec(33), PPOHyper.make(ent_iters=1000.0))
    assert float(agent.ent_coef(st)) == pytest.approx(1.0)
    assert float(agent.ent_coef(st.replace(iteration=jnp.int32(500)))) == pytest.approx(0.55)
    assert float(agent.ent_coef(st.replace(iteration=jnp.int32(5000)))) == pytest.approx(0.1)


def test_linear_anneal_scales_step_size_and_clip():
    """PPO1's schedule='linear': cur_lrmult = max(1 - t / T, 0), counted from anneal_from."""
    agent = PPO()
    h = with_anneal(PPOHyper.make(lr=1e-3, clip=0.2), "linear", 100, 40)
    st = agent.init(jax.random.PRNGKey(0), spec(33), h)
    at = lambda i: float(agent.anneal(st.replace(iteration=jnp.int32(i))))  # noqa: E731
    assert (at(100), at(110), at(139), at(140), at(500)) == pytest.approx(
        (1.0, 0.75, 0.025, 0.0, 0.0))
    const = st.replace(hyper=with_anneal(h, "constant", 100, 40))
    assert float(agent.anneal(const.replace(iteration=jnp.int32(139)))) == 1.0
    with pytest.raises(ValueError, match="allowed constant, linear"):
        with_anneal(h, "cosine", 0, 10)
    # the update steps with the annealed rate: at a quarter of the way, 0.75 x lr
    obs = jax.random.normal(jax.random.PRNGKey(1), (4, 2, 33))
    batch = traj(obs, jnp.zeros((4, 2, 1)), jnp.ones((4, 2)), jnp.zeros((4, 2), bool),
                 jnp.ones((4, 2), bool), PPOAux(logp=jnp.zeros((4, 2))))
    _, m = agent.update(st.replace(iteration=jnp.int32(110)), batch, jax.random.PRNGKey(2))
    assert float(m.lr) == pytest.approx(0.75e-3)


def test_bad_anneal_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="train.anneal='cosine' is invalid.*constant, linear"):
        load_algo("ppo-mocc", {"train.anneal": "cosine"})


def test_advantages_normalised_per_preference_or_per_batch():
    """adv_norm = "preference": each group of environments sharing a preference gets zero mean
    and unit deviation over its valid steps, whatever the other groups' scale; "batch" (PPO1)
    pools all; invalid steps count in neither."""
    rng = np.random.default_rng(0)
    T, N = 6, 5
    prefs = np.asarray([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.8, 0.1, 0.1], [0.1, 0.8, 0.1],
                        [0.3, 0.3, 0.4]], np.float32)
    obs = np.concatenate([np.broadcast_to(prefs, (T, N, 3)),
                          rng.normal(size=(T, N, 30)).astype(np.float32)], -1)
    scale = np.asarray([10.0, 0.01, 10.0, 0.01, 1.0])  # group scales 1000x apart
    adv = (rng.normal(size=(T, N)) * scale + 5 * scale).astype(np.float32)
    valid = np.ones((T, N), np.float32)
    valid[0, 1] = valid[3, 4] = 0.0
    adv[0, 1] = 1e6  # an invalid step: must not move its group's statistics
    out = np.asarray(PPO(adv_norm="preference").normalise(jnp.asarray(adv), jnp.asarray(valid),
                                                          jnp.asarray(obs)))
    for group in ([0, 2], [1, 3], [4]):
        x, m = out[:, group].ravel(), valid[:, group].ravel() > 0
        assert x[m].mean() == pytest.approx(0.0, abs=1e-4)
        assert x[m].std() == pytest.approx(1.0, rel=1e-3)
    pooled = np.asarray(PPO().normalise(jnp.asarray(adv), jnp.asarray(valid), jnp.asarray(obs)))
    m = valid > 0
    assert pooled[m].mean() == pytest.approx(0.0, abs=1e-4)
    assert pooled[m].std() == pytest.approx(1.0, rel=1e-3)
    # pooled, the small-scale group's advantages are all but equal: its ranking is lost
    assert pooled[:, [1, 3]][m[:, [1, 3]]].std() < 1e-2
    # a policy without a preference input has one group: the batch
    np.testing.assert_allclose(PPO(adv_norm="preference", pref_dim=0).normalise(
        jnp.asarray(adv), jnp.asarray(valid), jnp.asarray(obs)), pooled, rtol=1e-6)


def test_bad_adv_norm_is_a_config_error():
    with pytest.raises(ConfigError, match="agent.adv_norm='env' is invalid.*batch, preference"):
        load_algo("ppo-mocc", {"agent.adv_norm": "env"})
    with pytest.raises(ConfigError, match="adv_norm='env' is invalid"):
        PPO(adv_norm="env")


def test_gae_passes_through_steps_without_a_completed_mi():
    T = 4
    r = jnp.asarray([[1.0], [0.0], [1.0], [1.0]])
    valid = jnp.asarray([[True], [False], [True], [True]])
    v = jnp.asarray([[0.5], [0.5], [0.5], [0.5]])
    no = jnp.zeros((T, 1), bool)
    adv, ret = gae(r, v, jnp.full((T, 1), 0.5), no, no, valid, 0.9, 1.0)
    # the invalid step carries step 2's advantage back unchanged; the valid ones discount
    assert float(adv[1, 0]) == pytest.approx(float(adv[2, 0]))
    k = jnp.asarray([0, 2, 3])
    full = gae(r[k], v[k], jnp.full((3, 1), 0.5), no[:3], no[:3], valid[k], 0.9, 1.0)[0]
    np.testing.assert_allclose(adv[k], full, rtol=1e-6)


def test_gae_bootstraps_a_truncated_episode_not_a_terminated_one():
    """At a time limit the episode is cut, not over: the return bootstraps from the value of
    where it stopped (``next_value``); a terminated one has no future. Either way the recursion
    does not reach into the next episode."""
    r = jnp.asarray([[1.0], [1.0]])
    v = jnp.zeros((2, 1))
    nv = jnp.asarray([[0.0], [10.0]])  # the value at the end of step 1 (the cut)
    done = jnp.asarray([[False], [True]])
    ok = jnp.ones((2, 1), bool)
    trunc = gae(r, v, nv, jnp.zeros_like(done), done, ok, 0.9, 1.0)[0]
    term = gae(r, v, nv, done, done, ok, 0.9, 1.0)[0]
    assert float(trunc[1, 0]) == pytest.approx(1.0 + 0.9 * 10.0)
    assert float(term[1, 0]) == pytest.approx(1.0)


def _simple_link():
    # 3 Mbps, 40 ms, 50-packet buffer, no random loss; episodes start at 10-20% of capacity,
    # so the untrained (mean-zero) policy under-uses the link and learning must raise the rate
    return make_single_flow(
        links=[LinkSpec(bandwidth_mbps=(3.0,), buffer_pkts=50, rtt_ms=(40.0,))],
        episode_len=100, preference=(0.8, 0.1, 0.1), init_rate=(0.1, 0.2), alpha=0.1)


def _eval_util(venv, agent, st, params, steps=100) -> float:
    runner = init_runner(venv, agent, st, params, jax.random.PRNGKey(7))
    _, tr = jax.jit(lambda s, r: rollout(venv, agent, s, r, params, steps, explore=False))(
        st, runner)
    w = np.asarray(tr.valid, np.float32)
    u = np.minimum(np.asarray(tr.info.utilization), 1.0)
    # the second half of the episode: after the policy has had time to reach its rate
    half = w.shape[0] // 2
    return float((u[half:] * w[half:]).sum() / w[half:].sum())


@pytest.mark.slow
def test_ppo_learns_a_fixed_capacity_link():
    env, params = _simple_link()
    venv = VecEnv(env, 64, 20)
    agent = PPO(n_minibatches=4)
    hyper = PPOHyper.make(ent_start=0.01, ent_end=0.01, ent_iters=1.0)
    st = agent.init(jax.random.PRNGKey(0), env.spec, hyper)
    before = _eval_util(venv, agent, st, params)
    assert before < 0.4
    runner = init_runner(venv, agent, st, params, jax.random.PRNGKey(1))
    chunk = make_chunk(venv, agent, 64, 10)
    prefs = jnp.broadcast_to(params.pref, (10, 64, 3))
    for _ in range(6):
        st, runner, (m, s) = chunk(st, runner, params, prefs)
    assert np.all(np.isfinite(np.asarray(m.policy_loss)))
    after = _eval_util(venv, agent, st, params)
    assert after > 0.8, (before, after)
