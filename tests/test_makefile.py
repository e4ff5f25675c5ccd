"""`make test` on a fresh Debian machine: the Debian packages (python3-venv among them) are
installed before the venv is created, and bcc is linked into the venv after it exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_installs_packages_before_creating_the_venv(tmp_path: Path) -> None:
    venv = tmp_path / "fresh-venv"          # absent: make must plan to create it
    out = subprocess.run(["make", "-n", "test", f"VENV={venv}"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    pos = {key: next(i for i, line in enumerate(out) if key in line)
           for key in ("install-system-deps.sh", "-m venv", "setup-bcc.sh", "-m pytest")}
    assert pos["install-system-deps.sh"] < pos["-m venv"] < pos["setup-bcc.sh"] < pos["-m pytest"]
    pkgs = (REPO / "scripts" / "install-system-deps.sh").read_text()
    assert "python3-venv" in pkgs and "xz-utils" in pkgs
