"""Where every YAML key of an instance, part, event and plan file lands: the key table.

A key's meaning is written once, as the docstring of the record field that holds its value
(`ModelSpec.layers`, `GpuSpec.hbm_bytes`, ... in cost/specs.py, cost/plan_specs.py and
cost/fabric.py; read by cost/docs/field_docs.py). This table holds only what a field cannot
know: which section of which file the key sits in, the field it fills where that is named
otherwise (`hbm_gib` -> `GpuSpec.hbm_bytes`), its YAML type, its default as the reader fills
it in ("required" where it has none; FIELD_DEFAULT where it is the field's own default, in the
same unit, which the page then writes as YAML would), and its allowed values where no enum
lists them. A number's unit and physical range come from cost/ranges.RANGES (the table every
reader checks numbers against), the values of a closed set from the enum the reader parses it
into (e.g. cost/specs.Precision). Keys that fill no one field (a link's `between`, a change's
`nic_scale`, the fabric's `leaf_nodes`) carry their meaning here, as `meaning`.

docs/schema.md's key reference is generated from this table (`python -m
paraplan.cost.docs.schema`), and tests/instances/test_schema_doc.py fails when the page differs
from what the generator writes, when a key's field has no docstring, when a reader fills in
another default than a FIELD_DEFAULT key's field has, or when a reader accepts a key this table
does not describe (each section names the reader's key tuple, `accepted`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from enum import Enum

from paraplan.cost.fabric import FabricTier
from paraplan.cost.plan_specs import Plan, ReplicaClass
from paraplan.cost.releases import Framework
from paraplan.cost.specs import (Attention, Cluster, GpuSpec, GradReduceDtype, Instance, JobSpec,
                                 Link, MlaSpec, Mlp, ModelSpec, MoeDispatcher, MoeSpec, NodeGroup,
                                 OffloadModule, Optimizer, Outer, Period, PipelineSchedule,
                                 Precision, Recompute, RecomputeModule, Scenario, SearchSpace,
                                 Switching, ZeroBubble)
from paraplan.cost.units import GBYTE_BYTES, GFLOP_FLOPS

REQUIRED = "required"
# a key's default is its field's own, in the same unit: the page writes it as YAML would
FIELD_DEFAULT = "<the field's default>"
# the records' own defaults (internal units), where a reader leaves a key to them in another unit
_SWITCHING = {f.name: f.default for f in fields(Switching)}
_GPU = {f.name: f.default for f in fields(GpuSpec)}


@dataclass(frozen=True, slots=True)
class Key:
    """One YAML key. `default`: REQUIRED, FIELD_DEFAULT or text; `allowed`: an Enum class whose
    values the key takes (every one listed), or text; `quantity`: its row of cost/ranges.RANGES
    where that differs from the key's name ("" for none). Its meaning: the docstring of `field`
    ("": the key's own name) of `record` (None: the section's record), or `meaning` for a key
    no one field holds."""

    name: str
    kind: str  # integer | number | boolean | string | mapping | list of ... | ...
    default: str = REQUIRED
    allowed: type[Enum] | str = ""
    quantity: str | None = None
    field: str = ""
    record: type | None = None
    meaning: str = ""


@dataclass(frozen=True, slots=True)
class SectionDoc:
    """The keys of one mapping of a file. `path` is where it sits in the file (`model.moe`,
    `cluster.groups[]`); `accepted` names the reader's tuple of the keys it takes there
    ("module:NAME"); `record` is the record whose fields hold its keys (None: no record);
    `includes` is a section whose keys this one also takes."""

    path: str
    title: str
    intro: str
    accepted: str
    record: type | None
    keys: tuple[Key, ...]
    includes: SectionDoc | None = None


def source(key: Key, sec: SectionDoc) -> tuple[type, str] | None:
    """(record, field) whose docstring gives `key`'s meaning; None where `key.meaning` does."""
    if key.meaning:
        return None
    return (key.record or sec.record), (key.field or key.name)


