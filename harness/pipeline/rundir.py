"""Run directories: where every stage of a run writes, and how a run resumes.

Layout (one folder per policy label below each stage folder):

    RUN/config.toml            resolved config (reruns the same run)
    RUN/manifest.json          revision, versions, kernel, device identity, seeds, input checksums
    RUN/workload/              requests.parquet; characterization/ (when the run makes a report)
    RUN/policies/LABEL/        ssd_ops.parquet, per_request.parquet, summary.json, timeline.parquet
    RUN/plan/LABEL/            block_ops.parquet, plan.json
    RUN/device/LABEL/          result.json, wear.parquet, timeline.parquet (the sim FTL's WAF), tool
                               output (fio JSON and iolog, FTL intervals), eBPF block_trace.parquet
                               and capture.json
    RUN/estimate/LABEL/        crossval.json
    RUN/results.parquet        one row per policy
    RUN/report/                report.html, report.md, results.csv, figures/
    RUN/.stages/NAME.json      one marker per finished stage (written last, atomically)
    RUN/.layout                this layout's version (RUNDIR_LAYOUT); a resume refuses another

A stage is finished when its marker exists; `--resume` skips finished stages (`Stage.run`: a
finished stage's record is read back from its files, an unfinished one is computed, its files
written, then its marker). Every file is written atomically (temporary sibling + rename), so an
interrupted run keeps what it finished and nothing half-written looks complete.

A marker is trusted only while what it stands for is there: it lists the files the stage wrote
and the finish time of each stage it read (`Stage.after`). A finished stage with one of those
files gone (a folder or a file deleted by hand), or whose input stage has run again since, loses
its marker and runs again; so, through the same finish-time check, does every stage that read
it, and only those (another policy's stages keep theirs). It runs again rather than stopping
with an error because the run can always rebuild it: its inputs are the earlier stages' files,
checked the same way, and at the start the trace or the generator's parameters in config.toml,
which `prepare` compared; an error would leave the user to find and delete the right markers by
hand. On a real device a device stage that runs again replays again (more wear, as after an
interruption). The check is of content: the marker records each file's size and sha256, and a
resume compares both (a resume reads the run's outputs once; sha256 runs at ~1 GB/s, against the
minutes a stage takes to make them). A damaged marker (truncated, `[]`) makes its stage run again
too. A marker written before markers recorded hashes is checked for presence; one written before
they listed files and times is checked against what its stage declares (each output holds a
file, each input stage finished before it). Markers without a config.toml are refused; a resume
removes the `.partial-<pid>` files a killed writer left. This module holds the skeleton; it must not know
what any stage computes.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar

from kvwear import __version__
from kvwear.children import find_program, system_argv
from kvwear.errors import KvwearError
from kvwear.memory import release_freed_memory
from kvwear.tables import atomic_write

MANIFEST_VERSION = 1


class ResumeRefused(KvwearError):
    """A finished stage's `load` found that the run cannot go on (its input changed): stop, do not rerun."""


def write_json(path: Path, data: Any) -> Path:
    """Write JSON atomically."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_text(path: Path, text: str) -> Path:
    """Write text atomically."""
    with atomic_write(path) as tmp:
        tmp.write_text(text)
    return path


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


def input_sha256(path: str | Path) -> str:
    """sha256 of an input file; of a folder (a trace given as a directory of files, e.g. Weka's
    one JSON per trace) over each file's relative path and sha256, in sorted order."""
    p = Path(path)
    if not p.is_dir():
        return file_sha256(p)
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        h.update(f"{f.relative_to(p).as_posix()}\0{file_sha256(f)}\n".encode())
    return h.hexdigest()


# The run directory's layout, which a resume reads back: 2 = stage folders plan/LABEL (was
# replay/LABEL), summary.json v1, summary.parquet and the results row in crossval.json. A run
# directory without RUN/.layout was written with layout 1.
RUNDIR_LAYOUT = 2

