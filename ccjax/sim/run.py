"""Drivers that run the simulator over time and links, and the summary of a run.

``make_runner`` builds one jitted function ``run(links, cc_params, keys)`` that simulates a
batch of links (``vmap``) for a fixed number of ticks (``lax.scan`` over reporting intervals, each
a scan over ticks), returning the final state and per-interval ``Totals`` series. Everything a
summary needs comes from those series, computed in one place (``summarize``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ccjax.cc.base import Controller
from ccjax.errors import ConfigError
from ccjax.sim.compact import is_per_flow, leads_with, on_interval_where, pays_off
from ccjax.sim.core import (
    SimState,
    Totals,
    any_fresh,
    init_state,
    rtt_correction_ticks,
    tick,
    tick_begin,
    tick_end,
    transmission_ticks,
)
from ccjax.sim.link import NEVER_TICK, LinkParams, SimConfig
from ccjax.sim.stats import hist_quantile
from ccjax.units import PACKET_BYTES, PAYLOAD_BYTES


@dataclass(frozen=True)
class Timeline:
    """How a run of ``total_ticks`` splits into reporting intervals of ``interval_ticks``; a final
    shorter interval holds the remainder, so the run covers exactly the requested duration."""

    total_ticks: int
    interval_ticks: int

    @property
    def n_full(self) -> int:
        return self.total_ticks // self.interval_ticks

    @property
    def remainder(self) -> int:
        return self.total_ticks - self.n_full * self.interval_ticks

    def lengths(self) -> np.ndarray:
        tail = [self.remainder] if self.remainder else []
        return np.array([self.interval_ticks] * self.n_full + tail, dtype=np.int64)


def make_timeline(duration_s: float, interval_s: float, tick_s: float) -> Timeline:
    total = int(math.ceil(duration_s / tick_s - 1e-9))
    interval = max(1, int(round(interval_s / tick_s)))
    return Timeline(total_ticks=total, interval_ticks=min(interval, total))


def _scan_ticks(cfg: SimConfig, controller: Controller, links: LinkParams, cc_params: Any,
                s: SimState, t0: jnp.ndarray, n: int) -> tuple[SimState, jnp.ndarray]:
    """``n`` ticks of a batch of links: a scan over time of a vmap over links, with the common
    tick index carried unbatched (see ``core.tick``)."""
    if pays_off(controller) and leads_with((s.cc, s.decision, cc_params), s.mi_done.shape):
        # the controller asked only for the flows whose MI ended (``sim.compact``)
        begin = jax.vmap(lambda lk, st, t, f: tick_begin(cfg, lk, st, t, fresh=f),
                         in_axes=(0, 0, None, None))
        end = jax.vmap(lambda st, p, c, d: tick_end(cfg, st, p, c, d))

        def step(lk, prm, st, t):
            p = begin(lk, st, t, any_fresh(lk, st))
            new_cc, new_dec = on_interval_where(controller, p.state.cc, p.stats, prm,
                                                p.state.decision, p.state.mi_done)
            return end(st, p, new_cc, new_dec)
    else:
        vstep = jax.vmap(lambda lk, p, st, t, f: tick(cfg, controller, lk, p, st, t, fresh=f),
                         in_axes=(0, 0, 0, None, None))

        def step(lk, prm, st, t):
            return vstep(lk, prm, st, t, any_fresh(lk, st))

    def body(carry, _):
        st, t = carry
        return (step(links, cc_params, st, t), t + 1), None

    (s, t), _ = jax.lax.scan(body, (s, t0), None, length=n)
    return s, t


def make_runner(cfg: SimConfig, controller: Controller, timeline: Timeline, mesh: Any = None):
    """A jitted ``run(links, cc_params, keys) -> (final_state, series, queue_end, cwnd_end)``
    over a batch of links.

    ``series`` is a ``Totals`` with a leading (links, intervals) shape; ``queue_end`` the queue
    at each interval's end (links, intervals), and ``cwnd_end`` the window each sender is held
    to then (links, intervals, flows; bytes, infinite for a rate sender without one). With a
    ``mesh`` (``devices.batch_mesh``: the batch split over its ``links`` axis, as
    ``devices.shard_batch`` places it) each device runs its own links as a program of its own
    (``shard_map``): links never interact, and a step that looks across the batch
    (``sim.compact``) then stays on its device.
    """
    zeros = Totals.zeros(cfg.n_flows, cfg.rtt_bins)

    def interval(links, cc_params, carry, n):
        s, t = carry
        B = links.buffer_bytes.shape[0]
        s = s.replace(tot=jax.tree.map(lambda z: jnp.broadcast_to(z, (B,) + z.shape), zeros))
        s, t = _scan_ticks(cfg, controller, links, cc_params, s, t, n)
        # the unserved bytes (what the buffer holds) and the window each sender is held to
        return (s, t), (s.tot, s.work, jnp.maximum(s.decision.cwnd, cfg.min_cwnd))

    def run_batch(links: LinkParams, cc_params: Any, keys: jnp.ndarray):
        s = jax.vmap(lambda lk, p, k: init_state(cfg, lk, controller, p, k))(
            links, cc_params, keys)
        carry = (s, jnp.zeros((), jnp.int32))
        outs = []
        if timeline.n_full:
            def full(c, _):
                return interval(links, cc_params, c, timeline.interval_ticks)

            carry, o = jax.lax.scan(full, carry, None, length=timeline.n_full)
            outs.append(o)
        if timeline.remainder:
            carry, o = interval(links, cc_params, carry, timeline.remainder)
            outs.append(jax.tree.map(lambda x: x[None], o))
        tot, qend, cwnd = jax.tree.map(lambda *xs: jnp.concatenate(xs, 0), *outs)
        # scans stack intervals first; the public layout is (links, intervals, ...)
        return (carry[0], jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), tot), qend.T,
                jnp.swapaxes(cwnd, 0, 1))

    if mesh is not None:
        from jax.sharding import PartitionSpec

        spec = PartitionSpec("links")
        # (check_vma off: the carries start from constants, which it would ask to mark varying)
        run_batch = jax.shard_map(run_batch, mesh=mesh, in_specs=spec, out_specs=spec,
                                  check_vma=False)
    return jax.jit(run_batch)


@dataclass
class RunResult:
    """One batch run: inputs, the final state, per-interval series and timings."""

    cfg: SimConfig
    timeline: Timeline
    links: LinkParams
    state: SimState
    series: Totals
    queue_end: np.ndarray
    wall_s: float
    compile_s: float
    #: (links, intervals, flows) the window each sender was held to at each interval's end,
    #: bytes (``make_runner``); None for results built without it
    cwnd_end: np.ndarray | None = None

    def summary(self, i: int = 0) -> dict:
        return summarize(self, i)


@dataclass(frozen=True)
class FoldedSwitches:
    """``inner`` with the boolean parameters that hold one value over the whole batch made
    compile-time constants.

    Controllers keep their mode switches (CUBIC's ``ns3_integer``, ``reno_friendly``,
    ``hystart``; Vegas's ns-3 modes) as per-flow arrays, so that a sweep can vmap over them, and
    compute both sides of each. Where a switch is the same on every flow of every link, as in
    any run of one configuration, XLA folds the side not taken away. The parameters it is
    called with are the others (``dyn``, the leaves left in order); the results are the same as
    ``inner``'s with the full parameters (``test_sim_laws``)."""

    inner: Controller
    treedef: Any
    #: (leaf index, value, per-link shape), in increasing index
    frozen: tuple[tuple[int, bool, tuple[int, ...]], ...]

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def per_flow(self) -> bool:
        return is_per_flow(self.inner)

    def full(self, dyn: tuple, n: int | None = None) -> Any:
        """The full parameters; ``n`` replaces the leading (flow) axis of the frozen leaves,
        for a call on ``n`` flows gathered from the batch (``sim.compact``)."""
        leaves = list(dyn)
        for i, value, shape in self.frozen:
            s = shape if n is None or not shape else (n,) + shape[1:]
            leaves.insert(i, jnp.full(s, value, bool))
        return jax.tree.unflatten(self.treedef, leaves)

    def default_params(self, n_flows: int) -> Any:
        return self.inner.default_params(n_flows)

    def init(self, params: tuple, base_rtt_s: jnp.ndarray):
        return self.inner.init(self.full(params), base_rtt_s)

    def on_interval(self, state: Any, stats: Any, params: tuple):
        n = jax.tree.leaves(stats)[0].shape[0]
        return self.inner.on_interval(state, stats, self.full(params, n))


def fold_switches(controller: Controller, cc_params: Any) -> tuple[Controller, Any]:
    """``(FoldedSwitches(controller, ...), the other leaves)`` for batched ``cc_params`` (a
    leading link axis), or the two unchanged where no boolean leaf is uniform."""
    leaves, treedef = jax.tree.flatten(cc_params)
    frozen, dyn = [], []
    for i, x in enumerate(leaves):
        a = np.asarray(x)
        if a.dtype == np.bool_ and a.size > 0 and (a.all() or not a.any()):
            frozen.append((i, bool(a.flat[0]), tuple(a.shape[1:])))
        else:
            dyn.append(x)
    if not frozen:
        return controller, cc_params
    return FoldedSwitches(controller, treedef, tuple(frozen)), tuple(dyn)


#: how many times over a run holds its recorded series at its peak, measured (``ccjax simulate``,
#: 2 flows, 20 000 s at 0.1 s intervals: 300 MB more peak memory than 100 s for 124 MB more
#: series): XLA's output, the copy the (links, intervals) transposition makes for a batch of
#: links, and the summary's per-interval lists
SERIES_COPIES = 3
#: a flow's final state other than its delay lines, bytes (measured: about 1.5 kB)
STATE_BYTES_PER_FLOW = 2048


def series_bytes_per_interval(cfg: SimConfig) -> int:
    """Bytes one link's series hold per reporting interval: its ``Totals`` (each flow's
    counters and queueing-delay histogram), the queue at the interval's end and each flow's
    window (``make_runner``'s outputs)."""
    tot = jax.eval_shape(lambda: Totals.zeros(cfg.n_flows, cfg.rtt_bins))
    per = sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tot))
    return int(per + 4 + 4 * cfg.n_flows)


