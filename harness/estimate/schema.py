"""The results table: one row per run × policy, what the estimator and the run hand the reports.

`ResultsRow` is the typed row; the `RESULTS` table's schema is derived from it (one definition:
int → int64, float → float64, str → string, bool → bool, optional → nullable), so a row that does
not fit the table cannot be built. A run without replay fills the simulation's and the projections'
fields; the device's stay None. Byte counts are ints; ratios, seconds, dollars and lifetimes floats
(an infinite lifetime: nothing written). `read_results` reads a results Parquet back into rows.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from kvwear.errors import KvwearError
from kvwear.tables import TableSpec, read_table


@dataclass(frozen=True)
class ResultsRow:
    policy: str
    model: str | None = None
    device: str | None = None
    dram_bytes: int | None = None
    ssd_bytes: int | None = None
    sample_fraction: float | None = None
    # the simulation (kvwear.harness.estimate.estimator.sim_fields)
    requests: int | None = None
    span_s: float | None = None
    miss_ratio_tokens: float | None = None
    miss_ratio_chunks: float | None = None
    ssd_write_bytes: int | None = None
    ssd_write_bytes_full: int | None = None
    ssd_write_bytes_linear: int | None = None
    ssd_read_bytes: int | None = None
    linear_share_of_ssd_write_bytes: float | None = None
    hits_per_ssd_write: float | None = None
    frac_ssd_writes_hit: float | None = None
    load_latency_mean_s: float | None = None
    cost_recompute_per_1k: float | None = None
    cost_wear_per_1k: float | None = None
    cost_per_1k: float | None = None
    # the plan and the device's counts
    plan_write_bytes: int | None = None
    device_write_bytes: int | None = None
    nand_write_bytes: int | None = None
    ebpf_write_bytes: int | None = None
    smart_write_bytes: int | None = None
    # WAFs and lifetime projections (kvwear.harness.estimate.estimator)
    waf_measured: float | None = None
    waf_emulator: float | None = None
    waf_uniform: float | None = None
    waf_uniform_source: str | None = None
    waf_workload: float | None = None
    waf_workload_regime: str | None = None
    # the model's error measured in that regime (waf_model.REGIME_ERRORS, bench/waf_model.py): its
    # cases, the share within 10 % of the FTL, the median and 90th percentile of |model/FTL − 1|
    waf_workload_regime_cases: int | None = None
    waf_workload_regime_within_10pct: float | None = None
    waf_workload_regime_median_error: float | None = None
    waf_workload_regime_p90_error: float | None = None
    tbw_bytes: float | None = None
    host_bytes_per_day: float | None = None
    lifetime_days_waf1: float | None = None
    lifetime_days_uniform: float | None = None
    lifetime_days_workload: float | None = None
    lifetime_days_measured: float | None = None
    # FDP placement (kvwear.harness.plan.placement)
    placement: str | None = None
    placement_carried: bool | None = None
    waf_no_placement: float | None = None
    lifetime_days_no_placement: float | None = None
    placement_unavailable: str | None = None
    # P/E cycles of the full-size drive
    raw_nand_bytes: float | None = None
    pe_rating_cycles: int | None = None
    pe_cycles_per_day_waf1: float | None = None
    pe_cycles_per_day_uniform: float | None = None
    pe_cycles_per_day_workload: float | None = None
    pe_cycles_per_day_measured: float | None = None
    lifetime_days_pe_waf1: float | None = None
    lifetime_days_pe_uniform: float | None = None
    lifetime_days_pe_workload: float | None = None
    lifetime_days_pe_measured: float | None = None
    # the drive behind the measured WAF and the replay's phases (kvwear.harness.estimate.phases),
    # where the device reports them (sim): the preset and how it was scaled to the run's capacity;
    # what preconditioning (none | fill | steady) wrote, apart from the workload, and whether its
    # random rounds reached SNIA PTS's steady state; the passes and whole rounds the workload
    # played; its WAF over the whole replay, in the transient and in the steady state (every round
    # from steady_from_round, the transient cut by MSER-5: kvwear.emulator.precondition), whether and
    # where PTS's criterion held (steady_state_reached, steady_state_round: the round closing its
    # first window), the WAF of the last window; which of them waf_measured (the lifetime's WAF) is
    drive_preset: str | None = None
    drive_scaling: str | None = None
    precondition: str | None = None
    precondition_host_bytes: int | None = None
    precondition_nand_bytes: int | None = None
    precondition_gc_bytes: int | None = None
    precondition_waf: float | None = None
    precondition_steady: bool | None = None
    workload_passes: int | None = None
    workload_rounds: int | None = None
    waf_replay: float | None = None
    waf_transient: float | None = None
    waf_steady: float | None = None
    steady_state_reached: bool | None = None
    steady_state_round: int | None = None
    steady_from_round: int | None = None
    waf_last_window: float | None = None
    waf_lifetime_source: str | None = None
    # where the TBW budget's DWPD and years and the P/E rating came from (config, preset, default)
    rating_source: str | None = None
    # the fs layout (kvwear.harness.devices.fs_player): the file system kvwear made, the bytes one level
    # below the objects — file bytes (the player's write()), block bytes (the device's counters over the
    # mount), their difference (journal, metadata, allocation: fs_overhead_bytes, negative when files
    # died before writeback), the discards the device received — and the block trace on the embedded
    # FTL (its NAND bytes and WAF; a model of a drive, not the loop device's own count)
    fs_filesystem: str | None = None
    fs_discard: str | None = None
    fs_fsync: bool | None = None
    file_write_bytes: int | None = None
    fs_block_write_bytes: int | None = None
    fs_overhead_bytes: int | None = None
    fs_overhead_ratio: float | None = None
    fs_discard_bytes: int | None = None
    fs_ftl_nand_bytes: int | None = None
    fs_ftl_waf: float | None = None
    # the cross-validation tally (kvwear.harness.estimate.estimator.Check kinds)
    accounting_checks_passed: int | None = None
    accounting_checks_total: int | None = None
    model_checks_passed: int | None = None
    model_checks_total: int | None = None
    # gains over LRU (kvwear.harness.pipeline.run.placement_gains)
    host_write_gain_vs_lru: float | None = None
    waf_gain_vs_lru: float | None = None
    lifetime_gain_vs_lru: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_ARROW: dict[type, pa.DataType] = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def _field(name: str, tp: Any) -> pa.Field:
    args = typing.get_args(tp)
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args
    base = next(a for a in args if a is not type(None)) if optional else tp
    return pa.field(name, _ARROW[base], nullable=optional)


# Version 2 added the drive and phase columns and the WAF model's measured error in its regime; a
# version-1 table reads with them null. Version 3: waf_steady is every round after the transient
# (MSER-5), no longer PTS's first 5-round window, and steady_from_round says where it starts.
_ADDED = ("drive_preset", "drive_scaling", "precondition", "precondition_host_bytes", "precondition_nand_bytes",
       "precondition_gc_bytes", "precondition_waf", "precondition_steady", "workload_passes", "workload_rounds",
       "waf_replay", "waf_transient", "waf_steady", "steady_state_reached", "steady_state_round", "waf_last_window",
       "waf_lifetime_source", "rating_source", "waf_workload_regime_cases", "waf_workload_regime_within_10pct",
       "waf_workload_regime_median_error", "waf_workload_regime_p90_error", "steady_from_round")

RESULTS = TableSpec(
    kind="results",
    version=3,
    defaults=tuple((name, None) for name in _ADDED),
    schema=pa.schema([_field(f.name, t) for f, t in zip(
        dataclasses.fields(ResultsRow), typing.get_type_hints(ResultsRow).values(), strict=True)]),
)


def read_results(path: str | Path) -> list[ResultsRow]:
    """The rows of a results Parquet (its kind and version checked by kvwear.tables, its columns here)."""
    table = read_table(RESULTS, Path(path))
    extra = sorted(set(table.column_names) - set(ResultsRow.__dataclass_fields__))
    if extra or "policy" not in table.column_names:
        raise KvwearError(f"{path}: not a results table of this kvwear (columns {', '.join(extra) or 'no policy'})")
    return [ResultsRow(**r) for r in table.to_pylist()]
