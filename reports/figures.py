"""Figures for run and sweep reports, drawn from result tables (matplotlib, Agg backend).

Each function takes the tables it plots and a path, draws one figure, writes a PNG and returns a
`Figure`: the path and the data it plotted (one row per point or bar, in the plotted units, so
tests can hold a figure against the run's records), or None when the tables lack what the figure
needs (the report then says why it is absent). Lifetimes are drawn in the one unit kvwear shows
them in (kvwear.units.format_lifetime: years, days under a year). `save_figure` keeps every text
inside the image and thins tick labels that would overlap; what it could not mend is recorded in
`Figure.problems`. Must not read run directories itself or compute metrics.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, FuncFormatter

from kvwear.units import format_lifetime

GIB = 2**30
# Widest figure, in inches at DPI: 1,155 px, inside the reports' 1,200 px column.
MAX_WIDTH_IN = 10.5
DPI = 110


@dataclass(frozen=True)
class Figure:
    """One drawn figure: its PNG and what it plotted."""

    path: Path
    data: pd.DataFrame
    problems: tuple[str, ...] = ()      # layout faults left after drawing (text outside, overlapping ticks)
    notes: tuple[str, ...] = ()         # what the figure leaves out and why, as sentences for the report


@dataclass(frozen=True)
class ReportFiles:
    """What a report builder wrote (figures that could not be drawn are None)."""

    html: Path
    markdown: Path
    csv: Path
    figures: dict[str, Figure | None]


def _overlapping(axis: matplotlib.axis.Axis) -> bool:
    """Whether the axis' horizontal tick labels overlap (rotated ones are laid out by rotation)."""
    r = axis.figure.canvas.get_renderer()    # type: ignore[attr-defined]
    boxes = [t.get_window_extent(r) for t in axis.get_ticklabels()
             if t.get_visible() and t.get_text() and not t.get_rotation()]
    horizontal = axis is axis.axes.xaxis
    along = sorted((b.x0, b.x1) if horizontal else (b.y0, b.y1) for b in boxes)
    return any(a[1] > b[0] + 1 for a, b in itertools.pairwise(along))


def _thin_ticks(fig: plt.Figure) -> list[str]:
    """Keep every other tick of an automatic axis whose labels overlap ('0.19000.19250.1950'),
    until they do not; returns the axes still overlapping (categories are never dropped)."""
    left = []
    drawn = False      # a draw lays out every axis: another is needed only after a locator changed
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            chosen = isinstance(axis.get_major_locator(), FixedLocator)    # ticks the figure placed itself
            for _ in range(4):
                if not drawn:
                    fig.canvas.draw()
                    drawn = True
                if not _overlapping(axis):
                    break
                if chosen:
                    left.append(f"{ax.get_title() or 'a panel'}: the {name} axis' labels overlap")
                    break
                lo, hi = sorted(axis.get_view_interval())
                locs = [v for v in axis.get_majorticklocs() if lo <= v <= hi]
                axis.set_major_locator(FixedLocator(locs[::2]))
                drawn = False
            else:
                left.append(f"{ax.get_title() or 'a panel'}: the {name} axis' labels overlap")
    return left


def _outside(fig: plt.Figure) -> list[str]:
    """What of the drawn texts (titles, labels, tick labels, legends) reaches past the figure's
    edges, by the bounding box of everything drawn."""
    fig.canvas.draw()
    b = fig.get_tightbbox(fig.canvas.get_renderer())     # type: ignore[attr-defined]
    w, h = fig.get_size_inches()
    tol = 1.0 / DPI
    sides = [name for name, past in (("left", b.x0 < -tol), ("bottom", b.y0 < -tol), ("right", b.x1 > w + tol),
                                     ("top", b.y1 > h + tol)) if past]
    return [f"{fig.axes[0].get_title() if fig.axes else 'figure'}: text cut off at the {s} edge" for s in sides]


def _labels_past_axes(fig: plt.Figure) -> list[str]:
    """Which value labels drawn inside a plot (annotations) reach past its axes: above the top one
    runs into the title, as the tallest bar's label once did."""
    r = fig.canvas.get_renderer()                          # type: ignore[attr-defined]
    out = []
    for ax in fig.axes:
        box = ax.get_window_extent(r)
        for t in ax.texts:
            tb = t.get_window_extent(r)
            if t.get_visible() and t.get_text() and (tb.y1 > box.y1 + 1 or tb.y0 < box.y0 - 1):
                out.append(f"{ax.get_title() or 'figure'}: label {t.get_text()!r} past the axes")
    return out