def field_default(key: Key, sec: SectionDoc) -> object:
    """The default of the field that holds `key` (a key whose default is FIELD_DEFAULT)."""
    record, name = source(key, sec)
    f = next(f for f in fields(record) if f.name == name)
    return f.default_factory() if f.default is MISSING else f.default


# --- one GPU type (cost/readers/) -------------------------------------------------------------

TOP = SectionDoc("", "Instance file, top level", "An instance is a model, a cluster and a job;"
                 " `gpu_types` and `search` are optional.", "cost.readers.instance:_TOP_KEYS",
                 Instance, (
                     Key("name", "string"),
                     Key("model", "mapping"),
                     Key("cluster", "mapping"),
                     Key("job", "mapping"),
                     Key("gpu_types", "mapping of name to GPU", "none", meaning="GPU types the"
                         " file defines beside cost/gpus.yaml's catalogue, each with the keys of"
                         " `gpu_types.NAME`"),
                     Key("search", "mapping", "the whole space"),
                 ))

CLUSTER_FILE = SectionDoc("", "Cluster part file (`--cluster`)", "Replaces an instance's"
                          " `cluster:`; examples in instances/clusters/.",
                          "cost.readers.instance:_CLUSTER_FILE_KEYS", Instance, (
                              Key("cluster", "mapping"),
                              Key("gpu_types", "mapping", "none",
                                  meaning="as an instance's `gpu_types:`"),
                          ))

JOB_FILE = SectionDoc("", "Job part file (`--job`)", "Replaces an instance's `job:` (and"
                      " `search:` where it has one); examples in instances/jobs/.",
                      "cost.readers.instance:_JOB_FILE_KEYS", Instance, (
                          Key("job", "mapping"),
                          Key("search", "mapping", "the whole space"),
                      ))

MODEL = SectionDoc("model", "`model:`", "Widths are unit-free counts. A Hugging Face config.json"
                   " (`--hf-config`, cost/hf_config.py) gives the same record.",
                   "cost.readers.model:MODEL_KEYS", ModelSpec, (
                       Key("name", "string", "the instance's name"),
                       Key("layers", "integer"),
                       Key("hidden", "integer"),
                       Key("heads", "integer"),
                       Key("kv_heads", "integer", "heads (multi-head attention)"),
                       Key("ffn", "integer"),
                       Key("vocab", "integer"),
                       Key("seq_len", "integer"),
                       Key("mlp", "string", REQUIRED, Mlp),
                       Key("tied_embeddings", "boolean", FIELD_DEFAULT),
                       Key("dropout", "number", FIELD_DEFAULT),
                       Key("head_dim", "integer", "hidden / heads", field="attention_head_dim"),
                       Key("qkv_bias", "boolean", FIELD_DEFAULT),
                       Key("attn_out_bias", "boolean", FIELD_DEFAULT),
                       Key("mlp_bias", "boolean", FIELD_DEFAULT),
                       Key("norm_bias", "boolean", FIELD_DEFAULT),
                       Key("norms_per_layer", "integer", FIELD_DEFAULT),
                       Key("parallel_blocks", "boolean", FIELD_DEFAULT),
                       Key("position_embeddings", "integer", FIELD_DEFAULT),
                       Key("embedding_norm", "boolean", FIELD_DEFAULT),
                       Key("sliding_window_tokens", "integer", "none (full causal attention)"),
                       Key("sliding_window_layers", "integer",
                           "all layers, where sliding_window_tokens is given"),
                       Key("unmodelled", "list of strings", FIELD_DEFAULT),
                       Key("moe", "mapping", "none (dense)"),
                       Key("mla", "mapping", "none"),
                       Key("mtp_layers", "integer", FIELD_DEFAULT),
                       Key("qk_norm", "boolean", FIELD_DEFAULT),
                       Key("attention_sinks", "boolean", FIELD_DEFAULT),
                       Key("expert_bias", "boolean", FIELD_DEFAULT),
                   ))

