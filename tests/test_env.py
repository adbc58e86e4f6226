"""The single-flow RL environment (MOCC's and Aurora's) and its batched stepper ``VecEnv``.

Small links, short episodes, the fluid model at 1 ms ticks. Each rollout is one jitted scan,
cached per (env, length, policy) so the file compiles a handful of programs in all.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.envs.build import make_single_flow
from ccjax.envs.single_flow import SingleFlowEnv, StepInfo
from ccjax.envs.vec import VecEnv
from ccjax.errors import ConfigError
from ccjax.sim.core import data_rtt_floor_s
from ccjax.sim.link import LinkSpec
from ccjax.units import mbps_to_bytes_per_s

TICK = 1e-3
LINK = LinkSpec(bandwidth_mbps=(3.0,), buffer_pkts=50, rtt_ms=(40.0,))
CAP = mbps_to_bytes_per_s(3.0)  # bytes/s
POOL = [LINK,
        LinkSpec(bandwidth_mbps=(5.0,), buffer_pkts=80, rtt_ms=(60.0,)),
        LinkSpec(bandwidth_mbps=(2.0,), buffer_pkts=30, rtt_ms=(20.0,))]
EP_LEN = 8
PREF = (0.5, 0.3, 0.2)


def _react(obs: jnp.ndarray) -> jnp.ndarray:
    """A deterministic policy that depends on the observation: raise the rate while the last
    sending ratio is below 1.2, lower it above (so rates, and MIs, differ between links)."""
    return jnp.tanh(3.0 * (1.2 - obs[..., -3]))


@functools.cache
def _runner(env: SingleFlowEnv, n_steps: int, policy: str):
    """Jitted ``run(key, params, actions)``: reset, then ``n_steps`` of ``env.step`` (with
    auto-reset) under the ``_react`` policy or the given ``actions`` (n_steps,)."""

    def run(key, params, actions):
        k0, key = jax.random.split(key)
        obs, st = env.reset(k0, params)

        def body(carry, x):
            obs, st = carry
            k, a_fixed = x
            a = _react(obs) if policy == "react" else a_fixed
            obs2, st2, r, d, info = env.step(k, st, a, params)
            rec = dict(obs=obs, action=a, reward=r, done=d, info=info, step=st2.step,
                       next_obs=obs2, next_rate=st2.rate,
                       base_rtt=st.link.rtt_ticks[0].astype(jnp.float32) * env.sim.tick_s,
                       rtt_floor=data_rtt_floor_s(st.link, env.sim)[0])
            return (obs2, st2), rec

        (_, st_end), out = jax.lax.scan(body, (obs, st),
                                        (jax.random.split(key, n_steps), actions))
        return obs, st, st_end, out

    return jax.jit(run)


def rollout(env, params, key, n_steps, policy="react", actions=None):
    acts = jnp.zeros(n_steps, jnp.float32) if actions is None else jnp.asarray(actions,
                                                                               jnp.float32)
    obs, st, st_end, out = _runner(env, n_steps, policy)(key, params, acts)
    return obs, st, st_end, jax.tree.map(np.asarray, out)


@pytest.fixture(scope="module")
def pool_env():
    return make_single_flow(links=POOL, episode_len=EP_LEN, preference=PREF, tick_s=TICK)


@pytest.fixture(scope="module")
def pool_run(pool_env):
    env, params = pool_env
    return rollout(env, params, jax.random.PRNGKey(0), 20)


@pytest.fixture(scope="module")
def one_env():
    return make_single_flow(links=[LINK], episode_len=60, tick_s=TICK)


# -- shapes, determinism, episodes ---------------------------------------------------------


def test_reset_and_step_shapes(pool_env, pool_run):
    env, params = pool_env
    obs0, st, _, out = pool_run
    assert env.obs_dim == 33 and env.action_dim == 1
    assert obs0.shape == (33,) and obs0.dtype == jnp.float32
    np.testing.assert_allclose(obs0[:3], PREF, rtol=1e-6)  # preference first
    np.testing.assert_array_equal(np.asarray(obs0[3:]).reshape(10, 3),
                                  np.tile([1.0, 1.0, 0.0], (10, 1)))  # Aurora's empty MIs
    assert st.rate.shape == () and st.hist.shape == (10, 3) and int(st.step) == 0
    T = 20
    assert out["next_obs"].shape == (T, 33) and out["next_obs"].dtype == np.float32
    assert out["reward"].shape == (T,) and out["reward"].dtype == np.float32
    assert out["done"].shape == (T,) and out["done"].dtype == np.bool_
    info = out["info"]
    assert isinstance(info, StepInfo)
    assert info.objectives.shape == (T, 3)
    for f in ("utilization", "latency_ratio", "loss_rate", "rate", "mi_s", "episode_return"):
        assert getattr(info, f).shape == (T,), f
    assert info.episode_objectives.shape == (T, 3)
    assert info.valid.all() and not info.truncated.any()
    assert np.isfinite(out["next_obs"]).all()

    env_np, params_np = make_single_flow(links=[LINK], use_pref=False, tick_s=TICK)
    assert env_np.obs_dim == 30
    obs, st = jax.jit(env_np.reset)(jax.random.PRNGKey(0), params_np)
    assert obs.shape == (30,)
    shapes = jax.eval_shape(env_np.step, jax.random.PRNGKey(0), st, jnp.float32(0.0), params_np)
    assert shapes[0].shape == (30,) and shapes[2].shape == ()


def test_determinism(pool_env, pool_run):
    env, params = pool_env
    _, _, _, a = pool_run
    _, _, _, b = rollout(env, params, jax.random.PRNGKey(0), 20)
    np.testing.assert_array_equal(a["next_obs"], b["next_obs"])
    np.testing.assert_array_equal(a["reward"], b["reward"])
    _, _, _, c = rollout(env, params, jax.random.PRNGKey(1), 20)
    assert not np.array_equal(a["reward"], c["reward"])
    assert not np.array_equal(a["info"].rate, c["info"].rate)


def test_auto_reset_at_episode_len(pool_env, pool_run):
    env, params = pool_env
    _, _, _, out = pool_run
    done = out["done"]
    np.testing.assert_array_equal(np.flatnonzero(done), [EP_LEN - 1, 2 * EP_LEN - 1])
    np.testing.assert_array_equal(out["step"][:10], [1, 2, 3, 4, 5, 6, 7, 0, 1, 2])
    info = out["info"]
    np.testing.assert_array_equal(info.episode_done, done)
    np.testing.assert_allclose(info.episode_return[EP_LEN - 1], out["reward"][:EP_LEN].sum(),
                               rtol=1e-5)
    np.testing.assert_allclose(info.episode_objectives[EP_LEN - 1],
                               info.objectives[:EP_LEN].mean(0), rtol=1e-5)
    assert (info.episode_return[~done] == 0).all()
    # after ``done`` the observation and rate are a fresh episode's, reset with the second half
    # of the step's key (gymnax's auto-reset)
    keys = jax.random.split(jax.random.split(jax.random.PRNGKey(0))[1], 20)
    k_reset = jax.random.split(keys[EP_LEN - 1])[1]
    obs_r, st_r = env.reset(k_reset, params)
    np.testing.assert_allclose(out["next_obs"][EP_LEN - 1], obs_r)
    np.testing.assert_allclose(out["next_rate"][EP_LEN - 1], st_r.rate, rtol=1e-6)
    np.testing.assert_allclose(out["info"].rate[EP_LEN], st_r.rate * (
        1 + params.alpha * np.maximum(out["action"][EP_LEN], 0))
        / (1 - params.alpha * np.minimum(out["action"][EP_LEN], 0)), rtol=1e-6)


def test_monitor_interval_lengths(pool_run):
    """Aurora: the first MI lasts 3 x the one-way latency (1.5 x the least RTT), each later one
    0.5 x the mean RTT measured in the previous MI (rounded to whole ticks)."""
    _, _, _, out = pool_run
    info = out["info"]
    first = np.r_[True, out["done"][:-1]]
    # (the sender's first RTT estimate: the least RTT a data packet sees)
    np.testing.assert_allclose(info.mi_s[first], 1.5 * out["rtt_floor"][first], atol=0.5 * TICK)
    # mean RTT of each MI: latency ratios divide by the least RTT a data packet sees
    rtt_prev = (info.latency_ratio * out["rtt_floor"])[:-1]
    later = ~first[1:]
    np.testing.assert_allclose(info.mi_s[1:][later], 0.5 * rtt_prev[later],
                               atol=0.5 * TICK + 1e-6)
    assert len(set(np.round(out["base_rtt"], 4))) >= 2  # episodes on different links


# -- actions and rewards ---------------------------------------------------------------------


def test_action_is_mocc_eq1(one_env):
    env, params = one_env
    acts = [1.0, -1.0, 0.5, -0.5, 0.0, 2.0, -2.0, -1.0, 1.0]
    # 40 steps as in the constant-rate test: one compiled program for both
    _, st, _, out = rollout(env, params, jax.random.PRNGKey(0), 40, "fixed",
                            acts + [0.0] * (40 - len(acts)))
    r0, al = float(st.rate), float(params.alpha)
    want = [r0 * (1 + al), r0, r0 * (1 + 0.5 * al), r0, r0, r0 * (1 + 2 * al), r0, r0 / (1 + al),
            r0]
    np.testing.assert_allclose(out["info"].rate[: len(acts)], want, rtol=1e-6)
    # rates stay within [min_rate, max_rate]
    hi = env.begin(st, jnp.float32(1e9), params)
    lo = env.begin(st, jnp.float32(-1e9), params)
    assert float(hi.rate) == pytest.approx(float(params.max_rate))
    assert float(lo.rate) == pytest.approx(float(params.min_rate))
    assert float(hi.sim.decision.rate[0]) == float(hi.rate)  # the simulator sends at it


def test_reward_is_preference_weighted_objectives(pool_env, pool_run):
    _, params = pool_env
    _, _, _, out = pool_run
    obj = out["info"].objectives
    np.testing.assert_allclose(out["reward"], obj @ np.asarray(params.pref), rtol=1e-6)
    assert ((obj >= 0) & (obj <= 1)).all()
    assert ((out["reward"] >= 0) & (out["reward"] <= 1)).all()


def test_constant_rate_below_and_above_capacity(one_env):
    env, params = one_env
    n = 40
    low = params.replace(init_lo=jnp.float32(0.3), init_hi=jnp.float32(0.3))
    _, st, _, out = rollout(env, low, jax.random.PRNGKey(0), n, "fixed")
    assert float(st.rate) == pytest.approx(0.3 * CAP, rel=1e-5)
    info = out["info"]
    # after the first RTT (feedback of the first MI arrives late) the MI sees the steady state
    np.testing.assert_allclose(info.utilization[3:], 0.3, rtol=2e-3)
    np.testing.assert_allclose(info.latency_ratio[3:], 1.0, atol=1e-3)
    np.testing.assert_allclose(info.objectives[3:, 1], 1.0, atol=1e-3)
    assert (info.loss_rate == 0).all()
    np.testing.assert_allclose(out["next_obs"][-1][3:].reshape(10, 3)[:, 0], 1.0, atol=1e-3)

    high = params.replace(init_lo=jnp.float32(1.5), init_hi=jnp.float32(1.5))
    _, _, _, out = rollout(env, high, jax.random.PRNGKey(0), n, "fixed")
    info = out["info"]
    assert (info.latency_ratio[5:] > 1.2).all()  # the queue fills
    assert (info.objectives[5:, 1] < 0.85).all()
    # the link is full: each MI's ACKs fill it to within one tick of the MI's length (where
    # its ends fall between the ticks' deliveries)
    assert (np.abs(info.objectives[5:, 0] - 1.0) <= TICK / info.mi_s[5:] + 1e-3).all()
    assert info.loss_rate[-10:].min() > 0.2  # 1.5 x capacity into a full buffer: ~1/3 lost
    hist = out["next_obs"][-1][3:].reshape(10, 3)
    assert (hist[:, 0] > 1.3).all() and (hist[:, 1] > 1.2).all()  # sending and latency ratio


# -- VecEnv ----------------------------------------------------------------------------------


N_VEC, S_VEC, BUDGET = 6, 24, 10


def _vparams(params, n):
    prefs = np.random.default_rng(0).dirichlet(np.ones(3), n).astype(np.float32)
    return params.replace(pref=jnp.asarray(prefs))


def _ref_step(env: SingleFlowEnv, n: int, params):
    """vmapped ``SingleFlowEnv.step_env`` plus VecEnv's reset rule: at an episode end the batch
    is reset with ``split(key, n)`` (VecEnv passes the step's key to ``VecEnv.reset``)."""
    ax = jax.tree.map(lambda _: None, params).replace(pref=0)

    def step(key, st, a, p):
        obs, st, r, d, info = jax.vmap(env.step_env, in_axes=(None, 0, 0, ax))(key, st, a, p)
        obs_r, st_r = jax.vmap(env.reset, in_axes=(0, ax))(jax.random.split(key, n), p)
        sel = lambda x, y: jnp.where(d.reshape(d.shape + (1,) * (y.ndim - 1)), x, y)  # noqa: E731
        return sel(obs_r, obs), jax.tree.map(sel, st_r, st), r, d, info

    return step


def _vec_run(env, params, budget: int, ref: bool = False):
    """S_VEC batch steps; env i's k-th MI gets the action ``acts[k, i]`` (a step that only
    continues an MI ignores its action, as the drivers do)."""
    n = N_VEC
    venv = VecEnv(env, n, tick_budget=budget)
    step = _ref_step(env, n, params) if ref else venv.step
    acts = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (S_VEC + 1, n)), jnp.float32)
    rows = jnp.arange(n)

    def go(key, p):
        k0, key = jax.random.split(key)
        obs, st = venv.reset(k0, p)

        def body(c, k):
            obs, st, cnt = c
            obs, st, r, d, info = step(k, st, acts[cnt, rows], p)
            rec = dict(obs=obs, reward=r, done=d, valid=info.valid, rate=info.rate,
                       mi_s=info.mi_s, next_rate=st.rate)
            return (obs, st, cnt + info.valid), rec

        (_, st, cnt), out = jax.lax.scan(body, (obs, st, jnp.zeros(n, jnp.int32)),
                                         jax.random.split(key, S_VEC))
        end = dict(rtt=st.link.rtt_ticks[:, 0], mi_count=st.sim.mi_count[:, 0], cnt=cnt)
        return end, out

    return jax.tree.map(np.asarray, jax.jit(go)(jax.random.PRNGKey(5), _vparams(params, n)))


