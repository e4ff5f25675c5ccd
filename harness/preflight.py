"""Static checks of a run, before its first stage: everything that can be known to fail without
doing the work is refused here, in seconds, instead of after the simulation.

Checked: every policy spec resolves (and their labels differ), the model profile resolves, the
trace exists in a known format or the generator and its options are valid, the SSD tier (scaled
by the sample fraction) holds at least one object, the tracer is a known one, and, when the run
replays, the device: the backend is known, a `sim` device's options build an FTL, a `file:`
target passes `check_file_target` and its folder is writable, a `block:` device passes the
safety guard and is writable, and no other kvwear holds the device (harness.exclusive). The
backends check again when they open the device (the state can change while a run simulates).
This module only inspects; it must not write anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.config import RunConfig
from kvwear.errors import KvwearError


def preflight(cfg: RunConfig, *, replay: bool) -> None:
    """Raise a KvwearError naming the setting for the first check `cfg` fails."""
    from policies.base import resolve_spec
    from workloads.models import resolve_profile

    labels = [resolve_spec(s).label for s in cfg.policies]
    if len(set(labels)) != len(labels):
        raise KvwearError(f"policies: two resolve to the same label: {labels}")
    profile = resolve_profile(cfg.model)
    _check_workload(cfg)
    chunk = profile.kv_bytes_per_token * cfg.workload.block_tokens
    smallest = min(chunk, profile.state_bytes) if profile.state_bytes else chunk
    ssd = int(cfg.tiers.ssd_bytes * cfg.workload.sample_fraction)
    if ssd < smallest:
        raise KvwearError(
            f"tiers.ssd: {ssd:,} bytes (the tier × sample_fraction {cfg.workload.sample_fraction:g}) is smaller "
            f"than one object of {profile.name} ({smallest:,} bytes): nothing could be written to the SSD")
    if cfg.capture.tracer != "none":
        from harness.capture import TRACERS

        TRACERS.get(cfg.capture.tracer)
    if replay:
        _check_device(cfg)


def _check_workload(cfg: RunConfig) -> None:
    w = cfg.workload
    if w.trace:
        from workloads.loaders.pipeline import resolve_format

        resolve_format(w.trace, w.format or None)
        return
    from workloads.synthetic import GENERATORS

    GENERATORS.get(w.generator).configure({"seed": w.seed, **dict(w.params)}, "workload.params")


def _check_device(cfg: RunConfig) -> None:
    from harness.devices.base import DEVICES
    from harness.devices.safety import check_block_device, check_file_target
    from harness.exclusive import block_identity, check_free, device_lock_path, file_identity
    from harness.run import device_capacity, device_spec

    kind, target = cfg.device.kind, cfg.device.target
    DEVICES.get(kind)
    spec = device_spec(cfg, device_capacity(cfg))
    if kind == "sim":
        from harness.devices.sim import ftl_config_from_spec

        ftl_config_from_spec(spec)
        return
    if kind not in ("file", "block"):
        return                      # qemu/femu: their backends check their own settings
    if not target:
        raise KvwearError(f"--device {kind} needs a path: {kind}:/path")
    from harness.devices.fio import check_options

    check_options(spec)
    if kind == "file":
        check_file_target(target, cfg.device.confirm_overwrite or None)
        folder = Path(target).resolve().parent
        if not Path(target).exists() and not os.access(folder, os.W_OK | os.X_OK):
            raise KvwearError(f"device.target {target}: cannot create a file in {folder}")
        if Path(target).exists():
            if not os.access(target, os.W_OK):
                raise KvwearError(f"device.target {target}: not writable")
            check_free(device_lock_path("file", file_identity(target)), target)
    elif kind == "block":
        facts = check_block_device(target, cfg.device.confirm_serial or None)
        ro = Path(f"/sys/class/block/{facts.name}/ro")
        if not os.access(target, os.W_OK) or (ro.exists() and ro.read_text().strip() == "1"):
            raise KvwearError(f"device.target {target}: not writable (read-only, or not root)")
        ident = block_identity(facts.serial, facts.dev)
        check_free(device_lock_path("block", ident), f"{target} ({ident})")
