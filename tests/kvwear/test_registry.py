"""The one registration idiom: each family's registry imports its own modules on first lookup,
and an unknown name is answered with the family's valid list."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvwear.errors import UnknownNameError
from kvwear.registry import Registry

REPO = Path(__file__).resolve().parents[2]

# family registry (module, name) → names it must hold, from a fresh interpreter that imports
# nothing but the registry's own module (no plugin module imported for its side effect)
FAMILIES = {
    "trace format": ("kvwear.workloads.loaders.base", "LOADERS", ["aiperf", "mooncake", "qwen-bailian", "weka"]),
    "policy": ("kvwear.policies.base", "POLICIES", ["lru", "fifo", "lru-k", "marconi", "gandalf", "belady"]),
    "device": ("kvwear.harness.devices.base", "DEVICES", ["sim", "file", "block", "qemu", "femu"]),
    "tracer": ("kvwear.harness.capture.base", "TRACERS", ["auto", "bcc", "bpftrace"]),
    "wear reader": ("kvwear.harness.wear.base", "READERS",
                    ["nvme-smart-json", "smartctl", "femu-vendor", "ocp-c0", "intel-ca", "fdp", "psutil"]),
}

_PROBE = """
import json, sys
from importlib import import_module
from kvwear.errors import UnknownNameError
reg = getattr(import_module(sys.argv[1]), sys.argv[2])
try:
    reg.get("no-such-plugin")
except UnknownNameError as exc:
    print(json.dumps({"names": reg.names(), "error": str(exc), "family": reg.family}))
"""


@pytest.mark.parametrize("family", list(FAMILIES))
def test_unknown_name_lists_the_family(family: str) -> None:
    module, attr, expected = FAMILIES[family]
    out = subprocess.run([sys.executable, "-c", _PROBE, module, attr], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    got = json.loads(out)
    assert got["family"] == family
    assert set(expected) <= set(got["names"])
    assert got["error"] == (f"unknown {family} 'no-such-plugin'; valid: {', '.join(sorted(got['names']))}")


def test_modules_load_on_first_lookup_in_list_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reg: Registry[int] = Registry("toy", modules=["toy_b", "toy_a"])
    monkeypatch.setattr(sys.modules[__name__], "TOY", reg, raising=False)
    for mod, names in (("toy_a", ["a1", "a2"]), ("toy_b", ["b1"])):
        lines = [f"from {__name__} import TOY"] + [f"TOY.add({n!r}, {i})" for i, n in enumerate(names)]
        (tmp_path / f"{mod}.py").write_text("\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "b1" in reg
    assert reg.names() == ["b1", "a1", "a2"]
    assert reg.get("a2") == 1
    with pytest.raises(UnknownNameError, match="valid: a1, a2, b1"):
        reg.get("c")
    for mod in ("toy_a", "toy_b"):
        sys.modules.pop(mod, None)


def test_a_module_that_fails_to_import_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "toy_broken.py").write_text("raise RuntimeError('broken plugin')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[int] = Registry("toy", modules=["toy_broken"])
    for _ in range(2):  # not remembered as loaded after the failure
        with pytest.raises(RuntimeError, match="broken plugin"):
            reg.names()
