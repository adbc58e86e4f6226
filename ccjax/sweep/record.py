"""What a batch produces for each trial, and how the driver writes it into the sweep directory.

Training a batch (``ccjax.sweep.runner.run_batch``) touches no store: every trial it finishes or
fails becomes a ``TrialOutcome`` (its curve rows, final metrics, timings, and for a finished
trial its exported policy as file bytes), and the batch's finished trials share one
``BatchCheckpoint``: a single orbax checkpoint of their chosen agent states stacked along a
trial axis, handed over before any of their outcomes. The driver alone writes them, with
``record``, whichever backend trained them: the local one hands each over as it comes, the Ray
one (``ccjax.sweep.ray_backend``) gets a batch's list back from a worker that need not share
the driver's filesystem. So both backends write the same files through the same code.

Why one checkpoint per batch: orbax's cost is per array written (measured on the 2-core CPU:
about 20 ms per checkpoint plus 1 ms per array; a PPO state has about 60), so one checkpoint
per trial cost 90-100 ms each, most of a vmapped batch's time outside its compiled programs.
The stacked checkpoint writes each array once for the whole batch. A finished trial's metrics
name its place in it (``checkpoint``: batch key and slot); ``ccjax.sweep.load_trial`` restores
that slot.

The order of ``record`` is the resume guarantee of ``ccjax.sweep.ledger``: the batch checkpoint
first, then per trial its policy (each directory written under a temporary name and renamed
into place), its curve (a temporary file, renamed), its ledger row's values as
``outcomes/<id>.json`` (renamed into place), and only then its ledger row in one
transaction. A trial whose row says ``done`` has everything on disk; a kill before the outcome
file leaves it ``running``, to be rerun.

The outcome file is the ledger's copy on the trial's side: a ledger that lost rows (its
``-wal`` lost or cut before the checkpoint of a record, a restored older copy) shows a finished
trial as ``pending`` or ``running``, and a resumed sweep would train it again. ``reconcile``,
run when a sweep opens its ledger, restores such rows from their outcome files (the values
``Ledger.finished_row`` computed, so the row is the one the ledger would have held), after
checking that the files the row points to are there. A finished trial's files beside a row
that never started and without an outcome file (a sweep recorded before outcome files existed)
are refused with a one-line ``ConfigError``, never trained over.

A batch checkpoint's key hashes the ids of the trials it holds: a rerun
of the same trials writes the same key over what the kill left; a rerun of other trials (some of
the batch had finished) writes a new key, and the old directory stays, unreferenced. A finished
trial's key is never written again, since finished trials are never rerun.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ccjax.errors import ConfigError
from ccjax.sweep.ledger import FINISH_COLUMNS, Ledger, write_curve

#: the evaluation quantities a curve carries as ``eval_*`` columns
EVAL_FIELDS = ("reward", "utilization", "latency_ratio", "loss_rate")
#: the sub-directories of ``trials/<id>/`` a finished trial's files go to
MODEL_DIRS = ("policy",)
#: the sub-directory of ``batches/<key>/`` a batch checkpoint's files go to
BATCH_DIRS = ("checkpoint",)
#: the directory of the trials' ledger rows as recorded, ``outcomes/<id>.json`` (not under
#: ``trials/<id>/``, which only a finished trial with a policy has)
OUTCOME_DIR = "outcomes"
OUTCOME_VERSION = 1
#: a finished trial's metrics a batch checkpoint's slot leaves out: the evaluation history,
#: the per-preference results of the best evaluation (``landmarks``, or ``prefs`` for the
#: episode schedule), and the slot's own address
_NOT_IN_SLOTS = ("evals", "landmarks", "prefs", "checkpoint")


@dataclass
class TrialOutcome:
    """One trial's end, as the driver records it.

    ``curve``: one row per iteration trained (training metrics, ``eval_*`` where it was
    evaluated); ``metrics``: what the ledger's metric columns take, with ``evals`` (the
    evaluation history, and for a ``done`` trial ``checkpoint``: where its state is in its
    batch's checkpoint); ``files``: for a ``done`` trial, ``{"policy/...": bytes}`` relative to
    ``trials/<id>/``, else None."""

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


@dataclass
class BatchCheckpoint:
    """The chosen agent states of a batch's finished trials (what ``ccjax.sweep.batch.kept``
    keeps: no replay buffer), stacked along a leading trial axis
    (slot ``k`` is ``trials[k]``), as the bytes of one orbax checkpoint
    (``ccjax.train.store.Checkpoints``: ``state`` and ``progress`` with each slot's trial, seed,
    point and metrics), for ``batches/<key>/``."""

    key: str
    files: dict[str, bytes] = field(repr=False)


def batch_key(trial_ids: list[str]) -> str:
    """A batch checkpoint's directory name: the same trials give the same key (a rerun after a
    kill replaces what it left), other trials another (a finished trial's checkpoint is never
    overwritten: a resumed sweep reruns only unfinished trials)."""
    return "b" + hashlib.sha1(",".join(trial_ids).encode()).hexdigest()[:12]


def record(ledger: Ledger, out: Path, o: TrialOutcome | BatchCheckpoint) -> None:
    """Write one outcome into the sweep directory ``out``: a batch checkpoint; or a trial's
    model files, curve and ledger row."""
    if isinstance(o, BatchCheckpoint):
        write_model_files(out / "batches" / o.key, o.files, BATCH_DIRS)
        return
    if o.files:
        write_model_files(out / "trials" / o.trial_id, o.files)
    if o.curve:
        write_curve(out / "curves" / f"{o.trial_id}.parquet", o.curve)
    cols = ledger.finished_row(o.trial_id, o.status, reason=o.reason, metrics=o.metrics,
                               timings=o.timings)
    write_outcome(out, o.trial_id, cols, curve_rows=len(o.curve))
    ledger.apply(o.trial_id, cols)


# -- the ledger's copy on the trials' side ---------------------------------------------------
def outcome_path(out: Path, tid: str) -> Path:
    return out / OUTCOME_DIR / f"{tid}.json"


def write_outcome(out: Path, tid: str, cols: dict[str, Any], curve_rows: int) -> Path:
    """``outcomes/<id>.json``: the trial's end columns as the ledger takes them, written to a
    temporary name, synced and renamed (a reader sees all of it or none)."""
    path = outcome_path(out, tid)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    body = {"version": OUTCOME_VERSION, "trial": tid, "curve_rows": curve_rows, "row": cols}
    with open(tmp, "w") as fh:
        fh.write(json.dumps(body, allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def read_outcome(out: Path, tid: str) -> dict[str, Any] | None:
    """A trial's outcome file, or None where it has none; ConfigError where it cannot be read
    or is not one (it was written whole: damage, not a kill)."""
    path = outcome_path(out, tid)
    if not path.is_file():
        return None
    rel = path.relative_to(out)
    try:
        body = json.loads(path.read_text())
        ok = (isinstance(body, dict) and body.get("trial") == tid
              and isinstance(body.get("row"), dict)
              and set(body["row"]) <= set(FINISH_COLUMNS)
              and body["row"].get("status") in ("done", "failed"))
    except (OSError, UnicodeDecodeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"{rel} in {str(out)!r} is invalid: not trial {tid}'s outcome record; "
                          f"restore it, or delete it, trials/{tid} and curves/{tid}.parquet to "
                          "train the trial again")
    return body


def _missing(out: Path, tid: str, body: dict[str, Any]) -> list[str]:
    """The files a recorded outcome points to that are not on disk (relative paths)."""
    row = body["row"]
    want = []
    if int(body.get("curve_rows") or 0) > 0:
        want.append(f"curves/{tid}.parquet")
    if row["status"] == "done":
        want.append(f"trials/{tid}/policy/policy.json")
        ref = json.loads(row.get("metrics") or "{}").get("checkpoint")
        if ref is not None:
            want.append(f"batches/{ref['batch']}/checkpoint")
    return [w for w in want if not (out / w).exists()]


def finished_files(out: Path, tid: str) -> list[str]:
    """What of a finished trial's files ``tid`` has on disk (relative paths): its curve, its
    policy."""
    return [h for h in (f"curves/{tid}.parquet", f"trials/{tid}/policy") if (out / h).exists()]


def sweep_files(out: Path) -> list[str]:
    """A few of the files finished trials leave in ``out`` (relative paths; empty when it has
    none): outcome files, curves."""
    found = [*sorted((out / OUTCOME_DIR).glob("*.json"))[:1],
             *sorted((out / "curves").glob("*.parquet"))[:1]]
    return [str(p.relative_to(out)) for p in found]


def reconcile(ledger: Ledger, out: Path) -> list[str]:
    """Cross-check the ledger against the trials' files (module doc); returns the ids whose
    rows were restored from their outcome files. A trial the ledger has as ``pending`` or
    ``running`` with an outcome file is restored from it; one it has as never started
    (``pending``, no attempt) with a curve or policy but no outcome file, or an outcome file
    whose files are gone, or an outcome file of a trial the ledger does not have, is a
    ConfigError: training would replace finished work the ledger lost."""
    rows = {r["id"]: r for r in ledger.rows()}
    foreign = sorted(p.stem for p in (out / OUTCOME_DIR).glob("*.json") if p.stem not in rows)
    if foreign:
        raise ConfigError(f"out={str(out)!r} is invalid: {OUTCOME_DIR}/{foreign[0]}.json records "
                          f"a trial this spec does not have ({len(foreign)} such); resume with "
                          "the spec, presets and --set values that made the sweep, or choose a "
                          "new directory")
    restored = []
    for tid, r in rows.items():
        if r["status"] in ("done", "failed"):
            continue
        body = read_outcome(out, tid)
        if body is not None:
            gone = _missing(out, tid, body)
            if gone:
                raise ConfigError(
                    f"trial {tid} in {str(out)!r} finished ({OUTCOME_DIR}/{tid}.json) but its "
                    f"ledger row was lost and {', '.join(gone)} is missing; restore {gone[0]}, "
                    f"or delete {OUTCOME_DIR}/{tid}.json, trials/{tid} and curves/{tid}.parquet "
                    "to train the trial again")
            ledger.apply(tid, body["row"])
            restored.append(tid)
            continue
        # a trial's files are written only after its row says running (attempts + 1, in the
        # main file): files beside a row that never started mean the ledger lost records
        have = finished_files(out, tid)
        if r["status"] == "pending" and not r["attempts"] and have:
            raise ConfigError(
                f"trial {tid} in {str(out)!r} has a finished trial's files ({', '.join(have)}) "
                "but the ledger has no record of it running (its records were lost: a lost or "
                f"cut {ledger.path.name}-wal?) and no {OUTCOME_DIR}/{tid}.json to restore it from; "
                f"restore the ledger from a backup, or delete {' and '.join(have)} to train it "
                "again")
    return restored


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


def _safe(rel: str, dirs: tuple[str, ...]) -> PurePosixPath:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] not in dirs:
        raise ValueError(f"model file path {rel!r} is invalid: relative, under one of "
                         f"{', '.join(dirs)}, without '..'")
    return p


def write_model_files(d: Path, files: dict[str, bytes],
                      dirs: tuple[str, ...] = MODEL_DIRS) -> None:
    """Unpack ``pack_dir``'s bytes into the directory ``d`` (a trial's: ``policy/``; a batch's:
    ``checkpoint/``): each sub-directory is written whole under a temporary name and then
    renamed over what a killed run may have left there."""
    paths = {rel: _safe(rel, dirs) for rel in files}
    d.mkdir(parents=True, exist_ok=True)
    for sub in dirs:
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


def batch_checkpoint(trials: list[Any], states: Any, metrics: list[dict[str, Any]]
                     ) -> BatchCheckpoint:
    """One orbax checkpoint of ``states`` (the finished trials' chosen states, stacked, slot k
    for ``trials[k]``) with each slot's trial, seed, point and metrics as its progress JSON,
    written in a private temporary directory and returned as bytes: where a batch is trained
    need not be where it is stored."""
    from ccjax.train.store import Checkpoints

    ids = [t.id for t in trials]
    slots = [{"trial": t.id, "seed": t.seed, "point": t.point,
              **{k: v for k, v in m.items() if k not in _NOT_IN_SLOTS}}
             for t, m in zip(trials, metrics, strict=True)]
    with tempfile.TemporaryDirectory(prefix="ccjax-batch-") as tmp:
        root = Path(tmp)
        ck = Checkpoints(root / "checkpoint", keep=1)
        ck.save(max(int(m["iterations"]) for m in metrics), states, {"slots": slots})
        ck.close()
        return BatchCheckpoint(batch_key(ids), pack_dir(root))


def policy_files(group: Any, trial: Any, actor: Any) -> dict[str, bytes]:
    """The trial's chosen network (``agent.actor_params`` of its kept state) exported for
    ``ccjax eval`` / deployment (``ccjax.agents.export``), written in a private temporary
    directory and returned as bytes."""
    from ccjax.agents.export import save_policy

    s = group.setup
    with tempfile.TemporaryDirectory(prefix="ccjax-trial-") as tmp:
        root = Path(tmp)
        # only a fixed-preference policy has one preference; one trained on landmarks or on a
        # draw per episode has none (as `ccjax train` exports them)
        one = group.schedule.fixed and s.env.spec.pref_dim > 0
        save_policy(root / "policy", s.agent, actor, s.env, s.params, algo=trial.cfg.name,
                    preference=list(trial.preference) if one else None)
        return pack_dir(root)
