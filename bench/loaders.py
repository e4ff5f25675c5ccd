"""Benchmark: loading a large Mooncake-like JSONL trace, kvwear vs peers, in one run.

Generates a prefix-chained Mooncake-format file (default ~50 MB, `--size-mb`; `--full`: 300 MB) in
a temporary directory (deleted afterwards), then runs each reader in its own subprocess so that
peak memory is honest: the child records its RSS after imports (psutil) and the kernel's
high-water mark (ru_maxrss) after the work; the increase is the difference. The child times its
own read (wall and CPU seconds, after its imports and a warm-up read of a small file), and the
readers are interleaved (bench/_interleave.py: ≥ 5 rounds after a warm-up, the order rotating).
Readers:

  kvwear convert   kvwear.workloads.loaders.convert_trace: validated, streamed to Parquet
  kvwear load      kvwear.workloads.loaders.load_requests: validated, whole table in memory
  pyarrow.json     pyarrow.json.read_json: no validation, no line numbers, whole table
  pandas           pandas.read_json(lines=True): whole DataFrame (skip with --no-pandas)

Prints min and median CPU and wall seconds per reader, throughput (MB/s of JSON text at the
median wall time), the median peak RSS increase, and ratios against kvwear convert; kvwear
convert's memory is also shown relative to its Parquet output.

Usage: python bench/loaders.py [--size-mb 50] [--rounds 5] [--no-pandas] [--full]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _interleave import SelfTimed, add_round_options, interleave, rounds_of

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, resource, sys, time
import psutil
sys.path.insert(0, sys.argv[3])
which, src, warm = sys.argv[1], sys.argv[2], sys.argv[4]
if which.startswith("kvwear"):
    from kvwear.workloads.loaders import convert_trace, load_requests
elif which == "pyarrow":
    import pyarrow.json as pj
else:
    import pandas as pd

def read(path, out):
    if which == "kvwear-convert":
        return convert_trace(path, out, "mooncake").rows
    if which == "kvwear-load":
        return load_requests(path, "mooncake").table.num_rows
    if which == "pyarrow":
        return pj.read_json(path).num_rows
    return len(pd.read_json(path, lines=True))

# Warm up on a small file first: lazy imports, thread pools and allocator arenas are a fixed
# cost, not memory that grows with the trace; the baseline is taken after them.
read(warm, warm + ".parquet")
base = psutil.Process().memory_info().rss
if resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 > base:
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # peak so far, to be strict
out = os.path.join(os.path.dirname(src), "out.parquet")
t0, c0 = time.perf_counter(), time.process_time()
rows = read(src, out)
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
out_bytes = os.path.getsize(out) if which == "kvwear-convert" else 0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": dt, "cpu_s": cpu, "rows": rows, "peak_increase": peak - base, "out_bytes": out_bytes}))
"""


def generate(path: Path, size_mb: float, seed: int = 7) -> int:
    """Write a Mooncake-format file of about `size_mb` MB; returns the row count.

    Prefix chained like the real trace: a request is a prefix of one of 500 shared prompts
    followed by fresh ids; lengths and gaps follow rough Mooncake-like distributions.
    """
    rng = np.random.default_rng(seed)
    pool = [list(range(i * 16, i * 16 + int(rng.integers(1, 16)))) for i in range(500)]
    next_id = 500 * 16
    target = int(size_mb * 1e6)
    written = rows = 0
    t_ms = 0
    with open(path, "w") as fh:
        while written < target:
            n = 20000
            n_blocks = np.minimum(rng.lognormal(2.8, 0.9, n).astype(np.int64) + 1, 250)
            shared = rng.integers(0, 500, n)
            gaps = rng.exponential(300.0, n).astype(np.int64)
            parts = []
            for i in range(n):
                prompt = pool[shared[i]]
                k = min(len(prompt), int(n_blocks[i]))
                fresh = int(n_blocks[i]) - k
                ids = prompt[:k] + list(range(next_id, next_id + fresh))
                next_id += fresh
                t_ms += int(gaps[i])
                inp = 512 * (len(ids) - 1) + int(rng.integers(1, 513))
                parts.append(f'{{"timestamp": {t_ms}, "input_length": {inp}, "output_length": '
                             f'{int(rng.integers(1, 800))}, "hash_ids": {json.dumps(ids)}}}\n')
            block = "".join(parts)
            fh.write(block)
            written += len(block)
            rows += n
    return rows


def run(which: str, src: Path, warm: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", CHILD, which, str(src), str(REPO), str(warm)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{which} failed:\n{proc.stderr}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=50.0, help="size of the generated JSONL (MB)")
    ap.add_argument("--full", action="store_true", help="a 300 MB file")
    add_round_options(ap)
    ap.add_argument("--no-pandas", action="store_true", help="skip pandas (slow and memory-hungry)")
    args = ap.parse_args()
    size_mb = 300.0 if args.full else args.size_mb
    readers = ["kvwear-convert", "kvwear-load", "pyarrow"] + ([] if args.no_pandas else ["pandas"])
    with tempfile.TemporaryDirectory(prefix="kvwear-bench-") as d:
        src = Path(d) / "trace.jsonl"
        t0 = time.perf_counter()
        n_rows = generate(src, size_mb)
        size = src.stat().st_size
        print(f"generated {n_rows:,} rows, {size / 1e6:.0f} MB of Mooncake-format JSONL "
              f"in {time.perf_counter() - t0:.0f} s")
        warm = Path(d) / "warm.jsonl"
        with open(src, "rb") as fh:
            warm.write_bytes(b"".join(fh.readline() for _ in range(2000)))
        runs: dict[str, list[dict[str, float]]] = {w: [] for w in readers}

        def side(which: str) -> Callable[[], SelfTimed]:
            def go() -> SelfTimed:
                r = run(which, src, warm)
                runs[which].append(r)
                return SelfTimed(r["cpu_s"], r["seconds"], r)
            return go

        rounds = rounds_of(args)
        res = interleave({w: side(w) for w in readers}, **rounds)
    warm_runs = rounds.get("warmup", 1)     # the untimed warm-up run(s) come first
    results = {w: {k: statistics.median(x[k] for x in rs[warm_runs:]) for k in rs[0]} for w, rs in runs.items()}
    ref = results["kvwear-convert"]
    parquet = ref["out_bytes"]
    print(f"\nParquet output (kvwear convert): {parquet / 1e6:.1f} MB "
          f"({size / parquet:.1f}x smaller than the JSON text)\n")
    for line in res.table("kvwear-convert", {w: size / 1e6 for w in readers}, "MB"):
        print(line)
    head = f"\n{'reader':<16}{'rows':>12}{'MB/s':>9}{'peak RSS +MB':>14}{'RSS/parquet':>13}{'RSS vs kv':>11}"
    print(head)
    print("-" * len(head))
    for w, r in results.items():
        mbps = size / 1e6 / res.times[w].stat("wall", "median")
        print(f"{w:<16}{int(r['rows']):>12,}{mbps:>9.1f}{r['peak_increase'] / 1e6:>14.0f}"
              f"{r['peak_increase'] / parquet:>13.1f}{r['peak_increase'] / ref['peak_increase']:>10.1f}x")
    print("\n× ref > 1: faster than kvwear convert; RSS vs kv > 1: more memory than kvwear convert (medians of "
          "the timed rounds).\nkvwear validates every field and names file/line/field on error; pyarrow and "
          "pandas do not.")


if __name__ == "__main__":
    main()
