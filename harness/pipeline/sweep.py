"""Sweeps: grids of traces × models × capacities × policies × hyperparameters, run on a local
process pool or a Dask distributed cluster, with a results store that makes them resumable.

A sweep file is TOML: a `[base]` table is a run config (kvwear.harness.pipeline.config), a `[grid]` table names
the axes, e.g.

    [base]
    name = "fig7"
    [base.workload]
    generator = "multi-round"
    params = {sessions = 40, turns = 20}
    [grid]
    models = ["kimi-k3", "qwen3.5-27b"]
    capacities = [{dram = "8GB", ssd = "64GB"}, {dram = "16GB", ssd = "56GB"}]
    policies = ["lru", "gandalf:gamma=[0,1,4,16,64]", "lru-k:k=[1,2,4,8]"]
    traces = ["../shared/traces/mooncake/conversation_trace.jsonl"]     # optional
    [sweep]
    replay = true                 # replay each point's plan on base.device (default: sim)
    drive_resource = ""           # Dask worker resource a replay point needs, e.g. "nvme0"

Each point is one resolved RunConfig with one policy; its key is a hash of that config. The
store (SWEEP/results/KEY.parquet, SWEEP/errors/KEY.json) is written by the worker that ran the
point, atomically and under the key's own name: a retried point overwrites its own file, so a
worker that dies mid-task cannot leave a duplicate row, and a finished point is never run again.
On the local pool, workers die with the sweep (PR_SET_PDEATHSIG), and a worker that dies is a
failed attempt of its point: retried once in a rebuilt pool, then recorded in errors/ (the sweep
goes on). Grids are sized before they are expanded (MAX_SWEEP_POINTS), and their policies, models
and traces resolved when the sweep is planned. This module plans and schedules; the work of one point is
`kvwear.harness.pipeline.run.run_point` (which holds the point folder's lock: a point is never run twice at once).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kvwear.children import set_pdeathsig
from kvwear.errors import InputError, KvwearError
from kvwear.harness.devices.base import backend
from kvwear.harness.estimate.schema import RESULTS, ResultsRow
from kvwear.harness.pipeline.config import DEFAULT_SSD_BYTES, RunConfig, config_from_mapping, read_toml
from kvwear.harness.pipeline.rundir import write_json
from kvwear.kv import parse_kv
from kvwear.tables import READ_ERRORS as TABLE_READ_ERRORS
from kvwear.tables import atomic_write

SWEEP_VERSION = 1


@dataclass(frozen=True)
class SweepPoint:
    key: str
    config: RunConfig
    axes: Mapping[str, Any] = field(default_factory=dict)     # the axis values that made this point
    resource: str = ""                                        # Dask worker resource it needs ("" = any)


@dataclass(frozen=True)
class SweepPlan:
    name: str
    points: tuple[SweepPoint, ...]
    replay: bool


# -- grid expansion -------------------------------------------------------------------------

_GRID_KEYS = {"traces", "models", "capacities", "policies", "dram", "ssd"}


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets: 'a=[1,2],b=3' → ['a=[1,2]', 'b=3']."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


#: The most points a sweep may expand to: grids are sized before they are expanded.
MAX_SWEEP_POINTS = 100_000


def expand_policy(spec: str, limit: int = MAX_SWEEP_POINTS) -> list[str]:
    """'gandalf:gamma=[0,8],mu0=1' → ['gandalf:gamma=0,mu0=1', 'gandalf:gamma=8,mu0=1'].

    A value `a..b` (integers) expands to every integer from a to b inclusive. More than `limit`
    combinations is refused before any is made.
    """
    name, _, params = spec.partition(":")
    if not params:
        return [name]
    axes: list[tuple[str, list[str] | range]] = []
    size = 1
    for key, value in parse_kv(_split_top(params), f"policy spec {spec!r}").items():
        values: list[str] | range
        if value.startswith("[") and value.endswith("]"):
            values = [v.strip() for v in value[1:-1].split(",") if v.strip()]
        elif m := re.fullmatch(r"(-?\d+)\.\.(-?\d+)", value):
            values = range(int(m.group(1)), int(m.group(2)) + 1)       # lazy: sized first
        else:
            values = [value]
        if not values:
            raise ValueError(f"policy spec {spec!r}: empty value list for {key!r}")
        size *= len(values)
        if size > limit:
            raise ValueError(f"policy spec {spec!r} expands to more than {limit:,} points")
        axes.append((key, values))
    return [
        name + ":" + ",".join(f"{k}={v}" for (k, _), v in zip(axes, combo, strict=True))
        for combo in itertools.product(*(vals for _, vals in axes))
    ]


def point_key(cfg: RunConfig) -> str:
    """Hash of the resolved config, without its name (the name does not change results)."""
    d = cfg.to_dict()
    d.pop("name", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def plan_sweep(data: Mapping[str, Any], source: str = "<sweep>") -> SweepPlan:
    """Expand a sweep mapping (as read from TOML) into points."""
    unknown = set(data) - {"base", "grid", "sweep"}
    if unknown:
        raise InputError(source, None, sorted(unknown)[0], "unknown table; valid: base, grid, sweep")
    base_d = dict(data.get("base", {}))
    grid = dict(data.get("grid", {}))
    opts = dict(data.get("sweep", {}))
    for k in grid:
        if k not in _GRID_KEYS:
            raise InputError(source, None, f"grid.{k}", f"unknown axis; valid: {', '.join(sorted(_GRID_KEYS))}")
    for k in opts:
        if k not in {"replay", "drive_resource"}:
            raise InputError(source, None, f"sweep.{k}", "unknown option; valid: drive_resource, replay")
    base = config_from_mapping(base_d, source)
    try:
        drive = backend(base.device.kind)         # its capabilities: fixed size, a drive to share
    except KvwearError as exc:
        raise InputError(source, None, "base.device.kind", str(exc)) from None

    def axis(name: str, default: list[Any]) -> list[Any]:
        v = grid.get(name, default)
        if not isinstance(v, list) or not v:
            raise InputError(source, None, f"grid.{name}", "expected a non-empty list")
        return v

    traces = axis("traces", [base.workload.trace])
    models = axis("models", [base.model])
    if "capacities" in grid:
        caps = axis("capacities", [])
        for c in caps:
            if not isinstance(c, Mapping) or set(c) - {"dram", "ssd", "hbm"}:
                raise InputError(source, None, "grid.capacities", f"expected {{dram=…, ssd=…}}, got {c!r}")
    else:
        # no SSD tier: the default one, except on a device of fixed size (each point's run sizes it)
        ssd = base.tiers.ssd_bytes or (0 if drive.capabilities.fixed_size else DEFAULT_SSD_BYTES)
        caps = [{"dram": d, "ssd": s} for d, s in itertools.product(
            axis("dram", [base.tiers.dram_bytes]), axis("ssd", [ssd]))]
    from kvwear.policies.base import resolve_spec

    try:
        policies = [p for spec in axis("policies", list(base.policies)) for p in expand_policy(str(spec))]
        for pol in policies:         # an unknown policy or parameter is found now, not when its point runs
            resolve_spec(pol)
    except (ValueError, KvwearError) as exc:
        raise InputError(source, None, "grid.policies", str(exc)) from None
    from kvwear.workloads.loaders.pipeline import resolve_format
    from kvwear.workloads.models import resolve_profile

    for name, values, check in (("models", models, resolve_profile),
                                ("traces", [t for t in traces if t], lambda t: resolve_format(t, None))):
        for v in values:             # known now, not when the points that use it run
            try:
                check(str(v))
            except KvwearError as exc:
                raise InputError(source, None, f"grid.{name}", str(exc)) from None
    n_points = len(traces) * len(models) * len(caps) * len(policies)
    if n_points > MAX_SWEEP_POINTS:
        raise InputError(source, None, "grid", f"{n_points:,} points (traces × models × capacities × policies); "
                                               f"at most {MAX_SWEEP_POINTS:,}")
    replay = opts.get("replay", False)
    if not isinstance(replay, bool):
        raise InputError(source, None, "sweep.replay", f"expected true or false, got {replay!r}")
    resource = str(opts.get("drive_resource", ""))

    points: list[SweepPoint] = []
    seen: set[str] = set()
    for trace, model, cap, pol in itertools.product(traces, models, caps, policies):
        d = base.to_dict()
        d["model"] = model
        d["policies"] = [pol]
        d["workload"]["trace"] = trace
        d["tiers"].update({"dram_bytes": cap.get("dram", d["tiers"]["dram_bytes"]),
                           "ssd_bytes": cap.get("ssd", d["tiers"]["ssd_bytes"])})
        if "hbm" in cap:
            d["tiers"]["hbm_bytes"] = cap["hbm"]
        cfg = config_from_mapping(d, source)
        key = point_key(cfg)
        if key in seen:
            continue
        seen.add(key)
        axes = {"trace": trace, "model": model, "dram_bytes": cfg.tiers.dram_bytes,
                "ssd_bytes": cfg.tiers.ssd_bytes, "policy": pol}
        needs_drive = replay and resource and drive.capabilities.drive_resource
        points.append(SweepPoint(key=key, config=cfg, axes=axes, resource=resource if needs_drive else ""))
    return SweepPlan(name=base.name, points=tuple(points), replay=replay)


def load_sweep(path: str | Path) -> SweepPlan:
    return plan_sweep(read_toml(path, "sweep file"), str(path))


# -- results store --------------------------------------------------------------------------

class ResultsStore:
    """SWEEP/results/KEY.parquet (one row per finished point) and SWEEP/errors/KEY.json."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.results = self.root / "results"
        self.errors = self.root / "errors"

    def damage(self, path: Path) -> str | None:
        """What is wrong with a point's results file (unreadable, truncated, another table, another
        point's row), or None when it reads back as one row of its point."""
        try:
            t = pq.read_table(path)
        except TABLE_READ_ERRORS as exc:
            return f"not a readable Parquet table (truncated or damaged): {' '.join(str(exc).split())[:160]}"
        missing = [n for n in ("point_key", *RESULTS.schema.names) if n not in t.column_names]
        if missing:
            return f"lacks the column(s) {', '.join(missing[:5])} (not a sweep point's row)"
        if t.num_rows != 1 or t.column("point_key")[0].as_py() != path.stem:
            return f"holds {t.num_rows} row(s), expected the one row of point {path.stem}"
        return None

    def damaged(self) -> dict[str, str]:
        """Results files that do not read back: key → what is wrong (their points count as not done)."""
        files = sorted(self.results.glob("*.parquet")) if self.results.is_dir() else []
        return {p.stem: why for p in files if (why := self.damage(p)) is not None}

    def done_keys(self) -> set[str]:
        if not self.results.is_dir():
            return set()
        return {p.stem for p in self.results.glob("*.parquet")} - set(self.damaged())

    def failed_keys(self) -> set[str]:
        return {p.stem for p in self.errors.glob("*.json")} if self.errors.is_dir() else set()

    def write_result(self, key: str, axes: Mapping[str, Any], row: ResultsRow) -> Path:
        """One point's row: its key, its axes (axis_NAME) and its results row, typed as RESULTS (a
        field the point did not measure is a null of its type, so points concatenate)."""
        path = self.results / f"{key}.parquet"
        head = pa.Table.from_pylist([{"point_key": key, **{f"axis_{k}": v for k, v in axes.items()}}])
        body = pa.Table.from_pylist([row.as_dict()], schema=RESULTS.schema)
        table = pa.Table.from_arrays([*head.columns, *body.columns], names=[*head.column_names, *body.column_names])
        with atomic_write(path) as tmp:
            pq.write_table(table, tmp)
        (self.errors / f"{key}.json").unlink(missing_ok=True)
        return path

    def write_error(self, key: str, axes: Mapping[str, Any], error: str) -> None:
        write_json(self.errors / f"{key}.json", {"point_key": key, "axes": dict(axes), "error": error})

    def read(self) -> pd.DataFrame:
        """All finished points, one row each (deduplicated by key, whatever happened on disk)."""
        files = sorted(self.results.glob("*.parquet")) if self.results.is_dir() else []
        if not files:
            return pd.DataFrame()
        for f in files:
            why = self.damage(f)
            if why is not None:
                raise KvwearError(f"{f}: {why}; resume the sweep to run this point again")
        df = pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)
        return df.drop_duplicates("point_key", keep="last").reset_index(drop=True)

    def read_errors(self) -> list[dict[str, Any]]:
        if not self.errors.is_dir():
            return []
        out = []
        for p in sorted(self.errors.glob("*.json")):
            try:
                rec = json.loads(p.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                rec = None
                why = f"{p} does not read back ({type(exc).__name__})"
            if not (isinstance(rec, dict) and isinstance(rec.get("error"), str)):
                rec = {"point_key": p.stem, "axes": {}, "error": why if rec is None else f"{p} is damaged"}
            out.append(rec)
        return out


def execute_point(point: SweepPoint, store_root: str, replay: bool) -> tuple[str, bool, str]:
    """Run one point and store its row or its error. Runs on a worker; never raises."""
    from kvwear.harness.pipeline.run import run_point  # imported here: workers import the pipeline lazily

    store = ResultsStore(store_root)
    try:
        row = run_point(point.config, Path(store_root) / "points" / point.key, replay=replay)
        store.write_result(point.key, point.axes, row)
        return point.key, True, ""
    except Exception as exc:  # a failing point is recorded and does not stop the sweep
        msg = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"
        store.write_error(point.key, point.axes, msg)
        return point.key, False, msg


# -- scheduling -----------------------------------------------------------------------------

@dataclass
class SweepProgress:
    total: int
    skipped: int = 0
    done: int = 0
    failed: int = 0
    running: int = 0
    lost_workers: int = 0          # points whose pool worker died (each is retried once)
    retried: list[str] = field(default_factory=list)   # each retried point and why, for the user
    started_s: float = field(default_factory=time.monotonic)

    def eta_s(self) -> float | None:
        finished = self.done + self.failed
        if finished == 0:
            return None
        rate = finished / max(time.monotonic() - self.started_s, 1e-9)
        return (self.total - self.skipped - finished) / rate


ProgressCallback = Callable[[SweepProgress], None]


def run_sweep(
    plan: SweepPlan,
    root: str | Path,
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    client: Any = None,
    on_progress: ProgressCallback | None = None,
    retry_failed: bool = False,
) -> SweepProgress:
    """Run every point not yet in the store; return the final counts.

    `scheduler` ("tcp://host:port") or `client` (a distributed.Client) runs on Dask; otherwise a
    local process pool with `jobs` workers (jobs=1 runs in this process).
    """
    from kvwear.exclusive import locked

    store = ResultsStore(root)
    try:
        store.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvwearError(f"{store.root}: cannot create the sweep store there: {exc.strerror}") from None
    # one sweep at a time per store, like a run directory (two would run the same points twice)
    with locked(store.root / ".lock", f"sweep store {store.root}"):
        return _run_sweep(plan, store, jobs=jobs, scheduler=scheduler, client=client, on_progress=on_progress,
                          retry_failed=retry_failed)


def _previous_replay(path: Path) -> bool | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("replay"), bool):
        raise KvwearError(f"{path}: damaged (it records whether the stored points were replayed); restore it, "
                          "or remove it if they were run with this sweep's [sweep] replay setting")
    return bool(data["replay"])


