"""SMART parsers on the recorded QEMU and FEMU outputs (../shared/fixtures): the numbers match
fixtures/README.md and fio's own byte and I/O counts, the three SMART renderings agree field for
field, and malformed input fails with an error naming the source and field."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvwear.errors import InputError
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES
from kvwear.harness.wear.femu import (
    femu_counters_from_nvme_json,
    femu_counters_from_smartctl_json,
    parse_femu_counters,
)
from kvwear.harness.wear.nvme_smart import SmartLog, parse_smart_log_binary, parse_smart_log_json
from kvwear.harness.wear.smartctl import parse_smartctl_json
from kvwear.harness.wear.snapshot import duw_bytes_bounds

DEVICES = ("qemu-7.2-nvme", "femu-bbssd")
SNAPS = range(4)

# Expected values, from fixtures/README.md and the recorded fio JSON.
EXPECTED_DUW = {"qemu-7.2-nvme": [0, 525, 1573, 1573], "femu-bbssd": [0, 394, 1180, 1180]}
EXPECTED_HWC = {"qemu-7.2-nvme": [0, 2048, 133120, 133120], "femu-bbssd": [0, 1536, 99840, 99840]}
FEMU_PAGES = [(1000, 0, 0), (1000, 49_152, 0), (5508, 147_456, 664_832), (5508, 147_456, 664_832)]


def _dir(fixtures_dir: Path, dev: str) -> Path:
    return fixtures_dir / dev


def _binary(fixtures_dir: Path, dev: str, k: int) -> SmartLog:
    p = _dir(fixtures_dir, dev) / f"smart-log-{k}.bin"
    return parse_smart_log_binary(p.read_bytes(), str(p))


def _json(fixtures_dir: Path, dev: str, k: int) -> SmartLog:
    p = _dir(fixtures_dir, dev) / f"smart_json_{k}.json"
    return parse_smart_log_json(p.read_bytes(), str(p))


def _smartctl(fixtures_dir: Path, dev: str, k: int) -> SmartLog:
    p = _dir(fixtures_dir, dev) / f"smartctl_json_{k}.json"
    return parse_smartctl_json(p.read_bytes(), str(p))


def _fio_write(fixtures_dir: Path, dev: str, phase: str) -> tuple[int, int]:
    """(io_bytes, total_ios) of the write direction, read straight from fio's JSON."""
    job = json.loads((_dir(fixtures_dir, dev) / f"fio_{phase}_json.json").read_text())["jobs"][0]
    return job["write"]["io_bytes"], job["write"]["total_ios"]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("k", SNAPS)
def test_binary_json_and_smartctl_agree(fixtures_dir: Path, dev: str, k: int) -> None:
    b, j, s = _binary(fixtures_dir, dev, k), _json(fixtures_dir, dev, k), _smartctl(fixtures_dir, dev, k)
    assert b == j == s            # every field, temperatures included (smartctl's °C restored to K)
    assert b.data_units_written == EXPECTED_DUW[dev][k]
    assert b.host_write_commands == EXPECTED_HWC[dev][k]
    assert b.composite_temperature_k == 323 and b.percentage_used == 0


@pytest.mark.parametrize("dev", DEVICES)
def test_duw_tracks_fio_bytes(fixtures_dir: Path, dev: str) -> None:
    duw = [_binary(fixtures_dir, dev, k).data_units_written for k in SNAPS]
    fill_b, _ = _fio_write(fixtures_dir, dev, "fill")
    rand_b, _ = _fio_write(fixtures_dir, dev, "rand")
    # Interval deltas: within one unit of ceil(bytes / 512,000), and the bytes inside the bounds.
    for d_units, fio_bytes in ((duw[1] - duw[0], fill_b), (duw[2] - duw[1], rand_b)):
        assert abs(d_units - math.ceil(fio_bytes / NVME_DATA_UNIT_BYTES)) <= 1
        lo, hi = duw_bytes_bounds(d_units)
        assert lo < fio_bytes < hi
    # The running total rounds up exactly: DUW = ceil(cumulative bytes / 512,000).
    assert duw[1] == math.ceil(fill_b / NVME_DATA_UNIT_BYTES)
    assert duw[2] == math.ceil((fill_b + rand_b) / NVME_DATA_UNIT_BYTES)
    # TRIM (blkdiscard of the whole namespace) writes no data units.
    assert duw[3] == duw[2]


@pytest.mark.parametrize("dev", DEVICES)
def test_host_write_commands_equal_fio_ios(fixtures_dir: Path, dev: str) -> None:
    hwc = [_json(fixtures_dir, dev, k).host_write_commands for k in SNAPS]
    assert hwc[1] - hwc[0] == _fio_write(fixtures_dir, dev, "fill")[1]
    assert hwc[2] - hwc[1] == _fio_write(fixtures_dir, dev, "rand")[1]
    assert hwc[3] == hwc[2]       # a discard is not a write command


@pytest.mark.parametrize("k", SNAPS)
def test_femu_vendor_counters(fixtures_dir: Path, k: int) -> None:
    d = _dir(fixtures_dir, "femu-bbssd")
    c = parse_femu_counters((d / f"smart-log-{k}.bin").read_bytes())
    assert (c.waf_milli, c.host_pages, c.gc_pages) == FEMU_PAGES[k]
    # The same words, reassembled from the two tools' mislabelled temperature fields.
    assert femu_counters_from_nvme_json((d / f"smart_json_{k}.json").read_bytes()) == c
    assert femu_counters_from_smartctl_json((d / f"smartctl_json_{k}.json").read_bytes()) == c
    if c.host_pages:          # FEMU's word is the truncated cumulative WAF × 1000
        assert c.waf_milli == (c.host_pages + c.gc_pages) * 1000 // c.host_pages


