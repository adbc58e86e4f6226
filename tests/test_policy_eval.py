"""A trained policy as a controller (ccjax.cc.policy) and the evaluator (ccjax.evaluate, `ccjax
eval`): the controller reproduces the environment's rate sequence, and evaluation gives sane
numbers for classic controllers and saved policies on the same links."""

from __future__ import annotations

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.agents.export import save_policy
from ccjax.agents.ppo import PPO
from ccjax.api import run_controller
from ccjax.cc.cubic import Cubic
from ccjax.cc.mix import Mix
from ccjax.cc.policy import PolicyController, load_policy_controller
from ccjax.cli import main
from ccjax.envs.build import make_single_flow
from ccjax.errors import ConfigError
from ccjax.evaluate import COLUMNS, evaluate
from ccjax.sim import LinkSpec, init_state, tick

PREF = (0.6, 0.3, 0.1)


def _perturbed_actor(env, seed: int = 1, scale: float = 0.5) -> dict:
    """A random actor whose weights are perturbed so its mean action is far from 0 (a fresh
    one's mean head is initialised at ~0.01 scale and would leave the rate almost unchanged)."""
    ppo = PPO()
    actor = ppo.actor_net.init(jax.random.PRNGKey(seed), jnp.zeros((1, env.obs_dim)))
    leaves, tdef = jax.tree.flatten(actor)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    return jax.tree.unflatten(tdef, [x + scale * jax.random.normal(k, x.shape)
                                     for x, k in zip(leaves, keys, strict=True)])


def _env_and_controller_rates(model: str, init_frac: float, n_mi: int, log_ratios: bool = False):
    """Rates per MI and the tick each MI ended at, from the environment driven by the actor's
    deterministic actions and from the PolicyController on the same link and simulator key."""
    spec = LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,), buffer_pkts=50, loss=0.01)
    env, ep = make_single_flow(links=[spec], model=model, init_rate=(init_frac, init_frac),
                               preference=PREF, log_ratios=log_ratios)
    ppo = PPO()
    actor = _perturbed_actor(env)
    obs, st = env.reset(jax.random.PRNGKey(0), ep)

    def body(carry, _):
        obs, st = carry
        mean, _ = ppo.actor_net.apply(actor, obs)
        obs, st, _, _, info = env.step_env(jax.random.PRNGKey(0), st, mean, ep)
        return (obs, st), (info.rate, st.sim.t)

    _, (env_rates, env_ticks) = jax.jit(
        lambda o, s: jax.lax.scan(body, (o, s), None, length=n_mi))(obs, st)
    env_rates, env_ticks = np.asarray(env_rates), np.asarray(env_ticks)

    pc = PolicyController(net=ppo.actor_net, actor=actor, preference=PREF,
                          log_ratios=log_ratios)
    p = pc.make_params(1, init_rate=st.rate)  # the environment's initial rate
    link = jax.tree.map(lambda x: x[0], ep.links)
    s0 = init_state(env.sim, link, pc, p, st.sim.key)

    def step(s, _):
        s = tick(env.sim, pc, link, p, s)
        return s, (s.decision.rate[0], s.mi_done[0], s.t)

    _, (rate, done, t) = jax.jit(lambda s: jax.lax.scan(step, s, None,
                                                         length=int(env_ticks[-1])))(s0)
    rate, done, t = np.asarray(rate), np.asarray(done), np.asarray(t)
    ctl_rates = np.concatenate([[float(s0.decision.rate[0])], rate[done]])[:n_mi]
    return env_rates, env_ticks, ctl_rates, t[done][:n_mi]


@pytest.mark.parametrize("log_ratios", [False, True])
def test_policy_controller_matches_env_fluid(log_ratios):
    # Starts above capacity: the queue, losses and all three features come into play.
    env_r, env_t, ctl_r, ctl_t = _env_and_controller_rates("fluid", 1.2, 40, log_ratios)
    assert np.array_equal(env_t, ctl_t)  # the same MI boundaries
    # The same rates up to float32 round-off (XLA fuses the two programs differently).
    np.testing.assert_allclose(ctl_r, env_r, rtol=1e-4)
    assert np.ptp(np.log(env_r)) > 0.5  # the policy really moved the rate


@pytest.mark.slow
def test_policy_controller_matches_env_packet():
    # Packet model: the two programs differ by float round-off, which may eventually move an
    # MI boundary by one tick (an MI of exactly x.5 ticks) and from there the packet draws; so
    # compare the MIs up to the first boundary that differs, and require many.
    env_r, env_t, ctl_r, ctl_t = _env_and_controller_rates("packet", 0.5, 40)
    same = np.flatnonzero(env_t != ctl_t)
    n = same[0] if same.size else len(env_t)
    assert n >= 20
    np.testing.assert_allclose(ctl_r[:n], env_r[:n], rtol=1e-4)


def test_policy_competes_with_cubic_and_waits_for_its_start():
    # "Cubic competing with MOCC" is a Mix like any other; the policy's flow starts at 1 s and
    # keeps its initial rate (its MIs carry no traffic) until then.
    env, _ = make_single_flow(links=[LinkSpec()], preference=PREF)
    pc = PolicyController(actor=_perturbed_actor(env), preference=PREF, init_rate=1e6)
    mix = Mix((Cubic(), pc))
    params = mix.default_params(2).replace(index=jnp.asarray([0, 1], jnp.int32))
    spec = LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0, 40.0), start_s=(0.0, 1.0))
    res = run_controller([spec], mix, params, duration_s=0.99, model="fluid")
    _, dec0 = pc.init(params.members[1], jnp.asarray([0.04, 0.04]))
    st = jax.tree.map(lambda x: x[0], res.state.cc[1])
    assert int(res.state.mi_count[0, 1]) > 10  # its MIs ran ...
    assert not bool(st.started[1])
    assert float(st.rate[1]) == float(dec0.rate[1])  # ... and changed nothing
    assert res.summary()["flows"][0]["delivered_bytes"] > 0  # while Cubic sent


