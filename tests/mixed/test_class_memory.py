"""The memory proof per replica class before a family's layouts are set up (issue 33; solver/
bounds/class_memory.py, read by solver/bounds/stage_families.FamilyBounds).

On random clusters of three or four groups of three toy GPU types (so a type repeats), small
enough in memory that the proof bites:
- every class-layout option of a replica family and every tp choice of a stage family that the
  proof refuses holds no configuration that fits: each configuration of its partial layout,
  built by cost (search.problems_for: build's no_split_fits on each class), fits no split. The
  expected answer is derived by building every configuration, not from the proof's own terms;
- the search with every family deferred (so the proof decides what is set up) returns
  exhaustive search's optimum, and some option or choice is refused (the proof bites)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from randinst import Space

from paraplan.cost.specs import Cluster, NodeGroup
from paraplan.cost.specs import NodeGroup, GpuSpec, Instance, JobSpec, Link, Mlp, ModelSpec
from paraplan.solver import search as search_mod
from paraplan.solver.bounds.stage_families import ReplicaFamily
from paraplan.solver.class_layouts import replica_options
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import FAMILIES, problems_for, search

SEEDS = (1, 2, 3, 4, 6, 7)  # (0 and 5: more candidates than exhaustive search lists)
MAX_CANDIDATES = 300_000


def three_types_instance(seed: int) -> Instance:
    """Three or four groups of one or two nodes of 2 toy GPUs, of three GPU types (speed drawn,
    memory 0.75-3 GiB, so a shallow class of a 6-8 layer model does not fit the smallest), the
    fourth group a repeat of a type; tp 1 or 2 per group, micro-batch 1 or 2, ZeRO 0 or 1, no full recompute (exhaustive
    search's space stays small)."""
    rng = random.Random(1000 + seed)
    heads = 8
    hidden = heads * 64
    model = ModelSpec(name=f"mem{seed}", layers=rng.choice([6, 8]), hidden=hidden, heads=heads,
                      kv_heads=heads, ffn=4 * hidden, vocab=8000, seq_len=512, mlp=Mlp.GELU)
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
            index, _ = fb.combos(fam)
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
