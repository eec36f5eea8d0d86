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

Only for dense models (an MoE layer's floor also reads ep, etp, pp and v) and not under
DualPipe, torch's zero-bubble schedules (whose bound before pricing takes a weight-gradient
share off the layers' sum, unpriced._zero_bubble_row) or the uniform split: search.py lists
every block there.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from paraplan.solver.bounds.batched import balanced_splits, relaxed_s
from paraplan.solver.bounds.fill_drain import TIE_MARGIN, fill_drain_s
from paraplan.solver.bounds.unpriced import floor_bounds_s, stage_floor_terms
from paraplan.solver.bounds.stage_families import group_factor
from paraplan.solver.partition_plans import enabled as partitions_enabled


def _factor_memo(inst):
    """The least quantile factor of a block's ZeRO stages (trust.objective_factor_of reads the
    GPU types used, ZeRO, cp and the deepest class: kept by those)."""
    factors: dict[tuple, float] = {}
    reads: dict[int, tuple] = {}  # id(classes) -> (groups used, deepest class up to 2)

    def least(b) -> float:
        got = reads.get(id(b.classes))
        if got is None or got[0] is not b.classes:  # the blocks hold their classes alive
            got = reads[id(b.classes)] = (b.classes, tuple(sorted({g for c in b.classes for g in c.stage_groups})),
                                          min(max(c.pp for c in b.classes), 2))
        _, used, deep = got
        out = float("inf")
        for z in b.tally.zeros:
            key = (used, z, min(b.cp, 2), deep)
            if key not in factors:
                factors[key] = group_factor(inst, used, z, b.cp, deep, factors)
            out = min(out, factors[key])
        return out
    return least


def block_bounds_s(inst, blocks: list, idx: list[int], agg: str, weights, memo: dict | None = None) -> np.ndarray:
    """The module's bound of each block (solver/space.OuterBlock) of `inst`, on scenarios `idx`
    aggregated as `agg` (solver/search.scenario_weights); inf for a block of no configuration.
    `memo`: unpriced.floor_bounds_s's."""
    out = np.full(len(blocks), np.inf)
    least_factor = _factor_memo(inst)
    layer_plans = partitions_enabled(inst)  # the layer plans' floors (module docstring)
    # representatives by the flags their floors take the least over (a call of floor_bounds_s each)
    reps: dict[tuple, list] = defaultdict(list)  # (sp flags, recompute modes) -> [(block, outer, factor)]
    for bi, b in enumerate(blocks):
        ty = b.tally
        if ty.first is None:
            continue
        factor = least_factor(b)
        _, zero, _, rc, ep, etp, _, _ = ty.first
        for v, emb, loss in ty.vslots:
            reps[ty.sps, b.recompute].append((bi, b.outer(ty.sps[0], zero, v, rc, ep, etp, emb, loss), factor))
    for (sps, rcs), items in reps.items():
        lbs = floor_bounds_s(inst, [o for _, o, _ in items], idx, agg, weights, layer_plans=layer_plans,
                             sp_values=sps, recompute_values=rcs, factors=np.array([f for _, _, f in items]), memo=memo)
        np.minimum.at(out, np.array([bi for bi, _, _ in items], np.int64), lbs)
    return out


def partial_bounds_s(inst, partials: list, idx: list[int], agg: str, weights,
                     memo: dict | None = None, per_block: dict | None = None) -> np.ndarray:
    """A lower bound of every configuration of each partial layout (solver/space.Partial), on
    scenarios `idx` aggregated as `agg`: of the other families the least block bound
    (block_bounds_s) of its layout; of a stage-wise one, through its groups in every order,
    one bound per representative (last group g, stage counts, micro-batch size), which holds
    for every order ending on g (stage_bound_rows says why); inf for one of no configuration.
    `per_block`: where given, each stage-wise representative's own bound is kept in it, under
    representative_key (partial index, its stage groups sorted, last group, micro-batch size):
    the bound of every block of the partial layout with that key (stage_bound_rows)."""
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
        rb = stage_bound_rows(inst, rows, idx, agg, weights, memo)
        np.minimum.at(out, np.array(row_owner, np.int64), rb)
        if per_block is not None:
            for i, blk, lb in zip(row_owner, rows, rb.tolist()):
                per_block[representative_key(i, blk)] = lb
    return out


def representative_key(i: int, blk) -> tuple:
    """The key of a stage-wise block of partial layout i that its representative's bound holds
    for (partial_bounds_s): its groups' stage counts (the sorted stage groups), its last group
    and its micro-batch size; the order of the stages before the last is not read."""
    groups = blk.classes[0].stage_groups
    return i, tuple(sorted(groups)), groups[-1], blk.micro_batch


def stage_bound_rows(inst, blocks: list, idx: list[int], agg: str, weights, memo: dict | None = None) -> np.ndarray:
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
    fill_drain.TIE_MARGIN, so a layout holding a plan that ties the incumbent is still listed."""
    L, gb = inst.model.layers, inst.job.global_batch
    n = len(idx)
    out = np.full(len(blocks), np.inf)
    least_factor = _factor_memo(inst)
    layer_plans = partitions_enabled(inst)  # the layer plans' floors (module docstring)
    # (scenario, group, its tp, cp, micro-batch, sp flags, recompute modes) -> (t_g, h_g)
    per_group: dict[tuple, tuple[float, float]] = {}
    by_pp: dict[int, list] = defaultdict(list)
    # per stage-group tuple: its distinct groups and each stage's index among them, read once
    # (the 1,885 blocks of GPT-3 175B / 1,024 A100 repeat a few dozen tuples of up to 96 stages)
    places: dict[tuple, tuple] = {}
    # _slot_terms per (the block's (v, slots) modes, whether it runs through several groups):
    # the blocks repeat a few dozen of them
    slot_terms: dict[tuple, tuple] = {}
    for bi, b in enumerate(blocks):
        ty = b.tally
        if ty.first is None:
            continue
        c = b.classes[0]
        place = places.get(c.stage_groups)
        if place is None:
            uniq = tuple(dict.fromkeys(c.stage_groups))
            place = places[c.stage_groups] = (uniq, np.array([uniq.index(g) for g in c.stage_groups]))
        uniq, where = place
        t = np.empty((n, c.pp))
        h = np.empty(n)
        alts = None
        for si, i in enumerate(idx):
            tg = {}
            for g in uniq:
                key = (i, g, b.tp_of(g), b.cp, b.micro_batch, ty.sps, b.recompute)
                got = per_group.get(key)
                if got is None:
                    if alts is None:
                        _, zero, _, _, ep, etp, _, _ = ty.first
                        alts = [b.outer(sp, zero, 1, rc, ep, etp, False, False) for sp in ty.sps for rc in b.recompute]
                    terms = [stage_floor_terms(inst, i, o, 0, g, layer_plans, memo) for o in alts]
                    got = per_group[key] = (min(x[0] for x in terms), min(x[2] for x in terms))
                tg[g] = got
            t[si] = tg[uniq[0]][0] if len(uniq) == 1 else np.array([tg[g][0] for g in uniq])[where]
            h[si] = tg[c.stage_groups[-1]][1]
        slot_key = (ty.vslots, len(uniq) > 1)
        slots = slot_terms.get(slot_key)
        if slot_key not in slot_terms:
            slots = slot_terms[slot_key] = _slot_terms(*slot_key)
        e, l_, vs, plain = slots
        by_pp[c.pp].append((bi, t, h, e, l_, least_factor(b), vs, c.replicas, gb // b.micro_batch, plain))
    for pp, items in by_pp.items():
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
        x = np.array([x[7] for x in items], float)[:, None, None]
        M = np.array([x[8] for x in items], float)[:, None, None]
        best = np.full((N, n), np.inf)
        for v in sorted({v for it in items for v in it[6]}):
            has = np.array([v in it[6] for it in items])
            lo = np.full((N, 1, 1), float(pp) if v > 1 else 1.0)
            b = relaxed_s(A[:, :, None], S[:, :, None], np.zeros((N, n, 1)), x, lo, M, float(v), False)
            b = np.maximum(b, _fill_drain_rows(items, t, h, L, v, has))
            best = np.where(has[:, None], np.minimum(best, b), best)
        agg_b = best.max(-1) if agg == "max" else best @ np.asarray(weights, float)
        out[[x[0] for x in items]] = agg_b * np.array([x[5] for x in items])
    return out


def _slot_terms(vslots: tuple, several_groups: bool) -> tuple[int, int, tuple, frozenset]:
    """(e, l, the v values in order, the v fill_drain reads) of a block's (v, embedding slot,
    loss slot) modes, as stage_bound_rows reads them: e and l the most the modes flag; the v
    whose every configuration runs no embedding / loss slot (fill_drain reads those), none
    through one group (there every split's sum is h + L t, so J is A and S's bound)."""
    vs = tuple(dict.fromkeys(x[0] for x in vslots))
    plain = frozenset(v for v in vs if several_groups and not any(x[1] or x[2] for x in vslots if x[0] == v))
    return int(max(x[1] for x in vslots)), int(max(x[2] for x in vslots)), vs, plain


def _fill_drain_rows(items: list, t: np.ndarray, h: np.ndarray, layers: int, v: int, has: np.ndarray) -> np.ndarray:
    """(rows, scenarios): fill_drain.fill_drain_s / v of the rows (stage_bound_rows' items, of
    floors t: (rows, scenarios, pp) and output layer h on the last stage) that run v with no
    embedding / loss slot, at their one class's micro-batch count m = M / x (v m in the
    interleaved form: fill_drain's module docstring); 0 (no bound) elsewhere. The stages before
    the last enter as kinds (one per distinct floor, with its count), so the bound is symmetric
    in them as A is, and holds for every order the row stands for; lowered by TIE_MARGIN."""
    N, n, pp = t.shape
    out = np.zeros((N, n))
    rows = [k for k, it in enumerate(items) if has[k] and v in it[9]]
    if not rows:
        return out
    m = np.repeat(np.array([max(items[k][8] / items[k][7], 1.0) * v for k in rows], float), n)
    flat = t[rows].reshape(-1, pp)
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
    count[:, -1], tk[:, -1], ak[:, -1] = 1.0, flat[:, -1], h[rows].reshape(-1)
    j = fill_drain_s(ak, tk, count, layers, m)
    out[rows] = j.reshape(len(rows), n) / v * (1 - TIE_MARGIN)
    return out
