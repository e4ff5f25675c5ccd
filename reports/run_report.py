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
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import pandas as pd
import pyarrow.parquet as pq

from kvwear.errors import KvwearError
from kvwear.harness.devices.measurement import DeviceMeasurement
from kvwear.harness.estimate.estimator import Check, Estimate, PlanRecord
from kvwear.harness.estimate.schema import ResultsRow, read_results
from kvwear.reports import figures
from kvwear.reports.figures import Figure, ReportFiles
from kvwear.reports.headline import WAF_NAMES, Ranked, drive_of, headline, lifetime_inputs, offline, rank
from kvwear.reports.sweep_report import lifetime_col
from kvwear.units import format_lifetime

GIB = 2**30

# The full results, in groups that each fit the page: (group, [(field, heading with unit, format)]).
# "dwpd" is the drive writes per day a policy's host writes make of the SSD tier.
FULL_TABLES: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("Cache simulation", (
        ("miss_ratio_tokens", "miss ratio (tokens)", "ratio"),
        ("miss_ratio_chunks", "miss ratio (chunks)", "ratio"),
        ("ssd_write_bytes_full", "SSD writes, full KV (GiB)", "gib"),
        ("ssd_write_bytes_linear", "SSD writes, states (GiB)", "gib"),
        ("hits_per_ssd_write", "hits per SSD write", "f2"),
        ("frac_ssd_writes_hit", "SSD writes ever hit (%)", "pct"),
        ("load_latency_mean_s", "load latency (ms)", "ms"),
        ("cost_per_1k", "cost ($ / 1k requests)", "f4"),
    )),
    ("Device", (
        ("plan_write_bytes", "plan writes (GiB)", "gib"),
        ("device_write_bytes", "host writes the drive counted (GiB)", "gib"),
        ("nand_write_bytes", "NAND writes (GiB)", "gib"),
        ("waf_measured", "WAF measured", "f2"),
        ("waf_emulator", "WAF, FTL twin", "f2"),
        ("waf_workload", "WAF, workload model", "f2"),
        ("waf_workload_regime", "model regime", "s"),
        ("waf_uniform", "WAF, uniform reference", "f2"),
    )),
    ("Lifetime (years; days under a year)", (
        ("host_bytes_per_day", "host writes (TB / day)", "tb"),
        ("dwpd", "drive writes per day", "g3"),
        ("lifetime_days_waf1", "at WAF 1", "life"),
        ("lifetime_days_uniform", "at the uniform ref. WAF", "life"),
        ("lifetime_days_workload", "at the model's WAF", "life"),
        ("lifetime_days_measured", "at the measured WAF", "life"),
    )),
    ("Drive and preconditioning (where the device names them)", (
        ("drive_preset", "drive preset", "s"),
        ("drive_scaling", "scaled to the run", "s"),
        ("precondition", "preconditioning", "s"),
        ("precondition_host_bytes", "preconditioning host writes (GiB)", "gib"),
        ("precondition_nand_bytes", "preconditioning NAND writes (GiB)", "gib"),
        ("precondition_gc_bytes", "preconditioning GC writes (GiB)", "gib"),
        ("precondition_waf", "preconditioning WAF", "f2"),
        ("precondition_steady", "preconditioning reached steady state", "yn"),
        ("rating_source", "endurance ratings from", "s"),
    )),
    ("Replay phases: transient and steady state", (
        ("workload_passes", "passes of the plan", "s"),
        ("workload_rounds", "rounds", "s"),
        ("waf_replay", "WAF, whole replay", "f2"),
        ("waf_transient", "WAF, transient", "f2"),
        ("waf_steady", "WAF, steady state", "f2"),
        ("steady_from_round", "steady state from round (MSER-5)", "s"),
        ("steady_state_reached", "PTS's steady-state criterion held", "yn"),
        ("steady_state_round", "… first at round", "s"),
        ("waf_last_window", "WAF, last window", "f2"),
        ("waf_lifetime_source", "the lifetime's WAF", "s"),
    )),
    ("File system (the fs layout: files on a file system kvwear made; WAF: the block trace on the embedded FTL)", (
        ("fs_filesystem", "file system", "s"),
        ("fs_discard", "discard", "s"),
        ("fs_fsync", "fsync", "yn"),
        ("file_write_bytes", "file writes (GiB)", "gib"),
        ("fs_block_write_bytes", "block writes (GiB)", "gib"),
        ("fs_overhead_ratio", "block ÷ file bytes", "f3"),
        ("fs_discard_bytes", "discarded (GiB)", "gib"),
        ("fs_ftl_nand_bytes", "NAND writes on the FTL (GiB)", "gib"),
        ("fs_ftl_waf", "WAF on the FTL", "f3"),
    )),
    ("P/E cycles of the full-size drive", (
        ("pe_cycles_per_day_workload", "P/E cycles per day, model WAF", "f4"),
        ("pe_cycles_per_day_measured", "P/E cycles per day, measured WAF", "f4"),
        ("lifetime_days_pe_workload", "lifetime at rated P/E, model WAF", "life"),
        ("lifetime_days_pe_measured", "lifetime at rated P/E, measured WAF", "life"),
    )),
)


