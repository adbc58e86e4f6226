"""AUTO's learner: an envelope multi-objective actor-critic with replay (AUTO §3.2-3.3,
Algorithm 1; the envelope of Yang et al., "A Generalized Algorithm for Multi-Objective
Reinforcement Learning and Policy Adaptation", NeurIPS 2019).

Reads top to bottom: hyperparameters (dynamic), state, ``init``, ``act``, the loss and
``update``.

* Network (``networks.PrefAfterTrunk``): a shared ReLU trunk over the state, the preference
  w = (w_t, 1 - w_t) joined after it, a policy head (logits over Eq. 7's seven multipliers) and
  a vector value V(s, w) over (throughput, -RTT) (Eq. 5).
* Acting samples the policy (Alg. 1 line 10), greedy (argmax) when not exploring; AUTO is not
  epsilon-greedy Q-learning.
* ``update`` stores the batch's valid transitions (``ccjax.agents.replay``: a vectorised step
  that only continues an MI holds nothing), then ``updates_per_iter`` times samples
  ``batch_size`` transitions and pairs each with ``n_prefs`` preferences drawn from the simplex
  (the relabelling of Yang et al.: a transition is evidence about every preference, since the
  vector reward does not depend on w). For each pair:

  - envelope target (Eq. 16): y = r + gamma max_{w' in W} w^T V(s', w') (the maximising
    w' in the set W of the ``n_prefs`` drawn preferences, as in Yang et al.);
  - critic loss (Eqs. 11-15): (1 - lambda) ||y - V(s, w)||^2 + lambda |w^T y - w^T V(s, w)|,
    with lambda rising linearly from 0 to 1 over ``lambda_iters`` updates (homotopy: L_A
    shapes the whole vector, L_B the scalarised value that acting ranks by);
  - policy loss (Eq. 14): - rho w^T (y - V(s, w)) log pi(a | s, w), the advantage held fixed,
    minus an entropy bonus. Two deviations, both because Eq. 14 applied to replayed actions
    diverged here: the advantages are normalised over the sampled pairs (as A2C and PPO do),
    and rho = min(1, pi(a | s, w) / mu(a | s)) is ACER's truncated importance weight (Wang et
    al., ICLR 2017), mu the behaviour policy's probability stored with the transition.
    Measured without them (auto.toml, 128 envs, seed 0): the policy's entropy fell from
    ln 7 = 1.95 to 0.04 within 20 iterations and the policy loss grew without bound (-19 at
    iteration 46) as the log-probabilities of replayed actions were pushed to -inf; the
    policy sat on x2 at the rate cap (loss rate 0.97).

  ``target_tau`` 1 bootstraps from the online network (the paper names no target network);
  below 1 a Polyak-averaged copy serves the targets.
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
from ccjax.agents.networks import PrefAfterTrunk
from ccjax.agents.replay import Replay, ReplayState, size
from ccjax.agents.returns import envelope_target
from ccjax.algos import KIND_KEYS
from ccjax.envs.spec import EnvSpec
from ccjax.errors import ConfigError

AGENT_KEYS = KIND_KEYS["envelope"]["agent"]
HYPER_KEYS = KIND_KEYS["envelope"]["hyper"]


class EnvelopeHyper(struct.PyTreeNode):
    """Dynamic hyperparameters (vmappable); values and reasons in algos/auto.toml."""

    lr: jnp.ndarray  # Adam step size
    gamma: jnp.ndarray  # discount per MI
    ent_coef: jnp.ndarray  # entropy bonus on the policy
    lambda_iters: jnp.ndarray  # updates over which the homotopy weight lambda goes 0 -> 1
    vf_coef: jnp.ndarray  # weight of the critic loss
    policy_coef: jnp.ndarray  # weight of the policy loss
    target_tau: jnp.ndarray  # Polyak rate of the target network; 1: none (the paper's)

    @classmethod
    def make(cls, **kw: float) -> EnvelopeHyper:
        d = dict(lr=3e-4, gamma=0.95, ent_coef=0.01, lambda_iters=2000.0, vf_coef=1.0,
                 policy_coef=1.0, target_tau=1.0)
        d.update(kw)
        return cls(**{k: jnp.asarray(v, jnp.float32) for k, v in d.items()})


class Transition(struct.PyTreeNode):
    """What the replay buffer keeps of one valid step."""

    obs: jnp.ndarray
    action: jnp.ndarray
    logp: jnp.ndarray  # log mu(a | s): the behaviour policy's, for the importance weight
    objectives: jnp.ndarray
    next_obs: jnp.ndarray
    terminated: jnp.ndarray


class EnvelopeAux(struct.PyTreeNode):
    logp: jnp.ndarray  # log-probability of the chosen action under the acting policy


class EnvelopeState(struct.PyTreeNode):
    params: dict
    target: dict
    opt: optax.OptState
    replay: ReplayState
    iteration: jnp.ndarray  # () int32 updates (iterations) done
    hyper: EnvelopeHyper


class EnvelopeMetrics(struct.PyTreeNode):
    critic_loss: jnp.ndarray
    loss_a: jnp.ndarray  # ||y - V||^2 (Eq. 12)
    loss_b: jnp.ndarray  # |w^T y - w^T V| (Eq. 13)
    policy_loss: jnp.ndarray
    entropy: jnp.ndarray
    rho: jnp.ndarray  # mean truncated importance weight of the sampled pairs
    lam: jnp.ndarray  # the homotopy weight this update used
    value: jnp.ndarray  # mean w^T V(s, w) over the sampled pairs
    buffer: jnp.ndarray  # transitions stored


@dataclass(frozen=True)
class Envelope:
    """Static configuration: network sizes, replay and the shape of an update."""

    hidden: Sequence[int] = (128, 128, 128)
    head_width: int = 64
    pref_dim: int = 2
    n_actions: int = 7
    n_objectives: int = 2
    replay_size: int = 100_000
    batch_size: int = 256
    updates_per_iter: int = 8
    n_prefs: int = 8
    n_envelope: int = 8
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    name: str = "envelope"

    @property
    def net(self) -> PrefAfterTrunk:
        return PrefAfterTrunk(tuple(self.hidden), self.head_width, self.pref_dim,
                              self.n_actions, self.n_objectives)

    @property
    def replay(self) -> Replay:
        return Replay(capacity=self.replay_size)

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(EnvelopeMetrics.__dataclass_fields__)

    def export_network(self) -> dict:
        return {"kind": "discrete-pref-after-trunk", "activation": "relu",
                "hidden": [int(h) for h in self.hidden], "head_width": int(self.head_width),
                "pref_dim": int(self.pref_dim), "n_actions": int(self.n_actions),
                "n_objectives": int(self.n_objectives)}

    @staticmethod
    def actor_params(state: EnvelopeState) -> dict:
        return state.params

    def plan_run(self, state: EnvelopeState, train: dict, start: int, n_iters: int
                 ) -> EnvelopeState:
        del train, start, n_iters  # lambda's schedule counts updates; nothing per run
        return state

    def _tx(self) -> optax.GradientTransformation:
        return optax.chain(optax.clip_by_global_norm(self.max_grad_norm),
                           optax.inject_hyperparams(optax.adam)(learning_rate=3e-4,
                                                                eps=self.adam_eps))

    def init(self, key: jnp.ndarray, spec: EnvSpec, hyper: EnvelopeHyper | None = None
             ) -> EnvelopeState:
        if spec.action.kind != "discrete" or spec.action.n != self.n_actions:
            raise ConfigError(f"action={spec.action} is invalid for the envelope agent: "
                              f"{self.n_actions} discrete actions (AUTO Eq. 7)")
        if spec.n_objectives != self.n_objectives or spec.pref_dim != self.pref_dim:
            raise ConfigError(f"agent.pref_dim={self.pref_dim} is invalid for this environment: "
                              f"it has {spec.n_objectives} objectives and "
                              f"{spec.pref_dim} preference weights in its observation")
        if self.pref_dim < 2:
            raise ConfigError(f"agent.pref_dim={self.pref_dim} is invalid: the envelope agent "
                              "conditions on a preference of >= 2 weights")
        hyper = EnvelopeHyper.make() if hyper is None else hyper
        params = self.net.init(key, jnp.zeros((1, spec.obs_dim), jnp.float32))
        example = Transition(obs=jnp.zeros(spec.obs_dim, jnp.float32),
                             action=jnp.zeros((), jnp.int32), logp=jnp.zeros((), jnp.float32),
                             objectives=jnp.zeros(spec.n_objectives, jnp.float32),
                             next_obs=jnp.zeros(spec.obs_dim, jnp.float32),
                             terminated=jnp.zeros((), bool))
        return EnvelopeState(params=params, target=params, opt=self._tx().init(params),
                             replay=self.replay.init(example),
                             iteration=jnp.zeros((), jnp.int32), hyper=hyper)

    def act(self, state: EnvelopeState, obs: jnp.ndarray, key: jnp.ndarray,
            explore: bool = True) -> tuple[jnp.ndarray, EnvelopeAux]:
        logits, _ = self.net.apply(state.params, obs)
        if explore:
            a = jax.random.categorical(key, logits).astype(jnp.int32)
        else:
            a = jnp.argmax(logits, -1).astype(jnp.int32)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), a[..., None], -1)[..., 0]
        return a, EnvelopeAux(logp=logp)

    def _relabel(self, obs: jnp.ndarray, w: jnp.ndarray) -> jnp.ndarray:
        """obs (B, D) paired with preferences w (B, M, K) -> (B, M, D), w in the first K."""
        o = jnp.broadcast_to(obs[:, None], (obs.shape[0], w.shape[1], obs.shape[-1]))
        return o.at[..., : self.pref_dim].set(w)

    def loss(self, params: dict, target: dict, tr: Transition, w: jnp.ndarray,
             lam: jnp.ndarray, h: EnvelopeHyper):
        B, M = w.shape[0], w.shape[1]
        K = self.n_objectives
        # the envelope's candidates W: the n_envelope first drawn preferences (Yang et al.)
        cand = w[:, : self.n_envelope]
        _, v_next = self.net.apply(target, self._relabel(tr.next_obs, cand))  # (B, E, K)
        v_next = jax.lax.stop_gradient(v_next)
        y = envelope_target(
            jnp.repeat(tr.objectives, M, 0), jnp.repeat(v_next, M, 0), w.reshape(B * M, K),
            jnp.repeat(tr.terminated, M, 0), h.gamma).reshape(B, M, K)
        logits, v = self.net.apply(params, self._relabel(tr.obs, w))  # (B, M, A), (B, M, K)
        err = y - v
        loss_a = jnp.mean(jnp.sum(err ** 2, -1))  # Eq. 12
        loss_b = jnp.mean(jnp.abs(jnp.sum(w * err, -1)))  # Eq. 13
        critic = (1.0 - lam) * loss_a + lam * loss_b  # Eq. 15
        pi = distrax.Categorical(logits=logits)
        adv = jax.lax.stop_gradient(jnp.sum(w * err, -1))  # Eq. 14: w^T (V_target - V)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)  # deviation (module docstring)
        logp = pi.log_prob(jnp.broadcast_to(tr.action[:, None], (B, M)))
        # ACER's truncated importance weight against the behaviour policy (module docstring)
        rho = jax.lax.stop_gradient(jnp.minimum(1.0, jnp.exp(logp - tr.logp[:, None])))
        ent = jnp.mean(pi.entropy())
        policy = -jnp.mean(rho * adv * logp) - h.ent_coef * ent
        total = h.vf_coef * critic + h.policy_coef * policy
        value = jnp.mean(jnp.sum(w * v, -1))
        return total, (critic, loss_a, loss_b, policy, ent, jnp.mean(rho), value)

    def update(self, state: EnvelopeState, batch: Trajectory, key: jnp.ndarray
               ) -> tuple[EnvelopeState, EnvelopeMetrics]:
        h = state.hyper
        tr = Transition(obs=batch.obs, action=batch.action.astype(jnp.int32),
                        logp=batch.aux.logp,
                        objectives=batch.objectives, next_obs=batch.next_obs,
                        terminated=batch.terminated)
        replay = self.replay.add(state.replay, tr, batch.valid)
        ready = size(replay) >= self.batch_size
        lam = jnp.clip(state.iteration.astype(jnp.float32) / jnp.maximum(h.lambda_iters, 1.0),
                       0.0, 1.0)
        tx = self._tx()
        opt = state.opt
        opt = (opt[0], opt[1]._replace(hyperparams={**opt[1].hyperparams, "learning_rate": h.lr}))
        grad_fn = jax.value_and_grad(self.loss, has_aux=True)
        M = max(self.n_prefs, self.n_envelope)

        def step(carry, k):
            params, target, opt = carry
            k_s, k_w = jax.random.split(k)
            sample, _, _ = self.replay.sample(replay, k_s, self.batch_size)
            # preferences drawn uniformly from the simplex (one omega per episode in acting,
            # Alg. 1; here per sampled pair)
            w = jax.random.dirichlet(k_w, jnp.ones(self.n_objectives),
                                     (self.batch_size, M)).astype(jnp.float32)
            (_, aux), g = grad_fn(params, target, sample, w, lam, h)
            upd, new_opt = tx.update(g, opt, params)
            new_params = optax.apply_updates(params, upd)
            new_target = jax.tree.map(lambda t, p: (1.0 - h.target_tau) * t + h.target_tau * p,
                                      target, new_params)
            # nothing is learned before the buffer holds one batch
            pick = lambda n, o: jax.tree.map(lambda a, b: jnp.where(ready, a, b), n, o)  # noqa
            return (pick(new_params, params), pick(new_target, target),
                    pick(new_opt, opt)), aux

        (params, target, opt), auxs = jax.lax.scan(
            step, (state.params, state.target, opt), jax.random.split(key, self.updates_per_iter))
        critic, loss_a, loss_b, policy, ent, rho, value = jax.tree.map(jnp.mean, auxs)
        new = state.replace(params=params, target=target, opt=opt, replay=replay,
                            iteration=state.iteration + 1)
        return new, EnvelopeMetrics(critic_loss=critic, loss_a=loss_a, loss_b=loss_b,
                                    policy_loss=policy, entropy=ent, rho=rho, lam=lam,
                                    value=value,
                                    buffer=size(replay).astype(jnp.float32))


def build(cfg) -> tuple[Envelope, EnvelopeHyper]:
    """The learner of an ``AlgoConfig`` whose ``agent.kind`` is envelope."""
    a = cfg.agent
    kw: dict = {k: a[k] for k in ("head_width", "pref_dim", "replay_size", "batch_size",
                                  "updates_per_iter", "n_prefs", "n_envelope") if k in a}
    if "hidden" in a:
        kw["hidden"] = tuple(a["hidden"])
    for k in ("max_grad_norm", "adam_eps"):
        if k in a:
            kw[k] = float(a[k])
    pref = kw.get("pref_dim", 2)
    agent = Envelope(name=cfg.name, n_objectives=pref, **kw)
    if agent.n_envelope > agent.n_prefs:
        raise ConfigError(f"agent.n_envelope={agent.n_envelope} is invalid with agent.n_prefs="
                          f"{agent.n_prefs}: the envelope's candidates are drawn preferences, "
                          "at most n_prefs")
    return agent, EnvelopeHyper.make(**{k: float(v) for k, v in cfg.hyper.items()})
