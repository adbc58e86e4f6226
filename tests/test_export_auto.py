"""Export format 2 for any agent (ccjax.agents.export), with AUTO's network as the new case: the
policy controller (ccjax.cc.policy) and the NumPy deployment (ccjax.deploy) do what the
environment does around a deterministic AUTO agent (features with the previous action, the
seven multipliers, the MI cap of AUTO Eq. 6, two-weight preferences), and format 1 (the shipped
MOCC model) still loads and acts as before."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from ccjax import deploy
from ccjax.agents.envelope import Envelope
from ccjax.agents.export import deterministic_action, load_policy, save_policy
from ccjax.cc.policy import load_policy_controller
from ccjax.envs import features
from ccjax.envs.build import make_single_flow
from ccjax.errors import ConfigError
from ccjax.models import shipped_model
from ccjax.sim import LinkSpec, init_state, tick

# a queue deep enough (300 packets, up to 360 ms at 10 Mbps) for AUTO's MI cap to bind
LINK = LinkSpec(bandwidth_mbps=(10.0,), rtt_ms=(40.0,), buffer_pkts=300)
PREF = (0.7, 0.3)
N_MI = 40
#: these random weights take five different actions on LINK, hit the MI cap and cause losses
SEED, SCALE = 3, 1.0


def _net_params(net, obs_dim: int) -> dict:
    """Random weights, perturbed so that the logits differ clearly between actions (the policy
    head's orthogonal init with gain 0.01 leaves them all near 0)."""
    p = net.init(jax.random.PRNGKey(SEED), jnp.zeros((1, obs_dim)))
    leaves, tdef = jax.tree.flatten(p)
    keys = jax.random.split(jax.random.PRNGKey(SEED + 100), len(leaves))
    return jax.tree.unflatten(tdef, [x + SCALE * jax.random.normal(k, x.shape)
                                     for x, k in zip(leaves, keys, strict=True)])


@pytest.fixture(scope="module")
def auto(tmp_path_factory):
    env, params = make_single_flow(links=[LINK], features="auto", action_map="auto",
                                   reward="auto", mi_min_rtts=1.5, preference=PREF,
                                   init_rate=(1.2, 1.2), rate_bounds_pkts=(10.0, 41666.0),
                                   log_ratios=True, episode_len=N_MI + 5)
    agent = Envelope(hidden=(16, 16, 16), head_width=8)
    actor = _net_params(agent.net, env.obs_dim)
    path = save_policy(tmp_path_factory.mktemp("auto") / "policy", agent, actor, env, params,
                       "auto", preference=PREF)
    return SimpleNamespace(env=env, params=params, agent=agent, actor=actor, path=path)


def test_format_2_describes_the_network_and_the_environment(auto):
    meta = json.loads((auto.path / "policy.json").read_text())
    assert meta == {
        "format": "ccjax-policy/2", "algo": "auto",
        "network": {"kind": "discrete-pref-after-trunk", "activation": "relu",
                    "hidden": [16, 16, 16], "head_width": 8, "pref_dim": 2, "n_actions": 7,
                    "n_objectives": 2},
        "features": "auto", "action_map": "auto", "objectives": ["thr", "delay"],
        "history": 10, "alpha": pytest.approx(0.025), "mi_rtts": 0.5, "mi_min_rtts": 1.5,
        "min_rate": 15000.0, "max_rate": pytest.approx(41666.0 * 1500), "log_ratios": True,
        "preference": pytest.approx(list(PREF)),
    }
    with np.load(auto.path / "policy.npz") as z:
        keys = set(z.files)
    want = traverse_util.flatten_dict(auto.actor["params"], sep="/")
    assert keys == set(want) and {"trunk_h2/kernel", "pi_out/bias", "v_out/kernel"} <= keys


def test_load_policy_round_trip_and_greedy_action(auto):
    module, actor, meta = load_policy(auto.path)
    assert module == auto.agent.net  # the same PrefAfterTrunk
    assert meta["network"] == auto.agent.export_network() and meta["mi_min_rtts"] == 1.5
    a = traverse_util.flatten_dict(auto.actor["params"], sep="/")
    b = traverse_util.flatten_dict(actor["params"], sep="/")
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)
    obs = jax.random.normal(jax.random.PRNGKey(1), (16, auto.env.obs_dim))
    act = deterministic_action(meta, module, actor, obs)
    logits, _ = auto.agent.net.apply(auto.actor, obs)
    assert act.dtype == jnp.int32 and act.shape == (16,)
    np.testing.assert_array_equal(np.asarray(act), np.argmax(np.asarray(logits), -1))


