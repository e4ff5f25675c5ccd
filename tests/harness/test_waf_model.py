"""The workload WAF model: death-distance summary of a plan, and its GC model against the FTL."""

from __future__ import annotations

import numpy as np
import pytest

from emulator.ftl import OP_TRIM, OP_WRITE, Ftl, FtlConfig
from harness.estimate import analytical_waf, ftl_alpha
from harness.waf_model import DeathSummary, death_summary, steady_state_waf, workload_waf
from kvwear.errors import KvwearError

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
    assert DeathSummary.from_dict(s.as_dict()) == s
    # a trimmed page written again is not new footprint
    again = death_summary(np.array([OP_WRITE, OP_TRIM, OP_WRITE], np.int8), np.array([0, 0, 0]),
                          np.array([2, 2, 2]), 4)
    assert (again.footprint_pages, again.trimmed_pages, again.survivor_pages) == (2, 2, 2)
    with pytest.raises(KvwearError, match="version"):
        DeathSummary.from_dict({**s.as_dict(), "version": 99})
    with pytest.raises(KvwearError, match="outside"):
        death_summary(ops, np.array([0, 1, 7]), np.array([4, 1, 2]), 8)


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
