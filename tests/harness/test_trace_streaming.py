"""`kvwear trace inspect` streams a requests Parquet batch by batch (issue 16) and reports what
one pass over the whole table reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import kvwear.tables
from harness.commands.trace_io import _Distinct, trace_summary
from kvwear.tables import iter_table_batches, write_table
from workloads.loaders import load_requests
from workloads.schema import REQUESTS, list_parts


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
