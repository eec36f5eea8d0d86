"""job.grad_reduce_dtype in the exports: Megatron-LM's flags for the main-gradient dtype (read
from megatron/training/arguments.py at d98e8a6: bf16 training turns
accumulate_allreduce_grads_in_fp32 on unless --grad-reduce-in-bf16; fp16 training reduces in
fp16 unless --accumulate-allreduce-grads-in-fp32), and a stated dtype another framework cannot
run turned into a deviation."""

from dataclasses import replace

from paraplan.cost.specs import Framework, GradReduceDtype, Precision
from tests.solver.test_export import (TINY, TINY_SW, UNIFORM, ZERO3, deepspeed_config,
                                      megatron_args, mentions, torchtitan_config)


def stated(inst, dtype: GradReduceDtype, **job_changes):
    return replace(inst, job=replace(inst.job, grad_reduce_dtype=dtype, **job_changes))


def test_megatron_default_keeps_fp32_main_gradients():
    args, _, unsupported = megatron_args(TINY, UNIFORM)
    assert args["--accumulate-allreduce-grads-in-fp32"] is True
    assert "--grad-reduce-in-bf16" not in args and unsupported == []


def test_megatron_bf16_reduction_writes_grad_reduce_in_bf16():
    args, _, unsupported = megatron_args(stated(TINY, GradReduceDtype.BF16), UNIFORM)
    assert args["--grad-reduce-in-bf16"] is True
    assert "--accumulate-allreduce-grads-in-fp32" not in args and unsupported == []


def test_megatron_fsdp_names_its_main_gradient_dtype():
    args, _, _ = megatron_args(stated(TINY, GradReduceDtype.BF16), ZERO3)
    assert args["--megatron-fsdp-main-grads-dtype"] == "bf16" and args["--grad-reduce-in-bf16"] is True
    args, _, _ = megatron_args(TINY, ZERO3)
    assert args["--megatron-fsdp-main-grads-dtype"] == "fp32"


def test_megatron_fp16_reduces_in_fp16_unless_told_fp32():
    fp16 = stated(TINY, GradReduceDtype.FP16, precision=Precision.FP16)
    args, _, _ = megatron_args(fp16, UNIFORM)
    assert "--accumulate-allreduce-grads-in-fp32" not in args and "--grad-reduce-in-bf16" not in args
    args, _, _ = megatron_args(stated(TINY, GradReduceDtype.FP32, precision=Precision.FP16), UNIFORM)
    assert args["--accumulate-allreduce-grads-in-fp32"] is True


def test_a_bf16_reduction_exported_to_torchtitan_is_a_deviation():
    cfg, unsupported = torchtitan_config(stated(TINY_SW, GradReduceDtype.BF16), UNIFORM)
    assert cfg["training"]["mixed_precision_reduce"] == "float32"
    assert mentions(unsupported, "job.grad_reduce_dtype bf16", "fp32 only")


def test_an_fp32_reduction_exported_to_deepspeed_is_a_deviation():
    cfg, unsupported, _ = deepspeed_config(stated(TINY, GradReduceDtype.FP32), UNIFORM)
    assert cfg["communication_data_type"] == "bf16"
    assert mentions(unsupported, "job.grad_reduce_dtype fp32", "communication_data_type")


def test_a_framework_default_crosses_over_silently():
    # a job that states nothing takes each target's own default: no deviation for it
    _, unsupported, _ = deepspeed_config(replace(TINY, job=replace(TINY.job, framework=Framework.MEGATRON)),
                                         UNIFORM)
    assert not mentions(unsupported, "grad_reduce_dtype")
