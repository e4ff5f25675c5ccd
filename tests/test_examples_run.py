"""Every `kvwear …` example in README.md and in each command's `--help` runs as written: the real
`kvwear` console script in a subprocess (this checkout first on PYTHONPATH), in a scratch
directory that holds the inputs an example names — `conversation_trace.jsonl` and `traces/`
linked from ../shared/traces, `../shared` itself, HF-style `config.json` files and a TOML profile
written here, the README's config and sweep TOML — and each must exit 0 and leave the outputs it
promises (files written, a line printed). Examples that depend on another's output (a report on a
run, a trace characterized after it was generated) run in their order within one group.

Where an example needs hardware, the test provides it or says why it cannot: the `--scheduler`
example gets a Dask scheduler and worker started here; the loop device example runs in
tests/harness/test_run_block.py (root, a loop device it makes); the FEMU example skips, with the
reason, when the FEMU binary it names is not built (it is the user's build). Every example found is
in exactly one of these groups (`test_every_example_has_a_runner`), so none is skipped silently.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kvwear.harness.estimate.estimator import Estimate, PlanRecord
from kvwear.reports.run_report import build_run_report
from tests.conftest import shared_dir
from tests.reports.browser import assert_reads_well
from tests.test_examples import EXAMPLES
from tests.workloads.test_models import MY_K3_TOML, QWEN3_NEXT

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
KVWEAR = Path(sys.executable).parent / "kvwear"
README = (REPO / "README.md").read_text()
# Run in tests/harness/test_run_block.py on a loop device it creates (root).
LOOP_EXAMPLE = next(e for e in EXAMPLES if e.startswith("kvwear run --device block:/dev/loop7"))

# Kimi-Linear-48B-A3B-Instruct's config.json (the keys the profile reads, values as published):
# MLA on 7 of 27 layers, KDA on the others.
KIMI_LINEAR: dict[str, object] = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
    "hidden_size": 2304, "num_hidden_layers": 27, "num_attention_heads": 32,
    "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "mla_use_nope": True, "torch_dtype": "bfloat16",
    "linear_attn_config": {
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "kda_layers": [i for i in range(1, 28) if i not in (4, 8, 12, 16, 20, 24, 27)],
        "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4,
    },
}


@dataclass(frozen=True)
class Expect:
    """What an example promises: paths (relative to its scratch directory) it writes, and a
    regular expression its output (stdout + stderr) matches."""

    files: tuple[str, ...] = ()
    output: str = ""


def _toml_block(marker: str) -> str:
    return next(b for b in re.findall(r"```toml\n(.*?)```", README, re.S) if marker in b)


def scratch(tmp_path: Path) -> Path:
    """tmp_path/work, the examples' working directory, with ../shared beside it and the inputs
    the examples name."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "shared").symlink_to(shared_dir().resolve())
    (work / "conversation_trace.jsonl").symlink_to("../shared/traces/mooncake/conversation_trace.jsonl")
    (work / "traces").symlink_to("../shared/traces/claude-code-weka/traces")
    for name, cfg in (("Qwen3-Next-80B-A3B", QWEN3_NEXT), ("Kimi-Linear-48B-A3B-Instruct", KIMI_LINEAR)):
        (work / name).mkdir()
        (work / name / "config.json").write_text(json.dumps(cfg, indent=2))
    (work / "my-model.toml").write_text(MY_K3_TOML)
    # A trace with one broken line in the middle, for --skip-bad.
    lines = (work / "conversation_trace.jsonl").read_text().splitlines(keepends=True)[:400]
    lines.insert(200, '{"timestamp": 1, "input_length": \n')
    (work / "big.jsonl").write_text("".join(lines))
    (work / "cfg.toml").write_text(_toml_block("[tiers]"))
    sweep = _toml_block("[grid]")
    (work / "sweep.toml").write_text(sweep)
    (work / "fig7.toml").write_text(sweep)
    return work


