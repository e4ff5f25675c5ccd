"""What a run found, in sentences and a compact ranking: the first screen of the run report.

From the run's typed records (results rows, cross-validation checks), and nothing else: which
deployable policy projects the longest SSD life, its gain over LRU write-back and what it costs
in miss ratio; the offline oracles' lifetimes, marked as bounds (a policy is offline when the
policy registry says it reads the future: kvwear.policies.base.is_offline); whether the estimate
agreed with the drive; the inputs every lifetime is computed from. Lifetimes are in years, days
under a year (kvwear.units.format_lifetime). Sentences carry `**bold**` spans, which the HTML
renders and the Markdown keeps. Must not compute a metric the records do not hold (ratios of two
of them excepted) or read files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvwear.errors import UnknownNameError
from kvwear.harness.estimate.estimator import LIFETIME_MODEL_CHECK, Check
from kvwear.harness.estimate.schema import ResultsRow
from kvwear.policies.base import is_offline
from kvwear.units import format_bytes, format_lifetime

# The baseline every gain is against (the simulator's write-back LRU).
BASELINE = "lru"
# A deployable policy whose miss ratio is within this many points of LRU's is named beside the
# longest-lived one when that one's miss-ratio cost is larger (a reader's second question).
NEAR_MISS_POINTS = 5.0
WAF_NAMES = {"measured": "the WAF the drive measured", "workload": "the workload model's WAF",
             "uniform": "the uniform-random reference WAF", "waf1": "WAF 1"}


def lifetime_of(row: ResultsRow, waf: str) -> float | None:
    """The row's projected lifetime in days under `waf` (measured, workload, uniform, waf1)."""
    v = getattr(row, f"lifetime_days_{waf}")
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def auto_waf(rows: Sequence[ResultsRow]) -> str | None:
    """The WAF lifetimes are shown under when none is named: the drive's measured one, else the
    workload model's, the uniform reference's, WAF 1 (as kvwear.reports.sweep_report.lifetime_col)."""
    return next((w for w in ("measured", "workload", "uniform", "waf1")
                 if any(lifetime_of(r, w) is not None for r in rows)), None)


def offline(policy: str) -> bool:
    """Whether the registry knows the policy as offline (an unknown one, e.g. a plugin since
    removed, counts as deployable: nothing says it reads the future)."""
    try:
        return is_offline(policy)
    except (UnknownNameError, ValueError):
        return False


# How a drive was preconditioned before the workload (kvwear.emulator.precondition's modes), in words.
PRECONDITIONING = {"none": "not preconditioned (fresh)", "fill": "preconditioned by a sequential fill",
                   "steady": "preconditioned to steady state"}


def drive_of(row: ResultsRow, short: bool = False, scaling: bool = False) -> str | None:
    """The drive behind the row's measured WAF: its preset (with how it was scaled to the run, when
    `scaling`) and its preconditioning; None when the device named neither (a drive of one's own)."""
    if row.drive_preset is None and row.precondition is None:
        return None
    mode = row.precondition or "none"
    unreached = mode == "steady" and row.precondition_steady is False
    if short:
        pre = "steady not reached" if unreached else {"none": "fresh", "fill": "filled", "steady": "steady"}.get(mode,
                                                                                                             mode)
        return f"{row.drive_preset or 'options'}, {pre}"
    pre = ("preconditioned toward steady state, which it did not reach" if unreached else
           PRECONDITIONING.get(mode, f"preconditioned: {mode}"))
    # the device's scaling note starts with the preset's name, which this sentence already gives
    note = (row.drive_scaling or "").removeprefix(f"preset {row.drive_preset}: ")
    scale = f" ({note})" if scaling and note else ""
    return f"preset {row.drive_preset or '(the device options)'}{scale}, {pre}"


