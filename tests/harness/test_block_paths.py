"""`block:` targets that cannot be used (issue #28): a missing path, something that is not a block
device, a device with nothing behind it and one this user may not open each give one line naming
the target and saying what to do, from the safety check and from `kvwear run` alike (exit 2, no
traceback, no run directory left)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.errors import InputError
from kvwear.harness.devices.identity import path_identity
from kvwear.harness.devices.safety import check_block_device, check_block_path
from tests.adversarial import one_line_error

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create device nodes")

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=20).filter(
    lambda s: s not in (".", ".."))


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(NAMES, min_size=1, max_size=3))
def test_a_missing_path_is_one_line_naming_lsblk(tmp_path: Path, parts: list[str]) -> None:
    path = str(tmp_path.joinpath("absent", *parts))
    with pytest.raises(InputError, match=r"no such device; list the block devices with `lsblk -p`") as exc:
        check_block_path(path)
    assert str(exc.value).startswith(f"block:{path}:") and "\n" not in str(exc.value)
    with pytest.raises(InputError, match="no such device"):
        check_block_device(path)


def test_what_is_not_a_block_device_says_what_it_is(tmp_path: Path) -> None:
    f = tmp_path / "drive.img"
    f.write_bytes(b"x" * 4096)
    with pytest.raises(InputError, match=f"a regular file: use file:{f} to replay into a file"):
        check_block_path(str(f))
    with pytest.raises(InputError, match=r"not a block device \(a folder\)"):
        check_block_path(str(tmp_path))
    with pytest.raises(InputError, match=r"not a block device \(not a block device\)"):
        check_block_path("/dev/null")
    with pytest.raises(InputError, match="cannot look it up"):
        path_identity(tmp_path / "absent")


def _unattached_loop() -> str | None:
    """A loop device node with no backing file (losetup --find names the first free one)."""
    if shutil.which("losetup") is None:
        return None
    proc = subprocess.run(["losetup", "--find"], capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


@root_only
def test_an_unattached_loop_device_says_attach_it() -> None:
    dev = _unattached_loop()
    if dev is None:
        pytest.skip("no free loop device")
    with pytest.raises(InputError, match=r"(0 bytes|no medium).*losetup"):
        check_block_path(dev)


def _as_nobody(fn: Callable[[], str]) -> str:
    """`fn()` in a forked child whose effective user is nobody (65534): its result or its error."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # the child: drop to nobody, report, exit
        try:
            os.close(r)
            os.setegid(65534)
            os.seteuid(65534)
            try:
                msg = fn()
            except Exception as exc:               # the parent asserts on it
                msg = f"{type(exc).__name__}: {exc}"
            os.write(w, msg.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    return out


@root_only
def test_a_device_this_user_may_not_open_says_run_as_root(tmp_path: Path) -> None:
    """A block device node root alone may open (mode 600, like /dev/loopN or /dev/nvme0n1), looked at
    by an unprivileged user."""
    hidden = tmp_path / "loopnode"             # under pytest's folder, which only root may search
    subprocess.run(["mknod", "-m", "600", str(hidden), "b", "7", "0"], check=True)
    assert _as_nobody(lambda: str(check_block_path(str(hidden)))) == (
        f"InputError: block:{hidden}: permission denied looking it up; run kvwear as root (or as a user who "
        f"may read its folder)")
    folder = Path(tempfile.mkdtemp(prefix="kvwear-perm-"))
    try:
        folder.chmod(0o755)
        node = folder / "loopnode"
        subprocess.run(["mknod", "-m", "600", str(node), "b", "7", "0"], check=True)
        assert _as_nobody(lambda: str(check_block_path(str(node)))) == (
            f"InputError: block:{node}: permission denied opening it; run kvwear as root, or give your "
            f"user read-write access to the device (e.g. the `disk` group)")
    finally:
        shutil.rmtree(folder)


@root_only
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_a_device_root_may_not_open_names_the_container(tmp_path: Path) -> None:
    """`kvwear run` as root without CAP_DAC_OVERRIDE (dropped from the bounding set) on a node of
    mode 000: what a container's device rules look like from inside; one line, no run directory."""
    node = tmp_path / "noperm"
    subprocess.run(["mknod", "-m", "000", str(node), "b", "7", "0"], check=True)
    out = tmp_path / "run"
    proc = subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m", "kvwear.harness.cli.main",
         "run", "--device", f"block:{node}", "-o", str(out)],
        capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"kvwear: error: block:{node}: permission denied opening it although kvwear "
                               f"runs as root"), lines
    assert not out.exists()


@pytest.mark.parametrize("target", ["absent", "file", "folder"])
def test_kvwear_run_on_a_bad_block_target_is_one_line(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = {"absent": tmp_path / "nope", "file": tmp_path / "f.img", "folder": tmp_path}[target]
    if target == "file":
        path.write_bytes(b"")
    out = tmp_path / "run"
    line = one_line_error(["run", "--device", f"block:{path}", "-o", str(out)], capsys, monkeypatch)
    assert line.startswith(f"block:{path}:"), line
    assert not out.exists()
