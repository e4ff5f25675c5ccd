"""`kvwear simulate`: run a trace through the tiered KV cache under one or more policies.

This module only parses options, reads the input (a `requests` Parquet table, streamed by
record batch, or a raw trace via the loaders), calls `policies.sim.simulate` per policy, prints
a results table and writes each policy's tables under OUTDIR/<policy label>/. The simulation
itself lives in `policies/` and must not move here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from harness.commands import app
from kvwear.errors import KvwearError
from kvwear.tables import TableWriter, iter_table_batches, table_kind, write_table
from kvwear.units import format_bytes, parse_duration, parse_size
from workloads.schema import REQUESTS

if TYPE_CHECKING:
    from policies.base import PolicySpec
    from policies.sim import SimConfig, SimResult

_HELP = "\n\n".join([
    "Simulate a KV-cache trace through GPU HBM (optional), DRAM and SSD under placement policies.",
    "TRACE is a `requests` Parquet table (streamed) or a raw trace in any format the loaders know. "
    "Each --policy is a spec `name` or `name:param=value,...` (see --list-policies); each runs "
    "separately on the same trace. Sizes take units (100GB, 1.5TiB, 512MiB; bare numbers are bytes).",
    "Writes OUTDIR/<policy label>/ssd_ops.parquet, requests.parquet, timeline.parquet, "
    "summary.parquet and summary.json, and prints one results row per policy.",
    "Examples:\n\n"
    "kvwear simulate --trace conversation_trace.jsonl --model kimi-k3 --dram 100GB --ssd 1TB "
    "--policy lru --policy lru-k:k=3 -o out/sim\n\n"
    "kvwear simulate --trace out/demo/requests.parquet --model qwen3.5-27b --dram 64GiB --ssd 2TB "
    "--hbm 40GB --policy write-through --policy hotprefix:theta=4 -o out/sim2\n\n"
    "kvwear simulate --list-policies",
])


def _read(path: Path, fmt: str | None) -> tuple[int, Callable[[], Iterator[pa.RecordBatch]], str]:
    """(rows, a fresh batch iterator per call, how it was read)."""
    if fmt is None and path.is_file() and path.suffix == ".parquet":
        kind, _ = table_kind(path)
        if kind != REQUESTS.kind:
            raise KvwearError(f"{path}: holds a {kind or 'foreign'} Parquet table, not a requests table")
        rows = pq.ParquetFile(path).metadata.num_rows

        def batches() -> Iterator[pa.RecordBatch]:
            yield from iter_table_batches(REQUESTS, path)  # checks kind and version

        return rows, batches, "requests table"
    from workloads.loaders import stream_requests

    try:  # streamed into a temporary Parquet, removed once `res` (held by res.batches) is gone
        res = stream_requests(path, fmt)
    except ValueError as exc:
        if isinstance(exc, KvwearError):
            raise
        raise KvwearError(f"{path}: {exc}") from None
    return res.result.rows, res.batches, f"{res.result.format} trace"


def _list_policies(console: Console) -> None:
    from policies.base import POLICIES, param_infos

    t = Table(title="Placement policies (spec: name:param=value,...)")
    for col in ("policy", "what it does", "parameter", "default", "sweep", "meaning"):
        t.add_column(col, no_wrap=col in ("policy", "parameter"))
    for name in POLICIES.names():
        cls = POLICIES.get(name)
        infos = param_infos(cls.Params)
        if not infos:
            t.add_row(name, cls.describe(), "–", "", "", "")
        for i, p in enumerate(infos):
            sweep = "–" if p.sweep is None else "–".join(str(x) for x in p.sweep)
            t.add_row(name if i == 0 else "", cls.describe() if i == 0 else "",
                      f"{p.name} ({p.type_name})", str(p.default), sweep, p.help)
    console.print(t)


def _size(text: str, opt: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise KvwearError(f"{opt}: {exc}") from None


@app.command("simulate", help=_HELP)
def simulate_cmd(
    trace: Path | None = typer.Option(None, "--trace", "-t", help="requests Parquet table or raw trace"),
    fmt: str | None = typer.Option(None, "--format", "-f", help="raw trace format (default: detected)"),
    model: str = typer.Option("kimi-k3", "--model", "-m",
                              help="model profile: built-in name or config.json / .toml path"),
    dram: str = typer.Option("100GB", "--dram", help="DRAM tier capacity"),
    ssd: str = typer.Option("1TB", "--ssd", help="SSD tier capacity"),
    hbm: str = typer.Option("0", "--hbm", help="GPU HBM tier capacity (0: no HBM tier)"),
    policy: list[str] = typer.Option(["lru"], "--policy", "-p", help="policy spec; repeatable"),
    block_tokens: int = typer.Option(16, "--block-tokens", "-b", min=1,
                                     help="simulator chunk size S in tokens"),
    out_dir: Path | None = typer.Option(None, "--out", "-o", help="output folder"),
    interval: str = typer.Option("10min", "--interval", help="timeline interval"),
    max_requests: int | None = typer.Option(None, "--max-requests", min=1,
                                            help="simulate only the first N requests"),
    ssd_read: str = typer.Option("10GB", "--ssd-read-per-s", help="SSD→DRAM bandwidth per second"),
    hbm_load: str = typer.Option("50GB", "--hbm-load-per-s", help="DRAM→HBM bandwidth per second"),
    recompute: float = typer.Option(60_000.0, "--recompute-tokens-per-s", help="prefill speed"),
    gpu_usd: float = typer.Option(20.0, "--gpu-usd-per-hour",
                                   help="price of the GPUs doing the recompute (an 8-GPU node)"),
    ssd_usd: float = typer.Option(0.05, "--ssd-usd-per-tb-written",
                                  help="SSD wear price: drive price / TBW in TB"),
    list_policies: bool = typer.Option(False, "--list-policies", help="list policies and exit"),
) -> None:
    from policies.base import resolve_spec
    from policies.sim import SimConfig
    from workloads.models import resolve_profile

    console = Console(width=max(Console().width, 150))
    if list_policies:
        _list_policies(console)
        return
    specs = [resolve_spec(p) for p in policy]
    if trace is None or out_dir is None:
        raise KvwearError("simulate needs --trace and --out (or --list-policies)")
    if not trace.exists():
        raise KvwearError(f"{trace}: no such file or folder")
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise KvwearError(f"--policy: the same policy is given twice ({', '.join(labels)})")
    profile = resolve_profile(model)
    try:
        interval_s = parse_duration(interval)
    except ValueError as exc:
        raise KvwearError(f"--interval: {exc}") from None
    config = SimConfig(
        dram_bytes=_size(dram, "--dram"), ssd_bytes=_size(ssd, "--ssd"), hbm_bytes=_size(hbm, "--hbm"),
        kv_bytes_per_token=profile.kv_bytes_per_token, state_bytes=profile.state_bytes,
        chunk_tokens=block_tokens, ssd_read_bytes_per_s=float(_size(ssd_read, "--ssd-read-per-s")),
        dram_to_hbm_bytes_per_s=float(_size(hbm_load, "--hbm-load-per-s")),
        recompute_tokens_per_s=recompute, gpu_usd_per_hour=gpu_usd, ssd_usd_per_tb_written=ssd_usd,
        interval_s=interval_s, model=profile.name, active_params=profile.active_params,
        attn_flops_per_token=profile.attn_flops_per_token,
    )
    rows, batches, how = _read(trace, fmt)
    if max_requests is not None:
        rows = min(rows, max_requests)
    console.print(f"{trace.name}: {rows:,} requests ({how}); model {profile.name}; "
                  f"DRAM {format_bytes(config.dram_bytes, False)}, SSD {format_bytes(config.ssd_bytes, False)}"
                  + (f", HBM {format_bytes(config.hbm_bytes, False)}" if config.hbm_bytes else ""))

    def limited() -> Iterator[pa.RecordBatch]:
        left = rows
        for b in batches():
            if left <= 0:
                return
            if b.num_rows > left:
                b = b.slice(0, left)
            left -= b.num_rows
            yield b

    # oracles read the future from a next-use column written in one backward pass over the
    # Parquet (bounded memory), where it can stand in for the in-memory pre-pass: the whole file
    # is simulated (with --max-requests the future must stop at the limit)
    from policies.base import POLICIES
    from workloads.nextuse import iter_with_next_use, next_use_file

    oracle = how == "requests table" and max_requests is None and any(
        POLICIES.get(s.name).streams_future(s.params) for s in specs)
    out_dir.mkdir(parents=True, exist_ok=True)
    with next_use_file(trace, out_dir / ".next_use.parquet", block_tokens) if oracle \
            else nullcontext() as next_use_path:

        def policy_batches(spec: PolicySpec) -> Iterator[pa.RecordBatch]:
            if next_use_path is not None and POLICIES.get(spec.name).streams_future(spec.params):
                assert trace is not None
                return iter_with_next_use(trace, next_use_path)
            return limited()

        results = _run_all(console, specs, rows, policy_batches, config, out_dir)
    _print_results(console, trace.name, profile.name, results)
    typer.echo(f"wrote {len(results)} policy folders under {out_dir}:")
    for res in results:
        typer.echo(f"  {out_dir / res.label}")


def _run_all(console: Console, specs: list[PolicySpec], rows: int,
             batches: Callable[[PolicySpec], Iterator[pa.RecordBatch]], config: SimConfig,
             out_dir: Path) -> list[SimResult]:
    from policies.metrics import SIM_REQUESTS, SIM_SUMMARY, SIM_TIMELINE
    from policies.schema import SSD_OPS
    from policies.sim import simulate

    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as bar:
        for spec in specs:
            task = bar.add_task(f"{spec.label:>24s}", total=rows)

            def advance(n: int, task: TaskID = task) -> None:
                bar.advance(task, n)

            d = out_dir / spec.label
            # ssd_ops stream to disk batch by batch: they grow with the trace, the cache does not
            with TableWriter(SSD_OPS, d / "ssd_ops.parquet") as ops_out:
                res = simulate(batches(spec), config, spec, progress=advance, ops_sink=ops_out.write)
            write_table(SIM_REQUESTS, res.requests, d / "requests.parquet")
            write_table(SIM_TIMELINE, res.timeline, d / "timeline.parquet")
            write_table(SIM_SUMMARY, res.summary.table(), d / "summary.parquet")
            tmp = d / ".summary.json.partial"
            tmp.write_text(json.dumps({"config": config.__dict__, "summary": res.summary.as_dict()},
                                      indent=2) + "\n")
            tmp.replace(d / "summary.json")
            results.append(res)
    return results


def _print_results(console: Console, trace_name: str, model: str, results: list[SimResult]) -> None:
    t = Table(title=f"{trace_name} × {model}: tiered KV cache simulation")
    for col in ("policy", "token miss", "chunk miss", "hit DRAM/SSD", "SSD written", "linear share",
                "SSD read", "hits/write", "written→hit", "latency", "$/1k req"):
        t.add_column(col, justify="left" if col == "policy" else "right", overflow="fold")
    for res in results:
        s = res.summary
        hit = max(s.hit_tokens, 1)
        t.add_row(
            s.label, f"{s.token_miss_ratio:.1%}", f"{s.chunk_miss_ratio:.1%}",
            f"{s.dram_hit_tokens / hit:.0%}/{s.ssd_hit_tokens / hit:.0%}",
            format_bytes(s.ssd_write_bytes, False), f"{s.linear_share_of_ssd_write_bytes:.0%}",
            format_bytes(s.ssd_read_bytes, False), f"{s.ssd_hits_per_write:.3f}",
            f"{s.ssd_written_fraction_hit:.1%}", f"{s.mean_load_latency_s * 1e3:,.0f} ms",
            f"{s.cost_per_1k_requests_usd:.3f}",
        )
    console.print(t)
