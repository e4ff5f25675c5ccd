"""The apps of the `kvwear` command line (the root app and its `trace` and `models` groups), the
version answer (`kvwear --version`, `-V`, `kvwear version`) and the one JSON printer every
command's `--json` uses.

Each module of this package registers its commands on these apps; `kvwear.harness.cli.main` imports the
modules. Must not: import the command modules (they import this package).
"""

from __future__ import annotations

import json
import math
from typing import Any

import typer

# Exit status: 0 success; 2 bad input, a bad flag or a refused device; 3 a byte-accounting fault.
EXIT_BAD_INPUT = 2
EXIT_ACCOUNTING_FAULT = 3

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


def version_text() -> str:
    """`kvwear VERSION` (the installed distribution's version; a checkout's package version when
    it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"kvwear {version('kvwear')}"
    except PackageNotFoundError:
        import kvwear

        return f"kvwear {kvwear.__version__}"


def _version_flag(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_version_flag,
                                       help="Print kvwear's version and exit.")) -> None:
    """SSD wear benchmarking for LLM KV-cache offloading."""


@app.command("version")
def version_cmd() -> None:
    """Print kvwear's version (the same as `kvwear --version`)."""
    typer.echo(version_text())


def json_safe(value: Any) -> Any:
    """`value` with what JSON cannot hold made plain: a non-finite float becomes the string "inf",
    "-inf" or "nan" (a lifetime of a policy that writes nothing is infinite), paths become strings,
    tuples lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if hasattr(value, "item"):             # a numpy scalar
        return json_safe(value.item())
    return str(value)


def echo_json(doc: dict[str, Any]) -> None:
    """Print one JSON document on stdout (the `--json` output of every command that prints a summary)."""
    typer.echo(json.dumps(json_safe(doc), indent=2, allow_nan=False))


app.add_typer(trace_app, name="trace")
app.add_typer(models_app, name="models")
