"""fio: build its job files and iologs, run it through an injected runner, parse its JSON.

Pure parts: `parse_fio_json` (fio 3.33 `--output-format=json`), `parse_fio_version`, the job
builders (`replay_job`, `seq_fill_job`, `steady_state_job`, `render_job_file`); iologs are
written by kvwear.harness.devices.fio_iolog.export_iolog_v3. The impure part is `run_fio`, the default
`FioRunner` (argv → stdout bytes, raising `FioError` on failure), and `run_jobs`, which writes a
job file into a work directory, runs fio with its JSON output kept beside it, and parses it.

This module never decides where it is safe to write: device backends validate the plan's range
(`validate_plan`) and run `kvwear.harness.devices.safety` before calling it.

A fact about fio 3.33 callers must know: in iolog replay with iodepth > 1, the JSON's `io_bytes`
(and clat sample counts) miss the last iodepth − 1 completions, which fio reaps after the replay
list is empty without accounting them; `total_ios` (issued I/Os) is exact. `issued_log_bytes`
checks fio's issued counts against the iolog it replayed and returns the log's bytes (fio replays
it in order).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.children import die_with_parent
from kvwear.errors import InputError, KvwearError
from kvwear.exclusive import inherited_fds

# A runner takes argv and returns stdout bytes; it raises on failure.
FioRunner = Callable[[Sequence[str]], bytes]

IOENGINES = ("libaio", "io_uring", "psync")
IOLOG_V3_HEADER = "fio version 3 iolog"
_DIRS = ("read", "write", "trim")


class FioError(KvwearError):
    """fio could not run, failed, or reported an I/O error."""


def run_fio(argv: Sequence[str], timeout_s: float | None = None) -> bytes:
    """The real runner: run fio, return stdout; a non-zero exit raises with fio's stderr. fio dies
    with kvwear and holds kvwear's device locks while it runs (kvwear.exclusive); its jobs run as
    threads (`--thread`), because a forked job process would outlive a killed fio."""
    try:
        if shutil.which(argv[0]) is None:       # else setpriv would report it, less clearly
            raise FileNotFoundError(argv[0])
        proc = subprocess.run(die_with_parent([argv[0], "--thread", *argv[1:]]), capture_output=True,
                              timeout=timeout_s, check=False, pass_fds=inherited_fds())
    except FileNotFoundError:
        raise FioError(f"{argv[0]} not found: install fio (Debian package 'fio')") from None
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()[-2000:]
        raise FioError(f"{' '.join(argv)} exited with {proc.returncode}: {err}")
    return proc.stdout


# ---------------------------------------------------------------------------------------------
# version


def parse_fio_version(text: str | bytes) -> str:
    """'fio-3.33\\n' → 'fio-3.33'."""
    s = text.decode(errors="replace") if isinstance(text, bytes) else text
    m = re.search(r"fio-\d+(?:\.\d+)*\S*", s)
    if not m:
        raise InputError("fio --version", 1, None, f"no 'fio-X.Y' version in {s.strip()[:80]!r}")
    return m.group(0)


def fio_version(runner: FioRunner = run_fio, fio: str = "fio") -> str:
    return parse_fio_version(runner([fio, "--version"]))


def version_tuple(version: str) -> tuple[int, ...]:
    """'fio-3.33' → (3, 33)."""
    m = re.match(r"fio-(\d+(?:\.\d+)*)", version)
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def fio_replays_trim(version: str) -> bool:
    """Measured here: fio 3.33 prints 'bad ddir: 2' and drops the trim lines of an iolog. Newer
    releases are assumed to replay them; the backend checks fio's trim count against the plan."""
    return version_tuple(version) >= (3, 34)


# ---------------------------------------------------------------------------------------------
# JSON parsing


