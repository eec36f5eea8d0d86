"""The per-stage full-recompute counts each framework runs (cost/recompute_patterns.py), derived
by hand from the frameworks' code as cost/framework_rules.py cites it."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.cost.framework_rules import recompute_pattern
from paraplan.cost.recompute_patterns import RecomputePattern, options, refusal, runs
from paraplan.cost.specs import Framework, Recompute

FIRST, KTH = RecomputePattern.FIRST_PER_CHUNK, RecomputePattern.EVERY_KTH


def test_the_table_names_each_frameworks_pattern():
    assert recompute_pattern(Framework.MEGATRON, Recompute.NONE) is FIRST
    assert recompute_pattern(Framework.TORCHTITAN, Recompute.NONE) is KTH
    # one granularity: no full recompute of some layers beside selective recompute of others
    assert recompute_pattern(Framework.MEGATRON, Recompute.SELECTIVE) is RecomputePattern.ALL_OR_NONE
    assert recompute_pattern(Framework.TORCHTITAN, Recompute.SELECTIVE) is RecomputePattern.ALL_OR_NONE
    # the model's own code picks the blocks: every per-stage count
    assert recompute_pattern(Framework.DEEPSPEED, Recompute.SELECTIVE) is RecomputePattern.PER_STAGE
    assert recompute_pattern(Framework.COMPOSER, Recompute.NONE) is RecomputePattern.PER_STAGE


def test_megatron_block_counts_per_chunk_with_the_slots():
    # [3, 4, 4, 3] with v = 2 and the embedding / loss slots: 16 slots, 2 per chunk; stage 0's
    # chunks hold 1 and 2 layers, stage 3's 2 and 1, the others 2 and 2. N = 0: none; N = 1:
    # the first layer of every chunk, 2 per stage; N = 2: every layer.
    got = options(FIRST, np.array([3, 4, 4, 3]), 2, True, True)
    assert got.tolist() == [[0, 0, 0, 0], [2, 2, 2, 2], [3, 4, 4, 3]]


def test_megatron_one_n_for_every_stage():
    # one N on [2, 6]: min(N, 2) and min(N, 6): N = 3 gives [2, 3]; nothing gives [1, 2]
    assert runs(FIRST, [(2, 6)], [(2, 3)], 1)
    assert runs(FIRST, [(2, 6)], [(2, 2)], 1)
    assert not runs(FIRST, [(2, 6)], [(1, 2)], 1)
    # two classes share the job's N: N = 2 gives [2, 2] on [4, 4] and [2] on [8]; no N gives
    # [2, 2] on the first and [4] on the second
    assert runs(FIRST, [(4, 4), (8,)], [(2, 2), (2,)], 1)
    assert not runs(FIRST, [(4, 4), (8,)], [(2, 2), (4,)], 1)


def test_torchtitan_every_kth_block_of_a_rank():
    # 7 layers on one rank: k = 1 every block (7), k = 2 blocks 2, 4, 6 (3), k = 3 two, k = 4..7
    # one, k = 8 and above none: {0, 1, 2, 3, 7}
    assert sorted(set(options(KTH, np.array([7]), 1)[:, 0].tolist())) == [0, 1, 2, 3, 7]
    # the example of issue 34: one layer on stage 0 only of [20, 20, 20, 20]; k = 20 gives one
    # on every stage
    assert not runs(KTH, [(20, 20, 20, 20)], [(1, 0, 0, 0)], 1)
    assert runs(KTH, [(20, 20, 20, 20)], [(1, 1, 1, 1)], 1)
    # uneven stages: k = 3 on [3, 2, 2, 1] recomputes only stage 0's third block
    assert runs(KTH, [(3, 2, 2, 1)], [(1, 0, 0, 0)], 1)


def test_selective_beside_full_is_all_or_none():
    one = RecomputePattern.ALL_OR_NONE
    assert runs(one, [(4, 4)], [(0, 0)], 1) and runs(one, [(4, 4)], [(4, 4)], 1)
    assert not runs(one, [(4, 4)], [(4, 0)], 1) and not runs(one, [(4, 4)], [(1, 1)], 1)


def test_the_refusal_names_what_the_framework_runs():
    why = refusal(KTH, "torchtitan", [(20, 20, 20, 20)], [(1, 0, 0, 0)], 1)
    assert "[1, 0, 0, 0] of [20, 20, 20, 20]" in why and "every k-th block" in why
    assert refusal(RecomputePattern.PER_STAGE, "deepspeed", [(3, 3)], [(3, 1)], 1) is None


@pytest.mark.parametrize("pattern", [FIRST, KTH, RecomputePattern.ALL_OR_NONE])
def test_values_are_listed_none_first_then_growing(pattern):
    # the incumbent takes the first value that fits (solver/search.pattern_recompute): with the
    # counts growing in every stage that is the fewest recomputed layers
    got = options(pattern, np.array([5, 3, 1]), 1)
    assert (got[0] == 0).all()
    assert (np.diff(got, axis=0) >= 0).all()
