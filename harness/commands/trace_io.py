"""`kvwear trace convert` and `kvwear trace inspect`: trace files in, REQUESTS Parquet out.

Commands only parse options, call `workloads.loaders` / `workloads.blocks`, and print (rich
tables, or JSON with `--json`). They must not parse trace formats themselves.
"""

from __future__ import annotations

import json
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

from harness.commands import trace_app
from kvwear.errors import KvwearError
from kvwear.tables import read_table
from kvwear.units import format_bytes
from workloads.blocks import convert_block_size
from workloads.loaders import LOADERS, convert_trace, load_requests
from workloads.schema import REQUESTS

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

      kvwear trace convert conversation_trace.jsonl -o mooncake.parquet

      kvwear trace convert traces/ --format weka -o weka.parquet --block-tokens 16

      kvwear trace convert big.jsonl -o big.parquet --skip-bad
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


def _stats(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": float(values.max())}


def _counts(col: pa.ChunkedArray) -> dict[str, int]:
    vc = pc.value_counts(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    out = {("null" if v is None else str(v)): int(c)
           for v, c in zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True)}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def trace_summary(table: pa.Table) -> dict[str, Any]:
    """Counts, duration, sessions, streams, categories, models, token stats, blocks of a REQUESTS table."""
    n = table.num_rows
    arrival = np.asarray(table.column("arrival_s").to_numpy(), dtype=np.float64)
    ids = table.column("hash_ids").combine_chunks()
    ns = np.repeat(np.asarray(table.column("hash_ns").to_numpy(), dtype=np.int64),
                   np.asarray(pc.list_value_length(ids).to_numpy(zero_copy_only=False), dtype=np.int64))
    flat = np.asarray(pc.list_flatten(ids).to_numpy(), dtype=np.int64)
    unique_blocks = sum(len(np.unique(flat[ns == k])) for k in np.unique(ns))
    sessions = pc.count_distinct(table.column("session_id"), mode="only_valid").as_py()
    streams = table.select(["session_id", "stream_id"]).group_by(["session_id", "stream_id"]).aggregate([])
    return {
        "requests": n,
        "duration_s": float(arrival.max() - arrival.min()) if n else 0.0,
        "first_arrival_s": float(arrival.min()) if n else 0.0,
        "sessions": int(sessions),
        "streams": streams.num_rows,
        "categories": _counts(table.column("category")),
        "models": _counts(table.column("model")),
        "input_tokens": _stats(np.asarray(table.column("input_tokens").to_numpy(), dtype=np.float64)),
        "output_tokens": _stats(np.asarray(table.column("output_tokens").to_numpy(), dtype=np.float64)),
        "blocks": len(flat),
        "unique_blocks": int(unique_blocks),
        "hashed_tokens": int(pc.sum(table.column("hashed_tokens")).as_py() or 0),
        "block_tokens": sorted(set(table.column("block_tokens").to_pylist())),
        "hash_namespaces": len(np.unique(np.asarray(table.column("hash_ns").to_numpy()))),
    }


@trace_app.command("inspect")
def inspect_cmd(
    trace: Path = typer.Argument(..., help="A trace file or Weka directory, or a requests Parquet file."),
    fmt: str | None = typer.Option(None, "--format", "-f", help=_FORMAT_HELP),
    block_tokens: int | None = typer.Option(
        None, "--block-tokens", min=1, help="Show blocks after conversion to this size."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Summarize a trace: requests, duration, sessions, streams, categories, models, token and block stats.

    Examples:

      kvwear trace inspect conversation_trace.jsonl

      kvwear trace inspect requests.parquet --json

      kvwear trace inspect traces/ --format weka --block-tokens 16
    """
    try:
        if _is_parquet(trace):
            table = read_table(REQUESTS, trace)
            source = "parquet"
            if block_tokens is not None:
                table = convert_block_size(table, block_tokens)
        else:
            res = load_requests(trace, fmt, block_tokens=block_tokens)
            table, source = res.table, res.format
    except (KvwearError, ValueError, OSError) as exc:
        raise _fail(exc) from None
    summary = {"path": str(trace), "format": source, **trace_summary(table)}
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
