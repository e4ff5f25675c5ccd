"""Synthetic generators: determinism, schema, prefix-chained hash ids, and the statistics asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvwear.errors import UnknownNameError
from kvwear.harness.cli.main import app
from kvwear.tables import read_table
from kvwear.workloads.schema import REQUESTS
from kvwear.workloads.synthetic import (
    GENERATORS,
    AgenticConfig,
    ApiConfig,
    MultiRoundConfig,
    TraceAConfig,
    config_fields,
    generate,
    parse_category_map,
)

SMALL: dict[str, dict[str, Any]] = {
    "multi-round": {"sessions": 30, "turns": 12},
    "agentic": {"sessions": 6},
    "api": {"requests": 3000, "qps": 100.0},
    "trace-a": {"sessions": 800},
}


def _ids(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    col = table.column("hash_ids").combine_chunks()
    return (np.asarray(col.offsets, dtype=np.int64),
            np.asarray(col.values, dtype=np.int64))


class _RowIds:
    """Row i's hash ids, from one flattening of the column."""

    def __init__(self, table: pa.Table) -> None:
        self.off, self.vals = _ids(table)

    def __call__(self, i: int) -> np.ndarray:
        return self.vals[self.off[i]:self.off[i + 1]]


def _assert_prefix_chained(table: pa.Table) -> None:
    """Every id has exactly one predecessor (−1 = none) across the whole table."""
    off, vals = _ids(table)
    pred = np.concatenate([[-1], vals[:-1]])
    pred[off[:-1][off[:-1] < len(vals)]] = -1  # first id of each row has no predecessor
    assert vals.min(initial=0) >= 0 and vals.max(initial=0) < 2**31
    pairs = np.unique((vals << 32) | (pred + 1))  # one int64 per (id, predecessor) pair
    ids, counts = np.unique(pairs >> 32, return_counts=True)
    assert counts.max() == 1, f"ids with several predecessors: {ids[counts > 1][:10]}"


@pytest.mark.parametrize("kind", GENERATORS.names())
def test_deterministic_and_seed_sensitive(kind: str) -> None:
    a = generate(kind, seed=7, **SMALL[kind])
    b = generate(kind, seed=7, **SMALL[kind])
    c = generate(kind, seed=8, **SMALL[kind])
    assert a.equals(b)
    assert not a.equals(c)


