"""What every YAML key of an instance, part, event and plan file means: the one description.

Each section of a file is one `SectionDoc`; each key the readers accept there is one `Key` with
its type, its default ("required" where it has none), its allowed values and what it means. Two
things are not written here because they have a source of their own, which the page generator
(cost/docs/schema.py) reads: a number's physical range and unit (cost/ranges.RANGES, the table
every reader checks numbers against) and the values of a closed set (the enum the reader
parses it into, e.g. cost/specs.Precision). docs/schema.md's key reference is generated from
this table (`python -m paraplan.cost.docs.schema`), and tests/instances/test_schema_doc.py fails
when the page differs from what the generator writes, or when a reader accepts a key this
table does not describe (each section names the reader's key tuple, `accepted`).

Descriptions say what a key means to the planner and cite the module that prices it; a
default written as text is what the reader fills in when the key is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum

from paraplan.cost.specs import Switching
from paraplan.cost.releases import Framework
from paraplan.cost.specs import (Attention, GpuSpec, GradReduceDtype, Mlp, MoeDispatcher, OffloadModule,
                                 Optimizer, PipelineSchedule, Precision, Recompute, RecomputeModule,
                                 ZeroBubble)
from paraplan.cost.units import GBYTE_BYTES, GFLOP_FLOPS

REQUIRED = "required"
# the records' own defaults (internal units), where a reader leaves a key to them
_SWITCHING = {f.name: f.default for f in fields(Switching)}
_GPU = {f.name: f.default for f in fields(GpuSpec)}


@dataclass(frozen=True, slots=True)
class Key:
    """One YAML key. `allowed`: an Enum class whose values the key takes (every one listed), or
    text; `quantity`: its row of cost/ranges.RANGES where that differs from the key's name
    ("" for none)."""

    name: str
    kind: str  # integer | number | boolean | string | mapping | list of ... | ...
    meaning: str
    default: str = REQUIRED
    allowed: type[Enum] | str = ""
    quantity: str | None = None


@dataclass(frozen=True, slots=True)
class SectionDoc:
    """The keys of one mapping of a file. `path` is where it sits in the file (`model.moe`,
    `cluster.groups[]`); `accepted` names the reader's tuple of the keys it takes there
    ("module:NAME"); `includes` is a section whose keys this one also takes."""

    path: str
    title: str
    intro: str
    accepted: str
    keys: tuple[Key, ...]
    includes: SectionDoc | None = None


# --- one GPU type (cost/readers/) -------------------------------------------------------------

TOP = SectionDoc("", "Instance file, top level", "An instance is a model, a cluster and a job;"
                 " `gpu_types` and `search` are optional.", "cost.readers.instance:_TOP_KEYS", (
                     Key("name", "string", "the instance's name, shown with every plan"),
                     Key("model", "mapping", "the transformer to train (below)"),
                     Key("cluster", "mapping", "the GPUs: one GPU type (below), or node groups"
                         " (`cluster.groups`, the group format)"),
                     Key("job", "mapping", "what one training step is and how the framework runs"
                         " it (below)"),
                     Key("gpu_types", "mapping of name to GPU", "GPU types the file defines beside"
                         " cost/gpus.yaml's catalogue, each with the keys of `gpu_types.NAME`",
                         "none"),
                     Key("search", "mapping", "narrows the planner's declared space"
                         " (solver/space.py); left out, every value the instance and its framework"
                         " admit", "the whole space"),
                 ))

CLUSTER_FILE = SectionDoc("", "Cluster part file (`--cluster`)", "Replaces an instance's"
                          " `cluster:`; examples in instances/clusters/.",
                          "cost.readers.instance:_CLUSTER_FILE_KEYS", (
                              Key("cluster", "mapping", "as an instance's `cluster:`"),
                              Key("gpu_types", "mapping", "as an instance's `gpu_types:`", "none"),
                          ))

JOB_FILE = SectionDoc("", "Job part file (`--job`)", "Replaces an instance's `job:` (and"
                      " `search:` where it has one); examples in instances/jobs/.",
                      "cost.readers.instance:_JOB_FILE_KEYS", (
                          Key("job", "mapping", "as an instance's `job:`"),
                          Key("search", "mapping", "as an instance's `search:`", "the whole space"),
                      ))

MODEL = SectionDoc("model", "`model:`", "Widths are unit-free counts. A Hugging Face config.json"
                   " (`--hf-config`, cost/hf_config.py) gives the same record.",
                   "cost.readers.model:MODEL_KEYS", (
                       Key("name", "string", "the model's name", "the instance's name"),
                       Key("layers", "integer", "transformer layers (MoE and dense together)"),
                       Key("hidden", "integer", "model width; divisible by `heads` unless"
                           " `head_dim` is given"),
                       Key("heads", "integer", "attention (query) heads; divisible by `kv_heads`"),
                       Key("kv_heads", "integer", "key/value heads (grouped-query attention)",
                           "heads (multi-head attention)"),
                       Key("ffn", "integer", "MLP width of a dense layer"),
                       Key("vocab", "integer", "vocabulary size"),
                       Key("seq_len", "integer", "tokens per training sequence"),
                       Key("mlp", "string", "MLP kind: gelu has two matmuls, swiglu three",
                           REQUIRED, Mlp),
                       Key("tied_embeddings", "boolean", "the output layer shares the embedding's"
                           " weights", "false"),
                       Key("dropout", "number", "attention and hidden dropout probability; its"
                           " masks are stored for backward", "0"),
                       Key("head_dim", "integer", "width of one attention head",
                           "hidden / heads"),
                       Key("qkv_bias", "boolean", "biases on the Q, K and V projections", "false"),
                       Key("attn_out_bias", "boolean", "a bias on the attention output"
                           " projection", "false"),
                       Key("mlp_bias", "boolean", "biases on every MLP projection", "false"),
                       Key("norm_bias", "boolean", "LayerNorm with a bias (2 parameters per"
                           " channel) rather than RMSNorm", "false"),
                       Key("norms_per_layer", "integer", "norms per layer: 1 shared (GPT-J,"
                           " Falcon), 2, or 4 (Gemma-2's pre and post norms)", "2"),
                       Key("parallel_blocks", "boolean", "attention and MLP side by side on one"
                           " norm (GPT-J, NeoX, Falcon)", "false"),
                       Key("position_embeddings", "integer", "rows of a learned position table,"
                           " at least seq_len; 0 for rotary or ALiBi", "0"),
                       Key("embedding_norm", "boolean", "a norm after the token embedding (BLOOM)",
                           "false"),
                       Key("sliding_window_tokens", "integer", "causal attention to the last N"
                           " keys only (Mistral, Gemma-2)", "none (full causal attention)"),
                       Key("sliding_window_layers", "integer", "how many layers use the sliding"
                           " window", "all layers, where sliding_window_tokens is given"),
                       Key("unmodelled", "list of strings", "one line each about what the model's"
                           " source declares and paraplan does not price; shown with every plan",
                           "[]"),
                       Key("moe", "mapping", "mixture-of-experts layers (`model.moe`, below;"
                           " [moe.md](moe.md))", "none (dense)"),
                       Key("mla", "mapping", "multi-head latent attention (`model.mla`, below)",
                           "none"),
                       Key("mtp_layers", "integer", "DeepSeek-V3's multi-token-prediction depth:"
                           " extra layers on the last stage", "0"),
                       Key("qk_norm", "boolean", "per-head RMSNorm of Q and K (Qwen3, Gemma-3):"
                           " 2 x head_dim parameters per layer, priced as one more read and write"
                           " of Q and K", "false"),
                       Key("attention_sinks", "boolean", "a learned sink logit per query head"
                           " (gpt-oss): heads parameters per layer; its extra score per row is not"
                           " priced", "false"),
                       Key("expert_bias", "boolean", "biases on the routed experts' MLPs and the"
                           " router (gpt-oss); needs `moe`; counted as parameters, their"
                           " element-wise FLOPs not priced", "false"),
                   ))

MOE = SectionDoc("model.moe", "`model.moe:`", "Mixture-of-experts layers, priced by cost/moe.py"
                 " ([moe.md](moe.md)); instances/mixtral-8x7b-64xH100.yaml is an example.",
                 "cost.readers.model:MOE_KEYS", (
                     Key("experts", "integer", "routed experts per MoE layer"),
                     Key("top_k", "integer", "experts each token is routed to; at most `experts`"),
                     Key("expert_ffn", "integer", "one expert's MLP width (the model's `mlp` kind)"),
                     Key("shared_ffn", "integer", "width of the always-on shared expert MLP; 0:"
                         " none", "0"),
                     Key("dense_layers", "integer", "dense layers (width `ffn`) before the first"
                         " MoE layer", "0"),
                     Key("capacity_factor", "number", "tokens an expert takes over its mean share;"
                         " the rest are dropped", "none (dropless routing)"),
                     Key("imbalance", "number", "the busiest expert-parallel rank's routed tokens"
                         " over the mean (cost/moe.py)", "cost/moe.DEFAULT_IMBALANCE, fitted to the"
                         " published MoE runs (cost/moe_params.py)"),
                     Key("max_nodes_per_token", "integer", "node-limited routing (DeepSeek-V3's"
                         " M): nodes one token's experts may span; counts with the deepep"
                         " dispatcher", "none"),
                 ))

MLA = SectionDoc("model.mla", "`model.mla:`", "Multi-head latent attention (DeepSeek-V2/V3,"
                 " cost/specs.MlaSpec). Needs `kv_heads` equal to `heads` (or left out), no"
                 " `head_dim`, no `qkv_bias`, and `job.framework: megatron`.",
                 "cost.readers.model:MLA_KEYS", (
                     Key("q_lora_rank", "integer or null", "width of the query latent; null: Q is"
                         " projected from the layer input directly (DeepSeek-V2-Lite)"),
                     Key("kv_lora_rank", "integer", "width of the key/value latent"),
                     Key("qk_nope_head_dim", "integer", "a head's non-rotary query/key width"),
                     Key("qk_rope_head_dim", "integer", "the rotary query/key width, one rotary"
                         " key shared by every head"),
                     Key("v_head_dim", "integer", "a head's value width"),
                 ))

CLUSTER = SectionDoc("cluster", "`cluster:` (one GPU type)", "Bandwidths are per GPU. NVLink is"
                     " given as vendors quote it (bidirectional) and stored halved, one"
                     " direction (900 GB/s -> 450e9 bytes/s); the NIC is one direction already"
                     " (400 Gbit/s -> 50e9 bytes/s).", "cost.readers.cluster:CLUSTER_KEYS", (
                         Key("gpu", "string", "a GPU type of cost/gpus.yaml or of `gpu_types`"),
                         Key("nodes", "integer", "nodes of the cluster"),
                         Key("gpus_per_node", "integer", "GPUs per node"),
                         Key("intra_node_link", "string", "the link inside a node", "nvlink",
                             "nvlink, pcie"),
                         Key("intra_node_gbytes_per_s", "number", "bandwidth per GPU inside a"
                             " node, bidirectional aggregate as vendors quote it"),
                         Key("intra_node_latency_us", "number", "latency of one message inside"
                             " a node", "5"),
                         Key("nic_gbit_per_s", "number", "network bandwidth per GPU, one"
                             " direction"),
                         Key("inter_node_latency_us", "number", "latency of one message between"
                             " nodes", "10"),
                         Key("nvlink_domain_gpus", "integer", "an NVLink domain spanning nodes"
                             " (GB200 NVL72 with gpus_per_node 4): a multiple of gpus_per_node"
                             " dividing the GPUs", "gpus_per_node"),
                         Key("leaf_nodes", "integer", "nodes under one set of leaf switches, in"
                             " rank order (cost/fabric.py): a group spanning more leaves shares"
                             " their uplinks; a multiple of the NVLink domain's nodes",
                             "none: one non-blocking fabric"),
                         Key("leaf_oversubscription", "number", "what a leaf's nodes can send"
                             " over what its uplinks carry (2.0: 2:1); needs leaf_nodes", "1"),
                         Key("pod_nodes", "integer", "nodes under one pod's spine, a multiple of"
                             " leaf_nodes (Llama 3's RoCE fabric: 384)", "none"),
                         Key("pod_oversubscription", "number", "the same for a pod's uplinks"
                             " (Llama 3: 7.0); needs pod_nodes", "1"),
                         Key("tier_latency_us", "number", "extra latency of a hop per switch"
                             " tier it climbs above the leaf (two traversals)", "1"),
                     ))

JOB = SectionDoc("job", "`job:`", "What one optimizer step is and how the framework runs it."
                 " Options a framework does not run are refused naming the framework.",
                 "cost.readers.job:JOB_KEYS", (
                     Key("global_batch", "integer", "sequences per optimizer step"),
                     Key("precision", "string", "training precision; fp8: FP8 linears"
                         " (attention, norms and the optimizer stay in bf16/fp32)", "bf16",
                         Precision),
                     Key("optimizer", "string", "the optimizer and its state's layout"
                         " (cost/memory.state_layout): the apex ones are NeMo's distributed Adam,"
                         " adam_bf16_moments keeps fp32 master weights and bf16 moments"
                         " (megatron, ZeRO-1)", "adam", Optimizer),
                     Key("attention", "string", "flash: a fused kernel, no s x s scores stored;"
                         " standard: the scores stored for backward", "flash", Attention),
                     Key("framework", "string", "the training framework: what can run"
                         " (cost/framework_rules.py) and how ZeRO, overlap and context"
                         " parallelism behave (cost/framework.py)", "megatron", Framework),
                     Key("framework_version", "string", "the framework's release"
                         " (cost/releases.py lists them): what it could run, and which release"
                         " the plan's time is for", "the framework's current release"),
                     Key("tp_comm_overlap", "boolean", "Transformer Engine's tensor-parallel"
                         " communication/GEMM overlap (megatron; used where tp > 1 inside a node"
                         " with sequence parallelism)", "false"),
                     Key("cudnn_attention", "boolean", "Transformer Engine runs cuDNN's fused"
                         " attention (NVTE_FUSED_ATTN=1); false: FlashAttention-2 (megatron)",
                         "true"),
                     Key("moe_a2a_overlap", "boolean", "Megatron-core's"
                         " --overlap-moe-expert-parallel-comm (megatron; used where ep > 1 and pp"
                         " = 1 or interleaved; needs `search.full_recompute: false`)", "false"),
                     Key("moe_shared_expert_overlap", "boolean", "Megatron-core's"
                         " --moe-shared-expert-overlap: the shared expert under the all-to-alls"
                         " (ep > 1)", "false"),
                     Key("pipeline_schedule", "string", "1f1b (interleaved where virtual_stages"
                         " > 1) or DeepSeek-V3's dualpipe (one GPU type; cost/dualpipe.py)",
                         "1f1b", PipelineSchedule),
                     Key("moe_dispatcher", "string", "alltoall: Megatron-core's NCCL all-to-all;"
                         " deepep: one copy per destination node, FP8 dispatch in FP8 jobs"
                         " (cost/moe.py)", "alltoall", MoeDispatcher),
                     Key("recompute_early_stop", "boolean", "torchtitan and composer: a full"
                         " recompute stops before MLP-out (torch.utils.checkpoint non-reentrant,"
                         " PyTorch >= 2.1); false for older PyTorch", "the framework's"),
                     Key("grad_reduce_overlap", "boolean", "megatron with optimizer adam or"
                         " adam_bf16_moments: the data-parallel gradient reduction hides behind"
                         " the backward (--overlap-grad-reduce); plans with pp 1, no"
                         " interleaving and ZeRO-0 always overlap (torch DDP)",
                         "the release's: true from 2023-08"),
                     Key("recompute_modules", "list of strings", "megatron: module outputs"
                         " recomputed in backward (--recompute-modules); needs"
                         " `search.full_recompute: false`", "[]", RecomputeModule),
                     Key("offload_modules", "list of strings", "megatron, MoE: the experts'"
                         " inputs stashed in host memory (--offload-modules); needs the GPU's"
                         " host_link_gbytes_per_s", "[]", OffloadModule),
                     Key("activation_fp8_input_store", "boolean", "megatron: SwiGLU inputs"
                         " stashed in fp8", "false"),
                     Key("attention_output_e5m6", "boolean", "fp8 jobs: DeepSeek-V3's 12-bit"
                         " stash of the attention output", "false"),
                     Key("grad_reduce_dtype", "string", "what gradients are kept and reduced in;"
                         " never searched, since it changes numerics; fp16 only in fp16"
                         " training", "the framework's: fp32 for megatron and torchtitan, the"
                         " training dtype for deepspeed, composer and NeMo's apex optimizers",
                         GradReduceDtype),
                     Key("train_tokens", "number", "tokens to train on: every plan then gives"
                         " the time, GPU-hours and cost to train (cost/train_cost.py); changes no"
                         " plan. Write the exponent's sign (15.0e+12): YAML reads 15.0e12 as"
                         " text", "none"),
                     Key("usd_per_gpu_hour", "mapping of GPU type to number", "needs"
                         " train_tokens: USD per GPU-hour of every GPU type of the cluster (each"
                         " one, no other), for the cost to train", "none",
                         quantity="usd_per_gpu_hour"),
                 ))

GPU = SectionDoc("gpu_types.NAME", "`gpu_types.NAME:` (and cost/gpus.yaml)", "One GPU type."
                 " Peaks are dense (no 2:4 sparsity); a vendor's \"80 GB\" is `hbm_gib: 80`;"
                 " bandwidths are decimal (10^9 bytes/s). Efficiencies left out take the"
                 " unfitted defaults: treat such a GPU's predictions as uncalibrated.",
                 "cost.readers.gpus:_GPU_KEYS", (
                     Key("peak_tflops_bf16", "number", "dense bf16 tensor-core peak"),
                     Key("peak_tflops_fp8", "number", "dense FP8 tensor-core peak; left out, the"
                         " GPU refuses precision: fp8", "none"),
                     Key("hbm_gib", "number", "device memory"),
                     Key("hbm_gbytes_per_s", "number", "device-memory bandwidth"),
                     Key("matmul_eff_max", "number", "largest achieved fraction of the peak,"
                         " reached by large matmuls (fitted per die: cost/fit.py)",
                         f"{_GPU['matmul_eff_max']:g}"),
                     Key("matmul_half_gflops", "number", "matmul size at which half of"
                         " matmul_eff_max is reached", f"{_GPU['matmul_half_flops'] / GFLOP_FLOPS:g}"),
                     Key("memory_eff", "number", "achieved fraction of memory bandwidth in"
                         " element-wise kernels", f"{_GPU['memory_eff']:g}"),
                     Key("attention_eff", "number", "achieved fraction of the peak in the fused"
                         " attention core (causal FLOPs)", f"{_GPU['attention_eff']:g}"),
                     Key("fp8_matmul_eff_max", "number", "as matmul_eff_max, for FP8 GEMMs"
                         " against peak_tflops_fp8", f"{_GPU['fp8_matmul_eff_max']:g}"),
                     Key("cudnn_attention_speedup", "number", "cuDNN's fused attention over"
                         " FlashAttention-2 on this GPU, where Transformer Engine runs cuDNN"
                         " (job.cudnn_attention); measured, not fitted",
                         f"{_GPU['cudnn_attention_speedup']:g}"),
                     Key("fa2_benchmark_tflops", "number", "FlashAttention-2's own benchmark"
                         " (forward + backward, causal, head dim 128, 8k tokens): the speed of"
                         " attention where Transformer Engine calls the kernel", "none"),
                     Key("cudnn_attention_tflops", "mapping", "cuDNN's fused attention measured"
                         " per call length (keys: forward + backward TFLOP/s, causal); where"
                         " given, Transformer Engine's cuDNN path runs at it, interpolated in log"
                         " keys, instead of cudnn_attention_speedup", "none"),
                     Key("host_link_gbytes_per_s", "number", "one direction of the link to host"
                         " memory (PCIe or NVLink-C2C): what activation offloading copies over;"
                         " left out, offloading is refused", "none"),
                 ))

SEARCH = SectionDoc("search", "`search:`", "Narrows the declared space the planner proves its"
                    " optimum over (solver/space.py). A listed value the instance's shape"
                    " (cost/space_rules.py) or its framework (cost/framework_rules.py) can never"
                    " run is refused naming the value and why; values the defaults bring in are"
                    " filtered. `--search KEY=V,...` on the command line sets the same keys.",
                    "cost.readers.search:SEARCH_KEYS", (
                        Key("tp", "list of integers", "tensor-parallel degrees", "powers of two"
                            " dividing the heads, within one node"),
                        Key("pp", "list of integers", "pipeline-parallel degrees", "every divisor"
                            " of GPUs / (tp x cp) up to the layers"),
                        Key("cp", "list of integers", "context-parallel degrees", "powers of two"
                            " dividing seq_len and GPUs / tp"),
                        Key("micro_batch", "list of integers", "sequences per micro-batch",
                            "divisors of the per-replica batch whose memory lower bound fits"),
                        Key("max_micro_batch", "integer", "a cap on the micro-batch", "no cap"),
                        Key("max_pp", "integer", "a cap on pp", "no cap"),
                        Key("max_cp", "integer", "a cap on cp", "no cap"),
                        Key("sequence_parallel", "list of booleans", "Megatron's sequence"
                            " parallelism", "[false, true]"),
                        Key("zero", "list of integers", "ZeRO stages; which combine with pp > 1"
                            " is the framework's rule (Megatron-LM and DeepSpeed 0-1, torchtitan"
                            " 0 and 3)", "[0, 1, 2, 3]", quantity="zero"),
                        Key("virtual_stages", "list of integers", "interleaved model chunks per"
                            " stage", "every v dividing the layers with v x pp <= layers"),
                        Key("recompute", "list of strings", "recomputation of the layers not"
                            " fully recomputed", "[none, selective]", Recompute),
                        Key("full_recompute", "boolean", "search per-stage counts of fully"
                            " recomputed layers", "true"),
                        Key("uniform_split", "boolean", "only the even layer split", "false"),
                        Key("tp_across_nodes", "boolean", "tensor parallelism may span nodes",
                            "false"),
                        Key("tp_per_group", "boolean", "mixed clusters: a pipeline across node"
                            " groups may run a tp per group", "true"),
                        Key("classes_per_group", "integer", "group format: replica classes one"
                            " node group may host", "1"),
                        Key("idle_gpus", "boolean", "group format: a used group may leave GPUs"
                            " idle", "false"),
                        Key("mixed_families", "boolean", "group format: a pipeline across groups"
                            " beside replica classes on the GPUs it leaves", "false"),
                        Key("asymmetric_pipelines", "boolean", "group format: a pipeline across"
                            " groups may give each stage its own data-parallel degree"
                            " ([mixed-clusters.md](mixed-clusters.md))",
                            "false"),
                        Key("memory_reserve_gib", "number", "kept free on every GPU when planning,"
                            " for the caching allocator's reserved-but-unallocated memory (why 2:"
                            " below); 0 plans to the HBM limit", "2"),
                        Key("tensor_partitions", "list of strings", "megatron: 1-D tensor"
                            " parallelism; spatial_temporal adds per-operator partitions"
                            " ([partitions.md](partitions.md))", "[megatron]",
                            "megatron, spatial_temporal"),
                        Key("ep", "list of integers", "expert-parallel degrees (MoE only)",
                            "divisors of the experts dividing tp x dp x cp / etp"),
                        Key("etp", "list of integers", "expert tensor-parallel degrees (MoE only)",
                            "each configuration's tp and 1"),
                        Key("objective", "string", "what the planner minimises: mean (the"
                            " predicted time) or pNN, its NN-th percentile under the cost model's"
                            " out-of-sample error (cost/trust.py); `--objective`", "p90",
                            "mean, p1 to p99"),
                    ))

PLAN = SectionDoc("plan", "Plan file (one GPU type)", "At top level or under `plan:`. `paraplan"
                  " plan -o` also writes the instance it was made for beside it, under"
                  " `instance:`.", "cost.readers.plan_reader:_PLAN_KEYS", (
                      Key("tp", "integer", "tensor-parallel degree"),
                      Key("pp", "integer", "pipeline stages"),
                      Key("dp", "integer", "data-parallel replicas"),
                      Key("cp", "integer", "context-parallel degree", "1"),
                      Key("micro_batch", "integer", "sequences per micro-batch"),
                      Key("num_micro_batches", "integer", "micro-batches per replica and step;"
                          " must divide", "global_batch / (dp x micro_batch)"),
                      Key("sequence_parallel", "boolean", "Megatron's sequence parallelism",
                          "false"),
                      Key("recompute", "string", "recomputation of the layers not fully"
                          " recomputed; full: every layer fully recomputed", "none",
                          "none, selective, full"),
                      Key("zero", "integer", "ZeRO stage", "0"),
                      Key("virtual_stages", "integer", "interleaved model chunks per stage", "1"),
                      Key("layers_per_stage", "list of integers", "layers of each stage",
                          "the default split (cost/readers/plan_reader.default_layer_split)"),
                      Key("full_recompute_layers", "list of integers", "fully recomputed layers"
                          " of each stage", "all 0, or layers_per_stage for recompute: full"),
                      Key("partitions", "mapping of operator to partition", "one partition per"
                          " operator, e.g. `{qkv: K2*P2x2, attn_core: heads@P2, ...}`"
                          " ([partitions.md](partitions.md))", "Megatron 1-D"),
                      Key("ep", "integer", "expert-parallel degree (MoE)", "1"),
                      Key("etp", "integer", "expert tensor-parallel degree (MoE)", "tp"),
                      Key("first_stage_layers", "integer", "Megatron-core's"
                          " --decoder-first-pipeline-num-layers; the middle stages even", "none"),
                      Key("last_stage_layers", "integer", "Megatron-core's"
                          " --decoder-last-pipeline-num-layers", "none"),
                      Key("embedding_in_split", "boolean", "the embedding counts as a layer slot"
                          " of the first stage (--account-for-embedding-in-pipeline-split)",
                          "false"),
                      Key("loss_in_split", "boolean", "the loss counts as a layer slot of the last"
                          " stage (--account-for-loss-in-pipeline-split)", "false"),
                      Key("zero_bubble", "string", "torchtitan only: torch's zero-bubble"
                          " schedule ([concepts.md](concepts.md#pipeline-schedules))",
                          "none (1F1B)", ZeroBubble),
                  ))

# --- node groups, scenarios, events (cost/readers/) ------------------------------------------

GROUPS_TOP = SectionDoc("", "Group-format instance file, top level", "A file is in the group"
                        " format when its `cluster:` holds `groups:`; `model`, `job`,"
                        " `gpu_types` and `search` are as above.",
                        "cost.readers.instance:_GROUP_TOP_KEYS", (
                            Key("name", "string", "the instance's name"),
                            Key("model", "mapping", "as in the one-type file"),
                            Key("cluster", "mapping", "node groups and the links between them"),
                            Key("job", "mapping", "as in the one-type file"),
                            Key("gpu_types", "mapping", "as in the one-type file", "none"),
                            Key("search", "mapping", "as in the one-type file", "the whole space"),
                            Key("scenarios", "list", "network scenarios besides the declared one,"
                                " \"nominal\" (`--robust`, `--expected`)", "none"),
                            Key("timeline", "list", "periods in order, each a scenario for some"
                                " hours (`paraplan timeline`)", "none"),
                            Key("switching", "mapping", "what switching plans costs", "below"),
                        ))

GROUPS_CLUSTER = SectionDoc("cluster", "`cluster:` (group format)", "",
                            "cost.readers.cluster:GROUPS_CLUSTER_KEYS", (
                                Key("groups", "list", "one or more node groups, each homogeneous"),
                                Key("links", "list", "links between groups or sites; a pair no"
                                    " link names gets the slower NIC and the larger latency of"
                                    " the two", "none"),
                            ))

GROUP = SectionDoc("cluster.groups[]", "`cluster.groups[]`", "Each group also takes every key of"
                   " a one-type `cluster:`, with the same units and defaults.",
                   "cost.readers.cluster:_GROUP_KEYS", (
                       Key("name", "string", "unique among the groups"),
                       Key("site", "string", "the site the group is at; links may name it",
                           "the group's own name"),
                   ), includes=CLUSTER)

LINK = SectionDoc("cluster.links[]", "`cluster.links[]`", "Per GPU, one direction.",
                  "cost.readers.cluster:_LINK_KEYS", (
                      Key("between", "two names", "two group or site names"),
                      Key("gbit_per_s", "number", "bandwidth per GPU, one direction"),
                      Key("latency_us", "number", "latency of one message",
                          "the larger inter-node latency of the two groups"),
                  ))

SCENARIO = SectionDoc("scenarios[]", "`scenarios[]`", "", "cost.readers.scenarios:_SCENARIO_KEYS", (
    Key("name", "string", "unique, not \"nominal\""),
    Key("probability", "number", "for `--expected`: either every scenario gives one or none"
        " does; the nominal one gets 1 minus their sum", "none"),
    Key("window_h", "two numbers", "hours of the day it holds, informational", "none"),
    Key("changes", "list", "a non-empty list of group and link changes (below)"),
))

GROUP_CHANGE = SectionDoc("changes[] (group)", "Group change (in `changes:`)", "Applied first,"
                          " in order. Sets or scales a group's NIC and node link; the group's"
                          " default links follow its NIC, links given under `cluster.links`"
                          " keep theirs. Needs `group` or `site` and at least one of the others.",
                          "cost.readers.scenarios:_GROUP_CHANGE_KEYS", (
                              Key("group", "string", "the group changed", "none"),
                              Key("site", "string", "every group on this site", "none"),
                              Key("nic_gbit_per_s", "number", "the NIC's new bandwidth", "none"),
                              Key("nic_scale", "number", "the NIC's bandwidth times this", "none"),
                              Key("intra_node_gbytes_per_s", "number", "the node link's new"
                                  " bandwidth, bidirectional as vendors quote it", "none"),
                              Key("intra_scale", "number", "the node link's bandwidth times this",
                                  "none"),
                          ))

LINK_CHANGE = SectionDoc("changes[] (link)", "Link change (in `changes:`)", "Applied after the"
                         " group changes, in order: at most one of `scale` and `gbit_per_s`,"
                         " and/or `latency_us`.", "cost.readers.scenarios:_LINK_CHANGE_KEYS", (
                             Key("between", "two names", "two group or site names"),
                             Key("scale", "number", "the current bandwidth times this", "none"),
                             Key("gbit_per_s", "number", "the link's new bandwidth", "none"),
                             Key("latency_us", "number", "the link's new latency", "none"),
                         ))

PERIOD = SectionDoc("timeline[]", "`timeline[]`", "", "cost.readers.scenarios:_PERIOD_KEYS", (
    Key("scenario", "string", "\"nominal\" or a declared scenario's name"),
    Key("duration_h", "number", "how long the period lasts"),
))

SWITCHING = SectionDoc("switching", "`switching:`", "The cost of changing plans"
                       " (cost/switching.py).", "cost.readers.scenarios:SWITCHING_KEYS", (
                           Key("storage_gbytes_per_s", "number", "aggregate checkpoint-storage"
                               " bandwidth", f"{_SWITCHING['storage_bw_bytes_per_s'] / GBYTE_BYTES:g}"),
                           Key("restart_s", "number", "time to stop and relaunch the job",
                               f"{_SWITCHING['restart_s']:g}"),
                       ))

EVENT_FILE = SectionDoc("", "Event file (`paraplan replan --event`)", "",
                        "cost.readers.scenarios:_EVENT_FILE_KEYS", (
                            Key("event", "mapping", "the network change (below)"),
                        ))

EVENT = SectionDoc("event", "`event:`", "Exactly one of `remaining_hours` and"
                   " `remaining_iterations`.", "cost.readers.scenarios:_EVENT_KEYS", (
                       Key("name", "string", "the event's name", "the file's stem"),
                       Key("changes", "list", "group and link changes as in a scenario, applied"
                           " to the instance's nominal cluster"),
                       Key("remaining_hours", "number", "training time left", "none"),
                       Key("remaining_iterations", "integer", "iterations left", "none"),
                   ))

GROUPS_PLAN = SectionDoc("plan", "Plan file (group format)", "At top level or under `plan:`."
                         " The plan's classes share its degrees and modes.",
                         "cost.readers.plan_reader:_CLASS_PLAN_KEYS", (
                             Key("tp", "integer", "tensor-parallel degree of every class: inside"
                                 " a node or whole nodes"),
                             Key("cp", "integer", "context-parallel degree", "1"),
                             Key("virtual_stages", "integer", "interleaved model chunks per stage",
                                 "1"),
                             Key("micro_batch", "integer", "sequences per micro-batch"),
                             Key("sequence_parallel", "boolean", "Megatron's sequence parallelism",
                                 "false"),
                             Key("recompute", "string", "as in the one-type plan", "none",
                                 "none, selective, full"),
                             Key("zero", "integer", "ZeRO stage (where the framework runs it)",
                                 "0"),
                             Key("family", "string", "stage: one pipeline across groups; replica:"
                                 " replicas per group; mixed: both", "stage",
                                 "stage, replica, mixed"),
                             Key("ep", "integer", "expert-parallel degree (MoE)", "1"),
                             Key("etp", "integer", "expert tensor-parallel degree (MoE)", "tp"),
                             Key("embedding_in_split", "boolean", "as in the one-type plan",
                                 "false"),
                             Key("loss_in_split", "boolean", "as in the one-type plan", "false"),
                             Key("zero_bubble", "string", "as in the one-type plan", "none (1F1B)",
                                 ZeroBubble),
                             Key("classes", "list", "a non-empty list of replica classes (below)"),
                         ))

CLASS = SectionDoc("plan.classes[]", "`classes[]`", "", "cost.readers.plan_reader:_CLASS_KEYS", (
    Key("replicas", "integer", "replicas of this class"),
    Key("stages", "list of group names", "the group hosting each pipeline stage"),
    Key("num_micro_batches", "integer", "micro-batches per replica and step"),
    Key("layers_per_stage", "list of integers", "layers of each stage",
        "the default split (cost/readers/plan_reader.default_layer_split)"),
    Key("full_recompute_layers", "list of integers", "fully recomputed layers of each stage",
        "all 0, or layers_per_stage for recompute: full"),
    Key("partitions", "mapping", "one partition per operator, as in the one-type plan",
        "Megatron 1-D"),
    Key("stage_dp", "list of integers", "an asymmetric pipeline: each stage's data-parallel"
        " ranks, with replicas 1 and num_micro_batches the batch's"
        " ([mixed-clusters.md](mixed-clusters.md))", "replicas on every stage"),
))

# The page's order: the one-type files, then the group format.
ONE_TYPE = (TOP, MODEL, MOE, MLA, CLUSTER, JOB, GPU, SEARCH, CLUSTER_FILE, JOB_FILE, PLAN)
GROUP_FORMAT = (GROUPS_TOP, GROUPS_CLUSTER, GROUP, LINK, SCENARIO, GROUP_CHANGE, LINK_CHANGE,
                PERIOD, SWITCHING, EVENT_FILE, EVENT, GROUPS_PLAN, CLASS)
SECTIONS = ONE_TYPE + GROUP_FORMAT
