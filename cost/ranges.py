"""The physical range of every number a user file may hold: one table, used by every loader.

Every numeric key of an instance, cluster or job part file, mixed-cluster file, GPU catalogue
entry or `gpu_types:` entry, event, plan, calibration row and sweep file, and every Hugging Face
config field paraplan reads, is checked against its row of `RANGES` when it is read
(cost/readers/fields.py's `Section.number` / `Section.integer`, which cost/calibration.py and solver/sweep/run.py use; cost/hf_config.py maps its JSON keys to these
quantities). A value outside its range is refused with one `InstanceError` line naming the file,
the field, the range and why it is the range: values far outside what any hardware, model or
run has are unit mistakes or typos, and planning with them would "prove" absurd answers (a NIC
of 1e-300 Gbit/s gives 1e299-second iterations). The ranges are wide on purpose: the bounds lie
one to three orders of magnitude beyond the largest (or smallest) real figure cited, so no real
input is refused.

Values derived from others are checked against the same rows: a scaled link or NIC after a
network change (cost/readers/scenarios.py), the GPU count of a cluster (`num_gpus`). Keys and
quantities share names; a Hugging Face key names its quantity in cost/hf_config.py.

The table is `RANGES` below: one row per quantity with its bounds, its unit and the reason (the
real figures the bounds lie beyond). `paraplan`'s loaders never check a number any other way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.cost.specs import MAX_CLASSES_PER_GROUP


@dataclass(frozen=True, slots=True)
class Range:
    """The closed interval [lo, hi] in the key's own unit, and why."""

    lo: float
    hi: float
    unit: str  # as the key's name spells it ("" for counts and fractions)
    why: str   # the reason for the bounds, with the real figures they lie beyond
    integer: bool = False


_GPUS = 16_777_216  # 2**24: ~100x the largest clusters announced (about 10**5 GPUs, 2024)
_COUNT_WHY = "at most 2**24, about 100x the GPUs of the largest clusters announced"

