"""Partitioned residual-stream layouts (cost/partition.py, `stream`): PrimePar's block layout of
the norms and element-wise operators, priced by hand. Test instances: 1024 tokens per
micro-batch, h = 1024, f = 4096, 4-GPU nodes at 150 GB/s + 5 us inside, 3.125 GB/s per GPU
+ 10 us between nodes, HBM 900 GB/s at 0.7 efficiency (tests/partition_support.py)."""

import dataclasses

import numpy as np
import pytest
from partition_support import instance_and_site

from paraplan.cost import partition as P
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError
from paraplan.cost.plan_specs import Plan

# the hand derivations below assume an ideal network: wire speed, no per-call latency and
# no overlap slowdown (the measured defaults of cost/comm.py are checked in tests/cost)
NET = NetEfficiency(intra_node=1.0, inter_node=1.0, overlap_slowdown=0.0, call_latency_s=0.0)
T, H = 1024, 1024


def _table(tp, nodes=None, sp=True):
    inst, o, site = instance_and_site(tp=tp, nodes=nodes or max(1, tp // 4))
    o = dataclasses.replace(o, sequence_parallel=sp)
    return P.layer_table(inst, o, site, NET), inst, o, site


def _k(table, op, spec):
    return [P.spec_of(c) for c in table.candidates[op]].index(spec)


def test_stream_candidates_follow_the_flag():
    assert P.stream_candidates(8, False, True) == ["replicated"]
    assert P.stream_candidates(8, True, False) == ["seq"]
    assert P.stream_candidates(8, True, True) == ["seq", "B2x2"]
    assert P.stream_candidates(16, True, True) == ["seq", "B2x2", "B4x4"]


def test_block_layout_cells():
    """B2x2 over t = 8 (J = 2): GPU rho = 4w + 2r + c holds token rows 2r + w of 4 and hidden
    columns c of 2, i.e. cells [2(2r+w), 2(2r+w)+2) x [4c, 4c+4) of the 8 x 8 grid; the
    blocks tile the stream, and each lies inside the P(2x2) output block (r, c)."""
    m = P.stream_layout("B2x2", 8)
    assert (m.sum(axis=0) == 1).all()  # a partition of the stream
    for rho in range(8):
        w, r, c = rho // 4, (rho // 2) % 2, rho % 2
        want = np.zeros((8, 8), bool)
        want[2 * (2 * r + w):2 * (2 * r + w) + 2, 4 * c:4 * c + 4] = True
        assert (m[rho] == want).all()
    out = P.op_layout(P.OpPartition("N", 2, 2), 8, "out")[0]
    assert not (m & ~out).any()


def test_norm_statistics_all_reduce_by_hand():
    """B2x2 on tp = 4 in one node: a GPU holds 1024 / 2 = 512 token rows; LayerNorm's two fp32
    statistics per token, 8 B x 512 = 4096 B, are ring-all-reduced over the 2 GPUs sharing the
    rows: 2 * (1/2) * 4096 B / 150 GB/s + 2 * 1 * 5 us = 27.3 ns + 10 us; two norms per layer,
    forward and again backward: 2 * 10.0273 us = 20.0546 us each way. On tp = 16 over four
    nodes, B4x4 (J = 1): 256 rows, 2048 B over 4 GPUs of one node:
    2 * (3/4) * 2048 / 150e9 + 6 * 5 us = 30.0205 us per norm, 60.041 us per layer pass."""
    table, *_ = _table(4, nodes=1)
    one = 2 * (1 / 2) * 4096 / 150e9 + 2 * 5e-6
    row = table.unary[P.STREAM][_k(table, P.STREAM, "B2x2")]
    assert row[0] == pytest.approx(2 * one, rel=1e-12) == pytest.approx(20.0546e-6, rel=1e-5)
    assert row[1] == pytest.approx(2 * one, rel=1e-12)
    assert row[2] == row[3] == 0.0  # its stashes are the sequence-parallel ones (in the base)
    assert (table.unary[P.STREAM][_k(table, P.STREAM, "seq")] == 0).all()
    table16, *_ = _table(16, nodes=4)
    one16 = 2 * (3 / 4) * 2048 / 150e9 + 6 * 5e-6
    k = _k(table16, P.STREAM, "B4x4")
    assert table16.unary[P.STREAM][k, 0] == pytest.approx(2 * one16, rel=1e-12)
    assert table16.inter_node[P.STREAM][k] == 0.0  # the 4 row-sharing GPUs are one node


def test_p_output_lands_on_the_block_stream():
    """attn_out = P2x2 on tp = 4: its output block (r, c) is the B2x2 block, so nothing moves
    forward (output into the stream) or backward (output gradient from it); onto the seq stream
    GPU 2r + c (token rows 256(2r + c) and on) holds half the columns of its 256 rows and
    fetches the other half from GPU 2r + (1 - c): 1/8 * 2*T*h B / 150 GB/s + 5 us = 6.748 us. attn_out = N2*P2x2 on tp = 8 across two nodes: the
    partial [512, 512] blocks (524,288 B) are reduce-scattered over the 2 GPUs 4 ranks apart
    (one NIC share each, 3.125 GB/s, 10 us) onto B2x2's halves: 1/2 * 524288 / 3.125e9 + 10 us
    = 93.886 us, and nothing is fetched after. Backward, each GPU holds half of its [512, 512]
    output-gradient block (its B2x2 block) and fetches the other half, 262,144 B, from the GPU
    4 ranks away, on the group's cross-node ring link (4 NICs per node, 12.5 GB/s, 10 us):
    20.97 us + 10 us; both directions cross nodes."""
    table, *_ = _table(4, nodes=1)
    b, kp = _k(table, P.STREAM, "B2x2"), _k(table, "attn_out", "P2x2")
    assert (table.pair[(P.STREAM, "attn_out")][b, kp] == 0).all()
    seq = _k(table, P.STREAM, "seq")
    fetch = 2 * T * H / 8 / 150e9 + 5e-6
    assert table.pair[(P.STREAM, "attn_out")][seq, kp, 0] == pytest.approx(fetch, rel=1e-12)
    table8, *_ = _table(8, nodes=2)
    b, kn = _k(table8, P.STREAM, "B2x2"), _k(table8, "attn_out", "N2*P2x2")
    rs = 0.5 * 524288 / 3.125e9 + 10e-6
    assert table8.pair[(P.STREAM, "attn_out")][b, kn, 0] == pytest.approx(rs, rel=1e-12)
    back = 262144 / 12.5e9 + 10e-6
    assert table8.pair[(P.STREAM, "attn_out")][b, kn, 1] == pytest.approx(back, rel=1e-12)
    assert table8.pair_inter_node[(P.STREAM, "attn_out")][b, kn] == pytest.approx(rs + back, rel=1e-12)


def test_elementwise_share_and_activations_saved():
    """A split stream (seq or block) runs the norms, dropouts and residual adds on 1/t of the
    stream: their forward traffic (flops.layer_elementwise_bytes: 2 norms x 2 x 2Th + 2 adds x
    (3 x 2Th + Th) = 22 Th B) shrinks by 3/4 on tp = 4: 22 * 1024^2 * 3/4 B / (900 GB/s * 0.7)
    = 27.46 us forward, twice that backward. Stashes: the norm inputs (2 x 2Th B) shrink to 1/4
    (the model trains without dropout, so no dropout masks are stored: cost/memory.py):
    4 * 1024^2 * 3/4 = 3,145,728 B saved by the all-P2x2 plan on the block stream against the
    same operators on the replicated stream."""
    rep, *_ = _table(4, nodes=1, sp=False)
    blk, *_ = _table(4, nodes=1, sp=True)
    elem = 22 * T * H * 3 / 4 / (900e9 * 0.7)
    assert rep.base.fwd_s - blk.base.fwd_s == pytest.approx(elem, rel=1e-9)
    assert rep.base.bwd_s - blk.base.bwd_s == pytest.approx(2 * elem, rel=1e-9)
    all_p = {op: "P2x2" if op in P.LINEAR_OPS else "heads@P2" for op in P.OPS}
    a_rep = P.layer_terms(rep, all_p).act_bytes
    a_blk = P.layer_terms(blk, dict(all_p, stream="B2x2")).act_bytes
    assert a_rep - a_blk == 3_145_728
    # the block stream's extra forward time is its norm statistics, its saving the reshards
    seq_terms = P.layer_terms(blk, all_p)
    blk_terms = P.layer_terms(blk, dict(all_p, stream="B2x2"))
    idx_s, idx_b = P.plan_indices(blk, all_p), P.plan_indices(blk, dict(all_p, stream="B2x2"))
    moved = sum(blk.pair[e][idx_b[e[0]], idx_b[e[1]], 0] - blk.pair[e][idx_s[e[0]], idx_s[e[1]], 0]
                for e in P.STREAM_EDGES)
    stats = blk.unary[P.STREAM][idx_b[P.STREAM], 0]
    assert blk_terms.fwd_s - seq_terms.fwd_s == pytest.approx(stats + moved, rel=1e-9)
    assert seq_terms.act_bytes == blk_terms.act_bytes


def test_block_stream_needs_sequence_parallel():
    parts = (tuple((op, "P2x2" if op in P.LINEAR_OPS else "heads") for op in P.OPS)
             + (("stream", "B2x2"),))
    kw = dict(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8, layers_per_stage=(4,),
              full_recompute_layers=(0,), partitions=parts)
    Plan.flat(**kw, sequence_parallel=True)
    with pytest.raises(ConfigError, match="needs sequence_parallel"):
        Plan.flat(**kw)
    with pytest.raises(ConfigError, match="not a partition of tp=4"):
        Plan.flat(**dict(kw, partitions=parts[:-1] + (("stream", "B4x4"),)), sequence_parallel=True)
    table, inst, o, site = _table(4, nodes=1, sp=False)
    assert table.candidates[P.STREAM] == ("replicated",)
    with pytest.raises(ValueError, match="needs sequence_parallel"):
        P.partition_layer_fn(dict(parts))(inst, o, site, NET)


def test_block_stream_round_trips_and_simulates():
    """A plan file may name the stream; it reads back equal, is priced (faster here than the
    same operators on Megatron's sequence split: OPT-175B, 16 x V100, tp = 16), and a block
    stream without sequence parallelism is a one-line error naming the key."""
    from pathlib import Path

    from paraplan.cost.errors import InstanceError
    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.readers.plan_reader import plan_from_mapping
    from paraplan.cost.readers.plan_writer import plan_to_mapping
    from paraplan.cost.simulate import simulate
    inst = load_instance(Path(__file__).resolve().parents[2] / "instances" / "primepar"
                         / "primepar-opt-175b-32xV100.yaml")
    parts = {"qkv": "K4*P2x2", "attn_core": "heads@P2", "attn_out": "N4*P2x2",
             "mlp_in": "K4*P2x2", "mlp_out": "N4*P2x2"}
    base = {"tp": 16, "pp": 1, "dp": 2, "micro_batch": 8, "sequence_parallel": True}
    blk = plan_from_mapping(dict(base, partitions=dict(parts, stream="B2x2")), inst)
    assert dict(blk.partitions)["stream"] == "B2x2"
    assert plan_from_mapping(plan_to_mapping(blk), inst) == blk
    seq = plan_from_mapping(dict(base, partitions=parts), inst)
    assert simulate(inst, blk).iter_time_s < simulate(inst, seq).iter_time_s
    with pytest.raises((ConfigError, InstanceError), match="needs sequence_parallel"):
        plan_from_mapping(dict(base, sequence_parallel=False, partitions=dict(parts, stream="B2x2")), inst)
