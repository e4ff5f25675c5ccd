"""Simulation metrics: per-request records, the timeline, the summary, and their table specs.

The simulator feeds an `Accumulator` as it goes (O(1) per request and per SSD operation); the
accumulator turns its counters into the per-request table (`SIM_REQUESTS`), the per-interval
timeline (`SIM_TIMELINE`) and a `SimSummary`. Per-request records fill numpy columns of
`REQUEST_CHUNK` rows (105 bytes a request: 13 eight-byte numbers and an int8 tier code), handed
as one Arrow table per chunk to a `requests_sink` when there is one (the simulate path streams
them to per_request.parquet: memory one chunk, 6.9 MB, whatever the trace's length), else kept
as those tables (105 bytes a request; Python lists of the same numbers held ~490). Definitions:

- token miss ratio = 1 − hit tokens / hashed tokens (the cacheable input); chunk miss ratio =
  1 − hit chunks / chunks, chunks of S tokens covering each hashed prefix;
- hits by tier: tokens served from HBM/DRAM/SSD; state hits counted per tier;
- SSD traffic by kind (full / linear) in bytes and objects; `ssd_hits_per_write` = SSD objects
  read (hits) ÷ SSD objects written; `ssd_written_fraction_hit` = fraction of SSD-written objects
  read at least once before leaving (or by the end of) the SSD;
- cost = GPU recompute dollars + SSD wear dollars (SimConfig prices), also per 1k requests.

Must not do I/O (the CLI writes the tables with kvwear.tables).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kvwear.policies.base import RequestInfo
from kvwear.policies.config import SimConfig
from kvwear.policies.schema import OBJ_KINDS, OPS
from kvwear.policies.tree import DRAM, FULL, HBM, SSD, Obj
from kvwear.tables import CATEGORY, TableSpec

OP_WRITE, OP_READ, OP_EVICT = 0, 1, 2
OP_NAMES = OPS          # code → name, in the order of the codes above
KIND_NAMES = OBJ_KINDS  # indexed by tree.FULL / tree.LINEAR
CAUSES = ("insert", "dram_evict", "hit", "capacity", "promote")

SIM_REQUESTS = TableSpec(
    kind="sim_requests",
    version=1,
    schema=pa.schema([
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("arrival_s", pa.float64(), nullable=False),
        pa.field("input_tokens", pa.int64(), nullable=False),
        pa.field("hashed_tokens", pa.int64(), nullable=False),
        pa.field("hit_tokens", pa.int64(), nullable=False),
        pa.field("hbm_hit_tokens", pa.int64(), nullable=False),
        pa.field("dram_hit_tokens", pa.int64(), nullable=False),
        pa.field("ssd_hit_tokens", pa.int64(), nullable=False),
        pa.field("state_hit_tier", CATEGORY, nullable=False),
        pa.field("recomputed_tokens", pa.int64(), nullable=False),
        pa.field("ssd_read_bytes", pa.int64(), nullable=False),
        pa.field("ssd_write_bytes", pa.int64(), nullable=False),
        pa.field("load_latency_s", pa.float64(), nullable=False),
        pa.field("cost_usd", pa.float64(), nullable=False),
    ]),
)

SIM_TIMELINE = TableSpec(
    kind="sim_timeline",
    version=1,
    schema=pa.schema([
        pa.field("interval_start_s", pa.float64(), nullable=False),
        pa.field("requests", pa.int64(), nullable=False),
        pa.field("hashed_tokens", pa.int64(), nullable=False),
        pa.field("hit_tokens", pa.int64(), nullable=False),
        pa.field("token_miss_ratio", pa.float64(), nullable=False),
        pa.field("ssd_write_bytes_full", pa.int64(), nullable=False),
        pa.field("ssd_write_bytes_linear", pa.int64(), nullable=False),
        pa.field("ssd_read_bytes", pa.int64(), nullable=False),
        pa.field("ssd_evict_bytes", pa.int64(), nullable=False),
        pa.field("dram_used_bytes", pa.int64(), nullable=False),
        pa.field("ssd_used_bytes", pa.int64(), nullable=False),
    ]),
)


@dataclass(frozen=True)
class SimSummary:
    """One simulation's totals and ratios (see the module docstring for definitions)."""

    label: str
    requests: int
    input_tokens: int
    hashed_tokens: int
    hit_tokens: int
    recomputed_tokens: int
    token_miss_ratio: float
    chunks: int
    hit_chunks: int
    chunk_miss_ratio: float
    hbm_hit_tokens: int
    dram_hit_tokens: int
    ssd_hit_tokens: int
    state_hits_hbm: int
    state_hits_dram: int
    state_hits_ssd: int
    ssd_write_bytes: int
    ssd_write_bytes_full: int
    ssd_write_bytes_linear: int
    ssd_write_objects_full: int
    ssd_write_objects_linear: int
    ssd_read_bytes: int
    ssd_read_bytes_full: int
    ssd_read_bytes_linear: int
    ssd_evict_bytes: int
    dropped_bytes_full: int
    dropped_bytes_linear: int
    linear_share_of_ssd_write_bytes: float
    ssd_hits_per_write: float
    ssd_written_fraction_hit: float
    ssd_written_bytes_fraction_hit: float
    mean_load_latency_s: float
    gpu_usd: float
    ssd_wear_usd: float
    cost_per_1k_requests_usd: float
    dram_used_bytes_end: int
    ssd_used_bytes_end: int
    span_s: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def table(self) -> pa.Table:
        """One-row table conforming to `SIM_SUMMARY` (for Parquet)."""
        return SIM_SUMMARY.conform(pa.Table.from_pylist([self.as_dict()]))


