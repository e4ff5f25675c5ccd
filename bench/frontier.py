"""Benchmark: every registered policy's (miss ratio, SSD bytes) frontier, and whether the oracle bounds it.

Workloads: `--trace PATH` (repeatable: a trace file or a directory of Weka files, any format
`kvwear trace` reads, a requests Parquet from `kvwear trace generate` included), each one
workload. Without `--trace`: the six shared Claude-Code/Weka traces as one workload (one hash
namespace per trace) and the Mooncake conversation trace (`--quick`: its first 3,000 requests);
`--generators` adds the four synthetic generators at their default parameters (`--quick`: the
api generator's first 10,000 of its 100,000 requests, `QUICK_ROWS`). Models (`--model`, comma
list): Kimi-K3 and Qwen3.5-27B. Tiers (`--dram`, `--ssd`: comma lists taken pairwise, each a
fraction of the workload's KV footprint — `1%` or `0.01` — or a size, `16GB`, `1TB`): by default
DRAM 1 % and SSD 10 % of the footprint (every distinct full-attention block once, plus one
state checkpoint per distinct request end), the same rule for every workload — no parameter is
set per trace. Prices are `SimConfig`'s defaults.

Each policy (`--policy`, comma list; default every registered one) runs through its sweep
range: the hyperparameter in `KNOBS` (or, for a policy registered later and not listed, its
first numeric parameter with a sweep range), over the points listed there or spread over the
range. The oracle (`belady`, `oracle_line`) runs two γ families
— one pass (f_x) and two (`passes=2`: each write priced by the SSD hits its copy served in the
first pass) — over one grid, each up to its first γ that writes nothing (past the grid's end in
×1.5 steps when it still writes there: the line runs to its no-write end on every workload) and
with its cliffs bisected (`REFINE_*`, one rule for every workload), plus its hit-maximizing variant
(`dram_copy=first` at γ = 0), a no-write point (`max_write_bytes=0`) and MIN per tier without
the writes its first pass found dead (`mode=min,passes=2`, the line's miss end);
`belady:mode=min` is plain MIN per tier, the miss-ratio floor, not part of the line.

γ on Gandalf's scale: the oracle and Gandalf price a write alike (γ·p_w·s plus the displaced
victims' value) but value it differently — the oracle by all the hits its copy will serve (f_x,
or the hits it served in the first pass), Gandalf by the next hit only (P ≤ 1). An oracle point
at γ whose SSD bytes are read f̄ times on average (f̄ = SSD bytes read ÷ SSD bytes written) thus
writes what a Gandalf sure of each next hit (P = 1) would write at γ / f̄: the `γ_G` column.

Prints, per workload × model × tier pair: each policy's points and its Pareto frontier; which baseline points
Gandalf dominates (some Gandalf point with no more misses and no more SSD bytes, better in one);
Gandalf's and the oracle's linear-state share of SSD bytes and where their full-attention and
linear hits were served from; per Gandalf point, the oracle's points nearest it in miss ratio and
in bytes with their shares, and which oracle points writing ≤ 10 % states dominate it (issue
#11's target for Gandalf at γ ≥ 4, set against the bound); and the oracle's dominance check —
an online point *beats* the oracle when no oracle point has both miss ratio ≤ 1.01 × its miss
ratio and SSD bytes ≤ 1.01 × its bytes —
against three oracle frontiers, each a superset of the last: the γ line alone; the γ line with
its own dead writes dropped (`kvwear.policies.belady.hindsight_filter`: writes never read before the
copy leaves the SSD); and that plus the online points with their dead writes dropped (the stated
relaxation: same misses, fewer bytes, so it dominates every point by construction — the first
two counts are the informative ones). For every point the γ line misses, the oracle's nearest
points are printed. Each run's "live" column is its SSD bytes after the filter.

Run: .venv/bin/python bench/frontier.py [--trace PATH]... [--model kimi-k3,qwen3.5-27b]
     [--dram 1%,3%,100GB] [--ssd 10%,30%,1TB] [--policy lru,gandalf,belady]
     [--quick] [--generators] [--only weka,agentic]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvwear.errors import KvwearError  # noqa: E402
from kvwear.policies.base import POLICIES, param_infos  # noqa: E402
from kvwear.policies.belady import live_writes  # noqa: E402
from kvwear.policies.metrics import SimSummary  # noqa: E402
from kvwear.policies.sim import SimConfig, simulate  # noqa: E402
from kvwear.tables import read_table  # noqa: E402
from kvwear.units import parse_size  # noqa: E402
from kvwear.workloads.loaders import load_requests  # noqa: E402
from kvwear.workloads.models import ModelProfile, get_profile  # noqa: E402
from kvwear.workloads.schema import REQUESTS, list_parts  # noqa: E402
from kvwear.workloads.synthetic import generate  # noqa: E402

GAMMAS = (0, 1, 2, 4, 8, 16, 32, 64)
# the hyperparameter each policy is swept through, and its points (None: spread over its range)
KNOBS: dict[str, tuple[str, tuple[float, ...] | None]] = {
    "gandalf": ("gamma", GAMMAS),
    # the oracle's line is the bound checked: a wider range and ×1.5 steps from 4 on, one grid
    # for every workload (`oracle_line` stops a family at its first point that writes nothing
    # and bisects its cliffs)
    "belady": ("gamma", (0, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
                         1536, 2048, 3072, 4096)),
    "lru-k": ("k", (1, 2, 3, 4, 5, 6, 8, 10)),
    "hotprefix": ("theta", (1, 2, 3, 4, 5, 6, 8, 10)),
    "marconi": ("alpha", (0.0, 0.5, 1.0, 1.5, 2.0)),
    # τ ≥ 0 by its meaning (a negative threshold would write objects that cost more than they
    # save; the parameter refuses it): 0 admits every object that pays
    "meritkv": ("tau_s", (0.0, 0.025, 0.05, 0.1, 0.2, 0.5)),
    "dynamo": ("min_frequency", (1, 2, 4, 8)),
}
GENERATORS = ("multi-round", "agentic", "api", "trace-a")
#: `--quick`: the generators cut to their first requests (api: 100,000 requests, a 43 TB KV
#: footprint, took over 30 min for Kimi-K3 alone on the shared 2-core machine)
QUICK_ROWS = {"api": 10_000}
TOL = 1.01
#: the oracle's γ families: one pass (f_x) and two (each write priced by the SSD hits its copy
#: served in the first pass, `kvwear.policies.belady` `passes`)
ORACLE_PASSES = (1, 2)
#: cliff refinement (a rule, the same for every workload): between neighbouring γ of a family
#: whose miss ratios differ by more than REFINE_MISS, bisect (geometric mean) while the ratio
#: of the two γ exceeds REFINE_RATIO, at most REFINE_MAX extra points per family
REFINE_MISS, REFINE_RATIO, REFINE_MAX = 0.02, 1.1, 8
#: past the grid's last γ a family still writing goes on in ×`BEYOND_STEP` steps to its no-write
#: end (at most `BEYOND_MAX` more points: a γ the line cannot end at is reported, not hidden)
BEYOND_STEP, BEYOND_MAX = 1.5, 64


def tier_bytes(text: str, footprint: int) -> int:
    """A tier size: a fraction of the footprint (`1%`, `0.01`) or a size (`16GB`, `1TiB`)."""
    t = text.strip()
    try:
        if t.endswith("%"):
            frac = float(t[:-1]) / 100
        else:
            frac = float(t)
            if frac >= 1:
                return parse_size(t)
    except ValueError:
        return parse_size(t)
    if not 0 <= frac <= 1:
        raise ValueError(f"not a fraction of the footprint: {text!r}")
    return int(footprint * frac)


def tier_pairs(dram: str, ssd: str) -> list[tuple[str, str]]:
    """`--dram` and `--ssd` comma lists taken pairwise; each must parse (checked on a 1-byte
    footprint, so a typo fails before the first run)."""
    d = [x for x in dram.split(",") if x.strip()]
    s = [x for x in ssd.split(",") if x.strip()]
    if len(d) != len(s) or not d:
        raise ValueError(f"--dram and --ssd need as many entries ({len(d)} vs {len(s)})")
    for x in d + s:
        tier_bytes(x, 1)
    return list(zip(d, s, strict=True))


def footprint_bytes(table: pa.Table, prof: ModelProfile) -> int:
    """Every distinct full-attention block once plus one state per distinct request end."""
    offs, vals = list_parts(table.column("hash_ids"))
    lengths = np.diff(offs)
    ns = np.repeat(np.asarray(table.column("hash_ns").to_numpy(), dtype=np.int64), lengths)
    btok = np.repeat(np.asarray(table.column("block_tokens").to_numpy(), dtype=np.int64), lengths)
    keys = np.stack([ns, np.asarray(vals, dtype=np.int64)])
    _, first = np.unique(keys, axis=1, return_index=True)
    kv = int(btok[first].sum()) * prof.kv_bytes_per_token
    ends = offs[1:][lengths > 0] - 1
    n_states = len(np.unique(keys[:, ends], axis=1)[0]) if len(ends) else 0
    return kv + n_states * prof.state_bytes


def sweep_specs(name: str) -> list[str]:
    """The policy's specs through its sweep range (one spec when it has no numeric knob); the
    oracle's: its γ families (`ORACLE_PASSES`, before `oracle_line` trims and refines them),
    then its variants."""
    infos = {i.name: i for i in param_infos(POLICIES.get(name).Params)}
    knob, points = KNOBS.get(name, (None, None))
    if knob is None or knob not in infos:
        knob, points = None, None
        for i in infos.values():
            sw = i.sweep
            if i.type_name in ("int", "float") and sw is not None and len(sw) == 2:
                knob = i.name
                break
    if knob is None:
        return [name]
    if points is None:
        info = infos[knob]
        lo, hi = info.sweep  # type: ignore[misc]
        if info.type_name == "int":
            points = tuple(sorted({round(x) for x in np.linspace(lo, hi, 6)}))
        else:
            points = tuple(float(x) for x in np.linspace(lo, hi, 5))
    if name != "belady":
        return [f"{name}:{knob}={p:g}" for p in points]
    return [gamma_spec(g, n) for n in ORACLE_PASSES for g in points] + list(ORACLE_VARIANTS)


def gamma_spec(gamma: float, passes: int) -> str:
    return f"belady:gamma={gamma:g}" + (f",passes={passes}" if passes > 1 else "")


#: the oracle's points beside its γ families: the hit-maximizing variant, a no-write point, MIN
#: per tier with the writes its first pass found dead refused (the line's miss end), and plain
#: MIN per tier (the miss floor, not part of the line)
ORACLE_VARIANTS = ("belady:gamma=0,dram_copy=first", "belady:max_write_bytes=0", "belady:mode=min,passes=2",
                   "belady:mode=min")


def pareto(points: Iterable[tuple[float, int, str]]) -> list[tuple[float, int, str]]:
    """The (miss, bytes) points no other point dominates, by miss ratio."""
    pts = sorted(points, key=lambda p: (p[0], p[1]))
    out: list[tuple[float, int, str]] = []
    for p in pts:
        if not out or p[1] < out[-1][1]:
            out.append(p)
    return out


def dominates(a: tuple[float, int], b: tuple[float, int], tol: float = 1.0) -> bool:
    """a has no more misses and no more bytes than b (each within the factor `tol`)."""
    return a[0] <= b[0] * tol + 1e-12 and a[1] <= b[1] * tol


def trace_table(path: Path) -> pa.Table:
    """A requests table from `path`: a requests Parquet (`kvwear trace generate`, `kvwear trace
    convert`; its kind and version checked) or a trace in any format `kvwear trace` reads."""
    if path.suffix == ".parquet":
        return read_table(REQUESTS, path)
    return load_requests(path).table


def workloads(quick: bool, gens: bool, only: list[str],
              traces: Sequence[str] = ()) -> Iterable[tuple[str, pa.Table]]:
    """(label, table) per workload, built only when its turn comes: each of `traces` (a file or
    a directory), else the shared traces and (`gens`) the generators; `only`: label prefixes."""
    def wanted(label: str) -> bool:
        return not only or any(label.startswith(o) for o in only)

    if traces:
        for path in traces:
            p = Path(path)
            label = p.name + ("/" if p.is_dir() else "")
            if wanted(label):
                yield label, trace_table(p)
        return

    shared = REPO.parent / "shared" / "traces"
    if wanted("weka"):
        yield "weka (6 traces)", load_requests(shared / "claude-code-weka" / "traces").table
    if wanted("mooncake"):
        moon = load_requests(shared / "mooncake" / "conversation_trace.jsonl").table
        yield "mooncake" + (" (first 3,000)" if quick else ""), moon.slice(0, 3000) if quick else moon
    if gens:
        for g in GENERATORS:
            if wanted(g):
                t = generate(g)
                if quick and g in QUICK_ROWS:
                    yield f"{g} (first {QUICK_ROWS[g]:,})", t.slice(0, QUICK_ROWS[g])
                else:
                    yield g, t


def gib(b: float) -> str:
    return f"{b / 2**30:,.1f}"


@dataclass(frozen=True)
class Point:
    """One run: its spec, summary, and SSD bytes once its dead writes are dropped."""

    spec: str
    s: SimSummary
    live_write_bytes: int

    @property
    def xy(self) -> tuple[float, int]:
        return (self.s.token_miss_ratio, self.s.ssd_write_bytes)

    @property
    def filtered_xy(self) -> tuple[float, int]:
        return (self.s.token_miss_ratio, self.live_write_bytes)

    @property
    def gamma_g(self) -> float | None:
        """An oracle point's γ on Gandalf's scale, γ / f̄ (f̄ = SSD bytes read per byte written;
        module docstring); None for other points and for oracle points that write or read nothing."""
        if not self.spec.startswith("belady:gamma="):
            return None
        gamma = float(self.spec.split(":", 1)[1].split(",")[0].split("=")[1])
        w, r = self.s.ssd_write_bytes, self.s.ssd_read_bytes
        return gamma * w / r if w and r else None


def run_point(table: pa.Table, cfg: SimConfig, spec: str) -> Point:
    r = simulate(table, cfg, spec)
    live = live_writes(r.ssd_ops)
    return Point(spec, r.summary, int(np.asarray(r.ssd_ops.column("bytes").to_numpy())[live].sum()))


def oracle_line(table: pa.Table, cfg: SimConfig) -> list[Point]:
    """The oracle's points: each γ family of `sweep_specs` in increasing γ, up to its first
    point that writes nothing (every larger γ writes nothing too: with no write the run is the
    same at any γ, and a larger fee refuses every write again), with its cliffs bisected
    (`REFINE_*`); then the variants."""
    grid = KNOBS["belady"][1]
    assert grid is not None
    out: list[Point] = []
    for n in ORACLE_PASSES:
        fam: dict[float, Point] = {}
        for g in grid:
            fam[g] = run_point(table, cfg, gamma_spec(g, n))
            if fam[g].s.ssd_write_bytes == 0:
                break
        g = grid[-1]
        for _ in range(BEYOND_MAX):  # on to the no-write end
            if fam[max(fam)].s.ssd_write_bytes == 0:
                break
            g = float(f"{g * BEYOND_STEP:.4g}")
            fam[g] = run_point(table, cfg, gamma_spec(g, n))
        else:
            print(f"  (the oracle's {n}-pass family still writes at γ = {max(fam):g})")
        top = max(p.s.ssd_write_bytes for p in fam.values()) or 1
        for _ in range(REFINE_MAX):
            gs = sorted(fam)
            # the widest cliff first: the area an online point could sit in below the line
            gaps = [(dm * abs(fam[a].s.ssd_write_bytes - fam[b].s.ssd_write_bytes) / top, a, b)
                    for a, b in itertools.pairwise(gs)
                    if (dm := abs(fam[a].s.token_miss_ratio - fam[b].s.token_miss_ratio)) > REFINE_MISS
                    and (b > REFINE_RATIO * a if a else b > REFINE_RATIO - 1)]
            if not gaps:
                break
            _, a, b = max(gaps)
            g = float(f"{(a * b) ** 0.5 if a else b / 2:.4g}")
            fam[g] = run_point(table, cfg, gamma_spec(g, n))
        out += [fam[g] for g in sorted(fam)]
    return out + [run_point(table, cfg, s) for s in ORACLE_VARIANTS]


def oracle_check(online: list[Point], oracle: list[Point]) -> dict[str, list[Point]]:
    """The online points no point of each oracle frontier dominates within `TOL`: the γ line;
    plus its hindsight-filtered points; plus the filtered online points (the relaxation)."""
    line = [o.xy for o in oracle]
    fronts = {"γ line": line, "γ line + filtered γ line": line + [o.filtered_xy for o in oracle]}
    fronts["+ filtered online points"] = fronts["γ line + filtered γ line"] + [p.filtered_xy for p in online]
    return {name: [p for p in online if not any(dominates(o, p.xy, TOL) for o in pts)]
            for name, pts in fronts.items()}


def nearest(p: Point, oracle: list[Point]) -> str:
    """The oracle's points just below and just above p's SSD bytes (filtered bytes in brackets)."""
    by = sorted(oracle, key=lambda o: o.s.ssd_write_bytes)
    lo = [o for o in by if o.s.ssd_write_bytes <= p.s.ssd_write_bytes][-1:]
    hi = [o for o in by if o.s.ssd_write_bytes > p.s.ssd_write_bytes][:1]
    return "; ".join(f"{o.spec} ({o.s.token_miss_ratio:.3f}, {gib(o.s.ssd_write_bytes)} "
                     f"[{gib(o.live_write_bytes)}] GiB)" for o in lo + hi)


def hit_sources(p: Point) -> str:
    """One run's linear share of SSD bytes and where its hits were served from."""
    s = p.s
    return (f"  {p.spec:40s} linear {s.linear_share_of_ssd_write_bytes:5.2f}  full {s.dram_hit_tokens:>12,} / "
            f"{s.ssd_hit_tokens:>12,}  states {s.state_hits_dram:>6,} / {s.state_hits_ssd:>6,}")


