"""cost/partition.py: Megatron plans reproduce megatron_layer, P(q x q) prices by hand, reshards
equal cost/comm.py's collectives on Megatron's layouts."""

import dataclasses

import numpy as np
import pytest
from partition_support import instance_and_site, small_instance

from paraplan.cost import comm
from paraplan.cost import partition as P
from paraplan.cost.coefficients import homogeneous_placement, matmul_time_s, megatron_layer
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.specs import Attention, JobSpec, Mlp, Outer, Recompute

# the hand derivations below assume an ideal network: wire speed, no per-call latency and
# no overlap slowdown (the measured defaults of cost/comm.py are checked in tests/cost)
NET = NetEfficiency(intra_node=1.0, inter_node=1.0, overlap_slowdown=0.0, call_latency_s=0.0)

CASES = {
    # tp inside one node (4 GPUs/node), GELU, flash attention
    "tp4-gelu": dict(tp=4),
    # tp = 8 over two 4-GPU nodes: the group spans the NIC
    "tp8-across-nodes": dict(tp=8),
    # GQA + SwiGLU (two GEMM calls in mlp_in), tp = 16 over four nodes
    "tp16-swiglu-gqa": dict(tp=16, nodes=4, mlp=Mlp.SWIGLU, kv_heads=4, ffn=2816),
}


def _with_stream(table, op, stream=0):
    """An op's (fwd_s, bwd_s, act, buffer) rows with its reshards to/from the stream layout
    `stream` (index; Megatron's by default) added."""
    u = table.unary[op].copy()
    u[:, :2] += table.pair[(P.STREAM, op)][stream]
    return u


def _inter_with_stream(table, op, stream=0):
    return table.inter_node[op] + table.pair_inter_node[(P.STREAM, op)][stream]