MOE = SectionDoc("model.moe", "`model.moe:`", "Mixture-of-experts layers, priced by cost/moe.py"
                 " ([moe.md](moe.md)); instances/mixtral-8x7b-64xH100.yaml is an example.",
                 "cost.readers.model:MOE_KEYS", MoeSpec, (
                     Key("experts", "integer"),
                     Key("top_k", "integer"),
                     Key("expert_ffn", "integer"),
                     Key("shared_ffn", "integer", FIELD_DEFAULT),
                     Key("dense_layers", "integer", FIELD_DEFAULT),
                     Key("capacity_factor", "number", "none (dropless routing)"),
                     Key("imbalance", "number", "cost/moe.DEFAULT_IMBALANCE, fitted to the"
                         " published MoE runs (cost/moe_params.py)"),
                     Key("max_nodes_per_token", "integer", "none"),
                 ))

MLA = SectionDoc("model.mla", "`model.mla:`", "Multi-head latent attention (DeepSeek-V2/V3,"
                 " cost/specs.MlaSpec). Needs `kv_heads` equal to `heads` (or left out), no"
                 " `head_dim`, no `qkv_bias`, and `job.framework: megatron`.",
                 "cost.readers.model:MLA_KEYS", MlaSpec, (
                     Key("q_lora_rank", "integer or null"),
                     Key("kv_lora_rank", "integer"),
                     Key("qk_nope_head_dim", "integer"),
                     Key("qk_rope_head_dim", "integer"),
                     Key("v_head_dim", "integer"),
                 ))

CLUSTER = SectionDoc("cluster", "`cluster:` (one GPU type)", "Bandwidths are per GPU. NVLink is"
                     " given as vendors quote it (bidirectional) and stored halved, one"
                     " direction (900 GB/s -> 450e9 bytes/s); the NIC is one direction already"
                     " (400 Gbit/s -> 50e9 bytes/s).", "cost.readers.cluster:CLUSTER_KEYS",
                     NodeGroup, (
                         Key("gpu", "string"),
                         Key("nodes", "integer"),
                         Key("gpus_per_node", "integer"),
                         Key("intra_node_link", "string", FIELD_DEFAULT, "nvlink, pcie",
                             field="intra_node_kind"),
                         # the four link keys fill two Links (intra_node, inter_node)
                         Key("intra_node_gbytes_per_s", "number", meaning="bandwidth per GPU"
                             " inside a node, bidirectional aggregate as vendors quote it"),
                         Key("intra_node_latency_us", "number", "5",
                             meaning="latency of one message inside a node"),
                         Key("nic_gbit_per_s", "number",
                             meaning="network bandwidth per GPU, one direction"),
                         Key("inter_node_latency_us", "number", "10",
                             meaning="latency of one message between nodes"),
                         Key("nvlink_domain_gpus", "integer", "gpus_per_node"),
                         # the leaf and pod keys build NodeGroup.tiers, one FabricTier each
                         Key("leaf_nodes", "integer", "none: one non-blocking fabric",
                             meaning="nodes under one set of leaf switches, in rank order"
                             " (cost/fabric.py): a group spanning more leaves shares their"
                             " uplinks; a multiple of the NVLink domain's nodes"),
                         Key("leaf_oversubscription", "number", "1", meaning="what a leaf's nodes"
                             " can send over what its uplinks carry (2.0: 2:1); needs leaf_nodes"),
                         Key("pod_nodes", "integer", "none", meaning="nodes under one pod's"
                             " spine, a multiple of leaf_nodes (Llama 3's RoCE fabric: 384)"),
                         Key("pod_oversubscription", "number", "1", meaning="the same for a"
                             " pod's uplinks (Llama 3: 7.0); needs pod_nodes"),
                         Key("tier_latency_us", "number", "1", field="latency_s",
                             record=FabricTier),
                     ))

