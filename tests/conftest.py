import os

# Tests run on the CPU with 2 cores; keep XLA from grabbing more threads than exist.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
