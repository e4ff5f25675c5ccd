"""Who a drive is: the `DeviceIdentity` record of the run manifest, and pure parsers of the NVMe
identify data it is read from (`nvme id-ctrl -o json`, `nvme id-ns -o json`, `nvme list -o json`,
the identity part of `smartctl -j -a`); `nvme_identity` runs the nvme-cli commands through an
injected runner. (Whether an identity is a FEMU controller is `kvwear.harness.wear.femu.is_femu`;
a plain file's or block device's size comes from the kernel, `kvwear.harness.devices.identity`.)

This module parses; it must not open a device.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvwear.errors import InputError
from kvwear.harness.wear._decode import json_uint, json_uint_or, load_json, need_object
from kvwear.harness.wear.base import CommandRunner


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
class ControllerId:
    """The fields of Identify Controller kvwear uses (strings stripped of their space padding)."""

    model: str
    serial: str
    firmware: str
    vendor_id: int
    subsystem_vendor_id: int
    total_capacity_bytes: int          # tnvmcap; 0 when the controller does not report it
    subnqn: str
    version: int
    namespaces: int
    ctratt: int = 0                    # Controller Attributes; 0 when nvme-cli does not print it

    @property
    def fdp_supported(self) -> bool:
        """CTRATT bit 19: the controller supports Flexible Data Placement (NVMe 2.0, TP4146)."""
        return bool(self.ctratt >> 19 & 1)


@dataclass(frozen=True)
class NamespaceId:
    """Identify Namespace: size in logical blocks and the formatted LBA format."""

    size_blocks: int                   # nsze
    capacity_blocks: int               # ncap
    formatted_lba_index: int
    logical_block_bytes: int           # 2^lbads of the formatted LBA format
    metadata_bytes: int
    endurance_group: int

    @property
    def size_bytes(self) -> int:
        return self.size_blocks * self.logical_block_bytes


@dataclass(frozen=True)
class ListedDevice:
    """One row of `nvme list -o json`."""

    device_path: str
    namespace: int
    model: str
    serial: str
    firmware: str
    size_bytes: int
    sector_bytes: int
    extra: Mapping[str, Any] = field(default_factory=dict)


def _text(obj: Mapping[str, Any], key: str, source: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str):
        raise InputError(source, None, key, f"missing or not a string: {v!r}")
    return v.strip()


def parse_id_ctrl_json(text: str | bytes, source: str = "nvme id-ctrl -o json") -> ControllerId:
    obj = need_object(load_json(text, source), source)
    return ControllerId(
        model=_text(obj, "mn", source),
        serial=_text(obj, "sn", source),
        firmware=_text(obj, "fr", source),
        vendor_id=json_uint(obj, "vid", source),
        subsystem_vendor_id=json_uint(obj, "ssvid", source),
        total_capacity_bytes=json_uint_or(obj, "tnvmcap", source, 0),
        subnqn=str(obj.get("subnqn", "")).strip(),
        version=json_uint_or(obj, "ver", source, 0),
        namespaces=json_uint_or(obj, "nn", source, 0),
        ctratt=json_uint_or(obj, "ctratt", source, 0),
    )


def parse_id_ns_json(text: str | bytes, source: str = "nvme id-ns -o json") -> NamespaceId:
    """FLBAS bits 0-3 (and, when more than 16 formats exist, bits 5-6 as the high part) index
    `lbafs`; `ds` is log2 of the logical block size."""
    obj = need_object(load_json(text, source), source)
    flbas = json_uint(obj, "flbas", source)
    index = (flbas & 0x0F) | (((flbas >> 5) & 0x03) << 4)
    lbafs = obj.get("lbafs")
    if not isinstance(lbafs, list) or not lbafs:
        raise InputError(source, None, "lbafs", f"missing or empty: {lbafs!r}")
    if index >= len(lbafs):
        raise InputError(source, None, "flbas", f"selects LBA format {index}, only {len(lbafs)} listed")
    fmt = need_object(lbafs[index], source, f"lbafs[{index}]")
    ds = json_uint(fmt, "ds", source)
    if not 9 <= ds <= 16:
        raise InputError(source, None, f"lbafs[{index}].ds", f"log2 block size {ds} outside 9..16")
    return NamespaceId(
        size_blocks=json_uint(obj, "nsze", source),
        capacity_blocks=json_uint(obj, "ncap", source),
        formatted_lba_index=index,
        logical_block_bytes=1 << ds,
        metadata_bytes=json_uint_or(fmt, "ms", source, 0),
        endurance_group=json_uint_or(obj, "endgid", source, 0),
    )


def parse_nvme_list_json(text: str | bytes, source: str = "nvme list -o json") -> list[ListedDevice]:
    obj = need_object(load_json(text, source), source)
    devices = obj.get("Devices")
    if not isinstance(devices, list):
        raise InputError(source, None, "Devices", f"missing or not a list: {devices!r}")
    out = []
    for i, d in enumerate(devices):
        src = f"{source} Devices[{i}]"
        d = need_object(d, src)
        out.append(ListedDevice(
            device_path=_text(d, "DevicePath", src),
            namespace=json_uint(d, "NameSpace", src),
            model=_text(d, "ModelNumber", src),
            serial=_text(d, "SerialNumber", src),
            firmware=_text(d, "Firmware", src),
            size_bytes=json_uint(d, "PhysicalSize", src),
            sector_bytes=json_uint(d, "SectorSize", src),
            extra={k: v for k, v in d.items() if k in ("UsedBytes", "MaximumLBA", "GenericPath")},
        ))
    return out


def identity_from_nvme(ctrl: ControllerId, ns: NamespaceId | None, path: str,
                       kind: str = "block") -> DeviceIdentity:
    """Combine Identify Controller and Namespace. Capacity is the namespace's size (nsze × block),
    since emulated controllers report tnvmcap = 0."""
    capacity = ns.size_bytes if ns is not None else (ctrl.total_capacity_bytes or None)
    extra: dict[str, Any] = {
        "vendor_id": ctrl.vendor_id, "subsystem_vendor_id": ctrl.subsystem_vendor_id,
        "subnqn": ctrl.subnqn, "nvme_version": ctrl.version, "tnvmcap_bytes": ctrl.total_capacity_bytes,
    }
    if ns is not None:
        extra.update(nsze=ns.size_blocks, lba_format=ns.formatted_lba_index,
                     metadata_bytes=ns.metadata_bytes, endurance_group=ns.endurance_group)
    return DeviceIdentity(
        kind=kind, path=path, model=ctrl.model, serial=ctrl.serial, firmware=ctrl.firmware,
        capacity_bytes=capacity, logical_block_bytes=ns.logical_block_bytes if ns else None,
        extra=extra,
    )


def identity_from_nvme_list(devices: list[ListedDevice], path: str, kind: str = "block") -> DeviceIdentity:
    """The `nvme list` row whose DevicePath is `path` (error listing the paths present)."""
    for d in devices:
        if d.device_path == path:
            return DeviceIdentity(kind=kind, path=path, model=d.model, serial=d.serial,
                                  firmware=d.firmware, capacity_bytes=d.size_bytes,
                                  logical_block_bytes=d.sector_bytes,
                                  extra={"namespace": d.namespace, **d.extra})
    paths = ", ".join(d.device_path for d in devices) or "none"
    raise InputError("nvme list -o json", None, "DevicePath", f"no device {path!r} (listed: {paths})")


def identity_from_smartctl(text: str | bytes, path: str, source: str = "smartctl -j -a",
                           kind: str = "block") -> DeviceIdentity:
    """Model, serial and firmware from `smartctl -j -a`; capacity and block size when printed."""
    obj = need_object(load_json(text, source), source)
    cap = obj.get("user_capacity")
    capacity = json_uint(cap, "bytes", source) if isinstance(cap, Mapping) else None
    lbs = json_uint_or(obj, "logical_block_size", source, None)
    return DeviceIdentity(kind=kind, path=path, model=_text(obj, "model_name", source),
                          serial=_text(obj, "serial_number", source),
                          firmware=_text(obj, "firmware_version", source),
                          capacity_bytes=capacity, logical_block_bytes=lbs)


def list_nvme_devices(runner: CommandRunner) -> list[ListedDevice]:
    """Run `nvme list -o json` (every NVMe namespace the host sees)."""
    argv = ["nvme", "list", "-o", "json"]
    return parse_nvme_list_json(runner(argv), " ".join(argv))


_CTRL_PATH = re.compile(r"^/dev/nvme\d+$")


def nvme_identity(device_path: str, runner: CommandRunner, kind: str = "block") -> DeviceIdentity:
    """Run `nvme id-ctrl` and `nvme id-ns` on `device_path` (a namespace block device, or a
    controller character device, for which namespace 1 is identified)."""
    ctrl_argv = ["nvme", "id-ctrl", device_path, "-o", "json"]
    ns_argv = ["nvme", "id-ns", device_path, "-o", "json"]
    if _CTRL_PATH.match(device_path):
        ns_argv[3:3] = ["--namespace-id=1"]
    ctrl = parse_id_ctrl_json(runner(ctrl_argv), " ".join(ctrl_argv))
    ns = parse_id_ns_json(runner(ns_argv), " ".join(ns_argv))
    return identity_from_nvme(ctrl, ns, device_path, kind)
