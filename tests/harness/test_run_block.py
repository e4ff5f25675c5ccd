"""`kvwear run --device block:/dev/loopN` on a loop device the test creates: the report's
cross-validation lists plan, fio, eBPF and psutil bytes per policy, and they agree exactly."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvwear.harness.cli.main import app
from kvwear.harness.devices.fio import loop_device
from kvwear.harness.devices.measurement import DeviceMeasurement
from kvwear.harness.estimate.estimator import Estimate, PlanRecord
from kvwear.harness.pipeline.sizing import CAPACITY_HEADROOM

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("fio") is None, reason="needs root and fio"),
]


@pytest.fixture
def drive_img(tmp_path: Path) -> Iterator[Path]:
    """The loop device's backing file: the runs write up to 1 GiB into it, so it is removed
    after the test (pytest keeps its last temporary folders, and the disk is shared)."""
    path = tmp_path / "drive.img"
    yield path
    path.unlink(missing_ok=True)


def test_run_on_a_loop_device_with_capture(tmp_path: Path, drive_img: Path) -> None:
    out = tmp_path / "run"
    with loop_device(drive_img, 1 << 30) as dev:
        res = CliRunner().invoke(app, [
            "run", "-o", str(out), "--device", f"block:{dev}", "--tracer", "auto",
            "--policy", "lru", "--policy", "type-aware", "--param", "sessions=3", "--param", "turns=3",
            "--dram", "1GB", "--ssd", "900MB",
        ])
        assert res.exit_code == 0, res.output + repr(res.exception)
    for label in ("lru", "type-aware"):
        plan = PlanRecord.load(out / "plan" / label / "plan.json").counts
        checks = Estimate.load(out / "estimate" / label / "crossval.json").checks
        host = {c.source: c for c in checks if c.name == "host bytes"}
        assert any(s.startswith("fio-") for s in host), host
        assert any(s.startswith("ebpf:") for s in host), host
        assert "wear:psutil" in host
        for c in host.values():
            assert c.predicted == plan.aligned_write_bytes > 0
            assert c.measured == c.predicted, c            # exact for aligned direct I/O
        device = DeviceMeasurement.load(out / "device" / label / "result.json")
        # Evictions TRIM: fio replays them, or (fio 3.33) the backend issues them between segments;
        # either way issued + superseded = the plan's trims and eBPF saw the issued ones as discards.
        trims = [c for c in checks if c.name == "trim bytes"]
        if plan.trim_bytes:
            assert device.replay.trims.mode in ("native", "deferred") and len(trims) == 2, trims
            assert all(c.passed and c.kind == "accounting" for c in trims), trims
            ebpf = next(c for c in trims if c.source.startswith("ebpf:"))
            assert ebpf.predicted == device.replay.trim_bytes > 0
        assert device.capture is not None and device.capture.lost_events >= 0      # counted and reported
        assert (device.identity.serial or "").startswith("loop:")
        assert (out / "device" / label / "block_trace.parquet").exists()
        assert (out / "device" / label / "wear.parquet").exists()
    html = (out / "report" / "report.html").read_text()
    for src in ("fio-", "ebpf:", "wear:psutil"):
        assert src in html
    assert "eBPF capture by bcc" in html or "eBPF capture by bpftrace" in html     # says which tracer ran


def test_the_run_help_loop_device_example_runs_as_written(tmp_path: Path, drive_img: Path) -> None:
    """`kvwear run --help`'s loop device example, with /dev/loop7 the loop device this test makes (1 GiB,
    sparse) and its run directory under tmp_path: no --ssd, so the SSD tier is the device's capacity."""
    import re
    import shlex

    import typer.main

    epilog = typer.main.get_command(app).commands["run"].epilog  # type: ignore[attr-defined]
    epilog = re.sub(r"\\\s*\n\s*", " ", epilog)          # backslash continuations
    line = next(ln.strip() for ln in epilog.splitlines() if "block:/dev/loop7" in ln)
    argv = shlex.split(line)[2:]
    assert "--ssd" not in argv and argv[argv.index("-o") + 1] == "runs/loop"
    out = tmp_path / "runs" / "loop"
    with loop_device(drive_img, 1 << 30) as dev:
        argv = [a.replace("/dev/loop7", dev) for a in argv]
        argv[argv.index("-o") + 1] = str(out)
        res = CliRunner().invoke(app, ["run", *argv])
        assert res.exit_code == 0, res.output + repr(res.exception)
    tiers = json.loads((out / "manifest.json").read_text())["devices"]["tiers"]
    assert tiers["source"] == "device" and tiers["ssd_bytes"] == int((1 << 30) / CAPACITY_HEADROOM)
    assert "usable" in res.output                         # the summary says how the tier was sized
    checks = Estimate.load(out / "estimate" / "lru" / "crossval.json").checks
    acc = [c for c in checks if c.kind == "accounting"]
    assert any(c.source.startswith("ebpf:") for c in acc) and all(c.passed for c in acc), acc
