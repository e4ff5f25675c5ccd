"""Model profiles: how many bytes one token of full-attention KV and one state checkpoint take.

A `ModelProfile` is computed from the model's architecture inputs (layer counts, heads, head
dimensions, conv kernel, dtypes) with the formulas below (docs/reference/models.md shows them); no ratio or
size is ever stored, so a profile can always explain its numbers (`ModelProfile.arithmetic`).
This module must not know about tiers, LBAs, devices or policies.

Formulas (L_full: full-attention layers, L_state: layers that keep a state instead of KV):

- GQA KV bytes/token   = L_full·kv_heads·head_dim·2·kv_dtype_bytes               (K and V)
- MLA KV bytes/token   = L_full·(kv_lora_rank + qk_rope_head_dim)·kv_dtype_bytes  (one latent)
- Gated-DeltaNet / KDA state per layer
                       = H_v·d_k·d_v·state_dtype_bytes                 (recurrent state, fp32)
                       + (2·H_k·d_k + H_v·d_v)·(conv_kernel−1)·conv_dtype_bytes   (q,k,v conv)
- Mamba2 state per layer
                       = mamba_heads·mamba_head_dim·ssm_state_size·state_dtype_bytes
                       + (d_inner + 2·n_groups·ssm_state_size)·(conv_kernel−1)·conv_dtype_bytes
- Sliding window "state" per layer = window_tokens·kv_heads·head_dim·2·kv_dtype_bytes
- state bytes (one checkpoint of the whole model) = L_state · state per layer

Prefill compute (optional inputs; Marconi's FLOP-efficiency needs them). Projections only —
norms, biases, routers, gates and embeddings are left out (each ≲ 2 % of the total; the
LM head runs for one token per request, not per prefilled token):

- active_params = L_full·attention projections + L_state·mixer projections
                  + mlp_layers·mlp_matrices·hidden_size·mlp_active_width
  GQA (and sliding-window) projections = hidden_size·head_dim·(2·attn_heads + 2·kv_heads)
  MLA projections = hidden_size·q_lora_rank + q_lora_rank·attn_heads·(qk_nope_head_dim+qk_rope_head_dim)
                    (hidden_size·attn_heads·(qk_nope+qk_rope) when q_lora_rank = 0)
                    + hidden_size·(kv_lora_rank+qk_rope_head_dim)
                    + kv_lora_rank·attn_heads·(qk_nope_head_dim+v_head_dim) + attn_heads·v_head_dim·hidden_size
  Gated-DeltaNet / KDA projections = hidden_size·(2·H_k·d_k + 2·H_v·d_v)           (q, k, v, out)
  Mamba2 projections = hidden_size·(2·d_inner + 2·n_groups·ssm_state_size + mamba_heads) + d_inner·hidden_size
  mlp_active_width = the MLP width one token passes (dense: intermediate size; MoE: the active
  experts' widths, shared experts included); mlp_matrices = 3 for gated MLPs, 2 for plain ones
- attn_flops_per_token (per query token, per context token) = L_full·2·attn_heads·(d_qk + d_v)
  (QKᵀ and AV; GQA d_qk = d_v = head_dim; MLA d_qk = qk_nope+qk_rope, d_v = v_head_dim). A causal
  prefill of L tokens takes ≈ 2·active_params·L + attn_flops_per_token·L²/2. Sliding-window
  layers attend to at most `window_tokens`, a term linear in L left out (≈ 2 % for Gemma3-27B).

Families and the inputs each needs besides total_layers (dtype inputs have defaults: kv 2 (bf16), conv 2 (bf16),
recurrent state 4 (fp32) for Gated-DeltaNet/KDA, 2 (bf16) for Mamba2 — the published profiles' figures):

- dense-gqa: GQA, no state — kv_heads, head_dim (full_attn_layers = total_layers)
- dense-mla: MLA, no state — kv_lora_rank, qk_rope_head_dim
- hybrid-gdn: GQA + Gated-DeltaNet — full_attn_layers, kv_heads, head_dim, state_layers,
  linear_value_heads, linear_key_heads, linear_key_head_dim, linear_value_head_dim, conv_kernel
- mla-kda: MLA + KDA — full_attn_layers, kv_lora_rank, qk_rope_head_dim, state_layers, the
  linear_* inputs above (H_k = H_v for KDA), conv_kernel
- mamba2-hybrid: GQA + Mamba2 — full_attn_layers, kv_heads, head_dim, state_layers, mamba_heads,
  mamba_head_dim, ssm_state_size, n_groups, d_inner, conv_kernel
- sliding-window: GQA + sliding-window KV — full_attn_layers, kv_heads, head_dim, state_layers,
  window_tokens

Profiles come from three places: the built-ins (`PROFILES`), a Hugging Face `config.json`
(`load_profile`; Qwen3-Next/Qwen3.5, Kimi-Linear, Nemotron-H, Gemma3, Llama/Qwen2/DeepSeek keys),
or a small TOML file giving the inputs directly::

    # my-model.toml — every key but name is a formula input; unknown keys are an error
    name = "my-hybrid"            # optional, default: the file's stem
    family = "hybrid-gdn"
    total_layers = 64
    full_attn_layers = 16
    kv_heads = 4
    head_dim = 256
    state_layers = 48
    linear_value_heads = 48
    linear_key_heads = 16
    linear_key_head_dim = 128
    linear_value_head_dim = 128
    conv_kernel = 4
    # state_dtype_bytes = 4      # optional dtype overrides
    # hidden_size = 5120         # optional prefill-compute inputs (all of hidden_size,
    # attn_heads = 24            # attn_heads, mlp_active_width; MLA also qk_nope_head_dim,
    # mlp_active_width = 17408   # v_head_dim; optional mlp_layers, mlp_matrices, q_lora_rank)
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvwear.errors import InputError
from kvwear.registry import Registry

MIB = 1 << 20

# family → (attention kind, state kind or None)
FAMILIES: dict[str, tuple[str, str | None]] = {
    "dense-gqa": ("gqa", None),
    "dense-mla": ("mla", None),
    "hybrid-gdn": ("gqa", "gated-delta"),
    "mla-kda": ("mla", "gated-delta"),
    "mamba2-hybrid": ("gqa", "mamba2"),
    "sliding-window": ("gqa", "sliding"),
}

_ATTN_INPUTS: dict[str, tuple[str, ...]] = {
    "gqa": ("full_attn_layers", "kv_heads", "head_dim", "kv_dtype_bytes"),
    "mla": ("full_attn_layers", "kv_lora_rank", "qk_rope_head_dim", "kv_dtype_bytes"),
}
_STATE_INPUTS: dict[str, tuple[str, ...]] = {
    "gated-delta": (
        "state_layers", "linear_value_heads", "linear_key_heads", "linear_key_head_dim",
        "linear_value_head_dim", "conv_kernel", "state_dtype_bytes", "conv_dtype_bytes",
    ),
    "mamba2": (
        "state_layers", "mamba_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "d_inner",
        "conv_kernel", "state_dtype_bytes", "conv_dtype_bytes",
    ),
    "sliding": ("state_layers", "window_tokens", "kv_heads", "head_dim", "kv_dtype_bytes"),
}
# Defaults: bf16 KV and conv state; fp32 recurrent state for Gated-DeltaNet/KDA (the kernels keep
# it in fp32), bf16 SSM state for Mamba2 (what the published Nemotron-H figures assume).
_DEFAULTS: dict[str | None, dict[str, int]] = {
    None: {"kv_dtype_bytes": 2},
    "gated-delta": {"kv_dtype_bytes": 2, "state_dtype_bytes": 4, "conv_dtype_bytes": 2},
    "mamba2": {"kv_dtype_bytes": 2, "state_dtype_bytes": 2, "conv_dtype_bytes": 2},
    "sliding": {"kv_dtype_bytes": 2},
}


# Prefill-compute inputs (optional, all families): without them a profile's active_params and
# attn_flops_per_token are 0 (unknown). Defaults apply only when the required ones are given.
_FLOP_REQUIRED: dict[str, tuple[str, ...]] = {
    "gqa": ("hidden_size", "attn_heads", "mlp_active_width"),
    "mla": ("hidden_size", "attn_heads", "mlp_active_width", "qk_nope_head_dim", "v_head_dim"),
}
_FLOP_OPTIONAL: dict[str, tuple[str, ...]] = {
    "gqa": ("mlp_layers", "mlp_matrices"),
    "mla": ("mlp_layers", "mlp_matrices", "q_lora_rank"),
}


def flop_inputs(family: str) -> tuple[str, ...]:
    """The optional prefill-compute inputs of a family (see the module doc)."""
    attn = FAMILIES[family][0]
    return _FLOP_REQUIRED[attn] + _FLOP_OPTIONAL[attn]


def family_inputs(family: str) -> tuple[str, ...]:
    """The formula inputs (besides total_layers) a family needs, in display order."""
    attn, state = FAMILIES[family]
    names = list(_ATTN_INPUTS[attn])
    if state is not None:
        names += [n for n in _STATE_INPUTS[state] if n not in names]
    else:
        names.remove("full_attn_layers")  # dense: every layer is full attention
    return tuple(names)


def _needed(family: str) -> tuple[str, ...]:
    names = family_inputs(family)
    return names if "full_attn_layers" in names else ("full_attn_layers", *names)


def _n(x: int) -> str:
    return f"{x:,}"


@dataclass(frozen=True)
class ModelProfile:
    """One model's KV and state sizes, computed from `inputs` by `build_profile`.

    `state_bytes` is one linear/sliding state checkpoint for the whole model (0 for dense);
    `arithmetic` holds the formulas with the numbers substituted, for `kvwear models show`.
    """

    name: str
    family: str
    total_layers: int
    full_attn_layers: int
    state_layers: int
    kv_bytes_per_token: int
    state_bytes_per_layer: int
    state_bytes: int
    inputs: tuple[tuple[str, int], ...]
    arithmetic: tuple[str, ...]
    source: str = "built-in"
    active_params: int = 0          # parameters one token passes in prefill (0: inputs not given)
    attn_flops_per_token: int = 0   # full-attention FLOPs per query token per context token

    @property
    def params(self) -> dict[str, int]:
        """The formula inputs as a dict (total_layers included)."""
        return {"total_layers": self.total_layers, **dict(self.inputs)}

    @property
    def is_hybrid(self) -> bool:
        """True when the model keeps linear/sliding state besides full-attention KV."""
        return self.state_bytes > 0

    def chunk_bytes(self, block_tokens: int = 16) -> int:
        """Bytes of one full-attention KV chunk of `block_tokens` tokens."""
        return self.kv_bytes_per_token * block_tokens

    def state_chunk_ratio(self, block_tokens: int = 16) -> float:
        """One state checkpoint ÷ one chunk of `block_tokens` tokens (0.0 for dense models)."""
        return self.state_bytes / self.chunk_bytes(block_tokens)


def build_profile(
    name: str, family: str, total_layers: int, inputs: Mapping[str, int], source: str = "built-in"
) -> ModelProfile:
    """Compute a profile from its formula inputs; raises ValueError naming a missing/bad input."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; valid: {', '.join(FAMILIES)}")
    attn, state = FAMILIES[family]
    p: dict[str, int] = dict(_DEFAULTS[state])
    p.update(inputs)
    if state is None:
        p.setdefault("full_attn_layers", total_layers)
    needed = _needed(family)
    for key in needed:
        if key not in p:
            raise ValueError(f"{family} profile needs input {key!r}")
        v = p[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"input {key!r} must be a non-negative integer, got {v!r}")
    flop_keys = [k for k in flop_inputs(family) if k in p]
    for key in flop_keys:
        v = p[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"input {key!r} must be a non-negative integer, got {v!r}")
    extra = sorted(set(p) - set(needed) - set(flop_keys))
    if extra:
        raise ValueError(f"{family} profile does not use input(s) {', '.join(extra)}")
    if total_layers <= 0:
        raise ValueError(f"total_layers must be positive, got {total_layers}")
    lf = p["full_attn_layers"]
    ls = p.get("state_layers", 0)
    if lf <= 0:
        raise ValueError("a profile needs at least one full-attention layer (full_attn_layers > 0)")
    if lf + ls > total_layers:
        raise ValueError(
            f"full_attn_layers + state_layers = {lf} + {ls} exceeds total_layers {total_layers}"
        )

    lines: list[str] = []
    kvd = p["kv_dtype_bytes"]
    if attn == "gqa":
        kv = lf * p["kv_heads"] * p["head_dim"] * 2 * kvd
        lines.append(
            f"KV bytes/token = L_full·kv_heads·head_dim·2·dtype = "
            f"{lf}·{p['kv_heads']}·{p['head_dim']}·2·{kvd} = {_n(kv)}"
        )
    else:
        kv = lf * (p["kv_lora_rank"] + p["qk_rope_head_dim"]) * kvd
        lines.append(
            f"KV bytes/token = L_full·(kv_lora_rank+qk_rope_head_dim)·dtype = "
            f"{lf}·({p['kv_lora_rank']}+{p['qk_rope_head_dim']})·{kvd} = {_n(kv)}"
        )

    per_layer = 0
    if state == "gated-delta":
        hv, hk = p["linear_value_heads"], p["linear_key_heads"]
        dk, dv, k = p["linear_key_head_dim"], p["linear_value_head_dim"], p["conv_kernel"]
        rec = hv * dk * dv * p["state_dtype_bytes"]
        channels = 2 * hk * dk + hv * dv
        conv = channels * max(k - 1, 0) * p["conv_dtype_bytes"]
        per_layer = rec + conv
        lines.append(
            f"conv channels = 2·H_k·d_k + H_v·d_v = 2·{hk}·{dk} + {hv}·{dv} = {_n(channels)}"
        )
        lines.append(
            f"state/layer = H_v·d_k·d_v·{p['state_dtype_bytes']} + channels·(kernel−1)·"
            f"{p['conv_dtype_bytes']} = {hv}·{dk}·{dv}·{p['state_dtype_bytes']} + "
            f"{_n(channels)}·{k - 1}·{p['conv_dtype_bytes']} = {_n(rec)} + {_n(conv)} = {_n(per_layer)}"
        )
    elif state == "mamba2":
        h, hd, ds, g = p["mamba_heads"], p["mamba_head_dim"], p["ssm_state_size"], p["n_groups"]
        di, k = p["d_inner"], p["conv_kernel"]
        ssm = h * hd * ds * p["state_dtype_bytes"]
        channels = di + 2 * g * ds
        conv = channels * max(k - 1, 0) * p["conv_dtype_bytes"]
        per_layer = ssm + conv
        lines.append(
            f"state/layer = heads·head_dim·d_state·{p['state_dtype_bytes']} + "
            f"(d_inner+2·groups·d_state)·(kernel−1)·{p['conv_dtype_bytes']} = "
            f"{h}·{hd}·{ds}·{p['state_dtype_bytes']} + ({di}+2·{g}·{ds})·{k - 1}·"
            f"{p['conv_dtype_bytes']} = {_n(ssm)} + {_n(conv)} = {_n(per_layer)}"
        )
    elif state == "sliding":
        w = p["window_tokens"]
        per_layer = w * p["kv_heads"] * p["head_dim"] * 2 * kvd
        lines.append(
            f"window KV/layer = window·kv_heads·head_dim·2·dtype = "
            f"{w}·{p['kv_heads']}·{p['head_dim']}·2·{kvd} = {_n(per_layer)}"
        )
    state_bytes = ls * per_layer
    if state is not None:
        lines.append(
            f"state bytes = L_state·state/layer = {ls}·{_n(per_layer)} = {_n(state_bytes)} "
            f"({state_bytes / MIB:.1f} MiB)"
        )
    active, attn_flops = _prefill_compute(family, total_layers, p, flop_keys, lines)
    return ModelProfile(
        name=name,
        family=family,
        total_layers=total_layers,
        full_attn_layers=lf,
        state_layers=ls,
        kv_bytes_per_token=kv,
        state_bytes_per_layer=per_layer,
        state_bytes=state_bytes,
        inputs=tuple((key, p[key]) for key in (*needed, *flop_keys)),
        arithmetic=tuple(lines),
        source=source,
        active_params=active,
        attn_flops_per_token=attn_flops,
    )


