"""The report of a sweep directory: the Gandalf paper's comparison figures over the results store.

Figures (one PNG each, inlined into one HTML file, plus Markdown and CSV):
- lifetime vs miss ratio, one line per policy through its hyperparameter, Pareto frontier
  marked — one panel per (trace, model, capacity) (Figure 7 form);
- DRAM/SSD ratio sensitivity at fixed total capacity (Figure 8 form);
- model sensitivity (Figure 9 form);
- cost per 1k requests split into GPU recompute and SSD wear (Figure 14 form).
Reads SWEEP/results/*.parquet and SWEEP/errors/*.json only; writes below SWEEP/report/.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from matplotlib.ticker import MaxNLocator

from kvwear.errors import KvwearError
from kvwear.reports.figures import (
    MAX_WIDTH_IN,
    Figure,
    ReportFiles,
    lifetime_axis,
    pareto_mask,
    policy_family,
    save_figure,
)
from kvwear.reports.headline import offline
from kvwear.units import format_lifetime


def read_results(root: Path) -> pd.DataFrame:
    files = sorted((root / "results").glob("*.parquet"))
    if not files:
        return pd.DataFrame()
    df = pd.concat([_point_rows(f) for f in files], ignore_index=True)
    return df.drop_duplicates("point_key", keep="last").reset_index(drop=True)


def _point_rows(path: Path) -> pd.DataFrame:
    """One point's results file, or a one-line error naming it (a resumed sweep runs it again)."""
    try:
        df = pq.read_table(path).to_pandas()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise KvwearError(f"{path}: not a readable Parquet table (truncated or damaged: "
                          f"{' '.join(str(exc).split())[:120]}); resume the sweep to run this point again") from None
    if "point_key" not in df.columns or "policy" not in df.columns or list(df["point_key"]) != [path.stem]:
        raise KvwearError(f"{path}: not the results row of point {path.stem}; resume the sweep to run this point "
                          "again")
    return df


