"""Adversarial harness for issue #28: hand kvwear bad input of every class and damaged files of every
kind it reads back, and tally what it did.

    python scripts/adversary.py WORKDIR [--class NAME[,NAME...]] [--only SUBSTR] [--kvwear CMD] [--kills]

Classes (all but `kills` by default; `--kills` adds it):
  cli       absurd values of every `simulate` and `run` flag that takes a number, a size, a spec or a path;
  config    every setting of a run config's TOML set to values outside what it means (NaN, ±inf,
            negative, 2^63 − 1, a fraction for an integer, the wrong type, an unknown choice);
  trace     one record of a Mooncake JSONL or a Weka JSON trace with one field absurd, missing or of
            the wrong type (inspect, convert, simulate);
  requests  a requests Parquet table with one column's value absurd, a column missing or retyped,
            its kind/version metadata gone, the file truncated (inspect, simulate);
  model     a Hugging Face config.json with one dimension absurd, missing or inconsistent with the
            architecture (models show, simulate --model);
  rundir    one small real run (sim device, 3 sessions × 2 turns, lru and gandalf); every file a
            resume or a report reads, damaged each way that fits it (truncated, garbage, deleted,
            emptied, `{}`/`[]` for JSON), then `kvwear run --resume` (which rebuilds the report); plus
            config.toml deleted and resumed under another config, and a killed writer's `.partial`;
  sweep     one small sweep (two points); each file of its store damaged the same ways, then the
            sweep run again and `kvwear report SWEEP`;
  kills     a `file:` run killed with SIGKILL (its process group) as each stage marker appears and
            halfway to the next, then resumed: every Parquet table must equal an uninterrupted run's.

Each case is one of:
  ok         exit 0 where that is right: the resume's tables equal the undamaged run's, or the input
             was legal;
  error      exit status 2 and one line `kvwear: error: ...` (a clear refusal);
  traceback  a Python traceback on stderr, or exit 1;
  unclear    exit 2 but not one `kvwear: error:` line;
  wrong      exit 0 with an absurd input accepted, other results than the undamaged run's, an input
             file changed, or a damaged file left in place after a resume that succeeded;
  leftover   a `.partial-*` file, an image or an output of a refused command left behind;
  hang       no exit within the timeout.
Prints the tallies per class and each case that is not ok/error. Removes WORKDIR's cases as it goes.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

RUN_ARGS = ["--param", "sessions=3", "--param", "turns=2", "-p", "lru", "-p", "gandalf", "--dram", "1GB",
            "--ssd", "4GB"]
SMALL_RUN = ["--param", "sessions=2", "--param", "turns=2", "-p", "lru", "--dram", "1GB", "--ssd", "4GB"]
SKIP_SUFFIXES = (".png", ".svg", ".html", ".md", ".csv")
TIMEOUT_S = 600
Tally = dict[str, collections.Counter[str]]


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


def run(cmd: list[str], args: list[str], cwd: Path | None = None) -> tuple[int, str]:
    try:
        proc = subprocess.run([*cmd, *args], capture_output=True, text=True, check=False, cwd=cwd,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, "hang"
    return proc.returncode, proc.stderr


def table_rows(path: Path) -> list[dict[str, object]] | None:
    """A Parquet table's rows without its timing columns (wall-clock times differ run to run)."""
    try:
        t = pq.read_table(path)
    except Exception:  # any unreadable table is "no table"
        return None
    keep = [c for c in t.column_names if not c.endswith("elapsed_s") and "wall" not in c
            and not c.endswith("_unix_s")]
    return t.select(keep).to_pylist()


def results_of(run_dir: Path) -> list[dict[str, object]] | None:
    return table_rows(run_dir / "results.parquet")


def kept(damaged: tuple[Path, bytes] | None, d: Path, base: Path) -> bool:
    """The damage is still in place (the same bytes) after a resume that succeeded."""
    if damaged is None or not damaged[0].exists():
        return False
    orig = base / damaged[0].relative_to(d)
    return damaged[0].read_bytes() == damaged[1] != (orig.read_bytes() if orig.exists() else None)


def classify(rc: int, err: str) -> str:
    if rc == -1 and err == "hang":
        return "hang"
    if "Traceback" in err:
        return "traceback"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc == 2:
        return "error" if len(lines) == 1 and lines[0].startswith("kvwear: error: ") else "unclear"
    if rc == 0:
        return "ok"
    return "traceback"


def last_line(err: str) -> str:
    return ([ln for ln in err.splitlines() if ln.strip()][-1:] or [""])[0][:200]


# -- input classes: a case is files written into its folder and one command --------------------

