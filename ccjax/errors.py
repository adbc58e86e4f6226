"""The one error type for invalid user input (DESIGN principle 6).

A ``ConfigError`` is raised before anything is traced; its message is one line that names the
field, the bad value and what is allowed. The CLI prints it and exits with code 2.
"""

from __future__ import annotations

#: what ``str.splitlines`` breaks a line at, each written as its escape instead
_LINE_BREAKS = {c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    """``text`` with every line break written as its escape (``\\n``): a value the user gave
    (a TOML key, a file name) may hold one, and the message must stay one line."""
    return "".join(_LINE_BREAKS.get(c, c) for c in text)


class ConfigError(ValueError):
    """Invalid configuration or input, raised before tracing. Its message is kept to one line
    (``one_line``), whatever the values quoted in it hold."""

    def __init__(self, message: object = "", *rest: object) -> None:
        super().__init__(one_line(str(message)), *rest)


def require(cond: bool, field: str, value: object, allowed: str) -> None:
    """Raise ``ConfigError("field=value: allowed")`` unless ``cond``."""
    if not cond:
        raise ConfigError(f"{field}={value!r} is invalid: {allowed}")