RANGES: dict[str, Range] = {
    # --- model (instance `model:`, calibration rows, Hugging Face configs) ------------------
    "layers": Range(1, 1_000_000, "", "DeepNet trained 1,000 layers; 10**6 also bounds the"
                    " per-stage lists a layer split allocates", integer=True),
    "hidden": Range(1, 1_048_576, "", "2**20, 40x the widest published dense models"
                    " (GPT-3: 12,288; PaLM 540B: 18,432)", integer=True),
    "heads": Range(1, 65_536, "", "2**16, 500x the most attention heads published (PaLM 540B:"
                   " 48; Llama 3.1 405B: 128)", integer=True),
    "kv_heads": Range(1, 65_536, "", "at most the attention heads' range", integer=True),
    "ffn": Range(1, 4_194_304, "", "2**22, 50x the widest published MLPs (PaLM 540B: 73,728)",
                 integer=True),
    "vocab": Range(1, 16_777_216, "", "2**24, 64x the largest published vocabularies"
                   " (Gemma: 256,000)", integer=True),
    "seq_len": Range(1, 16_777_216, "", "2**24 tokens, 16x the longest published training"
                     " contexts (1M tokens)", integer=True),
    "dropout": Range(0, 0.99, "", "a probability; 1 would drop every activation"),
    "release_year": Range(2015, 2100, "", "a framework release's year (calibration rows' ran:):"
                          " transformer training frameworks date from 2017", integer=True),
    "release_month": Range(1, 12, "", "a month of the year (calibration rows' ran:)", integer=True),
    "head_dim": Range(1, 65_536, "", "2**16, 256x the widest published attention heads"
                      " (Gemma: 256)", integer=True),
    "norms_per_layer": Range(1, 4, "", "one shared norm (GPT-J, Falcon-7B) to four (Gemma-2's"
                             " pre and post norms around attention and MLP)", integer=True),
    "mtp_layers": Range(0, 8, "", "multi-token prediction depth: 0 (none) to 8; DeepSeek-V3"
                        " trains with 1 (arXiv 2412.19437, Sec. 2.2)", integer=True),
    "position_embeddings": Range(0, 16_777_216, "", "rows of a learned position table: 0 for"
                                 " rotary/ALiBi, at most the sequence length's range (GPT-2:"
                                 " 1,024; OPT: 2,050)", integer=True),
    "sliding_window_tokens": Range(1, 16_777_216, "", "at most the sequence length's range"
                                   " (Mistral 7B and Gemma 2: 4,096)", integer=True),
    "sliding_window_layers": Range(0, 1_000_000, "", "at most the layers' range",
                                   integer=True),
    "logit_softcapping": Range(0, 1_000_000, "", "a cap on logits; Gemma 2 caps attention"
                               " scores at 50 and final logits at 30"),
    # --- mixture of experts (instance `model.moe:`, Hugging Face MoE configs) --------------
    "experts": Range(2, 65_536, "", "routed experts per MoE layer: Mixtral 8, Qwen3-MoE 128,"
                     " DeepSeek-V3 256", integer=True),
    "top_k": Range(1, 65_536, "", "experts per token: Mixtral 2, Qwen3-MoE and DeepSeek-V3 8;"
                   " at most the experts", integer=True),
    "expert_ffn": Range(1, 4_194_304, "", "as ffn: one expert's MLP width (DeepSeek-V3: 2,048,"
                        " Mixtral: 14,336)", integer=True),
    "shared_ffn": Range(0, 4_194_304, "", "as ffn; 0: no shared expert (Mixtral, Qwen3-MoE)",
                        integer=True),
    "shared_experts": Range(0, 65_536, "", "always-on experts of a DeepSeek MoE layer"
                            " (n_shared_experts; DeepSeek-V3: 1, DeepSeek-V2: 2)", integer=True),
    "dense_layers": Range(0, 1_000_000, "", "dense layers before the first MoE layer"
                          " (DeepSeek-V3: 3); fewer than the layers", integer=True),
    "capacity_factor": Range(1, 64, "", "tokens an expert may take over its mean share: GShard"
                             " and Switch train with 1 to 2; 64 is beyond any published"),
    "imbalance": Range(1, 64, "", "busiest expert-parallel rank's routed tokens over the mean:"
                       " 1 is perfect balance; 64 is beyond any published routing statistic"),
    "max_nodes_per_token": Range(1, 1_000_000, "", "NVLink domains a token's experts may span"
                                 " (node-limited routing; DeepSeek-V3: 4); at most a node count",
                                 integer=True),
    # --- multi-head latent attention (instance `model.mla:`, DeepSeek-V2/V3 configs) ---------
    "q_lora_rank": Range(1, 1_048_576, "", "the query latent's width, at most the hidden size's"
                         " range (DeepSeek-V3: 1,536; DeepSeek-V2-Lite: none)", integer=True),
    "kv_lora_rank": Range(1, 1_048_576, "", "the key/value latent's width, at most the hidden"
                          " size's range (DeepSeek-V2 and V3: 512)", integer=True),
    "qk_nope_head_dim": Range(1, 65_536, "", "as head_dim: a head's non-rotary query/key width"
                              " (DeepSeek-V3: 128)", integer=True),
    "qk_rope_head_dim": Range(1, 65_536, "", "as head_dim: the rotary query/key width, one"
                              " rotary key shared by every head (DeepSeek-V3: 64)", integer=True),
    "v_head_dim": Range(1, 65_536, "", "as head_dim: a head's value width (DeepSeek-V3: 128)",
                        integer=True),
    # --- cluster (instance `cluster:`, part files, node groups, calibration rows) ------------
    "nodes": Range(1, 1_000_000, "", "10x the nodes of the largest clusters announced",
                   integer=True),
    "gpus_per_node": Range(1, 1_024, "", "8 in a DGX server; one NVLink domain holds 72 (GB200"
                           " NVL72) to 576 (NVL576) GPUs", integer=True),
    "nvlink_domain_gpus": Range(1, 1_024, "", "as gpus_per_node: GB200 NVL72 joins 72 GPUs of 18"
                                " trays in one NVLink domain, NVL576 576", integer=True),
    "leaf_nodes": Range(1, 1_000_000, "", "as nodes: nodes under one set of leaf switches"
                        " (DGX SuperPOD: a 32-node scalable unit)", integer=True),
    "pod_nodes": Range(1, 1_000_000, "", "as nodes: nodes under one pod's spine (Llama 3's"
                       " RoCE fabric: 384 nodes, 3,072 GPUs)", integer=True),
    "leaf_oversubscription": Range(1, 100, "", "1 (non-blocking) to 100:1; published fabrics"
                                   " run 1:1 (DGX SuperPOD, MegaScale) to 15:1 (Alibaba HPN's"
                                   " core)"),
    "pod_oversubscription": Range(1, 100, "", "as leaf_oversubscription: Llama 3's RoCE fabric"
                                  " runs 7:1 between pods"),
    "tier_latency_us": Range(0, 100, "us", "two switch traversals take 0.3-2 us; 100 us is a"
                             " network of its own, not a switch tier"),
    "intra_node_gbytes_per_s": Range(1, 100_000, "GB/s", "PCIe 3.0 x4 moves 8 GB/s, NVLink 5"
                                     " 1,800 GB/s per GPU"),
    "intra_node_GBps_per_gpu": Range(1, 100_000, "GB/s", "as intra_node_gbytes_per_s"),
    "nic_gbit_per_s": Range(1, 10_000, "Gbit/s", "1 Gigabit Ethernet to 10 Tbit/s; the fastest"
                            " NIC ports today carry 800 Gbit/s"),
    "inter_node_Gbps_per_gpu": Range(1, 10_000, "Gbit/s", "as nic_gbit_per_s"),
    "intra_node_latency_us": Range(0, 1_000, "us", "NVLink and PCIe take about 1-10 us per"
                                   " message; 1 ms is a wide-area network, not a node"),
    "inter_node_latency_us": Range(0, 1_000, "us", "InfiniBand and RoCE take about 1-10 us per"
                                   " message; 1 ms is a wide-area network, not a cluster"),
    # --- links between node groups and sites (mixed-cluster files, changes) -----------------
    "gbit_per_s": Range(0.01, 10_000, "Gbit/s", "per GPU: a 10 Gbit/s wide-area link shared by"
                        " 1,000 GPUs still gives 0.01; no NIC carries more than 10 Tbit/s"),
    "latency_us": Range(0, 500_000, "us", "half a second: light in fibre halfway round the"
                        " Earth takes about 100 ms, a geostationary satellite hop 270 ms"),
    "scale": Range(0.001, 1_000, "", "a link degraded to 0.1% or upgraded 1,000-fold"),
    "nic_scale": Range(0.001, 1_000, "", "a NIC degraded to 0.1% or upgraded 1,000-fold"),
    "intra_scale": Range(0.001, 1_000, "", "a node link degraded to 0.1% or upgraded"
                         " 1,000-fold"),
    "probability": Range(0, 1, "", "a probability"),
    "window_h": Range(0, 24, "h", "an hour of the day"),
    "duration_h": Range(0.01, 87_600, "h", "from 36 seconds (shorter than one training"
                        " iteration plus a restart) to 10 years"),
    "storage_gbytes_per_s": Range(0.1, 100_000, "GB/s", "one NFS server moves about 1 GB/s,"
                                  " the largest parallel file systems about 10,000 GB/s"),
    "restart_s": Range(0, 86_400, "s", "a restart longer than a day is an outage"),
    "remaining_hours": Range(0.01, 87_600, "h", "from 36 seconds to 10 years"),
    "remaining_iterations": Range(1, 1_000_000_000, "", "10**9 iterations: 1,000x a long"
                                  " pre-training run", integer=True),
    # --- GPU types (cost/gpus.yaml, `gpu_types:`) -------------------------------------------
    "peak_tflops_bf16": Range(1, 100_000, "TFLOP/s", "V100: 125, B200: 2,250 dense; 1"
                              " TFLOP/s is a laptop GPU"),
    "peak_tflops_fp8": Range(1, 100_000, "TFLOP/s", "H100: 1,979, B200: 4,500 dense"),
    "hbm_gib": Range(1, 10_000, "GiB", "V100: 32, H200: 141, MI325X: 256"),
    "hbm_gbytes_per_s": Range(1, 100_000, "GB/s", "V100: 900, B200: 8,000"),
    "host_link_gbytes_per_s": Range(1, 10_000, "GB/s", "one direction to the host: PCIe 5.0 x16"
                                    " 64, NVLink-C2C 450"),
    "matmul_eff_max": Range(0.01, 1, "", "a fraction of the peak; no tuned kernel reaches"
                            " less than 1%"),
    "fp8_matmul_eff_max": Range(0.01, 1, "", "a fraction of the FP8 peak; no tuned kernel"
                                " reaches less than 1%"),
    "memory_eff": Range(0.01, 1, "", "a fraction of the memory bandwidth; no tuned kernel"
                        " reaches less than 1%"),
    "attention_eff": Range(0.01, 1, "", "a fraction of the peak; no tuned kernel reaches less"
                           " than 1%"),
    "fa2_benchmark_tflops": Range(1, 100_000, "TFLOP/s", "FlashAttention-2's own benchmark:"
                                  " A100 175, H100 322"),
    "cudnn_attention_tflops": Range(1, 100_000, "TFLOP/s", "cuDNN's fused attention, forward +"
                                    " backward, per call length: B200 1,000 at 8k keys"
                                    " (cost/gpus.yaml)"),
    "cudnn_attention_speedup": Range(0.5, 4, "", "cuDNN's fused attention over"
                                     " FlashAttention-2: 1.6 on H100, 3.0-3.6 on Blackwell"
                                     " (cost/gpus.yaml)"),
    "matmul_half_gflops": Range(0, 10_000, "GFLOP", "the fitted value is 0.1; a 10 TFLOP"
                                " matmul saturates any GPU"),
    # --- job --------------------------------------------------------------------------------
    "global_batch": Range(1, _GPUS, "", "2**24 sequences, 1,000x the largest published batches"
                          " (GPT-3: 3.2M tokens in 1,536 sequences)", integer=True),
    "train_tokens": Range(1, 1e16, "tokens", "10**16, 250x the most tokens a published run"
                          " trained on (Llama 4 Scout: about 40e12; Llama 3: 15.6e12)"),
    "usd_per_gpu_hour": Range(0.001, 10_000, "USD per GPU-hour", "cloud prices run from about"
                              " 0.1 (old GPUs, spot) to about 15 (B200 on demand)"),
    # --- search and plans: degrees and counts (checked against the instance too) ------------
    # parallel degrees and GPU counts (also `model.moe`'s ep, etp and a cluster's num_gpus)
    **dict.fromkeys(("tp", "pp", "dp", "cp", "ep", "etp", "replicas", "stage_dp", "max_pp",
                     "max_cp", "num_gpus"), Range(1, _GPUS, "", _COUNT_WHY, integer=True)),
    **dict.fromkeys(("micro_batch", "num_micro_batches", "max_micro_batch"),
                    Range(1, _GPUS, "", "at most the global batch's range", integer=True)),
    "virtual_stages": Range(1, 1_000_000, "", "at most the layers' range", integer=True),
    "classes_per_group": Range(1, MAX_CLASSES_PER_GROUP, "", "the micro-batch splits between a"
                               " group's classes grow as a power of their number", integer=True),
    "zero": Range(0, 3, "", "ZeRO has stages 0 (none) to 3 (parameters sharded)", integer=True),
    "layers_per_stage": Range(1, 1_000_000, "", "every stage holds at least one layer, at most"
                              " the layers' range", integer=True),
    "full_recompute_layers": Range(0, 1_000_000, "", "at most the layers' range",
                                   integer=True),
    "first_stage_layers": Range(1, 1_000_000, "", "the first stage holds at least one layer,"
                                " at most the layers' range", integer=True),
    "last_stage_layers": Range(1, 1_000_000, "", "the last stage holds at least one layer,"
                               " at most the layers' range", integer=True),
    "memory_reserve_gib": Range(0, 10_000, "GiB", "at most the HBM range (and less than the"
                                " GPU's own memory)"),
    # --- calibration rows ---------------------------------------------------------------------
    "iter_time_s": Range(1e-4, 100_000, "s", "published iterations take 0.05 to 100 s"),
    # --- sweep files --------------------------------------------------------------------------
    "time_limit_s": Range(0.01, 604_800, "s", "10 ms to a week per solve"),
    "threads": Range(1, 1_024, "", "solver threads of one machine", integer=True),
}


