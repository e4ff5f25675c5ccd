"""Physical placement: a post-pass over a laid-out BLOCK_OPS plan that gives every row a placement
handle (NVMe Flexible Data Placement's reclaim unit handle; the `placement_handle` column).

Modes (`[replay] placement`, flag `--placement`):
- `none`: every row on handle 0 (what a drive without FDP sees).
- `kind`: full-attention KV on handle 0, linear/sliding states on handle 1. The two kinds have
  very different lives (a state is superseded within a turn, a KV chunk lives as long as its
  prefix), so keeping them in separate reclaim units stops GC from copying long-lived KV out of
  erase units emptied by dead states. Why KV on 0: handle 0 is the default one (the one a drive
  opens first, and the only one a dense model's plan then uses), so a plan without states plays
  exactly as with `none`.
  Optionally only where the kinds' lives differ: when both kinds write, their byte shares over the
  `lifetime` buckets (the oracle below, edges C/4, C/2, C) are compared (`kind_separation`, their
  total variation distance, always recorded), and below `kind_min_separation` every write stays on
  handle 0 (`kind_fallback`). Default 0: never. Why not the 0.5 this rule once had: its reason was
  that a second handle costs the drive an open reclaim unit, but an FDP drive's handles each hold
  an open unit whether the host writes to them or not (kvwear.emulator.ftl `open_every_handle`), so the
  cost comes with the drive's FDP configuration, not with `kind`; and the TVD did not predict the
  outcome (measured on bench/placement.py's plans: under FEMU's background GC `kind` lowered LRU's
  WAF at TVD 0.39 and raised Gandalf's at 0.70; under on-demand GC it never raised a WAF by more
  than 0.001 and removed Belady's residual GC at TVD 0.38). The knob stays for users who want one
  handle for kinds that die alike; it is one number for every policy and trace.
- `lifetime`: `handles` buckets of expected residency, handle 0 the longest-lived (for the same
  reason: the bulk, and data that never dies in the plan, stay on the default handle). The residency
  of a write row is an offline oracle read from the plan itself: the host bytes the plan writes
  between that row's write and the death of its last page (the next write or trim of the same
  logical page; a page that never dies is beyond every edge). Measured in host bytes written,
  not seconds, because the device's clock is writes: data that dies within a fraction of a
  capacity's worth of writes is never worth copying. Why an oracle rather than a policy's own
  estimate: it is defined for every policy alike (the policies do not export a residency
  estimate), it is the best case lifetime placement can reach, and `kind` is the online rule to
  hold it against. Why the last page: an extent's pages are reclaimable together only when all
  of them are dead. Bucket edges are geometric in the device capacity C: for n handles,
  C·2^(i−n+2) for i = 0 … n−2 (n = 4: C/4, C/2, C), a parameter (`handles`), never tuned per trace.

Reads and trims keep handle 0 (a handle only steers where a write is programmed).

This module plans only: it must not issue I/O, open devices or know about FTLs; the one loop over
pages is a numba kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear import jitcache
from kvwear.errors import InputError, KvwearError
from kvwear.harness.plan.schema import BLOCK_OPS

jitcache.install()   # numba's cache saved under a lock: before any cached kernel is defined

Placement = Literal["none", "kind", "lifetime"]
PLACEMENTS: tuple[str, ...] = ("none", "kind", "lifetime")
KIND_HANDLES = {"full": 0, "linear": 1}
MAX_HANDLES = 8          # the embedded FTL's reclaim unit handles (kvwear.emulator.ftl.MAX_RUH)


@dataclass(frozen=True)
class PlacementConfig:
    mode: Placement = "none"
    lifetime_handles: int = 4          # `lifetime`: residency buckets (2 … MAX_HANDLES)
    kind_min_separation: float = 0.0   # `kind`: TVD of the kinds' lifetime buckets below which one handle

    def __post_init__(self) -> None:
        if self.mode not in PLACEMENTS:
            raise KvwearError(f"unknown placement {self.mode!r}; valid: {', '.join(PLACEMENTS)}")
        if not 2 <= self.lifetime_handles <= MAX_HANDLES:
            raise KvwearError(f"placement lifetime_handles must be 2–{MAX_HANDLES}, got {self.lifetime_handles}")
        if not 0.0 <= self.kind_min_separation <= 1.0:
            raise KvwearError(f"placement kind_min_separation must be 0–1, got {self.kind_min_separation}")

    @property
    def handles(self) -> int:
        """Placement handles the mode uses (the device needs at least this many)."""
        return {"none": 1, "kind": len(KIND_HANDLES)}.get(self.mode, self.lifetime_handles)

    def lifetime_edges_bytes(self, capacity_bytes: int) -> np.ndarray:
        n = self.lifetime_handles
        return capacity_bytes * np.exp2(np.arange(n - 1, dtype=np.float64) - (n - 2))


@dataclass(frozen=True)
class PlacementStats:
    mode: str
    handles: int
    write_bytes_by_handle: tuple[int, ...]
    write_ios_by_handle: tuple[int, ...]
    lifetime_edges_bytes: tuple[float, ...] = ()
    kind_separation: float | None = None    # `kind` with both kinds written: TVD of their lifetime buckets
    kind_fallback: bool = False              # … below kind_min_separation: every write on handle 0

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "handles": self.handles,
                "write_bytes_by_handle": list(self.write_bytes_by_handle),
                "write_ios_by_handle": list(self.write_ios_by_handle),
                "lifetime_edges_bytes": list(self.lifetime_edges_bytes),
                "kind_separation": self.kind_separation, "kind_fallback": self.kind_fallback}


@numba.njit(cache=True)
def _death_distance(op, first, npg, last):
    """Per write row: units the plan writes after it until its last page dies (-1 never dies;
    other rows -1). Units are alignment-sized pages; `last` (all -1) has one slot per unit."""
    n = op.shape[0]
    end = np.zeros(n, np.int64)               # units written up to and including the row
    alive = np.zeros(n, np.int64)
    dist = np.full(n, -1, np.int64)
    wcum = 0
    for r in range(n):
        o = op[r]
        if o == 1:
            continue
        for u in range(first[r], first[r] + npg[r]):
            w = last[u]
            if w >= 0:
                d = wcum - end[w]
                if d > dist[w]:
                    dist[w] = d
                alive[w] -= 1
                last[u] = -1
            if o == 0:
                last[u] = r
        if o == 0:
            wcum += npg[r]
            end[r] = wcum
            alive[r] = npg[r]
    for r in range(n):
        if alive[r] > 0:
            dist[r] = -1
    return dist


def residency_bytes(plan: pa.Table, capacity_bytes: int, unit_bytes: int = 4096) -> np.ndarray:
    """The `lifetime` oracle per row (module docstring): host bytes written between a write row and
    the death of its last page; +inf for pages that never die; NaN for reads and trims."""
    op = _op_codes(plan)
    off = plan.column("offset_bytes").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if len(off) and (off.min() < 0 or (off + ln).max() > capacity_bytes):
        i = int(np.flatnonzero((off < 0) | (off + ln > capacity_bytes))[0])
        raise InputError("block_ops", i + 1, "offset_bytes",
                         f"I/O [{off[i]}, {off[i] + ln[i]}) is outside the device [0, {capacity_bytes})")
    first = off // unit_bytes
    npg = (off + ln + unit_bytes - 1) // unit_bytes - first
    # the write row holding each unit now: int32 where rows allow (4 bytes per unit of the device)
    last = np.full(-(-capacity_bytes // unit_bytes), -1, np.int32 if len(op) < 2**31 - 1 else np.int64)
    d = _death_distance(op, first, npg, last).astype(np.float64) * unit_bytes
    d[(d < 0) & (op == 0)] = np.inf
    d[op != 0] = np.nan
    return d


def _op_codes(plan: pa.Table) -> np.ndarray:
    ops = pc.cast(plan.column("op"), pa.string())
    idx = pc.index_in(ops, value_set=pa.array(["write", "read", "trim"]))
    if idx.null_count:
        i = int(np.flatnonzero(pc.is_null(idx).to_numpy(zero_copy_only=False))[0])
        raise InputError("block_ops", i + 1, "op", f"unknown op {ops[i].as_py()!r}; valid: write, read, trim")
    return np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int8)


def assign_placement(plan: pa.Table, config: PlacementConfig, capacity_bytes: int,
                     unit_bytes: int = 4096) -> tuple[pa.Table, PlacementStats]:
    """The plan with its `placement_handle` column set by `config.mode`, and the bytes per handle."""
    op = _op_codes(plan)
    is_w = op == 0
    edges: tuple[float, ...] = ()
    separation: float | None = None
    fallback = False
    if config.mode == "none":
        handle = np.zeros(plan.num_rows, np.int8)
    elif config.mode == "kind":
        kinds = pc.cast(plan.column("obj_kind"), pa.string())
        idx = pc.index_in(kinds, value_set=pa.array(list(KIND_HANDLES)))
        bad = np.flatnonzero(pc.is_null(idx).to_numpy(zero_copy_only=False) & is_w)
        if bad.size:
            i = int(bad[0])
            raise InputError("block_ops", i + 1, "obj_kind",
                             f"unknown object kind {kinds[i].as_py()!r}; valid: {', '.join(KIND_HANDLES)}")
        table_h = np.asarray(list(KIND_HANDLES.values()), np.int8)
        handle = np.where(is_w, table_h[pc.fill_null(idx, 0).to_numpy(zero_copy_only=False)], 0).astype(np.int8)
        separation = _kind_separation(plan, handle, is_w, capacity_bytes, unit_bytes)
        fallback = separation is not None and separation < config.kind_min_separation
        if fallback:
            handle = np.zeros(plan.num_rows, np.int8)
    else:
        e = config.lifetime_edges_bytes(capacity_bytes)
        edges = tuple(float(x) for x in e)
        handle = np.where(is_w, len(e) - _lifetime_bucket(plan, e, capacity_bytes, unit_bytes), 0).astype(np.int8)
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    n = config.handles
    by_bytes = _bytes_by_handle(handle[is_w], ln[is_w], n)
    by_ios = np.bincount(handle[is_w], minlength=n).astype(np.int64)
    cols = {name: plan.column(name) for name in plan.column_names if name != "placement_handle"}
    cols["placement_handle"] = pa.array(handle, pa.int8())
    table = BLOCK_OPS.conform(pa.table(cols))
    return table, PlacementStats(config.mode, n, tuple(int(x) for x in by_bytes), tuple(int(x) for x in by_ios),
                                 edges, separation, fallback)


def _lifetime_bucket(plan: pa.Table, edges: np.ndarray, capacity_bytes: int, unit_bytes: int) -> np.ndarray:
    """Each row's residency bucket, 0 (shortest) … len(edges) (beyond the last edge, or never dies)."""
    d = residency_bytes(plan, capacity_bytes, unit_bytes)
    return np.searchsorted(edges, np.nan_to_num(d, nan=0.0), side="right")


