"""The device-backend plugin family: one interface, a registry by name.

A backend plays a `block_ops` plan (harness.schema.BLOCK_OPS) on one device and reports what it
issued; it can snapshot the device's wear counters. Backends: `sim` (the embedded FTL emulator),
`file:PATH`, `block:/dev/X`, `qemu`, `femu`. A backend must never issue I/O outside
[0, capacity_bytes) and must run its safety checks in `open`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from harness.safety import FILE_MARKER_XATTR
from kvwear.errors import KvwearError
from kvwear.registry import Registry


@dataclass(frozen=True)
class DeviceSpec:
    """What the user asked for: `kind` is the registry name, `target` the path (if any)."""

    kind: str
    target: str = ""
    capacity_bytes: int | None = None          # None: the device's own size
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, **options: Any) -> DeviceSpec:
        """'sim' → kind sim; 'file:/tmp/x.img' → kind file, target /tmp/x.img."""
        kind, _, target = text.partition(":")
        return cls(kind=kind, target=target, options=dict(options))


@dataclass(frozen=True)
class DeviceIdentity:
    """Who the device is, for the manifest."""

    kind: str
    path: str
    model: str | None = None
    serial: str | None = None
    firmware: str | None = None
    capacity_bytes: int | None = None
    logical_block_bytes: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayResult:
    """What a backend issued for one plan. Bytes are what the backend itself counted
    (fio's io_bytes, the FTL's host pages × page size), not the plan's numbers."""

    device: str
    write_bytes: int
    read_bytes: int
    trim_bytes: int
    write_ios: int
    read_ios: int
    wall_s: float
    nand_write_bytes: int | None = None        # where the device exposes media writes
    waf: float | None = None
    tool: str = ""                              # e.g. "fio-3.33", "kvwear-ftl"
    tool_output_path: str | None = None         # raw output kept in the run directory
    # host and NAND bytes per interval (columns host_bytes, nand_bytes), where the backend counts
    # them (the embedded FTL): the run draws its WAF over the replay from it
    intervals_path: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


ReplayProgress = Callable[[int, int], None]


def mark_created(path: str | Path) -> None:
    """Mark a file target or drive image as kvwear's (created by it, or confirmed to overwrite), so
    later runs write to it without a confirmation (harness.safety.check_file_target). A filesystem
    without user extended attributes leaves it unmarked."""
    with contextlib.suppress(OSError):
        os.setxattr(path, FILE_MARKER_XATTR, b"1")


class DeviceBackend(Protocol):
    """A device that plays block plans. Construct with `open_device(spec, workdir)`."""

    spec: DeviceSpec

    def identity(self) -> DeviceIdentity: ...

    def capacity_bytes(self) -> int: ...

    def replay(self, plan: pa.Table, workdir: Path, *, timed: bool = False,
               progress: ReplayProgress | None = None) -> ReplayResult:
        """Play `plan` (BLOCK_OPS rows, in order). `timed` honours t_s; else as fast as possible.
        `progress(done, total)` is called as the replay advances, in the backend's own steps."""
        ...

    def close(self) -> None: ...


def option_flag(options: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """A boolean backend option, which may arrive as text (--device-option k=v, or a TOML string):
    true/false, yes/no, on/off, 1/0; anything else is an error naming the option."""
    v = options.get(key, default)
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
    elif isinstance(v, bool | int):
        return bool(v)
    raise KvwearError(f"device option {key}: expected true or false, got {v!r}")


class DeviceFactory(Protocol):
    def __call__(self, spec: DeviceSpec, workdir: Path) -> DeviceBackend: ...


# Modules that register backends. Adding a backend = its module + one line here.
DEVICES: Registry[DeviceFactory] = Registry("device", modules=[
    "harness.devices.sim", "harness.devices.fio", "harness.devices.qemu"])


def open_device(spec: DeviceSpec, workdir: Path) -> DeviceBackend:
    """Open the backend named by `spec.kind` (unknown kinds list the valid ones)."""
    return DEVICES.get(spec.kind)(spec, workdir)
