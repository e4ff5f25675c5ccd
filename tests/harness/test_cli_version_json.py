"""`kvwear --version`, `-V` and `version` print the installed version; `--json` on simulate, run,
report and sweep prints one JSON document on stdout (progress and tables elsewhere); `models show`
of a path that does not exist says the file is not found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KVWEAR = Path(sys.executable).parent / "kvwear"
SMALL = ["--param", "sessions=2", "--param", "turns=2", "--param", "system_prompt_tokens=64", "--model", "qwen2-7b",
         "--dram", "20MB", "--ssd", "40MB", "--policy", "lru"]


def kvwear(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([str(KVWEAR), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.mark.parametrize("argv", [["--version"], ["-V"], ["version"]])
def test_version(argv: list[str]) -> None:
    p = kvwear(*argv)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"kvwear {version('kvwear')}"


def test_characterize_json(tmp_path: Path) -> None:
    p = kvwear("trace", "characterize", str(REPO / "samples/traces/mooncake/conversation_trace.head200.jsonl"),
               "-m", "qwen2-7b", "-o", "ch", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["summary"] == json.loads((tmp_path / "ch" / "summary.json").read_text())
    assert doc["summary"]["requests"] == 200 and all((tmp_path / f).exists() for f in doc["files"])


def test_models_show_missing_file() -> None:
    for name in ("my-model.toml", "./Some-Model/config.json"):
        p = kvwear("models", "show", name)
        assert p.returncode == 2
        assert "file not found" in p.stderr and "unknown model profile" not in p.stderr


@pytest.mark.slow
def test_json_outputs(tmp_path: Path) -> None:
    run = kvwear("run", *SMALL, "-o", "runs/j", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["run_dir"] == "runs/j" and doc["accounting_faults"] == []
    assert [r["policy"] for r in doc["results"]] == ["lru"]
    assert Path(tmp_path / doc["report"]).is_file()
    assert doc["results"][0]["ssd_write_bytes"] > 0

    rep = json.loads(kvwear("report", "runs/j", "--json", cwd=tmp_path).stdout)
    assert rep["kind"] == "run" and (tmp_path / rep["html"]).is_file() and (tmp_path / rep["markdown"]).is_file()

    sim = kvwear("simulate", "--trace", "runs/j/workload/requests.parquet", "--model", "qwen2-7b", "--dram", "20MB",
                 "--ssd", "40MB", "--policy", "lru", "-o", "sim", "--json", cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr[-2000:]
    s = json.loads(sim.stdout)
    assert s["policies"][0]["label"] == "lru"
    # the simulate stage of the run and simulate on its requests agree
    assert s["policies"][0]["summary"]["ssd_write_bytes"] == doc["results"][0]["ssd_write_bytes"]

    (tmp_path / "sweep.toml").write_text(
        '[base]\nmodel = "qwen2-7b"\n[base.workload]\ngenerator = "multi-round"\n'
        'params = {sessions = 2, turns = 2, system_prompt_tokens = 64}\n'
        '[grid]\ncapacities = [{dram = "20MB", ssd = "40MB"}]\npolicies = ["lru", "gandalf:gamma=[0,4]"]\n'
        '[sweep]\nreplay = false\n')
    sw = kvwear("sweep", "sweep.toml", "-o", "sw", "--json", cwd=tmp_path)
    assert sw.returncode == 0, sw.stderr[-2000:]
    d = json.loads(sw.stdout)
    assert (d["points"], d["done"], d["failed"]) == (3, 3, 0) and (tmp_path / d["report"]).is_file()
