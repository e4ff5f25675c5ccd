"""Benchmark: the workload WAF model (kvwear.harness.estimate.waf_model) against the embedded FTL
where GC runs.

Cases: block plans of multi-round chat workloads (Qwen2-7B simulated under four policies, chunks
of 4 and 16 tokens, SSD tier about the device's size) in every layout (extent, log, slab) with TRIM
on and off, plus two synthetic plans (uniform random and 90/10 hot/cold random 4 KiB overwrites,
8 drive writes from empty), each played by the FTL on drives shaped like the presets and spanning
OP 7–28 %: block GC (greedy, on demand) and FEMU's line GC (background + forced thresholds). The
FTL's WAF is the measurement (the peer, run here); the model predicts from the plan's death summary
and the drive's geometry only.

Drives. All expose 192 MiB (a case takes well under a second). The presets whose reclaim units are
GB-sized (enterprise-tlc: 13.08 GB, qlc: 17.44 GB) keep the *number* of units a run's drive has:
enterprise-tlc 26 units (the default run's 268.8 GB drive) and 12 (a ~100 GB SSD tier, at OP 7,
14.5 and 28 %), qlc 10 (~134 GB), each with its preset's reserve (1 unit) and separate GC frontier;
what drives WAF is the unit's share of the drive, not its byte size. tiny-blocks is the preset
itself (64-page blocks, 7 %). femu is FEMU's line GC with 4 MiB lines (the bbssd fixture's) at 52,
60 and 64 lines (OP 8 %, 25 % and the preset's 33 %), gc_thres_pcent 75 / 95.

Output: one line per case, then per regime (the model's regime × GC-active or not: FTL WAF ≥ 1.1)
the cases, the error distribution and how many are within 10 %, and the same per drive and per layout.
By default the workload plans skip the two drives on which they never GC fresh out of box
(`IDLE_FOR_WORKLOADS`); `--full` plays every plan on every drive and adds 16-token chunks and more
sessions. `--held-back` plays only those added workloads, on the default matrix's drives: the
model's changes are measured on the default matrix, and this checks them on plans they were not
measured on. `--smoke` runs a tiny matrix (the test suite runs it).

Run: .venv/bin/python bench/waf_model.py [--smoke | --full | --held-back] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kvwear.emulator.ftl import OP_WRITE, Ftl, FtlConfig
from kvwear.emulator.precondition import PreconditionSpec, default_round_pages, passes_until_steady, precondition
from kvwear.errors import KvwearError
from kvwear.harness.devices.sim import plan_to_requests
from kvwear.harness.estimate.waf_model import PAGE_BYTES, REGIMES, death_summary, fluid_workload_waf, workload_waf
from kvwear.harness.plan.planner import ReplayConfig, plan_block_ops

CAPACITY = 192 << 20
EXPOSED_PAGES = CAPACITY // PAGE_BYTES
GC_ACTIVE = 1.1              # FTL WAF at or above this: a case where GC runs
WITHIN = 0.10
LAYOUTS = ("extent", "log", "slab")
POLICIES = ("lru", "gandalf:budget=fixed,gamma=4", "lru-k", "belady")
# the presets' own figures (branch presets: emulator/presets/*.py, docs/design/drive-presets.md)
TLC_OP = 4 * 2**40 / 3_840_000_000_000 - 1.0          # 14.53 %
Requests = tuple[np.ndarray, np.ndarray, np.ndarray]


def _units_block(units: int, op: float, reserve: int, separate: bool) -> FtlConfig:
    """A block-GC drive of 192 MiB exposed with `units` reclaim units in all (data + reserve + open)."""
    open_n = 2 if separate else 1
    data = units - reserve - open_n
    ppb = math.ceil(EXPOSED_PAGES * (1.0 + op) / data)
    return FtlConfig.block_level(CAPACITY, op, pages_per_block=ppb, reserve_lines=reserve, separate_gc_line=separate)


# Drives on which the workload plans' FTL WAF stays ≈ 1.00 fresh out of box (measured with `--full`:
# 2 of 50 and 2 of 50 cases GC-active): by default they play only the synthetic plans, so that the
# default matrix is drawn mostly from cases where GC runs.
IDLE_FOR_WORKLOADS = ("tiny-blocks 7%", "ent-tlc 26u 14.5%")


def _femu(lines: int) -> FtlConfig:
    """FEMU's line GC on 192 MiB with 4 MiB lines (256-page blocks on 2 × 2 LUNs) and its default thresholds."""
    return FtlConfig.femu(192, pgs_per_blk=256, blks_per_pl=lines, luns_per_ch=2, nchs=2)


