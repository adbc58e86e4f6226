"""Reward CDFs per method (``ccjax plot cdf``; MOCC Fig. 6 and 16).

One line per setting of the sweep (trials that differ only in seed pooled; ``--by AXIS`` pools
everything but that axis, ``--by trial`` none) and one per classic controller: the empirical
CDF of the reward w^T O over every (preference, link) case of the preference evaluation (MOCC
Fig. 6: "100 objectives x 10 networks", each case one sample). A classic controller's cases are
its runs on the same links, scored with the same preferences.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ccjax.plot.common import STYLE, check_plot_path, legend_texts, pyplot, save
from ccjax.plot.sweepdata import check_by, groups, load_prefeval, load_trials, pooled


def ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, fraction of values <= each): the steps of the empirical CDF."""
    v = np.sort(np.asarray(values, np.float64))
    return v, np.arange(1, len(v) + 1) / len(v)


def plot_cdf(sweep_dir: str | Path, out: str | Path, by: str | None = None) -> dict:
    """Draw the figure into ``out``; returns the lines (label, kind, trials, number of cases,
    median and 10th percentile reward)."""
    check_plot_path(out)
    st = load_trials(sweep_dir)
    check_by(st, by)
    pe = load_prefeval(sweep_dir)
    ids = [t for t in st.ids if t in pe.trials]
    lines = []
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 3.8))
        for name, members in groups(st, ids, by):
            r = np.concatenate([pe.trials[t]["reward"] for t in members])
            x, y = ecdf(r)
            text = pooled(name, members, "seed" if by is None else "trial")
            ax.step(x, y, where="post", lw=1.6, label=text)
            lines.append({"label": text, "kind": "trial", "trials": members, "n": len(r),
                          "median": float(np.median(r)), "p10": float(np.percentile(r, 10))})
        for j, (n, c) in enumerate(pe.classic.items()):
            x, y = ecdf(c["reward"])
            ax.step(x, y, where="post", lw=1.2, ls=(0, (4, 1.5)) if j % 2 else (0, (1.5, 1)),
                    color=str(0.15 + 0.5 * j / max(len(pe.classic), 1)), label=n)
            lines.append({"label": n, "kind": "classic", "trials": [], "n": len(c["reward"]),
                          "median": float(np.median(c["reward"])),
                          "p10": float(np.percentile(c["reward"], 10))})
        sp = pe.spec
        ax.set_xlabel("reward w$^T$O (MOCC Eq. 2)")
        ax.set_ylabel("CDF over preference x link cases")
        ax.set_ylim(0, 1.0)
        ax.set_title(f"{sp['preferences']} preferences x {sp['links']} {sp['scenario']} links, "
                     f"{sp['model']} model")
        leg = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        legend = legend_texts(leg)
        save(fig, out)
    return {"legend": legend, "lines": lines}
