"""Figures of a trace characterization (`kvwear.workloads.characterize`), drawn from the folder it wrote.

`plot_characterization(folder)` reads `summary.json` and the Parquet tables that
`kvwear.workloads.characterize_stream.characterize` wrote there and draws one PNG and one SVG per figure in
`FIGURES` beside them. Lifespans are read for reused blocks only (a filter pushed into the Parquet
reader), so drawing holds the reused blocks' rows, not one per distinct block. Must not compute
analyses (kvwear.workloads.characterize does) or launch anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow.parquet as pq

from kvwear.tables import atomic_write
from kvwear.units import format_bytes
from kvwear.workloads.characterize import CURVE_POINTS as _CURVE_POINTS
from kvwear.workloads.characterize import fit_exponential

FIGURES = ("reuse_time_cdf", "lifespan_cdf", "reuse_skew", "hit_ratio_by_category", "live_blocks",
           "hit_ratio_vs_capacity")

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Tables:
    """What the figures read of a characterization folder (names as in its summary.json)."""

    model: str
    reuse_fit_sample: str
    block_hit_ratio: float
    token_hit_ratio: float
    reuse_skew_block_share: dict[float, float]
    unique_blocks: int
    block_tokens: int
    chunk_bytes: int
    state_bytes: int
    capacity_blocks: int
    capacity_states: int
    capacity_bytes: int
    capacity_peak_s: float
    peak_live_blocks: int
    lru_blocks_for_ideal: int
    by_category: pd.DataFrame
    skew_curve: pd.DataFrame
    request_reuse: pd.DataFrame
    lifespans: pd.DataFrame      # reused blocks only (accesses > 1)
    live: pd.DataFrame
    lru_curve: pd.DataFrame


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def read_tables(folder: Path) -> Tables:
    """The summary and tables of a characterization folder."""
    s = json.loads((folder / "summary.json").read_text())

    def df(name: str, **kw: Any) -> pd.DataFrame:
        return pq.read_table(folder / f"{name}.parquet", **kw).to_pandas()

    return Tables(
        model=s["model"], reuse_fit_sample=s["reuse_fit_sample"],
        block_hit_ratio=_num(s["block_hit_ratio"]), token_hit_ratio=_num(s["token_hit_ratio"]),
        reuse_skew_block_share={float(k): _num(v) for k, v in s["reuse_skew_block_share"].items()},
        unique_blocks=s["unique_blocks"], block_tokens=s["block_tokens"], chunk_bytes=s["chunk_bytes"],
        state_bytes=s["state_bytes"], capacity_blocks=s["capacity_blocks"],
        capacity_states=s["capacity_states"], capacity_bytes=s["capacity_bytes"],
        capacity_peak_s=_num(s["capacity_peak_s"]), peak_live_blocks=s["peak_live_blocks"],
        lru_blocks_for_ideal=s["lru_blocks_for_ideal"],
        by_category=df("by_category"), skew_curve=df("reuse_skew"), request_reuse=df("request_reuse"),
        # one row per reused block (tens of millions at the corpus' size): categories stay
        # dictionary codes rather than a Python string per row
        lifespans=df("lifespans", columns=["category", "lifespan_s"], filters=[("accesses", ">", 1)],
                     read_dictionary=["category"]),
        live=df("live"), lru_curve=df("lru_curve"),
    )


def plot_characterization(folder: str | Path) -> list[Path]:
    """Draw every figure of the characterization in `folder` as PNG and SVG beside its tables
    (matplotlib's object API: no pyplot, no global backend); returns the paths written."""
    from matplotlib.figure import Figure

    out = Path(folder)
    res = read_tables(out)
    paths: list[Path] = []
    drawers = {
        "reuse_time_cdf": _plot_reuse_cdf,
        "lifespan_cdf": _plot_lifespan,
        "reuse_skew": _plot_skew,
        "hit_ratio_by_category": _plot_hit_ratio,
        "live_blocks": _plot_live,
        "hit_ratio_vs_capacity": _plot_lru,
    }
    for name in FIGURES:
        fig = Figure(figsize=(7.5, 4.8), layout="constrained")
        ax = fig.add_subplot()
        drawers[name](res, ax)
        ax.grid(True, alpha=0.3)
        for ext in ("png", "svg"):
            path = out / f"{name}.{ext}"
            with atomic_write(path) as tmp:
                fig.savefig(tmp, format=ext, dpi=120)
            paths.append(path)
    return paths


def _empty(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this trace", ha="center", va="center", transform=ax.transAxes)


def _ecdf(x: F64) -> tuple[F64, F64]:
    xs = np.sort(x)
    ys = np.arange(1, xs.size + 1) / xs.size
    if xs.size > 4 * _CURVE_POINTS:  # thin the steps; the shape is unchanged at plot resolution
        keep = np.unique(np.linspace(0, xs.size - 1, 4 * _CURVE_POINTS).astype(np.int64))
        xs, ys = xs[keep], ys[keep]
    return xs, ys


def _plot_reuse_cdf(res: Tables, ax: Any) -> None:
    rr = res.request_reuse
    rr = rr[rr["in_fit"]] if "in_fit" in rr else rr
    ax.set_title(f"Request reuse time per category ({res.reuse_fit_sample} reuses), exponential MLE fit",
                 fontsize=10)
    ax.set_xlabel("reuse time (s): request arrival − arrival of the request it reuses")
    ax.set_ylabel("CDF (share of reusing requests)")
    if rr.empty:
        _empty(ax, "reusing request")
        return
    x_max = float(np.quantile(rr["reuse_time_s"], 0.99)) or 1.0
    grid = np.linspace(0.0, x_max, 400)
    cats = res.by_category
    for i, row in enumerate(cats.itertuples()):
        x = rr.loc[rr["category"] == row.category, "reuse_time_s"].to_numpy()
        if x.size == 0:
            continue
        color = f"C{i % 10}"
        xs, ys = _ecdf(x)
        ax.step(xs, ys, where="post", color=color, label=f"{row.category} (n={x.size:,})")
        fit = fit_exponential(x)
        if math.isfinite(fit.rate_per_s):
            p = "n/a" if not math.isfinite(fit.ks_pvalue) else f"{fit.ks_pvalue:.2g}"
            ax.plot(grid, fit.cdf(grid), "--", color=color, alpha=0.8,
                    label=f"  fit λ={fit.rate_per_s:.3g}/s, KS D={fit.ks_statistic:.3f}, p={p}")
    ax.set_xlim(0, x_max)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower right")


def _plot_lifespan(res: Tables, ax: Any) -> None:
    reused = res.lifespans
    once = 1.0 - len(reused) / res.unique_blocks if res.unique_blocks else math.nan
    ax.set_title(f"KV block lifespan (first → last access) of reused blocks; {once:.0%} of blocks used once")
    ax.set_xlabel("lifespan (s, symlog scale)")
    ax.set_ylabel("CDF (share of reused blocks)")
    if reused.empty:
        _empty(ax, "reused block")
        return
    for i, cat in enumerate(sorted(reused["category"].unique())):
        x = reused.loc[reused["category"] == cat, "lifespan_s"].to_numpy()
        xs, ys = _ecdf(x)
        ax.step(xs, ys, where="post", color=f"C{i % 10}", label=f"{cat} (n={x.size:,})")
    if reused["category"].nunique() > 1:
        xs, ys = _ecdf(reused["lifespan_s"].to_numpy())
        ax.step(xs, ys, where="post", color="k", lw=2, alpha=0.6, label=f"all (n={len(reused):,})")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="lower right")


def _plot_skew(res: Tables, ax: Any) -> None:
    c = res.skew_curve
    ax.set_title("Reuse skew: share of reuses held by the most-reused blocks")
    ax.set_xlabel("share of distinct blocks (most reused first)")
    ax.set_ylabel("share of all reuses (hits)")
    if c.empty:
        _empty(ax, "reuse")
        return
    ax.plot(c["block_share"], c["reuse_share"], color="C0", label="blocks sorted by reuses")
    ax.plot([0, 1], [0, 1], ":", color="grey", label="uniform reuse")
    for lvl, share in res.reuse_skew_block_share.items():
        ax.plot([share], [lvl], "o", color="C3")
        ax.annotate(f"{share:.1%} of blocks → {lvl:.0%}", (share, lvl), textcoords="offset points",
                    xytext=(8, -12), fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right", fontsize=8)


def _plot_hit_ratio(res: Tables, ax: Any) -> None:
    cats = res.by_category
    names = ["all", *cats["category"].tolist()]
    block = [res.block_hit_ratio, *cats["block_hit_ratio"].tolist()]
    token = [res.token_hit_ratio, *cats["token_hit_ratio"].tolist()]
    x = np.arange(len(names))
    w = 0.38
    b1 = ax.bar(x - w / 2, np.nan_to_num(block), w, label="block-weighted", color="C0")
    b2 = ax.bar(x + w / 2, np.nan_to_num(token), w, label="token-weighted", color="C1")
    ax.bar_label(b1, fmt="%.2f", fontsize=7)
    ax.bar_label(b2, fmt="%.2f", fontsize=7)
    ax.set_xticks(x, names, rotation=20 if len(names) > 5 else 0)
    ax.set_ylim(0, 1.1)
    ax.set_title("Ideal (infinite-cache) hit ratio per category")
    ax.set_xlabel("request category")
    ax.set_ylabel("hit ratio (hits / accesses)")
    ax.legend(fontsize=8)


def _plot_live(res: Tables, ax: Any) -> None:
    live = res.live
    ax.set_title(f"Live KV (accessed before and again later) for {res.model}; "
                 f"capacity for the ideal hit ratio {format_bytes(res.capacity_bytes)}", fontsize=10)
    ax.set_xlabel("arrival time (s)")
    ax.set_ylabel("live KV (GiB)")
    if live.empty:
        _empty(ax, "reused KV")
        return
    gib = 2.0**30
    t = live["arrival_s"].to_numpy()
    total = live["live_bytes"].to_numpy() / gib
    states = live["live_states"].to_numpy() * res.state_bytes / gib
    if t.size > 4 * _CURVE_POINTS:  # thin to the max of each bucket: peaks stay visible
        cut = np.unique(np.linspace(0, t.size, 4 * _CURVE_POINTS, endpoint=False).astype(np.int64))
        t, total, states = t[cut], np.maximum.reduceat(total, cut), np.maximum.reduceat(states, cut)
    ax.plot(t, total, color="C0", lw=1, label="live chunks + states" if res.state_bytes else "live chunks")
    if res.state_bytes:
        ax.plot(t, states, color="C2", lw=1, label="of which reuse-point states")
    ax.axhline(res.capacity_bytes / gib, color="C3", ls="--",
               label=f"capacity needed: {format_bytes(res.capacity_bytes)} "
                     f"({res.capacity_blocks:,} chunks, {res.capacity_states:,} states)")
    ax.plot([res.capacity_peak_s], [res.capacity_bytes / gib], "o", color="C3")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower center")
    sec = ax.secondary_yaxis("right", functions=(lambda y: y * gib / max(res.chunk_bytes, 1),
                                                 lambda b: b * max(res.chunk_bytes, 1) / gib))
    sec.set_ylabel(f"{res.block_tokens}-token KV chunks" + (" (equivalent)" if res.state_bytes else ""))


def _plot_lru(res: Tables, ax: Any) -> None:
    c = res.lru_curve
    ax.set_title("Block hit ratio vs cache capacity (KV chunks only)")
    ax.set_xlabel(f"cache capacity (GiB of {res.block_tokens}-token chunks, log scale)")
    ax.set_ylabel("block hit ratio")
    if c.empty:
        _empty(ax, "reuse")
        return
    gib = 2.0**30
    ax.plot(c["capacity_bytes"] / gib, c["block_hit_ratio"], color="C0", label="LRU")
    ax.axhline(res.block_hit_ratio, color="k", ls=":", label=f"ideal (infinite cache) {res.block_hit_ratio:.1%}")
    opt = res.peak_live_blocks * res.chunk_bytes
    ax.axvline(opt / gib, color="C3", ls="--",
               label=f"optimal (Belady) capacity for the ideal: {format_bytes(opt)}")
    lru = res.lru_blocks_for_ideal * res.chunk_bytes
    ax.axvline(lru / gib, color="C0", ls="--", alpha=0.6, label=f"LRU capacity for the ideal: {format_bytes(lru)}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="upper left")
