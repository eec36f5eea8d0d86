"""cost/hf_config.py: every bundled Hugging Face config.json maps to the published shape, and
every refusal is one line naming the file, the JSON key and the fix.

The configs in tests/data/hf are the Hub's config.json files (tests/data/hf/README.md names
each repository); the expected numbers are those of the model cards and papers cited per row.
"""

import json
from pathlib import Path

import pytest

from paraplan.cost.errors import InstanceError
from paraplan.cost.hf_config import model_from_hf_config
from paraplan.cost.specs import Mlp

HF = Path(__file__).resolve().parents[1] / "data" / "hf"

SWIGLU, GELU = Mlp.SWIGLU, Mlp.GELU

# directory -> (layers, hidden, heads, kv_heads, ffn, vocab, seq_len, mlp, tied embeddings)
EXPECTED = {
    # Llama 2 7B (Touvron et al. 2023, Table 1 and the meta-llama/Llama-2-7b-hf card): 32 layers,
    # width 4,096, 32 heads (no GQA at 7B), FFN 11,008, vocabulary 32,000, context 4,096.
    "llama-2-7b": (32, 4096, 32, 32, 11008, 32000, 4096, SWIGLU, False),
    # Llama 3 8B ("The Llama 3 Herd of Models", Table 3; Meta-Llama-3-8B card): 32 layers, 4,096
    # wide, 32 heads, 8 kv heads, FFN 14,336, vocabulary 128,256, context 8,192.
    "llama-3-8b": (32, 4096, 32, 8, 14336, 128256, 8192, SWIGLU, False),
    # Llama 3 70B (same table; Meta-Llama-3-70B card): 80 layers, 8,192 wide, 64 heads, 8 kv
    # heads, FFN 28,672, vocabulary 128,256, context 8,192.
    "llama-3-70b": (80, 8192, 64, 8, 28672, 128256, 8192, SWIGLU, False),
    # Mistral 7B (Jiang et al. 2023, Table 1): 32 layers, dim 4,096, 32 heads, 8 kv heads,
    # hidden_dim 14,336, vocabulary 32,000; config.json's max_position_embeddings is 32,768.
    "mistral-7b": (32, 4096, 32, 8, 14336, 32000, 32768, SWIGLU, False),
    # Qwen2 7B (Qwen2 Technical Report 2024, Table 1; Qwen/Qwen2-7B card): 28 layers, 3,584
    # wide, 28 query heads, 4 kv heads, intermediate 18,944, vocabulary 152,064 (151,646 tokens
    # padded); config.json's max_position_embeddings is 131,072.
    "qwen2-7b": (28, 3584, 28, 4, 18944, 152064, 131072, SWIGLU, False),
    # GPT-2 small (Radford et al. 2019, Table 2; openai-community/gpt2): 12 layers, 768 wide,
    # 12 heads, FFN 4 x 768 = 3,072 (n_inner absent), 50,257 tokens, 1,024 positions, tied.
    "gpt2": (12, 768, 12, 12, 3072, 50257, 1024, GELU, True),
    # GPT-NeoX-20B (Black et al. 2022, Table 1): 44 layers, 6,144 wide, 64 heads, FFN 24,576,
    # vocabulary 50,432 (padded), context 2,048, untied input/output embeddings.
    "gpt-neox-20b": (44, 6144, 64, 64, 24576, 50432, 2048, GELU, False),
    # OPT-1.3B (Zhang et al. 2022, Table 1): 24 layers, 32 heads, width 2,048, FFN 8,192 (ReLU,
    # mapped to the 2-matmul GELU shape), vocabulary 50,272, 2,048 learned positions, tied.
    "opt-1.3b": (24, 2048, 32, 32, 8192, 50272, 2048, GELU, True),
    # Mistral-NeMo 12B (mistralai/Mistral-Nemo-Base-2407 card): 40 layers, dim 5,120, 32 heads
    # of head_dim 128 (so Q is 4,096 wide, not 5,120), 8 kv heads, hidden_dim 14,336,
    # vocabulary 2^17 = 131,072, 128k context.
    "mistral-nemo-12b": (40, 5120, 32, 8, 14336, 131072, 128000, SWIGLU, False),
    # Gemma 2 9B (Gemma Team 2024, "Gemma 2", Table 1): 42 layers, d_model 3,584, 16 heads of
    # 256, 8 kv heads, feedforward 14,336 (GeGLU: gated, three matmuls), vocabulary 256,000,
    # tied; context 8,192.
    "gemma-2-9b": (42, 3584, 16, 8, 14336, 256000, 8192, SWIGLU, True),
}


