"""`kvwear trace convert` and `kvwear trace inspect`: trace files in, REQUESTS Parquet out.

Commands only parse options, call `kvwear.workloads.loaders` / `kvwear.workloads.blocks`, and print (rich
tables, or JSON with `--json`). They must not parse trace formats themselves.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from kvwear.errors import KvwearError
from kvwear.harness.cli.apps import trace_app
from kvwear.tables import iter_table_batches
from kvwear.units import check_budget, format_bytes, parse_size
from kvwear.workloads.blocks import convert_block_size, splitmix64
from kvwear.workloads.loaders import LOADERS, convert_trace, stream_requests
from kvwear.workloads.schema import REQUESTS, list_parts

#: Inputs at least this large get a progress bar during conversion.
PROGRESS_MIN_BYTES = 16 << 20

_FORMAT_HELP = f"Trace format (default: detected). One of: {', '.join(LOADERS.names())}."


def _fail(exc: Exception) -> typer.Exit:
    typer.secho(f"kvwear: error: {exc}", err=True, fg=typer.colors.RED)
    return typer.Exit(2)


def _input_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.glob("*.json"))
    return path.stat().st_size if path.exists() else 0


@trace_app.command("convert")
def convert_cmd(
    trace: Path = typer.Argument(..., help="Trace file, or a directory of Weka/Claude-Code JSON files."),
    out: Path = typer.Option(..., "-o", "--out", help="Output Parquet file (a versioned requests table)."),
    fmt: str | None = typer.Option(None, "--format", "-f", help=_FORMAT_HELP),
    skip_bad: bool = typer.Option(
        False, "--skip-bad", help="Skip malformed lines (counted and reported) instead of stopping."),
    block_tokens: int | None = typer.Option(
        None, "--block-tokens", min=1, help="Convert to blocks of this many tokens (e.g. 16, vLLM's block)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Convert a KV-cache trace into a requests Parquet table, streaming.

    Examples:

      kvwear trace convert samples/traces/mooncake/conversation_trace.head200.jsonl -o out/mooncake.parquet

      kvwear trace convert samples/traces/claude-code-weka/traces --format weka -o out/weka.parquet --block-tokens 16

      kvwear trace convert samples/traces/mooncake/with_a_bad_line.jsonl -o out/skipped.parquet --skip-bad
    """
    console = Console(stderr=True)
    total = _input_bytes(trace)
    try:
        if total >= PROGRESS_MIN_BYTES and not as_json:
            with Progress(TextColumn("converting"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                          TimeRemainingColumn(), console=console, transient=True) as bar:
                task = bar.add_task("convert", total=total)
                res = convert_trace(trace, out, fmt, skip_bad=skip_bad, block_tokens=block_tokens,
                                    progress=lambda n: bar.advance(task, n))
        else:
            res = convert_trace(trace, out, fmt, skip_bad=skip_bad, block_tokens=block_tokens)
    except (KvwearError, ValueError) as exc:
        raise _fail(exc) from None
    summary = {
        "output": str(res.path), "rows": res.rows, "format": res.format,
        "bytes_read": res.bytes_read, "keys": res.keys, "keys_note": res.keys_note,
        "skipped_lines": res.skipped_lines, "first_errors": [str(e) for e in res.errors],
        "resorted": res.resorted, "block_tokens": res.block_tokens,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    out_console = Console()
    out_console.print(f"wrote {res.rows:,} requests ({res.format}, {format_bytes(res.bytes_read)} read) "
                      f"to {res.path}")
    out_console.print(f"block keys: {res.keys}" + (f" — {res.keys_note}" if res.keys_note else ""))
    if res.resorted:
        out_console.print("input was not in arrival order: rows were sorted by arrival_s")
    if res.skipped_lines:
        out_console.print(f"[yellow]skipped {res.skipped_lines:,} bad lines[/yellow]; first:")
        for e in res.errors[:5]:
            out_console.print(f"  {e}", markup=False)


def _is_parquet(path: Path) -> bool:
    if path.is_dir():
        return False
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


def parquet_batches(path: Path, block_tokens: int | None) -> Iterator[pa.RecordBatch]:
    """A requests Parquet streamed in bounded batches (converted to `block_tokens` if given)."""
    for batch in iter_table_batches(REQUESTS, path):
        yield from (convert_block_size(batch, block_tokens).to_batches() if block_tokens else [batch])


def _stats(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": float(values.max())}


class _Distinct:
    """Distinct (hash_ns, hash_id) keys of a stream of batches: per namespace, a sorted array of
    its distinct ids (`done`), and the batches' distinct ids not merged into it yet (`pending`),
    for the keys of one hash partition — `part` of `partitions`, by a splitmix64 hash of the key.
    A namespace's pending ids are merged once they add up to as many as it holds (amortized
    O(n log n)); with `max_keys`, every namespace's are merged as soon as held and pending ids
    together exceed it, and in the first pass (`part` 0), whenever the keys held then exceed 7/8
    of it, the partition count doubles and only partition 0 is kept (a key of partition 0 under
    2P is one under P, so what was dropped is never needed again): the caller counts partitions
    1…P−1 in further passes (`count_distinct`). So a pass holds at most `max_keys` ids, held and
    pending, whatever the trace's length: the pending ids, never counted before, grew with it
    (8.4 M at 1× the scale workload, ~4× that at 4×, beside 6.3 M and 8.4 M held). Memory: ~32
    bytes per id (8 in the arrays, up to 4× while merging)."""

    MIN_MERGE = 1 << 20  # pending ids of a namespace merged at once, at least

    def __init__(self, partitions: int = 1, part: int = 0, max_keys: int | None = None) -> None:
        self.partitions, self.part, self.max_keys = partitions, part, max_keys
        self.done: dict[int, np.ndarray] = {}
        self.pending: dict[int, list[np.ndarray]] = {}
        self.pending_n: dict[int, int] = {}
        self.pending_total = 0
        self.held = 0

    def _mine(self, ns: np.ndarray, ids: np.ndarray) -> np.ndarray:
        h = splitmix64(ids.astype(np.uint64) ^ splitmix64(ns.astype(np.uint64)))
        return (h % np.uint64(self.partitions)) == np.uint64(self.part)

    def add(self, ns: np.ndarray, ids: np.ndarray) -> None:
        if self.partitions > 1 and len(ids):
            keep = self._mine(ns, ids)
            ns, ids = ns[keep], ids[keep]
        if not len(ids):
            return
        order = np.lexsort((ids, ns))
        ns, ids = ns[order], ids[order]
        keep = np.ones(len(ids), dtype=bool)
        keep[1:] = (ids[1:] != ids[:-1]) | (ns[1:] != ns[:-1])
        ns, ids = ns[keep], ids[keep]
        if not len(ids):
            return
        lo_ns = int(ns.min())
        if ids.min() >= 0 and ids.max() < (1 << 32) and int(ns.max()) - lo_ns < (1 << 31):
            # both fit one int64 (trace ids are small; split blocks' derived ids are not): one
            # sort of one key, ~3× faster than the two-key lexsort below
            both = np.unique(((ns - lo_ns) << 32) | ids)
            ns, ids = (both >> 32) + lo_ns, both & 0xFFFFFFFF
        else:
            order = np.lexsort((ids, ns))
            ns, ids = ns[order], ids[order]
            keep = np.ones(len(ids), dtype=bool)
            keep[1:] = (ids[1:] != ids[:-1]) | (ns[1:] != ns[:-1])
            ns, ids = ns[keep], ids[keep]
        cuts = np.flatnonzero(ns[1:] != ns[:-1]) + 1
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(ns)]]), strict=True):
            k = int(ns[lo])
            self.pending.setdefault(k, []).append(ids[lo:hi])
            self.pending_n[k] = self.pending_n.get(k, 0) + int(hi - lo)
            self.pending_total += int(hi - lo)
            if self.pending_n[k] >= max(len(self.done.get(k, ())), self.MIN_MERGE):
                self._merge(k)
                self._split()
        # held ids stay within 7/8 of `max_keys` (the first pass splits past it), so the merges of
        # all pending ids come at least every eighth of it; a partition pass, which cannot split,
        # holding more than that merges once an eighth is pending
        if (self.max_keys is not None and self.held + self.pending_total > self.max_keys
                and 8 * self.pending_total >= self.max_keys):
            for k in list(self.pending):
                self._merge(k)
            self._split()

    def _merge(self, k: int) -> None:
        parts = self.pending.pop(k, [])
        if self.partitions > 1:      # ids added before the last split may hold other partitions' keys
            parts = [ids[self._mine(np.full(len(ids), k, np.int64), ids)] for ids in parts]
        self.pending_total -= self.pending_n.pop(k, 0)
        new = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        old = self.done.get(k)
        if old is not None and len(old):
            # the held ids are sorted: insert the new ones in place (a copy, not a sort of them all)
            pos = np.searchsorted(old, new)
            dup = pos < len(old)
            dup[dup] = old[pos[dup]] == new[dup]
            new = np.insert(old, pos[~dup], new[~dup])
        self.done[k] = new
        self.held += len(new) - (0 if old is None else len(old))

    def _split(self) -> None:
        while self.max_keys is not None and self.part == 0 and 8 * self.held > 7 * self.max_keys:
            self.partitions *= 2
            for key, ids in self.done.items():
                self.done[key] = ids[self._mine(np.full(len(ids), key, np.int64), ids)]
            self.held = sum(len(v) for v in self.done.values())

    def count(self) -> int:
        """The distinct keys of the partition; ends the count (its arrays are dropped, so the
        partition passes that follow do not hold them too)."""
        for k in list(self.pending):
            self._merge(k)
        self._split()
        total = sum(len(v) for v in self.done.values())
        self.done.clear()
        self.held = 0
        return total


