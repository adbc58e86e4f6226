"""Unit conversions, in one place (DESIGN principle 5).

Inside ccjax everything is seconds, bytes and bytes/s. Mbps, ms and packets appear only at the
edges (CLI flags, TOML presets, printed tables, plots) and are converted here.
"""

from __future__ import annotations

#: Bytes on the wire per packet. Rates and queue sizes are counted in wire bytes.
PACKET_BYTES = 1500
#: TCP payload per 1500-byte packet (MSS with timestamps), as ns-3 and Linux count it; goodput
#: is reported in payload bytes.
PAYLOAD_BYTES = 1448
#: The highest link or sending rate ccjax takes (1 Tbps): the simulator counts bytes in float32,
#: and a rate of about 3e33 Mbps overflows it into inf and NaN.
MAX_RATE_MBPS = 1e6


def check_rate_mbps(field: str, value: object) -> None:
    """A one-line ``ConfigError`` unless ``value`` is a rate in (0, ``MAX_RATE_MBPS``] Mbps (a
    bool is an int to Python and is no rate)."""
    import math
    import numbers

    from ccjax.errors import require

    require(isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and 0 < value <= MAX_RATE_MBPS, field, value,
            f"a number > 0 and at most {MAX_RATE_MBPS:g} Mbps")


def mbps_to_bytes_per_s(mbps: float) -> float:
    return mbps * 1e6 / 8.0


def bytes_per_s_to_mbps(bps: float) -> float:
    return bps * 8.0 / 1e6


def ms_to_s(ms: float) -> float:
    return ms * 1e-3


def s_to_ms(s: float) -> float:
    return s * 1e3


def pkts_to_bytes(pkts: float) -> float:
    return pkts * PACKET_BYTES


def bytes_to_pkts(b: float) -> float:
    return b / PACKET_BYTES


def ticks_problem(duration_s: float, tick_ms: float, tick: str) -> str | None:
    """Why ``duration_s`` is not a run of whole ticks of ``tick_ms`` (``tick`` names that tick
    in the message), or None: the simulator runs whole ticks, and a duration between them would
    be rounded silently. Whole up to float rounding (1e-6 relative: 0.3 / 0.1 is 3 ticks)."""
    import math

    ticks = duration_s * 1e3 / tick_ms
    if not (ticks >= 1 or math.isclose(ticks, 1, rel_tol=1e-6)):
        return f"at least one tick ({tick})"
    if not math.isclose(ticks, round(ticks), rel_tol=1e-6):
        return f"a whole number of ticks of {tick} (it is {ticks:.6g})"
    return None
