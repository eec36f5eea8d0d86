"""solver/export/ and `paraplan export`: plans written as Megatron-LM arguments, torchtitan 0.2.x
TOML and DeepSpeed JSON.

Every emitted name and value is checked against the fact tables of tests/solver/export_facts.py,
read from the frameworks' own parsers (tests/solver/test_export_frameworks.py runs those parsers
where the frameworks are installed). Expected values are worked out by hand from the plan
(noted beside each case); the predicted time of an emitted configuration is checked against
cost/simulate.py run on the configuration written out by hand.
"""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_writer import plan_file_mapping, plan_to_mapping
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Attention, Framework, Mlp, Precision, Recompute
from paraplan.cost.plan_specs import Plan
from paraplan.solver.commands.cli import main as cli_main
from paraplan.solver.export import ExportRefused, to_deepspeed, to_megatron, to_torchtitan
from paraplan.solver.commands.export import register, render
from tests.solver.export_facts import (DEEPSPEED_V0_19, MEGATRON_EXCLUSIVE, MEGATRON_MAIN_D98E8A6,
                                       MEGATRON_NARGS,
                                       TORCHTITAN_SCHEDULES, TORCHTITAN_V0_2_0,
                                       TORCHTITAN_V0_2_0_CONVERTERS,
                                       TORCHTITAN_V0_2_0_LLAMA3_FLAVORS, check_value)

tomllib = pytest.importorskip("tomllib")  # standard library from Python 3.11

ROOT = Path(__file__).resolve().parents[2]
TINY_PATH = ROOT / "instances" / "tiny-gpt-8xA100.yaml"  # 8 GPUs, 8 layers, batch 32, seq 1024, gelu
TINY = load_instance(TINY_PATH)
SMALL = load_instance(ROOT / "instances" / "small-gpt-16xA100.yaml")  # 16 GPUs, 12 layers, batch 64
LLAMA8B = load_instance(ROOT / "instances" / "llama3-8b-64xH100.yaml")  # 64 GPUs, 32 layers, batch 512


def swiglu(inst):
    """The same instance with a SwiGLU model (torchtitan has no GELU model)."""
    return replace(inst, model=replace(inst.model, mlp=Mlp.SWIGLU))


def with_framework(inst, framework: Framework):
    return replace(inst, job=replace(inst.job, framework=framework))


TINY_SW, SMALL_SW = swiglu(TINY), swiglu(SMALL)


def make_plan(*, layers, full=None, **kw) -> Plan:
    return Plan.flat(layers_per_stage=tuple(layers), pp=len(layers),
                full_recompute_layers=tuple(full or [0] * len(layers)), **kw)


# --- parsing what the exporters write, against the fact tables -----------------------------

def megatron_args(inst, plan) -> tuple[dict, list[str], list[str]]:
    """(flags, environment lines, deviations); every flag in the fact table, given once, with
    a value of the listed type or choice."""
    res = to_megatron(inst, plan)
    lines = res.text.splitlines()
    start = lines.index("MEGATRON_ARGS=(")
    assert lines[-1] == ")"
    env = [line for line in lines[:start] if not line.startswith("#")]
    args: dict = {}
    for line in lines[start + 1:-1]:
        words = shlex.split(line, comments=True)
        if not words:
            continue
        flag, *value = words
        assert flag in MEGATRON_MAIN_D98E8A6, f"{flag} is not a Megatron-LM flag"
        assert flag not in args, f"{flag} given twice"
        kind = MEGATRON_MAIN_D98E8A6[flag]
        if flag in MEGATRON_NARGS:  # one or more values, each checked
            assert value, line
            for v in value:
                check_value(kind, v, flag)
            args[flag] = value
            continue
        assert len(value) == (0 if kind is None else 1), line
        if kind is not None:
            typed = {int: int, float: float}.get(kind, str)(value[0])
            check_value(kind if kind not in (int, float) else kind, typed, flag)
        args[flag] = value[0] if value else True
    assert sum(f in args for f in MEGATRON_EXCLUSIVE) <= 1
    if any(f.startswith("--account-for-") for f in args):  # TransformerConfig: exclusive
        assert not any(f.startswith("--decoder-") or f == "--pipeline-model-parallel-layout" for f in args)
    if "--overlap-param-gather" in args:  # validate_args
        assert "--overlap-grad-reduce" in args
        assert "--use-distributed-optimizer" in args or "--use-megatron-fsdp" in args
    if "--tp-comm-overlap" in args:  # validate_args: TP overlap needs sequence parallelism
        assert "--sequence-parallel" in args
    if "--use-megatron-fsdp" in args:
        assert args["--ckpt-format"] == "fsdp_dtensor"
        assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in " ".join(env)
    elif int(args["--tensor-model-parallel-size"]) > 1 or int(args["--context-parallel-size"]) > 1:
        assert any(e.startswith("export CUDA_DEVICE_MAX_CONNECTIONS=1") for e in env)
    return args, env, res.unsupported


