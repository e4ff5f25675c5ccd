"""The placement-policy interface, its parameters, the spec-string parser and the registry.

A policy decides, for the tiered KV cache the simulator (`kvwear.policies.sim`) runs:
1. **placement** of a newly computed object (`place`): DRAM, SSD, both (write-through) or none;
2. **admission to SSD** of a DRAM victim that has no SSD copy (`admit_to_ssd`): write or drop
   (the LRU write-back baseline always writes);
3. **victim selection** per tier (`victim(tier, need_bytes)`) for DRAM and SSD (HBM, when
   configured, is a plain LRU the simulator runs itself);
and keeps whatever bookkeeping it needs from the notifications `added`, `removed`, `touched`,
`split` and `begin_request`.

Adding a policy = one module that declares its parameters (a frozen dataclass `XParams` of
`PolicyParams` with defaults, each field made with `param(default, sweep=(lo, hi), help=...)`),
subclasses `Policy[XParams]` (which sets `Params` and types `self.p`), decorates the class with
`@POLICIES.register("name")`, plus one line in the module list of `POLICIES` (below). Specs: `"gandalf:gamma=8,mu0=1"` →
`parse_spec` → (name, params) with type checking; an unknown parameter is an error listing the
valid ones.

**What a policy sees** (all read-only for the policy):
- Objects (`kvwear.policies.tree`): `Segment` (a run of full-attention KV blocks sharing one fate —
  residency, last access, access count) and `State` (a linear/sliding checkpoint at a segment's
  end). Fields: `oid, kind (FULL/LINEAR), nbytes, tiers (bit mask HBM|DRAM|SSD), last_seq,
  last_s, refs, created_s, ssd_hit, next_seq`; segments add `ns, keys, n (blocks), start (depth
  in blocks), tokens, start_tokens, end_tokens, parent, children, state, is_leaf, is_root`;
  states add `seg`. `obj.pdata` is the policy's own slot.
- The simulator context `ctx` (`SimContext`): `config`, `capacity_bytes[tier]`,
  `used_bytes[tier]`, `free_bytes(tier)`, `now_s` (arrival of the current request), `seq` (its
  sequence number, the logical clock), `req` (`RequestInfo`: request_id, session_id, category,
  turn, arrival_s, input_tokens, hashed_tokens — for per-workload statistics), `chunk_tokens`,
  `state_bytes`, `hybrid`, `tokens_per_s` (recompute speed), `write_to_ssd(obj)` (queue a
  write of a resident object without SSD copy, e.g. a frequency filter passing on a re-use;
  it happens with the request's other SSD writes, cause `promote`) and, for oracles (`needs_future =
  True`), `obj.next_seq` (the next request that references the object's first block;
  `tree.NEVER` if none; for a state, the next request whose prefix reaches its position) and
  `ctx.next_seqs(seg)` (per block) and `ctx.future_refs(obj)` (how many later requests reference
  the object's first block or a state's position: f_x), filled in by a pre-pass over the requests
  table or streamed with it (and `prepare(table)` lets an oracle run its own). What serves the
  current request, set before its walk: `ctx.hit_state` (the state the hit ends at, hybrid models;
  else None) and `ctx.hit_blocks` (the hit's length in blocks), for policies that credit reuse
  only to what served it.

**Call order per request**: `begin_request(req)`; then the request's path is visited from the
leaf (request end) to the root — the request's new or re-used state first, the state used for
the hit just before the segment it ends — and for each object: `touched(obj)` if it is resident
in DRAM or SSD (HBM-only objects are not the policy's), after the simulator has updated
`last_seq`, `last_s`, `refs` (an SSD hit is first staged into DRAM with `added(obj, DRAM)`);
or, if it is new (or a ghost being re-inserted), `place(obj)`, then `added(obj, DRAM)` if placed
there. Then, in this order: the SSD writes that `place` asked for (cause `insert`) and those
queued with `ctx.write_to_ssd` (cause `promote`), each preceded by the SSD evictions that make
room (`victim(SSD, need_bytes)`, `removed`) and followed by `added(obj, SSD)`; HBM bookkeeping
(a simulator-run LRU); and DRAM evictions until DRAM fits: `victim(DRAM, need_bytes)`, then for
a victim without an SSD copy `admit_to_ssd(victim)` right after (write, possibly evicting from
SSD, or drop), then `removed(victim, DRAM)`; then each object of `evict_with(victim, tier)`
still resident there leaves the same way (a policy's eviction unit of several objects). A
victim must be resident in that tier; a policy arbitrating drop vs move can decide both in
`victim` and return the decision from the `admit_to_ssd` call that follows. Objects placed
nowhere stay ghosts and are pruned at the end of the request.

**Splits**: a segment splits when a request ends or diverges inside it, or when only part of a
victim is needed (`split_victims`: the simulator then evicts only the leaf-side blocks that free
`need_bytes`, if the victim lives in that tier alone). The original object becomes the
leaf-side *tail* (it keeps children, state and its place in the policy's structures); the
root-side *head* is new, and `split(head, tail, evicting_tier)` lets the policy enter it
(`evicting_tier` is 0 for splits during a request walk, after which the head is touched).

Tie-break convention: leaf-side objects go first among objects touched by the same request
(the path is visited leaf → root), so a prefix is never evicted before its own extension.

Must not: do I/O, read the wall clock, keep global state (the `POLICIES` registry excepted),
mutate simulator-owned fields of objects.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import pyarrow as pa

from kvwear.errors import KvwearError
from kvwear.kv import parse_kv
from kvwear.policies.config import SimConfig
from kvwear.policies.tree import DRAM, HBM, SSD, TIER_NAMES, Obj, Segment, State
from kvwear.registry import Registry
from kvwear.values import BadValue, bounds, read_value


class PolicySpecError(KvwearError, ValueError):
    """A policy spec string that does not parse or names an unknown parameter."""


@dataclass(frozen=True)
class PolicyParams:
    """Base of every policy's parameters (a frozen dataclass; no fields = no parameters)."""


