"""The result store of a sweep directory: an SQLite ledger, Parquet curves, orbax checkpoints.

Layout of ``DIR``::

    ledger.sqlite            the ledger (below); the one source of truth of what is finished
    sweep.json               the spec as expanded (name, preset, axes, trial ids)
    curves/<id>.parquet      per trial, one row per iteration (training metrics; eval_* columns
                             at the iterations where the trial was evaluated)
    batches/<key>/checkpoint/  orbax: the chosen agent states of a batch's finished trials,
                             stacked along a trial axis (ccjax.sweep.record.BatchCheckpoint);
                             a trial's metrics name its batch key and slot (``checkpoint``)
    trials/<id>/policy/      the trial's chosen actor exported (policy.json, policy.npz) for
                             `ccjax eval`
    outcomes/<id>.json       a finished (done or failed) trial's row as recorded: what a
                             resumed sweep restores a lost row from (Durability, below)

Ledger schema (table ``trials``, one row per trial, primary key ``id``)::

    id TEXT, idx INTEGER, group_id TEXT, point TEXT (JSON: the axis values), config TEXT (JSON:
    resolved preset tables, seed), status TEXT (pending | running | done | failed), reason TEXT,
    attempts INTEGER (times the trial was started), batch TEXT, batch_size INTEGER,
    iterations INTEGER, reward REAL, utilization REAL, latency_ratio REAL, loss_rate REAL (final
    deterministic evaluation at the trial's preference, or the mean over its landmarks for a
    landmark schedule), train_reward REAL (mean training reward over the last 10 iterations),
    best_reward REAL, best_iteration INTEGER, iter_99 INTEGER (the first evaluated iteration
    within 1% of best_reward), train_99_s REAL (its batch's training wall time up to iter_99,
    from the timings), metrics TEXT
    (JSON: all of the above, the evaluation history, and for a landmark schedule the
    per-landmark results of the best evaluation), compile_s REAL, train_s REAL, eval_s REAL
    (of the trial's batch: trials of a batch share one program and one wall clock; a trial alone
    in its batch has them to itself), started REAL, ended REAL (Unix times), degenerate INTEGER
    (a ``done`` trial whose final policy collapsed: 1, with the why in ``reason``; 0 for a
    healthy one; NULL for other statuses and for rows recorded before the flag existed;
    ``ccjax.sweep.runner.degenerate``)

plus ``meta`` (key, value): the spec and when the sweep was created.

The resume guarantee. Every change of a trial's row is one transaction. A trial becomes
``done`` only after its batch's checkpoint, its curve and its policy are on disk (each written
to a temporary name and renamed, so a reader never sees half a file); a kill before that leaves
it ``running``, and a resumed sweep turns ``running`` back into ``pending`` and trains it again,
replacing whatever partial files it had (a batch checkpoint under a key no finished trial names
stays behind, unreferenced: ``ccjax.sweep.record``). ``done`` and ``failed`` trials are never
rerun. Rows are keyed by the trial id and inserted with ``INSERT OR IGNORE``, so no trial
appears twice however often the sweep is resumed.

Durability. The ledger is in WAL mode (``ccjax results`` reads while a sweep writes), and every
write is followed by a ``wal_checkpoint(TRUNCATE)``: what a transaction committed is in
``ledger.sqlite`` itself once the write returns, and the ``-wal`` file is empty between writes,
so a lost or cut ``-wal`` (a copy of the directory without it, a kill or a full disk during a
write) loses nothing and cannot replay stale pages. (Measured on the 2-core CPU's disk: a
trial's row takes about 14 ms to record with the checkpoint against 4 ms without, its outcome
file 3.5 ms more; a trial trains for seconds at the least.) A finished trial's row is also
written, before the ledger, as ``outcomes/<id>.json`` (``ccjax.sweep.record``): a resumed sweep
that finds such a file for a trial its ledger does not record as finished (the record that was
in flight when the ``-wal`` went) restores the row from it, and refuses (one line) where a
finished trial's files are there without one.

Readers (``Ledger.existing``: ``ccjax results``, the figures, ``ccjax prefeval``'s reads,
``load_trial``) open the file read-only (``mode=ro``, and ``immutable`` where no ``-wal`` is
beside it, so they leave no ``-wal`` or ``-shm`` behind): a file that is not a ledger (empty, or
another database) is a ``ConfigError`` and is left as it was.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ccjax.errors import ConfigError

LEDGER = "ledger.sqlite"
STATUSES = ("pending", "running", "done", "failed")
METRIC_COLUMNS = ("reward", "utilization", "latency_ratio", "loss_rate", "train_reward",
                  "best_reward")

_SQL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
    id TEXT PRIMARY KEY,
    idx INTEGER NOT NULL,
    group_id TEXT NOT NULL,
    point TEXT NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
    reason TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    batch TEXT,
    batch_size INTEGER,
    iterations INTEGER,
    reward REAL, utilization REAL, latency_ratio REAL, loss_rate REAL,
    train_reward REAL, best_reward REAL, best_iteration INTEGER,
    iter_99 INTEGER, train_99_s REAL,
    metrics TEXT,
    compile_s REAL, train_s REAL, eval_s REAL,
    started REAL, ended REAL,
    degenerate INTEGER
);
"""

