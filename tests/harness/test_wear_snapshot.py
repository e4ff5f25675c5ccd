"""Readers, `snapshot`, `delta` and the WEAR table, driven by a runner that replays the recorded
tool outputs for the exact argv the readers must build (the parsers are the real ones); plus the
real nvme-cli/smartctl binaries (argv accepted, refusals tolerated) and, as root, psutil and
identity on a loop device the test creates."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import struct
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kvwear.errors import InputError, KvwearError, UnknownNameError
from kvwear.harness.devices.identity import path_identity
from kvwear.harness.wear._decode import ReaderUnavailable
from kvwear.harness.wear.base import READERS, WearSample, run_command
from kvwear.harness.wear.femu import femu_counters, femu_stats_log_argv, femu_vendor_reader
from kvwear.harness.wear.psutil_disk import parse_disk_counters
from kvwear.harness.wear.schema import WEAR
from kvwear.harness.wear.snapshot import CounterResetError, delta, snapshot, wear_rows, wear_table
from kvwear.tables import read_table, write_table

DEV = "/dev/nvme0n1"
SMART_READERS = ["nvme-smart-json", "nvme-smart-binary", "smartctl", "femu-vendor", "ocp-c0"]


class RecordedRunner:
    """Answers the argv the recorded guest ran with the recorded output of snapshot `k`; any
    other argv fails the test. A recorded refusal is raised as CalledProcessError, as
    `run_command` would."""

    def __init__(self, folder: Path, k: int) -> None:
        self.folder, self.k = folder, k
        self.calls: list[list[str]] = []
        self.table = {
            ("nvme", "smart-log", DEV, "-o", "json"): f"smart_json_{k}.json",
            ("nvme", "smart-log", DEV, "-o", "binary"): f"smart-log-{k}.bin",
            ("smartctl", "-j", "-a", DEV): f"smartctl_json_{k}.json",
            ("nvme", "id-ctrl", DEV, "-o", "json"): "id_ctrl_json.json",
            ("nvme", "id-ns", DEV, "-o", "json"): "id_ns_json.json",
            ("nvme", "ocp", "smart-add-log", DEV, "-o", "json"): "ocp_c0.txt",
        }

    def __call__(self, argv: Sequence[str]) -> bytes:
        self.calls.append(list(argv))
        name = self.table.get(tuple(argv))
        if name is None:
            raise AssertionError(f"unexpected command {list(argv)}")
        data = (self.folder / name).read_bytes()
        if name.endswith(".txt"):       # the recorder appended 'rc=N' after the tool's stderr
            lines = data.decode().splitlines()
            rc = int(lines[-1].removeprefix("rc="))
            raise subprocess.CalledProcessError(rc, list(argv), output=b"",
                                                stderr="\n".join(lines[:-1]).encode())
        return data


def _snaps(fixtures_dir: Path, dev: str) -> list[dict[str, WearSample]]:
    out = []
    for k in range(4):
        samples = snapshot(DEV, SMART_READERS, RecordedRunner(fixtures_dir / dev, k))
        assert [s.source for s in samples] == SMART_READERS
        out.append({s.source: s for s in samples})
    return out


def _fio_bytes(fixtures_dir: Path, dev: str, phase: str) -> int:
    doc = json.loads((fixtures_dir / dev / f"fio_{phase}_json.json").read_text())
    return int(doc["jobs"][0]["write"]["io_bytes"])


def test_snapshot_qemu(fixtures_dir: Path) -> None:
    snaps = _snaps(fixtures_dir, "qemu-7.2-nvme")
    s1 = snaps[1]
    for src in ("nvme-smart-json", "nvme-smart-binary", "smartctl"):
        assert s1[src].supported and s1[src].data_units_written == 525
        assert s1[src].host_bytes_written == 525 * 512_000 and s1[src].nand_bytes_written is None
    assert not s1["femu-vendor"].supported and "not a FEMU controller" in s1["femu-vendor"].note
    assert not s1["ocp-c0"].supported and "Invalid Field in Command" in s1["ocp-c0"].note
    fill = delta(snaps[0]["nvme-smart-binary"], snaps[1]["nvme-smart-binary"])
    rand = delta(snaps[1]["nvme-smart-json"], snaps[2]["nvme-smart-json"])
    for d, phase in ((fill, "fill"), (rand, "rand")):
        assert d.host_bytes_bounds is not None
        lo, hi = d.host_bytes_bounds
        assert lo < _fio_bytes(fixtures_dir, "qemu-7.2-nvme", phase) < hi
        assert d.nand_bytes is None and d.waf is None
    assert (fill.host_write_commands, rand.host_write_commands) == (2048, 131072)
    trim = delta(snaps[2]["smartctl"], snaps[3]["smartctl"])
    assert (trim.host_bytes, trim.data_units, trim.host_write_commands) == (0, 0, 0)


def test_snapshot_femu(fixtures_dir: Path) -> None:
    snaps = _snaps(fixtures_dir, "femu-bbssd")
    assert "Invalid Log Page" in snaps[0]["ocp-c0"].note
    fv = [s["femu-vendor"] for s in snaps]
    assert all(s.supported for s in fv)
    assert femu_counters(fv[2]).gc_pages == 664_832
    fill, rand, trim = delta(fv[0], fv[1]), delta(fv[1], fv[2]), delta(fv[2], fv[3])
    # FEMU's page counters are exact: host bytes equal fio's, with zero-width bounds.
    assert fill.host_bytes == _fio_bytes(fixtures_dir, "femu-bbssd", "fill") == fill.nand_bytes
    assert rand.host_bytes == _fio_bytes(fixtures_dir, "femu-bbssd", "rand")
    assert rand.host_bytes_bounds == (rand.host_bytes, rand.host_bytes)
    assert rand.nand_bytes == (147_456 + 664_832 - 49_152) * 4096
    assert rand.waf == pytest.approx(763_136 / 98_304)       # interval WAF ≈ 7.76
    assert (trim.host_bytes, trim.nand_bytes) == (0, 0)
    # The standard DUW of the same page agrees with the exact bytes within its bounds.
    smart = delta(snaps[1]["nvme-smart-binary"], snaps[2]["nvme-smart-binary"])
    assert smart.host_bytes_bounds is not None and rand.host_bytes is not None
    assert smart.host_bytes_bounds[0] < rand.host_bytes < smart.host_bytes_bounds[1]


def test_femu_vendor_explicit_option(fixtures_dir: Path) -> None:
    # assume_femu skips the identity check (no id-ctrl call) — the caller's explicit decision.
    runner = RecordedRunner(fixtures_dir / "femu-bbssd", 2)
    s = femu_vendor_reader(assume_femu=True)(DEV, runner)
    assert runner.calls == [["nvme", "smart-log", DEV, "-o", "binary"]]
    assert s.host_bytes_written == 147_456 * 4096


def test_femu_stats_reader(fixtures_dir: Path) -> None:
    # Newer FEMU's stats log C0h (layout as FEMU documents it), behind the recorded FEMU identity;
    # on stock QEMU's identity the reader refuses without reading C0h.
    page = struct.pack("<I4xQQQ", 5508, 147_456, 664_832, 147_456).ljust(512, b"\0")
    argv = femu_stats_log_argv(DEV)
    assert argv == ["nvme", "get-log", DEV, "--log-id=0xc0", "--log-len=512", "-b"]

    def runner(folder: str) -> Callable[[Sequence[str]], bytes]:
        recorded = RecordedRunner(fixtures_dir / folder, 2)
        return lambda a: page if list(a) == argv else recorded(a)

    s = READERS.get("femu-stats")(DEV, runner("femu-bbssd"))
    assert (s.host_bytes_written, s.nand_bytes_written) == (147_456 * 4096, (147_456 + 664_832) * 4096)
    with pytest.raises(ReaderUnavailable, match=r"not a FEMU controller.*not FEMU's stats log"):
        READERS.get("femu-stats")(DEV, runner("qemu-7.2-nvme"))


def test_delta_refuses_mismatches(fixtures_dir: Path) -> None:
    snaps = _snaps(fixtures_dir, "qemu-7.2-nvme")
    with pytest.raises(CounterResetError, match="host_bytes_written went from 805376000 to 268800000"):
        delta(snaps[2]["nvme-smart-json"], snaps[1]["nvme-smart-json"])
    with pytest.raises(KvwearError, match="cannot difference"):
        delta(snaps[0]["smartctl"], snaps[1]["nvme-smart-json"])
    with pytest.raises(KvwearError, match="unsupported"):
        delta(snaps[0]["ocp-c0"], snaps[1]["ocp-c0"])


def test_unknown_reader_runs_nothing(fixtures_dir: Path) -> None:
    runner = RecordedRunner(fixtures_dir / "qemu-7.2-nvme", 0)
    with pytest.raises(UnknownNameError, match=r"valid: .*nvme-smart-json"):
        snapshot(DEV, ["nvme-smart-json", "smart-magic"], runner)
    assert runner.calls == []


def test_garbled_output_is_not_swallowed(fixtures_dir: Path) -> None:
    good = RecordedRunner(fixtures_dir / "qemu-7.2-nvme", 1)

    def truncating(argv: Sequence[str]) -> bytes:
        return good(argv)[:300]

    with pytest.raises(InputError, match=r"nvme smart-log /dev/nvme0n1 -o binary: field 'smart log page': "
                                         r"expected 512 bytes, got 300"):
        snapshot(DEV, ["nvme-smart-binary"], truncating)


def test_smartctl_exit_bits(fixtures_dir: Path) -> None:
    doc = (fixtures_dir / "femu-bbssd" / "smartctl_json_1.json").read_bytes()

    def error_log_bit(argv: Sequence[str]) -> bytes:      # bit 6: error log has entries
        raise subprocess.CalledProcessError(64, list(argv), output=doc, stderr=b"")

    (s,) = snapshot(DEV, ["smartctl"], error_log_bit)
    assert s.supported and s.data_units_written == 394

    def cannot_open(argv: Sequence[str]) -> bytes:         # bit 1: device open failed
        raise subprocess.CalledProcessError(2, list(argv), output=b"{}", stderr=b"")

    (s,) = snapshot(DEV, ["smartctl"], cannot_open)
    assert not s.supported and "exit status 2" in s.note


def test_wear_table_roundtrip(fixtures_dir: Path, tmp_path: Path) -> None:
    folder = fixtures_dir / "femu-bbssd"
    rows = wear_rows(snapshot(DEV, SMART_READERS, RecordedRunner(folder, 1)), 0.0, "before", "lru")
    rows += wear_rows(snapshot(DEV, SMART_READERS, RecordedRunner(folder, 2)), 15.5, "after", "lru")
    path = write_table(WEAR, wear_table(rows), tmp_path / "wear.parquet")
    back = read_table(WEAR, path).to_pylist()
    assert len(back) == 2 * len(SMART_READERS)
    after = {r["source"]: r for r in back if r["phase"] == "after"}
    assert after["femu-vendor"]["nand_bytes_written"] == (147_456 + 664_832) * 4096
    assert after["nvme-smart-json"]["data_units_written"] == 1180
    assert after["ocp-c0"]["host_bytes_written"] is None
    assert after["ocp-c0"]["raw"].startswith("unsupported: ") and "Invalid Log Page" in after["ocp-c0"]["raw"]
    assert bytes.fromhex(after["nvme-smart-binary"]["raw"]) == (folder / "smart-log-2.bin").read_bytes()
    with pytest.raises(ValueError, match="phase must be one of"):
        wear_rows([], 0.0, "during")


# --- the real tools -------------------------------------------------------------------------

ABSENT = "/dev/kvwear-test-absent"


@pytest.mark.skipif(shutil.which("nvme") is None or shutil.which("smartctl") is None,
                    reason="nvme-cli or smartmontools not installed")
def test_real_tools_accept_argv_and_refusals_are_tolerated(fixtures_dir: Path) -> None:
    # Collect the argv every reader builds, then hand each to the real binary on a missing
    # device: the options must parse (the tool gets as far as opening the device).
    argvs: list[list[str]] = []

    def recorder(argv: Sequence[str]) -> bytes:
        argvs.append(list(argv))
        raise subprocess.CalledProcessError(1, list(argv), output=b"", stderr=b"")

    snapshot(ABSENT, READERS.names(), recorder)
    tools = {a[0] for a in argvs}
    assert tools == {"nvme", "smartctl"} and len(argvs) >= 7
    for argv in argvs:
        proc = subprocess.run(argv, capture_output=True, timeout=30)
        text = (proc.stdout + proc.stderr).decode(errors="replace")
        assert "unrecognized option" not in text and "invalid option" not in text, (argv, text)
        if argv[0] == "nvme":
            assert f"{ABSENT}: No such file or directory" in text, (argv, text)
            if "-o" in argv:      # the output format must be one the subcommand lists
                fmt = argv[argv.index("-o") + 1]
                assert f"|{fmt}" in text or f"{fmt}|" in text, (argv, text)
    # And through the real runner every reader is recorded as unsupported, none raises.
    samples = snapshot(ABSENT, READERS.names(), run_command)
    assert [s.source for s in samples] == READERS.names()
    assert not any(s.supported for s in samples)
    by = {s.source: s for s in samples}
    assert "Unable to detect device type" in by["smartctl"].note
    assert "No such file or directory" in by["nvme-smart-binary"].note
    assert "no such device" in by["psutil"].note


# --- psutil and identity on a loop device this test creates --------------------------------


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("losetup") is None, reason="needs root and losetup")
def test_psutil_and_identity_on_loop_device(tmp_path: Path) -> None:
    backing = tmp_path / "loop.img"
    with open(backing, "wb") as fh:
        fh.truncate(8 * 2**20)
    try:
        loop = subprocess.run(["losetup", "--find", "--show", str(backing)], check=True,
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot attach a loop device here: {exc}")
    try:
        ident = path_identity(loop)
        assert (ident.kind, ident.capacity_bytes, ident.logical_block_bytes) == ("block", 8 * 2**20, 512)
        assert ident.extra.get("loop_backing_file") == str(backing)

        read = READERS.get("psutil")
        before = read(loop, run_command)
        buf = mmap.mmap(-1, 2**20)                 # page-aligned, as O_DIRECT needs
        buf.write(b"\xa5" * 2**20)
        fd = os.open(loop, os.O_WRONLY | os.O_DIRECT)
        try:
            assert os.pwritev(fd, [buf], 0) == 2**20
            os.fsync(fd)
        finally:
            os.close(fd)
        after = read(loop, run_command)
        d = delta(before, after)
        assert d.host_bytes == 2**20 and d.host_bytes_bounds == (2**20, 2**20)
        assert d.host_write_commands is not None and d.host_write_commands >= 1
    finally:
        subprocess.run(["losetup", "--detach", loop], check=False, timeout=30)


def test_psutil_parser_errors() -> None:
    from collections import namedtuple

    Io = namedtuple("Io", "write_bytes write_count")
    s = parse_disk_counters({"vda": Io(4096, 1)}, "vda")
    assert (s.host_bytes_written, s.host_write_commands) == (4096, 1)
    with pytest.raises(KvwearError, match=r"no counters for disk 'sdz' \(known: vda\)"):
        parse_disk_counters({"vda": Io(4096, 1)}, "sdz")
    with pytest.raises(InputError, match="not a disk counter record"):
        parse_disk_counters({"vda": (1, 2)}, "vda")
