"""Every policy spec bench/frontier.py sweeps is one the policy accepts: a knob point outside a
parameter's allowed range (kvwear.policies.base param(valid=)) must fail here, not an hour into
`make bench` (meritkv's τ = −0.1 once did, after the ranges landed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvwear.policies.base import POLICIES, resolve_spec

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def frontier():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    try:
        import frontier as mod  # the bench module, as `python bench/frontier.py` imports it
    finally:
        sys.path.remove(str(BENCH))
    return mod


@pytest.mark.parametrize("name", sorted(POLICIES.names()))
def test_every_swept_spec_resolves(frontier, name: str) -> None:  # type: ignore[no-untyped-def]
    specs = frontier.sweep_specs(name)
    assert specs
    for spec in specs:
        resolve_spec(spec)
