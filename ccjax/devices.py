"""Use every CPU core: expose each as an XLA host device and shard link batches across them.

XLA's CPU backend runs one program on one core at a time for arrays of the sizes a tick works on,
so a 2-core machine would idle half the time. Links are independent, so a batch split across
host devices (``--xla_force_host_platform_device_count``) needs no communication and runs on all
cores. The flag must be set before JAX initializes its backend: the CLI does it first thing;
notebooks call ``use_all_cpu_cores()`` before anything imports JAX. On a GPU or TPU nothing
changes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_FLAG = "--xla_force_host_platform_device_count"
#: when no memory figure can be read
FALLBACK_FREE_BYTES = 4 << 30


def use_all_cpu_cores(n: int | None = None) -> bool:
    """Ask XLA for one CPU device per core. Returns False (and changes nothing) when JAX is
    already initialized or the flag is already set."""
    if "jax" in sys.modules and _backend_initialized():
        return False
    flags = os.environ.get("XLA_FLAGS", "")
    if _FLAG in flags:
        return False
    if n is None:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not n or n <= 1:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={n}".strip()
    return True


def _backend_initialized() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge._backends)  # noqa: SLF001 - no public query exists
    except Exception:  # pragma: no cover - internal layout changed: assume initialized
        return True


def batch_mesh(batch: int):
    """The mesh (one axis, ``links``) that ``shard_batch`` splits a batch of ``batch`` links
    over, or None where it leaves the batch on one device."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devs = jax.local_devices()
    if len(devs) <= 1 or batch % len(devs):
        return None
    return Mesh(np.array(devs), ("links",))


def shard_batch(tree, batch: int):
    """Place a pytree whose leaves lead with the link axis across all local devices when the
    batch divides evenly; otherwise leave it on the default device."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = batch_mesh(batch)
    if mesh is None:
        return tree
    sharding = NamedSharding(mesh, PartitionSpec("links"))
    return jax.tree.map(lambda x: jax.device_put(x, sharding), tree)


def free_memory_bytes(device: Any = None) -> tuple[int, str]:
    """(bytes free on ``device``, where the figure came from): the device's ``memory_stats``
    (GPU, TPU), else the host's MemAvailable (the CPU backend allocates host memory), else a
    4 GiB guess (``FALLBACK_FREE_BYTES``, source ``"fallback guess"``)."""
    import jax

    device = device or jax.devices()[0]
    try:
        st = device.memory_stats()
    except Exception:  # noqa: BLE001 - CPU devices may not implement it
        st = None
    if st and st.get("bytes_limit"):
        return int(st["bytes_limit"] - st.get("bytes_in_use", 0)), "device memory_stats"
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "host MemAvailable"
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "host free pages"
    except (ValueError, OSError, AttributeError):
        return FALLBACK_FREE_BYTES, "fallback guess"