def memory_needed(cfg: SimConfig, n_links: int, timeline: Timeline) -> tuple[int, int]:
    """(bytes of the recorded series, bytes of the final state) a run of ``n_links`` links
    holds, estimated without tracing it: the series ``SERIES_COPIES`` times over, and the state
    dominated by the queue and ACK delay lines (``SimState.qline``, ``aline``)."""
    n_int = timeline.n_full + (1 if timeline.remainder else 0)
    series = SERIES_COPIES * n_links * n_int * series_bytes_per_interval(cfg)
    lines = (cfg.queue_horizon + cfg.ack_horizon) * 4 * 4  # (H, F, 4 fields) float32 per flow
    state = n_links * cfg.n_flows * (lines + STATE_BYTES_PER_FLOW)
    return int(series), int(state)


def _size(n: float) -> str:
    for unit, b in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= b:
            return f"{n / b:.3g} {unit}"
    return f"{n:.0f} bytes"


def check_memory(cfg: SimConfig, n_links: int, timeline: Timeline,
                 others: str | None = None) -> None:
    """A one-line ``ConfigError`` before anything is traced when the run would need more memory
    than there is (device memory on a GPU, the host's MemAvailable on the CPU): how much it
    needs, how much there is, and what to change (a shorter duration, then ``others``; by
    default a longer series interval or fewer links, as ``ccjax simulate`` names them). Without
    a memory figure it says nothing."""
    from ccjax.devices import batch_mesh, free_memory_bytes

    series, state = memory_needed(cfg, n_links, timeline)
    need = series + state
    free, source = free_memory_bytes()
    if source == "fallback guess" or need <= free:
        return
    mesh = batch_mesh(n_links)
    if source == "device memory_stats" and mesh is not None:
        free *= mesh.devices.size  # the batch is split over the devices, each with its memory
        if need <= free:
            return
    tick = cfg.tick_s
    duration = timeline.total_ticks * tick
    interval = timeline.interval_ticks * tick
    n_int = timeline.n_full + (1 if timeline.remainder else 0)
    # both parts grow at most linearly with the duration (the queue line is capped by the run)
    fits = duration * free / need
    what = (f"{_size(series)} for its recorded series ({n_int:.4g} intervals of {interval:g} s"
            f" x {n_links} link(s) x {cfg.n_flows} flow(s), held {SERIES_COPIES} times over by "
            f"the run and its summary) and {_size(state)} for its state (delay lines of "
            f"{cfg.queue_horizon} + {cfg.ack_horizon} ticks per flow)")
    if others is None:
        others = ("a longer series_interval_s (--series-interval-s) or fewer links"
                  if series >= state else
                  "smaller buffers (the queue's delay line holds a full buffer's drain time) or "
                  "fewer links")
    raise ConfigError(f"duration_s={duration:g} is invalid: the run would need about "
                      f"{_size(need)} of memory ({what}) and {_size(free)} is available "
                      f"({source}); allowed: a run that fits, with a shorter duration_s "
                      f"(--duration-s; about {fits:.3g} s fits), {others}")


