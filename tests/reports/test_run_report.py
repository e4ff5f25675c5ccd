"""The run report over a hand-made run directory: every figure drawn, inlined and loadable."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import matplotlib.ticker
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvwear.errors import KvwearError
from kvwear.harness.devices.measurement import CaptureCount, DeviceMeasurement, ReplayResult, TrimCount, TrimMode
from kvwear.harness.estimate.estimator import Check, Estimate
from kvwear.harness.estimate.schema import RESULTS, ResultsRow
from kvwear.harness.pipeline.run import results_table
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.reports.figures import pareto_mask
from kvwear.reports.run_report import build_run_report, device_notes, placement_section
from kvwear.tables import write_table
from tests.reports.browser import need_chromium
from tests.reports.chromium import image_status

GIB = 2**30


def _make_run(root: Path) -> None:
    cols = {
        "policy": ["lru", "gandalf:gamma=1", "gandalf:gamma=8"],
        "miss_ratio_tokens": [0.30, 0.31, 0.33], "miss_ratio_chunks": [0.29, 0.30, 0.32],
        "ssd_write_bytes_full": [2 * GIB, GIB, GIB // 2], "ssd_write_bytes_linear": [8 * GIB, 2 * GIB, GIB],
        "frac_ssd_writes_hit": [0.1, 0.3, 0.5], "hits_per_ssd_write": [0.2, 0.6, 1.1],
        "device_write_bytes": [10 * GIB, 3 * GIB, 3 * GIB // 2], "nand_write_bytes": [25 * GIB, 6 * GIB, 3 * GIB],
        "waf_measured": [2.5, 2.0, 2.0], "waf_uniform": [2.2, 2.2, 2.2], "waf_workload": [2.4, 2.1, 2.0],
        "lifetime_days_waf1": [100.0, 330.0, 660.0], "lifetime_days_uniform": [45.0, 150.0, 300.0],
        "lifetime_days_workload": [42.0, 157.0, 330.0],
        "lifetime_days_measured": [40.0, 165.0, 330.0],
        "load_latency_mean_s": [0.01, 0.011, 0.012], "cost_recompute_per_1k": [1.0, 1.1, 1.2],
        "cost_wear_per_1k": [0.5, 0.1, 0.05], "cost_per_1k": [1.5, 1.2, 1.25],
    }
    rows = [ResultsRow(**{k: v[i] for k, v in cols.items()}) for i in range(3)]
    root.mkdir(parents=True)
    write_table(RESULTS, results_table(rows), root / "results.parquet")
    (root / "manifest.json").write_text(json.dumps({"config": {"name": "t", "device": {"kind": "sim"}}}))
    for label, err in [("lru", 0.01), ("gandalf_gamma=8", 0.2)]:
        d = root / "estimate" / label
        d.mkdir(parents=True)
        check = dataclasses.replace(Check.of("host bytes", 100, 100 * (1 + err), "kvwear-ftl", 0.05,
                                             kind="accounting"), policy=label)
        Estimate(label, (check,), rows[0]).dump(d / "crossval.json")
        t = root / "device" / label
        t.mkdir(parents=True)
        pq.write_table(pa.table({"host_bytes": [GIB, 2 * GIB], "waf_cumulative": [1.0, 2.0]}), t / "timeline.parquet")


def test_pareto_mask() -> None:
    import numpy as np
    keep = pareto_mask(np.array([0.1, 0.2, 0.15, 0.3]), np.array([10.0, 20.0, 5.0, 20.0]))
    assert keep.tolist() == [True, True, False, False]


def test_report_files_and_contents(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _make_run(run)
    files = build_run_report(run)
    assert all(f is not None and f.path.stat().st_size > 1000 and not f.problems for f in files.figures.values())
    html = files.html.read_text()
    assert html.count("data:image/png;base64,") == 6
    assert "FAIL" in html and "pass" in html            # one check passes, one fails
    assert "byte accounting: 1 of 2 checks within tolerance." in html and "Models against" not in html
    assert "the run did not characterize its workload" in html
    assert "gandalf:gamma=8" in html
    # the full results: the P/E table, whose fields no row holds, is left out
    assert "All results (22 columns, in 3 tables)" in html and "P/E cycles of the full-size drive" not in html
    md = files.markdown.read_text()
    assert "| lru |" in md and "![lifetime_vs_miss](figures/lifetime_vs_miss.png)" in md
    assert pd.read_csv(files.csv)["policy"].tolist() == ["lru", "gandalf:gamma=1", "gandalf:gamma=8"]


def test_device_notes_say_which_tracer_ran_and_whether_it_drained(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _make_run(run)
    for label, drained in (("lru", True), ("gandalf_gamma=8", False)):
        cap = CaptureCount("bpftrace", 10, 0, {"write": 4096}, {"write": 10}, 0, 1, drained, "t.parquet")
        replay = ReplayResult("sim", "fio-3.33", 4096, 0, 0, 10, 0, 1.0, TrimCount(TrimMode.NONE, 0))
        m = DeviceMeasurement(replay, DeviceIdentity("block", "/dev/loop9"), cap)
        m.dump(run / "device" / label / "result.json")
    notes = device_notes(run)
    assert notes[0] == "gandalf_gamma=8: eBPF capture by bpftrace: 10 requests, 0 lost events, 1 without " \
        "completion. The tracer could not confirm it had written out its last events before it stopped " \
        "(flush barrier timed out): requests missing at the end are uncounted losses."
    assert notes[1] == "lru: eBPF capture by bpftrace: 10 requests, 0 lost events, 1 without completion."


def test_missing_columns_say_why(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_table(RESULTS, results_table([ResultsRow("lru", miss_ratio_tokens=0.5)]), run / "results.parquet")
    files = build_run_report(run)
    html = files.html.read_text()
    assert "not drawn" in html and "the device does not report NAND writes" in html
    assert "All results (8 columns, in 1 table)" in html and "<h3>Device</h3>" not in html


def test_every_figure_loads_in_chromium(tmp_path: Path) -> None:
    need_chromium()
    run = tmp_path / "run"
    _make_run(run)
    files = build_run_report(run)
    status = image_status(files.html)
    assert len(status) == 6
    assert all(s["ok"] and s["naturalWidth"] > 100 for s in status), status


def test_unfinished_run_is_named(tmp_path: Path) -> None:
    """`kvwear report` on a run that never wrote results says so instead of a bare FileNotFoundError."""
    (tmp_path / "config.toml").write_text("")
    with pytest.raises(KvwearError, match=r"no results\.parquet.*--resume"):
        build_run_report(tmp_path)


def test_lifetime_figures_pick_the_named_waf(tmp_path: Path) -> None:
    """auto: the measured WAF, else the workload model's; a named WAF the results lack is refused,
    not silently replaced."""
    import pytest

    from kvwear.errors import KvwearError
    from kvwear.reports.sweep_report import lifetime_col

    df = pd.DataFrame({"device": ["sim", "sim"], "lifetime_days_waf1": [3.0, 4.0],
                       "lifetime_days_uniform": [1.0, 1.5], "lifetime_days_workload": [2.0, 3.0],
                       "lifetime_days_measured": [2.1, 2.9]})
    assert lifetime_col(df) == "lifetime_days_measured"
    assert lifetime_col(df.assign(lifetime_days_measured=None)) == "lifetime_days_workload"
    assert lifetime_col(df, "uniform") == "lifetime_days_uniform"
    assert lifetime_col(df.drop(columns=["lifetime_days_workload"])) == "lifetime_days_measured"
    with pytest.raises(KvwearError, match="no lifetime under WAF 'workload'"):
        lifetime_col(df.assign(lifetime_days_workload=None), "workload")
    with pytest.raises(KvwearError, match="unknown WAF"):
        lifetime_col(df, "gandalf")
    run = tmp_path / "run"
    _make_run(run)
    html = build_run_report(run, waf="uniform").html.read_text()
    assert "log axis, the uniform-random reference WAF" in html


def test_placement_section_says_why_a_drive_took_no_handles() -> None:
    """A block: drive that failed the FDP gate: the note names the gate's reason; a device that
    never carries handles keeps the generic note."""
    from kvwear.harness.estimate.estimator import PlanBytes, placement_result

    plan = PlanBytes(object_write_bytes=12, aligned_write_bytes=12, trim_bytes=0, placement="kind",
                     write_bytes_by_handle=(8, 4))
    replay = ReplayResult("block:/dev/loop3", "fio-3.33", 12, 0, 0, 1, 0, 0.1, TrimCount(TrimMode.NONE, 0))
    ident = DeviceIdentity("block", "/dev/loop3")
    dropped = dataclasses.replace(replay, placement_unavailable="/dev/loop3 is not an NVMe namespace")
    row, checks = placement_result(plan, DeviceMeasurement(dropped, ident), 1.25)
    assert (row["placement_carried"], row["waf_no_placement"], checks) == (False, 1.25, [])
    df = pd.DataFrame([{"policy": "lru", **row, "waf_measured": 1.25}])
    notes = placement_section(df)[2]
    assert any(n.startswith("This drive could not take placement handles (/dev/loop3 is not an NVMe namespace)")
               for n in notes), notes
    row, _ = placement_result(plan, DeviceMeasurement(replay, ident), 1.25)
    notes = placement_section(pd.DataFrame([{"policy": "lru", **row, "waf_measured": 1.25}]))[2]
    assert any(n.startswith("This device cannot carry placement handles") for n in notes), notes


def test_sweep_lifetime_figure_with_a_panel_that_never_wrote(tmp_path: Path) -> None:
    """A grid cell where no point wrote to the SSD has only unbounded (inf) lifetimes: the figure
    says so in that panel instead of failing on an empty log axis (issue #12's small sweep example)."""
    from kvwear.reports.sweep_report import fig_lifetime_vs_miss

    inf = float("inf")
    df = pd.DataFrame({"axis_trace": [""] * 4, "axis_model": ["kimi-k3"] * 4,
                       "axis_dram_bytes": ["4000000000"] * 4, "axis_ssd_bytes": ["16000000000", "16000000000",
                                                                                 "12000000000", "12000000000"],
                       "axis_policy": ["lru", "gandalf:gamma=4", "lru", "gandalf:gamma=4"],
                       "miss_ratio_tokens": [0.30, 0.35, 0.31, 0.36],
                       "lifetime_days_workload": [8.5, inf, inf, inf]})
    fig = fig_lifetime_vs_miss(df, tmp_path / "f.png", "lifetime_days_workload")
    assert fig is not None and fig.path.stat().st_size > 0 and not fig.problems
    # the cell that never wrote gets a sentence, not an empty panel; the other draws its finite point
    assert fig.notes == ("synthetic · kimi-k3 · DRAM 4 GB · SSD 12 GB: no point wrote to the SSD, so every "
                         "lifetime is unbounded (no panel).",)
    assert fig.data["lifetime_days"].tolist() == [8.5] and fig.data["cell"].str.contains("SSD 16 GB").all()
    everything_unbounded = fig_lifetime_vs_miss(df.assign(lifetime_days_workload=inf), tmp_path / "g.png",
                                                "lifetime_days_workload")
    assert everything_unbounded is None


def test_sweep_model_figure_draws_unbounded_lifetimes_without_warnings(tmp_path: Path) -> None:
    """The best configuration of a family that never wrote has an inf lifetime: the model figure
    draws it as a labelled hatched bar, not an inf height (matplotlib warned "invalid value
    encountered in dot" on every sweep report with such a cell), and a panel of only unbounded
    lifetimes is drawn too."""
    import warnings

    from kvwear.reports.sweep_report import fig_models

    inf = float("inf")
    rows = [{"axis_trace": "t", "axis_model": m, "axis_dram_bytes": 1e9, "axis_ssd_bytes": 2e9,
             "axis_policy": p, "miss_ratio_tokens": 0.2, "lifetime_days_x": life}
            for m in ("kimi-k3", "qwen3.5-27b") for p, life in (("lru", 90.0), ("gandalf:gamma=4", inf))]
    for case, df in (("mixed", pd.DataFrame(rows)),
                     ("all unbounded", pd.DataFrame(rows).assign(lifetime_days_x=inf))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fig = fig_models(df, tmp_path / f"{case}.png", "lifetime_days_x")
        assert fig is not None and fig.path.stat().st_size > 0 and not fig.problems, case


def test_save_figure_keeps_text_inside_and_ticks_apart(tmp_path: Path) -> None:
    """A title wider than its figure is reported (the old predicted-vs-measured title was cut to
    '…green: within t'); tick labels that overlap ('0.19000.19250.1950') are thinned until apart."""
    import matplotlib.pyplot as plt

    from kvwear.reports.figures import save_figure

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.set_title("Predicted vs measured (green: within tolerance, red: outside it, black: the tolerance)")
    cut = save_figure(fig, tmp_path / "cut.png")
    assert cut.problems and "text cut off at the" in cut.problems[0]

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0.19, 0.21], [1, 2])
    ax.set_xticks(np.linspace(0.19, 0.21, 9), [f"{v:.4f}" for v in np.linspace(0.19, 0.21, 9)])
    fixed_labels = save_figure(fig, tmp_path / "fixed.png")     # categories the figure chose: never dropped
    assert fixed_labels.problems == ("a panel: the x axis' labels overlap",)

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0.19, 0.21], [1, 2])
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=12))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.4f"))
    thinned = save_figure(fig, tmp_path / "thinned.png")
    assert thinned.problems == ()


def test_a_bar_label_stays_inside_its_axes(tmp_path: Path) -> None:
    """The tallest bar's value label gets room under the axes' top instead of running into the
    title (a loop-device fs run's '3% hit' did), and a label that does run past is a layout problem."""
    import matplotlib.pyplot as plt

    from kvwear.reports.figures import _labels_past_axes, ssd_writes_by_kind

    df = pd.DataFrame({"policy": ["lru", "type-aware"], "ssd_write_bytes_full": [33.7 * 2**30, 76.5 * 2**30],
                       "ssd_write_bytes_linear": [0.0, 0.0], "frac_ssd_writes_hit": [0.0, 0.03]})
    fig = ssd_writes_by_kind(df, tmp_path / "kind.png")
    assert fig is not None and fig.problems == ()
    f, ax = plt.subplots()
    ax.bar([0], [1.0])
    ax.set_ylim(0, 1.0)
    ax.annotate("100% hit", (0, 1.0), ha="center", va="bottom")
    f.canvas.draw()
    assert _labels_past_axes(f) == ["figure: label '100% hit' past the axes"]
    plt.close(f)
