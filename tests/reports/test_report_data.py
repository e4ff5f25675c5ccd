"""The run report of a real run (the embedded FTL, three policies, the oracle among them): each
figure's plotted data held against the device's own counters and the stages' records, the
headline's numbers against the results rows, and the page in headless Chromium."""

from __future__ import annotations

import math
from html import unescape
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvwear.harness.devices.measurement import DeviceMeasurement
from kvwear.harness.estimate.estimator import LIFETIME_MODEL_CHECK, SECONDS_PER_DAY, Estimate, PlanRecord
from kvwear.harness.estimate.schema import read_results
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.run import StageTicks, counted, run
from kvwear.harness.pipeline.simulate import read_output
from kvwear.reports.run_report import build_run_report
from kvwear.units import format_lifetime
from tests.reports.browser import assert_reads_well

LABELS = ("lru", "type-aware", "belady")
SMALL = {
    "name": "figures", "model": "kimi-k3", "policies": list(LABELS),
    "workload": {"generator": "multi-round", "params": {"sessions": 6, "turns": 6}, "seed": 3},
    "tiers": {"dram": "2GB", "ssd": "12GB"},
}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "r"
    calls: list[tuple[str, int, int | None]] = []
    run(config_from_mapping(SMALL), out, progress=lambda s, d, t: calls.append((s, d, t)))
    (out / "progress.txt").write_text("\n".join(f"{s}\t{d}\t{t}" for s, d, t in calls))
    return out


def _device(run_dir: Path, label: str) -> DeviceMeasurement:
    return DeviceMeasurement.load(run_dir / "device" / label / "result.json")


def test_every_figure_plots_the_records(small_run: Path) -> None:
    files = build_run_report(small_run)
    figs = files.figures
    assert all(f is not None and not f.problems for f in figs.values()), {k: f and f.problems for k, f in figs.items()}
    rows = {r.policy: r for r in read_results(small_run / "results.parquet")}
    for label in LABELS:
        media = _device(small_run, label).replay.media
        assert media is not None and media.host_bytes > 0
        sim = read_output(small_run / "policies" / label, label).summary
        plan = PlanRecord.load(small_run / "plan" / label / "plan.json")
        # host and NAND bytes: the drive's own counters, and their ratio
        hn = figs["waf_and_nand"].data.set_index("policy").loc[label]     # type: ignore[union-attr]
        assert (hn["host_bytes"], hn["nand_bytes"]) == (media.host_bytes, media.media_bytes)
        assert hn["waf"] == pytest.approx(media.media_bytes / media.host_bytes)
        # the WAF over the replay: cumulative, ending at those counters
        t = figs["waf_over_time"].data                                      # type: ignore[union-attr]
        t = t[t["policy"] == label]
        assert (np.diff(t["host_bytes"]) >= 0).all() and (np.diff(t["nand_bytes"]) >= 0).all()
        assert (t["host_bytes"].iloc[-1], t["nand_bytes"].iloc[-1]) == (media.host_bytes, media.media_bytes)
        assert t["waf_cumulative"].to_numpy() == pytest.approx(t["nand_bytes"] / t["host_bytes"])
        # SSD writes by kind: the simulator's bytes, which the plan placed
        k = figs["ssd_writes_by_kind"].data.set_index("policy").loc[label]  # type: ignore[union-attr]
        assert (k["full_bytes"], k["linear_bytes"]) == (sim.ssd_write_bytes_full, sim.ssd_write_bytes_linear)
        assert k["full_bytes"] + k["linear_bytes"] == plan.counts.object_write_bytes
        # lifetime: TBW ÷ (the drive's host bytes per day × its WAF), from the records, not the row
        life = figs["lifetime_vs_miss"].data.set_index("policy").loc[label]  # type: ignore[union-attr]
        per_day = media.host_bytes * SECONDS_PER_DAY / sim.span_s
        tbw = rows[label].tbw_bytes
        assert tbw is not None
        assert life["lifetime_days"] == pytest.approx(tbw / (per_day * media.media_bytes / media.host_bytes))
        assert life["miss_ratio_tokens"] == sim.token_miss_ratio
        assert bool(life["offline"]) == (label == "belady")
        # latency and cost: the simulator's own totals
        c = figs["latency_and_cost"].data.set_index("policy").loc[label]   # type: ignore[union-attr]
        assert c["load_latency_s"] == pytest.approx(sim.mean_load_latency_s)
        assert c["recompute_usd_per_1k"] == pytest.approx(sim.gpu_usd / sim.requests * 1000)
        assert c["wear_usd_per_1k"] == pytest.approx(sim.ssd_wear_usd / sim.requests * 1000)
        # estimate vs measurement: only checks with a tolerance, no reference, their measured
        # values the drive's counts
        pm = figs["predicted_vs_measured"].data                              # type: ignore[union-attr]
        pm = pm[pm["policy"] == label]
        checks = Estimate.load(small_run / "estimate" / label / "crossval.json").checks
        want = [c for c in checks if c.kind != "reference" and c.tolerance > 0]
        assert [(c.name, c.source) for c in want] == list(zip(pm["name"], pm["source"], strict=True))
        assert set(pm["measured"][pm["name"] == "host bytes"]) == {media.host_bytes}
        assert set(pm["measured"][pm["name"] == "WAF (workload model)"]) == {media.media_bytes / media.host_bytes}


