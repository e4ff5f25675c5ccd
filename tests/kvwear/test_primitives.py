from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from kvwear.errors import InputError, KvwearError, UnknownNameError
from kvwear.registry import Registry
from kvwear.tables import TableSpec, TableWriter, iter_table_batches, read_table, table_kind, write_table
from kvwear.units import format_bytes, parse_duration, parse_size

SPEC = TableSpec("demo", 2, pa.schema([pa.field("x_bytes", pa.int64()), pa.field("s", pa.string())]))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("100GB", 100 * 10**9), ("1.5GiB", 3 * 2**29), ("4096", 4096), (512, 512), ("2 TiB", 2 * 2**40)],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GB", "12 parsecs", "-1GB", -4])
def test_parse_size_rejects(bad: str | int) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(bad)


def test_durations_and_format() -> None:
    assert parse_duration("10min") == 600.0
    assert parse_duration("250ms") == pytest.approx(0.25)
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(1536, binary=False) == "1.54 kB"


def test_registry_unknown_name_lists_valid() -> None:
    reg: Registry[int] = Registry("policy")
    reg.add("lru", 1)
    reg.add("fifo", 2)
    assert reg.get("lru") == 1
    with pytest.raises(UnknownNameError) as ei:
        reg.get("lfu")
    assert str(ei.value) == "unknown policy 'lfu'; valid: fifo, lru"
    with pytest.raises(ValueError, match="twice"):
        reg.add("lru", 3)


def test_input_error_names_file_line_field() -> None:
    e = InputError("t.jsonl", 7, "hash_ids", "expected a list of integers")
    assert str(e) == "t.jsonl:7: field 'hash_ids': expected a list of integers"


def test_table_roundtrip_and_version_checks(tmp_path: Path) -> None:
    t = pa.table({"s": ["a", "b"], "x_bytes": [1, 2], "extra": [0, 0]})
    p = write_table(SPEC, t, tmp_path / "t.parquet")
    assert table_kind(p) == ("demo", 2)
    back = read_table(SPEC, p)
    assert back.column_names == ["x_bytes", "s"]
    newer = TableSpec("demo", 1, SPEC.schema)
    with pytest.raises(KvwearError, match="newer"):
        read_table(newer, p)
    other = TableSpec("other", 2, SPEC.schema)
    with pytest.raises(KvwearError, match="expected other"):
        read_table(other, p)


def test_writer_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "w.parquet"
    with pytest.raises(RuntimeError), TableWriter(SPEC, target) as w:
        w.write(pa.table({"x_bytes": [1], "s": ["a"]}))
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
    with TableWriter(SPEC, target) as w:
        w.write(pa.table({"x_bytes": [1, 2], "s": ["a", "b"]}))
    assert read_table(SPEC, target).num_rows == 2


def test_table_batches_stay_in_their_row_group_and_its_bound(tmp_path: Path) -> None:
    """`iter_table_batches` reads row group by row group (a batch never spans two) and sizes a
    group's batches by that group's values per row: long rows in one group make small batches
    there, whatever the file's average."""
    spec = TableSpec("lists", 1, pa.schema([pa.field("ids", pa.list_(pa.int64()))]))
    long_rows = [list(range(1_000))] * 40      # 40,000 values
    short_rows = [[1]] * 4_000                 # 4,000 values
    with TableWriter(spec, tmp_path / "l.parquet") as w:
        w.write(pa.table({"ids": long_rows}, schema=spec.schema), one_row_group=True)
        w.write(pa.table({"ids": short_rows}, schema=spec.schema), one_row_group=True)
    batches = list(iter_table_batches(spec, tmp_path / "l.parquet", max_values=10_000))
    assert sum(b.num_rows for b in batches) == 4_040
    assert [b.num_rows for b in batches[:4]] == [10, 10, 10, 10]   # the long group: 10,000 values each
    # the short group: the file's average (44,000 values over 4,040 rows) bounds it at 918 rows
    assert [b.num_rows for b in batches[4:]] == [918] * 4 + [4_000 - 4 * 918]
