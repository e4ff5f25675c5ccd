"""What a `requests` value may be: the bounds every trace loader and every reader of a requests
table applies, so that one absurd record (a timestamp of 1e308 ms, an output of 10^15 tokens, a
block of 0 tokens) is refused where it is read instead of becoming a lifetime of 10^303 days.

Bounds (generous defaults; each configurable through the environment, read when checked):
  * `max_context_tokens` (KVWEAR_MAX_CONTEXT_TOKENS, default 2^30 = 1,073,741,824, the
    token count of the longest line the JSONL reader takes: ~2 million 512-token blocks): a request's
    input and output token counts each lie in [0, max]; its input is at least 1 token (a model
    call reads a prompt);
  * `max_span_s` (KVWEAR_MAX_SPAN_S, default 366 days): arrival times are finite and
    non-negative, a format's times that count from the trace's start are at most this (checked by
    the loader on its own field), and a table's arrivals span at most this (any origin);
  * `block_tokens` in [1, 2^20]; `hashed_tokens` in [0, input_tokens]; a row holds
    ceil(hashed_tokens / block_tokens) hash ids (every loader's rule: Mooncake hashes its partial
    last block, Weka and the generic importer hash full blocks only and set hashed_tokens to match);
  * `turn` null or ≥ 0.

`check_requests(batch, where, first_row, span)` returns the first problem of a batch as an InputError
naming the row (1-based over the table) and the field. This module must not read files.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import InputError

DEFAULT_MAX_CONTEXT_TOKENS = 1 << 30
DEFAULT_MAX_SPAN_S = 366 * 86400.0
MAX_BLOCK_TOKENS = 1 << 20


def _env_number(name: str, default: float, integer: bool) -> float:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise InputError(f"${name}", None, None, f"expected a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0 or (integer and value != int(value)):
        raise InputError(f"${name}", None, None, f"expected a positive {'integer' if integer else 'number'}, "
                         f"got {text!r}")
    return value


def max_context_tokens() -> int:
    """The largest token count a request may have (module docstring)."""
    return int(_env_number("KVWEAR_MAX_CONTEXT_TOKENS", DEFAULT_MAX_CONTEXT_TOKENS, integer=True))


def max_span_s() -> float:
    """The longest time a trace may span, in seconds (module docstring)."""
    return _env_number("KVWEAR_MAX_SPAN_S", DEFAULT_MAX_SPAN_S, integer=False)


def context_rule() -> str:
    return f"at most the maximum context of {max_context_tokens():,} tokens (KVWEAR_MAX_CONTEXT_TOKENS)"


def span_rule() -> str:
    span = max_span_s()
    return f"at most {span:,.0f} s ({span / 86400:g} days, KVWEAR_MAX_SPAN_S)"


#: A vectorized check: (field, bad-row mask, message for a bad row index).
Check = tuple[str, np.ndarray, Callable[[int], str]]


def _np(col: pa.Array | pa.ChunkedArray, dtype: type, fill: float | int = 0) -> np.ndarray:
    return np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False), dtype=dtype)


def request_checks(batch: pa.RecordBatch | pa.Table, span: SpanCheck | None = None) -> list[Check]:
    """The bounds of the module docstring over a batch of REQUESTS rows, as vectorized checks
    (`span` carries the arrivals of the batches before this one; None: this batch alone)."""
    if batch.num_rows == 0:
        return []
    ctx = max_context_tokens()
    span = span if span is not None else SpanCheck()
    checks: list[Check] = []
    arrival = _np(batch.column("arrival_s"), np.float64, math.nan)
    bad_time = ~np.isfinite(arrival) | (arrival < 0)
    checks.append(("arrival_s", bad_time, lambda i: f"{float(arrival[i])!r} s; expected a finite time ≥ 0"))
    lo, hi = span.lo, span.hi
    far = span.bad_rows(np.where(bad_time, np.nan, arrival)) & ~bad_time
    checks.append(("arrival_s", far,
                   lambda i: f"{float(arrival[i])!r} s lies too far from the other arrivals"
                             # the span so far, when batches came before (none: lo = inf > hi = -inf)
                             + (f" ({lo:g}..{hi:g} s before this batch)" if lo <= hi else "")
                             + f": a trace spans {span_rule()}"))
    inp = _np(batch.column("input_tokens"), np.int64, -1)
    checks.append(("input_tokens", (inp < 1) | (inp > ctx),
                   lambda i: f"{inp[i]} tokens; a request reads 1 to {ctx:,} tokens ({context_rule()})"))
    out = _np(batch.column("output_tokens"), np.int64, -1)
    checks.append(("output_tokens", (out < 0) | (out > ctx),
                   lambda i: f"{out[i]} tokens; expected 0 to {ctx:,} ({context_rule()})"))
    block = _np(batch.column("block_tokens"), np.int64, 0)
    bad_block = (block < 1) | (block > MAX_BLOCK_TOKENS)
    checks.append(("block_tokens", bad_block, lambda i: f"{block[i]}; expected 1 to {MAX_BLOCK_TOKENS:,} tokens"))
    hashed = _np(batch.column("hashed_tokens"), np.int64, -1)
    checks.append(("hashed_tokens", (hashed < 0) | (hashed > np.maximum(inp, 0)),
                   lambda i: f"{hashed[i]}; expected 0 to input_tokens ({inp[i]})"))
    # a turn number counts from 0 or 1 (null: the trace does not say); the loaders that read one
    # refuse a negative one, so a table read back must not hold one either
    if "turn" in batch.column_names:
        turn = _np(batch.column("turn"), np.int64, 0)
        checks.append(("turn", turn < 0, lambda i: f"{turn[i]}; expected a turn number ≥ 0 (or null)"))
    n_ids = _np(pc.list_value_length(batch.column("hash_ids")), np.int64, -1)
    want = -(-hashed // np.where(bad_block, 1, block))
    checks.append(("hash_ids", ~bad_block & (hashed >= 0) & (n_ids != want),
                   lambda i: f"holds {n_ids[i]} ids; hashed_tokens {hashed[i]} in blocks of {block[i]} "
                             f"tokens needs ceil({hashed[i]}/{block[i]}) = {want[i]}"))
    return checks


def request_problems(batch: pa.RecordBatch | pa.Table, span: SpanCheck | None = None
                     ) -> tuple[np.ndarray, list[Check]]:
    """(bad-row mask, the checks) of `request_checks`."""
    checks = request_checks(batch, span)
    bad = np.zeros(batch.num_rows, dtype=bool)
    for _f, mask, _m in checks:
        bad |= mask
    return bad, checks


def first_problem(checks: list[Check], i: int) -> tuple[str, str]:
    """(field, message) of the first check row `i` fails."""
    for field, mask, msg in checks:
        if mask[i]:
            return field, msg(i)
    raise AssertionError(f"row {i} fails no check")


def check_requests(batch: pa.RecordBatch | pa.Table, where: str, first_row: int = 0,
                   span: SpanCheck | None = None) -> None:
    """Raise InputError naming `where`, the 1-based row (`first_row` + index + 1) and the field of
    the first row of `batch` outside the bounds."""
    bad, checks = request_problems(batch, span)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        field, msg = first_problem(checks, i)
        raise InputError(where, None, field, f"row {first_row + i + 1}: {msg}")


class SpanCheck:
    """A table's arrivals span at most `max_span_s` (for formats whose times have any origin):
    fed batch by batch, in file order."""

    def __init__(self) -> None:
        self.lo, self.hi, self.span = math.inf, -math.inf, max_span_s()

    def bad_rows(self, arrival: np.ndarray) -> np.ndarray:
        """Mask of the rows that would make the span too long (judged against the rows before them)."""
        a = np.asarray(arrival, dtype=np.float64)
        if not a.size:
            return np.zeros(0, dtype=bool)
        lo = np.minimum.accumulate(np.concatenate([[self.lo], a]))[:-1]
        hi = np.maximum.accumulate(np.concatenate([[self.hi], a]))[:-1]
        bad = ~np.isfinite(a) | ((a - lo) > self.span) | ((hi - a) > self.span)
        good = a[~bad]
        if good.size:
            self.lo, self.hi = min(self.lo, float(good.min())), max(self.hi, float(good.max()))
        return bad
