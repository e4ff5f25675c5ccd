"""Benchmark: kvwear's tiered simulator vs libCacheSim's C LRU on the same chunk-access stream.

Workload: the Mooncake conversation trace (12,031 requests, 512-token blocks) at the simulator's
16-token chunk with the Kimi-K3 profile, DRAM 100 GB + SSD 1 TB (`--dram`, `--ssd`). The work
is the same on both sides: the stream of equivalent chunk accesses (the 16-token chunks the
requests' hashed prefixes cover, Σ ⌈hashed_tokens/16⌉) at the same total capacity. libCacheSim
replays that stream (one access per chunk, `kvwear.policies.flat.flatten_chunks`) through its C
LRU with room for (DRAM + SSD) / chunk bytes chunks — the bytes kvwear's two tiers hold — from an
oracleGeneral file built before timing; kvwear simulates the requests through both tiers at
whatever granularity it works at. Only the simulation is timed on each side (libCacheSim's
`process_trace`, kvwear's `simulate` on the loaded table), not building inputs, and not freeing
what the call made: each side's result (libCacheSim's cache and reader, kvwear's simulation) is
kept past its clock and released before the next side, untimed, with a full collection and both
allocators' trims (pyarrow's pool, glibc's `malloc_trim`). Without the trim, the side timed right
after libCacheSim paid ~0.4–0.6 CPU s more (kvwear lru 0.84 s instead of 0.41 s, load 0.5): glibc
keeps the ~2.5 M small chunks of libCacheSim's freed cache in its fast bins and consolidates them
at the next side's allocations; `malloc_trim(0)` consolidates them before the clock starts.

Timing is interleaved (bench/_interleave.py): `--rounds` rounds (≥ 5) after an untimed warm-up,
every side once per round, the order rotating each round, so load from the machine's other
tenants falls on all sides alike and no side always runs after the same one. Per side it prints
min and median CPU seconds (this process's) and wall seconds, its speed over libCacheSim by CPU
and by wall time (min and median), and its chunk-access rate at the median CPU time; then, per
kvwear side, the ratio to libCacheSim and what the side's last run reported. `--smoke`: one
round, no warm-up, to check that the bench runs (its ratios are one sample).

Run: .venv/bin/python bench/simulator.py [--policies lru,gandalf] [--requests N] [--rounds 5] [--smoke]
     [--trace PATH] [--model kimi-k3] [--dram BYTES] [--ssd BYTES]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _interleave import Side, add_round_options, interleave, rounds_of

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvwear.memory import release_freed_memory  # noqa: E402
from kvwear.policies.base import POLICIES  # noqa: E402
from kvwear.policies.flat import flatten_chunks, oracle_general  # noqa: E402
from kvwear.policies.sim import SimConfig, chunks_of, simulate  # noqa: E402
from kvwear.workloads.loaders import load_requests  # noqa: E402
from kvwear.workloads.models import get_profile  # noqa: E402


def main() -> None:
    names = POLICIES.names()
    default = ["lru"] + (["gandalf"] if "gandalf" in names else [])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(REPO.parent / "shared/traces/mooncake/conversation_trace.jsonl"))
    ap.add_argument("--policies", default=",".join(default), help="comma-separated policy specs")
    ap.add_argument("--requests", type=int, default=0, help="only the first N requests (0: all)")
    add_round_options(ap)
    ap.add_argument("--model", default="kimi-k3")
    ap.add_argument("--dram", type=float, default=100e9, help="DRAM bytes")
    ap.add_argument("--ssd", type=float, default=1e12, help="SSD bytes")
    args = ap.parse_args()
    if args.smoke:
        args.rounds = 1        # what rounds_of() times: the printed count says so

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

        # the last timed call's result: held past the side's clock, so that freeing it (a return
        # would, inside the call) is charged to no side
        held: list[object] = []

        def release() -> None:
            # untimed, before every side: the previous side's prefix tree is cyclic garbage (a
            # full collection), and the trims hand its freed memory back (see the docstring)
            held.clear()
            release_freed_memory(full_collect=True)

        def run_lcs() -> str:
            reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
            cache = lcs.LRU(capacity)
            mr, _ = cache.process_trace(reader)
            held.extend((cache, reader))
            return f"flat LRU of {capacity:,} chunks, chunk miss ratio {mr:.3f}"

        def kvwear_side(spec: str) -> Callable[[], str]:
            def run() -> str:
                out = simulate(table, cfg, spec)
                held.append(out)
                s = out.summary
                return (f"tiered DRAM+SSD, token miss ratio {s.token_miss_ratio:.3f}, chunk miss "
                        f"ratio {s.chunk_miss_ratio:.3f}, SSD writes {s.ssd_write_bytes / 1e9:,.1f} GB")
            return run

        ref = "libCacheSim C LRU"
        sides = {ref: Side(run_lcs, before=release)}
        sides.update({f"kvwear {spec}": Side(kvwear_side(spec), before=release)
                      for spec in args.policies.split(",") if spec})
        res = interleave(sides, **rounds_of(args))
        release()

    for line in res.table(ref, {name: chunks for name in sides}, "chunk acc"):
        print(line)
    for name in sides:
        ratio = "" if name == ref else f"vs libCacheSim {res.ratio(name, ref).text()}; "
        print(f"{name}: {ratio}{res.last[name]}")


if __name__ == "__main__":
    main()
