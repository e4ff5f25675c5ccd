"""Taking wear snapshots and differencing them.

`snapshot` runs a list of readers on one device and keeps going past a reader the device does
not support (recorded as a `WearSample` with `supported=False` and the tool's message); garbled
output still raises. `delta` subtracts two samples of one source into a `WearDelta`, with the
uncertainty each source's counter granularity implies:

NVMe Data Units Written counts 512,000-byte units (1000 × 512 B), rounded up, as a running total.
If DUW moves by ΔD between two reads, the bytes written in between, b, satisfy
(ΔD − 1)·512,000 < b < (ΔD + 1)·512,000 (0 ≤ b when ΔD = 0): each end may hide up to one partial
unit. `duw_bytes_bounds(ΔD)` returns that open interval; `WearDelta.host_bytes` is the point value
ΔD × 512,000. FEMU's page counters, FDP's and psutil's byte counters are exact (zero width).
Intel's CAh counters are in 32 MiB units (± one unit).

`wear_rows` / `wear_table` turn samples into rows of the WEAR table (kvwear.harness.wear.schema.WEAR).
Nothing here parses tool output; that is the reader modules' job.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kvwear.errors import KvwearError
from kvwear.harness.wear._decode import ReaderUnavailable
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES, READERS, CommandRunner, WearSample, run_command
from kvwear.harness.wear.intel import INTEL_CA_UNIT_BYTES
from kvwear.harness.wear.schema import WEAR

# Host-byte granularity per source: bytes per counter step (0 = exact).
HOST_BYTES_QUANTUM: dict[str, int] = {
    "nvme-smart-json": NVME_DATA_UNIT_BYTES,
    "nvme-smart-binary": NVME_DATA_UNIT_BYTES,
    "smartctl": NVME_DATA_UNIT_BYTES,
    "intel-ca": INTEL_CA_UNIT_BYTES,
}
WEAR_PHASES = ("before", "after", "interval")


class CounterResetError(KvwearError):
    """A cumulative counter went backwards between two samples: the device (or emulator) was
    restarted or replaced, so the difference means nothing."""


def duw_bytes_bounds(delta_units: int) -> tuple[int, int]:
    """Open bounds (lo, hi) on the bytes written when Data Units Written moved by `delta_units`:
    lo < bytes < hi, except that bytes may equal lo = 0 when `delta_units` is 0."""
    if delta_units < 0:
        raise ValueError(f"Data Units Written cannot decrease (delta {delta_units})")
    return max(0, (delta_units - 1) * NVME_DATA_UNIT_BYTES), (delta_units + 1) * NVME_DATA_UNIT_BYTES


@dataclass(frozen=True)
class WearDelta:
    """What happened between two samples of one source. None where the source lacks the counter."""

    source: str
    host_bytes: int | None
    host_bytes_bounds: tuple[int, int] | None     # (lo, hi) of the true host bytes, see module doc
    nand_bytes: int | None
    data_units: int | None
    host_write_commands: int | None
    percentage_used: float | None

    @property
    def waf(self) -> float | None:
        """NAND bytes / host bytes, when this source has both and host bytes moved."""
        if self.nand_bytes is None or not self.host_bytes:
            return None
        return self.nand_bytes / self.host_bytes


def _diff(name: str, source: str, a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return None
    if b < a:
        raise CounterResetError(f"{source}: {name} went from {a} to {b}: device restarted between samples?")
    return b - a


def delta(before: WearSample, after: WearSample) -> WearDelta:
    """after − before for one source (both must be supported samples of that source)."""
    if before.source != after.source:
        raise KvwearError(f"cannot difference samples of {before.source!r} and {after.source!r}")
    src = before.source
    for s in (before, after):
        if not s.supported:
            raise KvwearError(f"{src}: sample is unsupported ({s.note})")
    host = _diff("host_bytes_written", src, before.host_bytes_written, after.host_bytes_written)
    units = _diff("data_units_written", src, before.data_units_written, after.data_units_written)
    bounds: tuple[int, int] | None = None
    if host is not None:
        q = HOST_BYTES_QUANTUM.get(src, 0)
        if q == NVME_DATA_UNIT_BYTES and units is not None:
            bounds = duw_bytes_bounds(units)
        else:
            bounds = (max(0, host - q), host + q)
    pu = None
    if before.percentage_used is not None and after.percentage_used is not None:
        pu = after.percentage_used - before.percentage_used
    return WearDelta(
        source=src,
        host_bytes=host,
        host_bytes_bounds=bounds,
        nand_bytes=_diff("nand_bytes_written", src, before.nand_bytes_written, after.nand_bytes_written),
        data_units=units,
        host_write_commands=_diff("host_write_commands", src, before.host_write_commands,
                                  after.host_write_commands),
        percentage_used=pu,
    )


def snapshot(device_path: str, readers: Sequence[str],
             runner: CommandRunner = run_command) -> list[WearSample]:
    """One sample per reader name, in order. Unknown names fail before anything runs. A reader
    the device or host does not support (tool refusal, missing tool, not that kind of device)
    gives an unsupported sample carrying the message; malformed output raises InputError."""
    funcs = [(name, READERS.get(name)) for name in readers]
    out: list[WearSample] = []
    for name, read in funcs:
        try:
            sample = read(device_path, runner)
        except ReaderUnavailable as exc:
            sample = WearSample(source=name, supported=False, note=str(exc))
        except subprocess.CalledProcessError as exc:
            msg = (exc.stderr or exc.output or b"").decode(errors="replace").strip()
            argv = " ".join(map(str, exc.cmd)) if isinstance(exc.cmd, list | tuple) else str(exc.cmd)
            sample = WearSample(source=name, supported=False,
                                note=f"{argv}: exit status {exc.returncode}: {msg or 'no message'}")
        except FileNotFoundError as exc:
            # subprocess's way of saying the executable is not installed
            sample = WearSample(source=name, supported=False, note=f"not found: {exc.filename or exc}")
        out.append(sample)
    return out


def wear_rows(samples: Sequence[WearSample], t_s: float, phase: str,
              policy: str | None = None) -> list[dict[str, Any]]:
    """WEAR-table rows for one snapshot. An unsupported sample keeps its row (null counters, the
    refusal in `raw`) so the table shows which sources were tried."""
    if phase not in WEAR_PHASES:
        raise ValueError(f"phase must be one of {', '.join(WEAR_PHASES)}, got {phase!r}")
    return [
        {
            "t_s": float(t_s), "phase": phase, "policy": policy, "source": s.source,
            "host_bytes_written": s.host_bytes_written, "nand_bytes_written": s.nand_bytes_written,
            "percentage_used": s.percentage_used, "data_units_written": s.data_units_written,
            "raw": s.raw if s.supported else f"unsupported: {s.note}",
        }
        for s in samples
    ]


def wear_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Rows (from `wear_rows`, any number of snapshots) as a WEAR table ready for write_table."""
    return WEAR.conform(pa.Table.from_pylist(list(rows), schema=WEAR.schema))
