"""Return estimators every learner shares, written once: GAE (PPO), one-step TD targets
(off-policy critics) and the envelope target of multi-objective critics (AUTO Eq. 16).

All take the trajectory's masks as it carries them (``ccjax.agents.base.Trajectory``):
``terminated`` cuts the bootstrap (the episode has no future), ``done`` (terminated or
truncated) cuts the recursion (the next step is another episode's), and a step that is not
``valid`` (no MI ended: the vectorised env cut it short) passes the later estimate through,
since no time passed for the agent there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gae(reward: jnp.ndarray, value: jnp.ndarray, next_value: jnp.ndarray,
        terminated: jnp.ndarray, done: jnp.ndarray, valid: jnp.ndarray, gamma: jnp.ndarray,
        lam: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Generalised advantages (Schulman et al., ICLR 2016) over (T, N) and the returns
    ``adv + value``. ``next_value`` is the critic's value of each step's ``next_obs`` (before an
    auto-reset), so a truncated episode bootstraps from where it stopped."""
    nt = 1.0 - terminated.astype(jnp.float32)
    nd = 1.0 - done.astype(jnp.float32)

    def back(adv_next, x):
        r, v, vn, n_t, n_d, ok = x
        delta = r + gamma * vn * n_t - v
        adv = delta + gamma * lam * n_d * adv_next
        adv = jnp.where(ok, adv, adv_next)
        return adv, adv

    _, adv = jax.lax.scan(back, jnp.zeros_like(value[0]),
                          (reward, value, next_value, nt, nd, valid), reverse=True)
    return adv, adv + value


def td_target(reward: jnp.ndarray, next_value: jnp.ndarray, terminated: jnp.ndarray,
              gamma: jnp.ndarray) -> jnp.ndarray:
    """r + gamma (1 - terminated) V(s'), broadcast over trailing objective axes."""
    nt = 1.0 - terminated.astype(jnp.float32)
    while nt.ndim < next_value.ndim:
        nt = nt[..., None]
    return reward + gamma * nt * next_value


def envelope_target(objectives: jnp.ndarray, next_values: jnp.ndarray, w: jnp.ndarray,
                    terminated: jnp.ndarray, gamma: jnp.ndarray) -> jnp.ndarray:
    """AUTO Eq. 16 (the envelope of Yang et al., NeurIPS 2019): y = r + gamma V(s', w*) with
    w* = argmax_{w' in W} w^T V(s', w').

    ``objectives`` (B, K) vector rewards, ``next_values`` (B, M, K) the critic's vector values
    at s' under each of M candidate preferences w', ``w`` (B, K) the preference the target is
    for, ``terminated`` (B,). Returns (B, K)."""
    scal = jnp.einsum("bmk,bk->bm", next_values, w)
    best = jnp.argmax(scal, axis=1)
    v = jnp.take_along_axis(next_values, best[:, None, None], axis=1)[:, 0]
    return td_target(objectives, v, terminated, gamma)
