"""The NVMe Flexible Data Placement statistics log (Log Identifier 22h, per endurance group):
three 16-byte little-endian byte counters, then 16 reserved bytes (64 bytes in all; NVMe 2.0
TP4146, libnvme `struct nvme_fdp_stats_log`):

| offset | field                                          |
|--------|------------------------------------------------|
| 0      | HBMW: host bytes with metadata written          |
| 16     | MBMW: media bytes with metadata written         |
| 32     | MBE: media bytes erased                         |

(Checked against NVMe 2.1's FDP Statistics log page: bytes 15:00 HBMW, 31:16 MBMW, 47:32 MBE,
63:48 reserved; the log is per endurance group, named by the Log Specific Identifier, so it has
no per-handle counters: per handle, `parse_ruh_status_binary` reads the namespace's Reclaim Unit
Handle Status (I/O Management Receive, `nvme fdp status DEV -o binary`): bytes 13:00 reserved,
15:14 the number of descriptors, then 32 bytes per placement identifier: PID (1:0), RUHID (3:2),
EARUTR in seconds (7:4), RUAMW in logical blocks (15:8) — the media writes left in the handle's
open reclaim unit, which falls as writes land on that handle.)

The FDP Configurations log (Log Identifier 20h, per endurance group; `nvme fdp configs DEV
--endgrp-id=N -o binary`): a 16-byte header (NUMFDPC u16 at 0, zero-based; LSIZE u32 at 4), then
one configuration descriptor per configuration: DSZE u16 (its size in bytes) at 0, FDPA u8 at 2
(bit 7: the configuration is valid), VSS u8 at 3, NRG u32 at 4, NRUH u16 at 8, MAXPIDS u16 at 10,
NNSS u32 at 12, RUNS u64 (reclaim unit nominal size, bytes) at 16, ERUTL u32 at 24, reserved to
byte 63, then NRUH 4-byte reclaim unit handle descriptors (RUHT u8: 1 initially isolated, 2
persistently isolated) and padding up to DSZE (`parse_fdp_configs_binary`).

Inputs: `nvme fdp stats DEV --endgrp-id=N -o json` (`{"hbmw": ..., "mbmw": ..., "mbe": ...}`,
128-bit values as numbers or decimal strings) and `-o binary` (the 64 bytes). The counters include
metadata bytes, so on a namespace formatted with metadata they exceed the data bytes. Drives
without FDP refuse the log; the reader reports that as unavailable.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwear.errors import InputError
from kvwear.harness.wear._decode import (
    hexdump,
    json_uint,
    le_uint,
    load_json,
    need_length,
    need_object,
    run_or_unavailable,
)
from kvwear.harness.wear.base import READERS, CommandRunner, WearReader, WearSample

FDP_STATS_BYTES = 64


@dataclass(frozen=True)
class FdpStats:
    host_bytes_with_metadata_written: int
    media_bytes_with_metadata_written: int
    media_bytes_erased: int

    @property
    def waf(self) -> float | None:
        h = self.host_bytes_with_metadata_written
        return self.media_bytes_with_metadata_written / h if h else None


def parse_fdp_stats_binary(data: bytes, source: str = "nvme fdp stats -o binary") -> FdpStats:
    need_length(data, FDP_STATS_BYTES, source, "FDP statistics log")
    return FdpStats(le_uint(data, 0, 16), le_uint(data, 16, 16), le_uint(data, 32, 16))


def parse_fdp_stats_json(text: str | bytes, source: str = "nvme fdp stats -o json") -> FdpStats:
    obj = need_object(load_json(text, source), source)
    return FdpStats(json_uint(obj, "hbmw", source), json_uint(obj, "mbmw", source),
                    json_uint(obj, "mbe", source))


@dataclass(frozen=True)
class RuhStatus:
    """One Reclaim Unit Handle Status descriptor."""

    placement_id: int
    ruh_id: int
    earutr_s: int               # estimated active reclaim unit time remaining
    ruamw_blocks: int           # reclaim unit available media writes, in logical blocks


RUH_STATUS_HEADER_BYTES = 16
RUH_STATUS_DESCRIPTOR_BYTES = 32


def parse_ruh_status_binary(data: bytes, source: str = "nvme fdp status -o binary") -> tuple[RuhStatus, ...]:
    """The descriptors of a Reclaim Unit Handle Status. Also accepted: exactly NRUHSD × 32 bytes,
    what Debian 12's nvme-cli 2.3 prints (it transfers the descriptors' size and forgets the 16-byte
    header; recorded against QEMU 10, tests/harness/fixtures/qemu-10-fdp): that cuts only the last
    descriptor's 16 reserved bytes, so every field is still there."""
    need_length(data, RUH_STATUS_HEADER_BYTES, source, "reclaim unit handle status", exact=False)
    n = le_uint(data, 14, 2)
    if len(data) != n * RUH_STATUS_DESCRIPTOR_BYTES:
        need_length(data, RUH_STATUS_HEADER_BYTES + n * RUH_STATUS_DESCRIPTOR_BYTES, source,
                    f"reclaim unit handle status with {n} descriptors", exact=False)
    out = []
    for i in range(n):
        o = RUH_STATUS_HEADER_BYTES + i * RUH_STATUS_DESCRIPTOR_BYTES
        out.append(RuhStatus(le_uint(data, o, 2), le_uint(data, o + 2, 2), le_uint(data, o + 4, 4),
                             le_uint(data, o + 8, 8)))
    return tuple(out)


