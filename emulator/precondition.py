"""Preconditioning the embedded FTL as SNIA's Performance Test Specification does, and its test of
steady state, which also splits a workload's replay into its transient and its steady state.

SNIA's Solid State Storage Performance Test Specification (PTS, v2.0.x) measures a drive only in
steady state: purge the drive; workload-independent preconditioning (WIPC), twice the user capacity
in 128 KiB sequential writes; then workload-dependent preconditioning (WDPC), the test stimulus
itself, in rounds, until steady state holds (at most 25 rounds). Steady state holds when, over a
measurement window of 5 rounds, the tracked variable's range (max − min) is at most 20 % of its
mean and the best linear fit's excursion across the window at most 10 % of that mean.

Here (`precondition`):
- purge: the drive is a new `Ftl` (every page unmapped, every unit free);
- `fill` (WIPC): `fill_loops` (2) passes of sequential writes of `fill_io_bytes` (128 KiB);
- `steady`: the fill, then random 4 KiB writes (one page each, uniform over the exposed pages,
  drawn from numpy's PCG64 with `seed`) in rounds of `round_pages`, until `SteadyCriterion` holds or
  `max_rounds` pass (the result says which).
Choices where PTS is silent for an emulator (each a parameter):
- tracked variable: PTS tracks IOPS; the FTL has no clock. A drive whose writes are bound by NAND
  programming completes 1/WAF host writes per NAND write, so the variable is a round's host pages ÷
  (host + GC pages): proportional to IOPS in that regime and measured by the FTL itself.
- round: PTS rounds are timed (a minute per test point); here a round is a count of host pages,
  by default 1/8 of the exposed capacity (`default_round_pages`): a round then holds several
  reclaim units' worth of GC even on a drive scaled down to a few dozen units, so rounds are not
  dominated by single GC runs, and a window (5 rounds) is 5/8 of a drive write.
`split_phases` applies the same criterion to a workload's own rounds (the run replays the workload
until its steady state: kvwear.harness.devices.sim).

The steady-state WAF. PTS's window says *whether* a stationary stimulus has settled, and is where
PTS stops measuring. A KV-cache workload is not a stationary stimulus: its rounds swing with
eviction and TRIM bursts (measured: LRU's extent plan on FEMU's line GC, rounds of 1/4 of the drive
at WAF 1.00 next to rounds at 2–3), so a window that holds does so on a calm stretch, and any one
window is a sample of the bursts rather than their mean (on that plan: the FTL's last window 1.38,
the model's windows 1.00–1.37 by seed, where every round after the transient averages 1.44). The
WAF a lifetime takes (`Phases.steady`) is therefore the one over every whole round after the
transient, and the transient is cut where the mean of what remains is best determined: MSER-5
(the marginal standard error rule on batch means of `MSER_BATCH` rounds; White 1997, Franklin &
White 2008, the usual warm-up rule of steady-state simulation), over the rounds' WAF (the
quantity whose mean the lifetime takes), the cut at most half the rounds. The PTS window still
decides when the replay stops and whether the workload *reached* steady state, which the report
says beside the WAF.

Random writes are drawn and played in chunks through the numba kernel (`Ftl.apply_ops`), so
preconditioning a 268.8 GB drive (65.6 M pages) to steady state costs seconds, not minutes.
Must not: read or write files, or know about runs, plans and devices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from kvwear.emulator.ftl import OP_WRITE, Ftl, FtlCounters
from kvwear.errors import KvwearError

PreconditionMode = Literal["fill", "steady"]

# Random 4 KiB writes are drawn and played this many at a time (memory: ~17 bytes a page).
_CHUNK_PAGES = 1 << 20


MSER_BATCH = 5        # MSER-5's batch; a replay of fewer than 4 batches cuts by single rounds (MSER)


def mser_cut(waf_per_round: np.ndarray, batch: int = MSER_BATCH) -> int:
    """The transient's length in rounds by MSER (module docstring): over batch means y_k of `batch`
    rounds (single rounds when there are fewer than 4 batches), the d ≤ n/2 that minimises
    Σ_{k≥d} (y_k − ȳ_d)² / (n − d)², times the batch (0 for fewer than 2 rounds)."""
    y = np.asarray(waf_per_round, dtype=np.float64)
    b = batch if y.size >= 4 * batch else 1
    n = y.size // b
    if n < 2:
        return 0
    yb = y[:n * b].reshape(n, b).mean(axis=1)
    s1 = np.cumsum(yb[::-1])[::-1]                 # suffix sums: Σ_{k≥d} y_k and y_k²
    s2 = np.cumsum((yb * yb)[::-1])[::-1]
    d = np.arange(n // 2 + 1)
    m = n - d
    stat = np.maximum(s2[d] - s1[d] ** 2 / m, 0.0) / (m * m)
    return int(np.argmin(stat)) * b


@dataclass(frozen=True)
class SteadyCriterion:
    """PTS's steady-state test (module docstring): a window of `window` rounds whose range is at most
    `excursion` × its mean and whose least-squares line changes by at most `slope` × the mean across
    it; `max_rounds` bounds the rounds run while waiting for it."""

    window: int = 5
    excursion: float = 0.20
    slope: float = 0.10
    max_rounds: int = 25

    def __post_init__(self) -> None:
        if self.window < 2:
            raise KvwearError(f"steady-state window must be ≥ 2 rounds, got {self.window}")
        if not (self.excursion > 0 and self.slope > 0):
            raise KvwearError("steady-state excursion and slope limits must be > 0")
        if self.max_rounds < self.window:
            raise KvwearError(f"max rounds ({self.max_rounds}) must be ≥ the window ({self.window})")

    def measure(self, y: np.ndarray) -> tuple[float, float]:
        """(range ÷ mean, fitted line's change across the window ÷ mean) of one window."""
        y = np.asarray(y, dtype=np.float64)
        mean = float(y.mean())
        if mean <= 0:
            return float("inf"), float("inf")
        x = np.arange(y.size, dtype=np.float64)
        k = float(np.polyfit(x, y, 1)[0])
        return float(y.max() - y.min()) / mean, abs(k) * (y.size - 1) / mean

    def first_window(self, y: np.ndarray) -> int | None:
        """The last round of the first window in which steady state holds (None: none does)."""
        y = np.asarray(y, dtype=np.float64)
        for end in range(self.window - 1, y.size):
            exc, slope = self.measure(y[end - self.window + 1:end + 1])
            # "no more than": a limit met exactly holds (1e-9: the sums' rounding)
            if exc <= self.excursion + 1e-9 and slope <= self.slope + 1e-9:
                return end
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"window_rounds": self.window, "max_excursion": self.excursion, "max_slope": self.slope,
                "max_rounds": self.max_rounds}


