"""Drive presets: named, sourced geometries of the embedded FTL (a plugin family).

A preset is one frozen `DrivePreset` record: the full drive's user capacity, its FTL's mapping unit
(`page_bytes`), its reclaim unit (what GC erases as one: a superblock of one block on each plane of
each die, which an FDP drive reports as its reclaim unit), its over-provisioning, its GC rule and its
rated endurance (`DriveRatings`: P/E cycles, warranty DWPD over years). Each preset is built in a
module of its own that adds it to PRESETS: a new preset is its module plus one line in PRESETS'
module list. docs/design/drive-presets.md gives every number's public source.

Scaling (`DrivePreset.scale`): a run needs a drive of its own exposed capacity (the SSD tier's plan),
usually far smaller than the preset's drive. The preset keeps its unit size and uses fewer units:
block GC gets ⌈exposed·(1+OP)/unit⌉ data units with the GC reserve and the open unit(s) on top, as
`FtlConfig.block_level` builds it; line GC (FEMU) gets ⌈exposed·(1+OP)/unit⌉ lines with FEMU's
free-line thresholds, as `FtlConfig.femu` computes them. So the unit, the OP and the GC rule are the
drive's and only the count of units differs. Rounding to whole units raises the OP a run's drive
really has; `PresetScale` says by how much and how many units the drive holds, and its `note` is the
sentence the run prints and keeps.

Must not: read files, run the FTL, or know about runs and devices (the sim backend applies presets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvwear.emulator.ftl import FtlConfig, GcHandles, GcMode, Victim, _open_lines
from kvwear.errors import KvwearError
from kvwear.registry import Registry
from kvwear.units import format_bytes

# Below this many data units a scaled drive's GC is coarser than the full drive's (each GC run moves
# a large share of the drive) and the rounding to whole units shifts its OP: the note says so.
FEW_UNITS = 8


@dataclass(frozen=True)
class DriveRatings:
    """A drive's rated endurance, as its datasheet (or the cited source) gives it."""

    rated_pe_cycles: int | None        # program/erase cycles a block is rated for
    dwpd: float | None                 # warranty drive writes per day …
    warranty_years: float | None       # … over this many years
    dwpd_workload: str = ""            # what the DWPD rating was measured under (random 4 KiB, sequential)
    source: str = ""                   # the drive the ratings are of

    @property
    def tbw_bytes_per_capacity_byte(self) -> float | None:
        """TBW ÷ capacity = DWPD × 365 × years (None without both)."""
        if self.dwpd is None or self.warranty_years is None:
            return None
        return self.dwpd * 365.0 * self.warranty_years


@dataclass(frozen=True)
class PresetScale:
    """How a preset's drive was scaled to a run's exposed capacity."""

    preset: str
    exposed_bytes: int
    unit_bytes: int
    units: int                         # reclaim units of the scaled drive (all: data, reserve, open)
    data_units: int                    # units GC can fill (block GC: units − reserve − open; line GC: all)
    op_ratio: float                    # the preset's OP
    op_effective: float                # the scaled drive's: data units' bytes ÷ exposed − 1
    full_capacity_bytes: int | None    # the preset's drive (None: a test geometry of any size)
    full_units: int | None

    @property
    def note(self) -> str:
        """One sentence for the run's summary and its directory."""
        unit = format_bytes(self.unit_bytes, False)
        out = (f"preset {self.preset}: {self.units:,} reclaim units of {unit} for "
               f"{format_bytes(self.exposed_bytes, False)} exposed ({self.data_units:,} for data), OP "
               f"{self.op_effective:.1%} (the preset's {self.op_ratio:.1%})")
        if self.full_capacity_bytes is not None and self.full_units is not None:
            out += (f"; scaled from the {format_bytes(self.full_capacity_bytes, False)} drive's "
                    f"{self.full_units:,} units of the same size")
        if self.data_units < FEW_UNITS:
            out += (f"; fewer than {FEW_UNITS} data units: GC reclaims a large share of the drive at once and "
                    "the rounding to whole units raises the OP, so WAF reads lower than on the full drive "
                    "(a larger SSD tier, or preset tiny-blocks, avoids it)")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "exposed_bytes": self.exposed_bytes, "unit_bytes": self.unit_bytes,
                "units": self.units, "data_units": self.data_units, "op_ratio": self.op_ratio,
                "op_effective": self.op_effective, "full_capacity_bytes": self.full_capacity_bytes,
                "full_units": self.full_units, "note": self.note}


@dataclass(frozen=True)
class FtlOptions:
    """Settings a run may change on any preset (None: the preset's own); the FDP and TRIM settings
    are the drive's configuration, not its geometry."""

    op_ratio: float | None = None
    victim: Victim | None = None
    reserve_lines: int | None = None
    page_bytes: int | None = None
    pages_per_block: int | None = None
    separate_gc_line: bool | None = None
    ruh: int = 1
    gc_handles: GcHandles = "per-handle"
    open_every_handle: bool = True
    honor_trim: bool = True
    interval_host_pages: int = 0


