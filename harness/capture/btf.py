"""Read struct member offsets and enum values from the running kernel's BTF (/sys/kernel/btf/vmlinux).

The bcc tracer attaches to raw tracepoints, whose argument is the kernel's `struct request *`
itself, not the tracepoint's formatted record: cheaper (the kernel formats nothing) and without
the shared per-CPU recursion guard of classic tracepoints (see kvwear.harness.capture.bcc). Reading
the request's fields needs their offsets in *this* kernel; the headers bcc compiles against may be
another version's (Debian's 6.1 headers on a 6.18 kernel here), so the offsets come from the
kernel's own type information and are passed to the BPF program as constants.

`parse_btf` reads the format (include/uapi/linux/btf.h: a header, the type records in id order,
a string section) into name → struct members and enum values; `member_offset` follows a dotted
path. Pure over bytes; `kernel_btf` reads the file. It must not guess: a struct, member or enum
value the kernel does not have raises `BtfError` naming it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from kvwear.errors import KvwearError

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
_MAGIC = 0xEB9F
# kinds (btf.h BTF_KIND_*) and the bytes each record carries after its 12-byte btf_type
_INT, _PTR, _ARRAY, _STRUCT, _UNION, _ENUM, _FWD, _TYPEDEF, _VOLATILE, _CONST, _RESTRICT = range(1, 12)
_FUNC, _FUNC_PROTO, _VAR, _DATASEC, _FLOAT, _DECL_TAG, _TYPE_TAG, _ENUM64 = range(12, 20)
_FIXED_EXTRA = {_INT: 4, _ARRAY: 12, _VAR: 4, _DECL_TAG: 4}
_PER_MEMBER = {_STRUCT: 12, _UNION: 12, _ENUM: 8, _FUNC_PROTO: 8, _DATASEC: 12, _ENUM64: 12}
_MODIFIERS = (_TYPEDEF, _VOLATILE, _CONST, _RESTRICT, _TYPE_TAG)


class BtfError(KvwearError):
    """The kernel's BTF is missing, malformed, or lacks a type the tracer needs."""


@dataclass(frozen=True)
class Member:
    """A struct or union member: its byte offset and the id of its type."""

    offset_bytes: int
    type_id: int


@dataclass(frozen=True)
class Btf:
    """The structs and unions kept (name → member name → Member; an anonymous one under
    `<anon#ID>`), the enum values (enumerator name → value, every enum merged: enumerator names
    are global in C), each type id's kind and referenced type, and the kept structs' ids."""

    structs: dict[str, dict[str, Member]]
    enum_values: dict[str, int]
    kind: list[int]
    ref: list[int]
    struct_ids: dict[int, str]
    tracepoints: dict[str, int] = field(default_factory=dict)      # raw tracepoint → its FUNC_PROTO id
    params: dict[int, tuple[int, ...]] = field(default_factory=dict)  # FUNC_PROTO id → its param type ids

    def tracepoint_args(self, name: str) -> tuple[str | None, ...]:
        """The struct each argument of raw tracepoint `name` points to (None: not a struct
        pointer), from the kernel's `btf_trace_<name>` typedef; its first parameter (the probe's
        private data) is left out."""
        if name not in self.tracepoints:
            raise BtfError(f"BTF: no raw tracepoint {name} (no btf_trace_{name}) in this kernel")
        out: list[str | None] = []
        for t in self.params[self.tracepoints[name]][1:]:
            out.append(self.struct_of(self.ref[t]) if self.kind[t] == _PTR else None)
        return tuple(out)

    def struct_of(self, type_id: int) -> str | None:
        """The kept struct a type id names, through typedefs and qualifiers."""
        for _ in range(16):
            k = self.kind[type_id]
            if k in (_STRUCT, _UNION):
                return self.struct_ids.get(type_id)
            if k not in _MODIFIERS:
                return None
            type_id = self.ref[type_id]
        return None


