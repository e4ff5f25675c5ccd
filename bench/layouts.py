"""Benchmark: the replay layouts under capacity pressure — does every layout × TRIM on/off place
each model's SSD traffic on a device of 1.05 × the SSD tier, what does its cleaning cost (the plan's
relocation bytes) and what WAF does the embedded FTL measure on the plan; and the planner's rate.

For each model (Kimi-K3: 429 MiB states, Nemotron-H-8B: 49 MiB states, Qwen2-7B: dense) the
multi-round generator's workload is simulated once under `--policy` with tiers small enough that the
SSD tier fills (per model below); its ssd_ops are then planned with each layout, TRIM on and off, on
kvwear.harness.pipeline.sizing.device_capacity's device (1.05 × the SSD tier), and each plan is played on the `sim`
device (the FTL emulator, over-provisioning 7 %) of that capacity. Prints per row: ssd_ops, the plan
time and rate (ssd_ops / s), the policy's write bytes, the relocation write bytes and objects moved,
objects the extent layout split, and the FTL's WAF.

Then the planner's rate on a synthetic stream (300k ops over 20k objects of 256 KiB, 150 kB and
40 MB) on an unpressured 1 TiB device and on a pressured one (1.05 × its peak live bytes), best of
`--reps`. `--baseline PATH` times the same unpressured plans with another revision's replay module
(e.g. `git show main:harness/plan/planner.py > /tmp/plan_main.py`), for a before/after rate.

Run: .venv/bin/python bench/layouts.py [--policy lru] [--sessions 10] [--reps 3] [--baseline FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa

from kvwear.harness.devices.base import DeviceSpec, open_device
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.simulate import sim_config
from kvwear.harness.pipeline.sizing import device_capacity
from kvwear.harness.plan.planner import LAYOUTS, ReplayConfig, plan_block_ops
from kvwear.policies.schema import SSD_OPS
from kvwear.policies.sim import simulate
from kvwear.units import format_bytes
from kvwear.workloads.models import resolve_profile
from kvwear.workloads.synthetic import generate

# (model, DRAM, SSD): tiers a 10-session multi-round workload overflows
MODELS = (("kimi-k3", "512MB", "3GB"), ("nemotron-h-8b", "64MB", "224MB"), ("qwen2-7b", "256MB", "1GB"))


def model_ops(model: str, dram: str, ssd: str, policy: str, sessions: int) -> tuple[pa.Table, int]:
    cfg = config_from_mapping({"model": model, "policies": [policy], "tiers": {"dram": dram, "ssd": ssd},
                               "workload": {"generator": "multi-round", "params": {"sessions": sessions}}})
    requests = generate("multi-round", seed=cfg.workload.seed, sessions=sessions)
    res = simulate(requests.to_batches(max_chunksize=2048), sim_config(cfg, resolve_profile(model)), policy)
    return res.ssd_ops, device_capacity(cfg)


def synthetic_ops(n: int = 300_000, objects: int = 20_000, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    objs = rng.integers(0, objects, n)
    sizes = rng.choice(np.array([16 * 16 * 1024, 150_000, 40_000_000]), objects)[objs]
    op = rng.choice(np.array(["write", "read", "evict"]), n, p=[0.5, 0.3, 0.2])
    return SSD_OPS.conform(pa.table({
        "t_s": np.arange(n) * 1e-3, "op": op, "obj_id": objs, "obj_kind": np.full(n, "full"),
        "bytes": sizes, "session_id": pa.nulls(n, pa.string()), "cause": np.full(n, "x")}))


def best_rate(mod: ModuleType, ops: pa.Table, cap: int, layout: str, reps: int) -> float:
    cfg = mod.ReplayConfig(capacity_bytes=cap, layout=layout)
    mod.plan_block_ops(ops, cfg)                       # compile / warm the numba cache
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        mod.plan_block_ops(ops, cfg)
        best = min(best, time.perf_counter() - t0)
    return ops.num_rows / best


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("replay_baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="lru")
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline", default="", help="another revision's harness/plan/planner.py to time beside this one")
    a = ap.parse_args()

    print(f"{'model':<14} {'layout':<7} {'trim':<5} {'ssd_ops':>8} {'plan s':>7} {'ops/s':>10} {'policy writes':>14} "
          f"{'relocated':>12} {'moved':>6} {'split':>6} {'FTL WAF':>8}")
    for model, dram, ssd in MODELS:
        ops, cap = model_ops(model, dram, ssd, a.policy, a.sessions)
        for layout in LAYOUTS:
            for trim in (True, False):
                t0 = time.perf_counter()
                plan = plan_block_ops(ops, ReplayConfig(capacity_bytes=cap, layout=layout,  # type: ignore[arg-type]
                                                        trim_on_evict=trim))
                dt = time.perf_counter() - t0
                with tempfile.TemporaryDirectory() as tmp:
                    dev = open_device(DeviceSpec("sim", capacity_bytes=cap), Path(tmp))
                    res = dev.replay(plan.table, Path(tmp))
                    dev.close()
                assert res.write_bytes == plan.aligned_write_bytes, (res.write_bytes, plan.aligned_write_bytes)
                print(f"{model:<14} {layout:<7} {'on' if trim else 'off':<5} {ops.num_rows:>8} {dt:>7.2f} "
                      f"{ops.num_rows / dt:>10,.0f} {format_bytes(plan.policy_write_bytes):>14} "
                      f"{format_bytes(plan.relocation_write_bytes):>12} {plan.relocations:>6} "
                      f"{plan.split_writes:>6} {res.waf or 0:>8.3f}")
        print(f"{'':<14} device {format_bytes(cap)} = 1.05 × SSD tier {ssd}, DRAM {dram}, policy {a.policy}")

    ops = synthetic_ops()
    import kvwear.harness.plan.planner as current

    peak = current.plan_block_ops(ops, ReplayConfig(capacity_bytes=1 << 40, layout="extent")).peak_live_bytes
    tight = -(-int(peak * 1.05) // 4096) * 4096
    base = load_module(a.baseline) if a.baseline else None
    print(f"\nplanner rate, synthetic {ops.num_rows:,} ssd_ops (best of {a.reps}); pressured device "
          f"{format_bytes(tight)} = 1.05 × peak live")
    print(f"{'layout':<7} {'1 TiB ops/s':>13} {'pressured ops/s':>16}" + (f" {'baseline 1 TiB':>15}" if base else ""))
    for layout in LAYOUTS:
        line = (f"{layout:<7} {best_rate(current, ops, 1 << 40, layout, a.reps):>13,.0f} "
                f"{best_rate(current, ops, tight, layout, a.reps):>16,.0f}")
        if base is not None:
            line += f" {best_rate(base, ops, 1 << 40, layout, a.reps):>15,.0f}"
        print(line)


if __name__ == "__main__":
    main()
