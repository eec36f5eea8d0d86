"""The partitioned space's size read per mode and shared per tally (issue 33, moe5).

Tally.per_mode keeps, of each (sp, ZeRO) mode that lists some outer, its first spec and its
counts; _partition_tally weights each mode's counts by the layer-plan combinations of that
first spec (partition_count), and summarize_blocks reads a block's (outers, plans) once per
(degrees, micro-batch, tally, tp per choice). Each is checked against a fresh reading: the
block's specs() one by one, each outer built and its combinations counted, and the full
listing's summarize. A planted fault (a mode dropped, the tp per choice left out of the key)
must make each comparison fail, so that the comparisons can fail.
"""
from __future__ import annotations

import dataclasses

import pytest
from randinst import mixed_family_instance

from paraplan.solver import space as space_mod
from paraplan.solver.class_partitions import partition_count
from paraplan.solver.space import declared_blocks, declared_outers, declared_partials, summarize, summarize_partials

ON = ("megatron", "spatial_temporal")
SEEDS = (0, 2, 5, 11, 21)


def several_modes(seed: int):
    """A mixed-family instance with per-operator partitions, tp 1 or 4 per group, and two ZeRO
    stages and both sp flags: several (sp, ZeRO) modes per block, of several tp per choice."""
    inst = mixed_family_instance(seed)
    groups = (dataclasses.replace(inst.cluster.groups[0], gpus_per_node=4, nodes=1),) + inst.cluster.groups[1:]
    inst = dataclasses.replace(inst, cluster=dataclasses.replace(inst.cluster, groups=groups), scenarios=())
    return dataclasses.replace(inst, search=dataclasses.replace(
        inst.search, tensor_partitions=ON, tp=(1, 4), tp_per_group=True, zero=(0, 1),
        sequence_parallel=(False, True), mixed_families=False))


def fresh_tally(inst, b) -> dict:
    """_partition_tally read outer by outer: every spec's outer built and counted."""
    out: dict = {}
    for sp, zero, v, rc, ep, etp, emb, loss in b.specs():
        out[v, ep, emb, loss, rc] = out.get((v, ep, emb, loss, rc), 0) + partition_count(
            inst, b.outer(sp, zero, v, rc, ep, etp, emb, loss))
    return out


def per_mode_fresh(b) -> list:
    """Tally.per_mode read from specs(): of each mode, in order of first listing, its first spec
    and its counts."""
    got: dict = {}
    for spec in b.specs():
        sp, zero, v, rc, ep, _, emb, loss = spec
        first, counts = got.setdefault((sp, zero), (spec, {}))
        counts[v, ep, emb, loss, rc] = counts.get((v, ep, emb, loss, rc), 0) + 1
    return [(sp, zero, first, counts) for (sp, zero), (first, counts) in got.items()]


@pytest.mark.parametrize("seed", SEEDS)
def test_tally_per_mode_is_what_specs_lists(seed):
    blocks = declared_blocks(several_modes(seed))
    assert sum(len(b.tally.per_mode) > 1 for b in blocks) > 0  # several modes somewhere
    for b in blocks:
        assert [tuple(x) for x in b.tally.per_mode] == per_mode_fresh(b)


@pytest.mark.parametrize("seed", SEEDS)
def test_partition_tally_is_the_outers_one_by_one(seed):
    inst = several_modes(seed)
    memo: dict = {}
    blocks = declared_blocks(inst)
    for b in blocks:
        assert space_mod._partition_tally(inst, b, memo) == fresh_tally(inst, b)
    # planted fault: a block's last mode dropped from its tally is seen
    b = next(b for b in blocks if len(b.tally.per_mode) > 1)
    cut = dataclasses.replace(b, tally=dataclasses.replace(b.tally, per_mode=b.tally.per_mode[:-1]))
    assert space_mod._partition_tally(inst, cut, {}) != fresh_tally(inst, b)


@pytest.mark.parametrize("seed", SEEDS)
def test_shared_block_summaries_are_the_full_listings(seed):
    inst = several_modes(seed)
    full = summarize(inst, declared_outers(inst))
    assert summarize_partials(inst, declared_partials(inst)) == full


# seeds whose space holds blocks of one tally, degrees and micro-batch size but another tp per
# choice, of other layer-plan combinations (found by reading the summary without it, seeds 0-39)
KEYED = (11, 21)


@pytest.mark.parametrize("seed", KEYED)
def test_the_shared_summary_key_reads_the_tp_per_choice(seed, monkeypatch):
    """Planted fault: those blocks' summaries shared is seen."""
    inst = several_modes(seed)
    full = summarize(inst, declared_outers(inst))
    assert summarize_partials(inst, declared_partials(inst)) == full
    with monkeypatch.context() as m:
        m.setattr(space_mod, "_partitioned_block_key", lambda b: (
            tuple([(c.replicas, c.pp) for c in b.classes]), b.micro_batch, id(b.tally)))
        assert summarize_partials(inst, declared_partials(inst)) != full


def test_the_weights_key_reads_the_depths(monkeypatch):
    """_tally_weights, shared per (depths, tally): on MoE mixed clusters with idle GPUs (every
    replica count of a lone class a layout of its own) the summary is the full listing's, and
    a planted fault (the depths left out of its key) is seen."""
    from test_moelazy_partial_bound import SEEDS as MOE_SEEDS, _instance
    faulty = 0
    for seed in MOE_SEEDS:
        inst = _instance(seed, True)
        full = summarize(inst, declared_outers(inst))
        assert summarize_partials(inst, declared_partials(inst)) == full, seed
        with monkeypatch.context() as m:
            m.setattr(space_mod, "_weights_key", lambda degrees, b: ("weights", id(b.tally)))
            faulty += summarize_partials(inst, declared_partials(inst)) != full
    assert faulty > 0