def run_example(example: str, work: Path, expect: Expect, *, replace: dict[str, str] | None = None) -> str:
    """Run `example` (with `replace`'s substitutions, e.g. a port) in `work`; assert it exits 0 and
    keeps its promise; return its output."""
    assert KVWEAR.is_file(), f"no kvwear console script beside {sys.executable} (pip install -e .)"
    line = example
    for old, new in (replace or {}).items():
        line = line.replace(old, new)
    argv = [str(KVWEAR), *shlex.split(line)[1:]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200"}
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{example}: exit {proc.returncode} after {time.monotonic() - t0:.0f} s\n{out[-3000:]}"
    for f in expect.files:
        assert (work / f).exists(), f"{example}: did not write {f}\n{out[-2000:]}"
    if expect.output:
        assert re.search(expect.output, out, re.S), f"{example}: output lacks {expect.output!r}\n{out[-2000:]}"
    return out


# In the order each group runs them (later ones read what earlier ones wrote).
MODELS_AND_TRACES: dict[str, Expect] = {
    "kvwear models list": Expect(output=r"kimi-k3.*1015\.8"),
    "kvwear models list --block-tokens 64 --config ./Qwen3-Next-80B-A3B/config.json":
        Expect(output=r"Qwen3-Next-80B-A3B"),
    "kvwear models show kimi-k3": Expect(output=r"1015\.8"),
    "kvwear models show ./Kimi-Linear-48B-A3B-Instruct/config.json --block-tokens 64":
        Expect(output=r"Kimi-Linear-48B-A3B-Instruct.*arithmetic"),
    "kvwear models show my-model.toml": Expect(output=r"my-k3.*1015\.8"),
    "kvwear simulate --list-policies": Expect(output=r"gandalf.*belady"),
    "kvwear trace inspect conversation_trace.jsonl": Expect(output=r"requests\s*│\s*12,031"),
    "kvwear trace inspect traces/ --format weka --block-tokens 16": Expect(output=r"weka.*16 tokens"),
    "kvwear trace convert conversation_trace.jsonl -o mooncake.parquet":
        Expect(("mooncake.parquet",), r"wrote 12,031 requests"),
    "kvwear trace convert traces/ --format weka -o weka.parquet --block-tokens 16": Expect(("weka.parquet",)),
    "kvwear trace convert big.jsonl -o big.parquet --skip-bad":
        Expect(("big.parquet",), r"wrote 400 requests.*skipped 1 bad line"),
    "kvwear trace generate multi-round --sessions 40 --turns 20 --seed 1 -o out/demo/requests.parquet":
        Expect(("out/demo/requests.parquet",)),
    "kvwear trace generate multi-round --sessions 20 --turns 100 -o long.parquet": Expect(("long.parquet",)),
    "kvwear trace generate agentic --sessions 50 --subagent-prob 0.15 -o agent.parquet": Expect(("agent.parquet",)),
    "kvwear trace generate api --requests 100000 --qps 500 --system-prompts 4 -o api.parquet":
        Expect(("api.parquet",), r"100,000"),
    "kvwear trace generate trace-a --multi-turn-share 0.3 --reuse-mean-s text=60,file=300,image=60,search=30 "
    "-o a.parquet": Expect(("a.parquet",)),
    "kvwear trace generate trace-a --sessions 20000 -o trace_a.parquet": Expect(("trace_a.parquet",)),
    "kvwear trace inspect requests.parquet --json": Expect(output=r'"requests"'),   # 40 sessions × 20 turns
    "kvwear trace inspect requests.parquet --memory-budget 64MiB": Expect(output=r"unique_blocks"),
    "kvwear trace characterize out/demo/requests.parquet --model kimi-k3 -o out/demo/characterization":
        Expect(("out/demo/characterization/summary.json", "out/demo/characterization/reuse_time_cdf.png")),
    "kvwear trace characterize conversation_trace.jsonl --format mooncake -m llama3-70b -o out/mc":
        Expect(("out/mc/summary.json", "out/mc/lifespan_cdf.png")),
    "kvwear trace characterize conversation_trace.jsonl -m qwen3.5-27b --block-tokens 16 -o out/mc16":
        Expect(("out/mc16/summary.json",)),
    "kvwear trace characterize conversation_trace.jsonl -m llama3-70b --memory-budget 256MiB -o out/mc256":
        Expect(("out/mc256/summary.json",), r"ideal hit ratio \(blocks\)"),
    "kvwear simulate --trace conversation_trace.jsonl --model kimi-k3 --dram 100GB --ssd 1TB --policy lru "
    "--policy lru-k:k=3 -o out/sim": Expect(("out/sim/lru/summary.json", "out/sim/lru-k,k=3/ssd_ops.parquet")),
    "kvwear simulate --trace out/demo/requests.parquet --model qwen3.5-27b --dram 64GiB --ssd 2TB --hbm 40GB "
    "--policy write-through --policy hotprefix:theta=4 -o out/sim2":
        Expect(("out/sim2/write-through/summary.json", "out/sim2/hotprefix,theta=4/summary.json")),
}

RUNS: dict[str, Expect] = {
    "kvwear run -o runs/demo": Expect(("runs/demo/report/report.html", "runs/demo/results.parquet"),
                                     r"5 policies"),
    "kvwear report runs/demo": Expect(("runs/demo/report/report.md",), r"report\.html"),
    "kvwear report runs/demo --waf uniform": Expect(("runs/demo/report/report.html",)),
    "kvwear run --trace ../shared/traces/mooncake/conversation_trace.jsonl --model qwen3.5-27b --dram 64GB "
    "--ssd 1TB --sample-fraction 0.05 --policy lru --policy gandalf:gamma=8 -o runs/mc":
        Expect(("runs/mc/results.parquet", "runs/mc/plan/lru/block_ops.parquet"), r"2 policies"),
    "kvwear run cfg.toml -o runs/x --resume": Expect(("runs/x/results.parquet", "runs/x/config.toml"), r"4 policies"),
    "kvwear run --placement kind --policy lru --policy gandalf -o runs/fdp":
        Expect(("runs/fdp/results.parquet",), r"2 policies"),
}

SWEEPS: dict[str, Expect] = {
    "kvwear sweep fig7.toml -o sweeps/fig7 --jobs 2": Expect(("sweeps/fig7/report/sweep_report.html",),
                                                            r"done 20, failed 0"),
    "kvwear sweep sweep.toml -o sweeps/fig7 --scheduler tcp://127.0.0.1:8786":
        Expect(("sweeps/fig7/report/sweep_report.html",), r"done 20, failed 0"),
    # after the Dask sweep: the same command on a local pool finds every point finished
    "kvwear sweep sweep.toml -o sweeps/fig7 --jobs 2": Expect(output=r"done 0, failed 0, already finished 20"),
}

FEMU_EXAMPLE = next(e for e in EXAMPLES if "--device femu" in e)


def test_every_example_has_a_runner() -> None:
    groups = [*MODELS_AND_TRACES, *RUNS, *SWEEPS, FEMU_EXAMPLE, LOOP_EXAMPLE]
    assert len(groups) == len(set(groups))
    assert sorted(groups) == sorted(EXAMPLES)


@pytest.mark.timeout(1800)   # minutes on an idle machine; several times that on a loaded one
def test_model_and_trace_examples(tmp_path: Path) -> None:
    work = scratch(tmp_path)
    for example, expect in MODELS_AND_TRACES.items():
        if example.startswith("kvwear trace inspect requests.parquet") and not (work / "requests.parquet").exists():
            (work / "requests.parquet").symlink_to("out/demo/requests.parquet")
        out = run_example(example, work, expect)
        if example.endswith("--json"):
            assert json.loads(out[out.index("{"):out.rindex("}") + 1])["requests"] == 40 * 20


@pytest.mark.timeout(1800)   # minutes on an idle machine; several times that on a loaded one
def test_run_examples(tmp_path: Path) -> None:
    work = scratch(tmp_path)
    for example, expect in RUNS.items():
        run_example(example, work, expect)
    assert "log axis, the uniform-random reference WAF" in (work / "runs/demo/report/report.html").read_text()
    # the demo's report as a reader sees it (issue #25): headline and ranking on the first 1,280 × 800
    # screen, nothing wider than the window, every image loaded, no console error, no clipped text
    build_run_report(work / "runs/demo")            # with the default lifetime, as `kvwear run` wrote it
    assert_reads_well(work / "runs/demo/report/report.html", "demo-report", first_screen=("#headline", "#ranking"))
    # --placement kind: full-attention KV on handle 0 and Kimi-K3's states on handle 1, unless the
    # plan found the two kinds dying alike and kept one handle (kvwear.harness.plan.placement's kind fallback,
    # recorded in plan.json); the handles written are the ones that decision names, and the byte
    # checks (per handle too) hold
    for label in ("lru", "gandalf"):
        placement = PlanRecord.load(work / f"runs/fdp/plan/{label}/plan.json").placement
        handles = pq.read_table(work / f"runs/fdp/plan/{label}/block_ops.parquet", columns=["placement_handle"])
        used = set(handles.column(0).to_pylist())
        assert placement.mode == "kind" and placement.kind_separation is not None
        assert 0 <= placement.kind_separation <= 1
        assert used == ({0} if placement.kind_fallback else {0, 1}), (label, placement)
        assert [b > 0 for b in placement.write_bytes_by_handle] == [h in used for h in range(len(
            placement.write_bytes_by_handle))]
        checks = Estimate.load(work / f"runs/fdp/estimate/{label}/crossval.json").checks
        acc = [c for c in checks if c.kind == "accounting"]
        assert acc and all(c.passed for c in acc), acc


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
                                       "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                      cwd=tmp_path))
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


@pytest.mark.timeout(1800)   # minutes on an idle machine; several times that on a loaded one
def test_sweep_examples(tmp_path: Path, dask_cluster: str) -> None:
    work = scratch(tmp_path)
    for example, expect in SWEEPS.items():
        if "--scheduler" in example:
            shutil.rmtree(work / "sweeps")          # the Dask sweep starts from an empty store
            run_example(example, work, expect, replace={"tcp://127.0.0.1:8786": dask_cluster})
        else:
            run_example(example, work, expect)
    points = list((work / "sweeps/fig7/results").glob("*.parquet"))
    assert len(points) == 20
    assert_reads_well(work / "sweeps/fig7/report/sweep_report.html", "sweep-report")


def test_femu_example(tmp_path: Path) -> None:
    binary = Path(next(a for a in shlex.split(FEMU_EXAMPLE) if a.endswith("qemu-system-x86_64"))).expanduser()
    if not binary.is_file():
        pytest.skip(f"{FEMU_EXAMPLE!r} needs the user's FEMU build, and {binary} does not exist")
    work = scratch(tmp_path)
    run_example(FEMU_EXAMPLE.replace("~", str(Path.home())), work,
                Expect(("runs/femu/results.parquet",), r"femu"))