def _prefill_compute(family: str, total_layers: int, p: dict[str, int], given: list[str],
                     lines: list[str]) -> tuple[int, int]:
    """(active_params, attn_flops_per_token) from the prefill-compute inputs (module doc), with
    their arithmetic appended to `lines`; (0, 0) when none is given."""
    if not given:
        return 0, 0
    attn, state = FAMILIES[family]
    missing = [k for k in _FLOP_REQUIRED[attn] if k not in p]
    if missing:
        raise ValueError(f"{family} profile: prefill-compute input {missing[0]!r} is missing "
                         f"(give all of {', '.join(_FLOP_REQUIRED[attn])} or none)")
    for key in given:
        if key in ("hidden_size", "attn_heads", "mlp_matrices") and p[key] <= 0:
            raise ValueError(f"input {key!r} must be positive, got {p[key]}")
    d, nq = p["hidden_size"], p["attn_heads"]
    lf, ls = p["full_attn_layers"], p.get("state_layers", 0)
    if attn == "gqa":
        hd, kvh = p["head_dim"], p["kv_heads"]
        attn_proj = d * hd * (2 * nq + 2 * kvh)
        lines.append(f"attention projections/layer = hidden·head_dim·(2·attn_heads+2·kv_heads) = "
                     f"{d}·{hd}·(2·{nq}+2·{kvh}) = {_n(attn_proj)}")
        d_qk = d_v = hd
    else:
        ql, kl, rope = p.get("q_lora_rank", 0), p["kv_lora_rank"], p["qk_rope_head_dim"]
        nope, dv = p["qk_nope_head_dim"], p["v_head_dim"]
        q = d * ql + ql * nq * (nope + rope) if ql else d * nq * (nope + rope)
        attn_proj = q + d * (kl + rope) + kl * nq * (nope + dv) + nq * dv * d
        lines.append(f"MLA projections/layer = q {_n(q)} + kv_a {d}·({kl}+{rope}) + kv_b {kl}·{nq}·({nope}+{dv})"
                     f" + o {nq}·{dv}·{d} = {_n(attn_proj)}")
        d_qk, d_v = nope + rope, dv
    mixer = 0
    if state == "gated-delta":
        hk, hv = p["linear_key_heads"], p["linear_value_heads"]
        dk, dvl = p["linear_key_head_dim"], p["linear_value_head_dim"]
        mixer = d * (2 * hk * dk + 2 * hv * dvl)
        lines.append(f"linear-attention projections/layer = hidden·(2·H_k·d_k+2·H_v·d_v) = "
                     f"{d}·(2·{hk}·{dk}+2·{hv}·{dvl}) = {_n(mixer)}")
    elif state == "mamba2":
        di, g, ds, h = p["d_inner"], p["n_groups"], p["ssm_state_size"], p["mamba_heads"]
        mixer = d * (2 * di + 2 * g * ds + h) + di * d
        lines.append(f"Mamba2 projections/layer = hidden·(2·d_inner+2·groups·d_state+heads)+d_inner·hidden = "
                     f"{d}·(2·{di}+2·{g}·{ds}+{h})+{di}·{d} = {_n(mixer)}")
    elif state == "sliding":
        mixer = attn_proj
    ml, mm, w = p.get("mlp_layers", total_layers), p.get("mlp_matrices", 3), p["mlp_active_width"]
    if ml > total_layers:
        raise ValueError(f"mlp_layers {ml} exceeds total_layers {total_layers}")
    mlp = ml * mm * d * w
    active = lf * attn_proj + ls * mixer + mlp
    lines.append(f"MLP = mlp_layers·matrices·hidden·active_width = {ml}·{mm}·{d}·{w} = {_n(mlp)}")
    lines.append(f"active params = {lf}·{_n(attn_proj)} + {ls}·{_n(mixer)} + {_n(mlp)} = {_n(active)} "
                 f"({active / 1e9:.2f} B)")
    attn_flops = lf * 2 * nq * (d_qk + d_v)
    lines.append(f"attention FLOPs/token/context token = L_full·2·attn_heads·(d_qk+d_v) = "
                 f"{lf}·2·{nq}·({d_qk}+{d_v}) = {_n(attn_flops)}")
    return active, attn_flops