def test_numpy_network_matches_jax(auto):
    pol = deploy.load(auto.path)
    assert (pol.kind, pol.obs_dim, pol.n_actions) == ("discrete-pref-after-trunk",
                                                      auto.env.obs_dim, 7)
    module, actor, meta = load_policy(auto.path)
    # deploy's table of shapes is the module's own
    shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0),
                            jnp.zeros((1, auto.env.obs_dim)))
    assert deploy.expected_shapes(pol.meta) == {
        k: tuple(v.shape) for k, v in traverse_util.flatten_dict(shapes["params"], sep="/").items()}
    obs = np.asarray(jax.random.uniform(jax.random.PRNGKey(2), (256, pol.obs_dim),
                                        minval=-2.0, maxval=3.0))
    logits, _ = module.apply(actor, jnp.asarray(obs))
    logits = np.asarray(logits)  # float32: its round-off grows with the logits' scale
    np.testing.assert_allclose(pol.logits(obs), logits, rtol=1e-4,
                               atol=1e-5 * np.abs(logits).max())
    acts = np.asarray(deterministic_action(meta, module, actor, jnp.asarray(obs)))
    assert len(np.unique(acts)) >= 3  # the weights really pick different actions
    np.testing.assert_array_equal(pol.actions(obs), acts)
    assert all(pol.act(obs[i]) == int(acts[i]) for i in range(8))
    with pytest.raises(ValueError, match="no mean"):
        pol.mean(obs)


def _env_run(auto):
    """N_MI MIs of the environment driven by the greedy action: per MI the action, the rate it
    set, the tick the MI ended at, its length and the agent flow's stats."""
    env, ep, net, actor = auto.env, auto.params, auto.agent.net, auto.actor
    names = deploy.AUTO_STATS_FIELDS + ("min_rtt",)

    def body(carry, _):
        obs, st = carry
        logits, _ = net.apply(actor, obs)
        a = jnp.argmax(logits).astype(jnp.int32)
        obs, st, _, _, info = env.step_env(jax.random.PRNGKey(0), st, a, ep)
        last = jax.tree.map(lambda x: x[0], st.sim.last)
        return (obs, st), (a, info.rate, st.sim.t, info.mi_s, info.valid,
                           {f: getattr(last, f) for f in names})

    @jax.jit
    def run(key):
        obs, st = env.reset(key, ep)
        _, out = jax.lax.scan(body, (obs, st), None, length=N_MI)
        return st, out

    st0, (a, rate, t, mi_s, valid, stats) = run(jax.random.PRNGKey(0))
    assert bool(np.all(valid))
    return st0, np.asarray(a), np.asarray(rate, np.float64), np.asarray(t), np.asarray(mi_s), \
        jax.tree.map(np.asarray, stats)


