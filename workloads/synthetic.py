"""Seeded synthetic workload generators that produce a `requests` table (kvwear.workloads.schema.REQUESTS).

Four kinds, each configured by one frozen dataclass whose fields carry their own help text (the
CLI `kvwear trace generate KIND` exposes every field as an option):

- `multi-round` (MultiRoundConfig): N sessions × T turns of a chat; one shared system prompt (or
  a few); context growth — turn t's input = turn t−1's input + turn t−1's output + new user
  tokens; exponential think time between turns; Poisson session starts. The "100 turns per
  session" stress case is `turns=100`.
- `agentic` (AgenticConfig): coding-agent sessions: user turns, each a run of LLM calls separated
  by tool calls whose output is appended to the context; some steps spawn parallel subagents
  (their own `stream_id`) that start from the parent's system prompt; context compaction at a
  limit.
- `api` (ApiConfig): single-turn requests at high QPS, each starting with one of a few shared
  system prompts chosen by Zipf popularity (Trace-B-like).
- `trace-a` (TraceAConfig): a Trace-A-like mixture of categories text/file/image/search, a
  multi-turn share, and exponential inter-turn (reuse) times with a per-category mean.

Hash ids (what the cache keys on) are built so they are globally consistent within a table: the
same prefix gets the same id and a given id always has the same predecessor. Ids are counters:
each system prompt owns a range of ids for its full blocks; every *segment* (a chain of calls
whose contexts extend one another: a chat session, an agent stream between compactions, a
single API request) owns a private range for the blocks after its system prompt; a row's ids are
its prompt's ids followed by the first ones of its segment's range. Only full blocks are hashed:
`hashed_tokens = (input_tokens // block_tokens)·block_tokens` (the partial last block is not
keyed — like the Weka traces, unlike Mooncake's).

Columns: `turn` is the 1-based position of a call in its stream (the chat turn for multi-round and
trace-a, the LLM-call number for an agent or subagent stream, 1 for api); `parent_id` is the
previous call of the same stream, or for a subagent's first call the main-stream call that spawned
it (null for first turns and api); `session_id` is "mr-N" / "ag-N" / "ta-N" (null for api);
`stream_id` is "main" or "subK"; `category` is "chat" (multi-round), "agent"/"subagent",
"api", or the trace-a category. In trace-a the reuse time is arrival to arrival of consecutive
turns (the previous answer's decode time is inside it).

Generators must be deterministic (same config → identical table), must not read the clock or
touch files, and must not know about tiers, devices or policies. The per-row work is vectorized
with numpy except the agentic step loop (sequential by nature), which draws its randomness in
bulk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

import numpy as np
import pyarrow as pa

from kvwear.errors import InputError
from kvwear.registry import Registry
from kvwear.values import BadValue, read_value
from kvwear.workloads.schema import REQUESTS

# --- config helpers ---------------------------------------------------------------------------


def _opt(default: Any, help: str) -> Any:
    """A dataclass field with its CLI help text in the metadata."""
    return field(default=default, metadata=_help(help))


def _help(text: str) -> dict[str, str]:
    return {"help": text}


CategoryMap = tuple[tuple[str, float], ...]


def parse_category_map(text: str | Mapping[str, float] | CategoryMap) -> CategoryMap:
    """'text=0.6,file=0.15' (or a mapping, or pairs) → (('text', 0.6), ('file', 0.15)), by
    kvwear.values' rules for named numbers."""
    try:
        out: CategoryMap = read_value(text, CategoryMap, name="category map")
    except BadValue as exc:
        raise ValueError(f"category map {text!r}: {exc.reason}") from None
    return out


def format_category_map(pairs: CategoryMap) -> str:
    return ",".join(f"{k}={v:g}" for k, v in pairs)


#: The largest count, size or rate a generator option may take: a billion sessions, turns or
#: tokens is already more than any machine holds once generated (a requests row is ~100 bytes
#: plus its hash ids), so a larger value is a typo (1e30), refused before numpy is asked for it.
MAX_OPTION_VALUE = 10**9


def _check_positive(cfg: object, *names: str, allow_zero: tuple[str, ...] = ()) -> None:
    for name in names:
        v = getattr(cfg, name)
        if not (v > 0 or (name in allow_zero and v == 0)) or not math.isfinite(v) or v > MAX_OPTION_VALUE:
            raise ValueError(f"{name} must be in {'[0' if name in allow_zero else '(0'}, {MAX_OPTION_VALUE:,}], "
                             f"got {v!r}")


