"""Asking the controller only for the flows whose monitor interval ended.

A tick asks the controller at MI boundaries, and in a batch only some flows reach one in a given
tick (a quarter RTT is 10 ticks at 40 ms). Evaluated on every flow and then selected with the
MI-end mask, as ``core.tick`` does for one link, a classic controller's arithmetic costs every
tick as much as if every MI ended, and XLA on the CPU makes it worse: it copies the controller's
(and the MI statistics') arithmetic into the fusion of each state leaf's select. For a 4-flow
CUBIC batch of 1,024 links that was three quarters of the run (measured: 4.4 s with the
controller, 1.0 s with one that returns its state unchanged).

``on_interval_where`` instead gathers the flows whose MI ended across the whole batch, runs
``on_interval`` on them in chunks of a fixed size (a ``while_loop`` over as many chunks as there
are such flows this tick) and scatters the answers back. A flow's answer is the same function of
its own state, statistics and parameters either way, so runs are the same, bit for bit, as
with the per-link select (``test_sim_laws``); what changes is how much is computed.

It applies on the CPU (``pays_off``) to controllers that declare ``per_flow = True``:
``on_interval`` treats the leading axis of every state, statistics and parameter leaf as
independent flows (the classic controllers, and a ``Mix`` of them). A learned policy shares its
network's weights between flows and keeps the per-link select.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from ccjax.cc.base import Controller, Decision


def is_per_flow(controller: Controller) -> bool:
    """Whether ``controller.on_interval`` is elementwise over the flow axis (``per_flow``)."""
    return bool(getattr(controller, "per_flow", False))


def pays_off(controller: Controller) -> bool:
    """Whether the batch driver should ask only the flows whose MI ended: a per-flow controller
    on the CPU. On a GPU the per-link select is the faster (an H200, ``ccjax bench sim``, CUBIC,
    packet model: 135M flow-ticks/s at batch 1,024 with the select, 27M gathered; 1,090M and
    641M at 65,536): the loop's trip count is data-dependent, so each tick waits on the host
    to read it, and the GPU's width makes the duplicated arithmetic cheap."""
    return is_per_flow(controller) and jax.default_backend() == "cpu"


def chunk_size(n_flows_total: int) -> int:
    """Flows per ``on_interval`` call: an eighth of the batch's flow slots, at least 8 (or all
    of them, where there are fewer).

    With quarter-RTT MIs at 20-100 ms RTTs a tenth to a twentieth of the flows end an MI in a
    tick, so one chunk usually holds them all; a tick where more end (slow start's shorter MIs,
    flows starting together) takes several chunks, never a wrong answer."""
    return max(1, min(n_flows_total, max(8, math.ceil(n_flows_total / 8))))


def leads_with(tree: Any, shape: tuple[int, ...]) -> bool:
    """Whether every leaf of ``tree`` leads with ``shape`` (links, flows): what
    ``on_interval_where`` needs of the controller's state, parameters and decision. A
    controller with a per-link parameter (no flow axis) keeps the per-link select."""
    return all(x.shape[:len(shape)] == shape for x in jax.tree.leaves(tree))


def on_interval_where(controller: Controller, cc: Any, stats: Any, params: Any,
                      dec: Decision, done: jnp.ndarray, chunk: int | None = None
                      ) -> tuple[Any, Decision]:
    """``controller.on_interval(cc, stats, params)`` where ``done``, ``(cc, dec)`` elsewhere.

    Every leaf leads with ``done``'s shape (links, flows) (``leads_with``)."""
    shape = done.shape
    n = math.prod(shape)
    size = chunk or chunk_size(n)
    flat = lambda x: x.reshape((n,) + x.shape[len(shape):])  # noqa: E731
    cc_f, st_f, p_f, dec_f = jax.tree.map(flat, (cc, stats, params, dec))
    mask = done.reshape(n)
    # the flows whose MI ended first, in order; then the out-of-range index n as padding, so
    # each chunk is a slice of whole chunks (no flow is asked twice)
    n_chunks = -(-n // size)
    order = jnp.nonzero(mask, size=n_chunks * size, fill_value=n)[0].astype(jnp.int32)
    count = mask.sum(dtype=jnp.int32)

    def body(carry):
        k, c, d = carry
        idx = jax.lax.dynamic_slice(order, (k * size,), (size,))
        # padding reads a real flow (clipped) and its answer is dropped below
        get = lambda x: x.at[idx].get(mode="clip")  # noqa: E731
        new_c, new_d = controller.on_interval(jax.tree.map(get, c), jax.tree.map(get, st_f),
                                              jax.tree.map(get, p_f))
        put = lambda old, new: old.at[idx].set(new, mode="drop")  # noqa: E731
        return k + 1, jax.tree.map(put, c, new_c), jax.tree.map(put, d, new_d)

    _, cc_f, dec_f = jax.lax.while_loop(lambda c: c[0] * size < count, body,
                                        (jnp.zeros((), jnp.int32), cc_f, dec_f))
    unflat = lambda x: x.reshape(shape + x.shape[1:])  # noqa: E731
    return jax.tree.map(unflat, cc_f), jax.tree.map(unflat, dec_f)
