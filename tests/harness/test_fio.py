"""kvwear.harness.devices.fio_runner: the JSON parser on recorded fio 3.33 reports, job/iolog builders, plan validation,
and real fio runs on files in a temp dir (fio is installed here; no root needed)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.errors import InputError
from kvwear.harness.devices import fio_runner as fiolib
from kvwear.harness.devices.fio_iolog import export_iolog_v3
from kvwear.harness.plan.schema import BLOCK_OPS

needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")


def plan_table(rows: list[tuple[float, str, int, int]]) -> pa.Table:
    t, op, off, ln = zip(*rows, strict=True) if rows else ((), (), (), ())
    return BLOCK_OPS.conform(pa.table({
        "t_s": pa.array(t, pa.float64()), "op": pa.array(op, pa.string()),
        "offset_bytes": pa.array(off, pa.int64()), "length_bytes": pa.array(ln, pa.int64()),
        "obj_kind": pa.array(["full"] * len(t)), "obj_id": pa.array(range(len(t)), pa.int64()),
    }))


# -- parser on recorded reports ------------------------------------------------------------------


@pytest.mark.parametrize("device", ["qemu-7.2-nvme", "femu-bbssd"])
def test_parse_recorded_fill_and_random(fixtures_dir: Path, device: str) -> None:
    fill = fiolib.parse_fio_json((fixtures_dir / device / "fio_fill_json.json").read_bytes())
    assert fill.fio_version == "fio-3.33"
    assert len(fill.jobs) == 1 and fill.jobs[0].name == "fill"
    # The fill wrote the whole 192 MiB (FEMU) / 256 MiB (QEMU) namespace in 128 KiB requests.
    assert fill.write.io_bytes == fill.write.total_ios * 128 * 1024
    assert fill.read.io_bytes == 0 and fill.trim.total_ios == 0
    assert fill.jobs[0].options["bs"] == "128k"
    assert fill.errors == {}
    rand = fiolib.parse_fio_json((fixtures_dir / device / "fio_rand_json.json").read_bytes())
    opts = rand.jobs[0].options
    assert rand.write.io_bytes == int(opts["io_size"]) == rand.write.total_ios * 4096
    assert rand.write.clat_samples == rand.write.total_ios
    assert rand.write.clat_percentiles_ns[50.0] <= rand.write.clat_percentiles_ns[99.0]
    assert rand.write.iops > 0 and rand.write.bw_bytes_per_s > 0 and rand.runtime_ms > 0


def test_parse_exact_numbers_qemu(fixtures_dir: Path) -> None:
    s = fiolib.parse_fio_json((fixtures_dir / "qemu-7.2-nvme" / "fio_rand_json.json").read_text())
    w = s.write
    assert (w.io_bytes, w.io_kbytes, w.total_ios, w.runtime_ms) == (536870912, 524288, 131072, 25807)
    assert w.bw_bytes_per_s == 20803305 and w.iops == pytest.approx(5078.932073)
    assert w.clat_percentiles_ns[99.99] == 2244608


def test_parse_tolerates_leading_warnings_and_reports_bad_json(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "femu-bbssd" / "fio_fill_json.json").read_text()
    s = fiolib.parse_fio_json("fio: some warning\n" + text)
    assert s.write.total_ios == 1536
    with pytest.raises(InputError, match=r"x\.json:\d+: invalid JSON"):
        fiolib.parse_fio_json(text[:500], "x.json")
    with pytest.raises(InputError, match="no JSON object"):
        fiolib.parse_fio_json("fio: engine libaio not loadable\n", "run")
    broken = text.replace('"total_ios" : 1536', '"total_ios" : "many"', 1)
    with pytest.raises(InputError, match=r"field 'jobs\[0\]\.write\.total_ios'"):
        fiolib.parse_fio_json(broken, "y.json")


def test_parse_version() -> None:
    assert fiolib.parse_fio_version(b"fio-3.33\n") == "fio-3.33"
    assert fiolib.version_tuple("fio-3.33") == (3, 33)
    assert not fiolib.fio_replays_trim("fio-3.33")
    with pytest.raises(InputError):
        fiolib.parse_fio_version("command not found")


# -- builders ------------------------------------------------------------------------------------


def test_replay_job_file_text() -> None:
    fast = fiolib.replay_job("/w/r.iolog", "/dev/loop7", ioengine="io_uring", iodepth=8)
    timed = fiolib.replay_job("/w/r.iolog", "/dev/loop7", timed=True, name="timed")
    text = fiolib.render_job_file([fast, timed])
    assert text.splitlines()[:7] == [
        "[replay]", "direct=1", "ioengine=io_uring", "iodepth=8", "read_iolog=/w/r.iolog",
        "replay_redirect=/dev/loop7", "replay_no_stall=1"]
    assert "replay_no_stall=0" in text and "stonewall" in text
    assert "read_iolog_chunked" not in text
    with pytest.raises(Exception, match="ioengine"):
        fiolib.replay_job("x", "y", ioengine="posixaio")


def test_steady_state_job_options() -> None:
    job = fiolib.steady_state_job("/dev/x", 1 << 30, criterion="iops_slope:5%", ss_dur_s=30, ss_ramp_s=5)
    o = job.options
    assert (o["ss"], o["ss_dur"], o["ss_ramp"], o["rw"], o["bs"], o["size"]) == (
        "iops_slope:5%", 30, 5, "randwrite", 4096, 1 << 30)
    assert "time_based" in fiolib.render_job_file([job]).splitlines()


def test_iolog_v3_text_and_stats(tmp_path: Path) -> None:
    plan = plan_table([(1.5, "write", 0, 8192), (1.5005, "read", 8192, 4096), (2.0, "trim", 0, 4096)])
    st = export_iolog_v3(plan, tmp_path / "a.iolog", filename="dev")
    assert (tmp_path / "a.iolog").read_text().splitlines() == [
        "fio version 3 iolog", "0 dev add", "0 dev open", "0 dev write 0 8192", "500 dev read 8192 4096",
        "500000 dev trim 0 4096", "500000 dev close"]
    assert (st.write_ios, st.write_bytes, st.read_ios, st.read_bytes, st.trim_ios, st.trim_bytes) == (
        1, 8192, 1, 4096, 1, 4096)
    st2 = export_iolog_v3(plan, tmp_path / "b.iolog", include_trims=False)
    assert st2.trim_ios == 0 and "trim" not in (tmp_path / "b.iolog").read_text()


def test_validate_plan_names_the_row() -> None:
    ok = plan_table([(0.0, "write", 0, 4096), (0.1, "write", 4096 * 255, 4096)])
    fiolib.validate_plan(ok, 4096 * 256, block_bytes=4096)
    over = plan_table([(0.0, "write", 0, 4096), (0.1, "write", 4096 * 256, 4096)])
    with pytest.raises(InputError, match=r"plan:2: field 'offset_bytes': I/O ends beyond"):
        fiolib.validate_plan(over, 4096 * 256, source="plan")
    with pytest.raises(InputError, match=r"field 'length_bytes'.*multiple"):
        fiolib.validate_plan(plan_table([(0.0, "write", 0, 1000)]), 1 << 20)
    with pytest.raises(InputError, match="negative"):
        fiolib.validate_plan(plan_table([(0.0, "read", -512, 512)]), 1 << 20)
    with pytest.raises(InputError, match="unknown op"):
        fiolib.validate_plan(plan_table([(0.0, "erase", 0, 512)]), 1 << 20)


# -- real fio ------------------------------------------------------------------------------------


@needs_fio
def test_fio_version_real() -> None:
    assert fiolib.version_tuple(fiolib.fio_version()) >= (3,)


@needs_fio
@pytest.mark.parametrize("iodepth", [1, 8])
def test_replay_on_a_file_counts_every_io(tmp_path: Path, iodepth: int) -> None:
    rng = np.random.default_rng(7)
    n = 400
    offs = rng.permutation(1024)[:n] * 4096
    lens = rng.choice([4096, 8192], n)
    ops = np.where(rng.random(n) < 0.75, "write", "read")
    plan = plan_table(list(zip(np.arange(n) * 1e-4, ops, offs, lens, strict=True)))
    target = tmp_path / "disk.img"
    with open(target, "wb") as fh:
        fh.truncate(8 << 20)
    log = export_iolog_v3(plan, tmp_path / "r.iolog")
    run = fiolib.run_jobs([fiolib.replay_job(log.path, str(target), iodepth=iodepth)], tmp_path, "r")
    s = run.summary
    assert (s.write.total_ios, s.read.total_ios) == (log.write_ios, log.read_ios)
    kw = {"iodepth": iodepth, "max_io_bytes": fiolib.plan_max_length(plan)}
    assert fiolib.plan_max_length(plan) == 8192
    assert fiolib.issued_log_bytes(s, log, "r.json", **kw) == (log.write_bytes, log.read_bytes, 0)
    with pytest.raises(fiolib.FioError, match=r"issued .* for an iolog holding .*report r\.json"):
        fiolib.issued_log_bytes(s, dataclasses.replace(log, write_ios=log.write_ios + 1), "r.json", **kw)
    # fio's own byte count must agree with the log within its unaccounted last completions.
    more = dataclasses.replace(log, write_bytes=log.write_bytes + iodepth * 8192)
    with pytest.raises(fiolib.FioError, match=r"fio counted .* bytes for an iolog holding"):
        fiolib.issued_log_bytes(s, more, "r.json", **kw)
    less = dataclasses.replace(log, write_bytes=s.write.io_bytes - 4096)      # fio counted more than logged
    with pytest.raises(fiolib.FioError, match=r"fio counted"):
        fiolib.issued_log_bytes(s, less, "r.json", **kw)
    # fio 3.33 leaves the last iodepth-1 completions out of io_bytes in iolog replay (module doc).
    missing = log.write_bytes + log.read_bytes - s.write.io_bytes - s.read.io_bytes
    if iodepth == 1:
        assert missing == 0
    else:
        assert 0 <= missing <= (iodepth - 1) * 8192
    assert run.json_path.exists() and run.job_path.exists()


@needs_fio
def test_run_jobs_raises_on_fio_failure(tmp_path: Path) -> None:
    # A directory cannot be opened for writing: fio fails and the runner says so with fio's stderr.
    job = fiolib.FioJob("bad", {"filename": str(tmp_path), "rw": "write", "size": 4096, "direct": 1})
    with pytest.raises(fiolib.FioError, match="exited with"):
        fiolib.run_jobs([job], tmp_path, "bad")
