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
RESULTS = TableSpec(
    kind="results",
    version=1,
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
        # the model's error measured in that regime (waf_model.REGIME_ERRORS, bench/waf_model.py):
        # its cases, the share within 10 % of the FTL, the median and 90th percentile of |model/FTL − 1|
        pa.field("waf_workload_regime_cases", pa.int64()),
        *_cols(pa.float64(), "waf_workload_regime_within_10pct", "waf_workload_regime_median_error",
               "waf_workload_regime_p90_error"),
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
        # the cross-validation tally (kvwear.harness.estimate.estimator.Check kinds)
        *_cols(pa.int64(), "accounting_checks_passed", "accounting_checks_total", "model_checks_passed",
               "model_checks_total"),
        # gains over LRU (kvwear.harness.pipeline.run.placement_gains)
        *_cols(pa.float64(), "host_write_gain_vs_lru", "waf_gain_vs_lru", "lifetime_gain_vs_lru"),
    ]),
    # added within version 1: a results file written before them reads them as null
    defaults=tuple((c, None) for c in ("waf_workload_regime_cases", "waf_workload_regime_within_10pct",
                                       "waf_workload_regime_median_error", "waf_workload_regime_p90_error")),
)