def save_figure(fig: plt.Figure, path: Path, data: pd.DataFrame | None = None,
                notes: Sequence[str] = ()) -> Figure:
    """Lay out `fig` (tight layout, overlapping tick labels thinned), write it as a PNG (creating
    the folder), close it, and return it with the data it plots."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    problems = _thin_ticks(fig)
    fig.tight_layout()
    problems += _outside(fig) + _labels_past_axes(fig)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return Figure(path, data if data is not None else pd.DataFrame(), tuple(problems), tuple(notes))


def _has(df: pd.DataFrame, *cols: str) -> bool:
    return all(c in df.columns and df[c].notna().any() for c in cols)


def policy_family(label: str) -> str:
    """'gandalf:gamma=8' or 'gandalf,gamma=8.0' → 'gandalf' (one line per family through its
    hyperparameter)."""
    return label.split(":", 1)[0].split(",", 1)[0]


def pareto_mask(miss: np.ndarray, lifetime: np.ndarray) -> np.ndarray:
    """Points not dominated in (lower miss ratio, longer lifetime)."""
    keep = np.ones(len(miss), dtype=bool)
    for i in range(len(miss)):
        better = (miss <= miss[i]) & (lifetime >= lifetime[i]) & ((miss < miss[i]) | (lifetime > lifetime[i]))
        keep[i] = not better.any()
    return keep


# Lifetime ticks: round numbers of days under a year, of years above.
_LIFETIME_TICKS_DAYS = (*(d for d in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200)),
                        *(y * 365.0 for y in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)))


def lifetime_axis(ax: plt.Axes, lo_days: float, hi_days: float, axis: str = "y") -> None:
    """A log axis of lifetimes in days from `lo_days` to `hi_days`, with round ticks labelled in
    kvwear's lifetime unit ('30 d', '2 y')."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    # from the round tick below the shortest to the one above the longest: at least two ticks
    below = [t for t in _LIFETIME_TICKS_DAYS if t <= lo_days]
    above = [t for t in _LIFETIME_TICKS_DAYS if t >= hi_days]
    lo = below[-1] if below else lo_days
    hi = above[0] if above else hi_days
    ticks = [t for t in _LIFETIME_TICKS_DAYS if lo <= t <= hi]
    if len(ticks) > 6:
        ticks = ticks[::2]
    (ax.set_ylim if axis == "y" else ax.set_xlim)(lo / 1.15, hi * 1.15)
    target.set_major_locator(FixedLocator(ticks))
    target.set_minor_locator(FixedLocator([]))
    target.set_major_formatter(FuncFormatter(lambda v, _: format_lifetime(v, short=True)))


def lifetime_vs_miss(df: pd.DataFrame, path: Path, lifetime_col: str = "lifetime_days_measured",
                     offline: Sequence[bool] | None = None) -> Figure | None:
    """Projected lifetime against token miss ratio, one line per policy family, Pareto frontier
    marked; `offline` (one flag per row) draws the offline bounds hollow. Unbounded lifetimes
    (nothing written) cannot be drawn on a log axis: they are left out of the data."""
    if not _has(df, "miss_ratio_tokens", lifetime_col):
        return None
    d = df.assign(offline=list(offline) if offline is not None else False)
    d = d.dropna(subset=["miss_ratio_tokens", lifetime_col])
    d = d[np.isfinite(d[lifetime_col].to_numpy(float))]
    if d.empty:
        return None
    d = d.assign(family=d["policy"].map(policy_family))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for fam, g in d.groupby("family", sort=True):
        g = g.sort_values("miss_ratio_tokens")
        if g["offline"].all():
            ax.plot(g["miss_ratio_tokens"], g[lifetime_col], marker="o", ms=10, mfc="white", ls=":",
                    label=f"{fam} (offline bound)")
        else:
            ax.plot(g["miss_ratio_tokens"], g[lifetime_col], marker="o", label=fam)
    lt = d[lifetime_col].to_numpy(dtype=float)
    mr = d["miss_ratio_tokens"].to_numpy(dtype=float)
    # the frontier of what one can deploy: an offline bound dominates, but no cache can run it
    deployable = ~d["offline"].to_numpy(bool)
    front = np.zeros(len(d), dtype=bool)
    front[deployable] = pareto_mask(mr[deployable], lt[deployable])
    order = np.argsort(mr[front])
    ax.plot(mr[front][order], lt[front][order], ls="--", color="black", lw=1, label="Pareto frontier (deployable)")
    lifetime_axis(ax, float(lt.min()), float(lt.max()))
    ax.set_xlabel("miss ratio (share of tokens recomputed)")
    ax.set_ylabel("projected SSD lifetime (log)")
    ax.set_title(f"SSD lifetime vs miss ratio (WAF: {lifetime_col.removeprefix('lifetime_days_')})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    data = pd.DataFrame({"policy": d["policy"].to_numpy(), "miss_ratio_tokens": mr, "lifetime_days": lt,
                         "offline": d["offline"].to_numpy(bool), "pareto": front})
    return save_figure(fig, path, data)


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    """A column, or one of nothing where the table lacks it."""
    return df[name] if name in df.columns else pd.Series([None] * len(df), dtype=object)


