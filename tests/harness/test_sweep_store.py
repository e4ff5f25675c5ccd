"""The sweep store read back (issue #28): a point's results file damaged in ways hypothesis draws
is not a finished point (the resumed sweep runs it again and says so) and `kvwear report SWEEP`
names it in one line; two sweeps on one store are refused like two runs on one run directory;
a damaged sweep.json or error record is named, never a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.errors import KvwearError
from kvwear.exclusive import BusyError, locked
from kvwear.harness.pipeline.sweep import ResultsStore, plan_sweep, run_sweep
from kvwear.reports.sweep_report import build_sweep_report
from tests.adversarial import one_line_error

PLAN = {"base": {"name": "t", "model": "kimi-k3",
                 "workload": {"generator": "multi-round", "params": {"sessions": 2, "turns": 2}, "seed": 2},
                 "tiers": {"dram": "1GB", "ssd": "8GB"}},
        "grid": {"policies": ["lru", "fifo"]}}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweep") / "s"
    prog = run_sweep(plan_sweep(PLAN), root, jobs=1)
    assert prog.done == 2
    return root


def damaged_copy(store: Path, tmp: Path, body: bytes) -> tuple[Path, Path]:
    copy = tmp / "s"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store, copy)
    target = sorted((copy / "results").glob("*.parquet"))[0]
    target.write_bytes(body)
    return copy, target


def other_tables(store: Path) -> st.SearchStrategy[bytes]:
    """Bytes of a readable Parquet that is not a point's row: another table, another point's row."""
    files = sorted((store / "results").glob("*.parquet"))
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"policy": ["lru"], "x": [1]}), sink)
    return st.sampled_from([sink.getvalue().to_pybytes(), files[1].read_bytes()])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_point_runs_again_and_the_report_names_it(
    store: Path, tmp_path: Path, data: st.DataObject,
) -> None:
    good = sorted((store / "results").glob("*.parquet"))[0].read_bytes()
    body = data.draw(st.one_of(
        st.integers(0, len(good) - 1).map(lambda n: good[:n]),
        st.binary(max_size=64),
        other_tables(store)))
    copy, target = damaged_copy(store, tmp_path, body)
    rs = ResultsStore(copy)
    why = rs.damaged()[target.stem]
    assert target.stem not in rs.done_keys()
    with pytest.raises(KvwearError, match=rf"^{target}: .*resume the sweep to run this point again$"):
        rs.read()
    with pytest.raises(KvwearError, match=rf"^{target}: "):
        build_sweep_report(copy)
    prog = run_sweep(plan_sweep(PLAN), copy, jobs=1)
    assert (prog.done, prog.skipped) == (1, 1)
    assert prog.retried == [f"point {target.stem} runs again: results/{target.stem}.parquet {why}"]
    assert ResultsStore(copy).damaged() == {} and len(ResultsStore(copy).read()) == 2


def test_kvwear_report_on_a_truncated_point_is_one_line(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = sorted((store / "results").glob("*.parquet"))[0].read_bytes()
    copy, target = damaged_copy(store, tmp_path, good[: len(good) // 2])
    line = one_line_error(["report", str(copy)], capsys, monkeypatch)
    assert line.startswith(f"{target}: not a readable Parquet table (truncated or damaged")


@pytest.mark.parametrize("body", [b"", b"[]", b'{"sweep_version": 1, "na', b"\x00\xff"])
def test_kvwear_sweep_on_a_damaged_sweep_json_is_one_line(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, body: bytes,
) -> None:
    copy = tmp_path / "s"
    shutil.copytree(store, copy)
    (copy / "sweep.json").write_bytes(body)
    toml = tmp_path / "sweep.toml"
    toml.write_text('[base]\nname = "t"\nmodel = "kimi-k3"\n[base.workload]\ngenerator = "multi-round"\n'
                    'params = { sessions = 2, turns = 2 }\nseed = 2\n[base.tiers]\ndram = "1GB"\nssd = "8GB"\n'
                    '[grid]\npolicies = ["lru", "fifo"]\n')
    line = one_line_error(["sweep", str(toml), "-o", str(copy), "--no-report"], capsys, monkeypatch)
    assert line.startswith(f"{copy / 'sweep.json'}: damaged"), line


def test_damaged_sweep_json_and_error_records(store: Path, tmp_path: Path) -> None:
    copy, _ = damaged_copy(store, tmp_path, sorted((store / "results").glob("*.parquet"))[0].read_bytes())
    (copy / "errors").mkdir(exist_ok=True)
    (copy / "errors" / "abc.json").write_text("{trunc")
    assert ResultsStore(copy).read_errors()[0]["error"].endswith("does not read back (JSONDecodeError)")
    build_sweep_report(copy)                     # the report lists it, no traceback
    (copy / "sweep.json").write_text("[]")
    with pytest.raises(KvwearError, match=r"sweep\.json: damaged"):
        run_sweep(plan_sweep(PLAN), copy, jobs=1)


def test_two_sweeps_on_one_store_are_refused(store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "s"
    shutil.copytree(store, copy)
    with locked(copy / ".lock", f"sweep store {copy}"), pytest.raises(BusyError, match="sweep store"):
        run_sweep(plan_sweep(PLAN), copy, jobs=1)
    # and across processes: a second `kvwear sweep` while the first holds the store
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from kvwear.exclusive import locked\n"
        f"with locked(Path({str(copy)!r}) / '.lock', 'sweep store'):\n"
        "    print('held', flush=True); time.sleep(30)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(BusyError):
            run_sweep(plan_sweep(PLAN), copy, jobs=1)
        assert time.monotonic() - t0 < 10
    finally:
        holder.kill()
        holder.wait()
