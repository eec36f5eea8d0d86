"""ZeRO-3 of an MoE model: the routed experts' weights, gradients and optimizer state sharded over
the expert-data-parallel group, gathered and reduce-scattered per micro-batch on that group's
link (cost/coefficients._layer_costs; Megatron-FSDP shards expert parameters over the expert
data-parallel group and runs with EP: Megatron-core's Megatron FSDP guide, "Tensor Parallelism
(TP), Expert Parallelism (EP), and Context Parallelism (CP): compatible").

Numbers by hand for Mixtral 8x7B (hidden 4096, 32 heads, 8 kv heads, expert ffn 14336, SwiGLU,
8 experts) on the bundled 64 x H100 (8 per node; NVLink 450 GB/s per direction at 0.80
efficiency, 5 us per hop; NIC 50 GB/s at 0.95, 10 us per hop; NCCL call latency 8.4 us)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost import coefficients
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.specs import Outer

MIXTRAL = Path(__file__).resolve().parents[2] / "instances" / "mixtral-8x7b-64xH100.yaml"

# tp 1, dp 64, ep 8: each GPU holds 8 / 8 = 1 expert of 3 x 4096 x 14336 = 176,160,768 weights;
# the expert-data-parallel group is the 64 x 1 / (8 x 1) = 8 ranks holding that expert, 8 apart
# (one per node: the NIC). The dense part of a layer (attention 2 x 4096^2 + 2 x 4096 x 1024,
# router 4096 x 8, two norms of 4096) is 41,984,000 weights over all 64 ranks, 8 per node: a
# ring of 8 nodes at min(NVLink, 8 x NIC) = 400 GB/s, on the network's efficiency and hops.
ZERO3 = Outer(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=16, zero=3, ep=8)
EXPERT, DENSE = 176_160_768, 41_984_000


def mixtral():
    return load_instance(MIXTRAL)


def layer_costs(inst, o):
    site = coefficients.homogeneous_placement(inst.cluster.one_group, o).sites[0]
    return coefficients._layer_costs(inst, o, site, o.dp * o.cp, NetEfficiency(), coefficients.moe_layer)


def test_expert_weights_are_gathered_over_the_expert_data_parallel_group_by_hand():
    lc = layer_costs(mixtral(), ZERO3)
    assert lc.terms.expert_params == EXPERT
    # all-gather = call latency + (n - 1) hops + (n - 1)/n x bytes / (efficiency x bandwidth)
    # experts, bf16, 8 ranks on the NIC: 8.4 + 7 x 10 us + 7/8 x 352,321,536 / 47.5e9 = 6.5679 ms
    # dense part, bf16, 64 ranks at 380 GB/s: 8.4 + 63 x 10 us + 63/64 x 83,968,000 / 380e9 = 0.8559 ms
    assert lc.gather_s == pytest.approx(6.5679e-3 + 0.8559e-3, rel=1e-3)
    # the gradients' reduce-scatter in fp32 (Megatron's main gradients, 4 bytes):
    # experts 78.4 us + 7/8 x 704,643,072 / 47.5e9 = 13.0574 ms; dense 638.4 us + 63/64 x
    # 167,936,000 / 380e9 = 1.0734 ms
    assert lc.scatter_s == pytest.approx(13.0574e-3 + 1.0734e-3, rel=1e-3)


def test_expert_state_is_sharded_over_the_expert_data_parallel_group_by_hand():
    # Megatron: 2 (bf16 weight) + 4 (fp32 main gradient) + 12 (optimizer) = 18 bytes a weight.
    # ZeRO-3 shards all 18: the dense part over 64 ranks, the expert over its 8;
    # ZeRO-1 only the 12: 2 + 4 + 12 / 64 and 2 + 4 + 12 / 8.
    inst = mixtral()
    state = {}
    for zero in (1, 3):
        o = replace(ZERO3, zero=zero)
        c = coefficients.build(inst, o)
        state[zero] = float(c.layer_state_bytes[0])
    assert state[3] == pytest.approx(DENSE * 18 / 64 + EXPERT * 18 / 8, rel=1e-9)
    assert state[1] == pytest.approx(DENSE * (6 + 12 / 64) + EXPERT * (6 + 12 / 8), rel=1e-9)


def test_a_zero3_plan_gathers_its_expert_block_at_the_peak():
    # the gathered units at a stage's peak (cost/memory.zero3_gathered_bytes, FSDP): the block
    # computed and the one prefetched in bf16, plus one block's gradients being reduce-scattered
    # (bf16 + the fp32 copy); an MoE block is its dense part plus the GPU's experts, so a
    # one-stage plan (the root unit too: embedding and output layer, 2 x 4096 x 32000, and the
    # final norm, 4096) holds 2 x (2 x 218,144,768 + 262,148,096) + 6 x 218,144,768 bytes
    # more than its ZeRO-1 twin, less the state ZeRO-3 shards away (the test above)
    from paraplan.cost.memory import state_layout, zero3_gathered_bytes
    m = mixtral().model
    block = DENSE + EXPERT
    assert zero3_gathered_bytes(m, 1, mixtral().job.framework, state_layout(mixtral().job), True, True,
                                EXPERT) == pytest.approx(
        2 * (2 * block + 2 * 4096 * 32000 + 4096) + 6 * block, rel=1e-9)
