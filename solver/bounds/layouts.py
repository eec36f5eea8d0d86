"""A lower bound of every outer configuration of a block before the block is listed.

solver/space.declared_blocks cuts the declared space into blocks: the outer configurations of
one class layout (family, groups, tp per group, cp, class shapes) at one micro-batch size,
which differ only in their sequence-parallel flag, ZeRO stage, v, recompute mode and embedding /
loss slots. solver/search.py bounds each block here, finds a plan on the blocks of least bound,
and lists only the blocks whose bound can still reach that plan's value (issue 33: "prune
before listing"); the others' configurations are never built, bounded or priced.

The bound of a block is the bound read before pricing (unpriced.py) of every configuration in
it, at most: per (v, slots) of the block one representative configuration, its floors per
stage (layer, dense prefix, output layer) each the least over the block's sequence-parallel
flags and recompute modes (unpriced.floor_bounds_s's sp_values, recompute_values: those are
all a dense layer's floor reads beside tp, cp and the micro-batch, coefficients.
DENSE_LAYER_FIELDS; ZeRO is not among them), and its quantile factor the least over the block's
ZeRO stages (the factor reads the GPU types, ZeRO, cp and the deepest class, trust.
objective_factor_of). Then min over the representatives. Why it is at most each
configuration's own bound: per scenario and class, A = min over splits max_s (a_s + n_s t_s)
and S = sum_s a_s + L min_s t_s grow with every t_s and a_s, and batched.relaxed_s =
max(floor_z, cont) grows with every A_k and S_k (floor_z = max_k (lo_k - 1/v) A_k + S_k/v with
lo_k >= 1 >= 1/v; cont is the Z where f(Z) = sum_k x_k ((Z - S_k/v)/A_k + 1/v) reaches M, f is
increasing in Z and, at every Z >= max_k S_k/v, which the result is, falling in each A_k and
S_k; so a larger A or S cannot give a smaller result); max or a weighted sum over scenarios and
a factor > 0 keep the order. So a block whose bound cannot beat a plan's value holds no
configuration that can, and search's answer, with its tie rule, is that of the full listing.

With per-operator partitions (search.tensor_partitions) every layer floor here is the layer
plans' (unpriced.stage_floor_terms with layer_plans: the least of Megatron's and the plans'
optimistic terms), at most every layer-plan combination's, all-Megatron included: the bound
is then at most each combination's bound before pricing (unpriced.floor_bounds_s with
layer_plans, which keys those combinations in search.py) by the same argument.

A stage-wise block's bound (stage_bound_rows) reads more: its pipeline's slowest stage and sum
together (fill_drain.py) and, where asked (partial_bounds_s' layer_memo), per ZeRO
stage and v of the block, the slowest stage's gradient sync, which the bound before pricing
leaves out (with per-operator partitions, whose layer plans sync otherwise than Megatron's
layer, its floors over Megatron's layer and every layer plan: plan_sync.py). Those are at most each configuration's value, not its bound before pricing, and
are lowered by fill_drain.TIE_MARGIN: the search keys each listed configuration by at least
its block's bound, and prunes (never keys) by its block's bound for its ZeRO stage and v.

An MoE model's layer floor also reads the expert layout (ep, etp), whether the stage is
pipelined and whether it interleaves (coefficients.MOE_LAYER_FIELDS; unpriced._moe_layer_key),
and its first stage carries the dense prefix a_0 = d (dense floor - MoE floor), negative where
the MoE layer is the dearer. A block's representatives are then read per expert layout (the
other families: one per (v, slots, ep, etp), expert_layouts_of; a stage-wise block: one row per
layout and v kind, _moe_least), each with its own floors and a_0, and the bound is the
least over them: a least floor and a least a_0 taken apart would come from other layouts
(_moe_least says how far that fell). A stage-wise MoE block reads neither fill_drain nor
syncs (the MoE pipeline's terms are not fill_drain's).

Not under DualPipe, torch's zero-bubble schedules (whose bound before pricing takes a
weight-gradient share off the layers' sum, unpriced._zero_bubble_row) or the uniform split:
search.py lists every block there.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.identity_cache import IdentityCache
from paraplan.solver.bounds.batched import balanced_splits, relaxed_s
from paraplan.solver.bounds import fill_drain
from paraplan.solver.bounds.fill_drain import TIE_MARGIN, fill_drain_s
from paraplan.solver.bounds.plan_sync import layer_sync_floors
from paraplan.solver.bounds.unpriced import floor_bounds_s, stage_floor_terms
from paraplan.solver.bounds.unpriced_memory import layer_terms, sync_key, sync_terms
from paraplan.solver.bounds.stage_families import group_factor
from paraplan.solver.partition_plans import enabled as partitions_enabled


def _factor_memo(inst, memo: dict | None = None):
    """The quantile factor of a block's configurations per ZeRO stage of the block, {ZeRO
    stage: factor} (trust.objective_factor_of reads the GPU types used, ZeRO, cp and the deepest
    class: kept by those; a block fixes all of them but ZeRO). Kept in `memo` (the floors'
    memo, one per instance) where given, so that the calls of one search read each factor once
    (issue 33: the 4 x 16 row asked 3,738 group factors again over 1,482 calls)."""
    store = memo.get(("layout factors",)) if memo is not None else None
    if store is None:
        store = ({}, IdentityCache(math.inf))
        if memo is not None:
            memo["layout factors",] = store
    factors: dict[tuple, float] = store[0]
    reads = store[1]  # id(classes) -> (groups used, deepest class up to 2); the blocks hold their classes

    def per_zero(b) -> dict[int, float]:
        used, deep = reads.read(id(b.classes), b.classes, _factor_reads, b.classes)
        out = {}
        for z in b.tally.zeros:
            key = (used, z, min(b.cp, 2), deep)
            if key not in factors:
                factors[key] = group_factor(inst, used, z, b.cp, deep, factors)
            out[z] = factors[key]
        return out
    return per_zero


def _factor_reads(classes: tuple) -> tuple[tuple[int, ...], int]:
    """What trust.objective_factor_of reads of a block's classes: the groups used, and the
    deepest class's stage count up to 2."""
    # a set union in C: the stage groups are up to pp long (61 on DeepSeek-V3), read per layout
    return tuple(sorted(set().union(*[c.stage_groups for c in classes]))), min(max(c.pp for c in classes), 2)


def block_bounds_s(inst, blocks: list, idx: list[int], agg: str, weights, memo: dict | None = None) -> np.ndarray:
    """The module's bound of each block (solver/space.OuterBlock) of `inst`, on scenarios `idx`
    aggregated as `agg` (solver/search.scenario_weights); inf for a block of no configuration.
    `memo`: unpriced.floor_bounds_s's."""
    out = np.full(len(blocks), np.inf)
    factors_of = _factor_memo(inst, memo)
    layer_plans = partitions_enabled(inst)  # the layer plans' floors (module docstring)
    # representatives by the flags their floors take the least over (a call of floor_bounds_s each)
    reps: dict[tuple, list] = defaultdict(list)  # (sp flags, recompute modes) -> [(block, outer, factor)]
    for bi, b in enumerate(blocks):
        ty = b.tally
        if ty.first is None:
            continue
        factor = min(factors_of(b).values())
        _, zero, _, rc, _, _, _, _ = ty.first
        for v, emb, loss in ty.vslots:
            for ep, etp in expert_layouts_of(b):
                reps[ty.sps, b.recompute].append((bi, b.outer(ty.sps[0], zero, v, rc, ep, etp, emb, loss), factor))
    for (sps, rcs), items in reps.items():
        lbs = floor_bounds_s(inst, [o for _, o, _ in items], idx, agg, weights, layer_plans=layer_plans,
                             sp_values=sps, recompute_values=rcs, factors=np.array([f for _, _, f in items]), memo=memo)
        np.minimum.at(out, np.array([bi for bi, _, _ in items], np.int64), lbs)
    return out


def expert_layouts_of(b) -> tuple:
    """The (ep, etp) pairs of block b's configurations, as its representatives read them: of a
    dense model its first spec's only (its layer floors read no expert layout); of an MoE
    model every pair some sequence-parallel flag of the block lists (OuterBlock.layouts), a
    superset of those its specs run (a pair the v = 1 pairing rule skips is kept), so that the
    least over them is at most each configuration's floor (an MoE layer's floor reads ep and
    etp: coefficients.MOE_LAYER_FIELDS)."""
    return tuple(dict.fromkeys([b.tally.first[4:6]] + [x for sp in b.tally.sps for x in b.layouts[sp]]))


def partial_bounds_s(inst, partials: list, idx: list[int], agg: str, weights,
                     memo: dict | None = None, per_block: dict | None = None,
                     layer_memo: dict | None = None, ceiling_s: float = math.inf) -> np.ndarray:
    """A lower bound of every configuration of each partial layout (solver/space.Partial), on
    scenarios `idx` aggregated as `agg`: of the other families the least block bound
    (block_bounds_s) of its layout; of a stage-wise one, through its groups in every order,
    one bound per representative (last group g, stage counts, micro-batch size), which holds
    for every order ending on g (stage_bound_rows says why); inf for one of no configuration.
    `per_block`: where given, each stage-wise representative's own bound is kept in it, under
    representative_key (partial index, its stage groups sorted, last group, micro-batch size):
    the bound of every block of the partial layout with that key (stage_bound_rows).
    `layer_memo`: where given, the stage-wise representatives read their syncs too (the layers'
    terms and syncs kept in it, unpriced_memory.layer_terms, sync_terms): each bound is then the
    least over its (ZeRO stage, v) of stage_bound_rows' per_mode, and `per_block` keeps each of
    those under the representative's key with (ZeRO stage, v) appended. The search reads them
    only for the layouts it pops (issue 33: read up front for every block, they were half the
    CPU of a one-type plan whose search lists few). `ceiling_s` (the search's bar): a (ZeRO
    stage, v) bound above it is not raised by the joint reading (_pair_bounds), and a
    stage-wise block whose bound without fill_drain and syncs lies above it reads neither
    (stage_bound_rows, _live): each bound at most the bar is the one read without a bar, each
    above it stays above it."""
    out = np.full(len(partials), np.inf)
    blocks, owner, rows, row_owner = [], [], [], []
    for i, part in enumerate(partials):
        for _, blks in part.reps:
            if part.dp is None:
                blocks += blks
                owner += [i] * len(blks)
            else:
                rows += blks
                row_owner += [i] * len(blks)
    if blocks:
        np.minimum.at(out, np.array(owner, np.int64), block_bounds_s(inst, blocks, idx, agg, weights, memo))
    if rows:
        per_mode: dict | None = None if layer_memo is None else {}
        rb = stage_bound_rows(inst, rows, idx, agg, weights, memo, layer_memo, per_mode, ceiling_s)
        np.minimum.at(out, np.array(row_owner, np.int64), rb)
        if per_block is not None:
            keys = [representative_key(i, blk) for i, blk in zip(row_owner, rows)]
            per_block.update(zip(keys, rb.tolist()))
            per_block.update(((*keys[bi], zero, v), lb) for (bi, zero, v), lb in (per_mode or {}).items())
    return out