def _json_or(path: Path, default: Any) -> Any:
    """A store's JSON file, or `default` with the damage noted (the report says what it could read)."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return default


# The WAFs a lifetime can be projected with (results columns lifetime_days_<name>): Gandalf's 1, the
# uniform-random reference, the workload model (kvwear.harness.estimate.waf_model), the device's measurement.
LIFETIME_WAFS = ("waf1", "uniform", "workload", "measured")


def lifetime_col(df: pd.DataFrame, waf: str = "auto") -> str:
    """The lifetime column the figures use. `auto`: the WAF the device measured (a real drive's
    counters, an emulated drive's FTL), else the workload model's, the uniform reference's, WAF 1,
    whichever the results have first; a named WAF must be there."""
    if waf != "auto" and waf not in LIFETIME_WAFS:
        raise KvwearError(f"unknown WAF {waf!r} for the lifetime figures; valid: auto, {', '.join(LIFETIME_WAFS)}")
    order = [waf] if waf != "auto" else []
    for name in (*order, "measured", "workload", "uniform", "waf1"):
        c = f"lifetime_days_{name}"
        if c in df.columns and df[c].notna().any():
            if waf != "auto" and name != waf:
                raise KvwearError(f"the sweep results have no lifetime under WAF {waf!r} (column {c!r} is empty)")
            return c
    raise KvwearError("no lifetime column in the sweep results")


def _short(x: object) -> str:
    s = str(x)
    return Path(s).stem if "/" in s else (s or "synthetic")


def _cell(trace: object, model: object, dram: object, ssd: object) -> str:
    return f"{_short(trace)} · {model} · DRAM {float(str(dram)) / 1e9:g} GB · SSD {float(str(ssd)) / 1e9:g} GB"


def _finite(v: pd.Series) -> np.ndarray:
    return np.isfinite(pd.to_numeric(v, errors="coerce").to_numpy(float))


def _offline(policies: pd.Series) -> np.ndarray:
    return policies.map(offline).to_numpy(bool)


def fig_lifetime_vs_miss(df: pd.DataFrame, path: Path, lt: str) -> Figure | None:
    """One panel per grid cell (trace, model, capacities) with a finite lifetime: lifetime against
    miss ratio, one line per policy family, the deployable Pareto frontier circled. A cell where
    no point wrote to the SSD (every lifetime unbounded) gets a sentence, not an empty panel."""
    if df.empty or "miss_ratio_tokens" not in df.columns:
        return None
    groups = list(df.groupby(["axis_trace", "axis_model", "axis_dram_bytes", "axis_ssd_bytes"], sort=True))
    drawn = [(k, g) for k, g in groups if _finite(g[lt]).any()]
    notes = [f"{_cell(*k)}: no point wrote to the SSD, so every lifetime is unbounded (no panel)."
             for k, g in groups if not _finite(g[lt]).any()]
    if not drawn:
        return None
    n = len(drawn)
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(MAX_WIDTH_IN if cols == 2 else 6.5, 3.9 * rows), squeeze=False)
    parts = []
    for ax, (key, g) in zip(axes.flat, drawn, strict=False):
        g = g.assign(family=g["axis_policy"].map(policy_family), offline=_offline(g["axis_policy"]))
        unbounded = g[~_finite(g[lt])]
        g = g[_finite(g[lt])]
        for fam, gg in g.groupby("family", sort=True):
            gg = gg.sort_values("miss_ratio_tokens")
            bound = bool(gg["offline"].all())
            ax.plot(gg["miss_ratio_tokens"], gg[lt], marker="o", ls=":" if bound else "-",
                    mfc="white" if bound else None, label=f"{fam} (offline bound)" if bound else fam)
        mr = g["miss_ratio_tokens"].to_numpy(float)
        life = g[lt].to_numpy(float)
        dep = ~g["offline"].to_numpy(bool)
        front = np.zeros(len(g), dtype=bool)
        front[dep] = pareto_mask(mr[dep], life[dep])
        ax.scatter(mr[front], life[front], s=120, facecolors="none", edgecolors="black",
                   label="Pareto frontier (deployable)")
        lifetime_axis(ax, float(life.min()), float(life.max()))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        title = _cell(*key)
        if len(unbounded):
            title += f" ({len(unbounded)} unbounded, not drawn)"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("miss ratio (share of tokens recomputed)", fontsize=9)
        ax.set_ylabel(f"SSD lifetime, WAF {lt.removeprefix('lifetime_days_')} (log)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        parts.append(pd.DataFrame({"cell": title, "policy": g["axis_policy"].to_numpy(), "miss_ratio_tokens": mr,
                                   "lifetime_days": life, "pareto": front}))
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return save_figure(fig, path, pd.concat(parts, ignore_index=True), notes)


def _best_per_family(df: pd.DataFrame, lt: str) -> pd.DataFrame:
    """Per policy family the point with the longest lifetime among those within 0.02 miss ratio
    of the family's best miss ratio (the paper compares tuned configurations); a family with no
    lifetime at all (no device measurement) is left out."""
    d = df.assign(family=df["axis_policy"].map(policy_family))
    keys = [c for c in ("axis_trace", "axis_model", "axis_dram_bytes", "axis_ssd_bytes", "family") if c in d]
    out = []
    for _, g in d.groupby(keys, sort=True):
        ok = g[g["miss_ratio_tokens"] <= g["miss_ratio_tokens"].min() + 0.02]
        life = pd.to_numeric(ok[lt], errors="coerce")
        if life.notna().any():            # a family without that lifetime has no best point
            out.append(ok.loc[life.idxmax()])
    return pd.DataFrame(out)


def fig_capacity_ratio(df: pd.DataFrame, path: Path, lt: str) -> Figure | None:
    """One row of panels per (trace, model): lifetime and miss ratio against the DRAM share of the
    most common total capacity, one line per policy family (its best configuration)."""
    if df.empty or df["axis_dram_bytes"].nunique() < 2:
        return None
    d = _best_per_family(df, lt)
    if d.empty:
        return None
    d = d.assign(total=d["axis_dram_bytes"] + d["axis_ssd_bytes"],
                 dram_share=d["axis_dram_bytes"] / (d["axis_dram_bytes"] + d["axis_ssd_bytes"]))
    total = d["total"].value_counts().idxmax()      # the most common total capacity
    d = d[d["total"] == total]
    groups = [(k, g) for k, g in d.groupby(["axis_trace", "axis_model"], sort=True) if g["dram_share"].nunique() > 1]
    if not groups:
        return None
    fig, axes = plt.subplots(len(groups), 2, figsize=(MAX_WIDTH_IN, 3.8 * len(groups)), squeeze=False)
    notes = []
    shares = sorted(d["dram_share"].unique())
    for (a1, a2), ((trace, model), g) in zip(axes, groups, strict=True):
        fin = g[_finite(g[lt])]
        for fam, gg in g.groupby("family", sort=True):
            gg = gg.sort_values("dram_share")
            f = gg[_finite(gg[lt])]
            a1.plot(f["dram_share"], f[lt], marker="o", label=fam)
            a2.plot(gg["dram_share"], gg["miss_ratio_tokens"], marker="o", label=fam)
            if len(f) < len(gg):
                notes.append(f"{_short(trace)} · {model}: {fam} wrote nothing to the SSD at a DRAM share of "
                             + ", ".join(f"{s:.0%}" for s in gg.loc[~_finite(gg[lt]), "dram_share"])
                             + " (unbounded lifetime, not drawn).")
        if len(fin):
            lifetime_axis(a1, float(fin[lt].min()), float(fin[lt].max()))
        a1.set_ylabel(f"SSD lifetime, WAF {lt.removeprefix('lifetime_days_')} (log)", fontsize=9)
        a2.set_ylabel("miss ratio (share of tokens recomputed)", fontsize=9)
        for a in (a1, a2):
            a.set_title(f"{_short(trace)} · {model}", fontsize=9)
            a.set_xlabel(f"DRAM share of {float(str(total)) / 1e9:g} GB total cache", fontsize=9)
            a.set_xticks(shares, [f"{s:.0%}" for s in shares])
            a.set_xlim(min(shares) - 0.05, max(shares) + 0.05)
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
    fig.suptitle("DRAM/SSD ratio sensitivity at fixed total capacity", fontsize=10)
    data = d[["axis_trace", "axis_model", "family", "dram_share", "miss_ratio_tokens", lt]].reset_index(drop=True)
    return save_figure(fig, path, data, notes)


def fig_models(df: pd.DataFrame, path: Path, lt: str) -> Figure | None:
    if df.empty or df["axis_model"].nunique() < 2:
        return None
    d = _best_per_family(df, lt)
    if d.empty:
        return None
    pivot = d.pivot_table(index="axis_model", columns="family", values=lt, aggfunc="max")
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    x = np.arange(len(pivot.index))
    w = 0.8 / max(len(pivot.columns), 1)
    # A configuration that never wrote to the SSD has an unbounded lifetime, which no bar can be:
    # it is drawn hatched up to the top of the finite ones and labelled, not as an inf height
    # (which matplotlib cannot transform).
    values = pivot.to_numpy(float)
    finite = values[np.isfinite(values)]
    lo = float(finite.min()) if finite.size else 1.0
    top = float(finite.max()) * 2.0 if finite.size else 365.0
    for i, fam in enumerate(pivot.columns):
        xs = x + i * w - 0.4 + w / 2
        col = pivot[fam].to_numpy(float)
        unbounded = np.isinf(col)
        bars = ax.bar(xs, np.where(unbounded, np.nan, col), w, label=fam)
        if unbounded.any():
            ax.bar(xs[unbounded], np.full(int(unbounded.sum()), top), w, color=bars.patches[0].get_facecolor(),
                   hatch="//", alpha=0.5)
            for xi in xs[unbounded]:
                # inside the hatched bar's top: the axis ends there, so above it would reach the title
                ax.text(xi, top, "∞", ha="center", va="top", fontsize=8)
    ax.set_xticks(x, pivot.index)
    lifetime_axis(ax, lo, top)
    notes = [] if finite.size else ["No configuration wrote to the SSD: every lifetime is unbounded (hatched, ∞)."]
    ax.set_ylabel(f"SSD lifetime, WAF {lt.removeprefix('lifetime_days_')} (log)")
    ax.set_title("Model sensitivity (best configuration per policy; hatched ∞: nothing written)", fontsize=9)
    ax.legend(fontsize=7)
    return save_figure(fig, path, pivot.reset_index(), notes)


def fig_cost(df: pd.DataFrame, path: Path, lt: str) -> Figure | None:
    if df.empty or not {"cost_recompute_per_1k", "cost_wear_per_1k"} <= set(df.columns):
        return None
    best = _best_per_family(df, lt)
    if best.empty:
        return None
    d = best.groupby("family", sort=True)[["cost_recompute_per_1k", "cost_wear_per_1k"]].mean()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    x = np.arange(len(d))
    ax.bar(x, d["cost_recompute_per_1k"], label="GPU recompute")
    ax.bar(x, d["cost_wear_per_1k"], bottom=d["cost_recompute_per_1k"], label="SSD wear")
    ax.set_xticks(x, d.index, rotation=20)
    ax.set_ylabel("$ per 1k requests")
    ax.set_title("Cost per 1k requests (best configuration per policy, mean over the grid)", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, path, d.reset_index())


_HTML = jinja2.Template("""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>kvwear sweep — {{ name }}</title><style>
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1em 24px 2em;max-width:1200px;color:#222;line-height:1.4}
h1{font-size:1.45em} h2{font-size:1.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right;
overflow-wrap:break-word}th{background:#f3f3f3}td.text,th.text{text-align:left}
img{max-width:100%;height:auto}.caption{font-size:13px;color:#444}.missing{color:#777;font-style:italic}
pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:11px;margin:0}</style></head><body>
<h1>kvwear sweep — {{ name }}</h1><p>{{ summary }}</p>
{% for f in figs %}<h2>{{ f.title }}</h2>{% if f.src %}<img src="{{ f.src }}" alt="{{ f.title }}">
<p class="caption">{{ f.caption }}</p>{% for n in f.notes %}<p class="caption">{{ n }}</p>{% endfor %}
{% else %}<p class="missing">not drawn — {{ f.why }}</p>{% endif %}{% endfor %}
<h2>Pareto-optimal points (deployable policies)</h2>
{% if pareto_rows %}<table><tr>{% for h in pareto_headings %}<th{% if loop.index <= 3 %} class="text"{% endif %}>{{ h
}}</th>{% endfor %}</tr>{% for r in pareto_rows %}<tr>{% for c in r %}<td{% if loop.index <= 3 %} class="text"{% endif
%}>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>{% else %}<p class="missing">no results</p>{% endif %}
{% if errors %}<h2>Failed points</h2><table><tr><th class="text">point</th><th class="text">axes</th>
<th class="text">error</th></tr>
{% for e in errors %}<tr><td class="text">{{ e.point_key }}</td><td class="text">{{ e.axes }}</td>
<td class="text"><pre>{{ e.error }}</pre></td></tr>
{% endfor %}</table>{% endif %}
</body></html>""", autoescape=True)

CAPTIONS = {
    "lifetime_vs_miss": "Per grid cell: projected SSD lifetime (log) against the share of tokens recomputed; up and to "
                        "the left is better. Circled: the Pareto frontier of the deployable policies; hollow dotted: "
                        "an offline bound.",
    "capacity_ratio": "How the DRAM share of one total cache capacity moves lifetime (left, log) and miss ratio "
                      "(right), for each policy family's best configuration.",
    "models": "Each policy family's best configuration per model: a model with larger KV per token writes more.",
    "cost": "Dollars per 1k requests: GPU recompute of misses plus SSD wear, best configuration per family, "
            "mean over the grid.",
}


def pareto_table(df: pd.DataFrame, lt: str) -> tuple[list[str], list[list[str]]]:
    """The deployable points no other deployable point beats in both miss ratio and lifetime under
    `lt`, with their lifetimes under every WAF the results carry (years; days under a year)."""
    dep = df[~_offline(df["axis_policy"])]
    life = pd.to_numeric(dep[lt], errors="coerce").fillna(-1.0).to_numpy(float)
    front = dep[pareto_mask(dep["miss_ratio_tokens"].to_numpy(float), life)].sort_values("miss_ratio_tokens")
    lives = [lt, *(f"lifetime_days_{w}" for w in LIFETIME_WAFS if f"lifetime_days_{w}" != lt)]
    lives = [c for c in lives if c in df.columns]
    headings = ["trace", "model", "policy", "DRAM (GB)", "SSD (GB)", "miss ratio (tokens)",
                *(f"lifetime, WAF {c.removeprefix('lifetime_days_')}" for c in lives)]
    rows = [[_short(r["axis_trace"]), str(r["axis_model"]), str(r["axis_policy"]),
             f"{float(r['axis_dram_bytes']) / 1e9:g}", f"{float(r['axis_ssd_bytes']) / 1e9:g}",
             f"{r['miss_ratio_tokens']:.4f}",
             *(format_lifetime(None if pd.isna(r[c]) else float(r[c]), short=True) for c in lives)]
            for r in front.to_dict("records")]
    return headings, rows


def build_sweep_report(root: str | Path, waf: str = "auto") -> ReportFiles:
    """Write SWEEP/report/; lifetimes under `waf` (see `lifetime_col`)."""
    root = Path(root)
    out = root / "report"
    fig_dir = out / "figures"
    df = read_results(root)
    errors = [_json_or(p, {"point_key": p.stem, "error": f"{p} does not read back"})
              for p in sorted((root / "errors").glob("*.json"))]
    errors = [e if isinstance(e, dict) else {"point_key": "?", "error": "damaged error record"} for e in errors]
    meta = _json_or(root / "sweep.json", {}) if (root / "sweep.json").exists() else {}
    meta = meta if isinstance(meta, dict) else {}
    specs = [
        ("lifetime_vs_miss", "Lifetime vs miss ratio per policy (Figure 7 form)", fig_lifetime_vs_miss,
         "no results yet, or no point with a finite lifetime"),
        ("capacity_ratio", "DRAM/SSD ratio sensitivity (Figure 8 form)", fig_capacity_ratio,
         "the grid has fewer than two DRAM/SSD splits of one total capacity"),
        ("models", "Model sensitivity (Figure 9 form)", fig_models, "the grid has fewer than two models"),
        ("cost", "Cost per 1k requests (Figure 14 form)", fig_cost, "no cost columns"),
    ]
    drawn: dict[str, Figure | None] = {}
    figs: list[dict[str, Any]] = []
    lt = lifetime_col(df, waf) if not df.empty else ""
    for key, title, make, why in specs:
        f = make(df, fig_dir / f"{key}.png", lt) if not df.empty else None
        drawn[key] = f
        src = "data:image/png;base64," + base64.b64encode(f.path.read_bytes()).decode() if f else None
        figs.append({"title": title, "src": src, "why": why, "caption": CAPTIONS[key],
                     "notes": f.notes if f else ()})
    headings, rows = pareto_table(df, lt) if not df.empty else ([], [])
    summary = (f"{len(df)} of {meta.get('points', '?')} points finished, {len(errors)} failed."
               + (f" Lifetimes project with WAF: {lt.removeprefix('lifetime_days_')} (years; days under a year)."
                  if lt else ""))
    out.mkdir(parents=True, exist_ok=True)
    html = out / "sweep_report.html"
    html.write_text(_HTML.render(name=meta.get("name", root.name), summary=summary, figs=figs,
                                 pareto_headings=headings, pareto_rows=rows, errors=errors))
    md = out / "sweep_report.md"
    lines = [f"# kvwear sweep — {meta.get('name', root.name)}", "", summary, ""]
    for (key, f), fig in zip(drawn.items(), figs, strict=True):
        lines += [f"![{key}](figures/{f.path.name})" if f else f"- {key}: not drawn ({fig['why']})", "",
                  fig["caption"], *fig["notes"], ""]
    if rows:
        lines += ["## Pareto-optimal points (deployable policies)", "", "| " + " | ".join(headings) + " |",
                  "|" + "---|" * len(headings), *("| " + " | ".join(r) + " |" for r in rows)]
    md.write_text("\n".join(lines) + "\n")
    csv = out / "sweep_results.csv"
    df.to_csv(csv, index=False)
    return ReportFiles(html=html, markdown=md, csv=csv, figures=drawn)