def tracked(host: np.ndarray, gc: np.ndarray) -> np.ndarray:
    """The tracked variable of each round: host pages ÷ (host + GC pages), i.e. 1/WAF (0 where the
    round wrote nothing)."""
    h = np.asarray(host, dtype=np.float64)
    n = h + np.asarray(gc, dtype=np.float64)
    return np.divide(h, n, out=np.zeros_like(h), where=n > 0)


@dataclass(frozen=True)
class Phase:
    """Host and NAND pages of a stretch of rounds."""

    rounds: int
    host_pages: int
    gc_pages: int

    @property
    def waf(self) -> float | None:
        return (self.host_pages + self.gc_pages) / self.host_pages if self.host_pages else None

    def as_dict(self, page_bytes: int) -> dict[str, Any]:
        return {"rounds": self.rounds, "host_bytes": self.host_pages * page_bytes,
                "nand_bytes": (self.host_pages + self.gc_pages) * page_bytes,
                "gc_bytes": self.gc_pages * page_bytes, "waf": self.waf}


@dataclass(frozen=True)
class Phases:
    """A replay's rounds split into the transient (the rounds before `cut`, MSER's warm-up: module
    docstring) and the steady state (every whole round from `cut` on: the WAF a lifetime takes);
    `steady_round` closes the first window where PTS's criterion holds (None: it never did, and
    the workload did not *reach* steady state), `last_window` is the final `window` rounds. A
    partial round at the end (`tail`) is in none of them."""

    criterion: SteadyCriterion
    round_pages: int
    host_per_round: tuple[int, ...]
    gc_per_round: tuple[int, ...]
    steady_round: int | None
    tail: Phase

    @property
    def reached(self) -> bool:
        return self.steady_round is not None

    def _span(self, lo: int, hi: int) -> Phase:
        lo, hi = max(lo, 0), max(hi, 0)
        return Phase(max(hi - lo, 0), int(sum(self.host_per_round[lo:hi])), int(sum(self.gc_per_round[lo:hi])))

    @property
    def cut(self) -> int:
        """The transient's rounds (MSER, `mser_cut`)."""
        h = np.asarray(self.host_per_round, dtype=np.float64)
        g = np.asarray(self.gc_per_round, dtype=np.float64)
        return mser_cut(np.divide(h + g, h, out=np.ones_like(h), where=h > 0))

    @property
    def transient(self) -> Phase:
        n = len(self.host_per_round)
        return self._span(0, self.cut if n >= self.criterion.window else n)

    @property
    def steady(self) -> Phase | None:
        """Every whole round after the transient (None with fewer rounds than a PTS window)."""
        n = len(self.host_per_round)
        return self._span(self.cut, n) if n >= self.criterion.window else None

    def lifetime_waf(self) -> float | None:
        """The WAF a lifetime takes from these rounds: the steady state's (None with fewer rounds
        than a window; kvwear.harness.estimate.phases says the same of a run)."""
        steady = self.steady
        return steady.waf if steady is not None else None

    @property
    def last_window(self) -> Phase:
        n = len(self.host_per_round)
        return self._span(n - self.criterion.window, n)

    def last_measure(self) -> tuple[float, float] | None:
        """Excursion and slope of the final window (None with fewer rounds than a window)."""
        if len(self.host_per_round) < self.criterion.window:
            return None
        w = self.criterion.window
        return self.criterion.measure(tracked(np.asarray(self.host_per_round[-w:]), np.asarray(self.gc_per_round[-w:])))

    def as_dict(self, page_bytes: int) -> dict[str, Any]:
        steady = self.steady
        last = self.last_measure()
        return {
            "criterion": self.criterion.as_dict(), "round_bytes": self.round_pages * page_bytes,
            "rounds": len(self.host_per_round), "steady_state_reached": self.reached,
            # 0-based index of the round that closed the first window where PTS's criterion held
            "steady_state_round": self.steady_round,
            "steady_from_round": self.cut if steady is not None else None,
            "transient": self.transient.as_dict(page_bytes),
            "steady": steady.as_dict(page_bytes) if steady is not None else None,
            "last_window": self.last_window.as_dict(page_bytes),
            "last_window_excursion": None if last is None else last[0],
            "last_window_slope": None if last is None else last[1],
            "partial_round": self.tail.as_dict(page_bytes),
            "host_bytes_per_round": [h * page_bytes for h in self.host_per_round],
            "waf_per_round": [(h + g) / h if h else None for h, g in zip(self.host_per_round, self.gc_per_round,
                                                                         strict=True)],
        }


