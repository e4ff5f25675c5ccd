"""The apps of the `kvwear` command line (the root app and its `trace` and `models` groups).

Each module of this package registers its commands on these apps; `kvwear.harness.cli.main` imports the
modules. Must not: import the command modules (they import this package).
"""

from __future__ import annotations

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
app.add_typer(trace_app, name="trace")
app.add_typer(models_app, name="models")
