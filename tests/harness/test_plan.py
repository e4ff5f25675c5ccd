"""The replayer: placement properties, byte identities, splitting, time modes, errors; end to end
through the `sim` device."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.errors import InputError
from kvwear.harness.devices.base import DeviceSpec, open_device
from kvwear.harness.devices.sim import SimDevice
from kvwear.harness.plan.planner import BlockPlan, ReplayConfig, plan_block_ops
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.policies.schema import SSD_OPS

PAGE = 4096


def ssd_ops(rows: list[tuple[str, int, int]], t: list[float] | None = None) -> pa.Table:
    n = len(rows)
    return SSD_OPS.conform(pa.table({
        "t_s": t if t is not None else [float(i) for i in range(n)],
        "op": [r[0] for r in rows],
        "obj_id": pa.array([r[1] for r in rows], pa.int64()),
        "obj_kind": ["full" if r[1] % 2 else "linear" for r in rows],
        "bytes": pa.array([r[2] for r in rows], pa.int64()),
        "session_id": pa.nulls(n, pa.string()),
        "cause": ["test"] * n,
    }))


def replay_pages(plan: BlockPlan, capacity: int, layout: str, log_evicts: bool = False,
                 rows: list[tuple[str, int, int]] | None = None) -> None:
    """Walk block_ops page by page: writes land only on free pages or the object's own (with
    `log_evicts`, a live object the head overwrites dies and is never read or trimmed again), reads
    and trims touch only their own object's pages, nothing leaves [0, capacity). A run of write rows
    of one object is one placement: it starts by releasing the object's old copy (a rewrite or a
    relocation frees it, trimmed or not; a relocation reads first, so a run is one ssd_ops row). With
    the ssd_ops `rows` (t_s = row index), an evict frees its object's pages when no trim did."""
    owner = np.full(capacity // PAGE, -1, np.int64)
    pages_of: dict[int, set[int]] = {}
    dead: set[int] = set()
    t = plan.table
    ops = t.column("op").to_pylist()
    offs = t.column("offset_bytes").to_pylist()
    lens = t.column("length_bytes").to_pylist()
    oids = t.column("obj_id").to_pylist()
    ts = t.column("t_s").to_pylist()
    prev: tuple[str, int, float] | None = None
    j = 0
    for op, off, ln, o, at in zip(ops, offs, lens, oids, ts, strict=True):
        while rows is not None and j < at:
            if rows[j][0] == "evict":
                for q in pages_of.pop(rows[j][1], set()):
                    owner[q] = -1
            j += 1
        assert off >= 0 and off + ln <= capacity and ln > 0
        assert off % PAGE == 0 and ln % PAGE == 0
        pages = range(off // PAGE, (off + ln) // PAGE)
        if op == "write":
            if prev != ("write", o, at):
                for q in pages_of.pop(o, set()):
                    owner[q] = -1
            for p in pages:
                v = owner[p]
                if v >= 0 and v != o:
                    assert log_evicts, f"{layout}: write of {o} overlaps live object {v}"
                    for q in pages_of.pop(int(v)):
                        owner[q] = -1
                    dead.add(int(v))
            dead.discard(o)
            for p in pages:
                owner[p] = o
            pages_of.setdefault(o, set()).update(pages)
        else:
            assert o not in dead, f"{op} of object {o} the log head already overwrote"
            for p in pages:
                assert owner[p] == o, f"{op} of {o} touches page {p} owned by {owner[p]}"
            if op == "trim":
                for p in pages:
                    owner[p] = -1
                pages_of[o] -= set(pages)
        prev = (op, o, at)


def layout_must_fit(rows: list[tuple[str, int, int]], cap: int, layout: str, slab_bytes: int) -> int | None:
    """The first write row (0-based) where the layout may fail: the live aligned bytes exceed the
    device, or (slab) the live slots of every class, each rounded up to whole slabs, exceed the
    slabs the device holds (classes = the distinct aligned sizes, default_slab_classes)."""
    live: dict[int, int] = {}
    for i, (op, o, b) in enumerate(rows):
        a = -(-b // PAGE) * PAGE
        if op in ("write", "evict"):
            live.pop(o, None)
        if op != "write" or a == 0:
            continue
        live[o] = a
        if sum(live.values()) > cap:
            return i
        if layout == "slab":
            per_class: dict[int, int] = {}
            for v in live.values():
                per_class[v] = per_class.get(v, 0) + v
            if sum(-(-n // slab_bytes) for n in per_class.values()) > cap // slab_bytes:
                return i
    return None


op_rows = st.lists(
    st.tuples(st.sampled_from(["write", "write", "read", "evict"]), st.integers(0, 9),
              st.integers(1, 5 * PAGE)),
    min_size=1, max_size=60)


@pytest.mark.parametrize("layout,log_full", [("log", "relocate"), ("log", "evict"), ("slab", "relocate"),
                                             ("extent", "relocate")])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=op_rows, cap_pages=st.integers(8, 40), max_io_pages=st.integers(1, 3), trim=st.booleans())
def test_layouts_never_fail_while_live_bytes_fit(layout: str, log_full: str, rows: list[tuple[str, int, int]],
                                                 cap_pages: int, max_io_pages: int, trim: bool) -> None:
    """Random object streams with random frees: a layout fails only where the live bytes stop fitting,
    never overlaps two live objects, and every byte is accounted (policy bytes + relocations)."""
    # an object keeps one size, as the simulator's objects do
    size = {o: b for _, o, b in reversed(rows)}
    rows = [(op, o, size[o]) for op, o, _ in rows]
    cap = cap_pages * PAGE
    slab_bytes = 4 * PAGE
    cfg = ReplayConfig(capacity_bytes=cap, layout=layout, max_io_bytes=max_io_pages * PAGE,  # type: ignore[arg-type]
                       slab_bytes=slab_bytes, trim_on_evict=trim, log_full=log_full)  # type: ignore[arg-type]
    limit = None if log_full == "evict" else layout_must_fit(rows, cap, layout, slab_bytes)
    try:
        plan = plan_block_ops(ssd_ops(rows), cfg)
    except InputError as e:
        assert limit is not None, e
        assert f"ssd_ops:{limit + 1}: field 'bytes'" in str(e), e
        assert "short by" in str(e) or "slab layout: the live slots do not fit" in str(e), e
        return
    assert limit is None
    replay_pages(plan, cap, layout, log_evicts=log_full == "evict", rows=rows)
    aligned = sum(-(-b // PAGE) * PAGE for op, _, b in rows if op == "write")
    assert plan.policy_write_bytes == aligned
    assert plan.aligned_write_bytes == aligned + plan.relocation_write_bytes
    assert plan.object_write_bytes == sum(b for op, _, b in rows if op == "write")
    t = plan.table
    lens = t.column("length_bytes").to_numpy()
    op = np.asarray(t.column("op").to_pylist())
    assert all(lens <= max_io_pages * PAGE)
    assert plan.trim_bytes == int(lens[op == "trim"].sum()) and plan.read_bytes == int(lens[op == "read"].sum())
    assert plan.peak_live_bytes <= cap
    if not trim:
        assert plan.trim_ios == 0


def test_log_wraps_and_evicts_or_errors() -> None:
    cap = 10 * PAGE
    rows = [("write", 1, 4 * PAGE), ("write", 2, 4 * PAGE), ("write", 3, 4 * PAGE), ("read", 1, 4 * PAGE),
            ("read", 2, 4 * PAGE), ("evict", 1, 4 * PAGE)]
    plan = plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=cap, layout="log", log_full="evict"))
    t = plan.table.to_pydict()
    # object 3 wraps: [8, 10) and [0, 2) pages; it overwrote object 1, which is then a miss
    assert [(o, off // PAGE, ln // PAGE) for o, off, ln, op in
            zip(t["obj_id"], t["offset_bytes"], t["length_bytes"], t["op"], strict=True) if op == "write"] == [
        (1, 0, 4), (2, 4, 4), (3, 8, 2), (3, 0, 2)]
    assert plan.forced_evictions == 1 and plan.forced_evict_bytes == 4 * PAGE
    assert plan.read_misses == 1 and plan.evict_misses == 1 and plan.read_ios == 1
    with pytest.raises(InputError, match=r"ssd_ops:3: field 'bytes': log layout full.*head offset 32768"):
        plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=cap, layout="log", log_full="error"))


def test_log_cleaner_relocates_live_data_at_its_head() -> None:
    """The default log_full='relocate': the head meets live object 1 with one free page before it, so
    the cleaner reads 1, trims the page of its old copy the new one leaves, writes it at the head
    (wrapping) — relocation writes counted apart — and the new object goes after it."""
    cap = 10 * PAGE
    rows = [("write", 1, 3 * PAGE), ("write", 2, 3 * PAGE), ("write", 3, 3 * PAGE), ("evict", 2, 0),
            ("write", 4, 3 * PAGE), ("read", 1, 0)]
    plan = plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=cap, layout="log"))
    t = plan.table.to_pydict()
    got = [(op, o, off // PAGE, ln // PAGE) for o, off, ln, op in
           zip(t["obj_id"], t["offset_bytes"], t["length_bytes"], t["op"], strict=True)]
    assert got[4:] == [("read", 1, 0, 3), ("trim", 1, 2, 1), ("write", 1, 9, 1), ("write", 1, 0, 2),
                       ("write", 4, 2, 3), ("read", 1, 9, 1), ("read", 1, 0, 2)]
    assert t["t_s"][4:8] == [4.0] * 4            # the relocation happens when object 4 is written
    assert plan.relocations == 1 and plan.relocation_write_bytes == plan.relocation_read_bytes == 3 * PAGE
    assert plan.aligned_write_bytes == plan.policy_write_bytes + 3 * PAGE
    assert plan.forced_evictions == 0 and plan.read_misses == 0
    # full log, the head at a live object with nothing free before it: it steps over, no I/O
    rows = [("write", 1, 5 * PAGE), ("write", 2, 5 * PAGE), ("evict", 2, 0), ("write", 3, 5 * PAGE)]
    plan = plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=cap, layout="log"))
    assert plan.stepped_over == 1 and plan.relocations == 0
    assert plan.table.column("offset_bytes").to_pylist()[-1] == 5 * PAGE
    with pytest.raises(InputError, match=r"ssd_ops:3: field 'bytes': log layout: the live bytes exceed the "
                                         r"device at t=2 s: .* short by 8192 bytes"):
        plan_block_ops(ssd_ops([("write", 1, 5 * PAGE), ("write", 2, 3 * PAGE), ("write", 3, 4 * PAGE)]),
                       ReplayConfig(capacity_bytes=cap, layout="log"))