def representative_key(i: int, blk) -> tuple:
    """The key of a stage-wise block of partial layout i that its representative's bound holds
    for (partial_bounds_s): its groups' stage counts (the sorted stage groups), its last group
    and its micro-batch size; the order of the stages before the last is not read."""
    groups = blk.classes[0].stage_groups
    return i, tuple(sorted(groups)), groups[-1], blk.micro_batch


def stage_bound_rows(inst, blocks: list, idx: list[int], agg: str, weights, memo: dict | None = None,
                     layer_memo: dict | None = None, per_mode: dict | None = None,
                     ceiling_s: float = math.inf) -> np.ndarray:
    """Per block of a lone stage-wise class ending on group g, a lower bound of the bound before
    pricing (unpriced.floor_bounds_s) of every configuration of that block and of every block
    that differs from it only in the order of the stages before the last: the class's stages
    hold the same groups, so the same floors, in another order.

    Per scenario, with t_s the least layer floor of stage s over the block's sequence-parallel
    flags and recompute modes (unpriced.stage_floor_terms), h the least output layer on g, and
    a dense model (no dense-prefix term: a_0 = 0):
        A = min over integer splits n_s >= 1 of max_s (a_s + n_s t_s),  a = (0, ..., 0, h)
    which is symmetric in the stages before the last (so one order stands for all), and at most
    the configuration's own A: its floors are >= t_s, its a_last >= h, and its split, in chunks
    of v or with the embedding / loss as slots (whose relaxation, unpriced._slot_row, gives
    each stage the same a_s + n_s t_s for its real count n_s >= v - 1 >= 1), is one of these
    integer splits. S = h + L min_s t_s - e (max_s t_s - min_s t_s) - l (t_last - min_s t_s),
    e and l the most the block's slot modes flag: the relaxed row's S is h' - e t_0 - l t_last
    + (L + e + l) min_s t_s with h' >= h. Then batched.relaxed_s per v of the block (one class:
    x = dp, lo = 1 or pp with v > 1, M = the batch's micro-batches) and the least over v, times
    the least quantile factor of the block's ZeRO stages (layouts' module docstring: the bound
    grows with A and S). Per v whose configurations run no embedding / loss slot, that is
    raised to fill_drain.fill_drain_s / v of the same floors and output layer (_fill_drain_rows):
    the slowest stage and the stages' sum read together, at most each configuration's value
    (fill_drain's module docstring), not at most its bound before pricing: lowered by
    fill_drain.TIE_MARGIN, so a layout holding a plan that ties the incumbent is still listed.

    Where `per_mode` is given (a dict), per (ZeRO stage, v) of the block, both are raised by
    the slowest stage's gradient sync
    (_least_syncs: per group, the least over the block's sequence-parallel flags and recompute
    modes of unpriced_memory's g and d, build's per-layer sync and a floor of its stage sync:
    coefficients.sync_floor_s),
        D = min over integer splits n_s >= 1 of max_s (d_s + n_s g_s)
    (n_s >= 0 where that v runs an embedding / loss slot, whose stages may hold no layer of
    their own; chunks of 1 layer in either case, a relaxation of the chunks of v), symmetric
    in the stages as A is. D is at most the slowest sync of each configuration of that ZeRO
    stage and v, a term of its value that the bound before pricing leaves out: it enters
    batched.relaxed_s as its D and adds to J, both lowered by TIE_MARGIN as J is (and J and
    the syncs are read together too, fill_drain.fill_drain_sync_s: _joint_rows), and the
    bound of that ZeRO stage takes its own quantile factor, not the least of the block's. There
    A, S and D are each also read in chunks of v (_chunk_terms, _chunk_syncs: an interleaved
    stage holds a multiple of v layers, at least v), the larger reading taken, and the joint
    reading runs over splits in chunks of v: on the 4 types x 16 nodes row the configurations
    left to the bound that reads memory were mostly interleaved (v = 2 to 10), and it read
    their chunks (issue 33: 20,267 of them reached it, 2,419 now). The keys (read without the
    syncs) stay those in layers, so the search's order is unchanged. The block's
    bound is the least over its (ZeRO stage, v); `per_mode` keeps each one under
    (block index, ZeRO stage, v): the bound of that block's configurations of that ZeRO stage
    and v (ZeRO-1's reduce-scatter and all-gather take less than ZeRO-0's all-reduce, so a
    block's ZeRO-0 configurations have the larger bound). On Llama-3 70B over 4 GPU types x 16
    nodes (full space) the syncs lift most of the configurations listed below the optimum
    above it (issue 33).

    `ceiling_s` (the search's bar): a block whose bound without fill_drain and syncs passes it
    (_live) reads neither (it keeps that bound, past the bar, at most its full one); the
    others are read as without a bar. The fill_drain rows at set-up and the syncs when popped
    were 1.1 s and 2.2 s of the 4 x 16 row's 12 s of CPU, and most of their blocks lay past
    the bar already (issue 33)."""
    L, gb = inst.model.layers, inst.job.global_batch
    memo = {} if memo is None else memo
    layer_memo = {} if layer_memo is None else layer_memo
    net = NetEfficiency()
    moe = inst.model.moe is not None
    out = np.full(len(blocks), np.inf)
    factors_of = _factor_memo(inst, memo)
    layer_plans = partitions_enabled(inst)  # the layer plans' floors (module docstring)
    # what the blocks read, kept by what it reads in `memo` (one per instance), so that the
    # calls of one search read each once (issue 33: the 4 x 16 row bounds 15.6 blocks a call):
    # _least_syncs'; (scenario, group, its tp, cp, micro-batch, sp flags, recompute modes) ->
    # (t_g, h_g); per stage-group tuple its distinct groups and each stage's index among them
    # (the 1,885 blocks of GPT-3 175B / 1,024 A100 repeat a few dozen tuples of up to 96
    # stages); _slot_terms per (the block's (v, slots) modes, whether it runs through several
    # groups): the blocks repeat a few dozen of them
    syncs, per_group, places, slot_terms = memo.setdefault(("stage rows memos",), ({}, {}, {}, {}))
    fresh: dict[int, list] = defaultdict(list)  # pp -> the blocks whose sync-free terms are not kept yet
    by_pp: dict[int, list] = defaultdict(list)
    for bi, b in enumerate(blocks):
        ty = b.tally
        if ty.first is None:
            continue
        c = b.classes[0]
        pp = len(c.stage_groups)
        (uniq, where), (e, l_, vs, plain, slotted) = _place_and_slots(places, slot_terms, c.stage_groups, ty.vslots)
        if not moe and _kept_terms(memo, b, idx, ceiling_s) is None:
            t, h = _block_floors(inst, b, idx, (uniq, where), per_group, layer_plans, memo)
            fresh[pp].append((b, t, h, e, l_, factors_of(b), vs, c.replicas, gb // b.micro_batch, plain))
        # (its syncs, (ZeRO stage, v) -> per-stage (g, d), (scenarios, pp) each, read below)
        by_pp[pp].append((bi, b, vs, c.replicas, gb // b.micro_batch, (uniq, where), slotted, e, l_))
    if fresh:
        _keep_terms(memo, idx, fresh, L, agg, weights, ceiling_s)
    rows = [it for items in by_pp.values() for it in items]  # in the order _least_over_v aggregates them
    if rows:
        # an MoE model's terms are read for this call alone (_moe_least; its syncs are not
        # read), a dense one's from those kept for its syncs (_kept_terms)
        least, factor = (_moe_least(inst, memo, idx, rows, L, per_group, layer_plans, factors_of) if moe
                         else _kept_least(memo, idx, rows))
        out[[it[0] for it in rows]] = _least_over_v(least, rows, by_pp, factor, agg, weights)
    if per_mode is None or moe:
        return out
    # the syncs of the blocks whose bound without them can still win (_live): the others' bound
    # (and every (ZeRO stage, v)'s, which is at least it) lies past the bar already
    for pp, items in by_pp.items():
        items = [(*it[:5], _block_syncs(inst, it[1], idx, *it[5], syncs, memo, layer_memo, net), it[6])
                 for it in items if _live(out[it[0]], ceiling_s)]
        if items:
            out[[x[0] for x in items]] = _pp_bounds(memo, idx, pp, items, L, agg, weights, per_mode, ceiling_s)
    return out


def _place_and_slots(places: dict, slot_terms: dict, stage_groups: tuple, vslots: tuple) -> tuple:
    """(its distinct groups, each stage's index among them) of a class's stage groups, and
    _slot_terms of a block's (v, slots) modes through them, each kept in its dict (stage_bound_rows'
    memos) by what it reads."""
    place = places.get(stage_groups)
    if place is None:
        uniq = tuple(dict.fromkeys(stage_groups))
        place = places[stage_groups] = (uniq, np.array([uniq.index(g) for g in stage_groups]))
    slot_key = (vslots, len(place[0]) > 1)
    slots = slot_terms.get(slot_key)
    if slots is None:
        slots = slot_terms[slot_key] = _slot_terms(*slot_key)
    return place, slots


def _block_floors(inst, b, idx: list[int], place: tuple, per_group: dict, layer_plans: bool,
                  memo: dict) -> tuple[np.ndarray, np.ndarray]:
    """stage_bound_rows' t (scenarios x stages: each stage's least layer floor on its group over
    the block's sequence-parallel flags and recompute modes) and h (per scenario, the least
    output layer on the last stage's group) of a dense model's block, each group's terms kept
    in `per_group` by what they read (_least_terms)."""
    ty, c = b.tally, b.classes[0]
    uniq, where = place
    t = np.empty((len(idx), len(c.stage_groups)))
    h = np.empty(len(idx))
    tp_of = dict(b.group_tp)  # (OuterBlock.tp_of)
    for si, i in enumerate(idx):
        tg = {}
        for g in uniq:
            key = (i, g, tp_of.get(g, b.tp), b.cp, b.micro_batch, ty.sps, b.recompute, None)
            got = per_group.get(key)
            if got is None:
                got = per_group[key] = _least_terms(inst, b, i, g, None, layer_plans, memo)
            tg[g] = got
        t[si] = tg[uniq[0]][0] if len(uniq) == 1 else np.array([tg[g][0] for g in uniq])[where]
        h[si] = tg[c.stage_groups[-1]][2]
    return t, h


def _moe_kinds(b, vs: tuple) -> list[tuple[tuple, tuple]]:
    """Block b's v values `vs` by kind (v = 1, interleaved), each with what an MoE layer's floor
    reads of the block beside what a dense layer's does (_block_floors' `reads`, its key): the
    expert layouts (expert_layouts_of), the kind's first v (the floor reads v only through
    whether it interleaves, as unpriced.floor_bounds_s keys it: unpriced._moe_layer_key, the
    all-to-all overlaps) and whether there is a pipeline (the block's one class fixes it;
    unpriced._pipelined). Read per kind, an interleaved configuration's overlapped all-to-all
    does not lower the floors of the block's v = 1 ones."""
    kinds: dict[bool, list[int]] = {}
    for v in vs:
        kinds.setdefault(v > 1, []).append(v)
    return [(tuple(ws), ((lay,), (ws[0],), b.classes[0].pp > 1))
            for ws in kinds.values() for lay in expert_layouts_of(b)]


# relative slack of _live's test: a bound computed in another order (_keep_terms' test, the
# weighted sums of _least_over_v) may differ from it by a few ulps
LIVE_SLACK = 1e-12


def _live(bound_s: float, ceiling_s: float) -> bool:
    """Whether a block whose bound without fill_drain and syncs is `bound_s` may still reach
    the search's bar `ceiling_s` (at most it, up to LIVE_SLACK). Those terms only raise a bound
    (stage_bound_rows), and the search only lowers its bar: a block past it never wins, its
    configurations are never listed (search._Search._list_layouts prunes each block whose bound
    passes the bar), and the bound it keeps, at most its full one, still bounds them. So only
    the blocks that can still win read fill_drain (at set-up) and their syncs (when popped):
    on the 4 types x 16 nodes row, 8,819 of the 20,376 blocks set up and 1,412 of the 1,938
    popped (issue 33)."""
    return bound_s <= ceiling_s * (1 + LIVE_SLACK)


def _kept_least(memo: dict, idx: list[int], rows: list) -> tuple[np.ndarray, np.ndarray]:
    """_least_over_v's operands of a dense model's blocks `rows` (stage_bound_rows' by_pp
    entries) from their kept terms (_kept_terms): per (block, v), in the order of the blocks
    and of each one's v, the kept relaxed_s (raised by fill_drain), (scenarios,) each; per
    block its least quantile factor."""
    kept = [_kept_terms(memo, it[1], idx) for it in rows]
    return (np.stack([kp[3][v][0] for it, kp in zip(rows, kept) for v in it[2]]),
            np.array([min(kp[2].values()) for kp in kept]))


def _least_over_v(least: np.ndarray, rows: list, by_pp: dict, factor: np.ndarray, agg: str,
                  weights) -> np.ndarray:
    """Per block of `rows` (stage_bound_rows' by_pp entries, pp by pp), the least over its v
    of `least` (one row per v of the block, (per (block, v), scenarios); a block with a first
    spec has a v), aggregated over scenarios, times its `factor`: stage_bound_rows' bound
    without syncs. A weighted sum is taken per pp on its rows as they stand, as _pp_bounds
    takes it (a dot product's floats may read its operand's shape). The least is taken
    element by element, exact in any order."""
    counts = np.array([len(it[2]) for it in rows], np.int64)
    best = np.minimum.reduceat(least, np.cumsum(counts) - counts, axis=0)
    if agg == "max":
        return best.max(-1) * factor
    w, sizes = np.asarray(weights, float), [len(items) for items in by_pp.values()]
    return np.concatenate([part @ w for part in np.split(best, np.cumsum(sizes)[:-1])]) * factor


def _pp_bounds(memo: dict, idx: list[int], pp: int, items: list, L: int, agg: str, weights,
               per_mode: dict | None, ceiling_s: float = math.inf) -> np.ndarray:
    """stage_bound_rows' bounds of its blocks of `pp` stages (`items`, as it lists them), per
    block: the least over each v and ZeRO stage of relaxed_s of the kept A and S with the
    slowest sync D, aggregated over scenarios, times that ZeRO stage's quantile factor (the
    block fixes every other feature the factor reads; a v read without syncs, times the least
    over the block's ZeRO stages); each (ZeRO stage, v)'s own bound kept in `per_mode` where
    given. Every (ZeRO stage, v)'s rows at once: _least_sync_split and relaxed_s read each row
    alone, the least is taken element by element, and a weighted sum over scenarios is taken
    on each (ZeRO stage, v)'s rows as they stand (the same floats as a pass per pair)."""
    n = len(idx)
    kept = [_kept_terms(memo, it[1], idx) for it in items]
    N = len(items)
    factor = np.array([min(k[2].values()) for k in kept])
    best = np.full((N, n), np.inf)  # in units of each block's least factor
    # the (v, ZeRO stage) pairs in order, each with its rows
    pairs = [(v, z, [k for k, it in enumerate(items) if (z, v) in it[5]])
             for v in sorted({v for it in items for v in it[2]})
             for z in sorted({z for it in items for z, w in it[5] if w == v})]
    covered = {(k, v) for v, _, rows in pairs for k in rows}
    if pairs:
        _pair_bounds(best, factor, kept, items, pairs, n, pp, L, agg, weights, per_mode, ceiling_s)
    # a v no ZeRO stage covers (none: every v has one) reads its kept relaxed_s
    for k, (it, kp) in enumerate(zip(items, kept)):
        for v in it[2]:
            if (k, v) not in covered:
                best[k] = np.minimum(best[k], kp[3][v][0] if v in kp[3] else np.zeros(n))
    agg_b = best.max(-1) if agg == "max" else best @ np.asarray(weights, float)
    return agg_b * factor


def _pair_bounds(best: np.ndarray, factor: np.ndarray, kept: list, items: list, pairs: list, n: int, pp: int,
                 L: int, agg: str, weights, per_mode: dict | None, ceiling_s: float = math.inf) -> None:
    """_pp_bounds' (ZeRO stage, v) pairs, every pair's rows at once: lowers `best` (in place; per
    block and scenario, in units of the block's least `factor`) to each pair's bound, and keeps
    each pair's own bound in `per_mode` where given. A pair's readings only raise its bound, so
    they are taken cheapest first and a pair past `ceiling_s` (the search's bar) after one reads
    no more (_open_rows): it cannot win either way, the search skips the configurations of a
    pair past its bar (per_mode) and prunes a layout whose least pair is, and the bound it
    keeps, at most its full one, still bounds them. First its bound without syncs (kept at
    set-up), then with its least sync split in layers (_sync_rows), then in chunks of v, then
    the joint reading (issue 33: the joint reading of every pair was 3-6 s of the 4 x 16 row's
    CPU; of its 20,958 pairs read, 5,088 lie past the bar without syncs, 14,934 with the syncs
    in layers, so 6,024 read chunks). A pair that reads them all gets the floats it got read
    alone (each reading is row by row)."""
    blk = np.array([k for _, _, rows in pairs for k in rows], np.int64)
    vs = [v for v, _, rows in pairs for _ in rows]
    zs = [z for _, z, rows in pairs for _ in rows]
    zero = np.zeros(n)
    # relaxed_s of A and S, and fill_drain's J / v (0 where not read), kept per v of each block
    b = np.stack([kept[k][3][v][0] if v in kept[k][3] else zero for k, v in zip(blk.tolist(), vs)])
    fd = np.stack([kept[k][3][v][1] if v in kept[k][3] else zero for k, v in zip(blk.tolist(), vs)])
    # the configurations of ZeRO stage z take its factor, at least the block's least
    fz = np.array([kept[k][2][z] for k, z in zip(blk.tolist(), zs)])
    w = np.asarray(weights, float)
    bz = _read_syncs(kept, items, blk, zs, vs, b, fd, fz, pp, L, agg, w, ceiling_s)
    # the pipeline and its slowest sync read together where fill_drain is read (_joint_rows),
    # on the pairs that can still win
    below = (bz.max(-1) if agg == "max" else bz @ w) * fz <= ceiling_s
    bz = np.maximum(bz, _joint_rows(items, kept, blk, zs, vs, (fd > 0) & below[:, None], pp, L, fd))
    np.minimum.at(best, blk, bz * (fz / factor[blk])[:, None])
    if per_mode is not None:
        at = 0
        for v, z, rows in pairs:
            r = slice(at, at + len(rows))
            lbz = (bz[r].max(-1) if agg == "max" else bz[r] @ w) * fz[r]
            for k, lb in zip(rows, lbz.tolist()):
                per_mode[items[k][0], z, v] = lb
            at += len(rows)


def _read_syncs(kept: list, items: list, blk: np.ndarray, zs: list, vs: list, b: np.ndarray, fd: np.ndarray,
                fz: np.ndarray, pp: int, L: int, agg: str, w: np.ndarray, ceiling_s: float) -> np.ndarray:
    """_pair_bounds' rows (block blk[r], ZeRO stage zs[r], v vs[r]; kept bound without syncs
    b, fill_drain's fd, factor fz) raised by their syncs, cheapest reading first: those that
    may still reach `ceiling_s` by b (_open_rows) read their least sync split in layers
    (_sync_rows), and of those the ones that still may read it and A and S in chunks of v."""
    bz = b.copy()
    open_ = _open_rows(bz, fz, agg, w, ceiling_s)
    if not len(open_):
        return bz
    ks, zo, vo = blk[open_], [zs[r] for r in open_.tolist()], [vs[r] for r in open_.tolist()]
    D = _least_sync_split(np.stack([items[k][5][z, v][0] for k, z, v in zip(ks.tolist(), zo, vo)]),
                          np.stack([items[k][5][z, v][1] for k, z, v in zip(ks.tolist(), zo, vo)]),
                          np.array([v in items[k][6] for k, v in zip(ks.tolist(), vo)], bool), L)
    bz[open_] = _sync_rows(kept, items, ks, vo, D, b[open_], fd[open_], pp, L, False)
    keep = _open_rows(bz[open_], fz[open_], agg, w, ceiling_s, np.arange(len(open_)))
    chunked = open_[keep]
    if len(chunked):
        # each of D, A and S the larger of its readings in layers and in chunks of v
        # (_chunk_syncs, _chunk_terms): both bound each configuration of the pair
        ks, zc, vc = blk[chunked], [zs[r] for r in chunked.tolist()], [vs[r] for r in chunked.tolist()]
        Dc = np.maximum(D[keep], _chunk_syncs(items, ks, zc, vc, L))
        bz[chunked] = _sync_rows(kept, items, ks, vc, Dc, b[chunked], fd[chunked], pp, L, True)
    return bz


def _open_rows(bz: np.ndarray, fz: np.ndarray, agg: str, w: np.ndarray, ceiling_s: float,
               rows: np.ndarray | None = None) -> np.ndarray:
    """The rows (of `rows`, or all) of pair bounds `bz` (rows, scenarios; times factor `fz`
    once aggregated) that may still reach `ceiling_s` (_live: up to LIVE_SLACK, so that a row
    cut here stays past the bar when _pair_bounds aggregates it again, in another shape)."""
    lb = (bz.max(-1) if agg == "max" else bz @ w) * fz
    got = np.array([_live(x, ceiling_s) for x in lb.tolist()], bool)
    return np.flatnonzero(got) if rows is None else rows[got]


def _sync_rows(kept: list, items: list, ks: np.ndarray, vs: list, D: np.ndarray, b: np.ndarray,
               fd: np.ndarray, pp: int, L: int, chunks: bool) -> np.ndarray:
    """(rows, scenarios): per row of _pair_bounds (block ks[r], v vs[r], its slowest sync's
    least split D, kept bound without syncs b and fill_drain's fd), relaxed_s of the block's
    kept A and S (raised by their readings in chunks of v where `chunks`) with D, and fd + D
    where fd is read, lowered by TIE_MARGIN; at least b."""
    A = np.stack([kept[k][0] for k in ks.tolist()])
    S = np.stack([kept[k][1] for k in ks.tolist()])
    if chunks:
        for v in set(vs):
            rows = np.flatnonzero(np.array(vs) == v)
            kv = ks[rows].tolist()
            Av, Sv = _chunk_terms(np.stack([kept[k][4] for k in kv]), np.stack([kept[k][5] for k in kv]), L, v,
                                  [_slot_modes(items[k][1].tally.vslots, v) for k in kv])
            A[rows], S[rows] = np.maximum(A[rows], Av), np.maximum(S[rows], Sv)
    bz = relaxed_s(A[:, :, None], S[:, :, None], D[:, :, None], _column([items[k][3] for k in ks.tolist()]),
                   _column([float(pp) if v > 1 else 1.0 for v in vs]), _column([items[k][4] for k in ks.tolist()]),
                   _column(vs), False) * (1 - TIE_MARGIN)
    return np.maximum(b, np.maximum(bz, np.where(fd > 0, fd + D * (1 - TIE_MARGIN), 0.0)))


def _column(values) -> np.ndarray:
    """Per-row numbers as relaxed_s' (rows, 1, 1) operands."""
    return np.array(values, float)[:, None, None]


def _kept_terms(memo: dict, b, idx: list[int], ceiling_s: float = -math.inf) -> tuple | None:
    """Block b's sync-free terms on scenarios `idx` as _keep_terms kept them in `memo`, or None:
    (A, S, {ZeRO stage: quantile factor}, {v: (relaxed_s of A and S, fill_drain's J / v or 0)},
    floors t (scenarios, pp), output layer h (scenarios): _joint_rows reads the last two), each
    per scenario. They read the block's floors only, not its syncs: a layout bounded at set-up
    reads them again when the search pops it to read its syncs (search._Partial.tighten),
    which re-priced its fill-drain rows (~4 s of the 4 x 16 row's CPU; issue 33). None too
    where they were kept without fill_drain under a bar below `ceiling_s` (_keep_terms: the
    block's bound may reach this one's)."""
    kept_rows = memo.get(("stage rows",))  # (the partial layouts hold their blocks)
    got = kept_rows.get((id(b), tuple(idx)), b) if kept_rows is not None else None
    return got[0] if got is not None and got[1] >= ceiling_s else None


def _keep_terms(memo: dict, idx: list[int], fresh: dict, L: int, agg: str, weights,
                ceiling_s: float = math.inf) -> None:
    """stage_bound_rows' sync-free terms of blocks `fresh` (pp -> its blocks' (block, floors t
    (scenarios, pp), output layer h (scenarios), e, l, factor per ZeRO stage, v values,
    replicas, micro-batches, the v fill_drain reads) each), kept in `memo` (_kept_terms).
    relaxed_s and fill_drain_s read each row alone, so the rows of every pp and v are priced in
    one call of each (_fill_drain_rows): the same floats as a call per pp and v, with the fixed
    cost of a call paid once (issue 33: the 4 x 16 row set up 9.6 blocks per call). fill_drain
    is read only for the blocks whose bound without it (the least over v of relaxed_s,
    aggregated as _least_over_v does) can still reach the bar `ceiling_s` (_live): the others
    keep 0 (no bound) and are kept as cut at that bar (_kept_terms)."""
    n = len(idx)
    kept = []  # per pp: (items, A, S, pp, t, h)
    rel = []  # per (pp, v): (its kept entry, rows, v) of relaxed_s' and fill_drain's rows
    for pp, items in fresh.items():
        t = np.stack([x[1] for x in items])  # (rows, scenarios, pp)
        h = np.stack([x[2] for x in items])  # (rows, scenarios)
        a = np.zeros_like(t)
        a[:, :, -1] += h
        N = len(items)
        flat_t, flat_a = t.reshape(N * n, pp), a.reshape(N * n, pp)
        A = (flat_a + balanced_splits(flat_a, flat_t, L) * flat_t).max(axis=1).reshape(N, n)
        tmin, tmax = t.min(axis=2), t.max(axis=2)
        e = np.array([x[3] for x in items], float)[:, None]
        l_ = np.array([x[4] for x in items], float)[:, None]
        S = h + L * tmin - e * (tmax - tmin) - l_ * (t[:, :, -1] - tmin)
        kept.append((items, A, S, pp, t, h))
        for v in sorted({v for it in items for v in it[6]}):
            rel.append((len(kept) - 1, np.flatnonzero(np.array([v in it[6] for it in items])), v))
    b = _relaxed_rows(kept, rel, n)
    live = _live_blocks(kept, rel, b, n, agg, weights, ceiling_s)
    fd = np.concatenate(_fill_drain_rows(_fill_drain_batches(kept, rel, live, n), L)) if rel else b
    b = np.maximum(b, fd)
    per_v: list[list[dict]] = [[{} for _ in k[0]] for k in kept]
    at = 0
    for ki, rows, v in rel:
        for r, k in enumerate(rows.tolist()):
            per_v[ki][k][v] = (b[at + r], fd[at + r])
        at += len(rows)
    kept_rows = memo.get(("stage rows",))
    if kept_rows is None:
        kept_rows = memo["stage rows",] = IdentityCache(math.inf)
    for (items, A, S, _, _, _), pv, lv in zip(kept, per_v, live):
        for k, it in enumerate(items):
            kept_rows.put((id(it[0]), tuple(idx)), it[0], ((A[k], S[k], it[5], pv[k], it[1], it[2]),
                                                           math.inf if lv[k] else ceiling_s))


def _moe_least(inst, memo: dict, idx: list[int], rows: list, L: int, per_group: dict, layer_plans: bool,
               factors_of) -> tuple[np.ndarray, np.ndarray]:
    """_least_over_v's operands of an MoE model's blocks `rows` (stage_bound_rows' by_pp
    entries): per (block, v), in the order of the blocks and of each one's v, relaxed_s of the
    least over the block's expert layouts (ep, etp) of that layout's A and S (_MoeRows: each
    layout its own floors, dense prefix and output layer, those of the v's kind), (scenarios,)
    each; per block its least quantile factor (`factors_of`, _factor_memo). fill_drain is not
    read (an MoE pipeline's value is not fill_drain's), nor are the syncs, so nothing is kept
    for a later call: an MoE model's layouts are bounded once, at set-up (search._Partials.of;
    keeping each block's terms was 1.5 s of DeepSeek-V3 on 2,048 H800 with idle GPUs).
    Why per layout and not the least floors over layouts: the first stage's dense prefix
    a_0 = d (dense floor - MoE floor) falls as the MoE floor rises, so the least a_0 and the
    least floor come from other layouts, and their sum (d x the dense floor less d MoE floors
    at the dearest layout, plus L at the cheapest) fell far below every configuration's
    (DeepSeek-V3 on 2,048 H800 with idle GPUs: a pp = 1 block at 7.0 s, its least floor
    81 s; the search listed 222,065 configurations, 30,366 read per layout). relaxed_s
    reads each row alone, so every block's rows are priced in one call."""
    n = len(idx)
    table = _MoeRows.of(memo, idx)
    ids, cols = [], []  # per (block, v) its rows and (x, lo, M, v)
    for _, b, vs, replicas, batches, place, _, e, l_ in rows:
        one, inter = table.block_rows(inst, b, vs, place, e, l_, memo)
        pp = float(len(b.classes[0].stage_groups))
        for v in vs:
            ids.append(inter if v > 1 else one)
            cols.append((replicas, pp if v > 1 else 1.0, batches, v))
    A, S = table.terms(inst, idx, L, per_group, layer_plans, memo)
    counts = np.fromiter(map(len, ids), np.int64, len(ids))
    at = np.fromiter(itertools.chain.from_iterable(ids), np.int64, int(counts.sum()))
    cols = np.repeat(np.array(cols, float), counts, axis=0)  # per row of each (block, v)
    rel = relaxed_s(A[at][:, :, None], S[at][:, :, None], np.zeros((len(at), n, 1)),
                    *(cols[:, j, None, None] for j in range(4)), False)
    return (np.minimum.reduceat(rel, np.cumsum(counts) - counts, axis=0),
            np.array([min(factors_of(it[1]).values()) for it in rows]))


@dataclass
class _MoeRows:
    """The rows of _moe_least, kept in the floors' memo (one per instance): one per (stage
    groups, the blocks' tp per group, cp, micro-batch, sequence-parallel flags, recompute modes,
    expert layout and v kind, slot flags e and l), all a row's A and S read (_moe_rows), shared
    by the blocks of every replica count that lists that layout; and per block key (the same
    but every layout of the block's) its rows of each v kind. A and S are priced for the rows
    not priced yet when they are read (terms)."""

    count: int = 0  # rows so far
    pending: list = dataclasses.field(default_factory=list)  # (block, place, reads, e, l) of rows not priced
    # site -> (block key -> {interleaved: row indices}, row key -> index)
    blocks: dict = dataclasses.field(default_factory=dict)
    kinds: dict = dataclasses.field(default_factory=dict)  # _moe_kinds per what it reads
    reads_ids: dict = dataclasses.field(default_factory=dict)  # a kind's reads -> its int (block_rows)
    A: np.ndarray | None = None
    S: np.ndarray | None = None

    @classmethod
    def of(cls, memo: dict, idx: list[int]) -> "_MoeRows":
        """The rows kept in `memo` for scenarios `idx`."""
        got = memo.get(("moe rows", tuple(idx)))
        if got is None:
            got = memo["moe rows", tuple(idx)] = cls()
        return got

    def block_rows(self, inst, b, vs: tuple, place: tuple, e: int, l_: int, memo: dict) -> tuple:
        """(row indices of v = 1, of interleaved v) of block b's expert layouts, lists (an array
        each was a tenth of the MoE set-up's CPU)."""
        ty, groups = b.tally, b.classes[0].stage_groups
        # _moe_kinds reads the block's layouts (one dict per layout's invariants, held here),
        # the first spec's, its sp flags, its v values and whether it pipelines
        kk = (id(b.layouts), ty.first[4:6], ty.sps, vs, len(groups) > 1)
        got = self.kinds.get(kk)
        if got is None:
            # each kind's reads as an int (equal reads, equal ints), so that the rows of a site
            # are looked up by ints, not by nested tuples, those of v = 1 apart from the
            # interleaved (_moe_kinds lists them in that order); the kinds' own int keys their blocks
            kinds: tuple = ([], [])
            for _, reads in _moe_kinds(b, vs):
                kinds[reads[1][0] > 1].append((self.reads_ids.setdefault(reads, len(self.reads_ids)), reads))
            got = self.kinds[kk] = (kinds, len(self.kinds), b.layouts)
        kinds, kind_id = got[0], got[1]
        # the stage groups by their place's array (stage_bound_rows' `places`, kept in `memo`
        # as this table is: one per stage-group tuple, alive while the table is), so that a
        # block hashes an int, not its up to pp groups; keyed by site first, so that it does
        # that once, not once per row (DeepSeek-V3 on 2,048 H800 with idle GPUs: 102,806
        # blocks, about ten rows each)
        site = (id(place[1]), b.group_tp, b.tp, b.cp, b.micro_batch, ty.sps, b.recompute, e, l_)
        at_site = self.blocks.get(site)
        if at_site is None:
            at_site = self.blocks[site] = ({}, {})  # (kinds' int -> rows by kind, reads' int -> row)
        out = at_site[0].get(kind_id)
        if out is None:
            rows, count, pending = at_site[1], self.count, self.pending
            out = ([], [])
            for of_kind, ids in zip(kinds, out):
                for rid, reads in of_kind:
                    r = rows.setdefault(rid, count)  # a new row takes the next index
                    if r == count:
                        count += 1
                        pending.append((b, place, reads, e, l_))
                    ids.append(r)
            self.count = count
            at_site[0][kind_id] = out
        return out

    def terms(self, inst, idx: list[int], L: int, per_group: dict, layer_plans: bool,
              memo: dict) -> tuple[np.ndarray, np.ndarray]:
        """(A, S) of every row, (rows, scenarios): those pending priced now (_moe_rows)."""
        if self.pending:
            A, S = _moe_rows(inst, idx, self.pending, L, per_group, layer_plans, memo)
            self.A = A if self.A is None else np.concatenate([self.A, A])
            self.S = S if self.S is None else np.concatenate([self.S, S])
            self.pending = []
        return self.A, self.S


def _moe_rows(inst, idx: list[int], pending: list, L: int, per_group: dict, layer_plans: bool,
              memo: dict) -> tuple[np.ndarray, np.ndarray]:
    """(A, S), each (rows, scenarios), of the rows `pending` (block, place, reads (_moe_kinds:
    an expert layout and a v kind), e, l): stage_bound_rows' A and S of that layout's floors
    (_layout_floors: the least over the block's sequence-parallel flags and recompute modes),
    with the dense prefix a_0. Through one group the first stage is stage 0 in every order:
    a_0 is added there, as floor_bounds_s reads it, and to S (_one_group_rows). Through several the stage that
    runs it depends on the order the representative stands for, so c = min(a_0, 0) (the least
    over the groups that may run the first stage) is added to every stage and to S: each
    configuration's stage terms are at least these (its first stage's a_0 >= c, every other
    stage's >= 0 >= c), so min over splits of max_s (a_s + n_s t_s), which c shifts whole, and
    S = sum_s a_s + L min_s t_s bound its own (the module docstring: the bound grows with every
    term; a_0 is negative where the MoE layer is the dearer, the one term that can be). The
    rows of one pp are split in one balanced_splits call (it reads each row alone)."""
    n = len(idx)
    A, S = np.empty((len(pending), n)), np.empty((len(pending), n))
    by_pp: dict[int, list] = defaultdict(list)
    one_group = [r for r, x in enumerate(pending) if len(x[1][0]) == 1]
    if one_group:
        _one_group_rows(inst, idx, pending, one_group, L, per_group, layer_plans, memo, A, S)
    for r, (b, place, reads, e, l_) in enumerate(pending):
        if len(place[0]) == 1:
            continue
        t, h, a0 = _layout_floors(inst, b, idx, place, reads, per_group, layer_plans, memo)
        c = np.minimum(a0, 0.0)  # on every stage (several groups: the docstring)
        a = np.zeros_like(t)
        a[:, -1] += h
        a += c[:, None]
        tmin, tmax = t.min(axis=1), t.max(axis=1)
        S[r] = h + c + L * tmin - e * (tmax - tmin) - l_ * (t[:, -1] - tmin)
        by_pp[t.shape[1]].append((r, t, a))
    for pp, items in by_pp.items():
        t = np.concatenate([x[1] for x in items])
        a = np.concatenate([x[2] for x in items])
        got = (a + balanced_splits(a, t, L) * t).max(axis=1).reshape(len(items), n)
        A[[x[0] for x in items]] = got
    return A, S


def _one_group_rows(inst, idx: list[int], pending: list, rows: list[int], L: int, per_group: dict,
                    layer_plans: bool, memo: dict, A: np.ndarray, S: np.ndarray) -> None:
    """_moe_rows' A and S of its rows `rows` through one group, into A and S: there every stage
    has the group's floor m, a = (a_0, 0, ..., 0, h) (a_0 + h on one stage) and S = h + a_0 +
    L m (the slot terms e (t_max - t_min), l (t_last - t_min) are 0), every row of one pp
    split in one balanced_splits call, without per-row arrays (DeepSeek-V3 on 2,048 H800 with
    idle GPUs reads 211,268 rows, all on one group; read row by row they took 3x its CPU)."""
    floor_of: dict = {}  # what a row's floors read but the scenario -> its index in `floors`
    floors, which, pps = [], [], []  # per distinct floors its (m, a_0, h) per scenario; per row its
    for r in rows:  # floors' index and pp (10,800 distinct floors for those 211,268 rows)
        b, (uniq, _), reads, _, _ = pending[r]
        g = uniq[0]
        fk = (g, b.tp_of(g), b.cp, b.micro_batch, b.tally.sps, b.recompute, reads)
        f = floor_of.get(fk)
        if f is None:
            f = floor_of[fk] = len(floors)
            floors.append([_group_terms(inst, b, i, g, reads, per_group, layer_plans, memo) for i in idx])
        which.append(f)
        pps.append(len(b.classes[0].stage_groups))
    terms = np.array(floors, float)[np.array(which, np.int64)]  # (rows, scenarios, 3)
    m, a0, h = terms[:, :, 0], terms[:, :, 1], terms[:, :, 2]
    n, rows = len(idx), np.array(rows, np.int64)
    S[rows] = h + a0 + L * m
    pps = np.array(pps, np.int64)
    for pp in dict.fromkeys(pps.tolist()):
        sel = np.flatnonzero(pps == pp)
        A[rows[sel]] = _one_group_split_max(a0[sel].reshape(-1), h[sel].reshape(-1), m[sel].reshape(-1),
                                            pp, L).reshape(len(sel), n)


def _one_group_split_max(a0: np.ndarray, h: np.ndarray, m: np.ndarray, pp: int, L: int) -> np.ndarray:
    """Per entry, min over integer splits n_s >= 1 (sum L) of max_s (a_s + n_s m), a = (a_0, 0,
    ..., 0, h) (a_0 + h on one stage), pp stages of one floor m: the floats of
    (a + balanced_splits(a, t, L) * t).max(axis=1) with t = m on every stage (_one_group_rows),
    without splitting. Why the same floats: balanced_splits gives each stage its first value
    a_s + m and then the `extra` = L - pp smallest of the values a_s + k m (k = 2 .. extra + 1,
    these float expressions, each stage's non-decreasing in k), those below theta, the
    extra-th smallest, and some equal to it (at least one: fewer than extra lie below it). So
    the largest a_s + n_s m it keeps is max(max_s (a_s + m), theta), and theta is read here from
    the three sequences the stages take (the pp - 2 middle stages' k m, a_0 + k m, h + k m):
    per sequence the least k whose value has at least `extra` values at or below it (a binary
    search: that count grows with the value), theta the least of those values. Entries whose
    floors are not finite and positive are split by balanced_splits itself."""
    if pp == 1:
        seqs = [(h + a0, 1)]  # (a_s, stages taking it), as _one_group_rows adds them: (0 + h) + a_0
    else:
        seqs = [(a0, 1), (np.zeros_like(m), pp - 2), (h, 1)] if pp > 2 else [(a0, 1), (h, 1)]
    first = np.max([a + m for a, _ in seqs], axis=0)
    extra = L - pp
    if extra <= 0:
        return first
    plain = np.isfinite(m) & (m > 0) & np.isfinite(a0) & np.isfinite(h)
    out = np.empty_like(m)
    if not plain.all():  # as balanced_splits splits them
        t = np.repeat(m[~plain, None], pp, axis=1)
        a = np.zeros_like(t)
        a[:, -1] += h[~plain]
        a[:, 0] += a0[~plain]
        out[~plain] = (a + balanced_splits(a, t, L) * t).max(axis=1)
    if plain.any():
        m, first = m[plain], first[plain]
        seqs = [(a[plain], w) for a, w in seqs if w]
        theta = np.min([_least_value_reaching(a, m, seqs, extra) for a, _ in seqs], axis=0)
        out[plain] = np.maximum(first, theta)
    return out


def _least_value_reaching(a: np.ndarray, m: np.ndarray, seqs: list, extra: int) -> np.ndarray:
    """Per entry, the least value a + k m (k = 2 .. extra + 1) at or below which `seqs` (per
    sequence its a and the stages taking it) hold at least `extra` values of theirs (k = 2 ..
    extra + 1): a binary search on k (the count grows with k; at k = extra + 1 it is at least
    extra, this sequence's own values)."""
    lo = np.full(m.shape, 2.0)  # the least k, where the count may already reach extra
    hi = np.full(m.shape, extra + 1.0)  # a k whose value reaches it
    while True:
        open_ = lo < hi
        if not open_.any():
            return a + hi * m
        mid = np.floor((lo + hi) / 2)
        level = a + mid * m
        enough = sum(w * _values_at_or_below(b, m, extra, level) for b, w in seqs) >= extra
        hi = np.where(open_ & enough, mid, hi)
        lo = np.where(open_ & ~enough, mid + 1, lo)


def _values_at_or_below(a: np.ndarray, m: np.ndarray, extra: int, level: np.ndarray) -> np.ndarray:
    """Per entry, how many of a + k m (k = 2 .. extra + 1, this float expression, m > 0) are <=
    level: the quotient's guess, corrected until the k found is the last at or below it (the
    values grow with k, so the count is exact)."""
    k = np.clip(np.floor((level - a) / m), 1.0, extra + 1.0)  # the last k at or below level, or 1
    while True:
        up = (k < extra + 1) & (a + (k + 1) * m <= level)
        down = (k >= 2) & (a + k * m > level)
        if not (up.any() or down.any()):
            return k - 1
        k = k + up - down


def _group_terms(inst, b, i: int, g: int, reads: tuple, per_group: dict, layer_plans: bool, memo: dict) -> tuple:
    """_least_terms of MoE block b on group g, scenario i, at `reads`, kept in `per_group` by
    what it reads."""
    key = (i, g, b.tp_of(g), b.cp, b.micro_batch, b.tally.sps, b.recompute, reads)
    got = per_group.get(key)
    if got is None:
        got = per_group[key] = _least_terms(inst, b, i, g, reads, layer_plans, memo)
    return got


def _layout_floors(inst, b, idx: list[int], place: tuple, reads: tuple, per_group: dict, layer_plans: bool,
                   memo: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t (scenarios, pp), h (scenarios), a_0 (scenarios)) of MoE block b at `reads` (_moe_kinds:
    an expert layout and a v kind): each stage's least layer floor on its group, the least
    output layer on the last stage's group and the least dense prefix of the groups that may
    run the first stage (any before the last), each the least over the block's
    sequence-parallel flags and recompute modes (_least_terms), kept in `per_group`."""
    uniq, where = place
    c = b.classes[0]
    got = np.empty((3, len(idx), len(uniq)))
    for si, i in enumerate(idx):
        for gi, g in enumerate(uniq):
            got[:, si, gi] = _group_terms(inst, b, i, g, reads, per_group, layer_plans, memo)
    first = [uniq.index(g) for g in dict.fromkeys(c.stage_groups[:-1] or c.stage_groups)]
    return got[0][:, where], got[2][:, uniq.index(c.stage_groups[-1])], got[1][:, first].min(axis=1)


def _least_terms(inst, b, i: int, g: int, reads: tuple | None, layer_plans: bool, memo: dict) -> tuple:
    """(layer floor, dense prefix a_0, output layer) of block b's stages on group g, scenario i,
    each the least over the block's sequence-parallel flags and recompute modes
    (unpriced.stage_floor_terms; stage_bound_rows: the bound grows with each), at the first
    spec's expert layout and v = 1, or an MoE model's `reads` (_moe_kinds: its layout and v)."""
    ty = b.tally
    _, zero, _, _, ep, etp, _, _ = ty.first
    layouts, vs = reads[:2] if reads else (((ep, etp),), (1,))
    terms = [stage_floor_terms(inst, i, b.outer(sp, zero, v, rc, ep, etp, False, False), 0, g, layer_plans, memo)
             for sp in ty.sps for rc in b.recompute for ep, etp in layouts for v in vs]
    return tuple(min(x[j] for x in terms) for j in range(3))


def _relaxed_rows(kept: list, rel: list, n: int) -> np.ndarray:
    """(rows, scenarios): relaxed_s of A and S of every (pp, v) of `rel` (_keep_terms), in its
    order: one relaxed_s of one class, row by row ((rows, scenarios, 1) each, per-row x, lo, M
    and v)."""
    if not rel:
        return np.zeros((0, n))
    A_, S_, x, lo, M, vv = [], [], [], [], [], []
    for ki, rows, v in rel:
        items, A, S, pp, _, _ = kept[ki]
        A_.append(A[rows])
        S_.append(S[rows])
        x += [items[k][7] for k in rows.tolist()]
        M += [items[k][8] for k in rows.tolist()]
        lo += [float(pp) if v > 1 else 1.0] * len(rows)
        vv += [float(v)] * len(rows)
    A_, S_ = np.concatenate(A_), np.concatenate(S_)
    return relaxed_s(A_[:, :, None], S_[:, :, None], np.zeros((len(A_), n, 1)), _column(x), _column(lo),
                     _column(M), _column(vv), False)


def _live_blocks(kept: list, rel: list, b: np.ndarray, n: int, agg: str, weights, ceiling_s: float) -> list:
    """Per kept entry of _keep_terms, per block, whether its bound without fill_drain (per
    scenario the least over its v of relaxed_s `b`, aggregated, times its least quantile
    factor, as _least_over_v reads it) can still reach `ceiling_s` (_live)."""
    if not math.isfinite(ceiling_s):
        return [np.ones(len(k[0]), bool) for k in kept]
    best = [np.full((len(k[0]), n), np.inf) for k in kept]
    at = 0
    for ki, rows, _ in rel:
        np.minimum.at(best[ki], rows, b[at:at + len(rows)])
        at += len(rows)
    out = []
    for (items, *_), bk in zip(kept, best):
        agg_b = bk.max(-1) if agg == "max" else bk @ np.asarray(weights, float)
        factor = np.array([min(it[5].values()) for it in items])
        out.append(np.array([_live(lb, ceiling_s) for lb in (agg_b * factor).tolist()], bool))
    return out


def _fill_drain_batches(kept: list, rel: list, live: list, n: int) -> list:
    """_fill_drain_rows' batches of every (pp, v) of `rel` (_keep_terms): per (pp, v), the rows
    of its live blocks (`live`) that run v with no embedding / loss slot, with their kinds
    (_stage_kinds) at their one class's micro-batch count m = M / x (v m in the interleaved form:
    fill_drain's module docstring). The kinds are those of every such row of the pp, live or
    not: a row's floats read its padding past MERGED_KINDS kinds (_fill_drain_rows), so they
    stay those of a reading of every block."""
    out = []
    kinds_of: dict[int, tuple] = {}  # kept entry -> _stage_kinds of its every row
    for ki, rows, v in rel:
        items, _, _, pp, t, h = kept[ki]
        plain = [r for r, k in enumerate(rows.tolist()) if v in items[k][9]]
        fill = [r for r in plain if live[ki][rows[r]]]
        terms = None
        if fill:
            if ki not in kinds_of:
                kinds_of[ki] = _stage_kinds(t, h)
            kinds = kinds_of[ki]
            if kinds[0].shape[1] <= MERGED_KINDS:  # (padding leaves its rows' floats: MERGED_KINDS)
                blk = rows[fill]
                terms = tuple(x[(blk[:, None] * n + np.arange(n)).reshape(-1)] for x in kinds)
            else:  # the batch as it is: its own kinds, those of every row that reads them
                own = _stage_kinds(t[rows[plain]], h[rows[plain]])
                at = np.array([plain.index(r) for r in fill])
                terms = tuple(x[(at[:, None] * n + np.arange(n)).reshape(-1)] for x in own)
            m = np.repeat(np.array([max(items[k][8] / items[k][7], 1.0) * v for k in rows[fill].tolist()], float), n)
            terms = (*terms, m)
        out.append((len(rows), n, pp, v, fill, terms))
    return out


def _slot_modes(vslots: tuple, v: int) -> tuple:
    """The (embedding slot, loss slot) flags a block's configurations of this v run (the
    block's Tally.vslots), each as 0 / 1."""
    return tuple(dict.fromkeys((int(e), int(l)) for w, e, l in vslots if w == v))


def _chunk_terms(t: np.ndarray, h: np.ndarray, L: int, v: int, modes: list) -> tuple[np.ndarray, np.ndarray]:
    """(A_v, S_v), each (rows, scenarios): A and S of stage_bound_rows read in chunks of v, the
    least over each row's slot modes (`modes`, per row its (e, l) flags of this v). A
    configuration of this v with slots (e, l) splits L' = L + e + l layer slots into chunks of
    v, stage s holding n'_s = v k_s >= v of them, n'_s - o_s decoder layers (o_s the slots it
    holds: cost/pipeline_split.slot_offsets), at a time of at least a'_s + n'_s t_s with
    a'_0 = -e t_0, a'_last = h - l t_last (its floors are >= t_s, its output layer >= h and
    n'_s - o_s >= 0, so its own terms are at least these, as in one_class.slot_relaxation). So
        A_v = min over splits into k_s >= 1 chunks, sum_s k_s = L' / v, of max_s (a'_s + v k_s t_s)
        S_v = sum_s a'_s + v sum_s t_s + (L' - pp v) min_s t_s
    are at most its slowest stage and its stages' sum; without slots at least A and S (each
    stage holds a multiple of v layers, at least v: the deeper the interleaving, the more layers
    the slow stages must hold; callers take the larger of the two readings). 0 (no bound) where
    pp v > L'."""
    R, n, pp = t.shape
    A, S = np.full((R, n), np.inf), np.full((R, n), np.inf)
    for e, l in dict.fromkeys(x for ms in modes for x in ms):
        rows = np.array([r for r, ms in enumerate(modes) if (e, l) in ms], np.int64)
        tt = t[rows].reshape(-1, pp)
        a = np.zeros_like(tt)
        a[:, -1] = h[rows].reshape(-1)
        a[:, 0] -= e * tt[:, 0]
        a[:, -1] -= l * tt[:, -1]
        slots = L + e + l
        if pp * v > slots:
            got_a = got_s = np.zeros(len(tt))
        else:
            got_a = (a + balanced_splits(a, tt, slots, v) * tt).max(axis=1)
            got_s = a.sum(axis=1) + v * tt.sum(axis=1) + (v * (slots // v) - pp * v) * tt.min(axis=1)
        np.minimum.at(A, rows, got_a.reshape(len(rows), n))
        np.minimum.at(S, rows, got_s.reshape(len(rows), n))
    return A, S


def _joint_rows(items: list, kept: list, blk: np.ndarray, zs: list, vs: list, read: np.ndarray, pp: int,
                L: int, fd: np.ndarray) -> np.ndarray:
    """(rows, scenarios): per row of _pp_bounds' (ZeRO stage, v) pairs (block blk[r] of `items`,
    ZeRO stage zs[r], v vs[r]), fill_drain.fill_drain_sync_s of its floors, output layer and
    least syncs: the pipeline's slowest stage, its stages' sum and its slowest sync read together
    (J_v(n) + max_s (d_s + n_s g_s), the least over splits in chunks of v, n_s = v k_s with
    k_s >= 1), lowered by
    TIE_MARGIN; 0 (no bound) where `read` (rows, scenarios) is False: fill_drain is read only
    where it is (the v whose configurations run no embedding / loss slot, through several
    groups). Read apart (fd + D) the two leave out that the split balancing the pipeline piles
    layers on the fastest GPUs, whose syncs then lead (issue 33, 8 types x 8 nodes).

    Why at most every configuration's value of that ZeRO stage and v, in every order of the
    stages before the last: its value is at least J_v(n) + max_s D_s of its own split n (the
    sum fd + D reads: T_s >= a_s + n_s t_s, D_s >= d_s + n_s g_s, with t_s, h, g_s, d_s the least
    over the block's flags, as fd and D read them: stage_bound_rows), its split is one of those
    the least runs over (a configuration of this v that runs no embedding / loss slot holds
    chunks of v layers on each stage: fill_drain_sync_s reads chunks as layers of floor v t_s
    and sync v g_s, L / v of them, at v m micro-batches), and a larger term gives no smaller
    value. The stages enter as kinds: per group of the stages before the last one kind
    of its count (its stages share floors and syncs: both are per group), in sorted group order,
    and the last stage its own kind (a = h): so the bound is the same for every order the
    representative stands for. Rows are priced per count of kinds, so no row is padded with
    absent kinds and each row's floats are those of a call on its own kinds (fill_drain_s reads
    each row alone)."""
    out = np.zeros(read.shape)
    rows = np.flatnonzero(read.any(axis=1))
    if not len(rows):
        return out
    n = read.shape[1]
    by_k: dict[tuple, list] = defaultdict(list)  # (kinds, chunks) -> rows
    for r in rows.tolist():
        k = int(blk[r])
        groups = items[k][1].classes[0].stage_groups
        before = groups[:-1]
        ug = sorted(set(before))
        cols = [before.index(g) for g in ug] + [pp - 1]
        count = [float(before.count(g)) for g in ug] + [1.0]
        g_, d_ = items[k][5][zs[r], vs[r]]
        t, h = kept[k][4], kept[k][5]
        a = np.zeros((n, len(cols)))
        a[:, -1] = h
        m = max(items[k][4] / items[k][3], 1.0)
        # in chunks of v layers, as fd (_keep_terms): a stage of k chunks takes a_s + k (v t_s)
        # and syncs d_s + k (v g_s)
        by_k[len(cols), L // vs[r]].append((r, a, t[:, cols] * vs[r], np.tile(count, (n, 1)), d_[:, cols],
                                            g_[:, cols] * vs[r], m, vs[r], fd[r]))
    for (_, chunks), got in by_k.items():
        a, t, count, d, g = (np.concatenate([x[i] for x in got]) for i in range(1, 6))
        v = np.repeat(np.array([float(x[7]) for x in got]), n)
        m = np.repeat(np.array([x[6] for x in got]), n)
        caps = np.full(t.shape, float(chunks - pp + 1))
        # fill_drain_sync_s reads its pipeline_s only as a lower bound of the least J over these
        # splits (the tail's and the levels' skip): fd's J is one (the least over splits of
        # single layers, at most the least in chunks, its stages grouped into other kinds), read
        # back from fd rather than priced again (fd v / (1 - TIE_MARGIN): a few ulps off, far
        # inside the TIE_MARGIN the result is lowered by)
        free = np.concatenate([x[8] for x in got]) / (1 - TIE_MARGIN) * v
        j = fill_drain.fill_drain_sync_s(a, t, count, chunks, v * m, caps, d, g, v, free)
        j = np.where(np.isnan(j), 0.0, j).reshape(len(got), n)  # (-inf: no bound)
        out[[x[0] for x in got]] = np.where(read[[x[0] for x in got]], np.maximum(j, 0.0) * (1 - TIE_MARGIN), 0.0)
    return out


def _block_syncs(inst, b, idx: list[int], uniq: tuple, where: np.ndarray, syncs: dict, memo: dict,
                 layer_memo: dict, net) -> dict:
    """(ZeRO stage, v) -> (g, d) per scenario of `idx` and stage of block b (each (scenarios,
    pp)), its stages on groups uniq[where]: _least_syncs of each group."""
    n = len(idx)
    gd: dict[tuple, tuple] = {}
    for si, i in enumerate(idx):
        least = [_least_syncs(inst, b, i, g, syncs, memo, layer_memo, net) for g in uniq]
        modes = list(least[0])
        # (modes, 2, groups) -> (modes, 2, stages): every mode's g and d in one array
        per = np.array([[[x[mode][0] for x in least], [x[mode][1] for x in least]] for mode in modes])[:, :, where]
        if n == 1:  # (each (1, stages), views of `per`)
            gd.update((mode, (gd_[0:1], gd_[1:2])) for mode, gd_ in zip(modes, per))
            continue
        for mode, gd_ in zip(modes, per):
            if mode not in gd:
                gd[mode] = (np.empty((n, len(where))), np.empty((n, len(where))))
            gd[mode][0][si] = gd_[0]
            gd[mode][1][si] = gd_[1]
    return gd


def _modes_key(modes_left) -> tuple:
    """A block's modes_left as _least_syncs' key reads them, each admitted set sorted."""
    return tuple((sp, zero, tuple(sorted(admitted))) for sp, zero, admitted in modes_left)


def _least_syncs(inst, b, i: int, g: int, syncs: dict, memo: dict, layer_memo: dict, net) -> dict:
    """(ZeRO stage, v) -> (g, d) of unpriced_memory (sync_terms: build's per-layer sync and a
    floor of its stage sync) of the stages on group g of block b's lone class, scenario i, each
    the least over the block's sequence-parallel flags and recompute modes that run with that
    ZeRO stage and v (OuterBlock.specs; the embedding / loss slots do not enter them), kept in
    `syncs` by what they read of the block (its ring: its group's tp, cp and the class's
    replicas; the layer's fields; ZeRO, v and of the depth only whether there is a pipeline:
    unpriced_memory.sync_terms), the layers' terms and syncs in `layer_memo` as
    unpriced_memory keeps them. With per-operator partitions g and d are plan_sync.
    layer_sync_floors': the least over Megatron's layer and every layer plan of the group's tp
    (a floor of every layer-plan combination's, as the layer floors here are)."""
    c = b.classes[0]
    # the blocks share their modes_left objects (one per layout's invariants): its key once each
    modes_of = syncs.get(("modes",))
    if modes_of is None:
        modes_of = syncs["modes",] = IdentityCache(math.inf)
    modes = modes_of.read(id(b.modes_left), b.modes_left, _modes_key, b.modes_left)
    key = (i, g, b.tp_of(g), bool(b.group_tp), b.cp, b.micro_batch, c.pp > 1, c.replicas, modes, b.vs, b.recompute)
    got = syncs.get(key)
    if got is not None:
        return got
    _, _, _, _, ep, etp, _, _ = first = b.tally.first
    o0 = b.outer(*first)  # what sync_key reads beside the modes: the block's own fields
    # with per-operator partitions, the least over Megatron's layer and every layer plan
    # (plan_sync.py), kept in `layer_memo` under its own keys
    layer_plans = partitions_enabled(inst)
    got = {}
    # of v the sync reads only whether it is 1 (unpriced_memory.sync_key: the reduction's
    # overlap), so each mode is read at the first v of its kind and kept for the others
    for sp, zero, admitted in b.modes_left:
        at: dict[bool, tuple] = {}
        for v in b.vs:
            if v not in admitted:
                continue
            least = at.get(v == 1)
            if least is None:
                least = (np.inf, np.inf)
                for rc in b.recompute:
                    hit = None if layer_plans else layer_memo.get(sync_key(inst, o0, i, g, sp, rc, zero, c.pp, v))
                    if hit is None:
                        o = b.outer(sp, zero, v, rc, ep, etp, False, False)
                        co = class_outers(inst.job, o)[0]
                        hit = (layer_sync_floors(inst, o, co, i, g, layer_memo, net) if layer_plans else
                               sync_terms(inst, o, co, i, g, layer_terms(inst, o, co, i, g, memo, layer_memo, net)[0],
                                          layer_memo, net))
                    least = at[v == 1] = (min(least[0], hit[0]), min(least[1], hit[1]))
            was = got.get((zero, v), (np.inf, np.inf))
            got[zero, v] = (min(was[0], least[0]), min(was[1], least[1]))
    syncs[key] = got
    return got


def _least_sync_split(g: np.ndarray, d: np.ndarray, slots: np.ndarray, layers: int) -> np.ndarray:
    """(rows, scenarios): min over integer splits of max_s (d_s + n_s g_s), g and d (rows,
    scenarios, pp), the n_s >= 1 summing to `layers`, or >= 0 on the rows flagged in `slots`
    (as n''_s = n_s + 1 >= 1 summing to layers + pp with d''_s = d_s - g_s):
    batched.balanced_splits, exact for this min-max."""
    N, n, pp = g.shape
    gf, df = g.reshape(N * n, pp), d.reshape(N * n, pp)
    out = (df + balanced_splits(df, gf, layers) * gf).max(axis=1).reshape(N, n)
    if slots.any():
        rows = np.repeat(slots, n)
        a = df[rows] - gf[rows]
        out[slots] = (a + balanced_splits(a, gf[rows], layers + pp) * gf[rows]).max(axis=1).reshape(-1, n)
    return out


def _chunk_syncs(items: list, blk: np.ndarray, zs: list, vs: list, layers: int) -> np.ndarray:
    """(rows, scenarios): per row of _pp_bounds' (ZeRO stage, v) pairs, the least over its
    block's slot modes of that v (e, l) of min over splits in chunks of v of max_s (d'_s + n'_s
    g_s), d'_s = d_s - o_s g_s over L + e + l layer slots (_chunk_terms' relaxation: the
    configuration's stage s syncs at least d_s + (n'_s - o_s) g_s): at most its slowest sync,
    and at least _least_sync_split's (chunks of one layer). 0 where pp v passes L + e + l."""
    first = items[int(blk[0])][5][zs[0], vs[0]][0]
    n, pp = first.shape
    out = np.full((len(blk), n), np.inf)
    groups: dict[tuple, list[int]] = defaultdict(list)  # (v, e, l) -> rows
    for r, (k, v) in enumerate(zip(blk.tolist(), vs)):
        for e, l in _slot_modes(items[k][1].tally.vslots, v):
            groups[v, e, l].append(r)
    for (v, e, l), rows in groups.items():
        g = np.stack([items[int(blk[r])][5][zs[r], v][0] for r in rows]).reshape(-1, pp)
        d = np.stack([items[int(blk[r])][5][zs[r], v][1] for r in rows]).reshape(-1, pp).copy()
        d[:, 0] -= e * g[:, 0]
        d[:, -1] -= l * g[:, -1]
        slots = layers + e + l
        # (v = 1 without slots: _least_sync_split's own reading, not repeated)
        got = (np.zeros(len(g)) if pp * v > slots or slots == layers and v == 1 else
               (d + balanced_splits(d, g, slots, v) * g).max(axis=1))
        np.minimum.at(out, np.array(rows, np.int64), got.reshape(len(rows), n))
    return out


def _slot_terms(vslots: tuple, several_groups: bool) -> tuple[int, int, tuple, frozenset, frozenset]:
    """(e, l, the v values in order, the v fill_drain reads, the v that run a slot) of a
    block's (v, embedding slot, loss slot) modes, as stage_bound_rows reads them: e and l the
    most the modes flag; the v whose every configuration runs no embedding / loss slot
    (fill_drain reads those), none through one group (there every split's sum is h + L t, so J
    is A and S's bound); the v of some configuration with a slot (_least_sync_split's)."""
    vs = tuple(dict.fromkeys(x[0] for x in vslots))
    plain = frozenset(v for v in vs if several_groups and not any(x[1] or x[2] for x in vslots if x[0] == v))
    slotted = frozenset(v for v, emb, loss in vslots if emb or loss)
    return int(max(x[1] for x in vslots)), int(max(x[2] for x in vslots)), vs, plain, slotted


def _stage_kinds(t: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fill_drain_s' (a, t, count), each (rows x scenarios, K), of floors t (rows, scenarios,
    pp) and output layer h (rows, scenarios) on the last stage: the stages before the last
    enter as kinds (one per distinct floor, with its count), so the bound is symmetric in them
    as A is, and holds for every order the row stands for; the last stage is kind K - 1."""
    pp = t.shape[2]
    flat = t.reshape(-1, pp)
    R = len(flat)
    srt = np.sort(flat[:, :-1], axis=1)
    new = np.ones(srt.shape, bool)
    new[:, 1:] = srt[:, 1:] != srt[:, :-1]
    kind = np.cumsum(new, axis=1) - 1
    K = int(kind.max()) + 2 if pp > 1 else 1
    count = np.zeros((R, K))
    tk, ak = np.ones((R, K)), np.zeros((R, K))
    if pp > 1:
        r = np.broadcast_to(np.arange(R)[:, None], kind.shape)
        np.add.at(count, (r, kind), 1.0)
        tk[r[new], kind[new]] = srt[new]
    count[:, -1], tk[:, -1], ak[:, -1] = 1.0, flat[:, -1], h.reshape(-1)
    return ak, tk, count


# kinds per row up to which _fill_drain_rows prices batches of several pp and v in one call:
# fill_drain_s' sums over the kinds (numpy's add.reduce) add fewer than 8 terms one by one,
# so the zeros of the absent kinds a wider batch pads with leave each row's floats as they
# are; at 8 and more numpy sums in 8 lanes, and a padded row may round otherwise
MERGED_KINDS = 7


def _fill_drain_rows(batches: list, layers: int) -> list[np.ndarray]:
    """Per batch (rows, scenarios, pp, v, the rows read, their kinds (a, t, count: _stage_kinds)
    and m, or None), (rows, scenarios): fill_drain.fill_drain_s / v of the rows read, 0 (no
    bound) on the others; lowered by TIE_MARGIN. The batches of at most MERGED_KINDS kinds and
    the same window (fill_drain_s' min(layers - pp + 1, WINDOW_LEVELS)) are priced in one call,
    each row capped at its own layers - pp + 1 (the cap fill_drain_s gives a batch of one pp):
    the same floats as a call per batch."""
    out = [np.zeros((N, n)) for N, n, _, _, _, _ in batches]
    calls: dict[tuple, list[int]] = defaultdict(list)
    for bi, (_, _, pp, _, _, terms) in enumerate(batches):
        if terms is not None:
            K = terms[0].shape[1]
            calls[min(layers - pp + 1, fill_drain.WINDOW_LEVELS), bi if K > MERGED_KINDS else -1].append(bi)
    for members in calls.values():
        K = max(batches[bi][5][0].shape[1] for bi in members)
        R = sum(len(batches[bi][5][3]) for bi in members)
        # the absent kinds: count 0 (fill_drain_s' convention), appended after the row's own
        ak, tk, count, caps = np.zeros((R, K)), np.ones((R, K)), np.zeros((R, K)), np.empty((R, K))
        m = np.empty(R)
        at = 0
        for bi in members:
            a_, t_, c_, m_ = batches[bi][5]
            r, k = a_.shape
            ak[at:at + r, :k], tk[at:at + r, :k], count[at:at + r, :k] = a_, t_, c_
            caps[at:at + r], m[at:at + r] = float(layers - batches[bi][2] + 1), m_
            at += r
        j = fill_drain_s(ak, tk, count, layers, m, caps)
        at = 0
        for bi in members:
            N, n, pp, v, rows, terms = batches[bi]
            r = len(terms[3])
            out[bi][rows] = j[at:at + r].reshape(len(rows), n) / v * (1 - TIE_MARGIN)
            at += r
    return out