def run(cfg: SimConfig, controller: Controller, links: LinkParams, cc_params: Any,
        keys: jnp.ndarray, timeline: Timeline) -> RunResult:
    """Compile (timed separately) and run a batch of links; block until done. The batch is
    split across all local devices when it divides evenly (``ccjax.devices``). Boolean
    controller parameters with one value over the batch are compiled in (``fold_switches``)."""
    from ccjax.devices import batch_mesh, shard_batch

    B = int(links.buffer_bytes.shape[0])
    check_memory(cfg, B, timeline)  # before anything is traced
    controller, cc_params = fold_switches(controller, cc_params)
    links, cc_params, keys = shard_batch((links, cc_params, keys), B)
    fn = make_runner(cfg, controller, timeline, batch_mesh(B))
    t0 = time.perf_counter()
    compiled = fn.lower(links, cc_params, keys).compile()
    t1 = time.perf_counter()
    state, series, qend, cwnd = compiled(links, cc_params, keys)
    jax.block_until_ready(series)
    t2 = time.perf_counter()
    return RunResult(cfg=cfg, timeline=timeline, links=links, state=state, series=series,
                     queue_end=np.asarray(qend), wall_s=t2 - t1, compile_s=t1 - t0,
                     cwnd_end=np.asarray(cwnd))


