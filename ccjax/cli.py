"""The ``ccjax`` command line. It parses and prints; every run goes through the library API.

Invalid input is one line on stderr (``ccjax: error: ...``) and exit code 2, before anything is
compiled.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ccjax import jsonout
from ccjax.errors import ConfigError, require

if TYPE_CHECKING:  # the CLI imports JAX only once a command needs it
    from ccjax.evaluate import EvalResult

#: the most flows one compiled simulator holds (``SimConfig.n_flows``)
_MAX_FLOWS = 4096


def _items(text: str, field: str, what: str) -> list[str]:
    """The comma-separated items of ``text``; an empty item (``a,,b``, ``a,``, ``""``) is an
    error rather than dropped, so a list never silently loses an entry."""
    items = [x.strip() for x in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(
            f"{field}={text!r} is invalid: {what}, comma-separated, without empty items")
    return items


def _list_of(field: str, convert, one: str, many: str):
    """An argparse type: ``text`` as a comma-separated list of ``convert``-ed items (``one``,
    ``many``: what an item and a list are called in the error)."""
    def parse(text: str) -> list:
        items = _items(text, field, f"{one} or a list of {many}")
        try:
            return [convert(x) for x in items]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{field}={text!r} is invalid: {one} or a comma-separated list of {many}"
            ) from None

    return parse


def _floats(field: str):
    return _list_of(field, float, "a number", "numbers")


def _ints(field: str):
    return _list_of(field, int, "an integer", "integers")


def _names_of(field: str):
    return lambda text: _items(text, field, "a name or a list of names")


def _whole(x: float) -> bool:
    """``x`` is a whole number up to float rounding (1e-6 relative): 0.3 / 0.1 is 3 ticks."""
    return math.isfinite(x) and math.isclose(x, round(x), rel_tol=1e-6)


def _check_tick_ms(tick_ms: float) -> None:
    if not (math.isfinite(tick_ms) and 1e-3 <= tick_ms <= 1e3):
        raise ConfigError(f"tick_ms={tick_ms} is invalid: from 0.001 to 1000 ms")


def _check_duration(duration_s: float, tick_ms: float) -> None:
    """A run lasts whole ticks, and one between them would be rounded up silently. Checked
    before the API's series-interval check, whose bound is the duration, so that a run shorter
    than a tick is blamed on the flag that made it so."""
    require(math.isfinite(duration_s) and duration_s > 0, "duration_s", duration_s,
            "a finite number > 0 s")
    from ccjax.units import ticks_problem

    why = ticks_problem(duration_s, tick_ms, f"--tick-ms {tick_ms:g} ms")
    require(why is None, "duration_s", duration_s, str(why))


def _check_rtt_range(rtt_ms: float) -> None:
    from ccjax.sim.link import MAX_RTT_MS

    require(math.isfinite(rtt_ms) and 0 < rtt_ms <= MAX_RTT_MS, "rtt_ms", rtt_ms,
            f"a number > 0 ms and at most {MAX_RTT_MS:g} ms")


def _check_rtt(rtt_ms: float, tick_ms: float, given_ms: float, default: bool) -> None:
    """An RTT is a delay line of whole ticks: one between them would be rounded silently.
    ``tick_ms`` is the tick the run will use (``given_ms``, or finer where a controller needs
    it, ``sim.resolution``)."""
    ticks = rtt_ms / tick_ms
    of = (f"--tick-ms {given_ms:g} ms" if tick_ms == given_ms else
          f"the run's {tick_ms:g} ms tick (--tick-ms {given_ms:g} ms, refined for its "
          "controllers)")
    dflt = f"; {rtt_ms:g} ms is the default --rtt-ms" if default else ""
    require(_whole(ticks), "rtt_ms", rtt_ms, f"a whole number of ticks of {of} (it is "
            f"{ticks:.6g}{dflt}): the simulator delays by whole ticks")


def _check_csv_path(path: str | None) -> None:
    """Refuse, before a run, a CSV file that could not be written after it (the results would
    be lost): an empty path, a folder, a missing folder, or a place where no file can be made.
    Tried, not judged by ``os.access``, which says yes to root even in /sys, without creating
    or removing the file itself (``plot.common.try_writable``)."""
    if path is None:
        return
    from ccjax.plot.common import try_writable

    p = Path(path)
    require(path != "", "csv", path, "a file's path (leave --csv out for no file)")
    require(not p.is_dir(), "csv", path, "it is a folder; name a file in it")
    require(p.resolve().parent.is_dir(), "csv", path, "its directory does not exist")
    try:
        try_writable(p)
    except OSError as e:
        raise ConfigError(f"csv={path!r} is invalid: it cannot be written there "
                          f"({e.strerror or e})") from None


def _add_simulate(sub) -> None:
    p = sub.add_parser(
        "simulate", help="simulate flows over a bottleneck and print a summary",
        description="Simulate one scenario preset or an explicit dumbbell (the flags below), print"
        " a per-flow table (or --json) and optionally plot it.")
    p.add_argument("--scenario", help="a preset name (see `ccjax scenarios`) or a TOML path;"
                   " without it an explicit dumbbell is built from the flags")
    p.add_argument("--cc", type=_names_of("cc"), default=["const"],
                   help="controller, or one per flow, comma-separated (default const): a "
                   "controller's name, a shipped model's (`ccjax models`) or a policy directory")
    p.add_argument("--preference", type=_floats("preference"), default=None,
                   help="w_thr,w_lat,w_loss the learned policies among --cc run at (default: "
                   "each model's own)")
    p.add_argument("--rate-mbps", type=_floats("rate_mbps"), default=None,
                   help="sending rate of const flows, one or one per flow (default 8)")
    p.add_argument("--flows", type=int, default=None, help="number of flows (default 2)")
    p.add_argument("--max-flows", type=int, default=None,
                   help="F_max, the static flow capacity of the compiled simulator")
    p.add_argument("--bw-mbps", type=float, default=None, help="bottleneck Mbps (default 12)")
    p.add_argument("--rtt-ms", type=_floats("rtt_ms"), default=None,
                   help="base RTT, one or one per flow (default 40)")
    p.add_argument("--start-s", type=_floats("start_s"), default=None,
                   help="flow start times (default: flow 0 at 0 s, the others 5 s apart, or "
                   "closer where the last would start after three quarters of the run: evenly "
                   "within them)")
    p.add_argument("--stop-s", type=_floats("stop_s"), default=None, help="flow stop times")
    p.add_argument("--handshake", action="store_true", default=None,
                   help="each flow opens with a SYN exchange: its data starts one base RTT after "
                   "its start time, and its RTT estimate starts from the handshake's sample, "
                   "which carries the queue the SYN met (as in ns-3 and real TCP; default: data "
                   "from the start time, the estimate from the base RTT)")
    p.add_argument("--access-ms", type=_floats("access_ms"), default=None,
                   help="one-way delay from each sender to the bottleneck, one or one per flow, "
                   "at most half its RTT (default 0): when its packets and SYN meet the queue")
    p.add_argument("--jitter-ms", type=float, default=None,
                   help="the senders' per-packet jitter: each data packet's RTT takes an extra "
                   "delay uniform in [0, this), as on ns-3's dumbbell (one bottleneck packet "
                   "time there); below the shortest RTT (default 0)")
    p.add_argument("--buffer-pkts", type=float, default=None,
                   help="drop-tail buffer in packets (default one BDP of the largest RTT, at the "
                   "trace's mean rate with --trace)")
    p.add_argument("--loss", type=float, default=None,
                   help="random loss probability (default 0)")
    p.add_argument("--trace", help="mahimahi trace file for the bottleneck (replaces --bw-mbps)")
    p.add_argument("--duration-s", type=float, default=None,
                   help="simulated seconds (default 20, or the scenario's)")
    p.add_argument("--model", choices=["fluid", "packet"], default="packet")
    p.add_argument("--window-sender", choices=["paced", "ack-clocked"], default="paced",
                   help="window-based controllers pace at cwnd/srtt (default) or send as their "
                   "ACKs arrive, unpaced (as ns-3's and Linux's TCP without fq); ack-clocked "
                   "also delivers every flow's packets as the link serves them, so it changes "
                   "rate-based flows' RTTs too")
    p.add_argument("--retx-loss", action="store_true",
                   help="packet model: retransmissions meet the random loss too, and a lost one "
                   "costs a loss-based sender a retransmission timeout (SACK recovery without "
                   "RACK, as in ns-3.37); default: every loss is repaired by one retransmission."
                   " Only for controllers that track loss episodes (newreno, cubic, vegas, "
                   "copa), and with --loss > 0 unless --recovery prr runs a window-based one "
                   "(newreno, cubic, vegas), whose retransmissions also meet drop-tail: refused "
                   "where it would change nothing")
    p.add_argument("--recovery", choices=["cut", "prr"], default="cut",
                   help="ack-clocked window senders' loss recovery: cut (default: the window "
                   "drops at once and the sender waits until its flight is under it) or prr "
                   "(RFC 6937 Proportional Rate Reduction, ns-3.37's default: it keeps sending in "
                   "proportion to what is delivered; with --retx-loss its retransmissions also "
                   "meet drop-tail; needs --window-sender ack-clocked and the packet model; "
                   "refused where it would change nothing: it bounds window-based controllers, "
                   "newreno, cubic and vegas, and for copa only delays its retransmissions a "
                   "tick, which counts with --retx-loss and --loss > 0)")
    p.add_argument("--tick-ms", type=float, default=1.0,
                   help="simulator tick, the longest (default 1 ms; a run with copa uses at most "
                   "one packet time at the fastest link, e.g. 0.2 ms at 50 Mbps)")
    p.add_argument("--links", type=int, default=1, help="links to sample from a scenario")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--series-interval-s", type=float, default=None,
                   help="length of the summary's time-series slots (default 0.1 s, or the whole "
                   "run if shorter; at most the run's duration)")
    p.add_argument("--json", action="store_true", help="print one JSON object (strict JSON: "
                   "a value that is not a finite number is null)")
    p.add_argument("--plot", help="write a plot of each flow's throughput, RTT and window "
                   "and the queue over time (.png or .pdf)")


#: the flags that build an explicit dumbbell; a scenario brings its own links
_DUMBBELL_FLAGS = ("flows", "bw_mbps", "rtt_ms", "start_s", "stop_s", "buffer_pkts", "loss",
                   "trace", "handshake", "access_ms", "jitter_ms")


def _links_for(args):
    from ccjax.api import link_from_flags
    from ccjax.sim.trace import load_mahimahi

    if args.scenario is not None:
        from ccjax.sim.scenario import load_scenario

        # an empty name would otherwise fall through to the explicit dumbbell
        require(args.scenario.strip() != "", "scenario", args.scenario,
                "a preset name (see `ccjax scenarios`) or a TOML path")
        given = [f"--{f.replace('_', '-')}" for f in _DUMBBELL_FLAGS
                 if getattr(args, f) is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} cannot be combined with --scenario: a scenario "
                              "brings its own links (edit a copy of its TOML instead)")
        if args.links < 1:
            raise ConfigError(f"links={args.links} is invalid: an integer >= 1")
        sc = load_scenario(args.scenario)
        specs = sc.sample(args.seed, args.links)
        duration = args.duration_s if args.duration_s is not None else sc.duration_s
        _check_duration(duration, args.tick_ms)
        return specs, duration, sc.max_flows, sc.name
    if args.links != 1:
        raise ConfigError("links is only for --scenario; an explicit dumbbell is one link")
    flows = 2 if args.flows is None else args.flows
    # checked here: the simulator's own check names max_flows, a flag perhaps not given
    require(1 <= flows <= _MAX_FLOWS, "flows", flows, f"an integer from 1 to {_MAX_FLOWS}")
    if args.trace is not None and args.bw_mbps is not None:
        raise ConfigError("--bw-mbps cannot be combined with --trace: the trace is the "
                          "bottleneck's capacity")
    if args.trace == "":
        raise ConfigError("trace='' is invalid: a mahimahi trace file's path")
    # one explicit dumbbell: a list longer than its flows would fill empty slots (lost)
    for field, values in (("cc", args.cc), ("rate_mbps", args.rate_mbps)):
        require(values is None or len(values) in (1, flows), field, values,
                f"one value or one per flow ({flows} flows)")
    duration = args.duration_s if args.duration_s is not None else 20.0
    _check_duration(duration, args.tick_ms)
    rtts = [40.0] if args.rtt_ms is None else args.rtt_ms
    for r in rtts:
        _check_rtt_range(r)
    gap = min(5.0, 0.75 * duration / (flows - 1)) if flows > 1 else 0.0
    start = args.start_s if args.start_s is not None else [gap * i for i in range(flows)]
    trace = load_mahimahi(args.trace) if args.trace else None
    spec = link_from_flags(
        flows=flows, bw_mbps=12.0 if args.bw_mbps is None else args.bw_mbps,
        rtt_ms=rtts, start_s=start,
        stop_s=args.stop_s, buffer_pkts=args.buffer_pkts,
        loss=0.0 if args.loss is None else args.loss, trace=trace,
        trace_name=args.trace or "trace", handshake=bool(args.handshake),
        access_ms=args.access_ms,
        jitter_ms=0.0 if args.jitter_ms is None else args.jitter_ms)
    from ccjax.api import resolve_cc
    from ccjax.sim.resolution import resolve_tick

    # the tick the run will use: Copa refines --tick-ms in the packet model (sim.resolution)
    ctls = [resolve_cc(n, args.preference) for n in sorted(set(args.cc))]
    tick_ms = 1e3 * resolve_tick(args.tick_ms * 1e-3, ctls, [spec], args.model)
    _check_duration(duration, tick_ms)
    for r in rtts:
        _check_rtt(r, tick_ms, args.tick_ms, default=args.rtt_ms is None)
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

    if args.plot is not None:
        check_plot_path(args.plot)
    _check_tick_ms(args.tick_ms)
    if args.rate_mbps is not None and "const" not in args.cc:
        raise ConfigError(f"--rate-mbps is only for const flows; --cc {','.join(args.cc)} has "
                          "none")
    specs, duration, max_flows, name = _links_for(args)
    res = simulate(specs, cc=args.cc, rate_mbps=[8.0] if args.rate_mbps is None else
                   args.rate_mbps, duration_s=duration,
                   model=args.model, seed=args.seed, series_interval_s=args.series_interval_s,
                   tick_s=args.tick_ms * 1e-3,
                   max_flows=args.max_flows if args.max_flows is not None else max_flows,
                   window_sender=args.window_sender, retx_loss=args.retx_loss,
                   recovery=args.recovery, preference=args.preference)
    summaries = [res.summary(i) for i in range(len(specs))]
    for s in summaries:
        for i, f in enumerate(s["flows"]):
            f["cc"] = args.cc[i] if len(args.cc) > 1 else args.cc[0]
    out = dict(summaries[0])
    out["scenario"] = name
    if len(summaries) > 1:
        out["batch"] = summaries
    # The results first: a plot that cannot be written after all loses nothing of the run.
    if args.json:
        print(jsonout.dumps(out), flush=True)
    else:
        _print_table(summaries[0], name)
        if len(summaries) > 1:
            print(f"({len(summaries)} links simulated; --json prints every link)")
    if args.plot:
        _write_after("plot", args.plot, lambda: plot_run(summaries[0], args.plot, title=name),
                     quiet=args.json, what="plot")
    return 0


def _write_after(field: str, path: str, write: Callable[[], object], quiet: bool,
                 what: str) -> None:
    """Write a file once the results are printed: an error then is one line, and the run's
    results are not lost with it."""
    try:
        write()
    except OSError as e:
        raise ConfigError(f"{field}={path!r} could not be written: {e.strerror or e}") from None
    if not quiet:
        print(f"{what} written to {path}")


def _ns3_seeds(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 1 or max(seeds) >= 2**31 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(
            f"ns3_seeds={text!r} is invalid: distinct integers from 1 to 2**31 - 1, "
            f"comma-separated")
    return seeds


def _add_validate(sub) -> None:
    p = sub.add_parser(
        "validate", help="run one dumbbell in ns-3 and in ccjax and check the two agree",
        description="Run one dumbbell of your own in ns-3.37 (sims/ns3/dumbbell.cc; needs "
        "libns3-dev) with each of --ns3-seeds and in ccjax with --ccjax-seeds, as "
        "docs/validation.md does (ccjax in ns-3's arithmetic, ACK-clocked; in the packet "
        "model PRR recovery and lost retransmissions on), and compare them with the tolerances "
        "of the validation: "
        "utilization within 0.03, mean queueing delay within 15 % or 3 ms, loss rate within a "
        "factor of 2 where ns-3's exceeds 0.1 %, Jain's index within 0.05, the direction of "
        "RTT unfairness; each widened to ns-3's own seed-to-seed spread where that is larger. "
        "Exit status 0 when every check holds, 1 when one does not, 2 for invalid input "
        "(before anything runs), 3 when ns-3 itself fails.")
    p.add_argument("--cc", default="cubic", help="newreno, cubic or vegas, for every flow "
                   "(default cubic)")
    p.add_argument("--flows", type=int, default=1, help="number of flows (default 1)")
    p.add_argument("--bw-mbps", type=float, default=10.0,
                   help="bottleneck Mbps of IP bytes (default 10)")
    p.add_argument("--rtt-ms", type=_floats("rtt_ms"), default=[40.0],
                   help="base (propagation) RTT, one or one per flow (default 40)")
    p.add_argument("--buffer-bdp", type=float, default=1.0, help="drop-tail buffer in "
                   "bandwidth-delay products of the largest RTT (default 1)")
    p.add_argument("--loss", type=float, default=0.0,
                   help="random loss probability of data packets (default 0)")
    p.add_argument("--duration-s", type=float, default=30.0,
                   help="simulated seconds (default 30)")
    p.add_argument("--ns3-seeds", type=_ns3_seeds, default=[1, 2],
                   help="ns-3's seeds, comma-separated: their mean is the reference and their "
                   "spread widens the tolerances (default 1,2)")
    p.add_argument("--ccjax-seeds", type=int, default=16,
                   help="ccjax seeds averaged, run as one batch (default 16, as the report's "
                        "validation.CCJAX_SEEDS)")
    p.add_argument("--model", choices=["packet", "fluid"], default="packet",
                   help="ccjax's model (default packet, the reference for TCP)")
    p.add_argument("--ns3-hystart", choices=["delay", "both", "packet_train"], default=None,
                   help="--cc cubic only: the HyStart tests ns-3's TcpCubic runs. delay (the "
                   "default): the delay test alone, as docs/validation.md uses, since ccjax's "
                   "CUBIC has no ACK-train test; both: ns-3.37 as shipped; packet_train: the "
                   "ACK-train test alone")
    p.add_argument("--workers", type=int, default=2, help="ns-3 processes at a time (default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", default=None, metavar="PATH",
                   help="also draw each flow's throughput (and all flows'), its congestion "
                   "window, its share of the bytes delivered so far, Jain's index so far and "
                   "the bottleneck queue over "
                   "time, ns-3's and ccjax's seed means, to PATH (.png, .pdf or .svg; drawn "
                   "after the verdict is printed)")


def _validate_table(c, tol: dict, args, ns3_wall: float, ccjax_wall: float,
                    hystart: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    seeds = ", ".join(str(s) for s in args.ns3_seeds)
    hy = f", HyStart {hystart}" if hystart else ""
    t = Table(title=f"{c.scenario.name}: ns-3.37 (seeds {seeds}{hy}) against ccjax's "
              f"{args.model} model ({args.ccjax_seeds} seeds)", title_justify="left")
    for col in ("check", "ns-3", "ns-3 seeds' spread", "ccjax", "tolerance", "within"):
        t.add_column(col, justify="right")
    far = dict(zip(c.failures(), c.how_far(), strict=True))

    def verdict(k: str) -> str:
        return "yes" if c.checks[k] else f"no: {far[k]}"

    sp, a, b = c.spread, c.ns3, c.ccjax
    t.add_row("utilization", f"{a.utilization:.3f}", f"{sp.utilization:.3f}",
              f"{b.utilization:.3f}", f"±{tol['utilization']:.3f}", verdict("utilization"))
    t.add_row("mean queueing delay ms", f"{a.mean_queue_delay_ms:.1f}",
              f"{sp.mean_queue_delay_ms:.1f}", f"{b.mean_queue_delay_ms:.1f}",
              f"±{tol['queue delay']:.1f}", verdict("queue delay"))
    if tol["loss"] is None:
        t.add_row("loss rate", f"{a.loss_rate:.4f}", f"{sp.loss_min:.4f}-{sp.loss_max:.4f}",
                  f"{b.loss_rate:.4f}", "-", "not compared: ns-3's is at most 0.1 %")
    else:
        lo, hi = tol["loss"]
        t.add_row("loss rate", f"{a.loss_rate:.4f}", f"{sp.loss_min:.4f}-{sp.loss_max:.4f}",
                  f"{b.loss_rate:.4f}", f"{lo:.4f}-{hi:.4f}", verdict("loss"))
    t.add_row("Jain's index", f"{a.jain:.3f}", f"{sp.jain:.3f}", f"{b.jain:.3f}",
              f"±{tol['jain']:.3f}", verdict("jain"))
    if len(set(c.scenario.rtt_ms)) > 1:
        t.add_row("RTT unfairness", "", "", "", "same direction", verdict("rtt unfairness"))
    con = Console(width=None if sys.stdout.isatty() else 120)
    con.print(t)
    con.print("shares: ns-3 " + "/".join(f"{x:.2f}" for x in a.shares) + ", ccjax "
              + "/".join(f"{x:.2f}" for x in b.shares))
    con.print("within every tolerance" if c.ok else "outside: " + ", ".join(c.how_far()))
    con.print(f"ns-3 {ns3_wall:.1f} s for {len(args.ns3_seeds)} runs (building dumbbell.cc "
              f"included where it was not built), ccjax {ccjax_wall:.1f} s for "
              f"{args.ccjax_seeds} seeds (compile included)")


def cmd_validate(args) -> int:
    import time

    from ccjax import validation as v
    from ccjax.errors import require

    sc = v.scenario_from_flags(args.cc, args.flows, args.bw_mbps, args.rtt_ms, args.buffer_bdp,
                               args.loss, args.duration_s)
    require(args.ccjax_seeds >= 1, "ccjax_seeds", args.ccjax_seeds, "an integer >= 1")
    require(args.workers >= 1, "workers", args.workers, "an integer >= 1")
    require(args.ns3_hystart is None or args.cc == "cubic", "ns3_hystart", args.ns3_hystart,
            f"given only with --cc cubic (ns-3's {args.cc} has no HyStart)")
    hystart = v.NS3_HYSTART_DETECT if args.ns3_hystart is None else args.ns3_hystart
    v.check_ccjax_fits(sc, args.model, args.ccjax_seeds)  # before ns-3 spends its time
    if args.plot is not None:
        from ccjax.plot import check_plot_path

        check_plot_path(args.plot)
    t0 = time.perf_counter()
    try:
        (ref, spread), = v.run_ns3([sc], seeds=args.ns3_seeds, workers=args.workers,
                                   hystart_detect=hystart)
    except RuntimeError as e:  # ns-3 crashed or printed no result: no verdict, so not 1
        print(f"ccjax: error: ns-3 failed: {str(e).splitlines()[0]}", file=sys.stderr)
        return 3
    t1 = time.perf_counter()
    got, = v.run_ccjax([sc], model=args.model, seeds=range(1, args.ccjax_seeds + 1))
    t2 = time.perf_counter()
    c = v.compare(sc, ref, got, spread)
    tol = v.tolerances(ref, spread)
    if args.json:
        rec = v.as_records([c])[0]
        rec.update(ok=c.ok, outside=c.how_far(), tolerance=tol, model=args.model,
                   ns3_seeds=list(args.ns3_seeds), ccjax_seeds=args.ccjax_seeds,
                   ns3_hystart=hystart if args.cc == "cubic" else None,
                   ns3_wall_s=t1 - t0, ccjax_wall_s=t2 - t1)
        print(jsonout.dumps(rec))
    else:
        _validate_table(c, tol, args, t1 - t0, t2 - t1, hystart if args.cc == "cubic" else None)
    if args.plot is not None:
        from ccjax.plot.validation import plot_validation

        _write_after("plot", args.plot,
                     lambda: plot_validation(c, args.plot, args.ns3_seeds, args.ccjax_seeds),
                     quiet=args.json, what="plot")
    return 0 if c.ok else 1


def cmd_bench_train(args) -> int:
    from ccjax.bench import bench_train

    if args.batches and len(args.batches) > 1:
        raise ConfigError(f"batches={args.batches} is invalid for `bench train`: one number of "
                          "parallel environments")
    n_envs = args.batches[0] if args.batches else 1024
    if n_envs < 2 or args.iters < 1:
        raise ConfigError(f"--batches {n_envs} / --iters {args.iters} is invalid: n_envs >= 2, "
                          "iters >= 1")
    out = bench_train(args.algo, n_envs=n_envs, iters=args.iters, shard=args.shard)
    if args.json:
        print(jsonout.dumps(out))
        return 0
    print(f"ccjax bench train, {out['algo']} on {out['scenario']} ({out['model']} model), "
          f"{out['n_envs']} envs x {out['n_steps']} steps/iteration, tick budget "
          f"{out['tick_budget']}: {out['machine']['platform']}, {out['machine']['backend']}, "
          f"environments split over {out['devices_used']} device(s)")
    print(f"  env-steps/s (completed MIs): {out['env_steps_per_s']:,.0f}")
    print(f"  batch env-steps/s:           {out['batch_env_steps_per_s']:,.0f} "
          f"(valid fraction {out['valid_frac']:.2f})")
    print(f"  iteration (rollout+update):  {out['iteration_s']:.3f} s")
    print(f"  compile ({out['iters']}-iteration chunk): {out['compile_s']:.1f} s")
    return 0


def cmd_bench_sweep(args) -> int:
    from ccjax.bench import bench_sweep

    out = bench_sweep(args.spec, trials=args.trials, iters=args.iters, envs=args.envs,
                      batch=args.batch, overrides=dict(args.set or []), keep=args.keep)
    if args.json:
        print(jsonout.dumps(out))
        return 0
    from rich.console import Console
    from rich.table import Table

    m = out["machine"]
    t = Table(title=f"ccjax bench sweep: {out['trials']} trials of {out['spec']} ({out['algo']} "
              f"on {out['scenario']}, {out['n_envs']} envs x {out['n_steps']} steps, "
              f"{out['iters']} iterations each) on {m['platform']}, {m['backend']}",
              title_justify="left")
    for col in ("trials run", "batches", "compile s", "warm-up s", "run s", "train s", "eval s",
                "env-steps/s", "train env-steps/s"):
        t.add_column(col, justify="right")
    for key, label in (("batched", "vmapped, {b} per batch"), ("sequential", "one at a time")):
        r = out[key]
        t.add_row(label.format(b=r["batch"]), str(r["batches"]), f"{r['compile_s']:.1f}",
                  f"{r['warmup_s']:.1f}", f"{r['run_s']:.1f}", f"{r['train_s']:.1f}",
                  f"{r['eval_s']:.1f}", f"{r['env_steps_per_s']:,.0f}",
                  f"{r['train_env_steps_per_s']:,.0f}")
    con = Console(width=None if sys.stdout.isatty() else 130)
    con.print(t)
    con.print("run s: every batch after one untimed warm-up batch (compiles, first use); "
              "env-steps: completed MIs trained on")
    con.print(f"speed-up, one at a time / vmapped: {out['speedup']:.1f}x in run time, "
              f"{out['train_speedup']:.1f}x in the training program alone; "
              f"load average {out['load_before'][0]:.2f} before, {out['load_after'][0]:.2f} after")
    return 0


#: ``ccjax bench`` flags, the benchmarks each applies to, and their defaults (None: none)
_BENCH_FLAGS = {
    "batches": (("sim", "train"), None), "algo": (("train",), "ppo-mocc"),
    "iters": (("train", "sweep"), 10), "shard": (("train",), False),
    "models": (("sim",), ["fluid", "packet"]), "duration_s": (("sim",), 2.0),
    "tick_ms": (("sim",), 1.0), "workloads": (("sim",), ["const", "cubic"]),
    "no_ns3": (("sim",), False), "ns3_duration_s": (("sim",), 30.0),
    "spec": (("sweep",), "ppo-mocc-hparams"), "trials": (("sweep",), 64),
    "envs": (("sweep",), None), "batch": (("sweep",), None), "set": (("sweep",), None),
    "keep": (("sweep",), None),
}


def _bench_flags(args) -> None:
    """Refuse the flags of another benchmark (they would be ignored), then fill the defaults."""
    if args.what not in ("sim", "train", "sweep"):
        raise ConfigError(f"bench={args.what!r} is invalid: known benchmarks are sim, train, "
                          "sweep")
    stray = [f"--{k.replace('_', '-')}" for k, (whom, default) in _BENCH_FLAGS.items()
             if args.what not in whom and getattr(args, k) is not None
             and getattr(args, k) is not False]
    if stray:
        raise ConfigError(f"{', '.join(stray)} cannot be used with `ccjax bench {args.what}`: "
                          "another benchmark's flag (see `ccjax bench --help`)")
    for k, (_, default) in _BENCH_FLAGS.items():
        if getattr(args, k) is None:
            setattr(args, k, default)
    for k in ("duration_s", "ns3_duration_s", "tick_ms"):
        v = getattr(args, k)
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{k}={v} is invalid: a finite number > 0")


def cmd_bench(args) -> int:
    from ccjax.bench import bench_sim

    ns3_duration_given = args.ns3_duration_s is not None  # before the defaults fill it
    _bench_flags(args)
    if args.what == "train":
        return cmd_bench_train(args)
    if args.what == "sweep":
        return cmd_bench_sweep(args)
    args.batches = args.batches or [1, 64, 1024, 8192]
    for b in args.batches:
        if b < 1:
            raise ConfigError(f"batches={args.batches} is invalid: positive integers")
    for m in args.models:
        if m not in ("fluid", "packet"):
            raise ConfigError(f"models={args.models} is invalid: fluid and/or packet")
    for w in args.workloads:
        if w not in ("const", "cubic"):
            raise ConfigError(f"workloads={args.workloads} is invalid: const and/or cubic")
    _check_tick_ms(args.tick_ms)
    _check_duration(args.duration_s, args.tick_ms)
    use_ns3 = "cubic" in args.workloads and not args.no_ns3
    if ns3_duration_given and not use_ns3:
        why = ("--no-ns3 skips it" if args.no_ns3 else
               f"--workloads {','.join(args.workloads)} has no cubic")
        raise ConfigError(f"--ns3-duration-s is only for the ns-3 run of the cubic workload, and "
                          f"{why}")
    if use_ns3:
        from ccjax import ns3

        ns3.build()  # a missing ns-3 is a one-line error before any benchmark runs
    out = bench_sim(batches=tuple(args.batches), models=tuple(args.models),
                    duration_s=args.duration_s, tick_s=args.tick_ms * 1e-3,
                    workloads=tuple(args.workloads), ns3=use_ns3,
                    ns3_duration_s=args.ns3_duration_s)
    if args.json:
        print(jsonout.dumps(out))
        return 0
    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 110)
    titles = {"const": "default scenario (2 constant-rate flows)", "cubic": "4 CUBIC flows"}
    m = out["machine"]
    where = (f"{m['processor']}, {m['cpus']} CPUs, JAX {m['jax']} on {m['backend']}; "
             f"{args.duration_s:g} simulated s, {args.tick_ms:g} ms ticks, best of "
             f"{out['repeats']} (compile: the first, cold one)")
    models = {"cubic-ns3": "packet, ns-3's sender"}
    for w in args.workloads:
        t = Table(title=f"ccjax bench sim, {titles[w]}: {where}", title_justify="left")
        for col in ("model", "batch", "env-steps/s", "flow-ticks/s", "flow-s/s", "compile s",
                    "run s"):
            t.add_column(col, justify="right")
        for r in out["results"]:
            if r["workload"] == w or (w == "cubic" and r["workload"] == "cubic-ns3"):
                t.add_row(models.get(r["workload"], r["model"]), str(r["batch"]),
                          f"{r['env_steps_per_s']:,.0f}", f"{r['flow_ticks_per_s']:,.0f}",
                          f"{r['flow_seconds_per_s']:,.0f}", f"{r['compile_s']:.2f}",
                          f"{r['run_s']:.3f}")
        con.print(t)
    if "ns3" in out:
        n = out["ns3"]
        line = (f"{n['simulator']}, same CUBIC dumbbell, {n['sim_seconds']:g} simulated s, timed "
                f"{n['timed']}: {n['flow_seconds_per_s']:,.1f} flow-s per wall s")
        if "ratio" in n:
            line += (f"; ccjax packet model with ns-3's sender (ns-3's CUBIC arithmetic, "
                     f"ACK-clocked, PRR), batch {n['ccjax_batch']}: "
                     f"{n['ccjax_flow_seconds_per_s']:,.0f} flow-s/s = {n['ratio']:,.0f}x ns-3")
        if "default_cubic_ratio" in n:
            line += (f" (ccjax's default CUBIC, paced: "
                     f"{n['default_cubic_flow_seconds_per_s']:,.0f} flow-s/s = "
                     f"{n['default_cubic_ratio']:,.0f}x)")
        con.print(line)
    return 0


def _set_value(text: str) -> tuple[str, object]:
    """``table.key=value`` with value parsed as TOML (numbers, lists, strings, booleans)."""
    from ccjax.presets import tomllib

    key, sep, raw = text.partition("=")
    if not sep or "." not in key:
        raise argparse.ArgumentTypeError(f"set={text!r} is invalid: use table.key=value")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):  # not TOML: the text itself
        value = raw
    return key.strip(), value


def _overrides(args) -> dict:
    ov = dict(args.set or [])
    for flag, key in (("scenario", "env.scenario"), ("landmarks_step", "train.landmarks_step"),
                      ("schedule", "train.schedule"), ("iters", "train.iters"),
                      ("n_envs", "train.n_envs"), ("reward", "env.reward")):
        v = getattr(args, flag, None)
        if v is not None:
            ov[key] = v
    if getattr(args, "preference", None) is not None:
        from ccjax.envs.build import check_preference

        w = [float(x) for x in check_preference(args.preference)]
        if "env.preference" in ov:
            # both given: the flag would replace --set's value unseen. That value is checked by
            # the flag's rule (what else would it mean beside --preference), then refused
            # unless the two agree
            given = ov["env.preference"]
            if not isinstance(given, list):
                raise ConfigError(f"env.preference={given!r} is invalid in --set: a list of "
                                  "weights, e.g. [0.8, 0.1, 0.1]")
            from_set = [float(x) for x in check_preference(given, "--set env.preference")]
            if from_set != w:
                raise ConfigError(
                    f"--set env.preference={given!r} and --preference "
                    f"{','.join(f'{x:g}' for x in args.preference)} are two preferences: give "
                    "one (drop --set env.preference; --preference is the flag for it)")
        ov["env.preference"] = w
    return ov


def _log(args):
    return None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))


def _print_summary(summary: dict, out) -> None:
    print(f"{summary['iterations']} iterations in {summary['train_wall_s']:.1f} s "
          f"(+ {summary['compile_s_this_session']:.1f} s compile, "
          f"{summary['eval_wall_s']:.1f} s evaluation), "
          f"{summary['valid_env_steps_per_s']:,.0f} env-steps/s; "
          f"{'finished' if summary['done'] else 'stopped early (resume with --resume)'}; "
          f"run directory {out}")


def cmd_train(args) -> int:
    from ccjax.algos import load_algo
    from ccjax.train import train

    cfg = load_algo(args.algo, _overrides(args))
    summary = train(cfg, args.out, seed=args.seed, resume=args.resume, restart=args.restart,
                    progress=not args.quiet and sys.stderr.isatty(),
                    max_iters=args.max_iters, log=_log(args))
    _print_summary(summary, args.out)
    return 0


def cmd_adapt(args) -> int:
    from ccjax.train import adapt

    if args.iters is not None and args.iters < 1:
        raise ConfigError(f"iters={args.iters} is invalid: an integer >= 1")
    summary = adapt(args.from_dir, args.preference, args.out, replay=not args.no_replay,
                    iters=args.iters, seed=args.seed, resume=args.resume,
                    restart=args.restart, progress=not args.quiet and sys.stderr.isatty(),
                    max_iters=args.max_iters, log=_log(args))
    _print_summary(summary, args.out or "(under the source run's adapt/)")
    return 0


def _add_train(sub) -> None:
    t = sub.add_parser("train", help="train a learned controller (PPO-MOCC, Aurora, AUTO)",
                       description="Train an algorithm preset (algos/*.toml) into --out: "
                       "metrics.csv and eval.csv as they come, orbax checkpoints, the exported "
                       "policy at the end. --resume continues a killed run from its newest "
                       "intact checkpoint, exactly as if it had not stopped; --restart starts "
                       "it over.")
    t.add_argument("--algo", default="ppo-mocc", help="preset name (algos/) or TOML path")
    t.add_argument("--scenario", help="training scenario (default: the preset's)")
    t.add_argument("--landmarks-step", type=float, help="landmark grid step (0.1 -> 36)")
    t.add_argument("--schedule", help="two-phase | all-at-once | fixed | episode")
    t.add_argument("--preference", type=_floats("preference"),
                   help="w_thr,w_lat,w_loss for the fixed schedule")
    t.add_argument("--reward", help="mocc | aurora | auto")
    t.add_argument("--iters", type=int, help="iterations of the fixed schedule")
    t.add_argument("--n-envs", type=int, help="parallel environments")
    t.add_argument("--set", type=_set_value, action="append", metavar="TABLE.KEY=VALUE",
                   help="override any preset value, e.g. --set hyper.lr=3e-4 (repeatable)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", required=True, help="run directory")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --out (same arguments) from its newest intact "
                   "checkpoint")
    t.add_argument("--restart", action="store_true",
                   help="start the run in --out over (same arguments): its checkpoints, "
                   "metrics, evaluations and policy are removed")
    t.add_argument("--max-iters", type=int, help="stop after this many iterations (resumable)")
    t.add_argument("--quiet", action="store_true")
    a = sub.add_parser("adapt", help="adapt a trained MOCC model to a new preference",
                       description="Online adaptation (MOCC 4.3) from a training run, with "
                       "requirement replay unless --no-replay.")
    a.add_argument("--from", dest="from_dir", required=True, help="a `ccjax train` directory")
    a.add_argument("--preference", type=_floats("preference"), required=True)
    a.add_argument("--no-replay", action="store_true", help="no requirement replay")
    a.add_argument("--iters", type=int, help="iterations (default: the preset's adapt_iters)")
    a.add_argument("--seed", type=int)
    a.add_argument("--out", help="run directory (default FROM/adapt/<w>)")
    a.add_argument("--resume", action="store_true",
                   help="continue the adaptation in --out from its newest intact checkpoint")
    a.add_argument("--restart", action="store_true",
                   help="start the adaptation in --out over (its records are removed)")
    a.add_argument("--max-iters", type=int, help="stop after this many iterations (resumable)")
    a.add_argument("--quiet", action="store_true")


def _add_eval(sub) -> None:
    e = sub.add_parser(
        "eval", help="evaluate trained policies and classic controllers on the same links",
        description="Run each policy directory (--model) and classic controller (--cc) on the "
        "same links sampled from a scenario and print one table: per method the means over "
        "links of utilization, latency ratio, p95 one-way delay, loss, MOCC reward w^T O and "
        "throughput (definitions: ccjax.evaluate).")
    e.add_argument("--model", type=_names_of("model"), default=[],
                   help="shipped models (`ccjax models`: mocc) or policy directories (holding "
                   "policy.json), comma-separated")
    e.add_argument("--cc", type=_names_of("cc"), default=[],
                   help="classic controllers by name, comma-separated (e.g. cubic,bbr)")
    e.add_argument("--scenario", default="mocc-test",
                   help="preset name or TOML path (default mocc-test)")
    e.add_argument("--links", type=int, default=10, help="links to sample (default 10)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--duration-s", type=float, default=None,
                   help="simulated seconds per link (default: the scenario's)")
    e.add_argument("--preference", type=_floats("preference"), default=None,
                   help="w_thr,w_lat,w_loss a MOCC policy runs at and rewards are scored with "
                   "(default: the model's own)")
    e.add_argument("--sim-model", choices=["packet", "fluid"], default="packet",
                   help="simulator model (default packet)")
    e.add_argument("--tick-ms", type=float, default=1.0,
                   help="simulator tick, the longest (default 1 ms; copa runs at at most one "
                   "packet time at the fastest link, and its row says so)")
    e.add_argument("--init-rate-frac", type=float, default=None,
                   help="a policy's initial rate, fraction of the link capacity (default 0.5)")
    e.add_argument("--json", action="store_true", help="print one JSON object (with per-link "
                   "rows; strict JSON: a value that is not a finite number is null)")
    e.add_argument("--csv", help="also write the table to this CSV file")


def cmd_eval(args) -> int:
    from ccjax.evaluate import DEFAULT_INIT_RATE_FRAC, evaluate, resolve_method
    from ccjax.sim.scenario import load_scenario

    if not args.model and not args.cc:
        raise ConfigError("--model and --cc are both empty: give policy directories and/or "
                          "controller names")
    # a method named twice would run once and fill one row
    seen: set[str] = set()
    for flag, names in (("model", args.model), ("cc", args.cc)):
        for n in names:
            if n in seen:
                raise ConfigError(f"{flag}={','.join(names)!r} is invalid: {n!r} more than once "
                                  "among --model and --cc; name each method once")
            seen.add(n)
    if args.init_rate_frac is not None and not args.model:
        raise ConfigError("--init-rate-frac is only for policies (--model): the controllers of "
                          "--cc start from their own initial windows")
    _check_tick_ms(args.tick_ms)
    _check_duration(args.duration_s if args.duration_s is not None
                    else load_scenario(args.scenario).duration_s, args.tick_ms)
    _check_csv_path(args.csv)
    pref = args.preference
    if pref is not None:
        from ccjax.evaluate import check_any_preference

        pref = [float(x) for x in check_any_preference(pref)]
    methods = ([resolve_method(m, pref, kind="policy") for m in args.model]
               + [resolve_method(c, pref, kind="controller") for c in args.cc])
    res = evaluate(methods, args.scenario, args.links, seed=args.seed,
                   duration_s=args.duration_s, preference=pref, model=args.sim_model,
                   tick_s=args.tick_ms * 1e-3,
                   init_rate_frac=(DEFAULT_INIT_RATE_FRAC if args.init_rate_frac is None
                                   else args.init_rate_frac))
    # The results first: a CSV that cannot be written after all loses nothing of the run.
    if args.json:
        print(jsonout.dumps(res.to_dict()), flush=True)
    else:
        _print_eval_table(res)
    if args.csv:
        _write_after("csv", args.csv, lambda: res.write_csv(args.csv), quiet=args.json,
                     what="table")
    return 0


def _print_eval_table(res: EvalResult) -> None:
    from rich.console import Console
    from rich.table import Table

    from ccjax.evaluate import COLUMNS

    t = Table(title=f"{res.scenario}: {res.n_links} links x {res.duration_s:g} s, "
              f"{res.model} model, seed {res.seed}", title_justify="left")
    heads = ("utilization", "latency ratio", "p95 delay ms", "loss", "reward", "throughput Mbps")
    for col in ("method", "w", *heads):
        t.add_column(col, justify="left" if col == "method" else "right")
    fmt = {"utilization": "{:.3f}", "latency_ratio": "{:.3f}", "p95_delay_ms": "{:.1f}",
           "loss_rate": "{:.4f}", "reward": "{:.3f}", "throughput_mbps": "{:.2f}"}
    for r in res.rows:
        t.add_row(r["method"], ",".join(f"{x:.2g}" for x in r["preference"]),
                  *(fmt[c].format(r[c]) for c in COLUMNS))
    c = Console(width=None if sys.stdout.isatty() else 120)
    c.print(t)
    c.print("means over links of flow 0; reward = w^T O (MOCC Eq. 2) from the run's totals")
    for r in res.rows:
        if r["tick_s"] != res.tick_s:
            c.print(f"{r['method']} ran at {r['tick_s'] * 1e3:g} ms ticks, not "
                    f"{res.tick_s * 1e3:g}: its queue target needs a finer tick at these "
                    "links' rates (ccjax.sim.resolution)")


def _add_sweep(sub) -> None:
    p = sub.add_parser(
        "sweep", help="train a sweep spec's trials as vectorized batches",
        description="Expand a sweep spec (sweeps/*.toml, or a path) into trials and train them "
        "in compiled batches (trials that differ only in hyperparameters, seed and preference "
        "share one program), recording each in DIR/ledger.sqlite with its curve "
        "(DIR/curves/<id>.parquet) and policy, and its batch's checkpoint. --resume continues "
        "a killed sweep: finished trials are not rerun.")
    p.add_argument("spec", help="a spec name (sweeps/) or a TOML path")
    p.add_argument("--out", help="sweep directory (default runs/sweeps/<name>)")
    p.add_argument("--batch", type=int, help="trials per compiled batch (default: the spec's "
                   "sweep.batch, else as many as fit half the free device memory)")
    p.add_argument("--set", type=_set_value, action="append", metavar="TABLE.KEY=VALUE",
                   help="override a value for every trial, on top of the spec's [set] (e.g. "
                   "--set train.iters=20); repeatable")
    p.add_argument("--resume", action="store_true", help="continue the sweep in --out")
    p.add_argument("--backend", default="local", help="local (default: the batches run here, "
                   "one after another) or ray (one batch per Ray worker, results recorded "
                   "here; pip install 'ccjax[ray]')")
    p.add_argument("--ray-address", help="ray: the cluster to connect to ('auto', HOST:PORT, "
                   "ray://HOST:PORT); default: start a local Ray instance")
    p.add_argument("--ray-workers", type=int, help="ray: at most this many workers (default: "
                   "as many as the cluster holds, one per GPU, else one per --ray-cpus CPUs)")
    p.add_argument("--ray-cpus", type=float, default=1.0, help="ray: CPUs per worker on a "
                   "cluster without GPUs (default 1)")
    p.add_argument("--quiet", action="store_true")
    r = sub.add_parser(
        "results", help="print a sweep's ledger",
        description="Print the trials of a sweep directory: their axis values, status, final "
        "evaluation (reward, utilization, latency ratio, loss), best evaluated reward, "
        "iterations and timings; filter, sort, and export CSV.")
    r.add_argument("sweep_dir")
    r.add_argument("--sort", help="column to sort by (e.g. reward, hyper.lr, train_s)")
    r.add_argument("--desc", action="store_true", help="sort descending")
    r.add_argument("--filter", action="append", default=[], metavar="EXPR",
                   help="COLUMN OP VALUE, OP one of = != < <= > >= (e.g. status=done, "
                   "'hyper.lr<1e-3'); repeatable, all must hold")
    r.add_argument("--limit", type=int, help="at most this many rows")
    r.add_argument("--csv", help="also write the rows shown to this CSV file")
    r.add_argument("--json", action="store_true", help="print the rows as JSON")


def cmd_sweep(args) -> int:
    from ccjax.sweep import load_spec, run_sweep
    from ccjax.sweep.runner import check_backend, default_out

    if args.batch is not None and args.batch < 1:
        raise ConfigError(f"batch={args.batch} is invalid: an integer >= 1 (omit it for the "
                          "automatic size)")
    if args.out is not None:  # an empty path or a file: refused before the sweep is announced
        from ccjax.train.store import check_out_dir

        check_out_dir(args.out)
    # every trial and the backend's options validated here, before anything is traced
    spec = load_spec(args.spec, dict(args.set or []), resuming=bool(args.resume))
    check_backend(args.backend, args.ray_address, args.ray_workers, args.ray_cpus)
    # an empty --out is refused (run_sweep), not replaced by the default
    out = args.out if args.out is not None else str(default_out(spec))
    log = _log(args)
    if log:
        log(f"sweep {spec.name}: {len(spec.trials)} trial(s) in {len(spec.groups())} static "
            f"group(s) -> {out}")
    from ccjax.sweep.ray_backend import SweepWorkerError  # imports nothing from Ray

    try:
        summary = run_sweep(spec, out, batch=args.batch, resume=args.resume,
                            progress=not args.quiet and sys.stderr.isatty(), log=log,
                            backend=args.backend, ray_address=args.ray_address,
                            ray_workers=args.ray_workers, ray_cpus=args.ray_cpus)
    except SweepWorkerError as e:  # not a usage error: the sweep started and can be resumed
        print(f"ccjax: error: {e}", file=sys.stderr)
        return 1
    deg = summary.get("degenerate") or 0
    print(f"{summary['done']} done{f' ({deg} degenerate)' if deg else ''}, "
          f"{summary['failed']} failed, {summary['pending']} pending "
          f"of {summary['trials']} trials in {summary['wall_s']:.1f} s "
          f"({len(summary['batches'])} batch(es) run now); `ccjax results {out}` shows them")
    if "prefeval" in summary:
        pe = summary["prefeval"]
        print(f"prefeval: {len(pe['trials_evaluated'])} trial(s) and "
              f"{len(pe['classic_evaluated'])} controller(s) evaluated in {pe['dir']}; "
              f"`ccjax plot pareto|ternary|cdf {out} -o FILE` draws them")
    return 0


def cmd_results(args) -> int:
    from ccjax.sweep import results
    from ccjax.sweep.ledger import varying_keys, write_csv

    _check_csv_path(args.csv)
    rows = results(args.sweep_dir, args.filter, args.sort, args.desc, args.limit)
    if args.csv:
        write_csv(args.csv, rows)
    if args.json:
        print(jsonout.dumps(rows, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    counts: dict[str, int] = {}
    n_degenerate = 0
    for r in results(args.sweep_dir):
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        n_degenerate += bool(r["status"] == "done" and r.get("degenerate"))
    title = ", ".join(f"{n} {s}" + (f" ({n_degenerate} degenerate)" if s == "done"
                                     and n_degenerate else "") for s, n in counts.items())
    t = Table(title=f"{args.sweep_dir}: {title}"
              + (f"; {len(rows)} shown" if args.filter or args.limit is not None else ""),
              title_justify="left")
    axes = varying_keys(rows)
    heads = [("id", None), *((a, None) for a in axes), ("status", None),
             ("reward", "{:.4f}"), ("utilization", "{:.3f}"), ("latency_ratio", "{:.3f}"),
             ("loss_rate", "{:.4f}"), ("best_reward", "{:.4f}"), ("iter_99", None),
             ("iterations", None), ("train_s", "{:.1f}"), ("reason", None)]
    for h, _ in heads:
        t.add_column(h, justify="left" if h in ("id", "status", "reason") else "right")
    for r in rows:
        cells = []
        for h, f in heads:
            v = r.get(h)
            if h == "status" and v == "done" and r.get("degenerate"):
                v = "done, degenerate"  # the why is in its reason
            cells.append("" if v is None else f.format(v) if f else
                         (f"{v:.3g}" if isinstance(v, float) else str(v)))
        t.add_row(*cells)
    # off a terminal (a pipe, a log) wide enough that the axis columns are not cut
    c = Console(width=None if sys.stdout.isatty() else 240)
    c.print(t)
    c.print("reward, utilization, latency_ratio, loss_rate: final deterministic evaluation at "
            "the trial's preference (landmark schedules: mean over the landmarks); iter_99: "
            "first evaluated iteration within 1% of best_reward; train_s: its batch's training "
            "wall time")
    if n_degenerate:
        c.print("degenerate: finished, but its final policy collapsed (the reason says how; "
                "ccjax.sweep.runner.degenerate); left out of `ccjax prefeval` and its figures, "
                "as failed trials are")
    if args.csv:
        c.print(f"table written to {args.csv}")
    return 0


def _add_prefeval(sub) -> None:
    p = sub.add_parser(
        "prefeval", help="evaluate a sweep's trials on random preferences x scenario links",
        description="MOCC's Fig. 6 protocol on a sweep directory: each finished trial's policy "
        "on N preferences drawn uniformly from the simplex x M links of a scenario (one batched "
        "program per trial), and classic controllers on the same links scored with the same "
        "preferences, into SWEEP_DIR/prefeval/ (one Parquet file per trial and controller). "
        "Settings: the flags, else an earlier evaluation's prefeval/spec.json, else the "
        "spec's [prefeval] table, else the defaults. Resumes: files already written are "
        "skipped.")
    p.add_argument("sweep_dir")
    p.add_argument("--preferences", type=int, help="N preferences (default 100)")
    p.add_argument("--links", type=int, help="M links (default 10)")
    p.add_argument("--scenario", help="scenario preset name or TOML path (default mocc-test)")
    p.add_argument("--seed", type=int, help="seed of the links and preferences (default 0)")
    p.add_argument("--duration-s", type=float, help="simulated seconds per link (default: "
                   "the scenario's)")
    p.add_argument("--sim-model", choices=["packet", "fluid"], help="simulator model "
                   "(default packet)")
    p.add_argument("--classic", type=_names_of("classic"), help="classic controllers, "
                   "comma-separated (default bbr,copa,cubic,vegas,vivace)")
    p.add_argument("--max-links", type=int, help="simulated links per compiled program "
                   "(default 0: a trial's whole grid at once)")
    p.add_argument("--trial", action="append", help="only this trial id (repeatable)")
    p.add_argument("--quiet", action="store_true")


#: ``ccjax prefeval``'s settings: the [prefeval] key, its argument and its flag
_PREFEVAL_FLAGS = {
    "preferences": ("preferences", "--preferences"), "links": ("links", "--links"),
    "scenario": ("scenario", "--scenario"), "seed": ("seed", "--seed"),
    "duration_s": ("duration_s", "--duration-s"), "model": ("sim_model", "--sim-model"),
    "classic": ("classic", "--classic"), "max_links": ("max_links", "--max-links"),
}


def cmd_prefeval(args) -> int:
    from ccjax.sweep.ledger import Ledger
    from ccjax.sweep.prefeval import run_prefeval, spec_for

    Ledger.existing(args.sweep_dir).close()  # a clear error for a directory that is no sweep
    ov = {k: getattr(args, a) for k, (a, _) in _PREFEVAL_FLAGS.items()
          if getattr(args, a) is not None}
    # an error names the flag that gave the value
    spec = spec_for(args.sweep_dir, ov, {k: f for k, (_, f) in _PREFEVAL_FLAGS.items()})
    s = run_prefeval(args.sweep_dir, spec, trials=args.trial, log=_log(args),
                     progress=not args.quiet and sys.stderr.isatty())
    print(f"prefeval: {len(s['trials_evaluated'])} trial(s) and {len(s['classic_evaluated'])} "
          f"controller(s) evaluated now, {len(s['trials_skipped'])} trial(s) and "
          f"{len(s['classic_skipped'])} controller(s) already done; results in {s['dir']}")
    return 0


def cmd_scenarios(args) -> int:
    from ccjax.sim.scenario import list_scenarios, load_scenario

    for n in list_scenarios():
        sc = load_scenario(n)
        print(f"{n:20s} {sc.description}")
    return 0


def cmd_models(args) -> int:
    from ccjax.models import shipped_models

    models = shipped_models()
    if args.json:
        print(jsonout.dumps({n: m.card for n, m in models.items()}))
        return 0
    for n, m in models.items():
        c = m.card
        t = c["trained"]
        print(f"{n}: {c['summary']}")
        print(f"  algorithm {c['algo']}; runs at w = {','.join(f'{x:g}' for x in c['preference'])}"
              " unless --preference says otherwise")
        print(f"  trained {t.get('date', '?')} on {t.get('machine', '?')} in "
              f"{t.get('train_s', float('nan')):.0f} s of training:")
        for cmd in c["commands"]:
            print(f"    {cmd}")
        s = c["scores"]
        print(f"  scores ({s['command']}):")
        for r in s["rows"]:
            print(f"    w={','.join(f'{x:g}' for x in r['preference'])} {r['method']:>6s}: "
                  f"utilization {r['utilization']:.3f}, latency ratio {r['latency_ratio']:.3f}, "
                  f"p95 delay {r['p95_delay_ms']:.1f} ms, loss {r['loss_rate']:.4f}, "
                  f"reward {r['reward']:.3f}")
    if not models:
        print("no shipped models")
    return 0


#: actions meant to be given more than once (append and extend: --set, --filter, --trial), and
#: --help, which exits at once
_REPEATABLE = (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction,
               argparse._HelpAction)


class _Parser(argparse.ArgumentParser):
    """argparse with the project's error shape: one line on stderr, exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"ccjax: error: {message} (see `{self.prog} --help`)\n")

    def parse_known_args(self, args=None, namespace=None):
        # every parser, a subcommand's too, checks the words it is given (argparse hands a
        # subcommand's words to its own parser through this method)
        self._refuse_repeats(sys.argv[1:] if args is None else list(args))
        return super().parse_known_args(args, namespace)

    def _refuse_repeats(self, words: list[str]) -> None:
        """An option given twice would keep its last value silently: refuse it, except the
        repeatable ones (action="append": --set, --filter, --trial)."""
        seen: set[argparse.Action] = set()
        for word in words:
            if word == "--":  # what follows is positional
                break
            action = self._option_for(word)
            if action is None or isinstance(action, _REPEATABLE):
                continue
            if action in seen:
                self.error(f"argument {'/'.join(action.option_strings)}: given more than once; "
                           "give it once")
            seen.add(action)

    def _option_for(self, word: str) -> argparse.Action | None:
        """This parser's option that ``word`` names as argparse reads it: ``--flag``,
        ``--flag=value``, a unique abbreviation of a long flag, ``-x`` or ``-xvalue``."""
        options = self._option_string_actions
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if name in options:
                return options[name]
            if not self.allow_abbrev:
                return None
            hits = {a for s, a in options.items() if s.startswith(name)}
            return hits.pop() if len(hits) == 1 else None  # several: argparse's own error
        if word.startswith("-") and len(word) > 1:
            return options.get(word[:2])  # a negative number is no option here
        return None


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="ccjax", description="Vectorized congestion-control "
                                 "simulation and learning in JAX.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_simulate(sub)
    _add_validate(sub)
    b = sub.add_parser("bench", help="measure speed (compile time reported separately)")
    b.add_argument("what", help="what to benchmark: sim | train | sweep")
    b.add_argument("--batches", type=_ints("batches"),
                   default=None, help="sim: link batch sizes (default 1,64,1024,8192); train: "
                   "parallel environments (default 1024)")
    b.add_argument("--algo", default=None, help="train: algorithm preset (default ppo-mocc)")
    b.add_argument("--iters", type=int, default=None, help="train: iterations timed; sweep: "
                   "iterations per trial (default 10)")
    b.add_argument("--shard", action="store_true",
                   help="train: split the environments over all devices (default: one device)")
    b.add_argument("--models", type=_names_of("models"), default=None,
                   help="sim: fluid and/or packet (default both)")
    b.add_argument("--duration-s", type=float, default=None,
                   help="sim: simulated seconds per run (default 2)")
    b.add_argument("--tick-ms", type=float, default=None,
                   help="sim: simulator tick (default 1 ms)")
    b.add_argument("--workloads", type=_names_of("workloads"), default=None,
                   help="const (default scenario, constant-rate flows) and/or cubic (4 CUBIC "
                        "flows); default both")
    b.add_argument("--no-ns3", action="store_true",
                   help="skip timing ns-3 on the CUBIC dumbbell (needs libns3-dev)")
    b.add_argument("--ns3-duration-s", type=float, default=None,
                   help="sim: simulated seconds of the ns-3 run (default 30)")
    b.add_argument("--spec", default=None,
                   help="sweep: the sweep spec (name or path; default ppo-mocc-hparams)")
    b.add_argument("--trials", type=int, default=None,
                   help="sweep: the spec's first N trials (default 64)")
    b.add_argument("--envs", type=int, help="sweep: environments per trial (default: the "
                   "spec's)")
    b.add_argument("--batch", type=int, help="sweep: trials per vmapped batch (default: the "
                   "spec's sweep.batch, else from device memory)")
    b.add_argument("--set", type=_set_value, action="append", metavar="TABLE.KEY=VALUE",
                   help="sweep: override a value for every trial; repeatable")
    b.add_argument("--keep", help="sweep: keep both sweep directories here (batched/, "
                   "sequential/); default: a temporary directory")
    b.add_argument("--json", action="store_true")
    sub.add_parser("scenarios", help="list scenario presets")
    m = sub.add_parser(
        "models", help="list the trained models shipped with ccjax",
        description="The models that ship inside the package (ccjax/models/): each one's name, "
        "which works wherever a controller's name or a policy directory does (ccjax eval "
        "--model NAME, ccjax simulate --cc NAME), how it was trained and what it scores.")
    m.add_argument("--json", action="store_true", help="print every model's card as JSON")
    nb = sub.add_parser(
        "ns3-bundle", help="copy the ns-3 dumbbell with its libraries, for a machine without "
        "ns-3", description="Build sims/ns3/dumbbell.cc (needs libns3-dev here) and copy it with "
        "every shared library it loads, the C library and its loader included, into DIR. On "
        "another Linux machine of the same machine type without ns-3's packages (a GPU node, "
        "say), set CCJAX_NS3_PROGRAM=DIR/dumbbell and `ccjax validate`, `ccjax bench sim` and "
        "ccjax.ns3 run that program. It is refused once dumbbell.cc has changed, or on "
        "another machine type.")
    nb.add_argument("dir", help="a folder that does not exist yet or is empty")
    _add_train(sub)
    _add_eval(sub)
    _add_sweep(sub)
    _add_prefeval(sub)
    from ccjax.commands.adam import add_adam
    from ccjax.plot.cli import add_plot

    add_adam(sub)

    add_plot(sub)
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
        if args.command == "validate":
            return cmd_validate(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "scenarios":
            return cmd_scenarios(args)
        if args.command == "models":
            return cmd_models(args)
        if args.command == "ns3-bundle":
            from ccjax import ns3

            try:
                prog = ns3.bundle(args.dir)
            except OSError as e:
                where = f"{e.filename}: " if e.filename else ""
                raise ConfigError(f"dir={args.dir!r} is invalid: {where}{e.strerror or e}"
                                  ) from None
            print(f"bundled: {prog} (run it elsewhere with {ns3.PROGRAM_ENV}={prog})")
            return 0
        if args.command == "train":
            return cmd_train(args)
        if args.command == "adapt":
            return cmd_adapt(args)
        if args.command == "eval":
            return cmd_eval(args)
        if args.command == "sweep":
            return cmd_sweep(args)
        if args.command == "results":
            return cmd_results(args)
        if args.command == "prefeval":
            return cmd_prefeval(args)
        if args.command == "adam":
            from ccjax.commands.adam import cmd_adam

            return cmd_adam(args)
        if args.command == "plot":
            from ccjax.plot.cli import cmd_plot

            return cmd_plot(args)
    except ConfigError as e:
        print(f"ccjax: error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
