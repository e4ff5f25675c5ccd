"""Run configuration: a frozen, typed record read from TOML and overridden by CLI flags.

One `RunConfig` describes a whole `kvwear run`: the workload, the model, the tier capacities,
the policies, how the SSD traffic becomes block I/O, the device, the capture, the estimator's
ratings. `to_toml` writes the resolved config back, so a run directory's `config.toml` reruns
the same run. This module parses and validates; it must not run anything.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from kvwear.errors import InputError
from kvwear.harness.plan.placement import MAX_HANDLES, PLACEMENTS
from kvwear.policies.config import SimConfig
from kvwear.values import BadValue, bounds, read_value

CONFIG_VERSION = 1
# the planner's words (kvwear.harness.plan.planner: LAYOUTS, TimeMode, LOG_FULL_MODES), repeated
# here because importing the planner compiles its kernels; tests/harness/test_config_rundir.py
# holds them equal
LAYOUTS = ("extent", "log", "slab", "fs")
TIME_MODES = ("afap", "original", "compressed")
LOG_FULL_MODES = ("relocate", "evict", "error")


@dataclass(frozen=True)
class WorkloadConfig:
    """Either a trace file (`trace`) or a synthetic generator (`generator` + `params`)."""

    trace: str = ""
    format: str = ""                      # "" = auto-detect
    generator: str = "multi-round"        # used when trace is empty
    params: Mapping[str, Any] = field(default_factory=dict)
    block_tokens: int = 16                # simulator chunk size S
    sample_fraction: float = 1.0          # sample sessions; tier and device capacities scale too
    seed: int = 1


DEFAULT_SSD_BYTES = 256 * 10**9


@dataclass(frozen=True)
class TierConfig:
    hbm_bytes: int = 0
    dram_bytes: int = 32 * 10**9
    # 0: the device's usable capacity when the device's size is fixed (a block device, an existing
    # file or image, femu's devsz_mb), else DEFAULT_SSD_BYTES (kvwear.harness.pipeline.sizing.size_tiers)
    ssd_bytes: int = 0


_SIM_DEFAULTS: dict[str, float] = {f.name: f.default for f in fields(SimConfig)
                                   if isinstance(f.default, int | float)}


@dataclass(frozen=True)
class SimulatorConfig:
    """The simulator's speeds and prices (kvwear.policies.config.SimConfig, whose defaults these are): what
    a load costs in time and what a miss and a written byte cost in dollars. `kvwear simulate`
    takes the same settings as flags."""

    ssd_read_bytes_per_s: float = _SIM_DEFAULTS["ssd_read_bytes_per_s"]         # SSD → DRAM
    dram_to_hbm_bytes_per_s: float = _SIM_DEFAULTS["dram_to_hbm_bytes_per_s"]
    recompute_tokens_per_s: float = _SIM_DEFAULTS["recompute_tokens_per_s"]     # prefill speed
    gpu_usd_per_hour: float = _SIM_DEFAULTS["gpu_usd_per_hour"]                 # the recomputing GPUs
    ssd_usd_per_tb_written: float = _SIM_DEFAULTS["ssd_usd_per_tb_written"]     # drive price / TBW
    interval_s: float = _SIM_DEFAULTS["interval_s"]                             # timeline interval


@dataclass(frozen=True)
class ReplaySettings:
    """How SSD operations become block I/O (see kvwear.harness.plan.planner.ReplayConfig for each field)."""

    # extent (first fit) keeps every object where the policy put it until the policy evicts it, so
    # the plan writes exactly the simulation's bytes; log and slab add the relocation writes of
    # their cleaning (counted apart in plan.json)
    layout: str = field(default="extent", metadata=bounds(choices=LAYOUTS))  # extent | log | slab | fs (files)
    trim_on_evict: bool = True
    align_bytes: int = 4096
    max_io_bytes: int = 1 << 20
    # afap (as fast as possible) | original | compressed
    time_mode: str = field(default="afap", metadata=bounds(choices=TIME_MODES))
    time_compression: float = 1.0
    # log layout, head reaches a live object: relocate | evict | error
    log_full: str = field(default="relocate", metadata=bounds(choices=LOG_FULL_MODES))
    # FDP placement handles: none | kind | lifetime (harness.plan.placement)
    placement: str = field(default="none", metadata=bounds(choices=PLACEMENTS))
    placement_handles: int = 4            # lifetime: residency buckets, one handle each
    placement_kind_min_separation: float = 0.0  # kind: one handle below this TVD of the kinds' lifetimes (0: never)


@dataclass(frozen=True)
class DeviceConfig:
    """`kind`: sim | file | block | qemu | femu. `capacity_bytes` 0 = the SSD tier × sample fraction
    + 5% (femu: devsz_mb), rounded up to the alignment (kvwear.harness.pipeline.sizing.device_capacity). `fit`: scale
    the workload to the device (sample sessions, both tiers by the same factor) instead of
    refusing an SSD tier larger than it (kvwear.harness.pipeline.sizing.size_tiers)."""

    kind: str = "sim"
    target: str = ""
    capacity_bytes: int = 0
    fit: bool = False
    confirm_serial: str = ""
    confirm_overwrite: str = ""           # file: a file kvwear did not create, to write to anyway
    options: Mapping[str, Any] = field(default_factory=dict)   # backend-specific (FTL geometry…)


@dataclass(frozen=True)
class CaptureConfig:
    tracer: str = "none"                  # none | auto | bcc | bpftrace
    wear_readers: tuple[str, ...] = ()    # extra wear readers for real devices
    # the tracer's per-CPU perf buffers: sized for `expected_iops` requests/s (0: the tracer's
    # default, 250,000), or `per_cpu_buffer_bytes` when given (0: from the rate)
    expected_iops: int = 0
    per_cpu_buffer_bytes: int = 0


@dataclass(frozen=True)
class EstimateConfig:
    """The drive's ratings for the lifetime: 0 takes the device's own rating (a sim drive preset's:
    kvwear.harness.pipeline.run.drive_rating), else 1 DWPD over 5 years and TLC's 3,000 P/E cycles."""

    dwpd: float = 0.0
    warranty_years: float = 0.0
    rated_pe_cycles: int = 0              # >0: TBW from P/E cycles instead of DWPD
    trace_day_fraction: float = 0.0       # 0: derive from the trace's duration


