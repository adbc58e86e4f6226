"""The multi-flow environment's laws (``ccjax.envs.multi_flow``, Astraea's).

Small links (8-12 Mbps, a few flows, about a second simulated), the fluid model at 1 ms ticks.
One environment (three flow slots, every flow an agent) serves most tests through one jitted
``step_env``; its pool holds a link, the same link with its flows permuted and a link with an
empty slot, picked per run with ``link_index``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.agents.drivers import init_runner, scan_rollout
from ccjax.cc.base import Decision
from ccjax.cc.cubic import Cubic
from ccjax.cc.mix import Mix, MixParams
from ccjax.envs import multi_flow as mf
from ccjax.envs.actions import astraea_cwnd
from ccjax.envs.build import make_multi_flow, multi_flow_kwargs
from ccjax.envs.vec import VecEnv
from ccjax.errors import ConfigError
from ccjax.sim.core import init_state, tick
from ccjax.sim.link import LinkSpec
from ccjax.units import PACKET_BYTES, mbps_to_bytes_per_s

INF = float("inf")
MTP_TICKS = 30  # Table 4's 30 ms at 1 ms ticks
# flow 1 arrives 47 ms in (its MTPs are 17 ms out of phase with flow 0's) and leaves at 0.7 s;
# flow 2 arrives at 0.3 s
L0 = LinkSpec(bandwidth_mbps=(8.0,), buffer_pkts=15, rtt_ms=(20.0, 40.0, 30.0),
              start_s=(0.0, 0.047, 0.3), stop_s=(INF, 0.7, INF))
PERM = (2, 0, 1)  # flow k of L1 is flow PERM[k] of L0
L1 = LinkSpec(bandwidth_mbps=(8.0,), buffer_pkts=15,
              rtt_ms=tuple(L0.rtt_ms[p] for p in PERM),
              start_s=tuple(L0.start_s[p] for p in PERM),
              stop_s=tuple(L0.stop_s[p] for p in PERM))
L2 = LinkSpec(bandwidth_mbps=(12.0,), buffer_pkts=25, rtt_ms=(25.0, 35.0), start_s=(0.0, 0.1))
DURATION = 1.0


@functools.cache
def _env():
    env, params = make_multi_flow(links=[L0, L1, L2], pool=3, duration_s=DURATION,
                                  max_flows=3)
    return env, params


@functools.cache
def _jitted(env):
    return jax.jit(env.reset), jax.jit(env.step_env)


def _policy(obs: np.ndarray) -> np.ndarray:
    """Deterministic and observation-driven (so flows act differently): grow the window while
    the newest latency ratio (feature 3) is below 1.3, shrink it above."""
    lat_ratio = obs[:, -6]
    return np.clip(np.where(lat_ratio > 0, 1.3 - lat_ratio, 1.0), -1.0, 1.0)[:, None]


def _run(link_index: int, actions=None, n_max: int = 400) -> list[dict]:
    """Steps of ``step_env`` on one pool link until the episode ends; each record holds the
    step's outputs and the simulator's cumulative counters after it. ``actions(k, obs, st)``
    gives the step's actions (default ``_policy``)."""
    env, params = _env()
    reset, step = _jitted(env)
    params = params.replace(link_index=jnp.int32(link_index))
    obs, st = reset(jax.random.PRNGKey(0), params)
    out = []
    for k in range(n_max):
        a = _policy(np.asarray(obs)) if actions is None else actions(k, np.asarray(obs), st)
        mid = np.asarray(st.mid)
        obs, st, r, done, info = step(jax.random.PRNGKey(k), st, jnp.asarray(a, jnp.float32),
                                      params)
        s = st.sim
        out.append(dict(
            action=np.asarray(a), ready=~mid, obs=np.asarray(obs), reward=np.asarray(r),
            done=np.asarray(done), valid=np.asarray(info.valid),
            decided=np.asarray(info.decided), critic=np.asarray(info.next_critic),
            objectives=np.asarray(info.objectives), cwnd=np.asarray(st.cwnd),
            t=int(s.t), acked=np.asarray(s.acked, np.float64),
            lost=np.asarray(s.lost, np.float64),
            rtt_sum=np.asarray(s.tot.rtt_sum, np.float64),
            rtt_w=np.asarray(s.tot.rtt_w, np.float64), srtt=np.asarray(s.srtt, np.float64),
            rate=np.asarray(s.decision.rate, np.float64),
            win=np.asarray(s.decision.cwnd, np.float64), mi_dur=np.asarray(s.last.duration_s)))
        if bool(np.asarray(done).any()):
            break
    return out