@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    files: dict[str, bytes]
    argv: list[str]              # "{d}" is the case's folder
    out: str = ""                # what a refused command must not leave behind ("{d}"-relative)
    expect: str = "error"        # "error": absurd, must be refused; "ok": a legal edge, must run


# The input classes' cases each run one short command: a server imports kvwear once and forks a
# child per case, which runs kvwear's entry point as `python -m kvwear.harness.cli.main` would
# (its own process, its own folder, stderr to a file); an exception that escapes is printed as the
# interpreter would (a traceback) and exits 1.
SERVER = r"""
import json, os, signal, sys, time, traceback
from kvwear.harness.cli.main import main
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            os.chdir(req["cwd"])
            fd = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            sys.argv = ["kvwear", *req["argv"]]
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            rc = -1
            break
        time.sleep(0.01)
    print(json.dumps({"rc": rc}), flush=True)
"""


class Forker:
    """The server above, started with the interpreter (and environment) of `cmd`."""

    def __init__(self, cmd: list[str], work: Path) -> None:
        if cmd[-2:] != ["-m", "kvwear.harness.cli.main"]:
            raise SystemExit("--kvwear must end with '-m kvwear.harness.cli.main' for the input classes")
        self.err = work / "stderr.txt"
        self.proc = subprocess.Popen([*cmd[:-2], "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=work)

    def run(self, argv: list[str], cwd: Path) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "err": str(self.err),
                                          "timeout": TIMEOUT_S}) + "\n")
        self.proc.stdin.flush()
        rc = json.loads(self.proc.stdout.readline())["rc"]
        err = self.err.read_text(errors="replace")
        return rc, ("hang" if rc == -1 else err)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def input_case(forker: Forker, work: Path, c: Case) -> tuple[str, str]:
    d = work / "case"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for name, body in c.files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(body)
    before = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    rc, err = forker.run([a.replace("{d}", str(d)) for a in c.argv], d)
    verdict = classify(rc, err)
    if verdict == "ok" and c.expect == "error":
        verdict = "wrong"
        err += "\n(exit 0: accepted)"
    elif verdict == "error" and c.expect == "ok":
        verdict = "wrong"
    if verdict in ("ok", "error"):
        if any(p.read_bytes() != body for p, body in before.items() if p.exists()):
            verdict = "wrong"
            err += "\n(an input file changed)"
        elif any("partial" in p.name for p in d.rglob("*")) or (
                verdict == "error" and c.out and (d / c.out).exists()
                and (not (d / c.out).is_dir() or any((d / c.out).iterdir()))):
            verdict = "leftover"
    shutil.rmtree(d, ignore_errors=True)
    return verdict, err


CLI_SIZES = ["-1GB", "nan", "inf", "-inf", "1e400GB", "abc", "nanGB", "infGB", "1e30PB", "GB", "1..2GB", ""]
CLI_FLOATS = ["nan", "inf", "-inf", "-1", "1e309", "abc", ""]


