"""Deferred TRIM: split a block_ops plan so that a fio which cannot replay iolog trims still
plays every other op and the caller issues the trims itself, in between.

fio 3.33 (Debian 12) drops the trim lines of an iolog ("bad ddir: 2"). `segment_plan` cuts the
plan, in order, into segments of at most `max_ops` rows and `max_bytes` written + trimmed bytes.
A segment's reads and writes go to fio as one iolog; its trims run when that fio has finished,
reduced to the units (`unit_bytes`, 4 KiB for kvwear's plans) that no later write of the same
segment rewrites. That keeps the device's end state of every segment exactly what the plan in
its own order leaves — a unit ends trimmed iff its last op in the segment was a trim — and
changes only *when* a trimmed unit stops being valid: at the segment's end instead of at its
trim (or, for a unit rewritten later in the segment, at that rewrite, which invalidates it
anyway). Smaller segments bring the two closer at the cost of one fio start per segment.

Byte accounting per segment: planned trim bytes = issued + superseded, where superseded counts
units rewritten later in the segment or trimmed twice in it.

Pure: it must not issue I/O or run fio (kvwear.harness.devices.fio does both).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import KvwearError
from kvwear.harness.devices.measurement import TrimCount, TrimMode

DEFAULT_SEGMENT_OPS = 50_000     # rows per segment: each segment costs one fio start (~0.3 s here)


@dataclass(frozen=True)
class PlanSegment:
    """One piece of a plan: `ops` (its reads and writes, in order, for fio), then the trims to
    issue after them as (offset, length) ranges in address order."""

    first_row: int                     # 0-based plan row where the segment starts
    rows: int                          # plan rows in it, trims included
    ops: pa.Table
    trim_offsets: np.ndarray           # int64 bytes
    trim_lengths: np.ndarray           # int64 bytes
    planned_trim_bytes: int
    superseded_trim_bytes: int         # rewritten later in the segment, or trimmed twice in it

    @property
    def issued_trim_bytes(self) -> int:
        return int(self.trim_lengths.sum())


def _expand_units(first: np.ndarray, count: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every unit index covered by ranges [first, first + count), with the row position of its range."""
    total = int(count.sum())
    starts = np.repeat(first - np.concatenate(([0], np.cumsum(count)[:-1])), count)
    return starts + np.arange(total, dtype=np.int64), np.repeat(pos, count)


