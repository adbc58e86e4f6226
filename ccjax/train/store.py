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
import hashlib
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


class CheckpointDamaged(Exception):
    """A checkpoint step that cannot be used: its files differ from the digest recorded when it
    was written, or orbax cannot read it back."""


def _digest(step_dir: Path) -> str:
    """sha256 over a checkpoint step's files (relative paths and bytes, in sorted order)."""
    h = hashlib.sha256()
    for f in sorted(p for p in step_dir.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(step_dir)).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def _leaves(tree: Any) -> dict[str, Any]:
    """A pytree's non-empty leaves, keyed by their index in ``jax.tree.leaves`` order."""
    import jax

    return {str(i): x for i, x in enumerate(jax.tree.leaves(tree)) if getattr(x, "size", 1)}


def _unleaves(target: Any, saved: dict[str, Any]) -> Any:
    """``target``'s structure with ``saved``'s leaves (its empty leaves kept as they are);
    ``ValueError`` when the saved leaves do not fit it."""
    import jax

    leaves, treedef = jax.tree.flatten(target)
    want = {str(i) for i, x in enumerate(leaves) if getattr(x, "size", 1)}
    if set(saved) != want:
        raise ValueError(f"saved leaves {len(saved)} do not fit the {len(want)} expected")
    return jax.tree.unflatten(treedef, [saved.get(str(i), x) for i, x in enumerate(leaves)])


class Checkpoints:
    """orbax checkpoints of named pytrees (the agent ``state``; a training run also saves its
    environments' ``runner``) and a progress JSON, keeping the last ``keep``.

    Written atomically (orbax writes a temporary folder and renames it when complete) and
    verified on load: after each save the step's files are hashed into ``DIGESTS`` beside them,
    and a restore first checks the hash, so a file cut short, emptied or altered is found
    before orbax reads it (``CheckpointDamaged``). ``restore_intact`` falls back from a damaged
    newest step to the newest intact one."""

    DIGESTS = "digests.json"

    def __init__(self, directory: Path, keep: int = 2):
        self.dir = directory.resolve()
        self.mngr = ocp.CheckpointManager(
            self.dir, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

    def latest(self) -> int | None:
        return self.mngr.latest_step()

    def steps(self) -> list[int]:
        return sorted(self.mngr.all_steps())

    def digests(self) -> dict[int, str]:
        """The recorded digest per step (empty for checkpoints written before digests were)."""
        try:
            raw = json.loads((self.dir / self.DIGESTS).read_text())
            return {int(k): str(v) for k, v in raw.items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def save(self, step: int, state: Any, progress: dict[str, Any],
             **items: Any) -> None:
        """``state`` and any further named pytrees (``runner=...``) with ``progress``."""
        if step in self.mngr.all_steps():
            # same iteration, newer progress (a segment ended after a periodic checkpoint)
            self.mngr.delete(step)
        # the agent state as its own tree (what ``restore`` and older checkpoints read); the
        # other items as their non-empty leaves by index (orbax refuses a zero-size array, and
        # an agent without a critic input has one in its runner)
        trees = {"state": state, **{k: _leaves(v) for k, v in items.items()}}
        self.mngr.save(step, args=ocp.args.Composite(
            progress=ocp.args.JsonSave(progress),
            **{k: ocp.args.StandardSave(v) for k, v in trees.items()}), force=True)
        self.mngr.wait_until_finished()
        kept = set(self.mngr.all_steps())
        dig = {k: v for k, v in self.digests().items() if k in kept and k != step}
        dig[step] = _digest(self.dir / str(step))
        write_json(self.dir / self.DIGESTS, {str(k): v for k, v in sorted(dig.items())})

    def verify(self, step: int) -> None:
        """``CheckpointDamaged`` unless ``step``'s files hash to the digest recorded for it (a
        step written before digests were has none and passes; orbax's read still checks it)."""
        want = self.digests().get(step)
        if want is not None and _digest(self.dir / str(step)) != want:
            raise CheckpointDamaged(f"the files of step {step} differ from those written "
                                    "(cut short, emptied or changed)")

    def restore_items(self, targets: dict[str, Any], step: int | None = None
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the named pytrees, progress) of ``step`` (default the latest), each restored onto
        its target's structure; a name in ``targets`` that the step lacks is left out of the
        result (a checkpoint of an older format). ``CheckpointDamaged`` when it cannot be
        used."""
        step = self.latest() if step is None else step
        self.verify(step)
        have = {p.name for p in (self.dir / str(step)).iterdir() if p.is_dir()}
        names = [k for k in targets if k in have]
        try:
            out = self.mngr.restore(step, args=ocp.args.Composite(
                progress=ocp.args.JsonRestore(),
                **{k: ocp.args.StandardRestore(targets[k] if k == "state"
                                               else _leaves(targets[k])) for k in names}))
            prog = dict(out["progress"])
            got = {k: out[k] if k == "state" else _unleaves(targets[k], out[k]) for k in names}
        except Exception as e:  # orbax/TensorStore raise many types for a damaged file
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CheckpointDamaged(f"step {step} cannot be read ({type(e).__name__}: "
                                    f"{why[:200]})") from e
        return got, prog

    def restore_intact(self, targets: dict[str, Any]
                       ) -> tuple[int | None, dict[str, Any], dict[str, Any],
                                  list[tuple[int, str]]]:
        """(step, pytrees, progress, damaged) of the newest step that is intact, trying each
        from the newest down; ``damaged`` lists (step, why) of those skipped. Step None when
        none is."""
        damaged = []
        for step in reversed(self.steps()):
            try:
                trees, prog = self.restore_items(targets, step)
            except CheckpointDamaged as e:
                damaged.append((step, str(e)))
                continue
            return step, trees, prog, damaged
        return None, {}, {}, damaged

    def restore(self, target: Any, step: int | None = None) -> tuple[Any, dict[str, Any]]:
        """(agent state, progress) of ``step`` (default the latest); verified as
        ``restore_items``."""
        step = self.latest() if step is None else step
        if step is None:
            raise CheckpointDamaged(f"{str(self.dir)!r} holds no checkpoint")
        trees, prog = self.restore_items({"state": target}, step)
        if "state" not in trees:
            raise CheckpointDamaged(f"step {step} has no agent state")
        return trees["state"], prog

    def progress(self, step: int | None = None) -> dict[str, Any]:
        """The progress JSON alone (no array is read)."""
        step = self.latest() if step is None else step
        out = self.mngr.restore(step, args=ocp.args.Composite(progress=ocp.args.JsonRestore()))
        return dict(out["progress"])

    def close(self) -> None:
        self.mngr.close()
