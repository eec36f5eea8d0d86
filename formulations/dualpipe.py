"""The layer split of one configuration under DeepSeek's DualPipe schedule (cost/dualpipe.py
prices it; job.pipeline_schedule: dualpipe). Three solvers of one model: an exact threshold
search (`solve_exact`, the planner's "dp" backend), CP-SAT (`solve_cpsat`) and a MILP
(`solve_milp`, CBC / SCIP / HiGHS); tests/formulations/test_dualpipe.py checks them against each
other and against enumeration priced by cost/dualpipe.iteration.

Sets
    S = {0, ..., pp-1}    pipeline stages, pp even
    P = {0, ..., pp/2-1}  stage pairs: pair h holds stages h and pp-1-h, the two stages of
                          device h (and of device pp-1-h, which holds the same two)

Parameters (cost/dualpipe.Terms; arrays over s)
    a, t, u     T_s = a_s + t_s n_s + u_s r_s       paired forward + backward of one micro-batch
    bw, ru      U_s = T_s + bw_s n_s + ru_s r_s     a backward chunk alone, less 3 W
    e, g        D_s = e_s + g_s n_s                 gradient sync and optimizer step
    k0, kn, kr  pair h's device memory: sum_{s in h} (k0_s + kn_s n_s - kr_s r_s) + rt <= K_h
    m           micro-batches (even, >= 2 pp); L layers; d0 = first_min (stage 0's dense
                prefix: n_0 >= d0); R = L with full recompute allowed, else 0

Variables  n_s in 1..L (n_0 >= d0), r_s in 0..min(n_s, R)

Objective (cost/dualpipe.schedule_s)
    Z = m/2 max_h (T_h + T_{pp-1-h}) + (pp/2 - 1)/2 max_h (U_h + U_{pp-1-h}) + max_h (D_h + D_{pp-1-h})

Memory. A pair fits when its device memory, evaluated in float64 as `DualPipeProblem.sums`
evaluates it (and cost/dualpipe.Terms.mem_bytes, which simulate reads), is <= the smaller of
its stages' capacities: a peak equal to the capacity fits, in every method (issue 35). The
exact search reads that predicate itself (`pair_fits`); CP-SAT and the MILP solve with each
pair's row rounded the other way (a relaxation) and cut off, lazily, every solution with a
pair that does not fit (`memory_cut`), so no rounding decides what fits.

Exact search. Where the two stages of every pair have equal per-layer coefficients (one GPU
type: every stage prices a layer alike), a pair's three sums depend
on its layers N_h and recomputed layers R_h only, and all grow with both (every per-layer rate
>= 0); so each pair takes
the fewest recomputed layers that fit its memory, R*_h(N) (over its splits n_h + n_{pp-1-h} = N,
recomputing first on the stage whose layer frees more, which is optimal: every recomputed
layer of it frees at least as much), and its sums P_h(N), U_h(N), D_h(N) are nondecreasing in
N (a layer fewer never needs more recomputation). The optimum's three maxima are values of
these functions, so for each candidate X of the first (ascending) and every candidate Y of the
second, each pair may hold at most cap_h = max {N : P_h(N) <= X, U_h(N) <= Y, D_h(N) <= Z}
layers, and the least Z with sum_h cap_h >= L (binary search) completes the best plan with
those two maxima: min over (X, Y) of m/2 X + c Y + Z is the optimum, exactly (ties to the
first found). Pairs whose stages differ go to CP-SAT.

CP-SAT and MILP. Where pairs_alike holds, the same argument makes pair h's sums functions of N_h
alone (at R*_h(N_h)): the models' variables are the pairs' layer counts, sum_h N_h = L, each
pair's three sums read from its tables (CP-SAT: element constraints, _pair_model; MILP: a chain of
binaries z_hj = [N_h >= lo_h + j] and the tables' steps, _solve_milp_pairs), memory exact
through the tables. Otherwise the per-stage model above (n_s, r_s; memory as in Memory).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from paraplan.cost.dualpipe import Kept
from paraplan.formulations.multiclass import MultiClassResult
from paraplan.formulations.quantize import MEM_QUANTUM_BYTES, OBJECTIVE_LIMIT_QUANTA, time_quantum
from paraplan.formulations.result import SolverError


@dataclass(frozen=True, eq=False)
class DualPipeProblem:
    """The model of the module docstring (arrays of shape (pp,))."""

    a: np.ndarray
    t: np.ndarray
    u: np.ndarray
    bw: np.ndarray
    ru: np.ndarray
    e: np.ndarray
    g: np.ndarray
    k0: np.ndarray
    kn: np.ndarray
    kr: np.ndarray
    runtime_bytes: float
    capacity_bytes: np.ndarray
    num_micro_batches: int
    layers: int
    first_min: int = 1
    allow_full_recompute: bool = True

    @property
    def pp(self) -> int:
        return len(self.a)

    @property
    def pairs(self) -> int:
        return self.pp // 2

    @property
    def bubble_weight(self) -> float:
        return (self.pp / 2 - 1) / 2

    def lows(self) -> np.ndarray:
        lo = np.ones(self.pp, np.int64)
        lo[0] = max(1, self.first_min)
        return lo

    def sums(self, n, r) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per pair: (P, U, D, memory) of a split, or of rows of splits (shape (..., pp))."""
        n, r = np.asarray(n, float), np.asarray(r, float)
        T = self.a + self.t * n + self.u * r
        U = T + self.bw * n + self.ru * r
        D = self.e + self.g * n
        M = self.k0 + self.kn * n - self.kr * r
        h = np.arange(self.pairs)
        mi = self.pp - 1 - h
        return (T[..., h] + T[..., mi], U[..., h] + U[..., mi], D[..., h] + D[..., mi],
                M[..., h] + M[..., mi] + self.runtime_bytes)

    def pair_capacity_bytes(self) -> np.ndarray:
        """Per pair, the smaller of its two stages' capacities (its two devices hold the same)."""
        return np.minimum(self.capacity_bytes[:self.pairs], self.capacity_bytes[::-1][:self.pairs])

    def pair_fits(self, h: int, n0, n1, r0, r1) -> np.ndarray:
        """Whether pair h fits with n0 layers (r0 recomputed) on stage h and n1 (r1) on stage
        pp - 1 - h, broadcast: `rows`' comparison with `sums`' float operations (the one
        meaning of "fits" of the module docstring's Memory)."""
        s0, s1 = h, self.pp - 1 - h
        m0 = self.k0[s0] + self.kn[s0] * np.asarray(n0, float) - self.kr[s0] * np.asarray(r0, float)
        m1 = self.k0[s1] + self.kn[s1] * np.asarray(n1, float) - self.kr[s1] * np.asarray(r1, float)
        return m0 + m1 + self.runtime_bytes <= self.pair_capacity_bytes()[h]

    def overfull_pairs(self, n, r) -> list[int]:
        """The pairs of one split whose device memory does not fit."""
        M = self.sums(n, r)[3]
        return np.flatnonzero(M > self.pair_capacity_bytes()).tolist()

    def rows(self, n, r) -> tuple[np.ndarray, np.ndarray]:
        """(Z, whether memory fits) of rows of splits (shape (..., pp)): the objective, and
        every pair's device memory within both its stages' capacities."""
        P, U, D, M = self.sums(n, r)
        z = self.num_micro_batches / 2 * P.max(-1) + self.bubble_weight * U.max(-1) + D.max(-1)
        return z, (M <= self.pair_capacity_bytes()).all(-1)

    def evaluate(self, n, r) -> float:
        return float(self.rows(n, r)[0])

    def fits(self, n, r) -> bool:
        n, r = np.asarray(n), np.asarray(r)
        return (int(n.sum()) == self.layers and bool((n >= self.lows()).all()) and bool((r >= 0).all())
                and bool((r <= n).all()) and (self.allow_full_recompute or not r.any())
                and bool(self.rows(n, r)[1]))

    def lower_bound_s(self) -> float:
        """A bound of every split's Z without solving: each maximum over pairs is at least the
        pairs' mean, and the stages' sums are at least their fixed terms plus L layers at the
        cheapest per-layer rate (recomputation, which only adds when its rates are >= 0, left
        out; a negative rate is charged on all L layers)."""
        L, k = self.layers, self.pairs
        rec_t = min(0.0, float(self.u.min())) * L
        rec_u = min(0.0, float((self.u + self.ru).min())) * L
        P = (self.a.sum() + L * float(self.t.min()) + rec_t) / k
        U = (self.a.sum() + L * float((self.t + self.bw).min()) + rec_u) / k
        D = (self.e.sum() + L * float(self.g.min())) / k
        return float(self.num_micro_batches / 2 * P + self.bubble_weight * U + D)

    def pairs_alike(self) -> bool:
        """Whether both stages of every pair price a layer alike and every per-layer rate is
        >= 0, so that the pairs' sums grow with layers and recomputation (the exact search's
        condition)."""
        mi = self.pp - 1 - np.arange(self.pp)
        alike = all(np.allclose(x, x[mi], rtol=1e-12, atol=0.0)
                    for x in (self.t, self.u, self.bw, self.ru, self.g))
        rising = all(bool((x >= 0).all()) for x in (self.t, self.u, self.t + self.bw, self.u + self.ru, self.g))
        return alike and rising


