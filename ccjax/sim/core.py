"""The simulator step: one tick of one link, pure and vmappable (DESIGN, "The simulator").

Per tick ``t`` of a link:

1. every active sender emits what its pacing rate (rate-based) or its window and pacing at
   cwnd/srtt (window-based) allow;
2. random loss removes a fraction ``loss`` of it (expected value in the fluid model, a binomial
   draw per flow in the packet model);
3. drop-tail admission: the queue may hold ``buffer_bytes`` after this tick's service, so at most
   ``buffer + service(t) - Q`` bytes enter; the excess is dropped, shared among flows in proportion
   to what they offered (packet model: whole packets, remainders to random flows; ACK-clocked
   senders' packets that replace what left go in first, so the growth meets a full queue);
4. FIFO departure: the admitted group's last byte leaves at ``x = inv(cum(t) + Q + admitted)``
   (``capacity``), exact for any capacity schedule because a FIFO link stays busy until its backlog
   is gone; its queueing delay is ``x - (t + 1)`` (arrivals are spread over the tick). The group,
   and the loss notifications of the bytes dropped beside it, are added to the *queue delay line*
   at tick ``ceil(x) - 1``;
5. what leaves the queue at ``t`` enters the *ACK delay line*; the sender reads it back after its
   base RTT, so ACK and loss feedback arrive one RTT (base + queueing at send time) after
   sending, never earlier (DESIGN principle 4);
6. per-flow MI statistics accumulate; a flow whose MI has ended hands its ``MIStats`` to its
   controller, which sets the rate/window and the next MI's length.

``tick`` does 1-5 and the MI statistics in ``tick_begin``, then asks the controller for every
flow and keeps the answers where an MI ended (``tick_end``). The batch driver (``sim.run``) calls
the two halves itself and, on the CPU, asks a per-flow controller only for the flows whose MI
ended (``sim.compact``); the results are the same.

Both delay lines are ring buffers written at a common index, so the per-tick work is a few
elementwise operations on ``(F,)`` arrays plus one scatter of ``F`` values and one gather.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Controller, Decision
from ccjax.sim import capacity, sampling
from ccjax.sim.link import LinkParams, SimConfig
from ccjax.sim.stats import MIAccum, MIStats, finalize, hist_add, rtt_correction_ticks
from ccjax.units import PACKET_BYTES as PKT

#: fields of both delay lines: admitted/delivered bytes, loss notifications, bytes x qdelay,
#: lost bytes x their stream position (packets sent; RFC 6582's recover point)
_NFIELD = 4


class Totals(struct.PyTreeNode):
    """Accumulators over a reporting interval (reset by the driver), per flow and per link."""

    sent: jnp.ndarray  # (F,) bytes the sender put on the wire
    delivered: jnp.ndarray  # (F,) bytes that left the bottleneck towards the receiver
    acked: jnp.ndarray  # (F,) bytes whose ACK reached the sender
    lost: jnp.ndarray  # (F,) loss notifications that reached the sender (bytes)
    dropped: jnp.ndarray  # (F,) bytes lost at the link (random loss + drop-tail)
    qd_sum: jnp.ndarray  # (F,) sum of delivered bytes x queueing delay (ticks)
    rtt_sum: jnp.ndarray  # (F,) sum of acked bytes x RTT (s)
    rtt_w: jnp.ndarray  # (F,) acked bytes with an RTT sample
    hist: jnp.ndarray  # (F, bins) acked bytes per queueing-delay bin
    qmax: jnp.ndarray  # (F,) largest queueing delay seen (ticks)
    active_ticks: jnp.ndarray  # (F,) ticks of the flow's life, from its start to its stop time
    cap_bytes: jnp.ndarray  # () capacity offered by the link
    served: jnp.ndarray  # () bytes the link delivered
    queue_int: jnp.ndarray  # () sum over ticks of queue bytes at tick end
    arrivals: jnp.ndarray  # () bytes offered to the link

    @classmethod
    def zeros(cls, F: int, bins: int) -> Totals:
        z = jnp.zeros(F, jnp.float32)
        s = jnp.zeros((), jnp.float32)
        return cls(sent=z, delivered=z, acked=z, lost=z, dropped=z, qd_sum=z, rtt_sum=z,
                   rtt_w=z, hist=jnp.zeros((F, bins), jnp.float32), qmax=z, active_ticks=z,
                   cap_bytes=s, served=s, queue_int=s, arrivals=s)


class Prr(struct.PyTreeNode):
    """RFC 6937 Proportional Rate Reduction of an ACK-clocked window sender in loss recovery
    (``SimConfig.recovery == "prr"``; it stays off otherwise). Bytes, per flow."""

    on: jnp.ndarray  # (F,) bool: in recovery
    delivered: jnp.ndarray  # (F,) acked since the recovery began (RFC 6937 prr_delivered)
    out: jnp.ndarray  # (F,) sent since the recovery began (prr_out)
    recover_fs: jnp.ndarray  # (F,) the flight when it began (RecoverFS)
    #: (F,) of RecoverFS, not yet reported: the recovery ends at 0. RecoverFS includes the losses
    #: that began it, whose retransmissions take no capacity and send no reports here: that many
    #: reports after the flight's stand in for their ACKs, which end RFC 6937's recovery
    left: jnp.ndarray
    #: (F,) the losses the last tick reported, retransmitted this tick (``retx_loss``)
    retx_due: jnp.ndarray
    #: (F,) bool: a retransmission of this recovery was lost (``retx_loss``), so the cumulative
    #: ACK stays below RecoveryPoint and the recovery lasts until the retransmission timer
    held: jnp.ndarray
    #: (F,) bytes acked in the last tick (RFC 6937 DeliveredData of the ACKs this tick answers)
    last: jnp.ndarray
    #: (F,) the tick the recovery began
    since: jnp.ndarray
    #: (F,) bool: a tick's loss reports left nothing in flight while ACKs came with them, and
    #: the flow has not sent since: it sends what those ACKs clock, not its whole window
    emptied: jnp.ndarray

    @classmethod
    def zeros(cls, F: int) -> Prr:
        z = jnp.zeros(F, jnp.float32)
        f = jnp.zeros(F, bool)
        return cls(on=f, delivered=z, out=z, recover_fs=z, left=z, retx_due=z, held=f, last=z,
                   since=z, emptied=f)


class SimState(struct.PyTreeNode):
    t: jnp.ndarray  # () int32 tick
    key: jnp.ndarray
    queue: jnp.ndarray  # (F,) bytes in the bottleneck queue, per flow
    work: jnp.ndarray  # () bytes the link has still to serve (the FIFO's unserved backlog)
    qline: jnp.ndarray  # (H_q, F, _NFIELD) queue delay line, indexed by departure tick
    aline: jnp.ndarray  # (H_a, F, _NFIELD) ACK delay line, indexed by departure tick
    stuck: jnp.ndarray  # (F, 2) admitted / dropped bytes whose departure lies past the horizon
    credit: jnp.ndarray  # (F,) pacing credit in bytes (packet model); for ack-clocked window
    #                      senders, the bytes the last tick's ACKs and loss reports let them send
    gain: jnp.ndarray  # (F,) ack-clocked window senders: extra bytes sent per byte reported
    clock: jnp.ndarray  # (F,) ack-clocked window senders: the bytes the last tick's reports
    #                     freed, which this tick's packets replace (up to a packet of it carried
    #                     while unspent): their ACK clock, as against the window's growth (0 for
    #                     a rate-based flow, whose paced packets all count as the clock's)
    srtt: jnp.ndarray  # (F,) s
    min_rtt: jnp.ndarray  # (F,) s
    sent: jnp.ndarray  # (F,) cumulative bytes sent
    acked: jnp.ndarray  # (F,) cumulative bytes acked (known to the sender)
    lost: jnp.ndarray  # (F,) cumulative bytes known lost by the sender
    # (F,) bytes sent and neither acked nor known lost, kept as its own running sum: the
    # difference ``sent - acked - lost`` of three float32 totals in the gigabytes rounds off
    # whole packets (1 Gbps, 30 s: 329 kB of a 4.9 MB flight; 100 Mbps: about 5 packets)
    flight: jnp.ndarray
    decision: Decision
    cc: Any
    prr: Prr
    mi: MIAccum
    mi_len: jnp.ndarray  # (F,) int32 ticks of the current MI
    #: (F,) bytes in flight when the current MI began not yet reported (acked or known lost):
    #: where the decision's ``mi_round`` is set, the MI ends at the tick that reports the last
    round_left: jnp.ndarray
    mi_count: jnp.ndarray  # (F,) int32 completed MIs
    mi_done: jnp.ndarray  # (F,) bool: an MI ended at the last tick
    last: MIStats
    tot: Totals


#: ln(7/8) per byte acked: SRTT keeps (7/8)^n of itself over n packets' RTT measurements
_LN_SRTT_KEEP_PER_BYTE = math.log(0.875) / PKT


def base_rtt_s(link: LinkParams, cfg: SimConfig) -> jnp.ndarray:
    return link.rtt_ticks.astype(jnp.float32) * cfg.tick_s


def transmission_ticks(link: LinkParams, cfg: SimConfig) -> jnp.ndarray:
    """A packet's transmission time at the bottleneck that its RTT carries, ticks: ``PKT``
    bytes at the mean rate in the packet model; in the fluid model at most one tick.

    The fluid model has no packets: a tick's bytes that meet an idle link leave within that
    tick whatever the rate, their queueing delay 0 where a packet's is ``max(tx - 1, 0)``. Its
    RTTs carry the transmission up to the tick it resolves, so that its least RTT and the one
    its bytes read at an idle link are the same (a constant rate below capacity reads a latency
    ratio of 1, as MOCC's reward expects), and equal the packet model's wherever a packet takes
    under a tick (above 12 Mbps at 1 ms ticks). Below that the packet model, the reference for
    TCP, has the whole transmission."""
    tx = PKT / jnp.maximum(capacity.mean_rate_jnp(link.sched), 1e-30)
    return jnp.minimum(tx, 1.0) if cfg.model == "fluid" else tx


def data_rtt_floor_s(link: LinkParams, cfg: SimConfig) -> jnp.ndarray:
    """The least RTT a data packet can see: the propagation RTT plus its transmission time at
    the bottleneck (at an idle link the delay ``max(tx - 1, 0)`` and ``rtt_correction_ticks``
    of it add up to ``tx``). Without a handshake the sender's RTT estimate starts here, the
    lowest it can measure; MI statistics take it as the base RTT that queueing delays add to."""
    return base_rtt_s(link, cfg) + transmission_ticks(link, cfg) * cfg.tick_s


def _mi_ticks(mi_s: jnp.ndarray, cfg: SimConfig) -> jnp.ndarray:
    mi = jnp.nan_to_num(mi_s / cfg.tick_s, nan=1.0, posinf=1e9)
    # Half a tick rounds up, whatever the float round-off: an MI of 0.5 x an RTT of an odd
    # number of ticks (a data packet's least RTT is often a whole tick over the propagation
    # RTT, ``rtt_correction_ticks``) lies on the tie, where two programs computing the same
    # RTT with their float32 operations fused differently would otherwise round it apart.
    return jnp.clip(jnp.floor(mi + 0.5 + 1e-4), 1, 1e9).astype(jnp.int32)


def init_state(
    cfg: SimConfig, link: LinkParams, controller: Controller, cc_params: Any, key: jnp.ndarray
) -> SimState:
    F = cfg.n_flows
    rtt = data_rtt_floor_s(link, cfg)
    cc_state, dec = controller.init(cc_params, rtt)
    z = jnp.zeros(F, jnp.float32)
    return SimState(
        t=jnp.zeros((), jnp.int32), key=key, queue=z, work=jnp.zeros((), jnp.float32),
        qline=jnp.zeros((cfg.queue_horizon, F, _NFIELD), jnp.float32),
        aline=jnp.zeros((cfg.ack_horizon, F, _NFIELD), jnp.float32),
        stuck=jnp.zeros((F, 2), jnp.float32), credit=z, gain=jnp.ones(F, jnp.float32),
        clock=z,
        # The handshake gives the first RTT sample before data flows (RFC 6298 §2).
        srtt=rtt, min_rtt=rtt, sent=z, acked=z, lost=z, flight=z, decision=dec, cc=cc_state,
        prr=Prr.zeros(F), mi=MIAccum.zeros(F, cfg.rtt_bins), mi_len=_mi_ticks(dec.mi_s, cfg),
        round_left=z,
        mi_count=jnp.zeros(F, jnp.int32), mi_done=jnp.zeros(F, bool),
        last=MIStats.initial(F, cfg.rtt_bins, rtt, cfg.tick_s,
                             jnp.broadcast_to(transmission_ticks(link, cfg), (F,))),
        tot=Totals.zeros(F, cfg.rtt_bins),
    )


def _allocate_packets(offered: jnp.ndarray, space: jnp.ndarray, key: jnp.ndarray,
                      first: jnp.ndarray | None = None) -> jnp.ndarray:
    """Admit at most ``space`` whole packets of ``offered`` (F,) packets, as drop-tail does when
    packets arrive in random order: each flow gets its proportional share rounded down, and the
    remaining packets go to flows with probability equal to their fractional part (systematic
    sampling), so without ``first`` every offered packet has the same chance of being admitted.

    ``first`` (F,), at most ``offered``: packets that take the room before the rest, which
    shares what they leave as above (ACK clocking: each takes the place of a packet its flow's
    reports freed)."""
    total = offered.sum()
    if first is None:
        exact = offered * jnp.minimum(space / jnp.maximum(total, 1.0), 1.0)
    else:
        f_tot = first.sum()
        rest = offered - first
        left = jnp.maximum(space - f_tot, 0.0)
        exact = (first * jnp.minimum(space / jnp.maximum(f_tot, 1e-30), 1.0)
                 + rest * jnp.minimum(left / jnp.maximum(rest.sum(), 1e-30), 1.0))
    base = jnp.floor(exact)
    c = jnp.cumsum(exact - base)
    u = jax.random.uniform(key)
    extra = jnp.floor(c + u) - jnp.floor(jnp.concatenate([jnp.zeros(1), c[:-1]]) + u)
    return jnp.minimum(base + extra, offered)


def _random_present_flow(key: jnp.ndarray, present: jnp.ndarray) -> jnp.ndarray:
    """The index of one of the ``present`` flows, each with the same chance; independent of how
    many absent slots follow them (a batch pads every link to its widest link's flow count)."""
    k = jnp.floor(jax.random.uniform(key) * present.sum())
    return jnp.argmax(jnp.cumsum(present) > k).astype(jnp.int32)


#: Packets of each flow's first window whose arrival at the bottleneck ``_jittered_admission``
#: draws; a window's packets past this many (one of more than 16 packets) arrive after them all.
JITTER_PKTS = 16


def _jittered_admission(key: jnp.ndarray, n: jnp.ndarray, room: jnp.ndarray) -> jnp.ndarray:
    """Packets of each flow (F,) drop-tail admits when the flows' first windows, ``n`` (F,)
    packets, reach a queue with ``room`` packets together: the first ``room`` to arrive, each
    sender's packets delayed by an order-preserving random jitter.

    ns-3's dumbbell (``sims/ns3/dumbbell.cc``, ``JitterChannel``) gives every packet of a sender
    an extra delay uniform in [0, J) (J one bottleneck packet time), but never lets it pass the
    one before: packet k arrives at ``max(U_1 .. U_k) J`` plus its access-link serialization
    (12 us a packet at 1 Gb/s, against J = 1.2 ms at 10 Mb/s). So each window reaches the queue
    in a few clumps, at the records of its draws, and the windows of flows that send together
    interleave clump by clump. The scale J does not matter, only the order; the serialization
    orders the packets of a clump. A flow so loses its whole window only when all of the first
    arrivals are the others' (two windows of 10 into room for 9: with probability 2/10, where one
    window after the other loses one flow's whole window every time; ns-3, two Vegas or two
    CUBIC flows at 10 Mb/s, 40 ms, a buffer of 8, ten seeds: a first-window timeout in 3 of the
    10). Packets past ``JITTER_PKTS`` of a window arrive after all the drawn ones, one flow's
    after another. Draws are (F, K), so a flow's do not depend on the batch's flow padding
    (``tick_begin``)."""
    F, K = n.shape[-1], JITTER_PKTS
    k = jnp.arange(K, dtype=jnp.float32)
    u = jax.random.uniform(key, (F, K))
    arrive = jax.lax.cummax(u, axis=1) + k * 2.0**-20  # the running record, then in sequence
    real = k[None, :] < n[:, None]
    arrive = jnp.where(real, arrive, jnp.inf)
    ahead = (arrive[None, None, :, :] < arrive[:, :, None, None]).sum((-2, -1))  # (F, K)
    got = (real & (ahead < room)).sum(-1).astype(jnp.float32)
    tail = jnp.maximum(n - K, 0.0)
    before = jnp.cumsum(tail) - tail
    return got + jnp.clip(room - got.sum() - before, 0.0, tail)


def any_fresh(links: LinkParams, s: SimState) -> jnp.ndarray:
    """Whether a link of the batch (leading axis) has a flow that has sent nothing yet: ``tick``'s
    ``fresh``."""
    return jnp.any(links.present & (s.sent <= 0))


def _first_windows_together(bursts: jnp.ndarray, offered: jnp.ndarray, link: LinkParams,
                            sent: jnp.ndarray) -> jnp.ndarray:
    """Whether this tick's group is the first windows of flows with one base RTT, sent together.

    Such windows reach the bottleneck at the same moment (in ns-3's dumbbell the flows open
    together, their handshakes take the same RTT and their access links the same delay) and the
    sender jitter mixes their packets, so they leave the queue interleaved and each flow's first RTT
    samples carry about half of the other's window (``_spread_group``). Drop-tail admits the first
    of their packets to arrive, in the order the jitter gives them (``_jittered_admission``). Flows
    with different RTTs never put their first windows into the queue together in ns-3 (the handshake
    and the access delays part them); a restart after a timeout is one flow's alone. Measured
    against the stored ns-3 runs (eight ccjax seeds, the whole matrix): two equal Vegas flows at 10
    Mbps, 40 ms, 1 and 4 BDP split 0.51/0.49 and 0.52/0.48 (ns-3 0.50/0.50 and 0.49/0.51; one flow
    after the other: 0.58/0.42, 0.67/0.33); within every tolerance 152 -> 153 scenarios with seeds
    1-8 (distance 121.0 -> 117.5), 151 -> 152 with seeds 9-16 (121.6 -> 119.5)."""
    on = offered > 0
    hi = jnp.max(jnp.where(on, link.rtt_ticks, -1))
    lo = jnp.min(jnp.where(on, link.rtt_ticks, jnp.iinfo(jnp.int32).max))
    return bursts & (hi == lo) & jnp.all(~on | (sent <= 0))


def _spread_group(cfg: SimConfig, link: LinkParams, t: jnp.ndarray, c0: jnp.ndarray,
                  qtot: jnp.ndarray, admit: jnp.ndarray, dropped: jnp.ndarray, x: jnp.ndarray,
                  dep: jnp.ndarray, first_flow: jnp.ndarray, seq: jnp.ndarray,
                  mixed: jnp.ndarray | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The queue-line rows of one tick's admitted group when it is delivered as served.

    The group occupies link positions ``(c0 + qtot, c0 + qtot + admit.sum()]`` (cumulative
    service, bytes). A byte at position ``p`` leaves in the tick ``u`` with ``cum(u) < p <=
    cum(u + 1)``. The first ``cfg.spread_ticks - 1`` ticks from the one the group's first packet
    leaves in get exactly what leaves in them; the rest leaves with the last byte (``dep``),
    with the drop notifications, as every group does without spreading.

    Packet model: flows' packets are queued one flow after another within the group, starting
    with flow ``first_flow``, drawn at random each tick, and a packet counts when its last byte
    has left. (A fixed rotation, ``t mod F``, puts the same flow first every round when the
    RTT is a multiple of F ticks: ACK-clocked bursts recur at the same tick phase, and flow 0
    was queued ahead of the others every round; four equal Vegas flows at 50 Mbps, 40 ms, gave
    flow 0 the largest share on every one of eight links.) Where ``mixed`` (a packet-model group
    of first windows sent together, ``_first_windows_together``) the flows' packets leave
    interleaved instead, each flow's in proportion to its share of the group. Fluid model: the
    flows' bytes are mixed, each leaving in proportion to what it sent.
    Queueing delay of a slice: the mean departure time of its bytes (linear within a tick) less
    the group's arrival ``t + 1`` (arrivals are spread over the tick, as in ``tick``).
    Returns ``(rows (K, F, 3), slots (K,))``.
    """
    K = cfg.spread_ticks
    F = admit.shape[-1]
    total = admit.sum()
    start = c0 + qtot
    # the first byte leaves once a packet (fluid: a byte) of the group is served
    unit = 1.0 if cfg.model == "fluid" else float(PKT)
    first = capacity.inv(link.sched, start + jnp.minimum(unit, jnp.maximum(total, 1e-30)))
    d0 = jnp.minimum(jnp.maximum(jnp.ceil(first).astype(jnp.int32) - 1, t), dep)
    u = d0 + jnp.arange(K, dtype=jnp.int32)  # the ticks sliced exactly: u[0] .. u[K-2]
    bounds = capacity.cum(link.sched, jnp.concatenate([u, u[-1:] + 1]).astype(jnp.float32))
    rel = bounds[1:] - start  # (K,) position (from the group's start) served by each tick's end
    # the share of the group served by each tick's end: of each flow's bytes too, where they mix
    frac = jnp.clip(rel / jnp.maximum(total, 1e-30), 0.0, 1.0)
    if cfg.model == "packet":
        n = jnp.round(admit / PKT)
        r0 = first_flow
        rolled = jnp.roll(n, -r0)
        off = jnp.roll(jnp.cumsum(rolled) - rolled, r0) * PKT  # (F,) bytes queued before flow f
        done = jnp.clip(jnp.floor((rel[:, None] - off[None, :]) / PKT + 1e-4), 0.0, n[None, :])
        if mixed is not None:
            # first windows sent together (``_first_windows_together``): the flows' packets
            # leave interleaved, each flow's in proportion to its share of the group
            done = jnp.where(mixed, jnp.floor(frac[:, None] * n[None, :] + 1e-4), done)
            off = jnp.where(mixed, 0.0, off)
        done = done * PKT
    else:
        done = frac[:, None] * admit[None, :]  # (K, F) bytes of each flow gone by each tick end
        off = jnp.zeros(F)
    done = done.at[K - 1].set(admit)  # the last row: all the rest, at the last byte's tick
    prev = jnp.concatenate([jnp.zeros((1, F)), done[:-1]], 0)
    part = done - prev  # (K, F) bytes leaving in each row's tick
    # mean position of the slice's bytes -> time, linear within the tick
    mid = off[None, :] + 0.5 * (prev + done)  # from the group's start
    lo = bounds[:-1, None] - start
    if cfg.model == "fluid" or mixed is not None:
        # mixed, a flow's slice of a tick lies across all that the tick served (in the group's
        # bytes: the flow's own bytes gone, ``done``, would put it too early when flows share)
        served = jnp.broadcast_to(
            0.5 * (jnp.clip(lo, 0.0, total) + jnp.clip(rel[:, None], 0.0, total)), mid.shape)
        mid = served if cfg.model == "fluid" else jnp.where(mixed, served, mid)
    width = jnp.maximum(bounds[1:] - bounds[:-1], 1e-30)[:, None]
    when = u[:, None].astype(jnp.float32) + jnp.clip((mid - lo) / width, 0.0, 1.0)
    tf1 = t.astype(jnp.float32) + 1.0
    delay = jnp.maximum(when - tf1, 0.0)
    delay = delay.at[K - 1].set(jnp.maximum(x - tf1, 0.0))
    slots = u.at[K - 1].set(dep)
    zeros = jnp.zeros((K, F))
    rows = jnp.stack([part, zeros.at[K - 1].set(dropped), part * delay,
                      zeros.at[K - 1].set(dropped * seq)], -1)
    return rows, slots % cfg.queue_horizon


class Pending(NamedTuple):
    """A tick up to its MI boundary (``tick_begin``): ``state`` is the next state with the
    controller's fields (``cc``, ``decision``, ``last``, ``mi_len``, ``gain``) still the old ones
    and ``mi`` the MI's accumulators including this tick; ``state.mi_done`` says which flows'
    MIs end now and ``stats`` are those MIs' statistics (every flow's, for the controller)."""

    state: SimState
    stats: MIStats
    reports: jnp.ndarray  # (F,) bytes the ending MI had reported (acked + lost), this tick's too
    flight: jnp.ndarray  # (F,) bytes in flight as the sender knows them after this tick
    lost: jnp.ndarray  # (F,) bytes this tick reported lost


def tick(
    cfg: SimConfig, controller: Controller, link: LinkParams, cc_params: Any, s: SimState,
    t: jnp.ndarray | None = None, live: jnp.ndarray | None = None,
    fresh: jnp.ndarray | None = None,
) -> SimState:
    """Advance one link by one tick: ``tick_begin``, the controller's ``on_interval`` for every
    flow, ``tick_end`` (which keeps its answer only for the flows whose MI ended).

    ``live`` (a bool) makes the tick conditional: where it is false the state comes back
    unchanged. Drivers that vmap a loop in which links stop at different ticks (the RL
    environment's MIs) pass it instead of selecting between old and new states, because a select
    would copy the delay lines, the state's only large arrays, every tick; here they are masked
    row by row.

    ``t`` may be passed separately from the state: a driver that vmaps ``tick`` over links
    passes the (common) tick unbatched, so the delay lines are read and written with a plain
    dynamic slice rather than a per-link gather/scatter. It must equal ``s.t``.

    ``fresh`` (a bool, unbatched like ``t``): whether any link of the batch has a flow that has
    sent nothing yet (``any_fresh``); only then can first windows meet at the queue, and the
    tick draws their jitter (``_jittered_admission``) only then. None: every tick draws it.
    """
    p = tick_begin(cfg, link, s, t, live, fresh)
    new_cc, new_dec = controller.on_interval(p.state.cc, p.stats, cc_params)
    return tick_end(cfg, s, p, new_cc, new_dec, live)


def tick_begin(cfg: SimConfig, link: LinkParams, s: SimState, t: jnp.ndarray | None = None,
               live: jnp.ndarray | None = None, fresh: jnp.ndarray | None = None) -> Pending:
    """Everything of ``tick`` before the controller is asked (see there for ``t``, ``live``)."""
    dt = cfg.tick_s
    t = s.t if t is None else t
    tf = t.astype(jnp.float32)
    if cfg.model == "packet":
        key, k_loss, k_drop, k_jit = jax.random.split(s.key, 4)
    else:  # the fluid model draws nothing: expected values only
        key = s.key
    active = link.present & (t >= link.start_tick) & (t < link.stop_tick)
    dec = s.decision

    # 1. Sender output: paced at the decided rate, or at cwnd/srtt when the rate is 0; bytes in
    #    flight (as the sender knows them) never exceed the window.
    cwnd = jnp.maximum(dec.cwnd, cfg.min_cwnd)
    pace = jnp.where(dec.rate > 0, dec.rate, cwnd / s.srtt)
    pace = jnp.maximum(pace, cfg.min_rate)
    inflight = s.flight
    room = jnp.maximum(cwnd - inflight, 0.0)
    if cfg.model == "fluid":
        send = jnp.where(active, jnp.minimum(pace * dt, room), 0.0)
        credit = s.credit
    else:
        # Whole packets. With jitter (default) the packet count is rounded stochastically and
        # a tick's packets are deferred to the next tick half the time: the mean rate is exact
        # and the credit stays bounded. Real pacers have timer slack; without it perfectly
        # periodic senders phase-lock against the link's service and drop-tail shares the
        # link by phase, not by rate (Floyd & Jacobson 1992).
        cap = 2.0 * pace * dt + PKT
        credit = jnp.minimum(s.credit + pace * dt, cap)
        if cfg.pacing_jitter:
            # (F, 2), not (2, F): a flow's draws then do not depend on how many flow slots the
            # batch pads to (JAX's partitionable Threefry, the default since 0.5, draws element
            # i from counter i), so a link's run is the same alone and in any batch
            # (``test_sim_laws``)
            u = jax.random.uniform(k_jit, credit.shape + (2,))
            n = jnp.floor(credit / PKT + u[..., 0])
            # timer slack: half the time this tick's packets leave with the next tick's, but
            # only when the credit then still fits under its cap, so no credit is ever lost
            defer = (u[..., 1] < 0.5) & (credit + pace * dt <= cap)
            n = jnp.where(defer, 0.0, n)
        else:
            n = jnp.floor(credit / PKT)
        n = jnp.maximum(jnp.minimum(n, jnp.floor(room / PKT)), 0.0)
        send = jnp.where(active, n * PKT, 0.0)
        credit = jnp.where(active, credit - send, 0.0)
    if cfg.window_sender == "ack-clocked":
        # Unpaced window senders (rate 0): ACK clocking. A per-ACK TCP sender sends when an ACK
        # (or a SACK reporting a loss) frees room in its window, so its packets leave as the
        # reports arrive, in bursts at the access link's rate; in slow start each reported
        # packet frees two (RFC 5681 eq. 2; RFC 3465 caps the growth per ACK at L = 2 SMSS).
        # ``s.credit`` holds for these flows twice what the last tick reported. The controller
        # grows its window once per MI, not per ACK; the cap of two per reported packet spreads
        # that growth over the next ACKs, as a per-ACK sender's would have been. A sender with
        # nothing in flight (the first window, a restart) sends its whole window at once.
        clocked = dec.rate <= 0
        whole = inflight <= 0
        if cfg.recovery == "prr":
            # ...but not a sender whose loss reports emptied its flight while ACKs came with
            # them (``Prr.emptied``, below)
            whole = whole & ~s.prr.emptied
        allow = jnp.where(whole, room, s.credit)
        burst = jnp.minimum(room, allow)
        if cfg.recovery == "prr":
            # RFC 6937 §3.1 as ns-3.37's TcpPrrRecovery runs it. The controller's window is the
            # recovery's ssthresh. While the flight (pipe) exceeds it, send in proportion to
            # what was delivered: CEIL(prr_delivered ssthresh / RecoverFS) - prr_out. Below it
            # ns-3's default bound (SSRB) lets an ACK of retransmitted data catch up to
            # prr_delivered - prr_out (plus a segment) and any other ACK send only what it
            # delivered. Retransmissions send no ACKs here, and the first come back about an
            # RTT into the recovery (they wait in the queue the losses filled): for the first
            # RTT a tick sends no more than the last tick delivered, after it up to
            # prr_delivered - prr_out (RFC 6937's conservative bound, PRR-CRB). Letting the
            # first RTT catch up too refilled the flight to ssthresh as soon as it fell below,
            # where ns-3's flight goes on falling with each loss it learns of (ns-3, two CUBIC
            # flows of 20 and 100 ms at 10 Mbps, 1 BDP, seed 1: the 20 ms flow's pipe fell
            # from 178 to 78 segments, ssthresh 124; ccjax's stopped at 98 and the queue stayed
            # full). SSRB from one RTT in, on every ACK, measured further from ns-3 than
            # CRB (docs/validation-history). prr_out counts new data only: retransmissions
            # take no capacity in the simulator (``retx_loss``), so the new data puts on the
            # link what RFC 6937's sndcnt, new data and retransmissions together, puts there.
            r = s.prr
            ssth = cwnd
            prop = (jnp.ceil(r.delivered * ssth / jnp.maximum(r.recover_fs, PKT) / PKT - 1e-6)
                    * PKT - r.out)
            first_rtt = (t - r.since) * dt < s.srtt
            crb = jnp.minimum(ssth - inflight,
                              jnp.where(first_rtt, r.last, r.delivered - r.out))
            prr_allow = jnp.maximum(jnp.where(inflight > ssth, prop, crb), 0.0)
            burst = jnp.where(r.on & (inflight > 0), prr_allow, burst)
        if cfg.model == "packet":
            burst = jnp.floor(burst / PKT + 1e-6) * PKT
        send = jnp.where(clocked, jnp.where(active, burst, 0.0), send)
        # the part of it that replaces what the last tick's reports freed (its ACK clock); a
        # rate-based flow's packets, spread evenly by its pacer, all count as the clock's
        replaced = jnp.where(clocked, jnp.minimum(send, s.clock), send)

    # 2. Random loss on the link (before the queue, so lost packets take no buffer).
    if cfg.model == "fluid":
        rloss = send * link.loss
    else:
        rloss = PKT * sampling.binomial(k_loss, send / PKT, link.loss)
    offered = send - rloss

    # 3. Drop-tail admission: the queue holds at most buffer_bytes after this tick's service.
    #    The backlog is the link's unserved work (Lindley's recursion), not ``s.queue``: a
    #    packet group stays in ``s.queue`` until its last byte has left, but the bytes of it
    #    already on the wire neither take buffer space nor delay later arrivals.
    c0 = capacity.cum(link.sched, tf)
    service = capacity.cum(link.sched, tf + 1.0) - c0
    qtot = s.work
    space = jnp.maximum(link.buffer_bytes + service - qtot, 0.0)
    # The flow whose packets head this tick's group (``_spread_group``; ACK-clocked packet model)
    # (drawn among the link's flows, not the batch's padded slots, for the same reason)
    first_flow = (_random_present_flow(jax.random.fold_in(k_jit, 1), link.present)
                  if cfg.model == "packet" and cfg.window_sender == "ack-clocked"
                  else jnp.zeros((), jnp.int32))
    mixed = None  # first windows sent together (packet model, ACK-clocked)
    if cfg.model == "fluid":
        admit = offered * jnp.minimum(space / jnp.maximum(offered.sum(), 1e-30), 1.0)
    else:
        if cfg.window_sender == "ack-clocked":
            # Drop-tail turns away what arrives at a full queue. An ACK-clocked packet takes the
            # place of one that left, so a full queue admits it; a window's growth (the second
            # packet of a slow-start ACK, congestion avoidance's one more per RTT) arrives on
            # top and meets the full queue: the flow that grows loses the packet. Random loss
            # strikes either kind alike (in expectation).
            clock_pkts = replaced * offered / jnp.maximum(send, 1e-30) / PKT
        else:
            clock_pkts = None
        admit = PKT * _allocate_packets(offered / PKT, jnp.floor(space / PKT + 1e-6), k_drop,
                                        clock_pkts)
        if cfg.window_sender == "ack-clocked":
            # A group made only of bursts from senders with nothing in flight (first windows,
            # restarts) arrives one flow's burst after another, back to back at the access
            # rate, not interleaved: drop-tail admits them in that order (the order
            # ``_spread_group`` queues them in), so the last flows can lose their whole burst
            # and learn it only from their retransmission timer (``newreno.track_episodes``).
            bursts = jnp.all((inflight <= 0) | (offered <= 0)) & (offered.sum() > 0)
            n_off = jnp.round(offered / PKT)
            room_pkts = jnp.floor(space / PKT + 1e-6)
            rolled = jnp.roll(n_off, -first_flow)
            ahead = jnp.roll(jnp.cumsum(rolled) - rolled, first_flow)  # packets queued before f
            seq = jnp.clip(room_pkts - ahead, 0.0, n_off)
            # First windows sent together (``_first_windows_together``) reach the queue
            # together, and the senders' jitter interleaves their clumps: drop-tail admits the
            # first to arrive, so a flow loses its whole window only where all the first
            # arrivals are the others' (``_jittered_admission``).
            mixed = _first_windows_together(bursts, offered, link, s.sent)

            def jittered():
                return _jittered_admission(jax.random.fold_in(k_drop, 1), n_off, room_pkts)

            # (drawing and ordering them every tick doubled an ACK-clocked run's time: with
            # ``fresh`` from the driver they are drawn only while a link of the batch has a flow
            # yet to send)
            jit = jittered() if fresh is None else jax.lax.cond(fresh, jittered, lambda: seq)
            admit = jnp.where(bursts, PKT * jnp.where(mixed, jit, seq), admit)
    dropped = send - admit  # random loss + drop-tail, what the sender will learn as lost

    # 4. FIFO departure of this tick's group (and the moment its drops become known).
    backlog = qtot + admit.sum()
    work = jnp.maximum(backlog - service, 0.0)
    x = capacity.inv(link.sched, c0 + backlog)
    qdelay = jnp.maximum(x - (tf + 1.0), 0.0)
    dep = jnp.maximum(jnp.ceil(x).astype(jnp.int32) - 1, t)
    fits = (dep - t) < cfg.queue_horizon
    # where the dropped bytes lie in the flow's stream: its packets sent up to this tick (the
    # drops are this tick's last packets); a loss report carries it (RFC 6582's "recover")
    seq = (s.sent + send) / PKT
    group = jnp.stack([admit, dropped, admit * qdelay, dropped * seq], -1)
    write = fits if live is None else fits & live
    # The slot read (and so delivered) last tick is cleared now rather than right after its
    # read: XLA updates a line in place only if it is never read and then written in the same
    # tick (otherwise it copies the whole line, every tick). Nothing lands in that slot before
    # this clear: departures lie at t or later, at most H - 1 ticks ahead.
    qline = s.qline.at[(t - 1) % cfg.queue_horizon].set(0.0)
    if cfg.window_sender == "ack-clocked":
        # Deliver the group as the link serves it, spread over the ticks its packets leave in,
        # not all at its last byte's tick: ACK clocking needs the bottleneck's spacing.
        rows, idx = _spread_group(cfg, link, t, c0, qtot, admit, dropped, x, dep, first_flow,
                                  seq, mixed)
        qline = qline.at[idx].add(jnp.where(write, rows, 0.0))
    else:
        qline = qline.at[dep % cfg.queue_horizon].add(jnp.where(write, group, 0.0))
    stuck = s.stuck + jnp.where(fits, 0.0, jnp.stack([admit, dropped], -1))

    # 5. Departures of tick t, then into the ACK line; feedback returns after the base RTT.
    slot = t % cfg.queue_horizon
    out = qline[slot]
    queue = jnp.maximum(s.queue + admit - out[:, 0], 0.0)
    # Unconditional even when not ``live``: row t holds data H_a ticks old that no read needs
    # (feedback is read RTT < H_a ticks back), and the next live tick rewrites it.
    aline = s.aline.at[t % cfg.ack_horizon].set(out)
    fb = jnp.take_along_axis(
        aline, ((t - link.rtt_ticks) % cfg.ack_horizon)[None, :, None], axis=0)[0]
    # Slots older than the flow's RTT were zero at start, so early reads return no feedback.
    ack_b, lost_b, qd_b = fb[:, 0], fb[:, 1], fb[:, 2]
    # the stream position (packets) of this tick's reported losses, on average
    lost_seq = jnp.where(lost_b > 0, fb[:, 3] / jnp.maximum(lost_b, 1e-30), 0.0)
    has = ack_b > 0
    qd = qd_b / jnp.maximum(ack_b, 1e-30)  # ticks, byte-weighted over this tick's ACKs
    # (a packet's RTT: the propagation RTT, its queueing delay and what the delay leaves out of
    # its own transmission; ``base``, the least of them, is what MI statistics add delays to)
    prop = base_rtt_s(link, cfg)
    tx = transmission_ticks(link, cfg)
    base = prop + tx * dt  # ``data_rtt_floor_s``
    rtt = prop + (qd + rtt_correction_ticks(qd, tx)) * dt
    # The senders' jitter (``LinkSpec.jitter_ms``): one draw per flow for the tick's ACKs, its
    # mean in the fluid model. (its own stream: every other draw is the same with and without
    # it; static, as the draw cost the packet model 7-12 % of its speed)
    if cfg.rtt_jitter and cfg.model == "packet":
        rtt = rtt + jax.random.uniform(jax.random.fold_in(k_jit, 2), rtt.shape) * link.jitter_s
    elif cfg.rtt_jitter:
        rtt = rtt + 0.5 * link.jitter_s
    # RFC 6298 §2.3, SRTT <- 7/8 SRTT + 1/8 R, once per RTT measurement: a per-ACK sender
    # (ns-3, Linux) measures every ACK, so a tick's n packets' ACKs, all with the tick's RTT,
    # move SRTT by 1 - (7/8)^n of the way (n fractional for the fluid model's bytes). One step
    # per tick had the estimate lag the queue by the packets per tick (4 at 50 Mbps), which
    # Vegas's RTT in ns-3's form (``VegasParams.ns3_rtt``, the round's lowest SRTT) reads.
    w = -jnp.expm1(ack_b * _LN_SRTT_KEEP_PER_BYTE)  # 1 - (7/8)^(ack_b / PKT)
    srtt = jnp.where(has, s.srtt + w * (rtt - s.srtt), s.srtt)
    min_rtt = jnp.where(has, jnp.minimum(s.min_rtt, rtt), s.min_rtt)
    # The handshake (``LinkSpec.handshake``): the SYN crosses the bottleneck at ``syn_tick``,
    # behind the backlog there, and the SYN-ACK's RTT sample is the flow's first (RFC 6298 §2:
    # SRTT <- R). A flow whose SYN meets another's slow-start burst so keeps that queue in its
    # estimate, and in Vegas's BaseRTT (ns-3, four Vegas flows of 20-100 ms at 10 Mbps, seeds 1
    # and 2: the 73 ms flow's first sample was 79 and 80 ms, the others' their base RTTs).
    # (at least the base RTT: on a trace, a SYN in an idle millisecond waits for nothing)
    # (a SYN's own transmission time is nil: the propagation RTT, not ``base``)
    syn_rtt = prop + jnp.maximum(capacity.inv(link.sched, c0 + qtot) - tf, 0.0) * dt
    syn = t == link.syn_tick
    srtt = jnp.where(syn, syn_rtt, srtt)
    min_rtt = jnp.where(syn, syn_rtt, min_rtt)
    in_air = s.flight + send - ack_b - lost_b
    if cfg.window_sender == "ack-clocked":
        reported = ack_b + lost_b
        # What the reports of this tick free, plus the unspent fraction of a packet of the last
        # tick's allowance (whole packets leave; the growth of 1 + MSS/cwnd per packet adds up)
        carry = jnp.clip(allow - send, 0.0, PKT)
        clocking = reported
        if cfg.recovery == "prr":
            # Loss reports that leave nothing in flight while ACKs come with them (a flow that got
            # one packet of its first window through, into a full queue): a per-ACK sender learns
            # of those losses later, from the duplicate ACKs of what it sent for those ACKs (two
            # per ACK in slow start, then one more per duplicate ACK: RFC 3042), and its PRR then
            # sends the retransmissions first, a few per ACK (ns-3.37, four Vegas flows at
            # 10 Mbps, 8-packet buffer, traced: cwnd 2 to 4 for about three RTTs). Here the
            # losses are reported at once, and sending the whole window next tick into the full
            # queue cost its retransmissions and then a timeout (ccjax 3.6 timeouts a run there,
            # ns-3 2.5; with this 2.4). So such a sender sends only what the ACKs clock, and its
            # flight grows from there, as after any report.
            emptied = clocked & (lost_b > 0) & (ack_b > 0) & (in_air <= 0.5)
            clocking = jnp.where(emptied, ack_b, reported)
        credit = jnp.where(clocked, jnp.where(active, (1.0 + s.gain) * clocking + carry, 0.0),
                           credit)
        # (loss reports count too: the packet sent for one fills the gap its loss left in the
        # flow's arrivals; counting ACKs alone measured no closer to ns-3: docs/validation-history)
        clock = jnp.where(clocked & active, reported + jnp.minimum(s.clock - replaced, PKT), 0.0)
    else:
        clock = s.clock
    sent = s.sent + send
    acked = s.acked + ack_b
    lost = s.lost + lost_b
    if cfg.retx_loss:
        # The sender retransmits each reported loss; the retransmission meets the link's random
        # loss like any packet. It takes no capacity here: bulk senders' goodput is not
        # modelled apart. (its own stream, derived so that every other draw is the same with
        # and without it)
        k_retx = jax.random.fold_in(k_loss, 1)
        if cfg.recovery == "prr":
            # A sender in PRR keeps sending through its recovery, so the queue does not drain
            # before its retransmissions: the last tick's reported losses, retransmitted now,
            # also meet this tick's drop-tail, at the share of the other flows' packets it
            # turned away (a retransmission goes ahead of its own flow's packets; ns-3, four
            # NewReno flows at 10 Mbps with a 7-packet buffer: 4 of 376 drops were
            # retransmissions, each followed by a timeout; two CUBIC flows at 50 Mbps, 1 BDP:
            # none of 451, as the queue had room). Only window senders recover through PRR; a
            # rate-based sender's retransmissions meet the random loss alone. The share is of
            # all the other flows' packets, the ACK clock's and the growth's together (drop-tail
            # takes the growth first, above): ns-3 sends a recovery's first retransmission on
            # top of what PRR's count allows (``EnterRecovery``'s ``DoRetransmit``), neither
            # quite the clock's packet nor the growth's; this share kept ccjax's timeouts
            # without random loss at ns-3's (docs/validation-history).
            tail = offered - admit
            others = offered.sum() - offered
            tail_share = jnp.where(others > 0,
                                   (tail.sum() - tail) / jnp.maximum(others, 1e-30), 0.0)
            due = s.prr.retx_due
            p_retx = link.loss + (1.0 - link.loss) * jnp.where(dec.rate <= 0, tail_share, 0.0)
        else:
            # (at once: after a cut the queue has room, so drop-tail is left out)
            due, p_retx = lost_b, link.loss
        retx_lost = PKT * sampling.binomial(k_retx, jnp.round(due / PKT), p_retx)
    else:
        retx_lost = jnp.zeros_like(lost_b)

    # 6. MI accumulation (first/second half split for Aurora's latency gradient).
    w = jnp.where(has, ack_b, 0.0)
    first = s.mi.ticks < 0.5 * s.mi_len.astype(jnp.float32)
    m = s.mi
    mi = MIAccum(
        ticks=m.ticks + 1.0, sent=m.sent + send, acked=m.acked + ack_b, lost=m.lost + lost_b,
        rtt_w=m.rtt_w + w, rtt_sum=m.rtt_sum + w * rtt, rtt_sq=m.rtt_sq + w * (rtt - base) ** 2,
        rtt_min=jnp.where(has, jnp.minimum(m.rtt_min, rtt), m.rtt_min),
        rtt_max=jnp.where(has, jnp.maximum(m.rtt_max, rtt), m.rtt_max),
        srtt_min=jnp.where(has, jnp.minimum(m.srtt_min, srtt), m.srtt_min),
        h1_w=m.h1_w + jnp.where(first, w, 0.0), h1_sum=m.h1_sum + jnp.where(first, w * rtt, 0.0),
        h2_w=m.h2_w + jnp.where(first, 0.0, w), h2_sum=m.h2_sum + jnp.where(first, 0.0, w * rtt),
        hist=hist_add(m.hist, qd, w), qmax=jnp.where(has, jnp.maximum(m.qmax, qd), m.qmax),
        retx_lost=m.retx_lost + retx_lost, lost_seq=jnp.maximum(m.lost_seq, lost_seq),
    )
    T = s.tot
    tot = Totals(
        sent=T.sent + send, delivered=T.delivered + out[:, 0], acked=T.acked + ack_b,
        lost=T.lost + lost_b, dropped=T.dropped + dropped, qd_sum=T.qd_sum + out[:, 2],
        rtt_sum=T.rtt_sum + w * rtt, rtt_w=T.rtt_w + w, hist=hist_add(T.hist, qd, w),
        qmax=jnp.where(has, jnp.maximum(T.qmax, qd), T.qmax),
        # (the flow's life, from its start time, as ns-3 counts a flow's throughput: with a
        # handshake or an access delay its data meets the queue later)
        active_ticks=T.active_ticks + (link.present & (t >= link.open_tick)
                                       & (t < link.close_tick)).astype(jnp.float32),
        cap_bytes=T.cap_bytes + service, served=T.served + out[:, 0].sum(),
        queue_int=T.queue_int + work, arrivals=T.arrivals + send.sum(),
    )

    # 7. MI boundary: latch stats, ask the controller, reset the accumulators.
    # A window sender (rate 0: NewReno, CUBIC, Vegas) answers a loss report at once, as a
    # per-ACK TCP answers the third duplicate ACK: its MI ends at the tick that brings one.
    done = (mi.ticks >= s.mi_len.astype(jnp.float32)) | ((dec.rate <= 0) & (lost_b > 0))
    # A round ends at the report of the last byte in flight when it began (Linux tcp_vegas and
    # ns-3 TcpVegas: the ACK that covers the sequence sent last before the round, ``snd_nxt``
    # then); with nothing in flight then, at the first report. FIFO: reports of older data come
    # first. (Half a byte: the flight is a float32 running sum.)
    round_left = s.round_left - ack_b - lost_b
    done = done | (dec.mi_round & (ack_b + lost_b > 0) & (round_left <= 0.5))
    # Bytes in flight as the sender knows them. In the fluid model the running sum of fractional
    # bytes can come out a rounding error below zero when everything sent is resolved; zero is
    # the exact value then.
    flight = jnp.maximum(in_air, 0.0)
    stats = finalize(mi, dt, base, srtt, min_rtt, cwnd, flight, sent / PKT,
                     jnp.broadcast_to(tx, base.shape))
    prr = s.prr
    if cfg.recovery == "prr" and cfg.retx_loss:
        prr = prr.replace(retx_due=lost_b)
    if cfg.recovery == "prr":
        # The recovery ends once everything in flight at its start has been reported (RFC
        # 6937: on the ACK that reaches RecoveryPoint); then the window, ssthresh, bounds the
        # sender again, and the room it leaves may all go next tick (ns-3 sends it at once).
        r = s.prr
        left = jnp.where(r.on, r.left - ack_b - lost_b, r.left)
        # A lost retransmission holds the cumulative ACK below RecoveryPoint: the recovery goes
        # on, PRR still bounding what is sent, until the timer ends it (ns-3.37, which has no
        # RACK, stays in CA_RECOVERY so; ccjax's sender used to leave PRR here, refill its
        # window at once into a full queue and keep it full until the timer).
        held = r.on & (r.held | (retx_lost > 0))
        over = r.on & (left <= 0) & ~held
        prr = prr.replace(on=r.on & ~over, left=left, held=held, last=ack_b,
                          emptied=(r.emptied & ~(send > 0)) | emptied,
                          delivered=jnp.where(r.on, r.delivered + ack_b, 0.0),
                          out=jnp.where(r.on, r.out + send, 0.0))
        if cfg.window_sender == "ack-clocked":
            # (not where the same tick's reports emptied the flight with ACKs: that sender
            # sends what those ACKs clock, ``Prr.emptied``)
            credit = jnp.where(over & clocked & active & ~emptied, cwnd, credit)
    new = SimState(
        t=t + 1, key=key, queue=queue, work=work, qline=qline, aline=aline, stuck=stuck,
        credit=credit,
        srtt=srtt, min_rtt=min_rtt, sent=sent, acked=acked, lost=lost, flight=in_air,
        decision=dec, cc=s.cc, prr=prr, mi=mi, mi_len=s.mi_len,
        round_left=jnp.where(done, flight, round_left),
        mi_count=s.mi_count + done.astype(jnp.int32),
        mi_done=done, last=s.last, tot=tot, gain=s.gain, clock=clock,
    )
    return Pending(state=new, stats=stats, reports=m.acked + m.lost + ack_b + lost_b,
                   flight=flight, lost=lost_b)


def tick_end(cfg: SimConfig, s: SimState, p: Pending, new_cc: Any, new_dec: Decision,
             live: jnp.ndarray | None = None) -> SimState:
    """The rest of ``tick`` from the controller's answer ``(new_cc, new_dec)`` to ``p.stats``
    (``s`` is the state the tick began from): the flows whose MI ended (``p.state.mi_done``)
    take it, latch their stats and start a new MI; the others keep their controller state."""
    part = p.state
    done = part.mi_done
    pick = lambda new, old: jnp.where(  # noqa: E731
        done.reshape(done.shape + (1,) * (new.ndim - 1)), new, old)
    cc_state = jax.tree.map(pick, new_cc, part.cc)
    decision = jax.tree.map(pick, new_dec, part.decision)
    last = jax.tree.map(pick, p.stats, part.last)
    mi = jax.tree.map(pick, MIAccum.zeros(cfg.n_flows, cfg.rtt_bins), part.mi)
    mi_len = jnp.where(done, _mi_ticks(new_dec.mi_s, cfg), part.mi_len)
    gain = part.gain
    if cfg.window_sender == "ack-clocked":
        # A per-ACK sender spreads its window growth over the ACKs of the next RTT (two packets
        # per ACK in slow start, 1 + MSS/cwnd in congestion avoidance). Here the window moves at
        # MI ends: the room it opens (growth, and whatever room is left) is spread over as many
        # reports as the MI just ended had, at most one extra packet per packet (RFC 3465 L = 2).
        room_new = jnp.maximum(jnp.maximum(new_dec.cwnd, cfg.min_cwnd) - p.flight, 0.0)
        g = jnp.clip(room_new / jnp.maximum(p.reports, PKT), 0.0, 1.0)
        gain = jnp.where(done, g, gain)

    new = part.replace(cc=cc_state, decision=decision, last=last, mi=mi, mi_len=mi_len,
                       gain=gain)
    if cfg.recovery == "prr":
        # A window sender that cut its window at an MI that reported a loss, with data still
        # in flight, enters PRR, with RecoverFS the flight before this tick's losses were taken
        # out. A cut without a loss (a delay-based decrease) is no recovery, nor is a whole
        # flight lost unseen (``newreno.stall_cwnd``: nothing in flight, the controller waits
        # for its timer); a window at the floor (a timeout) ends one.
        old_cwnd = jnp.maximum(part.decision.cwnd, cfg.min_cwnd)
        new_cwnd = jnp.maximum(new_dec.cwnd, cfg.min_cwnd)
        window = done & (new_dec.rate <= 0)
        cut = window & (new_cwnd < old_cwnd)
        enter = cut & (p.lost > 0) & (p.flight > 0)
        leave = cut | window & (new_cwnd <= cfg.min_cwnd)
        fs = p.flight + p.lost
        r = new.prr
        new = new.replace(prr=r.replace(
            on=jnp.where(enter, True, jnp.where(leave, False, r.on)),
            held=jnp.where(enter | leave, False, r.held),
            # (a window at the floor, a timeout's or a sender's that waits for its timer,
            # restarts from nothing in flight: with the flag it could not send)
            emptied=jnp.where(window & (new_cwnd <= cfg.min_cwnd), False, r.emptied),
            since=jnp.where(enter, part.t.astype(jnp.float32), r.since),
            delivered=jnp.where(enter, 0.0, r.delivered), out=jnp.where(enter, 0.0, r.out),
            recover_fs=jnp.where(enter, fs, r.recover_fs), left=jnp.where(enter, fs, r.left)))
    if live is None:
        return new
    qline, aline = new.qline, new.aline
    nil = jnp.zeros((), jnp.float32)  # the delay lines are already masked: keep them out
    keep = jax.tree.map(lambda n, o: jnp.where(live, n, o),
                        new.replace(qline=nil, aline=nil), s.replace(qline=nil, aline=nil))
    return keep.replace(qline=qline, aline=aline)


def in_flight(s: SimState, link: LinkParams, cfg: SimConfig) -> jnp.ndarray:
    """(F,) bytes sent but neither acked, known lost nor queued, computed from the delay lines.

    That is what left the queue and whose ACK has not reached the sender yet (ACK-line slots
    younger than the flow's RTT), plus loss notifications still travelling (in either line).
    Conservation ``sent == acked + lost + queue + in_flight`` is a law the tests check.
    """
    H = cfg.ack_horizon
    age = (s.t - 1 - jnp.arange(H)) % H  # ticks since each ACK-line slot was written
    written = age <= s.t - 1
    pending = (age[:, None] < link.rtt_ticks[None, :]) & written[:, None]
    a = jnp.where(pending[..., None], s.aline[..., :2], 0.0).sum((0, 2))
    # the queue-line slot of the last tick was delivered already (it is cleared next tick)
    delivered = (jnp.arange(cfg.queue_horizon) == (s.t - 1) % cfg.queue_horizon) & (s.t > 0)
    q = jnp.where(delivered[:, None], 0.0, s.qline[:, :, 1]).sum(0)
    return a + q + s.stuck[:, 1]
