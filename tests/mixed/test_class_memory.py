"""The memory proof per replica class before a family's layouts are set up (issue 33; solver/
bounds/class_memory.py, read by solver/bounds/stage_families.FamilyBounds).

On random clusters of three or four groups of three toy GPU types (so a type repeats), small
enough in memory that the proof bites:
- every class-layout option of a replica family and every tp choice of a stage family that the
  proof refuses holds no configuration that fits: each configuration of its partial layout,
  built by cost (search.problems_for: build's no_split_fits on each class), fits no split. The
  expected answer is derived by building every configuration, not from the proof's own terms;
- the search with every family deferred (so the proof decides what is set up) returns
  exhaustive search's optimum, and some option or choice is refused (the proof bites);
- with per-operator partitions (the first group of 4 GPUs at tp 4, where layer plans beyond
  Megatron's exist), no layer-plan combination of a refused configuration fits either: each
  built by cost with its plans."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from randinst import Space, toy_model

from oracles.bounds import combos
from oracles.search import problem_for
from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.specs import Cluster, GpuSpec, Instance, JobSpec, Link, NodeGroup
from paraplan.solver import search as search_mod
from paraplan.solver.bounds.one_class import memory_infeasible
from paraplan.solver.bounds.stage_families import ReplicaFamily
from paraplan.solver.class_partitions import all_partitions
from paraplan.solver.class_layouts import replica_options
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import FAMILIES, placer, problems_for, search

SEEDS = (1, 2, 3, 4, 6, 7)  # (0 and 5: more candidates than exhaustive search lists)
MAX_CANDIDATES = 300_000


def three_types_instance(seed: int) -> Instance:
    """Three or four groups of one or two nodes of 2 toy GPUs, of three GPU types (speed drawn,
    memory 0.75-3 GiB, so a shallow class of a 6-8 layer model does not fit the smallest), the
    fourth group a repeat of a type; tp 1 or 2 per group, micro-batch 1 or 2, ZeRO 0 or 1, no full recompute (exhaustive
    search's space stays small)."""
    rng = random.Random(1000 + seed)
    model = toy_model(f"mem{seed}", rng.choice([6, 8]))
    kinds = [GpuSpec(name=f"toy{k}", peak_flops_per_s=rng.choice([50e12, 150e12, 300e12]),
                     hbm_bytes=gib * 2**30, hbm_bw_bytes_per_s=1e12)
             for k, gib in enumerate((0.75, rng.choice([1.0, 1.5]), 3.0))]
    groups = []
    G = rng.choice([3, 4])
    for g in range(G):
        groups.append(NodeGroup(name=f"g{g}", site="s",
                                gpu=kinds[g] if g < 3 else rng.choice(kinds), nodes=rng.choice([1, 2]), gpus_per_node=2,
                                intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=25e9, latency_s=1e-5)))
    between = tuple(tuple(groups[a].inter_node for b in range(G)) for a in range(G))
    return Instance(name=f"mem{seed}", model=model, cluster=Cluster(groups=tuple(groups), between=between),
                    job=JobSpec(global_batch=rng.choice([8, 12])),
                    search=Space(micro_batch=(1, 2), zero=(0, 1), virtual_stages=(1,), cp=(1,), tp=(1, 2),
                                 full_recompute=False))


@pytest.fixture
def deferred(monkeypatch):
    monkeypatch.setattr(search_mod, "DEFER_TP_CHOICES", 0)


