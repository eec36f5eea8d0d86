"""A lower bound of every configuration's optimum before it is priced (solver/search.py
prices configurations in the order of this bound, and stops where it reaches the incumbent).

Pricing a configuration (cost/coefficients.build on its placement) is most of a large search's
time, and most configurations cannot win: on the 64-node three-type instance with its full space
the priced bound (solver/bounds/batched.py) of 99% of them is above the optimum. This bound reads,
per class and stage, only the floor of the stage's layer time
(cost/coefficients.layer_time_floor_s: the layer's own forward and backward on the group's
tp, cp and expert links, without ZeRO-3's ring terms), which depends on the group and the
modes, not on where the class sits; and of the stage terms of the priced bound a_s, d_s, g_s
it keeps two that read no link: an MoE model's dense prefix on the first stage,
a_0 = d x (dense layer - MoE layer), read as d x (the floors' difference)
(cost/coefficients.dense_prefix_floor_s: exact without ZeRO-3, and with it a bound of the first
stage's n >= d layers together), the one term that can be negative; and the output layer on
the last stage, a_last (cost/coefficients.output_layer_floor_s: the logits GEMM and loss,
exactly build's "output_layer" part, >= 0; on a one-stage pipeline it adds to a_0, as in
build). Every other term it drops (hand-offs, embedding, syncs, ZeRO-3's gathers) is >= 0,
and the priced bound grows with each: min over splits of max_s (a_s + n_s t_s) and
sum_s a_s grow with every a_s. The output layer is 0.04 s per micro-batch beside 0.11 s per
layer for Llama-3 70B on an A100 at tp 1 (vocabulary 128,256): on a stage of a few layers
it is what made this bound 5-7% below the priced one (issue 33).
So this bound is at most the priced bound of the same configuration, which is at most its
optimum (it also drops the first stage's minimum of d layers, which only widens the splits).

Per class k and scenario, with t_s the floors and a = (a_0, 0, ..., 0, a_last):
    A_k = min over splits of max_s (a_s + n_s t_s)     S_k = sum_s a_s + L min_s t_s     D = 0
and over micro-batch vectors batched.relaxed_s; a weighted objective takes the weighted
sum of the scenarios' bounds (each minimised over m on its own, so at most the joint minimum).
A DualPipe job (one class, its count m fixed) is bounded by its steady term alone,
m/2 max over stage pairs >= m/pp sum_s T_s >= m S / pp (cost/dualpipe.py: its bubble and sync
terms are >= 0).
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections import defaultdict
from itertools import chain, repeat

import numpy as np

from paraplan.cost.coefficients import (DENSE_LAYER_FIELDS, MOE_LAYER_FIELDS, dense_layer_floor_s,
                                        dense_prefix_floor_s, layer_time_floor_s, megatron_layer,
                                        output_layer_floor_s, placed_extras, stage_outer)
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.class_coefficients import class_outers, class_placement, group_site
from paraplan.cost.moe import a2a_overlap_applies, dualpipe_applies, pairs_unpipelined_micro_batches
from paraplan.cost.trust import objective_factors
from paraplan.cost.specs import PipelineSchedule, ZeroBubble
from paraplan.cost.zero_bubble import W_PASSES_SAVED, weight_grad_share
from paraplan.solver.bounds.batched import balanced_splits, relaxed_s

CLOCK_EVERY = 1024  # outers bounded between two looks at the clock (a chunk read at once)
from paraplan.solver.partition_plans import optimistic_terms, plan_rows


def floor_bounds_s(inst, outers: list, idx: list[int], agg: str, weights, uniform: bool = False,
                   layer_plans: bool = False, deadline: float | None = None,
                   sp_values: tuple | None = None, recompute_values: tuple | None = None,
                   factors: np.ndarray | None = None, memo: dict | None = None) -> np.ndarray:
    """The module's bound of each of `outers` (ClassOuter) on scenarios `idx` of `inst`,
    aggregated as `agg` ("max" or "weighted" with `weights`, solver/search.
    scenario_weights). `layer_plans`: a bound of every combination of the outer's layer plans
    (solver/class_partitions.py): where a group offers plans beyond Megatron's, its floor is
    the least of Megatron's and the plans' optimistic terms' (partition_plans.optimistic_terms:
    each term at its minimum over the plans). `deadline` (a time.perf_counter() value): the
    outers not reached by then are bounded by 0 (an iteration takes no less), so that a small
    time limit is not spent here (pricing a floor is most of this function: 10,470 distinct
    MoE layers on Qwen3 235B / 256 H100). `sp_values`, `recompute_values`: each outer stands for
    every outer that differs from it only in its sequence-parallel flag and recompute mode
    among these, and the floors of a stage (layer, dense prefix, output layer) are each the
    least over them (solver/bounds/layouts.py: the bound is increasing in every floor);
    `factors`: the quantile objective's factor of each outer, in place of its own. `memo`: the
    stage floors already priced for `inst` (a dict kept by the caller between calls)."""
    L = inst.model.layers
    moe = inst.model.moe is not None
    total = inst.job.global_batch
    dualpipe = inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE  # its own objective
    rows: dict[tuple, int] = {}  # (t row, a_0, a_last, v, layers) -> its index among the distinct rows
    row_of = []  # per (outer, scenario, class), flat: its distinct row's index

    single = {} if memo is None else memo  # stage_floor_terms' memo
    # (scenario, group, the layer's outer) -> floor; the same -> the first stage's dense-prefix
    # extra; the same -> the output layer, if its stage is the last. Each is the least of
    # stage_floor_terms over the sp and recompute values, which it reads beside its key: kept
    # in the memo across calls by those (8 x 8 row, issue 33: 1,826 calls, most of their keys
    # met in an earlier call)
    # (kept_entries: outer_entries' (t row, a_0, a_last) by its entry key, which with these is all
    # the floors it reads, kept across calls as they are)
    floors, prefix, head, kept_entries = single.setdefault(("stage floors", layer_plans, sp_values, recompute_values),
                                                           ({}, {}, {}, {}))

    def floor_of(i: int, o, k: int, g: int) -> tuple[float, float, float]:
        return stage_floor_terms(inst, i, o, k, g, layer_plans, single)

    def floor(i: int, o, k: int, g: int, modes: tuple) -> float:
        # what the layer reads: the site (group, its tp, cp, expert layout) and `modes`
        # (coefficients.DENSE_LAYER_FIELDS; of an MoE layer MOE_LAYER_FIELDS, of its stage
        # count only whether there is a pipeline: _pipelined)
        key = (i, g, o.tp_of(g), modes, _pipelined(o.classes[k].pp) if moe else None)
        if key not in floors:
            if sp_values is None and recompute_values is None:
                terms = [floor_of(i, o, k, g)]
            else:
                terms = [floor_of(i, dataclasses.replace(o, sequence_parallel=sp, recompute=rc), k, g)
                         for sp in (sp_values or (o.sequence_parallel,))
                         for rc in (recompute_values or (o.recompute,))]
            floors[key], prefix[key], head[key] = (min(x) for x in zip(*terms))
        return floors[key]

    def first_stage_term(i: int, o, g: int, modes: tuple, pp: int) -> float:
        """a_0 of the module docstring: an MoE model's dense prefix (negative where the dense
        layers are the cheaper), 0 otherwise (floor() first)."""
        return prefix[i, g, o.tp_of(g), modes, _pipelined(pp) if moe else None]

    def last_stage_term(i: int, o, g: int, modes: tuple, pp: int) -> float:
        """a_{pp-1} of the module docstring: the output layer on the last stage's group."""
        return head[i, g, o.tp_of(g), modes, _pipelined(pp) if moe else None]

    # the layer fields a ClassOuter holds for every group (tp: each group's own, pp: each class's)
    fields = [f for f in (MOE_LAYER_FIELDS if moe else DENSE_LAYER_FIELDS) if f not in ("tp", "pp")]
    read_fields = operator.attrgetter(*fields)  # one tuple per outer, read in C
    v_at = fields.index("virtual_stages") if "virtual_stages" in fields else None
    # An outer's rows are read in two steps (issue 33: DeepSeek-V3 on 2,048 H800 with idle GPUs
    # lists 968,605 outers, each its own fields, its rows looked up class by class in Python):
    # its entries, one per (scenario, class), read what its modes key holds (tp, group_tp, the
    # layer fields but v, whether it interleaves, its classes' stage groups: the blocks of one
    # layout at other replica counts share them, 934,256 modes keys by classes tuple, 194,308 by
    # stage groups); each entry's row
    # then reads the slot (v, embedding and loss slots, zero-bubble mode). Each step looks up
    # only the keys a chunk of outers has not met (dict.fromkeys, map in C), and an outer takes
    # the rest in C: the same rows, first met in the same order of outers.
    read_modes = _READ_MODES[moe]
    entry_of: dict[tuple, int] = {}  # (scenario, tp, group_tp, modes, stage groups) -> entry
    entries: list[tuple] = []  # (t row, a_0, a_last) per entry
    entry_outer: list = []  # per entry, an outer of its modes key (_zero_bubble_row reads its modes)
    entries_of: dict[tuple, tuple[int, ...]] = {}  # modes key -> its entries, scenario by scenario
    groups_of: dict[int, tuple] = {}  # id(classes) -> the classes' stage groups
    slot_at: dict[tuple, int] = {}  # slot -> index in `slots`
    slots: list[tuple] = []
    row_at: dict[tuple[int, int], int] = {}  # (entry, slot) -> distinct row index
    shape_of: dict[int, int] = {}  # id(classes) -> index in `shapes` (the tuples outlive this call)
    shapes: list[tuple] = []
    shape_at, v_of, mb_of, paired_of = [], [], [], []  # per outer
    paired_by_ep: dict[int, bool] = {}

    def outer_entries(o) -> tuple[int, ...]:
        """The entries of o's (scenario, class) pairs, scenario by scenario, adding those not
        met so far (`entries`)."""
        raw = read_fields(o)
        # an MoE layer reads v only through whether it interleaves (moe.a2a_overlap_applies), as
        # it reads pp only through _pipelined: the v values the embedding / loss slots bring in
        # (v dividing L + 1 or L + 2) share one floor
        modes = raw if v_at is None else raw[:v_at] + (o.virtual_stages > 1,) + raw[v_at + 1:]
        met = []
        for i in idx:
            for k, c in enumerate(o.classes):
                ck = (i, o.tp, o.group_tp, modes, c.stage_groups)
                e = entry_of.get(ck)
                if e is None:
                    row = kept_entries.get(ck)
                    if row is None:
                        per_group = {g: floor(i, o, k, g, modes) for g in set(c.stage_groups)}
                        row = kept_entries[ck] = (_canonical_row([per_group[g] for g in c.stage_groups]),
                                                  first_stage_term(i, o, c.stage_groups[0], modes, c.pp),
                                                  last_stage_term(i, o, c.stage_groups[-1], modes, c.pp))
                    e = entry_of[ck] = len(entries)
                    entries.append(row)
                    entry_outer.append(o)
                met.append(e)
        return tuple(met)

    def pair_row(e: int, s: int) -> int:
        """The distinct row of entry e at slot s (added if not met)."""
        v, emb, loss, zb = slots[s]
        row = _zero_bubble_row(_slot_row(entries[e], emb, loss, v, L), inst, zb, entry_outer[e])
        return rows.setdefault(row, len(rows))

    def add_chunk(chunk: list) -> None:
        classes = list(map(_CLASSES, chunk))
        ids = list(map(id, classes))
        vs = list(map(_V, chunk))
        classes_at = dict(zip(ids, classes))
        for cid in classes_at:
            if cid not in shape_of:
                shape_of[cid] = len(shapes)
                shapes.append(classes_at[cid])
                groups_of[cid] = tuple(c.stage_groups for c in classes_at[cid])
        keys = list(zip(map(read_modes, chunk), map(groups_of.__getitem__, ids),
                        map((1).__lt__, vs) if v_at is not None else repeat(None)))
        first = dict(zip(reversed(keys), reversed(chunk)))  # each key's first outer
        for key in dict.fromkeys(keys):  # first met first: the entries (and floors) in order
            if key not in entries_of:
                entries_of[key] = outer_entries(first[key])
        slot = list(map(_READ_SLOT, chunk))
        for x in dict.fromkeys(slot):
            if x not in slot_at:
                slot_at[x] = len(slots)
                slots.append(x)
        pairs = list(zip(chain.from_iterable(map(entries_of.__getitem__, keys)),
                         chain.from_iterable(map(repeat, map(slot_at.__getitem__, slot),
                                                 map(n.__mul__, map(len, classes))))))
        for pr in dict.fromkeys(pairs):
            if pr not in row_at:
                row_at[pr] = pair_row(*pr)
        row_of.extend(map(row_at.__getitem__, pairs))
        shape_at.extend(map(shape_of.__getitem__, ids))
        v_of.extend(vs)
        mb_of.extend(map(_MICRO_BATCH, chunk))
        eps = list(map(_EP, chunk))
        for ep in dict.fromkeys(eps):
            if ep not in paired_by_ep:
                paired_by_ep[ep] = pairs_unpipelined_micro_batches(inst.job, ep)
        paired_of.extend(map(paired_by_ep.__getitem__, eps))

    n = len(idx)
    reached = len(outers)
    for j in range(0, len(outers), CLOCK_EVERY):
        if deadline is not None and time.perf_counter() > deadline:
            reached = j
            break
        add_chunk(outers[j:j + CLOCK_EVERY])
    A, S = _kept_split_terms(list(rows), single.setdefault(("split terms",), {}))
    at = np.array(row_of, np.int64)
    out = np.zeros(len(outers))  # the outers past `reached` keep 0
    outers = outers[:reached]
    shape_at = np.array(shape_at, np.int64)
    classes_of = np.array([len(cs) for cs in shapes] or [0], np.int64)[shape_at]  # per outer
    first = np.cumsum(n * classes_of) - n * classes_of  # its first entry in row_of
    v_all = np.array(v_of, float)
    mb_all = np.array(mb_of, np.int64)
    least_all = np.where(np.array(paired_of, bool), 2.0, 1.0)
    for K in sorted(set(classes_of.tolist())):  # not np.unique: it loads numpy.ma (0.02 s)
        js = np.flatnonzero(classes_of == K)
        ix = at[first[js][:, None, None] + np.arange(n * K).reshape(1, n, K)]  # (outers, scenarios, classes)
        of_shape = [sh for sh in range(len(shapes)) if len(shapes[sh]) == K]
        row = np.full(len(shapes), -1, np.int64)
        row[of_shape] = np.arange(len(of_shape))
        per = row[shape_at[js]]
        x = np.array([[c.replicas for c in shapes[sh]] for sh in of_shape], float)[per][:, None, :]
        v = v_all[js][:, None, None]
        pp = np.array([[c.pp for c in shapes[sh]] for sh in of_shape], float)[per][:, None, :]
        # MultiClassProblem.min_micro_batches (paired: the all-to-all overlap's pp = 1 classes)
        least = least_all[js][:, None, None]
        lo = (np.where(v > 1, pp, 1.0) if K == 1 else np.where(v > 1, 2 * pp, np.maximum(pp, least)))
        M = (total // mb_all[js]).astype(float)[:, None, None]
        if dualpipe:  # one class: m/2 max_h (T_h + T_pp-1-h) >= m/pp sum_s T_s >= m/pp S, the
            # bubble and sync terms >= 0 (U_s >= 0: T_s holds the whole backward, B_s >= 2 W_s)
            b = (M / x * S[ix] / pp).max(-1)
        else:
            b = relaxed_s(A[ix], S[ix], np.zeros((len(js), n, 1)), x, lo, M, v, uniform)  # (outers, scenarios)
        out[js] = b.max(-1) if agg == "max" else b @ np.asarray(weights, float)
    # the quantile objective scales each configuration's times (search.problem_of)
    out[:len(outers)] *= objective_factors(inst, outers) if factors is None else factors[:len(outers)]
    return out


def stage_floor_terms(inst, i: int, o, k: int, g: int, layer_plans: bool = False,
                      memo: dict | None = None) -> tuple[float, float, float]:
    """(layer floor, dense-prefix extra a_0, output layer a_last) of a stage of outer o's class k
    on group g, on scenario i (the module docstring's terms), kept in `memo` by what they read:
    the scenario, the group, its tp and the layer's fields (an MoE layer's also whether it is
    pipelined). Under that key each term is kept by what it reads: an MoE layer's floor by
    _moe_layer_key, and the dense prefix layer's floor and the output layer by a dense layer's
    fields (cost/coefficients.dense_layer_floor_s; output_layer_time_s: micro-batch, cp, sp and
    the tp): DeepSeek-V3 on 2,048 H800 asks for 7,821 stage floors, of 3,957 MoE layer keys and
    252 dense ones (issue 33)."""
    moe = inst.model.moe is not None
    memo = {} if memo is None else memo
    tp = o.tp_of(g)
    key = (i, g, tp, (_READ_MOE_FIELDS if moe else _READ_DENSE_FIELDS)(o),
           _pipelined(o.classes[k].pp) if moe else None, layer_plans)
    got = memo.get(key)
    if got is not None:
        return got
    # the site without rings reads of o the group's tp, cp, whether tp is per group and the
    # expert layout (class_coefficients.group_site): one per those, not per floor
    site_key = ("site", i, g, tp, o.cp, bool(o.group_tp), o.ep, o.etp)
    site = memo.get(site_key)
    if site is None:
        site = memo[site_key] = group_site(inst.scenarios[i].cluster, o, g, rings=False)
    lo = stage_outer(class_outers(inst.job, o)[k], site)
    if moe:  # kept by what an MoE layer reads of its pipeline (_moe_layer_key)
        layer_key = _moe_layer_key(inst.job, i, g, lo)
        f = memo.get(layer_key)
        if f is None:
            f = memo[layer_key] = layer_time_floor_s(inst, lo, site)
    else:
        def kept(inst_, o_, site_, net):  # layer_time_floor_s's own pricing, its terms kept
            lt = megatron_layer(inst_, o_, site_, net)
            memo[_layer_key(i, g, tp, key[3])] = (lt, site_.tp or o_.tp)
            return lt
        f = layer_time_floor_s(inst, lo, site, layer_fn=kept)
    dense_key = ("dense", i, g, tp, _READ_DENSE_FIELDS(o))
    dense = memo.get(dense_key)
    if dense is None:
        # DualPipe's terms are its own (cost/dualpipe.py): its bound keeps the layers only
        dense = memo[dense_key] = (dense_layer_floor_s(inst, lo, site),
                                   0.0 if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE
                                   else output_layer_floor_s(inst, lo, site))
    a0 = dense_prefix_floor_s(inst, lo, site, moe_floor_s=f, dense_floor_s=dense[0])
    alast = dense[1]
    if layer_plans:
        from paraplan.cost import partition as P  # layer plans only (issue 33, start-up)
        if P.spatial_temporal_allowed(lo):
            table = P.table_for(inst.group_alone(g, inst.scenarios[i].cluster), lo, site, NetEfficiency())
            opt, _ = optimistic_terms(table, plan_rows(table, P.token_split_allowed(lo)))
            f = min(f, opt.fwd_s + opt.bwd_s)
    memo[key] = (f, a0, alast)
    return f, a0, alast


# placements placed_floor_terms keeps at most (one per class shape and tp choice: the 8 x 8 row's
# configurations mostly differ in their stage order, 1,764 placements for 2,000 of them)
PLACEMENTS_KEPT = 16_384


def placed_floor_terms(inst, i: int, o, k: int, co, memo: dict) -> tuple[np.ndarray, np.ndarray]:
    """(a, d) per stage of class k of outer `o`, priced as `co` (class_coefficients.class_outers),
    on scenario i: what build adds, from the class's placement alone, to the stage terms the
    floors read (stage_floor_terms' a_0 and a_last, coefficients.sync_floor_s' d). a: each
    stage's pipeline hand-offs, the first stage's embedding, ZeRO-3's root unit outside a
    pipeline and the last stage's multi-token prediction less its layer, times the slowest
    rank's wait (build's stage time); d: the end stages' embedding sync and step, the tied
    copy's all-reduce, and FSDP's root units in a pipeline's fill (every stage). They are
    build's own numbers (coefficients.placed_extras on class_coefficients.class_placement, the
    placement pricing uses): none reads the split, the recompute or the schedule, so every
    completion of the configuration pays them, and added to floors of the other terms the sums
    stay floors (float rounding apart: the bounds that read them are lowered by their safety
    margins). On 8 GPU types x 8 nodes (issue 33) they are 0.7-1.6% of an 8-stage pipeline's
    optimum (hand-offs over the links between groups) and up to 7% where the end stages lead
    the sync (0.03-0.14 s of embedding sync). Read under 1F1B and interleaved schedules only (a
    zero-bubble schedule moves and scales the stage terms: zero_bubble.shaped). The placement
    is kept in `memo` by what it reads (search._placement's key), at most PLACEMENTS_KEPT."""
    assert o.zero_bubble is None, "a zero-bubble schedule's stage terms are zero_bubble.shaped's"
    placements = memo.setdefault("placements", {})
    key = (i, o.tp, o.group_tp, o.cp, o.virtual_stages, o.ep, o.etp, o.classes, k)
    pl = placements.get(key)
    if pl is None:
        if len(placements) >= PLACEMENTS_KEPT:
            placements.clear()
        pl = placements[key] = class_placement(inst.scenarios[i].cluster, o, k)
    x = placed_extras(inst, co, pl)
    pp = co.pp
    a = np.zeros(pp) if x.p2p_s is None else np.array(x.p2p_s)
    a[0] += x.embedding_s
    if x.zero3_root_s is not None:
        a += [ag + rs for ag, rs in x.zero3_root_s]
    if x.mtp_fixed_s is not None:
        a[-1] += inst.model.mtp_layers * (sum(x.mtp_fixed_s) + x.head_s)
    d = np.zeros(pp)
    for s, e in x.end_sync_s.items():
        d[s] += e
    if x.fill_root_s is not None:
        d += sum(x.fill_root_s)
    if x.tie_s is not None:
        d[0] += x.tie_s
        d[-1] += x.tie_s
    return a * (1 + x.slow), d


def floor_layer_terms(memo: dict, i: int, o, g: int):
    """(LayerTerms, the tp its stage runs) of the dense layer whose floor stage_floor_terms
    priced for outer o on group g, scenario i, kept in `memo`; None where it has not. The floor
    reads only these (the group's site without rings, DENSE_LAYER_FIELDS): the bound that
    reads memory (unpriced_memory.py) prices the same layer from them, not again."""
    return memo.get(_layer_key(i, g, o.tp_of(g), _READ_DENSE_FIELDS(o)))


def _layer_key(i: int, g: int, tp: int, fields: tuple) -> tuple:
    return ("layer", i, g, tp, fields)


# the layer fields stage_floor_terms keys by, read in C (tp apart: the group's own; pp apart: an
# MoE layer reads only whether there is a pipeline). The same tuples as reading them one by one.
_READ_DENSE_FIELDS = operator.attrgetter(*(f for f in DENSE_LAYER_FIELDS if f != "tp"))
_READ_MOE_FIELDS = operator.attrgetter(*(f for f in MOE_LAYER_FIELDS if f not in ("tp", "pp")))
# an outer's fields floor_bounds_s reads one by one, in C over a chunk of outers: its modes key's
# (tp, group_tp and the layer fields but pp and v; by whether the model is MoE), its slot's
_READ_MODES = {moe: operator.attrgetter("tp", "group_tp", *(f for f in fields if f not in ("tp", "pp", "virtual_stages")))
               for moe, fields in ((True, MOE_LAYER_FIELDS), (False, DENSE_LAYER_FIELDS))}
_READ_SLOT = operator.attrgetter("virtual_stages", "embedding_in_split", "loss_in_split", "zero_bubble")
_CLASSES, _V, _MICRO_BATCH, _EP = (operator.attrgetter(f) for f in ("classes", "virtual_stages", "micro_batch", "ep"))


def _moe_layer_key(job, i: int, g: int, lo) -> tuple:
    """The MoE layer floor's key of stage outer `lo` on group g, scenario i: its fields but the
    pipeline's (MOE_LAYER_FIELDS but pp and v), and of the pipeline all the layer's price
    reads: whether the all-to-all overlaps apply (cost/moe.a2a_overlap_applies and
    dualpipe_applies; a2a_hidden_fraction reads the latter). Where neither overlap is on, the
    pipelined and unpipelined, interleaved and plain configurations share one floor:
    DeepSeek-V3 on 2,048 H800 prices 3,957 MoE layer floors, not 7,821 (issue 33)."""
    return ("moe", i, g, *(getattr(lo, name) for name in MOE_LAYER_FIELDS if name not in ("pp", "virtual_stages")),
            a2a_overlap_applies(job, lo), dualpipe_applies(job, lo))


def _pipelined(pp: int) -> bool:
    """All an MoE layer's price reads of its stage count (MOE_LAYER_FIELDS' pp): whether the
    all-to-all overlaps apply, cost/moe.a2a_overlap_applies (pp == 1, or interleaved) and
    moe.dualpipe_applies (pp > 1). Keyed by pp itself, DeepSeek-V3 on 2,048 H800 priced a
    floor for each of its 17,019 configurations, every lookup a miss (issue 33);
    tests/mixed/test_unpriced_bounds.py checks the floors against pricing each pp alone."""
    return pp > 1


def _canonical_row(t: list[float]) -> tuple[float, ...]:
    """A class's per-stage floors with its interior stages (all but the first and the last) in
    ascending order: the stage-wise pipelines of one layout through its groups in every order
    (24 orders of four groups) share rows, so _split_terms computes each once. Why the terms
    are the same, float for float: only the first and last stages carry stage terms (a_0,
    a_last), so the interior stages are (0, t_s) pairs, and both A = min over splits of
    max_s (a_s + n_s t_s) (balanced_splits: each stage's values a_s + k t_s are computed alone,
    and the split's maximum is the same set of floats whatever the stages' order) and
    S = sum_s a_s + L min_s t_s are symmetric in them."""
    if len(t) <= 3:
        return tuple(t)
    return (t[0], *sorted(t[1:-1]), t[-1])


def _slot_row(t: tuple, e: bool, l: bool, v: int, layers: int) -> tuple:
    """The distinct row (t row, a_0, a_last, v, layers) of a class's floors `t` = (t row, a_0,
    a_last) at v virtual stages. With the embedding / loss counted as a layer slot (the outer's
    embedding_in_split `e`, loss_in_split `l`) the row of its
    relaxation in whole chunks, as one_class.slot_relaxation: stage s holds n'_s = n_s + o_s
    layers of L + e + l, a'_s = a_s - o_s t_s, so a'_s + n'_s t_s = a_s + n_s t_s on every
    split, and the bounds below hold for the flagged splits."""
    row, a0, alast = t
    if e or l:
        a0, alast = a0 - e * row[0], alast - l * row[-1]
    return (row, a0, alast, v, layers + e + l)


def _zero_bubble_row(row: tuple, inst, zero_bubble, o) -> tuple:
    """`row` (t row, a_0, a_last, v, layers) with the share of a pass a zero-bubble schedule
    `zero_bubble` (None, or an outer's zero_bubble; o: an outer of the row's modes)
    keeps (cost/zero_bubble.py): each stage's pass through the fill and drain costs
    T_s - k W_s >= a_s + n_s (1 - k w) t_s, so S = sum_s a_s + L (1 - k w) min_s t_s bounds
    the sum term, and the pacing term (v m - 1) T_s + k W_s is at least (v m - 1) A. Under
    ZBVZeroBubble the V puts the output layer on the first stage (zero_bubble.v_shaped):
    a_last moves to a_0. 1 (and the row as it was) under 1F1B / interleaved."""
    if zero_bubble is None:
        return (*row, 1.0)
    t, a0, alast, v, layers = row
    if zero_bubble is ZeroBubble.V:
        a0, alast = a0 + alast, 0.0
    w = weight_grad_share(inst.model, o.micro_batch, o.tp, o.cp, o.sequence_parallel)
    return (t, a0, alast, v, layers, 1.0 - W_PASSES_SAVED[zero_bubble] * w)


def _kept_split_terms(rows: list[tuple], kept: dict[tuple, tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """_split_terms of `rows`, each row's (A, S) kept in `kept` across calls (the caller's
    memo): a row is all that its terms read, and each is computed row by row (balanced_splits'
    counts are exact whichever way they are read), so a kept pair is the same floats. Row 1 of
    issue 33 (8 types x 8 nodes) reads 43,021 rows in 1,826 calls, 350 of them distinct."""
    new = [r for r in rows if r not in kept]
    if new:
        A, S = _split_terms(new)
        kept.update(zip(new, zip(A.tolist(), S.tolist())))
    got = np.array([kept[r] for r in rows], float).reshape(len(rows), 2)
    return got[:, 0].copy(), got[:, 1].copy()


def _split_terms(rows: list[tuple[tuple[float, ...], float, float, int, int, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(A, S) of each distinct (t row, a_0, a_last, v, layers, keep): the balanced split's
    slowest stage with stage terms a = (a_0, 0, ..., 0, a_last) (one stage: a_0 + a_last), and
    sum_s a_s + L min_s t_s, the layers' part times keep (_zero_bubble_row)."""
    A, S = np.empty(len(rows)), np.empty(len(rows))
    blocks: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for r, (t, _, _, v, layers, _) in enumerate(rows):
        blocks[len(t), v, layers].append(r)
    for (pp, v, layers), rs in blocks.items():
        t = np.array([rows[r][0] for r in rs], float)
        a = np.zeros_like(t)
        a[:, 0] = [rows[r][1] for r in rs]
        a[:, -1] += [rows[r][2] for r in rs]
        A[rs] = (a + balanced_splits(a, t, layers, v) * t).max(axis=1)
        keep = np.array([rows[r][5] for r in rs], float)
        S[rs] = a.sum(axis=1) + layers * t.min(axis=1) * keep
    return A, S
