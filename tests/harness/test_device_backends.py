"""The device-backend family (kvwear.harness.devices.base): one typed options parser for every backend,
capabilities asked instead of names, and a backend added as one module + one registry line."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq
import pytest

from kvwear.errors import KvwearError
from kvwear.harness.cli.main import main
from kvwear.harness.devices.base import DEVICES, DeviceParams, DeviceSpec, backend, option
from kvwear.harness.devices.measurement import DeviceMeasurement
from kvwear.harness.pipeline.sweep import plan_sweep

# (--device, an option the backend does take, which must be in the valid list)
BACKENDS = [("sim", "op_ratio"), ("file:{d}/new.img", "iodepth"), ("block:{d}/no-such-dev", "confirm_serial"),
            ("qemu", "player"), ("femu", "femu")]


def _cli(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> tuple[int | str | None, str]:
    monkeypatch.setattr(sys, "argv", ["kvwear", *(a.replace("{d}", str(tmp_path)) for a in argv)])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize(("device", "valid"), BACKENDS)
def test_a_mistyped_option_is_refused_with_the_valid_ones(
        device: str, valid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["run", "--device", device, "--device-option", "op_raito=0.1", "-o", "{d}/r"],
                     tmp_path, monkeypatch, capsys)
    kind = device.partition(":")[0]
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    m = re.fullmatch(rf"kvwear: error: device {kind}: unknown option op_raito \(valid: (.*)\)", lines[0])
    assert m is not None, err
    assert valid in m.group(1).split(", ") and "op_raito" not in m.group(1)
    assert list(tmp_path.iterdir()) == []          # nothing written: no run folder, no drive file


@pytest.mark.parametrize(("device", "option_text", "says"), [
    ("sim", "pages_per_block=abc", "device sim: option pages_per_block: expected an integer, got 'abc'"),
    ("sim", "pages_per_block=0", "device sim: option pages_per_block: must be in (0, 65,536], got 0"),
    ("sim", "victim=lifo", "device sim: option victim: must be one of greedy, cost-benefit, fifo, got 'lifo'"),
    ("sim", "honor_trim=maybe", "device sim: option honor_trim: expected true or false, got 'maybe'"),
    ("file:{d}/new.img", "precondition=true", "device file: option precondition: must be one of none, fill, steady"),
    ("file:{d}/new.img", "trim_segment_bytes=lots", "device file: option trim_segment_bytes: expected a size"),
    ("qemu", "precondition=steady", "device qemu: option precondition: must be one of none, fill, got 'steady'"),
    ("qemu", "boot_timeout_s=soon", "device qemu: option boot_timeout_s: expected a number of seconds or a duration"),
    ("femu", "femu.nchs=x", "device.options.femu.nchs: expected an integer, got 'x'"),
])
def test_a_bad_value_names_the_option_and_what_it_expects(
        device: str, option_text: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["run", "--device", device, "--device-option", option_text, "-o", "{d}/r"],
                     tmp_path, monkeypatch, capsys)
    assert code == 2 and err.strip().startswith(f"kvwear: error: {says}"), err
    assert list(tmp_path.iterdir()) == []


@dataclass(frozen=True)
class _Opts(DeviceParams):
    depth: int = option(4, ge=1)
    size_bytes: int | None = None
    rate: float = 1.0
    label: str = "x"
    mode: Literal["a", "b"] = "a"
    on: bool = False
    table: dict[str, Any] = field(default_factory=dict)


def test_the_parser_reads_each_type_from_text_and_values() -> None:
    p = _Opts.parse({"depth": "8", "size_bytes": "64MiB", "rate": "0.5", "label": 12, "mode": "b", "on": "yes",
                     "table.k": 3, "table.j": "v"}, "device toy")
    assert p == _Opts(depth=8, size_bytes=64 << 20, rate=0.5, label="12", mode="b", on=True,
                      table={"k": 3, "j": "v"})
    assert _Opts.parse({}, "device toy") == _Opts()
    for bad, says in (({"depth": True}, "depth: expected an integer"), ({"depth": 0}, "depth: must be ≥ 1"),
                      ({"rate": "inf"}, "rate: expected a finite number"), ({"label": False}, "label: expected text"),
                      ({"table": 3}, "table: expected a table"), ({"nope.k": 1}, "unknown option nope.k")):
        with pytest.raises(KvwearError, match=re.escape(says)):
            _Opts.parse(bad, "device toy")


def test_capabilities_replace_the_names() -> None:
    caps = {k: backend(k).capabilities for k in ("sim", "file", "block", "qemu", "femu")}
    assert [k for k, c in caps.items() if c.block_tracer] == ["block"]
    assert [k for k, c in caps.items() if c.drive_resource] == ["file", "block", "qemu", "femu"]
    assert [k for k, c in caps.items() if c.fixed_size] == ["block", "femu"]
    assert [k for k, c in caps.items() if c.ftl_twin] == ["femu"]
    assert caps["sim"].handle_count_option == "ruh"
    block = backend("block")
    assert block.default_wear_readers(DeviceSpec("block", "/dev/nvme0n1"))[:2] == ("psutil", "nvme-smart-binary")
    assert block.default_wear_readers(DeviceSpec("block", "/dev/loop3")) == ("psutil",)
    femu = DeviceSpec("femu", options={"femu.devsz_mb": 160})
    fixed = backend("femu").fixed_capacity(femu)
    assert fixed is not None and (fixed.exposed_bytes, fixed.whole) == (160 << 20, True)
    ftl = backend("femu").ftl_config(femu)
    assert ftl is not None and ftl.exposed_bytes == 160 << 20
    assert backend("sim").fixed_capacity(DeviceSpec("sim", capacity_bytes=1 << 30)) is None


# A backend outside the package: a RAM drive of fixed size, which counts what it writes itself.
TOY_MODULE = '''
"""A toy backend: a RAM drive of `size_mib` MiB (test only)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvwear.harness.devices.base import DEVICES, Backend, Capabilities, DeviceParams, DeviceSpec, FixedCapacity, option
from kvwear.harness.devices.measurement import ReplayResult, TrimCount
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.harness.devices.sim import plan_to_requests


