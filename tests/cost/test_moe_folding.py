"""MoE parallel folding: expert tensor parallel degree etp != tp (cost/moe.py, Megatron-core's
--expert-tensor-parallel-size). Numbers derived by hand in the comments for Mixtral 8x7B
(hidden 4096, expert ffn 14336, SwiGLU, 8 experts, top-2, seq 4096) on the bundled 64 x H100
(8 per node, NVLink 450 GB/s per direction at 0.8 efficiency, NIC 50 GB/s at 0.95, NCCL call
latency 8.4 us, hops 5 us NVLink / 10 us network), routing balanced (imbalance 1.0)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost import coefficients, moe
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.readers.search import search_from_section
from paraplan.cost.space_rules import expert_layouts, moe_refusal
from paraplan.cost.specs import Outer
from paraplan.cost.plan_specs import Plan

MIXTRAL = Path(__file__).resolve().parents[2] / "instances" / "mixtral-8x7b-64xH100.yaml"
NVLINK_BW = 0.8 * 450e9
NIC_BW = 0.95 * 50e9


def mixtral():
    inst = load_instance(MIXTRAL)
    return replace(inst, model=replace(inst.model, moe=replace(inst.model.moe, imbalance=1.0)))


# tp 4 with sequence parallelism, dp 16, ep 8, ZeRO-1; etp 1 (folded) against etp = tp = 4
BASE = Outer(tp=4, pp=1, dp=16, micro_batch=1, num_micro_batches=16, sequence_parallel=True,
             zero=1, ep=8)
FOLDED = replace(BASE, etp=1)


def terms(inst, o):
    site = coefficients.homogeneous_placement(inst.cluster.one_group, o).sites[0]
    return moe.expert_terms(inst, o, site.gpu, site.etp_link or site.tp_link, site.ep_links,
                            NetEfficiency(), coefficients.matmul_time_s, coefficients.memory_time_s)


def test_an_etp_equal_to_tp_is_the_default_plan():
    # a plan naming etp = tp is the plan that leaves etp out (stored as None), so old plan files
    # and goldens read as before
    assert replace(BASE, etp=4) == BASE and replace(BASE, etp=4).etp is None
    assert BASE.expert_tp == 4 and FOLDED.expert_tp == 1


def test_routed_tokens_all_to_all_bytes_and_weights_by_hand():
    # Each rank holds its 1/4 sequence-parallel share, 1024 tokens, and dispatches their 2
    # copies: 2048 copies of 4096 bf16 values, 16,777,216 bytes, whatever etp. The etp group's
    # experts see its ranks' copies: etp 4: 8192 (one replica's whole shard, as before
    # folding), etp 1: 2048.
    m = mixtral().model
    assert moe.routed_tokens(m, 1, 1, 8, moe.fold(BASE)) == 8192
    assert moe.routed_tokens(m, 1, 1, 8, moe.fold(FOLDED)) == 2048
    assert moe.a2a_bytes(m, BASE) == moe.a2a_bytes(m, FOLDED) == 16_777_216
    # weights per GPU: 8 / 8 = 1 expert of 3 * 4096 * 14336 = 176,160,768 parameters, over etp
    inst = mixtral()
    assert terms(inst, FOLDED).params == 176_160_768
    assert terms(inst, BASE).params == 176_160_768 / 4


def test_expert_gemms_and_activations_by_hand():
    # GEMMs: one local expert, 3 GEMMs of 2 * copies * 4096 * 14336 / etp FLOPs: 8192 / 4 =
    # 2048 / 1, the same calls of the same size either way (wgrad_s: router + expert GEMMs)
    inst = mixtral()
    f, b = terms(inst, FOLDED), terms(inst, BASE)
    assert f.wgrad_s == b.wgrad_s
    # stashed per micro-batch (bf16 job): routed copies x 4096 x 2 bytes + 3 x copies x 14336 /
    # etp x 2 (MLP-in outputs, activation) + the permuted fp32 probabilities, copies x 4, which
    # the weighted SwiGLU applies (the combine stashes nothing, cost/moe.expert_act_bytes) +
    # router fp32 probabilities 1024 x 8 x 4 = 32,768:
    # etp 4: 67,108,864 + 176,160,768 + 32,768 + 32,768 = 243,335,168
    # etp 1: 16,777,216 + 176,160,768 + 8,192 + 32,768 = 192,978,944
    assert b.act_bytes == 243_335_168
    assert f.act_bytes == 192_978_944


def test_collectives_by_hand():
    inst = mixtral()
    f, b = terms(inst, FOLDED), terms(inst, BASE)
    # the etp group's all-gather + reduce-scatter of the routed copies: none with etp 1; with
    # etp 4 two rings over NVLink of 8192 * 4096 * 2 = 67,108,864 bytes: 8.4e-6 + 3 * 5e-6 +
    # 3/4 * 67,108,864 / 360e9 each
    assert f.tp_f_s == f.tp_b_s == 0
    assert b.tp_f_s == pytest.approx(2 * (8.4e-6 + 15e-6 + 50_331_648 / NVLINK_BW), rel=1e-12)
    # all-to-all (dispatch + combine) of 16,777,216 bytes per rank over ep 8:
    # etp 1: ranks 1 apart, the 8 of one node: 7/8 over NVLink, 8.4e-6 + 5e-6 + 14,680,064 / 360e9
    # etp 4: ranks 4 apart, 2 per node: 6/8 over the NIC sets the time,
    #        8.4e-6 + 10e-6 + 12,582,912 / 47.5e9
    assert f.a2a_f_s == pytest.approx(2 * (8.4e-6 + 5e-6 + 14_680_064 / NVLINK_BW), rel=1e-12)
    assert b.a2a_f_s == pytest.approx(2 * (8.4e-6 + 10e-6 + 12_582_912 / NIC_BW), rel=1e-12)


def test_expert_groups_and_their_state_by_hand():
    # expert-data-parallel group: tp * dp * cp / (ep * etp) = 64 / 8 = 8 ranks, 8 apart (etp
    # 1), against 64 / 32 = 2 ranks, 32 apart (etp 4)
    assert moe.edp_ranks(16, FOLDED) == 8 and moe.edp_ranks(16, BASE) == 2
    inst = mixtral()
    site = coefficients.homogeneous_placement(inst.cluster.one_group, FOLDED).sites[0]
    assert site.ep_links.per_domain == 8 and site.etp_link is not None
    assert site.edp_link == coefficients.comm.group_link(inst.cluster.one_group, 8, 8)
    # ZeRO-1 state per GPU and layer, experts only (the rest is the same): 2 (bf16 weight) + 4
    # (fp32 grad) + 12 / edp (Adam) bytes per parameter:
    # etp 1: 176,160,768 * (6 + 12/8) = 1,321,205,760; etp 4: 44,040,192 * (6 + 12/2) = 528,482,304
    c1 = coefficients.build(inst, FOLDED)
    c4 = coefficients.build(inst, BASE)
    assert c1.layer_state_bytes[0] - c4.layer_state_bytes[0] == pytest.approx(
        1_321_205_760 - 528_482_304, rel=1e-12)
    # and the layer: folding drops the expert all-gather / reduce-scatter and keeps the
    # all-to-all inside the node (the two differences above, forward and backward)
    f, b = terms(inst, FOLDED), terms(inst, BASE)
    assert c4.layer_parts["tp_comm"] - c1.layer_parts["tp_comm"] == pytest.approx(
        b.tp_f_s + b.tp_b_s, rel=1e-9)
    assert c4.layer_parts["ep_a2a"] - c1.layer_parts["ep_a2a"] == pytest.approx(
        b.a2a_f_s + b.a2a_b_s - f.a2a_f_s - f.a2a_b_s, rel=1e-9)


def test_megatron_layout_rules():
    # Megatron-core (parallel_state.initialize_model_parallel): etp * ep must divide the stage's
    # tp * dp * cp; the experts' ffn must split over etp; tp > 1 needs sequence parallelism
    inst = replace(mixtral(), job=replace(mixtral().job, global_batch=256))
    Plan.of(FOLDED, [32], [0]).check_against(inst)
    with pytest.raises(ConfigError, match="must divide the stage's tp"):
        Plan.of(replace(FOLDED, ep=8, etp=16), [32], [0]).check_against(inst)
    with pytest.raises(ConfigError, match="ffn width 14336"):
        Plan.of(replace(FOLDED, etp=3), [32], [0]).check_against(inst)
    with pytest.raises(ConfigError, match="sequence parallelism"):
        Plan.of(replace(FOLDED, sequence_parallel=False), [32], [0]).check_against(inst)


def test_plan_files_read_and_write_etp():
    inst = replace(mixtral(), job=replace(mixtral().job, global_batch=256))
    plan = Plan.of(FOLDED, [32], [0])
    out = plan_to_mapping(plan)
    assert out["etp"] == 1 and plan_from_mapping({"plan": out}, inst) == plan
    default = plan_to_mapping(Plan.of(BASE, [32], [0]))
    assert "etp" not in default  # a plan without folding is written as before
    with pytest.raises(InstanceError, match="etp"):
        plan_from_mapping({"plan": {**out, "etp": 0}}, inst)


def test_search_space_pairs():
    # tp 4 over dp x cp = 2 ranks: etp 4 first with ep | 8 dividing 4 * 2 / 4 = 2, then etp 1
    # with ep dividing 8; without sequence parallelism only etp = tp (Megatron-core refuses MoE
    # with tp > 1 without it)
    inst = mixtral()
    assert expert_layouts(inst.model, inst.search, 4, 2, True) == [
        (1, None), (2, None), (1, 1), (2, 1), (4, 1), (8, 1)]
    assert expert_layouts(inst.model, inst.search, 4, 2, False) == [(1, None), (2, None)]
    listed = replace(inst.search, etp=(2,))  # exactly the listed value
    assert expert_layouts(inst.model, listed, 4, 2, True) == [(1, 2), (2, 2), (4, 2)]
    from paraplan.cost.readers.fields import Section
    from paraplan.cost.readers.search import SEARCH_KEYS
    bad = search_from_section(Section({"etp": [3]}, "x.yaml", "search", SEARCH_KEYS))
    refusal = moe_refusal(bad, inst.model, frozenset({"etp"}))
    assert refusal is not None and "14336" in refusal.problem


def test_exports_write_or_refuse_expert_tensor_parallelism():
    import re

    from paraplan.solver.export import to_deepspeed, to_torchtitan
    from paraplan.solver.export.common import ExportRefused
    from paraplan.solver.export.megatron import to_megatron
    inst = replace(mixtral(), job=replace(mixtral().job, global_batch=256))
    folded, default = Plan.of(FOLDED, [32], [0]), Plan.of(BASE, [32], [0])

    def flag(text, name):
        return re.search(rf"{name} (\d+)", text).group(1)
    assert flag(to_megatron(inst, folded).text, "--expert-tensor-parallel-size") == "1"
    assert flag(to_megatron(inst, default).text, "--expert-tensor-parallel-size") == "4"
    # torchtitan 0.2 takes expert_tensor_parallel_degree tp or 1 (the folded layout: each
    # expert whole, ep over the tp ranks too); DeepSpeed's MoE layer has no layout folded over
    # the tp ranks, so it refuses etp = 1 beside tp = 4
    assert flag(to_torchtitan(inst, folded).text, "expert_tensor_parallel_degree =") == "1"
    assert flag(to_torchtitan(inst, default).text, "expert_tensor_parallel_degree =") == "4"
    with pytest.raises(ExportRefused, match="etp = 1"):
        to_deepspeed(inst, folded)


def test_fp8_expert_casts_by_hand():
    # TE GroupedLinear's stand-alone casts (cost/moe.expert_fp8_cast_elements), per micro-batch:
    # forward copies x (4096 + 14336 / etp), backward copies x (4096 + 2 x 14336 / etp); weights
    # 1 expert x 3 x 4096 x 14336 / etp.
    # etp 1 (2048 copies): 37,748,736 / 67,108,864 / 176,160,768
    # etp 4 (8192 copies): 62,914,560 / 92,274,688 / 44,040,192
    m = mixtral().model
    assert moe.expert_fp8_cast_elements(m, FOLDED) == (37_748_736, 67_108_864, 176_160_768)
    assert moe.expert_fp8_cast_elements(m, BASE) == (62_914_560, 92_274_688, 44_040_192)
