"""A `ModelSpec` from a Hugging Face `config.json`, so a model need not be retyped as YAML.

Supported (by the first `architectures` entry, else by `model_type`):

=========================  ===========================================================  ======
architecture               where each ModelSpec field comes from                        MLP
=========================  ===========================================================  ======
LlamaForCausalLM (2 / 3)   num_hidden_layers, hidden_size, num_attention_heads,         swiglu
                           num_key_value_heads (default: heads), intermediate_size,
                           vocab_size, max_position_embeddings
MistralForCausalLM         as Llama; num_key_value_heads required                       swiglu
Qwen2ForCausalLM           as Llama; num_key_value_heads required                       swiglu
Gemma2ForCausalLM          as Llama; num_key_value_heads required                       swiglu
GPT2LMHeadModel            n_layer, n_embd, n_head, n_inner (null: 4 x n_embd),         gelu
                           vocab_size, n_positions
GPTNeoXForCausalLM         as Llama without kv heads; intermediate_size                 gelu
OPTForCausalLM             num_hidden_layers, hidden_size, num_attention_heads,         gelu
                           ffn_dim, vocab_size, max_position_embeddings
BloomForCausalLM           n_layer, hidden_size, n_head; ffn 4 x hidden; ALiBi, so      gelu
                           the sequence length must be given
Qwen3ForCausalLM           as Llama; num_key_value_heads required                       swiglu
Phi3ForCausalLM            as Llama (fused qkv_proj and gate_up_proj: the same matmuls) swiglu
Gemma3ForCausalLM          as Llama; num_key_value_heads required                       swiglu
FalconForCausalLM          num_hidden_layers, hidden_size, num_attention_heads, kv      gelu
                           heads from multi_query / new_decoder_architecture /
                           num_kv_heads; ffn_hidden_size (default 4 x hidden); the
                           sequence length must be given unless max_position_embeddings
=========================  ===========================================================  ======

`seq_len`, when given, replaces the config's maximum position count (the context a model
supports is not the length it is trained at); models with learned absolute positions (GPT-2,
OPT) cannot go beyond theirs. `tie_word_embeddings` is read where present; otherwise each
architecture's Hugging Face default applies (tied for GPT-2, OPT, BLOOM, Falcon and Gemma-2).

Head width, biases, norms, parallel blocks, learned positions, sliding-window attention and
dropout are read per architecture by cost/hf_layout.py (its table); what a config declares that
is not priced, and any key neither read nor known to be cost-free, becomes one line of
`ModelSpec.unmodelled`, shown with every plan (cost/model_notes.py).

MLP shape: Llama, Mistral, Qwen2, Gemma-2 (and Mixtral) use a gated
MLP with three matmuls (gate_proj, up_proj, down_proj), modelled as `Mlp.SWIGLU` whatever the
`hidden_act` (SiLU in every released config; a GELU-gated variant costs the same matmuls). The
others use two matmuls, modelled as `Mlp.GELU`. OPT's ReLU MLP is mapped to `Mlp.GELU` too:
the two matmuls are identical and the element-wise activation differs only in a few FLOPs per
element, far below the matmuls' cost.

Mixture-of-experts configs (`ModelSpec.moe`, priced by cost/moe.py):

=========================  ===========================================================
architecture               MoE fields (model fields as Mixtral: Mistral's; Qwen2-MoE: Qwen2's;
                           Qwen3-MoE: Llama's with head_dim and a per-head q/k RMSNorm)
=========================  ===========================================================
MixtralForCausalLM         num_local_experts, num_experts_per_tok; intermediate_size is
                           each expert's width
Qwen2MoeForCausalLM        num_experts, num_experts_per_tok, moe_intermediate_size,
                           shared_expert_intermediate_size; mlp_only_layers (dense layers,
                           width intermediate_size) must be the first layers, and
                           decoder_sparse_step 1
Qwen3MoeForCausalLM        as Qwen2-MoE without a shared expert (transformers 5 saves
                           num_experts of both as num_local_experts, read too)
Llama4ForCausalLM          num_local_experts, num_experts_per_tok; intermediate_size is
                           each expert's and the shared expert's width,
                           intermediate_size_mlp the dense layers'; MoE layers from
                           moe_layers, else every interleave_moe_layer_step-th layer, which
                           must follow the dense ones (Scout; Maverick's alternating layers are
                           refused). Chunked attention (attention_chunk_size) is causal
                           attention at a sequence no longer than a chunk, refused beyond.
GptOssForCausalLM          num_local_experts, num_experts_per_tok (= experts_per_token),
                           intermediate_size each expert's width; every layer MoE

DeepseekV3ForCausalLM      as Llama for the dense sizes (intermediate_size: the first
DeepseekV2ForCausalLM      first_k_dense_replace layers' width); n_routed_experts,
                           num_experts_per_tok, moe_intermediate_size (each expert's width),
                           n_shared_experts x moe_intermediate_size (the shared MLP),
                           first_k_dense_replace (dense layers), moe_layer_freq 1; multi-head
                           latent attention (`ModelSpec.mla`) from q_lora_rank (null: none),
                           kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, with
                           num_key_value_heads (if given) = num_attention_heads
=========================  ===========================================================

DeepSeek's group-limited routing (n_group, topk_group) is a line of `ModelSpec.unmodelled`:
node-limited routing is model.moe.max_nodes_per_token in YAML. Its multi-token prediction
depth (num_nextn_predict_layers) is `ModelSpec.mtp_layers`, priced on the last stage. A latent-attention key
(kv_lora_rank, q_lora_rank) in a config of any other architecture is refused in one line.

A vision-language config (a `text_config` object: Gemma-3 4B and up, Llama-4 as released) is
refused in one line: its text decoder is read from a config of its own.

Qwen3's, Qwen3-MoE's and Gemma-3's q_norm/k_norm (2 x head_dim per layer) are
`ModelSpec.qk_norm`; gpt-oss's attention sinks (one per head and layer) `ModelSpec.attention_sinks`
and its expert and router biases `ModelSpec.expert_bias` (cost/hf_layout.py): every parameter of
the families above is counted.

Not modelled, and refused with an error rather than approximated: an expert count (any of
`MOE_KEYS` other than null, 0 or 1) on an architecture not listed above as MoE, and OPT's
input/output projections when `word_embed_proj_dim` differs from `hidden_size` (OPT-350m).

Every problem raises one `InstanceError(path, field, problem, fix)`, the field being the JSON
key (or "line L, column C" for malformed JSON). A config.json larger than MAX_HF_CONFIG_BYTES
(16 MiB; released ones are a few KiB) is refused before it is read, and one nested more than
MAX_JSON_DEPTH (100) levels deep is refused after parsing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.user_text import read_text_file
from paraplan.cost.hf_layout import (DESCRIBE_IN_YAML, ConfigReader, key_text, read_layout, shown,
                                     unread_keys_note)
from paraplan.cost.ranges import out_of_range, range_text
from paraplan.cost.specs import MlaSpec, Mlp, ModelSpec, MoeSpec

MAX_HF_CONFIG_BYTES = 16 * 2**20
# expert counts of the mixture-of-experts configs (Mixtral; Qwen-MoE and OLMoE; DeepSeek;
# Hunyuan-style): any other than null, 0 or 1 refuses the config
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
MAX_JSON_DEPTH = 100
_SEQ_LEN_FIX = "give the training sequence length, e.g. paraplan --seq-len 2048"


@dataclass(frozen=True, slots=True)
class _Family:
    """Where one architecture keeps each size; each tuple lists accepted keys, preferred first."""

    label: str
    layers: tuple[str, ...]
    hidden: tuple[str, ...]
    heads: tuple[str, ...]
    ffn: tuple[str, ...]  # empty: always 4 x hidden
    ffn_default_4h: bool  # the ffn key may be absent or null, meaning 4 x hidden
    positions: tuple[str, ...]  # empty: no maximum length in the config (ALiBi)
    learned_positions: bool  # absolute position embeddings: seq_len cannot exceed them
    gated: bool  # three-matmul gated MLP (Mlp.SWIGLU)
    tied_default: bool
    kv: str  # "default_heads" | "required" | "none" | "falcon"


_LLAMA_KEYS = dict(layers=("num_hidden_layers",), hidden=("hidden_size",),
                   heads=("num_attention_heads",), ffn=("intermediate_size",),
                   ffn_default_4h=False, positions=("max_position_embeddings",),
                   learned_positions=False, gated=True, tied_default=False)

_FAMILIES = {
    "llama": _Family("Llama", **_LLAMA_KEYS, kv="default_heads"),
    # MistralConfig and Qwen2Config default num_key_value_heads to 8 and 32, not to the head
    # count, so a config without the key is ambiguous and refused.
    "mistral": _Family("Mistral", **_LLAMA_KEYS, kv="required"),
    "qwen2": _Family("Qwen2", **_LLAMA_KEYS, kv="required"),
    "mixtral": _Family("Mixtral", **_LLAMA_KEYS, kv="required"),
    "qwen2_moe": _Family("Qwen2-MoE", **_LLAMA_KEYS, kv="required"),
    "qwen3_moe": _Family("Qwen3-MoE", **_LLAMA_KEYS, kv="required"),
    "deepseek_v2": _Family("DeepSeek-V2", **_LLAMA_KEYS, kv="default_heads"),
    "deepseek_v3": _Family("DeepSeek-V3", **_LLAMA_KEYS, kv="default_heads"),
    # Gemma2Config ties the embeddings by default; its MLP is gated (GELU-tanh gate)
    "gemma2": _Family("Gemma-2", **{**_LLAMA_KEYS, "tied_default": True}, kv="required"),
    "gemma3": _Family("Gemma-3", **{**_LLAMA_KEYS, "tied_default": True}, kv="required"),
    # Qwen3Config defaults num_key_value_heads to 32; Phi3Config to the head count
    "qwen3": _Family("Qwen3", **_LLAMA_KEYS, kv="required"),
    "phi3": _Family("Phi-3", **_LLAMA_KEYS, kv="default_heads"),
    # Llama4TextConfig: intermediate_size is each expert's (and the shared expert's) width,
    # intermediate_size_mlp the dense layers'
    "llama4": _Family("Llama-4", **{**_LLAMA_KEYS, "ffn": ("intermediate_size_mlp",)},
                      kv="required"),
    "gpt_oss": _Family("gpt-oss", **_LLAMA_KEYS, kv="required"),
    "gpt2": _Family("GPT-2", layers=("n_layer",), hidden=("n_embd",), heads=("n_head",),
                    ffn=("n_inner",), ffn_default_4h=True, positions=("n_positions", "n_ctx"),
                    learned_positions=True, gated=False, tied_default=True, kv="none"),
    "gpt_neox": _Family("GPT-NeoX", **{**_LLAMA_KEYS, "gated": False}, kv="none"),
    "opt": _Family("OPT", **{**_LLAMA_KEYS, "ffn": ("ffn_dim",), "learned_positions": True,
                             "gated": False, "tied_default": True}, kv="none"),
    # BloomMLP is hidden -> 4 x hidden -> hidden whatever n_inner says.
    "bloom": _Family("BLOOM", layers=("n_layer", "num_hidden_layers"),
                     hidden=("hidden_size", "n_embed"), heads=("n_head", "num_attention_heads"),
                     ffn=(), ffn_default_4h=True, positions=(), learned_positions=False,
                     gated=False, tied_default=True, kv="none"),
    "falcon": _Family("Falcon", layers=("num_hidden_layers", "n_layer"),
                      hidden=("hidden_size", "n_embed"), heads=("num_attention_heads", "n_head"),
                      ffn=("ffn_hidden_size",), ffn_default_4h=True,
                      positions=("max_position_embeddings",), learned_positions=False,
                      gated=False, tied_default=True, kv="falcon"),
}

_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "Qwen2ForCausalLM": "qwen2",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",
    "Llama4ForCausalLM": "llama4",
    "GptOssForCausalLM": "gpt_oss",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
    "OPTForCausalLM": "opt",
    "BloomForCausalLM": "bloom",
    "FalconForCausalLM": "falcon",
    "RWForCausalLM": "falcon",  # Falcon's configs before its transformers integration
}

_MODEL_TYPES = {
    "llama": "llama", "mistral": "mistral", "mixtral": "mixtral", "qwen2": "qwen2", "gemma2": "gemma2",
    "qwen2_moe": "qwen2_moe", "qwen3_moe": "qwen3_moe", "qwen3": "qwen3", "phi3": "phi3",
    "gemma3_text": "gemma3", "llama4_text": "llama4", "gpt_oss": "gpt_oss",
    "deepseek_v2": "deepseek_v2", "deepseek_v3": "deepseek_v3",
    "gpt2": "gpt2", "gpt_neox": "gpt_neox", "opt": "opt", "bloom": "bloom", "falcon": "falcon",
    "RefinedWebModel": "falcon", "RefinedWeb": "falcon",
}


def model_from_hf_config(path: str | Path, seq_len: int | None = None) -> ModelSpec:
    """The model described by a Hugging Face `config.json` (or a directory holding one).

    `seq_len` is the training sequence length; without it the config's maximum position count
    is used (max_position_embeddings, or n_positions for GPT-2). The model is named after the
    directory holding `config.json` (else after the file).
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    name = str(path)
    raw = _read_json(name)
    _refuse_vision_language(raw, name)
    family_key = _family_key(raw, name)
    if family_key not in MLA_FAMILIES:
        _refuse_latent_attention(raw, name)
    fam = _FAMILIES[family_key]

    _check_expert_spellings(raw, name)
    _refuse_experts_of_dense_family(raw, name, family_key, fam.label)

    cfg = ConfigReader(raw, name, fam.label)
    cfg.mark_read(*MOE_KEYS, "num_experts_per_tok")
    layers = cfg.integer(fam.layers, "layers")
    moe = _moe(cfg, family_key, layers) if family_key in MOE_FAMILIES else None
    hidden = cfg.integer(fam.hidden, "hidden")
    heads = cfg.integer(fam.heads, "heads")
    vocab = cfg.integer(("vocab_size",), "vocab")
    ffn = cfg.integer(fam.ffn, "ffn", optional=fam.ffn_default_4h) if fam.ffn else None
    kv_heads = _kv_heads(cfg, fam, raw)
    mla = _mla(cfg) if family_key in MLA_FAMILIES else None
    cfg.raise_missing()

    layout, notes = read_layout(cfg, MOE_FAMILIES.get(family_key, family_key), layers)
    mtp = 0
    if mla is not None:
        notes += _deepseek_notes(cfg)
        # DeepSeek-V3's multi-token prediction modules (ModelSpec.mtp_layers)
        mtp = cfg.integer(("num_nextn_predict_layers",), "mtp_layers", optional=True) or 0
        kv_heads = _latent_kv_heads(name, kv_heads, heads)
    if family_key == "qwen3_moe":  # Qwen3MoeAttention: q_norm, k_norm as Qwen3's
        layout["qk_norm"] = True
    kv_heads = _check_heads(cfg, fam, layout, hidden, heads, kv_heads, latent=mla is not None)
    if family_key == "opt":
        _refuse_opt_projection(cfg, hidden)

    seq = _seq_len(cfg, fam, seq_len)
    if family_key == "llama4":
        _check_chunked_attention(cfg, seq)
    if fam.learned_positions:
        # OPTLearnedPositionalEmbedding keeps 2 rows beyond max_position_embeddings (an offset
        # from fairseq); GPT-2's wpe has n_positions rows
        limit = cfg.integer(fam.positions, "seq_len", optional=True) or seq
        layout["position_embeddings"] = limit + (2 if family_key == "opt" else 0)
    tied = cfg.boolean("tie_word_embeddings", fam.tied_default)
    try:
        return ModelSpec(
            name=path.parent.name if path.name == "config.json" and path.parent.name else path.stem,
            layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
            ffn=4 * hidden if ffn is None else ffn,
            vocab=vocab, seq_len=seq,
            mlp=Mlp.SWIGLU if fam.gated else Mlp.GELU,
            tied_embeddings=tied,
            unmodelled=tuple(notes + unread_keys_note(cfg)),
            moe=moe,
            mla=mla,
            mtp_layers=mtp,
            **layout,
        )
    except ConfigError as e:  # every invariant is checked above; kept as a safety net
        raise InstanceError(name, "<file>", str(e), "correct the config's sizes") from None


