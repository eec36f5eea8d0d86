"""What each Hugging Face architecture adds to the plain transformer layer, read from its
config.json: head width, biases, norms, parallel blocks, learned positions, sliding-window
attention and dropout, as `ModelSpec` keyword arguments, plus one line for everything the
config declares that the cost model does not price (`ModelSpec.unmodelled`).

The layouts below were read from transformers 4.46's modelling code (the `__init__` of each
architecture's attention, MLP and decoder layer) and configuration defaults:

========  ==========  ==================================  ==================  ================
family    head_dim    biases                              norms (per layer)   other
========  ==========  ==================================  ==================  ================
Llama     head_dim    attention_bias: q,k,v,o (false);    2 RMSNorm
                      mlp_bias: gate,up,down (false)
Mistral   head_dim    none                                2 RMSNorm           sliding_window
                                                                              (4096; null: none)
                                                                              in every layer
Qwen2     -           q,k,v always; o and MLP never       2 RMSNorm           use_sliding_window
                                                                              (false):
                                                                              sliding_window in
                                                                              layers i >=
                                                                              max_window_layers
Gemma-2   head_dim    attention_bias: q,k,v,o (false)     4 RMSNorm (pre and  sliding_window
                                                          post attention and  (4096) in the even
                                                          MLP)                layers i = 0, 2, ..
GPT-2     -           every projection                    2 LayerNorm         n_positions learned
GPT-NeoX  -           attention_bias: qkv, dense (true);  2 LayerNorm         use_parallel_residual
                      MLP always                                              (true)
OPT       -           enable_bias: all (true)             2 LayerNorm         max_position_
                                                                              embeddings + 2
                                                                              learned rows
BLOOM     -           every projection                    2 LayerNorm + one   ALiBi
                                                          after the embedding
Falcon    -           bias: all (false)                   LayerNorm: 2         parallel_attn
                                                          sequential; in       (true)
                                                          parallel blocks
                                                          num_ln_in_parallel_
                                                          attn (new decoder
                                                          architecture: 2,
                                                          else 1)
========  ==========  ==================================  ==================  ================

Read later the same way (transformers 4.51-4.55): Qwen3 as Qwen2 but head_dim (128),
attention_bias (false) for q, k, v, o and a per-head RMSNorm of Q and K (q_norm, k_norm:
`ModelSpec.qk_norm`); Phi-3 as Mistral with no default window; Gemma-3 as Gemma-2 with every
sliding_window_pattern-th (6) layer global, and Qwen3's q_norm/k_norm; gpt-oss with
attention_bias (true), one learned sink logit per head (`ModelSpec.attention_sinks`), biases on
its experts and router (`ModelSpec.expert_bias`: GptOssExperts' gate_up_proj_bias of
2 x intermediate_size and down_proj_bias of hidden_size per expert, GptOssTopKRouter's bias of
one per expert) and layer_types alternating a 128-token window (even layers) with full
attention; Llama-4 as Llama (its Q/K norm has no weights).

A `layer_types` list (newer Qwen2, Qwen3, Gemma and gpt-oss configs) names each layer's attention and replaces
the pattern rules above. Every family's final norm matches its layer norms (LayerNorm has a
bias: `ModelSpec.norm_bias`).

Dropout: `ModelSpec.dropout` stores masks for the residual dropouts and, with standard
attention, the attention-probability dropout; it is the larger of the config's hidden and
attention dropouts, with a line when they differ.

Keys that change nothing the cost model prices are listed in `COST_FREE_KEYS` with the reason;
a key that is neither read nor listed there gets one line naming it, so an unfamiliar field is
never dropped silently. Every key is read through `ConfigReader`, which cost/hf_config.py uses
too (with `shown` and `key_text`, the readers' message helpers).
"""

from __future__ import annotations

import math
from typing import Any

from paraplan.cost.errors import InstanceError
from paraplan.cost.ranges import RANGES, out_of_range, range_text

