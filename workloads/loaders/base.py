"""The trace-loader interface, its registry, and helpers every loader shares.

A loader turns one trace format into record batches of the `requests` table
(`kvwear.workloads.schema.REQUESTS`), streaming: it never holds the whole trace as text or as Python
objects. It must not sort across batches, check prefix chaining or write files; that is the job
of `kvwear.workloads.loaders.pipeline`, which drives every loader the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvwear.errors import InputError
from kvwear.registry import Registry
from kvwear.workloads.schema import REQUESTS

#: Called with the number of input bytes consumed since the previous call (progress bars).
ProgressFn = Callable[[int], None]

#: How many skipped-line errors a result keeps verbatim (the rest are only counted).
MAX_KEPT_ERRORS = 20


@dataclass
class SkipLog:
    """Bad records skipped under `skip_bad=True`: a count and the first few errors."""

    count: int = 0
    first: list[InputError] = field(default_factory=list)

    def add(self, err: InputError) -> None:
        self.count += 1
        if len(self.first) < MAX_KEPT_ERRORS:
            self.first.append(err)


class TraceLoader(ABC):
    """One trace format.

    `chained` says whether the format promises prefix chaining (a given id always follows the
    same ids); the pipeline verifies that promise, and derives keys from the whole prefix where
    the format makes no promise or the promise is broken.
    """

    name: str = ""
    description: str = ""
    chained: bool = True

    @classmethod
    def configured(cls, options: Mapping[str, str], where: str) -> Callable[[], TraceLoader]:
        """A factory of this format's loaders set by `options`, the `key=value` pairs after the
        colon of a format spec (`columns:arrival=ts,…`). Formats with a fixed layout take none."""
        if options:
            raise InputError(where, None, None, f"trace format {cls.name!r} takes no options "
                             f"(given: {', '.join(options)}); only a generic format such as 'columns' does")
        return cls

    @abstractmethod
    def sniff(self, first_bytes: bytes, path: Path) -> bool:
        """True when `first_bytes` (the start of the file; empty for a directory) look like this format."""

    def iter_batches(
        self,
        path: Path,
        *,
        skip_bad: bool,
        batch_rows: int,
        skipped: SkipLog | None = None,
        progress: ProgressFn | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield batches conforming to REQUESTS, in file order (not necessarily sorted by arrival).

        Bad records raise `InputError` (file, 1-based line, field), or with `skip_bad` are
        dropped and recorded in `skipped`.
        """
        log = skipped if skipped is not None else SkipLog()
        return self.read_batches(Path(path), log, skip_bad=skip_bad, batch_rows=batch_rows, progress=progress)

    @abstractmethod
    def read_batches(self, path: Path, log: SkipLog, *, skip_bad: bool, batch_rows: int,
                     progress: ProgressFn | None) -> Iterator[pa.RecordBatch]:
        """The format's part of `iter_batches`: `path` as a Path, bad records (under `skip_bad`) into `log`."""


#: Loader classes by format name; the pipeline makes a fresh instance per pass (loaders keep
#: per-file state such as the next request id).
#: Adding a format = its module + one line in this list.
LOADERS: Registry[type[TraceLoader]] = Registry("trace format", modules=[
    f"kvwear.workloads.loaders.{m}" for m in ("aiperf", "mooncake", "qwen", "weka", "columns")])


# ----------------------------------------------------------------------------------------------
# Column helpers: cheap constant and null columns (no per-row Python objects).


def const_str(value: str, n: int) -> pa.Array:
    """A string column holding `value` n times, built without n Python strings."""
    return pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], pa.string())
    ).cast(pa.string())


def requests_batch(
    *,
    request_id: np.ndarray,
    arrival_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    hash_ids: pa.Array,
    hashed_tokens: np.ndarray,
    block_tokens: int | np.ndarray,
    hash_ns: int | np.ndarray,
    category: pa.Array,
    stream_id: pa.Array | None = None,
    session_id: pa.Array | None = None,
    parent_id: pa.Array | None = None,
    turn: pa.Array | None = None,
    model: pa.Array | None = None,
) -> pa.RecordBatch:
    """Assemble one REQUESTS batch; absent optional columns become nulls."""
    n = len(request_id)

    def ints(v: int | np.ndarray, dtype: type) -> np.ndarray:
        return np.full(n, v, dtype=dtype) if isinstance(v, int) else np.asarray(v, dtype=dtype)

    cols = {
        "request_id": pa.array(np.asarray(request_id, dtype=np.int64)),
        "session_id": session_id if session_id is not None else pa.nulls(n, pa.string()),
        "parent_id": parent_id if parent_id is not None else pa.nulls(n, pa.int64()),
        "stream_id": stream_id if stream_id is not None else const_str("main", n),
        "turn": turn if turn is not None else pa.nulls(n, pa.int32()),
        "arrival_s": pa.array(np.asarray(arrival_s, dtype=np.float64)),
        "input_tokens": pa.array(np.asarray(input_tokens, dtype=np.int64)),
        "output_tokens": pa.array(np.asarray(output_tokens, dtype=np.int64)),
        "category": category,
        "model": model if model is not None else pa.nulls(n, pa.string()),
        "block_tokens": pa.array(ints(block_tokens, np.int32)),
        "hash_ns": pa.array(ints(hash_ns, np.int32)),
        "hash_ids": hash_ids,
        "hashed_tokens": pa.array(np.asarray(hashed_tokens, dtype=np.int64)),
    }
    schema = REQUESTS.with_metadata()
    arrays = [cols[f.name].cast(f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def make_list(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """A list<int64> array from offsets and flat values (no per-row Python lists)."""
    # Batches are bounded (batch_rows), so 32-bit list offsets always suffice.
    if len(offsets) and offsets[-1] >= 2**31:
        raise ValueError("a batch holds more than 2**31 hash ids; use smaller batches")
    return pa.ListArray.from_arrays(
        pa.array(np.asarray(offsets, dtype=np.int32)), pa.array(np.asarray(values, dtype=np.int64))
    )
