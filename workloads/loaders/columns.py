"""The generic importer: a CSV, JSONL or Parquet trace in a layout kvwear does not know, read
through a column mapping given in the format spec.

Spec: `columns:arrival=COL,input_tokens=COL,hash_ids=COL,…` on the command line (`--format`) or
in a run config (`[workload] format`). Keys:
  * `arrival` (required): arrival time, in `time_unit` (s, ms, us or ns; default s) from any origin;
  * `input_tokens`: prompt length (required unless `token_ids` is mapped: then its length);
  * `output_tokens` (optional, 0 when unmapped);
  * `hash_ids`: per-block ids of the prompt, `block_tokens` tokens each (default 16), expected
    prefix-chained (a given id always follows the same ids; the pipeline verifies that and derives
    keys from the whole prefix when it does not hold); or
  * `token_ids`: the prompt's token ids, hashed here into one id per full block of `block_tokens`
    (a partial last block is not hashed, as Weka's traces do); keys are then derived from the
    whole prefix by the pipeline, so two prompts share a block only when they share every token
    up to its end;
  * `session` (optional): a session or conversation id; a row continuing a session gets the
    previous row of that session as `parent_id` and the next `turn` number;
  * `category`, `model` (optional): columns copied as they are (category "default" when unmapped);
  * `file`: csv, jsonl or parquet (default: the file's suffix).
Exactly one of `hash_ids` and `token_ids` is mapped. In CSV a list is one cell of integers
separated by spaces, commas or semicolons, optionally in brackets (`"[1, 2, 3]"`).

Errors name the file, the row (CSV: the file's line, the header being line 1; JSONL: the line;
Parquet: the 1-based row) and the source column. Column names holding a comma or `=` cannot be
mapped (the spec's separators). This module only parses; it must not sort or write files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from kvwear.errors import InputError
from kvwear.workloads.loaders.base import LOADERS, ProgressFn, TraceLoader, const_str, make_list, requests_batch
from kvwear.workloads.loaders.jsonl import JsonField, JsonlLoader
from kvwear.workloads.schema import list_parts

#: Seconds per `time_unit`.
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
FILE_KINDS = ("csv", "jsonl", "parquet")
_COLUMN_KEYS = ("arrival", "session", "input_tokens", "output_tokens", "hash_ids", "token_ids", "category", "model")
_SETTINGS = ("block_tokens", "time_unit", "file")
#: Kind of each mapped column (JsonField kinds: the checks of the JSONL engine run on every container).
_KINDS = {"arrival": "num", "session": "str", "input_tokens": "int", "output_tokens": "int", "hash_ids": "ids",
          "token_ids": "ids", "category": "str", "model": "str"}

_INT_RE = r"^\s*[-+]?[0-9]+\s*$"
_NUM_RE = r"^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$"
_IDS_RE = r"^\s*\[?\s*(-?[0-9]+(\s*[,; ]\s*-?[0-9]+)*)?\s*,?\s*\]?\s*$"

#: Rows per batch read from a CSV or Parquet file.
BATCH_ROWS = 65536


@dataclass(frozen=True)
class ColumnMap:
    """A parsed `columns:` spec: source column per requests field, and the settings."""

    columns: tuple[tuple[str, str], ...] = ()     # (key, source column)
    block_tokens: int = 16
    time_unit: str = "s"
    file: str = ""                                 # "" = from the suffix

    @classmethod
    def parse(cls, options: Mapping[str, str], where: str) -> ColumnMap:
        unknown = [k for k in options if k not in _COLUMN_KEYS + _SETTINGS]
        if unknown:
            raise InputError(where, None, unknown[0], "unknown key; valid: " + ", ".join(_COLUMN_KEYS + _SETTINGS))
        cols = {k: v for k, v in options.items() if k in _COLUMN_KEYS}
        for k, v in cols.items():
            if not v:
                raise InputError(where, None, k, "names no column")
        if "arrival" not in cols:
            raise InputError(where, None, "arrival", "required: the column of arrival times (arrival=COLUMN)")
        if ("hash_ids" in cols) == ("token_ids" in cols):
            raise InputError(where, None, "hash_ids", "map exactly one of hash_ids (per-block ids) and token_ids "
                             "(token ids kvwear hashes into blocks)")
        if "input_tokens" not in cols and "token_ids" not in cols:
            raise InputError(where, None, "input_tokens", "required unless token_ids is mapped")
        try:
            block = int(options.get("block_tokens", "16"))
        except ValueError:
            raise InputError(where, None, "block_tokens", f"expected an integer, got {options['block_tokens']!r}"
                             ) from None
        if not 1 <= block <= 1 << 20:
            raise InputError(where, None, "block_tokens", f"must be 1 … 1048576, got {block}")
        unit = options.get("time_unit", "s")
        if unit not in TIME_UNITS:
            raise InputError(where, None, "time_unit", f"expected one of {', '.join(TIME_UNITS)}, got {unit!r}")
        kind = options.get("file", "")
        if kind and kind not in FILE_KINDS:
            raise InputError(where, None, "file", f"expected one of {', '.join(FILE_KINDS)}, got {kind!r}")
        return cls(tuple(cols.items()), block, unit, kind)

    def source(self, key: str) -> str | None:
        return dict(self.columns).get(key)

    def file_kind(self, path: Path) -> str:
        if self.file:
            return self.file
        suffix = path.suffix.lower().lstrip(".")
        kind = {"csv": "csv", "jsonl": "jsonl", "json": "jsonl", "ndjson": "jsonl", "parquet": "parquet",
                "pq": "parquet"}.get(suffix)
        if kind is None:
            raise InputError(str(path), None, None, "cannot tell CSV, JSONL or Parquet from the suffix "
                             f"{path.suffix!r}; add file=csv|jsonl|parquet to the columns: spec")
        return kind


def block_hashes(offsets: np.ndarray, tokens: np.ndarray, block_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, ids): one 64-bit content hash per full block of `block_tokens` tokens of each
    list (a partial last block gets none). Vectorized: a polynomial hash of the block's tokens
    (wrapping uint64 arithmetic) mixed by splitmix64; prefix chaining is the pipeline's job."""
    from kvwear.workloads.blocks import splitmix64

    lengths = np.diff(offsets)
    nblocks = lengths // block_tokens
    out_offsets = np.concatenate([[0], np.cumsum(nblocks)]).astype(np.int64)
    total = int(out_offsets[-1])
    if total == 0:
        return out_offsets, np.zeros(0, dtype=np.int64)
    # the start of every full block, in the flat token array
    row = np.repeat(np.arange(len(nblocks)), nblocks)
    k = np.arange(total) - out_offsets[:-1][row]
    starts = offsets[:-1][row] + k * block_tokens
    idx = starts[:, None] + np.arange(block_tokens)[None, :]
    with np.errstate(over="ignore"):
        t = splitmix64(tokens.astype(np.int64).view(np.uint64)[idx])
        weights = np.full(block_tokens, 0x9E3779B97F4A7C15, dtype=np.uint64) ** np.arange(
            1, block_tokens + 1, dtype=np.uint64)
        h = (t * weights[None, :]).sum(axis=1, dtype=np.uint64)
        ids = splitmix64(h ^ np.uint64(block_tokens))
    return out_offsets, ids.view(np.int64)