@dataclass(frozen=True)
class FioDirStats:
    """One direction (read, write or trim) of one job, or of the total."""

    io_bytes: int                   # bytes fio accounted as completed
    total_ios: int                  # I/Os fio issued
    runtime_ms: int
    bw_bytes_per_s: int
    iops: float
    short_ios: int = 0
    drop_ios: int = 0
    clat_samples: int = 0
    lat_mean_ns: float = 0.0
    clat_percentiles_ns: Mapping[float, int] = field(default_factory=dict)

    @property
    def io_kbytes(self) -> int:
        return self.io_bytes // 1024


@dataclass(frozen=True)
class FioSteadyState:
    """fio's steady-state detector (`ss=`) verdict for one job."""

    criterion: str                  # e.g. 'iops_slope:10.000000%'
    duration_s: int
    attained: bool
    measured: str                   # fio's 'criterion' value at the end
    iops_mean: float
    bw_mean_bytes_per_s: float


@dataclass(frozen=True)
class FioJobResult:
    name: str
    error: int
    job_runtime_ms: int
    elapsed_s: int
    read: FioDirStats
    write: FioDirStats
    trim: FioDirStats
    sync_ios: int
    options: Mapping[str, str]
    steady_state: FioSteadyState | None = None


@dataclass(frozen=True)
class FioSummary:
    """Everything kvwear uses from one fio JSON report. Totals sum bytes, I/Os, bandwidth and IOPS
    over jobs (jobs of one report run side by side unless stonewalled) and take the longest
    runtime; percentiles are kept only when there is a single job (they do not combine)."""

    fio_version: str
    jobs: tuple[FioJobResult, ...]
    read: FioDirStats
    write: FioDirStats
    trim: FioDirStats

    @property
    def errors(self) -> dict[str, int]:
        return {j.name: j.error for j in self.jobs if j.error}

    @property
    def runtime_ms(self) -> int:
        return max((j.job_runtime_ms for j in self.jobs), default=0)

    @property
    def total_ios(self) -> int:
        return self.read.total_ios + self.write.total_ios + self.trim.total_ios

    @property
    def io_bytes(self) -> int:
        return self.read.io_bytes + self.write.io_bytes + self.trim.io_bytes


def _num(obj: Mapping[str, Any], key: str, source: str, where: str, kind: type = int) -> Any:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise InputError(source, None, f"{where}.{key}", f"missing or not a number: {v!r}")
    return kind(v)


def _dir_stats(obj: Any, source: str, where: str) -> FioDirStats:
    if not isinstance(obj, Mapping):
        raise InputError(source, None, where, f"missing or not an object: {obj!r}")
    clat = obj.get("clat_ns") or {}
    lat = obj.get("lat_ns") or {}
    pct = clat.get("percentile") or {}
    try:
        percentiles = {float(k): int(v) for k, v in pct.items()}
    except (TypeError, ValueError):
        raise InputError(source, None, f"{where}.clat_ns.percentile", "not a {percent: ns} map") from None
    io_bytes = obj.get("io_bytes")
    if io_bytes is None:   # fio before 2.x printed only KiB
        io_bytes = _num(obj, "io_kbytes", source, where) * 1024
    return FioDirStats(
        io_bytes=int(io_bytes),
        total_ios=_num(obj, "total_ios", source, where),
        runtime_ms=_num(obj, "runtime", source, where),
        bw_bytes_per_s=int(obj.get("bw_bytes", _num(obj, "bw", source, where) * 1024)),
        iops=_num(obj, "iops", source, where, float),
        short_ios=int(obj.get("short_ios", 0)),
        drop_ios=int(obj.get("drop_ios", 0)),
        clat_samples=int(clat.get("N", 0)),
        lat_mean_ns=float(lat.get("mean", 0.0)),
        clat_percentiles_ns=percentiles,
    )


