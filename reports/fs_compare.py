"""Raw-block and file-system runs side by side, per policy: host bytes, the file system's overhead,
the device WAF and the lifetime (issue #30's comparison; the fs layout: docs/design/fs-layout.md).

Input: run directories of the same workload and policies (`results.parquet` each), one played
with a block layout (its device WAF measured, or the `sim` drive's), the others with `--layout fs`
(their WAF: the captured block trace on the embedded FTL, `fs_ftl_waf`). Per policy and run:
- bytes to the device: a block run's device write bytes; a file-system run's block bytes
  (`fs_block_write_bytes`: the files plus the file system's overhead);
- overhead: block bytes ÷ file bytes − 1 (file-system runs only);
- WAF and NAND bytes: the drive's (a block run) or the FTL's on the trace (a file-system run);
- lifetime: the projection at WAF 1 of the bytes the drive receives (a block run: the plan's; a
  file-system run: its block bytes), × those bytes ÷ NAND bytes (a drive wears by its NAND writes,
  so the lifetime scales with their inverse; the same workload, span and ratings in every run).

With `--levels`, the fs layout's accounting levels per policy instead, exact to the byte: object
bytes (the plan) → file bytes (the player's write() calls) → block bytes (the device's own counters,
mount to unmount) → the drive's own count of the host bytes it received (SMART Data Units Written,
where the drive reports them: a qemu/femu guest's NVMe drive; a dash for a loop device), with the
file system's overhead, the discarded bytes and how many accounting checks held.

Must not: run anything or compute a measurement; it reads results rows and puts them side by side.
`python -m kvwear.reports.fs_compare [--levels] NAME=RUN_DIR ...` prints the Markdown table.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvwear.errors import KvwearError
from kvwear.harness.estimate.schema import ResultsRow, read_results
from kvwear.kv import parse_kv


@dataclass(frozen=True)
class SideBySide:
    """One policy in one run."""

    run: str
    policy: str
    filesystem: str | None          # None: a block layout
    discard: str | None
    object_bytes: int | None        # the plan's (a block plan: its aligned write bytes)
    device_bytes: int | None        # what the device received
    overhead: float | None          # block ÷ file bytes − 1
    waf: float | None
    nand_bytes: int | None
    lifetime_days: float | None


def side_by_side_row(run: str, r: ResultsRow) -> SideBySide:
    fs = r.fs_filesystem is not None
    device_bytes = r.fs_block_write_bytes if fs else r.device_write_bytes
    waf = r.fs_ftl_waf if fs else r.waf_measured
    nand = r.fs_ftl_nand_bytes if fs else r.nand_write_bytes
    overhead = (r.fs_overhead_ratio - 1.0) if fs and r.fs_overhead_ratio is not None else None
    life = None
    # the WAF-1 projection is of the bytes the drive receives (a file-system run: its block bytes)
    host = r.fs_block_write_bytes if fs else r.plan_write_bytes
    if r.lifetime_days_waf1 is not None and host and nand:
        life = r.lifetime_days_waf1 * host / nand
    return SideBySide(run, r.policy, r.fs_filesystem, r.fs_discard, r.plan_write_bytes, device_bytes,
                      overhead, waf, nand, life)


def _results(runs: Mapping[str, Path]) -> list[tuple[str, Path, list[ResultsRow]]]:
    """(name, results file, rows) of every run (`runs`: a name → its run directory)."""
    out = []
    for name, d in runs.items():
        path = Path(d) / "results.parquet"
        if not path.exists():
            raise KvwearError(f"{path}: no results (the run did not finish)")
        out.append((name, path, read_results(path)))
    return out


def side_by_side(runs: Mapping[str, Path]) -> list[SideBySide]:
    """Every policy of every run, policies in the first run's order."""
    out: list[SideBySide] = []
    order: list[str] = []
    for name, _, rows in _results(runs):
        for r in rows:
            if r.policy not in order:
                order.append(r.policy)
            out.append(side_by_side_row(name, r))
    return sorted(out, key=lambda s: (order.index(s.policy), list(runs).index(s.run)))


def levels(runs: Mapping[str, Path]) -> list[tuple[str, ResultsRow]]:
    """(run name, results row) of every policy of every run, each an fs-layout run, in each run's
    policy order."""
    out: list[tuple[str, ResultsRow]] = []
    for name, path, rows in _results(runs):
        if not any(r.fs_filesystem for r in rows):
            raise KvwearError(f"{path}: not a run of the fs layout (no file system in its results)")
        out += [(name, r) for r in rows]
    return out


def _gb(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e9:,.3f} GB"


def markdown(rows: Sequence[SideBySide]) -> str:
    """The table: one line per policy and run."""
    lines = ["| policy | run | object bytes | bytes to the device | fs overhead | WAF | NAND bytes | lifetime |",
             "|---|---|---|---|---|---|---|---|"]
    for s in rows:
        lines.append(
            f"| {s.policy} | {s.run} | {_gb(s.object_bytes)} | {_gb(s.device_bytes)} | "
            f"{'—' if s.overhead is None else f'{s.overhead:+.2%}'} | "
            f"{'—' if s.waf is None else f'{s.waf:.3f}'} | {_gb(s.nand_bytes)} | "
            f"{'—' if s.lifetime_days is None else f'{s.lifetime_days:,.1f} d'} |")
    return "\n".join(lines) + "\n"


def _b(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def levels_markdown(rows: Sequence[tuple[str, ResultsRow]]) -> str:
    """The `--levels` table: one line per policy and run."""
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
    by_level = "--levels" in argv
    # the one NAME=VALUE parser: the name ends at the first '=' (a path may hold more), a name twice is refused
    try:
        runs = {name: Path(path) for name, path in
                parse_kv([a for a in argv if a != "--levels"], "fs_compare", form="NAME=RUN_DIR").items()}
    except ValueError as exc:
        print(f"usage: python -m kvwear.reports.fs_compare [--levels] NAME=RUN_DIR ...; {exc}", file=sys.stderr)
        return 2
    if not runs:
        print("usage: python -m kvwear.reports.fs_compare [--levels] NAME=RUN_DIR ...; no run given", file=sys.stderr)
        return 2
    try:
        table = levels_markdown(levels(runs)) if by_level else markdown(side_by_side(runs))
    except KvwearError as exc:          # a run that did not finish, or not of the fs layout: named, no traceback
        print(f"fs_compare: {exc}", file=sys.stderr)
        return 2
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