def drives(smoke: bool = False) -> dict[str, FtlConfig]:
    d = {
        "tiny-blocks 7%": FtlConfig.block_level(CAPACITY, 0.07, pages_per_block=64),
        "ent-tlc 26u 14.5%": _units_block(26, TLC_OP, 1, True),
        "ent-tlc 12u 7%": _units_block(12, 0.07, 1, True),
        "ent-tlc 12u 14.5%": _units_block(12, TLC_OP, 1, True),
        "ent-tlc 12u 28%": _units_block(12, 0.28, 1, True),
        "qlc 10u 14.5%": _units_block(10, TLC_OP, 1, True),
        "femu 52 lines 8%": _femu(52),
        "femu 60 lines 25%": _femu(60),
        "femu 64 lines 33%": _femu(64),
    }
    if smoke:
        return {k: d[k] for k in ("ent-tlc 12u 7%", "femu 52 lines 8%")}
    return d


@dataclass(frozen=True)
class Workload:
    sessions: int
    chunk_tokens: int
    ssd_mb: int


def _policy_ops(w: Workload, policy: str) -> pa.Table:
    from kvwear.policies.config import SimConfig
    from kvwear.policies.sim import simulate
    from kvwear.workloads.models import resolve_profile
    from kvwear.workloads.synthetic import generate

    req = generate("multi-round", seed=1, sessions=w.sessions, turns=10)
    prof = resolve_profile("qwen2-7b")
    sim = SimConfig(dram_bytes=100 * 10**6, ssd_bytes=w.ssd_mb * 10**6, hbm_bytes=0,
                    kv_bytes_per_token=prof.kv_bytes_per_token, state_bytes=prof.state_bytes,
                    chunk_tokens=w.chunk_tokens, model=prof.name)
    return simulate(req.to_batches(max_chunksize=2048), sim, policy).ssd_ops


def policy_plans(workloads: list[Workload], policies: tuple[str, ...], layouts: tuple[str, ...]
                 ) -> Iterator[tuple[str, str, bool, Requests]]:
    """(name, layout, trim, requests) for every workload × policy × layout × TRIM."""
    for w in workloads:
        for pol in policies:
            ops = _policy_ops(w, pol)
            for layout in layouts:
                for trim in (True, False):
                    name = f"{pol.split(':')[0]} ct{w.chunk_tokens}"
                    try:
                        plan = plan_block_ops(ops, ReplayConfig(capacity_bytes=CAPACITY, layout=layout,  # type: ignore[arg-type]
                                                                trim_on_evict=trim))
                    except KvwearError as e:
                        print(f"{name} {layout}: no plan ({e})", file=sys.stderr)
                        continue
                    yield name, layout, trim, plan_to_requests(plan.table, PAGE_BYTES, CAPACITY)


def random_plan(hot_share: float, passes: float, seed: int) -> Requests:
    """4 KiB overwrites from an empty drive: a share `hot_share` of the writes to 10 % of the pages
    (1.0: none hot, uniform)."""
    rng = np.random.default_rng(seed)
    n = int(passes * EXPOSED_PAGES)
    if hot_share >= 1.0:
        lpns = rng.integers(0, EXPOSED_PAGES, n)
    else:
        hot = EXPOSED_PAGES // 10
        is_hot = rng.random(n) < hot_share
        lpns = np.where(is_hot, rng.integers(0, hot, n), rng.integers(hot, EXPOSED_PAGES, n))
    return np.full(n, OP_WRITE, np.int8), lpns.astype(np.int64), np.ones(n, np.int64)


# Drives on which every workload plan is also played preconditioned (SNIA PTS steady state, as the
# default run's drive) until the workload's own steady state: the FTL's steady-state WAF is the
# measurement, the model's the run-level model's on the same preconditioning.
PRECONDITIONED = ("ent-tlc 26u 14.5%", "qlc 10u 14.5%", "femu 60 lines 25%")
STEADY = PreconditionSpec("steady")


