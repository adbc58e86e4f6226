"""A pure-functional (segmented, prioritised) replay buffer for the off-policy agents.

The buffer is a ``ReplayState`` pytree that lives inside an agent's state, so every operation
is a pure function with static shapes: it runs under ``jax.jit`` and ``jax.vmap`` (a batch of
trials vmaps over agent states, each with its own buffer). ``Replay`` is the static
configuration and holds the operations::

    replay = Replay(capacity=100_000, alpha=0.6, n_segments=4)
    state = replay.init(example_transition)                # leaves get a leading capacity axis
    state = replay.add(state, batch, mask)                 # only rows with mask True are stored
    batch, idx, w = replay.sample(state, key, 256, beta)   # w: importance weights
    state = replay.update_priorities(state, idx, td_error)
    state = replay.freeze(state)                           # Pareto's next training stage

Storage. The capacity is split into ``n_segments`` equal segments allocated up front; segment
k is slots [k * seg_size, (k + 1) * seg_size). ``add`` writes only into the *active* segment,
as a ring (the oldest slots of that segment are overwritten when it is full). ``freeze`` makes
the next segment active: the earlier ones are frozen, still sampled but never overwritten. With
``n_segments=1`` and no freeze this is the ordinary ring buffer. This is Pareto's "segmented
prioritized replay" (TNSE'22 §3.4): the buffer grows by a fixed size per training stage, and new
experience replaces only experience of its own stage.

Masked add. A vectorised step mostly continues a running monitor interval and carries nothing to
learn (``Trajectory.valid``), so ``add`` takes the whole (flattened) batch plus a mask and
compacts the real rows with a cumsum and one scatter: static shapes, no host round trip.

Priorities (Schaul et al. 2016, proportional variant). A slot stores its raw priority
|delta| + eps; empty slots hold 0. New rows get the current maximum priority (1 in an empty
buffer) so they are replayed at least once soon. ``sample`` draws slot i with probability
P(i) = p_i^alpha / sum_j p_j^alpha over the filled slots (alpha = 0: uniform) by inverse-CDF
(cumsum + searchsorted: O(capacity) per call, fine up to ~1e6 slots and no sum tree to keep
consistent), and returns the weights w_i = (N P(i))^-beta / max_j w_j, the max taken over the
whole buffer (as OpenAI baselines does), so w <= 1 and a weight does not depend on which batch
it was drawn in. Sampling an empty buffer returns in-range indices and weights 0 (no NaN): a
weighted loss then contributes nothing. ``can_sample`` is the check to gate learning with.

Freezing past the last segment. ``freeze`` on a concrete state (the usual case: stages are a
host-side driver schedule) raises ``ConfigError`` when ``segments_left(state) == 0``. Under
tracing it cannot raise; it then still advances the active index past the end, after which
``add`` stores nothing and counts the rows it refused in ``ReplayState.dropped``. No frozen row
is ever overwritten and no loss goes unrecorded: a driver that freezes inside ``jit`` checks
``segments_left`` (host-side) beforehand or ``dropped == 0`` afterwards.

Why not flashbax: its buffers append a whole fixed-size batch per ``add`` with no per-row
validity mask (filtering first would need dynamic shapes or a host round trip), its prioritised
buffer has no notion of frozen segments, and it would be one more dependency for ~200 lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ccjax.errors import require


class ReplayState(struct.PyTreeNode):
    """The buffer's contents; every array field gains a leading axis when vmapped."""

    data: Any  # the transition pytree, leaves (capacity, ...)
    priority: jnp.ndarray  # (capacity,) f32 raw priority |delta| + eps; exactly 0 in empty slots
    ptr: jnp.ndarray  # (n_segments,) i32 next write offset inside each segment
    fill: jnp.ndarray  # (n_segments,) i32 filled slots of each segment (a prefix of it)
    active: jnp.ndarray  # () i32 the segment ``add`` writes; those before it are frozen
    dropped: jnp.ndarray  # () i32 rows ``add`` refused after a traced freeze past the end
    seg_size: int = struct.field(pytree_node=False)  # static: the same for a vmapped batch

    @property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """(start, stop) slot range of each segment."""
        s = self.seg_size
        return tuple((k * s, (k + 1) * s) for k in range(self.ptr.shape[-1]))


