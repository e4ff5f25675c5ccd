"""The run's characterize stage streams RUN/workload/requests.parquet, which must be in arrival
order: a table that is not is refused naming the file and the first row out of order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvwear.errors import KvwearError
from kvwear.harness.pipeline.run import Workload, characterize_stage
from kvwear.harness.pipeline.rundir import RunDir
from kvwear.tables import write_table
from kvwear.workloads.models import get_profile
from kvwear.workloads.schema import REQUESTS
from tests.workloads.test_characterize import make_table


def _stage(tmp_path: Path, times: list[float]) -> RunDir:
    rd = RunDir(tmp_path / "run")
    rd.prepare("a = 1\n", resume=False)
    rows = [{"t": t, "ids": [1, 2 + i]} for i, t in enumerate(times)]
    path = write_table(REQUESTS, make_table(rows), rd.stage_dir("workload") / "requests.parquet")
    rd.mark_done("workload", outputs=(path,))       # as the run's workload stage does before it
    characterize_stage(rd, Workload(path, len(rows), {}), get_profile("kimi-k3"))
    return rd


def test_stage_streams_the_requests_table(tmp_path: Path) -> None:
    rd = _stage(tmp_path, [0.0, 1.0, 1.0, 5.0])
    s = json.loads((rd.stage_dir("workload") / "characterization" / "summary.json").read_text())
    assert s["requests"] == 4 and s["block_hits"] == 3 and s["lru_sampling_rate"] == 1.0


def test_stage_refuses_requests_out_of_arrival_order(tmp_path: Path) -> None:
    with pytest.raises(KvwearError, match=r"requests\.parquet: row 2 arrives before row 1 .* must be in arrival order"):
        _stage(tmp_path, [0.0, 3.0, 1.0])
