"""The one sender interface every controller implements (DESIGN, "Controllers").

A controller is a frozen dataclass (its static configuration) with two pure methods:

* ``init(params, base_rtt_s) -> (cc_state, Decision)``
* ``on_interval(cc_state, stats, params) -> (cc_state, Decision)``

``params`` is the controller's dynamic parameter pytree (vmappable); ``stats`` is the
``MIStats`` of the monitor interval that just ended; the ``Decision`` says how the flow sends
until its next MI ends, and covers all three kinds of sender:

* rate-based (PCC, Aurora, MOCC):        ``rate > 0``, ``cwnd = inf``;
* window-based (Reno, Cubic, Vegas):     ``rate = 0`` (pace at cwnd/srtt), ``cwnd`` = window;
* paced with a window cap (BBR, Copa):   ``rate > 0`` and a finite ``cwnd``.

Bytes in flight never exceed ``cwnd``. All arrays carry the flow axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import jax.numpy as jnp

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats



class Decision(NamedTuple):
    rate: jnp.ndarray  # (F,) pacing rate in bytes/s; 0 means pace at cwnd/srtt
    # (F,) cap on bytes in flight; inf for none, which needs a rate > 0: with both unbounded a
    # flow would send without limit (the simulator's sums turn to inf and NaN)
    cwnd: jnp.ndarray
    mi_s: jnp.ndarray  # (F,) length of the next MI in seconds
    #: (F,) bool: the next MI ends with the round, at the first tick whose reports (ACKs and
    #: loss reports) cover everything the flow had in flight when it began, as a per-ACK TCP
    #: counts its rounds (Linux ``tcp_vegas``'s ``beg_snd_nxt``, ns-3 ``TcpVegas``'s
    #: ``m_begSndNxt``), or after ``mi_s``, whichever comes first; False: after ``mi_s``
    mi_round: jnp.ndarray


class Controller(Protocol):
    name: str

    def default_params(self, n_flows: int) -> Any: ...

    def init(self, params: Any, base_rtt_s: jnp.ndarray) -> tuple[Any, Decision]: ...

    def on_interval(
        self, state: Any, stats: MIStats, params: Any
    ) -> tuple[Any, Decision]: ...
