"""Block-size conversion: agreement with a per-id reference, and where it is exact
(ideal infinite-cache hits) on the real Mooncake and Weka traces and on built tables."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvwear.workloads.blocks import convert_block_size, prefix_keys
from kvwear.workloads.loaders import load_requests
from kvwear.workloads.schema import REQUESTS


def table(lists: list[list[int]], block: int, hashed: list[int] | None = None, ns: list[int] | None = None
          ) -> pa.Table:
    n = len(lists)
    hashed = hashed if hashed is not None else [block * len(x) for x in lists]
    return REQUESTS.conform(pa.table({
        "request_id": pa.array(range(n), pa.int64()),
        "session_id": pa.nulls(n, pa.string()),
        "parent_id": pa.nulls(n, pa.int64()),
        "stream_id": pa.array(["main"] * n),
        "turn": pa.nulls(n, pa.int32()),
        "arrival_s": pa.array(np.arange(n, dtype=np.float64)),
        "input_tokens": pa.array(hashed, pa.int64()),
        "output_tokens": pa.array([1] * n, pa.int64()),
        "category": pa.array(["x"] * n),
        "model": pa.nulls(n, pa.string()),
        "block_tokens": pa.array([block] * n, pa.int32()),
        "hash_ns": pa.array(ns if ns is not None else [0] * n, pa.int32()),
        "hash_ids": pa.array(lists, pa.list_(pa.int64())),
        "hashed_tokens": pa.array(hashed, pa.int64()),
    }))


def prefix_hits(t: pa.Table) -> list[int]:
    """Per request, in arrival order: leading blocks already seen (an infinite cache)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for ns, ids in zip(t.column("hash_ns").to_pylist(), t.column("hash_ids").to_pylist(), strict=True):
        h = 0
        while h < len(ids) and (ns, ids[h]) in seen:
            h += 1
        out.append(h)
        seen.update((ns, x) for x in ids)
    return out


def ref_split(lists: list[list[int]], hashed: list[int], k: int, s: int) -> list[list[tuple[int, int]]]:
    out = []
    for ids, ht in zip(lists, hashed, strict=True):
        keys = [(x, j) for x in ids for j in range(k)]
        out.append(keys[: min(len(keys), math.ceil(ht / s))])
    return out