def load(stem: str, **kw):
    return model_from_hf_config(HF / stem / "config.json", **kw)


def shape(m):
    return (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab, m.seq_len, m.mlp,
            m.tied_embeddings)


def test_every_bundled_config_has_a_test():
    tested = set(EXPECTED) | {"bloom-560m", "falcon-7b", "mixtral-8x7b", "qwen3-235b-a22b",
                              "deepseek-v3"}
    # tests/instances/test_hf_families.py
    tested |= {"qwen3-8b", "phi-3-mini-4k", "gemma-3-1b", "gpt-oss-20b", "llama-4-scout-text"}
    assert {p.name for p in HF.iterdir() if p.is_dir()} == tested


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_config_maps_to_the_published_shape(stem):
    model = load(stem)
    assert shape(model) == EXPECTED[stem]
    assert model.name == stem  # named after the directory holding config.json


def test_bloom_needs_a_sequence_length():
    # BLOOM-560m (BigScience 2022, bigscience/bloom-560m card): 24 layers, 1,024 wide, 16 heads,
    # FFN 4 x 1,024 (n_inner is null and ignored by BloomMLP), vocabulary 250,880, tied;
    # ALiBi positions, so no maximum length: trained at 2,048 tokens.
    with pytest.raises(InstanceError) as info:
        load("bloom-560m")
    assert info.value.field == "seq_len" and "ALiBi" in str(info.value)
    assert "--seq-len" in info.value.fix
    model = load("bloom-560m", seq_len=2048)
    assert shape(model) == (24, 1024, 16, 16, 4096, 250880, 2048, GELU, True)


def test_falcon_multi_query():
    # Falcon-7B (tiiuae/falcon-7b card): 32 layers, d_model 4,544, 71 heads of 64 with
    # multi-query attention (one kv head), FFN 4 x 4,544 = 18,176, vocabulary 65,024, tied;
    # rotary positions with no max_position_embeddings in config.json, trained at 2,048.
    with pytest.raises(InstanceError) as info:
        load("falcon-7b")
    assert info.value.field == "max_position_embeddings"
    model = load("falcon-7b", seq_len=2048)
    assert shape(model) == (32, 4544, 71, 1, 18176, 65024, 2048, GELU, True)


def test_falcon_new_decoder_architecture_reads_num_kv_heads(tmp_path):
    # Falcon-40B's layout (tiiuae/falcon-40b card): 60 layers, 8,192 wide, 128 heads, 8 kv heads.
    raw = json.loads((HF / "falcon-7b" / "config.json").read_text())
    raw.update(new_decoder_architecture=True, num_kv_heads=8, num_hidden_layers=60,
               hidden_size=8192, num_attention_heads=128)
    model = model_from_hf_config(write(tmp_path, raw), seq_len=2048)
    assert (model.layers, model.heads, model.kv_heads, model.ffn) == (60, 128, 8, 32768)
    raw.update(new_decoder_architecture=False, multi_query=False)
    del raw["num_kv_heads"]  # FalconConfig's default: as many kv heads as heads
    assert model_from_hf_config(write(tmp_path, raw), seq_len=2048).kv_heads == 128


def test_mixtral_reads_as_moe():
    # Mixtral 8x7B (config.json): 32 layers of 8 experts, 2 per token, each expert a SwiGLU MLP
    # of 14,336 (intermediate_size); no shared expert, no dense layer
    m = load("mixtral-8x7b", seq_len=4096)
    assert (m.moe.experts, m.moe.top_k, m.moe.expert_ffn, m.moe.shared_ffn,
            m.moe.dense_layers) == (8, 2, 14336, 0, 0)
    assert m.mlp is Mlp.SWIGLU and m.kv_heads == 8 and m.unmodelled == ()


