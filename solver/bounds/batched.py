"""The class planner's memory-free lower bound (solver/search.py, step 2), computed for
every configuration of a search at once.

For each inner problem (formulations/multiclass.MultiClassProblem), scenario sigma and class k,
with r = 0 and memory ignored (both only add time or remove splits):
    A_k >= min over splits of max_s (a_s + n_s t_s)      (balanced_split: exact)
    S_k >= sum_s a_s + L min_s t_s      (under a zero-bubble schedule each pass less its drain
                                         saving, t_s - k w t_s: cost/zero_bubble.py; the pacing
                                         term (v m - 1) T_s + k W_s >= (v m - 1) A_k)
    D   >= max_k max( (sum_s d_s + L min_s g_s) / pp_k,  max_s (d_s + g_s) )
and the pipeline time grows with each (m_k >= 1 > 1/v). Then over micro-batch vectors m: for a
worst-case ("max") objective the relaxation of `relaxed_s`, for a weighted one the exact
minimum over every vector (`mvecs_of()`).

Why batches: the terms above are a few numpy operations on arrays of pp_k numbers, so one
configuration at a time the interpreter's per-call overhead dominates (tens of thousands of
configurations on a large homogeneous instance planned as one group). Stacking every
(configuration, scenario, class) with the same (pp, v) into one array computes the same
numbers with the same floating-point operations, row by row, so the bounds (and with them
the search order and its tie rule) are those of the one-at-a-time computation it replaced
(compared bit for bit on every bundled instance, homogeneous ones as one group, when it did);
tests/mixed/test_batched_bounds.py checks each batched bound against the problem bounded
alone, and every bound against its configuration's optimum found by enumeration.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from paraplan.cost.pipeline_split import slot_offsets
from paraplan.formulations.multiclass import MultiClassProblem
from paraplan.solver.bounds.one_class import slot_relaxation

# (entries x stages x extra layers) floats per balanced-split block: ~64 MiB at most
BLOCK_FLOATS = 8_000_000


def balanced_splits(a: np.ndarray, t: np.ndarray, layers: int, v: int = 1) -> np.ndarray:
    """Row by row (a, t: (N, pp), t >= 0), the split minimising max_s (a_s + n_s t_s) over
    n_s >= 1, sum n_s = layers; with v > 1 the same over chunks of v layers (n_s multiples of
    v). Adding each layer where it raises the maximum least is optimal for this min-max problem
    (the greedy of a heap of next values a_s + k t_s, k = n_s + 1, ties to the lower stage); the
    layers it adds beyond one per stage are the (layers - pp) smallest next values of all
    stages, each stage's in increasing order. So with theta the (layers - pp)-th smallest of
    those values, stage s takes its values below theta, and the values equal to theta go by
    stage order, as the heap takes them. theta comes from a few values per stage around the
    level the continuous count puts it at (_window_counts, its rows checked exact), else from
    a partition of all values where they are few (PARTITION_VALUES per row), else from
    bisecting on the count of values at or below a level (exact, float by float: a deep model
    has pp x layers of them)."""
    if v > 1:
        return v * balanced_splits(a, v * t, layers // v)
    N, pp = a.shape
    extra = layers - pp
    if extra <= 0 or N == 0:
        return np.ones((N, pp))
    got = _window_counts(a, t, extra)
    if got is None:
        below, ties = _all_value_counts(a, t, extra)
    else:
        below, ties, settled = got
        if not settled.all():
            rest = ~settled
            below[rest], ties[rest] = _all_value_counts(a[rest], t[rest], extra)
    short = extra - below.sum(axis=1, keepdims=True)
    take = np.clip(short - (np.cumsum(ties, axis=1) - ties), 0, ties)
    return 1 + below + take


def _all_value_counts(a: np.ndarray, t: np.ndarray, extra: int) -> tuple[np.ndarray, np.ndarray]:
    """(below, ties), (N, pp) each: per stage, how many of its values a_s + k t_s (k = 2 ..
    extra + 1) lie below theta and how many equal it (balanced_splits), theta read from all the
    values."""
    N, pp = a.shape
    if pp * extra <= PARTITION_VALUES:
        vals = a[:, :, None] + np.arange(2, extra + 2, dtype=float)[None, None, :] * t[:, :, None]
        theta = np.partition(vals.reshape(N, -1), extra - 1, axis=1)[:, extra - 1][:, None, None]
        return (vals < theta).sum(axis=2), (vals == theta).sum(axis=2)
    lo, hi = _bisect_theta(a, t, extra)
    below = _count_at_or_below(a, t, extra, lo)
    return below.astype(np.int64), (_count_at_or_below(a, t, extra, hi) - below).astype(np.int64)


# values per row up to which balanced_splits partitions them all rather than bisecting
PARTITION_VALUES = 4096
# _window_counts: the continuous level's refinements of its active stages, and the values
# each stage's window starts below its continuous count (its floor may be one off in floats)
WINDOW_STEPS = 3
WINDOW_BELOW = 1
# values per call below which _window_counts' fixed cost (some 40 numpy calls) exceeds what it
# saves over reading every value (the 4 types x 16 nodes row's calls timed both ways)
WINDOW_MIN_VALUES = 8192


def _window_counts(a: np.ndarray, t: np.ndarray, extra: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(below, ties, settled) as _all_value_counts, from a window of W values per stage, or
    None where that would not be cheaper: theta is near the level x where the continuous count
    sum_s max(0, (x - a_s) / t_s - 1) (stage s has floor((x - a_s) / t_s) - 1 values at or
    below x, within one) reaches extra, so with j_s of stage s's values taken as below a
    window of its next W, theta is the (extra - sum_s j_s)-th smallest of the windows' values,
    exactly where every stage's last value below its window is < theta and its first above it
    is > theta (the values increase with k, the same floats as _all_value_counts'; then the
    values < theta are the j_s below and the window's, >= extra - sum j_s of the rest are
    <= theta, and fewer than that < it). A row that fails this is not settled (zeros)."""
    N, pp = a.shape
    if N * pp * extra < WINDOW_MIN_VALUES or not (t > 0).all():
        return None
    inv = 1 / t
    if not np.isfinite(inv).all():
        return None
    active = np.ones((N, pp), bool)
    for _ in range(WINDOW_STEPS):  # the level where the active stages' counts sum to extra
        slope = (inv * active).sum(axis=1, keepdims=True)
        x = (extra + ((1 + a * inv) * active).sum(axis=1, keepdims=True)) / np.maximum(slope, inv.min())
        active = (x - a) * inv > 1
    # the continuous count exceeds the exact one by less than 1 per stage, so theta lies
    # within about pp / slope above x: W values per stage reach it
    W = max(1, int(np.ceil(pp / np.maximum(slope, inv.min()) * inv).max()) + WINDOW_BELOW + 2)
    if W * 4 > extra:
        return None
    return _window_select(a, t, extra, np.clip(np.floor((x - a) * inv) - 1 - WINDOW_BELOW, 0, extra), W)


