"""Score the packet model on the validation matrix against the stored ns-3 runs, with less noise
than the report's one figure: for judging a model change before regenerating the report.

ccjax runs the matrix in blocks of seeds (1-8, 9-16, ... by default), and each block's count
of scenarios within every tolerance is printed beside the count of all blocks' mean. The
mean is compared with two references:

* **A**, the report's: the mean of ns-3's seeds 1 and 2, the tolerances widened to their
  spread (``validation.ns3_from_records``);
* **B**, a steadier one: the mean of ns-3's ten stored seeds (1 and 2, and the self-check's
  3-10 from ``"ns3_self"``), the tolerances widened to the same spread of seeds 1 and 2.

A change that is closer to ns-3 should hold up against both and over the blocks; one that
only moves the count of a single block of eight seeds may be noise (four blocks of eight put
153, 145, 147 and 147 of the 180 scenarios within every tolerance on one tree).

    .venv/bin/python scripts/score_matrix.py                 # all three, 4 blocks of 8 seeds
    .venv/bin/python scripts/score_matrix.py --cc vegas --blocks 2 --misses
    .venv/bin/python scripts/score_matrix.py --recovery cut  # the window cut at once
    .venv/bin/python scripts/score_matrix.py --cc vegas --rows /tmp/a.json  # per scenario

``--rows`` writes each scenario's figures (ns-3's and ccjax's all-seed mean) and how far each
check is off (``Comparison.reach``, in tolerances) against A and B, so that two versions of
the model can be compared scenario by scenario.

About 75 s per block of eight seeds for all three controllers on the 2-core AMD EPYC guest.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# score this checkout's model, whichever environment's Python runs the script
sys.path.insert(0, str(ROOT))


def _cc_list(text: str) -> tuple[str, ...]:
    from ccjax.validation import VALIDATED_CC

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in VALIDATED_CC]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"{text!r}: name one or more of {', '.join(VALIDATED_CC)}, comma-separated")
    return names


def _score(scen, ref, got) -> tuple[int, float, list[str]]:
    """Scenarios within every tolerance, the distance, and the names of those outside."""
    from ccjax import validation as v

    rows = [v.compare(sc, r, g, sp) for sc, (r, sp), g in zip(scen, ref, got, strict=True)]
    return sum(r.ok for r in rows), v.distance(rows), [r.scenario.name for r in rows if not r.ok]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cc", type=_cc_list, default=None, metavar="NAMES",
                    help="controllers of the matrix to score (default: newreno,cubic,vegas)")
    ap.add_argument("--blocks", type=int, default=4, help="blocks of seeds (default 4)")
    ap.add_argument("--block-size", type=int, default=8, help="seeds per block (default 8)")
    ap.add_argument("--only", action="append", default=None, metavar="SCENARIO",
                    help="score only this scenario, by its name in docs/validation.md "
                         "(repeatable)")
    ap.add_argument("--report", type=Path, default=ROOT / "docs" / "validation.json",
                    help="the report's JSON holding ns-3's runs (default docs/validation.json)")
    ap.add_argument("--misses", action="store_true",
                    help="also list the scenarios outside some tolerance against each reference")
    ap.add_argument("--rows", type=Path, default=None, metavar="PATH",
                    help="write each scenario's comparison against A and B to this JSON file")
    ap.add_argument("--recovery", choices=("cut", "prr"), default=None,
                    help="the ACK-clocked senders' loss recovery (SimConfig.recovery; default "
                         "validation.NS3_RECOVERY, as the report runs them)")
    args = ap.parse_args(argv)
    if args.blocks < 1:
        ap.error(f"--blocks {args.blocks}: must be an integer >= 1")
    if args.block_size < 1:
        ap.error(f"--block-size {args.block_size}: must be an integer >= 1")
    if not args.report.is_file():
        ap.error(f"--report {args.report}: no such file; it must be a report's JSON written by "
                 f"scripts/validate_ns3.py")

    from ccjax import validation as v
    from ccjax.errors import ConfigError

    ccs = args.cc or v.VALIDATED_CC
    matrix = v.full_matrix()
    if args.only:
        names = {sc.name for sc in matrix}
        unknown = [n for n in args.only if n not in names]
        if unknown:
            ap.error(f"--only {', '.join(map(repr, unknown))}: not a scenario of the matrix "
                     f"(names as in docs/validation.md, e.g. {matrix[0].name!r})")
    chosen = [sc for sc in matrix if sc.cc in ccs and (not args.only or sc.name in args.only)]
    if not chosen:
        ap.error(f"--only {', '.join(map(repr, args.only))}: none of them is a scenario of "
                 f"--cc {','.join(ccs)}")
    try:  # read before anything runs, so that a bad report costs nothing
        ref_runs = dict(zip(chosen, v.ns3_reference_runs(chosen, args.report), strict=True))
    except ConfigError as e:
        # the library's message is worded for validate_ns3.py's --ns3-from: keep what is wrong
        what = str(e).split(": ", 1)[-1].split("; allowed", 1)[0]
        ap.error(f"--report {args.report}: {what}; allowed: a report's JSON written by "
                 f"scripts/validate_ns3.py for this matrix")
    # the self-check's seeds, as scripts/validate_ns3.py stores them under "ns3_self"
    self_seeds = tuple(range(3, 11))
    t0 = time.perf_counter()
    total: dict[str, list[float]] = {"A": [0, 0.0], "B": [0, 0.0]}
    blocks_total = [0] * args.blocks
    rows_out: dict[str, dict] = {}
    has_b, all_b = False, True
    for cc in ccs:
        scen = [sc for sc in chosen if sc.cc == cc]
        if not scen:
            continue
        ref12 = [ref_runs[sc] for sc in scen]
        ref_a = [v.average(rs) for rs in ref12]
        more = v.ns3_runs_from_records(scen, self_seeds, args.report)
        if more is None:
            print(f"{cc}: {args.report} holds no ns-3 runs of seeds 3-10 for these scenarios; "
                  f"reference B left out for {cc}", flush=True)
        ref_b = None if more is None else [
            (v.average(list(a) + list(b))[0], v.average(a)[1])
            for a, b in zip(ref12, more, strict=True)]
        runs = [v.run_ccjax(scen, seeds=range(1 + k * args.block_size,
                                               1 + (k + 1) * args.block_size),
                            recovery=args.recovery)
                for k in range(args.blocks)]
        # the mean of all blocks: each block's mean weighs alike (equal block sizes)
        mean = [v.average([b[i] for b in runs])[0] for i in range(len(scen))]

        per = [_score(scen, ref_a, b) for b in runs]
        for k, p in enumerate(per):
            blocks_total[k] += p[0]
        a = _score(scen, ref_a, mean)
        total["A"][0] += a[0]
        total["A"][1] += a[1]
        line = (f"{cc}: of {len(scen)}, blocks against A {[p[0] for p in per]} "
                f"(distance {', '.join(f'{p[1]:.1f}' for p in per)}); "
                f"all {args.blocks * args.block_size} seeds against A {a[0]} ({a[1]:.1f})")
        all_b = all_b and ref_b is not None
        if ref_b is not None:
            has_b = True
            b = _score(scen, ref_b, mean)
            total["B"][0] += b[0]
            total["B"][1] += b[1]
            line += f", against B {b[0]} ({b[1]:.1f})"
        print(line, flush=True)
        for name, refs in (("A", ref_a), ("B", ref_b)):
            for sc, (r, sp), g in zip(scen, refs or [], mean, strict=False):
                c = v.compare(sc, r, g, sp)
                row = rows_out.setdefault(sc.name, {"ccjax": g.record()})
                row[name] = {"ns3": r.record(), "ok": c.ok, "checks": c.checks,
                             "reach": c.reach}
        if args.misses:
            print("  outside against A:", ", ".join(a[2]) or "none")
            if ref_b is not None:
                print("  outside against B:", ", ".join(b[2]) or "none")
    with_b = (f", against B {total['B'][0]} ({total['B'][1]:.1f})"
              + ("" if all_b else " (only the controllers with B)") if has_b else "")
    rec = args.recovery or f"{v.NS3_RECOVERY} (validation.NS3_RECOVERY)"
    print(f"all: blocks against A {blocks_total}; all seeds against A {total['A'][0]} "
          f"({total['A'][1]:.1f}){with_b}; recovery {rec}; {time.perf_counter() - t0:.0f} s")
    if args.rows is not None:
        args.rows.write_text(json.dumps(rows_out, indent=1) + "\n")
        print(f"per-scenario comparisons: {args.rows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
