"""A registry of plugins by name, one per plugin family.

Families: trace loaders, policies, device backends, tracers, wear readers. One idiom for all:
the registry is made with the list of modules that hold its plugins
(`Registry("tracer", modules=[...])`), and each such module binds its names on import —
`@REG.register("name")` on the class or function, `REG.add("name", value)` for a value built
there (a configured reader, a second name for the same backend). Any lookup or listing first
imports the listed modules (once; a module that fails to import is an error, not a silently
missing plugin), so no caller has to import plugin modules for their side effect. Adding a
plugin = its module + one line in its registry's module list. An unknown name is answered with
the list of valid ones (`UnknownNameError`).

Must not: import anything at construction (the modules import the registry's own module).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from kvwear.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → plugin. Registration order (module list order, then order within a module) is kept
    for listings."""

    def __init__(self, family: str, modules: Sequence[str] = ()) -> None:
        self.family = family
        self.modules = tuple(modules)
        self._items: dict[str, T] = {}
        self._loaded = not self.modules

    def load(self) -> None:
        """Import every module of the family (idempotent)."""
        if self._loaded:
            return
        for name in self.modules:
            importlib.import_module(name)
        self._loaded = True

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        if name in self._items:
            raise ValueError(f"{self.family} {name!r} registered twice")
        self._items[name] = obj

    def get(self, name: str) -> T:
        self.load()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.family, name, list(self._items)) from None

    def names(self) -> list[str]:
        self.load()
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
