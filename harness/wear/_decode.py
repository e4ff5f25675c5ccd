"""Shared decoding helpers for the wear parsers: little-endian fields at byte offsets, strict JSON
field access, and the classification of a tool's refusal (an NVMe status) as "not supported".

Every failure is a `kvwear.errors.InputError` naming the source (a file path, or the command
that produced the output), the field and, for JSON syntax errors, the line. Nothing here runs a
command or touches a device.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kvwear.errors import InputError, KvwearError

T = TypeVar("T")


class ReaderUnavailable(KvwearError):
    """A reader cannot read this device (log not supported, not the right device, no tool).

    `snapshot` records it as an unsupported `WearSample` carrying this message; any other error
    (garbled output, a bug) propagates."""


@dataclass(frozen=True)
class LogUnsupported:
    """A typed 'this device does not have that log' result, decoded from the tool's refusal.

    `status` is the NVMe status word when the tool printed one (e.g. 0x4109: DNR, command
    specific, Invalid Log Page), `not_supported` is True when that status means the device lacks
    the log (Invalid Log Page, Invalid Field in Command, Invalid Opcode) or the page carries a
    foreign layout (GUID mismatch), False for any other refusal (permissions, transport)."""

    source: str
    reason: str
    message: str
    status: int | None = None
    not_supported: bool = True


# NVMe status codes meaning "the controller does not implement this": (status code type, code).
_NOT_SUPPORTED = {
    (0, 0x01): "Invalid Command Opcode",
    (0, 0x02): "Invalid Field in Command",
    (1, 0x09): "Invalid Log Page",
}


def describe_nvme_status(status: int) -> tuple[str, bool]:
    """(name, means-not-supported) for a 16-bit NVMe status as nvme-cli prints it (DNR at bit 14,
    SCT at bits 8-10, SC at bits 0-7)."""
    sct, sc = (status >> 8) & 0x7, status & 0xFF
    name = _NOT_SUPPORTED.get((sct, sc))
    if name is not None:
        return name, True
    return f"NVMe status 0x{status:04x} (SCT {sct}, SC 0x{sc:02x})", False


_RET = re.compile(r"ret\s*=\s*(-?\d+)")
_STATUS_HEX = re.compile(r"NVMe [Ss]tatus[^\n]*?\((0x[0-9a-fA-F]+)\)")


def parse_nvme_refusal(text: str | bytes, source: str) -> LogUnsupported:
    """Decode an nvme-cli refusal (its stderr) into a `LogUnsupported`.

    Understands `... ret = 16649` (the OCP plugin) and `NVMe status: NAME(0x4109)` (the core
    commands). A negative ret is a host-side error (errno or the plugin's own -1, e.g. a GUID
    mismatch); it is reported as not supported only for the plugin's GUID message."""
    msg = text.decode(errors="replace") if isinstance(text, bytes) else text
    # The recorded fixtures append the exit code as 'rc=N'; it is not tool output.
    msg = "\n".join(ln for ln in msg.splitlines() if not re.fullmatch(r"\s*rc=\d+\s*", ln)).strip()
    if not msg:
        raise InputError(source, None, "stderr", "empty refusal: the tool printed no message")
    status: int | None = None
    m = _STATUS_HEX.search(msg)
    if m:
        status = int(m.group(1), 16)
    else:
        rets = _RET.findall(msg)
        if rets:
            status = int(rets[-1])
    if status is None:
        if "Unknown GUID" in msg:
            return LogUnsupported(source, "log page GUID mismatch (not this layout)", msg, None, True)
        return LogUnsupported(source, "tool refused without a status", msg, None, False)
    if status < 0:
        guid = "Unknown GUID" in msg
        reason = "log page GUID mismatch (not this layout)" if guid else f"host error {status}"
        return LogUnsupported(source, reason, msg, status, guid)
    name, unsupported = describe_nvme_status(status)
    return LogUnsupported(source, name, msg, status, unsupported)


def refusal_from_error(exc: subprocess.CalledProcessError, source: str) -> LogUnsupported:
    """The `LogUnsupported` a failed nvme-cli run means (its stderr, else stdout)."""
    text = exc.stderr or exc.output or b""
    if not text:
        return LogUnsupported(source, f"exit status {exc.returncode}", "", None, False)
    return parse_nvme_refusal(text, source)


def run_or_unavailable(runner: Callable[[Sequence[str]], bytes], argv: Sequence[str]) -> bytes:
    """Run a vendor-log command; a refusal by the tool or the drive becomes `ReaderUnavailable`
    carrying the decoded NVMe status, so `snapshot` records the reader as unsupported."""
    src = " ".join(argv)
    try:
        return runner(argv)
    except subprocess.CalledProcessError as exc:
        r = refusal_from_error(exc, src)
        raise ReaderUnavailable(f"{src}: {r.reason}: {r.message}") from None


# ---------------------------------------------------------------------------------------------
# binary fields


def need_length(data: bytes, size: int, source: str, what: str, exact: bool = True) -> None:
    """Raise a clear error when `data` is not `size` bytes (or shorter than it, if not exact)."""
    n = len(data)
    if (exact and n != size) or n < size:
        kind = "truncated" if n < size else "too long"
        raise InputError(source, None, what, f"expected {size} bytes, got {n} ({kind})")


def le_uint(data: bytes, offset: int, size: int) -> int:
    """Unsigned little-endian integer of `size` bytes at `offset` (bounds checked by the caller)."""
    return int.from_bytes(data[offset:offset + size], "little")


# ---------------------------------------------------------------------------------------------
# JSON fields


def load_json(text: str | bytes, source: str) -> Any:
    """json.loads with an InputError naming the source and line on a syntax error."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as exc:
            raise InputError(source, None, None, f"not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise InputError(source, None, None, "empty output: expected a JSON document")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(source, exc.lineno, None, f"not valid JSON: {exc.msg} (column {exc.colno})") from None


def need_object(obj: Any, source: str, field: str | None = None) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise InputError(source, None, field, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def json_uint(obj: Mapping[str, Any], keys: str | Sequence[str], source: str) -> int:
    """A required non-negative integer field, given as a JSON number or a decimal string
    (nvme-cli prints 128-bit counters as strings). `keys` may list alternative spellings across
    tool versions; the first present wins."""
    names = [keys] if isinstance(keys, str) else list(keys)
    for name in names:
        if name in obj:
            return to_uint(obj[name], source, name)
    alt = " or ".join(repr(n) for n in names)
    raise InputError(source, None, names[0], f"missing (looked for {alt})")


def json_uint_or(obj: Mapping[str, Any], keys: str | Sequence[str], source: str, default: T) -> int | T:
    """Like `json_uint`, but `default` when no spelling is present (a present bad value still fails)."""
    names = [keys] if isinstance(keys, str) else list(keys)
    if not any(n in obj for n in names):
        return default
    return json_uint(obj, names, source)


def to_uint(value: Any, source: str, field: str) -> int:
    if isinstance(value, bool):
        raise InputError(source, None, field, f"expected a non-negative integer, got {value!r}")
    if isinstance(value, int):
        out = value
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        out = int(value)
    else:
        raise InputError(source, None, field, f"expected a non-negative integer, got {value!r}")
    if out < 0:
        raise InputError(source, None, field, f"expected a non-negative integer, got {value!r}")
    return out


def hexdump(data: bytes) -> str:
    """The `raw` text kept for a binary log: lowercase hex, no separators."""
    return data.hex()
