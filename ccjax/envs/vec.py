"""A batch of environments stepped as one, with the episode resets done batch-wide.

``SingleFlowEnv.step`` resets an episode with a ``where`` over the whole state, so under ``vmap``
every step pays for a reset it rarely needs (a fresh simulator state holds the delay lines).
``VecEnv.step`` runs the batch's ``step_env`` and resets under one ``lax.cond`` on "any episode
ended", which executes the reset only on the (few) steps where some episode ended. Semantics
are those of vmapping ``SingleFlowEnv.step`` (fresh episodes draw from other keys, so the two
agree in distribution, not value for value).

Parameters may differ per environment in their preference (``pref`` of shape (n, K)) and in
the link each episode uses (``link_index`` of shape (n,)) only; the link pool and scalars are
shared, which keeps a batch of 1024 envs from holding 1024 copies of
the pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from ccjax.envs.single_flow import EnvParams, EnvState, StepInfo
from ccjax.envs.spec import EnvSpec


class TickEnv(Protocol):
    """What ``VecEnv`` needs of one environment: an MI is begun, ticked while it runs and
    ended, so a batch can run its tick loop at the batch level (``SingleFlowEnv``;
    ``MultiFlowEnv``, whose step runs to the link's next event and whose outputs, ``done``
    included, carry a flow axis)."""

    @property
    def spec(self) -> EnvSpec: ...

    def reset(self, key: jnp.ndarray, params: Any) -> tuple[jnp.ndarray, Any]: ...

    def begin(self, st: Any, action: jnp.ndarray, params: Any) -> Any: ...

    def mi_running(self, st: Any, sim: Any) -> jnp.ndarray: ...

    def sim_tick(self, st: Any, params: Any, live: jnp.ndarray | None = None) -> Any: ...

    def end(self, st: Any, sim: Any, params: Any) -> tuple: ...

    def critic_obs(self, st: Any, params: Any) -> jnp.ndarray: ...


def param_axes(params: EnvParams) -> EnvParams:
    """The vmap axes of ``params``: the preference and the link index per environment where
    they carry an environment axis, every other field shared."""
    shared = jax.tree.map(lambda _: None, params)
    per_env = jnp.ndim(params.link_index) == 1
    return shared.replace(pref=0 if params.pref.ndim == 2 else None,
                          link_index=0 if per_env else None)


@dataclass(frozen=True)
class VecEnv:
    """``n`` environments. ``tick_budget`` (ticks, 0 = none) ends a batch step early when some
    links' MIs are still running: those return ``info.valid`` false and continue their MI at the
    next step. Without a budget every step waits for the batch's longest MI."""

    env: TickEnv
    n: int
    tick_budget: int = 0

    @property
    def spec(self) -> EnvSpec:
        return self.env.spec

    def critic_obs(self, st: EnvState, params: EnvParams) -> jnp.ndarray:
        """(n, critic_dim) the critic-only input of every environment."""
        return jax.vmap(self.env.critic_obs, in_axes=(0, param_axes(params)))(st, params)

    def reset(self, key: jnp.ndarray, params: EnvParams) -> tuple[jnp.ndarray, EnvState]:
        keys = jax.random.split(key, self.n)
        return jax.vmap(self.env.reset, in_axes=(0, param_axes(params)))(keys, params)

    def step(self, key: jnp.ndarray, st: EnvState, action: jnp.ndarray, params: EnvParams
             ) -> tuple[jnp.ndarray, EnvState, jnp.ndarray, jnp.ndarray, StepInfo]:
        k_reset = key
        env, ax = self.env, param_axes(params)
        # The MI loop runs at the batch level with a per-link ``live`` mask (see core.tick):
        # vmapping the single env's while_loop would select, and so copy, every link's delay
        # lines on every tick.
        st = jax.vmap(env.begin, in_axes=(0, 0, ax))(st, action, params)
        running = jax.vmap(env.mi_running)
        budget = self.tick_budget if self.tick_budget > 0 else jnp.iinfo(jnp.int32).max

        def body(c):
            sim, k = c
            live = running(st, sim)
            sim = jax.vmap(lambda s, sm, lv, p: env.sim_tick(s.replace(sim=sm), p, lv),
                           in_axes=(0, 0, 0, ax))(st, sim, live, params)
            return sim, k + 1

        sim, _ = jax.lax.while_loop(
            lambda c: jnp.any(running(st, c[0])) & (c[1] < budget), body,
            (st.sim, jnp.zeros((), jnp.int32)))
        obs, st, reward, done, info = jax.vmap(env.end, in_axes=(0, 0, ax))(st, sim, params)
        # an environment with a flow axis (``MultiFlowEnv``) says ``done`` per flow, and all
        # its flows' episodes end together with the link's
        link_done = done.reshape(done.shape[0], -1).any(1)

        def do_reset(args):
            obs, st, critic = args
            obs_r, st_r = self.reset(k_reset, params)
            sel = lambda r, s: jnp.where(  # noqa: E731
                link_done.reshape(link_done.shape + (1,) * (s.ndim - 1)), r, s)
            return (jax.tree.map(sel, obs_r, obs), jax.tree.map(sel, st_r, st),
                    sel(self.critic_obs(st_r, params), critic))

        # the critic input of the returned states: the step's own, a reset episode's where one
        # ended (computed only on the steps where some episode did)
        obs, st, critic = jax.lax.cond(jnp.any(link_done), do_reset, lambda a: a,
                                       (obs, st, info.next_critic))
        return obs, st, reward, done, info.replace(critic=critic)
