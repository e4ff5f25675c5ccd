"""Error types shared by every stage.

`InputError` is the one error bad input produces: it names the file, the line (1-based)
and the field, so that a user can open the file at the right place.
"""

from __future__ import annotations


class KvwearError(Exception):
    """Base of every error kvwear raises on purpose."""


class InputError(KvwearError, ValueError):
    """Malformed input: names the file, the 1-based line (or record) and the field."""

    def __init__(
        self, path: str, line: int | None, field: str | None, message: str
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}"
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {message}")


class UnknownNameError(KvwearError, KeyError):
    """A plugin name that no registry knows; lists the valid names."""

    def __init__(self, family: str, name: str, valid: list[str]) -> None:
        self.family = family
        self.name = name
        self.valid = sorted(valid)
        super().__init__(f"unknown {family} {name!r}; valid: {', '.join(self.valid)}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class SafetyError(KvwearError):
    """A device the harness refuses to write to, with the reason."""
