"""Interleaved timing for the benchmarks' peer pairs: every side runs once per round, the rounds
alternate the sides (A B, B A, A B, …), and each side's CPU and wall times are kept per round.

Why interleaved: on a shared machine the load drifts over minutes; timing one side's repeats and
then the other's lets that drift decide the ratio (issue #31 saw one ratio range 3.2×–8.3× across
runs that way). Rounds of one run of each side put both under the same load. The first side of a
round also leaves caches and the allocator warm for the second, so the order rotates each round
(with two sides: A B, B A, A B, …) and neither side always goes first.

CPU time is this process's (every thread: `time.process_time`) plus that of the child processes
it waited for during the call (`RUSAGE_CHILDREN`: fio, bpftrace, `kvwear` subprocesses). It is the
work done, which other tenants do not inflate; wall time is printed beside it, since the work of
a kernel thread (a loop device's worker) or of a child not yet reaped counts in wall time only.

A side may have untimed `before`/`after` steps (attach a tracer, check a result, delete files):
they run around the timed call in the same round. A side that makes a process work which this
one does not wait for during the call (a tracer's daemon) names a clock of that process's CPU
seconds (`extra_cpu`, e.g. `proc_cpu_s(pid)`), read before and after the call and added. An
untimed warm-up round runs first (numba compiles, the page cache fills) unless `warmup=0`.
A side whose work runs where this process cannot time it alone (a child process that must not
count its start-up, a guest's fio) times itself and returns `SelfTimed`: its times are used.

Must not: time anything but the side's own call, or report a ratio over rounds in which either
side was missing; it does not judge a ratio (the bench states its target).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the fewest timed rounds a bench may print a ratio from (the benches' shared rule)
MIN_ROUNDS = 5


def add_round_options(ap: argparse.ArgumentParser) -> None:
    """A bench's `--rounds` (≥ MIN_ROUNDS) and `--smoke` (one round, no warm-up: the form
    tests/bench/test_benches_run.py runs to check that the bench runs; its ratios are one sample)."""
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS, help=f"interleaved timed rounds (≥ {MIN_ROUNDS})")
    ap.add_argument("--smoke", action="store_true",
                    help="one round, no warm-up, to check the bench runs: a ratio of one sample means nothing")


def rounds_of(args: argparse.Namespace) -> dict[str, int]:
    """interleave()'s rounds, warm-up and minimum for a bench's parsed `add_round_options`."""
    return {"rounds": 1, "warmup": 0, "min_rounds": 1} if args.smoke else {"rounds": args.rounds}


@dataclass(frozen=True)
class Side:
    """One side of a comparison: `run` is timed; `before` and `after` (untimed) run around it in
    the same round, `after` getting `run`'s return value."""

    run: Callable[[], Any]
    before: Callable[[], None] | None = None
    after: Callable[[Any], None] | None = None
    extra_cpu: Callable[[], float] | None = None


@dataclass(frozen=True)
class SelfTimed:
    """What a side that timed its own work returns: its CPU and wall seconds, and its result."""

    cpu_s: float
    wall_s: float
    value: Any = None


@dataclass(frozen=True)
class Times:
    """One side's per-round times, in seconds."""

    cpu_s: tuple[float, ...]
    wall_s: tuple[float, ...]

    def stat(self, clock: str, how: str) -> float:
        xs = self.cpu_s if clock == "cpu" else self.wall_s
        return min(xs) if how == "min" else statistics.median(xs)


@dataclass(frozen=True)
class Ratio:
    """How many times faster `side` ran than `peer`: peer time / side time, from the minima and
    from the medians over the rounds, on each clock."""

    cpu_min: float
    cpu_median: float
    wall_min: float
    wall_median: float

    def text(self) -> str:
        return (f"CPU min {self.cpu_min:.3f}× median {self.cpu_median:.3f}×, "
                f"wall min {self.wall_min:.3f}× median {self.wall_median:.3f}×")


