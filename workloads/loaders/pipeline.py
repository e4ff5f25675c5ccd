"""Drives any trace loader: format detection, prefix-chain verification or key derivation,
optional block-size conversion, arrival-order sorting, loading to memory, streaming to Parquet,
or streaming back in bounded batches (`stream_requests`).

Keys per format: where a format promises prefix chaining (`TraceLoader.chained`: Mooncake,
Weka, AIPerf) the source ids are kept and the promise is verified as rows stream by; if it is
broken, the pass is restarted with keys derived from the whole prefix (`kvwear.workloads.blocks.
prefix_keys`) for every row, so one table never mixes the two kinds. Formats without the promise
(Qwen-Bailian) always get derived keys. Rows are sorted by `arrival_s`, stably (file order breaks
ties). A converted trace already in arrival order streams straight to Parquet; one that is not
is sorted once more after writing, with bounded memory (`sort_file_by_arrival`: a distribution
sort through temporary bucket files, never the whole table or the text).

This module must not parse any format itself and must not know about tiers or devices.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypedDict, TypeVar, Unpack

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvwear import tables
from kvwear.errors import InputError, KvwearError
from kvwear.kv import parse_kv
from kvwear.tables import TableWriter, iter_table_batches
from kvwear.workloads.blocks import convert_block_size, prefix_keys
from kvwear.workloads.bounds import SpanCheck, first_problem, request_problems
from kvwear.workloads.loaders.base import LOADERS, ProgressFn, SkipLog, TraceLoader, make_list
from kvwear.workloads.loaders.chain import ChainChecker, ChainViolation
from kvwear.workloads.schema import REQUESTS, list_parts

SNIFF_BYTES = 64 << 10
DEFAULT_BATCH_ROWS = 65536

KEYS_VERIFIED = "source ids (prefix chaining verified)"
KEYS_DERIVED = "derived from the whole prefix"


@dataclass(frozen=True)
class LoadResult:
    """A loaded trace: the REQUESTS table sorted by arrival, and how it was read."""

    table: pa.Table
    format: str
    skipped_lines: int
    errors: tuple[InputError, ...]  # the first skipped errors (all of them up to 20)
    keys: str  # KEYS_VERIFIED or KEYS_DERIVED
    keys_note: str  # why keys were derived ("" when verified)


@dataclass(frozen=True)
class ConvertResult:
    """What `convert_trace` wrote."""

    path: Path
    rows: int
    format: str
    skipped_lines: int
    errors: tuple[InputError, ...]
    keys: str
    keys_note: str
    bytes_read: int
    resorted: bool  # the input was not in arrival order and was sorted after writing
    block_tokens: int | None  # the converted block size, None when unchanged


def detect_format(path: str | Path) -> str:
    """The name of the first registered format whose `sniff` accepts the file's first bytes."""
    p = Path(path)
    head = b""
    if not p.is_dir():
        with open(p, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    for name in LOADERS:
        if LOADERS.get(name)().sniff(head, p):
            return name
    if head.startswith(b"PAR1"):
        kind = tables.table_kind(p)[0]
        if kind == REQUESTS.kind:
            raise InputError(str(p), None, None, "is already a kvwear requests table (what trace convert and "
                             "trace generate write): kvwear simulate --trace and kvwear trace inspect read it as "
                             "it is; there is nothing to convert")
        raise InputError(str(p), None, None, f"a Parquet file ({kind or 'not kvwear'}'s), not a trace kvwear can "
                         "tell the format of; a generic table is read with --format columns:arrival=COL,...")
    raise InputError(str(p), None, None, "cannot tell the trace format from its first line; pass a "
                     f"format explicitly (one of: {', '.join(LOADERS.names())})")


def _check_path(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), None, None, "no such file or directory")
    return p


def _check_output(trace: Path, out: Path) -> None:
    """The output must be a file path, and not the trace's."""
    if out.is_dir():
        raise InputError(str(out), None, None, "is a directory; -o takes the output Parquet file's path")
    if os.path.realpath(out) == os.path.realpath(trace):
        raise InputError(str(out), None, None, "is the input trace: converting would replace it; write elsewhere")


