"""Benchmark: emulated drives in the loop — guest boot time and in-guest fio throughput.

For each emulated device available (`qemu` always; `femu` when a FEMU binary is given with
--femu-binary or $KVWEAR_FEMU_BINARY) it replays two block plans through the device backend, one
guest boot each: 128 KiB sequential writes and 4 KiB random writes (fio, direct, libaio, iodepth 1).
The peer, measured in the same run with the same plans, is the host's fio on a plain file
(`file:` backend, iodepth 1): the ratio says how much slower the emulated path is. Also prints
the SMART Data Units Written delta next to fio's bytes, and FEMU's WAF when FEMU runs.

Run: .venv/bin/python bench/guest.py [--seq-mib 32] [--rand-mib 8] [--femu-binary PATH]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvwear.emulator.guest import build_guest
from kvwear.harness.devices.base import DeviceSpec, open_device
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
    ap.add_argument("--femu-binary", default=os.environ.get(FEMU_BINARY_ENV, ""))
    args = ap.parse_args()
    image = build_guest()
    print(f"guest: {image.kernel.parent} ({image.stamp.splitlines()[0]})")
    span = 64 * MiB
    plans = {"seq128k": plan("seq", args.seq_mib * MiB, span), "rand4k": plan("rand", args.rand_mib * MiB, span)}
    devices: list[tuple[str, DeviceSpec]] = [("qemu", DeviceSpec("qemu", capacity_bytes=span))]
    if args.femu_binary:
        devices.append(("femu", DeviceSpec("femu", options={"femu_binary": args.femu_binary})))
    else:
        print("femu: skipped (no --femu-binary / $KVWEAR_FEMU_BINARY)")
    with tempfile.TemporaryDirectory(prefix="kvwear-bench-guest-") as tmp:
        work = Path(tmp)
        host = open_device(DeviceSpec("file", target=str(work / "host.img"), capacity_bytes=span,
                                      options={"iodepth": 1}), work / "host")
        peer = {name: host.replay(p, work / f"host-{name}") for name, p in plans.items()}
        header = (f"{'device':<6} {'pattern':<8} {'boot s':>7} {'guest MB/s':>10} {'IOPS':>8} {'host MB/s':>9} "
                  f"{'guest/host':>10} {'fio bytes':>10} {'SMART DUW':>9} {'WAF':>6}")
        print(header)
        print("-" * len(header))
        for dev_name, spec in devices:
            dev = open_device(spec, work / dev_name)
            for name, p in plans.items():
                r = dev.replay(p, work / f"{dev_name}-{name}")
                ratio = mb_s(r) / mb_s(peer[name])
                waf = f"{r.waf:.2f}" if r.waf is not None else "—"
                print(f"{dev_name:<6} {name:<8} {r.details['boot_s']:>7.1f} {mb_s(r):>10.1f} "
                      f"{r.details['write_iops']:>8.0f} {mb_s(peer[name]):>9.1f} {ratio:>10.4f} "
                      f"{r.write_bytes:>10} {r.details['smart']['smart_duw_delta']:>9} {waf:>6}")
            dev.close()
        print(f"host peer: fio {peer['seq128k'].tool} on a file, direct, libaio, iodepth 1; "
              f"accel {r.details['accel']}, guest cache=none")


if __name__ == "__main__":
    main()