JOB = SectionDoc("job", "`job:`", "What one optimizer step is and how the framework runs it."
                 " Options a framework does not run are refused naming the framework.",
                 "cost.readers.job:JOB_KEYS", JobSpec, (
                     Key("global_batch", "integer"),
                     Key("precision", "string", FIELD_DEFAULT, Precision),
                     Key("optimizer", "string", FIELD_DEFAULT, Optimizer),
                     Key("attention", "string", FIELD_DEFAULT, Attention),
                     Key("framework", "string", FIELD_DEFAULT, Framework),
                     Key("framework_version", "string", "the framework's current release"),
                     Key("tp_comm_overlap", "boolean", FIELD_DEFAULT),
                     Key("cudnn_attention", "boolean", FIELD_DEFAULT),
                     Key("moe_a2a_overlap", "boolean", FIELD_DEFAULT),
                     Key("moe_shared_expert_overlap", "boolean", FIELD_DEFAULT),
                     Key("pipeline_schedule", "string", FIELD_DEFAULT, PipelineSchedule),
                     Key("moe_dispatcher", "string", FIELD_DEFAULT, MoeDispatcher),
                     Key("recompute_early_stop", "boolean", "the framework's"),
                     Key("grad_reduce_overlap", "boolean", "the release's: true from 2023-08"),
                     Key("recompute_modules", "list of strings", FIELD_DEFAULT, RecomputeModule),
                     Key("offload_modules", "list of strings", FIELD_DEFAULT, OffloadModule),
                     Key("activation_fp8_input_store", "boolean", FIELD_DEFAULT),
                     Key("attention_output_e5m6", "boolean", FIELD_DEFAULT),
                     Key("grad_reduce_dtype", "string", "the framework's: fp32 for megatron and"
                         " torchtitan, the training dtype for deepspeed, composer and NeMo's"
                         " apex optimizers", GradReduceDtype),
                     Key("train_tokens", "number", "none"),
                     Key("usd_per_gpu_hour", "mapping of GPU type to number", "none",
                         quantity="usd_per_gpu_hour", field="usd_per_gpu_s"),
                 ))

GPU = SectionDoc("gpu_types.NAME", "`gpu_types.NAME:` (and cost/gpus.yaml)", "One GPU type."
                 " Peaks are dense (no 2:4 sparsity); a vendor's \"80 GB\" is `hbm_gib: 80`;"
                 " bandwidths are decimal (10^9 bytes/s). Efficiencies left out take the"
                 " unfitted defaults: treat such a GPU's predictions as uncalibrated.",
                 "cost.readers.gpus:_GPU_KEYS", GpuSpec, (
                     Key("peak_tflops_bf16", "number", field="peak_flops_per_s"),
                     Key("peak_tflops_fp8", "number", "none", field="peak_fp8_flops_per_s"),
                     Key("hbm_gib", "number", field="hbm_bytes"),
                     Key("hbm_gbytes_per_s", "number", field="hbm_bw_bytes_per_s"),
                     Key("matmul_eff_max", "number", FIELD_DEFAULT),
                     Key("matmul_half_gflops", "number",
                         f"{_GPU['matmul_half_flops'] / GFLOP_FLOPS:g}", field="matmul_half_flops"),
                     Key("memory_eff", "number", FIELD_DEFAULT),
                     Key("attention_eff", "number", FIELD_DEFAULT),
                     Key("fp8_matmul_eff_max", "number", FIELD_DEFAULT),
                     Key("cudnn_attention_speedup", "number", FIELD_DEFAULT),
                     Key("fa2_benchmark_tflops", "number", "none",
                         field="fa2_benchmark_flops_per_s"),
                     Key("cudnn_attention_tflops", "mapping", "none",
                         field="cudnn_attention_flops_per_s_by_keys"),
                     Key("host_link_gbytes_per_s", "number", "none",
                         field="host_link_bw_bytes_per_s"),
                 ))