def check_store(plan: SweepPlan, root: str | Path) -> None:
    """Refuse a store whose sweep.json is damaged or records the other replay setting. `run_sweep`
    checks it again under the store's lock; a caller checks first to refuse before it prints."""
    if _previous_replay(Path(root) / "sweep.json") not in (None, plan.replay):
        # A point's key is its config, not the replay flag: its stored row would be reused as if
        # it had (or had not) been replayed.
        raise KvwearError(f"{root} holds a sweep with replay = {not plan.replay}; resume it with the "
                          "same [sweep] replay setting or choose another output directory")


def _run_sweep(plan: SweepPlan, store: ResultsStore, *, jobs: int, scheduler: str | None, client: Any,
               on_progress: ProgressCallback | None, retry_failed: bool) -> SweepProgress:
    check_store(plan, store.root)
    write_json(store.root / "sweep.json", {"sweep_version": SWEEP_VERSION, "name": plan.name,
                                          "replay": plan.replay, "points": len(plan.points)})
    write_json(store.root / "points.json", [{"key": p.key, "axes": dict(p.axes)} for p in plan.points])
    damaged = store.damaged()
    done = store.done_keys()
    failed = store.failed_keys()
    todo = [p for p in plan.points if p.key not in done and (retry_failed or p.key not in failed)]
    progress = SweepProgress(total=len(plan.points), skipped=len(plan.points) - len(todo))
    progress.retried += [f"point {k} runs again: results/{k}.parquet {why}" for k, why in sorted(damaged.items())
                         if k in {p.key for p in todo}]
    report = on_progress or (lambda _p: None)
    report(progress)
    if not todo:
        return progress
    if scheduler or client is not None:
        # absolute: a Dask worker runs in its own working directory (a relative store would put
        # its results there, and the sweep would never see them)
        _run_dask(todo, str(store.root.resolve()), plan.replay, scheduler, client, progress, report)
    elif jobs <= 1:
        for p in todo:
            progress.running = 1
            report(progress)
            _, ok, _ = execute_point(p, str(store.root), plan.replay)
            progress.running = 0
            progress.done += ok
            progress.failed += not ok
            report(progress)
    else:
        _run_pool(todo, store, plan.replay, jobs, progress, report)
    return progress


