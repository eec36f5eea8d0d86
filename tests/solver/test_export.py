"""solver/export.py and `paraplan export`: plans written as Megatron-LM, torchtitan and
DeepSpeed settings.

The names each export may use are listed here from the frameworks' own documentation, not from
solver/export.py, so a misspelt or invented flag fails:
- Megatron-LM: argparse flags of megatron/training/arguments.py.
- torchtitan v0.2.0: dataclass fields of torchtitan/config/job_config.py (Training,
  Parallelism, ActivationCheckpoint).
- DeepSpeed: the "DeepSpeed Configuration JSON" docs page.
Expected values are worked out by hand from the plan (noted beside each case).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from cost.errors import InstanceError
from cost.loader import load_instance, plan_to_mapping
from cost.specs import Plan, Precision, Recompute
from solver.export import to_deepspeed, to_megatron, to_torchtitan
from solver.export_cmd import register, render

tomllib = pytest.importorskip("tomllib")  # standard library from Python 3.11

ROOT = Path(__file__).resolve().parents[2]
TINY_PATH = ROOT / "instances" / "tiny-gpt-8xA100.yaml"  # 8 GPUs, 8 layers, batch 32, seq 1024
TINY = load_instance(TINY_PATH)
SMALL = load_instance(ROOT / "instances" / "small-gpt-16xA100.yaml")  # 16 GPUs, 12 layers, batch 64
LLAMA8B = load_instance(ROOT / "instances" / "llama3-8b-64xH100.yaml")  # 64 GPUs, 32 layers, batch 512

MEGATRON_FLAGS = {  # megatron/training/arguments.py
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--sequence-parallel", "--micro-batch-size", "--global-batch-size", "--num-layers",
    "--seq-length", "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--use-distributed-optimizer", "--bf16", "--fp16",
}
MEGATRON_VALUELESS = {"--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--fp16"}

TORCHTITAN_V0_2_0 = {  # torchtitan v0.2.0 torchtitan/config/job_config.py
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "tensor_parallel_degree", "context_parallel_degree", "pipeline_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "module_fqns_per_model_part"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
}
TORCHTITAN_AC_MODES = {"selective", "full", "memory_budget", "none"}

DEEPSPEED_KEYS = {  # "DeepSpeed Configuration JSON"
    "train_batch_size": None, "train_micro_batch_size_per_gpu": None,
    "gradient_accumulation_steps": None, "zero_optimization": {"stage"},
    "bf16": {"enabled"}, "fp16": {"enabled"},
    "activation_checkpointing": {"partition_activations", "cpu_checkpointing",
                                 "contiguous_memory_optimization", "number_checkpoints",
                                 "synchronize_checkpoint_boundary", "profile"},
}


def make_plan(*, layers, full=None, **kw) -> Plan:
    return Plan(layers_per_stage=tuple(layers), pp=len(layers),
                full_recompute_layers=tuple(full or [0] * len(layers)), **kw)


# --- parsing what the exporters write ------------------------------------------------------

def megatron_args(inst, plan) -> tuple[dict, list[str]]:
    res = to_megatron(inst, plan)
    args = {}
    for line in res.text.splitlines():
        if line.startswith("#"):
            continue
        flag, *value = line.split()
        assert flag in MEGATRON_FLAGS, f"undocumented Megatron-LM flag {flag}"
        assert flag not in args, f"{flag} given twice"
        assert len(value) == (0 if flag in MEGATRON_VALUELESS else 1), line
        args[flag] = value[0] if value else True
    return args, res.unsupported


def megatron_split(args: dict, layers: int, pp: int) -> list[int]:
    """The split Megatron-core builds from these flags: the first/last counts where given, the
    remaining layers evenly over the other stages."""
    first = int(args.get("--decoder-first-pipeline-num-layers", 0)) or None
    last = int(args.get("--decoder-last-pipeline-num-layers", 0)) or None
    rest_stages = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    assert rest_stages == 0 and rest == 0 or rest % rest_stages == 0
    even = [rest // rest_stages] * rest_stages if rest_stages else []
    return ([first] if first else []) + even + ([last] if last else [])


def torchtitan_config(inst, plan) -> tuple[dict, list[str]]:
    res = to_torchtitan(inst, plan)
    cfg = tomllib.loads(res.text)
    assert set(cfg) <= set(TORCHTITAN_V0_2_0), set(cfg)
    for section, keys in cfg.items():
        assert set(keys) <= TORCHTITAN_V0_2_0[section], (section, set(keys))
    assert cfg["activation_checkpoint"]["mode"] in TORCHTITAN_AC_MODES
    # torchtitan's batch arithmetic (train.py, v0.2.0): dp = replicate * shard ranks each take
    # local_batch_size per step; grad accumulation = global / (local * dp); with pp the local
    # batch is split into local / microbatch_size pipeline micro-batches.
    t, p = cfg["training"], cfg["parallelism"]
    dp = p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"]
    assert dp == plan.dp
    assert dp * p["tensor_parallel_degree"] * p["pipeline_parallel_degree"] \
        * p["context_parallel_degree"] == inst.cluster.num_gpus
    accumulation = t["global_batch_size"] // (t["local_batch_size"] * dp)
    assert accumulation * t["local_batch_size"] * dp == t["global_batch_size"] == inst.job.global_batch
    per_step = (t["local_batch_size"] // p["pipeline_parallel_microbatch_size"]
                if plan.pp > 1 else 1)
    micro = p["pipeline_parallel_microbatch_size"] if plan.pp > 1 else t["local_batch_size"]
    assert micro == plan.micro_batch
    assert accumulation * per_step == plan.num_micro_batches
    assert t["seq_len"] == inst.model.seq_len
    return cfg, res.unsupported


def deepspeed_config(inst, plan) -> tuple[dict, list[str]]:
    res = to_deepspeed(inst, plan)
    cfg = json.loads(res.text)
    for key, value in cfg.items():
        assert key in DEEPSPEED_KEYS, key
        if DEEPSPEED_KEYS[key] is not None:
            assert set(value) <= DEEPSPEED_KEYS[key], (key, set(value))
    assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"]
                                       * cfg["gradient_accumulation_steps"] * plan.dp)
    return cfg, res.unsupported


def layers_of(part: list[str]) -> list[int]:
    return [int(name.split(".")[1]) for name in part if name.startswith("layers.")]


def mentions(unsupported: list[str], *needles: str) -> bool:
    return any(all(n in item for n in needles) for item in unsupported)


# --- uniform split -------------------------------------------------------------------------

# tp 2 x pp 2 x dp 2 = 8 GPUs; 32 = dp 2 * micro 2 * 8 micro-batches; 4 + 4 layers.
UNIFORM = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, sequence_parallel=True,
                    recompute=Recompute.SELECTIVE, zero=1, layers=[4, 4])


def test_megatron_uniform_is_exact():
    args, unsupported = megatron_args(TINY, UNIFORM)
    assert args == {
        "--tensor-model-parallel-size": "2", "--pipeline-model-parallel-size": "2",
        "--context-parallel-size": "1", "--sequence-parallel": True, "--micro-batch-size": "2",
        "--global-batch-size": "32", "--num-layers": "8", "--seq-length": "1024", "--bf16": True,
        "--recompute-granularity": "selective", "--use-distributed-optimizer": True,
    }
    assert unsupported == []


def test_torchtitan_uniform():
    cfg, unsupported = torchtitan_config(TINY, UNIFORM)
    assert cfg["training"] == {"local_batch_size": 16, "global_batch_size": 32, "seq_len": 1024,
                               "mixed_precision_param": "bfloat16"}
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (1, 2)
    assert p["pipeline_parallel_schedule"] == "1F1B"
    assert p["module_fqns_per_model_part"] == [
        ["tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3"],
        ["layers.4", "layers.5", "layers.6", "layers.7", "norm", "output"]]
    # flash attention already recomputes the attention core: selective maps to no checkpointing
    assert cfg["activation_checkpoint"] == {"mode": "none"}
    assert len(unsupported) == 1 and mentions(unsupported, "ZeRO-1", "data_parallel_shard_degree = 2")


def test_deepspeed_uniform():
    cfg, unsupported = deepspeed_config(TINY, UNIFORM)
    assert cfg == {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                   "gradient_accumulation_steps": 8, "zero_optimization": {"stage": 1},
                   "bf16": {"enabled": True}, "fp16": {"enabled": False}}
    assert mentions(unsupported, "--tensor-model-parallel-size 2")
    assert mentions(unsupported, "--pipeline-model-parallel-size 2", "[4, 4]")
    assert mentions(unsupported, "--sequence-parallel")
    assert mentions(unsupported, "selective")


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
    args, unsupported = megatron_args(SMALL, small_plan(split))
    assert {k: v for k, v in args.items() if k.startswith("--decoder-")} == flags
    assert megatron_split(args, 12, 4) == split
    assert unsupported == []


def test_megatron_uneven_two_stages_gives_the_first_count():
    # pp = 2: no middle stages, the first count fixes the split 3 + 5.
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[3, 5])
    args, unsupported = megatron_args(TINY, plan)
    assert args["--decoder-first-pipeline-num-layers"] == "3"
    assert "--decoder-last-pipeline-num-layers" not in args
    assert megatron_split(args, 8, 2) == [3, 5]
    assert unsupported == []


def test_megatron_uneven_interleaved_uses_virtual_stages_per_rank():
    # arguments.py refuses --num-layers-per-virtual-pipeline-stage with uneven stages.
    args, unsupported = megatron_args(SMALL, small_plan([2, 4, 4, 2], virtual_stages=2))
    assert args["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert "--num-layers-per-virtual-pipeline-stage" not in args
    assert megatron_split(args, 12, 4) == [2, 4, 4, 2]
    assert unsupported == []


# --- fully non-uniform split ---------------------------------------------------------------

NON_UNIFORM = small_plan([2, 3, 4, 3], zero=3)


def test_megatron_non_uniform_split_is_reported_with_the_exact_split():
    args, unsupported = megatron_args(SMALL, NON_UNIFORM)
    assert not any(k.startswith("--decoder-") for k in args)
    assert mentions(unsupported, "[2, 3, 4, 3]", "[3, 4]")
    # the layout string of Megatron-core's experimental --pipeline-model-parallel-layout
    assert mentions(unsupported, '"E,t*2|t*3|t*4|t*3,L"')


def test_torchtitan_non_uniform_split_is_exact():
    cfg, unsupported = torchtitan_config(SMALL, NON_UNIFORM)
    parts = cfg["parallelism"]["module_fqns_per_model_part"]
    assert [layers_of(p) for p in parts] == [[0, 1], [2, 3, 4], [5, 6, 7, 8], [9, 10, 11]]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    assert unsupported == []


# --- ZeRO ----------------------------------------------------------------------------------

# dp 8 = 8 GPUs; 32 = dp 8 * micro 1 * 4 micro-batches (gradient accumulation 4).
ZERO3 = make_plan(tp=1, dp=8, micro_batch=1, num_micro_batches=4, zero=3, layers=[8])


def test_megatron_zero3_is_reported():
    args, unsupported = megatron_args(TINY, ZERO3)
    assert args["--use-distributed-optimizer"] is True  # the closest Megatron-LM has
    assert len(unsupported) == 1
    assert mentions(unsupported, "ZeRO-3", "--to torchtitan", "--to deepspeed")


def test_torchtitan_zero3_is_fsdp_over_dp():
    cfg, unsupported = torchtitan_config(TINY, ZERO3)
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (1, 8)
    assert "pipeline_parallel_schedule" not in p
    assert cfg["training"]["local_batch_size"] == 1  # 32 / (1 * 8) = 4 accumulation steps
    assert unsupported == []


def test_deepspeed_zero3_is_exact():
    cfg, unsupported = deepspeed_config(TINY, ZERO3)
    assert cfg["zero_optimization"] == {"stage": 3}
    assert cfg["gradient_accumulation_steps"] == 4
    assert unsupported == []


def test_torchtitan_zero0_alone_is_ddp():
    cfg, unsupported = torchtitan_config(TINY, make_plan(tp=1, dp=8, micro_batch=1,
                                                         num_micro_batches=4, layers=[8]))
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (8, 1)
    assert unsupported == []


def test_torchtitan_zero0_with_tp_falls_back_to_fsdp():
    # torchtitan's DDP is one-dimensional; with tp the closest runnable setting is FSDP.
    cfg, unsupported = torchtitan_config(TINY, make_plan(tp=2, dp=4, micro_batch=1,
                                                         num_micro_batches=8, layers=[8],
                                                         sequence_parallel=True))
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (1, 4)
    assert mentions(unsupported, "ZeRO-0", "DDP")


def test_torchtitan_zero0_with_cp_is_hsdp_over_cp():
    cfg, unsupported = torchtitan_config(TINY, make_plan(tp=1, dp=4, cp=2, micro_batch=1,
                                                         num_micro_batches=8, layers=[8]))
    p = cfg["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (4, 1)
    assert mentions(unsupported, "ZeRO-0", "context parallel")


def test_deepspeed_zero2_with_pipeline_is_reported():
    _, unsupported = deepspeed_config(TINY, make_plan(tp=2, dp=2, micro_batch=2,
                                                      num_micro_batches=8, zero=2, layers=[4, 4]))
    assert mentions(unsupported, "ZeRO-2", "pipeline")


# --- interleaved (virtual stages) ----------------------------------------------------------

# tp 2 x pp 4 x dp 8 = 64 GPUs; 512 = dp 8 * micro 1 * 64 micro-batches; 4 x 8 layers, v = 2.
INTERLEAVED = make_plan(tp=2, dp=8, micro_batch=1, num_micro_batches=64, virtual_stages=2,
                        sequence_parallel=True, zero=1, layers=[8, 8, 8, 8])


def test_megatron_interleaved_uniform():
    args, unsupported = megatron_args(LLAMA8B, INTERLEAVED)
    assert args["--num-layers-per-virtual-pipeline-stage"] == "4"  # 8 layers per stage / v 2
    assert "--num-virtual-stages-per-pipeline-rank" not in args
    assert unsupported == []


def test_torchtitan_interleaved():
    cfg, unsupported = torchtitan_config(LLAMA8B, INTERLEAVED)
    p = cfg["parallelism"]
    assert p["pipeline_parallel_schedule"] == "Interleaved1F1B"
    parts = p["module_fqns_per_model_part"]
    assert [layers_of(part) for part in parts] == [list(range(4 * k, 4 * k + 4)) for k in range(8)]
    # rank s builds chunks s and s + 4: 8 layers on every stage
    assert all(len(layers_of(parts[s])) + len(layers_of(parts[s + 4])) == 8 for s in range(4))
    assert cfg["training"]["local_batch_size"] == 64
    assert mentions(unsupported, "ZeRO-1")


def test_interleaved_uneven_chunks():
    # pp 2, v 2, split 2 + 6: chunks (stage 0, 1 layer), (stage 1, 3), (stage 0, 1), (stage 1, 3)
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, virtual_stages=2,
                     layers=[2, 6])
    cfg, _ = torchtitan_config(TINY, plan)
    parts = cfg["parallelism"]["module_fqns_per_model_part"]
    assert [layers_of(p) for p in parts] == [[0], [1, 2, 3], [4], [5, 6, 7]]
    args, unsupported = megatron_args(TINY, plan)
    assert args["--decoder-first-pipeline-num-layers"] == "2"
    assert args["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert unsupported == []
    _, ds_unsupported = deepspeed_config(TINY, plan)
    assert mentions(ds_unsupported, "virtual_stages = 2")


# --- per-stage recompute counts ------------------------------------------------------------

def test_megatron_differing_recompute_counts_emit_the_max_and_report_them():
    plan = small_plan([3, 3, 3, 3], full=[3, 2, 1, 0])
    args, unsupported = megatron_args(SMALL, plan)
    assert (args["--recompute-granularity"], args["--recompute-method"],
            args["--recompute-num-layers"]) == ("full", "block", "3")
    assert mentions(unsupported, "[3, 2, 1, 0]", "[3, 3, 3, 3]")


def test_torchtitan_differing_recompute_counts_fall_back_to_full():
    cfg, unsupported = torchtitan_config(SMALL, small_plan([3, 3, 3, 3], full=[3, 2, 1, 0], zero=3))
    assert cfg["activation_checkpoint"] == {"mode": "full"}
    assert mentions(unsupported, "[3, 2, 1, 0]")


def test_deepspeed_recompute_section_and_report():
    cfg, unsupported = deepspeed_config(SMALL, small_plan([3, 3, 3, 3], full=[3, 2, 1, 0]))
    assert cfg["activation_checkpointing"]["partition_activations"] is False  # no sequence parallel
    assert mentions(unsupported, "[3, 2, 1, 0]")


def test_megatron_counts_that_differ_only_where_a_stage_is_short_are_exact():
    # N = 3 on split 2 + 6 recomputes min(3, 2) = 2 and 3 layers: the plan's counts exactly.
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[2, 6], full=[2, 3])
    args, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-num-layers"] == "3"
    assert unsupported == []


def test_every_kth_layer_recompute():
    # 2 of 4 layers on each stage: Megatron N = 2; torchtitan every 2nd layer (4 // 2 = 2).
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[4, 4], full=[2, 2])
    args, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-num-layers"] == "2" and unsupported == []
    cfg, _ = torchtitan_config(TINY, plan)
    assert cfg["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}


@pytest.mark.parametrize("full, per_chunk, exact", [([2, 2], "1", True), ([3, 3], "2", False),
                                                    ([4, 4], "2", True)])
def test_megatron_recompute_count_is_per_model_chunk(full, per_chunk, exact):
    # v = 2, 4 layers per stage = 2 chunks of 2: N per chunk recomputes 2 * min(N, 2) per stage.
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, virtual_stages=2,
                     layers=[4, 4], full=full)
    args, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-num-layers"] == per_chunk
    assert (unsupported == []) is exact
    if not exact:
        assert mentions(unsupported, str(full), "per model chunk")


def test_selective_with_full_layers_is_reported():
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[4, 4], full=[1, 1],
                     recompute=Recompute.SELECTIVE)
    args, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-granularity"] == "full"
    assert mentions(unsupported, "selective recompute")


def test_all_layers_recomputed():
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[4, 4], full=[4, 4],
                     sequence_parallel=True)
    args, unsupported = megatron_args(TINY, plan)
    assert args["--recompute-num-layers"] == "4" and unsupported == []
    cfg, unsupported = torchtitan_config(TINY, plan)
    assert cfg["activation_checkpoint"] == {"mode": "full"}
    assert not mentions(unsupported, "recompute")
    ds, _ = deepspeed_config(TINY, plan)
    assert ds["activation_checkpointing"]["partition_activations"] is True


# --- other deviations ----------------------------------------------------------------------

def test_fp16_job():
    from dataclasses import replace
    inst = replace(TINY, job=replace(TINY.job, precision=Precision.FP16))
    args, _ = megatron_args(inst, UNIFORM)
    assert args["--fp16"] is True and "--bf16" not in args
    ds, _ = deepspeed_config(inst, UNIFORM)
    assert ds["fp16"] == {"enabled": True} and ds["bf16"] == {"enabled": False}
    _, unsupported = torchtitan_config(inst, UNIFORM)
    assert mentions(unsupported, "fp16")


def test_torchtitan_tp_without_sequence_parallel_is_reported():
    plan = make_plan(tp=2, dp=2, micro_batch=2, num_micro_batches=8, layers=[4, 4], zero=3)
    _, unsupported = torchtitan_config(TINY, plan)
    assert mentions(unsupported, "sequence parallel")


def test_exporters_refuse_a_plan_for_another_instance():
    with pytest.raises(ValueError, match="GPUs"):
        to_megatron(SMALL, UNIFORM)


# --- the CLI sub-command -------------------------------------------------------------------

def run_export(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="paraplan")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["export", *argv])
    return args.func(args)


@pytest.fixture
def plan_file(tmp_path) -> Path:
    """UNIFORM as `paraplan plan -o` writes it: a comment line, then a `plan:` mapping."""
    path = tmp_path / "plan.yaml"
    path.write_text("# paraplan plan for tiny-gpt-8xA100: optimal\n"
                    + yaml.safe_dump({"plan": plan_to_mapping(UNIFORM)}, sort_keys=False))
    return path


def test_cli_prints_config_then_comments_and_stderr(plan_file, capsys):
    assert run_export(str(plan_file), "--to", "torchtitan", "--instance", str(TINY_PATH)) == 0
    out, err = capsys.readouterr()
    assert out == render(to_torchtitan(TINY, UNIFORM), "torchtitan")
    comments = [line for line in out.splitlines() if line.startswith("# paraplan: cannot express")]
    assert len(comments) == 1 and "ZeRO-1" in comments[0]
    tomllib.loads(out)  # the comment lines keep it valid TOML
    assert err.splitlines() == ["paraplan: cannot express " + item
                                for item in to_torchtitan(TINY, UNIFORM).unsupported]


def test_cli_deepspeed_output_stays_json(plan_file, capsys):
    assert run_export(str(plan_file), "--to", "deepspeed", "--instance", str(TINY_PATH)) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["train_batch_size"] == 32
    assert "--tensor-model-parallel-size 2" in err


def test_cli_writes_output_file(plan_file, tmp_path, capsys):
    target = tmp_path / "megatron.args"
    assert run_export(str(plan_file), "--to", "megatron", "--instance", str(TINY_PATH),
                      "-o", str(target)) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""  # the uniform plan is exact in Megatron-LM
    assert target.read_text() == to_megatron(TINY, UNIFORM).text


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
        run_export(str(plan_file), "--to", "megatron", "--instance", str(TINY_PATH),
                   "-o", str(tmp_path / "missing-dir" / "out.args"))


def test_cli_unknown_format(plan_file):
    with pytest.raises(SystemExit) as exc:
        run_export(str(plan_file), "--to", "nemo", "--instance", str(TINY_PATH))
    assert exc.value.code == 2
