"""The fs layout's accounting levels per policy, exact to the byte: object bytes (the plan) → file
bytes (the player's write() calls) → block bytes (the device's own counters, mount to unmount) →
the drive's own count of the host bytes it received (SMART Data Units Written, where the drive
reports them: a qemu/femu guest's NVMe drive), with the file system's overhead, the discarded
bytes and how many accounting checks held (the fs layout: docs/design/fs-layout.md).

Input: run directories of `--layout fs` runs (`results.parquet` each). A row whose drive has no
SMART count (a loop device) shows a dash there.

Must not: run anything or compute a measurement; it reads results rows and lays them out.
`python -m kvwear.reports.fs_levels NAME=RUN_DIR ...` prints the Markdown table.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvwear.errors import KvwearError
from kvwear.harness.estimate.schema import ResultsRow, read_results
from kvwear.kv import parse_kv


def levels(runs: Mapping[str, Path]) -> list[tuple[str, ResultsRow]]:
    """(run name, results row) of every fs-layout policy of every run, in each run's policy order."""
    out: list[tuple[str, ResultsRow]] = []
    for name, d in runs.items():
        path = Path(d) / "results.parquet"
        if not path.exists():
            raise KvwearError(f"{path}: no results (the run did not finish)")
        rows = read_results(path)
        if not any(r.fs_filesystem for r in rows):
            raise KvwearError(f"{path}: not a run of the fs layout (no file system in its results)")
        out += [(name, r) for r in rows]
    return out


def _b(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def markdown(rows: Sequence[tuple[str, ResultsRow]]) -> str:
    """One line per policy and run."""
    lines = ["| policy | run | object bytes | file bytes | block bytes | fs overhead | discarded | SMART host bytes "
             "| SMART − block | accounting checks |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run, r in rows:
        block, smart = r.fs_block_write_bytes, r.smart_write_bytes
        overhead = "—" if r.fs_overhead_ratio is None else f"{r.fs_overhead_ratio - 1:+.2%}"
        diff = "—" if smart is None or block is None else f"{smart - block:+,}"
        lines.append(f"| {r.policy} | {run} | {_b(r.plan_write_bytes)} | {_b(r.file_write_bytes)} | {_b(block)} | "
                     f"{overhead} | {_b(r.fs_discard_bytes)} | {_b(smart)} | {diff} | "
                     f"{r.accounting_checks_passed} of {r.accounting_checks_total} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    # the one NAME=VALUE parser: the name ends at the first '=' (a path may hold more), a name twice is refused
    try:
        runs = {name: Path(path) for name, path in parse_kv(argv, "fs_levels", form="NAME=RUN_DIR").items()}
    except ValueError as exc:
        print(f"usage: python -m kvwear.reports.fs_levels NAME=RUN_DIR ...; {exc}", file=sys.stderr)
        return 2
    print(markdown(levels(runs)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