def cli_cases(trace: Path) -> Iterator[Case]:
    sim = ["simulate", "-t", str(trace), "-p", "lru", "--dram", "1GB", "--ssd", "4GB", "-o", "{d}/sim"]
    for flag in ("--dram", "--ssd", "--hbm", "--ssd-read-per-s", "--hbm-load-per-s"):
        for v in CLI_SIZES:
            yield Case(f"simulate {flag} {v!r}", {}, [*sim, flag, v], "sim")
    for flag in ("--ssd-read-per-s", "--hbm-load-per-s", "--interval"):
        yield Case(f"simulate {flag} '0'", {}, [*sim, flag, "0"], "sim")
    for v in ["-1", "nan", "inf", "0", "abc", "1e400", "-5min", "nan s"]:
        yield Case(f"simulate --interval {v!r}", {}, [*sim, "--interval", v], "sim")
    for flag in ("--recompute-tokens-per-s", "--gpu-usd-per-hour", "--ssd-usd-per-tb-written"):
        for v in CLI_FLOATS:
            yield Case(f"simulate {flag} {v!r}", {}, [*sim, flag, v], "sim")
    yield Case("simulate --recompute-tokens-per-s '0'", {}, [*sim, "--recompute-tokens-per-s", "0"], "sim")
    for v in ["0", "-1", "1e3", "abc", "4294967296", "1048577"]:
        yield Case(f"simulate --block-tokens {v!r}", {}, [*sim, "--block-tokens", v], "sim")
    for v in ["0", "-1", "abc", "1.5"]:
        yield Case(f"simulate --max-requests {v!r}", {}, [*sim, "--max-requests", v], "sim")
    for v in ["gandalf:gamma=nan", "gandalf:gamma=-1", "gandalf:gamma=1e308", "lru-k:k=0", "lru-k:k=1e30",
              "lru-k:k=1.5", "nosuch", "lru:nosuch=1", "gandalf:gamma=", ":", "",
              "gandalf:gamma=1,gamma=2", "gandalf:budget=nosuch", "meritkv:tau_s=-0.5", "meritkv:tau_s=inf"]:
        yield Case(f"simulate --policy {v!r}", {}, [*sim[:3], "-p", v, *sim[5:]], "sim")
    yield Case("simulate --policy 'lru:' (no parameters: legal)", {}, [*sim[:3], "-p", "lru:", *sim[5:]], "sim", "ok")
    for v in ["nosuch", "", "/dev/null", "{d}/nope.json", "/proc/self/status", "{d}"]:
        yield Case(f"simulate --model {v!r}", {}, [*sim, "--model", v], "sim")
    for v in ["/dev/null", "{d}", "/nonexistent.parquet", "/proc/self/status"]:
        yield Case(f"simulate --trace {v!r}", {}, [sim[0], "-t", v, *sim[3:]], "sim")
    yield Case("simulate --format nosuch", {}, [*sim, "--format", "nosuch"], "sim")
    runa = ["run", *SMALL_RUN, "-o", "{d}/r"]
    for key in ("sessions", "turns"):
        for v in ["nan", "inf", "-1", "0", "1e30", "1.5", "", "abc", "[1]"]:
            yield Case(f"run --param {key}={v}", {}, [*runa, "--param", f"{key}={v}"], "r")
    yield Case("run --param nosuch=1", {}, [*runa, "--param", "nosuch=1"], "r")
    for opt in ("op_ratio", "pages_per_block", "page_bytes", "blocks_per_plane"):
        for v in ["nan", "-1", "inf", "1e30", "abc"]:
            yield Case(f"run --device-option {opt}={v}", {}, [*runa, "--device-option", f"{opt}={v}"], "r")
    for v in ["-1", "abc", "1e30", str(2**64), "1.5"]:
        yield Case(f"run --seed {v}", {}, [*runa, "--seed", v], "r")
    for v in ["nan", "0", "-1", "2", "inf", "abc"]:
        yield Case(f"run --sample-fraction {v}", {}, [*runa, "--sample-fraction", v], "r")
    for v in ["file:/proc/kvwear.img", "block:/nonexistent", "block:/dev/null", "block:{d}/regular",
              "file:", "block:", "nosuch:x", "file:{d}"]:
        yield Case(f"run --device {v}", {"regular": b"x" * 4096}, [*runa, "--device", v], "r")
    for v in ["nosuch", "bcc:extra"]:
        yield Case(f"run --tracer {v}", {}, [*runa, "--tracer", v], "r")
    for v in ["/dev/null", "/proc/kvwear-run"]:
        yield Case(f"run -o {v}", {}, [*runa[:-1], v], "")


def _toml(v: object) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return json.dumps(v)


# a free-text setting: any text is a legal value
FREE_TEXT = {"name", "trace", "target", "confirm_serial", "confirm_overwrite", "format"}


def config_cases() -> Iterator[Case]:
    from kvwear.harness.pipeline.config import _SECTIONS

    base = {"policies": ["lru"], "workload": {"params": {"sessions": 2, "turns": 2}},
            "tiers": {"dram": "1GB", "ssd": "4GB"}}

    def toml(section: str, key: str, value: object) -> bytes:
        data = json.loads(json.dumps(base))
        data.setdefault(section, {})[key] = value
        lines = [f"policies = {_toml(data.pop('policies'))}"]
        for sec, body in data.items():
            lines.append(f"[{sec}]")
            for k, v in body.items():
                lines.append(f"{k} = {_toml(v) if not isinstance(v, dict) else _inline(v)}")
        return ("\n".join(lines) + "\n").encode()

    def _inline(m: dict[str, object]) -> str:
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in m.items()) + "}"

    absurd: dict[type, list[object]] = {
        int: [-1, 2**63 - 1, 1.5, "abc", True, [1], math.nan],
        float: [math.nan, math.inf, -math.inf, -1.0, "abc", [1.0]],
        bool: ["abc", 2, [True]],
        str: [5, [1], {"a": 1}],
    }
    sizes: list[object] = [-1, "-1GB", "1e30PB", "nanGB", "abc", 1.5, [1]]
    for section, cls in _SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if f.name.endswith("_bytes"):
                values = sizes
            elif tp in absurd:
                # a number in a text setting is its text (kvwear.values): legal where any text is
                values = [v for v in absurd[tp] if not (tp is str and f.name in FREE_TEXT and isinstance(v, int))]
                if tp is str and f.name not in FREE_TEXT:
                    values.append("nosuch-value")
            else:
                continue     # tables and lists (params, options, wear_readers): the cli class covers them
            for v in values:
                if f.name == "seed" and v == 2**63 - 1:
                    continue     # the largest seed: legal
                yield Case(f"config [{section}] {f.name} = {_toml(v)}", {"c.toml": toml(section, f.name, v)},
                           ["run", "{d}/c.toml", "-o", "{d}/r"], "r")
    for v in ["nosuch-model", "", "/dev/null"]:
        yield Case(f"config model = {v!r}", {"c.toml": f'model = "{v}"\n'.encode()},
                   ["run", "{d}/c.toml", "-o", "{d}/r"], "r")
    for v in ["[]", '["nosuch"]', '["lru", 5]', "5", '["gandalf:gamma=nan"]']:
        yield Case(f"config policies = {v}", {"c.toml": f"policies = {v}\n".encode()},
                   ["run", "{d}/c.toml", "-o", "{d}/r"], "r")
    for v in ["version = 0", "version = 2", 'version = "1"', "workload = 5", "[workload.nosuch]\na = 1",
              "\ufeffname = 'x'", "name = 'a'\nname = 'b'"]:
        yield Case(f"config {v!r}", {"c.toml": (v + "\n").encode()}, ["run", "{d}/c.toml", "-o", "{d}/r"], "r")


