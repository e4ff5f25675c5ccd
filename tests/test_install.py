"""`pip install .` into a clean venv (no editable install, no checkout on sys.path): the
distribution exposes one top-level import name, `kvwear` (`import harness` fails, `import
kvwear.harness` works, from a directory that is not the checkout), and the installed `kvwear`
command runs a small run to its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
STAGES = ("harness", "policies", "workloads", "emulator", "reports")


@pytest.mark.timeout(1800)
def test_pip_install_exposes_only_kvwear_and_runs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(src)], check=True, timeout=300)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # --no-compile: pip's byte-compiling of every installed file (numpy, pandas, scipy, …) took 13 of
    # the install's 25 s here; Python compiles what the run imports when it imports it
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", str(src)], capture_output=True,
                         text=True, env=env, timeout=1500)
    assert pip.returncode == 0, pip.stderr[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()

    def python(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(py), "-c", code], cwd=work, capture_output=True, text=True, env=env, timeout=300)

    site = Path(python("import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    assert (site / "kvwear").is_dir()
    for name in STAGES:
        assert not (site / name).exists(), f"{name} installed at the top level of {site}"
        r = python(f"import {name}")
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, (name, r.stdout, r.stderr)
        ok = python(f"import kvwear.{name}; print(kvwear.{name}.__file__)")
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.strip().startswith(str(site)), ok.stdout     # the installed copy, not a checkout
    assert (site / "kvwear" / "scripts" / "build-guest.sh").is_file()      # hatch_build.py's addition
    kvwear = env_dir / "bin" / "kvwear"
    run = subprocess.run([str(kvwear), "run", "--param", "sessions=2", "--param", "turns=2", "--param",
                          "system_prompt_tokens=64", "--model", "qwen2-7b", "--dram", "20MB", "--ssd", "40MB",
                          "--policy", "lru", "-o", "runs/installed", "--json"],
                         cwd=work, capture_output=True, text=True, env=env, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout)
    assert (work / doc["report"]).is_file() and doc["accounting_faults"] == []
    assert (work / "runs/installed/report/report.html").is_file()
    version = subprocess.run([str(kvwear), "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert version.stdout.startswith("kvwear ")
    assert sys.executable != str(py)
