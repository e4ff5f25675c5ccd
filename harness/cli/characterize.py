"""`kvwear trace characterize`: the KVCache-in-the-Wild analyses of one trace, as tables and figures.

This module only parses options, reads the input (a `requests` Parquet table or a raw trace via
the loaders), streams it in arrival order and bounded batches through
`kvwear.workloads.characterize_stream` (as many passes as its memory budget needs),
has `kvwear.reports.characterization` draw the figures and prints a
summary; the analyses live in `kvwear.workloads.characterize` and must not move here.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import typer
from rich.console import Console
from rich.table import Table

from kvwear.errors import KvwearError
from kvwear.harness.cli.apps import echo_json, trace_app
from kvwear.harness.cli.trace_io import parquet_batches
from kvwear.tables import table_kind
from kvwear.units import format_bytes, parse_size
from kvwear.workloads.schema import REQUESTS

_HELP = "\n\n".join([
    "Characterize a KV-cache trace as in *KVCache Cache in the Wild* (ATC'25).",
    "INPUT is a `requests` Parquet table (kind \"requests\", e.g. from `kvwear trace generate`) or a "
    "raw trace in any format the loaders know (Mooncake, Qwen-Bailian, Claude-Code/Weka, AIPerf).",
    "Computes the ideal (infinite-cache) hit ratio, block- and token-weighted, per category; the reuse "
    "skew (share of blocks holding 50/77/90 % of reuses); request reuse-time CDFs per category with "
    "exponential fits and KS tests; the KV lifespan distribution; and the cache capacity needed to reach "
    "the ideal hit ratio for the model's KV (and state) sizes.",
    "Writes into OUTDIR: summary.json, Parquet tables (by_category, request_reuse, block_reuse_quantiles, "
    "lifespans, live, reuse_skew) and PNG + SVG figures (reuse_time_cdf, lifespan_cdf, reuse_skew, "
    "hit_ratio_by_category, live_blocks).",
    "Examples:\n\n"
    "kvwear trace characterize out/demo/workload/requests.parquet --model kimi-k3 -o out/characterization\n\n"
    "kvwear trace characterize samples/traces/mooncake/conversation_trace.head200.jsonl "
    "--format mooncake -m llama3-70b -o out/mc\n\n"
    "kvwear trace characterize samples/traces/mooncake/conversation_trace.head200.jsonl "
    "-m qwen3.5-27b --block-tokens 16 -o out/mc16\n\n"
    "kvwear trace characterize samples/traces/mooncake/conversation_trace.head200.jsonl "
    "-m llama3-70b --memory-budget 256MiB -o out/mc256",
    "Memory: the per-block state stays within --memory-budget (default 1GiB); a trace with more distinct "
    "blocks is read once more per hash partition of the blocks (exact), and its LRU curve becomes a "
    "SHARDS estimate (summary.json's lru_sampling_rate < 1).",
])


@contextmanager
def _requests(path: Path, fmt: str | None, block_tokens: int | None,
              out_dir: Path) -> Iterator[tuple[Callable[[], Iterator[pa.RecordBatch]], str]]:
    """The requests of `path` as a function giving its batches in arrival order (converted to
    `block_tokens` if given) afresh on each call, and how they were read; temporary
    files (a sorted copy, a converted raw trace) live in a
    hidden folder of `out_dir` while the block runs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if fmt is None and path.is_file() and path.suffix == ".parquet":
        kind, _ = table_kind(path)
        if kind != REQUESTS.kind:
            raise KvwearError(
                f"{path}: holds a {kind or 'foreign'} Parquet table, not a requests table "
                f"(pass a requests table or a raw trace)"
            )
        arrival = pq.read_table(path, columns=["arrival_s"]).column(0).to_numpy()
        with tempfile.TemporaryDirectory(prefix=".kvwear-sorted-", dir=out_dir) as tmp:
            how, src = "requests table", path
            if arrival.size > 1 and bool((arrival[1:] < arrival[:-1]).any()):
                from kvwear.workloads.loaders.pipeline import sort_file_by_arrival

                src = Path(tmp) / "requests.parquet"
                shutil.copyfile(path, src)
                sort_file_by_arrival(src)
                how += ", sorted by arrival"
            del arrival
            yield lambda: _named_block_errors(parquet_batches(src, block_tokens), block_tokens), how
        return
    from kvwear.workloads.loaders import stream_requests

    try:
        streamed = stream_requests(path, fmt, block_tokens=block_tokens, tmp_dir=out_dir)
    except ValueError as exc:
        if isinstance(exc, KvwearError):
            raise
        raise KvwearError(f"{path}: {exc}") from None
    with streamed:
        how = f"{streamed.result.format} trace"
        if streamed.result.keys_note:
            how += f"; block keys derived from whole prefixes: {streamed.result.keys_note}"
        yield streamed.batches, how


