"""The preference simplex as a ternary map coloured by the reward a trial achieved there
(``ccjax plot ternary``; mpltern).

Each evaluated preference w = (w_thr, w_lat, w_loss) is a point of the triangle, coloured by the
trial's reward w^T O at w (MOCC Eq. 2), the mean over the evaluation's links; with enough points
the colour is interpolated between them (Gouraud shading over their Delaunay triangulation). One
panel per shown trial, on one colour scale, so panels compare directly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ccjax.errors import ConfigError
from ccjax.plot.common import STYLE, check_plot_path, pyplot, save
from ccjax.plot.sweepdata import label, load_prefeval, load_trials, select

MAX_PANELS = 6
#: preferences needed before the map is interpolated between points (fewer: points only)
MIN_INTERPOLATED = 10


def plot_ternary(sweep_dir: str | Path, out: str | Path,
                 trials: list[str] | None = None) -> dict:
    """Draw the figure into ``out``; returns the panels (trial, label, mean reward per
    preference) and the colour range."""
    check_plot_path(out)
    try:
        import mpltern  # noqa: F401 - registers the "ternary" projection
    except ImportError:  # pragma: no cover - a base dependency
        raise ConfigError("plot ternary needs mpltern: pip install mpltern") from None
    st = load_trials(sweep_dir)
    pe = load_prefeval(sweep_dir)
    score = {t: float(np.mean(c["reward"])) for t, c in pe.trials.items()}
    shown, note = select(st, list(pe.trials), trials, MAX_PANELS, score)
    W = np.asarray(pe.spec["preference_values"], np.float64)
    values = {t: pe.per_pref(pe.trials[t], "reward") for t in shown}
    lo = min(float(v.min()) for v in values.values())
    hi = max(float(v.max()) for v in values.values())
    if hi - lo < 1e-9:
        lo, hi = lo - 0.005, hi + 0.005

    plt = pyplot()
    panels = []
    n = len(shown)
    cols = min(n, 3)
    rows = -(-n // cols)
    with plt.rc_context({**STYLE, "axes.grid": False}):
        fig = plt.figure(figsize=(3.4 * cols + 0.9, 3.3 * rows), layout="constrained")
        mappable = None
        for i, t in enumerate(shown):
            ax = fig.add_subplot(rows, cols, i + 1, projection="ternary")
            v = values[t]
            if len(W) >= MIN_INTERPOLATED:
                mappable = ax.tripcolor(W[:, 0], W[:, 1], W[:, 2], v, shading="gouraud",
                                        cmap="viridis", vmin=lo, vmax=hi, rasterized=True)
            sc = ax.scatter(W[:, 0], W[:, 1], W[:, 2], c=v, cmap="viridis", vmin=lo, vmax=hi,
                            s=14, edgecolors="k", linewidths=0.3, zorder=3)
            mappable = mappable or sc
            ax.set_tlabel("w_thr")
            ax.set_llabel("w_lat")
            ax.set_rlabel("w_loss")
            ax.grid(alpha=0.3)
            name = label(st, t, shown) if n > 1 else t
            ax.set_title(f"{name}\nmean reward {float(v.mean()):.3f}", pad=18)
            panels.append({"trial": t, "label": name, "reward": v.tolist()})
        cb = fig.colorbar(mappable, ax=fig.axes, shrink=0.8, pad=0.04)
        cb.set_label("reward w$^T$O (mean over links)")
        sp = pe.spec
        fig.suptitle(f"{sp['preferences']} preferences x {sp['links']} {sp['scenario']} links"
                     + (f"; {note}" if note else ""), fontsize=10)
        save(fig, out)
    return {"panels": panels, "range": (lo, hi)}
