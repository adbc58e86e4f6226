"""Figures of a simulation run (matplotlib, PNG or PDF by the file's suffix)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ccjax.plot.common import check_plot_path


def _floats(values: list[float | None]) -> np.ndarray:
    """A summary's series with its nulls (nothing to report there) as NaN, which plots as a gap."""
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _windows(fl: dict) -> np.ndarray | None:
    """A flow's window series (packets, NaN where it has none), or None if it never has one
    (a rate sender) or the summary predates the series."""
    w = fl.get("cwnd_series_pkts")
    if not w:
        return None
    a = _floats(w)
    return a if np.isfinite(a).any() else None


def plot_run(summary: dict, path: str | Path, title: str = "") -> Path:
    """Per-flow throughput, RTT and congestion window (where some flow has one: window senders
    and BBR; rate senders have none) and the bottleneck queue over time, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = check_plot_path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    dt = summary["sim"]["series_interval_s"]
    windows = [_windows(fl) for fl in summary["flows"]]
    has_w = any(w is not None for w in windows)
    rows = 4 if has_w else 3
    fig, axes = plt.subplots(rows, 1, figsize=(7, 2.3 * rows + 0.1), sharex=True,
                             constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, fl in enumerate(summary["flows"]):
        c = colors[i % len(colors)]
        thr = np.asarray(fl["throughput_series_mbps"])
        t = (np.arange(len(thr)) + 1) * dt
        label = f"flow {i} ({fl.get('cc', 'const')}, {fl['base_rtt_ms']:g} ms)"
        axes[0].plot(t, thr, label=label, lw=1.2, color=c)
        axes[1].plot(t, _floats(fl["rtt_series_ms"]), lw=1.2, color=c)
        if windows[i] is not None:
            axes[2].plot(t, windows[i], lw=1.2, color=c)
    q = np.asarray(summary["link"]["queue_series_pkts"])
    axes[-1].plot((np.arange(len(q)) + 1) * dt, q, color="k", lw=1.2)
    axes[0].axhline(summary["link"]["capacity_mbps"], color="gray", ls="--", lw=0.8,
                    label="mean capacity")
    axes[0].set_ylabel("throughput (Mbps)")
    axes[1].set_ylabel("RTT (ms)")
    if has_w:
        axes[2].set_ylabel("window (packets)")
        axes[2].set_ylim(bottom=0)
    axes[-1].set_ylabel("queue (packets)")
    axes[-1].set_xlabel("time (s)")
    axes[0].legend(fontsize=8, loc="best")
    for ax in axes:
        ax.grid(alpha=0.3)
    if title:
        axes[0].set_title(title)
    fig.savefig(p, dpi=150)
    plt.close(fig)
    return p
