"""ccjax: vectorized congestion-control simulation and learning in JAX."""

__version__ = "0.1.0"