def _named_block_errors(batches: Iterator[pa.RecordBatch], block_tokens: int | None) -> Iterator[pa.RecordBatch]:
    try:
        yield from batches
    except ValueError as exc:
        if isinstance(exc, KvwearError):
            raise
        raise KvwearError(f"--block-tokens {block_tokens}: {exc}") from None


def _pct(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.1%}"


def _secs(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:,.3g} s" if x < 100 else f"{x:,.0f} s"


@trace_app.command("characterize", help=_HELP)
def characterize_cmd(
    input_path: Path = typer.Argument(
        ..., metavar="INPUT", exists=True, help="requests Parquet table or raw trace (file or folder)"
    ),
    model: str = typer.Option(
        "kimi-k3", "--model", "-m",
        help="model profile: a built-in name or a config.json / .toml path",
    ),
    out_dir: Path = typer.Option(..., "--out", "-o", help="output folder (created if missing)"),
    fmt: str | None = typer.Option(
        None, "--format", "-f", help="raw trace format (default: detected from the file)"
    ),
    block_tokens: int | None = typer.Option(
        None, "--block-tokens", "-b", min=1,
        help="convert blocks to S tokens first (S must divide or be a multiple of the trace's block size)",
    ),
    memory_budget: str = typer.Option(
        "1GiB", "--memory-budget", metavar="SIZE",
        help="bound of the per-block state (e.g. 512MiB); more distinct blocks take more passes",
    ),
    as_json: bool = typer.Option(False, "--json", help="print summary.json and the files written as JSON on stdout"),
) -> None:
    from kvwear.reports.characterization import plot_characterization
    from kvwear.units import check_budget
    from kvwear.workloads.characterize_stream import characterize_batches
    from kvwear.workloads.models import resolve_profile

    try:
        budget = parse_size(memory_budget)
    except ValueError as exc:
        raise KvwearError(f"--memory-budget: {exc}") from None
    check_budget(budget, "--memory-budget")
    profile = resolve_profile(model)
    with _requests(input_path, fmt, block_tokens, out_dir) as (batches, how):
        res, written = characterize_batches(batches, profile, out_dir, memory_budget_bytes=budget)
    written += plot_characterization(out_dir)
    if as_json:
        import json

        echo_json({"version": 1, "input": str(input_path), "read_as": how,
                   "summary": json.loads((out_dir / "summary.json").read_text()),
                   "files": [str(p) for p in written]})
        return

    console = Console()
    t = Table(title=f"Characterization of {input_path.name} ({how}), model {res.model}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("requests", f"{res.requests:,}")
    t.add_row("block accesses / distinct blocks", f"{res.block_accesses:,} / {res.unique_blocks:,}")
    t.add_row("block size (tokens)", f"{res.block_tokens:,}")
    t.add_row("ideal hit ratio (blocks)", _pct(res.block_hit_ratio))
    t.add_row("ideal hit ratio (hashed tokens)", _pct(res.token_hit_ratio))
    t.add_row("ideal hit ratio (input tokens)", _pct(res.input_token_hit_ratio))
    for lvl, share in res.reuse_skew_block_share.items():
        t.add_row(f"blocks holding {lvl:.0%} of reuses", _pct(share))
    fit = res.request_reuse_fit
    t.add_row("request reuse time: mean (n)", f"{_secs(fit.mean_s)} ({fit.n:,})")
    t.add_row("  exponential fit: KS D (p)", f"{fit.ks_statistic:.3f} ({fit.ks_pvalue:.2g})")
    t.add_row("lifespan of reused blocks: median / p90",
              f"{_secs(res.lifespan_median_s)} / {_secs(res.lifespan_p90_s)}")
    t.add_row("capacity for the ideal hit ratio", format_bytes(res.capacity_bytes))
    t.add_row("  live chunks / states at the peak", f"{res.capacity_blocks:,} / {res.capacity_states:,}")
    t.add_row("LRU chunk capacity for the ideal hit ratio",
              format_bytes(res.lru_blocks_for_ideal * res.chunk_bytes)
              + ("" if res.lru_sampling_rate == 1 else f" (SHARDS, sampling rate {res.lru_sampling_rate:.3g})"))
    console.print(t)

    c = Table(title="Per category")
    for col in ("category", "requests", "block hit", "token hit", "reuse n", "reuse mean", "KS p"):
        c.add_column(col, justify="left" if col == "category" else "right")
    for row in res.by_category.to_dict("records"):
        c.add_row(str(row["category"]), f"{int(row['requests']):,}", _pct(float(row["block_hit_ratio"])),
                  _pct(float(row["token_hit_ratio"])), f"{int(row['reuse_n']):,}",
                  _secs(float(row["reuse_mean_s"])), f"{float(row['ks_pvalue']):.2g}")
    console.print(c)
    # plain lines, one path each, so scripts (and tests) can read them
    typer.echo(f"wrote {len(written)} files to {out_dir}:")
    for p in written:
        typer.echo(f"  {p}")