def _refuse_experts_of_dense_family(raw: dict, name: str, family_key: str, label: str) -> None:
    """A config of a family read as dense that declares experts: refused, not read as dense."""
    moe_key = next((k for k in MOE_KEYS if _declares_experts(raw.get(k))), None)
    if moe_key is None or family_key in MOE_FAMILIES:
        return
    experts = raw.get(moe_key)
    per_token = raw.get("num_experts_per_tok")
    counts = (f" ({shown(experts)} experts, {shown(per_token)} per token)"
              if experts is not None and per_token is not None else "")
    raise InstanceError(name, moe_key,
                        f"{label} declares mixture-of-experts layers{counts}, and MoE is"
                        " read only from Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3,"
                        " Llama-4 and gpt-oss configs",
                        "describe the model (with its moe: section) under 'model:' in the"
                        " instance YAML")


def _latent_kv_heads(name: str, kv_heads: int | None, heads: int) -> int:
    """Multi-head latent attention up-projects a key and a value for every head."""
    if kv_heads not in (None, heads):
        raise InstanceError(name, "num_key_value_heads", f"{kv_heads} key/value heads with"
                            f" multi-head latent attention, which up-projects a key and a"
                            f" value for each of the {heads} heads",
                            "give num_key_value_heads = num_attention_heads, or leave it out")
    return heads


