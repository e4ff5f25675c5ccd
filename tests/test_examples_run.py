"""Every `kvwear …` example of README.md, of the docs and of each command's `--help`
(tests/test_examples.py says which lines those are) runs as written, in a fresh clone: the
repository is `git clone`d into a temporary directory (its committed HEAD: what a newcomer gets),
nothing else is put there (no ../shared: the inputs are the clone's samples/ and configs/), and
each example runs from the clone's root through the real `kvwear` console script with the clone's
code first on PYTHONPATH. Each must exit 0 and leave every output it names with `-o`/`--out`; a
few promise more (a line printed, JSON on stdout), checked below.

Examples run in the order they are found, except that one reading an output of another (a path
under out/, runs/ or sweeps/ that it does not write itself) runs after the example writing it.
Examples linked that way make one unit; every other example is a unit of its own; each unit is a
test (so that pytest-xdist spreads them over its workers), and the units of a worker, with its
sweep examples, share one clone (which compiles kvwear's numba kernels once).
Where an example needs hardware, the test provides it or says why it cannot: the `--scheduler`
example gets a Dask scheduler and worker started here; the loop device example runs in
tests/harness/test_run_block.py (root, a loop device it makes); the FEMU example skips, with the
reason, when the FEMU binary it names is not built (it is the user's build). Every example found
is in exactly one group (`test_every_example_has_a_runner`), so none is skipped silently.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kvwear.harness.estimate.estimator import Estimate
from kvwear.harness.estimate.schema import RESULTS
from kvwear.harness.pipeline.config import load_config
from kvwear.reports.run_report import build_run_report
from kvwear.tables import read_table
from tests.reports.browser import assert_reads_well
from tests.test_examples import EXAMPLES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
KVWEAR = Path(sys.executable).parent / "kvwear"
# Run in tests/harness/test_run_block.py on a loop device it creates (root).
LOOP_EXAMPLE = next(e for e in EXAMPLES if e.startswith("kvwear run --device block:/dev/loop7"))
FEMU_EXAMPLE = next(e for e in EXAMPLES if "--device femu" in e)
SWEEPS = [e for e in EXAMPLES if e.startswith("kvwear sweep ")]
LOCAL = [e for e in EXAMPLES if e not in (LOOP_EXAMPLE, FEMU_EXAMPLE, *SWEEPS)]
_OUTPUT_ROOTS = ("out/", "runs/", "sweeps/")

#: What some examples promise beyond exit 0 and their -o outputs: a regular expression their
#: output (stdout + stderr) matches.
PROMISES: dict[str, str] = {
    "kvwear --version": r"^kvwear \d+\.\d+",
    "kvwear models list": r"kimi-k3.*1015\.8",
    "kvwear models show kimi-k3": r"1015\.8",
    "kvwear models show configs/models/my-model.toml": r"my-k3.*1015\.8",
    "kvwear simulate --list-policies": r"gandalf.*belady",
    "kvwear trace inspect samples/traces/mooncake/conversation_trace.head200.jsonl": r"requests\s*│\s*200\b",
    "kvwear trace convert samples/traces/mooncake/with_a_bad_line.jsonl -o out/skipped.parquet --skip-bad":
        r"wrote 20 requests.*skipped 1 bad line",
    "kvwear trace generate api --requests 100000 --qps 500 --system-prompts 4 -o out/api.parquet": r"100,000",
    "kvwear run -o out/demo --resume": r"5 policies",
    "kvwear run --placement kind --policy lru --policy gandalf -o runs/fdp": r"2 policies",
}


def _world_readable(path: Path) -> bool:
    """Can another user reach `path` (every folder on the way traversable by others)?"""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents] if p.is_dir())


def as_newcomer() -> dict[str, Any]:
    """subprocess arguments that run an example as a newcomer would: not as root. Under root (CI)
    the examples run as `nobody`, provided the interpreter and this checkout are reachable by
    others (a checkout under /root is not: then they run as root and the test says so)."""
    if os.geteuid() != 0:
        return {}
    interpreter = Path(sys.executable).resolve()
    if not all(_world_readable(p) for p in (Path(sys.prefix) / "bin", interpreter.parent, REPO)):
        warnings.warn(f"examples run as root: the interpreter ({interpreter}), {sys.prefix} or {REPO} is not "
                      "reachable by other users", stacklevel=2)
        return {}
    pw = pwd.getpwnam("nobody")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


@contextmanager
def fresh_clone() -> Iterator[Path]:
    """A `git clone` of this repository's HEAD (what a newcomer gets), owned by the user the
    examples run as, in a folder of its own that others can reach; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="kvwear-examples-"))
    base.chmod(0o755)
    dest = base / "kvwear"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True, timeout=300)
    assert not (dest / ".." / "shared").exists()
    (dest / ".home").mkdir()
    who = as_newcomer()
    if who:
        subprocess.run(["chown", "-R", f"{who['user']}:{who['group']}", str(dest)], check=True)
    try:
        yield dest
    finally:
        shutil.rmtree(base, ignore_errors=True)


