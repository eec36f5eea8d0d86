"""Exact layer split of one outer configuration without a MIP solver: enumeration of the two
bottleneck values, and a dynamic programme over the stages for each pair.

It solves the integer model of formulations/quantize.py on its quantised coefficients
(`formulations.quantize.quantize`), so its optimal objective is that model's, exactly.

Sets
    S = {0, ..., pp-1}        pipeline stages
    J = {1, ..., N}           chunk counts of one stage, N = L / v (no split exists unless v | L
                              and N >= pp: every stage holds at least one chunk); with the
                              embedding / loss counted as a layer slot (the outer's flags),
                              N = (L + e + l) / v and stage s holds n = v k - o_s layers
                              (cost/pipeline_split.stage_layer_counts)

Parameters (integers; quantize.py's docstring, marked ^ there)
    â_s, t̂_s, û_s, ê_s, ĝ_s   [time quanta]   per-stage time coefficients
    R, m, v                     as in quantize.py;  alpha = v m - 1 >= 0,  beta = v >= 1
    memory: not rounded; quantize.fit_recompute_range decides it as cost.schedule.fits does

Per-stage tables (the exact per-stage choice of the recompute count)
    For stage s holding k chunks (n = v k layers) the feasible recompute counts are the integers
        r in [lo_s(n), hi_s(n)] within [0, min(n, R)]       (quantize.py, Exact memory),
    an interval: the peak memory is monotone in r. r enters only T_s = â_s + n t̂_s + r û_s (not D_s,
    not the other stages), and the objective is non-decreasing in every T_s (alpha >= 0), so the
    best r is the interval's lower end when û_s >= 0 and its upper end otherwise. That gives, for
    every (s, k), feasible_s(k), T_s(k) and D_s(k) = ê_s + n ĝ_s  (arrays of shape (pp, N)).

Recompute patterns (cost/recompute_patterns.py: the counts the job's framework runs)
    A framework sets one value p for every stage (Megatron-LM's N, torchtitan's k), and the value
    fixes r_s = rho_p(s, k) for every (s, k) (recompute_patterns.options on the grid of n). With
    p fixed the tables read r instead of choosing it: feasible_s(k) iff lo_s(n) <= rho_p(s, k) <=
    hi_s(n), T_s(k) = â_s + n t̂_s + rho_p û_s; the recurrence below is unchanged, so
        OPT_pattern = min over p of OPT(tables of p).
    The free choice (PER_STAGE) is a relaxation of every pattern (each rho_p lies in [0, min(n,
    R)]), so its optimum, solved first, bounds OPT_pattern from below, and is OPT_pattern when
    its counts are some rho_p's on its split. Otherwise each distinct table is solved with the
    cutoff of the best time so far, from the value whose counts cover the free optimum's; a
    value is dropped before any DP when alpha tau_0 + beta delta_0 + Lsum reaches the cutoff
    (tau_0, delta_0 the least thresholds with an admissible split: a lower bound on its F).

Problem (equivalent to quantize.py's model after eliminating r)
    minimise  F(k) = alpha max_s T_s(k_s) + Σ_s T_s(k_s) + beta max_s D_s(k_s)
    over k in J^pp with Σ_s k_s = N and feasible_s(k_s) for every s.

Under a zero-bubble schedule (quantize.py, Zero bubble) the pacing term is max_s P_s(k_s) with
P_s = alpha T_s + n ŝ_s and the sum reads the passes B_s = T_s - n ŝ_s (zero_bubble_tables): the
same problem with P for alpha T (alpha then 1) and B for T in the sum, so everything below holds
with the thresholds tau ranging over P. The pacing stage needs no enumeration of its own: the
smallest admissible maximum is what tau already enumerates.

Recurrence. For thresholds tau in 𝒯 = {T_s(k)} and delta in 𝒟 = {D_s(k)} (over feasible (s, k))
let A_s(tau, delta) = {k feasible : T_s(k) <= tau, D_s(k) <= delta} and
    f_0(j) = T_0(j) if j in A_0 else inf,
    f_s(j) = min_{k in A_s} f_{s-1}(j - k) + T_s(k)          (s = 1, ..., pp-1),
    Sum(tau, delta) = f_{pp-1}(N),                            the min-sum allocation under the caps,
    OPT = min_{tau, delta} alpha tau + beta delta + Sum(tau, delta).
The recurrence is the textbook DP of a separable allocation problem (every stage's cost depends
only on its own k, and the stages interact only through Σ k_s = N), so f_{pp-1}(N) is exactly
Sum. OPT equals min F: the optimal k* is admissible for tau = max T_s(k*_s), delta =
max D_s(k*_s), which bounds the minimum by F(k*); conversely the DP's allocation for any pair
keeps max T <= tau and max D <= delta, so its F is at most alpha tau + beta delta + Sum.
(alpha = 0 makes tau irrelevant: 𝒯 is then its largest element only.)

Search (which pairs are evaluated): branch and bound over intervals of thresholds.
Sum(tau, delta) is non-increasing in both thresholds and bounded below by
    Lsum = max over integer lambda of  lambda N + Σ_s min_{k feasible} (T_s(k) - lambda k)
and, for all tau' <= tau and delta' <= delta, by SumLB(tau, delta): when the tables are monotone
(feasible k form a prefix and T_s, D_s do not decrease on it, which is what cost/ produces, so
A_s = {1, ..., cap_s}), Σ_s T_s(1) plus the N - pp smallest steps of the lower convex hulls of
the T_s, at most cap_s - 1 of them from stage s (floored to integers: the continuous convex
relaxation of the allocation); otherwise the Lagrangian bound above restricted to A_s.
    1. F_best: the hint's F, or the cutoff (below), then the pair (tau_0, max 𝒟), with tau_0
       the smallest tau passing the necessary test (every A_s non-empty and Σ_s min A_s <= N
       <= Σ_s max A_s, monotone in tau, found by bisection) with no sync cap.
    2. Rows delta in [delta_a, delta_b] (indices into sorted 𝒟) are bounded by
           beta delta_a + alpha tau_min(delta_b) + SumLB(tau_w, delta_b),
       where tau_min(delta) is the smallest tau passing the necessary test (it does not grow
       with delta) and tau_w the largest tau with alpha tau + beta delta_a + Lsum < F_best (no
       larger tau can win); an interval whose bound reaches F_best is dropped, others are
       halved down to single rows.
    3. In a row, the same on intervals [tau_a, tau_b] of 𝒯 from tau_min(delta):
       alpha tau_a + beta delta + SumLB(tau_b, delta); single pairs are solved by the DP.
    4. A pair whose admissible sets equal an evaluated pair's is skipped: the DP would return
       the same allocation, whose true F is already recorded.
Every dropped interval holds no pair that could beat F_best, so when the recursion ends the
incumbent is optimal (infeasible when no pair had a split). Each DP only visits the j that can
still complete: after stage s, j lies in [max(Σ_{s'<=s} lo_s', N - Σ_{s'>s} hi_s'),
min(Σ_{s'<=s} hi_s', N - Σ_{s'>s} lo_s')] with lo_s, hi_s = min, max A_s, a window of at most
Σ hi - N + 1 values.

Complexity. Tables, hulls and Lsum: O(pp N log(pp N)). One pair's DP: O(pp W^2), W <= N the
window width; one SumLB: O(pp log N log(range)). Pairs: at most |𝒯| |𝒟| <= (pp N)^2, and
the interval recursion adds a factor O(log(pp N)), so O(pp^3 N^4 log(pp N)) in the worst case:
polynomial in pp and L, unlike the integer models. In practice the first pair is within a few
layer-times of the optimum, the bounds drop all but a few rows, and W is a few chunks
(tests/formulations/test_split_dp.py solves 10,000 layers).

Time limit (wall clock). When the limit stops the loops, the answer is "feasible" (a split was
found) or "timeout", with the valid bound min(F_best, the smallest pair bound not yet evaluated).

Tolerance. As quantize.py: bound_s = q (bound in quanta) / v - E, and an optimal split's
objective_s - bound_s <= 2E.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace

import numpy as np

from paraplan.cost import recompute_patterns
from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.pipeline_split import slot_offsets, stage_layer_counts
from paraplan.cost.schedule import first_stage_min_layers, fits, iteration_time_s
from paraplan.formulations.quantize import QuantizedCoefficients, fit_recompute_range, quantize
from paraplan.formulations.result import SolverError, SplitResult

INF = 1 << 61  # "no allocation"; two of them still add up inside int64
# Largest (j window) x (k range) block the DP takes at once: bounds the temporary arrays.
DP_BLOCK_CELLS = 1 << 22


@dataclass(frozen=True, slots=True)
class StageTables:
    """Per-stage choices of `k` chunks, arrays of shape (pp, N) indexed [s, k - 1]."""

    feasible: np.ndarray  # bool
    recompute: np.ndarray  # best r_s for that k (int64; meaningless where infeasible)
    stage_q: np.ndarray  # T_s(k) in time quanta (INF where infeasible)
    sync_q: np.ndarray  # D_s(k) in time quanta (INF where infeasible)
    monotone: bool  # feasible k form a prefix and T, D are non-decreasing on it, every stage
    # the pacing table the thresholds tau read: T_s(k) itself, or under a zero-bubble schedule
    # P_s(k) = alpha T_s(k) + n ŝ_s with stage_q then the passes T_s(k) - n ŝ_s (zero_bubble_tables)
    pace_q: np.ndarray | None = None

    @property
    def pace(self) -> np.ndarray:
        return self.stage_q if self.pace_q is None else self.pace_q


def stage_tables(Q: QuantizedCoefficients, fit: tuple[np.ndarray, np.ndarray], pp: int, layers: int,
                 v: int, first_min: int | None = None, n: np.ndarray | None = None,
                 recompute: np.ndarray | None = None) -> StageTables:
    """feasible_s(k), the best r_s(k), T_s(k) and D_s(k) of the module docstring; `fit` =
    quantize.fit_recompute_range(c, n, R), the exact memory intervals, for `n` (pp, N) the
    layers stage s holds with k chunks (default v k; with the embedding / loss slots v k - 1 on
    the end stage, cost/pipeline_split.stage_layer_counts); stage 0 needs n_0 >= first_min
    (schedule.first_stage_min_layers: an MoE dense prefix in its first chunk). `recompute`
    (pp, N): r_s(k) fixed by one parameter of the framework's pattern (Recompute patterns in
    the module docstring) instead of chosen; (s, k) is then feasible when it fits."""
    first_min = v if first_min is None else first_min
    if n is None:
        n = v * np.arange(1, layers // v + 1, dtype=np.int64)[None, :] + np.zeros((pp, 1), np.int64)

    def col(x: np.ndarray) -> np.ndarray:
        return np.asarray(x, np.int64).reshape(pp, 1)

    a, t, u = col(Q.stage_time_q), col(Q.layer_time_q), col(Q.recompute_time_q)
    e, g = col(Q.stage_sync_q), col(Q.layer_sync_q)
    lo, hi = fit
    if recompute is None:
        feasible = lo <= hi
        r = np.where(u >= 0, lo, hi)
    else:
        r = np.asarray(recompute, np.int64)
        feasible = (lo <= r) & (r <= hi)
    feasible[0] &= n[0] >= first_min
    stage = np.where(feasible, a + n * t + r * u, INF)
    sync = np.where(feasible, e + n * g + np.zeros_like(r), INF)
    prefix = bool((np.diff(feasible.astype(np.int8), axis=1) <= 0).all())
    monotone = prefix and bool((np.diff(stage, axis=1) >= 0).all() and (np.diff(sync, axis=1) >= 0).all())
    return StageTables(feasible=feasible, recompute=np.where(feasible, r, 0), stage_q=stage,
                       sync_q=sync, monotone=monotone)


def zero_bubble_tables(tab: StageTables, drain_q: np.ndarray, n: np.ndarray, alpha: int) -> StageTables:
    """`tab` for the objective of a zero-bubble schedule (quantize.py, Zero bubble):
        F(k) = max_s P_s(k_s) + Σ_s B_s(k_s) + beta max_s D_s(k_s),
        P_s(k) = alpha T_s(k) + n ŝ_s,   B_s(k) = T_s(k) - n ŝ_s,
    the docstring's problem with P in place of alpha T (the thresholds tau now range over P, at
    coefficient 1) and B in place of T in the sum: the recurrence and bounds read the pacing
    table for the caps and the summed one for the sums, so they hold as stated."""
    feasible = tab.feasible
    saved = np.asarray(n, np.int64) * np.asarray(drain_q, np.int64).reshape(-1, 1)
    pace = np.where(feasible, alpha * tab.stage_q + saved, INF)
    passes = np.where(feasible, tab.stage_q - saved, INF)
    prefix = bool((np.diff(feasible.astype(np.int8), axis=1) <= 0).all())
    monotone = prefix and all(bool((np.diff(x, axis=1) >= 0).all()) for x in (pace, passes, tab.sync_q))
    return StageTables(feasible=feasible, recompute=tab.recompute, stage_q=passes, sync_q=tab.sync_q,
                       monotone=monotone, pace_q=pace)


def lagrangian_sum_bound(T: np.ndarray, feasible: np.ndarray, N: int,
                         start: int | None = None) -> tuple[int, int]:
    """(Lsum, lambda): a lower bound on Σ_s T_s(k_s) over k with Σ k_s = N and feasible_s(k_s)
    (docstring), in exact integers, and the multiplier that attains it; INF when a stage has
    no feasible k.

    phi(lam) = lam N + Σ_s min_k (T_s(k) - lam k) is concave in lam, so "phi(lam + 1) <=
    phi(lam)" is false below its maximiser and true from it on: found by galloping from
    `start` (a nearby multiplier; by default _step_guess, the maximiser itself when every
    stage's times are convex) and then bisection. The start only changes how many phi are
    evaluated, not the maximiser found."""
    if not feasible.any(axis=1).all():
        return INF, 0
    k = np.arange(1, T.shape[1] + 1, dtype=np.int64)[None, :]
    finite = T[feasible]
    span = int(finite.max() - finite.min()) + 1
    if start is None:
        start = _step_guess(T, feasible, N)

    def phi(lam: int) -> int:
        vals = np.where(feasible, T - lam * k, INF)
        return lam * N + int(vals.min(axis=1).sum())

    def past_max(lam: int) -> bool:
        return phi(lam + 1) <= phi(lam)

    lo, hi = -span, span  # the maximiser lies in [-span, span]: slopes are within span
    x = 0 if start is None else min(max(start, lo), hi)
    step = 1
    if past_max(x):
        hi = x
        while x - step > lo and past_max(x - step):
            hi = x - step
            step *= 2
        lo = max(lo, x - step)
    else:
        lo = x + 1
        while x + step < hi and not past_max(x + step):
            lo = x + step + 1
            step *= 2
        hi = min(hi, x + step)
    lo = _least(past_max, lo, hi)
    return phi(lo), lo


def _least(holds, lo: int, hi: int) -> int:
    """The least x in [lo, hi] with holds(x), by bisection: `holds` is false below some point
    and true from it on (hi where it holds nowhere below hi)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _step_guess(T: np.ndarray, feasible: np.ndarray, N: int) -> int:
    """The (N - pp)-th smallest step T_s(k + 1) - T_s(k) between feasible counts: where every
    stage's times are convex on its feasible counts (cost/ gives per-layer times plus recompute
    beyond a memory knee), the cheapest N - pp steps beyond one chunk per stage are the ones
    the Lagrangian takes, so the last of them is phi's maximiser; 0 with too few steps."""
    extra = N - T.shape[0]
    ok = feasible[:, 1:] & feasible[:, :-1]
    steps = (T[:, 1:] - T[:, :-1])[ok]
    if extra < 1 or steps.size < extra:
        return 0
    return int(np.partition(steps, extra - 1)[extra - 1])


class _Search:
    """Admissible sets A_s(tau, delta) and the DP of the docstring for one configuration."""

    def __init__(self, tab: StageTables, N: int):
        self.tab, self.N = tab, N
        self.pp = tab.stage_q.shape[0]
        self.fast = tab.monotone
        if self.fast:  # A_s = {1, ..., cap_s}: caps by one vectorised binary search per threshold
            self.flat_t, self.off_t = self._flatten(tab.pace)
            self.flat_d, self.off_d = self._flatten(tab.sync_q)
            self.f_count = tab.feasible.sum(axis=1)
            self.fast = self.flat_t is not None and self.flat_d is not None
            if self.fast:
                self._hull_marginals()
                self.fast = self.flat_steps is not None

    def _hull_marginals(self) -> None:
        """Per stage, the steps H_s(k+1) - H_s(k) (floored to integers) of the lower convex hull
        H_s of T_s over its feasible k: non-decreasing, and summing to at most T_s(k) - T_s(1)
        along any prefix, so Σ_s T_s(1) + the N - pp smallest steps (at most cap_s - 1 from
        stage s) bounds Sum from below (the allocation's continuous convex relaxation)."""
        T, f = self.tab.stage_q, self.f_count
        N = T.shape[1]
        steps = np.zeros((self.pp, max(N - 1, 1)), np.int64)
        for s in range(self.pp):
            y = T[s, :f[s]].tolist()
            hull = [0]  # monotone chain over the points (k, T_s(k)), k = index + 1
            for x in range(1, len(y)):
                while len(hull) >= 2:
                    a, b = hull[-2], hull[-1]
                    if (y[b] - y[a]) * (x - a) >= (y[x] - y[a]) * (b - a):
                        hull.pop()
                    else:
                        break
                hull.append(x)
            row = []
            for a, b in zip(hull, hull[1:]):
                q, rem = divmod(y[b] - y[a], b - a)
                row.extend([q] * (b - a))  # floor of the hull's slope on [a, b]
            row.extend([row[-1] if row else 0] * (N - 1 - len(row)))  # beyond f_s: never used
            steps[s, :N - 1] = row[:N - 1]
        self.steps = steps
        self.step_prefix = np.concatenate([np.zeros((self.pp, 1), np.int64), np.cumsum(steps, axis=1)], axis=1)
        self.flat_steps, self.off_steps = self._flatten(steps, full=True)

    def sum_bound(self, tau: int, delta: int) -> int:
        """A lower bound on Sum(tau', delta') for every tau' <= tau, delta' <= delta (INF when
        no split is admissible at (tau, delta))."""
        if not self.fast:
            return lagrangian_sum_bound(self.tab.stage_q, self.mask(tau, delta), self.N)[0]
        cap = self.caps(tau, delta)
        if (cap < 1).any() or cap.sum() < self.N:
            return INF
        need = self.N - self.pp  # steps beyond one chunk per stage
        base = int(self.tab.stage_q[:, 0].sum())
        if need == 0:
            return base
        room = cap - 1

        def taken(level: int) -> np.ndarray:
            return np.minimum(room, self._count(self.flat_steps, self.off_steps, level, self.steps.shape[1]))

        # the smallest level at which `need` steps are <= level
        lo = _least(lambda level: taken(level).sum() >= need, int(self.steps.min()), int(self.steps.max()))
        below = taken(lo - 1)
        rows = np.arange(self.pp)
        return base + int(self.step_prefix[rows, below].sum()) + (need - int(below.sum())) * lo

    def caps(self, tau: int, delta: int) -> np.ndarray:
        """cap_s = max A_s(tau, delta) (monotone tables: A_s = {1, ..., cap_s})."""
        return np.minimum(np.minimum(self.f_count, self._count(self.flat_t, self.off_t, tau)),
                          self._count(self.flat_d, self.off_d, delta)).astype(np.int64)

    def _flatten(self, x: np.ndarray, full: bool = False):
        """Rows of x (non-decreasing where feasible, or everywhere with `full`) shifted into
        disjoint ranges and joined, so one searchsorted counts, in every row at once, the
        entries <= a threshold."""
        feas = np.ones(x.shape, bool) if full else self.tab.feasible
        lo, hi = int(x[feas].min()), int(x[feas].max())
        width = hi - lo + 2  # infeasible entries sit at hi + 1 - lo, above every threshold
        if width * self.pp >= 1 << 62:
            return None, None
        off = np.arange(self.pp, dtype=np.int64) * width
        flat = (np.where(feas, x - lo, hi + 1 - lo) + off[:, None]).ravel()
        return flat, off - lo

    def _count(self, flat: np.ndarray, off: np.ndarray, level: int, width: int | None = None) -> np.ndarray:
        width = self.tab.stage_q.shape[1] if width is None else width
        return np.searchsorted(flat, level + off, side="right") - np.arange(self.pp) * width

    def mask(self, tau: int, delta: int) -> np.ndarray:
        return self.tab.feasible & (self.tab.pace <= tau) & (self.tab.sync_q <= delta)

    def limits(self, tau: int, delta: int):
        """(lo, hi, key): min and max of every A_s (1-based; hi = 0 when empty) and a hashable
        key that identifies the admissible sets; None when the necessary test fails."""
        if self.fast:
            hi = self.caps(tau, delta)
            if (hi < 1).any() or hi.sum() < self.N:
                return None
            return np.ones(self.pp, np.int64), hi, hi.tobytes()
        mk = self.mask(tau, delta)
        if not mk.any(axis=1).all():
            return None
        lo = mk.argmax(axis=1) + 1
        hi = mk.shape[1] - mk[:, ::-1].argmax(axis=1)
        if lo.sum() > self.N or hi.sum() < self.N:
            return None
        return lo.astype(np.int64), hi.astype(np.int64), np.packbits(mk).tobytes()

    def min_sum(self, tau: int, delta: int, lo: np.ndarray, hi: np.ndarray):
        """Sum(tau, delta) and its allocation k (1-based chunk counts), or (INF, None)."""
        N, pp, T = self.N, self.pp, self.tab.stage_q
        cost = T if self.fast else np.where(self.mask(tau, delta), T, INF)
        lo_pre, hi_pre = np.cumsum(lo), np.cumsum(hi)
        lo_suf = lo_pre[-1] - lo_pre  # Σ_{s'>s} lo
        hi_suf = hi_pre[-1] - hi_pre
        j_lo = np.maximum(lo_pre, N - hi_suf)
        j_hi = np.minimum(hi_pre, N - lo_suf)
        if (j_lo > j_hi).any():
            return INF, None
        f = cost[0, j_lo[0] - 1:j_hi[0]].copy()  # f_0(j) = T_0(j), j in the window
        choice = [None]
        for s in range(1, pp):
            ks = np.arange(lo[s], hi[s] + 1)
            js = np.arange(j_lo[s], j_hi[s] + 1)
            best = np.full(js.size, INF, np.int64)
            arg = np.zeros(js.size, np.int64)
            step = max(1, DP_BLOCK_CELLS // max(1, js.size))
            for c0 in range(0, ks.size, step):
                kk = ks[c0:c0 + step]
                prev = js[:, None] - kk[None, :] - j_lo[s - 1]  # index into f
                ok = (prev >= 0) & (prev < f.size)
                vals = np.where(ok, f[np.clip(prev, 0, f.size - 1)], INF) + cost[s, kk - 1][None, :]
                i = vals.argmin(axis=1)
                v = vals[np.arange(js.size), i]
                better = v < best
                best = np.where(better, v, best)
                arg = np.where(better, kk[i], arg)
            f = np.minimum(best, INF)
            choice.append(arg)
        total = int(f[-1])
        if total >= INF:
            return INF, None
        k = np.zeros(pp, np.int64)
        j = N
        for s in range(pp - 1, 0, -1):
            k[s] = choice[s][j - j_lo[s]]
            j -= k[s]
        k[0] = j
        return total, k


def _value(tab: StageTables, k: np.ndarray, alpha: int, beta: int) -> int:
    """F(k) in quanta (exact integers)."""
    idx = (np.arange(k.size), k - 1)
    T, D = tab.stage_q[idx], tab.sync_q[idx]
    return int(alpha * int(tab.pace[idx].max()) + int(T.sum()) + beta * int(D.max()))


def solve_split_dp(c: StageCoefficients, allow_full_recompute: bool = True,
                   time_limit_s: float = 10.0, threads: int = 1,
                   hint: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
                   cutoff_s: float | None = None,
                   pattern: RecomputePattern = RecomputePattern.PER_STAGE) -> SplitResult:
    """Best layer split (n_s, r_s) of `c` whose recompute counts the framework's `pattern` runs
    (cost/recompute_patterns.py; module docstring, Recompute patterns), by the exact bottleneck
    enumeration + DP of the module docstring. time_limit_s is wall-clock; threads is accepted for
    the backends' common signature (the algorithm is sequential); hint (n, r) seeds the
    incumbent; cutoff_s as in _solve_split."""
    if pattern is RecomputePattern.PER_STAGE or not allow_full_recompute:
        return _solve_split(c, allow_full_recompute, time_limit_s, threads, hint, cutoff_s)
    return _solve_pattern(c, pattern, time_limit_s, threads, hint, cutoff_s)


def _combined(results: list[SplitResult], relaxed: SplitResult, start: float) -> SplitResult:
    """One answer from the DP of each parameter value (`results`) and of the free per-stage
    choice (`relaxed`, a relaxation: every pattern's counts are among its choices): the best
    split found; the bound, the larger of the relaxation's and the least over the values; the
    status optimal only when every value was solved, proved infeasible or cut off."""
    found = [x for x in results if x.objective_s is not None]
    best = min(found, key=lambda x: x.objective_s) if found else None
    done = all(x.status in ("optimal", "infeasible", "cutoff") for x in results)
    bounds = [math.inf if x.status == "infeasible" else x.bound_s for x in results]
    bound = None if any(b is None for b in bounds) else min(bounds, default=math.inf)
    if relaxed.bound_s is not None:
        bound = relaxed.bound_s if bound is None else max(bound, relaxed.bound_s)
    if best is None:
        status = ("infeasible" if all(x.status == "infeasible" for x in results)
                  else "cutoff" if done else "timeout")
        bound = math.inf if status == "infeasible" else bound
        return SplitResult(status=status, layers_per_stage=None, full_recompute_layers=None,
                           objective_s=None, bound_s=bound, wall_time_s=time.perf_counter() - start,
                           backend="dp", quantum_s=relaxed.quantum_s)
    return SplitResult(status="optimal" if done else "feasible", layers_per_stage=best.layers_per_stage,
                       full_recompute_layers=best.full_recompute_layers, objective_s=best.objective_s,
                       bound_s=bound if bound is None else min(bound, best.bound_s),
                       wall_time_s=time.perf_counter() - start, backend="dp", quantum_s=relaxed.quantum_s)


def _solve_pattern(c: StageCoefficients, pattern: RecomputePattern, time_limit_s: float, threads: int,
                   hint, cutoff_s: float | None) -> SplitResult:
    """The DP of the module docstring once per parameter value of `pattern` (Recompute patterns),
    after the free per-stage choice: when its optimum is a pattern's counts it is the answer;
    otherwise the values run from the one that covers its counts, each cut off at the best
    time so far (a value whose first bound reaches it costs one set of tables)."""
    start = time.perf_counter()
    relaxed = _solve_split(c, True, time_limit_s, threads, hint, cutoff_s)
    if relaxed.status in ("infeasible", "cutoff"):
        return relaxed
    emb, loss = c.outer.embedding_in_split, c.outer.loss_in_split
    v, pp = c.outer.virtual_stages, c.pp
    slots = c.layers + emb + loss
    grid = stage_layer_counts(pp, v, slots, emb, loss)  # (pp, N)
    top_n, top_c = int(grid.max()), slots // v - (pp - 1)
    P = recompute_patterns.parameter_count(pattern, top_n, top_c)

    def table(i: int) -> np.ndarray:  # (pp, N): r_s(k) under value i, indexed as grid
        return recompute_patterns.value_counts(pattern, i, grid.T, v, emb, loss, top_n, top_c).T

    first = 0
    if relaxed.layers_per_stage is not None:
        n, r = relaxed.layers_per_stage, relaxed.full_recompute_layers
        if relaxed.status == "optimal" and recompute_patterns.runs(pattern, [n], [r], v, emb, loss):
            return replace(relaxed, wall_time_s=time.perf_counter() - start)
        first = recompute_patterns.covering_value(pattern, [n], [r], v, emb, loss)
        hint = (n, r)
    # the value that covers the free optimum's counts, then fewer recomputed layers, then more
    order = itertools.chain([first], range(first - 1, -1, -1), range(first + 1, P))
    deadline = start + time_limit_s
    Q = quantize(c, True)
    fit = fit_recompute_range(c, grid, Q.max_recompute)
    lo, hi = fit
    u = Q.recompute_time_q.reshape(pp, 1)

    def beyond(t: np.ndarray, more: bool) -> np.ndarray:
        """One table bounding every value past t's at once (more: the values above it, whose
        counts are >= t's everywhere; else those below, <= t's): each (s, k) feasible when some
        count on that side fits, at the count of least time (rows of infeasible get hi + 1)."""
        if more:
            low, high = np.maximum(t, lo), hi
        else:
            low, high = lo, np.minimum(t, hi)
        return np.where(low <= high, np.where(u >= 0, low, high), hi + 1)

    results, last, best_s, ended = [], None, cutoff_s, set()
    for i in order:
        side = None if i == first else i > first
        if side in ended:
            continue
        tab_i = table(i)
        if last is not None and np.array_equal(tab_i, last):
            continue  # the same table as the value before it (N past every chunk, k giving equal floors)
        last = tab_i
        if side is not None and best_s is not None and time.perf_counter() < deadline:
            # every value from i on in this direction at once: when that relaxation cannot beat
            # the best time, none of them can (the bound's result stands for them)
            whole = _solve_split(c, True, deadline - time.perf_counter(), threads, None, best_s,
                                 recompute=beyond(tab_i, side), prepared=(Q, fit))
            if whole.status in ("cutoff", "infeasible"):
                results.append(whole)
                ended.add(side)
                continue
        left = deadline - time.perf_counter()
        if left <= 0:
            results.append(SplitResult(status="timeout", layers_per_stage=None, full_recompute_layers=None,
                                       objective_s=None, bound_s=None, wall_time_s=0.0, backend="dp",
                                       quantum_s=relaxed.quantum_s))
            break
        got = _solve_split(c, True, left, threads, hint, best_s, recompute=tab_i, prepared=(Q, fit))
        results.append(got)
        if got.objective_s is not None and (best_s is None or got.objective_s < best_s):
            best_s = got.objective_s
            hint = (got.layers_per_stage, got.full_recompute_layers)
    return _combined(results, relaxed, start)


def _solve_split(c: StageCoefficients, allow_full_recompute: bool = True,
                 time_limit_s: float = 10.0, threads: int = 1,
                 hint: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
                 cutoff_s: float | None = None, recompute: np.ndarray | None = None,
                 prepared: tuple | None = None) -> SplitResult:
    """Best layer split (n_s, r_s) of `c` by the exact bottleneck enumeration + DP of the module
    docstring, each stage's r chosen freely, or read from `recompute` (pp, N) (stage_tables);
    `prepared`: (quantize(c, True), its fit_recompute_range on the grid), shared by the values
    of one pattern.

    cutoff_s: only splits whose iteration time could be <= cutoff_s are of interest. The search
    starts with F_best = C = floor((cutoff_s + E) v / q) + 1 quanta: every split x with true
    time Z(x) <= cutoff_s has F(x) <= (Z(x) + E) v / q < C, so the optimum is still found when it
    is below C; when no split is, the status is "cutoff" (every Z(x) >= q C / v - E > cutoff_s)."""
    start = time.perf_counter()
    if threads < 1 or not time_limit_s > 0:
        raise ValueError(f"threads must be >= 1 and time_limit_s > 0, got {threads}, {time_limit_s}")
    deadline = start + time_limit_s
    pp, L, m, v = c.pp, c.layers, c.outer.num_micro_batches, c.outer.virtual_stages
    Q = quantize(c, allow_full_recompute) if prepared is None else prepared[0]
    alpha, beta = v * m - 1, v

    def result(status: str, k: np.ndarray | None, bound_q: float | None) -> SplitResult:
        bound = (math.inf if status == "infeasible" else
                 None if bound_q is None else bound_q * Q.time_quantum_s / v - Q.objective_error_s)
        if k is None:
            return SplitResult(status=status, layers_per_stage=None, full_recompute_layers=None,
                               objective_s=None, bound_s=bound, wall_time_s=time.perf_counter() - start,
                               backend="dp", quantum_s=Q.time_quantum_s)
        n = grid[np.arange(pp), k - 1]
        r = tab.recompute[np.arange(pp), k - 1]
        if not fits(c, n, r):
            raise SolverError(f"dp split n={tuple(n)}, r={tuple(r)} does not fit after re-checking with "
                              f"cost.schedule.fits: quantize.fit_recompute_range is broken")
        return SplitResult(status=status, layers_per_stage=tuple(int(x) for x in n),
                           full_recompute_layers=tuple(int(x) for x in r),
                           objective_s=float(iteration_time_s(c, n, r)), bound_s=bound,
                           wall_time_s=time.perf_counter() - start, backend="dp",
                           quantum_s=Q.time_quantum_s)

    emb, loss = c.outer.embedding_in_split, c.outer.loss_in_split
    slots = L + emb + loss  # k_s chunks of v slots; the embedding / loss take one each
    if slots % v or slots // v < pp:
        tab = None
        return result("infeasible", None, None)
    N = slots // v
    grid = stage_layer_counts(pp, v, slots, emb, loss)
    fit = fit_recompute_range(c, grid, Q.max_recompute) if prepared is None else prepared[1]
    tab = stage_tables(Q, fit, pp, L, v, first_stage_min_layers(c), grid, recompute)
    if not tab.feasible.any(axis=1).all():
        return result("infeasible", None, None)
    if Q.drain_saving_q is not None:  # a zero-bubble schedule: tau over the pacing table
        tab, alpha = zero_bubble_tables(tab, Q.drain_saving_q, grid, alpha), 1
    feas = tab.feasible
    taus = np.unique(tab.pace[feas])
    deltas = np.unique(tab.sync_q[feas])
    if alpha == 0:
        taus = taus[-1:]
    lsum = lagrangian_sum_bound(tab.stage_q, feas, N)[0]
    best_f, best_k = INF, None
    if cutoff_s is not None:
        best_f = min(INF, math.floor((cutoff_s + Q.objective_error_s) * v / Q.time_quantum_s) + 1)
    cut_f = best_f
    if hint is not None:
        hn = np.asarray(hint[0], np.int64)
        off = np.asarray(slot_offsets(pp, emb, loss), np.int64)
        if hn.shape == (pp,) and not ((hn + off) % v).any() and hn.sum() == L and (hn + off >= v).all():
            hk = (hn + off) // v
            if feas[np.arange(pp), hk - 1].all():  # the table's r is at least as good as the hint's
                val = _value(tab, hk, alpha, beta)
                if val < best_f:
                    best_f, best_k = val, hk
    if best_k is None and cut_f < INF:
        # before the hulls of _Search: T_max >= every stage's cheapest time and >= the mean
        # stage time Lsum / pp, D_max >= every stage's cheapest sync, sum T >= Lsum
        cheapest = np.where(feas, tab.stage_q, INF).min(axis=1)
        tau_lb = max(int(cheapest.max()), -(-int(lsum) // pp))
        delta_lb = int(np.where(feas, tab.sync_q, INF).min(axis=1).max())
        if alpha * tau_lb + beta * delta_lb + lsum >= best_f:
            return result("cutoff", None, cut_f)
    search = _Search(tab, N)

    def first_feasible_tau(delta: int, i_lo: int, i_hi: int) -> int | None:
        """Smallest index i in [i_lo, i_hi] with taus[i] passing the necessary test."""
        if search.limits(int(taus[i_hi]), delta) is None:
            return None
        return _least(lambda i: search.limits(int(taus[i]), delta) is not None, i_lo, i_hi)

    top = len(taus) - 1
    i0 = first_feasible_tau(int(deltas[-1]), 0, top)
    if i0 is None:
        return result("infeasible", None, None)
    # first row: the smallest delta with any admissible split
    d_lo = _least(lambda d: search.limits(int(taus[-1]), int(deltas[d])) is not None, 0, len(deltas) - 1)

    if best_k is None and cut_f < INF and alpha * int(taus[i0]) + beta * int(deltas[d_lo]) + lsum >= best_f:
        # every split has T_max >= taus[i0], D_max >= deltas[d_lo] and sum T >= Lsum: none
        # beats the cutoff (a pattern's value that cannot win costs no DP)
        return result("cutoff", None, cut_f)
    seen: set[bytes] = set()
    open_bounds: list[int] = []  # bounds of the regions the time limit left unexplored

    def window_end(delta: int) -> int:
        """One past the last tau index whose pair bound with the global Lsum is below best_f."""
        if alpha == 0:
            return len(taus) if beta * delta + lsum < best_f else 0
        need = best_f - beta * delta - lsum  # alpha tau < need
        return int(np.searchsorted(taus, -((-need) // alpha), side="left"))

    def evaluate(i: int, d: int) -> None:
        nonlocal best_f, best_k
        tau, delta = int(taus[i]), int(deltas[d])
        lim = search.limits(tau, delta)
        if lim is None or lim[2] in seen:
            return
        seen.add(lim[2])
        total, k = search.min_sum(tau, delta, lim[0], lim[1])
        if k is not None:
            val = _value(tab, k, alpha, beta)
            if val < best_f:
                best_f, best_k = val, k

    def out_of_time(bound: int) -> bool:
        if time.perf_counter() > deadline:
            open_bounds.append(bound)
            return True
        return False

    def columns(d: int, ia: int, ib: int) -> None:
        """Pairs (taus[ia..ib], deltas[d]): bounded by alpha taus[ia] + beta delta + the sum
        bound at the largest caps, split in halves until single pairs are solved."""
        delta = int(deltas[d])
        lb = alpha * int(taus[ia]) + beta * delta + search.sum_bound(int(taus[ib]), delta)
        if lb >= best_f or out_of_time(lb):
            return
        if ia == ib:
            evaluate(ia, d)
            return
        mid = (ia + ib) // 2
        columns(d, ia, mid)
        columns(d, mid + 1, ib)

    tau_min: dict[int, int | None] = {}

    def tau_min_at(d: int) -> int | None:
        """first_feasible_tau over every tau for deltas[d] (cached per row)."""
        if d not in tau_min:
            tau_min[d] = first_feasible_tau(int(deltas[d]), i0, top)
        return tau_min[d]

    def rows(da: int, db: int) -> None:
        """Rows deltas[da..db]: every pair has tau >= tau_min(deltas[db]) and, to beat best_f,
        tau < taus[window_end(deltas[da])]; bounded with the sum bound at the largest caps."""
        j = window_end(int(deltas[da]))
        i_b = tau_min_at(db)
        if i_b is None or j <= i_b:
            return
        lb = (beta * int(deltas[da]) + alpha * int(taus[i_b])
              + search.sum_bound(int(taus[j - 1]), int(deltas[db])))
        if lb >= best_f or out_of_time(lb):
            return
        if da == db:
            columns(da, tau_min_at(da), j - 1)
            return
        mid = (da + db) // 2
        rows(da, mid)
        rows(mid + 1, db)

    evaluate(i0, len(deltas) - 1)  # a good first incumbent: the fastest pace, no sync cap
    rows(d_lo, len(deltas) - 1)
    open_bound = min(open_bounds) if open_bounds else None
    if open_bound is not None:
        bound_q = min(best_f, open_bound)
        return result("feasible" if best_k is not None else "timeout", best_k, bound_q)
    if best_k is None:
        if cut_f < INF:  # every pair's bound reached the cutoff, or none had a split
            return result("cutoff", None, cut_f)
        return result("infeasible", None, None)
    return result("optimal", best_k, best_f)