def waf_basis(row: ResultsRow, waf: str) -> str:
    """Which WAF a lifetime is projected with, and on what drive: a measured WAF says whether it is
    the workload's steady state's, names the drive's preset and preconditioning, and has the
    transient's WAF beside it (one line per WAF)."""
    if waf != "measured":
        return WAF_NAMES[waf]
    device = f"the {row.device} device" if row.device else "the device"
    steady = row.steady_state_reached
    value = "" if row.waf_measured is None else (
        ("steady-state " if steady else "") + f"WAF {row.waf_measured:.2f} "
        + ("(no steady state reached) " if steady is False else ""))
    drive = drive_of(row)
    transient = f"; transient WAF {row.waf_transient:.2f}" if row.waf_transient is not None else ""
    return f"{value}measured on {device}" + (f", {drive}" if drive else "") + transient


@dataclass(frozen=True)
class Ranked:
    """One ranking line: a policy, whether it is an offline bound, and what ranks it."""

    row: ResultsRow
    offline: bool
    lifetime_days: float | None
    gain_vs_baseline: float | None      # its lifetime ÷ LRU write-back's
    model_check: Check | None           # the workload model's lifetime against the measured one


def rank(rows: Sequence[ResultsRow], checks: Sequence[Check], waf: str) -> list[Ranked]:
    """Deployable policies by projected lifetime (longest first; ties: lower miss ratio), then the
    offline bounds."""
    base = next((r for r in rows if r.policy == BASELINE), None)
    base_life = lifetime_of(base, waf) if base is not None else None
    model = {c.policy: c for c in checks if c.name == LIFETIME_MODEL_CHECK}

    def gain(life: float | None) -> float | None:
        if life is None or base_life is None or base_life <= 0 or math.isinf(base_life):
            return None
        return life / base_life

    out = []
    for r in rows:
        life = lifetime_of(r, waf)
        out.append(Ranked(r, offline(r.policy), life, gain(life), model.get(r.policy)))

    def key(x: Ranked) -> tuple[bool, float, float]:
        life = -1.0 if x.lifetime_days is None else x.lifetime_days
        return x.offline, -life, x.row.miss_ratio_tokens if x.row.miss_ratio_tokens is not None else math.inf

    return sorted(out, key=key)


def _pts(a: float, b: float) -> str:
    d = (a - b) * 100
    return f"{d:+.1f} points" if abs(d) >= 0.05 else "the same"


def _gain(g: float | None) -> str:
    if g is None:
        return "—"
    return "∞" if math.isinf(g) else f"{g:,.1f}×" if g < 100 else f"{g:,.0f}×"


def headline(ranked: Sequence[Ranked], checks: Sequence[Check], waf: str) -> list[str]:
    """The run's findings in sentences with numbers (see the module docstring)."""
    out: list[str] = []
    deployable = [x for x in ranked if not x.offline and x.lifetime_days is not None]
    base = next((x for x in ranked if x.row.policy == BASELINE), None)
    if deployable:
        best = deployable[0]
        life = format_lifetime(best.lifetime_days)
        s = (f"**{best.row.policy}** projects the longest SSD life of the deployable policies: **{life}** "
             f"({waf_basis(best.row, waf)}")
        if base is not None and best is not base and base.lifetime_days is not None:
            s += (f"), **{_gain(best.gain_vs_baseline)}** LRU write-back's {format_lifetime(base.lifetime_days)}"
                  f"{_waf_brief(base.row, waf)}, " + _miss_cost(best.row, base.row) + ".")
        elif best is base:
            s += "): no other deployable policy outlives LRU write-back."
        else:
            s += "); the run has no LRU write-back to compare with."
        out.append(s)
        near = _near_baseline(deployable, base)
        if near is not None and near is base:
            out.append(f"No other deployable policy within {NEAR_MISS_POINTS:g} points of LRU's miss ratio outlives "
                       "LRU write-back.")
        elif near is not None and near is not best and base is not None:
            out.append(f"Within {NEAR_MISS_POINTS:g} points of LRU's miss ratio, **{near.row.policy}** projects the "
                       f"longest life: **{format_lifetime(near.lifetime_days)}**{_waf_brief(near.row, waf)}, "
                       f"**{_gain(near.gain_vs_baseline)}** LRU write-back's, " + _miss_cost(near.row, base.row) + ".")
    else:
        out.append(f"No deployable policy has a lifetime under {WAF_NAMES[waf]}.")
    for x in (x for x in ranked if x.offline):
        miss = x.row.miss_ratio_tokens
        out.append(f"Offline bound: **{x.row.policy}** is an oracle that knows every future request, so no "
                   f"deployed cache can run it; it bounds what one could reach at "
                   f"**{format_lifetime(x.lifetime_days)}**{_waf_brief(x.row, waf)}"
                   + (f" and a miss ratio of {miss:.4f}" if miss is not None else "") + ".")
    drives = drive_sentence([x.row for x in ranked])
    if drives and waf == "measured":
        out.append(drives)
    out.append(agreement(ranked, checks))
    return out


