"""Streaming the simulate path (issue 16): bounded batches and the backward-pass next-use column
give exactly the results of the in-memory path on the shared traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import kvwear.tables
from kvwear.tables import iter_table_batches, write_table
from policies.sim import SimConfig, _batches, next_use, simulate
from workloads.loaders import load_requests
from workloads.models import get_profile
from workloads.nextuse import iter_with_next_use, write_next_use
from workloads.schema import REQUESTS, list_parts


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
    whole = next_use(pq.read_table(requests_file))
    assert np.array_equal(streamed, whole)
    assert (whole < (1 << 62)).any()  # the trace does reuse blocks


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
# Mooncake, which would make the comparison of ssd_ops vacuous); belady's wear mode needs the
# whole table (f_x), so its streamed input is held in memory; MIN streams its next-use column
@pytest.mark.parametrize("policy", ["lru", "gandalf:gamma=0", "belady:gamma=0", "belady:mode=min"])
def test_streamed_simulation_is_identical(requests_file: Path, tmp_path: Path, policy: str) -> None:
    prof = get_profile("kimi-k3")
    cfg = SimConfig(dram_bytes=16 * 10**9, ssd_bytes=128 * 10**9, kv_bytes_per_token=prof.kv_bytes_per_token,
                    state_bytes=prof.state_bytes)
    whole = simulate(pq.read_table(requests_file), cfg, policy)
    if policy.startswith("belady"):
        assert write_next_use(requests_file, tmp_path / "nu.parquet", 16)
        stream = iter_with_next_use(requests_file, tmp_path / "nu.parquet", max_values=20_000)
    else:
        stream = iter_table_batches(REQUESTS, requests_file, max_values=20_000)
    streamed = simulate(stream, cfg, policy)
    assert streamed.summary == whole.summary
    assert streamed.ssd_ops.equals(whole.ssd_ops)
    assert streamed.requests.equals(whole.requests)
    assert whole.ssd_ops.num_rows > 0


def test_cli_oracle_on_parquet_streams_and_matches_the_in_memory_path(requests_file: Path,
                                                                      tmp_path: Path) -> None:
    """`kvwear simulate` on a whole requests Parquet takes the next-use column path (and removes
    its file); with --max-requests it takes the in-memory pre-pass; ssd_ops and summaries agree."""
    import json

    from typer.testing import CliRunner

    from harness.cli import app
    from kvwear.tables import read_table
    from policies.schema import SSD_OPS

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
    from harness.config import config_from_mapping
    from harness.run import run, sim_config
    from kvwear.tables import read_table
    from policies.schema import SSD_OPS

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