@dataclass(frozen=True)
class CommonOptions:
    """Fields every generator has."""

    seed: int = _opt(0, "random seed; the same seed and options give the identical table")
    block_tokens: int = _opt(16, "tokens per hashed block (the hash_ids granularity)")
    hash_ns: int = _opt(0, "hash namespace written to every row (block key = (hash_ns, hash_id))")
    model: str | None = _opt(None, "model name written to the 'model' column (e.g. qwen3.5-27b)")
    length_sigma: float = _opt(
        0.8, "shape σ of the lognormal token-length draws (all lengths are lognormal with the "
        "given mean)")

    def _check_common(self) -> None:
        if not 0 <= self.seed < 2**63:      # numpy's seed sequences take non-negative integers
            raise ValueError(f"seed must be 0 … 2^63 − 1, got {self.seed!r}")
        _check_positive(self, "block_tokens")
        _check_positive(self, "length_sigma", allow_zero=("length_sigma",))


@dataclass(frozen=True)
class MultiRoundConfig(CommonOptions):
    """Multi-round chat: N sessions × T turns with context growth and think time."""

    sessions: int = _opt(100, "number of conversations")
    turns: int = _opt(10, "turns per conversation (100 = the long-session stress case)")
    session_rate_per_s: float = _opt(0.2, "Poisson rate of conversation starts (per second)")
    system_prompt_tokens: int = _opt(1024, "tokens of the shared system prompt")
    system_prompts: int = _opt(1, "distinct system prompts; each session picks one uniformly")
    user_tokens_mean: float = _opt(256.0, "mean new user tokens per turn")
    output_tokens_mean: float = _opt(384.0, "mean output tokens per turn")
    think_time_mean_s: float = _opt(30.0, "mean (exponential) user think time between turns")
    decode_tokens_per_s: float = _opt(
        50.0, "decode speed used to place the next turn after the previous answer ends")

    def __post_init__(self) -> None:
        self._check_common()
        _check_positive(self, "sessions", "turns", "session_rate_per_s", "system_prompts",
                        "user_tokens_mean", "output_tokens_mean", "decode_tokens_per_s")
        _check_positive(self, "system_prompt_tokens", "think_time_mean_s",
                        allow_zero=("system_prompt_tokens", "think_time_mean_s"))


@dataclass(frozen=True)
class AgenticConfig(CommonOptions):
    """Agentic coding sessions: tool calls grow the context; some steps spawn subagents."""

    sessions: int = _opt(20, "number of agent sessions")
    session_rate_per_s: float = _opt(0.02, "Poisson rate of session starts (per second)")
    system_prompt_tokens: int = _opt(
        12000, "tokens of the agent system prompt + tool definitions, shared by every session "
        "and its subagents")
    user_turns: int = _opt(3, "user messages per session")
    steps_per_turn_mean: float = _opt(
        8.0, "mean LLM calls per user message (geometric, ≥ 1); calls are separated by tool calls")
    user_tokens_mean: float = _opt(300.0, "mean tokens of a user message")
    output_tokens_mean: float = _opt(400.0, "mean output tokens per LLM call")
    tool_output_tokens_mean: float = _opt(1500.0, "mean tool-result tokens appended after a call")
    tool_latency_mean_s: float = _opt(3.0, "mean (exponential) tool execution time")
    subagent_prob: float = _opt(0.08, "probability that a tool step spawns subagents instead")
    subagents_max: int = _opt(3, "parallel subagents per spawn (uniform 1..max)")
    subagent_steps_mean: float = _opt(10.0, "mean LLM calls of one subagent (geometric, ≥ 1)")
    subagent_task_tokens_mean: float = _opt(600.0, "mean tokens of the task given to a subagent")
    subagent_result_tokens_mean: float = _opt(
        1000.0, "mean tokens of a subagent's result appended to the parent's context")
    think_time_mean_s: float = _opt(60.0, "mean (exponential) user think time between messages")
    decode_tokens_per_s: float = _opt(50.0, "decode speed: a call lasts output_tokens / this")
    max_context_tokens: int = _opt(
        160000, "context limit; a call that would exceed it compacts the context first")
    compact_summary_tokens: int = _opt(
        8000, "tokens of the summary that replaces the history at compaction")

    def __post_init__(self) -> None:
        self._check_common()
        _check_positive(self, "sessions", "session_rate_per_s", "user_turns", "user_tokens_mean",
                        "output_tokens_mean", "tool_output_tokens_mean", "subagents_max",
                        "subagent_task_tokens_mean", "subagent_result_tokens_mean",
                        "decode_tokens_per_s", "max_context_tokens")
        _check_positive(self, "system_prompt_tokens", "tool_latency_mean_s", "think_time_mean_s",
                        "compact_summary_tokens",
                        allow_zero=("system_prompt_tokens", "tool_latency_mean_s",
                                    "think_time_mean_s", "compact_summary_tokens"))
        if self.steps_per_turn_mean < 1 or self.subagent_steps_mean < 1:
            raise ValueError("steps_per_turn_mean and subagent_steps_mean must be ≥ 1")
        if not 0 <= self.subagent_prob <= 1:
            raise ValueError(f"subagent_prob must be in [0, 1], got {self.subagent_prob}")
        if self.system_prompt_tokens + self.compact_summary_tokens >= self.max_context_tokens:
            raise ValueError("max_context_tokens must exceed system_prompt_tokens + "
                             "compact_summary_tokens")


