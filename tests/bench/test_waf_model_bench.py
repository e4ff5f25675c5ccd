"""bench/waf_model.py in its smoke size: it runs as shipped, and its cases are real (GC runs in some
of them, and the model holds on the uniform random plan, whose WAF theory knows)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_waf_model", REPO / "bench" / "waf_model.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_smoke_size_runs_and_gc_runs(capsys: pytest.CaptureFixture[str]) -> None:
    b = _bench()
    assert b.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "GC-active" in out and "by the model's regime" in out
    drives = b.drives(smoke=True)
    cases, _, _ = b.run_cases(iter([("uniform", "-", False, b.random_plan(1.0, 2.0, 11))]), drives, lambda s: None)
    assert len(cases) == len(drives) == 2
    for c in cases:
        # uniform random overwrites, 2 drive writes from empty: GC runs on both drives
        assert c.active, c
        assert abs(c.err) <= b.WITHIN, c
    assert {c.regime for c in cases} == {"on-demand", "line background"}   # the model sees GC on both
