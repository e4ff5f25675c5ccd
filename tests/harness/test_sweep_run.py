"""Sweeps for real: a local pool, resume, a failing point, and a Dask LocalCluster that loses a
worker mid-sweep (every point must still be present exactly once)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kvwear.errors import InputError, KvwearError
from kvwear.harness.pipeline.sweep import ResultsStore, plan_sweep, run_sweep, sweep_points_table
from kvwear.reports.sweep_report import build_sweep_report


def _sweep(policies: list[str], **grid: object) -> dict:
    return {
        "base": {"name": "t", "model": "kimi-k3",
                 "workload": {"generator": "multi-round", "params": {"sessions": 4, "turns": 4}, "seed": 2},
                 "tiers": {"dram": "1GB", "ssd": "8GB"}},
        "grid": {"policies": policies, **grid},
    }


def test_local_sweep_resume_and_failure(tmp_path: Path) -> None:
    # An unknown policy parameter is refused when the grid is planned (it used to fail at its
    # points only); a point fails when it runs when its SSD tier cannot hold one object.
    with pytest.raises(InputError, match=r"grid\.policies"):
        plan_sweep(_sweep(["lru", "fifo:nosuch=1"]))
    plan = plan_sweep(_sweep(["lru", "lru-k:k=[1,2,3]", "fifo"],
                             capacities=[{"dram": "1GB", "ssd": "8GB"}, {"dram": "2GB", "ssd": "7GB"},
                                         {"dram": "1GB", "ssd": "100kB"}]))
    assert len(plan.points) == 3 * 5
    seen = []
    prog = run_sweep(plan, tmp_path, jobs=2, on_progress=lambda p: seen.append((p.done, p.failed)))
    assert prog.done == 10 and prog.failed == 5          # the tiny tier fails at its points only
    store = ResultsStore(tmp_path)
    df = store.read()
    assert len(df) == 10 and df["point_key"].is_unique
    errs = store.read_errors()
    assert len(errs) == 5 and all("tiers.ssd" in e["error"] for e in errs)
    assert seen[-1] == (10, 5)
    # Resume: nothing finished is recomputed.
    mtimes = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "results").iterdir()}
    again = run_sweep(plan, tmp_path, jobs=1)
    assert again.skipped == 15 and again.done == 0
    assert mtimes == {p.name: p.stat().st_mtime_ns for p in (tmp_path / "results").iterdir()}
    status = sweep_points_table(tmp_path)["status"].value_counts().to_dict()
    assert status == {"done": 10, "failed": 5}
    files = build_sweep_report(tmp_path)
    assert files.figures["lifetime_vs_miss"] is not None and files.figures["capacity_ratio"] is not None
    assert "Failed points" in files.html.read_text()


@pytest.mark.slow
def test_dask_cluster_survives_a_killed_worker(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    plan = plan_sweep(_sweep(["lru", "fifo", "type-aware", "write-through", "lru-k:k=[1,2,3,4]"],
                             dram=["1GB", "2GB"]))
    n = len(plan.points)
    assert n == 16
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        pids = client.run(os.getpid)
        victim = sorted(pids.values())[0]
        killed = threading.Event()

        def kill_when_started(p) -> None:   # progress callback: kill one worker after the first results
            if not killed.is_set() and p.done >= 2:
                os.kill(victim, signal.SIGKILL)
                killed.set()

        prog = run_sweep(plan, tmp_path, client=client, on_progress=kill_when_started)
        assert killed.is_set()
    assert prog.done == n and prog.failed == 0
    files = sorted((tmp_path / "results").glob("*.parquet"))
    assert len(files) == n
    keys = [pq.read_table(f).column("point_key")[0].as_py() for f in files]
    assert sorted(keys) == sorted(p.key for p in plan.points)       # every point exactly once
    assert not list((tmp_path / "results").glob(".*"))               # no partial files


def test_resume_refuses_another_replay_setting(tmp_path: Path) -> None:
    """Point keys hash the config only: a no-replay store must not pass for a replayed sweep."""
    data = _sweep(["lru"])
    run_sweep(plan_sweep(data), tmp_path)
    with pytest.raises(KvwearError, match="replay = False"):
        run_sweep(plan_sweep({**data, "sweep": {"replay": True}}), tmp_path)
    assert ResultsStore(tmp_path).read()["waf_measured"].isna().all()      # the no-replay rows stayed
