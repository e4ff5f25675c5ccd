"""bench/_interleave.py: the sides alternate, only the timed call counts, children's CPU is
counted, and too few rounds are refused."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from _interleave import Side, interleave, order


def test_order_rotates_each_round() -> None:
    assert [order("AB", r) for r in range(4)] == [["A", "B"], ["B", "A"], ["A", "B"], ["B", "A"]]
    assert order("ABC", 1) == ["B", "C", "A"]


def test_rounds_alternate_and_warmup_is_untimed() -> None:
    calls: list[str] = []
    res = interleave({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=5, warmup=1)
    assert calls == ["b", "a", "a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]   # warm-up round -1 first
    assert res.rounds == 5 and all(len(t.cpu_s) == 5 and len(t.wall_s) == 5 for t in res.times.values())


def test_before_and_after_are_not_timed_and_see_the_result() -> None:
    seen: list[int] = []
    slow = Side(run=lambda: 7, before=lambda: time.sleep(0.05), after=lambda out: (time.sleep(0.05), seen.append(out)))
    res = interleave({"slow-around": slow, "other": lambda: None}, rounds=5, warmup=0)
    assert max(res.times["slow-around"].wall_s) < 0.04
    assert seen == [7] * 5 and res.last["slow-around"] == 7


def test_cpu_counts_waited_children_and_ratio_reads_peer_over_side() -> None:
    burn = [sys.executable, "-c", "x = 0\nfor i in range(3_000_000): x += i"]
    res = interleave({"child": lambda: subprocess.run(burn, check=True), "idle": lambda: time.sleep(0.02)},
                     rounds=5, warmup=0)
    child, idle = res.times["child"], res.times["idle"]
    assert child.stat("cpu", "min") > 0.05              # the child's work, not this process's wait
    assert idle.stat("cpu", "median") < 0.01 and idle.stat("wall", "min") >= 0.02
    r = res.ratio("idle", "child")
    assert r.cpu_median > 5 and r.cpu_min == child.stat("cpu", "min") / idle.stat("cpu", "min")
    assert len(res.table("child", work={"child": 1, "idle": 1}, unit="runs")) == 4


def test_too_few_rounds_or_sides_refused() -> None:
    with pytest.raises(ValueError, match="too few"):
        interleave({"a": lambda: None, "b": lambda: None}, rounds=3)
    with pytest.raises(ValueError, match="two sides"):
        interleave({"a": lambda: None})