def explain(profile: ModelProfile, block_tokens: int = 16) -> list[str]:
    """The arithmetic lines plus the chunk and ratio lines for `block_tokens`."""
    lines = list(profile.arithmetic)
    chunk = profile.chunk_bytes(block_tokens)
    lines.append(
        f"chunk bytes = KV bytes/token·block_tokens = {_n(profile.kv_bytes_per_token)}·{block_tokens}"
        f" = {_n(chunk)}"
    )
    if profile.is_hybrid:
        lines.append(
            f"state/chunk ratio = {_n(profile.state_bytes)} / {_n(chunk)} = "
            f"{profile.state_chunk_ratio(block_tokens):.1f}"
        )
    return lines


# --- built-ins (inputs only; every number is computed) ----------------------------------------

_GDN = "hybrid-gdn"
_BUILTINS: list[tuple[str, str, int, dict[str, int]]] = [
    # Qwen3.5-27B: 64 layers, every 4th full attention (GQA 4×256), 48 Gated-DeltaNet layers.
    ("qwen3.5-27b", _GDN, 64, dict(
        full_attn_layers=16, kv_heads=4, head_dim=256, state_layers=48, linear_value_heads=48,
        linear_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128, conv_kernel=4,
        hidden_size=5120, attn_heads=24, mlp_active_width=17408)),
    # Kimi-K3: 93 layers, 24 MLA (latent 512 + rope 64), 69 KDA layers with 96 heads of 128.
    ("kimi-k3", "mla-kda", 93, dict(
        full_attn_layers=24, kv_lora_rank=512, qk_rope_head_dim=64, state_layers=69,
        linear_value_heads=96, linear_key_heads=96, linear_key_head_dim=128,
        linear_value_head_dim=128, conv_kernel=4,
        # hidden 7168, 96 query heads, q_lora 1536, nope 128 / v 128, MoE of 8 routed + 1 shared
        # experts of 2048 (Kimi-K2's MoE; its first dense layer is counted as MoE: 1 of 93 layers)
        hidden_size=7168, attn_heads=96, q_lora_rank=1536, qk_nope_head_dim=128, v_head_dim=128,
        mlp_active_width=9 * 2048)),
    # Nemotron-H-8B: pattern of 52 = 24 Mamba2 + 4 attention + 24 MLP-only (squared-ReLU) layers.
    ("nemotron-h-8b", "mamba2-hybrid", 52, dict(
        full_attn_layers=4, kv_heads=8, head_dim=128, state_layers=24, mamba_heads=128,
        mamba_head_dim=64, ssm_state_size=128, n_groups=8, d_inner=8192, conv_kernel=4,
        hidden_size=4096, attn_heads=32, mlp_active_width=21504, mlp_layers=24, mlp_matrices=2)),
    # Gemma3-27B: 62 layers, every 6th global (10), 52 sliding with a 1024-token window.
    ("gemma3-27b", "sliding-window", 62, dict(
        full_attn_layers=10, kv_heads=16, head_dim=128, state_layers=52, window_tokens=1024,
        hidden_size=5376, attn_heads=32, mlp_active_width=21504)),
    # Qwen3-Next-80B-A3B: 48 layers, 12 full (GQA 2×256), 36 Gated-DeltaNet layers.
    ("qwen3-next-80b-a3b", _GDN, 48, dict(
        full_attn_layers=12, kv_heads=2, head_dim=256, state_layers=36, linear_value_heads=32,
        linear_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128, conv_kernel=4,
        # MoE: 10 routed experts + 1 shared, each 512 wide
        hidden_size=2048, attn_heads=16, mlp_active_width=11 * 512)),
    ("llama3-70b", "dense-gqa", 80, dict(kv_heads=8, head_dim=128, hidden_size=8192, attn_heads=64,
                                         mlp_active_width=28672)),
    ("qwen2-7b", "dense-gqa", 28, dict(kv_heads=4, head_dim=128, hidden_size=3584, attn_heads=28,
                                       mlp_active_width=18944)),
]

