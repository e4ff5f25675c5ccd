"""`kvwear simulate`: runs policies on a requests table and a raw trace, writes versioned tables
per policy, lists policies, and rejects bad specs and sizes with one clear line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvwear.harness.cli.main import app
from kvwear.policies.metrics import SIM_REQUESTS, SIM_SUMMARY
from kvwear.policies.schema import SSD_OPS
from kvwear.tables import read_table, table_kind
from kvwear.workloads.schema import REQUESTS
from kvwear.workloads.synthetic import MultiRoundConfig, generate_multi_round

runner = CliRunner()


def test_simulate_requests_table(tmp_path) -> None:
    from kvwear.tables import write_table

    req = tmp_path / "requests.parquet"
    write_table(REQUESTS, generate_multi_round(MultiRoundConfig(sessions=10, turns=5, seed=1)), req)
    out = tmp_path / "sim"
    r = runner.invoke(app, ["simulate", "--trace", str(req), "--model", "qwen3.5-27b", "--dram", "2GB",
                            "--ssd", "20GB", "-p", "lru", "-p", "lru-k:k=3", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "lru-k,k=3" in r.output and "token miss" in r.output
    for label in ("lru", "lru-k,k=3"):
        d = out / label
        for name, kind in (("ssd_ops", "ssd_ops"), ("per_request", "sim_requests"),
                           ("timeline", "sim_timeline"), ("summary", "sim_summary")):
            assert table_kind(d / f"{name}.parquet")[0] == kind
        summ = read_table(SIM_SUMMARY, d / "summary.parquet").to_pylist()[0]
        assert summ["requests"] == 50
        assert read_table(SIM_REQUESTS, d / "per_request.parquet").num_rows == 50
        ops = read_table(SSD_OPS, d / "ssd_ops.parquet")
        assert sum(b for b, o in zip(ops.column("bytes").to_pylist(), ops.column("op").to_pylist(),
                                     strict=True) if o == "write") == summ["ssd_write_bytes"]
        assert json.loads((d / "summary.json").read_text())["summary"]["label"] == label
    lru = read_table(SIM_SUMMARY, out / "lru" / "summary.parquet").to_pylist()[0]
    assert lru["ssd_write_bytes"] > 0


def test_simulate_raw_trace_prefix(mooncake_path, tmp_path) -> None:
    r = runner.invoke(app, ["simulate", "-t", str(mooncake_path), "--max-requests", "200",
                            "--dram", "10GB", "--ssd", "100GB", "--hbm", "5GB", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert read_table(SIM_REQUESTS, tmp_path / "lru" / "per_request.parquet").num_rows == 200


def test_list_policies() -> None:
    r = runner.invoke(app, ["simulate", "--list-policies"])
    assert r.exit_code == 0
    for word in ("lru-k", "hotprefix", "theta", "1–10", "write-through", "min_frequency"):
        assert word in r.output


def test_bad_inputs_are_clear(tmp_path) -> None:
    from kvwear.errors import KvwearError
    from kvwear.harness.cli.main import main  # noqa: F401  (errors are KvwearError, shown by main())

    r = runner.invoke(app, ["simulate", "-t", "x", "-p", "lru-k:kk=3", "-o", str(tmp_path)])
    assert isinstance(r.exception, KvwearError) and "valid: k" in str(r.exception)
    r = runner.invoke(app, ["simulate", "-t", "x", "-p", "nosuch", "-o", str(tmp_path)])
    assert "valid:" in str(r.exception) and "lru" in str(r.exception)
    r = runner.invoke(app, ["simulate", "-t", __file__, "--dram", "lots", "-o", str(tmp_path)])
    assert isinstance(r.exception, KvwearError) and "--dram" in str(r.exception)
