"""AdaM, AUTO's preference adaptation model (AUTO §4, Eqs. 18-23, Algorithm 2).

A trained AUTO policy covers every preference w = (w_t, 1 - w_t); AdaM picks the one that suits
the link a flow is on. It is a classifier: it reads the first ``sc`` = 10 MIs a flow runs under
the indicator preference w~ = (0.3, 0.7) (§5.1) and outputs one of a set of candidate
preferences (its classes). Its labels come from an expert that knows the link:

* the expert (Eq. 18) picks, every MI, the multiplier that brings the rate closest to the
  link's capacity c, an overshoot costing c more: argmin_a |rate m_a - c| + c 1[rate m_a > c];
  c is the capacity over the next base RTT (the paper leaves which c open on a varying link);
* on each training link the expert and the policy under each class w run ``horizon`` MIs; the
  discounted vector returns over ``window`` MIs from each MI (Eq. 20) are fitted with a 2-D
  Gaussian by maximum likelihood (Eq. 21: sample mean and covariance);
* the label is the class whose Gaussian is closest to the expert's in KL(G* || G_w) (Eq. 22,
  in closed form), i.e. the preference under which the policy behaves most like the expert;
* AdaM is LSTM -> LSTM -> linear over the classes (§4.3), trained with cross-entropy on one-hot
  labels (Eq. 23 prints its arguments reversed); its per-step input is the newest MI's features
  of the policy's observation (``features.encode`` as the policy sees them).

Everything is one vmapped rollout over links x (classes + indicator + expert): label data for a
few hundred links takes seconds to minutes on a CPU. The paper leaves the class set, the
horizon, the window, gamma, the LSTM width and the training procedure open; the choices are the
defaults of ``AdaMConfig`` with their reasons.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

from ccjax.agents.drivers import init_runner, scan_rollout
from ccjax.envs.actions import AUTO_MULTIPLIERS
from ccjax.envs.single_flow import EnvParams, SingleFlowEnv
from ccjax.envs.vec import VecEnv
from ccjax.errors import ConfigError, require
from ccjax.sim import capacity


@dataclass(frozen=True)
class AdaMConfig:
    """AdaM's settings; every value is a choice where the paper is silent unless noted."""

    #: the candidate w_t (classes): the five preferences AUTO's fronts are evaluated at
    classes: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    indicator: float = 0.3  # AUTO §5.1: w~ = (0.3, 0.7)
    sc: int = 10  # AUTO §5.1: sample count SC = 10 MIs
    horizon: int = 80  # MIs each rollout runs for the return distributions
    window: int = 20  # MIs in one discounted return (gamma^20 = 0.36 at gamma 0.95)
    gamma: float = 0.95  # as the agent's (algos/auto.toml)
    skip: int = 10  # returns start after the first MIs (the start-up transient is the same
    #               for every class: it would pull all Gaussians together)
    lstm: int = 64  # width of both LSTM layers
    lr: float = 1e-3  # Adam
    epochs: int = 300  # full-batch steps
    seed: int = 0

    def __post_init__(self) -> None:
        require(len(self.classes) >= 2 and all(0 < c < 1 for c in self.classes), "classes",
                self.classes, "at least two w_t in (0, 1)")
        require(0 < self.indicator < 1, "indicator", self.indicator, "a w_t in (0, 1)")
        require(self.sc >= 1, "sc", self.sc, ">= 1 MIs")
        require(self.window >= 1 and self.horizon >= self.skip + self.window + 1, "horizon",
                self.horizon, f">= skip + window + 1 = {self.skip + self.window + 1} MIs")
        require(0 < self.gamma <= 1, "gamma", self.gamma, "in (0, 1]")


def expert_action(env: SingleFlowEnv, st: Any, params: EnvParams) -> jnp.ndarray:
    """AUTO Eq. 18 for one environment: the multiplier index whose rate is closest to the
    capacity c over the next base RTT, an overshoot penalised by c."""
    tick = env.sim.tick_s
    w = jnp.maximum(st.link.rtt_ticks[0].astype(jnp.float32), 1.0)
    t = st.sim.t.astype(jnp.float32)
    c = (capacity.cum(st.link.sched, t + w) - capacity.cum(st.link.sched, t)) / (w * tick)
    new = jnp.clip(st.rate * jnp.asarray(AUTO_MULTIPLIERS, jnp.float32), params.min_rate,
                   params.max_rate)
    cost = jnp.abs(new - c) + c * (new > c)
    return jnp.argmin(cost).astype(jnp.int32)


