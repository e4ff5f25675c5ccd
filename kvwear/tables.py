"""Versioned Parquet tables: every table kvwear writes carries its kind and schema version.

Writes are atomic (a temporary file renamed into place), so an interrupted run never leaves a
half-written table that looks complete. Reading checks the kind and the major version.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kvwear.errors import KvwearError

#: The Arrow type of a column of few distinct strings (an op, a phase, an object kind): int8 codes
#: into a dictionary, so a million-row table stores each string once.
CATEGORY = pa.dictionary(pa.int8(), pa.string())

KIND_KEY = b"kvwear.kind"
VERSION_KEY = b"kvwear.schema_version"


@dataclass(frozen=True)
class TableSpec:
    """A named, versioned Arrow schema (one per data contract)."""

    kind: str
    version: int
    schema: pa.Schema
    # columns added in a later version, with the value a table written without them means:
    # `conform` fills them in, so producers that predate the column keep working
    defaults: tuple[tuple[str, object], ...] = ()
    # what a reader checks of the values (a table's bounds): a factory of a check that is fed the
    # file's batches in order (path, index of its first row, batch) and raises on a bad row
    rows_check: Callable[[], Callable[[str, int, pa.RecordBatch], None]] | None = None

    def with_metadata(self) -> pa.Schema:
        meta = dict(self.schema.metadata or {})
        meta[KIND_KEY] = self.kind.encode()
        meta[VERSION_KEY] = str(self.version).encode()
        return self.schema.with_metadata(meta)

    def conform(self, table: pa.Table) -> pa.Table:
        """Select and cast `table`'s columns to this spec (raises on a missing column that has no
        default)."""
        defaults = dict(self.defaults)
        missing = [f.name for f in self.schema if f.name not in table.column_names and f.name not in defaults]
        if missing:
            raise KvwearError(f"{self.kind} table lacks columns: {', '.join(missing)}")
        cols = [table.column(f.name).cast(f.type) if f.name in table.column_names
                else pa.repeat(pa.scalar(defaults[f.name], f.type), table.num_rows)
                for f in self.schema]
        return pa.Table.from_arrays(cols, schema=self.with_metadata())

    def empty(self) -> pa.Table:
        return self.with_metadata().empty_table()


#: Row groups hold about this many bytes (Arrow, uncompressed), so that a reader streaming a
#: file by row group (`pq.ParquetFile.iter_batches`) holds one bounded piece of it, however
#: large its rows are (a requests row of a long-context trace holds thousands of hash ids).
#: Measured: reading a row group costs ~4x its Arrow bytes of RSS (decoding buffers, which
#: Arrow's pool keeps for reuse), so 64 MB groups cost ~300 MB; 16 MB groups keep it near 80.
ROW_GROUP_BYTES = 16 << 20


def row_group_rows(table: pa.Table) -> int:
    """Rows per row group for `table`: about ROW_GROUP_BYTES of it, at most 2^20 rows."""
    if table.num_rows == 0:
        return 1 << 20
    per_row = max(table.nbytes / table.num_rows, 1.0)
    return max(1, min(1 << 20, int(ROW_GROUP_BYTES // per_row)))


def atomic_path(path: Path) -> Path:
    """The temporary sibling a writer fills before renaming it to `path`."""
    return path.with_name(f".{path.name}.partial-{os.getpid()}")


def _writable(path: Path) -> None:
    """Refuse (one clear error) an output path that is a directory or whose folder cannot be made."""
    if path.is_dir():
        raise KvwearError(f"{path}: is a directory; the output is a file's path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvwearError(f"{path}: cannot create its folder: {exc.strerror}") from None


@contextmanager
def atomic_write(path: Path) -> Iterator[Path]:
    """`with atomic_write(path) as tmp:` fill `tmp`; on leaving the block it is renamed onto
    `path`, or removed if the block raised — so no reader ever sees a half-written file. The
    one way kvwear writes a file (tables, JSON, text, iologs)."""
    _writable(path)
    tmp = atomic_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise KvwearError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def output_folder(path: Path) -> Iterator[Path]:
    """`with output_folder(path):` make `path` (and its missing parents); if the block raises,
    remove the folders this made that are still empty, so a refused command leaves no output
    folder behind (a folder that existed before is kept, whatever it holds)."""
    made = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        for p in made:                    # deepest first
            try:
                p.rmdir()
            except OSError:               # not empty (an earlier output), or gone: keep it
                break
        raise


def write_table(spec: TableSpec, table: pa.Table, path: str | Path,
                metadata: Mapping[bytes, bytes] | None = None) -> Path:
    """Write `table` conformed to `spec` to `path` atomically, with `metadata` added to the file's
    schema metadata (what made the table, kept beside the spec's kind and version)."""
    path = Path(path)
    t = spec.conform(table)
    if metadata:
        t = t.replace_schema_metadata({**(t.schema.metadata or {}), **metadata})
    with atomic_write(path) as tmp:
        pq.write_table(t, tmp, compression="zstd", row_group_size=row_group_rows(t))
    return path


class TableWriter:
    """Streams record batches of one spec into a Parquet file, renamed into place on close.

    Use as a context manager; on an exception the partial file is removed.
    """

    def __init__(self, spec: TableSpec, path: str | Path, metadata: Mapping[bytes, bytes] | None = None) -> None:
        self.spec = spec
        self.path = Path(path)
        _writable(self.path)
        self._tmp = atomic_path(self.path)
        schema = spec.with_metadata()
        if metadata:        # added to the file's schema metadata, as write_table's
            schema = schema.with_metadata({**(schema.metadata or {}), **metadata})
        try:
            self._writer = pq.ParquetWriter(self._tmp, schema, compression="zstd")
        except OSError as exc:
            raise KvwearError(f"{self.path}: cannot write: {exc.strerror or exc}") from None
        self.rows = 0

    def write(self, table: pa.Table | pa.RecordBatch, one_row_group: bool = False) -> None:
        """Append `table` as row groups of about ROW_GROUP_BYTES, or as exactly one."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        t = self.spec.conform(table)
        self._writer.write_table(t, row_group_size=max(t.num_rows, 1) if one_row_group else row_group_rows(t))
        self.rows += t.num_rows

    def close(self) -> Path:
        self._writer.close()
        try:
            os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)       # the rename failed: no partial file stays
        return self.path

    def abort(self) -> None:
        self._writer.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class TableError(KvwearError):
    """A table file that is missing, not Parquet, truncated, of another kind or schema, or holds a
    value outside its table's bounds."""


def _damaged(path: str | Path, exc: BaseException) -> TableError:
    if isinstance(exc, FileNotFoundError):
        return TableError(f"{path}: missing")
    text = " ".join(str(exc).split())[:200]
    return TableError(f"{path}: not a readable Parquet table (truncated or damaged): {text}")


#: What pyarrow raises on a damaged file (ArrowInvalid is a ValueError; a short read an OSError).
READ_ERRORS = (pa.ArrowException, OSError, ValueError)


def table_kind(path: str | Path) -> tuple[str | None, int | None]:
    """The (kind, version) recorded in a Parquet file's metadata."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except READ_ERRORS as exc:
        raise _damaged(path, exc) from None
    kind = meta.get(KIND_KEY)
    ver = meta.get(VERSION_KEY)
    try:
        return (kind.decode() if kind else None, int(ver) if ver else None)
    except ValueError:
        raise TableError(f"{path}: its schema version {ver!r} is not a number (damaged metadata)") from None


def check_kind(spec: TableSpec, path: str | Path) -> None:
    """Refuse a file that holds another kind of table, a newer major version of `spec`, or lacks
    one of its columns (or holds it with another type)."""
    kind, version = table_kind(path)
    if kind != spec.kind:
        raise TableError(f"{path}: holds a {kind or 'foreign'} table, expected {spec.kind}")
    if version is None or version > spec.version:
        raise TableError(
            f"{path}: {spec.kind} schema version {version} is newer than this kvwear "
            f"understands ({spec.version}); upgrade kvwear"
        )
    schema = pq.read_schema(path)
    defaults = dict(spec.defaults)
    for f in spec.schema:
        if f.name not in schema.names:
            if f.name not in defaults:
                raise TableError(f"{path}: {spec.kind} table lacks its column {f.name!r}")
            continue
        have = schema.field(f.name).type
        if have != f.type and not _castable(have, f.type):
            raise TableError(f"{path}: column {f.name!r} holds {have}, expected {f.type}")


def _castable(have: pa.DataType, want: pa.DataType) -> bool:
    """A column written with a narrower or dictionary type that `conform` casts (int32 → int64,
    dictionary<string> → string) is the same column."""
    if pa.types.is_dictionary(have):
        have = have.value_type
    if have == want:
        return True
    return ((pa.types.is_integer(have) and pa.types.is_integer(want))
            or (pa.types.is_floating(have) and pa.types.is_floating(want))
            or ((pa.types.is_string(have) or pa.types.is_large_string(have)) and pa.types.is_string(want)))


def read_table(spec: TableSpec, path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """Read a table written for `spec`; refuses another kind, a newer major version, a damaged file
    and (reading every column) a value outside the spec's bounds, each with one TableError."""
    check_kind(spec, path)
    try:
        table = pq.read_table(path, columns=columns)
    except READ_ERRORS as exc:
        raise _damaged(path, exc) from None
    if spec.rows_check is not None and columns is None:
        check = spec.rows_check()
        first = 0
        for batch in table.to_batches():
            check(str(path), first, batch)
            first += batch.num_rows
    return table


#: `iter_table_batches` yields batches of at most this many values of the widest column.
BATCH_VALUES = 1 << 20


def iter_table_batches(spec: TableSpec, path: str | Path, columns: list[str] | None = None,
                       max_values: int = BATCH_VALUES) -> Iterator[pa.RecordBatch]:
    """Stream a table written for `spec` in record batches of bounded size (checks like
    `read_table`). A batch holds at most `max_values` values of the widest column on average,
    over the file and over its row group (list columns count their elements), at least one row
    and at most 65,536 rows: a batch of rows of one count alone would let long-context rows
    (thousands of hash ids each) make one batch of a whole file. Each row group is read by a
    reader of its own, dropped after it: one pyarrow reader over every row group keeps what it
    allocated for a list column as it goes (pyarrow 26: 43 → 112 MB live over the 274,096-row
    requests file of bench/scale.py's 4× workload, 18 MB flat read this way), so the memory of
    a read is one row group's, whatever the file's length."""
    check_kind(spec, path)
    try:
        pf = pq.ParquetFile(path)
    except READ_ERRORS as exc:
        raise _damaged(path, exc) from None
    meta = pf.metadata
    check = spec.rows_check() if spec.rows_check is not None and columns is None else None
    first = 0

    def widest(groups: range) -> int:
        return max((sum(meta.row_group(g).column(c).num_values for g in groups)
                    for c in range(meta.num_columns)), default=0)

    def rows_per_batch(values: int, rows: int) -> int:
        per_row = values / rows if rows else 1.0
        return max(1, min(65_536, int(max_values // max(per_row, 1.0))))

    whole = rows_per_batch(widest(range(meta.num_row_groups)), meta.num_rows)
    for g in range(meta.num_row_groups):
        rows = meta.row_group(g).num_rows
        if rows:
            batch_rows = min(whole, rows_per_batch(widest(range(g, g + 1)), rows))
            try:
                batches = list(pf.iter_batches(batch_size=batch_rows, row_groups=[g], columns=columns))
            except READ_ERRORS as exc:
                raise _damaged(path, exc) from None
            for batch in batches:
                if check is not None:
                    check(str(path), first, batch)
                first += batch.num_rows
                yield batch
