"""Property tests: random, mistyped and truncated input to every loader fails only with
InputError, never leaves a partial Parquet file, and skip_bad never fails on a record."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.errors import InputError
from kvwear.tables import read_table
from kvwear.workloads.loaders import LOADERS, convert_trace, load_requests
from kvwear.workloads.schema import REQUESTS

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=3000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
    st.lists(st.integers(min_value=-5, max_value=50), max_size=8),
    st.lists(st.one_of(st.integers(), st.text(max_size=2), st.none(), st.floats()), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)

JSONL_FIELDS = {
    "mooncake": ["timestamp", "input_length", "output_length", "hash_ids"],
    "qwen-bailian": ["chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "type",
                     "turn", "hash_ids"],
    "aiperf": ["timestamp", "session_id", "delay", "input_length", "output_length", "hash_ids"],
}


def valid_row(fmt: str, i: int, n_ids: int) -> dict[str, Any]:
    n_ids = max(n_ids, 1)        # a request reads at least one token (kvwear.workloads.bounds)
    ids = list(range(n_ids))
    if fmt == "mooncake":
        return {"timestamp": i, "input_length": 512 * n_ids, "output_length": 3, "hash_ids": ids}
    if fmt == "qwen-bailian":
        return {"chat_id": i, "parent_chat_id": i - 1 if i else -1, "timestamp": i * 0.5,
                "input_length": 16 * n_ids, "output_length": 2, "type": "text", "turn": i + 1, "hash_ids": ids}
    return {"session_id": "s", "delay": 10, "input_length": 512 * n_ids, "output_length": 3, "hash_ids": ids}


def weka_doc(n: int) -> dict[str, Any]:
    reqs: list[dict[str, Any]] = [{"t": float(i), "type": "n", "model": "m", "in": 64 * i + 5, "out": 2,
                                   "hash_ids": list(range(i))} for i in range(n)]
    reqs.append({"t": 1.0, "type": "subagent", "agent_id": "a", "requests": [
        {"t": 0.5, "type": "n", "in": 130, "out": 1, "hash_ids": [100, 101]}]})
    return {"id": "w", "block_size": 64, "requests": reqs}


@st.composite
def jsonl_text(draw: st.DrawFn, fmt: str) -> bytes:
    lines = []
    for i in range(draw(st.integers(0, 6))):
        row = valid_row(fmt, i, draw(st.integers(0, 4)))
        for key in draw(st.lists(st.sampled_from(JSONL_FIELDS[fmt]), max_size=2)):
            if draw(st.booleans()):
                row.pop(key, None)
            else:
                row[key] = draw(values)
        lines.append(json.dumps(row))
    data = ("\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))).encode()
    if data and draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]  # truncated anywhere
    return data


@st.composite
def weka_text(draw: st.DrawFn) -> bytes:
    doc = weka_doc(draw(st.integers(0, 4)))
    target = draw(st.sampled_from(["top", "req", "sub", "none"]))
    if target == "top":
        doc[draw(st.sampled_from(["id", "block_size", "requests"]))] = draw(values)
    elif target == "req" and len(doc["requests"]) > 1:
        doc["requests"][0][draw(st.sampled_from(["t", "in", "out", "hash_ids", "model", "api_time"]))] = \
            draw(values)
    elif target == "sub":
        doc["requests"][-1][draw(st.sampled_from(["t", "agent_id", "requests"]))] = draw(values)
    data = json.dumps(doc).encode()
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return data


def check_only_input_error(data: bytes, fmt: str, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / f"in{suffix}"
        src.write_bytes(data)
        out_dir = Path(d) / "out"
        out_dir.mkdir()
        out = out_dir / "t.parquet"
        try:
            res = convert_trace(src, out, fmt)
        except InputError:
            assert list(out_dir.iterdir()) == []  # no partial file left behind
        else:
            assert [p.name for p in out_dir.iterdir()] == ["t.parquet"]
            assert read_table(REQUESTS, out).num_rows == res.rows
        try:
            load_requests(src, fmt)
        except InputError as exc:
            assert exc.path == str(src)
        # skip_bad: a bad record is skipped, never raised (a JSONL file has no header to break)
        skipped = load_requests(src, fmt, skip_bad=True)
        assert all(isinstance(e, InputError) for e in skipped.errors)
        if suffix == ".jsonl":  # every non-blank line is either a row or a counted skip
            lines = sum(1 for line in data.split(b"\n") if line.strip())
            assert skipped.table.num_rows + skipped.skipped_lines == lines


@pytest.mark.parametrize("fmt", list(JSONL_FIELDS))
@SETTINGS
@given(data=st.data())
def test_jsonl_loaders_mistyped_and_truncated(fmt: str, data: st.DataObject) -> None:
    check_only_input_error(data.draw(jsonl_text(fmt)), fmt, ".jsonl")


# the generic importer reads through a mapping: random bytes as its JSONL here (a CSV's header
# and a Parquet file's footer are the file's, not a record's: tests/workloads/test_columns_loader.py)
LOADER_SPECS = [n for n in LOADERS.names() if n != "columns"] + [
    "columns:arrival=t,input_tokens=n,hash_ids=b,session=s,file=jsonl"]


@pytest.mark.parametrize("fmt", LOADER_SPECS)
@SETTINGS
@given(blob=st.binary(max_size=400))
def test_every_loader_random_bytes(fmt: str, blob: bytes) -> None:
    check_only_input_error(blob, fmt, ".json")


@SETTINGS
@given(data=weka_text())
def test_weka_mistyped_and_truncated(data: bytes) -> None:
    check_only_input_error(data, "weka", ".json")


@pytest.mark.parametrize("fmt", list(JSONL_FIELDS))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_fast_and_exact_paths_agree(fmt: str, data: st.DataObject) -> None:
    # A blank line sends a chunk to the line-by-line path; both paths must build the same rows
    # and report the same line numbers.
    n = data.draw(st.integers(1, 8))
    rows = [json.dumps(valid_row(fmt, i, data.draw(st.integers(0, 5)))) for i in range(n)]
    bad_at = data.draw(st.one_of(st.none(), st.integers(0, n - 1)))
    if bad_at is not None:
        rows[bad_at] = rows[bad_at].replace('"input_length": ', '"input_length": -1')
    with tempfile.TemporaryDirectory() as d:
        fast, slow = Path(d) / "fast.jsonl", Path(d) / "slow.jsonl"
        fast.write_text("\n".join(rows) + "\n")
        slow.write_text("\n".join(rows) + "\n\n")  # trailing blank line: same line numbers
        results = []
        for p in (fast, slow):
            try:
                results.append(load_requests(p, fmt).table)
            except InputError as exc:
                results.append((exc.line, exc.field))  # type: ignore[arg-type]
        a, b = results
        assert a == b if isinstance(a, tuple) else a.equals(b)
        if bad_at is not None:
            assert a == (bad_at + 1, "input_length")


def test_jsonl_loader_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        load_requests(tmp_path, "mooncake")


def test_valid_generated_rows_load(tmp_path: Path) -> None:
    # the generators above start from valid rows: make sure those really are valid
    for fmt in JSONL_FIELDS:
        p = tmp_path / f"{fmt}.jsonl"
        p.write_text("\n".join(json.dumps(valid_row(fmt, i, i % 4)) for i in range(6)))
        assert load_requests(p, fmt).table.num_rows == 6
    p = tmp_path / "w.json"
    p.write_text(json.dumps(weka_doc(4)))
    assert load_requests(p, "weka").table.num_rows == 5
