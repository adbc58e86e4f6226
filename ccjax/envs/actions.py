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
"""

from __future__ import annotations

import math
from typing import Any

#: AUTO Eq. 7's rate multipliers, in action-index order
AUTO_MULTIPLIERS = (1 / 2, 1 / 1.3, 1 / 1.1, 1.0, 1.1, 1.3, 2.0)
#: action map name -> (kind, n): what ``ccjax.envs.spec.ActionSpace`` declares
ACTION_MAPS = {"mocc": ("box", 1), "auto": ("discrete", len(AUTO_MULTIPLIERS))}


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