def test_controller_and_deploy_reproduce_the_environment(auto):
    st0, env_a, env_rates, env_t, env_mi, stats = _env_run(auto)
    # the run exercises what AUTO adds: several actions, the MI cap, losses
    assert len(np.unique(env_a)) >= 3
    capped = 1.5 * stats["min_rtt"] < 0.5 * stats["rtt_mean"]
    assert capped[:-1].sum() >= 5
    assert np.sum(stats["loss_rate"] > 0) >= 2

    # the JAX controller, loaded from the file, on the same link and simulator key
    pc = load_policy_controller(auto.path)
    assert (pc.kind, pc.features, pc.action_map, pc.mi_min_rtts) == (
        "discrete-pref-after-trunk", "auto", "auto", 1.5)
    assert pc.preference == pytest.approx(PREF)
    p = pc.make_params(1, init_rate=st0.rate)  # the environment's initial rate
    env = auto.env
    link = jax.tree.map(lambda x: x[0], auto.params.links)
    s0 = init_state(env.sim, link, pc, p, st0.sim.key)

    def step(s, _):
        s = tick(env.sim, pc, link, p, s)
        return s, (s.decision.rate[0], s.mi_done[0], s.t, s.cc.action[0])

    _, (rate, done, t, act) = jax.jit(
        lambda s: jax.lax.scan(step, s, None, length=int(env_t[-1])))(s0)
    rate, done, t, act = map(np.asarray, (rate, done, t, act))
    assert np.array_equal(t[done][:N_MI], env_t)  # the same MI boundaries, cap included
    ctl_rates = np.concatenate([[float(s0.decision.rate[0])], rate[done]])[:N_MI]
    ctl_a = np.concatenate([[int(s0.cc.action[0])], act[done]])[:N_MI]
    np.testing.assert_array_equal(ctl_a, env_a)
    np.testing.assert_allclose(ctl_rates, env_rates, rtol=1e-5)

    # the NumPy deployment fed the environment's per-MI measurements
    pol = deploy.load(auto.path)
    cc = deploy.Sender(pol, float(st0.rate))
    assert cc.preference == pytest.approx(PREF)
    rates, acts = [cc.get_sending_rate()], [cc.last_action]
    for i in range(N_MI - 1):
        rates.append(cc.report_status({f: stats[f][i] for f in pol.stats_fields}))
        acts.append(cc.last_action)
        # the next MI's length: Eq. 6, within the tick that ends an MI
        want = cc.next_interval_s(stats["rtt_mean"][i], stats["min_rtt"][i])
        assert abs(env_mi[i + 1] - want) <= env.sim.tick_s + 1e-6, i
    assert acts == env_a.tolist()
    np.testing.assert_allclose(rates, env_rates, rtol=1e-5)
    # the history's last column is the previous action's feature: log2 of its multiplier
    np.testing.assert_allclose(cc._hist[-1, 4], np.log2(deploy.actions.AUTO_MULTIPLIERS[acts[-2]]))


def test_auto_features_match_the_environments_with_aurora_guards():
    # an MI with feedback, one with no delivery, one with a sending ratio >= 1000, one without
    # RTT samples
    cases = dict(send_rate=[2e5, 1e5, 2e6, 1e5], delivery_rate=[1e5, 0.0, 1e3, 1e5],
                 rtt_mean=[0.05, 0.06, 0.04, 0.9], rtt_first_half=[0.045, 0.05, 0.04, 0.9],
                 rtt_second_half=[0.055, 0.07, 0.04, 0.9], duration_s=[0.02, 0.03, 0.02, 0.02],
                 rtt_samples=[10.0, 3.0, 2.0, 0.0], loss_rate=[0.1, 0.0, 0.5, 0.2])
    pol = SimpleNamespace(features="auto", stats_fields=deploy.AUTO_STATS_FIELDS)
    cc = deploy.Sender.__new__(deploy.Sender)
    cc.policy, cc._min_lat, cc._act_feat = pol, 0.045, -1.0
    for i in range(4):
        row = {k: v[i] for k, v in cases.items()}
        got, got_min = cc._features(row)
        stats = SimpleNamespace(**{k: jnp.float32(v) for k, v in row.items()})
        want, want_min = features.auto_features(stats, jnp.float32(0.045), jnp.float32(-1.0))
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, err_msg=str(i))
        assert got_min == pytest.approx(float(want_min))
    assert deploy.AUTO_EMPTY == features.AUTO_EMPTY
    assert {k: len(v) for k, v in deploy.FEATURES.items()} == {
        k: s.n for k, s in features.FEATURE_SETS.items()}


def test_preferences_have_one_weight_per_objective(auto):
    pc = load_policy_controller(auto.path, preference=(0.2, 0.8))
    assert pc.preference == (0.2, 0.8)
    assert pc.make_params(3).pref.shape == (3, 2)
    with pytest.raises(ConfigError, match="w_thr,w_delay"):
        load_policy_controller(auto.path, preference=(0.2, 0.3, 0.5))
    cc = deploy.Sender(deploy.load(auto.path), 1e6, preference=[0.4, 0.6])
    assert cc.preference == (0.4, 0.6) and cc.observation()[:2].tolist() == [0.4, 0.6]
    with pytest.raises(ValueError, match="two weights w_thr, w_delay"):
        cc.register([0.2, 0.3, 0.5])
    with pytest.raises(ConfigError, match="preference"):
        save_policy(auto.path.parent / "x", auto.agent, auto.actor, auto.env, auto.params,
                    "auto", preference=(0.2, 0.3, 0.5))


