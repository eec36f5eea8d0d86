"""A bound before pricing that reads memory: the tight bound (one_class.py) of each replica
class on coefficients whose times are floors and whose memory is exact.

solver/search.py prices configurations in the order of the layer-time floors' bound
(unpriced.py), which reads no memory. Near the optimum of a mixed cluster, memory is what
decides most of those it prices: on Llama-3 70B over three GPU types, of the 979
configurations that fit, the priced bound was above the optimum for 528 and the tight bound
(memory caps and the recompute they force) for 826 of the 910 lone classes (issue 33). This
module computes that bound before pricing, for the chunk about to be priced, and the search
leaves unpriced every configuration it proves unable to win.

Per class and scenario, stage s on group g_s gets
    a_s    the floors' stage terms (unpriced.stage_floor_terms: the output layer on the last
           stage, an MoE model's dense prefix on the first: 0 for a dense model) and what the
           class's placement alone gives (unpriced.placed_floor_terms, build's own: each
           stage's pipeline hand-offs, the first stage's embedding)
    t_s    the layer-time floor (coefficients.layer_time_floor_s)
    u_s    (1 + slow) rc_fwd, the forward a full recompute replays, as build prices it without
           ZeRO-3 (build: rc_fwd + z3_b_rc - z3_b with both ZeRO-3 windows 0); 0 with ZeRO-3
           (recompute time is >= 0: one_class.py's docstring)
    g_s    build's per-layer sync (coefficients.sync_floor_s: the gradient reduction over the
           stage's ring on its ring's link, the all-gather after a sharded step, the step)
    d_s    a floor of build's stage sync (sync_floor_s: the last bucket's exposure and ZeRO-3's
           reduce-scatter; placed_floor_terms: the end stages' embedding sync and step, the
           tied copy's all-reduce, FSDP's root units in the fill; the rest, >= 0, left out)
and memory as build gives it (cost/stage_memory.stage_memory, the layer's memory terms from
the same pricing of the group alone: memory reads no link, so they are build's own numbers, at
the in-flight count build prices the class with, class_coefficients.class_outers), each
stage's capacity capped at the search's memory tier as the inner problem caps it
(cost/objective.capped_memory, search.problem_of). Every time coefficient is at most build's
and the memory ones are equal, and one_class.tight_class_terms' tau* (slowest stage), sigma*
(sum of stage times) and delta* (slowest sync) over the splits that fit grow with every time
coefficient (tau_s(n) = a_s + n t_s + u_s rho_s(n), rho_s reads only memory; d_s + n g_s):
they are at most the priced class's, which are at most its slowest stage, its sum and its
slowest sync in any plan that fits. They enter the pipeline's relaxation over micro-batch
vectors as the memory-free A_k, S_k, D do (batched.relaxed_s, exact for one class:
(m - 1/v) tau* + sigma* / v + delta*; with several classes D = max_k delta*_k, as an
iteration pays its slowest stage's sync over every class, batched.py), per scenario,
aggregated as the objective does (max, or weighted: each scenario's bound is at most that
scenario's time in the optimum), times the quantile objective's factor. Where a class fits no
split it is inf: a proof as build's no_split_fits after pricing.

A lone class through several groups is also read with its three terms together
(_lone_joint_s: fill_drain.pipeline_sync_bounds_s, the priced bound's own reading, on these
arrays), and its bound is the larger of the two per scenario. On 8 GPU types x 8 nodes
(issue 33) the configurations left open below the incumbent (2.228 s at p90) are 8-stage
pipelines through 7 types with 16 micro-batches: the split that balances their stages puts
18 layers on each B200 stage and one on the V100's, so their stages' sum is 0.65 s where the
terms read apart give 0.50 s, and their slowest sync (the B200 stages' 18 layers, 0.23 s) 0.16
s. Measured on the 400 least-keyed of them at 30 s of CPU: this bound 2.23-2.40 s against their
optima 2.27-2.47 s (apart: 1.99-2.19 s); 93% of them are now above the incumbent, 7.5% before.
After pricing the same reading (fill_drain.priced_bounds_s: whole layers, memory caps, no
recompute time) equals the split DP's optimum on each of 30 of them checked: neither memory,
recompute nor whole layers decides them. What the floors left out then was each stage's
pipeline hand-offs (0.7-1.6% of these pipelines) and the end stages' embedding sync (up to 7%
where the end stages lead the sync); read since (placed_floor_terms), this bound is the split
DP's optimum (less 1e-12) on 59 of 60 configurations drawn from those it left to be priced.

With the embedding / loss counted as a layer slot, the arrays above are those of a split of
L + e + l layers by one_class.slot_relaxation (a'_s = a_s - o_s t_s, d'_s = d_s - o_s g_s, memory
lowered by the slots' own terms and the short chunk's relief): every split of the
configuration maps to one of the relaxation at the same time and no more memory, and since
every relaxed stage holds n'_s >= v >= o_s layers, a'_s + n'_s t_s = a_s + (n'_s - o_s) t_s
still grows with a_s and t_s (and d'_s + n'_s g_s with d_s): the floors' relaxation is at most
the priced one's, split for split.

On Llama-3 70B over 4 GPU types x 16 nodes (full space) the priced configurations' syncs were
a median 17% of their priced bound, and 29,227 of the 38,360 lone classes priced ran the slots
(issue 33): neither was read here before.

Read for dense models (an MoE layer's memory terms come from cost/moe.py's pricing, and its
dense prefix's from a view of the model: not read here), without zero-bubble schedules or
per-operator partitions; elsewhere 0 (no bound).
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict

import numpy as np

from paraplan.cost import scale
from paraplan.cost.class_coefficients import class_outers, group_site, ring_links
from paraplan.cost.coefficients import (StageCoefficients, in_flight_micro_batches, max_layers_per_stage,
                                        megatron_layer, stage_outer, sync_floor_s)
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.framework import grad_reduce_overlaps
from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost.memory import gathered_per_step
from paraplan.cost.objective import capped_memory
from paraplan.cost.stage_memory import stage_memory
from paraplan.cost.trust import objective_factors
from paraplan.solver.bounds.batched import relaxed_s
from paraplan.solver.bounds.fill_drain import PRICED_SAFETY, pipeline_sync_bounds_s
from paraplan.solver.bounds.one_class import TIGHT_ARRAYS, slot_relaxed_terms, tight_class_terms_of_blocks
from paraplan.solver.bounds.unpriced import floor_layer_terms, placed_floor_terms, stage_floor_terms


def applies(inst, o) -> bool:
    """Whether the module's bound reads outer `o` (else it is 0)."""
    return inst.model.moe is None and o.zero_bubble is None


