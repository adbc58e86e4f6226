"""PPO with a preference-conditioned actor and critic: MOCC's learner (MOCC §3.2, Eq. 3-5).

Reads top to bottom: configuration (static) and hyperparameters (dynamic, so a sweep vmaps
over them), ``init``, ``act``, the clipped surrogate with the entropy bonus, and ``update``
(GAE with the ``valid`` mask is ``ccjax.agents.returns.gae``). Aurora is the same learner
without the preference input (``pref_dim = 0``) and with Aurora's reward in the environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import distrax
import jax
import jax.numpy as jnp
import optax
from flax import struct

from ccjax.agents.base import Trajectory
from ccjax.agents.networks import Critic, GaussianActor
from ccjax.agents.returns import gae
from ccjax.algos import ADV_NORMS, ANNEAL_MODES, KIND_KEYS
from ccjax.envs.spec import EnvSpec
from ccjax.errors import ConfigError


class PPOHyper(struct.PyTreeNode):
    """Dynamic hyperparameters (vmappable); values and sources in algos/ppo-mocc.toml."""

    lr: jnp.ndarray  # Adam step size (MOCC Table 2: 1e-3)
    clip: jnp.ndarray  # PPO clip epsilon (MOCC Table 2: 0.2)
    gamma: jnp.ndarray  # discount (MOCC Table 2: 0.99)
    lam: jnp.ndarray  # GAE lambda (stable-baselines PPO1 default 0.95; MOCC silent)
    ent_start: jnp.ndarray  # entropy coefficient beta at iteration 0 (MOCC §3.2: 1)
    ent_end: jnp.ndarray  # beta after ``ent_iters`` iterations (MOCC §3.2: 0.1)
    ent_iters: jnp.ndarray  # length of the (linear) decay, in iterations (MOCC: 1000)
    vf_coef: jnp.ndarray  # value-loss weight (PPO1 adds it with weight 1)
    reward_scale: jnp.ndarray  # rewards are multiplied by this before GAE (critic conditioning)
    # Linear annealing of the step size and the clip range (stable-baselines PPO1's default
    # ``schedule='linear'``, which MOCC trained with): both are multiplied by
    # 1 - (iteration - anneal_from) / anneal_iters, floored at 0. ``anneal_iters`` 0 keeps them
    # constant. Set per run by ``with_anneal`` (the trainer, adaptation and sweeps), not by presets.
    anneal_from: jnp.ndarray
    anneal_iters: jnp.ndarray

    @classmethod
    def make(cls, **kw: float) -> PPOHyper:
        d = dict(lr=1e-3, clip=0.2, gamma=0.99, lam=0.95, ent_start=1.0, ent_end=0.1,
                 ent_iters=1000.0, vf_coef=1.0, reward_scale=1.0, anneal_from=0.0,
                 anneal_iters=0.0)
        d.update(kw)
        return cls(**{k: jnp.asarray(v, jnp.float32) for k, v in d.items()})


def with_anneal(hyper: PPOHyper, mode: str, start: int, n_iters: int) -> PPOHyper:
    """``hyper`` set to anneal over the ``n_iters`` iterations that follow iteration ``start``
    (``mode`` "linear", PPO1's schedule) or not at all ("constant"). Broadcasts over a stacked
    (vmapped) ``hyper``."""
    if mode not in ANNEAL_MODES:
        raise ValueError(f"anneal={mode!r}: allowed {', '.join(ANNEAL_MODES)}")
    n = float(n_iters) if mode == "linear" else 0.0
    return hyper.replace(anneal_from=jnp.full_like(hyper.lr, float(start)),
                         anneal_iters=jnp.full_like(hyper.lr, n))


class PPOState(struct.PyTreeNode):
    actor: dict
    critic: dict
    opt: optax.OptState
    iteration: jnp.ndarray  # () int32 updates done
    hyper: PPOHyper


class PPOAux(struct.PyTreeNode):
    """The log-probability of the action when it was chosen. (The critic's values are computed
    in ``update`` from the trajectory: the parameters have not changed since ``act``, so they
    are the same, and acting needs no critic input.)"""

    logp: jnp.ndarray


class PPOMetrics(struct.PyTreeNode):
    policy_loss: jnp.ndarray
    value_loss: jnp.ndarray
    entropy: jnp.ndarray
    approx_kl: jnp.ndarray
    clip_frac: jnp.ndarray
    ent_coef: jnp.ndarray
    std: jnp.ndarray
    lr: jnp.ndarray  # the step size this update used (after annealing)


@dataclass(frozen=True)
class PPO:
    """Static configuration: network sizes and the shape of an update."""

    hidden: Sequence[int] = (64, 32)
    pn_width: int = 32
    pref_dim: int = 3
    n_epochs: int = 4
    n_minibatches: int = 8
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    log_std_bounds: tuple[float, float] | None = None  # networks.GaussianActor
    adv_norm: str = "batch"  # ccjax.algos.ADV_NORMS: the whole batch (PPO1), or per preference
    name: str = "ppo"

    def __post_init__(self) -> None:
        if self.adv_norm not in ADV_NORMS:
            raise ConfigError(f"adv_norm={self.adv_norm!r} is invalid: one of "
                              f"{', '.join(ADV_NORMS)}")

    @property
    def actor_net(self) -> GaussianActor:
        return GaussianActor(1, tuple(self.hidden), self.pref_dim, self.pn_width,
                             log_std_bounds=self.log_std_bounds)

    @property
    def critic_net(self) -> Critic:
        return Critic(tuple(self.hidden), self.pref_dim, self.pn_width)

    def _tx(self) -> optax.GradientTransformation:
        return optax.chain(optax.clip_by_global_norm(self.max_grad_norm),
                           optax.inject_hyperparams(optax.adam)(learning_rate=1e-3,
                                                                eps=self.adam_eps))

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(PPOMetrics.__dataclass_fields__)

    def export_network(self) -> dict:
        """The actor's description in an exported policy (``ccjax.agents.export``)."""
        return {"kind": "gaussian-mlp", "activation": "tanh", "hidden": [int(h) for h in
                                                                      self.hidden],
                "pn_width": int(self.pn_width), "pref_dim": int(self.pref_dim)}

    @staticmethod
    def actor_params(state: PPOState) -> dict:
        """The actor's flax variables: what export writes and a controller runs."""
        return state.actor

    def plan_run(self, state: PPOState, train: dict, start: int, n_iters: int) -> PPOState:
        """A new run anneals over its own planned length (``train.anneal``, PPO1's schedule)."""
        return state.replace(hyper=with_anneal(state.hyper, train.get("anneal", "constant"),
                                               start, n_iters))

    def init(self, key: jnp.ndarray, spec: EnvSpec, hyper: PPOHyper | None = None) -> PPOState:
        if spec.action.kind != "box" or spec.action.n != 1:
            raise ConfigError(f"action={spec.action} is invalid for PPO here: one continuous "
                              "value (a box of 1, MOCC Eq. 1)")
        if spec.pref_dim != self.pref_dim:
            raise ConfigError(f"agent.pref_dim={self.pref_dim} is invalid for this environment:"
                              f" its observation carries {spec.pref_dim} preference weights")
        hyper = PPOHyper.make() if hyper is None else hyper
        ka, kc = jax.random.split(key)
        actor = self.actor_net.init(ka, jnp.zeros((1, spec.obs_dim), jnp.float32))
        # the critic reads the observation followed by the critic-only input
        critic = self.critic_net.init(
            kc, jnp.zeros((1, spec.obs_dim + spec.critic_dim), jnp.float32))
        opt = self._tx().init((actor, critic))
        return PPOState(actor=actor, critic=critic, opt=opt, iteration=jnp.zeros((), jnp.int32),
                        hyper=hyper)

    def policy(self, actor: dict, obs: jnp.ndarray) -> distrax.Distribution:
        mean, log_std = self.actor_net.apply(actor, obs)
        return distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))

    def act(self, state: PPOState, obs: jnp.ndarray, key: jnp.ndarray, explore: bool = True
            ) -> tuple[jnp.ndarray, PPOAux]:
        pi = self.policy(state.actor, obs)
        action = pi.sample(seed=key) if explore else pi.mode()
        return action, PPOAux(logp=pi.log_prob(action))

    def value(self, critic: dict, obs: jnp.ndarray, critic_in: jnp.ndarray) -> jnp.ndarray:
        """V(obs, critic input)."""
        return self.critic_net.apply(critic, jnp.concatenate([obs, critic_in], -1))

    def ent_coef(self, state: PPOState) -> jnp.ndarray:
        """beta decays linearly from ``ent_start`` to ``ent_end`` over ``ent_iters`` updates
        (MOCC §3.2 gives the end points; the shape is our choice)."""
        h = state.hyper
        f = jnp.clip(state.iteration.astype(jnp.float32) / jnp.maximum(h.ent_iters, 1.0), 0, 1)
        return h.ent_start + f * (h.ent_end - h.ent_start)

    def anneal(self, state: PPOState) -> jnp.ndarray:
        """The factor on the step size and the clip range at this update: PPO1's
        ``cur_lrmult = max(1 - t / T, 0)``, counted from ``anneal_from``; 1 when not annealing."""
        h = state.hyper
        done = state.iteration.astype(jnp.float32) - h.anneal_from
        frac = jnp.clip(1.0 - done / jnp.maximum(h.anneal_iters, 1.0), 0.0, 1.0)
        return jnp.where(h.anneal_iters > 0, frac, 1.0)

    def loss(self, params, mb, ent_coef: jnp.ndarray, clip: jnp.ndarray, hyper: PPOHyper):
        actor, critic = params
        obs, crit, action, logp_old, adv, ret, w = mb
        pi = self.policy(actor, obs)
        logp = pi.log_prob(action)
        ratio = jnp.exp(logp - logp_old)
        # MOCC Eq. 3 in the standard form min(r A, clip(r) A) (the notes, §3.2)
        surr = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv)
        n = jnp.maximum(w.sum(), 1.0)
        mean = lambda x: (x * w).sum() / n  # noqa: E731
        ent = mean(pi.entropy())
        v = self.value(critic, obs, crit)
        v_loss = mean(0.5 * (v - ret) ** 2)
        p_loss = -mean(surr)
        # MOCC Eq. 5: L^{CLIP+E} = L^CLIP + beta H; minimised here with the value loss added.
        total = p_loss - ent_coef * ent + hyper.vf_coef * v_loss
        kl = mean((ratio - 1) - (logp - logp_old))
        cf = mean((jnp.abs(ratio - 1) > clip).astype(jnp.float32))
        return total, (p_loss, v_loss, ent, kl, cf)

    def _project(self, params: tuple[dict, dict]) -> tuple[dict, dict]:
        """Keep the actor's ``log_std`` parameter inside ``log_std_bounds`` after every step
        (projected gradient descent). The actor clips it too, and a clip passes no gradient: a
        parameter that one step pushed past a bound would stay there for good. It starts at 0,
        the upper bound of the presets, so the entropy bonus's first step froze the std at 1
        for the rest of every run (measured: log_std 0.006 after 400 Aurora iterations, std 1
        throughout), and the policy could never narrow its exploration."""
        if self.log_std_bounds is None:
            return params
        actor, critic = params
        p = actor["params"]
        p = {**p, "log_std": jnp.clip(p["log_std"], *self.log_std_bounds)}
        return {**actor, "params": p}, critic

    def normalise(self, adv: jnp.ndarray, valid: jnp.ndarray, obs: jnp.ndarray) -> jnp.ndarray:
        """Advantages (T, N) to zero mean and unit deviation over the valid steps.

        ``adv_norm = "batch"``: one mean and deviation for the whole batch, as PPO1 (MOCC's
        learner). ``"preference"``: one per preference, over the environments that share it
        (an environment keeps its preference for a whole iteration, so its first observation's
        ``w`` names its group). Why: with every landmark in one batch, a latency-weighted
        landmark's rewards vary far less than a throughput-weighted one's, so one batch-wide
        scale leaves its advantages near zero and its policy to be set by the other landmarks'
        gradients; a scale per preference gives every landmark the same weight in the update,
        as per-task normalisation does in multi-task RL (PopArt, Hessel et al., AAAI 2019).
        A policy without a preference input (Aurora) has one group: the batch."""
        if self.adv_norm == "batch" or not self.pref_dim:
            n = jnp.maximum(valid.sum(), 1.0)
            mu = (adv * valid).sum() / n
            sd = jnp.sqrt(((adv - mu) ** 2 * valid).sum() / n) + 1e-8
            return (adv - mu) / sd
        pw = obs[0, :, : self.pref_dim]  # (N, 3): each environment's preference
        same = jnp.all(pw[:, None, :] == pw[None, :, :], -1).astype(jnp.float32)  # (N, N)
        # group sums as matrix products, at full float32 (a GPU's default may be TF32)
        gsum = lambda x: jnp.matmul(same, x, precision=jax.lax.Precision.HIGHEST)  # noqa: E731
        n = jnp.maximum(gsum(valid.sum(0)), 1.0)  # per environment: its group's valid steps
        mu = gsum((adv * valid).sum(0)) / n
        var = gsum(((adv - mu) ** 2 * valid).sum(0)) / n
        return (adv - mu) / (jnp.sqrt(var) + 1e-8)

    def update(self, state: PPOState, batch: Trajectory, key: jnp.ndarray
               ) -> tuple[PPOState, PPOMetrics]:
        h = state.hyper
        value = self.value(state.critic, batch.obs, batch.critic)
        next_value = self.value(state.critic, batch.next_obs, batch.next_critic)
        # Scaling rewards changes only the critic's targets (advantages are normalised below):
        # with rewards in [0, 1] and gamma 0.99 returns are ~100, which a critic initialised
        # at 0 takes many updates to reach, and its error then swamps the advantages.
        adv, ret = gae(batch.reward * h.reward_scale, value, next_value, batch.terminated,
                       batch.done, batch.valid, h.gamma, h.lam)
        w = batch.valid.astype(jnp.float32)
        adv = self.normalise(adv, w, batch.obs)
        # explicit sizes: a critic input may be 0 wide, and reshape cannot infer -1 there
        flat = lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])  # noqa: E731
        data = (flat(batch.obs), flat(batch.critic), flat(batch.action), flat(batch.aux.logp),
                flat(adv), flat(ret), flat(w))
        size = data[0].shape[0]
        mb_size = size // self.n_minibatches
        ent_coef = self.ent_coef(state)
        mult = self.anneal(state)
        lr, clip = h.lr * mult, h.clip * mult
        tx = self._tx()
        opt = state.opt
        # the dynamic learning rate lives in the optimiser state (optax.inject_hyperparams)
        opt = (opt[0], opt[1]._replace(
            hyperparams={**opt[1].hyperparams, "learning_rate": lr}))
        grad_fn = jax.value_and_grad(self.loss, has_aux=True)

        def epoch(carry, k):
            params, opt = carry
            perm = jax.random.permutation(k, size)[: mb_size * self.n_minibatches]
            mbs = jax.tree.map(lambda x: x[perm].reshape((self.n_minibatches, mb_size)
                                                         + x.shape[1:]), data)

            def step(carry, mb):
                params, opt = carry
                (_, aux), g = grad_fn(params, mb, ent_coef, clip, h)
                upd, opt = tx.update(g, opt, params)
                return (self._project(optax.apply_updates(params, upd)), opt), aux

            return jax.lax.scan(step, (params, opt), mbs)

        (params, opt), auxs = jax.lax.scan(epoch, ((state.actor, state.critic), opt),
                                           jax.random.split(key, self.n_epochs))
        p_loss, v_loss, ent, kl, cf = jax.tree.map(jnp.mean, auxs)
        std = jnp.exp(params[0]["params"]["log_std"]).mean()  # the std the policy samples with
        new = state.replace(actor=params[0], critic=params[1], opt=opt,
                            iteration=state.iteration + 1)
        return new, PPOMetrics(policy_loss=p_loss, value_loss=v_loss, entropy=ent,
                               approx_kl=kl, clip_frac=cf, ent_coef=ent_coef, std=std, lr=lr)


#: the [agent] and [hyper] keys this kind reads (``ccjax.agents.registry``)
AGENT_KEYS = KIND_KEYS["ppo"]["agent"]
HYPER_KEYS = KIND_KEYS["ppo"]["hyper"]


def build(cfg) -> tuple[PPO, PPOHyper]:
    """The learner of an ``AlgoConfig`` whose ``agent.kind`` is ppo: the preset's values over
    the dataclass defaults."""
    a = cfg.agent
    kw: dict = {k: a[k] for k in ("pn_width", "pref_dim", "n_epochs", "n_minibatches",
                                  "adv_norm") if k in a}
    if "hidden" in a:
        kw["hidden"] = tuple(a["hidden"])
    for k in ("max_grad_norm", "adam_eps"):
        if k in a:
            kw[k] = float(a[k])
    if "log_std_bounds" in a:
        kw["log_std_bounds"] = tuple(float(x) for x in a["log_std_bounds"])
    agent = PPO(name=cfg.name, **kw)
    return agent, PPOHyper.make(**{k: float(v) for k, v in cfg.hyper.items()})
