"""The fs layout's levels per policy, exact to the byte (kvwear.reports.fs_levels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvwear.errors import KvwearError
from kvwear.harness.estimate.schema import RESULTS, ResultsRow
from kvwear.harness.pipeline.run import results_table
from kvwear.reports.fs_levels import levels, main, markdown
from kvwear.tables import write_table


def _run(d: Path, rows: list[ResultsRow]) -> Path:
    d.mkdir()
    write_table(RESULTS, results_table(rows), d / "results.parquet")
    return d


def test_each_level_to_the_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    guest = _run(tmp_path / "guest", [
        ResultsRow("lru", plan_write_bytes=1_000_000, fs_filesystem="ext4", fs_discard="online",
                   file_write_bytes=1_000_000, fs_block_write_bytes=1_078_500, fs_overhead_ratio=1.0785,
                   fs_discard_bytes=4_096, smart_write_bytes=1_024_000, accounting_checks_passed=13,
                   accounting_checks_total=13),
        ResultsRow("gandalf", plan_write_bytes=0, fs_filesystem="ext4", fs_discard="online", file_write_bytes=0,
                   fs_block_write_bytes=77_824, fs_discard_bytes=0, smart_write_bytes=0,
                   accounting_checks_passed=12, accounting_checks_total=12)])
    loop = _run(tmp_path / "loop", [
        ResultsRow("lru", plan_write_bytes=1_000_000, fs_filesystem="xfs", fs_discard="none",
                   file_write_bytes=1_000_000, fs_block_write_bytes=1_027_000, fs_overhead_ratio=1.027,
                   fs_discard_bytes=0, accounting_checks_passed=11, accounting_checks_total=11)])
    table = markdown(levels({"qemu ext4": guest, "loop xfs": loop}))
    assert ("| lru | qemu ext4 | 1,000,000 | 1,000,000 | 1,078,500 | +7.85% | 4,096 | 1,024,000 | -54,500 "
            "| 13 of 13 |") in table
    assert "| gandalf | qemu ext4 | 0 | 0 | 77,824 | — | 0 | 0 | -77,824 | 12 of 12 |" in table
    assert "| lru | loop xfs | 1,000,000 | 1,000,000 | 1,027,000 | +2.70% | 0 | — | — | 11 of 11 |" in table
    assert main([f"g={guest}"]) == 0 and "| lru | g |" in capsys.readouterr().out


def test_a_block_run_or_an_unfinished_one_is_named(tmp_path: Path) -> None:
    raw = _run(tmp_path / "raw", [ResultsRow("lru", plan_write_bytes=10, device_write_bytes=10)])
    with pytest.raises(KvwearError, match=r"raw/results\.parquet: not a run of the fs layout"):
        levels({"raw": raw})
    (tmp_path / "half").mkdir()
    with pytest.raises(KvwearError, match=r"half/results\.parquet: no results"):
        levels({"x": tmp_path / "half"})
