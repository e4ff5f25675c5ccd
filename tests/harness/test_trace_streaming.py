"""`kvwear trace inspect` streams a requests Parquet batch by batch (issue 16) and reports what
one pass over the whole table reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import kvwear.tables
from kvwear.harness.cli.trace_io import _Distinct, trace_summary
from kvwear.tables import iter_table_batches, write_table
from kvwear.workloads.loaders import load_requests
from kvwear.workloads.schema import REQUESTS, list_parts


@pytest.mark.parametrize("trace", ["weka", "mooncake"])
def test_streamed_summary_equals_the_whole_table(trace: str, tmp_path: Path, weka_dir: Path,
                                                 mooncake_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = load_requests(weka_dir if trace == "weka" else mooncake_path).table
    monkeypatch.setattr(kvwear.tables, "ROW_GROUP_BYTES", max(table.nbytes // 9, 1))
    monkeypatch.setattr(_Distinct, "MIN_MERGE", 100)  # merge distinct ids as the stream goes
    path = write_table(REQUESTS, table, tmp_path / "r.parquet")
    batches = list(iter_table_batches(REQUESTS, path, max_values=3_000))
    assert len(batches) > 8
    streamed = trace_summary(iter(batches))
    assert streamed == trace_summary(pq.read_table(path))
    # the distinct block keys, counted independently over every access at once
    offs, flat = list_parts(table.column("hash_ids"))
    ns = np.repeat(np.asarray(table.column("hash_ns").to_numpy()), np.diff(offs))
    assert streamed["unique_blocks"] == len(np.unique(np.stack([ns, flat]), axis=1).T)
    assert streamed["blocks"] == len(flat) > streamed["unique_blocks"]
    assert streamed["requests"] == table.num_rows
    assert streamed["input_tokens"]["p90"] == float(np.percentile(table.column("input_tokens").to_numpy(), 90))


def test_convert_sorts_out_of_order_input_through_buckets(tmp_path: Path, weka_dir: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Weka files each start at t = 0, so the converted rows need the external sort; with tiny
    row groups it runs through many buckets and gives the in-memory sorted table exactly."""
    from kvwear.workloads.loaders import convert_trace

    whole = load_requests(weka_dir).table
    monkeypatch.setattr(kvwear.tables, "ROW_GROUP_BYTES", max(whole.nbytes // 11, 1))
    res = convert_trace(weka_dir, tmp_path / "r.parquet")
    assert res.resorted
    meta = pq.ParquetFile(res.path).metadata
    assert meta.num_row_groups >= 8
    got = pq.read_table(res.path)
    assert got.equals(REQUESTS.conform(whole))
    assert list(tmp_path.iterdir()) == [res.path]  # the buckets are gone


@pytest.mark.parametrize("trace", ["weka", "mooncake"])
def test_distinct_count_pass_holds_at_most_its_budget(trace: str, weka_dir: Path, mooncake_path: Path) -> None:
    """The first pass of the distinct count holds at most `max_keys` ids, held and pending
    together, after every batch (pending ids used to be uncounted and grew with the trace), and
    the partitioned count stays exact."""
    from kvwear.harness.cli.trace_io import _block_keys, count_distinct

    table = load_requests(weka_dir if trace == "weka" else mooncake_path).table
    batches = table.to_batches(max_chunksize=23)
    offs, flat = list_parts(table.column("hash_ids"))
    ns = np.repeat(np.asarray(table.column("hash_ns").to_numpy()), np.diff(offs))
    exact = len(np.unique(np.stack([ns, flat]), axis=1).T)
    max_keys = exact // 5
    d = _Distinct(max_keys=max_keys)
    for b in batches:
        d.add(*_block_keys(b))
        assert d.held + d.pending_total <= max_keys
    assert d.partitions >= 8
    assert count_distinct(d, lambda: batches) == exact