def split_phases(host_pages: np.ndarray, gc_pages: np.ndarray, round_pages: int, criterion: SteadyCriterion,
                 end: tuple[int, int] | None = None) -> Phases:
    """The rounds between cumulative counter snapshots (`host_pages`, `gc_pages`: counted from the
    replay's start, one snapshot at the end of each round: `Ftl.intervals` with `round_pages` as the
    interval), split by `criterion` (see `Phases`); `end` = the (host, GC) pages at the replay's end,
    whose excess over the last round is the partial tail."""
    host = np.asarray(host_pages, dtype=np.int64)
    gc = np.asarray(gc_pages, dtype=np.int64)
    if host.size != gc.size:
        raise KvwearError("split_phases: host and GC snapshots differ in length")
    dh = np.diff(host, prepend=0)
    dg = np.diff(gc, prepend=0)
    last_h = int(host[-1]) if host.size else 0
    last_g = int(gc[-1]) if gc.size else 0
    eh, eg = end if end is not None else (last_h, last_g)
    tail = Phase(1 if eh > last_h else 0, eh - last_h, eg - last_g)
    return Phases(criterion, round_pages, tuple(int(x) for x in dh), tuple(int(x) for x in dg),
                  criterion.first_window(tracked(dh, dg)), tail)


def passes_until_steady(ftl: Ftl, play: Callable[[], None], round_pages: int, criterion: SteadyCriterion
                        ) -> tuple[Phases, int]:
    """Call `play` (one pass of a workload on `ftl`) until its rounds of `round_pages` host pages reach
    `criterion`'s steady state or its `max_rounds` (whole passes; the sim device's rule); returns the
    rounds split (`split_phases`, counted from the first pass) and the passes played."""
    before = ftl.counters()
    ftl.restart_intervals(round_pages)
    passes = 0
    while True:
        play()
        passes += 1
        iv, c = ftl.intervals(), ftl.counters()
        ph = split_phases(iv.host_pages - before.host_pages, iv.gc_pages - before.gc_pages, round_pages, criterion,
                          end=(c.host_pages - before.host_pages, c.gc_pages - before.gc_pages))
        if ph.reached or len(ph.host_per_round) >= criterion.max_rounds:
            return ph, passes