_ARROW = {"str": pa.string(), "int": pa.int64(), "float": pa.float64()}

SIM_SUMMARY = TableSpec(
    kind="sim_summary",
    version=1,
    schema=pa.schema([pa.field(f.name, _ARROW[str(f.type)], nullable=False)
                      for f in dataclasses.fields(SimSummary)]),
)


def _r(a: float, b: float) -> float:
    return a / b if b else 0.0


#: Per-request records are built in numpy columns of this many rows, then made one Arrow table.
REQUEST_CHUNK = 1 << 16
_TIER_NAMES = ("none", "hbm", "dram", "ssd")      # state_hit_tier's dictionary
_TIER_CODE = {-1: 0, HBM: 1, DRAM: 2, SSD: 3}      # state tier (-1 = no state hit) → its code


class Accumulator:
    """Counters the simulator updates; builds the output tables. With `requests_sink`, the
    per-request table goes to it chunk by chunk (in request order) and `requests_table()` is
    empty."""

    def __init__(self, config: SimConfig, used_bytes: dict[int, int],
                 requests_sink: Callable[[pa.Table], None] | None = None) -> None:
        self.config = config
        self.used = used_bytes
        self.write_bytes = [0, 0]
        self.write_objs = [0, 0]
        self.read_bytes = [0, 0]
        self.read_objs = [0, 0]
        self.evict_bytes = 0
        self.hit_after_write_objs = 0
        self.hit_after_write_bytes = 0
        self.dropped_bytes = [0, 0]
        self.requests = 0
        self.input_tokens = 0
        self.hashed_tokens = 0
        self.hit_tokens = 0
        self.tier_tokens = {HBM: 0, DRAM: 0, SSD: 0}
        self.state_hits = {HBM: 0, DRAM: 0, SSD: 0}
        self.chunks = 0
        self.hit_chunks = 0
        self.recomputed = 0
        self.latency_sum = 0.0
        self.gpu_usd = 0.0
        self.wear_usd = 0.0
        self.first_s: float | None = None
        self.last_s = 0.0
        self._usd_per_byte = config.ssd_usd_per_byte_written
        self._usd_per_gpu_s = config.gpu_usd_per_s
        # per-request columns: the current chunk's, and (without a sink) the finished chunks
        self._requests_sink = requests_sink
        self._req_tables: list[pa.Table] = []
        self.chunk_rows = 0   # rows of `cols` filled so far
        self.cols: dict[str, np.ndarray] = self._new_chunk() if config.record_requests else {}
        # timeline: one row per closed interval
        self.tl: dict[str, list[Any]] = {f.name: [] for f in SIM_TIMELINE.schema}
        self._iv: int | None = None
        self._iv_start = [0, 0, 0, 0, 0, 0, 0]  # requests, hashed, hit, wf, wl, r, ev (cumulative)
        self._begin_cum = list(self._iv_start)
        self._begin_used = (0, 0)

    # --- SSD traffic --------------------------------------------------------------------------
    def ssd_write(self, obj: Obj) -> None:
        k = obj.kind
        self.write_bytes[k] += obj.nbytes
        self.write_objs[k] += obj.n_objects

    def ssd_read(self, obj: Obj) -> None:
        k = obj.kind
        self.read_bytes[k] += obj.nbytes
        self.read_objs[k] += obj.n_objects
        if not obj.ssd_hit:
            obj.ssd_hit = True
            self.hit_after_write_objs += obj.n_objects
            self.hit_after_write_bytes += obj.nbytes

    def ssd_evict(self, obj: Obj) -> None:
        self.evict_bytes += obj.nbytes

    def dropped(self, obj: Obj) -> None:
        self.dropped_bytes[obj.kind] += obj.nbytes

    # --- requests -----------------------------------------------------------------------------
    def request_begin(self) -> tuple[int, int]:
        # Snapshot for the timeline: if this request opens a new interval, the previous one
        # closes on these counters, so the request's own SSD traffic counts in its interval.
        self._begin_cum = self._cum()
        self._begin_used = (self.used[DRAM], self.used[SSD])
        return (self.write_bytes[0] + self.write_bytes[1], self.read_bytes[0] + self.read_bytes[1])

    def _cum(self) -> list[int]:
        return [self.requests, self.hashed_tokens, self.hit_tokens, self.write_bytes[FULL],
                self.write_bytes[1], self.read_bytes[0] + self.read_bytes[1], self.evict_bytes]

    def _close_interval(self, cur: list[int], used: tuple[int, int]) -> None:
        d = [a - b for a, b in zip(cur, self._iv_start, strict=True)]
        tl = self.tl
        tl["interval_start_s"].append((self._iv or 0) * self.config.interval_s)
        tl["requests"].append(d[0])
        tl["hashed_tokens"].append(d[1])
        tl["hit_tokens"].append(d[2])
        tl["token_miss_ratio"].append(1.0 - _r(d[2], d[1]) if d[1] else 0.0)
        tl["ssd_write_bytes_full"].append(d[3])
        tl["ssd_write_bytes_linear"].append(d[4])
        tl["ssd_read_bytes"].append(d[5])
        tl["ssd_evict_bytes"].append(d[6])
        tl["dram_used_bytes"].append(used[0])
        tl["ssd_used_bytes"].append(used[1])
        self._iv_start = cur

    def request_end(self, req: RequestInfo, before: tuple[int, int], hit_tokens: int,
                    hbm_tokens: int, dram_tokens: int, ssd_tokens: int, state_tier: int,
                    dram_bytes: int, ssd_bytes: int, hit_chunks: int, chunks: int) -> None:
        cfg = self.config
        t = req.arrival_s
        iv = int(t // cfg.interval_s)
        if iv != self._iv:
            if self._iv is not None:
                self._close_interval(self._begin_cum, self._begin_used)
            self._iv = iv
        if self.first_s is None:
            self.first_s = t
        self.last_s = t
        w0, r0 = before
        w = self.write_bytes[0] + self.write_bytes[1] - w0
        r = self.read_bytes[0] + self.read_bytes[1] - r0
        recomputed = max(req.input_tokens - hit_tokens, 0)
        transfer = r / cfg.ssd_read_bytes_per_s + (dram_bytes + ssd_bytes) / cfg.dram_to_hbm_bytes_per_s
        recompute_s = recomputed / cfg.recompute_tokens_per_s
        latency = transfer if transfer > recompute_s else recompute_s
        gpu = recompute_s * self._usd_per_gpu_s
        wear = w * self._usd_per_byte
        self.requests += 1
        self.input_tokens += req.input_tokens
        self.hashed_tokens += req.hashed_tokens
        self.hit_tokens += hit_tokens
        self.tier_tokens[HBM] += hbm_tokens
        self.tier_tokens[DRAM] += dram_tokens
        self.tier_tokens[SSD] += ssd_tokens
        if state_tier > 0:
            self.state_hits[state_tier] += 1
        self.chunks += chunks
        self.hit_chunks += hit_chunks
        self.recomputed += recomputed
        self.latency_sum += latency
        self.gpu_usd += gpu
        self.wear_usd += wear
        if cfg.record_requests:
            c = self.cols
            i = self.chunk_rows
            c["request_id"][i] = req.request_id
            c["arrival_s"][i] = t
            c["input_tokens"][i] = req.input_tokens
            c["hashed_tokens"][i] = req.hashed_tokens
            c["hit_tokens"][i] = hit_tokens
            c["hbm_hit_tokens"][i] = hbm_tokens
            c["dram_hit_tokens"][i] = dram_tokens
            c["ssd_hit_tokens"][i] = ssd_tokens
            c["state_hit_tier"][i] = _TIER_CODE[state_tier]
            c["recomputed_tokens"][i] = recomputed
            c["ssd_read_bytes"][i] = r
            c["ssd_write_bytes"][i] = w
            c["load_latency_s"][i] = latency
            c["cost_usd"][i] = gpu + wear
            self.chunk_rows = i + 1
            if i + 1 == REQUEST_CHUNK:
                self._flush_requests()

    # --- outputs ------------------------------------------------------------------------------
    @staticmethod
    def _new_chunk() -> dict[str, np.ndarray]:
        return {f.name: np.empty(REQUEST_CHUNK, np.int8 if f.name == "state_hit_tier"
                                 else f.type.to_pandas_dtype()) for f in SIM_REQUESTS.schema}

    def _flush_requests(self) -> None:
        """The current chunk's rows become one table (its arrays are the table's buffers, so a new
        chunk is allocated), handed to the sink or kept."""
        n = self.chunk_rows
        if not n:
            return
        cols = self.cols
        # a part-filled chunk is copied, so the table does not pin the whole chunk
        part = {k: v[:n] if n == REQUEST_CHUNK else v[:n].copy() for k, v in cols.items()}
        arrays = [pa.DictionaryArray.from_arrays(pa.array(part[f.name]), pa.array(_TIER_NAMES))
                  if f.name == "state_hit_tier" else pa.array(part[f.name], f.type)
                  for f in SIM_REQUESTS.schema]
        table = pa.Table.from_arrays(arrays, schema=SIM_REQUESTS.with_metadata())
        self.cols = self._new_chunk()
        self.chunk_rows = 0
        if self._requests_sink is not None:
            self._requests_sink(table)
        else:
            self._req_tables.append(table)

    def requests_table(self) -> pa.Table:
        """The per-request table (empty when a sink took it)."""
        self._flush_requests()
        if not self._req_tables:
            return SIM_REQUESTS.empty()
        return pa.concat_tables(self._req_tables)

    def timeline_table(self) -> pa.Table:
        if self._iv is not None and (not self.tl["interval_start_s"] or self.tl["interval_start_s"][-1]
                                     != self._iv * self.config.interval_s):
            self._close_interval(self._cum(), (self.used[DRAM], self.used[SSD]))
        arrays = [pa.array(self.tl[f.name], f.type) for f in SIM_TIMELINE.schema]
        return pa.Table.from_arrays(arrays, schema=SIM_TIMELINE.with_metadata())

    def summary(self, label: str, used: dict[int, int]) -> SimSummary:
        wb = self.write_bytes
        wo = self.write_objs
        n = self.requests
        return SimSummary(
            label=label, requests=n, input_tokens=self.input_tokens,
            hashed_tokens=self.hashed_tokens, hit_tokens=self.hit_tokens,
            recomputed_tokens=self.recomputed,
            token_miss_ratio=1.0 - _r(self.hit_tokens, self.hashed_tokens) if self.hashed_tokens else 0.0,
            chunks=self.chunks, hit_chunks=self.hit_chunks,
            chunk_miss_ratio=1.0 - _r(self.hit_chunks, self.chunks) if self.chunks else 0.0,
            hbm_hit_tokens=self.tier_tokens[HBM], dram_hit_tokens=self.tier_tokens[DRAM],
            ssd_hit_tokens=self.tier_tokens[SSD], state_hits_hbm=self.state_hits[HBM],
            state_hits_dram=self.state_hits[DRAM], state_hits_ssd=self.state_hits[SSD],
            ssd_write_bytes=wb[0] + wb[1], ssd_write_bytes_full=wb[0], ssd_write_bytes_linear=wb[1],
            ssd_write_objects_full=wo[0], ssd_write_objects_linear=wo[1],
            ssd_read_bytes=self.read_bytes[0] + self.read_bytes[1],
            ssd_read_bytes_full=self.read_bytes[0], ssd_read_bytes_linear=self.read_bytes[1],
            ssd_evict_bytes=self.evict_bytes, dropped_bytes_full=self.dropped_bytes[0],
            dropped_bytes_linear=self.dropped_bytes[1],
            linear_share_of_ssd_write_bytes=_r(wb[1], wb[0] + wb[1]),
            ssd_hits_per_write=_r(self.read_objs[0] + self.read_objs[1], wo[0] + wo[1]),
            ssd_written_fraction_hit=_r(self.hit_after_write_objs, wo[0] + wo[1]),
            ssd_written_bytes_fraction_hit=_r(self.hit_after_write_bytes, wb[0] + wb[1]),
            mean_load_latency_s=_r(self.latency_sum, n), gpu_usd=self.gpu_usd,
            ssd_wear_usd=self.wear_usd,
            cost_per_1k_requests_usd=1000.0 * _r(self.gpu_usd + self.wear_usd, n),
            dram_used_bytes_end=used[DRAM], ssd_used_bytes_end=used[SSD],
            span_s=(self.last_s - self.first_s) if self.first_s is not None else 0.0,
        )