SEARCH = SectionDoc("search", "`search:`", "Narrows the declared space the planner proves its"
                    " optimum over (solver/space.py). A listed value the instance's shape"
                    " (cost/space_rules.py) or its framework (cost/framework_rules.py) can never"
                    " run is refused naming the value and why; values the defaults bring in are"
                    " filtered. `--search KEY=V,...` on the command line sets the same keys.",
                    "cost.readers.search:SEARCH_KEYS", SearchSpace, (
                        Key("tp", "list of integers", "powers of two dividing the heads, within"
                            " one node"),
                        Key("pp", "list of integers", "every divisor of GPUs / (tp x cp) up to"
                            " the layers"),
                        Key("cp", "list of integers", "powers of two dividing seq_len and"
                            " GPUs / tp"),
                        Key("micro_batch", "list of integers", "divisors of the per-replica"
                            " batch whose memory lower bound fits"),
                        Key("max_micro_batch", "integer", "no cap"),
                        Key("max_pp", "integer", "no cap"),
                        Key("max_cp", "integer", "no cap"),
                        Key("sequence_parallel", "list of booleans", FIELD_DEFAULT),
                        Key("zero", "list of integers", FIELD_DEFAULT, quantity="zero"),
                        Key("virtual_stages", "list of integers", "every v dividing the layers"
                            " with v x pp <= layers"),
                        Key("recompute", "list of strings", FIELD_DEFAULT, Recompute),
                        Key("full_recompute", "boolean", FIELD_DEFAULT),
                        Key("uniform_split", "boolean", FIELD_DEFAULT),
                        Key("tp_across_nodes", "boolean", FIELD_DEFAULT),
                        Key("tp_per_group", "boolean", FIELD_DEFAULT),
                        Key("classes_per_group", "integer", FIELD_DEFAULT),
                        Key("idle_gpus", "boolean", FIELD_DEFAULT),
                        Key("mixed_families", "boolean", FIELD_DEFAULT),
                        Key("asymmetric_pipelines", "boolean", FIELD_DEFAULT),
                        Key("memory_reserve_gib", "number", "2", field="memory_reserve_bytes"),
                        Key("tensor_partitions", "list of strings", FIELD_DEFAULT,
                            "megatron, spatial_temporal"),
                        Key("ep", "list of integers", "divisors of the experts dividing"
                            " tp x dp x cp / etp"),
                        Key("etp", "list of integers", "each configuration's tp and 1"),
                        Key("objective", "string", FIELD_DEFAULT, "mean, p1 to p99"),
                    ))

PLAN_MODES = SectionDoc("plan", "Plan file, either form", "At top level or under `plan:`. `paraplan"
                        " plan -o` also writes the instance it was made for beside it, under"
                        " `instance:`. What every replica class of the plan shares; the one-type"
                        " form adds its one class's keys, the group format lists its classes.",
                        "cost.readers.plan_reader:_MODE_KEYS", Plan, (
                            Key("tp", "integer"),
                            Key("cp", "integer", FIELD_DEFAULT),
                            Key("virtual_stages", "integer", FIELD_DEFAULT),
                            Key("micro_batch", "integer"),
                            Key("sequence_parallel", "boolean", FIELD_DEFAULT),
                            Key("recompute", "string", FIELD_DEFAULT, "none, selective, full"),
                            Key("zero", "integer", FIELD_DEFAULT),
                            Key("ep", "integer", FIELD_DEFAULT),
                            Key("etp", "integer", "tp"),
                            Key("embedding_in_split", "boolean", FIELD_DEFAULT),
                            Key("loss_in_split", "boolean", FIELD_DEFAULT),
                            Key("zero_bubble", "string", "none (1F1B)", ZeroBubble),
                        ))

