"""`kvwear run` on emulated drives: a policy's plan replayed in a real QEMU guest (SMART host
counters vs the plan), and the FEMU cross-validation path (the embedded FTL configured as the
FEMU drive predicts the WAF that the recorded FEMU run measured)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from kvwear.harness.cli.main import app
from kvwear.harness.devices.measurement import DeviceMeasurement, HostCount
from kvwear.harness.devices.qemu import femu_deltas
from kvwear.harness.estimate.estimator import DUW_NOTE, Estimate, PlanRecord, counter_check
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.run import emulator_waf
from kvwear.harness.pipeline.rundir import RunDir
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES
from kvwear.tables import read_table, write_table

FIXTURE_GEOMETRY = {"devsz_mb": 192, "pgs_per_blk": 256, "blks_per_pl": 64, "pls_per_lun": 1, "luns_per_ch": 2,
                    "nchs": 2, "gc_thres_pcent": 75, "gc_thres_pcent_high": 95}


def test_duw_check_uses_the_counter_rounding() -> None:
    def duw(units: int) -> HostCount:
        return HostCount("s", units * NVME_DATA_UNIT_BYTES, NVME_DATA_UNIT_BYTES)

    assert counter_check(1_000_000, duw(2)).passed            # 1 MB is inside (512,000, 1,536,000)
    assert not counter_check(5_000_000, duw(2)).passed
    assert counter_check(0, duw(0)).passed


def test_femu_emulator_prediction_matches_the_recorded_femu_run(tmp_path: Path, fixtures_dir: Path) -> None:
    # The fixture's random phase: 4 KiB random writes of 2 × the 192 MiB namespace after a fill.
    pages = (192 << 20) // 4096
    rng = np.random.default_rng(7)
    lpn = rng.integers(0, pages, size=2 * pages)
    plan = pa.table({"t_s": np.zeros(lpn.size), "op": ["write"] * lpn.size, "offset_bytes": lpn * 4096,
                     "length_bytes": np.full(lpn.size, 4096), "obj_kind": ["full"] * lpn.size,
                     "obj_id": np.arange(lpn.size)})
    rd = RunDir(tmp_path / "run")
    write_table(BLOCK_OPS, plan, rd.stage_dir("plan", "lru") / "block_ops.parquet")
    cfg = config_from_mapping({"device": {"kind": "femu", "options": {"femu": FIXTURE_GEOMETRY,
                                                                      "precondition": "fill"}}})
    predicted = emulator_waf(cfg, rd, "lru")
    d = fixtures_dir / "femu-bbssd"
    measured = femu_deltas((d / "smart-log-1.bin").read_bytes(), (d / "smart-log-2.bin").read_bytes())["femu_waf"]
    assert measured == pytest.approx(7.76, abs=0.01)
    assert predicted == pytest.approx(measured, rel=0.05)


def _qemu_run(tmp_path: Path, policy: str) -> Path:
    """`kvwear run` of a small workload under `policy` on the qemu device; its run directory."""
    from kvwear.emulator.guest import build_guest

    build_guest()
    out = tmp_path / "run"
    res = CliRunner().invoke(app, [
        "run", "-o", str(out), "--device", "qemu", "--policy", policy,
        "--param", "sessions=2", "--param", "turns=3", "--param", "system_prompt_tokens=256",
        "--model", "qwen3-next-80b-a3b", "--dram", "200MB", "--ssd", "300MB",
    ])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return out


@pytest.mark.guest
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86 not installed")
def test_run_replays_a_policy_plan_in_a_qemu_guest(tmp_path: Path) -> None:
    out = _qemu_run(tmp_path, "lru")
    plan = PlanRecord.load(out / "plan" / "lru" / "plan.json").counts
    device = DeviceMeasurement.load(out / "device" / "lru" / "result.json").replay
    assert plan.aligned_write_bytes > 0
    assert device.write_bytes == plan.aligned_write_bytes                  # fio issued the plan
    duw = device.details["smart"]["smart_duw_delta"]
    assert abs(duw - math.ceil(plan.aligned_write_bytes / 512_000)) <= 1     # SMART counted it
    assert device.write_ios == plan.write_ios
    # The guest's NVMe driver splits an I/O larger than the controller's maximum transfer (QEMU's
    # MDTS 7: 2^7 × 4 KiB = 512 KiB) into several write commands.
    ops = read_table(BLOCK_OPS, out / "plan" / "lru" / "block_ops.parquet")
    lengths = ops.filter(pc.equal(pc.cast(ops.column("op"), pa.string()), "write")).column("length_bytes")
    commands = int(np.ceil(lengths.to_numpy() / (512 << 10)).sum())
    assert device.details["smart"]["smart_host_write_commands_delta"] == commands
    checks = Estimate.load(out / "estimate" / "lru" / "crossval.json").checks
    smart = [c for c in checks if c.source == "smart-duw (guest)"]
    assert smart and smart[0].passed
    # Evictions TRIM: the guest issued them (blkdiscard after each segment, or fio itself).
    if plan.trim_bytes:
        trims = [c for c in checks if c.name == "trim bytes"]
        assert len(trims) == 1 and trims[0].passed and trims[0].predicted == plan.trim_bytes, trims
        assert device.trims.mode in ("native", "deferred") and device.trim_bytes > 0
    assert "smart-duw (guest)" in (out / "report" / "report.html").read_text()
    # the note on SMART's rounding stands on the SMART row of the report, not on fio's
    rows = [r for r in (out / "report" / "report.md").read_text().splitlines() if r.startswith("| lru | host bytes |")]
    # (the fio row is named by the guest's fio: fio-3.33 on Debian 12, fio-3.39 on Debian 13)
    assert {r.split(" | ")[2]: r.endswith(f"| {DUW_NOTE} |") for r in rows} == {device.tool: False,
                                                                                 "smart-duw (guest)": True}, rows


@pytest.mark.guest
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86 not installed")
def test_run_on_qemu_with_a_policy_that_never_writes(tmp_path: Path) -> None:
    """A plan without rows (the oracle with no write budget): the guest boots, plays no job (its fio
    would refuse an empty iolog) and SMART measures zero bytes written; the femu backend shares this
    replay path."""
    out = _qemu_run(tmp_path, "belady:max_write_bytes=0")
    label = next((out / "device").iterdir()).name
    plan = PlanRecord.load(out / "plan" / label / "plan.json").counts
    device = DeviceMeasurement.load(out / "device" / label / "result.json").replay
    assert plan.aligned_write_bytes == plan.trim_bytes == 0
    assert device.write_bytes == device.read_bytes == device.write_ios == 0
    assert device.details["empty_plan"] and device.trims.mode == "none"
    smart = device.details["smart"]
    assert smart["smart_duw_delta"] == 0 and smart["smart_host_write_commands_delta"] == 0
    outputs = Path(device.details["guest_outputs"])
    assert (outputs / "smart-after.bin").is_file() and not (outputs / "fio.json").exists()
    checks = Estimate.load(out / "estimate" / label / "crossval.json").checks
    acc = [c for c in checks if c.kind == "accounting"]
    assert acc and all(c.passed for c in acc), acc
    assert not list(out.rglob("*.img"))                   # the drive image went with the device stage
