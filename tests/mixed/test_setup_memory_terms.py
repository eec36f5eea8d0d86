"""The memory proof before pricing keeps a stage's terms apart from its in-flight count
(solver/bounds/memory.proved_infeasible's stage_terms, issue 33's set-up: each stage of a
pipeline has its own count, the terms are shared): its verdicts are those of reading every
stage's terms afresh, the proof as the module docstring states it (LB_s(n) per stage; refused
where some stage holds no layer or they hold fewer than L), on mixed clusters and one-group
instances."""

from __future__ import annotations

import numpy as np
import pytest
from randinst import group_tp_instance, random_cluster_instance, random_instance

from paraplan.cost import memory
from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.coefficients import in_flight_micro_batches
from paraplan.solver.bounds.memory import layers_within, proved_infeasible
from paraplan.solver.space import declared_outers, micro_batch_lower_bound_terms


def _refused_stage_by_stage(inst, o) -> bool:
    """The module docstring's proof, each stage through layers_within (ZeRO sharding over every
    replica of the plan, the in-flight count build prices each stage with); None where the
    configuration is one the per-stage reading does not take (slots, ZBV)."""
    if o.embedding_in_split or o.loss_in_split or o.zero_bubble is not None:
        return None
    ranks = sum(c.replicas for c in o.classes) * o.cp
    L = inst.model.layers
    for c, co in zip(o.classes, class_outers(inst.job, o)):
        flight = in_flight_micro_batches(c.pp, co.num_micro_batches, o.virtual_stages).tolist()
        most = []
        for s, g in enumerate(c.stage_groups):
            tp, first, last = o.tp_of(g), s == 0, s == c.pp - 1
            every, logits, state, ckpt = micro_batch_lower_bound_terms(
                inst, tp=tp, cp=o.cp, pp=c.pp, dp=c.replicas, micro_batch=o.micro_batch, sp=o.sequence_parallel,
                zero=o.zero, zero_ranks=ranks)
            emb = (memory.embedding_state_bytes(inst.model, tp, o.zero, ranks, first, last,
                                                memory.state_layout(inst.job)) if first or last else 0.0)
            cap = inst.cluster.groups[g].gpu.hbm_bytes - inst.search.memory_reserve_bytes
            most.append(layers_within(every + emb + (logits if last else 0.0), state + flight[s] * ckpt, cap, L))
        if min(most) < 1 or sum(most) < L:
            return True
    return False


def _instances():
    for seed in range(3):
        yield f"random {seed}", random_cluster_instance(seed)
    yield "group tp 19", group_tp_instance(19)
    for seed in (1, 5):
        yield f"one group {seed}", random_instance(seed, variant=True)


@pytest.mark.parametrize("name,inst", list(_instances()), ids=lambda x: x if isinstance(x, str) else "")
def test_verdicts_are_those_stage_by_stage(name, inst):
    outers = declared_outers(inst)
    got = proved_infeasible(inst, outers)
    read = 0
    for o, r in zip(outers, got.tolist()):
        want = _refused_stage_by_stage(inst, o)
        if want is not None:
            assert r == want, (name, o)
            read += 1
    assert read  # not vacuous