def _check_heads(cfg: ConfigReader, fam, layout: dict, hidden: int, heads: int, kv_heads: int | None,
                 latent: bool) -> int:
    """The key/value head count (the head count when the config gives none), after checking
    that the heads split the width (unless the head width is given, or attention is latent) and
    the key/value heads divide the heads. A given head width equal to the default is dropped
    from `layout`: one spelling of one model."""
    if layout.get("attention_head_dim") is not None and layout["attention_head_dim"] * heads == hidden:
        layout["attention_head_dim"] = None
    if layout.get("attention_head_dim") is None and hidden % heads and not latent:
        raise InstanceError(cfg.name, cfg.used_key(fam.hidden), f"{hidden} is not divisible by"
                            f" {cfg.used_key(fam.heads)}={heads}", "correct the sizes; the head dimension must be whole")
    kv_heads = heads if kv_heads is None else kv_heads
    if heads % kv_heads:
        raise InstanceError(cfg.name, cfg.used_key(("num_key_value_heads", "num_kv_heads",
                                                    "n_head_kv")),
                            f"{heads} attention heads are not divisible by {kv_heads} kv heads",
                            "correct the key/value head count; it must divide the head count")
    return kv_heads


def _refuse_opt_projection(cfg: ConfigReader, hidden: int) -> None:
    """OPT-350m's project_in / project_out around a narrower embedding are not modelled."""
    proj = cfg.integer(("word_embed_proj_dim",), "hidden", optional=True)
    if proj is not None and proj != hidden:
        raise InstanceError(cfg.name, "word_embed_proj_dim",
                            f"{proj} differs from hidden_size={hidden}; OPT's project_in /"
                            " project_out layers are not modelled",
                            "describe the model under 'model:' in the instance YAML")