class RunDir:
    """Paths and stage markers of one run directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        # Stages run one after another, so a stage's wall time is the time since the previous
        # marker (or since `prepare`) in this process; recorded as elapsed_s in its marker.
        self._last_mark = time.monotonic()
        self.reruns: list[str] = []          # finished stages `Stage.run` did not trust, and why

    # -- paths -------------------------------------------------------------------------
    def stage_dir(self, stage: str, label: str | None = None) -> Path:
        d = self.root / stage if label is None else self.root / stage / label
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def config_path(self) -> Path:
        return self.root / "config.toml"

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def results_path(self) -> Path:
        return self.root / "results.parquet"

    # -- stage markers -----------------------------------------------------------------
    def _marker(self, stage: str) -> Path:
        return self.root / ".stages" / f"{stage.replace('/', '__')}.json"

    def is_done(self, stage: str) -> bool:
        return self._marker(stage).exists()

    def mark_done(self, stage: str, info: Mapping[str, Any] | None = None, *, outputs: Iterable[Path] = (),
                  after: Iterable[str] = ()) -> None:
        """Write `stage`'s marker: `info`, the files under `outputs` (files or folders in the run
        directory) with each one's size and sha256, and the finish time of each stage in `after`,
        which `stale_reason` checks."""
        now = time.monotonic()
        paths = sorted({f for p in outputs for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()})
        files = {f.relative_to(self.root).as_posix(): {"bytes": f.stat().st_size, "sha256": file_sha256(f)}
                 for f in paths if ".partial-" not in f.name}
        write_json(self._marker(stage), {"stage": stage, "finished_unix_s": time.time(),
                                         "elapsed_s": now - self._last_mark, "files": files,
                                         "after": {s: self.done_info(s)["finished_unix_s"] for s in after},
                                         **(info or {})})
        self._last_mark = now

    def marker_problem(self, stage: str) -> str | None:
        """What is wrong with `stage`'s marker file (truncated, not an object, a field missing or of
        the wrong type), or None when it reads back whole."""
        path = self._marker(stage)
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"its marker {path} does not read back ({type(exc).__name__}: {exc})"
        if not isinstance(data, dict):
            return f"its marker {path} holds {type(data).__name__}, not an object"
        if data.get("stage") != stage:
            return f"its marker {path} names stage {data.get('stage')!r}"
        t = data.get("finished_unix_s")
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            return f"its marker {path} has no finish time"
        files = data.get("files", [])
        if isinstance(files, list):
            if not all(isinstance(f, str) for f in files):
                return f"its marker {path} lists files that are not paths"
        elif not (isinstance(files, dict) and all(
                isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("sha256"), str)
                for v in files.values())):
            return f"its marker {path} lists files without their size and sha256"
        after = data.get("after", {})
        if not isinstance(after, dict) or not all(isinstance(v, int | float) for v in after.values()):
            return f"its marker {path} records its input stages' finish times wrongly"
        return None

    def stale_reason(self, stage: str, outputs: Iterable[Path] = (), after: Iterable[str] = ()) -> str | None:
        """Why finished `stage`'s marker no longer holds, or None when it holds: a file it lists is
        missing, or one of `outputs` holds no file, or a stage of `after` finished at another time
        than the marker records (ran again since; for a marker that records no times, finished
        after it)."""
        info = self.done_info(stage)
        files = info.get("files", ())
        for f in files:
            path = self.root / f
            if not path.is_file():
                return f"{path} is missing"
            if isinstance(files, dict):       # a marker that records sizes and hashes (older ones: presence)
                size = path.stat().st_size
                if size != files[f]["bytes"]:
                    return f"{path} holds {size:,} bytes, its stage wrote {files[f]['bytes']:,} (truncated or changed)"
                if file_sha256(path) != files[f]["sha256"]:
                    return f"{path} changed since its stage wrote it (sha256 differs)"
        for p in outputs:
            if not (p.is_file() or any(f.is_file() for f in p.rglob("*"))):
                return f"{p} is missing" if not p.is_dir() else f"{p} holds no file"
        recorded = info.get("after")
        for dep in after:
            if not self.is_done(dep) or self.marker_problem(dep) is not None:
                return f"stage {dep} has no sound marker"
            finished = self.done_info(dep)["finished_unix_s"]
            # an older marker records no times: its inputs must have finished before it
            ran_again = (finished > info["finished_unix_s"]) if recorded is None else (finished != recorded.get(dep))
            if ran_again:
                return f"stage {dep} ran again"
        return None

    def invalidate(self, stage: str, reason: str) -> None:
        """Remove `stage`'s marker before it runs again (an interrupted rerun must not leave the
        old marker over a mix of old and new files); `reruns` keeps why, for the user."""
        self._marker(stage).unlink(missing_ok=True)
        self.reruns.append(f"{stage} ran again: {reason}")

    def skip(self) -> None:
        """A finished stage was skipped: its time does not belong to the next stage."""
        self._last_mark = time.monotonic()

    def done_info(self, stage: str) -> dict[str, Any]:
        return dict(json.loads(self._marker(stage).read_text()))

    def finished_stages(self) -> list[str]:
        d = self.root / ".stages"
        if not d.is_dir():
            return []
        names = (p.stem.replace("__", "/") for p in d.glob("*.json"))
        return sorted(n for n in names if self.marker_problem(n) is None)

    @property
    def lock_path(self) -> Path:
        return self.root / ".lock"

    def create(self) -> None:
        """Create the folder (a path that is a file, or where no folder can be made, is refused)."""
        if self.root.exists() and not self.root.is_dir():
            raise KvwearError(f"--out {self.root}: exists and is not a directory")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / ".write-test"
            probe.touch()
            probe.unlink()
        except OSError as exc:
            raise KvwearError(f"--out {self.root}: cannot create a run directory there: {exc.strerror}") from None

    def prepare(self, config_toml: str, resume: bool) -> None:
        """Create the run directory; on resume the stored config must equal `config_toml`, and
        what a killed writer left (`.partial-<pid>` files) is removed. Stage markers without the
        config.toml they were computed under are refused (their config cannot be compared)."""
        markers = sorted((self.root / ".stages").glob("*.json")) if (self.root / ".stages").is_dir() else []
        if markers and not self.config_path.is_file():
            raise KvwearError(
                f"{self.root}: holds {len(markers)} finished stage(s) (.stages/) but no config.toml, so "
                "the config they were computed with cannot be checked; remove the run directory (or its "
                ".stages folder to recompute everything) or choose another --out")
        if self.config_path.exists():
            if not resume:
                raise KvwearError(
                    f"{self.root} already holds a run; pass --resume to continue it or choose "
                    "another --out"
                )
            layout_file = self.root / ".layout"
            layout = read_layout(layout_file) if layout_file.exists() else 1
            if layout != RUNDIR_LAYOUT:
                # without the file the directory is either a layout-1 run's (which had none) or one
                # whose .layout was deleted: the two cannot be told apart, so the message says both
                why = (f"has no .layout (written by a kvwear before layout {RUNDIR_LAYOUT}, or the file was "
                       "deleted)" if not layout_file.exists() else
                       f"was written by a kvwear with run-directory layout {layout}")
                raise KvwearError(
                    f"{self.root}: {why}, this one reads layout {RUNDIR_LAYOUT}: it cannot be resumed; "
                    "remove it or choose another --out"
                )
            try:
                stored = self.config_path.read_bytes()
            except OSError as exc:
                raise KvwearError(f"{self.config_path}: unreadable ({exc.strerror}); cannot check the run's "
                                  "config") from None
            if stored != config_toml.encode():
                raise KvwearError(
                    f"{self.root}: the stored config.toml differs from this run's config; "
                    "resume only with the same config (or choose another --out)"
                )
        self.root.mkdir(parents=True, exist_ok=True)
        if resume:
            # the caller holds the run's lock: any partial file is a killed writer's
            for partial in self.root.rglob(".*.partial-*"):
                if partial.is_file():
                    partial.unlink(missing_ok=True)
                    self.reruns.append(f"removed {partial.relative_to(self.root)}, a killed writer's partial file")
        write_text(self.root / ".layout", f"{RUNDIR_LAYOUT}\n")
        write_text(self.config_path, config_toml)
        self._last_mark = time.monotonic()


def read_layout(path: Path) -> int:
    """The layout number in RUN/.layout, or a one-line error naming the file."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise KvwearError(f"{path}: unreadable ({exc}); remove the run directory or choose another --out") from None
    if not text.strip().isdigit():
        raise KvwearError(f"{path}: holds {text[:40]!r}, not a layout number (damaged); remove the run "
                          "directory or choose another --out")
    return int(text)


