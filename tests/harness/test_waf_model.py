"""The workload WAF model: death-distance summary of a plan, and its GC model against the FTL."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from kvwear.emulator.ftl import OP_READ, OP_TRIM, OP_WRITE, Ftl, FtlConfig
from kvwear.emulator.precondition import PreconditionSpec, default_round_pages, passes_until_steady, precondition
from kvwear.errors import KvwearError
from kvwear.harness.estimate.estimator import analytical_waf, ftl_alpha
from kvwear.harness.estimate.waf_model import (
    BANDS,
    LINE_PAGES,
    PAGE_BYTES,
    RUN_BINS_PER_OCTAVE,
    RUN_COARSE_SHIFT,
    RUN_KINDS,
    SUMMARY_VERSION,
    DeathCounter,
    DeathSummary,
    death_summary,
    run_bins,
    steady_state_waf,
    survival_grid,
    workload_waf,
)
from kvwear.records import decode

CFG = FtlConfig.block_level(64 << 20, 0.28, pages_per_block=64)
L = CFG.exposed_pages


def _pages(lpns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lpns = np.asarray(lpns, np.int64)
    return np.full(len(lpns), OP_WRITE, np.int8), lpns, np.ones(len(lpns), np.int64)


def _ftl_waf(cfg: FtlConfig, ops: np.ndarray, first: np.ndarray, n: np.ndarray) -> float:
    ftl = Ftl(cfg)
    ftl.apply_ops(ops, first, n)
    return ftl.counters().waf


def test_summary_counts_deaths_trims_and_survivors() -> None:
    # pages 0..3 written, 1 overwritten after 2 more pages, 2 trimmed, 0 and 3 survive
    ops = np.array([OP_WRITE, OP_WRITE, OP_TRIM], np.int8)
    s = death_summary(ops, np.array([0, 1, 2]), np.array([4, 1, 1]), 8)
    assert (s.host_pages, s.overwritten_pages, s.trimmed_pages, s.survivor_pages, s.footprint_pages) == \
        (5, 1, 1, 3, 4)
    assert sum(s.hist_pages) == 2                          # the two deaths: distances 2 and 2
    assert s.hist_pages[s.grid_pages.index(2)] == 2
    assert decode(DeathSummary, json.loads(json.dumps(s.as_dict())), "t", "") == s
    # a trimmed page written again is not new footprint
    again = death_summary(np.array([OP_WRITE, OP_TRIM, OP_WRITE], np.int8), np.array([0, 0, 0]),
                          np.array([2, 2, 2]), 4)
    assert (again.footprint_pages, again.trimmed_pages, again.survivor_pages) == (2, 2, 2)
    with pytest.raises(KvwearError, match="version"):
        decode(DeathSummary, {**json.loads(json.dumps(s.as_dict())), "version": 99}, "t", "")
    with pytest.raises(KvwearError, match="outside"):
        death_summary(ops, np.array([0, 1, 7]), np.array([4, 1, 2]), 8)


def _shares(rows: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(f"{min(max(float(x), 0.0), 1.0):.6g}") for x in row) for row in rows)


def _brute_force_summary(ops: np.ndarray, first: np.ndarray, n: np.ndarray, exposed: int, total: int,
                         start: int = 0) -> DeathSummary:
    """The summary from its definitions, page by page in Python (`start`: host pages written before
    these requests, never dying). A page written at t and invalidated when `now` host pages are
    written dies at d = now − t − 1; S_b(x) = 1 − #{band-b deaths with d ≤ x, t < T − x} /
    #{band-b pages with t < T − x}; a line is empty from its last page's death on, counted in its
    first page's band over the ages x < T − its start."""
    live: dict[int, int] = {}
    seen: set[int] = set()
    died: dict[int, int] = {}                       # host time -> host pages written when it died
    counts = [0, 0, 0]                              # overwritten, trimmed, footprint
    touched: dict[int, int] = {}                    # page -> host time of its first write or TRIM
    deaths: list[tuple[int, int]] = []              # (tw, death time) in that order
    write_ios = trim_ios = reads = 0
    gaps: list[tuple[int, int]] = []                # (host time of a write request, reads before it)
    now = start
    for op, f, k in zip(ops.tolist(), first.tolist(), n.tolist(), strict=True):
        if op == OP_READ:
            reads += 1
            continue
        write_ios += op == OP_WRITE
        trim_ios += op == OP_TRIM
        if op == OP_WRITE:
            gaps.append((now, reads))
            reads = 0
        for lpn in range(f, f + k):
            touched.setdefault(lpn, now)
            tw = live.pop(lpn, None)
            if tw is not None:
                died[tw] = now
                deaths.append((tw, now))
                counts[0 if op == OP_WRITE else 1] += 1
            elif op == OP_WRITE and lpn not in seen:
                counts[2] += 1
            if op == OP_WRITE:
                live[lpn] = now
                seen.add(lpn)
                now += 1
    assert now == total
    grid = survival_grid(total)
    x = grid.tolist()
    band_len = max(1, -(-total // BANDS))
    nb = -(-total // band_len)
    starts = [b * band_len for b in range(nb)]
    obs = [[max(0, min(s + band_len, total, total - g) - s) for g in x] for s in starts]
    dead = [[0] * len(x) for _ in starts]
    hist = [0] * len(x)
    for tw, now_d in died.items():
        d = now_d - tw - 1
        hist[max(i for i, g in enumerate(x) if g <= d)] += 1
        for i, g in enumerate(x):
            if d <= g < total - tw:
                dead[tw // band_len][i] += 1
    pooled = [1.0 - sum(c[i] for c in dead) / sum(o[i] for o in obs) if sum(o[i] for o in obs) else 0.0
              for i in range(len(x))]
    band_s = [[1.0 - dead[b][i] / obs[b][i] if obs[b][i] else pooled[i] for i in range(len(x))] for b in range(nb)]
    lines = []
    for w in LINE_PAGES:
        empty = [[0] * len(x) for _ in starts]
        for line in {tw // w for tw in died}:
            s0, s1 = line * w, min(line * w + w, total)
            if all(t in died for t in range(s0, s1)):
                last = max(died[t] for t in range(s0, s1))
                for i, g in enumerate(x):
                    if last - s0 <= g < total - s0:
                        empty[s0 // band_len][i] += s1 - s0
        lines.append(_shares(np.array([[max(1.0 - empty[b][i] / obs[b][i] if obs[b][i] else 1.0, band_s[b][i])
                                        for i in range(len(x))] for b in range(nb)])))
    surv = sorted((tw, lpn) for lpn, tw in live.items())
    read_gaps: dict[tuple[int, int], list[int]] = {}
    for t, g in gaps:
        row = read_gaps.setdefault((min(t // band_len, nb - 1), g.bit_length()), [0, 0])
        row[0] += 1
        row[1] += g
    return DeathSummary(
        version=SUMMARY_VERSION, page_bytes=PAGE_BYTES, exposed_pages=exposed, host_pages=total,
        overwritten_pages=counts[0], trimmed_pages=counts[1], survivor_pages=len(live), footprint_pages=counts[2],
        grid_pages=tuple(x), survival=tuple(min(max(v, 0.0), 1.0) for v in pooled),
        observed=tuple(sum(o[i] for o in obs) for i in range(len(x))), hist_pages=tuple(hist),
        band_start_pages=tuple(starts), band_survival=_shares(np.array(band_s)), line_pages=LINE_PAGES,
        band_line_survival=tuple(lines), write_ios=write_ios,
        run_cells=_brute_force_cells(deaths, [(tw, None) for tw, _ in surv],
                                     [(tw, total + touched[lpn]) for tw, lpn in surv], total, band_len),
        run_transitions=_brute_force_transitions(deaths, [(tw, None) for tw, _ in surv],
                                                 [(tw, total + touched[lpn]) for tw, lpn in surv], total, band_len),
        read_gaps=tuple(sorted((*k, *v) for k, v in read_gaps.items())), trim_ios=trim_ios)


def _brute_force_transitions(deaths: list[tuple[int, int]], survivors: list[tuple[int, None]],
                             next_pass: list[tuple[int, int]], total: int,
                             band_len: int) -> tuple[tuple[int, ...], ...]:
    """Every pair of runs adjacent in write order: (table, band of the later, coarse bin before, after)."""
    def cb(d: int | None) -> int:
        if d is None:
            return -1
        o = (d + 1).bit_length() - 1
        return min(o * RUN_BINS_PER_OCTAVE + (((d + 1 - (1 << o)) * RUN_BINS_PER_OCTAVE) >> o),
                   run_bins(total)[1] - 1) >> RUN_COARSE_SHIFT

    dead = [(tw, n, cb(d)) for tw, n, _, d in _brute_force_runs(list(deaths))]
    out: dict[tuple[int, int, int, int], int] = {}
    for table, rest in ((0, [(tw, n, -1) for tw, n, _, _ in _brute_force_runs(list(survivors))]),
                        (1, [(tw, n, cb(d)) for tw, n, _, d in _brute_force_runs(list(next_pass))])):
        runs = sorted(dead + rest)
        for (t0, n0, b0), (t1, _, b1) in itertools.pairwise(runs):
            if t1 == t0 + n0:
                key = (table, t1 // band_len, b0, b1)
                out[key] = out.get(key, 0) + 1
    return tuple(sorted((*k, v) for k, v in out.items()))


def _brute_force_runs(deaths: list[tuple[int, int | None]]) -> list[tuple[int, int, int, int]]:
    """Runs over (write time, death time or None) in the given order: a page continues the run
    when written right after its last page and dying at the same time (kind 1) or one page later
    (kind 0); survivors (None) only need the write times. (first tw, length, kind, distance)."""
    out: list[list[int]] = []
    for tw, dt in deaths:
        if out:
            r = out[-1]
            if tw == r[1] + 1 and dt is None:
                r[1], r[3] = tw, r[3] + 1
                continue
            if tw == r[1] + 1 and dt is not None and ((dt == r[2] and r[4] != 0) or (dt == r[2] + 1 and r[4] != 1)):
                if r[4] == -1:
                    r[4] = 1 if dt == r[2] else 0
                r[1], r[2], r[3] = tw, dt, r[3] + 1
                continue
        out.append([tw, tw, -1 if dt is None else dt, 1, -1, 0 if dt is None else dt - tw - 1])
    return [(r[0], r[3], r[4], r[5]) for r in out]


def _brute_force_cells(deaths: list[tuple[int, int]], survivors: list[tuple[int, None]],
                       next_pass: list[tuple[int, int]], total: int, band_len: int) -> tuple[tuple[int, ...], ...]:
    def dbin(d: int) -> int:
        o = (d + 1).bit_length() - 1
        return o * RUN_BINS_PER_OCTAVE + (((d + 1 - (1 << o)) * RUN_BINS_PER_OCTAVE) >> o)

    nlb, ndb = run_bins(total)
    cells: dict[tuple[int, int, int, int], list[int]] = {}
    for runs, kinds in ((_brute_force_runs(list(deaths)), (0, 1)),
                        (_brute_force_runs(list(survivors)), (2, 2)),
                        (_brute_force_runs(list(next_pass)), (3, 4))):
        for tw, length, kind, d in runs:
            k = kinds[1] if kind == 1 else kinds[0]
            key = (tw // band_len, k, min(length.bit_length() - 1, nlb - 1), min(dbin(d), ndb - 1))
            c = cells.setdefault(key, [0, 0, d, d])
            c[0] += 1
            c[1] += length
            c[2] = min(c[2], d)
            c[3] = max(c[3], d)
    return tuple(sorted((k[0], k[1], *v) for k, v in cells.items()))


def _mixed_plan(seed: int, pages: int, requests: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Writes, TRIMs and reads of whole slots (written and dying together), of ranges at random
    offsets, and appends of a circular log over the device's first quarter."""
    rng = np.random.default_rng(seed)
    ops = rng.choice(np.array([OP_WRITE] * 6 + [OP_TRIM, OP_READ], np.int8), requests)
    size = rng.choice(np.array([1, 7, 64, 300]), requests, p=[0.2, 0.3, 0.35, 0.15])
    mode = rng.integers(0, 3, requests)
    first = np.where(mode == 0, rng.integers(0, pages // size) * size, rng.integers(0, pages - size))
    log = mode == 2
    first[log] = (np.cumsum(np.where(log, 64, 0)) % (pages // 4))[log]
    size[log] = 64
    return ops, first, size


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_death_summary_is_its_definition_over_random_plans_and_batch_splits(seed: int) -> None:
    pages = 8192
    ops, first, n = _mixed_plan(seed, pages, 1500)
    total = int(n[ops == OP_WRITE].sum())
    ref = _brute_force_summary(ops, first, n, pages, total)
    assert ref.overwritten_pages > 10_000 and ref.trimmed_pages > 1000 and ref.survivor_pages > 1000
    assert sum(ref.band_line_survival[-1][0]) < len(ref.grid_pages)      # lines of 4,096 pages empty
    # every run kind, each with runs of several pages, and both transition tables: the run rules are exercised
    assert {r[1] for r in ref.run_cells if r[3] > r[2]} == set(range(RUN_KINDS))
    assert {r[0] for r in ref.run_transitions} == {0, 1}
    rng = np.random.default_rng(seed)
    for batches, held in ((1, 0), (3, 0), (40, 0), (1, 5), (3, 64)):
        acc = DeathCounter(total, pages)
        if held:
            acc.short = np.empty((3, held), np.int64)        # short runs applied out of order, in small sorts
        for part in np.split(np.arange(len(ops)), np.sort(rng.integers(0, len(ops), batches - 1))):
            acc.feed(ops[part], first[part], n[part])
        assert acc.summary() == ref


def test_the_death_summary_is_its_definition_past_two_to_the_32_pages() -> None:
    """Host times crossing 2³² − 2 (the fifth byte of a page's time): the requests fed from host
    time 2³² − 3,000 on."""
    pages = 4096
    ops, first, n = _mixed_plan(4, pages, 400)
    start = (1 << 32) - 3000
    total = start + int(n[ops == OP_WRITE].sum())
    acc = DeathCounter(total, pages)
    assert acc.last_hi.size == pages and total - start > 6000
    acc.now = start
    for part in np.array_split(np.arange(len(ops)), 3):
        acc.feed(ops[part], first[part], n[part])
    ref = _brute_force_summary(ops, first, n, pages, total, start)
    assert ref.overwritten_pages > 3000
    assert acc.summary() == ref


def test_uniform_random_reduces_to_lambert_w() -> None:
    rng = np.random.default_rng(3)
    s = death_summary(*_pages(rng.integers(0, L, 12 * L)), L)
    p_eff = ftl_alpha(CFG) * L
    assert steady_state_waf(s, p_eff) == pytest.approx(analytical_waf(ftl_alpha(CFG)), rel=0.01)
    # the whole plan (the first pass has no GC) against the FTL playing it
    ops, first, n = _pages(np.concatenate([np.arange(L), rng.integers(0, L, 6 * L)]))
    model = workload_waf(death_summary(ops, first, n, L), CFG).waf
    assert model == pytest.approx(_ftl_waf(CFG, ops, first, n), rel=0.10)


def test_circular_sequential_is_one() -> None:
    ops, first, n = _pages(np.tile(np.arange(L), 5))
    pred = workload_waf(death_summary(ops, first, n, L), CFG)
    assert pred.waf == 1.0 and _ftl_waf(CFG, ops, first, n) == 1.0


def test_hot_cold_between_sequential_and_uniform_and_near_the_ftl() -> None:
    """A hot quarter written as a circular log (80 % of writes), the cold rest at random."""
    rng = np.random.default_rng(5)
    hot = L // 4
    k = 8 * L
    is_hot = rng.random(k) < 0.8
    seq = np.cumsum(is_hot) % hot
    lpns = np.concatenate([np.arange(L), np.where(is_hot, seq, rng.integers(hot, L, k))])
    ops, first, n = _pages(lpns)
    model = workload_waf(death_summary(ops, first, n, L), CFG).waf
    ftl = _ftl_waf(CFG, ops, first, n)
    assert 1.0 < model < analytical_waf(ftl_alpha(CFG))
    assert model == pytest.approx(ftl, rel=0.10)


@pytest.mark.parametrize("thres", [75, 90])
def test_femu_line_gc_near_the_ftl(thres: int) -> None:
    """FEMU's fixture geometry: random writes after a fill, where the 1/8 victim rule (75) or the
    background reserve (90) sets the WAF."""
    cfg = FtlConfig.femu(192, pgs_per_blk=256, blks_per_pl=64, luns_per_ch=2, nchs=2, gc_thres_pcent=thres)
    n_l = cfg.exposed_pages
    ops, first, n = _pages(np.concatenate([np.arange(n_l), np.random.default_rng(7).integers(0, n_l, 4 * n_l)]))
    pred = workload_waf(death_summary(ops, first, n, n_l), cfg)
    assert pred.waf == pytest.approx(_ftl_waf(cfg, ops, first, n), rel=0.10)
    assert pred.regime == "line background"


def test_the_regime_and_its_measured_error_reach_the_results_row() -> None:
    """A prediction names its regime; the estimate's row carries the bench's error measured there
    (waf_model.REGIME_ERRORS), and nulls where there is no prediction."""
    from kvwear.harness.estimate.estimator import regime_error_fields
    from kvwear.harness.estimate.schema import RESULTS
    from kvwear.harness.estimate.waf_model import REGIME_ERRORS, REGIMES, WafPrediction

    assert set(REGIME_ERRORS) <= set(REGIMES) and REGIME_ERRORS
    for e in REGIME_ERRORS.values():
        assert 0 <= e.within_10pct <= e.cases and 0 <= e.median_abs_error <= e.p90_abs_error
    rng = np.random.default_rng(3)
    ops, first, n = _pages(np.concatenate([np.arange(L), rng.integers(0, L, 6 * L)]))
    pred = workload_waf(death_summary(ops, first, n, L), CFG)
    assert pred.regime == "on-demand" and pred.regime_error is REGIME_ERRORS["on-demand"]
    row = regime_error_fields(pred)
    e = REGIME_ERRORS["on-demand"]
    assert row == {"waf_workload_regime_cases": e.cases, "waf_workload_regime_within_10pct": e.within_10pct / e.cases,
                   "waf_workload_regime_median_error": e.median_abs_error,
                   "waf_workload_regime_p90_error": e.p90_abs_error}
    assert set(row) <= set(RESULTS.schema.names)
    assert set(regime_error_fields(None).values()) == {None}
    light = WafPrediction(1.0, 1.0, "no GC")
    assert regime_error_fields(light)["waf_workload_regime_cases"] == (
        REGIME_ERRORS["no GC"].cases if "no GC" in REGIME_ERRORS else None)


@pytest.mark.parametrize("units", [12, 0])
def test_hot_cold_on_a_drive_whose_gc_copies_have_their_own_frontier(units: int) -> None:
    """90/10 hot/cold random writes where GC copies go to lines of their own (the enterprise
    presets): survivors gather in cold lines that greedy passes over; the model's greedy line
    groups follow the FTL (FIFO by age put it 13-22 % above). `units` 0: 64-page blocks, whose many
    small lines make the model renumber its line ids as it runs."""
    rng = np.random.default_rng(12)
    k = 8 * L
    hot = L // 10
    is_hot = rng.random(k) < 0.9
    lpns = np.where(is_hot, rng.integers(0, hot, k), rng.integers(hot, L, k))
    ppb = -(-int(L * 1.145) // (units - 3)) if units else 64
    cfg = FtlConfig.block_level(64 << 20, 0.145, pages_per_block=ppb, reserve_lines=1, separate_gc_line=True)
    ops, first, n = _pages(lpns)
    pred = workload_waf(death_summary(ops, first, n, L), cfg)
    ftl = _ftl_waf(cfg, ops, first, n)
    assert ftl > 1.05
    assert pred.waf == pytest.approx(ftl, rel=0.05)


def _ftl_until_steady(cfg: FtlConfig, req: tuple[np.ndarray, np.ndarray, np.ndarray], spec: PreconditionSpec) -> float:
    """The sim device's measurement: precondition, then the plan in passes until the workload's steady
    state (rounds of 1/4 of the drive); the steady window's WAF."""
    ftl = Ftl(cfg)
    precondition(ftl, spec)
    ph, _ = passes_until_steady(ftl, lambda: ftl.apply_ops(*req), default_round_pages(cfg.exposed_pages),
                                spec.criterion)
    assert ph.steady is not None and ph.steady.waf is not None
    return ph.steady.waf


def test_the_model_knows_a_preconditioned_drive() -> None:
    """A drive preconditioned to steady state holds static data outside the plan's footprint that
    GC must move: hot/cold random writes over half the LBAs, played until steady, on a drive of 24
    units. The fluid (and the model before it) took the drive as empty: WAF ≈ 1 from a summary whose
    pages fit the drive twice."""
    cfg = FtlConfig.block_level(64 << 20, 0.07, pages_per_block=768, reserve_lines=1, separate_gc_line=True)
    n = cfg.exposed_pages
    rng = np.random.default_rng(5)
    k = 2 * n
    hot = rng.random(k) < 0.8
    lpns = np.where(hot, rng.integers(0, n // 16, k), rng.integers(n // 16, n // 2, k))
    req = _pages(lpns)
    spec = PreconditionSpec("steady")
    measured = _ftl_until_steady(cfg, req, spec)
    pred = workload_waf(death_summary(*req, n), cfg, spec, until_steady=True)
    assert pred.regime == "preconditioned" and measured > 1.2
    assert abs(pred.waf / measured - 1) < 0.10, (pred.waf, measured)


def test_a_plan_json_with_a_summary_missing_or_out_of_range_is_refused(tmp_path: Path) -> None:
    """A version-2 plan.json whose death summary lacks a run-level field is not complete (no
    default fills it), and a run transition outside the model's table is refused when read, with
    the field named, not an IndexError inside run_model_waf."""
    import dataclasses

    from kvwear.harness.estimate.estimator import PlanRecord
    from kvwear.harness.plan.placement import PlacementStats
    from kvwear.harness.plan.planner import PlanCounts
    from kvwear.records import RecordError

    ops, first, n = _mixed_plan(1, 8192, 300)
    s = death_summary(ops, first, n, 8192)
    assert s.run_transitions and s.run_cells
    counts = PlanCounts(**{f.name: "log" if f.name == "layout" else 0 for f in dataclasses.fields(PlanCounts)
                           if f.default is dataclasses.MISSING})
    path = PlanRecord(counts, PlacementStats("none", 1, (0,), (0,)), s).dump(tmp_path / "plan.json")
    assert PlanRecord.load(path).death_summary == s
    good = json.loads(path.read_text())

    def refused(summary: dict[str, object], match: str) -> None:
        path.write_text(json.dumps({**good, "death_summary": summary}))
        with pytest.raises(RecordError, match=match) as e:
            PlanRecord.load(path)
        assert "\n" not in str(e.value) and str(path) in str(e.value)

    for name in ("run_cells", "run_transitions", "write_ios", "read_gaps", "trim_ios"):
        refused({k: v for k, v in good["death_summary"].items() if k != name},
                f"field death_summary.{name}: missing")
    # a version-2 summary (written before read_gaps and trim_ios) is refused by its version
    v2 = {k: v for k, v in good["death_summary"].items() if k not in ("read_gaps", "trim_ios")}
    refused({**v2, "version": 2}, "field death_summary.version: 2 is not one of 3")
    assert s.read_gaps
    refused({**good["death_summary"], "read_gaps": [[0, 3, 1, 9]]}, r"read_gaps row \[0, 3, 1, 9\]")
    nc = (run_bins(s.host_pages)[1] >> RUN_COARSE_SHIFT) + 2
    row = list(s.run_transitions[0])
    bands = len(s.band_start_pages)
    for bad in ([2, *row[1:]], [row[0], bands, *row[2:]], [*row[:2], nc, *row[3:]], [*row[:3], -2, row[4]],
                [*row[:4], 0]):
        refused({**good["death_summary"], "run_transitions": [bad]}, r"run_transitions row .*bin before")


def test_the_stream_plays_the_plans_requests_and_read_gaps_a_buffer_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run-level model's stream holds as many write host requests as the plan (a request's
    parts joined) and, before them, its reads (DeathSummary.read_gaps: here bursts of 50 reads
    every 8 writes and one read after every other write; the stream draws each gap, so its reads
    are the plan's up to that draw's noise); drawn and played a small buffer at a time it is the
    same stream (the same WAF, seed fixed)."""
    from kvwear.harness.estimate import waf_model

    cfg = FtlConfig.femu(192, pgs_per_blk=256, blks_per_pl=60, luns_per_ch=2, nchs=2)
    n_l = cfg.exposed_pages
    rng = np.random.default_rng(2)
    k = 3 * n_l // 64
    rows: list[tuple[int, int, int]] = []
    for i, slot in enumerate(rng.integers(0, n_l // 64, k)):
        rows += [(OP_READ, 0, 1)] * (50 if i % 8 == 0 else i % 2)
        rows.append((OP_WRITE, int(slot) * 64, 64))
    a = np.array(rows, np.int64)
    s = death_summary(a[:, 0].astype(np.int8), a[:, 1], a[:, 2], n_l)
    assert s.write_ios == k and sum(r[3] for r in s.read_gaps) == int((a[:, 0] == OP_READ).sum())
    seen, whole = _recorded_calls(monkeypatch, s, cfg)
    ops = np.concatenate([o for o, _ in seen])
    joined = np.concatenate([j for _, j in seen])
    assert len(seen) == 1
    assert (ops == OP_WRITE)[~joined].sum() == pytest.approx(k, rel=0.02)
    assert (ops == OP_READ).sum() == pytest.approx((a[:, 0] == OP_READ).sum(), rel=0.15)
    monkeypatch.setattr(waf_model, "_SYNTH_BUFFER", 500)
    seen, small = _recorded_calls(monkeypatch, s, cfg)
    assert len(seen) > 10 and max(len(o) for o, _ in seen) <= 500
    assert small == whole


def _recorded_calls(monkeypatch: pytest.MonkeyPatch, s: DeathSummary, cfg: FtlConfig
                    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], object]:
    """The run-level model's result for `s` on `cfg` and its stream as the FTL got it, call by
    call: op codes and joined marks."""
    from kvwear.harness.estimate import waf_model

    seen: list[tuple[np.ndarray, np.ndarray]] = []
    play = Ftl.apply_ops

    def recording(self: Ftl, ops: np.ndarray, first: np.ndarray, n: np.ndarray, handles: np.ndarray | None = None,
                  joined: np.ndarray | None = None) -> None:
        seen.append((ops.copy(), np.zeros(len(ops), bool) if joined is None else joined.copy()))
        play(self, ops, first, n, handles, joined)

    with monkeypatch.context() as mp:
        mp.setattr(Ftl, "apply_ops", recording)
        result = waf_model.run_model_waf(s, cfg)
    return seen, result


def _recorded_stream(monkeypatch: pytest.MonkeyPatch, s: DeathSummary, cfg: FtlConfig) -> tuple[np.ndarray, np.ndarray]:
    """The run-level model's stream for `s` on `cfg`: op codes and joined marks as the FTL got them."""
    seen, _ = _recorded_calls(monkeypatch, s, cfg)
    return np.concatenate([o for o, _ in seen]), np.concatenate([j for _, j in seen])


def test_the_stream_trims_in_as_many_requests_as_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects of 64 pages written into free slots and trimmed whole, one TRIM request each, a few
    at a time: the stream's TRIM host requests are the plan's (trim_ios), each of about an
    object's pages, not one per moment."""
    cfg = FtlConfig.femu(192, pgs_per_blk=256, blks_per_pl=60, luns_per_ch=2, nchs=2)
    n_l = cfg.exposed_pages
    slots = n_l // 64
    rng = np.random.default_rng(4)
    live: list[int] = []
    free = list(range(slots))
    rows: list[tuple[int, int, int]] = []
    for _ in range(4 * slots):
        if len(live) > slots * 3 // 4:
            for _ in range(int(rng.integers(1, 6))):
                v = live.pop(int(rng.integers(0, len(live) // 4 + 1)))
                rows.append((OP_TRIM, v * 64, 64))
                free.append(v)
        slot = free.pop(int(rng.integers(0, len(free))))
        rows.append((OP_WRITE, slot * 64, 64))
        live.append(slot)
    a = np.array(rows, np.int64)
    s = death_summary(a[:, 0].astype(np.int8), a[:, 1], a[:, 2], n_l)
    assert s.trim_ios == int((a[:, 0] == OP_TRIM).sum()) > 1000
    ops, joined = _recorded_stream(monkeypatch, s, cfg)
    assert ((ops == OP_TRIM) & ~joined).sum() == pytest.approx(s.trim_ios, rel=0.10)


def test_a_band_where_no_run_starts_draws_from_the_nearest_earlier_one() -> None:
    from kvwear.harness.estimate.waf_model import _band_sources

    # cells' first index per band, then the end: bands 1, 3 and 4 have none, band 0 has two
    assert _band_sources(np.array([0, 2, 2, 5, 5, 5])).tolist() == [0, 0, 2, 2, 2]
    # bands before the first with cells draw from it; no cells at all: each its own (nothing drawn)
    assert _band_sources(np.array([0, 0, 0, 3, 4])).tolist() == [2, 2, 2, 3]
    assert _band_sources(np.array([0, 0, 0])).tolist() == [0, 1]