# MoE architectures, with the dense family whose attention layout (cost/hf_layout.py) they share
# (DeepSeek's: none of the table's; its attention is MLA_FAMILIES')
MOE_FAMILIES = {"mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "llama",
                "deepseek_v2": "deepseek", "deepseek_v3": "deepseek", "llama4": "llama4",
                "gpt_oss": "gpt_oss"}
# architectures with multi-head latent attention (ModelSpec.mla)
MLA_FAMILIES = ("deepseek_v2", "deepseek_v3")
# DeepSeek's routing options: the router's score function and scaling are element-wise work on
# its experts-wide output; ep_size is its inference code's expert split, not a training choice
_DEEPSEEK_ROUTER_KEYS = ("topk_method", "scoring_func", "routed_scaling_factor", "aux_loss_alpha",
                         "seq_aux", "ep_size")
# keys of the router's training loss and routing options: element-wise work on the router's
# experts-wide output, or inference-only
_ROUTER_KEYS = ("router_aux_loss_coef", "output_router_logits", "router_jitter_noise",
                "norm_topk_prob", "shared_expert_gate")


def _moe(cfg: ConfigReader, family: str, layers: int) -> MoeSpec:
    """The MoE fields of a Mixtral / Qwen2-MoE / Qwen3-MoE config (module docstring)."""
    cfg.mark_read(*_ROUTER_KEYS)
    # transformers 5 saves Qwen2-MoE's and Qwen3-MoE's expert count as num_local_experts
    experts_key = {"deepseek_v2": ("n_routed_experts",), "deepseek_v3": ("n_routed_experts",),
                   "qwen2_moe": ("num_experts", "num_local_experts"),
                   "qwen3_moe": ("num_experts", "num_local_experts")
                   }.get(family, ("num_local_experts",))
    experts = cfg.integer(experts_key, "experts")
    top_k = cfg.integer(("num_experts_per_tok",), "top_k")
    if family == "gpt_oss":
        _same_top_k(cfg, top_k)
    ffn_key = (("intermediate_size",) if family in ("mixtral", "llama4", "gpt_oss")
               else ("moe_intermediate_size",))
    expert_ffn = cfg.integer(ffn_key, "expert_ffn")
    shared = 0
    if family in MLA_FAMILIES:
        return _deepseek_moe(cfg, layers, experts, top_k, expert_ffn)
    if family == "llama4":
        dense = _llama4_dense_layers(cfg, layers)
        _check_counts(cfg, top_k, experts, dense, layers, "moe_layers")
        # Llama4TextMoe: the shared expert is a Llama4TextMLP of intermediate_size
        return MoeSpec(experts=experts, top_k=top_k, expert_ffn=expert_ffn,
                       shared_ffn=expert_ffn or 0, dense_layers=dense)
    if family == "gpt_oss":  # GptOssMLP: every layer routes, no shared expert
        _check_counts(cfg, top_k, experts, 0, layers, "num_local_experts")
        return MoeSpec(experts=experts, top_k=top_k, expert_ffn=expert_ffn)
    if family == "qwen2_moe":
        shared = cfg.integer(("shared_expert_intermediate_size",), "shared_ffn", optional=True) or 0
    if family == "qwen3_moe" and not cfg.boolean("use_sliding_window", False):
        cfg.mark_read("sliding_window", "max_window_layers")  # Qwen3MoeConfig: unused then
    dense = 0
    if family != "mixtral":
        step = cfg.integer(("decoder_sparse_step",), "dense_layers", optional=True)
        if step not in (None, 1):
            raise InstanceError(cfg.name, "decoder_sparse_step", f"{step}: MoE layers alternate"
                                " with dense ones, which is not priced (every layer after the"
                                " dense prefix is an MoE layer)", "describe the model under"
                                " 'model:' in the instance YAML")
        cfg.read.add("mlp_only_layers")
        only = cfg.raw.get("mlp_only_layers") or []
        if not isinstance(only, list) or sorted(only) != list(range(len(only))):
            raise InstanceError(cfg.name, "mlp_only_layers", f"{shown(only)}: only dense layers"
                                " before the first MoE layer are priced", "describe the model"
                                " under 'model:' in the instance YAML")
        dense = len(only)
    _check_counts(cfg, top_k, experts, dense, layers, "mlp_only_layers")
    return MoeSpec(experts=experts, top_k=top_k, expert_ffn=expert_ffn, shared_ffn=shared,
                   dense_layers=dense)


