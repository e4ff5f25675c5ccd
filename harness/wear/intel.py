"""The Intel/Solidigm "additional SMART" vendor log (Log Identifier CAh): `nand_bytes_written`
(attribute F4h) and `host_bytes_written` (F5h).

Layout (nvme-cli plugins/intel/intel-nvme.c, `struct nvme_additional_smart_log`): an array of
12-byte items `{u8 key; u8 rsvd[2]; u8 normalized; u8 rsvd; u8 raw[6] (48-bit LE); u8 rsvd}`;
the binary parser finds items by key rather than position, since models order them differently.
`nvme intel smart-log-add DEV --json` prints `{"Device stats": {"nand_bytes_written":
{"normalized": N, "raw": R}, "host_bytes_written": {...}, ...}}`.

Unit: Intel's datacenter SSD product specifications define both raw counters as a count of
32 MiB units (`INTEL_CA_UNIT_BYTES`); the bytes are therefore quantized to 32 MiB. No drive was
available to confirm the unit on; readers take `unit_bytes` to override it. No recorded output
exists either: tests build inputs from the documented layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwear.errors import InputError
from kvwear.harness.wear._decode import (
    hexdump,
    json_uint,
    json_uint_or,
    le_uint,
    load_json,
    need_object,
    run_or_unavailable,
)
from kvwear.harness.wear.base import READERS, CommandRunner, WearReader, WearSample

INTEL_CA_UNIT_BYTES = 32 * 2**20
ITEM_BYTES = 12
KEY_NAND_BYTES_WRITTEN, KEY_HOST_BYTES_WRITTEN = 0xF4, 0xF5


@dataclass(frozen=True)
class IntelCaLog:
    """The two write counters of the CAh log, as raw counts and their normalized values."""

    nand_bytes_written_raw: int
    host_bytes_written_raw: int | None
    nand_normalized: int | None = None
    host_normalized: int | None = None

    def nand_bytes(self, unit_bytes: int = INTEL_CA_UNIT_BYTES) -> int:
        return self.nand_bytes_written_raw * unit_bytes

    def host_bytes(self, unit_bytes: int = INTEL_CA_UNIT_BYTES) -> int | None:
        return None if self.host_bytes_written_raw is None else self.host_bytes_written_raw * unit_bytes


def parse_intel_ca_binary(data: bytes, source: str = "nvme intel smart-log-add --raw-binary") -> IntelCaLog:
    """Decode the CAh log by item key. It must be a whole number of 12-byte items and hold F4h."""
    if not data or len(data) % ITEM_BYTES:
        raise InputError(source, None, "CAh log", f"length {len(data)} is not a positive multiple of "
                         f"{ITEM_BYTES} (truncated?)")
    items: dict[int, tuple[int, int]] = {}
    for off in range(0, len(data), ITEM_BYTES):
        key = data[off]
        if key and key not in items:
            items[key] = (data[off + 3], le_uint(data, off + 5, 6))
    if KEY_NAND_BYTES_WRITTEN not in items:
        present = ", ".join(f"{k:#04x}" for k in sorted(items)) or "none"
        raise InputError(source, None, "nand_bytes_written", f"no item with key 0xf4 (keys present: {present})")
    nand_norm, nand_raw = items[KEY_NAND_BYTES_WRITTEN]
    host = items.get(KEY_HOST_BYTES_WRITTEN)
    return IntelCaLog(nand_bytes_written_raw=nand_raw, host_bytes_written_raw=host[1] if host else None,
                      nand_normalized=nand_norm, host_normalized=host[0] if host else None)


def parse_intel_ca_json(text: str | bytes, source: str = "nvme intel smart-log-add --json") -> IntelCaLog:
    obj = need_object(load_json(text, source), source)
    stats = need_object(obj.get("Device stats"), source, "Device stats")
    nand = need_object(stats.get("nand_bytes_written"), source, "nand_bytes_written")
    host = stats.get("host_bytes_written")
    host_obj = need_object(host, source, "host_bytes_written") if host is not None else None
    return IntelCaLog(
        nand_bytes_written_raw=json_uint(nand, "raw", source),
        host_bytes_written_raw=json_uint(host_obj, "raw", source) if host_obj is not None else None,
        nand_normalized=json_uint_or(nand, "normalized", source, None),
        host_normalized=json_uint_or(host_obj, "normalized", source, None) if host_obj else None,
    )


def sample_from_intel_ca(log: IntelCaLog, raw: str, unit_bytes: int = INTEL_CA_UNIT_BYTES) -> WearSample:
    return WearSample(source="intel-ca", host_bytes_written=log.host_bytes(unit_bytes),
                      nand_bytes_written=log.nand_bytes(unit_bytes), raw=raw,
                      note=f"CAh counters in units of {unit_bytes} bytes")


def intel_ca_reader(unit_bytes: int = INTEL_CA_UNIT_BYTES, binary: bool = False) -> WearReader:
    """The `intel-ca` reader (JSON by default, `binary=True` for --raw-binary)."""

    def read(device_path: str, runner: CommandRunner) -> WearSample:
        argv = ["nvme", "intel", "smart-log-add", device_path, "--raw-binary" if binary else "--json"]
        src = " ".join(argv)
        out = run_or_unavailable(runner, argv)
        if binary:
            return sample_from_intel_ca(parse_intel_ca_binary(out, src), hexdump(out), unit_bytes)
        return sample_from_intel_ca(parse_intel_ca_json(out, src), out.decode(errors="replace"), unit_bytes)

    return read


READERS.add("intel-ca", intel_ca_reader())
