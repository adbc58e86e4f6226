"""Cross-validation of the packet model against ns-3 on classic TCP dumbbells.

The same scenario (flows, bottleneck bandwidth, per-flow base RTTs, drop-tail buffer, random loss,
duration) runs in ns-3 (``sims/ns3/dumbbell.cc`` through ``ccjax.ns3``) and in ccjax
(``run_controller``), and the two are compared on what the issue names, counted alike on both
sides (wire bytes of 1500-byte packets, 1448-byte payloads):

* link utilization: bytes the bottleneck sent / (capacity x duration); tolerance 0.03 absolute;
* each flow's share: its throughput / the sum of all (reported; the direction of RTT unfairness
  must be the same: with unequal RTTs, the order of the flows' throughputs by RTT);
* mean queueing delay, packet-weighted over packets that crossed the bottleneck; within 15 % or
  3 ms, whichever is looser;
* loss rate at the bottleneck (drop-tail + random) / packets that arrived there: within a factor
  of 2 where ns-3's exceeds 0.1 %;
* Jain's index over the flows' throughputs: within 0.05.

ns-3 runs each scenario with two seeds; where its own runs differ by more than a tolerance, the
tolerance is widened to that spread (for loss, to the range the seeds span).

``full_matrix()`` is the whole matrix (run by ``scripts/validate_ns3.py``, which writes
``docs/validation.md``, and ``docs/validation.json`` with ns-3's per-seed runs and the verdicts);
the test suite reruns ccjax on the whole matrix against those stored runs and requires the
report's verdicts. ``ci_matrix()`` is the subset whose ns-3 runs the test suite reruns on every
change (they must equal the stored ones), and ``CI_AGREEING`` the scenarios of it that must stay
within tolerance against them.
"""

from __future__ import annotations

import copy
import itertools
import math
import time
import zlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from ccjax.units import PACKET_BYTES

if TYPE_CHECKING:  # imported where a run needs it: this module loads without JAX
    from ccjax.sim.link import LinkSpec

#: controllers compared (ns-3's TcpNewReno, TcpCubic, TcpVegas)
VALIDATED_CC = ("newreno", "cubic", "vegas")

#: ns-3's reference seeds: their average is the reference and their spread widens the tolerances
NS3_SEEDS = (1, 2)
#: TcpCubic's HyStart tests in the matrix's ns-3 runs (``ns3.run_dumbbell``'s ``hystart_detect``):
#: the delay test alone (``HyStartDetect`` = 2), not ns-3.37's default of both (3). ccjax's CUBIC
#: has no ACK-train test (which times each ACK against the last, 2 ms apart at most, and ends slow
#: start once a round's unbroken train outlasts the minimum RTT): ccjax's controllers see a
#: measurement interval's statistics, not each ACK. With the delay test alone ns-3's HyStart never
#: ends a slow start in these dumbbells, so ccjax's runs without HyStart here
#: (``ns3_equivalent_params``). The ACK-train test does end them, well before the loss (traced, one
#: flow, 50 Mbps, 40 ms, 4 BDP, seed 1: ssthresh set to 487 packets at 0.32 s; with the delay test
#: alone the window overshoots to 1,668 and the first loss report comes at 0.61 s), so ns-3's CUBIC
#: as shipped is another reference: ``scripts/validate_ns3.py`` checks it against this one and
#: reports the count (docs/validation.md, "HyStart").
NS3_HYSTART_DETECT = "delay"
#: ccjax's seeds, averaged per scenario, in the report and in CI (one batch per controller).
#: With two, ccjax's own run-to-run noise decided many rows under random loss. Eight were not
#: enough either: four blocks of eight seeds (1-8, 9-16, 17-24, 25-32) put 153, 145, 147 and 147
#: of the 180 scenarios within every tolerance, where sixteen (1-16) and thirty-two (1-32) both
#: put 149 (distance 116.5 and 116.6; 2026-11-27, third session). The report's count then
#: depended on which eight seeds it drew, and model variants were judged on that draw. Sixteen
#: cost a fresh clone's .ci/run one to three minutes more than eight on the 2-core AMD EPYC
#: guest (10 min 50 s and 12 min 55 s on a quiet machine, against 10 min 6 s).
CCJAX_SEEDS = tuple(range(1, 17))

#: The ccjax seed whose every run of the matrix the report stores (``"ccjax_check_runs"``), run
#: by run. CI reruns the whole matrix with it alone and holds each run to the stored one, which
#: catches a model change that moves any scenario's run with this seed (the runs are
#: deterministic and do not depend on their batch; ``run_ccjax_jobs``) for a sixteenth of
#: rerunning the report's seeds there; a change that moved only other seeds' runs would pass.
#: The runs depend on the CPU's instruction set only through FMA: the matrix's 60 CUBIC runs
#: with XLA held to AVX2 (``XLA_FLAGS=--xla_cpu_max_isa=AVX2``, a CPU without AVX-512) were
#: the AVX-512 Intel Xeon guest's bit for bit; held to SSE4.2, without FMA, 44 of NewReno's 60
#: differed (2026-11-29).
#: Until 2026-11-29 (seventeenth session) CI reran the whole matrix with all sixteen seeds and
#: recomputed every verdict: 455 s of a fresh clone's 17.5-minute suite on the 2-core guest.
CCJAX_CHECK_SEEDS = (1,)

TOL_UTIL = 0.03
TOL_QDELAY_REL = 0.15
TOL_QDELAY_MS = 3.0
TOL_JAIN = 0.05
TOL_LOSS_FACTOR = 2.0
LOSS_FLOOR = 1e-3  # loss is compared only where ns-3's exceeds 0.1 %


@dataclass(frozen=True)
class Scenario:
    cc: str
    flows: int
    bw_mbps: float
    rtt_ms: tuple[float, ...]  # one per flow
    buffer_bdp: float  # buffer in bandwidth-delay products of the largest base RTT
    loss: float
    duration_s: float = 30.0

    @classmethod
    def from_record(cls, rec: dict) -> Scenario:
        """The scenario of a report's JSON record (``dataclasses.asdict`` of one)."""
        return cls(**{**rec, "rtt_ms": tuple(rec["rtt_ms"])})

    @property
    def buffer_pkts(self) -> int:
        bdp = self.bw_mbps * 1e6 / 8 * max(self.rtt_ms) * 1e-3 / PACKET_BYTES
        return max(1, round(self.buffer_bdp * bdp))

    @property
    def name(self) -> str:
        rtts = "/".join(f"{r:.0f}" for r in self.rtt_ms)
        return (f"{self.cc} {self.flows}f {self.bw_mbps:g}Mbps {rtts}ms "
                f"{self.buffer_bdp:g}BDP loss{self.loss:g}")


def _whole_ms(ms: float) -> bool:
    """``ms`` is a whole number of milliseconds up to float rounding (1.001 s is 1001 ms)."""
    return math.isclose(ms, round(ms), rel_tol=1e-9, abs_tol=1e-6)


