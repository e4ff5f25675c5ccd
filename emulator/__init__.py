"""Emulator: the embedded FTL emulator (the default `sim` device) and QEMU/FEMU guest control.

Must not hold analysis (lifetime estimation, reports).
"""
