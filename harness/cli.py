"""The `kvwear` command line: imports the command modules onto the apps of `harness.commands`.

Each command lives in its own module under `harness/commands/` and registers itself on the
apps defined in that package; this module imports them (the dependency goes one way: cli →
command modules → the apps) and holds the console-script entry point. To add a command
module, append its name to `COMMAND_MODULES`.
"""

from __future__ import annotations

import importlib

import typer

from harness.commands import app

__all__ = ["app", "main"]

COMMAND_MODULES: list[str] = [
    "harness.commands.characterize",
    "harness.commands.trace_io",
    "harness.commands.models",
    "harness.commands.generate",
    "harness.commands.simulate",
    "harness.commands.run",
    "harness.commands.sweep",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name)


def main() -> None:
    """Console-script entry point: kvwear errors become one clear line and exit code 2."""
    from kvwear.errors import KvwearError

    try:
        app()
    except KvwearError as exc:
        typer.secho(f"kvwear: error: {exc}", err=True, fg=typer.colors.RED)
        raise SystemExit(2) from None
