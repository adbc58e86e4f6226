"""Per-flow statistics of a monitor interval (MI), and the RTT histogram behind percentiles.

Percentiles come from a per-flow histogram of queueing delay (RTT minus the flow's base RTT):
bin 0 holds samples with no queueing, the other bins are geometric from a quarter tick up, the
last one open-ended with the observed maximum as its upper edge. Within a bin the quantile is
interpolated linearly. With the default 64 bins adjacent edges differ by about 23%, so a p95 is
exact when no queueing occurred and otherwise within one bin's width of the true value.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

_Q0 = 0.25  # lower edge of bin 2, in ticks
_QMAX = 1e5  # ticks at which the last (open) bin starts


def hist_growth(n_bins: int) -> float:
    return (_QMAX / _Q0) ** (1.0 / (n_bins - 2))


def hist_bin(qdelay_ticks: jnp.ndarray, n_bins: int) -> jnp.ndarray:
    g = hist_growth(n_bins)
    octave = jnp.log(jnp.maximum(qdelay_ticks, 1e-12) / _Q0) / jnp.log(g)
    b = 1 + jnp.floor(octave).astype(jnp.int32)
    b = jnp.clip(b, 1, n_bins - 1)
    return jnp.where(qdelay_ticks <= 1e-6, 0, b)


def hist_edges(n_bins: int, max_val: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Lower and upper edges (ticks) of the ``n_bins`` bins; the open last bin ends at
    ``max_val`` (the largest delay observed), broadcast over its leading axes."""
    g = hist_growth(n_bins)
    j = jnp.arange(n_bins, dtype=jnp.float32)
    lo = jnp.where(j <= 1, 0.0, _Q0 * g ** (j - 1))
    hi = jnp.where(j == 0, 0.0, _Q0 * g**j)
    hi = jnp.where(j == n_bins - 1, jnp.maximum(jnp.asarray(max_val)[..., None], lo), hi)
    return jnp.broadcast_to(lo, hi.shape), hi


def hist_quantile(hist: jnp.ndarray, q: float, max_val: jnp.ndarray) -> jnp.ndarray:
    """Quantile ``q`` of the histogram(s) ``hist[..., n_bins]`` in ticks; 0 for an empty one."""
    n = hist.shape[-1]
    lo, hi = hist_edges(n, max_val)
    hi = jnp.minimum(hi, jnp.maximum(max_val[..., None], 0.0))
    lo = jnp.minimum(lo, hi)
    tot = hist.sum(-1, keepdims=True)
    cdf = jnp.cumsum(hist, -1)
    target = q * tot
    idx = jnp.sum(cdf < target, axis=-1, keepdims=True)
    idx = jnp.minimum(idx, n - 1)
    c_hi = jnp.take_along_axis(cdf, idx, -1)
    w = jnp.take_along_axis(hist, idx, -1)
    frac = jnp.where(w > 0, (target - (c_hi - w)) / jnp.maximum(w, 1e-30), 1.0)
    val = jnp.take_along_axis(lo, idx, -1) + jnp.clip(frac, 0, 1) * (
        jnp.take_along_axis(hi, idx, -1) - jnp.take_along_axis(lo, idx, -1))
    return jnp.where(tot[..., 0] > 0, val[..., 0], 0.0)


def hist_add(hist: jnp.ndarray, qdelay_ticks: jnp.ndarray, w: jnp.ndarray) -> jnp.ndarray:
    """Add weights ``w`` (F,) at queueing delays ``qdelay_ticks`` (F,) to ``hist`` (F, bins)."""
    b = hist_bin(qdelay_ticks, hist.shape[-1])
    return hist.at[jnp.arange(hist.shape[0]), b].add(w)


class MIAccum(struct.PyTreeNode):
    """Running sums over the current MI, per flow."""

    ticks: jnp.ndarray
    sent: jnp.ndarray
    acked: jnp.ndarray
    lost: jnp.ndarray
    rtt_w: jnp.ndarray  # acked bytes with an RTT sample
    rtt_sum: jnp.ndarray  # sum of bytes * RTT (s)
    #: sum of bytes * (RTT - base RTT)^2 (s^2): the exact second moment, taken about the base
    #: RTT so that the variance does not cancel away in float32 (see ``finalize``)
    rtt_sq: jnp.ndarray
    rtt_min: jnp.ndarray
    rtt_max: jnp.ndarray
    srtt_min: jnp.ndarray  # lowest smoothed RTT after a tick with ACKs
    h1_w: jnp.ndarray  # first half of the MI (Aurora's latency gradient)
    h1_sum: jnp.ndarray
    h2_w: jnp.ndarray
    h2_sum: jnp.ndarray
    hist: jnp.ndarray  # (F, bins) bytes per queueing-delay bin
    qmax: jnp.ndarray  # max queueing delay (ticks)
    retx_lost: jnp.ndarray  # bytes of this MI's loss reports whose retransmission was lost too
    lost_seq: jnp.ndarray  # latest stream position (packets sent) among this MI's lost packets

    @classmethod
    def zeros(cls, F: int, bins: int) -> MIAccum:
        z = jnp.zeros(F, jnp.float32)
        return cls(ticks=z, sent=z, acked=z, lost=z, rtt_w=z, rtt_sum=z, rtt_sq=z,
                   rtt_min=jnp.full(F, jnp.inf, jnp.float32), rtt_max=z,
                   srtt_min=jnp.full(F, jnp.inf, jnp.float32), h1_w=z, h1_sum=z,
                   h2_w=z, h2_sum=z, hist=jnp.zeros((F, bins), jnp.float32), qmax=z,
                   retx_lost=z, lost_seq=z)


