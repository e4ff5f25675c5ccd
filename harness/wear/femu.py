"""FEMU's FTL counters. FEMU builds of the fixtures' generation (docs/design/replay-and-devices.md) write them into the
vendor bytes of the SMART log:

| offset | type   | meaning                                                   |
|--------|--------|-----------------------------------------------------------|
| 192    | u32 LE | cumulative WAF × 1000 = (host + GC pages) / host pages    |
| 200    | u64 LE | host-programmed 4 KiB pages                               |
| 208    | u64 LE | GC-relocated 4 KiB pages                                  |

so NAND bytes = (host + GC pages) × 4096 and host bytes = host pages × 4096, exactly (no data-unit
rounding). nvme-cli and smartctl print these bytes as `warning_temp_time` and temperature sensors
1-8 (u16 words); `femu_counters_from_nvme_json` / `_from_smartctl_json` reassemble them from
those prints, for cross-checking only — the binary log is the source.

Newer FEMU moved them to its own vendor log page C0h (`FemuStatsLog`; NVMe 2.0 gave SMART bytes
192+ to thermal fields), read with `nvme get-log DEV --log-id=0xc0 --log-len=512 -b`:

| offset | type   | meaning                                                   |
|--------|--------|-----------------------------------------------------------|
| 0      | u32 LE | WAF × 1000 = (programmed + GC pages) / host pages         |
| 8      | u64 LE | pages the host asked to program                           |
| 16     | u64 LE | GC-relocated pages                                        |
| 24     | u64 LE | pages actually programmed (< host pages when a write buffer absorbed rewrites) |

so there NAND bytes = (programmed + GC pages) × 4096 (`parse_femu_stats_log`, reader `femu-stats`).

On any other drive those bytes are the standard thermal fields (and C0h is, say, OCP's), so they are read as FEMU
counters only when the device identity says FEMU (`is_femu`: model "FEMU…" or an org.femu
subsystem NQN) or the caller passes `assume_femu=True` explicitly; never guessed from the values.
The counters grow from device start: use deltas between snapshots.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvwear.errors import InputError
from kvwear.harness.wear._decode import (
    ReaderUnavailable,
    hexdump,
    json_uint,
    json_uint_or,
    le_uint,
    load_json,
    need_length,
    need_object,
)
from kvwear.harness.wear.base import READERS, CommandRunner, WearReader, WearSample
from kvwear.harness.wear.identify import ControllerId, DeviceIdentity, parse_id_ctrl_json
from kvwear.harness.wear.nvme_smart import SMART_LOG_BYTES, parse_smart_log_binary, smart_log_argv
from kvwear.harness.wear.smartctl import HEALTH_KEY, KELVIN_OFFSET

FEMU_PAGE_BYTES = 4096
WAF_OFFSET, HOST_PAGES_OFFSET, GC_PAGES_OFFSET = 192, 200, 208
STATS_LOG_ID, STATS_LOG_BYTES = 0xC0, 512
STATS_WAF_OFFSET, STATS_HOST_OFFSET, STATS_GC_OFFSET, STATS_PROGRAMMED_OFFSET = 0, 8, 16, 24


@dataclass(frozen=True)
class FemuCounters:
    """FEMU's cumulative FTL counters (since the emulator started)."""

    waf_milli: int          # FEMU's own WAF × 1000 (1000, or 0 in the stats log, before any write)
    host_pages: int
    gc_pages: int
    programmed_pages: int | None = None     # the stats log's own count; the SMART bytes have none

    @property
    def host_bytes_written(self) -> int:
        return self.host_pages * FEMU_PAGE_BYTES

    @property
    def nand_pages(self) -> int:
        return (self.host_pages if self.programmed_pages is None else self.programmed_pages) + self.gc_pages

    @property
    def nand_bytes_written(self) -> int:
        return self.nand_pages * FEMU_PAGE_BYTES

    @property
    def waf(self) -> float | None:
        """WAF recomputed from the page counts (None before any host write)."""
        return self.nand_pages / self.host_pages if self.host_pages else None


