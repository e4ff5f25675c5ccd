"""`kvwear trace generate KIND`: write a synthetic `requests` table (kvwear.workloads.synthetic).

One sub-command per generator kind (multi-round, agentic, api, trace-a). Their options are made
from the kind's frozen config dataclass, so every config field is on the command line with the
field's own help text and default; this module adds only `-o/--out`. It must not hold generator
logic.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import typer

from kvwear.harness.cli.apps import trace_app
from kvwear.tables import write_table
from kvwear.workloads.schema import REQUESTS
from kvwear.workloads.synthetic import GENERATORS, CategoryMap, Generator, format_category_map

_EXAMPLES: dict[str, list[str]] = {
    "multi-round": [
        "kvwear trace generate multi-round --sessions 40 --turns 20 --seed 1 -o out/chat.parquet",
        "kvwear trace generate multi-round --sessions 20 --turns 100 -o out/long.parquet   # stress case",
    ],
    "agentic": [
        "kvwear trace generate agentic --sessions 50 --subagent-prob 0.15 -o out/agent.parquet",
    ],
    "api": [
        "kvwear trace generate api --requests 100000 --qps 500 --system-prompts 4 -o out/api.parquet",
    ],
    "trace-a": [
        "kvwear trace generate trace-a --sessions 20000 -o out/trace_a.parquet",
        "kvwear trace generate trace-a --multi-turn-share 0.3 "
        "--reuse-mean-s text=60,file=300,image=60,search=30 -o out/a.parquet",
    ],
}

generate_app = typer.Typer(
    help=(
        "Generate a seeded synthetic requests table (Parquet). Kinds: multi-round, agentic, api, "
        "trace-a; `kvwear trace generate KIND --help` lists every option.\n\n"
        "Example: kvwear trace generate multi-round --sessions 40 --turns 20 --seed 1 "
        "-o out/chat.parquet"
    ),
    no_args_is_help=True,
)
trace_app.add_typer(generate_app, name="generate")


def _option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _make_command(gen: Generator) -> Any:
    """A typer command whose options are `gen.config`'s fields (plus -o/--out)."""
    hints = typing.get_type_hints(gen.config)
    params = [
        inspect.Parameter(
            "out", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
            default=typer.Option(..., "-o", "--out", help="output Parquet file (written atomically)"),
        )
    ]
    mapped: set[str] = set()
    for f in fields(gen.config):
        annotation: Any = hints[f.name]
        default: Any = f.default if f.default is not MISSING else ...
        if annotation == CategoryMap:
            # Per-category values travel as "text=0.6,file=0.15,..." on the command line.
            annotation, default = str, format_category_map(default)
            mapped.add(f.name)
        params.append(inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
            default=typer.Option(default, _option_name(f.name), help=f.metadata.get("help", "")),
        ))

    def command(**kwargs: Any) -> None:
        out = Path(kwargs.pop("out"))
        try:
            cfg = gen.config(**kwargs)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        table = gen.run(cfg)
        write_table(REQUESTS, table, out)
        sessions = table.column("session_id").null_count < table.num_rows
        n_sessions = pc.count_distinct(table.column("session_id")).as_py() if sessions else 0
        span = (pc.max(table.column("arrival_s")).as_py() or 0.0) if table.num_rows else 0.0
        typer.echo(
            f"wrote {table.num_rows:,} requests"
            + (f" in {n_sessions:,} sessions" if sessions else "")
            + f" over {span:,.1f} s, {int(pc.sum(table.column('input_tokens')).as_py() or 0):,} "
            f"input tokens ({gen.kind}, seed {cfg.seed}) to {out}"
        )

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = gen.kind.replace("-", "_")
    examples = "\n\n".join(f"  {e}" for e in _EXAMPLES.get(gen.kind, []))
    command.__doc__ = f"{gen.summary}\n\nExamples:\n\n{examples}"
    return command


for _kind in GENERATORS.names():
    generate_app.command(_kind)(_make_command(GENERATORS.get(_kind)))
