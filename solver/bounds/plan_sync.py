"""The least gradient sync an outer configuration pays under any of its layer-plan combinations,
read before its combinations are priced (issue 33: with per-operator partitions the keys of an
outer's layer-plan node and of its all-Megatron candidate, unpriced.floor_bounds_s with
layer_plans, read no sync; on Llama-3 70B over three GPU types on two sites their optimistic
bounds, once built, were 1-2 s above those keys for the stage-wise layouts whose 32-replica
rings run over a 200 Gbit/s NIC, and 20 s above for the replica layouts whose rings cross the
100 Gbit/s link between the sites, so thousands of outers were built only to be dropped).

A plan's iteration time (cost/class_coefficients.iteration_time_s) is its replicas' pipeline
plus its slowest stage's sync max_(k, s) (d_(k, s) + n_(k, s) g_(k, s)), with g the per-layer
sync (StageCoefficients.layer_sync_time_s) and d the stage's once-per-iteration sync
(stage_sync_time_s). Every bound the search keys a combination by adds such a sync term D to a
memory-free pipeline relaxation: batched.lower_bounds_s (the all-Megatron candidate, and
every combination priced) takes D = max_k max((sum_s d_s + L min_s g_s) / pp_k,
max_s (d_s + g_s)); class_partitions' bounds take max_k delta*_k, delta* = the least over the
splits that fit of max_s (d_s + n_s g_s), at least both (the largest term is at least the mean,
and every stage holds n_s >= 1 layer). batched.relaxed_s adds D to both of its terms, so such a
bound is its sync-free relaxation plus D, per scenario. So where (A, S) are floors of the pipeline
terms (unpriced.floor_bounds_s) and D is read at floors of g and d, the sum bounds every
combination:
    key = floor bound + factor * D    (aggregated over scenarios: the least D for a worst case,
                                       the weighted D for an expectation)
with the factor the quantile objective's (trust.objective_factor_of), which scales every time
of the combinations' coefficients.

**Floors of g and d over the layer plans** (cost/coefficients._layer_costs, priced as
coefficients.sync_floor_s prices them before placement: the stage's own ring, of its replicas
times cp ranks across the groups its layer's copies sit on, class_coefficients.group_site).
A layer plan differs from Megatron's layer in LayerTerms only (cost/partition.VECTOR), and g
and d are monotone in each: g grows with the parameters a GPU holds (replicated_params), with
the token-split group's all-reduce (grad_sync_s) and falls with the backward (the exposed part
max(0, g_sync - bwd)); d (the last bucket's exposure and ZeRO-3's reduce-scatter) grows with
all three. partition_plans.optimistic_terms gives two LayerTerms below every plan of the tp
group's table (every term least; the same with the backward at its largest), so the least of
g and d at Megatron's layer and at those two is at most every plan's (as
partition_plans.optimistic_coefficients argues for the whole build). The table is read with
its token splits (a superset of what each ZeRO stage allows) on the group's site without
rings, as the floors read it (unpriced.stage_floor_terms).

With the embedding / loss as layer slots the priced bound reads the slots' relaxation
(one_class.slot_relaxation: d'_s = d_s - o_s g_s), which falls with g, so no floor of g
bounds it: such outers, MoE models (whose layer is priced by cost/moe.py), zero-bubble schedules
and DualPipe get D = 0 (no raise).
"""

from __future__ import annotations

import numpy as np

from paraplan.cost.class_coefficients import class_outers, group_site
from paraplan.cost.coefficients import stage_outer, sync_floor_s
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.specs import PipelineSchedule
from paraplan.cost.trust import objective_factor_of
from paraplan.solver.bounds.unpriced_memory import sync_key
from paraplan.solver.partition_plans import enabled, optimistic_terms, plan_rows

# relative: the raised key is other float operations than the combinations' own bounds, so it
# is lowered by this much (far above rounding, far below any sync that decides a pruning)
MARGIN = 1e-9


def applies(inst, o) -> bool:
    """Whether the module's D reads outer `o` (else D = 0, module docstring)."""
    return (enabled(inst) and inst.model.moe is None and o.zero_bubble is None
            and inst.job.pipeline_schedule is not PipelineSchedule.DUALPIPE
            and not o.embedding_in_split and not o.loss_in_split)