@dataclass(frozen=True)
class ToyParams(DeviceParams):
    size_mib: int = option(64, ge=1)


class ToyDevice:
    def __init__(self, spec: DeviceSpec, workdir: Path) -> None:
        self.spec = spec
        self.cap = spec.capacity_bytes or ToyParams.of(spec).size_mib << 20
        self.pages = np.zeros(self.cap // 4096, dtype=np.int64)     # writes per 4 KiB page

    def identity(self) -> DeviceIdentity:
        return DeviceIdentity(kind="toy", path="ram", model="toy-ram", capacity_bytes=self.cap)

    def capacity_bytes(self) -> int:
        return self.cap

    def replay(self, plan: pa.Table, workdir: Path, *, timed: bool = False, progress=None) -> ReplayResult:
        t = time.perf_counter()
        codes, first, npages = plan_to_requests(plan, 4096, self.cap)
        written = {0: 0, 1: 0, 2: 0}
        for op, f, n in zip(codes.tolist(), first.tolist(), npages.tolist()):
            if op == 0:
                self.pages[f:f + n] += 1
            written[op] += n * 4096
        return ReplayResult(device="toy", tool="toy", write_bytes=written[0], read_bytes=written[1],
                            trim_bytes=written[2], write_ios=int((codes == 0).sum()),
                            read_ios=int((codes == 1).sum()), wall_s=time.perf_counter() - t,
                            trims=TrimCount.native(written[2]))

    def close(self) -> None:
        pass


class Toy(Backend):
    Params = ToyParams
    capabilities = Capabilities(drive_resource=True, fixed_size=True)
    device = ToyDevice

    @classmethod
    def fixed_capacity(cls, spec: DeviceSpec) -> FixedCapacity:
        return FixedCapacity(ToyParams.of(spec).size_mib << 20, whole=False)


DEVICES.add("toy", Toy)
'''


@pytest.fixture
def toy_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The toy module on the path and in DEVICES' module list (the one registry line), undone after."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "kvwear_toy_backend.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(folder))
    DEVICES.load()
    monkeypatch.setattr(DEVICES, "_items", dict(DEVICES._items))
    monkeypatch.setattr(DEVICES, "modules", (*DEVICES.modules, "kvwear_toy_backend"))
    monkeypatch.setattr(DEVICES, "_loaded", False)
    monkeypatch.delitem(sys.modules, "kvwear_toy_backend", raising=False)
    return "toy"


def test_a_backend_is_one_module_and_one_registry_line(
        toy_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert toy_backend in DEVICES
    code, err = _cli(["run", "--device", "toy", "--device-option", "size_mib=48", "--policy", "lru",
                      "--param", "sessions=3", "--param", "turns=3", "--dram", "1GB", "--no-report",
                      "-o", "{d}/r"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    out = tmp_path / "r"
    row = pq.read_table(out / "results.parquet").to_pylist()[0]
    # the SSD tier was sized from the toy's fixed capacity (tiers.ssd_bytes = 0)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["devices"]["tiers"]["source"] == "device"
    assert manifest["devices"]["capacity_bytes"] == 48 << 20
    assert row["plan_write_bytes"] == row["device_write_bytes"] > 0
    assert row["accounting_checks_passed"] == row["accounting_checks_total"] > 0
    result = DeviceMeasurement.load(out / "device" / "lru" / "result.json")
    assert result.identity.model == "toy-ram" and result.wear == () and result.capture is None
    # its capabilities reach the sweep planner: a drive to share, a size of its own
    plan = plan_sweep({"base": {"device": {"kind": "toy"}, "policies": ["lru"]},
                       "sweep": {"replay": True, "drive_resource": "toy0"}}, "s.toml")
    assert plan.points[0].resource == "toy0" and plan.points[0].config.tiers.ssd_bytes == 0