PROFILES: Registry[ModelProfile] = Registry("model profile")
for _name, _family, _layers, _inputs in _BUILTINS:
    PROFILES.add(_name, build_profile(_name, _family, _layers, _inputs))


def get_profile(name: str) -> ModelProfile:
    """A built-in profile by name (UnknownNameError lists the valid names)."""
    return PROFILES.get(name)


def resolve_profile(name_or_path: str | Path) -> ModelProfile:
    """A built-in name, else a path to a config.json / .toml (else the unknown-name error)."""
    text = str(name_or_path)
    if text in PROFILES:
        return PROFILES.get(text)
    p = Path(text)
    if p.is_file():
        return load_profile(p)
    # a path (a folder in it, or a profile file's suffix) that is not there is a missing file, not
    # an unknown built-in name
    if p.suffix.lower() in (".json", ".toml") or "/" in text or p.exists():
        what = "is a directory, not a config.json or .toml profile" if p.is_dir() else "file not found"
        raise InputError(text, None, None, f"{what} (a model is a built-in profile name or a config.json / "
                         f".toml path; built-ins: {', '.join(PROFILES.names())})")
    return PROFILES.get(text)


# --- loading from files --------------------------------------------------------------------

_DTYPE_BYTES = {
    "bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2,
    "float32": 4, "float": 4, "fp32": 4, "float8_e4m3fn": 1, "fp8": 1,
}