def test_extent_first_fit_merges_free_neighbours() -> None:
    cap = 8 * PAGE
    rows = [("write", 1, 2 * PAGE), ("write", 2, 2 * PAGE), ("write", 3, 2 * PAGE),
            ("evict", 1, 0), ("evict", 2, 0), ("write", 4, 4 * PAGE), ("write", 5, PAGE)]
    plan = plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=cap, layout="extent"))
    t = plan.table.to_pydict()
    w = {o: off // PAGE for o, off, op in zip(t["obj_id"], t["offset_bytes"], t["op"], strict=True)
         if op == "write"}
    assert w == {1: 0, 2: 2, 3: 4, 4: 0, 5: 6}   # 1+2 merged into a 4-page hole at 0
    assert plan.trim_bytes == 4 * PAGE
    # holes left: [5, 6) and [7, 8) pages — 8 KiB free, but not in one piece: 7 takes both
    plan = plan_block_ops(ssd_ops([*rows, ("evict", 3, 0), ("write", 6, PAGE), ("write", 7, 2 * PAGE)]),
                          ReplayConfig(capacity_bytes=cap, layout="extent"))
    t = plan.table.to_pydict()
    assert [(off // PAGE, ln // PAGE) for o, off, ln, op in
            zip(t["obj_id"], t["offset_bytes"], t["length_bytes"], t["op"], strict=True)
            if op == "write" and o == 7] == [(5, 1), (7, 1)]
    assert plan.split_writes == 1 and plan.write_extents == 8 and plan.aligned_write_bytes == 14 * PAGE
    with pytest.raises(InputError, match=r"ssd_ops:11: field 'bytes': extent layout: the live bytes exceed"
                                         r" the device at t=10 s: writing 4096 bytes with 32768 live needs "
                                         r"36864 of 32768 bytes, short by 4096 bytes"):
        plan_block_ops(ssd_ops([*rows, ("evict", 3, 0), ("write", 6, PAGE), ("write", 7, 2 * PAGE),
                                ("write", 8, PAGE)]), ReplayConfig(capacity_bytes=cap, layout="extent"))


def test_slab_reuses_slots_in_place() -> None:
    rows = [("write", 1, 3000), ("write", 2, 5000), ("evict", 1, 3000), ("write", 3, 100),
            ("write", 2, 5000)]
    plan = plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=64 * PAGE, layout="slab",
                                                      slab_bytes=4 * PAGE, trim_on_evict=False))
    t = plan.table.to_pydict()
    writes = [(o, off) for o, off, op in zip(t["obj_id"], t["offset_bytes"], t["op"], strict=True)
              if op == "write"]
    assert writes[2] == (3, writes[0][1])        # object 3 took object 1's 4 KiB slot
    assert writes[3] == (2, writes[1][1])        # the rewrite of 2 stays in place
    assert plan.trim_ios == 0 and plan.rewrites == 1
    assert plan.object_write_bytes == 3000 + 5000 + 100 + 5000
    assert plan.aligned_write_bytes == PAGE + 2 * PAGE + PAGE + 2 * PAGE