def ftl_waf(cfg: FtlConfig, req: Requests, pre: PreconditionSpec | None) -> float:
    """The FTL's WAF for the plan: one pass fresh out of box, or preconditioned and played in passes until
    the workload's steady state (the sim device's rule: rounds of 1/4 of the drive, the steady window's WAF,
    else the last window's)."""
    ftl = Ftl(cfg)
    if pre is None:
        ftl.apply_ops(*req)
        return ftl.counters().waf
    precondition(ftl, pre)
    before = ftl.counters()
    ph, _ = passes_until_steady(ftl, lambda: ftl.apply_ops(*req), default_round_pages(cfg.exposed_pages),
                                pre.criterion)
    return ph.lifetime_waf() or ftl.counters().minus(before).waf


@dataclass(frozen=True)
class Case:
    plan: str
    layout: str
    trim: bool
    drive: str
    host_x: float           # host writes ÷ exposed capacity
    ftl: float
    model: float
    regime: str
    fluid: float = math.nan  # the fluid model (waf_model.fluid_workload_waf: the model before), for comparison
    pre: str = "none"        # the drive's preconditioning (steady: played until the workload's steady state)

    @property
    def err(self) -> float:
        return self.model / self.ftl - 1.0

    @property
    def active(self) -> bool:
        return self.ftl >= GC_ACTIVE


def run_cases(plans: Iterator[tuple[str, str, bool, Requests]], drive_set: dict[str, FtlConfig],
              out: Callable[[str], None], skip: tuple[str, ...] = ()) -> tuple[list[Case], float, float]:
    """Every plan on every drive (a workload plan, layout ≠ "-", not on the drives in `skip`)."""
    cases: list[Case] = []
    t_model = t_ftl = 0.0
    out(f"{'plan':<14} {'layout':<7} {'trim':<5} {'drive':<19} {'pre':<6} {'host×':>5} {'FTL':>6} {'model':>6} "
        f"{'err':>7} {'fluid':>6}  regime")
    for name, layout, trim, req in plans:
        t = time.process_time()
        summary = death_summary(*req, EXPOSED_PAGES)
        t_model += time.process_time() - t
        for dname, cfg in drive_set.items():
            pres: tuple[PreconditionSpec | None, ...] = (None,)
            if layout != "-" and dname in PRECONDITIONED:
                pres = (None, STEADY)
            if layout != "-" and dname in skip:
                pres = tuple(p for p in pres if p is not None)
            t = time.process_time()
            fluid = fluid_workload_waf(summary, cfg).waf        # main's model before: it takes every drive as empty
            t_model += time.process_time() - t
            for pre in pres:
                t = time.process_time()
                pred = workload_waf(summary, cfg, pre, until_steady=pre is not None)
                t_model += time.process_time() - t
                t = time.process_time()
                measured = ftl_waf(cfg, req, pre)
                t_ftl += time.process_time() - t
                c = Case(name, layout, trim, dname, summary.host_pages / EXPOSED_PAGES, measured, pred.waf, pred.regime,
                         fluid, "none" if pre is None else pre.mode)
                cases.append(c)
                out(f"{name:<14} {layout:<7} {'on' if trim else 'off':<5} {dname:<19} {c.pre:<6} {c.host_x:>5.1f} "
                    f"{measured:>6.3f} {pred.waf:>6.3f} {c.err:>+7.1%} {fluid:>6.3f}  {pred.regime}")
    return cases, t_model, t_ftl


def _row(label: str, cs: list[Case]) -> str:
    if not cs:
        return f"{label:<34} {0:>4}"
    e = np.abs([c.err for c in cs])
    n_in = int(np.sum(e <= WITHIN))
    return (f"{label:<34} {len(cs):>4} {n_in:>4} {n_in / len(cs):>6.0%} {np.median(e):>7.1%} "
            f"{np.quantile(e, 0.9):>7.1%} {e.max():>7.1%} {np.mean([c.err for c in cs]):>+7.1%}")


