"""Which policy modules exist: importing each registers its class in `policies.base.POLICIES`.

Adding a policy = its module + one line in `POLICY_MODULES`. `load_all()` imports them (once);
a module listed here that fails to import is an error, not a silently missing policy.
"""

from __future__ import annotations

import importlib
from typing import Any

from policies.base import POLICIES, Policy

POLICY_MODULES: list[str] = [
    "policies.lru",
    "policies.write_through",
    "policies.fifo",
    "policies.type_aware",
    "policies.lru_k",
    "policies.dynamo",
    "policies.hotprefix",
    "policies.marconi", "policies.wa", "policies.meritkv", "policies.gandalf", "policies.belady",
]

_loaded: set[str] = set()


def load_all() -> None:
    """Import every module of `POLICY_MODULES` (idempotent)."""
    for name in POLICY_MODULES:
        if name not in _loaded:
            importlib.import_module(name)
            _loaded.add(name)


def get_policy_class(name: str) -> type[Policy[Any]]:
    load_all()
    return POLICIES.get(name)


def policy_names() -> list[str]:
    load_all()
    return POLICIES.names()
