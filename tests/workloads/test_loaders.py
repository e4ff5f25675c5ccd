"""Trace loaders on the real traces (Mooncake, six Weka sessions) and on Qwen/AIPerf rows
written here to match their documented schemas; bad input; conversion round trip."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvwear.errors import InputError, UnknownNameError
from kvwear.tables import read_table, table_kind
from kvwear.workloads.loaders import (
    KEYS_DERIVED,
    KEYS_VERIFIED,
    LOADERS,
    ChainChecker,
    ChainViolation,
    convert_trace,
    detect_format,
    load_requests,
)
from kvwear.workloads.schema import REQUESTS


def write_lines(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# ---------------------------------------------------------------------------------------------
# Mooncake


def test_mooncake_real_trace_loads_completely(mooncake_path: Path) -> None:
    raw = [json.loads(line) for line in mooncake_path.read_text().splitlines()]
    res = load_requests(mooncake_path)
    t = res.table
    assert res.format == "mooncake" and res.skipped_lines == 0
    assert res.keys == KEYS_VERIFIED  # the README's promise holds on the real file
    assert t.num_rows == len(raw) == 12031
    assert t.schema.equals(REQUESTS.with_metadata(), check_metadata=False)
    # the file is in timestamp order, so rows keep file order: compare row by row
    assert t.column("hash_ids").to_pylist() == [r["hash_ids"] for r in raw]
    np.testing.assert_array_equal(t.column("arrival_s").to_numpy(),
                                  np.array([r["timestamp"] for r in raw]) / 1000.0)
    assert t.column("input_tokens").to_pylist() == [r["input_length"] for r in raw]
    assert t.column("output_tokens").to_pylist() == [r["output_length"] for r in raw]
    assert t.column("hashed_tokens").to_pylist() == [r["input_length"] for r in raw]
    assert set(t.column("block_tokens").to_pylist()) == {512}
    assert t.column("request_id").to_pylist() == list(range(len(raw)))
    assert t.column("session_id").null_count == t.num_rows


def test_mooncake_small_batches_give_the_same_table(mooncake_path: Path) -> None:
    a = load_requests(mooncake_path).table
    b = load_requests(mooncake_path, batch_rows=1000).table
    assert a.equals(b)


def test_mooncake_rows_out_of_order_are_sorted_stably(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 3000, "input_length": 10, "output_length": 1, "hash_ids": [5]},
        {"timestamp": 1000, "input_length": 10, "output_length": 2, "hash_ids": [6]},
        {"timestamp": 1000, "input_length": 10, "output_length": 3, "hash_ids": [7]},
    ]
    t = load_requests(write_lines(tmp_path / "m.jsonl", rows)).table  # type: ignore[arg-type]
    assert t.column("output_tokens").to_pylist() == [2, 3, 1]
    assert t.column("request_id").to_pylist() == [1, 2, 0]  # ids keep file order


@pytest.mark.parametrize(
    ("line", "field", "needle"),
    [
        ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": "abc"}', "hash_ids",
         "expected a list of integers, got str"),
        ('{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": []}', "input_length",
         "must not be negative"),
        ('{"timestamp": "x", "input_length": 5, "output_length": 1, "hash_ids": [1]}', "timestamp",
         "expected a number, got str"),
        ('{"timestamp": 1, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}', "hash_ids",
         "ceil(1025/512) = 3"),
        ('{"timestamp": 1, "output_length": 1, "hash_ids": [1]}', "input_length", "missing"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 1.5, "hash_ids": [1]}', "output_length",
         "expected an integer, got float"),
        ('{"timestamp": NaN, "input_length": 5, "output_length": 1, "hash_ids": [1]}', "timestamp",
         "expected a finite number"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1, true]}', "hash_ids",
         "element of type bool"),
        ('[1, 2, 3]', None, "expected a JSON object, got list"),
        ('{"timestamp": 1, "input_length": 5, "outp', None, "invalid JSON"),
    ],
)
def test_mooncake_bad_line_names_file_line_field(tmp_path: Path, line: str, field: str | None,
                                                 needle: str) -> None:
    good = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([good] * 16 + [line] + [good]) + "\n")
    with pytest.raises(InputError) as ei:
        load_requests(path, "mooncake")
    err = ei.value
    assert (err.path, err.line, err.field) == (str(path), 17, field)
    assert needle in str(err)
    assert str(err).startswith(f"{path}:17:")


def test_mooncake_truncated_last_line_is_an_error_on_that_line(tmp_path: Path, mooncake_path: Path) -> None:
    lines = mooncake_path.read_bytes().split(b"\n")[:50]
    path = tmp_path / "cut.jsonl"
    path.write_bytes(b"\n".join(lines[:49]) + b"\n" + lines[49][: len(lines[49]) // 2])
    with pytest.raises(InputError) as ei:
        load_requests(path, "mooncake")
    assert ei.value.line == 50
    res = load_requests(path, "mooncake", skip_bad=True)
    assert res.table.num_rows == 49 and res.skipped_lines == 1 and res.errors[0].line == 50


def test_skip_bad_counts_every_bad_line_and_keeps_the_first(tmp_path: Path) -> None:
    good = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
    rows: list[dict | str] = []
    for i in range(100):
        rows.append(good if i % 4 else '{"timestamp": 1, "input_length": 10, "output_length": 1}')
    rows.append("not json")
    path = write_lines(tmp_path / "s.jsonl", rows)
    res = load_requests(path, "mooncake", skip_bad=True)
    assert res.skipped_lines == 26 and res.table.num_rows == 75
    assert [e.line for e in res.errors[:3]] == [1, 5, 9]
    assert res.errors[0].field == "hash_ids"


def test_blank_lines_are_skipped_and_line_numbers_stay_right(tmp_path: Path) -> None:
    good = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'
    path = tmp_path / "b.jsonl"
    path.write_text(f"{good}\n\n   \n{good}\n" + '{"timestamp": 0}\n')
    with pytest.raises(InputError) as ei:
        load_requests(path, "mooncake")
    assert ei.value.line == 5


def test_two_objects_on_a_line_are_refused_even_beside_a_blank_line(tmp_path: Path) -> None:
    # Arrow's reader skips the blank line and splits the double line into two rows: the counts
    # cancelled out and the chunk was accepted with 4 rows and shifted line numbers
    good = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'
    path = tmp_path / "d.jsonl"
    path.write_text(f"{good}\n\n{good} {good}\n{good}\n")
    with pytest.raises(InputError, match="invalid JSON") as ei:
        load_requests(path, "mooncake")
    assert ei.value.line == 3


def test_unknown_format_lists_valid_ones(mooncake_path: Path) -> None:
    with pytest.raises(UnknownNameError) as ei:
        load_requests(mooncake_path, "sharegpt")
    for name in LOADERS.names():
        assert name in str(ei.value)


def test_undetectable_file_says_how_to_choose(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "x.jsonl", [{"foo": 1}])
    with pytest.raises(InputError, match="pass a format explicitly"):
        load_requests(path)
    with pytest.raises(InputError, match="no such file"):
        load_requests(tmp_path / "missing.jsonl")


def test_detection(tmp_path: Path, mooncake_path: Path, weka_dir: Path) -> None:
    assert detect_format(mooncake_path) == "mooncake"
    assert detect_format(weka_dir) == "weka"
    assert detect_format(weka_dir / "trace_0026.json") == "weka"
    q = write_lines(tmp_path / "q.jsonl", [QWEN_ROWS[0]])
    assert detect_format(q) == "qwen-bailian"
    a = write_lines(tmp_path / "a.jsonl", [AIPERF_ROWS[0]])
    assert detect_format(a) == "aiperf"


# ---------------------------------------------------------------------------------------------
# Prefix chaining


def test_broken_chaining_falls_back_to_whole_prefix_keys(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [3, 2]},  # 2 after 3
        {"timestamp": 2, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 4]},
    ]
    res = load_requests(write_lines(tmp_path / "c.jsonl", rows))  # type: ignore[arg-type]
    assert res.keys == KEYS_DERIVED and "hash id 2" in res.keys_note
    ids = res.table.column("hash_ids").to_pylist()
    assert ids[0][1] != ids[1][1]  # block 2 under different prefixes → different keys
    assert ids[0] == ids[2][:2]  # same prefix → same keys
    out = convert_trace(tmp_path / "c.jsonl", tmp_path / "c.parquet")
    assert out.keys == KEYS_DERIVED
    assert read_table(REQUESTS, out.path).column("hash_ids").to_pylist() == ids


def test_chain_checker_across_batches_and_namespaces() -> None:
    import pyarrow as pa

    def batch(lists: list[list[int]], ns: int) -> pa.Table:
        return pa.table({"hash_ids": pa.array(lists, pa.list_(pa.int64())),
                         "hash_ns": pa.array([ns] * len(lists), pa.int32()),
                         "request_id": pa.array(range(len(lists)), pa.int64())})

    c = ChainChecker()
    c.feed(batch([[1, 2, 3], [1, 2, 4]], 0))
    c.feed(batch([[2, 1]], 1))  # another namespace: no conflict
    c.feed(batch([[1, 2, 3, 5]], 0))
    with pytest.raises(ChainViolation):
        c.feed(batch([[2, 3]], 0))  # 2 was a second block before
    c2 = ChainChecker()
    with pytest.raises(ChainViolation):
        c2.feed(batch([[10, 11], [12, 11]], 0))  # conflict inside one batch
    c4 = ChainChecker()  # small ids first (dense), then a huge one: knowledge carries over
    c4.feed(batch([[1, 2]], 0))
    with pytest.raises(ChainViolation):
        c4.feed(batch([[2**40, 2]], 0))
    c3 = ChainChecker()  # huge ids take the sparse path
    c3.feed(batch([[2**60, 2**61], [2**60, 5]], 0))
    with pytest.raises(ChainViolation):
        c3.feed(batch([[7, 2**61]], 0))


# ---------------------------------------------------------------------------------------------
# Weka / Claude Code


def _weka_expected(path: Path) -> list[tuple[float, str, int, int]]:
    """(absolute t, stream, in, n ids) per request, read independently from the raw JSON."""
    doc = json.loads(path.read_text())
    out = []
    for r in doc["requests"]:
        if r["type"] == "subagent":
            for s in r["requests"]:
                out.append((r["t"] + s["t"], r["agent_id"], s["in"], len(s["hash_ids"])))
        else:
            out.append((r["t"], "main", r["in"], len(r["hash_ids"])))
    return out


def test_all_six_weka_traces_load_with_subagents_flattened(weka_dir: Path) -> None:
    files = sorted(weka_dir.glob("*.json"))
    assert len(files) == 6
    res = load_requests(weka_dir)
    t = res.table
    assert res.format == "weka" and res.keys == KEYS_VERIFIED
    total = 0
    for ns, f in enumerate(files):
        want = _weka_expected(f)
        doc = json.loads(f.read_text())
        sub = t.filter(np.asarray(t.column("hash_ns").to_numpy()) == ns)
        assert sub.num_rows == len(want)
        assert set(sub.column("session_id").to_pylist()) == {doc["id"]}
        got = sorted(zip(sub.column("arrival_s").to_pylist(), sub.column("stream_id").to_pylist(),
                         sub.column("input_tokens").to_pylist(),
                         [len(x) for x in sub.column("hash_ids").to_pylist()], strict=True))
        assert got == sorted(want)
        n_sub = sum(1 for w in want if w[1] != "main")
        assert n_sub == sum(len(r["requests"]) for r in doc["requests"] if r["type"] == "subagent")
        assert (np.asarray(sub.column("hashed_tokens")) == 64 * np.asarray(
            [len(x) for x in sub.column("hash_ids").to_pylist()])).all()
        cats = set(zip(sub.column("stream_id").to_pylist(), sub.column("category").to_pylist(), strict=True))
        assert all((c == "agentic") == (s == "main") for s, c in cats)
        total += len(want)
    assert t.num_rows == total == 463
    arr = t.column("arrival_s").to_numpy()
    assert (np.diff(arr) >= 0).all()


def test_weka_subagent_parent_and_turns(weka_dir: Path) -> None:
    t = load_requests(weka_dir / "trace_0277.json").table
    rows = t.to_pylist()
    by_id = {r["request_id"]: r for r in rows}
    for r in rows:
        if r["turn"] == 1 and r["stream_id"] == "main":
            assert r["parent_id"] is None
        elif r["turn"] == 1:  # first subagent request: spawned by a main request not after it
            parent = by_id[r["parent_id"]]
            assert parent["stream_id"] == "main" and parent["arrival_s"] <= r["arrival_s"]
        else:
            parent = by_id[r["parent_id"]]
            assert parent["stream_id"] == r["stream_id"] and parent["turn"] == r["turn"] - 1


def test_weka_bad_entries(tmp_path: Path) -> None:
    doc = {"id": "x", "block_size": 64, "requests": [
        {"t": 0.0, "type": "n", "model": "m", "in": 130, "out": 5, "hash_ids": [1, 2]},
        {"t": 1.0, "type": "n", "model": "m", "in": 130, "out": 5, "hash_ids": [1, 2, 3]},
        {"t": 2.0, "type": "subagent", "agent_id": "a1", "requests": [
            {"t": 0.0, "type": "n", "in": 64, "out": 1, "hash_ids": [9]},
            {"t": 1.5, "type": "n", "in": 64, "out": "1", "hash_ids": [9]}]},
    ]}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as ei:
        load_requests(path, "weka")
    assert ei.value.field == "requests[1].hash_ids" and "floor(130/64) = 2" in str(ei.value)
    res = load_requests(path, "weka", skip_bad=True)
    assert res.skipped_lines == 2
    assert res.errors[1].field == "requests[2].requests[1].out"
    assert res.table.column("arrival_s").to_pylist() == [0.0, 2.0]
    path.write_text(json.dumps(doc)[:-40])
    with pytest.raises(InputError, match="invalid JSON") as ei:
        load_requests(path, "weka")
    assert ei.value.line == 1


# ---------------------------------------------------------------------------------------------
# Qwen-Bailian (rows written to match the published schema)

QWEN_ROWS = [
    {"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521, "output_length": 132,
     "type": "text", "turn": 1, "hash_ids": list(range(1089, 1122))},
    {"chat_id": 160, "parent_chat_id": -1, "timestamp": 62.0, "input_length": 40, "output_length": 10,
     "type": "search", "turn": 1, "hash_ids": [7, 8, 9]},
    {"chat_id": 170, "parent_chat_id": 159, "timestamp": 70.5, "input_length": 700, "output_length": 20,
     "type": "text", "turn": 2, "hash_ids": [*range(1089, 1121), 6326, *range(13000, 13011)]},
    {"chat_id": 171, "parent_chat_id": 170, "timestamp": 65.0, "input_length": 33, "output_length": 2,
     "type": "file", "turn": 3, "hash_ids": [1089, 5]},
    {"chat_id": 180, "parent_chat_id": 99, "timestamp": 80.0, "input_length": 16, "output_length": 2,
     "type": "image", "turn": 4, "hash_ids": [1]},
]


def test_qwen_rows(tmp_path: Path) -> None:
    res = load_requests(write_lines(tmp_path / "q.jsonl", QWEN_ROWS))  # type: ignore[arg-type]
    assert res.format == "qwen-bailian" and res.keys == KEYS_DERIVED
    t = {r["request_id"]: r for r in res.table.to_pylist()}
    assert [r["request_id"] for r in res.table.to_pylist()] == [159, 160, 171, 170, 180]  # by arrival
    assert t[170]["session_id"] == "159" and t[171]["session_id"] == "159" and t[159]["session_id"] == "159"
    assert t[160]["session_id"] == "160" and t[180]["session_id"] == "99"  # missing parent roots the chain
    assert t[159]["parent_id"] is None and t[171]["parent_id"] == 170
    assert t[170]["category"] == "text" and t[171]["category"] == "file" and t[171]["turn"] == 3
    assert t[159]["block_tokens"] == 16 and t[159]["hashed_tokens"] == 521
    assert t[171]["hashed_tokens"] == 32  # min(input, 16·ids)
    # derived keys: the shared 32-block prefix of 159 and 170 gives equal keys, then they differ
    assert t[170]["hash_ids"][:32] == t[159]["hash_ids"][:32]
    assert t[170]["hash_ids"][32] != t[159]["hash_ids"][32]
    assert t[171]["hash_ids"][0] == t[159]["hash_ids"][0]


def test_qwen_duplicate_chat_id(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "q.jsonl", [QWEN_ROWS[0], QWEN_ROWS[1], QWEN_ROWS[0]])  # type: ignore[list-item]
    with pytest.raises(InputError) as ei:
        load_requests(path)
    assert (ei.value.line, ei.value.field) == (3, "chat_id")
    assert load_requests(path, skip_bad=True).skipped_lines == 1


# ---------------------------------------------------------------------------------------------
# AIPerf mooncake_trace (rows written to match AIPerf's documented fields)

AIPERF_ROWS = [
    {"session_id": "s1", "input_length": 600, "output_length": 10, "hash_ids": [1, 2]},
    {"session_id": "s2", "timestamp": 500, "input_length": 100, "output_length": 5, "hash_ids": [3]},
    {"session_id": "s1", "delay": 2000, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 4]},
    {"input_length": 50, "hash_ids": [9]},
    {"session_id": "s2", "delay": 250, "input_length": 200, "output_length": 5},
]


def test_aiperf_rows(tmp_path: Path) -> None:
    res = load_requests(write_lines(tmp_path / "a.jsonl", AIPERF_ROWS))  # type: ignore[arg-type]
    assert res.format == "aiperf" and res.keys == KEYS_VERIFIED
    t = {r["request_id"]: r for r in res.table.to_pylist()}
    assert t[0]["arrival_s"] == 0.0
    assert t[1]["arrival_s"] == 0.5
    assert t[2]["arrival_s"] == 2.0 and t[2]["parent_id"] == 0 and t[2]["turn"] == 2
    assert t[3]["arrival_s"] == 2.0 and t[3]["session_id"] is None and t[3]["turn"] is None
    assert t[3]["output_tokens"] == 0
    assert t[4]["arrival_s"] == 0.75 and t[4]["parent_id"] == 1 and t[4]["hash_ids"] == []
    assert t[4]["hashed_tokens"] == 0 and t[2]["hashed_tokens"] == 1100
    assert res.table.column("request_id").to_pylist() == [0, 1, 4, 2, 3]


# ---------------------------------------------------------------------------------------------
# Conversion to Parquet


def test_convert_round_trip(tmp_path: Path, mooncake_path: Path, weka_dir: Path) -> None:
    for src in (mooncake_path, weka_dir):
        out = tmp_path / f"{src.stem}.parquet"
        res = convert_trace(src, out)
        assert table_kind(out) == ("requests", REQUESTS.version)
        back = read_table(REQUESTS, out)
        loaded = load_requests(src).table
        assert back.num_rows == res.rows == loaded.num_rows
        assert back.equals(loaded)
        assert res.bytes_read == sum(p.stat().st_size for p in weka_dir.glob("*.json")) \
            if src.is_dir() else src.stat().st_size
    assert res.resorted  # six sessions all start at t=0


def test_convert_with_block_conversion(tmp_path: Path, weka_dir: Path) -> None:
    out = tmp_path / "w16.parquet"
    convert_trace(weka_dir, out, block_tokens=16)
    t = read_table(REQUESTS, out)
    assert set(t.column("block_tokens").to_pylist()) == {16}
    src = load_requests(weka_dir).table
    assert [len(x) for x in t.column("hash_ids").to_pylist()] == [4 * len(x) for x in src.column(
        "hash_ids").to_pylist()]


def test_convert_failure_leaves_no_file(tmp_path: Path) -> None:
    good = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
    path = write_lines(tmp_path / "bad.jsonl", [good] * 10 + ['{"timestamp": oops}'])  # type: ignore[list-item]
    out = tmp_path / "o" / "bad.parquet"
    with pytest.raises(InputError):
        convert_trace(path, out, "mooncake")
    assert not out.exists() and list(out.parent.iterdir()) == []
    res = convert_trace(path, out, "mooncake", skip_bad=True)
    assert res.rows == 10 and res.skipped_lines == 1 and pq.read_metadata(out).num_rows == 10


def test_long_lines_and_many_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a line longer than Arrow's block and chunks cut mid-file must not change the result
    from kvwear.workloads.loaders import jsonl

    monkeypatch.setattr(jsonl, "CHUNK_BYTES", 4096)
    rows = [{"timestamp": i, "input_length": 512 * n, "output_length": 1, "hash_ids": list(range(n))}
            for i, n in enumerate([3, 300_000, 2, 7] * 3)]
    path = write_lines(tmp_path / "long.jsonl", rows)  # type: ignore[arg-type]
    t = load_requests(path, "mooncake").table
    assert [len(x) for x in t.column("hash_ids").to_pylist()] == [len(r["hash_ids"]) for r in rows]
    assert t.column("hashed_tokens").to_pylist() == [r["input_length"] for r in rows]
    assert math.isclose(t.column("arrival_s")[5].as_py(), 0.005)


def test_stream_requests_reads_back_what_load_requests_loads(tmp_path: Path, weka_dir: Path,
                                                             mooncake_path: Path) -> None:
    """Streamed raw traces (bounded batches from a temporary Parquet) hold exactly the loaded rows,
    can be read more than once, and leave nothing behind."""
    from kvwear.workloads.loaders import stream_requests

    for path, block_tokens in ((weka_dir, None), (mooncake_path, 64)):
        ref = REQUESTS.conform(load_requests(path, block_tokens=block_tokens).table)
        with stream_requests(path, block_tokens=block_tokens, tmp_dir=tmp_path) as s:
            assert s.result.rows == ref.num_rows
            assert s.result.format == ("weka" if path == weka_dir else "mooncake")
            for _ in range(2):
                batches = list(s.batches())
                assert REQUESTS.conform(pa.Table.from_batches(batches)).equals(ref)
            assert s.result.path.is_file()
        assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError):
        stream_requests(tmp_path / "missing.jsonl", tmp_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