MOONCAKE = {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}
WEKA_REQ = {"t": 0.0, "type": "n", "in": 128, "out": 5, "hash_ids": [1, 2]}
MISSING = object()


def trace_cases() -> Iterator[Case]:
    def mooncake(field: str, value: object) -> bytes:
        rec = {**MOONCAKE, "timestamp": 1000}
        if value is MISSING:
            del rec[field]
        else:
            rec[field] = value
        good = [json.dumps({**MOONCAKE, "timestamp": t}) for t in (0, 2000)]
        return "\n".join([good[0], json.dumps(rec), good[1]]).encode() + b"\n"

    absurd: dict[str, list[object]] = {
        "timestamp": [math.nan, math.inf, -1, 1e308, 2**63, "x", None, [], MISSING, True],
        "input_length": [0, -1, 1e15, 2**63, 1.5, "x", None, MISSING, math.nan],
        "output_length": [-1, 1e15, 2**63, 1.5, "x", None, math.nan],
        "hash_ids": [[], ["a", "b", "c"], [1.5, 2, 3], [2**64, 1, 2], None, 5, MISSING,
                     list(range(40)), [1]],
    }
    cmds = [("inspect", ["trace", "inspect", "{d}/t.jsonl", "--format", "mooncake"], ""),
            ("convert", ["trace", "convert", "{d}/t.jsonl", "--format", "mooncake", "-o", "{d}/o.parquet"],
             "o.parquet"),
            ("simulate", ["simulate", "-t", "{d}/t.jsonl", "--format", "mooncake", "-p", "lru", "--dram", "1GB",
                          "--ssd", "4GB", "-o", "{d}/sim"], "sim")]
    for field, values in absurd.items():
        for v in values:
            shown = "missing" if v is MISSING else _toml(v)
            body = mooncake(field, v)
            if v is not MISSING and isinstance(v, float) and not math.isfinite(v):
                body = body.replace(b"NaN", b"NaN").replace(b"Infinity", b"Infinity")
            for cname, argv, out in cmds:
                yield Case(f"mooncake {field}={shown} ({cname})", {"t.jsonl": body}, argv, out)

    def weka(field: str, value: object) -> bytes:
        req = {**WEKA_REQ, "t": 1.0}          # the second request; its field set after its time
        if value is MISSING:
            del req[field]
        else:
            req[field] = value
        return json.dumps({"id": "w", "block_size": 64, "requests": [WEKA_REQ, req]}).encode()

    wabsurd: dict[str, list[object]] = {
        "t": [math.nan, -1.0, 1e308, "x", None, MISSING],
        "in": [0, -1, 1e15, 1.5, "x", None, MISSING],
        "out": [-1, 1e18, 1.5, "x"],
        "hash_ids": [[], ["a"], None, 5, list(range(40))],
        "type": [5, [1]],              # null is "not given": a request
    }
    for field, values in wabsurd.items():
        for v in values:
            shown = "missing" if v is MISSING else _toml(v)
            yield Case(f"weka {field}={shown} (inspect)", {"w.json": weka(field, v)},
                       ["trace", "inspect", "{d}/w.json", "--format", "weka"])
            yield Case(f"weka {field}={shown} (convert)", {"w.json": weka(field, v)},
                       ["trace", "convert", "{d}/w.json", "--format", "weka", "-o", "{d}/o.parquet"], "o.parquet")
    top: list[tuple[str, dict[str, object]]] = [
        ("block_size 0", {"block_size": 0}), ("block_size -1", {"block_size": -1}),
        ("block_size 'x'", {"block_size": "x"}), ("requests 5", {"requests": 5}),
        ("requests missing", {"requests": MISSING})]
    for bname, change in top:
        doc: dict[str, object] = {"id": "w", "block_size": 64, "requests": [WEKA_REQ]}
        for k, v in change.items():
            if v is MISSING:
                doc.pop(k)
            else:
                doc[k] = v
        yield Case(f"weka {bname} (convert)", {"w.json": json.dumps(doc).encode()},
                   ["trace", "convert", "{d}/w.json", "--format", "weka", "-o", "{d}/o.parquet"], "o.parquet")
    for fname, body in [("binary", bytes(range(256))), ("truncated", b'{"timestamp": 0, "inp'),
                        ("a JSON array", b"[1, 2, 3]\n")]:
        yield Case(f"mooncake file {fname} (convert)", {"t.jsonl": body},
                   ["trace", "convert", "{d}/t.jsonl", "--format", "mooncake", "-o", "{d}/o.parquet"], "o.parquet")
    # legal: a hash id is a label (a negative one keys a block like any other); a trace of no
    # requests converts to a table of none (simulate and run refuse it)
    for fname, body in [("empty", b""), ("blank lines", b"\n\n\n")]:
        yield Case(f"mooncake file {fname} (convert; legal)", {"t.jsonl": body},
                   ["trace", "convert", "{d}/t.jsonl", "--format", "mooncake", "-o", "{d}/o.parquet"], "", "ok")
        yield Case(f"mooncake file {fname} (simulate)", {"t.jsonl": body},
                   ["simulate", "-t", "{d}/t.jsonl", "--format", "mooncake", "-o", "{d}/sim"], "sim")
    yield Case("mooncake hash_ids=[-1, 2, 3] (convert; legal)", {"t.jsonl": mooncake("hash_ids", [-1, 2, 3])},
               ["trace", "convert", "{d}/t.jsonl", "--format", "mooncake", "-o", "{d}/o.parquet"], "", "ok")


