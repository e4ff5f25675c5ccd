"""The main job on a drive in service: the sim device preconditions (none | fill | steady) with its
bytes kept apart from the workload's, plays the workload in whole passes until its own steady state,
splits transient from steady state; the run's defaults name that drive, the estimator expects
passes × the plan at the device, projects lifetime from the steady-state WAF, takes the preset's
ratings, and every WAF in the row and crossval.json names the preset and the preconditioning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvwear.emulator.presets import preset
from kvwear.errors import KvwearError
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.measurement import DeviceMeasurement, ReplayResult
from kvwear.harness.devices.sim import Sim, SimDevice, sim_drive
from kvwear.harness.estimate.estimator import Estimate, PlanRecord
from kvwear.harness.pipeline.config import RunConfig, config_from_mapping
from kvwear.harness.pipeline.run import drive_rating, run
from kvwear.harness.pipeline.sizing import with_run_options
from kvwear.harness.plan.schema import BLOCK_OPS
from tests.conftest import in_service

U = 4096
PAGES = 1 << 14                                 # a 64 MiB drive


def _plan(n_objects: int = 48, obj_pages: int = 512, seed: int = 3) -> pa.Table:
    """A cache's extents on the drive: objects written whole and trimmed when evicted, re-using
    the space (a small extent-layout plan)."""
    rng = np.random.default_rng(seed)
    slots = PAGES // obj_pages
    ops, offs, lens = [], [], []
    live: list[int] = []
    for _ in range(n_objects):
        if len(live) > slots // 2:
            victim = live.pop(int(rng.integers(0, len(live))))
            ops.append(2), offs.append(victim * obj_pages * U), lens.append(obj_pages * U)
        slot = int(rng.choice(sorted(set(range(slots)) - set(live))))
        live.append(slot)
        ops.append(0), offs.append(slot * obj_pages * U), lens.append(obj_pages * U)
    n = len(ops)
    return BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(n, dtype=np.float64),
        "op": pa.DictionaryArray.from_arrays(pa.array(np.array(ops, np.int8)), pa.array(["write", "read", "trim"])),
        "offset_bytes": np.array(offs, np.int64), "length_bytes": np.array(lens, np.int64),
        "obj_kind": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["full", "linear"])),
        "obj_id": np.arange(n, dtype=np.int64),
        "placement_handle": pa.array(np.zeros(n, np.int8)),
    }))


def _spec(**options: object) -> DeviceSpec:
    return DeviceSpec("sim", "", PAGES * U, {"preset": "tiny-blocks", **options})


def test_preconditioning_bytes_are_kept_apart_and_the_workload_plays_until_steady(tmp_path: Path) -> None:
    plan = _plan()
    ops = plan.column("op").cast(pa.string()).to_pylist()
    plan_bytes = sum(n for o, n in zip(ops, plan.column("length_bytes").to_pylist(), strict=True) if o == "write")
    dev = SimDevice(_spec(precondition="steady"), tmp_path / "d")
    res = dev.replay(plan, tmp_path / "d")
    assert dev.ftl is not None
    pre, work = res.details["precondition"], res.details["workload"]
    passes = work["passes"]
    # the workload's counts: exactly passes × the plan; preconditioning's: apart, and the two make the drive's
    assert res.write_bytes == passes * plan_bytes == passes * work["plan_write_bytes_per_pass"]
    assert res.trim_bytes == passes * work["plan_trim_bytes_per_pass"] > 0
    drive = dev.ftl.counters()
    assert drive.host_bytes == pre["host_bytes"] + res.write_bytes
    assert drive.nand_bytes == pre["nand_bytes"] + (res.nand_write_bytes or 0)
    assert pre["mode"] == "steady" and pre["fill_host_bytes"] == 2 * PAGES * U
    assert pre["steady_state_reached"] and pre["random"]["rounds"] >= 6
    # played until its own steady state (rounds of 1/4 of the drive), in whole passes
    ph = work["phases"]
    assert ph["steady_state_reached"] and work["stopped"].startswith("steady state at round")
    assert sum(ph["host_bytes_per_round"]) + ph["partial_round"]["host_bytes"] == res.write_bytes
    assert ph["rounds"] >= 5 and passes > 1
    assert res.details["drive"]["preset"] == "tiny-blocks"
    # the typed record the estimator reads says the same
    assert res.phases is not None and res.phases.preset == "tiny-blocks" and res.phases.passes == passes
    assert res.phases.precondition_bytes is not None and res.phases.precondition_bytes.host_bytes == pre["host_bytes"]
    assert res.phases.steady_reached and res.phases.rounds == ph["rounds"]


def test_fresh_drive_plays_once_and_steady_workload_can_be_asked_for(tmp_path: Path) -> None:
    plan = _plan()
    fob = SimDevice(_spec(), tmp_path / "a").replay(plan, tmp_path / "a")
    assert fob.details["workload"]["passes"] == 1 and fob.details["precondition"] == {"mode": "none"}
    assert fob.details["workload"]["stopped"] == "one pass"
    short = _plan(n_objects=12)                         # 1.5 rounds a pass: steady takes several passes
    looped = SimDevice(_spec(steady_workload=True), tmp_path / "b").replay(short, tmp_path / "b")
    assert looped.details["workload"]["passes"] > 1
    filled = SimDevice(_spec(precondition="fill"), tmp_path / "c").replay(plan, tmp_path / "c")
    assert filled.details["precondition"]["host_bytes"] == 2 * PAGES * U
    assert filled.details["precondition"]["random"] is None


def test_a_preconditioned_drive_is_reused_identically(tmp_path: Path) -> None:
    plan = _plan()
    spec = _spec(precondition="steady", precondition_seed=7)
    a = SimDevice(spec, tmp_path / "a").replay(plan, tmp_path / "a")
    b = SimDevice(spec, tmp_path / "b").replay(plan, tmp_path / "b")
    assert b.details["precondition"]["reused"] is True

    def pre(r: ReplayResult) -> dict[str, object]:
        return {k: v for k, v in r.details["precondition"].items() if k != "reused"}

    assert pre(a) == pre(b)
    assert (a.write_bytes, a.nand_write_bytes, a.details["workload"], a.phases) == (
        b.write_bytes, b.nand_write_bytes, b.details["workload"], b.phases)


def test_a_closed_devices_drive_is_overwritten_by_the_next_copy(tmp_path: Path) -> None:
    # A run's policies play one after another: the next device's copy of the kept drive goes into
    # the memory of the previous device's (played, then closed) drive, and plays the same.
    plan = _plan()
    spec = _spec(precondition="steady", precondition_seed=7)
    first = SimDevice(spec, tmp_path / "a")
    a = first.replay(plan, tmp_path / "a")
    played = first.ftl
    assert played is not None
    maps = played._l2p
    first.close()
    second = SimDevice(spec, tmp_path / "b")
    b = second.replay(plan, tmp_path / "b")
    assert second.ftl is played and second.ftl._l2p is maps        # the same memory, overwritten
    assert (a.write_bytes, a.nand_write_bytes, a.details["workload"], a.phases) == (
        b.write_bytes, b.nand_write_bytes, b.details["workload"], b.phases)
    played.check_invariants()
    second.close()


def test_timeline_counts_the_workload_per_interval(tmp_path: Path) -> None:
    res = SimDevice(_spec(precondition="fill"), tmp_path / "d").replay(_plan(), tmp_path / "d")
    iv = pq.read_table(res.intervals_path).to_pydict()
    # cumulative from the replay's start (preconditioning's bytes in none), ending at its totals
    assert iv["host_bytes"][-1] == res.write_bytes and iv["nand_bytes"][-1] == res.nand_write_bytes
    assert (np.diff(iv["host_bytes"]) >= 0).all() and iv["host_bytes"][0] > 0
    assert iv["host_pages"][-1] * U == iv["host_bytes"][-1]


@pytest.mark.parametrize("options,message", [
    ({"preset": "enterprise-mlc"}, "enterprise-tlc"),
    ({"preset": "femu", "geometry": "femu", "devsz_mb": 64}, "preset and geometry=femu"),
    ({"precondition": "always"}, "none, fill, steady"),
    ({"ss_window_rounds": 6, "ss_max_rounds": 5}, "ss_max_rounds"),
])
def test_bad_drive_options_are_refused_by_name(options: dict[str, object], message: str) -> None:
    with pytest.raises(KvwearError, match=message):
        sim_drive(DeviceSpec("sim", "", PAGES * U, options))


def test_the_main_job_plays_the_typical_drive_in_service_unless_told_otherwise() -> None:
    with in_service():
        cfg = with_run_options(RunConfig())
        assert dict(cfg.device.options) == {"preset": "enterprise-tlc", "precondition": "steady"}
        fob = with_run_options(config_from_mapping({"device": {"options": {"precondition": "none"}}}))
        assert dict(fob.device.options) == {"preset": "enterprise-tlc", "precondition": "none"}
        femu = {"geometry": "femu", "devsz_mb": 192}
        assert "preset" not in with_run_options(config_from_mapping({"device": {"options": femu}})).device.options
        assert Sim.run_options({"preset": "qlc"})["preset"] == "qlc"
        # other backends get nothing they would refuse
        file = config_from_mapping({"device": {"kind": "file", "target": "/x"}})
        assert dict(with_run_options(file).device.options) == {}


def test_ratings_come_from_the_config_else_the_preset_else_the_defaults() -> None:
    cap = 300 * 10**9
    tlc = config_from_mapping({"device": {"options": {"preset": "enterprise-tlc"}}})
    r = drive_rating(tlc, cap)
    assert (r.dwpd, r.warranty_years, r.pe_cycles) == (1.0, 5.0, 3000) and "PM9D3a" in r.source
    qlc = config_from_mapping({"device": {"options": {"preset": "qlc"}}})
    q = drive_rating(qlc, cap)
    assert (q.dwpd, q.pe_cycles) == (0.9, 1600)
    mine = config_from_mapping({"device": {"options": {"preset": "qlc"}}, "estimate": {"dwpd": 3}})
    m = drive_rating(mine, cap)
    assert m.dwpd == 3 and m.pe_cycles == 1600 and m.source.startswith("3 DWPD (config); 5 years, 1,600 P/E")
    bare = drive_rating(config_from_mapping({"device": {"options": {"preset": "tiny-blocks"}}}), cap)
    assert (bare.dwpd, bare.warranty_years, bare.pe_cycles) == (1.0, 5.0, 3000) and "default" in bare.source
    assert preset("enterprise-tlc").ratings is not None


SMALL = {
    "name": "svc", "model": "kimi-k3", "policies": ["lru", "belady"],
    "workload": {"generator": "multi-round", "params": {"sessions": 6, "turns": 6}, "seed": 3},
    "tiers": {"dram": "2GB", "ssd": "6GB"},
    # the in-service path (preconditioned, played until steady) on a drive small enough for a test
    "device": {"options": {"preset": "tiny-blocks", "precondition": "steady"}},
}


@pytest.fixture(scope="module")
def svc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("svc") / "r"
    run(config_from_mapping(SMALL), out)
    return out


@pytest.mark.parametrize("label", ["lru", "belady"])
def test_run_accounts_every_pass_and_projects_lifetime_from_the_steady_state(svc_run: Path, label: str) -> None:
    plan = PlanRecord.load(svc_run / "plan" / label / "plan.json").counts
    replay = DeviceMeasurement.load(svc_run / "device" / label / "result.json").replay
    cv = Estimate.load(svc_run / "estimate" / label / "crossval.json")
    row = cv.row
    assert replay.phases is not None
    passes = replay.phases.passes
    assert replay.write_bytes == passes * plan.aligned_write_bytes
    host = [c for c in cv.checks if c.name == "host bytes"]
    assert host and all(c.passed for c in cv.checks if c.kind == "accounting")
    assert host[0].predicted == passes * plan.aligned_write_bytes
    # the row names the drive and separates the phases; the lifetime uses the steady-state WAF
    assert row.drive_preset == "tiny-blocks" and row.precondition == "steady"
    assert row.workload_passes == passes and (row.precondition_host_bytes or 0) > 0
    assert row.waf_replay == pytest.approx(replay.waf)
    assert row.waf_measured is not None and row.waf_lifetime_source is not None
    # the steady state: every whole round after the MSER-cut transient, its WAF the lifetime's,
    # and the transient and steady spans partition the whole rounds (PTS's criterion only says
    # whether it was reached)
    ph = replay.phases
    if ph.rounds >= ph.window_rounds:
        assert ph.steady is not None and ph.steady_from_round == row.steady_from_round is not None
        assert ph.transient.rounds == ph.steady_from_round and ph.steady.rounds == ph.rounds - ph.steady_from_round
        assert row.waf_measured == pytest.approx(row.waf_steady)
        assert row.waf_lifetime_source.startswith("steady state") and "MSER-5" in row.waf_lifetime_source
    # lifetime per day from one pass's bytes, not passes × (the trace's duration is one pass)
    assert row.tbw_bytes is not None and row.host_bytes_per_day is not None
    assert row.lifetime_days_measured == pytest.approx(
        row.tbw_bytes / (row.host_bytes_per_day * row.waf_measured), rel=0.02)
    # every measured WAF's check names the drive and the preconditioning behind it
    waf_checks = [c for c in cv.checks if c.name == "WAF (uniform reference)"]
    assert waf_checks and all("preset tiny-blocks, preconditioned: steady" in c.note for c in waf_checks)
    # the configured drive is what config.toml records
    assert '"precondition" = "steady"' in (svc_run / "config.toml").read_text()

