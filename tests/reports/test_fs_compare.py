"""Raw-block and file-system runs side by side per policy (kvwear.reports.fs_compare)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvwear.errors import KvwearError
from kvwear.harness.estimate.schema import RESULTS, ResultsRow
from kvwear.harness.pipeline.run import results_table
from kvwear.reports.fs_compare import levels, levels_markdown, main, markdown, side_by_side
from kvwear.tables import write_table


def _run(d: Path, rows: list[ResultsRow]) -> Path:
    d.mkdir()
    write_table(RESULTS, results_table(rows), d / "results.parquet")
    return d


def test_block_and_file_system_runs_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = _run(tmp_path / "raw", [
        ResultsRow("lru", plan_write_bytes=1_000, device_write_bytes=1_000, waf_measured=1.5, nand_write_bytes=1_500,
                   lifetime_days_waf1=30.0),
        ResultsRow("belady", plan_write_bytes=400, device_write_bytes=400, waf_measured=1.0, nand_write_bytes=400,
                   lifetime_days_waf1=75.0)])
    ext4 = _run(tmp_path / "ext4", [
        ResultsRow("belady", plan_write_bytes=400, fs_filesystem="ext4", fs_discard="none", file_write_bytes=400,
                   fs_block_write_bytes=440, fs_overhead_ratio=1.1, fs_ftl_waf=2.0, fs_ftl_nand_bytes=880,
                   lifetime_days_waf1=75.0 * 400 / 440),
        ResultsRow("lru", plan_write_bytes=1_000, fs_filesystem="ext4", fs_discard="none", file_write_bytes=1_000,
                   fs_block_write_bytes=1_050, fs_overhead_ratio=1.05, fs_ftl_waf=1.2, fs_ftl_nand_bytes=1_260,
                   lifetime_days_waf1=30.0 * 1_000 / 1_050)])
    rows = side_by_side({"raw extent": raw, "ext4, no discard": ext4})
    # policies in the first run's order, runs in the order given
    assert [(s.policy, s.run) for s in rows] == [("lru", "raw extent"), ("lru", "ext4, no discard"),
                                                 ("belady", "raw extent"), ("belady", "ext4, no discard")]
    lru_raw, lru_fs = rows[0], rows[1]
    assert lru_raw.device_bytes == 1_000 and lru_raw.overhead is None and lru_raw.waf == 1.5
    assert lru_fs.device_bytes == 1_050 and lru_fs.overhead == pytest.approx(0.05) and lru_fs.waf == 1.2
    # lifetime ∝ 1 / NAND bytes: the WAF-1 lifetime (of the bytes the drive receives: a file-system
    # run's block bytes) × those bytes ÷ NAND bytes
    assert lru_raw.lifetime_days == pytest.approx(20.0) and lru_fs.lifetime_days == pytest.approx(30 * 1000 / 1260)
    assert rows[3].lifetime_days == pytest.approx(75 * 400 / 880)
    table = markdown(rows)
    assert "| lru | ext4, no discard | 0.000 GB | 0.000 GB | +5.00% | 1.200 |" in table
    assert main([f"raw={raw}", f"fs={ext4}"]) == 0 and "| belady | fs |" in capsys.readouterr().out


def test_an_unfinished_run_is_named(tmp_path: Path) -> None:
    (tmp_path / "half").mkdir()
    with pytest.raises(KvwearError, match=r"half/results\.parquet: no results"):
        side_by_side({"x": tmp_path / "half"})


def test_run_names_are_parsed_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NAME=RUN_DIR: the name ends at the first '=' (a run folder may hold one); a name twice is refused."""
    odd = _run(tmp_path / "discard=none", [ResultsRow("lru", plan_write_bytes=10, device_write_bytes=10)])
    assert main([f"fs={odd}"]) == 0 and "| lru | fs |" in capsys.readouterr().out
    assert main([f"fs={odd}", f"fs={odd}"]) == 2 and "given twice" in capsys.readouterr().err
    assert main(["no-name"]) == 2 and "NAME=RUN_DIR" in capsys.readouterr().err


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
    table = levels_markdown(levels({"qemu ext4": guest, "loop xfs": loop}))
    assert ("| lru | qemu ext4 | 1,000,000 | 1,000,000 | 1,078,500 | +7.85% | 4,096 | 1,024,000 | -54,500 "
            "| 13 of 13 |") in table
    assert "| gandalf | qemu ext4 | 0 | 0 | 77,824 | — | 0 | 0 | -77,824 | 12 of 12 |" in table
    assert "| lru | loop xfs | 1,000,000 | 1,000,000 | 1,027,000 | +2.70% | 0 | — | — | 11 of 11 |" in table
    assert main(["--levels", f"g={guest}"]) == 0 and "| lru | g |" in capsys.readouterr().out


def test_a_block_run_or_an_unfinished_one_is_named(tmp_path: Path) -> None:
    raw = _run(tmp_path / "raw", [ResultsRow("lru", plan_write_bytes=10, device_write_bytes=10)])
    with pytest.raises(KvwearError, match=r"raw/results\.parquet: not a run of the fs layout"):
        levels({"raw": raw})
    (tmp_path / "half").mkdir()
    with pytest.raises(KvwearError, match=r"half/results\.parquet: no results"):
        levels({"x": tmp_path / "half"})


def test_the_command_names_a_bad_run_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = _run(tmp_path / "raw", [ResultsRow("lru", plan_write_bytes=10, device_write_bytes=10)])
    assert main(["--levels", f"raw={raw}"]) == 2
    assert "raw/results.parquet: not a run of the fs layout" in capsys.readouterr().err
    assert main([f"x={tmp_path / 'missing'}"]) == 2
    assert "missing/results.parquet: no results" in capsys.readouterr().err
    assert main(["--levels"]) == 2 and "no run given" in capsys.readouterr().err
