"""Policy-independent math for the advanced placement policies (wa, gandalf, marconi, meritkv).

Pure functions and small O(1)-per-event online estimators, each tested on its own:
- `SlidingExpFit`: exponential rate MLE over a sliding time window (WA's per-workload reuse-time
  CDF over the last hour; Gandalf's idle-time survival).
- `reuse_prob` / `log_reuse_prob`: WA's ReuseProb = F(t + life) − F(t) for an exponential F.
- `ReuseHistogram`, `drop_cost_per_byte`, `move_cost`, `WriteBudget`: Gandalf's P(idle ≥ w)
  estimator, drop/move costs and the μ(t) write-budget controller.
- `FlopModel`, `BranchPredictor`: Marconi's FLOPs-saved model and branch-point prediction.
- `merit_score`: MeritKV's admission score.
- `LazyMinHeap`: the O(log n) priority queue with lazy invalidation every policy here uses.

Must not know about tiers, the prefix tree or the simulator; must not read the clock, do I/O or
keep global state (every estimator is an object the policy owns).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

# ---------------------------------------------------------------------------------------------
# Exponential fits over a sliding window


class SlidingExpFit:
    """Rate λ of an exponential distribution fitted (MLE: n / Σx) to the samples observed in the
    last `window_s` seconds of simulated time.

    `prior_rate_per_s` with `prior_weight` pseudo-samples regularizes the fit when the window
    holds few samples (and defines it when it holds none). Observations must come in
    non-decreasing `now_s`; each is added and expired once, so the cost is O(1) amortized.
    """

    __slots__ = ("_n", "_samples", "_sum", "prior_rate_per_s", "prior_weight", "window_s")

    def __init__(self, window_s: float = 3600.0, prior_rate_per_s: float = 1.0 / 60.0,
                 prior_weight: float = 1.0) -> None:
        if window_s <= 0 or prior_rate_per_s <= 0 or prior_weight < 0:
            raise ValueError("window_s and prior_rate_per_s must be > 0, prior_weight >= 0")
        self.window_s = float(window_s)
        self.prior_rate_per_s = float(prior_rate_per_s)
        self.prior_weight = float(prior_weight)
        self._samples: deque[tuple[float, float]] = deque()
        self._sum = 0.0
        self._n = 0

    def observe(self, now_s: float, sample_s: float) -> None:
        """Add one sample (e.g. a reuse gap in seconds) observed at `now_s`."""
        x = max(float(sample_s), 0.0)
        self._samples.append((now_s, x))
        self._sum += x
        self._n += 1
        self._expire(now_s)

    def _expire(self, now_s: float) -> None:
        horizon = now_s - self.window_s
        q = self._samples
        while q and q[0][0] < horizon:
            _, x = q.popleft()
            self._sum -= x
            self._n -= 1
        if self._n == 0:
            self._sum = 0.0  # cancel float drift

    def count(self, now_s: float) -> int:
        self._expire(now_s)
        return self._n

    def rate(self, now_s: float) -> float:
        """λ (1/s) from the samples in (now − window, now] and the prior."""
        self._expire(now_s)
        w = self.prior_weight
        n = self._n + w
        total = max(self._sum, 0.0) + (w / self.prior_rate_per_s if w > 0 else 0.0)
        if n <= 0:
            return self.prior_rate_per_s
        # all-zero samples with no prior would give an infinite rate: cap at 1/µs
        return n / total if total > 0 else 1e6


def exp_cdf(x_s: float, rate_per_s: float) -> float:
    """F(x) = 1 − e^(−λx) for x ≥ 0, else 0."""
    return -math.expm1(-rate_per_s * x_s) if x_s > 0 else 0.0


def reuse_prob(idle_s: float, life_s: float, rate_per_s: float) -> float:
    """WA's ReuseProb = F(t + life) − F(t) = e^(−λt)·(1 − e^(−λ·life)) for an exponential F."""
    t = max(idle_s, 0.0)
    return math.exp(-rate_per_s * t) * -math.expm1(-rate_per_s * life_s)


def log_reuse_prob(idle_s: float, life_s: float, rate_per_s: float) -> float:
    """log ReuseProb, exact where ReuseProb itself underflows (long idle times).

    Comparing logs keeps the order of two blocks of one workload equal to their LRU order even
    when both probabilities are below the smallest double.
    """
    t = max(idle_s, 0.0)
    tail = -math.expm1(-rate_per_s * life_s)
    if tail <= 0.0:
        return -math.inf
    return -rate_per_s * t + math.log(tail)


