"""cost/hf_config.py on the families of 2025 (issue 34): Qwen3, Phi-3, Gemma-3, gpt-oss and
Llama-4, and the keys transformers 5 writes (rope_parameters, dtype, Qwen-MoE's
num_local_experts).

The configs in tests/data/hf (README.md there names each Hub repository) were written by hand
with the published values. Every parameter count below is derived by hand from the config's
sizes, the arithmetic in the comment, and must equal paraplan's exactly: Qwen3's and Gemma-3's
q_norm/k_norm (ModelSpec.qk_norm), gpt-oss's attention sinks and expert and router biases
(ModelSpec.attention_sinks, expert_bias) included.
"""

import json
from pathlib import Path

import pytest

from paraplan.cost.errors import InstanceError
from paraplan.cost.flops import active_params, model_params
from paraplan.cost.hf_config import model_from_hf_config
from paraplan.cost.specs import Mlp

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def load(stem: str, **kw):
    return model_from_hf_config(HF / stem / "config.json", **kw)


def config(stem: str, **changes) -> dict:
    """The bundled config of `stem` with `changes` (None deletes a key)."""
    raw = json.loads((HF / stem / "config.json").read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw, indent=2), encoding="utf-8")
    return path


def refusal(path: Path, **kw) -> InstanceError:
    with pytest.raises(InstanceError) as info:
        model_from_hf_config(path, **kw)
    message = str(info.value)
    assert message.startswith(f"{path}: {info.value.field}: ") and "(fix: " in message
    assert "\n" not in message
    return info.value


def test_qwen3_dense():
    # Qwen3-8B (Qwen/Qwen3-8B): 36 layers, 4,096 wide, 32 query heads of 128, 8 kv heads,
    # intermediate 12,288, vocabulary 151,936, untied, context 40,960; no sliding window
    # (use_sliding_window false). Hand count: embeddings 2 * 151936 * 4096 = 1,244,659,712; per
    # layer q 4096*4096 + k, v 2*4096*1024 + o 4096*4096 = 41,943,040, MLP 3*4096*12288 =
    # 150,994,944, two RMSNorms 8,192, q_norm and k_norm 2*128 = 256: 192,946,432; x 36 =
    # 6,946,071,552; final norm 4,096: 8,190,735,360 (the card's 8.2B), q_norm/k_norm
    # included (ModelSpec.qk_norm), so nothing is left unpriced.
    m = load("qwen3-8b")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab, m.seq_len) == (
        36, 4096, 32, 8, 128, 12288, 151936, 40960)
    assert m.mlp is Mlp.SWIGLU and not m.tied_embeddings and not m.qkv_bias
    assert m.sliding_window_tokens is None and m.qk_norm
    assert model_params(m) == 8_190_735_360
    assert m.unmodelled == ()


def test_qwen3_head_dim_defaults_to_128(tmp_path):
    # Qwen3Config's head_dim default is 128, not hidden_size // heads (here 4096 / 32 = 128 too,
    # so the test widens the model to 5,120: the default must stay 128)
    m = model_from_hf_config(write(tmp_path, config("qwen3-8b", head_dim=None, hidden_size=5120)))
    assert m.head_dim == 128 and m.q_hidden == 4096


def test_phi3_mini():
    # Phi-3-mini-4k (microsoft/Phi-3-mini-4k-instruct): 32 layers, 3,072 wide, 32 heads, 32 kv
    # heads, intermediate 8,192 (fused gate_up_proj: SwiGLU), vocabulary 32,064, untied,
    # context 4,096, a 2,047-token sliding window in every layer (Phi3Attention). Hand count:
    # embeddings 2 * 32064 * 3072 = 197,001,216; per layer qkv 3072*9216 = 28,311,552, o
    # 3072^2 = 9,437,184, MLP 3*3072*8192 = 75,497,472, two RMSNorms 6,144: 113,252,352; x 32 =
    # 3,624,075,264; final norm 3,072: 3,821,079,552 (the card's 3.8B)
    m = load("phi-3-mini-4k")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab, m.seq_len) == (
        32, 3072, 32, 32, 8192, 32064, 4096)
    assert (m.sliding_window_tokens, m.sliding_window_layers) == (2047, 32)
    assert model_params(m) == 3_821_079_552
    assert m.unmodelled == ()


