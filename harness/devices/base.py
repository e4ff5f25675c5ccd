"""The device-backend plugin family: one interface, typed options, capabilities, a registry by name.

A backend plays a `block_ops` plan (kvwear.harness.plan.schema.BLOCK_OPS) on one device and reports what it
issued; it can snapshot the device's wear counters. Backends: `sim` (the embedded FTL emulator),
`file:PATH`, `block:/dev/X`, `qemu`, `femu`. A backend must never issue I/O outside
[0, capacity_bytes) and must run its safety checks in `open`.

Each backend is a `Backend` subclass in its own module, registered in DEVICES by name (adding a
backend = its module + one line in DEVICES' module list), in the spirit of fio's `ioengine_ops`:
- `Params`: a frozen dataclass of its options, parsed from `DeviceSpec.options` (the
  `--device-option k=v` / `[device] options` mapping) by the one parser here, `DeviceParams.parse`:
  the field's type says how a value is read (text from the command line is accepted), its metadata
  the range; an unknown name is refused with the valid ones. Every backend that preconditions uses
  the one vocabulary `Precondition` (none | fill | steady), each accepting the ones it can do.
- `capabilities`: a frozen `Capabilities` record of what the orchestrator may ask of it without
  opening it (can eBPF trace it, does it hold a drive, is its size its own, …);
- hook class methods for what depends on the spec (its size before opening, its FTL geometry, an
  FTL twin's WAF, its default wear readers, its static checks).
The run, its sweeps and its static checks (kvwear.harness.pipeline) ask these instead of testing
backend names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar, get_origin, get_type_hints

import pyarrow as pa

from kvwear.errors import KvwearError
from kvwear.harness.devices.measurement import ReplayResult
from kvwear.harness.devices.safety import FILE_MARKER_XATTR
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.registry import Registry
from kvwear.values import BadValue, bounds, read_value

if TYPE_CHECKING:
    from kvwear.emulator.ftl import FtlConfig
    from kvwear.emulator.precondition import PreconditionSpec
    from kvwear.emulator.presets import DriveRatings


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


ReplayProgress = Callable[[int, int], None]


def mark_created(path: str | Path) -> None:
    """Mark a file target or drive image as kvwear's (created by it, or confirmed to overwrite), so
    later runs write to it without a confirmation (kvwear.harness.devices.safety.check_file_target). A filesystem
    without user extended attributes leaves it unmarked."""
    with contextlib.suppress(OSError):
        os.setxattr(path, FILE_MARKER_XATTR, b"1")


#: Set on an image a backend created and will delete when the device closes (not kept): a run
#: killed before it closed leaves the image with this mark, and the resumed run adopts it.
TRANSIENT_XATTR = "user.kvwear.transient"


def transient_image(path: str | Path, created: bool, keep: bool) -> bool:
    """Whether the device deletes image `path` when it closes: it created it now, or a killed run
    did (the TRANSIENT_XATTR mark: a resumed run removes what its killed predecessor left), and it
    is not to be kept (`keep`: the mark is cleared, the image stays). A filesystem without user
    extended attributes marks nothing: only an image created now is deleted."""
    try:
        marked = os.getxattr(path, TRANSIENT_XATTR) == b"1"
    except OSError:
        marked = False
    owned = created or marked
    with contextlib.suppress(OSError):
        if owned and not keep:
            os.setxattr(path, TRANSIENT_XATTR, b"1")
        elif marked:
            os.removexattr(path, TRANSIENT_XATTR)
    return owned and not keep


class DeviceBackend(Protocol):
    """A device that plays block plans. Construct with `open_device(spec, workdir)`."""

    spec: DeviceSpec

    def identity(self) -> DeviceIdentity: ...

    def capacity_bytes(self) -> int: ...

    def replay(self, plan: pa.Table | Path, workdir: Path, *, timed: bool = False,
               progress: ReplayProgress | None = None) -> ReplayResult:
        """Play `plan` (BLOCK_OPS rows, in order: a table, or the block_ops Parquet's path for a
        backend whose `Capabilities.streams_plan`). `timed` honours t_s; else as fast as possible.
        `progress(done, total)` is called as the replay advances, in the backend's own steps."""
        ...

    def close(self) -> None: ...


class DeviceFactory(Protocol):
    def __call__(self, spec: DeviceSpec, workdir: Path) -> DeviceBackend: ...