def test_femu_pages_equal_fio_bytes(fixtures_dir: Path) -> None:
    d = _dir(fixtures_dir, "femu-bbssd")
    c = [parse_femu_counters((d / f"smart-log-{k}.bin").read_bytes()) for k in SNAPS]
    fill_b, _ = _fio_write(fixtures_dir, "femu-bbssd", "fill")
    rand_b, _ = _fio_write(fixtures_dir, "femu-bbssd", "rand")
    assert c[1].host_bytes_written - c[0].host_bytes_written == fill_b
    assert c[2].host_bytes_written - c[1].host_bytes_written == rand_b
    assert c[1].nand_bytes_written == fill_b                  # sequential fill: no GC
    assert c[2].nand_bytes_written == (147_456 + 664_832) * 4096
    assert c[3] == c[2]                                       # TRIM changed nothing
    assert c[2].waf == pytest.approx(812_288 / 147_456)


def test_qemu_vendor_bytes_are_zero(fixtures_dir: Path) -> None:
    # Stock QEMU leaves bytes 192-215 zero: decoding them as FEMU counters would read 0, not data.
    d = _dir(fixtures_dir, "qemu-7.2-nvme")
    for k in SNAPS:
        assert parse_femu_counters((d / f"smart-log-{k}.bin").read_bytes()).host_pages == 0


# --- malformed input -----------------------------------------------------------------------


def test_binary_truncated_and_padded(fixtures_dir: Path) -> None:
    data = (fixtures_dir / "qemu-7.2-nvme" / "smart-log-1.bin").read_bytes()
    with pytest.raises(InputError, match=r"x\.bin: field 'smart log page': expected 512 bytes, got 511 "
                                         r"\(truncated\)") as ei:
        parse_smart_log_binary(data[:-1], "x.bin")
    assert ei.value.field == "smart log page"
    with pytest.raises(InputError, match="got 513 \\(too long\\)"):
        parse_smart_log_binary(data + b"\0", "x.bin")
    with pytest.raises(InputError, match="got 0"):
        parse_femu_counters(b"", "empty.bin")


def test_json_truncated_names_line(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "qemu-7.2-nvme" / "smart_json_1.json").read_text()
    cut = text[: text.index('"host_write_commands"')]
    with pytest.raises(InputError, match=r"^s\.json:\d+: not valid JSON") as ei:
        parse_smart_log_json(cut, "s.json")
    assert ei.value.line is not None and ei.value.line > 1
    with pytest.raises(InputError, match="empty output"):
        parse_smart_log_json(b"", "s.json")


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda d: d.pop("data_units_written"), "data_units_written", "missing"),
        (lambda d: d.update(host_write_commands="12x"), "host_write_commands", "non-negative integer"),
        (lambda d: d.update(data_units_written=-5), "data_units_written", "non-negative integer"),
        (lambda d: d.update(percent_used=True), "percent_used", "non-negative integer"),
    ],
)
def test_json_bad_fields(
    fixtures_dir: Path, edit: Callable[[dict[str, Any]], object], field: str, message: str
) -> None:
    doc = json.loads((fixtures_dir / "qemu-7.2-nvme" / "smart_json_2.json").read_text())
    edit(doc)
    with pytest.raises(InputError, match=message) as ei:
        parse_smart_log_json(json.dumps(doc), "edited.json")
    assert ei.value.field == field and ei.value.path == "edited.json"


def test_json_accepts_newer_key_spellings(fixtures_dir: Path) -> None:
    doc = json.loads((fixtures_dir / "femu-bbssd" / "smart_json_2.json").read_text())
    doc["percentage_used"] = doc.pop("percent_used")
    doc["critical_warning"] = {"value": 0}
    doc["data_units_written"] = int(doc["data_units_written"])
    assert parse_smart_log_json(json.dumps(doc)) == _json(Path(fixtures_dir), "femu-bbssd", 2)


def test_smartctl_bad_inputs(fixtures_dir: Path) -> None:
    doc = json.loads((fixtures_dir / "femu-bbssd" / "smartctl_json_1.json").read_text())
    log = doc.pop("nvme_smart_health_information_log")
    with pytest.raises(InputError, match=r"nvme_smart_health_information_log.*missing"):
        parse_smartctl_json(json.dumps(doc), "sc.json")
    doc["nvme_smart_health_information_log"] = {**log, "temperature": "50 C"}
    with pytest.raises(InputError, match="field 'temperature'"):
        parse_smartctl_json(json.dumps(doc), "sc.json")
    doc["nvme_smart_health_information_log"] = {**log, "temperature_sensors": [1, "x"]}
    with pytest.raises(InputError, match=r"temperature_sensors\[1\]"):
        parse_smartctl_json(json.dumps(doc), "sc.json")


def test_duw_bounds_edges() -> None:
    assert duw_bytes_bounds(0) == (0, 512_000)
    assert duw_bytes_bounds(1) == (0, 1_024_000)
    assert duw_bytes_bounds(10) == (9 * 512_000, 11 * 512_000)
    with pytest.raises(ValueError, match="cannot decrease"):
        duw_bytes_bounds(-1)
