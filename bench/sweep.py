"""Sweep throughput: points per minute with 1 and 2 local workers on the same grid, in one run.

The ratio shows how the local process pool scales on this machine. Each point is a real
`kvwear run` point (synthetic multi-round workload, Kimi-K3, sim device replay).

    .venv/bin/python bench/sweep.py [--points-per-policy 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from kvwear.harness.pipeline.sweep import plan_sweep, run_sweep


def grid(k_values: int) -> dict:
    return {
        "base": {"name": "bench", "model": "kimi-k3",
                 "workload": {"generator": "multi-round", "params": {"sessions": 100, "turns": 10}, "seed": 5},
                 "tiers": {"dram": "8GB", "ssd": "64GB"}},
        "grid": {"policies": [f"lru-k:k=1..{k_values}", f"hotprefix:theta=1..{k_values}"]},
        "sweep": {"replay": True},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points-per-policy", type=int, default=4)
    args = ap.parse_args()
    plan = plan_sweep(grid(args.points_per_policy))
    # Warm-up (not timed): numba compiles the replayer and FTL kernels into its cache once.
    warm = Path(tempfile.mkdtemp(prefix="kvwear-bench-sweep-warm-"))
    try:
        run_sweep(plan_sweep({**grid(1), "grid": {"policies": ["lru"]}}), warm, jobs=1)
    finally:
        shutil.rmtree(warm, ignore_errors=True)
    rates = {}
    for jobs in (1, 2):
        root = Path(tempfile.mkdtemp(prefix=f"kvwear-bench-sweep-{jobs}-"))
        try:
            t = time.perf_counter()
            prog = run_sweep(plan, root, jobs=jobs)
            wall = time.perf_counter() - t
            assert prog.done == len(plan.points), prog
        finally:
            shutil.rmtree(root, ignore_errors=True)
        rates[jobs] = len(plan.points) / wall * 60.0
        print(f"jobs={jobs}: {len(plan.points)} points in {wall:6.1f} s = {rates[jobs]:7.1f} points/min")
    print(f"scaling 2 workers / 1 worker: {rates[2] / rates[1]:.2f}x (ideal 2.00x on 2 free cores)")


if __name__ == "__main__":
    main()