def _window_select(a: np.ndarray, t: np.ndarray, extra: int, j: np.ndarray, W: int) -> tuple:
    """_window_counts' (below, ties, settled) from windows of W values per stage, stage s's
    after its first j_s (floats of integers in 0 .. extra): theta is the (extra - sum_s j_s)-th
    smallest of the windows' values where that check holds (_window_counts), the row settled."""
    N, pp = a.shape
    k = j[:, :, None] + np.arange(2, W + 2, dtype=float)  # the windows' k
    vals = np.where(k <= extra + 1, a[:, :, None] + k * t[:, :, None], np.inf)
    rank = extra - j.sum(axis=1).astype(np.int64)  # theta's rank in the windows (from 1)
    theta = np.sort(vals.reshape(N, -1), axis=1)[np.arange(N), np.clip(rank - 1, 0, pp * W - 1)][:, None]
    settled = ((rank >= 1) & (rank <= pp * W) & (theta[:, 0] < np.inf)
               & (np.where(j >= 1, a + (j + 1) * t, -np.inf) < theta).all(axis=1)
               & (np.where(j + W + 2 <= extra + 1, a + (j + W + 2) * t, np.inf) > theta).all(axis=1))
    theta = theta[:, :, None]
    below = np.where(settled[:, None], j.astype(np.int64) + (vals < theta).sum(axis=2), 0)
    return below, np.where(settled[:, None], (vals == theta).sum(axis=2), 0), settled


