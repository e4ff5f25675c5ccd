"""The NVMe SMART / Health Information log page (Log Identifier 02h): decoders for its 512-byte
binary form (`nvme smart-log -o binary`) and for nvme-cli 2.x's JSON, plus the two readers
`nvme-smart-binary` and `nvme-smart-json`.

Offsets are those of the NVMe base specification (Figure "SMART / Health Information Log Page"):
128-bit counters are 16-byte little-endian. Data Units Read/Written count thousands of 512-byte
units, rounded up (`NVME_DATA_UNIT_BYTES`): a `WearSample` reports `data_units × 512,000` as its
host bytes, an upper bound within one unit of the truth (see `kvwear.harness.wear.snapshot`).

This module does not interpret the vendor-use bytes 192-215 (FEMU puts its FTL counters there:
`kvwear.harness.wear.femu`) and never issues a command itself: readers call the injected runner.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvwear.harness.wear._decode import hexdump, json_uint, le_uint, load_json, need_length, need_object, to_uint
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES, READERS, CommandRunner, WearSample

SMART_LOG_BYTES = 512


@dataclass(frozen=True)
class SmartLog:
    """The standard fields of one SMART / Health log page. Temperatures are in kelvin as the
    device reports them; controller busy time is in minutes, power-on time in hours."""

    critical_warning: int
    composite_temperature_k: int
    available_spare_pct: int
    available_spare_threshold_pct: int
    percentage_used: int
    endurance_group_critical_warning: int
    data_units_read: int
    data_units_written: int
    host_read_commands: int
    host_write_commands: int
    controller_busy_time_min: int
    power_cycles: int
    power_on_hours: int
    unsafe_shutdowns: int
    media_errors: int
    error_log_entries: int
    warning_temp_time_min: int
    critical_temp_time_min: int
    temperature_sensors_k: tuple[int, ...]      # 8 sensors, 0 = not implemented

    @property
    def host_bytes_written_upper(self) -> int:
        """Data Units Written × 512,000 bytes: the counter rounds up, so at most this many."""
        return self.data_units_written * NVME_DATA_UNIT_BYTES

    def counters(self) -> dict[str, int]:
        """The fields every source (binary, nvme-cli JSON, smartctl JSON) carries, for comparison."""
        d = asdict(self)
        d.pop("temperature_sensors_k")
        return d


# (field, offset, size) in the 512-byte page.
_LAYOUT: tuple[tuple[str, int, int], ...] = (
    ("critical_warning", 0, 1),
    ("composite_temperature_k", 1, 2),
    ("available_spare_pct", 3, 1),
    ("available_spare_threshold_pct", 4, 1),
    ("percentage_used", 5, 1),
    ("endurance_group_critical_warning", 6, 1),
    ("data_units_read", 32, 16),
    ("data_units_written", 48, 16),
    ("host_read_commands", 64, 16),
    ("host_write_commands", 80, 16),
    ("controller_busy_time_min", 96, 16),
    ("power_cycles", 112, 16),
    ("power_on_hours", 128, 16),
    ("unsafe_shutdowns", 144, 16),
    ("media_errors", 160, 16),
    ("error_log_entries", 176, 16),
    ("warning_temp_time_min", 192, 4),
    ("critical_temp_time_min", 196, 4),
)
TEMP_SENSORS_OFFSET = 200


def parse_smart_log_binary(data: bytes, source: str = "nvme smart-log -o binary") -> SmartLog:
    """Decode the 512-byte SMART / Health log page. Anything but 512 bytes is an error."""
    need_length(data, SMART_LOG_BYTES, source, "smart log page")
    fields: dict[str, Any] = {name: le_uint(data, off, size) for name, off, size in _LAYOUT}
    fields["temperature_sensors_k"] = tuple(
        le_uint(data, TEMP_SENSORS_OFFSET + 2 * i, 2) for i in range(8)
    )
    return SmartLog(**fields)


# nvme-cli 2.x JSON key(s) per field; later versions renamed a few, so alternatives are listed.
_JSON_KEYS: dict[str, tuple[str, ...]] = {
    "critical_warning": ("critical_warning",),
    "composite_temperature_k": ("temperature",),
    "available_spare_pct": ("avail_spare", "available_spare"),
    "available_spare_threshold_pct": ("spare_thresh", "available_spare_threshold"),
    "percentage_used": ("percent_used", "percentage_used"),
    "endurance_group_critical_warning": ("endurance_grp_critical_warning_summary",),
    "data_units_read": ("data_units_read",),
    "data_units_written": ("data_units_written",),
    "host_read_commands": ("host_read_commands", "host_reads"),
    "host_write_commands": ("host_write_commands", "host_writes"),
    "controller_busy_time_min": ("controller_busy_time",),
    "power_cycles": ("power_cycles",),
    "power_on_hours": ("power_on_hours",),
    "unsafe_shutdowns": ("unsafe_shutdowns",),
    "media_errors": ("media_errors",),
    "error_log_entries": ("num_err_log_entries",),
    "warning_temp_time_min": ("warning_temp_time",),
    "critical_temp_time_min": ("critical_comp_time",),
}


def parse_smart_log_json(text: str | bytes, source: str = "nvme smart-log -o json") -> SmartLog:
    """Decode `nvme smart-log -o json` (nvme-cli 2.x): counters may be numbers or decimal strings.

    Temperature sensors appear as `temperature_sensor_N` (1-based) only when non-zero; absent
    ones are 0. `critical_warning` may be a number or an object with a `value` (newer nvme-cli)."""
    obj = need_object(load_json(text, source), source)
    fields: dict[str, Any] = {}
    for name, keys in _JSON_KEYS.items():
        if name == "critical_warning" and isinstance(obj.get("critical_warning"), dict):
            fields[name] = json_uint(obj["critical_warning"], "value", source)
            continue
        fields[name] = json_uint(obj, keys, source)
    fields["temperature_sensors_k"] = tuple(
        to_uint(obj[k], source, k) if (k := f"temperature_sensor_{i}") in obj else 0
        for i in range(1, 9)
    )
    return SmartLog(**fields)


def sample_from_smart_log(log: SmartLog, source: str, raw: str) -> WearSample:
    """A SMART log as a `WearSample`: host bytes are DUW × 512,000 (rounded-up units)."""
    return WearSample(
        source=source,
        host_bytes_written=log.host_bytes_written_upper,
        percentage_used=float(log.percentage_used),
        data_units_written=log.data_units_written,
        host_write_commands=log.host_write_commands,
        raw=raw,
    )


def smart_log_argv(device_path: str, fmt: str) -> list[str]:
    """`nvme smart-log DEV -o FMT` (FMT: json or binary; nvme-cli 2.x spelling)."""
    return ["nvme", "smart-log", device_path, "-o", fmt]


@READERS.register("nvme-smart-json")
def read_nvme_smart_json(device_path: str, runner: CommandRunner) -> WearSample:
    argv = smart_log_argv(device_path, "json")
    out = runner(argv)
    log = parse_smart_log_json(out, " ".join(argv))
    return sample_from_smart_log(log, "nvme-smart-json", out.decode(errors="replace"))


@READERS.register("nvme-smart-binary")
def read_nvme_smart_binary(device_path: str, runner: CommandRunner) -> WearSample:
    argv = smart_log_argv(device_path, "binary")
    out = runner(argv)
    log = parse_smart_log_binary(out, " ".join(argv))
    return sample_from_smart_log(log, "nvme-smart-binary", hexdump(out))
