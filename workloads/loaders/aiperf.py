"""AIPerf `mooncake_trace` JSONL: Mooncake's fields plus optional multi-turn sessions.

Fields: `input_length` (required), `output_length` (optional, 0 when absent), `hash_ids`
(optional, 512-token blocks as in Mooncake; absent → no hashed blocks), `timestamp` (optional,
ms), `session_id` (optional string), `delay` (optional, ms, relative to the previous turn of the
same session).

Interpretation of time (AIPerf sends a turn `delay` ms after the previous turn of its session;
kvwear replays arrivals, not completions, so the previous turn's service time is not known):
  * a row with `timestamp` arrives at timestamp/1000 s (an explicit schedule wins over delay);
  * otherwise a row continuing a session arrives at that session's previous arrival + delay/1000;
  * otherwise (no timestamp, first turn) it arrives when the schedule reaches it: at the latest
    arrival seen so far in the file (0 at the start), so file order is kept.
`session_id` is kept; `parent_id` is the previous request of the same session and `turn` the
1-based turn number (both null without a session). `request_id` is the row index in file
order. The id count is not checked against `input_length` (AIPerf's block size is an option),
`hashed_tokens = min(input_length, 512·len(hash_ids))`. Ids are expected to be prefix-chained
like Mooncake's (verified by the pipeline; keys are derived from the whole prefix otherwise).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.workloads.loaders.base import LOADERS, const_str, requests_batch
from kvwear.workloads.loaders.jsonl import JsonField, JsonlLoader, sniff_first_object

AIPERF_BLOCK_TOKENS = 512


class AiperfLoader(JsonlLoader):
    name = "aiperf"
    description = "AIPerf mooncake_trace JSONL (Mooncake fields + optional session_id, delay ms)"
    chained = True
    fields: ClassVar[tuple[JsonField, ...]] = (
        JsonField("timestamp", "num", required=False, nonneg=True, bound="ms"),
        JsonField("session_id", "str", required=False),
        JsonField("delay", "num", required=False, nonneg=True, bound="ms"),
        JsonField("input_length", "int", nonneg=True, bound="prompt"),
        JsonField("output_length", "int", required=False, nonneg=True, bound="tokens"),
        JsonField("hash_ids", "ids", required=False),
    )

    def __init__(self) -> None:
        self._next_id = 0
        self._latest = 0.0
        # session → (last request id, last arrival s, turns so far)
        self._sessions: dict[str, tuple[int, float, int]] = {}

    def sniff(self, first_bytes: bytes, path: Path) -> bool:
        obj = sniff_first_object(first_bytes)
        return (obj is not None and "input_length" in obj and "chat_id" not in obj
                and bool({"session_id", "delay"} & obj.keys()))

    def reset(self, path: Path) -> None:
        self.__init__()  # type: ignore[misc]

    def to_requests(self, raw: pa.Table, lines: np.ndarray, path: Path) -> pa.RecordBatch:
        n = raw.num_rows
        ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        self._next_id += n
        ts = raw.column("timestamp").to_pylist()
        sess = raw.column("session_id").to_pylist()
        delay = raw.column("delay").to_pylist()
        arrival = np.empty(n, dtype=np.float64)
        parent = np.zeros(n, dtype=np.int64)
        has_parent = np.zeros(n, dtype=bool)
        turn = np.zeros(n, dtype=np.int32)
        has_turn = np.zeros(n, dtype=bool)
        # Delays chain through sessions that span batches: one dict step per row.
        for i in range(n):
            s, t = sess[i], ts[i]
            prev = self._sessions.get(s) if s is not None else None
            if t is not None:
                a = t / 1000.0
            elif prev is not None:
                a = prev[1] + (delay[i] or 0.0) / 1000.0
            else:
                a = self._latest
            arrival[i] = a
            self._latest = max(self._latest, a)
            if s is not None:
                if prev is not None:
                    parent[i], has_parent[i] = prev[0], True
                k = prev[2] + 1 if prev is not None else 1
                turn[i], has_turn[i] = k, True
                self._sessions[s] = (int(ids[i]), a, k)
        hash_ids = pc.fill_null(raw.column("hash_ids"), pa.scalar([], pa.list_(pa.int64())))
        n_ids = np.asarray(pc.list_value_length(hash_ids).to_numpy(), dtype=np.int64)
        inp = raw.column("input_length").to_numpy()
        out = pc.fill_null(raw.column("output_length"), 0).to_numpy()
        return requests_batch(
            request_id=ids,
            arrival_s=arrival,
            input_tokens=inp,
            output_tokens=out,
            hash_ids=hash_ids.combine_chunks(),
            hashed_tokens=np.minimum(inp, AIPERF_BLOCK_TOKENS * n_ids),
            block_tokens=AIPERF_BLOCK_TOKENS,
            hash_ns=0,
            category=const_str("default", n),
            session_id=raw.column("session_id").combine_chunks(),
            parent_id=pa.array(parent, mask=~has_parent),
            turn=pa.array(turn, mask=~has_turn),
        )


LOADERS.add("aiperf", AiperfLoader)
