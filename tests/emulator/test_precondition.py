"""SNIA PTS preconditioning of the embedded FTL: the steady-state test as the standard states it,
the fill and the random rounds, their counts kept apart, and drive copies that replay identically."""

from __future__ import annotations

import numpy as np
import pytest

from kvwear.emulator.ftl import OP_WRITE, Ftl, FtlConfig
from kvwear.emulator.precondition import (
    PreconditionSpec,
    SteadyCriterion,
    default_round_pages,
    mser_cut,
    precondition,
    split_phases,
    tracked,
)
from kvwear.errors import KvwearError

PAGES = 1 << 15                     # a 128 MiB drive of 4 KiB pages


def _drive(op: float = 0.15, **kw: object) -> Ftl:
    return Ftl(FtlConfig.block_level(PAGES * 4096, op, pages_per_block=256, **kw))  # type: ignore[arg-type]


def test_criterion_is_ptss_range_and_slope_over_the_window() -> None:
    c = SteadyCriterion()
    flat = np.full(5, 0.5)
    assert c.measure(flat) == pytest.approx((0.0, 0.0))
    assert c.first_window(np.r_[0.1, 0.2, flat]) == 6                 # the first window of five flat rounds
    # range exactly 20 % of the mean holds; just above does not
    mean = 1.0
    ok = np.array([0.9, 1.1, 0.9, 1.1, 1.0]) * mean
    assert c.measure(ok)[0] == pytest.approx(0.2)
    assert c.first_window(ok) == 4
    assert c.first_window(np.array([0.89, 1.11, 0.89, 1.11, 1.0])) is None
    # a steady climb: range within 20 % but the fitted line moves > 10 % of the mean across the window
    climb = np.linspace(1.0, 1.15, 5)
    exc, slope = c.measure(climb)
    assert exc < 0.2 and slope == pytest.approx(0.15 / climb.mean())
    assert c.first_window(climb) is None
    with pytest.raises(KvwearError, match="max rounds"):
        SteadyCriterion(window=5, max_rounds=4)


def test_tracked_variable_is_host_share_of_nand_writes() -> None:
    assert tracked(np.array([100, 100, 0]), np.array([0, 300, 0])).tolist() == [1.0, 0.25, 0.0]


def test_fill_writes_the_capacity_fill_loops_times_sequentially() -> None:
    ftl = _drive()
    res = precondition(ftl, PreconditionSpec("fill", fill_loops=2))
    c = ftl.counters()
    assert res.counters.host_pages == c.host_pages == 2 * PAGES
    assert res.fill.host_pages == 2 * PAGES and res.random is None
    assert c.gc_pages == res.counters.gc_pages == 0                     # sequential overwrite: GC finds empty units
    assert ftl.mapped_pages() == PAGES
    ftl.check_invariants()
    with pytest.raises(KvwearError, match="purged"):
        precondition(ftl, PreconditionSpec("fill"))