def megatron_split(args: dict, layers: int, pp: int) -> list[int]:
    """The split Megatron-core builds from these flags: the first/last counts where given, the
    remaining layers evenly over the other stages; with the embedding/loss accounted, layers + 1
    + 1 slots evenly, the embedding's and loss's stage one layer fewer (get_num_layers_to_build)."""
    e = int("--account-for-embedding-in-pipeline-split" in args)
    l_ = int("--account-for-loss-in-pipeline-split" in args)
    if e or l_:
        assert (layers + e + l_) % pp == 0
        split = [(layers + e + l_) // pp] * pp
        split[0] -= e
        split[-1] -= l_
        return split
    first = int(args.get("--decoder-first-pipeline-num-layers", 0)) or None
    last = int(args.get("--decoder-last-pipeline-num-layers", 0)) or None
    rest_stages = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    assert rest_stages == 0 and rest == 0 or rest % rest_stages == 0
    even = [rest // rest_stages] * rest_stages if rest_stages else []
    return ([first] if first else []) + even + ([last] if last else [])


def toml_sections(cfg: dict, prefix: str = "") -> dict:
    """Flatten nested TOML tables into {'quantize.linear.float8': {...}, ...}."""
    out = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in TORCHTITAN_V0_2_0:
            out.update(toml_sections(value, name + "."))
        else:
            out[name] = value
    return out


def torchtitan_config(inst, plan) -> tuple[dict, list[str]]:
    res = to_torchtitan(inst, plan)
    cfg = toml_sections(tomllib.loads(res.text))
    for section, keys in cfg.items():
        assert section in TORCHTITAN_V0_2_0, section
        for key, value in keys.items():
            assert key in TORCHTITAN_V0_2_0[section], (section, key)
            check_value(TORCHTITAN_V0_2_0[section][key], value, f"{section}.{key}")
    assert cfg["model"]["name"] == "llama3"
    assert set(cfg["model"].get("converters", [])) <= set(TORCHTITAN_V0_2_0_CONVERTERS)
    # torchtitan's batch arithmetic (train.py, v0.2.0): dp = replicate * shard ranks each take
    # local_batch_size per step; grad accumulation = global / (local * dp); with pp the local
    # batch is split into local / microbatch_size pipeline micro-batches.
    t, p = cfg["training"], cfg["parallelism"]
    e = res.emitted.plan
    dp = p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"]
    assert dp == e.dp
    assert dp * p["tensor_parallel_degree"] * p["pipeline_parallel_degree"] \
        * p["context_parallel_degree"] == inst.cluster.num_gpus
    accumulation = t["global_batch_size"] // (t["local_batch_size"] * dp)
    assert accumulation * t["local_batch_size"] * dp == t["global_batch_size"] == inst.job.global_batch
    if e.pp > 1:
        assert p["pipeline_parallel_schedule"] in TORCHTITAN_SCHEDULES
        per_step = t["local_batch_size"] // p["pipeline_parallel_microbatch_size"]
        micro = p["pipeline_parallel_microbatch_size"]
    else:
        per_step, micro = 1, t["local_batch_size"]
    assert micro == e.micro_batch
    assert accumulation * per_step == e.num_micro_batches
    assert t["seq_len"] == inst.model.seq_len
    return cfg, res.unsupported


def deepspeed_config(inst, plan) -> tuple[dict, list[str], list[str]]:
    res = to_deepspeed(inst, plan)
    cfg = json.loads(res.text)
    for key, value in cfg.items():
        assert key in DEEPSPEED_V0_19, key
        kind = DEEPSPEED_V0_19[key]
        if isinstance(kind, dict):
            for sub, v in value.items():
                assert sub in kind, (key, sub)
                check_value(kind[sub], v, f"{key}.{sub}")
        else:
            check_value(kind, value, key)
    e = res.emitted.plan
    assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"]
                                       * cfg["gradient_accumulation_steps"] * e.dp)
    return cfg, res.unsupported, list(res.emitted.notes)


def layers_of(part: list[str]) -> list[int]:
    return [int(name.split(".")[1]) for name in part if name.startswith("layers.")]


def mentions(lines: list[str], *needles: str) -> bool:
    return any(all(n in item for n in needles) for item in lines)


# --- model shape ---------------------------------------------------------------------------

def test_megatron_writes_the_whole_model_shape():
    # Llama-3 8B: 32 layers, hidden 4096, ffn 14336, 32 heads of 128, 8 KV groups, vocab 128256,
    # SwiGLU, untied; Megatron's defaults (dropout 0.1, biases, tied, GELU, MHA) all overridden.
    plan = make_plan(tp=8, dp=8, micro_batch=1, num_micro_batches=64, sequence_parallel=True,
                     zero=1, layers=[32])
    args, env, unsupported = megatron_args(LLAMA8B, plan)
    expected = {
        "--num-layers": "32", "--hidden-size": "4096", "--ffn-hidden-size": "14336",
        "--num-attention-heads": "32", "--kv-channels": "128", "--group-query-attention": True,
        "--num-query-groups": "8", "--seq-length": "8192", "--max-position-embeddings": "8192",
        "--swiglu": True, "--untie-embeddings-and-output-weights": True,
        "--normalization": "RMSNorm", "--position-embedding-type": "rope",
        "--disable-bias-linear": True, "--hidden-dropout": "0.0", "--attention-dropout": "0.0",
        "--vocab-size": "128256",
        # 128256 = 2^8 * 501: divisible by 32 * tp 8 = 256 but not by 64 * 8 = 512
        "--make-vocab-size-divisible-by": "32",
    }
    assert {k: args[k] for k in expected} == expected
    assert unsupported == []


def test_megatron_gelu_model_and_padded_vocabulary():
    # tiny-gpt: GELU, MHA (no query-group flags), tied embeddings (no untie flag), vocab 32000
    # = 2^8 * 125: with tp 2 the largest divisor d <= 128 with 32000 % (2 d) == 0 is 128.
    plan = make_plan(tp=2, dp=4, micro_batch=1, num_micro_batches=8, layers=[8])
    args, _, unsupported = megatron_args(TINY, plan)
    assert "--swiglu" not in args and "--group-query-attention" not in args
    assert args["--normalization"] == "LayerNorm" and args["--make-vocab-size-divisible-by"] == "128"
    assert ("--untie-embeddings-and-output-weights" in args) is (not TINY.model.tied_embeddings)
    assert unsupported == []


def test_megatron_vocabulary_that_tp_does_not_divide_is_padded_and_priced():
    # vocab 50257 (odd) with tp 2: Megatron pads to a multiple of 128 * 2 = 256: 50432.
    inst = replace(TINY, model=replace(TINY.model, vocab=50257))
    plan = make_plan(tp=2, dp=4, micro_batch=1, num_micro_batches=8, layers=[8])
    res = to_megatron(inst, plan)
    assert res.unsupported == [] and res.emitted.inst.model.vocab == 50432
    assert mentions(list(res.emitted.notes), "50432")


# --- uniform split -------------------------------------------------------------------------

# tp 2 x pp 2 x dp 2 = 8 GPUs; 32 = dp 2 * micro 2 * 8 micro-batches; 4 + 4 layers.
UNIFORM = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, sequence_parallel=True,
                    recompute=Recompute.SELECTIVE, zero=1, layers=[4, 4])


