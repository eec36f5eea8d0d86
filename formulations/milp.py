"""MILP formulation of the layer split of one outer configuration (CBC via PuLP; SCIP, HiGHS via
OR-Tools' linear solver wrapper).

Sets
    S = {0, ..., pp-1}   pipeline stages

Parameters (`cost.coefficients.StageCoefficients`; arrays of shape (pp,), indexed by s)
    L        layers                         transformer layers to place (c.layers)
    m        micro-batches per iteration    (c.outer.num_micro_batches)
    v        model chunks per stage         interleaved 1F1B (c.outer.virtual_stages); v = 1 is 1F1B
    a_s  [s]    stage_time_s          fixed time of stage s per micro-batch
    t_s  [s]    layer_time_s          one layer, one micro-batch, forward + backward
    u_s  [s]    recompute_time_s      extra time of one fully recomputed layer
    e_s  [s]    stage_sync_time_s     fixed time after the last backward (sync, optimizer)
    g_s  [s]    layer_sync_time_s     the same, per layer
    b_s  [MiB]  stage_mem_bytes / MEM_UNIT_BYTES
    w_s  [MiB]  (layer_state_bytes + layer_act_bytes) / MEM_UNIT_BYTES
    h_s  [MiB]  (layer_act_bytes - layer_ckpt_bytes) / MEM_UNIT_BYTES   saved per recomputed layer
    K_s  [MiB]  capacity_bytes / MEM_UNIT_BYTES - MEM_MARGIN_MIB
    R        L when full recompute is allowed, else 0
    Times stay in seconds and memory in MiB (floats), so magnitudes stay within a few decades of 1.
    MEM_MARGIN_MIB (1 KiB) absorbs the backends' feasibility tolerances, so that the rounded
    split re-checks with `cost.schedule.fits`; a split within 1 KiB of a capacity is rejected.

Variables
    k_s ∈ Z, 1 <= k_s <= max(1, ⌊L/v⌋)   layers per model chunk on stage s; n_s = v k_s layers
    r_s ∈ Z, 0 <= r_s <= R               fully recomputed layers on stage s
    T_max ∈ R  [s]                       slowest stage time per micro-batch
    D_max ∈ R  [s]                       slowest post-backward time

Objective (the iteration time, cost/schedule.py)
    minimise  (m - 1/v) T_max + (1/v) Σ_s (a_s + v k_s t_s + r_s u_s) + D_max

Constraints
    C1_layers          Σ_s v k_s = L
    C2_recompute_s{s}  r_s <= v k_s
    C3_mem_s{s}        b_s + v k_s w_s - r_s h_s <= K_s
    C4_pace_s{s}       T_max >= a_s + v k_s t_s + r_s u_s
    C5_sync_s{s}       D_max >= e_s + v k_s g_s

After the solve, k and r are rounded to integers, the split is re-checked with
`cost.schedule.fits` and its objective re-evaluated with `cost.schedule.iteration_time_s`.

Tolerance. The backends accept k, r within an integrality tolerance iota of an integer and rows
within a feasibility tolerance phi (seconds in C4, C5). A solver's objective and bound can hence
sit below the true iteration time of the same split by at most

    eps = iota * Σ_s [ m (v |t_s| + [R > 0] |u_s|) + v |g_s| ] + phi * (m - 1/v + 1)

(`objective_tolerance_s`; iota = INTEGRALITY_TOL, phi = FEASIBILITY_TOL_S, both at or above the
three backends' defaults), and bound_s = (backend bound) - eps. "optimal" requires the backend to
report optimality with a zero gap of its own (|objective - bound| <= OPTIMAL_REL_TOL *
max(1, |objective|)); then objective_s - bound_s <= 2 eps + CBC_OBJECTIVE_PRINT_ERROR_S +
OPTIMAL_REL_TOL * |objective_s| (`optimal_gap_tolerance_s`). CBC runs with ratio and allowable
gaps 0 and cutoff increment CBC_CUTOFF_INCREMENT_S; it logs a time-limited bound with three
decimals, so that bound is lowered by a further CBC_BOUND_PRINT_ERROR_S. PuLP's bundled CBC
2.10.3, interrupted by a time limit of about a millisecond, reports "Pre-processing says
infeasible" on feasible pp = 16 models, so a CBC "infeasible" under a limit below
CBC_INFEASIBLE_RECHECK_S is confirmed by a second run with that limit (turning preprocessing off
instead makes it crash on models with fixed variables). OR-Tools' HiGHS wrapper
reports no bound short of optimality (it copies the objective), so a time-limited HiGHS result
has bound_s = None.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
import warnings

import numpy as np

from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.schedule import fits, iteration_time_s
from paraplan.formulations.result import SolverError, SplitResult

MEM_UNIT_BYTES = 2**20  # MiB: the MILP's memory unit
MEM_MARGIN_MIB = 2**-10  # 1 KiB below each capacity
OPTIMAL_REL_TOL = 1e-9
INTEGRALITY_TOL = 1e-6  # iota: CBC, SCIP and HiGHS default integrality tolerance
FEASIBILITY_TOL_S = 1e-6  # phi: SCIP's default feastol; CBC and HiGHS use 1e-7
ROUNDING_SANITY_TOL = 1e-4  # a backend value farther than this from an integer is a failure
CBC_CUTOFF_INCREMENT_S = 1e-9  # CBC's default 1e-5 would prune splits up to 10 us better
CBC_OBJECTIVE_PRINT_ERROR_S = 5e-9  # CBC logs "Objective value:" as %.8f
CBC_BOUND_PRINT_ERROR_S = 5e-4  # ... and "Lower bound:" as %.3f
CBC_REPEATABLE_THREADS = 100  # CBC's "threads 100+n": n threads, repeatable search
CBC_INFEASIBLE_RECHECK_S = 1.0  # time limit of the run that confirms a CBC "infeasible"
BACKENDS = ("cbc", "scip", "highs")
MPSOLVER_UNKNOWN_STATUS = 99  # HiGHS stopped by its limit without a solution (linear_solver.proto)


def objective_tolerance_s(c: StageCoefficients, allow_full_recompute: bool = True) -> float:
    """eps of the module docstring: how far a backend's objective or bound may sit below the
    true iteration time because of its integrality and feasibility tolerances."""
    m, v = c.outer.num_micro_batches, c.outer.virtual_stages
    u = np.abs(c.recompute_time_s) if allow_full_recompute else 0.0
    per_var = m * (v * np.abs(c.layer_time_s) + u) + v * np.abs(c.layer_sync_time_s)
    return float(INTEGRALITY_TOL * per_var.sum() + FEASIBILITY_TOL_S * (m - 1 / v + 1))


def optimal_gap_tolerance_s(c: StageCoefficients, objective_s: float,
                            allow_full_recompute: bool = True) -> float:
    """Largest objective_s - bound_s of an "optimal" result; also how far its objective_s may
    sit above the true optimum."""
    return (2 * objective_tolerance_s(c, allow_full_recompute) + CBC_OBJECTIVE_PRINT_ERROR_S
            + OPTIMAL_REL_TOL * abs(objective_s))


class _PulpModel:
    """The few modelling calls the formulation needs, on a PuLP problem (solved by CBC)."""

    def __init__(self) -> None:
        import pulp

        self.pulp = pulp
        self.prob = pulp.LpProblem("layer_split", pulp.LpMinimize)

    def int_var(self, lb: int, ub: int, name: str):
        return self.prob.add_variable(name, lb, ub, cat=self.pulp.LpInteger)

    def real_var(self, name: str, lb: float | None = None):
        return self.prob.add_variable(name, lb)

    def add(self, constraint, name: str) -> None:
        self.prob += constraint, name

    def value(self, x) -> float | None:
        return x.value()

    def minimise(self, objective) -> None:
        self.prob.setObjective(objective)


class _LinearSolverModel:
    """The same calls on an OR-Tools `pywraplp.Solver` (SCIP or HiGHS)."""

    def __init__(self, backend: str) -> None:
        from ortools.linear_solver import pywraplp

        self.pywraplp = pywraplp
        self.solver = pywraplp.Solver.CreateSolver(backend.upper())
        if self.solver is None:
            raise SolverError(f"backend {backend!r}: this OR-Tools build has no {backend.upper()} solver")
        self.solver.SuppressOutput()

    def int_var(self, lb: int, ub: int, name: str):
        return self.solver.IntVar(lb, ub, name)

    def real_var(self, name: str, lb: float | None = None):
        inf = self.solver.infinity()
        return self.solver.NumVar(-inf if lb is None else lb, inf, name)

    def add(self, constraint, name: str) -> None:
        self.solver.Add(constraint, name)

    def value(self, x) -> float:
        return x.solution_value()

    def minimise(self, objective) -> None:
        self.solver.Minimize(objective)


def _formulate(api, c: StageCoefficients, allow_full_recompute: bool):
    """Build the model of the module docstring on `api`; returns the variables k, r."""
    pp, L, m, v = c.pp, c.layers, c.outer.num_micro_batches, c.outer.virtual_stages
    R = L if allow_full_recompute else 0
    a, t, u = c.stage_time_s.tolist(), c.layer_time_s.tolist(), c.recompute_time_s.tolist()
    e, g = c.stage_sync_time_s.tolist(), c.layer_sync_time_s.tolist()
    b = (c.stage_mem_bytes / MEM_UNIT_BYTES).tolist()
    w = ((c.layer_state_bytes + c.layer_act_bytes) / MEM_UNIT_BYTES).tolist()
    h = ((c.layer_act_bytes - c.layer_ckpt_bytes) / MEM_UNIT_BYTES).tolist()
    K = (c.capacity_bytes / MEM_UNIT_BYTES - MEM_MARGIN_MIB).tolist()
    S = range(pp)

    k = [api.int_var(c.first_chunk_min_layers if s == 0 else 1, max(1, L // v), f"k_s{s}")
         for s in S]
    r = [api.int_var(0, R, f"r_s{s}") for s in S]
    T_max = api.real_var("T_max")
    D_max = api.real_var("D_max")
    T = [a[s] + t[s] * v * k[s] + u[s] * r[s] for s in S]

    api.add(sum(v * k[s] for s in S) == L, "C1_layers")
    for s in S:
        api.add(r[s] <= v * k[s], f"C2_recompute_s{s}")
        api.add(b[s] + w[s] * v * k[s] - h[s] * r[s] <= K[s], f"C3_mem_s{s}")
        api.add(T_max >= T[s], f"C4_pace_s{s}")
        api.add(D_max >= e[s] + g[s] * v * k[s], f"C5_sync_s{s}")
    api.minimise((m - 1 / v) * T_max + (1 / v) * sum(T) + D_max)
    return k, r


def new_model(backend: str):
    """An empty model with the modelling calls the formulations use (int_var, real_var, add,
    minimise, value), for `backend`: "cbc" (PuLP), "scip" or "highs" (pywraplp)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return _PulpModel() if backend == "cbc" else _LinearSolverModel(backend)