def _steady(obj: Any) -> FioSteadyState | None:
    if not isinstance(obj, Mapping):
        return None
    data = obj.get("data") or {}
    return FioSteadyState(
        criterion=str(obj.get("ss", "")),
        duration_s=int(obj.get("duration", 0)),
        attained=bool(obj.get("attained", 0)),
        measured=str(obj.get("criterion", "")),
        iops_mean=float(data.get("iops_mean", 0.0)),
        bw_mean_bytes_per_s=float(data.get("bw_mean", 0.0)),
    )


def _sum_dirs(dirs: Sequence[FioDirStats]) -> FioDirStats:
    if len(dirs) == 1:
        return dirs[0]
    return FioDirStats(
        io_bytes=sum(d.io_bytes for d in dirs),
        total_ios=sum(d.total_ios for d in dirs),
        runtime_ms=max((d.runtime_ms for d in dirs), default=0),
        bw_bytes_per_s=sum(d.bw_bytes_per_s for d in dirs),
        iops=sum(d.iops for d in dirs),
        short_ios=sum(d.short_ios for d in dirs),
        drop_ios=sum(d.drop_ios for d in dirs),
        clat_samples=sum(d.clat_samples for d in dirs),
        lat_mean_ns=(sum(d.lat_mean_ns * d.clat_samples for d in dirs)
                     / max(1, sum(d.clat_samples for d in dirs))),
    )


def _json_start(text: str) -> int:
    """fio may print warnings ('fio: ...') before the JSON object when it writes to stdout."""
    m = re.search(r"^\{", text, re.MULTILINE)
    return m.start() if m else -1


def parse_fio_json(text: str | bytes, source: str = "fio --output-format=json") -> FioSummary:
    """Parse one fio JSON report (fio 3.x; tested on 3.33). Raises InputError naming `source`."""
    s = text.decode(errors="replace") if isinstance(text, bytes) else text
    start = _json_start(s)
    if start < 0:
        raise InputError(source, 1, None, "no JSON object in fio's output")
    try:
        obj = json.loads(s[start:])
    except json.JSONDecodeError as exc:
        line = s.count("\n", 0, start) + exc.lineno
        raise InputError(source, line, None, f"invalid JSON: {exc.msg}") from None
    if not isinstance(obj, Mapping):
        raise InputError(source, None, None, "fio JSON is not an object")
    version = obj.get("fio version")
    if not isinstance(version, str):
        raise InputError(source, None, "fio version", f"missing: {version!r}")
    jobs_raw = obj.get("jobs")
    if not isinstance(jobs_raw, list):
        raise InputError(source, None, "jobs", f"missing or not a list: {jobs_raw!r}")
    jobs = []
    for i, j in enumerate(jobs_raw):
        where = f"jobs[{i}]"
        if not isinstance(j, Mapping):
            raise InputError(source, None, where, "not an object")
        sync = j.get("sync") or {}
        jobs.append(FioJobResult(
            name=str(j.get("jobname", "")),
            error=int(j.get("error", 0)),
            job_runtime_ms=int(j.get("job_runtime", 0)),
            elapsed_s=int(j.get("elapsed", 0)),
            read=_dir_stats(j.get("read"), source, f"{where}.read"),
            write=_dir_stats(j.get("write"), source, f"{where}.write"),
            trim=_dir_stats(j.get("trim"), source, f"{where}.trim"),
            sync_ios=int(sync.get("total_ios", 0)) if isinstance(sync, Mapping) else 0,
            options={str(k): str(v) for k, v in (j.get("job options") or {}).items()},
            steady_state=_steady(j.get("steadystate")),
        ))
    if not jobs:
        raise InputError(source, None, "jobs", "fio reported no jobs")
    return FioSummary(
        fio_version=version,
        jobs=tuple(jobs),
        read=_sum_dirs([j.read for j in jobs]),
        write=_sum_dirs([j.write for j in jobs]),
        trim=_sum_dirs([j.trim for j in jobs]),
    )


# ---------------------------------------------------------------------------------------------
# job builders


OptionValue = str | int | float | bool | None


