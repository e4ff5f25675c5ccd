"""Preset `tiny-blocks`: the embedded FTL's historical default, for tests and small runs.

Blocks of 64 × 4 KiB = 256 KiB, each its own reclaim unit, 7 % OP, greedy GC on demand with two free
blocks in reserve. No real data-center drive has units this small (their superblocks are hundreds of
MB to GB: docs/design/drive-presets.md); it stays because it scales to any capacity (tests use
drives of a few MiB) and reproduces the results kvwear measured before presets existed. No rated
endurance: a run on it keeps the configured (or default) ratings.
"""

from kvwear.emulator.presets import PRESETS, DrivePreset

PRESETS.add("tiny-blocks", DrivePreset(
    name="tiny-blocks",
    summary="256 KiB blocks, 7 % OP, greedy GC: the FTL's pre-preset default (tests, small drives)",
    source_drive="kvwear's embedded FTL default (FtlConfig.block_level)",
    capacity_bytes=None,
    page_bytes=4096,
    pages_per_block=64,
    op_ratio=0.07,
    gc_mode="block",
    victim="greedy",
    reserve_units=2,
))
