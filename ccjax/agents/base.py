"""The functional agent API (DESIGN, "Agents") and the trajectory it learns from.

Every algorithm is a frozen dataclass of static configuration with three pure methods::

    init(key, obs_dim, action_dim, hyper) -> agent_state     # params, optimiser, buffers
    act(agent_state, obs, key, explore) -> (action, aux)     # pure; what deployment calls
    update(agent_state, batch, key) -> (agent_state, metrics)

``aux`` is whatever the algorithm needs stored beside an action (PPO: log-probability and
value; off-policy methods: nothing). ``batch`` is a ``Trajectory`` the drivers collect
(``ccjax.agents.drivers``); every leaf has a leading (time, env) shape, and ``valid`` marks the
steps whose MI really ended (a vectorised step may be cut short: ``ccjax.envs.vec``), so on- and
off-policy learners mask the rest out.

How the four algorithms map onto it:

* **PPO-MOCC** (on-policy, continuous, single-agent): ``act`` samples the Gaussian policy and
  returns (log-prob, value) as ``aux``; ``update`` runs GAE over the trajectory and epochs of
  clipped-surrogate minibatch steps. The preference is part of the observation; requirement
  replay is a batch whose environments carry old preferences beside the new one.
* **Envelope MORL** (AUTO; off-policy, 7 discrete actions, vector Q): ``agent_state`` holds the
  Q-network, its target and a replay buffer (flashbax); ``act`` is epsilon-greedy over
  w^T Q(s, a, w); ``update`` inserts the batch into the buffer, samples, and regresses the
  envelope target max_{a,w'} w^T Q(s', a, w') with preferences resampled per sample.
* **TD3** (Pareto; off-policy, continuous, recurrent actor): ``aux`` carries the actor's hidden
  state; ``update`` inserts into a segmented prioritised buffer and does twin-critic, delayed
  actor and target-smoothing steps; the staged curriculum is a driver schedule over env params.
* **MADDPG-style** (Astraea; multi-agent): observations, actions and ``valid`` carry a flow axis
  of size F_max with the active mask; ``act`` applies the shared decentralised actor per flow;
  ``update`` trains a centralised critic on the global link state stored in the trajectory.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax.numpy as jnp
from flax import struct


class Trajectory(struct.PyTreeNode):
    """A rollout: leaves (T, N, ...) for T batch steps of N environments."""

    obs: jnp.ndarray  # observation the action was chosen from
    action: jnp.ndarray  # the action in effect for the MI (chosen when the MI started)
    aux: Any  # the algorithm's per-action extras, from ``act``
    reward: jnp.ndarray
    done: jnp.ndarray  # episode ended with this step
    valid: jnp.ndarray  # an MI ended in this step (else reward 0 and nothing to learn)
    info: Any  # the environment's StepInfo
    last_obs: jnp.ndarray  # (N, obs_dim) observation after the last step (bootstrap)


class Agent(Protocol):
    def init(self, key: jnp.ndarray, obs_dim: int, action_dim: int, hyper: Any) -> Any: ...

    def act(self, state: Any, obs: jnp.ndarray, key: jnp.ndarray, explore: bool
            ) -> tuple[jnp.ndarray, Any]: ...

    def update(self, state: Any, batch: Trajectory, key: jnp.ndarray) -> tuple[Any, Any]: ...