def _same_top_k(cfg: ConfigReader, top_k: int | None) -> None:
    """gpt-oss's config.json gives the experts per token twice (experts_per_token, the original
    code's name, beside num_experts_per_tok): they must agree."""
    cfg.mark_read("experts_per_token")
    other = cfg.raw.get("experts_per_token")
    if other is not None and other != top_k:
        raise InstanceError(cfg.name, "experts_per_token", f"{shown(other)} experts per token, but"
                            f" num_experts_per_tok gives {shown(top_k)}", "make them equal")


def _llama4_dense_layers(cfg: ConfigReader, layers: int) -> int:
    """Llama-4's dense prefix: the layers before the first MoE layer, MoE layers being
    `moe_layers` or, without it, every interleave_moe_layer_step-th layer (Llama4TextConfig:
    layers step - 1, 2 step - 1, ...). MoE layers that alternate with dense ones (Maverick's
    step 2) are refused: ModelSpec's MoE layers follow one dense prefix."""
    cfg.mark_read("moe_layers", "interleave_moe_layer_step")
    given = cfg.raw.get("moe_layers")
    if given is not None:
        key = "moe_layers"
        if not (isinstance(given, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                                and 0 <= i < layers for i in given)):
            raise InstanceError(cfg.name, key, f"expected a list of layer indices in [0, {layers}),"
                                f" got {shown(given)}", "list the MoE layers' indices")
        moe = sorted(set(given))
    else:
        key = "interleave_moe_layer_step"
        step = cfg.integer((key,), "dense_layers", optional=True)
        if step == 0:
            raise InstanceError(cfg.name, key, "0: no layer step", "give 1 (every layer MoE) or"
                                " leave the key out")
        step = step or 1  # Llama4TextConfig's default
        moe = list(range(step - 1, layers, step))
    if not moe:
        raise InstanceError(cfg.name, key, "no MoE layer", "plan it as a dense model")
    if moe != list(range(moe[0], layers)):
        pattern = ", ".join(map(str, moe[:4])) + (", ..." if len(moe) > 4 else "")
        raise InstanceError(cfg.name, key, f"MoE layers {pattern} alternate with dense ones, and"
                            " paraplan's model has MoE layers after one dense prefix only"
                            " (model.moe.dense_layers); no field expresses interleaved layers",
                            "plan a model whose MoE layers follow its dense ones (Llama-4 Scout:"
                            " interleave_moe_layer_step 1)")
    return moe[0]


