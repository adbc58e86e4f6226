"""Small drivers the tests share: run a link tick by tick and record what the laws need."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ccjax.cc.const import Const, FixedWindow
from ccjax.sim import LinkSpec, build_links, in_flight, init_state, plan, tick
from ccjax.units import mbps_to_bytes_per_s


def tick_trace(spec: LinkSpec, model: str, rate_mbps, duration_s: float, seed: int = 0,
               window_pkts: float | None = None, window_sender: str = "paced",
               controller=None, params=None, **cfg_kw):
    """Run one link for ``duration_s`` and return per-tick arrays (numpy) of the state.

    The flows run ``Const`` at ``rate_mbps``, a ``FixedWindow`` of ``window_pkts``, or
    ``controller`` with ``params`` (its default parameters if None). ``cfg_kw`` go to ``plan``
    (``SimConfig``)."""
    cfg, horizon = plan([spec], duration_s, model=model, window_sender=window_sender, **cfg_kw)
    link = jax.tree.map(lambda x: x[0], build_links([spec], cfg, horizon))
    if controller is not None:
        ctl = controller
        params = ctl.default_params(cfg.n_flows) if params is None else params
    elif window_pkts is None:
        ctl = Const()
        rates = np.broadcast_to(np.asarray(rate_mbps, np.float64), (cfg.n_flows,))
        params = ctl.default_params(cfg.n_flows).replace(
            rate=jnp.asarray([mbps_to_bytes_per_s(r) for r in rates], jnp.float32))
    else:
        ctl = FixedWindow()
        params = ctl.default_params(cfg.n_flows, cwnd_pkts=window_pkts)
    s0 = init_state(cfg, link, ctl, params, jax.random.PRNGKey(seed))

    def body(s, _):
        s = tick(cfg, ctl, link, params, s)
        rec = dict(sent=s.sent, acked=s.acked, lost=s.lost, queue=s.queue,
                   inflight=in_flight(s, link, cfg), delivered=s.tot.delivered,
                   served=s.tot.served, qtot=s.queue.sum(), srtt=s.srtt, mi_done=s.mi_done,
                   dropped=s.tot.dropped, flight=s.flight, cwnd=s.decision.cwnd,
                   prr_on=s.prr.on, prr_delivered=s.prr.delivered, prr_out=s.prr.out,
                   prr_fs=s.prr.recover_fs, prr_last=s.prr.last, prr_since=s.prr.since,
                   prr_held=s.prr.held, prr_left=s.prr.left, prr_emptied=s.prr.emptied,
                   retx_lost_mi=s.mi.retx_lost,
                   retx_lost_last=s.last.retx_lost_bytes, clock=s.clock)
        return s, rec

    n = int(round(duration_s / cfg.tick_s))
    s, rec = jax.jit(lambda s0: jax.lax.scan(body, s0, None, length=n))(s0)
    return cfg, link, s, jax.tree.map(np.asarray, rec)
