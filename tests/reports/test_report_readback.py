"""`kvwear report RUN` on a damaged run directory (issue #28): each damaged file that the report
reads gives one line naming it, with exit 2. It never exits 0 with a policy's checks silently
missing, and never shows a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.adversarial import one_line_error, succeeds


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("rep") / "run"
    proc = subprocess.run([sys.executable, "-m", "kvwear.harness.cli.main", "run", "--param", "sessions=3",
                           "--param", "turns=2", "-p", "lru", "-p", "fifo", "--dram", "1GB", "--ssd", "4GB",
                           "-o", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def _foreign_parquet() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": [1]}), sink)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(("rel", "damage", "says"), [
    ("estimate/fifo/crossval.json", b"{}", "crossval.json: not a"),
    ("estimate/lru/crossval.json", b'{"kind": "estimate", "ver', "crossval.json: not valid JSON"),
    ("device/lru/result.json", b"{}", "result.json: not a"),
    ("plan/fifo/plan.json", b"[]", "plan.json: a "),
    ("manifest.json", b'{"trunc', "manifest.json: does not read back"),
    ("results.parquet", b"PAR1 truncated", "results.parquet: not a readable Parquet table"),
    ("results.parquet", _foreign_parquet(), "results.parquet: holds a foreign table"),
], ids=["crossval-{}", "crossval-truncated", "result-{}", "plan-[]", "manifest", "results-truncated",
        "results-foreign"])
def test_a_damaged_file_is_named_by_the_report(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    rel: str, damage: bytes, says: str,
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    succeeds(["report", str(copy)], capsys, monkeypatch)         # the undamaged copy reports
    (copy / rel).write_bytes(damage)
    line = one_line_error(["report", str(copy)], capsys, monkeypatch)
    assert f"{copy / rel}" in line and says in line, line