@dataclass(frozen=True)
class Interleaved:
    """Every side's times over the same rounds, and each side's last return value (`SelfTimed`
    ones as they came)."""

    times: Mapping[str, Times]
    rounds: int
    last: Mapping[str, Any] = field(default_factory=dict)

    def ratio(self, side: str, peer: str) -> Ratio:
        """`side`'s speed over `peer`'s (> 1: `side` is faster)."""
        a, b = self.times[side], self.times[peer]
        r = {f"{c}_{h}": b.stat(c, h) / a.stat(c, h) for c in ("cpu", "wall") for h in ("min", "median")}
        return Ratio(**r)

    def table(self, reference: str, work: Mapping[str, float] | None = None, unit: str = "") -> list[str]:
        """One line per side: min and median CPU and wall seconds, and its speed over `reference`
        by CPU and by wall time (min, median); with `work` (units of work per side, e.g. ops),
        also the rate at the median CPU time."""
        head = (f"{'side':<28}{'CPU min':>9}{'median':>9}{'wall min':>10}{'median':>9}"
                f"{'× ref CPU min/med':>19}{'× ref wall min/med':>20}")
        label = f"{unit}/CPU s (median)"
        width = max(22, len(label) + 2)
        if work:
            head += f"{label:>{width}}"
        lines = [head]
        for name, t in self.times.items():
            r = self.ratio(name, reference)
            line = (f"{name:<28}{t.stat('cpu', 'min'):>9.3f}{t.stat('cpu', 'median'):>9.3f}"
                    f"{t.stat('wall', 'min'):>10.3f}{t.stat('wall', 'median'):>9.3f}"
                    f"{r.cpu_min:>11.3f}/{r.cpu_median:<7.3f}{r.wall_min:>12.3f}/{r.wall_median:<7.3f}")
            if work:
                line += f"{work[name] / t.stat('cpu', 'median'):>{width},.0f}"
            lines.append(line)
        lines.append(f"({self.rounds} interleaved rounds, order rotated each round; × ref: "
                     f"{reference}'s time / the side's, > 1 is faster)")
        return lines


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (/proc/PID/stat), threads included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cpu_now() -> float:
    """CPU seconds of this process and of the children it has waited for, so far (the clock
    `interleave` reads; for a `SelfTimed` side that counts its whole call's CPU)."""
    return time.process_time() + _children_cpu_s()


def order(names: Sequence[str], round_no: int) -> list[str]:
    """The sides' order in round `round_no`: rotated by one each round."""
    k = round_no % len(names)
    return list(names[k:]) + list(names[:k])


def interleave(sides: Mapping[str, Side | Callable[[], Any]], rounds: int = MIN_ROUNDS, warmup: int = 1,
               min_rounds: int = MIN_ROUNDS) -> Interleaved:
    """Time every side once per round for `rounds` rounds (after `warmup` untimed ones), the
    order rotating each round. A plain callable is a `Side` with nothing around it."""
    if rounds < min_rounds:
        raise ValueError(f"rounds: {rounds} < {min_rounds}, too few to print a ratio from")
    if rounds < MIN_ROUNDS:
        print(f"smoke: {rounds} timed round(s), {warmup} warm-up: the ratios below mean nothing")
    if len(sides) < 2:
        raise ValueError("interleave: needs at least two sides")
    norm = {k: v if isinstance(v, Side) else Side(v) for k, v in sides.items()}
    names = list(norm)
    cpu: dict[str, list[float]] = {k: [] for k in names}
    wall: dict[str, list[float]] = {k: [] for k in names}
    last: dict[str, Any] = {}
    for r in range(-warmup, rounds):
        for name in order(names, r):
            s = norm[name]
            if s.before is not None:
                s.before()
            x0 = s.extra_cpu() if s.extra_cpu is not None else 0.0
            c0, k0, w0 = time.process_time(), _children_cpu_s(), time.perf_counter()
            out = s.run()
            w1, c1, k1 = time.perf_counter(), time.process_time(), _children_cpu_s()
            x1 = s.extra_cpu() if s.extra_cpu is not None else 0.0
            if s.after is not None:
                s.after(out)
            last[name] = out
            if r >= 0:
                if isinstance(out, SelfTimed):
                    cpu[name].append(out.cpu_s)
                    wall[name].append(out.wall_s)
                else:
                    cpu[name].append((c1 - c0) + (k1 - k0) + (x1 - x0))
                    wall[name].append(w1 - w0)
    return Interleaved({k: Times(tuple(cpu[k]), tuple(wall[k])) for k in names}, rounds, last)
