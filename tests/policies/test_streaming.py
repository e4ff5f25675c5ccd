"""Streaming the simulate path (issue 16): bounded batches and the backward-pass next-use column
give exactly the results of the in-memory path on the shared traces."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import kvwear.tables
from kvwear.errors import KvwearError
from kvwear.policies.config import SimConfig
from kvwear.policies.sim import _batches, next_use, simulate
from kvwear.tables import iter_table_batches, write_table
from kvwear.workloads.loaders import load_requests
from kvwear.workloads.models import get_profile
from kvwear.workloads.nextuse import iter_with_next_use, write_next_use
from kvwear.workloads.schema import REQUESTS, list_parts


@pytest.fixture(params=["weka", "mooncake"])
def requests_file(request, tmp_path: Path, weka_dir: Path, mooncake_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shared trace as a requests Parquet of many small row groups (the streaming case)."""
    table = load_requests(weka_dir if request.param == "weka" else mooncake_path).table
    if request.param == "mooncake":
        table = table.slice(0, 3000)
    monkeypatch.setattr(kvwear.tables, "ROW_GROUP_BYTES", max(table.nbytes // 7, 1))
    path = write_table(REQUESTS, table, tmp_path / "r.parquet")
    assert pq.ParquetFile(path).metadata.num_row_groups >= 5
    return path


@pytest.mark.parametrize("slice_ids", [1 << 20, 700])
def test_next_use_column_equals_the_in_memory_prepass(requests_file: Path, tmp_path: Path, slice_ids: int) -> None:
    assert write_next_use(requests_file, tmp_path / "nu.parquet", 16, max_values=slice_ids)
    batches = list(iter_with_next_use(requests_file, tmp_path / "nu.parquet", max_values=10_000))
    assert len(batches) > 5
    streamed = np.concatenate([list_parts(b.column("next_use"))[1] for b in batches])
    streamed_refs = np.concatenate([list_parts(b.column("future_refs"))[1] for b in batches])
    whole, refs = next_use(pq.read_table(requests_file), refs=True)
    assert np.array_equal(streamed, whole)
    assert np.array_equal(streamed_refs, refs)
    assert np.array_equal(next_use(pq.read_table(requests_file)), whole)
    assert (whole < (1 << 62)).any()  # the trace does reuse blocks
    assert refs.max() > 1
    # an access has later references exactly when it has a next use
    assert np.array_equal(refs > 0, whole < (1 << 62))


def test_bucketed_next_use_pass_writes_the_same_file(requests_file: Path, tmp_path: Path) -> None:
    """External memory (hash-partitioned keys, one backward pass per bucket, spilled and zipped
    back): byte-identical to the one-bucket pass and equal to the in-memory pre-pass; the spill
    folder beside the output is gone afterwards."""
    from kvwear.workloads.nextuse import _accesses, buckets_for

    n = _accesses(pq.ParquetFile(requests_file).metadata)
    assert buckets_for(n) == 1                         # the shared traces take one bucket
    one, many = tmp_path / "one" / "nu.parquet", tmp_path / "many" / "nu.parquet"
    for p in (one, many):
        p.parent.mkdir()
    assert write_next_use(requests_file, one, 16)
    budget = n * 48 // 5                              # 6 buckets
    assert buckets_for(n, budget) == 6
    assert write_next_use(requests_file, many, 16, max_values=3_000, memory_bytes=budget)
    assert one.read_bytes() == many.read_bytes()
    assert sorted(p.name for p in many.parent.iterdir()) == ["nu.parquet"]
    batches = list(iter_with_next_use(requests_file, many))
    whole, refs = next_use(pq.read_table(requests_file), refs=True)
    assert np.array_equal(np.concatenate([list_parts(b.column("next_use"))[1] for b in batches]), whole)
    assert np.array_equal(np.concatenate([list_parts(b.column("future_refs"))[1] for b in batches]), refs)


def test_a_failed_bucketed_pass_leaves_nothing(requests_file: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that fails in the final zip (here: its reads of the requests run out after the
    buckets were spilled) leaves neither the output nor the spill behind."""
    import kvwear.workloads.nextuse as nextuse

    n_groups = pq.ParquetFile(requests_file).metadata.num_row_groups
    n = nextuse._accesses(pq.ParquetFile(requests_file).metadata)
    budget = n * 48 // 3
    buckets = nextuse.buckets_for(n, budget)
    assert buckets > 1
    real, calls = nextuse._group_keys, [0]

    def failing(*args: object) -> tuple[np.ndarray, np.ndarray]:
        calls[0] += 1
        if calls[0] > buckets * n_groups + 2:           # every bucket's pass, then 2 groups of the zip
            raise OSError("disk went away")
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(nextuse, "_group_keys", failing)
    out = tmp_path / "out" / "nu.parquet"
    out.parent.mkdir()
    with pytest.raises(OSError, match="disk went away"):
        write_next_use(requests_file, out, 16, memory_bytes=budget)
    assert calls[0] == buckets * n_groups + 3 and list(out.parent.iterdir()) == []


def test_the_zip_pass_reads_its_spills_unmapped(requests_file: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The final pass reads the bucket spills from open files, never memory-mapped: a mapped
    stream keeps every page read resident until it closes, so peak RSS grew with the whole spill
    (belady 1.50-1.58x from the 1x to the 4x corpus). /proc/self/maps is read at each row group of
    the zip."""
    import kvwear.workloads.nextuse as nextuse

    n_groups = pq.ParquetFile(requests_file).metadata.num_row_groups
    n = nextuse._accesses(pq.ParquetFile(requests_file).metadata)
    budget = n * 48 // 4
    buckets = nextuse.buckets_for(n, budget)
    assert buckets > 1
    real, calls, mapped = nextuse._group_keys, [0], []

    def looking(*args: object) -> tuple[np.ndarray, np.ndarray]:
        calls[0] += 1
        if calls[0] > buckets * n_groups:               # the zip pass, after every bucket's pass
            mapped.extend(line for line in Path("/proc/self/maps").read_text().splitlines() if ".arrows" in line)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(nextuse, "_group_keys", looking)
    out = tmp_path / "out" / "nu.parquet"
    out.parent.mkdir()
    assert write_next_use(requests_file, out, 16, memory_bytes=budget)
    assert calls[0] == (buckets + 1) * n_groups
    assert mapped == []


def test_future_refs_count_every_later_access() -> None:
    """Brute force on a small table with a key repeated inside one row: the count of later
    accesses (later rows, or later in the same row), in memory and from the backward pass's
    slices (`_resolve` with a map, one row per slice)."""
    from kvwear.workloads.nextuse import _resolve

    ids = [[1, 2, 3], [1, 2], [4, 1, 4], [2, 9], [1]]
    t = REQUESTS.conform(pa.Table.from_pylist([
        dict(request_id=i, session_id=None, parent_id=None, stream_id="main", turn=None, arrival_s=float(i),
             input_tokens=16 * len(r), output_tokens=1, category="default", model=None, block_tokens=16,
             hash_ns=0, hash_ids=r, hashed_tokens=16 * len(r)) for i, r in enumerate(ids)]))
    flat = [(row, k) for row, r in enumerate(ids) for k in r]
    truth = [sum(1 for row2, k2 in flat[i + 1:] if k2 == k) for i, (_, k) in enumerate(flat)]
    _, refs = next_use(t, refs=True)
    assert refs.tolist() == truth
    mk = mr = mf = np.zeros(0, dtype=np.int64)
    pieces = []
    for row in range(len(ids) - 1, -1, -1):
        keys = np.asarray(ids[row], dtype=np.int64)
        _, r, mk, mr, mf = _resolve(keys, np.full(len(keys), row, dtype=np.int64), mk, mr, mf)
        pieces.append(r)
    assert np.concatenate(pieces[::-1]).tolist() == truth


def test_batches_are_bounded_by_hash_ids(requests_file: Path) -> None:
    lens = [len(list_parts(b.column("hash_ids"))[1]) for b in _batches(pq.read_table(requests_file), 5_000)]
    rows = [b.num_rows for b in _batches(pq.read_table(requests_file), 5_000)]
    # at most the bound, unless one row alone holds more
    assert all(n <= 5_000 or r == 1 for n, r in zip(lens, rows, strict=True))
    file_batches = list(iter_table_batches(REQUESTS, requests_file, max_values=20_000))
    assert sum(b.num_rows for b in file_batches) == pq.ParquetFile(requests_file).metadata.num_rows
    per_row = sum(len(list_parts(b.column("hash_ids"))[1]) for b in file_batches) / sum(
        b.num_rows for b in file_batches)
    assert max(b.num_rows for b in file_batches) <= max(1, int(20_000 // per_row))


# gandalf at γ = 0 and the oracle at γ = 0 write on both traces (at γ ≥ 1 they write nothing on
# Mooncake, which would make the comparison of ssd_ops vacuous); both of belady's modes stream
# their future (wear mode's f_x is the future-refs column, issue 16); γ = 64 and `fewest`
# exercise f_x in the promotion rule and the SSD's victim keys
@pytest.mark.parametrize("policy", ["lru", "gandalf:gamma=0", "belady:gamma=0", "belady:mode=min",
                                    "belady:gamma=64", "belady:gamma=4,ssd_evict=fewest"])
def test_streamed_simulation_is_identical(requests_file: Path, tmp_path: Path, policy: str) -> None:
    prof = get_profile("kimi-k3")
    cfg = SimConfig(dram_bytes=16 * 10**9, ssd_bytes=128 * 10**9, kv_bytes_per_token=prof.kv_bytes_per_token,
                    state_bytes=prof.state_bytes)
    whole = simulate(pq.read_table(requests_file), cfg, policy)
    if policy.startswith("belady"):
        from kvwear.policies.belady import BeladyParams, BeladyPolicy

        assert BeladyPolicy.streams_future(BeladyParams())
        assert write_next_use(requests_file, tmp_path / "nu.parquet", 16)
        stream = iter_with_next_use(requests_file, tmp_path / "nu.parquet", max_values=20_000)
    else:
        stream = iter_table_batches(REQUESTS, requests_file, max_values=20_000)
    streamed = simulate(stream, cfg, policy)
    assert streamed.summary == whole.summary
    assert streamed.ssd_ops.equals(whole.ssd_ops)
    assert streamed.requests.equals(whole.requests)
    assert whole.ssd_ops.num_rows > 0


@pytest.mark.parametrize("policy", ["lru", "gandalf:gamma=0"])
def test_per_request_records_stream_to_their_file_in_chunks(requests_file: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    """`simulate_policy` streams per_request.parquet chunk by chunk (here 97 rows a chunk) and
    keeps none of it; the file equals the in-memory path's table (one chunk), and its columns add
    up to the summary's totals."""
    import kvwear.policies.metrics
    from kvwear.harness.pipeline.simulate import parquet_source, simulate_policy
    from kvwear.policies.metrics import SIM_REQUESTS
    from kvwear.policies.schema import SSD_OPS
    from kvwear.tables import read_table

    prof = get_profile("kimi-k3")
    cfg = SimConfig(dram_bytes=16 * 10**9, ssd_bytes=128 * 10**9, kv_bytes_per_token=prof.kv_bytes_per_token,
                    state_bytes=prof.state_bytes)
    whole = simulate(pq.read_table(requests_file), cfg, policy)
    assert whole.requests.num_rows == pq.ParquetFile(requests_file).metadata.num_rows > 2 * 97
    monkeypatch.setattr(kvwear.policies.metrics, "REQUEST_CHUNK", 97)
    out = simulate_policy(parquet_source(requests_file), cfg, policy, tmp_path / "p")
    per_request = tmp_path / "p" / "per_request.parquet"
    assert pq.ParquetFile(per_request).metadata.num_row_groups == -(-whole.requests.num_rows // 97)
    got = read_table(SIM_REQUESTS, per_request)
    assert got.equals(whole.requests)
    assert read_table(SSD_OPS, out.ssd_ops_path).equals(whole.ssd_ops)
    assert out.summary == whole.summary
    s = whole.summary
    for col, total in (("hit_tokens", s.hit_tokens), ("hashed_tokens", s.hashed_tokens),
                       ("recomputed_tokens", s.recomputed_tokens), ("ssd_write_bytes", s.ssd_write_bytes),
                       ("ssd_read_bytes", s.ssd_read_bytes), ("ssd_hit_tokens", s.ssd_hit_tokens)):
        assert pc.sum(got.column(col)).as_py() == total, col
    tiers = got.column("state_hit_tier").to_pylist()
    assert (tiers.count("dram"), tiers.count("ssd")) == (s.state_hits_dram, s.state_hits_ssd)
    # a chunked in-memory run keeps the same table
    assert simulate(pq.read_table(requests_file), cfg, policy).requests.equals(whole.requests)


def test_cli_oracle_on_parquet_streams_and_matches_the_in_memory_path(requests_file: Path,
                                                                      tmp_path: Path) -> None:
    """`kvwear simulate` on a whole requests Parquet takes the next-use column path (and removes
    its file); with --max-requests it takes the in-memory pre-pass; ssd_ops and summaries agree."""
    import json

    from typer.testing import CliRunner

    from kvwear.harness.cli.main import app
    from kvwear.policies.schema import SSD_OPS
    from kvwear.tables import read_table

    raw = tmp_path / "raw.parquet"
    write_table(REQUESTS, pq.read_table(requests_file), raw)  # the same rows, one more file
    args = ["--model", "kimi-k3", "--dram", "16GB", "--ssd", "128GB", "-p", "belady:mode=min"]
    runner = CliRunner()
    a = runner.invoke(app, ["simulate", "--trace", str(requests_file), *args, "-o", str(tmp_path / "a")])
    assert a.exit_code == 0, a.output
    assert not (tmp_path / "a" / ".next_use.parquet").exists()
    # --max-requests keeps the in-memory pre-pass (the future must stop at the limit)
    n = pq.ParquetFile(requests_file).metadata.num_rows
    b = runner.invoke(app, ["simulate", "--trace", str(raw), *args, "--max-requests", str(n),
                            "-o", str(tmp_path / "b")])
    assert b.exit_code == 0, b.output
    label = next(p.name for p in (tmp_path / "a").iterdir() if p.is_dir())
    ops_a = read_table(SSD_OPS, tmp_path / "a" / label / "ssd_ops.parquet")
    ops_b = read_table(SSD_OPS, tmp_path / "b" / label / "ssd_ops.parquet")
    assert ops_a.num_rows > 0 and ops_a.equals(ops_b)
    sa = json.loads((tmp_path / "a" / label / "summary.json").read_text())["summary"]
    sb = json.loads((tmp_path / "b" / label / "summary.json").read_text())["summary"]
    assert sa == sb


def test_run_oracle_stage_streams_and_matches_simulate(tmp_path: Path, weka_dir: Path) -> None:
    """`kvwear run`'s simulate stage gives the oracle its next-use column from the workload's
    Parquet (and removes the file); the ssd_ops equal an in-memory `simulate` of that table."""
    from kvwear.harness.pipeline.config import config_from_mapping
    from kvwear.harness.pipeline.run import run, sim_config
    from kvwear.policies.schema import SSD_OPS
    from kvwear.tables import read_table

    cfg = config_from_mapping({"name": "t", "model": "kimi-k3", "policies": ["belady:mode=min"],
                               "workload": {"trace": str(weka_dir)}, "tiers": {"dram": "16GB", "ssd": "128GB"}})
    out = tmp_path / "r"
    run(cfg, out, replay=False, report=False)
    label = next(p.name for p in (out / "policies").iterdir() if p.is_dir())
    ops = read_table(SSD_OPS, out / "policies" / label / "ssd_ops.parquet")
    assert not (out / "policies" / label / ".next_use.parquet").exists()
    table = pq.read_table(out / "workload" / "requests.parquet")
    whole = simulate(table, sim_config(cfg, get_profile("kimi-k3")), "belady:mode=min")
    assert ops.num_rows > 0 and ops.equals(whole.ssd_ops)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")
def test_the_next_use_pass_is_refused_where_its_files_do_not_fit(tmp_path: Path, weka_dir: Path) -> None:
    """The free-space guard (kvwear.harness.devices.fio.check_host_room) before the oracle's next-use
    file and spill are written: on a 1 MiB tmpfs the simulation is refused with the numbers, and
    leaves no file and no folder."""
    from kvwear.harness.pipeline.simulate import parquet_source, simulate_policy
    from tests.harness.test_host_room import tmpfs

    requests = write_table(REQUESTS, load_requests(weka_dir).table, tmp_path / "r.parquet")
    prof = get_profile("kimi-k3")
    cfg = SimConfig(dram_bytes=16 * 10**9, ssd_bytes=128 * 10**9, kv_bytes_per_token=prof.kv_bytes_per_token,
                    state_bytes=prof.state_bytes)
    with tmpfs(tmp_path / "small", "1m") as small:
        with pytest.raises(KvwearError, match=r"\.next_use\.parquet: refusing to write: the oracle's next-use pass "
                                              r"writes [\d,]+ bytes of this file and its spill \(0 already "
                                              r"allocated\) and its file system has [\d,]+ bytes free"):
            simulate_policy(parquet_source(requests), cfg, "belady", small / "belady")
        # nothing left behind: the refused stage removes the output folder it made
        assert not (small / "belady").exists()


def test_oracle_on_a_raw_trace_streams_its_future(tmp_path: Path, weka_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`kvwear simulate` on a raw Weka directory: the oracle reads its future from the next-use
    file of the temporary requests Parquet (the in-memory pre-pass, `Simulator.set_future`, is
    never called), with the same ssd_ops and summary as on the converted Parquet; the temporary
    Parquet lives as long as the source."""
    import gc

    from kvwear.harness.pipeline.simulate import open_source, simulate_policy
    from kvwear.policies.metrics import SIM_SUMMARY
    from kvwear.policies.schema import SSD_OPS
    from kvwear.policies.sim import Simulator
    from kvwear.tables import read_table
    from kvwear.workloads.loaders import convert_trace

    converted = tmp_path / "weka.parquet"
    convert_trace(weka_dir, converted)

    def no_prepass(self: Simulator, table: pa.Table) -> None:
        raise AssertionError("the in-memory pre-pass ran")

    monkeypatch.setattr(Simulator, "set_future", no_prepass)
    prof = get_profile("kimi-k3")
    cfg = SimConfig(dram_bytes=16 * 10**9, ssd_bytes=128 * 10**9, kv_bytes_per_token=prof.kv_bytes_per_token,
                    state_bytes=prof.state_bytes)
    raw = open_source(weka_dir)
    assert raw.parquet is not None and raw.parquet.is_file()
    a = simulate_policy(raw, cfg, "belady:gamma=0", tmp_path / "a")
    b = simulate_policy(open_source(converted), cfg, "belady:gamma=0", tmp_path / "b")
    assert a.ssd_ops_rows == b.ssd_ops_rows > 0
    assert read_table(SSD_OPS, a.ssd_ops_path).equals(read_table(SSD_OPS, b.ssd_ops_path))
    assert read_table(SIM_SUMMARY, a.dir / "summary.parquet").equals(read_table(SIM_SUMMARY, b.dir / "summary.parquet"))
    tmp_parquet = raw.parquet
    del raw
    gc.collect()
    assert not tmp_parquet.exists()