def fmt(x: float) -> str:
    """A bound or value for a message: 1,000,000 / 0.01 / 1e-300."""
    if isinstance(x, int) or (math.isfinite(x) and float(x).is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    return f"{x:.6g}"


def fmt_past(x: float, edge: float) -> str:
    """fmt(x) for a value outside a range, with as many digits as it takes to show it on its
    side of `edge`: 10000.001 past 10,000 is "10000.001", not fmt's "10000". repr's 17
    significant digits always tell two floats apart."""
    for shown in (fmt(x) if digits == 6 else f"{x:.{digits}g}" for digits in range(6, 18)):
        value = float(shown.replace(",", ""))
        if value != edge and (value > edge) == (x > edge):
            return shown
    return repr(float(x))


def range_text(quantity: str) -> str:
    """`physical range 1 to 10,000 Gbit/s: why`, for messages."""
    r = RANGES[quantity]
    unit = f" {r.unit}" if r.unit else ""
    return f"physical range {fmt(r.lo)} to {fmt(r.hi)}{unit}: {r.why}"


def out_of_range(quantity: str, value: float) -> str | None:
    """Why `value` is outside `quantity`'s range (one line, the range named), or None.

    `value` is a finite number; its type has been checked by the caller."""
    r = RANGES[quantity]
    if r.lo <= value <= r.hi:
        return None
    shown = fmt_past(value, r.lo if value < r.lo else r.hi)
    if value < r.lo:
        if r.integer:
            what = f"must be >= {fmt(r.lo)}, got {shown}"
        elif value <= 0 < r.lo:
            what = f"must be > 0, got {shown}"
        elif value < 0:
            what = f"must be >= 0, got {shown}"
        else:
            what = f"{shown} is smaller than {fmt(r.lo)}"
    else:
        what = f"must be <= {fmt(r.hi)}, got {shown}" if r.integer else \
            f"{shown} is larger than {fmt(r.hi)}"
    return f"{what} ({range_text(quantity)})"


def range_fix(quantity: str) -> str:
    r = RANGES[quantity]
    unit = f" {r.unit}" if r.unit else ""
    return f"give a value from {fmt(r.lo)} to {fmt(r.hi)}{unit}; check the unit in the key's name"
