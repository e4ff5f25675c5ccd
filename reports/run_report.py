"""The report of one run directory: self-contained HTML (figures inlined), Markdown and CSV.

Reads `results.parquet`, `manifest.json`, `estimate/*/crossval.json`, `device/*/timeline.parquet` and
the workload's characterization (`workload/characterization/`: summary.json and its figures) (see
kvwear.harness.pipeline.rundir for the layout) and writes only below `RUN/report/`. Must not compute
metrics or launch anything: every number shown is read from the run directory.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
import pyarrow.parquet as pq

from kvwear.errors import KvwearError
from kvwear.harness.devices.measurement import DeviceMeasurement
from kvwear.harness.estimate.estimator import Check, Estimate, PlanRecord
from kvwear.harness.estimate.schema import read_results
from kvwear.reports import figures
from kvwear.reports.figures import ReportFiles
from kvwear.reports.sweep_report import lifetime_col

# Columns of the per-policy table: (column, heading, formatter).
GIB = 2**30
_TABLE: list[tuple[str, str, str]] = [
    ("policy", "policy", "s"),
    ("miss_ratio_tokens", "miss ratio (tokens)", "ratio"),
    ("miss_ratio_chunks", "miss ratio (chunks)", "ratio"),
    ("ssd_write_bytes_full", "SSD writes full (GiB)", "gib"),
    ("ssd_write_bytes_linear", "SSD writes linear (GiB)", "gib"),
    ("hits_per_ssd_write", "hits / SSD write", "f2"),
    ("device_write_bytes", "device host writes (GiB)", "gib"),
    ("nand_write_bytes", "NAND writes (GiB)", "gib"),
    ("waf_uniform", "WAF uniform ref.", "f2"),
    ("waf_workload", "WAF workload model", "f2"),
    ("waf_measured", "WAF measured", "f2"),
    ("waf_emulator", "WAF FTL emulator", "f2"),
    ("lifetime_days_waf1", "lifetime WAF=1 (days)", "days"),
    ("lifetime_days_uniform", "lifetime uniform-ref. WAF (days)", "days"),
    ("lifetime_days_workload", "lifetime workload-model WAF (days)", "days"),
    ("lifetime_days_measured", "lifetime measured WAF (days)", "days"),
    ("pe_cycles_per_day_workload", "P/E cycles/day, workload model", "f4"),
    ("pe_cycles_per_day_measured", "P/E cycles/day, measured", "f4"),
    ("lifetime_days_pe_workload", "lifetime at rated P/E, workload model (days)", "days"),
    ("lifetime_days_pe_measured", "lifetime at rated P/E, measured (days)", "days"),
    ("load_latency_mean_s", "load latency (ms)", "ms"),
    ("cost_per_1k", "cost / 1k req ($)", "f4"),
]


def _fmt(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    match kind:
        case "s":
            return str(value)
        case "ratio":
            return f"{value:.4f}"
        case "gib":
            return f"{value / GIB:,.2f}"
        case "f2":
            return f"{value:,.2f}"
        case "f4":
            return f"{value:,.4f}"
        case "days":
            return "∞" if math.isinf(value) else f"{value:,.1f}"
        case "ms":
            return f"{value * 1e3:,.2f}"
        case "f3":
            return f"{value:,.3f}"
        case "x":
            return f"{value:,.2f}×"
    return str(value)


# The two kinds of cross-validation check (kvwear.harness.estimate.estimator.Check), in report order.
CHECK_SECTIONS = (
    ("accounting", "Byte accounting",
     "The same bytes counted at two points of the pipeline (policy, block plan, fio, eBPF, SMART). "
     "A failure means I/O was lost or added on the way: a fault of the harness or the device."),
    ("model", "Models against measurement",
     "The estimator's predictions (the workload WAF model over the plan's page death distances, the "
     "FTL emulator configured as the device, the lifetime projected with the workload model) against what "
     "the device measured. A failure is a finding about the model on this workload, not a fault of the run."),
    ("reference", "Reference projections",
     "For comparison only, not counted above: Gandalf's WAF 1 and the uniform-random (Lambert W) WAF, "
     "against the same measurement."),
)
# Sections the summary line counts (the reference rows are shown, not tallied).
TALLIED = ("accounting", "model")


# The workload characterization's figures (kvwear.reports.characterization.FIGURES), in report order.
WORKLOAD_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("hit_ratio_by_category", "Ideal hit ratio",
     "What an infinite cache would hit, per request category, block- and token-weighted: the ceiling "
     "every policy's miss ratio is measured against."),
    ("reuse_time_cdf", "Reuse times",
     "CDF of the time between a request and the request whose prefix it reuses, per category, with the "
     "exponential fit (rate = 1/mean) that workload-aware policies use."),
    ("lifespan_cdf", "KV lifespans", "Time from a block's first to its last access, for reused blocks."),
    ("reuse_skew", "Reuse skew", "Share of all hits served by the most-reused share of distinct blocks."),
    ("live_blocks", "Capacity for the ideal hit ratio",
     "KV that has been accessed and will be again, over time: its peak is the capacity an ideal cache needs."),
    ("hit_ratio_vs_capacity", "LRU hit ratio vs capacity",
     "An LRU cache's block hit ratio by capacity against the ideal one and the optimal (Belady) capacity."),
)


def load_characterization(run_dir: Path) -> dict[str, Any] | None:
    """The workload's characterization summary (kvwear.harness.pipeline.run's characterize stage), if it ran."""
    p = run_dir / "workload" / "characterization" / "summary.json"
    return dict(json.loads(p.read_text())) if p.is_file() else None


def workload_lines(c: dict[str, Any]) -> list[str]:
    """The characterization's headline numbers, as sentences (all read from its summary.json)."""
    gib = 2.0**30
    fit = c.get("request_reuse_fit") or {}
    skew = c.get("reuse_skew_block_share") or {}
    lines = [
        f"{c['requests']:,} requests, {c['block_accesses']:,} block accesses of {c['block_tokens']} tokens, "
        f"{c['unique_blocks']:,} distinct blocks ({c['model']}).",
        f"Ideal (infinite-cache) hit ratio: {c['token_hit_ratio']:.1%} of hashed tokens, "
        f"{c['input_token_hit_ratio']:.1%} of input tokens.",
        f"Capacity an ideal cache needs: {c['capacity_bytes'] / gib:,.2f} GiB at the peak "
        f"({c['capacity_blocks']:,} chunks + {c['capacity_states']:,} states); for the KV chunks alone, an "
        f"optimal (Belady) cache needs {c['peak_live_chunk_bytes'] / gib:,.2f} GiB and an LRU "
        f"cache {c['lru_bytes_for_ideal'] / gib:,.2f} GiB to reach the ideal block hit ratio.",
    ]
    if skew:
        lines.append("Reuse skew: " + ", ".join(f"{float(v):.1%} of the blocks serve {float(k):.0%} of the hits"
                                               for k, v in sorted(skew.items())) + ".")
    if fit.get("n"):
        lines.append(f"Request reuse time ({c.get('reuse_fit_sample', 'all')} reuses, n={fit['n']:,}): mean "
                     f"{fit['mean_s']:.1f} s; exponential fit KS D={fit['ks_statistic']:.3f}, "
                     f"p={fit['ks_pvalue']:.2g}.")
    return lines