def scenario_from_flags(cc: str, flows: int, bw_mbps: float, rtt_ms: Sequence[float],
                        buffer_bdp: float, loss: float, duration_s: float) -> Scenario:
    """A dumbbell of one's own to compare (``ccjax validate``), every field checked before
    anything runs or builds, against what both simulators accept: a one-line ``ConfigError``
    naming the field and what is allowed. ``rtt_ms``: one base RTT for every flow or one per
    flow; ``buffer_bdp``: the drop-tail buffer in bandwidth-delay products of the largest RTT
    (at least one packet)."""
    from ccjax.errors import require
    from ccjax.ns3 import MAX_FLOWS

    require(cc in VALIDATED_CC, "cc", cc, f"one of {', '.join(VALIDATED_CC)} (the controllers "
            f"ccjax runs in ns-3's arithmetic; ns-3's BBR is not a sound reference for several "
            f"flows, see sims/ns3/README.md)")
    require(isinstance(flows, int) and 1 <= flows <= MAX_FLOWS, "flows", flows,
            f"an integer from 1 to {MAX_FLOWS}")
    require(bool(np.isfinite(bw_mbps)) and 0 < bw_mbps <= 1e5, "bw_mbps", bw_mbps,
            "in (0, 1e5] Mbps")
    rtts = [float(r) for r in rtt_ms]
    require(len(rtts) in (1, flows), "rtt_ms", rtt_ms, f"one RTT or one per flow ({flows})")
    for r in rtts:
        require(bool(np.isfinite(r)) and 1.0 <= r <= 1e5, "rtt_ms", r,
                "in [1, 1e5] ms (ccjax's tick is 1 ms)")
        require(_whole_ms(r), "rtt_ms", r, "a whole number of ms: ccjax runs validation at 1 ms "
                "ticks and would round it, ns-3 would not")
    require(bool(np.isfinite(buffer_bdp)) and buffer_bdp > 0, "buffer_bdp", buffer_bdp,
            "a number > 0 (bandwidth-delay products of the largest RTT)")
    require(bool(np.isfinite(loss)) and 0.0 <= loss < 1.0, "loss", loss,
            "a probability in [0, 1)")
    require(bool(np.isfinite(duration_s)) and duration_s >= 1.0, "duration_s", duration_s,
            "a number >= 1 s")
    require(_whole_ms(duration_s * 1e3), "duration_s", duration_s, "a whole number of ms: ccjax "
            "runs validation at 1 ms ticks and would round it up, ns-3 would not")
    rtts = rtts * flows if len(rtts) == 1 else rtts
    # ns-3's senders' jitter is a packet time; ccjax models it in RTT samples only
    # (``LinkSpec.jitter_ms``), which must stay below the shortest RTT
    require(ns3_jitter_ms(bw_mbps) < min(rtts), "bw_mbps", bw_mbps,
            f"at least {PACKET_BYTES * 8 / (min(rtts) * 1e3):g} Mbps with a {min(rtts):g} ms "
            "RTT: ns-3's "
            f"senders' jitter, one packet time ({ns3_jitter_ms(bw_mbps):g} ms here), must stay "
            "below the shortest RTT, as ccjax models it")
    sc = Scenario(cc, flows, float(bw_mbps), tuple(rtts), float(buffer_bdp), float(loss),
                  float(duration_s))
    require(sc.buffer_pkts <= 10**8, "buffer_bdp", buffer_bdp,
            f"at most 1e8 packets ({sc.buffer_pkts} here)")
    # ns-3's device holds its queue plus the packet on the wire, and its queue at least one:
    # a ccjax buffer of one packet has no ns-3 equal (ns-3 would hold two)
    require(sc.buffer_pkts >= 2, "buffer_bdp", buffer_bdp,
            f"a buffer of at least 2 packets ({sc.buffer_pkts} here): ns-3's smallest, one "
            "queued and one on the wire")
    return sc


def _rtts(flows: int, unequal: bool) -> tuple[float, ...]:
    if not unequal or flows == 1:
        return (40.0,) * flows
    # spread over the 20-100 ms range, in whole ms: ccjax runs the matrix at 1 ms ticks
    # and would round 46.67 ms to 47 where ns-3 takes it as given (until 2026-11-27 the
    # four-flow rows ran ns-3 at 46.67 and 73.33 ms and ccjax at 47 and 73)
    return tuple(float(round(x)) for x in np.linspace(20.0, 100.0, flows))


def full_matrix(duration_s: float = 30.0) -> list[Scenario]:
    """Every combination of the issue's ranges: 1, 2, 4 flows; 10 and 50 Mbps; equal (40 ms)
    and unequal (20-100 ms) RTTs; 0.25, 1 and 4 BDP; 0 and 1 % random loss."""
    out = []
    for cc, flows, bw, unequal, buf, loss in itertools.product(
            VALIDATED_CC, (1, 2, 4), (10.0, 50.0), (False, True), (0.25, 1.0, 4.0), (0.0, 0.01)):
        if unequal and flows == 1:
            continue
        out.append(Scenario(cc, flows, bw, _rtts(flows, unequal), buf, loss, duration_s))
    return out


def ci_matrix(duration_s: float = 30.0) -> list[Scenario]:
    """A covering subset for the test suite: every level of every factor appears for each
    controller, and each pair of (flows, buffer) levels appears once."""
    rows = [  # flows, bw, unequal, buffer (BDP), loss
        (1, 10.0, False, 1.0, 0.0),
        (1, 50.0, False, 0.25, 0.01),
        (1, 50.0, False, 4.0, 0.0),
        (2, 10.0, True, 0.25, 0.0),
        (2, 50.0, False, 1.0, 0.01),
        (2, 10.0, False, 4.0, 0.01),
        (4, 50.0, True, 1.0, 0.0),
        (4, 10.0, False, 0.25, 0.01),
        (4, 10.0, True, 4.0, 0.0),
    ]
    return [Scenario(cc, f, bw, _rtts(f, uneq), buf, loss, duration_s)
            for cc in VALIDATED_CC for f, bw, uneq, buf, loss in rows]


