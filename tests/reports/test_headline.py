"""The run report's headline and ranking over hand-made results rows and checks."""

from __future__ import annotations

import dataclasses

import pytest

from kvwear.harness.estimate.estimator import LIFETIME_MODEL_CHECK, Check
from kvwear.harness.estimate.schema import ResultsRow
from kvwear.policies.base import is_offline, resolve_label
from kvwear.reports.headline import auto_waf, headline, lifetime_inputs, rank, waf_basis
from kvwear.reports.run_report import ranking_table
from kvwear.units import format_lifetime


def _row(policy: str, miss: float, days: float | None) -> ResultsRow:
    return ResultsRow(policy, device="sim", miss_ratio_tokens=miss, lifetime_days_measured=days,
                      lifetime_days_waf1=days, tbw_bytes=467.2e12, ssd_bytes=256 * 10**9, span_s=1014.0,
                      host_bytes_per_day=1e12, sample_fraction=1.0, pe_rating_cycles=3000, raw_nand_bytes=2.74e11)


def _check(policy: str, rel: float) -> Check:
    c = Check.of(LIFETIME_MODEL_CHECK, 100.0, 100.0 * (1 + rel), "measured host bytes × WAF", 0.11, kind="model")
    return dataclasses.replace(c, policy=policy)


ROWS = [_row("lru", 0.17, 12.5), _row("lru-k", 0.31, 28.0), _row("type-aware", 0.47, 328.0),
        _row("gandalf,gamma=4.0", 0.205, 131.0), _row("belady", 0.17, 729.0)]
ROWS[0] = dataclasses.replace(ROWS[0], waf_workload_regime="on-demand")


def test_offline_is_asked_of_the_registry() -> None:
    assert is_offline("belady") and is_offline("belady,mode=min") and is_offline("belady:mode=min")
    assert not any(is_offline(p) for p in ("lru", "gandalf,gamma=4.0", "gandalf:budget=fixed,gamma=4", "lru-k,k=3"))
    assert resolve_label("gandalf,gamma=4.0").label == "gandalf,gamma=4.0"


def test_the_deployable_winner_its_gain_cost_and_the_bound() -> None:
    checks = [_check(r.policy, 0.0) for r in ROWS]
    ranked = rank(ROWS, checks, "measured")
    assert [x.row.policy for x in ranked] == ["type-aware", "gandalf,gamma=4.0", "lru-k", "lru", "belady"]
    assert [x.offline for x in ranked] == [False] * 4 + [True]
    lines = headline(ranked, checks, "measured")
    assert lines[0] == ("**type-aware** projects the longest SSD life of the deployable policies: **328 days** "
                        "(measured on the sim device), **26.2×** LRU write-back's 12 days, at a miss-ratio cost of "
                        "**+30.0 points** (0.4700 against 0.1700 of tokens recomputed).")
    assert lines[1].startswith("Within 5 points of LRU's miss ratio, **gandalf,gamma=4.0** projects the longest "
                               "life: **131 days**, **10.5×** LRU write-back's, at a miss-ratio cost of "
                               "**+3.5 points**")
    assert lines[2].startswith("Offline bound: **belady** is an oracle") and "**2.0 years**" in lines[2]
    assert lines[3] == ("The lifetime estimate (the workload WAF model, regime on-demand) **agreed with the drive's "
                        "measurement** "
                        "for all 5 policies, within 0.0% (tolerance ±11%).")


def test_a_model_miss_and_an_accounting_fault_are_said() -> None:
    checks = [_check("lru", 0.02), _check("type-aware", 0.87),
              dataclasses.replace(Check.of("host bytes", 100, 90, "fio", 0.01, kind="accounting"), policy="lru")]
    line = headline(rank(ROWS[:3], checks, "measured"), checks, "measured")[-1]
    assert "model, regime on-demand) agreed with the drive for 1 of 2 policies (tolerance ±11%); **it missed " \
        "type-aware by 87%**" in line
    assert "**Byte accounting: 1 of 1 checks FAILED**" in line


def test_lru_outliving_the_rest_and_no_measurement() -> None:
    rows = [_row("lru", 0.17, 50.0), _row("lru-k", 0.16, 20.0), _row("type-aware", 0.5, 10.0)]
    lines = headline(rank(rows, [], "measured"), [], "measured")
    assert lines[0].endswith("no other deployable policy outlives LRU write-back.")
    assert lines[-1] == "No drive measurement to check the lifetime estimate against."
    no_device = [dataclasses.replace(r, lifetime_days_measured=None) for r in rows]
    assert auto_waf(no_device) == "waf1" and auto_waf(rows) == "measured"


def test_lifetime_inputs_and_units() -> None:
    s = lifetime_inputs(ROWS)
    assert s.startswith("Lifetime = TBW ÷ (host writes per day × WAF). TBW 467.2 TB of the 256 GB SSD tier = "
                        "1,825 full-drive writes. Host writes per day: the bytes the 1,014 s trace wrote")
    assert "Rated P/E: 3,000 cycles of 274 GB raw NAND" in s
    # a tier under 1 GB (a loop device's) is said in its own unit, not as "0 GB"
    small = lifetime_inputs([dataclasses.replace(r, ssd_bytes=409_040_000) for r in ROWS])
    assert " of the 409.04 MB SSD tier = " in small


