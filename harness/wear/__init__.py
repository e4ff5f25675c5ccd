"""Wear-counter readers: SMART, NVMe logs, vendor logs, FEMU vendor bytes, psutil.

`kvwear.harness.wear.base.READERS` lists the modules of the readers it holds:
nvme-smart-json, nvme-smart-binary, smartctl, femu-vendor, femu-stats, ocp-c0, ocp-c0-binary, intel-ca, fdp,
psutil. `kvwear.harness.wear.snapshot` takes and differences snapshots.
"""