# Keys that leave time and memory unchanged, grouped by why.
COST_FREE_KEYS = frozenset({
    # identity, bookkeeping and tokenizer ids
    "architectures", "model_type", "_name_or_path", "transformers_version", "torch_dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id",
    "decoder_start_token_id", "prefix", "task_specific_params", "id2label", "label2id",
    "return_dict", "output_attentions", "output_hidden_states", "torchscript", "is_decoder",
    "use_return_dict", "tokenizer_class", "dtype", "auto_map",
    # initialisation and numerical epsilons
    "initializer_range", "init_std", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
    # position encodings without parameters: rotary frequencies and scaling (transformers 5
    # writes both as rope_parameters; Gemma-3's local layers have their own base, YaRN and
    # LongRoPE their original length), ALiBi (a bias added inside the attention kernel), NeoX's
    # rotary on part of each head
    "rope_theta", "rope_scaling", "rotary_emb_base", "rotary_pct", "partial_rotary_factor",
    "rope_type", "alibi", "offset_alibi", "n_ctx", "rope_parameters", "rope_local_base_freq",
    "original_max_position_embeddings", "initial_context_length",
    # inference-time behaviour: KV cache, HF's emulation of Megatron's tp slicing, Llama-4's flag
    # for loading its checkpoint into llm-compressor
    "use_cache", "cache_implementation", "pretraining_tp", "slow_but_exact", "for_llm_compressor",
    "sliding_window_size",
    # element-wise choices at the same cost: activation function (the gated or plain MLP shape
    # is the family's) and gpt-oss's clamp of it, softmax upcast, attention scaling (Llama-4's
    # query temperature), pre- or post-norm order, fused-kernel flags of the original Megatron
    # training
    "hidden_act", "hidden_activation", "activation_function", "attention_softmax_in_fp32",
    "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
    "query_pre_attn_scalar", "swiglu_limit", "attn_temperature_tuning", "attn_scale", "floor_scale",
    "do_layer_norm_before", "apply_residual_connection_post_layernorm",
    "bias_dropout_fusion", "masked_softmax_fusion", "skip_bias_add", "skip_bias_add_qkv",
    # heads other than the language-model head, which causal-LM training does not run
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "summary_first_dropout", "classifier_dropout",
    # an old flag of some configs; recomputation is the planner's choice
    "gradient_checkpointing",
})


DESCRIBE_IN_YAML = "or describe the model under 'model:' in the instance YAML"


SHOWN_MAX_CHARS = 60  # a message's value, at most


def shown(value: Any) -> str:
    """`value` for a one-line message: a short repr of a scalar (control and line-break
    characters escaped), only the kind of a container, whose repr may be huge or nested."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOWN_MAX_CHARS:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= SHOWN_MAX_CHARS else text[:SHOWN_MAX_CHARS - 3] + "..."


def key_text(key: Any) -> str:
    """A mapping key as a message's field, or part of a dotted one: itself when a short
    printable string, else shown (its repr); shared by every reader (cost/readers/fields.py)."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 60 else shown(key)


