"""Provably valid lower bounds, memory-infeasibility proofs and quick incumbents for one outer
configuration, all from its per-stage coefficients (cost/coefficients.py).

Lower bound. The objective is (m - 1/v) * max_s T_s + sum_s T_s / v + max_s D_s with
m >= 1, v >= 1, so each term can be bounded on its own. Recompute only adds time
(recompute_time_s >= 0: replaying a forward never shortens an iteration), so r = 0 bounds T_s
from below; every stage holds >= v layers and all stages together hold L:
    sum_s T_s >= sum_s a_s + L * min_s t_s
    max_s T_s >= max( sum_s T_s / pp,  max_s (a_s + v * t_s) )
    max_s D_s >= max( (sum_s d_s + L * min_s g_s) / pp,  max_s (d_s + v * g_s) )
Memory is ignored, which only lowers the bound.

Tight lower bound (`tight_lower_bound_s`, computed only for configurations the bound above
cannot prune). It keeps memory and the recompute it forces. With r_s real, stage s holding n
layers must recompute at least rho_s(n) = max(0, (c_s + n w_s - cap_s) / h_s) layers (h_s > 0,
w_s = state + act), so with u_s >= 0 its time is at least the convex, increasing
    tau_s(n) = a_s + n t_s + u_s rho_s(n),
and n is at most ncap_s (the largest multiple of v that fits with r_s = min(n, R)); with
u_s < 0 (never produced by cost/, kept for safety) r_s <= n gives tau_s(n) = a_s + n (t_s + u_s).
Each term of the objective is bounded on its own, over real splits with Σ n_s = L,
v <= n_s <= ncap_s, rounding what integrality allows:
    max_s T_s >= tau*   the smallest tau at which Σ_s v floor(n_s(tau) / v) >= L, with n_s(tau)
                        the largest n with tau_s(n) <= tau (bisection; each stage's layer
                        count is a multiple of v below n_s(tau) when its time is <= tau)
    sum_s T_s >= sigma* the continuous minimum of Σ tau_s(n_s): tau_s is convex piecewise
                        linear (slopes t_s, then t_s + u_s w_s / h_s), so filling the cheapest
                        slopes first from n_s = v is optimal
    max_s D_s >= delta* as tau*, with d_s + n g_s
and the bound is (m - 1/v) tau* + sigma* / v + delta*. The memory-free bound above is its
special case with no recompute forced, so the tight bound is taken as the larger of the two.
`tight_class_terms` computes tau*, sigma* and delta* for many configurations at once (one row
each: the class planner bounds every layer-plan combination with it, solver/class_partitions.py),
tau* and delta* by bisection from below, each lowered by FLOAT_SAFETY.

Memory infeasibility. A stage's memory is smallest when all its layers are fully recomputed
(r_s = n_s), so stage s can hold at most nmax_s = floor((cap_s - c_s) / (state_s + ckpt_s))
layers (rounded down to a multiple of v), found as the largest n whose peak with r_s = n_s
passes cost.schedule.fits's own comparison (the float quotient only guesses it: at the edge it
can come out one layer low). If some nmax_s < v or sum_s nmax_s < L, no split fits: the
configuration is infeasible, proved. The tight bound's caps ncap_s are found the same way.

Incumbent. The even split with, per stage, the fewest fully recomputed layers that fit: the
objective is non-decreasing in r_s, so for a fixed split that r is optimal.
"""

from __future__ import annotations

import numpy as np

from dataclasses import replace
from itertools import accumulate

from paraplan.cost import coefficients, recompute_patterns, schedule
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.pipeline_split import slot_offsets
from paraplan.cost.coefficients import StageCoefficients


def slot_relaxation(c: StageCoefficients) -> StageCoefficients:
    """The coefficients every bound here reads for a configuration that counts the embedding /
    loss as a layer slot (c.outer's flags, cost/pipeline_split.py): a relaxation in whole chunks.
    Its splits hold n'_s = n_s + o_s layers (o_s: the slot of the first / last stage), multiples
    of v summing to L + e + l, so the module's v-chunk arguments apply unchanged. Times are
    exact: a'_s = a_s - o_s t_s and d'_s = d_s - o_s g_s give a'_s + n'_s t_s = a_s + n_s t_s.
    Memory is relaxed: c'_s = c_s - o_s (state + act)_s - relief_s, with
    schedule.slot_relief_bytes the most the short chunk's correction takes off, so the linear
    peak of n' is at most the true peak of n (and r_s <= n'_s allows more recompute). Every
    split of `c` maps to one of the relaxation at the same time and no more memory: a bound of
    the relaxation bounds `c`, and "no split fits" there proves it for `c`. Unflagged: `c`."""
    e, l = c.outer.embedding_in_split, c.outer.loss_in_split
    if not (e or l):
        return c
    return replace(c, layers=c.layers + e + l, outer=replace(c.outer, embedding_in_split=False, loss_in_split=False),
                   **slot_relaxed_terms(c, e, l))


def slot_relaxed_terms(c: StageCoefficients, embedding: bool, loss: bool) -> dict:
    """The stage terms slot_relaxation changes (stage_time_s, stage_sync_time_s,
    stage_mem_bytes), for `c` read with these slot flags in place of its outer's: the bound
    before pricing (unpriced_memory.py) keeps one set of coefficients for the configurations
    that differ only in their slots, and relaxes each without building it."""
    off = np.asarray(slot_offsets(c.pp, embedding, loss), float)
    return dict(stage_time_s=c.stage_time_s - off * c.layer_time_s,
                stage_sync_time_s=c.stage_sync_time_s - off * c.layer_sync_time_s,
                stage_mem_bytes=(c.stage_mem_bytes - off * (c.layer_state_bytes + c.layer_act_bytes)
                                 - schedule.slot_relief_bytes(c, embedding, loss)))