def test_megatron_uniform_is_exact():
    args, env, unsupported = megatron_args(TINY, UNIFORM)
    expected = {
        "--tensor-model-parallel-size": "2", "--pipeline-model-parallel-size": "2",
        "--context-parallel-size": "1", "--sequence-parallel": True, "--micro-batch-size": "2",
        "--global-batch-size": "32", "--num-layers": "8", "--seq-length": "1024", "--bf16": True,
        "--recompute-granularity": "selective", "--use-distributed-optimizer": True,
        # the cost model hides the gradient reduce-scatter behind backward, in 40M buckets,
        # and prices the distributed optimizer's weight all-gather as exposed: no param overlap
        "--overlap-grad-reduce": True, "--ddp-bucket-size": "40000000",
        "--attention-backend": "flash",
    }
    assert {k: args.get(k) for k in expected} == expected
    assert "--overlap-param-gather" not in args
    assert env == ["export CUDA_DEVICE_MAX_CONNECTIONS=1  # validate_args: tensor/context"
                   " parallelism before Blackwell, so communication is issued in order"]
    assert unsupported == []


def test_torchtitan_uniform_from_a_megatron_plan():
    cfg, unsupported = torchtitan_config(TINY_SW, UNIFORM)
    assert cfg["training"] == {"local_batch_size": 16, "global_batch_size": 32, "seq_len": 1024,
                               "mixed_precision_param": "bfloat16",
                               "mixed_precision_reduce": "float32"}
    p = cfg["parallelism"]
    # ZeRO-1 does not exist in torchtitan: FSDP without resharding after forward (ZeRO-2)
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (1, 2)
    assert p["fsdp_reshard_after_forward"] == "never"
    assert p["pipeline_parallel_schedule"] == "1F1B"
    assert p["module_fqns_per_model_part"] == [
        ["tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3"],
        ["layers.4", "layers.5", "layers.6", "layers.7", "norm", "output"]]
    # Megatron's selective (attention core) is not torchtitan's op-level selective: none
    assert cfg["activation_checkpoint"] == {"mode": "none"}
    assert len(unsupported) == 2 and mentions(unsupported, "ZeRO-1", "ZeRO-2")
    assert mentions(unsupported, "selective recompute of the attention core")


def test_torchtitan_refuses_gelu_models():
    with pytest.raises(ExportRefused, match="GELU"):
        to_torchtitan(TINY, UNIFORM)


def test_deepspeed_uniform():
    cfg, unsupported, notes = deepspeed_config(TINY, UNIFORM)
    assert cfg == {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                   "gradient_accumulation_steps": 8,
                   # cost/framework.py's DeepSpeed row: 5e8-parameter buckets, overlapped
                   "zero_optimization": {"stage": 1, "overlap_comm": True,
                                         "contiguous_gradients": True, "reduce_scatter": True,
                                         "reduce_bucket_size": 500000000,
                                         "allgather_bucket_size": 500000000},
                   "bf16": {"enabled": True}, "fp16": {"enabled": False},
                   "communication_data_type": "bf16"}
    assert unsupported == []  # degrees are launcher flags, not deviations
    assert mentions(notes, "--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 2",
                    "--sequence-parallel", "[4, 4]")
    assert mentions(notes, "selective")


# --- uneven first / last stage -------------------------------------------------------------

# tp 1 x pp 4 x dp 4 = 16 GPUs; 64 = dp 4 * micro 1 * 16 micro-batches; 12 layers.
def small_plan(layers, **kw) -> Plan:
    kw = {"tp": 1, "dp": 4, "micro_batch": 1, "num_micro_batches": 16, **kw}
    return make_plan(layers=layers, **kw)


@pytest.mark.parametrize("split, flags", [
    ([2, 4, 4, 2], {"--decoder-first-pipeline-num-layers": "2",
                    "--decoder-last-pipeline-num-layers": "2"}),
    ([2, 3, 3, 4], {"--decoder-first-pipeline-num-layers": "2",
                    "--decoder-last-pipeline-num-layers": "4"}),
    ([4, 3, 3, 2], {"--decoder-first-pipeline-num-layers": "4",
                    "--decoder-last-pipeline-num-layers": "2"}),
    ([2, 2, 2, 6], {"--decoder-last-pipeline-num-layers": "6"}),
])
def test_megatron_uneven_first_last(split, flags):
    args, _, unsupported = megatron_args(SMALL, small_plan(split))
    assert {k: v for k, v in args.items() if k.startswith("--decoder-")} == flags
    assert megatron_split(args, 12, 4) == split
    assert unsupported == []


def test_megatron_uneven_two_stages_gives_the_first_count():
    # pp = 2: no middle stages, the first count fixes the split 3 + 5.
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[3, 5])
    args, _, unsupported = megatron_args(TINY, plan)
    assert args["--decoder-first-pipeline-num-layers"] == "3"
    assert "--decoder-last-pipeline-num-layers" not in args
    assert megatron_split(args, 8, 2) == [3, 5]
    assert unsupported == []