class ConfigReader:
    """Typed access to a config's keys (cost/hf_config.py reads the sizes through it, the
    family readers below the layout); missing required keys are collected, then reported
    together by raise_missing(). Every key looked at is recorded, so that the keys never read
    can be named (unread_keys_note)."""

    def __init__(self, raw: dict, name: str, label: str):
        self.raw, self.name, self.label = raw, name, label
        self.missing: list[str] = []
        self.read: set[str] = set()

    def mark_read(self, *keys: str) -> None:
        self.read.update(keys)

    def unread(self) -> list[str]:
        return [key_text(k) for k in self.raw if k not in self.read]

    def used_key(self, keys: tuple[str, ...]) -> str:
        """The first of `keys` present with a value (null counts as absent), else the first."""
        self.read.update(keys)
        return next((k for k in keys if self.raw.get(k) is not None), keys[0])

    def integer(self, keys: tuple[str, ...], quantity: str, *,
                optional: bool = False) -> int | None:
        """The integer under the first of `keys` present, within the physical range of
        `quantity` (cost/ranges.py, the table every loader uses)."""
        key = self.used_key(keys)
        value = self.raw.get(key)
        if value is None:
            if not optional:
                self.missing.append(key)
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InstanceError(self.name, key, f"expected an integer, got {shown(value)}",
                                "write a whole number")
        r = RANGES[quantity]
        if not r.lo <= value <= r.hi:
            raise InstanceError(self.name, key,
                                f"must be between {r.lo:,} and {r.hi:,}, got {shown(value)}"
                                f" ({range_text(quantity)})", "correct the size")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        self.read.add(key)
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InstanceError(self.name, key, f"expected true or false, got {shown(value)}",
                                "write true or false")
        return value

    def number(self, key: str, quantity: str) -> float | None:
        """The number under `key` within the physical range of `quantity` (a dropout
        probability, a soft-capping value); None when absent or null."""
        self.read.add(key)
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InstanceError(self.name, key, f"expected a number, got {shown(value)}",
                                "write a number such as 0.0")
        problem = out_of_range(quantity, value)
        if problem is not None:
            raise InstanceError(self.name, key, problem, "correct the value")
        return float(value)

    def window(self, key: str, default: int | None) -> int | None:
        """A sliding-window length in tokens: `default` when absent, None when null."""
        self.read.add(key)
        if key not in self.raw:
            return default
        value = self.raw[key]
        if value is None:
            return None
        if (isinstance(value, bool) or not isinstance(value, int)
                or out_of_range("sliding_window_tokens", value) is not None):
            raise InstanceError(self.name, key, f"expected a window length in tokens or null,"
                                f" got {shown(value)} ({range_text('sliding_window_tokens')})",
                                "write a whole number of tokens, or null")
        return value

    def layer_types(self, layers: int) -> tuple[str, ...] | None:
        """`layer_types`: each layer's attention, "full_attention" or "sliding_attention"."""
        self.read.add("layer_types")
        value = self.raw.get("layer_types")
        if value is None:
            return None
        allowed = ("full_attention", "sliding_attention")
        if not isinstance(value, list) or len(value) != layers:
            raise InstanceError(self.name, "layer_types", f"expected a list of {layers} entries"
                                f" (one per layer), got {shown(value)}"
                                + (f" with {len(value)}" if isinstance(value, list) else ""),
                                "list each layer's attention: " + " or ".join(allowed))
        for entry in value:
            if entry not in allowed:
                raise InstanceError(self.name, "layer_types", f"attention kind {shown(entry)} is"
                                    " not modelled", "use " + " or ".join(allowed)
                                    + f", {DESCRIBE_IN_YAML}")
        return tuple(value)

    def raise_missing(self) -> None:
        if not self.missing:
            return
        quoted = [f"'{k}'" for k in self.missing]
        listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
        raise InstanceError(self.name, ", ".join(self.missing),
                            f"missing {listed}, needed for {self.label}",
                            f"add {listed} {DESCRIBE_IN_YAML}")


def read_layout(cfg: ConfigReader, family: str, layers: int) -> tuple[dict[str, Any], list[str]]:
    """(ModelSpec keyword arguments, lines for what is not priced) of `family`'s layout: the
    head width and attention bias defaults of the tables below, then the family's own reader
    (_FAMILY_LAYOUT), the sliding windows and the dropout."""
    spec: dict[str, Any] = {}
    notes: list[str] = []
    if family in _HEAD_DIM_DEFAULT:
        head_dim = cfg.integer(("head_dim",), "head_dim", optional=True)
        spec["attention_head_dim"] = _HEAD_DIM_DEFAULT[family] if head_dim is None else head_dim
    if family in _ATTENTION_BIAS_DEFAULT:
        bias = cfg.boolean("attention_bias", _ATTENTION_BIAS_DEFAULT[family])
        spec.update(qkv_bias=bias, attn_out_bias=bias)
    own = _FAMILY_LAYOUT.get(family)
    if own is not None:
        own(cfg, spec, notes)
    spec.update(_windows(cfg, family, layers))
    spec["dropout"] = _dropout(cfg, family, notes)
    return spec, notes


# Each family's reader: (config, ModelSpec keyword arguments to add to, notes to add to).

