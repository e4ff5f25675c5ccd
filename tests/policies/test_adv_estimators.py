"""The policy-independent math of the advanced policies (policies/_estimators.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvwear.policies._estimators import (
    BranchPredictor,
    FlopModel,
    SlidingExpFit,
    WriteBudget,
    drop_cost_per_byte,
    exp_cdf,
    log_reuse_prob,
    merit_score,
    minmax,
    move_cost,
    reuse_prob,
    survival_exp,
)


def test_sliding_fit_recovers_rate_and_forgets_old_samples() -> None:
    rng = np.random.default_rng(7)
    fit = SlidingExpFit(window_s=3600.0, prior_weight=0.0)
    # first hour: mean 10 s; second hour: mean 100 s
    for i, x in enumerate(rng.exponential(10.0, 20_000)):
        fit.observe(i * 3600.0 / 20_000, x)
    assert fit.rate(3600.0) == pytest.approx(0.1, rel=0.03)
    for i, x in enumerate(rng.exponential(100.0, 20_000)):
        fit.observe(3600.0 + 1.0 + i * 3600.0 / 20_000, x)
    # everything from the first hour has left the window
    assert fit.rate(7201.0) == pytest.approx(0.01, rel=0.03)
    assert fit.count(7201.0) == 20_000
    assert fit.count(1e9) == 0
    assert fit.rate(1e9) == fit.prior_rate_per_s


def test_prior_regularizes_small_windows() -> None:
    fit = SlidingExpFit(window_s=100.0, prior_rate_per_s=0.5, prior_weight=1.0)
    assert fit.rate(0.0) == 0.5
    fit.observe(1.0, 2.0)  # one sample of 2 s with one pseudo-sample of 2 s
    assert fit.rate(1.0) == pytest.approx(2 / 4.0)
    with pytest.raises(ValueError):
        SlidingExpFit(window_s=0)


def test_reuse_prob_is_cdf_difference() -> None:
    lam, t, life = 0.02, 30.0, 120.0
    assert reuse_prob(t, life, lam) == pytest.approx(exp_cdf(t + life, lam) - exp_cdf(t, lam))
    assert math.exp(log_reuse_prob(t, life, lam)) == pytest.approx(reuse_prob(t, life, lam))
    # underflow: both probabilities are 0.0 as doubles, logs still order them like LRU
    assert reuse_prob(1e5, life, 1.0) == 0.0
    assert log_reuse_prob(1e5, life, 1.0) > log_reuse_prob(1e5 + 1, life, 1.0)
    assert log_reuse_prob(1.0, 0.0, 1.0) == -math.inf


@given(st.floats(0, 1e4), st.floats(0, 1e4), st.floats(1e-4, 10), st.floats(0.1, 1e3))
def test_log_reuse_prob_decreases_with_idle_time(t1: float, t2: float, lam: float, life: float) -> None:
    a, b = sorted((t1, t2))
    assert log_reuse_prob(a, life, lam) >= log_reuse_prob(b, life, lam)


def test_gandalf_costs() -> None:
    p = survival_exp(10.0, 0.1)
    assert p == pytest.approx(math.exp(-1))
    d = drop_cost_per_byte(p, n_tokens=64, cost_per_token=1e-6, size_bytes=1000, idle_s=10.0)
    assert d == pytest.approx(p * 64 * 1e-6 / (1000 * 10.0))
    # just-touched objects are floored, not infinite
    assert drop_cost_per_byte(1.0, 1, 1.0, 1.0, 0.0, min_idle_s=2.0) == 0.5
    assert move_cost(8, 2.0, 1e-12, 1e9, displaced_value=0.5) == pytest.approx(8 * 2 * 1e-3 + 0.5)
    with pytest.raises(ValueError):
        drop_cost_per_byte(1.0, 1, 1.0, 0.0, 1.0)


def test_write_budget_controller() -> None:
    wb = WriteBudget(tbw_bytes=1e12, target_lifetime_s=1e6, warmup_s=10.0)
    # budget rate 1 MB/s: on budget → μ = 1; double → 2; half → 0.5
    wb.record_write(100e6)
    assert wb.mu(100.0) == pytest.approx(1.0)
    assert wb.mu(50.0) == pytest.approx(2.0)
    assert wb.mu(200.0) == pytest.approx(0.5)
    assert wb.mu(1e9) == wb.mu_min
    wb.record_write(1e15)
    assert wb.mu(100.0) == wb.mu_max
    fixed = WriteBudget(1e12, 1e6, mode="fixed")
    fixed.record_write(1e15)
    assert fixed.mu(1.0) == 1.0
    with pytest.raises(ValueError, match="valid: fixed, ratio"):
        WriteBudget(1e12, 1e6, mode="pid")


def test_flop_model() -> None:
    fm = FlopModel.from_architecture(active_params=1e9, full_attn_layers=4, attn_dim=1024)
    assert fm.prefill_flops(1000) == pytest.approx(2e9 * 1000 + 8 * 1024 * 1000**2)
    assert fm.flops_saved(1000, 2000) == pytest.approx(fm.prefill_flops(2000) - fm.prefill_flops(1000))
    # quadratic term: the same number of tokens saves more deeper in the context
    assert fm.flops_saved(10_000, 11_000) > fm.flops_saved(0, 1000)
    assert minmax(5, 0, 10) == 0.5 and minmax(5, 5, 5) == 0.0 and minmax(20, 0, 10) == 1.0


def test_branch_predictor() -> None:
    bp = BranchPredictor()
    assert bp.observe([1, 2, 3, 4]) is None          # nothing seen
    assert bp.observe([1, 2, 3, 4, 5, 6]) is None    # grows past an end: input+output reuse
    assert bp.observe([1, 2, 7, 8]) == 2             # forks the path after block 2
    assert bp.observe([1, 2, 9]) == 2                # an existing fork
    assert bp.observe([1, 2]) is None                # nothing past the seen prefix
    assert bp.observe([10, 11]) is None


def test_merit_score() -> None:
    assert merit_score(1.0, 0.1, 0.2, 0.3, 0.1) == pytest.approx(0.3)


@given(st.lists(st.tuples(st.sampled_from("sdp"), st.integers(0, 20), st.integers(0, 50)), max_size=300))
def test_lazy_heap_matches_a_dict(ops: list[tuple[str, int, int]]) -> None:
    from kvwear.policies._estimators import LazyMinHeap

    h, ref = LazyMinHeap(), {}
    for op, item, key in ops:
        if op == "s":
            h.set(item, key)
            ref[item] = key
        elif op == "d":
            h.discard(item)
            ref.pop(item, None)
        else:
            got = h.pop()
            if not ref:
                assert got is None
            else:
                assert got is not None and got[0] == min(ref.values()) and ref[got[1]] == got[0]
                del ref[got[1]]
        assert len(h) == len(ref)
        top = h.peek()
        assert (top is None) == (not ref)
        if top is not None:
            assert top[0] == min(ref.values())


def test_reuse_histogram() -> None:
    from kvwear.policies._estimators import ReuseHistogram

    h = ReuseHistogram(prior_entries=0.0, prior_reuses=0.0)
    assert h.p_reuse(0.0) == 0.0
    # 100 objects: 30 reused after ~10 s, 10 after ~1000 s, 60 never
    for _ in range(100):
        h.entered()
    for _ in range(30):
        h.reused(10.0)
    for _ in range(10):
        h.reused(1000.0)
    assert h.p_reuse(0.0) == pytest.approx(0.4)
    assert h.p_reuse(100.0) == pytest.approx(10 / 70)
    assert h.p_reuse(1e6) == 0.0
    ws = [0.0, 0.01, 1.0, 9.0, 10.0, 11.0, 500.0, 1000.0, 2000.0, 1e9]
    ps = [h.p_reuse(w) for w in ws]
    assert ps == sorted(ps, reverse=True)
    h.decay(0.5)
    assert h.p_reuse(0.0) == pytest.approx(0.4)  # decay keeps ratios
    assert h.entries == pytest.approx(50.0)
    with pytest.raises(ValueError):
        ReuseHistogram(prior_entries=1.0, prior_reuses=2.0)


@pytest.mark.parametrize("capacity", [0, 1, 5, 300, 5_000])
def test_ghost_table_is_a_bounded_ordered_dict(capacity: int) -> None:
    """gandalf's compact ghost table answers every operation as the OrderedDict it replaced
    (insertion order, in-place update, the oldest forgotten past the bound), across ring
    rebuilds and growth: random keys with negative and 64-bit ids, random pops."""
    from collections import OrderedDict

    from kvwear.policies._history import GhostTable

    rng = random.Random(capacity)
    ref: OrderedDict[tuple[int, int, int], tuple[float, int]] = OrderedDict()
    g = GhostTable(capacity)
    pool = [(rng.randrange(2), rng.randrange(-3, 40),
             rng.choice([rng.randrange(-(1 << 63), 1 << 63), rng.randrange(200)])) for _ in range(3_000)]
    for step in range(40_000):
        key = rng.choice(pool)
        op = rng.random()
        if op < 0.55:
            v = (rng.random() * 1e6, rng.randrange(1, 1 << 40))
            ref[key] = v
            if len(ref) > capacity:
                ref.popitem(last=False)
            g.put(*key, v)
        elif op < 0.85:
            assert g.pop(*key) == ref.pop(key, None), step
        else:
            assert g.has(*key) == (key in ref), step
        assert len(g) == len(ref)
    assert all(g.has(*k) for k in ref)
    for k, v in list(ref.items()):
        assert g.pop(*k) == v
    assert len(g) == 0