def test_megatron_uneven_interleaved_uses_virtual_stages_per_rank():
    # arguments.py refuses --num-layers-per-virtual-pipeline-stage with uneven stages.
    args, _, unsupported = megatron_args(SMALL, small_plan([2, 4, 4, 2], virtual_stages=2))
    assert args["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert "--num-layers-per-virtual-pipeline-stage" not in args
    assert megatron_split(args, 12, 4) == [2, 4, 4, 2]
    assert unsupported == []


# --- fully non-uniform split ---------------------------------------------------------------

NON_UNIFORM = small_plan([2, 3, 4, 3], zero=3)


def test_megatron_non_uniform_split_uses_the_layout():
    args, _, unsupported = megatron_args(SMALL, replace(NON_UNIFORM, zero=1))
    assert not any(k.startswith("--decoder-") for k in args)
    # one '|'-separated entry per stage: embedding, 2 layers | 3 | 4 | 3 layers, loss
    assert args["--pipeline-model-parallel-layout"] == "E,t*2|t*3|t*4|t*3,L"
    assert unsupported == []


def test_megatron_layout_with_virtual_stages():
    # pp 4, v 2, split [2, 4, 2, 4] (middle stages 4 and 2 differ): chunks k = c*pp + s of
    # n_s / 2 layers each: 1, 2, 1, 2 for c = 0 and again for c = 1
    plan = small_plan([2, 4, 2, 4], virtual_stages=2)
    args, _, unsupported = megatron_args(SMALL, plan)
    assert args["--pipeline-model-parallel-layout"] == "E,t|t*2|t|t*2|t|t*2|t|t*2,L"
    assert "--num-virtual-stages-per-pipeline-rank" not in args  # the layout fixes v
    assert unsupported == []


# --- the embedding and loss counted as layers (Megatron-core's account-for flags) ----------

# small-gpt with 14 layers: 14 + 2 = 16 slots, 4 per stage on pp 4
SMALL14 = replace(SMALL, model=replace(SMALL.model, layers=14))


def accounted_plan(layers, **kw) -> Plan:
    return small_plan(layers, virtual_stages=2, embedding_in_split=True, loss_in_split=True, **kw)


def test_megatron_accounted_split_uses_the_account_flags():
    # [3, 4, 4, 3] is what Megatron-core builds from 16 slots on 4 ranks (4 each, one fewer on
    # the embedding's and the loss's rank): the two flags and the virtual stages say it all
    args, _, unsupported = megatron_args(SMALL14, accounted_plan([3, 4, 4, 3]))
    assert args["--account-for-embedding-in-pipeline-split"] is True
    assert args["--account-for-loss-in-pipeline-split"] is True
    assert args["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert not any(k.startswith("--decoder-") for k in args)
    assert megatron_split(args, 14, 4) == [3, 4, 4, 3]
    assert unsupported == []


def test_megatron_other_accounted_split_uses_the_layout():
    # [3, 4, 2, 5] with both counted: slots [4, 4, 2, 6], chunks of 2, 2, 1, 3 slots; the
    # embedding takes one of stage 0's chunk 0, the loss one of stage 3's chunk 1. In chunk
    # order k = c*4 + s: 1 (+E), 2, 1, 3 | 2, 2, 1, 2 (+L): 14 layers
    args, _, unsupported = megatron_args(SMALL14, accounted_plan([3, 4, 2, 5]))
    assert args["--pipeline-model-parallel-layout"] == "E,t|t*2|t|t*3|t*2|t*2|t|t*2,L"
    assert not any(k.startswith("--account-for-") for k in args)
    assert unsupported == []


def test_megatron_block_recompute_counts_uneven_chunks():
    # stage 0 of [3, 4, 4, 3] holds chunks of 1 and 2 layers: --recompute-num-layers 1
    # recomputes the first layer of every chunk, 2 on every stage (stage 3: chunks 2 and 1),
    # which the plan states and the export writes as planned
    plan = accounted_plan([3, 4, 4, 3], full=[2, 2, 2, 2])
    args, _, unsupported = megatron_args(SMALL14, plan)
    assert args["--recompute-num-layers"] == "1"
    assert unsupported == []


def test_megatron_refuses_per_stage_recompute_counts():
    # [1, 0, 0, 0]: no N gives it (N = 1 already recomputes 2 on every stage): the plan is
    # refused before any export, with what Megatron-LM runs
    plan = accounted_plan([3, 4, 4, 3], full=[1, 0, 0, 0])
    with pytest.raises(ConfigError, match="one --recompute-num-layers N"):
        megatron_args(SMALL14, plan)


def test_torchtitan_non_uniform_split_is_exact():
    cfg, unsupported = torchtitan_config(SMALL_SW, NON_UNIFORM)
    parts = cfg["parallelism"]["module_fqns_per_model_part"]
    assert [layers_of(p) for p in parts] == [[0, 1], [2, 3, 4], [5, 6, 7, 8], [9, 10, 11]]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    assert unsupported == []


# --- ZeRO ----------------------------------------------------------------------------------

# dp 8 = 8 GPUs; 32 = dp 8 * micro 1 * 4 micro-batches (gradient accumulation 4).
ZERO3 = make_plan(tp=1, dp=8, micro_batch=1, num_micro_batches=4, zero=3, layers=[8])


def test_megatron_zero3_is_megatron_fsdp():
    args, env, unsupported = megatron_args(TINY, ZERO3)
    assert args["--use-megatron-fsdp"] is True
    assert args["--data-parallel-sharding-strategy"] == "optim_grads_params"
    # ZeRO-3 weight gathers are prefetched behind compute in the cost model: both overlaps
    assert args["--overlap-grad-reduce"] is True and args["--overlap-param-gather"] is True
    assert "--ddp-bucket-size" not in args
    assert unsupported == []


def test_megatron_zero2_is_fsdp_optim_grads():
    plan = make_plan(tp=1, dp=8, micro_batch=1, num_micro_batches=4, zero=2, layers=[8])
    args, _, unsupported = megatron_args(TINY, plan)
    assert args["--data-parallel-sharding-strategy"] == "optim_grads"
    assert "--overlap-param-gather" not in args and unsupported == []


def test_megatron_zero3_with_pipeline_falls_back_to_zero1():
    # a hand-written plan Megatron cannot run: FSDP refuses pp > 1
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, zero=3, layers=[4, 4])
    args, _, unsupported = megatron_args(TINY, plan)
    assert args["--use-distributed-optimizer"] is True and "--use-megatron-fsdp" not in args
    assert mentions(unsupported, "ZeRO-3", "ZeRO-1")


def test_torchtitan_zero3_is_fsdp_over_dp():
    cfg, unsupported = torchtitan_config(TINY_SW, ZERO3)
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (1, 8)
    assert "pipeline_parallel_schedule" not in p
    assert cfg["training"]["local_batch_size"] == 1  # 32 / (1 * 8) = 4 accumulation steps
    assert unsupported == []


def test_deepspeed_zero3_is_exact():
    cfg, unsupported, _ = deepspeed_config(TINY, ZERO3)
    assert cfg["zero_optimization"]["stage"] == 3
    # cost/framework.py: prefetch 5e7 parameters, no re-fetch for the recompute pass
    assert cfg["zero_optimization"]["stage3_prefetch_bucket_size"] == 50000000
    assert cfg["zero_optimization"]["stage3_max_reuse_distance"] == 1000000000
    assert cfg["gradient_accumulation_steps"] == 4
    assert unsupported == []


def test_torchtitan_zero0_alone_is_ddp():
    cfg, unsupported = torchtitan_config(TINY_SW, make_plan(tp=1, dp=8, micro_batch=1,
                                                         num_micro_batches=4, layers=[8]))
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (8, 1)
    assert unsupported == []


def test_torchtitan_zero0_with_tp_falls_back_to_fsdp():
    # torchtitan's DDP is one-dimensional; with tp the closest runnable setting is FSDP.
    cfg, unsupported = torchtitan_config(TINY_SW, make_plan(tp=2, dp=4, micro_batch=1,
                                                         num_micro_batches=8, layers=[8],
                                                         sequence_parallel=True))
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (1, 4)
    assert mentions(unsupported, "ZeRO-0", "DDP")


def test_torchtitan_zero0_with_cp_is_fsdp_over_dp_and_cp():
    cfg, unsupported = torchtitan_config(TINY_SW, make_plan(tp=1, dp=4, cp=2, micro_batch=1,
                                                            num_micro_batches=8, layers=[8]))
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (1, 4)
    assert p["fsdp_reshard_after_forward"] == "never"
    # the K/V ring cost/ prices is torch's _AllToAllRotater (permute to the next rank)
    assert p["context_parallel_rotate_method"] == "alltoall"
    assert mentions(unsupported, "ZeRO-0", "DDP")


def test_deepspeed_zero2_with_pipeline_is_reported():
    _, unsupported, _ = deepspeed_config(TINY, make_plan(tp=2, dp=2, micro_batch=2,
                                                      num_micro_batches=8, zero=2, layers=[4, 4]))
    assert mentions(unsupported, "ZeRO-2", "pipeline")


# --- interleaved (virtual stages) ----------------------------------------------------------

# tp 2 x pp 4 x dp 8 = 64 GPUs; 512 = dp 8 * micro 1 * 64 micro-batches; 4 x 8 layers, v = 2.
INTERLEAVED = make_plan(tp=2, dp=8, micro_batch=1, num_micro_batches=64, virtual_stages=2,
                        sequence_parallel=True, zero=1, layers=[8, 8, 8, 8])


def test_megatron_interleaved_uniform():
    args, _, unsupported = megatron_args(LLAMA8B, INTERLEAVED)
    assert args["--num-layers-per-virtual-pipeline-stage"] == "4"  # 8 layers per stage / v 2
    assert "--num-virtual-stages-per-pipeline-rank" not in args
    assert unsupported == []


def test_torchtitan_interleaved():
    cfg, unsupported = torchtitan_config(LLAMA8B, INTERLEAVED)
    p = cfg["parallelism"]
    # two chunks per rank and 64 >= 2 pp - 1 micro-batches: torch's ZBV zero-bubble schedule
    # runs the split faster than the interleaved 1F1B it was planned with (cost/torch_schedules.py)
    assert p["pipeline_parallel_schedule"] == "ZBVZeroBubble"
    parts = p["module_fqns_per_model_part"]
    assert [layers_of(part) for part in parts] == [list(range(4 * k, 4 * k + 4)) for k in range(8)]
    # rank s builds chunks s and 7 - s (the V): 8 layers on every stage
    assert all(len(layers_of(parts[s])) + len(layers_of(parts[7 - s])) == 8 for s in range(4))
    assert cfg["training"]["local_batch_size"] == 64
    assert mentions(unsupported, "ZeRO-1")


def test_interleaved_uneven_chunks():
    # pp 2, v 2, split 2 + 6: chunks (stage 0, 1 layer), (stage 1, 3), (stage 0, 1), (stage 1, 3);
    # an interleaved schedule (paraplan prices ZBV's V with pp >= 3 only: cost/schedule.py)
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, virtual_stages=2,
                     layers=[2, 6])
    cfg, _ = torchtitan_config(TINY_SW, plan)
    assert cfg["parallelism"]["pipeline_parallel_schedule"] in ("Interleaved1F1B", "InterleavedZeroBubble")
    parts = cfg["parallelism"]["module_fqns_per_model_part"]
    assert [layers_of(p) for p in parts] == [[0], [1, 2, 3], [4], [5, 6, 7]]
    args, _, unsupported = megatron_args(TINY, plan)
    assert args["--decoder-first-pipeline-num-layers"] == "2"
    assert args["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert unsupported == []
    _, ds_unsupported, _ = deepspeed_config(TINY, plan)
    assert mentions(ds_unsupported, "virtual_stages = 2")


# --- per-stage recompute counts ------------------------------------------------------------

def test_per_stage_recompute_counts_are_refused_where_the_framework_cannot_run_them():
    # [3, 2, 1, 0] of [3, 3, 3, 3]: Megatron's N recomputes min(N, 3) on every stage and
    # torchtitan's k floor(3 / k) on every stage, equal counts either way: check_against
    # refuses the plan file before any export, with what the framework runs
    plan = small_plan([3, 3, 3, 3], full=[3, 2, 1, 0])
    with pytest.raises(ConfigError, match="one --recompute-num-layers N"):
        megatron_args(SMALL, plan)
    titan = with_framework(SMALL_SW, Framework.TORCHTITAN)
    with pytest.raises(ConfigError, match="every k-th block"):
        torchtitan_config(titan, small_plan([3, 3, 3, 3], full=[3, 2, 1, 0], zero=3))


def test_a_megatron_plan_exported_to_torchtitan_falls_back_to_full():
    # N = 3 on [2, 6] recomputes [2, 3] (Megatron runs it); torchtitan's floor(n / k) gives 2 on
    # stage 0 only with k = 1, which recomputes all 6 on stage 1: emitted mode "full"
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[2, 6], full=[2, 3])
    cfg, unsupported = torchtitan_config(TINY_SW, plan)
    assert cfg["activation_checkpoint"] == {"mode": "full"}
    assert mentions(unsupported, "[2, 3]")


