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

from kvwear.errors import KvwearError
from kvwear.reports.figures import ReportFiles, pareto_mask, policy_family, save_figure


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


def fig_lifetime_vs_miss(df: pd.DataFrame, path: Path, lt: str) -> Path | None:
    if df.empty or "miss_ratio_tokens" not in df.columns:
        return None
    groups = list(df.groupby(["axis_trace", "axis_model", "axis_dram_bytes", "axis_ssd_bytes"], sort=True))
    n = len(groups)
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
    for ax, ((trace, model, dram, ssd), g) in zip(axes.flat, groups, strict=False):
        g = g.assign(family=g["axis_policy"].map(policy_family))
        for fam, gg in g.groupby("family", sort=True):
            gg = gg[np.isfinite(gg[lt].to_numpy(float))].sort_values("miss_ratio_tokens")
            ax.plot(gg["miss_ratio_tokens"], gg[lt] / 365.0, marker="o", label=fam)
        mr = g["miss_ratio_tokens"].to_numpy(float)
        life = g[lt].to_numpy(float)
        front = pareto_mask(mr, life) & np.isfinite(life)
        ax.scatter(mr[front], life[front] / 365.0, s=120, facecolors="none", edgecolors="black",
                   label="Pareto frontier")
        # A point that never wrote to the SSD has an unbounded lifetime (inf), which no axis shows:
        # a panel where every point is such (a small workload) says so instead of a log axis.
        if np.isfinite(life).any():
            ax.set_yscale("log")
        else:
            ax.text(0.5, 0.5, "no SSD writes: every lifetime unbounded", transform=ax.transAxes, ha="center")
        dram_gb, ssd_gb = float(str(dram)) / 1e9, float(str(ssd)) / 1e9
        ax.set_title(f"{_short(trace)} · {model} · DRAM {dram_gb:g} GB · SSD {ssd_gb:g} GB", fontsize=9)
        ax.set_xlabel("miss ratio (token-weighted)")
        ax.set_ylabel(f"SSD lifetime, WAF {lt.removeprefix('lifetime_days_')} (years, log)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return save_figure(fig, path)


def _best_per_family(df: pd.DataFrame, lt: str) -> pd.DataFrame:
    """Per policy family the point with the longest lifetime among those within 0.02 miss ratio
    of the family's best miss ratio (the paper compares tuned configurations)."""
    d = df.assign(family=df["axis_policy"].map(policy_family))
    keys = [c for c in ("axis_trace", "axis_model", "axis_dram_bytes", "axis_ssd_bytes", "family") if c in d]
    out = []
    for _, g in d.groupby(keys, sort=True):
        ok = g[g["miss_ratio_tokens"] <= g["miss_ratio_tokens"].min() + 0.02]
        if ok[lt].notna().any():          # a family without that lifetime has no best point
            out.append(ok.loc[ok[lt].idxmax()])
    return pd.DataFrame(out)


def fig_capacity_ratio(df: pd.DataFrame, path: Path, lt: str) -> Path | None:
    """One row of panels per (trace, model): lifetime and miss ratio against the DRAM share of the
    most common total capacity, one line per policy family (its best configuration)."""
    if df.empty or df["axis_dram_bytes"].nunique() < 2:
        return None
    d = _best_per_family(df, lt)
    d = d.assign(total=d["axis_dram_bytes"] + d["axis_ssd_bytes"],
                 dram_share=d["axis_dram_bytes"] / (d["axis_dram_bytes"] + d["axis_ssd_bytes"]))
    total = d["total"].value_counts().idxmax()      # the most common total capacity
    d = d[d["total"] == total]
    groups = [(k, g) for k, g in d.groupby(["axis_trace", "axis_model"], sort=True) if g["dram_share"].nunique() > 1]
    if not groups:
        return None
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 4.0 * len(groups)), squeeze=False)
    for (a1, a2), ((trace, model), g) in zip(axes, groups, strict=True):
        for fam, gg in g.groupby("family", sort=True):
            gg = gg.sort_values("dram_share")
            a1.plot(gg["dram_share"], gg[lt] / 365.0, marker="o", label=fam)
            a2.plot(gg["dram_share"], gg["miss_ratio_tokens"], marker="o", label=fam)
        a1.set_yscale("log")
        a1.set_ylabel(f"SSD lifetime, WAF {lt.removeprefix('lifetime_days_')} (years, log)")
        a2.set_ylabel("miss ratio (token-weighted)")
        for a in (a1, a2):
            a.set_title(f"{_short(trace)} · {model}", fontsize=9)
            a.set_xlabel(f"DRAM share of {float(str(total)) / 1e9:g} GB total cache")
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
    fig.suptitle("DRAM/SSD ratio sensitivity at fixed total capacity")
    return save_figure(fig, path)