def balanced(p: DualPipeProblem, n, r) -> tuple[list[int], list[int]]:
    """The split with each pair's layers as even between its two stages as its memory allows,
    at the pair's same layers and recomputed layers (so, where pairs_alike, the same objective):
    every backend returns it, so that ties resolve alike and the plan is the one cost/dualpipe
    prices best, its bubble formula being DualPipe's for equal chunks. Recomputation goes first
    to the stage whose layer frees more. Unchanged where the pairs' stages differ."""
    n, r = [int(x) for x in n], [int(x) for x in r]
    if not p.pairs_alike():
        return n, r
    lo = p.lows()
    for h in range(p.pairs):
        s0, s1 = h, p.pp - 1 - h
        N, R = n[s0] + n[s1], r[s0] + r[s1]
        for n0 in sorted(range(int(lo[s0]), N - int(lo[s1]) + 1), key=lambda x: (abs(2 * x - N), x)):
            n1 = N - n0
            big, small = (s0, s1) if p.kr[s0] >= p.kr[s1] else (s1, s0)
            nb, ns = (n0, n1) if big == s0 else (n1, n0)
            rb = min(R, nb)
            if R - rb > ns:
                continue
            trial_n, trial_r = list(n), list(r)
            trial_n[s0], trial_n[s1] = n0, n1
            trial_r[big], trial_r[small] = rb, R - rb
            if p.fits(trial_n, trial_r):
                n, r = trial_n, trial_r
                break
    return n, r


