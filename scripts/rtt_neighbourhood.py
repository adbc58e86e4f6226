"""One scenario of the validation matrix in both simulators with one flow's base RTT moved a few
ms either way: how much of a miss is the model, and how much is that scenario's own sensitivity.

Two CUBIC flows of 20 and 100 ms at 10 Mbps split the link differently in ns-3 when the short
flow's RTT moves by a millisecond, by more than ns-3's seeds differ at any one RTT (see
docs/validation-history.md, twelfth session). A comparison at one RTT cannot tell such a
scenario's own sensitivity from the model's error; this script runs the scenario at each RTT
of ``RTT - span .. RTT + span`` (1 ms steps, whole ms as the matrix) in ns-3 with
``--ns3-seeds`` and in ccjax's packet model with ``--ccjax-seeds``, exactly as the report runs
them (``validation.run_ns3_seeds``, ``validation.run_ccjax``), and prints, per RTT, each
simulator's share of the varied flow, its Jain's index and whether ccjax is within every
tolerance against that RTT's ns-3 runs. The drop-tail buffer keeps the scenario's size in
packets at every RTT, so that only the RTT moves.

    .venv/bin/python scripts/rtt_neighbourhood.py "cubic 2f 10Mbps 20/100ms 1BDP loss0"
    .venv/bin/python scripts/rtt_neighbourhood.py "cubic 2f 10Mbps 20/100ms 0.25BDP loss0" \\
        --span 2 --ns3-seeds 1,2,3,4 --markdown out/cubic-rtt.md

About 2 min for 7 RTTs, six ns-3 seeds and sixteen ccjax seeds at 10 Mbps on the 2-core guest.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# run this checkout's model, whichever environment's Python runs the script
sys.path.insert(0, str(ROOT))


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        seeds = ()
    if not seeds or any(s < 1 for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(
            f"{text!r}: distinct integers >= 1, comma-separated (e.g. 1,2,3)")
    return seeds


def neighbourhood(sc, flow: int, span: int) -> list:
    """The scenarios of ``sc`` with flow ``flow``'s RTT moved by -span..span whole ms (those of
    at least 1 ms), the buffer kept at ``sc``'s size in packets."""
    from ccjax import validation as v

    out = []
    for d in range(-span, span + 1):
        rtts = list(sc.rtt_ms)
        rtts[flow] = sc.rtt_ms[flow] + d
        if rtts[flow] < 1.0:
            continue
        bdp = sc.bw_mbps * 1e6 / 8 * max(rtts) * 1e-3 / v.PACKET_BYTES
        moved = dataclasses.replace(sc, rtt_ms=tuple(rtts), buffer_bdp=sc.buffer_pkts / bdp)
        assert moved.buffer_pkts == sc.buffer_pkts
        out.append(moved)
    return out


