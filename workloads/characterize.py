"""Trace characterization: the analyses of *KVCache Cache in the Wild* (ATC'25) over a requests table.

What it computes (all vectorized: the `hash_ids` list column is flattened once into one array of
block accesses in arrival order; there is no Python loop per block access):

- **Ideal (infinite-cache) hit ratio.** Requests are ordered by `arrival_s` (stable: rows with the
  same arrival keep their table order); within a request, blocks are accessed in list order. A block
  access is a *hit* iff its key `(hash_ns, hash_id)` was accessed before in that order. Block-weighted:
  hits / accesses. Token-weighted: every block weighs `block_tokens`, except a request's last block,
  which weighs `hashed_tokens − (n−1)·block_tokens` clipped to [0, block_tokens] — Mooncake's last
  block is partial (hashed_tokens = input_tokens), Weka hashes only full blocks (hashed_tokens =
  n·block_tokens, so every block weighs block_tokens). `token_hit_ratio` divides hit tokens by hashed
  tokens; `input_token_hit_ratio` divides them by all input tokens (the share of prefill an infinite
  cache saves). Per category, a hit is credited to the category of the request that makes the access.
- **Reuse skew.** Reuses of a block = its accesses − 1 (its hits). Blocks sorted by reuses, the
  smallest share of all distinct blocks whose reuses add up to 50 / 77 / 90 % of all hits.
- **Reuse times.** Two measures:
  *block reuse time* — time between consecutive accesses of the same block (credited to the category
  of the re-accessing request); summarized as quantiles per category.
  *request reuse time* — for every request with at least one hit, `arrival_s` minus the arrival of its
  *source*: the request that last accessed this request's deepest hit block, i.e. the most recent
  request that held the whole prefix this one reuses. In multi-turn traces that is the previous turn
  of the same session (`same_session` records whether it is); it needs no session ids, so it also
  works on session-less traces such as Mooncake. (A block repeated inside one request, impossible
  in a prefix-chained trace, would make the request its own source, with reuse time 0.)
  **The exponential fits use request reuse times**:
  block reuse times are dominated by hot shared prefixes (a system prompt reused by almost every
  request yields thousands of near-zero gaps that measure the arrival rate, not reuse behaviour),
  while the WA policy models when a request's KV is reused by a follow-up request. When the trace
  has session ids, the fit sample is the same-session reuses only (the time since the previous
  request of the same session that it reuses — a single-turn request whose only hit is a shared
  system prompt last used by another session is left out: that gap follows the arrival process);
  without session ids every reusing request is in the sample. `request_reuse.in_fit` marks it.
  The fit is the exponential MLE (rate = 1/mean) with a one-sample Kolmogorov–Smirnov test
  (`scipy.stats.kstest`). Because the rate is estimated from the same sample, the KS p-value is
  conservative (Lilliefors); timestamps with coarse resolution produce ties, which the KS test
  treats as continuous data.
- **KV lifespan.** Per distinct block, time from its first to its last access (0 for a block
  accessed once); the block's category is that of its first accessing request.
- **Capacity needed for the ideal hit ratio.** A block is *live* at access position i if it was
  accessed at or before i and is accessed again after i; an ideal cache must hold every live block
  (and may bypass a block that is never reused), and holding exactly the live blocks achieves the
  ideal hit ratio, so the peak live count is the minimum capacity (exact, tested against a Belady
  simulation). Bytes: each live block counts `profile.chunk_bytes(block_tokens)` (a partial last
  block takes a whole chunk). Hybrid profiles also need a linear/sliding state at the end of every
  reused prefix: each request with hits needs a state at its deepest hit block; such a *reuse-point*
  state is counted live from the first access of that block (when an oracle would checkpoint it)
  until the last request that reuses up to exactly that block, and weighs `profile.state_bytes`.
  The capacity is the peak over time of live chunk bytes + live state bytes (the peak of the sum,
  not the sum of the peaks).
- **LRU hit ratio vs capacity** (for comparison with that optimal capacity): block-weighted hit
  ratio of an LRU cache of C blocks for every C at once, from LRU stack distances (number of
  distinct other blocks accessed since the block's previous access; a hit iff distance < C),
  computed with a Fenwick tree in one numba loop over accesses (O(N log N)). Within a request the
  blocks are touched tail first, so that its prefix ends up most recently used — as in vLLM, whose
  free queue evicts a request's tail blocks before its prefix; touching them head first would let
  LRU evict a shared system prompt before the private tail that follows it. Chunks only: states
  are not modelled there; bytes are C × the chunk size of the first request's block size.

This module only analyses and writes tables; it must not load traces (kvwear.workloads.loaders does),
draw (kvwear.reports.characterization draws from the tables it writes) or import policies, harness,
emulator or reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numba
import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

from kvwear import jitcache
from kvwear.errors import KvwearError
from kvwear.tables import TableSpec
from kvwear.workloads.schema import REQUESTS

jitcache.install()   # numba's cache saved under a lock: before any cached kernel is defined

SKEW_LEVELS: tuple[float, ...] = (0.50, 0.77, 0.90)
CURVE_POINTS = 512  # points kept of curves that have one point per block or per request

#: summary.json's layout: 1 had no "version" key; 2 adds it and "lru_sampling_rate" (the LRU curve
#: may be a SHARDS estimate in a streamed characterization of a trace too large for the exact pass)
SUMMARY_JSON_VERSION = 2

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class ProfileLike(Protocol):
    """What characterization needs of a model profile (kvwear.workloads.models.ModelProfile has it)."""

    @property
    def state_bytes(self) -> int: ...
    @property
    def is_hybrid(self) -> bool: ...
    def chunk_bytes(self, block_tokens: int) -> int: ...


@dataclass(frozen=True)
class ExpFit:
    """Exponential fit of a sample of times: MLE rate and a KS goodness-of-fit test."""

    n: int
    mean_s: float
    rate_per_s: float
    ks_statistic: float
    ks_pvalue: float

    def cdf(self, t_s: F64) -> F64:
        return np.asarray(1.0 - np.exp(-self.rate_per_s * np.asarray(t_s, dtype=np.float64)))


def fit_exponential(samples_s: Iterable[float] | npt.ArrayLike) -> ExpFit:
    """MLE exponential fit (rate = 1/mean) of non-negative times, with a KS test against it.

    Fewer than 2 samples, or an all-zero sample, give NaN for what cannot be estimated.
    """
    x = np.asarray(samples_s, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if (x < 0).any():
        raise ValueError("reuse times must be non-negative")
    n = int(x.size)
    if n == 0:
        return ExpFit(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if n < 2 or mean <= 0.0:
        return ExpFit(n, mean, math.inf if mean <= 0.0 else 1.0 / mean, math.nan, math.nan)
    res = stats.kstest(x, "expon", args=(0.0, mean))
    return ExpFit(n, mean, 1.0 / mean, float(res.statistic), float(res.pvalue))


@dataclass(frozen=True, eq=False)
class Characterization:
    """Scalar results and tables of one characterization (see the module docstring for definitions)."""

    model: str
    requests: int
    block_accesses: int
    unique_blocks: int
    block_tokens: int                            # block size of the first request (tokens)
    block_hits: int
    block_hit_ratio: float
    hashed_tokens: int
    hit_tokens: int
    token_hit_ratio: float
    input_tokens: int
    input_token_hit_ratio: float
    reuse_skew_block_share: dict[float, float]   # level → share of distinct blocks
    reused_blocks: int                           # distinct blocks accessed more than once
    request_reuse_fit: ExpFit                    # all categories together
    reuse_fit_sample: str                        # "same-session" or "all" (module docstring)
    lifespan_median_s: float                     # over blocks accessed more than once
    lifespan_p90_s: float
    chunk_bytes: int                             # bytes of one block of the (first) block size
    state_bytes: int                             # 0 for a dense profile
    capacity_blocks: int                         # live chunks at the capacity peak
    capacity_states: int                         # live reuse-point states at the capacity peak
    capacity_bytes: int
    capacity_peak_s: float                       # arrival time of the request at the peak
    peak_live_blocks: int                        # max live chunks over time (alone)
    by_category: pd.DataFrame = field(repr=False)
    skew_curve: pd.DataFrame = field(repr=False)        # block_share, reuse_share
    request_reuse: pd.DataFrame = field(repr=False)     # one row per request with a hit
    block_reuse_quantiles: pd.DataFrame = field(repr=False)
    # one row per distinct block; None from a streamed characterization, which writes it to
    # lifespans.parquet without holding it
    lifespans: pd.DataFrame | None = field(repr=False)
    live: pd.DataFrame = field(repr=False)              # one row per request with blocks
    lru_curve: pd.DataFrame = field(repr=False)         # capacity_blocks, capacity_bytes, hit ratio
    lru_blocks_for_ideal: int = 0                       # LRU size that reaches the ideal hit ratio
    # share of distinct blocks whose LRU stack distances were measured: 1 = exact; below 1, the
    # streamed characterization's SHARDS estimate (kvwear.workloads.characterize_stream)
    lru_sampling_rate: float = 1.0

    def summary(self) -> dict[str, Any]:
        """JSON-ready scalar results (NaN → None)."""

        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return None
            return v

        fit = self.request_reuse_fit
        return {
            "version": SUMMARY_JSON_VERSION,
            "model": self.model,
            "requests": self.requests,
            "block_accesses": self.block_accesses,
            "unique_blocks": self.unique_blocks,
            "block_tokens": self.block_tokens,
            "block_hits": self.block_hits,
            "block_hit_ratio": clean(self.block_hit_ratio),
            "hashed_tokens": self.hashed_tokens,
            "hit_tokens": self.hit_tokens,
            "token_hit_ratio": clean(self.token_hit_ratio),
            "input_tokens": self.input_tokens,
            "input_token_hit_ratio": clean(self.input_token_hit_ratio),
            "reused_blocks": self.reused_blocks,
            "reuse_skew_block_share": {
                f"{lvl:.2f}": clean(v) for lvl, v in self.reuse_skew_block_share.items()
            },
            "request_reuse_fit": {k: clean(v) for k, v in fit.__dict__.items()},
            "reuse_fit_sample": self.reuse_fit_sample,
            "lifespan_median_s": clean(self.lifespan_median_s),
            "lifespan_p90_s": clean(self.lifespan_p90_s),
            "chunk_bytes": self.chunk_bytes,
            "state_bytes": self.state_bytes,
            "capacity_blocks": self.capacity_blocks,
            "capacity_states": self.capacity_states,
            "capacity_bytes": self.capacity_bytes,
            "capacity_peak_s": clean(self.capacity_peak_s),
            "peak_live_blocks": self.peak_live_blocks,
            "peak_live_chunk_bytes": self.peak_live_blocks * self.chunk_bytes,   # optimal (Belady), chunks only
            "lru_blocks_for_ideal": self.lru_blocks_for_ideal,
            "lru_bytes_for_ideal": self.lru_blocks_for_ideal * self.chunk_bytes,
            "lru_sampling_rate": self.lru_sampling_rate,
            "categories": {
                str(row["category"]): {k: clean(_py(v)) for k, v in row.items() if k != "category"}
                for row in self.by_category.to_dict("records")
            },
        }


def _py(v: Any) -> Any:
    """numpy scalar → Python scalar (for JSON)."""
    return v.item() if isinstance(v, np.generic) else v


# --------------------------------------------------------------------------------------------
# The flattened access stream


@dataclass(frozen=True)
class Accesses:
    """Every block access of a requests table, in arrival order, as flat arrays.

    Request-level arrays are indexed by the request's position in arrival order; access-level
    arrays have one entry per block access. `key` codes are dense and numbered in order of first
    appearance (0, 1, 2, … as blocks are first seen), which makes "seen before" a running max.
    """

    request_id: I64            # per request
    arrival_s: F64             # per request
    session: npt.NDArray[np.object_]  # per request, None where unknown
    category: npt.NDArray[np.object_]  # category names, indexed by category code
    req_category: I64          # per request: category code
    req_block_tokens: I64      # per request
    n_blocks: I64              # per request
    starts: I64                # per request: index of its first access
    input_tokens: I64          # per request
    req: I64                   # per access: request position
    key: I64                   # per access: dense block code
    hash_ns: npt.NDArray[np.int32]  # per distinct block
    hash_id: I64               # per distinct block
    tokens: I64                # per access: tokens the block covers
    hit: npt.NDArray[np.bool_]  # per access
    prev: I64                  # per access: index of the previous access of the same key, −1 if none
    first_pos: I64             # per distinct block: first access index
    last_pos: I64              # per distinct block: last access index
    count: I64                 # per distinct block: accesses


def flatten(table: pa.Table) -> Accesses:
    """Order `table` by arrival and flatten its blocks into one access stream (see `Accesses`)."""
    table = REQUESTS.conform(table)
    n_req = table.num_rows
    if n_req == 0:
        raise KvwearError("requests table is empty: nothing to characterize")
    arrival_raw = table.column("arrival_s").to_numpy()
    order = np.argsort(arrival_raw, kind="stable")
    table = table.take(pa.array(order))
    arrival = np.asarray(table.column("arrival_s").to_numpy(), dtype=np.float64)
    hash_col = table.column("hash_ids").combine_chunks()
    n_blocks = np.asarray(pc.list_value_length(hash_col).to_numpy(zero_copy_only=False), dtype=np.int64)
    flat = np.asarray(hash_col.flatten().to_numpy(), dtype=np.int64)
    n = int(flat.size)
    starts = np.zeros(n_req, dtype=np.int64)
    np.cumsum(n_blocks[:-1], out=starts[1:])
    req = np.repeat(np.arange(n_req, dtype=np.int64), n_blocks)

    ns_req = np.asarray(table.column("hash_ns").to_numpy(), dtype=np.int32)
    id_codes, id_uniques = pd.factorize(flat)
    if n and (ns_req == ns_req[0]).all():
        key = id_codes.astype(np.int64)
    else:
        # Combine namespace and id into one integer through their dense codes: no overflow as long
        # as (#namespaces × #distinct ids) < 2^63, far beyond any trace.
        ns_codes, _ = pd.factorize(ns_req[req])
        combined = ns_codes.astype(np.int64) * max(len(id_uniques), 1) + id_codes
        key = pd.factorize(combined)[0].astype(np.int64)

    # pd.factorize numbers keys in order of appearance, so an access is new iff its code exceeds
    # every code before it.
    hit = np.zeros(n, dtype=np.bool_)
    if n:
        running = np.maximum.accumulate(key)
        hit[1:] = key[1:] <= running[:-1]
    n_keys = int(key.max()) + 1 if n else 0
    first_pos = np.flatnonzero(~hit).astype(np.int64)  # ordered by code, since codes follow first use

    perm = np.argsort(key, kind="stable")
    sk = key[perm]
    same = sk[1:] == sk[:-1]
    prev = np.full(n, -1, dtype=np.int64)
    prev[perm[1:][same]] = perm[:-1][same]
    run_end = np.ones(n, dtype=np.bool_)
    run_end[:-1] = ~same
    last_pos = perm[run_end].astype(np.int64)
    count = np.bincount(key, minlength=n_keys).astype(np.int64)

    bt = np.asarray(table.column("block_tokens").to_numpy(), dtype=np.int64)
    if (bt <= 0).any():
        raise KvwearError("requests table has a block_tokens ≤ 0")
    hashed = np.asarray(table.column("hashed_tokens").to_numpy(), dtype=np.int64)
    tokens = np.repeat(bt, n_blocks)
    has = n_blocks > 0
    last_idx = starts[has] + n_blocks[has] - 1
    last_w = hashed[has] - (n_blocks[has] - 1) * bt[has]
    tokens[last_idx] = np.clip(last_w, 0, bt[has])

    cats = table.column("category").combine_chunks().dictionary_encode()
    cat_codes, cat_names = pd.factorize(np.asarray(cats.indices.to_numpy(), dtype=np.int64))
    cat_names = np.asarray(cats.dictionary.to_numpy(zero_copy_only=False), dtype=object)[cat_names]
    sessions = np.asarray(table.column("session_id").to_numpy(zero_copy_only=False), dtype=object)
    key_ns = ns_req[req[first_pos]] if n else np.zeros(0, dtype=np.int32)
    return Accesses(
        request_id=np.asarray(table.column("request_id").to_numpy(), dtype=np.int64),
        arrival_s=arrival,
        session=sessions,
        category=np.asarray(cat_names, dtype=object),
        req_category=cat_codes.astype(np.int64),
        req_block_tokens=bt,
        n_blocks=n_blocks,
        starts=starts,
        input_tokens=np.asarray(table.column("input_tokens").to_numpy(), dtype=np.int64),
        req=req,
        key=key,
        hash_ns=key_ns.astype(np.int32),
        hash_id=flat[first_pos],
        tokens=tokens,
        hit=hit,
        prev=prev,
        first_pos=first_pos,
        last_pos=last_pos,
        count=count,
    )


# --------------------------------------------------------------------------------------------
# The analyses (each takes the flattened stream)


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else math.nan


def hit_ratios(acc: Accesses) -> pd.DataFrame:
    """Ideal hit ratios per category (block- and token-weighted), one row per category."""
    n_cat = len(acc.category)
    acc_cat = acc.req_category[acc.req]
    accesses = np.bincount(acc_cat, minlength=n_cat)
    hits = np.bincount(acc_cat[acc.hit], minlength=n_cat)
    tok = np.bincount(acc_cat, weights=acc.tokens, minlength=n_cat)
    hit_tok = np.bincount(acc_cat[acc.hit], weights=acc.tokens[acc.hit], minlength=n_cat)
    reqs = np.bincount(acc.req_category, minlength=n_cat)
    inp = np.bincount(acc.req_category, weights=acc.input_tokens, minlength=n_cat)
    return category_table(acc.category, reqs, accesses, hits, tok, hit_tok, inp)


def category_table(names: npt.NDArray[np.object_], *counts: npt.NDArray[Any]) -> pd.DataFrame:
    """The per-category table from its counts, indexed by category code: requests, block
    accesses, block hits, hashed tokens, hit tokens, input tokens (integer-valued), then the ratios;
    sorted by category name."""
    cols = ("requests", "block_accesses", "block_hits", "hashed_tokens", "hit_tokens", "input_tokens")
    df = pd.DataFrame({"category": names.astype(str),
                       **{c: np.asarray(v).astype(np.int64) for c, v in zip(cols, counts, strict=True)}})
    df["block_hit_ratio"] = df["block_hits"] / df["block_accesses"].where(df["block_accesses"] > 0)
    df["token_hit_ratio"] = df["hit_tokens"] / df["hashed_tokens"].where(df["hashed_tokens"] > 0)
    df["input_token_hit_ratio"] = df["hit_tokens"] / df["input_tokens"].where(df["input_tokens"] > 0)
    return df.sort_values("category", kind="stable").reset_index(drop=True)


def skew_from_histogram(
    values: npt.NDArray[np.integer[Any]], blocks: npt.NDArray[np.integer[Any]],
    levels: tuple[float, ...] = SKEW_LEVELS,
) -> tuple[dict[float, float], pd.DataFrame]:
    """Reuse skew from the histogram of access counts (`blocks[i]` distinct blocks were accessed
    `values[i]` times, values distinct): the share of distinct blocks that account for each level
    of all reuses, and the Lorenz-like curve (`block_share`: top blocks by reuses, as a share of
    distinct blocks; `reuse_share`: their share of all reuses), thinned to at most ~512 points.
    Integer arithmetic on the histogram gives what sorting one count per block gives (the
    streamed characterization merges per-partition histograms instead of holding every count).
    """
    order = np.argsort(np.asarray(values, dtype=np.int64))[::-1]
    r = np.asarray(values, dtype=np.int64)[order] - 1          # reuses per block, descending
    nb = np.asarray(blocks, dtype=np.int64)[order]
    n_keys = int(nb.sum())
    b_end = np.cumsum(nb)                                        # blocks in groups 0 … j
    c_end = np.cumsum(nb * r)                                    # their reuses
    total = int(c_end[-1]) if c_end.size else 0
    if n_keys == 0 or total == 0:
        return {lvl: math.nan for lvl in levels}, pd.DataFrame({"block_share": [], "reuse_share": []})

    def cum_at(k: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Reuses of the top k+1 blocks."""
        j = np.searchsorted(b_end, k, side="right")
        b0 = np.where(j > 0, b_end[j - 1], 0)
        c0 = np.where(j > 0, c_end[j - 1], 0)
        return np.asarray(c0 + (k - b0 + 1) * r[j], dtype=np.int64)

    shares = {}
    for lvl in levels:
        # smallest k with cum[k-1] ≥ lvl·total (integers compared exactly: lvl·total rounded up)
        need = math.ceil(lvl * total - 1e-9)
        if need <= 0:
            k = 1
        else:
            j = int(np.searchsorted(c_end, need, side="left"))  # first group reaching it (r[j] > 0)
            b0, c0 = (int(b_end[j - 1]), int(c_end[j - 1])) if j else (0, 0)
            k = b0 + -(-(need - c0) // int(r[j]))
        shares[lvl] = k / n_keys
    keep = np.unique(np.linspace(0, n_keys - 1, min(n_keys, CURVE_POINTS)).astype(np.int64))
    curve = pd.DataFrame(
        {
            "block_share": np.concatenate([[0.0], (keep + 1) / n_keys]),
            "reuse_share": np.concatenate([[0.0], cum_at(keep) / total]),
        }
    )
    return shares, curve


def request_reuse_times(acc: Accesses) -> pd.DataFrame:
    """One row per request with at least one hit: time since its source request (module docstring)."""
    hit_idx = np.flatnonzero(acc.hit)
    if hit_idx.size == 0:
        return pd.DataFrame(
            {
                "request_id": pd.Series([], dtype="int64"),
                "category": pd.Series([], dtype="string"),
                "arrival_s": pd.Series([], dtype="float64"),
                "reuse_time_s": pd.Series([], dtype="float64"),
                "reused_blocks": pd.Series([], dtype="int64"),
                "source_request_id": pd.Series([], dtype="int64"),
                "same_session": pd.Series([], dtype="boolean"),
            }
        )
    r = acc.req[hit_idx]
    # hit_idx ascends, so each request's hits are contiguous; its deepest hit is the last of its run
    last_of_run = np.ones(hit_idx.size, dtype=np.bool_)
    last_of_run[:-1] = r[1:] != r[:-1]
    deepest = hit_idx[last_of_run]
    reqs = r[last_of_run]
    n_hits = np.bincount(r, minlength=acc.arrival_s.size)[reqs]
    src = acc.req[acc.prev[deepest]]
    return request_reuse_table(acc.request_id, acc.arrival_s, acc.session, acc.category, acc.req_category,
                               reqs, src, n_hits)


def request_reuse_table(request_id: I64, arrival_s: F64, session: npt.NDArray[np.object_],
                        names: npt.NDArray[np.object_], category: I64, reqs: I64, src: I64,
                        n_hits: I64) -> pd.DataFrame:
    """The request reuse rows of requests `reqs` (positions in arrival order) whose deepest hit
    was last accessed by request `src`, from the per-request columns."""
    s_this = session[reqs]
    s_src = session[src]
    known = ~(pd.isna(s_this) | pd.isna(s_src))
    same = pd.array(np.where(known, s_this == s_src, False), dtype="boolean")
    same[~known] = pd.NA
    return pd.DataFrame(
        {
            "request_id": request_id[reqs],
            "category": pd.array(names[category[reqs]].astype(str), dtype="string"),
            "arrival_s": arrival_s[reqs],
            "reuse_time_s": arrival_s[reqs] - arrival_s[src],
            "reused_blocks": np.asarray(n_hits).astype(np.int64),
            "source_request_id": request_id[src],
            "same_session": same,
        }
    )


def block_reuse_times(acc: Accesses) -> tuple[F64, I64]:
    """Times between consecutive accesses of each block, and the category code of the re-access."""
    idx = np.flatnonzero(acc.prev >= 0)
    t_acc = acc.arrival_s[acc.req]
    return t_acc[idx] - t_acc[acc.prev[idx]], acc.req_category[acc.req[idx]]


_QUANTILES = (0.10, 0.25, 0.50, 0.75, 0.90, 0.99)


def _two_product(a: F64, b: F64) -> tuple[F64, F64]:
    """a·b as an unevaluated sum p + e of two floats, exactly (Dekker's product, no FMA needed)."""
    p = a * b
    split = 134217729.0  # 2^27 + 1
    t = split * a
    ah = t - (t - a)
    al = a - ah
    t = split * b
    bh = t - (t - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def weighted_stats(values: F64, weights: I64, qs: tuple[float, ...]) -> tuple[int, float, F64]:
    """(n, mean, quantiles) of the multiset holding each `values[i]` `weights[i]` times.

    The mean is the correctly rounded exact sum over n (`math.fsum` of exact products), and the
    quantiles are numpy's default ("linear") ones, computed with its own index and interpolation
    arithmetic: the result depends only on the multiset, so a stream that aggregates repeated values
    gives bit for bit what the per-access arrays give.
    """
    w = np.asarray(weights, dtype=np.int64)
    n = int(w.sum())
    if n == 0:
        return 0, math.nan, np.full(len(qs), math.nan)
    p, e = _two_product(np.asarray(values, dtype=np.float64), w.astype(np.float64))
    mean = math.fsum(np.concatenate([p, e]).tolist()) / n
    order = np.argsort(values, kind="stable")
    v, cw = np.asarray(values, dtype=np.float64)[order], np.cumsum(w[order])
    q = np.asarray(qs, dtype=np.float64)
    virtual = (n - 1) * q
    prev = np.floor(virtual)
    nxt = prev + 1
    above = virtual >= n - 1
    prev[above] = nxt[above] = n - 1
    below = virtual < 0
    prev[below] = nxt[below] = 0
    gamma = virtual - prev.astype(np.intp)
    a = v[np.searchsorted(cw, prev.astype(np.int64), side="right")]
    b = v[np.searchsorted(cw, nxt.astype(np.int64), side="right")]
    diff = b - a
    out = a + diff * gamma
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return n, mean, out


def _quantile_table(values: F64, weights: I64, codes: I64, names: npt.NDArray[np.object_],
                    prefix: str) -> pd.DataFrame:
    """Count, mean and quantiles per category (and "all") of values with integer weights."""
    rows = []
    groups = [("all", values, weights)] + [(str(names[c]), values[codes == c], weights[codes == c])
                                           for c in range(len(names))]
    for name, v, w in groups:
        n, mean, qs = weighted_stats(v, w, _QUANTILES)
        row: dict[str, Any] = {"category": name, "n": n, f"{prefix}_mean_s": mean}
        for q, x in zip(_QUANTILES, qs, strict=True):
            row[f"{prefix}_p{round(q * 100)}_s"] = float(x)
        rows.append(row)
    return pd.DataFrame(rows)


def lifespans(acc: Accesses) -> pd.DataFrame:
    """One row per distinct block: first/last access time, lifespan, accesses, first category."""
    t_acc = acc.arrival_s[acc.req]
    first_s = t_acc[acc.first_pos]
    last_s = t_acc[acc.last_pos]
    return pd.DataFrame(
        {
            "hash_ns": acc.hash_ns,
            "hash_id": acc.hash_id,
            "category": pd.array(acc.category[acc.req_category[acc.req[acc.first_pos]]].astype(str),
                                 dtype="string"),
            "first_s": first_s,
            "last_s": last_s,
            "lifespan_s": last_s - first_s,
            "accesses": acc.count,
        }
    )


def _live_counts(start: I64, end: I64, n: int, weights: F64 | None = None) -> F64:
    """Number (or weight) of intervals [start, end) covering each position 0..n−1."""
    ok = end > start
    d = np.bincount(start[ok], weights=None if weights is None else weights[ok], minlength=n + 1)
    d = d - np.bincount(end[ok], weights=None if weights is None else weights[ok], minlength=n + 1)
    return np.cumsum(d[:n]).astype(np.float64)


@dataclass(frozen=True)
class Capacity:
    """Live objects over access positions and the peak of their bytes."""

    live_blocks: F64      # per access position
    live_states: F64
    live_bytes: F64
    peak_pos: int         # −1 when there is no access
    capacity_bytes: int
    capacity_blocks: int
    capacity_states: int


def capacity_needed(acc: Accesses, profile: ProfileLike) -> Capacity:
    """Peak over time of live chunk bytes (+ live reuse-point state bytes for hybrid profiles)."""
    n = int(acc.key.size)
    if n == 0:
        z = np.zeros(0)
        return Capacity(z, z, z, -1, 0, 0, 0)
    # a block's size is that of the request that first accessed it (one size per table, usually)
    sizes, size_of_key = np.unique(acc.req_block_tokens[acc.req[acc.first_pos]], return_inverse=True)
    key_bytes = np.array([float(profile.chunk_bytes(int(b))) for b in sizes])[size_of_key]
    live_blocks = _live_counts(acc.first_pos, acc.last_pos, n)
    live_bytes = _live_counts(acc.first_pos, acc.last_pos, n, key_bytes)
    live_states = np.zeros(n, dtype=np.float64)
    if profile.is_hybrid and acc.hit.any():
        hit_idx = np.flatnonzero(acc.hit)
        r = acc.req[hit_idx]
        last_of_run = np.ones(hit_idx.size, dtype=np.bool_)
        last_of_run[:-1] = r[1:] != r[:-1]
        deepest = hit_idx[last_of_run]
        k = acc.key[deepest]
        # last use of each reuse point: max position per key (deepest ascends, so last write wins
        # after a stable sort by key)
        order = np.argsort(k, kind="stable")
        ks = k[order]
        end_run = np.ones(ks.size, dtype=np.bool_)
        end_run[:-1] = ks[1:] != ks[:-1]
        point_keys = ks[end_run]
        point_last_use = deepest[order][end_run]
        live_states = _live_counts(acc.first_pos[point_keys], point_last_use, n)
        live_bytes = live_bytes + live_states * float(profile.state_bytes)
    peak = int(np.argmax(live_bytes))
    return Capacity(
        live_blocks=live_blocks,
        live_states=live_states,
        live_bytes=live_bytes,
        peak_pos=peak,
        capacity_bytes=round(float(live_bytes[peak])),
        capacity_blocks=round(float(live_blocks[peak])),
        capacity_states=round(float(live_states[peak])),
    )


def _live_per_request(acc: Accesses, cap: Capacity) -> pd.DataFrame:
    """The live series reduced to one row per request with blocks (the max over its accesses)."""
    has = acc.n_blocks > 0
    if not has.any():
        return pd.DataFrame({"arrival_s": [], "live_blocks": [], "live_states": [], "live_bytes": []})
    starts = acc.starts[has]
    return pd.DataFrame(
        {
            "arrival_s": acc.arrival_s[has],
            "live_blocks": np.maximum.reduceat(cap.live_blocks, starts).astype(np.int64),
            "live_states": np.maximum.reduceat(cap.live_states, starts).astype(np.int64),
            "live_bytes": np.maximum.reduceat(cap.live_bytes, starts),
        }
    )


@numba.njit(cache=True, nogil=True)
def _stack_distances(prev: I64) -> I64:  # pragma: no cover - compiled; tested through lru_curve
    """LRU stack distance of every access (−1 for a first access).

    A Fenwick tree over positions marks each key's most recent access; the distance of access i
    is the number of marks strictly between its previous access p and i.
    """
    n = prev.size
    tree = np.zeros(n + 1, dtype=np.int64)
    out = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        p = prev[i]
        if p >= 0:
            s = 0
            j = i
            while j > 0:
                s += tree[j]
                j -= j & -j
            j = p + 1
            while j > 0:
                s -= tree[j]
                j -= j & -j
            out[i] = s
            j = p + 1
            while j <= n:
                tree[j] -= 1
                j += j & -j
        j = i + 1
        while j <= n:
            tree[j] += 1
            j += j & -j
    return out


def lru_curve(acc: Accesses, chunk_bytes: int) -> tuple[pd.DataFrame, int]:
    """Block hit ratio of LRU for capacities 1 … (enough for every hit), and that capacity.

    The curve keeps at most ~512 capacities (log-spaced, always including the largest).
    """
    n = int(acc.key.size)
    # tail-first order within each request (module docstring), then previous access per position
    pos_in_req = np.arange(n, dtype=np.int64) - acc.starts[acc.req]
    keys = acc.key[acc.starts[acc.req] + acc.n_blocks[acc.req] - 1 - pos_in_req]
    perm = np.argsort(keys, kind="stable")
    same = keys[perm[1:]] == keys[perm[:-1]]
    prev = np.full(n, -1, dtype=np.int64)
    prev[perm[1:][same]] = perm[:-1][same]
    d = _stack_distances(prev) if n else np.zeros(0, np.int64)
    d = d[d >= 0]
    return lru_table(np.bincount(d) if d.size else np.zeros(0, np.int64), n, chunk_bytes)


def lru_table(hist: I64, n: int, chunk_bytes: int) -> tuple[pd.DataFrame, int]:
    """The LRU curve from the histogram of stack distances (`hist[d]` re-accesses at distance d)
    over `n` accesses, and the capacity that gets every hit (module docstring)."""
    hits_at = np.cumsum(hist)  # hits_at[c−1] = hits with capacity c
    return lru_frame(int(hits_at.size), lambda caps: hits_at[caps - 1], n, chunk_bytes)


def lru_frame(c_max: int, hits_below: Callable[[I64], npt.NDArray[Any]], n: float,
              chunk_bytes: int) -> tuple[pd.DataFrame, int]:
    """The LRU curve at ~512 log-spaced capacities 1 … `c_max` (the capacity that gets every hit),
    `hits_below(caps)` being the (possibly weighted) re-accesses at a distance < each capacity."""
    if c_max == 0:
        empty = pd.DataFrame({"capacity_blocks": pd.Series([], dtype="int64"),
                              "capacity_bytes": pd.Series([], dtype="int64"),
                              "block_hit_ratio": pd.Series([], dtype="float64")})
        return empty, 0
    caps = np.unique(np.geomspace(1, c_max, min(c_max, CURVE_POINTS)).round().astype(np.int64))
    return (
        pd.DataFrame(
            {
                "capacity_blocks": caps,
                "capacity_bytes": caps * int(chunk_bytes),
                "block_hit_ratio": hits_below(caps) / n,
            }
        ),
        c_max,
    )


def assemble(
    profile: ProfileLike, *, requests: int, block_accesses: int, block_tokens: int, block_hits: int,
    hashed_tokens: int, hit_tokens: int, input_tokens: int,
    count_histogram: tuple[npt.NDArray[np.integer[Any]], npt.NDArray[np.integer[Any]]], reused_life: F64,
    by_category: pd.DataFrame, request_reuse: pd.DataFrame,
    block_reuse_quantiles: pd.DataFrame, capacity: tuple[int, int, int, float, int],
    live: pd.DataFrame, lru: tuple[pd.DataFrame, int], lifespans: pd.DataFrame | None,
    lru_sampling_rate: float = 1.0,
) -> Characterization:
    """The result from what every path computes its own way: adds the reuse-time fits to
    `by_category` and `in_fit` to `request_reuse` (in place), the ratios, the reuse skew (from the
    histogram of access counts per distinct block: (counts, blocks with that count)) and the
    lifespan quantiles. `capacity` is (blocks,
    states, bytes at the peak, arrival time of the peak, max live blocks)."""
    rr, cats = request_reuse, by_category
    sessions_known = bool(rr["same_session"].notna().any())
    rr["in_fit"] = rr["same_session"].fillna(False).astype(bool) if sessions_known else True
    sample = rr[rr["in_fit"]]
    fits: dict[str, ExpFit] = {}
    for cat in cats["category"]:
        fits[cat] = fit_exponential(sample.loc[sample["category"] == cat, "reuse_time_s"].to_numpy())
    for col, attr in (("reuse_n", "n"), ("reuse_mean_s", "mean_s"), ("reuse_rate_per_s", "rate_per_s"),
                      ("ks_statistic", "ks_statistic"), ("ks_pvalue", "ks_pvalue")):
        cats[col] = [getattr(fits[c], attr) for c in cats["category"]]
    values, blocks = (np.asarray(a, dtype=np.int64) for a in count_histogram)
    shares, curve = skew_from_histogram(values, blocks)
    cap_blocks, cap_states, cap_bytes, peak_s, peak_live = capacity
    return Characterization(
        model=str(getattr(profile, "name", type(profile).__name__)),
        requests=requests,
        block_accesses=block_accesses,
        unique_blocks=int(blocks.sum()),
        block_tokens=block_tokens,
        block_hits=block_hits,
        block_hit_ratio=_ratio(block_hits, block_accesses),
        hashed_tokens=hashed_tokens,
        hit_tokens=hit_tokens,
        token_hit_ratio=_ratio(hit_tokens, hashed_tokens),
        input_tokens=input_tokens,
        input_token_hit_ratio=_ratio(hit_tokens, input_tokens),
        reuse_skew_block_share=shares,
        reused_blocks=int(blocks[values > 1].sum()),
        request_reuse_fit=fit_exponential(sample["reuse_time_s"].to_numpy()),
        reuse_fit_sample="same-session" if sessions_known else "all",
        lifespan_median_s=float(np.median(reused_life)) if reused_life.size else math.nan,
        lifespan_p90_s=float(np.quantile(reused_life, 0.9)) if reused_life.size else math.nan,
        chunk_bytes=int(profile.chunk_bytes(block_tokens)),
        state_bytes=int(profile.state_bytes) if profile.is_hybrid else 0,
        capacity_blocks=cap_blocks,
        capacity_states=cap_states,
        capacity_bytes=cap_bytes,
        capacity_peak_s=peak_s,
        peak_live_blocks=peak_live,
        by_category=cats,
        skew_curve=curve,
        request_reuse=rr,
        block_reuse_quantiles=block_reuse_quantiles,
        lifespans=lifespans,
        live=live,
        lru_curve=lru[0],
        lru_blocks_for_ideal=lru[1],
        lru_sampling_rate=lru_sampling_rate,
    )


def analyze(table: pa.Table, profile: ProfileLike) -> Characterization:
    """Run every analysis over a requests table for a model profile (pure: writes nothing).

    The in-memory reference (~134 B per block access): `characterize` streams instead
    (`kvwear.workloads.characterize_stream`) and is tested to give the same numbers."""
    acc = flatten(table)
    n = int(acc.key.size)
    brt, brt_cat = block_reuse_times(acc)
    life = lifespans(acc)
    cap = capacity_needed(acc, profile)
    bt0 = int(acc.req_block_tokens[0])
    return assemble(
        profile, requests=int(acc.arrival_s.size), block_accesses=n, block_tokens=bt0,
        block_hits=int(acc.hit.sum()), hashed_tokens=int(acc.tokens.sum()),
        hit_tokens=int(acc.tokens[acc.hit].sum()), input_tokens=int(acc.input_tokens.sum()),
        count_histogram=np.unique(acc.count, return_counts=True),
        reused_life=life.loc[life["accesses"] > 1, "lifespan_s"].to_numpy(),
        by_category=hit_ratios(acc), request_reuse=request_reuse_times(acc),
        block_reuse_quantiles=_quantile_table(brt, np.ones(brt.size, dtype=np.int64), brt_cat, acc.category,
                                              "block_reuse"),
        capacity=(cap.capacity_blocks, cap.capacity_states, cap.capacity_bytes,
                  float(acc.arrival_s[acc.req[cap.peak_pos]]) if cap.peak_pos >= 0 else math.nan,
                  round(float(cap.live_blocks.max())) if n else 0),
        live=_live_per_request(acc, cap), lru=lru_curve(acc, int(profile.chunk_bytes(bt0))), lifespans=life,
    )


# --------------------------------------------------------------------------------------------
# Output: versioned Parquet tables and the summary JSON


def _spec(kind: str, fields: list[tuple[str, pa.DataType]]) -> TableSpec:
    return TableSpec(kind=kind, version=1, schema=pa.schema([pa.field(n, t) for n, t in fields]))


_FIT_FIELDS = [
    ("reuse_n", pa.int64()), ("reuse_mean_s", pa.float64()), ("reuse_rate_per_s", pa.float64()),
    ("ks_statistic", pa.float64()), ("ks_pvalue", pa.float64()),
]
BY_CATEGORY = _spec("characterization.by_category", [
    ("category", pa.string()), ("requests", pa.int64()), ("block_accesses", pa.int64()),
    ("block_hits", pa.int64()), ("hashed_tokens", pa.int64()), ("hit_tokens", pa.int64()),
    ("input_tokens", pa.int64()), ("block_hit_ratio", pa.float64()), ("token_hit_ratio", pa.float64()),
    ("input_token_hit_ratio", pa.float64()), *_FIT_FIELDS,
])
SKEW_CURVE = _spec("characterization.reuse_skew", [("block_share", pa.float64()),
                                                   ("reuse_share", pa.float64())])
REQUEST_REUSE = _spec("characterization.request_reuse", [
    ("request_id", pa.int64()), ("category", pa.string()), ("arrival_s", pa.float64()),
    ("reuse_time_s", pa.float64()), ("reused_blocks", pa.int64()), ("source_request_id", pa.int64()),
    ("same_session", pa.bool_()), ("in_fit", pa.bool_()),
])
BLOCK_REUSE_QUANTILES = _spec("characterization.block_reuse_quantiles", [
    ("category", pa.string()), ("n", pa.int64()), ("block_reuse_mean_s", pa.float64()),
    *[(f"block_reuse_p{round(q * 100)}_s", pa.float64()) for q in _QUANTILES],
])
LIFESPANS = _spec("characterization.lifespans", [
    ("hash_ns", pa.int32()), ("hash_id", pa.int64()), ("category", pa.string()), ("first_s", pa.float64()),
    ("last_s", pa.float64()), ("lifespan_s", pa.float64()), ("accesses", pa.int64()),
])
LRU_CURVE = _spec("characterization.lru_curve", [
    ("capacity_blocks", pa.int64()), ("capacity_bytes", pa.int64()), ("block_hit_ratio", pa.float64()),
])
LIVE = _spec("characterization.live", [
    ("arrival_s", pa.float64()), ("live_blocks", pa.int64()), ("live_states", pa.int64()),
    ("live_bytes", pa.float64()),
])

#: Every table a characterization writes: (file stem, its spec, the Characterization field holding it).
TABLES: tuple[tuple[str, TableSpec, str], ...] = (
    ("by_category", BY_CATEGORY, "by_category"), ("reuse_skew", SKEW_CURVE, "skew_curve"),
    ("request_reuse", REQUEST_REUSE, "request_reuse"),
    ("block_reuse_quantiles", BLOCK_REUSE_QUANTILES, "block_reuse_quantiles"),
    ("lifespans", LIFESPANS, "lifespans"), ("live", LIVE, "live"), ("lru_curve", LRU_CURVE, "lru_curve"),
)

