"""One quantitative statement of each paper, on small hand-built workloads: Gandalf and its oracle.

Prices are set so the arithmetic is round: a token costs c = $0.001 to recompute
(`gpu_usd_per_hour` 3.6 at 1 token/s) and a byte p_w = $10⁻⁶ to write (`ssd_usd_per_tb_written`
10⁶), so with 1,000 KV bytes per token one block of 16 tokens is worth 16·c = $0.016 per hit and
costs 16,000·p_w = $0.016 per γ to write: the break-even is γ = P (Gandalf, next hit only) and
γ = f (the oracle, all f future hits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvwear.policies.base import Policy
from kvwear.policies.config import SimConfig
from kvwear.policies.gandalf import _superseded
from kvwear.policies.sim import Simulator, simulate
from kvwear.policies.tree import LINEAR, Obj
from tests.policies.helpers import requests_table

BLOCK = 16
KV = 1000


def config(dram_blocks: int, ssd_blocks: int, state_bytes: int = 0) -> SimConfig:
    return SimConfig(dram_bytes=dram_blocks * BLOCK * KV + 2 * state_bytes, ssd_bytes=ssd_blocks * BLOCK * KV,
                     kv_bytes_per_token=KV, state_bytes=state_bytes, chunk_tokens=BLOCK,
                     gpu_usd_per_hour=3.6, recompute_tokens_per_s=1.0, ssd_usd_per_tb_written=1e6)


def record_admissions(pol: Policy, what: Callable[[Obj], Any]) -> list[tuple[Any, bool]]:
    """Wrap `pol.admit_to_ssd`: every decision as (what(obj), written)."""
    seen: list[tuple[Any, bool]] = []
    orig = pol.admit_to_ssd

    def checked(obj: Obj) -> bool:
        write = orig(obj)
        seen.append((what(obj), write))
        return write

    pol.admit_to_ssd = checked  # type: ignore[method-assign]
    return seen


def alternating(n: int) -> list[tuple[float, list[int]]]:
    # two one-block requests taking turns every 10 s: each evicts the other from a 1-block DRAM
    return [(10.0 * i, [i % 2]) for i in range(n)]


@pytest.mark.parametrize(("gamma", "writes"), [(0.5, True), (0.9, True), (1.0, False), (4.0, False)])
def test_gandalf_moves_a_block_iff_its_next_hit_beats_its_fee(gamma: float, writes: bool) -> None:
    """Gandalf §3: a block is moved iff P·n·c > γ·μ·p_w·s (the SSD has room: no victims). Here
    n·c = p_w·s, so the door opens iff P > γ; P ≤ 1, so at γ ≥ 1 nothing is ever written."""
    reqs = requests_table(alternating(40))
    sim = Simulator(config(1, 100), f"gandalf:gamma={gamma}")
    pol = sim.policy
    seen: list[tuple[float, bool]] = []
    orig = pol.admit_to_ssd

    def checked(obj: Obj) -> bool:
        write = orig(obj)
        p = pol.value(obj) / (obj.tokens * pol.c_token)  # type: ignore[attr-defined]
        seen.append((p, write))
        assert write == (p > gamma), (p, gamma, write)
        return write

    pol.admit_to_ssd = checked  # type: ignore[method-assign]
    sim.run_batch(reqs, 0)
    s = sim.finish().summary
    assert seen
    assert (s.ssd_write_bytes > 0) == writes, (s.ssd_write_bytes, seen[-3:])


def _states_by_last_key(sim: Simulator) -> dict[int, Any]:
    """The states of namespace 0's tree, by the last block key of the segment they end."""
    states = {}
    stack = list(sim.roots[0].children.values())
    while stack:
        seg = stack.pop()
        stack.extend(seg.children.values())
        if seg.state is not None:
            states[seg.keys[-1]] = seg.state
    return states


def test_gandalf_values_a_superseded_state_at_zero() -> None:
    """A linear state is reused once, by the next turn; once a later request extended its prefix
    and checkpointed deeper, the shallower state is worth nothing — unless the tree branches
    below it (a request may still end there)."""
    reqs = requests_table([(0.0, [1, 2]), (5.0, [1, 2, 3, 4]), (10.0, [1, 2, 3, 4, 5, 6]),
                           (15.0, [1, 2, 3, 4, 7])])
    sim = Simulator(config(100, 100, state_bytes=50 * KV), "gandalf:gamma=0")
    pol = sim.policy
    sim.run_batch(reqs, 0)
    states = _states_by_last_key(sim)
    assert set(states) == {2, 4, 6, 7}
    assert pol.value(states[2]) == 0.0                   # superseded by the state at 4
    assert pol.value(states[4]) > 0.0                    # a branch point: 4 → 5, 6 and 4 → 7
    assert pol.value(states[6]) > 0.0 and pol.value(states[7]) > 0.0   # request ends, live
    assert all(st.kind == LINEAR for st in states.values())


