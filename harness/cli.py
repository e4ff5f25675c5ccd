"""The `kvwear` command line: one typer app, command groups filled by `harness.commands.*`.

This module only assembles the groups; each command lives in its own module under
`harness/commands/`, which registers itself on the apps defined here. To add a command
module, append its name to `COMMAND_MODULES`.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="kvwear",
    help=(
        "SSD wear benchmarking for LLM KV-cache offloading: replay KV-cache traces under cache "
        "placement policies, issue the SSD traffic to a device, measure wear, project lifetime."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
trace_app = typer.Typer(
    help="Load, convert, generate and characterize KV-cache traces.", no_args_is_help=True
)
models_app = typer.Typer(help="Model profiles: KV bytes per token, state sizes.", no_args_is_help=True)
app.add_typer(trace_app, name="trace")
app.add_typer(models_app, name="models")

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