def test_deepspeed_recompute_section_and_note():
    # DeepSpeed's layers checkpoint themselves (cost/framework_rules.py): any per-stage count
    deep = with_framework(SMALL, Framework.DEEPSPEED)
    cfg, unsupported, notes = deepspeed_config(deep, small_plan([3, 3, 3, 3], full=[3, 2, 1, 0]))
    assert cfg["activation_checkpointing"]["partition_activations"] is False  # no sequence parallel
    assert unsupported == [] and mentions(notes, "[3, 2, 1, 0]")


def test_megatron_counts_that_differ_only_where_a_stage_is_short_are_exact():
    # N = 3 on split 2 + 6 recomputes min(3, 2) = 2 and 3 layers: the plan's counts exactly.
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[2, 6], full=[2, 3])
    args, _, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-num-layers"] == "3"
    assert unsupported == []


def test_every_kth_layer_recompute():
    # 2 of 4 layers on each stage: Megatron N = 2; torchtitan every 2nd layer (4 // 2 = 2).
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[4, 4], full=[2, 2])
    args, _, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-num-layers"] == "2" and unsupported == []
    cfg, _ = torchtitan_config(TINY_SW, plan)
    assert cfg["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}


@pytest.mark.parametrize("full, per_chunk", [([2, 2], "1"), ([4, 4], "2")])
def test_megatron_recompute_count_is_per_model_chunk(full, per_chunk):
    # v = 2, 4 layers per stage = 2 chunks of 2: N per chunk recomputes 2 * min(N, 2) per stage.
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, virtual_stages=2,
                     layers=[4, 4], full=full)
    args, _, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-num-layers"] == per_chunk
    assert unsupported == []


