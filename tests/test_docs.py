"""The docs site: every page under docs/ is in the nav the hook builds (pages added by anyone
appear without a list to edit), results pages are dated and say commit, machine and command, the
generated reference covers every registered command, policy, device and table, and
`mkdocs build --strict` passes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from docs_hooks import nav, reference  # noqa: E402


def _flatten(items: list[Any]) -> list[str]:
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for v in item.values():
                out += _flatten(v) if isinstance(v, list) else [v]
    return out


def test_every_page_is_in_the_nav() -> None:
    in_nav = _flatten(nav.build_nav())
    pages = sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))
    assert sorted(set(in_nav) - set(reference.PAGES)) == pages
    assert len(in_nav) == len(set(in_nav))
    assert set(reference.PAGES) <= set(in_nav)


def test_results_pages_are_dated_with_commit_machine_command() -> None:
    pages = [p for p in (REPO / "docs" / "results").glob("*.md") if p.name != "index.md"]
    assert pages
    for p in pages:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", p.name), p.name
        text = p.read_text()
        for row in ("measured", "machine", "command"):
            assert re.search(rf"^\| {row} \| .+\|$", text, re.M), (p.name, row)
    listed = [v for item in nav.section("results", newest_first=True) if isinstance(item, dict)
              for v in item.values()]
    assert listed == sorted(listed, reverse=True)          # newest first


def test_reference_covers_the_registries() -> None:
    import typer.main

    from kvwear.harness.cli.main import app
    from kvwear.harness.devices.base import DEVICES
    from kvwear.policies.base import POLICIES

    cli = reference.cli_page()
    for name, cmd in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None) or {"": None}
        for sub in subs:
            assert f"## `kvwear {name}{' ' + sub if sub else ''}`" in cli
    policies = reference.policies_page()
    assert all(f"## `{n}`" in policies for n in POLICIES.names())
    devices = reference.devices_page()
    assert all(f"## `{n}`" in devices for n in DEVICES.names())
    tables = reference.tables_page()
    kinds = {spec.kind for _, _, spec in reference.table_specs()}
    assert {"requests", "ssd_ops", "block_ops", "results", "wear", "block_trace"} <= kinds
    assert all(f"## `{k}`" in tables for k in kinds)
    config = reference.config_page()
    for section in ("workload", "tiers", "simulator", "replay", "device", "capture", "estimate"):
        assert f"## `[{section}]`" in config
    # a field's meaning comes from the comment on its line in the source
    assert "extent (first fit)" in config and "sim: ruh" in devices


@pytest.mark.skipif(shutil.which("mkdocs", path=os.path.dirname(sys.executable)) is None,
                    reason="mkdocs is not installed in this venv (pip install -e '.[docs]'; make installs it)")
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    p = subprocess.run([str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
                       cwd=REPO, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "policies" / "index.html").is_file()
