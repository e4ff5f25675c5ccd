"""bench/_interleave.py: the sides alternate, only the timed call counts, children's CPU is
counted, and too few rounds are refused."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from _interleave import SelfTimed, Side, interleave, order, proc_cpu_s


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


def test_extra_cpu_counts_a_process_not_waited_for() -> None:
    spin = [sys.executable, "-c", "while True: pass"]
    procs: list[subprocess.Popen[bytes]] = []

    def until_daemon_spent(cpu_s: float) -> None:
        start = proc_cpu_s(procs[-1].pid)
        while proc_cpu_s(procs[-1].pid) - start < cpu_s:
            time.sleep(0.01)

    def stop(_: object) -> None:
        procs[-1].kill()
        procs[-1].wait()

    daemon = Side(run=lambda: until_daemon_spent(0.1), before=lambda: procs.append(subprocess.Popen(spin)),
                  after=stop, extra_cpu=lambda: proc_cpu_s(procs[-1].pid))
    res = interleave({"daemon": daemon, "alone": lambda: time.sleep(0.1)}, rounds=5, warmup=0)
    # the daemon's CPU during the call counts (its reaping, in `after`, is not timed)
    assert res.times["daemon"].stat("cpu", "min") >= 0.1
    assert res.times["alone"].stat("cpu", "median") < 0.05


def test_a_self_timed_side_reports_its_own_times() -> None:
    res = interleave({"child": lambda: SelfTimed(cpu_s=1.5, wall_s=2.0, value=7), "other": lambda: None},
                     rounds=5, warmup=0)
    assert res.times["child"].cpu_s == (1.5,) * 5 and res.times["child"].wall_s == (2.0,) * 5
    assert res.last["child"].value == 7
