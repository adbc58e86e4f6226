import os

# Tests run on the CPU with 2 cores; keep XLA from grabbing more threads than exist.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Training tests build the same programs several times (a run, its resume, an adaptation from
# it): a persistent compilation cache, private to this test session, compiles each once.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402

# Shared by pytest-xdist's workers and by the subprocesses tests start: the first process (the
# controller, or a plain pytest) makes the directory and removes it at exit; workers inherit it
# through the environment, so a program compiled by one worker is a cache hit for the other.
_cache = os.environ.get("CCJAX_TEST_XLA_CACHE")
if _cache is None:
    _cache = tempfile.mkdtemp(prefix="ccjax-test-xla-")
    os.environ["CCJAX_TEST_XLA_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, True)
jax.config.update("jax_compilation_cache_dir", _cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

# Longest files first: under `pytest -n 2 --dist loadfile` a file runs whole on one worker, so a
# long file collected last (the ns-3 cross-validation) would leave the other worker idle at the
# end. A stable sort keeps each file's own order.
_LONGEST_FIRST = ("test_ns3_validation.py", "test_docs.py", "test_notebooks.py",
                  "test_resume_exact.py", "test_sweep_ray.py", "test_adapt.py",
                  "test_train.py", "test_sweep.py", "test_train_damage.py",
                  "test_sweep_damage.py", "test_multi_flow_env.py",
                  "test_agents_contract.py", "test_ppo.py", "test_models.py",
                  "test_sweep_agents.py", "test_mix_and_devices.py", "test_export_auto.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(_LONGEST_FIRST)))