def run_model(api, backend: str, time_limit_s: float, threads: int = 1, what: str = "the model"):
    """Solve a model built on new_model(backend). Returns (status, backend objective, backend
    bound, error of the bound as read), seconds; objective and bound are None where the backend
    gave none, the bound math.inf when infeasible. `what` names the model in errors."""
    if backend == "cbc":
        return _run_cbc(api, time_limit_s, threads)
    return _run_linear_solver(api, backend, time_limit_s, threads, what)


def _solve_cbc(c: StageCoefficients, allow_full_recompute: bool, time_limit_s: float, threads: int):
    """Returns (status, k values, r values, backend objective, backend bound, error of the
    bound as read), seconds; the values are None where the backend gave none."""
    api = _PulpModel()
    k, r = _formulate(api, c, allow_full_recompute)
    status, objective, bound, read_error = _run_cbc(api, time_limit_s, threads)
    if status not in ("optimal", "feasible"):
        return status, None, None, None, bound, read_error
    return status, [x.value() for x in k], [x.value() for x in r], objective, bound, read_error


def _run_cbc(api: _PulpModel, time_limit_s: float, threads: int):
    pulp = api.pulp
    tmp = tempfile.mkdtemp(prefix="paraplan-cbc-")
    try:
        log_path = os.path.join(tmp, "cbc.log")
        # CBC's "threads 1" still runs its threaded search (it hung on a pp = 1 model in 1 run of
        # 100); serial is the default 0, and 100 + n is CBC's repeatable n-thread search.
        cbc_threads = None if threads == 1 else CBC_REPEATABLE_THREADS + threads
        with warnings.catch_warnings():  # the bundled binary goes away in PuLP 4 (pulp[cbc] then)
            warnings.filterwarnings("ignore", "PULP_CBC_CMD is deprecated", DeprecationWarning)
            cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=cbc_threads, gapRel=0,
                                    gapAbs=0, keepFiles=False, logPath=log_path,
                                    options=[f"increment {CBC_CUTOFF_INCREMENT_S}"])
        cmd.tmpDir = tmp
        if not cmd.available():
            raise SolverError(f"backend 'cbc': PuLP's CBC binary {cmd.path} is not executable")
        try:
            api.prob.solve(cmd)
        except pulp.PulpSolverError as err:
            raise SolverError(f"backend 'cbc' failed: {err}") from err
        with open(log_path) as f:
            log = f.read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def logged(label: str) -> float | None:
        found = re.search(rf"^{label}:\s+(\S+)", log, re.MULTILINE)
        # CBC's log leaves out the objective's constant
        return float(found.group(1)) + api.prob.objective.constant if found else None

    status, solution = api.prob.status, api.prob.sol_status
    if "Result - Optimal solution found" in log and solution == pulp.LpSolutionOptimal:
        objective = logged("Objective value")
        if objective is None:
            raise SolverError(f"backend 'cbc': no objective in the log of an optimal run: {log[-300:]!r}")
        return "optimal", objective, objective, CBC_OBJECTIVE_PRINT_ERROR_S
    bound = logged("Lower bound")
    if solution == pulp.LpSolutionIntegerFeasible:
        return "feasible", logged("Objective value"), bound, CBC_BOUND_PRINT_ERROR_S
    if status == pulp.LpStatusInfeasible:
        return "infeasible", None, math.inf, 0.0
    if status == pulp.LpStatusNotSolved and "No feasible solution found" in log:
        return "timeout", None, bound, CBC_BOUND_PRINT_ERROR_S
    raise SolverError(f"backend 'cbc': unexpected outcome status={pulp.LpStatus[status]}, "
                      f"solution={pulp.LpSolution[solution]}; log tail: {log[-300:]!r}")


