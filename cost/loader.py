"""The one place YAML is read: GPU catalogue, planning instances and plans.

Every number is converted to internal units (cost/units.py) here, once; every problem raises
`InstanceError(path, field, problem, fix)` naming the file and the dotted field.

Instance file (units in the key names; "required" unless a default is given)::

    name: llama3-70b-512xH100        # string
    model:
      name: llama3-70b               # default: the instance name
      layers: 80                     # integer, at most 10**6
      hidden: 8192                   # divisible by heads
      heads: 64                      # divisible by kv_heads
      kv_heads: 8                    # default: heads (multi-head attention)
      ffn: 28672
      vocab: 128256
      seq_len: 8192                  # tokens per sequence
      mlp: swiglu                    # gelu | swiglu
      tied_embeddings: false         # default false
      dropout: 0.0                   # attention/hidden dropout probability, default 0
      head_dim: 128                  # width of one head, default hidden / heads
      qkv_bias: false                # biases on Q, K, V; default false (also attn_out_bias,
      mlp_bias: false                #   mlp_bias: every MLP projection; norm_bias: LayerNorm)
      norms_per_layer: 2             # default 2 (1: one shared norm, 4: Gemma-2 pre+post)
      parallel_blocks: false         # attention and MLP side by side (GPT-J, NeoX, Falcon)
      position_embeddings: 0         # rows of a learned position table, >= seq_len; default 0
      embedding_norm: false          # a norm after the token embedding (BLOOM)
      qk_norm: false                 # per-head RMSNorm of Q and K (Qwen3, Gemma-3), default false
      attention_sinks: false         # a learned sink logit per head (gpt-oss), default false
      expert_bias: false             # biases on the routed experts and router (gpt-oss; needs
                                     #   moe), default false
      sliding_window_tokens: 4096    # causal attention to the last N keys; default: none
      sliding_window_layers: 32      # how many layers use it; default: all
      unmodelled: []                 # one line each about what the model's source declares and
                                     #   paraplan does not price; shown with every plan
      mla:                           # multi-head latent attention (DeepSeek-V2/V3); default none.
        q_lora_rank: 1536            #   Needs kv_heads = heads (or left out), no head_dim, no
        kv_lora_rank: 512            #   qkv_bias, framework megatron; q_lora_rank null: Q is
        qk_nope_head_dim: 128        #   projected from the layer input directly (V2-Lite).
        qk_rope_head_dim: 64         #   Unit-free widths (cost/specs.MlaSpec)
        v_head_dim: 128
    cluster:
      gpu: H100-SXM5-80GB            # a cost/gpus.yaml name or one defined under gpu_types
      nodes: 64
      gpus_per_node: 8
      intra_node_link: nvlink        # nvlink | pcie, default nvlink
      intra_node_gbytes_per_s: 900   # GB/s per GPU, bidirectional aggregate as vendors quote it
      intra_node_latency_us: 5       # microseconds, default 5
      nic_gbit_per_s: 400            # Gbit/s per GPU, one direction
      inter_node_latency_us: 10      # microseconds, default 10
    job:
      global_batch: 1024             # sequences per optimizer step
      precision: bf16                # bf16 | fp16 | fp8 (FP8 linears), default bf16
      framework: megatron            # megatron | torchtitan | deepspeed | composer, default megatron
      framework_version: core_v0.19.0  # the framework's release (cost/releases.py: what it
                                     # could run, which release the plan's time is for); default
                                     # the current release
      optimizer: adam                # adam | apex_distributed_adam | apex_distributed_adam_bf16 (NeMo)
                                     # | adam_bf16_moments (fp32 master, bf16 moments; megatron,
                                     # ZeRO-1), default adam
      attention: flash               # flash | standard (stores the s x s scores), default flash
      tp_comm_overlap: false         # Transformer Engine's tp comm/GEMM overlap (megatron only;
                                     # used where tp > 1 inside a node with sequence parallel)
      cudnn_attention: true          # Transformer Engine's cuDNN fused attention (NVTE_FUSED_ATTN,
                                     # default 1); false: FlashAttention-2 (megatron only)
      moe_a2a_overlap: false         # MoE: Megatron-core's --overlap-moe-expert-parallel-comm
                                     # (megatron only; used where ep > 1 and pp = 1 or
                                     # interleaved; needs search full_recompute: false)
      moe_shared_expert_overlap: false  # MoE: Megatron-core's --moe-shared-expert-overlap (the
                                     # shared expert under the all-to-alls; ep > 1)
      pipeline_schedule: 1f1b        # 1f1b (interleaved with virtual_stages > 1) | dualpipe
                                     # (DeepSeek-V3's, one GPU type; cost/dualpipe.py)
      moe_dispatcher: alltoall       # MoE: alltoall (Megatron-core's) | deepep (one copy per
                                     # destination node, FP8 dispatch in FP8 jobs; cost/moe.py)
      recompute_early_stop: true     # torchtitan / composer: a full recompute stops before
                                     # MLP-out (torch.utils.checkpoint non-reentrant, PyTorch >=
                                     # 2.1); false for older PyTorch; default: the framework's
      grad_reduce_overlap: false     # megatron (adam): its gradient reduction hides behind the
                                     # backward (--overlap-grad-reduce); default: as the release
                                     # ran it (from 2023-08); pp 1 without ZeRO always overlaps
      recompute_modules: [layernorm, mla_up_proj, moe_act]  # megatron: outputs recomputed in
                                     # backward (--recompute-modules); needs search
                                     # full_recompute: false; default none
      offload_modules: [expert_fc1, moe_act]  # megatron, MoE: the experts' inputs stashed in
                                     # host memory (--offload-modules); needs the GPU's
                                     # host_link_gbytes_per_s; default none
      activation_fp8_input_store: false  # megatron: SwiGLU inputs stashed in fp8
      attention_output_e5m6: false   # fp8 jobs: DeepSeek-V3's 12-bit attention-output stash
      grad_reduce_dtype: fp32        # fp32 | bf16 | fp16 (the training's 16-bit dtype): what the
                                     # gradients are kept and reduced in; never searched (it
                                     # changes numerics); default the framework's: fp32 for
                                     # megatron and torchtitan, the training dtype for deepspeed,
                                     # composer and NeMo's apex optimizers (cost/specs.py)
      train_tokens: 15.0e+12         # tokens to train on: every plan then gives the time and
                                     # GPU-hours to train (cost/train_cost.py); default none.
                                     # Write the exponent's sign: YAML reads 15.0e12 as text
      usd_per_gpu_hour:              # needs train_tokens: USD per GPU-hour of each GPU type of
        H100-SXM5-80GB: 2.5          #   the cluster (all of them, none other; mixed clusters
                                     #   too), for the cost to train; default none
    gpu_types:                       # optional; same keys as cost/gpus.yaml, efficiencies optional
      MyGPU: {peak_tflops_bf16: 100, hbm_gib: 48, hbm_gbytes_per_s: 1000}
    search:                          # optional: narrows the planner's space (solver/space.py)
      tp: [1, 2, 4, 8]               # default: powers of two dividing heads, within one node
      pp: [1, 2, 4]                  # default: every divisor of GPUs/(tp*cp) up to the layers
      cp: [1, 2]                     # default: powers of two dividing seq_len and GPUs/tp
      micro_batch: [1, 2]            # default: divisors of the per-replica batch whose memory
                                     #   lower bound fits the GPU (solver/space.py)
      max_micro_batch: 16            # optional caps on top of the defaults; default: no cap
      max_pp: 64
      max_cp: 8
      sequence_parallel: [false, true]
      zero: [0, 1, 2, 3]             # which stages combine with pp > 1: the framework's rule
      virtual_stages: [1, 2, 4]      # default: every v dividing the layers with v*pp <= layers
      recompute: [none, selective]   # mode of the layers not fully recomputed
      full_recompute: true           # search per-stage counts of fully recomputed layers
      uniform_split: false           # true: only the even layer split
      tp_across_nodes: false
      tp_per_group: true             # mixed clusters: a pipeline across node groups may run a
                                     #   tp per group (solver/space.py)
      classes_per_group: 1           # group format: replica classes one node group may host
                                     #   (1 to 4; solver/space.py)
      idle_gpus: false               # group format: a used group may leave GPUs idle
      mixed_families: false          # group format: a pipeline across groups beside replica
                                     #   classes on the GPUs it leaves
      memory_reserve_gib: 2          # kept free on every GPU when planning; default 2, 0 allowed
      objective: p90                 # what the planner minimises: mean (the predicted time) or
                                     #   pNN, its NN-th percentile under the model's out-of-
                                     #   sample error (cost/trust.py; README)

A `search:` value that the instance's shape can never run (cost/space_rules.py: tp=3 with 16
heads, tp beyond a node without tp_across_nodes, pp above the layers, a cp that does not divide
seq_len, a micro_batch dividing no per-replica batch, a memory reserve as large as the GPU) is
refused the same way, naming the value and why. A `search:` value that `job.framework` can never run (cost/framework_rules.py: e.g.
`cp: [2]` under deepspeed, `zero: [3]` with `pp: [2, 4]` under megatron or deepspeed, `zero: [1]`
under torchtitan or composer) is refused with one InstanceError naming the search key and the
framework; combinations the defaults bring in are filtered, not refused. With part files the
check uses the final job, wherever its `search:` came from.

`job.framework_version` names a release of `job.framework` that cost/releases.py lists (each
with its date and what it changed that cost/ prices; an unknown one is refused, naming the known
ones); left out, the job is for the framework's current release. An older release narrows the
declared space to what it ran (cost/framework_rules.release_space: Megatron-LM v1.0 had no
pipeline, nemo-24.07 no Megatron-FSDP): keys not listed take the release's values, and a listed
value it cannot run is refused naming the release. The plan names the release its time is for
(`plan` and `simulate` print it, `plan --json` gives `framework_version`), and its trust band counts a release that
fewer than three published rows ran at its scale as unvalidated (cost/trust.py).

Split files (`load_instance_parts`): a cluster file holds the `cluster:` section and optionally
`gpu_types:`; a job file holds `job:` and optionally `search:`; the model may come from a
Hugging Face config.json instead of `model:` (cost/hf_config.py). Each replaces the matching
section of an instance file, or, with no instance file, the three together make one. Examples:
instances/clusters/ and instances/jobs/.

Links are stored one direction per GPU: the NVLink figure is halved (900 GB/s -> 450e9 bytes/s)
and the NIC figure is only converted (400 Gbit/s -> 50e9 bytes/s).

Plan file, at top level or under a `plan:` key (`paraplan plan -o` also writes the instance it
was made for beside it, under `instance:`, in the instance schema above; see
`plan_file_instance`)::

    tp: 8
    pp: 4
    dp: 2
    cp: 1                            # default 1
    micro_batch: 1                   # sequences per micro-batch
    num_micro_batches: 64            # default global_batch / (dp * micro_batch), must divide
    sequence_parallel: true          # default false
    recompute: selective             # none | selective | full, default none
    zero: 1                          # 0..3, default 0
    virtual_stages: 1                # default 1
    layers_per_stage: [20, 20, 20, 20]   # default: default_layer_split()
    full_recompute_layers: [0, 0, 0, 0]  # default all 0, or layers_per_stage for recompute: full

`recompute: full` becomes `Recompute.NONE` with every layer in `full_recompute_layers` (unless
that list is given); `plan_to_mapping` writes it back the same way.

Typed strictly: a bool or 8.0 is not an integer, "400" is not a number, NaN/inf are refused.
Every number must lie in its documented physical range (cost/ranges.py, one table for every
loader: e.g. nic_gbit_per_s 1 to 10,000, hbm_gib 1 to 10,000, efficiencies 0.01 to 1, latencies
0 to 1,000 us, gpus_per_node 1 to 1,024, layers 1 to 10**6); a value outside it is refused with
one line naming the range, before anything is sized by it. So is a cluster of more than 2**24
GPUs. Unknown keys are errors with a "did you mean" hint.

Limits, each refused with one `InstanceError` before it can cost time or memory: a file over
MAX_FILE_BYTES (16 MiB; 64 MiB for calibration rows) is refused before it is read; a YAML
document nested more than MAX_YAML_DEPTH (100) levels, or holding more than MAX_YAML_NODES
(100,000; 200,000 for calibration rows) nodes once aliases and '<<' merges are expanded
("billion laughs"), while it is parsed; so are cyclic aliases, duplicate keys and integer
literals over 100 digits. Keys must be printable one-line strings, so every message stays on
one line.

Node groups, network events and plans of replica classes: the general form of the flat files
above, which are its one-group, one-class case. The same rules hold. `load_instance` and
`instance_from_mapping` read an instance in either form (is_groups_mapping: the file's
`cluster:` lists `groups:` or `links:`, or it declares scenarios, a timeline or switching
costs); `load_plan` and `plan_from_mapping` a plan in either form (a plan listing `classes:`,
else the flat one); `plan_to_mapping` writes the flat form where the instance is flat and the
plan its one class on every GPU, else the classes.

Instance file with node groups (required unless a default is given)::

    name: llama3-70b-32xA100-32xH100
    model: {...}                     # exactly as in the flat form above
    job: {...}                       # exactly as in the flat form above
    gpu_types: {...}                 # optional, as in the flat form above
    search: {...}                    # optional, the keys of the flat form above's `search:`
    cluster:
      groups:                        # one or more node groups, each homogeneous
        - name: h100                 # unique among the groups
          site: east                 # default: the group's own name
          gpu: H100-SXM5-80GB        # then exactly the homogeneous cluster keys: gpu, nodes,
          nodes: 4                   #   gpus_per_node, intra_node_link, intra_node_gbytes_per_s,
          gpus_per_node: 8           #   intra_node_latency_us, nic_gbit_per_s,
          intra_node_gbytes_per_s: 900   # inter_node_latency_us (same units and defaults)
          nic_gbit_per_s: 400
      links:                         # optional
        - between: [east, west]      # two group or site names
          gbit_per_s: 100            # per GPU, one direction
          latency_us: 2000           # default: the larger inter_node latency of the two groups
    scenarios:                       # optional; the declared network as it is is "nominal"
      - name: inter-site-25pct       # unique, not "nominal"
        probability: 0.2             # optional, in [0, 1]; all scenarios give one or none does
        window_h: [18, 24]           # optional, hours of the day in [0, 24], informational
        changes:                     # non-empty list; syntax under "Changes" below
          - between: [east, west]
            scale: 0.25
    timeline:                        # optional; periods in order
      - scenario: nominal            # "nominal" or a declared scenario's name
        duration_h: 8                # hours, > 0
    switching:                       # optional; defaults as in cost/plan_specs.Switching
      storage_gbytes_per_s: 10       # aggregate checkpoint-storage bandwidth, GB/s
      restart_s: 120                 # seconds to stop and relaunch the job

Names in `between` (links and changes): a group's name means that group; otherwise a site's
name means every group on that site. A site may share its name with a group only when that
group is the site's only one (the default `site:`), so a name never means two different sets.
`between: [x, y]` covers every pair of distinct groups (a, b), a in x and b in y; `[east, east]`
covers the pairs inside site east. A pair covered by no pair at all is an error.

Links between groups (`Cluster.between`, symmetric, per GPU and one direction):

- not given: the slower of the two groups' NICs, and the larger of their inter-node latencies;
- given between sites: applies to every pair of groups across them;
- a more specific link overrides a less specific one: one naming two groups overrides one
  naming a group and a site, which overrides one naming two sites. Two links of the same
  specificity covering the same pair are an error;
- the diagonal repeats each group's own NIC link (`cluster.inter_node`).

Probabilities (`--expected`): either no scenario gives `probability:` (every `Scenario.
probability` is None), or every one does; the nominal scenario then gets 1 minus their sum,
which must not be negative (a sum above 1 is an error).

Changes (scenarios and events), applied to the nominal cluster in two steps:

1. group changes, in order. `group: NAME` or `site: NAME` (every group on the site), then at
   least one of: `nic_gbit_per_s: X` (set) or `nic_scale: f` (multiply), and
   `intra_node_gbytes_per_s: X` (set; bidirectional as vendors quote it, halved as in
   the flat form above) or `intra_scale: f`. The changed NIC also changes the group's diagonal
   entry and every *default* link derived from it (they are rebuilt from the changed NICs);
   links given explicitly under `cluster.links` keep their nominal figures, since they
   describe a path of their own (an inter-site fibre), not the group's NIC. To throttle such
   a link too, add a `between` change.
2. link changes, in order. `between: [x, y]` then at most one of `scale: f` (multiply the
   current bandwidth) or `gbit_per_s: X` (set it), and/or `latency_us: X` (set); at least
   one of the three.
Scales are > 0 (above 1 is an upgrade).

Event file (`paraplan replan --event EVENT.yaml`, `load_event`)::

    event:
      name: inter-site-degraded      # default: the file's stem
      changes: [...]                 # as above, applied to the instance's nominal cluster
      remaining_hours: 200           # exactly one of remaining_hours (> 0) and
      remaining_iterations: 5000     #   remaining_iterations (integer >= 1)

An event sees only the loaded instance, not its file: a link between two groups that differs
from the default derived from their NICs counts as explicitly given (kept under a NIC change);
one given explicitly but equal to that default is rebuilt like a default link.

Plan file of replica classes, at top level or under a `plan:` key::

    tp: 8                            # tensor parallelism, all classes: inside a node or whole nodes
    micro_batch: 1
    sequence_parallel: false         # default false
    recompute: selective             # none | selective | full, default none (full as in
                                     #   the flat form above: every layer fully recomputed)
    zero: 1                          # 0 | 1 | 2 | 3, default 0 (where the framework runs it)
    ep: 1                            # expert parallel degree (MoE models), default 1
    etp: 1                           # expert tensor parallel degree (MoE models), default: tp
    family: stage                    # stage | replica | mixed, default stage
    classes:                         # non-empty list of replica classes
      - replicas: 2
        stages: [h100, h100, a100]   # the group name hosting each pipeline stage
        num_micro_batches: 32        # per replica and iteration
        layers_per_stage: [30, 30, 20]   # default: cost/loader.default_layer_split
        full_recompute_layers: [0, 0, 0] # default all 0, or layers_per_stage for full
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Hashable
from contextlib import contextmanager
from dataclasses import replace
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import yaml

from paraplan.cost import units
from paraplan.cost.dualpipe import schedule_problem
from paraplan.cost.objective import parse_objective
from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.framework_rules import framework_refusal, release_search, unpriced_reason
from paraplan.cost.releases import known_versions
from paraplan.cost.schedule import TorchSchedule
from paraplan.cost.schedule import schedule_problem as torch_schedule_problem
from paraplan.cost.hf_config import model_from_hf_config, read_text_file, shown as _shown
from paraplan.cost.ranges import RANGES, out_of_range, range_fix, range_text
from paraplan.cost.space_rules import search_refusal
from paraplan.cost.specs import (Attention, Cluster, ClusterSpec, Framework, GpuSpec, GradReduceDtype, Instance, JobSpec,
                        Link, Mlp, MlaSpec, ModelSpec, MoeDispatcher, MoeSpec, Optimizer, PipelineSchedule, Precision,
                        OffloadModule, Recompute, RecomputeModule, SearchSpace, ZeroBubble,
                        grad_reduce_refusal)
from paraplan.cost.pipeline_split import megatron_split
from paraplan.cost.plan_specs import NodeGroup, Period, Plan, ReplicaClass, Scenario, Switching

CATALOGUE_PATH = Path(__file__).with_name("gpus.yaml")

# Input limits (module docstring, "Limits"): far beyond any real file, small enough that a
# hostile or mistaken one is refused in well under a second and a few tens of MiB of memory.
MAX_FILE_BYTES = 16 * 2**20  # instances, part files, plans, the GPU catalogue
MAX_CALIBRATION_BYTES = 64 * 2**20  # calibration rows (cost/calibration.py, load_rows)
MAX_YAML_NODES = 100_000  # a large instance has about 150
MAX_CALIBRATION_NODES = 200_000  # the 214 published rows have about 15,000
MAX_YAML_DEPTH = 100  # instances nest 4 levels
_MAX_INT_DIGITS = 100  # longer integers are typos, and Python refuses to print > 4,300 digits

_MAX_INT = 10**9  # integers beyond are typos whatever their range (cost/ranges.py)

_TOP_KEYS = ("name", "model", "cluster", "job", "gpu_types", "search")
_CLUSTER_FILE_KEYS = ("cluster", "gpu_types")
_JOB_FILE_KEYS = ("job", "search")
MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "mlp",
               "tied_embeddings", "dropout", "head_dim", "qkv_bias", "attn_out_bias", "mlp_bias",
               "norm_bias", "norms_per_layer", "parallel_blocks", "position_embeddings",
               "embedding_norm", "sliding_window_tokens", "sliding_window_layers", "unmodelled",
               "moe", "mla", "mtp_layers", "qk_norm", "attention_sinks", "expert_bias")
MOE_KEYS = ("experts", "top_k", "expert_ffn", "shared_ffn", "dense_layers", "capacity_factor",
            "imbalance", "max_nodes_per_token")
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
# ModelSpec fields whose YAML key differs from the field's name
_MODEL_FIELD_KEYS = {"attention_head_dim": "head_dim"}
CLUSTER_KEYS = ("gpu", "nodes", "gpus_per_node", "intra_node_link", "intra_node_gbytes_per_s",
                 "intra_node_latency_us", "nic_gbit_per_s", "inter_node_latency_us",
                 "nvlink_domain_gpus")
JOB_KEYS = ("global_batch", "precision", "optimizer", "attention", "framework", "framework_version",
            "tp_comm_overlap", "cudnn_attention",
            "moe_a2a_overlap", "moe_shared_expert_overlap", "pipeline_schedule", "moe_dispatcher",
            "recompute_early_stop", "grad_reduce_overlap", "recompute_modules", "offload_modules", "activation_fp8_input_store",
            "attention_output_e5m6", "grad_reduce_dtype", "train_tokens", "usd_per_gpu_hour")
_GPU_KEYS = ("peak_tflops_bf16", "peak_tflops_fp8", "hbm_gib", "hbm_gbytes_per_s", "matmul_eff_max",
             "matmul_half_gflops", "memory_eff", "attention_eff", "fp8_matmul_eff_max",
             "cudnn_attention_speedup", "fa2_benchmark_tflops", "cudnn_attention_tflops",
             "host_link_gbytes_per_s")
_PLAN_KEYS = ("tp", "pp", "dp", "cp", "micro_batch", "num_micro_batches", "sequence_parallel",
              "recompute", "zero", "virtual_stages", "layers_per_stage", "full_recompute_layers",
              "partitions", "ep", "etp", "first_stage_layers", "last_stage_layers",
              "embedding_in_split", "loss_in_split", "zero_bubble")
SEARCH_KEYS = ("tp", "pp", "cp", "micro_batch", "max_micro_batch", "max_pp", "max_cp",
                "sequence_parallel", "zero", "virtual_stages", "recompute", "full_recompute",
                "uniform_split", "tp_across_nodes", "tp_per_group", "classes_per_group", "idle_gpus",
                "mixed_families", "memory_reserve_gib", "tensor_partitions", "ep", "etp", "objective")
_LINK_KINDS = ("nvlink", "pcie")
RECOMPUTE_FULL = "full"

_REQUIRED = object()


# --- reading files -------------------------------------------------------------------------

class _DuplicateKeyError(yaml.constructor.ConstructorError):
    pass


class _LimitError(yaml.MarkedYAMLError):
    """The document is deeper, or expands to more nodes, than a planning file ever needs."""

    def __init__(self, problem: str, mark, *, whole_file: bool = False):
        super().__init__(problem=problem, problem_mark=mark)
        self.whole_file = whole_file


class _BoundedComposer(yaml.composer.Composer):
    """PyYAML's composer, refusing documents nested deeper than MAX_YAML_DEPTH or holding more
    than `max_nodes` nodes once aliases are expanded.

    Every alias counts as the whole node it names, which is what a consumer walking the data
    sees: a "billion laughs" file of ten short lines names 10**9 nodes, and '<<' merges copy
    the merged entries for real. Such documents are refused while being composed, before
    they cost memory; an alias inside the node it names (a cycle) is refused too.
    """

    max_nodes = MAX_YAML_NODES

    def __init__(self):
        yaml.composer.Composer.__init__(self)
        self._depth = 0
        self._nodes = 0
        self._nodes_under_anchor: dict[str, int] = {}

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.anchors:  # else the base class reports the undefined alias
                nodes = self._nodes_under_anchor.get(event.anchor)
                if nodes is None:
                    raise _LimitError(f"alias *{event.anchor} is inside the node it refers to"
                                      " (a cycle)", event.start_mark)
                self._count(nodes, event)
            return super().compose_node(parent, index)
        if self._depth >= MAX_YAML_DEPTH:
            raise _LimitError(f"nested more than {MAX_YAML_DEPTH} levels deep",
                              event.start_mark)
        before = self._nodes
        self._count(1, event)
        self._depth += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._nodes_under_anchor[event.anchor] = self._nodes - before
        return node

    def _count(self, nodes: int, event) -> None:
        self._nodes += nodes
        if self._nodes > self.max_nodes:
            raise _LimitError(f"more than {self.max_nodes:,} nodes once aliases are expanded",
                              event.start_mark, whole_file=True)


# libyaml's parser (C) where PyYAML was built with it: the pure-Python one reads ~1 MiB/s.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BoundedComposer, _SAFE_LOADER):
    """A bounded SafeLoader that also refuses duplicate keys (PyYAML silently lets the last
    win) and integers too long to be a size, and reports where a tagged value
    (`!!timestamp 2024-13-45`) cannot be constructed."""

    def __init__(self, stream):
        _SAFE_LOADER.__init__(self, stream)
        _BoundedComposer.__init__(self)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            # PyYAML's scalar constructors fail so on a mistyped explicit tag: `!!int abc`
            value = _shown(node.value) if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {value} as {node.tag.rsplit(':', 1)[-1]}"
                f" ({type(e).__name__})", node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):  # `!!set 0`: the base class says so
            return super().construct_mapping(node, deep)
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue  # '<<' merges may legitimately repeat keys they override
            key = self.construct_object(key_node)
            if not isinstance(key, Hashable):  # `!!set : 1`: the base class reports it
                continue
            if key in seen:
                raise _DuplicateKeyError(None, None, f"duplicate key {_shown(key)}",
                                         key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        if len(node.value) > _MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value):,} digits", node.start_mark)
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


class _CalibrationLoader(_StrictLoader):
    max_nodes = MAX_CALIBRATION_NODES


def read_yaml(path: str | Path, *, calibration: bool = False) -> Any:
    """The data in the YAML file `path`, within the documented limits (module docstring);
    `calibration`: a calibration file, whose limits are larger."""
    name = str(path)
    text = read_text_file(path, MAX_CALIBRATION_BYTES if calibration else MAX_FILE_BYTES)
    loader = _CalibrationLoader if calibration else _StrictLoader
    try:
        data = yaml.load(text, Loader=loader)
    except _DuplicateKeyError as e:
        raise InstanceError(name, _where(e), str(e.problem),
                            "keep only one of the two entries") from None
    except _LimitError as e:
        raise InstanceError(name, "<file>" if e.whole_file else _where(e), e.problem,
                            "give an ordinary planning file; it needs no deep nesting and few"
                            " aliases") from None
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if "nesting depth" in problem:  # newer PyYAML (6.0.4 here) stops a deep
            # document at its own depth limit, 1,000, before the composer's count reaches ours
            raise InstanceError(name, _where(e), f"nested more than {MAX_YAML_DEPTH} levels deep",
                                "give an ordinary planning file; it needs no deep nesting and"
                                " few aliases") from None
        raise InstanceError(name, _where(e), f"malformed YAML: {problem}",
                            "fix the YAML syntax there; indentation, a missing ':' or an unclosed"
                            " quote are the usual causes") from None
    except RecursionError:  # PyYAML flattens chains of '<<' merges recursively; the node
        # limit keeps chains short, this is for a caller that is itself deep in recursion
        raise InstanceError(name, "<file>", "'<<' merges nested too deeply",
                            "merge fewer levels of mappings") from None
    if data is None:
        raise InstanceError(name, "<file>", "file is empty",
                            "write the mapping described in cost/loader.py's docstring")
    return data


def _where(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<file>"


# --- typed access to one mapping -----------------------------------------------------------

def describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    if isinstance(value, int) and abs(value) >= 10**60:
        return _shown(value)  # "an integer of about N digits"
    return f"{type(value).__name__} {_shown(value)}"


def _shown_value(value: Any) -> str:
    """A value for "unknown value ..." messages: a string quoted, anything else described."""
    return _shown(value) if isinstance(value, str) else describe(value)


def _key_text(key: Any) -> str:
    """A mapping key as part of a dotted field: itself when a short printable string."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 60 else _shown(key)