def drain_credit_s(c: StageCoefficients) -> float:
    """What a zero-bubble schedule (c.layer_drain_saving_s, cost/zero_bubble.py) can take off the
    1F1B form this module bounds: its pipeline term, max_s [(v m - 1) T_s + k W_s] / v
    + sum_s (T_s - k W_s) / v, is at least (m - 1/v) max T + sum T / v - sum_s k W_s / v, and
    sum_s k W_s = sum_s n_s k w t_s <= L max_s k w t_s. 0 without a zero-bubble schedule, so
    every bound below less this credit is a bound under any schedule c prices."""
    saving = c.layer_drain_saving_s
    if not saving.size:
        return 0.0
    return float(c.layers * saving.max() / c.outer.virtual_stages)


def lower_bound_s(c: StageCoefficients) -> float:
    credit = drain_credit_s(c)
    c = slot_relaxation(c)
    m, v, pp, L = c.outer.num_micro_batches, c.outer.virtual_stages, c.pp, c.layers
    a, t = c.stage_time_s, c.layer_time_s
    d, g = c.stage_sync_time_s, c.layer_sync_time_s
    sum_t = a.sum() + L * t.min()
    max_t = max(sum_t / pp, float((a + v * t).max()))
    max_d = max((d.sum() + L * g.min()) / pp, float((d + v * g).max()))
    return float((m - 1 / v) * max_t + sum_t / v + max_d) - credit


# relative margin by which the tight bounds are lowered: bisection ends and float sums may round up
FLOAT_SAFETY = 1e-12
# per block of rows of _min_bottleneck: rows x stages x chunks floats evaluated at once (8 MiB;
# its temporaries peak near 4 blocks: 4,000,000 measured 115 MiB on a 500-stage deep model)
BOTTLENECK_BLOCK_FLOATS = 1_000_000
# the StageCoefficients arrays tight_class_terms reads
TIGHT_ARRAYS = ("stage_time_s", "layer_time_s", "recompute_time_s", "stage_sync_time_s",
                "layer_sync_time_s", "layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes",
                "stage_mem_bytes", "capacity_bytes")