def _solve_linear_solver(c: StageCoefficients, allow_full_recompute: bool, time_limit_s: float,
                         threads: int, backend: str):
    """The same as _solve_cbc, through pywraplp (SCIP or HiGHS)."""
    api = _LinearSolverModel(backend)
    k, r = _formulate(api, c, allow_full_recompute)
    status, objective, bound, read_error = _run_linear_solver(
        api, backend, time_limit_s, threads, f"the layer split (pp={c.pp}, L={c.layers})")
    if status not in ("optimal", "feasible"):
        return status, None, None, None, bound, read_error
    return (status, [x.solution_value() for x in k], [x.solution_value() for x in r], objective,
            bound, read_error)


def _run_linear_solver(api: _LinearSolverModel, backend: str, time_limit_s: float, threads: int,
                       what: str):
    solver, pywraplp = api.solver, api.pywraplp
    solver.SetTimeLimit(max(1, math.ceil(time_limit_s * 1000)))
    if not solver.SetNumThreads(threads):
        raise SolverError(f"backend {backend!r} does not accept threads={threads}")
    if backend == "scip":
        specific = "limits/gap = 0\nlimits/absgap = 0"
    else:  # OR-Tools' HiGHS wrapper ignores MPSolverParameters; the string is passed to HiGHS
        specific = f"mip_rel_gap=0\nmip_abs_gap=0\nthreads={threads}\noutput_flag=false"
    accepted = solver.SetSolverSpecificParametersAsString(specific)
    if backend == "scip" and not accepted:  # the HiGHS wrapper always answers False (see above)
        raise SolverError(f"backend 'scip' rejected the parameters {specific!r}")
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(params.RELATIVE_MIP_GAP, 0.0)
    code = solver.Solve(params)
    ran_to_limit = solver.WallTime() >= 0.5 * time_limit_s * 1000
    if code in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        objective = solver.Objective().Value()
        bound = solver.Objective().BestBound()
        if code == pywraplp.Solver.FEASIBLE and backend == "highs":
            bound = math.nan  # the wrapper reports the objective as the bound
        status = "optimal" if code == pywraplp.Solver.OPTIMAL else "feasible"
        return status, objective, bound if math.isfinite(bound) else None, 0.0
    if code == pywraplp.Solver.INFEASIBLE:
        return "infeasible", None, math.inf, 0.0
    if code in (pywraplp.Solver.NOT_SOLVED, MPSOLVER_UNKNOWN_STATUS) and ran_to_limit:
        return "timeout", None, None, 0.0
    raise SolverError(f"backend {backend!r} returned MPSolver status {code} after {solver.WallTime()} ms "
                      f"of a {time_limit_s} s limit (not optimal, feasible, infeasible or timed out) "
                      f"for {what}")


