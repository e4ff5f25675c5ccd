"""Claude-Code traces recorded at WEKA: one JSON object per file, or a directory of them.

A file holds `id`, `block_size` (64), `hash_id_scope`, `requests[]`. A request has `t` (s from
session start), `type` ("n"/"s"), `model`, `in`, `out`, `hash_ids`, `api_time`, `think_time`; a
`type: "subagent"` entry has `agent_id`, `t` and its own `requests[]`, whose `t` is relative to
the subagent's `t` (entries may nest; each level adds its `t`).

Mapping: requests are flattened to absolute `arrival_s`; `stream_id` is the agent id ("main" for
the top level); `session_id` is the trace `id` (the file stem when absent); `hash_ns` is the
file's index in the directory (sorted by name; 0 for a single file) because ids are unique only
within one trace, and subagents share their parent's namespace. Only full blocks are hashed:
`len(hash_ids) == floor(in/block_size)` (checked) and `hashed_tokens = block_size·len(hash_ids)`.
`category` is "agentic" for the main stream and "subagent" for subagents; `turn` counts
requests within a stream from 1; `parent_id` is the previous request of the same stream, and for
a subagent's first request the last main-stream request at or before the subagent's spawn.
`request_id`s are consecutive over the files, in arrival order within a file.

A file is one JSON document, so it is parsed whole (one file at a time: memory is bounded by the
largest file, not the directory; a file above MAX_FILE_BYTES is refused). A key given twice in
one object, a negative `t` or nested offsets that sum to a non-finite time, and a subagent named
"main" (the top-level stream's id) are errors. Errors name the file and the record path as the field
(e.g. `requests[3].requests[2].in`); JSON syntax errors name the line. With `skip_bad`, a bad
request entry is skipped; a bad subagent entry or file header skips that subagent or file.
This module only parses; it must not sort across files or write files.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kvwear.errors import InputError
from kvwear.workloads.bounds import context_rule, max_context_tokens, max_span_s, span_rule
from kvwear.workloads.loaders.base import LOADERS, ProgressFn, SkipLog, TraceLoader, make_list, requests_batch
from kvwear.workloads.loaders.jsonl import _type_name


class _Bad(Exception):
    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message


def _num(obj: dict[str, Any], key: str, where: str, *, required: bool = True) -> float | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise _Bad(f"{where}{key}", "missing (required)")
        return None
    if type(v) not in (int, float) or not math.isfinite(v):
        raise _Bad(f"{where}{key}", f"expected a finite number, got {_type_name(v)}")
    return float(v)


def _int(obj: dict[str, Any], key: str, where: str) -> int:
    v = obj.get(key)
    if v is None:
        raise _Bad(f"{where}{key}", "missing (required)")
    if type(v) is not int:
        raise _Bad(f"{where}{key}", f"expected an integer, got {_type_name(v)}")
    if v < 0:
        raise _Bad(f"{where}{key}", f"must not be negative, got {v}")
    if v >= 2**62:
        raise _Bad(f"{where}{key}", "integer out of range")
    return v


def _str(obj: dict[str, Any], key: str, where: str, *, required: bool) -> str | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise _Bad(f"{where}{key}", "missing (required)")
        return None
    if type(v) is not str:
        raise _Bad(f"{where}{key}", f"expected a string, got {_type_name(v)}")
    return v


#: The largest trace file read (one JSON document is parsed whole: ~5x its size in memory).
MAX_FILE_BYTES = 512 << 20


def _read_bounded(f: Path, limit: int | None = None) -> bytes:
    limit = limit or MAX_FILE_BYTES         # read at call time, so tests can shrink it
    with open(f, "rb") as fh:
        # a regular file's size is known before reading it; /dev/zero or a pipe shows only by reading
        big = os.fstat(fh.fileno()).st_size > limit
        data = b"" if big else fh.read(limit + 1)
    if big or len(data) > limit:
        raise InputError(str(f), None, None, f"larger than {limit:,} bytes: one Weka trace file is parsed "
                                             "whole, so its size is bounded")
    return data


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"key {k!r} given twice in one object (which one counts is ambiguous)")
            seen.add(k)
    return obj


class _FileRows:
    """Column lists for one trace file (bounded by the file's size)."""

    def __init__(self) -> None:
        self.arrival: list[float] = []
        self.inp: list[int] = []
        self.out: list[int] = []
        self.stream: list[str] = []
        self.model: list[str | None] = []
        self.ids: list[list[int]] = []
        self.spawn: dict[str, float] = {}


class WekaLoader(TraceLoader):
    name = "weka"
    description = "Claude-Code/WEKA JSON, one trace per file or a directory (64-token blocks, subagents)"
    chained = True

    def __init__(self) -> None:
        self._next_id = 0

    def sniff(self, first_bytes: bytes, path: Path) -> bool:
        if path.is_dir():
            return any(path.glob("*.json"))
        head = first_bytes.lstrip()
        return head.startswith(b"{") and b'"requests"' in head and b'"block_size"' in head

    @staticmethod
    def files(path: Path) -> list[Path]:
        return sorted(path.glob("*.json")) if path.is_dir() else [path]

    def read_batches(self, path: Path, log: SkipLog, *, skip_bad: bool, batch_rows: int,
                     progress: ProgressFn | None) -> Iterator[pa.RecordBatch]:
        self._next_id = 0
        files = self.files(path)
        if path.is_dir() and not files:
            raise InputError(str(path), None, None, "directory holds no *.json trace files")
        for ns, f in enumerate(files):
            data = _read_bounded(f)
            if progress is not None:
                progress(len(data))
            batch = self._file_batch(f, data, ns, skip_bad, log)
            if batch is None:
                continue
            for start in range(0, batch.num_rows, batch_rows):
                yield batch.slice(start, batch_rows)

    def _file_batch(
        self, f: Path, data: bytes, ns: int, skip_bad: bool, log: SkipLog
    ) -> pa.RecordBatch | None:
        p = str(f)

        def fail(err: InputError) -> None:
            if not skip_bad:
                raise err
            log.add(err)

        try:
            doc = json.loads(data, object_pairs_hook=_no_repeated_keys)  # NaN/Infinity: refused by the checks
        except json.JSONDecodeError as exc:
            fail(InputError(p, exc.lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})"))
            return None
        except (ValueError, RecursionError) as exc:
            fail(InputError(p, None, None, f"invalid JSON: {exc}"))
            return None
        try:
            if not isinstance(doc, dict):
                raise _Bad("", f"expected a JSON object, got {_type_name(doc)}")
            block = _int(doc, "block_size", "")
            if not 0 < block <= 1 << 20:
                raise _Bad("block_size", f"expected 1..1048576 tokens, got {block}")
            trace_id = _str(doc, "id", "", required=False) or f.stem
            reqs = doc.get("requests")
            if type(reqs) is not list:
                raise _Bad("requests", f"expected a list, got {_type_name(reqs)}")
        except _Bad as bad:
            fail(InputError(p, None, bad.field or None, bad.message))
            return None
        rows = _FileRows()
        self._walk(reqs, "requests", 0.0, "main", block, rows, p, fail)
        return self._build(rows, trace_id, block, ns)

    def _walk(self, reqs: list[Any], where: str, t0: float, stream: str, block: int,
              rows: _FileRows, p: str, fail: Any) -> None:
        for i, r in enumerate(reqs):
            w = f"{where}[{i}]."
            try:
                if not isinstance(r, dict):
                    raise _Bad(w[:-1], f"expected an object, got {_type_name(r)}")
                t = _num(r, "t", w)
                assert t is not None
                # each level's t is finite, but nested offsets add up: the sum is checked too
                if t < 0 or not math.isfinite(t0 + t):
                    raise _Bad(f"{w}t", f"expected a finite time ≥ 0 (from its parent's start), got {t!r}"
                               + ("" if t < 0 else f": the nested offsets sum to {t0 + t!r}"))
                # the kind of entry: "subagent" opens a nested stream, any other text is a request;
                # a number or a list is a damaged entry, not a request
                if _str(r, "type", w, required=False) == "subagent":
                    agent = _str(r, "agent_id", w, required=True)
                    sub = r.get("requests")
                    if type(sub) is not list:
                        raise _Bad(f"{w}requests", f"expected a list, got {_type_name(sub)}")
                    assert agent is not None
                    if agent == "main":
                        raise _Bad(f"{w}agent_id", "'main' names the top-level stream; a subagent needs another id")
                    rows.spawn.setdefault(agent, t0 + t)
                    self._walk(sub, f"{w}requests", t0 + t, agent, block, rows, p, fail)
                    continue
                if t0 + t > max_span_s():
                    raise _Bad(f"{w}t", f"{t0 + t:g} s from the trace's start; expected at most {span_rule()}")
                n_in = _int(r, "in", w)
                n_out = _int(r, "out", w)
                ctx = max_context_tokens()
                if not 1 <= n_in <= ctx:
                    raise _Bad(f"{w}in", f"{n_in} tokens; a request reads 1 to {ctx:,} tokens ({context_rule()})")
                if not 0 <= n_out <= ctx:
                    raise _Bad(f"{w}out", f"{n_out} tokens; expected 0 to {ctx:,} ({context_rule()})")
                model = _str(r, "model", w, required=False)
                for k in ("api_time", "think_time"):
                    _num(r, k, w, required=False)
                ids = r.get("hash_ids")
                if type(ids) is not list:
                    raise _Bad(f"{w}hash_ids", f"expected a list of integers, got {_type_name(ids)}")
                for x in ids:
                    if type(x) is not int or not -(2**63) <= x < 2**63:
                        raise _Bad(f"{w}hash_ids",
                                   f"expected a list of integers, got an element of type {_type_name(x)}")
                if len(ids) != n_in // block:
                    raise _Bad(f"{w}hash_ids", f"has {len(ids)} ids but in {n_in} needs "
                                               f"floor({n_in}/{block}) = {n_in // block} full blocks")
            except _Bad as bad:
                fail(InputError(p, None, bad.field, bad.message))
                continue
            rows.arrival.append(t0 + t)
            rows.inp.append(n_in)
            rows.out.append(n_out)
            rows.stream.append(stream)
            rows.model.append(model)
            rows.ids.append(ids)

    def _build(self, rows: _FileRows, trace_id: str, block: int, ns: int) -> pa.RecordBatch | None:
        n = len(rows.arrival)
        if n == 0:
            return None
        arrival = np.asarray(rows.arrival, dtype=np.float64)
        order = np.argsort(arrival, kind="stable")
        arrival = arrival[order]
        req_id = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        self._next_id += n
        stream = [rows.stream[j] for j in order]
        parent = np.zeros(n, dtype=np.int64)
        has_parent = np.zeros(n, dtype=bool)
        turn = np.zeros(n, dtype=np.int32)
        last: dict[str, tuple[int, int]] = {}  # stream → (last request id, turns)
        main_ids = [(arrival[i], int(req_id[i])) for i in range(n) if stream[i] == "main"]
        main_t = np.asarray([a for a, _ in main_ids], dtype=np.float64)
        for i, s in enumerate(stream):
            prev = last.get(s)
            if prev is not None:
                parent[i], has_parent[i] = prev[0], True
            elif s != "main" and len(main_t):
                # the spawning request: the last main request at or before the spawn time
                k = int(np.searchsorted(main_t, rows.spawn.get(s, arrival[i]), side="right")) - 1
                if k >= 0:
                    parent[i], has_parent[i] = main_ids[k][1], True
            turn[i] = prev[1] + 1 if prev is not None else 1
            last[s] = (int(req_id[i]), int(turn[i]))
        lengths = np.asarray([len(rows.ids[j]) for j in order], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        flat = (np.fromiter((x for j in order for x in rows.ids[j]), dtype=np.int64, count=int(offsets[-1]))
                if offsets[-1] else np.zeros(0, dtype=np.int64))
        inp = np.asarray(rows.inp, dtype=np.int64)[order]
        return requests_batch(
            request_id=req_id,
            arrival_s=arrival,
            input_tokens=inp,
            output_tokens=np.asarray(rows.out, dtype=np.int64)[order],
            hash_ids=make_list(offsets, flat),
            hashed_tokens=lengths * block,
            block_tokens=block,
            hash_ns=ns,
            category=pa.array(["agentic" if s == "main" else "subagent" for s in stream], pa.string()),
            stream_id=pa.array(stream, pa.string()),
            session_id=pa.array([trace_id] * n, pa.string()),
            parent_id=pa.array(parent, mask=~has_parent),
            turn=pa.array(turn),
            model=pa.array([rows.model[j] for j in order], pa.string()),
        )


LOADERS.add("weka", WekaLoader)
