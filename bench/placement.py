"""Benchmark: device WAF and SSD lifetime with FDP placement handles, per policy, on the embedded FTL.

A GC-heavy plan: a hybrid model (linear states and full-attention KV), the SSD tier about the size
of the device, the extent (or log) layout with TRIM, played on the FTL with FEMU's line geometry
(a line, the reclaim unit, is one block on each of nchs × luns_per_ch LUNs: 64 MiB by default;
background GC from 75% used lines). Each policy is simulated once (`kvwear run` with
placement `none` into a temporary run directory); its plan is then tagged with each placement
(`harness.placement`: none, kind, lifetime) and played on a fresh drive with as many reclaim
unit handles as the placement uses (`none` on the same drive as `kind`).

`kind, shared GC` is `kind` on a drive whose GC does not keep handles apart (`gc_handles =
shared`: relocated pages of every handle go to handle 0's frontier, FDP's initially isolated
handles).

Printed per policy: host bytes written, `kind`'s separation of the two kinds' lifetimes (TVD of
their lifetime buckets; below 0.5 `kind` keeps one handle, marked *), WAF none / kind / lifetime /
kind with shared GC, and the
lifetime gain over LRU
without placement = host-write gain × WAF gain (lifetime ∝ 1 / (host bytes × WAF) on one drive),
for kind and lifetime; then the FTL's throughput over all replays (host and NAND pages per
second of kernel time). Every number is measured in this run; nothing is tuned to the trace.

Run: .venv/bin/python bench/placement.py [--model M] [--layout extent|log] [--sessions N] [--turns N]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from harness.config import config_from_mapping
from harness.devices.base import DeviceSpec
from harness.devices.sim import SimDevice
from harness.placement import PlacementConfig, assign_placement
from harness.plan import ReplayConfig, plan_block_ops
from harness.run import device_capacity, policy_label, run
from kvwear.tables import read_table
from policies.schema import SSD_OPS

POLICIES = ["lru", "lru-k:k=2", "type-aware", "gandalf:budget=fixed,gamma=4", "belady"]
MODES = ("none", "kind", "lifetime", "kind, shared GC")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="nemotron-h-8b")
    ap.add_argument("--layout", default="extent", choices=["extent", "log"])
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--dram", default="2GB")
    ap.add_argument("--ssd", default="8GB", help="SSD tier; the device exposes devsz_mb (about 1.1×)")
    ap.add_argument("--devsz-mb", type=int, default=9600)
    ap.add_argument("--lines", type=int, default=180, help="FEMU blks_per_pl: lines of 64 MiB")
    ap.add_argument("--policy", action="append", help="policy specs (default: five)")
    args = ap.parse_args()
    geometry = {"geometry": "femu", "devsz_mb": args.devsz_mb, "nchs": 8, "luns_per_ch": 8, "pgs_per_blk": 256,
                "blks_per_pl": args.lines, "gc_thres_pcent": 75, "gc_thres_pcent_high": 95}
    policies = args.policy or POLICIES
    cfg = config_from_mapping({
        "name": "bench-placement", "model": args.model, "policies": policies,
        "workload": {"generator": "multi-round", "params": {"sessions": args.sessions, "turns": args.turns},
                     "seed": 1},
        "tiers": {"dram": args.dram, "ssd": args.ssd},
        "replay": {"layout": args.layout, "placement": "none"},
        "device": {"kind": "sim", "options": geometry}})
    cap = device_capacity(cfg)
    root = Path(tempfile.mkdtemp(prefix="kvwear-bench-placement-"))
    rows = []
    host_pages = nand_pages = 0
    kernel_s = 0.0
    try:
        run(cfg, root / "run", replay=False, report=False)
        rc = ReplayConfig(capacity_bytes=cap, layout=args.layout)  # type: ignore[arg-type]
        for spec in policies:
            label = policy_label(spec)
            ops = read_table(SSD_OPS, root / "run" / "policies" / label / "ssd_ops.parquet")
            laid = plan_block_ops(ops, rc)
            waf: dict[str, float] = {}
            sep = ""
            for mode in MODES:
                pmode, _, gc = mode.partition(", ")
                pcfg = PlacementConfig(pmode)  # type: ignore[arg-type]
                plan, st = assign_placement(laid.table, pcfg, cap)
                if pmode == "kind" and not gc:
                    sep = "—" if st.kind_separation is None else \
                        f"{st.kind_separation:.2f}{'*' if st.kind_fallback else ''}"
                ruh = max(pcfg.handles, PlacementConfig("kind").handles)
                work = root / "device" / label / mode.replace(", ", "-").replace(" ", "-")
                opts = {**geometry, "ruh": ruh, "placement_baseline": False,
                        "gc_handles": "shared" if gc else "per-handle"}
                dev = SimDevice(DeviceSpec("sim", "", cap, opts), work)
                res = dev.replay(plan, work)
                waf[mode] = float(res.waf or 1.0)
                host_pages += res.write_bytes // 4096
                nand_pages += int(res.nand_write_bytes or 0) // 4096
                kernel_s += res.wall_s
            rows.append((label, laid.aligned_write_bytes, waf, sep))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    base = next((r for r in rows if r[0] == "lru"), rows[0])
    base_cost = base[1] * base[2]["none"]
    print(f"placement benchmark: {args.model}, multi-round {args.sessions}×{args.turns}, DRAM {args.dram}, "
          f"SSD tier {args.ssd}, {args.layout} layout + TRIM, FTL FEMU geometry devsz {args.devsz_mb} MiB, "
          f"{args.lines} lines of 64 MiB, GC 75/95%")
    print(f"  lifetime gain over {base[0]} without placement = host-write gain × WAF gain")
    print(f"  {'policy':<32} {'host GiB':>9} {'kind sep':>9} {'WAF none':>9} {'kind':>7} {'lifetime':>9} "
          f"{'kind+shGC':>10} {'host gain':>10} {'gain kind':>10} {'gain life':>10}")
    for label, host, waf, sep in rows:
        hg = base[1] / host if host else float("inf")
        gk = base_cost / (host * waf["kind"]) if host else float("inf")
        gl = base_cost / (host * waf["lifetime"]) if host else float("inf")
        print(f"  {label:<32} {host / 2**30:>9.2f} {sep:>9} {waf['none']:>9.3f} {waf['kind']:>7.3f} "
              f"{waf['lifetime']:>9.3f} {waf['kind, shared GC']:>10.3f} {hg:>9.2f}x {gk:>9.2f}x {gl:>9.2f}x")
    lowered = [label for label, _h, w, _s in rows if w["kind"] < w["none"]]
    same = [label for label, _h, w, _s in rows if w["kind"] == w["none"]]
    print(f"  kind lowers WAF for: {', '.join(lowered) or 'none'}; unchanged: {', '.join(same) or 'none'}")
    print(f"  FTL: {host_pages:,} host pages, {nand_pages:,} NAND pages in {kernel_s:.2f} s of replay = "
          f"{host_pages / max(kernel_s, 1e-9) / 1e6:.2f} M host pages/s, "
          f"{nand_pages / max(kernel_s, 1e-9) / 1e6:.2f} M NAND pages/s")


if __name__ == "__main__":
    main()
