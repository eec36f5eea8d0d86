"""cost/pipeline_split.py: Megatron-core's layer placement (rank, chunk, offset), its rules for
first/last counts and the embedding/loss accounting, and the pipeline time of such a split.

Every expected placement below is derived by hand from Megatron-core's get_num_layers_to_build
and get_transformer_layer_offset at d98e8a64ddf3 (the formulas are restated in each comment)."""

from dataclasses import replace

import numpy as np
import pytest

from paraplan.cost.coefficients import StageCoefficients, in_flight_micro_batches
from paraplan.cost.errors import ConfigError
from paraplan.cost.pipeline_split import (chunk_items_held, chunk_layers, chunk_problem, chunk_ranges,
                                          megatron_split)
from paraplan.cost.schedule import (iteration_time_s, stage_mem_bytes, stage_times_s,
                                    uneven_chunk_mem_bytes)
from paraplan.cost.specs import Outer
from paraplan.cost.plan_specs import Plan


def test_embedding_and_loss_accounted_interleaved_placement():
    # 10 layers, pp 3, v 2, embedding and loss accounted: 12 slots, 4 per rank, 2 per chunk.
    # Megatron: num_layers_per_virtual_rank = 2, total_virtual_chunks = 12 / 2 = 6,
    # offset = vp * 6 + rank * 2 - 1 except on (rank 0, chunk 0); each chunk builds 2 layers,
    # one fewer on (rank 0, chunk 0) (the embedding) and (rank 2, chunk 1) (the loss):
    #   (0,0): 0 + 0 = 0, 1 layer   (1,0): 0 + 2 - 1 = 1, 2   (2,0): 4 - 1 = 3, 2
    #   (0,1): 6 - 1 = 5, 2         (1,1): 6 + 2 - 1 = 7, 2   (2,1): 6 + 4 - 1 = 9, 1
    split = megatron_split(10, 3, 2, embedding=True, loss=True)
    assert split == (3, 4, 3)
    assert chunk_layers(split, 2, True, True) == ((1, 2), (2, 2), (2, 1))
    assert chunk_ranges(split, 2, True, True) == [
        (0, 0, 0, 1), (1, 0, 1, 2), (2, 0, 3, 2), (0, 1, 5, 2), (1, 1, 7, 2), (2, 1, 9, 1)]


def test_first_last_counts_interleaved_placement():
    # 14 layers, pp 4, v 2, --decoder-first-pipeline-num-layers 2, last 4: the 8 middle layers
    # over 2 middle ranks, 4 each. Per chunk: first 2 / 2 = 1, middle 8 / 2 = 4 (2 per middle
    # rank), last 4 / 2 = 2; total_virtual_chunks = 1 + 4 + 2 = 7;
    # offset = vp * 7 (rank 0), vp * 7 + 1 + (rank - 1) * 2 (others):
    #   chunk 0: rank 0 at 0 (1), rank 1 at 1 (2), rank 2 at 3 (2), rank 3 at 5 (2)
    #   chunk 1: rank 0 at 7 (1), rank 1 at 8 (2), rank 2 at 10 (2), rank 3 at 12 (2)
    split = megatron_split(14, 4, 2, first=2, last=4)
    assert split == (2, 4, 4, 4)
    assert chunk_ranges(split, 2) == [(0, 0, 0, 1), (1, 0, 1, 2), (2, 0, 3, 2), (3, 0, 5, 2),
                                      (0, 1, 7, 1), (1, 1, 8, 2), (2, 1, 10, 2), (3, 1, 12, 2)]


def test_llama31_405b_as_megatron_bridge_runs_it():
    # 126 layers, pp 8, v 8, both accounted: 128 slots, 16 per rank, 2 per chunk; the last
    # layer (125) is rank 7's chunk 7: offset 7 * 16 + 7 * 2 - 1 = 125, one layer and the loss.
    split = megatron_split(126, 8, 8, embedding=True, loss=True)
    assert split == (15, 16, 16, 16, 16, 16, 16, 15)
    per = chunk_layers(split, 8, True, True)
    assert per[0] == (1,) + (2,) * 7 and per[7] == (2,) * 7 + (1,)
    assert chunk_ranges(split, 8, True, True)[-1] == (7, 7, 125, 1)
    # without the accounting the same split is refused: 15 is not a multiple of 8
    assert "stage 0 holds 15" in chunk_problem(split, 8, False, False)


def test_a_chunk_may_hold_the_embedding_alone():
    # 6 layers, pp 4, v 2, both accounted: 8 slots, 2 per rank, 1 per chunk: rank 0's chunk 0
    # holds only the embedding (Megatron asserts num_layers_to_build >= 0, not > 0).
    split = megatron_split(6, 4, 2, embedding=True, loss=True)
    assert split == (1, 2, 2, 1)
    assert chunk_layers(split, 2, True, True) == ((0, 1), (1, 1), (1, 1), (1, 0))