def _f(x) -> float:
    return float(np.asarray(x))


def _episode_counts(state: SimState, i: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Link ``i``'s per-flow (timeouts, loss episodes), where the controller's state keeps them
    (``cc.newreno.Episodes``, as ``ep``); None for one that does not (rate-based senders, a
    ``Mix``, learned policies)."""
    ep = getattr(state.cc, "ep", None)
    if ep is None or not hasattr(ep, "timeouts") or not hasattr(ep, "recoveries"):
        return None
    return (np.rint(np.asarray(ep.timeouts[i])).astype(np.int64),
            np.rint(np.asarray(ep.recoveries[i])).astype(np.int64))


def _window_series(cwnd_bytes: np.ndarray, active_ticks: np.ndarray) -> list[float | None]:
    """A flow's window at each interval's end in packets (ns-3's dumbbell reports
    ``cwnd_series_pkts`` so); None where the flow had not started yet, or has no window (a rate
    sender's is infinite). After a flow stops it keeps its last window, as ns-3's does."""
    started = np.cumsum(active_ticks) > 0
    return [float(w / PACKET_BYTES) if s and np.isfinite(w) else None
            for w, s in zip(cwnd_bytes, started, strict=True)]


def summarize(res: RunResult, i: int = 0) -> dict:
    """The summary of link ``i``: the JSON shape of ``ccjax simulate --json``.

    * throughput: wire bytes that crossed the bottleneck, per second the flow was active;
    * goodput: the same in TCP payload bytes (1448 per 1500-byte packet, as ns-3 and iperf count);
    * mean RTT and mean queueing delay: averages over delivered bytes (packet-weighted, as a
      receiver measures them); p95 RTT: from the histogram of RTT samples returned to the sender;
      an RTT is the propagation RTT, the queueing delay and what that delay leaves out of the
      packet's own transmission time at the bottleneck (``core.rtt_correction_ticks``; here of
      the mean and the 95th percentile delay), and the senders' jitter's mean
      (``LinkSpec.jitter_ms``; in the 95th percentile too, whose histogram is the queue's);
    * ``rtt_floor_ms``: the least RTT a data packet sees (propagation and transmission),
      ``base_rtt_ms`` the propagation RTT alone;
    * loss rate: bytes lost at the link (random + drop-tail) over bytes sent;
    * timeouts and recoveries (controllers that track loss episodes: NewReno, CUBIC, Vegas,
      Copa): retransmission timeouts and loss episodes (window reductions on a loss report) over
      the run, as ns-3's dumbbell counts its entries into CA_LOSS and CA_RECOVERY;
    * ``start_s`` and ``stop_s``: when the flow's data first and last meets the queue (``stop_s``
      null for a flow that never stops);
    * ``throughput_series_mbps`` and ``utilization_series``: a slot counts the packets that left
      the bottleneck in it, each when its last byte left. The simulator delivers one tick's
      packet group (what all flows put into the queue in that tick) at the tick its last byte
      leaves (``core.tick_begin``; ack-clocked: packet by packet over ``spread_ticks``, the
      rest with its last byte), so the bytes of a group that straddles a slot's start, served
      at the end of the slot before, count in the later slot, and the slot before misses them:
      a slot can exceed the capacity by up to one packet group, a neighbour is lower by as
      much. (Counting each byte when it left would need the per-flow split of the bytes
      served in each tick, which the simulator does not keep.) The running total never exceeds
      the capacity offered so far, and over the run the series add up exactly: their
      interval-weighted mean is ``utilization``.
    """
    cfg, dt = res.cfg, res.cfg.tick_s
    tot = jax.tree.map(lambda x: np.asarray(x[i]), res.series)
    lengths = res.timeline.lengths()
    interval_s = lengths * dt
    link = jax.tree.map(lambda x: np.asarray(x[i]), res.links)
    base = link.rtt_ticks * dt
    # a data packet's RTT adds to its queueing delay what the delay leaves out of its own
    # transmission (``core.rtt_correction_ticks``; at most a tick in the fluid model,
    # ``core.transmission_ticks``)
    tx = float(np.asarray(transmission_ticks(link, cfg)))
    # (and the senders' jitter, ``LinkSpec.jitter_ms``, its mean)
    jit = 0.5 * float(link.jitter_s)

    def rtt_ms(f: int, q_ticks: float | np.ndarray) -> np.ndarray:
        q = np.asarray(q_ticks, np.float64)
        return (base[f] + jit + (q + np.asarray(rtt_correction_ticks(q, tx))) * dt) * 1e3

    flows = []
    hist = tot.hist.sum(0)
    qmax = tot.qmax.max(0)
    p95q = np.asarray(hist_quantile(jnp.asarray(hist), 0.95, jnp.asarray(qmax)))
    episodes = _episode_counts(res.state, i)
    cwnd = None if res.cwnd_end is None else np.asarray(res.cwnd_end[i])
    for f in range(cfg.n_flows):
        if not link.present[f]:
            continue
        deliv = tot.delivered[:, f].sum()
        act_s = max(tot.active_ticks[:, f].sum() * dt, dt)
        sent = tot.sent[:, f].sum()
        thr = deliv / act_s
        mean_q = tot.qd_sum[:, f].sum() / deliv if deliv > 0 else 0.0
        flows.append({
            "goodput_mbps": thr * PAYLOAD_BYTES / PACKET_BYTES * 8e-6,
            "throughput_mbps": thr * 8e-6,
            "send_rate_mbps": sent / act_s * 8e-6,
            "mean_rtt_ms": float(rtt_ms(f, mean_q)),
            "p95_rtt_ms": float(rtt_ms(f, float(p95q[f]))),
            "loss_rate": float(tot.dropped[:, f].sum() / sent) if sent > 0 else 0.0,
            "sent_bytes": float(sent), "delivered_bytes": float(deliv),
            "base_rtt_ms": float(base[f] * 1e3),
            # the least RTT a data packet sees: the propagation RTT and the packet's own
            # transmission at an idle bottleneck (``core.data_rtt_floor_s``); what latency
            # ratios divide by
            "rtt_floor_ms": float((base[f] + tx * dt) * 1e3),
            "start_s": float(link.start_tick[f] * dt),
            # when its data last meets the queue, in the same frame as ``start_s`` (its stop
            # time plus its access delay); null (JSON has no inf) for a flow that never stops.
            # ``metrics.summary_metrics`` reads departures from it.
            "stop_s": (None if int(link.stop_tick[f]) == NEVER_TICK
                       else float(link.stop_tick[f] * dt)),
            **({} if episodes is None else {"timeouts": int(episodes[0][f]),
                                             "recoveries": int(episodes[1][f])}),
            "throughput_series_mbps": (tot.delivered[:, f] / interval_s * 8e-6).tolist(),
            # mean RTT of the bytes delivered in each interval; null where none were delivered
            "rtt_series_ms": [
                float(r) if d > 0 else None
                for r, d in zip(rtt_ms(f, tot.qd_sum[:, f] / np.maximum(tot.delivered[:, f],
                                                                         1e-30)),
                                tot.delivered[:, f], strict=True)],
            **({} if cwnd is None else {"cwnd_series_pkts": _window_series(
                cwnd[:, f], tot.active_ticks[:, f])}),
        })
    served = tot.served.sum()
    arrivals = tot.arrivals.sum()
    linkd = {
        "utilization": float(served / max(tot.cap_bytes.sum(), 1e-30)),
        "mean_queue_delay_ms": float(tot.qd_sum.sum() / served * dt * 1e3) if served > 0 else 0.0,
        "drop_rate": float(tot.dropped.sum() / arrivals) if arrivals > 0 else 0.0,
        "capacity_mbps": float(tot.cap_bytes.sum() / (lengths.sum() * dt) * 8e-6),
        "queue_series_pkts": (res.queue_end[i] / PACKET_BYTES).tolist(),
        # the queue averaged over each interval's ticks, as ns-3's dumbbell reports it
        "queue_mean_series_pkts": (tot.queue_int / lengths / PACKET_BYTES).tolist(),
        "utilization_series": (tot.served / np.maximum(tot.cap_bytes, 1e-30)).tolist(),
    }
    for fl in flows:
        for k, v in list(fl.items()):
            if isinstance(v, np.floating | np.integer):
                fl[k] = float(v)
    return {
        "flows": flows,
        "link": linkd,
        "sim": {"model": cfg.model, "ticks": res.timeline.total_ticks, "tick_s": dt,
                "series_interval_s": res.timeline.interval_ticks * dt,
                "window_sender": cfg.window_sender, "recovery": cfg.recovery,
                "retx_loss": cfg.retx_loss, "wall_s": res.wall_s, "compile_s": res.compile_s},
    }
