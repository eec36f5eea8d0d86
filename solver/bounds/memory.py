"""Configurations that no plan fits in memory, proved before they are priced.

solver/search.py prices configurations in the order of the bound read before pricing
(unpriced.py) and drops, after pricing, those whose memory fits no layer split
(cost/coefficients.no_split_fits). Most configurations priced near the optimum were dropped
so: 1,055 of the 1,528 priced for GPT-3 175B on 1,024 A100 and 4,722 of 7,672 for Llama-3 70B
on three GPU types of 32 GPUs each (issue 33), each after a full build. This module proves most
of them infeasible from the space's memory lower bound alone (solver/space.py's module
docstring, micro_batch_lower_bound_terms), read with each configuration's own micro-batch size,
sequence-parallel flag and ZeRO stage: on stage s of class c, on group g_s at its tp, ZeRO
sharding over every replica of the plan (as build shards), n layers take at least

    LB_s(n) = runtime + f workspace + [s first or last] embedding state + [s last] f logits
              + n (state + f_s f ckpt)

Why: each layer costs at least its state plus its input checkpoint (full recomputation is the
least a layer can keep) times its in-flight micro-batches f_s: build's own count
(cost/coefficients.in_flight_micro_batches at the count cost/class_coefficients.class_outers
prices the class with; the expert all-to-all overlap's schedule holds at least as many);
the runtime allowance and backward workspace are on every stage, the logits on the last, the
input embedding's and output layer's weights and optimizer state on the first and the last
(cost/memory.embedding_state_bytes, build's own term); every
other term is >= 0 (the space's docstring gives each step). So stage s holds at most nmax_s
layers, the most with LB_s(n) within its group's capacity, and every stage holds >= 1 layer,
all of them L: if some nmax_s < 1 or sum_s nmax_s < L, no split of the class fits, and with it
no plan of the configuration: build's no_split_fits says the same after pricing. (Until issue
33 the test was the last stage's LB with one layer and the fullest stage's with ceil(L / pp) on
every group of the class, which this sum implies; on a pipeline through groups of unlike memory
the sum proves more. With the embedding / loss counted as layer slots, cost/pipeline_split.py,
an end stage's short chunk can hold less than this LB: those configurations keep that test.) A
relative margin (MARGIN) keeps a peak that build's own float sums put
exactly at the capacity (which fits) from being refused by this sum's rounding.

ZBVZeroBubble (cost/zero_bubble.py) holds pp micro-batches on every stage and the output layer
and logits on the first: LB_s reads them there. Not used for DualPipe (its memory is
cost/dualpipe.py's, another schedule) nor with per-operator partitions (their layer plans hold
other activations: the search prices those).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from paraplan.cost import memory
from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.coefficients import in_flight_micro_batches
from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost.specs import ZeroBubble
from paraplan.cost.zero_bubble import v_in_flight
from paraplan.solver.space import micro_batch_lower_bound_terms

MARGIN = 1e-9  # relative: far above float rounding of a sum of tens of terms, far below any real gap
# per instance, {("in flight", pp, m, v): in-flight micro-batches per stage; ("embedding",
# tp, zero, ranks, first, last): an end stage's embedding state}, kept across calls: the search
# calls proved_infeasible once per chunk it prices, and the chunks repeat a few distinct ones
# (GPT-3 175B on 1,024 A100: 1,356 configurations over 38 chunks)
_KNOWN = IdentityCache(64)


def layers_within(base_bytes: float, per_layer_bytes: float, capacity_bytes: float, most: int) -> int:
    """The most layers n <= `most` whose LB = base + n per_layer fits `capacity_bytes` (within
    MARGIN), 0 where none does."""
    # n fits where (base + n per_layer) (1 - MARGIN) <= capacity (written out, not a closure:
    # the proof reads a few thousand stages per search)
    keep = 1 - MARGIN
    if per_layer_bytes <= 0:
        return most if base_bytes * keep <= capacity_bytes else 0
    n = int(min(max((capacity_bytes / keep - base_bytes) // per_layer_bytes, 0), most))  # a guess
    while n < most and (base_bytes + (n + 1) * per_layer_bytes) * keep <= capacity_bytes:
        n += 1
    while n > 0 and not (base_bytes + n * per_layer_bytes) * keep <= capacity_bytes:
        n -= 1
    return n


def _counts(job, o) -> list[int]:
    """Each class's micro-batch count as cost/class_coefficients.class_outers prices it, a lone
    class's read without building its Outer (the count the batch gives it)."""
    if len(o.classes) == 1:
        return [job.global_batch // o.micro_batch // o.classes[0].replicas]
    return [co.num_micro_batches for co in class_outers(job, o)]


def proved_infeasible(inst, outers: list) -> np.ndarray:
    """Per configuration of `outers` (ClassOuter on the group-format instance `inst`), whether
    the module's bound proves that no plan of it fits memory."""
    groups = inst.cluster.groups
    capacity = [g.gpu.hbm_bytes - inst.search.memory_reserve_bytes for g in groups]
    L = inst.model.layers
    layout = memory.state_layout(inst.job)
    known = _KNOWN.read(id(inst), inst, dict)

    def stage_most(o, c, ranks: int) -> Callable[[int, bool, bool, float], int]:
        """nmax of the module docstring for a stage of class c on group g, first or last, with
        `in_flight` micro-batches: the class's terms read once per group it uses (each stage's
        own sums, no memo: a stage's in-flight count and ends make most of them distinct)."""
        terms = {g: micro_batch_lower_bound_terms(inst, tp=o.tp_of(g), cp=o.cp, pp=c.pp, dp=c.replicas,
                                                  micro_batch=o.micro_batch, sp=o.sequence_parallel,
                                                  zero=o.zero, zero_ranks=ranks)
                 for g in set(c.stage_groups)}

        def most(g: int, first: bool, last: bool, in_flight: float) -> int:
            every, logits, state, ckpt = terms[g]
            base = every
            if first or last:  # as build: a one-stage pipeline's entry holds the output layer too
                ek = ("embedding", o.tp_of(g), o.zero, ranks, first, last)
                emb = known.get(ek)
                if emb is None:
                    emb = known[ek] = memory.embedding_state_bytes(inst.model, ek[1], o.zero, ranks, first, last,
                                                                   layout)
                base += emb
            if last:
                base += logits
            return layers_within(base, state + in_flight * ckpt, capacity[g], L)
        return most

    def refused(o, c, m: int, ranks: int) -> bool:
        held = stage_most(o, c, ranks)
        if o.embedding_in_split or o.loss_in_split:
            # an end stage's short chunk can hold up to a layer's stashed activations less
            # (cost/pipeline_split.slot_relief_bytes): the test before issue 33, one micro-batch
            # in flight, no embedding state, the last stage's one layer and the fullest stage's
            # ceil(L / pp) on some group of the class
            return (held(c.stage_groups[-1], False, True, 1.0) < 1
                    or all(held(g, False, False, 1.0) < -(-L // c.pp) for g in set(c.stage_groups)))
        if o.zero_bubble is ZeroBubble.V:
            # ZBVZeroBubble's V: pp micro-batches on every stage, the output layer and logits on
            # the first stage (cost/zero_bubble.py), whose one embedding state LB counts
            f = float(v_in_flight(c.pp, m)[0])
            most = [held(g, s == 0, s == 0, f) for s, g in enumerate(c.stage_groups)]
            return min(most) < 1 or sum(most) < L
        fk = ("in flight", c.pp, m, o.virtual_stages)
        flight = known.get(fk)
        if flight is None:  # a few distinct per search (a numpy call each: kept per instance)
            flight = known[fk] = in_flight_micro_batches(c.pp, m, o.virtual_stages).tolist()
        total, last = 0, c.pp - 1
        for s, g in enumerate(c.stage_groups):
            n = held(g, s == 0, s == last, flight[s])
            if n < 1:
                return True
            total += n
        return total < L

    # outers of one shape differ mostly in what this bound does not read (recompute mode): one
    # verdict per shape (declared_outers gives those outers one tuple object) and what it reads
    verdicts: dict[tuple, bool] = {}  # `outers` holds the tuples alive through the call
    out = np.zeros(len(outers), bool)
    for j, o in enumerate(outers):
        key = (id(o.classes), o.tp, o.group_tp, o.cp, o.micro_batch, o.sequence_parallel, o.zero,
               o.virtual_stages, o.ep, o.embedding_in_split, o.loss_in_split, o.zero_bubble)
        hit = verdicts.get(key)
        if hit is None:
            ranks = sum(c.replicas for c in o.classes) * o.cp
            hit = verdicts[key] = any(refused(o, c, m, ranks) for c, m in zip(o.classes, _counts(inst.job, o)))
        out[j] = hit
    return out