def test_steady_runs_random_rounds_until_the_criterion_and_keeps_its_counts() -> None:
    ftl = _drive()
    spec = PreconditionSpec("steady", round_pages=PAGES // 4)
    res = precondition(ftl, spec)
    r = res.random
    assert r is not None and r.reached and res.steady_state_reached
    # the rounds are exactly round_pages host pages each and stop at the first steady window
    assert set(r.host_per_round) == {PAGES // 4}
    assert r.steady_round == len(r.host_per_round) - 1
    assert r.tail.host_pages == 0
    # fill + random rounds = everything preconditioning wrote = the drive's counters
    assert res.counters.host_pages == res.fill.host_pages + sum(r.host_per_round) == ftl.counters().host_pages
    assert res.counters.gc_pages == sum(r.gc_per_round) == ftl.counters().gc_pages
    steady = r.steady
    assert steady is not None and steady.waf is not None and steady.waf > 2.0   # random 4 KiB at 15 % OP
    ftl.check_invariants()
    # seeded: the same spec gives the same drive, another seed another one
    again = _drive()
    assert precondition(again, spec).counters == res.counters
    assert np.array_equal(again._l2p, ftl._l2p)
    other = _drive()
    precondition(other, PreconditionSpec("steady", round_pages=PAGES // 4, seed=2))
    assert not np.array_equal(other._l2p, ftl._l2p)


def test_steady_stops_at_max_rounds_and_says_it_was_not_reached() -> None:
    ftl = _drive()
    never = SteadyCriterion(window=5, excursion=1e-9, slope=1e-9, max_rounds=6)
    res = precondition(ftl, PreconditionSpec("steady", round_pages=PAGES // 8, criterion=never))
    assert res.random is not None and not res.random.reached and len(res.random.host_per_round) == 6
    assert res.as_dict()["steady_state_reached"] is False


def test_default_round_is_a_quarter_of_the_capacity() -> None:
    assert default_round_pages(PAGES) == PAGES // 4


def test_phases_partition_the_rounds() -> None:
    c = SteadyCriterion(window=3, max_rounds=10)
    host = np.array([100, 100, 100, 100, 100, 100])
    gc = np.array([300, 150, 20, 22, 21, 20])
    ph = split_phases(np.cumsum(host), np.cumsum(gc), 100, c, end=(650, 540))
    assert ph.steady_round == 4                                          # PTS: rounds 2–4 are its first window
    assert ph.cut == 2                                                   # MSER cuts the two rounds of heavy GC
    assert (ph.transient.rounds, ph.transient.host_pages, ph.transient.gc_pages) == (2, 200, 450)
    assert ph.steady is not None and (ph.steady.rounds, ph.steady.gc_pages) == (4, 83)   # every round after
    assert ph.lifetime_waf() == pytest.approx(483 / 400)
    assert (ph.tail.host_pages, ph.tail.gc_pages) == (50, 7)
    assert ph.transient.host_pages + ph.steady.host_pages + ph.tail.host_pages == 650
    rising = split_phases(np.cumsum(host), np.cumsum([0, 100, 300, 600, 1000, 1500]), 100, c)
    assert not rising.reached and rising.steady is not None
    assert rising.transient.rounds + rising.steady.rounds == 6
    short = split_phases(np.cumsum(host[:2]), np.cumsum(gc[:2]), 100, c)
    assert short.steady is None and short.lifetime_waf() is None and short.transient.rounds == 2


def test_mser_cuts_the_warm_up_and_the_steady_state_is_the_mean_of_the_bursts() -> None:
    """A replay whose rounds swing with bursts (WAF 1 and 3 in turn, after a transient at 6): a PTS
    window holds on its one calm stretch (five rounds at 1.0), which as the lifetime's WAF would be
    half the mean; the steady state is every round after the transient and its WAF is the mean."""
    rng = np.random.default_rng(3)
    waf = np.concatenate([np.linspace(6.0, 3.0, 8), np.tile([1.0, 3.0], 30)])
    waf[40:45] = 1.0
    waf[8:] += rng.normal(0.0, 0.01, waf.size - 8)
    host = np.full(waf.size, 1000)
    gc = np.round((waf - 1.0) * 1000).astype(np.int64)
    assert mser_cut(waf) in range(5, 11)                                  # the batch of 5 holding the warm-up's end
    ph = split_phases(np.cumsum(host), np.cumsum(gc), 1000, SteadyCriterion())
    assert ph.reached and ph.steady_round == 44                          # the calm stretch
    steady = ph.steady
    assert steady is not None and steady.rounds == waf.size - ph.cut
    assert steady.waf == pytest.approx(float(waf[ph.cut:].mean()), rel=1e-3)
    assert 1.8 < steady.waf < 2.1                                        # the bursts' mean, not the calm window's 1.0
    assert mser_cut(np.full(40, 2.0)) == 0                               # nothing to cut
    assert mser_cut(np.array([5.0])) == 0


def test_a_copy_is_an_independent_drive_in_the_same_state() -> None:
    ftl = _drive()
    precondition(ftl, PreconditionSpec("steady", round_pages=PAGES // 4))
    twin = ftl.copy()
    rng = np.random.default_rng(5)
    lpns = rng.integers(0, PAGES, 20_000)
    ops, one = np.full(lpns.size, OP_WRITE, np.int8), np.ones(lpns.size, np.int64)
    before = ftl.counters()
    ftl.apply_ops(ops, lpns, one)
    assert twin.counters() == before                                     # untouched by the original's writes
    twin.apply_ops(ops, lpns, one)
    assert twin.counters() == ftl.counters()
    assert np.array_equal(twin._l2p, ftl._l2p)
    twin.check_invariants()


def test_intervals_restart_where_preconditioning_ended() -> None:
    ftl = _drive()
    precondition(ftl, PreconditionSpec("fill"))
    start = ftl.counters().host_pages
    ftl.restart_intervals(1000)
    ftl.write(np.arange(2500))
    iv = ftl.intervals()
    assert iv.host_pages.tolist() == [start + 1000, start + 2000]
    assert ftl.interval_every == 1000