def _deepseek_moe(cfg: ConfigReader, layers: int, experts: int, top_k: int, expert_ffn: int) -> MoeSpec:
    """DeepSeek-V2/V3's MoE fields (transformers' DeepseekV3DecoderLayer: layer i is an MoE
    layer when i >= first_k_dense_replace and i % moe_layer_freq == 0)."""
    cfg.mark_read(*_DEEPSEEK_ROUTER_KEYS)
    shared_experts = cfg.integer(("n_shared_experts",), "shared_experts", optional=True) or 0
    dense = cfg.integer(("first_k_dense_replace",), "dense_layers", optional=True) or 0
    freq = cfg.integer(("moe_layer_freq",), "dense_layers", optional=True)
    if freq not in (None, 1):
        raise InstanceError(cfg.name, "moe_layer_freq", f"{freq}: MoE layers alternate with dense"
                            " ones, which is not priced (every layer after the dense prefix is an"
                            " MoE layer)", "describe the model under 'model:' in the instance YAML")
    _check_counts(cfg, top_k, experts, dense, layers, "first_k_dense_replace")
    return MoeSpec(experts=experts, top_k=top_k, expert_ffn=expert_ffn,
                   shared_ffn=shared_experts * expert_ffn, dense_layers=dense)


def _check_counts(cfg: ConfigReader, top_k: int, experts: int, dense: int, layers: int,
                  dense_key: str) -> None:
    """The checks every MoE config passes once its keys are read: no key missing, top_k within
    the experts, at least one MoE layer (`dense_key` names the config's dense-prefix key)."""
    cfg.raise_missing()
    if top_k > experts:
        raise InstanceError(cfg.name, "num_experts_per_tok", f"{top_k} experts per token but"
                            f" only {experts} experts", "correct the expert counts")
    if dense >= layers:
        raise InstanceError(cfg.name, dense_key, "every layer is dense", "plan it as a dense model")