def _label_bars(ax: plt.Axes, x: np.ndarray, tops: np.ndarray, labels: Sequence[str | None]) -> None:
    """A label above each bar that has one, with room above the tallest bar so that its label stays
    inside the axes instead of running into the title."""
    for xi, top, label in zip(x, tops, labels, strict=True):
        if label is not None:
            ax.annotate(label, (xi, top), ha="center", va="bottom", fontsize=8)
    if any(label is not None for label in labels) and len(tops) and np.nanmax(tops) > 0:
        ax.set_ylim(top=float(np.nanmax(tops)) * 1.1)


def _policy_axes(ax: plt.Axes, x: np.ndarray, policies: pd.Series, ylabel: str, title: str) -> None:
    """A per-policy bar chart's axes: policy names under the bars, the unit on y, title, legend."""
    ax.set_xticks(x, policies, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)


def ssd_writes_by_kind(df: pd.DataFrame, path: Path) -> Figure | None:
    """Stacked SSD bytes written per policy by object kind, with the fraction ever hit."""
    if not _has(df, "ssd_write_bytes_full", "ssd_write_bytes_linear"):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.arange(len(df))
    full = df["ssd_write_bytes_full"].fillna(0).to_numpy(float)
    lin = df["ssd_write_bytes_linear"].fillna(0).to_numpy(float)
    ax.bar(x, full / GIB, label="full-attention KV")
    ax.bar(x, lin / GIB, bottom=full / GIB, label="linear / sliding-window state")
    hit = _column(df, "frac_ssd_writes_hit")
    _label_bars(ax, x, (full + lin) / GIB, [None if pd.isna(f) else f"{f:.0%} hit" for f in hit])
    _policy_axes(ax, x, df["policy"], "bytes written to the SSD tier (GiB)", "SSD writes by object kind")
    data = pd.DataFrame({"policy": df["policy"].to_numpy(), "full_bytes": full, "linear_bytes": lin,
                         "frac_hit": hit.to_numpy()})
    return save_figure(fig, path, data)


def waf_and_nand(df: pd.DataFrame, path: Path) -> Figure | None:
    """Host vs NAND bytes per policy, each pair labelled with its ratio: the WAF of the bytes drawn
    (the whole replay's; the lifetime's WAF may be a phase of it, in the ranking)."""
    if not _has(df, "device_write_bytes", "nand_write_bytes"):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.arange(len(df))
    w = 0.38
    host = df["device_write_bytes"].fillna(0).to_numpy(float)
    nand = df["nand_write_bytes"].fillna(0).to_numpy(float)
    waf = np.divide(nand, host, out=np.full_like(nand, np.nan), where=host > 0)
    ax.bar(x - w / 2, host / GIB, w, label="host writes (the drive received)")
    ax.bar(x + w / 2, nand / GIB, w, label="NAND writes (with garbage collection)")
    _label_bars(ax, x + w / 2, nand / GIB, [None if np.isnan(a) else f"WAF {a:.2f}" for a in waf])
    _policy_axes(ax, x, df["policy"], "bytes written (GiB)", "Host and NAND writes on the device")
    data = pd.DataFrame({"policy": df["policy"].to_numpy(), "host_bytes": host, "nand_bytes": nand, "waf": waf})
    return save_figure(fig, path, data)


