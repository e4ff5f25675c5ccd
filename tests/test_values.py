"""The one parser from text to typed value (kvwear.values): its rules, and every user-facing
entry point — the config file, `--param`, `--device-option`, a policy spec, FEMU's geometry —
reading the same value the same way and refusing the same bad value with the same reason."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvwear.emulator.guest import FemuGeometry
from kvwear.errors import KvwearError
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.sim import SimParams
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.policies.base import PolicySpecError, resolve_spec
from kvwear.values import BadValue, bounds, read_fields, read_value, toml_scalar
from kvwear.workloads.synthetic import GENERATORS


@dataclass(frozen=True)
class _Demo:
    n: int = 1
    x: float = 0.5
    on: bool = False
    name: str = "a"
    mode: Literal["fill", "steady"] = "fill"
    cap_bytes: int = 0
    wait_s: float = 0.0
    maybe: int | None = None
    tags: tuple[str, ...] = ()
    k: int = field(default=2, metadata=bounds(ge=1, le=8))
    w: float = field(default=1.0, metadata=bounds(gt=0))


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("n", "16", 16), ("n", 16.0, 16), ("n", "1e3", 1000), ("x", "0.25", 0.25), ("x", 3, 3.0),
    ("on", "Yes", True), ("on", "off", False), ("on", 1, True), ("name", "b c", "b c"), ("name", 12345, "12345"),
    ("mode", "steady", "steady"), ("cap_bytes", "64MiB", 64 << 20), ("cap_bytes", "1GB", 10**9),
    ("wait_s", "250ms", 0.25), ("wait_s", "10min", 600.0), ("maybe", "none", None), ("maybe", None, None),
    ("maybe", "7", 7), ("tags", "one", ("one",)), ("tags", ["a", "b"], ("a", "b")), ("k", "8", 8),
])
def test_values_are_read_by_their_fields_type(name: str, value: object, expected: object) -> None:
    assert read_fields(_Demo, {name: value}) == {name: expected}


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("n", "1.5", "expected an integer, got '1.5'"), ("n", True, "expected an integer, got True"),
    ("x", "nan", "expected a finite number"), ("x", "inf", "expected a finite number"),
    ("on", "maybe", "expected true or false, got 'maybe'"), ("name", True, "expected text, got True"),
    ("mode", "always", "must be one of fill, steady, got 'always'"),
    ("cap_bytes", "lots", "expected a size in bytes (4096, 64MiB, 1GB), got 'lots'"),
    ("cap_bytes", "2000PiB", "larger than 1 EiB"),
    ("cap_bytes", -1, "a size must be in [0, 1 EiB], got -1"), ("cap_bytes", "-1", "a size must be in [0, 1 EiB]"),
    ("cap_bytes", 2**63 - 1, "a size must be in [0, 1 EiB]"), ("cap_bytes", -4096.0, "a size must be in [0, 1 EiB]"),
    ("wait_s", "soon", "expected a number of seconds or a duration (250ms, 10min), got 'soon'"),
    ("k", 0, "must be in [1, 8], got 0"), ("k", "9", "must be in [1, 8], got 9"),
    ("tags", [1], "expected a list of strings"),
    ("w", "0", "must be > 0, got 0.0"),
    ("nope", 1, "unknown setting; valid: cap_bytes, k, maybe, mode, n, name, on, tags, w, wait_s, x"),
])
def test_bad_values_name_the_field_and_what_it_takes(name: str, value: object, reason: str) -> None:
    with pytest.raises(BadValue) as err:
        read_fields(_Demo, {name: value})
    assert err.value.field == name and reason in err.value.reason


@pytest.mark.parametrize(("text", "value"), [
    ("8", 8), ("1e3", 1000.0), ("true", True), ('"a b"', "a b"), ("[1, 2]", [1, 2]), ("steady", "steady"),
    ("64MiB", "64MiB"), ("-m 2G", "-m 2G"), ("", ""),
])
def test_command_line_text_reads_as_the_config_file_would(text: str, value: object) -> None:
    assert toml_scalar(text) == value


# Every entry point, one value: (what it is, how to apply it, the exception it raises).
def _config(v: object) -> object:
    return config_from_mapping({"workload": {"block_tokens": v}}).workload.block_tokens


def _param(v: object) -> object:
    return GENERATORS.get("multi-round").configure({"sessions": v}, "--param").sessions  # type: ignore[attr-defined]


def _device(v: object) -> object:
    return SimParams.of(DeviceSpec("sim", "", None, {"pages_per_block": v})).pages_per_block


def _femu(v: object) -> object:
    return FemuGeometry.from_options({"nchs": v}).nchs


_ENTRIES = [_config, _param, _device, _femu]


@given(st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                 st.booleans(),
                 # none / null: an optional field's None (pages_per_block is one), not an integer's
                 st.text(max_size=6).filter(lambda t: t.strip().lower() not in ("none", "null"))))
def test_every_entry_point_reads_an_integer_alike(v: object) -> None:
    """An integer setting: all four entry points accept the same values (from TOML values or text),
    give the same integer, and refuse the same values with the same reason."""
    try:
        want = read_value(v, int, name="n")
    except BadValue as bad:
        for entry in _ENTRIES:
            with pytest.raises((KvwearError, ValueError), match=re.escape(bad.reason)):
                entry(v)
        return
    for entry in _ENTRIES:
        try:
            assert entry(v) == want, (entry.__name__, v)
        except (KvwearError, ValueError) as exc:
            # a value the type reads can still be refused by a field's own range (block_tokens,
            # sessions and pages_per_block ≥ 1, FEMU's geometry): never by its type
            assert not re.search(r"expected (an integer|a size)", str(exc)), (entry.__name__, v, exc)


def test_policy_spec_reads_parameters_by_the_same_rules() -> None:
    assert resolve_spec("gandalf:gamma=4").params.gamma == 4.0          # type: ignore[attr-defined]
    assert resolve_spec("gandalf:gamma=1e1").params.gamma == 10.0      # type: ignore[attr-defined]
    for bad, reason in (("gamma=nan", "expected a finite number"), ("gamma=x", "expected a number, got 'x'")):
        with pytest.raises(PolicySpecError, match=reason):
            resolve_spec(f"gandalf:{bad}")


def test_device_option_bounds_and_choices_read_as_the_config_file_does() -> None:
    with pytest.raises(KvwearError, match=r"device sim: option precondition: must be one of none, fill, steady"):
        SimParams.of(DeviceSpec("sim", "", None, {"precondition": "always"}))
    with pytest.raises(KvwearError, match=r"option op_ratio: must be in \[0, 1\], got -0.1"):
        SimParams.of(DeviceSpec("sim", "", None, {"op_ratio": "-0.1"}))
    assert SimParams.of(DeviceSpec("sim", "", None, {"op_ratio": "0.28"})).op_ratio == 0.28
    assert _config("16.0") == 16 and _config(32) == 32
