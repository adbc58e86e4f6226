"""Sweeps as single vectorized programs, with a resumable result store (``ccjax sweep``,
``ccjax results``).

* ``spec``: a sweep specification (``sweeps/*.toml``): an algorithm preset, base overrides, a
  grid and/or random samples over ``table.key`` values and seeds; validated and expanded into
  trials with deterministic ids, grouped by their static configuration.
* ``batch``: the trials of a group as one compiled program: learner states stacked on a trial
  axis and ``vmap``ped, every trial's environments stepped as one batch; batch size from the
  device's memory.
* ``schedule``: what a trial's environments train on per iteration (a fixed preference, MOCC's
  landmarks all at once or in two phases, or AUTO's one preference per episode) and the
  preferences it is evaluated at.
* ``ledger``: the sweep directory: SQLite ledger, Parquet curves, orbax checkpoints; the resume
  guarantee.
* ``runner``: ``run_sweep``, the loop over groups and batches, divergence detection and
  isolation, progress; ``run_batch``, one batch trained without touching the store.
* ``record``: a trial's outcome (curve, metrics, model files as bytes) and ``record``, the one
  way the driver writes it into the sweep directory, whichever backend trained it.
* ``ray_backend``: ``backend="ray"``, the batches on Ray workers (``pip install
  'ccjax[ray]'``; nothing imports Ray otherwise).
* ``prefeval``: the finished trials' policies on N uniform preferences x M scenario links, and
  classic controllers on the same links (MOCC Fig. 6; ``ccjax prefeval``, ``[prefeval]``).

From Python::

    from ccjax.sweep import load_spec, run_sweep, results
    spec = load_spec("ppo-mocc-hparams")          # or a path; ConfigError if anything is wrong
    summary = run_sweep(spec, "runs/sweeps/hp")   # resume=True continues a killed sweep
    run_sweep(spec, "runs/sweeps/hp2", backend="ray", ray_address="auto")  # on a Ray cluster
    rows = results("runs/sweeps/hp", filters=["status=done"], sort="reward", descending=True)
"""

from __future__ import annotations

import os
from typing import Any

from ccjax.sweep.ledger import Ledger, flat_rows, read_curve, select
from ccjax.sweep.runner import load_trial, run_sweep
from ccjax.sweep.spec import SweepSpec, Trial, list_sweeps, load_spec, spec_from_dict

__all__ = ["Ledger", "SweepSpec", "Trial", "list_sweeps", "load_spec", "load_trial",
           "read_curve", "results", "run_sweep", "spec_from_dict"]


def results(sweep_dir: str | os.PathLike[str], filters: list[str] | None = None,
            sort: str | None = None, descending: bool = False,
            limit: int | None = None) -> list[dict[str, Any]]:
    """The ledger's trials as flat dicts (config keys spread out as ``table.key`` columns),
    filtered (``"status=done"``, ``"hyper.lr<1e-3"``), sorted and limited."""
    led = Ledger.existing(sweep_dir)
    try:
        rows = flat_rows(led.rows())
    finally:
        led.close()
    return select(rows, filters, sort, descending, limit)