#: the ledger's columns of numbers (INTEGER and REAL): numeric even where every row holds NULL
NUMERIC_COLUMNS = ("idx", "attempts", "batch_size", "iterations", "reward", "utilization",
                   "latency_ratio", "loss_rate", "train_reward", "best_reward", "best_iteration",
                   "iter_99", "train_99_s", "compile_s", "train_s", "eval_s", "started", "ended",
                   "degenerate")

#: columns added after the first release of the schema (``Ledger`` adds them to older ledgers;
#: a read-only ``Ledger`` gives them as None in rows of a ledger without them)
_ADDED_COLUMNS = (("iter_99", "INTEGER"), ("train_99_s", "REAL"), ("degenerate", "INTEGER"))
#: the columns ``Ledger.finished_row`` sets: what ``outcomes/<id>.json`` restores
FINISH_COLUMNS = ("status", "reason", "iterations", "reward", "utilization", "latency_ratio",
                  "loss_rate", "train_reward", "best_reward", "best_iteration", "iter_99",
                  "train_99_s", "metrics", "compile_s", "train_s", "eval_s", "ended",
                  "degenerate", "attempts", "batch", "batch_size", "started")
#: a checkpoint waits at most this long for a reader (``ccjax results``) to finish: a reader
#: that holds a transaction open must not stall the sweep at every record (what is not yet in
#: the main file is in the synced ``-wal``, and the next checkpoint moves it)
_CHECKPOINT_WAIT_MS = 1000
_BUSY_WAIT_S = 30.0


