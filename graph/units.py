"""Parse durations, sizes and bandwidths written with units.

Inside shufflesim everything is seconds (float) and bytes (int); strings with units are
parsed only at the edges (scenario files, CLI, the graph API's ``cost=`` arguments).
Every function accepts a plain number too and raises ``ValueError`` naming a bad value.
"""

from __future__ import annotations

import re

_NUMBER = r"([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)"
_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*([a-zµ/]*)\s*$", re.IGNORECASE)

_DURATION_UNITS = {
    "": 1.0, "s": 1.0, "sec": 1.0, "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3,
    "m": 60.0, "min": 60.0, "h": 3600.0,
}
_SIZE_UNITS = {
    "": 1, "b": 1, "kb": 1 << 10, "k": 1 << 10, "kib": 1 << 10, "mb": 1 << 20, "m": 1 << 20,
    "mib": 1 << 20, "gb": 1 << 30, "g": 1 << 30, "gib": 1 << 30, "tb": 1 << 40, "tib": 1 << 40,
}
# Bandwidth is decimal, as network links are quoted: bits (…bit, …bps) or bytes (…byte, …b/s).
_BANDWIDTH_UNITS = {
    "": 1.0, "b/s": 1.0, "byte": 1.0, "bytes": 1.0,
    "kb/s": 1e3, "kbyte": 1e3, "mb/s": 1e6, "mbyte": 1e6, "gb/s": 1e9, "gbyte": 1e9,
    "bit": 1 / 8, "bps": 1 / 8, "kbit": 1e3 / 8, "kbps": 1e3 / 8, "mbit": 1e6 / 8,
    "mbps": 1e6 / 8, "gbit": 1e9 / 8, "gbps": 1e9 / 8,
}


def _split(value: object, what: str, units: dict) -> tuple[float, float]:
    """Return (number, unit multiplier) of ``value`` or raise ValueError naming it."""
    if isinstance(value, bool):
        raise ValueError(f"invalid {what}: {value!r}")
    if isinstance(value, (int, float)):
        return float(value), units[""]
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match and match.group(2).lower() in units:
            return float(match.group(1)), units[match.group(2).lower()]
    raise ValueError(f"invalid {what}: {value!r} (expected e.g. {_EXAMPLES[what]})")


_EXAMPLES = {
    "duration": "'5ms', '30s', '2m', '100us' or seconds as a number",
    "size": "'32kb', '64mb', '1gb' or bytes as an integer",
    "bandwidth": "'10gbit', '100mbit', '1gbyte', '500mb/s' or bytes/s as a number",
}


def parse_duration(value: str | float | int) -> float:
    """``"5ms"`` -> 0.005; units ns, us, ms, s, m (minutes), h; a number means seconds."""
    number, unit = _split(value, "duration", _DURATION_UNITS)
    return number * unit


def parse_size(value: str | int) -> int:
    """``"32kb"`` -> 32768 (binary multiples); a plain integer means bytes."""
    number, unit = _split(value, "size", _SIZE_UNITS)
    size = number * unit
    if size != int(size) or size < 0:
        raise ValueError(f"invalid size: {value!r} (not a whole, non-negative number of bytes)")
    return int(size)


def parse_bandwidth(value: str | float | int) -> float:
    """``"10gbit"`` -> 1.25e9 bytes/s; ``"500mb/s"`` -> 5e8; a number means bytes/s."""
    number, unit = _split(value, "bandwidth", _BANDWIDTH_UNITS)
    if number <= 0:
        raise ValueError(f"invalid bandwidth: {value!r} (must be positive)")
    return number * unit