def test_gandalf_credits_only_the_state_that_served() -> None:
    """The state at 2 is superseded by the one at 4 (4 serves every later request), so however
    often later requests pass position 2, states of its class are never credited a reuse."""
    rows = [(0.0, [1, 2]), (1.0, [1, 2, 3, 4])] + [(2.0 + i, [1, 2, 3, 4, 10 + i]) for i in range(8)]
    # 256-token blocks: the states at 2 and 4 blocks (512, 1,024 tokens) fall in different classes
    sim = Simulator(config(1000, 1000, state_bytes=50 * KV), "gandalf:gamma=0")
    sim.run_batch(requests_table(rows, block_tokens=256), 0)
    pol = sim.policy
    reuses = {key: h.reuses - 1.0 for key, h in pol.hists.items() if key[0] == LINEAR}  # type: ignore[attr-defined]
    shallow = pol.class_of(sim.roots[0].children[1].state)  # type: ignore[attr-defined, arg-type]
    deep_state = sim.roots[0].children[1].children[3].state  # type: ignore[attr-defined]
    assert reuses.get(shallow, 0.0) < 1e-9, reuses
    assert deep_state is not None and deep_state.pdata[1] == 9   # served 8 later requests


@pytest.mark.parametrize("gamma", [0.5, 1.5, 2.5, 3.5])
def test_oracle_promotes_iff_all_future_hits_beat_the_fee(gamma: float) -> None:
    """The Gandalf paper's oracle: write x iff f_x·n·c > γ·p_w·s (SSD with room). Here n·c =
    p_w·s, so the threshold is f_x > γ: keys referenced 4, 3, 2 and 1 times are written while
    they have more than γ future references left."""
    keys = [0, 1, 2, 3, 0, 1, 2, 0, 1, 0]
    reqs = requests_table([(float(i), [k]) for i, k in enumerate(keys)])
    sim = Simulator(config(1, 100), f"belady:gamma={gamma}")
    sim.set_future(reqs)
    pol = sim.policy
    decided = record_admissions(pol, pol.future_hits)  # type: ignore[attr-defined]
    sim.run_batch(reqs, 0)
    sim.finish()
    assert decided
    for f, write in decided:
        assert write == (f > gamma), (f, gamma, decided)
    if gamma < 1:
        assert any(w for _, w in decided)
    if gamma > 3:   # no victim ever has more than 3 references left
        assert not any(w for _, w in decided)


def test_oracle_gamma_line_writes_less_as_gamma_grows() -> None:
    keys = [0, 1, 2, 3, 0, 1, 2, 0, 1, 0, 4, 5, 4, 5, 4]
    reqs = requests_table([(float(i), [k]) for i, k in enumerate(keys)])
    w = [simulate(reqs, config(1, 100), f"belady:gamma={g}").summary.ssd_write_bytes for g in (0, 1.5, 2.5, 8)]
    assert w == sorted(w, reverse=True) and w[0] > w[-1] == 0, w


@pytest.mark.parametrize(("gamma", "writes"), [(0.25, True), (0.45, True), (1.0, False)])
def test_gandalf_moves_a_cold_leaf_under_a_hot_shared_prefix(gamma: float, writes: bool) -> None:
    """Issue #11: three sessions share block 0 and take turns on their own block (DRAM holds two
    blocks), so the only root-side node is the hot block 0 (w at its 1 s floor) and every leaf
    is cold (w = 20 s). Pricing only root-side moves, M = γ·p_w/1 s never beat a leaf's
    D = P·p_w/20 s and nothing was written at any γ > 0.05. The leaf is weighed against its own
    move, which writes its DRAM-only run (block 0 first): written iff P·n·c > γ·p_w·(run bytes),
    so P > 2γ while block 0 is DRAM-only, P > γ once it is on SSD; P ≤ 1, so never at γ = 1."""
    rows = [(10.0 * i, [0, 100 + i % 3]) for i in range(60)]
    sim = Simulator(config(2, 100), f"gandalf:gamma={gamma}")
    seen = record_admissions(sim.policy, lambda obj: obj.start)  # type: ignore[attr-defined]
    sim.run_batch(requests_table(rows), 0)
    s = sim.finish().summary
    assert (s.ssd_write_bytes > 0) == writes, (s.ssd_write_bytes, seen[-6:])
    if writes:
        # the shared block went first (the prefix rule), then a session's own block; with the
        # third session's block on SSD the three fit (later at γ = 0.45: P must reach 2γ = 0.9)
        assert seen[[w for _, w in seen].index(True)][0] == 0
        assert s.ssd_write_bytes == 2 * BLOCK * KV
        assert s.token_miss_ratio < simulate(requests_table(rows), config(2, 100),
                                             "gandalf:gamma=1").summary.token_miss_ratio - 0.25


