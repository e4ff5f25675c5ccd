"""kvwear.children: programs found where Debian keeps them for an unprivileged user too."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kvwear.children import find_program, system_argv
from kvwear.harness.devices.safety import run_probe


@pytest.fixture()
def user_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # Debian's PATH for a user who is not root (/etc/profile): no sbin directory
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")


def test_a_system_program_is_found_off_a_users_path(user_path: None) -> None:
    blkid = next((d / "blkid" for d in (Path("/usr/sbin"), Path("/sbin")) if (d / "blkid").is_file()), None)
    if blkid is None:
        pytest.skip("util-linux's blkid is not installed in /usr/sbin or /sbin")
    assert find_program("blkid") == str(blkid)
    assert system_argv(["blkid", "-V"])[0] == str(blkid)
    rc, out, _ = run_probe(["blkid", "-V"])          # the safety check's own runner reaches it
    assert rc == 0 and b"blkid" in out


def test_path_comes_first_and_a_missing_program_keeps_its_name(user_path: None, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "blkid"
    own.write_text("#!/bin/sh\necho mine\n")
    own.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert find_program("blkid") == str(own)
    assert subprocess.run(system_argv(["blkid"]), capture_output=True, text=True).stdout == "mine\n"
    assert find_program("kvwear-no-such-program") is None
    assert system_argv(["kvwear-no-such-program", "-x"]) == ["kvwear-no-such-program", "-x"]