def test_megatron_refuses_an_odd_count_on_two_chunks():
    # 3 of 4 layers in 2 chunks of 2: 2 min(N, 2) is 0, 2 or 4, never 3
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, virtual_stages=2,
                     layers=[4, 4], full=[3, 3])
    with pytest.raises(ConfigError, match="first min"):
        megatron_args(TINY, plan)


def test_selective_beside_some_full_layers_is_refused():
    # Megatron-LM's --recompute-granularity is full or selective: 1 of 4 layers fully
    # recomputed beside selective recompute of the others runs nowhere; all 4 runs (as full)
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[4, 4], full=[1, 1],
                     recompute=Recompute.SELECTIVE)
    with pytest.raises(ConfigError, match="granularity takes one value"):
        megatron_args(TINY, plan)
    args, _, unsupported = megatron_args(TINY, plan.replace_flat(full_recompute_layers=(4, 4)))
    assert args["--recompute-granularity"] == "full" and args["--recompute-num-layers"] == "4"


def test_all_layers_recomputed():
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[4, 4], full=[4, 4],
                     sequence_parallel=True)
    args, _, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-num-layers"] == "4" and unsupported == []
    cfg, unsupported = torchtitan_config(TINY_SW, plan)
    assert cfg["activation_checkpoint"] == {"mode": "full"}
    assert not mentions(unsupported, "recompute")
    ds, _, _ = deepspeed_config(TINY, plan)
    assert ds["activation_checkpointing"]["partition_activations"] is True


# --- other deviations ----------------------------------------------------------------------

def test_fp16_job():
    inst = replace(TINY, job=replace(TINY.job, precision=Precision.FP16))
    args, _, _ = megatron_args(inst, UNIFORM)
    assert args["--fp16"] is True and "--bf16" not in args
    ds, _, _ = deepspeed_config(inst, UNIFORM)
    assert ds["fp16"] == {"enabled": True} and ds["bf16"] == {"enabled": False}
    _, unsupported = torchtitan_config(swiglu(inst), UNIFORM)
    assert mentions(unsupported, "fp16")


def test_torchtitan_tp_without_sequence_parallel_is_reported():
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[4, 4], zero=3)
    _, unsupported = torchtitan_config(TINY_SW, plan)
    assert mentions(unsupported, "sequence parallel")


# --- the CLI sub-command -------------------------------------------------------------------

def write_plan_file(path: Path, inst, plan) -> Path:
    """A plan file as `paraplan plan -o` writes it: the plan and its instance."""
    path.write_text(f"# paraplan plan for {inst.name}: optimal\n"
                    + yaml.safe_dump(plan_file_mapping(inst, plan), sort_keys=False))
    return path


@pytest.fixture
def plan_file(tmp_path) -> Path:
    return write_plan_file(tmp_path / "plan.yaml", TINY, UNIFORM)


