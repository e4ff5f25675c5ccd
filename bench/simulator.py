"""Benchmark: kvwear's tiered simulator vs libCacheSim's C LRU, in equivalent chunk accesses/s.

Workload: the Mooncake conversation trace (12,031 requests, 512-token blocks) at the simulator's
16-token chunk with the Kimi-K3 profile, DRAM 100 GB + SSD 1 TB. Equivalent chunk accesses =
the 16-token chunks covered by the requests' hashed prefixes (Σ ⌈hashed_tokens/16⌉), whatever the
granularity each simulator works at. libCacheSim replays the same flattened chunk sequence (one
access per chunk, `kvwear.policies.flat.flatten_chunks`) through its C LRU from an oracleGeneral file;
only its `process_trace` is timed, not building or writing its input. Each measurement is the
best of --repeat runs (the machine is shared). Prints the ratio and kvwear's peak memory.

Run: .venv/bin/python bench/simulator.py [--policies lru,gandalf] [--requests N] [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvwear.policies.base import POLICIES  # noqa: E402
from kvwear.policies.flat import flatten_chunks, oracle_general  # noqa: E402
from kvwear.policies.sim import SimConfig, chunks_of, simulate  # noqa: E402
from kvwear.workloads.loaders import load_requests  # noqa: E402
from kvwear.workloads.models import get_profile  # noqa: E402


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def main() -> None:
    names = POLICIES.names()
    default = ["lru"] + (["gandalf"] if "gandalf" in names else [])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(REPO.parent / "shared/traces/mooncake/conversation_trace.jsonl"))
    ap.add_argument("--policies", default=",".join(default), help="comma-separated policy specs")
    ap.add_argument("--requests", type=int, default=0, help="only the first N requests (0: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dram", type=float, default=100e9)
    ap.add_argument("--ssd", type=float, default=1e12)
    args = ap.parse_args()

    table = load_requests(args.trace).table
    if args.requests:
        table = table.slice(0, args.requests)
    prof = get_profile("kimi-k3")
    cfg = SimConfig(dram_bytes=int(args.dram), ssd_bytes=int(args.ssd),
                    kv_bytes_per_token=prof.kv_bytes_per_token, state_bytes=prof.state_bytes,
                    chunk_tokens=16)
    chunks = int(chunks_of(table.column("hashed_tokens").to_numpy(), 16).sum())
    print(f"trace: {Path(args.trace).name}, {table.num_rows:,} requests, {chunks:,} equivalent "
          f"16-token chunk accesses; model kimi-k3; DRAM {args.dram / 1e9:g} GB, SSD {args.ssd / 1e12:g} TB")

    rss0 = _rss_mib()
    rows = []
    for spec in args.policies.split(","):
        best = float("inf")
        res = None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            res = simulate(table, cfg, spec)
            best = min(best, time.perf_counter() - t0)
        assert res is not None
        rows.append((spec, best, res.summary.token_miss_ratio, res.ssd_ops.num_rows))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB

    import libcachesim as lcs

    ids = flatten_chunks(table, 16)
    assert len(ids) == chunks
    capacity = int(args.dram) // prof.chunk_bytes(16)
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "mooncake.oracleGeneral.bin")
        oracle_general(ids).tofile(path)
        lcs_best = float("inf")
        mr = 0.0
        for _ in range(args.repeat):
            reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
            cache = lcs.LRU(capacity)
            t0 = time.perf_counter()
            mr, _ = cache.process_trace(reader)
            lcs_best = min(lcs_best, time.perf_counter() - t0)
    lcs_rate = chunks / lcs_best

    print(f"{'simulator':34s} {'seconds':>8s} {'chunk acc/s':>14s} {'vs libCacheSim':>15s}  notes")
    print(f"{'libCacheSim C LRU (flat chunks)':34s} {lcs_best:8.3f} {lcs_rate:14,.0f} {1.0:14.2f}x  "
          f"capacity {capacity:,} chunks, miss ratio {mr:.3f}")
    for spec, secs, miss, nops in rows:
        rate = chunks / secs
        print(f"{'kvwear ' + spec:34s} {secs:8.3f} {rate:14,.0f} {rate / lcs_rate:14.2f}x  "
              f"tiered DRAM+SSD, token miss ratio {miss:.3f}, {nops:,} ssd_ops rows")
    print(f"kvwear memory: RSS {rss0:,.0f} MiB with the trace loaded; peak RSS {peak:,.0f} MiB "
          f"after the kvwear runs (before libCacheSim's input is built)")


if __name__ == "__main__":
    main()