#: The largest value a model config's dimension or count may hold (no dimension of any model
#: comes near 2^31; a larger one is a damaged file and would overflow the byte counts).
MAX_DIMENSION = 2**31

class _Source:
    """A parsed config file with its text, so errors can point at the line of a key."""

    def __init__(self, path: Path, text: str, data: Mapping[str, Any]) -> None:
        self.path = path
        self.text = text
        self.data = data

    def line_of(self, key: str) -> int | None:
        leaf = key.rsplit(".", 1)[-1]
        m = re.search(rf'^\s*"?{re.escape(leaf)}"?\s*[:=]', self.text, re.MULTILINE)
        if m is None:
            m = re.search(rf'"{re.escape(leaf)}"\s*:', self.text)
        return None if m is None else self.text.count("\n", 0, m.start()) + 1

    def error(self, key: str, message: str) -> InputError:
        return InputError(str(self.path), self.line_of(key), key, message)

    def get(self, key: str, mapping: Mapping[str, Any] | None = None) -> Any:
        return (self.data if mapping is None else mapping).get(key.rsplit(".", 1)[-1])

    def int_(self, key: str, why: str, mapping: Mapping[str, Any] | None = None) -> int:
        v = self.get(key, mapping)
        if v is None:
            raise self.error(key, f"missing; needed for {why}")
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"expected an integer, got {v!r}")
        if not 0 <= v <= MAX_DIMENSION:
            raise self.error(key, f"{v} is outside [0, {MAX_DIMENSION:,}] (a model dimension or count)")
        return v

    def opt_int(self, key: str, mapping: Mapping[str, Any] | None = None) -> int | None:
        v = self.get(key, mapping)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"expected an integer, got {v!r}")
        if not 0 <= v <= MAX_DIMENSION:
            raise self.error(key, f"{v} is outside [0, {MAX_DIMENSION:,}] (a model dimension or count)")
        return v

    def dtype_bytes(self, *keys: str) -> int | None:
        for key in keys:
            v = self.get(key)
            if v is None:
                continue
            if not isinstance(v, str) or v.lower().removeprefix("torch.") not in _DTYPE_BYTES:
                raise self.error(key, f"unknown dtype {v!r}; known: {', '.join(sorted(_DTYPE_BYTES))}")
            return _DTYPE_BYTES[v.lower().removeprefix("torch.")]
        return None