def test_gemma3_local_and_global_layers():
    # Gemma-3 1B (google/gemma-3-1b-pt): 26 layers, 1,152 wide, 4 query heads of 256, 1 kv
    # head, intermediate 6,912, vocabulary 262,144, tied; a 512-token window in 5 of every 6
    # layers (sliding_window_pattern 6: layers 5, 11, 17, 23 are global), so 26 - 4 = 22 local.
    # Hand count: tied embeddings 262144*1152 = 301,989,888; per layer q 1152*1024 =
    # 1,179,648, k and v 2*1152*256 = 589,824, o 1024*1152 = 1,179,648, MLP 3*1152*6912 =
    # 23,887,872, four RMSNorms 4,608, q_norm and k_norm 512: 26,842,112; x 26 = 697,894,912;
    # final norm 1,152: 999,885,952 (the card's 1B), q_norm/k_norm included.
    m = load("gemma-3-1b")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab) == (
        26, 1152, 4, 1, 256, 6912, 262144)
    assert m.tied_embeddings and m.norms_per_layer == 4 and m.qk_norm
    assert (m.sliding_window_tokens, m.sliding_window_layers) == (512, 22)
    assert model_params(m) == 999_885_952
    assert m.unmodelled == ()


def test_gemma3_layer_types_replace_the_pattern(tmp_path):
    types = ["sliding_attention", "full_attention"] * 13  # 13 local layers of 26
    m = model_from_hf_config(write(tmp_path, config("gemma-3-1b", layer_types=types)))
    assert m.sliding_window_layers == 13


def test_gpt_oss_alternating_windows_sinks_and_experts():
    # gpt-oss-20b (openai/gpt-oss-20b): 24 layers, 2,880 wide, 64 query heads of 64, 8 kv
    # heads, q/k/v/o biases, 32 experts of 2,880 (SwiGLU, fused gate_up), 4 per token,
    # vocabulary 201,088, untied; layer_types alternate a 128-token window (even layers) and
    # full attention. Hand count per layer: attention q 2880*4096 + 4096, k and v
    # 2*(2880*512 + 512), o 4096*2880 + 2880 = 26,550,080; two RMSNorms 5,760; router 2880*32
    # weights + 32 biases; each expert 2880*5760 + 2880*2880 = 24,883,200 weights and 5,760 +
    # 2,880 biases; 64 sinks: 823,186,976. Total 2 * 201088 * 2880 + 24 * 823,186,976 + 2,880
    # = 20,914,757,184 (the card's 21B). The expert biases are GptOssExperts' gate_up_proj_bias
    # (32, 2 * 2,880) and down_proj_bias (32, 2,880), the router's GptOssTopKRouter.bias (32):
    # 32 * 8,640 + 32 = 276,512 per layer; the sinks GptOssAttention.sinks (64).
    m = load("gpt-oss-20b")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.vocab) == (
        24, 2880, 64, 8, 64, 201088)
    assert m.qkv_bias and m.attn_out_bias and not m.tied_embeddings
    assert m.attention_sinks and m.expert_bias and not m.qk_norm
    assert (m.moe.experts, m.moe.top_k, m.moe.expert_ffn, m.moe.shared_ffn,
            m.moe.dense_layers) == (32, 4, 2880, 0, 0)
    assert (m.sliding_window_tokens, m.sliding_window_layers) == (128, 12)
    assert model_params(m) == 20_914_757_184
    # active: embeddings 2 * 201,088 * 2,880 = 1,158,266,880; per layer attention 26,550,080,
    # sinks 64, norms 5,760, router 92,160 + 32, and 4 experts of 24,883,200 + 8,640:
    # 26,648,096 + 99,567,360 = 126,215,456; x 24 = 3,029,170,944; final norm 2,880:
    # 4,187,440,704 (the card's 3.6B active leaves out the input embedding table:
    # 4,187,440,704 - 201,088 * 2,880 = 3,608,307,264)
    assert active_params(m) == 1_158_266_880 + 24 * (26_550_080 + 64 + 5_760 + 92_160 + 32
                                                     + 4 * (24_883_200 + 8_640)) + 2_880
    assert active_params(m) == 4_187_440_704
    assert m.unmodelled == ("config keys not read, priced as if absent: quantization_config",)


def test_gpt_oss_top_k_spellings_must_agree(tmp_path):
    err = refusal(write(tmp_path, config("gpt-oss-20b", experts_per_token=2)))
    assert err.field == "experts_per_token" and "num_experts_per_tok gives 4" in str(err)