@dataclass(frozen=True)
class ApiConfig(CommonOptions):
    """API traffic: single-turn requests sharing a few system prompts (Zipf), high QPS."""

    requests: int = _opt(100000, "number of requests")
    qps: float = _opt(200.0, "Poisson arrival rate (requests per second)")
    system_prompts: int = _opt(8, "distinct shared system prompts")
    zipf_exponent: float = _opt(1.1, "popularity of prompt rank r ∝ r^-exponent (0 = uniform)")
    system_prompt_tokens_mean: float = _opt(
        2048.0, "mean length of a system prompt (each prompt's length is drawn once)")
    user_tokens_mean: float = _opt(512.0, "mean request-specific input tokens")
    output_tokens_mean: float = _opt(128.0, "mean output tokens")

    def __post_init__(self) -> None:
        self._check_common()
        _check_positive(self, "requests", "qps", "system_prompts", "system_prompt_tokens_mean",
                        "user_tokens_mean", "output_tokens_mean")
        _check_positive(self, "zipf_exponent", allow_zero=("zipf_exponent",))


# Trace-A defaults. The category set (text/file/image/search), the 46% multi-turn share and the
# per-category exponential reuse-time model come from "KVCache Cache in the Wild" (ATC'25, Trace A
# / the Qwen-Bailian to-C trace): it reports that, for a given category, the reuse-time
# distribution is close to exponential and that ~80% of Trace A reuses happen within 10 minutes.
# The numeric shares, means and lengths below are NOT values published by the paper: they are
# illustrative choices consistent with those statements (every default mean is < 5 min, so
# ≥ 87% of follow-ups arrive within 10 min). Override them to match a trace you characterized.
TRACE_A_CATEGORY_SHARES: CategoryMap = (("text", 0.60), ("file", 0.15), ("image", 0.15),
                                        ("search", 0.10))
TRACE_A_REUSE_MEAN_S: CategoryMap = (("text", 120.0), ("file", 240.0), ("image", 90.0),
                                     ("search", 60.0))
TRACE_A_SYSTEM_PROMPT_TOKENS: CategoryMap = (("text", 600.0), ("file", 900.0), ("image", 300.0),
                                             ("search", 1200.0))
TRACE_A_NEW_TOKENS_MEAN: CategoryMap = (("text", 150.0), ("file", 2500.0), ("image", 900.0),
                                        ("search", 1800.0))
TRACE_A_OUTPUT_TOKENS_MEAN: CategoryMap = (("text", 350.0), ("file", 450.0), ("image", 250.0),
                                           ("search", 500.0))


