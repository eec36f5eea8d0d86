"""The integer model of the layer split of one outer configuration, and its scaling: the model
formulations/split_dp.py solves exactly (the planner's inner solver of a lone class on one
network); the multi-class CP-SAT model (formulations/multiclass.py) rounds its times and memory
by the same rules. Kept apart from OR-Tools so that split_dp.py runs without loading it.

Sets
    S = {0, ..., pp-1}   pipeline stages

Parameters (`cost.coefficients.StageCoefficients`; arrays of shape (pp,), indexed by s)
    L        layers                         transformer layers to place (c.layers)
    m        micro-batches per iteration    (c.outer.num_micro_batches)
    v        model chunks per stage         interleaved 1F1B (c.outer.virtual_stages); v = 1 is 1F1B
    a_s  [s]      stage_time_s          fixed time of stage s per micro-batch
    t_s  [s]      layer_time_s          one layer, one micro-batch, forward + backward
    u_s  [s]      recompute_time_s      extra time of one fully recomputed layer
    e_s  [s]      stage_sync_time_s     fixed time after the last backward (sync, optimizer)
    g_s  [s]      layer_sync_time_s     the same, per layer
    b_s  [bytes]  stage_mem_bytes       fixed memory of stage s
    w_s  [bytes]  layer_state_bytes + layer_act_bytes   one stored layer, all micro-batches in flight
    h_s  [bytes]  layer_act_bytes - layer_ckpt_bytes    saved by fully recomputing one layer
    K_s  [bytes]  capacity_bytes
    R        L when full recompute is allowed, else 0

Quantisation (`quantize`; the integer model sees only the rounded parameters, marked ^)
    q   [s]      time quantum, TIME_QUANTUM_S * 2^j with the smallest j >= 0 that keeps an upper
                 bound of the scaled objective below OBJECTIVE_LIMIT_QUANTA (2^40)
    mu  [bytes]  memory quantum, MEM_QUANTUM_BYTES (1 KiB)
    â_s = round(a_s/q), and likewise t̂, û, ê, ĝ                    (error <= q/2 each)
    b̂_s = ceil(b_s/mu), ŵ_s = ceil(w_s/mu), ĥ_s = floor(h_s/mu),  K̂_s = floor(K_s/mu)
    Memory use is rounded up and capacity down, so every split the integer model accepts fits
    in real memory (`cost.schedule.fits`); a split within mu*(1 + n_s + r_s) bytes of a
    capacity may be rejected by these rounded parameters alone. No backend decides "fits" on
    them: see Exact memory below.

Exact memory (`fit_recompute_range`; one meaning of "fits" in every method)
    A stage fits when cost.schedule.stage_mem_bytes(c, n, r) <= capacity_bytes, evaluated in
    float64 exactly as cost.schedule.fits and exhaustive search evaluate it (peak equal to the
    capacity fits). That value is monotone in r for fixed n (IEEE rounding is monotone), so the
    r that fit with n layers form an interval [lo_s(n), hi_s(n)] within [0, min(n, R)]; the
    function finds its ends from a float estimate corrected by evaluating the predicate itself.
    The DP reads feasibility and r from these intervals; CP-SAT and the MILP
    (formulations/multiclass*.py) solve with memory rounded the other way (use down, capacity
    up: a relaxation, `relaxed_mem`) and exclude, lazily, every candidate these intervals
    reject, so every backend accepts exactly the splits exhaustive search accepts.

Variables
    k_s ∈ {1, ..., max(1, ⌊L/v⌋)}   layers per model chunk on stage s; n_s = v k_s layers;
                                    k_0 >= d0 (c.first_chunk_min_layers: an MoE model's dense
                                    prefix, priced on stage 0; 1 otherwise)
    r_s ∈ {0, ..., R}               fully recomputed layers on stage s
    T_max  [quanta]                 slowest stage time per micro-batch
    D_max  [quanta]                 slowest post-backward time

Objective: v times the iteration time, in quanta, so that every coefficient is an integer
    minimise  (v m - 1) T_max + Σ_s (â_s + v k_s t̂_s + r_s û_s) + v D_max

Constraints
    C1_layers          Σ_s v k_s = L   (with the embedding / loss slots, n_s = v k_s - o_s and
                                       Σ_s v k_s = L + e + l: cost/pipeline_split.slot_offsets)
    C2_recompute_s{s}  r_s <= v k_s
    C3_mem_s{s}        b̂_s + v k_s ŵ_s - r_s ĥ_s <= K̂_s
    C4_pace_s{s}       T_max >= â_s + v k_s t̂_s + r_s û_s
    C5_sync_s{s}       D_max >= ê_s + v k_s ĝ_s

Zero bubble. Under a zero-bubble schedule (c.layer_drain_saving_s = s_s, cost/zero_bubble.py;
ŝ_s = round(s_s/q)) each stage's pass through the fill and drain costs T_s - n_s s_s and the
pacing stage is the one whose path is longest (cost/schedule.pipeline_time_s):
    minimise  max_s [ (v m - 1) T_s + n_s ŝ_s ] + Σ_s (T_s - n_s ŝ_s) + v D_max
with T_s = â_s + v k_s t̂_s + r_s û_s. The max is an epigraph (C4 with the saving added to the
bound each stage sets): no choice of the pacing stage is needed, since the minimum of a maximum
takes the largest path. T_s - n_s s_s >= 0 (k w <= 1), so torch's clip at 0 never binds.

Tolerance. Charging each rounded time coefficient a full quantum q (q/2 from rounding, the rest
absorbs floating-point error), the scaled objective q Ẑ(x)/v differs from the true iteration
time Z(x) of the same split x by at most

    E = (q / v) * [ (v m - 1)(1 + L + R) + (pp + L + R) + v (1 + L) ]

(`QuantizedCoefficients.objective_error_s`), plus (q / v) 2 L under a zero-bubble schedule
(n ŝ is within q n/2 <= q L of n s in the pacing term and in the sum). Hence
bound_s = q * (integer bound) / v - E is a valid lower bound on min Z, and an "optimal" split
is within 2E of the true optimum
(objective_s - bound_s <= 2E), over the splits that fit with the memory rounding above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.pipeline_split import stage_layer_counts
from paraplan.cost.schedule import slot_relief_bytes, stage_mem_bytes

TIME_QUANTUM_S = 1e-9  # finest time quantum: 1 ns
OBJECTIVE_LIMIT_QUANTA = 2**40  # scaled objective stays well inside int64 and exact in a double
MEM_QUANTUM_BYTES = 2**10  # 1 KiB

_ARRAYS = ("layer_time_s", "recompute_time_s", "stage_time_s", "layer_sync_time_s",
           "stage_sync_time_s", "layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes",
           "stage_mem_bytes", "capacity_bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantizedCoefficients:
    """The integer parameters of the model (int64 arrays of shape (pp,)) and their quanta."""

    time_quantum_s: float
    mem_quantum_bytes: int
    max_recompute: int  # R
    stage_time_q: np.ndarray  # â
    layer_time_q: np.ndarray  # t̂
    recompute_time_q: np.ndarray  # û
    stage_sync_q: np.ndarray  # ê
    layer_sync_q: np.ndarray  # ĝ
    stage_mem_q: np.ndarray  # b̂, rounded up
    layer_mem_q: np.ndarray  # ŵ, rounded up
    recompute_saving_q: np.ndarray  # ĥ, rounded down
    capacity_q: np.ndarray  # K̂, rounded down
    objective_error_s: float  # E: max |q Ẑ(x)/v - Z(x)| over all splits x
    # ŝ, the per-layer drain saving of a zero-bubble schedule (c.layer_drain_saving_s); None
    # under 1F1B / interleaved
    drain_saving_q: np.ndarray | None = None


def fit_recompute_range(c: StageCoefficients, n: np.ndarray, max_recompute: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), int64 arrays of shape (pp, len(n)): the fully recomputed layers r that fit
    stage s with n[j] layers (n: (len,), or (pp, len) per stage: the layer slots of
    cost/pipeline_split.stage_layer_counts) are exactly lo[s, j] <= r <= hi[s, j] (none where
    lo > hi), by the predicate of the module docstring (Exact memory)."""
    n = np.asarray(n, np.int64)
    n = n[None, :] if n.ndim == 1 else n
    r_cap = np.minimum(n, max_recompute) + np.zeros((c.pp, 1), np.int64)
    col = (slice(None), None)
    n_f = (n + np.zeros((c.pp, 1), np.int64)).astype(float).T  # (len, pp), as schedule reads it

    def mem(r: np.ndarray) -> np.ndarray:  # cost.schedule.stage_mem_bytes itself
        return stage_mem_bytes(c, n_f, r.astype(float).T).T

    # the bytes one more recomputed layer frees (linear in r; with the slots' correction too)
    saving = (c.layer_act_bytes - c.layer_ckpt_bytes)[col] + np.zeros(r_cap.shape)
    if c.outer.embedding_in_split or c.outer.loss_in_split:
        saving = mem(np.zeros_like(r_cap)) - mem(np.ones_like(r_cap))
    cap = c.capacity_bytes[col]
    over = mem(np.zeros_like(r_cap)) - cap
    with np.errstate(divide="ignore", invalid="ignore"):
        guess = np.where(saving != 0, np.ceil(over / saving), 0)
    guess = np.nan_to_num(guess, nan=0, posinf=0, neginf=0)
    grows = saving < 0  # recomputing costs memory: the interval is [0, hi]
    end = np.clip(guess, 0, r_cap).astype(np.int64)
    end = np.where(grows, np.clip(np.floor(np.nan_to_num(-over / np.where(grows, -saving, 1))), -1, r_cap)
                   .astype(np.int64), end)
    end = np.where(saving == 0, np.where(over <= 0, 0, r_cap + 1), end)  # r changes nothing

    def fitting(r: np.ndarray) -> np.ndarray:
        return mem(r) <= cap

    # correct the float estimate (off by a step at most, but checked): the end must fit and
    # its outer neighbour must not
    step = np.where(grows, -1, 1)
    while True:
        inside = np.clip(end, 0, r_cap)
        bad = (end >= 0) & (end <= r_cap) & ~fitting(inside)  # the end does not fit: move inward
        outer = end - step
        loose = (outer >= 0) & (outer <= r_cap) & fitting(np.clip(outer, 0, r_cap))
        if not (bad.any() or loose.any()):
            break
        end = np.where(bad, end + step, np.where(loose, outer, end))
    lo = np.where(grows, 0, end)
    hi = np.where(grows, end, r_cap)
    lo = np.where(~grows & (end > r_cap), r_cap + 1, lo)  # not even r = min(n, R) fits
    return lo.astype(np.int64), hi.astype(np.int64)