def _num(x: Any) -> Any:
    """SQLite and JSON take no NaN: a non-finite float becomes NULL, in nested lists and dicts
    too (a diverged trial's evaluation history)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _num(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_num(v) for v in x]
    return x


class Ledger:
    """The ``trials`` table of one sweep directory: read and written by the sweep (the
    default), or only read (``readonly``: ``Ledger.existing``)."""

    def __init__(self, directory: str | os.PathLike[str], readonly: bool = False):
        self.dir = Path(directory)
        self.path = self.dir / LEDGER
        self.readonly = readonly
        try:
            if readonly:
                # mode=ro: a reader never creates the file nor writes a schema into one that is
                # empty or foreign (it would then pass for a sweep that has no trials). Without
                # a -wal no writer has the ledger open (a WAL writer keeps one while it does),
                # so all of it is in the main file: immutable reads it without locks or a -shm,
                # and leaves the directory as it found it; with one, the -shm shows the reader
                # what the -wal holds
                wal = self.path.with_name(self.path.name + "-wal")
                query = "?mode=ro" + ("" if wal.exists() else "&immutable=1")
                self.db = sqlite3.connect(self.path.resolve().as_uri() + query, uri=True,
                                          timeout=_BUSY_WAIT_S)
            else:
                # autocommit off; every method is one ``_write`` transaction
                self.db = sqlite3.connect(self.path, timeout=_BUSY_WAIT_S)
        except sqlite3.Error as e:
            raise ConfigError(f"{LEDGER} in {str(self.dir)!r} is invalid: it cannot be opened "
                              f"({e})") from None
        self.db.row_factory = sqlite3.Row
        try:
            if readonly:
                self._check_is_ledger()
            else:
                self._set_up()
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise ConfigError(f"{LEDGER} in {str(self.dir)!r} is invalid: not a readable sweep "
                              f"ledger ({e}); restore it from a backup or start the sweep in a "
                              "new directory") from None
        except ConfigError:
            self.db.close()
            raise

    def _set_up(self) -> None:
        # WAL: `ccjax results` can read while a sweep writes; synchronous=FULL and a checkpoint
        # after every write (``_write``): committed means in the main file (module doc)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        with self._write():
            self.db.executescript(_SQL)
            # a ledger written before a column existed gets it (NULL for its finished rows)
            have = {r[1] for r in self.db.execute("PRAGMA table_info(trials)")}
            for col, typ in _ADDED_COLUMNS:
                if col not in have:
                    self.db.execute(f"ALTER TABLE trials ADD COLUMN {col} {typ}")

    def _check_is_ledger(self) -> None:
        """ConfigError unless the file holds a ``trials`` table (an empty file is a database
        without tables to SQLite, so opening it is no check)."""
        have = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = "
                                              "'table'")}
        if "trials" not in have:
            if self.path.stat().st_size == 0:  # what a ledger whose -wal was lost can be
                what, fix = "an empty file", (f"or rebuild it from the trials' files with "
                                              f"`ccjax sweep SPEC --out {self.dir} --resume`")
            else:
                what, fix = ("a database without a trials table",
                             "or start the sweep in a new directory")
            raise ConfigError(f"{LEDGER} in {str(self.dir)!r} is invalid: not a sweep ledger "
                              f"({what}); restore it from a backup, {fix}")

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One transaction, then a checkpoint (module doc, Durability): once this returns, the
        change is in ``ledger.sqlite`` and the ``-wal`` is empty."""
        with self.db:
            yield
        self.db.execute(f"PRAGMA busy_timeout = {_CHECKPOINT_WAIT_MS}")
        try:
            # (busy, frames, moved): a reader in the way leaves busy = 1 and the frames in the
            # synced -wal, where the next checkpoint finds them
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {int(_BUSY_WAIT_S * 1000)}")

    @classmethod
    def existing(cls, directory: str | os.PathLike[str]) -> Ledger:
        """The ledger of a sweep directory, opened read-only."""
        d = Path(directory)
        if not (d / LEDGER).is_file():
            raise ConfigError(f"sweep_dir={str(d)!r} is invalid: no {LEDGER} there (not a "
                              "sweep directory)")
        return cls(d, readonly=True)

    def close(self) -> None:
        self.db.close()

    # -- meta ----------------------------------------------------------------------------------
    def get_meta(self, key: str) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        with self._write():
            self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                            (key, json.dumps(value, default=str)))

    # -- trials ----------------------------------------------------------------------------------
    def ids(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT id FROM trials ORDER BY idx")]

    def add(self, trials: Iterable[Any]) -> None:
        """Insert trials as pending; existing rows are left alone."""
        with self._write():
            self.db.executemany(
                "INSERT OR IGNORE INTO trials (id, idx, group_id, point, config, status) "
                "VALUES (?, ?, ?, ?, ?, 'pending')",
                [(t.id, t.index, t.group, json.dumps(t.point),  # axis order kept for columns
                  json.dumps(t.config_json(), sort_keys=True)) for t in trials])

    def requeue_running(self) -> list[str]:
        """Trials a killed sweep left ``running`` become ``pending`` again."""
        with self._write():
            ids = [r[0] for r in self.db.execute("SELECT id FROM trials WHERE status = 'running'")]
            self.db.execute("UPDATE trials SET status = 'pending' WHERE status = 'running'")
        return ids

    def status(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self.db.execute("SELECT id, status FROM trials")}

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for st, n in self.db.execute("SELECT status, COUNT(*) FROM trials GROUP BY status"):
            out[st] = n
        return out

    def start(self, ids: list[str], batch: str, batch_size: int) -> None:
        now = time.time()
        with self._write():
            self.db.executemany(
                "UPDATE trials SET status = 'running', attempts = attempts + 1, batch = ?, "
                "batch_size = ?, started = ?, ended = NULL, reason = NULL WHERE id = ? "
                "AND status = 'pending'", [(batch, batch_size, now, i) for i in ids])

    def finish(self, tid: str, status: str, *, reason: str | None = None,
               metrics: dict[str, Any] | None = None, timings: dict[str, float] | None = None
               ) -> None:
        """Record a trial's end (``done`` or ``failed``) in one transaction."""
        self.apply(tid, self.finished_row(tid, status, reason=reason, metrics=metrics,
                                          timings=timings))

    def finished_row(self, tid: str, status: str, *, reason: str | None = None,
                     metrics: dict[str, Any] | None = None,
                     timings: dict[str, float] | None = None) -> dict[str, Any]:
        """The columns (``FINISH_COLUMNS``) a trial's row takes at its end, without writing
        them: ``record`` keeps them in ``outcomes/<id>.json`` too, and ``apply`` writes
        them (the same values either way). A ``done`` trial's ``degenerate`` is 1 where its
        metrics name a collapse, else 0."""
        if status not in ("done", "failed"):
            raise ValueError(status)
        m = {k: _num(v) for k, v in (metrics or {}).items()}
        t = timings or {}
        row = self.db.execute("SELECT attempts, batch, batch_size, started FROM trials "
                              "WHERE id = ?", (tid,)).fetchone()
        return {"status": status, "reason": reason, "iterations": m.get("iterations"),
                "reward": m.get("reward"), "utilization": m.get("utilization"),
                "latency_ratio": m.get("latency_ratio"), "loss_rate": m.get("loss_rate"),
                "train_reward": m.get("train_reward"), "best_reward": m.get("best_reward"),
                "best_iteration": m.get("best_iteration"), "iter_99": m.get("iter_99"),
                "train_99_s": _num(t.get("train_99_s")),
                "metrics": json.dumps(m, default=str, allow_nan=False),
                "compile_s": _num(t.get("compile_s")), "train_s": _num(t.get("train_s")),
                "eval_s": _num(t.get("eval_s")), "ended": time.time(),
                "degenerate": (int(bool(m.get("degenerate"))) if status == "done" else None),
                **({} if row is None else dict(row))}

    def apply(self, tid: str, cols: dict[str, Any]) -> None:
        """Write a trial's end columns (``finished_row``'s, or an ``outcomes/<id>.json``'s
        on recovery) in one transaction."""
        bad = [k for k in cols if k not in FINISH_COLUMNS]
        if bad or cols.get("status") not in ("done", "failed"):
            raise ValueError(f"end columns {sorted(cols)} are invalid")
        keys = [k for k in FINISH_COLUMNS if k in cols]
        with self._write():
            self.db.execute(f"UPDATE trials SET {', '.join(f'{k} = ?' for k in keys)} "
                            "WHERE id = ?", [cols[k] for k in keys] + [tid])

    def rows(self) -> list[dict[str, Any]]:
        """Every trial's row, in expansion order; a column an older ledger lacks is None."""
        blank = dict.fromkeys(c for c, _ in _ADDED_COLUMNS)
        return [{**blank, **dict(r)}
                for r in self.db.execute("SELECT * FROM trials ORDER BY idx")]

    def degenerate_count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM trials WHERE status = 'done' AND "
                               "degenerate = 1").fetchone()[0]


