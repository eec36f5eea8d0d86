"""The inner problem of a plan of replica classes: micro-batch counts and layer splits of several
replica classes, optionally over several network scenarios. Shared definition + CP-SAT model.

Sets
    K       replica classes (k), each with x_k replicas and pp_k stages (s)
    Sigma   network scenarios (sigma); memory does not depend on them

Parameters (per scenario and class, a `StageCoefficients` c[sigma][k] with arrays over s)
    a, t, u, e, g, b, w, h, K as in formulations/quantize.py (memory from sigma = 0)
    M       total micro-batches: global_batch / micro_batch
    v       virtual stages (model chunks per stage, interleaved 1F1B; 1: plain 1F1B), shared
    lo_k    fewest micro-batches per replica: pp_k; with v > 1 and several classes 2 pp_k, so
            that memory does not depend on m_k (cost/coefficients.in_flight_micro_batches);
            a pipeline-free class (pp_k = 1) of several whose micro-batches the expert
            all-to-all overlap pairs (`paired`: cost/moe.pairs_unpipelined_micro_batches) 2;
            a lone class (K = 1): 1, or pp_k with v > 1 (its count is fixed by M, and its
            coefficients are priced at that count, as on one group)
    st_k    step of the count: pp_k with v > 1 (Megatron-LM's interleaved schedule needs
            m_k a multiple of pp_k), else 1
    omega   scenario weights ("weighted": expected time) or none ("max": worst case)

Variables
    n_ks in v..L, multiples of v; r_ks in 0..R   layers and fully recomputed layers of stage s of class k;
            with the embedding / loss counted as a layer slot (the outer's flags, v > 1),
            n_ks = v c_ks - o_s, c_ks >= 1 chunks, o_s the slots the first / last stage gives
            them (cost/pipeline_split.slot_offsets); sum_s c_ks = (L + e + l) / v;
            n_k0 >= v d0_k (c.first_chunk_min_layers: an MoE model's dense prefix, priced on
            the class's first stage, must sit in its first model chunk; 1 otherwise)
    m_k  in lo_k..m_max_k, lo_k + st_k j_k       micro-batches per replica of class k
    T_sk >= a + t n_ks + u r_ks           slowest stage of class k in scenario sigma (T_max)
    P_sk  = (m_k - 1/v) T_sk + sum_s (a + t n_ks + u r_ks) / v     one replica's pipeline
            (cost/schedule.pipeline_time_s; v = 1: (m_k - 1) T + sum T, 1F1B)
    Z_s  >= P_sk for all k;  D_s >= e + g n_ks for all k, s   iteration_sigma = Z_s + D_s
    Under a zero-bubble schedule (c.layer_drain_saving_s = s_s per layer, cost/zero_bubble.py)
    P_sk = max_s [(m_k - 1/v) T_sk,s + s_s n_ks / v] + sum_s (T_sk,s - s_s n_ks) / v:
    C6z P >= (m_k - 1/v) T_s + s_s n_s / v per stage, an epigraph that needs no indicator of the
    pacing stage (the minimum of the maximum over stages takes the longest path). A lone class's
    m is fixed by the batch and the rows are linear; with several classes m_k is a decision and
    each row holds the product (v m_k - 1) T_sk,s, kept as C9 keeps (v m_k - 1) T_sk (C9z: CP-SAT
    exact, the MILP the same binary expansion with one y per stage and bit)

Constraints (named alike in both backends: CP-SAT here, the MILP in multiclass_milp.py)
    C1 layers   sum_s n_ks = L (C1_chunks, C1_dense_prefix: the chunk and dense-prefix rules above)
    C2 recompute  r_ks <= n_ks (C2_pattern: with one value of the framework's pattern fixed,
                r_ks its count for n_ks; formulations/recompute_choice.py tries each value)
    C3 mem      b + w n_ks - h r_ks <= K per stage (C3x: the exact-memory exclusions)
    C4 count    m_k = lo_k + st_k j_k
    C5 batch    sum_k x_k m_k = M
    C6 pace     T_sk >= a + t n_ks + u r_ks;  C7 sync  D_s >= e + g n_ks
    C8 pipeline Z_s >= P_sk, with C9 product the term (v m_k - 1) T_sk (CP-SAT: exact; MILP: binary
                expansion of m_k);  C10 worst  W >= Z_s + D_s ("max")
Objective
    "max":      minimise max_sigma (Z_s + D_s)      (robust; one scenario = plain minimum)
    "weighted": minimise sum_sigma omega_sigma (Z_s + D_s)

CP-SAT keeps the product (v m_k - 1) T_sk exact with `add_multiplication_equality`, on
v P_sk (so Z_s is kept in units of q / v). Times are
quantised as in formulations/quantize.py (nearest multiple of q = 1 ns * 2^j, objective kept below
2^40 quanta). Memory is decided exactly (quantize.py, Exact memory): the row b + w n - h r <= K
in 1 KiB quanta rounded the other way (`relaxed_mem`, a relaxation), each n_ks restricted to
the counts with which some r fits, and the few (n_ks, r_ks) the row lets through that do not
fit forbidden (`exact_memory_points`), so CP-SAT accepts exactly the splits that fit. Weights are
rounded to multiples of 2^-16. The returned objective is always re-evaluated exactly
(`evaluate`); the bound is the solver's minus the quantisation error

    E = q * [ max_k ((v m_max_k - 1)(1 + L + R) + pp_k + L + R) / v + 1 + L (+ 2 L / v under a
              zero-bubble schedule: ŝ n in C6z and in the sum) ] * sum_sigma omega^_sigma
        + sum_sigma |omega_sigma - omega^_sigma| * (upper bound of iteration_sigma)

so "optimal" means optimal within `tolerance_s` = 2E.

Determinism. `random_seed` and `num_workers` (1) are fixed and the stop
is `max_deterministic_time` (CP-SAT's work units, about one second each), so the same input
gives the same answer. The wall clock stops it too, at what is left of the time limit (the
planner passes what is left of the command's) plus WALL_GRACE_S, so that a work-unit estimate
far off the clock does not hold the command past its limit; a run stopped by the wall clock is
the only kind that can differ between repeats.

Search. One worker runs with `use_objective_lb_search`. With CP-SAT's default single-worker
search, the objective's lower bound can climb one quantum per conflict (10^9 steps at 1 ns): a
pp = 4, L = 12 model stalled without a solution, and the walk barely advances deterministic
time, so only the backstop ended it. With the objective lower-bound search, 2,600 small random
models and 320 pp = 16, L = 128 models with tight memory were all proved optimal or infeasible,
the slowest in about 1 s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.class_coefficients import iteration_time_s
from paraplan.cost.schedule import first_stage_min_layers, fits
from paraplan.cost import recompute_patterns
from paraplan.cost.pipeline_split import slot_offsets, stage_layer_counts
from paraplan.formulations.quantize import (MEM_QUANTUM_BYTES, exact_memory_points, relaxed_mem,
                                           time_quantum)
from paraplan.formulations.result import SolverError

if TYPE_CHECKING:  # imported where a model is solved (deterministic_solver)
    from ortools.sat.python import cp_model

WEIGHT_SCALE = 2**16
# the wall-clock stop past a deterministic-time limit (docstring, Determinism)
WALL_GRACE_S = 0.25


@dataclass(frozen=True)
class MultiClassProblem:
    """The split problem over replica classes: coefficients, replicas, micro-batches to share."""
    coeffs: tuple[tuple[StageCoefficients, ...], ...]  # [scenario][class]
    replicas: tuple[int, ...]
    total_micro_batches: int
    objective: str = "max"  # "max" | "weighted"
    weights: tuple[float, ...] = ()
    allow_full_recompute: bool = True
    # the per-stage counts the job's framework runs (cost/recompute_patterns.py): one parameter
    # value for every stage of every class
    recompute_pattern: RecomputePattern = RecomputePattern.PER_STAGE
    virtual_stages: int = 1
    # one parameter value of the pattern (its index in recompute_counts), fixing every r_ks
    # as a function of n_ks (C2_pattern); None: the backends choose it
    # (formulations/recompute_choice.py)
    recompute_value: int | None = None
    # Megatron-core's combined 1F1B runs on the pipeline-free classes (lo_k above)
    paired: bool = False

    def __post_init__(self) -> None:
        if self.objective not in ("max", "weighted"):
            raise ValueError(f"objective must be 'max' or 'weighted', got {self.objective!r}")
        if self.objective == "weighted" and len(self.weights) != len(self.coeffs):
            raise ValueError("one weight per scenario is needed for the weighted objective")

    @property
    def classes(self) -> int:
        return len(self.replicas)

    @property
    def layers(self) -> int:
        return self.coeffs[0][0].layers

    def pp(self, k: int) -> int:
        return self.coeffs[0][k].pp

    @property
    def slots(self) -> int:
        """Layer slots of a pipeline: the layers, plus the embedding and the loss where the outer
        counts them (cost/specs.Outer.embedding_in_split / loss_in_split)."""
        o = self.coeffs[0][0].outer
        return self.layers + o.embedding_in_split + o.loss_in_split

    def slot_offsets(self, k: int) -> tuple[int, ...]:
        """Per stage of class k, the slots the embedding and loss take (n_ks = v chunks - it)."""
        o = self.coeffs[0][k].outer
        return slot_offsets(self.pp(k), o.embedding_in_split, o.loss_in_split)

    def recompute_values(self) -> int:
        """How many values the pattern has here (cost/recompute_patterns.parameter_count, with
        bounds shared by the classes, so that a value means the same N or k in every class)."""
        top_c = self.slots // self.virtual_stages - min(self.pp(j) for j in range(self.classes)) + 1
        return recompute_patterns.parameter_count(self.recompute_pattern, self.virtual_stages * top_c, top_c)

    def recompute_counts(self, k: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(counts (pp_k, N), grid (pp_k, N)): the fully recomputed layers of stage s of class k
        holding grid[s, j] layers (j + 1 chunks) under the pattern's value i
        (cost/recompute_patterns.value_counts)."""
        o, v = self.coeffs[0][k].outer, self.virtual_stages
        grid = stage_layer_counts(self.pp(k), v, self.slots, o.embedding_in_split, o.loss_in_split)
        top_c = self.slots // v - min(self.pp(j) for j in range(self.classes)) + 1
        t = recompute_patterns.value_counts(self.recompute_pattern, i, grid.T, v, o.embedding_in_split,
                                            o.loss_in_split, v * top_c, top_c)
        return t.T, grid

    def min_micro_batches(self, k: int) -> int:
        """lo_k of the module docstring."""
        if self.classes == 1:  # a lone class's count is fixed by the batch (solver/space.py)
            return self.pp(k) if self.virtual_stages > 1 else 1
        if self.virtual_stages > 1:
            return 2 * self.pp(k)
        return max(self.pp(k), 2) if self.paired else self.pp(k)

    def micro_batch_step(self, k: int) -> int:
        """st_k of the module docstring."""
        return self.pp(k) if self.virtual_stages > 1 else 1

    def max_micro_batches(self, k: int) -> int:
        lo, st = self.min_micro_batches(k), self.micro_batch_step(k)
        spare = self.total_micro_batches - sum(x * self.min_micro_batches(j)
                                               for j, x in enumerate(self.replicas))
        return lo + st * (max(0, spare) // (self.replicas[k] * st))

    def aggregate(self, per_scenario: list[float]) -> float:
        if self.objective == "max":
            return max(per_scenario)
        return float(sum(w * v for w, v in zip(self.weights, per_scenario)))

    def evaluate(self, m, n, r) -> tuple[float, list[float]]:
        """Exact objective and per-scenario iteration times of a solution."""
        n = [np.asarray(x, float) for x in n]
        r = [np.asarray(x, float) for x in r]
        per = [iteration_time_s(list(cs), list(m), n, r, self.virtual_stages) for cs in self.coeffs]
        return self.aggregate(per), per

    def fits(self, n, r) -> bool:
        return all(bool(fits(c, np.asarray(nk, float), np.asarray(rk, float)))
                   for c, nk, rk in zip(self.coeffs[0], n, r))


@dataclass(frozen=True)
class MultiClassResult:
    """A solved multi-class split: micro-batches, layers and recompute per class, objective."""
    status: str
    micro_batches: tuple[int, ...] | None
    layers_per_stage: tuple[tuple[int, ...], ...] | None
    full_recompute_layers: tuple[tuple[int, ...], ...] | None
    objective_s: float | None
    per_scenario_s: tuple[float, ...] | None
    bound_s: float | None
    wall_time_s: float
    backend: str
    tolerance_s: float  # an "optimal" objective is within this of the true optimum

    @classmethod
    def unsolved(cls, status: str, backend: str, start: float, bound_s: float | None,
                 tolerance_s: float) -> MultiClassResult:
        """A result without a solution (infeasible, cut off or out of time), timed from `start`."""
        return cls(status=status, micro_batches=None, layers_per_stage=None, full_recompute_layers=None,
                   objective_s=None, per_scenario_s=None, bound_s=bound_s,
                   wall_time_s=time.perf_counter() - start, backend=backend, tolerance_s=tolerance_s)


def deterministic_solver(time_limit_s: float, seed: int = 0, wall_limit_s: float | None = None) -> cp_model.CpSolver:
    """A CP-SAT solver set as the module docstring says (Determinism, Search): one worker, a
    fixed seed, the objective lower-bound search, stopped by deterministic time, and by the wall
    clock at `wall_limit_s` (default: `time_limit_s`) + WALL_GRACE_S. formulations/dualpipe.py
    runs its model on the same. OR-Tools is
    imported here, not with the module: the problem record is read by every backend, and the
    default one (the split DP) never needs it (about 0.2 s of start-up, pandas included)."""
    from ortools.sat.python import cp_model
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.random_seed = seed
    prm.num_workers = 1
    prm.max_deterministic_time = time_limit_s
    prm.max_time_in_seconds = max(time_limit_s if wall_limit_s is None else wall_limit_s, 0.0) + WALL_GRACE_S
    prm.use_objective_lb_search = True
    return solver


def solved_status(solver: cp_model.CpSolver, model: cp_model.CpModel, what: str) -> str:
    """Solve `model`: "optimal", "feasible", "infeasible" or "timeout"; a SolverError naming
    `what` (and the model's validation message) on any other CP-SAT status."""
    from ortools.sat.python import cp_model
    code = solver.solve(model)
    statuses = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
                cp_model.INFEASIBLE: "infeasible", cp_model.UNKNOWN: "timeout"}
    if code not in statuses:
        raise SolverError(f"CP-SAT returned {solver.status_name(code)} for {what}: "
                          f"{model.validate() or 'no validation message'}")
    return statuses[code]


