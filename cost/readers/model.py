"""The `model:` section (and its `moe:` and `mla:` sections) read into a ModelSpec.

Keys, units and defaults: docs/schema.md; the shape rules a model must
satisfy (heads dividing the hidden size, latent attention's exclusions) are checked here, once,
in the wording calibration rows share (`check_head_shape`).
"""

from __future__ import annotations

from paraplan.cost.specs import Mlp, MlaSpec, ModelSpec, MoeSpec
from paraplan.cost.readers.fields import Section, config_errors_as, describe, enum_values


MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "mlp",
               "tied_embeddings", "dropout", "head_dim", "qkv_bias", "attn_out_bias", "mlp_bias",
               "norm_bias", "norms_per_layer", "parallel_blocks", "position_embeddings",
               "embedding_norm", "sliding_window_tokens", "sliding_window_layers", "unmodelled",
               "moe", "mla", "mtp_layers", "qk_norm", "attention_sinks", "expert_bias")
MOE_KEYS = ("experts", "top_k", "expert_ffn", "shared_ffn", "dense_layers", "capacity_factor",
            "imbalance", "max_nodes_per_token")
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def check_head_shape(sec: Section, hidden: int, heads: int, kv_heads: int,
                     head_dim: int | None = None) -> None:
    """The attention shape every model needs, in one wording for instances and calibration
    rows: heads divide the hidden size (unless the head width is given), kv_heads divide the
    heads."""
    if head_dim is None and hidden % heads:
        raise sec.error("heads", f"hidden={hidden} is not divisible by heads={heads}",
                        "choose heads so that the head dimension hidden / heads is an integer,"
                        " or give head_dim")
    if heads % kv_heads:
        raise sec.error("kv_heads", f"heads={heads} is not divisible by kv_heads={kv_heads}",
                        "kv_heads must divide heads: each key/value head serves"
                        " heads / kv_heads query heads")


def model_from_section(sec: Section, instance_name: str) -> ModelSpec:
    heads = sec.integer("heads")
    kv_heads = sec.integer("kv_heads", heads)
    hidden = sec.integer("hidden")
    head_dim = sec.integer("head_dim", None)
    mla = mla_from_section(sec.section("mla", MLA_KEYS)) if sec.has("mla") else None
    if mla is None:
        check_head_shape(sec, hidden, heads, kv_heads, head_dim)
    else:
        _check_mla_model(sec, heads, kv_heads)
    layers = sec.integer("layers")
    seq_len = sec.integer("seq_len")
    positions = sec.integer("position_embeddings", 0)
    if 0 < positions < seq_len:
        raise sec.error("position_embeddings", f"{positions} learned positions are fewer than"
                        f" seq_len={seq_len}", "train at most that many tokens per sequence,"
                        " or give 0 for rotary/ALiBi positions")
    window = sec.integer("sliding_window_tokens", None)
    window_layers = sec.integer("sliding_window_layers", None)
    if window_layers is not None and window is None:
        raise sec.error("sliding_window_layers", "given without sliding_window_tokens",
                        "add sliding_window_tokens, or remove sliding_window_layers")
    if window_layers is not None and window_layers > layers:
        raise sec.error("sliding_window_layers", f"{window_layers} is more than the model's"
                        f" {layers} layers", "give at most layers")
    expert_bias = sec.boolean("expert_bias", False)
    if expert_bias and not sec.has("moe"):
        raise sec.error("expert_bias", "true without a moe: section (it adds the routed experts'"
                        " and the router's biases)", "remove expert_bias, or describe the experts"
                        " under moe:")
    with config_errors_as(sec.path, sec.prefix, "correct the model's sizes"):
        return ModelSpec(
            name=sec.string("name", instance_name),
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            ffn=sec.integer("ffn"),
            vocab=sec.integer("vocab"),
            seq_len=seq_len,
            mlp=Mlp(sec.choice("mlp", enum_values(Mlp))),
            tied_embeddings=sec.boolean("tied_embeddings", False),
            dropout=sec.number("dropout", 0.0),
            attention_head_dim=head_dim,
            qkv_bias=sec.boolean("qkv_bias", False),
            attn_out_bias=sec.boolean("attn_out_bias", False),
            mlp_bias=sec.boolean("mlp_bias", False),
            norm_bias=sec.boolean("norm_bias", False),
            norms_per_layer=sec.integer("norms_per_layer", 2),
            parallel_blocks=sec.boolean("parallel_blocks", False),
            position_embeddings=positions,
            embedding_norm=sec.boolean("embedding_norm", False),
            qk_norm=sec.boolean("qk_norm", False),
            attention_sinks=sec.boolean("attention_sinks", False),
            expert_bias=expert_bias,
            sliding_window_tokens=window,
            sliding_window_layers=window_layers,
            unmodelled=_lines(sec, "unmodelled"),
            moe=moe_from_section(sec.section("moe", MOE_KEYS), layers) if sec.has("moe") else None,
            mla=mla,
            mtp_layers=sec.integer("mtp_layers", 0),
        )


