"""README stays true: its first two commands are the Makefile's, CI runs the test command, and
its config and sweep examples load."""

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


def _toml_blocks() -> list[dict]:
    return [tomllib.loads(b) for b in re.findall(r"```toml\n(.*?)```", README, re.S)]


def test_config_and_sweep_examples_load() -> None:
    blocks = _toml_blocks()
    runs = [b for b in blocks if "grid" not in b]
    sweeps = [b for b in blocks if "grid" in b]
    assert runs and sweeps
    for b in runs:
        cfg = config_from_mapping(b, "README.md")
        assert cfg.policies
    for b in sweeps:
        plan = plan_sweep(b, "README.md")
        assert len(plan.points) == 2 * 2 * (1 + 2 + 2)
