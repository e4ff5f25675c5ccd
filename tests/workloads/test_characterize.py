"""Trace characterization: every metric against a hand computation or an independent brute force."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from kvwear.errors import KvwearError
from kvwear.reports.characterization import FIGURES, plot_characterization
from kvwear.workloads.characterize import (
    analyze,
    capacity_needed,
    fit_exponential,
    flatten,
    lru_curve,
)
from kvwear.workloads.characterize_stream import characterize
from kvwear.workloads.models import get_profile
from kvwear.workloads.schema import REQUESTS

DENSE = get_profile("llama3-70b")
HYBRID = get_profile("kimi-k3")


def make_table(rows: list[dict[str, Any]]) -> pa.Table:
    """A REQUESTS table from short dicts (request_id = position unless given)."""
    full = []
    for i, r in enumerate(rows):
        b = r.get("block_tokens", 4)
        ids = r["ids"]
        full.append(
            {
                "request_id": r.get("request_id", i),
                "session_id": r.get("session"),
                "parent_id": None,
                "stream_id": "main",
                "turn": r.get("turn"),
                "arrival_s": float(r["t"]),
                "input_tokens": r.get("input_tokens", r.get("hashed", len(ids) * b)),
                "output_tokens": 1,
                "category": r.get("cat", "text"),
                "model": None,
                "block_tokens": b,
                "hash_ns": r.get("ns", 0),
                "hash_ids": ids,
                "hashed_tokens": r.get("hashed", len(ids) * b),
            }
        )
    return pa.Table.from_pylist(full, schema=REQUESTS.with_metadata())


# Arrival order r0 (t=0), r1 (t=1.5), r2 (t=4); the table lists them out of order on purpose.
HAND = [
    {"t": 4.0, "ids": [1, 5], "cat": "A", "hashed": 5, "input_tokens": 6, "request_id": 12},
    {"t": 0.0, "ids": [1, 2, 3], "cat": "A", "hashed": 10, "input_tokens": 11, "request_id": 10},
    {"t": 1.5, "ids": [1, 2, 4], "cat": "B", "hashed": 12, "input_tokens": 12, "request_id": 11},
]
# access stream: k1 k2 k3 | k1 k2 k4 | k1 k5   (hits: r1's k1, k2; r2's k1)
# token weights (B = 4): r0 4 4 2 (hashed 10), r1 4 4 4, r2 4 1 (hashed 5)


def test_hit_ratios_by_hand() -> None:
    res = analyze(make_table(HAND), DENSE)
    assert (res.requests, res.block_accesses, res.unique_blocks, res.block_hits) == (3, 8, 5, 3)
    assert res.block_hit_ratio == pytest.approx(3 / 8)
    assert (res.hashed_tokens, res.hit_tokens) == (27, 12)
    assert res.token_hit_ratio == pytest.approx(12 / 27)
    assert res.input_token_hit_ratio == pytest.approx(12 / 29)
    cats = res.by_category.set_index("category")
    assert cats.loc["A", "block_accesses"] == 5 and cats.loc["A", "block_hits"] == 1
    assert cats.loc["A", "block_hit_ratio"] == pytest.approx(1 / 5)
    assert cats.loc["A", "token_hit_ratio"] == pytest.approx(4 / 15)
    assert cats.loc["B", "block_hit_ratio"] == pytest.approx(2 / 3)
    assert cats.loc["B", "token_hit_ratio"] == pytest.approx(8 / 12)
    assert list(cats["requests"]) == [2, 1]


def test_namespaces_keep_keys_apart() -> None:
    rows = [
        {"t": 0, "ids": [1, 2], "ns": 0},
        {"t": 1, "ids": [1, 2], "ns": 1},   # same ids, other namespace: misses
        {"t": 2, "ids": [1, 2, 3], "ns": 1},
        {"t": 3, "ids": [1], "ns": 0},
    ]
    res = analyze(make_table(rows), DENSE)
    assert res.unique_blocks == 5
    assert res.block_hits == 3
    life = res.lifespans.sort_values(["hash_ns", "hash_id"])
    assert list(zip(life["hash_ns"], life["hash_id"], life["accesses"], strict=True)) == [
        (0, 1, 2), (0, 2, 1), (1, 1, 2), (1, 2, 2), (1, 3, 1)
    ]


def test_reuse_skew_by_hand() -> None:
    # reuses per block: k1 2, k2 1, k3..k5 0 → total 3
    res = analyze(make_table(HAND), DENSE)
    assert res.reused_blocks == 2
    assert res.reuse_skew_block_share[0.50] == pytest.approx(1 / 5)  # k1 alone holds 2/3 ≥ 50 %
    assert res.reuse_skew_block_share[0.77] == pytest.approx(2 / 5)
    assert res.reuse_skew_block_share[0.90] == pytest.approx(2 / 5)
    curve = res.skew_curve
    assert curve["block_share"].iloc[0] == 0 and curve["reuse_share"].iloc[-1] == pytest.approx(1.0)
    assert curve["reuse_share"].iloc[1] == pytest.approx(2 / 3)


def test_reuse_times_and_lifespans_by_hand() -> None:
    res = analyze(make_table(HAND), DENSE)
    rr = res.request_reuse.set_index("request_id")
    # r1's deepest hit is k2, last touched by r0; r2's deepest hit is k1, last touched by r1
    assert rr.loc[11, "reuse_time_s"] == pytest.approx(1.5) and rr.loc[11, "source_request_id"] == 10
    assert rr.loc[12, "reuse_time_s"] == pytest.approx(2.5) and rr.loc[12, "source_request_id"] == 11
    assert list(rr.loc[[11, 12], "reused_blocks"]) == [2, 1]
    assert 10 not in rr.index
    bq = res.block_reuse_quantiles.set_index("category")
    # block reuse times: k1 1.5 (by B) and 2.5 (by A), k2 1.5 (by B)
    assert bq.loc["all", "n"] == 3 and bq.loc["all", "block_reuse_mean_s"] == pytest.approx(5.5 / 3)
    assert bq.loc["B", "block_reuse_p50_s"] == pytest.approx(1.5)
    assert bq.loc["A", "block_reuse_p50_s"] == pytest.approx(2.5)
    life = res.lifespans.set_index("hash_id")
    assert life["lifespan_s"].to_dict() == {1: 4.0, 2: 1.5, 3: 0.0, 4: 0.0, 5: 0.0}
    assert life.loc[4, "category"] == "B"
    assert res.lifespan_median_s == pytest.approx(2.75)


def test_capacity_by_hand_dense_and_hybrid() -> None:
    # live intervals over positions: k1 [0, 6), k2 [1, 4) → peak 2 blocks at position 1 (t = 0)
    res = analyze(make_table(HAND), DENSE)
    assert res.capacity_blocks == 2 and res.capacity_states == 0
    assert res.capacity_bytes == 2 * DENSE.chunk_bytes(4)
    assert res.capacity_peak_s == 0.0
    # hybrid: reuse points k2 (last used at position 4) and k1 (position 6), live from their
    # first access: states k2 [1, 4), k1 [0, 6) → 2 chunks + 2 states at position 1
    hyb = analyze(make_table(HAND), HYBRID)
    assert (hyb.capacity_blocks, hyb.capacity_states) == (2, 2)
    assert hyb.capacity_bytes == 2 * HYBRID.chunk_bytes(4) + 2 * HYBRID.state_bytes
    live = hyb.live
    assert list(live["live_blocks"]) == [2, 2, 0]  # max over each request's accesses
    assert list(live["live_states"]) == [2, 2, 0]


def test_sessions_and_same_session_flag() -> None:
    rows = [
        {"t": 0, "ids": [1, 2], "session": "a"},
        {"t": 1, "ids": [7, 8], "session": "b"},
        {"t": 2, "ids": [1, 2, 3], "session": "a"},
        {"t": 3, "ids": [1, 9], "session": "c"},   # reuses k1 last touched by session a
        {"t": 5, "ids": [7, 10]},                  # unknown session
    ]
    rr = analyze(make_table(rows), DENSE).request_reuse.set_index("request_id")
    assert bool(rr.loc[2, "same_session"])
    assert not bool(rr.loc[3, "same_session"])
    assert rr.loc[3, "reuse_time_s"] == 1.0
    assert rr["same_session"].isna().loc[4]
    assert rr.loc[4, "reuse_time_s"] == 4.0


def test_token_weight_clips_inconsistent_hashed_tokens() -> None:
    # hashed_tokens 3 < (n−1)·B: the last block weighs 0, not a negative count
    acc = flatten(make_table([{"t": 0, "ids": [1, 2], "hashed": 3}]))
    assert list(acc.tokens) == [4, 0]


def test_empty_and_blockless_tables() -> None:
    with pytest.raises(KvwearError, match="empty"):
        analyze(make_table([]), DENSE)
    res = analyze(make_table([{"t": 0, "ids": []}, {"t": 1, "ids": []}]), DENSE)
    assert res.block_accesses == 0 and math.isnan(res.block_hit_ratio)
    assert res.capacity_bytes == 0 and res.request_reuse.empty


# ---- exponential fit ------------------------------------------------------------------------


def test_exponential_fit_recovers_rate_and_ks_rejects_non_exponential() -> None:
    rng = np.random.default_rng(7)
    x = rng.exponential(scale=1 / 0.05, size=5000)
    fit = fit_exponential(x)
    assert fit.rate_per_s == pytest.approx(0.05, rel=0.05)
    assert fit.ks_pvalue > 0.01
    bad = fit_exponential(rng.uniform(10, 11, size=2000))
    assert bad.ks_pvalue < 1e-6 and bad.ks_statistic > 0.5
    assert math.isnan(fit_exponential([]).rate_per_s)
    assert math.isnan(fit_exponential([3.0]).ks_pvalue)
    with pytest.raises(ValueError):
        fit_exponential([-1.0, 2.0])


def test_fit_per_category_from_a_trace_with_exponential_turn_gaps() -> None:
    """Two-turn sessions whose second turn comes Exp(rate) after the first: rates are recovered."""
    rng = np.random.default_rng(3)
    rows: list[dict[str, Any]] = []
    next_id = 0
    for cat, rate in (("chat", 0.1), ("file", 0.01)):
        starts = np.sort(rng.uniform(0, 10_000, 1500))
        gaps = rng.exponential(1 / rate, starts.size)
        for s, g in zip(starts, gaps, strict=True):
            ids = [next_id, next_id + 1]
            next_id += 3
            sess = f"{cat}{next_id}"
            rows.append({"t": s, "ids": ids, "cat": cat, "session": sess})
            rows.append({"t": s + g, "ids": [*ids, next_id - 1], "cat": cat, "session": sess})
    res = analyze(make_table(rows), DENSE)
    cats = res.by_category.set_index("category")
    assert cats.loc["chat", "reuse_rate_per_s"] == pytest.approx(0.1, rel=0.1)
    assert cats.loc["file", "reuse_rate_per_s"] == pytest.approx(0.01, rel=0.1)
    assert (cats["reuse_n"] == 1500).all() and (cats["ks_pvalue"] > 0.001).all()
    assert res.request_reuse["same_session"].all()
    # the pooled sample is a mixture of two exponentials: the KS test rejects one exponential
    assert res.request_reuse_fit.ks_pvalue < 1e-6


# ---- capacity against brute force -----------------------------------------------------------


def _brute_live(keys: list[int]) -> list[int]:
    """Per position i: keys accessed at or before i and again after i (plain loops)."""
    out = []
    for i in range(len(keys)):
        before = set(keys[: i + 1])
        after = set(keys[i + 1:])
        out.append(len(before & after))
    return out


def _belady_hits(keys: list[int], capacity: int) -> int:
    """Hits of the optimal cache (Belady MIN, may bypass) with `capacity` blocks."""
    cache: set[int] = set()
    hits = 0
    for i, k in enumerate(keys):
        hits += k in cache
        cand = cache | {k}

        def next_use(b: int, i: int = i) -> float:
            for j in range(i + 1, len(keys)):
                if keys[j] == b:
                    return j
            return math.inf

        cand = {b for b in cand if next_use(b) < math.inf}
        while len(cand) > capacity:
            cand.remove(max(cand, key=next_use))
        cache = cand
    return hits


def test_capacity_equals_brute_force_and_is_the_belady_minimum() -> None:
    rng = np.random.default_rng(11)
    for _ in range(40):
        n_req = int(rng.integers(1, 12))
        rows = [
            {"t": float(t), "ids": [int(v) for v in rng.integers(0, 12, int(rng.integers(0, 6)))]}
            for t in np.sort(rng.integers(0, 20, n_req))
        ]
        table = make_table(rows)
        acc = flatten(table)
        keys = [int(k) for k in acc.key]
        cap = capacity_needed(acc, DENSE)
        brute = _brute_live(keys)
        assert [int(x) for x in cap.live_blocks] == brute
        peak = max(brute, default=0)
        assert cap.capacity_blocks == peak
        assert cap.capacity_bytes == peak * DENSE.chunk_bytes(4)
        ideal = len(keys) - len(set(keys))
        assert _belady_hits(keys, peak) == ideal
        if peak > 0:
            assert _belady_hits(keys, peak - 1) < ideal


def _lru_hits(keys: list[int], capacity: int) -> int:
    from collections import OrderedDict

    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for k in keys:
        if k in cache:
            hits += 1
            cache.move_to_end(k)
        else:
            cache[k] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def test_lru_curve_equals_an_lru_simulation() -> None:
    rng = np.random.default_rng(2)
    for _ in range(30):
        id_lists = [[int(v) for v in rng.integers(0, 15, int(rng.integers(0, 7)))]
                    for _ in range(int(rng.integers(1, 15)))]
        acc = flatten(make_table([{"t": t, "ids": ids} for t, ids in enumerate(id_lists)]))
        keys = [k for ids in id_lists for k in reversed(ids)]  # tail first within a request
        curve, c_max = lru_curve(acc, 100)
        ideal = len(keys) - len(set(keys))
        if ideal == 0:
            assert curve.empty and c_max == 0
            continue
        for c, ratio in zip(curve["capacity_blocks"], curve["block_hit_ratio"], strict=True):
            assert ratio * len(keys) == pytest.approx(_lru_hits(keys, int(c)))
        assert _lru_hits(keys, c_max) == ideal
        assert c_max == 1 or _lru_hits(keys, c_max - 1) < ideal
        assert list(curve["capacity_bytes"]) == [100 * c for c in curve["capacity_blocks"]]
        assert curve["capacity_blocks"].iloc[-1] == c_max


def test_hybrid_state_count_equals_brute_force() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        n_req = int(rng.integers(1, 10))
        # prefix-chained ids: a few prompt trees
        rows = []
        for t in range(n_req):
            base = int(rng.integers(0, 3)) * 100
            rows.append({"t": t, "ids": [base + j for j in range(int(rng.integers(1, 6)))]})
        acc = flatten(make_table(rows))
        keys = [int(k) for k in acc.key]
        reqs = [int(r) for r in acc.req]
        # brute force: each request with hits needs a state at its deepest hit block, from that
        # block's first access until the request's access of it
        seen: set[int] = set()
        deepest: dict[int, int] = {}
        for i, (k, r) in enumerate(zip(keys, reqs, strict=True)):
            if k in seen:
                deepest[r] = i
            seen.add(k)
        intervals: dict[int, tuple[int, int]] = {}
        for i in deepest.values():
            k = keys[i]
            first = keys.index(k)
            intervals[k] = (first, max(i, intervals.get(k, (0, 0))[1]))
        states = [sum(1 for a, b in intervals.values() if a <= i < b) for i in range(len(keys))]
        live = _brute_live(keys)
        total = [c * HYBRID.chunk_bytes(4) + s * HYBRID.state_bytes for c, s in zip(live, states, strict=True)]
        cap = capacity_needed(acc, HYBRID)
        assert [int(x) for x in cap.live_states] == states
        assert cap.capacity_bytes == max(total, default=0)


# ---- the real Mooncake trace ----------------------------------------------------------------


def test_mooncake_trace_loads_completely_and_ideal_hit_ratio_matches_raw(mooncake_path: Path) -> None:
    from kvwear.workloads.loaders import load_requests

    lines = [json.loads(x) for x in mooncake_path.read_text().splitlines() if x.strip()]
    loaded = load_requests(mooncake_path)
    table = loaded.table
    assert loaded.skipped_lines == 0
    assert table.num_rows == len(lines) == 12031
    # independent: replay the raw JSON in timestamp order (stable) with a set
    lines.sort(key=lambda d: d["timestamp"])
    seen: set[int] = set()
    hits = total = hit_tok = tok = 0
    for d in lines:
        ids = d["hash_ids"]
        for j, h in enumerate(ids):
            w = 512 if j < len(ids) - 1 else min(512, d["input_length"] - 512 * (len(ids) - 1))
            total += 1
            tok += w
            if h in seen:
                hits += 1
                hit_tok += w
            seen.add(h)
    res = analyze(table, HYBRID)
    assert res.block_accesses == total and res.block_hits == hits
    assert res.block_hit_ratio == hits / total
    assert res.unique_blocks == len(seen)
    assert res.token_hit_ratio == pytest.approx(hit_tok / tok, rel=1e-12)
    assert 0.2 < res.block_hit_ratio < 0.6
    assert res.capacity_bytes > res.capacity_blocks * HYBRID.chunk_bytes(512) > 0


# ---- output and CLI -------------------------------------------------------------------------


def _assert_png(path: Path) -> None:
    from PIL import Image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.size[0] > 400 and im.size[1] > 300


def test_characterize_writes_tables_json_and_figures(tmp_path: Path) -> None:
    from kvwear.tables import table_kind

    res, written = characterize(make_table(HAND), HYBRID, tmp_path / "c")
    written += plot_characterization(tmp_path / "c")
    names = {p.name for p in written}
    for fig in FIGURES:
        assert {f"{fig}.png", f"{fig}.svg"} <= names
        _assert_png(tmp_path / "c" / f"{fig}.png")
    assert "summary.json" in names
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["block_hits"] == 3 and summary["capacity_bytes"] == res.capacity_bytes
    assert summary["categories"]["B"]["block_hits"] == 2
    for p in written:
        if p.suffix == ".parquet":
            kind, ver = table_kind(p)
            assert kind is not None and kind.startswith("characterization.") and ver == 1
    assert not list((tmp_path / "c").glob(".*partial*"))


def _run_cli(args: list[str]) -> Any:
    from typer.testing import CliRunner

    import kvwear.harness.cli.characterize  # noqa: F401  (registers the command)
    from kvwear.harness.cli.main import app

    return CliRunner().invoke(app, args, catch_exceptions=False)


def test_cli_on_requests_table_writes_every_announced_file(tmp_path: Path) -> None:
    from kvwear.tables import write_table

    src = write_table(REQUESTS, make_table(HAND), tmp_path / "requests.parquet")
    out = tmp_path / "char"
    r = _run_cli(["trace", "characterize", str(src), "--model", "kimi-k3", "-o", str(out)])
    assert r.exit_code == 0, r.output
    announced = [Path(m) for m in re.findall(r"^  (\S+)$", r.output, flags=re.M)]
    assert len(announced) == 7 + 1 + 2 * len(FIGURES)
    assert all(p.is_file() and p.parent == out for p in announced)
    for p in announced:
        if p.suffix == ".png":
            _assert_png(p)
    assert "ideal hit ratio (blocks)" in r.output and "37.5%" in r.output


def test_cli_on_raw_mooncake_with_block_conversion(tmp_path: Path, mooncake_path: Path) -> None:
    out = tmp_path / "mc"
    r = _run_cli(["trace", "characterize", str(mooncake_path), "-m", "llama3-70b", "-o", str(out),
                  "--block-tokens", "1024"])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == 12031 and summary["block_tokens"] == 1024
    assert summary["chunk_bytes"] == DENSE.chunk_bytes(1024)


def test_cli_refuses_a_parquet_table_of_another_kind(tmp_path: Path) -> None:
    from kvwear.tables import TableSpec, write_table

    spec = TableSpec("wear", 1, pa.schema([pa.field("t_s", pa.float64())]))
    p = write_table(spec, pa.table({"t_s": [1.0]}), tmp_path / "w.parquet")
    with pytest.raises(KvwearError, match="not a requests table"):
        _run_cli(["trace", "characterize", str(p), "-o", str(tmp_path / "x")])


def test_trace_a_generator_reuse_means_are_recovered_per_category() -> None:
    """The Trace-A-like generator draws exponential inter-turn gaps with a mean per category: the
    same-session fit recovers each mean (within 4 standard errors) and the KS test accepts it."""
    from kvwear.workloads.synthetic import TRACE_A_REUSE_MEAN_S, generate

    res = analyze(generate("trace-a", seed=1), DENSE)
    assert res.reuse_fit_sample == "same-session"
    cats = res.by_category.set_index("category").to_dict("index")
    for cat, mean_s in TRACE_A_REUSE_MEAN_S:
        n = cats[cat]["reuse_n"]
        assert n > 300
        assert abs(cats[cat]["reuse_mean_s"] - mean_s) < 4 * mean_s / math.sqrt(n)
        assert cats[cat]["ks_pvalue"] > 0.01
    rr = res.request_reuse
    assert rr["in_fit"].equals(rr["same_session"].astype(bool))


def test_cli_names_an_impossible_block_size(tmp_path: Path, mooncake_path: Path) -> None:
    from kvwear.tables import write_table

    with pytest.raises(KvwearError, match="300"):
        _run_cli(["trace", "characterize", str(mooncake_path), "-b", "300", "-o", str(tmp_path / "x")])
    src = write_table(REQUESTS, make_table(HAND), tmp_path / "requests.parquet")
    with pytest.raises(KvwearError, match="--block-tokens 3"):
        _run_cli(["trace", "characterize", str(src), "-b", "3", "-o", str(tmp_path / "y")])
