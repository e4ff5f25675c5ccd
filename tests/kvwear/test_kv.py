"""One `key=value` parser: every caller refuses the same bad input, naming where."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import typer

from kvwear.harness.cli.run import _kv
from kvwear.harness.pipeline.sweep import expand_policy
from kvwear.kv import parse_kv
from kvwear.policies.base import PolicySpecError, parse_spec
from kvwear.workloads.synthetic import parse_category_map


def test_parse_kv_strips_and_keeps_order() -> None:
    assert parse_kv([" b = x ", "a=1", "c="], "here") == {"b": "x", "a": "1", "c": ""}
    assert list(parse_kv(["b=1", "a=2"], "here")) == ["b", "a"]


CALLERS: dict[str, tuple[Callable[[list[str]], object], type[Exception], str]] = {
    "policy spec": (lambda items: parse_spec("lru-k:" + ",".join(items)), PolicySpecError, "policy spec"),
    "sweep grid": (lambda items: expand_policy("lru-k:" + ",".join(items)), ValueError, "policy spec"),
    "--device-option": (lambda items: _kv(items, "--device-option"), typer.BadParameter, "--device-option"),
    "category map": (lambda items: parse_category_map(",".join(items)), ValueError, "category map"),
}


@pytest.mark.parametrize("caller", list(CALLERS))
@pytest.mark.parametrize(("items", "says"), [
    (["k=1", "oops"], "'oops' is not"),
    (["=1"], "'=1' is not"),
    (["k=1", " k = 2"], "'k' given twice"),
])
def test_every_caller_refuses_the_same_input(caller: str, items: list[str], says: str) -> None:
    fn, err, where = CALLERS[caller]
    with pytest.raises(err) as ei:
        fn(items)
    msg = str(ei.value)
    assert where in msg and says in msg, msg
