"""Exports fed to the frameworks' own parsers (opt-in: `pytest -m framework`; each test is
skipped where its framework is not importable, so the default suite needs none of them).

- torchtitan 0.2.x: ConfigManager.parse_args on the TOML (unknown keys and bad Literal values
  are errors there), ParallelDims on the degrees, the llama3 flavor built on the meta device.
- DeepSpeed 0.19: DeepSpeedConfig on the JSON (its pydantic models forbid unknown keys; the
  batch arithmetic is asserted) with the data-parallel size of the plan.
- Megatron-LM main (Python >= 3.12, megatron/ on the path): parse_args + validate_args on the
  arguments, with the environment the export sets and a Hopper GPU assumed.
Each parsed value is compared with the emitted plan.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost.readers.instance import load_instance
from paraplan.cost.specs import Mlp, Precision, Recompute
from paraplan.cost.plan_specs import Plan
from paraplan.solver.export import to_deepspeed, to_megatron, to_torchtitan

pytestmark = pytest.mark.framework

ROOT = Path(__file__).resolve().parents[2]
LLAMA8B = load_instance(ROOT / "instances" / "llama3-8b-64xH100.yaml")  # 64 GPUs, 32 layers, batch 512
TINY = load_instance(ROOT / "instances" / "tiny-gpt-8xA100.yaml")  # 8 GPUs, 8 layers, batch 32
TINY_SW = replace(TINY, model=replace(TINY.model, mlp=Mlp.SWIGLU))
FP8 = replace(LLAMA8B, job=replace(LLAMA8B.job, precision=Precision.FP8))
# 30 layers: with the embedding and loss counted, 32 slots, 8 per stage on pp 4
LLAMA30 = replace(LLAMA8B, model=replace(LLAMA8B.model, layers=30))


def plan(layers, full=None, **kw) -> Plan:
    return Plan.flat(layers_per_stage=tuple(layers), pp=len(layers),
                full_recompute_layers=tuple(full or [0] * len(layers)), **kw)


# (instance, plan): the modes each exporter writes differently
CASES = {
    "zero3-fsdp": (LLAMA8B, plan([32], tp=1, dp=64, micro_batch=1, num_micro_batches=8, zero=3)),
    "zero2-fsdp": (LLAMA8B, plan([32], tp=1, dp=64, micro_batch=1, num_micro_batches=8, zero=2)),
    "tp-sp-zero1": (LLAMA8B, plan([32], tp=8, dp=8, micro_batch=1, num_micro_batches=64,
                                  sequence_parallel=True, zero=1, recompute=Recompute.SELECTIVE)),
    "pp-uneven-middle": (LLAMA8B, plan([6, 10, 8, 8], tp=2, dp=8, micro_batch=1,
                                       num_micro_batches=64, sequence_parallel=True, zero=1,
                                       full=[6, 4, 0, 0])),
    "pp-interleaved": (LLAMA8B, plan([8, 8, 8, 8], tp=2, dp=8, micro_batch=1,
                                     num_micro_batches=64, sequence_parallel=True, zero=1,
                                     virtual_stages=2)),
    "pp-interleaved-accounted": (LLAMA30, plan([7, 8, 8, 7], tp=2, dp=8, micro_batch=1,
                                               num_micro_batches=64, sequence_parallel=True,
                                               zero=1, virtual_stages=2, embedding_in_split=True,
                                               loss_in_split=True)),
    "cp-tp": (LLAMA8B, plan([32], tp=4, cp=2, dp=8, micro_batch=1, num_micro_batches=64,
                            sequence_parallel=True, zero=3)),
    "fp8": (FP8, plan([32], tp=8, dp=8, micro_batch=1, num_micro_batches=64,
                      sequence_parallel=True, zero=1)),
    "custom-shape": (TINY_SW, plan([4, 4], tp=2, dp=2, micro_batch=2, num_micro_batches=8,
                                   sequence_parallel=True, zero=0, full=[4, 4])),
}


# --- torchtitan ----------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_torchtitan_parser(case, tmp_path):
    config = pytest.importorskip("torchtitan.config")
    from torchtitan.distributed import ParallelDims
    from torchtitan.protocols.train_spec import get_train_spec

    inst, p = CASES[case]
    res = to_torchtitan(inst, p)
    path = tmp_path / "job.toml"
    path.write_text(res.text)
    cfg = config.ConfigManager().parse_args(["--job.config_file", str(path)])
    e = res.emitted.plan
    par = cfg.parallelism
    dims = ParallelDims(dp_replicate=par.data_parallel_replicate_degree,
                        dp_shard=par.data_parallel_shard_degree, cp=par.context_parallel_degree,
                        tp=par.tensor_parallel_degree, pp=par.pipeline_parallel_degree, ep=1,
                        etp=1, world_size=inst.cluster.num_gpus)
    assert (dims.tp, dims.pp, dims.cp) == (e.tp, e.pp, e.cp)
    assert dims.dp_replicate * dims.dp_shard == e.dp
    assert inst.model.seq_len % dims.seq_len_divisor == 0
    assert par.fsdp_reshard_after_forward == ("always" if e.zero == 3 else "never")
    if e.cp > 1:
        assert par.context_parallel_rotate_method == "alltoall"
    assert cfg.training.seq_len == inst.model.seq_len
    assert cfg.training.global_batch_size == inst.job.global_batch
    spec = get_train_spec(cfg.model.name)
    if cfg.model.flavor in spec.model_args:
        args = spec.model_args[cfg.model.flavor]
    else:  # the flavor the export asks the user to register, from its comment line
        line = next(x for x in res.text.splitlines() if "TransformerModelArgs(" in x)
        call = line.split(": ", 1)[1].rsplit(",", 1)[0]
        from torchtitan.models.llama3 import TransformerModelArgs
        args = eval(call, {"TransformerModelArgs": TransformerModelArgs})
    import torch
    with torch.device("meta"):
        model = spec.model_cls(args)
    m = inst.model
    block = model.layers["0"]
    assert block.feed_forward.w1.weight.shape == (m.ffn, m.hidden)
    assert block.attention.wk.weight.shape == (m.kv_heads * m.head_dim, m.hidden)
    assert len(model.layers) == m.layers and model.output.weight.shape == (m.vocab, m.hidden)
    if e.pp > 1:
        parts = par.module_fqns_per_model_part
        assert len(parts) == e.pp * e.virtual_stages
        assert sum(len([n for n in part if n.startswith("layers.")]) for part in parts) == m.layers
    if inst.job.precision is Precision.FP8:
        assert cfg.model.converters == ["quantize.linear.float8"]
        assert cfg.quantize.linear.float8.recipe_name == "tensorwise"


# --- DeepSpeed -----------------------------------------------------------------------------

class _Mpu:
    """The data-parallel size DeepSpeedConfig divides the batch by."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