@dataclass(frozen=True)
class RunConfig:
    name: str = "run"
    model: str = "kimi-k3"
    policies: tuple[str, ...] = ("lru", "lru-k", "type-aware", "gandalf:budget=fixed,gamma=4", "belady")
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    tiers: TierConfig = field(default_factory=TierConfig)
    simulator: SimulatorConfig = field(default_factory=SimulatorConfig)
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    estimate: EstimateConfig = field(default_factory=EstimateConfig)
    version: int = CONFIG_VERSION

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))

    def to_toml(self) -> str:
        return dump_toml(self.to_dict())


_SIZE_FIELDS = {"hbm_bytes", "dram_bytes", "ssd_bytes", "capacity_bytes", "align_bytes", "max_io_bytes",
                "per_cpu_buffer_bytes"}
_SECTIONS: dict[str, type] = {
    "workload": WorkloadConfig,
    "tiers": TierConfig,
    "simulator": SimulatorConfig,
    "replay": ReplaySettings,
    "device": DeviceConfig,
    "capture": CaptureConfig,
    "estimate": EstimateConfig,
}
# Short aliases accepted in TOML and on the CLI (units allowed): dram = "100GB".
_ALIASES = {"hbm": "hbm_bytes", "dram": "dram_bytes", "ssd": "ssd_bytes", "capacity": "capacity_bytes"}


