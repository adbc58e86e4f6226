"""The one error type for invalid user input (DESIGN principle 6).

A ``ConfigError`` is raised before anything is traced; its message is one line that names the
field, the bad value and what is allowed. The CLI prints it and exits with code 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid configuration or input, raised before tracing."""


def require(cond: bool, field: str, value: object, allowed: str) -> None:
    """Raise ``ConfigError("field=value: allowed")`` unless ``cond``."""
    if not cond:
        raise ConfigError(f"{field}={value!r} is invalid: {allowed}")
