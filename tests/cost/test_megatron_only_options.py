"""JobSpec refuses, under any framework but megatron, each option only Megatron-LM runs
(cost/specs.JobSpec._check_megatron_only_options: Megatron-core's module options and expert
all-to-all overlap, Transformer Engine's userbuffers and attention kernel), naming the key and
the fix, and takes each under megatron."""

import pytest

from paraplan.cost.errors import ConfigError
from paraplan.cost.specs import Framework, JobSpec, OffloadModule, RecomputeModule

ONLY_MEGATRON = [("recompute_modules", (RecomputeModule.LAYERNORM,)),
                 ("offload_modules", (OffloadModule.MOE_ACT,)),
                 ("activation_fp8_input_store", True),
                 ("tp_comm_overlap", True),
                 ("cudnn_attention", False),
                 ("moe_a2a_overlap", True)]


@pytest.mark.parametrize("framework", [Framework.TORCHTITAN, Framework.DEEPSPEED])
@pytest.mark.parametrize("key, value", ONLY_MEGATRON)
def test_refused_outside_megatron_naming_key_and_fix(framework, key, value):
    with pytest.raises(ConfigError) as err:
        JobSpec(global_batch=8, framework=framework, **{key: value})
    text = str(err.value)
    assert text.startswith(f"job.{key} is ") and "only framework megatron runs" in text
    assert f"(job.framework: {framework.value})" in text and f"remove {key}, or set framework: megatron" in text


@pytest.mark.parametrize("key, value", ONLY_MEGATRON)
def test_taken_under_megatron(key, value):
    assert getattr(JobSpec(global_batch=8, framework=Framework.MEGATRON, **{key: value}), key) == value
