"""kvwear.harness.devices.directive_plan: the kvwear-dw plan encoder and report parser, and the C tool itself
(emulator/kvwear_dw.c, compiled here with the host's gcc as build-guest.sh does) reading what the
encoder wrote: its dry run (-n) counts exactly the plan's bytes per op and per handle."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.emulator.guest import DW_SOURCE, GuestError, GuestImage, require_tool, tool_stamp_line
from kvwear.errors import InputError, KvwearError
from kvwear.harness.devices.directive_plan import (
    HEADER,
    PLAN_MAGIC,
    PLAN_VERSION,
    RECORD,
    encode_plan,
    parse_report,
)
from kvwear.harness.plan.placement import plan_write_bytes_by_handle
from kvwear.harness.plan.schema import BLOCK_OPS
from tests.harness.cbuild import build_static

K = 4096


def _plan(rows: list[tuple[str, int, int, int]]) -> pa.Table:
    """rows: (op, offset, length, handle)."""
    return BLOCK_OPS.conform(pa.table({
        "t_s": pa.array(np.arange(len(rows)) * 0.5, pa.float64()),
        "op": pa.array([r[0] for r in rows]).dictionary_encode(),
        "offset_bytes": pa.array([r[1] for r in rows], pa.int64()),
        "length_bytes": pa.array([r[2] for r in rows], pa.int64()),
        "obj_kind": pa.array(["full"] * len(rows)).dictionary_encode(),
        "obj_id": pa.array(range(len(rows)), pa.int64()),
        "placement_handle": pa.array([r[3] for r in rows], pa.int32()),
    }))


ROWS = [("write", 0, 3 * 2**20, 0), ("write", 8 * 2**20, K, 1), ("read", 0, 64 * K, 0),
        ("write", 16 * 2**20, 2 * K, 3), ("trim", 8 * 2**20, K, 0), ("write", 0, 8 * K, 1)]


def _decode(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    return np.frombuffer(data[:32], HEADER), np.frombuffer(data[32:], RECORD)


def test_encode_plan_layout_with_directives() -> None:
    data = encode_plan(_plan(ROWS), directives=True, timed=True)
    hdr, recs = _decode(data)
    assert len(data) == 32 + 32 * len(ROWS)
    assert (hdr["magic"][0], hdr["version"][0], hdr["record_bytes"][0], hdr["records"][0], hdr["flags"][0]) == (
        PLAN_MAGIC, PLAN_VERSION, 32, len(ROWS), 1)
    assert recs["op"].tolist() == [0, 0, 1, 0, 2, 0]
    assert recs["offset_bytes"].tolist() == [r[1] for r in ROWS]
    assert recs["length_bytes"].tolist() == [r[2] for r in ROWS]
    assert recs["handle"].tolist() == [0, 1, 0, 3, 0, 1]
    assert recs["flags"].tolist() == [1, 1, 0, 1, 0, 1]          # the directive on writes only
    assert recs["t_s"].tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]


def test_encode_plan_without_directives_is_plain_writes() -> None:
    hdr, recs = _decode(encode_plan(_plan(ROWS), directives=False))
    assert hdr["flags"][0] == 0
    assert not recs["flags"].any() and not recs["handle"].any()


def test_a_read_or_trim_never_carries_a_handle() -> None:
    _, recs = _decode(encode_plan(_plan([("read", 0, K, 2), ("trim", 0, K, 5)]), directives=True))
    assert recs["handle"].tolist() == [0, 0] and recs["flags"].tolist() == [0, 0]


@pytest.mark.parametrize("rows, field", [
    ([("write", 0, K, 0), ("write", -K, K, 0)], "offset_bytes"),
    ([("write", 0, 0, 0)], "length_bytes"),
    ([("write", 0, K, 0), ("write", K, K, -1)], "placement_handle"),
])
def test_encode_plan_names_the_bad_row(rows: list[tuple[str, int, int, int]], field: str) -> None:
    with pytest.raises(InputError, match=field) as e:
        encode_plan(_plan(rows), directives=True)
    assert f"row {len(rows)}" in str(e.value) or f":{len(rows)}" in str(e.value)


def test_plan_write_bytes_by_handle() -> None:
    assert plan_write_bytes_by_handle(_plan(ROWS)) == [3 * 2**20, 9 * K, 0, 2 * K]
    assert plan_write_bytes_by_handle(_plan([("read", 0, K, 0)])) == [0]


def _report(**over: object) -> bytes:
    base = {"tool": "kvwear-dw", "plan_version": 1, "dry_run": False, "write_bytes": 3 * K, "write_cmds": 3,
            "read_bytes": 0, "read_cmds": 0, "trim_bytes": 0, "trim_cmds": 0, "directive_writes": 1,
            "write_bytes_by_handle": [2 * K, K], "write_cmds_by_handle": [2, 1], "records": 3, "lba_bytes": 512,
            "max_io_bytes": 131072, "elapsed_s": 0.1}
    return json.dumps({**base, **over}).encode()


def test_parse_report_and_its_refusals() -> None:
    r = parse_report(_report())
    assert (r.write_bytes, r.write_bytes_by_handle, r.directive_writes) == (3 * K, (2 * K, K), 1)
    with pytest.raises(KvwearError, match="not JSON"):
        parse_report(b"kvwear-dw: plan: record 3: ...")
    with pytest.raises(KvwearError, match="field write_cmds"):
        parse_report(_report(write_cmds=-1))
    with pytest.raises(KvwearError, match="per handle sum"):
        parse_report(_report(write_bytes_by_handle=[K, K]))
    with pytest.raises(KvwearError, match="plan version 2"):
        parse_report(_report(plan_version=2))


def test_a_guest_image_without_the_current_tool_is_refused_by_name(tmp_path: Path) -> None:
    img = GuestImage(kernel=tmp_path / "vmlinuz", initrd=tmp_path / "initrd.img", stamp="fio=3.33-3\ninit 0123")
    with pytest.raises(GuestError, match=f"has no kvwear-dw.*build-guest.sh {tmp_path}"):
        require_tool(img, "kvwear-dw")
    stale = GuestImage(kernel=img.kernel, initrd=img.initrd, stamp="kvwear-dw 0000000000000000")
    with pytest.raises(GuestError, match="stale 'kvwear-dw 0000000000000000'"):
        require_tool(stale, "kvwear-dw")
    require_tool(GuestImage(kernel=img.kernel, initrd=img.initrd, stamp=f"fio=3.33-3\n{tool_stamp_line('kvwear-dw')}"),
                 "kvwear-dw")


# ---------------------------------------------------------------------------------------------
# the C tool, compiled on the host


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc not found: scripts/install-system-deps.sh installs it (the guest build needs it too)")
    return build_static(DW_SOURCE, tmp_path_factory.mktemp("dw") / "kvwear-dw")


def _dry(tool: Path, plan_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool), "-n", *args, str(plan_file)], capture_output=True, text=True, check=False)


def test_the_tool_counts_the_encoded_plan_exactly(tool: Path, tmp_path: Path) -> None:
    plan = _plan(ROWS)
    f = tmp_path / "p.plan"
    f.write_bytes(encode_plan(plan, directives=True))
    proc = _dry(tool, f, "-m", "131072")
    assert proc.returncode == 0, proc.stderr
    r = parse_report(proc.stdout)
    assert r.dry_run and r.records == len(ROWS) and (r.lba_bytes, r.max_io_bytes) == (512, 131072)
    assert r.write_bytes_by_handle == tuple(plan_write_bytes_by_handle(plan))
    assert (r.write_bytes, r.read_bytes, r.trim_bytes) == (3 * 2**20 + 11 * K, 64 * K, K)
    # 3 MiB in 128 KiB commands = 24, then one command per smaller row; reads split alike (256 KiB = 2)
    assert (r.write_cmds, r.read_cmds, r.trim_cmds) == (24 + 3, 2, 1)
    assert r.write_cmds_by_handle == (24, 2, 0, 1) and r.directive_writes == 27
    plain = tmp_path / "plain.plan"
    plain.write_bytes(encode_plan(plan, directives=False))
    r0 = parse_report(_dry(tool, plain).stdout)
    assert r0.write_bytes_by_handle == (r.write_bytes,) and r0.directive_writes == 0


def test_the_tool_keeps_the_plans_clock_when_timed(tool: Path, tmp_path: Path) -> None:
    f = tmp_path / "t.plan"
    f.write_bytes(encode_plan(_plan(ROWS[:3]), directives=False, timed=True))     # t_s 0, 0.5, 1.0
    r = parse_report(_dry(tool, f).stdout)
    assert 1.0 <= r.elapsed_s < 3.0
    f.write_bytes(encode_plan(_plan(ROWS[:3]), directives=False))
    assert parse_report(_dry(tool, f).stdout).elapsed_s < 0.5


def test_the_tool_refuses_bad_plans_naming_the_record(tool: Path, tmp_path: Path) -> None:
    f = tmp_path / "p.plan"
    data = bytearray(encode_plan(_plan(ROWS), directives=True))
    f.write_bytes(bytes(data[:-5]))                                       # truncated
    proc = _dry(tool, f)
    assert proc.returncode == 1 and "header says 6 records" in proc.stderr and not proc.stdout
    bad = bytearray(data)
    bad[32 + 2 * 32 + 16:32 + 2 * 32 + 24] = (1000).to_bytes(8, "little")   # record 3: 1000 bytes
    f.write_bytes(bytes(bad))
    proc = _dry(tool, f)
    assert proc.returncode == 1 and "record 3: offset 0 length 1000 not a positive multiple" in proc.stderr
    bad = bytearray(data)
    bad[8:12] = (PLAN_VERSION + 1).to_bytes(4, "little")
    f.write_bytes(bytes(bad))
    assert "plan version 2, this kvwear-dw reads version 1" in _dry(tool, f).stderr
    f.write_bytes(b"#fio iolog version 3\n")
    assert "not a kvwear-dw plan" in _dry(tool, f).stderr