def _refused_partials(inst):
    """The partial layouts of every option or tp choice the proof refuses, each set up."""
    lazy = search_mod._Partials.of(inst, "nominal", FAMILIES, None)
    fb = lazy.fb
    out = []
    for f, fam in enumerate(lazy.families):
        if isinstance(fam, ReplicaFamily):
            groups = inst.cluster.groups
            ranks = (fam.cp * len(fam.used), fam.cp * sum(groups[g].num_gpus // (fam.tp * fam.cp) for g in fam.used))
            options = replica_options(inst, dict.fromkeys(fam.used, fam.tp), fam.used, fam.cp)
            layouts = range(int(np.prod([len(o) for o in options])))
            bad = [x for x in layouts if len(fb.replica_at(fam, x)) > 1 and any(
                fb.memory.replica_class_refused(c.stage_groups[0], fam.tp, fam.cp, c.pp, ranks)
                for c in fb.replica_at(fam, x))]
            listed, _ = fb.replica_combos(fam)  # the layouts the family bounds: none refused
            assert not set(listed.tolist()) & set(bad)
        else:
            grid = np.indices([len(o) for o in fam.tps]).reshape(len(fam.used), -1)
            stages = sum(inst.cluster.groups[g].num_gpus // (np.array([t for _, t in fam.tps[k]])[grid[k]]
                                                             * fam.cp * fam.dp) for k, g in enumerate(fam.used))
            refused = fb._stage_refused(fam, grid, stages)
            index, _ = combos(fb, fam)
            bad = index[refused].tolist()
        start = len(lazy.partials)
        lazy.set_up([search_mod._Choice(f, x, (0.0, -1, -1)) for x in bad])
        out += lazy.partials[start:]
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_what_the_class_memory_proof_refuses_fits_no_split_once_built(seed, deferred):
    inst = three_types_instance(seed)
    refused = _refused_partials(inst)
    outers = [o for part in refused for blk in part.blocks() for o in blk.outers()]
    assert outers  # the proof bites on every seed's cluster (its smallest GPU holds no shallow class)
    fitting = [o for o, p in zip(outers, problems_for(inst, outers, "nominal")) if p is not None]
    assert not fitting, fitting[:3]


# exhaustive search of each seed's space: about 3 s on two cores, 5-20 s for the slow ones
@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow) if s in (1, 2, 3) else s for s in SEEDS])
def test_the_search_with_the_proof_returns_the_exhaustive_optimum(seed, deferred):
    inst = three_types_instance(seed)
    ex = exhaustive(inst, max_candidates=MAX_CANDIDATES)
    res = search(inst, "cpsat", time_limit_s=120)
    if ex.objective_s is None:
        assert res.objective_s is None
        return
    assert abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s


def with_layer_plans(inst: Instance) -> Instance:
    """`inst` with per-operator partitions on and its first group of 4 GPUs (tp 1 or 4): the
    layer plans beyond Megatron's come only at tp 4 (partition_names.spatial_temporal_allowed),
    on one group, so every combination of a class's plans is few enough to build each."""
    groups = (dataclasses.replace(inst.cluster.groups[0], gpus_per_node=4, nodes=1),) + inst.cluster.groups[1:]
    return dataclasses.replace(inst, name=f"{inst.name}-plans",
                               cluster=dataclasses.replace(inst.cluster, groups=groups),
                               search=dataclasses.replace(inst.search, tp=(1, 4),
                                                          tensor_partitions=("megatron", "spatial_temporal")))


def fitting_combinations(inst, outers) -> list:
    """(outer, layer-plan combination) of `outers` of which every class fits some split: each
    combination of class_partitions.all_partitions (every plan of the table, no dominance, all-
    Megatron's included) built by cost with its plans (search.problem_for) and read by build's
    own no_split_fits (one_class.memory_infeasible); memory reads no network, so the first
    scenario's coefficients decide."""
    out = []
    for o in outers:
        for parts in all_partitions(inst, o, placer(inst, o), class_outers(inst.job, o)):
            p = problem_for(inst, o, "nominal", partitions=parts)
            if not any(memory_infeasible(c) for c in p.coeffs[0]):
                out.append((o, parts))
    return out


# seed 1: 124 configurations refused, 6,260 layer-plan combinations (6,136 with a plan beyond
# Megatron's), 3 s (measured); the others' up to 37,130 combinations take too long for the suite
@pytest.mark.parametrize("seed", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_with_layer_plans_what_the_proof_refuses_fits_no_layer_plan_combination(seed, deferred):
    # the proof with per-operator partitions (class_memory.py's docstring: it reads no stash,
    # every term it reads is at most each plan's; the slot modes are never refused) against
    # every layer-plan combination of every configuration it refuses, each built by cost. If the
    # proof read memory above what the plans need, this fails: with every term it reads raised
    # by a quarter (the capacity x 0.8) it failed on seed 1 (checked; its state alone x 1.5
    # refused nothing more that fits)
    inst = with_layer_plans(three_types_instance(seed))
    refused = _refused_partials(inst)
    outers = [o for part in refused for blk in part.blocks() for o in blk.outers()]
    assert outers
    assert not fitting_combinations(inst, outers)
