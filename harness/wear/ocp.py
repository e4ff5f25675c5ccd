"""The OCP Datacenter NVMe SSD "SMART / Health Information Extended" log (Log Identifier C0h):
Physical Media Units Written — the bytes the drive wrote to NAND, a 16-byte little-endian counter
at offset 0 (despite "units", OCP defines it in bytes) — and Physical Media Units Read at 16.

Inputs: `nvme ocp smart-add-log DEV -o json` (nvme-cli 2.x: `{"Physical media units written":
{"hi": H, "lo": L}, ...}`) and the 512-byte page (`nvme get-log DEV --log-id=0xc0 --log-len=512
--raw-binary`), whose GUID at offset 496 must be OCP's (AFD514C97C6F4F9CA4F2BFEA2810AFC5, stored
little-endian). A drive without the log refuses it; that refusal (e.g. the recorded
`ret = 16649`, NVMe status 0x4109 Invalid Log Page) parses to a `LogUnsupported` result, which the
parsers return instead of raising. Nothing here runs a command except through the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvwear.errors import InputError
from kvwear.harness.wear._decode import (
    LogUnsupported,
    ReaderUnavailable,
    hexdump,
    le_uint,
    load_json,
    need_length,
    need_object,
    parse_nvme_refusal,
    run_or_unavailable,
    to_uint,
)
from kvwear.harness.wear.base import READERS, CommandRunner, WearSample

OCP_C0_BYTES = 512
OCP_C0_GUID = bytes([0xC5, 0xAF, 0x10, 0x28, 0xEA, 0xBF, 0xF2, 0xA4,
                     0x9C, 0x4F, 0x6F, 0x7C, 0xC9, 0x14, 0xD5, 0xAF])
GUID_OFFSET, VERSION_OFFSET = 496, 494
PMUW_KEYS = ("Physical media units written", "physical_media_units_written")
PMUR_KEYS = ("Physical media units read", "physical_media_units_read")


@dataclass(frozen=True)
class OcpC0Log:
    physical_media_bytes_written: int
    physical_media_bytes_read: int
    log_page_version: int | None = None     # from the binary page only


def parse_ocp_c0_binary(data: bytes, source: str = "nvme get-log --log-id=0xc0") -> OcpC0Log | LogUnsupported:
    """Decode the 512-byte C0h page; a page with another GUID is a vendor's own C0h layout and is
    returned as `LogUnsupported` (not OCP's log), not misread."""
    need_length(data, OCP_C0_BYTES, source, "C0h log page")
    guid = data[GUID_OFFSET:GUID_OFFSET + 16]
    if guid != OCP_C0_GUID:
        return LogUnsupported(source, "log page GUID mismatch (not OCP's C0h layout)",
                              f"GUID {guid[::-1].hex()} ≠ {OCP_C0_GUID[::-1].hex()}", None, True)
    return OcpC0Log(
        physical_media_bytes_written=le_uint(data, 0, 16),
        physical_media_bytes_read=le_uint(data, 16, 16),
        log_page_version=le_uint(data, VERSION_OFFSET, 2),
    )


def _u128(obj: Any, key: str, source: str) -> int:
    if isinstance(obj, dict):
        if "hi" not in obj or "lo" not in obj:
            raise InputError(source, None, key, f"expected {{'hi', 'lo'}}, got keys {sorted(obj)}")
        hi, lo = to_uint(obj["hi"], source, f"{key}.hi"), to_uint(obj["lo"], source, f"{key}.lo")
        if hi >= 1 << 64 or lo >= 1 << 64:
            raise InputError(source, None, key, "hi/lo halves exceed 64 bits")
        return (hi << 64) | lo
    return to_uint(obj, source, key)


def parse_ocp_c0_json(text: str | bytes, source: str = "nvme ocp smart-add-log -o json") -> OcpC0Log | LogUnsupported:
    """Decode nvme-cli's JSON; output that is the plugin's refusal (it prints no JSON then, only
    'ERROR : OCP : ...') is returned as `LogUnsupported`."""
    raw = text.decode(errors="replace") if isinstance(text, bytes) else text
    if raw.lstrip().startswith("ERROR") or "Failure reading the C0 Log Page" in raw:
        return parse_nvme_refusal(raw, source)
    obj = need_object(load_json(raw, source), source)
    values = []
    for keys in (PMUW_KEYS, PMUR_KEYS):
        key = next((k for k in keys if k in obj), None)
        if key is None:
            raise InputError(source, None, keys[0], "missing")
        values.append(_u128(obj[key], key, source))
    return OcpC0Log(physical_media_bytes_written=values[0], physical_media_bytes_read=values[1])


def _sample(result: OcpC0Log | LogUnsupported, source: str, raw: str) -> WearSample:
    if isinstance(result, LogUnsupported):
        raise ReaderUnavailable(f"{result.source}: {result.reason}: {result.message}")
    return WearSample(source=source, nand_bytes_written=result.physical_media_bytes_written, raw=raw)


def ocp_c0_json_argv(device_path: str) -> list[str]:
    return ["nvme", "ocp", "smart-add-log", device_path, "-o", "json"]


def ocp_c0_binary_argv(device_path: str) -> list[str]:
    return ["nvme", "get-log", device_path, "--log-id=0xc0", "--log-len=512", "--raw-binary"]


@READERS.register("ocp-c0")
def read_ocp_c0(device_path: str, runner: CommandRunner) -> WearSample:
    argv = ocp_c0_json_argv(device_path)
    out = run_or_unavailable(runner, argv)      # a refusal: ReaderUnavailable with the NVMe status
    return _sample(parse_ocp_c0_json(out, " ".join(argv)), "ocp-c0", out.decode(errors="replace"))


@READERS.register("ocp-c0-binary")
def read_ocp_c0_binary(device_path: str, runner: CommandRunner) -> WearSample:
    argv = ocp_c0_binary_argv(device_path)
    out = run_or_unavailable(runner, argv)
    return _sample(parse_ocp_c0_binary(out, " ".join(argv)), "ocp-c0-binary", hexdump(out))
