"""The device a run plays on, asked of its backend: the backend, its spec and the options the main
job plays it with (`with_run_options`: the sim drive in service unless the config names a drive),
the capacity the plan is laid out on, the tiers sized against a device of fixed size, its FTL
geometry and wear readers.

The run, its static checks (preflight) and sweeps ask these; they test no backend by name
(`Backend.capabilities` and its hooks answer). This module reads the config; it must not open a
device or write anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kvwear.emulator.ftl import FtlConfig
from kvwear.errors import KvwearError
from kvwear.harness.devices.base import Backend, DeviceSpec, backend
from kvwear.harness.devices.fs_player import FS_RESERVE
from kvwear.harness.pipeline.config import DEFAULT_SSD_BYTES, RunConfig
from kvwear.harness.plan.placement import PlacementConfig
from kvwear.harness.plan.planner import FILE_LAYOUTS
from kvwear.units import format_bytes

# The room a plan gets beyond the (scaled) SSD tier, for the 4 KiB rounding of each object: a
# device sized from the tier is tier × this; a tier sized from a device is device ÷ this. A file
# layout's tier also leaves the file system its share (FS_RESERVE, kvwear.harness.devices.fs_player).
CAPACITY_HEADROOM = 1.05


def _room(cfg: RunConfig) -> tuple[float, str]:
    """The device bytes a byte of (scaled) SSD tier needs, and what they are for."""
    if cfg.replay.layout in FILE_LAYOUTS:
        return (CAPACITY_HEADROOM / (1 - FS_RESERVE),
                f"{CAPACITY_HEADROOM} for 4 KiB rounding ÷ {1 - FS_RESERVE:g} for the file system's own space")
    return CAPACITY_HEADROOM, f"{CAPACITY_HEADROOM} for 4 KiB rounding"


def device_capacity(cfg: RunConfig) -> int:
    """The exposed capacity the plan is laid out on: the configured one, the whole device where the
    backend fixes it (`FixedCapacity.whole`: FEMU's devsz_mb, on femu or sim with geometry=femu),
    else the (scaled) SSD tier plus 5% for the 4 KiB rounding of objects, rounded up to the
    alignment. Call it on a config `size_tiers` resolved."""
    a = cfg.replay.align_bytes
    if not cfg.device.capacity_bytes:
        fixed = device_backend(cfg).fixed_capacity(device_spec(cfg, None))
        if fixed is not None and fixed.whole:
            return fixed.exposed_bytes
    ssd = cfg.tiers.ssd_bytes or DEFAULT_SSD_BYTES
    cap = cfg.device.capacity_bytes or int(ssd * cfg.workload.sample_fraction * CAPACITY_HEADROOM)
    return max(a, -(-cap // a) * a)


def with_run_options(cfg: RunConfig) -> RunConfig:
    """The config with the device options the main job plays (`Backend.run_options`: the sim
    backend's drive in service unless the config names a drive), so the stored config.toml and the
    manifest name the preset and the preconditioning a run measured."""
    opts = device_backend(cfg).run_options(cfg.device.options)
    if opts == dict(cfg.device.options):
        return cfg
    return dataclasses.replace(cfg, device=dataclasses.replace(cfg.device, options=opts))


def device_backend(cfg: RunConfig) -> type[Backend]:
    """The configured device's backend (its capabilities and hooks; unknown kinds list the valid ones)."""
    return backend(cfg.device.kind)


def fixed_device_bytes(cfg: RunConfig) -> int | None:
    """The size of a device the run cannot size itself (`Backend.fixed_capacity`: a block device,
    a femu drive's devsz_mb, the sim FTL with FEMU geometry and devsz_mb), or None (sim, and the
    backing files of file: and qemu, which the run creates or grows to the capacity it needs).
    The options are parsed first: a mistyped one is refused before the device is looked at."""
    b = device_backend(cfg)
    spec = device_spec(cfg, None)
    b.params(spec)
    fixed = b.fixed_capacity(spec)
    return None if fixed is None else fixed.exposed_bytes


@dataclass(frozen=True)
class TierSizing:
    """How `size_tiers` chose the SSD tier and the sample fraction, for the summary and the manifest."""

    ssd_bytes: int
    dram_bytes: int
    sample_fraction: float
    device_bytes: int | None       # the fixed device's usable bytes, None when the run sizes the device
    source: str                    # config | default | device | fit
    note: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def size_tiers(cfg: RunConfig) -> tuple[RunConfig, TierSizing]:
    """Resolve the SSD tier against the device. With a device of fixed size: no SSD tier
    (`tiers.ssd_bytes` 0) → the device's usable bytes ÷ the headroom (`_room`: CAPACITY_HEADROOM,
    and FS_RESERVE for a file layout) ÷ the sample fraction (the tier is the full-size one); a tier
    whose plan (tier × fraction × headroom) does not fit →
    an error naming the flags that fix it, or with `device.fit` the workload is scaled instead:
    the sample fraction becomes the share that fits and both tiers scale by it (the scaling of
    docs/design/replay-and-devices.md).
    Without a fixed device, 0 means DEFAULT_SSD_BYTES. Returns the resolved config."""
    w, t, d = cfg.workload, cfg.tiers, cfg.device
    size = fixed_device_bytes(cfg)
    f = w.sample_fraction
    fmt = format_bytes
    if size is None:
        ssd = t.ssd_bytes or DEFAULT_SSD_BYTES
        src = "config" if t.ssd_bytes else "default"
        out = dataclasses.replace(cfg, tiers=dataclasses.replace(t, ssd_bytes=ssd))
        return out, TierSizing(ssd, t.dram_bytes, f, None, src,
                               f"SSD tier {fmt(ssd, False)} ({'configured' if t.ssd_bytes else 'the default'})")
    a = cfg.replay.align_bytes
    if d.capacity_bytes and d.capacity_bytes > size:
        raise KvwearError(f"--capacity {d.capacity_bytes} bytes is larger than {d.target or d.kind}'s "
                          f"{size} bytes; give --capacity {size} or less")
    usable = (d.capacity_bytes or size) // a * a
    room, why = _room(cfg)
    fits = int(usable / room)                           # the scaled tier the device holds
    dev = d.target or d.kind
    if not t.ssd_bytes:
        ssd = int(fits / f)
        note = (f"SSD tier {fmt(ssd, False)}: {dev}'s usable {fmt(usable, False)} ÷ {room:.4g} "
                f"(headroom: {why})" + (f" ÷ sample fraction {f:g}" if f < 1 else ""))
        out = dataclasses.replace(cfg, tiers=dataclasses.replace(t, ssd_bytes=ssd),
                                  device=dataclasses.replace(d, capacity_bytes=usable))
        return out, TierSizing(ssd, t.dram_bytes, f, usable, "device", note)
    need = int(t.ssd_bytes * f * room)
    if need <= usable:
        return cfg, TierSizing(t.ssd_bytes, t.dram_bytes, f, usable, "config",
                               f"SSD tier {fmt(t.ssd_bytes, False)} (configured) on {dev}'s {fmt(usable, False)}")
    if not d.fit:
        raise KvwearError(
            f"--ssd {fmt(t.ssd_bytes, False)} does not fit {dev}: its plan needs {need:,} bytes "
            f"(tier × sample fraction {f:g} × {room:.4g}: {why}), the device has "
            f"{usable:,}; give --ssd {int(fits / f) // 10**6}MB or less, leave --ssd out (the tier becomes "
            "the device's capacity), or pass --fit-device to scale the workload to the device")
    scale = fits / (t.ssd_bytes * f)
    f2 = f * scale
    note = (f"--fit-device: the workload is scaled to {dev}'s usable {fmt(usable, False)}: sample fraction "
            f"{f2:.4g} (sessions sampled), DRAM {fmt(t.dram_bytes, False)} and SSD {fmt(t.ssd_bytes, False)} "
            f"tiers scaled by it to {fmt(int(t.dram_bytes * f2), False)} and {fmt(int(t.ssd_bytes * f2), False)}")
    out = dataclasses.replace(cfg, workload=dataclasses.replace(w, sample_fraction=f2),
                              device=dataclasses.replace(d, capacity_bytes=usable))
    return out, TierSizing(t.ssd_bytes, t.dram_bytes, f2, usable, "fit", note)


def device_spec(cfg: RunConfig, capacity: int | None) -> DeviceSpec:
    """The backend's spec: the configured options plus the confirmations given as flags (capacity
    None: the device's own size, for the hooks asked before the run has sized it)."""
    confirm = {k: v for k, v in (("confirm_serial", cfg.device.confirm_serial),
                                 ("confirm_overwrite", cfg.device.confirm_overwrite)) if v}
    return DeviceSpec(kind=cfg.device.kind, target=cfg.device.target, capacity_bytes=capacity,
                      options={**_placement_device_options(cfg), **dict(cfg.device.options), **confirm})


def placement_config(cfg: RunConfig) -> PlacementConfig:
    return PlacementConfig(cfg.replay.placement, cfg.replay.placement_handles,  # type: ignore[arg-type]
                           cfg.replay.placement_kind_min_separation)


def _placement_device_options(cfg: RunConfig) -> dict[str, Any]:
    """A backend with a handle-count option (the embedded FTL's `ruh`) gets as many handles as the
    placement uses (unless the options name it); the others size their handles from the plan
    (qemu/femu) or cannot carry them (fio 3.33's iolog has none)."""
    n = placement_config(cfg).handles
    opt = device_backend(cfg).capabilities.handle_count_option
    return {opt: n} if opt and n > 1 else {}


def wear_readers(cfg: RunConfig) -> list[str]:
    """Wear readers to snapshot around a replay: the configured ones, else the backend's defaults
    (a block device: psutil's disk counters plus the NVMe logs when it is an NVMe namespace)."""
    if cfg.capture.wear_readers:
        return list(cfg.capture.wear_readers)
    return list(device_backend(cfg).default_wear_readers(device_spec(cfg, None)))


def device_ftl_config(cfg: RunConfig, capacity: int) -> FtlConfig | None:
    """The FTL geometry of the device when kvwear knows it (`Backend.ftl_config`: `sim`, and `femu`
    from its -device parameters); None for files, block devices and stock QEMU."""
    return device_backend(cfg).ftl_config(device_spec(cfg, capacity))