# -- files written atomically ---------------------------------------------------------------------
def write_curve(path: Path, rows: list[dict[str, Any]]) -> Path:
    """One trial's per-iteration rows as Parquet, via a temporary file and ``os.replace``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = {}
    for r in rows:
        for k in r:
            cols.setdefault(k, [])
    for r in rows:
        for k in cols:
            cols[k].append(r.get(k))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.table(cols), tmp)
    os.replace(tmp, path)
    return path


def read_parquet(path: str | os.PathLike[str], what: str) -> Any:
    """The Parquet file ``path`` as a pyarrow table; one that cannot be read (cut short by a
    kill or a full disk, overwritten) is a one-line ``ConfigError`` naming it (``what``: what
    the file holds), not pyarrow's ArrowInvalid."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise ConfigError(f"{what}={str(path)!r} is invalid: not a readable Parquet file "
                          f"({why}); allowed: the Parquet file the sweep wrote (this one was cut "
                          "short or overwritten)") from None



def read_curve(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return read_parquet(path, "curve").to_pylist()


# -- `ccjax results`: the table, filtered and sorted ----------------------------------------------
_FILTER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|!=|==|=|<|>)\s*(.+?)\s*$")


def flat_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ledger rows with the config spread out: ``seed``, every ``table.key`` of the resolved
    preset (so any key can be filtered on), and the point's keys."""
    out = []
    for r in rows:
        cfg = json.loads(r["config"])
        d = {k: v for k, v in r.items() if k not in ("config", "metrics", "point")}
        d["seed"] = cfg.get("seed")
        for table in ("agent", "hyper", "env", "train"):
            for k, v in cfg.get(table, {}).items():
                d[f"{table}.{k}"] = v
        d["point"] = json.loads(r["point"])
        out.append(d)
    return out