def _kind_separation(plan: pa.Table, handle: np.ndarray, is_w: np.ndarray, capacity_bytes: int,
                     unit_bytes: int) -> float | None:
    """Total variation distance between the two kinds' write-byte shares over the lifetime buckets
    of the default `lifetime` placement (module docstring); None unless both kinds write."""
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False).astype(np.float64)
    per_kind = np.bincount(handle[is_w], weights=ln[is_w], minlength=len(KIND_HANDLES))
    if (per_kind == 0).any():
        return None
    edges = PlacementConfig("lifetime").lifetime_edges_bytes(capacity_bytes)
    bucket = _lifetime_bucket(plan, edges, capacity_bytes, unit_bytes)[is_w]
    shares = [np.bincount(bucket[handle[is_w] == k], weights=ln[is_w][handle[is_w] == k],
                          minlength=len(edges) + 1) / per_kind[k] for k in range(len(KIND_HANDLES))]
    return float(0.5 * np.abs(shares[0] - shares[1]).sum())


def plan_handles(plan: pa.Table) -> np.ndarray:
    """Each row's placement handle (0 for a plan written before the column existed)."""
    if "placement_handle" not in plan.column_names:
        return np.zeros(plan.num_rows, np.int64)
    return plan.column("placement_handle").to_numpy(zero_copy_only=False).astype(np.int64)


def plan_write_bytes_by_handle(plan: pa.Table, minlength: int = 1) -> list[int]:
    """Write bytes per placement handle, 0 … max(the largest handle a write names, minlength − 1)."""
    w = pc.equal(plan.column("op").cast(pa.string()), "write").to_numpy(zero_copy_only=False)
    h = plan_handles(plan)[w]
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False)[w].astype(np.int64)
    return [int(x) for x in _bytes_by_handle(h, ln, minlength)]


def _bytes_by_handle(handle: np.ndarray, length_bytes: np.ndarray, minlength: int) -> np.ndarray:
    """Σ length_bytes per handle in int64 (np.bincount's weights are float64, exact only to 2^53:
    the byte identities compare these sums with the devices' counts to the byte)."""
    n = max(minlength, int(handle.max()) + 1 if handle.size else 0)
    out = np.zeros(n, np.int64)
    np.add.at(out, handle.astype(np.int64, copy=False), length_bytes.astype(np.int64, copy=False))
    return out
