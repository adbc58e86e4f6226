"""The packet model's binomial sampler (``ccjax.sim.sampling``) against the exact distribution."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.sim import sampling


def _exact_pmf(n: int, p: float) -> np.ndarray:
    k = np.arange(n + 1)
    logc = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k])
    return np.exp(logc + k * math.log(p) + (n - k) * math.log1p(-p))


# a grid of uniforms in (0, 1): the sampler's draws over it are its distribution
U = (np.arange(200_000) + 0.5) / 200_000


@pytest.mark.parametrize("n,p", [(1, 0.3), (5, 0.5), (7, 0.9), (12, 0.01), (40, 0.05),
                                 (300, 0.01)])
def test_draws_below_k_max_are_the_exact_quantiles(n, p):
    cdf = np.cumsum(_exact_pmf(n, p))
    exact = np.searchsorted(cdf, U)  # the smallest k with CDF(k) >= u
    got = np.asarray(sampling.from_uniform(jnp.asarray(U, jnp.float32), jnp.full(U.shape, n),
                                           p))
    # float32 against float64: leave out the uniforms within 1e-5 of a CDF step
    near = np.min(np.abs(U[:, None] - cdf[None, :]), axis=1) < 1e-5
    sel = (exact < sampling.K_MAX) & ~near
    assert sel.sum() > 0.9 * (exact < sampling.K_MAX).sum()
    np.testing.assert_array_equal(got[sel], exact[sel])
    if n < sampling.K_MAX:  # then every draw is exact
        assert np.all(got[~near] == exact[~near])


@pytest.mark.parametrize("n,p", [(300, 0.01), (1000, 0.01), (100, 0.05), (300, 0.05),
                                 (30, 0.2), (100, 0.3), (2000, 0.5)])
def test_the_whole_distribution_is_close_where_draws_pass_k_max(n, p):
    """Where draws pass ``K_MAX`` (a tick of hundreds of packets under loss) the tail comes
    from the skew-corrected normal quantile; the distribution stays within 0.005 in total
    variation (the plain normal quantile was 0.04 to 0.07 off for n p of 2 to 10)."""
    got = np.asarray(sampling.from_uniform(jnp.asarray(U, jnp.float32), jnp.full(U.shape, n),
                                           p)).astype(int)
    assert got.min() >= 0 and got.max() <= n
    hist = np.bincount(got, minlength=n + 1) / len(U)
    tv = 0.5 * np.abs(hist - _exact_pmf(n, p)).sum()
    assert tv < 0.005, tv


def test_random_draws_have_the_binomial_moments_and_edges():
    key = jax.random.PRNGKey(3)
    n = jnp.array([0.0, 4.0, 10.0, 250.0, 6.0, 9.0])
    p = jnp.array([0.3, 0.0, 0.5, 0.02, 1.0, 0.4])
    draws = np.asarray(jax.vmap(lambda k: sampling.binomial(k, n, p))(
        jax.random.split(key, 20_000)))
    assert np.all(draws == np.round(draws))
    assert np.all(draws[:, 0] == 0) and np.all(draws[:, 1] == 0)  # n = 0, p = 0
    assert np.all(draws[:, 4] == 6)  # p = 1
    for j in (2, 3, 5):
        mean, var = float(n[j] * p[j]), float(n[j] * p[j] * (1 - p[j]))
        # 20,000 draws: the sample mean's sd is sqrt(var / 20000) < 0.02
        assert abs(draws[:, j].mean() - mean) < 0.08, j
        assert abs(draws[:, j].var() / var - 1) < 0.05, j