def memory_floor_bounds_s(inst, outers: list, idx: list[int], agg: str, weights, memo: dict,
                          layer_memo: dict, ceiling_s: float | None = None) -> np.ndarray:
    """The module's bound of each of `outers` (0 where it does not apply), on scenarios `idx`
    aggregated as `agg` with `weights` (solver/search.scenario_weights). `memo`: the stage
    floors' (unpriced.floor_bounds_s), `layer_memo`: the layers' terms and syncs, both kept by
    the caller for `inst`. `ceiling_s`: the lone classes' terms read together (_lone_joint_s,
    most of this function's work where it is read) are read only for the configurations whose
    bound without them is at most this (the caller's incumbent: those above it are settled
    already); None: for every one. Either way each bound is a bound."""
    out = np.zeros(len(outers))
    used = [j for j, o in enumerate(outers) if applies(inst, o)]
    if not used:
        return out
    rows = _rows_by_block(inst, outers, used, idx, memo, layer_memo)
    K = max(len(outers[j].classes) for j in used)
    A, S, D, lone_rows = _block_terms(inst, rows, (len(outers), len(inst.scenarios), K), layer_memo)
    total = inst.job.global_batch
    factor = np.ones(len(outers))
    factor[used] = objective_factors(inst, [outers[j] for j in used])
    apart = np.zeros((len(outers), len(inst.scenarios)))  # a lone class's per-scenario bound, terms apart
    by_count: dict[int, list[int]] = defaultdict(list)  # outers by their class count, bounded at once
    for j in used:
        by_count[len(outers[j].classes)].append(j)
    for k, js in by_count.items():
        a, s = A[js][:, idx, :k], S[js][:, idx, :k]  # (outers, scenarios, classes)
        no_fit = np.isinf(a).any((1, 2))  # some class fits no split: nor does the configuration
        out[np.array(js)[no_fit]] = np.inf
        js = [j for j, out_j in zip(js, no_fit.tolist()) if not out_j]
        if not js:
            continue
        a, s = a[~no_fit], s[~no_fit]
        d = D[js][:, idx, :k].max(-1)[:, :, None]  # the slowest sync of every class
        pp = np.array([[c.pp for c in outers[j].classes] for j in js], float)[:, None, :]
        v = np.array([outers[j].virtual_stages for j in js], float)[:, None, None]
        # MultiClassProblem.min_micro_batches, as unpriced.floor_bounds_s (a dense model: unpaired)
        lo = np.where(v > 1, pp, 1.0) if k == 1 else np.where(v > 1, 2 * pp, pp)
        x = np.array([[c.replicas for c in outers[j].classes] for j in js], float)[:, None, :]
        m = np.array([float(total // outers[j].micro_batch) for j in js])[:, None, None]
        b = relaxed_s(a, s, d, x, lo, m, v, False)  # (outers, scenarios): row by row, as one at a time
        if k == 1:
            apart[np.ix_(js, idx)] = b
        out[js] = aggregate_s(b, agg, weights) * factor[js]
    if lone_rows:  # each scenario's pipeline and sync read together, where they can still matter
        _raise_lone_joint(inst, out, apart, lone_rows, idx, agg, weights, factor, ceiling_s, layer_memo)
    return out


def _block_terms(inst, rows: dict, shape: tuple, layer_memo: dict) -> tuple:
    """The tight class terms (one_class.tight_class_terms) of _rows_by_block's `rows`, each block
    at once: A, S, D of `shape` (outers, scenarios, classes; inf where the class fits no split),
    and per block its rows that _lone_joint_s reads: (v, layers, arrays, js, scenarios, m).
    Each row's terms are its own floats whatever rows it is read with (tight_class_terms_of_blocks
    reads row by row), so they are kept per row (_row_terms): a row's arrays are one object per
    class, scenario and slots while _floor_rows keeps them, and most rows are met again (8 x 8
    row, issue 33: the classes of 15,172 configurations read 4,084 distinct coefficients)."""
    A = np.zeros(shape)
    S, D = np.zeros_like(A), np.zeros_like(A)
    terms = _row_terms(rows, inst.search.full_recompute, layer_memo)
    lone_rows = []
    for (pp, v, layers), items in rows.items():
        tau, sigma, delta, fits = terms[pp, v, layers].T
        fits = fits > 0
        at = ([x[0] for x in items], [x[1] for x in items], [x[2] for x in items])
        A[at] = np.where(fits, tau, np.inf)
        S[at] = np.where(fits, sigma, np.inf)
        D[at] = np.where(fits, delta, np.inf)
        lone = [r for r, x in enumerate(items) if x[4] is not None]
        if lone:
            lone_rows.append((v, layers, _stacked([items[r][3] for r in lone]),
                              np.array([items[r][0] for r in lone]), np.array([items[r][1] for r in lone]),
                              np.array([items[r][4] for r in lone], float)))
    return A, S, D, lone_rows


def _stacked(arrays: list[dict]) -> dict:
    """one_class.TIGHT_ARRAYS of rows `arrays` (each a dict of (pp,) arrays), stacked (rows, pp)
    (np.array of a list: np.stack's copy, in C)."""
    return {f: np.array([x[f] for x in arrays]) for f in TIGHT_ARRAYS}


def _row_terms(rows: dict, allow_full_recompute: bool, layer_memo: dict) -> dict:
    """Per block of _rows_by_block's `rows`, (rows, 4): each row's (tau, sigma, delta, fits as
    1.0 / 0.0) of one_class.tight_class_terms. A row's are kept in `layer_memo`
    (_per_configuration) by its arrays' identity (the entry holds them, so that their id names
    them while it lives) and the block's (pp, v, layers); those not kept are read, the blocks of
    one (v, layers) at once (tight_class_terms_of_blocks: the same floats row by row)."""
    store = _per_configuration(layer_memo, "class terms")
    out, todo = {}, defaultdict(list)  # todo: (v, layers) -> [(block, its rows not kept)]
    for key, items in rows.items():
        got = out[key] = np.empty((len(items), 4))
        missed = []
        for r, x in enumerate(items):
            hit = _kept_row(store, x[3], (*key, allow_full_recompute))
            if hit is None:
                missed.append(r)
            else:
                got[r] = hit
        if missed:
            todo[key[1:]].append((key, missed))
    for (v, layers), blocks in todo.items():
        read = tight_class_terms_of_blocks([_stacked([rows[key][r][3] for r in missed]) for key, missed in blocks],
                                           layers, v, allow_full_recompute)
        for (key, missed), (tau, sigma, delta, fits) in zip(blocks, read):
            new = np.column_stack([tau, sigma, delta, fits.astype(float)])
            out[key][missed] = new
            for r, row in zip(missed, new.tolist()):
                arrays = rows[key][r][3]
                _keep(store, (id(arrays), *key, allow_full_recompute), (arrays, row))
    return out


def _kept_row(store: OrderedDict, arrays: dict, key: tuple) -> list | None:
    """The terms _row_terms kept for the row of `arrays` under `key` (its block's, the recompute
    flag), else None."""
    hit = _recall(store, (id(arrays), *key))
    return hit[1] if hit is not None and hit[0] is arrays else None


def _rows_by_block(inst, outers: list, used: list[int], idx: list[int], memo: dict, layer_memo: dict) -> dict:
    """memory_floor_bounds_s' rows of the classes of outers `used`, by block: (pp, v, layers of
    the slot relaxation) -> [(j, scenario, class, arrays, m)], m the micro-batch count of a lone
    class through several groups (_lone_joint_s reads it: fixed, class_outers' M / x), else None."""
    net = NetEfficiency()
    slow = scale.slowest_rank_fraction(inst.cluster.num_gpus, net.rank_jitter_rel)
    reserve = inst.search.memory_reserve_bytes
    rows: dict[tuple[int, int, int], list] = defaultdict(list)
    for j in used:
        o = outers[j]
        for k, co in enumerate(class_outers(inst.job, o)):
            m = co.num_micro_batches if len(o.classes) == 1 and len(set(o.classes[0].stage_groups)) > 1 else None
            for i, (layers, arrays) in zip(idx, _class_rows(inst, o, k, co, idx, memo, layer_memo, net, slow,
                                                            reserve)):
                rows[co.pp, co.virtual_stages, layers].append((j, i, k, arrays, m))
    return rows


def _raise_lone_joint(inst, out: np.ndarray, apart: np.ndarray, lone_rows: list, idx: list[int], agg: str,
                      weights, factor: np.ndarray, ceiling_s: float | None, layer_memo: dict) -> None:
    """Raises `out` (in place) of the lone classes through several groups whose bound is finite
    and at most `ceiling_s` (None: every one) to their terms read together (_lone_joint_s) where
    that is more than `apart`, their per-scenario bound with the terms apart."""
    joint = np.zeros_like(apart)
    raised = set()
    for v, layers, c, js, iss, m in lone_rows:
        r = np.flatnonzero(np.isfinite(out[js]) & (True if ceiling_s is None else out[js] <= ceiling_s))
        if len(r):
            joint[js[r], iss[r]] = _lone_joint_s({f: x[r] for f, x in c.items()}, layers, v, m[r],
                                                 inst.search.full_recompute, layer_memo)
            raised.update(js[r].tolist())
    if raised:
        js = sorted(raised)
        out[js] = aggregate_s(np.maximum(apart[np.ix_(js, idx)], joint[np.ix_(js, idx)]), agg, weights) * factor[js]


def aggregate_s(b: np.ndarray, agg: str, weights) -> np.ndarray:
    """Per row of b (outers, scenarios), its bound over the scenarios as the objective aggregates
    them: the worst ("max"), or the weighted sum (each scenario's bound is at most that
    scenario's time in the optimum)."""
    if agg == "max":
        return b.max(-1)
    w = np.asarray(weights, float)
    return np.array([float(row @ w) for row in b])


def lone_class_rows(inst, o, idx: list[int], memo: dict, layer_memo: dict) -> tuple:
    """(the Outer its lone class is priced as, class_coefficients.class_outers; per scenario of
    `idx`, _class_rows' (layers, arrays)) of outer `o` of one class: the arrays the module's
    bound reads of it (solver/bounds/order_free.py reads them for every order of its middle
    groups). `memo`, `layer_memo`: as memory_floor_bounds_s's."""
    net = NetEfficiency()
    slow = scale.slowest_rank_fraction(inst.cluster.num_gpus, net.rank_jitter_rel)
    co = class_outers(inst.job, o)[0]
    return co, _class_rows(inst, o, 0, co, idx, memo, layer_memo, net, slow, inst.search.memory_reserve_bytes)


def _lone_joint_s(c: dict, layers: int, v: int, m: np.ndarray, allow_full_recompute: bool,
                  layer_memo: dict) -> np.ndarray:
    """Per row of a lone class's arrays `c` (one_class.TIGHT_ARRAYS stacked, (N, pp): the
    module's floors, syncs and build's memory, slot-relaxed), fill_drain.pipeline_sync_bounds_s:
    its slowest stage, its stages' sum and its slowest sync read together over the splits of
    `layers` layers that memory allows (its caps are build's own: max_layers_per_stage on the
    same memory terms, as fill_drain._caps reads them), with m (N,) micro-batches.
    tight_class_terms bounds the three apart, and the split that balances a pipeline through
    several GPU types puts most layers on the fastest groups, whose sum and sync then lead
    (issue 33, 8 types x 8 nodes: 8 stages on 7 types, m = 16, apart 1.99 s, together 2.23 s,
    the optimum 2.28 s). The floors are at most build's terms, so this is at most the priced
    class's fill_drain.priced_bounds_s, at most its optimum (lowered by fill_drain.PRICED_SAFETY
    as that is). Through one group the stages differ only in their end terms and memory, and
    the three apart lose little: callers read it through several groups only. Each row kept in
    `layer_memo` by its numbers (the configurations of other stage orders, recompute modes or
    slots often give the same rows: about half of them on the 8-type row), at most
    PER_CONFIGURATION_ENTRIES of them (_per_configuration)."""
    ckpt = c["layer_ckpt_bytes"] if allow_full_recompute else c["layer_act_bytes"]
    caps = max_layers_per_stage(c["layer_state_bytes"], c["layer_act_bytes"], ckpt, c["capacity_bytes"],
                                c["stage_mem_bytes"], v, layers).astype(float)
    terms = (c["stage_time_s"], c["layer_time_s"], c["recompute_time_s"], caps, c["stage_sync_time_s"],
             c["layer_sync_time_s"])
    row = np.concatenate([*terms, m[:, None]], axis=1)
    keys = [(layers, v, r.tobytes()) for r in row]
    store = _per_configuration(layer_memo, "joint")
    out = np.array([_recall(store, k, np.nan) for k in keys])
    todo = np.flatnonzero(np.isnan(out))
    if len(todo):
        got = pipeline_sync_bounds_s(*(x[todo] for x in terms), np.full(len(todo), float(v)), m[todo],
                                     layers) * (1 - PRICED_SAFETY)
        out[todo] = got
        for r, b in zip(todo.tolist(), got.tolist()):
            _keep(store, keys[r], b)
    return out


# entries of each per-configuration kind (_per_configuration) a search keeps at most: the
# least recently read go first. Their keys are a configuration's (the joint reading's a row of
# a few hundred floats), so they grew with the search: the 8-type row's RSS rose from 0.67 to
# 0.89 GiB over 120 s of CPU (issue 33); the reuse they serve is mostly among the configurations
# of one layout, listed and bounded together
PER_CONFIGURATION_ENTRIES = 16_384


def _per_configuration(layer_memo: dict, kind: str) -> OrderedDict:
    """The store of `kind` ("joint", "floor coefficients", "memory", "class terms") in
    `layer_memo`: what this module keeps per configuration, at most PER_CONFIGURATION_ENTRIES,
    least recently read dropped first (_recall, _keep)."""
    store = layer_memo.get(("per configuration", kind))
    if store is None:
        store = layer_memo["per configuration", kind] = OrderedDict()
    return store


def _recall(store: OrderedDict, key, default=None):
    """store[key], marked as read last, or `default`."""
    hit = store.get(key, default)
    if hit is not default:
        store.move_to_end(key)
    return hit


def _keep(store: OrderedDict, key, value) -> None:
    """store[key] = value, dropping the least recently read past PER_CONFIGURATION_ENTRIES."""
    store[key] = value
    if len(store) > PER_CONFIGURATION_ENTRIES:
        store.popitem(last=False)


def _class_rows(inst, o, k: int, co, idx: list[int], memo: dict, layer_memo: dict, net, slow: float,
                reserve: float) -> list[tuple[int, dict]]:
    """Per scenario of `idx`, (layers, the tight bound's arrays, one_class.TIGHT_ARRAYS) of class
    k of `o`, priced as `co` (class_coefficients.class_outers): the module docstring's floors,
    syncs and build's memory, capped at the search's memory tier; with the embedding / loss as
    slots, those of its slot relaxation (one_class.slot_relaxation) and its L + e + l layers.
    The coefficients before the slot relaxation read no slot (_floor_coefficients): the
    configurations of a block that differ only in their slots share them."""
    out = []
    e, l = co.embedding_in_split, co.loss_in_split
    for c_floor, by_slots in _floor_rows(inst, o, k, co, idx, memo, layer_memo, net, slow, reserve):
        arrays = by_slots.get((e, l))
        if arrays is None:  # slot_relaxation's terms, with co's slots (c_floor's outer may have others)
            arrays = by_slots[e, l] = {**by_slots[False, False], **slot_relaxed_terms(c_floor, e, l)}
        out.append((c_floor.layers + e + l, arrays))
    return out


def _floor_rows(inst, o, k: int, co, idx: list[int], memo: dict, layer_memo: dict, net, slow: float,
                reserve: float) -> list[tuple[StageCoefficients, dict]]:
    """Per scenario of `idx`, (_class_rows' coefficients of class k of `o` before the slot
    relaxation, capped at the memory tier; by slots (embedding, loss), their
    one_class.TIGHT_ARRAYS by name, (False, False)'s read with them and the others by
    _class_rows where first asked: one object each, read once, 15,172 reads of 4,084 on the
    8 x 8 row, issue 33, whose identity _row_terms keys by), kept in `layer_memo`
    (_per_configuration: the most recently read) by what they read: the stage
    memory's key (_stage_memory), the floors' (the layer's fields and each group's tp), the
    syncs' (sync_key: the replicas), what it reads of the other classes (_others_key: their
    ring and where its stages sit among theirs) and the memory tier;
    not the embedding / loss slots, which only the relaxation reads, nor the class's place in
    `o` (their `outer` is the first configuration's met: read its slots from `co`)."""
    c = o.classes[k]
    groups = sorted(set(c.stage_groups))
    mkey = _memory_key(o, co, c.stage_groups, groups)
    key = (tuple(idx), *mkey, o.replicas, _others_key(inst, o, k, groups, idx, layer_memo),
           inst.search.memory_fill_cap, reserve, slow)
    store = _per_configuration(layer_memo, "floor coefficients")
    hit = _recall(store, key)
    if hit is not None:
        return hit
    where = [groups.index(g) for g in c.stage_groups]

    def terms(i: int, g: int):
        return layer_terms(inst, o, co, i, g, memo, layer_memo, net)
    at = np.array(where, np.int64)
    inflight = in_flight_micro_batches(co.pp, co.num_micro_batches, co.virtual_stages)
    mem = _stage_memory(inst, o, co, mkey, groups, where, inflight, idx[0], terms, reserve, layer_memo)
    zeros = np.zeros(co.pp)
    out = []
    for i in idx:
        floors = [stage_floor_terms(inst, i, o, k, g, False, memo) for g in groups]
        lts = [terms(i, g)[0] for g in groups]
        # the stage terms the placement alone gives (hand-offs, embedding, its sync: build's own)
        a, d = placed_floor_terms(inst, i, o, k, co, layer_memo)
        a[0] += floors[where[0]][1]
        a[-1] += floors[where[-1]][2]
        u = (zeros if o.zero == 3 else
             np.array([lt.rc_fwd_s for lt in lts])[at] * (1 + slow))
        syncs = np.array([sync_terms(inst, o, co, i, g, lt, layer_memo, net) for g, lt in zip(groups, lts)])[at]
        c_floor = StageCoefficients(
            outer=co, layers=inst.model.layers, layer_time_s=np.array([f[0] for f in floors])[at],
            recompute_time_s=u, stage_time_s=a, layer_sync_time_s=syncs[:, 0],
            stage_sync_time_s=syncs[:, 1] + d, layer_state_bytes=mem.layer_state_bytes,
            layer_act_bytes=mem.layer_act_bytes, layer_ckpt_bytes=mem.layer_ckpt_bytes,
            stage_mem_bytes=mem.stage_mem_bytes, capacity_bytes=mem.capacity_bytes, in_flight=inflight)
        c_floor = capped_memory(c_floor, inst.search.memory_fill_cap, reserve)
        out.append((c_floor, {(False, False): {f: getattr(c_floor, f) for f in TIGHT_ARRAYS}}))
    _keep(store, key, out)
    return out


def _others_key(inst, o, k: int, groups: list[int], idx: list[int], layer_memo: dict) -> tuple | None:
    """What _floor_coefficients of class k of `o` (on `groups`) reads of the other classes,
    beside _memory_key: None for a lone class; with several, the class's replicas, the ranks
    the earlier classes take before it on each of its groups (class_placement's first rank
    there, in replicas of its stages), o.tp, and per scenario of `idx` the ring they share
    (class_coefficients.group_site's dp and edp links: with several classes one link for all
    their groups, the least bandwidth and most latency over every group they use; the syncs
    and the placement's sites read only it of the other classes). The classes of another
    configuration of the same such key then share the coefficients: 8 types x 8 nodes, 14,060
    classes of several-class configurations read 2,982 (issue 33)."""
    if len(o.classes) == 1:
        return None
    c = o.classes[k]
    before = tuple(sum(e.replicas * e.stage_groups.count(g) for e in o.classes[:k]) for g in groups)
    return c.replicas, before, o.tp, o.ep, o.etp, _shared_rings(inst, o, idx, layer_memo)


def _shared_rings(inst, o, idx: list[int], layer_memo: dict) -> tuple:
    """Per scenario of `idx`, the (dp, edp) links of the ring the classes of `o` share, read
    once per configuration: the last one read is kept with `o` itself, as its classes are read
    one after another (_ring_site's key hashes every class: 8 types x 8 nodes, 15,172 classes
    looked up 19,136 sites)."""
    last = layer_memo.get("shared rings")
    if last is None:
        last = layer_memo["shared rings"] = IdentityCache(1)
    return last.read((id(o), tuple(idx)), o, _read_shared_rings, inst, o, idx)


def _read_shared_rings(inst, o, idx: list[int]) -> tuple:
    """class_coefficients.ring_links of the classes of `o` per scenario of `idx`: group_site's
    dp and edp links, not its whole site (issue 33, 8 x 8 row: 1.2% of its CPU built sites)."""
    anchor = o.classes[0].stage_groups[0]  # any group of the classes: the same ring
    return tuple(ring_links(inst.scenarios[i].cluster, o, anchor) for i in idx)


def _memory_key(o, co, stage_groups: tuple, groups: list[int]) -> tuple:
    """What cost/stage_memory.stage_memory reads of class `co` of outer `o` (its stages on
    `stage_groups`, the distinct ones `groups`): the stages' groups and each one's tp, the
    layer's key (layer_terms: cp, micro-batch, sp, recompute, whether tp is per group), ZeRO, the
    pipeline (pp and the in-flight counts, which read m and v) and the ring's size."""
    return (stage_groups, tuple(o.tp_of(g) for g in groups), o.cp, o.micro_batch, o.sequence_parallel,
            o.recompute, bool(o.group_tp), co.zero, co.pp, co.num_micro_batches, co.virtual_stages, o.replicas * o.cp)


def _stage_memory(inst, o, co, mkey: tuple, groups: list[int], where: list[int], inflight: np.ndarray,
                  i: int, terms, reserve: float, layer_memo: dict):
    """cost/stage_memory.stage_memory of class `co` of outer `o` on scenario i (stage s on
    groups[where[s]]; `terms(i, g)`: layer_terms), kept in `layer_memo` (_per_configuration)
    by what it reads
    (`mkey`: _memory_key): the configurations that differ only in their embedding / loss slots,
    or in what the floors and syncs read beside it, share one (issue 33)."""
    key = (i, *mkey)
    store = _per_configuration(layer_memo, "memory")
    hit = _recall(store, key)
    if hit is None:
        first = [terms(i, g) for g in groups]
        hbm = [inst.scenarios[i].cluster.groups[g].gpu.hbm_bytes for g in groups]
        hit = stage_memory(inst, co, [x for x, _ in first], where, [t for _, t in first], hbm,
                           o.replicas * o.cp, inflight, reserve)
        _keep(store, key, hit)
    return hit


def layer_terms(inst, o, co, i: int, g: int, memo: dict, layer_memo: dict, net) -> tuple:
    """(the layer's LayerTerms on group g, scenario i, its tp) for outer `o` priced as `co`:
    megatron_layer on the group's site as the floors price it (group_site without rings),
    kept in `layer_memo` by what it reads (the site without rings reads of o the group's tp,
    cp and whether tp is per group); `memo`: the floors' (unpriced.floor_layer_terms)."""
    key = (i, g, o.tp_of(g), o.cp, o.micro_batch, o.sequence_parallel, o.recompute, bool(o.group_tp))
    hit = layer_memo.get(key)
    if hit is None:  # the floors' own pricing of it, where they priced it (most do)
        hit = floor_layer_terms(memo, i, o, g)
        if hit is not None:
            layer_memo[key] = hit
    if hit is None:
        site = group_site(inst.scenarios[i].cluster, o, g, rings=False)
        hit = layer_memo[key] = (megatron_layer(inst, stage_outer(co, site), site, net), site.tp or co.tp)
    return hit


def sync_key(inst, o, i: int, g: int, sp: bool, rc, zero: int, pp: int, v: int) -> tuple:
    """sync_terms' key of the stages on group g, scenario i, of outer `o` (or of a block of
    outers that differ from it only in their sequence-parallel flag, recompute mode, ZeRO stage
    and v) with these `sp`, `rc`, `zero` and `v`, its class at `pp` stages. Of the pipeline,
    coefficients._layer_costs reads only whether ZeRO-3 gathers per step and whether the
    reduction overlaps (keyed by pp and v, the 4 x 16 row's layouts priced 60,000 syncs)."""
    lone = len(o.classes) == 1
    return ("sync", i, g, o.tp_of(g), o.cp, o.micro_batch, sp, rc, bool(o.group_tp) if lone else o.group_tp,
            zero, gathered_per_step(zero, pp), _overlaps(inst.job, pp, v, zero), o.replicas,
            None if lone else o.classes)


def _overlaps(job, pp: int, v: int, zero: int) -> bool:
    """framework.grad_reduce_overlaps, which reads of pp and v only whether each is 1 (kept by
    those: 212,000 calls took 9 s of the 4 x 16 row's profile)."""
    return _OVERLAPS.read((id(job), pp == 1, v == 1, zero), job, grad_reduce_overlaps, job, pp, v, zero)


_OVERLAPS = IdentityCache(4096)  # many instances in a test session


def sync_terms(inst, o, co, i: int, g: int, lt, layer_memo: dict, net) -> tuple[float, float]:
    """(g, d) of coefficients.sync_floor_s for the stages of `o`'s class priced as `co` on
    group g, scenario i (its ring's link: class_coefficients.group_site), from the layer's
    terms `lt` (megatron_layer reads no data-parallel link), kept in `layer_memo` by what they
    read: the layer's fields, ZeRO, the pipeline (whether ZeRO-3 gathers per step and the
    reduction overlaps) and the ring (a lone class's lies in its group: its size, so of the
    tp per group only the group's own; several classes' joins theirs, at each group's tp)."""
    key = sync_key(inst, o, i, g, o.sequence_parallel, o.recompute, o.zero, co.pp, co.virtual_stages)
    hit = layer_memo.get(key)
    if hit is None:
        site = _ring_site(inst, o, i, g, layer_memo)
        hit = layer_memo[key] = sync_floor_s(inst, stage_outer(co, site), site, o.replicas * o.cp, net,
                                             layer_fn=lambda *_: lt)
    return hit


def _ring_site(inst, o, i: int, g: int, layer_memo: dict):
    """class_coefficients.group_site of `o`'s stages on group g, scenario i, kept in
    `layer_memo` by what it reads of `o`: the group's tp, cp, whether tp is per group, ep and
    etp, and the ring: a lone class's replicas (its ring lies in its group), several classes'
    shapes at each group's tp. sync_terms' keys also read the layer's fields, ZeRO and the
    pipeline, which the site does not (8 types x 8 nodes: 16,775 sites built for 27,976
    syncs read)."""
    ring = o.classes[0].replicas if len(o.classes) == 1 else (o.classes, o.tp, o.group_tp)
    key = ("ring site", i, g, o.tp_of(g), o.cp, bool(o.group_tp), o.ep, o.etp, ring)
    hit = layer_memo.get(key)
    if hit is None:
        hit = layer_memo[key] = group_site(inst.scenarios[i].cluster, o, g)
    return hit
