"""Every `kvwear …` example in README.md, in the docs and in each command's `--help` names a real
command and only options that command takes, with values it accepts: click parses each one as
written, in a scratch directory where the input files an example names exist as empty files; the
command is not invoked. tests/test_examples_run.py runs each one in a fresh clone (the loop
device example in tests/harness/test_run_block.py).

An example is a line starting with `kvwear ` in a ```bash block of README.md or of a page under
docs/ (docs/results/ excepted: its commands are records of measurements, many hours long), an
inline `kvwear …` in README's prose that names no placeholder (`kvwear report RUN`), or an
`Examples:` line of a command's help."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from kvwear.harness.cli.main import app

REPO = Path(__file__).resolve().parents[1]
ROOT = typer.main.get_command(app)


# typer carries its own click: a group is a command with sub-commands
def is_group(cmd: Any) -> bool:
    return isinstance(getattr(cmd, "commands", None), dict)


def commands(group: Any = ROOT, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path] if path else []
    if is_group(group):
        for name, sub in group.commands.items():
            out += commands(sub, (*path, name))
    return out


def examples(text: str) -> list[str]:
    """Lines that start with `kvwear ` (backslash continuations joined, comments dropped)."""
    text = re.sub(r"\\\s*\n\s*", " ", text)
    found = []
    for line in text.splitlines():
        m = re.match(r"^\s*(?:Example:\s*)?(kvwear\s.*)$", line)
        if m:
            found.append(" ".join(m.group(1).split("  #")[0].split()))
    return found


def command_of(path: tuple[str, ...]) -> Any:
    cmd: Any = ROOT
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def doc_pages() -> list[Path]:
    """The docs pages whose examples are examples (not docs/results/'s records)."""
    return sorted(p for p in (REPO / "docs").rglob("*.md") if "results" not in p.relative_to(REPO / "docs").parts)


def all_examples() -> list[str]:
    readme = (REPO / "README.md").read_text()
    found = examples("\n".join(re.findall(r"```bash\n(.*?)```", readme, re.S)))
    for page in doc_pages():
        found += examples("\n".join(re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)))
    # Inline code in prose: placeholders (`kvwear trace inspect T`) and bare command names (`kvwear
    # simulate` flags) refer to a command; the rest are examples.
    paths = set(commands())
    found += [e for e in re.findall(r"`(kvwear [^`]+)`", readme)
              if not re.search(r"\b[A-Z]{1,}[.A-Z]*\b", e) and tuple(e.split()[1:]) not in paths]
    for path in commands():
        cmd = command_of(path)
        found += examples(f"{cmd.help or ''}\n{cmd.epilog or ''}")
    return sorted(set(found))


EXAMPLES = all_examples()


def test_examples_were_found() -> None:
    assert len(EXAMPLES) >= 20
    assert any(e.startswith("kvwear run --device block:") for e in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_parses(example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(example)[1:]
    cmd: Any = ROOT
    while is_group(cmd) and argv and argv[0] in cmd.commands:
        cmd = cmd.commands[argv.pop(0)]
    if argv[-1:] in (["--help"], ["-h"]) or argv in (["--version"], ["-V"]):   # eager: print and exit
        return
    assert not is_group(cmd), f"{example}: no such command"
    for _ in range(5):
        try:
            with cmd.make_context("kvwear", list(argv), resilient_parsing=False):
                return
        except Exception as exc:           # typer's own click raises its BadParameter
            m = re.search(r"'(.+?)' does not exist", str(exc))
            if not m:
                raise
            missing = Path(m.group(1))
            assert not missing.is_absolute() and ".." not in missing.parts, f"{example}: needs {missing}"
            missing.parent.mkdir(parents=True, exist_ok=True)
            missing.touch()
    pytest.fail(f"{example}: still missing inputs")


@pytest.mark.parametrize("path", commands(), ids=" ".join)
def test_help_keeps_its_bracketed_words(path: tuple[str, ...]) -> None:
    """Rich markup would swallow a `[tiers]` in help text as a style tag (the simulate help once
    read "a run config's (, )"): every bracketed word of a command's help, of its options' and of
    its arguments' shows in the rendered help."""
    from typer.testing import CliRunner

    cmd = command_of(path)
    raw = " ".join([cmd.help or "", cmd.epilog or ""] + [getattr(p, "help", None) or "" for p in cmd.params])
    words = set(re.findall(r"\[(\w[\w.-]*)\]", raw)) - {"default", "required"}
    if not words:
        return
    out = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"}).output
    assert not [w for w in words if f"[{w}]" not in out], out
