"""The one parser from a user's value to a typed value.

Every user-facing setting is a field of a typed, frozen dataclass: the run config's sections, a
device backend's options (`--device-option`, `[device] options`), a synthetic generator's options
(`--param`, `[workload] params`), a policy's parameters (`gandalf:gamma=8`) and FEMU's geometry.
They are all read here, by one set of rules, with one error format; each caller only adds where the
value came from (a file, a flag, a policy spec) and raises its own error class.

A value arrives as text (the command line, a policy spec) or as what a TOML file holds (numbers,
booleans, strings, arrays, tables); `toml_scalar` reads command-line text as the same `KEY = VALUE`
would read in a config file, bare words as text. Then, by the field's type:

- `bool`: true / false, or text true|false|yes|no|on|off|1|0 (any case);
- `int`: an integer, an integral number (16.0, 1e6), or text of one; a size field (named `*_bytes`
  or marked `unit="bytes"`) also a size (4096, 64MiB, 1.5GB); 16.7 is refused, not truncated;
- `float`: a finite number or text of one; a duration field (named `*_s`) also a duration (250ms,
  10min); a bandwidth (`*_bytes_per_s`) also a size per second;
- `str`: text (a number as its text); a `Literal[...]` or a field's `choices`: one of them;
- `X | None`: None, or the text none / null; `tuple[str, ...]`: an array of text, or one text;
  `tuple[tuple[str, float], ...]` (named numbers, e.g. a share per category): text
  `name=1.5,other=2`, a table, or an array of pairs, each number read as a float; a mapping: a table;
- bounds in the field's metadata (`ge`, `gt`, `le`, `lt`): the value inside them.

Errors are `BadValue(field, reason)`: "expected an integer, got '1.5'", "must be ≥ 1, got 0".

Must not: know any caller's settings or defaults (those are the dataclasses'), or read files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin

from kvwear.kv import parse_kv
from kvwear.units import MAX_SIZE_BYTES, parse_duration, parse_size

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


class BadValue(ValueError):
    """A value its field cannot take: `field` (its name) and `reason` (what is wrong, one line)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def bounds(*, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None, choices: tuple[str, ...] = (), unit: str | None = None) -> dict[str, Any]:
    """Field metadata that `read_value` checks: numeric bounds, a closed set of words, a unit
    (`"bytes"`: sizes accepted, `"s"`: durations accepted) for fields whose name does not say it."""
    return {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "unit": unit}


def toml_scalar(text: str) -> Any:
    """Command-line text as the value `KEY = text` holds in a TOML file: 8 → 8, 1e3 → 1000.0,
    true → True, "a b" → 'a b', [1, 2] → [1, 2]; anything TOML does not read (steady, 64MiB,
    -m 2G) is the text itself."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _unit(name: str, meta: Mapping[str, Any]) -> str | None:
    if meta.get("unit"):
        return str(meta["unit"])
    if name.endswith("_bytes_per_s"):
        return "bytes/s"
    if name.endswith("_bytes"):
        return "bytes"
    if name.endswith("_s"):
        return "s"
    return None


def _read_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE + _FALSE:
        return v.strip().lower() in _TRUE
    raise ValueError("expected true or false")


def _read_int(v: Any, unit: str | None) -> int:
    if isinstance(v, str) and _NUMBER.fullmatch(v):
        v = float(v) if any(c in v for c in ".eE") else int(v)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool):
        if unit == "bytes" and not 0 <= v <= MAX_SIZE_BYTES:
            # a size is a size whatever its form: -1 is no more a size than '-1GB' is
            raise ValueError(f"a size must be in [0, 1 EiB], got {_got(v)}")
        return v
    if unit == "bytes" and isinstance(v, str):
        try:
            return parse_size(v)
        except ValueError as exc:
            if "larger than" in str(exc):
                raise
    raise ValueError("expected a size in bytes (4096, 64MiB, 1GB)" if unit == "bytes" else "expected an integer")


def _read_float(v: Any, unit: str | None) -> float:
    if isinstance(v, str):
        with contextlib.suppress(ValueError):      # 'nan' and 'inf' read here, refused below
            v = float(v)
    with contextlib.suppress(ValueError):      # not a duration / size: refused below, with the forms
        if isinstance(v, str) and unit == "s":
            v = parse_duration(v)
        elif isinstance(v, str) and unit in ("bytes", "bytes/s"):
            v = float(parse_size(v))
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError({"s": "expected a number of seconds or a duration (250ms, 10min)",
                          "bytes/s": "expected bytes per second or a size (10GB)"}.get(unit or "", "expected a number"))
    if not math.isfinite(v):
        raise ValueError("expected a finite number")
    return float(v)


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e21 else f"{x:g}"


def _got(x: Any) -> str:
    # an integer read from '1e300' has 301 digits: past 1e21 it is shown the way it was likely written
    return f"{float(x):g}" if isinstance(x, int) and abs(x) >= 1e21 else repr(x)


def _check_bounds(out: Any, meta: Mapping[str, Any]) -> None:
    """The value inside the field's bounds, else 'must be in [lo, hi]' (or '≥ lo', '< hi', …)."""
    ge, gt, le, lt = (meta.get(k) for k in ("ge", "gt", "le", "lt"))
    ok = ((ge is None or out >= ge) and (gt is None or out > gt) and (le is None or out <= le)
          and (lt is None or out < lt))
    if ok:
        return
    lo, hi = (ge if ge is not None else gt), (le if le is not None else lt)
    if lo is not None and hi is not None:
        rng = f"{'[' if ge is not None else '('}{_num(lo)}, {_num(hi)}{']' if le is not None else ')'}"
        raise ValueError(f"must be in {rng}, got {_got(out)}")
    word = "≥" if ge is not None else ">" if gt is not None else "≤" if le is not None else "<"
    bound = lo if lo is not None else hi
    assert bound is not None                      # not ok: some bound was given
    raise ValueError(f"must be {word} {_num(bound)}, got {_got(out)}")