# -- typed options ---------------------------------------------------------------------------

# What preconditioning writes before the first wear snapshot, one vocabulary for every backend:
# none; fill = sequential passes over the drive; steady = the fill, then random 4 KiB writes until
# fio's steady-state detector is satisfied (SNIA-style). A backend's Params narrows it to the ones
# it can do.
Precondition = Literal["none", "fill", "steady"]


def option(default: Any = dataclasses.MISSING, *, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None, choices: tuple[str, ...] = (),
           default_factory: Any = dataclasses.MISSING) -> Any:
    """A Params field with bounds (`ge`/`gt`/`le`/`lt`) or a set of `choices` that `DeviceParams.parse`
    checks (kvwear.values.bounds: a bad value is refused naming the allowed range)."""
    meta = bounds(ge=ge, gt=gt, le=le, lt=lt, choices=choices)
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


P = TypeVar("P", bound="DeviceParams")


@dataclass(frozen=True)
class DeviceParams:
    """Base of each backend's frozen options record (fields with defaults; see `parse`)."""

    @classmethod
    def of(cls: type[P], spec: DeviceSpec) -> P:
        """`spec.options` parsed as this record, errors prefixed `device KIND`."""
        return cls.parse(spec.options, f"device {spec.kind}")

    @classmethod
    def parse(cls: type[P], options: Mapping[str, Any], where: str) -> P:
        """The options as this record: each value read by its field's type and range by
        kvwear.values' rules (the config file's and every other setting's; a mapping field also
        from flat `name.key` entries). An unknown name
        is refused with the valid ones; a bad value names the option and what it expects."""
        hints = get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        opts = dict(options)
        for k in [k for k in opts if "." in k]:        # --device-option femu.nchs=4 → femu = {nchs = 4}
            head, _, sub = k.partition(".")
            if head in fields and _is_mapping(hints[head]):
                table = opts.get(head, {})
                if not isinstance(table, Mapping):
                    raise KvwearError(f"{where}: option {head} must be a table, got {table!r}")
                opts[head] = {**table, sub: opts.pop(k)}
        bad = sorted(set(opts) - set(fields))
        if bad:
            raise KvwearError(f"{where}: unknown option {', '.join(bad)} (valid: {', '.join(fields)})")
        values = {k: _read_option(where, k, v, hints[k], fields[k].metadata) for k, v in opts.items()}
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:        # a Params __post_init__ refusing a combination
            raise KvwearError(f"{where}: {exc}") from None


def _is_mapping(tp: Any) -> bool:
    return get_origin(tp) in (Mapping, dict, typing.Mapping) or tp in (Mapping, dict)


def _read_option(where: str, name: str, v: Any, tp: Any, meta: Mapping[str, Any]) -> Any:
    """One option value as type `tp`, by kvwear.values' rules (see DeviceParams.parse)."""
    try:
        return read_value(v, tp, name=name, meta=meta)
    except BadValue as exc:
        raise KvwearError(f"{where}: option {name}: {exc.reason}") from None


@dataclass(frozen=True)
class NoParams(DeviceParams):
    """A backend without options."""


# -- capabilities --------------------------------------------------------------------------

