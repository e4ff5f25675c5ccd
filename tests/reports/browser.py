"""What the browser tests assert of a rendered report (tests/reports/chromium.py renders it).

`assert_reads_well(page, name)` renders `page` at 1,280 × 800 in headless Chromium, keeps its
screenshots under chromium.ARTEFACTS/NAME (printed, and named in a failure) and fails on any
horizontal overflow, broken image, console error or clipped text, as loaded and with every
collapsed section opened; `first_screen` names elements that must end within the first 800 px.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.reports.chromium import ARTEFACTS, CHROMIUM, Rendering, render

WIDTH, HEIGHT = 1280, 800


def need_chromium() -> None:
    """Skip without Debian's chromium, with the reason; in CI (which installs it: make test →
    scripts/install-system-deps.sh) its absence is a failure, not a skip."""
    if CHROMIUM is None:
        why = "chromium is not installed (scripts/install-system-deps.sh installs Debian's package)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


def assert_reads_well(page: Path, name: str, first_screen: tuple[str, ...] = ()) -> list[Rendering]:
    need_chromium()
    folder = ARTEFACTS / name
    shutil.rmtree(folder, ignore_errors=True)
    shots = render(page, folder, width=WIDTH, height=HEIGHT, selectors=first_screen)
    print(f"screenshots of {page}: {folder}")
    problems = [f"{'' if i == 0 else '(collapsed sections opened) '}{p}"
                for i, r in enumerate(shots) for p in r.problems()]
    for sel in first_screen:
        bottom = shots[0].bottoms[sel]
        if bottom is None:
            problems.append(f"{sel} is not on the page")
        elif bottom > HEIGHT:
            problems.append(f"{sel} ends at {bottom} px, below the first {HEIGHT} px screen")
    assert not problems, (f"{page} at {WIDTH} × {HEIGHT} px (screenshots in {folder}):\n  "
                          + "\n  ".join(dict.fromkeys(problems)))
    return shots