@dataclass(frozen=True)
class FioJob:
    """One `[name]` section of a job file. Option values None are left out, True is written
    as the bare option name (fio's boolean form)."""

    name: str
    options: Mapping[str, OptionValue]


def _common(target: str, ioengine: str, iodepth: int) -> dict[str, OptionValue]:
    if ioengine not in IOENGINES:
        raise KvwearError(f"ioengine {ioengine!r} not supported; valid: {', '.join(IOENGINES)}")
    if iodepth < 1:
        raise KvwearError(f"iodepth must be ≥ 1, got {iodepth}")
    return {"filename": target, "direct": 1, "ioengine": ioengine, "iodepth": iodepth}


def replay_job(iolog: str | Path, target: str, *, ioengine: str = "libaio", iodepth: int = 16,
               timed: bool = False, chunked: bool = False, name: str = "replay") -> FioJob:
    """Replay an iolog v3 file on `target` (replay_redirect), direct I/O. `timed` honours the log's
    timestamps; otherwise `replay_no_stall` plays it as fast as possible. `chunked` reads the log
    in pieces (read_iolog_chunked) so a long plan does not sit in fio's memory at once."""
    opts = _common(target, ioengine, iodepth)
    del opts["filename"]           # replay_redirect names the target; the log's name is a token
    opts.update({
        "read_iolog": str(iolog),
        "replay_redirect": target,
        "replay_no_stall": 0 if timed else 1,
        "read_iolog_chunked": 1 if chunked else None,
    })
    return FioJob(name, opts)


def seq_fill_job(target: str, size_bytes: int, *, loops: int = 2, bs_bytes: int = 128 * 1024,
                 ioengine: str = "libaio", iodepth: int = 16, name: str = "seqfill") -> FioJob:
    """Sequential writes over [0, size_bytes), `loops` times (SNIA: fill the device twice)."""
    opts = _common(target, ioengine, iodepth)
    opts.update({"rw": "write", "bs": bs_bytes, "size": size_bytes, "offset": 0, "loops": loops})
    return FioJob(name, opts)


def steady_state_job(target: str, size_bytes: int, *, bs_bytes: int = 4096,
                     criterion: str = "iops_slope:10%", ss_dur_s: int = 60, ss_ramp_s: int = 10,
                     max_runtime_s: int = 3600, ioengine: str = "libaio", iodepth: int = 16,
                     name: str = "steady") -> FioJob:
    """Random writes over [0, size_bytes) until fio's steady-state detector is satisfied
    (`ss=criterion` over a rolling `ss_dur` window after `ss_ramp`), or `max_runtime_s` passes."""
    opts = _common(target, ioengine, iodepth)
    opts.update({
        "rw": "randwrite", "bs": bs_bytes, "size": size_bytes, "offset": 0, "norandommap": True,
        "randrepeat": 0, "time_based": True, "runtime": max_runtime_s,
        "ss": criterion, "ss_dur": ss_dur_s, "ss_ramp": ss_ramp_s,
    })
    return FioJob(name, opts)