def test_headline_names_the_deployable_winner_and_the_bound(small_run: Path) -> None:
    html = build_run_report(small_run).html.read_text()
    rows = {r.policy: r for r in read_results(small_run / "results.parquet")}
    best = max((rows[p] for p in ("lru", "type-aware")), key=lambda r: r.lifetime_days_measured or 0)
    life = best.lifetime_days_measured
    assert life is not None and rows["lru"].lifetime_days_measured is not None
    head = unescape(html[html.index('id="headline"'):html.index("</ul>")])
    assert f"<strong>{best.policy}</strong> projects the longest SSD life of the deployable policies: " \
           f"<strong>{format_lifetime(life)}</strong>" in head
    gain = life / rows["lru"].lifetime_days_measured
    assert f"<strong>{gain:,.1f}×</strong> LRU write-back's {format_lifetime(rows['lru'].lifetime_days_measured)}" \
        in head
    assert "Offline bound: <strong>belady</strong> is an oracle" in head
    assert f"<strong>{format_lifetime(rows['belady'].lifetime_days_measured)}</strong>" in head
    model = [c for p in LABELS for c in Estimate.load(small_run / "estimate" / p / "crossval.json").checks
             if c.name == LIFETIME_MODEL_CHECK]
    worst = max(c.rel_error for c in model)
    assert all(c.passed for c in model)
    assert f"for all 3 policies, within {worst:.1%}" in head
    # the ranking: deployable first by lifetime, the oracle last and marked as a bound
    ranking = html[html.index('id="ranking"'):]
    ranking = ranking[:ranking.index("</table>")]
    order = [ranking.index(f">{p}<") if p != "belady" else ranking.index(">belady (offline bound)<")
             for p in (best.policy, "lru" if best.policy != "lru" else "type-aware", "belady")]
    assert order == sorted(order)
    # every lifetime in years, or days under a year: no bare day counts
    assert "(days)" not in html and not math.isnan(life)


def test_stage_progress_moves(small_run: Path) -> None:
    """Each stage announces itself at 0 before it works (its clock starts then), moves in its own
    units, and ends complete."""
    calls = [(s, int(d), None if t == "None" else int(t)) for s, d, t in
             (line.split("\t") for line in (small_run / "progress.txt").read_text().splitlines())]
    stages = list(dict.fromkeys(s for s, _, _ in calls))
    for stage in ("workload", "characterize", "report", *(f"{k}/{p}" for p in LABELS
                                                         for k in ("simulate", "plan", "device", "estimate"))):
        mine = [(d, t) for s, d, t in calls if s == stage]
        assert mine, (stage, stages)
        assert mine[0][0] == 0, (stage, mine)
        assert mine[-1][0] == mine[-1][1] and mine[-1][0] > 0, (stage, mine)
    for stage, steps in (("estimate/lru", [0, 1, 2, 3, 4]), ("report", [0, *range(13), 12])):
        assert [d for s, d, _ in calls if s == stage] == steps, stage
    # the units: requests characterized, ssd_ops rows planned, block_ops rows played
    units = {"characterize": pq.ParquetFile(small_run / "workload" / "requests.parquet").metadata.num_rows,
             "plan/lru": pq.ParquetFile(small_run / "policies" / "lru" / "ssd_ops.parquet").metadata.num_rows,
             "device/lru": pq.ParquetFile(small_run / "plan" / "lru" / "block_ops.parquet").metadata.num_rows}
    for stage, n in units.items():
        assert [t for s, _, t in calls if s == stage][-1] == n, stage


def test_counted_batches_advance_the_stage() -> None:
    """A stage read in batches moves batch by batch, and starts again at 0 on another pass."""
    seen: list[tuple[str, int, int | None]] = []
    tick = StageTicks(lambda s, d, t: seen.append((s, d, t)), "plan/x", 10)
    batches = [pa.record_batch({"a": list(range(n))}) for n in (4, 4, 2)]
    for _ in range(2):
        assert sum(b.num_rows for b in counted(iter(batches), tick)) == 10
    tick.finish()
    assert [d for _, d, _ in seen] == [0, 0, 4, 8, 10, 0, 4, 8, 10, 10]
    assert {t for _, _, t in seen} == {10}


def test_the_report_reads_well_in_chromium(small_run: Path) -> None:
    files = build_run_report(small_run)
    shots = assert_reads_well(files.html, "report-small-run", first_screen=("#headline", "#ranking"))
    assert len(shots[0].images) == 12 and all(i["ok"] for i in shots[0].images)
