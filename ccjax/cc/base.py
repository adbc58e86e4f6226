"""The one sender interface every controller implements (DESIGN, "Controllers").

A controller is a frozen dataclass (its static configuration) with two pure methods:

* ``init(params, base_rtt_s) -> (cc_state, Decision)``
* ``on_interval(cc_state, stats, params) -> (cc_state, Decision)``

``params`` is the controller's dynamic parameter pytree (vmappable); ``stats`` is the
``MIStats`` of the monitor interval that just ended; the ``Decision`` says how the flow sends
until its next MI ends: a pacing rate, a congestion window (used when ``window`` is true; the
pacing rate is then cwnd/srtt), and the length of the next MI. All arrays carry the flow axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import jax.numpy as jnp

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats



class Decision(NamedTuple):
    rate: jnp.ndarray  # (F,) bytes/s, pacing rate of a rate-based sender
    cwnd: jnp.ndarray  # (F,) bytes, window of a window-based sender
    window: jnp.ndarray  # (F,) bool: window-based (True) or rate-based (False)
    mi_s: jnp.ndarray  # (F,) length of the next MI in seconds


class Controller(Protocol):
    name: str

    def default_params(self, n_flows: int) -> Any: ...

    def init(self, params: Any, base_rtt_s: jnp.ndarray) -> tuple[Any, Decision]: ...

    def on_interval(
        self, state: Any, stats: MIStats, params: Any
    ) -> tuple[Any, Decision]: ...
