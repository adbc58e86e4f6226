"""The figure of ``ccjax validate --plot``: one scenario in ns-3 and in ccjax, over time.

The validation compares 30-second means; where they disagree, the figure shows when the two
simulators part: each flow's throughput and all flows' together, each flow's congestion window
(where both report it), each flow's share of the bytes delivered so far, Jain's index of the
bytes delivered so far, and the bottleneck queue, all as seed means (ns-3's seeds solid,
ccjax's dashed). The window panel is where slow-start exits and reductions show: ns-3's window
is sampled at each interval's end, as ccjax's. The share panel ends at the shares of the
seed-mean throughputs, which the RTT-unfairness check and the printed ``shares`` read; seeds
that favour different flows even those out. The Jain panel is each run's own index, averaged
over the seeds (``RunSeries.jain``), so it ends where the Jain check reads (``Measured.jain``)
and shows a run's unfairness that the mean shares hide.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ccjax.plot.common import STYLE, pyplot, save

if TYPE_CHECKING:
    from ccjax.validation import Comparison


def running_shares(thr_mbps: np.ndarray, lengths_s: np.ndarray | None = None) -> np.ndarray:
    """Each flow's share of everything delivered from the start to the end of each interval,
    ``(flows, intervals)``, from per-interval rates weighted by the intervals' lengths
    (``None``: all equal); 0 before anything was delivered."""
    from ccjax.validation import delivered_so_far

    thr = np.asarray(thr_mbps, float)
    cum = delivered_so_far(thr, np.ones(thr.shape[1]) if lengths_s is None else lengths_s)
    tot = cum.sum(axis=0)
    return np.divide(cum, tot, out=np.zeros_like(cum), where=tot > 0)


def plot_validation(comparison: Comparison, path: str | Path,
                    ns3_seeds: Sequence[int] | None = None,
                    ccjax_seeds: int | None = None) -> Path:
    """Draw ``comparison`` (a ``validation.Comparison`` whose two sides carry their seed-mean
    ``RunSeries``) to ``path`` (PNG, PDF or SVG by the suffix)."""
    a, b = comparison.ns3.series, comparison.ccjax.series
    if a is None or b is None:
        raise ValueError("plot_validation needs both sides' time series (Measured.series)")
    sc = comparison.scenario
    plt = pyplot()
    with plt.rc_context(STYLE):
        multi = sc.flows > 1
        windows = all(w is not None and bool(np.isfinite(w).any())
                      for w in (a.cwnd_pkts, b.cwnd_pkts))
        rows = (4 if multi else 2) + int(windows)
        fig, axes = plt.subplots(rows, 1, figsize=(7, 2.2 * rows + 0.4), sharex=True)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        ta, tb = a.ends_s, b.ends_s
        for f in range(sc.flows):
            c = colors[f % len(colors)]
            axes[0].plot(ta, a.throughput_mbps[f], color=c, lw=1.1,
                         label=f"flow {f} ({sc.rtt_ms[f]:.3g} ms)")
            axes[0].plot(tb, b.throughput_mbps[f], color=c, lw=1.1, ls="--")
        if multi:  # the link's utilization, against the capacity line
            axes[0].plot(ta, a.throughput_mbps.sum(0), color="k", lw=1.1, label="all flows")
            axes[0].plot(tb, b.throughput_mbps.sum(0), color="k", lw=1.1, ls="--")
        axes[0].axhline(sc.bw_mbps, color="gray", lw=0.7, ls=":")
        axes[0].set_ylabel("throughput (Mbps)")
        k = 1
        if windows:
            for f in range(sc.flows):
                c = colors[f % len(colors)]
                axes[k].plot(ta, a.cwnd_pkts[f], color=c, lw=1.1)
                axes[k].plot(tb, b.cwnd_pkts[f], color=c, lw=1.1, ls="--")
            axes[k].set_ylabel("window (segments)")
            axes[k].set_ylim(bottom=0)
            k += 1
        if multi:
            sa = running_shares(a.throughput_mbps, a.lengths_s)
            sb = running_shares(b.throughput_mbps, b.lengths_s)
            for f in range(sc.flows):
                c = colors[f % len(colors)]
                axes[k].plot(ta, sa[f], color=c, lw=1.1)
                axes[k].plot(tb, sb[f], color=c, lw=1.1, ls="--")
            axes[k].set_ylabel("share since start")
            axes[k].set_ylim(0, 1)
            axes[k + 1].plot(ta, a.jain, color="k", lw=1.1)
            axes[k + 1].plot(tb, b.jain, color="k", lw=1.1, ls="--")
            axes[k + 1].set_ylabel("Jain since start")
            axes[k + 1].set_ylim(
                min(0.5, float(np.nanmin(a.jain)), float(np.nanmin(b.jain))) - 0.02, 1.01)
        axes[-1].plot(ta, a.queue_pkts, color="k", lw=1.1, label="ns-3")
        axes[-1].plot(tb, b.queue_pkts, color="k", lw=1.1, ls="--", label="ccjax")
        top = max(float(np.max(a.queue_pkts)), float(np.max(b.queue_pkts)))
        if top >= 0.5 * sc.buffer_pkts:  # the buffer's line, where it does not flatten the queue
            axes[-1].axhline(sc.buffer_pkts, color="gray", lw=0.7, ls=":")
        axes[-1].set_ylabel("queue (packets)")
        axes[-1].set_xlabel("time (s)")
        axes[-1].set_xlim(0, sc.duration_s)
        # beside the panels, where no line runs (``save`` crops to what is drawn)
        axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        axes[-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0),
                        title=f"buffer {sc.buffer_pkts:g} pkts")
        ns3_txt = "ns-3" if ns3_seeds is None else \
            f"ns-3 seeds {','.join(str(s) for s in ns3_seeds)}"
        cc_txt = "ccjax" if ccjax_seeds is None else f"ccjax {ccjax_seeds} seeds"
        verdict = "within every tolerance" if comparison.ok else \
            "outside: " + ", ".join(comparison.how_far())
        axes[0].set_title(f"{sc.name}\n{ns3_txt} (solid) and {cc_txt} (dashed), seed means; "
                          f"{verdict}", fontsize=9)
        fig.tight_layout()
        return save(fig, path)  # cropped to what is drawn, the legends beside the panels
