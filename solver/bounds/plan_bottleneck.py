"""The least slowest stage, stages' sum and slowest sync of a replica class over every combination
of its groups' layer plans, read group by group (issue 33, solver/class_partitions.py's buckets
of layer plans).

A class's stages on group g all run the layer plan of its (class, group) choice, and a stage's
coefficients read that plan only (class_partitions' module docstring). one_class.
tight_class_terms bounds the slowest stage of one combination by tau*, the least level Z at
which every stage holds one chunk of v layers within Z and the stages hold L // v chunks
together (stage s holds the chunks j with tau_s(j v) <= Z, a prefix: tau_s is non-decreasing,
and none past its memory cap). A bucket of plans read at its optimistic coefficients
(partition_plans.optimistic_coefficients) takes its time from one plan and its memory from
another: the fastest plans replicate weights (token splits) and so hold fewer layers. On the
three-type, two-site Llama-3 70B with partitions the bound of a combination of 32-plan buckets
was 15.56-15.61 s where the least bound over its combinations of plans was 16.41-16.60 s
(measured on its lowest first-level nodes), and its tau* term 4-5% below theirs.

The least tau* over the combinations of plans (one plan per group from its bucket B_g) is read
without listing them: at a level Z the groups hold their chunks independently (a stage's chunks
within Z read its own group's plan), so some combination holds L // v chunks within Z iff
    sum_g max_(p in B_g) C_g^p(Z) >= L // v,
with C_g^p(Z) the chunks group g's stages hold within Z under plan p (-inf where one of them
holds none). Each max_p C_g^p is a non-decreasing step function of Z (`group_steps`, a step per
chunk count at most); the least Z at which their sum reaches L // v is one of their steps
(`least_levels`, the full reading in tests/oracles/bounds.py).
That is the least tau* over the combinations, exactly: it is at most each
combination's tau*, and so at most the slowest stage of every split of every combination that
fits memory (one_class's module docstring); inf exactly where no combination fits.

The sum. The stages' sum of a split is sum_s tau_s(n_s) at least; a group's stages holding c
chunks together pay at least the least such sum under their own plan (`group_sums`: each stage's
first chunk and the c - stages least increments of its levels, exact as tau_s is convex), and
the least over the combinations is the least over the groups' counts summing to L // v of their
least sums (`least_sums` there, min-plus over the groups): at most every combination's sum over every
split in whole chunks that fits. On the three-type, two-site row the buckets' optimistic sum
(one_class's sigma*, continuous) was 0.1-1.6% under it.

The sync. A stage holding j chunks syncs at least d_s + j v g_s (one_class's delta*); with d and
g those of the bucket (below each of its plans') and each plan's stages holding only the chunks
they fit (`sync_levels`), the least level over the combinations (least_levels) is at most every
combination's delta*: the bucket alone lets each stage hold the chunks the plan that fits most
on it does, here each plan holds its own.

Only the plans of a bucket that no other plan of it is below in LEVEL_COLUMNS need be priced
(`level_front`): the arrays one_class.stage_levels reads (stage_time_s, layer_time_s,
recompute_time_s and the memory terms) are each non-decreasing in a plan's fwd_s, bwd_s,
act_bytes, workspace_bytes and replicated_params (solver/partition_plans.py's module docstring:
the layer time is max(fwd, ag) + max(bwd, ag + rs), the recompute non-decreasing in fwd and bwd,
state, stash and workspace bytes each non-decreasing, the checkpoint plan-independent; rho_s,
the layers a stage must recompute, grows with the stash wherever the stage can hold its layers
at all, one_class's module docstring). None of them reads the gradient sync (grad_sync_s, and
the exposed part partition_plans' dominance also compares), so a plan at least another in
these columns holds at most its chunks within every level on each stage, and max_p C_g^p is
that of the front. On the three-type, two-site row the front kept about half of each 32-plan
bucket.
"""

from __future__ import annotations

import numpy as np

from paraplan.solver.partition_plans import pareto_mask

