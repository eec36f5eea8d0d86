"""cost/hf_config.py: every bundled Hugging Face config.json maps to the published shape, and
every refusal is one line naming the file, the JSON key and the fix.

The configs in tests/data/hf are the Hub's config.json files (tests/data/hf/README.md names
each repository); the expected numbers are those of the model cards and papers cited per row.
"""

import json
from pathlib import Path

import pytest

from cost.errors import InstanceError
from cost.hf_config import model_from_hf_config
from cost.specs import Mlp

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
}


def load(stem: str, **kw):
    return model_from_hf_config(HF / stem / "config.json", **kw)


def shape(m):
    return (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab, m.seq_len, m.mlp,
            m.tied_embeddings)


def test_every_bundled_config_has_a_test():
    tested = set(EXPECTED) | {"bloom-560m", "falcon-7b", "mixtral-8x7b"}
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


def test_mixtral_is_refused_as_moe():
    with pytest.raises(InstanceError) as info:
        load("mixtral-8x7b")
    err = info.value
    assert err.field == "num_local_experts"
    assert "MoE is not modelled yet" in str(err) and "8 experts, 2 per token" in str(err)
    assert "\n" not in str(err)


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