def test_qwen3_moe_reads_as_moe():
    # Qwen3-235B-A22B (config.json): 94 layers, 128 experts of 1,536, 8 per token, 64 query
    # heads of 128 (q_hidden 8,192 != hidden 4,096), 4 kv heads. Its name says 235B total,
    # 22B active. Hand count per layer: attention 4096*8192 + 2*4096*512 + 8192*4096 =
    # 71,303,168, two RMSNorms 8,192, q_norm and k_norm 2*128 = 256, router 4096*128 = 524,288,
    # each expert 3*4096*1536 = 18,874,368; embeddings 2 * 151,936 * 4,096 = 1,244,659,712, final
    # norm 4,096. Total 94 * (71,303,168 + 8,192 + 256 + 524,288 + 128 * 18,874,368) +
    # 1,244,663,808 = 235,093,634,560; active with 8 experts 94 * 222,830,848 + 1,244,663,808
    # = 22,190,763,520
    from paraplan.cost.flops import active_params, model_params
    m = load("qwen3-235b-a22b", seq_len=4096)
    assert (m.moe.experts, m.moe.top_k, m.moe.expert_ffn, m.moe.shared_ffn) == (128, 8, 1536, 0)
    assert m.q_hidden == 8192 and m.kv_heads == 4 and m.qk_norm
    assert model_params(m) == 94 * (71_303_168 + 8_192 + 256 + 524_288 + 128 * 18_874_368) \
        + 1_244_663_808 == 235_093_634_560
    assert active_params(m) == 94 * 222_830_848 + 1_244_663_808 == 22_190_763_520
    assert m.unmodelled == ()


def test_deepseek_v3_is_read_with_its_latent_attention_and_experts():
    # deepseek-ai/DeepSeek-V3 config.json (tests/data/hf/deepseek-v3): 61 layers of 7,168, 128
    # heads; MLA q_lora_rank 1,536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64,
    # v_head_dim 128; 256 routed experts of 2,048 (8 per token), n_shared_experts 1 x 2,048,
    # first_k_dense_replace 3 (dense layers of intermediate_size 18,432). The technical report
    # (arXiv 2412.19437, Sec. 4.2) gives 671B parameters, 37B active: hand count, per layer MLA
    # 7168x1536 + 1536x(128x192) + 7168x(512+64) + 512x(128x(128+128)) + (128x128)x7168
    # = 187,105,280 weights + the latent norms 1,536 + 512 + two layer norms 2 x 7,168
    # = 187,121,664; dense MLP 3 x 7168 x 18432 = 396,361,728; each MoE layer a router
    # 7168 x 256 = 1,835,008 and 257 experts of 3 x 7168 x 2048 = 44,040,192; embedding and
    # output 2 x 129,280 x 7,168 = 1,853,358,080 plus the final norm 7,168. Total
    # 61 x 187,121,664 + 3 x 396,361,728 + 58 x (1,835,008 + 257 x 44,040,192) + 1,853,365,248
    # = 671,026,404,352; active (8 routed + 1 shared per MoE layer) 37,552,282,624.
    from paraplan.cost.flops import active_params, model_params
    m = load("deepseek-v3", seq_len=4096)
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn) == (61, 7168, 128, 128, 18432)
    a = m.mla
    assert (a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == \
        (1536, 512, 128, 64, 128)
    assert (m.moe.experts, m.moe.top_k, m.moe.expert_ffn, m.moe.shared_ffn, m.moe.dense_layers) == \
        (256, 8, 2048, 2048, 3)
    assert model_params(m) == 671_026_404_352
    assert active_params(m) == 37_552_282_624
    # what is not priced is said, one line each: group-limited routing; the MTP module (its
    # num_nextn_predict_layers: 1) is read as mtp_layers and priced on the last stage
    assert len(m.unmodelled) == 1 and "topk_group" in m.unmodelled[0]
    assert m.mtp_layers == 1


def test_deepseek_v2_lite_projects_the_query_directly(tmp_path):
    # DeepSeek-V2-Lite's config has q_lora_rank null: Q comes from the layer input
    raw = json.loads((HF / "deepseek-v3" / "config.json").read_text())
    raw.update(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2", q_lora_rank=None)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert model_from_hf_config(tmp_path, 4096).mla.q_lora_rank is None


@pytest.mark.parametrize("change, field", [
    ({"num_key_value_heads": 8}, "num_key_value_heads"),  # MLA has a key and value per head
    ({"moe_layer_freq": 2}, "moe_layer_freq"),  # alternating dense and MoE layers
    ({"kv_lora_rank": None}, "kv_lora_rank"),  # a required MLA width
])
def test_deepseek_config_refusals_are_one_line(tmp_path, change, field):
    raw = json.loads((HF / "deepseek-v3" / "config.json").read_text())
    raw.update(change)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InstanceError) as info:
        model_from_hf_config(tmp_path, 4096)
    assert info.value.field == field and "\n" not in str(info.value)


def test_latent_attention_keys_outside_deepseek_are_refused(tmp_path):
    raw = json.loads((HF / "llama-3-8b" / "config.json").read_text())
    raw["kv_lora_rank"] = 512
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InstanceError) as info:
        model_from_hf_config(tmp_path, 4096)
    assert info.value.field == "kv_lora_rank" and "DeepseekV3ForCausalLM" in info.value.problem


