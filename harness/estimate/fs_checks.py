"""The identities of a file-layout replay, one level per check: object bytes → file bytes → block
bytes (the device's counters and the eBPF capture) → NAND bytes (the block trace on the embedded FTL).

Each is an accounting `Check` (kvwear.harness.estimate.estimator): a failure is lost or extra I/O,
a fault of the player, the capture or the FTL replay, never a finding about the file system.
Tolerances, and why:
- file bytes = object bytes, tolerance 0: the player's write() calls return what they wrote and it
  writes every planned byte (a short write is retried, an error stops the run);
- unlinked file bytes = the plan's unlink bytes, bytes and files left at unmount = the plan's live
  bytes and files at its end, tolerance 0: the player unlinks what the plan evicts and leaves what
  it keeps;
- the player's counts of operations = the plan's, tolerance 0: bytes read, files unlinked, write()
  calls (the plan counts them at the write size it carries, which the player writes in), files
  created (a write of a file not there), and with fsync on one fsync per planned write;
- block write bytes ≥ file bytes (fsync on) or ≥ the bytes left at unmount (fsync off): a lower
  bound, one-sided. A file fsync'ed reached the device; without fsync a file unlinked before the
  kernel wrote it back never does (its bytes are then file-system "savings", a negative overhead),
  but everything still in place is written back by the unmount;
- with discard=none the device received no discard, tolerance 0 (the mount honoured the option);
- the capture's write and discard bytes = the device's own counters over the same window,
  tolerance 0: both count the same requests (the capture at issue, the counters at completion;
  the unmount waits for every completion). A capture that lost events or did not drain fails
  both checks whatever its counts, with a note (estimator.capture_check), as on the block path;
- NAND level (`sim`): the FTL's host bytes = the pages the trace's writes cover × page size,
  tolerance 0 (a partially covered page is a whole page, kvwear.harness.devices.sim).

Must not: run anything or read files; it compares typed records.
"""

from __future__ import annotations

import math

from kvwear.harness.devices.measurement import CaptureCount, FileSystemCount, MediaCount
from kvwear.harness.estimate.estimator import Check, CheckKind, capture_check
from kvwear.harness.plan.files import FilePlanCounts


def at_least(name: str, bound: float, measured: float, source: str, note: str) -> Check:
    """A one-sided accounting check: `measured` ≥ `bound` (rel_error: the shortfall's share)."""
    short = max(0.0, bound - measured)
    rel = short / bound if bound else (0.0 if short == 0 else math.inf)
    return Check(name, float(bound), float(measured), source, 0.0, rel, measured >= bound, "accounting", note)


def fs_checks(files: FileSystemCount, plan: FilePlanCounts | None = None, capture: CaptureCount | None = None,
              nand: MediaCount | None = None, nand_expected_host_bytes: int | None = None) -> list[Check]:
    """The file-layout identities (module docstring) that the records at hand allow."""
    acc: CheckKind = "accounting"
    out = [Check.of("file bytes = object bytes", files.object_write_bytes, files.file_write_bytes,
                    "fs-player write()", 0.0, kind=acc)]
    if plan is not None:
        # (name, the plan's count, the player's, where the player counted it), each exact
        same = [("plan object bytes at the player", plan.object_write_bytes, files.object_write_bytes, "fs-player"),
                ("unlinked bytes = plan unlink bytes", plan.unlink_bytes, files.unlinked_bytes, "fs-player unlink"),
                ("bytes left at unmount = plan end", plan.end_live_bytes, files.end_file_bytes, "fs-player stat"),
                ("files left at unmount = plan end files", plan.end_files, files.end_files, "fs-player listdir"),
                ("file read bytes = plan read bytes", plan.read_bytes, files.file_read_bytes, "fs-player read()"),
                ("files unlinked = plan unlinks", plan.unlinks, files.files_unlinked, "fs-player unlink"),
                # the plan counts write() calls at the write size it carries, which the player writes in
                ("write calls = plan write calls", plan.write_calls, files.write_calls, "fs-player write()"),
                ("files created = plan creates", plan.creates, files.files_created, "fs-player open(O_CREAT)")]
        if files.fsync:
            same.append(("fsyncs = plan writes", plan.writes, files.fsyncs, "fs-player fsync()"))
        out += [Check.of(name, want, got, source, 0.0, kind=acc) for name, want, got, source in same]
    if files.fsync:
        out.append(at_least("block bytes ≥ file bytes (fsync)", files.file_write_bytes, files.block.write_bytes,
                            "diskstats", "every fsync'ed byte reached the device"))
    else:
        out.append(at_least("block bytes ≥ bytes left at unmount", files.end_file_bytes, files.block.write_bytes,
                            "diskstats", "without fsync, files unlinked before writeback never reach it"))
    if files.discard == "none":
        out.append(Check.of("no discard without discard", 0, files.block.discard_bytes, "diskstats", 0.0, kind=acc))
    if capture is not None:     # a capture that lost events fails both, with a note (capture_check)
        out += [
            capture_check("capture write bytes = device counters", files.block.write_bytes, capture.write_bytes,
                          capture, 0.0),
            capture_check("capture discard bytes = device counters", files.block.discard_bytes,
                          capture.discard_bytes, capture, 0.0),
        ]
    if nand is not None and nand_expected_host_bytes is not None:
        out.append(Check.of("FTL host bytes = trace pages", nand_expected_host_bytes, nand.host_bytes,
                            nand.source, 0.0, kind=acc, note="a partially covered page counts whole"))
    return out
