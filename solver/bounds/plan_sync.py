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

import math

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
        add = _least_sync_up_to(inst, o, idx, agg, w, memo)
        if add > 0:
            out[j] = (out[j] + factor_of(inst, o, memo) * add) * (1 - MARGIN)
    return out


def factor_of(inst, o, memo: dict) -> float:
    """trust.objective_factor_of(inst, o), kept in `memo` by what it reads of `o`: the groups
    its stages use (their GPU types and switch tiers), ZeRO, min(cp, 2) and the deepest class's
    min(pp, 2) (32 A100 + 32 H100 with partitions and the three layout options asked it for
    16,005 outers, a few dozen keys)."""
    groups = [c.stage_groups for c in o.classes]  # (a class's pp is its stage groups' count)
    key = ("plan sync factor", frozenset().union(*groups), o.zero, min(o.cp, 2), min(max(map(len, groups)), 2))
    got = memo.get(key)
    if got is None:
        got = memo[key] = objective_factor_of(inst, o)
    return got


def raised_partial_bounds(inst, partials: list, bounds, idx: list[int], agg: str, weights, memo: dict,
                          ceiling_s: float = math.inf) -> np.ndarray:
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
    read at the first v of each kind, as layouts._least_syncs reads them.

    `ceiling_s` (the search's bar, as layouts.partial_bounds_s takes it): the caller only keeps
    or drops each layout by its bound, so a layout is read only as far as that decides
    (_raised_bound): its unraised bound where the least D read so far keeps it below the
    ceiling, or a bound past the ceiling once every configuration's D is read up to what passes
    it. Without a ceiling every layout is read in full (the least D, each configuration's classes
    read only while they can lower it: the same floats)."""
    out = np.asarray(bounds, float).copy()
    w = np.asarray(weights, float)
    for n, part in enumerate(partials):
        if np.isfinite(out[n]):
            read = _partial_outers(inst, part, memo)
            if read:
                out[n] = _raised_bound(inst, read, float(out[n]), idx, agg, w, memo, ceiling_s)
    return out


def _partial_outers(inst, part, memo: dict) -> list[tuple] | None:
    """(outer, quantile factor) of each configuration kind of partial layout `part` that D reads
    (raised_partial_bounds: per block, mode and recompute mode, the first v of each kind), or
    None where some configuration is not read (applies)."""
    got = []
    for blk in part.blocks():
        if blk.tally.first is None:
            continue
        if any(emb or loss for _, emb, loss in blk.tally.vslots):
            return None
        _, _, _, _, ep, etp, _, _ = blk.tally.first
        for sp, zero, admitted in blk.modes_left:
            kinds = {v == 1: v for v in reversed(blk.vs) if v in admitted}  # the first v of each kind
            for v in kinds.values():
                for rc in blk.recompute:
                    o = blk.outer(sp, zero, v, rc, ep, etp, False, False)
                    if not applies(inst, o):
                        return None
                    got.append((o, factor_of(inst, o, memo)))
    return got


# relative: a layout's bound read only as far as the ceiling decides (_raised_bound) ends this
# far below the ceiling (kept) or above it (dropped), far beyond MARGIN and the search's REL_TOL
# and PARTIAL_MARGIN (1e-9 each), so that the search keeps or drops it as on the full reading
CEILING_SLACK = 1e-6


def _raised_bound(inst, read: list[tuple], bound_s: float, idx: list[int], agg: str, w: np.ndarray, memo: dict,
                  ceiling_s: float) -> float:
    """raised_partial_bounds' bound of one layout (its bound `bound_s`, its configurations'
    (outer, factor) `read`). Each configuration's D is read only up to a cap (_least_sync_up_to:
    exact below it, at least the cap and at most D above it): the least D so far (a D above it
    lowers nothing) and, with a ceiling, `need`, the D past which the raised bound lies
    CEILING_SLACK above the ceiling. So the least D is exact where it lies below `need`, and else
    some number in [need, least D]: the bound then lies past the ceiling, at most the full
    reading's. Once the least D so far keeps the raised bound CEILING_SLACK below the ceiling
    the layout is kept whatever the rest reads (the least D only falls): its bound comes back
    unraised, at most the full reading's too."""
    least_f = min(f for _, f in read)
    need, keep = math.inf, -math.inf
    if math.isfinite(ceiling_s):
        need = (ceiling_s * (1 + CEILING_SLACK) / (1 - MARGIN) - bound_s) / least_f
        keep = (ceiling_s * (1 - CEILING_SLACK) / (1 - MARGIN) - bound_s) / least_f
    least_d = math.inf
    for o, _ in read:
        least_d = min(least_d, _least_sync_up_to(inst, o, idx, agg, w, memo, min(least_d, need)))
        if least_d <= keep:
            return bound_s
    if 0 < least_d < math.inf:
        return (bound_s + least_f * least_d) * (1 - MARGIN)
    return bound_s


