"""Bottleneck capacity as a periodic piecewise-constant schedule.

Every capacity model ccjax supports -- constant, a schedule of step changes, a mahimahi trace, a
generated Poisson delivery trace (``poisson_stamps``) -- is represented the same way, so one
compiled simulator serves them all and a batch may mix them:

* ``t``  (K,) segment start times in ticks, ``t[0] == 0``, non-decreasing (padding:
  ``period``);
* ``r``  (K,) service in bytes per tick during each segment;
* ``c``  (K,) cumulative bytes served from the period start to each segment start;
* ``period`` (ticks) and ``period_bytes`` (bytes served per period): the schedule repeats, as a
  mahimahi trace does. A schedule that must not repeat gets a period longer than the simulation.

``cum(x)`` is the cumulative service from time 0 to ``x`` (ticks, float) and ``inv(v)`` its
inverse: the earliest time by which ``v`` bytes have been served. A FIFO queue that holds ``Q``
bytes at time ``x`` is empty again at ``inv(cum(x) + Q)`` whatever the capacity does meanwhile,
because a FIFO link is busy until its backlog is gone. That is how the simulator computes each
packet group's departure time exactly, without a per-packet loop.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ccjax.units import PACKET_BYTES


class Schedule(NamedTuple):
    t: jnp.ndarray
    r: jnp.ndarray
    c: jnp.ndarray
    period: jnp.ndarray
    period_bytes: jnp.ndarray


def build_schedule(
    times_ticks: np.ndarray, bytes_per_tick: np.ndarray, period_ticks: float, k: int | None = None
) -> Schedule:
    """Build a schedule (NumPy, before tracing) from segment starts and rates, padded to ``k``.

    ``times_ticks[0]`` must be 0 and the times strictly increasing and below ``period_ticks``;
    callers validate user input before calling this.
    """
    t = np.asarray(times_ticks, dtype=np.float64)
    r = np.asarray(bytes_per_tick, dtype=np.float64)
    seg_len = np.diff(np.append(t, period_ticks))
    c = np.concatenate([[0.0], np.cumsum(r * seg_len)[:-1]])
    pb = float(np.sum(r * seg_len))
    k = len(t) if k is None else k
    if k < len(t):
        raise ValueError(f"schedule has {len(t)} segments, more than the padded size {k}")
    pad = k - len(t)
    t = np.concatenate([t, np.full(pad, period_ticks)])
    r = np.concatenate([r, np.zeros(pad)])
    c = np.concatenate([c, np.full(pad, pb)])
    f = np.float32
    return Schedule(
        t.astype(f), r.astype(f), c.astype(f), np.asarray(period_ticks, f), np.asarray(pb, f)
    )


def constant(bytes_per_tick: float, period_ticks: float) -> Schedule:
    return build_schedule(np.zeros(1), np.array([bytes_per_tick]), period_ticks)


def cum(s: Schedule, x: jnp.ndarray) -> jnp.ndarray:
    """Bytes served in ``[0, x)`` ticks."""
    if s.t.shape[-1] == 1:  # constant capacity (static): no search, no gather
        return x * s.r[..., 0]
    n = jnp.floor(x / s.period)
    y = x - n * s.period
    i = jnp.clip(jnp.searchsorted(s.t, y, side="right") - 1, 0, s.t.shape[-1] - 1)
    return n * s.period_bytes + s.c[i] + s.r[i] * (y - s.t[i])


def inv(s: Schedule, v: jnp.ndarray) -> jnp.ndarray:
    """Earliest time (ticks) by which ``v`` bytes have been served since time 0."""
    if s.t.shape[-1] == 1:
        return v / jnp.maximum(s.r[..., 0], 1e-30)
    pb = jnp.maximum(s.period_bytes, 1e-30)
    # The earliest time: ``v`` served exactly at the end of a busy segment (or of a period) is
    # reached there, not after the idle segments that follow (a mahimahi trace's empty
    # milliseconds), so the period is ``ceil - 1`` and the segment the last with c[i] < w.
    n = jnp.maximum(jnp.ceil(v / pb) - 1.0, 0.0)
    # float32 rounding can put w a little past either end of (0, pb]; past pb the search would
    # land in the idle tail or the padding and divide by a zero rate (a time of 1e30 ticks)
    w = jnp.clip(v - n * pb, 0.0, pb)
    i = jnp.clip(jnp.searchsorted(s.c, w, side="left") - 1, 0, s.c.shape[-1] - 1)
    # A segment picked here has c[i] < w <= c[i+1], so its rate is positive unless w is 0 or
    # the whole schedule is zero (rejected at validation); the max() only guards those.
    return n * s.period + s.t[i] + (w - s.c[i]) / jnp.maximum(s.r[i], 1e-30)


def mean_rate(s: Schedule) -> float:
    """Long-run mean bytes per tick (NumPy)."""
    return float(np.asarray(s.period_bytes) / np.asarray(s.period))


def max_drain_ticks(s: Schedule, backlog_bytes: float) -> float:
    """Upper bound (NumPy) on the ticks needed to serve ``backlog_bytes`` from any start time."""
    r = np.asarray(s.r)[np.asarray(s.t) < float(np.asarray(s.period))]
    if np.all(r > 0):  # never idle: the slowest segment bounds the drain time
        return float(backlog_bytes / r.min()) + 2.0
    per = float(np.asarray(s.period))
    pb = float(np.asarray(s.period_bytes))
    return per * (backlog_bytes / pb + 2.0)


def mean_rate_jnp(s: Schedule) -> jnp.ndarray:
    """Long-run mean bytes per tick, traceable (the schedule's bytes per period / period)."""
    return s.period_bytes / jnp.maximum(s.period, 1e-30)


def poisson_stamps(rng: np.random.Generator, rate_bytes_per_s: float,
                   period_s: float) -> np.ndarray:
    """A mahimahi-style delivery trace (int64 ms timestamps, see ``ccjax.sim.trace``) whose
    opportunities to send one ``PACKET_BYTES`` packet form a Poisson process at
    ``rate_bytes_per_s``, covering ``period_s`` (it repeats after that, as any trace does).

    This is how cellular links are commonly emulated (AUTO section 5.2.2: "usually modeled as
    Poisson Point Processes"; Pantheon's calibrated cellular emulators deliver packets so): the
    gaps between opportunities are exponential with mean ``PACKET_BYTES / rate``, so the
    capacity is bursty at every time scale while its long-run mean is ``rate``.

    Arrival times are drawn up to and including the first one at or past ``period_s``; each is
    floored to its millisecond (several may share one, as repeated mahimahi lines). The last
    stamp is then the trace's period (mahimahi's rule, ``trace_segments``): the period is a
    whole number of ms >= ``period_s``, and every opportunity in it is a real draw of the
    process, none added to pin the period. Deterministic given ``rng``'s state.
    """
    lam_ms = rate_bytes_per_s / PACKET_BYTES * 1e-3  # opportunities per ms
    if not (math.isfinite(lam_ms) and lam_ms > 0):
        raise ValueError(f"rate_bytes_per_s={rate_bytes_per_s!r}: must be > 0 and finite")
    if not (math.isfinite(period_s) and period_s > 0):
        raise ValueError(f"period_s={period_s!r}: must be > 0 and finite")
    horizon_ms = period_s * 1e3
    # Draw the gaps in chunks sized to finish in one go nearly always (mean + 6 sd + slack).
    expected = lam_ms * horizon_ms
    chunk = int(expected + 6.0 * math.sqrt(expected) + 16)
    parts: list[np.ndarray] = []
    t0 = 0.0
    while True:
        t = t0 + np.cumsum(rng.exponential(1.0 / lam_ms, chunk))
        past = np.searchsorted(t, horizon_ms, side="left")  # first arrival >= the horizon
        if past < chunk:
            parts.append(t[: past + 1])
            break
        parts.append(t)
        t0 = float(t[-1])
    return np.floor(np.concatenate(parts)).astype(np.int64)
