"""The functional agent API (DESIGN, "Agents") and the trajectory it learns from.

Every algorithm is a frozen dataclass of static configuration with pure methods::

    init(key, spec, hyper) -> agent_state                    # params, optimiser, buffers
    act(agent_state, obs, key, explore) -> (action, aux)     # pure; what deployment calls
    update(agent_state, batch, key) -> (agent_state, metrics)

``spec`` is the environment's ``ccjax.envs.spec.EnvSpec`` (observation and critic-input sizes,
action space, objectives, preference size). ``aux`` is whatever the algorithm needs stored
beside an action (PPO: the log-probability; others: nothing). ``batch`` is a ``Trajectory`` the
drivers collect (``ccjax.agents.drivers``); every leaf has a leading (time, env) shape, and
``valid`` marks the steps whose MI really ended (a vectorised step may be cut short:
``ccjax.envs.vec``), so on- and off-policy learners mask the rest out. Each algorithm registers
itself with its typed configuration in ``ccjax.agents.registry``, and the trainer, sweeps and
export reach it only through this API and the registry's entry (``actor_params``, ``plan``,
``metric_names``, the exported network description).

How the algorithms map onto it:

* **PPO-MOCC** and Aurora (``ccjax.agents.ppo``; on-policy, continuous): ``act`` samples the
  Gaussian policy and returns its log-probability as ``aux``; ``update`` computes the critic's
  values, GAE (``ccjax.agents.returns``) and epochs of clipped-surrogate minibatch steps. The
  preference is part of the observation; requirement replay is a batch whose environments
  carry old preferences beside the new one.
* **Envelope MORL** (AUTO, ``ccjax.agents.envelope``; 7 discrete actions, vector critic): the
  state holds an actor-critic and a replay buffer (``ccjax.agents.replay``); ``act`` samples
  the policy; ``update`` inserts the batch's valid transitions, samples, and regresses the
  envelope target r + gamma max_{w'} w^T V(s', w') with preferences resampled per sample.
* **TD3** (Pareto; off-policy, continuous, recurrent actor): ``aux`` carries the actor's hidden
  state; ``update`` inserts into a segmented prioritised buffer and does twin-critic, delayed
  actor and target-smoothing steps; the staged curriculum is a driver schedule over env params.
* **MADDPG-style** (Astraea; multi-agent): observations, actions and ``valid`` carry a flow axis
  (``EnvSpec.agents_per_link``) with the active mask; ``act`` applies the shared decentralised
  actor per flow; ``update`` trains a centralised critic on ``Trajectory.critic``.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax.numpy as jnp
from flax import struct

from ccjax.envs.spec import EnvSpec


class Trajectory(struct.PyTreeNode):
    """A rollout: leaves (T, N, ...) for T batch steps of N environments.

    ``done`` = ``terminated | truncated``: an episode that ends at its time limit is truncated,
    and a learner bootstraps from ``next_obs`` there (Pardo et al., "Time Limits in
    Reinforcement Learning", ICML 2018); only a terminated one has no future."""

    obs: jnp.ndarray  # actor observation the action was chosen from
    critic: jnp.ndarray  # critic-only input at that step (T, N, critic_dim; may be 0 wide)
    action: jnp.ndarray  # the action in effect for the MI (chosen when the MI started)
    aux: Any  # the algorithm's per-action extras, from ``act``
    reward: jnp.ndarray  # scalar w^T O of the step (the environment's own scalarisation)
    objectives: jnp.ndarray  # (T, N, K) vector reward O_t
    next_obs: jnp.ndarray  # observation after the step, before any auto-reset
    next_critic: jnp.ndarray  # critic input after the step, before any auto-reset
    terminated: jnp.ndarray  # the episode ended in a terminal state
    truncated: jnp.ndarray  # the episode ended at its time limit
    done: jnp.ndarray  # terminated | truncated: the next step is another episode's
    valid: jnp.ndarray  # an MI ended in this step (else reward 0 and nothing to learn)
    info: Any  # the environment's StepInfo (its next_obs/next_critic moved out, above)


class Agent(Protocol):
    def init(self, key: jnp.ndarray, spec: EnvSpec, hyper: Any = None) -> Any: ...

    def act(self, state: Any, obs: jnp.ndarray, key: jnp.ndarray, explore: bool
            ) -> tuple[jnp.ndarray, Any]: ...

    def update(self, state: Any, batch: Trajectory, key: jnp.ndarray) -> tuple[Any, Any]: ...
