"""What fine-grained experts cost beyond their FLOPs (cost/moe.py, cost/moe_params.py):
grouped-GEMM tile padding, the fixed time per MoE layer, the host loop over local experts, the
whole-MoE recompute; numbers derived by hand in the comments."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost import coefficients, moe, moe_params
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.moe_params import MoeParams
from paraplan.cost.specs import Outer, RecomputeModule

INSTANCES = Path(__file__).resolve().parents[2] / "instances"
QWEN3 = INSTANCES / "qwen3-235b-a22b-256xH100.yaml"
# Qwen3-235B-A22B's long-context layout (Megatron-MoE-ModelZoo): tp 4, ep 8, etp 1, cp 1
OUTER = Outer(tp=4, pp=8, dp=8, micro_batch=1, num_micro_batches=32, zero=1, sequence_parallel=True,
              ep=8, etp=1)


def qwen3(**job):
    inst = load_instance(QWEN3)
    return replace(inst, job=replace(inst.job, **job)) if job else inst


def _terms(inst, o=OUTER):
    site = coefficients.homogeneous_placement(inst.cluster.one_group, o).sites[0]
    return moe.expert_terms(inst, o, site.gpu, site.etp_link or site.tp_link, site.ep_links,
                            NetEfficiency(), coefficients.matmul_time_s, coefficients.memory_time_s)


def test_padding_is_half_a_tile_per_expert_with_rows():
    # DeepGEMM aligns each expert's rows to its 128-row M block: half a block wasted on average
    assert moe.GROUPED_GEMM_TILE_ROWS == 128
    assert moe.padded_tokens(100.0) == 164.0
    assert moe.padded_tokens(0.0) == 0.0


def test_fixed_time_is_one_third_forward_two_thirds_backward():
    # the fixed exposed time per MoE layer and micro-batch adds f/3 to forward, 2f/3 to backward
    base = MoeParams(dropless_imbalance=1.1, combined_1f1b_hidden_fraction=0.5, grouped_gemm_eff=1.0,
                     layer_fixed_s=0.0, expert_gemm_issue_s=0.0)
    inst = qwen3()
    with moe_params.using(base):
        a = _terms(qwen3())
    with moe_params.using(replace(base, layer_fixed_s=9e-4)):
        b = _terms(inst)
    assert b.compute_f_s - a.compute_f_s == pytest.approx(3e-4, rel=1e-9)
    assert b.compute_b_s - a.compute_b_s == pytest.approx(6e-4, rel=1e-9)


def test_grouped_gemm_efficiency_scales_the_expert_gemms_only():
    # at efficiency 0.5 the compute-bound expert GEMMs take twice as long: forward grows by
    # what its GEMMs took (2x - x), backward by the input- and weight-gradient GEMMs'
    base = MoeParams(dropless_imbalance=1.1, combined_1f1b_hidden_fraction=0.5, grouped_gemm_eff=1.0,
                     layer_fixed_s=0.0, expert_gemm_issue_s=0.0)
    inst = qwen3()
    # Qwen3-235B: h 4,096, expert ffn 1,536, 128 experts top-8; tp 4 (sequence parallel),
    # etp 1, ep 8: routed copies 1.1 x 8 x 4,096 / 4 = 9,011.2 on the rank's 16 experts,
    # 563.2 each, padded to 627.2 rows; forward: 16 x 3 GEMMs of 2 x 627.2 x 4,096 x 1,536 FLOPs
    gpu = inst.cluster.gpu
    gemm = coefficients.matmul_time_s(2 * 627.2 * 4096 * 1536, gpu)
    with moe_params.using(base):
        a = _terms(qwen3())
    with moe_params.using(replace(base, grouped_gemm_eff=0.5)):
        b = _terms(inst)
    assert b.compute_f_s - a.compute_f_s == pytest.approx(16 * 3 * gemm, rel=1e-9)


def test_whole_moe_recompute_stashes_nothing_and_reruns_forward():
    # recompute module "moe" (Megatron-core's): the routed part keeps no activation, and its
    # backward reruns the forward (compute, dispatch and combine, the etp collectives)
    plain = _terms(qwen3(recompute_modules=()))
    whole = _terms(qwen3(recompute_modules=(RecomputeModule.MOE,)))
    assert plain.act_bytes > 0 and whole.act_bytes == 0.0
    assert whole.compute_b_s == pytest.approx(plain.compute_b_s + plain.compute_f_s, rel=1e-12)
    assert whole.a2a_b_s == pytest.approx(2 * plain.a2a_b_s, rel=1e-12)
    assert whole.compute_f_s == plain.compute_f_s and whole.a2a_f_s == plain.a2a_f_s


def test_long_context_anchor_fits_80_gib_as_it_ran():
    # Megatron-MoE-ModelZoo's 16k Qwen3-235B run on 80 GB H100s recomputed whole MoE layers
    # ("--recompute-modules layernorm moe"); priced with only the experts' activation
    # recomputed (moe_act) it needed 127 GiB, so paraplan called a run that ran out of memory
    from paraplan.cost.moe_anchors import anchor_rows, price
    row = next(r for r in anchor_rows() if r["id"] == "modelzoo-qwen3-235b-256xH100-16k-forced")
    assert row["paraplan_options"]["job"]["recompute_modules"] == ["layernorm", "moe"]
    assert price(row).fits_memory
    act = dict(row, paraplan_options={**row["paraplan_options"],
                                      "job": {**row["paraplan_options"]["job"],
                                              "recompute_modules": ["layernorm", "moe_act"]}})
    assert not price(act).fits_memory


def test_moe_recompute_needs_an_moe_model(tmp_path):
    import yaml

    from paraplan.cost.errors import InstanceError
    raw = yaml.safe_load((INSTANCES / "llama3-8b-64xH100.yaml").read_text())
    raw.setdefault("job", {})["recompute_modules"] = ["moe"]
    path = tmp_path / "dense.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InstanceError, match="moe: .* has no routed experts"):
        load_instance(path)


def test_the_host_loop_over_local_experts_adds_to_the_gemms_on_the_tp4_anchor():
    # Megatron-MoE-ModelZoo's Qwen3-235B "intra-node EP" row (modelzoo-qwen3-235b-256xH100-
    # deepep-tp4): tp 4, ep 8, etp 1, so 128 / 8 = 16 experts a rank. Each MoE layer's experts
    # run as 2 Transformer Engine GroupedLinear calls (MLP-in with its gate, MLP-out), and each
    # call loops over the 16 experts on the host before its GEMMs: per pass 2 x 16 = 32 expert
    # loops. At 30 us an expert and call: forward 32 x 30 us = 0.96 ms; backward runs the loop
    # for the input gradients and again for the weight gradients, 2 x 0.96 = 1.92 ms; the
    # weight-gradient part (what DualPipe defers) 0.96 ms. Added to the GEMMs, whatever their
    # size: the same seconds with the GEMMs twice as slow (grouped_gemm_eff 0.5).
    from paraplan.cost.readers.plan_reader import plan_from_mapping
    from paraplan.cost.moe_anchors import anchor_instance, anchor_rows
    row = next(r for r in anchor_rows() if r["id"] == "modelzoo-qwen3-235b-256xH100-deepep-tp4")
    inst = anchor_instance(row)
    o = plan_from_mapping(row["paraplan_plan"], inst, row["id"]).flat_outer
    assert (o.tp, o.ep, o.expert_tp, inst.model.moe.experts // o.ep) == (4, 8, 1, 16)
    assert moe.expert_host_s(16, 3e-5) == pytest.approx(2 * 16 * 3e-5)
    for eff in (1.0, 0.5):
        base = MoeParams(dropless_imbalance=1.1, combined_1f1b_hidden_fraction=0.5, grouped_gemm_eff=eff,
                         layer_fixed_s=0.0, expert_gemm_issue_s=0.0)
        with moe_params.using(base):
            a = _terms(anchor_instance(row), o)
        with moe_params.using(replace(base, expert_gemm_issue_s=3e-5)):
            b = _terms(anchor_instance(row), o)
        assert b.compute_f_s - a.compute_f_s == pytest.approx(0.96e-3, rel=1e-9)
        assert b.compute_b_s - a.compute_b_s == pytest.approx(1.92e-3, rel=1e-9)
        assert b.wgrad_s - a.wgrad_s == pytest.approx(0.96e-3, rel=1e-9)


def test_one_expert_a_rank_pays_one_loop_step_per_call():
    # Mixtral 8x22B's published layout (ep 8: one expert a rank): each pass's 2 grouped calls
    # loop over one expert, 2 x 1 x 30 us = 60 us forward, 120 us backward, against the tp4
    # anchor's 16 experts' 0.96 ms: the host loop is what many local experts cost
    from paraplan.cost.readers.plan_reader import plan_from_mapping
    from paraplan.cost.moe_anchors import anchor_instance, anchor_rows
    row = next(r for r in anchor_rows() if r["id"] == "modelzoo-mixtral-8x22b-128xH100-forced")
    inst = anchor_instance(row)
    o = plan_from_mapping(row["paraplan_plan"], inst, row["id"]).flat_outer
    assert inst.model.moe.experts // o.ep == 1
    base = replace(moe_params.FITTED, expert_gemm_issue_s=0.0)
    with moe_params.using(base):
        a = _terms(anchor_instance(row), o)
    with moe_params.using(replace(base, expert_gemm_issue_s=3e-5)):
        b = _terms(anchor_instance(row), o)
    assert b.compute_f_s - a.compute_f_s == pytest.approx(60e-6, rel=1e-9)
    assert b.compute_b_s - a.compute_b_s == pytest.approx(120e-6, rel=1e-9)


def test_the_all_to_all_dispatcher_sorts_the_received_copies_by_local_expert_and_back():
    # Qwen3-235B at 4,096 tokens, tp 4 (sequence parallel), ep 8, etp 1: 128 / 8 = 16 experts a
    # rank, dropless at imbalance 1.1 (FITTED). The etp group's routed copies:
    # 1.1 x 8 (top-k) x 4,096 x 1 / 4 (etp / tp) = 9,011.2; sorting them by local expert and
    # back reads and writes each copy's 4,096 bf16 once per pass: 2 passes x 2 x 9,011.2 x 4,096
    # x 2 bytes = 2.953e8 bytes, at H100's 3.35 TB/s x memory_eff 0.7299 = 1.2076e-4 s forward;
    # backward runs every memory-bound pass twice. DeepEP's dispatch (one permute, as priced for
    # both) and a rank with one expert sort nothing.
    from paraplan.cost.specs import MoeDispatcher
    base = qwen3(moe_dispatcher=MoeDispatcher.DEEPEP)
    a2a = qwen3(moe_dispatcher=MoeDispatcher.ALLTOALL)
    x, y = _terms(base), _terms(a2a)
    assert moe_params.FITTED.dropless_imbalance == 1.1
    sort_s = 2 * 2 * (1.1 * 8 * 4096 / 4) * 4096 * 2 / (3350e9 * 0.7299)
    assert sort_s == pytest.approx(1.2076e-4, rel=1e-4)
    assert y.compute_f_s - x.compute_f_s == pytest.approx(sort_s, rel=1e-9)
    assert y.compute_b_s - x.compute_b_s == pytest.approx(2 * sort_s, rel=1e-9)
    # ep 128 (tp 4 x dp 32 = 128 GPUs a stage, etp 1): one expert a rank, no chunks to sort
    one = replace(OUTER, pp=1, dp=32, num_micro_batches=8, ep=128)
    assert _terms(a2a, one).compute_f_s == pytest.approx(_terms(base, one).compute_f_s, rel=1e-12)