def _count_at_or_below(a: np.ndarray, t: np.ndarray, extra: int, level: np.ndarray) -> np.ndarray:
    """Per stage, how many of a + k t (k = 2 .. extra + 1, this float expression) are <= level
    (N, 1): the quotient's guess, then corrected where rounding put it one off (the values
    increase with k, so the corrected count is exact)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        k = np.floor((level - a) / np.where(t > 0, t, 1.0))
    k = np.where(t > 0, np.nan_to_num(k, nan=1.0, posinf=extra + 1.0, neginf=1.0),
                 np.where(a <= level, extra + 1.0, 1.0))  # t = 0: every value is a
    k = np.clip(k, 1.0, extra + 1.0)
    for _ in range(2):
        k = k + ((k < extra + 1) & (a + (k + 1) * t <= level))
        k = k - ((k >= 2) & (a + k * t > level))
    return k - 1


def _bisect_theta(a: np.ndarray, t: np.ndarray, extra: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), (N, 1) each: adjacent floats with fewer than `extra` values at or below lo and
    at least `extra` at or below hi, so hi is the extra-th smallest value."""
    lo = np.nextafter((a + 2.0 * t).min(axis=1, keepdims=True), -np.inf)
    hi = (a + (extra + 1.0) * t).max(axis=1, keepdims=True)
    while True:
        mid = lo + (hi - lo) / 2
        open_ = (mid > lo) & (mid < hi)
        if not open_.any():
            return lo, hi
        enough = _count_at_or_below(a, t, extra, mid).sum(axis=1, keepdims=True) >= extra
        hi = np.where(open_ & enough, mid, hi)
        lo = np.where(open_ & ~enough, mid, lo)


def balanced_split(a: np.ndarray, t: np.ndarray, layers: int, v: int = 1) -> np.ndarray:
    """balanced_splits of one row (t_s > 0)."""
    return balanced_splits(np.asarray(a, float)[None, :], np.asarray(t, float)[None, :], layers, v)[0]


def balanced_split_of(c) -> np.ndarray:
    """The nominal-balanced split of coefficients `c` with its outer's chunk rule: v-multiples,
    or with the embedding / loss slots the balanced split of their relaxation
    (one_class.slot_relaxation: the same stage times) less each end stage's slot."""
    v = c.outer.virtual_stages
    x = slot_relaxation(c)
    off = np.asarray(slot_offsets(c.pp, c.outer.embedding_in_split, c.outer.loss_in_split), float)
    return balanced_split(x.stage_time_s, x.layer_time_s, x.layers, v) - off


def _aggregate(values: np.ndarray, agg: str, weights) -> np.ndarray:
    """values (scenarios, V) -> (V,)"""
    return values.max(axis=0) if agg == "max" else np.tensordot(np.asarray(weights), values, 1)


def over_m(p: MultiClassProblem, mvecs: np.ndarray, A, S, D) -> np.ndarray:
    """agg over scenarios of max_k ((m_k - 1/v) A[sc][k] + S[sc][k] / v) + D[sc], for every m
    vector (cost/schedule.pipeline_time_s; v = 1: (m_k - 1) A + S)."""
    v = p.virtual_stages
    vals = np.stack([((mvecs - 1 / v) * np.asarray(A[i]) + np.asarray(S[i]) / v).max(axis=1) + D[i]
                     for i in range(len(A))])
    return _aggregate(vals, p.objective, p.weights)