#: A point whose worker died is run again this many times before it is recorded as failed.
LOST_WORKER_RETRIES = 1


def _run_pool(todo: Sequence[SweepPoint], store: ResultsStore, replay: bool, jobs: int,
              progress: SweepProgress, report: ProgressCallback) -> None:
    """The local process pool. Workers die with this process (PR_SET_PDEATHSIG). A worker that
    dies (killed, out of memory) breaks the pool: its points (every one in flight then; which
    one the dead worker ran is not known) run again in a new pool, and a point lost
    LOST_WORKER_RETRIES + 1 times is recorded in errors/ as failed; the sweep goes on."""
    lost: dict[str, int] = {}
    queue = list(todo)
    while queue:
        with ProcessPoolExecutor(max_workers=jobs, initializer=set_pdeathsig, initargs=(os.getpid(),)) as pool:
            futures: dict[Future[tuple[str, bool, str]], SweepPoint] = {
                pool.submit(execute_point, p, str(store.root), replay): p for p in queue}
            queue = []
            pending = set(futures)
            while pending:
                progress.running = min(jobs, len(pending))
                report(progress)
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    point = futures[f]
                    try:
                        _, ok, _ = f.result()
                    except BrokenProcessPool:
                        progress.lost_workers += 1
                        lost[point.key] = lost.get(point.key, 0) + 1
                        progress.retried.append(f"point {point.key} was in flight when a pool worker died "
                                                f"(attempt {lost[point.key]})")
                        if lost[point.key] <= LOST_WORKER_RETRIES:
                            queue.append(point)
                            continue
                        store.write_error(point.key, point.axes, f"the worker running this point died "
                                                                 f"{lost[point.key]} times (killed or out of memory)")
                        ok = False
                    progress.done += ok
                    progress.failed += not ok
    progress.running = 0
    report(progress)