#: The ``ci_matrix`` scenarios where ccjax's packet model meets every tolerance today (ns-3's
#: seeds 1 and 2 against ccjax's ``CCJAX_SEEDS``, as in the report, 30 s, window senders as
#: ``NS3_WINDOW_SENDER``). The test suite holds them there; the others are known divergences,
#: shown in docs/validation.md. Until 2026-11-27 (third session) the report averaged seeds 1 to
#: 8 and each entry also held with 9 to 16; all still hold with sixteen (1 to 16). Until
#: 2026-11-25 (sixth session) CI averaged ccjax's seeds 1 and 2 only, and the entries had to hold
#: with those and with eight; with the report's eight alone "newreno 2f 10Mbps 40/40ms 4BDP
#: loss0.01" (utilization 0.607, 0.630 with seeds 9 to 16; ns-3 0.602) and "newreno 4f 10Mbps
#: 20/47/73/100ms 4BDP loss0" (Jain 0.836 and 0.803; ns-3 0.758, its seeds 0.102 apart) joined
#: it. "vegas 2f 10Mbps 40/40ms 4BDP loss0.01" holds with seeds 1 to 8 (0.964) but sits on the
#: tolerance's edge with 9 to 16 (0.971; ns-3 0.941) and stays out. With ACK-clocked NewReno and
#: CUBIC (answering a loss report at once) three left the list, with two ccjax seeds: "newreno 2f
#: 10Mbps 40/40ms 4BDP loss0.01" (queueing delay), "newreno 4f 10Mbps 20/47/73/100ms 4BDP loss0"
#: and "cubic 2f 10Mbps 20/100ms 0.25BDP loss0" (Jain's index), and three joined it: "newreno 2f
#: 10Mbps 20/100ms 0.25BDP loss0", "cubic 2f 50Mbps 40/40ms 1BDP loss0.01", "cubic 4f 10Mbps
#: 20/47/73/100ms 4BDP loss0". With ns-3 TcpCubic's never-reset ACK counter (``Cubic._ns3``)
#: "cubic 4f 10Mbps 40/40/40/40ms 0.25BDP loss0.01" joined it (utilization 0.503 with two seeds,
#: 0.508 with eight; ns-3 0.532). With ns-3 TcpVegas' segCwnd read from the window now
#: (``VegasParams.ns3_segments``) "vegas 2f 50Mbps 40/40ms 1BDP loss0.01" joined it (utilization
#: 0.317 with two seeds, 0.316 with eight; ns-3 0.309) and "vegas 2f 10Mbps 40/40ms 4BDP
#: loss0.01" left it: 0.964 with eight seeds but 0.971 with two, against ns-3's 0.941, on the
#: tolerance's edge. The two NewReno scenarios that left then came back with eight ccjax seeds
#: (above). With equal-RTT first windows leaving the queue interleaved (``sim.core.
#: _first_windows_together``; 152 -> 153 over the matrix with seeds 1 to 8, 151 -> 152 with 9 to
#: 16) two left it: "newreno 2f 10Mbps 40/40ms 4BDP loss0.01" (queueing delay 1.1 tolerances;
#: ccjax's eight-seed mean of it is mostly noise: 6.3 ms before the change, 3.9 ms with it; with
#: it, in a batch of its own, 4.9 ms with seeds 1 to 8 and 2.6 ms with 9 to 16; ns-3 7.1 ms, its
#: seeds 2.8 ms apart) and "cubic 4f 10Mbps 40/40/40/40ms 0.25BDP loss0.01"
#: (utilization 0.504 before, 0.497 with it; 0.514 with seeds 9 to 16 in a batch of its own;
#: ns-3 0.532); "vegas 2f 10Mbps 40/40ms 4BDP loss0.01" joined it. Since the eighth
#: session of 2026-11-25 the test suite also holds every verdict of the report over the whole
#: matrix (``tests/test_ns3_validation.py``), so this list is the part of it checked against
#: ns-3 run live. With draws that no longer depend on how many flow slots a batch pads to (ninth
#: session; a scenario's runs then are those it has alone) "newreno 2f 10Mbps 40/40ms 4BDP
#: loss0.01", "cubic 4f 10Mbps 40/40/40/40ms 0.25BDP loss0.01" and "vegas 2f 10Mbps 20/100ms
#: 0.25BDP loss0" joined it and "cubic 4f 10Mbps 20/47/73/100ms 4BDP loss0" left it (Jain's index
#: 1.5 tolerances off: new draws, the same model). With ns-3 given the four unequal flows' RTTs
#: in whole ms as ccjax runs them (47 and 73 ms, not 46.67 and 73.33; 2026-11-27) three
#: left it: "newreno 4f 10Mbps 20/47/73/100ms 4BDP loss0" and "vegas 4f 50Mbps 20/47/73/100ms
#: 1BDP loss0" (outside with seeds 1 to 8 against the new ns-3 runs) and "cubic 4f 50Mbps
#: 20/47/73/100ms 1BDP loss0" (outside with seeds 9 to 16); none joined. With each flow's
#: handshake and access delay as in ns-3's dumbbell (``LinkSpec.handshake``, ``ns3_access_ms``;
#: 2026-11-27, seventh session) five joined it, all within every tolerance in the report:
#: "newreno 4f 10Mbps 40/40/40/40ms 0.25BDP loss0.01", "newreno 4f 10Mbps 20/47/73/100ms 4BDP
#: loss0", "cubic 4f 10Mbps 20/47/73/100ms 4BDP loss0", "vegas 4f 50Mbps 20/47/73/100ms 1BDP
#: loss0" and "vegas 4f 10Mbps 20/47/73/100ms 4BDP loss0"; none left. With first windows sent
#: together admitted in the order the senders' jitter gives them (``sim.core._jittered_admission``;
#: 2026-11-28) "newreno 4f 10Mbps 40/40/40/40ms 0.25BDP loss0.01" left it (utilization 0.851
#: against ns-3's 0.810, 1.4 tolerances: fewer of ccjax's flows lose their first window whole,
#: and ccjax's NewReno times out there 5.6 times a run against ns-3's 8.5); none joined. With
#: PRR held by a lost retransmission and bounded by what was delivered in its first RTT
#: (2026-11-28, tenth session) "cubic 4f 10Mbps 40/40/40/40ms 0.25BDP loss0.01" left it
#: (utilization 0.501 against ns-3's 0.532, 1.03 tolerances, where the tree before had 0.520):
#: the report's sixteen seeds' draw, not the model, moved it, since thirty-two seeds give 0.511
#: before and after; none joined. With a data packet's RTT carrying its transmission at the
#: bottleneck and Vegas's ns-3 slow-start test reading the window grown by the MI's ACKs
#: (2026-11-29, fourteenth session) "vegas 2f 50Mbps 40/40ms 1BDP loss0.01" left it (utilization
#: 0.345 against ns-3's 0.309, 1.2 tolerances; the grown window's: without it 0.321, without
#: the RTT's transmission 0.351, seeds 1-16) and "vegas 4f 10Mbps 20/47/73/100ms 4BDP loss0"
#: (queueing delay 12.7 ms against 15.9, 1.1 tolerances; 14.0 without the grown window, 13.8
#: without the transmission, 14.2 without both); "cubic 4f
#: 10Mbps 40/40/40/40ms 0.25BDP loss0.01" joined it again. With Vegas's slow start by rounds,
#: doubling per round, and the smoothed RTT moving once per ACK (2026-11-29, fifteenth session)
#: "vegas 2f 10Mbps 20/100ms 0.25BDP loss0" left it (Jain's index 0.935 against ns-3's 0.875,
#: 1.2 tolerances; shares 0.63/0.37 against 0.69/0.31)
#: and "vegas 4f 10Mbps 20/47/73/100ms 4BDP loss0" joined it again (queueing delay 17.9 ms
#: against 15.9, where it was 12.7). With Vegas's slow-start loss taking ssthresh from the
#: window ns-3's ACKs have grown (2026-11-29, seventeenth session) "vegas 2f 10Mbps 20/100ms
#: 0.25BDP loss0" (Jain's index 0.923 against 0.875) and "vegas 2f 50Mbps 40/40ms 1BDP
#: loss0.01" (utilization 0.330 against 0.309) joined it again; none left.
CI_AGREEING = (
    "newreno 1f 10Mbps 40ms 1BDP loss0",
    "newreno 1f 50Mbps 40ms 0.25BDP loss0.01",
    "newreno 1f 50Mbps 40ms 4BDP loss0",
    "newreno 2f 10Mbps 20/100ms 0.25BDP loss0",
    "newreno 2f 50Mbps 40/40ms 1BDP loss0.01",
    "newreno 4f 50Mbps 20/47/73/100ms 1BDP loss0",
    "newreno 2f 10Mbps 40/40ms 4BDP loss0.01",
    "cubic 1f 10Mbps 40ms 1BDP loss0",
    "cubic 1f 50Mbps 40ms 4BDP loss0",
    "cubic 2f 50Mbps 40/40ms 1BDP loss0.01",
    "cubic 2f 10Mbps 40/40ms 4BDP loss0.01",
    "vegas 1f 10Mbps 40ms 1BDP loss0",
    "vegas 1f 50Mbps 40ms 0.25BDP loss0.01",
    "vegas 1f 50Mbps 40ms 4BDP loss0",
    "vegas 2f 10Mbps 40/40ms 4BDP loss0.01",
    "vegas 4f 10Mbps 40/40/40/40ms 0.25BDP loss0.01",
    "newreno 4f 10Mbps 20/47/73/100ms 4BDP loss0",
    "cubic 4f 10Mbps 20/47/73/100ms 4BDP loss0",
    "vegas 4f 50Mbps 20/47/73/100ms 1BDP loss0",
    "cubic 4f 10Mbps 40/40/40/40ms 0.25BDP loss0.01",
    "vegas 4f 10Mbps 20/47/73/100ms 4BDP loss0",
    "vegas 2f 10Mbps 20/100ms 0.25BDP loss0",
    "vegas 2f 50Mbps 40/40ms 1BDP loss0.01",
)


# ------------------------------------------------------------------------------------------------
# running both sides


@dataclass(frozen=True, eq=False)
class RunSeries:
    """A run's time series, one value per ``interval_s`` from the start, the last interval
    ending at ``duration_s`` (so it may be shorter): each flow's throughput (IP bytes that
    crossed the bottleneck) and the bottleneck queue averaged over the interval, in packets.
    Both simulators report them so: ns-3's dumbbell as ``throughput_series_mbps`` and
    ``queue_series_pkts``, ccjax as ``throughput_series_mbps`` and ``queue_mean_series_pkts``
    (its ``queue_series_pkts`` is the queue at each interval's end, another quantity). Each
    flow's congestion window at each interval's end, in segments, where both report it
    (``cwnd_series_pkts``: ns-3's ``CongestionWindow`` over its segment size, ccjax's window over
    its packet size); NaN before the flow's sender exists or has a window (ns-3: null before its
    socket exists and 0 until the handshake sets the first window, which no window is after it)
    or before the flow starts (ccjax)."""

    interval_s: float
    duration_s: float
    throughput_mbps: np.ndarray  # (flows, intervals)
    queue_pkts: np.ndarray  # (intervals,)
    #: (intervals,) Jain's index of the bytes each flow delivered from the start to each
    #: interval's end (``running_jain``); of a seed mean, the mean of the runs' indices, so it
    #: ends at the seed average's ``Measured.jain`` where the flows run the whole time
    jain: np.ndarray | None = None
    #: (flows, intervals) each flow's window at each interval's end, segments; None where the
    #: summary has none. Of a seed mean, the mean over the runs that have a value there.
    cwnd_pkts: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.jain is None:
            object.__setattr__(self, "jain", running_jain(self.throughput_mbps, self.lengths_s))

    @property
    def ends_s(self) -> np.ndarray:
        """Each interval's end, s."""
        k = np.arange(1, self.queue_pkts.shape[0] + 1)
        return np.minimum(k * self.interval_s, self.duration_s)

    @property
    def lengths_s(self) -> np.ndarray:
        """Each interval's length, s (the last one may be shorter)."""
        return np.diff(self.ends_s, prepend=0.0)

    @staticmethod
    def from_summary(s: dict, flows: int) -> RunSeries | None:
        """The series of a run summary of either simulator (ns-3's names itself in
        ``sim.simulator``), or None where it has none."""
        link, sim = s.get("link", {}), s.get("sim", {})
        if str(sim.get("simulator", "")).startswith("ns-3"):
            queue = link.get("queue_series_pkts")
            dt, dur = s.get("config", {}).get("interval_s"), s.get("config", {}).get("duration_s")
        else:
            queue = link.get("queue_mean_series_pkts")
            dt = sim.get("series_interval_s")
            dur = sim["ticks"] * sim["tick_s"] if "ticks" in sim and "tick_s" in sim else None
        try:
            thr = np.asarray([f["throughput_series_mbps"] for f in s["flows"][:flows]], float)
        except (KeyError, TypeError):
            return None
        if (queue is None or dt is None or dur is None or thr.ndim != 2
                or thr.shape[1] != len(queue)):
            return None
        try:
            cwnd = np.asarray([[np.nan if w is None else w for w in f["cwnd_series_pkts"]]
                               for f in s["flows"][:flows]], float)
        except (KeyError, TypeError, ValueError):
            cwnd = None
        if cwnd is not None:
            # ns-3's dumbbell reports 0 from the socket's creation until the handshake sets the
            # first window (its first CongestionWindow trace); a window is never 0 after that
            cwnd[cwnd <= 0] = np.nan
        if cwnd is not None and cwnd.shape != thr.shape:
            cwnd = None
        return RunSeries(float(dt), float(dur), thr, np.asarray(queue, float), cwnd_pkts=cwnd)

    @staticmethod
    def mean(runs: Sequence[RunSeries | None]) -> RunSeries | None:
        """The runs' mean, interval by interval; None unless all have series of one shape."""
        if not runs or any(r is None for r in runs):
            return None
        first = runs[0]
        if any((r.interval_s, r.duration_s, r.throughput_mbps.shape)
               != (first.interval_s, first.duration_s, first.throughput_mbps.shape)
               for r in runs):
            return None
        cwnd = None
        if all(r.cwnd_pkts is not None for r in runs):
            stack = np.array([r.cwnd_pkts for r in runs])
            seen = np.isfinite(stack).sum(0)
            cwnd = np.divide(np.nansum(stack, 0), seen, out=np.full(seen.shape, np.nan),
                             where=seen > 0)
        return RunSeries(first.interval_s, first.duration_s,
                         np.mean([r.throughput_mbps for r in runs], axis=0),
                         np.mean([r.queue_pkts for r in runs], axis=0),
                         np.mean([r.jain for r in runs], axis=0), cwnd)


