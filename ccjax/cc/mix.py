"""Several controllers on one link: flow i runs controller ``index[i]``.

This is how friendliness (Cubic vs. BBR), TCP-friendliness of a learned policy and ZiXia's arena
are measured: the same link, different senders. Every member controller runs on every flow and
each flow keeps its own controller's decision, which is branch-free and so vmaps; the cost is
one evaluation of each member per flow and MI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Controller, Decision

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats


class MixParams(struct.PyTreeNode):
    index: jnp.ndarray  # (F,) int32: which member drives each flow
    members: tuple  # each member's own params


@dataclass(frozen=True)
class Mix:
    controllers: tuple[Controller, ...]
    name: str = field(default="mix")

    @property
    def per_flow(self) -> bool:
        """Elementwise over flows when every member is (``sim.compact``)."""
        return all(getattr(c, "per_flow", False) for c in self.controllers)

    def default_params(self, n_flows: int) -> MixParams:
        return MixParams(index=jnp.zeros(n_flows, jnp.int32),
                         members=tuple(c.default_params(n_flows) for c in self.controllers))

    def _select(self, index: jnp.ndarray, decisions: list[Decision]) -> Decision:
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *decisions)
        return jax.tree.map(
            lambda x: jnp.take_along_axis(x, index[None, :], axis=0)[0], stacked)

    def init(self, params: MixParams, base_rtt_s: jnp.ndarray) -> tuple[Any, Decision]:
        out = [c.init(p, base_rtt_s) for c, p in zip(self.controllers, params.members,
                                                       strict=True)]
        return tuple(o[0] for o in out), self._select(params.index, [o[1] for o in out])

    def on_interval(self, state: tuple, stats: MIStats, params: MixParams):
        out = [c.on_interval(s, stats, p) for c, s, p in zip(self.controllers, state,
                                                            params.members, strict=True)]
        return tuple(o[0] for o in out), self._select(params.index, [o[1] for o in out])
