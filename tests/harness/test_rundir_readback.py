"""A run directory read back (issue #28), on the RunDir / Stage skeleton with a stage of its own:
a marker damaged in any way hypothesis can draw makes its stage run again saying why (never a
traceback); an output changed in any byte, truncated or grown is seen by its size or sha256; a
damaged table or record makes its stage run again; markers without config.toml are refused; a
garbage .layout is one line; a killed writer's .partial files are removed on resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.errors import KvwearError
from kvwear.harness.pipeline.rundir import RunDir, Stage
from kvwear.tables import TableSpec, read_table, write_table

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SPEC = TableSpec("toy", 1, pa.schema([pa.field("x", pa.int64(), nullable=False)]))


def toy_stage(rd: RunDir, calls: list[str]) -> Stage[int]:
    out = rd.root / "toy" / "t.parquet"

    def compute() -> tuple[int, dict[str, Any]]:
        calls.append("compute")
        write_table(SPEC, pa.table({"x": list(range(100))}), out)
        return 100, {}

    def load() -> int:
        calls.append("load")
        return read_table(SPEC, out).num_rows

    return Stage("toy", compute, load, outputs=(out,))


def fresh(root: Path) -> tuple[RunDir, list[str]]:
    rd = RunDir(root)
    rd.prepare("name = 'x'\n", resume=True)
    calls: list[str] = []
    assert toy_stage(rd, calls).run(rd) == 100 and calls == ["compute"]
    return rd, calls


JSON = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=8)


@SETTINGS
@given(damage=st.one_of(st.binary(max_size=60), JSON.map(lambda v: json.dumps(v).encode()),
                        st.sampled_from([b"", b"{", b"[]", b"{}", b'{"stage": "toy"}'])))
def test_a_damaged_marker_reruns_its_stage(tmp_path: Path, damage: bytes) -> None:
    root = tmp_path / "r"
    if not (root / "toy").exists():
        fresh(root)
    marker = root / ".stages" / "toy.json"
    good = marker.read_bytes()
    marker.write_bytes(damage)
    rd = RunDir(root)
    calls: list[str] = []
    assert toy_stage(rd, calls).run(rd) == 100
    if calls == ["load"]:        # the damage left a whole marker (hypothesis drew a valid one)
        assert RunDir(root).marker_problem("toy") is None
    else:
        assert calls == ["compute"] and rd.reruns[0].startswith("toy ran again: "), rd.reruns
    marker.write_bytes(good)


@SETTINGS
@given(data=st.data())
def test_any_changed_output_is_seen(tmp_path: Path, data: st.DataObject) -> None:
    root = tmp_path / "r"
    if not (root / "toy").exists():
        fresh(root)
    out = root / "toy" / "t.parquet"
    good = out.read_bytes()
    how = data.draw(st.sampled_from(["flip", "truncate", "append"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(good) - 1))
        bad = good[:i] + bytes([good[i] ^ data.draw(st.integers(1, 255))]) + good[i + 1:]
    elif how == "truncate":
        bad = good[: data.draw(st.integers(0, len(good) - 1))]
    else:
        bad = good + data.draw(st.binary(min_size=1, max_size=20))
    out.write_bytes(bad)
    rd = RunDir(root)
    calls: list[str] = []
    assert toy_stage(rd, calls).run(rd) == 100
    assert calls == ["compute"], calls
    assert ("sha256 differs" if how == "flip" else "(truncated or changed)") in rd.reruns[0]
    assert out.read_bytes() == good


def test_a_damaged_table_under_an_old_marker_reruns(tmp_path: Path) -> None:
    """A marker from before sizes and hashes (a list of paths): the table's own reader sees it."""
    rd, _ = fresh(tmp_path / "r")
    marker = rd.root / ".stages" / "toy.json"
    info = json.loads(marker.read_text())
    marker.write_text(json.dumps({**info, "files": sorted(info["files"])}))
    out = rd.root / "toy" / "t.parquet"
    out.write_bytes(out.read_bytes()[:50])
    calls: list[str] = []
    rd2 = RunDir(rd.root)
    assert toy_stage(rd2, calls).run(rd2) == 100 and calls == ["load", "compute"]
    assert "not a readable Parquet table (truncated or damaged)" in rd2.reruns[0]


def test_markers_without_config_are_refused(tmp_path: Path) -> None:
    rd, _ = fresh(tmp_path / "r")
    rd.config_path.unlink()
    with pytest.raises(KvwearError, match=r"holds 1 finished stage\(s\) \(.stages/\) but no config.toml"):
        RunDir(rd.root).prepare("name = 'other'\n", resume=True)
    with pytest.raises(KvwearError, match=r"but no config\.toml"):
        RunDir(rd.root).prepare("name = 'x'\n", resume=False)


@pytest.mark.parametrize("text", ["garbage", "", "2.5\n", "\xff"])
def test_a_damaged_layout_is_one_line(tmp_path: Path, text: str) -> None:
    rd, _ = fresh(tmp_path / "r")
    (rd.root / ".layout").write_text(text)
    with pytest.raises(KvwearError, match=r"\.layout: holds .*not a layout number") as exc:
        RunDir(rd.root).prepare("name = 'x'\n", resume=True)
    assert "\n" not in str(exc.value)


def test_a_killed_writers_partial_files_are_removed_on_resume(tmp_path: Path) -> None:
    rd, _ = fresh(tmp_path / "r")
    leftovers = [rd.root / "toy" / ".t.parquet.partial-4242", rd.root / ".stages" / ".toy.json.partial-77"]
    for p in leftovers:
        p.write_bytes(b"half")
    rd2 = RunDir(rd.root)
    rd2.prepare("name = 'x'\n", resume=True)
    assert not any(p.exists() for p in leftovers)
    assert len([r for r in rd2.reruns if "a killed writer's partial file" in r]) == 2


@pytest.mark.parametrize("body", [b"\xff\xfe\x00garbage", b"", b"name = 'x'"])
def test_a_damaged_config_is_another_config(tmp_path: Path, body: bytes) -> None:
    rd, _ = fresh(tmp_path / "r")
    rd.config_path.write_bytes(body)
    with pytest.raises(KvwearError, match=r"the stored config\.toml differs from this run's config"):
        RunDir(rd.root).prepare("name = 'x'\n", resume=True)
