"""The run's workload stage streams the trace (issue #16) and writes the requests Parquet the
in-memory path (`load_requests`, `sample_groups`, one `write_table`) writes: Arrow-identical
tables with the same schema and metadata, on the shared Weka set (sessions) and Mooncake (no
sessions: prefix groups), whole and sampled."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kvwear.errors import KvwearError
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.run import workload_stage
from kvwear.harness.pipeline.rundir import RunDir
from kvwear.tables import write_table
from kvwear.workloads.loaders import load_requests
from kvwear.workloads.sampling import sample_groups
from kvwear.workloads.schema import REQUESTS


def _stage(trace: Path, fmt: str, fraction: float, seed: int, out: Path) -> Path:
    cfg = config_from_mapping({"name": "w", "policies": ["lru"], "workload": {
        "trace": str(trace), "format": fmt, "sample_fraction": fraction, "seed": seed}})
    rd = RunDir(out)
    rd.create()
    rd.prepare(cfg.to_toml(), False)
    w = workload_stage(cfg, rd)
    assert w.rows == pq.ParquetFile(w.path).metadata.num_rows
    assert [p.name for p in w.path.parent.iterdir()] == ["requests.parquet"]      # no temporary left
    return w.path


@pytest.mark.parametrize("which,fmt,fraction", [("weka", "weka", 1.0), ("weka", "weka", 0.5),
                                                ("mooncake", "mooncake", 1.0), ("mooncake", "mooncake", 0.3)])
def test_streamed_workload_equals_the_in_memory_one(which: str, fmt: str, fraction: float, weka_dir: Path,
                                                    mooncake_path: Path, tmp_path: Path) -> None:
    trace = weka_dir if which == "weka" else mooncake_path
    got = _stage(trace, fmt, fraction, 11, tmp_path / "run")
    table = sample_groups(load_requests(trace, fmt).table, fraction, 11)
    ref = write_table(REQUESTS, table, tmp_path / "ref.parquet")
    a, b = pq.read_table(got), pq.read_table(ref)
    assert 0 < a.num_rows <= table.num_rows
    if fraction < 1:
        assert a.num_rows < load_requests(trace, fmt).table.num_rows
    assert a.schema.equals(b.schema, check_metadata=True)
    assert a.equals(b)


def test_a_sample_that_keeps_nothing_is_refused_and_leaves_no_file(mooncake_path: Path, tmp_path: Path) -> None:
    with pytest.raises(KvwearError, match="no requests"):
        _stage(mooncake_path, "mooncake", 1e-9, 1, tmp_path / "run")
    assert not list((tmp_path / "run" / "workload").iterdir())
