"""Mixture-of-experts pricing (cost/moe.py, cost/flops.py's MoE counts): numbers derived by
hand in the comments, from the published model shapes and the formulas' sources."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from paraplan.cost import coefficients, moe, moe_params
from paraplan.cost.moe import COMBINED_1F1B_HIDDEN_FRACTION
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import InstanceError
from paraplan.cost.flops import active_params, model_flops_per_token, model_params
from paraplan.cost.readers.instance import instance_from_mapping, load_instance
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Cluster, MoeSpec, Outer

# the layer formulas alone, without the wait for the slowest rank (tests/cost/test_scale.py)
NO_WAIT = NetEfficiency(rank_jitter_rel=0.0)

INSTANCES = Path(__file__).resolve().parents[2] / "instances"
MIXTRAL = INSTANCES / "mixtral-8x7b-64xH100.yaml"


def mixtral():
    return load_instance(MIXTRAL)


def _refused(tmp_path, raw, load=load_instance) -> InstanceError:
    """The InstanceError that loading `raw`, written to a file, raises."""
    path = tmp_path / "i.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InstanceError) as info:
        load(path)
    return info.value


def test_mixtral_total_and_active_parameters():
    # Mixtral 8x7B (Jiang et al. 2024: 46.7B parameters, 12.9B active). Per layer: attention
    # 4096 * (4096 + 2 * 1024) + 4096 * 4096 = 41,943,040; two RMSNorms 8,192; router 4096 * 8 =
    # 32,768: 41,984,000 outside the experts. One SwiGLU expert 3 * 4096 * 14336 = 176,160,768.
    # Embedding and untied output 2 * 32000 * 4096 + final norm 4096 = 262,148,096.
    # total  = 32 * (41,984,000 + 8 * 176,160,768) + 262,148,096 = 46,702,792,704
    # active = 32 * (41,984,000 + 2 * 176,160,768) + 262,148,096 = 12,879,925,248
    m = mixtral().model
    assert model_params(m) == 46_702_792_704
    assert active_params(m) == 12_879_925_248
    # MFU counts active FLOPs: 6 * (active body + output projection) + 12 * L * s * q
    # = 6 * (12,617,777,152 + 131,072,000) + 12 * 32 * 4096 * 4096 = 82,935,545,856
    assert model_flops_per_token(m) == 82_935_545_856


def test_all_to_all_bytes_and_time_by_hand():
    # hidden 1024, seq 1024, top-2 of 8 experts, imbalance 1, micro-batch 1, tp 2 with
    # sequence parallelism: each tp rank dispatches its 512 tokens' 2 copies of 1024 bf16
    # values: 512 * 2 * 1024 * 2 = 2,097,152 bytes
    inst = mixtral()
    m = replace(inst.model, hidden=1024, heads=8, kv_heads=8, seq_len=1024,
                moe=MoeSpec(experts=8, top_k=2, expert_ffn=2048, imbalance=1.0))
    v = moe.a2a_bytes(m, Outer(tp=2, pp=1, dp=4, micro_batch=1, num_micro_batches=1, sequence_parallel=True, ep=4))
    assert v == 2_097_152
    net = NetEfficiency()
    cl = inst.cluster.one_group  # 8 GPUs per node: NVLink 450 GB/s per direction (900 both), NIC 400 Gbit/s
    # ep = 4 ranks, 2 apart, all in one node: 3/4 of the bytes over NVLink at 0.8 x 450 GB/s,
    # plus NCCL's call latency (8.4 us) and one NVLink hop (5 us):
    # 8.4e-6 + 5e-6 + 1,572,864 / 360e9 = 17.769e-6 s
    t = moe.all_to_all_time_s(v, 4, moe.ep_links(cl, 4, 2), net)
    assert t == pytest.approx(8.4e-6 + 5e-6 + 1_572_864 / 360e9, rel=1e-12)
    # ep = 8 ranks, 2 apart: 4 per node. 3/8 of the bytes to the node's 3 other members over
    # NVLink, 4/8 over the GPU's NIC at 0.95 x 50 GB/s, both at once; the NIC's share sets the
    # time: 8.4e-6 + 10e-6 (network hop) + 1,048,576 / 47.5e9 = 40.475e-6 s
    t = moe.all_to_all_time_s(v, 8, moe.ep_links(cl, 8, 2), net)
    assert t == pytest.approx(8.4e-6 + 10e-6 + 1_048_576 / 47.5e9, rel=1e-12)
    # the same group inside a 72-GPU NVLink domain (GB200 NVL72: trays of 4): all NVLink,
    # 7/8 of the bytes: 8.4e-6 + 5e-6 + 1,835,008 / 360e9
    nvl = replace(cl, nodes=18, gpus_per_node=4, nvlink_domain_gpus=72)
    t = moe.all_to_all_time_s(v, 8, moe.ep_links(nvl, 8, 2), net)
    assert t == pytest.approx(8.4e-6 + 5e-6 + 1_835_008 / 360e9, rel=1e-12)


def test_expert_weights_are_sharded_over_ep_and_their_state_over_the_expert_data_parallel_group():
    # Mixtral, tp 1, dp 64, ep 8, ZeRO-1 (Megatron's distributed optimizer). Per layer and GPU:
    # experts 8/8 * 176,160,768 parameters at 2 (bf16 weight) + 4 (fp32 grad) + 12 / 8 (Adam
    # state over the expert-data-parallel group of 64 / 8 = 8) = 7.5 bytes: 1,321,205,760;
    # the rest 41,984,000 at 2 + 4 + 12 / 64 = 6.1875 bytes: 259,776,000. Sum 1,580,981,760.
    inst = mixtral()
    o = Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=1, ep=8)
    c = coefficients.build(inst, o)
    assert c.layer_state_bytes[0] == pytest.approx(1_580_981_760, rel=1e-12)
    # ep = 1: every GPU holds all 8 experts, their state sharded over all 64 ranks
    c1 = coefficients.build(inst, replace(o, ep=1))
    assert c1.layer_state_bytes[0] == pytest.approx(
        8 * 176_160_768 * (6 + 12 / 64) + 259_776_000, rel=1e-12)
    assert c.layer_parts["ep_a2a"] > 0 and c1.layer_parts["ep_a2a"] == 0


def test_experts_per_rank_pay_the_per_gemm_cost():
    # ep = 1 against ep = 8 on Mixtral with perfectly balanced routing (imbalance 1): each rank
    # receives the same routed copies (t * top_k) and runs the same GEMM FLOPs, but as 8
    # experts' GEMMs of 1/8 the size instead of one expert's. The matmul curve charges
    # matmul_half_flops / (peak * eff_max) per call, so ep = 1 pays 7 experts x 3 GEMMs more
    # per forward and twice that in backward: 63 calls. A grouped GEMM also computes half a tile
    # (moe.GROUPED_GEMM_TILE_ROWS / 2 = 64 rows) of padding per expert on its forward and
    # input-gradient GEMMs (tokens on M), not on the weight gradients (tokens on K): ep = 1 pads
    # 7 experts more, 7 x 3 GEMMs x 2 passes of 64 rows x 2 x h x fe FLOPs (h 4,096, fe 14,336),
    # at the fitted grouped-GEMM efficiency. Router, permutation, activation passes and the
    # fixed per-layer time are the same. Two sequences per micro-batch: 2,048 routed copies per
    # expert at ep = 1, so each expert's weight-gradient GEMM (2 x 2048 x 4096 x 14336 FLOPs,
    # 0.39 ms on H100) outlasts its fp32 main-gradient accumulation (8 bytes x 58.7 M weights =
    # 0.47 GB, 0.19 ms at 3.35 TB/s x 0.72): every expert GEMM is FLOP-bound on both sides.
    # With 8 experts a rank the all-to-all dispatcher (the instance's) also sorts the copies by
    # local expert and back (moe.CHUNK_SORT_PASSES; an identity order at ep = 1, still a copy):
    # 2 passes x read + write of 2 x 2 x 4,096 = 16,384 copies x 4,096 x 2 bytes = 0.537 GB,
    # 0.220 ms at 3.35 TB/s x 0.7299 forward and twice that in backward; one expert a rank
    # (ep = 8) sorts nothing. Each grouped call (2 a pass) also loops over the rank's experts on
    # the host before its GEMMs (moe.expert_host_s): ep = 1 loops over 7 experts more in each
    # of forward, the input and the weight gradients, 7 x 2 x 3 x 30 us = 1.26 ms.
    inst = mixtral()
    inst = replace(inst, model=replace(inst.model, moe=replace(inst.model.moe, imbalance=1.0)))
    gpu = inst.cluster.gpu
    o = Outer(tp=1, pp=1, dp=64, micro_batch=2, num_micro_batches=8, zero=1, ep=8)
    one = coefficients.build(inst, replace(o, ep=1))
    eight = coefficients.build(inst, o)
    eff = moe_params.FITTED.grouped_gemm_eff
    per_call = gpu.matmul_half_flops / (gpu.peak_flops_per_s * gpu.matmul_eff_max) / eff
    padding = 7 * 3 * 2 * 2 * 64 * 4096 * 14336 / (gpu.peak_flops_per_s * gpu.matmul_eff_max) / eff
    sort_s = 2 * 2 * 16_384 * 4096 * 2 / (gpu.hbm_bw_bytes_per_s * gpu.memory_eff)
    assert sort_s == pytest.approx(2.196e-4, rel=1e-3)
    diff = one.layer_parts["compute"] - eight.layer_parts["compute"]
    host = 7 * 2 * 3 * moe_params.FITTED.expert_gemm_issue_s
    assert host == pytest.approx(1.26e-3)
    assert diff == pytest.approx(63 * per_call + padding + 3 * sort_s + host, rel=1e-9)


def test_imbalance_slows_the_plan_and_a_capacity_factor_caps_it():
    inst = mixtral()
    o = Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=1, ep=8)
    times = []
    for x in (1.0, 1.1, 1.5):
        model = replace(inst.model, moe=replace(inst.model.moe, imbalance=x))
        times.append(coefficients.build(replace(inst, model=model), o).layer_time_s[0])
    assert times[0] < times[1] < times[2]
    capped = replace(inst.model, moe=replace(inst.model.moe, imbalance=1.5, capacity_factor=1.1))
    assert coefficients.build(replace(inst, model=capped), o).layer_time_s[0] == pytest.approx(times[1])
    assert moe.DEFAULT_IMBALANCE == moe_params.FITTED.dropless_imbalance and inst.model.moe.imbalance is None
    # ep = 1: every rank runs all experts on its own tokens, k copies each whatever the routing
    one = []
    for x in (1.0, 1.5):
        model = replace(inst.model, moe=replace(inst.model.moe, imbalance=x))
        one.append(coefficients.build(replace(inst, model=model), replace(o, ep=1)).layer_time_s[0])
    assert one[0] == one[1]


def test_nvlink_domain_prices_groups_beyond_a_tray_on_nvlink():
    from paraplan.cost import comm
    inst = mixtral()
    nvl = replace(inst.cluster.one_group, nodes=18, gpus_per_node=4, nvlink_domain_gpus=72)
    link, inter = comm.group_link(nvl, 16, 1)  # tp = 16 over 4 trays of one NVL72 rack
    assert not inter and link == nvl.intra_node
    assert comm.group_link(replace(nvl, nvlink_domain_gpus=None), 16, 1)[1]


def test_instance_with_moe_and_nvlink_domain_round_trips(tmp_path):
    inst = mixtral()
    inst = replace(inst, cluster=Cluster.of(replace(inst.cluster.one_group, nodes=16, gpus_per_node=4,
                                         nvlink_domain_gpus=32)),
                   model=replace(inst.model, moe=replace(inst.model.moe, capacity_factor=1.25,
                                                         imbalance=1.2)))
    text = yaml.safe_dump(instance_to_mapping(inst))
    back = instance_from_mapping(yaml.safe_load(text), "plan.yaml")
    assert back.model == inst.model and back.cluster == inst.cluster


@pytest.mark.parametrize("key,value,field", [
    ("nvlink_domain_gpus", 12, "cluster.nvlink_domain_gpus"),  # not a multiple of 8
    ("nvlink_domain_gpus", 48, "cluster.nvlink_domain_gpus"),  # does not divide 64 GPUs
])
def test_inconsistent_nvlink_domain_is_refused(tmp_path, key, value, field):
    raw = yaml.safe_load(MIXTRAL.read_text())
    raw["cluster"][key] = value
    err = _refused(tmp_path, raw)
    assert err.field == field and "\n" not in str(err)


@pytest.mark.parametrize("change,field", [
    ({"moe": {"experts": 8, "top_k": 9, "expert_ffn": 14336}}, "model.moe.top_k"),
    ({"moe": {"experts": 8, "top_k": 2}}, "model.moe.expert_ffn"),
    ({"moe": {"experts": 8, "top_k": 2, "expert_ffn": 14336, "dense_layers": 32}},
     "model.moe.dense_layers"),
    ({"moe": {"experts": 8, "top_k": 2, "expert_ffn": 14336, "imbalance": 0.5}},
     "model.moe.imbalance"),
    ({"moe": {"experts": 8, "top_k": 2, "expert_ffn": 14336, "experts_per_token": 2}},
     "model.moe.experts_per_token"),
])
def test_bad_moe_sections_are_refused(tmp_path, change, field):
    raw = yaml.safe_load(MIXTRAL.read_text())
    raw["model"].update(change)
    err = _refused(tmp_path, raw)
    assert err.field == field


@pytest.mark.parametrize("search,field", [
    ({"ep": [3]}, "search.ep"),  # does not divide 8 experts
    ({"tensor_partitions": ["megatron", "spatial_temporal"]}, "search.tensor_partitions"),
])
def test_search_values_an_moe_model_cannot_use_are_refused(tmp_path, search, field):
    raw = yaml.safe_load(MIXTRAL.read_text())
    raw["search"] = search
    err = _refused(tmp_path, raw)
    assert err.field == field


def test_ep_on_a_dense_model_and_moe_on_another_framework_are_refused(tmp_path):
    raw = yaml.safe_load((INSTANCES / "llama3-8b-64xH100.yaml").read_text())
    raw["search"] = {"ep": [1, 2]}
    err = _refused(tmp_path, raw)
    assert err.field == "search.ep" and "dense" in err.problem
    raw = yaml.safe_load(MIXTRAL.read_text())
    raw["job"]["framework"] = "torchtitan"
    assert _refused(tmp_path, raw).field == "job.framework"


def test_the_space_holds_ep_divisors_and_the_moe_rules():
    from paraplan.cost.space_rules import ep_values
    from paraplan.solver.space import one_group_outers as outer_configs
    inst = mixtral()
    m = inst.model
    # default: divisors of the 8 experts that divide dp * cp
    assert ep_values(m, None, 64) == [1, 2, 4, 8]
    assert ep_values(m, None, 4) == [1, 2, 4]
    dense = load_instance(INSTANCES / "llama3-8b-64xH100.yaml").model
    assert ep_values(dense, None, 64) == [1]
    small = replace(inst, search=replace(inst.search, tp=(1, 2), pp=(1,), micro_batch=(1,)))
    outers = outer_configs(small)
    assert {o.ep for o in outers} == {1, 2, 4, 8}
    assert all(o.sequence_parallel for o in outers if o.tp > 1)  # Megatron-core's MoE rule
    assert any(o.zero == 3 for o in outers)  # experts sharded over their edp group (test_moe_zero3)
    assert all((o.dp * o.cp) % o.ep == 0 for o in outers)


def test_plan_file_round_trips_ep(tmp_path):
    from paraplan.cost.readers.plan_reader import load_plan
    from paraplan.cost.readers.plan_writer import plan_to_mapping
    inst = mixtral()
    o = Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=2, ep=4)
    from paraplan.cost.plan_specs import Plan
    p = Plan.of(o, (32,), (0,))
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(plan_to_mapping(p)))
    assert load_plan(path, inst) == p
    bd = simulate(inst, p)
    assert bd.fits and bd.exposed_s["ep_a2a"] > 0


def test_memory_categories_split_expert_state_by_the_expert_data_parallel_group():
    # the Mixtral plan of test_expert_weights_are_sharded...: per layer, experts 176,160,768
    # parameters with Adam state over 8 ranks (12 / 8 bytes), the rest 41,984,000 over 64
    # (12 / 64): optimizer bytes of the 32 layers = 32 * (176,160,768 * 1.5 + 41,984,000 *
    # 0.1875) = 32 * 272,113,152 = 8,707,620,864, plus the embedding stage's share (its own formula)
    from paraplan.cost import memory
    from paraplan.cost.memory_breakdown import stage_categories_bytes
    from paraplan.cost.plan_specs import Plan
    inst = mixtral()
    o = Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=1, ep=8)
    p = Plan.of(o, (32,), (0,))
    c = coefficients.build(inst, o)
    (cats,) = stage_categories_bytes(inst, p, c)
    emb = memory.embedding_state_bytes(inst.model, 1, 1, 64, True, True,
                                       memory.state_layout(inst.job))
    emb_opt = emb * (12 / 64) / (6 + 12 / 64)
    assert cats["optimizer"] == pytest.approx(8_707_620_864 + emb_opt, rel=1e-9)
    assert cats["grads"] == pytest.approx(32 * (176_160_768 + 41_984_000) * 4 + emb * 4 / 6.1875,
                                          rel=1e-9)


def test_dense_prefix_is_priced_as_dense_layers_on_the_first_stage():
    # Mixtral with its first 3 layers dense (FFN 14,336, the model's ffn), pp = 4. The first
    # stage holds 3 dense layers and n_0 - 3 MoE layers, so against the all-MoE model it pays
    # 3 x (dense layer - MoE layer), each priced by the same code as a whole dense model's
    # layer (moe = None) and the all-MoE model's layer: time, sync and memory.
    inst = mixtral()
    o = Outer(tp=1, pp=4, dp=16, micro_batch=1, num_micro_batches=64, zero=1, ep=8)
    allmoe = coefficients.build(inst, o, NO_WAIT)
    pre = replace(inst, model=replace(inst.model, moe=replace(inst.model.moe, dense_layers=3)))
    c = coefficients.build(pre, o, NO_WAIT)
    # the dense layer as a dense model prices it (its gradients over all 16 dp ranks, ep = 1)
    dense = coefficients.build(replace(inst, model=replace(inst.model, moe=None)), replace(o, ep=1), NO_WAIT)
    assert c.first_chunk_min_layers == 3 and allmoe.first_chunk_min_layers == 1
    dt = 3 * (dense.layer_time_s[0] - allmoe.layer_time_s[0])
    assert dt < 0  # a dense layer has no router, permutation or all-to-all
    assert c.stage_time_s[0] == pytest.approx(allmoe.stage_time_s[0] + dt, rel=1e-12)
    assert c.stage_parts[0]["dense_prefix"] == pytest.approx(dt, rel=1e-12)
    assert (c.stage_time_s[1:] == allmoe.stage_time_s[1:]).all()
    assert (c.layer_time_s == allmoe.layer_time_s).all()
    assert c.stage_sync_time_s[0] == pytest.approx(
        allmoe.stage_sync_time_s[0] + 3 * (dense.layer_sync_time_s[0] - allmoe.layer_sync_time_s[0]),
        rel=1e-12)
    # memory: 3 dense layers' state and stashed activations replace 3 MoE layers', and the
    # stage's transient workspace is its largest layer's (the dense one's backward buffers),
    # with the allocator's fragmentation allowance
    from paraplan.cost import memory
    site = coefficients.homogeneous_placement(inst.cluster.one_group, o).sites[0]
    ws = [coefficients.megatron_layer(x, o, site, NetEfficiency()).workspace_bytes
          for x in (inst, replace(inst, model=replace(inst.model, moe=None)))]
    assert ws[1] > ws[0]
    dm = 3 * (dense.layer_state_bytes[0] + dense.layer_act_bytes[0]
              - allmoe.layer_state_bytes[0] - allmoe.layer_act_bytes[0])
    dm += (ws[1] - ws[0]) * (1 + memory.ALLOCATOR_FRAGMENTATION)
    assert c.stage_mem_bytes[0] == pytest.approx(allmoe.stage_mem_bytes[0] + dm, rel=1e-12)
    assert (c.stage_mem_bytes[1:] == allmoe.stage_mem_bytes[1:]).all()
    # a split whose first stage holds fewer than the 3 dense layers is not one c prices
    from paraplan.cost import schedule
    n = np.array([[2.0, 10, 10, 10], [3.0, 10, 10, 9]])
    assert schedule.holds_dense_prefix(c, n).tolist() == [False, True]
    assert not schedule.fits(c, n[0], np.zeros(4))


def test_a_plan_whose_first_stage_cannot_hold_the_dense_prefix_is_refused():
    from paraplan.cost.errors import ConfigError
    from paraplan.cost.plan_specs import Plan
    inst = mixtral()
    pre = replace(inst, model=replace(inst.model, moe=replace(inst.model.moe, dense_layers=3)))
    o = Outer(tp=1, pp=4, dp=16, micro_batch=1, num_micro_batches=64, zero=1, ep=8)
    with pytest.raises(ConfigError, match="dense"):
        simulate(pre, Plan.of(o, (2, 10, 10, 10), (0, 0, 0, 0)))
    assert simulate(pre, Plan.of(o, (3, 10, 10, 9), (0, 0, 0, 0))).iter_time_s > 0


def test_dense_models_carry_no_dense_prefix():
    c = coefficients.build(load_instance(INSTANCES / "llama3-8b-64xH100.yaml"),
                           Outer(tp=1, pp=2, dp=32, micro_batch=1, num_micro_batches=16, zero=1))
    assert c.first_chunk_min_layers == 1 and "dense_prefix" not in c.stage_parts[0]


def _overlapped(inst):
    return replace(inst, job=replace(inst.job, moe_a2a_overlap=True),
                   search=replace(inst.search, full_recompute=False))


def test_a2a_overlap_hides_the_all_to_alls_behind_the_paired_compute():
    # Mixtral, pp = 1, ep = 8 inside one node: a layer's all-to-alls (forward + backward), a,
    # are far shorter than its compute, so all of a fits under the paired compute, of which
    # Megatron-core's combined 1F1B hides the fraction f = COMBINED_1F1B_HIDDEN_FRACTION (0.46,
    # measured on the published Qwen3-235B pair: cost/moe.py). Per layer and micro-batch the
    # exposed all-to-all time falls by f a, and the compute it ran beside slows by
    # NetEfficiency.overlap_slowdown x f a; once per iteration the first micro-batch's forward
    # and the last one's backward run unpaired and show f a again (warm-up 1 chunk, pp = 1); a
    # second micro-batch's activations are held while the first one's backward runs.
    # Two sequences per micro-batch: the layer's backward (without its all-to-alls) stays
    # longer than its data-parallel gradient reduction, which therefore hides in both.
    inst = mixtral()
    o = Outer(tp=1, pp=1, dp=64, micro_batch=2, num_micro_batches=8, zero=1, ep=8)
    off = coefficients.build(inst, o, NO_WAIT)
    on = coefficients.build(_overlapped(inst), o, NO_WAIT)
    a = off.layer_parts["ep_a2a"]
    assert 0 < a < off.layer_parts["compute"]
    kappa, f = NetEfficiency().overlap_slowdown, COMBINED_1F1B_HIDDEN_FRACTION
    assert on.layer_parts["ep_a2a"] == pytest.approx((1 - f) * a, rel=1e-12)
    assert on.overlapped_per_layer_s["ep_a2a"] == pytest.approx(f * a, rel=1e-12)
    assert on.layer_time_s[0] == pytest.approx(off.layer_time_s[0] - f * a + kappa * f * a, rel=1e-12)
    assert on.layer_sync_time_s[0] == pytest.approx(off.layer_sync_time_s[0] + f * a, rel=1e-12)
    assert off.in_flight.tolist() == [1.0] and on.in_flight.tolist() == [2.0]
    assert on.layer_act_bytes[0] == pytest.approx(2 * off.layer_act_bytes[0], rel=1e-12)


def test_a2a_overlap_shows_what_the_paired_compute_cannot_cover():
    from paraplan.cost.moe import a2a_overlap_split
    assert a2a_overlap_split(3.0, 5.0) == (0.0, 3.0)
    assert a2a_overlap_split(5.0, 3.0) == (2.0, 3.0)
    # a fraction of what fits hides: 0.5 x min(5, 3) = 1.5 hidden, 3.5 shown
    assert a2a_overlap_split(5.0, 3.0, 0.5) == (3.5, 1.5)


def test_a2a_overlap_applies_only_where_megatron_core_runs_it():
    # Megatron-core (TransformerConfig, --overlap-moe-expert-parallel-comm): ep > 1, and with a
    # pipeline only the interleaved schedule; elsewhere the coefficients are the same as without
    inst, ov = mixtral(), _overlapped(mixtral())
    for o in (Outer(tp=1, pp=2, dp=32, micro_batch=1, num_micro_batches=32, zero=1, ep=8),
              Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=1, ep=1)):
        a, b = coefficients.build(inst, o), coefficients.build(ov, o)
        assert (a.layer_time_s == b.layer_time_s).all() and (a.layer_act_bytes == b.layer_act_bytes).all()
        assert (a.layer_sync_time_s == b.layer_sync_time_s).all()
    # interleaved, pp = 2, v = 2: one more warm-up chunk on each stage than the usual
    # 2 (pp - s - 1) + (v - 1) pp (stage 0: 4 + 1 = 5, stage 1: 2 + 1 = 3), so in flight
    # (warm-up + 1) / v = 3 and 2 stages' worth instead of 2.5 and 1.5
    o = Outer(tp=1, pp=2, dp=32, micro_batch=1, num_micro_batches=32, zero=1, ep=8, virtual_stages=2)
    a, b = coefficients.build(inst, o), coefficients.build(ov, o)
    assert a.in_flight.tolist() == [2.5, 1.5] and b.in_flight.tolist() == [3.0, 2.0]
    hidden = b.overlapped_per_layer_s["ep_a2a"]
    assert hidden > 0
    assert b.layer_sync_time_s == pytest.approx(a.layer_sync_time_s + np.array([5, 3]) / 2 * hidden,
                                                rel=1e-12)


@pytest.mark.parametrize("change,search,field", [
    ({"framework": "torchtitan"}, {"full_recompute": False}, "job.moe_a2a_overlap"),
    ({}, None, "job.moe_a2a_overlap"),  # full recompute left in the space
])
def test_a2a_overlap_is_refused_where_it_cannot_run(tmp_path, change, search, field):
    raw = yaml.safe_load(MIXTRAL.read_text())
    raw["job"].update(moe_a2a_overlap=True, **change)
    if search is not None:
        raw["search"] = search
    err = _refused(tmp_path, raw)
    assert err.field == field and "\n" not in str(err)


def test_a2a_overlap_on_a_dense_model_is_refused(tmp_path):
    raw = yaml.safe_load((INSTANCES / "llama3-8b-64xH100.yaml").read_text())
    raw["job"]["moe_a2a_overlap"] = True
    raw["search"] = {"full_recompute": False}
    err = _refused(tmp_path, raw)
    assert err.field == "job.moe_a2a_overlap" and "dense" in err.problem


def test_a2a_overlap_round_trips_and_is_exported_where_it_applies(tmp_path):
    from paraplan.cost.plan_specs import Plan
    from paraplan.solver.export.megatron import to_megatron
    inst = _overlapped(mixtral())
    back = instance_from_mapping(yaml.safe_load(yaml.safe_dump(instance_to_mapping(inst))), "p.yaml")
    assert back.job.moe_a2a_overlap and back == replace(inst, source="p.yaml")
    on = Plan.of(Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=1, ep=8), (32,), (0,))
    off = Plan.of(Outer(tp=1, pp=2, dp=32, micro_batch=1, num_micro_batches=32, zero=1, ep=8),
                  (16, 16), (0, 0))
    assert "--overlap-moe-expert-parallel-comm" in to_megatron(inst, on).text
    assert "--overlap-moe-expert-parallel-comm" not in to_megatron(inst, off).text


def test_a_plan_the_overlap_does_not_apply_to_says_so():
    from paraplan.cost.model_notes import model_warnings
    from paraplan.cost.plan_specs import Plan
    inst = _overlapped(mixtral())
    off = Plan.of(Outer(tp=1, pp=2, dp=32, micro_batch=1, num_micro_batches=32, zero=1, ep=8),
                  (16, 16), (0, 0))
    on = Plan.of(Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=1, ep=8), (32,), (0,))
    assert any("moe_a2a_overlap" in line for line in model_warnings(inst, off))
    assert not any("moe_a2a_overlap" in line for line in model_warnings(inst, on))


def _shared(inst, **moe_kw):
    moe_spec = replace(inst.model.moe, **moe_kw)
    return replace(inst, model=replace(inst.model, moe=moe_spec))


def test_shared_expert_overlap_hides_the_all_to_alls_behind_the_shared_mlp():
    # A Mixtral-shaped model with a shared SwiGLU expert of 14,336, pp = 2 (any schedule),
    # ep = 8 on one node, micro-batch 1 of 4,096 tokens, tp = 1, bf16. The shared expert's
    # forward is 3 GEMMs of 2 x 4,096 x 4,096 x 14,336 = 481,036,337,152 FLOPs each, each
    # priced by the matmul curve; its backward twice that. Each direction's all-to-alls (a/2)
    # hide behind that direction's shared GEMMs: here all of them (the all-to-alls inside one
    # node are shorter), so the layer loses a and pays overlap_slowdown x a.
    inst = _shared(mixtral(), shared_ffn=14336)
    on_job = replace(inst, job=replace(inst.job, moe_shared_expert_overlap=True))
    o = Outer(tp=1, pp=2, dp=32, micro_batch=1, num_micro_batches=32, zero=1, ep=8)
    off, on = coefficients.build(inst, o, NO_WAIT), coefficients.build(on_job, o, NO_WAIT)
    gpu = inst.cluster.gpu
    one = 481_036_337_152
    assert 2 * 4096 * 4096 * 14336 == one
    sh_f = 3 * (one + gpu.matmul_half_flops) / (gpu.peak_flops_per_s * gpu.matmul_eff_max)
    a = off.layer_parts["ep_a2a"]
    assert 0 < a / 2 < sh_f
    assert moe.shared_mlp_times_s(inst.model, o, gpu, coefficients.matmul_time_s) == \
        pytest.approx((sh_f, 2 * sh_f), rel=1e-12)
    kappa = NetEfficiency().overlap_slowdown
    assert on.layer_parts["ep_a2a"] == 0
    assert on.layer_time_s[0] == pytest.approx(off.layer_time_s[0] - a + kappa * a, rel=1e-12)
    # nothing else moves: sync, memory
    assert (on.layer_sync_time_s == off.layer_sync_time_s).all()
    assert (on.layer_act_bytes == off.layer_act_bytes).all()
    # ep = 1: no all-to-all, nothing to hide
    o1 = replace(o, ep=1)
    assert (coefficients.build(on_job, o1).layer_time_s == coefficients.build(inst, o1).layer_time_s).all()


def test_shared_expert_overlap_shows_what_the_shared_mlp_cannot_cover():
    # the same with a small shared expert (256 wide) and the experts spread over 8 nodes (ep =
    # 64 needs 64 experts): the all-to-alls go over the NIC and outlast the shared GEMMs, whose
    # time is all that hides
    inst = _shared(mixtral(), experts=64, expert_ffn=1024, shared_ffn=256)
    on_job = replace(inst, job=replace(inst.job, moe_shared_expert_overlap=True))
    o = Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=1, ep=64)
    off, on = coefficients.build(inst, o, NO_WAIT), coefficients.build(on_job, o, NO_WAIT)
    sh_f, sh_b = moe.shared_mlp_times_s(inst.model, o, inst.cluster.gpu, coefficients.matmul_time_s)
    a = off.layer_parts["ep_a2a"]
    assert a / 2 > sh_b
    assert on.layer_parts["ep_a2a"] == pytest.approx(a - sh_f - sh_b, rel=1e-12)
    assert on.overlapped_per_layer_s["ep_a2a"] == pytest.approx(sh_f + sh_b, rel=1e-12)


@pytest.mark.parametrize("job,moe_kw,field", [
    ({"moe_shared_expert_overlap": True}, {}, "job.moe_shared_expert_overlap"),  # no shared expert
    ({"moe_shared_expert_overlap": True, "moe_a2a_overlap": True}, {"shared_ffn": 4096},
     "job.moe_shared_expert_overlap"),  # Megatron-core refuses both together
    ({"moe_shared_expert_overlap": True, "framework": "torchtitan"}, {"shared_ffn": 4096},
     "job.moe_shared_expert_overlap"),
])
def test_shared_expert_overlap_is_refused_where_it_cannot_run(tmp_path, job, moe_kw, field):
    raw = yaml.safe_load(MIXTRAL.read_text())
    raw["job"].update(job)
    raw["model"]["moe"].update(moe_kw)
    raw["search"] = {"full_recompute": False}
    err = _refused(tmp_path, raw)
    assert err.field == field and "\n" not in str(err)


def test_shared_expert_overlap_round_trips_and_is_exported_where_it_applies():
    from paraplan.cost.plan_specs import Plan
    from paraplan.solver.export.megatron import to_megatron
    inst = _shared(mixtral(), shared_ffn=4096)
    inst = replace(inst, job=replace(inst.job, moe_shared_expert_overlap=True))
    back = instance_from_mapping(yaml.safe_load(yaml.safe_dump(instance_to_mapping(inst))), "p.yaml")
    assert back == replace(inst, source="p.yaml")
    on = Plan.of(Outer(tp=1, pp=2, dp=32, micro_batch=1, num_micro_batches=32, zero=1, ep=8),
                 (16, 16), (0, 0))
    off = Plan.of(replace(on.flat_outer, ep=1), (16, 16), (0, 0))
    assert "--moe-shared-expert-overlap" in to_megatron(inst, on).text
    assert "--moe-shared-expert-overlap" not in to_megatron(inst, off).text


def test_fp8_experts_pay_their_stand_alone_casts():
    # Mixtral 8x7B (h 4096, expert ffn 14336, swiglu, top-2, seq 4096) in FP8 on H100, tp 1,
    # ep 8, micro-batch 1, even routing: each rank's one local expert runs the routed copies,
    # 2 x 4096 = 8192 tokens. TE GroupedLinear casts, per micro-batch,
    #   forward:  MLP-in's input 8192 x 4096 + MLP-out's input 8192 x 14336 = 8192 x 18432
    #   backward: MLP-out's output gradient 8192 x 4096 + MLP-in's 8192 x 2 x 14336 = 8192 x 32768
    # and, once per iteration (Megatron caches FP8 weights across micro-batches), the expert's
    # 3 x 4096 x 14336 weights; each element read in bf16 and written twice in FP8 (4 bytes) at
    # the H100's HBM bandwidth x memory_eff.
    inst = mixtral()
    moe_spec = replace(inst.model.moe, imbalance=1.0)
    inst = replace(inst, model=replace(inst.model, moe=moe_spec),
                   job=replace(inst.job, precision=coefficients.Precision.FP8))
    gpu = inst.cluster.gpu
    o = Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=1, ep=8)
    site = coefficients.homogeneous_placement(inst.cluster.one_group, o).sites[0]

    def layer():
        return coefficients.moe_layer(inst, o, site, NetEfficiency())
    with_casts = layer()
    original = moe.expert_fp8_cast_elements
    moe.expert_fp8_cast_elements = lambda m, o: (0.0, 0.0, 0.0)
    try:
        without = layer()
    finally:
        moe.expert_fp8_cast_elements = original
    per_byte = 1 / (gpu.hbm_bw_bytes_per_s * gpu.memory_eff)
    assert with_casts.fwd_s - without.fwd_s == pytest.approx(4 * 8192 * 18432 * per_byte, rel=1e-9)
    assert with_casts.bwd_s - without.bwd_s == pytest.approx(4 * 8192 * 32768 * per_byte, rel=1e-9)
    assert with_casts.per_iteration_s - without.per_iteration_s == pytest.approx(
        4 * 3 * 4096 * 14336 * per_byte, rel=1e-9)
