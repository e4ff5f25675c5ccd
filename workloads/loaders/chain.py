"""Prefix-chaining check: a given (namespace, id) must always follow the same predecessor.

Streaming and vectorized: each batch's (id, predecessor) pairs are checked against each other
and against the pairs seen in earlier batches. Memory is one predecessor per distinct id (a
numpy array indexed by id while ids are small and dense, sorted arrays otherwise). This module
only checks; what to do on a violation is the pipeline's decision.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kvwear.workloads.schema import list_parts

_ROOT = np.iinfo(np.int64).min  # predecessor of a first block
_UNSET = np.iinfo(np.int64).min + 1
# Dense mode: a direct-index uint32 array holding predecessor + 2 (0 = unset, 1 = first block):
# exact for ids below 2^32 - 2, 4 bytes per slot. Used while ids are small and fairly dense.
_DENSE_MAX_ID = (1 << 32) - 3
_DENSE_FREE_SLOTS = 1 << 24  # always allowed; beyond, slots must stay within 4x the ids seen


class ChainViolation(Exception):
    """Id `hash_id` (namespace `hash_ns`) followed two different predecessors."""

    def __init__(self, hash_ns: int, hash_id: int, first_pred: int | None, other_pred: int | None,
                 request_id: int) -> None:
        super().__init__(hash_ns, hash_id, first_pred, other_pred, request_id)
        self.hash_ns, self.hash_id, self.request_id = hash_ns, hash_id, request_id
        self.first_pred, self.other_pred = first_pred, other_pred

    def __str__(self) -> str:
        def name(p: int | None) -> str:
            return "the start of the prompt" if p is None else f"id {p}"

        return (f"hash id {self.hash_id} (namespace {self.hash_ns}) follows {name(self.first_pred)} "
                f"and, in request {self.request_id}, {name(self.other_pred)}")


class _NsState:
    """Predecessor of every id seen in one namespace."""

    def __init__(self) -> None:
        self.dense = np.zeros(0, dtype=np.uint32)  # direct index: predecessor + 2, 0 = unset
        self.seen = 0  # ids recorded (an over-count is harmless: it only sizes the dense array)
        self.keys = np.zeros(0, dtype=np.int64)   # sorted ids (sparse mode)
        self.preds = np.zeros(0, dtype=np.int64)
        self.sparse = False

    @staticmethod
    def _enc(preds: np.ndarray) -> np.ndarray:
        return np.where(preds == _ROOT, 1, preds + 2).astype(np.uint32)

    @staticmethod
    def _dec(codes: np.ndarray) -> np.ndarray:
        c = codes.astype(np.int64)
        return np.where(c == 1, _ROOT, np.where(c == 0, _UNSET, c - 2))

    def _dense_ok(self, ids: np.ndarray, preds: np.ndarray) -> bool:
        if ids.min() < 0 or ids.max() > _DENSE_MAX_ID:
            return False
        top = int(ids.max()) + 1
        return top <= max(_DENSE_FREE_SLOTS, 4 * (self.seen + len(ids)), len(self.dense))

    def check_and_add(self, ids: np.ndarray, preds: np.ndarray) -> tuple[int, int] | None:
        """Record (id, predecessor) occurrences; on a conflict return (occurrence index, the
        predecessor it conflicts with)."""
        if len(ids) == 0:
            return None
        if not self.sparse and self._dense_ok(ids, preds):
            return self._dense(ids, preds)
        if not self.sparse:  # switch to sparse mode once, keeping what is known
            have = np.flatnonzero(self.dense != 0)
            self.keys, self.preds, self.sparse = have.astype(np.int64), self._dec(self.dense[have]), True
            self.dense = np.zeros(0, dtype=np.uint32)
        return self._sparse(ids, preds)

    def _dense(self, ids: np.ndarray, preds: np.ndarray) -> tuple[int, int] | None:
        top = int(ids.max()) + 1
        if top > len(self.dense):
            grown = np.zeros(max(top, len(self.dense) + len(self.dense) // 4), dtype=np.uint32)
            grown[: len(self.dense)] = self.dense
            self.dense = grown
        codes = self._enc(preds)
        known = self.dense[ids]
        old = np.flatnonzero((known != 0) & (known != codes))
        if len(old):
            return int(old[0]), int(self._dec(known[old[0] : old[0] + 1])[0])
        self.seen += int(np.count_nonzero(known == 0))
        # scatter (last write wins), then every occurrence must read back its own predecessor
        self.dense[ids] = codes
        new = np.flatnonzero(self.dense[ids] != codes)
        if len(new):  # two occurrences in this batch disagree (state is abandoned after this)
            j = int(new[0])
            return j, int(self._dec(self.dense[ids[j : j + 1]])[0])
        return None

    def _sparse(self, ids: np.ndarray, preds: np.ndarray) -> tuple[int, int] | None:
        order = np.lexsort((preds, ids))
        ids_s, pr_s = ids[order], preds[order]
        first = np.ones(len(ids_s), dtype=bool)
        first[1:] = ids_s[1:] != ids_s[:-1]
        head = pr_s[first][np.cumsum(first) - 1]
        diff = np.flatnonzero(pr_s != head)
        if len(diff):
            return int(order[diff[0]]), int(head[diff[0]])
        u_ids, u_pred, u_at = ids_s[first], pr_s[first], order[first]
        if len(self.keys):
            pos = np.minimum(np.searchsorted(self.keys, u_ids), len(self.keys) - 1)
            found = self.keys[pos] == u_ids
            bad = np.flatnonzero(found & (self.preds[pos] != u_pred))
            if len(bad):
                return int(u_at[bad[0]]), int(self.preds[pos[bad[0]]])
        else:
            found = np.zeros(len(u_ids), dtype=bool)
        keys = np.concatenate([self.keys, u_ids[~found]])
        preds_all = np.concatenate([self.preds, u_pred[~found]])
        o = np.argsort(keys, kind="stable")
        self.keys, self.preds = keys[o], preds_all[o]
        return None


class ChainChecker:
    """Feeds batches of REQUESTS rows; raises ChainViolation at the first broken promise."""

    def __init__(self) -> None:
        self._ns: dict[int, _NsState] = {}

    def feed(self, batch: pa.RecordBatch | pa.Table) -> None:
        offsets, values = list_parts(batch.column("hash_ids"))
        if len(values) == 0:
            return
        lengths = np.diff(offsets)
        ns_rows = np.asarray(batch.column("hash_ns").to_numpy(), dtype=np.int64)
        ns_flat = np.repeat(ns_rows, lengths)
        preds = np.empty_like(values)
        preds[1:] = values[:-1]
        starts = offsets[:-1][lengths > 0]
        preds[starts] = _ROOT
        rows = np.repeat(np.arange(len(lengths)), lengths)
        for ns in np.unique(ns_rows[lengths > 0]):
            one_ns = ns_rows.min() == ns_rows.max()
            sel = np.arange(len(values)) if one_ns else np.flatnonzero(ns_flat == ns)
            state = self._ns.setdefault(int(ns), _NsState())
            bad = state.check_and_add(values[sel], preds[sel])
            if bad is not None:
                j, known = bad
                occ = sel[j]
                self._raise(batch, int(ns), int(values[occ]), known, int(preds[occ]), int(rows[occ]))

    @staticmethod
    def _raise(batch: pa.RecordBatch | pa.Table, ns: int, hid: int, p1: int, p2: int, row: int) -> None:
        rid = int(batch.column("request_id")[row].as_py())
        raise ChainViolation(ns, hid, None if p1 == _ROOT else p1, None if p2 == _ROOT else p2, rid)