def test_split_and_time_modes() -> None:
    rows = [("write", 7, 3 * (1 << 20) + 5), ("read", 7, 0)]
    t = [100.0, 102.0]
    for mode, expect in [("original", [0.0, 2.0]), ("compressed", [0.0, 0.5])]:
        plan = plan_block_ops(ssd_ops(rows, t), ReplayConfig(capacity_bytes=1 << 30, time_mode=mode,  # type: ignore[arg-type]
                                                             time_compression=4.0))
        ts = plan.table.column("t_s").to_pylist()
        assert ts[0] == expect[0] and ts[-1] == expect[1]
        assert plan.write_ios == 4 and plan.read_ios == 4     # 3 MiB + 4 KiB in 1 MiB pieces
        assert plan.table.column("length_bytes").to_pylist()[:4] == [1 << 20] * 3 + [PAGE]
    plan = plan_block_ops(ssd_ops(rows, t), ReplayConfig(capacity_bytes=1 << 30, time_mode="afap",
                                                         max_io_bytes=1 << 21))
    assert plan.table.column("t_s").to_pylist() == [0.0, 1.0, 2.0, 3.0]
    assert plan.table.schema.equals(BLOCK_OPS.with_metadata(), check_metadata=False)


def test_bad_input_names_row_and_field() -> None:
    with pytest.raises(InputError, match=r"ssd_ops:2: field 'op': unknown op 'delete'"):
        plan_block_ops(ssd_ops([("write", 1, 10), ("delete", 1, 10)]), ReplayConfig(capacity_bytes=1 << 20))
    with pytest.raises(InputError, match=r"ssd_ops:1: field 'bytes': negative"):
        plan_block_ops(ssd_ops([("write", 1, -1)]), ReplayConfig(capacity_bytes=1 << 20))
    with pytest.raises(InputError, match=r"ssd_ops:2: field 't_s': time goes backwards"):
        plan_block_ops(ssd_ops([("write", 1, 1), ("write", 2, 1)], [2.0, 1.0]),
                       ReplayConfig(capacity_bytes=1 << 20))
    with pytest.raises(InputError, match=r"ssd_ops:1: field 'bytes': .*exceeds the device"):
        plan_block_ops(ssd_ops([("write", 1, 2 << 20)]), ReplayConfig(capacity_bytes=1 << 20))


