"""Benchmark: FTL emulator page writes per second with GC active, numba kernel vs pure Python.

Both run the same algorithm — page-mapped, block-level greedy GC (fewest valid pages), GC copies
through the host write pointer, GC while free blocks ≤ 2 — on the same drive (`--pages` logical
4 KiB pages, ρ = 0.15: steady-state WAF ≈ 4, so GC is busy) and the same uniform random 4 KiB
overwrites: each FTL is filled in order and overwritten once at random (untimed), then every round
writes the next `--round-pages` pages of one random stream to each side, the sides interleaved
(bench/_interleave.py: ≥ 5 rounds after a warm-up, the order rotating). The pure-Python
reference is the straightforward version (dicts and lists, victim by min() over closed blocks).
The numba kernel is also timed with FDP reclaim unit handles (`--ruh`, default 4): the same
overwrites, each page's handle its LPN's quarter of the space, so every handle has its own write
frontier and GC keeps victims in their handle.

Prints min and median CPU and wall seconds per side, the rates (host pages per CPU second at the
median) and the ratios, and the WAF each side measured over every round it wrote: the warm-up
round included, and named so (`--smoke` has none). The two greedy FTLs may break ties between
equally empty victims differently, so their WAFs agree closely, not to the page. CPU time is the
work; wall time on a shared machine also counts the other tenants' work.
The default drive is 1 GiB (2^18 pages) to keep the pure-Python side to seconds on a 2-core
machine; `--full` runs both on 4 GiB (2^20 pages), the size of the ≥ 2 M pages/s target.

Run: .venv/bin/python bench/ftl.py [--pages N] [--round-pages N] [--rounds 5] [--smoke] [--ruh N] [--full]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from _interleave import add_round_options, interleave, rounds_of

from kvwear.emulator.ftl import Ftl, FtlConfig
from kvwear.harness.estimate.estimator import analytical_waf


class PyGreedyFtl:
    """Pure-Python reference: the same greedy block-level GC, written plainly."""

    def __init__(self, pages: int, rho: float, ppb: int, reserve: int = 2) -> None:
        data_blocks = -(-int(pages * (1 + rho)) // ppb)
        self.ppb = ppb
        self.nblocks = data_blocks + reserve + 1
        self.reserve = reserve
        self.l2p: dict[int, int] = {}
        self.p2l: list[int] = [-1] * (self.nblocks * ppb)
        self.valid = [0] * self.nblocks
        self.free = list(range(self.nblocks))
        self.closed: set[int] = set()
        self.cur = self.free.pop(0)
        self.off = 0
        self.host = 0
        self.gc = 0

    def _place(self, lpn: int) -> None:
        old = self.l2p.get(lpn)
        if old is not None:
            self.p2l[old] = -1
            self.valid[old // self.ppb] -= 1
        ppn = self.cur * self.ppb + self.off
        self.p2l[ppn] = lpn
        self.l2p[lpn] = ppn
        self.valid[self.cur] += 1
        self.off += 1
        if self.off == self.ppb:
            self.closed.add(self.cur)
            self.cur = self.free.pop(0)
            self.off = 0

    def _collect(self) -> bool:
        candidates = [b for b in self.closed if self.valid[b] < self.ppb]
        if not candidates:
            return False
        victim = min(candidates, key=lambda b: self.valid[b])
        self.closed.discard(victim)
        for ppn in range(victim * self.ppb, (victim + 1) * self.ppb):
            lpn = self.p2l[ppn]
            if lpn >= 0:
                self._place(lpn)
                self.gc += 1
        self.valid[victim] = 0
        self.free.append(victim)
        return True

    def write(self, lpns: np.ndarray) -> None:
        for lpn in lpns.tolist():
            while len(self.free) <= self.reserve:
                if not self._collect():
                    break
            self._place(lpn)
            self.host += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=1 << 18, help="logical 4 KiB pages of the drive (both sides)")
    ap.add_argument("--round-pages", type=int, default=0, help="host pages per side per round (default: pages / 2)")
    add_round_options(ap)
    ap.add_argument("--full", action="store_true", help="the 4 GiB drive (2^20 pages)")
    ap.add_argument("--rho", type=float, default=0.15)
    ap.add_argument("--ppb", type=int, default=256, help="pages per block")
    ap.add_argument("--ruh", type=int, default=4, help="reclaim unit handles of the FDP run")
    args = ap.parse_args()
    if args.smoke:
        args.rounds = 1        # what rounds_of() times: the printed count says so
    rho, ppb, ruh = args.rho, args.ppb, args.ruh
    n = 1 << 20 if args.full else args.pages
    per_round = args.round_pages or n // 2
    rng = np.random.default_rng(1)
    warm = rng.integers(0, n, n)
    chunks = [rng.integers(0, n, per_round) for _ in range(args.rounds + 1)]   # warm-up round + timed rounds

    # numba: compile outside the timing (cache=True makes later runs start warm)
    Ftl(FtlConfig.block_level(1 << 22, rho, pages_per_block=16)).write(np.arange(1 << 10))
    ftl = Ftl(FtlConfig.block_level(n * 4096, rho, pages_per_block=ppb))
    ftl.write(np.arange(n))
    ftl.write(warm)                                          # reach GC steady state
    fdp = Ftl(FtlConfig.block_level(n * 4096, rho, pages_per_block=ppb, ruh=ruh))

    def fdp_write(lpns: np.ndarray) -> None:
        fdp.apply_ops(np.zeros(len(lpns), np.int8), lpns, np.ones(len(lpns), np.int64), lpns * ruh // n)

    fdp_write(np.arange(n))
    fdp_write(warm)
    ref = PyGreedyFtl(n, rho, ppb)
    ref.write(np.arange(n))
    ref.write(warm)

    def side(write: Callable[[np.ndarray], None]) -> Callable[[], None]:
        it = iter(chunks)
        return lambda: write(next(it))

    before = {"numba": ftl.counters(), "fdp": fdp.counters()}
    h0, g0 = ref.host, ref.gc
    rounds = rounds_of(args)
    res = interleave({"numba kernel": side(ftl.write), f"numba, {ruh} RUH": side(fdp_write),
                      "pure Python": side(ref.write)}, **rounds)
    # the WAF over every round written: the warm-up round's chunk, when there is one, came first
    # on every side (interleave's default is one warm-up round; --smoke has none)
    warmup = rounds.get("warmup", 1)
    d = ftl.counters().minus(before["numba"])
    fd = fdp.counters().minus(before["fdp"])
    ref_waf = (ref.host - h0 + ref.gc - g0) / (ref.host - h0)

    print(f"FTL benchmark: {n:,} logical 4 KiB pages ({n * 4096 / 2**30:g} GiB), uniform random overwrites, greedy "
          f"block GC, rho={rho}, {ppb} pages/block; {per_round:,} host pages per side per round, "
          f"{args.rounds} rounds; analytical WAF {analytical_waf(1 + rho):.3f}")
    written = f"{warmup} warm-up + {args.rounds} timed" if warmup else f"{args.rounds} timed, no warm-up"
    print(f"WAF after the fill, over every round written ({written}): numba {d.waf:.3f}, "
          f"numba {ruh} RUH {fd.waf:.3f}, pure Python {ref_waf:.3f}")
    for line in res.table("pure Python", {k: per_round for k in res.times}, "host pages"):
        print(line)
    r = res.ratio("numba kernel", "pure Python")
    numba_rate = per_round / res.times["numba kernel"].stat("cpu", "median")
    fdp_rate = per_round / res.times[f"numba, {ruh} RUH"].stat("cpu", "median")
    print(f"numba / pure Python on the same drive and writes: {r.text()}")
    print(f"numba with {ruh} handles / without: {res.ratio(f'numba, {ruh} RUH', 'numba kernel').text()}")
    print(f"target >= 2 M host pages per CPU s (median of {args.rounds} rounds): numba {numba_rate / 1e6:.2f} M "
          f"{'met' if numba_rate >= 2e6 else 'NOT met'}, with {ruh} handles {fdp_rate / 1e6:.2f} M "
          f"{'met' if fdp_rate >= 2e6 else 'NOT met'}")


if __name__ == "__main__":
    main()
