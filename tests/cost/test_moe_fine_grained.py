"""What fine-grained experts cost beyond their FLOPs (cost/moe.py, cost/moe_params.py):
grouped-GEMM tile padding, the fixed time per MoE layer, the whole-MoE recompute; numbers
derived by hand in the comments."""

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
    site = coefficients.homogeneous_placement(inst.cluster, o).sites[0]
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


def test_many_small_experts_per_rank_are_bound_by_issuing_their_gemms():
    # Qwen3-235B at ep 1 (all 128 experts on every rank), cp 2, one sequence per micro-batch,
    # imbalance irrelevant at ep 1: 2,048 tokens x 8 copies / 128 experts = 128 rows each,
    # padded to 192 on the forward and input-gradient GEMMs. One expert GEMM (W = 4,096 x 1,536
    # weights) on H100: FLOPs (2 x 192 x W + 6.05 GFLOP) / (989 T x 0.6300) = 13.59 us, the
    # longer: its bf16 weight read 2 W bytes / (3.35 TB/s x 0.7299) = 5.15 us; 3 GEMMs (gate,
    # up, out) = 40.76 us an expert. Issuing each expert's GEMM of the two grouped calls at 30 us
    # takes 2 x 30 = 60 us an expert, so the forward and the input gradients each take 128 x
    # 60 us = 7.68 ms instead of 128 x 40.76 us = 5.22 ms: +2.46 ms each. The weight
    # gradients accumulate into the fp32 main gradient (8 bytes a weight: 20.58 us a GEMM,
    # above its (2 x 128 x W + 6.05 GFLOP) / (989 T x 0.6300) = 12.29 us; 61.75 us an expert)
    # and stay above the issue time: backward grows by the input gradients' 2.46 ms only.
    inst = qwen3()
    o = Outer(tp=1, pp=16, dp=8, cp=2, micro_batch=1, num_micro_batches=64, ep=1)
    base = MoeParams(dropless_imbalance=1.1, combined_1f1b_hidden_fraction=0.5, grouped_gemm_eff=1.0,
                     layer_fixed_s=0.0, expert_gemm_issue_s=0.0)
    w = 4096 * 1536
    compute = 989e12 * 0.6300
    hbm = 3.35e12 * 0.7299
    gemm = max((2 * 192 * w + 6.05e9) / compute, 2 * w / hbm)
    assert gemm == pytest.approx(13.59e-6, rel=1e-3)
    assert 3 * max((2 * 128 * w + 6.05e9) / compute, 8 * w / hbm) > 2 * 3e-5
    with moe_params.using(base):
        a = _terms(qwen3(), o)
    with moe_params.using(replace(base, expert_gemm_issue_s=3e-5)):
        b = _terms(inst, o)
    grew = 128 * (2 * 3e-5 - 3 * gemm)
    assert grew == pytest.approx(2.462e-3, rel=1e-3)
    assert b.compute_f_s - a.compute_f_s == pytest.approx(grew, rel=1e-9)
    assert b.compute_b_s - a.compute_b_s == pytest.approx(grew, rel=1e-9)
    assert b.wgrad_s == a.wgrad_s


def test_few_large_experts_per_rank_do_not_read_the_issue_time():
    # Mixtral 8x22B's published layout (ep 8: one expert a rank, every GEMM tens of GFLOP)
    # prices alike with and without the issue time: its GEMMs outlast 2 x 30 us
    from paraplan.cost.moe_anchors import anchor_rows, price
    row = next(r for r in anchor_rows() if r["id"] == "modelzoo-mixtral-8x22b-128xH100-forced")
    base = replace(moe_params.FITTED, expert_gemm_issue_s=0.0)
    with moe_params.using(base):
        a = price(row).iter_time_s
    with moe_params.using(replace(base, expert_gemm_issue_s=3e-5)):
        b = price(row).iter_time_s
    assert a == b


def test_the_all_to_all_dispatcher_sorts_the_received_copies_by_local_expert_and_back():
    # Qwen3-235B at 4,096 tokens, tp 4 (sequence parallel), ep 8, etp 1: 128 / 8 = 16 experts a
    # rank, dropless at imbalance 1.2 (FITTED). The etp group's routed copies:
    # 1.2 x 8 (top-k) x 4,096 x 1 / 4 (etp / tp) = 9,830.4; sorting them by local expert and
    # back reads and writes each copy's 4,096 bf16 once per pass: 2 passes x 2 x 9,830.4 x 4,096
    # x 2 bytes = 3.221e8 bytes, at H100's 3.35 TB/s x memory_eff 0.7299 = 1.3174e-4 s forward;
    # backward runs every memory-bound pass twice. DeepEP's dispatch (one permute, as priced for
    # both) and a rank with one expert sort nothing.
    from paraplan.cost.specs import MoeDispatcher
    base = qwen3(moe_dispatcher=MoeDispatcher.DEEPEP)
    a2a = qwen3(moe_dispatcher=MoeDispatcher.ALLTOALL)
    x, y = _terms(base), _terms(a2a)
    sort_s = 2 * 2 * (1.2 * 8 * 4096 / 4) * 4096 * 2 / (3350e9 * 0.7299)
    assert sort_s == pytest.approx(1.3174e-4, rel=1e-4)
    assert y.compute_f_s - x.compute_f_s == pytest.approx(sort_s, rel=1e-9)
    assert y.compute_b_s - x.compute_b_s == pytest.approx(2 * sort_s, rel=1e-9)
    # ep 128 (tp 4 x dp 32 = 128 GPUs a stage, etp 1): one expert a rank, no chunks to sort
    one = replace(OUTER, pp=1, dp=32, num_micro_batches=8, ep=128)
    assert _terms(a2a, one).compute_f_s == pytest.approx(_terms(base, one).compute_f_s, rel=1e-12)