def delivered_so_far(thr_mbps: np.ndarray, lengths_s: np.ndarray) -> np.ndarray:
    """What each flow delivered from the start to the end of each interval (Mbit), from
    per-interval rates ``(flows, intervals)`` and the intervals' lengths (s)."""
    return np.cumsum(np.asarray(thr_mbps, float) * np.asarray(lengths_s, float), axis=1)


def running_jain(thr_mbps: np.ndarray, lengths_s: np.ndarray) -> np.ndarray:
    """Jain's index (``metrics.jain_index``) of what each flow delivered from the start to the
    end of each interval; 1 before anything was delivered (nothing is unfair yet)."""
    from ccjax.metrics import jain_index

    return np.asarray(jain_index(delivered_so_far(thr_mbps, lengths_s), axis=0), float)


def same_run(a: Measured, b: Measured) -> bool:
    """Two runs (or seed means) give the same figures, those the verdicts read (utilization,
    queueing delay, loss, Jain's index, each flow's throughput), to the last bits a rebuild may
    move: ns-3 is deterministic for a build and a seed, and ccjax for a scenario and a seed
    (``run_ccjax_jobs``), so a stored run can be held to a rerun."""
    x = [a.utilization, a.mean_queue_delay_ms, a.loss_rate, a.jain, *a.throughput_mbps]
    y = [b.utilization, b.mean_queue_delay_ms, b.loss_rate, b.jain, *b.throughput_mbps]
    return len(x) == len(y) and bool(np.allclose(x, y, rtol=1e-6, atol=1e-9))


@dataclass
class Measured:
    utilization: float
    mean_queue_delay_ms: float
    loss_rate: float
    throughput_mbps: list[float]
    wall_s: float = 0.0
    #: retransmission timeouts of all flows (seed average): ns-3's entries into CA_LOSS,
    #: ccjax's RFC 6298 expiries (the run summary's ``timeouts``; 0 for a controller that
    #: keeps no count)
    timeouts: float = 0.0
    #: A seed average's Jain index: the mean of its runs' indices (``average``); None for one
    #: run, whose index comes from its throughputs
    jain_mean: float | None = None
    #: the run's time series (of a seed average, the runs' mean), for ``ccjax validate --plot``;
    #: a report's JSON does not store them (``record``)
    series: RunSeries | None = field(default=None, repr=False, compare=False)

    def record(self) -> dict:
        """The figures as a report's JSON stores them (everything but the series)."""
        return {f.name: copy.copy(getattr(self, f.name)) for f in fields(self)
                if f.name != "series"}

    @property
    def shares(self) -> list[float]:
        tot = sum(self.throughput_mbps)
        return [x / tot if tot > 0 else 0.0 for x in self.throughput_mbps]

    @property
    def jain(self) -> float:
        """Jain's index (Jain, Chiu & Hawe 1984): (sum x)^2 / (n sum x^2) of the flows'
        throughputs; of a seed average, the mean of its runs' indices. (The index of the
        averaged throughputs would not do: which flow wins varies from seed to seed, so
        averaging more runs evens the throughputs out, and eight ccjax seeds would look fairer
        than two ns-3 seeds of the same behaviour.)"""
        if self.jain_mean is not None:
            return self.jain_mean
        x = np.asarray(self.throughput_mbps, float)
        den = len(x) * float((x * x).sum())
        return float(x.sum() ** 2 / den) if den > 0 else 1.0


def _from_summary(s: dict, flows: int, wall_s: float) -> Measured:
    return Measured(utilization=float(s["link"]["utilization"]),
                    mean_queue_delay_ms=float(s["link"]["mean_queue_delay_ms"]),
                    loss_rate=float(s["link"]["drop_rate"]),
                    throughput_mbps=[float(f["throughput_mbps"]) for f in s["flows"][:flows]],
                    wall_s=wall_s,
                    timeouts=float(sum(f.get("timeouts", 0) for f in s["flows"][:flows])),
                    series=RunSeries.from_summary(s, flows))


def scenario_seed(sc: Scenario, seed: int) -> int:
    """A seed of its own for each scenario and replicate: a scenario's ccjax result does not
    depend on which other scenarios share its batch."""
    return zlib.crc32(f"{sc.name} {sc.duration_s:g} {seed}".encode())


def ns3_access_ms(rtt_ms: Sequence[float]) -> list[float]:
    """Each flow's one-way delay to the bottleneck in ``sims/ns3/dumbbell.cc``: its access link,
    ``rtt/2 - btlDelay`` with the default ``btlDelay = min(rtt)/4``. ccjax runs the matrix with
    these and the handshake (``LinkSpec.handshake``, ``access_ms``), so that each flow's SYN and
    first data meet the queue when ns-3's do: flow i's data reaches the bottleneck at
    ``rtt_i + access_i``, 25 and 145 ms for flows of 20 and 100 ms."""
    btl = min(rtt_ms) / 4.0
    return [r / 2.0 - btl for r in rtt_ms]


def ns3_jitter_ms(bw_mbps: float) -> float:
    """The senders' jitter in ``sims/ns3/dumbbell.cc`` (``--jitterUs``' default): one bottleneck
    packet time, 1500 bytes at ``bw_mbps``, in ms. ccjax runs the matrix with it
    (``LinkSpec.jitter_ms``): ns-3's data RTTs carry its mean, half a packet time, and its
    Vegas compares them with the SYN's (measured there, one Vegas flow at 10 Mbps, 40 ms,
    1 BDP, 1 % loss, seed 2: mean smoothed RTT 42.20 ms with it, 41.54 without; the SYN's
    sample 40.00 in both)."""
    return PACKET_BYTES * 8.0 / (bw_mbps * 1e3)


def run_ccjax(scenarios: Sequence[Scenario], model: str = "packet", seeds: Sequence[int] = (1, 2),
              window_sender: str | None = None, retx_loss: bool = True,
              recovery: str | None = None) -> list[Measured]:
    """All scenarios in ccjax with each seed (averaged, like ns-3's), one compiled batch per
    (controller, duration). ``window_sender``: see ``SimConfig``; ``None`` takes each
    controller's ``NS3_WINDOW_SENDER`` (paced for one not listed there). ``retx_loss``: lost
    retransmissions (``SimConfig.retx_loss``), as ns-3.37 has them; packet model only, so it is
    not applied to the fluid model. ``recovery``: ``SimConfig.recovery``; ``None`` takes
    ``NS3_RECOVERY`` for ACK-clocked senders in the packet model, ``"cut"`` otherwise."""
    return [average(rs)[0] for rs in run_ccjax_seeds(scenarios, model, seeds, window_sender,
                                                     retx_loss, recovery)]