def gaussian_fit(x: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(mean (K,), covariance (K, K)) of samples x (S, K), by maximum likelihood (Eq. 21), with
    a small ridge so a policy that repeats one return still has an invertible covariance."""
    mu = x.mean(0)
    d = x - mu
    cov = d.T @ d / x.shape[0] + 1e-6 * jnp.eye(x.shape[1])
    return mu, cov


def kl_gauss(mu0: jnp.ndarray, cov0: jnp.ndarray, mu1: jnp.ndarray, cov1: jnp.ndarray
             ) -> jnp.ndarray:
    """KL(N0 || N1) for K-dimensional Gaussians (Eq. 22 in closed form)."""
    k = mu0.shape[-1]
    inv1 = jnp.linalg.inv(cov1)
    d = mu1 - mu0
    return 0.5 * (jnp.trace(inv1 @ cov0) + d @ inv1 @ d - k
                  + jnp.linalg.slogdet(cov1)[1] - jnp.linalg.slogdet(cov0)[1])


def discounted_returns(obj: jnp.ndarray, cfg: AdaMConfig) -> jnp.ndarray:
    """obj (H, K) per-MI vector rewards -> (S, K) returns over ``window`` MIs from each MI
    after ``skip`` (Eq. 20's samples)."""
    starts = jnp.arange(cfg.skip, cfg.horizon - cfg.window + 1)
    idx = starts[:, None] + jnp.arange(cfg.window)[None, :]
    disc = cfg.gamma ** jnp.arange(cfg.window, dtype=jnp.float32)
    return jnp.einsum("swk,w->sk", obj[idx], disc)


class LabelData:
    """AdaM's dataset over ``n_links`` links: ``seqs`` (L, sc, F) what the policy saw under the
    indicator preference, ``labels`` (L,) class indices, ``kl`` (L, C) every class's
    divergence from the expert, and the returns' means per class and for the expert."""

    def __init__(self, seqs: np.ndarray, labels: np.ndarray, kl: np.ndarray,
                 mu_class: np.ndarray, mu_expert: np.ndarray):
        self.seqs, self.labels, self.kl = seqs, labels, kl
        self.mu_class, self.mu_expert = mu_class, mu_expert


def label_data(env: SingleFlowEnv, params: EnvParams, agent: Any, agent_state: Any,
               cfg: AdaMConfig, key: jnp.ndarray) -> LabelData:
    """Roll the policy (greedy) under every class and the indicator, and the expert, on every
    link of ``params.links`` (one environment per link and role, no tick budget, so every step
    ends one MI for every environment), and label each link (module docstring)."""
    require(env.action_map == "auto" and env.n_objectives == 2, "env", env.action_map,
            "AUTO's environment (action_map auto, two objectives)")
    L = int(jax.tree.leaves(params.links)[0].shape[0])
    C = len(cfg.classes)
    wts = np.asarray(list(cfg.classes) + [cfg.indicator], np.float32)
    R = C + 2  # classes, indicator, expert
    role_w = np.concatenate([wts, [0.5]]).astype(np.float32)  # the expert ignores w
    pref = np.stack([role_w, 1.0 - role_w], -1)
    n = L * R
    venv = VecEnv(env, n, 0)
    p = params.replace(pref=jnp.asarray(np.repeat(pref, L, 0)),
                       link_index=jnp.tile(jnp.arange(L, dtype=jnp.int32), R),
                       pref_draw=jnp.zeros((), bool))
    is_expert = jnp.arange(n) >= L * (C + 1)
    expert = jax.vmap(lambda s: expert_action(env, s, p))

    def choose(r, k):
        a, aux = agent.act(agent_state, r.obs, k, False)
        return jnp.where(is_expert, expert(r.env_state), a), aux

    @jax.jit
    def run(key):
        runner = init_runner(venv, agent, agent_state, p, key)
        _, tr = scan_rollout(venv, runner, p, cfg.horizon, choose)
        return tr.objectives, tr.next_obs

    obj, nxt = run(key)  # (H, n, K), (H, n, D)
    obj = jnp.moveaxis(obj, 1, 0).reshape(R, L, cfg.horizon, 2)
    ret = jax.vmap(jax.vmap(lambda o: discounted_returns(o, cfg)))(obj)  # (R, L, S, K)
    mu, cov = jax.vmap(jax.vmap(gaussian_fit))(ret)
    per_link = lambda me, ce, mc, cc: jax.vmap(  # noqa: E731
        lambda m1, c1: kl_gauss(me, ce, m1, c1))(mc, cc)
    kl = jax.vmap(per_link)(mu[-1], cov[-1], jnp.swapaxes(mu[:C], 0, 1),
                            jnp.swapaxes(cov[:C], 0, 1))  # (L, C)
    nf = env.feature_set.n
    ind = jnp.moveaxis(nxt, 1, 0).reshape(R, L, cfg.horizon, -1)[C, :, : cfg.sc, -nf:]
    return LabelData(seqs=np.asarray(ind, np.float32), labels=np.asarray(kl.argmin(-1)),
                     kl=np.asarray(kl), mu_class=np.asarray(mu[:C]),
                     mu_expert=np.asarray(mu[-1]))


class AdaMNet(nn.Module):
    """LSTM -> LSTM -> linear over the classes (AUTO §4.3); the last step's output decides."""

    width: int
    n_classes: int

    @nn.compact
    def __call__(self, seq: jnp.ndarray) -> jnp.ndarray:
        x = nn.RNN(nn.OptimizedLSTMCell(self.width), name="lstm0")(seq)
        x = nn.RNN(nn.OptimizedLSTMCell(self.width), name="lstm1")(x)
        return nn.Dense(self.n_classes, name="out")(x[..., -1, :])


@dataclass
class AdaM:
    """A trained AdaM: its config, weights and the feature scaling it was trained with."""

    cfg: AdaMConfig
    params: dict
    mean: np.ndarray  # (F,) input standardisation, from the training sequences
    std: np.ndarray

    @property
    def net(self) -> AdaMNet:
        return AdaMNet(self.cfg.lstm, len(self.cfg.classes))

    def logits(self, seqs: np.ndarray) -> np.ndarray:
        x = (np.asarray(seqs, np.float32) - self.mean) / self.std
        return np.asarray(self.net.apply(self.params, jnp.asarray(x)))

    def predict(self, seqs: np.ndarray) -> np.ndarray:
        """Class indices (L,) for sequences (L, sc, F)."""
        return self.logits(seqs).argmax(-1)

    def preference(self, seq: np.ndarray) -> tuple[float, float]:
        """AUTO Algorithm 2's result for one flow's first ``sc`` MIs: w = (w_t, 1 - w_t)."""
        w = float(self.cfg.classes[int(self.predict(np.asarray(seq)[None])[0])])
        return w, 1.0 - w

    def save(self, path: str | os.PathLike) -> Path:
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        flat = traverse_util.flatten_dict(self.params["params"], sep="/")
        np.savez(d / "adam.npz", **{k: np.asarray(v) for k, v in flat.items()})
        meta = {"format": "ccjax-adam/1", "config": asdict(self.cfg),
                "mean": self.mean.tolist(), "std": self.std.tolist()}
        (d / "adam.json").write_text(json.dumps(meta, indent=2) + "\n")
        return d

    @classmethod
    def load(cls, path: str | os.PathLike) -> AdaM:
        d = Path(path)
        from ccjax import deploy

        try:
            meta = json.loads((d / "adam.json").read_text())
            # deploy's reader: a file cut short or holding NaN is one line naming it
            flat = {k: jnp.asarray(v) for k, v in deploy.read_weights(d / "adam.npz").items()}
        except (OSError, ValueError) as e:  # deploy.PolicyError is a ValueError
            raise ConfigError(f"adam={str(d)!r} is invalid: not a saved AdaM ({e})") from None
        require(meta.get("format") == "ccjax-adam/1", "format", meta.get("format"),
                "'ccjax-adam/1'")
        c = meta["config"]
        cfg = AdaMConfig(**{**c, "classes": tuple(c["classes"])})
        params = {"params": traverse_util.unflatten_dict(flat, sep="/")}
        return cls(cfg, params, np.asarray(meta["mean"], np.float32),
                   np.asarray(meta["std"], np.float32))


def train_adam(data: LabelData, cfg: AdaMConfig) -> tuple[AdaM, list[float]]:
    """Fit AdaM on ``data`` by full-batch Adam on the cross-entropy (Eq. 23, one-hot labels);
    returns the model and the loss per step."""
    x = np.asarray(data.seqs, np.float32)
    mean = x.reshape(-1, x.shape[-1]).mean(0)
    std = x.reshape(-1, x.shape[-1]).std(0) + 1e-6
    xs = jnp.asarray((x - mean) / std)
    y = jnp.asarray(data.labels, jnp.int32)
    net = AdaMNet(cfg.lstm, len(cfg.classes))
    params = net.init(jax.random.PRNGKey(cfg.seed), xs[:1])
    tx = optax.adam(cfg.lr)
    opt = tx.init(params)

    def loss_fn(p):
        logits = net.apply(p, xs)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def step(p, o):
        loss, g = jax.value_and_grad(loss_fn)(p)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o, loss

    losses = []
    for _ in range(cfg.epochs):
        params, opt, loss = step(params, opt)
        losses.append(float(loss))
    return AdaM(cfg, params, mean.astype(np.float32), std.astype(np.float32)), losses
