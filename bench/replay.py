"""Benchmark: kvwear's block replay against plain fio, and the cost of eBPF capture, in one run.

On a loop device it creates over a file in a temporary directory (detached and deleted after),
or on a plain file when not root (then without capture), it measures:

  fio iolog       fio itself replaying the same plan's iolog (exported once, untimed): the peer
  fio randwrite   fio randwrite job, same op count, block size, ioengine and iodepth, no iolog
  kvwear replay   the `block`/`file` backend replaying a generated plan of the same shape
                  (validate → iolog export → fio replay → JSON parse), capture off
  + bcc           the same replay with the bcc tracer streaming the block trace to Parquet
  + bpftrace      the same with the bpftrace tracer
  fio iolog, writes / fio randtrim / kvwear, TRIM
                  a plan with a trim after every third write: kvwear's replay with TRIM (on fio
                  3.33: in segments, discards between) against fio replaying the writes plus
                  fio's randtrim job issuing as many trims of the same size

Every configuration runs `--reps` times, interleaved with rotating order after an untimed warm-up;
the median wall-clock rate counts (ops / seconds, including fio start-up for kvwear and the fio
peers), and the best rate is shown beside it (on a shared host the best run is the one least
disturbed by other work). Prints rates, the ratio
kvwear / fio iolog replay (target ≥ 0.95), the capture loss 1 − on/off (target ≤ 5%), lost events
(target 0) at the measured IOPS, and whether capture counted exactly the plan's bytes.

Run: .venv/bin/python bench/replay.py [--ops 200000] [--reps 3] [--iodepth 16] [--capacity 256MiB]
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

from kvwear.harness.capture import TracerUnavailable, kernel_dev_t, open_tracer
from kvwear.harness.devices import fio_runner as fiolib
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.fio import FioDevice, loop_device
from kvwear.harness.devices.fio_iolog import export_iolog_v3
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


def timed_fio(job: fiolib.FioJob, workdir: Path, stem: str, op: str, expect: int) -> Callable[[int], float]:
    """One timed fio run of `job` per call (rep i), checked to have issued `expect` I/Os of `op`."""
    def go(i: int) -> float:
        t0 = time.perf_counter()
        r = fiolib.run_jobs([job], workdir / f"{stem}{i}", stem)
        wall = time.perf_counter() - t0
        issued = getattr(r.summary, op).total_ios
        assert issued == expect, (stem, issued, expect)
        return wall
    return go


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iodepth", type=int, default=16)
    ap.add_argument("--ioengine", default="libaio")
    ap.add_argument("--bs", default="4KiB")
    ap.add_argument("--capacity", default="256MiB")
    args = ap.parse_args()
    bs, cap = parse_size(args.bs), parse_size(args.capacity)
    root = os.geteuid() == 0
    plan = make_plan(args.ops, cap, bs)
    plan_bytes = args.ops * bs
    print(f"fio {fiolib.fio_version()}, {args.ops} random {format_bytes(bs)} writes over "
          f"{format_bytes(cap)}, {args.ioengine} iodepth {args.iodepth}, {args.reps} reps (median)")

    with tempfile.TemporaryDirectory(prefix="kvwear-bench-") as tmp:
        tmpd = Path(tmp)
        backing = tmpd / "disk.img"
        # Written in full first: a sparse backing file would make the first runs allocate blocks.
        with open(backing, "wb") as fh:
            chunk = bytes(1 << 20)
            for _ in range(cap >> 20):
                fh.write(chunk)
        ctx: contextlib.AbstractContextManager[str]
        if root:
            ctx = loop_device(backing, cap)
        else:
            with open(backing, "wb") as fh:
                fh.truncate(cap)
            ctx = contextlib.nullcontext(str(backing))
        with ctx as target:
            kind = "block" if root else "file"
            print(f"target: {kind}:{target}" + ("" if root else " (not root: no loop device, no capture)"))
            dev = FioDevice(DeviceSpec(kind, target, options={"ioengine": args.ioengine,
                                                              "iodepth": args.iodepth}), tmpd)
            plain = fiolib.FioJob("plain", {
                "filename": target, "rw": "randwrite", "bs": bs, "size": cap, "number_ios": args.ops,
                "io_size": plan_bytes, "norandommap": True, "randrepeat": 0, "direct": 1,
                "ioengine": args.ioengine, "iodepth": args.iodepth})

            iolog = export_iolog_v3(plan, tmpd / "plan.iolog")
            fio_replay = fiolib.replay_job(iolog.path, target, ioengine=args.ioengine, iodepth=args.iodepth)

            lost: dict[str, list[int]] = {}
            setup: dict[str, list[float]] = {}
            detail: list[str] = []
            exact: dict[str, bool] = {}

            def run_kvwear(tracer: str | None) -> Callable[[int], float]:
                def go(i: int) -> float:
                    work = tmpd / f"kv-{tracer}-{i}"
                    t = open_tracer(tracer) if tracer else None
                    if t is not None:
                        s0 = time.perf_counter()
                        t.start(kernel_dev_t(target), work / "trace.parquet")
                        setup.setdefault(tracer or "", []).append(time.perf_counter() - s0)
                    # Timed: the replay while the probes are live (attach/compile and the final
                    # Parquet flush are reported apart, as fixed costs).
                    t0 = time.perf_counter()
                    res = dev.replay(plan, work)
                    wall = time.perf_counter() - t0
                    if t is not None:
                        s1 = time.perf_counter()
                        c = t.stop()
                        setup[tracer or ""][-1] += time.perf_counter() - s1
                    assert res.write_bytes == plan_bytes and res.write_ios == args.ops
                    if t is not None:
                        lost.setdefault(tracer or "", []).append(c.lost_events)
                        detail.append(
                            f"{tracer} rep {i}: {c.events} events, lost ≤ {c.lost_events} "
                            f"{dict((k, v) for k, v in c.extra.items() if 'lost' in k or 'miss' in k)}; "
                            f"on this device: {c.unmatched_completions} completions without issue, "
                            f"{c.no_completion} requests without latency")
                        ok = c.write_bytes == plan_bytes and c.write_requests <= args.ops
                        exact[tracer or ""] = exact.get(tracer or "", True) and ok
                    return wall
                return go

            configs: dict[str, Callable[[int], float]] = {
                "fio iolog replay": timed_fio(fio_replay, tmpd, "fioiolog", "write", args.ops),
                "fio randwrite": timed_fio(plain, tmpd, "plain", "write", args.ops),
                "kvwear replay": run_kvwear(None)}
            if root:
                for name in ("bcc", "bpftrace"):
                    try:
                        probe = open_tracer(name)
                        probe.start(kernel_dev_t(target), tmpd / f"probe-{name}.parquet")
                        probe.stop()
                        configs[f"kvwear + {name}"] = run_kvwear(name)
                    except TracerUnavailable as exc:
                        print(f"skipping {name}: {exc}")
            # TRIM on a fio that drops iolog trims: kvwear's segmented replay (fio per segment, then
            # BLKDISCARD / punched holes) against fio replaying the same plan's writes alone.
            trim_plan = make_trim_plan(args.ops, cap, bs)
            can_trim = fiolib.fio_replays_trim(dev.fio_version)
            writes_log = export_iolog_v3(trim_plan, tmpd / "writes.iolog", include_trims=False)
            writes_job = fiolib.replay_job(writes_log.path, target, ioengine=args.ioengine, iodepth=args.iodepth)
            trim_info: dict[str, int] = {}

            n_trims = trim_plan.num_rows - args.ops
            trim_job = fiolib.FioJob("trims", {
                "filename": target, "rw": "randtrim", "bs": bs, "size": cap, "number_ios": n_trims,
                "norandommap": True, "randrepeat": 0, "ioengine": args.ioengine, "iodepth": args.iodepth})

            def run_with_trims(i: int) -> float:
                t0 = time.perf_counter()
                res = dev.replay(trim_plan, tmpd / f"kv-trim-{i}")
                wall = time.perf_counter() - t0
                assert res.write_ios == args.ops
                trim_info.update(segments=int(res.details.get("segments", 1)), issued=res.trim_bytes,
                                 superseded=res.trims.superseded_bytes)
                return wall

            configs["fio iolog, writes"] = timed_fio(writes_job, tmpd, "writes", "write", args.ops)
            configs["fio randtrim"] = timed_fio(trim_job, tmpd, "trims", "trim", n_trims)
            configs["kvwear, TRIM"] = run_with_trims
            walls: dict[str, list[float]] = {k: [] for k in configs}
            names = list(configs)
            for name in names:                     # warm-up, untimed
                configs[name](-1)
            lost.clear()
            detail.clear()
            for i in range(args.reps):
                # Rotate the order each rep so no configuration always runs first on a busy host.
                for name in names[i % len(names):] + names[: i % len(names)]:
                    walls[name].append(configs[name](i))

    rate = {k: args.ops / statistics.median(v) for k, v in walls.items()}
    best = {k: args.ops / min(v) for k, v in walls.items()}
    for line in detail:
        print("  " + line)
    print(f"\n{'configuration':<20}{'IOPS median':>12}{'best':>9}{'MB/s':>8}{'vs fio iolog':>14}"
          f"{'(best)':>8}{'vs replay':>11}{'(best)':>8}{'lost max':>10}")
    for k in rate:
        if k in TRIM_CONFIGS:        # other op counts: summarized on the TRIM line below
            continue
        lost_s = str(max(lost[k.split(' + ')[1]])) if " + " in k else "-"
        print(f"{k:<20}{rate[k]:>12,.0f}{best[k]:>9,.0f}{rate[k] * bs / 1e6:>8.1f}"
              f"{rate[k] / rate['fio iolog replay']:>14.3f}{best[k] / best['fio iolog replay']:>8.3f}"
              f"{rate[k] / rate['kvwear replay']:>11.3f}{best[k] / best['kvwear replay']:>8.3f}{lost_s:>10}")
    def paired(a: str, b: str) -> float:
        """Median over reps of rate(a)/rate(b) within the same rep (neighbours in time, so slow
        drifts of the host's load cancel)."""
        return statistics.median(wb / wa for wa, wb in zip(walls[a], walls[b], strict=True))

    ratio = paired("kvwear replay", "fio iolog replay")
    ratio_b = best["kvwear replay"] / best["fio iolog replay"]
    print(f"\nkvwear replay / fio replaying the same iolog: paired median {ratio:.3f}, "
          f"ratio of medians {rate['kvwear replay'] / rate['fio iolog replay']:.3f}, best {ratio_b:.3f} "
          f"(target ≥ 0.95 on the paired median: {'PASS' if ratio >= 0.95 else 'FAIL'}); "
          f"vs the fio randwrite job: {rate['kvwear replay'] / rate['fio randwrite']:.3f}")
    for name in ("bcc", "bpftrace"):
        key = f"kvwear + {name}"
        if key not in rate:
            continue
        loss = 1 - paired(key, "kvwear replay")
        loss_b = 1 - best[key] / best["kvwear replay"]
        n_lost = max(lost[name])
        print(f"capture {name}: throughput loss paired median {loss:+.1%}, best {loss_b:+.1%} "
              f"(target ≤ 5%: {'PASS' if loss <= 0.05 else 'FAIL'}); lost events ≤ {n_lost} per run at "
              f"{rate[key]:,.0f} IOPS (target 0: {'PASS' if n_lost == 0 else 'FAIL'}); write bytes counted "
              f"exactly in every run: {exact[name]}; attach+flush {statistics.median(setup[name]):.2f} s")
    trims = make_trim_plan(args.ops, cap, bs).num_rows - args.ops
    # The peer does the same work with fio alone: the writes replayed, the same number of trims
    # issued by fio's own randtrim job (fio 3.33 cannot put them in one iolog).
    vs_fio = statistics.median((a + b) / c for a, b, c in zip(
        walls["fio iolog, writes"], walls["fio randtrim"], walls["kvwear, TRIM"], strict=True))
    print(f"TRIM ({trims} trims among the {args.ops} writes, "
          f"{'replayed by fio' if can_trim else 'deferred: fio per segment, then discards'}; "
          f"{trim_info['segments']} segments, {format_bytes(trim_info['issued'])} discarded, "
          f"{format_bytes(trim_info['superseded'])} left out as rewritten): kvwear's replay runs at "
          f"{vs_fio:.3f} × the speed of fio replaying the writes plus fio's randtrim of as many trims "
          f"(paired median; {paired('kvwear, TRIM', 'fio iolog, writes'):.3f} × the writes alone)")
    print(f"host load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
