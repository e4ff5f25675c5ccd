"""The one `key=value` parser: policy specs, device and generator options, sweep grids and
category maps all split their pairs here, so every caller refuses the same bad input the same
way (a missing `=`, an empty key, a key given twice) with a one-line error naming where.

Must not: convert values (each caller knows its types) or split lists (callers differ in what
separates items: commas, bracket-aware commas, repeated flags).
"""

from __future__ import annotations

from collections.abc import Iterable


def parse_kv(items: Iterable[str], where: str, *, form: str = "key=value",
             error: type[Exception] = ValueError) -> dict[str, str]:
    """['a=1', ' b = x '] → {'a': '1', 'b': 'x'} (stripped, in order); bad items raise `error`
    with `where` and `form` (the syntax as the caller's help spells it) in the message."""
    out: dict[str, str] = {}
    for item in items:
        k, eq, v = item.partition("=")
        k = k.strip()
        if not eq or not k:
            raise error(f"{where}: {item!r} is not {form}")
        if k in out:
            raise error(f"{where}: {k!r} given twice")
        out[k] = v.strip()
    return out
