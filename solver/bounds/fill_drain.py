"""A lower bound of a lone pipeline's time that reads its slowest stage and its stages' sum
together (issue 33: 8 GPU types, pipelines of 26 stages through 6-8 groups running 8
micro-batches each, whose bound read the two apart and lay at 1.5 s against plans at 2.4 s).

One class of x replicas on pp stages runs m micro-batches each; at v = 1 its pipeline takes
(cost/schedule.pipeline_time_s, batched.py's module docstring)
    P(n) = (m - 1) max_s T_s + sum_s T_s,   T_s = a_s + n_s t_s + (terms >= 0)
for its split n (n_s >= 1 layers on stage s, sum_s n_s = L). The bound before pricing
(unpriced.py) and the partial layouts' (layouts.stage_bound_rows) take the two terms at their
least apart: (m - 1) min_n max_s T_s + (sum_s a_s + L min_s t_s), the second as if every layer
sat on the cheapest stage. A deep pipeline of few micro-batches (26 stages, m = 8) pays its
sum: the split that balances the slowest stage puts most layers on the slower GPUs. Here

    J = min over integer splits n of (m - 1) max_s (a_s + n_s t_s) + sum_s (a_s + n_s t_s)

exactly, with n_s <= cap_s where a stage's memory caps it (`caps`). How: for a level Z, let
G(Z) be the least sum over the splits whose every stage is at most Z: each stage takes one
layer, then the L - pp others go to the cheapest stages first, stage s up to its
c_s(Z) = #{k <= cap_s : a_s + k t_s <= Z} layers (an exchange argument: moving a layer from a
dearer stage to a cheaper one with room lowers the sum and keeps every stage at most Z). A
split n with max_s T_s = Z gives P(n) >= (m - 1) Z + G(Z), and G(Z)'s split has max_s T_s
<= Z, so P of it <= (m - 1) Z + G(Z): J = min over Z of (m - 1) Z + G(Z), and the least is at
some Z = a_s + k t_s (the slowest stage of the best split). Every such Z is tried.

Why J is at most what pricing gives for every completion: each T_s is at least a_s + n_s t_s
(the floors are at most the layer's priced time, the stage terms at most the priced stage's),
P grows with every T_s (m >= 1), the micro-batch count m is the class's (M / x for one class),
and every split the configuration may choose (memory only removes splits; the recomputed
layers, hand-offs, syncs and the quantile factor only add or scale by >= 1) is one of those J
is the least over. With v > 1 the interleaved pipeline takes (m - 1/v) max_s T_s + sum_s T_s / v
with n_s multiples of v, which is fill_drain_s(.., v m) / v with n_s >= 1 relaxed (callers use
it only where no embedding / loss slot shifts the split).

After pricing, the gradient sync after the last backward, max_s (d_s + n_s g_s), is read with
the pipeline too (fill_drain_sync_s): the least over levels W of the slowest sync of W plus J
with each stage capped at the layers whose sync fits W (8 types: the split that balances the
pipeline piles layers on the B200 stages, whose sync then leads: 0.217 s against a separate
bound of 0.131 s, and the priced bound 2.140 s against the DP's optimum 2.228 s, which the
joint bound now reaches). Before pricing, the bound that reads memory (unpriced_memory.py) reads
the same (pipeline_sync_bounds_s) on a lone class's floors, syncs and memory caps: read apart,
its terms left the 8-type row's least-keyed configurations at 1.99 s against optima of 2.28 s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# J reads every stage's floor, so it may pass the bound before pricing (unpriced.py) of a
# configuration it bounds, never its value: where it keys a layout it is lowered by this much
# (as search.FAMILY_MARGIN, far above the tie tolerance planner.REL_TOL, 1e-9), so a layout
# holding a plan that ties the incumbent is still listed and the tie rule reads that plan's own
# key
TIE_MARGIN = 1e-6
# (rows x levels x stage kinds) floats per block: ~64 MiB at most
BLOCK_FLOATS = 8_000_000
# levels tried per kind of stage (_block): from the least a split can have; past them, one bound
WINDOW_LEVELS = 24


def _per_row(x, N: int) -> np.ndarray:
    """x as floats (N,): itself where it is one per row, else broadcast (np.broadcast_to's
    checks cost more than the readings of a few rows: issue 33, 8 x 8 row, 4,000 calls)."""
    x = np.asarray(x, float)
    return x if x.shape == (N,) else np.broadcast_to(x, (N,))


def fill_drain_s(a: np.ndarray, t: np.ndarray, count: np.ndarray, layers: int, m: np.ndarray,
                 caps: np.ndarray | None = None, cutoff: np.ndarray | None = None) -> np.ndarray:
    """Row by row, J of the module docstring for a pipeline whose stages come in kinds: kind j
    of a row is count[j] identical stages of stage term a[j] and layer floor t[j] (a, t, count:
    (N, K), t > 0; a kind of count 0 is absent), m: (N,) micro-batches (>= 1), caps: (N, K)
    the most layers a stage of the kind holds, or None. Identical stages share one list of
    levels and take the same room at each, so a row costs K x L levels of K kinds, not pp x L
    of pp stages (26 stages of 8 groups: 9 kinds). inf where no split fits (a stage's cap below
    one, or the caps' sum below `layers`) or a present kind's floor is not finite. `cutoff`
    (N,), where given: a row whose J is at least its cutoff (up to LEVEL_SKIP_REL) may return any
    value at least that (_block skips the levels whose bound passes it; fill_drain_sync_s), J
    itself below it."""
    a, t = np.asarray(a, float), np.asarray(t, float)
    count = np.asarray(count, float)
    N, K = t.shape
    out = np.full(N, np.inf)
    pp = count.sum(axis=1)
    most = int(layers - pp.min()) + 1 if N else 0  # the most layers a stage can take
    if N == 0 or most < 1:
        return out
    cap = np.full((N, K), float(most)) if caps is None else np.minimum(np.asarray(caps, float), most)
    present = count > 0
    cap = np.where(present, cap, 0.0)
    a, t = np.where(present, a, 0.0), np.where(present, t, 1.0)
    ok = (pp <= layers) & np.isfinite(t).all(1) & np.isfinite(a).all(1) & (np.where(present, cap, 1) >= 1).all(1)
    ok &= (cap * count).sum(1) >= layers
    rows = np.flatnonzero(ok)
    m = _per_row(m, N)
    cut = np.full(N, np.inf) if cutoff is None else np.asarray(cutoff, float)
    if K * K * min(most, WINDOW_LEVELS) > BLOCK_FLOATS:
        # one row's levels alone exceed the block: 0, a lower bound of any J (every stage's time
        # is >= 0), rather than an allocation that grows as K^2 (callers group stages into kinds)
        out[rows] = 0.0
        return out
    per = max(1, BLOCK_FLOATS // (K * K * min(most, WINDOW_LEVELS)))
    for start in range(0, len(rows), per):
        r = rows[start:start + per]
        out[r] = _block(a[r], t[r], count[r], cap[r], layers, m[r], most, cut[r])
    return out


def _block(a, t, count, cap, layers: int, m, most: int, cut: np.ndarray) -> np.ndarray:
    """fill_drain_s of rows that fit, over WINDOW_LEVELS levels per kind from the least level
    a split can have (below it no split fits: each stage holds a layer, and kind j's stages
    hold at most (Z - a_j) / t_j layers each, so Z >= max_j (a_j + t_j) and
    Z >= (L + sum_j c_j a_j / t_j) / sum_j c_j / t_j); every level past the window is at least
    the least first level past it, Z_top, where (m - 1) Z + G(Z) >= (m - 1) Z_top + G(inf)
    (G falls with Z): that is the rest's bound. Exact where the window's least is below it
    and below the row's `cut` (fill_drain_s' cutoff: a level whose bound passes it is not read,
    so a row whose least is at least its cut returns a value at least its cut)."""
    N, K = t.shape
    live = count > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        z_lo = np.maximum(np.where(live, a + t, -np.inf).max(axis=1),
                          (layers + (count * a / t).sum(axis=1)) / (count / t).sum(axis=1))
        start = np.maximum(1.0, np.floor((z_lo[:, None] - a) / t) - 1)  # a level below z_lo at most
    W = min(most, WINDOW_LEVELS)
    past = start + W
    z_top = np.where(live & (past <= cap), a + past * t, np.inf).min(axis=1)
    kinds = _sorted_kinds(a, t, count, cap, layers)
    G_inf = _least_sum(kinds, np.arange(N), kinds.cap[:, None, :])[:, 0]
    with np.errstate(invalid="ignore"):
        tail = np.where(np.isfinite(z_top), (m - 1) * z_top + G_inf, np.inf)
    # the levels below _room_level have G = inf (the caps leave too little room) and are not
    # read; a row whose least level at or above it has its bound (m - 1) Z + G(inf) past its
    # cut reads none (the bound rises with Z): it keeps its tail, as when each level was skipped
    # (with the caps of a sync level, fill_drain_sync_s, half the rows: issue 33, 8 x 8 row)
    room = _room_level(a, t, count, cap, layers)
    with np.errstate(invalid="ignore"):
        opened = np.flatnonzero(~((m - 1) * room + G_inf > cut))
    best = tail.copy()
    if len(opened):
        o = opened
        best[o] = _read_window(a[o], t[o], cap[o], live[o], start[o], W, room[o],
                               kinds.rows(o), G_inf[o], m[o], cut[o], tail[o])
    return best


def _read_window(a, t, cap, live, start, W: int, room, kinds, G_inf, m, cut, tail) -> np.ndarray:
    """_block's least over the window's levels, W per kind from `start`, of rows whose tail
    bound is `tail`: each level at or above the row's `room` (_room_level) and `cap` read
    least first, a few at a time, and only while it can still lower the least F so far."""
    N = len(t)
    # F(Z) = (m - 1) Z + G(Z) >= (m - 1) Z + G(inf) (G falls with Z), so a level whose
    # (m - 1) Z + G(inf) passes the least so far by LEVEL_SKIP_REL cannot lower it (its G is the
    # same sum of at most 2 K terms >= 0 as G(inf), with more on the dearer kinds: float rounding
    # moves either by ~1e-15 relative) and is not read; the least of the rest, and so the
    # result, is the same float (most levels of a window are past a cap, or far above the
    # least: issue 33, 8 types). A level past the tail (the least so far at first) or the cut
    # is never read: only the levels below those bars are listed (_window_levels)
    with np.errstate(invalid="ignore"):
        bar = np.minimum(cut, tail + LEVEL_SKIP_REL * np.abs(tail))
    Z = _window_levels(a, t, cap, live, start, W, room, G_inf, m, bar)  # (N, levels), least first
    best = tail.copy()
    step = max(LEVELS_AT_ONCE, LEVEL_READS_AT_ONCE // N)
    # (one errstate for every pass: inf - inf where no bound yet, read; an absent kind's 0 x inf)
    with np.errstate(invalid="ignore", over="ignore"):
        low = (m[:, None] - 1) * Z + G_inf[:, None]
        for c0 in range(0, Z.shape[1], step):
            cols = slice(c0, c0 + step)
            todo = (np.isfinite(Z[:, cols]) & ~(low[:, cols] - best[:, None] > LEVEL_SKIP_REL * np.abs(best[:, None]))
                    & ~(low[:, cols] > cut[:, None]))
            r, c = np.nonzero(todo)
            if not len(r):  # every later level is past a cap or above the least (the bound rises with Z)
                break
            z = Z[r, c0 + c]
            held = _held(*(x.take(r, axis=0) for x in (kinds.a, kinds.t, kinds.cap)), z)  # per kind: in the sorted order too
            F = (m.take(r) - 1) * z + _least_sum(kinds, r, held[:, None, :])[:, 0]
            _lower(best, r, F)
    return best


def _window_levels(a, t, cap, live, start, W: int, room, G_inf, m, bar) -> np.ndarray:
    """(N, levels): per row of _read_window, least first and padded with inf, the window's
    levels a_j + k t_j (the same floats) of its present kinds with start_j <= k < start_j + W,
    k <= cap_j, at or above `room`, and at most one past the level whose bound
    (m - 1) Z + G(inf) reaches `bar` (each kind's levels rise with k). The window's W levels a
    kind are not built: on the 8 x 8 row's joint readings (issue 33) 14.4 million, of which
    2.0 million are within the caps and at or above the room, 0.35 million below the bars. The
    k are found by the quotients (Z - a_j) / t_j: the room's corrected to the first k whose
    level reaches it, the bar's taken one further (it is off by far less than one layer: the
    window's k are below a few thousand, the quotient's rounding ~1e-16 relative)."""
    N, K = t.shape
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z_bar = np.where(m > 1, (bar - G_inf) / (m - 1), np.where(G_inf <= bar, np.inf, -np.inf))
        hi = np.minimum(np.minimum(start + (W - 1), cap), np.floor((z_bar[:, None] - a) / t) + 1)
        lo = np.maximum(start, np.ceil((room[:, None] - a) / t) - 1)
        for _ in range(2):  # the quotient less one, up to the first k whose level reaches the room
            lo += a + lo * t < room[:, None]
        n = hi - lo + 1
    n = np.where(live & (n > 0), n, 0).astype(np.intp)
    per_row, n = n.sum(axis=1), n.ravel()
    at = np.repeat(np.arange(N * K), n)  # each listed level's (row, kind)
    nth = np.arange(len(at)) - np.repeat(np.cumsum(n) - n, n)  # its place in its kind's
    Z = np.full((N, int(per_row.max()) if N else 0), np.inf)
    Z[at // K, np.arange(len(at)) - np.repeat(np.cumsum(per_row) - per_row, per_row)] = \
        a.ravel().take(at) + (lo.ravel().take(at) + nth) * t.ravel().take(at)
    Z.sort(axis=1)
    return Z


# relative margin (of the largest stage time in a row) by which _room_level is lowered: far
# above the float rounding of the levels a + k t (~1e-16) and of its own sums (~1e-14)
ROOM_MARGIN_REL = 1e-9


def _room_level(a, t, count, cap, layers: int) -> np.ndarray:
    """(N,): per row of _block's, a level below which no split fits, so G = inf there (_held,
    _least_sum). Every present kind's stages hold a layer only from Z1 = max_j (a_j + t_j) on
    (the same float as the level of one layer: exact). Above it, kind j's c_j stages hold at
    most h_j(Z) = min(cap_j, (Z - a_j) / t_j) layers each (the integer count _held reads is at
    most that, as a + k t <= Z in floats gives k <= (Z - a) / t but for a rounding of ~1e-16 of
    the stage times), so sum_j c_j h_j(Z) >= L, real, piecewise linear and non-decreasing in Z
    with breaks where a kind fills its cap, a_j + cap_j t_j: the least such Z is interpolated
    between the last break (or Z1) below L and the first at or above it, and lowered by
    ROOM_MARGIN_REL of the row's largest stage time. With the caps a sync level sets
    (fill_drain_sync_s) most of a window's levels lie below it: on the 8 x 8 row (issue 33)
    2.0 of the 2.2 million levels _block read there had G = inf."""
    live = count > 0
    one = np.where(live, a + t, -np.inf).max(axis=1)  # Z1
    brk = np.concatenate([one[:, None], np.maximum(a + cap * t, one[:, None])], axis=1)  # (N, K + 1)
    held = brk[:, :, None] - a[:, None, :]  # (N, K + 1, K), in place below (1 / t rounds far inside the margin)
    held *= (1.0 / t)[:, None, :]
    np.minimum(held, cap[:, None, :], out=held)
    f = np.matmul(held, count[:, :, None])[:, :, 0]  # (N, K + 1): sum_j c_j h_j at each break
    # a break whose sum rounds to just below L counts as holding them: the least Z is then read
    # no later than that break (a sum off by its rounding, ~1e-14, would put it past)
    enough = f >= layers * (1 - ROOM_MARGIN_REL)
    q = np.where(enough, brk, np.inf).min(axis=1)
    p = np.where(enough, -np.inf, brk).max(axis=1)
    fq = np.where(enough, f, np.inf).min(axis=1)
    fp = np.where(enough, -np.inf, f).max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = p + (q - p) * np.clip((layers - fp) / (fq - fp), 0.0, 1.0)
    z = np.where(np.isfinite(z), z, np.where(np.isfinite(p), p, -np.inf))  # (Z1 holds them: -inf)
    scale = np.where(live, np.abs(a) + cap * t, 0.0).max(axis=1)
    return np.maximum(one, z - ROOM_MARGIN_REL * (scale + np.abs(z)))


def _lower(best: np.ndarray, r: np.ndarray, F: np.ndarray) -> None:
    """best[r[p]] = min(best[r[p]], F[p]) for r in increasing order (np.nonzero's rows): each
    row's values are one run, their least taken by reduceat (the same float as minimum.at's: a
    min rounds nothing), ~0.1 ms a pass less than minimum.at (issue 33, 8 x 8 row)."""
    first = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))
    rows = r[first]
    best[rows] = np.minimum(best[rows], np.minimum.reduceat(F, first))


# _block's levels read per row at once, least first: LEVELS_AT_ONCE at least, and more where
# it has few rows, LEVEL_READS_AT_ONCE (row, level) pairs a pass. Which levels a pass reads
# changes what is read, not the result (the same float: a level is skipped only where it cannot
# lower the least), and a pass of a few rows costs mostly numpy's overhead per call (issue 33,
# 8 x 8 row: the joint readings, 573 calls of a median of 4 rows, 4.6 -> 3.2 s of CPU with
# SYNC_READS_AT_ONCE)
LEVELS_AT_ONCE = 8
LEVEL_READS_AT_ONCE = 256
# _block skips a level whose lower bound passes the least so far by this much, relative: far
# above the float rounding of the sums it compares (~1e-15), so the skipped F is above it too
LEVEL_SKIP_REL = 1e-9


def _held(a, t, cap, z) -> np.ndarray:
    """(P, K): the layers a stage of each kind holds at level z (P,): the quotient's guess,
    corrected where rounding put it one off (the same float expression a + k t as the levels,
    so a stage's own level counts itself)."""
    zz = z[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        held = np.clip(np.floor((zz - a) / t), 0, cap)
        held = np.where(np.isnan(held) | (held == np.inf), 0.0, held)  # (nan_to_num's, without its wrapper)
        for _ in range(2):
            held = held + ((held < cap) & (a + (held + 1) * t <= zz))
            held = held - ((held >= 1) & (a + held * t > zz))
    return held


@dataclass(frozen=True)
class _Kinds:
    """_block's rows with their kinds cheapest first (a stable sort of t, as _least_sum
    reads them), read once a block, not once a pass: each pass reads its rows again, a row as
    often as it has levels read (issue 33, 8 x 8 row: 2.35 million (row, level) pairs in 5,794
    passes, each sorting and gathering its pairs' kinds). a, t, cap, count: (N, K) in that
    order; base: (N,) sum_j c_j (a_j + t_j), each stage's first layer, summed in the kinds'
    own order as before (a sum's rounding reads its order); extra: (N,) L - pp, the layers past
    each stage's first."""
    a: np.ndarray
    t: np.ndarray
    cap: np.ndarray
    count: np.ndarray
    base: np.ndarray
    extra: np.ndarray

    def rows(self, r: np.ndarray) -> _Kinds:
        """The kinds of rows r."""
        return _Kinds(*(x.take(r, axis=0) for x in (self.a, self.t, self.cap, self.count, self.base, self.extra)))


def _sorted_kinds(a, t, count, cap, layers: int) -> _Kinds:
    order = np.argsort(t, axis=1, kind="stable")  # cheapest kind first
    rows = np.arange(len(order))[:, None]  # (take_along_axis's gathers, without its checks)
    return _Kinds(a[rows, order], t[rows, order], cap[rows, order], count[rows, order],
                  (count * (a + t)).sum(axis=1), layers - count.sum(axis=1))


def _least_sum(kinds: _Kinds, r: np.ndarray, held: np.ndarray) -> np.ndarray:
    """(P, levels): G, the least sum_s T_s of row r[p] of `kinds` with each stage of kind j
    holding 1 to held[p, .., j] layers (held: (P, levels, K), the kinds in kinds' order): the
    layers past each stage's first go to the cheapest kinds first; inf where they do not fit."""
    cnt = kinds.count.take(r, axis=0)[:, None, :]  # (ndarray.take: faster than kinds.count[r] here)
    room = cnt * (held - 1)  # beyond each stage's first layer
    ts = kinds.t.take(r, axis=0)[:, None, :]
    extra = kinds.extra.take(r)[:, None, None]
    before = np.cumsum(room, axis=2) - room
    take = np.clip(extra - before, 0, np.maximum(room, 0))
    feasible = ((room >= 0) | (cnt == 0)).all(axis=2) & (room.sum(axis=2) >= extra[..., 0])
    G = kinds.base.take(r)[:, None] + (take * ts).sum(axis=2)
    return np.where(feasible, G, np.inf)


# levels of the slowest sync tried per kind of stage (fill_drain_sync_s): from the least a split
# can have; past them, one bound
SYNC_WINDOW_LEVELS = 12
# sync levels read per row at once, least first (fill_drain_sync_s stops at the least F so far):
# SYNC_LEVELS_AT_ONCE at least, and SYNC_READS_AT_ONCE (row, level) pairs a pass where it has
# few rows (the same float either way, as LEVEL_READS_AT_ONCE)
SYNC_LEVELS_AT_ONCE = 4
SYNC_READS_AT_ONCE = 128
# relative margin above the least F so far past which fill_drain_sync_s reads a level's pipeline
# term no further (fill_drain_s' cutoff): far above the float rounding of J and F (~1e-15), so
# a level cut there would not have lowered the least
SYNC_CUT_REL = 1e-9
# a stage's layers at a sync level are counted with this much room (a count one too high only
# lowers the bound): the level and the configuration's own sync are the same sum d + n g, but
# need not round alike
SYNC_ROOM = 1e-9


def fill_drain_sync_s(a: np.ndarray, t: np.ndarray, count: np.ndarray, layers: int, m: np.ndarray,
                      caps: np.ndarray | None, d: np.ndarray, g: np.ndarray, v: np.ndarray,
                      pipeline_s: np.ndarray | None = None) -> np.ndarray:
    """Row by row, the least over integer splits n (1 <= n_s <= cap_s, sum_s n_s = L) of
        J_v(n) + max_s (d_s + n_s g_s),   J_v(n) = ((m - 1) max_s T_s + sum_s T_s) / v,
    T_s = a_s + n_s t_s: a lone pipeline and the gradient sync after its last backward, read
    together (kinds as fill_drain_s; d, g: (N, K) >= 0, each kind's stage and per-layer sync;
    v: (N,) >= 1, m read as fill_drain_s reads it). The two apart (the least J plus the least
    slowest sync) leave out that the split balancing the pipeline piles layers on the fastest
    GPUs, whose syncs then take longest (issue 33, 8 types: 26 stages, the B200 stages' sync
    0.217 s against a separate bound of 0.131 s).

    How: for a level W, a stage of kind j holds at most w_j(W) = #{k : d_j + k g_j <= W}
    layers where the slowest sync is at most W (any number where g_j = 0 and d_j <= W, none
    where d_j > W). A split whose slowest sync is W* (some d_j + k g_j) has
    J_v(n) >= fill_drain_s(caps min w(W*)) / v, so its value is at least
    F(W*) = W* + fill_drain_s(.., min(caps, w(W*))) / v; the least F over the levels is at
    most every split's value. Below W_lo = max_j (d_j + g_j) (every stage holds a layer) and,
    where every g_j > 0, (L + sum_j c_j d_j / g_j) / sum_j c_j / g_j (the stages must hold L
    layers), no split fits; SYNC_WINDOW_LEVELS levels per kind are tried from there, and a
    split whose slowest sync is past them, at least the least level past them W_top, is at
    least W_top + fill_drain_s(.., caps) / v (fill_drain_s falls as the caps grow). Exact
    where the window's least is below that; a bound always. inf where no split fits; -inf (no
    bound) where a present kind's g is negative or a sync is not finite. `pipeline_s`:
    fill_drain_s(a, t, count, layers, m, caps) where the caller has it (priced_bounds_s reads
    it apart too), else computed here (the same float: fill_drain_s caps a stage at most
    layers - pp + 1 <= layers layers itself)."""
    a, t, count = np.asarray(a, float), np.asarray(t, float), np.asarray(count, float)
    d, g = np.asarray(d, float), np.asarray(g, float)
    N, K = t.shape
    m = _per_row(m, N)
    v = _per_row(v, N)
    most = float(layers)
    cap = np.full((N, K), most) if caps is None else np.minimum(np.asarray(caps, float), most)
    free = (fill_drain_s(a, t, count, layers, m, cap) if pipeline_s is None else pipeline_s) / v  # J_v, no sync level
    # no split fits where free is inf; -inf (no bound) where a sync term is not a number >= 0
    present = count > 0
    out = np.where(np.isinf(free), np.inf, -np.inf)
    ok = (np.isfinite(free) & np.isfinite(np.where(present, d, 0.0)).all(1)
          & (np.where(present, g, 0.0) >= 0).all(1) & np.isfinite(np.where(present, g, 0.0)).all(1))
    rows = np.flatnonzero(ok)
    if not len(rows):
        return out
    a, t, count, cap, d, g, m, v = (x[rows] for x in (a, t, count, cap, d, g, m, v))
    present, free = count > 0, free[rows]
    R = len(rows)
    pos = present & (g > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.where(pos.all(1, where=present) & pos.any(1),
                          (layers + np.where(pos, count * d / g, 0.0).sum(1)) / np.where(pos, count / g, 0.0).sum(1),
                          -np.inf)
        w_lo = np.maximum(np.where(present, d + g, -np.inf).max(1), spread)
        start = np.where(pos, np.maximum(1.0, np.floor((w_lo[:, None] - d) / g) - 1), 1.0)
    S = SYNC_WINDOW_LEVELS
    k = start[:, :, None] + np.arange(S, dtype=float)[None, None, :]  # (R, K, S)
    levels = d[:, :, None] + k * g[:, :, None]
    # a kind without a per-layer sync has one level, d_j
    levels = np.where(present[:, :, None] & (k <= cap[:, :, None]) & (pos[:, :, None] | (k == start[:, :, None])),
                      levels, np.inf)
    past = start + S
    w_top = np.where(pos & (past <= cap), d + past * g, np.inf).min(1)
    W = np.sort(levels.reshape(R, K * S), axis=1)  # (R, levels), least first
    with np.errstate(invalid="ignore"):
        best = np.where(np.isfinite(w_top), w_top + free, np.inf)  # the tail's bound
    # levels in increasing order, a few at a time: F(W) >= W + free, so a level at or above the
    # least F so far cannot lower it and is not read (the least of the rest is the same)
    step = max(SYNC_LEVELS_AT_ONCE, SYNC_READS_AT_ONCE // R)
    for c0 in range(0, K * S, step):
        cols = W[:, c0:c0 + step]
        todo = np.isfinite(cols) & (cols + free[:, None] < best[:, None])
        r, c = np.nonzero(todo)
        if not len(r):
            break
        w = cols[r, c]
        # a level whose pipeline term cannot bring F below the least so far need not be read
        # exactly (fill_drain_s' cutoff): J >= cutoff gives F >= best (1 + SYNC_CUT_REL) - ~1e-15
        # best > best, and a J below it is exact, so `best` and the result are the same floats
        cutoff = (best[r] * (1 + SYNC_CUT_REL) - w) * v[r]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            held = np.where(g[r] > 0, np.floor((w[:, None] * (1 + SYNC_ROOM) - d[r]) / g[r] + SYNC_ROOM),
                            np.where(d[r] <= w[:, None] * (1 + SYNC_ROOM), most, 0.0))
        held = np.clip(held, 0.0, cap[r])
        held[np.isnan(held) | (held == np.inf)] = 0.0  # (nan_to_num's, without its wrapper)
        F = w + fill_drain_s(*(x.take(r, axis=0) for x in (a, t, count)), layers, m.take(r), held, cutoff) / v.take(r)
        _lower(best, r, F)
    out[rows] = best
    return out


def fill_drain_relaxed_s(t: np.ndarray, count: np.ndarray, layers: int, m: np.ndarray,
                         rate: np.ndarray | None = None) -> np.ndarray:
    """Row by row, at most J of the module docstring with every stage term 0 (t, count: (N, K)
    kinds as fill_drain_s, t > 0; m: (N,)), in K^2 operations a row: the least over real splits
    (n_s >= 1, T_s = n_s t_s), which include the integer ones. Read by kind: kind j's c_j
    stages hold n_j >= c_j layers at cost t_j each and, where no stage passes Z, at most
    r_j Z of them (r_j = c_j / t_j). Over a level Z >= Z0 = max(max_j c_j / r_j, the Z where
    sum_j r_j Z reaches L) (below it no split holds every layer with each stage at most Z),
    G(Z) fills the L - sum_j c_j layers past each stage's first into the kinds in increasing
    t, kind j taking r_j Z - c_j; G is convex, piecewise linear, its slope changing only where
    one more kind is needed, at Z_j = (L - sum c + sum_(i<=j) c_i) / sum_(i<=j) r_i (kinds
    1..j just hold every layer), so (m - 1) Z + G(Z) is least at Z0 or at some max(Z_j, Z0),
    each evaluated. `rate`: r_j where given (else c_j / t_j), a kind that stands for several
    (FamilyBounds.fill_drain_family: a group at any of its tp values, each term at its
    least cost and most room): the least of the same problem with c_j / r_j <= Z. inf where a
    present kind's floor is not finite, or the kinds' c_j sum past L."""
    t, count = np.asarray(t, float), np.asarray(count, float)
    N, K = t.shape
    out = np.full(N, np.inf)
    if N == 0:
        return out
    present = count > 0
    rate = np.where(present, count / np.where(present, t, 1.0), 0.0) if rate is None else np.asarray(rate, float)
    ok = (np.isfinite(np.where(present, t, 1.0)).all(1) & np.isfinite(np.where(present, rate, 1.0)).all(1)
          & (count.sum(1) <= layers))
    m = _per_row(m, N)
    if ok.all():  # (most calls: every row, read in place, not gathered)
        r = slice(None)
    else:
        r = np.flatnonzero(ok)
        t, count, m, rate = t[r], count[r], m[r], rate[r]
    t = np.where(count > 0, t, np.inf)  # an absent kind: no room, no cost
    order = np.argsort(t, axis=1, kind="stable")
    rows = np.arange(len(order))[:, None]  # (take_along_axis's gathers, without its checks)
    t, c = t[rows, order], count[rows, order]
    rate = np.where(c > 0, rate[rows, order], 0.0)
    extra = layers - c.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        zj = (extra + np.cumsum(c, axis=1)) / np.cumsum(rate, axis=1)
        tmax = np.where(c > 0, c / rate, -np.inf).max(axis=1, keepdims=True)  # t_j where r_j = c_j / t_j
    z0 = np.maximum(tmax, zj[:, -1:])
    Z = np.concatenate([z0, np.maximum(np.nan_to_num(zj, nan=np.inf), z0)], axis=1)  # (rows, levels)
    with np.errstate(invalid="ignore"):  # (an absent kind's 0 x inf)
        base = np.where(c > 0, c * t, 0.0).sum(axis=1)
    if Z.size < RELAXED_PAIRS_AT_ONCE:
        with np.errstate(invalid="ignore"):
            F = (m[:, None] - 1) * Z + (base[:, None] + _taken_s(c, rate, t, Z, extra))
        out[r] = np.where(np.isfinite(F), F, np.inf).min(axis=1)
        return out
    pr, pl = _distinct_levels(Z)
    z = Z[pr, pl]

    def at(x):  # x's rows of the pairs (ndarray.take: a third of the time of x[pr] here)
        return x.take(pr, axis=0)
    with np.errstate(invalid="ignore"):
        F = (at(m) - 1) * z + (at(base) + _taken_s(at(c), at(rate), at(t), z[:, None], at(extra))[:, 0])
    F = np.where(np.isfinite(F), F, np.inf)
    out[r] = np.minimum.reduceat(F, np.flatnonzero(pl == 0))
    return out


def _distinct_levels(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, levels) of fill_drain_relaxed_s' levels Z (rows, levels) to read: each row's first,
    Z0, and those that differ from it, rows in increasing order. A level max(Z_j, Z0) equal to
    Z0 is the same float and gives the same F (on the 8 x 8 row, issue 33, 1.6 of the 3.6
    million levels were Z0 again)."""
    keep = np.ones(Z.shape, bool)
    keep[:, 1:] = Z[:, 1:] != Z[:, :1]
    return np.nonzero(keep)


# fill_drain_relaxed_s reads every level of its rows at once below this many (row, level) pairs,
# and past it only the levels that differ from each row's first (the gathers cost more than
# they save on a few rows)
RELAXED_PAIRS_AT_ONCE = 2048


def _taken_s(c, rate, t, Z, extra) -> np.ndarray:
    """(rows, levels): fill_drain_relaxed_s' sum_j take_j t_j at each level Z (kinds sorted,
    c, rate, t: (rows, K); Z: (rows, levels); extra: (rows, 1)), kind j taking room
    r_j Z - c_j past its stages' first layers, cheapest first. The plain expressions'
    operations in their order, each written into one (rows, levels, K) array or its cumsum:
    two such arrays, not six (the 8 x 8 row's largest call reads 74,668 rows of 8 kinds at
    9 levels; issue 33), the same floats."""
    absent = ~(c > 0)[:, None, :]
    some_absent = absent.any()  # (else the masks below change nothing)
    with np.errstate(invalid="ignore"):
        room = rate[:, None, :] * Z[:, :, None]
        room -= c[:, None, :]
        if some_absent:
            np.copyto(room, 0.0, where=absent)
        take = _cumsum_kinds(room)
        take -= room  # the room of the cheaper kinds
        np.subtract(extra[:, :, None], take, out=take)
        np.clip(take, 0, room, out=take)
        take *= t[:, None, :]
        if some_absent:
            np.copyto(take, 0.0, where=absent)  # an absent kind's 0 x inf
    return take.sum(axis=2)


# rows of kinds past which _cumsum_kinds adds kind by kind (measured: 120 rows of 5 kinds cost
# about the same either way)
CUMSUM_LOOP_ROWS = 256


def _cumsum_kinds(x: np.ndarray) -> np.ndarray:
    """np.cumsum(x, axis=-1) for a few kinds on the last axis: the same additions in the same
    order (a running sum: out_k = out_(k-1) + x_k), one vectorised add per kind. numpy's cumsum
    walks each row's few kinds in a loop of its own: on the 8 x 8 row's relaxed pipelines
    (issue 33, 480,000 rows of 2-8 kinds at 3-9 levels) that was 40% of _taken_s. A small x
    (below CUMSUM_LOOP_ROWS rows of kinds) costs less in numpy's own loop."""
    if x.size < CUMSUM_LOOP_ROWS * x.shape[-1]:
        return np.cumsum(x, axis=-1)
    out = np.empty_like(x)
    out[..., 0] = x[..., 0]
    for k in range(1, x.shape[-1]):
        np.add(out[..., k - 1], x[..., k], out=out[..., k])
    return out


# relative margin by which priced_bounds_s is lowered: its levels and sums are other float
# operations than the plan's own pricing (far below the tie tolerance planner.REL_TOL, 1e-9)
PRICED_SAFETY = 1e-12


def priced_bounds_s(cs: list, allow_full_recompute: bool) -> np.ndarray:
    """Per lone class's priced coefficients (cost/coefficients.StageCoefficients of one class on
    one network), a lower bound of its iteration time over every split that fits memory, reading
    the slowest stage and the stages' sum together (issue 33: on 8 GPU types the priced
    pipelines whose tight bound, one_class.tight_lower_bound_s, bounds the two apart were each
    proved unable to win by the exact split DP, 0.14 s apiece).

    Its time is (cost/schedule.iteration_time_s) (m - 1/v) max_s T_s + sum_s T_s / v + max_s D_s
    with T_s = a_s + n_s t_s + r_s u_s and D_s = d_s + n_s g_s. Recompute only adds time
    (u_s >= 0, one_class's module docstring; a row with u_s < 0 reads t_s + u_s), so
    T_s >= a_s + n_s t_s; a split that fits memory has n_s <= ncap_s (one_class.
    max_layers_per_stage's caps, with every layer fully recomputed where that is allowed) and
    every stage holds v layers at least, so n_s >= 1. Then
        (m - 1/v) max T + sum T / v = ((v m - 1) max T + sum T) / v >= J(v m) / v
    with J fill_drain_s's exact least over those integer splits (J reads its m as v m), and
    max_s D_s >= max(max_s (d_s + v g_s), (sum_s d_s + L min_s g_s) / pp) (one_class.
    lower_bound_s's); their sum, and the two read together (fill_drain_sync_s, the least of
    J_v + max_s D_s over the same splits), are each at most the least of the sum, so their
    larger is. A configuration that counts the embedding / loss as a layer slot is read
    through one_class.slot_relaxation (the same times, n'_s >= 1; d'_s + n'_s g_s its sync);
    a zero-bubble schedule's drain credit is taken off as the tight bound's is (one_class.
    drain_credit_s). So the bound is at most the configuration's optimum; lowered by
    PRICED_SAFETY. inf where no split fits the caps."""
    from paraplan.solver.bounds import one_class  # here: one_class's bounds are not read at import

    out = np.full(len(cs), np.inf)
    shapes: dict[tuple[int, int], list] = {}
    for i, c in enumerate(cs):
        r = one_class.slot_relaxation(c)
        shapes.setdefault((r.pp, r.layers), []).append((i, r, one_class.drain_credit_s(c)))
    for (pp, L), items in shapes.items():
        a = np.stack([r.stage_time_s for _, r, _ in items])
        t = np.stack([r.layer_time_s for _, r, _ in items])
        u = np.stack([r.recompute_time_s for _, r, _ in items])
        caps = np.stack([_caps(r, allow_full_recompute) for _, r, _ in items])
        v = np.array([r.outer.virtual_stages for _, r, _ in items], float)
        m = np.array([r.outer.num_micro_batches for _, r, _ in items], float)
        d = np.stack([r.stage_sync_time_s for _, r, _ in items])
        g = np.stack([r.layer_sync_time_s for _, r, _ in items])
        credit = np.array([x for _, _, x in items])
        out[[i for i, _, _ in items]] = (pipeline_sync_bounds_s(a, t, u, caps, d, g, v, m, L) - credit) * (1 - PRICED_SAFETY)
    return out


def pipeline_sync_bounds_s(a: np.ndarray, t: np.ndarray, u: np.ndarray, caps: np.ndarray, d: np.ndarray,
                           g: np.ndarray, v: np.ndarray, m: np.ndarray, layers: int) -> np.ndarray:
    """Row by row, priced_bounds_s's bound before its drain credit and safety margin, of a lone
    class whose coefficients are given as arrays (N, pp): stage terms a, layer times t,
    recompute times u, the layer caps memory allows `caps` (_caps), the stage and per-layer
    syncs d, g, of a split of `layers` layers in chunks of v (N,) with m (N,) micro-batches
    (a configuration with the embedding / loss as slots: its one_class.slot_relaxation's). The
    larger of J_v + the sync bound read apart and fill_drain_sync_s, each at most
    (m - 1/v) max_s T_s + sum_s T_s / v + max_s D_s of every split within the caps (T_s >= a_s
    + n_s t_s: recompute only adds, u_s >= 0; a row with u_s < 0 reads t_s + u_s). Each is a
    bound of the least of that form over those splits, and the form grows with every a_s, t_s,
    d_s, g_s split by split, so read at floors of them with the same caps (unpriced_memory.py:
    build's memory) it still bounds the priced class."""
    t = np.where(u < 0, t + u, t)
    pp = a.shape[1]
    sync = np.maximum((d + v[:, None] * g).max(axis=1), (d.sum(axis=1) + layers * g.min(axis=1)) / pp)
    a, t, count, caps, d, g = _as_kinds(a, t, caps, d, g)
    # the orders of one pipeline's stages often give the same kinds: each read once
    first, back = _distinct_rows(np.concatenate([a, t, count, caps, d, g, v[:, None], m[:, None]], axis=1))
    a, t, count, caps, d, g, vu, mu = (x[first] for x in (a, t, count, caps, d, g, v, m))
    pipeline = fill_drain_s(a, t, count, layers, vu * mu, caps)
    apart = pipeline[back] / v + sync
    together = fill_drain_sync_s(a, t, count, layers, vu * mu, caps, d, g, vu, pipeline)[back]
    return np.maximum(apart, together)


def _distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, back) of np.unique(x, axis=0, return_index=True, return_inverse=True): each
    distinct row's first index, in increasing order of the rows (compared as numbers, the
    first column first), and each row's place among them. One lexsort of the columns, stable
    as np.unique's mergesort, where np.unique views each row as one structured element and
    sorts those (the three-type, two-site row: 936 calls of ~4 rows, a fifth of
    pipeline_sync_bounds_s' time; issue 33)."""
    order = np.lexsort(x.T[::-1])
    s = x[order]
    new = np.ones(len(x), bool)  # a row unlike the one before it in the sorted order
    new[1:] = (s[1:] != s[:-1]).any(axis=1)
    back = np.empty(len(x), np.intp)
    back[order] = np.cumsum(new) - 1
    return order[new], back


def _as_kinds(a: np.ndarray, t: np.ndarray, caps: np.ndarray, d: np.ndarray,
              g: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row of (N, pp) stage terms, floors, caps and syncs (stage d, per layer g), its stages
    grouped into kinds of equal (a, t, cap, d, g), padded with absent kinds (count 0) to the
    most kinds of any row: (a, t, count, caps, d, g), (N, K) each. fill_drain_s then reads K
    kinds, not pp stages. Exact (identical stages share one list of levels), and what keeps a
    long pipeline's bound in memory: its work is K^2 x WINDOW_LEVELS floats a row, so 1,024
    distinct stages took 1.2 GB where a million layers' pipeline has 3 kinds. A row's kinds
    come in np.unique's order (sorted by a, then t, cap, d, g), every row's found in one
    lexsort (np.unique a row at a time was 0.5 s of the 8 x 8 row's 41 calls, 1,847 rows;
    issue 33)."""
    N, pp = t.shape
    row = np.repeat(np.arange(N), pp)
    cols = [x.ravel() for x in (a, t, caps, d, g)]
    order = np.lexsort((*cols[::-1], row))
    row, cols = row[order], [x[order] for x in cols]
    new = np.ones(N * pp, bool)  # a stage that starts a kind: its row's first, or unlike the one before
    new[1:] = row[1:] != row[:-1]
    for x in cols:
        new[1:] |= x[1:] != x[:-1]
    starts = np.flatnonzero(new)
    kind = np.cumsum(new) - 1  # each stage's kind, numbered across rows
    first_kind = kind[np.flatnonzero(np.concatenate(([True], row[1:] != row[:-1])))]  # (N,): each row's first
    k_of = kind[starts] - first_kind[row[starts]]  # each kind's place in its row
    count = np.bincount(kind, minlength=len(starts)).astype(float)
    K = int(k_of.max()) + 1 if len(k_of) else 0
    out = [np.zeros((N, K)), np.ones((N, K)), np.zeros((N, K)), np.zeros((N, K)), np.zeros((N, K)), np.zeros((N, K))]
    at = (row[starts], k_of)
    for x, col in zip(out, (cols[0][starts], cols[1][starts], count, cols[2][starts], cols[3][starts],
                            cols[4][starts])):
        x[at] = col
    return tuple(out)


def _caps(c, allow_full_recompute: bool) -> np.ndarray:
    """Per stage, the most layers that fit memory (coefficients.max_layers_per_stage; without
    full recompute a layer keeps its activations, as one_class._stage_pieces reads it)."""
    from paraplan.cost import coefficients

    return coefficients.max_layers_per_stage(c.layer_state_bytes, c.layer_act_bytes,
                                             c.layer_ckpt_bytes if allow_full_recompute else c.layer_act_bytes,
                                             c.capacity_bytes, c.stage_mem_bytes, c.outer.virtual_stages,
                                             c.layers).astype(float)