def _upper_bounds(p: MultiClassProblem, R: int) -> list[float]:
    """Per scenario, an upper bound of the iteration time of any solution."""
    L = p.layers
    out = []
    for cs in p.coeffs:
        worst_p = max((p.max_micro_batches(k) - 1 + c.pp) * float(
            (np.abs(c.stage_time_s) + L * np.abs(c.layer_time_s) + R * np.abs(c.recompute_time_s)).max())
            for k, c in enumerate(cs))
        worst_d = max(float((np.abs(c.stage_sync_time_s) + L * np.abs(c.layer_sync_time_s)).max()) for c in cs)
        out.append(worst_p + worst_d)
    return out


def _done(p: MultiClassProblem, status, backend, start, bound, tol, m=None, n=None, r=None) -> MultiClassResult:
    if m is None:
        return MultiClassResult.unsolved(status, backend, start, bound, tol)
    if not p.fits(n, r):
        raise SolverError(f"{backend}: solution n={n}, r={r} does not fit memory when re-checked")
    if sum(x * mk for x, mk in zip(p.replicas, m)) != p.total_micro_batches:
        raise SolverError(f"{backend}: micro-batch counts {m} do not add up to {p.total_micro_batches}")
    obj, per = p.evaluate(m, n, r)
    return MultiClassResult(status=status, micro_batches=tuple(m), layers_per_stage=tuple(map(tuple, n)),
                            full_recompute_layers=tuple(map(tuple, r)), objective_s=obj,
                            per_scenario_s=tuple(per), bound_s=bound,
                            wall_time_s=time.perf_counter() - start, backend=backend, tolerance_s=tol)


