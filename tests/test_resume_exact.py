"""A training run killed anywhere (``kill -9``) and resumed is the run that never stopped: for
every registered agent (``algos/*.toml``; a new one joins without editing this file), a run
killed while compiling, between checkpoints and while a checkpoint is being written, resumed
after each, writes the same metrics and evaluations and exports the same policy, bit for bit,
as one run straight through; and that policy runs as a controller in JAX, in ``ccjax eval``
and in the NumPy deployment with the agent's actions."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ccjax.algos import list_algos, load_algo
from tests.test_agents_contract import check_export_runs_everywhere, small

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
#: columns that time the run (wall clock), the only ones a resumed run may change
TIMING = {"wall_s"}


def config(preset: str):
    """The contract test's small preset, six iterations: checkpoints every second iteration
    and an evaluation every second, so a kill at iteration 3 falls between checkpoints and the
    best model is chosen more than once."""
    return small(preset, **{"train.iters": 6, "train.eval_every": 2,
                            "train.checkpoint_every": 2})


def _run(preset: str, out: Path, point: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.resume_worker", preset, str(out), point],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _table(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(fh)]


@pytest.mark.parametrize("preset", list_algos())
def test_a_run_killed_anywhere_resumes_bit_for_bit(preset, tmp_path):
    load_algo(preset)  # a preset that does not load fails here, not in a subprocess
    ref, run = tmp_path / "ref", tmp_path / "run"
    r = _run(preset, ref, "none")
    assert r.returncode == 0, r.stderr[-3000:]
    logs = []
    for point in ("compile", "rows:3", "write:4", "none"):
        r = _run(preset, run, point)
        logs.append(r.stderr)
        if point == "none":
            assert r.returncode == 0, r.stderr[-3000:]
        else:
            assert r.returncode == -9, (point, r.returncode, r.stderr[-3000:])
    # what each resume found, said
    assert "no checkpoint was written before it stopped; starting at iteration 0" in logs[1]
    assert "resuming" in logs[2] and "at iteration 2" in logs[2] and "bit for bit" in logs[2]
    assert "bit for bit" in logs[3]
    for name in ("metrics.csv", "eval.csv"):
        assert _table(run / name) == _table(ref / name), name
    a, b = (json.loads((d / "summary.json").read_text()) for d in (ref, run))
    for k in ("iterations", "done", "evals", "best_eval", "best_iteration", "valid_env_steps"):
        assert a[k] == b[k], k
    untimed = lambda rows: [{k: v for k, v in r.items() if k not in TIMING} for r in rows]  # noqa: E731
    assert untimed(a["final_eval"]) == untimed(b["final_eval"])
    assert all(isinstance(r["reward"], float) for r in a["final_eval"])  # numbers, not strings
    assert a["done"] and a["iterations"] == 6
    pa, pb = (np.load(d / "policy" / "policy.npz") for d in (ref, run))
    assert sorted(pa.files) == sorted(pb.files)
    for k in pa.files:
        np.testing.assert_array_equal(pa[k], pb[k], err_msg=k)
    ja, jb = (json.loads((d / "policy" / "policy.json").read_text()) for d in (ref, run))
    assert ja == jb
    # the rest of the agent contract on the same run: its export runs everywhere
    check_export_runs_everywhere(preset, config(preset), ref, tmp_path)
