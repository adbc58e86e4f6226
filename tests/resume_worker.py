"""A training run in its own process that kills itself (SIGKILL, as ``kill -9`` would) at a
chosen point, for ``test_resume_exact.py``: ``python -m tests.resume_worker PRESET OUT POINT``.

POINT is where the process dies: ``compile`` (its first chunk compiling, after config.json is
written), ``rows:N`` (after metrics.csv gains its Nth row, between checkpoints),
``write:N`` (orbax's write of the checkpoint at iteration N in flight: the save is started and
the process dies before it is waited for), or ``none`` (runs to the end). The run resumes when
OUT holds one."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import jax

jax.config.update("jax_compilation_cache_dir", os.environ["CCJAX_TEST_XLA_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(preset: str, out: str, point: str) -> None:
    import orbax.checkpoint as ocp

    import ccjax.train.trainer as trainer
    from ccjax.train import train
    from ccjax.train.store import CsvLog
    from tests.test_resume_exact import config

    kind, _, n = point.partition(":")
    if kind == "compile":
        def compile_chunk(*a, **k):
            _die()
        trainer.compile_chunk = compile_chunk
    elif kind == "rows":
        append = CsvLog.append

        def rows(self, r):
            append(self, r)
            if self.path.name == "metrics.csv" and self.rows >= int(n):
                _die()
        CsvLog.append = rows
    elif kind == "write":
        save = ocp.CheckpointManager.save

        def write(self, step, *a, **k):
            out = save(self, step, *a, **k)
            if step == int(n) and Path(self.directory).name == "checkpoints":
                _die()  # orbax writes asynchronously: the step is in flight
            return out
        ocp.CheckpointManager.save = write
    elif kind != "none":
        raise SystemExit(f"unknown kill point {point!r}")
    resume = (Path(out) / "config.json").exists()
    train(config(preset), out, resume=resume, progress=False,
          log=lambda s: print(s, file=sys.stderr, flush=True))


if __name__ == "__main__":
    main(*sys.argv[1:])
