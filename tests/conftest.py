"""Shared fixtures: where `../shared` (traces, recorded tool outputs) is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs property tests derandomized (the same examples every run, so a submission's verdict does
# not depend on the draw); locally they draw new examples each run, which is how bugs are found.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """`$KVWEAR_SHARED`, else the `shared/` folder beside the checkout."""
    env = os.environ.get("KVWEAR_SHARED")
    return Path(env) if env else REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    d = shared_dir()
    if not (d / "traces").is_dir():
        pytest.fail(f"shared folder with traces and fixtures not found at {d} (set KVWEAR_SHARED)")
    return d


@pytest.fixture(scope="session")
def mooncake_path(shared: Path) -> Path:
    return shared / "traces" / "mooncake" / "conversation_trace.jsonl"


@pytest.fixture(scope="session")
def weka_dir(shared: Path) -> Path:
    return shared / "traces" / "claude-code-weka" / "traces"


@pytest.fixture(scope="session")
def fixtures_dir(shared: Path) -> Path:
    return shared / "fixtures"