@pytest.mark.parametrize("kind", GENERATORS.names())
def test_schema_and_invariants(kind: str) -> None:
    t = generate(kind, seed=3, model="kimi-k3", **SMALL[kind])
    assert t.schema.equals(REQUESTS.with_metadata(), check_metadata=False)
    assert t.num_rows > 0
    d = t.drop_columns(["hash_ids"]).to_pandas()
    assert (np.diff(d["arrival_s"]) >= 0).all()
    assert (d["request_id"] == np.arange(len(d))).all()
    assert (d["block_tokens"] == 16).all() and (d["model"] == "kimi-k3").all()
    assert (d["output_tokens"] >= 1).all()
    lengths = np.asarray(pc.list_value_length(t.column("hash_ids")).to_numpy(), dtype=np.int64)
    # Only full blocks are hashed.
    assert (d["hashed_tokens"] == lengths * 16).all()
    assert (d["hashed_tokens"] == d["input_tokens"] // 16 * 16).all()
    # Parents come earlier, in the same session.
    has = d["parent_id"].notna()
    par = d.loc[has, "parent_id"].astype(np.int64).to_numpy()
    assert (par < d.index[has]).all()
    assert (d["session_id"].to_numpy()[par] == d.loc[has, "session_id"].to_numpy()).all()
    _assert_prefix_chained(t)


def test_multi_round_context_growth_and_shared_prompt() -> None:
    cfg = MultiRoundConfig(sessions=25, turns=15, seed=2, system_prompt_tokens=1000)
    t = generate("multi-round", **{f: getattr(cfg, f) for f in ("sessions", "turns", "seed",
                                                                  "system_prompt_tokens")})
    ids = _RowIds(t)
    d = t.drop_columns(["hash_ids"]).to_pandas()
    assert len(d) == 25 * 15 and d["session_id"].nunique() == 25
    assert sorted(d["turn"].unique()) == list(range(1, 16))
    assert (d.loc[d["turn"] == 1, "parent_id"].isna()).all()
    child = d[d["parent_id"].notna()]
    parent = d.loc[child["parent_id"].astype(int)]
    new_user = child["input_tokens"].to_numpy() - parent["input_tokens"].to_numpy() \
        - parent["output_tokens"].to_numpy()
    assert (new_user >= 1).all()  # input = previous input + previous output + new user tokens
    assert (child["turn"].to_numpy() == parent["turn"].to_numpy() + 1).all()
    for i, p in zip(child.index[:200], child["parent_id"].astype(int)[:200], strict=True):
        prev, cur = ids(p), ids(i)
        assert (cur[: len(prev)] == prev).all() and len(cur) > len(prev)
    # The system prompt's 62 full blocks (1000 // 16) are the same ids in every session.
    firsts = np.stack([ids(i)[:62] for i in d.index[d["turn"] == 1]])
    assert (firsts == firsts[0]).all()
    seconds = {int(ids(i)[62]) for i in d.index[d["turn"] == 1]}
    assert len(seconds) == 25  # after the prompt every session is its own


def test_multi_round_hundred_turn_stress_case() -> None:
    t = generate("multi-round", sessions=3, turns=100, seed=1)
    d = t.drop_columns(["hash_ids"]).to_pandas()
    assert len(d) == 300 and d["turn"].max() == 100
    last = d[d["turn"] == 100]
    first = d[d["turn"] == 1]
    assert last["input_tokens"].min() > 50 * first["input_tokens"].max() / 10
    _assert_prefix_chained(t)


def test_agentic_subagents_tools_and_compaction() -> None:
    cfg = dict(sessions=8, seed=5, subagent_prob=0.3, system_prompt_tokens=4000,
               max_context_tokens=60000, compact_summary_tokens=2000)
    t = generate("agentic", **cfg)
    ids = _RowIds(t)
    d = t.drop_columns(["hash_ids"]).to_pandas()
    streams = set(d["stream_id"])
    assert "main" in streams and any(s.startswith("sub") for s in streams)
    assert set(d["category"]) == {"agent", "subagent"}
    assert ((d["stream_id"] == "main") == (d["category"] == "agent")).all()
    k = 4000 // 16
    prompt = ids(0)[:k]
    for i in range(len(d)):  # every call, main or subagent, starts with the shared prompt
        assert (ids(i)[:k] == prompt).all()
    sub_first = d[(d["stream_id"] != "main") & (d["turn"] == 1)]
    assert len(sub_first) > 0
    spawner = d.loc[sub_first["parent_id"].astype(int)]
    assert (spawner["stream_id"] == "main").all()
    assert (spawner["session_id"].to_numpy() == sub_first["session_id"].to_numpy()).all()
    for i, p in zip(sub_first.index, spawner.index, strict=True):
        # A subagent shares the system prompt with its parent, then diverges.
        a, b = ids(i), ids(p)
        assert a[k] != b[k]
    # Tool results grow the context; compaction (a new prefix chain) shrinks it.
    main = d[(d["stream_id"] == "main") & d["parent_id"].notna()]
    before = d.loc[main["parent_id"].astype(int)]
    grown = main["input_tokens"].to_numpy() > before["input_tokens"].to_numpy() + before[
        "output_tokens"].to_numpy()
    assert grown.mean() > 0.9
    assert (main["input_tokens"].to_numpy() < before["input_tokens"].to_numpy()).any()
    assert d["input_tokens"].max() <= 60000 + 20000  # at most one step beyond the limit
    _assert_prefix_chained(t)


def test_api_shared_prompt_reuse_zipf() -> None:
    cfg = ApiConfig(requests=20000, qps=400.0, system_prompts=5, zipf_exponent=1.0, seed=4)
    t = generate("api", requests=cfg.requests, qps=cfg.qps, system_prompts=5, zipf_exponent=1.0,
                 seed=4)
    ids = _RowIds(t)
    d = t.drop_columns(["hash_ids"]).to_pandas()
    assert d["parent_id"].isna().all() and d["session_id"].isna().all()
    assert np.mean(np.diff(d["arrival_s"])) == pytest.approx(1 / 400.0, rel=0.03)
    off, vals = _ids(t)
    first = vals[off[:-1]]
    uniq, counts = np.unique(first, return_counts=True)
    assert len(uniq) == 5  # every request starts with one of the 5 shared prompts
    expected = 1 / np.arange(1, 6)
    expected /= expected.sum()
    assert np.sort(counts)[::-1] / len(d) == pytest.approx(expected, abs=0.015)
    # Requests sharing a prompt share all of that prompt's blocks.
    top = uniq[np.argmax(counts)]
    rows = np.flatnonzero(first == top)[:50]
    lens = [len(ids(int(i))) for i in rows]
    common = min(lens)
    block = np.stack([ids(int(i))[:common] for i in rows])
    agree = (block == block[0]).all(axis=0)
    cp = int(np.argmin(agree)) if not agree.all() else common
    assert cp >= 1 and agree[:cp].all()
    if cp < common:  # past the prompt every request is its own
        assert len(set(block[:, cp].tolist())) == len(rows)


def test_trace_a_shares_and_reuse_times() -> None:
    cfg = TraceAConfig(sessions=20000, seed=11)
    t = generate("trace-a", sessions=20000, seed=11)
    d = t.drop_columns(["hash_ids"]).to_pandas()
    follow = d["parent_id"].notna()
    assert (follow == (d["turn"] > 1)).all()
    assert follow.mean() == pytest.approx(0.46, abs=0.015)
    firsts = d[~follow]
    shares = firsts["category"].value_counts(normalize=True)
    for cat, share in cfg.category_shares:
        assert shares[cat] == pytest.approx(share, abs=0.015)
    # Categories stay within a session.
    child = d[follow]
    parent = d.loc[child["parent_id"].astype(int)]
    assert (child["category"].to_numpy() == parent["category"].to_numpy()).all()
    gaps = child["arrival_s"].to_numpy() - parent["arrival_s"].to_numpy()
    for cat, mean_s in cfg.reuse_mean_s:
        g = gaps[child["category"].to_numpy() == cat]
        assert len(g) > 500
        assert g.mean() == pytest.approx(mean_s, rel=0.08)
        # Exponential: the coefficient of variation is 1 and the median is mean·ln 2.
        assert g.std() / g.mean() == pytest.approx(1.0, abs=0.08)
        assert np.median(g) == pytest.approx(mean_s * np.log(2), rel=0.1)


def test_trace_a_custom_categories_and_means() -> None:
    t = generate("trace-a", sessions=3000, seed=1, multi_turn_share=0.2,
                 category_shares="text=1,search=1", reuse_mean_s="text=10,search=1000",
                 system_prompt_tokens="text=32,search=0", new_tokens_mean="text=50,search=60",
                 output_tokens_mean="text=10,search=10")
    d = t.drop_columns(["hash_ids"]).to_pandas()
    assert set(d["category"]) == {"text", "search"}
    assert d["parent_id"].notna().mean() == pytest.approx(0.2, abs=0.03)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="sessions"):
        MultiRoundConfig(sessions=0)
    with pytest.raises(ValueError, match="subagent_prob"):
        AgenticConfig(subagent_prob=1.5)
    with pytest.raises(ValueError, match="reuse_mean_s: no value for category image"):
        TraceAConfig(reuse_mean_s=parse_category_map("text=1,file=1,search=1"))
    with pytest.raises(ValueError, match="NAME=NUMBER"):
        parse_category_map("text:0.5")
    with pytest.raises(UnknownNameError, match="multi-round"):
        generate("chatbot")
    # Every option of every kind carries help text.
    for kind in GENERATORS.names():
        assert all(h for _, _, h in config_fields(kind))