def _plain(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x


def _coerce(path: str, section: str, name: str, typ: Any, value: Any,
            meta: Mapping[str, Any] | None = None) -> Any:
    """One setting read by kvwear.values' rules (sizes for `*_bytes`, durations for `*_s`; the
    field's metadata: its choices)."""
    try:
        return read_value(value, typ, name=name, meta=meta)
    except BadValue as exc:
        raise InputError(path, None, f"{section}.{name}" if section else name, exc.reason) from None


def _build(cls: type, data: Mapping[str, Any], path: str, section: str) -> Any:
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    metas = {f.name: f.metadata for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = _ALIASES.get(key, key)
        if name not in known:
            valid = ", ".join(sorted(known - {"version"}))
            raise InputError(path, None, f"{section}.{key}" if section else key,
                             f"unknown setting; valid: {valid}")
        if name in _SECTIONS and not section:
            if not isinstance(value, Mapping):
                raise InputError(path, None, name, "expected a table")
            kwargs[name] = _build(_SECTIONS[name], value, path, name)
        else:
            kwargs[name] = _coerce(path, section, name, hints[name], value, metas[name])
    return cls(**kwargs)


# Ranges of the numeric settings: (section, field) → (holds, what a valid value is).
_RANGES: dict[tuple[str, str], tuple[Callable[[Any], bool], str]] = {
    ("workload", "sample_fraction"): (lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
    ("workload", "block_tokens"): (lambda v: 1 <= v <= 1 << 20, "1 … 1048576 tokens"),
    ("workload", "seed"): (lambda v: 0 <= v < 2**63, "0 … 2^63 − 1"),
    ("replay", "align_bytes"): (lambda v: v >= 512 and v & (v - 1) == 0, "a power of two ≥ 512"),
    ("replay", "max_io_bytes"): (lambda v: v >= 512, "≥ 512"),
    ("replay", "time_compression"): (lambda v: 0 < v <= 1e9, "in (0, 1e9]"),
    ("replay", "placement_handles"): (lambda v: 2 <= v <= MAX_HANDLES, f"2 … {MAX_HANDLES} (the FTL's handles)"),
    ("replay", "placement_kind_min_separation"): (lambda v: 0 <= v <= 1, "in [0, 1] (a total variation distance)"),
    # a tracer's buffers: 0 takes its default; beyond these a buffer would not fit in memory
    ("capture", "expected_iops"): (lambda v: 0 <= v <= 10**9, "0 … 1,000,000,000 requests/s (0: the tracer's default)"),
    ("capture", "per_cpu_buffer_bytes"): (lambda v: 0 <= v <= 1 << 32, "0 … 4 GiB (0: from expected_iops)"),
    ("simulator", "ssd_read_bytes_per_s"): (lambda v: v > 0, "> 0"),
    ("simulator", "dram_to_hbm_bytes_per_s"): (lambda v: v > 0, "> 0"),
    ("simulator", "recompute_tokens_per_s"): (lambda v: v > 0, "> 0"),
    ("simulator", "gpu_usd_per_hour"): (lambda v: v > 0, "> 0"),
    ("simulator", "ssd_usd_per_tb_written"): (lambda v: v >= 0, "≥ 0"),
    ("simulator", "interval_s"): (lambda v: v > 0, "> 0"),
    # a drive's rating: datasheets give 0.1 to 100 DWPD, up to 10 years and ≤ 10^5 P/E cycles (SLC);
    # the bounds are a decade wider each way, so only an absurd value (1e308 → TBW inf) is refused;
    # 0 takes the drive's own rating (a sim preset's), else the defaults
    ("estimate", "dwpd"): (lambda v: 0 <= v <= 1000,
                           "in [0, 1000] drive writes per day (0: the drive's rating, else 1)"),
    ("estimate", "warranty_years"): (lambda v: 0 <= v <= 100, "in [0, 100] years (0: the drive's rating, else 5)"),
    ("estimate", "rated_pe_cycles"): (lambda v: 0 <= v <= 10**6, "0 … 1,000,000 (0: use dwpd)"),
    ("estimate", "trace_day_fraction"): (lambda v: 0 <= v <= 1000, "0 … 1000 (0: the trace's own span)"),
}


def _check_ranges(cfg: RunConfig, source: str) -> None:
    for (section, name), (ok, valid) in _RANGES.items():
        v = getattr(getattr(cfg, section), name)
        if not ok(v):
            raise InputError(source, None, f"{section}.{name}", f"must be {valid}, got {v!r}")
    if not cfg.policies:
        raise InputError(source, None, "policies", "the list is empty: name at least one policy (e.g. \"lru\")")
    if cfg.replay.max_io_bytes % cfg.replay.align_bytes:
        raise InputError(source, None, "replay.max_io_bytes",
                         f"{cfg.replay.max_io_bytes} is not a multiple of align_bytes {cfg.replay.align_bytes}")


def config_from_mapping(data: Mapping[str, Any], source: str = "<config>") -> RunConfig:
    """Validate a nested mapping (as read from TOML) into a RunConfig: types, then ranges."""
    version = data.get("version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        raise InputError(source, None, "version", f"config version {version} is not {CONFIG_VERSION}")
    cfg: RunConfig = _build(RunConfig, data, source, "")
    _check_ranges(cfg, source)
    return cfg


def read_toml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """A TOML file as a mapping; every way it can be unreadable is an InputError naming it."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise InputError(str(p), None, None, f"{what} not found") from None
    except IsADirectoryError:
        raise InputError(str(p), None, None, f"is a directory, not a {what}") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(p), None, None, f"not a text (UTF-8) file: byte {exc.start} is not UTF-8") from None
    except OSError as exc:
        raise InputError(str(p), None, None, f"cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line N, column M)"; no attribute carries it in 3.11.
        m = re.search(r"at line (\d+)", str(exc))
        line = int(m.group(1)) if m else None
        raise InputError(str(p), line, None, f"invalid TOML: {exc}") from None


def load_config(path: str | Path) -> RunConfig:
    """Read a run config TOML; errors name the file and the setting."""
    return config_from_mapping(read_toml(path), str(path))


def with_overrides(cfg: RunConfig, overrides: Mapping[str, Any]) -> RunConfig:
    """Apply dotted overrides ("tiers.dram" → "100GB", "policies" → [...]) from CLI flags."""
    data = cfg.to_dict()
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return config_from_mapping(data, "<command line>")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dump_toml(data: Mapping[str, Any]) -> str:
    """A small TOML writer for nested tables of scalars, lists and inline tables."""
    top = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, Mapping)]
    out = ["\n".join(top)]
    for k, v in data.items():
        if isinstance(v, Mapping):
            body = [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
            out.append(f"[{k}]\n" + "\n".join(body))
    return "\n\n".join(out) + "\n"
