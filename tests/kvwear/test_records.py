"""Typed records on disk (kvwear.records): what is written reads back equal, and a damaged,
foreign or outdated file fails with one line naming the file and the field."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvwear.records import RecordError, dump, load


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner:
    name: str
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class Outer:
    KIND: ClassVar[str] = "outer"
    VERSION: ClassVar[int] = 3

    count: int
    ratio: float
    flag: bool
    colour: Colour
    mode: Literal["a", "b"]
    inner: Inner
    maybe: Inner | None = None
    pair: tuple[int, float] = (0, 0.0)
    table: dict[str, int] = field(default_factory=dict)


def _outer(**over: object) -> Outer:
    base = {"count": 3, "ratio": 0.5, "flag": True, "colour": Colour.RED, "mode": "a",
            "inner": Inner("x", (1, 2, 3)), "maybe": Inner("y", ()), "pair": (4, 2.5), "table": {"k": 1}}
    return Outer(**{**base, **over})  # type: ignore[arg-type]


def test_a_record_reads_back_equal(tmp_path: Path) -> None:
    rec = _outer(ratio=math.inf, maybe=None)
    assert load(Outer, dump(rec, tmp_path / "r.json")) == rec
    data = json.loads((tmp_path / "r.json").read_text().replace("Infinity", "1e999"))
    assert data["kind"] == "outer" and data["version"] == 3


@given(count=st.integers(-2**62, 2**62), ratio=st.floats(allow_nan=False), flag=st.booleans(),
       sizes=st.lists(st.integers(0, 2**40), max_size=5), name=st.text(max_size=8))
def test_round_trip_of_generated_records(tmp_path_factory: pytest.TempPathFactory, count: int, ratio: float,
                                         flag: bool, sizes: list[int], name: str) -> None:
    rec = _outer(count=count, ratio=ratio, flag=flag, inner=Inner(name, tuple(sizes)))
    path = tmp_path_factory.mktemp("r") / "r.json"
    assert load(Outer, dump(rec, path)) == rec


@pytest.mark.parametrize(("damage", "message"), [
    (lambda d: "{" + json.dumps(d)[:40], r"not valid JSON at line 1 column \d+ \(truncated or damaged\)"),
    (lambda d: json.dumps([]), "must be a JSON object"),
    (lambda d: json.dumps({**d, "kind": "plan"}), r"not a outer record \(kind 'plan'\)"),
    (lambda d: json.dumps({**d, "version": 2}), "outer record version 2, this kvwear reads version 3"),
    (lambda d: json.dumps({k: v for k, v in d.items() if k != "count"}), "field count: missing"),
    (lambda d: json.dumps({**d, "count": "3"}), "field count: expected an integer, found '3'"),
    (lambda d: json.dumps({**d, "count": True}), "field count: expected an integer, found True"),
    (lambda d: json.dumps({**d, "flag": 1}), "field flag: expected true or false"),
    (lambda d: json.dumps({**d, "colour": "green"}), "field colour: 'green' is not one of 'red', 'blue'"),
    (lambda d: json.dumps({**d, "mode": "c"}), "field mode: 'c' is not one of 'a', 'b'"),
    (lambda d: json.dumps({**d, "inner": {"name": "x", "sizes": [1, "2"]}}), r"field inner.sizes\[1\]"),
    (lambda d: json.dumps({**d, "pair": [1]}), "field pair: expected 2 items, found 1"),
    (lambda d: json.dumps({**d, "bogus": 1}), "unknown field"),
    (lambda d: json.dumps({**d, "table": {"k": 1.5}}), "field table.k: expected an integer"),
])
def test_a_damaged_record_names_the_file_and_the_field(tmp_path: Path, damage, message: str) -> None:
    path = dump(_outer(), tmp_path / "r.json")
    path.write_text(damage(json.loads(path.read_text())))
    with pytest.raises(RecordError, match=message) as exc:
        load(Outer, path)
    assert str(exc.value).startswith(f"{path}: ") and "\n" not in str(exc.value)


def test_a_missing_record_says_its_stage_has_not_finished(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match=r"r.json: missing \(its stage has not finished\)"):
        load(Outer, tmp_path / "r.json")