PLAN = SectionDoc("plan", "Plan file (one GPU type)", "Its one replica class: dp replicas of pp"
                  " stages on every GPU.", "cost.readers.plan_reader:_PLAN_KEYS", Plan, (
                      Key("pp", "integer", record=Outer),
                      Key("dp", "integer", record=Outer),
                      Key("num_micro_batches", "integer", "global_batch / (dp x micro_batch)",
                          record=ReplicaClass),
                      Key("layers_per_stage", "list of integers",
                          "the default split (cost/readers/plan_reader.default_layer_split)",
                          record=ReplicaClass),
                      Key("full_recompute_layers", "list of integers",
                          "all 0, or layers_per_stage for recompute: full", record=ReplicaClass),
                      Key("partitions", "mapping of operator to partition", "Megatron 1-D",
                          record=ReplicaClass),
                      # the two read into layers_per_stage (cost/pipeline_split.megatron_split)
                      Key("first_stage_layers", "integer", "none", meaning="Megatron-core's"
                          " --decoder-first-pipeline-num-layers; the middle stages even"),
                      Key("last_stage_layers", "integer", "none", meaning="Megatron-core's"
                          " --decoder-last-pipeline-num-layers"),
                  ), includes=PLAN_MODES)

# --- node groups, scenarios, events (cost/readers/) ------------------------------------------

GROUPS_TOP = SectionDoc("", "Group-format instance file, top level", "A file is in the group"
                        " format when its `cluster:` holds `groups:`; `model`, `job`,"
                        " `gpu_types` and `search` are as above.",
                        "cost.readers.instance:_GROUP_TOP_KEYS", Instance, (
                            Key("scenarios", "list", "none"),
                            Key("timeline", "list", "none"),
                            Key("switching", "mapping", "below"),
                        ), includes=TOP)

GROUPS_CLUSTER = SectionDoc("cluster", "`cluster:` (group format)", "",
                            "cost.readers.cluster:GROUPS_CLUSTER_KEYS", Cluster, (
                                Key("groups", "list"),
                                # read into Cluster.between, the matrix of every pair's link
                                Key("links", "list", "none", meaning="links between groups or"
                                    " sites; a pair no link names gets the slower NIC and the"
                                    " larger latency of the two"),
                            ))

GROUP = SectionDoc("cluster.groups[]", "`cluster.groups[]`", "Each group also takes every key of"
                   " a one-type `cluster:`, with the same units and defaults.",
                   "cost.readers.cluster:_GROUP_KEYS", NodeGroup, (
                       Key("name", "string"),
                       Key("site", "string", "the group's own name"),
                   ), includes=CLUSTER)

LINK = SectionDoc("cluster.links[]", "`cluster.links[]`", "Per GPU, one direction.",
                  "cost.readers.cluster:_LINK_KEYS", Link, (
                      Key("between", "two names", meaning="two group or site names"),
                      Key("gbit_per_s", "number", field="bw_bytes_per_s"),
                      Key("latency_us", "number", "the larger inter-node latency of the two"
                          " groups", field="latency_s"),
                  ))

SCENARIO = SectionDoc("scenarios[]", "`scenarios[]`", "", "cost.readers.scenarios:_SCENARIO_KEYS",
                      Scenario, (
                          Key("name", "string"),
                          Key("probability", "number", "none"),
                          Key("window_h", "two numbers", "none"),
                          # applied to the nominal cluster: Scenario.cluster
                          Key("changes", "list", meaning="a non-empty list of group and link"
                              " changes (below)"),
                      ))

# A change is applied to a cluster as it is read (cost/readers/scenarios.py): no record holds it.
GROUP_CHANGE = SectionDoc("changes[] (group)", "Group change (in `changes:`)", "Applied first,"
                          " in order. Sets or scales a group's NIC and node link; the group's"
                          " default links follow its NIC, links given under `cluster.links`"
                          " keep theirs. Needs `group` or `site` and at least one of the others.",
                          "cost.readers.scenarios:_GROUP_CHANGE_KEYS", None, (
                              Key("group", "string", "none", meaning="the group changed"),
                              Key("site", "string", "none", meaning="every group on this site"),
                              Key("nic_gbit_per_s", "number", "none",
                                  meaning="the NIC's new bandwidth"),
                              Key("nic_scale", "number", "none",
                                  meaning="the NIC's bandwidth times this"),
                              Key("intra_node_gbytes_per_s", "number", "none", meaning="the node"
                                  " link's new bandwidth, bidirectional as vendors quote it"),
                              Key("intra_scale", "number", "none",
                                  meaning="the node link's bandwidth times this"),
                          ))

