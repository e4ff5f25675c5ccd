"""The lifetime estimator and the predicted-vs-measured cross-validation record.

Formulas (DESIGN.md, "Lifetime estimator and cross-validation"):
- Endurance budget TBW = capacity × DWPD × 365 × warranty years (`tbw_from_dwpd`), or
  capacity × rated P/E cycles / (WAF·WLF) (`tbw_from_pe_cycles`).
- Projected lifetime = TBW / (host bytes per day × WAF); host bytes per day = the SSD bytes the
  simulated trace wrote, scaled to one day (`host_bytes_per_day`). TBW here is the budget at WAF 1,
  so call `tbw_from_pe_cycles` with its default waf=1 when the WAF goes into the lifetime formula
  (passing it to both would count it twice).
- Four WAFs side by side: 1 (Gandalf's assumption); the uniform-random reference
  WAF ≈ α / (α + W₀(−α·e^(−α))) (`analytical_waf`, α = effective physical / logical space), which
  describes none of the plans kvwear replays and stays a labelled reference; the workload model
  (harness.waf_model: GC over the plan's page death distances, the estimator's prediction); and
  the measured one.
- P/E cycles consumed per day = NAND bytes per day ÷ raw NAND capacity (`pe_cycles_per_day`), so
  a drive rated in P/E cycles (3,000 for TLC by default, `TLC_PE_CYCLES`) gets a lifetime too
  (`pe_lifetime_days`).

Effective space (`ftl_alpha`): only space GC can use counts. Block-level FTL: lines − GC reserve
lines − open lines (one host line, plus one GC line if separate). FEMU line GC: lines − the
background free-line reserve ⌊(1 − gc_thres_pcent/100)·lines⌋ − the open line. FEMU's background
GC also refuses victims with fewer than 1/8 invalid pages, which caps its steady-state WAF near 8
(= pages per line / minimum invalid pages); when the reserve leaves α ≤ 1 or the model exceeds
that cap, the cap is the prediction (`ftl_predicted_waf`). With the fixture geometry this gives
2.2 nominal (α = 256/192), 3.35 at gc_thres_pcent 90 and 8 at 75; FEMU measured 3.3 and 7.8.

Must not: run devices or read files; it is pure arithmetic over numbers the caller measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import lambertw

from emulator.ftl import FtlConfig
from kvwear.errors import KvwearError

SECONDS_PER_DAY = 86_400.0
DAYS_PER_YEAR = 365.0

# Cross-validation tolerances (relative errors; stated in the report).
# Host bytes: planned vs counted by the device/fio/eBPF. The only legitimate differences are the
# documented 4 KiB rounding (already in the plan) and a capture's lost events, hence 1%.
HOST_BYTES_REL_TOL = 0.01
# SMART data units are 512,000-byte units rounded up: compare with their own rounding, 2%.
SMART_HOST_BYTES_REL_TOL = 0.02
# WAF: a model (the workload model, the FTL emulator configured as the device) vs the device's
# counters. The workload model is mean-field (bench/waf_model.py: 95 % of plans within it). 10%.
WAF_REL_TOL = 0.10
# Lifetime inherits both errors (product of host bytes and WAF), so the sum of the two.
LIFETIME_REL_TOL = HOST_BYTES_REL_TOL + WAF_REL_TOL


def tbw_from_dwpd(capacity_bytes: int, dwpd: float, warranty_years: float) -> float:
    """TBW in bytes = capacity × DWPD × 365 × warranty years."""
    if capacity_bytes <= 0 or dwpd <= 0 or warranty_years <= 0:
        raise KvwearError(
            f"TBW needs positive capacity, DWPD and warranty years (got {capacity_bytes}, {dwpd}, "
            f"{warranty_years})"
        )
    return float(capacity_bytes) * dwpd * DAYS_PER_YEAR * warranty_years


def tbw_from_pe_cycles(capacity_bytes: int, pe_cycles: float, waf: float = 1.0, wlf: float = 1.0) -> float:
    """TBW in bytes = capacity × rated P/E cycles / (WAF · WLF) (WLF: wear-leveling factor ≥ 1)."""
    if capacity_bytes <= 0 or pe_cycles <= 0 or waf < 1.0 or wlf < 1.0:
        raise KvwearError(
            f"TBW needs capacity > 0, P/E cycles > 0, WAF ≥ 1, WLF ≥ 1 (got {capacity_bytes}, "
            f"{pe_cycles}, {waf}, {wlf})"
        )
    return float(capacity_bytes) * pe_cycles / (waf * wlf)


def analytical_waf(alpha: float) -> float:
    """WAF ≈ α / (α + W₀(−α·e^(−α))) for uniform random writes, α = physical/logical > 1."""
    if not alpha > 1.0:
        raise KvwearError(f"analytical WAF needs α > 1 (effective physical / logical space), got {alpha}")
    w = lambertw(-alpha * math.exp(-alpha), 0)
    return float(alpha / (alpha + w.real))


def effective_alpha(raw_bytes: float, exposed_bytes: float, unusable_bytes: float = 0.0) -> float:
    """α = (raw − space GC cannot use: reserve and open blocks) / exposed."""
    if exposed_bytes <= 0:
        raise KvwearError(f"exposed capacity must be > 0, got {exposed_bytes}")
    return (raw_bytes - unusable_bytes) / exposed_bytes


def ftl_alpha(config: FtlConfig) -> float:
    """Effective α of an emulated drive (see the module docstring for what is excluded)."""
    ppl = config.pages_per_line
    reserve = config.gc_thres_lines if config.gc_mode == "line" else config.reserve_lines
    # one open line per write frontier: with FDP handles each handle (and its GC frontier) holds one
    return effective_alpha(config.raw_pages, config.exposed_pages, (reserve + config.open_lines) * ppl)


def ftl_predicted_waf(config: FtlConfig) -> float:
    """Analytical WAF of uniform random writes on `config` (FEMU: capped by its 1/8 victim rule)."""
    alpha = ftl_alpha(config)
    if config.gc_mode == "line" and config.min_invalid_pages > 0:
        cap = config.pages_per_line / config.min_invalid_pages
        return cap if alpha <= 1.0 else min(analytical_waf(alpha), cap)
    return analytical_waf(alpha)


TLC_PE_CYCLES = 3000                 # a typical TLC rating, when the config names none


def pe_cycles_per_day(host_bytes_day: float, waf: float, raw_bytes: float) -> float:
    """Program/erase cycles the whole drive consumes per day: NAND bytes per day ÷ raw capacity."""
    if raw_bytes <= 0 or waf < 1.0:
        raise KvwearError(f"P/E cycles per day need raw capacity > 0 and WAF ≥ 1 (got {raw_bytes}, {waf})")
    return host_bytes_day * waf / raw_bytes


def pe_lifetime_days(rated_pe_cycles: float, pe_per_day: float) -> float:
    """Days until the rated P/E cycles are used up; infinite when nothing is written."""
    return math.inf if pe_per_day <= 0 else rated_pe_cycles / pe_per_day


def host_bytes_per_day(ssd_write_bytes: float, trace_duration_s: float) -> float:
    """Scale the SSD bytes the simulated trace wrote to one day."""
    if trace_duration_s <= 0:
        raise KvwearError(f"trace duration must be > 0 s to scale to a day, got {trace_duration_s}")
    return float(ssd_write_bytes) * SECONDS_PER_DAY / trace_duration_s


def projected_lifetime_days(tbw_bytes: float, host_bytes_day: float, waf: float) -> float:
    """Lifetime = TBW / (host bytes per day × WAF); infinite when nothing is written."""
    if waf < 1.0:
        raise KvwearError(f"WAF must be ≥ 1, got {waf}")
    if host_bytes_day <= 0:
        return math.inf
    return tbw_bytes / (host_bytes_day * waf)


CheckKind = Literal["accounting", "model", "reference"]


@dataclass(frozen=True)
class Check:
    """One predicted-vs-measured comparison. rel_error = |measured − predicted| / |predicted|.

    `kind` says what a failure means. "accounting": the same bytes counted at two points of the
    pipeline (policy → plan → fio → eBPF → SMART); a failure is lost or extra I/O, a fault of the
    harness or the device. "model": a prediction (the analytical WAF, the FTL emulator, a lifetime
    projection) against the measurement; a failure is a finding — the model does not describe
    this workload on this device — not a fault of the run. "reference": a prediction shown for
    comparison only (the uniform-random WAF, Gandalf's WAF 1), which the run's model tally does not
    count."""

    name: str
    predicted: float
    measured: float
    source: str
    tolerance: float
    rel_error: float
    passed: bool
    kind: CheckKind

    @classmethod
    def of(cls, name: str, predicted: float, measured: float, source: str, tolerance: float, *,
           kind: CheckKind) -> Check:
        if math.isinf(predicted) and math.isinf(measured):
            rel = 0.0
        elif predicted == 0:
            rel = 0.0 if measured == 0 else math.inf
        else:
            rel = abs(measured - predicted) / abs(predicted)
        return cls(name, float(predicted), float(measured), source, tolerance, rel, bool(rel <= tolerance), kind)


def waf_from_counters(host_pages: np.ndarray | int, gc_pages: np.ndarray | int) -> float:
    """WAF = (host + GC-relocated pages) / host pages (FEMU's vendor counters, the FTL emulator)."""
    h = int(np.sum(host_pages))
    g = int(np.sum(gc_pages))
    return (h + g) / h if h else 1.0