def test_cli_generate_demo_command(tmp_path: Path) -> None:
    out = tmp_path / "demo" / "requests.parquet"
    runner = CliRunner()
    res = runner.invoke(app, ["trace", "generate", "multi-round", "--sessions", "40", "--turns", "20",
                              "--seed", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "800 requests" in res.output
    written = read_table(REQUESTS, out)
    assert written.equals(generate("multi-round", sessions=40, turns=20, seed=1).replace_schema_metadata(
        written.schema.metadata))
    ta = tmp_path / "a.parquet"
    res = runner.invoke(app, ["trace", "generate", "trace-a", "--sessions", "200",
                              "--category-shares", "text=0.5,image=0.5",
                              "--reuse-mean-s", "text=5,image=50",
                              "--system-prompt-tokens", "text=100,image=200",
                              "--new-tokens-mean", "text=10,image=20",
                              "--output-tokens-mean", "text=10,image=20", "-o", str(ta)])
    assert res.exit_code == 0, res.output
    assert set(read_table(REQUESTS, ta).column("category").to_pylist()) == {"text", "image"}
    bad = runner.invoke(app, ["trace", "generate", "api", "--qps", "0", "-o", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "qps" in bad.output
    assert not (tmp_path / "x").exists()
    helped = runner.invoke(app, ["trace", "generate", "agentic", "--help"], terminal_width=200)
    assert helped.exit_code == 0 and "--subagent-prob" in helped.output and "Examples" in helped.output


def test_chain_check_catches_two_predecessors() -> None:
    ok = pa.table({"hash_ids": pa.array([[1, 2, 3], [1, 2, 5]], pa.list_(pa.int64()))})
    _assert_prefix_chained(ok)
    bad = pa.table({"hash_ids": pa.array([[1, 2, 3], [4, 2]], pa.list_(pa.int64()))})
    with pytest.raises(AssertionError, match="several predecessors"):
        _assert_prefix_chained(bad)
    first_elsewhere = pa.table({"hash_ids": pa.array([[7, 8], [8]], pa.list_(pa.int64()))})
    with pytest.raises(AssertionError):
        _assert_prefix_chained(first_elsewhere)


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["multi-round", "agentic", "trace-a", "api"]),
    block_tokens=st.sampled_from([1, 7, 16, 64, 512]),
    prompt_tokens=st.integers(0, 3000),
    seed=st.integers(0, 2**31),
)
def test_property_chaining_any_block_size_and_prompt(
    kind: str, block_tokens: int, prompt_tokens: int, seed: int
) -> None:
    params: dict[str, Any] = {"seed": seed, "block_tokens": block_tokens}
    if kind == "multi-round":
        params |= {"sessions": 5, "turns": 6, "system_prompt_tokens": prompt_tokens,
                   "system_prompts": 2}
    elif kind == "agentic":
        params |= {"sessions": 2, "system_prompt_tokens": prompt_tokens, "subagent_prob": 0.5,
                   "max_context_tokens": prompt_tokens + 20000, "compact_summary_tokens": 500}
    elif kind == "trace-a":
        params |= {"sessions": 60,
                   "system_prompt_tokens": f"text={prompt_tokens},file=0,image=16,search=17"}
    else:
        params |= {"requests": 200, "system_prompt_tokens_mean": prompt_tokens + 1}
    t = generate(kind, **params)
    lengths = np.asarray(pc.list_value_length(t.column("hash_ids")).to_numpy(), dtype=np.int64)
    inputs = t.column("input_tokens").to_numpy()
    assert (lengths == inputs // block_tokens).all()
    assert (t.column("hashed_tokens").to_numpy() == lengths * block_tokens).all()
    _assert_prefix_chained(t)
