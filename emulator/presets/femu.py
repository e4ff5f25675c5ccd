"""Preset `femu`: FEMU's black-box SSD (bbssd) at its default geometry, with its line GC.

FEMU's `-device femu` defaults: 512-byte sectors × 8 = 4 KiB pages, 256 pages per block, 256 blocks
per plane, 1 plane per LUN, 8 LUNs per channel, 8 channels; a line is one block on every LUN (64
blocks, 64 MiB), 256 lines = 16 GiB of NAND. FEMU's hw/femu/scripts/run-blackbox.sh exposes 12 GiB
of it (devsz_mb=12288, "a default 25% overprovisioning ratio" of the NAND), so OP = 16/12 − 1 = 1/3.
GC: greedy line victim; background GC after a request while free lines ≤ 25 % of lines
(gc_thres_pcent=75) for victims with ≥ 1/8 invalid pages, forced GC before a write while free lines
≤ 5 % (gc_thres_pcent_high=95). FEMU models no endurance rating. Sources: docs/design/drive-presets.md.
"""

from kvwear.emulator.presets import PRESETS, DrivePreset

PRESETS.add("femu", DrivePreset(
    name="femu",
    summary="FEMU's black-box SSD defaults: 64 MiB lines on 8 channels × 8 LUNs, 1/3 OP, FEMU's line GC",
    source_drive="FEMU bbssd at 99ce4fb2 (hw/femu/femu.c property defaults; hw/femu/scripts/run-blackbox.sh)",
    capacity_bytes=12288 * 2**20,
    page_bytes=512 * 8,
    pages_per_block=256,
    channels=8,
    luns_per_channel=8,
    planes_per_lun=1,
    op_ratio=1 / 3,
    gc_mode="line",
    victim="greedy",
    gc_thres_pcent=75,
    gc_thres_pcent_high=95,
))
