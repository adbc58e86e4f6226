"""Networks shared by the agents: MLPs with MOCC's preference sub-network (PN).

MOCC §3.2: "PN takes the application weight vector w as input, and performs feature
transformation to concatenate with the network state g_{t,eta} to feed both networks"; the trunk
is "a fully-connected MLP with two hidden layers of 64 and 32 units ... and tanh". The PN's size
is not given; ``pn_width`` (algos/ppo-mocc.toml) is our choice. Observations put the preference
first (``ccjax.envs.single_flow``): ``pref_dim`` = 3 for MOCC, 0 for Aurora (no PN).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp


class PrefTrunk(nn.Module):
    """obs -> features: [tanh(Dense_pn(w)), history] -> tanh MLP."""

    hidden: Sequence[int] = (64, 32)
    pref_dim: int = 3
    pn_width: int = 32

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        if self.pref_dim:
            w, hist = obs[..., : self.pref_dim], obs[..., self.pref_dim:]
            x = jnp.concatenate([nn.tanh(nn.Dense(self.pn_width, name="pn")(w)), hist], -1)
        else:
            x = obs
        for i, h in enumerate(self.hidden):
            x = nn.tanh(nn.Dense(h, name=f"h{i}")(x))
        return x


class GaussianActor(nn.Module):
    """Mean from the trunk (linear head), state-independent log std (stable-baselines' PPO,
    which MOCC used: a ``logstd`` variable, hidden tanh layers, linear mean).

    ``log_std_bounds = (lo, hi)`` clips the log std the policy uses (None: unbounded, as in
    stable-baselines). Why: Adam moves ``log_std`` by about the step size whenever its gradient
    keeps one sign, and in MOCC's environment it climbed from 0 to ~2 (std 1 -> 7) whatever the
    entropy coefficient; with a std of 7 almost every sampled action saturates Eq. 1's rate
    change. Outside the bounds the clip passes no gradient, so ``PPO.update`` projects the
    parameter back inside after every step (else one step past a bound would fix the std
    there for good)."""

    action_dim: int = 1
    hidden: Sequence[int] = (64, 32)
    pref_dim: int = 3
    pn_width: int = 32
    init_log_std: float = 0.0
    log_std_bounds: tuple[float, float] | None = None
    #: the policy's input is the first ``obs_dim`` values (None: all); the rest are the
    #: critic's (``SingleFlowEnv.critic_features``). Same parameters either way.
    obs_dim: int | None = None

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        if self.obs_dim is not None:
            obs = obs[..., : self.obs_dim]
        x = PrefTrunk(self.hidden, self.pref_dim, self.pn_width, name="trunk")(obs)
        mean = nn.Dense(self.action_dim, name="mean",
                        kernel_init=nn.initializers.orthogonal(0.01))(x)
        log_std = self.param("log_std", nn.initializers.constant(self.init_log_std),
                             (self.action_dim,))
        if self.log_std_bounds is not None:
            log_std = jnp.clip(log_std, *self.log_std_bounds)
        return mean, jnp.broadcast_to(log_std, mean.shape)


class Critic(nn.Module):
    """V(obs) with the same structure as the actor (MOCC §3.2), its own PN."""

    hidden: Sequence[int] = (64, 32)
    pref_dim: int = 3
    pn_width: int = 32

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        x = PrefTrunk(self.hidden, self.pref_dim, self.pn_width, name="trunk")(obs)
        return nn.Dense(1, name="v")(x)[..., 0]


class PrefAfterTrunk(nn.Module):
    """AUTO's actor-critic network (AUTO §3.2): a shared trunk of ReLU layers reads the state
    (the observation after its first ``pref_dim`` values), the preference w is concatenated
    after the trunk, and two heads follow: the policy's logits over the discrete actions and
    the vector value V(s, w), one value per objective (Eq. 5). Each head is one ReLU layer of
    ``head_width`` and a linear output; the paper gives no widths.

    Parameter names (what export writes, flattened with "/"): ``trunk_h{i}/{kernel,bias}``,
    ``pi_h0``, ``pi_out``, ``v_h0``, ``v_out``. The actor is the whole network (the policy
    head needs the trunk); deployment evaluates only the policy head."""

    hidden: Sequence[int] = (128, 128, 128)
    head_width: int = 64
    pref_dim: int = 2
    n_actions: int = 7
    n_objectives: int = 2

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        w, x = obs[..., : self.pref_dim], obs[..., self.pref_dim:]
        for i, h in enumerate(self.hidden):
            x = nn.relu(nn.Dense(h, name=f"trunk_h{i}")(x))
        z = jnp.concatenate([x, w], -1)
        p = nn.relu(nn.Dense(self.head_width, name="pi_h0")(z))
        logits = nn.Dense(self.n_actions, name="pi_out",
                          kernel_init=nn.initializers.orthogonal(0.01))(p)
        v = nn.relu(nn.Dense(self.head_width, name="v_h0")(z))
        value = nn.Dense(self.n_objectives, name="v_out")(v)
        return logits, value
