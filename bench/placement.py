"""Benchmark: device WAF and SSD lifetime with FDP placement handles, per policy, on the embedded FTL.

A GC-heavy plan: a hybrid model (linear states and full-attention KV), the SSD tier about the size
of the device, the extent (or log) layout with TRIM, played on the FTL with FEMU's line geometry
(a line, the reclaim unit, is one block on each of luns × luns LUNs: 64 MiB for 8 × 8; background
GC from 75% used lines). Each policy is simulated once (`kvwear run` with placement `none` into a
temporary run directory); its plan is laid out per layout, tagged with each placement
(`kvwear.harness.plan.placement`) and played on a fresh drive per over-provisioning level (`--lines`: the
same exposed capacity on more or fewer lines of raw NAND; with `--gc on-demand`, `--op`: the
block-level FTL with lines of the same size, whose GC runs only when 2 lines are left free, as a
drive's foreground GC does, against FEMU's background GC that takes any line with 1/8 invalid
pages while fewer than a quarter of the lines are free):
- `no FDP`: a drive with one handle (FEMU's single write pointer);
- `none`, `kind`: the same FDP drive with two reclaim unit handles (both open from the start, as
  TP4146's handles are: kvwear.emulator.ftl), every write on handle 0, or the kinds apart;
- `lifetime`: a drive with `lifetime_handles` (4) handles, the offline residency oracle;
- `kind+shGC`: `kind` on a drive whose GC mixes the handles' relocated pages (initially isolated).
`--gc presets`: one drive shaped like each drive preset instead (`PRESET_SHAPES`: enterprise-tlc
and qlc at the unit count of the default run's drive, tiny-blocks, femu's defaults).
`kind` separates whatever the kinds' lives (`--kind-min-separation`, default 0: the measurement
the fallback rule is decided on; give 0.5 to see the rule applied, marked *).

Printed per policy: host bytes written, the kinds' separation (TVD of their lifetime buckets) and
each kind's median death distance in device capacities (∞: most bytes never die in the plan),
WAF no FDP / none / kind / lifetime / kind+shGC, and the lifetime gain over LRU's `none` =
host-write gain × WAF gain (lifetime ∝ 1 / (host bytes × WAF) on one drive) for kind and lifetime;
then the FTL's throughput over all replays (host and NAND pages per second of kernel time). Every
number is measured in this run; nothing is tuned to the trace.

Run: .venv/bin/python bench/placement.py [--model M] [--layout extent --layout log] [--lines N ...]
     [--gc on-demand --op 0.07 ...] [--gc presets] [--separate-gc-line] [--kind-min-separation 0.5]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.sim import SimDevice
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.run import policy_label, run
from kvwear.harness.pipeline.sizing import device_capacity
from kvwear.harness.plan.placement import PlacementConfig, assign_placement, residency_bytes
from kvwear.harness.plan.planner import ReplayConfig, plan_block_ops
from kvwear.policies.schema import SSD_OPS
from kvwear.tables import read_table

# every policy that writes back (writes on DRAM eviction); type-aware writes only KV to the SSD
POLICIES = ["lru", "lru-k:k=2", "hotprefix", "marconi", "wa", "meritkv", "gandalf:budget=fixed,gamma=4",
            "belady", "type-aware"]
# column → (placement, handles of the drive, GC of the drive)
MODES = {"no FDP": ("none", 1, "per-handle"), "none": ("none", 2, "per-handle"), "kind": ("kind", 2, "per-handle"),
         "lifetime": ("lifetime", 4, "per-handle"), "kind+shGC": ("kind", 2, "shared")}


# The drive presets (branch `presets`: emulator/presets/*.py, their sources in
# docs/design/drive-presets.md) shaped to the bench's exposed size: a preset whose reclaim unit is
# GB-sized keeps the number of units it has on the default run's 268.8 GB drive (enterprise-tlc
# 26, qlc 20: what sets WAF is the unit's share of the drive), with its OP, reserve (1 unit) and
# GC frontier apart from the host's; tiny-blocks and femu are the presets themselves (64-page
# blocks at 7 % OP; FEMU's 64 MiB lines at OP 1/3, line GC from 75 % / 95 % used lines).
# name → (units, OP, GC reserve, GC frontier apart); units 0: the preset's own block size.
TLC_OP = 4 * 2**40 / 3_840_000_000_000 - 1.0
PRESET_SHAPES = {"enterprise-tlc": (26, TLC_OP, 1, True), "qlc": (20, TLC_OP, 1, True),
                 "tiny-blocks": (0, 0.07, 2, False)}


def preset_drives(devsz_mb: int) -> dict[str, dict[str, object]]:
    """The sim device options of each preset-shaped drive (PRESET_SHAPES; femu: FEMU's defaults)
    exposing `devsz_mb` MiB. The unit count is the drive's with one handle; more handles open
    more units (kvwear.emulator.ftl), which come out of the same raw NAND's free space."""
    pages = devsz_mb * 256
    out: dict[str, dict[str, object]] = {}
    for name, (units, op, reserve, apart) in PRESET_SHAPES.items():
        ppb = -(-int(pages * (1.0 + op)) // (units - reserve - (2 if apart else 1))) if units else 64
        out[f"{name} ({units or pages * (1 + op) // 64:.0f} units, OP {op:.1%})"] = {
            "op_ratio": op, "pages_per_block": ppb, "reserve_lines": reserve, "separate_gc_line": apart}
    out["femu (64 MiB lines, OP 33%, line GC)"] = {
        "geometry": "femu", "devsz_mb": devsz_mb, "nchs": 8, "luns_per_ch": 8, "pgs_per_blk": 256,
        "blks_per_pl": -(-devsz_mb * 4 // 3 // 64), "gc_thres_pcent": 75, "gc_thres_pcent_high": 95}
    return out


def median_death(plan: pa.Table, capacity_bytes: int) -> dict[str, float]:
    """Per object kind: the byte-weighted median of the plan's death distances (kvwear.harness.plan.placement's
    residency oracle) in device capacities; inf when at least half the bytes never die."""
    d = residency_bytes(plan, capacity_bytes) / capacity_bytes
    w = pc.equal(plan.column("op").cast(pa.string()), "write").to_numpy(zero_copy_only=False)
    kinds = plan.column("obj_kind").cast(pa.string()).to_numpy(zero_copy_only=False)
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False).astype(np.float64)
    out = {}
    for k in ("full", "linear"):
        m = w & (kinds == k)
        if m.any():
            o = np.argsort(d[m], kind="stable")
            cum = np.cumsum(ln[m][o])
            out[k] = float(d[m][o][np.searchsorted(cum, 0.5 * cum[-1])])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="nemotron-h-8b")
    ap.add_argument("--layout", action="append", choices=["extent", "log"], help="default: extent")
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--dram", default="2GB")
    ap.add_argument("--ssd", default="8GB", help="SSD tier; the device exposes devsz_mb (about 1.1×)")
    ap.add_argument("--devsz-mb", type=int, default=9600)
    ap.add_argument("--luns", type=int, default=8, help="nchs = luns_per_ch: a line is luns² blocks of 1 MiB")
    ap.add_argument("--gc", choices=["femu", "on-demand", "presets"], default="femu",
                    help="femu: FEMU's line GC (background from 75%% used lines); on-demand: GC only when "
                         "2 lines are left free (the block-level FTL with lines of the same size); presets: "
                         "one drive shaped like each preset (PRESET_SHAPES)")
    ap.add_argument("--lines", type=int, action="append", help="--gc femu: blks_per_pl, one drive each (default 180)")
    ap.add_argument("--op", type=float, action="append", help="--gc on-demand: over-provisioning, one drive each")
    ap.add_argument("--separate-gc-line", action="store_true", help="GC copies to lines of their own")
    ap.add_argument("--kind-min-separation", type=float, default=0.0)
    ap.add_argument("--policy", action="append", help="policy specs (default: every write-back policy)")
    args = ap.parse_args()
    layouts = args.layout or ["extent"]
    line_mib = args.luns ** 2
    femu = {"geometry": "femu", "devsz_mb": args.devsz_mb, "nchs": args.luns, "luns_per_ch": args.luns,
            "pgs_per_blk": 256, "gc_thres_pcent": 75, "gc_thres_pcent_high": 95,
            "separate_gc_line": args.separate_gc_line}
    policies = args.policy or POLICIES
    # one drive per over-provisioning level: FEMU lines, or the block-level FTL's op_ratio with lines
    # (blocks) of the same size
    drives: dict[str, dict[str, object]] = (
        {f"{n} lines (raw/exposed − 1 = {n * line_mib / args.devsz_mb - 1:.0%}), FEMU line GC":
         {**femu, "blks_per_pl": n} for n in args.lines or [180]} if args.gc == "femu" else
        preset_drives(args.devsz_mb) if args.gc == "presets" else
        {f"op {op:.0%} + 2 free lines, on-demand GC": {
            "op_ratio": op, "pages_per_block": line_mib * 256, "reserve_lines": 2,
            "separate_gc_line": args.separate_gc_line} for op in args.op or [0.07]})
    cfg = config_from_mapping({
        "name": "bench-placement", "model": args.model, "policies": policies,
        "workload": {"generator": "multi-round", "params": {"sessions": args.sessions, "turns": args.turns},
                     "seed": 1},
        "tiers": {"dram": args.dram, "ssd": args.ssd},
        "replay": {"layout": layouts[0], "placement": "none"},
        "device": {"kind": "sim", "options": femu} if args.gc != "on-demand" else
                  {"kind": "sim", "capacity_bytes": args.devsz_mb << 20}})
    cap = device_capacity(cfg)
    assert cap == args.devsz_mb << 20, (cap, args.devsz_mb)
    root = Path(tempfile.mkdtemp(prefix="kvwear-bench-placement-"))
    tables: dict[tuple[str, str], list[tuple[str, int, dict[str, float], str, dict[str, float]]]] = {}
    host_pages = nand_pages = 0
    kernel_s = 0.0
    try:
        run(cfg, root / "run", replay=False, report=False)
        for layout in layouts:
            rc = ReplayConfig(capacity_bytes=cap, layout=layout)  # type: ignore[arg-type]
            for spec in policies:
                label = policy_label(spec)
                ops = read_table(SSD_OPS, root / "run" / "policies" / label / "ssd_ops.parquet")
                laid = plan_block_ops(ops, rc)
                deaths = median_death(laid.table, cap)
                plans = {}
                sep = "—"
                for pmode in ("none", "kind", "lifetime"):
                    pcfg = PlacementConfig(pmode, kind_min_separation=args.kind_min_separation)  # type: ignore[arg-type]
                    plans[pmode], st = assign_placement(laid.table, pcfg, cap)
                    if pmode == "kind" and st.kind_separation is not None:
                        sep = f"{st.kind_separation:.2f}{'*' if st.kind_fallback else ''}"
                for i, (drive, geometry) in enumerate(drives.items()):
                    waf: dict[str, float] = {}
                    for col, (pmode, ruh, gc) in MODES.items():
                        work = root / "device" / label / str(i) / col.replace(" ", "-").replace("+", "-")
                        opts = {**geometry, "ruh": ruh, "gc_handles": gc, "placement_baseline": False}
                        res = SimDevice(DeviceSpec("sim", "", cap, opts), work).replay(plans[pmode], work)
                        shutil.rmtree(work, ignore_errors=True)
                        waf[col] = float(res.waf or 1.0)
                        host_pages += res.write_bytes // 4096
                        nand_pages += int(res.nand_write_bytes or 0) // 4096
                        kernel_s += res.wall_s
                    tables.setdefault((layout, drive), []).append(
                        (label, laid.aligned_write_bytes, waf, sep, deaths))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"placement benchmark: {args.model}, multi-round {args.sessions}×{args.turns}, DRAM {args.dram}, "
          f"SSD tier {args.ssd}, TRIM, FTL of {args.devsz_mb} MiB exposed in lines of {line_mib} MiB"
          f"{', GC copies in lines apart' if args.separate_gc_line else ''}; kind min separation "
          f"{args.kind_min_separation:g}")
    print("  lifetime gain over lru's `none` = host-write gain × WAF gain; death = median death distance "
          "(device capacities) of full KV / linear states")
    for (layout, drive), rows in tables.items():
        print(f"\n  {layout} layout, {drive}")
        print(f"  {'policy':<22} {'host GiB':>8} {'kind sep':>8} {'death full/lin':>14} {'no FDP':>7} "
              f"{'none':>6} {'kind':>6} {'lifetime':>8} {'kind+shGC':>9} {'host gain':>9} {'gain kind':>9} "
              f"{'gain life':>9}")
        base = next((r for r in rows if r[0] == "lru"), rows[0])
        base_cost = base[1] * base[2]["none"]
        for label, host, waf, sep, deaths in rows:
            dd = "/".join(f"{deaths[k]:.2f}" if k in deaths else "—" for k in ("full", "linear"))
            hg, gk, gl = (base[1] / host, base_cost / (host * waf["kind"]),
                          base_cost / (host * waf["lifetime"])) if host else (float("inf"),) * 3
            print(f"  {label:<22} {host / 2**30:>8.2f} {sep:>8} {dd:>14} {waf['no FDP']:>7.3f} {waf['none']:>6.3f} "
                  f"{waf['kind']:>6.3f} {waf['lifetime']:>8.3f} {waf['kind+shGC']:>9.3f} {hg:>8.2f}x {gk:>8.2f}x "
                  f"{gl:>8.2f}x")
        lowered = [r[0] for r in rows if r[2]["kind"] < r[2]["none"]]
        raised = [r[0] for r in rows if r[2]["kind"] > r[2]["none"]]
        print(f"  kind lowers WAF for: {', '.join(lowered) or 'none'}; raises it for: {', '.join(raised) or 'none'}")
    print(f"\n  FTL: {host_pages:,} host pages, {nand_pages:,} NAND pages in {kernel_s:.2f} s of replay = "
          f"{host_pages / max(kernel_s, 1e-9) / 1e6:.2f} M host pages/s, "
          f"{nand_pages / max(kernel_s, 1e-9) / 1e6:.2f} M NAND pages/s")


if __name__ == "__main__":
    main()