@pytest.mark.parametrize("args, kw, words", [
    ((14, 4, 2), dict(first=3), "not a multiple of virtual_stages=2"),  # 3 % 2 != 0
    ((14, 4, 1), dict(first=3, last=4), "do not split evenly"),         # 7 middle layers, 2 ranks
    ((12, 2, 1), dict(first=5, last=5), "middle layers exactly"),       # 2 left, no middle rank
    ((126, 8, 8), dict(embedding=True), "divisible by pp=8"),           # 127 slots
    ((126, 8, 8), dict(first=16, embedding=True), "together with"),     # R5: exclusive
    ((14, 4, 1), dict(first=0), "must be > 0"),
])
def test_megatron_split_refuses_what_megatron_core_refuses(args, kw, words):
    with pytest.raises(ConfigError, match=words):
        megatron_split(*args, **kw)


def _coefficients(pp: int, m: int, v: int, stage_s, layer_s, act_bytes: float = 0.0) -> StageCoefficients:
    """Per layer: layer_s seconds; act_bytes of activations per micro-batch pass held, so
    layer_act_bytes = act_bytes x in_flight as cost/coefficients.build stores it."""
    zeros = np.zeros(pp)
    outer = Outer(tp=1, pp=pp, dp=1, micro_batch=1, num_micro_batches=m, virtual_stages=v)
    inflight = in_flight_micro_batches(pp, m, v)
    return StageCoefficients(outer=outer, layers=0, layer_time_s=np.full(pp, layer_s),
                             recompute_time_s=zeros, stage_time_s=np.array(stage_s, float),
                             layer_sync_time_s=zeros, stage_sync_time_s=zeros,
                             layer_state_bytes=zeros, layer_act_bytes=act_bytes * inflight,
                             layer_ckpt_bytes=zeros, stage_mem_bytes=zeros,
                             capacity_bytes=np.full(pp, 1.0), in_flight=inflight)


def test_memory_of_the_short_chunks_by_hand():
    # pp 4, v 2, 8 micro-batches, split [3, 4, 4, 3] with the embedding and loss counted:
    # chunks (1, 2), (2, 2), (2, 2), (2, 1). Megatron-core warms up 2 (pp - s - 1) + (v - 1) pp
    # passes and holds one more: stage 0 holds 11, stage 3 holds 5 (in_flight 5.5 and 2.5).
    # Passes run in groups of pp = 4 on chunk g mod 2:
    #   stage 0: chunks 0 0 0 0 1 1 1 1 0 0 0 -> 7 passes of its 1-layer chunk, 4 of the
    #            2-layer one: 7 + 8 = 15 layer activations; the stage average prices 5.5 x 3 = 16.5
    #   stage 3: chunks 0 0 0 0 1 -> 1 pass of its 1-layer chunk, 4 of the other: 1 + 8 = 9;
    #            priced 2.5 x 3 = 7.5
    # so the correction is -1.5 and +1.5 layer activations (100 bytes each).
    assert chunk_items_held(11, 4, 2, 0) == 7 and chunk_items_held(5, 4, 2, 1) == 1
    c = _coefficients(4, 8, 2, [0, 0, 0, 0], 1e-3, act_bytes=100.0)
    n, r = np.array([3.0, 4, 4, 3]), np.zeros(4)
    flagged = replace(c, outer=replace(c.outer, embedding_in_split=True, loss_in_split=True))
    assert uneven_chunk_mem_bytes(flagged, n, r) == pytest.approx([-150.0, 0, 0, 150.0])
    assert uneven_chunk_mem_bytes(c, n, r) == pytest.approx([0, 0, 0, 0])
    # stage_mem_bytes, which every backend's memory check reads, includes it (the linear
    # terms price 5.5 x 3 x 100 = 1650 and 2.5 x 3 x 100 = 750 bytes; 1500 and 900 held; the
    # middle stages hold 4.5 and 3.5 passes of 4 layers, unchanged)
    assert stage_mem_bytes(flagged, n, r) == pytest.approx([1500.0, 1800, 1400, 900.0])


def test_pipeline_time_of_an_uneven_interleaved_split_by_hand():
    # 14 layers, pp 4, v 2, embedding and loss accounted: split [3, 4, 4, 3] (16 slots, 4 per
    # rank). Per micro-batch: a layer 1.0 ms, the embedding 0.5 ms on stage 0, the output
    # layer and loss 1.5 ms on stage 3: T = [3.5, 4.0, 4.0, 4.5] ms. m = 8 micro-batches:
    # m max T + (sum T - max T) / v = 8 x 4.5 + (3.5 + 4 + 4) / 2 = 36 + 5.75 = 41.75 ms.
    # (The same model prices every split: the embedding and the loss stay stage terms of the
    # first and last stage, the accounting only changes which layer counts are allowed.)
    c = _coefficients(4, 8, 2, [0.5e-3, 0, 0, 1.5e-3], 1.0e-3)
    n, r = np.array([3, 4, 4, 3]), np.zeros(4)
    assert stage_times_s(c, n, r) == pytest.approx([3.5e-3, 4e-3, 4e-3, 4.5e-3])
    assert float(iteration_time_s(c, n, r)) == pytest.approx(41.75e-3)
    plan = Plan.flat(tp=1, pp=4, dp=1, micro_batch=1, num_micro_batches=8, virtual_stages=2,
                layers_per_stage=(3, 4, 4, 3), full_recompute_layers=(0,) * 4,
                embedding_in_split=True, loss_in_split=True)
    assert plan.chunk_layers == ((1, 2), (2, 2), (2, 2), (2, 1))