def test_large_plan_vectorized_and_bounded() -> None:
    rng = np.random.default_rng(0)
    n = 300_000
    objs = rng.integers(0, 20_000, n)
    sizes = rng.choice(np.array([16 * 16 * 1024, 150_000, 40_000_000]), 20_000)[objs]
    op = rng.choice(np.array(["write", "read", "evict"]), n, p=[0.5, 0.3, 0.2])
    table = SSD_OPS.conform(pa.table({
        "t_s": np.arange(n) * 1e-3, "op": op, "obj_id": objs, "obj_kind": np.full(n, "full"),
        "bytes": sizes, "session_id": pa.nulls(n, pa.string()), "cause": np.full(n, "x")}))
    cap = 1 << 40
    for layout in ("log", "slab"):
        plan = plan_block_ops(table, ReplayConfig(capacity_bytes=cap, layout=layout))  # type: ignore[arg-type]
        off = plan.table.column("offset_bytes").to_numpy()
        ln = plan.table.column("length_bytes").to_numpy()
        assert off.min() >= 0 and (off + ln).max() <= cap
        w = op == "write"
        assert plan.object_write_bytes == int(sizes[w].sum())
        assert plan.policy_write_bytes == int((-(-sizes[w] // PAGE) * PAGE).sum())
        assert plan.aligned_write_bytes == plan.policy_write_bytes + plan.relocation_write_bytes


@pytest.mark.parametrize("layout", ["log", "slab", "extent"])
def test_end_to_end_bytes_through_sim(layout: str, tmp_path: Path) -> None:
    """ssd_ops write bytes = block_ops write bytes (after 4 KiB rounding) = host bytes the FTL got."""
    rng = np.random.default_rng(11)
    rows: list[tuple[str, int, int]] = []
    live: list[int] = []
    sizes = {o: int(rng.integers(1, 300_000)) for o in range(400)}
    for _ in range(4000):
        r = rng.random()
        if r < 0.5 or not live:
            o = int(rng.integers(0, 400))
            rows.append(("write", o, sizes[o]))
            live.append(o)
        elif r < 0.8:
            rows.append(("read", live[int(rng.integers(0, len(live)))], 0))
        else:
            o = live.pop(int(rng.integers(0, len(live))))
            rows.append(("evict", o, sizes[o]))
    cap = 256 << 20
    plan = plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=cap, layout=layout))  # type: ignore[arg-type]
    obj_bytes = sum(b for op, _, b in rows if op == "write")
    assert plan.object_write_bytes == obj_bytes
    assert plan.aligned_write_bytes == sum(-(-b // PAGE) * PAGE for op, _, b in rows if op == "write")
    dev = open_device(DeviceSpec("sim", capacity_bytes=cap, options={"op_ratio": 0.1}), tmp_path)
    assert isinstance(dev, SimDevice)
    res = dev.replay(plan.table, tmp_path)
    assert res.write_bytes == plan.aligned_write_bytes
    assert res.read_bytes == plan.read_bytes
    assert res.write_ios == plan.write_ios and res.read_ios == plan.read_ios
    assert res.waf is not None and res.waf >= 1.0
    assert res.nand_write_bytes == res.write_bytes + res.details["counters"]["gc_pages"] * PAGE
    assert Path(res.tool_output_path or "").exists()
    iv = pq.read_table(res.intervals_path or "")
    assert iv.column("host_pages").to_pylist()[-1] == plan.aligned_write_bytes // PAGE


def first_fit_reference(rows: list[tuple[str, int, int]], cap: int) -> list[tuple[int, int]] | None:
    """Plain first fit over a sorted hole list with merging: (obj, offset) of each extent written;
    an object no hole holds whole takes the lowest holes in address order; None when the live
    bytes exceed the device."""
    holes = [(0, cap)]
    where: dict[int, list[tuple[int, int]]] = {}
    out = []

    def free(off: int, ln: int) -> None:
        holes.append((off, ln))
        holes.sort()
        merged: list[tuple[int, int]] = []
        for o, n in holes:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((o, n))
        holes[:] = merged

    def take(i: int, x: int) -> int:
        ho, hn = holes[i]
        if hn == x:
            holes.pop(i)
        else:
            holes[i] = (ho + x, hn - x)
        return ho

    for op, o, b in rows:
        a = -(-b // PAGE) * PAGE
        if op in ("write", "evict"):
            for ext in where.pop(o, []):
                free(*ext)
        if op != "write":
            continue
        if sum(n for _, n in holes) < a:
            return None
        fit = [i for i, (_, hn) in enumerate(holes) if hn >= a]
        exts = [(take(fit[0], a), a)] if fit else []
        r = 0 if fit else a
        while r:
            x = min(holes[0][1], r)
            exts.append((take(0, x), x))
            r -= x
        where[o] = exts
        out += [(o, off) for off, _ in exts]
    return out


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["write", "write", "evict"]), st.integers(0, 15),
                               st.integers(1, 6 * PAGE)), min_size=1, max_size=80),
       cap_pages=st.integers(4, 300))