@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, asked by the orchestrator instead of its name (as fio asks an
    ioengine's flags). Defaults: an FTL-less device in a file the run sizes, nothing to trace."""

    # Its I/O reaches a block device of its own: eBPF's block tracepoints, filtered on that dev_t,
    # see exactly the replay (a file's dev_t is its whole filesystem; a guest's NVMe is invisible).
    block_tracer: bool = False
    # It writes a drive (a device, a file, an image) that sweep points must take turns on
    # (`[sweep] drive_resource`); the embedded FTL is private to each point.
    drive_resource: bool = False
    # Its size is its own, so a sweep without an SSD axis lets each point's run size the tier from
    # it (kvwear.harness.pipeline.sizing.size_tiers) rather than use the default tier.
    fixed_size: bool = False
    # The option through which the run gives it as many placement handles as `[replay] placement`
    # uses (sim: ruh); "" when it sizes them from the plan (qemu/femu: fdp_nruh) or carries none.
    handle_count_option: str = ""
    # kvwear knows its FTL (`ftl_config`) but does not run it: the embedded FTL plays the same plan
    # as a twin (`twin_waf`) to predict the measured WAF (femu). The sim device *is* the FTL.
    ftl_twin: bool = False
    # How the model-WAF source names its geometry ("FEMU geometry"); "" to say nothing.
    geometry_note: str = ""
    # Its replay takes the block_ops Parquet's path and reads it in batches (sim: memory is the
    # drive's state, not the plan's); the others get the plan as one table.
    streams_plan: bool = False


@dataclass(frozen=True)
class FixedCapacity:
    """A device size the run cannot choose: `exposed_bytes`, and whether a plan must span all of
    it (`whole`: the FTL geometry fixes the exposed size, FEMU's devsz_mb) or may use less."""

    exposed_bytes: int
    whole: bool


class Backend:
    """One backend of the family: its options record, its capabilities, its hooks. Never
    instantiated: `open` builds the DeviceBackend that plays plans."""

    Params: ClassVar[type[DeviceParams]] = NoParams
    capabilities: ClassVar[Capabilities] = Capabilities()
    # Its DeviceBackend class (or factory): `open` calls it, which runs the safety checks and
    # takes the device.
    device: ClassVar[DeviceFactory]

    @classmethod
    def params(cls, spec: DeviceSpec) -> DeviceParams:
        """`spec.options` parsed and checked (refused naming the option)."""
        return cls.Params.of(spec)

    @classmethod
    def open(cls, spec: DeviceSpec, workdir: Path) -> DeviceBackend:
        """The device, checked, taken and ready to replay."""
        return cls.device(spec, workdir)

    @classmethod
    def fixed_capacity(cls, spec: DeviceSpec) -> FixedCapacity | None:
        """Its size before opening when the run cannot size it (spec.capacity_bytes ignored), else None."""
        return None

    @classmethod
    def ftl_config(cls, spec: DeviceSpec) -> FtlConfig | None:
        """The FTL geometry kvwear knows for it (for the model WAF), or None."""
        return None

    @classmethod
    def twin_waf(cls, spec: DeviceSpec, plan: pa.Table) -> float | None:
        """With `capabilities.ftl_twin`: the WAF the embedded FTL predicts for `plan` on this device."""
        return None

    @classmethod
    def run_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options the main job (`kvwear run` and its sweep points) plays the device with, given
        the ones its config names: the config's, plus the backend's defaults for a run (the drive a
        run measures by default) where the config names none (kvwear.harness.pipeline.sizing.with_run_options)."""
        return dict(options)

    @classmethod
    def ratings(cls, spec: DeviceSpec) -> DriveRatings | None:
        """The drive's rated endurance where kvwear knows it (a sim preset's), for the lifetime
        estimate; None: the run's configured ratings (or their defaults) apply."""
        return None

    @classmethod
    def precondition_plan(cls, spec: DeviceSpec) -> tuple[PreconditionSpec | None, bool]:
        """How kvwear preconditions the drive, where it does so itself (None: it does not), and
        whether the plan then plays in passes until the workload's steady state: the workload WAF
        model takes both."""
        return None, False

    @classmethod
    def preconditioned(cls, spec: DeviceSpec) -> bool:
        """Whether the drive is written (filled, or driven to steady state) before the plan plays,
        so it does not start empty (the workload WAF model takes the drive as empty unless
        `precondition_plan` says how it was preconditioned)."""
        return str(getattr(cls.params(spec), "precondition", "none")) != "none"

    @classmethod
    def default_wear_readers(cls, spec: DeviceSpec) -> tuple[str, ...]:
        """Wear readers to snapshot around a replay when the config names none."""
        return ()

    @classmethod
    def preflight(cls, spec: DeviceSpec) -> None:
        """The static checks before the first stage (kvwear.harness.pipeline.preflight): may read, never write."""
        cls.params(spec)


# Modules that register backends. Adding a backend = its module + one line here.
DEVICES: Registry[type[Backend]] = Registry("device", modules=[
    "kvwear.harness.devices.sim", "kvwear.harness.devices.fio", "kvwear.harness.devices.qemu"])


def backend(kind: str) -> type[Backend]:
    """The backend registered as `kind` (unknown kinds list the valid ones)."""
    return DEVICES.get(kind)


def open_device(spec: DeviceSpec, workdir: Path) -> DeviceBackend:
    """Open the backend named by `spec.kind`."""
    return backend(spec.kind).open(spec, workdir)