def _site(inst, o):
    return homogeneous_placement(inst.cluster.one_group, o).sites[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_megatron_plan_reproduces_megatron_layer(case):
    kw = dict(CASES[case])
    inst, o, site = instance_and_site(**kw)
    # also with sequence parallelism: the stream split by tokens, all-gathers into the column-
    # parallel ops and reduce-scatters out of the row-parallel ones, sharded input stashes
    for outer in (o, dataclasses.replace(o, micro_batch=2, num_micro_batches=o.num_micro_batches // 2),
                  dataclasses.replace(o, sequence_parallel=True)):
        table = P.layer_table(inst, outer, site, NET)
        got = P.layer_terms(table, P.MEGATRON_DEFAULT)
        want = megatron_layer(inst, outer, site, NET)
        for f in ("fwd_s", "bwd_s", "rc_fwd_s", "act_bytes", "ckpt_bytes", "workspace_bytes"):
            assert getattr(got, f) == pytest.approx(getattr(want, f), rel=1e-12), f
        assert got.parts["compute"] == pytest.approx(want.parts["compute"], rel=1e-12)
        # what Megatron-LM's async backward hides (coefficients.tp_backward_exposed) is hidden
        # in the table too, on Megatron's layouts
        assert got.overlapped["tp_comm"] == pytest.approx(want.overlapped["tp_comm"], rel=1e-9)
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
        got, _ = P._move_split(ctx, links, K, P.op_layout(K, tp, "out"), P.replicated_layout(tp), (T, h))
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
    assert _with_stream(table, "attn_out")[k, 0] == pytest.approx(max(gemm, shift) + gemm + gather, rel=1e-12)
    # stashed input: one [T/2, h/2] bf16 block (Megatron's row-parallel input: [T, h/4], same size)
    assert _with_stream(table, "attn_out")[k, 2] == 2 * T * h / 4


def test_p_keeps_fewer_activations_than_megatron_column_input():
    """Megatron's column-parallel qkv keeps the whole replicated input [T, h]; P(2x2) a quarter."""
    inst, o, site = instance_and_site(tp=4, nodes=1)
    table = P.layer_table(inst, o, site, NET)
    specs = [P.spec_of(c) for c in table.candidates["qkv"]]
    act = _with_stream(table, "qkv")[:, 2]
    assert act[specs.index("K")] == 4 * act[specs.index("P2x2")] == 2 * 1024 * 1024


def test_candidates_per_group_size():
    assert [c.spec() for c in P.op_candidates(4, True)] == ["K", "N", "P2x2", "T"]
    assert [c.spec() for c in P.op_candidates(8, True)] == ["K", "N", "K2*P2x2", "N2*P2x2", "T"]
    assert [c.spec() for c in P.op_candidates(16, True)] == ["K", "N", "K4*P2x2", "N4*P2x2", "P4x4", "T"]
    assert [c.spec() for c in P.op_candidates(8, False)] == ["K", "N"]
    assert P.OpPartition("K", 2, 2).describe(("nodes", "node")) == "K@nodes, P2x2@node"
    assert P.parse_op("T", 8).describe(("node", "node")) == "T@node"


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
    assert _inter_with_stream(table, "mlp_out")[k] == pytest.approx(ar, rel=1e-12)
    c = P.linear_op_cost(P.LayerContext(inst, o, site, NET), "mlp_out", P.OpPartition("N", 2, 2))
    assert _with_stream(table, "mlp_out")[k, 0] == pytest.approx(c.fwd_s + ar + gather, rel=1e-12)


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
    from paraplan.cost.errors import ConfigError
    from paraplan.cost.plan_specs import Plan
    assert P.plan_layer_fn(()) is megatron_layer
    parts = tuple((op, "P2x2" if op in P.LINEAR_OPS else "heads") for op in P.OPS)
    Plan.flat(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
         full_recompute_layers=(0,), partitions=parts)
    with pytest.raises(ConfigError, match="not a partition of tp=8"):
        Plan.flat(tp=8, pp=1, dp=1, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
             full_recompute_layers=(0,), partitions=parts)
    Plan.flat(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
         full_recompute_layers=(0,), partitions=parts, sequence_parallel=True)
    with pytest.raises(ConfigError, match="need 4 <= tp <= 32"):
        Plan.flat(tp=2, pp=1, dp=4, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
             full_recompute_layers=(0,), partitions=tuple((op, "T" if op in P.LINEAR_OPS else "heads")
                                                          for op in P.OPS))


def test_all_plans_vectors_match_the_table_sums():
    """Each all_plans row, and its plan's layer_terms, is the table's entries for that plan
    summed here one by one (LayerTable's docstring: time and activations = base + the ops'
    entries + the edges'; workspace = base + the largest buffer; replicated parameters and
    group sync: sums over the ops), in another order than the vectorised pass."""
    inst, o, site = instance_and_site(tp=8)
    table = P.layer_table(inst, o, site, NET)
    idx, vec = P.all_plans(table)
    rng = np.random.default_rng(1)
    for k in rng.choice(len(idx), 20, replace=False):
        i = dict(zip(P.PLAN_OPS, idx[k]))
        unary = [table.unary[op][i[op]] for op in P.PLAN_OPS]
        pair = [table.pair[e][i[e[0]], i[e[1]]] for e in P.EDGES]
        want = [sum(p[0] for p in pair) + sum(u[0] for u in unary) + table.base.fwd_s,
                sum(p[1] for p in pair) + sum(u[1] for u in unary) + table.base.bwd_s,
                sum(u[2] for u in unary) + table.base.act_bytes,
                max(u[3] for u in unary) + table.base.workspace_bytes,
                sum(table.replicated_params[op][i[op]] for op in P.PLAN_OPS),
                sum(table.grad_sync_s[op][i[op]] for op in P.PLAN_OPS)]
        lt = P.layer_terms(table, P.plan_from_indices(table, idx[k]))
        assert np.allclose(vec[k], want, rtol=1e-12)
        assert np.allclose([getattr(lt, f) for f in P.VECTOR], want, rtol=1e-12)
        compute = table.base.parts["compute"] + sum(table.compute[op][i[op]] for op in P.LINEAR_OPS)
        assert lt.parts["compute"] == pytest.approx(compute, rel=1e-12)


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


def test_token_split_mlp_out_by_hand():
    """T on mlp_out ([T,f] x [f,h], T = 1024 tokens, f = 4096, h = 1024) over 4 GPUs of one
    node (150 GB/s, 5 us). Each GPU multiplies its [256, 4096] token block by the whole weight:
    Megatron's FLOPs per GPU, so the same GEMM time; forward adds the all-gather of the [256, h]
    output blocks onto every GPU (3 blocks from 3 owners: 3/4 * 2*T*h B / bw + 3 latencies);
    backward (dy from the replicated stream) moves nothing. Per iteration: the fp32 weight
    gradient, 4*f*h = 16 MiB, is ring-all-reduced over the 4 GPUs:
    2*(3/4)*16,777,216 B / 150e9 B/s + 2*3*5 us = 167.77 us + 30 us = 197.77 us.
    Replicated: the whole f*h = 4,194,304 weight instead of a quarter: 3,145,728 more params."""
    inst, o, site = instance_and_site(tp=4, nodes=1)
    table = P.layer_table(inst, o, site, NET)
    k = [P.spec_of(c) for c in table.candidates["mlp_out"]].index("T")
    T, h, f, gpu = 1024, 1024, 4096, inst.cluster.gpu
    gemm = matmul_time_s(2 * T * f * h / 4, gpu)
    gather = 0.75 * 2 * T * h / 150e9 + 3 * 5e-6
    fwd, bwd, act, buf = _with_stream(table, "mlp_out")[k]
    assert fwd == pytest.approx(gemm + gather, rel=1e-12)
    assert bwd == pytest.approx(2 * gemm, rel=1e-12)
    assert act == 2 * T * f / 4 and buf == 0  # its own token block of the input, bf16
    assert table.grad_sync_s["mlp_out"][k] == pytest.approx(197.77216e-6, rel=1e-9)
    assert table.replicated_params["mlp_out"][k] == 3_145_728
    # mlp_in T -> mlp_out T: the token blocks line up, nothing moves either way
    kin = [P.spec_of(c) for c in table.candidates["mlp_in"]].index("T")
    assert (table.pair[("mlp_in", "mlp_out")][kin, k] == 0).all()
    # every other candidate replicates nothing and syncs nothing over the group
    others = [i for i in range(len(table.candidates["mlp_out"])) if i != k]
    assert not table.replicated_params["mlp_out"][others].any()
    assert not table.grad_sync_s["mlp_out"][others].any()


def test_token_split_qkv_reshards():
    """T on qkv (tp = 4, one node, h = 1024, width 3h = 3072): backward gathers the [T/4, h]
    input-gradient blocks back onto the replicated stream (= cost/comm.py's ring all-gather of
    2*T*h bytes); forward into the head-split core is an all-to-all: each GPU fetches its head
    columns [T/4, 3h/4] from the 3 others (3 cells of 2*T*3h/16 bytes, 3 latencies)."""
    inst, o, site = instance_and_site(tp=4, nodes=1)
    table = P.layer_table(inst, o, site, NET)
    k = [P.spec_of(c) for c in table.candidates["qkv"]].index("T")
    T, h = 1024, 1024
    gemm = matmul_time_s(2 * T * h * 3 * h / 4, inst.cluster.gpu)
    link, inter = site.tp_link
    assert _with_stream(table, "qkv")[k, 1] == pytest.approx(
        2 * gemm + comm.all_gather_time_s(2 * T * h, 4, link, inter, NET), rel=1e-12)
    a2a = 3 * 2 * T * 3 * h / 16 / 150e9 + 3 * 5e-6
    assert table.pair[("qkv", "attn_core")][k, 0, 0] == pytest.approx(a2a, rel=1e-12)
    assert table.pair[("qkv", "attn_core")][k, 0, 1] == pytest.approx(a2a, rel=1e-12)


def test_token_split_state_and_sync_enter_the_coefficients():
    """A plan with mlp_out = T on tp = 4, dp = 1, ZeRO 0: per layer, state grows by the
    3,145,728 replicated params x 18 B (bf16 weight 2 + fp32 grad 4 + Adam 12) = 56,623,104 B;
    the sync of one layer grows by the group all-reduce (197.77 us; dp = 1 has no dp sync, so
    it is all of g) plus the Adam step over the replicated params (30 B each at 900 GB/s HBM):
    the exposed part max(0, g - bwd) per layer and the hidden part min(g, bwd) in the tail."""
    from paraplan.cost.coefficients import build, memory_time_s
    inst, o, site = instance_and_site(tp=4, nodes=1)
    assert o.dp == 1 and o.zero == 0
    plan = dict(P.MEGATRON_DEFAULT, mlp_out="T")
    meg = build(inst, o, NET)
    tsp = build(inst, o, NET, layer_fn=P.partition_layer_fn(plan))
    assert tsp.layer_state_bytes[0] - meg.layer_state_bytes[0] == 3_145_728 * 18 == 56_623_104
    g = 197.77216e-6
    step = memory_time_s(3_145_728 * 30, inst.cluster.gpu)
    lt = P.partition_layer_fn(plan)(inst, o, site, NET)
    assert lt.grad_sync_s == pytest.approx(g, rel=1e-9)
    assert tsp.layer_sync_time_s[0] - meg.layer_sync_time_s[0] == pytest.approx(
        max(0.0, g - lt.bwd_s) + step, rel=1e-9)
    assert tsp.stage_sync_time_s[0] - meg.stage_sync_time_s[0] == pytest.approx(min(g, lt.bwd_s), rel=1e-9)
    assert P.grad_sync_threshold_s(inst, o, site, 1, NET, lt.replicated_params, lt.grad_sync_s) \
        == pytest.approx(g, rel=1e-9)


def test_token_split_is_not_offered_with_zero3():
    from paraplan.cost.errors import ConfigError
    from paraplan.cost.plan_specs import Plan
    parts = tuple((op, dict(P.MEGATRON_DEFAULT, mlp_in="T")[op]) for op in P.OPS)
    Plan.flat(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
         full_recompute_layers=(0,), partitions=parts, zero=1)
    with pytest.raises(ConfigError, match="not offered with zero: 3"):
        Plan.flat(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
             full_recompute_layers=(0,), partitions=parts, zero=3)


def test_sequence_parallel_stream_by_hand():
    """tp = 4 in one node, sequence parallelism: the stream is split by tokens (GPU k holds
    tokens [256k, 256k+256)). A T op on mlp_in/mlp_out meets it with no communication at all
    (forward = its GEMM, backward = two). Megatron's column-parallel mlp_in all-gathers the
    stream (cost/comm.py's ring all-gather of 2*T*h bytes: 3/4 * 2 MiB / 150 GB/s + 3 x 5 us),
    stashes only its 1/4 shard, and in backward reduce-scatters its partial input gradient
    (the same ring volume as the all-gather, half an all-reduce)."""
    inst, o, site = instance_and_site(tp=4, nodes=1)
    o = dataclasses.replace(o, sequence_parallel=True)
    table = P.layer_table(inst, o, site, NET)
    T, h, f, gpu = 1024, 1024, 4096, inst.cluster.gpu
    link, inter = site.tp_link
    ag = comm.all_gather_time_s(2 * T * h, 4, link, inter, NET)
    assert ag == pytest.approx(0.75 * 2 * T * h / 150e9 + 3 * 5e-6, rel=1e-12)
    gemm = matmul_time_s(2 * T * h * f / 4, gpu)
    specs = [P.spec_of(c) for c in table.candidates["mlp_in"]]
    for op in ("mlp_in", "mlp_out"):
        k = [P.spec_of(c) for c in table.candidates[op]].index("T")
        assert table.unary[op][k, 0] == pytest.approx(gemm, rel=1e-12)
        assert table.unary[op][k, 1] == pytest.approx(2 * gemm, rel=1e-12)
    kk = specs.index("K")
    assert _with_stream(table, "mlp_in")[kk, 0] == pytest.approx(gemm + ag, rel=1e-12)
    # backward under Megatron-LM's async column-parallel path (coefficients.tp_backward_exposed):
    # the reduce-scatter hides behind the weight-gradient GEMM and the re-gather of the stashed
    # shard behind the input-gradient GEMM, each showing only what outlasts its GEMM
    exposed = 2 * max(0.0, ag - gemm)
    assert _with_stream(table, "mlp_in")[kk, 1] == pytest.approx(2 * gemm + exposed, rel=1e-12)
    seq = table.candidates[P.STREAM].index("seq")
    assert table.pair_hidden[(P.STREAM, "mlp_in")][seq, kk] == pytest.approx(2 * ag - exposed, rel=1e-12)
    assert _with_stream(table, "mlp_in")[kk, 2] == 2 * T * h / 4


@pytest.mark.parametrize("zero", [0, 3])
def test_plans_priced_together_equal_plans_priced_alone(zero):
    """build_plans shares one configuration's own terms among its layer plans: each plan's
    coefficients must not depend on which plans were priced before it on that configuration
    (nothing of one plan's build may leak into the shared part or another plan's arrays): every
    plan priced alone on a fresh configuration part agrees bit for bit with the same plan
    priced among all of them, in either order."""
    from paraplan.cost import coefficients as C
    inst, _, _ = instance_and_site(tp=4)
    o = Outer(tp=4, pp=2, dp=1, micro_batch=1, num_micro_batches=8, zero=zero)
    site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
    table = P.table_for(inst, o, site, NET)
    idx, _ = P.all_plans(table)
    plans = [P.plan_from_indices(table, idx[k]) for k in (0, len(idx) // 3, len(idx) - 1)]
    plans = [p for p in plans if P.plan_allowed(p, o)]
    fns = [megatron_layer] + [P.partition_layer_fn(p) for p in plans]

    def priced(order):
        C._OUTER_PARTS.clear()
        return dict(zip(order, C.build_plans(inst, o, [fns[j] for j in order], NET, 1e9)))
    alone = {j: priced([j])[j] for j in range(len(fns))}
    for together in (priced(list(range(len(fns)))), priced(list(range(len(fns)))[::-1])):
        for j, c in together.items():
            for f in dataclasses.fields(c):
                a, b = getattr(alone[j], f.name), getattr(c, f.name)
                if isinstance(a, np.ndarray):
                    assert a.tobytes() == b.tobytes(), f.name
                elif f.name == "stage_parts":
                    assert list(a) == list(b)
                else:
                    assert a == b, f.name
    assert len({c.layer_time_s.tobytes() for c in alone.values()}) > 1  # the plans differ
