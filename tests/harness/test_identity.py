"""Device identity from the recorded nvme-cli / smartctl outputs, and from a plain file."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvwear.errors import InputError
from kvwear.harness.devices.identity import path_identity
from kvwear.harness.wear.femu import is_femu
from kvwear.harness.wear.identify import (
    identity_from_nvme,
    identity_from_nvme_list,
    identity_from_smartctl,
    list_nvme_devices,
    nvme_identity,
    parse_id_ctrl_json,
    parse_id_ns_json,
    parse_nvme_list_json,
)

EXPECTED = {
    # model, serial, firmware, capacity (= fio's whole-namespace fill), block size
    "qemu-7.2-nvme": ("QEMU NVMe Ctrl", "kvwear0001", "7.2.22", 268_435_456, 512),
    "femu-bbssd": ("FEMU BlackBox-SSD Controller", "vSSD0", "1.0", 201_326_592, 512),
}


@pytest.mark.parametrize("dev", sorted(EXPECTED))
def test_identity_sources_agree(fixtures_dir: Path, dev: str) -> None:
    d = fixtures_dir / dev
    ctrl = parse_id_ctrl_json((d / "id_ctrl_json.json").read_bytes(), str(d / "id_ctrl_json.json"))
    ns = parse_id_ns_json((d / "id_ns_json.json").read_bytes())
    ident = identity_from_nvme(ctrl, ns, "/dev/nvme0n1")
    model, serial, fw, cap, lbs = EXPECTED[dev]
    assert (ident.model, ident.serial, ident.firmware) == (model, serial, fw)   # padding stripped
    assert (ident.capacity_bytes, ident.logical_block_bytes) == (cap, lbs)
    assert ctrl.total_capacity_bytes == 0          # emulators leave tnvmcap 0: size comes from nsze
    # The fio fill wrote the whole namespace: its byte count is the capacity.
    fio = json.loads((d / "fio_fill_json.json").read_text())["jobs"][0]["write"]["io_bytes"]
    assert fio == cap
    listed = identity_from_nvme_list(parse_nvme_list_json((d / "nvme_list_json.json").read_bytes()),
                                     "/dev/nvme0n1")
    assert (listed.model, listed.serial, listed.firmware, listed.capacity_bytes, listed.logical_block_bytes) \
        == (model, serial, fw, cap, lbs)
    sc = identity_from_smartctl((d / "smartctl_json_0.json").read_bytes(), "/dev/nvme0")
    assert (sc.model, sc.serial, sc.firmware) == (model, serial, fw)
    if dev == "femu-bbssd":       # smartctl prints the namespace size only for FEMU's single namespace
        assert (sc.capacity_bytes, sc.logical_block_bytes) == (cap, lbs)
    assert is_femu(ident) == is_femu(ctrl) == (dev == "femu-bbssd")


def test_nvme_identity_runs_the_right_commands(fixtures_dir: Path) -> None:
    d = fixtures_dir / "femu-bbssd"
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> bytes:
        calls.append(list(argv))
        return (d / ("id_ctrl_json.json" if argv[1] == "id-ctrl" else "id_ns_json.json")).read_bytes()

    assert nvme_identity("/dev/nvme0n1", runner).capacity_bytes == 201_326_592
    assert calls == [["nvme", "id-ctrl", "/dev/nvme0n1", "-o", "json"],
                     ["nvme", "id-ns", "/dev/nvme0n1", "-o", "json"]]
    calls.clear()
    nvme_identity("/dev/nvme0", runner)       # a controller: namespace 1 is identified
    assert calls[1] == ["nvme", "id-ns", "/dev/nvme0", "--namespace-id=1", "-o", "json"]
    if shutil.which("nvme"):                  # the real nvme-cli accepts that argv
        out = subprocess.run([*calls[1][:2], "/dev/kvwear-absent", *calls[1][3:]], capture_output=True,
                             timeout=30)
        assert b"unrecognized option" not in out.stdout + out.stderr
        assert b"No such file or directory" in out.stdout + out.stderr


def test_lba_format_selection_and_errors(fixtures_dir: Path) -> None:
    doc = json.loads((fixtures_dir / "qemu-7.2-nvme" / "id_ns_json.json").read_text())
    doc["flbas"] = 4                           # QEMU lists 4 KiB formats at index 4-7
    ns = parse_id_ns_json(json.dumps(doc))
    assert (ns.logical_block_bytes, ns.size_bytes) == (4096, 524_288 * 4096)
    doc["flbas"] = 0x10 | 3                    # bit 4 is metadata-at-end-of-LBA, not an index bit
    assert parse_id_ns_json(json.dumps(doc)).formatted_lba_index == 3
    doc["flbas"] = 9
    with pytest.raises(InputError, match="field 'flbas': selects LBA format 9, only 8 listed"):
        parse_id_ns_json(json.dumps(doc), "ns.json")
    doc["flbas"], doc["lbafs"][0]["ds"] = 0, 3
    with pytest.raises(InputError, match=r"lbafs\[0\]\.ds"):
        parse_id_ns_json(json.dumps(doc), "ns.json")
    ctrl = json.loads((fixtures_dir / "qemu-7.2-nvme" / "id_ctrl_json.json").read_text())
    del ctrl["sn"]
    with pytest.raises(InputError, match="field 'sn'"):
        parse_id_ctrl_json(json.dumps(ctrl), "ctrl.json")
    with pytest.raises(InputError, match=r"no device '/dev/nvme9n1' \(listed: /dev/nvme0n1\)"):
        identity_from_nvme_list(parse_nvme_list_json(
            (fixtures_dir / "qemu-7.2-nvme" / "nvme_list_json.json").read_bytes()), "/dev/nvme9n1")


def test_plain_file_identity(tmp_path: Path) -> None:
    f = tmp_path / "disk.img"
    with open(f, "wb") as fh:
        fh.truncate(3 * 2**20 + 512)
    ident = path_identity(f)
    assert (ident.kind, ident.path, ident.capacity_bytes) == ("file", str(f), 3 * 2**20 + 512)
    assert ident.logical_block_bytes in (None, 512, 1024, 2048, 4096)
    with pytest.raises(InputError, match="neither a regular file nor a block device"):
        path_identity("/dev/null")


def test_list_nvme_devices(fixtures_dir: Path) -> None:
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> bytes:
        calls.append(list(argv))
        return (fixtures_dir / "qemu-7.2-nvme" / "nvme_list_json.json").read_bytes()

    (dev,) = list_nvme_devices(runner)
    assert calls == [["nvme", "list", "-o", "json"]]
    assert (dev.device_path, dev.namespace, dev.size_bytes, dev.sector_bytes) == ("/dev/nvme0n1", 1, 268_435_456, 512)
    assert dev.extra["MaximumLBA"] == 524_288
    with pytest.raises(InputError, match=r"field 'Devices'"):
        parse_nvme_list_json(b'{"devices": []}', "list.json")
