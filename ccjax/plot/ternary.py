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
    cols = 2 if n == 4 else min(n, 3)
    rows = -(-n // cols)
    with plt.rc_context({**STYLE, "axes.grid": False}):
        # laid out by hand: mpltern's corner-label placement makes constrained layout and
        # tight cropping take tens of seconds
        w, h = 3.6 * cols + 1.2, 3.9 * rows + 0.5
        fig = plt.figure(figsize=(w, h))
        fig.subplots_adjust(left=0.9 / w, right=1 - 2.0 / w, bottom=0.75 / h, top=1 - 1.25 / h,
                            wspace=0.45, hspace=0.75)
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
            ax.set_title(f"{name}: mean reward {float(v.mean()):.3f}", pad=24)
            panels.append({"trial": t, "label": name, "reward": v.tolist()})
        cax = fig.add_axes((1 - 1.15 / w, 0.75 / h + 0.1 * (1 - 2.0 / h), 0.18 / w,
                            0.8 * (1 - 2.0 / h)))
        cb = fig.colorbar(mappable, cax=cax)
        cb.set_label("reward w$^T$O (mean over links)")
        sp = pe.spec
        fig.suptitle(f"{sp['preferences']} preferences x {sp['links']} {sp['scenario']} links"
                     + (f"; {note}" if note else ""), fontsize=10, y=1 - 0.2 / h)
        save(fig, out, tight=False)
    return {"panels": panels, "range": (lo, hi)}