#: The allowed range of a numeric parameter that declares none: finite and of a magnitude no
#: rule means (a count of 10^15 or a weight of 1e308 is a typo, not a setting).
DEFAULT_VALID = (-1e12, 1e12)

#: A year in seconds: the longest time window or threshold a parameter may name (traces span at
#: most that much: kvwear.workloads.bounds).
YEAR_S = 366 * 86400.0


def param(default: Any, sweep: tuple[float, float] | tuple[Any, ...] | None = None,
          help: str = "", valid: tuple[float, float] | None = None, above: bool = False) -> Any:
    """A policy parameter with its default, its documented sweep range, a one-line help and (a
    number) its allowed range `valid` = (lo, hi), inclusive (`above`: lo itself excluded);
    DEFAULT_VALID when not given. `build_params` refuses a value outside it, naming the range
    (kvwear.values reads and bounds it, as every other setting)."""
    lo, hi = valid or DEFAULT_VALID
    return field(default=default, metadata={"sweep": sweep, "help": help, "valid": valid, "above": above,
                                            **bounds(ge=None if above else lo, gt=lo if above else None, le=hi)})


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def valid_range(f: dataclasses.Field[Any]) -> str:
    """A parameter's allowed range as text: [lo, hi] or (lo, hi]."""
    lo, hi = f.metadata.get("valid") or DEFAULT_VALID
    return f"{'(' if f.metadata.get('above') else '['}{_num(lo)}, {_num(hi)}]"


@dataclass(frozen=True)
class ParamInfo:
    """One parameter for listings: name, type name, default, sweep range, help."""

    name: str
    type_name: str
    default: Any
    sweep: tuple[Any, ...] | None
    help: str


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def param_infos(params_cls: type[PolicyParams]) -> list[ParamInfo]:
    hints = _field_types(params_cls)
    out = []
    for f in dataclasses.fields(params_cls):
        t = hints[f.name]
        out.append(ParamInfo(f.name, getattr(t, "__name__", str(t)), f.default,
                             f.metadata.get("sweep"), f.metadata.get("help", "")))
    return out