def is_femu(identity: DeviceIdentity | ControllerId) -> bool:
    """True for a FEMU emulated controller, by its model string or subsystem NQN."""
    model = identity.model or ""
    extra = getattr(identity, "extra", None)
    subnqn = str(extra.get("subnqn", "")) if isinstance(extra, Mapping) else str(getattr(identity, "subnqn", ""))
    return model.upper().startswith("FEMU") or ".org.femu:" in subnqn


def parse_femu_counters(data: bytes, source: str = "nvme smart-log -o binary") -> FemuCounters:
    """Decode FEMU's vendor bytes from the 512-byte SMART log. Call only for a FEMU device
    (see the module docstring): the decode itself cannot tell FEMU from another drive."""
    need_length(data, SMART_LOG_BYTES, source, "smart log page")
    return FemuCounters(
        waf_milli=le_uint(data, WAF_OFFSET, 4),
        host_pages=le_uint(data, HOST_PAGES_OFFSET, 8),
        gc_pages=le_uint(data, GC_PAGES_OFFSET, 8),
    )


def parse_femu_stats_log(data: bytes, source: str = "nvme get-log --log-id=0xc0 -b") -> FemuCounters:
    """Decode newer FEMU's stats log page C0h (module docstring). FEMU devices only: other drives
    answer C0h with their own layouts (OCP's SMART/Health Information Extended, for one)."""
    need_length(data, STATS_LOG_BYTES, source, "FEMU stats log page C0h")
    return FemuCounters(
        waf_milli=le_uint(data, STATS_WAF_OFFSET, 4),
        host_pages=le_uint(data, STATS_HOST_OFFSET, 8),
        gc_pages=le_uint(data, STATS_GC_OFFSET, 8),
        programmed_pages=le_uint(data, STATS_PROGRAMMED_OFFSET, 8),
    )


def femu_stats_log_argv(device_path: str) -> list[str]:
    """nvme-cli's command for the raw stats log (the controller: /dev/nvme0n1 → /dev/nvme0 works too)."""
    return ["nvme", "get-log", device_path, f"--log-id={STATS_LOG_ID:#x}", f"--log-len={STATS_LOG_BYTES}", "-b"]


def sample_from_femu_stats_log(log_bytes: bytes, source: str = "nvme get-log --log-id=0xc0 -b") -> WearSample:
    """A FEMU stats log page as a `WearSample`: exact host and NAND bytes from its page counters."""
    femu = parse_femu_stats_log(log_bytes, source)
    return WearSample(
        source="femu-stats",
        host_bytes_written=femu.host_bytes_written,
        nand_bytes_written=femu.nand_bytes_written,
        raw=hexdump(log_bytes),
        note=f"FEMU WAF word {femu.waf_milli}; host pages {femu.host_pages}, GC pages {femu.gc_pages}, "
             f"programmed pages {femu.programmed_pages}",
    )


def _from_words(waf: int, words: list[int]) -> FemuCounters:
    host = sum(w << (16 * i) for i, w in enumerate(words[0:4]))
    gc = sum(w << (16 * i) for i, w in enumerate(words[4:8]))
    return FemuCounters(waf_milli=waf, host_pages=host, gc_pages=gc)


def femu_counters_from_nvme_json(text: str | bytes, source: str = "nvme smart-log -o json") -> FemuCounters:
    """Reassemble the counters from nvme-cli's mislabelled JSON: `warning_temp_time` is the WAF
    word, `temperature_sensor_1..4` / `_5..8` the u16 words of host / GC pages (absent = 0)."""
    obj = need_object(load_json(text, source), source)
    waf = json_uint(obj, "warning_temp_time", source)
    words = [json_uint_or(obj, f"temperature_sensor_{i}", source, 0) for i in range(1, 9)]
    for i, w in enumerate(words, 1):
        if w > 0xFFFF:
            raise InputError(source, None, f"temperature_sensor_{i}", f"{w} does not fit a u16 word")
    return _from_words(waf, words)