def rtt_correction_ticks(qd: jnp.ndarray, tx: jnp.ndarray) -> jnp.ndarray:
    """What a packet's queueing delay ``qd`` (ticks) leaves out of its RTT, for a transmission
    time of ``tx`` ticks.

    A tick's arrivals are taken at the tick's end while the link serves from the tick's start.
    A packet that meets an idle link so gets the delay ``max(tx - 1, 0)`` for a transmission of
    ``tx``: it lacks ``min(tx, 1)`` (its whole transmission where that is under a tick). One
    that queues leaves when the packets ahead of it and its own transmission are served, as the
    delay has it, but arrived half a tick before the tick's end on average: it lacks half a
    tick. Between the two the correction moves with the delay beyond an idle link's, over one
    tick. (The delay itself is what is compared with ns-3's queue sojourn and left as it is.)

    Measured in ns-3's dumbbell (``mean_rtt_ms - base_rtt_ms - mean_queue_delay_ms``, one
    NewReno and one Vegas flow, 40 ms, 1 BDP): 1.86 ms at 10 Mbps and 0.40 ms at 50 Mbps, the
    transmission (1.2 and 0.24 ms), the senders' jitter (half a packet time on average) and the
    access links' and the ACK's transmission, the last two not modelled; ccjax had 0.00 at both.
    It matters where a controller compares data RTTs with the SYN's, whose transmission time is
    nil: ns-3's Vegas takes BaseRTT from the smoothed RTT that the SYN's sample started
    (``VegasParams.ns3_rtt``; docs/validation-history.md, 2026-11-29). ``core.transmission_ticks``
    gives ``tx``."""
    idle = jnp.minimum(tx, 1.0)
    return idle - (idle - 0.5) * jnp.clip(qd - jnp.maximum(tx - 1.0, 0.0), 0.0, 1.0)



class MIStats(struct.PyTreeNode):
    """What a controller or agent learns at the end of an MI, per flow.

    RTT fields are in seconds. When no ACK arrived in the MI, the RTT fields repeat the sender's
    smoothed RTT (the last thing it knew) rather than being undefined; ``rtt_samples`` says so.
    """

    duration_s: jnp.ndarray
    sent_bytes: jnp.ndarray
    acked_bytes: jnp.ndarray
    lost_bytes: jnp.ndarray
    rtt_samples: jnp.ndarray  # acked bytes that carried an RTT sample
    rtt_mean: jnp.ndarray
    rtt_min: jnp.ndarray
    rtt_max: jnp.ndarray
    rtt_first_half: jnp.ndarray
    rtt_second_half: jnp.ndarray
    #: variance (s^2) of the MI's RTT samples, weighted by their acked bytes as ``rtt_mean`` is
    #: (the exact second moment, not the histogram's); 0 without samples
    rtt_var: jnp.ndarray
    send_rate: jnp.ndarray  # bytes/s
    delivery_rate: jnp.ndarray  # acked bytes/s
    loss_rate: jnp.ndarray  # lost / (acked + lost) learned this MI
    cwnd: jnp.ndarray
    inflight: jnp.ndarray
    srtt: jnp.ndarray
    #: the lowest value the smoothed RTT took in the MI, updated by its ACKs (``srtt`` if none
    #: came): what ns-3.37's congestion controls get as "the RTT" (``m_lastRtt`` is the
    #: estimator's smoothed value, not the sample), and Vegas takes the minimum over an RTT
    srtt_min: jnp.ndarray
    min_rtt: jnp.ndarray  # lowest RTT the sender has ever seen
    #: the least RTT a data packet sees on the path: the propagation RTT and the packet's
    #: transmission at an idle bottleneck (``core.data_rtt_floor_s``): propagation + ``tx_ticks``
    base_rtt: jnp.ndarray
    qdelay_hist: jnp.ndarray  # (F, bins) acked bytes per queueing-delay bin
    qdelay_max: jnp.ndarray  # largest queueing delay (ticks)
    #: bytes among ``lost_bytes`` whose retransmission was lost as well (``SimConfig.retx_loss``;
    #: always 0 without it)
    retx_lost_bytes: jnp.ndarray
    #: where the MI's latest lost packet lies in the flow's stream: the packets the flow had sent
    #: when it was sent (0 without a loss); with ``sent_pkts``, RFC 6582's recovery point
    lost_seq: jnp.ndarray
    sent_pkts: jnp.ndarray  # packets the flow has sent so far
    #: the packet's transmission time at the bottleneck that RTTs carry, ticks
    #: (``core.transmission_ticks``; ``base_rtt`` is the propagation RTT plus it)
    tx_ticks: jnp.ndarray
    tick_s: float = struct.field(pytree_node=False, default=1e-3)

    def rtt_quantile(self, q: float) -> jnp.ndarray:
        """RTT quantile ``q`` (s) over the MI's acked bytes; the smoothed RTT if none arrived.

        The queueing delay's quantile as a data sample reads it: the propagation RTT, the delay
        and what it leaves out of the packet's transmission (``rtt_correction_ticks``).
        Computed on demand, not every tick: a controller that never reads it pays nothing.
        """
        qd = hist_quantile(self.qdelay_hist, q, self.qdelay_max)
        prop = self.base_rtt - self.tx_ticks * self.tick_s
        v = prop + (qd + rtt_correction_ticks(qd, self.tx_ticks)) * self.tick_s
        return jnp.where(self.rtt_samples > 0, v, self.srtt)

    @property
    def rtt_p95(self) -> jnp.ndarray:
        return self.rtt_quantile(0.95)

    @classmethod
    def initial(cls, F: int, bins: int, rtt_s: jnp.ndarray, tick_s: float,
                tx_ticks: jnp.ndarray | None = None) -> MIStats:
        """No MI yet: every RTT statistic ``rtt_s``, the least RTT. ``tx_ticks`` (F,): the
        transmission time the RTTs carry (none if not given)."""
        z = jnp.zeros(F, jnp.float32)
        tx = z if tx_ticks is None else jnp.asarray(tx_ticks, jnp.float32)
        return cls(duration_s=z, sent_bytes=z, acked_bytes=z, lost_bytes=z, rtt_samples=z,
                   rtt_mean=rtt_s, rtt_min=rtt_s, rtt_max=rtt_s,
                   rtt_first_half=rtt_s, rtt_second_half=rtt_s, rtt_var=z, send_rate=z,
                   delivery_rate=z, loss_rate=z, cwnd=z, inflight=z, srtt=rtt_s, srtt_min=rtt_s,
                   min_rtt=rtt_s,
                   base_rtt=rtt_s, qdelay_hist=jnp.zeros((F, bins), jnp.float32),
                   qdelay_max=z, retx_lost_bytes=z, lost_seq=z, sent_pkts=z, tx_ticks=tx,
                   tick_s=tick_s)


