"""Generic drivers: roll a batch of environments out with any agent, train in chunked scans.

``rollout`` is a ``lax.scan`` over batch steps of ``VecEnv`` (``scan_rollout``, which the
batched trials of ``ccjax.sweep.batch`` share); ``make_chunk`` returns one jitted function that
does ``k`` iterations (rollout + ``agent.update``) and returns per-iteration metrics, so a
training run is a Python loop over chunks that reports progress, writes metrics and checkpoints
in between (DESIGN principle 3) without leaving compiled code for long.

Actions take effect when an environment's MI starts (``EnvState.mid`` false); on a step that
only continues a running MI the new action is ignored, so the driver records, beside every
step, the action (and ``aux``) actually in effect. The observation does not change while an MI
runs, so (obs, action in effect, reward) on the step where the MI ends is the true transition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ccjax.agents.base import Agent, Trajectory
from ccjax.envs.single_flow import EnvParams, EnvState
from ccjax.envs.vec import VecEnv


class Runner(struct.PyTreeNode):
    env_state: EnvState
    obs: jnp.ndarray
    critic: jnp.ndarray  # (N, critic_dim) critic-only input of the current state
    action: jnp.ndarray  # action in effect per env
    aux: Any  # its aux
    key: jnp.ndarray


class RolloutStats(struct.PyTreeNode):
    """Means over this iteration's valid steps and ended episodes."""

    reward: jnp.ndarray
    utilization: jnp.ndarray
    latency_ratio: jnp.ndarray
    loss_rate: jnp.ndarray
    episode_return: jnp.ndarray  # mean return of episodes that ended (nan if none)
    episodes: jnp.ndarray
    valid_steps: jnp.ndarray
    env_reward: jnp.ndarray  # (N,) reward summed over each env's valid steps (per-preference
    env_valid: jnp.ndarray  # (N,) valid steps per env          curves: ccjax.train)


def init_runner(venv: VecEnv, agent: Agent, agent_state: Any, params: EnvParams,
                key: jnp.ndarray) -> Runner:
    k_env, k_act, key = jax.random.split(key, 3)
    obs, st = venv.reset(k_env, params)
    action, aux = agent.act(agent_state, obs, k_act, True)
    return Runner(env_state=st, obs=obs, critic=venv.critic_obs(st, params), action=action,
                  aux=aux, key=key)


def hold_during_mi(r: Runner, new_action: Any, new_aux: Any) -> tuple[Any, Any]:
    """The action (and its log-prob and value) each environment acts on: the new one where an
    MI starts, the one it started with where its MI is still running (a tick budget cut the
    last step), so the transition that ends the MI carries the action that made it."""
    return hold(~r.env_state.mid, new_action, r.action), jax.tree.map(
        lambda n, o: hold(~r.env_state.mid, n, o), new_aux, r.aux)


def hold(start: jnp.ndarray, new: jnp.ndarray, old: jnp.ndarray) -> jnp.ndarray:
    """``new`` where ``start``, else ``old``; ``start`` has the leading axes of the leaves (an
    environment axis, and a flow axis in a multi-flow environment) and is broadcast over the
    rest. (Padding by ``new.ndim - 1`` axes assumed a 1-D mask and misaligned a flow axis.)"""
    return jnp.where(start.reshape(start.shape + (1,) * (new.ndim - start.ndim)), new, old)


def split_step_key(key: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """(next runner key, acting key, environment key) for one batch step. The order is part of
    what a seed means: a batched trial (``ccjax.sweep.batch``) reproduces a run alone only
    because both split this way."""
    key, k_act, k_env = jax.random.split(key, 3)
    return key, k_act, k_env


#: ``choose(runner, k_act) -> (action, aux)``: the new action for every environment of the
#: runner (before ``hold_during_mi``), and what the agent returns beside it
Choose = Callable[[Runner, jnp.ndarray], tuple[Any, Any]]
#: ``split(runner.key) -> (next key, acting key, environment key)``, as ``split_step_key``
SplitKey = Callable[[jnp.ndarray], tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]]


