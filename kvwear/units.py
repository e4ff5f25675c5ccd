"""Parsing and formatting of sizes and durations with units.

Sizes: SI (kB, MB, GB, TB = 10^3k) and IEC (KiB, MiB, GiB, TiB = 2^10k); a bare number is
bytes. Durations: s, ms, us, min, h, d; a bare number is seconds.
"""

from __future__ import annotations

import math
import numbers
import re

from kvwear.errors import KvwearError

_SIZE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
    "t": 10**12, "tb": 10**12, "p": 10**15, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_DURATION_UNITS: dict[str, float] = {
    "": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9,
    "min": 60.0, "m": 60.0, "h": 3600.0, "d": 86400.0,
}
_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


#: The largest size accepted (1 EiB): every byte count must stay far inside int64 once summed.
MAX_SIZE_BYTES = 1 << 60


def parse_size(text: str | int | float) -> int:
    """'100GB' → 100_000_000_000; '1.5GiB' → 1_610_612_736; 4096 → 4096 (at most 1 EiB)."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int | float):
        if text < 0 or not math.isfinite(text):
            raise ValueError(f"not a size: {text!r}")
        value = float(text)
    else:
        m = _NUM.match(str(text))
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(
                f"not a size: {text!r} (examples: 4096, 512KiB, 100GB, 1.5TiB)"
            )
        value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not value <= MAX_SIZE_BYTES:          # also inf ('1e400GB')
        raise ValueError(f"size {text!r} is larger than 1 EiB")
    return int(text) if isinstance(text, int) else round(value)


def parse_duration(text: str | int | float) -> float:
    """'10min' → 600.0; '250ms' → 0.25; 3 → 3.0."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    m = _NUM.match(str(text))
    if not m or m.group(2).lower() not in _DURATION_UNITS:
        raise ValueError(f"not a duration: {text!r} (examples: 30, 250ms, 10min, 2h)")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]


def format_bytes(n: float, binary: bool = True) -> str:
    """Human-readable size: 1536 → '1.50 KiB' (binary) or '1.54 kB' (SI)."""
    base, units = (1024.0, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]) if binary else (
        1000.0, ["B", "kB", "MB", "GB", "TB", "PB"])
    x = float(n)
    for unit in units:
        if abs(x) < base or unit == units[-1]:
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.2f} {unit}"
        x /= base
    raise AssertionError("unreachable")


DAYS_PER_YEAR = 365.0


def format_lifetime(days: float | None, *, short: bool = False) -> str:
    """A projected lifetime in the one unit kvwear shows it in: years, or days where it is under a
    year; '∞' when nothing was written, '—' when there is none. `short`:
    '2.4 y', '131 d' (tables, figures); else '2.4 years', '131 days' (sentences)."""
    if days is None or (isinstance(days, float) and math.isnan(days)):
        return "—"
    if math.isinf(days):
        return "∞"
    if days >= DAYS_PER_YEAR:
        years = days / DAYS_PER_YEAR
        value, unit = (f"{years:,.1f}" if years < 100 else f"{years:,.0f}"), ("y" if short else "years")
    else:
        value = f"{days:,.0f}" if days >= 10 else f"{days:.2g}"
        unit = "d" if short else ("day" if value == "1" else "days")
    return f"{value} {unit}"


#: Smallest memory budget accepted (`--memory-budget` of characterize and inspect): below it the
#: characterization's SHARDS sample (a few hundred blocks) means little.
MIN_MEMORY_BUDGET_BYTES = 1 << 16


def check_budget(memory_budget_bytes: object, name: str = "memory_budget_bytes") -> int:
    """The budget as an int, or a one-line error naming `name`. (Here, not beside the
    characterization that defined it: `trace inspect` checks its budget too, and importing
    kvwear.workloads.characterize_stream, with numba and pandas, cost it ~150 MB of its peak.)"""
    if isinstance(memory_budget_bytes, bool) or not isinstance(memory_budget_bytes, numbers.Integral):
        raise KvwearError(f"{name} must be a whole number of bytes, not {memory_budget_bytes!r}")
    if memory_budget_bytes < MIN_MEMORY_BUDGET_BYTES:
        raise KvwearError(f"{name} {memory_budget_bytes:,} bytes is below the minimum "
                          f"{MIN_MEMORY_BUDGET_BYTES:,} (64 KiB)")
    return int(memory_budget_bytes)