def report(cases: list[Case], out: Callable[[str], None]) -> None:
    head = f"{'group':<34} {'n':>4} {'≤10%':>4} {'share':>6} {'median':>7} {'p90':>7} {'max':>7} {'bias':>7}"
    act = [c for c in cases if c.active]
    out(f"\n{len(cases)} cases, {len(act)} GC-active (FTL WAF ≥ {GC_ACTIVE}); |model/FTL − 1|:")
    out(head)
    out(_row("all cases", cases))
    out(_row("GC-active", act))
    out(_row("GC-idle (FTL WAF < 1.1)", [c for c in cases if not c.active]))
    out(_row("GC-active, fresh drives", [c for c in act if c.pre == "none"]))
    out(_row("GC-active, preconditioned", [c for c in act if c.pre != "none"]))
    out(_row("all, preconditioned", [c for c in cases if c.pre != "none"]))
    for label, line, pre in (("fresh block GC", False, False), ("fresh line GC", True, False),
                             ("preconditioned", None, True)):
        cs = [c for c in act if (c.pre != "none") == pre and (line is None or c.drive.startswith("femu") == line)]
        if cs:
            e_f = np.abs([c.err for c in cs])
            e_r = np.abs([c.fluid / c.ftl - 1 for c in cs])
            out(f"GC-active, {label}: within 10 %: the model {int(np.sum(e_f <= WITHIN))} / {len(cs)}, the fluid "
                f"{int(np.sum(e_r <= WITHIN))} / {len(cs)} (medians {np.median(e_f):.1%}, {np.median(e_r):.1%})")
    out("\nby the model's regime (GC-active cases | GC-idle):")
    out(head)
    for r in [r for r in REGIMES if any(c.regime == r for c in cases)]:
        out(_row(f"{r} | active", [c for c in act if c.regime == r]))
        out(_row(f"{r} | idle", [c for c in cases if c.regime == r and not c.active]))
    out("\nREGIME_ERRORS (kvwear.harness.estimate.waf_model: the error the estimate quotes per regime, all cases; "
        "it takes them from a --held-back run):")
    for r in REGIMES:
        cs = [c for c in cases if c.regime == r]
        if cs:
            e = np.abs([c.err for c in cs])
            out(f'    "{r}": RegimeError({len(cs)}, {int(np.sum(e <= WITHIN))}, {np.median(e):.4f}, '
                f'{np.quantile(e, 0.9):.4f}, _BENCH_RUN),')
    out("\nGC-active by drive:")
    out(head)
    for d in dict.fromkeys(c.drive for c in cases):
        out(_row(d, [c for c in act if c.drive == d]))
    out("\nGC-active by layout and TRIM:")
    out(head)
    for lay in dict.fromkeys(c.layout for c in cases):
        for trim in (True, False):
            out(_row(f"{lay} trim {'on' if trim else 'off'}", [c for c in act if c.layout == lay and c.trim == trim]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_true", help="a tiny matrix (the test suite's)")
    size.add_argument("--full", action="store_true", help="adds 16-token chunks and more sessions")
    size.add_argument("--held-back", action="store_true",
                      help="only --full's workloads that the default matrix leaves out, on the default drives "
                           "(a check on workloads the model was not tuned on)")
    ap.add_argument("--csv", help="write the cases to this CSV file")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    workloads: list[Workload]
    policies: tuple[str, ...]
    layouts: tuple[str, ...]
    if args.smoke:
        workloads, policies, layouts = [Workload(4, 16, 150)], ("lru",), ("slab",)
    elif args.full or args.held_back:
        workloads = [Workload(10, 4, 190), Workload(20, 16, 195), Workload(20, 16, 150), Workload(40, 16, 150),
                     Workload(20, 4, 120)]
        if args.held_back:
            workloads = workloads[1:]
        policies, layouts = POLICIES, LAYOUTS
    else:
        # one workload (its plans write 22–46 drive writes each): the run-level model and the
        # preconditioned cases play as much as the FTL does, so two workloads took > 40 min under load
        workloads, policies, layouts = [Workload(10, 4, 190)], POLICIES, LAYOUTS

    def plans() -> Iterator[tuple[str, str, bool, Requests]]:
        yield from policy_plans(workloads, policies, layouts)
        if args.held_back:
            return
        yield "uniform", "-", False, random_plan(1.0, 2.0 if args.smoke else 8.0, 11)
        if not args.smoke:
            yield "hot/cold 90/10", "-", False, random_plan(0.9, 8.0, 12)

    cases, t_model, t_ftl = run_cases(plans(), drives(args.smoke), print, () if args.full else IDLE_FOR_WORKLOADS)
    report(cases, print)
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("plan,layout,trim,drive,precondition,host_x,ftl_waf,model_waf,error,regime,fluid_waf\n")
            for c in cases:
                f.write(f"{c.plan},{c.layout},{int(c.trim)},{c.drive},{c.pre},{c.host_x:.3f},{c.ftl:.5f},{c.model:.5f},"
                        f"{c.err:.5f},{c.regime},{c.fluid:.5f}\n")
    print(f"\nCPU: model {t_model:.1f} s (death summary + GC model), FTL {t_ftl:.1f} s; "
          f"wall total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