@pytest.mark.parametrize("case", list(CASES))
def test_deepspeed_parser(case, monkeypatch):
    pytest.importorskip("deepspeed")
    import json

    import deepspeed.runtime.config as ds_config

    inst, p = CASES[case]
    res = to_deepspeed(inst, p)
    e = res.emitted.plan
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)  # no process group here
    cfg = ds_config.DeepSpeedConfig(json.loads(res.text), mpu=_Mpu(e.dp))
    assert cfg.train_batch_size == inst.job.global_batch
    assert cfg.train_micro_batch_size_per_gpu == e.micro_batch
    assert cfg.gradient_accumulation_steps == e.num_micro_batches
    assert cfg.zero_optimization_stage == e.zero
    z = cfg.zero_config
    if e.zero >= 1:
        assert z.overlap_comm and z.reduce_bucket_size == 5e8 and z.allgather_bucket_size == 5e8
    if e.zero == 3:
        assert z.prefetch_bucket_size == 5e7 and z.max_reuse_distance == 1e9


# --- Megatron-LM ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_megatron_parser(case, monkeypatch):
    arguments = pytest.importorskip("megatron.training.arguments")
    inst, p = CASES[case]
    res = to_megatron(inst, p)
    lines = res.text.splitlines()
    start = lines.index("MEGATRON_ARGS=(")
    argv = [w for line in lines[start + 1:-1] for w in shlex.split(line, comments=True)]
    for line in lines[:start]:
        if line.startswith("export "):
            key, value = line.split()[1].split("=")
            monkeypatch.setenv(key, value)
        elif line.startswith("unset "):
            monkeypatch.delenv(line.split()[1], raising=False)
    monkeypatch.setenv("WORLD_SIZE", str(inst.cluster.num_gpus))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(arguments, "get_device_arch_version", lambda: 9)  # Hopper
    monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *argv, "--tokenizer-type", "NullTokenizer"])
    args = arguments.parse_args()
    arguments.validate_args(args, {})
    e, m = res.emitted.plan, res.emitted.inst.model
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
            args.context_parallel_size, args.data_parallel_size) == (e.tp, e.pp, e.cp, e.dp)
    # without --group-query-attention the model gets num_query_groups None, i.e. full
    # attention, whatever args.num_query_groups says (argument_utils.py, transformer config)
    groups = args.num_query_groups if args.group_query_attention else args.num_attention_heads
    assert (args.num_layers, args.hidden_size, args.ffn_hidden_size, args.num_attention_heads,
            groups, args.kv_channels) == (m.layers, m.hidden, m.ffn, m.heads, m.kv_heads, m.head_dim)
    assert args.swiglu is (m.mlp is Mlp.SWIGLU)
    assert args.untie_embeddings_and_output_weights is (not m.tied_embeddings)
    assert args.micro_batch_size == e.micro_batch and args.global_batch_size == inst.job.global_batch
    assert args.hidden_dropout == m.dropout and not args.add_bias_linear
    assert args.use_distributed_optimizer is (e.zero >= 1 and e.dp * e.cp > 1)
    assert bool(getattr(args, "use_megatron_fsdp", False)) is (e.zero >= 2 and e.dp * e.cp > 1)
    assert args.overlap_grad_reduce is (e.dp * e.cp > 1)
    assert args.overlap_param_gather is (e.zero == 3 and e.dp * e.cp > 1)
    assert (args.virtual_pipeline_model_parallel_size or 1) == e.virtual_stages
    assert args.account_for_embedding_in_pipeline_split is e.embedding_in_split
    assert args.account_for_loss_in_pipeline_split is e.loss_in_split
    if any(e.full_recompute_layers):
        assert args.recompute_granularity == "full" and args.recompute_method == "block"