def _block_keys(b: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """The (hash_ns, hash_id) of every block access of a batch, as two aligned arrays."""
    offs, flat = list_parts(b.column("hash_ids"))
    ns_row = np.asarray(b.column("hash_ns").to_numpy(), dtype=np.int64)
    return np.repeat(ns_row, np.diff(offs)), flat


def count_distinct(first: _Distinct, rescan: Callable[[], Iterable[pa.RecordBatch]] | None) -> int:
    """The distinct block keys: `first` saw the whole stream (keeping partition 0 if it had to
    split); partitions 1…P−1 are counted over `rescan()`, one pass each, so memory stays near
    `max_keys` ids whatever the trace's size."""
    total = first.count()
    if first.partitions > 1 and rescan is None:
        raise KvwearError("counting distinct blocks needs a second pass over the trace, which this "
                          "stream cannot give")
    for p in range(1, first.partitions):
        d = _Distinct(first.partitions, p, first.max_keys)
        for b in rescan() if rescan is not None else ():
            if b.num_rows:
                d.add(*_block_keys(b))
        total += d.count()
    return total


DISTINCT_BYTES_PER_KEY = 32  # _Distinct's arrays and its merge temporaries


def trace_summary(batches: pa.Table | Iterable[pa.RecordBatch], *,
                  rescan: Callable[[], Iterable[pa.RecordBatch]] | None = None,
                  memory_budget_bytes: int | None = None) -> dict[str, Any]:
    """Counts, duration, sessions, streams, categories, models, token stats, blocks of a REQUESTS
    table or a stream of its batches. One pass, batch by batch: memory holds per-request numbers
    (for exact token percentiles), the distinct sessions and streams, and the distinct block keys
    — never every block access; with `memory_budget_bytes`, the block keys of one hash partition
    at a time when they do not fit it, the other partitions counted over `rescan()` (exact)."""
    if isinstance(batches, pa.Table):
        table = batches
        batches = table.to_batches()
        rescan = rescan or table.to_batches
    n = 0
    t_min, t_max = np.inf, -np.inf
    sessions: set[str] = set()
    streams: set[tuple[str | None, str | None]] = set()
    categories: Counter[str] = Counter()
    models: Counter[str] = Counter()
    inp: list[np.ndarray] = []
    outp: list[np.ndarray] = []
    blocks = hashed = 0
    block_tokens: set[int] = set()
    namespaces: set[int] = set()
    distinct = _Distinct(max_keys=None if memory_budget_bytes is None else
                         max(1, memory_budget_bytes // DISTINCT_BYTES_PER_KEY))
    for b in batches:
        if not b.num_rows:
            continue
        n += b.num_rows
        arrival = np.asarray(b.column("arrival_s").to_numpy(), dtype=np.float64)
        t_min, t_max = min(t_min, float(arrival.min())), max(t_max, float(arrival.max()))
        sess = b.column("session_id").to_pylist()
        sessions.update(x for x in sess if x is not None)
        streams.update(zip(sess, b.column("stream_id").to_pylist(), strict=True))
        categories.update("null" if v is None else str(v) for v in b.column("category").to_pylist())
        models.update("null" if v is None else str(v) for v in b.column("model").to_pylist())
        inp.append(np.asarray(b.column("input_tokens").to_numpy(), dtype=np.float64))
        outp.append(np.asarray(b.column("output_tokens").to_numpy(), dtype=np.float64))
        ns_key, flat = _block_keys(b)
        ns_row = np.asarray(b.column("hash_ns").to_numpy(), dtype=np.int64)
        distinct.add(ns_key, flat)
        blocks += len(flat)
        hashed += int(pc.sum(b.column("hashed_tokens")).as_py() or 0)
        block_tokens.update(np.unique(np.asarray(b.column("block_tokens").to_numpy())).tolist())
        namespaces.update(np.unique(ns_row).tolist())

    def ranked(c: Counter[str]) -> dict[str, int]:
        return dict(sorted(c.items(), key=lambda kv: -kv[1]))

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0)

    return {
        "requests": n,
        "duration_s": t_max - t_min if n else 0.0,
        "first_arrival_s": t_min if n else 0.0,
        "sessions": len(sessions),
        "streams": len(streams),
        "categories": ranked(categories),
        "models": ranked(models),
        "input_tokens": _stats(cat(inp)),
        "output_tokens": _stats(cat(outp)),
        "blocks": blocks,
        "unique_blocks": count_distinct(distinct, rescan),
        "hashed_tokens": hashed,
        "block_tokens": sorted(block_tokens),
        "hash_namespaces": len(namespaces),
    }


@trace_app.command("inspect")
def inspect_cmd(
    trace: Path = typer.Argument(..., help="A trace file or Weka directory, or a requests Parquet file."),
    fmt: str | None = typer.Option(None, "--format", "-f", help=_FORMAT_HELP),
    block_tokens: int | None = typer.Option(
        None, "--block-tokens", min=1, help="Show blocks after conversion to this size."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    memory_budget: str = typer.Option(
        "256MiB", "--memory-budget", metavar="SIZE",
        help="bound of the distinct-block count's state (e.g. 64MiB); more distinct blocks take more passes"),
) -> None:
    """Summarize a trace: requests, duration, sessions, streams, categories, models, token and block stats.

    Examples:

      kvwear trace inspect samples/traces/mooncake/conversation_trace.head200.jsonl

      kvwear trace inspect out/demo/workload/requests.parquet --json

      kvwear trace inspect samples/traces/claude-code-weka/traces --format weka --block-tokens 16

      kvwear trace inspect out/demo/workload/requests.parquet --memory-budget 64MiB

    Memory: per-request numbers and the distinct block keys (~32 bytes each); a trace with more
    distinct blocks than --memory-budget holds is counted exactly in hash partitions, one more
    pass over the requests each.
    """
    try:
        try:
            budget = check_budget(parse_size(memory_budget), "--memory-budget")
        except ValueError as exc:
            raise KvwearError(f"--memory-budget: {exc}") from None
        if _is_parquet(trace):
            summary = {"path": str(trace), "format": "parquet",
                       **trace_summary(parquet_batches(trace, block_tokens),
                                       rescan=lambda: parquet_batches(trace, block_tokens),
                                       memory_budget_bytes=budget)}
        else:
            with stream_requests(trace, fmt, block_tokens=block_tokens) as res:
                summary = {"path": str(trace), "format": res.result.format,
                           **trace_summary(res.batches(), rescan=res.batches, memory_budget_bytes=budget)}
    except (KvwearError, ValueError, OSError) as exc:
        raise _fail(exc) from None
    source = summary["format"]
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    t = Table(title=f"{trace} ({source})", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for key in ("requests", "sessions", "streams", "blocks", "unique_blocks", "hashed_tokens"):
        t.add_row(key, f"{summary[key]:,}")
    t.add_row("duration", f"{summary['duration_s']:,.1f} s")
    t.add_row("block size", ", ".join(f"{b} tokens" for b in summary["block_tokens"]))
    t.add_row("hash namespaces", str(summary["hash_namespaces"]))
    for key in ("categories", "models"):
        t.add_row(key, ", ".join(f"{k}: {v:,}" for k, v in list(summary[key].items())[:8]))
    Console().print(t)
    tok = Table(title="tokens per request", show_header=True)
    tok.add_column("")
    for c in ("mean", "p50", "p90", "p99", "max"):
        tok.add_column(c, justify="right")
    for key in ("input_tokens", "output_tokens"):
        s = summary[key]
        tok.add_row(key, *(f"{s[c]:,.0f}" for c in ("mean", "p50", "p90", "p99", "max")))
    Console().print(tok)