def _mla(cfg: ConfigReader) -> MlaSpec:
    """DeepSeek-V2/V3's multi-head latent attention sizes; q_lora_rank null: the query is
    projected from the layer input (DeepSeek-V2-Lite)."""
    q_lora = cfg.integer(("q_lora_rank",), "q_lora_rank", optional=True)
    sizes = {k: cfg.integer((k,), k) for k in ("kv_lora_rank", "qk_nope_head_dim",
                                               "qk_rope_head_dim", "v_head_dim")}
    cfg.raise_missing()
    return MlaSpec(q_lora_rank=q_lora, **sizes)


def _deepseek_notes(cfg: ConfigReader) -> list[str]:
    """What a DeepSeek config declares that is not priced, one line each."""
    notes = []
    groups, top_groups = cfg.raw.get("n_group"), cfg.raw.get("topk_group")
    cfg.mark_read("n_group", "topk_group")
    if isinstance(groups, int) and isinstance(top_groups, int) and 1 < groups and top_groups < groups:
        notes.append(f"n_group {groups}, topk_group {top_groups}: group-limited routing is not"
                     " priced (node-limited routing is model.moe.max_nodes_per_token in YAML)")
    if cfg.boolean("attention_bias", False):
        notes.append("attention_bias true: Megatron-core's latent attention has no projection"
                     " biases, and none are priced")
    return notes


def _check_chunked_attention(cfg: ConfigReader, seq: int) -> None:
    """Llama-4's chunked attention (attention_chunk_size; in its rotary layers, no_rope_layers):
    each query attends only to the keys of its own chunk. At a sequence no longer than a chunk
    that is plain causal attention; beyond it, neither full nor sliding-window attention prices
    it, so it is refused."""
    chunk = cfg.integer(("attention_chunk_size",), "sliding_window_tokens", optional=True)
    if chunk is not None and seq > chunk:
        raise InstanceError(cfg.name, "attention_chunk_size", f"chunked attention ({chunk:,}-token"
                            f" chunks) at a sequence of {seq:,} tokens is not modelled: paraplan"
                            " prices full causal and sliding-window attention, and each query here"
                            " sees only its own chunk", f"plan at --seq-len {chunk} or less, where"
                            " chunked attention is causal attention")


def _refuse_vision_language(raw: dict, name: str) -> None:
    """A vision-language config (Gemma-3 4B and up, Llama-4) nests its text decoder under
    `text_config`, often leaving sizes to transformers' defaults: refused in one line."""
    if isinstance(raw.get("text_config"), dict):
        archs = raw.get("architectures")
        first = archs[0] if isinstance(archs, list) and archs else None
        label = first if isinstance(first, str) else "this"
        raise InstanceError(name, "text_config", f"{key_text(label)} is a vision-language config;"
                            " paraplan reads a text decoder's config (its vision encoder is not"
                            " modelled)", "write text_config's keys, with the sizes"
                            " transformers fills in by default, as a config.json of their own"
                            " (model_type gemma3_text, llama4_text, ...)")


def _refuse_latent_attention(raw: dict, name: str) -> None:
    """Multi-head latent attention outside DeepSeek-V2/V3's architectures: one line, before
    anything else."""
    key = next((k for k in ("kv_lora_rank", "q_lora_rank") if raw.get(k) is not None), None)
    if key is not None:
        raise InstanceError(name, key, "multi-head latent attention (low-rank compressed Q and"
                            " KV) is read from DeepseekV2ForCausalLM and DeepseekV3ForCausalLM"
                            " configs only", "describe the model, with its mla: section, under"
                            " 'model:' in the instance YAML")


def _check_expert_spellings(raw: dict, name: str) -> None:
    """Two spellings of the expert count (MOE_KEYS) that disagree are refused, naming both:
    each family reads its own, so the other would be dropped silently. The same count twice
    is fine, and so are two plainly dense values (null, 0, 1)."""
    given = [(k, raw[k]) for k in MOE_KEYS if raw.get(k) is not None]
    for key, value in given[1:]:
        first, first_value = given[0]
        same = value == first_value and isinstance(value, bool) == isinstance(first_value, bool)
        if not same and (_declares_experts(value) or _declares_experts(first_value)):
            raise InstanceError(name, key, f"{shown(value)} experts, but {first} gives"
                                f" {shown(first_value)}: two spellings of the expert count that"
                                " disagree", f"keep one of {first} and {key}, or make them equal")


def _declares_experts(value: Any) -> bool:
    """An expert count that is not plainly dense: anything but null, 0 or 1 (a malformed value
    is refused as MoE too, rather than read as dense)."""
    return value is not None and not (isinstance(value, int) and not isinstance(value, bool)
                                      and value <= 1)


# --- reading -------------------------------------------------------------------------------