@pytest.fixture(scope="module")
def vec_runs(pool_env):
    env, params = pool_env
    return {"vec": _vec_run(env, params, 0), "ref": _vec_run(env, params, 0, ref=True),
            "budget": _vec_run(env, params, BUDGET)}


@pytest.mark.slow
def test_vecenv_matches_vmapped_env(vec_runs):
    """VecEnv (batch-level MI loop with a live mask, one conditional reset) against vmapped
    ``step_env`` plus VecEnv's reset rule, across episode ends."""
    (_, got), (_, want) = vec_runs["vec"], vec_runs["ref"]
    assert got["valid"].all()
    np.testing.assert_array_equal(np.flatnonzero(got["done"].all(1)),
                                  [EP_LEN - 1, 2 * EP_LEN - 1, 3 * EP_LEN - 1])
    assert got["done"].sum() == 3 * N_VEC  # all envs end their episodes together
    assert (np.ptp(want["mi_s"], axis=1) > 0).any()  # the envs' MIs differ in length
    # identical, not just close: the same float operations per live link on the same backend
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.slow
def test_vecenv_tick_budget_keeps_each_env_mi_sequence(vec_runs):
    """With a tick budget short links go on while a long one's MI runs (valid false there);
    each env's sequence of MIs is the one it has without a budget, given the same actions."""
    end, out = vec_runs["budget"]
    valid, rew, cnt = out["valid"], out["reward"], end["cnt"]
    assert len(set(end["rtt"])) >= 2  # envs on different links
    assert not valid.all() and valid.any(0).all()
    short, long_ = end["rtt"] == end["rtt"].min(), end["rtt"] == end["rtt"].max()
    assert cnt[short].min() > cnt[long_].max()  # short-RTT envs complete more MIs
    np.testing.assert_array_equal(valid.sum(0), cnt)
    # every completed MI came back as exactly one valid step
    np.testing.assert_array_equal(end["mi_count"], cnt - EP_LEN * out["done"].sum(0))
    assert (rew[~valid] == 0).all() and not out["done"][~valid].any()
    assert ((rew[valid] >= 0) & (rew[valid] <= 1)).all()

    # up to its first episode end (later resets draw from different keys) env i's MIs match
    _, ref = vec_runs["vec"]
    for i in range(N_VEC):
        v = valid[:, i]
        c = min(int(cnt[i]), EP_LEN)
        for k in ("rate", "reward", "mi_s", "obs"):
            np.testing.assert_array_equal(out[k][v, i][:c], ref[k][:c, i],
                                          err_msg=f"env {i} {k}")


