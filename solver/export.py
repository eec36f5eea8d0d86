"""A plan as the launch settings of Megatron-LM, torchtitan or DeepSpeed.

Each exporter takes the instance (global batch, sequence length, layers, precision) and a
plan valid for it, and returns `ExportResult(text, unsupported)`: `text` is the configuration
in the framework's own syntax and documented names; `unsupported` has one line per part of
the plan the framework cannot express, giving the plan's exact values and the closest setting
emitted instead. Nothing is dropped silently; an empty list means the export is exact.

Where the names come from (each exporter cites the same page):

- Megatron-LM: the argparse flags of `megatron/training/arguments.py`; the
  "Custom Pipeline Model Parallel Layout" docs page for `--pipeline-model-parallel-layout`.
- torchtitan: release v0.2.0 (October 2025), `torchtitan/config/job_config.py`. Older
  releases spell some of these differently (`training.batch_size`, split points).
- DeepSpeed: the "DeepSpeed Configuration JSON" docs page (deepspeed.ai/docs/config-json).

Stage layout, shared by all three: stage s holds `layers_per_stage[s]` consecutive layers, the
embedding on stage 0 and the output layer on stage pp-1. With v virtual stages each stage holds
v chunks of `layers_per_stage[s] / v` layers, and model chunk k = c*pp + s (chunk c of stage s)
takes the next layers in order: the interleaving of Megatron-LM and of torchtitan's looped
schedules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cost.specs import Attention, Instance, Plan, Precision, Recompute


@dataclass(frozen=True, slots=True)
class ExportResult:
    text: str  # the configuration, newline-terminated
    unsupported: list[str]  # "cannot express ..." items, one line each; empty when exact


# --- Megatron-LM ---------------------------------------------------------------------------
# Flag names: Megatron-LM megatron/training/arguments.py. Uneven pipelines with interleaving
# need --num-virtual-stages-per-pipeline-rank (arguments.py refuses
# --num-layers-per-virtual-pipeline-stage together with --decoder-first/last-...).

_MEGATRON_PRECISION = {Precision.BF16: "--bf16", Precision.FP16: "--fp16"}


def to_megatron(inst: Instance, plan: Plan) -> ExportResult:
    """Megatron-LM command-line arguments, one flag (and its value) per line."""
    plan.check_against(inst)
    m = inst.model
    unsupported: list[str] = []
    flags: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", plan.tp),
        ("--pipeline-model-parallel-size", plan.pp),
        ("--context-parallel-size", plan.cp),
    ]
    if plan.sequence_parallel:
        flags.append(("--sequence-parallel", None))
    flags += [
        ("--micro-batch-size", plan.micro_batch),
        ("--global-batch-size", inst.job.global_batch),
        ("--num-layers", m.layers),
        ("--seq-length", m.seq_len),
        (_MEGATRON_PRECISION[inst.job.precision], None),
    ]
    flags += _megatron_split(plan, unsupported)
    flags += _megatron_recompute(inst, plan, unsupported)
    flags += _megatron_zero(plan, unsupported)
    if plan.cp > 1 and m.seq_len % (2 * plan.cp):
        unsupported.append(
            f"seq_len {m.seq_len} with context parallel degree {plan.cp}: Megatron-LM cuts each"
            f" sequence into 2*cp = {2 * plan.cp} chunks for load balance"
            " (get_batch_on_this_cp_rank), so seq_len must be divisible by it")
    lines = [f"# Megatron-LM arguments for {inst.name} (paraplan export);"
             " flag names as in megatron/training/arguments.py"]
    lines += [flag if value is None else f"{flag} {value}" for flag, value in flags]
    return ExportResult("\n".join(lines) + "\n", unsupported)


def _megatron_split(plan: Plan, unsupported: list[str]) -> list[tuple[str, object]]:
    n, v = plan.layers_per_stage, plan.virtual_stages
    if len(set(n)) == 1:
        return [("--num-layers-per-virtual-pipeline-stage", n[0] // v)] if v > 1 else []
    flags: list[tuple[str, object]] = []
    middle = n[1:-1]
    if len(set(middle)) <= 1:
        # Megatron-core gives the remaining layers evenly to the stages between the first and
        # the last; with pp = 2 there are none, so the first stage's count fixes the split.
        if not middle or n[0] != middle[0]:
            flags.append(("--decoder-first-pipeline-num-layers", n[0]))
        if middle and n[-1] != middle[0]:
            flags.append(("--decoder-last-pipeline-num-layers", n[-1]))
    else:
        unsupported.append(
            f"the layer split {list(n)}: Megatron-LM's --decoder-first-pipeline-num-layers and"
            " --decoder-last-pipeline-num-layers make only the first and last stages uneven, and"
            f" the middle stages {list(middle)} differ (no split flag emitted, so Megatron splits"
            " evenly); Megatron-core's experimental --pipeline-model-parallel-layout"
            f" \"{_megatron_layout(plan)}\" would express it")
    if v > 1:
        flags.append(("--num-virtual-stages-per-pipeline-rank", v))
    return flags


def _megatron_layout(plan: Plan) -> str:
    """The split as a --pipeline-model-parallel-layout string ("Custom Pipeline Model Parallel
    Layout" docs page): one '|'-separated entry per model chunk in the order k = c*pp + s,
    E = embedding, t = transformer layer, L = loss (output layer)."""
    n, v, pp = plan.layers_per_stage, plan.virtual_stages, plan.pp
    chunks = []
    for c in range(v):
        for s in range(pp):
            k = n[s] // v
            parts = ["E"] if c == 0 and s == 0 else []
            parts.append("t" if k == 1 else f"t*{k}")
            if c == v - 1 and s == pp - 1:
                parts.append("L")
            chunks.append(",".join(parts))
    return "|".join(chunks)


def _megatron_recompute(inst: Instance, plan: Plan,
                        unsupported: list[str]) -> list[tuple[str, object]]:
    n, r, v = plan.layers_per_stage, plan.full_recompute_layers, plan.virtual_stages
    if not any(r):
        if plan.recompute is Recompute.SELECTIVE:
            return [("--recompute-granularity", "selective")]
        return []
    # --recompute-method block recomputes the first N layers of every model chunk (one chunk
    # per stage, v with interleaving), so stage s gets v * min(N, n_s / v) layers. Taking the
    # largest per-chunk need recomputes at least the planned count on every stage, and exactly
    # it whenever the stages that need fewer have no more layers than that.
    per_chunk = max(-(-x // v) for x in r)
    got = [v * min(per_chunk, x // v) for x in n]
    if got != list(r):
        where = "per model chunk on every pipeline stage" if v > 1 else "to every pipeline stage"
        unsupported.append(
            f"the per-stage full-recompute counts {list(r)}: Megatron-LM applies one"
            f" --recompute-num-layers {where}; emitted {per_chunk}, which"
            f" fully recomputes {got} layers per stage (more recompute than planned: slower,"
            " not more memory)")
    if plan.recompute is Recompute.SELECTIVE and got != list(n):
        flash = (" (with FlashAttention paraplan costs selective recompute as none, so this"
                 " changes nothing in its model)" if inst.job.attention is Attention.FLASH else "")
        unsupported.append(
            "selective recompute of the layers not fully recomputed: Megatron-LM's"
            " --recompute-granularity takes one value and full was emitted, so those layers keep"
            f" all their activations{flash}")
    return [("--recompute-granularity", "full"), ("--recompute-method", "block"),
            ("--recompute-num-layers", per_chunk)]


def _megatron_zero(plan: Plan, unsupported: list[str]) -> list[tuple[str, object]]:
    if plan.zero == 0:
        return []
    if plan.zero >= 2 and plan.dp * plan.cp > 1:
        sharded = "gradients and weights" if plan.zero == 3 else "gradients"
        unsupported.append(
            f"ZeRO-{plan.zero} ({sharded} sharded too): Megatron-LM's --use-distributed-optimizer"
            " shards the optimizer state only (ZeRO-1); it is emitted as the closest setting and"
            f" needs more memory than planned; for ZeRO-{plan.zero} use --to torchtitan (FSDP)"
            " or --to deepspeed")
    return [("--use-distributed-optimizer", None)]


# --- torchtitan ----------------------------------------------------------------------------
# Names: torchtitan v0.2.0, torchtitan/config/job_config.py (sections Training, Parallelism,
# ActivationCheckpoint); behaviour cited from the same release's
# torchtitan/distributed/{parallel_dims,pipeline_parallel,activation_checkpoint}.py and
# torchtitan/models/llama3/infra/parallelize.py.

TORCHTITAN_VERSION = "v0.2.0"


def to_torchtitan(inst: Instance, plan: Plan) -> ExportResult:
    """A torchtitan v0.2.0 TOML job config: [training], [parallelism], [activation_checkpoint]."""
    plan.check_against(inst)
    m = inst.model
    unsupported: list[str] = []
    replicate, shard = _torchtitan_data_parallel(plan, unsupported)

    # local_batch_size is what one data-parallel rank takes per step. With pp > 1 it is split
    # into pipeline micro-batches (local / pipeline_parallel_microbatch_size of them); with
    # pp = 1 it is one micro-batch and global_batch_size / (local * dp) gives the gradient
    # accumulation steps. Either way num_micro_batches micro-batches per optimizer step.
    local = plan.micro_batch * (plan.num_micro_batches if plan.pp > 1 else 1)
    if inst.job.precision is Precision.FP16:
        unsupported.append(
            "fp16 precision: torchtitan's training.mixed_precision_param is bfloat16 or float32;"
            " emitted bfloat16")
    training = [("local_batch_size", local), ("global_batch_size", inst.job.global_batch),
                ("seq_len", m.seq_len), ("mixed_precision_param", "bfloat16")]

    parallelism: list[tuple[str | None, object]] = [
        ("data_parallel_replicate_degree", replicate),
        ("data_parallel_shard_degree", shard),
        ("tensor_parallel_degree", plan.tp),
        ("context_parallel_degree", plan.cp),
        ("pipeline_parallel_degree", plan.pp),
    ]
    if plan.pp > 1:
        parallelism += [
            ("pipeline_parallel_schedule", "Interleaved1F1B" if plan.virtual_stages > 1 else "1F1B"),
            ("pipeline_parallel_microbatch_size", plan.micro_batch),
            (None, "one list per model chunk; rank s runs chunks s, s+pp, ...; module names are"
                   " those of torchtitan's llama3 model"),
            ("module_fqns_per_model_part", _torchtitan_model_parts(plan)),
        ]
    if plan.tp > 1 and not plan.sequence_parallel:
        unsupported.append(
            "tensor parallelism without sequence parallelism: torchtitan's TP plan always shards"
            " the norms along the sequence (SequenceParallel in"
            " models/llama3/infra/parallelize.py), i.e. sequence parallelism on")
    divisor = 2 * plan.tp * plan.cp
    if m.seq_len % divisor:
        unsupported.append(
            f"seq_len {m.seq_len}: torchtitan requires it divisible by tp * 2 * cp = {divisor}"
            " (ParallelDims.seq_len_divisor)")
    if inst.job.attention is Attention.STANDARD:
        unsupported.append(
            "job.attention = standard (s x s scores stored): torchtitan's models use fused"
            " scaled-dot-product attention, which does not store them (less memory than planned)")
    ac = _torchtitan_activation_checkpoint(plan, unsupported)

    lines = [
        f"# torchtitan {TORCHTITAN_VERSION} job config for {inst.name} (paraplan export); section"
        f" and key names as in torchtitan {TORCHTITAN_VERSION}'s torchtitan/config/job_config.py.",
        "# Add [model] name/flavor, optimizer and data yourself.",
        "",
        "[training]",
        *_toml_lines(training),
        "",
        "[parallelism]",
        *_toml_lines(parallelism),
        "",
        "[activation_checkpoint]",
    ]
    if plan.recompute is Recompute.SELECTIVE and plan.full_recompute_layers != plan.layers_per_stage:
        lines.append("# the plan's selective recompute (attention core only, Korthikanti et al."
                     " 2022) is what fused attention already does in backward; torchtitan's own"
                     " 'selective' modes recompute more (every second matmul, or whole layers)")
    lines += _toml_lines(ac)
    return ExportResult("\n".join(lines) + "\n", unsupported)


def _torchtitan_data_parallel(plan: Plan, unsupported: list[str]) -> tuple[int, int]:
    """(data_parallel_replicate_degree, data_parallel_shard_degree) for the plan's ZeRO stage.

    torchtitan v0.2.0 applies FSDP whenever dp_shard > 1 or cp > 1 (ParallelDims.fsdp_enabled),
    over the dp_shard x cp ranks: the same group paraplan's ZeRO shards over. It falls back to
    DDP only for replicate-only data parallelism, and its DDP refuses a mesh of more than one
    dimension ("DDP has not supported > 1D parallelism")."""
    dp, zero = plan.dp, plan.zero
    if dp * plan.cp == 1:
        return 1, 1  # no data-parallel group: the ZeRO stage changes nothing
    if zero == 3:
        return 1, dp
    if zero == 0:
        if plan.cp == 1 and plan.tp * plan.pp == 1:
            return dp, 1  # DDP
        if plan.cp > 1:
            unsupported.append(
                "ZeRO-0 with context parallelism: torchtitan applies FSDP whenever"
                " context_parallel_degree > 1, sharding weights, gradients and optimizer state"
                f" over the {plan.cp} cp ranks; emitted data_parallel_replicate_degree = {dp} (HSDP"
                " over cp), which needs less memory and more communication than planned")
            return dp, 1
        unsupported.append(
            "ZeRO-0 (plain data parallelism) with tensor or pipeline parallelism: torchtitan's"
            " DDP is one-dimensional only; emitted data_parallel_shard_degree ="
            f" {dp} (FSDP, ZeRO-3-like): less memory than planned, extra weight all-gathers")
        return 1, dp
    unsupported.append(
        f"ZeRO-{zero}: torchtitan's FSDP and HSDP shard the weights too (ZeRO-3); emitted"
        f" data_parallel_shard_degree = {dp}, the closest setting: less memory than planned,"
        " plus weight all-gathers in forward and backward")
    return 1, dp


def _torchtitan_model_parts(plan: Plan) -> list[list[str]]:
    """Module names of each model chunk, chunk k = c*pp + s (torchtitan's "loop" style stage
    assignment: rank s builds chunks s, s+pp, ...)."""
    n, v, pp = plan.layers_per_stage, plan.virtual_stages, plan.pp
    parts, first = [], 0
    for c in range(v):
        for s in range(pp):
            k = n[s] // v
            parts.append([f"layers.{i}" for i in range(first, first + k)])
            first += k
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def _torchtitan_activation_checkpoint(plan: Plan, unsupported: list[str]) -> list[tuple[str, object]]:
    """[activation_checkpoint] keys. "full" wraps every layer; selective_ac_option = "k" wraps
    every k-th layer a rank builds (a per-process counter, so floor(n_s / k) on stage s)."""
    n, r = plan.layers_per_stage, plan.full_recompute_layers
    if not any(r):
        return [("mode", "none")]
    if r == n:
        return [("mode", "full")]
    for k in range(2, max(n) + 1):
        if all(x // k == y for x, y in zip(n, r)):
            return [("mode", "selective"), ("selective_ac_option", str(k))]
    unsupported.append(
        f"the per-stage full-recompute counts {list(r)} of {list(n)} layers: torchtitan"
        " checkpoints every layer (mode = \"full\") or every k-th layer of each rank"
        " (selective_ac_option = \"k\"), and no k gives these counts; emitted mode = \"full\""
        " (more recompute than planned: slower, not more memory)")
    return [("mode", "full")]


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for these plain ASCII values
    assert isinstance(value, list), value
    if value and isinstance(value[0], list):
        return "[\n" + "".join(f"  {_toml_value(v)},\n" for v in value) + "]"
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"


def _toml_lines(pairs: list[tuple[str | None, object]]) -> list[str]:
    """`key = value` lines; a None key makes the value a comment line."""
    return [f"# {value}" if key is None else f"{key} = {_toml_value(value)}"
            for key, value in pairs]


# --- DeepSpeed -----------------------------------------------------------------------------
# Keys: "DeepSpeed Configuration JSON" docs page (batch size keys, zero_optimization.stage,
# bf16 / fp16, activation_checkpointing). DeepSpeed's PipelineEngine accepts ZeRO stages 0 and
# 1 only (it asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism").

def to_deepspeed(inst: Instance, plan: Plan) -> ExportResult:
    """A DeepSpeed JSON config. Model parallel degrees are not DeepSpeed config keys; they are
    listed as unsupported with the values to pass to the launcher (e.g. Megatron-DeepSpeed)."""
    plan.check_against(inst)
    n, r = plan.layers_per_stage, plan.full_recompute_layers
    bf16 = inst.job.precision is Precision.BF16
    config: dict[str, object] = {
        # train_batch_size = micro * gradient_accumulation_steps * data-parallel size (dp)
        "train_batch_size": inst.job.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.num_micro_batches,
        "zero_optimization": {"stage": plan.zero},
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": not bf16},
    }
    if any(r):
        config["activation_checkpointing"] = {
            # Partitioning the saved layer inputs across the tensor-parallel ranks is what
            # sequence parallelism gives the plan's fully recomputed layers.
            "partition_activations": plan.sequence_parallel,
            "cpu_checkpointing": False,
            "contiguous_memory_optimization": False,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        }
    unsupported: list[str] = []
    if plan.tp > 1:
        unsupported.append(
            f"tensor parallelism tp = {plan.tp}: not a DeepSpeed config key; pass"
            f" --tensor-model-parallel-size {plan.tp} to Megatron-DeepSpeed")
    if plan.sequence_parallel:
        unsupported.append("Megatron sequence parallelism: not a DeepSpeed config key; pass"
                           " --sequence-parallel to Megatron-DeepSpeed")
    if plan.pp > 1:
        unsupported.append(
            f"pipeline parallelism pp = {plan.pp} with layers per stage {list(n)}: not a"
            f" DeepSpeed config key; pass --pipeline-model-parallel-size {plan.pp} to"
            f" Megatron-DeepSpeed, or build a deepspeed.pipe.PipelineModule(num_stages={plan.pp})"
            " partitioned that way")
    if plan.virtual_stages > 1:
        unsupported.append(
            f"interleaved 1F1B with virtual_stages = {plan.virtual_stages}: DeepSpeed's pipeline"
            " engine runs one model chunk per stage")
    if plan.cp > 1:
        unsupported.append(
            f"context parallelism cp = {plan.cp}: not a DeepSpeed config key; DeepSpeed-Ulysses"
            " (Megatron-DeepSpeed's --ds-sequence-parallel-size) is a different algorithm"
            " (all-to-all over heads, not the ring exchange of K/V the plan costs)")
    if plan.zero >= 2 and plan.pp > 1:
        unsupported.append(
            f"ZeRO-{plan.zero} with pipeline parallelism: DeepSpeed's PipelineEngine accepts"
            " ZeRO stages 0 and 1 only")
    if plan.recompute is Recompute.SELECTIVE and r != n:
        unsupported.append(
            "selective recompute: not a DeepSpeed config feature; it is Megatron-LM's"
            " --recompute-granularity selective (see --to megatron)")
    if any(r):
        unsupported.append(
            f"which layers are fully recomputed ({list(r)} of {list(n)} per stage): the"
            " activation_checkpointing section only configures deepspeed.checkpointing; the"
            " training script decides which layers call it (see --to megatron for the flags)")
    return ExportResult(json.dumps(config, indent=2) + "\n", unsupported)


# Format name -> (exporter, comment prefix for the "cannot express" lines, or None where the
# syntax has no comments: JSON).
FORMATS = {
    "megatron": (to_megatron, "#"),
    "torchtitan": (to_torchtitan, "#"),
    "deepspeed": (to_deepspeed, None),
}