def ref_group(lists: list[list[int]], hashed: list[int], k: int, s: int) -> list[list[tuple[int, ...]]]:
    out = []
    for ids, ht in zip(lists, hashed, strict=True):
        n = min(ht // s, len(ids) // k)
        out.append([tuple(ids[: (g + 1) * k]) for g in range(n)])
    return out


def same_partition(got: list[list[int]], want: list[list[object]]) -> bool:
    """Equal shapes, and equal keys exactly where the reference keys are equal."""
    if [len(x) for x in got] != [len(x) for x in want]:
        return False
    mapping: dict[object, int] = {}
    back: dict[int, object] = {}
    for g_row, w_row in zip(got, want, strict=True):
        for g, w in zip(g_row, w_row, strict=True):
            if mapping.setdefault(w, g) != g or back.setdefault(g, w) != w:
                return False
    return True


lists_st = st.lists(st.lists(st.integers(0, 6), max_size=9), min_size=1, max_size=8)


@settings(max_examples=80, deadline=None)
@given(lists=lists_st, k=st.sampled_from([2, 3, 4]), data=st.data())
def test_split_and_group_match_the_per_id_reference(lists: list[list[int]], k: int, data: st.DataObject) -> None:
    b = 48  # divisible by every k drawn
    hashed = [data.draw(st.integers(max(0, b * len(x) - b + 1) if x else 0, b * len(x))) for x in lists]
    t = table(lists, b, hashed)
    split = convert_block_size(t, b // k)
    assert same_partition(split.column("hash_ids").to_pylist(), ref_split(lists, hashed, k, b // k))  # type: ignore[arg-type]
    assert split.column("hashed_tokens").to_pylist() == hashed
    grouped = convert_block_size(t, b * k)
    want = ref_group(lists, hashed, k, b * k)
    assert same_partition(grouped.column("hash_ids").to_pylist(), want)  # type: ignore[arg-type]
    assert grouped.column("hashed_tokens").to_pylist() == [len(w) * b * k for w in want]
    assert set(grouped.column("block_tokens").to_pylist()) == {b * k}


def test_prefix_keys_depend_on_the_whole_prefix_only() -> None:
    lists = [[1, 2, 3], [9, 2, 3], [1, 2, 4], [1, 2]]
    offs = np.array([0, 3, 6, 9, 11])
    keys = prefix_keys(offs, np.array([x for row in lists for x in row]))
    k = [keys[offs[i]:offs[i + 1]].tolist() for i in range(4)]
    assert k[0][:2] == k[2][:2] == k[3] and k[0][2] != k[2][2]
    assert k[1][1] != k[0][1] and k[1][2] != k[0][2]  # same id, different prefix
    # a key does not depend on which other rows share the batch
    alone = prefix_keys(np.array([0, 3]), np.array([9, 2, 3]))
    assert alone.tolist() == k[1]


def test_split_is_exact_on_weka_full_blocks(weka_dir: Path) -> None:
    src = load_requests(weka_dir).table  # Weka hashes full 64-token blocks only
    for s in (16,):
        k = 64 // s
        out = convert_block_size(src, s)
        assert sum(prefix_hits(out)) == k * sum(prefix_hits(src))
        assert out.column("hashed_tokens").equals(src.column("hashed_tokens"))


def test_split_on_mooncake_partial_last_blocks(mooncake_path: Path) -> None:
    src = load_requests(mooncake_path).table
    s, k = 128, 4  # (16 works the same; 128 keeps the pure-Python reference quick)
    out = convert_block_size(src, s)
    hashed = src.column("hashed_tokens").to_numpy()
    assert [len(x) for x in out.column("hash_ids").to_pylist()] == (-(-hashed // s)).tolist()
    # hits: a hit source block contributes all its sub-blocks; a partial last block only
    # ceil(covered/s) of them (the same count wherever that id appears)
    want = 0
    for h, ht in zip(prefix_hits(src), hashed.tolist(), strict=True):
        want += sum(min(k, math.ceil((ht - 512 * i) / s)) for i in range(h))
    assert sum(prefix_hits(out)) == want
    full_only = sum(prefix_hits(src)) * k
    assert want <= full_only  # the documented difference: partial blocks hold fewer sub-blocks


def test_group_is_exact_when_lengths_and_reuse_align() -> None:
    # conversations: each turn extends the previous turn by a multiple of k blocks
    rng = np.random.default_rng(3)
    k, b = 4, 16
    lists, nxt = [], 0
    for _session in range(20):
        ids: list[int] = []
        for _turn in range(5):
            grow = int(rng.integers(1, 4)) * k
            ids = ids + list(range(nxt, nxt + grow))
            nxt += grow
            lists.append(list(ids))
    t = table(lists, b)
    g = convert_block_size(t, k * b)
    assert sum(prefix_hits(g)) * k == sum(prefix_hits(t)) > 0
    assert g.column("hashed_tokens").equals(t.column("hashed_tokens"))


def test_group_on_weka_shows_the_documented_difference(weka_dir: Path) -> None:
    src = load_requests(weka_dir).table
    k = 4
    g = convert_block_size(src, 64 * k)
    # exact rule: a request hits floor(h'/k) groups, h' = source prefix hits on the kept blocks
    kept = [x[: (len(x) // k) * k] for x in src.column("hash_ids").to_pylist()]
    trunc = src.set_column(src.schema.get_field_index("hash_ids"), "hash_ids",
                           pa.array(kept, pa.list_(pa.int64())))
    h_trunc = prefix_hits(trunc)
    assert prefix_hits(g) == [h // k for h in h_trunc]
    lost_tokens = 64 * sum(prefix_hits(src)) - 64 * k * sum(prefix_hits(g))
    assert lost_tokens > 0  # reuse that ends inside a 256-token group is not seen
    dropped = src.column("hashed_tokens").to_numpy() - g.column("hashed_tokens").to_numpy()
    assert ((dropped >= 0) & (dropped < 64 * k)).all()


def test_mixed_block_sizes_and_bad_sizes() -> None:
    a = table([[1, 2], [3]], 64)
    b = table([[1, 2, 3, 4]], 16)
    mixed = pa.concat_tables([a.slice(0, 1), b, a.slice(1, 1)])
    out = convert_block_size(mixed, 16)
    assert [len(x) for x in out.column("hash_ids").to_pylist()] == [8, 4, 4]
    assert out.column("request_id").to_pylist() == mixed.column("request_id").to_pylist()
    with pytest.raises(ValueError, match="one must divide the other"):
        convert_block_size(a, 48)
    with pytest.raises(ValueError):
        convert_block_size(a, 0)
    assert convert_block_size(a, 64).equals(a)


def test_large_ids_use_mixed_split_keys() -> None:
    t = table([[2**62, 5], [2**62, 6]], 64)
    out = convert_block_size(t, 16).column("hash_ids").to_pylist()
    assert out[0][:4] == out[1][:4] and len(set(out[0])) == 8 and not set(out[0][4:]) & set(out[1][4:])


def test_split_keys_do_not_depend_on_the_batch() -> None:
    # a stream is converted batch by batch: an id's derived keys must not change with the other
    # ids of its batch (a large or negative id elsewhere once switched the whole batch to mixing)
    alone = convert_block_size(table([[3, 4]], 64), 16).column("hash_ids").to_pylist()[0]
    for other in (2**62, -7):
        with_big = convert_block_size(table([[3, 4], [other]], 64), 16).column("hash_ids").to_pylist()
        assert with_big[0] == alone