def run_ccjax_seeds(scenarios: Sequence[Scenario], model: str = "packet",
                    seeds: Sequence[int] = (1, 2), window_sender: str | None = None,
                    retx_loss: bool = True, recovery: str | None = None
                    ) -> list[list[Measured]]:
    """``run_ccjax``'s runs before averaging: per scenario its runs, in the order of ``seeds``."""
    jobs = [(sc, seed) for sc in scenarios for seed in seeds]
    runs = run_ccjax_jobs(jobs, model, window_sender, retx_loss, recovery)
    k = len(seeds)
    return [runs[i * k:(i + 1) * k] for i in range(len(scenarios))]


def _ccjax_link(sc: Scenario) -> LinkSpec:
    """The ccjax link of a scenario: ns-3's dumbbell, handshake, access delays and jitter."""
    from ccjax.api import link_from_flags

    return link_from_flags(flows=sc.flows, bw_mbps=sc.bw_mbps, rtt_ms=list(sc.rtt_ms),
                           buffer_pkts=sc.buffer_pkts, loss=sc.loss, handshake=True,
                           access_ms=ns3_access_ms(sc.rtt_ms), jitter_ms=ns3_jitter_ms(sc.bw_mbps))


def check_ccjax_fits(sc: Scenario, model: str, n_seeds: int) -> None:
    """A one-line ``ConfigError`` where ccjax's batch of ``n_seeds`` runs of ``sc`` would not
    fit in memory or in the simulator's tick count (``sim.link.plan``, ``sim.run.check_memory``,
    the checks ``run_ccjax`` meets), called before ns-3 runs: a refusal after ns-3's hours
    would waste them."""
    from ccjax.sim.link import plan
    from ccjax.sim.run import check_memory, make_timeline

    specs = [_ccjax_link(sc)] * n_seeds
    cfg, _ = plan(specs, sc.duration_s, n_flows=sc.flows, tick_s=1e-3, model=model)
    # run_controller's default series interval, 0.1 s
    check_memory(cfg, n_seeds, make_timeline(sc.duration_s, 0.1, cfg.tick_s),
                 others="or fewer ccjax seeds (--ccjax-seeds)")


def run_ccjax_jobs(jobs: Sequence[tuple[Scenario, int]], model: str = "packet",
                   window_sender: str | None = None, retx_loss: bool = True,
                   recovery: str | None = None) -> list[Measured]:
    """One ccjax run per (scenario, seed) job, one compiled batch per (controller, duration)
    whatever the mix of scenarios and seeds; options as ``run_ccjax``. A run depends on its
    scenario and seed alone (``scenario_seed``), not on the batch it shares: the test suite
    holds a report's stored runs to reruns in other batches (measured bit-identical)."""
    from ccjax.api import run_controller
    from ccjax.cc.registry import get_controller

    out: list[Measured | None] = [None] * len(jobs)
    groups: dict[tuple[str, float], list[int]] = {}
    for j, (sc, _) in enumerate(jobs):
        groups.setdefault((sc.cc, sc.duration_s), []).append(j)
    for (cc, duration), idx in groups.items():
        mine = [jobs[j] for j in idx]
        specs = [_ccjax_link(sc) for sc, _ in mine]
        ctl = get_controller(cc)
        n_flows = max(s.n_flows for s in specs)
        ws = window_sender or NS3_WINDOW_SENDER.get(cc, "paced")
        t0 = time.perf_counter()
        per_ack = ws == "ack-clocked" and model == "packet"
        res = run_controller(specs, ctl, ns3_equivalent_params(cc, ctl, n_flows, per_ack),
                             duration_s=duration, model=model,
                             window_sender=ws, retx_loss=retx_loss and model == "packet",
                             recovery=recovery or (NS3_RECOVERY if per_ack else "cut"),
                             link_seeds=[scenario_seed(sc, seed) for sc, seed in mine])
        wall = (time.perf_counter() - t0) / len(mine)
        for r, (j, (sc, _)) in enumerate(zip(idx, mine, strict=True)):
            out[j] = _from_summary(res.summary(r), sc.flows, wall)
    return out  # type: ignore[return-value]


#: The window sender that stands for ns-3's per-ACK sender, per controller (the packet model's
#: tables in docs/validation.md): ACK-clocked for all three, as ns-3's senders are. With the
#: window sender's MI ending at the tick that reports a loss (``sim.core``: a per-ACK sender
#: answers the third duplicate ACK at once) and CUBIC's quarter-RTT MIs, the ACK-clocked sender
#: is the closer model for each (measured, full matrix against the stored ns-3 runs, eight ccjax
#: seeds, within every tolerance: NewReno 53 of 60 ACK-clocked, 51 paced; CUBIC 46 and 42;
#: Vegas 44 ACK-clocked). Before the loss-report MI end, paced NewReno and CUBIC were the
#: closer (51 and 43 paced against 48 and 36 ACK-clocked): one-RTT MIs answered a loss up to an
#: RTT late, and ACK-clocked bursts overflowed the buffer meanwhile. Vegas's windows depend on
#: the queue its slow-start bursts build (``VegasParams.ns3_rtt``), which a paced sender does
#: not build.
NS3_WINDOW_SENDER = {"newreno": "ack-clocked", "cubic": "ack-clocked", "vegas": "ack-clocked"}

#: The loss recovery of those ACK-clocked senders in the packet model: ns-3.37's default,
#: Proportional Rate Reduction (``SimConfig.recovery``; with ``retx_loss`` the retransmissions
#: then also meet drop-tail), with NewReno's FlightSize at a loss as ns-3 counts it
#: (``NewRenoParams.ns3_pipe``). Measured, thirty-two ccjax seeds against the stored ns-3
#: runs (``scripts/score_matrix.py``; A the report's reference, B ten other ns-3 seeds),
#: within every tolerance and distance, with the drop order at an ACK-clocked queue
#: (``sim.core``, 2026-11-27's sixth session): "cut" 152 (112.9) and 145 (114.2); "prr" 154
#: (111.9) and 145 (110.6); before it "cut" 149 (116.6) and 145 (112.8), "prr" 152 (113.7)
#: and 146 (112.0). With the report's sixteen seeds the draw goes the other way: 150 (113.3)
#: against 152 (113.1, "cut" with the pipe). PRR alone kept more of a small buffer's link than
#: ns-3's NewReno (two flows, 10 Mbps, 0.25 BDP: 0.872 against 0.843; 0.882 before the drop
#: order), which the pipe gives back in part (0.860). Without random loss ccjax's timeouts per
#: flow per 30 s come to ns-3's (NewReno 0.21 and 0.21, CUBIC 0.34 and 0.28; 0.05 each before).
#: The 2026-11-27 entries of docs/validation-history.md have the steps. Since 2026-11-28's tenth
#: session PRR runs as ns-3's does in two more ways (``sim.core``): a lost retransmission holds
#: the recovery until the timer, and below ssthresh the recovery's first RTT sends only what
#: the last tick delivered (thirty-two seeds: 157 (105.7) and 158 (99.0) -> 158 (103.6) and
#: 160 (95.4)).
NS3_RECOVERY = "prr"


