"""``ccjax plot pareto|ternary|cdf|curves``: the argument parser and the dispatch (the figures
themselves live in their modules; matplotlib is imported only when one is drawn)."""

from __future__ import annotations

import argparse
from typing import Any


def add_plot(sub: Any) -> None:
    p = sub.add_parser(
        "plot", help="figures of a sweep: pareto, ternary, cdf, curves",
        description="Figures of a sweep directory (PNG, PDF or SVG by the output's suffix). "
        "pareto, ternary and cdf read its preference evaluation (`ccjax prefeval`); curves "
        "reads its training curves, or a `ccjax train` run directory.")
    kinds = p.add_subparsers(dest="figure", required=True, parser_class=type(p))

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("sweep_dir")
        q.add_argument("-o", "--out", required=True, help="output file (.png, .pdf or .svg)")

    q = kinds.add_parser(
        "pareto", help="achieved points per preference, Pareto fronts, hypervolume",
        description="Per trial: a point per evaluated preference (means over links), its "
        "Pareto front as a staircase and its hypervolume (reference: x = 0 and 1.1 x the "
        "worst y in the sweep's evaluation) in the legend; classic controllers as labelled points. "
        "Without --trial: every trial up to 6, else the best by mean reward.")
    common(q)
    q.add_argument("--x", default="utilization", choices=["utilization", "throughput"])
    q.add_argument("--y", default="latency_ratio", choices=["latency_ratio", "p95_delay"])
    q.add_argument("--trial", action="append", help="a trial id to draw (repeatable)")
    q = kinds.add_parser(
        "ternary", help="the preference simplex coloured by achieved reward",
        description="A ternary map of the evaluated preferences coloured by the reward the "
        "trial achieved there (mean over links); one panel per trial on one colour scale. "
        "Without --trial: every trial up to 6, else the best by mean reward.")
    common(q)
    q.add_argument("--trial", action="append", help="a trial id to draw (repeatable)")
    q = kinds.add_parser(
        "cdf", help="reward CDFs per setting and per classic controller (MOCC Fig. 6, 16)",
        description="The CDF of the reward over every (preference, link) case: one line per "
        "setting (seeds pooled; --by AXIS pools all but AXIS; --by trial: one per trial) and "
        "one per classic controller.")
    common(q)
    q.add_argument("--by", help="an axis of the sweep (e.g. train.landmarks_step), or trial")
    q = kinds.add_parser(
        "curves", help="training curves, seeds pooled into a mean with a min-max band",
        description="A training metric per iteration from a sweep's curves (or a `ccjax "
        "train` run directory): trials that differ only in seed pooled into their mean with "
        "a min-max band; --by AXIS pools all but AXIS; --by trial: one line per trial.")
    common(q)
    q.add_argument("--metric", default="reward", help="a curve column: reward (default), "
                   "eval_reward, utilization, latency_ratio, loss_rate, policy_loss, entropy, ...")
    q.add_argument("--by", help="an axis of the sweep, or trial")


def cmd_plot(args: argparse.Namespace) -> int:
    if args.figure == "pareto":
        from ccjax.plot.pareto import plot_pareto

        r = plot_pareto(args.sweep_dir, args.out, x=args.x, y=args.y, trials=args.trial)
        what = ", ".join(f"{s['label']}: hypervolume {s['hypervolume']:.4g}"
                         for s in r["series"])
    elif args.figure == "ternary":
        from ccjax.plot.ternary import plot_ternary

        r = plot_ternary(args.sweep_dir, args.out, trials=args.trial)
        what = f"{len(r['panels'])} panel(s)"
    elif args.figure == "cdf":
        from ccjax.plot.cdf import plot_cdf

        r = plot_cdf(args.sweep_dir, args.out, by=args.by)
        what = f"{len(r['lines'])} line(s)"
    else:
        from ccjax.plot.curves import plot_curves

        r = plot_curves(args.sweep_dir, args.out, metric=args.metric, by=args.by)
        what = f"{len(r['lines'])} line(s) of {r['metric']}"
    print(f"{args.out}: {what}")
    return 0