def scan_rollout(venv: VecEnv, runner: Runner, params: EnvParams, n_steps: int, choose: Choose,
                 split: SplitKey = split_step_key) -> tuple[Runner, Trajectory]:
    """The step loop every rollout shares: ``n_steps`` batch steps of ``venv`` with the actions
    ``choose`` picks, held while an MI runs. ``split`` turns ``runner.key`` into (next key,
    acting key, environment key); a batch of trials passes ``vmap(split_step_key)`` over its
    per-trial keys, and its ``choose`` acts with each trial's own state."""

    def body(r: Runner, _):
        key, k_act, k_env = split(r.key)
        new_a, new_aux = choose(r, k_act)
        action, aux = hold_during_mi(r, new_a, new_aux)
        obs, st, reward, done, info = venv.step(k_env, r.env_state, action, params)
        critic = info.critic  # the returned states' (VecEnv: a reset episode's where one ended)
        term = jnp.asarray(info.terminated, bool) & done
        tr = Trajectory(obs=r.obs, critic=r.critic, action=action, aux=aux, reward=reward,
                        objectives=info.objectives, next_obs=info.next_obs,
                        next_critic=info.next_critic, terminated=term, truncated=done & ~term,
                        done=done, valid=info.valid,
                        info=info.replace(next_obs=(), next_critic=(), critic=()))
        return Runner(env_state=st, obs=obs, critic=critic, action=action, aux=aux,
                      key=key), tr

    return jax.lax.scan(body, runner, None, length=n_steps)


def rollout(venv: VecEnv, agent: Agent, agent_state: Any, runner: Runner, params: EnvParams,
            n_steps: int, explore: bool = True) -> tuple[Runner, Trajectory]:
    """``n_steps`` batch steps of ``venv`` with one agent acting for every environment."""
    return scan_rollout(venv, runner, params, n_steps,
                        lambda r, k: agent.act(agent_state, r.obs, k, explore))


def rollout_stats(tr: Trajectory) -> RolloutStats:
    w = tr.valid.astype(jnp.float32)
    n = jnp.maximum(w.sum(), 1.0)
    m = lambda x: (x * w).sum() / n  # noqa: E731
    ended = tr.info.episode_done.astype(jnp.float32)
    ne = ended.sum()
    return RolloutStats(
        reward=m(tr.reward), utilization=m(jnp.minimum(tr.info.utilization, 1.0)),
        latency_ratio=m(tr.info.latency_ratio), loss_rate=m(tr.info.loss_rate),
        episode_return=jnp.where(ne > 0, (tr.info.episode_return * ended).sum()
                                 / jnp.maximum(ne, 1.0), jnp.nan),
        episodes=ne, valid_steps=w.sum(), env_reward=(tr.reward * w).sum(0),
        env_valid=w.sum(0))


def set_preference(venv: VecEnv, runner: Runner, params: EnvParams, pref: jnp.ndarray
                   ) -> Runner:
    """The runner with its observations' preference (their first ``pref_dim`` values, MOCC
    §3.1) set to ``pref`` for the iteration, unless episodes draw their own."""
    k = venv.spec.pref_dim
    if not k:
        return runner
    new = runner.obs.at[:, :k].set(jnp.broadcast_to(pref, runner.obs[:, :k].shape))
    return runner.replace(obs=jnp.where(jnp.asarray(params.pref_draw), runner.obs, new))


def make_chunk(venv: VecEnv, agent: Agent, n_steps: int, n_iters: int):
    """A jitted ``chunk(agent_state, runner, params, prefs) -> (agent_state, runner, (metrics,
    stats))`` doing ``n_iters`` iterations; metrics and stats have a leading iteration axis.
    ``prefs`` (n_iters, N, K) gives every environment's preference in every iteration, which is
    how landmark schedules and requirement replay (ccjax.train) drive one compiled program
    (ignored where the parameters draw one per episode, ``EnvParams.pref_draw``)."""
    return jax.jit(_chunk(venv, agent, n_steps, n_iters))


