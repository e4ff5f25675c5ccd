"""Reference history by stable key, kept across evictions (hotprefix, lru-k, meritkv; gandalf's
ghost table).

A cache object dies when it leaves every tier (`kvwear.policies.tree`: a ghost leaf is pruned, a
re-inserted ghost restarts `refs`), but several baselines count references over an object's
whole life — LRU-K's HIST, HotPrefix's node hotness, MeritKV's per-object demands. `KeyHistory`
keeps, per stable identity (`base.obj_keys`: one key per block, one per state), the number of
requests that referenced it and when it was last referenced, and forgets keys idle longer than a
retention period (bounded memory; O'Neil et al.'s *retained information period*).

The owner calls `begin_request(clock)` once per request; a request then counts once per key
however often the policy reports it (the simulator may visit an object more than once per
request: a state is placed before its segment is walked). Forgetting is amortized: a full sweep
at most every half period of the clock the owner uses (requests or seconds of trace time), so a
key lives between one and one and a half periods after its last reference.

`GhostTable` is gandalf's memory of dropped objects: at most `capacity` keys (kind, hash
namespace, hash id), each with when it last served and how often, the oldest forgotten first.
It holds what an OrderedDict of those tuples held (~290 B an entry) in ~150 B: the key packed
into one int, the two numbers in numpy arrays of a ring indexed by insertion order.

Must not: know about tiers or the simulator; do I/O; keep global state.
"""

from __future__ import annotations

import numpy as np

from kvwear.policies.base import obj_keys
from kvwear.policies.tree import Obj, Segment, State


class KeyHistory:
    """Reference counts per stable key with a retention period on a caller-chosen clock."""

    __slots__ = ("_clock", "_entries", "_next_sweep", "_req", "retain")

    def __init__(self, retain: float) -> None:
        if not retain > 0:
            raise ValueError(f"retention period must be > 0, got {retain}")
        self.retain = float(retain)
        # key → [references, request number of the last reference, clock of the last reference]
        self._entries: dict[tuple[int, int], list[float]] = {}
        self._next_sweep = self.retain / 2
        self._req = 0
        self._clock = 0.0

    def __len__(self) -> int:
        return len(self._entries)

    def begin_request(self, clock: float) -> None:
        """A new request starts at `clock` (non-decreasing); forget what is older than the period."""
        self._req += 1
        self._clock = clock
        if clock < self._next_sweep:
            return
        horizon = clock - self.retain
        self._entries = {k: e for k, e in self._entries.items() if e[2] >= horizon}
        self._next_sweep = clock + self.retain / 2

    def ref_keys(self, keys: list[tuple[int, int]]) -> None:
        """Count one reference by the current request of each key (at most once per request)."""
        entries = self._entries
        seq = self._req
        clock = self._clock
        for k in keys:
            e = entries.get(k)
            if e is None:
                entries[k] = [1, seq, clock]
            elif e[1] != seq:
                e[0] += 1
                e[1] = seq
                e[2] = clock

    def ref(self, obj: Obj) -> None:
        """Count a reference of every key of `obj` by the current request."""
        self.ref_keys(obj_keys(obj))

    def count(self, key: tuple[int, int]) -> int:
        """References of `key` within the retention period (0 if unknown or forgotten)."""
        e = self._entries.get(key)
        return 0 if e is None else int(e[0])

    def least(self, obj: Obj) -> int:
        """The fewest references of any key of `obj` (every block was referenced that often)."""
        entries = self._entries
        lowest = -1
        for k in obj_keys(obj):
            e = entries.get(k)
            c = 0 if e is None else int(e[0])
            if lowest < 0 or c < lowest:
                lowest = c
        return max(lowest, 0)

    def entered(self, obj: Obj) -> int:
        """References of the object's root-side key: for a segment, how many requests reached
        the prefix node it starts; for a state, those of the segment it ends."""
        if isinstance(obj, Segment):
            seg = obj
        else:
            assert isinstance(obj, State)
            seg = obj.seg
        if not seg.keys:
            return 0
        return self.count((seg.ns, seg.keys[0]))


_M32 = (1 << 32) - 1
_M64 = (1 << 64) - 1


class GhostTable:
    """A map (kind, ns, hash id) → (last served s, requests served) in insertion order, bounded
    to `capacity` keys: `put` of a new key forgets the oldest past the bound, `put` of a known key
    updates it in place (an OrderedDict's `d[k] = v; if len(d) > cap: d.popitem(last=False)`).

    Compact: `_seq` maps the packed key (hash id, namespace and kind as one int: unique for 0 ≤
    kind < 2 and any int64 id and int32 namespace) to its insertion number; a ring of insertion
    numbers holds the key (None once popped) and the two numbers. The ring is rebuilt with only
    the live keys, in order, when it fills: at twice their number, so in amortized O(1)."""

    __slots__ = ("_head", "_keys", "_refs", "_seq", "_t", "_tail", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"ghost table capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._seq: dict[int, int] = {}
        self._keys: list[int | None] = [None] * 1024
        self._t = np.zeros(1024, np.float64)
        self._refs = np.zeros(1024, np.int64)
        self._head = 0   # the next insertion number
        self._tail = 0   # no live key was inserted before it

    def __len__(self) -> int:
        return len(self._seq)

    @staticmethod
    def _pack(kind: int, ns: int, hash_id: int) -> int:
        return ((hash_id & _M64) << 33) | ((ns & _M32) << 1) | kind

    def has(self, kind: int, ns: int, hash_id: int) -> bool:
        return self._pack(kind, ns, hash_id) in self._seq

    def pop(self, kind: int, ns: int, hash_id: int) -> tuple[float, int] | None:
        """Remove the key; its (last served s, requests served), or None if unknown."""
        seq = self._seq.pop(self._pack(kind, ns, hash_id), None)
        if seq is None:
            return None
        i = seq % len(self._keys)
        self._keys[i] = None
        return float(self._t[i]), int(self._refs[i])

    def put(self, kind: int, ns: int, hash_id: int, value: tuple[float, int]) -> None:
        key = self._pack(kind, ns, hash_id)
        seq = self._seq.get(key)
        if seq is None:
            if self._head - self._tail == len(self._keys):
                self._rebuild()
            seq = self._head
            self._head += 1
            self._seq[key] = seq
            self._keys[seq % len(self._keys)] = key
        i = seq % len(self._keys)
        self._t[i], self._refs[i] = value
        if len(self._seq) > self.capacity:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        keys, size = self._keys, len(self._keys)
        while keys[self._tail % size] is None:
            self._tail += 1
        i = self._tail % size
        del self._seq[keys[i]]  # type: ignore[arg-type]
        keys[i] = None
        self._tail += 1

    def _rebuild(self) -> None:
        """The ring is full: lay the live keys out again from 0, in order, in a ring of twice
        their number (at least as large as now when they fill more than half of it)."""
        old, size = self._keys, len(self._keys)
        live = [(self._tail + j) % size for j in range(self._head - self._tail)
                if old[(self._tail + j) % size] is not None]
        n = len(live)
        new_size = max(1024, 2 * n, size if 2 * n <= size else 2 * size)
        keys: list[int | None] = [None] * new_size
        idx = np.asarray(live, dtype=np.int64)
        t = np.zeros(new_size, np.float64)
        refs = np.zeros(new_size, np.int64)
        t[:n] = self._t[idx]
        refs[:n] = self._refs[idx]
        seq = self._seq
        for j, i in enumerate(live):
            k = old[i]
            keys[j] = k
            seq[k] = j  # type: ignore[index]
        self._keys, self._t, self._refs = keys, t, refs
        self._tail, self._head = 0, n