def ns3_equivalent_params(cc: str, ctl, n_flows: int, per_ack: bool = False):
    """ccjax's parameters for ``cc`` that match what ns-3.37 implements.

    ``per_ack`` (default False; ``run_ccjax`` sets it): the sender stands for ns-3's per-ACK
    one (ACK-clocked, packet model; the report's tables). Only then does NewReno take ns-3's
    FlightSize at recovery entry, RFC 6675's pipe at the third duplicate ACK (``ns3_pipe``):
    it corrects for when the simulator reports the hole relative to the ACKs around it,
    measured with that sender (with paced senders it cost NewReno 7 of its 48 scenarios).

    ns-3.37's TcpCubic has no Reno-friendly region (RFC 9438 §4.3; its state has no W_est), so
    ccjax's CUBIC runs without it here. Its HyStart, with the delay test alone as the matrix runs it
    (``NS3_HYSTART_DETECT``), never ends a slow start in these dumbbells: runs with HyStart on and
    off are identical (measured: one flow, 10 and 50 Mbps, 1 and 4 BDP, 30 s; drop rate, utilization
    and queueing delay equal to the last digit), so ccjax's HyStart is off here too. ns-3's
    ``TcpCubic::Update`` and ``GetSsThresh`` work in whole segments (``ns3_integer``; see
    ``Cubic._ns3``): the cubic offset truncated, so the target sits at W_max for 1.36 s either side
    of K, and ssthresh ``floor(0.7 segCwnd)``. Measured (packet model, paced, one-RTT MIs, the 60
    CUBIC scenarios of ``full_matrix`` against the stored ns-3 runs): 37 within every tolerance with
    the RFC's arithmetic, 42 with ns-3's (random loss: 14 -> 17 of 30; none lost). ``ns3_integer``
    also keeps TcpCubic's ACK counter ``m_cWndCnt``, which ns-3 never resets (a plateau banks ACKs
    that pay a segment per ACK after the next reduction): ACK-clocked, quarter-RTT MIs, eight ccjax
    seeds, 46 -> 51 of the 60 (random loss: 19 -> 24 of 30).

    ns-3.37's TcpVegas doubles its window every RTT in slow start (``ss_every_other_rtt`` off),
    answers a loss with ``GetSsThresh`` = one packet below the window, which is also where it
    puts ssthresh when it leaves slow start or shrinks the window (``ns3_loss``), and does
    ``IncreaseWindow``'s arithmetic in whole segments: ``targetCwnd`` truncated, ``diff =
    segCwnd - targetCwnd`` an integer, the window set to whole segments (``ns3_segments``). The
    truncation rounds Diff up by up to a packet, so ns-3's Vegas keeps about one packet less
    queued and holds in the wider band 1 < Diff <= 4. Measured (packet model, 60 Vegas
    scenarios of ``full_matrix``): 21 within every tolerance before these two, 35 with the
    whole segments, 36 with the ssthresh rule as well. ``segCwnd`` is the window when the round
    ends, not the one that produced its RTTs (also ``ns3_segments``): ACK-clocked, eight ccjax
    seeds, Jain of averaged throughputs, 44 -> 49 of the 60 (random loss at 50 Mbps, where
    Vegas slow-starts after each timeout: 9 -> 14 of 15).

    ns-3.37 hands a congestion control ``m_lastRtt``, which ``TcpSocketBase::EstimateRtt`` sets
    to the RTT estimator's *smoothed* value, not the sample; TcpVegas takes the lowest of those
    over a round as its RTT and the lowest ever as BaseRTT (``ns3_rtt``). With ACK-clocked
    senders (``NS3_WINDOW_SENDER``), two seeds, the 60 Vegas scenarios: 32 within every
    tolerance without it, 44 with it (paced: 38 without, 34 with).

    ns-3's TcpVegas counts rounds by ``m_begSndNxt`` and, in slow start, grows a segment per ACK
    within them, doubling per round; ccjax's Vegas ends slow start's MIs with the round and
    doubles the window at each (``ns3_rounds``): thirty-two ccjax seeds, with the smoothed RTT
    moving once per ACK, 51 -> 53 of the 60 against the report's ns-3 runs, 52 -> 55 against
    ns-3's ten-seed mean (``VegasParams`` has the figures)."""
    import jax.numpy as jnp

    p = ctl.default_params(n_flows)
    if cc == "newreno" and per_ack:
        # ns-3's FlightSize at recovery entry: RFC 6675's pipe at the third duplicate ACK.
        p = p.replace(ns3_pipe=jnp.ones(n_flows, bool))
    if cc == "cubic":
        p = p.replace(reno_friendly=jnp.zeros(n_flows, bool), hystart=jnp.zeros(n_flows, bool),
                      ns3_integer=jnp.ones(n_flows, bool))
    if cc == "vegas":
        # ns-3's TcpVegas: slow start doubles every RTT, a loss costs one packet of window and
        # ssthresh goes one packet below the window (GetSsThresh), IncreaseWindow counts in
        # whole segments (truncated targetCwnd, integer diff and window), reads the smoothed
        # RTT, and counts rounds by m_begSndNxt.
        p = p.replace(ss_every_other_rtt=jnp.zeros(n_flows, bool),
                      ns3_loss=jnp.ones(n_flows, bool),
                      ns3_segments=jnp.ones(n_flows, bool),
                      ns3_rtt=jnp.ones(n_flows, bool),
                      # (rounds make up for an ACK-clocked sender sending a window's growth
                      # in the next MI; a paced sender is no model of ns-3's)
                      ns3_rounds=jnp.full(n_flows, per_ack))
    return p


@dataclass
class Spread:
    """How far ns-3 runs of one scenario with different seeds lie apart (max - min)."""

    utilization: float
    mean_queue_delay_ms: float
    jain: float
    #: the lowest and highest loss rate of the seeds (None: not known, the average alone)
    loss_min: float | None = None
    loss_max: float | None = None
    #: each seed's per-flow throughputs, Mbps (None: not known); where the seeds disagree on the
    #: direction of RTT unfairness, either direction is ns-3's
    seed_throughputs: tuple[tuple[float, ...], ...] | None = None

    @staticmethod
    def none(ref: Measured) -> Spread:
        """No spread: one run, or the seed average alone (the loss range is the average)."""
        return Spread(0.0, 0.0, 0.0, ref.loss_rate, ref.loss_rate)


def average(runs: Sequence[Measured]) -> tuple[Measured, Spread]:
    """The seed average of ns-3 runs of one scenario, and their spread."""
    def col(f):
        return np.asarray([f(m) for m in runs], float)

    util, qd, loss = col(lambda m: m.utilization), col(lambda m: m.mean_queue_delay_ms), \
        col(lambda m: m.loss_rate)
    jain = col(lambda m: m.jain)
    thr = np.mean([m.throughput_mbps for m in runs], axis=0)
    mean = Measured(float(util.mean()), float(qd.mean()), float(loss.mean()),
                    [float(x) for x in thr], float(sum(m.wall_s for m in runs)),
                    float(np.mean([m.timeouts for m in runs])), float(jain.mean()),
                    RunSeries.mean([m.series for m in runs]))
    return mean, Spread(float(np.ptp(util)), float(np.ptp(qd)), float(np.ptp(jain)),
                        float(loss.min()), float(loss.max()),
                        tuple(tuple(float(x) for x in m.throughput_mbps) for m in runs))


def run_ns3(scenarios: Sequence[Scenario], seeds: Sequence[int] = NS3_SEEDS, workers: int = 2,
            hystart_detect: str | None = None
            ) -> list[tuple[Measured, Spread]]:
    """All scenarios in ns-3 with each seed, ``workers`` processes at a time; per scenario the
    seed average and the seed-to-seed spread. ``hystart_detect``: TcpCubic's HyStart tests
    (``None``: ``NS3_HYSTART_DETECT``, the matrix's)."""
    return [average(runs) for runs in run_ns3_seeds(scenarios, seeds, workers, hystart_detect)]


def run_ns3_seeds(scenarios: Sequence[Scenario], seeds: Sequence[int], workers: int = 2,
                  hystart_detect: str | None = None) -> list[list[Measured]]:
    """All scenarios in ns-3 with each seed, ``workers`` processes at a time; per scenario its
    runs, in the order of ``seeds``. ``hystart_detect``: TcpCubic's HyStart tests (``None``:
    ``NS3_HYSTART_DETECT``, the matrix's; ``"both"`` is ns-3's default)."""
    from ccjax import ns3

    hystart = NS3_HYSTART_DETECT if hystart_detect is None else hystart_detect
    ns3.build()

    def one(job: tuple[Scenario, int]) -> Measured:
        sc, seed = job
        # ns-3's device holds buffer_pkts waiting plus the one on the wire; ccjax's buffer counts
        # the unsent rest of the packet on the wire: one packet fewer makes them the same.
        s = ns3.run_dumbbell(flows=sc.flows, bw_mbps=sc.bw_mbps, rtt_ms=list(sc.rtt_ms),
                             buffer_pkts=max(1, sc.buffer_pkts - 1), loss=sc.loss, cc=sc.cc,
                             duration_s=sc.duration_s, seed=seed, hystart_detect=hystart)
        return _from_summary(s, sc.flows, float(s.get("sim", {}).get("wall_s", 0.0)))

    jobs = [(sc, seed) for sc in scenarios for seed in seeds]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        runs = list(ex.map(one, jobs))
    k = len(seeds)
    return [runs[i * k:(i + 1) * k] for i in range(len(scenarios))]


