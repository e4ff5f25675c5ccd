"""One policy's simulation into one folder: the function `kvwear simulate`, `kvwear run`'s simulate
stage and every sweep point call, so that they write the same files with the same defaults.

Files in the policy's folder (each written atomically):
    ssd_ops.parquet        SSD_OPS, streamed to disk batch by batch (it grows with the trace)
    per_request.parquet    SIM_REQUESTS, one row per request, streamed in chunks of 65,536 rows
    timeline.parquet       SIM_TIMELINE
    summary.parquet        SIM_SUMMARY, one row (what a resumed run reads back)
    summary.json           {"version": SUMMARY_JSON_VERSION, "config": SimConfig, "summary": SimSummary}

Requests stream from their source by record batch: nothing here holds the whole requests table
(a policy that needs it, `Policy.needs_table`, gathers it inside kvwear.policies.sim). An oracle that
can stream its future (`Policy.streams_future`) reads it from a next-use column written in one
backward pass over the requests Parquet (kvwear.workloads.nextuse) when the whole trace is simulated
(a raw trace's: its temporary conversion; with --max-requests it takes the in-memory pre-pass).

Must not: hold policy logic (policies/), parse command-line flags or draw progress bars.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kvwear.errors import KvwearError
from kvwear.harness.pipeline.config import DEFAULT_SSD_BYTES, RunConfig
from kvwear.policies.base import POLICIES, PolicySpec, resolve_spec
from kvwear.policies.config import SimConfig
from kvwear.policies.metrics import SIM_REQUESTS, SIM_SUMMARY, SIM_TIMELINE, SimSummary
from kvwear.policies.schema import SSD_OPS
from kvwear.policies.sim import simulate
from kvwear.tables import (
    TableWriter,
    atomic_write,
    iter_table_batches,
    output_folder,
    read_table,
    table_kind,
    write_table,
)
from kvwear.workloads.models import ModelProfile
from kvwear.workloads.schema import REQUESTS

# summary.json: version 1 is {"version", "config", "summary"} (the run's stage used to write the
# bare summary, `kvwear simulate` the same object without "version")
SUMMARY_JSON_VERSION = 1


@dataclass(frozen=True)
class RequestSource:
    """Where a simulation's requests come from: `batches()` yields a fresh stream of REQUESTS
    record batches; `parquet` is the requests Parquet they are the whole of (None for a prefix of
    a trace), the file an oracle's next-use column is computed from — for a raw trace, its
    temporary conversion, which lives as long as `owner` (the `StreamedRequests` that removes it
    when collected), so as long as this source."""

    rows: int
    batches: Callable[[], Iterator[pa.RecordBatch]]
    parquet: Path | None
    how: str
    owner: object = None


def parquet_source(path: Path) -> RequestSource:
    """A requests Parquet, streamed."""
    kind, _ = table_kind(path)
    if kind != REQUESTS.kind:
        raise KvwearError(f"{path}: holds a {kind or 'foreign'} Parquet table, not a requests table")

    def batches() -> Iterator[pa.RecordBatch]:
        yield from iter_table_batches(REQUESTS, path)      # checks kind and version

    return RequestSource(pq.ParquetFile(path).metadata.num_rows, batches, path, "requests table")


def open_source(path: Path, fmt: str | None = None, max_requests: int | None = None) -> RequestSource:
    """A requests Parquet or a raw trace in any format the loaders know (converted once into a
    temporary requests Parquet: kvwear.workloads.loaders.stream_requests), streamed, cut to its first
    `max_requests` requests when given."""
    if fmt is None and path.is_file() and path.suffix == ".parquet":
        src = parquet_source(path)
    else:
        from kvwear.workloads.loaders import stream_requests

        try:  # streamed into a temporary Parquet, removed once `res` (the source's owner) is gone
            res = stream_requests(path, fmt)
        except ValueError as exc:
            if isinstance(exc, KvwearError):
                raise
            raise KvwearError(f"{path}: {exc}") from None
        src = RequestSource(res.result.rows, res.batches, res.result.path, f"{res.result.format} trace", res)
    if max_requests is None or max_requests >= src.rows:
        return src
    whole = src.batches

    def limited() -> Iterator[pa.RecordBatch]:
        left = max_requests
        for b in whole():
            if left <= 0:
                return
            if b.num_rows > left:
                b = b.slice(0, left)
            left -= b.num_rows
            yield b

    # with a prefix, an oracle's future must stop at the limit: the in-memory pre-pass
    return RequestSource(max_requests, limited, None, src.how, src.owner)


def sim_config(cfg: RunConfig, profile: ModelProfile) -> SimConfig:
    """The simulator's config from a run config: the tiers (× the sample fraction; an SSD tier of 0
    is DEFAULT_SSD_BYTES, as on a device the run sizes), `[simulator]`'s speeds and prices, the
    model profile's sizes and the workload's chunk size."""
    f = cfg.workload.sample_fraction
    t, s = cfg.tiers, cfg.simulator
    return SimConfig(
        dram_bytes=int(t.dram_bytes * f), ssd_bytes=int((t.ssd_bytes or DEFAULT_SSD_BYTES) * f),
        hbm_bytes=int(t.hbm_bytes * f), kv_bytes_per_token=profile.kv_bytes_per_token,
        state_bytes=profile.state_bytes, chunk_tokens=cfg.workload.block_tokens, model=profile.name,
        active_params=profile.active_params, attn_flops_per_token=profile.attn_flops_per_token,
        **dataclasses.asdict(s),
    )


@dataclass(frozen=True)
class SimOutput:
    """A policy's finished simulation folder (the simulate stage's record)."""

    label: str
    dir: Path
    summary: SimSummary
    ssd_ops_rows: int

    @property
    def ssd_ops_path(self) -> Path:
        return self.dir / "ssd_ops.parquet"


def simulate_policy(source: RequestSource, config: SimConfig, spec: str | PolicySpec, out_dir: Path,
                    progress: Callable[[int], None] | None = None) -> SimOutput:
    """Simulate `source` under `spec` into `out_dir` (the files of the module docstring)."""
    ps = resolve_spec(spec)
    with output_folder(out_dir):
        return _simulate_into(source, config, ps, out_dir, progress)


def _simulate_into(source: RequestSource, config: SimConfig, ps: PolicySpec, out_dir: Path,
                   progress: Callable[[int], None] | None) -> SimOutput:
    future: contextlib.AbstractContextManager[Path | None]
    if source.parquet is not None and POLICIES.get(ps.name).streams_future(ps.params):
        from kvwear.harness.devices.fio import check_host_room
        from kvwear.workloads.nextuse import next_use_file, spill_bytes

        nu_path = out_dir / ".next_use.parquet"
        check_host_room(nu_path, spill_bytes(source.parquet), what="file and its spill", sparse=False,
                        writer="the oracle's next-use pass",
                        fix="free space there or simulate into a folder on a larger file system (-o)")
        future = next_use_file(source.parquet, nu_path, config.chunk_tokens)
    else:
        future = contextlib.nullcontext()
    with (future as nu, TableWriter(SSD_OPS, out_dir / "ssd_ops.parquet") as ops_out,
          TableWriter(SIM_REQUESTS, out_dir / "per_request.parquet") as req_out):
        if nu is not None and source.parquet is not None:
            from kvwear.workloads.nextuse import iter_with_next_use

            batches = iter_with_next_use(source.parquet, nu)
        else:
            batches = source.batches()
        res = simulate(batches, config, ps, progress=progress, ops_sink=ops_out.write,
                       requests_sink=req_out.write)
    write_table(SIM_TIMELINE, res.timeline, out_dir / "timeline.parquet")
    write_table(SIM_SUMMARY, res.summary.table(), out_dir / "summary.parquet")
    with atomic_write(out_dir / "summary.json") as tmp:
        tmp.write_text(json.dumps({"version": SUMMARY_JSON_VERSION, "config": dataclasses.asdict(config),
                                   "summary": res.summary.as_dict()}, indent=2) + "\n")
    return SimOutput(ps.label, out_dir, res.summary, ops_out.rows)


def read_output(out_dir: Path, label: str) -> SimOutput:
    """The record of a simulation folder `simulate_policy` finished (a resumed run's)."""
    row = read_table(SIM_SUMMARY, out_dir / "summary.parquet").to_pylist()[0]
    return SimOutput(label, out_dir, SimSummary(**row), pq.ParquetFile(out_dir / "ssd_ops.parquet").metadata.num_rows)
