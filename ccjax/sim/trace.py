"""Loader for mahimahi link traces.

Format (mahimahi, Netravali et al., USENIX ATC 2015): one integer per line, a timestamp in ms from
the start of the trace; each line is one opportunity to send one 1500-byte packet. Repeated
timestamps mean several packets in that millisecond. The trace repeats when it reaches its end;
its period is the last timestamp rounded up to a whole millisecond (at least 1 ms), as mahimahi
does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ccjax.errors import ConfigError
from ccjax.units import PACKET_BYTES

#: the latest timestamp, so the longest period, a trace may have: one day. ``trace_segments``
#: holds the period per millisecond (about 10 bytes each while it runs: 0.9 GB for a day), so a
#: stamp such as 10**14 would ask for hundreds of TiB; real traces last seconds to hours.
MAX_STAMP_MS = 86_400_000


def load_mahimahi(path: str | Path) -> np.ndarray:
    """Read a trace file into an int64 array of millisecond timestamps, validated."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"trace={str(p)!r} is invalid: it is a folder, not a trace file")
    if not p.is_file():
        raise ConfigError(f"trace={str(p)!r} is invalid: no such file")
    stamps = []
    try:
        fh = p.open("rb")  # bytes: a line that is not text is reported by its number
    except OSError as e:
        raise ConfigError(f"trace={str(p)!r} is invalid: {e.strerror or e}") from None
    with fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                s = raw.decode("ascii").strip()
            except UnicodeDecodeError:
                raise ConfigError(
                    f"trace={str(p)!r} line {lineno} is invalid: not ASCII text; a mahimahi "
                    "trace holds one integer millisecond timestamp per line"
                ) from None
            if not s:
                continue
            try:
                v = int(s)
            except ValueError:
                raise ConfigError(
                    f"trace={str(p)!r} line {lineno} is invalid: {s!r} is not an integer"
                    " millisecond timestamp"
                ) from None
            # here, with the line's number, and before int64 could overflow
            if v > MAX_STAMP_MS:
                raise ConfigError(
                    f"trace={str(p)!r} line {lineno} is invalid: {v} ms is past one day; "
                    f"timestamps must be at most {MAX_STAMP_MS} ms"
                )
            stamps.append(v)
    return validate_stamps(np.asarray(stamps, dtype=np.int64), str(p))


def validate_stamps(stamps: np.ndarray, name: str = "trace") -> np.ndarray:
    if stamps.size == 0:
        raise ConfigError(f"trace={name!r} is invalid: empty, needs at least one timestamp")
    if np.any(stamps < 0):
        raise ConfigError(f"trace={name!r} is invalid: negative timestamp, must be >= 0 ms")
    if np.any(stamps > MAX_STAMP_MS):
        raise ConfigError(f"trace={name!r} is invalid: timestamp {int(stamps.max())} ms is past "
                          f"one day; timestamps must be at most {MAX_STAMP_MS} ms")
    bad = np.nonzero(np.diff(stamps) < 0)[0]
    if bad.size:
        i = int(bad[0]) + 1
        raise ConfigError(
            f"trace={name!r} is invalid: timestamps decrease at entry {i + 1}"
            f" ({int(stamps[i - 1])} -> {int(stamps[i])}); they must be non-decreasing"
        )
    return stamps


def trace_segments(stamps: np.ndarray, tick_s: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Turn timestamps into (segment starts in ticks, bytes per tick, period in ticks).

    Each millisecond of the trace becomes one segment whose rate delivers that millisecond's
    packets; consecutive milliseconds with equal counts are merged.
    """
    period_ms = max(int(stamps[-1]), 1)
    # Mahimahi: opportunities at timestamp == period belong to the next period's start; a trace
    # ending at t delivers its last packets at t, i.e. in ms bin t mod period.
    counts = np.bincount(stamps % period_ms, minlength=period_ms).astype(np.float64)
    change = np.concatenate([[True], counts[1:] != counts[:-1]])
    starts_ms = np.nonzero(change)[0]
    ms_per_tick = tick_s * 1e3
    rates = counts[starts_ms] * PACKET_BYTES * ms_per_tick  # bytes per tick within that ms
    return starts_ms / ms_per_tick, rates, period_ms / ms_per_tick


def mean_rate_bytes_per_s(stamps: np.ndarray) -> float:
    """A trace's mean capacity over one period (bytes/s): its delivery opportunities of one
    1500-byte packet each over the period ``trace_segments`` repeats it with."""
    period_ms = max(int(stamps[-1]), 1)
    return float(len(stamps) * PACKET_BYTES / (period_ms * 1e-3))