def waf_over_time(timelines: dict[str, pd.DataFrame], path: Path) -> Figure | None:
    """Cumulative WAF over the host bytes written so far, one line per policy (each timeline is
    cumulative and ends at the drive's totals)."""
    usable = {k: v for k, v in timelines.items() if _has(v, "host_bytes", "waf_cumulative")}
    if not usable:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    parts = []
    for label, t in sorted(usable.items()):
        ax.plot(t["host_bytes"] / GIB, t["waf_cumulative"], label=label)
        parts.append(pd.DataFrame({"policy": label, "host_bytes": t["host_bytes"].to_numpy(),
                                   "nand_bytes": t["nand_bytes"].to_numpy() if "nand_bytes" in t else np.nan,
                                   "waf_cumulative": t["waf_cumulative"].to_numpy()}))
    ax.set_xscale("log")
    ax.set_xlabel("host bytes written so far (GiB, log)")
    ax.set_ylabel("cumulative WAF (NAND ÷ host bytes)")
    ax.set_title("Write amplification over the replay")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path, pd.concat(parts, ignore_index=True))


def predicted_vs_measured(checks: pd.DataFrame, path: Path) -> Figure | None:
    """|Relative error| of each check that has a tolerance (accounting and model checks; the
    references are not checks) against that tolerance, one panel per policy."""
    if not _has(checks, "rel_error", "tolerance"):
        return None
    d = checks[(checks["kind"] != "reference") & (checks["tolerance"] > 0)
               & np.isfinite(checks["rel_error"].astype(float))]
    if d.empty:
        return None
    groups = list(d.groupby("policy", sort=False))
    heights = [len(g) for _, g in groups]
    fig, axes = plt.subplots(len(groups), 1, sharex=True, squeeze=False,
                             figsize=(7, 0.9 + 0.3 * sum(heights) + 0.45 * len(groups)),
                             gridspec_kw={"height_ratios": heights})
    top = max(float((d["rel_error"].abs() * 100).max()), float((d["tolerance"] * 100).max())) * 1.25
    for ax, (policy, g) in zip(axes[:, 0], groups, strict=True):
        y = np.arange(len(g))
        err = g["rel_error"].abs().to_numpy(float) * 100
        ax.barh(y, err, color=["tab:green" if p else "tab:red" for p in g["passed"]])
        ax.scatter(g["tolerance"] * 100, y, marker="|", s=200, color="black", zorder=3)
        for yi, e in zip(y, err, strict=True):
            ax.annotate(f"{e:.2f} %", (e, yi), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
        ax.set_yticks(y, [f"{n} ({s})" for n, s in zip(g["name"], g["source"], strict=True)], fontsize=7)
        ax.set_ylim(-0.6, len(g) - 0.4)
        ax.set_xlim(0, top)
        ax.invert_yaxis()
        ax.set_title(str(policy), fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("|relative error| (%); black tick: tolerance")
    fig.suptitle("Estimate vs measurement, per policy", fontsize=10)
    data = d[["policy", "name", "source", "predicted", "measured", "rel_error", "tolerance", "passed"]]
    return save_figure(fig, path, data.reset_index(drop=True))


def latency_and_cost(df: pd.DataFrame, path: Path) -> Figure | None:
    """Mean cache load latency and cost per 1k requests (recompute vs SSD wear) per policy."""
    if not _has(df, "load_latency_mean_s", "cost_recompute_per_1k", "cost_wear_per_1k"):
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(MAX_WIDTH_IN, 4.2))
    x = np.arange(len(df))
    lat = df["load_latency_mean_s"].to_numpy(float)
    a1.bar(x, lat * 1e3)
    a1.set_xticks(x, df["policy"], rotation=30, ha="right")
    a1.set_ylabel("mean load latency (ms per request)")
    a1.set_title("Cache load latency")
    rec = df["cost_recompute_per_1k"].fillna(0).to_numpy(float)
    wear = df["cost_wear_per_1k"].fillna(0).to_numpy(float)
    a2.bar(x, rec, label="GPU recompute")
    a2.bar(x, wear, bottom=rec, label="SSD wear")
    a2.set_xticks(x, df["policy"], rotation=30, ha="right")
    a2.set_ylabel("$ per 1k requests")
    a2.set_title("Cost per 1k requests")
    a2.legend(fontsize=8)
    data = pd.DataFrame({"policy": df["policy"].to_numpy(), "load_latency_s": lat, "recompute_usd_per_1k": rec,
                         "wear_usd_per_1k": wear})
    return save_figure(fig, path, data)