def test_mi_cap_in_deploy(auto):
    assert deploy.Sender(deploy.load("mocc"), 1e5).next_interval_s(0.2) == pytest.approx(0.1)
    cc = deploy.Sender(deploy.load(auto.path), 1e5)  # mi_min_rtts = 1.5
    assert cc.next_interval_s(0.2, 0.04) == pytest.approx(0.06)  # min(0.1, 1.5 x 0.04)
    assert cc.next_interval_s(0.1, 0.04) == pytest.approx(0.05)
    assert cc.next_interval_s(0.2, 0.0) == pytest.approx(0.1)  # no RTT measured: no cap
    with pytest.raises(ValueError, match="min_rtt"):
        cc.next_interval_s(0.2)


def test_shipped_format_1_model_loads_and_acts_as_its_weights_say():
    """The shipped MOCC model (format 1): both readers read it as format 2 describes a
    gaussian-mlp on MOCC's features, and both compute the forward pass written out here."""
    m = shipped_model("mocc")
    raw = json.loads((m.path / "policy.json").read_text())
    assert raw["format"] == "ccjax-policy/1" and "network" not in raw
    module, actor, meta = load_policy(m.path)
    assert meta["network"] == {"kind": "gaussian-mlp", "activation": "tanh",
                               "hidden": raw["hidden"], "pn_width": raw["pn_width"],
                               "pref_dim": 3}
    assert (meta["features"], meta["action_map"], meta["mi_min_rtts"]) == ("mocc", "mocc", None)
    pc = load_policy_controller(m.path)
    assert (pc.kind, pc.features, pc.objectives) == ("gaussian-mlp", "mocc",
                                                     ("thr", "lat", "loss"))
    pol = deploy.load("mocc")
    obs = np.random.default_rng(0).normal(size=(32, pol.obs_dim))
    with np.load(m.path / "policy.npz") as z:
        w = {k: z[k].astype(np.float64) for k in z.files}
    pn = np.tanh(obs[:, :3] @ w["trunk/pn/kernel"] + w["trunk/pn/bias"])
    x = np.concatenate([pn, obs[:, 3:]], -1)
    for i in range(len(raw["hidden"])):
        x = np.tanh(x @ w[f"trunk/h{i}/kernel"] + w[f"trunk/h{i}/bias"])
    mean = (x @ w["mean/kernel"] + w["mean/bias"])[:, 0]
    np.testing.assert_allclose(pol.actions(obs), mean, rtol=1e-12, atol=1e-12)
    jax_mean = deterministic_action(meta, module, actor, jnp.asarray(obs, jnp.float32))
    np.testing.assert_allclose(np.asarray(jax_mean), mean, atol=1e-5)


def _bad(auto, tmp_path, meta=None, drop=None):
    d = tmp_path / "bad"
    if not d.exists():
        shutil.copytree(auto.path, d)
    m = json.loads((auto.path / "policy.json").read_text()) if meta is None else meta
    m = {k: v for k, v in m.items() if k != drop}
    (d / "policy.json").write_text(json.dumps(m))
    return d


def _net(**kw):
    return {"kind": "discrete-pref-after-trunk", "activation": "relu", "hidden": [16, 16, 16],
            "head_width": 8, "pref_dim": 2, "n_actions": 7, "n_objectives": 2, **kw}


@pytest.mark.parametrize("change, words", [
    ({"format": "ccjax-policy/3"}, ["format", "ccjax-policy/2"]),
    ({"network": _net(kind="lstm")}, ["network.kind", "lstm"]),
    ({"network": {k: v for k, v in _net().items() if k != "head_width"}},
     ["network.head_width", "missing"]),
    ({"network": _net(dropout=0.1)}, ["network", "dropout"]),
    ({"network": _net(activation="tanh")}, ["network.activation", "relu"]),
    ({"network": _net(hidden=[])}, ["network.hidden"]),
    ({"network": _net(n_actions=5)}, ["action_map", "discrete of 5"]),
    ({"network": _net(pref_dim=3)}, ["network.pref_dim", "thr, delay"]),
    ({"network": _net(n_objectives=3)}, ["network.n_objectives"]),
    ({"network": [1, 2]}, ["network", "an object"]),
    ({"action_map": "mocc"}, ["action_map", "box of 1"]),
    ({"features": "vivace"}, ["features", "vivace"]),
    ({"objectives": ["thr", "thr"]}, ["objectives"]),
    ({"objectives": ["thr"]}, ["pref_dim"]),
    ({"history": 0}, ["history"]),
    ({"history": 2.5}, ["history", "integer"]),
    ({"alpha": True}, ["alpha"]),
    ({"mi_rtts": float("inf")}, ["mi_rtts", "finite"]),
    ({"mi_min_rtts": -1.5}, ["mi_min_rtts", "null for no cap"]),
    ({"mi_min_rtts": "1.5"}, ["mi_min_rtts", "a number or null"]),
    ({"min_rate": 1e9}, ["min_rate"]),
    ({"log_ratios": 1}, ["log_ratios"]),
    ({"preference": [0.5, 0.3, 0.2]}, ["preference", "two weights"]),
    ({"preference": [0.5, 0.6]}, ["preference", "sum to 1"]),
    ({"algo": ""}, ["algo"]),
])
def test_bad_fields_are_one_line_errors_in_both_readers(auto, tmp_path, change, words):
    meta = {**json.loads((auto.path / "policy.json").read_text()), **change}
    d = _bad(auto, tmp_path, meta)
    for exc, reader in ((ConfigError, load_policy), (deploy.PolicyError, deploy.load)):
        with pytest.raises(exc) as e:
            reader(d)
        msg = str(e.value)
        assert "\n" not in msg, msg
        for w in words:
            assert w in msg, (w, msg)