# ---------------------------------------------------------------------------------------------
# Gandalf


def survival_exp(idle_s: float, rate_per_s: float) -> float:
    """P(idle ≥ w) under an exponential idle-time model: e^(−λw)."""
    return math.exp(-rate_per_s * max(idle_s, 0.0))


def drop_cost_per_byte(p_idle: float, n_tokens: float, cost_per_token: float, size_bytes: float,
                       idle_s: float, min_idle_s: float = 1.0) -> float:
    """Gandalf's drop cost D = P(idle ≥ w)·n·c / (s·w).

    The expected recompute cost a hit would save (n tokens at c each), weighted by how likely
    the object is still to be reused after w seconds of idleness, per byte freed and per second
    of expected wait (≈ w). w is floored at `min_idle_s` so a just-touched object does not get
    an infinite cost.
    """
    if size_bytes <= 0:
        raise ValueError("size_bytes must be > 0")
    w = max(idle_s, min_idle_s)
    return p_idle * n_tokens * cost_per_token / (size_bytes * w)


def move_cost(gamma: float, mu: float, price_per_byte_written: float, size_bytes: float,
              displaced_value: float = 0.0) -> float:
    """Gandalf's move cost γ·μ(t)·p_w·s plus the value of the SSD victims the write displaces."""
    return gamma * mu * price_per_byte_written * size_bytes + displaced_value


class WriteBudget:
    """μ(t): the price multiplier that keeps SSD writes on a budget of TBW·t / T_target.

    Choice (the paper leaves the update rule implicit): μ(t) = clip((W(t)/B(t))^gain, μmin,
    μmax), with W the bytes written so far and B(t) = TBW·max(t, warmup_s)/T_target the budget
    at elapsed simulated time t. Stateless apart from the running total, O(1), and equal to 1
    exactly when writes are on budget; writing faster than budget raises the price of moves,
    writing slower lowers it. `mode="fixed"` keeps μ ≡ 1 (no adaptation).
    """

    __slots__ = ("gain", "mode", "mu_max", "mu_min", "start_s", "target_lifetime_s", "tbw_bytes",
                 "warmup_s", "written_bytes")

    def __init__(self, tbw_bytes: float, target_lifetime_s: float, *, gain: float = 1.0,
                 mu_min: float = 0.05, mu_max: float = 20.0, warmup_s: float = 60.0,
                 mode: str = "ratio", start_s: float = 0.0) -> None:
        if tbw_bytes <= 0 or target_lifetime_s <= 0:
            raise ValueError("tbw_bytes and target_lifetime_s must be > 0")
        if mode not in ("ratio", "fixed"):
            raise ValueError(f"unknown write-budget mode {mode!r}; valid: fixed, ratio")
        if not 0 < mu_min <= 1 <= mu_max:
            raise ValueError("need 0 < mu_min <= 1 <= mu_max")
        self.tbw_bytes = float(tbw_bytes)
        self.target_lifetime_s = float(target_lifetime_s)
        self.gain = float(gain)
        self.mu_min = float(mu_min)
        self.mu_max = float(mu_max)
        self.warmup_s = float(warmup_s)
        self.mode = mode
        self.start_s = float(start_s)
        self.written_bytes = 0.0

    def budget_bytes(self, now_s: float) -> float:
        t = max(now_s - self.start_s, self.warmup_s)
        return self.tbw_bytes * t / self.target_lifetime_s

    def record_write(self, nbytes: float) -> None:
        self.written_bytes += nbytes

    def mu(self, now_s: float) -> float:
        if self.mode == "fixed":
            return 1.0
        ratio = self.written_bytes / self.budget_bytes(now_s)
        if ratio <= 0.0:
            return self.mu_min
        return min(self.mu_max, max(self.mu_min, ratio**self.gain))


