"""kvwear.harness.capture.btf: member offsets (through anonymous unions), enum values and raw
tracepoint prototypes from a BTF blob built here by hand, and from the running kernel's BTF."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kvwear.harness.capture.btf import VMLINUX_BTF, BtfError, enum_value, kernel_btf, member_offset, parse_btf


def _blob() -> bytes:
    strings = bytearray(b"\0")

    def s(text: str) -> int:
        off = len(strings)
        strings.extend(text.encode() + b"\0")
        return off

    def t(name: int, kind: int, vlen: int, size_or_type: int, kind_flag: int = 0) -> bytes:
        return struct.pack("<III", name, (kind_flag << 31) | (kind << 24) | vlen, size_or_type)

    types = b"".join([
        t(s("int"), 1, 0, 4) + struct.pack("<I", 32),                        # 1 int
        t(s("gendisk"), 4, 2, 8) + struct.pack("<III", s("major"), 1, 0) + struct.pack("<III", s("first_minor"), 1, 32),
        t(0, 2, 0, 2),                                                         # 3 struct gendisk *
        t(0, 5, 1, 8) + struct.pack("<III", s("disk"), 3, 0),                 # 4 anonymous union { disk }
        t(s("request_queue"), 4, 2, 120) + struct.pack("<III", s("pad"), 1, 0) + struct.pack("<III", 0, 4, 832),
        t(s("req_op"), 6, 2, 4) + struct.pack("<Ii", s("REQ_OP_READ"), 0) + struct.pack("<Ii", s("REQ_OP_WRITE"), 1),
        # 7 struct request with a bitfield member (kind_flag: offset bits 0-23, size 24-31)
        t(s("request"), 4, 2, 64, kind_flag=1) + struct.pack("<III", s("q"), 8, 0)
        + struct.pack("<III", s("flags"), 1, (3 << 24) | 200),
        t(0, 2, 0, 5),                                                         # 8 struct request_queue *
        t(0, 2, 0, 7),                                                         # 9 struct request *
        t(0, 13, 2, 0) + struct.pack("<II", 0, 0) + struct.pack("<II", 0, 9),  # 10 void (void *, struct request *)
        t(0, 2, 0, 10),                                                        # 11 pointer to it
        t(s("btf_trace_block_rq_issue"), 8, 0, 11),                            # 12 its typedef
    ])
    hdr = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
    return hdr + types + bytes(strings)


def test_offsets_enums_and_tracepoint_args_from_a_blob() -> None:
    btf = parse_btf(_blob(), frozenset({"gendisk", "request_queue", "request"}))
    assert member_offset(btf, "gendisk", "first_minor") == 4
    assert member_offset(btf, "request_queue", "disk") == 104          # 832 bits, through the anonymous union
    assert member_offset(btf, "request", "flags") == 25                # a bitfield's bit offset 200
    assert enum_value(btf, "REQ_OP_WRITE") == 1
    assert btf.tracepoint_args("block_rq_issue") == ("request",)
    with pytest.raises(BtfError, match="no member 'sector'"):
        member_offset(btf, "request", "sector")
    with pytest.raises(BtfError, match="no struct bio"):
        member_offset(btf, "bio", "bi_iter")
    with pytest.raises(BtfError, match="no enumerator REQ_OP_ZONE_OPEN"):
        enum_value(btf, "REQ_OP_ZONE_OPEN")
    with pytest.raises(BtfError, match="no raw tracepoint block_rq_complete"):
        btf.tracepoint_args("block_rq_complete")


def test_bad_blobs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BtfError, match="bad magic"):
        parse_btf(b"\0" * 32)
    with pytest.raises(BtfError, match="shorter than its header"):
        parse_btf(b"\x9f\xeb")
    with pytest.raises(BtfError, match="cannot read the kernel's BTF"):
        kernel_btf(path=tmp_path / "absent")


@pytest.mark.skipif(not VMLINUX_BTF.exists(), reason="the kernel exposes no BTF")
def test_the_running_kernels_block_layer() -> None:
    btf = kernel_btf(frozenset({"request", "request_queue", "gendisk"}))
    for tp in ("block_rq_issue", "block_rq_requeue", "block_rq_complete"):
        assert btf.tracepoint_args(tp)[0] == "request"
    assert member_offset(btf, "request", "q") == 0                     # the first member since 2.6
    offs = {m: member_offset(btf, "request", m) for m in ("cmd_flags", "__data_len", "__sector")}
    assert len(set(offs.values())) == 3 and all(0 < o < 256 for o in offs.values())
    assert enum_value(btf, "REQ_OP_READ") == 0 and enum_value(btf, "REQ_OP_WRITE") == 1