def _waf_brief(row: ResultsRow, waf: str) -> str:
    """A measured WAF and its transient beside a lifetime already introduced (empty otherwise)."""
    if waf != "measured" or row.waf_measured is None:
        return ""
    transient = f", transient {row.waf_transient:.2f}" if row.waf_transient is not None else ""
    return f" (WAF {row.waf_measured:.2f}{transient})"


def drive_sentence(rows: Sequence[ResultsRow]) -> str | None:
    """The drives behind the measured WAFs, one clause per preset and preconditioning: what the
    preconditioning wrote before the workload (its bytes kept apart from the workload's) and how many
    workloads reached their steady state (the lifetime's WAF is then the steady state's)."""
    groups: dict[str, list[ResultsRow]] = {}
    for r in rows:
        d = drive_of(r)
        if d is not None and r.waf_measured is not None:
            groups.setdefault(d, []).append(r)
    if not groups:
        return None
    clauses = []
    for d, members in groups.items():
        r = members[0]
        c = drive_of(r, scaling=True) or d
        if r.precondition_host_bytes and r.precondition_waf is not None:
            c += (f", which wrote {r.precondition_host_bytes / 1e9:,.0f} GB at WAF {r.precondition_waf:.2f} before "
                  "the workload (counted apart from it)")
        known = [m.steady_state_reached for m in members if m.steady_state_reached is not None]
        if len(known) > 1:
            c += f"; {sum(known)} of {len(known)} workloads reached their steady state"
        elif known:
            c += "; the workload " + ("reached" if known[0] else "did not reach") + " its steady state"
        clauses.append(c if len(groups) == 1 else f"{', '.join(m.policy for m in members)} on {c}")
    return ("Drive behind every measured WAF: " if len(groups) == 1 else "Drives behind the measured WAFs: ") \
        + " | ".join(clauses) + "."


def _near_baseline(deployable: Sequence[Ranked], base: Ranked | None) -> Ranked | None:
    """The longest-lived deployable policy within NEAR_MISS_POINTS of LRU's miss ratio, when the
    longest-lived of all costs more than that."""
    if base is None or base.row.miss_ratio_tokens is None:
        return None
    limit = base.row.miss_ratio_tokens + NEAR_MISS_POINTS / 100
    best = deployable[0].row.miss_ratio_tokens
    if best is None or best <= limit:
        return None
    return next((x for x in deployable if x.row.miss_ratio_tokens is not None and x.row.miss_ratio_tokens <= limit),
                None)


def _miss_cost(row: ResultsRow, base: ResultsRow) -> str:
    a, b = row.miss_ratio_tokens, base.miss_ratio_tokens
    if a is None or b is None:
        return "its miss ratio unknown"
    if a > b:
        return f"at a miss-ratio cost of **{_pts(a, b)}** ({a:.4f} against {b:.4f} of tokens recomputed)"
    return f"with no miss-ratio cost ({a:.4f} against {b:.4f} of tokens recomputed)"