# -- cross traffic and validation ------------------------------------------------------------


def test_cross_traffic_shares_the_link():
    env, params = make_single_flow(links=[LINK], cross="cubic", n_cross=1, episode_len=100,
                                   init_rate=(1.0, 1.0), tick_s=TICK)
    assert env.sim.n_flows == 2
    _, _, st_end, out = rollout(env, params, jax.random.PRNGKey(0), 60, "fixed")
    info = out["info"]
    assert info.valid.all() and np.isfinite(out["reward"]).all()
    assert float(st_end.sim.tot.delivered[1]) > 0  # the CUBIC flow got through
    assert info.utilization[10:].mean() < 0.95  # the agent's share of the link is below 1


def test_log_ratios_observation(pool_env):
    """``log_ratios``: the same run, the two ratios observed as their logs, the gradient as is."""
    env, params = pool_env
    env_log = dataclasses.replace(env, log_ratios=True)
    _, _, _, raw = rollout(env, params, jax.random.PRNGKey(0), 20, policy="const")
    _, _, _, logd = rollout(env_log, params, jax.random.PRNGKey(0), 20, policy="const")
    np.testing.assert_array_equal(raw["next_rate"], logd["next_rate"])
    hist_raw = raw["next_obs"][:, 3:].reshape(20, -1, 3)
    hist_log = logd["next_obs"][:, 3:].reshape(20, -1, 3)
    assert hist_raw[:, :, 1].max() > 1.05  # a latency ratio above 1 occurred
    np.testing.assert_allclose(hist_log[:, :, :2], np.log(np.maximum(hist_raw[:, :, :2], 1e-3)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(hist_log[:, :, 2], hist_raw[:, :, 2])
    obs0, _ = env_log.reset(jax.random.PRNGKey(0), params)
    np.testing.assert_array_equal(np.asarray(obs0[3:]), 0.0)  # the empty MI (1, 1, 0) reads 0


@pytest.mark.parametrize("kw, match", [
    (dict(preference=(0.5, 0.5, 0.5)), "preference"),
    (dict(preference=(1.2, -0.2, 0.0)), "preference"),
    (dict(n_cross=1), "n_cross"),
    (dict(cross="cubic"), "n_cross"),
    (dict(cross="nope", n_cross=1), "cc"),
    (dict(episode_len=0), "episode_len"),
    (dict(history=0), "history"),
    (dict(alpha=0.0), "alpha"),
    (dict(init_rate=(1.5, 0.3)), "init_rate"),
    (dict(log_ratios=1), "log_ratios"),
    (dict(links=[LinkSpec(rtt_ms=(40.0, 40.0), start_s=(0.0, 0.0))]), "flows"),
])
def test_bad_inputs_raise_config_error(kw, match):
    kw = {"links": [LINK], **kw}
    with pytest.raises(ConfigError, match=match):
        make_single_flow(**kw)


def test_critic_features_are_the_critics_own_input():
    """``critic_features`` gives the critic link facts as its own input (``critic_obs``,
    ``Trajectory.critic``); the actor's observation is MOCC's state either way."""
    from ccjax.agents.ppo import PPO
    from ccjax.envs.single_flow import N_CRITIC

    env, params = make_single_flow(links=[LINK], episode_len=60, tick_s=TICK,
                                   critic_features=True)
    plain, _ = make_single_flow(links=[LINK], episode_len=60, tick_s=TICK)
    assert env.obs_dim == plain.obs_dim == 33
    assert env.spec.critic_dim == N_CRITIC and plain.spec.critic_dim == 0
    obs, st = env.reset(jax.random.PRNGKey(0), params)
    obs_p, _ = plain.reset(jax.random.PRNGKey(0), params)
    np.testing.assert_array_equal(np.asarray(obs), np.asarray(obs_p))
    facts = np.asarray(env.critic_obs(st, params))
    cap = mbps_to_bytes_per_s(LINK.bandwidth_mbps[0])
    assert facts[0] == pytest.approx(np.log(float(st.rate) / cap), abs=1e-4)  # rate / capacity
    assert facts[-1] == pytest.approx(1.0)  # the whole episode left
    for _ in range(5):
        obs, st, _, _, info = env.step(jax.random.PRNGKey(1), st, jnp.ones(1), params)
    facts = env.critic_obs(st, params)
    assert float(facts[-1]) == pytest.approx(1.0 - 5 / 60)
    np.testing.assert_array_equal(np.asarray(info.next_critic), np.asarray(facts))
    assert np.all(np.isfinite(np.asarray(facts)))

    agent = PPO()
    state = agent.init(jax.random.PRNGKey(0), env.spec)
    # the critic sees the facts: changing them changes V
    v1 = agent.value(state.critic, obs[None], facts[None])
    v2 = agent.value(state.critic, obs[None], facts.at[-1].set(0.0)[None])
    assert float(v1[0]) != float(v2[0])
