"""Preset `enterprise-tlc`: a 3.84 TB data-center TLC NVMe drive (Samsung PM9D3a class, FDP capable).

- Reclaim unit 13,079,937,024 bytes: the Reclaim Unit Nominal Size a PM9D3a 3.84 TB (MZOL63T8HDLT)
  reports in its FDP configuration (`nvme fdp configs`), = 3,193,344 pages of 4 KiB. GC erases one
  such superblock at a time; how it splits into dies, planes and blocks is not public, so the unit is
  one "block" here (it only changes the per-block erase count).
- Pages of 4 KiB: the namespace's LBA format (lbads 12) and the FTL's mapping unit.
- OP 14.53 %: 4 TiB of NAND behind 3.84 TB of user capacity, the read-intensive (1 DWPD) class's
  ratio (1024 GiB behind 960 GB in Kingston's table); parity and metadata the drive keeps inside it
  are not public and not subtracted, so this is the OP's upper bound.
- GC: greedy victim (fewest valid pages), on demand with one free unit in reserve, relocated pages
  written to an open unit of their own, apart from host writes (the practice of separating relocate
  writes from user writes, e.g. IBM's US 10,579,270 B2). The firmware's rule is not public; these are
  kvwear's choices, each an option (victim=…, reserve_lines=…, separate_gc_line=false).
- Rated: 1 DWPD over the 5-year warranty (TBW 7,008 TB at 3.84 TB; PM9D3a datasheet class rating);
  3,000 P/E cycles, the low end of the 3,000–5,000 cited for TLC (vendors do not publish per-drive P/E).
Sources and links: docs/design/drive-presets.md.
"""

from kvwear.emulator.presets import PRESETS, DrivePreset, DriveRatings

ENTERPRISE_TLC = DrivePreset(
    name="enterprise-tlc",
    summary="3.84 TB data-center TLC (PM9D3a class): 13.08 GB reclaim units, 14.5 % OP, greedy GC, 1 DWPD × 5 y",
    source_drive="Samsung PM9D3a 3.84 TB (MZOL63T8HDLT)",
    capacity_bytes=3_840_000_000_000,
    page_bytes=4096,
    pages_per_block=13_079_937_024 // 4096,
    op_ratio=4 * 2**40 / 3_840_000_000_000 - 1.0,
    gc_mode="block",
    victim="greedy",
    separate_gc_line=True,
    reserve_units=1,
    ratings=DriveRatings(rated_pe_cycles=3000, dwpd=1.0, warranty_years=5.0,
                         dwpd_workload="datasheet rating (JEDEC enterprise workload)",
                         source="Samsung PM9D3a 3.84 TB: 1 DWPD, 5 years; TLC 3,000 P/E"),
)
PRESETS.add("enterprise-tlc", ENTERPRISE_TLC)
