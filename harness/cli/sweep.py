"""`kvwear sweep`: a grid of runs on a local process pool or a Dask cluster, resumable."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from kvwear.harness.cli.apps import EXIT_ACCOUNTING_FAULT, app, echo_json

if TYPE_CHECKING:
    from kvwear.harness.pipeline.sweep import SweepProgress

console = Console(stderr=True)


@app.command("sweep", epilog="""Examples:

  kvwear sweep configs/sweep-quick.toml -o sweeps/quick --jobs 2

  kvwear sweep configs/sweep-quick.toml -o sweeps/quick --scheduler tcp://127.0.0.1:8786   # on a Dask cluster

      (here a scheduler on this host: dask scheduler --port 8786, and dask worker tcp://127.0.0.1:8786)

A point that finished is never run again: rerunning the same command resumes the sweep.
Exit status: 0 when every point ran and every byte-accounting check held; 1 when a point failed
(recorded in SWEEP/errors/); 2 for bad input; 3 when a stored point failed a byte-accounting check.
""")
def sweep_cmd(
    config: Path = typer.Argument(..., help="Sweep TOML: \\[base] run config, \\[grid] axes, \\[sweep] options."),
    out: Path = typer.Option(Path("sweeps/sweep"), "--out", "-o", help="Sweep directory (results store)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Local worker processes."),
    scheduler: str | None = typer.Option(None, "--scheduler", help="Dask scheduler address tcp://HOST:PORT."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run points that failed before again."),
    no_report: bool = typer.Option(False, "--no-report", help="Skip the sweep report."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts, the store and the report's path as "
                                 "JSON on stdout; progress stays on stderr."),
) -> None:
    """Run every point of a sweep that is not in the results store yet, then report."""
    # Imported here: kvwear.harness.pipeline.sweep pulls in pandas and Dask's client, a second of start-up that
    # every other command would pay.
    from kvwear.harness.pipeline.sweep import ResultsStore, check_store, load_sweep, run_sweep

    plan = load_sweep(config)
    check_store(plan, out)            # a refusal is the one line it prints
    console.print(f"{len(plan.points)} points; store: {out}")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[counts]}"),
                  TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"), console=console) as bar:
        task = bar.add_task("sweep", total=len(plan.points), counts="", eta="—")

        def show(p: SweepProgress) -> None:
            eta = p.eta_s()
            bar.update(task, completed=p.skipped + p.done + p.failed,
                       counts=f"done {p.done} · running {p.running} · failed {p.failed} · skipped {p.skipped}",
                       eta="—" if eta is None else f"{eta:,.0f} s")

        final = run_sweep(plan, out, jobs=jobs, scheduler=scheduler, on_progress=show, retry_failed=retry_failed)
    for line in final.retried:
        console.print(line)
    console.print(f"done {final.done}, failed {final.failed}, already finished {final.skipped}"
                  + (f", retried {len(final.retried)} (above)" if final.retried else ""))
    if final.failed:
        console.print(f"failed points are recorded in {out / 'errors'}; rerun with --retry-failed")
    html = None
    if not no_report:
        from kvwear.reports.sweep_report import build_sweep_report

        html = build_sweep_report(out).html
        console.print(f"report: {html}")
    from kvwear.harness.pipeline.run import accounting_faults

    rows = ResultsStore(out).read()
    faults = accounting_faults([{str(k): v for k, v in r.items()} for r in rows.to_dict("records")])
    if as_json:
        echo_json({"version": 1, "store": str(out), "points": len(plan.points), "done": final.done,
                   "failed": final.failed, "already_finished": final.skipped, "retried": final.retried,
                   "errors_dir": str(out / "errors") if final.failed else None,
                   "report": str(html) if html else None, "accounting_faults": faults})
    if faults:
        typer.secho(f"kvwear: error: byte accounting failed at {len(faults)} point(s) ({'; '.join(faults[:5])}): "
                    "I/O was lost or added on the way", err=True, fg=typer.colors.RED)
        raise typer.Exit(EXIT_ACCOUNTING_FAULT)
    if final.failed:
        raise typer.Exit(1)
