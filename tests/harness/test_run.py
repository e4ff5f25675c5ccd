"""`kvwear run` end to end on the embedded default device: byte identities, resume, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kvwear.errors import KvwearError
from kvwear.harness.cli.main import app
from kvwear.harness.devices.measurement import DeviceMeasurement
from kvwear.harness.estimate.estimator import Estimate, PlanRecord
from kvwear.harness.estimate.waf_model import REGIME_ERRORS
from kvwear.harness.pipeline.config import RunConfig, config_from_mapping
from kvwear.harness.pipeline.run import run
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.policies.schema import SSD_OPS
from kvwear.tables import read_table
from kvwear.workloads.sampling import sample_groups
from kvwear.workloads.synthetic import generate

SMALL = {
    "name": "t", "model": "kimi-k3", "policies": ["lru", "type-aware"],
    "workload": {"generator": "multi-round", "params": {"sessions": 6, "turns": 6}, "seed": 3},
    "tiers": {"dram": "2GB", "ssd": "12GB"},
}


def _cfg(**over: object) -> RunConfig:
    d = json.loads(json.dumps(SMALL))
    d.update(over)
    return config_from_mapping(d)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "r"
    run(_cfg(), out)
    return out


def _ops_bytes(table, op: str, col: str) -> np.ndarray:
    m = pc.equal(pc.cast(table.column("op"), "string"), op)
    return table.filter(m).column(col).to_numpy()


@pytest.mark.parametrize("label", ["lru", "type-aware"])
def test_every_byte_accounted(small_run: Path, label: str) -> None:
    ssd_ops = read_table(SSD_OPS, small_run / "policies" / label / "ssd_ops.parquet")
    block_ops = read_table(BLOCK_OPS, small_run / "plan" / label / "block_ops.parquet")
    summary = json.loads((small_run / "policies" / label / "summary.json").read_text())["summary"]
    plan = PlanRecord.load(small_run / "plan" / label / "plan.json")
    device = DeviceMeasurement.load(small_run / "device" / label / "result.json")
    obj = _ops_bytes(ssd_ops, "write", "bytes")
    assert obj.sum() == summary["ssd_write_bytes"] == plan.counts.object_write_bytes > 0
    # Stated alignment: every object occupies ceil(bytes / 4096) · 4096 bytes on the device.
    aligned = int((-(-obj // 4096) * 4096).sum())
    assert aligned == plan.counts.aligned_write_bytes == int(_ops_bytes(block_ops, "write", "length_bytes").sum())
    # What the emulated drive received is exactly the plan.
    r = device.replay
    assert r.write_bytes == aligned
    assert r.details["counters"]["host_pages"] * 4096 == aligned
    assert r.media is not None and r.media.host_bytes == aligned and r.media.media_bytes >= aligned
    checks = Estimate.load(small_run / "estimate" / label / "crossval.json").checks
    host = [c for c in checks if c.name == "host bytes"]
    assert host and all(c.passed and c.rel_error == 0 and c.kind == "accounting" for c in host)
    # Byte identities are accounting checks; the workload model's WAF and lifetime are the model
    # checks (issue 13); the uniform-random WAF and Gandalf's WAF 1 are labelled references.
    assert {c.name for c in checks if c.kind == "model"} == {"WAF (workload model)", "lifetime days (workload model)"}
    assert {c.name for c in checks if c.kind == "reference"} == {
        "WAF (uniform reference)", "lifetime days (WAF 1)", "lifetime days (uniform reference WAF)"}
    assert all(c.passed for c in checks if c.kind == "model")
    assert all(c.policy == label for c in checks)
    # the plan's death summary counts exactly the plan's written pages
    assert plan.death_summary.host_pages * 4096 == aligned


@pytest.mark.parametrize("label", ["lru", "type-aware"])
def test_the_wafs_timeline_ends_at_the_devices_own_counts(small_run: Path, label: str) -> None:
    """The WAF-over-the-replay figure's data (device/LABEL/timeline.parquet) is cumulative and ends
    at what the drive counted for the whole replay: host bytes = the plan's, NAND bytes = the FTL's."""
    device = DeviceMeasurement.load(small_run / "device" / label / "result.json")
    tl = pq.read_table(small_run / "device" / label / "timeline.parquet").to_pandas()
    assert device.replay.media is not None
    assert (np.diff(tl["host_bytes"]) >= 0).all() and (np.diff(tl["nand_bytes"]) >= 0).all()
    assert tl["host_bytes"].iloc[-1] == device.replay.media.host_bytes == device.replay.write_bytes
    assert tl["nand_bytes"].iloc[-1] == device.replay.media.media_bytes
    assert tl["waf_cumulative"].iloc[-1] == pytest.approx(device.replay.waf)


def test_results_and_report(small_run: Path) -> None:
    res = pq.read_table(small_run / "results.parquet").to_pandas()
    assert res["policy"].tolist() == ["lru", "type-aware"]
    lru, ta = res.iloc[0], res.iloc[1]
    assert lru["linear_share_of_ssd_write_bytes"] > 0.5        # the seed finding: states dominate LRU writes
    assert ta["ssd_write_bytes_linear"] == 0                     # type-aware keeps states out of the SSD
    assert (res["lifetime_days_waf1"] > 0).all()
    html = (small_run / "report" / "report.html").read_text()
    assert "type-aware" in html and "Cross-validation" in html
    assert "<h3>Byte accounting</h3>" in html and "<h3>Models against measurement</h3>" in html
    assert re.search(r"byte accounting: (\d+) of \1 checks within tolerance; models against measurement: "
                     r"\d+ of \d+ checks within tolerance\.", html)
    assert (res["accounting_checks_passed"] == res["accounting_checks_total"]).all()
    # the workload model's regime and the error the bench measured there (waf_model.REGIME_ERRORS)
    assert res["waf_workload_regime"].notna().all()
    for _, r in res.iterrows():
        e = REGIME_ERRORS.get(r["waf_workload_regime"])
        got = (r["waf_workload_regime_cases"], r["waf_workload_regime_median_error"])
        assert got == (e.cases, e.median_abs_error) if e else all(map(np.isnan, got))
    # The workload's characterization (DESIGN: the report's trace figures), read from its summary.
    char = json.loads((small_run / "workload" / "characterization" / "summary.json").read_text())
    assert "<h2>Workload characterization</h2>" in html
    assert f"Ideal (infinite-cache) hit ratio: {char['token_hit_ratio']:.1%} of hashed tokens" in html
    for title in ("Ideal hit ratio", "Reuse times", "KV lifespans", "Reuse skew", "Capacity for the ideal hit ratio",
                  "LRU hit ratio vs capacity"):
        assert '<img src="data:image/png;base64,' in html.split(f'alt="{title}"')[0].rsplit("<figure>", 1)[1]
    assert (small_run / "report" / "figures" / "workload_live_blocks.png").stat().st_size > 1000
    manifest = json.loads((small_run / "manifest.json").read_text())
    assert manifest["config"]["model"] == "kimi-k3" and manifest["seeds"] == {"workload": 3}


def test_resume_skips_finished_and_refuses_other_config(tmp_path: Path) -> None:
    out = tmp_path / "r"
    cfg = _cfg(policies=["lru"])
    run(cfg, out, report=False)
    stages = out / ".stages"
    assert not (out / "workload" / "characterization").exists()      # it feeds the report only
    before = {p.name: p.stat().st_mtime_ns for p in stages.iterdir()}
    # An interrupted run: the device stage of lru did not finish.
    (stages / "device__lru.json").unlink()
    run(cfg, out, resume=True, report=False)
    after = {p.name: p.stat().st_mtime_ns for p in stages.iterdir()}
    assert after["simulate__lru.json"] == before["simulate__lru.json"]      # not redone
    assert after["plan__lru.json"] == before["plan__lru.json"]
    assert "device__lru.json" in after
    with pytest.raises(KvwearError, match="--resume"):
        run(cfg, out)
    with pytest.raises(KvwearError, match="differs"):
        run(_cfg(policies=["fifo"]), out, resume=True)


def test_sampling_keeps_whole_sessions() -> None:
    t = generate("multi-round", sessions=50, turns=4, seed=1)
    s = sample_groups(t, 0.3, seed=7)
    kept = set(s.column("session_id").to_pylist())
    assert 5 < len(kept) < 30
    full = t.filter(pc.is_in(t.column("session_id"), value_set=s.column("session_id").unique()))
    assert full.num_rows == s.num_rows                                     # no session is cut
    assert sample_groups(t, 0.3, seed=7).equals(s)                        # deterministic


def test_cli_run(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["run", "-o", str(out), "--policy", "lru", "--param", "sessions=3",
                                   "--param", "turns=3", "--dram", "1GB", "--ssd", "8GB"])
    assert res.exit_code == 0, res.output
    assert (out / "report" / "report.html").exists()
    assert "report:" in res.output
    bad = CliRunner().invoke(app, ["run", "-o", str(tmp_path / "x"), "--policy", "nosuch"])
    assert bad.exit_code != 0
    assert "nosuch" in str(bad.exception) or "nosuch" in bad.output


def test_sampling_is_stable_across_processes_and_groups_sessionless_traces(mooncake_path: Path) -> None:
    import subprocess
    import sys

    code = ("from kvwear.harness.pipeline.run import sample_groups; from kvwear.workloads.synthetic import generate;"
            "t = generate('multi-round', sessions=40, turns=3, seed=1);"
            "print(sorted(set(sample_groups(t, 0.3, 5).column('session_id').to_pylist())))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(h), "PATH": "/usr/bin:/bin"}).stdout for h in (1, 2)}
    assert len(outs) == 1                                   # the same sessions whatever the string hash seed
    from kvwear.workloads.loaders import load_requests

    t = load_requests(mooncake_path).table                   # no sessions; block 0 is shared by every request
    s = sample_groups(t, 0.1, seed=3)
    assert 0.05 * t.num_rows < s.num_rows < 0.15 * t.num_rows


def test_no_replay_projects_lifetime_without_a_device(tmp_path: Path) -> None:
    out = tmp_path / "nr"
    res = CliRunner().invoke(app, ["run", "-o", str(out), "--no-replay", "--policy", "lru", "--param", "sessions=3",
                                   "--param", "turns=3", "--dram", "1GB", "--ssd", "8GB"])
    assert res.exit_code == 0, res.output
    row = pq.read_table(out / "results.parquet").to_pylist()[0]
    assert row["lifetime_days_waf1"] > row["lifetime_days_uniform"] > 0        # uniform WAF > 1 for the sim geometry
    assert row["lifetime_days_pe_waf1"] > row["lifetime_days_pe_uniform"] > 0
    assert not (out / "plan").exists() and not (out / "device").exists()


def test_resume_refuses_a_changed_trace_file(tmp_path: Path, mooncake_path: Path) -> None:
    """Same config, same path, other contents: the stored requests would no longer be the trace's."""
    trace = tmp_path / "trace.jsonl"
    lines = mooncake_path.read_text().splitlines(keepends=True)[:60]
    trace.write_text("".join(lines))
    cfg = _cfg(policies=["lru"], workload={"trace": str(trace), "seed": 3})
    out = tmp_path / "r"
    run(cfg, out, replay=False, report=False)
    run(cfg, out, resume=True, replay=False, report=False)          # unchanged: resumes
    trace.write_text("".join(lines[:30]))
    with pytest.raises(KvwearError, match="changed since"):
        run(cfg, out, resume=True, replay=False, report=False)


def test_sim_with_femu_geometry_is_planned_on_devsz() -> None:
    """The sim backend's FEMU geometry exposes devsz_mb MiB and refuses any other capacity."""
    from kvwear.harness.pipeline.run import uniform_waf
    from kvwear.harness.pipeline.sizing import device_capacity

    geo = {"geometry": "femu", "devsz_mb": 192, "pgs_per_blk": 256, "blks_per_pl": 64, "luns_per_ch": 2, "nchs": 2}
    cfg = config_from_mapping({**SMALL, "device": {"kind": "sim", "options": geo}})
    assert device_capacity(cfg) == 192 << 20
    waf, source = uniform_waf(cfg, device_capacity(cfg))
    assert source == "uniform random, Lambert W" and waf > 1.0


