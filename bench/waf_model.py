"""Benchmark: the workload WAF model (kvwear.harness.estimate.waf_model) against the embedded FTL, plan by plan.

Validation matrix: a multi-round chat workload (Qwen2-7B, DRAM 200 MB, SSD 180 MB) under four
policies (lru, gandalf, lru-k, belady) × three layouts (extent, log, slab) × TRIM on/off = 24
block plans on a 192 MiB device, each played by the FTL emulator on four drives of that exposed
size: block-level GC at 7 % and 28 % over-provisioning, and FEMU's fixture geometry
(shared/fixtures/femu-bbssd: 64 lines of 1,024 pages) at gc_thres_pcent 75 and 90; plus a plan of
uniform random 4 KiB overwrites (10 × the capacity, from an empty drive) on each drive. For every
plan × drive it prints the FTL's WAF (the peer, measured in this run), the workload model's, the
uniform-random reference (`ftl_predicted_waf`) and their errors; then the share within 10 %, and
for the uniform plan the model's steady state against the Lambert-W value.

Run: .venv/bin/python bench/waf_model.py [--sessions 20] [--only-uniform]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from kvwear.emulator.ftl import OP_WRITE, Ftl, FtlConfig
from kvwear.errors import KvwearError
from kvwear.harness.devices.sim import plan_to_requests
from kvwear.harness.estimate.estimator import analytical_waf, ftl_alpha, ftl_predicted_waf
from kvwear.harness.estimate.waf_model import PAGE_BYTES, death_summary, steady_state_waf, workload_waf
from kvwear.harness.plan.planner import ReplayConfig, plan_block_ops

CAPACITY = 192 << 20
POLICIES = ("lru", "gandalf:budget=fixed,gamma=4", "lru-k", "belady")
LAYOUTS = ("extent", "log", "slab")
FEMU = dict(pgs_per_blk=256, blks_per_pl=64, luns_per_ch=2, nchs=2)


def drives() -> dict[str, FtlConfig]:
    return {
        "block ρ=0.07": FtlConfig.block_level(CAPACITY, 0.07, pages_per_block=64),
        "block ρ=0.28": FtlConfig.block_level(CAPACITY, 0.28, pages_per_block=256),
        "femu gc75": FtlConfig.femu(192, **FEMU, gc_thres_pcent=75),
        "femu gc90": FtlConfig.femu(192, **FEMU, gc_thres_pcent=90),
    }


def policy_plans(sessions: int, ssd_mb: int) -> list[tuple[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    from kvwear.policies.config import SimConfig
    from kvwear.policies.sim import simulate
    from kvwear.workloads.models import resolve_profile
    from kvwear.workloads.synthetic import generate

    req = generate("multi-round", seed=1, sessions=sessions, turns=10)
    prof = resolve_profile("qwen2-7b")
    sim = SimConfig(dram_bytes=200 * 10**6, ssd_bytes=ssd_mb * 10**6, hbm_bytes=0,
                    kv_bytes_per_token=prof.kv_bytes_per_token, state_bytes=prof.state_bytes, chunk_tokens=16,
                    model=prof.name)
    out = []
    for pol in POLICIES:
        ops = simulate(req.to_batches(max_chunksize=2048), sim, pol).ssd_ops
        for layout in LAYOUTS:
            for trim in (True, False):
                name = f"{pol.split(':')[0]} {layout} {'trim' if trim else 'no-trim'}"
                try:
                    plan = plan_block_ops(ops, ReplayConfig(capacity_bytes=CAPACITY, layout=layout,  # type: ignore[arg-type]
                                                            trim_on_evict=trim))
                except KvwearError as e:
                    print(f"{name}: no plan ({e})")
                    continue
                out.append((name, plan_to_requests(plan.table, PAGE_BYTES, CAPACITY)))
    return out


def uniform_plan(seed: int = 11) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = CAPACITY // PAGE_BYTES
    lpns = np.random.default_rng(seed).integers(0, n, 10 * n)
    return np.full(lpns.size, OP_WRITE, np.int8), lpns.astype(np.int64), np.ones(lpns.size, np.int64)


def ftl_waf(cfg: FtlConfig, req: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    ftl = Ftl(cfg)
    ftl.apply_ops(*req)
    return ftl.counters().waf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--ssd-mb", type=int, default=150, help="SSD tier of the simulation (MB)")
    ap.add_argument("--only-uniform", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    plans = [] if args.only_uniform else policy_plans(args.sessions, args.ssd_mb)
    plans.append(("uniform random", uniform_plan()))
    t_model = t_ftl = 0.0
    rows = []
    print(f"{'plan':<28} {'drive':<13} {'host×cap':>8} {'FTL':>6} {'model':>6} {'err':>7} "
          f"{'uniform':>7} {'err':>7}  regime")
    for name, req in plans:
        t = time.perf_counter()
        summary = death_summary(*req, CAPACITY // PAGE_BYTES)
        t_model += time.perf_counter() - t
        for dname, cfg in drives().items():
            t = time.perf_counter()
            pred = workload_waf(summary, cfg)
            t_model += time.perf_counter() - t
            t = time.perf_counter()
            measured = ftl_waf(cfg, req)
            t_ftl += time.perf_counter() - t
            uniform = ftl_predicted_waf(cfg)
            err, uerr = pred.waf / measured - 1, uniform / measured - 1
            rows.append((name, dname, measured, pred.waf, err, uerr))
            print(f"{name:<28} {dname:<13} {summary.host_pages * PAGE_BYTES / CAPACITY:>8.1f} {measured:>6.2f} "
                  f"{pred.waf:>6.2f} {err:>+7.1%} {uniform:>7.2f} {uerr:>+7.1%}  {pred.regime}")
            if name == "uniform random" and cfg.gc_mode == "block":
                a = ftl_alpha(cfg)
                ss = steady_state_waf(summary, a * cfg.exposed_pages)
                print(f"{'':<28} {'':<13} steady state {ss:.3f} vs Lambert-W {analytical_waf(a):.3f} "
                      f"({ss / analytical_waf(a) - 1:+.2%})")
    errs = np.array([abs(r[4]) for r in rows])
    uerrs = np.array([abs(r[5]) for r in rows])
    wafs = np.array([r[2] for r in rows])
    print(f"\n{len(rows)} plan × drive cases ({len(plans)} plans), FTL WAF {wafs.min():.2f} … {wafs.max():.2f}")
    print(f"workload model within 10 % of the FTL: {np.mean(errs <= 0.10):.0%} ({int(np.sum(errs <= 0.10))}/"
          f"{len(rows)}), median |error| {np.median(errs):.1%}, max {errs.max():.1%}")
    print(f"uniform reference within 10 %:         {np.mean(uerrs <= 0.10):.0%}, median |error| "
          f"{np.median(uerrs):.1%}, max {uerrs.max():.1%}")
    print(f"time: model {t_model:.1f} s (summary + GC model), FTL {t_ftl:.1f} s, "
          f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
