"""Every shipped config in configs/ runs, in a scratch directory that holds only the repository's
samples/ and configs/ (no ../shared): the Mooncake-like chat and the agentic workload through
`kvwear run` (the agentic one with the scale-down its header documents), the demo's config equal
to the default run's (which tests/test_examples_run.py runs), the Gandalf
Figure-7 sweep scaled down as its header says, the NVMe and FEMU configs parsed and preflighted
(the FEMU one run when $KVWEAR_FEMU_BINARY names a built FEMU; the NVMe one never writes a drive
by itself), and each sample trace loads in its format. The model profiles in configs/models/
show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kvwear.harness.pipeline.config import load_config, with_overrides
from kvwear.harness.pipeline.preflight import preflight
from kvwear.harness.pipeline.sweep import load_sweep, plan_sweep

REPO = Path(__file__).resolve().parents[1]
KVWEAR = Path(sys.executable).parent / "kvwear"
CONFIGS = sorted((REPO / "configs").glob("*.toml"))


def scratch(tmp_path: Path) -> Path:
    for name in ("samples", "configs"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def kvwear(work: Path, *args: str) -> dict:
    p = subprocess.run([str(KVWEAR), *args, "--json"], cwd=work, capture_output=True, text=True, timeout=1500,
                       env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, f"kvwear {' '.join(args)}: exit {p.returncode}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout)


def test_every_config_is_known() -> None:
    assert {c.stem for c in CONFIGS} == {"demo", "mooncake-chat", "agentic-claude-code", "nvme-lab",
                                         "femu-validation", "gandalf-fig7", "sweep-quick"}


def test_demo_config_is_the_default_run() -> None:
    """configs/demo.toml writes out `kvwear run`'s defaults (the run the examples test makes with
    `kvwear run -o out/demo --resume`): the same config but its name."""
    from dataclasses import replace

    from kvwear.harness.pipeline.config import RunConfig
    from kvwear.harness.pipeline.sizing import size_tiers
    from kvwear.workloads.synthetic import GENERATORS

    demo, default = (size_tiers(c)[0] for c in (load_config(REPO / "configs" / "demo.toml"), RunConfig()))
    gen = GENERATORS.get("multi-round")
    # the generator's options written out are its defaults; the SSD tier written out is the default one
    assert gen.configure(dict(demo.workload.params)) == gen.configure(dict(default.workload.params))
    assert replace(demo, name="run", workload=default.workload) == default


# configs/mooncake-chat.toml runs as README's example (tests/test_examples_run.py, which checks its
# results the same way); the others run here.
@pytest.mark.slow
@pytest.mark.parametrize(("name", "extra"), [
    ("agentic-claude-code", ["--param", "sessions=4", "--ssd", "16GB"]),     # the scale-down its header documents
])
def test_run_configs(tmp_path: Path, name: str, extra: list[str]) -> None:
    work = scratch(tmp_path)
    doc = kvwear(work, "run", f"configs/{name}.toml", *extra, "-o", f"runs/{name}")
    cfg = load_config(REPO / "configs" / f"{name}.toml")
    assert len(doc["results"]) == len(cfg.policies)
    assert doc["accounting_faults"] == [] and (work / doc["report"]).is_file()
    assert all(r["accounting_checks_passed"] == r["accounting_checks_total"] > 0 for r in doc["results"])
    assert any(r["ssd_write_bytes"] > 0 for r in doc["results"])


@pytest.mark.slow
def test_fig7_sweep_scaled_down(tmp_path: Path) -> None:
    work = scratch(tmp_path)
    data = tomllib.loads((REPO / "configs" / "gandalf-fig7.toml").read_text())
    full = plan_sweep(data, "configs/gandalf-fig7.toml")
    assert len(full.points) == 2 * 2 * (1 + 5 + 10)
    # the scale-down the file's header documents
    data["base"]["workload"]["params"] = {"sessions": 4, "turns": 3}
    data["grid"]["capacities"] = data["grid"]["capacities"][:1]
    data["grid"]["policies"] = ["lru", "gandalf:budget=fixed,gamma=[0,4]", "lru-k:k=1..2"]
    data["sweep"]["replay"] = False
    from kvwear.harness.pipeline.config import dump_toml

    small = work / "fig7-small.toml"
    small.write_text(dump_toml(data))
    assert len(load_sweep(small).points) == 2 * 1 * 5
    doc = kvwear(work, "sweep", "fig7-small.toml", "-o", "sweeps/fig7", "--jobs", "2")
    assert (doc["points"], doc["done"], doc["failed"]) == (10, 10, 0)
    assert (work / doc["report"]).is_file() and doc["accounting_faults"] == []


def test_nvme_config_parses_and_preflights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(scratch(tmp_path))
    cfg = load_config("configs/nvme-lab.toml")
    assert (cfg.device.kind, cfg.device.target, cfg.capture.tracer) == ("block", "/dev/nvme0n1", "auto")
    from kvwear.harness.devices.base import DEVICES

    params = DEVICES.get("block").Params.parse(cfg.device.options, "configs/nvme-lab.toml")
    assert params.precondition == "steady"           # type: ignore[attr-defined]
    # the SSD tier comes from the drive's size at run time; here a 1 TB drive's (960 GB ÷ 1.05)
    preflight(with_overrides(cfg, {"tiers.ssd": "914GB"}), replay=False)   # workload, model, policies, tracer


def test_nvme_config_run() -> None:
    pytest.skip("the NVMe config is never run on a drive by the tests: it erases the namespace "
                "(docs/guides/nvme.md runs it by hand, with --confirm-serial); the loop-device path it "
                "takes runs in tests/harness/test_run_block.py")


def test_femu_config_parses_and_preflights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(scratch(tmp_path))
    cfg = load_config("configs/femu-validation.toml")
    assert cfg.device.kind == "femu" and cfg.device.options["femu.devsz_mb"] == 192
    from kvwear.harness.devices.base import DEVICES

    DEVICES.get("femu").Params.parse(cfg.device.options, "configs/femu-validation.toml")
    from kvwear.harness.pipeline.sizing import size_tiers

    sized, _ = size_tiers(cfg)                 # the tier from FEMU's devsz_mb, as the run sizes it
    assert 0 < sized.tiers.ssd_bytes < 192 << 20
    preflight(sized, replay=False)


@pytest.mark.slow
def test_femu_config_run(tmp_path: Path) -> None:
    work = scratch(tmp_path)
    binary = os.environ.get("KVWEAR_FEMU_BINARY", "")
    if not binary or not Path(binary).is_file():
        pytest.skip("FEMU is the user's own build and $KVWEAR_FEMU_BINARY names none here: the run is "
                    "skipped (test_femu_config_parses_and_preflights checks the config)")
    extra = []
    bios = Path(binary).resolve().parent.parent / "pc-bios"     # a FEMU checkout: build-femu/ beside pc-bios/
    if bios.is_dir():
        extra = ["--device-option", f"qemu_args=-L {bios}"]
    doc = kvwear(work, "run", "configs/femu-validation.toml", "--femu-binary", binary, *extra, "-o", "runs/femu")
    assert doc["accounting_faults"] == []


@pytest.mark.parametrize(("path", "fmt", "rows"), [
    ("samples/traces/mooncake/conversation_trace.head200.jsonl", "mooncake", 200),
    ("samples/traces/claude-code-weka/traces", "weka", None),
    ("samples/traces/qwen-bailian/qwen_schema_sample.jsonl", "qwen-bailian", None),
    ("samples/traces/aiperf/aiperf_sample.jsonl", "aiperf", None),
])
def test_samples_load_in_their_format(path: str, fmt: str, rows: int | None) -> None:
    from kvwear.workloads.loaders import detect_format, load_requests

    assert detect_format(REPO / path) == fmt
    res = load_requests(REPO / path)
    assert res.table.num_rows > 0 and res.skipped_lines == 0
    if rows is not None:
        assert res.table.num_rows == rows
    if fmt in ("mooncake", "weka"):        # excerpts of published traces keep their licence beside them
        assert (REPO / "samples/traces" / path.split("/")[2] / "LICENSE").is_file()


@pytest.mark.parametrize("model", ["configs/models/my-model.toml", "configs/models/Qwen3-Next-80B-A3B/config.json",
                                   "configs/models/Kimi-Linear-48B-A3B-Instruct/config.json"])
def test_model_files_load(model: str) -> None:
    from kvwear.workloads.models import resolve_profile

    assert resolve_profile(REPO / model).kv_bytes_per_token > 0
