"""`kvwear models list` and `kvwear models show`: model profiles and the arithmetic behind them.

Reads profiles from kvwear.workloads.models (built-ins, HF config.json, TOML) and prints them; it must
not compute any size itself (the numbers come from ModelProfile).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kvwear.harness.cli.apps import models_app
from kvwear.workloads.models import MIB, PROFILES, ModelProfile, explain, load_profile, resolve_profile


@models_app.command("list")
def list_profiles(
    block_tokens: int = typer.Option(16, "--block-tokens", min=1,
                                     help="tokens per full-attention chunk for the ratio column"),
    config: list[Path] = typer.Option(
        [], "--config", exists=True, dir_okay=False,
        help="also list the profile in this config.json or .toml (repeatable)"),
) -> None:
    """List model profiles: KV bytes per token, state bytes per checkpoint, state/chunk ratio.

    Examples:

      kvwear models list

      kvwear models list --block-tokens 64 --config configs/models/Qwen3-Next-80B-A3B/config.json
    """
    profiles: list[ModelProfile] = [PROFILES.get(n) for n in PROFILES]
    profiles += [load_profile(p) for p in config]
    table = Table(title=f"model profiles (ratio: one state ÷ one {block_tokens}-token chunk)")
    for col in ("name", "family", "full-attn layers", "KV bytes/token", "state bytes",
                "state MiB", "state/chunk"):
        table.add_column(col, justify="left" if col in ("name", "family") else "right")
    for p in profiles:
        table.add_row(
            p.name, p.family, f"{p.full_attn_layers} of {p.total_layers}",
            f"{p.kv_bytes_per_token:,}",
            f"{p.state_bytes:,}" if p.is_hybrid else "—",
            f"{p.state_bytes / MIB:.1f}" if p.is_hybrid else "—",
            f"{p.state_chunk_ratio(block_tokens):.1f}" if p.is_hybrid else "—",
        )
    Console(width=max(120, Console().width)).print(table)


@models_app.command("show")
def show_profile(
    model: str = typer.Argument(..., help="a built-in profile name, or a config.json / .toml path"),
    block_tokens: int = typer.Option(16, "--block-tokens", min=1, help="tokens per chunk"),
) -> None:
    """Show one profile's formula inputs and the arithmetic that gives its sizes.

    Examples:

      kvwear models show kimi-k3

      kvwear models show configs/models/Kimi-Linear-48B-A3B-Instruct/config.json --block-tokens 64

      kvwear models show configs/models/my-model.toml
    """
    p = resolve_profile(model)
    console = Console(width=max(120, Console().width))
    console.print(f"[bold]{p.name}[/bold]  family {p.family}  (source: {p.source})")
    inputs = Table(title="formula inputs", show_header=True)
    inputs.add_column("input")
    inputs.add_column("value", justify="right")
    for key, value in p.params.items():
        inputs.add_row(key, f"{value:,}")
    console.print(inputs)
    console.print("[bold]arithmetic[/bold]")
    for line in explain(p, block_tokens):
        console.print(f"  {line}", highlight=False)
