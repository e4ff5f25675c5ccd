"""Values bounded by what they mean (issue #28, kvwear.workloads.bounds): one absurd value, drawn
by hypothesis, in one record of an otherwise valid trace or requests table is refused naming the
line (or row) and field; `skip_bad` drops and counts exactly that record; the bounds move with
their environment variables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.errors import InputError
from kvwear.tables import TableError, read_table
from kvwear.workloads.bounds import DEFAULT_MAX_CONTEXT_TOKENS, DEFAULT_MAX_SPAN_S
from kvwear.workloads.loaders import convert_trace, load_requests
from kvwear.workloads.schema import REQUESTS
from tests.adversarial import one_line_error

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
N_ROWS = 6

span_ms = DEFAULT_MAX_SPAN_S * 1000
ABSURD_TIME_MS = st.one_of(st.floats(min_value=span_ms * 1.0001, max_value=1e308), st.integers(2**63, 2**80),
                           st.integers(int(span_ms) + 1, 2**63 - 1))
ABSURD_TOKENS = st.integers(DEFAULT_MAX_CONTEXT_TOKENS + 1, 2**63 - 1)


def mooncake_rows() -> list[dict[str, object]]:
    return [{"timestamp": 1000 * i, "input_length": 600, "output_length": 10, "hash_ids": [i, 100 + i]}
            for i in range(N_ROWS)]


@st.composite
def absurd_mooncake(draw: st.DrawFn) -> tuple[list[dict[str, object]], int, str]:
    rows = mooncake_rows()
    at = draw(st.integers(0, N_ROWS - 1))
    field = draw(st.sampled_from(["timestamp", "input_length", "output_length"]))
    if field == "timestamp":
        value: object = draw(ABSURD_TIME_MS)
    elif field == "input_length":
        value = draw(st.one_of(ABSURD_TOKENS, st.just(0)))
        if value == 0:
            rows[at]["hash_ids"] = []         # consistent with its length: still no prompt
    else:
        value = draw(ABSURD_TOKENS)
    rows[at][field] = value
    return rows, at, field


@SETTINGS
@given(case=absurd_mooncake())
def test_an_absurd_mooncake_value_names_its_line_and_field(tmp_path: Path, case: tuple) -> None:
    rows, at, field = case
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError) as exc:
        load_requests(path, "mooncake")
    assert (exc.value.line, exc.value.field) == (at + 1, field), str(exc.value)
    assert "\n" not in str(exc.value)
    res = load_requests(path, "mooncake", skip_bad=True)
    assert (res.skipped_lines, res.table.num_rows) == (1, N_ROWS - 1)
    assert res.table.column("arrival_s").to_numpy().max() <= DEFAULT_MAX_SPAN_S


@SETTINGS
@given(field=st.sampled_from(["in", "out", "t"]), data=st.data())
def test_an_absurd_weka_value_names_its_request_and_field(tmp_path: Path, field: str, data: st.DataObject) -> None:
    reqs: list[dict[str, object]] = [{"t": float(i), "type": "n", "in": 130, "out": 2, "hash_ids": [i, 50 + i]}
                                     for i in range(4)]
    at = data.draw(st.integers(0, 3))
    reqs[at][field] = data.draw(st.floats(DEFAULT_MAX_SPAN_S * 1.0001, 1e300) if field == "t" else
                                st.one_of(ABSURD_TOKENS, st.just(0) if field == "in" else st.nothing()))
    if field == "in" and reqs[at]["in"] == 0:
        reqs[at]["hash_ids"] = []
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"id": "w", "block_size": 64, "requests": reqs}))
    with pytest.raises(InputError) as exc:
        load_requests(path, "weka")
    assert exc.value.field == f"requests[{at}].{field}", str(exc.value)


VALUE_FAULTS = {
    "arrival_s": st.one_of(st.just(math.nan), st.just(math.inf), st.floats(max_value=-1e-9, allow_infinity=False)),
    "input_tokens": st.one_of(st.integers(-(2**63), 0), ABSURD_TOKENS),
    "output_tokens": st.one_of(st.integers(-(2**63), -1), ABSURD_TOKENS),
    "block_tokens": st.one_of(st.integers(-(2**31), 0), st.integers(2**20 + 1, 2**31 - 1)),
    "hashed_tokens": st.one_of(st.integers(-(2**63), -1), st.integers(601, 2**40)),
    "turn": st.integers(-(2**31), -1),
}


@pytest.fixture(scope="module")
def requests_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("req")
    src = d / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in mooncake_rows()))
    return convert_trace(src, d / "requests.parquet", "mooncake").path


@SETTINGS
@given(field=st.sampled_from(sorted(VALUE_FAULTS)), data=st.data())
def test_a_requests_table_read_back_is_checked_row_by_row(
    requests_file: Path, tmp_path: Path, field: str, data: st.DataObject,
) -> None:
    t = pq.read_table(requests_file)
    read_table(REQUESTS, requests_file)           # the good one reads
    at = data.draw(st.integers(0, N_ROWS - 1))
    col = t.column(field).to_pylist()
    col[at] = data.draw(VALUE_FAULTS[field])
    typ = t.schema.field(field).type
    t = t.set_column(t.schema.get_field_index(field), t.schema.field(field), pa.array(col, typ))
    bad = tmp_path / "bad.parquet"
    pq.write_table(t, bad)
    with pytest.raises(TableError, match=rf"^{bad}: field '\w+': row {at + 1}: ") as exc:
        read_table(REQUESTS, bad)
    assert "\n" not in str(exc.value)


@SETTINGS
@given(field=st.sampled_from(sorted(VALUE_FAULTS)), data=st.data())
def test_simulate_on_an_absurd_requests_table_is_one_line_and_leaves_no_output_folder(
    requests_file: Path, tmp_path: Path, field: str, data: st.DataObject,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = pq.read_table(requests_file)
    col = t.column(field).to_pylist()
    col[data.draw(st.integers(0, N_ROWS - 1))] = data.draw(VALUE_FAULTS[field])
    t = t.set_column(t.schema.get_field_index(field), t.schema.field(field), pa.array(col, t.schema.field(field).type))
    bad, out = tmp_path / "bad.parquet", tmp_path / "sim" / "out"
    pq.write_table(t, bad)
    line = one_line_error(["simulate", "-t", str(bad), "-p", "lru", "-p", "fifo", "--dram", "1GB", "--ssd", "4GB",
                           "-o", str(out)], capsys, monkeypatch)
    assert line.startswith(f"{bad}: field "), line
    assert not (tmp_path / "sim").exists(), sorted(map(str, (tmp_path / "sim").rglob("*")))


def test_simulate_refuses_a_table_of_no_requests(
    requests_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    empty = tmp_path / "empty.parquet"
    pq.write_table(pq.read_table(requests_file).slice(0, 0), empty)
    line = one_line_error(["simulate", "-t", str(empty), "-o", str(tmp_path / "sim")], capsys, monkeypatch)
    assert line == f"{empty}: holds no requests; nothing to simulate"
    assert not (tmp_path / "sim").exists()


def test_a_hash_list_inconsistent_with_its_tokens_and_a_span_too_long(requests_file: Path, tmp_path: Path) -> None:
    t = pq.read_table(requests_file)
    ids = t.column("hash_ids").to_pylist()
    ids[2] = ids[2] + [999]
    bad = tmp_path / "ids.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("hash_ids"), t.schema.field("hash_ids"),
                                pa.array(ids, t.schema.field("hash_ids").type)), bad)
    with pytest.raises(TableError, match="field 'hash_ids': row 3: holds 3 ids; hashed_tokens 600"):
        read_table(REQUESTS, bad)
    arr = t.column("arrival_s").to_pylist()
    arr[-1] = DEFAULT_MAX_SPAN_S * 2
    far = tmp_path / "far.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("arrival_s"), t.schema.field("arrival_s"),
                                pa.array(arr, pa.float64())), far)
    with pytest.raises(TableError, match=f"field 'arrival_s': row {N_ROWS}: .* lies too far") as exc:
        read_table(REQUESTS, far)
    assert "inf" not in str(exc.value), exc.value       # one batch: no span before it to name


def test_the_bounds_follow_their_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mooncake_rows()))
    assert load_requests(path, "mooncake").table.num_rows == N_ROWS
    monkeypatch.setenv("KVWEAR_MAX_CONTEXT_TOKENS", "500")
    with pytest.raises(InputError, match=r"m.jsonl:1: field 'input_length': 600 tokens; expected 1 to 500"):
        load_requests(path, "mooncake")
    monkeypatch.setenv("KVWEAR_MAX_CONTEXT_TOKENS", "1_000")
    monkeypatch.setenv("KVWEAR_MAX_SPAN_S", "3")
    with pytest.raises(InputError, match=r"m.jsonl:5: field 'timestamp': 4000 ms"):
        load_requests(path, "mooncake")
    monkeypatch.setenv("KVWEAR_MAX_SPAN_S", "-1")
    with pytest.raises(InputError, match=r"\$KVWEAR_MAX_SPAN_S: expected a positive number"):
        load_requests(path, "mooncake")


def test_converting_a_requests_table_says_it_is_one(requests_file: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is already a kvwear requests table"):
        convert_trace(requests_file, tmp_path / "again.parquet")
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), other)
    with pytest.raises(InputError, match=r"a Parquet file \(not kvwear's\).*--format columns:"):
        convert_trace(other, tmp_path / "again.parquet")
    assert not (tmp_path / "again.parquet").exists()
