"""The results table: one row per run × policy, what the estimator and the run hand the reports."""

from __future__ import annotations

import pyarrow as pa

from kvwear.tables import TableSpec


def _cols(typ: pa.DataType, *names: str) -> list[pa.Field]:
    return [pa.field(n, typ) for n in names]


_PE = ("waf1", "uniform", "workload", "measured")

# One row per policy of a run (kvwear.harness.pipeline.run; sweeps gather the rows of their points). A run without
# replay fills the simulation's and the projections' columns; the device's stay null. Byte counts
# are int64, ratios, seconds, dollars and lifetimes float64 (an infinite lifetime: nothing written).
# Version 2 added the drive and phase columns; a version-1 table reads with them null.
_V2 = ("drive_preset", "drive_scaling", "precondition", "precondition_host_bytes", "precondition_nand_bytes",
       "precondition_gc_bytes", "precondition_waf", "precondition_steady", "workload_passes", "workload_rounds",
       "waf_replay", "waf_transient", "waf_steady", "steady_state_reached", "steady_state_round", "waf_last_window",
       "waf_lifetime_source", "rating_source")

RESULTS = TableSpec(
    kind="results",
    version=2,
    defaults=tuple((name, None) for name in _V2),
    schema=pa.schema([
        pa.field("policy", pa.string(), nullable=False),
        *_cols(pa.string(), "model", "device"),
        *_cols(pa.int64(), "dram_bytes", "ssd_bytes"),
        pa.field("sample_fraction", pa.float64()),
        # the simulation (kvwear.harness.estimate.estimator.sim_row)
        pa.field("requests", pa.int64()),
        *_cols(pa.float64(), "span_s", "miss_ratio_tokens", "miss_ratio_chunks"),
        *_cols(pa.int64(), "ssd_write_bytes", "ssd_write_bytes_full", "ssd_write_bytes_linear", "ssd_read_bytes"),
        *_cols(pa.float64(), "linear_share_of_ssd_write_bytes", "hits_per_ssd_write", "frac_ssd_writes_hit",
               "load_latency_mean_s", "cost_recompute_per_1k", "cost_wear_per_1k", "cost_per_1k"),
        # the plan and the device's counts
        *_cols(pa.int64(), "plan_write_bytes", "device_write_bytes", "nand_write_bytes", "ebpf_write_bytes",
               "smart_write_bytes"),
        # WAFs and lifetime projections (kvwear.harness.estimate.estimator)
        *_cols(pa.float64(), "waf_measured", "waf_emulator", "waf_uniform"),
        pa.field("waf_uniform_source", pa.string()),
        pa.field("waf_workload", pa.float64()),
        pa.field("waf_workload_regime", pa.string()),
        *_cols(pa.float64(), "tbw_bytes", "host_bytes_per_day", "lifetime_days_waf1", "lifetime_days_uniform",
               "lifetime_days_workload", "lifetime_days_measured"),
        # FDP placement (kvwear.harness.plan.placement)
        pa.field("placement", pa.string()),
        pa.field("placement_carried", pa.bool_()),
        *_cols(pa.float64(), "waf_no_placement", "lifetime_days_no_placement"),
        pa.field("placement_unavailable", pa.string()),
        # P/E cycles of the full-size drive
        pa.field("raw_nand_bytes", pa.float64()),
        pa.field("pe_rating_cycles", pa.int64()),
        *_cols(pa.float64(), *(f"pe_cycles_per_day_{w}" for w in _PE), *(f"lifetime_days_pe_{w}" for w in _PE)),
        # the drive behind the measured WAF and the replay's phases (kvwear.harness.estimate.phases),
        # where the device reports them (sim): the preset and how it was scaled to the run's capacity;
        # what preconditioning (none | fill | steady) wrote, apart from the workload, and whether its
        # random rounds reached SNIA PTS's steady state; the passes and whole rounds the workload
        # played; its WAF over the whole replay, in the transient, in the first steady window and in
        # the last window; which of them waf_measured (the lifetime's WAF) is
        *_cols(pa.string(), "drive_preset", "drive_scaling", "precondition"),
        *_cols(pa.int64(), "precondition_host_bytes", "precondition_nand_bytes", "precondition_gc_bytes"),
        pa.field("precondition_waf", pa.float64()),
        pa.field("precondition_steady", pa.bool_()),
        *_cols(pa.int64(), "workload_passes", "workload_rounds"),
        *_cols(pa.float64(), "waf_replay", "waf_transient", "waf_steady"),
        pa.field("steady_state_reached", pa.bool_()),
        pa.field("steady_state_round", pa.int64()),
        pa.field("waf_last_window", pa.float64()),
        pa.field("waf_lifetime_source", pa.string()),
        # where the TBW budget's DWPD and years and the P/E rating came from (config, preset, default)
        pa.field("rating_source", pa.string()),
        # the cross-validation tally (kvwear.harness.estimate.estimator.Check kinds)
        *_cols(pa.int64(), "accounting_checks_passed", "accounting_checks_total", "model_checks_passed",
               "model_checks_total"),
        # gains over LRU (kvwear.harness.pipeline.run.placement_gains)
        *_cols(pa.float64(), "host_write_gain_vs_lru", "waf_gain_vs_lru", "lifetime_gain_vs_lru"),
    ]),
)