def ns3_against_itself(scenarios: Sequence[Scenario], ref: Sequence[tuple[Measured, Spread]],
                       runs: Sequence[Sequence[Measured]]) -> list[Comparison]:
    """Other ns-3 runs of the scenarios, averaged, checked against ns-3's reference rows
    (``ref``, seeds 1 and 2) exactly as ccjax is (``compare``). With other seeds (the report's
    self-check): how often a model that *is* ns-3, and differs from the reference only by its
    seeds, meets the tolerances, the most any model can be expected to reach on this matrix.
    With the same seeds and another configuration (the report's ns-3 CUBIC as shipped): how
    far that configuration moves ns-3."""
    return [compare(sc, r, average(rs)[0], sp)
            for sc, (r, sp), rs in zip(scenarios, ref, runs, strict=True)]


def runs_as_records(scenarios: Sequence[Scenario], seeds: Sequence[int],
                    runs: Sequence[Sequence[Measured]]) -> dict:
    """Per-seed runs of ``scenarios`` (ns-3's or ccjax's) as a report's JSON stores them."""
    return {"seeds": list(seeds),
            "rows": [{"scenario": asdict(sc), "runs": [m.record() for m in rs]}
                     for sc, rs in zip(scenarios, runs, strict=True)]}


def ns3_runs_from_records(scenarios: Sequence[Scenario], seeds: Sequence[int], path,
                          key: str = "ns3_self") -> list[list[Measured]] | None:
    """Per-seed ns-3 runs of ``scenarios`` stored by ``runs_as_records`` under a report's
    ``key`` (the self-check's by default), or None where the report has none for these seeds and
    scenarios (then they are run)."""
    from ccjax.errors import ConfigError

    try:
        return _stored_runs(scenarios, path, key, seeds)
    except ConfigError:
        return None


# ------------------------------------------------------------------------------------------------
# comparing


@dataclass
class Comparison:
    scenario: Scenario
    ns3: Measured
    ccjax: Measured
    checks: dict[str, bool] = field(default_factory=dict)
    spread: Spread | None = None
    #: how far ccjax is from ns-3 per numeric check, in units of that check's tolerance (as
    #: widened): |difference| / tolerance for utilization, queueing delay and Jain's index;
    #: for loss log2 of the factor by which ccjax's rate lies outside ns-3's range (0 inside
    #: it). A check holds where its value is at most 1.
    reach: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def failures(self) -> list[str]:
        return [k for k, v in self.checks.items() if not v]

    def how_far(self) -> list[str]:
        """The failed checks with how far each is off: ``"jain 1.8 tol"`` (the difference is
        1.8 times the tolerance), ``"loss 12x low"`` (ccjax's loss rate is a twelfth of the
        lowest of ns-3's seeds; ``high``: above the highest; the tolerance is a factor of 2);
        the RTT-unfairness check has no size."""
        out = []
        for k in self.failures():
            r = self.reach.get(k)
            if r is None:
                out.append(k)
            elif k == "loss":
                side = "low" if self.ccjax.loss_rate < self.ns3.loss_rate else "high"
                out.append(f"loss {_fmt_factor(TOL_LOSS_FACTOR ** r)}x {side}")
            else:
                out.append(f"{k} {r:.1f} tol")
        return out


def _fmt_factor(x: float) -> str:
    return ">999" if not np.isfinite(x) or x > 999 else f"{x:.1f}"


def rtt_order_preserved(sc: Scenario, a: Measured, b: Measured,
                        seeds: Sequence[Sequence[float]] | None = None) -> bool:
    """With unequal RTTs, the shortest-RTT flow's share exceeds the longest's in both or in
    neither (the direction of RTT unfairness) of ``a`` (ns-3's seed average) and ``b``.
    ``seeds``: ns-3's per-seed throughputs; where two seeds show opposite directions (each
    beyond a tie), ns-3 has no direction of its own to preserve, as the other checks widen to
    what its seeds span."""
    if len(set(sc.rtt_ms)) < 2:
        return True
    lo, hi = int(np.argmin(sc.rtt_ms)), int(np.argmax(sc.rtt_ms))

    def lead(thr: Sequence[float]) -> int:
        # Shares within 2 % of each other are a tie: no direction.
        d = thr[lo] - thr[hi]
        return 0 if abs(d) < 0.02 * max(sum(thr), 1e-9) else (1 if d > 0 else -1)

    if seeds is not None and {1, -1} <= {lead(t) for t in seeds}:
        return True
    da = lead(a.throughput_mbps)
    db = b.throughput_mbps[lo] - b.throughput_mbps[hi]
    return da == 0 or (da > 0) == (db > 0)


def tolerances(ref: Measured, spread: Spread | None = None) -> dict:
    """The issue's tolerances around ns-3's seed average ``ref``, each widened to ns-3's own
    seed-to-seed ``spread`` where that is larger: the largest allowed difference for
    ``"utilization"``, ``"queue delay"`` (ms) and ``"jain"``; for ``"loss"`` the allowed range of
    loss rates ``(low, high)``, or None where ns-3's loss rate is at most ``LOSS_FLOOR`` (not
    compared)."""
    sp = spread or Spread.none(ref)
    out: dict = {
        "utilization": max(TOL_UTIL, sp.utilization),
        "queue delay": max(TOL_QDELAY_REL * ref.mean_queue_delay_ms, TOL_QDELAY_MS,
                           sp.mean_queue_delay_ms),
        "jain": max(TOL_JAIN, sp.jain),
        "loss": None,
    }
    rng = _ns3_loss_range(ref, spread)
    if rng is not None:
        # Within a factor of 2 of ns-3's seed average, or of the range its seeds span.
        out["loss"] = (rng[0] / TOL_LOSS_FACTOR, rng[1] * TOL_LOSS_FACTOR)
    return out


def _ns3_loss_range(ref: Measured, spread: Spread | None) -> tuple[float, float] | None:
    """The loss rates ns-3's seeds span (with their average), or None where ns-3's loss rate
    is at most ``LOSS_FLOOR`` (loss is not compared there)."""
    if ref.loss_rate <= LOSS_FLOOR:
        return None
    if spread is None or spread.loss_min is None or spread.loss_max is None:
        return ref.loss_rate, ref.loss_rate
    return min(ref.loss_rate, spread.loss_min), max(ref.loss_rate, spread.loss_max)


def compare(sc: Scenario, ref: Measured, got: Measured, spread: Spread | None = None
            ) -> Comparison:
    """Check ``got`` (ccjax) against ``ref`` (ns-3's seed average) with the issue's tolerances,
    widened to ns-3's own seed-to-seed spread where that is larger (``tolerances``): a
    difference ns-3 shows between two of its own runs is not evidence against the model."""
    sp = spread or Spread.none(ref)
    tol = tolerances(ref, spread)
    d_util = abs(got.utilization - ref.utilization)
    d_qd = abs(got.mean_queue_delay_ms - ref.mean_queue_delay_ms)
    d_jain = abs(got.jain - ref.jain)
    checks = {
        "utilization": d_util <= tol["utilization"],
        "queue delay": d_qd <= tol["queue delay"],
        "jain": d_jain <= tol["jain"],
        "rtt unfairness": rtt_order_preserved(sc, ref, got, sp.seed_throughputs),
    }
    reach = {"utilization": d_util / tol["utilization"],
             "queue delay": d_qd / tol["queue delay"], "jain": d_jain / tol["jain"]}
    if tol["loss"] is not None:
        lo, hi = tol["loss"]
        checks["loss"] = lo <= got.loss_rate <= hi
        r_lo, r_hi = _ns3_loss_range(ref, spread)
        off = max(r_lo / max(got.loss_rate, 1e-300), got.loss_rate / r_hi, 1.0)
        reach["loss"] = float(np.log(off) / np.log(TOL_LOSS_FACTOR))
    return Comparison(sc, ref, got, checks, sp, reach)


#: ``distance`` counts no check further off than this many tolerances (one scenario far off
#: should not outweigh many near misses)
DISTANCE_CAP = 3.0


