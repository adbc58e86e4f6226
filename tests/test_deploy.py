"""Policy export (ccjax.agents.export) and the NumPy deployment library (ccjax.deploy).

The deployed controller must reproduce the training environment exactly: the same features
(Aurora's, MOCC §3.1), the same history and the same rate update (MOCC Eq. 1). The check runs
the real environment with the JAX actor and feeds the NumPy controller the same per-MI stats.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from ccjax import deploy
from ccjax.agents.export import deterministic_action, load_policy, save_policy
from ccjax.agents.ppo import PPO
from ccjax.envs.build import make_single_flow
from ccjax.errors import ConfigError
from ccjax.sim.link import LinkSpec

LINK = LinkSpec(bandwidth_mbps=(3.0,), buffer_pkts=50, rtt_ms=(40.0,))
PREF = (0.6, 0.3, 0.1)
N_MI = 30
N_HIST = 10


def _actor(agent: PPO, spec, seed: int = 0) -> dict:
    """Random actor params, perturbed so the mean action is far from 0 (the head's orthogonal
    init with gain 0.01 would make every rate change tiny)."""
    k_init, k_noise = jax.random.split(jax.random.PRNGKey(seed))
    params = agent.init(k_init, spec).actor
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(k_noise, len(leaves))
    leaves = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(tree, leaves)


@pytest.fixture(scope="module", params=[("ppo-mocc", False), ("aurora", False),
                                        ("ppo-mocc", True)],
                ids=["ppo-mocc", "aurora", "ppo-mocc-log-ratios"])
def saved(request, tmp_path_factory):
    algo, log_ratios = request.param
    use_pref = algo != "aurora"
    # Start above capacity so the queue builds: every feature moves (latency ratio > 1, a
    # nonzero gradient, losses), not only the sending ratio.
    env, params = make_single_flow(links=[LINK], episode_len=N_MI + 5, use_pref=use_pref,
                                   preference=PREF, init_rate=(1.3, 1.3),
                                   log_ratios=log_ratios)
    agent = PPO(pref_dim=3 if use_pref else 0)
    actor = _actor(agent, env.spec)
    path = tmp_path_factory.mktemp(algo) / "policy"
    out = save_policy(path, agent, actor, env, params, algo,
                      preference=PREF if use_pref else None)
    return dict(algo=algo, env=env, params=params, agent=agent, actor=actor, path=out,
                log_ratios=log_ratios)


def test_files_and_metadata(saved):
    meta = json.loads((saved["path"] / "policy.json").read_text())
    assert meta["format"] == "ccjax-policy/2" == deploy.FORMAT
    assert meta["algo"] == saved["algo"]
    assert meta["network"] == {"kind": "gaussian-mlp", "activation": "tanh", "hidden": [64, 32],
                               "pn_width": 32,
                               "pref_dim": 0 if saved["algo"] == "aurora" else 3}
    # the network's fields live only under "network" (no format-1 copies at the top level)
    assert not {"hidden", "pn_width", "pref_dim", "activation"} & set(meta)
    assert meta["history"] == 10
    assert meta["features"] == "mocc" and meta["action_map"] == "mocc"
    assert meta["objectives"] == ["thr", "lat", "loss"] and meta["mi_min_rtts"] is None
    assert meta["alpha"] == pytest.approx(0.025) and meta["mi_rtts"] == pytest.approx(0.5)
    assert meta["log_ratios"] is saved["log_ratios"]
    assert 0 < meta["min_rate"] < meta["max_rate"]
    assert meta["preference"] == (None if saved["algo"] == "aurora"
                                  else pytest.approx(list(PREF)))
    with np.load(saved["path"] / "policy.npz") as z:
        keys = set(z.files)
    assert {"trunk/h0/kernel", "trunk/h1/bias", "mean/kernel", "mean/bias", "log_std"} <= keys
    assert ("trunk/pn/kernel" in keys) == (saved["algo"] != "aurora")
    assert not list(saved["path"].glob("*.tmp"))  # the atomic writes left nothing behind


def test_load_policy_round_trip(saved):
    module, actor, meta = load_policy(saved["path"])
    assert module == saved["agent"].actor_net  # the same GaussianActor
    assert tuple(module.hidden) == (64, 32)
    assert module.pref_dim == saved["agent"].pref_dim and module.pn_width == 32
    assert meta["algo"] == saved["algo"] and meta["format"] == deploy.FORMAT
    a = traverse_util.flatten_dict(saved["actor"]["params"], sep="/")
    b = traverse_util.flatten_dict(actor["params"], sep="/")
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)
    obs = jax.random.normal(jax.random.PRNGKey(1), (4, saved["env"].obs_dim))
    m0, _ = saved["agent"].actor_net.apply(saved["actor"], obs)
    m1, _ = module.apply(actor, obs)
    np.testing.assert_array_equal(np.asarray(m0), np.asarray(m1))
    a = deterministic_action(meta, module, actor, obs)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(m0)[:, 0])


def test_numpy_policy_matches_jax_actor(saved):
    pol = deploy.load(saved["path"])
    assert pol.obs_dim == saved["env"].obs_dim
    obs = np.asarray(jax.random.uniform(jax.random.PRNGKey(2), (64, pol.obs_dim),
                                        minval=-2.0, maxval=3.0))
    mean, _ = saved["agent"].actor_net.apply(saved["actor"], jnp.asarray(obs))
    mean = np.asarray(mean)
    assert np.std(mean) > 0.05  # the perturbed actor's actions differ between observations
    np.testing.assert_allclose(pol.mean(obs), mean, atol=1e-5)
    for i in range(3):
        assert pol.act(obs[i]) == pytest.approx(float(mean[i, 0]), abs=1e-5)


def _env_run(saved):
    """N_MI steps of the environment driven by the JAX actor's deterministic action; returns
    the rate of every MI and that MI's stats of the agent's flow (``state.sim.last`` flow 0)."""
    env, params, agent, actor = saved["env"], saved["params"], saved["agent"], saved["actor"]

    def body(carry, _):
        obs, st = carry
        mean, _ = agent.actor_net.apply(actor, obs)
        obs, st, _, _, info = env.step_env(jax.random.PRNGKey(0), st, mean[0], params)
        stats = jax.tree.map(lambda x: x[0], st.sim.last)
        rec = {f: getattr(stats, f) for f in deploy.STATS_FIELDS}
        return (obs, st), (info.rate, info.valid, rec)

    @jax.jit
    def run(key):
        obs, st = env.reset(key, params)
        _, out = jax.lax.scan(body, (obs, st), None, length=N_MI)
        return st.rate, out

    init_rate, (rates, valid, stats) = run(jax.random.PRNGKey(3))
    assert bool(np.all(valid))
    return float(init_rate), np.asarray(rates, np.float64), jax.tree.map(np.asarray, stats)


def test_mocc_reproduces_environment_rates(saved):
    init_rate, env_rates, stats = _env_run(saved)
    pol = deploy.load(saved["path"])
    cc = deploy.MOCC(pol, init_rate)
    rates = [cc.get_sending_rate()]  # the first MI's rate: one decision on the empty history
    for t in range(N_MI - 1):
        rates.append(cc.report_status({f: stats[f][t] for f in deploy.STATS_FIELDS}))
    rates = np.asarray(rates)
    if saved["log_ratios"]:  # the network sees the logs of the two ratios
        ratios = cc._hist[:, :2]
        assert np.all(ratios > 0) and np.ptp(ratios[:, 1]) > 0.1
        obs_hist = cc.observation()[-3 * N_HIST:].reshape(N_HIST, 3)
        np.testing.assert_allclose(obs_hist[:, :2], np.log(ratios))
    # the actor really steers (the rate moves by more than the tolerance) and the path queues
    assert np.ptp(env_rates) / env_rates.mean() > 0.05
    assert np.ptp(stats["rtt_mean"]) > 5e-3
    assert np.any(np.abs(stats["rtt_second_half"] - stats["rtt_first_half"]) > 1e-3)
    np.testing.assert_allclose(rates, env_rates, rtol=1e-4)
    # and the MI length follows Aurora: mi_rtts x the last MI's mean RTT
    assert cc.next_interval_s(0.05) == pytest.approx(0.025)


def test_mocc_accepts_objects_and_eq1():
    """MOCC Eq. 1 on a hand-made policy whose mean action is a constant (zero weights except
    the head's bias), with stats given as an object."""
    hist = 10
    weights = {"trunk/h0/kernel": np.zeros((30, 4)), "trunk/h0/bias": np.zeros(4),
               "mean/kernel": np.zeros((4, 1)), "mean/bias": np.full(1, 2.0),
               "log_std": np.zeros(1)}
    meta = dict(format=deploy.FORMAT_V1, algo="aurora", hidden=[4], pn_width=32, pref_dim=0,
                history=hist, alpha=0.025, mi_rtts=0.5, min_rate=1500.0, max_rate=1.5e8,
                activation="tanh", preference=None)
    pol = deploy.Policy(weights, meta)
    cc = deploy.MOCC(pol, 1e5)
    assert cc.get_sending_rate() == pytest.approx(1e5 * 1.05)

    class Stats:
        send_rate, delivery_rate, rtt_mean = 1e5, 0.0, 0.04
        rtt_first_half = rtt_second_half = 0.04
        duration_s, rtt_samples = 0.02, 0.0

    assert cc.report_status(Stats()) == pytest.approx(1e5 * 1.05**2)
    np.testing.assert_allclose(cc.observation()[-3:], deploy.EMPTY)  # no delivery, no RTT
    pol._head = (np.zeros((4, 1)), np.full(1, -2.0))
    assert cc.report_status(Stats()) == pytest.approx(1e5 * 1.05)  # +a then -a restores
    with pytest.raises(ValueError, match="rtt_mean"):
        cc.report_status({"send_rate": 1.0, "delivery_rate": 1.0, "duration_s": 0.1,
                          "rtt_samples": 3})


def test_import_without_jax():
    root = Path(__file__).resolve().parents[1]
    code = "import sys; sys.modules['jax'] = None; import ccjax.deploy; import ccjax"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-c", "import ccjax.deploy, sys; "
                        "print('jax' in sys.modules, 'flax' in sys.modules)"],
                       capture_output=True, text=True, cwd=root, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["False", "False"], r.stderr


