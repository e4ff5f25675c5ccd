"""Every bench in bench/ runs to its end in a smoke size, so none can rot: each is started as
`make bench` starts it (`python bench/NAME.py`, its own process) with arguments that make its
work small (`--smoke` where the bench interleaves: one round, no warm-up), and must exit 0 and
print what its report promises. The rates these sizes print mean nothing; `make bench` runs the
benches at their default sizes.

A bench not listed here fails the last test: a new bench gets its smoke form when it lands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
ROOT = os.geteuid() == 0

# bench → (arguments of its smoke form, text its output must hold, why it cannot run here or "")
SMOKE: dict[str, tuple[list[str], str, str]] = {
    "replay": (["--ops", "2000", "--trim-ops", "600", "--smoke"], "kvwear replay / fio replaying the same iolog",
               "" if shutil.which("fio") else "needs fio"),
    "ftl": (["--pages", "16384", "--ppb", "64", "--smoke"], "numba / pure Python on the same drive and writes", ""),
    "layouts": (["--smoke", "--sessions", "2", "--synthetic-ops", "3000",
                 "--baseline", str(REPO / "harness/plan/planner.py")],
                "plans identical: True", ""),
    "loaders": (["--size-mb", "0.5", "--no-pandas", "--smoke"], "× ref > 1: faster than kvwear convert", ""),
    "guest": (["--plans", "rand4k", "--rand-mib", "1", "--smoke"], "qemu / host file, fio's time",
              "" if ROOT and shutil.which("fio") and shutil.which("qemu-system-x86_64") else
              "needs root, fio and qemu-system-x86_64"),
    "sweep": (["--points-per-policy", "1", "--sessions", "2", "--turns", "2", "--smoke"],
              "scaling 2 workers / 1 worker", ""),
    "run": (["--policy", "lru", "--sessions", "3"], "kvwear run, default config", ""),
    "scale": (["--base-copies", "1", "--sizes", "1"], "peak RSS, MiB", ""),
    "frontier": (["--quick", "--models", "kimi-k3", "--only", "mooncake", "--policies", "lru,gandalf"],
                 "Gandalf dominates", ""),
    "simulator": (["--policies", "lru", "--requests", "300", "--smoke"], "kvwear lru: vs libCacheSim", ""),
    "gandalf_gamma": (["--model", "kimi-k3", "--dram", "1%", "--ssd", "10%", "--slice", "60",
                       "--variant", ";stranded=zero"], "cases rise by more than", ""),
    "waf_model": (["--smoke"], "GC-active", ""),
    "fs_layout": (["--ops", "3000", "--smoke"], "fs (files)", ""),
    "placement": (["--sessions", "3", "--turns", "3", "--dram", "100MB", "--ssd", "200MB", "--devsz-mb", "256",
                   "--policy", "lru"], "lru", ""),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMOKE))
def test_bench_runs_in_its_smoke_size(name: str, tmp_path: Path) -> None:
    args, expect, missing = SMOKE[name]
    if missing:
        pytest.skip(f"bench/{name}.py {missing}")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"bench/{name}.py {' '.join(args)} exited {proc.returncode}:\n{out[-3000:]}"
    assert expect in out, f"bench/{name}.py printed no {expect!r}:\n{out[-3000:]}"
    assert not list(tmp_path.iterdir()), "the bench left files in its temporary folder"


def test_every_bench_has_a_smoke_form() -> None:
    benches = {p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert benches == set(SMOKE), f"benches without a smoke form: {sorted(benches - set(SMOKE))}"
