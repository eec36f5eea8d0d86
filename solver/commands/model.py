"""`paraplan model --hf-config DIR [--seq-len N] [--json]`: what paraplan read from a Hugging
Face config.json (cost/hf_config.py), so that a user can check it before planning.

It prints the parameters (total, and active per token for a mixture-of-experts model:
cost/flops.model_params and active_params), the training FLOPs per token
(cost/flops.model_flops_per_token, PaLM's count: forward and backward, no recomputation), the
layer kinds (dense and MoE layers, their MLP), the attention pattern (full causal, sliding
window in some layers, latent attention) and every line of what the config declares that is not
priced (`ModelSpec.unmodelled`). Without --seq-len, the sequence is the config's maximum
context, and the output says so: FLOPs per token grow with it.

`--json` prints one object: status "read", name, source, seq_len, seq_len_from ("--seq-len" or
"config maximum"), params_total, params_active (= params_total for a dense model),
flops_per_token, layers, dense_layers, moe_layers, hidden, ffn (the dense layers' MLP width),
vocab, mlp ("swiglu" or "gelu"), tied_embeddings, moe (null, or experts, top_k, expert_ffn,
shared_ffn), attention (kind "multi-head", "grouped-query", "multi-query" or "latent", heads,
kv_heads, head_dim (null for latent attention), window_tokens (null when no layer is windowed),
windowed_layers), mtp_layers (multi-token prediction layers, not in params_total) and
unmodelled (a list of lines).
"""

from __future__ import annotations

from paraplan.cost.specs import ModelSpec


def register(sub) -> None:
    m = sub.add_parser("model", help="what paraplan reads from a Hugging Face config.json:"
                                     " parameters, FLOPs per token, layers, attention")
    m.add_argument("--hf-config", required=True, metavar="PATH",
                   help="Hugging Face config.json, or the directory holding it")
    m.add_argument("--seq-len", metavar="N",
                   help="training sequence length in tokens (default: the config's maximum"
                        " context)")
    m.add_argument("--json", action="store_true",
                   help="print one JSON object on standard output instead of text, with"
                        " params_total and params_active (its fields: solver/commands/model.py)")
    m.set_defaults(func=cmd_model)


def cmd_model(args) -> int:
    from paraplan.cost.hf_config import model_from_hf_config
    from paraplan.solver.commands.inputs import parse_seq_len
    from paraplan.solver.commands.jsonout import emit_json

    seq_len = parse_seq_len(args.seq_len)
    model = model_from_hf_config(args.hf_config, seq_len)
    summary = model_summary(model, str(args.hf_config),
                            "--seq-len" if seq_len is not None else "config maximum")
    if args.json:
        emit_json(summary)
    else:
        print("\n".join(summary_lines(summary)))
    return 0


def model_summary(m: ModelSpec, source: str, seq_len_from: str) -> dict:
    """The JSON object of the module docstring."""
    from paraplan.cost.flops import active_params, model_flops_per_token, model_params

    dense = m.layers if m.moe is None else m.moe.dense_layers
    attention = {"kind": "latent" if m.mla is not None else _head_sharing(m), "heads": m.heads,
                 "kv_heads": m.kv_heads, "head_dim": None if m.mla is not None else m.head_dim,
                 "window_tokens": m.sliding_window_tokens if m.windowed_layers else None,
                 "windowed_layers": m.windowed_layers}
    moe = None if m.moe is None else {
        "experts": m.moe.experts, "top_k": m.moe.top_k, "expert_ffn": m.moe.expert_ffn,
        "shared_ffn": m.moe.shared_ffn}
    return {"status": "read", "name": m.name, "source": source, "seq_len": m.seq_len,
            "seq_len_from": seq_len_from, "params_total": model_params(m),
            "params_active": active_params(m), "flops_per_token": model_flops_per_token(m),
            "layers": m.layers, "dense_layers": dense, "moe_layers": m.layers - dense,
            "hidden": m.hidden, "ffn": m.ffn, "vocab": m.vocab, "mlp": m.mlp.value,
            "tied_embeddings": m.tied_embeddings, "moe": moe, "attention": attention,
            "mtp_layers": m.mtp_layers, "unmodelled": list(m.unmodelled)}


def _head_sharing(m: ModelSpec) -> str:
    if m.kv_heads == m.heads:
        return "multi-head"
    return "multi-query" if m.kv_heads == 1 else "grouped-query"


def summary_lines(s: dict) -> list[str]:
    """The text form of `model_summary`, one fact per line."""
    seq = f"{s['seq_len']:,} tokens per sequence"
    seq += (" (--seq-len)" if s["seq_len_from"] == "--seq-len"
            else " (the config's maximum context; give --seq-len for the training length)")
    params = f"{s['params_total']:,} total"
    if s["moe"] is not None:
        params += f", {s['params_active']:,} active per token"
    def mlp(width: int) -> str:
        return f"{s['mlp']} MLP {s['hidden']:,} -> {width:,} -> {s['hidden']:,}"

    kinds = []
    if s["dense_layers"]:
        kinds.append(f"{s['dense_layers']} dense ({mlp(s['ffn'])})")
    if s["moe"] is not None:
        e = s["moe"]
        shared = f", a shared MLP of {e['shared_ffn']:,}" if e["shared_ffn"] else ""
        kinds.append(f"{s['moe_layers']} MoE ({e['experts']} experts, each a"
                     f" {mlp(e['expert_ffn'])}, {e['top_k']} per token{shared})")
    a = s["attention"]
    heads = (f"{a['heads']} heads, multi-head latent attention" if a["kind"] == "latent" else
             f"{a['heads']} query heads of {a['head_dim']}, {a['kv_heads']} key/value"
             f" head{'s' if a['kv_heads'] > 1 else ''} ({a['kind']})")
    full = s["layers"] - a["windowed_layers"]
    pattern = ("full causal in every layer" if not a["windowed_layers"] else
               f"a sliding window of {a['window_tokens']:,} tokens in {a['windowed_layers']} of"
               f" {s['layers']} layers" + (f", full causal in {full}" if full else ""))
    lines = [f"{s['name']}  ({s['source']})",
             f"parameters  {params}",
             f"FLOPs       {s['flops_per_token']:.4g} per token at {seq}: forward and backward,"
             " no recomputation (PaLM's MFU count)",
             f"layers      {s['layers']}: " + "; ".join(kinds),
             f"attention   {heads}; {pattern}",
             f"embeddings  {s['vocab']:,} x {s['hidden']:,}, "
             + ("tied to the output layer" if s["tied_embeddings"] else "untied")]
    if s["mtp_layers"]:
        lines.append(f"prediction  {s['mtp_layers']} multi-token prediction layer(s) on the last"
                     " stage, not in the parameter count")
    lines += [f"not priced  {line}" for line in s["unmodelled"]]
    return lines