def _result(p: DualPipeProblem, status: str, backend: str, start: float, bound, tol: float,
            n=None, r=None) -> MultiClassResult:
    if n is None:
        return MultiClassResult.unsolved(status, backend, start, bound, tol)
    n, r = [int(x) for x in n], [int(x) for x in r]
    if not p.fits(n, r):
        raise SolverError(f"{backend}: DualPipe split n={n}, r={r} does not fit when re-checked")
    n, r = balanced(p, n, r)
    obj = p.evaluate(n, r)
    return MultiClassResult(status=status, micro_batches=(p.num_micro_batches,), layers_per_stage=(tuple(n),),
                            full_recompute_layers=(tuple(r),), objective_s=obj, per_scenario_s=(obj,),
                            bound_s=obj if bound is None and status == "optimal" else bound,
                            wall_time_s=time.perf_counter() - start, backend=backend, tolerance_s=tol)


def _none_below(p: DualPipeProblem, backend: str, start: float, cutoff_s: float | None,
                tol: float) -> MultiClassResult:
    """No split found: under a finite cutoff, none below it (status "cutoff"); else none fits."""
    if cutoff_s is not None and math.isfinite(cutoff_s):
        return _result(p, "cutoff", backend, start, cutoff_s, tol)
    return _result(p, "infeasible", backend, start, math.inf, tol)


# --- exact search -------------------------------------------------------------------------

# splits of a pair bisected together (_pair_tables): rows of N times their columns
PAIR_TABLE_BLOCK = 1 << 18


