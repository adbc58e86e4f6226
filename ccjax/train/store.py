"""A training run's directory: config, metric CSVs written as they come, orbax checkpoints.

Layout of ``DIR``::

    config.json      the resolved algorithm config, seed and schedule (what --resume checks)
    metrics.csv      one row per PPO iteration
    eval.csv         one row per (evaluation, preference)
    checkpoints/     orbax CheckpointManager: agent state + progress (JSON)
    policy/          the exported actor (ccjax.agents.export): the best evaluated model
    summary.json     wall and compile times, iterations, convergence, final evaluation

Rows are appended and flushed after every compiled chunk. A checkpoint records how many rows
each CSV had; resuming truncates rows written after it, so a killed run continues without
losing finished work and without duplicating a row.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from ccjax.errors import ConfigError


def check_out_dir(path: str | os.PathLike[str], field: str = "out") -> Path:
    """``path`` as a ``Path`` if a run's (or a sweep's) folder can be made or used there, else a
    one-line ``ConfigError`` naming ``field``: checked before anything is built, as the folder
    is first made under its lock after compiling. Refused: an empty path (``Path("")`` is the
    current folder, which the user did not name), an existing file, a file on the way to it,
    and a place where no file can be made (tried beside the target with a temporary file,
    ``plot.common.try_writable``, so nothing is created or removed)."""
    from ccjax.dirlock import LOCK_NAME, nearest_folder
    from ccjax.plot.common import try_writable

    text = os.fspath(path)
    if text == "":
        raise ConfigError(f"{field}='' is invalid: a folder's path (an empty path is not taken "
                          "as the current folder)")
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{field}={text!r} is invalid: it is a file, not a folder; name a "
                          "folder (a new one, or the one to resume)")
    up, _ = nearest_folder(p)
    if not up.is_dir():
        raise ConfigError(f"{field}={text!r} is invalid: {str(up)!r} on the way to it is a "
                          "file, not a folder")
    try:
        # in the folder itself where it exists (its lock file, opened to append nothing if it
        # is there), else in the nearest folder above it that exists
        try_writable(p / LOCK_NAME if p.is_dir() else p, up)
    except OSError as e:
        raise ConfigError(f"{field}={text!r} is invalid: nothing can be written there "
                          f"({e.strerror or e})") from None
    return p


def write_json(path: Path, obj: Any) -> None:
    """Atomically (write a temporary file, then rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=_default) + "\n")
    os.replace(tmp, path)


def _default(o: Any) -> Any:
    try:
        return o.tolist()
    except AttributeError:
        return str(o)


class CsvLog:
    """Append-only CSV with a fixed header; ``truncate(n)`` keeps the first n data rows."""

    def __init__(self, path: Path, fields: list[str]):
        self.path, self.fields = path, fields
        if not path.exists():
            with open(path, "w", newline="") as fh:
                csv.writer(fh).writerow(fields)
        self.rows = self._count()

    def _count(self) -> int:
        with open(self.path, newline="") as fh:
            return max(sum(1 for _ in fh) - 1, 0)

    def append(self, rows: list[dict[str, Any]]) -> None:
        with open(self.path, "a", newline="") as fh:
            w = csv.DictWriter(fh, self.fields)
            for r in rows:
                w.writerow({k: _cell(r.get(k, "")) for k in self.fields})
            fh.flush()
            os.fsync(fh.fileno())
        self.rows += len(rows)

    def truncate(self, n: int) -> None:
        with open(self.path, newline="") as fh:
            lines = fh.readlines()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(lines[: n + 1]))
        os.replace(tmp, self.path)
        self.rows = n

    def read(self) -> list[dict[str, str]]:
        with open(self.path, newline="") as fh:
            return list(csv.DictReader(fh))


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


class Checkpoints:
    """orbax checkpoints of (agent state, progress JSON), keeping the last ``keep``."""

    def __init__(self, directory: Path, keep: int = 2):
        self.mngr = ocp.CheckpointManager(
            directory.resolve(),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

    def latest(self) -> int | None:
        return self.mngr.latest_step()

    def save(self, step: int, state: Any, progress: dict[str, Any]) -> None:
        if step in self.mngr.all_steps():
            # same iteration, newer progress (a segment ended after a periodic checkpoint)
            self.mngr.delete(step)
        self.mngr.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            progress=ocp.args.JsonSave(progress)), force=True)
        self.mngr.wait_until_finished()

    def restore(self, target: Any, step: int | None = None) -> tuple[Any, dict[str, Any]]:
        step = self.latest() if step is None else step
        out = self.mngr.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target), progress=ocp.args.JsonRestore()))
        return out["state"], dict(out["progress"])

    def progress(self, step: int | None = None) -> dict[str, Any]:
        """The progress JSON alone (no array is read)."""
        step = self.latest() if step is None else step
        out = self.mngr.restore(step, args=ocp.args.Composite(progress=ocp.args.JsonRestore()))
        return dict(out["progress"])

    def close(self) -> None:
        self.mngr.close()