def test_gandalf_prices_a_state_by_the_tokens_back_to_the_resident_state_above() -> None:
    """A state's next hit saves the tokens between the deepest resident state above it (where
    the hit would fall back without it) and its own end, not its whole prefix: with states
    resident at 2, 4, 6 and 7 blocks (4 a branch point), the states at 6, 7 and 4 are worth
    2/6, 1/5 and 2/4 of their whole-prefix value (`state_tokens=prefix`). Every state above is
    resident, so pricing each by its own segment (`state_tokens=segment`) gives the same values."""
    reqs = requests_table([(0.0, [1, 2]), (5.0, [1, 2, 3, 4]), (10.0, [1, 2, 3, 4, 5, 6]),
                           (15.0, [1, 2, 3, 4, 7])])
    vals = []
    for mode in ("marginal", "prefix", "segment"):
        sim = Simulator(config(100, 100, state_bytes=50 * KV), f"gandalf:gamma=0,state_tokens={mode}")
        sim.run_batch(reqs, 0)
        states = _states_by_last_key(sim)
        assert all(st.tiers for st in states.values())
        vals.append({k: sim.policy.value(st) for k, st in states.items()})  # type: ignore[attr-defined]
    marginal, prefix, segment = vals
    for key, share in ((6, 2 / 6), (7, 1 / 5), (4, 2 / 4)):
        assert prefix[key] > 0 and marginal[key] == pytest.approx(prefix[key] * share), (key, marginal, prefix)
    assert segment == pytest.approx(marginal), (segment, marginal)


@pytest.mark.parametrize("gamma", [0.5, 2.0])
def test_gandalf_never_moves_a_superseded_state(gamma: float) -> None:
    """Gandalf: a linear state is reused once, by the next turn, so a state whose prefix a later
    request already extended (and checkpointed deeper) is worth 0 and never worth its fee at
    γ > 0. Four interleaved append-only sessions through a DRAM of a few states: every state
    that reaches the SSD door superseded is dropped, while live states are written."""
    rows = sorted((s * 0.5 + 3.0 * t, [1000 * s + j for j in range(4 * (t + 1))])
                  for t in range(8) for s in range(4))
    sim = Simulator(config(12, 400, state_bytes=8 * KV), f"gandalf:gamma={gamma}")
    seen = record_admissions(sim.policy, lambda obj: (obj.kind, obj.kind == LINEAR and _superseded(obj)))
    sim.run_batch(requests_table(rows), 0)
    s = sim.finish().summary
    superseded = [w for (_, sup), w in seen if sup]
    assert superseded and not any(superseded), seen
    assert any(w for (kind, sup), w in seen if kind == LINEAR and not sup), seen
    assert s.ssd_write_objects_linear > 0


@pytest.mark.parametrize("gamma", [4.0, 8.0])
def test_gandalf_segment_pricing_never_moves_a_tip_whose_own_segment_is_short(gamma: float) -> None:
    """`state_tokens=segment` prices a state by its own tokens (since the previous checkpoint
    position on its path, resident or not). Three append-only sessions take turns, each turn one
    block (16 tokens) longer than the last, through a DRAM of 12 blocks and two states of 1.6 MB:
    a tip's own segment is worth P·16·c ≤ $0.016 against its fee γ·p_w·1.6 MB = γ·$0.016 (writes at
    $10⁻⁸ a byte), so no state is ever moved, and its KV, useless without it, neither; the marginal
    reading prices the same tip at its whole prefix (no state above it is resident) and moves it.
    Dropped tips are credited wherever the next turn passes them (`ghost_credit=inside`): counted
    only at segment ends, their reuse is lost once their KV is dropped too, P stays under 0.1 and
    neither reading moves anything."""
    rows = sorted((s + 10.0 * t, [1000 * s + j for j in range(10 + t)]) for t in range(12) for s in range(3))
    cfg = SimConfig(dram_bytes=12 * BLOCK * KV + 2 * 100 * BLOCK * KV, ssd_bytes=4000 * BLOCK * KV,
                    kv_bytes_per_token=KV, state_bytes=100 * BLOCK * KV, chunk_tokens=BLOCK,
                    gpu_usd_per_hour=3.6, recompute_tokens_per_s=1.0, ssd_usd_per_tb_written=1e4)
    written = {}
    for mode in ("segment", "marginal"):
        sim = Simulator(cfg, f"gandalf:gamma={gamma},state_tokens={mode},ghost_credit=inside")
        seen = record_admissions(sim.policy, lambda obj: obj.kind)
        sim.run_batch(requests_table(rows), 0)
        s = sim.finish().summary
        assert sum(kind == LINEAR for kind, _ in seen) > 30, seen  # every session's tip reached the door
        written[mode] = (s.ssd_write_objects_linear, s.ssd_write_bytes, s.token_miss_ratio)
    assert written["segment"] == (0, 0, 1.0), written
    assert written["marginal"][0] > 0 and written["marginal"][2] < 0.5, written
    ends = simulate(requests_table(rows), cfg, f"gandalf:gamma={gamma}").summary
    assert ends.ssd_write_bytes == 0, ends