def _least_sync_up_to(inst, o, idx: list[int], agg: str, w: np.ndarray, memo: dict, cap: float = math.inf) -> float:
    """D of outer `o` at the floors of g and d over Megatron's layer and every layer plan of each
    stage's tp group, per scenario of `idx` max over classes of max((sum_s d_s + L min_s g_s) /
    pp, max_s (d_s + g_s)), aggregated (_aggregate), where that is below `cap`; else some number
    in [cap, it]. Its classes are read one at a time, every scenario's D the largest class term
    read so far (at most its D), and the reading stops once their aggregate, which only grows,
    reaches `cap`. A scenario's D read in full is kept in `memo` by what it reads of `o`
    (_sync_key: an outer's two nodes, and outers that differ in v, read it), so the same floats
    either way. Each class's floors are read by their keys first (_class_term)."""
    keys = [_sync_key(o, i) for i in idx]
    got = [memo.get(key) for key in keys]
    if None in got:
        ring, cos, net = ring_shape(o, memo), [], NetEfficiency()
        shared = _outer_fields(o, ring)
        open_ = [si for si, x in enumerate(got) if x is None]
        for si in open_:
            got[si] = 0.0
        for k in range(len(o.classes)):
            if k and _aggregate(got, agg, w) >= cap:
                return _aggregate(got, agg, w)
            for si in open_:
                got[si] = max(got[si], _class_term_of(inst, o, k, idx[si], memo, ring, cos, net, shared))
        for si in open_:
            memo[keys[si]] = got[si]
    return _aggregate(got, agg, w)


def _aggregate(d: list[float], agg: str, w: np.ndarray) -> float:
    """Per-scenario syncs `d` aggregated as the keys are raised by them: the least for a worst
    case (the worst scenario's time is at least any one's), else their weighted sum by `w`."""
    return min(d) if agg == "max" else float(np.array(d) @ w)


def _sync_key(o, i: int) -> tuple:
    """least_sync_s' (tests/oracles/bounds.py) key of outer `o` on scenario i: what its floors' keys read of `o` (each
    class's groups and replicas, the tp per group, cp, the micro-batch, the sequence-parallel
    flag, the recompute mode, ZeRO and whether v is 1: _floors_key, ring_shape), and ep, etp
    (an MoE outer is not read: applies). Outers that differ in v beyond that, or in their
    family's label, share it: 32 A100 + 32 H100 with partitions and the three layout options
    asked 14,051 outers' syncs, 6,384 keys."""
    return ("outer sync", i, o.classes, o.tp, o.group_tp, o.cp, o.micro_batch, o.sequence_parallel, o.recompute,
            o.zero, o.virtual_stages == 1, o.ep, o.etp)


def _outer_fields(o, ring: tuple | None) -> tuple:
    """What the floors' keys of a class of `o` read of `o` beyond the class (_floors_key: the tp
    per group, cp, the micro-batch, the sequence-parallel flag, the recompute mode, ZeRO, whether
    v is 1, the replicas and, with several classes, the ring's shape in place of the classes)."""
    return (o.tp, o.group_tp, o.cp, o.micro_batch, o.sequence_parallel, o.recompute, o.zero, o.virtual_stages == 1,
            o.replicas, ring)


def _class_term_of(inst, o, k: int, i: int, memo: dict, ring: tuple | None, cos: list, net, shared: tuple) -> float:
    """_class_term, kept in `memo` by the class and what its floors' keys read of `o`
    (`shared` = _outer_fields(o, ring)): those keys, and so the floors each reads from `memo`
    (kept once, never replaced), are the same for every outer with these, and the term is
    _class_sync of them. 32 A100 + 32 H100 with partitions and the three layout options read
    26,133 class terms, 14,048 of them again under this key (each re-keying its groups' floors
    through unpriced_memory.sync_key)."""
    key = ("plan sync class", i, o.classes[k], shared)
    got = memo.get(key)
    if got is None:
        got = memo[key] = _class_term(inst, o, k, i, memo, ring, cos, net)
    return got


def _class_term(inst, o, k: int, i: int, memo: dict, ring: tuple | None, cos: list, net) -> float:
    """least_sync_s' term of class k of `o` on scenario i (_class_sync of its groups' floors).
    Each floor is read by its key first (_floors_key: its stage count and v from `o`), `cos` =
    class_outers(o) filled only where one is missing (class_outers was a fifth of these reads on
    32 A100 + 32 H100 with partitions and the three options)."""
    c = o.classes[k]
    per = {}
    for g in sorted(set(c.stage_groups)):
        hit = memo.get(_floors_key(inst, o, i, g, c.pp, o.virtual_stages, ring))
        if hit is None:
            if not cos:
                cos += class_outers(inst.job, o)
            hit = layer_sync_floors(inst, o, cos[k], i, g, memo, net, ring)
        per[g] = hit
    return _class_sync(c.stage_groups, per, inst.model.layers, memo)


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


def ring_shape(o, memo: dict | None = None) -> tuple | None:
    """What the gradient ring of several classes reads of their shapes (class_coefficients.
    _ring_link, without experts: applies): per group, the ring's members on it, the GPUs their
    stages span and how many classes share it; None for a lone class (its ring lies in its
    group: unpriced_memory.sync_key reads it whole). Outers whose classes differ in their
    order of groups, or split the same GPUs per group otherwise, share it: keyed by it, the
    memo of layer_sync_floors held 604 entries on 32 A100 + 32 H100 with partitions and the
    three layout options, against 12,268 keyed by the classes. Kept in `memo`, where given, by
    what it reads of `o`: its classes, tp per group and cp (9,112 outers' syncs read there,
    715 of them through classes not read before)."""
    if len(o.classes) == 1:
        return None
    if memo is None:
        return _ring_shape(o)
    key = ("plan sync ring", o.classes, o.tp, o.group_tp, o.cp)
    got = memo.get(key)
    if got is None:
        got = memo[key] = _ring_shape(o)
    return got


def _ring_shape(o) -> tuple:
    """ring_shape of an outer of several classes, read afresh."""
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
