"""Static checks of a run, before its first stage: everything that can be known to fail without
doing the work is refused here, in seconds, instead of after the simulation.

Checked: every policy spec resolves (and their labels differ), the model profile resolves, the
trace exists in a known format or the generator and its options are valid, the SSD tier (scaled
by the sample fraction) holds at least one object, the tracer is a known one, and, when the run
replays, the device: the backend is known, its options parse, and its own static checks pass
(`Backend.preflight`: a `sim` device's options build an FTL, a `file:` target passes
`check_file_target` and its folder is writable, a `block:` device passes the safety guard and is
writable, and no other kvwear holds the device, kvwear.exclusive), and the fs layout goes with a
device that makes a file system (option `filesystem`: block on the host, qemu and femu in their
guest) and only with it, and without placement
handles (the file system places the data). The backends check again when
they open the device (the state can change while a run simulates).
This module only inspects; it must not write anything.
"""

from __future__ import annotations

from kvwear.errors import KvwearError
from kvwear.harness.pipeline.config import RunConfig


def preflight(cfg: RunConfig, *, replay: bool) -> None:
    """Raise a KvwearError naming the setting for the first check `cfg` fails."""
    from kvwear.policies.base import resolve_spec
    from kvwear.workloads.models import resolve_profile

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
        from kvwear.harness.capture import TRACERS

        TRACERS.get(cfg.capture.tracer)
    if replay:
        _check_device(cfg)


def _check_workload(cfg: RunConfig) -> None:
    w = cfg.workload
    if w.trace:
        from kvwear.workloads.loaders.pipeline import resolve_format

        resolve_format(w.trace, w.format or None)
        return
    if w.format:
        # a format with no trace to read would be ignored silently: a typo, or a trace forgotten
        raise KvwearError(f"workload.format {w.format!r}: a trace format, but workload.trace is empty (the "
                          f"generator {w.generator!r} makes the requests); give the trace, or remove format")
    from kvwear.workloads.synthetic import GENERATORS

    GENERATORS.get(w.generator).configure({"seed": w.seed, **dict(w.params)}, "workload.params")


def _check_device(cfg: RunConfig) -> None:
    from kvwear.harness.pipeline.sizing import device_backend, device_capacity, device_spec

    # the fs layout's plan is files: only a device that makes a file system plays it, and such a
    # device plays nothing else (asked of its options, not its name; before the device is looked at)
    spec = device_spec(cfg, None)
    filesystem = getattr(device_backend(cfg).params(spec), "filesystem", None)
    if cfg.replay.layout == "fs" and filesystem is None:
        raise KvwearError("replay.layout fs: the device must make a file system to play files on: "
                          "--device block:/dev/X (or qemu, femu: in the guest) --device-option filesystem=ext4 "
                          "(ext4 | xfs | f2fs)")
    if filesystem is not None and cfg.replay.layout != "fs":
        raise KvwearError(f"device option filesystem={filesystem} plays file plans: add --layout fs "
                          f"(replay.layout is {cfg.replay.layout})")
    if cfg.replay.layout == "fs" and cfg.replay.placement != "none":
        raise KvwearError(f"replay.placement {cfg.replay.placement}: the fs layout leaves placement to the "
                          "file system; use placement = none")
    device_backend(cfg).preflight(device_spec(cfg, device_capacity(cfg)))