def field_value(row: ResultsRow, name: str) -> Any:
    """A results field by name, and the one ratio the tables add (drive writes per day)."""
    if name == "dwpd":
        return row.host_bytes_per_day / row.ssd_bytes if row.host_bytes_per_day and row.ssd_bytes else None
    return getattr(row, name)


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
        case "life":
            return format_lifetime(value, short=True)
        case "tb":
            return f"{value / 1e12:,.2f}"
        case "pct":
            return f"{value:.0%}"
        case "ms":
            return f"{value * 1e3:,.2f}"
        case "g3":
            return f"{value:,.3g}"
        case "f3":
            return f"{value:,.3f}"
        case "x":
            return f"{value:,.2f}×"
        case "yn":
            return "yes" if value else "no"
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
    ("reference", "Reference projections (not checks)",
     "What two textbook assumptions would have projected, beside the measurement, for comparison only: "
     "Gandalf's WAF 1 and the uniform-random (Lambert W) WAF. Neither describes the plans kvwear replays, "
     "so a difference is no failure and is not counted above."),
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


_CSS = """
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1em 24px 2em;max-width:1200px;color:#222;
     line-height:1.4}
h1{font-size:1.45em;margin:.2em 0 .4em} h2{font-size:1.2em;margin-top:1.6em} h3{font-size:1.05em}
.headline{font-size:15px;margin:.3em 0 .6em;padding-left:1.2em} .headline li{margin:.25em 0}
.inputs{font-size:13px;color:#444;margin:.4em 0}
table{border-collapse:collapse;font-size:13px;margin:.6em 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;overflow-wrap:break-word}
th{background:#f3f3f3;font-weight:600} td:first-child,th:first-child{text-align:left}
td.text,th.text{text-align:left} #ranking td.text{white-space:nowrap}
tr.bound td{color:#555;font-style:italic}
.pass{color:#176317}.fail{color:#b00020;font-weight:bold}.ref{color:#555}
figure{margin:1.5em 0} figure img{max-width:100%;height:auto} figcaption{font-size:13px;color:#444}
.missing{color:#777;font-style:italic}
pre{background:#f7f7f7;padding:1em;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}
details{margin:.8em 0} summary{cursor:pointer;font-weight:600}
"""

