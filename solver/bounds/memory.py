"""Configurations that no plan fits in memory, proved before they are priced.

solver/search.py prices configurations in the order of the bound read before pricing
(unpriced.py) and drops, after pricing, those whose memory fits no layer split
(cost/coefficients.no_split_fits). Most configurations priced near the optimum were dropped
so: 1,055 of the 1,528 priced for GPT-3 175B on 1,024 A100 and 4,722 of 7,672 for Llama-3 70B
on three GPU types of 32 GPUs each (issue 33), each after a full build. This module proves most
of them infeasible from the space's memory lower bound alone (solver/space.py's module
docstring, micro_batch_lower_bound_parts), read with each configuration's own micro-batch size,
sequence-parallel flag and ZeRO stage:

    LB_last(c, g)    = runtime + f workspace + f logits + state + f ckpt
    LB_fullest(c, g) = runtime + f workspace + ceil(L / pp_c) (state + f ckpt)

for class c at group g's tp, ZeRO sharding over every replica of the plan (as build shards).
Why it proves infeasibility: every stage holds >= 1 layer and some stage holds >= ceil(L/pp)
layers; each layer costs at least its state plus its input checkpoint (full recomputation is
the least a layer can keep) times its in-flight micro-batches (>= 1 on every stage and
schedule); the runtime allowance and backward workspace are on every stage, the logits on the
last; every other term is >= 0 (the space's docstring gives each step). So if the class's last
stage's bound exceeds its group's capacity, or the fullest stage's exceeds the capacity of every
group the class runs on (the fullest stage may sit on any of them), no split of the class fits,
and with it no plan of the configuration: build's no_split_fits says the same after pricing.
A relative margin (MARGIN) keeps a peak that build's own float sums put exactly at the
capacity (which fits) from being refused by this sum's rounding.

Not used for DualPipe (its memory is cost/dualpipe.py's, another schedule) nor with per-operator
partitions (their layer plans hold other activations: the search prices those).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from paraplan.solver.space import micro_batch_lower_bound_parts

MARGIN = 1e-9  # relative: far above float rounding of a sum of tens of terms, far below any real gap


def proved_infeasible(inst, outers: list) -> np.ndarray:
    """Per configuration of `outers` (ClassOuter on the group-format instance `inst`), whether
    the module's bound proves that no plan of it fits memory."""
    groups = inst.cluster.groups
    capacity = [g.cluster.gpu.hbm_bytes - inst.search.memory_reserve_bytes for g in groups]

    @lru_cache(maxsize=None)
    def parts(tp: int, cp: int, pp: int, dp: int, b: int, sp: bool, zero: int, ranks: int) -> tuple[float, float]:
        last, fullest = micro_batch_lower_bound_parts(inst, tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=b, sp=sp,
                                                      zero=zero, zero_ranks=ranks)
        return last * (1 - MARGIN), fullest * (1 - MARGIN)

    out = np.zeros(len(outers), bool)
    for j, o in enumerate(outers):
        ranks = sum(c.replicas for c in o.classes) * o.cp
        for c in o.classes:
            def lb(g: int, c=c) -> tuple[float, float]:
                return parts(o.tp_of(g), o.cp, c.pp, c.replicas, o.micro_batch, o.sequence_parallel, o.zero, ranks)
            last = c.stage_groups[-1]
            if lb(last)[0] > capacity[last] or all(lb(g)[1] > capacity[g] for g in set(c.stage_groups)):
                out[j] = True
                break
    return out
