"""Sweep throughput: points per minute with 1 and 2 local workers on the same grid, in one run.

The ratio shows how the local process pool scales on this machine. Each point is a real
`kvwear run` point (synthetic multi-round workload, Kimi-K3, sim device replay). The two sides
run the whole grid each, interleaved (bench/_interleave.py: ≥ 5 rounds after a warm-up that also
lets numba compile into its cache, the order rotating); CPU seconds count the pool's workers
(children this process waits for when the pool closes). `--full` runs the larger grid of
100-session workloads (8 points), the default 4 points of 20 sessions.

    .venv/bin/python bench/sweep.py [--points-per-policy 2] [--sessions 20] [--rounds 5] [--full]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

from _interleave import add_round_options, interleave, rounds_of

from kvwear.harness.pipeline.sweep import SweepProgress, plan_sweep, run_sweep


def grid(k_values: int, sessions: int, turns: int) -> dict[str, Any]:
    return {
        "base": {"name": "bench", "model": "kimi-k3",
                 "workload": {"generator": "multi-round", "params": {"sessions": sessions, "turns": turns}, "seed": 5},
                 "tiers": {"dram": "8GB", "ssd": "64GB"}},
        "grid": {"policies": [f"lru-k:k=1..{k_values}", f"hotprefix:theta=1..{k_values}"]},
        "sweep": {"replay": True},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points-per-policy", type=int, default=2)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--turns", type=int, default=10)
    add_round_options(ap)
    ap.add_argument("--full", action="store_true", help="4 points per policy of 100 sessions")
    args = ap.parse_args()
    k, sessions = (4, 100) if args.full else (args.points_per_policy, args.sessions)
    plan = plan_sweep(grid(k, sessions, args.turns))

    def sweep(jobs: int) -> SweepProgress:
        root = Path(tempfile.mkdtemp(prefix=f"kvwear-bench-sweep-{jobs}-"))
        try:
            prog = run_sweep(plan, root, jobs=jobs)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        assert prog.done == len(plan.points), prog
        return prog

    res = interleave({"jobs=1": lambda: sweep(1), "jobs=2": lambda: sweep(2)}, **rounds_of(args))
    n = len(plan.points)
    print(f"{n} points ({k} per policy; multi-round, {sessions} sessions × {args.turns} turns, kimi-k3, "
          f"sim device) per sweep")
    for line in res.table("jobs=1", {j: n for j in res.times}, "points"):
        print(line)
    for j, t in res.times.items():
        print(f"{j}: {n / t.stat('wall', 'median') * 60:7.1f} points/min (median wall), "
              f"{n / t.stat('wall', 'min') * 60:7.1f} (best)")
    print(f"scaling 2 workers / 1 worker: {res.ratio('jobs=2', 'jobs=1').text()} (ideal wall 2.00× on 2 free "
          "cores; CPU ≈ 1× when the work is the same)")


if __name__ == "__main__":
    main()
