"""Benchmark: kvwear's block replay against plain fio, and the cost of eBPF capture, in one run.

On a loop device it creates over a file in a temporary directory (detached and deleted after),
or on a plain file when not root (then without capture), it measures:

  fio iolog replay  fio itself replaying the same plan's iolog (exported once, untimed): the peer
  fio randwrite     fio's randwrite job, same op count, block size, ioengine and iodepth, no iolog
  kvwear replay     the `block`/`file` backend replaying the plan (validate → iolog export → fio
                    replay → JSON parse), capture off
  kvwear + bcc      the same replay with the bcc tracer streaming the block trace to Parquet
  kvwear + bpftrace the same with the bpftrace tracer (its daemon's CPU during the replay counts)
  fio writes + randtrim / kvwear, TRIM
                    a plan with a trim after every third write: kvwear's replay with TRIM (on fio
                    3.33: in segments, discards between) against fio replaying the writes, then
                    fio's randtrim job issuing as many trims of the same size

Every side runs once per round, `--rounds` rounds (≥ 5) after an untimed warm-up, the order
rotating each round (bench/_interleave.py); min and median of CPU seconds (this process and the
fio / bpftrace children) and wall seconds per side, ratios as the peer's time / the side's. A
tracer's attach and final flush are untimed (printed apart as fixed costs). Prints the ratio
kvwear / fio iolog replay (target ≥ 0.95), replay with capture / without (target ≥ 0.95, i.e.
≤ 5 % throughput lost), lost events (target 0) and whether capture counted exactly the plan's
bytes. The loop device's worker thread is a kernel thread: its CPU shows in wall time only.

Run: .venv/bin/python bench/replay.py [--ops 50000] [--trim-ops 20000] [--rounds 5] [--iodepth 16]
     [--capacity 256MiB] [--tracers bcc,bpftrace]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from _interleave import Side, add_round_options, interleave, proc_cpu_s, rounds_of

from kvwear.harness.capture import CaptureResult, Tracer, TracerUnavailable, kernel_dev_t, open_tracer
from kvwear.harness.devices import fio_runner as fiolib
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.fio import FioDevice, loop_device
from kvwear.harness.devices.fio_iolog import export_iolog_v3
from kvwear.harness.devices.measurement import ReplayResult
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.units import format_bytes, parse_size


def make_plan(ops: int, capacity: int, bs: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    off = rng.integers(0, capacity // bs, ops) * bs
    return BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(ops) * 1e-6, "op": np.full(ops, "write"), "offset_bytes": off,
        "length_bytes": np.full(ops, bs), "obj_kind": np.full(ops, "full"), "obj_id": np.arange(ops)}))


TRIM_CONFIGS = ("fio iolog, writes", "fio randtrim", "kvwear, TRIM")


def make_trim_plan(ops: int, capacity: int, bs: int, trim_every: int = 3, seed: int = 2) -> pa.Table:
    """`make_plan`'s writes with a trim of an earlier write's range after every `trim_every`-th one."""
    w = make_plan(ops, capacity, bs, seed)
    off = w.column("offset_bytes").to_numpy()
    rng = np.random.default_rng(seed)
    after = np.arange(trim_every - 1, ops, trim_every)
    t_off = off[rng.integers(0, after + 1)]            # a range written at or before that point
    rows = np.concatenate((np.arange(ops), after + 0.5))
    order = np.argsort(rows, kind="stable")
    n = rows.size
    return BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(n) * 1e-6, "op": np.concatenate((np.full(ops, "write"), np.full(after.size, "trim")))[order],
        "offset_bytes": np.concatenate((off, t_off))[order], "length_bytes": np.full(n, bs),
        "obj_kind": np.full(n, "full"), "obj_id": np.arange(n)}))


def timed_fio(job: fiolib.FioJob, workdir: Path, stem: str, op: str, expect: int) -> Callable[[], None]:
    """One fio run of `job` per call, checked to have issued `expect` I/Os of `op`."""
    calls = iter(range(1 << 30))

    def go() -> None:
        r = fiolib.run_jobs([job], workdir / f"{stem}{next(calls)}", stem)
        issued = getattr(r.summary, op).total_ios
        assert issued == expect, (stem, op, issued, expect)
    return go


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=50_000)
    add_round_options(ap)
    ap.add_argument("--iodepth", type=int, default=16)
    ap.add_argument("--ioengine", default="libaio")
    ap.add_argument("--bs", default="4KiB")
    ap.add_argument("--capacity", default="256MiB")
    ap.add_argument("--tracers", default="bcc,bpftrace", help="tracers to time (root only; '' for none)")
    ap.add_argument("--trim-ops", type=int, default=20_000,
                    help="writes of the TRIM comparison's plan (a trim after every third; 0: no TRIM comparison)")
    args = ap.parse_args()
    if args.smoke:
        args.rounds = 1        # what rounds_of() times: the printed count says so
    bs, cap = parse_size(args.bs), parse_size(args.capacity)
    root = os.geteuid() == 0
    plan = make_plan(args.ops, cap, bs)
    plan_bytes = args.ops * bs
    print(f"fio {fiolib.fio_version()}, {args.ops} random {format_bytes(bs)} writes over "
          f"{format_bytes(cap)}, {args.ioengine} iodepth {args.iodepth}, {args.rounds} interleaved rounds; "
          f"load average at the start {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    with tempfile.TemporaryDirectory(prefix="kvwear-bench-") as tmp:
        tmpd = Path(tmp)
        backing = tmpd / "disk.img"
        # Written in full first: a sparse backing file would make the first runs allocate blocks.
        with open(backing, "wb") as fh:
            chunk = bytes(1 << 20)
            for _ in range(cap >> 20):
                fh.write(chunk)
        ctx: contextlib.AbstractContextManager[str]
        ctx = loop_device(backing, cap) if root else contextlib.nullcontext(str(backing))
        with ctx as target:
            kind = "block" if root else "file"
            print(f"target: {kind}:{target}" + ("" if root else " (not root: no loop device, no capture)"))
            # the file is this bench's own, written in full above: confirm it (kvwear did not create it)
            confirm = {} if root else {"confirm_overwrite": str(backing)}
            dev = FioDevice(DeviceSpec(kind, target, options={"ioengine": args.ioengine,
                                                              "iodepth": args.iodepth, **confirm}), tmpd)
            plain = fiolib.FioJob("plain", {
                "filename": target, "rw": "randwrite", "bs": bs, "size": cap, "number_ios": args.ops,
                "io_size": plan_bytes, "norandommap": True, "randrepeat": 0, "direct": 1,
                "ioengine": args.ioengine, "iodepth": args.iodepth})

            iolog = export_iolog_v3(plan, tmpd / "plan.iolog")
            fio_replay = fiolib.replay_job(iolog.path, target, ioengine=args.ioengine, iodepth=args.iodepth)
            runs = iter(range(1 << 30))

            def replay() -> ReplayResult:
                res = dev.replay(plan, tmpd / f"kv-{next(runs)}")
                assert res.write_bytes == plan_bytes and res.write_ios == args.ops, res
                return res

            sides: dict[str, Side | Callable[[], object]] = {
                "fio iolog replay": timed_fio(fio_replay, tmpd, "fioiolog", "write", args.ops),
                "fio randwrite": timed_fio(plain, tmpd, "plain", "write", args.ops),
                "kvwear replay": replay}
            captures: dict[str, list[CaptureResult]] = {}
            setup_s: dict[str, list[float]] = {}
            for name in [t for t in args.tracers.split(",") if t] if root else []:
                try:
                    probe = open_tracer(name)
                    probe.start(kernel_dev_t(target), tmpd / f"probe-{name}.parquet")
                    probe.stop()
                except TracerUnavailable as exc:
                    print(f"skipping {name}: {exc}")
                    continue
                sides[f"kvwear + {name}"] = capture_side(name, target, tmpd, replay, captures, setup_s)
            trim_info: dict[str, int] = {}
            n_trims = 0
            if args.trim_ops:
                # TRIM: kvwear's replay of a plan with trims (segmented where fio cannot issue them,
                # fio 3.33 or a file: fio per segment, then BLKDISCARD / punched holes) against fio
                # replaying the same plan's writes, then fio's own randtrim job issuing as many
                # trims of the same size.
                trim_plan = make_trim_plan(args.trim_ops, cap, bs)
                n_trims = trim_plan.num_rows - args.trim_ops
                writes_log = export_iolog_v3(trim_plan, tmpd / "writes.iolog", include_trims=False)
                writes_job = fiolib.replay_job(writes_log.path, target, ioengine=args.ioengine, iodepth=args.iodepth)
                # number_ios alone stops at size / bs trims (65,536 on 256 MiB of 4 KiB): io_size
                # lets fio wrap around the device until it has issued them all. On a file (not root)
                # fio's trim is a BLKDISCARD the file refuses: its falloc engine punches holes
                # instead, as kvwear does there.
                trim_job = fiolib.FioJob("trims", {
                    "filename": target, "rw": "randtrim", "bs": bs, "size": cap, "number_ios": n_trims,
                    "io_size": n_trims * bs, "norandommap": True, "randrepeat": 0,
                    "ioengine": args.ioengine if root else "falloc", "iodepth": args.iodepth})
                fio_writes = timed_fio(writes_job, tmpd, "writes", "write", args.trim_ops)
                fio_trims = timed_fio(trim_job, tmpd, "trims", "trim", n_trims)

                def fio_writes_then_trims() -> None:
                    fio_writes()
                    fio_trims()

                def replay_with_trims() -> None:
                    res = dev.replay(trim_plan, tmpd / f"kv-trim-{next(runs)}")
                    assert res.write_ios == args.trim_ops
                    trim_info.update(segments=int(res.details.get("segments", 1)), issued=res.trim_bytes,
                                     superseded=res.trims.superseded_bytes)

                sides["fio writes + randtrim"] = fio_writes_then_trims
                sides["kvwear, TRIM"] = replay_with_trims
            res = interleave(sides, **rounds_of(args))
            can_trim = fiolib.fio_replays_trim(dev.fio_version)

    work = {k: float(args.trim_ops + n_trims if k in ("fio writes + randtrim", "kvwear, TRIM") else args.ops)
            for k in res.times}
    print()
    for line in res.table("fio iolog replay", work, "I/Os"):
        print(line)
    r = res.ratio("kvwear replay", "fio iolog replay")
    print(f"\nkvwear replay / fio replaying the same iolog: {r.text()} "
          f"(target ≥ 0.95 on the wall median: {'PASS' if r.wall_median >= 0.95 else 'FAIL'})")
    print(f"kvwear replay / the fio randwrite job: {res.ratio('kvwear replay', 'fio randwrite').text()}")
    for name, caps in captures.items():
        c = res.ratio(f"kvwear + {name}", "kvwear replay")
        n_lost = max(x.lost_events for x in caps)
        exact = all(x.write_bytes == plan_bytes and x.write_requests <= args.ops for x in caps)
        print(f"capture {name}: replay with capture / without: {c.text()} (target ≥ 0.95 on the wall "
              f"median: {'PASS' if c.wall_median >= 0.95 else 'FAIL'}); lost events ≤ {n_lost} per run "
              f"(target 0: {'PASS' if n_lost == 0 else 'FAIL'}); write bytes counted exactly in every run: "
              f"{exact}; attach + flush (untimed) median {statistics.median(setup_s[name]):.2f} s")
        for i, x in enumerate(caps):
            print(f"  {name} run {i}: {x.events} events, lost {x.lost_events} "
                  f"{ {k: v for k, v in x.extra.items() if 'lost' in k or 'miss' in k} }; "
                  f"{x.unmatched_completions} completions without issue, {x.no_completion} without latency")
    if trim_info:
        t = res.ratio("kvwear, TRIM", "fio writes + randtrim")
        print(f"TRIM ({n_trims} trims among {args.trim_ops} writes, "
              f"{'replayed by fio' if can_trim else 'deferred: fio per segment, then discards'}; "
              f"{trim_info['segments']} segments, {format_bytes(trim_info['issued'])} discarded, "
              f"{format_bytes(trim_info['superseded'])} left out as rewritten): kvwear's replay against fio "
              f"replaying the writes then fio's randtrim of as many trims: {t.text()}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def capture_side(name: str, target: str, tmpd: Path, replay: Callable[[], ReplayResult],
                 captures: dict[str, list[CaptureResult]], setup_s: dict[str, list[float]]) -> Side:
    """The replay with tracer `name` live: attaching and the final flush are untimed (reported
    apart as fixed costs); a tracer daemon's CPU during the replay counts."""
    state: dict[str, Tracer] = {}
    runs = iter(range(1 << 30))

    def before() -> None:
        t0 = time.perf_counter()
        state["t"] = open_tracer(name)
        state["t"].start(kernel_dev_t(target), tmpd / f"cap-{name}-{next(runs)}.parquet")
        setup_s.setdefault(name, []).append(time.perf_counter() - t0)

    def after(_: object) -> None:
        t0 = time.perf_counter()
        captures.setdefault(name, []).append(state["t"].stop())
        setup_s[name][-1] += time.perf_counter() - t0

    def daemon_cpu() -> float:
        pid = getattr(state.get("t"), "pid", None)
        return proc_cpu_s(pid) if pid else 0.0

    return Side(run=replay, before=before, after=after, extra_cpu=daemon_cpu)


if __name__ == "__main__":
    main()