def femu_counters_from_smartctl_json(text: str | bytes, source: str = "smartctl -j -a") -> FemuCounters:
    """Reassemble the counters from smartctl's JSON: sensors are printed as word − 273 (°C), null
    for a zero word."""
    obj = need_object(load_json(text, source), source)
    log = need_object(obj.get(HEALTH_KEY), source, HEALTH_KEY)
    waf = json_uint(log, "warning_temp_time", source)
    sensors = log.get("temperature_sensors", [])
    if not isinstance(sensors, list) or len(sensors) > 8:
        raise InputError(source, None, "temperature_sensors", f"expected a list of ≤ 8, got {sensors!r}")
    words: list[int] = []
    for i, c in enumerate(sensors):
        if c is None:
            w = 0
        elif isinstance(c, int) and not isinstance(c, bool):
            w = c + KELVIN_OFFSET
        else:
            w = -1
        if not 0 <= w <= 0xFFFF:
            raise InputError(source, None, f"temperature_sensors[{i}]", f"not a u16 word − 273: {c!r}")
        words.append(w)
    return _from_words(waf, words + [0] * (8 - len(words)))


def sample_from_femu(log_bytes: bytes, source: str = "nvme smart-log -o binary") -> WearSample:
    """A FEMU SMART log as a `WearSample`: exact host and NAND bytes from the page counters, plus
    the standard DUW and write-command counters of the same page."""
    smart = parse_smart_log_binary(log_bytes, source)
    femu = parse_femu_counters(log_bytes, source)
    return WearSample(
        source="femu-vendor",
        host_bytes_written=femu.host_bytes_written,
        nand_bytes_written=femu.nand_bytes_written,
        percentage_used=float(smart.percentage_used),
        data_units_written=smart.data_units_written,
        host_write_commands=smart.host_write_commands,
        raw=hexdump(log_bytes),
        note=f"FEMU WAF word {femu.waf_milli}; host pages {femu.host_pages}, GC pages {femu.gc_pages}",
    )


def _require_femu(device_path: str, runner: CommandRunner, what: str) -> None:
    argv = ["nvme", "id-ctrl", device_path, "-o", "json"]
    ctrl = parse_id_ctrl_json(runner(argv), " ".join(argv))
    if not is_femu(ctrl):
        raise ReaderUnavailable(f"{device_path} is not a FEMU controller (model {ctrl.model!r}, subnqn "
                                f"{ctrl.subnqn!r}); {what}")


def femu_vendor_reader(assume_femu: bool = False) -> WearReader:
    """The `femu-vendor` reader (SMART bytes 192-215). It checks `nvme id-ctrl` says FEMU unless
    `assume_femu` (the explicit option, for a FEMU build whose identity strings were changed)."""

    def read(device_path: str, runner: CommandRunner) -> WearSample:
        if not assume_femu:
            _require_femu(device_path, runner, "its SMART bytes 192-215 are thermal fields, not FTL counters")
        argv = smart_log_argv(device_path, "binary")
        return sample_from_femu(runner(argv), " ".join(argv))

    return read


def femu_stats_reader(assume_femu: bool = False) -> WearReader:
    """The `femu-stats` reader (newer FEMU's log page C0h), with the same identity check."""

    def read(device_path: str, runner: CommandRunner) -> WearSample:
        if not assume_femu:
            _require_femu(device_path, runner, "its log page C0h is not FEMU's stats log")
        argv = femu_stats_log_argv(device_path)
        return sample_from_femu_stats_log(runner(argv), " ".join(argv))

    return read


READERS.add("femu-vendor", femu_vendor_reader())
READERS.add("femu-stats", femu_stats_reader())


def femu_counters(sample_or_bytes: WearSample | bytes, source: str = "femu-vendor") -> FemuCounters:
    """The counters behind a `femu-vendor` sample (decoded again from its raw hex), or from bytes."""
    if isinstance(sample_or_bytes, WearSample):
        try:
            data = bytes.fromhex(sample_or_bytes.raw)
        except ValueError:
            raise InputError(source, None, "raw", "not the hex of a SMART log page") from None
        return parse_femu_counters(data, source)
    return parse_femu_counters(sample_or_bytes, source)

