"""No leftovers (issue #28): a `file:` run killed (SIGKILL) during its device stage leaves its
sparse image behind; the resumed run adopts it (the image carries kvwear's transient mark), ends
with the results of an uninterrupted run and removes it. The mark's rule, case by case."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvwear.harness.devices.base import TRANSIENT_XATTR, transient_image
from kvwear.harness.estimate.schema import RESULTS
from kvwear.tables import read_table


def _xattrs_work(path: Path) -> bool:
    try:
        os.setxattr(path, "user.kvwear.probe", b"1")
    except OSError:
        return False
    return True


@pytest.mark.parametrize(("created", "marked", "keep", "deleted", "mark_after"), [
    (True, False, False, True, True),      # created now, not kept: deleted at close, marked meanwhile
    (True, False, True, False, False),     # created now, kept: not this run's to delete, no mark
    (False, True, False, True, True),      # a killed run's image: adopted
    (False, True, True, False, False),     # a killed run's image, now kept: the mark goes
    (False, False, False, False, False),   # the user's own file (confirmed): never deleted
])
def test_the_transient_mark(tmp_path: Path, created: bool, marked: bool, keep: bool, deleted: bool,
                            mark_after: bool) -> None:
    img = tmp_path / "drive.img"
    img.write_bytes(b"")
    if not _xattrs_work(img):
        pytest.skip("no user extended attributes on this filesystem")
    if marked:
        os.setxattr(img, TRANSIENT_XATTR, b"1")
    assert transient_image(img, created, keep) is deleted
    assert (TRANSIENT_XATTR in os.listxattr(img)) is mark_after


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")
def test_a_killed_file_run_resumed_leaves_no_image(tmp_path: Path) -> None:
    img = tmp_path / "drive.img"
    if not _xattrs_work(tmp_path):
        pytest.skip("no user extended attributes on this filesystem")
    # --no-report: the results table is what is compared; the report stage only adds figures
    args = ["--param", "sessions=3", "--param", "turns=2", "-p", "lru", "--dram", "1GB", "--ssd", "2GB",
            "--device", f"file:{img}", "--no-report"]
    cli = [sys.executable, "-m", "kvwear.harness.cli.main", "run", *args]
    clean = subprocess.run([*cli, "-o", str(tmp_path / "clean")], capture_output=True, text=True, check=False)
    assert clean.returncode == 0, clean.stderr
    assert not img.exists()                          # an uninterrupted run removes its image
    out = tmp_path / "run"
    proc = subprocess.Popen([*cli, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not img.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert img.exists(), "the device stage never created its image"
        os.killpg(proc.pid, signal.SIGKILL)          # kill -9 while the device stage holds the image
    finally:
        proc.wait()
    assert img.exists() and TRANSIENT_XATTR in os.listxattr(img)
    resumed = subprocess.run([*cli, "-o", str(out), "--resume"], capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert not img.exists(), "the resumed run left its killed predecessor's image"
    assert not list(tmp_path.rglob("*.partial-*"))
    want = read_table(RESULTS, tmp_path / "clean" / "results.parquet")
    assert read_table(RESULTS, out / "results.parquet").equals(want)
