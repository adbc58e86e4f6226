"""The notebooks (notebooks/*.ipynb) run top to bottom in quick mode, and are committed clean.

Each notebook is executed with nbclient in a fresh kernel (kernel name ``python3``: with
ipykernel installed in the test's interpreter, jupyter_client starts that interpreter, which a
last cell checks), with ``CCJAX_QUICK=1`` and a temporary working directory, so nothing is
written into the repository. The kernel shares the test session's XLA compilation cache
(tests/conftest.py), so programs another notebook or test compiled with the same shapes are
not compiled again."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: seconds a cell may run: quick mode takes 1-2 minutes per notebook on a 2-core CPU, with its
#: longest cell under a minute; generous for a loaded CI machine
CELL_TIMEOUT_S = 900
#: the cell appended to the executed copy: which interpreter the kernel runs
WHO = "import sys; print(sys.prefix); print(sys.executable)"


def test_the_three_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01-quickstart.ipynb", "02-mocc.ipynb",
                                           "03-sweeps.ipynb", "04-auto.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "a notebook without code"
    for i, c in enumerate(code):
        assert c.get("outputs") == [], f"{path.name}: code cell {i} has outputs"
        assert c.get("execution_count") is None, f"{path.name}: code cell {i} was executed"
    # the opening: a title, then the Colab install cell, then the QUICK switch
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown" and "".join(first["source"]).startswith("# ")
    install = "".join(nb["cells"][1]["source"])
    assert 'if "google.colab" in sys.modules:' in install and "SOURCE = " in install
    assert "%pip install" in install and "[cuda]" not in install
    text = "".join("".join(c["source"]) for c in code)
    assert 'os.environ.get("CCJAX_QUICK"' in text
    assert path.stat().st_size < 64_000, "keep the committed notebooks small"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_quick_mode(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("CCJAX_QUICK", "1")
    cache = os.environ.get("CCJAX_TEST_XLA_CACHE")
    if cache:
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", cache)
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    before = sorted(p.name for p in path.parent.iterdir())
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(WHO))
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            startup_timeout=120, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on an error
    for c in nb.cells:
        if c.cell_type == "code":
            errors = [o for o in c.outputs if o.output_type == "error"]
            assert not errors, (c.source, errors)
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    prefix, executable = out.split()
    assert Path(prefix).resolve() == Path(sys.prefix).resolve(), out
    assert Path(executable).resolve() == Path(sys.executable).resolve(), out
    # nothing was written next to the notebooks (the kernel ran in tmp_path)
    assert sorted(p.name for p in path.parent.iterdir()) == before
