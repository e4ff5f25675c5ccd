"""`kvwear simulate`: run a trace through the tiered KV cache under one or more policies.

This module only parses options (as a run config's [tiers] and [simulator] settings), calls
`kvwear.harness.pipeline.simulate.simulate_policy` per policy — the function `kvwear run` and sweeps call, which
reads the input and writes each policy's tables under OUTDIR/<policy label>/ — and prints a
results table. The simulation itself lives in `policies/` and must not move here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

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

from kvwear.errors import KvwearError
from kvwear.harness.cli.apps import app, echo_json
from kvwear.harness.pipeline.config import (
    DEFAULT_SSD_BYTES,
    RunConfig,
    SimulatorConfig,
    TierConfig,
    WorkloadConfig,
    config_from_mapping,
)
from kvwear.tables import output_folder
from kvwear.units import format_bytes, parse_duration, parse_size

if TYPE_CHECKING:
    from kvwear.harness.pipeline.simulate import RequestSource, SimOutput
    from kvwear.policies.base import PolicySpec
    from kvwear.policies.config import SimConfig


def _fmt(n: float) -> str:
    return format_bytes(int(n), False).replace(".00 ", "").replace(" ", "")


_HELP = "\n\n".join([
    "Simulate a KV-cache trace through GPU HBM (optional), DRAM and SSD under placement policies.",
    "TRACE is a `requests` Parquet table (streamed) or a raw trace in any format the loaders know. "
    "Each --policy is a spec `name` or `name:param=value,...` (see --list-policies); each runs "
    "separately on the same trace. Sizes take units (100GB, 1.5TiB, 512MiB; bare numbers are bytes).",
    "Writes OUTDIR/<policy label>/ssd_ops.parquet, per_request.parquet, timeline.parquet, "
    "summary.parquet and summary.json (the files of `kvwear run`'s RUN/policies/LABEL/), and prints "
    "one results row per policy. The defaults are a run config's (its \\[tiers] and \\[simulator] tables).",
    "Examples:\n\n"
    "kvwear simulate --trace samples/traces/mooncake/conversation_trace.head200.jsonl "
    "--model kimi-k3 --dram 100GB --ssd 1TB "
    "--policy lru --policy lru-k:k=3 -o out/sim\n\n"
    "kvwear simulate --trace out/demo/workload/requests.parquet --model qwen3.5-27b --dram 64GiB --ssd 2TB "
    "--hbm 40GB --policy write-through --policy hotprefix:theta=4 -o out/sim2\n\n"
    "kvwear simulate --list-policies",
])


def _list_policies(console: Console) -> None:
    from kvwear.policies.base import POLICIES, param_infos

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


# the flags' defaults are a run config's (RunConfig; [tiers], [simulator], [workload] block_tokens)
_T, _S = TierConfig(), SimulatorConfig()


@app.command("simulate", help=_HELP)
def simulate_cmd(
    trace: Path | None = typer.Option(None, "--trace", "-t", help="requests Parquet table or raw trace"),
    fmt: str | None = typer.Option(None, "--format", "-f", help="raw trace format (default: detected)"),
    model: str = typer.Option(RunConfig.model, "--model", "-m",
                              help="model profile: built-in name or config.json / .toml path"),
    dram: str | None = typer.Option(None, "--dram", show_default=False,
                                    help=f"DRAM tier capacity (default: {_fmt(_T.dram_bytes)}, a run config's)"),
    ssd: str | None = typer.Option(None, "--ssd", show_default=False,
                                   help=f"SSD tier capacity (default: {_fmt(DEFAULT_SSD_BYTES)})"),
    hbm: str | None = typer.Option(None, "--hbm", show_default=False,
                                   help="GPU HBM tier capacity (default: 0, no HBM tier)"),
    policy: list[str] = typer.Option(["lru"], "--policy", "-p", help="policy spec; repeatable"),
    block_tokens: int = typer.Option(WorkloadConfig.block_tokens, "--block-tokens", "-b", min=1,
                                     help="simulator chunk size S in tokens"),
    out_dir: Path | None = typer.Option(None, "--out", "-o", help="output folder"),
    interval: str | None = typer.Option(None, "--interval", show_default=False,
                                        help=f"timeline interval (default: {_S.interval_s:g} s)"),
    max_requests: int | None = typer.Option(None, "--max-requests", min=1,
                                            help="simulate only the first N requests"),
    ssd_read: str | None = typer.Option(None, "--ssd-read-per-s", show_default=False,
                                        help=f"SSD→DRAM bandwidth per second (default: "
                                             f"{_fmt(_S.ssd_read_bytes_per_s)})"),
    hbm_load: str | None = typer.Option(None, "--hbm-load-per-s", show_default=False,
                                        help=f"DRAM→HBM bandwidth per second (default: "
                                             f"{_fmt(_S.dram_to_hbm_bytes_per_s)})"),
    recompute: float = typer.Option(_S.recompute_tokens_per_s, "--recompute-tokens-per-s", help="prefill speed"),
    gpu_usd: float = typer.Option(_S.gpu_usd_per_hour, "--gpu-usd-per-hour",
                                   help="price of the GPUs doing the recompute (an 8-GPU node)"),
    ssd_usd: float = typer.Option(_S.ssd_usd_per_tb_written, "--ssd-usd-per-tb-written",
                                  help="SSD wear price: drive price / TBW in TB"),
    list_policies: bool = typer.Option(False, "--list-policies", help="list policies and exit"),
    as_json: bool = typer.Option(False, "--json", help="print the results as JSON on stdout (progress on stderr)"),
) -> None:
    from kvwear.harness.pipeline.simulate import open_source, sim_config
    from kvwear.policies.base import resolve_spec
    from kvwear.workloads.models import resolve_profile

    console = Console(width=max(Console().width, 150), stderr=as_json)
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
    # the flags are a run config's [tiers] and [simulator] settings: the same defaults and checks
    tiers = {k: _size(v, f"--{k}") for k, v in (("dram", dram), ("ssd", ssd), ("hbm", hbm)) if v is not None}
    simulator: dict[str, float] = {"recompute_tokens_per_s": recompute, "gpu_usd_per_hour": gpu_usd,
                                   "ssd_usd_per_tb_written": ssd_usd}
    for key, v, opt in (("ssd_read_bytes_per_s", ssd_read, "--ssd-read-per-s"),
                        ("dram_to_hbm_bytes_per_s", hbm_load, "--hbm-load-per-s")):
        if v is not None:
            simulator[key] = float(_size(v, opt))
    if interval is not None:
        try:
            simulator["interval_s"] = parse_duration(interval)
        except ValueError as exc:
            raise KvwearError(f"--interval: {exc}") from None
    cfg = config_from_mapping({"model": model, "tiers": tiers, "simulator": simulator,
                               "workload": {"block_tokens": block_tokens}}, "<command line>")
    profile = resolve_profile(model)
    config = sim_config(cfg, profile)
    source = open_source(trace, fmt, max_requests)
    if source.rows == 0:        # as `kvwear run` refuses an empty workload: no simulation of nothing
        raise KvwearError(f"{trace}: holds no requests; nothing to simulate")
    console.print(f"{trace.name}: {source.rows:,} requests ({source.how}); model {profile.name}; "
                  f"DRAM {format_bytes(config.dram_bytes, False)}, SSD {format_bytes(config.ssd_bytes, False)}"
                  + (f", HBM {format_bytes(config.hbm_bytes, False)}" if config.hbm_bytes else ""))
    with output_folder(out_dir):
        results = _run_all(console, specs, source, config, out_dir)
    if as_json:
        echo_json({"version": 1, "trace": str(trace), "model": profile.name, "requests": source.rows,
                   "dram_bytes": config.dram_bytes, "ssd_bytes": config.ssd_bytes, "hbm_bytes": config.hbm_bytes,
                   "policies": [{"label": r.summary.label, "dir": str(r.dir), "summary": r.summary.as_dict()}
                                for r in results]})
        return
    _print_results(console, trace.name, profile.name, results)
    typer.echo(f"wrote {len(results)} policy folders under {out_dir}:")
    for res in results:
        typer.echo(f"  {res.dir}")


def _run_all(console: Console, specs: list[PolicySpec], source: RequestSource, config: SimConfig,
             out_dir: Path) -> list[SimOutput]:
    from kvwear.harness.pipeline.simulate import simulate_policy

    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as bar:
        for spec in specs:
            task = bar.add_task(f"{spec.label:>24s}", total=source.rows)

            def advance(n: int, task: TaskID = task) -> None:
                bar.advance(task, n)

            results.append(simulate_policy(source, config, spec, out_dir / spec.label, progress=advance))
    return results


def _print_results(console: Console, trace_name: str, model: str, results: list[SimOutput]) -> None:
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