def test_llama4_scout_text():
    # Llama-4 Scout's text decoder (meta-llama/Llama-4-Scout-17B-16E, text_config): 48 layers,
    # 5,120 wide, 40 query heads of 128, 8 kv heads, every layer MoE (interleave_moe_layer_step
    # 1): 16 experts of 8,192, 1 per token, and a shared expert of 8,192; vocabulary 202,048,
    # untied. Hand count per layer: attention 5120*5120 + 2*5120*1024 + 5120*5120 =
    # 62,914,560, two RMSNorms 10,240, router 5120*16 = 81,920, shared expert and each routed
    # expert 3*5120*8192 = 125,829,120. Total 2 * 202048 * 5120 + 48 * (62,914,560 + 10,240 +
    # 81,920 + 17 * 125,829,120) + 5,120 = 107,769,861,120 (the text model of the card's 109B);
    # active with 1 routed expert + the shared one: 17,172,894,720 (the card's 17B).
    m = load("llama-4-scout-text", seq_len=8192)
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.vocab) == (
        48, 5120, 40, 8, 128, 202048)
    assert (m.moe.experts, m.moe.top_k, m.moe.expert_ffn, m.moe.shared_ffn,
            m.moe.dense_layers) == (16, 1, 8192, 8192, 0)
    assert model_params(m) == 107_769_861_120
    assert active_params(m) == 17_172_894_720
    assert m.unmodelled == ()


def test_llama4_chunked_attention_beyond_one_chunk_is_refused():
    # at 8,192 tokens or fewer a chunk holds the whole sequence: causal attention, read above;
    # beyond it (the config's 10M-token maximum, or 16,384) each query sees only its chunk
    for seq_len in (None, 16384):
        err = refusal(HF / "llama-4-scout-text" / "config.json", seq_len=seq_len)
        assert err.field == "attention_chunk_size" and "--seq-len 8192" in err.fix


def test_llama4_interleaved_moe_layers_are_refused(tmp_path):
    # Llama-4 Maverick: interleave_moe_layer_step 2, MoE layers 1, 3, 5, ... between dense ones
    err = refusal(write(tmp_path, config("llama-4-scout-text", interleave_moe_layer_step=2)),
                  seq_len=8192)
    assert err.field == "interleave_moe_layer_step" and "1, 3, 5, 7, ..." in str(err)
    err = refusal(write(tmp_path, config("llama-4-scout-text", moe_layers=[1, 3, 5])),
                  seq_len=8192)
    assert err.field == "moe_layers"


def test_llama4_moe_layers_after_a_dense_prefix(tmp_path):
    # MoE layers 2..47: two dense layers of intermediate_size_mlp 16,384 first
    m = model_from_hf_config(write(tmp_path, config("llama-4-scout-text",
                                                    moe_layers=list(range(2, 48)))), seq_len=4096)
    assert m.moe.dense_layers == 2 and m.ffn == 16384


def test_vision_language_configs_are_refused(tmp_path):
    raw = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": config("gemma-3-1b"), "vision_config": {"hidden_size": 1152}}
    err = refusal(write(tmp_path, raw))
    assert err.field == "text_config" and "gemma3_text" in err.fix


def test_transformers_5_keys(tmp_path):
    # transformers 5 writes rope_parameters (rope_theta and rope_scaling together), dtype, and
    # num_local_experts for Qwen3-MoE's expert count: read, and no "not read" line
    rope = {"rope_theta": 1000000.0, "rope_type": "default"}
    raw = config("qwen3-235b-a22b", num_experts=None, num_local_experts=128, rope_theta=None,
                 rope_scaling=None, torch_dtype=None, rope_parameters=rope, dtype="bfloat16")
    m = model_from_hf_config(write(tmp_path, raw), seq_len=4096)
    assert m.moe.experts == 128 and m.qk_norm
    assert m.unmodelled == ()
    dense = config("qwen3-8b", rope_theta=None, rope_parameters=rope, dtype="bfloat16",
                   torch_dtype=None, layer_types=["full_attention"] * 36)
    assert model_from_hf_config(write(tmp_path, dense)).unmodelled == ()


# --- paraplan model, and --hf-config without --seq-len ----------------------------------------

