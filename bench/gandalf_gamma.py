"""Benchmark: does Gandalf trade misses for bytes as γ rises? Its worst rise per case (issue #29).

For each trace (`--trace`, repeatable: a file or a directory, any format `kvwear trace` reads, a
requests Parquet from `kvwear trace generate` included; `--slice N` keeps its first N requests;
default: the six shared Weka traces as one workload, ~2 minutes on 2 cores)
× model (`--model`) × tier pair (`--dram` / `--ssd`, taken pairwise: fractions of the workload's
KV footprint or sizes, as in `bench/frontier.py`), Gandalf runs over γ = 0, 1, 2, 3, 4, 6, 8, 12,
16, 24, 32, 48, 64 with each of the `--variant` parameter suffixes (`;`-separated, e.g.
`;stranded=zero`; the empty one is the default rule). Per case and variant it prints the worst
rise — the most by which a smaller γ misses more than a larger one; the issue asks ≤ 0.01 — on
the 13-point grid and on its 8-point subset (γ = 0, 1, 2, 4, 8, 16, 32, 64, the frontier
page's), the worst rise of the SSD bytes as a fraction of γ = 0's, and the two lines (miss
ratio, SSD GiB). At the end: per variant, how many cases break the tolerance.

Run: .venv/bin/python bench/gandalf_gamma.py [--trace PATH]... [--model kimi-k3,qwen3.5-27b]
     [--dram 1%,3%,100GB] [--ssd 10%,30%,1TB] [--variant ';stranded=zero'] [--slice N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from frontier import GAMMAS as GAMMAS_8  # noqa: E402  # the frontier page's 8-point grid
from frontier import footprint_bytes, tier_bytes, tier_pairs, trace_table  # noqa: E402

from kvwear.errors import KvwearError  # noqa: E402
from kvwear.policies.sim import SimConfig, simulate  # noqa: E402
from kvwear.workloads.models import get_profile  # noqa: E402

#: the default workload: the six shared Claude-Code/Weka traces as one (as bench/frontier.py)
WEKA = REPO.parent / "shared" / "traces" / "claude-code-weka" / "traces"
GAMMAS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
MISS_TOL = 0.01


def worst_rise(values: list[float]) -> float:
    """The most by which an earlier value exceeds a later one (0 when non-decreasing)."""
    worst, low = 0.0, float("inf")
    for v in reversed(values):
        low = min(low, v)
        worst = max(worst, v - low)
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", action="append", default=[],
                    help=f"a trace file or directory (repeatable; default {WEKA.relative_to(REPO.parent)})")
    ap.add_argument("--model", default="kimi-k3,qwen3.5-27b", help="comma-separated model profiles")
    ap.add_argument("--dram", default="1%,3%,100GB", help="comma list: fractions of the footprint or sizes")
    ap.add_argument("--ssd", default="10%,30%,1TB", help="comma list, paired with --dram")
    ap.add_argument("--variant", default="", help="';'-separated Gandalf parameter suffixes (empty: the default)")
    ap.add_argument("--slice", type=int, default=0, help="keep each trace's first N requests (0: all)")
    args = ap.parse_args()
    try:
        tiers = tier_pairs(args.dram, args.ssd)
        models = [get_profile(m).name for m in args.model.split(",") if m]
    except (ValueError, KvwearError) as e:
        sys.exit(f"bench/gandalf_gamma.py: {e}")
    variants = [v.strip().strip(",") for v in args.variant.split(";")]
    broken: dict[str, list[int]] = {v: [0, 0, 0] for v in variants}  # 13-point, 8-point, cases
    for path in args.trace or [str(WEKA)]:
        table = trace_table(Path(path))
        if args.slice:
            table = table.slice(0, args.slice)
        for model in models:
            prof = get_profile(model)
            fp = footprint_bytes(table, prof)
            for d, s in tiers:
                cfg = SimConfig(dram_bytes=tier_bytes(d, fp), ssd_bytes=tier_bytes(s, fp),
                                kv_bytes_per_token=prof.kv_bytes_per_token, state_bytes=prof.state_bytes,
                                record_requests=False, model=model)
                for v in variants:
                    t0 = time.process_time()
                    runs = [simulate(table, cfg, f"gandalf:gamma={g}" + (f",{v}" if v else "")).summary
                            for g in GAMMAS]
                    miss = [r.token_miss_ratio for r in runs]
                    nbytes = [float(r.ssd_write_bytes) for r in runs]
                    rise = worst_rise(miss)
                    rise8 = worst_rise([miss[GAMMAS.index(g)] for g in GAMMAS_8])
                    brise = worst_rise([-b for b in nbytes]) / max(nbytes[0], 1.0)
                    counts = broken[v]
                    counts[0] += rise > MISS_TOL
                    counts[1] += rise8 > MISS_TOL
                    counts[2] += 1
                    print(f"{Path(path).name:24s} {model:12s} {d:>5s} / {s:<5s} {v or 'default':16s} "
                          f"rise {rise:.4f}{' ✗' if rise > MISS_TOL else '  '} (8-point {rise8:.4f}) "
                          f"bytes rise {brise:.3f}  miss {' '.join(f'{x:.3f}' for x in miss)} | "
                          f"GiB {' '.join(f'{b / 2**30:.1f}' for b in nbytes)}  "
                          f"({time.process_time() - t0:.0f} s)", flush=True)
    for v, (n13, n8, n) in broken.items():
        print(f"{v or 'default'}: {n13} of {n} cases rise by more than {MISS_TOL} (8-point grid: {n8})")


if __name__ == "__main__":
    main()
