"""A sweep's result store under damage: a record is in ``ledger.sqlite`` itself once written,
so a lost or cut ``-wal`` after a ``kill -9`` reruns nothing finished; ledger rows lost while a
trial's files are there are restored from ``outcomes/<id>.json`` or refused, never trained over;
reading commands open the ledger read-only and leave an empty or foreign file as it was; a
trial whose policy collapsed is flagged degenerate and left out of the preference evaluation.

One real sweep (two trials, one per batch: lr 1e4, which collapses, then lr 1e-3) is SIGKILLed
when its second batch starts; each test damages a copy of what it left."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ccjax.cli import main
from ccjax.errors import ConfigError
from ccjax.sweep import Ledger, results, run_sweep
from ccjax.sweep.prefeval import evaluable
from ccjax.sweep.record import OUTCOME_DIR
from ccjax.sweep.runner import degenerate
from tests.test_sweep import _spec, _write_spec, old_ledger, sweep_killed_at_second_batch

WAL, SHM = "ledger.sqlite-wal", "ledger.sqlite-shm"


class _Stopped(Exception):
    pass


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    led = Ledger.existing(out)
    try:
        return {r["id"]: r for r in led.rows()}
    finally:
        led.close()


def _resume_until_training(spec_path: Path, out: Path, log: list[str] | None = None
                           ) -> list[list[str]]:
    """Resume ``out`` and stop as soon as a batch is marked running: what the resume would
    train, without training it. Returns the batches started (at most one)."""
    started: list[list[str]] = []

    def stop(event: str, ids: list[str]) -> None:
        if event == "start":
            started.append(ids)
            raise _Stopped

    with pytest.raises(_Stopped):
        run_sweep(spec_path, out, batch=1, resume=True, callback=stop,
                  log=None if log is None else log.append)
    return started


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("damage")
    spec_path = _write_spec(d / "tiny.toml", {"hyper.lr": [1e4, 1e-3]}, {"eval_every": 2})
    out = d / "out"
    sweep_killed_at_second_batch(spec_path, out, d, batch=1)
    rows = _rows(out)
    a, b = (r["id"] for r in sorted(rows.values(), key=lambda r: r["idx"]))
    return dict(spec_path=spec_path, out=out, rows=rows, a=a, b=b)


def _copy(killed: dict[str, Any], where: Path) -> Path:
    dst = where / "copy"
    shutil.copytree(killed["out"], dst)
    return dst


@pytest.fixture(scope="module")
def resumed(killed, tmp_path_factory) -> dict[str, Any]:
    """The killed sweep with its -wal (and -shm) deleted, resumed to the end."""
    out = _copy(killed, tmp_path_factory.mktemp("lost-wal"))
    for f in (WAL, SHM):
        (out / f).unlink(missing_ok=True)
    summary = run_sweep(killed["spec_path"], out, batch=1, resume=True)
    return dict(out=out, summary=summary, rows=_rows(out))


# -- the WAL -----------------------------------------------------------------------------------
def test_every_write_is_in_the_main_file_when_it_returns(tmp_path):
    spec = _spec({"seed": [0, 1]})
    led = Ledger(tmp_path)
    wal = tmp_path / WAL
    led.add(spec.trials)
    assert wal.stat().st_size == 0
    a, b = (t.id for t in spec.trials)
    led.start([a, b], "g/1", 2)
    assert wal.stat().st_size == 0
    led.finish(a, "done", metrics={"reward": 0.5, "iterations": 4})
    assert wal.stat().st_size == 0
    # the main file alone, as a copy without its -wal would have it
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "ledger.sqlite", alone / "ledger.sqlite")
    led.close()
    rows = _rows(alone)
    assert rows[a]["status"] == "done" and rows[a]["reward"] == 0.5
    assert rows[b]["status"] == "running"


def test_killed_sweep_left_everything_in_the_main_file(killed):
    k = killed
    assert k["rows"][k["a"]]["status"] == "done" and k["rows"][k["b"]]["status"] == "running"
    wal = k["out"] / WAL
    assert not wal.exists() or wal.stat().st_size == 0  # nothing only the -wal held


def test_lost_wal_after_kill_reruns_nothing_finished(killed, resumed):
    a, b = killed["a"], killed["b"]
    before, after = killed["rows"], resumed["rows"]
    assert after[a] == before[a]  # not rerun: the row, attempts, start and end times as they were
    assert after[a]["attempts"] == 1
    assert after[b]["status"] == "done" and after[b]["attempts"] == 2
    assert [bt["trials"] for bt in resumed["summary"]["batches"]] == [1]


def test_cut_wal_loses_no_record(killed, tmp_path):
    """The worst a cut -wal can do: take with it a record whose checkpoint had not happened
    (a reader held it off, or the kill came between commit and checkpoint). The trial's
    outcome file restores it; nothing finished is trained again."""
    a, b = killed["a"], killed["b"]
    live = _copy(killed, tmp_path / "live")
    row = dict(killed["rows"][a])
    db = sqlite3.connect(live / "ledger.sqlite")
    # the main file as it was before the trial's record ...
    with db:
        db.execute("UPDATE trials SET status = 'running', reason = NULL, metrics = NULL, "
                   "ended = NULL, degenerate = NULL WHERE id = ?", (a,))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # ... and the record committed to the -wal only, copied while the writer holds it there
    db.execute("PRAGMA wal_autocheckpoint = 0")
    with db:
        db.execute("UPDATE trials SET status = ?, reason = ?, metrics = ?, ended = ?, "
                   "degenerate = ? WHERE id = ?", (row["status"], row["reason"],
                                                   row["metrics"], row["ended"],
                                                   row["degenerate"], a))
    cut = tmp_path / "cut"
    shutil.copytree(live, cut)
    db.close()
    (cut / SHM).unlink()  # the live writer's index, not the copy's
    wal = cut / WAL
    size = wal.stat().st_size
    assert size > 0
    with open(wal, "r+b") as fh:
        fh.truncate(size // 2)
    assert _rows(cut)[a]["status"] == "running"  # the cut took the record with it
    log: list[str] = []
    assert _resume_until_training(killed["spec_path"], cut, log) == [[b]]
    assert _rows(cut)[a] == killed["rows"][a]
    assert any("1 finished trial(s) the ledger had lost restored" in m for m in log)


# -- rows lost, files there ---------------------------------------------------------------------
def test_lost_rows_are_restored_from_outcome_files(killed, tmp_path, capsys):
    """The state a lost -wal left before every write was checkpointed: a main file with nothing
    in it (here: empty), beside the trials' files."""
    a, b = killed["a"], killed["b"]
    out = _copy(killed, tmp_path)
    (out / "ledger.sqlite").write_bytes(b"")
    for f in (WAL, SHM):
        (out / f).unlink(missing_ok=True)
    # a reader says what the file is, and leaves it empty
    assert main(["results", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a sweep ledger (an empty file)" in err
    assert (out / "ledger.sqlite").stat().st_size == 0
    # without --resume the directory is refused, not started afresh over the files
    with pytest.raises(ConfigError, match="holds a sweep's files .* pass --resume"):
        run_sweep(killed["spec_path"], out, batch=1)
    log: list[str] = []
    assert _resume_until_training(killed["spec_path"], out, log) == [[b]]
    assert _rows(out)[a] == killed["rows"][a]  # the row as recorded, to the last column
    assert any("restored from their outcomes/<id>.json" in m for m in log)
    # a ledger deleted outright: --resume rebuilds it the same way
    gone = _copy(killed, tmp_path / "gone")
    for f in ("ledger.sqlite", WAL, SHM):
        (gone / f).unlink(missing_ok=True)
    assert _resume_until_training(killed["spec_path"], gone) == [[b]]
    assert _rows(gone)[a] == killed["rows"][a]


def test_finished_files_without_a_record_are_refused(killed, tmp_path):
    a = killed["a"]
    out = _copy(killed, tmp_path)
    (out / "ledger.sqlite").write_bytes(b"")
    for f in (WAL, SHM):
        (out / f).unlink(missing_ok=True)
    outcome = out / OUTCOME_DIR / f"{a}.json"
    kept = outcome.read_bytes()
    # a sweep recorded before outcome files: curve and policy, no record to restore
    outcome.unlink()
    with pytest.raises(ConfigError) as e:
        _resume_until_training(killed["spec_path"], out)
    msg = str(e.value)
    assert "\n" not in msg and f"curves/{a}.parquet" in msg and f"trials/{a}/policy" in msg
    assert "no record of it running" in msg and "delete" in msg
    # an outcome file whose policy is gone: refused, naming it
    outcome.write_bytes(kept)
    shutil.rmtree(out / "trials" / a / "policy")
    with pytest.raises(ConfigError) as e:
        _resume_until_training(killed["spec_path"], out)
    msg = str(e.value)
    assert "\n" not in msg and f"trials/{a}/policy/policy.json is missing" in msg
    assert {r["attempts"] for r in _rows(out).values()} == {0}  # nothing was started


# -- reading commands ---------------------------------------------------------------------------
def test_reading_commands_leave_an_empty_or_foreign_ledger_alone(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "ledger.sqlite").write_bytes(b"")
    for argv in (["results", str(empty)], ["prefeval", str(empty)],
                 ["plot", "curves", str(empty), "-o", str(tmp_path / "c.png")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a sweep ledger (an empty file)" in err, argv
    assert [p.name for p in empty.iterdir()] == ["ledger.sqlite"]
    assert (empty / "ledger.sqlite").stat().st_size == 0

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    db = sqlite3.connect(foreign / "ledger.sqlite")
    db.execute("CREATE TABLE other (x)")
    db.commit()
    db.close()
    digest = hashlib.sha256((foreign / "ledger.sqlite").read_bytes()).hexdigest()
    assert main(["results", str(foreign)]) == 2
    assert "a database without a trials table" in capsys.readouterr().err
    assert hashlib.sha256((foreign / "ledger.sqlite").read_bytes()).hexdigest() == digest

    none = tmp_path / "none"
    none.mkdir()
    assert main(["results", str(none)]) == 2
    assert "no ledger.sqlite there" in capsys.readouterr().err
    assert list(none.iterdir()) == []

    # a real ledger, closed: read without a -wal or -shm left beside it
    made = tmp_path / "made"
    made.mkdir()
    led = Ledger(made)
    led.add(_spec({"seed": [0]}).trials)
    led.close()
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(made / "ledger.sqlite", bare / "ledger.sqlite")
    assert main(["results", str(bare)]) == 0
    assert "1 pending" in capsys.readouterr().out
    assert [p.name for p in bare.iterdir()] == ["ledger.sqlite"]


def test_an_older_ledger_is_read_without_being_changed(tmp_path):
    db = old_ledger(tmp_path / "ledger.sqlite")
    db.execute("INSERT INTO trials (id, idx, group_id, point, config, status, reward) VALUES "
               "('t1', 0, 'g', '{\"seed\": 0}', '{\"seed\": 0}', 'done', 0.5)")
    db.commit()
    db.close()
    digest = hashlib.sha256((tmp_path / "ledger.sqlite").read_bytes()).hexdigest()
    (row,) = results(tmp_path)
    assert row["reward"] == 0.5 and row["degenerate"] is None and row["iter_99"] is None
    assert evaluable([row]) == ["t1"]  # no flag: evaluated as before
    assert hashlib.sha256((tmp_path / "ledger.sqlite").read_bytes()).hexdigest() == digest


# -- degenerate trials -------------------------------------------------------------------------
def test_degenerate_trial_is_flagged_shown_and_left_out(killed, resumed, capsys):
    a, b = killed["a"], killed["b"]
    rows = resumed["rows"]
    bad, good = rows[a], rows[b]  # lr 1e4 and lr 1e-3
    assert bad["status"] == "done" and bad["degenerate"] == 1
    assert bad["reason"].startswith("degenerate: the same action at every MI")
    assert good["status"] == "done" and good["degenerate"] == 0 and good["reason"] is None
    assert resumed["summary"]["degenerate"] == 1
    out = str(resumed["out"])
    assert [r["id"] for r in results(out, filters=["degenerate=1"])] == [a]
    assert main(["results", out]) == 0
    text = capsys.readouterr().out
    assert "2 done (1 degenerate)" in text and "done, degenerate" in text
    assert evaluable(list(rows.values())) == [b]  # the preference evaluation leaves it out
    assert evaluable(list(rows.values()), [a]) == []


def test_degenerate_criterion_spares_a_delay_preferring_policy():
    # a saturated network: one action everywhere, whatever the utilization
    assert degenerate("box", 0.0, 0.7, 0.9, 0.05).startswith("degenerate: the same action")
    # a collapse: 10 % of the link and a quarter of what the trial had reached
    why = degenerate("box", 0.05, 0.035, 0.41, 0.45)
    assert why.startswith("degenerate: utilization 0.035")
    # not flagged: a policy that still reacts and uses the link, at a delay-heavy preference
    assert degenerate("box", 0.06, 0.77, 0.8, 0.05) is None
    # low utilization where throughput is worth nothing (pure delay), or never higher
    assert degenerate("box", 0.05, 0.035, 0.41, 0.0) is None
    assert degenerate("box", 0.05, 0.035, 0.1, 0.45) is None
    # a discrete policy may pick one multiplier for a whole short evaluation
    assert degenerate("discrete", 0.0, 0.6, 0.7, 0.5) is None
    # no preference (a reward that always counts throughput) and no MI evaluated
    assert degenerate("box", 0.05, 0.02, 0.5, None) is not None
    assert degenerate("box", float("nan"), 0.5, 0.6, 0.3) is None


def test_a_cut_preference_evaluation_file_is_one_line(tmp_path):
    """``ccjax plot pareto`` (and ternary, cdf) read prefeval's Parquet files: one cut short is
    a one-line error naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ccjax.errors import ConfigError
    from ccjax.sweep.prefeval import prefeval_dir, read_results

    pdir = prefeval_dir(tmp_path)
    pdir.mkdir()
    (pdir / "spec.json").write_text("{}")
    f = pdir / "abc.parquet"
    pq.write_table(pa.table({"reward": [0.5, 0.6]}), f)
    f.write_bytes(f.read_bytes()[:20])
    try:
        read_results(tmp_path)
    except ConfigError as e:
        assert "abc.parquet" in str(e) and "\n" not in str(e)
    else:
        raise AssertionError("a cut file was read")
    (pdir / "spec.json").write_text('{"cut')
    with pytest.raises(ConfigError, match="spec.json.*not a readable"):
        read_results(tmp_path)