def outputs(example: str) -> list[str]:
    argv = shlex.split(example)
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-o", "--out")]


def reads(example: str) -> list[str]:
    """Paths under out/, runs/ or sweeps/ that an example reads (named, and not its own output)."""
    own = outputs(example)
    return [a for a in shlex.split(example)[1:] if a.startswith(_OUTPUT_ROOTS) and a not in own]


def reads_output_of(e: str, w: str) -> bool:
    """Example `e` reads something example `w` writes (one of its -o paths, or a path under it)."""
    return any(r == o or r.startswith(o.rstrip("/") + "/") for r in reads(e) for o in outputs(w))


def ordered(examples: list[str]) -> list[str]:
    """`examples` with each one after the examples writing what it reads (otherwise in order)."""
    done: list[str] = []
    pending = list(examples)
    while pending:
        for e in pending:
            needs = [w for w in pending if w != e and reads_output_of(e, w)]
            if not needs:
                done.append(e)
                pending.remove(e)
                break
        else:
            raise AssertionError(f"examples that read each other's outputs: {pending}")
    return done


def run_example(example: str, work: Path, *, replace: dict[str, str] | None = None) -> str:
    """Run `example` (with `replace`'s substitutions, e.g. a port) in `work`; assert it exits 0,
    writes its -o outputs and keeps its promise; return its output."""
    assert KVWEAR.is_file(), f"no kvwear console script beside {sys.executable} (pip install -e .)"
    line = example
    for old, new in (replace or {}).items():
        line = line.replace(old, new)
    argv = [str(KVWEAR), *shlex.split(line)[1:]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200", "HOME": str(work / ".home")}
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=1800, **as_newcomer())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{example}: exit {proc.returncode} after {time.monotonic() - t0:.0f} s\n{out[-3000:]}"
    for f in outputs(example):
        assert (work / f).exists(), f"{example}: did not write {f}\n{out[-2000:]}"
    if example in PROMISES:
        promise = PROMISES[example]
        assert re.search(promise, out, re.S | re.M), f"{example}: output lacks {promise!r}\n{out[-2000:]}"
    if "--json" in shlex.split(example):
        json.loads(proc.stdout)           # one JSON document on stdout
    return out


def test_every_example_has_a_runner() -> None:
    groups = [*LOCAL, *SWEEPS, FEMU_EXAMPLE, LOOP_EXAMPLE]
    assert len(groups) == len(set(groups))
    assert sorted(groups) == sorted(EXAMPLES)
    assert set(PROMISES) <= set(EXAMPLES), set(PROMISES) - set(EXAMPLES)
    assert ordered(LOCAL)                  # no example waits on one that never runs


def test_ordering_puts_writers_first() -> None:
    exs = ["kvwear report runs/x", "kvwear trace inspect out/a/b.parquet", "kvwear run -o runs/x",
           "kvwear trace generate multi-round -o out/a/b.parquet"]
    got = ordered(exs)
    assert got.index("kvwear run -o runs/x") < got.index("kvwear report runs/x")
    assert got.index("kvwear trace generate multi-round -o out/a/b.parquet") < got.index(
        "kvwear trace inspect out/a/b.parquet")


def units(examples: list[str]) -> list[list[str]]:
    """`examples` (in the order of `ordered`) cut into the units a test runs: the examples linked
    by reading each other's outputs (transitively) make one unit, in order; every other example is
    a unit of its own. A unit runs in one clone, whichever pytest-xdist worker takes it."""
    parent = {e: e for e in examples}

    def root(e: str) -> str:
        while parent[e] != e:
            e = parent[e]
        return e

    for e in examples:
        for w in examples:
            if w != e and reads_output_of(e, w):
                parent[root(e)] = root(w)
    members: dict[str, list[str]] = {}
    for e in ordered(examples):
        members.setdefault(root(e), []).append(e)
    return list(members.values())


FDP_EXAMPLE = "kvwear run --placement kind --policy lru --policy gandalf -o runs/fdp"
DEMO_EXAMPLE = "kvwear run -o out/demo --resume"
UNITS = units(LOCAL)


def _check_demo_report(work: Path) -> None:
    """After the demo's unit (its run and the reports of it): its report as a reader sees it."""
    assert "log axis, the uniform-random reference WAF" in (work / "out/demo/report/report.html").read_text()
    # the demo's report as a reader sees it (issue #25): headline and ranking on the first 1,280 × 800
    # screen, nothing wider than the window, every image loaded, no console error, no clipped text
    build_run_report(work / "out/demo")            # with the default lifetime, as `kvwear run` wrote it
    assert_reads_well(work / "out/demo/report/report.html", "demo-report", first_screen=("#headline", "#ranking"))


def _check_fdp(work: Path) -> None:
    """--placement kind: the byte checks, per placement handle too, hold."""
    for label in ("lru", "gandalf"):
        checks = Estimate.load(work / f"runs/fdp/estimate/{label}/crossval.json").checks
        acc = [c for c in checks if c.kind == "accounting"]
        assert acc and all(c.passed for c in acc), acc