def finalize(acc: MIAccum, tick_s: float, base_rtt_s: jnp.ndarray, srtt: jnp.ndarray,
             min_rtt: jnp.ndarray, cwnd: jnp.ndarray, inflight: jnp.ndarray,
             sent_pkts: jnp.ndarray | None = None,
             tx_ticks: jnp.ndarray | None = None) -> MIStats:
    dur = jnp.maximum(acc.ticks, 1.0) * tick_s
    has = acc.rtt_w > 0
    mean = jnp.where(has, acc.rtt_sum / jnp.maximum(acc.rtt_w, 1e-30), srtt)
    h1 = jnp.where(acc.h1_w > 0, acc.h1_sum / jnp.maximum(acc.h1_w, 1e-30), mean)
    h2 = jnp.where(acc.h2_w > 0, acc.h2_sum / jnp.maximum(acc.h2_w, 1e-30), mean)
    # E[x^2] - E[x]^2 with x = RTT - base RTT (the queueing delay). Taken about the base rather
    # than 0, the float32 error of the variance stays below (0.04 ms)^2 over a 60-tick MI at a
    # 40 ms base RTT and a 35 ms queue (against float64; (0.06 ms)^2 from raw RTTs).
    q = mean - base_rtt_s
    var = acc.rtt_sq / jnp.maximum(acc.rtt_w, 1e-30) - q * q
    var = jnp.where(has, jnp.maximum(jnp.nan_to_num(var), 0.0), 0.0)
    fb = acc.acked + acc.lost
    return MIStats(
        duration_s=dur, sent_bytes=acc.sent, acked_bytes=acc.acked, lost_bytes=acc.lost,
        rtt_samples=acc.rtt_w, rtt_mean=mean,
        rtt_min=jnp.where(has, acc.rtt_min, srtt), rtt_max=jnp.where(has, acc.rtt_max, srtt),
        rtt_first_half=h1, rtt_second_half=h2, rtt_var=var,
        send_rate=acc.sent / dur, delivery_rate=acc.acked / dur,
        loss_rate=jnp.where(fb > 0, acc.lost / jnp.maximum(fb, 1e-30), 0.0),
        cwnd=cwnd, inflight=inflight, srtt=srtt,
        srtt_min=jnp.where(has, acc.srtt_min, srtt), min_rtt=min_rtt,
        base_rtt=base_rtt_s,
        qdelay_hist=acc.hist, qdelay_max=acc.qmax, retx_lost_bytes=acc.retx_lost,
        lost_seq=acc.lost_seq, sent_pkts=jnp.zeros_like(dur) if sent_pkts is None else sent_pkts,
        tx_ticks=jnp.zeros_like(dur) if tx_ticks is None else tx_ticks,
        tick_s=tick_s,
    )