def _runs(units: np.ndarray, unit_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique unit indices → (offset, length) byte ranges of their consecutive runs."""
    if units.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(units) != 1) + 1
    starts = units[np.concatenate(([0], breaks))]
    ends = units[np.concatenate((breaks - 1, [units.size - 1]))] + 1
    return starts * unit_bytes, (ends - starts) * unit_bytes


def _segment_trims(op: np.ndarray, off: np.ndarray, ln: np.ndarray, unit_bytes: int
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """Trims of one segment reduced to the units no later write of the segment rewrites."""
    pos = np.arange(op.size, dtype=np.int64)
    t = op == "trim"
    planned = int(ln[t].sum())
    if not t.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    w = op == "write"
    w_units, w_pos = _expand_units(off[w] // unit_bytes, ln[w] // unit_bytes, pos[w])
    # Last write position per unit: sort by (unit, position), keep each unit's last entry.
    order = np.lexsort((w_pos, w_units))
    w_units, w_pos = w_units[order], w_pos[order]
    last = np.flatnonzero(np.append(w_units[1:] != w_units[:-1], True)) if w_units.size else np.zeros(0, np.int64)
    w_units, w_last = w_units[last], w_pos[last]
    t_units, t_pos = _expand_units(off[t] // unit_bytes, ln[t] // unit_bytes, pos[t])
    i = np.searchsorted(w_units, t_units)
    found = i < w_units.size
    found[found] = w_units[i[found]] == t_units[found]
    rewritten = np.zeros(t_units.size, dtype=bool)
    rewritten[found] = w_last[i[found]] > t_pos[found]
    keep = np.unique(t_units[~rewritten])
    offsets, lengths = _runs(keep, unit_bytes)
    return offsets, lengths, planned - int(lengths.sum())


def segment_plan(plan: pa.Table, *, max_ops: int = DEFAULT_SEGMENT_OPS, max_bytes: int = 8 << 30,
                 unit_bytes: int = 4096) -> list[PlanSegment]:
    """Cut `plan` (BLOCK_OPS, in order) into segments; see the module docstring. Offsets and
    lengths must be multiples of `unit_bytes` (kvwear's planner aligns objects to 4 KiB)."""
    if max_ops < 1 or max_bytes < unit_bytes or unit_bytes < 1:
        raise KvwearError(f"segment_plan: need max_ops ≥ 1 and max_bytes ≥ unit_bytes ≥ 1, got "
                          f"{max_ops}, {max_bytes}, {unit_bytes}")
    n = plan.num_rows
    op = np.asarray(pc.cast(plan.column("op"), pa.string()).to_numpy(zero_copy_only=False))
    off = plan.column("offset_bytes").to_numpy(zero_copy_only=False).astype(np.int64)
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False).astype(np.int64)
    bad = np.flatnonzero((off % unit_bytes != 0) | (ln % unit_bytes != 0))
    if bad.size:
        raise KvwearError(f"block_ops row {int(bad[0]) + 1}: offset {int(off[bad[0]])} / length "
                          f"{int(ln[bad[0]])} not a multiple of {unit_bytes} bytes; trims cannot be deferred")
    # Memory is bounded by the units a segment expands: count written and trimmed bytes only.
    cum = np.cumsum(np.where(op == "read", 0, ln))
    out: list[PlanSegment] = []
    start = 0
    while start < n:
        base = int(cum[start - 1]) if start else 0
        end = min(start + max_ops, int(np.searchsorted(cum, base + max_bytes, side="right")))
        end = max(end, start + 1)           # one row larger than max_bytes is a segment of its own
        seg_op, seg_off, seg_ln = op[start:end], off[start:end], ln[start:end]
        offsets, lengths, superseded = _segment_trims(seg_op, seg_off, seg_ln, unit_bytes)
        rows = plan.slice(start, end - start)
        out.append(PlanSegment(
            first_row=start, rows=end - start,
            ops=rows.filter(pa.array(seg_op != "trim")),
            trim_offsets=offsets, trim_lengths=lengths,
            planned_trim_bytes=int(seg_ln[seg_op == "trim"].sum()), superseded_trim_bytes=superseded))
        start = end
    return out


def device_segments(plan: pa.Table, *, capacity_bytes: int, block_bytes: int, max_ops: int = DEFAULT_SEGMENT_OPS,
                    max_bytes: int | None = None) -> tuple[list[PlanSegment], dict[str, int]]:
    """`segment_plan` with the device backends' defaults: 4 KiB units when the plan is 4 KiB
    aligned (kvwear's are), else the device's block; segments of at most `max_bytes` written +
    trimmed bytes, by default 1% of the capacity and at least 64 MiB — the bound on the stale data
    a late trim leaves for GC. Returns the segments and the settings used (for the record)."""
    off = plan.column("offset_bytes").to_numpy(zero_copy_only=False)
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False)
    unit = 4096 if not ((off % 4096).any() or (ln % 4096).any()) else block_bytes
    seg_bytes = max(max_bytes or max(capacity_bytes // 100, 64 << 20), unit)
    return (segment_plan(plan, max_ops=max_ops, max_bytes=seg_bytes, unit_bytes=unit),
            {"trim_unit_bytes": unit, "trim_segment_bytes": seg_bytes, "trim_segment_ops": max_ops})


def trim_accounting(segments: list[PlanSegment]) -> tuple[TrimCount, dict[str, int]]:
    """What a deferred-trim replay reports about its trims: the typed count the estimator checks,
    and the segment figures for people (ReplayResult.details)."""
    count = TrimCount(TrimMode.DEFERRED, planned_bytes=sum(s.planned_trim_bytes for s in segments),
                      superseded_bytes=sum(s.superseded_trim_bytes for s in segments))
    return count, {"segments": len(segments),
                   "trim_ranges_issued": sum(int(s.trim_offsets.size) for s in segments)}