def load_checks(run_dir: Path) -> list[Check]:
    """All cross-validation checks of a run (estimate/*/crossval.json), in policy order."""
    return [c for p in sorted((run_dir / "estimate").glob("*/crossval.json")) for c in Estimate.load(p).checks]


def checks_frame(checks: list[Check]) -> pd.DataFrame:
    """The checks as a table (for the figures and crossval.csv)."""
    cols = [f.name for f in dataclasses.fields(Check)]
    return pd.DataFrame([dataclasses.asdict(c) for c in checks], columns=cols)


def load_timelines(run_dir: Path) -> dict[str, pd.DataFrame]:
    out: dict[str, pd.DataFrame] = {}
    for p in sorted((run_dir / "device").glob("*/timeline.parquet")):
        out[p.parent.name] = pq.read_table(p).to_pandas()
    return out


def device_notes(run_dir: Path) -> list[str]:
    """What the device and capture stages said about themselves: which tracer ran and what it
    lost, forced evictions of the log layout, what host-side observation of an emulated drive
    can show."""
    notes: list[str] = []
    seen: set[str] = set()
    for p in sorted((run_dir / "device").glob("*/result.json")):
        label = p.parent.name
        m = DeviceMeasurement.load(p)
        cap = m.capture
        if cap is not None:
            notes.append(f"{label}: eBPF capture by {cap.tracer}: {cap.events} requests, "
                         f"{cap.lost_events} lost events, {cap.no_completion} without completion."
                         + ("" if cap.drained else
                            " The tracer could not confirm it had written out its last events before it "
                            "stopped (flush barrier timed out): requests missing at the end are uncounted losses."))
        for note in m.replay.notes:
            if note not in seen:
                seen.add(note)
                notes.append(note)
    for p in sorted((run_dir / "plan").glob("*/plan.json")):
        rec = PlanRecord.load(p)
        c, ds, label = rec.counts, rec.death_summary, p.parent.name
        notes.append(f"{label}: the plan wrote {ds.host_pages:,} pages of 4 KiB over "
                     f"{ds.footprint_pages:,} distinct ones; {ds.overwritten_pages:,} died by overwrite, "
                     f"{ds.trimmed_pages:,} by TRIM, {ds.survivor_pages:,} were live at the end "
                     "(the workload WAF model's input).")
        if c.forced_evictions:
            notes.append(f"{label}: the {c.layout} layout's head reached {c.forced_evictions} live objects "
                         f"({c.forced_evict_bytes:,} bytes) and evicted them; later reads of those objects are "
                         "counted as read misses in plan.json.")
        if c.relocation_write_bytes:
            notes.append(f"{label}: host writes by cause — the policy's objects {c.policy_write_bytes:,} bytes, the "
                         f"{c.layout} layout's cleaning {c.relocation_write_bytes:,} bytes ({c.relocations:,} live "
                         f"objects moved, {c.relocation_read_bytes:,} bytes read to move them); the device's host "
                         "bytes count both.")
        if c.split_writes:
            notes.append(f"{label}: the extent layout spread {c.split_writes:,} objects over more than one free "
                         f"extent ({c.write_extents:,} extents written).")
    return notes


