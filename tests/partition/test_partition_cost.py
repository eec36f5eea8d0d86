"""cost/partition.py: Megatron plans reproduce megatron_layer, P(q x q) prices by hand, reshards
equal cost/comm.py's collectives on Megatron's layouts."""

import dataclasses

import numpy as np
import pytest
from partition_support import instance_and_site, small_instance

from cost import comm
from cost import partition as P
from cost.coefficients import homogeneous_placement, matmul_time_s, megatron_layer
from cost.comm import NetEfficiency
from cost.specs import Attention, JobSpec, Mlp, Outer, Recompute

NET = NetEfficiency()

CASES = {
    # tp inside one node (4 GPUs/node), GELU, flash attention
    "tp4-gelu": dict(tp=4),
    # tp = 8 over two 4-GPU nodes: the group spans the NIC
    "tp8-across-nodes": dict(tp=8),
    # GQA + SwiGLU (two GEMM calls in mlp_in), tp = 16 over four nodes
    "tp16-swiglu-gqa": dict(tp=16, nodes=4, mlp=Mlp.SWIGLU, kv_heads=4, ffn=2816),
}


def _site(inst, o):
    return homogeneous_placement(inst.cluster, o).sites[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_megatron_plan_reproduces_megatron_layer(case):
    kw = dict(CASES[case])
    inst, o, site = instance_and_site(**kw)
    for outer in (o, dataclasses.replace(o, micro_batch=2, num_micro_batches=o.num_micro_batches // 2)):
        table = P.layer_table(inst, outer, site, NET)
        got = P.layer_terms(table, P.MEGATRON_DEFAULT)
        want = megatron_layer(inst, outer, site, NET)
        for f in ("fwd_s", "bwd_s", "rc_fwd_s", "act_bytes", "ckpt_bytes", "workspace_bytes"):
            assert getattr(got, f) == pytest.approx(getattr(want, f), rel=1e-12), f
        assert got.parts["compute"] == pytest.approx(want.parts["compute"], rel=1e-12)
        # the exposed tensor-parallel time, split by link type: all of it crosses nodes when
        # the group does (4 GPUs per node), none of it otherwise
        intra, inter = got.parts["tp_comm_intra_node"], got.parts["tp_comm_inter_node"]
        assert intra + inter == pytest.approx(want.parts["tp_comm"], rel=1e-9)
        assert (inter if o.tp > 4 else intra) == pytest.approx(want.parts["tp_comm"], rel=1e-9)


def test_megatron_plan_reproduces_standard_attention_with_selective_recompute():
    inst = small_instance()
    inst = dataclasses.replace(inst, job=JobSpec(global_batch=16, attention=Attention.STANDARD))
    o = Outer(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8, recompute=Recompute.SELECTIVE)
    site = _site(inst, o)
    got = P.layer_terms(P.layer_table(inst, o, site, NET), P.MEGATRON_DEFAULT)
    want = megatron_layer(inst, o, site, NET)
    assert want.rc_fwd_s < want.fwd_s  # the selective term is really there
    for f in ("fwd_s", "bwd_s", "rc_fwd_s", "act_bytes"):
        assert getattr(got, f) == pytest.approx(getattr(want, f), rel=1e-12), f


def test_colsplit_to_replicated_is_comm_all_gather():
    """Megatron's column output gathered onto every GPU = cost/comm.py's ring all-gather."""
    for tp, nodes in ((4, 2), (8, 2)):
        inst, o, site = instance_and_site(tp=tp, nodes=nodes)
        ctx = P.LayerContext(inst, o, site, NET)
        links = P.group_links(inst, o, site)
        K = P.OpPartition("K", tp, 1)
        T, h = ctx.tokens, inst.model.hidden
        got = P._move(ctx, links, K, P.op_layout(K, tp, "out"), P.replicated_layout(tp), (T, h))
        link, inter = site.tp_link
        assert got == pytest.approx(comm.all_gather_time_s(2 * T * h, tp, link, inter, NET), rel=1e-12)


def test_p2x2_attn_out_forward_by_hand():
    """P(2x2) on attn_out ([T,h] x [h,h]) over 4 GPUs of one node, forward pass.

    Per GPU and phase: 2*T*h*h/4 FLOPs in q = 2 steps of half that. Step 0 receives the next
    I block [T/2, h/2] and W block [h/2, h/2] (bf16) from ring neighbours over NVLink; step 1
    receives nothing. Forward = max(GEMM, shift) + GEMM. Then the [T/2, h/2] output blocks are
    gathered onto every GPU (residual stream replicated): each GPU fetches 3 blocks from 3
    owners: 3/4 * 2*T*h bytes / bw + 3 latencies."""
    inst, o, site = instance_and_site(tp=4, nodes=1)
    table = P.layer_table(inst, o, site, NET)
    k = [P.spec_of(c) for c in table.candidates["attn_out"]].index("P2x2")
    T, h, gpu = 1024, 1024, inst.cluster.gpu
    bw, lat = 150e9, 5e-6
    gemm = matmul_time_s(2 * T * h * h / 4 / 2, gpu)
    shift = (2 * T * h / 4 + 2 * h * h / 4) / bw + lat
    gather = 0.75 * 2 * T * h / bw + 3 * lat
    assert table.unary["attn_out"][k, 0] == pytest.approx(max(gemm, shift) + gemm + gather, rel=1e-12)
    # stashed input: one [T/2, h/2] bf16 block (Megatron's row-parallel input: [T, h/4], same size)
    assert table.unary["attn_out"][k, 2] == 2 * T * h / 4


def test_p_keeps_fewer_activations_than_megatron_column_input():
    """Megatron's column-parallel qkv keeps the whole replicated input [T, h]; P(2x2) a quarter."""
    inst, o, site = instance_and_site(tp=4, nodes=1)
    table = P.layer_table(inst, o, site, NET)
    specs = [P.spec_of(c) for c in table.candidates["qkv"]]
    act = table.unary["qkv"][:, 2]
    assert act[specs.index("K")] == 4 * act[specs.index("P2x2")] == 2 * 1024 * 1024


def test_candidates_per_group_size():
    assert [c.spec() for c in P.op_candidates(4, True)] == ["K", "N", "P2x2"]
    assert [c.spec() for c in P.op_candidates(8, True)] == ["K", "N", "K2*P2x2", "N2*P2x2"]
    assert [c.spec() for c in P.op_candidates(16, True)] == ["K", "N", "K4*P2x2", "N4*P2x2", "P4x4"]
    assert [c.spec() for c in P.op_candidates(8, False)] == ["K", "N"]
    assert P.OpPartition("K", 2, 2).describe(("nodes", "node")) == "K@nodes, P2x2@node"


def test_composite_splits_time_by_link_type():
    """N2*P2x2 on mlp_out over 2 nodes x 4 GPUs: the partial [T/2, h/2] blocks are all-reduced
    between the two nodes (2 ranks, NIC: 3.125 GB/s), then gathered inside the node (4 ranks,
    NVLink 150 GB/s): 3 blocks from 3 owners."""
    inst, o, site = instance_and_site(tp=8, nodes=2)
    table = P.layer_table(inst, o, site, NET)
    k = [P.spec_of(c) for c in table.candidates["mlp_out"]].index("N2*P2x2")
    T, h = 1024, 1024
    block = 2 * T * h / 4
    ar = 2 * (2 - 1) / 2 * block / 3.125e9 + 2 * (2 - 1) * 10e-6
    gather = 3 * block / 150e9 + 3 * 5e-6
    assert table.inter_node["mlp_out"][k] == pytest.approx(ar, rel=1e-12)
    c = P.linear_op_cost(P.LayerContext(inst, o, site, NET), "mlp_out", P.OpPartition("N", 2, 2))
    assert table.unary["mlp_out"][k, 0] == pytest.approx(c.fwd_s + ar + gather, rel=1e-12)


def test_chained_p_ops_pay_only_the_skew():
    """mlp_in P(2x2) -> mlp_out P(2x2): the output block (r, c) must move to the skewed input
    position (r, r+c): GPUs of row 0 keep theirs, the other two fetch one [T/2, f/2] block."""
    inst, o, site = instance_and_site(tp=4, nodes=1)
    table = P.layer_table(inst, o, site, NET)
    k = [P.spec_of(c) for c in table.candidates["mlp_in"]].index("P2x2")
    T, f = 1024, 4096
    fwd = table.pair[("mlp_in", "mlp_out")][k, k, 0]
    assert fwd == pytest.approx(2 * T * f / 4 / 150e9 + 5e-6, rel=1e-12)


def test_plan_layer_fn_and_validation():
    from cost.errors import ConfigError
    from cost.specs import Plan
    assert P.plan_layer_fn(()) is megatron_layer
    parts = tuple((op, "P2x2" if op in P.LINEAR_OPS else "heads") for op in P.OPS)
    Plan(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
         full_recompute_layers=(0,), partitions=parts)
    with pytest.raises(ConfigError, match="not a partition of tp=8"):
        Plan(tp=8, pp=1, dp=1, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
             full_recompute_layers=(0,), partitions=parts)
    with pytest.raises(ConfigError, match="sequence_parallel off"):
        Plan(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
             full_recompute_layers=(0,), partitions=parts, sequence_parallel=True)


def test_all_plans_vectors_match_layer_terms():
    inst, o, site = instance_and_site(tp=8)
    table = P.layer_table(inst, o, site, NET)
    idx, vec = P.all_plans(table)
    rng = np.random.default_rng(1)
    for k in rng.choice(len(idx), 20, replace=False):
        lt = P.layer_terms(table, P.plan_from_indices(table, idx[k]))
        assert np.allclose(vec[k], [lt.fwd_s, lt.bwd_s, lt.act_bytes, lt.workspace_bytes], rtol=1e-12)


def test_grid_spanning_nodes_shifts_over_one_nic_share():
    """P(4x4) on 16 GPUs of four 4-GPU nodes: each step's shifts leave every GPU at once, so
    each gets its own NIC share (3.125 GB/s), not the 4-channel ring bandwidth."""
    inst, o, site = instance_and_site(tp=16, nodes=4)
    ctx = P.LayerContext(inst, o, site, NET)
    c = P.linear_op_cost(ctx, "attn_out", P.OpPartition("P", 1, 4))
    T, h = 1024, 1024
    gemm = matmul_time_s(2 * T * h * h / 16 / 4, inst.cluster.gpu)
    shift = (2 * T * h / 16 + 2 * h * h / 16) / 3.125e9 + 10e-6
    assert shift > gemm  # so the forward is 3 exposed shifts and one GEMM
    assert c.fwd_s == pytest.approx(3 * shift + gemm, rel=1e-12)
    assert c.ring_inter_node
