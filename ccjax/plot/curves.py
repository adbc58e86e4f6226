"""Training curves per trial (``ccjax plot curves``), from a sweep's ``curves/<id>.parquet``
or a ``ccjax train`` run directory's ``metrics.csv`` / ``eval.csv``.

Trials that differ only in seed share a line (``--by AXIS``: all trials with the same value of
AXIS; ``--by trial``: one line per trial): the mean over its trials at each iteration, with a
band from their minimum to their maximum (with a handful of seeds a standard deviation says
little; the legend says which band is drawn). Evaluation metrics (``eval_*``) exist only at the
iterations where a trial was evaluated and are drawn there, with markers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ccjax.errors import ConfigError
from ccjax.plot.common import STYLE, check_plot_path, legend_texts, pyplot, save
from ccjax.plot.sweepdata import (
    check_by,
    groups,
    load_trials,
    pooled,
    read_curves,
    read_run,
)

LABELS = {"reward": "training reward (mean per MI, w$^T$O)",
          "eval_reward": "evaluation reward w$^T$O",
          "utilization": "training utilization", "eval_utilization": "evaluation utilization",
          "latency_ratio": "training latency ratio (RTT / base RTT)",
          "eval_latency_ratio": "evaluation latency ratio (RTT / base RTT)",
          "loss_rate": "training loss rate", "eval_loss_rate": "evaluation loss rate",
          "wall_s": "training wall time (s)", "episode_return": "episode return"}
_NOT_METRICS = ("iteration", "phase", "cycle", "label")


def _metrics(curves: dict[str, dict[str, np.ndarray]]) -> list[str]:
    keys: list[str] = []
    for c in curves.values():
        for k, v in c.items():
            if k not in _NOT_METRICS and v.dtype != object and k not in keys:
                keys.append(k)
    return keys


def _check_metric(metric: str, curves: dict[str, dict[str, np.ndarray]]) -> None:
    allowed = _metrics(curves)
    if metric not in allowed:
        raise ConfigError(f"metric={metric!r} is invalid: one of {', '.join(allowed)}")


def plot_curves(source: str | Path, out: str | Path, metric: str = "reward",
                by: str | None = None) -> dict:
    """Draw the figure into ``out`` from a sweep directory or a training run directory; returns
    the lines (label, trials, iterations, mean)."""
    check_plot_path(out)
    d = Path(source)
    if not d.is_dir():
        raise ConfigError(f"dir={str(d)!r} is invalid: no such directory (a sweep directory or "
                          "a `ccjax train` run directory)")
    if (d / "ledger.sqlite").is_file():
        st = load_trials(d)
        check_by(st, by)
        curves = read_curves(d, st.ids)
        if not curves:
            raise ConfigError(f"sweep_dir={str(d)!r} is invalid: no training curves in "
                              f"{str(d / 'curves')!r} yet")
        _check_metric(metric, curves)
        ids = [t for t in st.ids if t in curves]
        lines_in = [(pooled(n, m, "seed" if by is None else "trial"), m)
                    for n, m in groups(st, ids, by)]
        title = f"{d.name}: {len(ids)} trials"
    elif (d / "metrics.csv").is_file():
        if by is not None:
            raise ConfigError(f"by={by!r} is invalid for a training run directory: it holds "
                              "one run (--by is for sweeps)")
        curves = {d.name: read_run(d)}
        _check_metric(metric, curves)
        lines_in = [(d.name, [d.name])]
        title = f"training run {d.name}"
    else:
        raise ConfigError(f"dir={str(d)!r} is invalid: neither a sweep directory "
                          "(ledger.sqlite) nor a training run directory (metrics.csv)")

    sparse = metric.startswith("eval_")
    lines = []
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 3.8))
        banded = False
        for name, members in lines_in:
            its = sorted(set().union(*(curves[t]["iteration"][np.isfinite(curves[t][metric])]
                                       .tolist() for t in members)))
            if not its:
                continue
            vals = np.full((len(members), len(its)), np.nan)
            pos = {it: j for j, it in enumerate(its)}
            for i, t in enumerate(members):
                c = curves[t]
                for it, v in zip(c["iteration"], c[metric], strict=True):
                    if np.isfinite(v):
                        vals[i, pos[float(it)]] = v
            x = np.asarray(its)
            mean = np.nanmean(vals, 0)
            kw = {"marker": "o", "ms": 3} if sparse else {}
            (ln,) = ax.plot(x, mean, lw=1.5, label=name, **kw)
            if len(members) > 1:
                ax.fill_between(x, np.nanmin(vals, 0), np.nanmax(vals, 0), color=ln.get_color(),
                                alpha=0.2, lw=0)
                banded = True
            lines.append({"label": name, "trials": members, "iterations": x.tolist(),
                          "mean": mean.tolist()})
        if not lines:
            raise ConfigError(f"metric={metric!r} is invalid here: no trial has a value of it")
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("iteration")
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.set_title(title)
        leg = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  title="mean, band min–max" if banded else None,
                  alignment="left")
        legend = legend_texts(leg)
        save(fig, out)
    return {"legend": legend, "lines": lines, "metric": metric}
