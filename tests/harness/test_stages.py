"""The run's stage skeleton (pipeline.rundir.Stage) and its one simulate path (pipeline.simulate):
`kvwear simulate` and `kvwear run --no-replay` write the same tables; a resumed run skips every
finished stage, the estimate's models included; the [simulator] section reaches the simulator."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kvwear.harness.pipeline.run as run_mod
from kvwear.errors import InputError
from kvwear.harness.cli.main import app
from kvwear.harness.estimate.schema import RESULTS, ResultsRow
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.run import results_table, run
from kvwear.harness.pipeline.rundir import RunDir, Stage, write_json
from kvwear.policies.metrics import SIM_REQUESTS
from kvwear.policies.schema import SSD_OPS
from kvwear.tables import read_table

runner = CliRunner()


def test_stage_runs_once_and_an_unfinished_one_again(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "r")
    rd.prepare("a = 1\n", resume=False)
    calls: list[str] = []

    def compute() -> tuple[int, Mapping[str, Any]]:
        calls.append("compute")
        (rd.root / "x.txt").write_text("7")
        return 7, {"rows": 7}

    def load() -> int:
        calls.append("load")
        return int((rd.root / "x.txt").read_text())

    st = Stage("x/lru", compute, load)
    assert st.run(rd) == 7 and rd.done_info("x/lru")["rows"] == 7
    assert st.run(rd) == 7
    assert calls == ["compute", "load"]

    def fail() -> tuple[int, Mapping[str, Any]]:
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        Stage("y", fail, load).run(rd)
    assert not rd.is_done("y")                     # no marker: a resume computes it again


def test_a_marker_without_files_is_checked_against_what_its_stage_declares(tmp_path: Path) -> None:
    """A marker written before markers listed files and input times: its stage runs again when its
    declared folder holds no file, or when a stage it reads finished after it."""
    rd = RunDir(tmp_path / "r")
    rd.prepare("a = 1\n", resume=False)
    d = rd.stage_dir("x")
    (d / "f.txt").write_text("1")

    def old_marker(stage: str, finished_unix_s: float) -> None:
        write_json(rd.root / ".stages" / f"{stage}.json", {"stage": stage, "finished_unix_s": finished_unix_s})

    old_marker("w", 1.0)
    old_marker("x", 2.0)
    st = Stage("x", lambda: (2, {}), lambda: 1, outputs=(d,), after=("w",))
    assert st.run(rd) == 1
    (d / "f.txt").unlink()
    assert rd.stale_reason("x", (d,), ("w",)) == f"{d} holds no file"
    (d / "f.txt").write_text("1")
    old_marker("w", 3.0)                           # ran again after x
    assert st.run(rd) == 2 and rd.reruns == ["x ran again: stage w ran again"]


def test_simulate_and_run_no_replay_write_identical_tables(tmp_path: Path, mooncake_path: Path) -> None:
    """The same trace, model and tiers through `kvwear simulate` (a raw trace, loaded; the oracle's
    future from the in-memory pre-pass) and `kvwear run --no-replay` (the workload's Parquet,
    streamed; the oracle's future from its next-use column) give the same Arrow tables."""
    common = ["--trace", str(mooncake_path), "--model", "qwen3.5-27b", "--dram", "4GB", "--ssd", "40GB",
              "-p", "lru", "-p", "belady:mode=min"]
    r = runner.invoke(app, ["simulate", *common, "-o", str(tmp_path / "sim")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["run", *common, "--no-replay", "--no-report", "-o", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    for label in ("lru", "belady,mode=min"):
        a, b = tmp_path / "sim" / label, tmp_path / "run" / "policies" / label
        assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
        for name, spec in (("ssd_ops", SSD_OPS), ("per_request", SIM_REQUESTS)):
            ta, tb = read_table(spec, a / f"{name}.parquet"), read_table(spec, b / f"{name}.parquet")
            assert ta.num_rows > 0 and ta.schema.equals(tb.schema, check_metadata=True)
            assert ta.equals(tb), f"{label}/{name}.parquet differs"
        assert json.loads((a / "summary.json").read_text()) == json.loads((b / "summary.json").read_text())


def test_simulate_defaults_are_the_run_configs(tmp_path: Path, mooncake_path: Path) -> None:
    r = runner.invoke(app, ["simulate", "--trace", str(mooncake_path), "--max-requests", "50",
                            "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    got = json.loads((tmp_path / "lru" / "summary.json").read_text())["config"]
    cfg = config_from_mapping({})
    assert got["dram_bytes"] == cfg.tiers.dram_bytes == 32 * 10**9
    assert got["ssd_bytes"] == 256 * 10**9
    assert got["recompute_tokens_per_s"] == cfg.simulator.recompute_tokens_per_s
    assert got["interval_s"] == cfg.simulator.interval_s


def test_simulator_section_is_validated_and_reaches_the_simulator(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"simulator\.gpu_usd.*valid: dram_to_hbm_bytes_per_s"):
        config_from_mapping({"simulator": {"gpu_usd": 1.0}}, "c.toml")
    with pytest.raises(InputError, match=r"simulator\.ssd_read_bytes_per_s.*> 0"):
        config_from_mapping({"simulator": {"ssd_read_bytes_per_s": 0}}, "c.toml")
    base = {"name": "t", "model": "kimi-k3", "policies": ["lru"], "tiers": {"dram": "1GB", "ssd": "8GB"},
            "workload": {"generator": "multi-round", "params": {"sessions": 3, "turns": 3}}}
    costs = []
    for gpu in (20.0, 40.0):
        cfg = config_from_mapping({**base, "simulator": {"gpu_usd_per_hour": gpu, "ssd_read_bytes_per_s": "5GB"}})
        out = run(cfg, tmp_path / f"g{gpu:g}", replay=False, report=False)
        s = json.loads((out.run_dir / "policies" / "lru" / "summary.json").read_text())
        assert s["config"]["gpu_usd_per_hour"] == gpu and s["config"]["ssd_read_bytes_per_s"] == 5e9
        costs.append(s["summary"]["gpu_usd"])
        res = read_table(RESULTS, out.run_dir / "results.parquet")          # the results contract
        assert res.schema.names == RESULTS.schema.names and res.column("waf_measured").null_count == 1
    assert costs[1] == pytest.approx(2 * costs[0]) and costs[0] > 0


def test_resume_does_not_estimate_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimate stage honours its marker: a resumed run neither replays the FTL twin nor runs
    the workload model again, and its results row is the stored one."""
    calls: list[str] = []
    for name in ("emulator_waf", "plan_workload_waf"):
        real = getattr(run_mod, name)

        def counted(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            calls.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(run_mod, name, counted)
    cfg = config_from_mapping({"name": "t", "model": "kimi-k3", "policies": ["lru"],
                               "tiers": {"dram": "1GB", "ssd": "8GB"},
                               "workload": {"generator": "multi-round", "params": {"sessions": 3, "turns": 3}}})
    out = tmp_path / "r"
    first = run(cfg, out, report=False)
    assert sorted(calls) == ["emulator_waf", "plan_workload_waf"]
    calls.clear()
    again = run(cfg, out, resume=True, report=False)
    assert calls == []
    assert again.outcomes[0].row == first.outcomes[0].row
    assert read_table(RESULTS, out / "results.parquet").equals(first.results)
    assert first.results.column("waf_measured").null_count == 0
    (out / ".stages" / "estimate__lru.json").unlink()          # interrupted before its marker
    run(cfg, out, resume=True, report=False)
    assert sorted(calls) == ["emulator_waf", "plan_workload_waf"]


def test_resume_runs_again_a_finished_stage_whose_files_were_deleted(tmp_path: Path) -> None:
    """`kvwear run --resume` after a finished stage's folder, or one file of it, was deleted by hand:
    that stage runs again, and every stage that read it (another policy's keep their markers);
    the results equal the first run's."""
    out = tmp_path / "r"
    args = ["run", "-o", str(out), "--device", "sim", "--model", "kimi-k3", "-p", "lru", "-p", "fifo",
            "--param", "sessions=3", "--param", "turns=3", "--dram", "1GB", "--ssd", "8GB", "--no-report"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    first = read_table(RESULTS, out / "results.parquet")

    def finished() -> dict[str, float]:
        return {p.stem.replace("__", "/"): json.loads(p.read_text())["finished_unix_s"]
                for p in (out / ".stages").glob("*.json")}

    def resume(deleted: Path) -> set[str]:
        before = finished()
        shutil.rmtree(deleted) if deleted.is_dir() else deleted.unlink()
        r = runner.invoke(app, [*args, "--resume"])
        assert r.exit_code == 0, r.output
        assert f"ran again: {deleted}" in r.output.replace("\n", "")
        assert read_table(RESULTS, out / "results.parquet").equals(first)
        after = finished()
        assert set(after) == set(before)
        return {s for s in after if after[s] != before[s]} - {"results"}

    assert resume(out / "policies" / "lru") == {"simulate/lru", "plan/lru", "device/lru", "estimate/lru"}
    assert resume(out / "plan" / "fifo" / "plan.json") == {"plan/fifo", "device/fifo", "estimate/fifo"}
    assert resume(out / "workload") == {"workload", *(f"{s}/{p}" for s in ("simulate", "plan", "device", "estimate")
                                                      for p in ("lru", "fifo"))}
    r = runner.invoke(app, [*args, "--resume"])
    assert r.exit_code == 0 and "ran again" not in r.output

    def damage(path: Path, text: str) -> set[str]:
        """A finished stage's record damaged by hand: the stage runs again and says why."""
        before = finished()
        path.write_text(text)
        r = runner.invoke(app, [*args, "--resume"])
        assert r.exit_code == 0, r.output
        said = r.output.replace("\n", "")
        assert f"{path}" in said and ("(truncated or changed)" in said or "sha256 differs" in said), said
        assert read_table(RESULTS, out / "results.parquet").equals(first)
        after = finished()
        return {s for s in after if after[s] != before[s]} - {"results"}

    result = out / "device" / "lru" / "result.json"
    assert damage(result, result.read_text()[:200]) == {"device/lru", "estimate/lru"}
    assert damage(out / "estimate" / "fifo" / "crossval.json", "{}") == {"estimate/fifo"}
    # the same size, one byte changed: only the content hash sees it
    ops = out / "policies" / "fifo" / "ssd_ops.parquet"
    body = bytearray(ops.read_bytes())
    body[len(body) // 2] ^= 0xFF
    before = finished()
    ops.write_bytes(bytes(body))
    r = runner.invoke(app, [*args, "--resume"])
    assert r.exit_code == 0 and f"{ops} changed since its stage wrote it (sha256 differs)" in r.output.replace("\n", "")
    assert read_table(RESULTS, out / "results.parquet").equals(first)
    assert {s for s, t in finished().items() if t != before[s]} - {"results"} == {
        f"{s}/fifo" for s in ("simulate", "plan", "device", "estimate")}
    # a marker truncated or not an object: its stage runs again, saying so
    for text in ("{", "[]"):
        marker = out / ".stages" / "plan__lru.json"
        marker.write_text(text)
        r = runner.invoke(app, [*args, "--resume"])
        assert r.exit_code == 0 and "plan/lru ran again: its marker" in r.output.replace("\n", ""), r.output
        assert read_table(RESULTS, out / "results.parquet").equals(first)


def test_results_rows_must_fit_the_contract() -> None:
    """The results table's schema is the typed row's: a row becomes a table of exactly RESULTS's
    columns, and a field the row does not declare cannot be given at all."""
    t = results_table([ResultsRow(policy="lru", requests=3)])
    assert t.schema.names == RESULTS.schema.names and t.column("requests").to_pylist() == [3]
    assert [f.name for f in dataclasses.fields(ResultsRow)] == RESULTS.schema.names
    with pytest.raises(TypeError, match="bogus_bytes"):
        ResultsRow(policy="lru", bogus_bytes=1)  # type: ignore[call-arg]