def distance(rows: Iterable[Comparison]) -> float:
    """A continuous measure of a model's agreement with ns-3 over ``rows``: the sum over the
    scenarios of their worst check's ``reach`` (in tolerances; loss in log2 of its factor
    outside ns-3's range), each capped at ``DISTANCE_CAP``. Lower is closer; a scenario within
    every tolerance adds at most 1. Unlike the count of scenarios within tolerance it moves
    with every scenario, not only with those near a tolerance's edge, so it tells a change to the
    model from seed noise better (over the full matrix, eight ccjax seeds: 112.6 with seeds 1
    to 8, 113.2 with 9 to 16, measured 2026-11-25 in the ninth session; 112.4 and 109.3 with
    the loss episodes by stream position, 2026-11-26; 110.9 and 109.8 with NewReno halving a
    per-ACK sender's flight at a slow-start loss, the same day)."""
    return float(sum(min(max(r.reach.values(), default=0.0), DISTANCE_CAP) for r in rows))


def validate(scenarios: Sequence[Scenario], model: str = "packet", workers: int = 2,
             seeds: Sequence[int] = NS3_SEEDS,
             ccjax_seeds: Sequence[int] = CCJAX_SEEDS) -> list[Comparison]:
    """ns-3 with ``seeds`` against ccjax with ``ccjax_seeds`` (by default as in the report)."""
    ref = run_ns3(scenarios, seeds=seeds, workers=workers)
    got = run_ccjax(scenarios, model=model, seeds=ccjax_seeds)
    return [compare(sc, r, g, sp) for sc, (r, sp), g in zip(scenarios, ref, got, strict=True)]


# ------------------------------------------------------------------------------------------------
# report


def _fmt_shares(m: Measured) -> str:
    return "/".join(f"{x:.2f}" for x in m.shares)


def markdown_table(rows: Iterable[Comparison], title: str,
                   itself: Sequence[Comparison] | None = None, itself_label: str = "") -> str:
    """One controller's table. ``itself``: ns-3 with other seeds against the same reference
    (``ns3_against_itself``), one per row, shown as a last column headed ``itself_label``."""
    rows = list(rows)
    n_ok = sum(r.ok for r in rows)
    head = f"{n_ok} of {len(rows)} scenarios within every tolerance"
    if itself is not None:
        head += f"; ns-3 itself ({itself_label}): {sum(c.ok for c in itself)} of {len(itself)}"
    lines = [f"### {title}", "", head + ".", "",
             "| scenario | util ns-3 | util ccjax | qdelay ms ns-3 | qdelay ms ccjax | "
             "loss ns-3 | loss ccjax | Jain ns-3 | Jain ccjax | shares ns-3 | shares ccjax | "
             "ns-3 seed spread (util, qdelay, Jain, loss range) | outside tolerance (by how "
             "much) |"
             + (f" ns-3 itself ({itself_label}): outside tolerance (by how much) |"
                if itself is not None
                else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"
             + ("---|" if itself is not None else "")]
    for i, r in enumerate(rows):
        a, b = r.ns3, r.ccjax
        sp = r.spread or Spread.none(a)
        lines.append(
            f"| {r.scenario.name} ({r.scenario.buffer_pkts} pkts) | {a.utilization:.3f} | "
            f"{b.utilization:.3f} | {a.mean_queue_delay_ms:.1f} | {b.mean_queue_delay_ms:.1f} | "
            f"{a.loss_rate:.4f} | {b.loss_rate:.4f} | {a.jain:.3f} | {b.jain:.3f} | "
            f"{_fmt_shares(a)} | {_fmt_shares(b)} | {sp.utilization:.3f}, "
            f"{sp.mean_queue_delay_ms:.1f}, {sp.jain:.3f}, {sp.loss_min:.4f}-{sp.loss_max:.4f} | "
            f"{', '.join(r.how_far()) or '-'} |"
            + (f" {', '.join(itself[i].how_far()) or '-'} |" if itself is not None else ""))
    return "\n".join(lines) + "\n"


def as_records(rows: Iterable[Comparison]) -> list[dict]:
    return [{"scenario": asdict(r.scenario), "ns3": r.ns3.record(), "ccjax": r.ccjax.record(),
             "ns3_spread": asdict(r.spread) if r.spread else None, "checks": r.checks,
             "reach": r.reach}
            for r in rows]


def ns3_from_records(scenarios: Sequence[Scenario], path, seeds: Sequence[int] = NS3_SEEDS
                     ) -> list[tuple[Measured, Spread]]:
    """ns-3's seed averages and spreads for ``scenarios`` (``ns3_reference_runs``, averaged)."""
    return [average(rs) for rs in ns3_reference_runs(scenarios, path, seeds)]


def ns3_reference_runs(scenarios: Sequence[Scenario], path, seeds: Sequence[int] = NS3_SEEDS
                       ) -> list[list[Measured]]:
    """ns-3's per-seed reference runs of ``scenarios``, read from a report's JSON (``"ns3_runs"``,
    ``runs_as_records``) instead of rerun: ns-3 is deterministic for a given build and seed,
    so this lets the ccjax side be regenerated alone. Every scenario must be there, with these
    seeds; anything else is a one-line ``ConfigError``."""
    return _stored_runs(scenarios, path, "ns3_runs", seeds)


def ccjax_check_runs(scenarios: Sequence[Scenario], path) -> list[list[Measured]]:
    """The report's stored ccjax runs of ``scenarios`` with ``CCJAX_CHECK_SEEDS`` (per scenario,
    in seed order); a one-line ``ConfigError`` where they are not all there."""
    return _stored_runs(scenarios, path, "ccjax_check_runs", CCJAX_CHECK_SEEDS, what="ccjax")


def _stored_runs(scenarios: Sequence[Scenario], path, key: str, seeds: Sequence[int],
                 what: str = "ns-3") -> list[list[Measured]]:
    """The per-seed runs (ns-3's, or ccjax's: ``what``) of ``scenarios`` stored under ``key`` of
    a report's JSON (``runs_as_records``); a one-line ``ConfigError`` where the file, the
    key, the seeds or a scenario is not there."""
    import json
    from pathlib import Path

    from ccjax.errors import ConfigError

    src = f"--ns3-from {path}" if what == "ns-3" else str(path)
    fix = ("rerun without --ns3-from" if what == "ns-3"
           else "regenerate it with scripts/validate_ns3.py")
    try:
        rec = json.loads(Path(path).read_text())
        rec = rec[key]
    except KeyError:
        raise ConfigError(f"{src}: holds no per-seed {what} runs (\"{key}\"; "
                          f"reports written before they were stored have only averages); "
                          f"allowed: a report written by this version, or {fix}") from None
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(f"{src}: not a validation report's JSON ({e})") from None
    runs = _runs_by_scenario(rec, seeds)
    if runs is None:
        raise ConfigError(f"{src}: its {what} runs are of seeds "
                          f"{rec.get('seeds') if isinstance(rec, dict) else None}, not "
                          f"{list(seeds)}; allowed: a report with the same seeds, or {fix}")
    missing = [sc.name for sc in scenarios if sc not in runs]
    if missing:
        raise ConfigError(f"{src}: no {what} rows for {len(missing)} scenario(s), "
                          f"e.g. {missing[0]!r}; allowed: a report of the same matrix and "
                          f"duration")
    return [runs[sc] for sc in scenarios]


def _runs_by_scenario(rec, seeds: Sequence[int]) -> dict | None:
    """``runs_as_records``'s record -> {scenario: runs}; None for other seeds. Keyed by the
    whole scenario, not its name: a name rounds the RTTs, and runs of other RTTs must not
    stand in."""
    if not isinstance(rec, dict) or list(rec.get("seeds", [])) != list(seeds):
        return None
    out = {}
    for r in rec.get("rows", []):
        sc = Scenario.from_record(r["scenario"])
        out[sc] = [Measured(**m) for m in r["runs"]]
    return out


def summary_counts(rows: Sequence[Comparison]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r.checks})
    return {k: sum(r.checks.get(k, True) for r in rows) / max(len(rows), 1) for k in keys} | {
        "all": sum(r.ok for r in rows) / max(len(rows), 1)}


__all__ = [
    "Scenario", "Measured", "RunSeries", "delivered_so_far", "running_jain", "same_run",
    "Spread", "average", "Comparison",
    "full_matrix", "ci_matrix",
    "run_ccjax", "run_ccjax_seeds", "run_ccjax_jobs", "run_ns3", "run_ns3_seeds",
    "ns3_against_itself", "runs_as_records",
    "ns3_runs_from_records", "NS3_WINDOW_SENDER", "NS3_RECOVERY", "NS3_HYSTART_DETECT",
    "ns3_equivalent_params",
    "compare",
    "validate", "markdown_table", "as_records",
    "ns3_from_records", "ns3_reference_runs", "ccjax_check_runs", "CCJAX_CHECK_SEEDS",
    "summary_counts", "rtt_order_preserved", "distance",
]