LINK_CHANGE = SectionDoc("changes[] (link)", "Link change (in `changes:`)", "Applied after the"
                         " group changes, in order: at most one of `scale` and `gbit_per_s`,"
                         " and/or `latency_us`.", "cost.readers.scenarios:_LINK_CHANGE_KEYS",
                         None, (
                             Key("between", "two names", meaning="two group or site names"),
                             Key("scale", "number", "none",
                                 meaning="the current bandwidth times this"),
                             Key("gbit_per_s", "number", "none",
                                 meaning="the link's new bandwidth"),
                             Key("latency_us", "number", "none", meaning="the link's new latency"),
                         ))

PERIOD = SectionDoc("timeline[]", "`timeline[]`", "", "cost.readers.scenarios:_PERIOD_KEYS",
                    Period, (
                        Key("scenario", "string"),
                        Key("duration_h", "number", field="duration_s"),
                    ))

SWITCHING = SectionDoc("switching", "`switching:`", "The cost of changing plans"
                       " (cost/switching.py).", "cost.readers.scenarios:SWITCHING_KEYS",
                       Switching, (
                           Key("storage_gbytes_per_s", "number",
                               f"{_SWITCHING['storage_bw_bytes_per_s'] / GBYTE_BYTES:g}",
                               field="storage_bw_bytes_per_s"),
                           Key("restart_s", "number", FIELD_DEFAULT),
                       ))

# An event is read into a Scenario and the time or iterations left (load_event's tuple).
EVENT_FILE = SectionDoc("", "Event file (`paraplan replan --event`)", "",
                        "cost.readers.scenarios:_EVENT_FILE_KEYS", None, (
                            Key("event", "mapping", meaning="the network change (below)"),
                        ))

EVENT = SectionDoc("event", "`event:`", "Exactly one of `remaining_hours` and"
                   " `remaining_iterations`.", "cost.readers.scenarios:_EVENT_KEYS", None, (
                       Key("name", "string", "the file's stem", meaning="the event's name"),
                       Key("changes", "list", meaning="group and link changes as in a scenario,"
                           " applied to the instance's nominal cluster"),
                       Key("remaining_hours", "number", "none", meaning="training time left"),
                       Key("remaining_iterations", "integer", "none", meaning="iterations left"),
                   ))

GROUPS_PLAN = SectionDoc("plan", "Plan file (group format)", "The plan's classes share its"
                         " degrees and modes.", "cost.readers.plan_reader:_CLASS_PLAN_KEYS", Plan, (
                             Key("family", "string", FIELD_DEFAULT, "stage, replica, mixed"),
                             Key("classes", "list"),
                         ), includes=PLAN_MODES)

CLASS = SectionDoc("plan.classes[]", "`classes[]`", "", "cost.readers.plan_reader:_CLASS_KEYS",
                   ReplicaClass, (
                       Key("replicas", "integer"),
                       Key("stages", "list of group names", field="stage_groups"),
                       Key("num_micro_batches", "integer"),
                       Key("layers_per_stage", "list of integers",
                           "the default split (cost/readers/plan_reader.default_layer_split)"),
                       Key("full_recompute_layers", "list of integers",
                           "all 0, or layers_per_stage for recompute: full"),
                       Key("partitions", "mapping", "Megatron 1-D"),
                       Key("stage_dp", "list of integers", "replicas on every stage"),
                   ))

# The page's order: the one-type files, then the group format.
ONE_TYPE = (TOP, MODEL, MOE, MLA, CLUSTER, JOB, GPU, SEARCH, CLUSTER_FILE, JOB_FILE, PLAN_MODES, PLAN)
GROUP_FORMAT = (GROUPS_TOP, GROUPS_CLUSTER, GROUP, LINK, SCENARIO, GROUP_CHANGE, LINK_CHANGE,
                PERIOD, SWITCHING, EVENT_FILE, EVENT, GROUPS_PLAN, CLASS)
SECTIONS = ONE_TYPE + GROUP_FORMAT