class ReuseHistogram:
    """P(reuse | idle ≥ w) for one class of objects, from what the class did recently.

    Counts (all decayed with time constant `tau_s`): E objects that entered the class (each
    access is one entry), R of them reused, and the reuse gaps in log₂ bins from `min_gap_s`.
    An object idle for w is either one of the G(≥w) reuses with a gap ≥ w or one of the E − R
    never reused, so P(reuse | idle ≥ w) = G(≥w) / (G(≥w) + E − R): R/E at w = 0, non-increasing
    in w. Objects still waiting count as never reused (a bias towards dropping that fades as
    they are reused). Suffix sums are cached until the next update; O(bins) per update burst.
    """

    __slots__ = ("_suffix", "bins", "entries", "gaps", "min_gap_s", "reuses", "tau_s")

    def __init__(self, tau_s: float = 3600.0, min_gap_s: float = 1.0 / 16, bins: int = 32,
                 prior_entries: float = 2.0, prior_reuses: float = 1.0) -> None:
        if tau_s <= 0 or min_gap_s <= 0 or bins < 2 or not 0 <= prior_reuses <= prior_entries:
            raise ValueError("need tau_s > 0, min_gap_s > 0, bins >= 2, 0 <= prior_reuses <= prior_entries")
        self.tau_s = float(tau_s)
        self.min_gap_s = float(min_gap_s)
        self.bins = int(bins)
        self.entries = float(prior_entries)
        self.reuses = float(prior_reuses)
        self.gaps = [0.0] * self.bins
        # the prior's reuses get the middle bin's gap (about min_gap·2^(bins/2 − 1): 2048 s with
        # the defaults): "reused, eventually"
        self.gaps[self.bins // 2] = float(prior_reuses)
        self._suffix: list[float] | None = None

    def bin_of(self, gap_s: float) -> int:
        if gap_s < self.min_gap_s:
            return 0
        return min(int(math.log2(gap_s / self.min_gap_s)) + 1, self.bins - 1)

    def decay(self, factor: float) -> None:
        """Multiply every count by `factor` (e^(−Δt/τ) for Δt of simulated time)."""
        self.entries *= factor
        self.reuses *= factor
        g = self.gaps
        for i in range(len(g)):
            g[i] *= factor
        self._suffix = None

    def entered(self) -> None:
        self.entries += 1.0

    def reused(self, gap_s: float) -> None:
        self.reuses += 1.0
        self.gaps[self.bin_of(gap_s)] += 1.0
        self._suffix = None

    def suffix_sums(self) -> list[float]:
        """G(≥ bin i) for every bin (and 0 past the last), cached until the next update."""
        suf = self._suffix
        if suf is None:
            suf = [0.0] * (self.bins + 1)
            acc = 0.0
            for i in range(self.bins - 1, -1, -1):
                acc += self.gaps[i]
                suf[i] = acc
            self._suffix = suf
        return suf

    def p_reuse(self, idle_s: float) -> float:
        suf = self._suffix
        if suf is None:
            suf = self.suffix_sums()
        # Gandalf prices every candidate with this: the attributes are read once, and max(x, 0.0)
        # is written out (the same value, -0.0 and NaN included)
        lo = self.min_gap_s
        if idle_s < lo:
            g = suf[0]
        else:
            b = int(math.log2(idle_s / lo)) + 1
            top = self.bins - 1
            g = suf[b if b <= top else top]
        never = self.entries - self.reuses
        if never < 0.0:
            never = 0.0
        tot = g + never
        return g / tot if tot > 0 else 0.0


# ---------------------------------------------------------------------------------------------
# Marconi


@dataclass(frozen=True)
class FlopModel:
    """Prefill FLOPs of a prefix of L tokens: a·L + b·L².

    a = 2 × active parameters (every matmul, all layers, per token); b = the causal attention
    term of the full-attention layers, 2·L_full·d_attn (QKᵀ and AV are 2·L²·d each, halved by the
    causal mask). Linear/SSM layers are linear in L and live in `a`.
    """

    linear_flops_per_token: float
    quadratic_flops_per_token2: float

    @classmethod
    def from_architecture(cls, active_params: float, full_attn_layers: int, attn_dim: int) -> FlopModel:
        return cls(2.0 * active_params, 2.0 * full_attn_layers * attn_dim)

    def prefill_flops(self, tokens: float) -> float:
        n = max(tokens, 0.0)
        return self.linear_flops_per_token * n + self.quadratic_flops_per_token2 * n * n

    def flops_saved(self, start_tokens: float, end_tokens: float) -> float:
        """FLOPs a hit at `end_tokens` saves over a hit at `start_tokens` (the parent entry)."""
        return self.prefill_flops(end_tokens) - self.prefill_flops(start_tokens)


def minmax(x: float, lo: float, hi: float) -> float:
    """(x − lo)/(hi − lo) clipped to [0, 1]; 0 when the range is empty."""
    if hi <= lo:
        return 0.0
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


class BranchPredictor:
    """Marconi's branch-point prediction on prefix-chained block ids.

    A request's block sequence is compared with every sequence seen before: the length m of its
    longest previously-seen prefix is a predicted branch point when the request continues past
    it (0 < m < len) *and* some earlier sequence also continued past it with a different block
    (or ended there: multi-turn growth reuses the whole prior input+output, which Marconi
    covers by admitting at request ends). O(len) per request with a dict of successor sets.
    """

    __slots__ = ("_children",)

    def __init__(self) -> None:
        # key → its distinct successors seen so far; None once there are ≥ 2 (a fork)
        self._children: dict[object, set[object] | None] = {}

    def observe(self, keys: list[object] | tuple[object, ...]) -> int | None:
        """Record `keys` and return the predicted branch point (in blocks), or None.

        The prediction is made against history *before* this request, as Marconi's speculative
        insertion does.
        """
        ch = self._children
        m = 0
        for k in keys:
            if k not in ch:
                break
            m += 1
        branch: int | None = None
        if 0 < m < len(keys):
            succ = ch[keys[m - 1]]
            # the path already continued elsewhere → this request makes it a fork
            if succ is None or len(succ) >= 1:
                branch = m
        prev: object | None = None
        for k in keys:
            if prev is not None:
                s = ch[prev]
                if s is not None:
                    s.add(k)
                    if len(s) >= 2:
                        ch[prev] = None  # a fork already: no need to keep the set
            if k not in ch:
                ch[k] = set()
            prev = k
        return branch


# ---------------------------------------------------------------------------------------------
# MeritKV


def merit_score(saved_prefill_s: float, lookup_s: float, transfer_s: float, write_cost_s: float,
                hist_miss_recompute_s: float) -> float:
    """MeritKV's admission merit (seconds of GPU time): saved prefill − lookup − transfer −
    write cost − historical miss recompute. Admit to SSD iff merit ≥ τ."""
    return saved_prefill_s - lookup_s - transfer_s - write_cost_s - hist_miss_recompute_s


# ---------------------------------------------------------------------------------------------
# Data structures shared by the policies


T = TypeVar("T", bound=Hashable)  # a heap's items (dict keys of its live entries)
K = TypeVar("K")  # a heap's sort keys (comparable)


class LazyMinHeap(Generic[T, K]):
    """A min-heap of (key, item) with O(log n) update and removal by lazy invalidation.

    Each item has at most one live entry; `set` pushes a new entry and makes the old one stale,
    `discard` makes it stale; stale entries are dropped when they reach the top. Keys are any
    comparable (tuples work); ties are broken by insertion order, so equal keys pop FIFO (items
    are never compared). Typed by item `T` (hashable) and key `K`: `LazyMinHeap[Obj, tuple[int,
    int]]` hands back what was set, with no cast at the caller.
    """

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[K, int, T]] = []
        self._live: dict[T, int] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, item: object) -> bool:
        return item in self._live

    def set(self, item: T, key: K) -> None:
        self._seq += 1
        self._live[item] = self._seq
        heapq.heappush(self._heap, (key, self._seq, item))
        if len(self._heap) > 4 * len(self._live) + 64:
            self._compact()

    def discard(self, item: T) -> None:
        self._live.pop(item, None)

    def _clean(self) -> None:
        h, live = self._heap, self._live
        while h and live.get(h[0][2]) != h[0][1]:
            heapq.heappop(h)

    def peek(self) -> tuple[K, T] | None:
        """(key, item) of the minimum live entry, or None when empty."""
        self._clean()
        if not self._heap:
            return None
        key, _, item = self._heap[0]
        return key, item

    def pop(self) -> tuple[K, T] | None:
        self._clean()
        if not self._heap:
            return None
        key, _, item = heapq.heappop(self._heap)
        del self._live[item]
        return key, item

    def _compact(self) -> None:
        live = self._live
        self._heap = [e for e in self._heap if live.get(e[2]) == e[1]]
        heapq.heapify(self._heap)