def _read_json(name: str) -> dict:
    text = read_text_file(name, MAX_HF_CONFIG_BYTES)
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates(name))
    except json.JSONDecodeError as e:
        raise InstanceError(name, f"line {e.lineno}, column {e.colno}", f"malformed JSON: {e.msg}",
                            "fix the JSON syntax there; a trailing comma or a missing quote are"
                            " the usual causes") from None
    except InstanceError:  # a duplicate key, from the hook
        raise
    except RecursionError:
        raise InstanceError(name, "<file>", f"nested more than {MAX_JSON_DEPTH} levels deep",
                            "give a Hugging Face config.json") from None
    except ValueError as e:  # an integer with more digits than Python converts (4,300)
        raise InstanceError(name, "<file>", f"malformed JSON: {str(e).split(';')[0]}",
                            "give the sizes as ordinary integers") from None
    if not isinstance(data, dict):
        raise InstanceError(name, "<top level>", "expected a JSON object",
                            "give a Hugging Face config.json")
    if _depth(data) > MAX_JSON_DEPTH:
        raise InstanceError(name, "<file>", f"nested more than {MAX_JSON_DEPTH} levels deep",
                            "give a Hugging Face config.json")
    return data


def _depth(data: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = (value.values() if isinstance(value, dict)
                    else value if isinstance(value, list) else None)
        if children is not None:
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                break
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _no_duplicates(name: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for key, value in pairs:
            if key in out:
                raise InstanceError(name, key_text(key), f"duplicate key {shown(key)}",
                                    "keep only one of the two entries")
            out[key] = value
        return out
    return hook


def _family_key(raw: dict, name: str) -> str:
    archs = raw.get("architectures")
    if archs is not None and not (isinstance(archs, list)
                                  and all(isinstance(a, str) for a in archs)):
        raise InstanceError(name, "architectures", "expected a list of class names",
                            'write e.g. ["LlamaForCausalLM"]')
    model_type = raw.get("model_type")
    for arch in archs or ():
        if arch in _ARCHITECTURES:
            return _ARCHITECTURES[arch]
    if isinstance(model_type, str) and model_type in _MODEL_TYPES:
        return _MODEL_TYPES[model_type]
    supported = ", ".join(_ARCHITECTURES)
    if not archs and model_type is None:
        raise InstanceError(name, "architectures", "missing 'architectures' and 'model_type'",
                            f"add one naming a supported architecture ({supported})"
                            f" {DESCRIBE_IN_YAML}")
    listed = ", ".join(key_text(a) for a in (archs or [])[:3]) or "none"
    listed += ", ..." if len(archs or ()) > 3 else ""
    raise InstanceError(name, "architectures" if archs else "model_type",
                        f"unsupported architecture {listed} (model_type {shown(model_type)})",
                        f"supported: {supported}; {DESCRIBE_IN_YAML}")


def _kv_heads(cfg: ConfigReader, fam: _Family, raw: dict) -> int | None:
    """Key/value heads, or None for "as many as query heads" (multi-head attention)."""
    if fam.kv == "none":
        return None
    if fam.kv in ("default_heads", "required"):
        return cfg.integer(("num_key_value_heads",), "kv_heads",
                           optional=fam.kv == "default_heads")
    # Falcon (transformers' FalconAttention): the new decoder architecture (40B, 180B) uses
    # num_kv_heads; otherwise multi_query (the default, Falcon-7B) means one kv head, and
    # without it every head has its own.
    new_decoder = cfg.boolean("new_decoder_architecture", raw.get("model_type") == "RefinedWeb")
    if new_decoder or not cfg.boolean("multi_query", True):
        return cfg.integer(("num_kv_heads", "n_head_kv"), "kv_heads", optional=True)
    return 1


def _seq_len(cfg: ConfigReader, fam: _Family, seq_len: int | None) -> int:
    limit_key = cfg.used_key(fam.positions) if fam.positions else None
    limit = cfg.integer(fam.positions, "seq_len", optional=True) if fam.positions else None
    if seq_len is None:
        if limit is not None:
            return limit
        if not fam.positions:
            problem = (f"{fam.label} uses ALiBi position biases, so config.json has no maximum"
                       " sequence length")
        else:
            problem = (f"{fam.label}'s config.json has no '{limit_key}', so the sequence"
                       " length is unknown")
        raise InstanceError(cfg.name, limit_key or "seq_len", problem, _SEQ_LEN_FIX)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) \
            or out_of_range("seq_len", seq_len) is not None:
        raise InstanceError(cfg.name, "seq_len", f"requested sequence length {seq_len!r} is not"
                            f" an integer in the {range_text('seq_len')}",
                            "give a whole number of tokens >= 1")
    if fam.learned_positions and limit is not None and seq_len > limit:
        raise InstanceError(cfg.name, limit_key, f"{fam.label} has {limit} learned position"
                            f" embeddings, fewer than the requested sequence length {seq_len}",
                            f"train at most {limit} tokens per sequence")
    return seq_len
