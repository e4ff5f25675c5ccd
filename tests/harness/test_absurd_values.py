"""Absurd values refused with the allowed range (issue #28): every numeric parameter of every
registered policy, drawn by hypothesis just outside or far outside its declared range; the
estimator's drive rating; a generator's counts; a device option; a model config's KV heads. The
CLI turns each into one line (exit 2, no run directory)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.errors import InputError, KvwearError
from kvwear.harness.devices.sim import SimParams
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.policies.base import DEFAULT_VALID, POLICIES, PolicySpecError, resolve_spec
from kvwear.workloads.models import profile_from_hf_config
from kvwear.workloads.synthetic import MAX_OPTION_VALUE, generate
from tests.adversarial import one_line_error

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def numeric_params() -> list[tuple[str, dataclasses.Field, type]]:
    out = []
    for name in POLICIES.names():
        cls = POLICIES.get(name).Params
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            t = hints[f.name]
            args = [a for a in typing.get_args(t) if a is not type(None)]
            base = args[0] if typing.get_origin(t) in (typing.Union, __import__("types").UnionType) else t
            if base in (int, float):
                out.append((name, f, base))
    return out


NUMERIC = numeric_params()


def test_every_numeric_policy_parameter_has_a_range_that_holds_its_default() -> None:
    assert len(NUMERIC) >= 30, NUMERIC
    for name, f, _t in NUMERIC:
        lo, hi = f.metadata.get("valid") or DEFAULT_VALID
        if f.default is not None:
            assert lo <= f.default <= hi, (name, f.name)
        resolve_spec(name)            # the defaults build


@SETTINGS
@given(case=st.sampled_from(NUMERIC), data=st.data())
def test_a_policy_parameter_outside_its_range_names_the_range(case: tuple, data: st.DataObject) -> None:
    name, f, typ = case
    lo, hi = f.metadata.get("valid") or DEFAULT_VALID
    above = f.metadata.get("above")
    if typ is int:
        below_ok = lo > -(2**62)
        value: float = data.draw(st.one_of(
            st.integers(int(hi) + 1, max(int(hi) + 1, 2**62)),
            *([st.integers(-(2**62), int(lo) - (0 if above else 1))] if below_ok else [])))
        text = str(value)
    else:
        value = data.draw(st.one_of(
            st.floats(min_value=hi, max_value=1e308, exclude_min=True),
            st.floats(min_value=-1e308, max_value=lo, exclude_max=not above)))
        text = repr(value)
    with pytest.raises(PolicySpecError) as exc:
        resolve_spec(f"{name}:{f.name}={text}")
    msg = str(exc.value)
    assert f"parameter {f.name!r}: must be in " in msg, msg
    assert re.search(r"must be in [\[(][-\d.,e+]+, [-\d.,e+]+\], got ", msg), msg


@SETTINGS
@given(key=st.sampled_from(["dwpd", "warranty_years", "rated_pe_cycles", "trace_day_fraction"]),
       value=st.one_of(st.floats(1e6, 1e308, exclude_min=True), st.floats(-1e308, -1e-9)))
def test_an_absurd_drive_rating_is_refused(key: str, value: float) -> None:
    if key == "rated_pe_cycles":
        value = int(min(value, 2**62)) + 1 if value > 0 else -1
    with pytest.raises(InputError, match=rf"field 'estimate\.{key}': must be (in|0)"):
        config_from_mapping({"estimate": {key: value}}, "c.toml")


@SETTINGS
@given(kind=st.sampled_from(["multi-round", "agentic"]),
       sessions=st.one_of(st.integers(MAX_OPTION_VALUE + 1, 2**62), st.floats(1e10, 1e30).map(math.ceil).map(float)))
def test_a_generator_count_beyond_any_machine_is_refused_not_allocated(kind: str, sessions: float) -> None:
    with pytest.raises(ValueError, match=r"sessions must be in \(0, 1,000,000,000\]"):
        generate(kind, sessions=sessions)


@SETTINGS
@given(op=st.one_of(st.floats(1.0, 1e308, exclude_min=True), st.floats(-1e308, 0, exclude_max=True)))
def test_an_absurd_over_provisioning_is_refused(op: float) -> None:
    with pytest.raises(KvwearError, match=r"option op_ratio: must be in \[0, 1\]"):
        SimParams.parse({"op_ratio": op}, "device sim")


@SETTINGS
@given(heads=st.integers(1, 128), kvh=st.integers(-4, 300))
def test_kv_heads_checked_against_attention_heads(heads: int, kvh: int) -> None:
    cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": heads,
           "num_key_value_heads": kvh, "head_dim": 128, "hidden_size": 128 * heads, "intermediate_size": 1024,
           "torch_dtype": "bfloat16"}
    ok = 1 <= kvh <= heads and heads % kvh == 0
    if ok:
        prof = profile_from_hf_config(cfg, "config.json")
        assert prof.kv_bytes_per_token == 4 * kvh * 128 * 2 * 2
    else:
        with pytest.raises(InputError, match="num_key_value_heads"):
            profile_from_hf_config(cfg, "config.json")


@pytest.mark.parametrize("key", ["head_dim", "attention_head_dim"])
def test_a_head_dim_of_zero_is_refused_not_derived(key: str) -> None:
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
           key: 0, "torch_dtype": "bfloat16"}
    with pytest.raises(InputError, match="field 'head_dim': 0; a head has at least one dimension"):
        profile_from_hf_config(cfg, "config.json")


@pytest.mark.parametrize(("argv", "names"), [
    (["--policy", "gandalf:gamma=1e308"], "parameter 'gamma': must be in [0, 1,000,000], got 1e+308"),
    (["--policy", "meritkv:tau_s=-0.5"], "parameter 'tau_s': must be in [0, 1,000,000,000,000], got -0.5"),
    (["--device-option", "op_ratio=1e30"], "option op_ratio: must be in [0, 1]"),
    (["--param", "sessions=1e30"], "sessions must be in (0, 1,000,000,000]"),
    (["--model", "{d}/kv0.json"], "kv0.json:1: field 'num_key_value_heads': 0 with num_attention_heads 32"),
    (["{d}/dwpd.toml"], "field 'estimate.dwpd': must be in [0, 1000]"),
    (["--device-option", "pages_per_block=1e30"], "option pages_per_block: must be in (0, 65,536], got 1"),
    (["--device-option", "page_bytes=1e30"], "option page_bytes: a size must be in [0, 1 EiB], got 1"),
    (["--device-option", "page_bytes=4MiB"], "option page_bytes: must be in (0, 1,048,576], got 4194304"),
    (["--device-option", "ruh=9"], "option ruh: must be in [1, 8], got 9"),
], ids=["gamma", "tau", "op-ratio", "sessions", "kv-heads", "dwpd", "pages-per-block", "page-bytes-1e30",
        "page-bytes", "ruh"])
def test_absurd_values_on_the_command_line_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], names: str,
) -> None:
    (tmp_path / "kv0.json").write_text(json.dumps({
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 0, "hidden_size": 4096,
        "intermediate_size": 14336, "torch_dtype": "bfloat16"}))
    (tmp_path / "dwpd.toml").write_text(f"[estimate]\ndwpd = {1e308!r}\n")
    out = tmp_path / "run"
    line = one_line_error(["run", *(a.replace("{d}", str(tmp_path)) for a in argv), "-o", str(out)],
                          capsys, monkeypatch)
    assert names.replace("{d}", str(tmp_path)) in line, line
    assert not out.exists()


def bounded_device_options() -> list[tuple[type, str, float]]:
    from kvwear.harness.devices.fio import FioParams

    return [(cls, f.name, f.metadata["le"]) for cls in (FioParams, SimParams) for f in dataclasses.fields(cls)
            if f.metadata.get("le") is not None]


def written_above(cls: type, name: str, v: float) -> str:
    """A value above the bound, written as a user might: an integer option gets an integral value
    (in float form on `sim`, '1e+20' or '1099511627777.0'), since a fraction is refused as not an
    integer before its range is checked; a float option gets the float itself."""
    if typing.get_type_hints(cls)[name] is float:
        return repr(v)
    return repr(float(math.floor(v) + 1)) if cls is SimParams else str(math.floor(v) + 1)


@SETTINGS
@given(case=st.sampled_from(bounded_device_options()), data=st.data())
def test_a_device_option_above_its_range_names_the_range(case: tuple, data: st.DataObject) -> None:
    cls, name, hi = case
    value = data.draw(st.one_of(st.integers(int(hi) + 1, 2**80).map(str), st.floats(hi, 1e308, exclude_min=True)
                                .map(lambda v: written_above(cls, name, v))))
    shown = f"{int(hi):,}" if float(hi).is_integer() else f"{hi:g}"
    # a size beyond 1 EiB is refused as a size before its own bound
    size = r"|a size must be in \[0, 1 EiB\]" if name.endswith("_bytes") else ""
    rng = rf"must be in [\[(][-\d.,e+]+, {re.escape(shown)}\]"
    with pytest.raises(KvwearError, match=rf"option {name}: ({rng}{size}), got"):
        cls.parse({name: value}, "device x")
