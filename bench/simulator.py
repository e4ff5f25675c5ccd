"""Benchmark: kvwear's tiered simulator vs libCacheSim's C LRU on the same chunk-access stream.

Workload: the Mooncake conversation trace (12,031 requests, 512-token blocks) at the simulator's
16-token chunk with the Kimi-K3 profile, DRAM 100 GB + SSD 1 TB (`--dram`, `--ssd`). The work
is the same on both sides: the stream of equivalent chunk accesses (the 16-token chunks the
requests' hashed prefixes cover, Σ ⌈hashed_tokens/16⌉) at the same total capacity. libCacheSim
replays that stream (one access per chunk, `kvwear.policies.flat.flatten_chunks`) through its C
LRU with room for (DRAM + SSD) / chunk bytes chunks — the bytes kvwear's two tiers hold — from an
oracleGeneral file built before timing; kvwear simulates the requests through both tiers at
whatever granularity it works at. Only the simulation is timed on each side (libCacheSim's
`process_trace`, kvwear's `simulate` on the loaded table), not building inputs.

Timing is interleaved, ABAB…: each of `--rounds` rounds (≥ 5) runs every side once, in a fixed
order, so load from the machine's other tenants falls on all sides alike. Per side it prints min
and median CPU seconds (this process's, `time.process_time`) and wall seconds, and the ratio of
each kvwear side's chunk-access rate to libCacheSim's by median CPU time (min in brackets).

Run: .venv/bin/python bench/simulator.py [--policies lru,gandalf] [--requests N] [--rounds 5]
     [--trace PATH] [--model kimi-k3] [--dram BYTES] [--ssd BYTES]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvwear.policies.base import POLICIES  # noqa: E402
from kvwear.policies.flat import flatten_chunks, oracle_general  # noqa: E402
from kvwear.policies.sim import SimConfig, chunks_of, simulate  # noqa: E402
from kvwear.workloads.loaders import load_requests  # noqa: E402
from kvwear.workloads.models import get_profile  # noqa: E402

MIN_ROUNDS = 5


@dataclass
class Side:
    """One contender: a run function (returns a one-line note) and its timings."""

    name: str
    run: Callable[[], str]
    cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    note: str = ""

    def time_once(self) -> None:
        gc.collect()  # garbage of the previous side is not this side's work
        c0, w0 = time.process_time(), time.perf_counter()
        self.note = self.run()
        self.cpu_s.append(time.process_time() - c0)
        self.wall_s.append(time.perf_counter() - w0)


def interleave(sides: list[Side], rounds: int) -> None:
    """ABAB…: every round times each side once, in order."""
    for _ in range(rounds):
        for s in sides:
            s.time_once()


def main() -> None:
    names = POLICIES.names()
    default = ["lru"] + (["gandalf"] if "gandalf" in names else [])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(REPO.parent / "shared/traces/mooncake/conversation_trace.jsonl"))
    ap.add_argument("--policies", default=",".join(default), help="comma-separated policy specs")
    ap.add_argument("--requests", type=int, default=0, help="only the first N requests (0: all)")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS, help=f"interleaved rounds (≥ {MIN_ROUNDS})")
    ap.add_argument("--model", default="kimi-k3")
    ap.add_argument("--dram", type=float, default=100e9, help="DRAM bytes")
    ap.add_argument("--ssd", type=float, default=1e12, help="SSD bytes")
    args = ap.parse_args()
    if args.rounds < MIN_ROUNDS:
        sys.exit(f"--rounds must be ≥ {MIN_ROUNDS}, got {args.rounds}")

    table = load_requests(args.trace).table
    if args.requests:
        table = table.slice(0, args.requests)
    prof = get_profile(args.model)
    cfg = SimConfig(dram_bytes=int(args.dram), ssd_bytes=int(args.ssd),
                    kv_bytes_per_token=prof.kv_bytes_per_token, state_bytes=prof.state_bytes,
                    chunk_tokens=16, record_requests=False, model=args.model)
    chunks = int(chunks_of(table.column("hashed_tokens").to_numpy(), 16).sum())
    capacity = (cfg.dram_bytes + cfg.ssd_bytes) // prof.chunk_bytes(16)
    print(f"trace: {Path(args.trace).name}, {table.num_rows:,} requests, {chunks:,} equivalent "
          f"16-token chunk accesses; model {args.model}; DRAM {args.dram / 1e9:g} GB + SSD "
          f"{args.ssd / 1e12:g} TB = {capacity:,} chunks; {args.rounds} interleaved rounds")

    import libcachesim as lcs

    ids = flatten_chunks(table, 16)
    assert len(ids) == chunks, (len(ids), chunks)
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "trace.oracleGeneral.bin")
        oracle_general(ids).tofile(path)
        del ids

        def run_lcs() -> str:
            reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
            mr, _ = lcs.LRU(capacity).process_trace(reader)
            return f"flat LRU of {capacity:,} chunks, chunk miss ratio {mr:.3f}"

        def kvwear_side(spec: str) -> Callable[[], str]:
            def run() -> str:
                s = simulate(table, cfg, spec).summary
                return (f"tiered DRAM+SSD, token miss ratio {s.token_miss_ratio:.3f}, chunk miss "
                        f"ratio {s.chunk_miss_ratio:.3f}, SSD writes {s.ssd_write_bytes / 1e9:,.1f} GB")
            return run

        sides = [Side("libCacheSim C LRU", run_lcs)]
        sides += [Side(f"kvwear {spec}", kvwear_side(spec)) for spec in args.policies.split(",") if spec]
        interleave(sides, args.rounds)

    ref = sides[0]
    ref_med, ref_min = statistics.median(ref.cpu_s), min(ref.cpu_s)
    print(f"{'side':26s} {'CPU s min':>9s} {'median':>8s} {'wall s min':>10s} {'median':>8s} "
          f"{'chunk acc/s (median CPU)':>24s} {'vs libCacheSim':>15s}  notes")
    for s in sides:
        med, lo = statistics.median(s.cpu_s), min(s.cpu_s)
        ratio = ref_med / med
        print(f"{s.name:26s} {lo:9.3f} {med:8.3f} {min(s.wall_s):10.3f} {statistics.median(s.wall_s):8.3f} "
              f"{chunks / med:24,.0f} {ratio:9.2f}x ({ref_min / lo:.2f}x)  {s.note}")


if __name__ == "__main__":
    main()
