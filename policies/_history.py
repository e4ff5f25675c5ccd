"""Reference history by stable key, kept across evictions (hotprefix, lru-k, meritkv).

A cache object dies when it leaves every tier (`policies.tree`: a ghost leaf is pruned, a
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

Must not: know about tiers or the simulator; do I/O; keep global state.
"""

from __future__ import annotations

from policies.base import obj_keys
from policies.tree import Obj, Segment, State


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