def relaxed_s(A: np.ndarray, S: np.ndarray, D: np.ndarray, x, lo, M, v, uniform: bool) -> np.ndarray:
    """Per row and scenario, a lower bound of min over m of max_k ((m_k - 1/v) A_k + S_k/v) + D
    subject to sum_k x_k m_k = M and m_k >= lo_k (divisibility relaxed). Any feasible m within
    time Z has m_k <= (Z - D - S_k/v)/A_k + 1/v, so M <= sum_k x_k ((Z - D - S_k/v)/A_k + 1/v), i.e.
        Z >= (M - sum_k x_k / v + sum_k x_k (D + S_k/v)/A_k) / sum_k (x_k / A_k);
    and Z >= (lo_k - 1/v) A_k + S_k/v + D for every k; `uniform`: every m_k = M / sum_k x_k.
    With one class both are exact. A, S: (rows, scenarios, classes), D: (rows, scenarios, 1);
    x, lo (per class) and M, v broadcast against them. A row with a stage time A <= 0
    (degenerate) keeps the second bound only."""
    if uniform:
        return (((M // x.sum(-1, keepdims=True)) - 1 / v) * A + S / v + D).max(-1)
    floor_z = ((lo - 1 / v) * A + S / v + D).max(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cont = ((M - x.sum(-1, keepdims=True) / v + (x * (D + S / v) / A).sum(-1, keepdims=True))
                / (x / A).sum(-1, keepdims=True))[..., 0]
    return np.where((A <= 0).any((1, 2))[:, None], floor_z, np.maximum(floor_z, cont))


def _terms(problems: list[MultiClassProblem]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(A, S, Dk, first): A, S and the per-class D term of every (problem, scenario, class),
    flat in that order (problem i's from first[i], scenario by scenario), computed in blocks of
    equal (pp, v, layers)."""
    groups: dict[tuple[int, int, int], list] = defaultdict(list)
    first = np.zeros(len(problems) + 1, np.int64)
    e = 0
    for i, p in enumerate(problems):
        first[i] = e
        for cs in p.coeffs:
            for c in cs:  # with the embedding / loss slots, their relaxation in whole chunks
                c = slot_relaxation(c)
                groups[c.pp, p.virtual_stages, c.layers].append((e, c))
                e += 1
    first[-1] = e
    A, S, Dk = np.empty(e), np.empty(e), np.empty(e)
    for (pp, v, L), items in groups.items():
        rows = max(1, BLOCK_FLOATS // max(1, pp * max(1, L // v - pp)))
        for start in range(0, len(items), rows):
            block = items[start:start + rows]
            at = np.array([j for j, _ in block], np.int64)
            a = np.stack([c.stage_time_s for _, c in block])
            t = np.stack([c.layer_time_s for _, c in block])
            d = np.stack([c.stage_sync_time_s for _, c in block])
            g = np.stack([c.layer_sync_time_s for _, c in block])
            A[at] = (a + balanced_splits(a, t, L, v) * t).max(axis=1)
            # under a zero-bubble schedule the sum term reads each pass less its drain saving
            # (one_class.drain_credit_s): sum_s (T_s - k W_s) >= sum a + L min (t - saving)
            b = np.stack([c.layer_time_s - c.layer_drain_saving_s if c.layer_drain_saving_s.size
                          else c.layer_time_s for _, c in block])
            S[at] = a.sum(axis=1) + L * b.min(axis=1)
            Dk[at] = np.maximum((d.sum(axis=1) + L * g.min(axis=1)) / pp, (d + g).max(axis=1))
    return A, S, Dk, first


def lower_bounds_s(problems: list[MultiClassProblem], mvecs_of, uniform: bool = False) -> list[float]:
    """The lower bound of the module docstring for every problem; `mvecs_of(i)`: problem i's
    micro-batch vectors (asked only for a weighted objective)."""
    A, S, Dk, first = _terms(problems)
    out: list[float | None] = [None] * len(problems)
    worst: dict[tuple[int, int], list[int]] = defaultdict(list)  # worst-case problems by shape
    for i, p in enumerate(problems):
        if p.objective == "max":
            worst[len(p.coeffs), p.classes].append(i)
    for (n, K), idx in worst.items():  # relaxed_s, every problem of one shape at once
        ps = [problems[i] for i in idx]
        at = first[idx][:, None, None] + np.arange(n * K).reshape(1, n, K)  # (problems, scenarios, classes)
        x = np.array([p.replicas for p in ps], float)[:, None, :]
        lo = np.array([[p.min_micro_batches(k) for k in range(K)] for p in ps], float)[:, None, :]
        M = np.array([p.total_micro_batches for p in ps], float)[:, None, None]
        v = np.array([p.virtual_stages for p in ps], float)[:, None, None]
        bounds = relaxed_s(A[at], S[at], Dk[at].max(-1, keepdims=True), x, lo, M, v, uniform)
        for i, b in zip(idx, bounds.max(-1)):
            out[i] = float(b)
    for i, p in enumerate(problems):
        if out[i] is not None:
            continue
        K, e = p.classes, int(first[i])
        rows = range(len(p.coeffs))
        a = [[float(A[e + sc * K + k]) for k in range(K)] for sc in rows]
        s = [[float(S[e + sc * K + k]) for k in range(K)] for sc in rows]
        d = [max(float(Dk[e + sc * K + k]) for k in range(K)) for sc in rows]
        out[i] = float(over_m(p, mvecs_of(i), a, s, d).min())
    return out
