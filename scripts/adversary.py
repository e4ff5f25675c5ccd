"""Adversarial harness for issue #28: damage a real run directory's files one at a time in several
ways, then resume the run and rebuild its report, and tally what kvwear did.

    python scripts/adversary.py WORKDIR [--kvwear "python -m kvwear.harness.cli.main"] [--only SUBSTR] [--kills]

It makes one small run (sim device, 3 sessions × 2 turns, lru and gandalf; ~20 s) in WORKDIR/base/case,
then for every file of it that a resume or a report reads (figures, the report's own output, the
second policy's files and all but two characterization tables excepted: they are of the same
kinds) and every damage that fits it (truncated to half, garbage bytes, deleted; a JSON file also
`{}` and `[]`, another file also emptied), copies the run, damages the copy, runs
`kvwear run --resume` with the same arguments and then `kvwear report`. Plus: config.toml
deleted and the run resumed with another config, and a `.partial-<pid>` file left by a killed
writer. With --kills: a `file:` run killed (SIGKILL, its process group) as each of its stage
markers appears, then resumed. Each case is one of:
  ok         the resume exits 0 and its results table equals the undamaged run's;
  error      exit status 2 and one line `kvwear: error: ...` (a clear refusal);
  traceback  a Python traceback on stderr;
  wrong      exit 0 with other results than the undamaged run's, or a damaged file left in place
             (the same bytes as the damage) after a resume that succeeded;
  leftover   exit 0 but a `.partial-*` file remains.
Prints the tallies and each case that is not ok/error. Removes WORKDIR's cases as it goes.
"""

from __future__ import annotations

import argparse
import collections
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

RUN_ARGS = ["--param", "sessions=3", "--param", "turns=2", "-p", "lru", "-p", "gandalf", "--dram", "1GB",
            "--ssd", "4GB"]
SKIP_SUFFIXES = (".png", ".svg", ".html", ".md", ".csv")


