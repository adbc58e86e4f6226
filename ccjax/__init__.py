"""ccjax: vectorized congestion-control simulation and learning in JAX."""

from ccjax.devices import use_all_cpu_cores

__version__ = "0.1.0"
__all__ = ["use_all_cpu_cores"]
