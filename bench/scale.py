"""Benchmark: wall time and peak RSS of every trace-sized command against the workload's size.

Workloads: 1/4, 1/2, 1, 2 and 4 times (any multiple that makes whole copies: 1/8 with a base
divisible by 8) a base of `--base-copies` copies of the shared
Claude-Code/Weka traces (`../shared/traces/claude-code-weka/traces`, six sessions). Each copy
is written as fresh JSON files — a Weka directory gives every file its own hash namespace, so a
copy never shares a block with another — with copy c's top-level `t` shifted by c·`--gap-s`
(subagent times are relative to their spawn, so shifting the top level shifts the whole
session) and its `id` made unique. `--full` is the issue's form: a base of 148 copies (68,524
requests, 94 M 64-token blocks, 468 MB of JSON: the size of the public corpus), sizes 1/4 to 4,
DRAM 100 GB and SSD 1 TB — hours on a 2-core machine. The default is sized for minutes on one: a
base of 1 copy, sizes 1 and 4 (the slope from 1× to 4× is the point), and tiers scaled with the
base (DRAM 100 GB and SSD 1 TB × 1/148, so they fill as they would at full size).
`--data DIR` takes pre-generated sizes instead of writing them: DIR/xS/json (the copies, as
`write_copies` writes them) and optionally DIR/xS/requests.parquet (their `trace convert`), where
S is the multiple as `%g` prints it (x1, x4, x0.125); a size DIR lacks is generated as usual, and
a folder holding another number of copies than the size asks is refused.

For every size it runs, each as its own `kvwear` process: `trace convert` (JSON → Parquet),
`trace inspect`, `trace characterize`, `simulate` with lru, gandalf and belady, and `run` with the
embedded `sim` device (lru, the default extent layout), at fixed tier capacities (`--dram`, `--ssd`;
Kimi-K3), and prints wall
seconds and the child's peak RSS (its own `ru_maxrss` from wait4, so one child's peak never
hides another's), then the growth of each from the 1× to the 4× workload — the slope is the
point. Generated files and every command's output live in one temporary folder that is deleted
at the end (a `--data` folder is only read).

This bench has no peer: it prints no ratio between tools, only each command's growth.

Run: .venv/bin/python bench/scale.py [--full] [--base-copies 1] [--sizes 1,4] [--dram SIZE] [--ssd SIZE]
     [--commands convert,inspect,characterize,lru,gandalf,belady,run] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
WEKA = REPO.parent / "shared/traces/claude-code-weka/traces"
#: copies of the shared Weka set the size of the public corpus (the issue's 1×)
FULL_BASE_COPIES = 148
COMMANDS = ("convert", "inspect", "characterize", "lru", "gandalf", "belady", "run")


@dataclass(frozen=True)
class Measured:
    """One command on one workload."""

    wall_s: float
    cpu_s: float  # user + system: the machine is shared, wall time is not the work done
    peak_rss_bytes: int


def write_copies(src: Path, out: Path, copies: int, gap_s: float) -> int:
    """Write `copies` time-shifted copies of every Weka JSON file of `src` into `out`; returns
    the bytes written."""
    out.mkdir(parents=True, exist_ok=True)
    docs = [(f.stem, json.loads(f.read_bytes())) for f in sorted(src.glob("*.json"))]
    total = 0
    for c in range(copies):
        for stem, doc in docs:
            shifted = dict(doc)
            shifted["id"] = f"{doc.get('id', stem)}-c{c:04d}"
            shifted["requests"] = [{**r, "t": r["t"] + c * gap_s} for r in doc["requests"]]
            data = json.dumps(shifted, separators=(",", ":")).encode()
            (out / f"c{c:04d}-{stem}.json").write_bytes(data)
            total += len(data)
    return total


def given_size(data: Path | None, size: Fraction, copies: int) -> tuple[Path | None, Path | None]:
    """The pre-generated JSON folder and requests Parquet of `size` under `data` (each None when
    absent); a JSON folder holding another number of files than `copies` of the set is refused."""
    if data is None:
        return None, None
    d = data / f"x{float(size):g}"
    json_dir = d / "json"
    if not json_dir.is_dir():
        return None, None
    want = copies * len(list(WEKA.glob("*.json")))
    have = sum(1 for _ in json_dir.glob("*.json"))
    if have != want:
        raise SystemExit(f"--data: {json_dir} holds {have} JSON files, {size}x of {copies} copies needs {want}")
    req = d / "requests.parquet"
    return json_dir, req if req.is_file() else None


def measure(argv: list[str], env: dict[str, str]) -> Measured:
    """Run one command; its wall time and its own peak RSS (wait4's rusage of that child)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv)}\n" + "\n".join(tail))
    return Measured(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)  # Linux: KiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true",
                    help="the issue's form: --base-copies 148 --sizes 1/4,1/2,1,2,4 --dram 100GB --ssd 1TB")
    ap.add_argument("--base-copies", type=int, default=None, help="copies of the shared Weka set at 1x (default 1)")
    ap.add_argument("--sizes", default=None, help="multiples of the base, whole copies each (default 1,4)")
    ap.add_argument("--commands", default=",".join(COMMANDS), help=f"subset of {','.join(COMMANDS)}")
    ap.add_argument("--gap-s", type=float, default=3600.0, help="start of copy c = c x gap")
    ap.add_argument("--model", default="kimi-k3")
    ap.add_argument("--dram", default=None, help="DRAM tier (default: 100GB × base / 148)")
    ap.add_argument("--ssd", default=None, help="SSD tier (default: 1TB × base / 148)")
    ap.add_argument("--tmp", default=None, help="folder for the generated files (default: a temp dir)")
    ap.add_argument("--data", type=Path, default=None,
                    help="pre-generated sizes: DIR/xS/json and DIR/xS/requests.parquet (read only)")
    args = ap.parse_args()
    if args.base_copies is None:
        args.base_copies = FULL_BASE_COPIES if args.full else 1
    if args.sizes is None:
        args.sizes = "1/4,1/2,1,2,4" if args.full else "1,4"
    # the tiers scale with the base, so a smaller workload fills them as the full one fills 100 GB / 1 TB
    scale = args.base_copies / FULL_BASE_COPIES
    args.dram = args.dram or f"{int(100e9 * scale)}B"
    args.ssd = args.ssd or f"{int(1e12 * scale)}B"
    commands = [c for c in args.commands.split(",") if c]
    unknown = sorted(set(commands) - set(COMMANDS))
    if unknown:
        raise SystemExit(f"--commands: unknown {', '.join(unknown)} (one of: {', '.join(COMMANDS)})")
    sizes = [Fraction(s) for s in args.sizes.split(",")]
    for s in sizes:
        if (s * args.base_copies).denominator != 1 or s * args.base_copies < 1:
            raise SystemExit(f"--sizes: {s} x {args.base_copies} copies is not a whole number >= 1")
    kvwear = [sys.executable, "-c", "from kvwear.harness.cli.main import main; main()"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sim = ["--model", args.model, "--dram", args.dram, "--ssd", args.ssd]
    steps: dict[str, Callable[[Path, Path, Path], list[str]]] = {
        "convert": lambda j, r, d: ["trace", "convert", str(j), "-o", str(d / "converted.parquet")],
        "inspect": lambda j, r, d: ["trace", "inspect", str(r), "--json"],
        "characterize": lambda j, r, d: ["trace", "characterize", str(r), "-m", args.model, "-o", str(d / "char")],
        "lru": lambda j, r, d: ["simulate", "--trace", str(r), *sim, "--policy", "lru", "-o", str(d / "sim")],
        "gandalf": lambda j, r, d: ["simulate", "--trace", str(r), *sim, "--policy", "gandalf", "-o", str(d / "sim")],
        "belady": lambda j, r, d: ["simulate", "--trace", str(r), *sim, "--policy", "belady", "-o", str(d / "sim")],
        "run": lambda j, r, d: ["run", "--trace", str(j), "--format", "weka", *sim, "--policy", "lru",
                             "--device", "sim", "--no-report", "-o", str(d / "run")],
    }
    root = Path(tempfile.mkdtemp(prefix="kvwear-scale-", dir=args.tmp))
    results: dict[Fraction, dict[str, Measured]] = {}
    info: dict[Fraction, str] = {}
    try:
        for s in sizes:
            copies = int(s * args.base_copies)
            d = root / f"x{float(s):g}"
            d.mkdir()
            json_dir, req = given_size(args.data, s, copies)
            if json_dir is None:
                json_dir = d / "json"
                write_copies(WEKA, json_dir, copies, args.gap_s)
            nbytes = sum(f.stat().st_size for f in json_dir.glob("*.json"))
            if req is None:     # the others read the Parquet: convert's output (made untimed without it)
                req = d / "converted.parquet"
                if "convert" not in commands:
                    measure([*kvwear, *steps["convert"](json_dir, req, d)], env)
            row: dict[str, Measured] = {}
            for c in ("convert", *[c for c in commands if c != "convert"]):
                if c in commands:
                    row[c] = measure([*kvwear, *steps[c](json_dir, req, d)], env)
                    m = row[c]
                    print(f"  {float(s):6g}x {c:13s} {m.wall_s:8.1f} s {m.cpu_s:8.1f} cpu-s "
                          f"{m.peak_rss_bytes / 2**20:8,.0f} MiB", file=sys.stderr, flush=True)
                for sub in ("sim", "run", "char"):
                    shutil.rmtree(d / sub, ignore_errors=True)
            cols = pq.read_table(req, columns=["hashed_tokens", "block_tokens"])
            blocks = int(sum(h // b for h, b in zip(cols.column(0).to_pylist(), cols.column(1).to_pylist(),
                                                    strict=True)))
            info[s] = (f"{copies} copies, {cols.num_rows:,} req, {blocks / 1e6:,.1f} M blocks, {nbytes / 1e6:,.0f} MB"
                       + (f" (from {json_dir.parent})" if not json_dir.is_relative_to(root) else ""))
            results[s] = row
            shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"model {args.model}, DRAM {args.dram}, SSD {args.ssd}; base {args.base_copies} copies of the "
          f"shared Weka set, copy c starts at c x {args.gap_s:g} s")
    for s in sizes:
        print(f"  {float(s):6g}x: {info[s]}")
    one, four = Fraction(1), Fraction(4)
    metrics: list[tuple[str, Callable[[Measured], float], str]] = [
        ("peak RSS, MiB", lambda m: m.peak_rss_bytes / 2**20, "9,.0f"),
        ("CPU s (user + system; wall time is the shared machine's)", lambda m: m.cpu_s, "9.1f"),
        ("wall s", lambda m: m.wall_s, "9.1f"),
    ]
    for title, get, fmt in metrics:
        print(f"\n{title}")
        print(f"{'size':>6s}" + "".join(f" {c:>12s}" for c in commands))
        for s in sizes:
            print(f"{float(s):6g}" + "".join(f" {format(get(results[s][c]), fmt):>12s}" for c in commands))
        if one in results and four in results:
            print(f"{'4x/1x':>6s}" + "".join(f" {get(results[four][c]) / get(results[one][c]):11.2f}x"
                                           for c in commands))


if __name__ == "__main__":
    main()