def fig_models(df: pd.DataFrame, path: Path, lt: str) -> Path | None:
    if df.empty or df["axis_model"].nunique() < 2:
        return None
    d = _best_per_family(df, lt)
    pivot = d.pivot_table(index="axis_model", columns="family", values=lt, aggfunc="max") / 365.0
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    x = np.arange(len(pivot.index))
    w = 0.8 / max(len(pivot.columns), 1)
    # A configuration that never wrote to the SSD has an unbounded lifetime, which no bar can be:
    # it is drawn hatched up to the top of the finite ones and labelled, not as an inf height
    # (which matplotlib cannot transform).
    values = pivot.to_numpy(float)
    finite = values[np.isfinite(values)]
    top = float(finite.max()) * 2.0 if finite.size else 1.0
    for i, fam in enumerate(pivot.columns):
        xs = x + i * w - 0.4 + w / 2
        col = pivot[fam].to_numpy(float)
        unbounded = np.isinf(col)
        bars = ax.bar(xs, np.where(unbounded, np.nan, col), w, label=fam)
        if unbounded.any():
            ax.bar(xs[unbounded], np.full(int(unbounded.sum()), top), w, color=bars.patches[0].get_facecolor(),
                   hatch="//", alpha=0.5)
            for xi in xs[unbounded]:
                ax.text(xi, top, "∞", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, pivot.index)
    ax.set_yscale("log")
    if not finite.size:
        ax.text(0.5, 0.5, "no SSD writes: every lifetime unbounded", transform=ax.transAxes, ha="center")
    ax.set_ylabel(f"SSD lifetime, WAF {lt.removeprefix('lifetime_days_')} (years, log)")
    ax.set_title("Model sensitivity (best configuration per policy)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def fig_cost(df: pd.DataFrame, path: Path, lt: str) -> Path | None:
    if df.empty or not {"cost_recompute_per_1k", "cost_wear_per_1k"} <= set(df.columns):
        return None
    d = _best_per_family(df, lt).groupby("family", sort=True)[["cost_recompute_per_1k", "cost_wear_per_1k"]].mean()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    x = np.arange(len(d))
    ax.bar(x, d["cost_recompute_per_1k"], label="GPU recompute")
    ax.bar(x, d["cost_wear_per_1k"], bottom=d["cost_recompute_per_1k"], label="SSD wear")
    ax.set_xticks(x, d.index, rotation=20)
    ax.set_ylabel("$ per 1k requests")
    ax.set_title("Cost per 1k requests (best configuration per policy, mean over the grid)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


_HTML = jinja2.Template("""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>kvwear sweep — {{ name }}</title><style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1300px;color:#222}
table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #ccc;padding:3px 6px}
th{background:#f3f3f3}.missing{color:#777;font-style:italic}</style></head><body>
<h1>kvwear sweep — {{ name }}</h1><p>{{ summary }}</p>
{% for f in figs %}<h2>{{ f.title }}</h2>{% if f.src %}<img src="{{ f.src }}" alt="{{ f.title }}">
{% else %}<p class="missing">not drawn — {{ f.why }}</p>{% endif %}{% endfor %}
<h2>Pareto-optimal points</h2>{{ pareto }}
{% if errors %}<h2>Failed points</h2><table><tr><th>point</th><th>axes</th><th>error</th></tr>
{% for e in errors %}<tr><td>{{ e.point_key }}</td><td>{{ e.axes }}</td><td><pre>{{ e.error }}</pre></td></tr>
{% endfor %}</table>{% endif %}
</body></html>""")


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
         "no results yet"),
        ("capacity_ratio", "DRAM/SSD ratio sensitivity (Figure 8 form)", fig_capacity_ratio,
         "the grid has fewer than two DRAM/SSD splits of one total capacity"),
        ("models", "Model sensitivity (Figure 9 form)", fig_models, "the grid has fewer than two models"),
        ("cost", "Cost per 1k requests (Figure 14 form)", fig_cost, "no cost columns"),
    ]
    drawn: dict[str, Path | None] = {}
    figs = []
    lt = lifetime_col(df, waf) if not df.empty else ""
    for key, title, make, why in specs:
        p = make(df, fig_dir / f"{key}.png", lt) if not df.empty else None
        drawn[key] = p
        src = "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode() if p else None
        figs.append({"title": title, "src": src, "why": why})
    pareto_html = "<p class='missing'>no results</p>"
    if not df.empty:
        mask = pareto_mask(df["miss_ratio_tokens"].to_numpy(float), df[lt].to_numpy(float))
        # the frontier is drawn under `lt`; every lifetime the results carry is shown beside it
        lives = [lt, *(f"lifetime_days_{w}" for w in LIFETIME_WAFS if f"lifetime_days_{w}" != lt)]
        cols = [c for c in ("axis_trace", "axis_model", "axis_dram_bytes", "axis_ssd_bytes", "axis_policy",
                            "miss_ratio_tokens", *lives) if c in df.columns]
        pareto_html = df.loc[mask, cols].sort_values("miss_ratio_tokens").to_html(index=False)
    summary = (f"{len(df)} of {meta.get('points', '?')} points finished, {len(errors)} failed."
               + (f" Lifetimes project with WAF: {lt.removeprefix('lifetime_days_')}." if lt else ""))
    out.mkdir(parents=True, exist_ok=True)
    html = out / "sweep_report.html"
    html.write_text(_HTML.render(name=meta.get("name", root.name), summary=summary, figs=figs,
                                 pareto=pareto_html, errors=errors))
    md = out / "sweep_report.md"
    md.write_text(f"# kvwear sweep — {meta.get('name', root.name)}\n\n{summary}\n\n"
                  + "\n".join(f"![{k}](figures/{p.name})" if p else f"- {k}: not drawn" for k, p in drawn.items())
                  + "\n")
    csv = out / "sweep_results.csv"
    df.to_csv(csv, index=False)
    return ReportFiles(html=html, markdown=md, csv=csv, figures=drawn)