def read_value(value: Any, tp: Any, *, name: str, meta: Mapping[str, Any] | None = None) -> Any:
    """`value` as type `tp` by the module's rules (`meta`: the field's metadata); BadValue names `name`."""
    meta = meta or {}
    try:
        return _read(value, tp, name, meta)
    except BadValue:
        raise
    except ValueError as exc:
        reason = str(exc)
        if reason.startswith("expected"):
            reason += f", got {value!r}"
        raise BadValue(name, reason) from None


def _read(v: Any, tp: Any, name: str, meta: Mapping[str, Any]) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        if v is None or (isinstance(v, str) and v.strip().lower() in ("none", "null")):
            return None
        rest = tuple(a for a in args if a is not type(None))
        tp = rest[0] if len(rest) == 1 else typing.Union[rest]       # noqa: UP007 (built at run time)
        origin, args = get_origin(tp), get_args(tp)
    choices = tuple(args) if origin is Literal else tuple(meta.get("choices") or ())
    if choices:
        if not isinstance(v, str) or v not in choices:
            raise ValueError(f"must be one of {', '.join(map(str, choices))}, got {v!r}")
        return v
    unit = _unit(name, meta)
    out: Any
    if tp is bool:
        return _read_bool(v)
    if tp is int:
        out = _read_int(v, unit)
    elif tp is float:
        out = _read_float(v, unit)
    elif tp is str:
        # a number is its text: command-line values read as TOML makes 12345 a number, and a text
        # field (a serial number, a label) must still take it
        if isinstance(v, int | float) and not isinstance(v, bool):
            return str(v)
        if not isinstance(v, str):
            raise ValueError("expected text")
        return v
    elif origin is tuple and args and args[0] is str:
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list | tuple) or not all(isinstance(x, str) for x in items):
            raise ValueError("expected a list of strings")
        return tuple(items)
    elif origin is tuple and args and get_args(args[0]) == (str, float):
        return _read_named_numbers(v)
    elif origin in (Mapping, dict) or tp in (Mapping, dict):
        if not isinstance(v, Mapping):
            raise ValueError("expected a table")
        return dict(v)
    else:
        raise TypeError(f"{name}: a field of type {tp!r} is not a user setting kvwear.values can read")
    _check_bounds(out, meta)
    return out


def _read_named_numbers(v: Any) -> tuple[tuple[str, float], ...]:
    if isinstance(v, str):
        try:
            v = parse_kv(v.split(","), "", form="NAME=NUMBER[,NAME=NUMBER...]")
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix(": ")) from None
    if isinstance(v, Mapping):
        v = list(v.items())
    if not isinstance(v, list | tuple) or not all(isinstance(p, list | tuple) and len(p) == 2 for p in v):
        raise ValueError("expected NAME=NUMBER[,NAME=NUMBER...] or a table of numbers")
    out = []
    for name, x in v:
        try:
            out.append((str(name), _read_float(x, None)))
        except ValueError:
            raise ValueError(f"{name}: expected a number, got {x!r}") from None
    return tuple(out)


def read_fields(cls: type, values: Mapping[str, Any], *, kind: str = "setting") -> dict[str, Any]:
    """The keyword arguments of dataclass `cls` from `values` (each read by its field's type and
    metadata); an unknown name is refused with the valid ones."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    out: dict[str, Any] = {}
    for k, v in values.items():
        if k not in fields:
            raise BadValue(k, f"unknown {kind}; valid: {', '.join(sorted(fields))}")
        out[k] = read_value(v, hints[k], name=k, meta=fields[k].metadata)
    return out