def mla_from_section(sec: Section) -> MlaSpec:
    """`model.mla:` (cost/specs.MlaSpec): every width required; q_lora_rank may be null (the
    query projected from the layer input, DeepSeek-V2-Lite)."""
    if "q_lora_rank" not in sec.raw:
        raise sec.error("q_lora_rank", "missing required key 'q_lora_rank'",
                        "add 'q_lora_rank: <integer>' (DeepSeek-V3: 1536), or 'q_lora_rank: null'"
                        " when the query is projected from the layer input directly")
    q_lora = sec.integer("q_lora_rank") if sec.has_value("q_lora_rank") else None
    with config_errors_as(sec.path, sec.prefix, "correct the latent attention's widths"):
        return MlaSpec(q_lora_rank=q_lora, kv_lora_rank=sec.integer("kv_lora_rank"),
                       qk_nope_head_dim=sec.integer("qk_nope_head_dim"),
                       qk_rope_head_dim=sec.integer("qk_rope_head_dim"),
                       v_head_dim=sec.integer("v_head_dim"))


def _check_mla_model(sec: Section, heads: int, kv_heads: int) -> None:
    """What latent attention rules out among the model's other keys (one error each)."""
    if kv_heads != heads:
        raise sec.error("kv_heads", f"kv_heads={kv_heads} with latent attention (model.mla),"
                        f" which up-projects a key and a value for each of the {heads} heads",
                        "remove kv_heads, or give kv_heads = heads")
    for key, why in (("head_dim", "its head widths are model.mla's qk_nope_head_dim,"
                      " qk_rope_head_dim and v_head_dim"),
                     ("qkv_bias", "Megatron-core's latent attention projections have no biases"),
                     ("parallel_blocks", "latent attention is priced in sequential blocks"),
                     ("qk_norm", "latent attention normalises its latents, not Q and K")):
        if sec.raw.get(key) not in (None, False):
            raise sec.error(key, f"given with latent attention (model.mla): {why}",
                            f"remove {key}")


def moe_from_section(sec: Section, layers: int) -> MoeSpec:
    """`model.moe:` (cost/specs.MoeSpec): experts, top_k and expert_ffn required."""
    experts, top_k = sec.integer("experts"), sec.integer("top_k")
    if top_k > experts:
        raise sec.error("top_k", f"{top_k} experts per token but only {experts} experts",
                        "give top_k <= experts")
    dense = sec.integer("dense_layers", 0)
    if dense >= layers:
        raise sec.error("dense_layers", f"{dense} dense layers leave none of the model's {layers}"
                        " layers for experts", "give fewer dense_layers than layers, or drop moe"
                        " for a dense model")
    cap = sec.number("capacity_factor", None) if sec.has_value("capacity_factor") else None
    nodes = sec.integer("max_nodes_per_token") if sec.has_value("max_nodes_per_token") else None
    with config_errors_as(sec.path, sec.prefix, "correct the MoE description"):
        return MoeSpec(experts=experts, top_k=top_k, expert_ffn=sec.integer("expert_ffn"),
                       shared_ffn=sec.integer("shared_ffn", 0), dense_layers=dense,
                       capacity_factor=cap, imbalance=sec.number("imbalance", None),
                       max_nodes_per_token=nodes)


def _lines(sec: Section, key: str) -> tuple[str, ...]:
    """An optional list of one-line strings (the model's unmodelled notes)."""
    value = sec.raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() and v.isprintable()
                                              for v in value):
        raise sec.error(key, f"expected a list of one-line strings, got {describe(value)}",
                        "write one line per thing the cost model does not price, or leave the"
                        " key out")
    return tuple(value)
