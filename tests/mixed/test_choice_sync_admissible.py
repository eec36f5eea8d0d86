"""A stage family's tp choices keyed with their slowest stage, their stages' sum and their slowest
gradient sync read together (solver/bounds/stage_families.FamilyBounds.apart_choices, the two
apart, as a family is opened; joint_keys, fill_drain.fill_drain_sync_s on each group's floors and
least syncs, as the search pops a choice; issue 33's 8 types x 8 nodes row, whose
choices' keys read no sync and lay 5-7% under the optima of the layouts they hold).

On small clusters of three and four GPU types whose links are slow (the data-parallel sync is a
large part of a step) and whose batch is small (the fill and drain are a large part of a
pipeline), every stage family is opened against a bar above every key and every tp choice set up
(search.DEFER_TP_CHOICES 0: each family deferred). Per tp choice: its key is at most the least optimum of the
configurations it stands for (every configuration of its partial layout, each priced and
solved by the exact split DP: test_stage_families._least_optimum); the sync reading raises some
keys (against the same keys read without syncs); and some key lies within CLOSE of its
least optimum, so a key raised by a few percent more would fail the first check there."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from randinst import Space, drawn_between, toy_model
from test_stage_families import _least_optimum

from paraplan.cost.specs import Cluster, GpuSpec, Instance, JobSpec, Link, NodeGroup
from paraplan.solver import search as search_mod
from paraplan.solver.bounds import stage_families
from paraplan.solver.bounds.stage_families import StageFamily


def slow_sync_instance(seed: int) -> Instance:
    """Three or four groups of one node of 2 toy GPUs, each its own GPU type (speed drawn, 3 GiB
    each so most splits fit), links within and between groups drawn at 3-25 GB/s, tp 1 or 2
    per group, 6 or 8 layers and a batch of 4 or 8 (one or two micro-batch sizes)."""
    rng = random.Random(2_000 + seed)
    model = toy_model(f"sync{seed}", rng.choice([6, 8]))
    groups = []
    for g in range(rng.choice([3, 4])):
        gpu = GpuSpec(name=f"toy{g}", peak_flops_per_s=rng.choice([50e12, 150e12, 300e12]),
                      hbm_bytes=3.0 * 2**30, hbm_bw_bytes_per_s=1e12)
        groups.append(NodeGroup(name=f"g{g}", site="s", gpu=gpu, nodes=1, gpus_per_node=2,
                                intra_node=Link(bw_bytes_per_s=rng.choice([3e9, 25e9]), latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=rng.choice([3e9, 25e9]), latency_s=1e-5)))
    between = drawn_between(rng, groups)
    return Instance(name=f"sync{seed}", model=model, cluster=Cluster(groups=tuple(groups), between=between),
                    job=JobSpec(global_batch=rng.choice([4, 8])),
                    search=Space(micro_batch=(1, 2), zero=(0, 1), virtual_stages=(1,), cp=(1,), tp=(1, 2),
                                 full_recompute=False))


# seeds 1 and 2 (83 choices each) take 6 s of CPU apiece for the same verdict
SEEDS = (0, 3, 4)
# some key reaches at least this share of its least optimum on each seed (measured: 0.942, 0.927
# and 0.918 of it; without the syncs 0.915, 0.907 and 0.904, so this fails there too): a key
# raised by 6.2% more fails the first check on seed 0, by 9% on each. (0.960, 0.947 and 0.923
# were measured while a popped batch's choices read other choices' syncs: see
# test_a_choice_joint_key_is_its_own_whoever_is_popped_with_it)
CLOSE = {0: 0.94, 3: 0.925, 4: 0.915}


def _choice_keys(inst, joint: bool = True) -> list[tuple[float, list]]:
    """(key, its partial layout) of every tp choice of every stage family of `inst`: its
    key as an opened family gives it, raised as the search raises it when it pops the choice
    (`joint`: search._Partials.joint_keys)."""
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    out = []
    for f, fam in enumerate(lazy.families):
        if not isinstance(fam, StageFamily):
            continue
        # a bar above every finite key: the joint reading is read against a bar only, and
        # every choice can win
        for ch in lazy.open_family(f, lambda lb: lb < math.inf):
            key = ch.key[0]
            if joint and lazy.joint_reads(ch):
                key = max(key, lazy.joint_keys([ch], lambda lb: lb < math.inf)[0])
            start = len(lazy.partials)
            lazy.set_up([ch])
            out.append((key, lazy.partials[start:]))
    return out


@pytest.fixture
def deferred(monkeypatch):
    monkeypatch.setattr(search_mod, "DEFER_TP_CHOICES", 0)


@pytest.mark.parametrize("seed", SEEDS)
def test_each_choice_key_read_with_its_syncs_is_at_most_its_least_optimum(seed, deferred, monkeypatch):
    inst = slow_sync_instance(seed)
    keyed = _choice_keys(inst)
    with monkeypatch.context() as m:  # the same keys without the sync reading
        m.setattr(stage_families.FamilyBounds, "apart_choices", lambda self, fam, keep, *_: np.zeros(len(keep)))
        apart = _choice_keys(inst, joint=False)
    assert [len(p) for _, p in keyed] == [len(p) for _, p in apart]
    checked = raised = 0
    closest = 0.0
    for (key, parts), (plain, _) in zip(keyed, apart):
        assert key >= plain  # the sync reading only raises
        if not math.isfinite(key):
            continue
        best = min((_least_optimum(inst, p) for p in parts), default=math.inf)
        if not math.isfinite(best):
            continue
        checked += 1
        assert key <= best * (1 + 1e-12), (key, best)
        raised += key > plain * (1 + 1e-9)
        closest = max(closest, key / best)
    assert checked and raised and closest > CLOSE[seed], (checked, raised, closest)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_choice_joint_key_is_its_own_whoever_is_popped_with_it(seed, deferred):
    # a popped choice's joint key reads its own tp per group's syncs: read alone and read in one
    # batch with every other choice of its family, it is the same float. (The batch's terms are
    # its choices' alone, and the syncs were once read at the batch's row numbers as grid
    # positions: the grid's first choices' syncs, so one choice's key moved with its company.)
    inst = slow_sync_instance(seed)
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    bar = lambda lb: lb < math.inf  # every choice can win: the joint reading is read for each
    compared = moved = 0
    for f, fam in enumerate(lazy.families):
        if not isinstance(fam, StageFamily):
            continue
        choices = [ch for ch in lazy.open_family(f, bar) if lazy.joint_reads(ch)]
        if len(choices) < 2:
            continue
        together = lazy.joint_keys(choices, bar)
        # reversed: each choice at another row of the batch than alone or in order
        backwards = lazy.joint_keys(choices[::-1], bar)[::-1]
        for ch, t, b in zip(choices, together, backwards):
            alone = lazy.joint_keys([ch], bar)[0]
            assert alone == t == b, (ch.index, alone, t, b)
            compared += 1
            moved += alone != lazy.joint_keys([choices[0]], bar)[0]
    assert compared and moved  # some choices' keys differ: the check can tell them apart