def _chunk(venv: VecEnv, agent: Agent, n_steps: int, n_iters: int):
    """``make_chunk``'s function before ``jit`` (``compile_chunk`` jits it with shardings)."""

    def iteration(carry, pref):
        agent_state, runner, params = carry
        runner = set_preference(venv, runner, params, pref)
        runner, tr = rollout(venv, agent, agent_state, runner, params.replace(pref=pref),
                             n_steps)
        key, k_upd = jax.random.split(runner.key)
        runner = runner.replace(key=key)
        agent_state, metrics = agent.update(agent_state, tr, k_upd)
        return (agent_state, runner, params), (metrics, rollout_stats(tr))

    def chunk(agent_state, runner: Runner, params: EnvParams, prefs: jnp.ndarray):
        (agent_state, runner, _), out = jax.lax.scan(iteration, (agent_state, runner, params),
                                                     prefs, length=n_iters)
        return agent_state, runner, out

    return chunk


def env_mesh(n_envs: int) -> Mesh | None:
    """A 1-D mesh over all devices for splitting ``n_envs`` environments, or None when there
    is one device or the envs do not split evenly. On a CPU the CLI exposes every core as a
    device (``ccjax.devices``); environments are independent, so a rollout shards with no
    communication but the tick loop's "any MI still running" test."""
    devs = jax.devices()
    if len(devs) < 2 or n_envs % len(devs):
        return None
    return Mesh(np.asarray(devs), ("env",))


def _env_spec(n: int, mesh: Mesh, axis: int = 0):
    def spec(x):
        if hasattr(x, "ndim") and x.ndim > axis and x.shape[axis] == n:
            return NamedSharding(mesh, P(*([None] * axis), "env"))
        return NamedSharding(mesh, P())
    return spec


def compile_chunk(venv: VecEnv, agent: Agent, n_steps: int, n_iters: int, agent_state: Any,
                  runner: Runner, params: EnvParams, prefs: jnp.ndarray, shard: bool = False):
    """``make_chunk`` compiled ahead of time for these arguments; with several devices and
    ``shard``, the environments (runner and preferences) are split across them and the agent
    state replicated. Off by default: on the 2-core CPU the per-tick "any MI running" reduction
    across devices made an iteration slower (measured with ``ccjax bench train``: 0.945 s
    sharded over 2 host devices vs 0.738 s on one, 1024 envs); on several accelerators it is
    what spreads the batch. Returns (compiled, place): call ``compiled(*place(args))``;
    ``place`` puts arguments where the compiled program wants them (a no-op for its own
    outputs)."""
    fn = _chunk(venv, agent, n_steps, n_iters)
    mesh = env_mesh(venv.n) if shard else None
    args = (agent_state, runner, params, prefs)
    if mesh is None:
        return jax.jit(fn).lower(*args).compile(), lambda a: a
    rep = NamedSharding(mesh, P())
    env = _env_spec(venv.n, mesh)
    in_sh = (jax.tree.map(lambda _: rep, agent_state), jax.tree.map(env, runner),
             jax.tree.map(lambda _: rep, params), NamedSharding(mesh, P(None, "env")))
    out = jax.eval_shape(fn, *args)
    out_sh = (jax.tree.map(lambda _: rep, out[0]), jax.tree.map(env, out[1]),
              jax.tree.map(lambda _: rep, out[2]))
    jitted = jax.jit(fn, in_shardings=in_sh, out_shardings=out_sh)
    return jitted.lower(*jax.device_put(args, in_sh)).compile(), (
        lambda a: tuple(jax.device_put(a, in_sh)))