@pytest.mark.parametrize(("days", "long", "short"), [
    (729.0, "2.0 years", "2.0 y"), (365.0, "1.0 years", "1.0 y"), (364.4, "364 days", "364 d"),
    (12.5, "12 days", "12 d"), (5.3, "5.3 days", "5.3 d"), (1.0, "1 day", "1 d"), (0.25, "0.25 days", "0.25 d"),
    (40_000.0, "110 years", "110 y"), (float("inf"), "∞", "∞"), (None, "—", "—")])
def test_lifetime_unit(days: float | None, long: str, short: str) -> None:
    assert (format_lifetime(days), format_lifetime(days, short=True)) == (long, short)


def _in_service(row: ResultsRow, waf_transient: float, waf_steady: float | None, preset: str = "enterprise-tlc",
                precondition: str = "steady") -> ResultsRow:
    """A row as a drive played in service reports it: its preset, its preconditioning's own bytes,
    the replay's transient and steady-state WAF (the lifetime's, where reached)."""
    reached = waf_steady is not None
    return dataclasses.replace(
        row, drive_preset=preset, drive_scaling="268.8 GB: 26 units, OP 16.8 %", precondition=precondition,
        precondition_host_bytes=941 * 10**9 if precondition != "none" else 0,
        precondition_waf=1.93 if precondition != "none" else None, precondition_steady=precondition == "steady",
        waf_transient=waf_transient, waf_steady=waf_steady, steady_state_reached=reached,
        waf_last_window=waf_steady if reached else waf_transient * 0.9,
        waf_measured=waf_steady if reached else waf_transient * 0.9,
        waf_lifetime_source="steady state (rounds 3–7 of 12)" if reached else "last 5 rounds of 25: no steady state",
        rating_source="preset enterprise-tlc")


def test_each_measured_waf_names_its_drive_and_its_phase() -> None:
    rows = [_in_service(ROWS[0], 1.40, 1.16), _in_service(ROWS[2], 2.10, None), _in_service(ROWS[4], 2.0, 1.97)]
    ranked = rank(rows, [], "measured")
    lines = headline(ranked, [], "measured")
    assert lines[0] == (
        "**type-aware** projects the longest SSD life of the deployable policies: **328 days** (WAF 1.89 (no steady "
        "state reached) measured on the sim device, preset enterprise-tlc, preconditioned to steady state; transient "
        "WAF 2.10), **26.2×** LRU write-back's 12 days (WAF 1.16, transient 1.40), at a miss-ratio cost of "
        "**+30.0 points** (0.4700 against 0.1700 of tokens recomputed).")
    assert lines[-2] == (
        "Drive behind every measured WAF: preset enterprise-tlc (268.8 GB: 26 units, OP 16.8 %), preconditioned "
        "to steady state, which wrote 941 GB at WAF 1.93 before the workload (counted apart from it); 2 of 3 "
        "workloads reached their steady state.")
    assert "(ratings from preset enterprise-tlc)" in lifetime_inputs(rows)
    headings, table = ranking_table(ranked, "measured")
    cells = {r["cells"][1]: dict(zip(headings, r["cells"], strict=True)) for r in table}
    assert cells["lru"]["drive (preset, preconditioning)"] == "enterprise-tlc, steady"
    assert (cells["lru"]["WAF, transient"], cells["lru"]["WAF, steady state (* not reached)"]) == ("1.40", "1.16")
    assert lines[2].startswith("Offline bound: **belady**") and "**2.0 years** (WAF 1.97, transient 2.00)" in lines[2]
    assert waf_basis(rows[2], "measured") == ("steady-state WAF 1.97 measured on the sim device, preset "
                                              "enterprise-tlc, preconditioned to steady state; transient WAF 2.00")
    assert cells["type-aware"]["WAF, steady state (* not reached)"] == "1.89*"
    # two drives: each clause names its policies; a fresh drive says so
    mixed = [rows[0], _in_service(ROWS[2], 1.0, 1.0, preset="tiny-blocks", precondition="none")]
    line = headline(rank(mixed, [], "measured"), [], "measured")[-2]
    assert line.startswith("Drives behind the measured WAFs: type-aware on preset tiny-blocks (268.8 GB: 26 "
                           "units, OP 16.8 %), not preconditioned (fresh); the workload reached its steady state | "
                           "lru on preset enterprise-tlc (268.8 GB: 26 units, OP 16.8 %), preconditioned to steady "
                           "state, which wrote 941 GB")
    # a device that names no drive: no drive sentence, no drive or transient column
    assert not any(s.startswith("Drive") for s in headline(rank(ROWS, [], "measured"), [], "measured"))
    assert ranking_table(rank(ROWS, [], "measured"), "measured")[0][5] == "WAF (measured)"