def test_qwen_moe_dense_prefix_and_sparse_step(tmp_path):
    raw = json.loads((HF / "qwen3-235b-a22b" / "config.json").read_text())
    raw.update(mlp_only_layers=[0, 1, 2])
    assert model_from_hf_config(write(tmp_path, raw)).moe.dense_layers == 3
    raw.update(mlp_only_layers=[5])  # a dense layer in the middle: not priced, refused
    assert refusal(write(tmp_path, raw)).field == "mlp_only_layers"
    raw.update(mlp_only_layers=[], decoder_sparse_step=2)
    assert refusal(write(tmp_path, raw)).field == "decoder_sparse_step"


def test_seq_len_replaces_the_maximum():
    assert load("llama-3-70b", seq_len=4096).seq_len == 4096
    assert load("qwen2-7b", seq_len=32768).seq_len == 32768
    assert load("llama-3-8b", seq_len=16384).seq_len == 16384  # RoPE: longer is allowed


def test_learned_positions_cap_the_sequence_length():
    with pytest.raises(InstanceError) as info:
        load("gpt2", seq_len=2048)
    assert info.value.field == "n_positions" and "1024 learned position" in str(info.value)


def test_directory_is_accepted():
    assert load("llama-3-8b") == model_from_hf_config(HF / "llama-3-8b")


def test_tie_word_embeddings_overrides_the_architecture_default(tmp_path):
    raw = json.loads((HF / "opt-1.3b" / "config.json").read_text())
    raw["tie_word_embeddings"] = False
    assert model_from_hf_config(write(tmp_path, raw)).tied_embeddings is False
    del raw["tie_word_embeddings"]
    raw["num_key_value_heads"] = 8  # ignored: OPT has no grouped-query attention
    assert model_from_hf_config(write(tmp_path, raw)).tied_embeddings is True


def test_llama_without_kv_heads_is_multi_head(tmp_path):
    raw = json.loads((HF / "llama-2-7b" / "config.json").read_text())
    del raw["num_key_value_heads"]  # as in Llama 1 configs
    assert model_from_hf_config(write(tmp_path, raw)).kv_heads == 32


# --- refusals: one line, naming the file, the key and the fix ------------------------------

def write(tmp_path: Path, raw, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw, indent=2))
    return path


def refusal(path: Path, **kw) -> InstanceError:
    with pytest.raises(InstanceError) as info:
        model_from_hf_config(path, **kw)
    err = info.value
    message = str(err)
    assert err.path == str(path)
    assert message.startswith(f"{path}: {err.field}: ") and "(fix: " in message
    assert "\n" not in message
    return err


