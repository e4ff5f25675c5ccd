"""README stays true: at most 150 lines, its first two commands are the Makefile's, CI runs the
test command, every file it links exists, and the TOML examples of README and docs load (the
sweep guide's is configs/sweep-quick.toml)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.sweep import plan_sweep

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_first_two_commands_and_ci() -> None:
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block and README.index("```bash") < 40
    cmds = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert cmds == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text()


DOCS = sorted((REPO / "docs").rglob("*.md"))


def test_readme_is_short_and_its_links_exist() -> None:
    assert len(README.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 10
    for link in links:
        if "://" not in link:
            assert (REPO / link).exists(), link


def _toml_blocks(text: str) -> list[dict]:
    return [tomllib.loads(b) for b in re.findall(r"```toml\n(.*?)```", text, re.S)]


def test_config_and_sweep_examples_load() -> None:
    blocks = [(p, b) for p in [REPO / "README.md", *DOCS] for b in _toml_blocks(p.read_text())]
    sweeps = [(p, b) for p, b in blocks if "grid" in b]
    assert sweeps
    for p, b in blocks:
        if "grid" in b:
            assert plan_sweep(b, str(p)).points
        else:
            assert config_from_mapping(b, str(p)).policies
    guide = next(b for p, b in sweeps if p.name == "sweeps.md")
    shipped = tomllib.loads((REPO / "configs" / "sweep-quick.toml").read_text())
    assert guide == shipped
    assert len(plan_sweep(guide, "docs/guides/sweeps.md").points) == 2 * 2 * (1 + 2 + 2)
