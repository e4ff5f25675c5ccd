"""The `kvwear` command line: imports the command modules onto the apps of `kvwear.harness.cli.apps`.

Each command lives in its own module in this package (`harness/cli/`) and registers itself on the
apps defined in that package; this module imports them (the dependency goes one way: cli →
command modules → the apps) and holds the console-script entry point. To add a command
module, append its name to `COMMAND_MODULES`.
"""

from __future__ import annotations

import importlib

import typer

from kvwear.harness.cli.apps import EXIT_ACCOUNTING_FAULT, EXIT_BAD_INPUT, app

__all__ = ["EXIT_ACCOUNTING_FAULT", "EXIT_BAD_INPUT", "app", "main"]


COMMAND_MODULES: list[str] = [
    "kvwear.harness.cli.characterize",
    "kvwear.harness.cli.trace_io",
    "kvwear.harness.cli.models",
    "kvwear.harness.cli.generate",
    "kvwear.harness.cli.simulate",
    "kvwear.harness.cli.run",
    "kvwear.harness.cli.sweep",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name)


def main() -> None:
    """Console-script entry point: kvwear errors and command-line errors become one clear line
    (`kvwear: error: ...`) and exit code 2."""
    # newer typer bundles its own click (a private module), older typer uses click itself: the
    # exceptions raised here are those of whichever click typer runs on
    try:
        from typer._click import exceptions as cli_errors
    except ImportError:
        from click import exceptions as cli_errors  # type: ignore[no-redef]

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


if __name__ == "__main__":       # `python -m kvwear.harness.cli.main`
    main()
