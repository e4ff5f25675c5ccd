"""Benchmark: emulated drives in the loop — guest boot time and in-guest fio throughput.

For each emulated device available (`qemu` always; `femu` when a FEMU binary is given with
--femu-binary or $KVWEAR_FEMU_BINARY) it replays two block plans through the device backend, one
guest boot each: 128 KiB sequential writes and 4 KiB random writes (fio, direct, libaio, iodepth 1).
The peer, measured in the same run with the same plans, is the host's fio on a plain file
(`file:` backend, iodepth 1): the ratio says how much slower the emulated path is. Host and
guests are interleaved (bench/_interleave.py: ≥ 5 rounds after a warm-up, the order rotating);
the time compared is fio's own (the plan's bytes over the bandwidth fio reports: the guest's boot
is not in it, and is printed apart); the CPU seconds are the whole call's (for a guest: QEMU's,
boot included, emulating the guest), so the ratio to read is the wall one. Also prints the SMART
Data Units Written delta next to fio's bytes, and FEMU's WAF when FEMU runs.

Run: .venv/bin/python bench/guest.py [--seq-mib 32] [--rand-mib 8] [--rounds 5] [--plans seq128k,rand4k]
     [--femu-binary PATH] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from _interleave import SelfTimed, add_round_options, cpu_now, interleave, rounds_of

from kvwear.emulator.guest import build_guest
from kvwear.harness.devices.base import DeviceBackend, DeviceSpec, open_device
from kvwear.harness.devices.measurement import ReplayResult
from kvwear.harness.devices.qemu import FEMU_BINARY_ENV
from kvwear.harness.plan.schema import BLOCK_OPS

MiB = 2**20


def plan(kind: str, total_bytes: int, span_bytes: int, seed: int = 1) -> pa.Table:
    if kind == "seq":
        bs = 128 * 1024
        offs = np.arange(total_bytes // bs, dtype=np.int64) * bs % span_bytes
    else:
        bs = 4096
        offs = np.random.default_rng(seed).integers(0, span_bytes // bs, total_bytes // bs) * bs
    n = offs.size
    return BLOCK_OPS.conform(pa.table({
        "t_s": np.zeros(n), "op": pa.array(["write"] * n).dictionary_encode(), "offset_bytes": offs,
        "length_bytes": np.full(n, bs, np.int64), "obj_kind": pa.array(["full"] * n).dictionary_encode(),
        "obj_id": np.arange(n, dtype=np.int64),
    }))


def mb_s(res: ReplayResult) -> float:
    return float(res.details["write_bw_bytes_per_s"]) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-mib", type=int, default=32)
    ap.add_argument("--rand-mib", type=int, default=8)
    add_round_options(ap)
    ap.add_argument("--plans", default="seq128k,rand4k", help="which plans to play (seq128k, rand4k)")
    ap.add_argument("--femu-binary", default=os.environ.get(FEMU_BINARY_ENV, ""))
    args = ap.parse_args()
    image = build_guest()
    print(f"guest: {image.kernel.parent} ({image.stamp.splitlines()[0]})")
    span = 64 * MiB
    every = {"seq128k": lambda: plan("seq", args.seq_mib * MiB, span),
             "rand4k": lambda: plan("rand", args.rand_mib * MiB, span)}
    unknown = set(args.plans.split(",")) - set(every)
    if unknown:
        raise SystemExit(f"--plans: unknown {', '.join(sorted(unknown))} (valid: {', '.join(every)})")
    plans = {k: make() for k, make in every.items() if k in args.plans.split(",")}
    devices: list[tuple[str, DeviceSpec]] = [("qemu", DeviceSpec("qemu", capacity_bytes=span))]
    if args.femu_binary:
        devices.append(("femu", DeviceSpec("femu", options={"femu_binary": args.femu_binary})))
    else:
        print("femu: skipped (no --femu-binary / $KVWEAR_FEMU_BINARY)")
    with tempfile.TemporaryDirectory(prefix="kvwear-bench-guest-") as tmp:
        work = Path(tmp)
        host = open_device(DeviceSpec("file", target=str(work / "host.img"), capacity_bytes=span,
                                      options={"iodepth": 1}), work / "host")
        opened = {name: open_device(spec, work / name) for name, spec in devices}
        runs = iter(range(1 << 30))

        def side(dev: DeviceBackend, p: pa.Table) -> Callable[[], SelfTimed]:
            def go() -> SelfTimed:
                c0 = cpu_now()
                r = dev.replay(p, work / f"run-{next(runs)}")
                return SelfTimed(cpu_now() - c0, r.write_bytes / float(r.details["write_bw_bytes_per_s"]), r)
            return go

        for pname, p in plans.items():
            sides = {f"host file, {pname}": side(host, p)}
            sides.update({f"{dn}, {pname}": side(d, p) for dn, d in opened.items()})
            res = interleave(sides, **rounds_of(args))     # --smoke: one boot a device, not six
            print(f"\n{pname}: {p.num_rows:,} writes, {p.num_rows and int(p.column('length_bytes')[0].as_py())} "
                  "bytes each")
            for line in res.table(f"host file, {pname}", {k: p.num_rows for k in sides}, "writes"):
                print(line)
            for dn in opened:
                r = res.last[f"{dn}, {pname}"].value
                ratio = res.ratio(f"{dn}, {pname}", f"host file, {pname}")
                waf = f"{r.waf:.2f}" if r.waf is not None else "—"
                print(f"{dn} / host file, fio's time: {ratio.text()}; last run: boot {r.details['boot_s']:.1f} s, "
                      f"guest {mb_s(r):.1f} MB/s, {r.details['write_iops']:.0f} IOPS, fio bytes {r.write_bytes}, "
                      f"SMART DUW delta {r.details['smart']['smart_duw_delta']}, WAF {waf}, accel {r.details['accel']}")
        for d in opened.values():
            d.close()
        print("host peer: fio on a file, direct, libaio, iodepth 1; guest cache=none")


if __name__ == "__main__":
    main()