R = TypeVar("R")


@dataclass(frozen=True)
class Stage(Generic[R]):
    """One stage's skip/compute/mark skeleton. `compute()` runs the stage, writing its files under
    `outputs`, and returns its record and what its marker records; `load()` reads a finished
    stage's record back from its files. `after` names the stages whose files `compute` reads. The
    marker is written last, so an interrupted stage runs again on resume; so does a finished one
    whose marker no longer holds (`RunDir.stale_reason`)."""

    name: str
    compute: Callable[[], tuple[R, Mapping[str, Any]]]
    load: Callable[[], R]
    outputs: tuple[Path, ...] = ()
    after: tuple[str, ...] = ()

    def run(self, rd: RunDir) -> R:
        if rd.is_done(self.name):
            reason = rd.marker_problem(self.name) or rd.stale_reason(self.name, self.outputs, self.after)
            if reason is None:
                try:
                    record = self.load()
                except ResumeRefused:
                    raise
                except KvwearError as exc:     # a record or table damaged or of another kvwear: run it again
                    reason = f"its record does not read back ({exc})"
                else:
                    rd.skip()
                    return record
            rd.invalidate(self.name, reason)
        record, info = self.compute()
        rd.mark_done(self.name, info, outputs=self.outputs, after=self.after)
        # the next stage's peak starts from what is live, not from what this one freed
        release_freed_memory()
        return record