def agreement(ranked: Sequence[Ranked], checks: Sequence[Check]) -> str:
    """Whether the lifetime estimate (the workload WAF model) agreed with the drive, and the byte
    accounting's verdict."""
    model = [x.model_check for x in ranked if x.model_check is not None]
    acc = [c for c in checks if c.kind == "accounting"]
    if not model:
        s = "No drive measurement to check the lifetime estimate against."
    else:
        ok = [c for c in model if c.passed]
        worst = max(model, key=lambda c: c.rel_error)
        tol = f"tolerance ±{worst.tolerance:.0%}"
        regimes = sorted({x.row.waf_workload_regime for x in ranked if x.row.waf_workload_regime})
        which = "the workload WAF model" + (f", regime {' / '.join(regimes)}" if regimes else "")
        if len(ok) == len(model):
            s = (f"The lifetime estimate ({which}) **agreed with the drive's measurement** for "
                 f"{'all ' if len(model) > 1 else ''}{len(model)} polic{'ies' if len(model) > 1 else 'y'}, "
                 f"within {worst.rel_error:.1%} ({tol}).")
        else:
            missed = ", ".join(f"{c.policy} by {c.rel_error:.0%}" for c in model if not c.passed)
            s = (f"The lifetime estimate ({which}) agreed with the drive for {len(ok)} of "
                 f"{len(model)} policies ({tol}); **it missed {missed}**: a finding about the model on this "
                 "workload (see Models against measurement).")
    if acc:
        bad = [c for c in acc if not c.passed]
        s += (f" Byte accounting: all {len(acc)} checks held." if not bad else
              f" **Byte accounting: {len(bad)} of {len(acc)} checks FAILED** — I/O was lost or added on the "
              "way (see Byte accounting).")
    return s


def lifetime_inputs(rows: Sequence[ResultsRow]) -> str:
    """The inputs every lifetime is computed from, as one sentence (per-policy ones in the ranking)."""
    r = next((r for r in rows if r.tbw_bytes), None)
    if r is None or r.tbw_bytes is None:
        return "The results carry no endurance budget (TBW): no lifetime can be projected."
    parts = ["Lifetime = TBW ÷ (host writes per day × WAF)."]
    # whole GB for a tier of real size; a tier under 1 GB (a loop device's) in its own unit, not "0 GB"
    tier = ""
    if r.ssd_bytes:
        size = f"{r.ssd_bytes / 1e9:,.0f} GB" if r.ssd_bytes >= 1e9 else format_bytes(r.ssd_bytes, binary=False)
        tier = f" of the {size} SSD tier"
    drive_writes = f" = {r.tbw_bytes / r.ssd_bytes:,.0f} full-drive writes" if r.ssd_bytes else ""
    ratings = f" (ratings from {r.rating_source})" if r.rating_source else ""
    parts.append(f"TBW {r.tbw_bytes / 1e12:,.1f} TB{tier}{drive_writes}{ratings}.")
    if r.span_s is not None:
        sample = (f", {r.sample_fraction:.0%} of its sessions sampled and scaled back"
                  if r.sample_fraction is not None and r.sample_fraction < 1 else "")
        parts.append(f"Host writes per day: the bytes the {r.span_s:,.0f} s trace wrote to the SSD tier, scaled to "
                     f"86,400 s{sample} (per policy in the ranking, with the drive writes per day, DWPD, they make).")
    if r.pe_rating_cycles:
        raw = f" of {r.raw_nand_bytes / 1e9:,.0f} GB raw NAND" if r.raw_nand_bytes else ""
        parts.append(f"Rated P/E: {r.pe_rating_cycles:,} cycles{raw} (the lifetime at rated P/E is in the full "
                     "results).")
    return " ".join(parts)