def load_profile(path: str | Path, name: str | None = None) -> ModelProfile:
    """A profile from a Hugging Face `config.json` or a kvwear TOML file (see module doc).

    The file type is chosen by suffix (.toml → TOML, anything else → JSON). Missing or
    malformed keys raise InputError naming the file, line and key.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InputError(str(p), None, None, f"cannot read model config: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(p), None, None, f"not a text (UTF-8) file: byte {exc.start} is not UTF-8") from None
    if p.suffix.lower() == ".toml":
        return _from_toml(p, text, name)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(str(p), exc.lineno, None, f"not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise InputError(str(p), 1, None, "a model config.json must hold one JSON object")
    return profile_from_hf_config(data, path=p, text=text, name=name)


def _from_toml(p: Path, text: str, name: str | None) -> ModelProfile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(p), None, None, f"not valid TOML: {exc}") from None
    src = _Source(p, text, data)
    family = data.get("family")
    if family not in FAMILIES:
        raise src.error("family", f"must be one of {', '.join(FAMILIES)}, got {family!r}")
    total = src.int_("total_layers", f"a {family} profile")
    allowed = {"name", "family", "total_layers", "full_attn_layers", *family_inputs(family),
               *flop_inputs(family)}
    for key in data:
        if key not in allowed:
            raise src.error(key, f"not an input of a {family} profile; inputs: "
                            f"{', '.join(sorted(allowed - {'name', 'family'}))}")
    inputs = {k: src.int_(k, f"a {family} profile") for k in data
              if k not in ("name", "family", "total_layers")}
    prof_name = name or str(data.get("name") or p.stem)
    try:
        return build_profile(prof_name, family, total, inputs, source=str(p))
    except ValueError as exc:
        m = re.search(r"'(\w+)'", str(exc))
        raise src.error(m.group(1) if m else "family", str(exc)) from None


def profile_from_hf_config(
    data: Mapping[str, Any], path: str | Path = "<config>", text: str | None = None,
    name: str | None = None,
) -> ModelProfile:
    """A profile from a parsed Hugging Face config (top level merged with `text_config`).

    Recognised, in this order: Kimi-Linear (`linear_attn_config` → mla-kda), Nemotron-H
    (`hybrid_override_pattern` → mamba2-hybrid), Qwen3-Next/Qwen3.5 (`linear_num_value_heads` or
    "linear_attention" in `layer_types` → hybrid-gdn), Gemma3 (`sliding_window` with
    `layer_types` or `sliding_window_pattern` → sliding-window), else dense (MLA if
    `kv_lora_rank`, otherwise GQA).
    """
    p = Path(path)
    merged: dict[str, Any] = dict(data)
    for sub in ("text_config", "llm_config"):
        if isinstance(data.get(sub), Mapping):
            merged.update(data[sub])
    src = _Source(p, text if text is not None else json.dumps(data, indent=1), merged)
    prof_name = name or _default_name(p, merged)
    L = src.int_("num_hidden_layers", "any profile")
    layer_types = merged.get("layer_types")
    if layer_types is not None and (
        not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types)
    ):
        raise src.error("layer_types", "expected a list of layer-type strings")
    model_dtype = src.dtype_bytes("torch_dtype", "dtype") or 2

    if L < 1:
        raise src.error("num_hidden_layers", f"{L}; a model has at least one layer")

    def gqa(why: str) -> dict[str, int]:
        heads = src.opt_int("num_attention_heads")
        given = src.opt_int("num_key_value_heads")
        kvh = heads if given is None else given        # absent: MHA (one KV head per query head)
        if kvh is None:
            raise src.error("num_key_value_heads", f"missing; needed for {why}")
        # GQA shares each KV head among attn_heads / kv_heads query heads: 1 ≤ kv_heads ≤ attn_heads,
        # and kv_heads divides attn_heads (0 is not "absent": it would turn a GQA model into MHA)
        if kvh < 1 or (heads is not None and (heads < 1 or kvh > heads or heads % kvh)):
            raise src.error("num_key_value_heads", f"{kvh} with num_attention_heads {heads}: GQA needs "
                            f"1 ≤ num_key_value_heads ≤ num_attention_heads, dividing it")
        # 0 is not "absent" either: it would take hidden_size / heads in its place
        hd = src.opt_int("head_dim")
        hd = src.opt_int("attention_head_dim") if hd is None else hd
        if hd is None:
            hidden = src.opt_int("hidden_size")
            if hidden is None or not heads:
                raise src.error("head_dim", f"missing (and no hidden_size/num_attention_heads); "
                                f"needed for {why}")
            hd = hidden // heads
        if hd < 1:
            raise src.error("head_dim", f"{hd}; a head has at least one dimension")
        return {"kv_heads": kvh, "head_dim": hd, "kv_dtype_bytes": model_dtype}

    def mla(why: str) -> dict[str, int]:
        return {"kv_lora_rank": src.int_("kv_lora_rank", why),
                "qk_rope_head_dim": src.int_("qk_rope_head_dim", why), "kv_dtype_bytes": model_dtype}

    def split_by_types(full_name: str, state_name: str) -> tuple[int, int]:
        assert layer_types is not None
        if len(layer_types) != L:
            raise src.error("layer_types", f"has {len(layer_types)} entries, num_hidden_layers is {L}")
        unknown = sorted(set(layer_types) - {full_name, state_name})
        if unknown:
            raise src.error("layer_types", f"unknown layer type(s) {unknown}; expected "
                            f"{full_name!r} or {state_name!r}")
        return layer_types.count(full_name), layer_types.count(state_name)

    def compute(mla_attn: bool, mlp_layers: int | None = None) -> dict[str, int]:
        """The prefill-compute inputs when the config has them all (else none: FLOPs unknown)."""
        d, nq = src.opt_int("hidden_size"), src.opt_int("num_attention_heads")
        moe = src.opt_int("moe_intermediate_size")
        top_k = src.opt_int("num_experts_per_tok") or src.opt_int("num_experts_per_token")
        if moe and top_k:
            shared = src.opt_int("n_shared_experts") or src.opt_int("num_shared_experts") or 0
            width: int | None = moe * (top_k + shared) + (src.opt_int("shared_expert_intermediate_size") or 0)
        else:
            width = src.opt_int("intermediate_size")
        out = {"hidden_size": d, "attn_heads": nq, "mlp_active_width": width}
        if mla_attn:
            out |= {"qk_nope_head_dim": src.opt_int("qk_nope_head_dim"), "v_head_dim": src.opt_int("v_head_dim"),
                    "q_lora_rank": src.opt_int("q_lora_rank") or 0}
        if mlp_layers is not None:
            out["mlp_layers"] = mlp_layers
        act = merged.get("mlp_hidden_act") or merged.get("hidden_act")
        if act == "relu2":  # squared ReLU: up and down projections, no gate
            out["mlp_matrices"] = 2
        if any(v is None or v == 0 for k, v in out.items() if k != "q_lora_rank"):
            return {}
        return {k: int(v) for k, v in out.items() if v is not None}

    def build(family: str, inputs: dict[str, int], key: str) -> ModelProfile:
        try:
            return build_profile(prof_name, family, L, inputs, source=str(p))
        except ValueError as exc:
            raise src.error(key, str(exc)) from None

    lac = merged.get("linear_attn_config")
    if lac is not None:  # Kimi-Linear: MLA + KDA
        why = "an MLA+KDA (Kimi-Linear) profile"
        if not isinstance(lac, Mapping):
            raise src.error("linear_attn_config", "expected an object")
        full_ids, kda_ids = lac.get("full_attn_layers"), lac.get("kda_layers")
        for key, ids in (("full_attn_layers", full_ids), ("kda_layers", kda_ids)):
            if ids is not None and not isinstance(ids, list):
                raise src.error(f"linear_attn_config.{key}", "expected a list of layer numbers")
        if full_ids is None and kda_ids is None:
            raise src.error("linear_attn_config.full_attn_layers",
                            "missing (and no kda_layers); needed to count layers")
        n_full = len(full_ids) if full_ids is not None else L - len(kda_ids or [])
        n_kda = len(kda_ids) if kda_ids is not None else L - n_full
        heads = src.int_("linear_attn_config.num_heads", why, lac)
        hdim = src.int_("linear_attn_config.head_dim", why, lac)
        inputs = {"full_attn_layers": n_full, **mla(why), "state_layers": n_kda,
                  "linear_value_heads": heads, "linear_key_heads": heads,
                  "linear_key_head_dim": hdim, "linear_value_head_dim": hdim,
                  "conv_kernel": src.int_("linear_attn_config.short_conv_kernel_size", why, lac),
                  **compute(True)}
        return build("mla-kda", inputs, "linear_attn_config")

    pattern = merged.get("hybrid_override_pattern")
    if pattern is not None:  # Nemotron-H: M = Mamba2, * = attention, - = MLP, E = MoE
        why = "a Mamba2 hybrid (Nemotron-H) profile"
        if not isinstance(pattern, str) or len(pattern) != L:
            raise src.error("hybrid_override_pattern",
                            f"expected a string of num_hidden_layers={L} characters, got {pattern!r}")
        heads = src.int_("mamba_num_heads", why)
        hdim = src.int_("mamba_head_dim", why)
        inputs = {"full_attn_layers": pattern.count("*"), **gqa(why),
                  "state_layers": pattern.count("M"), "mamba_heads": heads, "mamba_head_dim": hdim,
                  "ssm_state_size": src.int_("ssm_state_size", why),
                  "n_groups": src.int_("n_groups", why),
                  # The Nemotron-H mixer's inner width is heads·head_dim (= expand·hidden_size).
                  "d_inner": heads * hdim,
                  "conv_kernel": src.int_("conv_kernel", why),
                  "state_dtype_bytes": src.dtype_bytes("mamba_ssm_cache_dtype") or model_dtype,
                  "conv_dtype_bytes": model_dtype, **compute(False, pattern.count("-"))}
        return build("mamba2-hybrid", inputs, "hybrid_override_pattern")

    if merged.get("linear_num_value_heads") is not None or (
        layer_types is not None and "linear_attention" in layer_types
    ):  # Qwen3-Next / Qwen3.5: GQA + Gated-DeltaNet
        why = "a Gated-DeltaNet hybrid (Qwen3-Next) profile"
        if layer_types is not None:
            n_full, n_lin = split_by_types("full_attention", "linear_attention")
        else:
            interval = src.opt_int("full_attention_interval")
            if not interval:
                raise src.error("layer_types", "missing (and no full_attention_interval); needed to "
                                "count full-attention layers")
            n_full = sum(1 for i in range(L) if (i + 1) % interval == 0)
            n_lin = L - n_full
        inputs = {"full_attn_layers": n_full, **gqa(why), "state_layers": n_lin,
                  "linear_value_heads": src.int_("linear_num_value_heads", why),
                  "linear_key_heads": src.int_("linear_num_key_heads", why),
                  "linear_key_head_dim": src.int_("linear_key_head_dim", why),
                  "linear_value_head_dim": src.int_("linear_value_head_dim", why),
                  "conv_kernel": src.int_("linear_conv_kernel_dim", why), **compute(False)}
        return build("hybrid-gdn", inputs, "linear_num_value_heads")

    window = merged.get("sliding_window")
    has_pattern = merged.get("sliding_window_pattern") is not None or (
        layer_types is not None and "sliding_attention" in layer_types)
    if window is not None and merged.get("use_sliding_window") is not False:
        why = "a sliding-window (Gemma3) profile"
        window = src.int_("sliding_window", why)
        if not has_pattern:
            raise src.error("sliding_window", "set on every layer (no layer_types or "
                            "sliding_window_pattern): a profile needs full-attention layers")
        if layer_types is not None:
            n_full, n_swa = split_by_types("full_attention", "sliding_attention")
        else:
            every = src.int_("sliding_window_pattern", why)
            if every <= 0:
                raise src.error("sliding_window_pattern", f"must be positive, got {every}")
            n_full = sum(1 for i in range(L) if (i + 1) % every == 0)
            n_swa = L - n_full
        inputs = {"full_attn_layers": n_full, **gqa(why), "state_layers": n_swa,
                  "window_tokens": window, **compute(False)}
        return build("sliding-window", inputs, "sliding_window")

    if merged.get("kv_lora_rank") is not None:
        return build("dense-mla", {**mla("a dense MLA profile"), **compute(True)}, "kv_lora_rank")
    return build("dense-gqa", {**gqa("a dense GQA profile"), **compute(False)}, "num_key_value_heads")


def _default_name(p: Path, cfg: Mapping[str, Any]) -> str:
    named = cfg.get("_name_or_path")
    if isinstance(named, str) and named.strip("/"):
        return named.strip("/").rsplit("/", 1)[-1]
    if p.stem == "config" and p.parent.name:
        return p.parent.name
    return p.stem
