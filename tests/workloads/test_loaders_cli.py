"""`kvwear trace convert` / `kvwear trace inspect` through typer's CliRunner and, once, through
the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
from typer.testing import CliRunner

from kvwear.harness.cli.main import app
from kvwear.tables import read_table
from kvwear.workloads.loaders import load_requests
from kvwear.workloads.schema import REQUESTS

runner = CliRunner()


def test_convert_then_inspect_parquet(tmp_path: Path, mooncake_path: Path) -> None:
    out = tmp_path / "m.parquet"
    res = runner.invoke(app, ["trace", "convert", str(mooncake_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "12,031 requests" in res.output and "mooncake" in res.output
    assert read_table(REQUESTS, out).num_rows == 12031
    res = runner.invoke(app, ["trace", "inspect", str(out), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    t = load_requests(mooncake_path).table
    flat = np.concatenate([np.asarray(x) for x in t.column("hash_ids").to_pylist()])
    assert s["requests"] == 12031 and s["format"] == "parquet"
    assert s["blocks"] == len(flat) and s["unique_blocks"] == len(np.unique(flat))
    assert s["block_tokens"] == [512] and s["sessions"] == 0
    assert s["duration_s"] == t.column("arrival_s").to_numpy().max()
    assert s["input_tokens"]["max"] == max(t.column("input_tokens").to_pylist())
    assert s["input_tokens"]["p50"] == float(np.median(t.column("input_tokens").to_numpy()))


def test_inspect_weka_directory_table_and_json(weka_dir: Path) -> None:
    res = runner.invoke(app, ["trace", "inspect", str(weka_dir)])
    assert res.exit_code == 0, res.output
    for word in ("requests", "sessions", "streams", "unique_blocks", "64 tokens", "p99", "subagent"):
        assert word in res.output
    s = json.loads(runner.invoke(app, ["trace", "inspect", str(weka_dir), "--json",
                                       "--block-tokens", "16"]).output)
    assert s["sessions"] == 6 and s["requests"] == 463 and s["block_tokens"] == [16]
    assert s["categories"]["agentic"] + s["categories"]["subagent"] == 463
    n_sub = sum(1 for f in weka_dir.glob("*.json") for r in json.loads(f.read_text())["requests"]
                if r["type"] == "subagent")
    assert s["streams"] == 6 + n_sub == 21  # six main streams and their subagents


def test_convert_options_and_errors(tmp_path: Path, weka_dir: Path) -> None:
    out = tmp_path / "w.parquet"
    res = runner.invoke(app, ["trace", "convert", str(weka_dir), "-o", str(out), "--format", "weka",
                              "--block-tokens", "16", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["rows"] == 463 and summary["block_tokens"] == 16 and summary["resorted"] is True
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
                   '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": "x"}\n')
    res = runner.invoke(app, ["trace", "convert", str(bad), "-o", str(tmp_path / "b.parquet")])
    assert res.exit_code == 2
    assert f"{bad}:2: field 'hash_ids'" in res.output
    assert not (tmp_path / "b.parquet").exists()
    res = runner.invoke(app, ["trace", "convert", str(bad), "-o", str(tmp_path / "b.parquet"), "--skip-bad"])
    assert res.exit_code == 0 and "skipped 1 bad lines" in res.output
    res = runner.invoke(app, ["trace", "inspect", str(bad), "--format", "sharegpt"])
    assert res.exit_code == 2 and "mooncake" in res.output and "weka" in res.output


def test_help_has_examples() -> None:
    for cmd in ("convert", "inspect"):
        res = runner.invoke(app, ["trace", cmd, "--help"])
        assert res.exit_code == 0 and "Examples" in res.output and "kvwear trace " + cmd in res.output


def test_installed_console_script(mooncake_path: Path) -> None:
    exe = Path(sys.executable).with_name("kvwear")
    proc = subprocess.run([str(exe), "trace", "inspect", str(mooncake_path), "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["requests"] == 12031
    proc = subprocess.run([str(exe), "trace", "inspect", str(mooncake_path), "--format", "nope"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "valid:" in proc.stderr


def test_inspect_counts_distinct_blocks_exactly_in_partitions(tmp_path: Path, weka_dir: Path,
                                                             mooncake_path: Path) -> None:
    """Under a budget smaller than the trace's distinct blocks, `unique_blocks` is counted in hash
    partitions, one more pass over the requests each: the summary equals the one-pass summary
    (exact, not an estimate), through the command on a Parquet file and a raw trace; a one-shot
    stream that cannot be read again is refused instead of answered wrong."""
    import pytest

    from kvwear.errors import KvwearError
    from kvwear.harness.cli.trace_io import trace_summary

    for trace in (weka_dir, mooncake_path):
        table = load_requests(trace).table
        whole = trace_summary(table)
        passes: list[int] = []

        def rescan(t: pa.Table = table, passes: list[int] = passes) -> list[pa.RecordBatch]:
            passes.append(1)
            return t.to_batches(max_chunksize=97)

        small = trace_summary(table.to_batches(max_chunksize=97), rescan=rescan, memory_budget_bytes=32 * 1000)
        assert small == whole and len(passes) >= 3, (trace, len(passes))
        passes.clear()
        with pytest.raises(KvwearError, match="second pass"):
            trace_summary(iter(table.to_batches()), memory_budget_bytes=32 * 1000)
    out = tmp_path / "w.parquet"
    assert runner.invoke(app, ["trace", "convert", str(weka_dir), "-o", str(out)]).exit_code == 0
    for source in (out, weka_dir):
        got = [json.loads(runner.invoke(app, ["trace", "inspect", str(source), "--json", "--memory-budget", b]).output)
               for b in ("64KiB", "256MiB")]
        assert got[0] == got[1] and got[0]["unique_blocks"] == 42852
    res = runner.invoke(app, ["trace", "inspect", str(out), "--memory-budget", "1KiB"])
    assert res.exit_code != 0 and "--memory-budget" in res.output