def _img(path: Path | None) -> str | None:
    if path is None:
        return None
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


_HTML = jinja2.Template(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvwear report — {{ name }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.pass{color:#176317}.fail{color:#b00020;font-weight:bold}
figure{margin:1.5em 0} figcaption{font-size:13px;color:#555}
.missing{color:#777;font-style:italic} pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:12px}
.wide{overflow-x:auto}
</style></head><body>
<h1>kvwear report — {{ name }}</h1>
<p>{{ summary }}</p>
<h2>Per-policy results</h2>
<div class="wide"><table><tr>{% for h in headings %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table></div>
{% if placement_rows %}<h2>Physical placement (FDP reclaim unit handles)</h2>
{% for note in placement_notes %}<p>{{ note }}</p>{% endfor %}
<table><tr>{% for h in placement_headings %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in placement_rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
{% for fig in figs %}
<figure>{% if fig.src %}<img src="{{ fig.src }}" alt="{{ fig.title }}">{% else %}
<p class="missing">{{ fig.title }}: not drawn — {{ fig.why }}</p>{% endif %}
<figcaption>{{ fig.caption }}</figcaption></figure>
{% endfor %}
<h2>Cross-validation: estimator vs measurement</h2>
{% if not checks %}<p class="missing">no cross-validation checks were recorded</p>{% endif %}
{% for kind, title, meaning in sections %}{% set group = checks | selectattr("kind", "equalto", kind) | list %}
{% if group %}<h3>{{ title }}</h3><p>{{ meaning }}</p>
<table><tr><th>policy</th><th>quantity</th><th>source</th><th>predicted</th><th>measured</th>
<th>rel. error</th><th>tolerance</th><th>verdict</th><th>note</th></tr>
{% for c in group %}<tr><td>{{ c.policy }}</td><td>{{ c.quantity }}</td><td>{{ c.source }}</td>
<td>{{ c.predicted }}</td><td>{{ c.measured }}</td><td>{{ c.rel_error }}</td><td>{{ c.tolerance }}</td>
<td class="{{ 'pass' if c.passed else 'fail' }}">{{ 'pass' if c.passed else 'FAIL' }}</td><td>{{ c.note }}</td></tr>
{% endfor %}</table>{% endif %}{% endfor %}
<h2>Workload characterization</h2>
{% if workload %}{% for line in workload %}<p>{{ line }}</p>{% endfor %}
{% for fig in workload_figs %}
<figure>{% if fig.src %}<img src="{{ fig.src }}" alt="{{ fig.title }}">{% else %}
<p class="missing">{{ fig.title }}: not drawn — {{ fig.why }}</p>{% endif %}
<figcaption>{{ fig.caption }}</figcaption></figure>
{% endfor %}{% else %}<p class="missing">the run did not characterize its workload (a sweep point, or a run
from before kvwear did; `kvwear trace characterize RUN/workload/requests.parquet` does it)</p>{% endif %}
{% if notes %}<h2>Device and capture notes</h2>{% endif %}
{% for note in notes %}<p>{{ note }}</p>{% endfor %}
<h2>Run manifest</h2><pre>{{ manifest }}</pre>
</body></html>
"""
)


# The placement section (kvwear.harness.plan.placement): (column, heading, formatter).
_PLACEMENT: list[tuple[str, str, str]] = [
    ("policy", "policy", "s"),
    ("placement", "placement", "s"),
    ("waf_no_placement", "WAF without placement", "f3"),
    ("waf_measured", "WAF with placement", "f3"),
    ("lifetime_days_no_placement", "lifetime without (days)", "days"),
    ("lifetime_days_measured", "lifetime with (days)", "days"),
    ("host_write_gain_vs_lru", "host-write gain vs LRU", "x"),
    ("waf_gain_vs_lru", "WAF gain vs LRU", "x"),
    ("lifetime_gain_vs_lru", "lifetime gain vs LRU", "x"),
]


def placement_section(df: pd.DataFrame) -> tuple[list[str], list[list[str]], list[str]]:
    """Headings, rows and notes of the physical-placement table; empty when the run used none."""
    if "placement" not in df.columns or not (df["placement"] != "none").any():
        return [], [], []
    cols = [c for c in _PLACEMENT if c[0] in df.columns]
    rows = [[_fmt(r[c], k) for c, _, k in cols] for r in df.to_dict("records")]
    notes = ["Device WAF with the plan's placement handles and, on the same drive, without them (the "
             "embedded FTL plays the plan twice, on the same raw NAND with the same handles, each holding "
             "an open reclaim unit from the start as FDP's do, so both pay the same open units). Lifetime "
             "gain over LRU without placement = host-write gain × WAF gain."]
    if "placement_carried" in df.columns:
        lost = [str(p) for p, ok in zip(df["policy"], df["placement_carried"], strict=True) if not ok]
        why = sorted({str(r) for r in df.get("placement_unavailable", []) if isinstance(r, str) and r})
        if lost and why:
            notes.append(f"This drive could not take placement handles ({'; '.join(why)}): the plan was played "
                         f"with plain writes, so the WAF of {', '.join(lost)} is without placement.")
        elif lost:
            notes.append(f"This device cannot carry placement handles (only the embedded FTL does; fio 3.33's "
                         f"iolog has no placement field): the WAF of {', '.join(lost)} is without placement.")
    return [h for _, h, _ in cols], rows, notes


def _num(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:,.6g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _manifest(path: Path) -> dict[str, Any]:
    """RUN/manifest.json (shown in the report), or a one-line error naming it when damaged
    (a resume writes it again)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KvwearError(f"{path}: does not read back ({type(exc).__name__}); kvwear run --resume writes it "
                          "again") from None
    if not isinstance(data, dict):
        raise KvwearError(f"{path}: holds {type(data).__name__}, not the run's manifest; kvwear run --resume "
                          "writes it again")
    return data


def build_run_report(run_dir: str | Path, notes: list[str] | None = None, waf: str = "auto") -> ReportFiles:
    """Write RUN/report/{report.html, report.md, results.csv, figures/*.png}; the lifetime figure
    projects with `waf` (kvwear.reports.sweep_report.lifetime_col)."""
    run = Path(run_dir)
    out = run / "report"
    figdir = out / "figures"
    if not (run / "results.parquet").is_file():
        raise KvwearError(f"{run} has no results.parquet: not a run directory, or the run has not finished "
                          "(continue it with kvwear run --resume)")
    # a column no policy has a value for (the device's, in a run without replay) is left out
    df = pd.DataFrame([r.as_dict() for r in read_results(run / "results.parquet")]).dropna(axis=1, how="all")
    manifest = _manifest(run / "manifest.json")
    check_list = load_checks(run)
    checks = checks_frame(check_list)
    timelines = load_timelines(run)

    if waf == "auto":
        try:
            life_col = lifetime_col(df)
        except KvwearError:              # a run without lifetimes: the figure says it is not drawn
            life_col = "lifetime_days_waf1"
    else:
        life_col = lifetime_col(df, waf)
    makers: list[tuple[str, str, str, Callable[[], Path | None], str]] = [
        ("lifetime_vs_miss", "SSD lifetime vs miss ratio",
         f"Projected lifetime under WAF {life_col.removeprefix('lifetime_days_')} (the workload model on the "
         "embedded FTL, the measured WAF on a real device) against the token miss ratio; one line per policy "
         "through its hyperparameter; dashed: Pareto frontier.",
         lambda: figures.lifetime_vs_miss(df, figdir / "lifetime_vs_miss.png", life_col),
         "no miss ratio or lifetime"),
        ("ssd_writes_by_kind", "SSD writes by object kind",
         "Bytes each policy wrote to the SSD tier, by object kind; the label is the share of written objects "
         "that were ever read back.",
         lambda: figures.ssd_writes_by_kind(df, figdir / "ssd_writes_by_kind.png"), "no per-kind write bytes"),
        ("waf_and_nand", "Host and NAND writes",
         "What the device received from the host and what it wrote to NAND (garbage collection included).",
         lambda: figures.waf_and_nand(df, figdir / "waf_and_nand.png"),
         "the device does not report NAND writes"),
        ("waf_over_time", "WAF over the replay", "Cumulative write amplification as the replay progressed.",
         lambda: figures.waf_over_time(timelines, figdir / "waf_over_time.png"),
         "the device recorded no timeline"),
        ("predicted_vs_measured", "Predicted vs measured",
         "Relative error of each estimator quantity against the measurement, with its tolerance.",
         lambda: figures.predicted_vs_measured(checks, figdir / "predicted_vs_measured.png"),
         "no cross-validation checks"),
        ("latency_and_cost", "Load latency and cost",
         "Mean cache load latency per request and cost per 1k requests (GPU recompute + SSD wear).",
         lambda: figures.latency_and_cost(df, figdir / "latency_and_cost.png"), "no latency or cost columns"),
    ]
    drawn: dict[str, Path | None] = {}
    figs = []
    for key, title, caption, make, why in makers:
        path = make()
        drawn[key] = path
        figs.append({"title": title, "caption": f"{title}. {caption}", "src": _img(path), "why": why})

    char = load_characterization(run)
    workload = workload_lines(char) if char else []
    workload_figs = []
    for key, title, caption in WORKLOAD_FIGURES if char else ():
        src = run / "workload" / "characterization" / f"{key}.png"
        copy: Path | None = None
        if src.is_file():                # copied so report/ stands alone (the Markdown links it)
            figdir.mkdir(parents=True, exist_ok=True)
            copy = Path(shutil.copyfile(src, figdir / f"workload_{key}.png"))
        drawn[f"workload_{key}"] = copy
        workload_figs.append({"title": title, "caption": f"{title}. {caption}", "src": _img(copy),
                              "why": f"{src.name} is missing"})

    cols = [c for c in _TABLE if c[0] in df.columns]
    headings = [h for _, h, _ in cols]
    rows = [[_fmt(r[c], k) for c, _, k in cols] for r in df.to_dict("records")]
    check_rows = [
        {"policy": c.policy, "kind": c.kind, "quantity": c.name, "source": c.source, "passed": c.passed,
         "predicted": _num(c.predicted), "measured": _num(c.measured),
         "rel_error": "—" if math.isinf(c.rel_error) else f"{c.rel_error:.2%}",
         "tolerance": f"±{c.tolerance:.0%}", "note": c.note}
        for c in check_list
    ]
    name = str(manifest.get("config", {}).get("name", run.name))
    tallies = []
    for kind, title, _ in CHECK_SECTIONS:
        if kind not in TALLIED:
            continue
        group = checks[checks["kind"] == kind]
        if len(group):
            tallies.append(f"{title.lower()}: {int(group['passed'].sum())} of {len(group)} checks within tolerance")
    summary = (f"{len(df)} policies; device {manifest.get('config', {}).get('device', {}).get('kind', '?')}; "
               + ("; ".join(tallies) if tallies else "no cross-validation checks") + ".")
    p_headings, p_rows, p_notes = placement_section(df)
    html = _HTML.render(name=name, summary=summary, headings=headings, rows=rows, figs=figs, checks=check_rows,
                        placement_headings=p_headings, placement_rows=p_rows, placement_notes=p_notes,
                        sections=CHECK_SECTIONS, workload=workload, workload_figs=workload_figs,
                        notes=[*(notes or []), *device_notes(run)],
                        manifest=json.dumps(manifest, indent=2, sort_keys=True, default=str))
    out.mkdir(parents=True, exist_ok=True)
    html_path = out / "report.html"
    html_path.write_text(html)

    md = [f"# kvwear report — {name}", "", summary, "", "| " + " | ".join(headings) + " |",
          "|" + "---|" * len(headings)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    if p_rows:
        md += ["", "## Physical placement (FDP reclaim unit handles)", "", *p_notes, "",
               "| " + " | ".join(p_headings) + " |", "|" + "---|" * len(p_headings)]
        md += ["| " + " | ".join(r) + " |" for r in p_rows]
    md += ["", "## Cross-validation"]
    for kind, title, meaning in CHECK_SECTIONS:
        rows_of_kind = [c for c in check_rows if c["kind"] == kind]
        if not rows_of_kind:
            continue
        md += ["", f"### {title}", "", meaning, "", "| policy | quantity | source | predicted | measured | "
               "rel. error | tolerance | verdict | note |", "|---|---|---|---|---|---|---|---|---|"]
        md += [f"| {c['policy']} | {c['quantity']} | {c['source']} | {c['predicted']} | {c['measured']} | "
               f"{c['rel_error']} | {c['tolerance']} | {'pass' if c['passed'] else 'FAIL'} | {c['note']} |"
               for c in rows_of_kind]
    if workload:
        md += ["", "## Workload characterization", "", *workload]
    md += ["", "## Figures", ""]
    md += [f"![{k}](figures/{p.name})" if p else f"- {k}: not drawn" for k, p in drawn.items()]
    md_path = out / "report.md"
    md_path.write_text("\n".join(md) + "\n")
    csv_path = out / "results.csv"
    df.to_csv(csv_path, index=False)
    if len(checks):
        checks.to_csv(out / "crossval.csv", index=False)
    return ReportFiles(html=html_path, markdown=md_path, csv=csv_path, figures=drawn)