def test_cli_exact_export_needs_no_instance(plan_file, tmp_path, capsys):
    target = tmp_path / "megatron.sh"
    assert cli_main(["export", str(plan_file), "--to", "megatron", "--strict",
                     "-o", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""  # exact in Megatron-LM, the plan's own framework: silent
    assert target.read_text() == to_megatron(TINY, UNIFORM).text


def test_cli_strict_refuses_a_lossy_export_with_one_line(tmp_path, capsys):
    path = write_plan_file(tmp_path / "plan.yaml", TINY_SW, UNIFORM)
    assert cli_main(["export", str(path), "--to", "torchtitan", "--strict"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "--strict" in err and "ZeRO-1" in err and "1 more" in err


def test_cli_lossy_export_prints_both_predictions(tmp_path, capsys):
    path = write_plan_file(tmp_path / "plan.yaml", TINY_SW, UNIFORM)
    assert cli_main(["export", str(path), "--to", "torchtitan", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["exact"] is False and doc["target"] == "torchtitan"
    assert doc["plan_framework"] == "megatron" and len(doc["deviations"]) == 2
    tomllib.loads(doc["config"])  # the deviation comments keep it valid TOML
    # the emitted configuration written out by hand: torchtitan, ZeRO-2, no selective recompute
    by_hand = replace(UNIFORM, zero=2, recompute=Recompute.NONE)
    bd = simulate(with_framework(TINY_SW, Framework.TORCHTITAN), by_hand)
    assert doc["emitted"]["iter_time_s"] == pytest.approx(bd.iter_time_s, rel=1e-12)
    assert doc["emitted"]["peak_mem_bytes"] == pytest.approx(bd.peak_mem_bytes, rel=1e-12)
    assert doc["emitted"]["plan"] == plan_to_mapping(by_hand)
    planned = simulate(TINY_SW, UNIFORM)
    assert doc["plan"]["iter_time_s"] == pytest.approx(planned.iter_time_s, rel=1e-12)
    assert "the plan as planned (megatron)" in err and "the emitted configuration (torchtitan)" in err


def test_cli_deepspeed_output_stays_json(plan_file, capsys):
    assert cli_main(["export", str(plan_file), "--to", "deepspeed"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["train_batch_size"] == 32
    assert "--tensor-model-parallel-size 2" in err  # a note on stderr
    assert "the emitted configuration (deepspeed)" in err  # another framework: both priced


def test_cli_refusal_is_one_line(plan_file, capsys):
    assert cli_main(["export", str(plan_file), "--to", "torchtitan"]) == 2  # tiny-gpt is GELU
    _, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "GELU" in err


def test_cli_plan_from_part_files_exports_without_an_instance_file(tmp_path, capsys):
    # plan from a Hugging Face config, a cluster file and a job file, then export the plan file
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"cluster": {
        "gpu": "H100-SXM5-80GB", "nodes": 2, "gpus_per_node": 8,
        "intra_node_gbytes_per_s": 900, "nic_gbit_per_s": 400}}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"job": {"global_batch": 64}, "search": {
        "tp": [2, 4], "pp": [1, 2], "cp": [1], "micro_batch": [1], "virtual_stages": [1]}}))
    plan_path = tmp_path / "plan.yaml"
    assert cli_main(["plan", "--hf-config", str(ROOT / "tests/data/hf/llama-2-7b"),
                     "--cluster", str(cluster), "--job", str(job), "--seq-len", "4096",
                     "--quiet", "-o", str(plan_path)]) == 0
    capsys.readouterr()
    assert cli_main(["export", str(plan_path), "--to", "megatron", "--strict"]) == 0
    out, _ = capsys.readouterr()
    assert "--num-layers 32" in out and "--seq-length 4096" in out and "--hidden-size 4096" in out


def test_cli_plan_file_without_instance_needs_one(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"plan": plan_to_mapping(UNIFORM)}))
    assert cli_main(["export", str(path), "--to", "megatron"]) == 2
    _, err = capsys.readouterr()
    assert "carries no instance" in err and "--instance" in err
    assert cli_main(["export", str(path), "--to", "megatron", "--instance", str(TINY_PATH)]) == 0


def run_export(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="paraplan")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["export", *argv])
    return args.func(args)


def test_cli_missing_plan_file(tmp_path):
    with pytest.raises(InstanceError, match="file not found"):
        run_export(str(tmp_path / "nope.yaml"), "--to", "megatron", "--instance", str(TINY_PATH))


def test_cli_plan_inconsistent_with_instance(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"tp": 2, "pp": 2, "dp": 4, "micro_batch": 1}))
    with pytest.raises(InstanceError, match="GPUs"):  # 2 * 2 * 4 = 16, the cluster has 8
        run_export(str(path), "--to", "megatron", "--instance", str(TINY_PATH))


def test_cli_unwritable_output(plan_file, tmp_path):
    with pytest.raises(InstanceError, match="cannot be written"):
        run_export(str(plan_file), "--to", "megatron", "-o", str(tmp_path / "missing" / "out.sh"))


def test_cli_unknown_format(plan_file):
    with pytest.raises(SystemExit) as exc:
        run_export(str(plan_file), "--to", "nemo")
    assert exc.value.code == 2


def test_render_appends_deviations_as_comments():
    res = to_torchtitan(TINY_SW, UNIFORM)
    text = render(res, "torchtitan")
    assert text.count("# paraplan: deviation: ") == 2
    assert render(to_deepspeed(TINY, UNIFORM), "deepspeed") == to_deepspeed(TINY, UNIFORM).text


# --- precision, attention, fp8 -------------------------------------------------------------

def test_fp8_flags():
    inst = replace(LLAMA8B, job=replace(LLAMA8B.job, precision=Precision.FP8))
    plan = make_plan(tp=8, dp=8, micro_batch=1, num_micro_batches=64, sequence_parallel=True,
                     zero=1, layers=[32])
    args, _, unsupported = megatron_args(inst, plan)
    assert (args["--fp8-format"], args["--fp8-recipe"], args["--bf16"]) == ("hybrid", "delayed", True)
    assert unsupported == []
    cfg, _ = torchtitan_config(inst, replace(plan, zero=3))
    assert cfg["model"]["converters"] == ["quantize.linear.float8"]
    assert cfg["quantize.linear.float8"]["recipe_name"] == "tensorwise"
    assert cfg["model"]["flavor"] == "8B"  # the shape of torchtitan's llama3 8B flavor
    assert cfg["model"]["flavor"] in TORCHTITAN_V0_2_0_LLAMA3_FLAVORS
    _, ds_unsupported, _ = deepspeed_config(inst, plan)
    assert mentions(ds_unsupported, "fp8")


def test_standard_attention():
    inst = replace(TINY, job=replace(TINY.job, attention=Attention.STANDARD))
    args, _, _ = megatron_args(inst, UNIFORM)
    assert args["--attention-backend"] == "unfused"
    _, unsupported = torchtitan_config(swiglu(inst), UNIFORM)
    assert mentions(unsupported, "standard")