def raised_keys(inst, outers: list, keys, idx: list[int], agg: str, weights, memo: dict) -> np.ndarray:
    """Each key of `keys` (at most every layer-plan combination's bound of its outer, all-Megatron
    included, and at most its floor bound) raised by its outer's least sync (module docstring)."""
    out = np.asarray(keys, float).copy()
    w = np.asarray(weights, float)
    for j, o in enumerate(outers):
        if not applies(inst, o) or not np.isfinite(out[j]):
            continue
        d = np.array([least_sync_s(inst, o, i, memo) for i in idx])
        add = d.min() if agg == "max" else float(d @ w)
        if add > 0:
            out[j] = (out[j] + objective_factor_of(inst, o) * add) * (1 - MARGIN)
    return out


def raised_partial_bounds(inst, partials: list, bounds, idx: list[int], agg: str, weights, memo: dict) -> np.ndarray:
    """The bounds before listing (layouts.partial_bounds_s) of partial layouts of another family
    than the stage-wise one (their classes' rings join across the groups, over the link between
    the sites where they span both), each raised by the least D of its configurations (the least
    over its blocks' specs) times their least quantile factor: each configuration's bound before
    pricing with layer plans is at least the layout's bound, and every layer-plan combination's
    value at least that bound plus its own factor times its D (module docstring), so the raised
    bound is at most every combination's value. 0 is added where some configuration is not read
    (applies: a block with an embedding / loss slot mode). Of v, D reads only whether it is 1
    (the reduction's overlap, unpriced_memory.sync_key) and the factor none (trust.
    objective_factor_of: the GPU types, ZeRO, cp and the deepest class), so each block's modes are
    read at the first v of each kind, as layouts._least_syncs reads them."""
    out = np.asarray(bounds, float).copy()
    w = np.asarray(weights, float)
    for n, part in enumerate(partials):
        if not np.isfinite(out[n]):
            continue
        least_d, least_f = np.inf, np.inf
        for blk in part.blocks():
            if blk.tally.first is None:
                continue
            if any(emb or loss for _, emb, loss in blk.tally.vslots):
                least_d = 0.0
                break
            _, _, _, _, ep, etp, _, _ = blk.tally.first
            for sp, zero, admitted in blk.modes_left:
                kinds = {v == 1: v for v in reversed(blk.vs) if v in admitted}  # the first v of each kind
                for v in kinds.values():
                    for rc in blk.recompute:
                        o = blk.outer(sp, zero, v, rc, ep, etp, False, False)
                        if not applies(inst, o):
                            least_d = 0.0
                            break
                        d = np.array([least_sync_s(inst, o, i, memo) for i in idx])
                        least_d = min(least_d, d.min() if agg == "max" else float(d @ w))
                        least_f = min(least_f, objective_factor_of(inst, o))
            if least_d == 0.0:
                break
        if 0 < least_d < np.inf:
            out[n] = (out[n] + least_f * least_d) * (1 - MARGIN)
    return out


def least_sync_s(inst, o, i: int, memo: dict) -> float:
    """D of outer `o` on scenario i at the floors of g and d over Megatron's layer and every
    layer plan of each stage's tp group: max over classes of max((sum_s d_s + L min_s g_s) / pp,
    max_s (d_s + g_s)); kept in `memo` (an outer's two nodes read it). Each class's floors are
    read by their keys first (_floors_key: its stage count and v from `o`), its Outer built
    only where one is missing (class_outers was a fifth of these reads on 32 A100 + 32 H100
    with partitions and the three options), and its term kept by its stage groups and their
    floors (_class_sync)."""
    key = ("outer sync", i, o)
    got = memo.get(key)
    if got is not None:
        return got
    L, net = inst.model.layers, NetEfficiency()
    best, ring, cos = 0.0, ring_shape(o), None
    for k, c in enumerate(o.classes):
        per = {}
        for g in sorted(set(c.stage_groups)):
            fkey = _floors_key(inst, o, i, g, c.pp, o.virtual_stages, ring)
            hit = memo.get(fkey)
            if hit is None:
                cos = cos or class_outers(inst.job, o)
                hit = layer_sync_floors(inst, o, cos[k], i, g, memo, net, ring)
            per[g] = hit
        best = max(best, _class_sync(c.stage_groups, per, L, memo))
    memo[key] = best
    return best