def run_model(capsys, *argv: str) -> tuple[int, str, str]:
    from paraplan.solver.commands.cli import main
    capsys.readouterr()
    code = main(["model", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_model_command_json_gives_the_counts(capsys):
    # the gpt-oss-20b and Llama-4 Scout counts derived by hand above
    code, out, _ = run_model(capsys, "--hf-config", HF / "gpt-oss-20b", "--seq-len", "4096", "--json")
    got = json.loads(out)
    assert code == 0 and got["status"] == "read" and got["seq_len"] == 4096
    assert got["params_total"] == 20_914_757_184
    assert got["params_active"] == 4_187_440_704
    assert got["attention"]["windowed_layers"] == 12 and got["moe_layers"] == 24
    # a dense model: every parameter is active. FLOPs per token at 4,096 tokens, PaLM's count
    # (6 x (layer parameters + one embedding table) + 6 x layers x s x (q + attention-out
    # widths), the full causal score matrix): Phi-3-mini's 32 layers of 113,252,352, 3,072 x
    # 32,064 logits, q and output 3,072 wide, the window 2,047 tokens in every layer:
    # 6 * (32 * 113,252,352 + 98,500,608) + 6 * 32 * 2,047 * 6,144
    code, out, _ = run_model(capsys, "--hf-config", HF / "phi-3-mini-4k", "--seq-len", "4096", "--json")
    got = json.loads(out)
    assert got["params_total"] == got["params_active"] == 3_821_079_552
    assert got["flops_per_token"] == 6 * (32 * 113_252_352 + 98_500_608) + 6 * 32 * 2047 * 6144


def test_model_command_text(capsys):
    code, out, _ = run_model(capsys, "--hf-config", HF / "gemma-3-1b")
    assert code == 0
    assert "999,885,952 total" in out
    assert "32,768 tokens per sequence (the config's maximum context" in out
    assert "a sliding window of 512 tokens in 22 of 26 layers, full causal in 4" in out
    assert "not priced" not in out


def test_model_command_refusals_are_one_line(capsys):
    code, out, err = run_model(capsys, "--hf-config", HF / "llama-4-scout-text")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert ": attention_chunk_size: " in err and "--seq-len 8192" in err
    code, _, err = run_model(capsys, "--hf-config", HF / "qwen3-8b", "--seq-len", "8k")
    assert code == 2 and "--seq-len: expected an integer" in err


def test_hf_config_without_seq_len_is_refused_naming_the_maximum():
    # Qwen2-7B's config gives 131,072 positions; the 4M-token job counts 512 sequences: without
    # --seq-len paraplan planned 512 x 131,072 tokens. Now it asks.
    import argparse

    from paraplan import instances
    from paraplan.solver.commands.inputs import add_instance_args, read_instance
    parts = Path(instances.__file__).parent
    parser = argparse.ArgumentParser()
    add_instance_args(parser)
    argv = ["--hf-config", str(HF / "qwen2-7b"), "--cluster",
            str(parts / "clusters" / "dgx-h100-32nodes.yaml"),
            "--job", str(parts / "jobs" / "pretrain-4m-tokens.yaml")]
    with pytest.raises(InstanceError) as info:
        read_instance(parser.parse_args(argv))
    err = info.value
    assert (err.path, err.field) == (str(HF / "qwen2-7b"), "--seq-len")
    assert "131,072 tokens" in str(err) and "--seq-len 131072" in err.fix and "\n" not in str(err)
    assert read_instance(parser.parse_args(argv + ["--seq-len", "4096"])).model.seq_len == 4096


def test_gemma3_bidirectional_attention_is_refused(tmp_path):
    # transformers 5's Gemma3TextConfig flag of EmbeddingGemma: no causal mask
    err = refusal(write(tmp_path, config("gemma-3-1b", use_bidirectional_attention=True)))
    assert err.field == "use_bidirectional_attention"
    m = model_from_hf_config(write(tmp_path, config("gemma-3-1b", use_bidirectional_attention=False)))
    assert m.sliding_window_layers == 22 and m.unmodelled == ()


@pytest.mark.parametrize("changes, field", [
    ({"interleave_moe_layer_step": 0}, "interleave_moe_layer_step"),
    ({"interleave_moe_layer_step": 49}, "interleave_moe_layer_step"),  # no MoE layer
    ({"moe_layers": [0, 48]}, "moe_layers"),
    ({"moe_layers": "all"}, "moe_layers"),
])
def test_llama4_bad_moe_layers_are_refused(tmp_path, changes, field):
    err = refusal(write(tmp_path, config("llama-4-scout-text", **changes)), seq_len=8192)
    assert err.field == field
