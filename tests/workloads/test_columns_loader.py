"""The generic importer (`columns:` format): CSV, JSONL and Parquet through a column mapping give
the same requests; token ids are hashed into prefix-derived block keys; bad cells and bad
mappings are one error naming the file, the row and the column."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvwear.errors import InputError, KvwearError, UnknownNameError
from kvwear.workloads.loaders import load_requests
from kvwear.workloads.loaders.columns import block_hashes

ROWS = [  # (t ms, session, prompt tokens, output tokens, block ids)
    (0, "a", 40, 5, [1, 2]),
    (1500, "b", 33, 7, [1, 3]),
    (2000, "a", 70, 9, [1, 2, 4, 5]),
]
SPEC = ("columns:arrival=ts_ms,time_unit=ms,session=conv,input_tokens=prompt,output_tokens=completion,"
        "hash_ids=blocks")


def _write_all(d: Path) -> dict[str, Path]:
    csv = d / "t.csv"
    csv.write_text("ts_ms,conv,prompt,completion,blocks\n" + "".join(
        f'{t},{s},{i},{o},"{" ".join(map(str, b))}"\n' for t, s, i, o, b in ROWS))
    jsonl = d / "t.jsonl"
    jsonl.write_text("".join(json.dumps({"ts_ms": t, "conv": s, "prompt": i, "completion": o, "blocks": b}) + "\n"
                             for t, s, i, o, b in ROWS))
    parquet = d / "t.parquet"
    pq.write_table(pa.table({"ts_ms": [r[0] for r in ROWS], "conv": [r[1] for r in ROWS],
                             "prompt": [r[2] for r in ROWS], "completion": [r[3] for r in ROWS],
                             "blocks": [r[4] for r in ROWS]}), parquet)
    return {"csv": csv, "jsonl": jsonl, "parquet": parquet}


def test_csv_jsonl_parquet_read_alike(tmp_path: Path) -> None:
    tables = {k: load_requests(p, SPEC).table for k, p in _write_all(tmp_path).items()}
    t = tables["csv"]
    assert t.column("arrival_s").to_pylist() == [0.0, 1.5, 2.0]
    assert t.column("session_id").to_pylist() == ["a", "b", "a"]
    assert t.column("parent_id").to_pylist() == [None, None, 0]
    assert t.column("turn").to_pylist() == [1, 1, 2]
    assert t.column("hash_ids").to_pylist() == [[1, 2], [1, 3], [1, 2, 4, 5]]
    assert t.column("hashed_tokens").to_pylist() == [32, 32, 64]      # min(input, 16 × blocks)
    assert t.column("output_tokens").to_pylist() == [5, 7, 9]
    for other in ("jsonl", "parquet"):
        assert tables[other].equals(t), other


def test_token_ids_hash_full_blocks_and_keys_follow_the_prefix(tmp_path: Path) -> None:
    p = tmp_path / "tok.jsonl"
    rows = [[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13], [9, 9, 9, 9, 5, 6, 7, 8]]
    p.write_text("".join(json.dumps({"t": i, "tok": r}) + "\n" for i, r in enumerate(rows)))
    res = load_requests(p, "columns:arrival=t,token_ids=tok,block_tokens=4")
    ids = res.table.column("hash_ids").to_pylist()
    assert [len(x) for x in ids] == [2, 3, 2]                          # full blocks only
    assert res.table.column("input_tokens").to_pylist() == [9, 12, 8]
    assert res.table.column("hashed_tokens").to_pylist() == [8, 12, 8]
    assert ids[0] == ids[1][:2]                                        # the same first 8 tokens
    # the third prompt's second block has the first's tokens, after another first block: no reuse
    assert ids[2][1] != ids[0][1] and ids[2][0] != ids[0][0]
    assert "derived" in res.keys


def test_block_hashes_are_content_hashes() -> None:
    off, ids = block_hashes(np.array([0, 8, 12]), np.array([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]), 4)
    assert off.tolist() == [0, 2, 3]
    assert ids[0] == ids[1] == ids[2]                                   # same tokens, same block hash
    _, other = block_hashes(np.array([0, 4]), np.array([1, 2, 4, 3]), 4)
    assert other[0] != ids[0]                                           # order matters


@pytest.mark.parametrize(("text", "line", "column", "words"), [
    ("ts_ms,prompt,blocks\n0,40,1 2\n5,x3,1 3\n", 3, "prompt", "expected an integer, got 'x3'"),
    ("ts_ms,prompt,blocks\n0,40,1 2\nsoon,33,1 3\n", 3, "ts_ms", "expected a number"),
    ("ts_ms,prompt,blocks\n0,40,1 2\n1,33,1 z\n", 3, "blocks", "a list of integers"),
    ("ts_ms,prompt,blocks\n0,40,1 2\n1,,1 2\n", 3, "prompt", "missing"),
    ("ts_ms,prompt,blocks\n0,-4,1 2\n", 2, "prompt", "negative"),
])
def test_bad_cells_name_file_row_and_column(tmp_path: Path, text: str, line: int, column: str, words: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(InputError) as err:
        load_requests(p, "columns:arrival=ts_ms,input_tokens=prompt,hash_ids=blocks")
    assert (err.value.path, err.value.line, err.value.field) == (str(p), line, column)
    assert words in err.value.message


def test_bad_parquet_cell(tmp_path: Path) -> None:
    p = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"t": [0.0, 1.0], "n": [12.0, 3.5], "b": [[1], [2]]}), p)   # 12.0 reads as 12
    with pytest.raises(InputError) as err:
        load_requests(p, "columns:arrival=t,input_tokens=n,hash_ids=b")
    assert (err.value.line, err.value.field) == (2, "n")


def test_skip_bad_counts_rows(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("ts_ms,prompt,blocks\n0,40,1 2\n5,x3,1 3\n7,20,1\n")
    res = load_requests(p, "columns:arrival=ts_ms,input_tokens=prompt,hash_ids=blocks", skip_bad=True)
    assert res.table.num_rows == 2 and res.skipped_lines == 1 and res.errors[0].line == 3


@pytest.mark.parametrize(("spec", "words"), [
    ("columns", "arrival"),
    ("columns:arrival=t,input_tokens=n", "exactly one of hash_ids"),
    ("columns:arrival=t,hash_ids=b", "input_tokens"),
    ("columns:arrival=t,input_tokens=n,hash_ids=b,colour=red", "unknown key"),
    ("columns:arrival=t,input_tokens=n,hash_ids=b,time_unit=days", "time_unit"),
    ("columns:arrival=t,input_tokens=n,hash_ids=b,block_tokens=0", "block_tokens"),
    ("columns:arrival=nope,input_tokens=n,hash_ids=b", "no such column"),
    ("mooncake:arrival=t", "takes no options"),
])
def test_bad_mappings_are_refused(tmp_path: Path, spec: str, words: str) -> None:
    p = tmp_path / "t.csv"
    p.write_text("t,n,b\n0,4,1\n")
    with pytest.raises(KvwearError, match=words):
        load_requests(p, spec)


def test_unknown_format_lists_columns(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("t,n,b\n0,4,1\n")
    with pytest.raises(UnknownNameError, match="columns"):
        load_requests(p, "colums:arrival=t")


@pytest.mark.parametrize("kind", ["csv", "parquet"])
@settings(max_examples=150, deadline=None)
@given(blob=st.binary(max_size=400))
def test_random_bytes_are_input_errors(kind: str, blob: bytes) -> None:
    """Any bytes as a CSV or Parquet file: rows, or one InputError naming the file (a broken header
    or footer is the file's error, raised with skip_bad too); never another exception."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / f"in.{kind}"
        src.write_bytes(blob)
        for skip in (False, True):
            try:
                res = load_requests(src, "columns:arrival=t,input_tokens=n,hash_ids=b", skip_bad=skip)
            except InputError as exc:
                assert exc.path == str(src)
            else:
                assert res.table.num_rows >= 0


@settings(max_examples=100, deadline=None)
@given(cells=st.lists(st.tuples(st.text(max_size=6), st.text(max_size=6), st.text(max_size=8)), max_size=8))
@example(cells=[("", "", "\x0c")])          # a form feed in the ids cell (was an ArrowInvalid)
def test_random_csv_cells_are_rows_or_skips(cells: list[tuple[str, str, str]]) -> None:
    """A CSV with a good header and arbitrary cells: under skip_bad every data line is a row or a
    counted skip; without it, rows or one InputError naming a line and a column."""
    import csv
    import io
    import tempfile

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["t", "n", "b"])
    rows = [c for c in cells if all("\n" not in x and "\r" not in x for x in c)]
    w.writerows(rows)
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "in.csv"
        src.write_text(buf.getvalue())
        spec = "columns:arrival=t,input_tokens=n,hash_ids=b"
        try:
            res = load_requests(src, spec, skip_bad=True)
        except InputError as exc:          # the CSV reader refusing the file as a whole
            assert exc.path == str(src) and exc.line is None
            return
        assert res.table.num_rows + res.skipped_lines == len(rows)
        try:
            load_requests(src, spec)
        except InputError as exc:
            assert exc.path == str(src) and exc.line is not None and exc.field in ("t", "n", "b")