def default_round_pages(exposed_pages: int) -> int:
    """A round of 1/4 of the exposed capacity (module docstring)."""
    return max(1, exposed_pages // 4)


@dataclass(frozen=True)
class PreconditionResult:
    """What preconditioning wrote, kept apart from any workload's counts."""

    mode: PreconditionMode
    seed: int
    fill_loops: int
    fill_io_bytes: int
    fill: FtlCounters                     # the sequential passes' counters (a delta)
    random: Phases | None                 # steady: the random rounds
    counters: FtlCounters                 # everything preconditioning did (a delta)

    @property
    def steady_state_reached(self) -> bool | None:
        return None if self.random is None else self.random.reached

    def as_dict(self) -> dict[str, Any]:
        c = self.counters
        pb = c.page_bytes
        return {
            "mode": self.mode, "seed": self.seed, "fill_loops": self.fill_loops, "fill_io_bytes": self.fill_io_bytes,
            "host_bytes": c.host_bytes, "nand_bytes": c.nand_bytes, "gc_bytes": c.gc_pages * pb,
            "line_erases": c.line_erases, "waf": c.waf,
            "fill_host_bytes": self.fill.host_bytes, "fill_nand_bytes": self.fill.nand_bytes,
            "random": None if self.random is None else self.random.as_dict(pb),
            "steady_state_reached": self.steady_state_reached,
        }


@dataclass(frozen=True)
class PreconditionSpec:
    """How to precondition (module docstring); the key under which a preconditioned drive is reused."""

    mode: PreconditionMode
    fill_loops: int = 2
    fill_io_bytes: int = 128 << 10
    round_pages: int = 0                  # 0: default_round_pages
    criterion: SteadyCriterion = field(default_factory=SteadyCriterion)
    seed: int = 1


def precondition(ftl: Ftl, spec: PreconditionSpec) -> PreconditionResult:
    """Precondition `ftl`, a fresh (purged) drive, as `spec` says; returns what it wrote."""
    c = ftl.config
    n = c.exposed_pages
    if spec.fill_loops < 1:
        raise KvwearError(f"fill_loops must be ≥ 1, got {spec.fill_loops}")
    if ftl.counters().host_pages:
        raise KvwearError("precondition a purged drive: this one has been written")
    start = ftl.counters()
    per_io = max(1, spec.fill_io_bytes // c.page_bytes)
    starts = np.arange(0, n, per_io, dtype=np.int64)
    lens = np.minimum(per_io, n - starts).astype(np.int64)
    ops = np.full(starts.size, OP_WRITE, dtype=np.int8)
    for _ in range(spec.fill_loops):
        ftl.apply_ops(ops, starts, lens)
    filled = ftl.counters()
    phases = None
    if spec.mode == "steady":
        phases = _random_rounds(ftl, spec)
    return PreconditionResult(spec.mode, spec.seed, spec.fill_loops, per_io * c.page_bytes,
                              filled.minus(start), phases, ftl.counters().minus(start))


def _random_rounds(ftl: Ftl, spec: PreconditionSpec) -> Phases:
    """Random one-page writes in rounds until steady state or `max_rounds` (module docstring)."""
    n = ftl.config.exposed_pages
    rp = spec.round_pages or default_round_pages(n)
    crit = spec.criterion
    rng = np.random.default_rng(spec.seed)
    chunk = min(_CHUNK_PAGES, rp)
    ops = np.full(chunk, OP_WRITE, dtype=np.int8)
    ones = np.ones(chunk, dtype=np.int64)
    host: list[int] = []
    gc: list[int] = []
    base = ftl.counters()
    for _ in range(crit.max_rounds):
        left = rp
        while left:
            k = min(chunk, left)
            ftl.apply_ops(ops[:k], rng.integers(0, n, size=k, dtype=np.int64), ones[:k])
            left -= k
        c = ftl.counters().minus(base)
        host.append(c.host_pages)
        gc.append(c.gc_pages)
        hs = np.diff(np.asarray(host), prepend=0)
        gs = np.diff(np.asarray(gc), prepend=0)
        if crit.first_window(tracked(hs, gs)) is not None:
            break
    return split_phases(np.asarray(host), np.asarray(gc), rp, crit)
