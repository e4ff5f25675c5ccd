"""The streamed characterization writes exactly what the in-memory analysis computes.

`workloads.characterize.analyze` (per-access arrays) is the reference; every table the streamed
engine writes and its summary.json must equal it, value for value, on the shared traces, a
synthetic trace with sessions and categories, and a table mixing block sizes and namespaces —
with tiny batches, tiny initial capacities and sweep chunks, so that table growth, rehashing, LRU
renumbering and chunk edges all happen many times.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvwear.errors import KvwearError
from tests.workloads.test_characterize import make_table
from workloads import characterize_stream as cs
from workloads.characterize import TABLES, analyze, weighted_stats
from workloads.loaders import load_requests
from workloads.models import get_profile
from workloads.schema import REQUESTS


def _sorted(table: pa.Table) -> pa.Table:
    return table.take(pa.array(np.argsort(table.column("arrival_s").to_numpy(), kind="stable")))


def assert_stream_equals_memory(table: pa.Table, model: str, out: Path, batch_rows: int,
                                monkeypatch: pytest.MonkeyPatch, sweep_chunk: int = 997) -> None:
    profile = get_profile(model)
    ref = analyze(table, profile)
    monkeypatch.setattr(cs, "INITIAL_BLOCKS", 8)
    monkeypatch.setattr(cs, "SWEEP_CHUNK", sweep_chunk)
    batches = REQUESTS.conform(_sorted(table)).to_batches(max_chunksize=batch_rows)
    res, written = cs.characterize_batches(batches, profile, out)
    assert {p.name for p in written} == {f"{n}.parquet" for n, _, _ in TABLES} | {"summary.json"}
    for name, spec, attr in TABLES:
        df = getattr(ref, attr)
        want = spec.conform(pa.Table.from_pandas(df, preserve_index=False))
        got = pq.read_table(out / f"{name}.parquet")
        assert got.schema.equals(want.schema), name
        assert got.equals(want), name
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(ref.summary()))
    assert res.lifespans is None and res.capacity_bytes == ref.capacity_bytes


def test_weka_traces_stream_equals_memory(tmp_path: Path, weka_dir: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    table = load_requests(weka_dir).table
    assert table.column("hash_ns").to_numpy().max() == 5  # six namespaces
    assert_stream_equals_memory(table, "kimi-k3", tmp_path / "c", 37, monkeypatch)


def test_mooncake_hybrid_stream_equals_memory(tmp_path: Path, mooncake_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    table = load_requests(mooncake_path).table
    assert_stream_equals_memory(table, "qwen3.5-27b", tmp_path / "c", 501, monkeypatch, 1 << 13)


def test_sessions_categories_and_mixed_block_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workloads.synthetic import generate

    assert_stream_equals_memory(generate("trace-a", seed=3), "llama3-70b", tmp_path / "a", 64, monkeypatch)
    rng = np.random.default_rng(5)
    rows: list[dict[str, Any]] = []
    for i in range(300):  # repeated ids inside a request, two namespaces, 4- and 8-token blocks, ties
        n = int(rng.integers(0, 12))
        rows.append({"t": float(rng.integers(0, 50)), "ids": rng.integers(0, 40, n).tolist(),
                     "ns": int(rng.integers(0, 2)), "block_tokens": 4 if i % 3 else 8,
                     "cat": "AB"[i % 2], "session": f"s{i % 7}" if i % 5 else None,
                     "hashed": int(rng.integers(0, 4 * n + 3))})
    assert_stream_equals_memory(make_table(rows), "kimi-k3", tmp_path / "m", 7, monkeypatch)


def test_unsorted_batches_and_empty_input_are_refused(tmp_path: Path) -> None:
    rows = [{"t": 2.0, "ids": [1]}, {"t": 1.0, "ids": [1]}]
    with pytest.raises(KvwearError, match="not sorted by arrival_s"):
        cs.characterize_batches(make_table(rows).to_batches(max_chunksize=1), get_profile("kimi-k3"), tmp_path)
    with pytest.raises(KvwearError, match="empty"):
        cs.characterize_batches([], get_profile("kimi-k3"), tmp_path)


def test_weighted_stats_equal_numpy_on_the_expanded_sample() -> None:
    rng = np.random.default_rng(0)
    qs = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
    for n in (1, 2, 3, 10, 1001):
        x = np.round(rng.exponential(10.0, n), 1)
        v, w = np.unique(x, return_counts=True)
        k, mean, got = weighted_stats(v[::-1], w[::-1], qs)
        assert k == n and np.array_equal(got, np.quantile(x, qs))
        assert mean == pytest.approx(float(x.mean()), rel=1e-13)
        assert weighted_stats(x, np.ones(n, np.int64), qs)[1] == mean  # exact sum: any grouping
