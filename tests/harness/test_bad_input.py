"""Bad input, case by case (the classes of issue 15 and a few neighbours): every case runs the real
`kvwear` entry point (kvwear.harness.cli.main.main) in this process and must end with exit status 2 and one
line `kvwear: error: ...` that names the input (the file, the line or field, or the flag); no
exception may escape (a traceback), and nothing half-written may be left looking complete (no
`.partial` file, no output file, no run results)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial import one_line_error

MOONCAKE = '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}\n'


def weka(requests: list[dict[str, Any]]) -> str:
    return json.dumps({"id": "w", "block_size": 64, "requests": requests})


REQ = {"t": 0.0, "type": "n", "in": 128, "out": 5, "hash_ids": [1, 2]}


# (id, files {name: text or bytes}, argv with {d} for the case's folder, what the error must name,
#  a path under {d} that must not exist afterwards)
CASES: list[tuple[str, dict[str, str | bytes], list[str], str, str]] = [
    # -- run configs --------------------------------------------------------------------------
    ("toml-binary", {"c.toml": b"\xff\xfe\x00\x81binary"}, ["run", "{d}/c.toml", "-o", "{d}/r"], "c.toml", "r"),
    ("toml-syntax", {"c.toml": "name = \n"}, ["run", "{d}/c.toml", "-o", "{d}/r"], "c.toml:1", "r"),
    ("toml-missing", {}, ["run", "{d}/nope.toml", "-o", "{d}/r"], "nope.toml", "r"),
    ("toml-directory", {"sub/x": ""}, ["run", "{d}/sub", "-o", "{d}/r"], "sub", "r"),
    ("version", {"c.toml": "version = 2\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"], "version", "r"),
    ("unknown-setting", {"c.toml": "nosuch = 1\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"], "nosuch", "r"),
    ("align-zero", {"c.toml": "[replay]\nalign_bytes = 0\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "replay.align_bytes", "r"),
    ("align-odd", {"c.toml": "[replay]\nalign_bytes = 1000\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "replay.align_bytes", "r"),
    ("time-compression-zero", {"c.toml": "[replay]\ntime_compression = 0\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "replay.time_compression", "r"),
    ("seed-negative", {"c.toml": "[workload]\nseed = -1\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "workload.seed", "r"),
    ("seed-fraction", {"c.toml": "[workload]\nseed = 1.9\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "workload.seed", "r"),
    ("block-tokens-fraction", {"c.toml": "[workload]\nblock_tokens = 16.7\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "workload.block_tokens", "r"),
    ("params-sessions-negative", {"c.toml": "[workload]\nparams = {sessions = -5}\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "sessions", "r"),
    ("params-turns-zero", {"c.toml": "[workload]\nparams = {turns = 0}\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "turns", "r"),
    ("params-sessions-text", {"c.toml": '[workload]\nparams = {sessions = "five"}\n'},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "sessions", "r"),
    ("params-unknown", {"c.toml": "[workload]\nparams = {nosuch = 1}\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "nosuch", "r"),
    ("format-without-trace", {"c.toml": '[workload]\nformat = "mooncake"\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "workload.format 'mooncake': a trace format, but workload.trace is empty", "r"),
    ("generator-unknown", {"c.toml": '[workload]\ngenerator = "nosuch-gen"\n'},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "nosuch-gen", "r"),
    ("dram-overflow", {"c.toml": '[tiers]\ndram = "1e400GB"\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "dram", "r"),
    ("ssd-huge", {"c.toml": '[tiers]\nssd = "1e30PB"\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"], "ssd", "r"),
    ("ssd-below-one-object", {"c.toml": '[tiers]\nssd = "100kB"\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "tiers.ssd", "r"),
    ("sample-fraction-1.5", {"c.toml": "[workload]\nsample_fraction = 1.5\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "workload.sample_fraction", "r"),
    ("sample-fraction-2", {"c.toml": "[workload]\nsample_fraction = 2\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "workload.sample_fraction", "r"),
    ("sample-fraction-0", {"c.toml": "[workload]\nsample_fraction = 0\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "workload.sample_fraction", "r"),
    ("trace-day-fraction-negative", {"c.toml": "[estimate]\ntrace_day_fraction = -1\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "estimate.trace_day_fraction", "r"),
    ("dwpd-nan", {"c.toml": "[estimate]\ndwpd = nan\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "estimate.dwpd", "r"),
    ("dwpd-inf", {"c.toml": "[estimate]\ndwpd = inf\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "estimate.dwpd", "r"),
    ("policies-empty", {"c.toml": "policies = []\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"], "policies", "r"),
    ("policy-unknown", {"c.toml": 'policies = ["nosuch-policy"]\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "nosuch-policy", "r"),
    ("gamma-nan", {"c.toml": 'policies = ["gandalf:gamma=nan"]\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "gamma", "r"),
    ("gamma-inf", {"c.toml": 'policies = ["gandalf:gamma=inf"]\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "gamma", "r"),
    ("model-unknown", {"c.toml": 'model = "nosuch-model"\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "nosuch-model", "r"),
    ("sim-option-unknown", {"c.toml": "[device]\noptions = {bogus = 1}\n"}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "bogus", "r"),
    ("model-binary-file", {"m.json": bytes(range(256))}, ["run", "--model", "{d}/m.json", "-o", "{d}/r"],
     "m.json", "r"),
    ("sim-pages-per-block-zero", {"c.toml": "[device]\noptions = {pages_per_block = 0}\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "pages_per_block", "r"),
    ("params-sessions-huge", {"c.toml": "[workload]\nparams = {sessions = 100000000000}\n"},
     ["run", "{d}/c.toml", "-o", "{d}/r"], "sessions must be in (0, 1,000,000,000]", "r"),
    ("trace-missing", {"c.toml": '[workload]\ntrace = "nope.jsonl"\n'}, ["run", "{d}/c.toml", "-o", "{d}/r"],
     "nope.jsonl", "r"),
    # -- run flags ----------------------------------------------------------------------------
    ("flag-seed-text", {}, ["run", "--seed", "abc", "-o", "{d}/r"], "--seed", "r"),
    ("flag-dram-overflow", {}, ["run", "--dram", "1e400GB", "-o", "{d}/r"], "dram", "r"),
    ("flag-sample-fraction", {}, ["run", "--sample-fraction", "1.5", "-o", "{d}/r"], "sample_fraction", "r"),
    ("flag-param-text", {}, ["run", "--param", "sessions=five", "-o", "{d}/r"], "sessions", "r"),
    ("flag-param-no-equals", {}, ["run", "--param", "sessions", "-o", "{d}/r"], "--param", "r"),
    ("flag-device-option-abc", {}, ["run", "--device-option", "op_ratio=abc", "-o", "{d}/r"], "op_ratio", "r"),
    ("flag-tracer-unknown", {}, ["run", "--tracer", "nosuch-tracer", "-o", "{d}/r"], "nosuch-tracer", "r"),
    ("flag-device-unknown", {}, ["run", "--device", "nosuch-dev", "-o", "{d}/r"], "nosuch-dev", "r"),
    ("flag-unknown", {}, ["run", "--nosuch-flag", "-o", "{d}/r"], "--nosuch-flag", "r"),
    ("out-in-proc", {}, ["run", "--param", "sessions=2", "--param", "turns=2", "-o", "/proc/kvwear-x"],
     "/proc/kvwear-x", "r"),
    ("out-is-a-file", {"f": "keep"}, ["run", "--param", "sessions=2", "--param", "turns=2", "-o", "{d}/f"],
     "{d}/f", "r"),
    ("file-device-not-ours", {"disk.img": "precious data\n"},
     ["run", "--device", "file:{d}/disk.img", "--param", "sessions=2", "-o", "{d}/r"], "disk.img", "r"),
    ("file-device-in-proc", {}, ["run", "--device", "file:/proc/kvwear.img", "--param", "sessions=2", "-o", "{d}/r"],
     "device.target /proc/kvwear.img: cannot create a file in /proc", "r"),
    ("file-device-under-proc", {},
     ["run", "--device", "file:/proc/kvwear/x/d.img", "--param", "sessions=2", "-o", "{d}/r"],
     "cannot create a file in /proc", "r"),
    ("file-option-iodepth-text", {},
     ["run", "--device", "file:{d}/new.img", "--device-option", "iodepth=abc", "-o", "{d}/r"], "iodepth", "new.img"),
    ("file-option-ioengine", {},
     ["run", "--device", "file:{d}/new.img", "--device-option", "ioengine=nosuch", "-o", "{d}/r"], "ioengine",
     "new.img"),
    # -- traces -------------------------------------------------------------------------------
    ("jsonl-repeated-key",
     {"m.jsonl": MOONCAKE + MOONCAKE.replace('{"timestamp": 0,', '{"timestamp": 0, "timestamp": 5,')},
     ["trace", "inspect", "{d}/m.jsonl"], "m.jsonl:2: field 'timestamp'", "x"),
    ("jsonl-negative-timestamp", {"m.jsonl": MOONCAKE.replace('"timestamp": 0', '"timestamp": -5')},
     ["trace", "inspect", "{d}/m.jsonl", "--format", "mooncake"], "m.jsonl:1: field 'timestamp'", "x"),
    ("jsonl-nan-timestamp", {"m.jsonl": MOONCAKE.replace('"timestamp": 0', '"timestamp": NaN')},
     ["trace", "convert", "{d}/m.jsonl", "--format", "mooncake", "-o", "{d}/o.parquet"], "m.jsonl:1", "o.parquet"),
    ("jsonl-long-line", {"m.jsonl": "x" * 50_000},
     ["trace", "convert", "{d}/m.jsonl", "--format", "mooncake", "-o", "{d}/o.parquet"], "m.jsonl:1", "o.parquet"),
    ("jsonl-dev-zero", {}, ["trace", "inspect", "/dev/zero", "--format", "mooncake"], "/dev/zero", "x"),
    ("jsonl-binary", {"b.jsonl": bytes(range(256)) * 4},
     ["trace", "inspect", "{d}/b.jsonl", "--format", "mooncake"], "b.jsonl", "x"),
    ("weka-nested-infinite", {"w.json": weka([{"t": 1e308, "type": "subagent", "agent_id": "a", "requests": [
        {"t": 1e308, "type": "subagent", "agent_id": "b", "requests": [REQ]}]}])},
     ["trace", "inspect", "{d}/w.json", "--json"], "requests[0].requests[0].t", "x"),
    ("weka-negative-t", {"w.json": weka([{**REQ, "t": -1.0}])}, ["trace", "inspect", "{d}/w.json"],
     "requests[0].t", "x"),
    ("weka-type-number", {"w.json": weka([REQ, {**REQ, "t": 1.0, "type": 5}])}, ["trace", "inspect", "{d}/w.json"],
     "requests[1].type", "x"),
    ("weka-subagent-main", {"w.json": weka([REQ, {"t": 1.0, "type": "subagent", "agent_id": "main",
                                                  "requests": [REQ]}])},
     ["trace", "convert", "{d}/w.json", "-o", "{d}/o.parquet"], "agent_id", "o.parquet"),
    ("weka-repeated-key", {"w.json": weka([REQ]).replace('"block_size": 64', '"block_size": 64, "block_size": 16')},
     ["trace", "inspect", "{d}/w.json", "--format", "weka"], "w.json", "x"),
    ("weka-too-large", {"w.json": weka([REQ] * 400)}, ["trace", "inspect", "{d}/w.json"], "w.json", "x"),
    ("convert-onto-directory", {"m.jsonl": MOONCAKE, "outdir/keep": ""},
     ["trace", "convert", "{d}/m.jsonl", "-o", "{d}/outdir"], "outdir", "outdir/.outdir.partial"),
    ("convert-onto-input", {"m.jsonl": MOONCAKE}, ["trace", "convert", "{d}/m.jsonl", "-o", "{d}/m.jsonl"],
     "m.jsonl", "x"),
    ("generate-sessions-negative", {}, ["trace", "generate", "multi-round", "--sessions", "-5", "-o", "{d}/g.parquet"],
     "sessions", "g.parquet"),
    ("generate-onto-directory", {"gdir/keep": ""},
     ["trace", "generate", "multi-round", "--sessions", "2", "-o", "{d}/gdir"], "gdir", "x"),
    ("generate-into-proc", {}, ["trace", "generate", "multi-round", "--sessions", "2", "-o", "/proc/kvwear.parquet"],
     "/proc/kvwear.parquet", "x"),
    ("generate-under-a-file", {"f": "keep"},
     ["trace", "generate", "multi-round", "--sessions", "2", "-o", "{d}/f/g.parquet"], "f/g.parquet", "x"),
    # -- sweeps -------------------------------------------------------------------------------
    ("sweep-policy-unknown", {"s.toml": '[grid]\npolicies = ["lru", "nosuch-policy"]\n'},
     ["sweep", "{d}/s.toml", "-o", "{d}/sw"], "grid.policies", "sw"),
    ("sweep-grid-huge", {"s.toml": '[grid]\npolicies = ["lru-k:k=1..100000000"]\n'},
     ["sweep", "{d}/s.toml", "-o", "{d}/sw"], "grid.policies", "sw"),
    ("sweep-model-unknown", {"s.toml": '[grid]\nmodels = ["nosuch-model"]\n'},
     ["sweep", "{d}/s.toml", "-o", "{d}/sw"], "grid.models", "sw"),
    ("sweep-trace-missing", {"s.toml": '[grid]\ntraces = ["nope.jsonl"]\n'},
     ["sweep", "{d}/s.toml", "-o", "{d}/sw"], "grid.traces", "sw"),
    ("sweep-binary", {"s.toml": b"\x00\xff\xfe"}, ["sweep", "{d}/s.toml", "-o", "{d}/sw"], "s.toml", "sw"),
    ("sweep-axis-unknown", {"s.toml": "[grid]\nnosuch = [1]\n"}, ["sweep", "{d}/s.toml", "-o", "{d}/sw"],
     "grid.nosuch", "sw"),
    ("sweep-base-bad", {"s.toml": "[base.workload]\nsample_fraction = 1.5\n"},
     ["sweep", "{d}/s.toml", "-o", "{d}/sw"], "sample_fraction", "sw"),
]


@pytest.mark.parametrize(("files", "argv", "names", "absent"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_a_non_zero_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str | bytes], argv: list[str], names: str, absent: str,
) -> None:
    import kvwear.workloads.loaders.jsonl as jsonl
    import kvwear.workloads.loaders.weka as weka_loader

    # small bounds, so the size cases need kilobytes, not the real limits' gigabytes
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 20_000)
    monkeypatch.setattr(weka_loader, "MAX_FILE_BYTES", 20_000)
    monkeypatch.chdir(tmp_path)
    for name, body in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            p.write_bytes(body)
        else:
            p.write_text(body)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    line = one_line_error([a.replace("{d}", str(tmp_path)) for a in argv], capsys, monkeypatch)
    assert names.replace("{d}", str(tmp_path)) in line, line
    # nothing half-written: inputs unchanged, no partial files, no output
    for p, body in before.items():
        assert p.read_bytes() == body, f"{p} changed"
    assert not [p for p in tmp_path.rglob("*partial*")]
    assert not (tmp_path / absent).exists() or not any((tmp_path / absent).rglob("results*"))
    if absent.endswith(".parquet"):
        assert not (tmp_path / absent).exists()