def test_extent_layout_is_first_fit(rows: list[tuple[str, int, int]], cap_pages: int) -> None:
    size = {o: b for _, o, b in reversed(rows)}
    rows = [(op, o, size[o]) for op, o, _ in rows]
    cap = cap_pages * PAGE
    expect = first_fit_reference(rows, cap)
    try:
        plan = plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=cap, layout="extent",
                                                          max_io_bytes=8 * PAGE))
    except InputError:
        assert expect is None
        return
    assert expect is not None
    t = plan.table.to_pydict()
    got = [(o, off) for o, off, op, ln in zip(t["obj_id"], t["offset_bytes"], t["op"], t["length_bytes"],
                                             strict=True) if op == "write"]
    # ≤ 6 pages per object: one I/O per extent here
    assert got == expect


def test_sim_device_femu_geometry_persists_across_replays(tmp_path: Path) -> None:
    femu = {"geometry": "femu", "devsz_mb": 192, "pgs_per_blk": 256, "blks_per_pl": 64, "pls_per_lun": 1,
            "luns_per_ch": 2, "nchs": 2, "gc_thres_pcent": 75, "gc_thres_pcent_high": 95}
    dev = open_device(DeviceSpec("sim", options=femu), tmp_path)
    cap = dev.capacity_bytes()
    assert cap == 192 << 20 and dev.identity().extra["femu"]["nchs"] == 2
    n = cap // PAGE
    fill = BLOCK_OPS.conform(pa.table({
        "t_s": np.zeros(n // 32), "op": np.full(n // 32, "write"),
        "offset_bytes": np.arange(0, cap, 32 * PAGE), "length_bytes": np.full(n // 32, 32 * PAGE),
        "obj_kind": np.full(n // 32, "full"), "obj_id": np.arange(n // 32)}))
    r1 = dev.replay(fill, tmp_path)
    assert (r1.write_bytes, r1.waf, r1.write_ios) == (cap, 1.0, n // 32)
    lpn = np.random.default_rng(3).integers(0, n, n)
    rand = BLOCK_OPS.conform(pa.table({
        "t_s": np.zeros(n), "op": np.full(n, "write"), "offset_bytes": lpn * PAGE,
        "length_bytes": np.full(n, PAGE), "obj_kind": np.full(n, "full"), "obj_id": lpn}))
    r2 = dev.replay(rand, tmp_path)                 # the drive keeps its state: GC is now busy
    assert r2.write_bytes == cap and r2.waf is not None and r2.waf > 3.0
    assert r2.nand_write_bytes == cap + r2.details["counters"]["gc_pages"] * PAGE
    bad = BLOCK_OPS.conform(pa.table({
        "t_s": [0.0], "op": ["write"], "offset_bytes": [cap - PAGE], "length_bytes": [2 * PAGE],
        "obj_kind": ["full"], "obj_id": [1]}))
    with pytest.raises(InputError, match=r"block_ops:1: field 'offset_bytes': .*outside the device"):
        dev.replay(bad, tmp_path)


def test_log_layout_with_trim_is_waf_one_on_sim(tmp_path: Path) -> None:
    """A FIFO cache on the log layout: the oldest object is evicted (trimmed) before the head comes
    back to it, so every erased block is empty — WAF exactly 1 after many laps."""
    cap = 32 << 20
    obj = 256 * 1024
    resident = cap // obj - 8
    rows: list[tuple[str, int, int]] = []
    for i in range(6 * cap // obj):
        if i >= resident:
            rows.append(("evict", i - resident, obj))
        rows.append(("write", i, obj))
    plan = plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=cap, layout="log"))
    assert plan.forced_evictions == 0
    dev = open_device(DeviceSpec("sim", capacity_bytes=cap, options={"op_ratio": 0.07, "pages_per_block": 64}),
                      tmp_path)
    res = dev.replay(plan.table, tmp_path)
    assert res.write_bytes == plan.aligned_write_bytes == 6 * cap
    assert res.waf == 1.0 and res.details["counters"]["line_erases"] > 0


def _fragmenting_ops(seed: int) -> list[tuple[str, int, int]]:
    """Rounds of one-page objects, half of them evicted (with reads of live ones), then 9-page
    objects: on a device of 1,800 pages the extent layout splits writes over holes, the slab
    layout compacts its one-page class, the log relocates (or, with log_full='evict', drops)."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[str, int, int]] = []
    live: list[int] = []
    nid = 0
    for _ in range(3):
        for _ in range(600):
            rows.append(("write", nid, PAGE))
            live.append(nid)
            nid += 1
        rng.shuffle(live)
        for o in live[: len(live) // 2]:
            rows.append(("evict", o, PAGE))
            if rng.random() < 0.3:
                rows.append(("read", live[-1], 0))
        live = live[len(live) // 2:]
        for _ in range(40):
            rows.append(("write", nid, 8 * PAGE + 100))
            rows.append(("read", nid, 0))
            nid += 1
    rows += [("write", 5, PAGE), ("write", 5, 3 * PAGE), ("evict", 99_999, 0), ("write", 7, 0)]
    return rows


@pytest.mark.parametrize(("layout", "log_full", "feature"), [
    ("extent", "relocate", "split_writes"), ("log", "relocate", "relocations"),
    ("log", "evict", "forced_evictions"), ("slab", "relocate", "relocations")])
def test_batches_of_any_size_plan_what_one_batch_plans(layout: str, log_full: str, feature: str) -> None:
    """The layouts' state carries across ssd_ops batches: batches of 5 and 64 rows give the block_ops
    and accounting of one batch, through splits, relocations, forced evictions, rewrites and trims."""
    table = ssd_ops(_fragmenting_ops(1), [0.5 * i for i in range(len(_fragmenting_ops(1)))])
    rc = ReplayConfig(capacity_bytes=1800 * PAGE, layout=layout, log_full=log_full,  # type: ignore[arg-type]
                      slab_bytes=16 * PAGE, max_io_bytes=4 * PAGE)
    one = plan_block_ops(table, rc, batch_rows=table.num_rows)
    assert getattr(one, feature) > 10 and one.trim_ios > 0 and one.rewrites == 1
    for rows in (5, 64):
        small = plan_block_ops(table, rc, batch_rows=rows)
        assert small.table.equals(one.table)
        assert small.accounting() == one.accounting()
    # a callable of record batches (how the run reads ssd_ops.parquet) plans the same
    fed = plan_block_ops(lambda: table.to_batches(max_chunksize=97), rc)
    assert fed.table.equals(one.table) and fed.accounting() == one.accounting()


def test_errors_name_the_global_row_across_batches() -> None:
    rows = [("write", i, PAGE) for i in range(20)]
    bad_op = ssd_ops([*rows, ("delete", 1, 10)])
    with pytest.raises(InputError, match=r"ssd_ops:21: field 'op': unknown op 'delete'"):
        plan_block_ops(bad_op, ReplayConfig(capacity_bytes=1 << 20), batch_rows=3)
    back = ssd_ops(rows, [float(i) for i in range(9)] + [3.0] + [float(i) for i in range(10, 20)])
    with pytest.raises(InputError, match=r"ssd_ops:10: field 't_s': time goes backwards \(3.0 after 8.0\)"):
        plan_block_ops(back, ReplayConfig(capacity_bytes=1 << 20), batch_rows=9)
    for layout in ("extent", "log", "slab"):
        with pytest.raises(InputError, match=rf"ssd_ops:17: field 'bytes': {layout} layout: the live bytes"
                                             r"|ssd_ops:17: field 'bytes': slab layout: the live slots"):
            plan_block_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=16 * PAGE, layout=layout,  # type: ignore[arg-type]
                                                       slab_bytes=PAGE), batch_rows=4)


@pytest.mark.parametrize("layout", ["extent", "log", "slab"])
def test_per_object_state_is_bounded_by_the_live_objects(layout: str) -> None:
    """50,000 objects written and evicted at once, two live at a time: the live-object table
    stays at its first size (512 slots) instead of one entry per object the trace names."""
    from kvwear.harness.plan.planner import _checked_batches, _Layout

    n = 50_000
    rows = [r for i in range(n) for r in (("write", i, PAGE), ("read", i, 0), ("evict", i, 0))]
    table = ssd_ops(rows)
    rc = ReplayConfig(capacity_bytes=64 * PAGE, layout=layout, slab_bytes=PAGE)  # type: ignore[arg-type]
    lay = _Layout(rc, table, "ssd_ops", 4096)
    for b in _checked_batches(table, rc, "ssd_ops", 4096, []):
        lay.place(b)
        assert not lay.info[0]
    assert lay.obj.shape[1] == 512 and lay.om[2] == 0
    assert lay.stats[7] == n                    # writes