def _pair_tables(p: DualPipeProblem, h: int):
    """(lo_N, R, split) of pair h: for each total N = lo_N .. L (index N - lo_N), the fewest
    recomputed layers that fit its memory, R (inf where nothing fits), and the split reaching
    it, (layers of stage h, recomputed layers of stage h, of stage pp - 1 - h). For each split
    of N, R recomputed layers go first to the stage whose layer frees more, and whether they fit
    is DualPipeProblem.pair_fits itself, which is monotone in R (IEEE rounding is), so the least
    R is found by bisection on the predicate: no float estimate decides it.

    Many N at once (blocks of about PAIR_TABLE_BLOCK splits): row N - lo_N holds N's splits
    (stage h's layers lo_h, lo_h + 1, ..., N - lo_(pp-1-h); the columns past them unused), and
    each row bisects until all its splits have converged, as a loop over N does (a converged
    split whose top does not fit keeps stepping while its row does): the same float operations
    on the same numbers, so the same tables (issue 32: the loop over N, one N at a time, was a
    third of a DualPipe search of Qwen3-235B's 94 layers)."""
    s0, s1 = h, p.pp - 1 - h
    lo = p.lows()
    lo_N = int(lo[s0] + lo[s1])
    size = p.layers - lo_N + 1
    best_R = np.full(size, np.inf)
    split = np.zeros((size, 3), np.int64)
    big, small = (s0, s1) if p.kr[s0] >= p.kr[s1] else (s1, s0)
    j0 = 0
    while j0 < size:
        j1 = min(size, j0 + max(1, PAIR_TABLE_BLOCK // size))  # at most size columns a row
        _pair_rows(p, h, (s0, s1, big, small), lo, lo_N + j0, lo_N + j1, best_R[j0:j1], split[j0:j1])
        j0 = j1
    return lo_N, best_R, split


def _pair_rows(p: DualPipeProblem, h: int, stages, lo, N_from: int, N_to: int,
               best_R: np.ndarray, split: np.ndarray) -> None:
    """_pair_tables' rows N = N_from .. N_to - 1, written into best_R and split (views)."""
    s0, s1, big, small = stages
    N = np.arange(N_from, N_to)[:, None]
    n0 = np.broadcast_to(np.arange(lo[s0], N_to - lo[s1]), (len(N), N_to - lo[s1] - lo[s0])).copy()
    valid = n0 <= N - lo[s1]
    n1 = N - n0
    nb, ns = (n0, n1) if big == s0 else (n1, n0)
    # the most recomputed layers worth trying: none where recomputing frees nothing, and
    # none on the smaller stage where its recomputation costs memory
    top = np.zeros_like(n0) if not p.allow_full_recompute or p.kr[big] <= 0 else (
        nb + ns if p.kr[small] > 0 else nb)
    top = np.where(valid, top, 0)

    def fit(R: np.ndarray) -> np.ndarray:
        rb = np.minimum(R, nb)
        r0, r1 = (rb, R - rb) if big == s0 else (R - rb, rb)
        return p.pair_fits(h, n0, n1, r0, r1)

    least, most = np.zeros_like(n0), top.copy()
    while True:  # per row, the least R in [0, top] that fits (top where none does)
        live = (least < most).any(axis=1)
        if not live.any():
            break
        mid = (least + most) // 2
        ok = fit(mid)
        step = live[:, None] & valid
        least = np.where(step & ~ok, mid + 1, least)
        most = np.where(step & ok, mid, most)
    tot = np.where(valid & fit(least), least, np.inf)
    for j in np.flatnonzero(np.isfinite(tot).any(axis=1)):
        i = int(np.argmin(tot[j]))
        R = int(tot[j, i])
        r_b = min(R, int(nb[j, i]))
        best_R[j] = R
        r0, r1 = (r_b, R - r_b) if big == s0 else (R - r_b, r_b)
        split[j] = (n0[j, i], r0, r1)


def _pair_sums(p: DualPipeProblem, h: int, lo_N: int, R: np.ndarray):
    """Pair h's three sums (P, U, D of the module docstring) at N = lo_N, lo_N + 1, ... with
    R*_h(N) recomputed layers (_pair_tables; where nothing fits, priced at R = 0 and never
    chosen)."""
    s0, s1 = h, p.pp - 1 - h
    N = lo_N + np.arange(len(R), dtype=float)
    Rz = np.where(np.isfinite(R), R, 0.0)
    P = p.a[s0] + p.a[s1] + p.t[s0] * N + p.u[s0] * Rz
    U = P + p.bw[s0] * N + p.ru[s0] * Rz
    D = p.e[s0] + p.e[s1] + p.g[s0] * N
    return P, U, D


# problems whose tables _pair_table_sums keeps (a search solves about a hundred DualPipe
# problems of Qwen3-235B, about 40 KB of tables each)
_TABLES = Kept(256)


def _content_key(p: DualPipeProblem) -> tuple:
    """Every field of `p` by value (arrays as dtype, shape and bytes): two problems of one key
    are the same problem, whichever object holds it."""
    out = []
    for f in dataclasses.fields(p):
        x = getattr(p, f.name)
        out.append((x.dtype.str, x.shape, x.tobytes()) if isinstance(x, np.ndarray) else x)
    return tuple(out)


def _pair_table_sums(p: DualPipeProblem):
    """Per pair h: (lo_N, R, split) of _pair_tables and its three sums (P, U, D) of _pair_sums,
    the tables the exact search and the pair models read; None where a pair fits no count of
    layers at all (then no split fits; the pairs after it are not tabled).

    Built once per problem and kept (read-only) for the last 256 problems by value (_TABLES):
    each backend's search builds its own problem objects of the same configurations, and the
    tables were about a tenth of a CP-SAT or MILP search of Qwen3-235B (issue 32)."""
    return _TABLES.get(_content_key(p), lambda: _built_pair_table_sums(p))


def _built_pair_table_sums(p: DualPipeProblem):
    """_pair_table_sums, built (read-only: kept and shared)."""
    out = []
    for h in range(p.pairs):
        lo_N, R, split = _pair_tables(p, h)
        if not np.isfinite(R).any():
            return None
        out.append((lo_N, R, split, _pair_sums(p, h, lo_N, R)))
    for row in out:
        for x in (row[1], row[2], *row[3]):
            x.setflags(write=False)
    return out


def _split_of(p: DualPipeProblem, tables, steps) -> tuple[list[int], list[int]]:
    """The split (n, r) with pair h holding lo_N + steps[h] layers, divided between its two
    stages as its table says; `tables` holds each pair's (lo_N, split) of _pair_tables."""
    n, r = [0] * p.pp, [0] * p.pp
    for h, ((lo_N, split), j) in enumerate(zip(tables, steps)):
        n0, r0, r1 = (int(x) for x in split[j])
        n[h], n[p.pp - 1 - h] = n0, lo_N + j - n0
        r[h], r[p.pp - 1 - h] = r0, r1
    return n, r


def solve_exact(p: DualPipeProblem, cutoff_s: float | None = None) -> MultiClassResult:
    """The exact threshold search of the module docstring; CP-SAT where it does not apply.
    `cutoff_s`: status "cutoff" when no split is below it (the search stops there)."""
    start = time.perf_counter()
    if not p.pairs_alike():
        return solve_cpsat(p, cutoff_s=cutoff_s)
    k, L, m = p.pairs, p.layers, p.num_micro_batches
    c = p.bubble_weight
    tables = _pair_table_sums(p)
    if tables is None or sum(t[0] for t in tables) > L:
        return _result(p, "infeasible", "dp", start, math.inf, 0.0)
    los = np.array([t[0] for t in tables])
    # per pair h and N = lo_h .. L: its three sums (inf where nothing fits); nondecreasing in N
    Pt, Ut, Dt = [], [], []
    for lo_N, R, _, (P, U, D) in tables:
        bad = ~np.isfinite(R)
        Pt.append(np.where(bad, np.inf, P))
        Ut.append(np.where(bad, np.inf, U))
        Dt.append(np.where(bad, np.inf, np.maximum.accumulate(D)))
    if any(not np.isfinite(x[0]) for x in Pt):  # a pair fits not even its fewest layers
        return _result(p, "infeasible", "dp", start, math.inf, 0.0)

    def caps(tabs, v):  # per pair, how many N values (from lo) have sum <= v; v: (cols,)
        return np.stack([np.searchsorted(tab, v, side="right") for tab in tabs])  # (pairs, cols)
    VP = np.unique(np.concatenate([x[np.isfinite(x)] for x in Pt]))
    VU = np.unique(np.concatenate([x[np.isfinite(x)] for x in Ut]))
    VD = np.unique(np.concatenate([x[np.isfinite(x)] for x in Dt]))
    span = L - los  # the most layers above its lowest count a pair can take
    need = L - los.sum()
    capU_all = caps(Ut, VU)  # (pairs, |VU|)
    best = math.inf if cutoff_s is None else cutoff_s
    arg = None
    for X in VP:
        if m / 2 * X + c * VU[0] + VD[0] >= best:
            break
        capP = caps(Pt, np.array([X]))[:, 0]
        if (capP == 0).any():
            continue
        cap_xy = np.minimum(capP[:, None], capU_all)  # (pairs, |VU|)
        ok = (cap_xy > 0).all(0) & (np.minimum(cap_xy - 1, span[:, None]).sum(0) >= need)
        if not ok.any():
            continue
        cols = np.flatnonzero(ok)
        cxy = cap_xy[:, cols]
        # the least Z (index into VD) with every pair's cap >= 1 and the caps' sum >= L
        lo_i = np.zeros(len(cols), np.int64)
        hi_i = np.full(len(cols), len(VD) - 1)
        while (lo_i < hi_i).any():
            mid = (lo_i + hi_i) // 2
            cz = np.minimum(cxy, caps(Dt, VD[mid]))
            good = (cz > 0).all(0) & (np.minimum(cz - 1, span[:, None]).sum(0) >= need)
            hi_i = np.where(good, mid, hi_i)
            lo_i = np.where(good, lo_i, mid + 1)
        cz = np.minimum(cxy, caps(Dt, VD[lo_i]))
        good = (cz > 0).all(0) & (np.minimum(cz - 1, span[:, None]).sum(0) >= need)
        vals = np.where(good, m / 2 * X + c * VU[cols] + VD[lo_i], np.inf)
        j = int(np.argmin(vals))
        if vals[j] < best:
            best, arg = float(vals[j]), (X, VU[cols[j]], VD[lo_i[j]])
    if arg is None:
        return _none_below(p, "dp", start, cutoff_s, 0.0)
    X, Y, Z = arg
    cap = np.minimum(np.minimum(caps(Pt, np.array([X]))[:, 0], caps(Ut, np.array([Y]))[:, 0]),
                     caps(Dt, np.array([Z]))[:, 0]) - 1  # most layers above lo per pair
    extra = np.zeros(k, np.int64)
    left = need
    for h in range(k):  # any assignment within the caps has maxima <= (X, Y, Z)
        extra[h] = min(cap[h], span[h], left)
        left -= extra[h]
    n, r = _split_of(p, [(lo_N, split) for lo_N, _, split, _ in tables], extra.tolist())
    return _result(p, "optimal", "dp", start, best, 0.0, n, r)


# --- CP-SAT ---------------------------------------------------------------------------------

def _upper_bound_s(p: DualPipeProblem) -> float:
    R = p.layers if p.allow_full_recompute else 0
    L = p.layers
    span = lambda *x: float(sum(np.abs(v).max() for v in x))  # noqa: E731
    T = 2 * (span(p.a) + L * span(p.t) + R * span(p.u))
    U = T + 2 * (L * span(p.bw) + R * span(p.ru))
    D = 2 * (span(p.e) + L * span(p.g))
    return p.num_micro_batches / 2 * T + p.bubble_weight * U + D


def memory_cut(p: DualPipeProblem, h: int, n, r) -> tuple[tuple[str, int, int, int], ...]:
    """Pair h of split (n, r) does not fit: what every split that may fit must meet, a
    disjunction of (variable "n" or "r", stage, sense, bound) meaning var >= bound (sense +1)
    or var <= bound (sense -1). A pair's memory, as pair_fits evaluates it, is monotone in each
    of its four counts (IEEE rounding is monotone): rising with n_s where kn_s >= 0, falling
    with r_s where kr_s >= 0 (the other way otherwise); so every split that is at least as
    large in each count's rising direction does not fit either, and one that may fit leaves
    that orthant by one count."""
    out = []
    for s in (h, p.pp - 1 - h):
        n0, r0 = int(n[s]), int(r[s])
        out.append(("n", s, -1, n0 - 1) if p.kn[s] >= 0 else ("n", s, +1, n0 + 1))
        out.append(("r", s, +1, r0 + 1) if p.kr[s] >= 0 else ("r", s, -1, r0 - 1))
    return tuple(out)


def _relaxed_rows(p: DualPipeProblem, mu: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """(k0, kn, kr per stage; capacity less runtime per pair) in quanta of mu bytes, rounded
    the other way from a conservative row (use down, saving and capacity up, capacity one
    quantum more, as formulations/quantize.relaxed_mem): every split that fits satisfies
    sum_s (k0_s + kn_s n_s - kr_s r_s) <= K_h, so the row is a relaxation; memory_cut decides."""
    k0 = np.floor(p.k0 / mu).astype(np.int64).tolist()
    kn = np.floor(p.kn / mu).astype(np.int64).tolist()
    kr = np.ceil(p.kr / mu).astype(np.int64).tolist()
    cap = (np.ceil((p.pair_capacity_bytes() - p.runtime_bytes) / mu) + 1).astype(np.int64).tolist()
    return k0, kn, kr, cap


def solve_cpsat(p: DualPipeProblem, time_limit_s: float = 10.0, seed: int = 0,
                cutoff_s: float | None = None) -> MultiClassResult:
    """The model on CP-SAT, times rounded to a quantum q (as formulations/quantize.py does:
    the smallest 1 ns x 2^j keeping the scaled objective below 2^40). Objective 2 Z in quanta:
    m X + (pp/2 - 1) Y + 2 Z. Charging each rounded coefficient a quantum, a pair's rounded sum
    is within q (2 + L + R) of the true one, so the scaled objective is within
        E = q [ (m/2 + c)(2 + L + R) + 2 + L ]
    of Z (c the bubble weight); bound = q (solver bound) / 2 - E, tolerance 2E. Where
    pairs_alike holds, the pair model (_pair_model; one solve, memory exact through the pair
    tables). Otherwise memory is decided exactly (module docstring, Memory): each pair's row in 1 KiB quanta rounded the
    other way (_relaxed_rows, a relaxation), and a solution whose pair does not fit by
    pair_fits is cut off with memory_cut and the model solved again, until the solution fits;
    the relaxation holds every split that fits, so every solve's bound is valid and the first
    solution that fits is optimal when its solve proved its optimum. The deterministic time of
    all the solves together is held to `time_limit_s`. `cutoff_s`: the scaled objective is held
    to 2 (cutoff + E) / q, which every split of Z <= cutoff meets, so "infeasible" under it is
    status "cutoff" (no split below the cutoff)."""
    from paraplan.formulations.multiclass import deterministic_solver, solved_status

    start = time.perf_counter()
    L, m = p.layers, p.num_micro_batches
    R = L if p.allow_full_recompute else 0
    q = time_quantum(2 * _upper_bound_s(p))
    E = q * ((m / 2 + p.bubble_weight) * (2 + L + R) + 2 + L)
    cut = cutoff_s is not None and math.isfinite(cutoff_s)
    cuts: list[tuple[tuple[str, int, int, int], ...]] = []
    spent = 0.0  # deterministic time of the solves so far
    alike = p.pairs_alike()  # the pairs' own tables: memory exact, no cuts (_pair_model)
    while True:
        limit_q = math.floor(2 * (cutoff_s + E) / q) if cut else None
        if alike:
            model, pick = _pair_model(p, q, limit_q)
        else:
            model, n, r = _cpsat_model(p, q, R, cuts, limit_q)
            pick = lambda s, n=n, r=r: ([s.value(x) for x in n], [s.value(x) for x in r])  # noqa: E731
        solver = deterministic_solver(max(time_limit_s - spent, 1e-3), seed)
        status = solved_status(solver, model, "a DualPipe split")
        spent += solver.response_proto.deterministic_time
        raw = solver.best_objective_bound
        bound = raw * q / 2 - E if math.isfinite(raw) else None
        if status == "infeasible":
            return _none_below(p, "cpsat", start, cutoff_s, 2 * E)
        if status == "timeout":
            return _result(p, status, "cpsat", start, bound, 2 * E)
        nv, rv = pick(solver)
        over = [] if alike else p.overfull_pairs(nv, rv)  # alike: _result re-checks the fit
        if not over:
            return _result(p, status, "cpsat", start, bound, 2 * E, nv, rv)
        if spent >= time_limit_s:
            return _result(p, "timeout", "cpsat", start, bound, 2 * E)
        cuts += [memory_cut(p, h, nv, rv) for h in over]


def _pair_model(p: DualPipeProblem, q: float, cutoff_q: int | None):
    """CP-SAT's model where pairs_alike holds (the exact search's condition): a pair's three
    sums depend only on its layers N_h and recomputed layers R_h and grow with R_h, so it takes
    the fewest recomputed layers that fit, R*_h(N_h) (_pair_tables, decided by pair_fits
    itself); the model chooses N_h only, each pair's sums read from its table by an element
    constraint (rounded to the quantum: within q/2 of the true sum, inside solve_cpsat's E).
    The per-stage model needs a knapsack row and lazy cuts per pair and leaves CP-SAT a
    bound 3.5% under the optimum after 30 s on Qwen3-235B's pp 16 configuration; this one
    has pp/2 variables. (model, pick): pick(solver) is the split (n, r) of the solution."""
    from ortools.sat.python import cp_model

    L = p.layers
    model = cp_model.CpModel()
    big = 4 * OBJECTIVE_LIMIT_QUANTA
    X, Y, Z = (model.new_int_var(-big, big, name) for name in "XYZ")
    pairs = _pair_table_sums(p)
    if pairs is None:  # a pair fits no count of layers: no split fits
        model.add_bool_or([])
        return model, None
    tables, idx = [], []
    for h, (lo_N, R, split, sums) in enumerate(pairs):
        ok = np.flatnonzero(np.isfinite(R))
        i = model.new_int_var_from_domain(cp_model.Domain.from_values(ok.tolist()), f"N{h}_index")
        for name, vals, bound in zip("PUD", sums, (X, Y, Z)):
            v = model.new_int_var(-big, big, f"{name}{h}")
            model.add_element(i, [int(round(x / q)) for x in vals], v)
            model.add(bound >= v)
        tables.append((lo_N, split))
        idx.append(i)
    model.add(sum(lo_N + i for (lo_N, _), i in zip(tables, idx)) == L)
    for i, step in zip(idx, _first_steps(pairs, L)):
        model.add_hint(i, step)
    _minimise_cpsat(model, p, X, Y, Z, cutoff_q)

    def pick(solver) -> tuple[list[int], list[int]]:
        return _split_of(p, tables, [solver.value(i) for i in idx])
    return model, pick


def _first_steps(pairs, layers: int) -> list[int]:
    """A split for _pair_model's hint, as each pair's step into its table (empty where none is
    found): from each pair's fewest layers that fit, each further layer to the pair whose P sum
    is least after taking it. CP-SAT's objective lower-bound search (multiclass.deterministic_solver)
    finds no solution by itself where its bound stays a few % under the optimum: a symmetric
    pp = 4, L = 7 problem with slack memory had none after 20 s, and proved its optimum at once
    from this hint. A hint only guides the search: the answer and its proof are CP-SAT's."""
    steps = [int(np.flatnonzero(np.isfinite(R))[0]) for _, R, _, _ in pairs]
    left = layers - sum(lo_N + j for (lo_N, *_), j in zip(pairs, steps))
    while left > 0:
        grow = [(sums[0][j + 1], h) for h, ((_, R, _, sums), j) in enumerate(zip(pairs, steps))
                if j + 1 < len(R) and np.isfinite(R[j + 1])]
        if not grow:
            return []
        steps[min(grow)[1]] += 1
        left -= 1
    return steps if left == 0 else []


def _minimise_cpsat(model, p: DualPipeProblem, X, Y, Z, cutoff_q: int | None) -> None:
    """CP-SAT's objective over the maxima X, Y, Z (2 Z in quanta, solve_cpsat), held to
    `cutoff_q` quanta where given."""
    objective = p.num_micro_batches * X + (p.pp // 2 - 1) * Y + 2 * Z
    if cutoff_q is not None:
        model.add(objective <= cutoff_q)
    model.minimize(objective)


def _cpsat_model(p: DualPipeProblem, q: float, R: int, cuts, cutoff_q: int | None):
    """The CP-SAT model of solve_cpsat with `cuts` (memory_cut's) and the scaled objective held
    to `cutoff_q` quanta: (model, n, r)."""
    from ortools.sat.python import cp_model

    L, pp, k = p.layers, p.pp, p.pairs
    qi = lambda x: [int(round(v / q)) for v in x]  # noqa: E731
    a, t, u = qi(p.a), qi(p.t), qi(p.u)
    tb, ur = qi(p.t + p.bw), qi(p.u + p.ru)
    e, g = qi(p.e), qi(p.g)
    k0, kn, kr, cap = _relaxed_rows(p, MEM_QUANTUM_BYTES)
    lo = p.lows()

    model = cp_model.CpModel()
    n = [model.new_int_var(int(lo[s]), L, f"n{s}") for s in range(pp)]
    r = [model.new_int_var(0, R, f"r{s}") for s in range(pp)]
    model.add(sum(n) == L)
    for s in range(pp):
        model.add(r[s] <= n[s])
    big = 4 * OBJECTIVE_LIMIT_QUANTA
    X, Y, Z = (model.new_int_var(-big, big, name) for name in "XYZ")
    for h in range(k):
        st = (h, pp - 1 - h)
        model.add(X >= sum(a[s] + t[s] * n[s] + u[s] * r[s] for s in st))
        model.add(Y >= sum(a[s] + tb[s] * n[s] + ur[s] * r[s] for s in st))
        model.add(Z >= sum(e[s] + g[s] * n[s] for s in st))
        model.add(sum(k0[s] + kn[s] * n[s] - kr[s] * r[s] for s in st) <= cap[h])
    var = {"n": n, "r": r}
    for c in cuts:  # at least one count leaves the orthant that does not fit
        lits = []
        for kind, s, sense, bound in c:
            b = model.new_bool_var("")
            x = var[kind][s]
            model.add(x >= bound if sense > 0 else x <= bound).only_enforce_if(b)
            lits.append(b)
        model.add_bool_or(lits)
    _minimise_cpsat(model, p, X, Y, Z, cutoff_q)
    return model, n, r


# --- MILP -----------------------------------------------------------------------------------

def _solve_milp_pairs(p: DualPipeProblem, time_limit_s: float, backend: str,
                      cutoff_s: float | None, start: float) -> MultiClassResult | None:
    """solve_milp where pairs_alike holds (as _pair_model for CP-SAT): pair h holds N_h =
    lo_h + sum_j z_hj layers, z_hj binary with z_hj >= z_h,j+1 (z_hj = 1: at least lo_h + j),
    and each of its sums is its table's first value plus the steps it climbs,
    P_h = P_h0 + sum_j (P_hj - P_h,j-1) z_hj (U, D alike), so memory is exact through the
    tables and no cut is needed. An integral z accepted iota off moves a pair's sum by at most
    iota times the table's total variation V, so the bound subtracts
        eps = iota (m/2 + c + 1) V_max + phi (m/2 + c + 1).
    None where a pair's feasible counts are not one run from its fewest (the per-stage model
    then decides)."""
    from paraplan.formulations.milp import FEASIBILITY_TOL_S, INTEGRALITY_TOL, int_value, new_model
    L, m = p.layers, p.num_micro_batches
    pairs = _pair_table_sums(p)
    if pairs is None:
        return _result(p, "infeasible", backend, start, math.inf, 0.0)
    rows = []
    for lo_N, R, split, sums in pairs:
        ok = np.flatnonzero(np.isfinite(R))
        if ok[0] != 0 or ok[-1] != len(ok) - 1:
            return None
        rows.append((lo_N, split, [x[: len(ok)] for x in sums]))
    if all(len(sums[0]) == 1 for _, _, sums in rows):  # every pair at its one count: nothing to choose
        if sum(lo_N for lo_N, _, _ in rows) != L:
            return _result(p, "infeasible", backend, start, math.inf, 0.0)
        return None  # the per-stage model prices the one split
    weight = m / 2 + p.bubble_weight + 1
    variation = max(float(np.abs(np.diff(x)).sum()) for _, _, sums in rows for x in sums)
    eps = INTEGRALITY_TOL * weight * variation + FEASIBILITY_TOL_S * weight
    what = "a DualPipe split"

    def formulate(_cuts):  # memory is exact through the tables: never a cut
        api = new_model(backend)
        X, Y, Z = api.real_var("X"), api.real_var("Y"), api.real_var("Z")
        steps, layers = [], []
        for h, (lo_N, _, sums) in enumerate(rows):
            z = [api.int_var(0, 1, f"z_h{h}_j{j}") for j in range(1, len(sums[0]))]
            for j in range(1, len(z)):
                api.add(z[j] <= z[j - 1], f"C1_order_h{h}_j{j + 1}")
            for name, bound, x in (("C3_steady", X, sums[0]), ("C4_bubble", Y, sums[1]), ("C5_sync", Z, sums[2])):
                api.add(bound >= float(x[0]) + sum(float(x[j] - x[j - 1]) * z[j - 1] for j in range(1, len(x))),
                        f"{name}_h{h}")
            steps.append(z)
            layers.append(lo_N + sum(z))
        api.add(sum(layers) == L, "C1_layers")
        _minimise_milp(api, p, X, Y, Z, cutoff_s, eps)
        return api, eps, steps

    def check(built):
        api, _, steps = built
        n, r = _split_of(p, [(lo_N, split) for lo_N, split, _ in rows],
                         [sum(int_value(api, x, backend, what) for x in z) for z in steps])
        if sum(n) != L:
            raise SolverError(f"{backend}: DualPipe pair counts {n} do not sum to {L} layers")
        return (n, r), []
    return _milp_solve(p, formulate, check, backend, start, time_limit_s, cutoff_s)


def solve_milp(p: DualPipeProblem, time_limit_s: float = 10.0, backend: str = "cbc",
               cutoff_s: float | None = None) -> MultiClassResult:
    """The model as a MILP (X, Y, Z continuous; n, r integer; memory in MiB, each pair's
    capacity MEM_MARGIN_MIB more: a relaxation even under the backends' tolerances). Memory is
    decided as in solve_cpsat: a solution whose pair does not fit by pair_fits is cut off with
    memory_cut (C7x: one binary per count, at least one set) and the model solved again, within
    the one time limit, until the solution fits. An integer variable accepted iota from integral
    moves each of the 3 pp/2 sums it enters by iota times its coefficient, and every row may be
    off by the feasibility tolerance phi, so the reported bound subtracts
        eps = iota pp (m/2 + c + 1) w_max + phi (m/2 + c + 1)
    (w_max the largest per-layer coefficient), plus CBC's print error; tolerance 2 eps.
    `cutoff_s`: the objective is held to cutoff + eps, so "infeasible" is status "cutoff"."""
    from paraplan.formulations.milp import (BACKENDS, FEASIBILITY_TOL_S, INTEGRALITY_TOL, MEM_MARGIN_MIB,
                                            MEM_UNIT_BYTES, int_value, new_model)
    start = time.perf_counter()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if p.pairs_alike():  # the pairs' own tables: memory exact, no cuts (_solve_milp_pairs)
        got = _solve_milp_pairs(p, time_limit_s, backend, cutoff_s, start)
        if got is not None:
            return got
    L, pp, k, m = p.layers, p.pp, p.pairs, p.num_micro_batches
    R = L if p.allow_full_recompute else 0
    lo = p.lows()
    what = "a DualPipe split"

    def formulate(cuts):
        api = new_model(backend)
        n = [api.int_var(int(lo[s]), L, f"n_s{s}") for s in range(pp)]
        r = [api.int_var(0, R, f"r_s{s}") for s in range(pp)]
        api.add(sum(n) == L, "C1_layers")
        X, Y, Z = api.real_var("X"), api.real_var("Y"), api.real_var("Z")
        for s in range(pp):
            api.add(r[s] <= n[s], f"C2_recompute_s{s}")
        cap_pair = p.pair_capacity_bytes()
        for h in range(k):
            st = (h, pp - 1 - h)
            T = [p.a[s] + p.t[s] * n[s] + p.u[s] * r[s] for s in st]
            api.add(X >= sum(T), f"C3_steady_h{h}")
            api.add(Y >= sum(T) + sum(p.bw[s] * n[s] + p.ru[s] * r[s] for s in st), f"C4_bubble_h{h}")
            api.add(Z >= sum(p.e[s] + p.g[s] * n[s] for s in st), f"C5_sync_h{h}")
            cap = (cap_pair[h] - p.runtime_bytes) / MEM_UNIT_BYTES
            api.add(sum((p.k0[s] + p.kn[s] * n[s] - p.kr[s] * r[s]) / MEM_UNIT_BYTES for s in st)
                    <= cap + MEM_MARGIN_MIB, f"C6_mem_h{h}")
        var = {"n": n, "r": r}
        for i, c in enumerate(cuts):  # at least one count leaves the orthant that does not fit
            ys = []
            for j, (kind, s, sense, bound) in enumerate(c):
                y = api.int_var(0, 1, f"y_C7x_{i}_{j}")
                x, span = var[kind][s], (L if kind == "n" else R) + 2  # the count's range, and more
                api.add(x >= bound - span * (1 - y) if sense > 0 else x <= bound + span * (1 - y),
                        f"C7x_mem_{i}_{j}")
                ys.append(y)
            api.add(sum(ys) >= 1, f"C7x_mem_{i}")
        _minimise_milp(api, p, X, Y, Z, cutoff_s, eps)
        return api, eps, n, r

    w_max = float(max(np.abs(x).max() for x in (p.t, p.u, p.t + p.bw, p.u + p.ru, p.g)))
    weight = m / 2 + p.bubble_weight + 1
    eps = INTEGRALITY_TOL * pp * weight * w_max + FEASIBILITY_TOL_S * weight

    def check(built):
        api, _, n, r = built
        nv, rv = [int_value(api, x, backend, what) for x in n], [int_value(api, x, backend, what) for x in r]
        return (nv, rv), [memory_cut(p, h, nv, rv) for h in p.overfull_pairs(nv, rv)]
    return _milp_solve(p, formulate, check, backend, start, time_limit_s, cutoff_s)


def _minimise_milp(api, p: DualPipeProblem, X, Y, Z, cutoff_s: float | None, eps: float) -> None:
    """The MILP's objective over the maxima X, Y, Z (seconds), held to cutoff + eps (C8)."""
    objective = p.num_micro_batches / 2 * X + p.bubble_weight * Y + Z
    if cutoff_s is not None and math.isfinite(cutoff_s):
        api.add(objective <= cutoff_s + eps, "C8_cutoff")
    api.minimise(objective)


def _milp_solve(p: DualPipeProblem, formulate, check, backend: str, start: float, time_limit_s: float,
                cutoff_s: float | None) -> MultiClassResult:
    """A DualPipe MILP solved by formulations/milp.solve_with_cuts, as a result."""
    from paraplan.formulations.milp import solve_with_cuts
    got = solve_with_cuts(formulate, check, backend, start + time_limit_s, "a DualPipe split")
    if got.status == "infeasible":
        return _none_below(p, backend, start, cutoff_s, got.tolerance_s)
    return _result(p, got.status, backend, start, got.bound_s, got.tolerance_s, *got.values)
