"""Shared fixtures: where `../shared` (traces, recorded tool outputs) is."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

from kvwear.harness.devices.sim import Sim

# CI runs property tests derandomized (the same examples every run, so a submission's verdict does
# not depend on the draw); locally they draw new examples each run, which is how bugs are found.
# No wall-clock deadline anywhere: the suite runs two workers on two cores beside guest boots, and
# a property test's example taking 318 ms against hypothesis's 200 ms default failed on load, not
# on code.
settings.register_profile("local", deadline=None)
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "local")

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules holding slow, guest or root tests first, each module's tests kept together and in order
    (module-scoped fixtures, such as a shared guest, are set up once): under pytest-xdist the long
    tests then start early and the many short ones fill both workers to the end, instead of one
    worker finishing a minute-long test alone."""
    heavy = {it.path for it in items if any(it.get_closest_marker(m) for m in ("slow", "guest", "root"))}
    items.sort(key=lambda it: it.path not in heavy)


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


# The main job's drive in service (Sim.run_options), kept before the session fixture below swaps it.
IN_SERVICE = (Sim.RUN_PRESET, Sim.RUN_PRECONDITION)


@pytest.fixture(scope="session", autouse=True)
def _bare_sim_drive() -> Iterator[None]:
    """Runs in tests play the `sim` device as the bare drive (preset tiny-blocks, fresh out of the
    box, one pass of the plan) that the pipeline's tests were written for: drives of a few GB, where
    the main job's 13 GB reclaim units do not fit, and byte identities of one pass. Tests of the
    main job's own drive (preconditioned, played until steady) restore it with `in_service`
    (tests/harness/test_drive_in_service.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Sim, "RUN_PRESET", "tiny-blocks")
        mp.setattr(Sim, "RUN_PRECONDITION", "none")
        yield


@contextmanager
def in_service() -> Iterator[None]:
    """`kvwear run`'s own default sim drive, inside a test (see `_bare_sim_drive`)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Sim, "RUN_PRESET", IN_SERVICE[0])
        mp.setattr(Sim, "RUN_PRECONDITION", IN_SERVICE[1])
        yield
