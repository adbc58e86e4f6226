"""Where the shipped TOML presets live (``sims/``, ``algos/``, later ``sweeps/``).

The wheel ships them as ``ccjax/_presets/<kind>`` (pyproject force-include); a source checkout
or editable install reads the repo's ``<kind>/`` directly.
"""

from __future__ import annotations

from pathlib import Path


def presets_dir(kind: str) -> Path:
    shipped = Path(__file__).resolve().parent / "_presets" / kind
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[1] / kind