def _git_revision() -> str | None:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    return rev + ("-dirty" if dirty else "")


def _tool_version(argv: list[str]) -> str | None:
    if find_program(argv[0]) is None:
        return None
    try:
        out = subprocess.run(system_argv(argv), capture_output=True, text=True, timeout=10)
    except (subprocess.SubprocessError, OSError):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else None


def build_manifest(
    *,
    config: Mapping[str, Any],
    inputs: Mapping[str, str | Path],
    seeds: Mapping[str, int],
    devices: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a reader needs to trust or reproduce a run."""
    packages = {}
    for name in ("numpy", "pandas", "pyarrow", "numba", "scipy", "matplotlib", "typer", "dask",
                 "distributed", "libcachesim"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    tools = {
        name: v
        for name, argv in {
            "fio": ["fio", "--version"],
            "nvme": ["nvme", "version"],
            "smartctl": ["smartctl", "--version"],
            "qemu": ["qemu-system-x86_64", "--version"],
            "bpftrace": ["bpftrace", "--version"],
        }.items()
        if (v := _tool_version(argv)) is not None
    }
    return {
        "manifest_version": MANIFEST_VERSION,
        "kvwear_version": __version__,
        "git_revision": _git_revision(),
        "created_unix_s": time.time(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "kernel": platform.release(),
        "host": platform.node(),
        "packages": packages,
        "tools": tools,
        "seeds": dict(seeds),
        "inputs": {k: {"path": str(v), "sha256": input_sha256(v)} for k, v in inputs.items()},
        "devices": dict(devices or {}),
        "config": dict(config),
    }