def damages(path: Path) -> list[tuple[str, bytes | None]]:
    """(name, new bytes or None for deleted) for a file."""
    body = path.read_bytes()
    out: list[tuple[str, bytes | None]] = [("truncated", body[: len(body) // 2]),
                                           ("garbage", b"\x00\xffnot what was written\n" * 3), ("deleted", None)]
    if path.suffix == ".json":
        out += [("{}", b"{}\n"), ("[]", b"[]\n")]
    else:
        out += [("empty", b"")]
    return out


def run(cmd: list[str], args: list[str]) -> tuple[int, str]:
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, check=False)
    return proc.returncode, proc.stderr


def results_of(run_dir: Path) -> list[dict[str, object]] | None:
    try:
        t = pq.read_table(run_dir / "results.parquet")
    except Exception:  # any unreadable table is "no results"
        return None
    keep = [c for c in t.column_names if not c.endswith("elapsed_s") and "wall" not in c]
    return t.select(keep).to_pylist()


def kept(damaged: tuple[Path, bytes] | None, d: Path) -> bool:
    """The damage is still in place (the same bytes) after a resume that succeeded."""
    if damaged is None or not damaged[0].exists():
        return False
    base = d.parent / "base" / "case" / damaged[0].relative_to(d)
    return damaged[0].read_bytes() == damaged[1] != base.read_bytes()


def classify(rc: int, err: str) -> str:
    if "Traceback" in err:
        return "traceback"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc == 2 and len(lines) == 1 and lines[0].startswith("kvwear: error: "):
        return "error"
    if rc == 0:
        return "ok"
    return "traceback" if rc == 1 else f"exit {rc}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--kvwear", default=f"{sys.executable} -m kvwear.harness.cli.main")
    ap.add_argument("--only", default="")
    ap.add_argument("--kills", action="store_true", help="also kill -9 a file: run as each stage finishes")
    a = ap.parse_args()
    cmd = shlex.split(a.kvwear)
    work: Path = a.workdir
    base = work / "base" / "case"          # the run's name is its folder's: the copies are named the same
    if not (base / "results.parquet").exists():
        shutil.rmtree(base, ignore_errors=True)
        rc, err = run(cmd, ["run", *RUN_ARGS, "-o", str(base)])
        assert rc == 0, err
    want = results_of(base)
    # one policy's files (the other's are the same kinds) and two of the characterization's tables
    files = sorted(p for p in base.rglob("*") if p.is_file() and not p.name.endswith(SKIP_SUFFIXES)
                   and "report" not in p.relative_to(base).parts[:1] and "gandalf" not in p.parts)
    charac = [p for p in files if "characterization" in p.parts]
    files = [p for p in files if p not in charac[2:]]
    tally: collections.Counter[str] = collections.Counter()
    bad: list[str] = []

    def case(name: str, prepare: object, resume_args: list[str] = RUN_ARGS) -> None:
        if a.only not in name:
            return
        d = work / "case"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d, symlinks=True)
        damaged = prepare(d)  # type: ignore[operator]
        rc, err = run(cmd, ["run", *resume_args, "--resume", "-o", str(d)])
        verdict = classify(rc, err)
        if verdict == "ok":
            if resume_args is not RUN_ARGS:
                verdict = "wrong"          # another config must not resume this run
            elif results_of(d) != want or kept(damaged, d):
                verdict = "wrong"
            elif any(d.rglob("*.partial-*")):
                verdict = "leftover"
        if verdict == "ok":
            rrc, rerr = run(cmd, ["report", str(d)])
            rv = classify(rrc, rerr)
            if rv not in ("ok", "error"):
                verdict = f"report {rv}"
        tally[verdict] += 1
        if verdict not in ("ok", "error"):
            last = [ln for ln in err.splitlines() if ln.strip()][-1:] or [""]
            bad.append(f"{verdict:10s} {name}: {last[0][:160]}")
        shutil.rmtree(d, ignore_errors=True)

    for f in files:
        rel = f.relative_to(base)
        for dname, body in damages(f):
            def prep(d: Path, rel: Path = rel, body: bytes | None = body) -> tuple[Path, bytes] | None:
                p = d / rel
                if body is None:
                    p.unlink()
                    return None
                p.write_bytes(body)
                return p, body
            case(f"{rel} {dname}", prep)

    def no_config(d: Path) -> None:
        (d / "config.toml").unlink()
    case("config.toml deleted, resumed with --dram 2GB", no_config,
         [*RUN_ARGS[:-4], "--dram", "2GB", "--ssd", "4GB"])
    case("config.toml deleted, resumed with sessions=8", no_config,
         ["--param", "sessions=8", *RUN_ARGS[2:]])

    def partial(d: Path) -> None:
        (d / "policies" / "lru" / ".ssd_ops.parquet.partial-999999").write_bytes(b"half a table")
        (d / ".stages" / "device__lru.json").unlink()
    case("a killed writer's .partial file", partial)

    if a.kills:
        kill_cases(cmd, work, tally, bad)
    print(dict(sorted(tally.items())), "cases:", sum(tally.values()))
    for line in bad:
        print(line)


def kill_cases(cmd: list[str], work: Path, tally: collections.Counter[str], bad: list[str]) -> None:
    """For each stage marker of a `file:` run (in the order they appear): start the run, kill -9 its
    process group as that marker appears, resume; ok when the results equal an uninterrupted
    file: run's and no image or partial file is left."""
    import os
    import signal
    import time

    img = work / "drive.img"
    args = [*RUN_ARGS, "--device", f"file:{img}"]
    ref_dir = work / "kill-ref" / "case"
    shutil.rmtree(ref_dir, ignore_errors=True)
    rc, err = run(cmd, ["run", *args, "-o", str(ref_dir)])
    assert rc == 0, err
    ref = results_of(ref_dir)
    stages = sorted((ref_dir / ".stages").glob("*.json"), key=lambda p: p.stat().st_mtime)
    for marker in [m.name for m in stages]:
        d = work / "case"
        shutil.rmtree(d, ignore_errors=True)
        proc = subprocess.Popen([*cmd, "run", *args, "-o", str(d)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 600
        while proc.poll() is None and not (d / ".stages" / marker).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc, err = run(cmd, ["run", *args, "--resume", "-o", str(d)])
        verdict = classify(rc, err)
        if verdict == "ok":
            if results_of(d) != ref:
                verdict = "wrong"
            elif img.exists() or any(d.rglob("*.partial-*")):
                verdict = "leftover"
        tally[verdict] += 1
        if verdict not in ("ok", "error"):
            bad.append(f"{verdict:10s} kill -9 as {marker} appears: {(err.strip().splitlines() or [''])[-1][:160]}")
        img.unlink(missing_ok=True)
        shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(ref_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