def _looks_numeric(value: str) -> bool:
    """Text that is a finite number in plain ASCII, as a user may have meant it."""
    text = value.strip()
    if not text.isascii() or len(text) > 40:
        return False
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


# YAML 1.1, which PyYAML follows, reads an exponent only with a '.' in the mantissa and a sign
# in the exponent: 6.0e+2 is a number, 6e2 and 6.0e2 are text.
_YAML_EXPONENT_FLOAT = re.compile(r"[-+]?([0-9][0-9_]*)?\.[0-9_]*[eE][-+][0-9]+")


class Section:
    """One YAML mapping being read; knows its file and dotted prefix so errors can name both.

    `allowed`: the keys it may hold, or None for any (printable) key. Also reads calibration
    rows (cost/calibration.py, load_rows).
    """

    def __init__(self, raw: Any, path: str, prefix: str, allowed: tuple[str, ...] | None):
        self.path, self.prefix = path, prefix
        if not isinstance(raw, dict):
            raise InstanceError(path, prefix or "<top level>",
                                f"expected a mapping, got {describe(raw)}",
                                "write indented 'key: value' lines there")
        for key in raw:
            if not isinstance(key, str) or not key or not key.isprintable():
                raise InstanceError(path, self.field(_key_text(key)),
                                    f"key {_shown(key)} is not a name",
                                    "use a non-empty string on one line, without control"
                                    " characters, as the key")
            if allowed is not None and key not in allowed:
                raise InstanceError(path, self.field(_key_text(key)),
                                    f"unknown key {_shown(key)}", did_you_mean(key, allowed)
                                    or "remove it; allowed keys are " + ", ".join(allowed))
        self.raw = raw

    def field(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, problem: str, fix: str) -> InstanceError:
        return InstanceError(self.path, self.field(key), problem, fix)

    def has(self, key: str) -> bool:
        return key in self.raw

    def has_value(self, key: str) -> bool:
        """The key is present and not null."""
        return self.raw.get(key) is not None

    def _get(self, key: str, default: Any, what: str) -> Any:
        if key not in self.raw:
            if default is _REQUIRED:
                where = f" under '{self.prefix}'" if self.prefix else ""
                raise self.error(key, f"missing required key '{key}'",
                                 f"add '{key}: <{what}>'{where}")
            return default
        return self.raw[key]

    def section(self, key: str, allowed: tuple[str, ...] | None) -> Section:
        return Section(self._get(key, _REQUIRED, "mapping"), self.path, self.field(key), allowed)

    def integer(self, key: str, default: Any = _REQUIRED) -> int:
        """The integer under `key`, within its physical range (cost/ranges.py)."""
        value = self._get(key, default, "integer")
        return value if value is default else check_int(value, self.path, self.field(key), key)

    def number(self, key: str, default: Any = _REQUIRED) -> float:
        """The finite number under `key`, within its physical range (cost/ranges.py)."""
        value = self._get(key, default, "number")
        if value is default:
            return value
        return check_number(value, self.path, self.field(key), key)

    def string(self, key: str, default: Any = _REQUIRED) -> str:
        value = self._get(key, default, "string")
        if value is default:
            return value
        if not isinstance(value, str) or not value.strip() or not value.isprintable():
            raise self.error(key, f"expected a non-empty string, got {describe(value)}",
                             "write a name on one line, without control characters (quote it"
                             " if YAML reads it as a number)")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, default, "true|false")
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {describe(value)}",
                             "write true or false")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: Any = _REQUIRED) -> str:
        value = self._get(key, default, " | ".join(allowed))
        if not isinstance(value, str) or value not in allowed:
            raise self.error(key, f"unknown value {_shown_value(value)}",
                             "use one of: " + ", ".join(allowed))
        return value

    def list_of(self, key: str, check, what: str) -> tuple:
        """A non-empty list under `key`, each item passed through check(value, field)."""
        value = self.raw[key]
        if not isinstance(value, list) or not value:
            raise self.error(key, f"expected a non-empty list of {what}, got {describe(value)}",
                             "write a list like [1, 2, 4]")
        if len(value) > 4096:
            raise self.error(key, f"has {len(value)} entries", "list at most 4096 values")
        return tuple(check(v, f"{self.field(key)}[{i}]") for i, v in enumerate(value))

    def int_list(self, key: str, length: int) -> tuple[int, ...] | None:
        """The list under `key`, or None when the key is absent."""
        if key not in self.raw:
            return None
        value = self.raw[key]
        if not isinstance(value, list):
            raise self.error(key, f"expected a list of integers, got {describe(value)}",
                             f"write a list like [{', '.join(['1'] * min(length, 4))}]")
        if len(value) != length:
            raise self.error(key, f"has {len(value)} entries but pp = {length}",
                             "give one entry per pipeline stage")
        return tuple(check_int(v, self.path, f"{self.field(key)}[{i}]", key)
                     for i, v in enumerate(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_fix(value: Any, *, integer: bool = False, hi: float = _MAX_INT) -> str:
    """How to write `value` as a number; `hi`: its range's upper bound, past which (and past
    _MAX_INT) a number read from text is called a typo (job.train_tokens reaches 10**16)."""
    if isinstance(value, bool):
        return "write a number, not true/false"
    if isinstance(value, str) and _looks_numeric(value):
        text = value.strip()
        if "e" in text.lower() and not _YAML_EXPONENT_FLOAT.fullmatch(text):
            number = float(text)
            if abs(number) > max(hi, _MAX_INT):
                return (f"YAML reads {text} as text, and as a number it would be absurdly"
                        " large: check for a typo or the unit")
            if integer:
                return f"YAML reads {text} as text; write {number:.0f}"
            mantissa, exponent = re.split("[eE]", text.lower())
            mantissa += "" if "." in mantissa else ".0"
            exponent = exponent if exponent[0] in "+-" else "+" + exponent
            return f"YAML reads {text} as text; write {mantissa}e{exponent}"
        return "remove the quotes"
    return "write a whole number" if integer else "write a plain number"


def check_int(value: Any, path: str, field: str, quantity: str) -> int:
    """`value` as an integer of `quantity`, within its range (cost/ranges.py)."""
    hi = RANGES[quantity].hi
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value > max(hi, _MAX_INT):
            raise InstanceError(path, field, f"{value:g} is absurdly large (more than {hi:,})",
                                "check for a typo: extra digits, or a size where a count belongs")
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            fix = f"write {int(value)} without the decimal point"
        else:
            fix = _number_fix(value, integer=True)
        raise InstanceError(path, field, f"expected an integer, got {describe(value)}", fix)
    if value > _MAX_INT:  # a typo guard, before the range: the value may be hundreds of digits
        raise InstanceError(path, field, f"{_shown(value)} is absurdly large (more than"
                            f" {hi:,}; {range_text(quantity)})",
                            "check for a typo: extra digits, or a size where a count belongs")
    problem = out_of_range(quantity, value)
    if problem is not None:
        raise InstanceError(path, field, problem, range_fix(quantity))
    return value


def check_number(value: Any, path: str, field: str, quantity: str) -> float:
    """`value` as a finite number of `quantity`, within its range (cost/ranges.py)."""
    if not _is_number(value):
        raise InstanceError(path, field, f"expected a number, got {describe(value)}",
                            _number_fix(value, hi=RANGES[quantity].hi))
    if not math.isfinite(value):
        raise InstanceError(path, field, f"{value} is not a finite number", "give a finite value")
    if isinstance(value, int) and abs(value) > 10**60:
        value = math.copysign(math.inf, value)  # compared, never printed in full
    problem = out_of_range(quantity, value)
    if problem is not None:
        raise InstanceError(path, field, problem, range_fix(quantity))
    return float(value)


def did_you_mean(name: str, known) -> str:
    """"did you mean 'X'?" for the known name closest to `name`, else "" (a name of 100 or more
    characters is not compared: difflib's matching is quadratic). difflib is imported here: only
    a mistyped name reads it (issue 33, start-up)."""
    import difflib
    close = difflib.get_close_matches(name, list(known), n=1) if len(name) < 100 else []
    return f"did you mean '{close[0]}'?" if close else ""


def enum_values(enum: type[Enum]) -> tuple[str, ...]:
    return tuple(member.value for member in enum)


@contextmanager
def config_errors_as(path: str, field: str, fix: str) -> Iterator[None]:
    """Re-raise the records' own ConfigError as a file-level InstanceError."""
    try:
        yield
    except ConfigError as e:
        raise InstanceError(path, field, str(e), fix) from None


# --- GPU catalogue -------------------------------------------------------------------------

def _cudnn_curve(sec: Section) -> tuple[tuple[int, float], ...]:
    """`cudnn_attention_tflops`: a mapping of call length in keys to cuDNN's measured forward +
    backward TFLOP/s there (GpuSpec.cudnn_attention_flops_per_s_by_keys), as (keys, FLOP/s) in
    increasing keys."""
    key = "cudnn_attention_tflops"
    raw = sec.raw[key]
    if not isinstance(raw, dict) or not raw:
        raise sec.error(key, f"expected a mapping of key lengths to TFLOP/s, got {describe(raw)}",
                        "write it like {4096: 739, 8192: 998}")
    field = sec.field(key)
    points = sorted((check_int(k, sec.path, f"{field}.{_key_text(k)}", "seq_len"),
                     units.tflops_to_flops_per_s(check_number(v, sec.path, f"{field}.{_key_text(k)}",
                                                              key)))
                    for k, v in raw.items())
    return tuple(points)


def gpu_from_mapping(name: str, mapping: Any, path: str, field_prefix: str) -> GpuSpec:
    """One GPU type from its YAML mapping (catalogue entry or user `gpu_types` entry)."""
    sec = Section(mapping, str(path), field_prefix, _GPU_KEYS)
    optional = {}  # absent efficiency keys fall back to GpuSpec's defaults
    if sec.has("matmul_eff_max"):
        optional["matmul_eff_max"] = sec.number("matmul_eff_max")
    if sec.has("matmul_half_gflops"):
        half_gflops = sec.number("matmul_half_gflops")
        optional["matmul_half_flops"] = units.gflop_to_flops(half_gflops)
    if sec.has("memory_eff"):
        optional["memory_eff"] = sec.number("memory_eff")
    if sec.has("attention_eff"):
        optional["attention_eff"] = sec.number("attention_eff")
    if sec.has("fp8_matmul_eff_max"):
        optional["fp8_matmul_eff_max"] = sec.number("fp8_matmul_eff_max")
    if sec.has("cudnn_attention_speedup"):
        optional["cudnn_attention_speedup"] = sec.number("cudnn_attention_speedup")
    if sec.has("fa2_benchmark_tflops"):
        optional["fa2_benchmark_flops_per_s"] = units.tflops_to_flops_per_s(sec.number("fa2_benchmark_tflops"))
    if sec.has("host_link_gbytes_per_s"):
        optional["host_link_bw_bytes_per_s"] = units.gbytes_per_s_to_bytes_per_s(
            sec.number("host_link_gbytes_per_s"))
    if sec.has("cudnn_attention_tflops"):
        optional["cudnn_attention_flops_per_s_by_keys"] = _cudnn_curve(sec)
    if sec.has("peak_tflops_fp8"):
        optional["peak_fp8_flops_per_s"] = units.tflops_to_flops_per_s(sec.number("peak_tflops_fp8"))
    with config_errors_as(str(path), field_prefix, "correct the GPU's numbers"):
        return GpuSpec(
            name=name,
            peak_flops_per_s=units.tflops_to_flops_per_s(sec.number("peak_tflops_bf16")),
            hbm_bytes=units.gib_to_bytes(sec.number("hbm_gib")),
            hbm_bw_bytes_per_s=units.gbytes_per_s_to_bytes_per_s(sec.number("hbm_gbytes_per_s")),
            **optional,
        )


def _gpu_types(raw: Any, path: str, prefix: str) -> dict[str, GpuSpec]:
    sec = Section(raw, path, prefix, None)
    return {name: gpu_from_mapping(name, spec, path, sec.field(name))
            for name, spec in sec.raw.items()}


def load_catalogue(path: str | Path | None = None) -> dict[str, GpuSpec]:
    """GPU types by name, from `path` or the bundled cost/gpus.yaml: a new dict on every call
    (callers add their own types to it), of records read once per process while the file's
    modification time and size stay (`paraplan plan` asked for the catalogue four times:
    loading the instance, cost/fit's attention fractions, the trust band's MFU records and
    memory fractions; issue 33)."""
    path = CATALOGUE_PATH if path is None else path
    try:
        st = os.stat(path)
    except OSError:  # read_yaml names the file and the problem
        return _gpu_types(read_yaml(path), str(path), "")
    return dict(_catalogue(str(path), st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=16)
def _catalogue(path: str, mtime_ns: int, size: int) -> dict[str, GpuSpec]:
    """load_catalogue's records of `path` as it was at (mtime_ns, size), the cache's key;
    shared, so never handed out itself."""
    return _gpu_types(read_yaml(path), path, "")


# --- instances -----------------------------------------------------------------------------

def load_instance(path: str | Path) -> Instance:
    """The instance file at `path`, read once, in either form: a flat `cluster:` as its one
    node group (cost/specs.Cluster.of), a `cluster:` with `groups:` as the groups it lists."""
    return load_instance_parts(path, hf_config=None, cluster=None, job=None)


def check_mla_job(source: str, job: JobSpec, model: ModelSpec) -> None:
    """Latent attention is priced as Megatron-core's MLASelfAttention runs it (cost/flops.py):
    another framework's layout (torchtitan's DeepSeek-V3 model, say) is refused, not priced as
    Megatron's."""
    if model.mla is not None and job.framework is not Framework.MEGATRON:
        raise InstanceError(source, "job.framework",
                            f"{model.name} has multi-head latent attention (model.mla), which"
                            f" paraplan prices as Megatron-core runs it, not {job.framework.value}",
                            "set job.framework: megatron")


def check_gpu_features(source: str, job: JobSpec, gpus: tuple[GpuSpec, ...]) -> None:
    """What the job needs of every GPU type it may run on, refused here, once, rather than when
    the first configuration is priced, where every command would meet it differently: FP8
    linears run on FP8 tensor cores (cost/coefficients.fp8_matmul_time_s; V100 and A100 have no
    peak_tflops_fp8), and offloaded activations (job.offload_modules) cross the GPU's link to
    its host (cost/moe.offload_exposed_s), which the catalogue must give."""
    for gpu in gpus:
        if job.precision is Precision.FP8 and gpu.peak_fp8_flops_per_s is None:
            raise InstanceError(source, "job.precision",
                                f"fp8 needs FP8 tensor cores, and the {gpu.name} has none (its"
                                " catalogue entry gives no peak_tflops_fp8)",
                                "use precision: bf16, or a GPU with FP8 tensor cores (H100, H200,"
                                " B200, ...)")
        if job.offload_modules and gpu.host_link_bw_bytes_per_s is None:
            raise InstanceError(source, "job.offload_modules",
                                f"offloaded activations cross the GPU's link to its host, and the"
                                f" catalogue entry of the {gpu.name} gives none",
                                "add host_link_gbytes_per_s to the GPU's entry (gpu_types), or"
                                " remove offload_modules")


def check_moe_overlaps(source: str, job: JobSpec, model: ModelSpec, search: SearchSpace) -> None:
    """job.moe_a2a_overlap and job.moe_shared_expert_overlap need experts to move;
    --overlap-moe-expert-parallel-comm also needs no full recomputation and the shared-expert
    overlap a shared expert (Megatron-core's TransformerConfig checks)."""
    for key, on in (("moe_a2a_overlap", job.moe_a2a_overlap),
                    ("moe_shared_expert_overlap", job.moe_shared_expert_overlap)):
        if on and model.moe is None:
            raise InstanceError(source, f"job.{key}",
                                f"{model.name} is dense: there is no expert all-to-all to overlap",
                                f"remove {key}, or give the model a moe: section")
    if job.moe_a2a_overlap and search.full_recompute:
        raise InstanceError(source, "job.moe_a2a_overlap",
                            "Megatron-core refuses full recomputation with"
                            " --overlap-moe-expert-parallel-comm, and the search space allows it",
                            "add search: full_recompute: false, or remove moe_a2a_overlap")
    if job.moe_dispatcher is not MoeDispatcher.ALLTOALL and model.moe is None:
        raise InstanceError(source, "job.moe_dispatcher",
                            f"{model.name} is dense: there are no tokens to dispatch to experts",
                            "remove moe_dispatcher, or give the model a moe: section")
    if job.moe_shared_expert_overlap and not model.moe.shared_ffn:
        raise InstanceError(source, "job.moe_shared_expert_overlap",
                            f"{model.name} has no shared expert (model.moe.shared_ffn) to run"
                            " under the all-to-alls", "remove moe_shared_expert_overlap")


def check_job_options(source: str, job: JobSpec, model: ModelSpec, search: SearchSpace) -> None:
    """The job's recompute and activation-storage options against the model and the search
    space, as Megatron-core's TransformerConfig checks them (Megatron-LM d98e8a6): mla_up_proj
    needs latent attention, moe_act an MoE model, the fp8 activation input a SwiGLU MLP; and
    --recompute-granularity takes one value, so recompute_modules (selective) excludes full
    recomputation of any layer."""
    need = {RecomputeModule.MLA_UP_PROJ: (model.mla is not None, "has no latent attention (model.mla)"),
            RecomputeModule.MOE_ACT: (model.moe is not None, "has no routed experts (model.moe)"),
            RecomputeModule.MOE: (model.moe is not None, "has no routed experts (model.moe)")}
    for mod in job.recompute_modules:
        ok, why = need.get(mod, (True, ""))
        if not ok:
            raise InstanceError(source, "job.recompute_modules", f"{mod.value}: {model.name} {why}",
                                f"remove {mod.value} from recompute_modules")
    if job.offload_modules and model.moe is None:
        raise InstanceError(source, "job.offload_modules", f"{model.name} has no routed experts"
                            " (model.moe) whose inputs these offload", "remove offload_modules")
    if job.recompute_modules and search.full_recompute:
        raise InstanceError(source, "job.recompute_modules",
                            "Megatron-LM's --recompute-granularity is selective (these modules) or"
                            " full (whole layers), and the search space allows full recomputation",
                            "add search: full_recompute: false, or remove recompute_modules")
    storage = [k for k, on in (("recompute_modules", bool(job.recompute_modules)),
                               ("activation_fp8_input_store", job.activation_fp8_input_store),
                               ("attention_output_e5m6", job.attention_output_e5m6)) if on]
    if storage and "spatial_temporal" in search.tensor_partitions:
        raise InstanceError(source, f"job.{storage[0]}",
                            "per-operator tensor partitions price each linear's stash themselves"
                            " (cost/partition.py) and do not apply this option",
                            f"remove {storage[0]}, or search tensor_partitions: [megatron]")
    if job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        # the DualPipe split problem (formulations/dualpipe.py) prices Megatron 1-D layers and
        # searches the split itself: neither baseline nor per-operator layer plans apply
        for key, on, fix in (("uniform_split", search.uniform_split, "uniform_split: false"),
                             ("tensor_partitions", "spatial_temporal" in search.tensor_partitions,
                              "tensor_partitions: [megatron]")):
            if on:
                raise InstanceError(source, f"search.{key}", "is not offered with job.pipeline_schedule"
                                    " dualpipe (the DualPipe split problem, formulations/dualpipe.py,"
                                    " searches Megatron 1-D layer splits)", f"set search {fix}, or use"
                                    " pipeline_schedule: 1f1b")
        problem = schedule_problem(2, 1, job.global_batch)
        if problem is not None:  # not even the shortest pipeline runs: no plan can
            raise InstanceError(source, "job.global_batch", f"{job.global_batch}: {problem} (dp ="
                                " micro_batch = 1: the most micro-batches it gives)",
                                "give an even global batch of at least 4, or use"
                                " pipeline_schedule: 1f1b")
    if job.activation_fp8_input_store and model.mlp is not Mlp.SWIGLU:
        raise InstanceError(source, "job.activation_fp8_input_store",
                            f"Megatron-core stores the activation input in fp8 only for SwiGLU, and"
                            f" {model.name}'s MLP is {model.mlp.value}",
                            "remove activation_fp8_input_store")


def _no_groups(data: Any, path: str) -> Any:
    """Node groups beside part files (or in a cluster part file) would fail on their first
    unknown key; say what they are and where they can go instead."""
    if is_groups_mapping(data):
        raise InstanceError(path, "cluster.groups",
                            "node groups (several GPU types or sites) are not supported beside part files",
                            "pass the instance file of node groups alone (no --cluster/--job/"
                            "--hf-config parts); a cluster part file takes one GPU type")
    return data


def _check_part_arguments(instance, hf_config, cluster, job, seq_len) -> None:
    """load_instance_parts' arguments: without an instance file every part is given; a
    sequence length is an integer in its range."""
    if instance is None:
        absent = [key for key, value in (("hf_config", hf_config), ("cluster", cluster),
                                         ("job", job)) if value is None]
        if absent:
            raise InstanceError("<arguments>", ", ".join(absent),
                                "no instance file, and the parts are incomplete",
                                "give an instance YAML, or all of a Hugging Face config, a"
                                " cluster file and a job file")
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int)
                                or out_of_range("seq_len", seq_len) is not None):
        raise InstanceError("<arguments>", "seq_len",
                            f"expected an integer, got {describe(seq_len)} ({range_text('seq_len')})",
                            "give the training sequence length in tokens")


def load_instance_parts(instance: str | Path | None, *, hf_config: str | Path | None,
                        cluster: str | Path | None, job: str | Path | None,
                        seq_len: int | None = None) -> Instance:
    """An instance assembled from an instance file and/or separate part files.

    - `instance`: an instance YAML (module docstring). Its `model:`, `cluster:` and `job:`
      sections may be left out when the matching part below is given.
    - `hf_config`: a Hugging Face config.json (or its directory): replaces `model:`
      (cost/hf_config.py).
    - `cluster`: a cluster YAML with `cluster:` and optionally `gpu_types:`; it is
      self-contained, so its GPU is looked up in the catalogue plus its own `gpu_types:` only.
    - `job`: a job YAML with `job:` and optionally `search:`; a `search:` there replaces the
      instance file's, otherwise the instance file's (or the default space) is kept.
    - `seq_len`: replaces the model's sequence length, wherever the model comes from.

    An instance file of node groups (`cluster:` with `groups:`) is read alone, as the groups it
    lists; beside part files it is refused, naming what to do instead.

    Without `instance`, all three parts are required and the instance is named
    `<model>-<GPUs>x<GPU type>`. Every file is checked in full, sections that a part replaces
    included, and every error names the file it comes from.
    """
    _check_part_arguments(instance, hf_config, cluster, job, seq_len)
    name = model_spec = cluster_spec = job_spec = None
    search_sec: Section | None = None  # parsed once the job (and its framework) is known
    sources = []
    if instance is not None:
        path = str(instance)
        sources.append(path)
        data = read_yaml(path)
        if is_groups_mapping(data) and hf_config is cluster is job is seq_len is None:
            return instance_from_mapping(data, path, prefix="")
        top = Section(_no_groups(data, path), path, "", _TOP_KEYS)
        name = top.string("name")
        gpus = catalogue_with_gpu_types(top)
        if top.has("search"):
            search_sec = top.section("search", SEARCH_KEYS)
            search_from_section(search_sec)  # check its own values now, in file order
        if top.has("model") or hf_config is None:
            model_spec = model_from_section(top.section("model", MODEL_KEYS), name)
        if top.has("cluster") or cluster is None:
            cluster_spec = cluster_from_section(top.section("cluster", CLUSTER_KEYS), gpus)
        if top.has("job") or job is None:
            job_spec = job_from_section(top.section("job", JOB_KEYS))
    if hf_config is not None:
        sources.append(str(hf_config))
        model_spec = model_from_hf_config(hf_config, seq_len)
    elif seq_len is not None:
        model_spec = replace(model_spec, seq_len=seq_len)
    if cluster is not None:
        path = str(cluster)
        sources.append(path)
        top = Section(_no_groups(read_yaml(path), path), path, "", _CLUSTER_FILE_KEYS)
        cluster_spec = cluster_from_section(top.section("cluster", CLUSTER_KEYS),
                                catalogue_with_gpu_types(top))
    if job is not None:
        path = str(job)
        sources.append(path)
        top = Section(read_yaml(path), path, "", _JOB_FILE_KEYS)
        job_spec = job_from_section(top.section("job", JOB_KEYS))
        if top.has("search"):
            search_sec = top.section("search", SEARCH_KEYS)
    assert model_spec and cluster_spec and job_spec  # each comes from a part or the instance
    source = " + ".join(sources)
    _check_moe_framework(source, job_spec, model_spec)
    search = SearchSpace() if search_sec is None else search_from_section(search_sec, job_spec.framework)
    search = release_search_of(source, search, job_spec,
                               frozenset(search_sec.raw) if search_sec is not None else frozenset())
    if name is None:
        name = f"{model_spec.name}-{cluster_spec.num_gpus}x{cluster_spec.gpu.name}"
    return _checked(Instance(name=name, model=model_spec, cluster=Cluster.of(cluster_spec), job=job_spec,
                             search=search, source=source), search_sec)


def _check_moe_framework(source: str, job: JobSpec, model: ModelSpec) -> None:
    """MoE layers are priced as Megatron-core runs them (cost/moe.py): another framework's is
    refused, not priced as Megatron's."""
    if model.moe is not None and job.framework is not Framework.MEGATRON:
        raise InstanceError(source, "job.framework",
                            f"{model.name} is a mixture-of-experts model, and paraplan prices"
                            f" MoE layers as Megatron-core runs them, not {job.framework.value}",
                            "set job.framework: megatron")


def _checked(inst: Instance, search_sec: Section | None) -> Instance:
    """`inst` after the checks every instance reader makes of the whole: latent attention's
    framework, what the job needs of every GPU type and its options against the model and the
    space, and the values listed in `search_sec` (None: none) that no plan can run
    (cost/space_rules.search_refusal), named in that section's file."""
    source, job, model, search = inst.source, inst.job, inst.model, inst.search
    check_mla_job(source, job, model)
    gpus = tuple(g.cluster.gpu for g in inst.cluster.groups)
    check_gpu_features(source, job, gpus)
    check_gpu_prices(source, job, gpus)
    check_moe_overlaps(source, job, model, search)
    check_job_options(source, job, model, search)
    if search_sec is not None:
        refusal = search_refusal(search, model, inst.cluster, job, frozenset(search_sec.raw))
        if refusal is not None:
            raise search_sec.error(refusal.key, refusal.problem, refusal.fix)
    return inst


def catalogue_with_gpu_types(top: Section) -> dict[str, GpuSpec]:
    """The bundled catalogue plus the file's own `gpu_types:`, which may not shadow it."""
    gpus = load_catalogue()
    if top.has("gpu_types"):
        user = _gpu_types(top.raw["gpu_types"], top.path, "gpu_types")
        clashes = sorted(user.keys() & gpus.keys())
        if clashes:
            raise InstanceError(top.path, f"gpu_types.{clashes[0]}",
                                "name clashes with the bundled catalogue",
                                f"rename it, e.g. to '{clashes[0]}-custom', or drop it to use"
                                " the catalogue entry")
        gpus.update(user)
    return gpus


def search_from_section(sec: Section, framework: Framework | None = None) -> SearchSpace:
    """The planner's declared space; absent keys keep SearchSpace's documented defaults. With
    `framework`, a listed value that framework can never run is refused (module docstring)."""
    kw: dict[str, Any] = {}
    for key in ("tp", "pp", "cp", "micro_batch", "virtual_stages", "zero", "ep", "etp"):
        if sec.has(key):
            kw[key] = sec.list_of(key, lambda v, f, key=key: check_int(v, sec.path, f, key),
                                  "integers")
    if sec.has("sequence_parallel"):
        kw["sequence_parallel"] = sec.list_of("sequence_parallel", _check_bool(sec), "true/false values")
    if sec.has("recompute"):
        allowed = enum_values(Recompute)
        kw["recompute"] = tuple(Recompute(v) for v in sec.list_of(
            "recompute", _check_choice(sec, allowed), " | ".join(allowed)))
    for key in ("max_micro_batch", "max_pp", "max_cp", "classes_per_group"):
        if sec.has(key):
            kw[key] = sec.integer(key)
    for key in ("full_recompute", "uniform_split", "tp_across_nodes", "tp_per_group", "idle_gpus",
                "mixed_families"):
        if sec.has(key):
            kw[key] = sec.boolean(key, False)
    if sec.has("memory_reserve_gib"):
        kw["memory_reserve_bytes"] = units.gib_to_bytes(
            sec.number("memory_reserve_gib"))
    if sec.has("objective"):
        kw["objective"] = sec.string("objective")
        try:
            parse_objective(kw["objective"])
        except ValueError:
            raise sec.error("objective", f"{kw['objective']!r} is not an objective",
                            "write mean (the predicted time) or pNN with NN in 1..99, e.g. p90") from None
    if sec.has("tensor_partitions"):
        allowed = ("megatron", "spatial_temporal")
        kw["tensor_partitions"] = sec.list_of("tensor_partitions", _check_choice(sec, allowed),
                                              " | ".join(allowed))
    with config_errors_as(sec.path, sec.prefix, "narrow the search space to valid values"):
        space = SearchSpace(**kw)
    if framework is not None:
        refusal = framework_refusal(space, framework, frozenset(kw))
        if refusal is not None:
            raise sec.error(refusal.key, f"{refusal.problem} (job.framework: {framework.value})",
                            refusal.fix)
    return space


def _check_bool(sec: Section):
    def check(value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            raise InstanceError(sec.path, field, f"expected true or false, got {describe(value)}",
                                "write true or false")
        return value
    return check


def _check_choice(sec: Section, allowed: tuple[str, ...]):
    def check(value: Any, field: str) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise InstanceError(sec.path, field, f"unknown value {_shown_value(value)}",
                                "use one of: " + ", ".join(allowed))
        return value
    return check


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


def cluster_from_section(sec: Section, gpus: dict[str, GpuSpec]) -> ClusterSpec:
    gpu_name = sec.string("gpu")
    if gpu_name not in gpus:
        hint = did_you_mean(gpu_name, gpus)
        raise sec.error("gpu", f"unknown GPU type {_shown(gpu_name)}",
                        f"{hint + ' ' if hint else ''}known types: {', '.join(sorted(gpus))};"
                        " or define it under gpu_types")
    # Vendors quote NVLink as the sum of both directions; a transfer sees one direction.
    intra_gbytes_per_s = sec.number("intra_node_gbytes_per_s")
    intra_bw_bytes_per_s = units.gbytes_per_s_to_bytes_per_s(intra_gbytes_per_s) / 2
    nodes, gpus_per_node = sec.integer("nodes"), sec.integer("gpus_per_node")
    problem = out_of_range("num_gpus", nodes * gpus_per_node)
    if problem is not None:
        raise sec.error("nodes", f"nodes x gpus_per_node = {nodes * gpus_per_node:,} GPUs: {problem}",
                        "check nodes and gpus_per_node")
    domain = sec.integer("nvlink_domain_gpus", None)
    if domain is not None and (domain % gpus_per_node or (nodes * gpus_per_node) % domain):
        raise sec.error("nvlink_domain_gpus", f"{domain} GPUs per NVLink domain is not a whole"
                        f" number of {gpus_per_node}-GPU nodes dividing the cluster's"
                        f" {nodes * gpus_per_node} GPUs",
                        "give a multiple of gpus_per_node that divides nodes x gpus_per_node"
                        " (GB200 NVL72: gpus_per_node 4, nvlink_domain_gpus 72), or leave it out"
                        " when NVLink ends at the node")
    with config_errors_as(sec.path, sec.prefix, "correct the cluster description"):
        return ClusterSpec(
            gpu=gpus[gpu_name],
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            intra_node=Link(
                bw_bytes_per_s=intra_bw_bytes_per_s,
                latency_s=units.us_to_s(sec.number("intra_node_latency_us", 5.0)),
            ),
            inter_node=Link(
                bw_bytes_per_s=units.gbit_per_s_to_bytes_per_s(sec.number("nic_gbit_per_s")),
                latency_s=units.us_to_s(sec.number("inter_node_latency_us", 10.0)),
            ),
            intra_node_kind=sec.choice("intra_node_link", _LINK_KINDS, "nvlink"),
            nvlink_domain_gpus=domain,
        )


def _module_list(sec: Section, key: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A job's list of Megatron-core module names (recompute_modules, offload_modules), each
    known and listed once."""
    if not sec.has(key):
        return ()

    def module(value: Any, field: str) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise InstanceError(sec.path, field, f"unknown module {_shown_value(value)}",
                                "use some of: " + ", ".join(allowed))
        return value
    modules = sec.list_of(key, module, "modules (" + ", ".join(allowed) + ")")
    if len(set(modules)) != len(modules):
        raise sec.error(key, "lists a module twice", "list each module once")
    return tuple(modules)


def job_from_section(sec: Section) -> JobSpec:
    framework = sec.choice("framework", enum_values(Framework), Framework.MEGATRON.value)
    for key, flag in (("moe_a2a_overlap", "--overlap-moe-expert-parallel-comm"),
                      ("moe_shared_expert_overlap", "--moe-shared-expert-overlap")):
        if sec.boolean(key, False) and framework != Framework.MEGATRON.value:
            raise sec.error(key, f"is Megatron-core's {flag}, which framework {framework} does"
                            " not run", f"remove {key}, or set framework: megatron")
    if sec.boolean("moe_a2a_overlap", False) and sec.boolean("moe_shared_expert_overlap", False):
        raise sec.error("moe_shared_expert_overlap", "Megatron-core refuses it beside"
                        " --overlap-moe-expert-parallel-comm (moe_a2a_overlap)", "keep one of the two")
    if framework != Framework.MEGATRON.value:
        if sec.has_value("optimizer") and sec.choice("optimizer", enum_values(Optimizer)) != Optimizer.ADAM.value:
            raise sec.error("optimizer", f"{sec.raw['optimizer']} runs only with framework megatron,"
                            f" not {framework}", "use optimizer: adam, or set framework: megatron")
        for key, on in (("recompute_modules", sec.has("recompute_modules")),
                        ("offload_modules", sec.has("offload_modules")),
                        ("activation_fp8_input_store", sec.boolean("activation_fp8_input_store", False))):
            if on:
                raise sec.error(key, f"is a Megatron-core option, which framework {framework} does"
                                " not run", f"remove {key}, or set framework: megatron")
    schedule = sec.choice("pipeline_schedule", enum_values(PipelineSchedule),
                          PipelineSchedule.ONE_F_ONE_B.value)
    if schedule == PipelineSchedule.DUALPIPE.value:
        for key in ("moe_a2a_overlap", "moe_shared_expert_overlap"):
            if sec.boolean(key, False):
                raise sec.error(key, "DualPipe overlaps every all-to-all with the paired"
                                " forward/backward chunk's compute itself (cost/dualpipe.py)",
                                f"remove {key}, or use pipeline_schedule: 1f1b")
    modules = _module_list(sec, "recompute_modules", enum_values(RecomputeModule))
    offloads = _module_list(sec, "offload_modules", enum_values(OffloadModule))
    train_tokens = sec.number("train_tokens") if sec.has_value("train_tokens") else None
    grad_reduce = _grad_reduce_dtype(sec, Framework(framework), _framework_version(sec, Framework(framework)))
    with config_errors_as(sec.path, sec.prefix, "correct the job description"):
        return JobSpec(
            global_batch=sec.integer("global_batch"),
            precision=Precision(sec.choice("precision", enum_values(Precision), Precision.BF16.value)),
            optimizer=Optimizer(sec.choice("optimizer", enum_values(Optimizer), Optimizer.ADAM.value)),
            attention=Attention(sec.choice("attention", enum_values(Attention), Attention.FLASH.value)),
            framework=Framework(framework),
            framework_version=_framework_version(sec, Framework(framework)),
            tp_comm_overlap=sec.boolean("tp_comm_overlap", False),
            cudnn_attention=sec.boolean("cudnn_attention", True),
            moe_a2a_overlap=sec.boolean("moe_a2a_overlap", False),
            moe_shared_expert_overlap=sec.boolean("moe_shared_expert_overlap", False),
            pipeline_schedule=PipelineSchedule(schedule),
            moe_dispatcher=MoeDispatcher(sec.choice("moe_dispatcher", enum_values(MoeDispatcher),
                                                    MoeDispatcher.ALLTOALL.value)),
            recompute_early_stop=(sec.boolean("recompute_early_stop", False)
                                  if sec.has_value("recompute_early_stop") else None),
            grad_reduce_overlap=(sec.boolean("grad_reduce_overlap", False)
                                 if sec.has_value("grad_reduce_overlap") else None),
            recompute_modules=tuple(RecomputeModule(x) for x in modules),
            offload_modules=tuple(OffloadModule(x) for x in offloads),
            activation_fp8_input_store=sec.boolean("activation_fp8_input_store", False),
            attention_output_e5m6=sec.boolean("attention_output_e5m6", False),
            grad_reduce_dtype=grad_reduce,
            train_tokens=train_tokens,
            usd_per_gpu_s=_gpu_prices(sec, train_tokens),
        )


def release_search_of(source: str, space: SearchSpace, job: JobSpec, given: frozenset[str]) -> SearchSpace:
    """`space` narrowed to what job.framework_version runs (framework_rules.release_search);
    a listed search value that release cannot run is an InstanceError naming `source`."""
    narrowed, refusal = release_search(space, job.framework, job.release.year, given, job.release.version,
                                       job.release.month)
    if refusal is not None:
        raise InstanceError(source, f"search.{refusal.key}", refusal.problem, refusal.fix)
    return narrowed


def _grad_reduce_dtype(sec: Section, framework: Framework, version: str | None) -> GradReduceDtype | None:
    """job.grad_reduce_dtype (None when absent: the framework's default, JobSpec.grad_reduce),
    refused where the job's framework, optimizer or precision cannot run it (specs.
    grad_reduce_refusal)."""
    if not sec.has_value("grad_reduce_dtype"):
        return None
    dtype = GradReduceDtype(sec.choice("grad_reduce_dtype", enum_values(GradReduceDtype)))
    optimizer = Optimizer(sec.choice("optimizer", enum_values(Optimizer), Optimizer.ADAM.value))
    precision = Precision(sec.choice("precision", enum_values(Precision), Precision.BF16.value))
    refusal = grad_reduce_refusal(framework, optimizer, precision, dtype, version)
    if refusal is not None:
        raise sec.error("grad_reduce_dtype", *refusal)
    return dtype


def _framework_version(sec: Section, framework: Framework) -> str | None:
    """job.framework_version: a release of the job's framework that cost/releases.py knows
    (None when absent: the current release)."""
    if not sec.has_value("framework_version"):
        return None
    version = sec.raw["framework_version"]
    known = known_versions(framework)
    if not isinstance(version, str) or version not in known:
        raise sec.error("framework_version", f"{_shown_value(version)} is not a {framework.value}"
                        f" release paraplan knows", "use one of: " + ", ".join(known)
                        + f" (or leave it out: the current release, {known[-1]})")
    return version


def _gpu_prices(sec: Section, train_tokens: float | None) -> tuple[tuple[str, float], ...]:
    """job.usd_per_gpu_hour, {GPU type: USD per GPU-hour}, as ((type, USD per GPU-second), ...)
    sorted by type; () when absent. Which types it must name is the cluster's business
    (check_gpu_prices, once the cluster is known)."""
    if not sec.has_value("usd_per_gpu_hour"):
        return ()
    if train_tokens is None:
        raise sec.error("usd_per_gpu_hour", "prices a training run, and the job gives no"
                        " train_tokens", "add train_tokens: <tokens to train on, e.g. 15.0e+12>,"
                        " or remove usd_per_gpu_hour")
    table = sec.section("usd_per_gpu_hour", None)
    if not table.raw:
        raise sec.error("usd_per_gpu_hour", "names no GPU type",
                        "write one 'GPU type: USD per GPU-hour' line per GPU type of the cluster,"
                        " e.g. {H100-SXM5-80GB: 2.5}, or remove usd_per_gpu_hour")
    return tuple(sorted((name, check_number(usd, table.path, table.field(name), "usd_per_gpu_hour")
                         / units.HOUR_S) for name, usd in table.raw.items()))


def check_gpu_prices(source: str, job: JobSpec, gpus: tuple[GpuSpec, ...]) -> None:
    """job.usd_per_gpu_hour names exactly the GPU types of the cluster (`gpus`, one per node
    group): a price for a type the cluster lacks is a typo or the wrong file, and a type
    without one leaves the cost unknown."""
    if not job.usd_per_gpu_s:
        return
    have = sorted({gpu.name for gpu in gpus})
    priced = [name for name, _ in job.usd_per_gpu_s]
    for name in priced:
        if name not in have:
            hint = did_you_mean(name, have)
            raise InstanceError(source, f"job.usd_per_gpu_hour.{name}",
                                f"prices {name}, which the cluster does not have (its GPU types:"
                                f" {', '.join(have)})", (hint + "; " if hint else "")
                                + "price the cluster's GPU types only")
    for name in have:
        if name not in priced:
            raise InstanceError(source, "job.usd_per_gpu_hour",
                                f"gives no price for {name}, which the cluster has",
                                f"add '{name}: <USD per GPU-hour>', or remove usd_per_gpu_hour")


# --- plans ---------------------------------------------------------------------------------

def default_layer_split(layers: int, pp: int, virtual_stages: int = 1) -> tuple[int, ...]:
    """Layers per pipeline stage when the plan gives none: as even as possible.

    The split is done in chunks of `virtual_stages` layers, so every stage stays divisible by
    it. Leftover chunks go one each to the middle stages 1..pp-2, because the first and last
    stages also carry the embedding and the output layer. Only when the leftover is pp-1 does
    one more go to stage 0: the embedding lookup is nearly free, while the last stage's output
    projection and loss cost about a layer of compute. E.g. 10 layers on 4 stages: [2, 3, 3, 2];
    7 layers on 4 stages: [2, 2, 2, 1].
    """
    assert layers % virtual_stages == 0 and layers // virtual_stages >= pp >= 1
    chunks, leftover = divmod(layers // virtual_stages, pp)
    counts = [chunks] * pp
    for stage in [*range(1, pp - 1), 0][:leftover]:
        counts[stage] += 1
    return tuple(c * virtual_stages for c in counts)


def plan_from_mapping(mapping: Any, inst: Instance, path: str | Path = "<memory>") -> Plan:
    """A Plan for `inst` from a plan mapping (bare, or as a plan file writes it: {'plan': {...}},
    with the instance it was made for under `instance:`, which plan_file_instance reads), in
    either form: replica classes (`classes:`), or a flat plan, the one class on every GPU of a
    one-group cluster."""
    path = str(path)
    if isinstance(mapping, dict) and "plan" in mapping and set(mapping) <= {"plan", PLAN_FILE_INSTANCE_KEY}:
        mapping = mapping["plan"]
    if len(inst.cluster.groups) > 1 or isinstance(mapping, dict) and "classes" in mapping:
        return _class_plan(mapping, inst, path)
    return _flat_plan(mapping, inst.group_alone(0), path)


def _flat_plan(mapping: Any, inst: Instance, path: str) -> Plan:
    """plan_from_mapping of a flat plan (module docstring) on `inst`'s one group."""
    sec = Section(mapping, path, "plan", _PLAN_KEYS)
    tp, pp, dp = sec.integer("tp"), sec.integer("pp"), sec.integer("dp")
    micro_batch = sec.integer("micro_batch")
    virtual_stages = sec.integer("virtual_stages", 1)
    recompute = sec.choice("recompute", (*enum_values(Recompute), RECOMPUTE_FULL),
                           Recompute.NONE.value)

    layers_per_stage, embedding, loss = plan_layer_split(sec, inst.model.layers, pp, virtual_stages)
    zero_bubble = plan_zero_bubble(sec, inst)
    if layers_per_stage is None:
        layers = inst.model.layers
        if layers % virtual_stages:
            raise sec.error("virtual_stages", f"the model's {layers} layers do not divide into"
                            f" chunks of virtual_stages={virtual_stages}",
                            "choose virtual_stages dividing the layer count")
        if layers // virtual_stages < pp:
            raise sec.error("pp", f"pp={pp} stages x virtual_stages={virtual_stages} exceed the"
                            f" model's {layers} layers", "use fewer pipeline stages")
        layers_per_stage = default_layer_split(layers, pp, virtual_stages)

    full = sec.int_list("full_recompute_layers", pp)
    if full is None:
        full = layers_per_stage if recompute == RECOMPUTE_FULL else (0,) * pp

    if sec.has("num_micro_batches"):
        num_micro_batches = sec.integer("num_micro_batches")
    else:
        batch = inst.job.global_batch
        if batch % (dp * micro_batch):
            raise sec.error("num_micro_batches", f"cannot be derived: global_batch={batch} is not"
                            f" divisible by dp*micro_batch={dp * micro_batch}",
                            "choose dp and micro_batch whose product divides global_batch")
        num_micro_batches = batch // (dp * micro_batch)

    m = inst.model
    agree = (f"make the plan agree with instance '{inst.name}': {inst.cluster.num_gpus} GPUs,"
             f" {m.layers} layers, global_batch {inst.job.global_batch}, {m.heads} heads,"
             f" {m.kv_heads} kv_heads, seq_len {m.seq_len}")
    with config_errors_as(path, "plan", agree):
        plan = Plan.flat(
            tp=tp, pp=pp, dp=dp, cp=sec.integer("cp", 1),
            micro_batch=micro_batch,
            num_micro_batches=num_micro_batches,
            sequence_parallel=sec.boolean("sequence_parallel", False),
            recompute=Recompute.NONE if recompute == RECOMPUTE_FULL else Recompute(recompute),
            zero=sec.integer("zero", 0),
            virtual_stages=virtual_stages,
            layers_per_stage=layers_per_stage,
            full_recompute_layers=full,
            partitions=plan_partitions(sec),
            ep=sec.integer("ep", 1),
            etp=sec.integer("etp", None),  # absent: etp = tp (Megatron-core's default)
            embedding_in_split=embedding, loss_in_split=loss, zero_bubble=zero_bubble,
        )
        plan.check_against(inst)
    return _plan_runs(sec, inst, plan)


def _plan_runs(sec: Section, inst: Instance, plan: Plan) -> Plan:
    """`plan`, read from `sec`, once what every plan reader refuses is ruled out: a zero-bubble
    schedule on a shape torch does not run it with (one class only), and what no command may
    price, ZeRO-2/3 inside a pipeline (framework_rules.unpriced_reason), refused as the plan is
    read, so simulate, memory, compare, report and export all refuse it."""
    if plan.zero_bubble is not None:
        c0 = plan.classes[0]
        problem = ("the space plans a zero-bubble schedule for one replica class" if len(plan.classes) > 1
                   else torch_schedule_problem(TorchSchedule(plan.zero_bubble.value), len(c0.stage_groups),
                                               plan.virtual_stages, c0.num_micro_batches))
        if problem:
            raise sec.error("zero_bubble", problem, "leave zero_bubble out, or give the plan a shape"
                            " torch runs the schedule with")
    unpriced = unpriced_reason(inst.job.framework, plan.zero, max(len(c.stage_groups) for c in plan.classes))
    if unpriced:
        problem, fix = unpriced.split("; ", 1)
        raise sec.error("zero", problem, fix + " (or plan the instance: the planner never proposes it)")
    return plan


def plan_zero_bubble(sec, inst) -> ZeroBubble | None:
    """A plan section's zero_bubble (torch's zero-bubble schedule, cost/zero_bubble.py): only
    torchtitan runs one (the plan's shape is checked against torch's rules once it is read)."""
    if not sec.has("zero_bubble"):
        return None
    kind = ZeroBubble(sec.choice("zero_bubble", enum_values(ZeroBubble)))
    if inst.job.framework is not Framework.TORCHTITAN:
        raise sec.error("zero_bubble", f"{kind.value} is a torch.distributed.pipelining schedule;"
                        f" framework {inst.job.framework.value} does not run it",
                        "leave zero_bubble out (1F1B, interleaved with virtual_stages > 1)")
    return kind


def plan_layer_split(sec: Section, layers: int, pp: int, v: int
                     ) -> tuple[tuple[int, ...] | None, bool, bool]:
    """(layers per stage, embedding_in_split, loss_in_split) of a plan section; the split is
    None where the section leaves it to default_layer_split. It is given as `layers_per_stage`,
    or as Megatron-core gives it (cost/pipeline_split.py): `first_stage_layers` /
    `last_stage_layers` with the other stages even (--decoder-first/last-pipeline-num-layers), or
    `embedding_in_split` / `loss_in_split` alone, every stage then holding as many layers with
    the embedding / loss counted as one (--account-for-embedding/loss-in-pipeline-split). Each
    stage's layers, with those counted, must fill its v model chunks equally."""
    from paraplan.cost.pipeline_split import chunk_problem, megatron_split
    embedding = sec.boolean("embedding_in_split", False)
    loss = sec.boolean("loss_in_split", False)
    ends = {key: sec.integer(key) for key in ("first_stage_layers", "last_stage_layers") if sec.has(key)}
    if (embedding or loss) and pp == 1:
        raise sec.error("embedding_in_split" if embedding else "loss_in_split",
                        "counts the embedding or loss as a pipeline layer, but pp = 1",
                        "remove it (it only places layers between pipeline stages)")
    split = sec.int_list("layers_per_stage", pp)
    if split is not None and ends:
        raise sec.error(next(iter(ends)), "given beside layers_per_stage, which already fixes"
                        " every stage's layers", f"remove {next(iter(ends))}, or layers_per_stage")
    if split is None and (ends or embedding or loss):
        key = next(iter(ends)) if ends else "embedding_in_split" if embedding else "loss_in_split"
        try:
            split = megatron_split(layers, pp, v, first=ends.get("first_stage_layers"),
                                   last=ends.get("last_stage_layers"), embedding=embedding, loss=loss)
        except ConfigError as e:
            raise sec.error(key, f"{e} (the model has {layers} layers, pp={pp}, virtual_stages={v})",
                            "give counts Megatron-core can split (cost/pipeline_split.py), or the"
                            " whole split as layers_per_stage") from None
    if split is not None:
        problem = chunk_problem(split, v, embedding, loss)
        if problem:
            raise sec.error("layers_per_stage", problem,
                            "give each stage a multiple of virtual_stages layers, counting the"
                            " embedding (stage 0) and loss (last stage) as one layer where"
                            " embedding_in_split / loss_in_split say so")
    return split, embedding, loss


def plan_partitions(sec: Section, key: str = "partitions") -> tuple[tuple[str, str], ...]:
    """`partitions: {qkv: K, attn_core: heads, ..., stream: B2x2}` (cost/partition.py; the
    stream is optional: absent, Megatron's layout of the plan's sequence_parallel flag);
    absent: Megatron. `key`: the field of `sec` holding it."""
    if not sec.has(key):
        return ()
    from paraplan.cost.partition import OPS, PLAN_OPS, STREAM
    sub = sec.section(key, PLAN_OPS)
    out = []
    for op in OPS:
        out.append((op, sub.string(op)))
    if sub.has(STREAM):
        out.append((STREAM, sub.string(STREAM)))
    return tuple(out)


def load_plan(path: str | Path, inst: Instance) -> Plan:
    """The plan file at `path` for `inst`, in either form (plan_from_mapping)."""
    return plan_from_mapping(read_yaml(path), inst, path)


def plan_to_mapping(plan: Plan, inst: Instance | None = None) -> dict:
    """Plain YAML-safe mapping that plan_from_mapping / load_plan turn back into `plan` on
    `inst`: the flat form where `inst` is flat (cost/specs.Instance.flat) and the plan its one
    class on every GPU (Plan.is_flat_on; without `inst`, a plan of one class), else replica
    classes on `inst`'s groups."""
    if inst is not None and not (inst.flat and plan.is_flat_on(inst.cluster)):
        return _class_plan_mapping(plan, inst)
    out = {
        "tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "cp": plan.cp,
        "micro_batch": plan.micro_batch,
        "num_micro_batches": plan.num_micro_batches,
        "sequence_parallel": plan.sequence_parallel,
        "recompute": plan.recompute.value,
        "zero": plan.zero,
        "virtual_stages": plan.virtual_stages,
        "layers_per_stage": list(plan.layers_per_stage),
        "full_recompute_layers": list(plan.full_recompute_layers),
    }
    if plan.partitions:
        out["partitions"] = dict(plan.partitions)
    if plan.ep > 1:  # absent: 1 (dense plan files stay as they were)
        out["ep"] = plan.ep
    if plan.etp is not None:  # absent: etp = tp (plans without parallel folding stay as they were)
        out["etp"] = plan.etp
    for key in ("embedding_in_split", "loss_in_split"):  # absent: false (files stay as they were)
        if getattr(plan, key):
            out[key] = True
    if plan.zero_bubble is not None:  # absent: 1F1B / interleaved (files stay as they were)
        out["zero_bubble"] = plan.zero_bubble.value
    # Only with NONE does `full` read back as the same Plan (full maps to NONE).
    if plan.recompute is Recompute.NONE and plan.full_recompute_layers == plan.layers_per_stage:
        out["recompute"] = RECOMPUTE_FULL
        del out["full_recompute_layers"]
    return out


# --- the instance a plan file carries ------------------------------------------------------
# `paraplan plan -o` writes the instance beside the plan, so that a plan made from part files
# (--hf-config --cluster --job) can be exported or simulated without an instance file.

PLAN_FILE_INSTANCE_KEY = "instance"


def instance_to_mapping(inst: Instance) -> dict:
    """`inst` in the instance-file schema (module docstring), such that `instance_from_mapping`
    rebuilds an equal Instance: units converted back, defaults of the search space left out
    (writing them out would make the framework refusal check see them as user choices)."""
    from dataclasses import fields

    model = {}
    for f in fields(inst.model):
        value = getattr(inst.model, f.name)
        if value is None or value == ():  # an optional key left out: its default
            continue
        key = _MODEL_FIELD_KEYS.get(f.name, f.name)
        if f.name == "moe":
            model[key] = {g.name: getattr(value, g.name) for g in fields(value)
                          if getattr(value, g.name) is not None}
            continue
        if f.name == "mla":  # every width, q_lora_rank null included (the section requires it)
            model[key] = {g.name: getattr(value, g.name) for g in fields(value)}
            continue
        model[key] = (value.value if isinstance(value, Enum)
                      else list(value) if isinstance(value, tuple) else value)
    cl = inst.cluster
    cluster = {
        "gpu": cl.gpu.name, "nodes": cl.nodes, "gpus_per_node": cl.gpus_per_node,
        "intra_node_link": cl.intra_node_kind,
        # the loader halves the vendors' bidirectional NVLink figure
        "intra_node_gbytes_per_s": 2 * cl.intra_node.bw_bytes_per_s / units.GBYTE_BYTES,
        "intra_node_latency_us": cl.intra_node.latency_s / units.US_S,
        "nic_gbit_per_s": cl.inter_node.bw_bytes_per_s / units.GBIT_BYTES,
        "inter_node_latency_us": cl.inter_node.latency_s / units.US_S,
    }
    if cl.nvlink_domain_gpus is not None:
        cluster["nvlink_domain_gpus"] = cl.nvlink_domain_gpus
    job = _job_to_mapping(inst.job)
    out: dict[str, Any] = {"name": inst.name, "model": model, "cluster": cluster, "job": job}
    if load_catalogue().get(cl.gpu.name) != cl.gpu:
        out["gpu_types"] = {cl.gpu.name: _gpu_to_mapping(cl.gpu)}
    search = _search_to_mapping(inst.search)
    if search:
        out["search"] = search
    return out


def _job_to_mapping(job: JobSpec) -> dict:
    """The job section of instance_to_mapping: its five plain keys, then each optional one only
    where it differs from its default (None: left out), so files stay as they were written."""
    def flag(on: bool):
        return True if on else None

    optional = (
        ("framework_version", job.framework_version),
        ("tp_comm_overlap", flag(job.tp_comm_overlap)),
        ("cudnn_attention", None if job.cudnn_attention else False),
        ("moe_a2a_overlap", flag(job.moe_a2a_overlap)),
        ("moe_shared_expert_overlap", flag(job.moe_shared_expert_overlap)),
        ("pipeline_schedule", None if job.pipeline_schedule is PipelineSchedule.ONE_F_ONE_B
         else job.pipeline_schedule.value),
        ("moe_dispatcher", None if job.moe_dispatcher is MoeDispatcher.ALLTOALL else job.moe_dispatcher.value),
        ("recompute_early_stop", job.recompute_early_stop),
        ("grad_reduce_overlap", job.grad_reduce_overlap),
        ("recompute_modules", [x.value for x in job.recompute_modules] or None),
        ("offload_modules", [x.value for x in job.offload_modules] or None),
        ("activation_fp8_input_store", flag(job.activation_fp8_input_store)),
        ("attention_output_e5m6", flag(job.attention_output_e5m6)),
        ("grad_reduce_dtype", None if job.grad_reduce_dtype is None else job.grad_reduce_dtype.value),
        ("train_tokens", job.train_tokens),
        ("usd_per_gpu_hour", {name: usd * units.HOUR_S for name, usd in job.usd_per_gpu_s} or None),
    )
    return {"global_batch": job.global_batch, "precision": job.precision.value,
            "optimizer": job.optimizer.value, "attention": job.attention.value,
            "framework": job.framework.value, **{k: v for k, v in optional if v is not None}}


def _gpu_to_mapping(gpu: GpuSpec) -> dict:
    out = {"peak_tflops_bf16": gpu.peak_flops_per_s / units.TFLOPS_FLOPS,
           "hbm_gib": units.bytes_to_gib(gpu.hbm_bytes),
           "hbm_gbytes_per_s": gpu.hbm_bw_bytes_per_s / units.GBYTE_BYTES,
           "matmul_eff_max": gpu.matmul_eff_max,
           "matmul_half_gflops": gpu.matmul_half_flops / units.GFLOP_FLOPS,
           "memory_eff": gpu.memory_eff, "attention_eff": gpu.attention_eff,
           "fp8_matmul_eff_max": gpu.fp8_matmul_eff_max,
           "cudnn_attention_speedup": gpu.cudnn_attention_speedup}
    if gpu.peak_fp8_flops_per_s is not None:
        out["peak_tflops_fp8"] = gpu.peak_fp8_flops_per_s / units.TFLOPS_FLOPS
    if gpu.fa2_benchmark_flops_per_s is not None:
        out["fa2_benchmark_tflops"] = gpu.fa2_benchmark_flops_per_s / units.TFLOPS_FLOPS
    if gpu.host_link_bw_bytes_per_s is not None:
        out["host_link_gbytes_per_s"] = gpu.host_link_bw_bytes_per_s / units.GBYTE_BYTES
    if gpu.cudnn_attention_flops_per_s_by_keys:
        out["cudnn_attention_tflops"] = {k: f / units.TFLOPS_FLOPS
                                         for k, f in gpu.cudnn_attention_flops_per_s_by_keys}
    return out


def _search_to_mapping(space: SearchSpace) -> dict:
    from dataclasses import fields

    default = SearchSpace()
    out: dict[str, Any] = {}
    for f in fields(space):
        value = getattr(space, f.name)
        if value == getattr(default, f.name) or f.name == "partial_recompute":
            continue  # partial_recompute: no key; the job's release sets it again as it is read
        if f.name == "memory_reserve_bytes":
            out["memory_reserve_gib"] = units.bytes_to_gib(value)
        elif isinstance(value, tuple):
            out[f.name] = [v.value if isinstance(v, Enum) else v for v in value]
        else:
            out[f.name] = value
    return out


def instance_from_mapping(data: Any, path: str | Path = "<memory>", prefix: str = "") -> Instance:
    """The instance `data` describes (an instance file as read, `prefix` ""; or the instance a
    plan file carries under `instance:`), in either form: a flat `cluster:` as its one node
    group, a `cluster:` with `groups:` as the groups it lists, with its scenarios, timeline and
    switching costs. Checked like an instance file; errors name `path` and the field under
    `prefix`."""
    path = str(path)
    groups = is_groups_mapping(data)
    top = Section(data, path, prefix, _GROUP_TOP_KEYS if groups else _TOP_KEYS)
    name = top.string("name")
    gpus = catalogue_with_gpu_types(top)
    model = model_from_section(top.section("model", MODEL_KEYS), name)
    job = job_from_section(top.section("job", JOB_KEYS))
    if groups and job.pipeline_schedule is not PipelineSchedule.ONE_F_ONE_B:
        raise InstanceError(path, "job.pipeline_schedule", "DualPipe is planned and priced for"
                            " one GPU type only (cost/dualpipe.py: a device holds two stages, which"
                            " on a mixed cluster could sit on different GPU types)",
                            "remove pipeline_schedule, or plan a homogeneous cluster")
    search_sec = top.section("search", SEARCH_KEYS) if top.has("search") else None
    search = (SearchSpace() if search_sec is None
              else search_from_section(search_sec, job.framework))
    search = release_search_of(path, search, job, frozenset(top.raw.get("search") or ()))
    net = (_network(top.section("cluster", _GROUPS_CLUSTER_KEYS), gpus) if groups
           else None)
    nominal = net.cluster() if groups else Cluster.of(
        cluster_from_section(top.section("cluster", CLUSTER_KEYS), gpus))
    nominal_inst = _checked(Instance(name=name, model=model, cluster=nominal, job=job, search=search,
                                     source=path), search_sec if groups else None)
    scenarios = _scenarios(top, net, nominal) if top.has("scenarios") else ()
    timeline = _timeline(top, scenarios or [Scenario(name=NOMINAL, cluster=nominal)]) \
        if top.has("timeline") else ()
    switching = _switching(top.section("switching", _SWITCHING_KEYS)) \
        if top.has("switching") else Switching()
    return replace(nominal_inst, scenarios=tuple(scenarios), timeline=timeline, switching=switching)


def plan_file_instance(data: Any, path: str | Path) -> Instance | None:
    """The instance the plan file `data` (as read from `path`) carries under `instance:`; None
    when it carries none (plan files written before paraplan wrote it, or written by hand)."""
    if not isinstance(data, dict) or PLAN_FILE_INSTANCE_KEY not in data:
        return None
    return instance_from_mapping(data[PLAN_FILE_INSTANCE_KEY], path, PLAN_FILE_INSTANCE_KEY)


def plan_file_mapping(inst: Instance, plan: Plan) -> dict:
    """What `paraplan plan -o` writes: the plan and the instance it was made for."""
    return {"plan": plan_to_mapping(plan), PLAN_FILE_INSTANCE_KEY: instance_to_mapping(inst)}


# YAML search keys whose SearchSpace field has another name (the unit is converted at load)
_SEARCH_FIELDS = {"memory_reserve_gib": "memory_reserve_bytes"}
SEARCH_LIST_KEYS = ("tp", "pp", "cp", "micro_batch", "sequence_parallel", "zero", "virtual_stages",
                    "recompute", "tensor_partitions", "ep", "etp")


def override_search(inst: Instance, raw: dict[str, Any], source: str = "<--search>") -> Instance:
    """`inst` with the search keys in `raw` (YAML values, e.g. {"tp": [1, 2], "zero": [1]})
    replacing its own; every key and value is checked exactly as in a `search:` section
    (framework rules included), and errors name `source`."""
    parsed = search_from_section(Section(raw, source, "search", SEARCH_KEYS), inst.job.framework)
    fields = {_SEARCH_FIELDS.get(k, k): getattr(parsed, _SEARCH_FIELDS.get(k, k)) for k in raw}
    with config_errors_as(source, "search", "narrow the search space to valid values"):
        space = replace(inst.search, **fields)
    given = frozenset(raw)
    space = release_search_of(source, space, inst.job, given)
    refusal = search_refusal(space, inst.model, inst.cluster, inst.job, given)
    if refusal is not None:
        raise InstanceError(source, f"search.{refusal.key}", refusal.problem, refusal.fix)
    check_moe_overlaps(source, inst.job, inst.model, space)
    check_job_options(source, inst.job, inst.model, space)  # group files take these options too
    return replace(inst, search=space)


# --- node groups, scenarios, events and plans of replica classes ---------------------------

# Hours appear only in timeline and event files; cost/units.py has no hour constant yet.
_HOUR_S = 3600.0
NOMINAL = "nominal"  # the name of the scenario that is the cluster as declared
FAMILIES = ("stage", "replica", "mixed")  # cost/plan_specs.Plan.family

_GROUP_TOP_KEYS = ("name", "model", "cluster", "job", "gpu_types", "search", "scenarios", "timeline",
             "switching")
_GROUPS_CLUSTER_KEYS = ("groups", "links")
_GROUP_KEYS = ("name", "site", *CLUSTER_KEYS)
_LINK_KEYS = ("between", "gbit_per_s", "latency_us")
_SCENARIO_KEYS = ("name", "probability", "window_h", "changes")
_PERIOD_KEYS = ("scenario", "duration_h")
_SWITCHING_KEYS = ("storage_gbytes_per_s", "restart_s")
_LINK_CHANGE_KEYS = ("between", "scale", "gbit_per_s", "latency_us")
_GROUP_CHANGE_KEYS = ("group", "site", "nic_gbit_per_s", "nic_scale", "intra_node_gbytes_per_s",
                      "intra_scale")
_EVENT_FILE_KEYS = ("event",)
_EVENT_KEYS = ("name", "changes", "remaining_hours", "remaining_iterations")
_CLASS_PLAN_KEYS = ("tp", "cp", "virtual_stages", "micro_batch", "sequence_parallel", "recompute", "zero", "family",
              "ep", "etp", "embedding_in_split", "loss_in_split", "zero_bubble", "classes")
_CLASS_KEYS = ("replicas", "stages", "num_micro_batches", "layers_per_stage",
               "full_recompute_layers", "partitions")
_ABSENT = object()  # default of keys that may be left out; an explicit null is still refused
_MAX_ITEMS = 4096  # groups, links, scenarios, periods, changes, classes
_PROBABILITY_SLACK = 1e-9  # 0.7 + 0.2 + 0.1 may sum to 1.0000000000000002


# --- which loader --------------------------------------------------------------------------

def is_groups_mapping(data: Any) -> bool:
    """True when `data` (a whole instance file, as read) is written in the form of node groups:
    its `cluster:` lists `groups:` or `links:`, or it declares what only that form holds
    (scenarios, a timeline, switching costs), so that a missing `groups:` is named as such."""
    return isinstance(data, dict) and (
        isinstance(data.get("cluster"), dict) and bool({"groups", "links"} & data["cluster"].keys())
        or bool({"scenarios", "timeline", "switching"} & data.keys()))


# --- groups, sites and links ---------------------------------------------------------------

class _Network:
    """The nominal groups and the explicitly given links, from which every scenario's
    Cluster is built (module docstring, "Changes")."""

    def __init__(self, path: str, groups: list[NodeGroup],
                 explicit: dict[tuple[int, int], Link]):
        self.path, self.groups, self.explicit = path, groups, explicit
        self.by_name = {x.name: i for i, x in enumerate(groups)}
        self.sites: dict[str, list[int]] = {}
        for i, x in enumerate(groups):
            self.sites.setdefault(x.site, []).append(i)

    def resolve(self, sec: Section, key: str, value: Any) -> tuple[set[int], bool]:
        """The groups a group or site name stands for, and whether it named a group."""
        field = sec.field(key)
        if not isinstance(value, str) or not value:
            raise InstanceError(self.path, field, f"expected a group or site name, got"
                                f" {describe(value)}", "write the name of a node group or site")
        if value in self.by_name:
            return {self.by_name[value]}, True
        if value in self.sites:
            return set(self.sites[value]), False
        known = sorted({*self.by_name, *self.sites})
        raise InstanceError(self.path, field, f"no group or site named {_shown(value)}",
                            _did_you_mean(value, known, "groups and sites"))

    def pairs(self, sec: Section) -> tuple[list[tuple[int, int]], int]:
        """The ordered pairs (a, b), a < b, that `between:` covers, and its specificity (the
        number of its two names that are group names)."""
        if not sec.has("between"):
            raise sec.error("between", "missing required key 'between'",
                            "add 'between: [x, y]' with two group or site names")
        raw = sec.raw["between"]
        if not isinstance(raw, list) or len(raw) != 2:
            raise sec.error("between", f"expected a list of two names, got {describe(raw)}",
                            "write [group-or-site, group-or-site], e.g. [east, west]")
        (xs, gx), (ys, gy) = (self.resolve(sec, f"between[{i}]", v) for i, v in enumerate(raw))
        pairs = sorted({(min(a, b), max(a, b)) for a in xs for b in ys if a != b})
        if not pairs:
            raise sec.error("between", f"{_shown(raw[0])} and {_shown(raw[1])} cover no two"
                            " distinct groups", "name two different groups, or sites holding"
                            " different groups")
        return pairs, gx + gy

    def default_link(self, a: int, b: int, groups: list[NodeGroup]) -> Link:
        x, y = groups[a].cluster.inter_node, groups[b].cluster.inter_node
        return Link(bw_bytes_per_s=min(x.bw_bytes_per_s, y.bw_bytes_per_s),
                    latency_s=max(x.latency_s, y.latency_s))

    def matrix(self, groups: list[NodeGroup]) -> list[list[Link]]:
        n = len(groups)
        return [[groups[a].cluster.inter_node if a == b else
                 self.explicit.get((min(a, b), max(a, b))) or self.default_link(a, b, groups)
                 for b in range(n)] for a in range(n)]

    def cluster(self, groups: list[NodeGroup] | None = None,
                between: list[list[Link]] | None = None) -> Cluster:
        groups = self.groups if groups is None else groups
        between = self.matrix(groups) if between is None else between
        with config_errors_as(self.path, "cluster", "correct the cluster description"):
            return Cluster(groups=tuple(groups),
                                 between=tuple(tuple(row) for row in between))


def _did_you_mean(name: str, known, what: str) -> str:
    """A fix for an unknown name: the closest known one, else the list of them."""
    return did_you_mean(name, known) or f"the {what} are: " + ", ".join(sorted(known))


def _items(sec: Section, key: str, *, each: str) -> list[tuple[str, Any]]:
    """(dotted field, raw item) for each entry of the non-empty list under `key`; `each`
    names one entry for the messages."""
    if not sec.has(key):
        raise sec.error(key, f"missing required key '{key}'",
                        f"add '{key}:' with one '- ...' entry per {each}")
    value = sec.raw[key]
    if not isinstance(value, list) or not value:
        got = "an empty list" if value == [] else describe(value)
        raise sec.error(key, f"expected a non-empty list, got {got}",
                        f"write one '- ...' entry per {each}")
    if len(value) > _MAX_ITEMS:
        raise sec.error(key, f"has {len(value)} entries", f"list at most {_MAX_ITEMS}")
    return [(f"{sec.field(key)}[{i}]", item) for i, item in enumerate(value)]


def _network(sec: Section, gpus: dict[str, GpuSpec]) -> _Network:
    path = sec.path
    groups: list[NodeGroup] = []
    for field, raw in _items(sec, "groups", each="group"):
        item = Section(raw, path, field, _GROUP_KEYS)
        name = item.string("name")
        if any(x.name == name for x in groups):
            raise item.error("name", f"a second group named {_shown(name)}",
                             "give every node group its own name")
        groups.append(NodeGroup(name=name, site=item.string("site", name),
                                cluster=cluster_from_section(item, gpus)))
    by_name = {x.name: x for x in groups}
    for i, x in enumerate(groups):
        owner = by_name.get(x.site)
        if owner is not None and owner is not x:
            raise InstanceError(path, f"cluster.groups[{i}].site",
                                f"site {_shown(x.site)} is also the name of group"
                                f" {_shown(owner.name)}, so `between:` could not tell them"
                                " apart", "name sites differently from groups (a site may"
                                " share its name only with its one group)")

    net = _Network(path, groups, {})
    if sec.has("links"):
        given: dict[tuple[int, int], tuple[int, str]] = {}  # pair -> (specificity, field)
        for field, raw in _items(sec, "links", each="link"):
            item = Section(raw, path, field, _LINK_KEYS)
            pairs, specificity = net.pairs(item)
            bw = units.gbit_per_s_to_bytes_per_s(item.number("gbit_per_s"))
            latency_us = _optional_number(item, "latency_us")
            for a, b in pairs:
                before = given.get((a, b))
                if before is not None and before[0] == specificity:
                    raise item.error("between", f"sets the link between {_shown(groups[a].name)}"
                                     f" and {_shown(groups[b].name)}, as {before[1]} already"
                                     " does", "keep one of the two links")
                if before is not None and before[0] > specificity:
                    continue
                given[(a, b)] = (specificity, field)
                latency_s = net.default_link(a, b, groups).latency_s if latency_us is None \
                    else units.us_to_s(latency_us)
                net.explicit[(a, b)] = Link(bw_bytes_per_s=bw, latency_s=latency_s)
    return net


# --- scenarios, timeline, switching --------------------------------------------------------

def _apply_changes(net: _Network, sec: Section, key: str) -> Cluster:
    """The nominal cluster with the change list under `sec[key]` applied (module docstring)."""
    group_changes, link_changes = _sorted_changes(sec, key)
    groups = list(net.groups)
    for ch in group_changes:
        _apply_group_change(net, groups, ch)
    between = net.matrix(groups)
    for ch in link_changes:
        _apply_link_change(net, between, ch)
    return net.cluster(groups, between)


def _sorted_changes(sec: Section, key: str) -> tuple[list[Section], list[Section]]:
    """The change list under `sec[key]` as (group or site changes, link changes)."""
    path = sec.path
    group_changes, link_changes = [], []
    for field, raw in _items(sec, key, each="change"):
        if isinstance(raw, dict) and "between" in raw:
            link_changes.append(Section(raw, path, field, _LINK_CHANGE_KEYS))
        elif isinstance(raw, dict) and ("group" in raw or "site" in raw):
            group_changes.append(Section(raw, path, field, _GROUP_CHANGE_KEYS))
        else:
            raise InstanceError(path, field, "a change names no `between:`, `group:` or `site:`"
                                if isinstance(raw, dict) else
                                f"expected a mapping, got {describe(raw)}",
                                "write '- between: [x, y]' with scale or gbit_per_s, or"
                                " '- group: NAME' with nic_gbit_per_s, nic_scale,"
                                " intra_node_gbytes_per_s or intra_scale")
    return group_changes, link_changes


def _apply_group_change(net: _Network, groups: list, ch: Section) -> None:
    """One `group:` or `site:` change applied to `groups` in place: its members' NIC and NVLink."""
    if ch.has("group") and ch.has("site"):
        raise ch.error("site", "a change names both a group and a site",
                       "keep one of `group:` and `site:`")
    target = "group" if ch.has("group") else "site"
    name = ch.string(target)
    if target == "group" and name not in net.by_name or \
            target == "site" and name not in net.sites:
        known = tuple(net.by_name if target == "group" else net.sites)
        raise ch.error(target, f"no {target} named {_shown(name)}",
                       _did_you_mean(name, known, f"{target}s"))
    members = [net.by_name[name]] if target == "group" else net.sites[name]
    nic = _set_or_scale(ch, "nic_gbit_per_s", "nic_scale")
    intra = _set_or_scale(ch, "intra_node_gbytes_per_s", "intra_scale")
    if nic is None and intra is None:
        raise ch.error(target, "the change changes nothing",
                       "add nic_gbit_per_s, nic_scale, intra_node_gbytes_per_s or"
                       " intra_scale")
    for g in members:
        c = groups[g].cluster
        inter, intra_link = c.inter_node, c.intra_node
        if nic is not None:
            bw = units.gbit_per_s_to_bytes_per_s(nic[1]) if nic[0] == "set" \
                else inter.bw_bytes_per_s * nic[1]
            _check_scaled(ch, "nic_scale", "nic_gbit_per_s", groups[g].name,
                          bw / units.gbit_per_s_to_bytes_per_s(1))
            inter = replace(inter, bw_bytes_per_s=bw)
        if intra is not None:
            # Bidirectional figure, halved as cost/loader.py does for the nominal one.
            bw = units.gbytes_per_s_to_bytes_per_s(intra[1]) / 2 if intra[0] == "set" \
                else intra_link.bw_bytes_per_s * intra[1]
            _check_scaled(ch, "intra_scale", "intra_node_gbytes_per_s", groups[g].name,
                          2 * bw / units.gbytes_per_s_to_bytes_per_s(1))
            intra_link = replace(intra_link, bw_bytes_per_s=bw)
        groups[g] = replace(groups[g], cluster=replace(c, inter_node=inter,
                                                       intra_node=intra_link))


def _apply_link_change(net: _Network, between: list, ch: Section) -> None:
    """One `between:` change applied to the link matrix `between` in place (both directions)."""
    pairs, _ = net.pairs(ch)
    bw = _set_or_scale(ch, "gbit_per_s", "scale")
    latency_us = _optional_number(ch, "latency_us")
    if bw is None and latency_us is None:
        raise ch.error("between", "the change changes nothing",
                       "add `scale: f` (multiply) or `gbit_per_s: X` (set the bandwidth),"
                       " and/or `latency_us: X`")
    for a, b in pairs:
        link = between[a][b]
        new_bw = link.bw_bytes_per_s if bw is None else \
            units.gbit_per_s_to_bytes_per_s(bw[1]) if bw[0] == "set" \
            else link.bw_bytes_per_s * bw[1]
        _check_scaled(ch, "scale", "gbit_per_s",
                      f"{net.groups[a].name}-{net.groups[b].name}",
                      new_bw / units.gbit_per_s_to_bytes_per_s(1))
        latency_s = link.latency_s if latency_us is None else units.us_to_s(latency_us)
        between[a][b] = between[b][a] = Link(bw_bytes_per_s=new_bw, latency_s=latency_s)


def _check_scaled(sec: Section, key: str, quantity: str, what: str, value: float) -> None:
    """A bandwidth after a change (scales compound) stays in its quantity's physical range."""
    if sec.has(key) and out_of_range(quantity, value) is not None:
        raise sec.error(key, f"scales the {quantity} of {_shown(what)} to {value:.6g}, outside"
                        f" its {range_text(quantity)}", "give a scale that keeps the bandwidth"
                        " in its range, or set the figure itself")


def _optional_number(sec: Section, key: str) -> float | None:
    """The number under `key`, or None when the key is absent (a null is refused)."""
    value = sec.number(key, _ABSENT)
    return None if value is _ABSENT else value


def _set_or_scale(sec: Section, set_key: str, scale_key: str) -> tuple[str, float] | None:
    """("set", value in the key's unit) or ("scale", factor), or None when neither is given."""
    if sec.has(set_key) and sec.has(scale_key):
        raise sec.error(scale_key, f"both {set_key} and {scale_key} are given",
                        f"keep one: {set_key} sets the figure, {scale_key} multiplies it")
    if sec.has(set_key):
        return "set", sec.number(set_key)
    if sec.has(scale_key):
        return "scale", sec.number(scale_key)
    return None


def _scenarios(top: Section, net: _Network, nominal: Cluster) -> list[Scenario]:
    path = top.path
    out: list[Scenario] = []
    probabilities: list[tuple[str, float | None]] = []
    for field, raw in _items(top, "scenarios", each="scenario"):
        sec = Section(raw, path, field, _SCENARIO_KEYS)
        name = sec.string("name")
        if name == NOMINAL:
            raise sec.error("name", f"'{NOMINAL}' is the declared network itself",
                            "give the scenario another name; the timeline may refer to"
                            f" '{NOMINAL}' without declaring it")
        if any(s.name == name for s in out):
            raise sec.error("name", f"a second scenario named {_shown(name)}",
                            "give every scenario its own name")
        probability = _optional_number(sec, "probability")
        probabilities.append((field, probability))
        window = None
        if sec.has("window_h"):
            window = sec.list_of("window_h", lambda v, f: _hour_of_day(path, v, f),
                                 "hours of the day")
            if len(window) != 2 or window[0] == window[1]:
                raise sec.error("window_h", f"expected two different hours, got {list(window)}",
                                "write [start, end], e.g. [18, 24]")
        out.append(Scenario(name=name, cluster=_apply_changes(net, sec, "changes"),
                            probability=probability, window_h=window))

    given = [p for _, p in probabilities if p is not None]
    nominal_probability = None
    if given:
        missing = [f for f, p in probabilities if p is None]
        if missing:
            raise InstanceError(path, f"{missing[0]}.probability", "some scenarios give a"
                                " probability and this one does not",
                                "give every scenario a probability, or none")
        total = sum(given)
        if total > 1 + _PROBABILITY_SLACK:
            raise InstanceError(path, "scenarios", f"the probabilities sum to {total:g}, above 1",
                                "lower them; the nominal network gets 1 minus their sum")
        nominal_probability = max(0.0, 1.0 - total)
    return [Scenario(name=NOMINAL, cluster=nominal, probability=nominal_probability), *out]


def _hour_of_day(path: str, value: Any, field: str) -> float:
    return check_number(value, path, field, "window_h")


def _timeline(top: Section, scenarios: list[Scenario]) -> tuple[Period, ...]:
    names = [s.name for s in scenarios]
    periods = []
    for field, raw in _items(top, "timeline", each="period"):
        sec = Section(raw, top.path, field, _PERIOD_KEYS)
        name = sec.string("scenario")
        if name not in names:
            raise sec.error("scenario", f"no scenario named {_shown(name)}",
                            _did_you_mean(name, names, "scenarios"))
        duration_s = sec.number("duration_h") * _HOUR_S
        periods.append(Period(scenario=names.index(name), duration_s=duration_s))
    return tuple(periods)


def _switching(sec: Section) -> Switching:
    defaults = Switching()
    bw = _optional_number(sec, "storage_gbytes_per_s")
    restart_s = sec.number("restart_s", defaults.restart_s)
    with config_errors_as(sec.path, sec.prefix, "correct the switching costs"):
        return Switching(storage_bw_bytes_per_s=defaults.storage_bw_bytes_per_s if bw is None
                         else units.gbytes_per_s_to_bytes_per_s(bw),
                         restart_s=restart_s)


# --- events --------------------------------------------------------------------------------

def load_event(path: str | Path,
               inst: Instance) -> tuple[Scenario, float | None, int | None]:
    """The network event in `path` (module docstring) applied to `inst`'s nominal cluster:
    (the scenario it makes, remaining seconds or None, remaining iterations or None); exactly
    one of the two is given."""
    return event_from_mapping(read_yaml(path), inst, path)


def event_from_mapping(data: Any, inst: Instance,
                       path: str | Path = "<memory>") -> tuple[Scenario, float | None, int | None]:
    path = str(path)
    sec = Section(data, path, "", _EVENT_FILE_KEYS).section("event", _EVENT_KEYS)
    name = sec.string("name", Path(path).stem)
    has_hours, has_iterations = sec.has("remaining_hours"), sec.has("remaining_iterations")
    if has_hours == has_iterations:
        raise sec.error("remaining_hours", "both remaining_hours and remaining_iterations are"
                        " given" if has_hours else "neither remaining_hours nor"
                        " remaining_iterations is given",
                        "give exactly one: how long the changed network lasts")
    remaining_s = sec.number("remaining_hours") * _HOUR_S if has_hours else None
    remaining_iterations = sec.integer("remaining_iterations") if has_iterations else None
    net = _network_of(inst, path)
    return (Scenario(name=name, cluster=_apply_changes(net, sec, "changes")), remaining_s,
            remaining_iterations)


def _network_of(inst: Instance, path: str) -> _Network:
    """The instance's nominal cluster as a _Network: every link that differs from the default
    derived from the groups' NICs counts as explicitly given."""
    groups = list(inst.cluster.groups)
    net = _Network(path, groups, {})
    n = len(groups)
    for a in range(n):
        for b in range(a + 1, n):
            link = inst.cluster.between[a][b]
            if link != net.default_link(a, b, groups):
                net.explicit[(a, b)] = link
    return net


# --- plans ---------------------------------------------------------------------------------

def _class_plan(mapping: Any, inst: Instance, path: str) -> Plan:
    """plan_from_mapping of a plan of replica classes (module docstring)."""
    sec = Section(mapping, path, "plan", _CLASS_PLAN_KEYS)
    names = tuple(x.name for x in inst.cluster.groups)
    micro_batch = sec.integer("micro_batch")
    by_group = _group_tp(sec, names, path)  # tp: {GROUP: N, ...}, a tp per group
    tp = 0 if by_group else sec.integer("tp")
    zero, cp, v = sec.integer("zero", 0), sec.integer("cp", 1), sec.integer("virtual_stages", 1)
    recompute = sec.choice("recompute", (*enum_values(Recompute), RECOMPUTE_FULL),
                           Recompute.NONE.value)
    embedding = sec.boolean("embedding_in_split", False)
    loss = sec.boolean("loss_in_split", False)
    zero_bubble = plan_zero_bubble(sec, inst)
    classes = []
    for field, raw in _items(sec, "classes", each="class"):
        c = Section(raw, path, field, _CLASS_KEYS)
        if not c.has("stages"):
            raise c.error("stages", "missing required key 'stages'",
                          "add 'stages: [GROUP, ...]', the group hosting each pipeline stage")
        stages = c.list_of("stages", lambda v, f: _group_index(path, names, v, f),
                           "group names")
        pp = len(stages)
        layers = c.int_list("layers_per_stage", pp)
        if layers is None:
            if inst.model.layers < pp:
                raise c.error("stages", f"{pp} stages exceed the model's {inst.model.layers}"
                              " layers", "use fewer pipeline stages")
            if embedding or loss:  # Megatron-core's split with the slots (R4)
                with config_errors_as(path, field, "give layers_per_stage"):
                    layers = megatron_split(inst.model.layers, pp, v, embedding=embedding, loss=loss)
            elif inst.model.layers % v or inst.model.layers < v * pp:
                raise c.error("stages", f"{pp} stages of {v} chunks do not split the model's"
                              f" {inst.model.layers} layers", "give layers_per_stage")
            else:
                layers = default_layer_split(inst.model.layers, pp, v)
        full = c.int_list("full_recompute_layers", pp)
        if full is None:
            full = layers if recompute == RECOMPUTE_FULL else (0,) * pp
        parts = _class_partitions(c, names, stages, path)
        with config_errors_as(path, field, "correct the replica class"):
            classes.append(ReplicaClass(replicas=c.integer("replicas"), stage_groups=stages,
                                        num_micro_batches=c.integer("num_micro_batches"),
                                        layers_per_stage=layers, full_recompute_layers=full,
                                        partitions=parts))

    m = inst.model
    agree = (f"make the plan agree with instance '{inst.name}': groups {', '.join(names)},"
             f" {m.layers} layers, global_batch {inst.job.global_batch}, {m.heads} heads")
    if by_group:  # `tp` is the first stage's group's (ClassOuter.group_tp)
        first = classes[0].stage_groups[0] if classes else 0
        if first not in dict(by_group):
            raise sec.error("tp", f"names no tp for group {names[first]!r}, which hosts the first"
                            " stage", "give every group the plan uses its tp")
        tp = dict(by_group)[first]
    with config_errors_as(path, "plan", agree):
        plan = Plan(
            tp=tp, group_tp=by_group, micro_batch=micro_batch, cp=cp, virtual_stages=v,
            sequence_parallel=sec.boolean("sequence_parallel", False),
            recompute=Recompute.NONE if recompute == RECOMPUTE_FULL else Recompute(recompute),
            zero=zero, ep=sec.integer("ep", 1), etp=sec.integer("etp", None),
            classes=tuple(classes),
            family=sec.choice("family", FAMILIES, FAMILIES[0]),
            embedding_in_split=embedding, loss_in_split=loss, zero_bubble=zero_bubble,
        )
        plan.check_against(inst)
    return _plan_runs(sec, inst, plan)


def _group_tp(sec: Section, names: tuple[str, ...], path: str) -> tuple[tuple[int, int], ...]:
    """`tp: {GROUP: N, ...}` as ((group, tp), ...) by ascending group; () for `tp: N`."""
    if not isinstance(sec.raw.get("tp"), dict):
        return ()
    sub = sec.section("tp", names)
    out = tuple(sorted((names.index(n), check_int(sub.raw[n], path, sub.field(n), "tp"))
                       for n in names if sub.has(n)))
    if len(out) < 2:
        raise sec.error("tp", "a tp per group names each group the plan uses",
                        f"give each of {', '.join(names)} that the plan uses its tp, or write one"
                        " number, e.g. tp: 4")
    if len({t for _, t in out}) == 1:
        raise sec.error("tp", "a tp per group needs at least two different degrees",
                        "write one number, e.g. tp: 4, when every group runs the same")
    return out


def _class_partitions(c: Section, names: tuple[str, ...], stages: tuple[int, ...], path: str):
    """`partitions: {GROUP: {qkv: K, attn_core: heads, ...}}`: the layer plan of the class's
    stages on each group named (cost/loader's plan `partitions:`; absent: Megatron 1-D)."""
    if not c.has("partitions"):
        return ()
    used = tuple(dict.fromkeys(names[g] for g in stages))
    sub = c.section("partitions", used)
    out = []
    for name in used:
        if sub.has(name):
            parts = plan_partitions(sub, name)
            out.append((names.index(name), parts))
    return tuple(sorted(out))


def _group_index(path: str, names: tuple[str, ...], value: Any, field: str) -> int:
    if isinstance(value, str) and value in names:
        return names.index(value)
    shown = _shown(value) if isinstance(value, str) else describe(value)
    raise InstanceError(path, field, f"no group named {shown}",
                        _did_you_mean(value if isinstance(value, str) else "", names, "groups"))


def _class_plan_mapping(plan: Plan, inst: Instance) -> dict:
    """plan_to_mapping of a plan in the form of replica classes."""
    names = [x.name for x in inst.cluster.groups]
    all_full = plan.recompute is Recompute.NONE and all(
        c.full_recompute_layers == c.layers_per_stage for c in plan.classes)
    classes = []
    for c in plan.classes:
        item = {"replicas": c.replicas, "stages": [names[g] for g in c.stage_groups],
                "num_micro_batches": c.num_micro_batches,
                "layers_per_stage": list(c.layers_per_stage)}
        if not all_full:
            item["full_recompute_layers"] = list(c.full_recompute_layers)
        if c.partitions:
            item["partitions"] = {names[g]: dict(parts) for g, parts in c.partitions}
        classes.append(item)
    # written only where used: plans without cp or interleaving read as before
    cp = {"cp": plan.cp} if plan.cp > 1 else {}
    v = {"virtual_stages": plan.virtual_stages} if plan.virtual_stages > 1 else {}
    ep = {"ep": plan.ep} if plan.ep > 1 else {}
    etp = {"etp": plan.etp} if plan.etp is not None else {}
    slots = {k: True for k in ("embedding_in_split", "loss_in_split") if getattr(plan, k)}
    zb = {"zero_bubble": plan.zero_bubble.value} if plan.zero_bubble is not None else {}
    tp = {names[g]: t for g, t in plan.group_tp} if plan.group_tp else plan.tp
    return {"tp": tp, **cp, **v, **slots, **zb, **ep, **etp, "micro_batch": plan.micro_batch,
            "sequence_parallel": plan.sequence_parallel,
            # Only with NONE does `full` read back as the same plan (full maps to NONE).
            "recompute": RECOMPUTE_FULL if all_full else plan.recompute.value,
            "zero": plan.zero, "family": plan.family, "classes": classes}