@dataclass(frozen=True)
class TraceAConfig(CommonOptions):
    """Trace-A-like mixture: categories, multi-turn share, per-category exponential reuse times."""

    sessions: int = _opt(5000, "number of sessions (requests ≈ sessions / (1 − multi_turn_share))")
    session_rate_per_s: float = _opt(2.0, "Poisson rate of session starts (per second)")
    multi_turn_share: float = _opt(
        0.46, "share of requests that are follow-up turns (turn ≥ 2); turns per session are "
        "geometric so that this holds in expectation")
    category_shares: CategoryMap = field(default=TRACE_A_CATEGORY_SHARES, metadata=_help(
        "session category shares, NAME=SHARE,... (normalized)"))
    reuse_mean_s: CategoryMap = field(default=TRACE_A_REUSE_MEAN_S, metadata=_help(
        "per-category mean of the exponential time between a turn's arrival and the next turn's "
        "arrival (the reuse time of its context), NAME=SECONDS,..."))
    system_prompt_tokens: CategoryMap = field(default=TRACE_A_SYSTEM_PROMPT_TOKENS, metadata=_help(
        "per-category system prompt tokens, shared by all sessions of that category"))
    new_tokens_mean: CategoryMap = field(default=TRACE_A_NEW_TOKENS_MEAN, metadata=_help(
        "per-category mean new input tokens per turn (user text, file contents, image tokens, "
        "search results)"))
    output_tokens_mean: CategoryMap = field(default=TRACE_A_OUTPUT_TOKENS_MEAN, metadata=_help(
        "per-category mean output tokens"))

    def __post_init__(self) -> None:
        self._check_common()
        _check_positive(self, "sessions", "session_rate_per_s")
        if not 0 <= self.multi_turn_share < 1:
            raise ValueError(f"multi_turn_share must be in [0, 1), got {self.multi_turn_share}")
        for name in ("category_shares", "reuse_mean_s", "system_prompt_tokens", "new_tokens_mean",
                     "output_tokens_mean"):
            object.__setattr__(self, name, parse_category_map(getattr(self, name)))
        cats = [c for c, _ in self.category_shares]
        if len(set(cats)) != len(cats) or not cats:
            raise ValueError(f"category_shares: categories must be distinct and non-empty: {cats}")
        if any(s < 0 for _, s in self.category_shares) or sum(s for _, s in self.category_shares) <= 0:
            raise ValueError("category_shares must be ≥ 0 with a positive sum")
        for name in ("reuse_mean_s", "system_prompt_tokens", "new_tokens_mean",
                     "output_tokens_mean"):
            got = dict(getattr(self, name))
            missing = [c for c in cats if c not in got]
            if missing:
                raise ValueError(f"{name}: no value for categor{'ies' if len(missing) > 1 else 'y'} "
                                 f"{', '.join(missing)}")
            zero_ok = name == "system_prompt_tokens"
            if any(not (got[c] > 0 or (zero_ok and got[c] == 0)) for c in cats):
                raise ValueError(f"{name}: values must be {'≥ 0' if zero_ok else '> 0'}")

    def per_category(self, name: str) -> np.ndarray:
        """`name`'s values in `category_shares` order."""
        got = dict(getattr(self, name))
        return np.array([got[c] for c, _ in self.category_shares], dtype=np.float64)


# --- shared machinery ---------------------------------------------------------------------------


def _lognormal_tokens(rng: np.random.Generator, mean: np.ndarray | float, sigma: float,
                      size: int) -> np.ndarray:
    """Integer token counts ≥ 1, lognormal with the given mean(s) and shape σ."""
    mu = np.log(np.asarray(mean, dtype=np.float64)) - 0.5 * sigma * sigma
    x = np.exp(mu + sigma * rng.standard_normal(size))
    return np.maximum(np.rint(x), 1).astype(np.int64)