def render_job_file(jobs: Sequence[FioJob], global_options: Mapping[str, OptionValue] | None = None) -> str:
    """A fio job file. Jobs run one after another (`stonewall`) when there are several."""
    def section(name: str, opts: Mapping[str, OptionValue]) -> list[str]:
        out = [f"[{name}]"]
        for k, v in opts.items():
            if v is None or v is False:
                continue
            if any(c in str(v) for c in "\n[]"):
                raise KvwearError(f"fio option {k}={v!r} contains a newline or bracket")
            out.append(k if v is True else f"{k}={v}")
        return out

    lines: list[str] = []
    if global_options:
        lines += [*section("global", global_options), ""]
    for i, job in enumerate(jobs):
        opts = dict(job.options)
        if i > 0:
            opts["stonewall"] = True
        lines += [*section(job.name, opts), ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class FioRun:
    summary: FioSummary
    json_path: Path
    job_path: Path


def run_jobs(jobs: Sequence[FioJob], workdir: Path, stem: str, *, runner: FioRunner = run_fio,
             fio: str = "fio") -> FioRun:
    """Write `<stem>.fio` into `workdir`, run fio with its JSON report kept as `<stem>.json`, parse
    it, and raise FioError if any job reported an error."""
    workdir.mkdir(parents=True, exist_ok=True)
    job_path = workdir / f"{stem}.fio"
    json_path = workdir / f"{stem}.json"
    job_path.write_text(render_job_file(jobs))
    runner([fio, "--output-format=json", f"--output={json_path}", str(job_path)])
    summary = parse_fio_json(json_path.read_bytes(), str(json_path))
    if summary.errors:
        raise FioError(f"fio reported errors {summary.errors} (job file {job_path}, report {json_path})")
    return FioRun(summary, json_path, job_path)


# ---------------------------------------------------------------------------------------------
# plans and iologs


def validate_plan(plan: pa.Table, capacity_bytes: int, *, block_bytes: int = 512,
                  source: str = "block_ops plan") -> None:
    """Refuse a plan that would touch anything outside [0, capacity_bytes), has a non-positive
    length, an unknown op, or (direct I/O) offsets/lengths not multiples of `block_bytes`.
    Raises InputError naming the first offending row (1-based) and field."""
    n = plan.num_rows
    if n == 0:
        return
    off = plan.column("offset_bytes").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    length = plan.column("length_bytes").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    ops = pc.cast(plan.column("op"), pa.string())
    bad_op = pc.invert(pc.is_in(ops, value_set=pa.array(["write", "read", "trim"]))).to_numpy(
        zero_copy_only=False)
    checks: list[tuple[np.ndarray, str, str]] = [
        (bad_op, "op", "unknown op (valid: write, read, trim)"),
        (off < 0, "offset_bytes", "negative offset"),
        (length <= 0, "length_bytes", "length must be positive"),
        (off + length > capacity_bytes, "offset_bytes",
         f"I/O ends beyond the configured range [0, {capacity_bytes})"),
        (off % block_bytes != 0, "offset_bytes", f"not a multiple of the {block_bytes}-byte block (direct I/O)"),
        (length % block_bytes != 0, "length_bytes",
         f"not a multiple of the {block_bytes}-byte block (direct I/O)"),
    ]
    for mask, fld, why in checks:
        idx = np.flatnonzero(mask)
        if idx.size:
            i = int(idx[0])
            raise InputError(source, i + 1, fld,
                             f"{why}: offset {int(off[i])} length {int(length[i])} "
                             f"({idx.size} such rows)")


@dataclass(frozen=True)
class IologStats:
    """What an iolog holds, per op: counts and bytes, in the log's order."""

    path: Path
    write_ios: int
    write_bytes: int
    read_ios: int
    read_bytes: int
    trim_ios: int
    trim_bytes: int


def issued_log_bytes(summary: FioSummary, log: IologStats, report: str, *, iodepth: int,
                     max_io_bytes: int) -> tuple[int, int, int]:
    """(write, read, trim) bytes fio issued replaying `log`. Its issued-I/O counts are exact (unlike
    io_bytes, see the module doc) and must equal the log's; fio replays a log in order, so it then
    issued exactly the log's bytes. fio's own byte count is checked too, so the result is not the
    plan's by construction: io_bytes may miss at most the last iodepth − 1 completions (each at most
    `max_io_bytes`) and never exceed the log. Otherwise FioError naming `report`."""
    expected = {"write": log.write_ios, "read": log.read_ios, "trim": log.trim_ios}
    issued = {"write": summary.write.total_ios, "read": summary.read.total_ios, "trim": summary.trim.total_ios}
    if issued != expected:
        raise FioError(f"fio issued {issued} I/Os for an iolog holding {expected} (report {report})")
    logged = {"write": log.write_bytes, "read": log.read_bytes, "trim": log.trim_bytes}
    counted = {"write": summary.write.io_bytes, "read": summary.read.io_bytes, "trim": summary.trim.io_bytes}
    slack = max(iodepth - 1, 0) * max_io_bytes
    missing = sum(logged.values()) - sum(counted.values())
    if any(counted[d] > logged[d] for d in logged) or not 0 <= missing <= slack:
        raise FioError(f"fio counted {counted} bytes for an iolog holding {logged}: more than its last "
                       f"{max(iodepth - 1, 0)} completions ({slack} bytes) apart (report {report})")
    return log.write_bytes, log.read_bytes, log.trim_bytes


@dataclass(frozen=True)
class SegmentedReplay:
    """fio's replays of a plan's segments (kvwear.harness.devices.deferred_trims), added up."""

    write_bytes: int
    read_bytes: int
    write_ios: int
    read_ios: int
    runtime_ms: int
    fio_write_bytes: int                            # fio's own io_bytes (see issued_log_bytes)
    fio_read_bytes: int
    write_clat_percentiles_ns: Mapping[float, int]  # of the segment with the most writes
    json_paths: tuple[str, ...]

    def details(self) -> dict[str, Any]:
        """The fio figures a ReplayResult's details carry, over all segments (rates over fio's runtime)."""
        t = self.runtime_ms / 1e3
        return {
            "fio_io_bytes": {"write": self.fio_write_bytes, "read": self.fio_read_bytes, "trim": 0},
            "fio_runtime_ms": self.runtime_ms,
            "write_iops": self.write_ios / t if t else 0.0, "read_iops": self.read_ios / t if t else 0.0,
            "write_bw_bytes_per_s": self.write_bytes / t if t else 0.0,
            "write_clat_percentiles_ns": dict(self.write_clat_percentiles_ns),
            "fio_runs": len(self.json_paths), "fio_json_paths": list(self.json_paths),
        }


def combine_segment_replays(parts: Sequence[tuple[FioSummary, IologStats, str]], *, iodepth: int,
                            max_io_bytes: int) -> SegmentedReplay:
    """Check each segment's replay against its iolog (issued_log_bytes) and add them up."""
    totals = dict.fromkeys(("w", "r", "wi", "ri", "ms", "fw", "fr"), 0)
    busiest: tuple[int, Mapping[float, int]] = (-1, {})
    for summary, log, report in parts:
        w, r, _ = issued_log_bytes(summary, log, report, iodepth=iodepth, max_io_bytes=max_io_bytes)
        for key, v in (("w", w), ("r", r), ("wi", summary.write.total_ios), ("ri", summary.read.total_ios),
                       ("ms", summary.runtime_ms), ("fw", summary.write.io_bytes), ("fr", summary.read.io_bytes)):
            totals[key] += int(v)
        if summary.write.total_ios > busiest[0]:
            busiest = (summary.write.total_ios, summary.write.clat_percentiles_ns)
    return SegmentedReplay(write_bytes=totals["w"], read_bytes=totals["r"], write_ios=totals["wi"],
                           read_ios=totals["ri"], runtime_ms=totals["ms"], fio_write_bytes=totals["fw"],
                           fio_read_bytes=totals["fr"], write_clat_percentiles_ns=busiest[1],
                           json_paths=tuple(report for _, _, report in parts))


def plan_max_length(plan: pa.Table) -> int:
    """The longest I/O of a plan (0 for an empty one)."""
    return int(pc.max(plan.column("length_bytes")).as_py() or 0) if plan.num_rows else 0


def plan_lengths(plan: pa.Table, op: str) -> np.ndarray:
    """Lengths of the plan rows with `op`, in plan order."""
    mask = pc.equal(pc.cast(plan.column("op"), pa.string()), op)
    return plan.column("length_bytes").filter(mask).to_numpy(zero_copy_only=False).astype(np.int64)