def llama(**changes) -> dict:
    raw = json.loads((HF / "llama-3-8b" / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            del raw[key]
        else:
            raw[key] = value
    return raw


def test_unknown_architecture(tmp_path):
    err = refusal(write(tmp_path, llama(architectures=["MambaForCausalLM"], model_type="mamba")))
    assert err.field == "architectures"
    assert "unsupported architecture MambaForCausalLM" in err.problem
    assert "LlamaForCausalLM" in err.fix and "instance YAML" in err.fix


def test_model_type_is_the_fallback(tmp_path):
    model = model_from_hf_config(write(tmp_path, llama(architectures=None)))
    assert model.kv_heads == 8 and model.mlp is SWIGLU
    err = refusal(write(tmp_path, llama(architectures=None, model_type=None)))
    assert err.field == "architectures" and "missing 'architectures' and 'model_type'" in err.problem


def test_missing_field_names_it(tmp_path):
    err = refusal(write(tmp_path, llama(num_hidden_layers=None)))
    assert err.field == "num_hidden_layers"
    assert err.fix == ("add 'num_hidden_layers' or describe the model under 'model:' in the"
                       " instance YAML")


def test_missing_fields_are_reported_together(tmp_path):
    err = refusal(write(tmp_path, llama(hidden_size=None, intermediate_size=None)))
    assert err.field == "hidden_size, intermediate_size"
    assert "missing 'hidden_size' and 'intermediate_size', needed for Llama" in err.problem


def test_null_counts_as_missing(tmp_path):
    assert refusal(write(tmp_path, llama(vocab_size=None))).field == "vocab_size"
    raw = llama()
    raw["vocab_size"] = None
    assert refusal(write(tmp_path, raw)).field == "vocab_size"


def test_mistral_needs_kv_heads(tmp_path):
    raw = json.loads((HF / "mistral-7b" / "config.json").read_text())
    del raw["num_key_value_heads"]  # MistralConfig would default to 8, not to the head count
    assert refusal(write(tmp_path, raw)).field == "num_key_value_heads"


def test_wrong_type(tmp_path):
    err = refusal(write(tmp_path, llama(num_hidden_layers=32.0)))
    assert err.field == "num_hidden_layers" and "expected an integer" in err.problem
    assert refusal(write(tmp_path, llama(tie_word_embeddings="no"))).field == "tie_word_embeddings"
    assert refusal(write(tmp_path, llama(architectures="LlamaForCausalLM"))).field == "architectures"


def test_indivisible_heads(tmp_path):
    assert refusal(write(tmp_path, llama(num_attention_heads=30))).field == "hidden_size"
    assert refusal(write(tmp_path, llama(num_key_value_heads=5))).field == "num_key_value_heads"


def test_opt_projection_is_refused(tmp_path):
    # OPT-350m: hidden 1,024 but word_embed_proj_dim 512 (project_in / project_out).
    raw = json.loads((HF / "opt-1.3b" / "config.json").read_text())
    raw.update(hidden_size=1024, ffn_dim=4096, num_attention_heads=16, word_embed_proj_dim=512)
    err = refusal(write(tmp_path, raw))
    assert err.field == "word_embed_proj_dim" and "not modelled" in err.problem


def test_malformed_json_names_line_and_column(tmp_path):
    path = write(tmp_path, '{\n  "architectures": ["LlamaForCausalLM"],\n  "hidden_size": 4096,\n}\n')
    err = refusal(path)
    assert err.field == "line 4, column 1" and "malformed JSON" in err.problem


def test_duplicate_key(tmp_path):
    path = write(tmp_path, '{"hidden_size": 4096, "hidden_size": 8192}')
    assert refusal(path).field == "hidden_size"


def test_not_an_object_and_missing_file(tmp_path):
    assert refusal(write(tmp_path, "[1, 2]")).field == "<top level>"
    err = refusal(tmp_path / "nothing.json")
    assert err.field == "<file>" and "not found" in err.problem


def test_bad_seq_len(tmp_path):
    assert refusal(HF / "llama-3-8b" / "config.json", seq_len=0).field == "seq_len"


# --- every field that changes cost (cost/hf_layout.py) -----------------------------------

# Parameter counts, derived by hand from each architecture's modules (transformers' modelling
# code) and equal to the published totals cited. Notation: V vocabulary, h hidden, q = heads x
# head_dim, k = kv_heads x head_dim, f ffn, L layers.
PARAMS = {
    # Llama 2 7B: 2Vh (untied) + L(h(q+2k) + qh + 3hf + 2h) + h
    # = 2*131,072,000 + 32*(50,331,648 + 16,777,216 + 135,266,304 + 8,192) + 4,096
    # = 6,738,415,616 (the Hub's safetensors total; "7B" in Touvron et al. 2023, Table 1)
    "llama-2-7b": 6_738_415_616,
    # Llama 3 8B: 2*525,336,576 + 32*(4096*6144 + 4096^2 + 3*4096*14336 + 8,192) + 4,096
    # = 8,030,261,248 (8.03 B on the Meta-Llama-3-8B card)
    "llama-3-8b": 8_030_261_248,
    # Llama 3 70B: 2*1,050,673,152 + 80*(8192*10240 + 8192^2 + 3*8192*28672 + 16,384) + 8,192
    # = 70,553,706,496 (70.6 B)
    "llama-3-70b": 70_553_706_496,
    # Mistral 7B: 2*32000*4096 + 32*218,112,000 + 4,096 = 7,241,732,096 (7.24 B, Jiang et al.)
    "mistral-7b": 7_241_732_096,
    # Mistral-NeMo 12B with q = 32*128 = 4,096, k = 8*128 = 1,024: per layer
    # 5120*6144 + 4096*5120 + 3*5120*14336 + 2*5120 = 272,640,000; 40 layers 10,905,600,000,
    # plus 2*131072*5120 = 1,342,177,280 and the final norm 5,120: 12,247,782,400 (12.2 B on
    # the card). With head_dim ignored (q = k*4 = 5,120) it would be 12.77 B.
    "mistral-nemo-12b": 12_247_782_400,
    # Qwen2 7B: q, k, v carry biases (q + 2k = 3,584 + 1,024 = 4,608 per layer): per layer
    # 3584*4608 + 4,608 + 3584^2 + 3*3584*18944 + 2*3584 = 233,057,792; x 28 = 6,525,618,176,
    # plus 2*152064*3584 = 1,089,994,752 and 3,584: 7,615,616,512 (7.62 B on the Qwen2-7B card)
    "qwen2-7b": 7_615_616_512,
    # GPT-2 small: tied wte 50257*768 = 38,597,376, learned wpe 1024*768 = 786,432; per layer
    # c_attn 768*2304 + 2304, c_proj 768^2 + 768, c_fc 768*3072 + 3072, mlp c_proj 3072*768 +
    # 768, two LayerNorms 4*768: 7,087,872; x 12 = 85,054,464; ln_f 1,536: 124,439,808 (124 M)
    "gpt2": 124_439_808,
    # GPT-NeoX-20B: untied 2*50432*6144 = 619,708,416; per layer qkv 6144*18432 + 18432, dense
    # 6144^2 + 6144, MLP 2*6144*24576 + 24576 + 6144, two LayerNorms 4*6144: 453,064,704; x 44 =
    # 19,934,846,976; final LayerNorm 12,288: 20,554,567,680 (Black et al. 2022, Table 1)
    "gpt-neox-20b": 20_554_567_680,
    # OPT-1.3B: tied 50272*2048 = 102,957,056, learned positions (2048 + 2)*2048 = 4,198,400;
    # per layer 4*(2048^2 + 2048) + 2048*8192 + 8192 + 8192*2048 + 2048 + 4*2048 = 50,358,272;
    # x 24 = 1,208,598,528; final LayerNorm 4,096: 1,315,758,080 (1.3 B, Zhang et al. 2022)
    "opt-1.3b": 1_315_758_080,
    # Gemma 2 9B: tied 256000*3584 = 917,504,000; per layer q 3584*4096, k and v 3584*2048
    # each, o 4096*3584, MLP 3*3584*14336, four RMSNorms 4*3584: 198,195,200; x 42 =
    # 8,324,198,400; final norm 3,584: 9,241,705,984 (Gemma 2 report, Table 2: 917,504,000
    # embedding and 8,324,201,984 non-embedding parameters)
    "gemma-2-9b": 9_241_705_984,
}


@pytest.mark.parametrize("stem", sorted(PARAMS))
def test_parameter_count_matches_the_real_model(stem):
    from paraplan.cost.flops import model_params
    assert model_params(load(stem)) == PARAMS[stem]


def test_bloom_and_falcon_parameter_counts():
    from paraplan.cost.flops import model_params
    # BLOOM-560m: tied 250880*1024 = 256,901,120, embedding LayerNorm 2,048; per layer qkv
    # 1024*3072 + 3072, dense 1024^2 + 1024, MLP 1024*4096 + 4096 + 4096*1024 + 1024, two
    # LayerNorms 4,096: 12,596,224; x 24 = 302,309,376; ln_f 2,048: 559,214,592 (the
    # bigscience/bloom-560m card's 559,214,592)
    assert model_params(load("bloom-560m", seq_len=2048)) == 559_214_592
    # Falcon-7B: tied 65024*4544 = 295,469,056; per layer (parallel attention, one LayerNorm,
    # no biases) qkv 4544*(4544 + 2*64), dense 4544^2, MLP 2*4544*18176, LayerNorm 9,088:
    # 207,070,080; x 32 = 6,626,242,560; ln_f 9,088: 6,921,720,704 (6.92 B)
    falcon = load("falcon-7b", seq_len=2048)
    assert model_params(falcon) == 6_921_720_704
    assert falcon.parallel_blocks and falcon.norms_per_layer == 1 and not falcon.qkv_bias


def test_head_dim_sets_the_attention_width():
    nemo = load("mistral-nemo-12b")
    assert (nemo.head_dim, nemo.q_hidden, nemo.kv_hidden) == (128, 4096, 1024)
    llama3 = load("llama-3-8b")  # no head_dim key: hidden / heads
    assert llama3.attention_head_dim is None and llama3.head_dim == 128


def test_gemma2_head_dim_defaults_to_256(tmp_path):
    raw = json.loads((HF / "gemma-2-9b" / "config.json").read_text())
    del raw["head_dim"]  # Gemma2Config's default is 256, not 3584 / 16 = 224
    assert model_from_hf_config(write(tmp_path, raw)).q_hidden == 16 * 256


def test_sliding_windows():
    # Mistral 7B v0.1: sliding_window 4096 in every layer
    mistral = load("mistral-7b")
    assert (mistral.sliding_window_tokens, mistral.windowed_layers) == (4096, 32)
    assert load("mistral-7b", seq_len=4096).windowed_layers == 0  # a window >= s: plain causal
    assert load("mistral-nemo-12b").windowed_layers == 0  # sliding_window null
    # Gemma 2: Gemma2Attention slides in the even layers 0, 2, ..., 40: 21 of 42
    gemma = load("gemma-2-9b")
    assert (gemma.sliding_window_tokens, gemma.windowed_layers) == (4096, 21)
    # Qwen2 7B: use_sliding_window false
    assert load("qwen2-7b").windowed_layers == 0


def test_qwen2_sliding_window_layers(tmp_path):
    raw = json.loads((HF / "qwen2-7b" / "config.json").read_text())
    raw.update(use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    # Qwen2Attention: layers with index >= max_window_layers slide: 28 - 20 = 8
    model = model_from_hf_config(write(tmp_path, raw), seq_len=32768)
    assert (model.sliding_window_tokens, model.windowed_layers) == (4096, 8)


def test_layer_types_replace_the_pattern(tmp_path):
    raw = json.loads((HF / "gemma-2-9b" / "config.json").read_text())
    raw["layer_types"] = ["sliding_attention"] * 5 + ["full_attention"] * 37
    assert model_from_hf_config(write(tmp_path, raw)).windowed_layers == 5
    raw["layer_types"] = ["sliding_attention"] * 41
    assert refusal(write(tmp_path, raw)).field == "layer_types"
    raw["layer_types"] = ["chunked_attention"] * 42
    err = refusal(write(tmp_path, raw))
    assert err.field == "layer_types" and "not modelled" in err.problem


def test_biases_norms_and_blocks():
    qwen = load("qwen2-7b")
    assert (qwen.qkv_bias, qwen.attn_out_bias, qwen.mlp_bias, qwen.norm_bias) == (True, False, False, False)
    neox = load("gpt-neox-20b")
    assert neox.parallel_blocks and neox.norms_per_layer == 2 and neox.qkv_bias and neox.mlp_bias
    assert neox.norm_bias and neox.position_embeddings == 0
    gpt2 = load("gpt2")
    assert gpt2.position_embeddings == 1024 and gpt2.qkv_bias and not gpt2.parallel_blocks
    assert load("opt-1.3b").position_embeddings == 2050  # OPT's learned table has 2 extra rows
    bloom = load("bloom-560m", seq_len=2048)
    assert bloom.embedding_norm and bloom.norm_bias and bloom.mlp_bias
    gemma = load("gemma-2-9b")
    assert gemma.norms_per_layer == 4 and not gemma.qkv_bias


def test_falcon_40b_layout(tmp_path):
    # new decoder architecture: parallel attention with two LayerNorms (ln_attn, ln_mlp)
    raw = json.loads((HF / "falcon-7b" / "config.json").read_text())
    raw.update(new_decoder_architecture=True, num_kv_heads=8, num_hidden_layers=60,
               hidden_size=8192, num_attention_heads=128)
    model = model_from_hf_config(write(tmp_path, raw), seq_len=2048)
    assert model.parallel_blocks and model.norms_per_layer == 2
    raw.update(parallel_attn=False, bias=True)
    model = model_from_hf_config(write(tmp_path, raw), seq_len=2048)
    assert not model.parallel_blocks and model.norms_per_layer == 2 and model.mlp_bias


def test_llama_attention_and_mlp_bias(tmp_path):
    plain = load("llama-3-8b")
    model = model_from_hf_config(write(tmp_path, llama(attention_bias=True, mlp_bias=True)))
    from paraplan.cost.flops import layer_params
    # q, k, v, o biases 4096 + 2*1024 + 4096 and gate, up, down biases 2*14336 + 4096
    assert layer_params(model) - layer_params(plain) == 4096 + 2048 + 4096 + 2 * 14336 + 4096


def test_dropout_is_read():
    assert load("gpt2").dropout == 0.1  # resid_pdrop = attn_pdrop = 0.1
    opt = load("opt-1.3b")  # dropout 0.1, attention_dropout 0.0
    assert opt.dropout == 0.1
    assert any(line.startswith("dropout: hidden 0.1, attention 0") for line in opt.unmodelled)
    assert load("llama-3-8b").dropout == 0.0


def test_what_is_not_priced_is_one_line_each(tmp_path):
    assert load("llama-3-8b").unmodelled == ()
    assert load("qwen2-7b").unmodelled == ()
    gemma = load("gemma-2-9b").unmodelled
    assert len(gemma) == 2 and all("softcapping" in line for line in gemma)
    # GPT-2's embedding dropout has no mask in the memory model
    assert load("gpt2").unmodelled == ("embd_pdrop 0.1: this dropout's mask (1 byte per"
                                       " element) is not counted",)
    model = model_from_hf_config(write(tmp_path, llama(quantization_config={"bits": 4},
                                                       rope_scaling={"type": "linear"})))
    assert model.unmodelled == ("config keys not read, priced as if absent: quantization_config",)
    assert all("\n" not in line for line in model.unmodelled)


def test_bad_layout_values_are_refused(tmp_path):
    assert refusal(write(tmp_path, llama(head_dim=0))).field == "head_dim"
    raw = json.loads((HF / "mistral-7b" / "config.json").read_text())
    raw["sliding_window"] = "4k"
    assert refusal(write(tmp_path, raw)).field == "sliding_window"
    raw = json.loads((HF / "gpt2" / "config.json").read_text())
    raw["resid_pdrop"] = 1.5
    assert refusal(write(tmp_path, raw)).field == "resid_pdrop"


def test_head_dim_lifts_the_divisibility_rule(tmp_path):
    # Gemma 7B's shape: 3,072 wide, 16 heads of 256 (3072 / 16 = 192 is not the head width)
    model = model_from_hf_config(write(tmp_path, llama(hidden_size=3000, num_attention_heads=16,
                                                       num_key_value_heads=16, head_dim=256)))
    assert model.q_hidden == 4096 and model.hidden == 3000


def test_any_expert_count_is_refused_as_moe(tmp_path):
    # a Qwen-MoE-style key on an otherwise dense config: refused, not read as dense
    err = refusal(write(tmp_path, llama(num_experts=64, num_experts_per_tok=8)))
    assert err.field == "num_experts" and "declares mixture-of-experts" in err.problem
    assert "64 experts, 8 per token" in err.problem
    # one expert (or none) is a dense model
    assert model_from_hf_config(write(tmp_path, llama(num_experts=1))).unmodelled == ()


@pytest.mark.parametrize("stem", ["gemma-2-9b", "mistral-nemo-12b", "gpt2", "opt-1.3b", "qwen2-7b",
                                  "qwen3-8b", "gpt-oss-20b"])
def test_imported_model_survives_a_plan_file(stem):
    # `plan -o` writes the instance into the plan file (cost/readers/instance_writer.py): the
    # layout fields and the unpriced lines come back unchanged
    from dataclasses import replace as _replace

    import yaml as _yaml

    from paraplan.cost.readers.instance import instance_from_mapping, load_instance
    from paraplan.cost.readers.instance_writer import instance_to_mapping
    from paraplan.instances import __file__ as instances_init
    base = load_instance(Path(instances_init).parent / "tiny-gpt-8xA100.yaml")
    inst = _replace(base, model=load(stem, seq_len=1024))
    text = _yaml.safe_dump(instance_to_mapping(inst))
    assert instance_from_mapping(_yaml.safe_load(text), "plan.yaml").model == inst.model