def _class_sync(groups: tuple, per: dict, L: int, memo: dict) -> float:
    """max((sum_s d_s + L min_s g_s) / pp, max_s (d_s + g_s)) of a class on `groups` (stage
    order) whose stages on group g have floors per[g] = (g, d); kept in `memo` by those."""
    key = ("class sync", L, groups, tuple(sorted(per.items())))
    got = memo.get(key)
    if got is None:
        gs = np.array([per[g][0] for g in groups])
        ds = np.array([per[g][1] for g in groups])
        got = memo[key] = max((ds.sum() + L * gs.min()) / len(groups), float((ds + gs).max()))
    return got


def ring_shape(o) -> tuple | None:
    """What the gradient ring of several classes reads of their shapes (class_coefficients.
    _ring_link, without experts: applies): per group, the ring's members on it, the GPUs their
    stages span and how many classes share it; None for a lone class (its ring lies in its
    group: unpriced_memory.sync_key reads it whole). Outers whose classes differ in their
    order of groups, or split the same GPUs per group otherwise, share it: keyed by it, the
    memo of layer_sync_floors held 604 entries on 32 A100 + 32 H100 with partitions and the
    three layout options, against 12,268 keyed by the classes."""
    if len(o.classes) == 1:
        return None
    shape = {}
    for c in o.classes:
        for g in set(c.stage_groups):
            t = o.tp_of(g)
            members, span, sharing = shape.get(g, (0, 0, 0))
            shape[g] = (members + c.replicas * o.cp, span + c.replicas * o.cp * t * c.stage_groups.count(g),
                        sharing + 1)
    return tuple(sorted(shape.items()))


def layer_sync_floors(inst, o, co, i: int, g: int, memo: dict, net, ring: tuple | None = None) -> tuple[float, float]:
    """(g, d) floors of the stages of class outer `co` (of `o`) on group g, scenario i: the least
    of coefficients.sync_floor_s at Megatron's layer and at the tp group's optimistic terms,
    kept in `memo` by what they read (unpriced_memory.sync_key: the layer's fields, ZeRO, of
    the pipeline whether ZeRO-3 gathers per step and whether the reduction overlaps, the ring's
    ranks and, with several classes, in place of their shapes (sync_key's last field) the
    ring's, `ring` = ring_shape(o)), under a key of this module's."""
    key = _floors_key(inst, o, i, g, co.pp, co.virtual_stages, ring)
    got = memo.get(key)
    if got is not None:
        return got
    cluster = inst.scenarios[i].cluster
    site = group_site(cluster, o, g)
    so = stage_outer(co, site)
    dp_n = o.replicas * o.cp
    g_s, d_s = sync_floor_s(inst, so, site, dp_n, net)
    from paraplan.cost import partition as P  # read with partitions on only (start-up, issue 33)
    if P.spatial_temporal_allowed(so):
        for lt in _optimistic(inst, o, co, i, g, memo, net):
            gx, dx = sync_floor_s(inst, so, site, dp_n, net, layer_fn=lambda *_, lt=lt: lt)
            g_s, d_s = min(g_s, gx), min(d_s, dx)
    got = memo[key] = (g_s, d_s)
    return got


def _floors_key(inst, o, i: int, g: int, pp: int, v: int, ring: tuple | None) -> tuple:
    """layer_sync_floors' key of the stages on group g of a class of `o` at `pp` stages, v."""
    key = sync_key(inst, o, i, g, o.sequence_parallel, o.recompute, o.zero, pp, v)
    return ("plan sync", key if ring is None else key[:-1] + (ring,))


def _optimistic(inst, o, co, i: int, g: int, memo: dict, net) -> tuple:
    """partition_plans.optimistic_terms of every plan (token splits included) of the tp group of
    `co`'s stages on group g, scenario i, kept in `memo` by what the table reads (the group's
    site without rings: its tp and cp; the layer's fields)."""
    cluster = inst.scenarios[i].cluster
    bare = group_site(cluster, o, g, rings=False)
    lo = stage_outer(co, bare)
    key = ("plan sync terms", i, g, lo.tp, lo.cp, lo.micro_batch, lo.sequence_parallel, lo.recompute)
    got = memo.get(key)
    if got is None:
        from paraplan.cost import partition as P  # read with partitions on only (start-up, issue 33)
        table = P.table_for(inst.group_alone(g, cluster), lo, bare, net)
        got = memo[key] = optimistic_terms(table, plan_rows(table, True))
    return got