def relaxed_mem(c: StageCoefficients, mu: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """(b, w, h, K) in quanta of mu bytes rounded the other way from `quantize` (use down,
    saving and capacity up, capacity one quantum more): every split that fits exactly
    satisfies b + w n - h r <= K, so a model with this row is a relaxation of the exact one."""
    b = np.floor((c.stage_mem_bytes - slot_relief_bytes(c)) / mu)
    w = np.floor((c.layer_state_bytes + c.layer_act_bytes) / mu)
    h = np.ceil((c.layer_act_bytes - c.layer_ckpt_bytes) / mu)
    K = np.ceil(c.capacity_bytes / mu) + 1
    return tuple(x.astype(np.int64).tolist() for x in (b, w, h, K))


def exact_memory_points(c: StageCoefficients, v: int, max_recompute: int, mu: int):
    """What a model with `relaxed_mem`'s rows must exclude to accept exactly the splits that fit:
    per stage, (the layer counts n it may hold, v k - offset_s for k chunks of v slots
    (cost/pipeline_split.stage_layer_counts), with which some r fits; the (n, r) the relaxed
    row accepts that do not fit). The second list is short: only splits within a few quanta of
    a capacity differ."""
    b, w, h, K = relaxed_mem(c, mu)
    e, l = c.outer.embedding_in_split, c.outer.loss_in_split
    grid = stage_layer_counts(c.pp, v, c.layers + e + l, e, l)
    lo, hi = fit_recompute_range(c, grid, max_recompute)
    allowed, forbidden = [], []
    for s in range(c.pp):
        n = grid[s]
        r_cap = np.minimum(n, max_recompute)
        need = b[s] + w[s] * n - K[s]  # the relaxed row: h r >= need
        if h[s] > 0:
            rel_lo, rel_hi = np.maximum(0, -(-need // h[s])), r_cap
        elif h[s] < 0:
            rel_lo, rel_hi = np.zeros_like(n), np.minimum(r_cap, need // h[s])
        else:
            rel_lo, rel_hi = np.where(need <= 0, 0, r_cap + 1), r_cap
        ok = lo[s] <= hi[s]
        if (ok & ((lo[s] < rel_lo) | (hi[s] > rel_hi))).any():
            raise AssertionError(f"stage {s}: relaxed_mem rejects a split that fits")
        allowed.append(n[ok].tolist())
        pts = []
        for j in np.flatnonzero(ok & ((rel_lo < lo[s]) | (rel_hi > hi[s]))).tolist():
            pts += [(int(n[j]), x) for x in range(int(rel_lo[j]), int(lo[s, j]))]
            pts += [(int(n[j]), x) for x in range(int(hi[s, j]) + 1, int(rel_hi[j]) + 1)]
        forbidden.append(pts)
    return allowed, forbidden


def time_quantum(objective_ub_s: float) -> float:
    """The smallest 1 ns x 2^j that keeps a scaled objective of at most `objective_ub_s` seconds
    below OBJECTIVE_LIMIT_QUANTA (every model that rounds times to a quantum takes it so)."""
    q = TIME_QUANTUM_S
    while objective_ub_s / q > OBJECTIVE_LIMIT_QUANTA:
        q *= 2
    return q


def quantize(c: StageCoefficients, allow_full_recompute: bool = True) -> QuantizedCoefficients:
    """Round the coefficients to integers: times to nearest, memory use up, capacity down."""
    pp, L, m, v = c.pp, c.layers, c.outer.num_micro_batches, c.outer.virtual_stages
    R = L if allow_full_recompute else 0
    for name in _ARRAYS:
        if not np.all(np.isfinite(getattr(c, name))):
            raise ValueError(f"StageCoefficients.{name} has a non-finite entry: {getattr(c, name)}")

    t_stage_ub = np.abs(c.stage_time_s) + L * np.abs(c.layer_time_s) + R * np.abs(c.recompute_time_s)
    d_stage_ub = np.abs(c.stage_sync_time_s) + L * np.abs(c.layer_sync_time_s)
    q = time_quantum((v * m - 1 + pp) * t_stage_ub.max() + v * d_stage_ub.max())

    mu = MEM_QUANTUM_BYTES
    layer_mem = c.layer_state_bytes + c.layer_act_bytes
    saving = c.layer_act_bytes - c.layer_ckpt_bytes

    def nearest(x: np.ndarray) -> np.ndarray:
        return np.rint(np.asarray(x, float) / q).astype(np.int64)

    multipliers = (v * m - 1) * (1 + L + R) + (pp + L + R) + v * (1 + L)
    drain = None
    if c.layer_drain_saving_s.size:
        # ŝ n enters the pacing term once and the sum once, each within q L (Zero bubble)
        drain = nearest(c.layer_drain_saving_s)
        multipliers += 2 * L
    return QuantizedCoefficients(
        time_quantum_s=q, mem_quantum_bytes=mu, max_recompute=R,
        stage_time_q=nearest(c.stage_time_s), layer_time_q=nearest(c.layer_time_s),
        recompute_time_q=nearest(c.recompute_time_s),
        stage_sync_q=nearest(c.stage_sync_time_s), layer_sync_q=nearest(c.layer_sync_time_s),
        stage_mem_q=np.ceil(c.stage_mem_bytes / mu).astype(np.int64),
        layer_mem_q=np.ceil(layer_mem / mu).astype(np.int64),
        recompute_saving_q=np.floor(saving / mu).astype(np.int64),
        capacity_q=np.floor(c.capacity_bytes / mu).astype(np.int64),
        objective_error_s=q * multipliers / v, drain_saving_q=drain,
    )