def _quantisation(p: MultiClassProblem, ub: list[float], R: int) -> tuple[float, list[int], float]:
    """(time quantum q, rounded weights, quantisation error E) of the module docstring."""
    q = time_quantum(max(ub))
    if p.objective == "weighted":
        w_hat = [round(w * WEIGHT_SCALE) for w in p.weights]
        weight_err = sum(abs(w - wh / WEIGHT_SCALE) * u for w, wh, u in zip(p.weights, w_hat, ub))
        w_sum = sum(w_hat) / WEIGHT_SCALE
    else:
        w_hat, weight_err, w_sum = [1] * len(p.coeffs), 0.0, 1.0
    v, L = p.virtual_stages, p.layers
    mult = max((v * p.max_micro_batches(k) - 1) * (1 + L + R) + p.pp(k) + L + R
               for k in range(p.classes)) / v + 1 + L
    if any(c.layer_drain_saving_s.size for cs in p.coeffs for c in cs):
        mult += 2 * L / v  # ŝ n in the pacing term and the sum (quantize.py, Zero bubble)
    return q, w_hat, q * mult * w_sum + weight_err


def _class_split(model, p: MultiClassProblem, k: int, R: int):
    """Class k's variables n, r (per stage) and m, with C1-C4 (layers, chunks, dense prefix,
    recompute, exact memory, micro-batch count); None when a stage holds no count that fits."""
    from ortools.sat.python import cp_model
    c, pp, v, L = p.coeffs[0][k], p.pp(k), p.virtual_stages, p.layers
    allowed, forbidden = exact_memory_points(c, v, R, MEM_QUANTUM_BYTES)
    if not all(allowed):
        return None
    n = [model.new_int_var_from_domain(cp_model.Domain.from_values(allowed[s]), f"n_k{k}_s{s}")
         for s in range(pp)]
    r = [model.new_int_var(0, R, f"r_k{k}_s{s}") for s in range(pp)]
    lo, hi, st = p.min_micro_batches(k), p.max_micro_batches(k), p.micro_batch_step(k)
    m = model.new_int_var(lo, hi, f"m_k{k}")
    if st > 1:  # m_k = lo_k + st_k j_k
        j = model.new_int_var(0, (hi - lo) // st, f"j_k{k}")
        model.add(m == lo + st * j).with_name(f"C4_count_k{k}")
    if v > 1:  # whole chunks of v slots per stage, the embedding / loss taking one each
        off = p.slot_offsets(k)
        for s in range(pp):
            chunks = model.new_int_var(1, p.slots // v, f"chunks_k{k}_s{s}")
            model.add(n[s] == v * chunks - off[s]).with_name(f"C1_chunks_k{k}_s{s}")
    model.add(sum(n) == L).with_name(f"C1_layers_k{k}")
    if first_stage_min_layers(c) > v - p.slot_offsets(k)[0]:  # stage 0's first chunk holds the dense prefix
        model.add(n[0] >= first_stage_min_layers(c)).with_name(f"C1_dense_prefix_k{k}")
    b, wq, h, cap = relaxed_mem(c, MEM_QUANTUM_BYTES)
    for s in range(pp):
        model.add(r[s] <= n[s]).with_name(f"C2_recompute_k{k}_s{s}")
        model.add(b[s] + wq[s] * n[s] - h[s] * r[s] <= cap[s]).with_name(f"C3_mem_k{k}_s{s}")
        if forbidden[s]:
            model.add_forbidden_assignments([n[s], r[s]], forbidden[s]).with_name(f"C3x_mem_k{k}_s{s}")
    if p.recompute_value is not None:  # r_ks = the pattern's count for n_ks
        counts, grid = p.recompute_counts(k, p.recompute_value)
        for s in range(pp):
            pairs = [(int(x), int(y)) for x, y in zip(grid[s], counts[s])
                     if x in allowed[s] and y <= R]
            if not pairs:
                return None
            model.add_allowed_assignments([n[s], r[s]], pairs).with_name(f"C2_pattern_k{k}_s{s}")
    return n, r, m


def _iteration_quanta(model, p: MultiClassProblem, si: int, cs, n, r, m, top: int, q: float):
    """v times scenario si's iteration time in quanta q: Z (the slowest class's pipeline, C6 and
    C8, the product (v m_k - 1) T_max kept exact, C9) plus v D (the gradient sync, C7)."""
    v = p.virtual_stages

    def qt(x) -> list[int]:
        return np.rint(np.asarray(x, float) / q).astype(np.int64).tolist()

    Z = model.new_int_var(0, v * top, f"Z_sc{si}")
    D = model.new_int_var(-top, top, f"D_sc{si}")
    for k, c in enumerate(cs):
        a, t, u = qt(c.stage_time_s), qt(c.layer_time_s), qt(c.recompute_time_s)
        e, g = qt(c.stage_sync_time_s), qt(c.layer_sync_time_s)
        T = [a[s] + t[s] * n[k][s] + u[s] * r[k][s] for s in range(c.pp)]
        T_max = model.new_int_var(0, top, f"T_sc{si}_k{k}")
        for s in range(c.pp):
            model.add(T_max >= T[s]).with_name(f"C6_pace_sc{si}_k{k}_s{s}")
            model.add(D >= e[s] + g[s] * n[k][s]).with_name(f"C7_sync_sc{si}_k{k}_s{s}")
        if c.layer_drain_saving_s.size:  # a zero-bubble schedule (C6z)
            model.add(Z >= _zero_bubble_pace(model, p, si, k, c, T, n[k], m[k], top, qt) + sum(T))
            continue
        m_less = model.new_int_var(v * p.min_micro_batches(k) - 1, v * p.max_micro_batches(k) - 1,
                                   f"m1_sc{si}_k{k}")
        model.add(m_less == v * m[k] - 1)
        prod = model.new_int_var(0, v * p.max_micro_batches(k) * top, f"mT_sc{si}_k{k}")
        model.add_multiplication_equality(prod, [m_less, T_max]).with_name(f"C9_product_sc{si}_k{k}")
        model.add(Z >= prod + sum(T)).with_name(f"C8_pipeline_sc{si}_k{k}")  # v times the pipeline time
    return Z + v * D


def _zero_bubble_pace(model, p: MultiClassProblem, si: int, k: int, c, T, n, m, top: int, qt):
    """v times the pipeline term of a zero-bubble schedule less sum_s T_s (cost/schedule.
    pipeline_time_s): P >= (v m - 1) T_s + ŝ_s n_s for every stage (C6z, the pacing stage's
    path; the minimum of their maximum needs no choice of it), less sum_s ŝ_s n_s. A lone
    class's m is the batch's, so its rows are linear; of several, m_k is a decision and each
    row's (v m_k - 1) T_s is a product kept exact as C9 keeps (v m_k - 1) T_max (C9z)."""
    v = p.virtual_stages
    sav = qt(c.layer_drain_saving_s)
    w = [sav[s] * n[s] for s in range(c.pp)]
    hi_m = p.max_micro_batches(k) if p.classes > 1 else p.total_micro_batches // p.replicas[0]
    pace = model.new_int_var(0, v * hi_m * top + p.layers * max(sav), f"P_sc{si}_k{k}")
    if p.classes == 1:
        vm = v * hi_m
        for s in range(c.pp):
            model.add(pace >= (vm - 1) * T[s] + w[s]).with_name(f"C6z_pace_sc{si}_k{k}_s{s}")
        return pace - sum(w)
    m_less = model.new_int_var(v * p.min_micro_batches(k) - 1, v * hi_m - 1, f"m1z_sc{si}_k{k}")
    model.add(m_less == v * m - 1)
    for s in range(c.pp):
        T_s = model.new_int_var(-top, top, f"Tz_sc{si}_k{k}_s{s}")
        model.add(T_s == T[s])
        prod = model.new_int_var(-v * hi_m * top, v * hi_m * top, f"mTz_sc{si}_k{k}_s{s}")
        model.add_multiplication_equality(prod, [m_less, T_s]).with_name(f"C9z_product_sc{si}_k{k}_s{s}")
        model.add(pace >= prod + w[s]).with_name(f"C6z_pace_sc{si}_k{k}_s{s}")
    return pace - sum(w)


def _add_hint(model, hint: tuple, m, n, r) -> None:
    """hint = (m, n, r), values of the variables of the same names."""
    hm, hn, hr = hint
    for k, mk in enumerate(m):
        model.add_hint(mk, int(hm[k]))
        for s in range(len(n[k])):
            model.add_hint(n[k][s], int(hn[k][s]))
            model.add_hint(r[k][s], int(hr[k][s]))


def solve_multiclass_cpsat(p: MultiClassProblem, time_limit_s: float = 10.0, seed: int = 0,
                           hint: tuple | None = None) -> MultiClassResult:
    """Optimal micro-batch counts and splits of `p` by CP-SAT (one worker, reproducible);
    hint = (m, n, r) warm-starts it. Constraints are named as multiclass_milp._formulate names
    them (C1 layers ... C10 worst), so the two backends' models read alike."""
    from ortools.sat.python import cp_model
    start = time.perf_counter()
    L, Kc, v = p.layers, p.classes, p.virtual_stages
    R = L if p.allow_full_recompute else 0
    ub = _upper_bounds(p, R)
    q, w_hat, E = _quantisation(p, ub, R)
    model = cp_model.CpModel()
    n, r, m = [], [], []
    for k in range(Kc):
        got = _class_split(model, p, k, R)
        if got is None:  # a stage holds no layer count that fits: nothing does
            return _done(p, "infeasible", "cpsat", start, math.inf, 2 * E)
        n.append(got[0])
        r.append(got[1])
        m.append(got[2])
    model.add(sum(x * mk for x, mk in zip(p.replicas, m)) == p.total_micro_batches).with_name("C5_batch")
    iters = [_iteration_quanta(model, p, si, cs, n, r, m, int(math.ceil(ub[si] / q)) + 1, q)
             for si, cs in enumerate(p.coeffs)]
    if p.objective == "max":
        top = max(int(math.ceil(u / q)) + 1 for u in ub)
        W = model.new_int_var(-v * top, 2 * v * top, "worst")
        for si, it in enumerate(iters):
            model.add(W >= it).with_name(f"C10_worst_sc{si}")
        model.minimize(W)
    else:
        model.minimize(sum(wh * it for wh, it in zip(w_hat, iters)))
    scale = q / v / (WEIGHT_SCALE if p.objective == "weighted" else 1)

    if hint is not None:
        _add_hint(model, hint, m, n, r)

    # the wall clock's share: the limit less the seconds spent building the model
    solver = deterministic_solver(time_limit_s, seed, time_limit_s - (time.perf_counter() - start))
    status = solved_status(solver, model, "a multi-class split")
    raw = solver.best_objective_bound
    bound = raw * scale - E if math.isfinite(raw) else None
    if status == "infeasible":
        return _done(p, status, "cpsat", start, math.inf, 2 * E)
    if status == "timeout":
        return _done(p, status, "cpsat", start, bound, 2 * E)
    mv = [solver.value(x) for x in m]
    nv = [[solver.value(x) for x in row] for row in n]
    rv = [[solver.value(x) for x in row] for row in r]
    return _done(p, status, "cpsat", start, bound, 2 * E, mv, nv, rv)
