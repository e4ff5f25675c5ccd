"""Wear-counter readers: SMART, NVMe logs, vendor logs, FEMU vendor bytes, psutil.

Importing the package registers every reader in `harness.wear.base.READERS`:
nvme-smart-json, nvme-smart-binary, smartctl, femu-vendor, femu-stats, ocp-c0, ocp-c0-binary, intel-ca, fdp,
psutil. `harness.wear.snapshot` takes and differences snapshots.
"""

from harness.wear import fdp, femu, intel, nvme_smart, ocp, psutil_disk, smartctl  # noqa: F401  (registration)