def size(state: ReplayState) -> jnp.ndarray:
    """Filled slots over all segments (batched states: one per buffer)."""
    return jnp.sum(state.fill, axis=-1)


def can_sample(state: ReplayState, n: int) -> jnp.ndarray:
    """Whether the buffer holds at least ``max(n, 1)`` transitions (``n``: the warm-up size,
    e.g. the batch size). Sampling is with replacement, so any non-empty buffer can be sampled;
    this is the gate a learner uses before it trusts the batch."""
    return size(state) >= max(int(n), 1)


def segments_left(state: ReplayState) -> int:
    """Host-side: how many more ``freeze`` calls the buffer allows (needs a concrete state;
    for a vmapped batch, the minimum over its buffers)."""
    n_seg = state.ptr.shape[-1]
    return n_seg - 1 - int(np.max(np.asarray(state.active)))


def _filled(state: ReplayState) -> jnp.ndarray:
    # a segment fills from offset 0 and wraps only once full, so its filled slots are a prefix
    slot = jnp.arange(state.priority.shape[-1])
    return (slot % state.seg_size) < state.fill[slot // state.seg_size]


@dataclass(frozen=True)
class Replay:
    """Static configuration of a replay buffer (hashable, so it can close over jitted code)."""

    capacity: int  # total slots over all segments
    alpha: float = 0.0  # prioritisation exponent; 0 = uniform sampling
    eps: float = 1e-6  # added to |delta| so that no stored transition has probability 0
    n_segments: int = 1  # equal segments: one per training stage (Pareto); 1 = a plain ring

    size = staticmethod(size)
    can_sample = staticmethod(can_sample)
    segments_left = staticmethod(segments_left)

    def __post_init__(self) -> None:
        def is_int(v: object) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        def is_real(v: object) -> bool:
            return (isinstance(v, (int, float, np.integer, np.floating))
                    and not isinstance(v, bool) and math.isfinite(v))

        require(is_int(self.capacity) and 1 <= self.capacity < 2**31, "capacity",
                self.capacity, "an integer in [1, 2**31)")
        require(is_real(self.alpha) and self.alpha >= 0, "alpha", self.alpha,
                "a finite number >= 0 (0: uniform sampling)")
        require(is_real(self.eps) and self.eps > 0, "eps", self.eps, "a finite number > 0")
        require(is_int(self.n_segments) and self.n_segments >= 1
                and self.capacity % self.n_segments == 0, "n_segments", self.n_segments,
                f"an integer >= 1 that divides capacity={self.capacity}")

    @property
    def seg_size(self) -> int:
        return self.capacity // self.n_segments

    def init(self, example: Any) -> ReplayState:
        """An empty buffer for transitions shaped like ``example`` (one transition, no batch
        axis); segment 0 is active."""
        data = jax.tree.map(lambda x: jnp.zeros((self.capacity, *jnp.shape(x)),
                                                jnp.asarray(x).dtype), example)
        zeros = jnp.zeros((self.n_segments,), jnp.int32)
        return ReplayState(data=data, priority=jnp.zeros((self.capacity,), jnp.float32),
                           ptr=zeros, fill=zeros, active=jnp.zeros((), jnp.int32),
                           dropped=jnp.zeros((), jnp.int32), seg_size=self.seg_size)

    def add(self, state: ReplayState, batch: Any, mask: jnp.ndarray) -> ReplayState:
        """Store the rows of ``batch`` where ``mask`` is True, in order, into the active segment.

        ``mask`` has the leading shape of every leaf of ``batch`` (e.g. (M,) for a flattened
        trajectory or (T, N) for a ``Trajectory``'s layout); the leaves' trailing shapes must
        match the stored transition. Leaves are cast to the stored dtypes."""
        mask = jnp.asarray(mask, bool)
        lead = mask.shape

        def flat(buf: jnp.ndarray, x: jnp.ndarray) -> jnp.ndarray:
            x = jnp.asarray(x)
            require(x.shape == lead + buf.shape[1:], "batch", f"a leaf of shape {x.shape}",
                    f"leaves shaped mask.shape + transition shape = {lead + buf.shape[1:]}")
            return x.reshape((-1, *buf.shape[1:])).astype(buf.dtype)

        rows = jax.tree.map(flat, state.data, batch)
        m = mask.reshape(-1)
        s, cap, n_seg = state.seg_size, self.capacity, self.n_segments
        rank = jnp.cumsum(m, dtype=jnp.int32) - 1  # position of a real row among the real rows
        n_new = jnp.sum(m, dtype=jnp.int32)
        ok = state.active < n_seg  # False only after a traced freeze past the last segment
        seg = jnp.minimum(state.active, n_seg - 1)
        # More real rows than a segment holds: only the last seg_size survive, as if added one
        # at a time. Dropping the others here keeps the scatter free of duplicate targets (XLA
        # leaves unspecified which of several writes to one slot wins).
        keep = m & ok & (rank >= n_new - s)
        ptr = state.ptr[seg]
        dest = jnp.where(keep, seg * s + (ptr + rank) % s, cap)  # cap: out of range, dropped
        data = jax.tree.map(lambda buf, x: buf.at[dest].set(x, mode="drop"), state.data, rows)
        p_max = jnp.max(state.priority)  # empty slots hold 0, so this is over filled slots
        p_new = jnp.where(p_max > 0, p_max, 1.0)
        priority = state.priority.at[dest].set(p_new, mode="drop")
        stored = jnp.where(ok, n_new, 0)
        return state.replace(
            data=data, priority=priority,
            ptr=state.ptr.at[seg].set((ptr + stored) % s),
            fill=state.fill.at[seg].set(jnp.minimum(state.fill[seg] + stored, s)),
            dropped=state.dropped + (n_new - stored))

    def sample(self, state: ReplayState, key: jnp.ndarray, n: int, beta: float | jnp.ndarray = 0.0
               ) -> tuple[Any, jnp.ndarray, jnp.ndarray]:
        """``n`` transitions drawn with replacement from the filled slots of all segments.

        Returns (transitions with leading axis ``n``, slot indices (n,) int32, importance
        weights (n,) f32 normalised by the buffer-wide maximum). ``beta`` may be traced (it is
        annealed to 1 during training). An empty buffer gives weights 0 (see the module doc)."""
        filled = _filled(state)
        if self.alpha == 0:
            mass = filled.astype(jnp.float32)
        else:
            mass = jnp.where(filled, state.priority ** self.alpha, 0.0)
        empty = ~jnp.any(filled)
        mass = jnp.where(empty, 1.0, mass)  # any slot will do: its weight is set to 0 below
        cdf = jnp.cumsum(mass)
        u = jax.random.uniform(key, (n,), maxval=cdf[-1])
        # searchsorted(side="right") never lands on a zero-mass slot (its cdf equals the one
        # before); the clip covers u rounding up to the total
        last = jnp.max(jnp.where(mass > 0, jnp.arange(self.capacity), 0))
        idx = jnp.minimum(jnp.searchsorted(cdf, u, side="right"), last).astype(jnp.int32)
        # (N P(i))^-beta / max_j (N P(j))^-beta = (p_min / p_i)^(alpha beta): N and the sum cancel
        m_min = jnp.min(jnp.where(mass > 0, mass, jnp.inf))
        w = jnp.where(empty, 0.0, (m_min / mass[idx]) ** beta).astype(jnp.float32)
        return jax.tree.map(lambda buf: buf[idx], state.data), idx, w

    def update_priorities(self, state: ReplayState, indices: jnp.ndarray,
                          priorities: jnp.ndarray) -> ReplayState:
        """Set the priority of slots ``indices`` to |priorities| + eps (typically the TD errors
        of a sampled batch). Indices of empty slots are ignored, keeping their priority 0. A
        slot sampled twice gets one of its two values (the same transition, so near-equal)."""
        filled = _filled(state)
        idx = jnp.where(filled[indices], indices, self.capacity)
        p = jnp.abs(jnp.asarray(priorities, jnp.float32)) + self.eps
        return state.replace(priority=state.priority.at[idx].set(p, mode="drop"))

    def freeze(self, state: ReplayState) -> ReplayState:
        """Freeze the active segment and make the next one active (a new training stage).

        Raises ``ConfigError`` on a concrete state with no segment left; under tracing see the
        module doc (nothing is clamped: later adds are refused and counted in ``dropped``)."""
        if not isinstance(state.active, jax.core.Tracer):
            require(segments_left(state) > 0, "n_segments", self.n_segments,
                    "every segment is in use; freeze() needs one more segment per stage")
        return state.replace(active=state.active + 1)