_ENV = jinja2.Environment(autoescape=True)
# **bold** spans of the headline's sentences (kvwear.reports.headline), escaped first
_ENV.filters["bold"] = lambda s: markupsafe.Markup(
    re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", str(markupsafe.escape(s))))
_HTML = _ENV.from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvwear report — {{ name }}</title>
<style>{{ css }}</style></head><body>
<h1>kvwear report — {{ name }}</h1>
<ul class="headline" id="headline">{% for s in headline %}<li>{{ s | bold }}</li>{% endfor %}</ul>
<table id="ranking"><caption class="inputs" style="caption-side:top;text-align:left">Ranking: deployable
policies by projected SSD lifetime, then the offline bounds.</caption>
<tr>{% for h in ranking_headings %}<th{% if loop.index <= 2 %} class="text"{% endif %}>{{ h }}</th>{% endfor %}</tr>
{% for r in ranking %}<tr{% if r.bound %} class="bound"{% endif %}>{% for c in r.cells %}
<td{% if loop.index <= 2 %} class="text"{% endif %}>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>
<p class="inputs" id="inputs">{{ inputs }}</p>
<p class="inputs">{{ summary }}</p>
<details id="full-results"><summary>All results ({{ full_size }})</summary>
{% for title, headings, rows in full %}<h3>{{ title }}</h3>
<table><tr>{% for h in headings %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>{% endfor %}
</details>
{% if placement_rows %}<h2>Physical placement (FDP reclaim unit handles)</h2>
{% for note in placement_notes %}<p>{{ note }}</p>{% endfor %}
<table><tr>{% for h in placement_headings %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in placement_rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
<h2>Figures</h2>
{% for fig in figs %}
<figure>{% if fig.src %}<img src="{{ fig.src }}" alt="{{ fig.title }}">{% else %}
<p class="missing">{{ fig.title }}: not drawn — {{ fig.why }}</p>{% endif %}
<figcaption><b>{{ fig.title }}.</b> {{ fig.caption }}</figcaption></figure>
{% endfor %}
<h2>Cross-validation: estimator vs measurement</h2>
{% if not checks %}<p class="missing">no cross-validation checks were recorded</p>{% endif %}
{% for kind, title, meaning in sections %}{% set group = checks | selectattr("kind", "equalto", kind) | list %}
{% if group %}{% if kind == "reference" %}<details><summary>{{ title }} ({{ group | length }})</summary>
{% else %}<h3>{{ title }}</h3>{% endif %}<p>{{ meaning }}</p>
<table><tr><th>policy</th><th class="text">quantity</th><th class="text">source</th><th>{{ 'reference' if kind ==
"reference" else 'predicted' }}</th><th>measured</th><th>{{ 'differs by' if kind == "reference" else
'rel. error' }}</th>{% if kind != "reference" %}<th>tolerance</th><th class="text">verdict</th>{% endif %}
<th class="text">note</th></tr>
{% for c in group %}<tr><td>{{ c.policy }}</td><td class="text">{{ c.quantity }}</td><td class="text">{{ c.source
}}</td><td>{{ c.predicted }}</td><td>{{ c.measured }}</td><td>{{ c.rel_error }}</td>{% if kind != "reference" %}
<td>{{ c.tolerance }}</td><td class="text {{ 'pass' if c.passed else 'fail' }}">{{ 'pass' if c.passed else 'FAIL'
}}</td>{% endif %}<td class="text">{{ c.note }}</td></tr>
{% endfor %}</table>{% if kind == "reference" %}</details>{% endif %}{% endif %}{% endfor %}
<h2>Workload characterization</h2>
{% if workload %}{% for line in workload %}<p>{{ line }}</p>{% endfor %}
{% for fig in workload_figs %}
<figure>{% if fig.src %}<img src="{{ fig.src }}" alt="{{ fig.title }}">{% else %}
<p class="missing">{{ fig.title }}: not drawn — {{ fig.why }}</p>{% endif %}
<figcaption><b>{{ fig.title }}.</b> {{ fig.caption }}</figcaption></figure>
{% endfor %}{% else %}<p class="missing">the run did not characterize its workload (a sweep point, or a run
from before kvwear did; `kvwear trace characterize RUN/workload/requests.parquet` does it)</p>{% endif %}
{% if notes %}<h2>Device and capture notes</h2>{% endif %}
{% for note in notes %}<p>{{ note }}</p>{% endfor %}
<details><summary>Run manifest</summary><pre>{{ manifest }}</pre></details>
</body></html>
""")


def _plain(s: str) -> str:
    return s.replace("**", "")


# The placement section (kvwear.harness.plan.placement): (column, heading, formatter).
_PLACEMENT: list[tuple[str, str, str]] = [
    ("policy", "policy", "s"),
    ("placement", "placement", "s"),
    ("waf_no_placement", "WAF without placement", "f3"),
    ("waf_measured", "WAF with placement", "f3"),
    ("lifetime_days_no_placement", "lifetime without", "life"),
    ("lifetime_days_measured", "lifetime with", "life"),
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


def build_run_report(run_dir: str | Path, notes: list[str] | None = None, waf: str = "auto",
                     progress: Callable[[int, int], None] | None = None) -> ReportFiles:
    """Write RUN/report/{report.html, report.md, results.csv, figures/*.png}; lifetimes are
    projected with `waf` (kvwear.reports.sweep_report.lifetime_col); `progress(done, total)` is
    called as the figures are drawn."""
    run = Path(run_dir)
    out = run / "report"
    figdir = out / "figures"
    if not (run / "results.parquet").is_file():
        raise KvwearError(f"{run} has no results.parquet: not a run directory, or the run has not finished "
                          "(continue it with kvwear run --resume)")
    results = read_results(run / "results.parquet")
    # a column no policy has a value for (the device's, in a run without replay) is left out
    df = pd.DataFrame([r.as_dict() for r in results]).dropna(axis=1, how="all")
    manifest = _manifest(run / "manifest.json")
    check_list = load_checks(run)
    checks = checks_frame(check_list)
    timelines = load_timelines(run)

    if waf == "auto":
        try:
            life_col = lifetime_col(df)
        except KvwearError:              # a run without lifetimes: the figures say they are not drawn
            life_col = "lifetime_days_waf1"
    else:
        life_col = lifetime_col(df, waf)
    life_waf = life_col.removeprefix("lifetime_days_")
    ranked = rank(results, check_list, life_waf)
    flags = [offline(r.policy) for r in results]
    makers: list[tuple[str, str, str, Callable[[], Figure | None], str]] = [
        ("lifetime_vs_miss", "SSD lifetime vs miss ratio",
         f"Up and left is better: longer projected life (log axis, {WAF_NAMES[life_waf]}) at fewer tokens "
         "recomputed; hollow: an offline bound; dashed: the deployable Pareto frontier.",
         lambda: figures.lifetime_vs_miss(df, figdir / "lifetime_vs_miss.png", life_col, flags),
         "no miss ratio or finite lifetime"),
        ("ssd_writes_by_kind", "SSD writes by object kind",
         "What fills the SSD tier (GiB over the trace), by object kind; the label is the share of written "
         "objects ever read back — the rest is wear for nothing.",
         lambda: figures.ssd_writes_by_kind(df, figdir / "ssd_writes_by_kind.png"), "no per-kind write bytes"),
        ("waf_and_nand", "Host and NAND writes",
         "The drive's own counters: host bytes it received and NAND bytes it wrote (GiB, garbage collection "
         "included); their ratio, the WAF, labelled.",
         lambda: figures.waf_and_nand(df, figdir / "waf_and_nand.png"),
         "the device does not report NAND writes"),
        ("waf_over_time", "WAF over the replay",
         "Cumulative WAF (NAND ÷ host bytes) against host GiB written so far (log), ending at the drive's "
         "totals: a line still rising had not reached its steady state.",
         lambda: figures.waf_over_time(timelines, figdir / "waf_over_time.png"),
         "the device recorded no timeline"),
        ("predicted_vs_measured", "Estimate vs measurement",
         "Per policy, each check's |relative error| (%) against its tolerance (black tick), red when outside; "
         "references are not checks and are not drawn.",
         lambda: figures.predicted_vs_measured(checks, figdir / "predicted_vs_measured.png"),
         "no cross-validation check with a tolerance"),
        ("latency_and_cost", "Load latency and cost",
         "Mean cache load latency (ms per request) and cost ($ per 1k requests: GPU recompute of misses + SSD "
         "wear).",
         lambda: figures.latency_and_cost(df, figdir / "latency_and_cost.png"), "no latency or cost columns"),
    ]
    char = load_characterization(run)
    total = len(makers) + (len(WORKLOAD_FIGURES) if char else 0)
    tick = progress or (lambda _done, _total: None)
    drawn: dict[str, Figure | None] = {}
    figs = []
    tick(0, total)
    for key, title, caption, make, why in makers:
        fig = make()
        drawn[key] = fig
        figs.append({"title": title, "caption": caption, "src": _img(fig.path if fig else None), "why": why})
        tick(len(drawn), total)

    workload = workload_lines(char) if char else []
    workload_figs = []
    for key, title, caption in WORKLOAD_FIGURES if char else ():
        src = run / "workload" / "characterization" / f"{key}.png"
        copy: Figure | None = None
        if src.is_file():                # copied so report/ stands alone (the Markdown links it)
            figdir.mkdir(parents=True, exist_ok=True)
            copy = Figure(Path(shutil.copyfile(src, figdir / f"workload_{key}.png")), pd.DataFrame())
        drawn[f"workload_{key}"] = copy
        workload_figs.append({"title": title, "caption": caption, "src": _img(copy.path if copy else None),
                              "why": f"{src.name} is missing"})
        tick(len(drawn), total)

    rank_headings, rank_rows = ranking_table(ranked, life_waf)
    # a group none of whose fields any row holds is left out (the device's, in a run without replay;
    # the drive's and its phases', on a device that names no drive)
    groups = [(title, cols) for title, cols in FULL_TABLES
              if any(field_value(r, f) is not None for r in results for f, _, _ in cols)]
    full_size = f"{sum(len(c) for _, c in groups)} columns, in {len(groups)} table{'s' if len(groups) != 1 else ''}"
    full = [(title, ["policy", *(h for _, h, _ in cols)],
             [[r.policy, *(_fmt(field_value(r, f), k) for f, _, k in cols)] for r in results])
            for title, cols in groups]
    check_rows: list[dict[str, Any]] = [
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
    device = next((r.device for r in results if r.device), None) or "none (no replay)"
    summary = (f"{len(results)} policies; device {device}; "
               + ("; ".join(tallies) if tallies else "no cross-validation checks") + ".")
    lines = headline(ranked, check_list, life_waf)
    inputs = lifetime_inputs(results)
    p_headings, p_rows, p_notes = placement_section(df)
    html = _HTML.render(name=name, css=_CSS, headline=lines, ranking_headings=rank_headings, ranking=rank_rows,
                        inputs=inputs, summary=summary, full=full, full_size=full_size,
                        figs=figs, checks=check_rows,
                        placement_headings=p_headings, placement_rows=p_rows, placement_notes=p_notes,
                        sections=CHECK_SECTIONS, workload=workload, workload_figs=workload_figs,
                        notes=[*(notes or []), *device_notes(run)],
                        manifest=json.dumps(manifest, indent=2, sort_keys=True, default=str))
    out.mkdir(parents=True, exist_ok=True)
    html_path = out / "report.html"
    html_path.write_text(html)

    md = [f"# kvwear report — {name}", "", *(f"- {s}" for s in lines), "", *_md_table(rank_headings,
          [r["cells"] for r in rank_rows]), "", inputs, "", summary]
    for title, headings, rows in full:
        md += ["", f"### {title}", "", *_md_table(headings, rows)]
    if p_rows:
        md += ["", "## Physical placement (FDP reclaim unit handles)", "", *p_notes, "",
               *_md_table(p_headings, p_rows)]
    md += ["", "## Cross-validation"]
    for kind, title, meaning in CHECK_SECTIONS:
        rows_of_kind = [c for c in check_rows if c["kind"] == kind]
        if not rows_of_kind:
            continue
        verdict = (lambda c: "reference") if kind == "reference" else (lambda c: "pass" if c["passed"] else "FAIL")
        md += ["", f"### {title}", "", meaning, "", *_md_table(
            ["policy", "quantity", "source", "predicted", "measured", "rel. error", "tolerance", "verdict", "note"],
            [[c["policy"], c["quantity"], c["source"], c["predicted"], c["measured"], c["rel_error"],
              c["tolerance"], verdict(c), c["note"]] for c in rows_of_kind])]
    if workload:
        md += ["", "## Workload characterization", "", *workload]
    md += ["", "## Figures", ""]
    captions = {k: f"{f['title']}. {f['caption']}" for k, f in zip(drawn, [*figs, *workload_figs], strict=True)}
    for k, f in drawn.items():
        md += [f"![{k}](figures/{f.path.name})" if f else f"- {k}: not drawn", "", captions[k], ""]
    md_path = out / "report.md"
    md_path.write_text("\n".join(md) + "\n")
    csv_path = out / "results.csv"
    df.to_csv(csv_path, index=False)
    if len(checks):
        checks.to_csv(out / "crossval.csv", index=False)
    return ReportFiles(html=html_path, markdown=md_path, csv=csv_path, figures=drawn)


def _md_table(headings: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings),
            *("| " + " | ".join(_plain(c) for c in r) + " |" for r in rows)]


def ranking_table(ranked: list[Ranked], waf: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The first screen's ranking: headings (units in each) and one row per policy; where the
    device named the drive behind its WAF, that drive (preset, preconditioning) and the replay's
    transient WAF beside the lifetime's (the steady state's where the workload reached it)."""
    drives = waf == "measured" and any(drive_of(x.row) for x in ranked)
    phases = waf == "measured" and any(x.row.waf_transient is not None for x in ranked)
    headings = ["#", "policy", "miss ratio (tokens)", "host writes (TB / day)", "DWPD (drive writes / day)",
                *(["drive (preset, preconditioning)"] if drives else []),
                *(["WAF, transient"] if phases else []),
                ("WAF, steady state (* not reached)" if phases else
                 f"WAF ({'measured' if waf == 'measured' else WAF_NAMES[waf]})"), "projected lifetime",
                "× LRU write-back", "estimate vs drive (lifetime error, tolerance)"]
    rows = []
    n = 0
    for x in ranked:
        r = x.row
        if not x.offline:
            n += 1
        waf_value = r.waf_measured if waf == "measured" else getattr(r, f"waf_{waf}", None) if waf != "waf1" else 1.0
        c = x.model_check
        rows.append({"bound": x.offline, "cells": [
            "—" if x.offline else str(n),
            f"{r.policy} (offline bound)" if x.offline else r.policy,
            _fmt(r.miss_ratio_tokens, "ratio"),
            _fmt(r.host_bytes_per_day, "tb"),
            _fmt(field_value(r, "dwpd"), "g3"),
            *([drive_of(r, short=True) or "—"] if drives else []),
            *([_fmt(r.waf_transient, "f2")] if phases else []),
            _fmt(waf_value, "f2") + ("*" if phases and r.steady_state_reached is False else ""),
            format_lifetime(x.lifetime_days),
            "—" if x.gain_vs_baseline is None else f"{x.gain_vs_baseline:,.1f}×",
            "—" if c is None else f"{c.rel_error:.1%} {'≤' if c.passed else '>'} ±{c.tolerance:.0%}",
        ]})
    return headings, rows
