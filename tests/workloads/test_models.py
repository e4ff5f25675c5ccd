"""Model profiles: the DESIGN.md table from the formulas, config.json/TOML loading, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvwear.errors import InputError, UnknownNameError
from kvwear.harness.cli.main import app
from kvwear.workloads.models import (
    MIB,
    PROFILES,
    ModelProfile,
    build_profile,
    explain,
    get_profile,
    load_profile,
    profile_from_hf_config,
    resolve_profile,
)

# DESIGN.md "Model profiles": name, full-attn layers, total layers, KV bytes/token, state MiB, ratio
DESIGN_TABLE = [
    ("qwen3.5-27b", 16, 64, 65_536, 146.8, 146.8),
    ("kimi-k3", 24, 93, 27_648, 428.6, 1015.8),
    ("nemotron-h-8b", 4, 52, 16_384, 49.4, 197.6),
    ("gemma3-27b", 10, 62, 81_920, 416.0, 332.8),
    ("qwen3-next-80b-a3b", 12, 48, 24_576, 73.7, 196.5),
    ("llama3-70b", 80, 80, 327_680, None, None),
    ("qwen2-7b", 28, 28, 57_344, None, None),
]


@pytest.mark.parametrize(("name", "full", "total", "kv", "state_mib", "ratio"), DESIGN_TABLE)
def test_builtin_matches_design_table(
    name: str, full: int, total: int, kv: int, state_mib: float | None, ratio: float | None
) -> None:
    p = get_profile(name)
    assert (p.full_attn_layers, p.total_layers, p.kv_bytes_per_token) == (full, total, kv)
    assert p.chunk_bytes(16) == kv * 16
    if state_mib is None:
        assert not p.is_hybrid and p.state_bytes == 0 and p.state_chunk_ratio() == 0.0
    else:
        assert p.is_hybrid
        assert p.state_bytes == p.state_layers * p.state_bytes_per_layer
        assert round(p.state_bytes / MIB, 1) == pytest.approx(state_mib, abs=0.05)
        assert p.state_chunk_ratio(16) == pytest.approx(ratio, abs=0.05)


def test_seed_figures_147_and_1016() -> None:
    assert get_profile("qwen3.5-27b").state_chunk_ratio(16) == pytest.approx(146.8, abs=0.1)
    assert get_profile("kimi-k3").state_chunk_ratio(16) == pytest.approx(1015.8, abs=0.1)
    # Exact bytes from DESIGN's per-layer arithmetic.
    assert get_profile("qwen3.5-27b").state_bytes == 153_944_064
    assert get_profile("kimi-k3").state_bytes == 449_372_160
    assert get_profile("nemotron-h-8b").state_bytes_per_layer == 2_158_592
    assert get_profile("qwen3-next-80b-a3b").state_bytes_per_layer == 2_146_304
    # The ratio scales inversely with the chunk size.
    assert get_profile("kimi-k3").state_chunk_ratio(64) == pytest.approx(1015.8 / 4, abs=0.05)


def test_numbers_follow_the_inputs() -> None:
    """Changing one input changes the result by the formula (nothing is stored)."""
    base = get_profile("qwen3.5-27b")
    doubled = build_profile("x", "hybrid-gdn", 64, {**dict(base.inputs), "kv_heads": 8})
    assert doubled.kv_bytes_per_token == 2 * base.kv_bytes_per_token
    fp16_state = build_profile("y", "hybrid-gdn", 64, {**dict(base.inputs), "state_dtype_bytes": 2})
    assert fp16_state.state_bytes_per_layer == 48 * 128 * 128 * 2 + 10_240 * 3 * 2


def test_cli_models_list_shows_seed_ratios() -> None:
    res = CliRunner().invoke(app, ["models", "list"], terminal_width=200)
    assert res.exit_code == 0, res.output
    rows = {line.split("│")[1].strip(): line for line in res.output.splitlines() if "│" in line}
    assert "146.8" in rows["qwen3.5-27b"] and "65,536" in rows["qwen3.5-27b"]
    assert "1015.8" in rows["kimi-k3"] and "428.6" in rows["kimi-k3"]
    assert set(PROFILES.names()) <= set(rows)
    res64 = CliRunner().invoke(app, ["models", "list", "--block-tokens", "64"], terminal_width=200)
    assert "254.0" in res64.output  # 449,372,160 / (27,648·64) = 253.96


def test_cli_models_show_explains_arithmetic() -> None:
    res = CliRunner().invoke(app, ["models", "show", "kimi-k3"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "kv_lora_rank" in res.output and "512" in res.output
    assert "69·6,512,640 = 449,372,160" in res.output
    assert "1015.8" in res.output
    bad = CliRunner().invoke(app, ["models", "show", "no-such-model"])
    assert bad.exit_code != 0
    assert "qwen3.5-27b" in str(bad.exception)  # the error lists the valid names


def test_unknown_name_lists_valid() -> None:
    with pytest.raises(UnknownNameError) as err:
        get_profile("gpt-5")
    assert "kimi-k3" in str(err.value) and "llama3-70b" in str(err.value)


# --- config.json in the style of each family (hand-written excerpts, real key names) -----------


def _write(tmp_path: Path, name: str, cfg: dict[str, Any]) -> Path:
    d = tmp_path / name
    d.mkdir()
    p = d / "config.json"
    p.write_text(json.dumps(cfg, indent=2))
    return p


def _same_numbers(a: ModelProfile, b: ModelProfile) -> None:
    assert a.family == b.family
    assert (a.total_layers, a.full_attn_layers, a.state_layers) == (
        b.total_layers, b.full_attn_layers, b.state_layers)
    assert a.kv_bytes_per_token == b.kv_bytes_per_token
    assert a.state_bytes == b.state_bytes
    assert a.state_chunk_ratio() == b.state_chunk_ratio()


QWEN35_TEXT: dict[str, Any] = {
    "model_type": "qwen3_5_text", "hidden_size": 5120, "num_hidden_layers": 64,
    "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16,
    "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 48,
    "dtype": "bfloat16",
}


def test_config_qwen35_text_config_layer_types(tmp_path: Path) -> None:
    p = _write(tmp_path, "Qwen3.5-27B", {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "text_config": QWEN35_TEXT, "vision_config": {"depth": 27},
    })
    prof = load_profile(p)
    assert prof.name == "Qwen3.5-27B" and prof.source == str(p)
    _same_numbers(prof, get_profile("qwen3.5-27b"))


QWEN3_NEXT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "num_experts": 512,
    "torch_dtype": "bfloat16",
}


def test_config_qwen3_next_interval(tmp_path: Path) -> None:
    p = _write(tmp_path, "Qwen3-Next-80B-A3B-Instruct", QWEN3_NEXT)
    _same_numbers(load_profile(p), get_profile("qwen3-next-80b-a3b"))


def _kimi(layers: int, full: list[int]) -> dict[str, Any]:
    return {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
        "hidden_size": 7168, "num_hidden_layers": layers, "num_attention_heads": 96,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "mla_use_nope": True, "torch_dtype": "bfloat16",
        "linear_attn_config": {
            "full_attn_layers": full,
            "kda_layers": [i for i in range(1, layers + 1) if i not in full],
            "num_heads": 96, "head_dim": 128, "short_conv_kernel_size": 4,
        },
    }


def test_config_kimi_linear_style(tmp_path: Path) -> None:
    full = [*(i for i in range(1, 94) if i % 4 == 0)][:23]
    full.append(93)
    p = _write(tmp_path, "kimi-k3-cfg", _kimi(93, full))
    _same_numbers(load_profile(p, name="k3"), get_profile("kimi-k3"))


NEMOTRON_H_8B: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "hidden_size": 4096, "num_hidden_layers": 52, "num_attention_heads": 32,
    "num_key_value_heads": 8, "attention_head_dim": 128,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
    "conv_kernel": 4, "expand": 2, "chunk_size": 128, "torch_dtype": "bfloat16",
}


def test_config_nemotron_h(tmp_path: Path) -> None:
    _same_numbers(load_profile(_write(tmp_path, "Nemotron-H-8B-Base-8K", NEMOTRON_H_8B)),
                  get_profile("nemotron-h-8b"))
    # An fp32 SSM cache dtype doubles the SSM part of the state, not the conv part.
    fp32 = load_profile(_write(tmp_path, "fp32", {**NEMOTRON_H_8B, "mamba_ssm_cache_dtype": "float32"}))
    assert fp32.state_bytes_per_layer == 128 * 64 * 128 * 4 + (8192 + 2 * 8 * 128) * 3 * 2


GEMMA3_TEXT: dict[str, Any] = {
    "model_type": "gemma3_text", "hidden_size": 5376, "num_hidden_layers": 62,
    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
    "sliding_window": 1024, "sliding_window_pattern": 6, "query_pre_attn_scalar": 168,
}


def test_config_gemma3_pattern_and_layer_types(tmp_path: Path) -> None:
    a = load_profile(_write(tmp_path, "gemma-3-27b-it", {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": GEMMA3_TEXT, "torch_dtype": "bfloat16"}))
    _same_numbers(a, get_profile("gemma3-27b"))
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(62)]
    text = {k: v for k, v in GEMMA3_TEXT.items() if k != "sliding_window_pattern"}
    b = load_profile(_write(tmp_path, "gemma3-types", {"text_config": {**text, "layer_types": types}}))
    _same_numbers(b, get_profile("gemma3-27b"))


def test_config_dense_llama_and_qwen2(tmp_path: Path) -> None:
    llama = load_profile(_write(tmp_path, "Meta-Llama-3-70B", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "torch_dtype": "bfloat16"}))
    _same_numbers(llama, get_profile("llama3-70b"))
    qwen2 = load_profile(_write(tmp_path, "Qwen2-7B", {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "sliding_window": 131072, "use_sliding_window": False, "max_window_layers": 28,
        "torch_dtype": "bfloat16"}))
    _same_numbers(qwen2, get_profile("qwen2-7b"))
    mla = profile_from_hf_config({"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64})
    assert (mla.family, mla.kv_bytes_per_token) == ("dense-mla", 61 * 576 * 2)


# --- TOML ------------------------------------------------------------------------------------


MY_K3_TOML = (
    '# a user profile\nname = "my-k3"\nfamily = "mla-kda"\ntotal_layers = 93\n'
    "full_attn_layers = 24\nkv_lora_rank = 512\nqk_rope_head_dim = 64\nstate_layers = 69\n"
    "linear_value_heads = 96\nlinear_key_heads = 96\nlinear_key_head_dim = 128\n"
    "linear_value_head_dim = 128\nconv_kernel = 4\n"
)


def test_toml_profile_and_cli(tmp_path: Path) -> None:
    p = tmp_path / "my-k3.toml"
    p.write_text(MY_K3_TOML)
    prof = load_profile(p)
    assert prof.name == "my-k3"
    _same_numbers(prof, get_profile("kimi-k3"))
    assert resolve_profile(str(p)).state_bytes == prof.state_bytes
    assert explain(prof)[-1].endswith("= 1015.8")
    runner = CliRunner()
    shown = runner.invoke(app, ["models", "show", str(p)], terminal_width=200)
    assert shown.exit_code == 0 and "1015.8" in shown.output
    listed = runner.invoke(app, ["models", "list", "--config", str(p)], terminal_width=200)
    assert listed.exit_code == 0 and "my-k3" in listed.output


# --- bad input -------------------------------------------------------------------------------


def test_missing_key_names_file_line_field(tmp_path: Path) -> None:
    cfg = {k: v for k, v in QWEN35_TEXT.items() if k != "linear_num_key_heads"}
    p = _write(tmp_path, "broken", cfg)
    with pytest.raises(InputError) as err:
        load_profile(p)
    assert err.value.field == "linear_num_key_heads" and err.value.path == str(p)
    assert "missing" in str(err.value)


def test_bad_values_point_at_their_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "strhead", {**NEMOTRON_H_8B, "mamba_head_dim": "64"})
    with pytest.raises(InputError) as err:
        load_profile(p)
    assert err.value.field == "mamba_head_dim"
    assert err.value.line is not None
    assert '"mamba_head_dim"' in p.read_text().splitlines()[err.value.line - 1]

    p2 = _write(tmp_path, "short-pattern", {**NEMOTRON_H_8B, "hybrid_override_pattern": "M-M*-"})
    with pytest.raises(InputError, match="52 characters"):
        load_profile(p2)

    types = QWEN35_TEXT["layer_types"][:-1]
    p3 = _write(tmp_path, "types", {**QWEN35_TEXT, "layer_types": types})
    with pytest.raises(InputError, match="63 entries"):
        load_profile(p3)

    kimi = _kimi(93, [4, 8])
    del kimi["linear_attn_config"]["short_conv_kernel_size"]
    with pytest.raises(InputError) as err:
        load_profile(_write(tmp_path, "kimi-broken", kimi))
    assert err.value.field == "linear_attn_config.short_conv_kernel_size"


def test_all_sliding_and_non_json(tmp_path: Path) -> None:
    mistral = _write(tmp_path, "mistral", {
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "hidden_size": 4096, "sliding_window": 4096})
    with pytest.raises(InputError, match="full-attention layers"):
        load_profile(mistral)
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "num_hidden_layers": 4,\n  oops\n}\n')
    with pytest.raises(InputError) as err:
        load_profile(bad)
    assert err.value.line == 3
    with pytest.raises(InputError, match="cannot read"):
        load_profile(tmp_path / "absent.json")


def test_bad_toml(tmp_path: Path) -> None:
    p = tmp_path / "x.toml"
    p.write_text('family = "hybrid-gdn"\ntotal_layers = 64\nkv_heads = 4\nhead_dimm = 256\n')
    with pytest.raises(InputError) as err:
        load_profile(p)
    assert (err.value.field, err.value.line) == ("head_dimm", 4)
    p.write_text('family = "transformer"\ntotal_layers = 4\n')
    with pytest.raises(InputError, match="must be one of") as err:
        load_profile(p)
    assert err.value.line == 1
    p.write_text('family = "dense-gqa"\ntotal_layers = 4\nkv_heads = 2\n')
    with pytest.raises(InputError, match="head_dim") as err:
        load_profile(p)
    assert err.value.field == "head_dim"
    p.write_text('family = "hybrid-gdn"\ntotal_layers = 4\nfull_attn_layers = 3\nkv_heads = 2\n'
                 "head_dim = 8\nstate_layers = 3\nlinear_value_heads = 1\nlinear_key_heads = 1\n"
                 "linear_key_head_dim = 1\nlinear_value_head_dim = 1\nconv_kernel = 4\n")
    with pytest.raises(InputError, match="exceeds total_layers"):
        load_profile(p)


# --- prefill compute (Marconi's FLOPs) ---------------------------------------------------------


def test_active_params_and_attention_flops_from_the_architecture(tmp_path: Path) -> None:
    """Projections only (no embeddings): Llama3-70B 68.5 B of its 70.6 B; Qwen3-Next-80B-A3B 2.8 B
    active ("A3B" with its 0.3 B of embeddings); attention FLOPs = L_full·2·heads·(d_qk + d_v)."""
    llama = get_profile("llama3-70b")
    assert llama.active_params == 80 * (8192 * 128 * (2 * 64 + 2 * 8) + 3 * 8192 * 28672)
    assert llama.attn_flops_per_token == 80 * 2 * 64 * 256
    assert get_profile("qwen3-next-80b-a3b").active_params == pytest.approx(2.79e9, rel=0.01)
    assert get_profile("qwen2-7b").active_params == pytest.approx(6.53e9, rel=0.01)
    k3 = get_profile("kimi-k3")
    assert k3.attn_flops_per_token == 24 * 2 * 96 * (192 + 128)  # MLA: d_qk = nope + rope
    assert any("active params" in line for line in explain(k3))
    # the same numbers from config.json keys (MoE: routed + shared experts)
    nxt = load_profile(_write(tmp_path, "Qwen3-Next-80B-A3B-Instruct", {
        "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "intermediate_size": 5120}))
    assert nxt.active_params == get_profile("qwen3-next-80b-a3b").active_params
    nem = load_profile(_write(tmp_path, "nemotron", {**NEMOTRON_H_8B, "intermediate_size": 21504,
                                                     "mlp_hidden_act": "relu2"}))
    assert nem.active_params == get_profile("nemotron-h-8b").active_params
    # a config without them has no FLOPs (0: unknown), and says nothing false
    assert load_profile(_write(tmp_path, "plain", {**NEMOTRON_H_8B})).active_params == 0


def test_toml_prefill_compute_inputs_are_all_or_none(tmp_path: Path) -> None:
    base = ('family = "dense-gqa"\ntotal_layers = 80\nkv_heads = 8\nhead_dim = 128\n')
    p = tmp_path / "l.toml"
    p.write_text(base + "hidden_size = 8192\nattn_heads = 64\nmlp_active_width = 28672\n")
    assert load_profile(p).active_params == get_profile("llama3-70b").active_params
    p.write_text(base + "hidden_size = 8192\n")
    with pytest.raises(InputError, match="attn_heads"):
        load_profile(p)
