"""Figures for run and sweep reports, drawn from result tables (matplotlib, Agg backend).

Each function takes a DataFrame of results and a path, draws one figure, writes a PNG and
returns the path, or returns None when the table lacks what the figure needs (the report then
says why the figure is absent). Must not read run directories itself or compute metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

GIB = 2**30


@dataclass(frozen=True)
class ReportFiles:
    """What a report builder wrote (figures that could not be drawn are None)."""

    html: Path
    markdown: Path
    csv: Path
    figures: dict[str, Path | None]


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Write `fig` as a PNG (creating the folder) and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _has(df: pd.DataFrame, *cols: str) -> bool:
    return all(c in df.columns and df[c].notna().any() for c in cols)


def policy_family(label: str) -> str:
    """'gandalf:gamma=8' → 'gandalf' (one line per family through its hyperparameter)."""
    return label.split(":", 1)[0]


def pareto_mask(miss: np.ndarray, lifetime: np.ndarray) -> np.ndarray:
    """Points not dominated in (lower miss ratio, longer lifetime)."""
    keep = np.ones(len(miss), dtype=bool)
    for i in range(len(miss)):
        better = (miss <= miss[i]) & (lifetime >= lifetime[i]) & ((miss < miss[i]) | (lifetime > lifetime[i]))
        keep[i] = not better.any()
    return keep


def lifetime_vs_miss(df: pd.DataFrame, path: Path, lifetime_col: str = "lifetime_days_measured") -> Path | None:
    """SSD lifetime against token miss ratio, one line per policy family, Pareto frontier marked."""
    if not _has(df, "miss_ratio_tokens", lifetime_col):
        lifetime_col = "lifetime_days_waf1"
        if not _has(df, "miss_ratio_tokens", lifetime_col):
            return None
    d = df.dropna(subset=["miss_ratio_tokens", lifetime_col]).copy()
    d["family"] = d["policy"].map(policy_family)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for fam, g in d.groupby("family", sort=True):
        g = g.sort_values("miss_ratio_tokens")
        ax.plot(g["miss_ratio_tokens"], g[lifetime_col] / 365.0, marker="o", label=fam)
    lt = d[lifetime_col].to_numpy(dtype=float)
    mr = d["miss_ratio_tokens"].to_numpy(dtype=float)
    front = pareto_mask(mr, lt)
    order = np.argsort(mr[front])
    ax.plot(mr[front][order], lt[front][order] / 365.0, ls="--", color="black", lw=1, label="Pareto frontier")
    ax.set_yscale("log")
    ax.set_xlabel("miss ratio (token-weighted)")
    ax.set_ylabel("projected SSD lifetime (years, log)")
    ax.set_title(f"SSD lifetime vs miss ratio ({lifetime_col.removeprefix('lifetime_days_')})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def ssd_writes_by_kind(df: pd.DataFrame, path: Path) -> Path | None:
    """Stacked SSD bytes written per policy by object kind, with the fraction ever hit."""
    if not _has(df, "ssd_write_bytes_full", "ssd_write_bytes_linear"):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.arange(len(df))
    full = df["ssd_write_bytes_full"].fillna(0).to_numpy() / GIB
    lin = df["ssd_write_bytes_linear"].fillna(0).to_numpy() / GIB
    ax.bar(x, full, label="full-attention KV")
    ax.bar(x, lin, bottom=full, label="linear / sliding state")
    if _has(df, "frac_ssd_writes_hit"):
        for xi, top, frac in zip(x, full + lin, df["frac_ssd_writes_hit"], strict=True):
            if pd.notna(frac):
                ax.annotate(f"{frac:.0%} hit", (xi, top), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, df["policy"], rotation=30, ha="right")
    ax.set_ylabel("SSD bytes written (GiB)")
    ax.set_title("SSD writes by object kind (label: share of written objects ever hit)")
    ax.legend()
    return save_figure(fig, path)


def waf_and_nand(df: pd.DataFrame, path: Path) -> Path | None:
    """Host vs NAND bytes per policy with the measured WAF annotated."""
    if not _has(df, "device_write_bytes", "nand_write_bytes"):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.arange(len(df))
    w = 0.38
    ax.bar(x - w / 2, df["device_write_bytes"].fillna(0) / GIB, w, label="host writes")
    ax.bar(x + w / 2, df["nand_write_bytes"].fillna(0) / GIB, w, label="NAND writes")
    if _has(df, "waf_measured"):
        for xi, nand, waf in zip(x, df["nand_write_bytes"].fillna(0) / GIB, df["waf_measured"], strict=True):
            if pd.notna(waf):
                ax.annotate(f"WAF {waf:.2f}", (xi + w / 2, nand), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, df["policy"], rotation=30, ha="right")
    ax.set_ylabel("GiB")
    ax.set_title("Host and NAND writes on the device")
    ax.legend()
    return save_figure(fig, path)


def waf_over_time(timelines: dict[str, pd.DataFrame], path: Path) -> Path | None:
    """Cumulative WAF over host bytes written, one line per policy."""
    usable = {k: v for k, v in timelines.items() if _has(v, "host_bytes", "waf_cumulative")}
    if not usable:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, t in sorted(usable.items()):
        ax.plot(t["host_bytes"] / GIB, t["waf_cumulative"], label=label)
    ax.set_xlabel("host bytes written (GiB)")
    ax.set_ylabel("cumulative WAF")
    ax.set_title("Write amplification over the replay")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def predicted_vs_measured(checks: pd.DataFrame, path: Path) -> Path | None:
    """Relative error of each cross-validation check against its tolerance."""
    if not _has(checks, "rel_error", "tolerance"):
        return None
    d = checks[np.isfinite(checks["rel_error"].astype(float))]      # an infinite error has no bar
    if d.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.32 * len(d) + 1)))
    y = np.arange(len(d))
    colors = ["tab:green" if p else "tab:red" for p in d["passed"]]
    ax.barh(y, d["rel_error"].abs() * 100, color=colors)
    ax.scatter(d["tolerance"] * 100, y, marker="|", s=200, color="black", label="tolerance")
    ax.set_yticks(y, [f"{p} · {q} · {s}" for p, q, s in zip(d["policy"], d["name"], d["source"], strict=True)],
                  fontsize=7)
    ax.set_xlabel("|relative error| (%)")
    ax.set_title("Predicted vs measured (green: within tolerance)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def latency_and_cost(df: pd.DataFrame, path: Path) -> Path | None:
    """Mean cache load latency and cost per 1k requests (recompute vs SSD wear) per policy."""
    if not _has(df, "load_latency_mean_s", "cost_recompute_per_1k", "cost_wear_per_1k"):
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    x = np.arange(len(df))
    a1.bar(x, df["load_latency_mean_s"] * 1e3)
    a1.set_xticks(x, df["policy"], rotation=30, ha="right")
    a1.set_ylabel("mean load latency (ms)")
    a1.set_title("Cache load latency per request")
    rec = df["cost_recompute_per_1k"].fillna(0)
    wear = df["cost_wear_per_1k"].fillna(0)
    a2.bar(x, rec, label="GPU recompute")
    a2.bar(x, wear, bottom=rec, label="SSD wear")
    a2.set_xticks(x, df["policy"], rotation=30, ha="right")
    a2.set_ylabel("$ per 1k requests")
    a2.set_title("Cost per 1k requests")
    a2.legend(fontsize=8)
    return save_figure(fig, path)