def loader_factory(fmt: str) -> tuple[str, Callable[[], TraceLoader]]:
    """(format name, a factory of its loaders) for a format spec: a registered name, or a name
    and its options (`columns:arrival=ts,input_tokens=prompt_len`, pairs split by the one
    `key=value` parser). An unknown name is answered with the valid ones; options a format does
    not take are refused by the format."""
    name, colon, rest = fmt.partition(":")
    cls = LOADERS.get(name.strip())  # unknown name → UnknownNameError listing the valid ones
    options = parse_kv([item for item in rest.split(",") if item.strip()], f"format {name.strip()}",
                       error=KvwearError) if colon else {}
    return name.strip(), cls.configured(options, f"format {fmt!r}")


def resolve_format(path: str | Path, fmt: str | None) -> tuple[Path, str]:
    """(path, format spec): `fmt` checked against the registry (with its options), or detected."""
    p = _check_path(path)
    if fmt is None:
        return p, detect_format(p)
    loader_factory(fmt)
    return p, fmt


def _derive(batch: pa.RecordBatch) -> pa.RecordBatch:
    offsets, values = list_parts(batch.column("hash_ids"))
    keys = prefix_keys(offsets, values)
    idx = batch.schema.get_field_index("hash_ids")
    return batch.set_column(idx, batch.schema.field(idx), make_list(offsets, keys))


def _stream(
    loader: TraceLoader,
    path: Path,
    *,
    derive: bool,
    skip_bad: bool,
    batch_rows: int,
    log: SkipLog,
    progress: ProgressFn | None,
    block_tokens: int | None,
) -> Iterator[pa.RecordBatch]:
    checker = None if derive else ChainChecker()
    span = SpanCheck()
    for batch in loader.iter_batches(path, skip_bad=skip_bad, batch_rows=batch_rows, skipped=log,
                                     progress=progress):
        batch = _within_bounds(batch, path, span, skip_bad, log)
        if not batch.num_rows:
            continue
        if checker is not None:
            checker.feed(batch)
        else:
            batch = _derive(batch)
        if block_tokens is not None:
            yield from convert_block_size(batch, block_tokens).to_batches()
        else:
            yield batch


def _within_bounds(batch: pa.RecordBatch, path: Path, span: SpanCheck, skip_bad: bool,
                   log: SkipLog) -> pa.RecordBatch:
    """`batch` with every row inside kvwear.workloads.bounds, or InputError (the loader's own
    checks name the line; what only the whole row shows — a span, a hash list against
    hashed_tokens — is named by its request id). Under `skip_bad` bad rows are dropped, counted."""
    bad, checks = request_problems(batch, span)
    if not bad.any():
        return batch
    ids = batch.column("request_id").to_numpy()
    for i in np.flatnonzero(bad):
        field, msg = first_problem(checks, int(i))
        err = InputError(str(path), None, field, f"request {int(ids[i])}: {msg}")
        if not skip_bad:
            raise err
        log.add(err)
    return batch.filter(pa.array(~bad))


class _Counter:
    def __init__(self, outer: ProgressFn | None) -> None:
        self.n = 0
        self.outer = outer

    def __call__(self, k: int) -> None:
        self.n += k
        if self.outer is not None:
            self.outer(k)

    def restart(self) -> None:
        if self.outer is not None and self.n:
            self.outer(-self.n)
        self.n = 0


def _sorted_by_arrival(table: pa.Table) -> pa.Table:
    arr = np.asarray(table.column("arrival_s").to_numpy(), dtype=np.float64)
    if len(arr) < 2 or bool(np.all(arr[1:] >= arr[:-1])):
        return table
    return table.take(pa.array(np.argsort(arr, kind="stable")))


_ROW_SCALAR_BYTES = 128  # a requests row's columns besides hash_ids, in Arrow (ids, times, strings)


