"""Building kvwear's guest C tools (emulator/*.c) on the host, for tests that run them there."""

from __future__ import annotations

import subprocess
from pathlib import Path


def build_static(source: Path, out: Path) -> Path:
    """`source` compiled as scripts/build-guest.sh compiles it for the guest (static, and a warning is
    a build failure there too) into `out`."""
    subprocess.run(["gcc", "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(source)],
                   check=True, capture_output=True, text=True)
    return out
