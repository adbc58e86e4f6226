"""Where the shipped TOML presets live (``sims/``, ``algos/``, later ``sweeps/``), and how any
TOML file ccjax takes (a preset or the user's own) is read (``read_toml``).

The wheel ships them as ``ccjax/_presets/<kind>`` (pyproject force-include); a source checkout
or editable install reads the repo's ``<kind>/`` directly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ccjax.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib


def presets_dir(kind: str) -> Path:
    shipped = Path(__file__).resolve().parent / "_presets" / kind
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[1] / kind


def read_toml(path: str | os.PathLike[str], shown: str | None = None) -> dict[str, Any]:
    """The parsed TOML document in the file ``path``. Every way reading it can fail (a folder,
    an unreadable file, bytes that are not UTF-8, a syntax error) is one ``ConfigError`` line
    that starts with the file's name (``shown``: the path as the error writes it), so each
    loader (scenarios, algorithm presets, sweep specs) fails alike and none with a traceback."""
    p = Path(path)
    name = str(p) if shown is None else shown
    if p.is_dir():
        raise ConfigError(f"{name}: is a folder; allowed: a TOML file")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"{name}: cannot be read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        # tomllib would say only "'utf-8' codec can't decode": name the byte and its line
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{name}: invalid TOML file: not UTF-8 at byte {e.start} (line {line}, "
                          f"0x{raw[e.start]:02x}); allowed: UTF-8 text, as TOML requires"
                          ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # tomllib's message ends with "(at line L, column C)"; kept on one line
        why = " ".join(str(e).split())
        raise ConfigError(f"{name}: invalid TOML syntax: {why}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ConfigError(f"{name}: invalid TOML: arrays or tables nested too deeply") from None
    return data