@functools.cache
def _run_cached(link_index: int) -> tuple:
    return tuple(_run(link_index))


def test_spec_and_generic_stack_shapes():
    """EnvSpec says agents_per_link = F_max; VecEnv and the generic rollout driver carry the
    flow axis in every per-agent leaf of the Trajectory."""
    env, params = _env()
    spec = env.spec
    assert spec.agents_per_link == 3 and spec.obs_dim == 8 * 5 and spec.critic_dim == 12
    assert spec.action.kind == "box" and spec.action.n == 1 and spec.pref_dim == 0
    assert spec.objective_names == ("thr", "lat", "loss", "fair", "stab")
    venv = VecEnv(env, 2)
    p = params.replace(link_index=jnp.asarray([0, 2], jnp.int32))

    @dataclass(frozen=True)
    class Zero:  # the least agent: no parameters, the action 0
        def act(self, state, obs, key, explore):
            return jnp.zeros(obs.shape[:-1] + (1,)), ()

    runner = init_runner(venv, Zero(), None, p, jax.random.PRNGKey(1))
    runner, tr = jax.jit(lambda r: scan_rollout(
        venv, r, p, 12, lambda r, k: Zero().act(None, r.obs, k, True)))(runner)
    T, N, F = 12, 2, 3
    assert tr.obs.shape == (T, N, F, 40) and tr.next_obs.shape == (T, N, F, 40)
    assert tr.critic.shape == (T, N, F, 12) and tr.next_critic.shape == (T, N, F, 12)
    assert tr.action.shape == (T, N, F, 1) and tr.objectives.shape == (T, N, F, 5)
    for leaf in (tr.reward, tr.valid, tr.terminated, tr.truncated, tr.done):
        assert leaf.shape == (T, N, F)
    assert bool(tr.valid.any()) and not bool(tr.terminated.any())
    # the empty third slot of link 2 (env 1) never acts or learns
    assert not bool(tr.valid[:, 1, 2].any()) and float(jnp.abs(tr.reward[:, 1, 2]).sum()) == 0