#: the linear-state share of SSD bytes issue #11 asks of Gandalf at γ ≥ 4
LINEAR_TARGET = 0.10


def print_linear_share_vs_oracle(gandalf: list[Point], oracle: list[Point]) -> None:
    """Per Gandalf point: the oracle's points nearest it in miss ratio and in SSD bytes, with
    their linear shares; the oracle points that dominate it (within `TOL`), with the lowest share
    among them; and whether one with a share ≤ `LINEAR_TARGET` does — whether writing that few
    states is compatible with the bound at that point."""
    def show(o: Point) -> str:
        return (f"{o.spec} {o.s.token_miss_ratio:.3f} at {gib(o.s.ssd_write_bytes)} GiB, "
                f"linear {o.s.linear_share_of_ssd_write_bytes:.2f}")

    print("\nLinear share, Gandalf against the oracle's line (the oracle points nearest in miss ratio and "
          "in bytes; those dominating it within 1 %)")
    low_all = [o for o in oracle if o.s.linear_share_of_ssd_write_bytes <= LINEAR_TARGET and o.s.ssd_write_bytes]
    best = min(low_all, key=lambda o: o.xy, default=None)
    print(f"  the oracle's lowest miss ratio among its writing points with linear ≤ {LINEAR_TARGET:.2f}: "
          + (show(best) if best else "none"))
    for g in gandalf:
        m, b = g.xy
        by_miss = min(oracle, key=lambda o: (abs(o.s.token_miss_ratio - m), o.s.ssd_write_bytes))
        by_bytes = min(oracle, key=lambda o: (abs(o.s.ssd_write_bytes - b), o.s.token_miss_ratio))
        dom = sorted((o for o in oracle if dominates(o.xy, g.xy, TOL)),
                     key=lambda o: o.s.linear_share_of_ssd_write_bytes)
        low = [o for o in dom if o.s.linear_share_of_ssd_write_bytes <= LINEAR_TARGET]
        shares = [o.s.linear_share_of_ssd_write_bytes for o in dom]
        print(f"  {g.spec} {m:.3f} at {gib(b)} GiB, linear {g.s.linear_share_of_ssd_write_bytes:.2f}\n"
              f"    nearest in miss {show(by_miss)}; in bytes {show(by_bytes)}\n"
              f"    dominated by {len(dom)} oracle points"
              + (f", linear {shares[0]:.2f}–{shares[-1]:.2f}; lowest {show(dom[0])}" if dom else "")
              + f"; with linear ≤ {LINEAR_TARGET:.2f}: {len(low)}" + (f" ({show(low[0])})" if low else ""))