MOONCAKE_EXAMPLE = "kvwear run configs/mooncake-chat.toml -o runs/mooncake --resume"


def _check_config_run(work: Path) -> None:
    """A shipped config's run (tests/test_configs.py runs the others): one results row per policy of
    the config, every byte check passed, and the SSD tier written."""
    cfg = load_config(work / "configs/mooncake-chat.toml")
    rows = read_table(RESULTS, work / "runs/mooncake/results.parquet").to_pylist()
    assert len(rows) == len(cfg.policies)
    assert all(r["accounting_checks_passed"] == r["accounting_checks_total"] > 0 for r in rows), rows
    assert any(r["ssd_write_bytes"] > 0 for r in rows)


#: What some units are checked for after their examples ran (by the unit's first example).
AFTER = {DEMO_EXAMPLE: _check_demo_report, FDP_EXAMPLE: _check_fdp, MOONCAKE_EXAMPLE: _check_config_run}


@pytest.fixture(scope="session")
def session_clone() -> Iterator[Path]:
    """One fresh clone for the example units of this session (of each worker, under pytest-xdist):
    the units write different outputs, so they share it as the examples of one newcomer would."""
    with fresh_clone() as dest:
        yield dest


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("unit", [pytest.param(u, id=u[0].removeprefix("kvwear ")[:80]) for u in UNITS])
def test_examples_in_a_fresh_clone(session_clone: Path, unit: list[str]) -> None:
    for example in unit:
        run_example(example, session_clone)
    if unit[0] in AFTER:
        AFTER[unit[0]](session_clone)


def test_units_keep_writers_before_readers() -> None:
    assert sorted(e for u in UNITS for e in u) == sorted(LOCAL)
    assert all(u == ordered(u) for u in UNITS)
    assert set(AFTER) <= {u[0] for u in UNITS}
    demo = next(u for u in UNITS if u[0] == DEMO_EXAMPLE)
    assert "kvwear report out/demo --waf uniform" in demo          # the text _check_demo_report reads
    assert units(["kvwear report runs/x", "kvwear run -o runs/x", "kvwear models list"]) == [
        ["kvwear run -o runs/x", "kvwear report runs/x"], ["kvwear models list"]]


def _free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dask_cluster(tmp_path: Path) -> Iterator[str]:
    """A Dask scheduler and one worker on this host (the sweep example's port, 8786, or a free one
    when it is taken), as `dask scheduler` / `dask worker` start them; stopped after the test."""
    dask = Path(sys.executable).parent / "dask"
    if not dask.is_file():
        pytest.fail(f"no dask console script beside {sys.executable} (pip install -e '.[cluster]')")
    port = _free_port(8786)
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    log = (tmp_path / "dask.log").open("w")
    # the worker writes the sweep's points into the example's store: it runs as the examples do,
    # in a scratch folder of that user's
    who = as_newcomer()
    scratch = Path(tempfile.mkdtemp(prefix="kvwear-dask-"))
    if who:
        os.chown(scratch, who["user"], who["group"])
    procs = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, env=env)]
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "dask.log").read_text()
                time.sleep(0.3)
        procs.append(subprocess.Popen([str(dask), "worker", address, "--nworkers", "1", "--nthreads", "1",
                                       "--no-dashboard", "--local-directory", str(scratch)], stdout=log,
                                      stderr=subprocess.STDOUT, env={**env, "HOME": str(scratch)}, cwd=scratch,
                                      **who))
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.timeout(3600)
def test_sweep_examples_in_a_fresh_clone(session_clone: Path, dask_cluster: str) -> None:
    work = session_clone            # its sweeps/ is its own, and removed at the end
    n = None
    for example in sorted(SWEEPS, key=lambda e: "--scheduler" not in e):     # the Dask one on an empty store
        out = run_example(example, work, replace={"tcp://127.0.0.1:8786": dask_cluster})
        m = re.search(r"done (\d+), failed 0, already finished (\d+)", out)
        assert m, out[-2000:]
        total = int(m.group(1)) + int(m.group(2))
        assert n is None or total == n
        n = total
        store = outputs(example)[0]
        assert (work / store / "report/sweep_report.html").is_file()
        assert len(list((work / store / "results").glob("*.parquet"))) == total
    assert n == 20
    # the README sweep's report as a reader sees it (issue #25): panels within 1,280 px, readable
    assert_reads_well(work / store / "report/sweep_report.html", "sweep-report")
    shutil.rmtree(work / "sweeps")


def test_femu_example() -> None:
    binary = Path(next(a for a in shlex.split(FEMU_EXAMPLE) if a.endswith("qemu-system-x86_64"))).expanduser()
    if not binary.is_file():
        pytest.skip(f"{FEMU_EXAMPLE!r} needs the user's FEMU build, and {binary} does not exist")
    with fresh_clone() as work:        # cloned only when the example can run
        # as a shell would expand them: ~ and $HOME
        run_example(os.path.expandvars(FEMU_EXAMPLE.replace("~", str(Path.home()))), work)
