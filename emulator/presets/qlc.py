"""Preset `qlc`: a high-capacity data-center QLC drive (7.68 TB, Intel/Solidigm D5-P4320 class).

- Reclaim unit 17,439,916,032 bytes = 4/3 × enterprise-tlc's: a QLC cell stores 4 bits where TLC
  stores 3, so a superblock of the same structure (one block on each plane of each die) holds 4/3 as
  much. No QLC drive's reclaim unit size was found published; this is a derivation, not a
  measurement (docs/design/drive-presets.md).
- Pages of 4 KiB (the FTL's mapping unit; some QLC drives map 16–64 KiB, which this preset does not model).
- OP 14.53 %: 8 TiB of NAND behind 7.68 TB, the same binary-to-decimal ratio as enterprise-tlc.
- GC: greedy, on demand, one free unit in reserve, relocations in a unit of their own (as enterprise-tlc).
- Rated: 1,600 P/E cycles and 0.9 DWPD for sequential writes (0.2 for random 4 KiB) — Intel's rating
  of the D5-P4320 7.68 TB; a 5-year period assumed (the data-center norm).
"""

from dataclasses import replace

from kvwear.emulator.presets import PRESETS, DriveRatings
from kvwear.emulator.presets.enterprise_tlc import ENTERPRISE_TLC

# enterprise-tlc's structure (4 KiB pages, greedy GC with its own relocation unit, the same
# binary-to-decimal OP: 8 TiB / 7.68 TB = 4 TiB / 3.84 TB) with 4/3 of its unit and QLC's ratings
PRESETS.add("qlc", replace(
    ENTERPRISE_TLC,
    name="qlc",
    summary="7.68 TB data-center QLC (D5-P4320 class): 17.44 GB reclaim units, 14.5 % OP, 1,600 P/E",
    source_drive="Intel D5-P4320 7.68 TB (ratings); unit derived from enterprise-tlc's",
    capacity_bytes=7_680_000_000_000,
    pages_per_block=ENTERPRISE_TLC.pages_per_block * 4 // 3,
    ratings=DriveRatings(rated_pe_cycles=1600, dwpd=0.9, warranty_years=5.0,
                         dwpd_workload="sequential writes (0.2 DWPD for random 4 KiB)",
                         source="Intel D5-P4320 7.68 TB: 1,600 P/E, 0.9 DWPD sequential"),
))