def test_each_flow_observes_its_own_mtp():
    """Permuting a link's flows permutes their observations, rewards and global states."""
    a, b = _run_cached(0), _run_cached(1)
    assert len(a) == len(b)
    p = np.asarray(PERM)
    for ra, rb in zip(a, b, strict=True):
        assert ra["t"] == rb["t"]
        np.testing.assert_array_equal(rb["valid"], ra["valid"][p])
        np.testing.assert_allclose(rb["obs"], ra["obs"][p], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rb["reward"], ra["reward"][p], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(rb["critic"], ra["critic"][p], rtol=1e-5, atol=1e-7)
    # and the flows' observations do differ (each is its own, not the link's)
    last = a[-1]["obs"]
    assert not np.allclose(last[0], last[2])


def test_absent_flows_are_masked_from_acting_learning_and_reward():
    env, _ = _env()
    recs = _run_cached(0)
    start, stop = (0, 47, 300), (10**9, 700, 10**9)
    for r in recs:
        t_last = r["t"] - 1
        for f in range(3):
            if not start[f] <= t_last < stop[f]:
                assert not r["valid"][f] and not r["decided"][f] and r["reward"][f] == 0
        # the global state's flow count is the flows alive at the MTP's end (Table 2)
        alive = sum(start[f] <= t_last < stop[f] for f in range(3))
        for f in np.flatnonzero(r["decided"]):
            assert r["critic"][f][8] == pytest.approx(alive / mf.GLOBAL_FLOWS_SCALE)
    assert all(r["valid"][1] for r in recs if r["decided"][1] and r["t"] > 47 + 2 * MTP_TICKS)

    # actions given while a flow is not ready (not arrived, mid-MTP, gone) change nothing
    rng = np.random.default_rng(0)
    noise = rng.uniform(-1, 1, (len(recs) + 1, 3, 1))

    def other(k, obs, st):
        a = _policy(obs)
        return np.where(np.asarray(st.mid)[:, None], noise[k], a)

    alt = _run(0, other)
    assert len(alt) == len(recs)
    for ra, rb in zip(recs, alt, strict=True):
        for key in ("obs", "reward", "cwnd", "critic", "acked"):
            np.testing.assert_array_equal(ra[key], rb[key])
    # an empty slot (link 2 has two flows) never decides
    assert not any(r["decided"][2] for r in _run_cached(2))
    del env


def test_flows_decide_at_their_own_ticks_over_their_own_interval():
    """Flow 0's MTPs start at tick 0, flow 1's at its arrival, 47 ms in: they decide at
    different ticks, and each valid transition covers exactly one MTP of the deciding flow,
    begun by the action it carries (Eq. 3 on the window, held while the MTP ran)."""
    recs = _run_cached(0)
    ticks = {f: [r["t"] for r in recs if r["decided"][f]] for f in range(3)}
    assert ticks[0][:3] == [30, 60, 90]
    assert ticks[1][:2] == [77, 107] and ticks[2][0] == 330
    assert not set(ticks[0]) & set(ticks[1])
    env, params = _env()
    for f in range(3):
        last_start = None
        for k, r in enumerate(recs):
            if r["ready"][f] and not recs[k - 1]["done"].any():
                # the flow acted at step k: its window became Eq. 3 of that action
                want = np.asarray(astraea_cwnd(np.float32(recs[k - 1]["cwnd"][f]),
                                               np.float32(r["action"][f, 0]),
                                               np.float32(0.025), 4.0, 1e5, np))
                assert r["cwnd"][f] == want
                last_start = recs[k - 1]["t"]
            if r["valid"][f]:
                assert r["t"] - last_start == MTP_TICKS
                assert r["mi_dur"][f] == pytest.approx(MTP_TICKS * 1e-3)
            elif not r["ready"][f] and k and recs[k - 1]["cwnd"][f] != r["cwnd"][f]:
                raise AssertionError(f"flow {f}'s window changed mid-MTP at step {k}")
    assert sum(r["valid"].sum() for r in recs) > 40
    del env, params


def _reference(recs: list[dict], link: LinkSpec) -> list[dict]:
    """Table 2's global state and Eqs. 4-8's reward for every decision in ``recs``, in
    float64 from the simulator's cumulative counters recorded after each step."""
    F = 3
    n = link.n_flows
    cap = mbps_to_bytes_per_s(link.bandwidth_mbps[0])  # bytes/s
    start = [round(s * 1e3) for s in link.start_s] + [None] * (F - n)
    stop = [round(s * 1e3) if s != INF else 10**9 for s in link.stop_s] + [None] * (F - n)
    base = np.asarray([r * 1e-3 + min(PACKET_BYTES / (cap * 1e-3), 1.0) * 1e-3
                       for r in link.rtt_ms] + [1.0] * (F - n))
    zero = dict(t=0, acked=np.zeros(F), lost=np.zeros(F), rtt_sum=np.zeros(F),
                rtt_w=np.zeros(F))
    begin = [zero] * F  # the record at which each flow's running MTP began
    hist: list[list] = [[] for _ in range(F)]
    out = []
    for r in recs:
        t = r["t"]
        alive = np.asarray([f < n and start[f] <= t - 1 < stop[f] for f in range(F)])
        res = {}
        for i in np.flatnonzero(r["decided"]):
            b = begin[i]
            dur = (t - b["t"]) * 1e-3
            acked, lost = r["acked"] - b["acked"], r["lost"] - b["lost"]
            rw = r["rtt_w"] - b["rtt_w"]
            rtt = np.where(rw > 0, (r["rtt_sum"] - b["rtt_sum"]) / np.maximum(rw, 1e-30),
                           r["srtt"])
            thr = acked / dur
            loss = np.where(acked + lost > 0, lost / np.maximum(acked + lost, 1e-30), 0.0)
            cw = r["win"] / PACKET_BYTES
            a = alive
            g = np.asarray([
                thr[a].sum() / mf.GLOBAL_THR_SCALE, thr[a].min() / mf.GLOBAL_THR_SCALE,
                thr[a].max() / mf.GLOBAL_THR_SCALE, rtt[a].mean() / mf.LAT_SCALE,
                cw[a].min() / mf.GLOBAL_CWND_SCALE, cw[a].max() / mf.GLOBAL_CWND_SCALE,
                cw[a].mean() / mf.GLOBAL_CWND_SCALE, loss[a].mean(),
                a.sum() / mf.GLOBAL_FLOWS_SCALE, base[a].mean() / 2 / mf.LAT_SCALE,
                link.buffer_pkts * PACKET_BYTES / (cap * base[a].mean()) / mf.GLOBAL_BUF_SCALE,
                cap / mf.GLOBAL_BW_SCALE])
            hist[i] = (hist[i] + [(thr, alive)])[-5:]
            # Eqs. 4-8 with Table 4's weights, beta = 0.25, Eq. 6 as printed
            r_thr = thr[a].sum() / cap
            r_loss = loss[a].mean()
            d0 = base[a].mean()
            r_lat = max(rtt[a].mean() - 1.25 * d0, 0.0) / d0 * r["rate"][a].sum() / cap
            h = np.asarray([x for x, _ in hist[i]])
            m = np.asarray([al for _, al in hist[i]]) & a[None]
            cnt = m.sum(0)
            use = a & (cnt > 0)
            avg = np.where(m, h, 0).sum(0) / np.maximum(cnt, 1)
            dev2 = ((avg[use] - avg[use].mean()) ** 2).sum()
            r_fair = np.sqrt(dev2 / (use.sum() * avg[use].sum() ** 2))
            var_t = np.where(m, (h - avg) ** 2, 0).sum(0)
            cv = np.sqrt(var_t / (np.maximum(cnt, 1) * np.maximum(avg, 1e-9) ** 2))
            r_stab = np.where(use & (avg > 0), cv, 0).sum() / use.sum()
            rew = np.clip(0.1 * r_thr - 0.02 * r_lat - r_loss - 0.02 * r_fair - 0.01 * r_stab,
                          -0.1, 0.1)
            res[i] = (g, rew, np.asarray([r_thr, r_lat, r_loss, r_fair, r_stab]))
            begin[i] = r
        for f in range(n):
            if start[f] == t:
                begin[f], hist[f] = r, []
        out.append(res)
    return out


def test_global_state_and_reward_match_the_link_statistics():
    recs = _run_cached(0)
    ref = _reference(list(recs), L0)
    checked = 0
    for r, res in zip(recs, ref, strict=True):
        for i, (g, rew, obj) in res.items():
            np.testing.assert_allclose(r["critic"][i], g, rtol=2e-3, atol=1e-6)
            if r["valid"][i]:
                assert r["reward"][i] == pytest.approx(rew, rel=2e-3, abs=1e-6)
                np.testing.assert_allclose(r["objectives"][i], obj, rtol=2e-3, atol=1e-6)
                checked += 1
    assert checked > 40
    # the run exercised the terms: queueing delay, loss, unfairness and instability
    obj = np.concatenate([r["objectives"][r["valid"]] for r in recs])
    assert (obj[:, 1] > 0).any() and (obj[:, 2] > 0).any()
    assert (obj[:, 3] > 0).any() and (obj[:, 4] > 0).any()


def test_batch_of_links_equals_links_one_by_one():
    env, params = _env()
    n_steps = 40
    venv = VecEnv(env, 3)
    p = params.replace(link_index=jnp.asarray([0, 1, 2], jnp.int32))
    obs, st = jax.jit(venv.reset)(jax.random.PRNGKey(0), p)
    vstep = jax.jit(venv.step)
    batch = []
    for k in range(n_steps):
        a = np.stack([_policy(o) for o in np.asarray(obs)])
        obs, st, r, done, info = vstep(jax.random.PRNGKey(k), st, jnp.asarray(a), p)
        batch.append((np.asarray(obs), np.asarray(r), np.asarray(info.valid),
                      np.asarray(info.critic)))
        assert not bool(done.any())
    for i in range(3):
        alone = _run_cached(i)[:n_steps]
        # (equal up to float32 round-off: XLA fuses the batched program's sums differently)
        for (b_obs, b_r, b_v, b_c), one in zip(batch, alone, strict=True):
            np.testing.assert_array_equal(b_v[i], one["valid"])
            np.testing.assert_allclose(b_obs[i], one["obs"], rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(b_r[i], one["reward"], rtol=1e-4, atol=1e-8)
            np.testing.assert_allclose(b_c[i], one["critic"], rtol=1e-4, atol=1e-8)


def test_tick_budget_cuts_steps_but_not_transitions():
    """A tick budget ends a batch step before a link's event: ``valid`` false there, and the
    valid transitions are those of unbudgeted steps."""
    env, params = _env()
    venv = VecEnv(env, 1, tick_budget=7)
    p = params.replace(link_index=jnp.asarray([0], jnp.int32))
    obs, st = jax.jit(venv.reset)(jax.random.PRNGKey(0), p)
    vstep = jax.jit(venv.step)
    got = []
    cut = 0
    while len(got) < 12:
        a = _policy(np.asarray(obs)[0])[None]
        obs, st, r, done, info = vstep(jax.random.PRNGKey(0), st, jnp.asarray(a), p)
        cut += int(not np.asarray(info.decided).any())
        for f in np.flatnonzero(np.asarray(info.valid)[0]):
            got.append((f, float(r[0, f])))
    want = [(f, float(rec["reward"][f])) for rec in _run_cached(0)
            for f in np.flatnonzero(rec["valid"])][:12]
    assert cut > 0
    assert [f for f, _ in got] == [f for f, _ in want]
    np.testing.assert_allclose([x for _, x in got], [x for _, x in want], rtol=1e-4)


@dataclass(frozen=True)
class _FixedWindow:
    """What an agent flow at a = 0 is: a fixed window, paced at cwnd / sRTT refreshed at each
    MTP's end, on a 30 ms MI."""

    cwnd: float
    mtp_s: float
    name: str = "fixed"

    def default_params(self, n_flows: int):
        return ()

    def _dec(self, srtt):
        F = srtt.shape[0]
        cw = jnp.full(F, self.cwnd, jnp.float32)
        return Decision(rate=cw / srtt, cwnd=cw, mi_s=jnp.full(F, self.mtp_s, jnp.float32),
                        mi_round=jnp.zeros(F, bool))

    def init(self, params, base_rtt_s):
        return (), self._dec(base_rtt_s)

    def on_interval(self, state, stats, params):
        return (), self._dec(stats.srtt)


def test_cubic_flow_sharing_the_link_behaves_as_ccjax_cubic():
    link = LinkSpec(bandwidth_mbps=(8.0,), buffer_pkts=20, rtt_ms=(30.0, 30.0),
                    start_s=(0.0, 0.1))
    env, params = make_multi_flow(links=[link], pool=1, duration_s=0.8,
                                  controllers=["agent", "cubic"])
    assert env.spec.agents_per_link == 2 and np.asarray(params.agent).tolist() == [True, False]
    params = params.replace(link_index=jnp.int32(0))
    obs, st = jax.jit(env.reset)(jax.random.PRNGKey(3), params)
    key0 = st.sim.key
    step = jax.jit(env.step_env)
    zero = jnp.zeros((2, 1), jnp.float32)
    series = []  # (tick, CUBIC's window, its acked bytes) after every step
    while not bool(st.sim.t >= params.end_tick):
        obs, st, r, done, info = step(jax.random.PRNGKey(0), st, zero, params)
        assert not bool(info.decided[1])  # the CUBIC flow is no agent
        series.append((int(st.sim.t), float(st.sim.decision.cwnd[1]), float(st.sim.acked[1])))
    T = int(st.sim.t)

    cubic = Cubic()
    mix = Mix((_FixedWindow(10.0 * PACKET_BYTES, 0.03), cubic))
    mp = MixParams(index=jnp.asarray([0, 1], jnp.int32),
                   members=((), cubic.default_params(2)))
    lk = jax.tree.map(lambda x: x[0], params.links)
    s = init_state(env.sim, lk, mix, mp, key0)

    def body(c, _):
        c = tick(env.sim, mix, lk, mp, c)
        return c, (c.decision.cwnd[1], c.acked[1])

    s, (cw, ack) = jax.jit(lambda s: jax.lax.scan(body, s, None, length=T))(s)
    # Both are the same ccjax CUBIC on the same link beside the same fixed-window flow; they
    # agree to float32 round-off, which the two programs (fused differently by XLA) make
    # differ in the 9th digit of an RTT after ~200 ticks, and CUBIC's feedback loop then
    # carries to a few 1e-3 over the 0.8 s (measured: 0.06 % in bytes acked, <= 0.8 % in
    # CUBIC's state)
    ticks = np.asarray([t for t, _, _ in series]) - 1
    np.testing.assert_allclose([w for _, w, _ in series], np.asarray(cw)[ticks], rtol=2e-2)
    np.testing.assert_allclose([a for _, _, a in series], np.asarray(ack)[ticks], rtol=2e-2,
                               atol=PACKET_BYTES)
    e = st.sim
    for a, b in zip(jax.tree.leaves(e.cc[1]), jax.tree.leaves(s.cc[1]), strict=True):
        np.testing.assert_allclose(np.asarray(a)[1], np.asarray(b)[1], rtol=2e-2, atol=1e-6)
    # CUBIC did grow its window and got its share
    assert max(np.asarray(cw)) > 20 * PACKET_BYTES and float(s.acked[1]) > float(s.acked[0])


def test_bad_configuration_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"^controllers=\['agent'\] is invalid: one name per"):
        make_multi_flow(links=[L2], controllers=["agent"], pool=1)
    with pytest.raises(ConfigError, match=r"^cc='reno9' is invalid"):
        make_multi_flow(links=[L2], controllers=["agent", "reno9"], pool=1)
    with pytest.raises(ConfigError, match=r"^init_cwnd_pkts=\(2.0, 10.0\) is invalid"):
        make_multi_flow(links=[L2], init_cwnd_pkts=(2.0, 10.0), pool=1)
    with pytest.raises(ConfigError, match=r"^fns='pareto' is invalid"):
        make_multi_flow(links=[L2], fns="pareto", pool=1)


def test_scenario_presets_build():
    env, params = make_multi_flow("astraea-three-flows", pool=1)
    assert env.spec.agents_per_link == 3 and int(params.end_tick) == 200_000
    # an algorithm preset's [env] table
    kw = multi_flow_kwargs({"scenario": "astraea-three-flows", "pool": 1, "tick_ms": 0.5,
                            "mtp_ms": 20, "init_cwnd_pkts": [10, 20]})
    env, params = make_multi_flow(**kw)
    assert env.sim.tick_s == 5e-4 and float(params.mtp_s) == pytest.approx(0.02)
    with pytest.raises(ConfigError, match=r"^env.mi_rtts=0.5 is invalid: a key of the multi"):
        multi_flow_kwargs({"mi_rtts": 0.5})
    env, params = make_multi_flow("astraea-train", pool=4)
    assert env.spec.agents_per_link == 5 and bool(params.agent.all())
