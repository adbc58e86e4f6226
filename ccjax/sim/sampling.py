"""Fast random draws for the packet model, branch-free so they vectorize well under vmap.

``jax.random.binomial`` uses rejection loops, which under ``vmap`` become while-loops over the
whole batch and dominated the packet model's cost. Per tick and flow the number of packets is
small, so inversion with a fixed number of unrolled steps is exact in practice.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri

#: inversion steps; exact whenever the draw is below this
K_MAX = 24


def binomial(key: jnp.ndarray, n: jnp.ndarray, p: jnp.ndarray) -> jnp.ndarray:
    """Binomial(n, p) draws, float, same shape as ``n``.

    Exact (inversion of the CDF, one uniform per draw) when ``n p + 6 sqrt(n p (1-p)) < K_MAX``;
    otherwise the normal approximation with continuity correction, rounded and clipped to
    ``[0, n]``, which at that size is within the binomial's own sampling noise.
    """
    n = jnp.asarray(n, jnp.float32)
    p = jnp.broadcast_to(jnp.asarray(p, jnp.float32), n.shape)
    u = jax.random.uniform(key, n.shape, minval=1e-7, maxval=1.0 - 1e-7)
    q = 1.0 - p
    ratio = p / jnp.maximum(q, 1e-30)
    pmf = jnp.exp(n * jnp.log1p(-jnp.minimum(p, 1.0 - 1e-7)))
    cdf = pmf
    k = jnp.zeros_like(n)
    for i in range(K_MAX):
        k = k + (u > cdf).astype(n.dtype)
        pmf = pmf * jnp.maximum(n - i, 0.0) / (i + 1) * ratio
        cdf = cdf + pmf
    mean = n * p
    sd = jnp.sqrt(mean * q)
    approx = jnp.clip(jnp.round(mean + sd * ndtri(u)), 0.0, n)
    exact_ok = mean + 6.0 * sd < K_MAX
    out = jnp.where(exact_ok, jnp.minimum(k, n), approx)
    return jnp.where((p <= 0) | (n <= 0), 0.0, out)
