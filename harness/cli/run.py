"""`kvwear run` and `kvwear report`: the main job from a config file and/or flags."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kvwear.harness.cli.apps import EXIT_ACCOUNTING_FAULT, app, echo_json
from kvwear.harness.estimate.estimator import Check
from kvwear.harness.estimate.schema import ResultsRow
from kvwear.harness.pipeline.config import RunConfig, load_config, with_overrides
from kvwear.kv import parse_kv
from kvwear.reports.headline import auto_waf, headline, rank
from kvwear.units import format_bytes, format_lifetime
from kvwear.values import toml_scalar

console = Console(stderr=True)


def _kv(items: list[str], flag: str) -> dict[str, Any]:
    """KEY=VALUE flags, each VALUE read as `KEY = VALUE` reads in a config file (kvwear.values)."""
    return {k: toml_scalar(v) for k, v in parse_kv(items, flag, form="KEY=VALUE", error=typer.BadParameter).items()}


@app.command("run", epilog="""Examples:

  kvwear run -o out/demo --resume               # the embedded default (make demo): synthetic workload, sim FTL

  kvwear run configs/mooncake-chat.toml -o runs/mooncake --resume        # continue an interrupted run

  kvwear run --trace samples/traces/mooncake/conversation_trace.head200.jsonl --model qwen3.5-27b \\
      --dram 8GB --ssd 64GB --sample-fraction 0.5 --policy lru --policy gandalf:gamma=8 -o runs/mc

  kvwear run --device block:/dev/loop7 --tracer auto --policy lru --dram 1GB \\
      --param sessions=2 --param turns=3 -o runs/loop

      (/dev/loop7: a loop device you made, e.g. losetup -f --show disk.img; with no --ssd the SSD tier is
      the device's capacity ÷ 1.05, and --fit-device scales a larger --ssd/--dram workload down to it)

  kvwear run --placement kind --policy lru --policy gandalf -o runs/fdp
      (FDP handles by object kind: device WAF with and without placement, side by side)

  kvwear run --device femu --femu-binary ~/femu/build-femu/qemu-system-x86_64 \
      --device-option "qemu_args=-L $HOME/femu/pc-bios" --device-option femu.devsz_mb=192 \
      --device-option precondition=fill --policy lru --param sessions=2 --param turns=3 -o runs/femu
      (your FEMU build and its firmware folder; about five minutes under TCG)

Exit status: 0 when every byte-accounting check holds (model checks that fail are findings, not
errors); 2 for bad input or a refused device (one line: kvwear: error: ...); 3 when a
byte-accounting check failed (I/O lost or added: a fault), after the report is written.
""")
def run_cmd(
    config: Path | None = typer.Argument(None, help="Run config TOML; flags override its settings."),
    out: Path = typer.Option(Path("runs/run"), "--out", "-o", help="Run directory."),
    resume: bool = typer.Option(False, "--resume", help="Continue a run: skip the stages already finished."),
    policy: list[str] = typer.Option([], "--policy", "-p", help="Policy spec, repeatable (lru, gandalf:gamma=8)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Model profile name or config.json/TOML path."),
    dram: str | None = typer.Option(None, "--dram", help="DRAM tier capacity (e.g. 64GB, 48GiB)."),
    ssd: str | None = typer.Option(None, "--ssd", help="SSD tier capacity (e.g. 1TB; default: a block or femu "
                                   "device's capacity ÷ 1.05, else 256GB)."),
    hbm: str | None = typer.Option(None, "--hbm", help="GPU HBM tier capacity (0 = none)."),
    trace: str | None = typer.Option(None, "--trace", "-t", help="Trace file (else the synthetic generator)."),
    fmt: str | None = typer.Option(None, "--format", "-f", help="Trace format (default: detect)."),
    generator: str | None = typer.Option(None, "--generator", help="Synthetic generator (multi-round, agentic…)."),
    param: list[str] = typer.Option([], "--param", help="Generator option KEY=VALUE, repeatable."),
    sample_fraction: float | None = typer.Option(None, "--sample-fraction",
                                                 help="Keep this share of sessions; tiers scale with it."),
    block_tokens: int | None = typer.Option(None, "--block-tokens", help="Simulator chunk size in tokens."),
    seed: int | None = typer.Option(None, "--seed", help="Workload seed."),
    device: str | None = typer.Option(None, "--device", "-d",
                                      help="sim | file:PATH | block:/dev/X | qemu | femu."),
    capacity: str | None = typer.Option(None, "--capacity", help="Device capacity to use (default: SSD tier)."),
    fit_device: bool | None = typer.Option(None, "--fit-device/--no-fit-device",
                                           help="Scale the workload to the device (sample sessions, both tiers "
                                                "by the same factor) when the SSD tier does not fit it."),
    device_option: list[str] = typer.Option([], "--device-option", help="Backend option KEY=VALUE, repeatable."),
    femu_binary: Path | None = typer.Option(None, "--femu-binary", envvar="KVWEAR_FEMU_BINARY",
                                            help="FEMU's qemu-system-x86_64, for --device femu."),
    confirm_serial: str | None = typer.Option(None, "--confirm-serial",
                                              help="Serial of a device that holds data, to write to it anyway."),
    confirm_overwrite: str | None = typer.Option(
        None, "--confirm-overwrite", metavar="PATH",
        help="file: target that kvwear did not create, to overwrite anyway (its contents are lost)."),
    tracer: str | None = typer.Option(None, "--tracer", help="eBPF capture: none | auto | bcc | bpftrace."),
    layout: str | None = typer.Option(
        None, "--layout", help="Layout: log | slab | extent (blocks), fs (one file per object on a file "
        "system kvwear makes: with --device block:DEV --device-option filesystem=ext4)."),
    trim: bool | None = typer.Option(None, "--trim/--no-trim", help="TRIM evicted objects."),
    placement: str | None = typer.Option(None, "--placement",
                                         help="FDP placement handles: none | kind | lifetime."),
    time_mode: str | None = typer.Option(None, "--time-mode", help="afap | original | compressed."),
    dwpd: float | None = typer.Option(None, "--dwpd", help="Drive writes per day rating."),
    warranty_years: float | None = typer.Option(None, "--warranty-years", help="Warranty years."),
    no_replay: bool = typer.Option(False, "--no-replay",
                                   help="Simulate and project lifetime only (no block plan, no device)."),
    no_report: bool = typer.Option(False, "--no-report", help="Skip the report."),
    as_json: bool = typer.Option(False, "--json", help="Print the results (one object per policy), the run "
                                 "directory and the report's path as JSON on stdout; progress stays on stderr."),
) -> None:
    """Simulate each policy, replay its SSD traffic on a device, measure wear, project lifetime,
    cross-check the projection, and write a report."""
    from kvwear.harness.pipeline.run import run

    cfg = load_config(config) if config else RunConfig()
    ov: dict[str, Any] = {}
    if config is None or out != Path("runs/run"):
        ov["name"] = out.name
    if policy:
        ov["policies"] = policy
    for key, val in (("model", model), ("tiers.dram", dram), ("tiers.ssd", ssd), ("tiers.hbm", hbm),
                     ("workload.trace", trace), ("workload.format", fmt), ("workload.generator", generator),
                     ("workload.sample_fraction", sample_fraction), ("workload.block_tokens", block_tokens),
                     ("workload.seed", seed), ("device.capacity", capacity), ("device.fit", fit_device),
                     ("device.confirm_serial", confirm_serial), ("device.confirm_overwrite", confirm_overwrite),
                     ("capture.tracer", tracer),
                     ("replay.layout", layout), ("replay.trim_on_evict", trim), ("replay.time_mode", time_mode),
                     ("replay.placement", placement),
                     ("estimate.dwpd", dwpd), ("estimate.warranty_years", warranty_years)):
        if val is not None:
            ov[key] = val
    if param:
        ov["workload.params"] = {**dict(cfg.workload.params), **_kv(param, "--param")}
    if device is not None:
        kind, _, target = device.partition(":")
        ov["device.kind"], ov["device.target"] = kind, target
    if device_option or femu_binary:
        extra = _kv(device_option, "--device-option")
        if femu_binary:
            extra["femu_binary"] = str(femu_binary)
        ov["device.options"] = {**dict(cfg.device.options), **extra}
    cfg = with_overrides(cfg, ov) if ov else cfg

    t0 = time.monotonic()
    with stage_bars() as progress:
        outcome = run(cfg, out, resume=resume, replay=not no_replay, report=not no_report, progress=progress)
    for line in outcome.reruns:
        console.print(f"resume: {line}")
    from kvwear.harness.pipeline.run import accounting_faults

    faults = accounting_faults(outcome.rows)
    if as_json:
        echo_json({"version": 1, "run_dir": str(outcome.run_dir), "wall_s": round(time.monotonic() - t0, 3),
                   "report": str(outcome.report_html) if outcome.report_html else None,
                   "tiers": outcome.tiers.note if outcome.tiers is not None else None,
                   "resumed": list(outcome.reruns), "accounting_faults": faults,
                   "results": [r.as_dict() for r in outcome.rows]})
    else:
        _summary(outcome.rows, [c for o in outcome.outcomes for c in o.checks], time.monotonic() - t0)
        if outcome.tiers is not None:
            console.print(f"tiers: {outcome.tiers.note}")
        for line in _drive_lines(outcome.rows):
            console.print(line)
        console.print(f"run directory: {outcome.run_dir}")
        if outcome.report_html:
            console.print(f"report: {outcome.report_html}")
    if faults:
        typer.secho(f"kvwear: error: byte accounting failed ({'; '.join(faults)}): I/O was lost or added on the "
                    f"way; see the report's cross-validation", err=True, fg=typer.colors.RED)
        raise typer.Exit(EXIT_ACCOUNTING_FAULT)


def _drive_lines(rows: Sequence[ResultsRow]) -> list[str]:
    """How far each policy's workload got towards its own steady state, and which WAF its lifetime
    uses (the drive and its preconditioning are the headline's drive sentence, printed above)."""
    return [f"  {r.policy}: {r.workload_passes} pass(es), WAF transient "
            f"{'—' if r.waf_transient is None else f'{r.waf_transient:.2f}'}, lifetime WAF {r.waf_measured:.2f} = "
            f"{r.waf_lifetime_source}"
            for r in rows if r.waf_lifetime_source and r.waf_measured is not None]


@contextmanager
def stage_bars() -> Iterator[Callable[[str, int, int | None], None]]:
    """A progress callback (kvwear.harness.pipeline.run.Progress) drawing one bar per stage, each
    moving as its stage works, on a terminal; nothing when stderr is not one (a log, CI)."""
    if not console.is_terminal:
        yield lambda _stage, _done, _total: None
        return
    with Progress(TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        tasks: dict[str, Any] = {}

        def progress(stage: str, done: int, total: int | None) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield progress


def _summary(rows: Sequence[ResultsRow], checks: Sequence[Check], wall_s: float) -> None:
    t = Table(title=f"kvwear run — {len(rows)} policies in {wall_s:.1f} s",
              caption="checks within tolerance — bytes: the same bytes counted at two points (a failure is a "
                      "fault); models: the workload WAF model's predictions against the measurement (a failure is "
                      "a finding)")
    for col in ("policy", "miss ratio", "SSD writes", "linear share", "WAF uniform ref.", "WAF workload model",
                "device WAF", "lifetime WAF=1", "lifetime WAF workload model", "lifetime WAF measured", "bytes",
                "models"):
        t.add_column(col, justify="left" if col == "policy" else "right")


    def tally(passed: int | None, total: int | None) -> str:
        return f"{passed or 0}/{total}" if total else "—"     # --no-replay rows measure nothing to check

    def f2(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f}"

    for r in rows:
        t.add_row(r.policy, f"{r.miss_ratio_tokens or 0:.4f}", format_bytes(r.ssd_write_bytes or 0),
                  f"{r.linear_share_of_ssd_write_bytes or 0:.0%}", f2(r.waf_uniform), f2(r.waf_workload),
                  f2(r.waf_measured), format_lifetime(r.lifetime_days_waf1, short=True),
                  format_lifetime(r.lifetime_days_workload, short=True),
                  format_lifetime(r.lifetime_days_measured, short=True),
                  tally(r.accounting_checks_passed, r.accounting_checks_total),
                  tally(r.model_checks_passed, r.model_checks_total))
    Console(width=max(Console().width, 160)).print(t)
    waf = auto_waf(rows)
    if waf is not None:         # the report's headline, in the same words
        for line in headline(rank(rows, checks, waf), checks, waf):
            console.print(f"• {line.replace('**', '')}", highlight=False, soft_wrap=False)


@app.command("report", epilog="Examples:\n\n  kvwear report out/demo\n\n  kvwear report out/demo --waf uniform"
                              "\n\n  kvwear report out/demo --json")
def report_cmd(run_dir: Path = typer.Argument(..., help="A run directory (or a sweep directory)."),
               waf: str = typer.Option("auto", "--waf",
                                       help="WAF of the lifetime-vs-miss figures: auto (the device's measured "
                                            "WAF, else the workload model's), waf1, uniform, workload, "
                                            "measured."),
               as_json: bool = typer.Option(False, "--json", help="Print the report's files as JSON on stdout.")
               ) -> None:
    """Rebuild the report of a finished run or sweep from its files."""
    if (run_dir / "sweep.json").exists():
        from kvwear.reports.sweep_report import build_sweep_report

        files, kind = build_sweep_report(run_dir, waf), "sweep"
    else:
        from kvwear.reports.run_report import build_run_report

        with stage_bars() as progress:      # the figures drawn (a bar on a terminal only)
            files = build_run_report(run_dir, waf=waf, progress=lambda done, total: progress("report", done, total))
        kind = "run"
    if as_json:
        echo_json({"version": 1, "kind": kind, "dir": str(run_dir), "html": str(files.html),
                   "markdown": str(files.markdown) if files.markdown else None,
                   "csv": str(files.csv) if files.csv else None,
                   "figures": {k: str(v) for k, v in files.figures.items() if v is not None}})
        return
    console.print(f"report: {files.html}")