def test_torchtitan_custom_flavor_reproduces_the_ffn_width():
    # tiny-gpt as SwiGLU: dim 1024, ffn 4096 >= int(8 * 1024 / 3) = 2730, so multiple_of 4096
    # rounds 2730 up to 4096 (torchtitan llama3 FeedForward)
    from paraplan.solver.export.torchtitan import llama3_ffn
    res = to_torchtitan(TINY_SW, replace(UNIFORM, zero=2, recompute=Recompute.NONE))
    assert 'flavor = "paraplan"' in res.text
    assert "ffn_dim_multiplier=None, multiple_of=4096" in res.text
    assert llama3_ffn(1024, None, 4096) == 4096
    assert llama3_ffn(4096, 1.3, 1024) == 14336  # torchtitan's own 8B flavor


def test_deepspeed_folds_context_parallelism_into_data_parallelism():
    # cp 2 x dp 4 = 8 GPUs -> dp 8; 32 = 8 * micro 1 * 4 micro-batches
    plan = make_plan(tp=1, dp=4, cp=2, micro_batch=1, num_micro_batches=8, layers=[8], zero=1)
    cfg, unsupported, _ = deepspeed_config(TINY, plan)
    assert cfg["gradient_accumulation_steps"] == 4
    assert mentions(unsupported, "cp = 2", "dp = 8")


def test_exporters_refuse_a_plan_for_another_instance():
    with pytest.raises(ValueError, match="GPUs"):
        to_megatron(SMALL, UNIFORM)


def test_megatron_tp_comm_overlap_only_where_it_is_priced():
    # job.tp_comm_overlap is priced only for tp > 1 with sequence parallelism (cost/coefficients.
    # megatron_layer), which is also the only case Megatron-LM accepts --tp-comm-overlap.
    inst = replace(SMALL, job=replace(SMALL.job, tp_comm_overlap=True))
    with_sp = make_plan(layers=[12], tp=2, dp=8, micro_batch=1, num_micro_batches=8,
                        sequence_parallel=True)
    args, _, _ = megatron_args(inst, with_sp)
    assert "--tp-comm-overlap" in args
    args, _, _ = megatron_args(inst, replace(with_sp, sequence_parallel=False))
    assert "--tp-comm-overlap" not in args
    args, _, _ = megatron_args(SMALL, with_sp)
    assert "--tp-comm-overlap" not in args


def test_megatron_export_sets_the_attention_kernel_the_plan_was_priced_with():
    # job.cudnn_attention: false prices Transformer Engine's FlashAttention-2; TE takes the
    # kernel from NVTE_FUSED_ATTN, not from an argument, so the snippet exports it (and only then)
    plan = make_plan(layers=[12], tp=2, dp=8, micro_batch=1, num_micro_batches=8,
                     sequence_parallel=True)
    assert "NVTE_FUSED_ATTN" not in to_megatron(SMALL, plan).text
    fa2 = replace(SMALL, job=replace(SMALL.job, cudnn_attention=False))
    assert "export NVTE_FUSED_ATTN=0" in to_megatron(fa2, plan).text


# --- DeepSeek-V3's memory options (cost/specs.JobSpec) --------------------------------------

def test_megatron_export_of_deepseek_memory_options():
    # The bundled DeepSeek-V3 instance (FP8) on its published layout: the bf16 moments and the
    # MLA up-projection recompute are emitted; layernorm and moe_act recompute (refused by
    # Megatron-core under the delayed FP8 recipe the export writes), the fp8 activation input
    # (no command-line flag) and the E5M6 attention output (in no framework) are one deviation
    # line each, and the emitted configuration is priced without them
    inst = load_instance(ROOT / "instances" / "deepseek-v3-shaped-2048xH800.yaml")
    plan = Plan.flat(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1, ep=64,
                layers_per_stage=(3,) + (4,) * 14 + (2,), full_recompute_layers=(0,) * 16)
    res = to_megatron(inst, plan)
    unsupported = res.unsupported
    args = {}
    for line in res.text.splitlines():  # (megatron_args's table has no MoE flags yet)
        words = shlex.split(line, comments=True)
        if words and words[0].startswith("--"):
            args[words[0]] = words[1:]
    new = {"--recompute-granularity": ["selective"], "--recompute-modules": ["mla_up_proj"],
           "--use-distributed-optimizer": [], "--use-precision-aware-optimizer": [],
           "--exp-avg-dtype": ["bf16"], "--exp-avg-sq-dtype": ["bf16"]}
    for flag, value in new.items():
        assert args[flag] == value and flag in MEGATRON_MAIN_D98E8A6
        for v in value:
            check_value(MEGATRON_MAIN_D98E8A6[flag], v, flag)
    joined = "\n".join(unsupported)
    for words in ("layernorm moe_act", "activation_fp8_input_store", "attention_output_e5m6"):
        assert sum(words in line for line in unsupported) == 1, joined
    emitted = to_megatron(inst, plan).emitted.inst.job
    assert emitted.recompute_modules == (inst.job.recompute_modules[1],)
    assert not emitted.activation_fp8_input_store and not emitted.attention_output_e5m6


def test_other_targets_list_the_megatron_only_options():
    # a dense SwiGLU model with every Megatron-core-only option: torchtitan and DeepSpeed name
    # each in one line and price the emitted job without it
    from paraplan.cost.specs import Optimizer, RecomputeModule
    inst = replace(TINY_SW, job=replace(TINY_SW.job, optimizer=Optimizer.ADAM_BF16_MOMENTS,
                                        recompute_modules=(RecomputeModule.LAYERNORM,),
                                        activation_fp8_input_store=True))
    plan = make_plan(layers=[8], tp=1, dp=8, micro_batch=1, num_micro_batches=4, zero=1)
    for export in (to_torchtitan, to_deepspeed):
        res = export(inst, plan)
        for key in ("job.optimizer adam_bf16_moments", "job.recompute_modules layernorm",
                    "job.activation_fp8_input_store"):
            assert sum(line.startswith(key) for line in res.unsupported) == 1, res.unsupported
        job = res.emitted.inst.job
        assert job.optimizer is Optimizer.ADAM and not job.recompute_modules
