"""The one instance reader: an instance file in either form, or one assembled from part files.

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
      asymmetric_pipelines: false    # group format: a pipeline across groups may give each
                                     #   stage its own data-parallel degree (objective: mean)
      memory_reserve_gib: 2          # kept free on every GPU when planning; default 2, 0 allowed
      objective: p90                 # what the planner minimises: mean (the predicted time) or
                                     #   pNN, its NN-th percentile under the model's out-of-
                                     #   sample error (cost/trust.py; README)


Values of `search:` that the instance's shape or framework can never run are refused
(cost/readers/search.py).

Split files (`load_instance_parts`): a cluster file holds the `cluster:` section and optionally
`gpu_types:`; a job file holds `job:` and optionally `search:`; the model may come from a
Hugging Face config.json instead of `model:` (cost/hf_config.py). Each replaces the matching
section of an instance file, or, with no instance file, the three together make one. Examples:
instances/clusters/ and instances/jobs/.

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
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from paraplan.cost.errors import InstanceError
from paraplan.cost.hf_config import model_from_hf_config
from paraplan.cost.ranges import out_of_range, range_text
from paraplan.cost.space_rules import search_refusal
from paraplan.cost.specs import Cluster, Instance, PipelineSchedule, SearchSpace
from paraplan.cost.specs import Scenario, Switching
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.readers.fields import Section, describe
from paraplan.cost.readers.gpus import catalogue_with_gpu_types
from paraplan.cost.readers.model import MODEL_KEYS, model_from_section
from paraplan.cost.readers.job import JOB_KEYS, job_from_section
from paraplan.cost.readers.checks import (check_gpu_features, check_gpu_prices, check_job_options,
                                          check_megatron_only, check_moe_overlaps)
from paraplan.cost.readers.search import SEARCH_KEYS, release_search_of, search_from_section
from paraplan.cost.readers.cluster import (CLUSTER_KEYS, GROUPS_CLUSTER_KEYS, group_from_section,
                                           is_groups_mapping, network_from_section)
from paraplan.cost.readers.scenarios import (NOMINAL, SWITCHING_KEYS, read_scenarios,
                                             read_switching, read_timeline)


_TOP_KEYS = ("name", "model", "cluster", "job", "gpu_types", "search")
_CLUSTER_FILE_KEYS = ("cluster", "gpu_types")
_JOB_FILE_KEYS = ("job", "search")


def load_instance(path: str | Path) -> Instance:
    """The instance file at `path`, read once, in either form: a flat `cluster:` as its one
    node group (cost/specs.Cluster.of), a `cluster:` with `groups:` as the groups it lists."""
    return load_instance_parts(path, hf_config=None, cluster=None, job=None)


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
    name = model_spec = group = job_spec = None
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
            group = group_from_section(top.section("cluster", CLUSTER_KEYS), gpus)
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
        group = group_from_section(top.section("cluster", CLUSTER_KEYS),
                                catalogue_with_gpu_types(top))
    if job is not None:
        path = str(job)
        sources.append(path)
        top = Section(read_yaml(path), path, "", _JOB_FILE_KEYS)
        job_spec = job_from_section(top.section("job", JOB_KEYS))
        if top.has("search"):
            search_sec = top.section("search", SEARCH_KEYS)
    assert model_spec and group and job_spec  # each comes from a part or the instance
    source = " + ".join(sources)
    check_megatron_only(source, job_spec, model_spec)  # before the search meets framework rules
    search = SearchSpace() if search_sec is None else search_from_section(search_sec, job_spec.framework)
    search = release_search_of(source, search, job_spec,
                               frozenset(search_sec.raw) if search_sec is not None else frozenset())
    if name is None:
        name = f"{model_spec.name}-{group.num_gpus}x{group.gpu.name}"
    return _checked(Instance(name=name, model=model_spec, cluster=Cluster.of(group), job=job_spec,
                             search=search, source=source), search_sec)


def _checked(inst: Instance, search_sec: Section | None) -> Instance:
    """`inst` after the checks every instance reader makes of the whole: MoE layers' and latent
    attention's framework, what the job needs of every GPU type and its options against the model and the
    space, and the values listed in `search_sec` (None: none) that no plan can run
    (cost/space_rules.search_refusal), named in that section's file."""
    source, job, model, search = inst.source, inst.job, inst.model, inst.search
    check_megatron_only(source, job, model)
    gpus = tuple(g.gpu for g in inst.cluster.groups)
    check_gpu_features(source, job, gpus)
    check_gpu_prices(source, job, gpus)
    check_moe_overlaps(source, job, model, search)
    check_job_options(source, job, model, search)
    if search_sec is not None:
        refusal = search_refusal(search, model, inst.cluster, job, frozenset(search_sec.raw))
        if refusal is not None:
            raise search_sec.error(refusal.key, refusal.problem, refusal.fix)
    return inst


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
    net = (network_from_section(top.section("cluster", GROUPS_CLUSTER_KEYS), gpus) if groups
           else None)
    nominal = net.cluster() if groups else Cluster.of(
        group_from_section(top.section("cluster", CLUSTER_KEYS), gpus))
    nominal_inst = _checked(Instance(name=name, model=model, cluster=nominal, job=job, search=search,
                                     source=path), search_sec if groups else None)
    scenarios = read_scenarios(top, net, nominal) if top.has("scenarios") else ()
    timeline = read_timeline(top, scenarios or [Scenario(name=NOMINAL, cluster=nominal)]) \
        if top.has("timeline") else ()
    switching = read_switching(top.section("switching", SWITCHING_KEYS)) \
        if top.has("switching") else Switching()
    return replace(nominal_inst, scenarios=tuple(scenarios), timeline=timeline, switching=switching)

_GROUP_TOP_KEYS = ("name", "model", "cluster", "job", "gpu_types", "search", "scenarios", "timeline",
             "switching")