def varying_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The point keys (axes) in the order they first appear: the columns that tell trials
    apart."""
    keys: list[str] = []
    for r in rows:
        for k in r["point"]:
            if k not in keys:
                keys.append(k)
    return keys


def _coerce(text: str) -> Any:
    t = text.strip().strip("'\"")
    try:
        return json.loads(t)
    except ValueError:
        return t


def parse_filter(expr: str) -> tuple[str, str, Any]:
    m = _FILTER.match(expr)
    if not m:
        raise ConfigError(f"filter={expr!r} is invalid: COLUMN OP VALUE with OP one of "
                          "=, !=, <, <=, >, >= (e.g. status=done, hyper.lr<1e-3)")
    key, op, val = m.groups()
    return key, "=" if op == "==" else op, _coerce(val)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _numeric(rows: list[dict[str, Any]], key: str) -> bool:
    """``key`` holds numbers (a ledger column of numbers, or a config key whose every value
    is one): a filter compares it as a number."""
    vals = [r.get(key) for r in rows if r.get(key) is not None]
    return key in NUMERIC_COLUMNS or (bool(vals) and all(_is_number(v) for v in vals))


def _number(expr: str, key: str, val: Any) -> float:
    """A numeric column's filter value as a number: text would be compared as text (every
    number against 'abc') and NaN compares false with everything, so either would show rows
    as if they passed a test they were never put to."""
    try:
        x = float(val) if not isinstance(val, bool) else math.nan
    except (TypeError, ValueError):
        x = None
    if x is None or math.isnan(x):
        raise ConfigError(f"filter={expr!r} is invalid: {key} holds numbers, so VALUE must be a "
                          f"number (not {val!r})")
    return x


def _cmp(a: Any, op: str, b: Any) -> bool:
    if a is None:
        return op == "!=" and b is not None
    try:
        if isinstance(b, (int, float)) and not isinstance(a, (list, dict)):
            a = float(a)
        elif isinstance(b, str):
            a = str(a)
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                ">=": a >= b}[op]
    except (TypeError, ValueError):
        return False


def select(rows: list[dict[str, Any]], filters: list[str] | None = None,
           sort: str | None = None, descending: bool = False,
           limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of ``flat_rows`` that pass every filter, sorted (missing values last), limited."""
    if descending and not sort:
        raise ConfigError("--desc is invalid without --sort: it reverses the order of the "
                          "column --sort names (e.g. --sort reward --desc)")
    known = set().union(*(r.keys() for r in rows)) if rows else set()
    for f in filters or []:
        key, op, val = parse_filter(f)
        if rows and key not in known:
            raise ConfigError(f"filter={f!r} is invalid: no column {key!r}; columns include "
                              f"{', '.join(sorted(k for k in known if k != 'point'))}")
        if _numeric(rows, key):
            val = _number(f, key, val)
        rows = [r for r in rows if _cmp(r.get(key), op, val)]
    if sort:
        if rows and sort not in known:
            raise ConfigError(f"sort={sort!r} is invalid: no column {sort!r}")
        present = [r for r in rows if r.get(sort) is not None]
        missing = [r for r in rows if r.get(sort) is None]
        try:
            present.sort(key=lambda r: r[sort], reverse=descending)
        except TypeError:
            present.sort(key=lambda r: str(r[sort]), reverse=descending)
        rows = present + missing
    if limit is not None:
        if limit < 0:
            raise ConfigError(f"limit={limit} is invalid: an integer >= 0")
        rows = rows[:limit]
    return rows


TABLE_COLUMNS = ("status", "degenerate", "reward", "utilization", "latency_ratio",
                 "loss_rate", "best_reward", "train_reward", "iterations", "attempts", "train_s",
                 "compile_s", "reason")


def csv_columns(rows: list[dict[str, Any]]) -> list[str]:
    axes = varying_keys(rows)
    return (["id", "idx", "group_id"] + axes + [c for c in TABLE_COLUMNS]
            + ["best_iteration", "iter_99", "train_99_s", "eval_s", "batch", "batch_size",
               "started", "ended"])


def write_csv(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    cols = csv_columns(rows)
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in cols])
    os.replace(tmp, p)


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return v
