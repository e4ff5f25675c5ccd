"""The embedded FTL's FEMU twin against counters a real FEMU recorded on GC-heavy plans.

Each case under fixtures/femu-head-gc/ (its README: FEMU commit, QEMU version, commands) holds the
block_ops plan kvwear replayed on FEMU, the run's config.toml, the device result and FEMU's SMART
log before and after (its vendor bytes: host and GC-relocated pages). The twin is configured from
the recorded config as the run configured it (kvwear.harness.devices.qemu.Femu) and plays the plan
as the guest played it; it must reproduce FEMU's host and GC page counts exactly, so WAF too.
These tests read only the fixtures: no FEMU, no guest; the last one boots FEMU when a binary is
configured ($KVWEAR_FEMU_BINARY) and skips otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kvwear.emulator.ftl import OP_READ, OP_TRIM, OP_WRITE, Ftl, FtlConfig
from kvwear.harness.cli.main import app
from kvwear.harness.devices.measurement import DeviceMeasurement
from kvwear.harness.devices.qemu import FEMU_BINARY_ENV, Femu
from kvwear.harness.devices.sim import plan_to_requests
from kvwear.harness.pipeline.config import load_config
from kvwear.harness.pipeline.sizing import device_spec
from kvwear.harness.wear.femu import FEMU_PAGE_BYTES, parse_femu_counters

FIXTURES = Path(__file__).parent / "fixtures" / "femu-head-gc"
CASES = ("lru-52-lines", "gandalf4-52-lines", "lru-60-lines", "lru-52-lines-big-rows", "lru-52-lines-trim",
         "lru-52-lines-fill", "lru-52-lines-15-sessions")


def _femu_pages(d: Path) -> tuple[int, int]:
    """FEMU's host and GC-relocated pages over the replay (SMART vendor bytes, after − before)."""
    before = parse_femu_counters((d / "smart-before.bin").read_bytes())
    after = parse_femu_counters((d / "smart-after.bin").read_bytes())
    return after.host_pages - before.host_pages, after.gc_pages - before.gc_pages


@pytest.mark.parametrize("name", CASES)
def test_twin_reproduces_femu_gc_pages(name: str) -> None:
    d = FIXTURES / name
    cfg = load_config(d / "config.toml")
    result = json.loads((d / "result.json").read_text())
    plan = pq.read_table(d / "block_ops.parquet")
    femu_host, femu_gc = _femu_pages(d)
    # the recorded result is FEMU's own count, and the plan's bytes are what FEMU received
    assert result["extra"]["femu_host_pages_delta"] == femu_host
    assert result["extra"]["femu_gc_pages_delta"] == femu_gc
    assert result["write_bytes"] == femu_host * 4096
    assert femu_gc > femu_host                       # GC-heavy: WAF > 2 on every case

    twin = Femu.twin_counters(device_spec(cfg, None), plan, fio_version=result["tool"])
    assert (twin.host_pages, twin.gc_pages) == (femu_host, femu_gc)
    assert twin.waf == pytest.approx((femu_host + femu_gc) / femu_host, rel=1e-12)


def test_trim_case_is_replayed_in_the_guests_order() -> None:
    """The TRIM plan ran with deferred trims (the guest's fio 3.33 drops iolog trims): the twin
    must play each segment's reads and writes, then its trims, as the guest did; in plan order
    its GC count differs from FEMU's."""
    d = FIXTURES / "lru-52-lines-trim"
    result = json.loads((d / "result.json").read_text())
    assert result["extra"]["trim_mode"] == "deferred"
    cfg = load_config(d / "config.toml")
    plan = pq.read_table(d / "block_ops.parquet")
    spec = device_spec(cfg, None)
    femu_host, femu_gc = _femu_pages(d)
    ftl = Ftl(Femu.ftl_config(spec))
    ftl.apply_ops(*plan_to_requests(plan, 4096, Femu.ftl_config(spec).exposed_bytes))
    in_plan_order = ftl.counters()
    assert in_plan_order.host_pages == femu_host
    assert in_plan_order.gc_pages != femu_gc


def test_gc_copy_order_is_femus_block_by_block() -> None:
    """do_gc cleans channel 0's LUNs, then channel 1's, each block page by page; the write pointer
    put offset k on channel k mod 2, LUN (k div 2) mod 2, page k div 4 (2 channels × 2 LUNs)."""
    cfg = FtlConfig.femu(192, pgs_per_blk=256, blks_per_pl=64, luns_per_ch=2, nchs=2)
    order = cfg.gc_copy_order()
    assert sorted(order.tolist()) == list(range(1024))
    assert order[:3].tolist() == [0, 4, 8]           # channel 0, LUN 0: pages 0, 1, 2
    assert order[256:259].tolist() == [2, 6, 10]     # channel 0, LUN 1
    assert order[512:515].tolist() == [1, 5, 9]      # channel 1, LUN 0
    assert order[768:771].tolist() == [3, 7, 11]     # channel 1, LUN 1
    assert np.array_equal(FtlConfig.block_level(1 << 20, 0.1, pages_per_block=64).gc_copy_order(), np.arange(64))


