"""Typed records on disk: frozen dataclasses written as versioned JSON and read back validated.

A stage hands the next one a frozen dataclass; when that record is also a file of the run directory
(a device result, a cross-validation record, a plan's accounting), `dump` writes it as JSON with its
`kind` and `version` (an atomic write: a killed run never leaves half a record that reads as whole)
and `load` reads it back into the same type, checking the kind, the version and every field against
its annotation: int, float, str, bool, None, enums, Literal sets, tuples, mappings and nested
records. A damaged or foreign file fails with one line naming the file and the field
(`RecordError`), never a KeyError deep in a reader.

Must not: hold any stage's records (each stage declares its own), or parse user text into values
(options and config keys have their own parser).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from kvwear.errors import KvwearError
from kvwear.tables import atomic_write


class RecordError(KvwearError):
    """A record file that is missing, truncated, of another kind or version, or has a bad field."""


R = TypeVar("R")


def encode(value: Any) -> Any:
    """A record (or any value of a record's field) as JSON-ready data; floats stay floats (±inf as
    JSON's Infinity, which `load` reads back)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    return value


def dump(record: Any, path: str | Path) -> Path:
    """Write `record` (a frozen dataclass with class attributes KIND and VERSION, the latter bumped
    when a field changes meaning) to `path` atomically."""
    data = {"kind": record.KIND, "version": record.VERSION, **encode(record)}
    path = Path(path)
    with atomic_write(path) as tmp:
        Path(tmp).write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def load(cls: type[R], path: str | Path) -> R:
    """Read a record of type `cls` from `path`, validated (module docstring)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RecordError(f"{path}: missing (its stage has not finished)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path}: unreadable ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno} "
                          f"(truncated or damaged): {exc.msg}") from None
    return from_data(cls, data, str(path))


def from_data(cls: type[R], data: Any, where: str) -> R:
    """`cls` from decoded JSON `data` (with its kind and version), naming `where` in errors."""
    kind, version = cls.KIND, cls.VERSION  # type: ignore[attr-defined]  # every record class declares both
    if not isinstance(data, dict):
        raise RecordError(f"{where}: a {kind} record must be a JSON object, found {type(data).__name__}")
    if data.get("kind") != kind:
        raise RecordError(f"{where}: not a {kind} record (kind {data.get('kind')!r})")
    if data.get("version") != version:
        raise RecordError(f"{where}: {kind} record version {data.get('version')!r}, this kvwear reads version "
                          f"{version} (written by another kvwear: run the stage again)")
    body = {k: v for k, v in data.items() if k not in ("kind", "version")}
    return typing.cast(R, decode(cls, body, where, ""))


def _fail(where: str, field: str, message: str) -> RecordError:
    return RecordError(f"{where}: field {field or '(top)'}: {message}")


def decode(tp: Any, value: Any, where: str, field: str) -> Any:
    """`value` (decoded JSON) as type `tp`, or RecordError naming `where` and the dotted `field`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return decode(a, value, where, field)
            except RecordError as exc:
                errors.append(str(exc))
        if errors:
            raise RecordError(errors[-1])
        raise _fail(where, field, f"{value!r} fits none of {tp}")
    if tp is type(None):
        if value is not None:
            raise _fail(where, field, f"expected null, found {value!r}")
        return None
    if origin is typing.Literal:
        if value not in args:
            raise _fail(where, field, f"{value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise _fail(where, field, f"{value!r} is not one of {', '.join(repr(m.value) for m in tp)}") from None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise _fail(where, field, f"expected an object, found {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            sub = f"{field}.{f.name}" if field else f.name
            if f.name in value:
                kwargs[f.name] = decode(hints[f.name], value[f.name], where, sub)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _fail(where, sub, "missing")
        unknown = sorted(set(value) - {f.name for f in dataclasses.fields(tp)})
        if unknown:
            raise _fail(where, field, f"unknown field(s) {', '.join(unknown)}")
        try:
            return tp(**kwargs)
        except (KvwearError, ValueError, TypeError) as exc:
            raise _fail(where, field, str(exc)) from None
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise _fail(where, field, f"expected a list, found {type(value).__name__}")
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v, where, f"{field}[{i}]") for i, v in enumerate(value))
        if origin is tuple:
            if len(value) != len(args):
                raise _fail(where, field, f"expected {len(args)} items, found {len(value)}")
            return tuple(decode(a, v, where, f"{field}[{i}]") for i, (a, v) in enumerate(zip(args, value,
                                                                                            strict=True)))
        return [decode(args[0], v, where, f"{field}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        if not isinstance(value, dict):
            raise _fail(where, field, f"expected an object, found {type(value).__name__}")
        vt = args[1] if len(args) == 2 else Any
        return {k: decode(vt, v, where, f"{field}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise _fail(where, field, f"expected true or false, found {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(where, field, f"expected an integer, found {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(where, field, f"expected a number, found {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _fail(where, field, f"expected a string, found {value!r}")
        return value
    if tp is Path:
        if not isinstance(value, str):
            raise _fail(where, field, f"expected a path, found {value!r}")
        return Path(value)
    raise _fail(where, field, f"kvwear.records cannot decode type {tp!r}")
