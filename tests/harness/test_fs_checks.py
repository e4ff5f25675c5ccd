"""The file-layout identities (kvwear.harness.estimate.fs_checks) on typed records: no root, no device."""

from __future__ import annotations

import dataclasses

from kvwear.harness.devices.measurement import BlockDelta, CaptureCount, FileSystemCount
from kvwear.harness.estimate.estimator import Check
from kvwear.harness.estimate.fs_checks import fs_checks
from kvwear.harness.plan.files import FilePlanCounts

BLOCK = BlockDelta(write_bytes=1 << 20, write_ios=300, read_bytes=0, read_ios=0, discard_bytes=0, discard_ios=0,
                   flush_ios=10)


def files(file_write_bytes: int = 700_000, **kw: object) -> FileSystemCount:
    base: dict[str, object] = dict(
        filesystem="ext4", discard="none", fsync=True, fstrim_interval_s=None, mkfs_command="mkfs.ext4",
        mount_options="nodiscard", fs_tools="mke2fs", kernel="6.1", object_write_bytes=700_000,
        file_write_bytes=file_write_bytes, file_read_bytes=0, write_calls=10, files_created=10,
        files_unlinked=0, unlinked_bytes=0, fsyncs=10, end_files=10, end_file_bytes=700_000, fstrims=0,
        fstrim_bytes=0, block=BLOCK, mkfs_block=BLOCK, overhead_bytes=BLOCK.write_bytes - file_write_bytes)
    base.update(kw)
    return FileSystemCount(**base)  # type: ignore[arg-type]


def capture(write_bytes: int, lost: int = 0, drained: bool = True) -> CaptureCount:
    return CaptureCount("bcc", 300, lost, {"write": write_bytes}, {"write": 300}, 0, 0, drained, "t.parquet")


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_lossy_capture_and_a_byte_short_player_fail_loudly() -> None:
    good = by_name(fs_checks(files(), capture=capture(BLOCK.write_bytes)))
    assert all(c.passed for c in good.values()), good
    assert "capture write bytes = device counters" in good
    # one byte short at the player, and a capture that lost events although its bytes agree
    got = by_name(fs_checks(files(699_999), capture=capture(BLOCK.write_bytes, lost=4)))
    assert not got["file bytes = object bytes"].passed
    cap = got["capture write bytes = device counters"]
    assert not cap.passed and "lost up to 4 events" in cap.note
    assert not got["capture discard bytes = device counters"].passed
    # a capture that was not drained fails too; a whole capture one byte short fails at tolerance 0
    undrained = by_name(fs_checks(files(), capture=capture(BLOCK.write_bytes, drained=False)))
    assert not undrained["capture write bytes = device counters"].passed
    short = by_name(fs_checks(files(), capture=capture(BLOCK.write_bytes - 1)))
    assert not short["capture write bytes = device counters"].passed


PLAN = FilePlanCounts(object_write_bytes=700_000, read_bytes=70_000, unlink_bytes=0, rewrite_bytes=0, ssd_ops=22,
                      writes=10, creates=10, empty_writes=0, rewrites=0, reads=1, unlinks=0, read_misses=0,
                      evict_misses=0, peak_live_bytes=700_000, peak_files=10, end_live_bytes=700_000, end_files=10,
                      write_calls=10, capacity_bytes=1 << 30)


def test_every_player_count_is_the_plans() -> None:
    """Each counter the player keeps is checked against the plan at tolerance 0: one off fails."""
    whole = files(file_read_bytes=70_000)
    assert all(c.passed for c in fs_checks(whole, PLAN)), fs_checks(whole, PLAN)
    for field, check in [("file_read_bytes", "file read bytes = plan read bytes"),
                         ("files_unlinked", "files unlinked = plan unlinks"),
                         ("write_calls", "write calls = plan write calls"),
                         ("files_created", "files created = plan creates"),
                         ("fsyncs", "fsyncs = plan writes"),
                         ("end_files", "files left at unmount = plan end files")]:
        off = dataclasses.replace(whole, **{field: getattr(whole, field) + 1})
        got = by_name(fs_checks(off, PLAN))
        assert not got[check].passed, field
        assert [c.name for c in got.values() if not c.passed] == [check]
    # without fsync, no fsync is expected
    assert "fsyncs = plan writes" not in by_name(fs_checks(dataclasses.replace(whole, fsync=False, fsyncs=0), PLAN))