class ColumnsLoader(JsonlLoader):
    """A CSV, JSONL or Parquet file read through a `ColumnMap`."""

    name = "columns"
    description = "generic CSV / JSONL / Parquet with a column mapping (columns:arrival=COL,input_tokens=COL,…)"

    def __init__(self, mapping: ColumnMap | None = None) -> None:
        self.map = mapping or ColumnMap()
        self.chained = "token_ids" not in dict(self.map.columns)
        # the JSONL engine's fields: named by the source columns, checked by kind
        required = {"arrival", "input_tokens", "hash_ids", "token_ids"}
        # (fields is a ClassVar of the fixed formats; here it is per mapping)
        self.fields = tuple(  # type: ignore[misc]
            JsonField(src, _KINDS[key], required=key in required, nonneg=key in ("input_tokens", "output_tokens"),
                      bound={"input_tokens": "prompt", "output_tokens": "tokens"}.get(key))
            for key, src in self.map.columns)
        self._next_id = 0
        self._sessions: dict[str, tuple[int, int]] = {}

    @classmethod
    def configured(cls, options: Mapping[str, str], where: str) -> Callable[[], TraceLoader]:
        mapping = ColumnMap.parse(options, where)
        return lambda: cls(mapping)

    def sniff(self, first_bytes: bytes, path: Path) -> bool:
        return False          # a mapping is needed: never detected, always named

    def reset(self, path: Path) -> None:
        self._next_id = 0
        self._sessions = {}

    # -- sources -------------------------------------------------------------------------------

    def raw_chunks(self, path: Path, progress: ProgressFn | None
                   ) -> Iterator[tuple[pa.Table, np.ndarray, list[InputError]]]:
        if not self.fields:
            raise InputError(str(path), None, None, "the columns format needs a mapping: "
                             "columns:arrival=COLUMN,input_tokens=COLUMN,hash_ids=COLUMN (see the trace guide)")
        kind = self.map.file_kind(path)
        if kind == "jsonl":
            yield from super().raw_chunks(path, progress)
        elif kind == "csv":
            yield from self._csv_chunks(path, progress)
        else:
            yield from self._parquet_chunks(path, progress)

    def _missing_columns(self, path: Path, names: list[str]) -> None:
        missing = [f.name for f in self.fields if f.name not in names]
        if missing:
            raise InputError(str(path), 1, missing[0], f"no such column; the file has: {', '.join(names)}")

    def _csv_chunks(self, path: Path, progress: ProgressFn | None
                    ) -> Iterator[tuple[pa.Table, np.ndarray, list[InputError]]]:
        with open(path, "rb") as fh:
            header = fh.readline().decode("utf-8", "replace").strip()
        names = [n.strip().strip('"') for n in header.split(",")] if header else []
        self._missing_columns(path, names)
        wanted = [f.name for f in self.fields]
        try:
            reader = pcsv.open_csv(path, convert_options=pcsv.ConvertOptions(
                include_columns=wanted, column_types={n: pa.string() for n in wanted},
                strings_can_be_null=True))
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(str(path), None, None, f"cannot read as CSV: {exc}") from None
        first_line = 2                         # the header is line 1 (a quoted cell holding a line
        size = path.stat().st_size             # break would shift the lines named after it)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except pa.ArrowInvalid as exc:
                raise InputError(str(path), None, None, f"cannot read as CSV: {exc}") from None
            n = batch.num_rows
            lines = np.arange(first_line, first_line + n, dtype=np.int64)
            first_line += n
            yield self._typed_from_strings(pa.Table.from_batches([batch]), lines, path)
        if progress is not None:
            progress(size)

    def _typed_from_strings(self, t: pa.Table, lines: np.ndarray, path: Path
                            ) -> tuple[pa.Table, np.ndarray, list[InputError]]:
        """CSV cells (strings) as the fields' types; a cell that does not read is its row's error."""
        bad = np.zeros(t.num_rows, dtype=bool)
        errors: list[InputError] = []
        cols: dict[str, pa.Array] = {}
        for f in self.fields:
            col = t.column(f.name).combine_chunks()
            pattern = {"int": _INT_RE, "num": _NUM_RE, "ids": _IDS_RE}.get(f.kind)
            if pattern is not None:
                ok = pc.fill_null(pc.match_substring_regex(col, pattern), True)
                wrong = ~np.asarray(ok.to_numpy(zero_copy_only=False), dtype=bool) & ~bad
                for i in np.flatnonzero(wrong):
                    want = {"int": "an integer", "num": "a number", "ids": "a list of integers"}[f.kind]
                    errors.append(InputError(str(path), int(lines[i]), f.name,
                                             f"expected {want}, got {col[i].as_py()!r}"))
                bad |= wrong
                col = pc.if_else(pa.array(~bad), col, pa.nulls(len(col), pa.string()))
            if f.kind == "int":
                cols[f.name] = pc.cast(pc.utf8_trim_whitespace(col), pa.int64())
            elif f.kind == "num":
                cols[f.name] = pc.cast(pc.utf8_trim_whitespace(col), pa.float64())
            elif f.kind == "ids":
                # brackets and any whitespace the pattern allowed (tabs, form feeds) become one space
                inner = pc.replace_substring_regex(col, r"[\[\]\s]+", " ")
                inner = pc.utf8_trim(inner, " ,;")
                parts = pc.split_pattern_regex(inner, r"\s*[,; ]\s*")
                cols[f.name] = _ids_from_parts(parts)
            else:
                cols[f.name] = col
        raw = pa.table(cols)
        keep = ~bad
        return raw.filter(pa.array(keep)), lines[keep], errors

    def _parquet_chunks(self, path: Path, progress: ProgressFn | None
                        ) -> Iterator[tuple[pa.Table, np.ndarray, list[InputError]]]:
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(str(path), None, None, f"cannot read as Parquet: {exc}") from None
        self._missing_columns(path, pf.schema_arrow.names)
        first = 1
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=[f.name for f in self.fields]):
            n = batch.num_rows
            lines = np.arange(first, first + n, dtype=np.int64)
            first += n
            yield self._typed_from_arrow(pa.Table.from_batches([batch]), lines, path)
        if progress is not None:
            progress(path.stat().st_size)

    def _typed_from_arrow(self, t: pa.Table, lines: np.ndarray, path: Path
                          ) -> tuple[pa.Table, np.ndarray, list[InputError]]:
        """Parquet columns cast to the fields' types; where a cast fails, the rows are read one by
        one to name the first that does not convert."""
        from kvwear.workloads.loaders.jsonl import _KIND_TYPES, _type_problem

        cols: dict[str, Any] = {}
        bad = np.zeros(t.num_rows, dtype=bool)
        errors: list[InputError] = []
        for f in self.fields:
            col = t.column(f.name)
            try:
                cols[f.name] = col.cast(_KIND_TYPES[f.kind])
                continue
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
            values = col.to_pylist()
            if f.kind == "int":              # a float column of whole numbers (pandas' ints with nulls)
                values = [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]
            for i, v in enumerate(values):
                problem = _type_problem(f, v)
                if problem and not bad[i]:
                    errors.append(InputError(str(path), int(lines[i]), f.name, problem))
                    bad[i] = True
            cols[f.name] = pa.array([None if bad[i] else v for i, v in enumerate(values)], _KIND_TYPES[f.kind])
        keep = ~bad
        return pa.table(cols).filter(pa.array(keep)), lines[keep], errors

    # -- rows ----------------------------------------------------------------------------------

    def to_requests(self, raw: pa.Table, lines: np.ndarray, path: Path) -> pa.RecordBatch:
        m = self.map
        n = raw.num_rows
        ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        self._next_id += n
        arrival = (np.asarray(raw.column(m.source("arrival") or "").to_numpy(), dtype=np.float64)
                   * TIME_UNITS[m.time_unit])
        tok = m.source("token_ids")
        if tok is not None:
            offsets, values = list_parts(raw.column(tok))
            b_offsets, b_ids = block_hashes(offsets, values, m.block_tokens)
            hash_ids = make_list(b_offsets, b_ids)
            n_blocks = np.diff(b_offsets)
            inp_src = m.source("input_tokens")
            inp = (np.asarray(raw.column(inp_src).to_numpy(), dtype=np.int64) if inp_src
                   else np.diff(offsets).astype(np.int64))
            hashed = np.minimum(inp, n_blocks * m.block_tokens)
        else:
            hash_ids = raw.column(m.source("hash_ids") or "").combine_chunks()
            n_blocks = np.asarray(pc.list_value_length(hash_ids).to_numpy(), dtype=np.int64)
            inp = np.asarray(raw.column(m.source("input_tokens") or "").to_numpy(), dtype=np.int64)
            hashed = np.minimum(inp, n_blocks * m.block_tokens)
        out_src = m.source("output_tokens")
        out = (np.asarray(pc.fill_null(raw.column(out_src), 0).to_numpy(), dtype=np.int64) if out_src
               else np.zeros(n, dtype=np.int64))
        cat_src, model_src, sess_src = m.source("category"), m.source("model"), m.source("session")
        category = (pc.fill_null(raw.column(cat_src), "default").combine_chunks() if cat_src
                    else const_str("default", n))
        extra: dict[str, Any] = {}
        if model_src:
            extra["model"] = raw.column(model_src).combine_chunks()
        if sess_src:
            sess = raw.column(sess_src).to_pylist()
            parent = np.zeros(n, dtype=np.int64)
            has_parent = np.zeros(n, dtype=bool)
            turn = np.zeros(n, dtype=np.int32)
            has_turn = np.zeros(n, dtype=bool)
            for i, s in enumerate(sess):       # sessions span batches: one dict step per row
                if s is None:
                    continue
                prev = self._sessions.get(s)
                if prev is not None:
                    parent[i], has_parent[i] = prev[0], True
                k = prev[1] + 1 if prev is not None else 1
                turn[i], has_turn[i] = k, True
                self._sessions[s] = (int(ids[i]), k)
            extra.update(session_id=pa.array(sess, pa.string()), parent_id=pa.array(parent, mask=~has_parent),
                         turn=pa.array(turn, mask=~has_turn))
        return requests_batch(request_id=ids, arrival_s=arrival, input_tokens=inp, output_tokens=out,
                              hash_ids=hash_ids, hashed_tokens=hashed, block_tokens=m.block_tokens, hash_ns=0,
                              category=category, **extra)


def _ids_from_parts(parts: pa.Array) -> pa.Array:
    """list<string> of digit strings (empty strings from an empty cell dropped) as list<int64>."""
    offsets = np.asarray(parts.offsets, dtype=np.int64)
    flat = parts.values
    keep = np.asarray(pc.not_equal(flat, "").to_numpy(zero_copy_only=False), dtype=bool) if len(flat) else \
        np.zeros(0, dtype=bool)
    counts = np.concatenate([[0], np.cumsum(keep)])
    new_offsets = counts[offsets - offsets[0]]
    values = pc.cast(flat.filter(pa.array(keep)), pa.int64()) if len(flat) else pa.array([], pa.int64())
    arr = make_list(new_offsets, np.asarray(values.to_numpy(), dtype=np.int64))
    return pa.ListArray.from_arrays(arr.offsets, arr.values, mask=parts.is_null())


LOADERS.add("columns", ColumnsLoader)