@dataclass(frozen=True)
class FdpConfiguration:
    """One FDP configuration descriptor of log page 20h."""

    index: int
    valid: bool                 # FDPA bit 7
    reclaim_groups: int         # NRG
    reclaim_unit_handles: int   # NRUH
    max_placement_ids: int      # MAXPIDS, zero-based as the log gives it
    namespaces: int             # NNSS
    reclaim_unit_bytes: int     # RUNS
    ruh_types: tuple[int, ...]  # RUHT per handle (1 initially, 2 persistently isolated)


FDP_CONFIGS_HEADER_BYTES = 16
FDP_CONFIG_FIXED_BYTES = 64


def parse_fdp_configs_binary(data: bytes, source: str = "nvme fdp configs -o binary") -> tuple[FdpConfiguration, ...]:
    """Every configuration of the FDP Configurations log; a descriptor that overruns the data (or
    claims fewer bytes than its handle list) is an InputError naming it."""
    need_length(data, FDP_CONFIGS_HEADER_BYTES, source, "FDP configurations log", exact=False)
    n = le_uint(data, 0, 2) + 1
    out, o = [], FDP_CONFIGS_HEADER_BYTES
    for i in range(n):
        need_length(data, o + FDP_CONFIG_FIXED_BYTES, source, f"FDP configuration {i}", exact=False)
        size, nruh = le_uint(data, o, 2), le_uint(data, o + 8, 2)
        if size < FDP_CONFIG_FIXED_BYTES + 4 * nruh:
            raise InputError(source, None, f"FDP configuration {i} DSZE",
                             f"{size} bytes cannot hold its {nruh} reclaim unit handle descriptors")
        need_length(data, o + size, source, f"FDP configuration {i} ({size} bytes)", exact=False)
        ruht = tuple(data[o + FDP_CONFIG_FIXED_BYTES + 4 * k] for k in range(nruh))
        out.append(FdpConfiguration(index=i, valid=bool(data[o + 2] & 0x80), reclaim_groups=le_uint(data, o + 4, 4),
                                    reclaim_unit_handles=nruh, max_placement_ids=le_uint(data, o + 10, 2),
                                    namespaces=le_uint(data, o + 12, 4), reclaim_unit_bytes=le_uint(data, o + 16, 8),
                                    ruh_types=ruht))
        o += size
    return tuple(out)


def sample_from_fdp(stats: FdpStats, raw: str) -> WearSample:
    return WearSample(source="fdp", host_bytes_written=stats.host_bytes_with_metadata_written,
                      nand_bytes_written=stats.media_bytes_with_metadata_written, raw=raw,
                      note=f"media bytes erased {stats.media_bytes_erased}; counters include metadata")


def fdp_argv(device_path: str, endgrp_id: int, fmt: str) -> list[str]:
    return ["nvme", "fdp", "stats", device_path, f"--endgrp-id={endgrp_id}", "-o", fmt]


def fdp_reader(endgrp_id: int = 1, binary: bool = False) -> WearReader:
    """The `fdp` reader for endurance group `endgrp_id` (Identify Namespace ENDGID; 1 on
    single-group drives)."""

    def read(device_path: str, runner: CommandRunner) -> WearSample:
        argv = fdp_argv(device_path, endgrp_id, "binary" if binary else "json")
        src = " ".join(argv)
        out = run_or_unavailable(runner, argv)
        if binary:
            return sample_from_fdp(parse_fdp_stats_binary(out, src), hexdump(out))
        return sample_from_fdp(parse_fdp_stats_json(out, src), out.decode(errors="replace"))

    return read


READERS.add("fdp", fdp_reader())