def requests_cases(trace: Path) -> Iterator[Case]:
    table = pq.read_table(trace)
    cmds = [("inspect", ["trace", "inspect", "{d}/t.parquet"], ""),
            ("simulate", ["simulate", "-t", "{d}/t.parquet", "-p", "lru", "--dram", "1GB", "--ssd", "4GB", "-o",
                          "{d}/sim"], "sim")]

    def body(t: pa.Table) -> bytes:
        sink = pa.BufferOutputStream()
        pq.write_table(t, sink)
        return bytes(sink.getvalue().to_pybytes())

    def with_value(col: str, row: int, v: object) -> pa.Table:
        values = table.column(col).to_pylist()
        values[row] = v
        i = table.column_names.index(col)
        return table.set_column(i, table.schema.field(i), pa.array(values, type=table.schema.field(i).type))

    absurd: dict[str, list[object]] = {
        "arrival_s": [math.nan, math.inf, -1.0, 1e308, -math.inf],
        "input_tokens": [-5, 0, 2**62],
        "output_tokens": [-1, 2**62],
        "block_tokens": [0, -16, 2**30],
        "hashed_tokens": [-1, 10**9],
        "hash_ids": [[], [1, 2], list(range(5000))],
        "turn": [-1],
    }
    variants: list[tuple[str, bytes]] = []
    for col, values in absurd.items():
        for v in values:
            shown = _toml(v) if not isinstance(v, list) else f"[{len(v)} ids]"
            variants.append((f"{col}={shown} in row 1", body(with_value(col, 1, v))))
    # a request's id is a label: the simulator orders and keys requests by position, so a negative
    # or repeated id is legal (results as with distinct ids)
    legal = [("request_id=-1 in row 1", body(with_value("request_id", 1, -1))),
             ("request_id repeated", body(with_value("request_id", 1, table.column("request_id")[0].as_py())))]
    for col in ("arrival_s", "input_tokens", "hash_ids", "block_tokens", "session_id"):
        variants.append((f"{col} missing", body(table.drop_columns([col]))))
    variants.append(("arrival_s as text", body(table.set_column(
        table.column_names.index("arrival_s"), "arrival_s", table.column("arrival_s").cast(pa.string())))))
    variants.append(("input_tokens as double", body(table.set_column(
        table.column_names.index("input_tokens"), "input_tokens", table.column("input_tokens").cast(pa.float64())))))
    variants.append(("no kvwear metadata", body(table.replace_schema_metadata({}))))
    variants.append(("schema version 99", body(table.replace_schema_metadata(
        {**(table.schema.metadata or {}), b"kvwear.schema_version": b"99"}))))
    variants.append(("kind results", body(table.replace_schema_metadata(
        {**(table.schema.metadata or {}), b"kvwear.kind": b"results"}))))
    variants.append(("zero rows", body(table.slice(0, 0))))
    whole = body(table)
    variants += [("truncated", whole[: len(whole) // 2]), ("garbage", b"PAR1" + b"\x00" * 64 + b"PAR1"),
                 ("empty", b""), ("another table", body(pa.table({"x": [1, 2]})))]
    for vname, data in variants:
        for cname, argv, out in cmds:
            yield Case(f"requests {vname} ({cname})", {"t.parquet": data}, argv, out,
                       "ok" if vname == "zero rows" and cname == "inspect" else "error")
    for vname, data in legal:
        for cname, argv, out in cmds:
            yield Case(f"requests {vname} ({cname}; legal)", {"t.parquet": data}, argv, out, "ok")


HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "intermediate_size": 14336,
      "torch_dtype": "bfloat16", "vocab_size": 128256}


def model_cases(trace: Path) -> Iterator[Case]:
    absurd: dict[str, list[object]] = {
        "num_hidden_layers": [0, -1, 2**40, 1.5, "x", None, math.nan, MISSING],
        "num_attention_heads": [0, -1, 2**40, "x", None, MISSING],
        "num_key_value_heads": [0, -1, 3, 64, 1.5, "x"],
        "hidden_size": [0, -1, 2**40, 1.5, "x", None, MISSING],
        "head_dim": [0, -1, 2**40, 1.5, "x"],
        "torch_dtype": ["nosuch", 5],
    }

    def model(field: str, v: object) -> bytes:
        cfg = dict(HF)
        if v is MISSING:
            cfg.pop(field, None)
        else:
            cfg[field] = v
        return json.dumps(cfg).encode()

    for field, values in absurd.items():
        for v in values:
            shown = "missing" if v is MISSING else _toml(v)
            files = {"m/config.json": model(field, v)}
            yield Case(f"model {field}={shown} (show)", files, ["models", "show", "{d}/m/config.json"])
            yield Case(f"model {field}={shown} (simulate)", files,
                       ["simulate", "-t", str(trace), "--model", "{d}/m/config.json", "-p", "lru", "--dram", "1GB",
                        "--ssd", "4GB", "-o", "{d}/sim"], "sim")
    for fname, data in [("{}", b"{}"), ("[]", b"[]"), ("truncated", json.dumps(HF).encode()[:40]),
                        ("binary", bytes(range(256))), ("empty", b"")]:
        yield Case(f"model file {fname} (show)", {"m/config.json": data}, ["models", "show", "{d}/m/config.json"])


# -- run-directory and sweep-store damage ------------------------------------------------------

def rundir_cases(cmd: list[str], work: Path, only: str) -> Iterator[tuple[str, str, str]]:
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

    def case(name: str, prepare: Callable[[Path], tuple[Path, bytes] | None],
             resume_args: list[str] = RUN_ARGS) -> tuple[str, str, str] | None:
        if only not in name:
            return None
        d = work / "case"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d, symlinks=True)
        damaged = prepare(d)
        # the resume builds the report too (the characterization stage runs only for it), from the
        # files it repaired: a second `kvwear report` would read the same files again
        rc, err = run(cmd, ["run", *resume_args, "--resume", "-o", str(d)])
        verdict = classify(rc, err)
        if verdict == "ok":
            if resume_args is not RUN_ARGS:
                verdict = "wrong"          # another config must not resume this run
            elif results_of(d) != want or kept(damaged, d, base):
                verdict = "wrong"
            elif any(d.rglob("*.partial-*")):
                verdict = "leftover"
        if verdict == "ok" and not (d / "report" / "report.html").is_file():
            verdict = "wrong"
        shutil.rmtree(d, ignore_errors=True)
        return name, verdict, err

    # damage by damage, every file each time: a pass cut short has still damaged every file
    order = ["truncated", "garbage", "{}", "deleted", "empty", "[]"]
    todo = sorted(((order.index(dname), str(f.relative_to(base)), dname, body) for f in files
                   for dname, body in damages(f)), key=lambda t: t[:2])
    for _, rel_s, dname, body in todo:
        def prep(d: Path, rel: Path = Path(rel_s), body: bytes | None = body) -> tuple[Path, bytes] | None:
            p = d / rel
            if body is None:
                p.unlink()
                return None
            p.write_bytes(body)
            return p, body
        if (r := case(f"{rel_s} {dname}", prep)) is not None:
            yield r

    def no_config(d: Path) -> None:
        (d / "config.toml").unlink()
    for r in (case("config.toml deleted, resumed with --dram 2GB", no_config,
                   [*RUN_ARGS[:-4], "--dram", "2GB", "--ssd", "4GB"]),
              case("config.toml deleted, resumed with sessions=8", no_config,
                   ["--param", "sessions=8", *RUN_ARGS[2:]])):
        if r is not None:
            yield r

    def partial(d: Path) -> None:
        (d / "policies" / "lru" / ".ssd_ops.parquet.partial-999999").write_bytes(b"half a table")
        (d / ".stages" / "device__lru.json").unlink()
    if (r := case("a killed writer's .partial file", partial)) is not None:
        yield r