def sort_file_by_arrival(path: Path) -> None:
    """Sort a REQUESTS Parquet file by `arrival_s` (stable) in place, with bounded memory: a
    distribution sort. The sort keys (8 bytes a row) give every row its output rank; the rows
    are dealt, one input row group at a time, into temporary bucket files of consecutive ranks
    (about ROW_GROUP_BYTES each); each bucket is then sorted in memory and appended to the
    output. Memory: the per-row keys plus one row group or bucket; disk: one more copy of the
    file while it runs (beside it; removed)."""
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    arrival = np.concatenate([np.asarray(pf.read_row_group(g, columns=["arrival_s"]).column(0).to_numpy(),
                                         dtype=np.float64) for g in range(meta.num_row_groups)] or
                             [np.zeros(0)])
    order = np.argsort(arrival, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    del order, arrival
    # bucket boundaries over ranks, by the rows' Arrow bytes: 8 per hash id plus the scalars
    # (Parquet's sizes are encoded sizes, several times smaller for runs of ids)
    row_bytes = np.concatenate([8.0 * np.diff(list_parts(pf.read_row_group(g, columns=["hash_ids"]).column(0))[0])
                                + _ROW_SCALAR_BYTES for g in range(meta.num_row_groups)] or [np.zeros(0)])
    by_rank = np.empty_like(row_bytes)
    by_rank[rank] = row_bytes
    bucket_of_rank = (np.cumsum(by_rank) // tables.ROW_GROUP_BYTES).astype(np.int64)
    del row_bytes, by_rank
    n_buckets = int(bucket_of_rank[-1]) + 1 if len(bucket_of_rank) else 0
    tmp = path.with_name(f".{path.name}.buckets-{os.getpid()}")
    tmp.mkdir()
    schema = REQUESTS.with_metadata().append(pa.field("_rank", pa.int64()))
    # Buckets are Arrow IPC streams, not Parquet files: an open ParquetWriter keeps buffers and
    # metadata per write, and the buckets are open together, so their memory grew with the trace
    # (the 4x corpus: 1.1 GB against 0.5 GB at 1x); an IPC stream writes each batch through.
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    sinks = [pa.OSFile(str(tmp / f"{b}.arrows"), "wb") for b in range(n_buckets)]
    try:
        writers = [pa.ipc.new_stream(sink, schema, options=options) for sink in sinks]
        start = 0
        for g in range(meta.num_row_groups):
            t = pf.read_row_group(g)
            r = rank[start:start + t.num_rows]
            start += t.num_rows
            t = REQUESTS.conform(t).append_column("_rank", pa.array(r))
            bucket = bucket_of_rank[r]
            for b in np.unique(bucket):
                writers[b].write_table(t.filter(pa.array(bucket == b)))
            del t
        for w, sink in zip(writers, sinks, strict=True):
            w.close()
            sink.close()
        del pf
        with TableWriter(REQUESTS, path) as out:
            for b in range(n_buckets):
                with pa.OSFile(str(tmp / f"{b}.arrows"), "rb") as f:
                    t = pa.ipc.open_stream(f).read_all()
                (tmp / f"{b}.arrows").unlink()
                out.write(t.take(pa.array(np.argsort(t.column("_rank").to_numpy()))).drop_columns(["_rank"]))
                del t
    finally:
        for sink in sinks:
            sink.close()
        shutil.rmtree(tmp, ignore_errors=True)


class TraceOptions(TypedDict, total=False):
    """How `load_requests` and `convert_trace` read a trace (each key optional):
    `skip_bad` (False) drops bad lines, counted and the first errors kept, instead of raising
    `InputError`; `block_tokens` (None) converts to that simulator block size; `batch_rows`
    (DEFAULT_BATCH_ROWS) is the rows per batch read; `progress` (None) is told the input bytes read."""

    skip_bad: bool
    block_tokens: int | None
    batch_rows: int
    progress: ProgressFn | None


T = TypeVar("T")


@dataclass(frozen=True)
class _Read(Generic[T]):
    """What `_read` made of a trace: `consume`'s value, and how the last pass read it."""

    value: T
    log: SkipLog
    derived: bool
    note: str
    bytes_read: int


def _read(p: Path, name: str, options: TraceOptions, consume: Callable[[Iterator[pa.RecordBatch]], T]) -> _Read[T]:
    """Stream the REQUESTS batches of trace `p` (format `name`, from `resolve_format`) through
    `consume`: trusting the format's prefix-chaining promise, and once more with keys derived from
    the whole prefix when the stream breaks it (ChainViolation: `consume` starts afresh each call)."""
    base, make = loader_factory(name)
    chained = make().chained
    derive, note = not chained, "" if chained else f"{base} does not promise prefix chaining"
    counter = _Counter(options.get("progress"))
    while True:
        log = SkipLog()
        try:
            value = consume(_stream(make(), p, derive=derive, skip_bad=options.get("skip_bad", False),
                                    batch_rows=options.get("batch_rows", DEFAULT_BATCH_ROWS), log=log,
                                    progress=counter, block_tokens=options.get("block_tokens")))
        except ChainViolation as v:
            derive, note = True, f"chaining broken: {v}"
            counter.restart()
            continue
        return _Read(value, log, derive, note, counter.n)


def load_requests(path: str | Path, fmt: str | None = None, **options: Unpack[TraceOptions]) -> LoadResult:
    """Load a trace file (or a directory of Weka files) into a REQUESTS table sorted by arrival.
    `fmt` overrides detection; `options` (TraceOptions) say how to read it."""
    p, name = resolve_format(path, fmt)
    r = _read(p, name, options, list)
    schema = REQUESTS.with_metadata()
    table = pa.Table.from_batches(r.value, schema=schema) if r.value else REQUESTS.empty()
    return LoadResult(
        table=_sorted_by_arrival(table),
        format=name,
        skipped_lines=r.log.count,
        errors=tuple(r.log.first),
        keys=KEYS_DERIVED if r.derived else KEYS_VERIFIED,
        keys_note=r.note,
    )


def convert_trace(path: str | Path, out_parquet: str | Path, fmt: str | None = None,
                  **options: Unpack[TraceOptions]) -> ConvertResult:
    """Stream a trace into a versioned REQUESTS Parquet file (atomic: nothing is left on error)."""
    p, name = resolve_format(path, fmt)
    out = Path(out_parquet)
    _check_output(p, out)
    batch_rows = options.get("batch_rows", DEFAULT_BATCH_ROWS)

    def write(batches: Iterator[pa.RecordBatch]) -> tuple[int, bool]:
        """(rows written, whether they came in arrival order)."""
        in_order, last = True, -np.inf
        with TableWriter(REQUESTS, out) as writer:
            pending: list[pa.RecordBatch] = []
            n_pending = b_pending = 0
            for batch in batches:
                arr = np.asarray(batch.column("arrival_s").to_numpy(), dtype=np.float64)
                if len(arr):
                    if arr[0] < last or not bool(np.all(arr[1:] >= arr[:-1])):
                        in_order = False
                    last = max(last, float(arr.max()))
                # small input chunks are gathered into row groups of about batch_rows rows,
                # or of ROW_GROUP_BYTES (long-context rows: 65,536 Weka rows are ~1 GB)
                pending.append(batch)
                n_pending += batch.num_rows
                b_pending += batch.nbytes
                if n_pending >= batch_rows or b_pending >= tables.ROW_GROUP_BYTES:
                    writer.write(pa.Table.from_batches(pending))
                    pending, n_pending, b_pending = [], 0, 0
            if pending:
                writer.write(pa.Table.from_batches(pending))
            return writer.rows, in_order

    r = _read(p, name, options, write)
    rows, in_order = r.value
    if not in_order:
        sort_file_by_arrival(out)
    return ConvertResult(
        path=out,
        rows=rows,
        format=name,
        skipped_lines=r.log.count,
        errors=tuple(r.log.first),
        keys=KEYS_DERIVED if r.derived else KEYS_VERIFIED,
        keys_note=r.note,
        bytes_read=r.bytes_read,
        resorted=not in_order,
        block_tokens=options.get("block_tokens"),
    )


class StreamedRequests:
    """A trace converted once into a temporary requests Parquet (sorted by arrival, keys verified
    or derived, as `convert_trace` writes it) and read back in bounded record batches, as often
    as a consumer needs (a simulation reads it once per policy).

    Why a file rather than the loader's batches directly: the prefix-chaining promise is only
    known to hold after the last row (a violation restarts the pass with derived keys) and the
    rows may need sorting by arrival, while a consumer that has used the first batches cannot be
    restarted. The Parquet is ~17x smaller than Weka's JSON. It is removed by `close()`, at the
    end of a `with` block, or when this object is garbage collected (at the latest, at exit).
    """

    def __init__(self, tmp: tempfile.TemporaryDirectory[str], res: ConvertResult) -> None:
        self._tmp = tmp
        self.result = res  # rows, format, keys, skipped lines … and the temporary file's path

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The requests in arrival order, in batches of bounded size (`iter_table_batches`)."""
        return iter_table_batches(REQUESTS, self.result.path)

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> StreamedRequests:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stream_requests(
    path: str | Path,
    fmt: str | None = None,
    *,
    skip_bad: bool = False,
    block_tokens: int | None = None,
    tmp_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
) -> StreamedRequests:
    """`load_requests` with bounded memory: the trace streamed into a temporary requests Parquet
    (in `tmp_dir`, default the system's temporary folder) and read back in batches."""
    tmp = tempfile.TemporaryDirectory(prefix=".kvwear-requests-", dir=tmp_dir)
    try:
        res = convert_trace(path, Path(tmp.name) / "requests.parquet", fmt, skip_bad=skip_bad,
                            block_tokens=block_tokens, progress=progress)
    except BaseException:
        tmp.cleanup()
        raise
    return StreamedRequests(tmp, res)
