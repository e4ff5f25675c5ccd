"""Placement handles on a real drive (`block:`): the FDP gate on recorded nvme-cli output (QEMU
10's FDP controller, Debian 12's QEMU 7.2 without FDP), the fallback to placement none on a loop
device (not NVMe) for real, and the host build of kvwear-dw from the repository's C source (gcc),
checked by its dry run against the plan's bytes per handle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.directive_plan import encode_plan, parse_report
from kvwear.harness.devices.fdp_host import fdp_capability, fdp_gate, host_dw_binary, nvme_namespace
from kvwear.harness.devices.fio import FioDevice, loop_device
from kvwear.harness.plan.placement import plan_write_bytes_by_handle
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.harness.wear.base import run_command
from kvwear.harness.wear.fdp import parse_fdp_configs_binary
from kvwear.harness.wear.identify import parse_id_ctrl_json

QEMU10 = Path(__file__).parent / "fixtures" / "qemu-10-fdp"
K = 4096


def _placed_plan(n: int, capacity: int) -> pa.Table:
    """n 4 KiB writes on distinct slots, every third on handle 1, then a read and a trim."""
    slots = np.random.default_rng(7).permutation(capacity // K)[:n]
    ops = ["write"] * n + ["read", "trim"]
    off = np.concatenate([slots * K, [0, 0]])
    handle = np.concatenate([(np.arange(n) % 3 == 0).astype(np.int8), [0, 0]])
    return BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(n + 2) * 1e-5, "op": pa.array(ops).dictionary_encode(), "offset_bytes": off,
        "length_bytes": np.full(n + 2, K), "obj_kind": np.where(handle == 1, "linear", "full"),
        "obj_id": np.arange(n + 2), "placement_handle": pa.array(handle, pa.int8())}))


def test_gate_on_recorded_controllers(shared: Path) -> None:
    fdp_ctrl = parse_id_ctrl_json((QEMU10 / "id-ctrl.json").read_text())
    configs = parse_fdp_configs_binary((QEMU10 / "fdp-configs.bin").read_bytes())
    ok, reason, cfg = fdp_gate(fdp_ctrl, configs, 3)
    assert ok and not reason and cfg is not None and cfg.reclaim_unit_handles == 3
    ok, reason, _ = fdp_gate(fdp_ctrl, configs, 4)
    assert not ok and reason == "no valid FDP configuration has 4 reclaim unit handles (#0: 3 handles)"
    assert fdp_gate(fdp_ctrl, (), 2)[1] == "the FDP Configurations log (20h) lists no configuration"
    plain = parse_id_ctrl_json((shared / "fixtures" / "qemu-7.2-nvme" / "id_ctrl_json.json").read_text())
    ok, reason, _ = fdp_gate(plain, None, 2)
    assert not ok and "(Identify Controller CTRATT 0x8000, bit 19 clear)" in reason
    assert nvme_namespace("/dev/nvme0n1") == ("/dev/nvme0", "/dev/ng0n1")
    assert nvme_namespace("/dev/nvme2c1n3") == ("/dev/nvme2", "/dev/ng2n3")


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create loop devices")
def test_a_placed_plan_on_a_loop_device_falls_back_to_plain_writes(tmp_path: Path) -> None:
    cap = 16 << 20
    plan = _placed_plan(300, cap)
    with loop_device(tmp_path / "loop.img", cap) as devpath:
        gate = fdp_capability(devpath, 2, run_command)
        assert not gate.ok and gate.reason == f"{devpath} is not an NVMe namespace"
        dev = FioDevice(DeviceSpec("block", devpath), tmp_path)
        res = dev.replay(plan, tmp_path / "run")
        assert res.placement_unavailable == gate.reason
        assert res.tool.startswith("fio") and res.handles is None and res.fdp_log is None
        assert res.write_bytes == 300 * K == res.details["diskstats_write_bytes"]
        dev.close()
    (tmp_path / "loop.img").unlink()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_host_build_of_kvwear_dw_counts_the_plan_per_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVWEAR_DW_CACHE", str(tmp_path / "cache"))
    binary = host_dw_binary()
    assert binary.parent.parent == tmp_path / "cache" and host_dw_binary() == binary     # built once
    plan = _placed_plan(50, 1 << 20)
    (tmp_path / "p.plan").write_bytes(encode_plan(plan, directives=True))
    out = subprocess.run([str(binary), "-n", "-b", "512", str(tmp_path / "p.plan")], capture_output=True,
                         check=True).stdout
    rep = parse_report(out)
    assert rep.dry_run and list(rep.write_bytes_by_handle) == plan_write_bytes_by_handle(plan)
    assert rep.directive_writes == 50 and (rep.read_bytes, rep.trim_bytes) == (K, K)
    assert json.loads(out)["tool"] == "kvwear-dw"