def table(flow: int, scens, ns3_runs, got) -> tuple[list[str], dict]:
    """Markdown rows, one per RTT, and the neighbourhood's summary."""
    from ccjax import validation as v

    lines = [f"| flow {flow} RTT ms | ns-3 flow {flow} share (seeds' mean; per seed) | ns-3 Jain "
             f"| ccjax flow {flow} share | ccjax Jain | ccjax within every tolerance |",
             "|---:|---|---:|---:|---:|---|"]
    ns3_sh, cj_sh, ok = [], [], 0
    for sc, runs, g in zip(scens, ns3_runs, got, strict=True):
        ref, spread = v.average(runs)
        row = v.compare(sc, ref, g, spread)
        per = " ".join(f"{r.shares[flow]:.2f}" for r in runs)
        ns3_sh.append(ref.shares[flow])
        cj_sh.append(g.shares[flow])
        ok += row.ok
        verdict = "yes" if row.ok else "no: " + ", ".join(row.how_far())
        lines.append(f"| {sc.rtt_ms[flow]:.0f} | {ref.shares[flow]:.3f} ({per}) | {ref.jain:.3f} "
                     f"| {g.shares[flow]:.3f} | {g.jain:.3f} | {verdict} |")
    summary = dict(ns3_min=min(ns3_sh), ns3_max=max(ns3_sh), ns3_mean=sum(ns3_sh) / len(ns3_sh),
                   ccjax_min=min(cj_sh), ccjax_max=max(cj_sh),
                   ccjax_mean=sum(cj_sh) / len(cj_sh), within=ok, rtts=len(scens))
    return lines, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", help="a scenario of the matrix, by its name in "
                                     "docs/validation.md (e.g. \"cubic 2f 10Mbps 20/100ms 1BDP "
                                     "loss0\")")
    ap.add_argument("--flow", type=int, default=0, help="the flow whose RTT moves (default 0)")
    ap.add_argument("--span", type=int, default=3,
                    help="ms either way, in 1 ms steps (default 3)")
    ap.add_argument("--ns3-seeds", type=_seeds, default=(1, 2, 3, 4, 5, 6),
                    help="ns-3's seeds at each RTT (default 1,...,6)")
    ap.add_argument("--ccjax-seeds", type=int, default=16,
                    help="ccjax's seeds 1..N at each RTT (default 16, as the report)")
    ap.add_argument("--workers", type=int, default=2, help="ns-3 processes at a time (default 2)")
    ap.add_argument("--markdown", type=Path, default=None,
                    help="also write the table and its summary to this file")
    args = ap.parse_args(argv)

    from ccjax import validation as v

    matrix = {sc.name: sc for sc in v.full_matrix()}
    if args.scenario not in matrix:
        ap.error(f"scenario {args.scenario!r}: not a scenario of the matrix (names as in "
                 f"docs/validation.md, e.g. {next(iter(matrix))!r})")
    sc = matrix[args.scenario]
    if not 0 <= args.flow < sc.flows:
        ap.error(f"--flow {args.flow}: must be a flow of the scenario, 0 to {sc.flows - 1}")
    if not 1 <= args.span <= 20:
        ap.error(f"--span {args.span}: must be an integer from 1 to 20 (ms)")
    if args.ccjax_seeds < 1:
        ap.error(f"--ccjax-seeds {args.ccjax_seeds}: must be an integer >= 1")
    if args.workers < 1:
        ap.error(f"--workers {args.workers}: must be an integer >= 1")

    scens = neighbourhood(sc, args.flow, args.span)
    t0 = time.perf_counter()
    ns3_runs = v.run_ns3_seeds(scens, args.ns3_seeds, workers=args.workers)
    t_ns3 = time.perf_counter() - t0
    got = v.run_ccjax(scens, seeds=tuple(range(1, args.ccjax_seeds + 1)))
    t_cj = time.perf_counter() - t0 - t_ns3
    lines, s = table(args.flow, scens, ns3_runs, got)
    head = (f"{sc.name}, flow {args.flow}'s RTT {sc.rtt_ms[args.flow]:.0f} ms moved "
            f"-{args.span}..+{args.span} ms (buffer {sc.buffer_pkts} packets at every RTT); "
            f"ns-3 seeds {','.join(map(str, args.ns3_seeds))}, ccjax seeds 1-{args.ccjax_seeds}")
    foot = (f"flow {args.flow}'s share over the {s['rtts']} RTTs: ns-3 {s['ns3_min']:.3f} to "
            f"{s['ns3_max']:.3f} (mean {s['ns3_mean']:.3f}), ccjax {s['ccjax_min']:.3f} to "
            f"{s['ccjax_max']:.3f} (mean {s['ccjax_mean']:.3f}); ccjax within every tolerance "
            f"at {s['within']} of {s['rtts']}; ns-3 {t_ns3:.0f} s, ccjax {t_cj:.0f} s")
    text = "\n".join([head, "", *lines, "", foot]) + "\n"
    print(text, end="")
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
