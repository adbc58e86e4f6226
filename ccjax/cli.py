"""The ``ccjax`` command line. It parses and prints; every run goes through the library API.

Invalid input is one line on stderr (``ccjax: error: ...``) and exit code 2, before anything is
compiled.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ccjax.errors import ConfigError


def _floats(field: str):
    def parse(text: str) -> list[float]:
        try:
            return [float(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{field}={text!r} is invalid: a number or a comma-separated list of numbers"
            ) from None

    return parse


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _add_simulate(sub) -> None:
    p = sub.add_parser(
        "simulate", help="simulate flows over a bottleneck and print a summary",
        description="Simulate one scenario preset or an explicit dumbbell (the flags below), print"
        " a per-flow table (or --json) and optionally plot it.")
    p.add_argument("--scenario", help="a preset name (see `ccjax scenarios`) or a TOML path;"
                   " without it an explicit dumbbell is built from the flags")
    p.add_argument("--cc", type=_names, default=["const"],
                   help="controller, or one per flow, comma-separated (default const)")
    p.add_argument("--rate-mbps", type=_floats("rate_mbps"), default=[8.0],
                   help="sending rate of const flows, one or one per flow (default 8)")
    p.add_argument("--flows", type=int, default=2, help="number of flows (default 2)")
    p.add_argument("--max-flows", type=int, default=None,
                   help="F_max, the static flow capacity of the compiled simulator")
    p.add_argument("--bw-mbps", type=float, default=12.0, help="bottleneck Mbps (default 12)")
    p.add_argument("--rtt-ms", type=_floats("rtt_ms"), default=[40.0],
                   help="base RTT, one or one per flow (default 40)")
    p.add_argument("--start-s", type=_floats("start_s"), default=None,
                   help="flow start times (default: flow 0 at 0 s, the others 5 s apart)")
    p.add_argument("--stop-s", type=_floats("stop_s"), default=None, help="flow stop times")
    p.add_argument("--buffer-pkts", type=float, default=None,
                   help="drop-tail buffer in packets (default one BDP of the largest RTT)")
    p.add_argument("--loss", type=float, default=0.0, help="random loss probability")
    p.add_argument("--trace", help="mahimahi trace file for the bottleneck (replaces --bw-mbps)")
    p.add_argument("--duration-s", type=float, default=None,
                   help="simulated seconds (default 20, or the scenario's)")
    p.add_argument("--model", choices=["fluid", "packet"], default="packet")
    p.add_argument("--tick-ms", type=float, default=1.0, help="simulator tick (default 1 ms)")
    p.add_argument("--links", type=int, default=1, help="links to sample from a scenario")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--series-interval-s", type=float, default=0.1)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", help="write throughput/RTT/queue plot (.png or .pdf)")


def _links_for(args):
    from ccjax.api import link_from_flags
    from ccjax.sim.trace import load_mahimahi

    if args.scenario:
        from ccjax.sim.scenario import load_scenario

        if args.links < 1:
            raise ConfigError(f"links={args.links} is invalid: an integer >= 1")
        sc = load_scenario(args.scenario)
        specs = sc.sample(args.seed, args.links)
        duration = args.duration_s if args.duration_s is not None else sc.duration_s
        return specs, duration, sc.max_flows, sc.name
    if args.links != 1:
        raise ConfigError("links is only for --scenario; an explicit dumbbell is one link")
    if args.flows < 1:
        raise ConfigError(f"flows={args.flows} is invalid: an integer >= 1")
    start = args.start_s if args.start_s is not None else [5.0 * i for i in range(args.flows)]
    trace = load_mahimahi(args.trace) if args.trace else None
    spec = link_from_flags(
        flows=args.flows, bw_mbps=args.bw_mbps, rtt_ms=args.rtt_ms, start_s=start,
        stop_s=args.stop_s, buffer_pkts=args.buffer_pkts, loss=args.loss, trace=trace,
        trace_name=args.trace or "trace")
    duration = args.duration_s if args.duration_s is not None else 20.0
    return [spec], duration, None, "dumbbell"


def _print_table(summary: dict, name: str) -> None:
    from rich.console import Console
    from rich.table import Table

    sim = summary["sim"]
    t = Table(title=f"{name}: {sim['model']} model, {sim['ticks']} ticks of "
              f"{sim['tick_s'] * 1e3:g} ms", title_justify="left")
    for col in ("flow", "cc", "base RTT ms", "throughput Mbps", "goodput Mbps", "mean RTT ms",
                "p95 RTT ms", "loss"):
        t.add_column(col, justify="right")
    for i, f in enumerate(summary["flows"]):
        t.add_row(str(i), f.get("cc", "const"), f"{f['base_rtt_ms']:.1f}",
                  f"{f['throughput_mbps']:.3f}", f"{f['goodput_mbps']:.3f}",
                  f"{f['mean_rtt_ms']:.1f}", f"{f['p95_rtt_ms']:.1f}", f"{f['loss_rate']:.4f}")
    c = Console(width=None if sys.stdout.isatty() else 110)
    c.print(t)
    lk = summary["link"]
    c.print(f"link: capacity {lk['capacity_mbps']:.2f} Mbps, utilization {lk['utilization']:.3f},"
            f" mean queueing delay {lk['mean_queue_delay_ms']:.1f} ms,"
            f" drop rate {lk['drop_rate']:.4f}")
    c.print(f"compile {sim['compile_s']:.2f} s, run {sim['wall_s']:.3f} s")


def cmd_simulate(args) -> int:
    from ccjax.api import simulate
    from ccjax.plot import check_plot_path, plot_run

    if args.plot:
        check_plot_path(args.plot)
    specs, duration, max_flows, name = _links_for(args)
    res = simulate(specs, cc=args.cc, rate_mbps=args.rate_mbps, duration_s=duration,
                   model=args.model, seed=args.seed, series_interval_s=args.series_interval_s,
                   tick_s=args.tick_ms * 1e-3, max_flows=args.max_flows or max_flows)
    summaries = [res.summary(i) for i in range(len(specs))]
    for s in summaries:
        for i, f in enumerate(s["flows"]):
            f["cc"] = args.cc[i] if len(args.cc) > 1 else args.cc[0]
    out = dict(summaries[0])
    out["scenario"] = name
    if len(summaries) > 1:
        out["batch"] = summaries
    if args.plot:
        plot_run(summaries[0], args.plot, title=name)
    if args.json:
        print(json.dumps(out))
    else:
        _print_table(summaries[0], name)
        if len(summaries) > 1:
            print(f"({len(summaries)} links simulated; --json prints every link)")
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0


def cmd_bench(args) -> int:
    from ccjax.bench import bench_sim

    if args.what != "sim":
        raise ConfigError(f"bench={args.what!r} is invalid: known benchmarks are sim")
    for b in args.batches:
        if b < 1:
            raise ConfigError(f"batches={args.batches} is invalid: positive integers")
    for m in args.models:
        if m not in ("fluid", "packet"):
            raise ConfigError(f"models={args.models} is invalid: fluid and/or packet")
    for w in args.workloads:
        if w not in ("const", "cubic"):
            raise ConfigError(f"workloads={args.workloads} is invalid: const and/or cubic")
    if not (args.duration_s > 0 and args.ns3_duration_s > 0 and args.tick_ms > 0):
        raise ConfigError("--duration-s, --ns3-duration-s and --tick-ms must be > 0")
    use_ns3 = "cubic" in args.workloads and not args.no_ns3
    if use_ns3:
        from ccjax import ns3

        ns3.build()  # a missing ns-3 is a one-line error before any benchmark runs
    out = bench_sim(batches=tuple(args.batches), models=tuple(args.models),
                    duration_s=args.duration_s, tick_s=args.tick_ms * 1e-3,
                    workloads=tuple(args.workloads), ns3=use_ns3,
                    ns3_duration_s=args.ns3_duration_s)
    if args.json:
        print(json.dumps(out))
        return 0
    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 110)
    titles = {"const": "default scenario (2 constant-rate flows)", "cubic": "4 CUBIC flows"}
    for w in args.workloads:
        t = Table(title=f"ccjax bench sim, {titles[w]}: " + out["machine"]["platform"],
                  title_justify="left")
        for col in ("model", "batch", "env-steps/s", "flow-ticks/s", "flow-s/s", "compile s",
                    "run s"):
            t.add_column(col, justify="right")
        for r in out["results"]:
            if r["workload"] == w:
                t.add_row(r["model"], str(r["batch"]), f"{r['env_steps_per_s']:,.0f}",
                          f"{r['flow_ticks_per_s']:,.0f}", f"{r['flow_seconds_per_s']:,.0f}",
                          f"{r['compile_s']:.2f}", f"{r['run_s']:.3f}")
        con.print(t)
    if "ns3" in out:
        n = out["ns3"]
        line = (f"{n['simulator']}, same CUBIC dumbbell, {n['sim_seconds']:g} simulated s: "
                f"{n['flow_seconds_per_s']:,.1f} flow-s per wall s")
        if "ratio" in n:
            line += (f"; ccjax packet model, batch {n['ccjax_batch']}: "
                     f"{n['ccjax_flow_seconds_per_s']:,.0f} flow-s/s = {n['ratio']:,.0f}x ns-3")
        con.print(line)
    return 0


def cmd_scenarios(args) -> int:
    from ccjax.sim.scenario import list_scenarios, load_scenario

    for n in list_scenarios():
        sc = load_scenario(n)
        print(f"{n:20s} {sc.description}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with the project's error shape: one line on stderr, exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"ccjax: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="ccjax", description="Vectorized congestion-control "
                                 "simulation and learning in JAX.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_simulate(sub)
    b = sub.add_parser("bench", help="measure speed (compile time reported separately)")
    b.add_argument("what", help="what to benchmark: sim")
    b.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 64, 1024, 8192])
    b.add_argument("--models", type=_names, default=["fluid", "packet"])
    b.add_argument("--duration-s", type=float, default=2.0, help="simulated seconds per run")
    b.add_argument("--tick-ms", type=float, default=1.0, help="simulator tick (default 1 ms)")
    b.add_argument("--workloads", type=_names, default=["const", "cubic"],
                   help="const (default scenario, constant-rate flows) and/or cubic (4 CUBIC "
                        "flows); default both")
    b.add_argument("--no-ns3", action="store_true",
                   help="skip timing ns-3 on the CUBIC dumbbell (needs libns3-dev)")
    b.add_argument("--ns3-duration-s", type=float, default=30.0,
                   help="simulated seconds of the ns-3 run (default 30)")
    b.add_argument("--json", action="store_true")
    sub.add_parser("scenarios", help="list scenario presets")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    from ccjax.devices import use_all_cpu_cores

    use_all_cpu_cores()  # before anything imports JAX's backend
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed as one line
        return int(e.code or 0)
    try:
        if args.command == "simulate":
            return cmd_simulate(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "scenarios":
            return cmd_scenarios(args)
    except ConfigError as e:
        print(f"ccjax: error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
