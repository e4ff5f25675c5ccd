from __future__ import annotations

import dataclasses
import hashlib
import math
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvwear.errors import InputError, KvwearError
from kvwear.harness.pipeline.config import RunConfig, config_from_mapping, load_config, with_overrides
from kvwear.harness.pipeline.rundir import RunDir, build_manifest


def test_toml_roundtrip_with_units(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text(
        'name = "x"\npolicies = ["lru", "gandalf:gamma=8"]\n'
        '[tiers]\ndram = "2GiB"\nssd = "1TB"\n'
        '[workload]\ngenerator = "multi-round"\nparams = {sessions = 4, turns = 3}\n'
        '[device]\nkind = "sim"\noptions = {gc = "greedy"}\n'
    )
    cfg = load_config(p)
    assert cfg.tiers.dram_bytes == 2 * 2**30
    assert cfg.tiers.ssd_bytes == 10**12
    assert cfg.policies == ("lru", "gandalf:gamma=8")
    assert cfg.workload.params == {"sessions": 4, "turns": 3}
    again = tmp_path / "again.toml"
    again.write_text(cfg.to_toml())
    assert load_config(again) == cfg


def test_unknown_setting_names_it_and_lists_valid(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[tiers]\ndrm = '1GB'\n")
    with pytest.raises(InputError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert "bad.toml" in msg and "tiers.drm" in msg and "dram_bytes" in msg


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"tiers": {"dram": "lots"}}, "tiers.dram_bytes"),
        ({"replay": {"trim_on_evict": 2}}, "replay.trim_on_evict"),
        ({"policies": [1]}, "policies"),
        ({"version": 9}, "version"),
    ],
)
def test_bad_values_name_field(data: dict, field: str) -> None:
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        config_from_mapping(data, "cfg.toml")


def test_invalid_toml_names_line(tmp_path: Path) -> None:
    p = tmp_path / "broken.toml"
    p.write_text("name = 'x'\n[tiers\n")
    with pytest.raises(InputError, match=r"broken\.toml:2"):
        load_config(p)


def test_overrides() -> None:
    cfg = with_overrides(RunConfig(), {"tiers.dram": "1GB", "policies": ["fifo"], "device.kind": "file"})
    assert cfg.tiers.dram_bytes == 10**9 and cfg.policies == ("fifo",) and cfg.device.kind == "file"


def test_rundir_resume_rules(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    rd.prepare("a = 1\n", resume=False)
    rd.mark_done("simulate/lru", {"rows": 3})
    assert rd.is_done("simulate/lru") and not rd.is_done("plan/lru")
    assert rd.finished_stages() == ["simulate/lru"]
    with pytest.raises(KvwearError, match="--resume"):
        RunDir(tmp_path / "run").prepare("a = 1\n", resume=False)
    with pytest.raises(KvwearError, match="differs"):
        RunDir(tmp_path / "run").prepare("a = 2\n", resume=True)
    RunDir(tmp_path / "run").prepare("a = 1\n", resume=True)
    assert RunDir(tmp_path / "run").done_info("simulate/lru")["rows"] == 3


def test_a_run_directory_of_an_older_layout_is_not_resumed(tmp_path: Path) -> None:
    """A run directory written before RUN/.layout existed (layout 1: replay/LABEL, no
    summary.parquet) is refused on resume with what to do, not resumed into a crash."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.toml").write_text("a = 1\n")
    with pytest.raises(KvwearError, match=r"has no \.layout \(written by a kvwear before layout 2, or the file "
                       r"was deleted\), this one reads layout 2: it cannot be resumed; remove it"):
        RunDir(tmp_path / "run").prepare("a = 1\n", resume=True)
    assert not (tmp_path / "run" / ".layout").exists()
    (tmp_path / "run" / ".layout").write_text("1\n")
    with pytest.raises(KvwearError, match="was written by a kvwear with run-directory layout 1, this one reads"):
        RunDir(tmp_path / "run").prepare("a = 1\n", resume=True)


def test_manifest_records_inputs_and_versions(tmp_path: Path) -> None:
    inp = tmp_path / "trace.jsonl"
    inp.write_text("{}\n")
    m = build_manifest(config={"name": "x"}, inputs={"trace": inp}, seeds={"workload": 1})
    assert m["inputs"]["trace"]["sha256"] == hashlib.sha256(b"{}\n").hexdigest()
    assert m["packages"]["pyarrow"] and m["kernel"] and m["seeds"] == {"workload": 1}


def test_manifest_hashes_a_trace_folder(tmp_path: Path, weka_dir: Path) -> None:
    """A Weka trace is a folder of JSON files: the manifest hashes its files (it used to open the
    folder as a file and crash `kvwear run`)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for f in sorted(weka_dir.glob("*.json"))[:2]:
        (folder / f.name).write_bytes(f.read_bytes())
    first = build_manifest(config={}, inputs={"trace": folder}, seeds={})["inputs"]["trace"]["sha256"]
    assert first == build_manifest(config={}, inputs={"trace": folder}, seeds={})["inputs"]["trace"]["sha256"]
    victim = sorted(folder.glob("*.json"))[0]
    victim.write_bytes(victim.read_bytes() + b" ")
    assert build_manifest(config={}, inputs={"trace": folder}, seeds={})["inputs"]["trace"]["sha256"] != first


def _absurd_settings() -> list[tuple[str, str, st.SearchStrategy[object]]]:
    """(section, setting, absurd values) for every numeric, size and closed-word setting of a run config."""
    from kvwear.harness.pipeline.config import _SECTIONS

    out = []
    never = st.sampled_from([math.nan, math.inf, -math.inf, "abc", [1], {"a": 1}])
    for section, cls in _SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if f.name.endswith("_bytes"):        # negative, or beyond 1 EiB, in any form
                out.append((section, f.name, st.one_of(never, st.integers(max_value=-1),
                                                       st.integers(2**60 + 1, 2**63 - 1),
                                                       st.integers(max_value=-1).map(str))))
            elif tp in (int, float):
                out.append((section, f.name, st.one_of(never, st.integers(max_value=-1),
                                                       st.floats(max_value=-1e-9, allow_infinity=False))))
            elif f.metadata.get("choices"):
                out.append((section, f.name, st.one_of(st.text(max_size=8).filter(
                    lambda t, c=f.metadata["choices"]: t not in c), st.integers())))
    return out


ABSURD_SETTINGS = _absurd_settings()


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(ABSURD_SETTINGS), data=st.data())
def test_every_numeric_size_and_word_setting_refuses_an_absurd_value_naming_it(
        case: tuple, data: st.DataObject) -> None:
    section, name, values = case
    value = data.draw(values)
    with pytest.raises(InputError) as err:
        config_from_mapping({section: {name: value}}, "c.toml")
    assert str(err.value).startswith(f"c.toml: field '{section}.{name}': "), err.value


def test_the_replay_words_are_the_planners() -> None:
    from kvwear.harness.pipeline import config
    from kvwear.harness.plan import planner

    assert set(config.LAYOUTS) == set(planner.LAYOUTS + planner.FILE_LAYOUTS)
    assert set(config.TIME_MODES) == set(typing.get_args(planner.TimeMode))
    assert set(config.LOG_FULL_MODES) == set(planner.LOG_FULL_MODES)