@dataclass(frozen=True)
class DrivePreset:
    """One named drive geometry for the embedded FTL (module docstring). Sizes are bytes and pages
    of `page_bytes` (the FTL's mapping unit, which is what a 4 KiB host write replaces)."""

    name: str
    summary: str                       # one line: the drive class it stands for
    source_drive: str                  # the drive (or simulator default) its numbers come from
    capacity_bytes: int | None         # the full drive's user capacity (None: a test geometry, any size)
    page_bytes: int
    pages_per_block: int               # pages of one erase block
    op_ratio: float                    # (physical − user) ÷ user capacity
    gc_mode: GcMode                    # "block": GC on demand, "line": FEMU's forced/background thresholds
    victim: Victim = "greedy"
    separate_gc_line: bool = False     # GC copies go to an open unit of their own, not the host's
    reserve_units: int = 2             # block GC: collect while free units ≤ this
    gc_thres_pcent: int = 75           # line GC: FEMU's background threshold (% of lines in use)
    gc_thres_pcent_high: int = 95      # line GC: FEMU's forced threshold
    ratings: DriveRatings | None = None
    # A reclaim unit is one block on every plane of every LUN (die) of every channel. Where a drive's
    # split is not public these stay 1 and `pages_per_block` is the whole unit (the FTL erases it as
    # one either way; only the per-block erase count differs).
    channels: int = 1
    luns_per_channel: int = 1
    planes_per_lun: int = 1

    def __post_init__(self) -> None:
        for f in ("page_bytes", "pages_per_block", "channels", "luns_per_channel", "planes_per_lun"):
            if getattr(self, f) <= 0:
                raise KvwearError(f"preset {self.name}: {f} must be > 0")
        if self.op_ratio < 0:
            raise KvwearError(f"preset {self.name}: op_ratio must be ≥ 0")

    @property
    def blocks_per_unit(self) -> int:
        return self.channels * self.luns_per_channel * self.planes_per_lun

    @property
    def unit_pages(self) -> int:
        return self.pages_per_block * self.blocks_per_unit

    @property
    def unit_bytes(self) -> int:
        return self.unit_pages * self.page_bytes

    def ftl_config(self, exposed_bytes: int, options: FtlOptions = FtlOptions()) -> FtlConfig:
        """The preset's drive scaled to `exposed_bytes` (module docstring), with `options` applied."""
        return self._scaled(exposed_bytes, options)[0]

    def scale(self, exposed_bytes: int, options: FtlOptions = FtlOptions()) -> PresetScale:
        """How the drive of `ftl_config(exposed_bytes, options)` relates to the preset's drive."""
        return self._scaled(exposed_bytes, options)[1]

    def _scaled(self, exposed_bytes: int, o: FtlOptions) -> tuple[FtlConfig, PresetScale]:
        if exposed_bytes <= 0:
            raise KvwearError(f"preset {self.name}: exposed capacity must be > 0, got {exposed_bytes}")
        page = o.page_bytes or self.page_bytes
        ppb = o.pages_per_block or self.pages_per_block
        op = self.op_ratio if o.op_ratio is None else o.op_ratio
        victim = o.victim or self.victim
        sep = self.separate_gc_line if o.separate_gc_line is None else o.separate_gc_line
        ppl = ppb * self.blocks_per_unit
        unit = ppl * page
        open_n = _open_lines(o.ruh, sep, o.gc_handles)
        if self.gc_mode == "line":
            devsz_mb = -(-exposed_bytes // 2**20)
            exposed_pages = devsz_mb * 2**20 // page
            # FEMU's lines hold everything (data, free-line reserve, open lines): the OP is their share
            lines = max(math.ceil(exposed_pages * (1.0 + op) / ppl - 1e-9), -(-exposed_pages // ppl) + open_n + 1)
            if page % 512 or 2**20 % page:
                raise KvwearError(f"preset {self.name}: line GC (FEMU) needs a page of whole 512-byte sectors "
                                  f"dividing 1 MiB, got {page}")
            cfg = FtlConfig.femu(
                devsz_mb, secsz=512, secs_per_pg=page // 512, pgs_per_blk=ppb, blks_per_pl=lines,
                pls_per_lun=self.planes_per_lun, luns_per_ch=self.luns_per_channel, nchs=self.channels,
                gc_thres_pcent=self.gc_thres_pcent, gc_thres_pcent_high=self.gc_thres_pcent_high, victim=victim,
                ruh=o.ruh, gc_handles=o.gc_handles,
                open_every_handle=o.open_every_handle, separate_gc_line=sep,
                honor_trim=o.honor_trim, interval_host_pages=o.interval_host_pages)
            data = lines
            full = (None if self.capacity_bytes is None
                    else math.ceil(self.capacity_bytes / page * (1.0 + self.op_ratio) / self.unit_pages - 1e-9))
        else:
            reserve = self.reserve_units if o.reserve_lines is None else o.reserve_lines
            cfg = FtlConfig.block_level(
                exposed_bytes, op, page_bytes=page, pages_per_block=ppb, blocks_per_line=self.blocks_per_unit,
                reserve_lines=reserve, victim=victim, separate_gc_line=sep, ruh=o.ruh,
                gc_handles=o.gc_handles, open_every_handle=o.open_every_handle, honor_trim=o.honor_trim,
                interval_host_pages=o.interval_host_pages)
            data = cfg.lines - reserve - open_n
            full = (None if self.capacity_bytes is None
                    else math.ceil(self.capacity_bytes / page * (1.0 + self.op_ratio) / self.unit_pages - 1e-9)
                    + self.reserve_units + _open_lines(1, self.separate_gc_line, "per-handle"))
        return cfg, PresetScale(
            preset=self.name, exposed_bytes=cfg.exposed_bytes, unit_bytes=unit, units=cfg.lines, data_units=data,
            op_ratio=op, op_effective=data * ppl / cfg.exposed_pages - 1.0,
            full_capacity_bytes=self.capacity_bytes, full_units=full)


# Modules that define presets. Adding a preset = its module + one line here.
PRESETS: Registry[DrivePreset] = Registry("drive preset", modules=[
    "kvwear.emulator.presets.tiny_blocks", "kvwear.emulator.presets.femu",
    "kvwear.emulator.presets.enterprise_tlc", "kvwear.emulator.presets.qlc"])


def preset(name: str) -> DrivePreset:
    """The preset registered as `name` (an unknown name lists the valid ones)."""
    return PRESETS.get(name)
