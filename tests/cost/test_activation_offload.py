"""Megatron-core's fine-grained activation offloading of the routed experts' inputs
(job.offload_modules: expert_fc1, moe_act; cost/moe.py): the bytes it takes off the GPU, the
copies over the host link that the layer's compute does not hide, and the load-time refusals.
Numbers derived by hand in the comments."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from paraplan.cost import moe, moe_params
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.moe_params import MoeParams
from paraplan.cost.specs import OffloadModule, Outer, RecomputeModule

QWEN3 = Path(__file__).resolve().parents[2] / "instances" / "qwen3-235b-a22b-256xH100.yaml"
# tp 4 with sequence parallelism, ep 8, etp 1: the expert tensor-parallel group gathers 1/4 of
# the tp group's tokens (fold = etp / tp = 1/4)
OUTER = Outer(tp=4, pp=8, dp=8, micro_batch=1, num_micro_batches=32, zero=1, sequence_parallel=True,
              ep=8, etp=1)
PARAMS = MoeParams(dropless_imbalance=1.1, combined_1f1b_hidden_fraction=0.5, grouped_gemm_eff=1.0,
                   layer_fixed_s=0.0, expert_gemm_issue_s=0.0)
# routed copies on the busiest rank: imbalance 1.1 x top_k 8 x 4,096 tokens x fold 1/4 = 9,011.2
# (what its copies over the host link move per pass, a time); what a rank stashes is the mean
# rank's, 8 x 4,096 / 4 = 8,192 (cost/moe.STASH_IMBALANCE)
ROUTED = 1.1 * 8 * 4096 / 4
STASHED = 8 * 4096 / 4
# bf16 job: MLP-in's input, 2 bytes x routed x hidden 4,096; the SwiGLU's input, 2 bytes x its
# two halves x routed x expert_ffn 1,536 / etp 1
FC1_BYTES = 2 * ROUTED * 4096  # 73,819,750.4
ACT_BYTES = 2 * 2 * ROUTED * 1536  # 55,364,812.8
FC1_STASH_BYTES = 2 * STASHED * 4096  # 67,108,864
ACT_STASH_BYTES = 2 * 2 * STASHED * 1536  # 50,331,648


def qwen3(**job):
    inst = load_instance(QWEN3)
    return replace(inst, job=replace(inst.job, **job))


@pytest.mark.parametrize("mods, saved", [((OffloadModule.EXPERT_FC1,), FC1_STASH_BYTES),
                                         ((OffloadModule.MOE_ACT,), ACT_STASH_BYTES),
                                         ((OffloadModule.EXPERT_FC1, OffloadModule.MOE_ACT),
                                          FC1_STASH_BYTES + ACT_STASH_BYTES)])
def test_offloading_takes_the_listed_inputs_off_the_gpu(mods, saved):
    with moe_params.using(PARAMS):
        kept = moe.expert_act_bytes(qwen3(), OUTER)
        offloaded = moe.expert_act_bytes(qwen3(offload_modules=mods), OUTER)
    assert kept - offloaded == pytest.approx(saved, rel=1e-12)


def test_the_copies_show_only_beyond_the_layer_compute_that_hides_them():
    # both inputs, 129,184,563.2 bytes, over the H100's PCIe 5.0 x16 host link at 64 GB/s one
    # way: 2.0185 ms per pass; hidden under that much compute or more
    inst = qwen3(offload_modules=(OffloadModule.EXPERT_FC1, OffloadModule.MOE_ACT))
    with moe_params.using(PARAMS):
        bare = moe.offload_exposed_s(inst, OUTER, inst.cluster.gpu, 0.0)
        half = moe.offload_exposed_s(inst, OUTER, inst.cluster.gpu, 1e-3)
        hidden = moe.offload_exposed_s(inst, OUTER, inst.cluster.gpu, 5e-3)
    assert bare == pytest.approx((FC1_BYTES + ACT_BYTES) / 64e9, rel=1e-12)
    assert half == pytest.approx(bare - 1e-3, rel=1e-12)
    assert hidden == 0.0
    # nothing to copy without the option
    assert moe.offload_exposed_s(qwen3(), OUTER, inst.cluster.gpu, 0.0) == 0.0


def _write(tmp_path, edit) -> Path:
    data = yaml.safe_load(QWEN3.read_text())
    edit(data)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("edit, field, words", [
    (lambda d: d["job"].update(offload_modules=["core_attn"]), "job.offload_modules[0]",
     "unknown value 'core_attn'"),
    (lambda d: (d["job"].update(offload_modules=["expert_fc1"]), d["model"].pop("moe")),
     "job.offload_modules", "no routed experts"),
    (lambda d: (d["job"].update(offload_modules=["expert_fc1"]),
                d["cluster"].update(gpu="A100-SXM4-80GB")), "job.offload_modules", "host"),
    (lambda d: (d["job"].update(offload_modules=["expert_fc1"], recompute_modules=["moe"]),
                d.setdefault("search", {}).update(full_recompute=False)), "job", "recompute_modules"),
    (lambda d: d["job"].update(offload_modules=["moe_act", "moe_act"]), "job.offload_modules",
     "twice"),
])
def test_bad_offload_options_are_refused_naming_the_field(tmp_path, edit, field, words):
    with pytest.raises(InstanceError) as err:
        load_instance(_write(tmp_path, edit))
    assert err.value.field.startswith(field), err.value
    assert words in str(err.value), err.value


def test_the_option_round_trips_through_a_plan_file_instance(tmp_path):
    path = _write(tmp_path, lambda d: d["job"].update(offload_modules=["expert_fc1", "moe_act"]))
    inst = load_instance(path)
    assert inst.job.offload_modules == (OffloadModule.EXPERT_FC1, OffloadModule.MOE_ACT)
    assert RecomputeModule.MOE not in inst.job.recompute_modules