def _segmented_cumsum(x: np.ndarray, first_row: np.ndarray, seg_of_row: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of `x` restarting at each segment's first row."""
    c = np.cumsum(x)
    before = c[first_row] - x[first_row]
    return c - before[seg_of_row]


@dataclass
class _Rows:
    """Per-row arrays in generation order, before sorting by arrival."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    segment: np.ndarray          # chain of prefix-extending calls (private hash-id range)
    prompt: np.ndarray           # system prompt index
    parent: np.ndarray           # generation-order index of the parent row, −1 if none
    turn: np.ndarray | None      # 1-based, None → null column
    session: np.ndarray | None   # session number, None → null column
    session_prefix: str
    stream: np.ndarray | None    # stream number within the session (0 = "main"), None → all main
    category: np.ndarray         # index into `categories`
    categories: list[str]


def _assemble(rows: _Rows, prompt_tokens: np.ndarray, common: CommonOptions) -> pa.Table:
    """Hash ids, sort by arrival, renumber, and build the REQUESTS table."""
    B = common.block_tokens
    n_rows = len(rows.arrival_s)
    prompt_blocks = (np.asarray(prompt_tokens, dtype=np.int64) // B)
    prompt_base = np.concatenate([[0], np.cumsum(prompt_blocks)[:-1]]).astype(np.int64)
    first_private = int(prompt_blocks.sum())

    n_blocks = rows.input_tokens // B
    k_row = prompt_blocks[rows.prompt]
    priv_len = n_blocks - k_row
    if np.any(priv_len < 0):
        raise AssertionError("a row's input is shorter than its system prompt")
    n_segments = int(rows.segment.max()) + 1 if n_rows else 0
    seg_len = np.zeros(n_segments, dtype=np.int64)
    np.maximum.at(seg_len, rows.segment, priv_len)
    seg_base = first_private + np.concatenate([[0], np.cumsum(seg_len)[:-1]]).astype(np.int64)

    order = np.argsort(rows.arrival_s, kind="stable")
    rank = np.empty(n_rows, dtype=np.int64)
    rank[order] = np.arange(n_rows, dtype=np.int64)

    nb = n_blocks[order]
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(nb, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        raise ValueError(f"{total} hash ids exceed one Arrow list column; generate fewer requests")
    # Each row's ids are two contiguous runs: its prompt's ids, then its segment's first ids.
    # Build them as "base at each run start, +1 elsewhere" and one cumsum (a few ns per id).
    k_sorted = k_row[order]
    run_len = np.stack([k_sorted, nb - k_sorted], axis=1).ravel()
    run_base = np.stack([prompt_base[rows.prompt[order]], seg_base[rows.segment[order]]],
                        axis=1).ravel()
    keep = run_len > 0
    run_len, run_base = run_len[keep], run_base[keep]
    values = np.ones(total, dtype=np.int64)
    if total:
        starts = np.cumsum(run_len) - run_len
        values[starts[0]] = run_base[0]
        values[starts[1:]] = run_base[1:] - (run_base[:-1] + run_len[:-1] - 1)
        np.cumsum(values, out=values)
    hash_ids = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))

    parent = rows.parent[order]
    has_parent = parent >= 0
    parent_id = pa.array(np.where(has_parent, rank[np.maximum(parent, 0)], 0), mask=~has_parent)

    def labels(idx: np.ndarray | None, prefix: str) -> pa.Array:
        if idx is None:
            return pa.nulls(n_rows, pa.string())
        sorted_idx = idx[order]
        uniq, inv = np.unique(sorted_idx, return_inverse=True)
        names = pa.array([f"{prefix}{u}" for u in uniq.tolist()], pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(inv.astype(np.int32)), names).cast(pa.string())

    if rows.stream is None:
        stream_id = pa.array(np.full(n_rows, "main", dtype=object), pa.string())
    else:
        st = rows.stream[order]
        uniq, inv = np.unique(st, return_inverse=True)
        names = pa.array(["main" if u == 0 else f"sub{u}" for u in uniq.tolist()], pa.string())
        stream_id = pa.DictionaryArray.from_arrays(pa.array(inv.astype(np.int32)), names).cast(
            pa.string())
    cats = pa.DictionaryArray.from_arrays(
        pa.array(rows.category[order].astype(np.int32)), pa.array(rows.categories, pa.string())
    ).cast(pa.string())
    table = pa.table({
        "request_id": pa.array(np.arange(n_rows, dtype=np.int64)),
        "session_id": labels(rows.session, rows.session_prefix),
        "parent_id": parent_id,
        "stream_id": stream_id,
        "turn": (pa.nulls(n_rows, pa.int32()) if rows.turn is None
                 else pa.array(rows.turn[order].astype(np.int32))),
        "arrival_s": pa.array(rows.arrival_s[order].astype(np.float64)),
        "input_tokens": pa.array(rows.input_tokens[order].astype(np.int64)),
        "output_tokens": pa.array(rows.output_tokens[order].astype(np.int64)),
        "category": cats,
        "model": pa.array([common.model] * n_rows, pa.string()),
        "block_tokens": pa.array(np.full(n_rows, B, dtype=np.int32)),
        "hash_ns": pa.array(np.full(n_rows, common.hash_ns, dtype=np.int32)),
        "hash_ids": hash_ids,
        "hashed_tokens": pa.array(nb * B),
    })
    return REQUESTS.conform(table)


def _sessions_layout(turns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For sessions with `turns[s]` rows: (session of row, 1-based turn of row, first row)."""
    n = int(turns.sum())
    first = np.concatenate([[0], np.cumsum(turns)[:-1]]).astype(np.int64)
    sess = np.repeat(np.arange(len(turns), dtype=np.int64), turns)
    turn = np.arange(n, dtype=np.int64) - first[sess] + 1
    return sess, turn, first


def _chat_rows(sess: np.ndarray, turn: np.ndarray, first: np.ndarray, start_s: np.ndarray,
               prompt_tokens_of_row: np.ndarray, new_tokens: np.ndarray, out_tokens: np.ndarray,
               gap_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Context growth and arrivals of chat sessions: (input_tokens, arrival_s, parent)."""
    gap = np.where(turn > 1, gap_s, 0.0)
    # input_t = prompt + Σ_{j≤t} new_j + Σ_{j<t} out_j
    input_tokens = (prompt_tokens_of_row + _segmented_cumsum(new_tokens, first, sess)
                    + _segmented_cumsum(out_tokens, first, sess) - out_tokens)
    arrival = start_s[sess] + _segmented_cumsum(gap, first, sess)
    idx = np.arange(len(sess), dtype=np.int64)
    parent = np.where(turn > 1, idx - 1, -1)
    return input_tokens, arrival, parent


# --- generators ---------------------------------------------------------------------------------


def generate_multi_round(cfg: MultiRoundConfig) -> pa.Table:
    """Multi-round conversations (see MultiRoundConfig); rows sorted by arrival_s."""
    rng = np.random.default_rng([cfg.seed, 1])
    S, T = cfg.sessions, cfg.turns
    turns = np.full(S, T, dtype=np.int64)
    sess, turn, first = _sessions_layout(turns)
    n = len(sess)
    start_s = np.cumsum(rng.exponential(1.0 / cfg.session_rate_per_s, S))
    prompt_of_session = rng.integers(0, cfg.system_prompts, S)
    user = _lognormal_tokens(rng, cfg.user_tokens_mean, cfg.length_sigma, n)
    out = _lognormal_tokens(rng, cfg.output_tokens_mean, cfg.length_sigma, n)
    think = rng.exponential(cfg.think_time_mean_s, n) if cfg.think_time_mean_s > 0 else np.zeros(n)
    # Turn t arrives when turn t−1's answer has been decoded plus the user's think time.
    prev_out = np.concatenate([[0], out[:-1]])
    gap = prev_out / cfg.decode_tokens_per_s + think
    prompt_tokens = np.full(cfg.system_prompts, cfg.system_prompt_tokens, dtype=np.int64)
    input_tokens, arrival, parent = _chat_rows(
        sess, turn, first, start_s, prompt_tokens[prompt_of_session[sess]], user, out, gap)
    rows = _Rows(arrival_s=arrival, input_tokens=input_tokens, output_tokens=out, segment=sess,
                 prompt=prompt_of_session[sess], parent=parent, turn=turn, session=sess,
                 session_prefix="mr-", stream=None, category=np.zeros(n, dtype=np.int64),
                 categories=["chat"])
    return _assemble(rows, prompt_tokens, cfg)


def generate_api(cfg: ApiConfig) -> pa.Table:
    """Single-turn API requests with Zipf-popular shared system prompts (see ApiConfig)."""
    rng = np.random.default_rng([cfg.seed, 2])
    n, P = cfg.requests, cfg.system_prompts
    prompt_tokens = _lognormal_tokens(rng, cfg.system_prompt_tokens_mean, cfg.length_sigma, P)
    popularity = np.arange(1, P + 1, dtype=np.float64) ** -cfg.zipf_exponent
    prompt = rng.choice(P, size=n, p=popularity / popularity.sum())
    arrival = np.cumsum(rng.exponential(1.0 / cfg.qps, n))
    user = _lognormal_tokens(rng, cfg.user_tokens_mean, cfg.length_sigma, n)
    out = _lognormal_tokens(rng, cfg.output_tokens_mean, cfg.length_sigma, n)
    rows = _Rows(arrival_s=arrival, input_tokens=prompt_tokens[prompt] + user, output_tokens=out,
                 segment=np.arange(n, dtype=np.int64), prompt=prompt,
                 parent=np.full(n, -1, dtype=np.int64), turn=np.ones(n, dtype=np.int64),
                 session=None, session_prefix="", stream=None,
                 category=np.zeros(n, dtype=np.int64), categories=["api"])
    return _assemble(rows, prompt_tokens, cfg)


def generate_trace_a(cfg: TraceAConfig) -> pa.Table:
    """Trace-A-like category mixture with exponential per-category reuse times."""
    rng = np.random.default_rng([cfg.seed, 3])
    S = cfg.sessions
    shares = cfg.per_category("category_shares")
    cat_of_session = rng.choice(len(shares), size=S, p=shares / shares.sum())
    # Follow-ups per session F: P(F = k) = (1−m)·m^k, so E[F]/(1+E[F]) = m, the follow-up share.
    m = cfg.multi_turn_share
    if m > 0:
        follow = np.floor(rng.standard_exponential(S) / -math.log(m)).astype(np.int64)
    else:
        follow = np.zeros(S, dtype=np.int64)
    sess, turn, first = _sessions_layout(follow + 1)
    n = len(sess)
    cat = cat_of_session[sess]
    start_s = np.cumsum(rng.exponential(1.0 / cfg.session_rate_per_s, S))
    new = _lognormal_tokens(rng, cfg.per_category("new_tokens_mean")[cat], cfg.length_sigma, n)
    out = _lognormal_tokens(rng, cfg.per_category("output_tokens_mean")[cat], cfg.length_sigma, n)
    gap = rng.standard_exponential(n) * cfg.per_category("reuse_mean_s")[cat]
    prompt_tokens = cfg.per_category("system_prompt_tokens").astype(np.int64)
    input_tokens, arrival, parent = _chat_rows(sess, turn, first, start_s, prompt_tokens[cat], new,
                                               out, gap)
    rows = _Rows(arrival_s=arrival, input_tokens=input_tokens, output_tokens=out, segment=sess,
                 prompt=cat, parent=parent, turn=turn, session=sess, session_prefix="ta-",
                 stream=None, category=cat, categories=[c for c, _ in cfg.category_shares])
    return _assemble(rows, prompt_tokens, cfg)


class _Draws:
    """Scalar random draws served from bulk numpy batches (the agentic loop is sequential)."""

    def __init__(self, rng: np.random.Generator, batch: int = 8192) -> None:
        self._rng = rng
        self._batch = batch
        self._exp: list[float] = []
        self._norm: list[float] = []

    def std_exp(self) -> float:
        if not self._exp:
            self._exp = self._rng.standard_exponential(self._batch).tolist()
        return self._exp.pop()

    def std_norm(self) -> float:
        if not self._norm:
            self._norm = self._rng.standard_normal(self._batch).tolist()
        return self._norm.pop()

    def exp(self, mean: float) -> float:
        return mean * self.std_exp() if mean > 0 else 0.0

    def uniform(self) -> float:
        return math.exp(-self.std_exp())

    def tokens(self, mean: float, sigma: float) -> int:
        return max(1, round(math.exp(math.log(mean) - 0.5 * sigma * sigma + sigma * self.std_norm())))

    def geometric(self, mean: float) -> int:
        """≥ 1 with the given mean."""
        if mean <= 1:
            return 1
        return 1 + int(self.std_exp() / -math.log(1.0 - 1.0 / mean))


def generate_agentic(cfg: AgenticConfig) -> pa.Table:
    """Agentic sessions with tool calls, subagents and compaction (see AgenticConfig)."""
    rng = np.random.default_rng([cfg.seed, 4])
    d = _Draws(rng)
    sys_tokens = cfg.system_prompt_tokens
    sigma = cfg.length_sigma
    arrival: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    segment: list[int] = []
    parent: list[int] = []
    turn: list[int] = []
    session: list[int] = []
    stream: list[int] = []
    category: list[int] = []
    n_segments = 0

    def emit(t: float, inp: int, out: int, seg: int, par: int, step: int, s: int, st: int) -> int:
        arrival.append(t)
        inputs.append(inp)
        outputs.append(out)
        segment.append(seg)
        parent.append(par)
        turn.append(step)
        session.append(s)
        stream.append(st)
        category.append(0 if st == 0 else 1)
        return len(arrival) - 1

    def run_subagent(t: float, s: int, st: int, par: int) -> tuple[float, int]:
        """One subagent from time t; returns (finish time, result tokens)."""
        nonlocal n_segments
        seg, n_segments = n_segments, n_segments + 1
        ctx = sys_tokens
        new = d.tokens(cfg.subagent_task_tokens_mean, sigma)
        steps = d.geometric(cfg.subagent_steps_mean)
        for step in range(1, steps + 1):
            inp = ctx + new
            if inp > cfg.max_context_tokens:
                seg, n_segments = n_segments, n_segments + 1
                inp = sys_tokens + cfg.compact_summary_tokens + new
            out = d.tokens(cfg.output_tokens_mean, sigma)
            par = emit(t, inp, out, seg, par, step, s, st)
            t += out / cfg.decode_tokens_per_s
            ctx = inp + out
            if step < steps:
                t += d.exp(cfg.tool_latency_mean_s)
                new = d.tokens(cfg.tool_output_tokens_mean, sigma)
        return t, d.tokens(cfg.subagent_result_tokens_mean, sigma)

    t_start = 0.0
    for s in range(cfg.sessions):
        t_start += d.exp(1.0 / cfg.session_rate_per_s)
        t = t_start
        seg, n_segments = n_segments, n_segments + 1
        ctx = sys_tokens
        prev = -1
        step = 0
        n_streams = 0
        for u in range(cfg.user_turns):
            if u > 0:
                t += d.exp(cfg.think_time_mean_s)
            new = d.tokens(cfg.user_tokens_mean, sigma)
            calls = d.geometric(cfg.steps_per_turn_mean)
            for c in range(calls):
                inp = ctx + new
                if inp > cfg.max_context_tokens:
                    # Compaction: the history is replaced by a summary, a new prefix chain.
                    seg, n_segments = n_segments, n_segments + 1
                    inp = sys_tokens + cfg.compact_summary_tokens + new
                out = d.tokens(cfg.output_tokens_mean, sigma)
                step += 1
                prev = emit(t, inp, out, seg, prev, step, s, 0)
                t += out / cfg.decode_tokens_per_s
                ctx = inp + out
                if c == calls - 1:
                    break  # the answer to the user; the next message adds user tokens
                if d.uniform() < cfg.subagent_prob:
                    k = 1 + min(int(d.uniform() * cfg.subagents_max), cfg.subagents_max - 1)
                    finish, new = t, 0
                    for _ in range(k):
                        n_streams += 1
                        end, result = run_subagent(t, s, n_streams, prev)
                        finish = max(finish, end)
                        new += result
                    t = finish
                else:
                    t += d.exp(cfg.tool_latency_mean_s)
                    new = d.tokens(cfg.tool_output_tokens_mean, sigma)

    st_arr = np.asarray(stream, dtype=np.int64)
    rows = _Rows(
        arrival_s=np.asarray(arrival, dtype=np.float64),
        input_tokens=np.asarray(inputs, dtype=np.int64),
        output_tokens=np.asarray(outputs, dtype=np.int64),
        segment=np.asarray(segment, dtype=np.int64),
        prompt=np.zeros(len(arrival), dtype=np.int64),
        parent=np.asarray(parent, dtype=np.int64),
        turn=np.asarray(turn, dtype=np.int64),
        session=np.asarray(session, dtype=np.int64),
        session_prefix="ag-",
        stream=st_arr,
        category=np.asarray(category, dtype=np.int64),
        categories=["agent", "subagent"],
    )
    return _assemble(rows, np.array([sys_tokens], dtype=np.int64), cfg)


# --- registry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Generator:
    """A synthetic workload kind: its config class and the function that generates it."""

    kind: str
    config: type[CommonOptions]
    run: Callable[[Any], pa.Table]
    summary: str

    def __call__(self, **params: Any) -> pa.Table:
        return self.run(self.configure(params))

    def configure(self, params: Mapping[str, Any], where: str = "params") -> CommonOptions:
        """The config for `params` as given in a file or on a command line (`where` names them
        in errors): unknown names, wrong types ("five", 1.9 for an integer, NaN) and values out
        of range are InputErrors naming the option."""
        hints = get_type_hints(self.config)
        meta = {f.name: f.metadata for f in fields(self.config)}
        names = list(meta)
        kwargs: dict[str, Any] = {}
        for k, v in params.items():
            if k not in names:
                raise InputError(where, None, k, f"unknown {self.kind} option; valid: {', '.join(names)}")
            kwargs[k] = _typed(v, hints[k], where, k, meta[k])
        try:
            return self.config(**kwargs)
        except (ValueError, TypeError) as exc:
            raise InputError(where, None, None, f"{self.kind}: {exc}") from None


def _typed(v: Any, typ: Any, where: str, name: str, meta: Mapping[str, Any] | None = None) -> Any:
    """`v` read as a config field's type by kvwear.values' rules (numbers finite, integers integral)."""
    try:
        return read_value(v, typ, name=name, meta=meta)
    except BadValue as exc:
        raise InputError(where, None, name, exc.reason) from None


GENERATORS: Registry[Generator] = Registry("synthetic workload")
for _g in (
    Generator("multi-round", MultiRoundConfig, generate_multi_round, MultiRoundConfig.__doc__ or ""),
    Generator("agentic", AgenticConfig, generate_agentic, AgenticConfig.__doc__ or ""),
    Generator("api", ApiConfig, generate_api, ApiConfig.__doc__ or ""),
    Generator("trace-a", TraceAConfig, generate_trace_a, TraceAConfig.__doc__ or ""),
):
    GENERATORS.add(_g.kind, _g)


def generate(kind: str, **params: Any) -> pa.Table:
    """Generate a `requests` table of `kind` (multi-round | agentic | api | trace-a)."""
    return GENERATORS.get(kind)(**params)


def config_fields(kind: str) -> list[tuple[str, Any, str]]:
    """(name, default, help) of every option of `kind`, for CLIs and docs."""
    cls = GENERATORS.get(kind).config
    return [(f.name, f.default, f.metadata.get("help", "")) for f in fields(cls)]