def _piecewise(n, base, slope1, knee, slope2):
    """f_s(n) = base + slope1 min(n, knee) + slope2 max(n - knee, 0), broadcast over n (the
    pieces of one shape). The expression's operations in its order, written in place (a sum or
    product of two floats is the same float either way round): base + slope1 min(n, knee), then
    plus slope2 (n - knee) where n > knee, else plus 0: three full-size arrays, not eight (the
    listing of the bound before pricing that reads memory, issue 33)."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = slope1 * np.minimum(n, knee)
        out += base
        past = n - knee
        past *= slope2
        np.copyto(past, 0.0, where=~(n > knee))
        out += past
    return out


def _listed_chunks(L: int, v: int, ncap) -> int:
    """The chunk counts _min_bottleneck lists per stage: up to the largest cap of any row."""
    return max(1, int(np.where(np.isfinite(ncap), ncap, L).max(initial=v)) // v)


def _min_bottleneck(L: int, v: int, ncap, base, slope1, knee, slope2, live=None) -> np.ndarray:
    """For every row: a lower bound (the exact value, lowered by FLOAT_SAFETY) of the min over
    splits (n_s multiples of v, v <= n_s <= ncap_s, sum n_s = L) of max_s f_s(n_s), f_s =
    _piecewise, non-decreasing. A level Z admits a split iff every stage can hold >= 1 chunk of
    v layers with f_s <= Z and they can hold >= L // v chunks together; stage s holds j chunks
    within Z iff f_s(j v) <= Z. So the least such level is the larger of max_s f_s(v) and the
    (L // v)-th smallest of all the values f_s(j v), 1 <= j <= ncap_s / v (inf where there are
    fewer): the optimum is one of those values, found by one partition, not by bisection.
    `live` (rows, pp), where given: the stages each row has (rows of fewer stages padded, their
    padded stages capped at 0, so that they list only inf): the first chunk's level is read
    over those alone, and the (L // v)-th smallest of the rest is the same float (a padded
    stage adds inf values, which sort past it). Callers keep pp x chunks within the block."""
    rows, pp = base.shape
    need = L // v
    chunks = _listed_chunks(L, v, ncap)
    if pp * chunks > BOTTLENECK_BLOCK_FLOATS:  # one row's values alone exceed the block
        assert live is None, "padded rows are listed within the block only"
        return _min_bottleneck_by_counts(L, v, ncap, (base, slope1, knee, slope2)) * (1 - FLOAT_SAFETY)
    j = v * np.arange(1, chunks + 1, dtype=float)
    out = np.empty(rows)
    step = max(1, BOTTLENECK_BLOCK_FLOATS // (pp * chunks))
    with np.errstate(invalid="ignore", over="ignore"):
        for r0 in range(0, rows, step):
            sl = slice(r0, r0 + step)
            vals = _piecewise(j[None, None, :], base[sl, :, None], slope1[sl, :, None],
                              knee[sl, :, None], slope2[sl, :, None])
            vals = np.where(j[None, None, :] <= ncap[sl, :, None], vals, np.inf)
            vals[np.isnan(vals)] = np.inf
            flat = vals.reshape(vals.shape[0], -1)
            if need > flat.shape[1]:
                kth = np.full(flat.shape[0], np.inf)
            else:
                kth = np.partition(flat, need - 1, axis=1)[:, need - 1]
            first = vals[:, :, 0] if live is None else np.where(live[sl], vals[:, :, 0], -np.inf)
            out[sl] = np.maximum(kth, first.max(1))
    return out * (1 - FLOAT_SAFETY)


def _chunks_within(ok_at, jmax: np.ndarray) -> np.ndarray:
    """Per entry, the largest j in [0, jmax] with ok_at(j) (0 when none), for a predicate true
    on a prefix of j >= 1: binary search, all entries at once."""
    lo, hi = np.zeros_like(jmax), jmax.copy()
    while (lo < hi).any():
        mid = (lo + hi + 1) // 2
        ok = ok_at(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid - 1)
    return lo


def _min_bottleneck_by_counts(L: int, v: int, ncap, pieces) -> np.ndarray:
    """_min_bottleneck (unlowered) without listing every value f_s(j v): when stages x chunks
    is beyond the block (a million layers on 1,024 stages is 10^9 values, 8 GB a row), the
    level is bisected instead, counting per stage the chunks within it by binary search (f_s
    non-decreasing). The returned level lies below the (L // v)-th smallest value by at most a
    few floating-point steps: a level whose count falls short of L // v is below it."""
    need = L // v
    jmax = (np.where(np.isfinite(ncap), np.minimum(ncap, L), L) // v).astype(np.int64)
    jmax = np.minimum(jmax, max(need - jmax.shape[1] + 1, 0))  # the others hold >= 1 chunk each

    def f(j):
        with np.errstate(invalid="ignore", over="ignore"):
            vals = _piecewise(v * j.astype(float), *pieces)
        return np.where(np.isnan(vals), np.inf, vals)

    def count(z: np.ndarray) -> np.ndarray:
        return _chunks_within(lambda j: (j == 0) | (f(j) <= z[:, None]), jmax).sum(1)

    first = np.where(jmax >= 1, f(np.ones_like(jmax)), np.inf).max(1)
    top = f(np.maximum(jmax, 1)).max(1)
    lo = np.where(np.isfinite(first), first, np.inf)
    hi = np.where(np.isfinite(top), top, np.inf)
    done = ~np.isfinite(lo) | (jmax.sum(1) < need) | (count(np.where(np.isfinite(lo), lo, 0.0)) >= need)
    lo = np.where(jmax.sum(1) < need, np.inf, lo)
    for _ in range(200):  # halving [lo, hi]: count(lo) < need <= count(hi)
        open_ = ~done & (np.nextafter(lo, np.inf) < hi)
        if not open_.any():
            break
        with np.errstate(invalid="ignore"):  # rows done at inf: their mid is not used
            mid = np.where(open_, lo + (hi - lo) / 2, lo)
        reach = count(mid) >= need
        lo, hi = np.where(open_ & ~reach, mid, lo), np.where(open_ & reach, mid, hi)
    return lo


def _stage_pieces(c: dict, L: int, v: int, allow_full_recompute: bool):
    """Per row and stage: the layer cap ncap_s, whether some split fits, and tau_s(n) as
    _piecewise's (base, slope1, knee, slope2) (module docstring); `c` as tight_class_terms."""
    ncap, fits, pieces = _own_pieces(c, L, v, allow_full_recompute)
    return np.where(fits[:, None], ncap, L), fits, pieces  # rows that cannot fit get inf below anyway


def stage_levels(c: dict, L: int, v: int, allow_full_recompute: bool) -> np.ndarray:
    """Per row, stage and chunk count j = 1 .. L // v: tau_s(j v) (module docstring), inf where
    j v layers pass the stage's own cap ncap_s: the values _min_bottleneck reads across one
    row's stages, for bounds that take each stage's values from a row of its own
    (solver/bounds/plan_bottleneck.py: a class's stages on several groups, each group under
    its own layer plan), so each stage is capped alone, no fit of the whole row read."""
    ncap, _, pieces = _own_pieces(c, L, v, allow_full_recompute)
    j = v * np.arange(1, L // v + 1, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        vals = _piecewise(j, *(x[..., None] for x in pieces))
    vals = np.where(j <= ncap[..., None], vals, np.inf)
    vals[np.isnan(vals)] = np.inf
    return vals


def _own_pieces(c: dict, L: int, v: int, allow_full_recompute: bool, live=None):
    """_stage_pieces with each stage's own cap ncap_s, also in rows where no split fits. `live`
    (rows, stages): the stages each row has, where rows of fewer are padded (the fit reads
    those alone; tight_class_terms_of_blocks)."""
    a, t, u = c["stage_time_s"], c["layer_time_s"], c["recompute_time_s"]
    state, act, ckpt = c["layer_state_bytes"], c["layer_act_bytes"], c["layer_ckpt_bytes"]
    room = c["capacity_bytes"] - c["stage_mem_bytes"]
    # the cap by cost.schedule.fits's own comparison (a float floor can come out one layer low
    # exactly at the edge); without full recompute a layer keeps its activations (ckpt = act)
    memory = (state, act, ckpt if allow_full_recompute else act, c["capacity_bytes"], c["stage_mem_bytes"])
    if live is not None or len(state) == 1:  # padded rows: read as one row (the cap is read
        # stage by stage), so that max_layers_per_stage keeps one entry, not each padded row (a
        # loop over the rows); a lone row is read as one too, so that a row read before is
        # found there (the three-type, two-site row: 121,768 rows, 25,164 distinct memories)
        memory = tuple(np.ravel(x) for x in memory)
    ncap = coefficients.max_layers_per_stage(*memory, v, L).astype(float).reshape(state.shape)
    if live is None:
        fits = ~((ncap < v).any(1) | (ncap.sum(1) < L))
    else:  # (whole layer counts: their sum is the same float padded with zeros)
        fits = ~(((ncap < v) & live).any(1) | (np.where(live, ncap, 0.0).sum(1) < L))
    with np.errstate(divide="ignore", invalid="ignore"):
        w, h = state + act, act - ckpt
        forced = allow_full_recompute & (u >= 0) & (h > 0)
        knee = np.where(forced & (w > 0), np.maximum(room, 0) / np.where(w > 0, w, 1), np.inf)
        slope2 = np.where(forced, t + u * w / np.where(h > 0, h, 1), t)
    slope1, saved = t, u < 0
    if saved.any():  # (never from cost/: skipped, three numpy calls of a lone row's thirty)
        slope1 = np.where(saved, t + u, t)
        slope2 = np.where(saved, slope1, slope2)
        knee = np.where(saved, np.inf, knee)
    return ncap, fits, (a, slope1, knee, slope2)


def tight_class_terms(c: dict, L: int, v: int, allow_full_recompute: bool):
    """(tau, sigma, delta, fits) per row: lower bounds of a class's slowest stage time, sum of
    stage times and slowest sync over every split that fits memory (tau*, sigma*, delta* of the
    module docstring: memory caps, forced recompute), and whether one fits. `c`: the
    StageCoefficients arrays by name (TIGHT_ARRAYS), shape (rows, pp)."""
    return tight_class_terms_of_blocks([c], L, v, allow_full_recompute)[0]


def tight_class_terms_of_blocks(blocks: list[dict], L: int, v: int, allow_full_recompute: bool) -> list[tuple]:
    """tight_class_terms of each of `blocks` (its arrays, (rows, pp) with a pp of its own; one
    L and v), the same floats block by block: the bound before pricing that reads memory
    (unpriced_memory.py) reads a few rows of each of a few pipeline depths per call, and
    numpy's work per call was most of their cost (8 x 8 row, issue 33: 3,162 calls of a median
    of 2 rows). Each stage's cap and pieces (_own_pieces, elementwise) are read in one pass
    over the blocks' stages padded to the most of any block (a padded stage has no time, no
    memory and no cap, and the fit reads a row's own stages only); the listed levels and the
    sums per block on its own stages (a padded listing would list the shallow pipelines' levels
    as often as the deepest's, and a sum's rounding reads its terms' count)."""
    rows = [len(c["stage_time_s"]) for c in blocks]
    ends = list(accumulate(rows))
    if len(blocks) == 1:
        c, live = blocks[0], None
    else:
        P = max(c["stage_time_s"].shape[1] for c in blocks)
        c = _padded(blocks, P)
        live = np.arange(P)[None, :] < np.repeat([x["stage_time_s"].shape[1] for x in blocks], rows)[:, None]
    ncap, fits, pieces = _own_pieces(c, L, v, allow_full_recompute, live)
    safe = np.where(fits[:, None], ncap, L)  # rows that cannot fit get inf below anyway
    d, g = c["stage_sync_time_s"], c["layer_sync_time_s"]
    a, slope1, knee, slope2 = pieces
    seg1 = np.maximum(np.minimum(knee, safe) - v, 0)  # (np.clip's floats, without its wrapper)
    seg2 = np.maximum(safe - np.maximum(knee, v), 0)
    inf = np.where(fits, 0.0, np.inf)
    padded = None if live is None else _padded_levels(L, v, live, safe, (a, d), (slope1, g), knee, slope2)
    out = []
    for block, end, n in zip(blocks, ends, rows):
        r = slice(end - n, end)
        pp = block["stage_time_s"].shape[1]
        safe_, a_, d_, s1, g_, kn, s2, sg1, sg2 = (
            (safe, a, d, slope1, g, knee, slope2, seg1, seg2) if live is None else
            (x[r, :pp] for x in (safe, a, d, slope1, g, knee, slope2, seg1, seg2)))
        if padded is not None:
            tau, delta, fv = padded[0][r], padded[1][r], padded[2] if padded[2] is None else padded[2][r, :pp]
        else:  # tau* and delta* in one listing (rows stacked: each row's values are its own)
            tau, delta, fv = _levels(L, v, safe_, (a_, d_), (s1, g_), kn, s2)
        if fv is None:  # (not listed: each stage's time at v layers read alone)
            fv = _piecewise(float(v), a_, s1, kn, s2)
        sigma = _least_stage_sum(L, v, fv, s1, s2, sg1, sg2)
        out.append((tau + inf[r], sigma + inf[r], delta + inf[r], fits[r]))
    return out


def _levels(L: int, v: int, safe, base: tuple, slope: tuple, knee, slope2, live=None) -> tuple:
    """(tau*, delta*, at_v) unlowered by fits of rows with caps `safe`: _min_bottleneck of the
    stage times (base[0], slope[0], knee, slope2) and of the syncs (base[1], slope[1], linear),
    the two stacked in one listing (each row's values are its own); at_v, where listed here
    (_listed_levels), each stage's time at v layers, else None."""
    g = slope[1]
    chunks = _listed_chunks(L, v, safe)
    if 2 * g.size * chunks <= BOTTLENECK_BLOCK_FLOATS:  # one block: listed here, in fewer steps
        return _listed_levels(L, v, chunks, safe, base, slope, knee, slope2, live)
    both = _min_bottleneck(L, v, np.vstack([safe, safe]), np.vstack(base), np.vstack(slope),
                           np.vstack([knee, np.full_like(g, np.inf)]), np.vstack([slope2, g]),
                           None if live is None else np.vstack([live, live]))
    return both[:len(g)], both[len(g):], None


def _listed_levels(L: int, v: int, chunks: int, safe, base: tuple, slope: tuple, knee, slope2, live) -> tuple:
    """_levels where all its rows' values fit one of _min_bottleneck's blocks, the same floats
    in about half the numpy calls (the class planner reads a row of 4-16 stages per call, 8,947
    calls on the three-type, two-site row, issue 33): the stage times listed by _piecewise into
    the first rows of one array and the syncs d + j v g into the rest (_piecewise with an inf
    knee: g min(n, inf) = g n, plus d, plus 0 past no knee, the same float), each stage capped,
    nan read as inf, and the (L // v)-th smallest taken by one partition, as _min_bottleneck.
    Also each stage's time at v layers (the first chunk's, before the caps): _piecewise's
    elementwise floats at n = v, which tight_class_terms_of_blocks' sum reads. A large listing
    is read first over its first chunks only (_short_chunks, _kth_listed), and the rows that
    reading does not settle listed again in full."""
    rows = len(safe)
    short = _short_chunks(L, v, chunks, safe, slope, slope2, live)
    kth, first, at_v = _kth_listed(L, v, chunks if short is None else short, safe, base, slope, knee, slope2)
    if short is not None:
        redo = np.flatnonzero(~_settled(v, short, kth, safe, base, slope, knee, slope2))
        if len(redo):
            again, _, _ = _kth_listed(L, v, chunks, safe[redo], tuple(x[redo] for x in base),
                                      tuple(x[redo] for x in slope), knee[redo], slope2[redo])
            kth[redo], kth[rows + redo] = again[:len(redo)], again[len(redo):]
    if live is not None:
        first = np.where(np.vstack([live, live]), first, -np.inf)
    both = np.maximum(kth, first.max(1)) * (1 - FLOAT_SAFETY)
    return both[:rows], both[rows:], at_v


def _kth_listed(L: int, v: int, chunks: int, safe, base: tuple, slope: tuple, knee, slope2) -> tuple:
    """_listed_levels' listing of chunks 1 .. `chunks` of every stage: (kth, first, at_v) with
    kth (2 rows,) the (L // v)-th smallest of each row's values (the stage times' rows first,
    then the syncs'; inf where there are fewer), first (2 rows, pp) each stage's first chunk's
    value, at_v (rows, pp) each stage's time at v layers before the caps."""
    rows, pp = safe.shape
    j = v * np.arange(1, chunks + 1, dtype=float)
    vals = np.empty((2 * rows, pp, chunks))
    with np.errstate(invalid="ignore", over="ignore"):
        vals[:rows] = _piecewise(j, base[0][:, :, None], slope[0][:, :, None], knee[:, :, None], slope2[:, :, None])
        np.multiply(slope[1][:, :, None], j, out=vals[rows:])
        vals[rows:] += base[1][:, :, None]
    at_v = vals[:rows, :, 0].copy()
    over = ~(j <= safe[:, :, None])
    vals[:rows][over] = np.inf
    vals[rows:][over] = np.inf
    vals[np.isnan(vals)] = np.inf
    need = L // v
    flat = vals.reshape(2 * rows, -1)
    kth = np.partition(flat, need - 1, axis=1)[:, need - 1] if need <= flat.shape[1] else np.full(2 * rows, np.inf)
    return kth, vals[:, :, 0], at_v


# _listed_levels lists the first SHORT_FACTOR x ceil((L // v) / pp) chunks of each stage first
# where its listing holds at least SHORT_LISTING_VALUES values: on the three-type, two-site row
# (issue 33) 482 of 2,897 listings, 58.5 -> 40.6 million values listed, 1,064 of their 33,378
# rows listed again in full (factors 2 and 4, or 4,096 values, measured no faster there)
SHORT_FACTOR = 3
SHORT_LISTING_VALUES = 16_384


def _short_chunks(L: int, v: int, chunks: int, safe, slope: tuple, slope2, live) -> int | None:
    """The chunks _listed_levels lists first, or None where it lists them all: a listing of
    fewer than SHORT_LISTING_VALUES values, one that the first SHORT_FACTOR x (L // v) / pp
    chunks of a stage would not shorten, or one whose values may fall with j (a slope below 0
    or nan: _settled reads each stage's values as non-decreasing in j)."""
    rows, pp = safe.shape
    if 2 * rows * pp * chunks < SHORT_LISTING_VALUES:
        return None
    fewest = pp if live is None else int(live.sum(1).min())
    short = SHORT_FACTOR * -(-(L // v) // max(fewest, 1))
    if short >= chunks or not ((slope[0] >= 0).all() and (slope2 >= 0).all() and (slope[1] >= 0).all()):
        return None
    return short


def _settled(v: int, short: int, kth, safe, base: tuple, slope: tuple, knee, slope2) -> np.ndarray:
    """(rows,): whether a row's kth over its first `short` chunks (_kth_listed) is its kth over
    every chunk, for its stage times and its syncs. Each stage's values are non-decreasing in j
    (_piecewise with slopes >= 0: each operation is monotone in its rounding, a nan, once met,
    stays nan (read as inf), and the cap, once passed, stays passed), so each value past the
    listing is at least the stage's next one, at chunk short + 1. Where that is at least the
    kth read for every stage, each level below the kth counts the same values in both
    listings (fewer than L // v) and the kth counts at least as many in the full one: the kth
    of both is the same value, the same float (the same elementwise operations)."""
    rows = len(safe)
    j = float(v * (short + 1))
    with np.errstate(invalid="ignore", over="ignore"):
        nxt = np.concatenate([_piecewise(np.full_like(knee, j), base[0], slope[0], knee, slope2),
                              slope[1] * j + base[1]])
    past = np.vstack([~(j <= safe), ~(j <= safe)]) | np.isnan(nxt)
    nxt = np.where(past, np.inf, nxt)
    ok = (nxt >= kth[:, None]).all(1)
    return ok[:rows] & ok[rows:]


def _padded_levels(L: int, v: int, live, safe, base: tuple, slope: tuple, knee, slope2) -> tuple | None:
    """_levels of every row of tight_class_terms_of_blocks' padded blocks in one listing (a
    padded stage capped at 0 lists no level; _min_bottleneck's `live`): each row's values are
    the same floats as its block's own listing, and per call one listing, not one per block
    (issue 33, 8 x 8 row: 3,162 listings of a median of 2 rows in 1,106 calls). None where a
    row's values pass the block (each block is then listed, or bisected, on its own)."""
    safe = np.where(live, safe, 0.0)
    if safe.shape[1] * _listed_chunks(L, v, safe) > BOTTLENECK_BLOCK_FLOATS:
        return None
    return _levels(L, v, safe, base, slope, knee, slope2, live)


def _padded(blocks: list[dict], P: int) -> dict:
    """TIGHT_ARRAYS of `blocks` stacked into one (rows, P) array each, a block's stages first
    and zeros past them (tight_class_terms_of_blocks' padded stages)."""
    R = sum(len(c["stage_time_s"]) for c in blocks)
    out = {}
    for f in TIGHT_ARRAYS:
        x = out[f] = np.zeros((R, P))
        r = 0
        for c in blocks:
            n, pp = c[f].shape
            x[r:r + n, :pp] = c[f]
            r += n
    return out


def _least_stage_sum(L: int, v: int, f_v, slope1, slope2, seg1, seg2) -> np.ndarray:
    """sigma* of the module docstring (unlowered by fits), per row of (rows, pp) pieces: each
    stage's time at v layers, then the L - pp v layers past them on the cheapest slopes first
    (segment 1 up to the knee, segment 2 past it), lowered by FLOAT_SAFETY."""
    pp = f_v.shape[1]
    slopes = np.concatenate([slope1, slope2], 1)
    lengths = np.concatenate([seg1, seg2], 1)
    order = np.argsort(slopes, axis=1, kind="stable")
    rows = np.arange(len(order))[:, None]  # (take_along_axis's gather, without its checks)
    slopes, lengths = slopes[rows, order], lengths[rows, order]
    before = np.cumsum(lengths, 1) - lengths
    take = np.minimum(np.maximum(float(L - pp * v) - before, 0), lengths)  # (np.clip's floats)
    return (f_v.sum(1) + (take * slopes).sum(1)) * (1 - FLOAT_SAFETY)


def sync_within(c: dict, L: int, v: int, allow_full_recompute: bool, theta: np.ndarray) -> np.ndarray:
    """Per row: a lower bound of the slowest sync max_s D_s over the splits that fit memory and
    whose every stage time is at most theta (inf where there is none). Stage s holds at most
    the largest multiple of v layers n <= ncap_s with tau_s(n) <= theta (tau_s increasing), so
    this is delta* of the module docstring with those caps: it couples the two maxima that
    tight_class_terms bounds apart (the split that balances stage times may load the stages
    whose gradient sync is slow). `c` as tight_class_terms; theta (rows,)."""
    safe, fits, pieces = _stage_pieces(c, L, v, allow_full_recompute)
    top = max(1, int(np.max(safe, initial=v)) // v)
    if safe.size * top > BOTTLENECK_BLOCK_FLOATS:  # too many values to list: binary search
        def within(j):
            with np.errstate(invalid="ignore", over="ignore"):
                return (j == 0) | (_piecewise(v * j.astype(float), *pieces) * (1 - FLOAT_SAFETY) <= theta[:, None])
        cap = v * _chunks_within(within, (np.minimum(safe, L) // v).astype(np.int64))
    else:
        n = v * np.arange(1, top + 1, dtype=float)
        with np.errstate(invalid="ignore", over="ignore"):
            f = _piecewise(n[None, None, :], *(x[:, :, None] for x in pieces))
        ok = (f * (1 - FLOAT_SAFETY) <= theta[:, None, None]) & (n[None, None, :] <= safe[:, :, None])
        # the largest admissible n (the admissible n form a prefix where tau_s increases; allowing
        # every n up to the largest where it does not only lowers the bound)
        cap = np.where(ok.any(2), v * (ok.shape[2] - np.argmax(ok[:, :, ::-1], axis=2)), 0)
    bad = (cap < v).any(1) | (cap.sum(1) < L) | ~fits
    g = c["layer_sync_time_s"]
    out = _min_bottleneck(L, v, np.where(bad[:, None], L, cap), c["stage_sync_time_s"], g,
                          np.full_like(g, np.inf), g)
    return np.where(bad, np.inf, out)


def coupled_bound_above(c: StageCoefficients, allow_full_recompute: bool, cutoff_s: float) -> bool:
    """Whether every split of `c` that fits memory is proved slower than `cutoff_s` by coupling
    its slowest stage and its slowest sync. With objective (m - 1/v) max T + sum T / v + max D
    and theta = (cutoff_s - sigma* / v - delta*) / (m - 1/v): a split whose slowest stage is
    above theta is above the cutoff; one whose stages are all within theta has max D at least
    sync_within(theta), so it is above the cutoff when (m - 1/v) tau* + sigma* / v +
    sync_within(theta) is."""
    cutoff_s = cutoff_s + drain_credit_s(c)  # above it under 1F1B's form: above cutoff_s
    c = slot_relaxation(c)
    m, v = c.outer.num_micro_batches, c.outer.virtual_stages
    arrays = {f: np.atleast_2d(getattr(c, f)) for f in TIGHT_ARRAYS}
    tau, sigma, delta, fits = tight_class_terms(arrays, c.layers, v, allow_full_recompute)
    if not fits[0]:
        return True
    return bool(coupled_above(arrays, c.layers, v, m, allow_full_recompute, (tau, sigma, delta), cutoff_s)[0])


def coupled_above(c: dict, L: int, v: int, m: float, allow_full_recompute: bool, terms, cutoff_s: float) -> np.ndarray:
    """coupled_bound_above for many rows at once: `c` as tight_class_terms, `terms` its (tau,
    sigma, delta) for those rows, m the micro-batch count."""
    tau, sigma, delta = terms
    alpha = m - 1 / v
    base = alpha * tau + sigma / v
    if alpha <= 0:  # one micro-batch, one chunk: the bound does not read the slowest stage
        return base + delta > cutoff_s
    # a row that fits no split reads sigma or delta inf, so its theta is inf - inf = nan; its
    # answer below is then inf > cutoff (true: it cannot win) or nan > cutoff (false: kept), and
    # neither prunes a row that could win, so numpy's warning says nothing here
    with np.errstate(invalid="ignore"):
        theta = (cutoff_s - sigma / v - delta) / alpha
        return base + sync_within(c, L, v, allow_full_recompute, theta) > cutoff_s


def tight_lower_bound_s(c: StageCoefficients, allow_full_recompute: bool = True) -> float:
    """Lower bound with memory and forced recompute (module docstring): tight_class_terms of
    this one configuration; >= lower_bound_s(c). Less drain_credit_s(c) under a zero-bubble
    schedule."""
    credit = drain_credit_s(c)
    c = slot_relaxation(c)
    m, v = c.outer.num_micro_batches, c.outer.virtual_stages
    tau, sigma, delta, fits = tight_class_terms({f: np.atleast_2d(getattr(c, f)) for f in TIGHT_ARRAYS},
                                                c.layers, v, allow_full_recompute)
    if not fits[0]:
        return float("inf")  # no split fits: proved as in memory_infeasible
    return max(float((m - 1 / v) * tau[0] + sigma[0] / v + delta[0]) - credit, lower_bound_s(c))


def _rows_by_shape(cs: list[StageCoefficients]):
    """((pp, v, layers), [(index, slot relaxation)]) blocks of `cs`: the rows tight_class_terms
    and sync_within can stack. A block lists at most BOTTLENECK_BLOCK_FLOATS values (rows x
    stages x chunks), so both take the path they take on one row (listing the values, or
    bisecting where one row alone is beyond it) and give each row its one-at-a-time numbers."""
    groups: dict[tuple[int, int, int], list] = {}
    for i, c in enumerate(cs):
        c = slot_relaxation(c)
        groups.setdefault((c.pp, c.outer.virtual_stages, c.layers), []).append((i, c))
    for (pp, v, L), items in groups.items():
        rows = max(1, BOTTLENECK_BLOCK_FLOATS // (pp * max(1, L // v)))
        for a in range(0, len(items), rows):
            yield (pp, v, L), items[a:a + rows]


def _stacked(items) -> tuple[dict, np.ndarray]:
    """TIGHT_ARRAYS of `items` stacked into rows, and each row's micro-batch count."""
    arrays = {f: np.stack([getattr(c, f) for _, c in items]) for f in TIGHT_ARRAYS}
    return arrays, np.array([c.outer.num_micro_batches for _, c in items], float)


def tight_lower_bounds_s(cs: list[StageCoefficients], allow_full_recompute: bool = True) -> np.ndarray:
    """tight_lower_bound_s of every coefficient set in `cs`, computed a shape (pp, v, layers)
    at a time: each row's numbers come from the same float operations as one at a time
    (tight_class_terms works row by row; the memory-free bound's sums and minima reduce each
    row alone), so the search prunes exactly as it would one configuration at a time
    (tests/solver/test_lone_bounds.py compares them bit for bit). One at a time, the
    interpreter's per-call overhead was most of the four-GPU-type search's 11,359 tight bounds."""
    out = np.empty(len(cs))
    for (pp, v, L), items in _rows_by_shape(cs):
        arrays, m = _stacked(items)
        tau, sigma, delta, fits = tight_class_terms(arrays, L, v, allow_full_recompute)
        a, t = arrays["stage_time_s"], arrays["layer_time_s"]
        d, g = arrays["stage_sync_time_s"], arrays["layer_sync_time_s"]
        sum_t = a.sum(1) + L * t.min(1)  # lower_bound_s, row by row
        max_t = np.maximum(sum_t / pp, (a + v * t).max(1))
        max_d = np.maximum((d.sum(1) + L * g.min(1)) / pp, (d + v * g).max(1))
        free = (m - 1 / v) * max_t + sum_t / v + max_d
        with np.errstate(invalid="ignore"):  # rows that fit no split (inf terms) are inf below
            tight = np.maximum((m - 1 / v) * tau + sigma / v + delta, free)
        out[[i for i, _ in items]] = np.where(fits, tight, np.inf)
    return out - np.array([drain_credit_s(c) for c in cs])


def coupled_bounds_above(cs: list[StageCoefficients], allow_full_recompute: bool, cutoff_s: np.ndarray) -> np.ndarray:
    """coupled_bound_above of every coefficient set in `cs` against its own cutoff, a shape at a
    time as tight_lower_bounds_s."""
    cutoff_s = np.broadcast_to(np.asarray(cutoff_s, float), (len(cs),))
    out = np.zeros(len(cs), bool)
    for (pp, v, L), items in _rows_by_shape(cs):
        arrays, m = _stacked(items)
        at = [i for i, _ in items]
        tau, sigma, delta, fits = tight_class_terms(arrays, L, v, allow_full_recompute)
        cut = cutoff_s[at] + np.array([drain_credit_s(c) for _, c in items])
        alpha = m - 1 / v
        with np.errstate(divide="ignore", invalid="ignore"):  # rows that fit no split: True below
            base = alpha * tau + sigma / v
            theta = np.where(alpha > 0, (cut - sigma / v - delta) / np.where(alpha > 0, alpha, 1.0), np.inf)
        # one micro-batch, one chunk (alpha 0): the bound does not read the slowest stage
            above = np.where(alpha > 0, base + sync_within(arrays, L, v, allow_full_recompute, theta) > cut,
                             base + delta > cut)
        out[at] = ~fits | above
    return out


def memory_infeasible(c: StageCoefficients) -> bool:
    c = slot_relaxation(c)
    return coefficients.no_split_fits(c.layer_state_bytes, c.layer_act_bytes, c.layer_ckpt_bytes,
                                      c.capacity_bytes, c.stage_mem_bytes, c.outer.virtual_stages, c.layers)


def min_recompute(c: StageCoefficients, n: np.ndarray) -> np.ndarray | None:
    """Fewest fully recomputed layers per stage that make split n fit, or None if none does."""
    over = schedule.stage_mem_bytes(c, n, np.zeros_like(n)) - c.capacity_bytes
    saving = c.layer_act_bytes - c.layer_ckpt_bytes
    r = np.zeros_like(n)
    need = over > 0
    if need.any():
        if (saving[need] <= 0).any():
            return None
        r[need] = np.ceil(over[need] / saving[need])
    if (r > n + 1).any():
        return None
    r = np.minimum(r, n)  # one above n may be the ceiling's rounding: n is checked below
    # ceil on floats can land one off either way; step onto cost.schedule.fits's comparison:
    # down where one fewer still fits (a peak equal to the capacity fits), up where r does not
    for _ in range(2):
        fewer = (r > 0) & (schedule.stage_mem_bytes(c, n, np.maximum(r - 1, 0)) <= c.capacity_bytes)
        r = np.where(fewer, r - 1, r)
    for _ in range(2):
        ok = schedule.stage_mem_bytes(c, n, r) <= c.capacity_bytes
        if ok.all():
            return r
        r = np.where(ok, r, r + 1)
        if (r > n).any():
            return None
    return r if schedule.fits(c, n, r) else None


def even_split(layers: int, pp: int, v: int, slots: tuple[bool, bool] = (False, False)) -> np.ndarray:
    """The even split (cost/readers/plan_reader.default_layer_split); with the embedding / loss slots, the
    even split of the slots less each end stage's slot (Megatron-core's R4 where it divides)."""
    from paraplan.cost.readers.plan_reader import default_layer_split
    off = np.asarray(slot_offsets(pp, *slots), float)
    return np.array(default_layer_split(layers + sum(slots), pp, v), float) - off


def slots_of(c: StageCoefficients) -> tuple[bool, bool]:
    return (c.outer.embedding_in_split, c.outer.loss_in_split)


def fitting_recompute(c: StageCoefficients, n: np.ndarray, allow_full_recompute: bool) -> np.ndarray | None:
    """The fewest fully recomputed layers per stage that make split n fit (none without full
    recompute), or None: none does, or an MoE dense prefix is larger than stage 0's share."""
    if not schedule.holds_dense_prefix(c, n):
        return None
    if allow_full_recompute:
        return min_recompute(c, n)
    return np.zeros_like(n) if schedule.fits(c, n, np.zeros_like(n)) else None


def pattern_fitting_recompute(c: StageCoefficients, n: np.ndarray, allow_full_recompute: bool,
                              pattern: RecomputePattern) -> np.ndarray | None:
    """fitting_recompute among the counts the framework's pattern runs: the first of its values
    (cost/recompute_patterns.options, growing in every count) whose counts make split n fit."""
    r = fitting_recompute(c, n, allow_full_recompute)
    if r is None or pattern is RecomputePattern.PER_STAGE or not r.any():
        return r
    o = c.outer
    top_n = int(np.max(n))
    top_c = (c.layers + o.embedding_in_split + o.loss_in_split) // o.virtual_stages - c.pp + 1

    def fitting(i: int) -> np.ndarray | None:
        got = recompute_patterns.value_counts(pattern, i, n, o.virtual_stages, o.embedding_in_split,
                                              o.loss_in_split, top_n, top_c).astype(float)
        return got if schedule.fits(c, np.asarray(n, float), got) else None

    # the first value that fits, by bisection (memory falls as the counts grow; re-checked)
    lo, hi = 0, recompute_patterns.parameter_count(pattern, top_n, top_c) - 1
    if fitting(hi) is None:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if fitting(mid) is None else (lo, mid)
    return fitting(lo) if fitting(lo) is not None else fitting(
        recompute_patterns.parameter_count(pattern, top_n, top_c) - 1)


def incumbent(c: StageCoefficients, allow_full_recompute: bool,
              pattern: RecomputePattern = RecomputePattern.PER_STAGE) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The even split with the fewest recomputed layers that fit and that `pattern` runs."""
    n = even_split(c.layers, c.pp, c.outer.virtual_stages, slots_of(c))
    r = pattern_fitting_recompute(c, n, allow_full_recompute, pattern)
    return None if r is None else (float(schedule.iteration_time_s(c, n, r)), n, r)


def min_peak_mem_bytes(c: StageCoefficients) -> float:
    """Peak stage memory of the even split with every layer recomputed (for messages)."""
    n = even_split(c.layers, c.pp, c.outer.virtual_stages, slots_of(c))
    return float(schedule.stage_mem_bytes(c, n, n).max())