def test_evaluate_classic_and_policy(tmp_path):
    links = [LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,), buffer_pkts=50),
             LinkSpec(bandwidth_mbps=(20.0,), rtt_ms=(60.0,), buffer_pkts=100, loss=0.01)]
    env, ep = make_single_flow(links=links, preference=PREF)
    d = save_policy(tmp_path / "pol", PPO(), _perturbed_actor(env), env, ep, "ppo-mocc",
                    preference=PREF)
    assert load_policy_controller(d).preference == pytest.approx(PREF)
    res = evaluate(["cubic", str(d)], links=links, duration_s=4.0, seed=0, model="fluid",
                   preference=(0.8, 0.1, 0.1))
    assert [r["method"] for r in res.rows] == ["cubic", str(d)]
    assert len(res.per_link) == 4
    for r in res.rows + res.per_link:
        for c in COLUMNS:
            assert np.isfinite(r[c]), (r["method"], c)
        assert 0.0 <= r["utilization"] <= 1.0 + 1e-6
        assert r["latency_ratio"] >= 1.0 - 1e-6
        assert 0.0 <= r["loss_rate"] <= 1.0 and 0.0 <= r["reward"] <= 1.0
        assert r["p95_delay_ms"] >= 20.0 - 1e-3  # at least half the smallest base RTT
    cubic_clean = res.per_link[0]
    assert cubic_clean["method"] == "cubic" and cubic_clean["capacity_mbps"] == pytest.approx(10)
    assert cubic_clean["utilization"] > 0.5
    # throughput and utilization agree for a flow active over the whole run
    assert cubic_clean["throughput_mbps"] == pytest.approx(10 * cubic_clean["utilization"],
                                                           rel=1e-3)
    assert res.rows[1]["kind"] == "policy" and res.rows[1]["preference"] == [0.8, 0.1, 0.1]
    # the reward is w^T O with O from the columns
    r = res.per_link[0]
    o = np.array([r["utilization"], 1.0 / r["latency_ratio"], 1.0 - r["loss_rate"]])
    assert r["reward"] == pytest.approx(float(np.dot([0.8, 0.1, 0.1], o)), rel=1e-5)


@pytest.mark.parametrize("kwargs, words", [
    (dict(methods=["nosuch"]), ["nosuch", "policy.json"]),
    (dict(methods=["cubic"], links=0), ["links=0"]),
    (dict(methods=["cubic"], preference=(0.5, 0.5, 0.5)), ["preference", "sum to 1"]),
    (dict(methods=[]), ["methods"]),
    (dict(methods=["cubic"], model="wave"), ["model"]),
])
def test_evaluate_rejects_bad_input(kwargs, words):
    with pytest.raises(ConfigError) as e:
        evaluate(**kwargs)
    assert "\n" not in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_cli_eval(capsys, tmp_path):
    out_csv = tmp_path / "t.csv"
    code = main(["eval", "--cc", "const", "--scenario", "mocc-test", "--links", "2",
                 "--duration-s", "1", "--preference", "0.8,0.1,0.1",  # packet model
                 "--json", "--csv", str(out_csv)])
    out, _ = capsys.readouterr()
    assert code == 0
    d = json.loads(out)
    assert d["scenario"] == "mocc-test" and d["n_links"] == 2
    assert [r["method"] for r in d["rows"]] == ["const"] and len(d["per_link"]) == 2
    rows = list(csv.DictReader(out_csv.open()))
    assert rows[0]["method"] == "const" and float(rows[0]["utilization"]) > 0

    for argv, word in ((["eval"], "--model"), (["eval", "--cc", "cubc"], "cubc"),
                       (["eval", "--model", str(tmp_path)], "policy.json"),
                       (["eval", "--cc", "cubic", "--preference", "1,1,1"], "preference"),
                       (["eval", "--cc", "cubic", "--links", "0"], "links")):
        code = main(argv)
        _, err = capsys.readouterr()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("ccjax: error:"), err
        assert word in lines[0], (word, lines[0])


def test_evaluate_charges_a_flow_only_for_its_active_time_and_no_latency_without_deliveries():
    # a constant 10 Mbps sender on 10 Mbps links: from 0 s, from 2 s of a 4 s run, and from
    # 9 s (it never sends). Utilization counts the capacity while the flow was active, as the
    # throughput does; a flow that delivered nothing has no latency (left out of the means) and
    # MOCC's O_lat = 0 for it.
    links = [LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,), buffer_pkts=50, start_s=(s,))
             for s in (0.0, 2.0, 9.0)]
    res = evaluate(["const"], links=links, duration_s=4.0, seed=0, model="fluid",
                   preference=(0.1, 0.8, 0.1))
    a, b, c = res.per_link
    for r in (a, b):
        assert r["utilization"] == pytest.approx(1.0, abs=1e-3)
        assert r["throughput_mbps"] == pytest.approx(10.0, rel=1e-3)
        assert r["latency_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert c["utilization"] == 0.0 and np.isnan(c["latency_ratio"]) and np.isnan(c["p95_delay_ms"])
    assert c["reward"] == pytest.approx(0.1)  # w_loss only: nothing lost, nothing measured
    (row,) = res.rows
    assert row["latency_ratio"] == pytest.approx(1.0, abs=1e-3)  # the two links that delivered
    assert row["utilization"] == pytest.approx(2 / 3, abs=1e-3)
