"""The streaming JSONL engine behind the Mooncake, Qwen-Bailian and AIPerf loaders.

The file is read in binary chunks cut at line ends. Each chunk is parsed by Arrow's JSON reader
with an explicit schema (the fast path: no Python object per row); validation is vectorized over
the resulting columns. When Arrow rejects a chunk (bad JSON, a wrongly typed field, a line that
holds two objects, blank lines), the chunk is parsed again line by line with Python's `json`
(the slow path), which is the authority: it names the exact line and field. Only bad chunks
pay for the slow path. This module must not know any format's meaning: formats describe their
fields (`JsonField`) and turn validated raw columns into requests rows (`JsonlLoader.to_requests`).
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from kvwear.errors import InputError
from kvwear.workloads.bounds import context_rule, max_context_tokens, max_span_s, span_rule
from kvwear.workloads.loaders.base import ProgressFn, SkipLog, TraceLoader

# a whitespace-only line: the first one (match) or a later one (search; the literal "\n" first
# keeps the scan at memchr speed)
_BLANK_FIRST = re.compile(rb"[ \t\r\f\v]*(?:\n|$)")
_BLANK_LATER = re.compile(rb"\n[ \t\r\f\v]*(?:\n|$)")


def _has_blank_line(chunk: bytes) -> bool:
    body = chunk[:-1] if chunk.endswith(b"\n") else chunk
    return bool(_BLANK_FIRST.match(body) or _BLANK_LATER.search(body))

#: Bytes read per chunk; a chunk is extended to the end of its last line. Arrow's JSON reader
#: needs roughly 15x a chunk transiently, so chunks stay small (throughput barely changes).
CHUNK_BYTES = 1 << 20

#: The longest line read (a record with ~2 million hash ids); a longer one is an InputError, so a
#: file without line ends (a binary file, /dev/zero) cannot fill memory (Arrow needs ~15x a line).
MAX_LINE_BYTES = 16 << 20

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_KIND_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "num": pa.float64(),
    "str": pa.string(),
    "ids": pa.list_(pa.int64()),
}


@dataclass(frozen=True)
class JsonField:
    """One field of a JSONL record: its kind (int, num, str, ids), whether required, whether
    negative values are refused, and what bounds its value (kvwear.workloads.bounds): `bound`
    "prompt" (1 to the maximum context tokens), "tokens" (at most the maximum context), "ms" or
    "s" (a time from the trace's start: at most the maximum span)."""

    name: str
    kind: str
    required: bool = True
    nonneg: bool = False
    bound: str | None = None


#: A vectorized check: (field, bad-row mask, message for a bad row index).
Check = tuple[str, np.ndarray, Callable[[int], str]]


def _type_name(v: object) -> str:
    return {dict: "object", list: "list", str: "str", bool: "bool", type(None): "null",
            int: "int", float: "float"}.get(type(v), type(v).__name__)


def read_line_chunks(
    path: Path, chunk_bytes: int | None = None, progress: ProgressFn | None = None,
    max_line_bytes: int | None = None,
) -> Iterator[tuple[bytes, int]]:
    """Yield (chunk, 1-based number of its first line); every chunk but the last ends with a newline.
    A line longer than `max_line_bytes` is an InputError (memory stays bounded)."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES  # read at call time, so tests can shrink it
    max_line_bytes = max_line_bytes or MAX_LINE_BYTES
    line_no = 1
    carry: list[bytes] = []  # pieces of a line longer than one chunk (joined once it ends)
    carried = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk_bytes)
            if progress is not None and block:
                progress(len(block))
            if not block:
                if carry:
                    yield b"".join(carry), line_no
                return
            cut = block.rfind(b"\n")
            if cut < 0:  # no line ends in this block: keep reading
                carry.append(block)
                carried += len(block)
                if carried > max_line_bytes:
                    raise InputError(str(path), line_no, None,
                                     f"line longer than {max_line_bytes:,} bytes (not a JSONL trace?)")
                continue
            chunk = b"".join([*carry, block[: cut + 1]]) if carry else block[: cut + 1]
            carry = [block[cut + 1 :]] if cut + 1 < len(block) else []
            carried = len(carry[0]) if carry else 0
            yield chunk, line_no
            line_no += chunk.count(b"\n")


class JsonlLoader(TraceLoader):
    """Base of the JSONL formats: subclasses list `fields` and implement `to_requests`."""

    fields: ClassVar[tuple[JsonField, ...]] = ()

    # -- format hooks ------------------------------------------------------------------------

    def extra_checks(self, raw: pa.Table) -> list[Check]:
        """Format-specific vectorized checks over rows whose fields are well typed."""
        return []

    def reset(self, path: Path) -> None:
        """Clear per-file state before a new pass over `path`."""

    def to_requests(self, raw: pa.Table, lines: np.ndarray, path: Path) -> pa.RecordBatch:
        """Turn validated raw rows (in file order) into a REQUESTS batch."""
        raise NotImplementedError

    # -- engine ------------------------------------------------------------------------------

    _skip_bad: bool = False
    _log: SkipLog | None = None

    def reject_row(self, err: InputError) -> None:
        """For checks that need state across batches (inside `to_requests`): raise `err`, or
        under skip_bad record it; the caller then drops the row."""
        if not self._skip_bad or self._log is None:
            raise err
        self._log.add(err)

    def raw_schema(self) -> pa.Schema:
        return pa.schema([pa.field(f.name, _KIND_TYPES[f.kind]) for f in self.fields])

    def read_batches(self, path: Path, log: SkipLog, *, skip_bad: bool, batch_rows: int,
                     progress: ProgressFn | None) -> Iterator[pa.RecordBatch]:
        if path.is_dir():
            raise InputError(str(path), None, None,
                             f"is a directory; {self.name} reads one JSONL file (only weka reads directories)")
        self._skip_bad, self._log = skip_bad, log
        self.reset(path)
        for raw, lines, errors in self.raw_chunks(path, progress):
            bad = np.zeros(raw.num_rows, dtype=bool)
            checks = self._generic_checks(raw) + (self.extra_checks(raw) if raw.num_rows else [])
            for _f, mask, _msg in checks:
                bad |= mask
            if bad.any() or errors:
                errors = errors + self._check_errors(checks, bad, lines, path,
                                                     limit=None if skip_bad else 1)
                errors.sort(key=lambda e: e.line or 0)
                if not skip_bad:
                    raise errors[0]
                for e in errors:  # one error per bad line: the count is exact
                    log.add(e)
                keep = ~bad
                raw = raw.filter(pa.array(keep))
                lines = lines[keep]
            if raw.num_rows == 0:
                continue
            out = self.to_requests(raw, lines, path)
            for start in range(0, out.num_rows, batch_rows):
                yield out.slice(start, batch_rows)

    def raw_chunks(self, path: Path, progress: ProgressFn | None
                   ) -> Iterator[tuple[pa.Table, np.ndarray, list[InputError]]]:
        """(raw rows typed as `raw_schema`, their 1-based line numbers, the errors of the lines
        that could not be read) per chunk of the file: the source the checks above run on. JSONL
        here; a loader reading another container (CSV, Parquet) yields the same triples."""
        for chunk, first_line in read_line_chunks(path, progress=progress):
            yield self._parse_chunk(chunk, first_line, path)

    def _generic_checks(self, raw: pa.Table) -> list[Check]:
        checks: list[Check] = []
        for f in self.fields:
            col = raw.column(f.name)
            if f.required and col.null_count:
                mask = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
                checks.append((f.name, mask, lambda i: "missing (required)"))
            if f.kind == "num" and raw.num_rows:
                # Arrow's reader accepts NaN; nulls are judged by the `required` check above
                finite = pc.fill_null(pc.is_finite(col), True).to_numpy(zero_copy_only=False)
                mask = ~np.asarray(finite, dtype=bool)
                if mask.any():
                    checks.append((f.name, mask, lambda i: "expected a finite number"))
            if f.nonneg and f.kind in ("int", "num") and raw.num_rows:
                neg = pc.fill_null(pc.less(col, 0), False).to_numpy(zero_copy_only=False)
                if neg.any():
                    checks.append((f.name, np.asarray(neg, dtype=bool), _negative_msg(col)))
            if f.bound is not None and f.kind in ("int", "num") and raw.num_rows:
                checks += _bound_checks(f, col)
            if f.kind == "ids" and raw.num_rows:
                arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
                flat_nulls = arr.values.null_count if len(arr) else 0
                if flat_nulls:
                    offsets = np.asarray(arr.offsets)
                    vnull = np.asarray(arr.values.is_null().to_numpy(zero_copy_only=False), dtype=np.int64)
                    csum = np.concatenate([[0], np.cumsum(vnull)])
                    mask = (csum[offsets[1:]] - csum[offsets[:-1]]) > 0
                    checks.append((f.name, mask, lambda i: "expected a list of integers, got a null element"))
        return checks

    @staticmethod
    def _check_errors(
        checks: list[Check], bad: np.ndarray, lines: np.ndarray, path: Path, limit: int | None
    ) -> list[InputError]:
        out: list[InputError] = []
        for i in np.flatnonzero(bad):
            for field, mask, msg in checks:
                if mask[i]:
                    out.append(InputError(str(path), int(lines[i]), field, msg(int(i))))
                    break
            if limit is not None and len(out) >= limit:
                break
        return out

    def _parse_chunk(
        self, chunk: bytes, first_line: int, path: Path
    ) -> tuple[pa.Table, np.ndarray, list[InputError]]:
        n_lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        # Arrow skips blank lines, so a blank line and a line holding two objects would cancel
        # out in the row count below: chunks with blank lines take the slow path
        if _has_blank_line(chunk) or self._may_repeat_a_field(chunk, n_lines):
            return self._parse_chunk_slow(chunk, first_line, path)
        schema = self.raw_schema()
        # 1 MiB blocks let Arrow parse in parallel; a longer line needs one block for the chunk.
        for block in (1 << 20, len(chunk) + 1) if len(chunk) > 1 << 20 else (1 << 20,):
            try:
                table = pj.read_json(
                    io.BytesIO(chunk),
                    read_options=pj.ReadOptions(block_size=block),
                    parse_options=pj.ParseOptions(
                        explicit_schema=schema, unexpected_field_behavior="ignore"
                    ),
                )
            except Exception:  # any Arrow refusal: try the next way, then the exact slow path
                continue
            # Arrow skips blank lines and splits two objects on one line into two rows; only
            # when rows and lines correspond one to one can rows be given line numbers.
            if table.num_rows == n_lines and table.schema.names == schema.names:
                return (table.cast(schema),
                        np.arange(first_line, first_line + n_lines, dtype=np.int64), [])
            break
        return self._parse_chunk_slow(chunk, first_line, path)

    def _refuse_repeated_fields(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            names = {f.name for f in self.fields}
            seen: set[str] = set()
            for k, _ in pairs:
                if k in seen and k in names:
                    raise _RepeatedField(k)
                seen.add(k)
        return obj

    def _may_repeat_a_field(self, chunk: bytes, n_lines: int) -> bool:
        """A field's quoted name more often than there are lines: a record may give it twice
        (Arrow keeps one silently), so the slow path, which refuses that, decides."""
        return any(chunk.count(f'"{f.name}"'.encode()) > n_lines for f in self.fields)

    def _parse_chunk_slow(
        self, chunk: bytes, first_line: int, path: Path
    ) -> tuple[pa.Table, np.ndarray, list[InputError]]:
        cols: dict[str, list[Any]] = {f.name: [] for f in self.fields}
        lines: list[int] = []
        errors: list[InputError] = []
        p = str(path)
        for k, line in enumerate(chunk.split(b"\n")):
            if not line.strip():
                continue
            no = first_line + k
            try:
                # NaN/Infinity parse; the type check refuses them
                obj = json.loads(line, object_pairs_hook=self._refuse_repeated_fields)
            except _RepeatedField as rep:
                errors.append(InputError(p, no, rep.name, "given twice in one record (which one counts is ambiguous)"))
                continue
            except (ValueError, RecursionError) as exc:
                errors.append(InputError(p, no, None, f"invalid JSON: {exc}"))
                continue
            if not isinstance(obj, dict):
                errors.append(InputError(p, no, None, f"expected a JSON object, got {_type_name(obj)}"))
                continue
            row: list[Any] = []
            err: InputError | None = None
            for f in self.fields:
                v = obj.get(f.name)
                problem = _type_problem(f, v)
                if problem:
                    err = InputError(p, no, f.name, problem)
                    break
                row.append(v)
            if err is not None:
                errors.append(err)
                continue
            for f, v in zip(self.fields, row, strict=True):
                cols[f.name].append(v)
            lines.append(no)
        table = pa.table({f.name: pa.array(cols[f.name], _KIND_TYPES[f.kind]) for f in self.fields})
        return table, np.asarray(lines, dtype=np.int64), errors


def _bound_checks(f: JsonField, col: pa.ChunkedArray) -> list[Check]:
    """Rows whose `f` lies outside its `bound` (JsonField; nulls are judged by `required`)."""
    # int64 counts stay integers (a float64 cast is lossy above 2^53 and Arrow refuses it)
    v = np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False))
    if f.bound in ("prompt", "tokens"):
        hi, lo = max_context_tokens(), 1 if f.bound == "prompt" else 0
        null = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        mask = ((v > hi) | (v < lo)) & ~null
        return [(f.name, mask, lambda i: f"{int(v[i])} tokens; expected {lo} to {hi:,} "
                 f"({'a request reads at least one token, ' if lo else ''}{context_rule()})")] if mask.any() else []
    scale = 1000.0 if f.bound == "ms" else 1.0
    limit = max_span_s() * scale
    mask = v.astype(np.float64) > limit
    unit = "ms" if f.bound == "ms" else "s"
    return [(f.name, mask, lambda i: f"{v[i]:g} {unit} from the trace's start; expected at most "
             f"{limit:,.0f} {unit} (a trace spans {span_rule()})")] if mask.any() else []


class _RepeatedField(ValueError):
    def __init__(self, name: str) -> None:
        self.name = name


def _negative_msg(col: pa.ChunkedArray) -> Callable[[int], str]:
    return lambda i: f"must not be negative, got {col[i].as_py()}"


def _type_problem(f: JsonField, v: object) -> str | None:
    """Why `v` is not a valid value of field `f` (None when it is)."""
    if v is None:
        return "missing (required)" if f.required else None
    if f.kind == "int":
        if type(v) is not int:
            return f"expected an integer, got {_type_name(v)}"
        if not _INT64_MIN <= v <= _INT64_MAX:
            return "integer out of the 64-bit range"
    elif f.kind == "num":
        if type(v) not in (int, float):
            return f"expected a number, got {_type_name(v)}"
        if not math.isfinite(float(v)):  # type: ignore[arg-type]
            return "expected a finite number"
    elif f.kind == "str":
        if type(v) is not str:
            return f"expected a string, got {_type_name(v)}"
    elif f.kind == "ids":
        if type(v) is not list:
            return f"expected a list of integers, got {_type_name(v)}"
        for x in v:
            if type(x) is not int:
                return f"expected a list of integers, got an element of type {_type_name(x)}"
            if not _INT64_MIN <= x <= _INT64_MAX:
                return "hash id out of the 64-bit range"
    return None


def sniff_first_object(first_bytes: bytes) -> dict[str, Any] | None:
    """The first line of `first_bytes` parsed as a JSON object, or None."""
    line = first_bytes.split(b"\n", 1)[0].strip()
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None
