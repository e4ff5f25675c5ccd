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

# Exit status: 0 success; 2 bad input, a bad flag or a refused device; 3 a byte-accounting fault.
EXIT_BAD_INPUT = 2
EXIT_ACCOUNTING_FAULT = 3


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
    """Console-script entry point: kvwear errors and command-line errors become one clear line
    (`kvwear: error: ...`) and exit code 2."""
    # typer bundles its own click; its exceptions are the ones raised here
    from typer._click import exceptions as cli_errors

    from kvwear.errors import KvwearError

    try:
        rc = app(standalone_mode=False)
    except KvwearError as exc:
        _fail(str(exc))
    except cli_errors.NoArgsIsHelpError as exc:     # a bare group: its help, as click shows it
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except cli_errors.UsageError as exc:
        where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
        _fail(where + exc.format_message())
    except cli_errors.ClickException as exc:
        _fail(exc.format_message())
    except typer.Abort:
        _fail("aborted")
    except MemoryError:
        # too large an input for this machine (a generator asked for 10^11 sessions, ...):
        # the stages written so far stay, marked; nothing half-written looks complete
        _fail("out of memory: the workload, trace or grid is too large for this machine")
    raise SystemExit(rc if isinstance(rc, int) else 0)


def _fail(message: str) -> None:
    one_line = " ".join(message.split())
    typer.secho(f"kvwear: error: {one_line}", err=True, fg=typer.colors.RED)
    raise SystemExit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    # `python -m harness.cli`: the command modules register on `harness.cli.app`, not on this
    # __main__ copy of the module
    from harness.cli import main as _main

    _main()