def _convert(text: str, typ: Any, where: str, meta: Mapping[str, Any] | None = None) -> Any:
    """A parameter's text by kvwear.values' rules (the same as config files and device options)."""
    try:
        return read_value(text, typ, name=where, meta=meta)
    except BadValue as exc:
        raise PolicySpecError(f"{where}: {exc.reason}") from None


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split 'name:k=v,k2=v2' into ('name', {'k': 'v', 'k2': 'v2'}) (no type checking)."""
    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    if not name:
        raise PolicySpecError(f"policy spec {spec!r}: empty policy name")
    if not rest.strip():
        return name, {}
    return name, parse_kv(rest.split(","), f"policy spec {spec!r}", error=PolicySpecError)


def build_params(params_cls: type[PolicyParams], values: dict[str, str], policy: str) -> PolicyParams:
    """Type-checked params instance from string values; unknown names list the valid ones."""
    hints = _field_types(params_cls)
    fields = {f.name: f for f in dataclasses.fields(params_cls)}
    names = list(fields)
    kwargs: dict[str, Any] = {}
    for k, v in values.items():
        if k not in names:
            valid = ", ".join(names) if names else "(none: this policy takes no parameters)"
            raise PolicySpecError(f"policy {policy!r}: unknown parameter {k!r}; valid: {valid}")
        kwargs[k] = _convert(v, hints[k], f"policy {policy!r} parameter {k!r}", fields[k].metadata)
    try:
        p = params_cls(**kwargs)          # then the rules between parameters
    except ValueError as exc:
        raise PolicySpecError(f"policy {policy!r}: {exc}") from None
    return p


@dataclass(frozen=True)
class PolicySpec:
    """A resolved policy: registered name + typed params; `label` names its output folder."""

    name: str
    params: PolicyParams

    @property
    def label(self) -> str:
        """'gandalf' or 'gandalf,gamma=8,mu0=1' (only parameters that differ from defaults)."""
        parts = [self.name]
        for f in dataclasses.fields(self.params):
            v = getattr(self.params, f.name)
            if v != f.default:
                parts.append(f"{f.name}={v}")
        return ",".join(parts)


def resolve_spec(spec: str | PolicySpec) -> PolicySpec:
    """'lru-k:k=3' → PolicySpec('lru-k', LruKParams(k=3)); unknown names list valid ones."""
    if isinstance(spec, PolicySpec):
        return spec
    name, kv = parse_spec(spec)
    cls = POLICIES.get(name)
    return PolicySpec(name, build_params(cls.Params, kv, name))


def resolve_label(text: str) -> PolicySpec:
    """A policy by its spec ('gandalf:gamma=8') or by its label ('gandalf,gamma=8.0', what
    `PolicySpec.label` makes and results rows carry)."""
    if ":" not in text and "," in text:
        name, _, rest = text.partition(",")
        text = f"{name}:{rest}"
    return resolve_spec(text)


def is_offline(policy: str) -> bool:
    """Whether the policy (a spec or a label) is an offline oracle: it reads the future
    (`Policy.needs_future`), so no deployed cache can run it and its results are a bound."""
    return POLICIES.get(resolve_label(policy).name).needs_future


@dataclass(frozen=True)
class RequestInfo:
    """The request being simulated, as policies see it."""

    seq: int
    request_id: int
    session_id: str | None
    category: str
    turn: int | None
    arrival_s: float
    input_tokens: int
    hashed_tokens: int


class SimContext(Protocol):
    """What the simulator exposes to a policy (read-only)."""

    config: SimConfig
    capacity_bytes: dict[int, int]
    used_bytes: dict[int, int]
    now_s: float
    seq: int
    req: RequestInfo
    chunk_tokens: int
    state_bytes: int
    hybrid: bool
    tokens_per_s: float
    hit_state: State | None
    hit_blocks: int

    def free_bytes(self, tier: int) -> int: ...

    def write_to_ssd(self, obj: Obj) -> None: ...

    def next_seqs(self, seg: Segment) -> list[int]: ...

    def future_refs(self, obj: Obj) -> int: ...


P = TypeVar("P", bound=PolicyParams)


class Policy(Generic[P]):
    """Base policy: LRU per tier (insertion or access moves an object to the MRU end), place
    new objects in DRAM, write every DRAM victim to SSD — i.e. the `lru` write-back baseline.
    Subclasses override what differs (see the module docstring for the contract).

    Generic in its parameter class: `class XPolicy(Policy[XParams])` types `self.p` as
    `XParams` and sets `Params = XParams` (what spec parsing builds), so the two cannot
    disagree; a class variable cannot carry the type variable, hence the runtime step."""

    name: ClassVar[str] = ""
    Params: ClassVar[type[PolicyParams]] = PolicyParams
    needs_future: ClassVar[bool] = False
    split_victims: ClassVar[bool] = True
    summary: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            if typing.get_origin(base) is Policy:
                (arg,) = typing.get_args(base)
                if not isinstance(arg, type):
                    continue  # Policy[Any] or a type variable: Params stays as inherited / declared
                declared = cls.__dict__.get("Params", arg)
                if declared is not arg:
                    raise TypeError(f"{cls.__name__}: Params = {declared.__name__} but the class is "
                                    f"Policy[{arg.__name__}]")
                cls.Params = arg

    def __init__(self, params: P, ctx: SimContext) -> None:
        self.p: P = params
        self.ctx = ctx
        # one LRU order per tier; an OrderedDict keyed by the object (identity hash)
        self.lru: dict[int, OrderedDict[Obj, None]] = {DRAM: OrderedDict(), SSD: OrderedDict()}

    # --- decisions --------------------------------------------------------------------------
    def place(self, obj: Obj) -> int:
        """Tier mask for a newly computed object: DRAM, SSD, DRAM|SSD, or 0 (not cached)."""
        return DRAM

    def admit_to_ssd(self, obj: Obj) -> bool:
        """A DRAM victim without an SSD copy: True = write it to SSD, False = drop it."""
        return True

    def victim(self, tier: int, need_bytes: int) -> Obj:
        """The object to evict next from `tier` (DRAM or SSD); must be resident there."""
        return next(iter(self.lru[tier]))

    def evict_with(self, victim: Obj, tier: int) -> Sequence[Obj]:
        """Objects that leave `tier` together with `victim`, right after it (default: none)."""
        return []

    # --- notifications ----------------------------------------------------------------------
    def begin_request(self, req: RequestInfo) -> None:
        """A new request starts (time-based decay goes here)."""

    @classmethod
    def needs_table(cls, params: PolicyParams) -> bool:
        """An oracle whose `prepare` needs the whole requests table under `params` (more than the
        next-use column a streamed trace carries): the simulator then holds the trace in memory."""
        return False

    @classmethod
    def streams_future(cls, params: PolicyParams) -> bool:
        """An oracle that reads its future from the next-use column of a streamed trace."""
        return cls.needs_future and not cls.needs_table(params)

    def prepare(self, requests: pa.Table) -> None:
        """Oracles (`needs_future`): the whole requests table (at the simulator's block size),
        before the first request, for pre-passes beyond the simulator's next-access one."""

    def added(self, obj: Obj, tier: int) -> None:
        self.lru[tier][obj] = None

    def removed(self, obj: Obj, tier: int) -> None:
        del self.lru[tier][obj]

    def touched(self, obj: Obj) -> None:
        t = obj.tiers
        if t & DRAM:
            self.lru[DRAM].move_to_end(obj)
        if t & SSD:
            self.lru[SSD].move_to_end(obj)

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        """`head` (new, root side) was cut off `tail`; it is resident where `tail` is."""
        for tier in (DRAM, SSD):
            if head.tiers & tier:
                od = self.lru[tier]
                od[head] = None
                if tier == evicting_tier:
                    od.move_to_end(head, last=False)  # it inherits the victim's (oldest) place

    # --- introspection ----------------------------------------------------------------------
    @classmethod
    def describe(cls) -> str:
        doc = cls.summary or (cls.__doc__ or "").strip().split("\n")[0]
        return doc


# Modules that register policies. Adding a policy = its module + one line here.
POLICIES: Registry[type[Policy[Any]]] = Registry("policy", modules=[
    f"kvwear.policies.{m}" for m in ("lru", "write_through", "fifo", "type_aware", "lru_k", "dynamo", "hotprefix",
                              "marconi", "wa", "meritkv", "gandalf", "belady")])

def tier_name(tier: int) -> str:
    return TIER_NAMES[tier]


def obj_keys(obj: Obj) -> list[tuple[int, int]]:
    """Stable identities that survive eviction, for policies keeping history: one
    `(hash_ns, hash_id)` per block of a segment; `(hash_ns, ~hash_id of its last block)` for a
    state (the bitwise complement keeps state keys apart from block keys)."""
    if isinstance(obj, Segment):
        ns = obj.ns
        return [(ns, k) for k in obj.keys]
    assert isinstance(obj, State)
    seg = obj.seg
    return [(seg.ns, ~seg.keys[-1])]


__all__ = [
    "DRAM", "HBM", "POLICIES", "SSD", "ParamInfo", "Policy", "PolicyParams", "PolicySpec",
    "PolicySpecError", "RequestInfo", "SimContext", "build_params", "is_offline", "obj_keys", "param",
    "param_infos", "parse_spec", "resolve_label", "resolve_spec", "tier_name",
]