def _llama(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    spec["mlp_bias"] = cfg.boolean("mlp_bias", False)


def _qwen2(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    spec["qkv_bias"] = True


def _qwen3(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    spec["qk_norm"] = True  # Qwen3Attention: q_norm, k_norm


def _gemma2(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    spec["norms_per_layer"] = 4
    for key, what in (("attn_logit_softcapping", "the tanh capping every attention score"),
                      ("final_logit_softcapping", "the tanh capping every logit")):
        cap = cfg.number(key, "logit_softcapping")
        if cap:  # null or 0: no capping
            notes.append(f"{key} {cap:g}: {what} is not priced (a few element-wise FLOPs"
                         " each)")


def _gemma3(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    spec["qk_norm"] = True  # Gemma3Attention: q_norm, k_norm
    if cfg.boolean("use_bidirectional_attention", False):
        raise InstanceError(cfg.name, "use_bidirectional_attention", "true: attention without the"
                            " causal mask (an embedding model's, EmbeddingGemma) is not modelled;"
                            " paraplan prices causal decoders", "plan a causal Gemma-3"
                            " (use_bidirectional_attention false or absent)")
    _gemma2(cfg, spec, notes)


def _llama4(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    # Llama4TextL2Norm: a weightless L2 norm of Q and K (element-wise work only)
    cfg.mark_read("use_qk_norm", "attention_chunk_size", "no_rope_layers", "layer_types",
                  "moe_layers", "interleave_moe_layer_step")


def _gpt_oss(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    # GptOssAttention.sinks; GptOssExperts' and GptOssTopKRouter's biases
    spec.update(attention_sinks=True, expert_bias=True)


def _gpt2(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    spec.update(qkv_bias=True, attn_out_bias=True, mlp_bias=True, norm_bias=True)


def _bloom(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    _gpt2(cfg, spec, notes)
    spec["embedding_norm"] = True
    cfg.mark_read("n_inner")  # BloomMLP is hidden -> 4 x hidden whatever n_inner says


def _gpt_neox(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    bias = cfg.boolean("attention_bias", True)
    spec.update(qkv_bias=bias, attn_out_bias=bias, mlp_bias=True, norm_bias=True,
                parallel_blocks=cfg.boolean("use_parallel_residual", True))


def _opt(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    bias = cfg.boolean("enable_bias", True)
    spec.update(qkv_bias=bias, attn_out_bias=bias, mlp_bias=bias, norm_bias=True)
    if not cfg.boolean("layer_norm_elementwise_affine", True):
        notes.append("layer_norm_elementwise_affine false: the norms have no parameters,"
                     " but their scale and bias are counted (2 x hidden per norm)")
    if cfg.boolean("_remove_final_layer_norm", False):
        notes.append("_remove_final_layer_norm true: the final norm is counted although"
                     " the model has none")
    layerdrop = cfg.number("layerdrop", "dropout")
    if layerdrop:
        notes.append(f"layerdrop {layerdrop:g}: every layer is priced as run in every step")


def _falcon(cfg: ConfigReader, spec: dict, notes: list[str]) -> None:
    bias = cfg.boolean("bias", False)
    parallel = cfg.boolean("parallel_attn", True)
    new_decoder = cfg.boolean("new_decoder_architecture", cfg.raw.get("model_type") == "RefinedWeb")
    norms = cfg.integer(("num_ln_in_parallel_attn",), "norms_per_layer", optional=True)
    if norms is None:
        norms = 2 if new_decoder or not parallel else 1
    spec.update(qkv_bias=bias, attn_out_bias=bias, mlp_bias=bias, norm_bias=True,
                parallel_blocks=parallel, norms_per_layer=2 if not parallel else norms)


_FAMILY_LAYOUT = {"llama": _llama, "qwen2": _qwen2, "qwen3": _qwen3, "gemma2": _gemma2,
                  "gemma3": _gemma3, "llama4": _llama4, "gpt_oss": _gpt_oss, "gpt2": _gpt2,
                  "bloom": _bloom, "gpt_neox": _gpt_neox, "opt": _opt, "falcon": _falcon}


# head_dim when the config leaves it out: LlamaConfig and MistralConfig hidden // heads (None),
# Gemma2Config and Gemma3TextConfig 256, Qwen3Config 128
_HEAD_DIM_DEFAULT = {"llama": None, "mistral": None, "gemma2": 256, "gemma3": 256, "qwen3": 128,
                     "llama4": None, "gpt_oss": None}
# attention_bias (q, k, v and o) when the config leaves it out (GptOssConfig: true)
_ATTENTION_BIAS_DEFAULT = {"llama": False, "gemma2": False, "gemma3": False, "qwen3": False,
                           "llama4": False, "gpt_oss": True}
# sliding_window when the config leaves it out (None: no window)
_WINDOW_DEFAULT = {"mistral": 4096, "qwen2": 4096, "qwen3": 4096, "gemma2": 4096, "gemma3": 4096,
                   "phi3": None, "gpt_oss": 128}


def _windows(cfg: ConfigReader, family: str, layers: int) -> dict[str, Any]:
    """sliding_window_tokens and sliding_window_layers (module docstring's table)."""
    if family not in _WINDOW_DEFAULT:
        return {}
    cfg.mark_read("use_sliding_window", "max_window_layers", "sliding_window", "sliding_window_pattern")
    types = (cfg.layer_types(layers) if family in ("qwen2", "qwen3", "gemma2", "gemma3", "gpt_oss")
             else None)
    if family in ("qwen2", "qwen3") and not cfg.boolean("use_sliding_window", False):
        return {}  # Qwen2Config, Qwen3Config: sliding_window = None unless use_sliding_window
    window = cfg.window("sliding_window", _WINDOW_DEFAULT[family])
    if window is None:
        return {}
    if types is not None:
        windowed = sum(t == "sliding_attention" for t in types)
    elif family in ("mistral", "phi3"):
        windowed = layers
    elif family in ("qwen2", "qwen3"):  # Qwen2Attention: layer_idx >= max_window_layers slides
        full = cfg.integer(("max_window_layers",), "sliding_window_layers", optional=True)
        windowed = layers - min(layers, 28 if full is None else full)
    elif family == "gemma3":  # Gemma3TextConfig: every sliding_window_pattern-th layer is global
        pattern = cfg.integer(("sliding_window_pattern",), "sliding_window_layers", optional=True)
        windowed = layers - layers // (6 if pattern is None else pattern)
    else:  # Gemma2Attention, GptOssConfig's layer_types: even layers slide
        windowed = (layers + 1) // 2
    return {"sliding_window_tokens": window, "sliding_window_layers": windowed}


# (hidden dropout keys, attention dropout keys, dropouts the memory model has no mask for)
_DROPOUT_KEYS = {
    "gpt2": (("resid_pdrop",), ("attn_pdrop",), ("embd_pdrop",)),
    "opt": (("dropout",), ("attention_dropout",), ("activation_dropout",)),
    "gpt_neox": (("hidden_dropout",), ("attention_dropout",), ()),
    "bloom": (("hidden_dropout",), ("attention_dropout",), ()),
    "falcon": (("hidden_dropout",), ("attention_dropout",), ()),
    "phi3": (("resid_pdrop",), ("attention_dropout",), ("embd_pdrop",)),
}
_ATTENTION_ONLY = ((), ("attention_dropout",), ())  # Llama, Mistral, Qwen2/3, Gemma-2/3, ...


def _dropout(cfg: ConfigReader, family: str, notes: list[str]) -> float:
    hidden_keys, attention_keys, unpriced = _DROPOUT_KEYS.get(family, _ATTENTION_ONLY)
    hidden = max((cfg.number(k, "dropout") or 0.0 for k in hidden_keys), default=0.0)
    attention = max((cfg.number(k, "dropout") or 0.0 for k in attention_keys), default=0.0)
    for key in unpriced:
        p = cfg.number(key, "dropout")
        if p:
            notes.append(f"{key} {p:g}: this dropout's mask (1 byte per element) is not counted")
    if hidden != attention:
        notes.append(f"dropout: hidden {hidden:g}, attention {attention:g}, priced as"
                     f" {max(hidden, attention):g} for both (residual masks; the attention"
                     " mask only with standard attention)")
    return max(hidden, attention)


def unread_keys_note(cfg: ConfigReader) -> list[str]:
    """One line naming the keys neither read nor known to be cost-free, if any."""
    keys = [k for k in cfg.unread() if k not in COST_FREE_KEYS]
    if not keys:
        return []
    shown = ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
    return [f"config keys not read, priced as if absent: {shown}"]