def run_case(label: str, table: pa.Table, model: str, policies: list[str],
             tiers: tuple[str, str] = ("1%", "10%")) -> dict[str, int]:
    prof = get_profile(model)
    fp = footprint_bytes(table, prof)
    cfg = SimConfig(dram_bytes=tier_bytes(tiers[0], fp), ssd_bytes=tier_bytes(tiers[1], fp),
                    kv_bytes_per_token=prof.kv_bytes_per_token, state_bytes=prof.state_bytes,
                    record_requests=False, model=model)
    print(f"\n## {label}, {model}: {table.num_rows:,} requests, KV footprint {gib(fp)} GiB → "
          f"DRAM {gib(cfg.dram_bytes)} GiB ({tiers[0]}), SSD {gib(cfg.ssd_bytes)} GiB ({tiers[1]})")
    t0 = time.perf_counter()
    pts: dict[str, list[Point]] = {name: oracle_line(table, cfg) if name == "belady" else
                                   [run_point(table, cfg, spec) for spec in sweep_specs(name)]
                                   for name in policies}
    res = {name: [(p.spec, p.s) for p in v] for name, v in pts.items()}
    print(f"({sum(len(v) for v in res.values())} runs in {time.perf_counter() - t0:.0f} s)")
    print(f"{'policy point':34s} {'miss':>6s} {'SSD GiB':>9s} {'live':>9s} {'linear':>6s} {'γ_G':>8s}  frontier")
    for runs in pts.values():
        front = {p[2] for p in pareto((p.s.token_miss_ratio, p.s.ssd_write_bytes, p.spec) for p in runs)}
        for p in runs:
            s = p.s
            gg = p.gamma_g
            print(f"{p.spec:34s} {s.token_miss_ratio:6.3f} {gib(s.ssd_write_bytes):>9s} "
                  f"{gib(p.live_write_bytes):>9s} {s.linear_share_of_ssd_write_bytes:6.2f} "
                  f"{'' if gg is None else f'{gg:.4g}':>8s}  {'*' if p.spec in front else ''}")
    online = [(spec, s) for name, runs in res.items() if name != "belady" for spec, s in runs]
    for name in ("gandalf", "belady"):
        if name in pts:
            print(f"\n{name}: linear share of SSD bytes; full-attention hit tokens from DRAM / SSD; "
                  "state hits from DRAM / SSD")
            for p in pts[name]:
                print(hit_sources(p))
    if "gandalf" in pts and "belady" in pts:
        print_linear_share_vs_oracle(pts["gandalf"], [p for p in pts["belady"] if p.spec != "belady:mode=min"])
    if "gandalf" in res:
        g = res["gandalf"]
        gpts = [(s.token_miss_ratio, s.ssd_write_bytes, spec) for spec, s in g]
        beaten = []
        for spec, s in online:
            if spec.startswith("gandalf"):
                continue
            b = (s.token_miss_ratio, s.ssd_write_bytes)
            by = [gs for gm, gb, gs in gpts if dominates((gm, gb), b) and (gm, gb) != b]
            if by:
                beaten.append(f"{spec} (by {by[0]})")
        print(f"Gandalf dominates {len(beaten)} of {sum(not sp.startswith('gandalf') for sp, _ in online)} "
              f"baseline points: {', '.join(beaten) or '-'}")
    counts = {"points": len(online)}
    if "belady" in pts:
        oracle = [p for p in pts["belady"] if p.spec != "belady:mode=min"]
        floor = next(p.s for p in pts["belady"] if p.spec == "belady:mode=min")
        on = [p for name, v in pts.items() if name != "belady" for p in v]
        for i, (which, bad) in enumerate(oracle_check(on, oracle).items()):
            counts[which] = len(bad)
            beating = ", ".join(f"{p.spec} ({p.s.token_miss_ratio:.3f}, {gib(p.s.ssd_write_bytes)} GiB)"
                                for p in bad)
            print(f"Oracle check, {which}: {len(on) - len(bad)} of {len(on)} online points dominated "
                  f"(within 1 %); beating it: {beating or 'none'}")
            if i == 0:
                for p in bad:
                    print(f"  {p.spec}: oracle nearest {nearest(p, oracle)}")
        below_floor = [spec for spec, s in online if s.token_miss_ratio < floor.token_miss_ratio / TOL]
        print(f"MIN per tier (miss floor) {floor.token_miss_ratio:.3f} at {gib(floor.ssd_write_bytes)} GiB; "
              f"online points below it: {', '.join(below_floor) or 'none'}")
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", action="append", default=[],
                    help="a trace file or a directory of Weka files, any supported format (repeatable); "
                         "default: the shared Weka traces and Mooncake")
    ap.add_argument("--quick", action="store_true",
                    help="Mooncake's first 3,000 requests only, the api generator's first 10,000")
    ap.add_argument("--generators", action="store_true", help="also the four synthetic generators")
    ap.add_argument("--model", "--models", dest="models", default="kimi-k3,qwen3.5-27b",
                    help="comma-separated model profiles")
    ap.add_argument("--dram", default="1%",
                    help="comma list: fractions of the KV footprint (1%%, 0.01) or sizes (16GB)")
    ap.add_argument("--ssd", default="10%", help="comma list, paired with --dram")
    ap.add_argument("--policy", "--policies", dest="policies", default="",
                    help="comma-separated policy names (default: every registered one)")
    ap.add_argument("--only", default="", help="comma-separated workload label prefixes (weka, mooncake, agentic, …)")
    args = ap.parse_args()
    policies = [p for p in args.policies.split(",") if p] or POLICIES.names()
    unknown = sorted(set(policies) - set(POLICIES.names()))
    if unknown:
        sys.exit(f"unknown policies {', '.join(unknown)}; valid: {', '.join(POLICIES.names())}")
    try:
        tiers = tier_pairs(args.dram, args.ssd)
        models = [get_profile(m).name for m in args.models.split(",") if m]
    except (ValueError, KvwearError) as e:
        sys.exit(f"bench/frontier.py: {e}")
    total: dict[str, int] = {}
    for label, table in workloads(args.quick, args.generators, [o for o in args.only.split(",") if o],
                                  args.trace):
        for model in models:
            for pair in tiers:
                for k, v in run_case(label, table, model, policies, pair).items():
                    total[k] = total.get(k, 0) + v
    for k, v in total.items():
        if k != "points":
            print(f"\nOracle check over every case, {k}: {v} of {total['points']} online points beat it")


if __name__ == "__main__":
    main()