def solve_split_milp(c: StageCoefficients, allow_full_recompute: bool = True,
                     time_limit_s: float = 10.0, threads: int = 1, backend: str = "cbc") -> SplitResult:
    """Best layer split (n_s, r_s) of `c` by MILP; see the module docstring for the model.

    backend: "cbc" (PuLP's bundled CBC, one temporary directory per run), "scip" or "highs"
    (OR-Tools' pywraplp). time_limit_s is wall-clock.
    """
    start = time.perf_counter()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if threads < 1 or time_limit_s <= 0:
        raise ValueError(f"threads must be >= 1 and time_limit_s > 0, got {threads}, {time_limit_s}")
    if backend == "cbc":
        status, k_val, r_val, objective, raw_bound, read_error = _solve_cbc(
            c, allow_full_recompute, time_limit_s, threads)
        if status == "infeasible" and time_limit_s < CBC_INFEASIBLE_RECHECK_S:
            status, k_val, r_val, objective, raw_bound, read_error = _solve_cbc(
                c, allow_full_recompute, CBC_INFEASIBLE_RECHECK_S, threads)
    else:
        status, k_val, r_val, objective, raw_bound, read_error = _solve_linear_solver(
            c, allow_full_recompute, time_limit_s, threads, backend)
    eps = objective_tolerance_s(c, allow_full_recompute)
    bound = raw_bound
    if bound is not None and math.isfinite(bound):
        bound = raw_bound - read_error - eps

    def done(status, n, r, objective_s) -> SplitResult:
        return SplitResult(status=status, layers_per_stage=n, full_recompute_layers=r,
                           objective_s=objective_s, bound_s=bound,
                           wall_time_s=time.perf_counter() - start, backend=backend, quantum_s=0.0)

    if k_val is None:
        return done(status, None, None, None)

    values = np.array(k_val + r_val, float)
    if not np.all(np.abs(values - np.rint(values)) <= ROUNDING_SANITY_TOL):
        raise SolverError(f"backend {backend!r} returned non-integral k={k_val}, r={r_val}")
    v = c.outer.virtual_stages
    n = tuple(v * int(x) for x in np.rint(k_val))
    r = tuple(int(x) for x in np.rint(r_val))
    if not fits(c, np.array(n), np.array(r)):
        raise SolverError(f"backend {backend!r} split n={n}, r={r} does not fit after re-checking with "
                          f"cost.schedule.fits (beyond the {MEM_MARGIN_MIB} MiB margin)")
    objective_s = float(iteration_time_s(c, np.array(n), np.array(r)))
    if objective is not None and abs(objective_s - objective) > eps + OPTIMAL_REL_TOL * abs(objective_s):
        raise SolverError(f"backend {backend!r} reports objective {objective!r} s for n={n}, r={r}, "
                          f"cost.schedule gives {objective_s!r} s (tolerance {eps:.3g} s)")
    if status == "optimal" and not objective - raw_bound <= OPTIMAL_REL_TOL * max(1.0, abs(objective)):
        status = "feasible"  # reported optimal without a zero gap of its own
    return done(status, n, r, objective_s)
