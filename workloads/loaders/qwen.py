"""Qwen-Bailian ("KVCache Cache in the Wild") JSONL traces.

Fields: `chat_id`, `parent_chat_id` (-1 for the first request of a session), `timestamp` (s),
`input_length`, `output_length`, `type` (text/search/image/file → `category`), `turn`,
`hash_ids` (16-token blocks, salted SipHash of each block remapped to integers).

Mapping: `request_id = chat_id`, `parent_id = parent_chat_id` (null for -1), `session_id` = the
chat id at the root of the parent chain (as a string). A parent that never appeared earlier in
the file (a sampled trace can cut a chain) roots the session at that missing parent's id.
Chat ids must be unique (checked). The public description does not promise that ids are
prefix-chained (each 16-token block is hashed on its own, and the last block can change with
padding), so the pipeline derives keys from the whole prefix. `hashed_tokens =
min(input_length, 16·len(hash_ids))`; the id count is not checked against the length, since
the schema does not fix it. This module only parses; it must not sort or write files.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import InputError
from kvwear.workloads.loaders.base import LOADERS, requests_batch
from kvwear.workloads.loaders.jsonl import Check, JsonField, JsonlLoader, sniff_first_object

QWEN_BLOCK_TOKENS = 16


class QwenBailianLoader(JsonlLoader):
    name = "qwen-bailian"
    description = "Qwen-Bailian JSONL (chat_id/parent_chat_id sessions, 16-token hash_ids)"
    chained = False
    fields: ClassVar[tuple[JsonField, ...]] = (
        JsonField("chat_id", "int"),
        JsonField("parent_chat_id", "int"),
        JsonField("timestamp", "num", nonneg=True, bound="s"),
        JsonField("input_length", "int", nonneg=True, bound="prompt"),
        JsonField("output_length", "int", nonneg=True, bound="tokens"),
        JsonField("type", "str"),
        JsonField("turn", "int", nonneg=True),
        JsonField("hash_ids", "ids"),
    )

    def __init__(self) -> None:
        # chat id → root chat id. One int pair per request: the only per-row state kept.
        self._root: dict[int, int] = {}

    def sniff(self, first_bytes: bytes, path: Path) -> bool:
        obj = sniff_first_object(first_bytes)
        return obj is not None and {"chat_id", "parent_chat_id", "hash_ids"} <= obj.keys()

    def reset(self, path: Path) -> None:
        self._root = {}

    def extra_checks(self, raw: pa.Table) -> list[Check]:
        checks: list[Check] = []
        turn = np.asarray(raw.column("turn").to_numpy(zero_copy_only=False), dtype=np.float64)
        bad = turn > np.iinfo(np.int32).max
        if bad.any():
            checks.append(("turn", bad, lambda i: "turn out of the 32-bit range"))
        par = np.asarray(raw.column("parent_chat_id").to_numpy(zero_copy_only=False), dtype=np.float64)
        bad = par < -1
        if bad.any():
            checks.append(("parent_chat_id", bad,
                           lambda i: f"expected -1 (no parent) or a chat id, got {int(par[i])}"))
        return checks

    def to_requests(self, raw: pa.Table, lines: np.ndarray, path: Path) -> pa.RecordBatch:
        chat = raw.column("chat_id").to_numpy()
        parent = raw.column("parent_chat_id").to_numpy()
        roots = np.empty(len(chat), dtype=np.int64)
        keep = np.ones(len(chat), dtype=bool)
        root = self._root
        # Sessions need the parent chain, which crosses batches: one dict lookup per row.
        for i, (c, p) in enumerate(zip(chat.tolist(), parent.tolist(), strict=True)):
            if c in root:
                self.reject_row(InputError(str(path), int(lines[i]), "chat_id", f"duplicate chat_id {c}"))
                keep[i] = False
                continue
            r = c if p == -1 else root.get(p, p)
            root[c] = r
            roots[i] = r
        if not keep.all():
            raw, chat, parent, roots = raw.filter(pa.array(keep)), chat[keep], parent[keep], roots[keep]
        inp = raw.column("input_length").to_numpy()
        n_ids = np.asarray(pc.list_value_length(raw.column("hash_ids")).to_numpy(), dtype=np.int64)
        return requests_batch(
            request_id=chat,
            arrival_s=raw.column("timestamp").to_numpy(),
            input_tokens=inp,
            output_tokens=raw.column("output_length").to_numpy(),
            hash_ids=raw.column("hash_ids").combine_chunks(),
            hashed_tokens=np.minimum(inp, QWEN_BLOCK_TOKENS * n_ids),
            block_tokens=QWEN_BLOCK_TOKENS,
            hash_ns=0,
            category=raw.column("type").combine_chunks(),
            session_id=pa.array(roots).cast(pa.string()),
            parent_id=pa.array(np.where(parent == -1, 0, parent), mask=parent == -1),
            turn=pa.array(raw.column("turn").to_numpy().astype(np.int32)),
        )


LOADERS.add("qwen-bailian", QwenBailianLoader)