SWEEP_TOML = b"""[base]
name = "adv"
model = "kimi-k3"
[base.workload]
generator = "multi-round"
params = { sessions = 2, turns = 2 }
seed = 2
[base.tiers]
dram = "1GB"
ssd = "4GB"
[grid]
policies = ["lru", "fifo"]
"""


def store_rows(store: Path) -> list[str] | None:
    """The store's point rows (without timings), each as sorted JSON; None when one does not read."""
    files = sorted((store / "results").glob("*.parquet"))
    rows = [table_rows(f) for f in files]
    if any(r is None for r in rows):
        return None
    return sorted(json.dumps(r, sort_keys=True, default=str) for rr in rows for r in rr or [])


def sweep_cases(cmd: list[str], work: Path, only: str) -> Iterator[tuple[str, str, str]]:
    base = work / "sweep-base" / "s"
    (work / "sweep-base").mkdir(parents=True, exist_ok=True)
    toml = work / "sweep-base" / "sweep.toml"
    toml.write_bytes(SWEEP_TOML)
    if not (base / "results").is_dir() or len(list((base / "results").glob("*.parquet"))) != 2:
        shutil.rmtree(base, ignore_errors=True)
        rc, err = run(cmd, ["sweep", str(toml), "-o", str(base), "--no-report"])
        assert rc == 0, err
    want = store_rows(base)
    # the store's own files, and one point's run directory's marker, config and results
    files = sorted(p for p in base.rglob("*") if p.is_file() and not p.name.endswith(SKIP_SUFFIXES)
                   and "report" not in p.relative_to(base).parts[:1])
    keys = sorted(p.stem for p in (base / "results").glob("*.parquet"))
    first_point = base / "points" / keys[0]
    files = [p for p in files if "points" not in p.relative_to(base).parts
             or p in (first_point / "config.toml", first_point / "results.parquet")
             or (p.parent == first_point / ".stages" and p.name.startswith(("simulate", "estimate")))]
    order = ["truncated", "garbage", "{}", "deleted", "empty", "[]"]
    todo = sorted(((order.index(dname), str(f.relative_to(base)), f, dname, data) for f in files
                   for dname, data in damages(f)), key=lambda t: t[:2])
    for _, rel_s, f, dname, data in todo:
        rel = Path(rel_s)
        name = f"sweep {rel} {dname}"
        if only not in name:
            continue
        d = work / "sweep-case" / "s"
        shutil.rmtree(d.parent, ignore_errors=True)
        shutil.copytree(base, d, symlinks=True)
        p = d / rel
        if data is None:
            p.unlink()
        else:
            p.write_bytes(data)
        rc, err = run(cmd, ["sweep", str(toml), "-o", str(d), "--no-report"])
        verdict = classify(rc, err)
        if verdict == "ok":
            if store_rows(d) != want:
                verdict = "wrong"
            elif any(d.rglob("*.partial-*")):
                verdict = "leftover"
            elif data is not None and p.exists() and p.read_bytes() == data != f.read_bytes() \
                    and "results" in rel.parts:
                verdict = "wrong"
        if verdict == "ok":
            rrc, rerr = run(cmd, ["report", str(d)])
            rv = classify(rrc, rerr)
            if rv not in ("ok", "error"):
                verdict, err = f"report {rv}", rerr
        shutil.rmtree(d.parent, ignore_errors=True)
        yield name, verdict, err


