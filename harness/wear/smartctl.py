"""`smartctl -j -a` (smartmontools 7.x JSON) for NVMe devices: its
`nvme_smart_health_information_log` decoded into the same `SmartLog` the nvme-cli parsers give,
and the `smartctl` reader.

smartctl reports the composite temperature in °C (kelvin − 273) and the sensors as a list in °C
with `null` for an unimplemented (zero) sensor; both are converted back to kelvin here so the
three SMART sources compare field for field. Its exit status is a bit mask: bits 0-1 mean the
command could not run; higher bits (e.g. error-log entries present) still come with a complete
JSON document, which the reader then parses. ATA/SCSI devices are not decoded (the reader reports
them as unavailable). pySMART is not used for byte values: its strings are rounded.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Any

from kvwear.errors import InputError
from kvwear.harness.wear._decode import ReaderUnavailable, json_uint, json_uint_or, load_json, need_object, to_uint
from kvwear.harness.wear.base import READERS, CommandRunner, WearSample
from kvwear.harness.wear.nvme_smart import SmartLog, sample_from_smart_log

KELVIN_OFFSET = 273   # smartctl prints kelvin − 273 (integer), as the NVMe spec's own examples do

_KEYS: dict[str, str] = {
    "critical_warning": "critical_warning",
    "available_spare_pct": "available_spare",
    "available_spare_threshold_pct": "available_spare_threshold",
    "percentage_used": "percentage_used",
    "data_units_read": "data_units_read",
    "data_units_written": "data_units_written",
    "host_read_commands": "host_reads",
    "host_write_commands": "host_writes",
    "controller_busy_time_min": "controller_busy_time",
    "power_cycles": "power_cycles",
    "power_on_hours": "power_on_hours",
    "unsafe_shutdowns": "unsafe_shutdowns",
    "media_errors": "media_errors",
    "error_log_entries": "num_err_log_entries",
}
HEALTH_KEY = "nvme_smart_health_information_log"


def smartctl_document(text: str | bytes, source: str) -> Mapping[str, Any]:
    """The parsed document, after checking smartctl itself ran (exit bits 0-1 clear)."""
    doc = need_object(load_json(text, source), source)
    meta = doc.get("smartctl")
    meta = meta if isinstance(meta, Mapping) else {}
    status = meta.get("exit_status", 0)
    if isinstance(status, int) and status & 0b11:
        msgs = [str(m.get("string", m)) for m in meta.get("messages", []) if isinstance(m, Mapping)]
        raise ReaderUnavailable(f"{source}: smartctl could not read the device "
                                f"(exit status {status}): {'; '.join(msgs) or 'no message'}")
    return doc


def parse_smartctl_json(text: str | bytes, source: str = "smartctl -j -a") -> SmartLog:
    """Decode the NVMe health log of a `smartctl -j -a` document (kelvin restored)."""
    doc = smartctl_document(text, source)
    if HEALTH_KEY not in doc:
        proto = doc.get("device", {}).get("protocol", "?") if isinstance(doc.get("device"), dict) else "?"
        raise InputError(source, None, HEALTH_KEY, f"missing (device protocol {proto!r}; only NVMe "
                         "health logs are decoded)")
    log = need_object(doc[HEALTH_KEY], source, HEALTH_KEY)
    fields: dict[str, Any] = {name: json_uint(log, key, source) for name, key in _KEYS.items()}
    temp_c = log.get("temperature")
    if not isinstance(temp_c, int) or isinstance(temp_c, bool):
        raise InputError(source, None, "temperature", f"expected integer °C, got {temp_c!r}")
    fields["composite_temperature_k"] = temp_c + KELVIN_OFFSET
    # smartctl 7.3 omits the endurance-group summary; the spec's value for 'none' is 0.
    fields["endurance_group_critical_warning"] = 0
    fields["warning_temp_time_min"] = json_uint_or(log, "warning_temp_time", source, 0)
    fields["critical_temp_time_min"] = json_uint_or(log, "critical_comp_time", source, 0)
    sensors = log.get("temperature_sensors", [])
    if not isinstance(sensors, list) or len(sensors) > 8:
        raise InputError(source, None, "temperature_sensors", f"expected a list of ≤ 8, got {sensors!r}")
    kelvin = []
    for i, c in enumerate(sensors):
        if c is None:
            kelvin.append(0)
        elif isinstance(c, int) and not isinstance(c, bool):
            kelvin.append(to_uint(c + KELVIN_OFFSET, source, f"temperature_sensors[{i}]"))
        else:
            raise InputError(source, None, f"temperature_sensors[{i}]", f"expected integer °C, got {c!r}")
    fields["temperature_sensors_k"] = tuple(kelvin + [0] * (8 - len(kelvin)))
    return SmartLog(**fields)


def smartctl_argv(device_path: str) -> list[str]:
    return ["smartctl", "-j", "-a", device_path]


@READERS.register("smartctl")
def read_smartctl(device_path: str, runner: CommandRunner) -> WearSample:
    argv = smartctl_argv(device_path)
    try:
        out = runner(argv)
    except subprocess.CalledProcessError as exc:
        # smartctl sets high exit bits for conditions that still print the whole document.
        if exc.returncode & 0b11 or not exc.stdout:
            raise
        out = exc.stdout
    source = " ".join(argv)
    doc = smartctl_document(out, source)
    if HEALTH_KEY not in doc:
        raise ReaderUnavailable(f"{source}: no NVMe health log (device protocol "
                                f"{doc.get('device', {}).get('protocol', '?')!r})")
    return sample_from_smart_log(parse_smartctl_json(out, source), "smartctl", out.decode(errors="replace"))
