"""What a batch produces for each trial, and how the driver writes it into the sweep directory.

Training a batch (``ccjax.sweep.runner.run_batch``) touches no store: every trial it finishes or
fails becomes a ``TrialOutcome`` (its curve rows, final metrics, timings, and for a finished
trial its checkpoint and exported policy as file bytes). The driver alone writes outcomes, with
``record``, whichever backend trained them: the local one hands each outcome over as it comes,
the Ray one (``ccjax.sweep.ray_backend``) gets a batch's outcomes back from a worker that need
not share the driver's filesystem. So both backends write the same files through the same code.

The order of ``record`` is the resume guarantee of ``ccjax.sweep.ledger``: the model files
(each directory written under a temporary name and renamed into place), then the curve (a
temporary file, renamed), and only then the ledger row in one transaction. A trial whose row
says ``done`` has everything on disk; a kill before that leaves it ``running``, to be rerun.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ccjax.sweep.ledger import Ledger, write_curve

#: the evaluation quantities a curve carries as ``eval_*`` columns
EVAL_FIELDS = ("reward", "utilization", "latency_ratio", "loss_rate")
#: the sub-directories of ``trials/<id>/`` a finished trial's files go to
MODEL_DIRS = ("checkpoint", "policy")


@dataclass
class TrialOutcome:
    """One trial's end, as the driver records it.

    ``curve``: one row per iteration trained (training metrics, ``eval_*`` where it was
    evaluated); ``metrics``: what the ledger's metric columns take, with ``evals`` (the
    evaluation history); ``files``: for a ``done`` trial, ``{"checkpoint/...": bytes,
    "policy/...": bytes}`` relative to ``trials/<id>/``, else None."""

    trial_id: str
    status: str  # done | failed
    reason: str | None
    curve: list[dict[str, Any]]
    metrics: dict[str, Any]
    timings: dict[str, float]
    files: dict[str, bytes] | None = field(default=None, repr=False)


def make_outcome(trial_id: str, status: str, curve: list[dict[str, Any]],
                 evals: list[dict[str, Any]], reason: str | None, iterations: int,
                 metrics: dict[str, Any] | None, timings: dict[str, float],
                 files: dict[str, bytes] | None = None) -> TrialOutcome:
    """Join the evaluations into the curve (``eval_*`` columns at the iterations evaluated,
    None elsewhere) and the history into the metrics."""
    by_it = {e["iteration"]: e for e in evals}
    rows = []
    for r in curve:
        e = by_it.get(r["iteration"], {})
        rows.append({**r, **{f"eval_{k}": e.get(k) for k in EVAL_FIELDS}})
    m = dict(metrics or {"iterations": iterations})
    m["evals"] = list(evals)
    return TrialOutcome(trial_id, status, reason, rows, m, dict(timings), files)


def record(ledger: Ledger, out: Path, o: TrialOutcome) -> None:
    """Write one outcome into the sweep directory ``out``: model files, curve, ledger row."""
    if o.files:
        write_model_files(out / "trials" / o.trial_id, o.files)
    if o.curve:
        write_curve(out / "curves" / f"{o.trial_id}.parquet", o.curve)
    ledger.finish(o.trial_id, o.status, reason=o.reason, metrics=o.metrics, timings=o.timings)


# -- model files as bytes --------------------------------------------------------------------
def pack_dir(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` as ``{relative POSIX path: bytes}``; an empty directory as
    ``"path/": b""`` (orbax's layout is kept whole)."""
    files: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file():
            files[rel] = p.read_bytes()
        elif p.is_dir() and not any(p.iterdir()):
            files[rel + "/"] = b""
    return files


def _safe(rel: str) -> PurePosixPath:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] not in MODEL_DIRS:
        raise ValueError(f"model file path {rel!r} is invalid: relative, under one of "
                         f"{', '.join(MODEL_DIRS)}, without '..'")
    return p


def write_model_files(d: Path, files: dict[str, bytes]) -> None:
    """Unpack ``pack_dir``'s bytes into the trial directory ``d``: each of ``checkpoint/`` and
    ``policy/`` is written whole under a temporary name and then renamed over what a killed
    run may have left there."""
    paths = {rel: _safe(rel) for rel in files}
    d.mkdir(parents=True, exist_ok=True)
    for sub in MODEL_DIRS:
        mine = {rel: p for rel, p in paths.items() if p.parts[0] == sub}
        if not mine:
            continue
        tmp = d / f"{sub}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for rel, p in mine.items():
            dest = tmp.joinpath(*p.parts[1:])
            if rel.endswith("/"):
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(files[rel])
                fh.flush()
                os.fsync(fh.fileno())
        shutil.rmtree(d / sub, ignore_errors=True)
        os.replace(tmp, d / sub)


def model_files(group: Any, trial: Any, state: Any, metrics: dict[str, Any]
                ) -> dict[str, bytes]:
    """The trial's chosen agent state as an orbax checkpoint (``ccjax.train.store
    .Checkpoints``) and its actor exported for ``ccjax eval`` / deployment
    (``ccjax.agents.export``), written in a private temporary directory and returned as
    bytes: where they are trained need not be where they are stored."""
    from ccjax.agents.export import save_policy
    from ccjax.train.store import Checkpoints

    s = group.setup
    with tempfile.TemporaryDirectory(prefix="ccjax-trial-") as tmp:
        root = Path(tmp)
        ck = Checkpoints(root / "checkpoint", keep=1)
        ck.save(int(metrics["best_iteration"] or metrics["iterations"]), state,
                {"trial": trial.id, "seed": trial.seed, "point": trial.point, **{
                    k: v for k, v in metrics.items() if k not in ("evals", "landmarks")}})
        ck.close()
        # a landmark-trained policy has no one preference (as `ccjax train` exports it)
        fixed = not group.schedule.uses_landmarks
        save_policy(root / "policy", s.agent, state.actor, s.env, s.params, algo=trial.cfg.name,
                    preference=list(trial.preference) if s.agent.pref_dim and fixed else None)
        return pack_dir(root)
