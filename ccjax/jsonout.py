"""What the CLI's ``--json`` prints: strict JSON, a non-finite number written as ``null``.

Python's ``json.dumps`` writes NaN and infinity as the tokens ``NaN`` and ``Infinity``, which are
not JSON (RFC 8259): ``jq`` and most other readers refuse the whole line. A figure that has no
finite value (a policy that delivered nothing has no mean RTT) is ``null`` instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float (Python's or NumPy's, in dicts, lists, tuples
    and arrays, at any depth) replaced by None, and NumPy scalars and arrays by Python's."""
    import numpy as np  # here: the CLI imports this module before it needs NumPy

    if isinstance(obj, bool | int | str) or obj is None:
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.ndarray):
        return finite(obj.tolist())
    if isinstance(obj, np.generic):
        return finite(obj.item())
    if isinstance(obj, Mapping):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj  # anything else: json's own rules (and ``default``) decide


def dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps`` of ``finite(obj)``, refusing NaN outright (``allow_nan=False``), so no
    ``NaN`` or ``Infinity`` token can reach the output."""
    return json.dumps(finite(obj), allow_nan=False, **kw)
