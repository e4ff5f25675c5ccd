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
40 MB) on an unpressured 1 TiB device and on a pressured one (1.05 × its peak live bytes), per
layout, the sides interleaved (bench/_interleave.py: ≥ 5 rounds after a warm-up, min and median
CPU and wall seconds). `--baseline REV_OR_FILE` adds another revision's planner (a git revision,
whose harness/plan/planner.py is read with `git show`, or a file) on the same plans, checks that
it plans the same block_ops and accounting, and prints this planner's speed over it.

Run: .venv/bin/python bench/layouts.py [--policy lru] [--sessions 10] [--rounds 5] [--baseline main]
     [--no-models]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
from _interleave import add_round_options, interleave, rounds_of

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

REPO = Path(__file__).resolve().parents[1]
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


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("replay_baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def baseline_module(rev_or_file: str, tmp: Path) -> ModuleType:
    """Another planner: a file, or a git revision's harness/plan/planner.py. Either is loaded
    from a copy in `tmp`: numba caches a module's kernels beside its source file, keyed by the
    file's path, so loading the product's own planner.py under another module name would leave
    cache entries there that the product cannot unpickle."""
    if Path(rev_or_file).is_file():
        text = Path(rev_or_file).read_text()
    else:
        try:
            text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev_or_file}:harness/plan/planner.py"],
                                  capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SystemExit(f"--baseline {rev_or_file}: neither a file nor a git revision with "
                             f"harness/plan/planner.py ({exc})") from None
    path = tmp / "planner_baseline.py"
    path.write_text(text)
    return load_module(str(path))


def plan_side(mod: ModuleType, ops: pa.Table, cap: int, layout: str) -> Callable[[], object]:
    cfg = mod.ReplayConfig(capacity_bytes=cap, layout=layout)
    return lambda: mod.plan_block_ops(ops, cfg)


def same_plan(a: object, b: object) -> bool:
    """Two BlockPlans with equal block_ops rows and accounting."""
    return bool(a.table.equals(b.table)) and a.accounting() == b.accounting()  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="lru")
    ap.add_argument("--sessions", type=int, default=10)
    add_round_options(ap)
    ap.add_argument("--baseline", default="", help="a git revision or a planner.py file to time beside this one")
    ap.add_argument("--no-models", action="store_true", help="only the planner's rate")
    ap.add_argument("--synthetic-ops", type=int, default=300_000, help="ssd_ops of the planner-rate stream")
    a = ap.parse_args()

    print(f"{'model':<14} {'layout':<7} {'trim':<5} {'ssd_ops':>8} {'plan s':>7} {'ops/s':>10} {'policy writes':>14} "
          f"{'relocated':>12} {'moved':>6} {'split':>6} {'FTL WAF':>8}")
    for model, dram, ssd in () if a.no_models else MODELS:
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

    ops = synthetic_ops(a.synthetic_ops, objects=max(1, a.synthetic_ops // 15))
    import kvwear.harness.plan.planner as current

    peak = current.plan_block_ops(ops, ReplayConfig(capacity_bytes=1 << 40, layout="extent")).peak_live_bytes
    tight = -(-int(peak * 1.05) // 4096) * 4096
    tmp = tempfile.TemporaryDirectory()      # the baseline's source stays while numba compiles it
    base = baseline_module(a.baseline, Path(tmp.name)) if a.baseline else None
    print(f"\nplanner rate, synthetic {ops.num_rows:,} ssd_ops; pressured device {format_bytes(tight)} = "
          f"1.05 × peak live{'; baseline ' + a.baseline if base else ''}")
    for layout in LAYOUTS:
        sides = {f"{layout}, 1 TiB": plan_side(current, ops, 1 << 40, layout),
                 f"{layout}, pressured": plan_side(current, ops, tight, layout)}
        if base is not None:
            sides[f"{layout}, 1 TiB, baseline"] = plan_side(base, ops, 1 << 40, layout)
            sides[f"{layout}, pressured, baseline"] = plan_side(base, ops, tight, layout)
        res = interleave(sides, **rounds_of(a))
        print()
        for line in res.table(f"{layout}, 1 TiB", {k: ops.num_rows for k in sides}, "ssd_ops"):
            print(line)
        if base is not None:
            for dev in ("1 TiB", "pressured"):
                same = same_plan(res.last[f"{layout}, {dev}"], res.last[f"{layout}, {dev}, baseline"])
                r = res.ratio(f"{layout}, {dev}", f"{layout}, {dev}, baseline")
                print(f"{layout} on {dev}: this planner / baseline: {r.text()}; plans identical: {same}")
                if not same:
                    raise SystemExit(f"{layout} on {dev}: this planner plans differently from the baseline")
    tmp.cleanup()


if __name__ == "__main__":
    main()
