"""`sort_file_by_arrival`, the bounded-memory distribution sort behind `trace convert`, on real
traces dealt out of order into many buckets: the stable in-memory sort's result, nothing left
behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear import tables
from kvwear.tables import read_table, write_table
from kvwear.workloads.loaders import load_requests
from kvwear.workloads.loaders.pipeline import sort_file_by_arrival
from kvwear.workloads.schema import REQUESTS


@pytest.mark.parametrize("trace", ["weka", "mooncake"])
def test_shuffled_trace_sorts_to_the_stable_in_memory_order(tmp_path: Path, weka_dir: Path, mooncake_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, trace: str) -> None:
    table = load_requests(weka_dir if trace == "weka" else mooncake_path).table
    # coarse arrival times so that ties are many (the sort must keep the file's order among them)
    coarse = pa.array(np.floor(table.column("arrival_s").to_numpy() / 60.0) * 60.0)
    table = table.set_column(table.schema.get_field_index("arrival_s"), "arrival_s", coarse)
    shuffled = table.take(pa.array(np.random.default_rng(7).permutation(table.num_rows)))
    path = tmp_path / "requests.parquet"
    # small row groups and buckets: many of each, every bucket fed by several row groups
    monkeypatch.setattr(tables, "ROW_GROUP_BYTES", 64 << 10)
    write_table(REQUESTS, shuffled, path)
    sort_file_by_arrival(path)
    got = read_table(REQUESTS, path)
    want = shuffled.take(pa.array(np.argsort(shuffled.column("arrival_s").to_numpy(), kind="stable")))
    assert got.equals(REQUESTS.conform(want))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.parquet"]   # no bucket folder left
