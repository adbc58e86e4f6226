"""Action maps: how an agent's action changes its sending rate, written once (DESIGN, "one
home"). The environment (JAX), the policy controller (JAX) and the NumPy deployment
(``ccjax.deploy``, which inlines no copy of its own) all call these functions; ``xp`` is the
array module (``jax.numpy`` or ``numpy``), so one definition serves both. This module imports
nothing, so ``ccjax.deploy`` can load it beside itself without JAX.

* ``mocc``: continuous a; rate x (1 + alpha a) for a >= 0, rate / (1 - alpha a) otherwise
  (MOCC Eq. 1, alpha = 0.025 in Table 2; Aurora's rate update). Multiplicative and asymmetric,
  so +a and -a cancel exactly.
* ``auto``: one of seven multipliers {/2, /1.3, /1.1, x1, x1.1, x1.3, x2} (AUTO Eq. 7).

Both keep the result within [min_rate, max_rate] (AUTO Eq. 8 caps the rate at 500 Mbps in
training; Aurora clamps to its rate bounds).

Window maps (``WINDOW_ACTION_MAPS``) change a congestion window (packets) instead of a rate:

* ``astraea``: continuous a in (-1, 1); cwnd x (1 + alpha a) for a >= 0, cwnd / (1 - alpha a)
  otherwise (Astraea Eq. 3, alpha = 0.025 in Table 4), rounded to whole packets (§3.3: "cwnd
  is an integer"); the flow then paces at cwnd / sRTT (§3.3).
"""

from __future__ import annotations

import math
from typing import Any

#: AUTO Eq. 7's rate multipliers, in action-index order
AUTO_MULTIPLIERS = (1 / 2, 1 / 1.3, 1 / 1.1, 1.0, 1.1, 1.3, 2.0)
#: action map name -> (kind, n): what ``ccjax.envs.spec.ActionSpace`` declares
ACTION_MAPS = {"mocc": ("box", 1), "auto": ("discrete", len(AUTO_MULTIPLIERS))}
#: window action map name -> (kind, n), as ``ACTION_MAPS`` (the multi-flow environment's maps)
WINDOW_ACTION_MAPS = {"astraea": ("box", 1)}
#: Astraea's least window, packets: the paper gives none; its released kernel module keeps
#: cwnd >= 4 (``tcp_bbr_init_cwnd``, notes §8), which also keeps a flow's ACK clock alive
ASTRAEA_MIN_CWND_PKTS = 4.0


def mocc_rate(rate: Any, a: Any, alpha: Any, lo: Any, hi: Any, xp: Any) -> Any:
    """MOCC Eq. 1 for rate(s) ``rate`` and continuous action(s) ``a``."""
    new = xp.where(a >= 0, rate * (1.0 + alpha * a), rate / (1.0 - alpha * a))
    return xp.clip(new, lo, hi)


def auto_rate(rate: Any, index: Any, lo: Any, hi: Any, xp: Any) -> Any:
    """AUTO Eq. 7 for rate(s) ``rate`` and action index(es) ``index`` in 0..6."""
    mult = xp.asarray(AUTO_MULTIPLIERS, dtype=xp.float32)[index]
    return xp.clip(rate * mult, lo, hi)


def auto_action_feature(index: Any, xp: Any) -> Any:
    """The previous action as AUTO's fifth state feature (Eq. 4): log2 of its multiplier, in
    [-1, 1], so "keep the rate" reads 0 and halving and doubling are symmetric."""
    logs = [math.log2(m) for m in AUTO_MULTIPLIERS]
    return xp.asarray(logs, dtype=xp.float32)[index]


def astraea_cwnd(cwnd_pkts: Any, a: Any, alpha: Any, lo: Any, hi: Any, xp: Any) -> Any:
    """Astraea Eq. 3 for window(s) ``cwnd_pkts`` (packets) and continuous action(s) ``a``.

    The window is an integer (§3.3). The paper does not say how it rounds; the released
    inference code (notes §8, ``infer.py::map_action``) takes the ceiling for a >= 0 and the
    floor otherwise, so any a > 0 grows a small window by at least a packet, any a < 0 shrinks
    it, and a = 0 keeps an integer window exactly. Kept within [lo, hi] packets."""
    grown = xp.ceil(cwnd_pkts * (1.0 + alpha * a) - 1e-4)
    shrunk = xp.floor(cwnd_pkts / (1.0 - alpha * a) + 1e-4)
    # (the 1e-4 packet absorbs float32 round-off: cwnd x (1 + 0) must not become cwnd + 1)
    return xp.clip(xp.where(a >= 0, grown, shrunk), lo, hi)


def apply_window_action(kind: str, cwnd_pkts: Any, action: Any, alpha: Any, lo: Any, hi: Any,
                        xp: Any) -> Any:
    """The new window (packets) under the window map ``kind`` (``WINDOW_ACTION_MAPS``)."""
    if kind == "astraea":
        return astraea_cwnd(cwnd_pkts, action, alpha, lo, hi, xp)
    raise ValueError(f"window action map {kind!r} is invalid: one of "
                     f"{', '.join(WINDOW_ACTION_MAPS)}")


def apply_action(kind: str, rate: Any, action: Any, alpha: Any, lo: Any, hi: Any,
                 xp: Any) -> Any:
    """The new rate under the action map ``kind`` (``ACTION_MAPS``)."""
    if kind == "mocc":
        return mocc_rate(rate, action, alpha, lo, hi, xp)
    if kind == "auto":
        return auto_rate(rate, action, lo, hi, xp)
    raise ValueError(f"action map {kind!r} is invalid: one of {', '.join(ACTION_MAPS)}")


def action_feature(kind: str, action: Any, xp: Any) -> Any:
    """What a feature history records of the action (AUTO Eq. 4's previous action): for
    ``auto`` its ``auto_action_feature``; ``mocc``'s state holds no action, so 0."""
    if kind == "auto":
        return auto_action_feature(action, xp)
    return xp.zeros((), dtype=xp.float32)