def parse_btf(data: bytes, wanted: frozenset[str] | None = None) -> Btf:
    """The structs (only those named in `wanted`, when given, and the anonymous ones, which a
    member path may go through) and every enum value of a BTF blob."""
    if len(data) < 24:
        raise BtfError("BTF: shorter than its header")
    magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<HBBIIIII", data)
    if magic != _MAGIC:
        raise BtfError(f"BTF: bad magic {magic:#x} (big-endian BTF is not read)")
    types = memoryview(data)[hdr_len + type_off: hdr_len + type_off + type_len]
    strings = data[hdr_len + str_off: hdr_len + str_off + str_len]

    def name(off: int) -> str:
        end = strings.index(b"\0", off)
        return strings[off:end].decode()

    kind = [0]
    ref = [0]
    structs: dict[str, dict[str, Member]] = {}
    ids: dict[int, str] = {}
    enums: dict[str, int] = {}
    typedefs: dict[int, str] = {}         # type id → raw tracepoint, for btf_trace_* typedefs
    protos: dict[int, tuple[int, ...]] = {}
    pos = 0
    unpack = struct.unpack_from
    while pos < len(types):
        name_off, info, size_or_type = unpack("<III", types, pos)
        pos += 12
        k = (info >> 24) & 0x1F
        vlen = info & 0xFFFF
        kind.append(k)
        ref.append(size_or_type)
        if k in _PER_MEMBER:
            n = _PER_MEMBER[k] * vlen
            if k in (_STRUCT, _UNION):
                tid = len(kind) - 1
                sname = name(name_off) if name_off else f"<anon#{tid}>"
                if not name_off or wanted is None or sname in wanted:
                    bitfield = bool(info >> 31)
                    members = {}
                    for j in range(vlen):
                        m_name, m_type, m_off = unpack("<III", types, pos + 12 * j)
                        bits = m_off & 0xFFFFFF if bitfield else m_off
                        members[name(m_name) if m_name else f"<anon{j}>"] = Member(bits // 8, m_type)
                    structs.setdefault(sname, members)
                    ids[tid] = sname
            elif k == _FUNC_PROTO:
                protos[len(kind) - 1] = tuple(unpack(f"<{2 * vlen}I", types, pos)[1::2])
            elif k == _ENUM:
                for j in range(vlen):
                    e_name, val = unpack("<Ii", types, pos + 8 * j)
                    enums[name(e_name)] = val
            elif k == _ENUM64:
                for j in range(vlen):
                    e_name, lo, hi = unpack("<III", types, pos + 12 * j)
                    enums[name(e_name)] = lo | (hi << 32)
            pos += n
        else:
            if k == _TYPEDEF and name_off and strings.startswith(b"btf_trace_", name_off):
                typedefs[len(kind) - 1] = name(name_off)[len("btf_trace_"):]
            pos += _FIXED_EXTRA.get(k, 0)
        if k == 0 or k > _ENUM64:
            raise BtfError(f"BTF: unknown type kind {k} at type id {len(kind) - 1}")
    # btf_trace_X is a typedef of a pointer to the probe's FUNC_PROTO
    tps = {tp: ref[ref[t]] for t, tp in typedefs.items() if kind[ref[t]] == _PTR and kind[ref[ref[t]]] == _FUNC_PROTO}
    return Btf(structs, enums, kind, ref, ids, tps, {p: protos[p] for p in tps.values()})


def kernel_btf(wanted: frozenset[str] | None = None, path: Path = VMLINUX_BTF) -> Btf:
    """The running kernel's BTF (see `parse_btf`)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BtfError(f"{path}: cannot read the kernel's BTF ({exc.strerror}); the kernel needs "
                       "CONFIG_DEBUG_INFO_BTF=y") from None
    return parse_btf(data, wanted)


def member_offset(btf: Btf, struct_name: str, member: str) -> int:
    """The byte offset of `member` in `struct struct_name` (members of anonymous unions and
    structs inside it are found too)."""
    found = _find(btf, struct_name, member)
    if found is None:
        raise BtfError(f"BTF: struct {struct_name} has no member {member!r} in this kernel")
    return found


def _find(btf: Btf, struct_name: str, member: str, depth: int = 0) -> int | None:
    members = btf.structs.get(struct_name)
    if members is None:
        raise BtfError(f"BTF: no struct {struct_name} in this kernel")
    if member in members:
        return members[member].offset_bytes
    for key, m in members.items():
        if key.startswith("<anon") and depth < 4:
            inner = btf.struct_of(m.type_id)
            if inner is not None and inner in btf.structs:
                off = _find(btf, inner, member, depth + 1)
                if off is not None:
                    return m.offset_bytes + off
    return None


def enum_value(btf: Btf, enumerator: str) -> int:
    """The value of a C enumerator (e.g. REQ_OP_WRITE) in this kernel."""
    if enumerator not in btf.enum_values:
        raise BtfError(f"BTF: no enumerator {enumerator} in this kernel")
    return btf.enum_values[enumerator]