def _run_dask(todo: Sequence[SweepPoint], root: str, replay: bool, scheduler: str | None, client: Any,
              progress: SweepProgress, report: ProgressCallback) -> None:
    from distributed import Client, as_completed

    own = client is None
    c = client if client is not None else Client(scheduler)
    try:
        futures = []
        for p in todo:
            # Replay points on a real drive carry the drive's resource so only its owner runs them.
            resources = {p.resource: 1} if p.resource else None
            futures.append(c.submit(execute_point, p, root, replay, key=f"kvwear-point-{p.key}", pure=False,
                                    resources=resources, retries=2))
        progress.running = len(futures)
        report(progress)
        for fut in as_completed(futures):
            _, ok, _ = fut.result()
            progress.done += ok
            progress.failed += not ok
            progress.running -= 1
            report(progress)
    finally:
        if own:
            c.close()


def sweep_points_table(root: str | Path) -> pd.DataFrame:
    """Every planned point with its status (done / failed / pending)."""
    store = ResultsStore(root)
    points = json.loads((store.root / "points.json").read_text())
    done, failed = store.done_keys(), store.failed_keys()
    rows: Iterable[dict[str, Any]] = (
        {"point_key": p["key"], **p["axes"],
         "status": "done" if p["key"] in done else "failed" if p["key"] in failed else "pending"}
        for p in points)
    return pd.DataFrame(list(rows))