# the columns of cost/partition.VECTOR the stage levels read (module docstring)
LEVEL_COLUMNS = ("fwd_s", "bwd_s", "act_bytes", "workspace_bytes", "replicated_params")


def level_front(vectors: list[np.ndarray], columns: tuple[str, ...]) -> np.ndarray:
    """Which plans (rows of each of `vectors`, one array per site the plans are priced on, columns
    `columns`: cost/partition.VECTOR) no other plan is at most in LEVEL_COLUMNS on every site:
    the plans whose stage levels bound the others' (module docstring)."""
    at = [columns.index(c) for c in LEVEL_COLUMNS]
    return pareto_mask(np.hstack([v[:, at] for v in vectors]))


def group_steps(levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """max_p C^p of one group as steps (z, c), z and c increasing: within a level Z with
    z[i] <= Z < z[i + 1] the group's stages hold at most c[i] chunks under one plan, and under
    none below z[0] (empty: no plan fits each of its stages one chunk). `levels`: (plans,
    stages, chunks), one_class.stage_levels of the group's stages under each plan."""
    plans = levels.shape[0]
    first = levels[:, :, 0].max(1)  # every stage holds one chunk from here
    flat = np.sort(levels.reshape(plans, -1), axis=1)
    at = flat[np.isfinite(flat)]  # each plan's finite levels sorted: all of them, if one plan
    if plans > 1:
        at.sort()
    if not at.size:
        return at, np.zeros(0, np.int64)
    at = at[np.concatenate(([True], at[1:] != at[:-1]))]  # distinct: np.unique's, without its sort
    held = np.empty((plans, at.size), np.int64)
    for p in range(plans):
        held[p] = np.searchsorted(flat[p], at, side="right")
    held[at[None, :] < first[:, None]] = -1
    best = held.max(0)  # non-decreasing: each plan's count is, from its first level on
    rise = (best >= 0) & (best > np.concatenate([[-1], best[:-1]]))
    return at[rise], best[rise]


def held_chunks(levels: np.ndarray) -> np.ndarray:
    """(plans, stages): the chunks each stage can hold under each plan (its finite levels: a
    prefix, one_class.stage_levels), from `levels` as group_steps'."""
    return np.isfinite(levels).sum(2)


def sync_levels(held: np.ndarray, d: np.ndarray, g: np.ndarray, v: int, chunks: int) -> np.ndarray:
    """(plans, stages, chunks): d_s + j v g_s, the slowest-sync term of a stage holding j chunks
    (one_class's delta*), for j = 1 .. chunks, inf past the chunks the stage holds under each
    plan (`held`). With d, g below every plan's (a bucket's optimistic coefficients), the least
    level over the combinations (least_levels of their group_steps) is at most each
    combination's delta*: its levels are at most the combination's on every stage, and each
    plan's stages hold their own chunks."""
    j = np.arange(1, chunks + 1)
    vals = d[None, :, None] + (v * j)[None, None, :] * g[None, :, None]
    return np.where(j[None, None, :] <= held[:, :, None], vals, np.inf)


def group_sums(levels: np.ndarray, need: int) -> np.ndarray:
    """Per chunk count c = 0 .. need, the least sum over the group's stages of their levels when
    they hold c chunks together, each at least one, under one plan (the least over the plans);
    inf where none. `levels`: as group_steps'. A stage holding j chunks takes its level at j:
    its first chunk's level plus the increments from 1 to j; any c chunks on the group pay the
    first chunk of each stage and c - stages increments, a prefix of each stage's, so at least
    the c - stages least increments of all its stages together (exact where the levels are
    convex in j, as one_class's tau_s is; a lower bound in any case)."""
    plans, stages, chunks = levels.shape
    out = np.full(need + 1, np.inf)
    if stages > need:
        return out
    first = levels[:, :, 0].sum(1)  # inf where some stage holds no chunk
    with np.errstate(invalid="ignore"):
        steps = np.diff(levels, axis=2).reshape(plans, -1)  # inf - inf: past the cap
    steps = np.sort(np.where(np.isnan(steps), np.inf, steps), axis=1)
    more = min(need - stages, steps.shape[1])
    total = first[:, None] + np.concatenate([np.zeros((plans, 1)), np.cumsum(steps[:, :more], axis=1)], 1)
    out[stages:stages + more + 1] = total.min(0)
    return out


# cells (rows x levels, or rows x counts x counts) one batch of the functions below holds at most
PICKED_CELLS = 1 << 21
_NONE_HELD = -(1 << 40)  # a group's count below its first step: no sum of counts reaches `need`


def least_levels_picked(entries: list[list[tuple[np.ndarray, np.ndarray]]], picks: np.ndarray,
                        need: int) -> np.ndarray:
    """least_levels of the rows [entries[g][picks[r, g]] for each group g], every row at once:
    each entry's counts read at every step of every entry (the sorted union U), summed per row
    over its groups, and the least level of U where the sum reaches `need` taken. The same
    number as least_levels': a row's sum is constant between its own steps, so the least such
    level of U is one of them (a level of U below it that reached `need` would make the step at
    or below that level reach it too); below a group's first step its count is _NONE_HELD, so no
    level below the row's largest first step is taken; inf where none reaches `need`."""
    zs = [z for group in entries for z, _ in group]
    levels = np.unique(np.concatenate(zs)) if zs else np.zeros(0)
    out = np.full(len(picks), np.inf)
    if not levels.size or not len(picks):
        return out
    held = []  # per group: (entries, levels) counts
    for group in entries:
        m = np.full((len(group), levels.size), _NONE_HELD, np.int64)
        for j, (z, c) in enumerate(group):
            if z.size:
                at = np.searchsorted(z, levels, side="right") - 1
                m[j] = np.where(at >= 0, c[np.maximum(at, 0)], _NONE_HELD)
        held.append(m)
    step = max(1, PICKED_CELLS // levels.size)
    for a in range(0, len(picks), step):
        rows = picks[a:a + step]
        total = sum(m[rows[:, g]] for g, m in enumerate(held))
        reach = total >= need
        out[a:a + step] = np.where(reach.any(1), levels[reach.argmax(1)], np.inf)
    return out


_PAIRS: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # _count_pairs' arrays by `need`


def _count_pairs(need: int) -> tuple[np.ndarray, np.ndarray]:
    """([c, a] -> c - a, clipped at 0; c - a >= 0) for counts 0 .. need: least_sums_picked's
    min-plus gather, kept per `need` (the three-type, two-site row read 3,026 of a row or a
    few, each building these (need + 1)^2 arrays anew). Read only."""
    got = _PAIRS.get(need)
    if got is None:
        c = np.arange(need + 1)
        back = c[:, None] - c[None, :]  # [c, a]: the count left to the next group, a <= c
        below = back >= 0
        back = np.where(below, back, 0)
        back.flags.writeable = below.flags.writeable = False
        got = _PAIRS[need] = (back, below)
    return got


def least_sums_picked(entries: list[list[np.ndarray]], picks: np.ndarray, need: int) -> np.ndarray:
    """least_sums of the rows [entries[g][picks[r, g]] for each group g], every row at once: the
    same min-plus steps, float for float, on a batch of rows."""
    out = np.full(len(picks), np.inf)
    if not len(picks):
        return out
    back, below = _count_pairs(need)
    sums = [np.stack(group) for group in entries]  # per group: (entries, need + 1)
    step = max(1, PICKED_CELLS // (need + 1) ** 2)
    for a in range(0, len(picks), step):
        rows = picks[a:a + step]
        acc = sums[0][rows[:, 0]]
        for g in range(1, len(sums) - 1):  # acc'[r, c] = min over a <= c of acc[r, a] + h_r[c - a]
            h = sums[g][rows[:, g]]
            acc = np.where(below[None], acc[:, None, :] + h[:, back], np.inf).min(2)
        if len(sums) > 1:
            out[a:a + step] = (acc + sums[-1][rows[:, -1]][:, ::-1]).min(1)
        else:
            out[a:a + step] = acc[:, need]
    return out