class _FemuLineFtl:
    """FEMU bbssd's line FTL (ftl-line-gc.c, ftl-datapath.c, ftl.c, lib/pqueue.c of FEMU 99ce4fb2)
    transcribed step by step into plain Python, for small drives: pages addressed as FEMU addresses
    them, (line, channel, LUN, page); the victim queue as pqueue's 1-based heap; forced GC before a
    write command, one background GC after every command. The reference the twin's kernel must
    equal on any request stream."""

    def __init__(self, nchs: int, luns: int, ppb: int, lines: int, pcent: int, pcent_high: int) -> None:
        self.nchs, self.luns, self.ppb = nchs, luns, ppb
        self.ppl = nchs * luns * ppb
        self.thres = int((1 - pcent / 100.0) * lines)
        self.thres_high = int((1 - pcent_high / 100.0) * lines)
        self.vpc, self.ipc, self.pos = [0] * lines, [0] * lines, [0] * lines
        self.pq: list[int] = [-1]                     # slot 0 unused
        self.free = list(range(lines))
        self.page: dict[tuple[int, int, int, int], int] = {}   # programmed pages: lpn, or -1 once invalid
        self.maptbl: dict[int, tuple[int, int, int, int]] = {}
        self.cur = self.free.pop(0)
        self.ch = self.lun = self.pg = 0
        self.host = self.gc = self.runs = self.forced = 0

    # pqueue: cmppri(next, curr) = next > curr on valid page counts
    def _bubble_up(self, i: int) -> None:
        node = self.pq[i]
        while i > 1 and self.vpc[self.pq[i // 2]] > self.vpc[node]:
            self.pq[i] = self.pq[i // 2]
            self.pos[self.pq[i]] = i
            i //= 2
        self.pq[i] = node
        self.pos[node] = i

    def _percolate_down(self, i: int) -> None:
        node = self.pq[i]
        while True:
            c = 2 * i
            if c >= len(self.pq):
                break
            if c + 1 < len(self.pq) and self.vpc[self.pq[c]] > self.vpc[self.pq[c + 1]]:
                c += 1
            if not self.vpc[node] > self.vpc[self.pq[c]]:
                break
            self.pq[i] = self.pq[c]
            self.pos[self.pq[i]] = i
            i = c
        self.pq[i] = node
        self.pos[node] = i

    def _mark_invalid(self, ppa: tuple[int, int, int, int]) -> None:
        line = ppa[0]
        self.page[ppa] = -1
        was_full = self.vpc[line] == self.ppl
        self.ipc[line] += 1
        self.vpc[line] -= 1
        if self.pos[line]:                            # pqueue_change_priority to vpc − 1
            i = self.pos[line]
            if i > 1 and self.vpc[self.pq[i // 2]] > self.vpc[line]:
                self._bubble_up(i)
            else:
                self._percolate_down(i)
        if was_full:                                  # full list → victim queue
            self.pq.append(line)
            self._bubble_up(len(self.pq) - 1)

    def _program(self, lpn: int) -> tuple[int, int, int, int]:
        ppa = (self.cur, self.ch, self.lun, self.pg)
        self.page[ppa] = lpn
        self.maptbl[lpn] = ppa
        self.vpc[self.cur] += 1
        self.ch += 1                                  # ssd_advance_write_pointer
        if self.ch == self.nchs:
            self.ch, self.lun = 0, self.lun + 1
            if self.lun == self.luns:
                self.lun, self.pg = 0, self.pg + 1
                if self.pg == self.ppb:
                    self.pg = 0
                    if self.vpc[self.cur] < self.ppl:
                        self.pq.append(self.cur)
                        self._bubble_up(len(self.pq) - 1)
                    assert self.free, "FEMU aborts: no free line"
                    self.cur = self.free.pop(0)
        return ppa

    def do_gc(self, force: bool) -> int:
        if len(self.pq) == 1:
            return -1
        victim = self.pq[1]
        if not force and self.ipc[victim] < self.ppl // 8:
            return -1
        last = self.pq.pop()                          # pqueue_pop
        if len(self.pq) > 1:
            self.pq[1] = last
            self._percolate_down(1)
        self.pos[victim] = 0
        for ch in range(self.nchs):                   # clean_one_block, block by block
            for lun in range(self.luns):
                for pg in range(self.ppb):
                    lpn = self.page.get((victim, ch, lun, pg), -1)
                    if lpn >= 0:
                        self._program(lpn)
                        self.gc += 1
                for pg in range(self.ppb):
                    self.page.pop((victim, ch, lun, pg), None)
        self.vpc[victim] = self.ipc[victim] = 0
        self.free.append(victim)
        self.runs += 1
        self.forced += force
        return 0

    def request(self, op: int, first: int, n: int) -> None:
        if op == OP_WRITE:
            while len(self.free) <= self.thres_high:
                if self.do_gc(True) == -1:
                    break
            for lpn in range(first, first + n):
                if lpn in self.maptbl:
                    self._mark_invalid(self.maptbl[lpn])
                self._program(lpn)
                self.host += 1
        elif op == OP_TRIM:
            for lpn in range(first, first + n):
                if lpn in self.maptbl:
                    self._mark_invalid(self.maptbl.pop(lpn))
        if len(self.free) <= self.thres:
            self.do_gc(False)


@pytest.mark.parametrize("seed", range(6))
def test_twin_kernel_equals_femus_algorithm_on_random_requests(seed: int) -> None:
    """A small drive (2 channels × 2 LUNs, 8-page blocks, 12 lines: 256 of 384 pages exposed; both
    GC thresholds at 3 free lines, so forced GC runs too) under random writes, reads and trims of
    1–24 pages, half of them at the drive's first 50 pages: the twin's counters, GC runs (forced
    and background) and final page map equal the Python transcription of FEMU's FTL. (Checked to
    fail with a tie going to the right child, and with write-order GC copies.)"""
    cfg = FtlConfig.femu(1, pgs_per_blk=8, blks_per_pl=12, luns_per_ch=2, nchs=2, gc_thres_pcent=75,
                         gc_thres_pcent_high=75)
    ref = _FemuLineFtl(2, 2, 8, 12, 75, 75)
    rng = np.random.default_rng(seed)
    n = 3000
    ops = rng.choice([OP_WRITE, OP_READ, OP_TRIM], size=n, p=[0.7, 0.15, 0.15]).astype(np.int8)
    npages = rng.integers(1, 25, n)
    hot = rng.random(n) < 0.5
    first = np.where(hot, rng.integers(0, 26, n), rng.integers(0, cfg.exposed_pages, n))
    first = np.minimum(first, cfg.exposed_pages - npages)
    ftl = Ftl(cfg)
    ftl.apply_ops(ops, first, npages)
    for op, f, k in zip(ops.tolist(), first.tolist(), npages.tolist(), strict=True):
        ref.request(op, f, k)
    c = ftl.counters()
    assert ref.runs > 100 and ref.forced > 0          # the stream exercises both kinds of GC
    assert (c.host_pages, c.gc_pages, c.gc_runs, c.forced_gc_runs) == (ref.host, ref.gc, ref.runs, ref.forced)
    ftl.check_invariants()
    assert sorted(ref.maptbl) == np.flatnonzero(ftl._l2p >= 0).tolist()
    assert [ftl._l2p[lpn] // cfg.pages_per_line for lpn in sorted(ref.maptbl)] == \
        [ref.maptbl[lpn][0] for lpn in sorted(ref.maptbl)]


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get(FEMU_BINARY_ENV),
                    reason=f"no FEMU binary configured (${FEMU_BINARY_ENV}): FEMU is the user's own build, "
                           "outside the repository")
def test_twin_matches_a_live_femu_run(tmp_path: Path) -> None:
    """Boots FEMU (the binary $KVWEAR_FEMU_BINARY names; extra QEMU arguments, such as "-L
    <FEMU>/pc-bios", from $KVWEAR_FEMU_QEMU_ARGS) on the fixtures' 52-line drive and a small LRU log
    plan (about 640 k host pages, WAF about 5: minutes under TCG): the run's twin counts FEMU's GC
    pages exactly."""
    from kvwear.emulator.guest import build_guest

    build_guest()
    out = tmp_path / "run"
    args = ["run", "-o", str(out), "--device", "femu", "--policy", "lru", "--model", "qwen2-7b",
            "--param", "sessions=1", "--param", "turns=10", "--dram", "100MB", "--layout", "log", "--no-trim",
            "--no-report", "--device-option", "femu.devsz_mb=192", "--device-option", "femu.pgs_per_blk=256",
            "--device-option", "femu.blks_per_pl=52", "--device-option", "femu.luns_per_ch=2",
            "--device-option", "femu.nchs=2"]
    if os.environ.get("KVWEAR_FEMU_QEMU_ARGS"):
        args += ["--device-option", f"qemu_args={os.environ['KVWEAR_FEMU_QEMU_ARGS']}"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    replay = DeviceMeasurement.load(out / "device" / "lru" / "result.json").replay
    assert replay.media is not None
    femu_host = replay.media.host_bytes // FEMU_PAGE_BYTES
    femu_gc = (replay.media.media_bytes - replay.media.host_bytes) // FEMU_PAGE_BYTES
    assert femu_gc > femu_host
    twin = Femu.twin_counters(device_spec(load_config(out / "config.toml"), None),
                              pq.read_table(out / "plan" / "lru" / "block_ops.parquet"), fio_version=replay.tool)
    assert (twin.host_pages, twin.gc_pages) == (femu_host, femu_gc)