def test_bad_inputs(saved, tmp_path):
    pol = deploy.load(saved["path"])
    cc = deploy.MOCC(pol, 1e5)
    with pytest.raises(ValueError, match="sum to 1"):
        cc.register([0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match=">= 0"):
        cc.register([1.5, -0.5, 0.0])
    with pytest.raises(ValueError, match="three"):
        cc.register([0.5, 0.5])
    if pol.pref_dim:
        cc.register([0.2, 0.3, 0.5])
        assert cc.preference == (0.2, 0.3, 0.5)
    else:
        with pytest.raises(ValueError, match="no preference"):
            cc.register([0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="init_rate"):
        deploy.MOCC(pol, 0.0)
    # an empty directory
    with pytest.raises(ConfigError, match="missing"):
        load_policy(tmp_path)
    with pytest.raises(FileNotFoundError, match="missing"):
        deploy.load(tmp_path)
    with pytest.raises(ConfigError, match="directory"):
        load_policy(tmp_path / "nope")


def test_load_rejects_wrong_format_and_shapes(saved, tmp_path):
    src = saved["path"]
    meta = json.loads((src / "policy.json").read_text())
    bad = tmp_path / "fmt"
    bad.mkdir()
    (bad / "policy.npz").write_bytes((src / "policy.npz").read_bytes())
    (bad / "policy.json").write_text(json.dumps({**meta, "format": "ccjax-policy/9"}))
    with pytest.raises(ConfigError, match="format"):
        load_policy(bad)
    with pytest.raises(deploy.PolicyError, match="format"):
        deploy.load(bad)
    (bad / "policy.json").write_text(json.dumps({**meta, "history": 8}))  # obs size differs
    with pytest.raises(ConfigError, match="shape"):
        load_policy(bad)
    with pytest.raises(deploy.PolicyError, match="shape"):
        deploy.load(bad)
    (bad / "policy.json").write_text(
        json.dumps({**meta, "network": {**meta["network"], "hidden": [64]}}))
    with pytest.raises(ConfigError, match="not part of this network"):
        load_policy(bad)
    with pytest.raises(deploy.PolicyError, match="extra"):
        deploy.load(bad)
    meta2 = dict(meta)
    del meta2["alpha"]
    (bad / "policy.json").write_text(json.dumps(meta2))
    with pytest.raises(ConfigError, match="alpha"):
        load_policy(bad)


def test_save_policy_rejects_mismatch(saved, tmp_path):
    env, params = saved["env"], saved["params"]
    wrong = PPO(pref_dim=0 if env.use_pref else 3)
    with pytest.raises(ConfigError, match="pref_dim"):
        save_policy(tmp_path / "p", wrong, saved["actor"], env, params, "x")
    with pytest.raises(ConfigError, match="preference"):
        save_policy(tmp_path / "p", saved["agent"], saved["actor"], env, params, "x",
                    preference=(0.5, 0.5, 0.5))


def _as_v1(meta: dict) -> dict:
    """The format-1 file of a MOCC/Aurora policy.json of format 2."""
    v1 = {k: v for k, v in meta.items() if k not in ("network", "features", "action_map",
                                                      "objectives", "mi_min_rtts")}
    net = meta["network"]
    return {**v1, "format": "ccjax-policy/1", "hidden": net["hidden"],
            "pn_width": net["pn_width"], "pref_dim": net["pref_dim"],
            "activation": net["activation"]}


def test_format_1_files_load_and_act_the_same(saved, tmp_path):
    d = tmp_path / "v1"
    shutil.copytree(saved["path"], d)
    meta = json.loads((d / "policy.json").read_text())
    (d / "policy.json").write_text(json.dumps(_as_v1(meta)))
    module, actor, m1 = load_policy(d)
    assert m1["format"] == "ccjax-policy/1"
    assert m1["network"] == meta["network"] and m1["mi_min_rtts"] is None
    assert m1["features"] == "mocc" and m1["objectives"] == ["thr", "lat", "loss"]
    pol1, pol2 = deploy.load(d), deploy.load(saved["path"])
    obs = np.random.default_rng(0).normal(size=(8, pol1.obs_dim))
    np.testing.assert_array_equal(pol1.actions(obs), pol2.actions(obs))
    np.testing.assert_allclose(pol1.actions(obs), np.asarray(deterministic_action(
        m1, module, actor, jnp.asarray(obs, jnp.float32))), atol=1e-5)


def test_files_without_log_ratios_read_as_raw_features(saved, tmp_path):
    """A format-1 policy.json written before ``log_ratios`` existed means raw features, in both
    readers; format 2 always has the field."""
    d = tmp_path / "old"
    shutil.copytree(saved["path"], d)
    meta = json.loads((d / "policy.json").read_text())
    v2 = dict(meta)
    del v2["log_ratios"]
    (d / "policy.json").write_text(json.dumps(v2))
    with pytest.raises(deploy.PolicyError, match="'log_ratios' is missing"):
        deploy.load(d)
    with pytest.raises(ConfigError, match="'log_ratios' is missing"):
        load_policy(d)
    meta = _as_v1(meta)
    del meta["log_ratios"]
    (d / "policy.json").write_text(json.dumps(meta))
    assert deploy.load(d).log_ratios is False
    assert load_policy(d)[2]["log_ratios"] is False
    meta["log_ratios"] = "yes"
    (d / "policy.json").write_text(json.dumps(meta))
    with pytest.raises(deploy.PolicyError, match="log_ratios"):
        deploy.load(d)
    with pytest.raises(ConfigError, match="log_ratios"):
        load_policy(d)


def test_log_floor_matches_features():
    from ccjax.envs import features

    assert deploy.LOG_FLOOR == features.LOG_FLOOR
    assert deploy.EMPTY == features.EMPTY
