"""The Pareto-front figure of a sweep's preference evaluation (``ccjax plot pareto``).

Each shown trial is one series: a point per evaluated preference (its utilization or
throughput and latency ratio or p95 delay, means over the evaluation's links), the Pareto front
of those points as a staircase, and the series' hypervolume in the legend. Classic controllers
are labelled points (means over the same links; a classic controller sends the same whatever
the preference). The hypervolume (``ccjax.pareto.hypervolume_2d``) is taken against one
reference point for every series: x = 0 (no utilization or throughput) and y = 1.1 x the worst
per-preference y of every trial and controller in the sweep's evaluation (latency ratio and
delay are positive, so that is strictly worse than every point), so a trial's value does not
depend on which others are drawn and its worst point still counts. The points are the trial's
results at the evaluation's random preferences (``ccjax.sweep.prefeval``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ccjax.errors import ConfigError
from ccjax.pareto import hypervolume_2d, pareto_front
from ccjax.plot.common import STYLE, check_plot_path, legend_texts, pyplot, save
from ccjax.plot.sweepdata import label, load_prefeval, load_trials, select

#: --x and --y choices: (column, axis label, larger is better)
X_AXES = {"utilization": ("utilization", "utilization (delivered / capacity)", True),
          "throughput": ("throughput_mbps", "throughput (Mbps)", True)}
Y_AXES = {"latency_ratio": ("latency_ratio", "latency ratio (mean RTT / base RTT)", False),
          "p95_delay": ("p95_delay_ms", "p95 one-way delay (ms)", False)}
#: the reference's y is this much worse than the worst y seen, so that every point, the worst
#: included, adds area (at exactly the worst y a series' worst front point would add none)
REF_MARGIN = 1.1
#: trials drawn without --trial: all of them up to this many, else the best
MAX_SERIES = 6


def plot_pareto(sweep_dir: str | Path, out: str | Path, x: str = "utilization",
                y: str = "latency_ratio", trials: list[str] | None = None) -> dict:
    """Draw the figure into ``out``; returns what it shows (series with their points, fronts
    and hypervolumes, the classic points, the reference point)."""
    if x not in X_AXES:
        raise ConfigError(f"x={x!r} is invalid: one of {', '.join(X_AXES)}")
    if y not in Y_AXES:
        raise ConfigError(f"y={y!r} is invalid: one of {', '.join(Y_AXES)}")
    check_plot_path(out)
    st = load_trials(sweep_dir)
    pe = load_prefeval(sweep_dir)
    xc, xl, _ = X_AXES[x]
    yc, yl, _ = Y_AXES[y]
    pts = {t: np.stack([pe.per_pref(c, xc, t), pe.per_pref(c, yc, t)], 1)
           for t, c in pe.trials.items()}
    score = {t: float(np.nanmean(c["reward"])) for t, c in pe.trials.items()}
    shown, note = select(st, list(pe.trials), trials, MAX_SERIES, score)
    for t in shown:
        bad = np.nonzero(~np.isfinite(pts[t]).all(1))[0]
        if bad.size:
            raise ConfigError(f"trial {t!r} has no finite {xc}/{yc} at preference(s) "
                              f"{bad[:5].tolist()} (its flow delivered nothing on every link "
                              "there): a point without a latency cannot be placed")
    # a controller's means over its (preference, link) rows, a link's NaN left out as above
    classic = {}
    for n, c in pe.classic.items():
        mx, my = (float(np.nanmean(c[k])) if np.isfinite(c[k]).any() else math.nan
                  for k in (xc, yc))
        if not (math.isfinite(mx) and math.isfinite(my)):
            raise ConfigError(f"controller {n!r} has no finite {xc}/{yc} in the preference "
                              "evaluation (its flow delivered nothing on every link)")
        classic[n] = (mx, my)
    worst = max([float(np.nanmax(p[:, 1])) for p in pts.values() if np.isfinite(p[:, 1]).any()]
                + [v[1] for v in classic.values()])
    ref = (0.0, REF_MARGIN * worst)

    plt = pyplot()
    series = []
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 4.0))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, t in enumerate(shown):
            c = colors[i % len(colors)]
            p = pts[t]
            front = pareto_front(p)
            hv = hypervolume_2d(p, ref)
            name = label(st, t, shown) if len(shown) > 1 else t
            ax.scatter(p[:, 0], p[:, 1], s=12, color=c, alpha=0.45, lw=0)
            # the staircase a front dominates: between two front points the best latency
            # available at x is the next point's (where="pre")
            ax.step(front[:, 0], front[:, 1], where="pre", color=c, lw=1.6,
                    label=f"{name}: hypervolume {hv:.3g}")
            ax.scatter(front[:, 0], front[:, 1], s=22, color=c, edgecolor="k", lw=0.5,
                       zorder=3)
            series.append({"trial": t, "label": name, "points": p.tolist(),
                           "front": front.tolist(), "hypervolume": hv})
        for (cx, cy), names in _merged(classic).items():
            ax.scatter([cx], [cy], marker="s", s=30, color="0.25", zorder=4)
            ax.annotate(", ".join(names), (cx, cy), xytext=(5, 4), textcoords="offset points",
                        fontsize=8, color="0.15")
        ax.scatter([ref[0]], [ref[1]], marker="x", s=30, color="0.5", zorder=4,
                   label=f"hypervolume reference ({ref[0]:g}, {ref[1]:.3g})")
        ax.margins(x=0.12, y=0.08)  # room for the controllers' names inside the axes
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        sp = pe.spec
        title = (f"{sp['preferences']} preferences x {sp['links']} {sp['scenario']} links, "
                 f"{sp['model']} model" + (f"; {note}" if note else ""))
        ax.set_title(title)
        # the legend outside the axes, so it never covers a point
        leg = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  title="Pareto front", alignment="left")
        legend = legend_texts(leg)
        save(fig, out)
    return {"legend": legend, "series": series, "classic": classic, "reference": ref,
            "x": xc, "y": yc}


def _merged(points: dict[str, tuple[float, float]], tol: float = 0.015
            ) -> dict[tuple[float, float], list[str]]:
    """Controllers whose points lie within ``tol`` of the axes' spans of each other share one
    marker and one label ("cubic, vegas"), so names never print over each other."""
    if not points:
        return {}
    xs = [p[0] for p in points.values()]
    ys = [p[1] for p in points.values()]
    sx = max(max(xs) - min(xs), 1e-12)
    sy = max(max(ys) - min(ys), 1e-12)
    out: dict[tuple[float, float], list[str]] = {}
    for n, (x, y) in points.items():
        for (ox, oy), names in out.items():
            if abs(x - ox) <= tol * sx and abs(y - oy) <= tol * sy:
                names.append(n)
                break
        else:
            out[(x, y)] = [n]
    return out
