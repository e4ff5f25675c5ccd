"""Mooncake (FAST'25) JSONL traces: one request per line, no sessions.

Fields: `timestamp` (ms from trace start) → `arrival_s` = timestamp/1000; `input_length`,
`output_length`; `hash_ids`, one id per 512-token block, prefix-chained (the pipeline verifies
it). The last block may be partial and is hashed, so `len(hash_ids) == ceil(input_length/512)`
(checked) and `hashed_tokens = input_length`. `request_id` is the 0-based index of the row among
the rows loaded, in file order. This module only parses; it must not sort or write files.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.workloads.loaders.base import LOADERS, const_str, requests_batch
from kvwear.workloads.loaders.jsonl import Check, JsonField, JsonlLoader, sniff_first_object

MOONCAKE_BLOCK_TOKENS = 512


def ceil_blocks_check(raw: pa.Table, block: int, field_len: str = "input_length") -> Check | None:
    """Rows whose hash_ids count differs from ceil(input_length/block)."""
    ids = raw.column("hash_ids")
    # rows with a null field are already bad (required check); fill so the arithmetic is defined
    n_ids = np.asarray(pc.fill_null(pc.list_value_length(ids), 0).to_numpy(), dtype=np.int64)
    inp = np.asarray(pc.fill_null(raw.column(field_len), 0).to_numpy(), dtype=np.int64)
    want = -(-inp // block)
    ok = np.asarray(pc.is_valid(ids).to_numpy(zero_copy_only=False)) & np.asarray(
        pc.is_valid(raw.column(field_len)).to_numpy(zero_copy_only=False))
    bad = (n_ids != want) & ok
    if not bad.any():
        return None
    return ("hash_ids", bad,
            lambda i: f"has {n_ids[i]} ids but {field_len} {inp[i]} needs ceil({inp[i]}/{block}) "
                      f"= {want[i]} blocks of {block} tokens")


class MooncakeLoader(JsonlLoader):
    name = "mooncake"
    description = "Mooncake FAST'25 JSONL (timestamp ms, 512-token prefix-chained hash_ids)"
    chained = True
    fields: ClassVar[tuple[JsonField, ...]] = (
        JsonField("timestamp", "num", nonneg=True, bound="ms"),
        JsonField("input_length", "int", nonneg=True, bound="prompt"),
        JsonField("output_length", "int", nonneg=True, bound="tokens"),
        JsonField("hash_ids", "ids"),
    )

    def __init__(self) -> None:
        self._next_id = 0

    def sniff(self, first_bytes: bytes, path: Path) -> bool:
        obj = sniff_first_object(first_bytes)
        return (obj is not None and {"timestamp", "input_length", "hash_ids"} <= obj.keys()
                and not {"chat_id", "session_id", "delay"} & obj.keys())

    def reset(self, path: Path) -> None:
        self._next_id = 0

    def extra_checks(self, raw: pa.Table) -> list[Check]:
        c = ceil_blocks_check(raw, MOONCAKE_BLOCK_TOKENS)
        return [c] if c else []

    def to_requests(self, raw: pa.Table, lines: np.ndarray, path: Path) -> pa.RecordBatch:
        n = raw.num_rows
        ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        self._next_id += n
        inp = raw.column("input_length").to_numpy()
        return requests_batch(
            request_id=ids,
            arrival_s=raw.column("timestamp").to_numpy() / 1000.0,
            input_tokens=inp,
            output_tokens=raw.column("output_length").to_numpy(),
            hash_ids=raw.column("hash_ids").combine_chunks(),
            hashed_tokens=inp,
            block_tokens=MOONCAKE_BLOCK_TOKENS,
            hash_ns=0,
            category=const_str("default", n),
        )


LOADERS.add("mooncake", MooncakeLoader)
