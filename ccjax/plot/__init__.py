"""Figures (matplotlib; PNG, PDF or SVG by the output file's suffix).

* ``run``: one simulation run (``ccjax simulate --plot``);
* ``validation``: one scenario in ns-3 and in ccjax over time (``ccjax validate --plot``);
* ``pareto``, ``ternary``, ``cdf``, ``curves``: a sweep's results (``ccjax plot ...``), read
  through ``sweepdata``.
"""

from __future__ import annotations

from ccjax.plot.common import FORMATS, check_plot_path
from ccjax.plot.run import plot_run

__all__ = ["FORMATS", "check_plot_path", "plot_run"]
