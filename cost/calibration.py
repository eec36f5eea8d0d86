"""Predict published training runs (schema: shared/calibration/README.md) and score the model.

Each row becomes an Instance + Plan and is simulated like any user plan; nothing here is fitted
per row. Unknown fields get these documented defaults:

    micro_batch null         -> 1 (Megatron-LM's default --micro-batch-size)
    recompute unknown        -> the source family's launcher default (SOURCE_FAMILIES below);
                                for a source of no known family, the least recomputation under
                                which the run fits memory (OTHER_FAMILY)
    virtual_stages null      -> 1 (no interleaving)
    sequence_parallel null   -> false (and true with tp 1 -> false, as Megatron-LM's
                                validate_args sets it)
    zero null                -> 0
    inter_node_Gbps null     -> the NIC of the vendor's reference node for that GPU
                                (DEFAULT_NIC_GBIT_PER_S below)
    latencies                -> 5 us inside a node, 10 us between nodes (NCCL-typical)
    attention kernel         -> flash (FlashAttention / cuDNN fused attention), except rows
                                from before fused attention existed (source year < 2022)
                                which use standard attention
    framework, dropout       -> from the row's source family (SOURCE_FAMILIES below): what the
                                source's code base runs and the dropout its configs train with;
                                a source of no known family gets Megatron-LM and no dropout
    optimizer                -> the source family's (SOURCE_FAMILIES), except where a model's
                                own config says otherwise (OPTIMIZER_BY_ROW_PREFIX)

A row that cannot be modelled (e.g. global batch not divisible into micro-batches) is
reported with its reason, never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from paraplan.cost import units
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.loader import (Section, check_head_shape, default_layer_split, read_yaml,
                         load_catalogue)
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import (Attention, ClusterSpec, Framework, GpuSpec, Instance, JobSpec, Link, Mlp, ModelSpec,
                        Optimizer, Plan, Precision, Recompute)

# Per-GPU NIC of the reference systems: DGX-1 V100 (4x100 Gb/s IB for 8 GPUs, taken as 100 per
# GPU as Megatron's V100 cluster had), DGX A100 (8x 200 Gb/s HDR ConnectX-6), DGX H100/H200
# (8x 400 Gb/s NDR ConnectX-7). Source: NVIDIA DGX-1 / DGX A100 / DGX H100 datasheets.
DEFAULT_NIC_GBIT_PER_S = {
    "V100-SXM-32GB": 100, "A100-SXM4-40GB": 200, "A100-SXM4-80GB": 200,
    "H100-SXM5-80GB": 400, "H100-SXM5-96GB": 400, "H200-SXM-141GB": 400,
}
@dataclass(frozen=True, slots=True)
class SourceFamily:
    """What a published source runs: its framework, the dropout of its model configs, the
    recomputation its launcher uses when a row says `recompute: unknown`, and its attention
    kernel when the source predates fused (flash) attention in its framework (None: by the
    source's year, FIRST_FUSED_ATTENTION_YEAR)."""

    name: str
    prefix: str  # the row's `source` starts with this
    framework: Framework
    dropout: float
    default_recompute: str = "full"
    attention: Attention | None = None
    optimizer: Optimizer = Optimizer.ADAM
    tp_comm_overlap: bool = False  # the source's recipes run Transformer Engine's tp overlap
    # the recomputation every run of the source used, where its own numbers show it and the
    # row's `recompute` field does not (None: the row's field holds)
    recompute: str | None = None


# Megatron-LM's GPT configs (examples/pretrain_gpt*.sh, SC'21 and Korthikanti runs) and NeMo's
# GPT-3 configs (conf/training/gpt3/*.yaml) use 0.1 attention and hidden dropout; MPT
# (llm-foundry yamls: attn_pdrop 0, resid_pdrop 0), Llama-family NeMo configs and torchtitan
# train without dropout. The Narayanan ZeRO-3 baseline ran DeepSpeed (SC'21 Sec. 5.2).
# Attention kernels: Megatron-LM before 2023 ran the attention core as two batched GEMMs around
# its fused scale-mask-softmax kernel and a dropout, storing the s x s scores (FlashAttention,
# Dao et al., arXiv 2205.14135, came out in May 2022; Megatron-LM added --use-flash-attn in
# 2023). Korthikanti et al.'s selective recomputation exists precisely to avoid storing those
# scores (their Sec. 4.2), and the SC'21 and Megatron v1 runs predate it; DeepSpeed's 2021
# ZeRO-3 baseline ran the same Megatron model code.
SOURCE_FAMILIES = (
    SourceFamily("narayanan21-zero3", "Narayanan et al., SC'21", Framework.DEEPSPEED, 0.1,
                 attention=Attention.STANDARD),
    SourceFamily("narayanan21", "Narayanan et al., SC'21", Framework.MEGATRON, 0.1,
                 attention=Attention.STANDARD),
    SourceFamily("korthikanti22", "Korthikanti et al. 2022", Framework.MEGATRON, 0.1,
                 attention=Attention.STANDARD),
    # NeMo-Megatron-Launcher's GPT-3 5B scaling table (README 7.1.2, first published at commit
    # 3579cdb3, 2022-09-07) ran conf/training/gpt3/5b.yaml of that commit: micro-batch 2,
    # activations_checkpoint_granularity full with method block and num_layers 0 (NeMo's block
    # method checkpoints only the first num_layers layers: none), optim distributed_fused_adam,
    # and NeMo's 2022 GPT layer with Megatron's fused masked softmax (no FlashAttention before
    # NeMo 1.18, 2023). The rows' `recompute: full` transcribes the granularity, not the count.
    SourceFamily("nemo-launcher", "NVIDIA/NeMo-Megatron-Launcher", Framework.MEGATRON, 0.1,
                 attention=Attention.STANDARD, optimizer=Optimizer.APEX_DISTRIBUTED_ADAM,
                 recompute="none"),
    # NeMo-Framework-Launcher 24.07 training configs: activations_checkpoint_granularity null
    # (no recomputation) for GPT-3, Llama 3 and Nemotron 8B/22B, block with 0 layers for Llama 2
    # (none), selective only for Nemotron-340B (equal to none under FlashAttention here).
    # TP overlap: the rows' parallel layouts are NeMo 2.0's recipes (GPT-3 175B at tp 4, pp 8,
    # vp 6: nemo/collections/llm/recipes/gpt3_175b.py; the 24.07 launcher's gpt3/175b*.yaml
    # use vp 12), whose performance mode adds MegatronCommOverlapCallback(tp_comm_overlap=True)
    # with the userbuffers configs of recipes/tp_overlap_configs/userbuffers.py; the launcher's
    # own 24.07 configs agree for Llama 2/3 70B, GPT-3 20B and Nemotron 8B/22B
    # (ub_tp_comm_overlap: true) but set it false for gpt3/175b and nemotron_340b.
    # Optimizer: every 24.07 training config has optim.name distributed_fused_adam, and every
    # launcher training example (examples/training/*/*/*.sh) adds optim.grad_sync_dtype=bf16
    SourceFamily("nemo", "NVIDIA/NeMo", Framework.MEGATRON, 0.0, default_recompute="none",
                 tp_comm_overlap=True, optimizer=Optimizer.APEX_DISTRIBUTED_ADAM),
    SourceFamily("mosaicml", "mosaicml/llm-foundry", Framework.COMPOSER, 0.0),
    SourceFamily("torchtitan", "pytorch/torchtitan", Framework.TORCHTITAN, 0.0),
    # Megatron-LM v1 (2020 blog, Table 1): the rows say `recompute: none`, but the blog's own
    # 62.4 TFLOP/s for the 1.2B model at 1,288 ms per batch of 8 x 1024 tokens is 80.4 TFLOP
    # per iteration, which is 4 passes of the model's 2.0e13 FLOPs per pass (96 B s l h^2
    # (1 + s / 6h) = 8.25e13, 64.0 TFLOP/s, Narayanan et al.'s count with the recomputed
    # forward) and not 3 (6.2e13, 48.0 TFLOP/s): the runs recomputed every layer, as
    # Megatron-LM v1's example scripts pass --checkpoint-activations.
    SourceFamily("megatron-v1", "nv-adlr/nv-adlr.github.io", Framework.MEGATRON, 0.1,
                 attention=Attention.STANDARD, recompute="full"),
)


# Rows whose model's config names another optimizer than its family's: NeMo-Framework-Launcher
# 24.07 conf/training/nemotron/nemotron_340b.yaml sets optim.dtype: bf16 (the only 24.07 training
# config that does)
OPTIMIZER_BY_ROW_PREFIX = {"nemo2407-Nemotron-340B-": Optimizer.APEX_DISTRIBUTED_ADAM_BF16}


# Rows of llm-foundry's June 2023 benchmark sweep, run on PyTorch 1.13 (scripts/train/
# benchmarking/sweep.sh before October 2023: IMAGE mosaicml/pytorch:1.13.1_cu117; their README
# rows give precision "bf16" and MP mode "PURE", where the rows of the October 2023 sweep, run
# with IMAGE mosaicml/pytorch:2.1.0_cu121, give "amp_bf16" and "DEFAULT"): the whole A100 40GB
# table and the A100 80GB table's two 70B rows. PyTorch 1.13's non-reentrant checkpoint replays
# whole blocks; stopping early became its default in 2.1 (pytorch/pytorch#96866), so these runs
# get job.recompute_early_stop false.
TORCH_BEFORE_2_1_BY_ROW_PREFIX = ("mpt-a100-40-", "mpt-a100-80-70b-")


def row_recompute_early_stop(row: dict) -> bool | None:
    """job.recompute_early_stop of a row's run: false where it ran PyTorch before 2.1 (above),
    else the framework's default (None)."""
    return False if row["id"].startswith(TORCH_BEFORE_2_1_BY_ROW_PREFIX) else None


def row_optimizer(row: dict, family: SourceFamily) -> Optimizer:
    for prefix, optimizer in OPTIMIZER_BY_ROW_PREFIX.items():
        if row["id"].startswith(prefix):
            return optimizer
    return family.optimizer


def source_family(row: dict) -> SourceFamily:
    """The family of a calibration row, from its source (and ZeRO-3 for Narayanan's Table 2)."""
    source = row.get("source", "")
    for fam in SOURCE_FAMILIES:
        if not source.startswith(fam.prefix):
            continue
        if fam.name == "narayanan21-zero3" and (row["config"].get("zero") or 0) != 3:
            continue
        return fam
    return OTHER_FAMILY


# A source none of the families above names (a paper, a vendor table) is priced with the
# documented defaults of a modern Megatron-style stack rather than dropped: Megatron-LM's
# framework behaviour, no dropout (as current LLM recipes), FlashAttention from 2022 on, and,
# where the row's recompute is unknown, the least recomputation under which the run fits
# memory ("fit": none, then selective, then full), since every published run did fit.
OTHER_FAMILY = SourceFamily("other", "", Framework.MEGATRON, 0.0, default_recompute="fit")


# The published rows, shipped with the package (cost/published/README.md names the sources):
# verbatim copies of shared/calibration/published.yaml and published-fp8.yaml.
PUBLISHED_DIR = Path(__file__).resolve().parent / "published"
BUNDLED_FILES = (PUBLISHED_DIR / "published.yaml", PUBLISHED_DIR / "published-fp8.yaml")


def load_published(paths: list[str] | None = None) -> list[dict]:
    """The rows of `paths` (each checked by load_rows), or of both bundled files when None."""
    rows: list[dict] = []
    for path in paths or [str(p) for p in BUNDLED_FILES]:
        rows.extend(load_rows(path))
    return rows


INTRA_LATENCY_US = 5.0
INTER_LATENCY_US = 10.0
FIRST_FUSED_ATTENTION_YEAR = 2022  # FlashAttention, Dao et al., NeurIPS 2022


@dataclass(frozen=True)
class RowResult:
    id: str
    gpu: str
    source: str
    measured_iter_time_s: float
    predicted_iter_time_s: float | None
    reason: str | None = None  # why the row could not be modelled
    fits_memory: bool | None = None
    # whether the modelled plan recomputes whole layers (the row's recompute, resolved as
    # row_to_instance_plan resolves "unknown"): cost/trust.py cuts residuals by it
    full_recompute: bool | None = None

    @property
    def error(self) -> float | None:
        """Signed relative error (predicted - measured) / measured."""
        if self.predicted_iter_time_s is None:
            return None
        return (self.predicted_iter_time_s - self.measured_iter_time_s) / self.measured_iter_time_s


def _source_year(source: str) -> int | None:
    years = [int(y) for y in re.findall(r"(?<!\d)(20[12]\d)(?!\d)", source)]
    return min(years) if years else None


def row_to_instance_plan(row: dict, catalogue: dict[str, GpuSpec]) -> tuple[Instance, Plan]:
    md, cl, cf = row["model"], row["cluster"], row["config"]
    family = source_family(row)
    model = ModelSpec(name=row["id"], layers=md["layers"], hidden=md["hidden"], heads=md["heads"],
                      kv_heads=md.get("kv_heads") or md["heads"], ffn=md["ffn"], vocab=md["vocab"],
                      seq_len=md["seq_len"], mlp=Mlp(md["mlp"]), dropout=family.dropout)
    gpu_name = cl["gpu"]
    if gpu_name not in catalogue:
        raise ConfigError(f"GPU type {gpu_name!r} is not in the catalogue")
    # a run on part of one node (1 or 4 GPUs of an 8-GPU server) is a one-node cluster
    gpn = min(cl["gpus_per_node"], cl["num_gpus"])
    if cl["num_gpus"] % gpn:
        raise ConfigError("num_gpus is not a multiple of gpus_per_node")
    nic = cl.get("inter_node_Gbps_per_gpu") or DEFAULT_NIC_GBIT_PER_S.get(gpu_name)
    if nic is None:
        raise ConfigError("inter_node_Gbps_per_gpu is unknown and the GPU has no default NIC")
    cluster = ClusterSpec(
        gpu=catalogue[gpu_name], nodes=cl["num_gpus"] // gpn, gpus_per_node=gpn,
        intra_node=Link(bw_bytes_per_s=units.gbytes_per_s_to_bytes_per_s(cl["intra_node_GBps_per_gpu"]) / 2,
                        latency_s=units.us_to_s(INTRA_LATENCY_US)),
        inter_node=Link(bw_bytes_per_s=units.gbit_per_s_to_bytes_per_s(nic),
                        latency_s=units.us_to_s(INTER_LATENCY_US)))
    year = _source_year(row.get("source", ""))
    attention = family.attention or (Attention.STANDARD if year is not None and year < FIRST_FUSED_ATTENTION_YEAR
                                     else Attention.FLASH)
    job = JobSpec(global_batch=cf["global_batch"], precision=Precision(row.get("precision", "bf16")),
                  optimizer=row_optimizer(row, family), attention=attention,
                  framework=family.framework,
                  tp_comm_overlap=family.tp_comm_overlap,
                  recompute_early_stop=row_recompute_early_stop(row))
    inst = Instance(name=row["id"], model=model, cluster=cluster, job=job, source="calibration")

    mb = cf.get("micro_batch") or 1
    dp = cf["dp"]
    if cf["global_batch"] % (dp * mb):
        raise ConfigError(f"global_batch {cf['global_batch']} is not a multiple of dp*micro_batch = {dp * mb}")
    rc = cf.get("recompute") or "unknown"
    rc = family.default_recompute if rc == "unknown" else rc
    rc = family.recompute or rc
    pp, v = cf["pp"], cf.get("virtual_stages") or 1
    split = default_layer_split(model.layers, pp, v)

    def plan_with(mode: str) -> Plan:
        return Plan(tp=cf["tp"], pp=pp, dp=dp, cp=cf.get("cp") or 1, micro_batch=mb,
                    num_micro_batches=cf["global_batch"] // (dp * mb),
                    # Megatron-LM's validate_args turns sequence parallelism off at tp 1
                    sequence_parallel=bool(cf.get("sequence_parallel")) and cf["tp"] > 1,
                    recompute=Recompute.SELECTIVE if mode == "selective" else Recompute.NONE,
                    zero=cf.get("zero") or 0, virtual_stages=v, layers_per_stage=split,
                    full_recompute_layers=split if mode == "full" else (0,) * pp)
    if rc != "fit":
        return inst, plan_with(rc)
    for mode in ("none", "selective", "full"):
        if simulate(inst, plan_with(mode)).fits:
            return inst, plan_with(mode)
    return inst, plan_with("full")


def predict_rows(rows: list[dict], catalogue: dict[str, GpuSpec] | None = None,
                 net: NetEfficiency | None = None) -> list[RowResult]:
    catalogue = catalogue if catalogue is not None else load_catalogue()
    net = net if net is not None else NetEfficiency()
    out = []
    for row in rows:
        measured = float(row["measured"]["iter_time_s"])
        base = dict(id=row["id"], gpu=row["cluster"]["gpu"], source=row.get("source", ""),
                    measured_iter_time_s=measured)
        try:
            inst, plan = row_to_instance_plan(row, catalogue)
            bd = simulate(inst, plan, net)
        except (ConfigError, KeyError, ValueError) as e:
            out.append(RowResult(**base, predicted_iter_time_s=None, reason=str(e)))
            continue
        out.append(RowResult(**base, predicted_iter_time_s=bd.iter_time_s, fits_memory=bd.fits,
                             full_recompute=any(plan.full_recompute_layers)))
    return out


def mape(results: list[RowResult]) -> float:
    errs = [abs(r.error) for r in results if r.error is not None]
    return sum(errs) / len(errs) if errs else float("nan")


def load_rows(path: str) -> list[dict]:
    """The rows of a calibration file, each checked against the schema of
    shared/calibration/README.md, so that predict_rows meets only rows it can model or explain.

    Every problem raises one InstanceError naming the row's field, e.g. `[3].config.pp`; the
    file's limits are cost/loader.py's for calibration files (64 MiB, 200,000 nodes). Fields
    the schema does not list are kept and ignored, and null means "not published" where the
    schema allows it.
    """
    rows = read_yaml(path, calibration=True)
    if not isinstance(rows, list) or not rows:
        raise InstanceError(path, "<top level>", "expected a non-empty list of rows",
                            "write one '- id: ...' entry per published run")
    for i, row in enumerate(rows):
        _check_row(Section(row, path, f"[{i}]", None))
    return rows


def _check_row(row: Section) -> None:
    row.string("id")
    if row.has("source"):
        row.string("source")
    row.choice("precision", tuple(p.value for p in Precision), Precision.BF16.value)

    model = row.section("model", None)
    layers = model.integer("layers")  # ranges as in an instance (cost/ranges.py)
    for key in ("ffn", "vocab", "seq_len"):
        model.integer(key)
    heads = model.integer("heads")
    kv_heads = model.integer("kv_heads") if model.has_value("kv_heads") else heads
    check_head_shape(model, model.integer("hidden"), heads, kv_heads)  # as the instance loader
    model.choice("mlp", tuple(m.value for m in Mlp))

    cluster = row.section("cluster", None)
    cluster.string("gpu")
    cluster.integer("num_gpus")
    cluster.integer("gpus_per_node")
    cluster.number("intra_node_GBps_per_gpu")
    if cluster.has_value("inter_node_Gbps_per_gpu"):
        cluster.number("inter_node_Gbps_per_gpu")

    config = row.section("config", None)
    for key in ("tp", "dp", "global_batch"):
        config.integer(key)
    pp = config.integer("pp")
    for key in ("cp", "micro_batch"):
        if config.has_value(key):
            config.integer(key)
    virtual_stages = config.integer("virtual_stages") if config.has_value("virtual_stages") else 1
    if config.has_value("recompute"):
        config.choice("recompute", ("none", "selective", "full", "unknown"))
    if config.has_value("sequence_parallel"):
        config.boolean("sequence_parallel", False)
    if config.has_value("zero"):
        config.integer("zero")
    if layers % virtual_stages:
        raise config.error("virtual_stages", f"{virtual_stages} chunks per stage do not divide"
                           f" the {layers} layers", "give the interleaving the run used")
    if layers // virtual_stages < pp:
        raise config.error("pp", f"{pp} x {virtual_stages} chunks: more pipeline stages than the"
                           f" {layers} layers", "give the pipeline degree the run used")

    row.section("measured", None).number("iter_time_s")
