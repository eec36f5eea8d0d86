"""The small parameter tensors of the 2025 families (issue 34, model import): a per-head q/k
RMSNorm (`ModelSpec.qk_norm`: Qwen3, Qwen3-MoE, Gemma-3), attention sinks
(`ModelSpec.attention_sinks`: gpt-oss) and expert and router biases (`ModelSpec.expert_bias`:
gpt-oss). Each is counted as parameters, so the state memory of the rank holding them follows;
the YAML keys default to off and round-trip through a plan file.

Numbers by hand for the bundled Mixtral 8x7B (hidden 4,096, 32 heads of 128, 8 kv heads,
8 SwiGLU experts of 14,336, 2 per token, 32 layers)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from paraplan.cost import coefficients, memory
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import InstanceError
from paraplan.cost.flops import (active_params, expert_params, layer_elementwise_bytes,
                                 layer_params, model_params)
from paraplan.cost.readers.instance import instance_from_mapping, load_instance
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.specs import Outer

INSTANCES = Path(__file__).resolve().parents[2] / "instances"
MIXTRAL = INSTANCES / "mixtral-8x7b-64xH100.yaml"
EXTRAS = dict(qk_norm=True, attention_sinks=True, expert_bias=True)
# per MoE layer: q_norm + k_norm 2 x 128 = 256, sinks 32 (one per head), router bias 8 (one
# per expert); per expert: gate and up biases 2 x 14,336 + down bias 4,096 = 32,768
NON_EXPERT, PER_EXPERT = 256 + 32 + 8, 2 * 14_336 + 4_096


def mixtral():
    return load_instance(MIXTRAL)


def test_defaults_are_off_for_the_bundled_models():
    for path in (MIXTRAL, INSTANCES / "llama3-8b-64xH100.yaml"):
        m = load_instance(path).model
        assert not (m.qk_norm or m.attention_sinks or m.expert_bias)


def test_counts_by_hand():
    base = mixtral().model
    m = replace(base, **EXTRAS)
    assert layer_params(m) - layer_params(base) == NON_EXPERT == 296
    assert expert_params(m) - expert_params(base) == PER_EXPERT == 32_768
    # all 8 experts: 32 x (296 + 8 x 32,768) = 8,398,080; 2 per token: 32 x (296 + 2 x 32,768)
    assert model_params(m) - model_params(base) == 32 * (296 + 8 * 32_768) == 8_398_080
    assert active_params(m) - active_params(base) == 32 * (296 + 2 * 32_768) == 2_106_624


def test_state_memory_follows_the_parameters():
    # the dense part: 296 more parameters per layer, 1/tp of them on each rank, at the
    # framework's state bytes per parameter (Megatron, ZeRO-1 over 8: 2 + 4 + 12 / 8)
    base = mixtral().model
    m = replace(base, **EXTRAS)
    per_param = memory.state_bytes_per_param(1, 8)
    assert memory.layer_state_bytes(m, 2, 1, 8) - memory.layer_state_bytes(base, 2, 1, 8) == \
        pytest.approx(296 / 2 * per_param)
    # the experts: tp 1, ep 8 holds one expert, its 3 x 4,096 x 14,336 = 176,160,768 weights
    # and now its 32,768 biases
    o = Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=3, ep=8)
    site = coefficients.homogeneous_placement(mixtral().cluster.one_group, o).sites[0]

    def held(inst):
        return coefficients._layer_costs(inst, o, site, o.dp * o.cp, NetEfficiency(),
                                         coefficients.moe_layer).terms.expert_params
    inst = mixtral()
    assert held(inst) == 176_160_768
    assert held(replace(inst, model=replace(inst.model, **EXTRAS))) == 176_160_768 + 32_768


def test_qk_norm_is_one_more_pass_over_q_and_k():
    # Llama-3 8B at 8,192 tokens: Q 4,096 and K 1,024 wide, read and written once more in bf16:
    # 2 x 8,192 x (4,096 + 1,024) x 2 bytes = 167,772,160
    base = load_instance(INSTANCES / "llama3-8b-64xH100.yaml").model
    m = replace(base, qk_norm=True)
    assert base.seq_len == 8192
    assert layer_elementwise_bytes(m, 1, 1, 1, False) - layer_elementwise_bytes(base, 1, 1, 1, False) \
        == 167_772_160
    assert layer_params(m) - layer_params(base) == 2 * 128


def _write(tmp_path: Path, path: Path, **model_keys) -> Path:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["model"].update(model_keys)
    out = tmp_path / "instance.yaml"
    out.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return out


def test_yaml_keys_are_read_and_survive_a_plan_file(tmp_path):
    inst = load_instance(_write(tmp_path, MIXTRAL, **EXTRAS))
    assert (inst.model.qk_norm, inst.model.attention_sinks, inst.model.expert_bias) == (True,) * 3
    text = yaml.safe_dump(instance_to_mapping(inst))
    assert instance_from_mapping(yaml.safe_load(text), "plan.yaml").model == inst.model


@pytest.mark.parametrize("path, keys, field", [
    (INSTANCES / "llama3-8b-64xH100.yaml", dict(expert_bias=True), "model.expert_bias"),
    (INSTANCES / "deepseek-v3-shaped-2048xH800.yaml", dict(qk_norm=True), "model.qk_norm"),
    (MIXTRAL, dict(attention_sinks="yes"), "model.attention_sinks"),
])
def test_bad_keys_are_one_line(tmp_path, path, keys, field):
    with pytest.raises(InstanceError) as info:
        load_instance(_write(tmp_path, path, **keys))
    assert info.value.field == field and "\n" not in str(info.value)