@pytest.mark.parametrize("field", ["network", "objectives", "mi_min_rtts", "features",
                                   "action_map", "preference"])
def test_missing_fields_are_named(auto, tmp_path, field):
    d = _bad(auto, tmp_path, drop=field)
    with pytest.raises(ConfigError, match=f"'{field}' is missing"):
        load_policy(d)
    with pytest.raises(deploy.PolicyError, match=f"'{field}' is missing"):
        deploy.load(d)


def test_weights_that_do_not_fit_the_description(auto, tmp_path):
    meta = json.loads((auto.path / "policy.json").read_text())
    d = _bad(auto, tmp_path, {**meta, "network": _net(hidden=[16, 16])})
    with pytest.raises(ConfigError, match="not part of this network"):
        load_policy(d)
    with pytest.raises(deploy.PolicyError, match="extra"):
        deploy.load(d)
    d = _bad(auto, tmp_path, {**meta, "network": _net(head_width=4)})
    with pytest.raises(ConfigError, match="shape"):
        load_policy(d)
    with pytest.raises(deploy.PolicyError, match="shape"):
        deploy.load(d)
    d = _bad(auto, tmp_path, {**meta, "history": 8})
    with pytest.raises(ConfigError, match="history=8"):
        load_policy(d)


def test_save_policy_checks_the_agent_against_the_environment(auto, tmp_path):
    with pytest.raises(ConfigError, match="export_network"):
        save_policy(tmp_path / "p", object(), auto.actor, auto.env, auto.params, "auto")
    wrong = Envelope(hidden=(16, 16, 16), head_width=8, pref_dim=0)
    with pytest.raises(ConfigError, match="pref_dim"):
        save_policy(tmp_path / "p", wrong, auto.actor, auto.env, auto.params, "auto")
    with pytest.raises(ConfigError, match="shape|not part"):
        save_policy(tmp_path / "p", Envelope(hidden=(16, 16), head_width=8), auto.actor,
                    auto.env, auto.params, "auto")
    assert not (tmp_path / "p").exists()  # nothing written on a refusal


def test_deploy_copied_beside_actions_py_runs_without_jax(auto, tmp_path):
    """A datapath's copy: deploy.py and actions.py side by side, nothing else of ccjax."""
    root = Path(__file__).resolve().parents[1] / "ccjax"
    shutil.copy(root / "deploy.py", tmp_path / "deploy.py")
    code = ("import sys; sys.modules['jax'] = sys.modules['flax'] = None; import deploy; "
            f"p = deploy.load({str(auto.path)!r}); cc = deploy.Sender(p, 1e6); "
            "print(deploy.actions.__file__, cc.get_sending_rate(), 'ccjax' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert r.returncode == 1 and "actions.py" in r.stderr  # alone, it says what to copy
    assert "ImportError" in r.stderr
    shutil.copy(root / "envs" / "actions.py", tmp_path / "actions.py")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    where, rate, has_ccjax = r.stdout.split()
    assert Path(where) == (tmp_path / "actions.py").resolve() and has_ccjax == "False"
    assert float(rate) == pytest.approx(deploy.Sender(deploy.load(auto.path),
                                                      1e6).get_sending_rate())
