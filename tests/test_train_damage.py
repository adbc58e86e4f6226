"""A training run's folder damaged between sessions: a newest checkpoint cut short or emptied
falls back to the intact one before it (and says so), and the resumed run is still the run
that never stopped; lost checkpoints or lost metric rows are refused, never papered over; and
``--restart`` starts a run over on purpose."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from ccjax.cli import main
from ccjax.errors import ConfigError
from ccjax.train import train
from tests.test_agents_contract import small, small_overrides

pytestmark = pytest.mark.slow
#: six iterations, checkpointed every second: a run stopped at 4 keeps checkpoints 2 and 4
EXTRA = {"train.iters": 6, "train.eval_every": 2, "train.checkpoint_every": 2}


def _cfg():
    return small("ppo-mocc", **EXTRA)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(fh)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """(a run straight through, the same run stopped at iteration 4): each test damages a
    copy of the stopped one."""
    d = tmp_path_factory.mktemp("runs")
    train(_cfg(), d / "ref", progress=False)
    train(_cfg(), d / "stopped", progress=False, max_iters=4)
    return d / "ref", d / "stopped"


def _copy(runs: tuple[Path, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(runs[1], tmp_path / "run"))


def _step_files(out: Path, step: int, name: str) -> list[Path]:
    return sorted(p for p in (out / "checkpoints" / str(step)).rglob(name) if p.is_file())


@pytest.mark.parametrize("damage", ["array-cut", "metadata-emptied", "array-cut-no-digest"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(damage, runs, tmp_path):
    out = _copy(runs, tmp_path)
    if damage.startswith("array-cut"):
        # the largest file of the step's arrays, cut to half
        f = max((p for p in (out / "checkpoints" / "4" / "state").rglob("*") if p.is_file()),
                key=lambda p: p.stat().st_size)
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    else:
        for f in _step_files(out, 4, "_METADATA") + _step_files(out, 4, "_CHECKPOINT_METADATA"):
            f.write_text("")
    if damage.endswith("no-digest"):  # orbax's own read finds it
        (out / "checkpoints" / "digests.json").unlink()
    said: list[str] = []
    train(_cfg(), out, resume=True, progress=False, log=said.append)
    text = "\n".join(said)
    assert "checkpoint at iteration 4 is damaged" in text, text
    assert "resuming" in text and "at iteration 2, the newest intact of 2" in text, text
    # iterations 3 and 4 redone: the same run as the one that never stopped
    assert _rows(out / "metrics.csv") == _rows(runs[0] / "metrics.csv")
    assert _rows(out / "eval.csv") == _rows(runs[0] / "eval.csv")


def test_lost_checkpoints_are_refused_unless_the_run_is_restarted(runs, tmp_path):
    out = _copy(runs, tmp_path)
    shutil.rmtree(out / "checkpoints")
    with pytest.raises(ConfigError, match="every checkpoint is missing.*--restart"):
        train(_cfg(), out, resume=True, progress=False)
    said: list[str] = []
    train(_cfg(), out, restart=True, progress=False, log=said.append)
    assert "restarting" in said[0] and "metrics.csv" in said[0]
    assert _rows(out / "metrics.csv") == _rows(runs[0] / "metrics.csv")
    with pytest.raises(ConfigError, match="--resume and --restart cannot be combined"):
        train(_cfg(), out, resume=True, restart=True, progress=False)


def test_every_checkpoint_damaged_is_refused(runs, tmp_path):
    out = _copy(runs, tmp_path)
    for step in (2, 4):
        for f in _step_files(out, step, "_CHECKPOINT_METADATA"):
            f.write_text("")
    with pytest.raises(ConfigError, match="every checkpoint is damaged"):
        train(_cfg(), out, resume=True, progress=False)


@pytest.mark.parametrize("how", ["cut", "deleted"])
def test_lost_metric_rows_are_refused(how, runs, tmp_path):
    out = _copy(runs, tmp_path)
    m = out / "metrics.csv"
    if how == "cut":
        m.write_text("".join(m.read_text().splitlines(keepends=True)[:3]))  # header + 2 rows
    else:
        m.unlink()
    with pytest.raises(ConfigError, match="metrics.csv .*rows before (it|the checkpoint) were "
                                          "lost"):
        train(_cfg(), out, resume=True, progress=False)


def test_the_cli_refuses_lost_checkpoints_with_exit_2_before_building(runs, tmp_path, capsys,
                                                                     monkeypatch):
    import ccjax.train as T

    out = _copy(runs, tmp_path)
    shutil.rmtree(out / "checkpoints")
    monkeypatch.setattr(T, "build", lambda *a: pytest.fail("built before refusing"))
    args = ["train", "--algo", "ppo-mocc", "--out", str(out), "--quiet", "--resume"]
    for k, v in small_overrides("ppo-mocc", **EXTRA).items():
        args += ["--set", f"{k}={v}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--restart" in err, err