def all_tables(run_dir: Path) -> dict[str, list[dict[str, object]] | None]:
    return {str(p.relative_to(run_dir)): table_rows(p) for p in sorted(run_dir.rglob("*.parquet"))
            if "report" not in p.relative_to(run_dir).parts[:1]}


def kill_cases(cmd: list[str], work: Path, only: str) -> Iterator[tuple[str, str, str]]:
    """For each stage marker of a `file:` run (in the order they appear): start the run, kill -9 its
    process group as that marker appears (and, second case, halfway between it and the next
    marker), resume; ok when every table equals an uninterrupted file: run's and no image or
    partial file is left."""
    img = work / "drive.img"
    args = [*RUN_ARGS, "--device", f"file:{img}"]
    ref_dir = work / "kill-ref" / "case"
    shutil.rmtree(ref_dir, ignore_errors=True)
    rc, err = run(cmd, ["run", *args, "-o", str(ref_dir)])
    assert rc == 0, err
    ref = all_tables(ref_dir)
    stages = sorted((ref_dir / ".stages").glob("*.json"), key=lambda p: p.stat().st_mtime)
    times = [p.stat().st_mtime for p in stages]
    points: list[tuple[str, str, float]] = []
    for i, m in enumerate(stages):
        points.append((f"kill -9 as {m.name} appears", m.name, 0.0))
        if i + 1 < len(stages):
            points.append((f"kill -9 halfway from {m.name} to {stages[i + 1].name}", m.name,
                           (times[i + 1] - times[i]) / 2))
    for name, marker, after_s in points:
        if only not in name:
            continue
        d = work / "case"
        shutil.rmtree(d, ignore_errors=True)
        proc = subprocess.Popen([*cmd, "run", *args, "-o", str(d)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + TIMEOUT_S
        while proc.poll() is None and not (d / ".stages" / marker).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(after_s)
        killed = proc.poll() is None
        if killed:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc, err = run(cmd, ["run", *args, "--resume", "-o", str(d)])
        verdict = classify(rc, err)
        if verdict == "ok":
            got = all_tables(d)
            if got != ref:
                verdict = "wrong"
                err += "\n(tables differ: " + ", ".join(k for k in sorted(set(got) | set(ref))
                                                       if got.get(k) != ref.get(k))[:300] + ")"
            elif img.exists() or any(d.rglob("*.partial-*")):
                verdict = "leftover"
        if not killed:
            name += " (the run finished first)"
        img.unlink(missing_ok=True)
        shutil.rmtree(d, ignore_errors=True)
        yield name, verdict, err
    shutil.rmtree(ref_dir, ignore_errors=True)


CLASSES = ("cli", "config", "trace", "requests", "model", "rundir", "sweep", "kills")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--kvwear", default=f"{sys.executable} -m kvwear.harness.cli.main")
    ap.add_argument("--class", dest="classes", default=",".join(CLASSES[:-1]),
                    help=f"comma-separated classes among {', '.join(CLASSES)}")
    ap.add_argument("--only", default="", help="only the cases whose name contains this")
    ap.add_argument("--kills", action="store_true", help="also the kills class")
    a = ap.parse_args()
    cmd = shlex.split(a.kvwear)
    work: Path = a.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    # `python -m` puts the working folder first on sys.path: run from WORKDIR, so that a --kvwear
    # with PYTHONPATH (another checkout) is what runs, not a kvwear/ under the caller's folder
    os.chdir(work)
    classes = [c for c in a.classes.split(",") if c] + (["kills"] if a.kills else [])
    unknown = set(classes) - set(CLASSES)
    if unknown:
        ap.error(f"unknown class(es) {', '.join(sorted(unknown))}; choose among {', '.join(CLASSES)}")
    trace = work / "requests.parquet"
    if not trace.exists() and set(classes) & {"cli", "requests", "model"}:
        rc, err = run(cmd, ["trace", "generate", "multi-round", "--sessions", "3", "--turns", "2", "-o", str(trace)])
        assert rc == 0, err
    tally: Tally = {}
    bad: list[str] = []
    forker = Forker(cmd, work) if set(classes) & {"cli", "config", "trace", "requests", "model"} else None
    for cls in classes:
        tally[cls] = collections.Counter()
        results: Iterator[tuple[str, str, str]]
        if cls in ("rundir", "sweep", "kills"):
            results = {"rundir": rundir_cases, "sweep": sweep_cases, "kills": kill_cases}[cls](cmd, work, a.only)
        else:
            gen = {"cli": lambda: cli_cases(trace), "config": config_cases, "trace": trace_cases,
                   "requests": lambda: requests_cases(trace), "model": lambda: model_cases(trace)}[cls]()
            assert forker is not None
            results = ((c.name, *input_case(forker, work, c)) for c in gen if a.only in c.name)
        for name, verdict, err in results:
            tally[cls][verdict] += 1
            line = f"{cls:8s} {verdict:10s} {name}: {last_line(err)}"
            if verdict not in ("ok", "error"):
                bad.append(line)
            print(line, flush=True)         # every case as it ends: a pass cut short still counts
        print(f"{cls}: {dict(sorted(tally[cls].items()))} cases: {sum(tally[cls].values())}", flush=True)
    if forker is not None:
        forker.close()
    print("TOTAL", {c: dict(sorted(t.items())) for c, t in tally.items()})
    for line in bad:
        print(line)


if __name__ == "__main__":
    main()
