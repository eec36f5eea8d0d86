"""The MILP backends' modelling calls and runs, shared by the MILP formulations
(formulations/multiclass_milp.py, formulations/dualpipe.py):
CBC through PuLP (`new_model("cbc")`), SCIP or HiGHS through OR-Tools' linear solver wrapper.
A model is built with int_var, real_var, add (named constraints), minimise, and solved by
`run_model`, which returns the backend's status, objective and bound with the error of the bound
as read.

Times stay in seconds and memory in MiB (MEM_UNIT_BYTES; floats), so magnitudes stay within a
few decades of 1. MEM_MARGIN_MIB (1 KiB) below each capacity absorbs the backends' feasibility
tolerances, so that a rounded split re-checks with `cost.schedule.fits`.

Tolerances (used by the formulations' error bounds). The backends accept integers within an
integrality tolerance iota (INTEGRALITY_TOL) and rows within a feasibility tolerance phi
(FEASIBILITY_TOL_S), both at or above the three backends' defaults. CBC runs with ratio
and allowable gaps 0 and cutoff increment CBC_CUTOFF_INCREMENT_S; it logs its objective with
eight decimals (CBC_OBJECTIVE_PRINT_ERROR_S) and a time-limited bound with three
(CBC_BOUND_PRINT_ERROR_S). PuLP's bundled CBC 2.10.3, interrupted by a time limit of about a
millisecond, reports "Pre-processing says infeasible" on feasible pp = 16 models, so a CBC
"infeasible" under a limit below CBC_INFEASIBLE_RECHECK_S is reported unproved ("timeout"):
the run that would confirm it would outlast what is left of the limit (issue 35; turning
preprocessing off instead makes it crash on models with fixed variables).

Memory cuts. The formulations solve with relaxed memory rows and exclude, lazily, each solution
that does not fit by the exact predicate (`solve_with_cuts`: one loop for all of them).
OR-Tools' HiGHS wrapper reports no bound short of optimality (it copies the objective), so a
time-limited HiGHS run has no bound.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass

from paraplan.formulations.result import SolverError

MEM_UNIT_BYTES = 2**20  # MiB: the MILP's memory unit
MEM_MARGIN_MIB = 2**-10  # 1 KiB below each capacity
INTEGRALITY_TOL = 1e-6  # iota: CBC, SCIP and HiGHS default integrality tolerance
FEASIBILITY_TOL_S = 1e-6  # phi: SCIP's default feastol; CBC and HiGHS use 1e-7
CBC_CUTOFF_INCREMENT_S = 1e-9  # CBC's default 1e-5 would prune splits up to 10 us better
CBC_OBJECTIVE_PRINT_ERROR_S = 5e-9  # CBC logs "Objective value:" as %.8f
CBC_BOUND_PRINT_ERROR_S = 5e-4  # ... and "Lower bound:" as %.3f
CBC_REPEATABLE_THREADS = 100  # CBC's "threads 100+n": n threads, repeatable search
CBC_INFEASIBLE_RECHECK_S = 1.0  # the least limit under which a CBC "infeasible" is trusted
BACKENDS = ("cbc", "scip", "highs")
MPSOLVER_UNKNOWN_STATUS = 99  # HiGHS stopped by its limit without a solution (linear_solver.proto)


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


def new_model(backend: str):
    """An empty model with the modelling calls the formulations use (int_var, real_var, add,
    minimise, value), for `backend`: "cbc" (PuLP), "scip" or "highs" (pywraplp)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return _PulpModel() if backend == "cbc" else _LinearSolverModel(backend)


@dataclass(frozen=True)
class CutSolve:
    """What `solve_with_cuts` ends with: the status ("optimal", "feasible", "infeasible",
    "timeout"); the bound, less eps and the error of the bound as read, where "optimal" (inf
    where "infeasible", else None); the tolerance 2 eps + that error; and, where a solution
    fits, what `check` read of it."""

    status: str
    bound_s: float | None
    tolerance_s: float
    values: tuple = ()


def solve_with_cuts(formulate, check, backend: str, deadline: float, what: str) -> CutSolve:
    """Solve formulate(cuts) on `backend` until its solution fits, within `deadline`
    (time.perf_counter()). formulate(cuts) -> (model, eps, ...): a new_model model holding the
    cuts, and the error its tolerances can put in the objective (seconds; each formulation's
    docstring derives it); check(that tuple) reads the solution: (values, new cuts), the new
    cuts excluding what does not fit ([]: it fits). Each round solves again with every cut so
    far; the relaxed rows hold every solution that fits, so the first one that fits is optimal
    when its solve proved its optimum. A CBC "infeasible" under less than
    CBC_INFEASIBLE_RECHECK_S left is unproved (module docstring): "timeout". `what` names the
    model in errors."""
    cuts: list = []
    while True:
        left = max(deadline - time.perf_counter(), 1e-3)
        built = formulate(cuts)
        status, _, bound, read_error = run_model(built[0], backend, left, 1, what)
        tol = 2 * built[1] + read_error
        if status == "infeasible" and backend == "cbc" and left < CBC_INFEASIBLE_RECHECK_S:
            status = "timeout"
        if status in ("infeasible", "timeout"):
            return CutSolve(status, math.inf if status == "infeasible" else None, tol)
        values, over = check(built)
        if not over:
            proved = status == "optimal" and bound is not None and math.isfinite(bound)
            return CutSolve(status, bound - built[1] - read_error if proved else None, tol, values)
        if time.perf_counter() >= deadline:
            return CutSolve("timeout", None, tol)
        cuts += over


def int_value(api, x, backend: str, what: str) -> int:
    """Variable x's value in the solution of `api`, rounded to an integer."""
    v = api.value(x)
    if v is None:
        raise SolverError(f"backend {backend!r} gave no value for {x} in {what}")
    return int(round(v))


def run_model(api, backend: str, time_limit_s: float, threads: int = 1, what: str = "the model"):
    """Solve a model built on new_model(backend). Returns (status, backend objective, backend
    bound, error of the bound as read), seconds; objective and bound are None where the backend
    gave none, the bound math.inf when infeasible. `what` names the model in errors."""
    if backend == "cbc":
        return _run_cbc(api, time_limit_s, threads)
    return _run_linear_solver(api, backend, time_limit_s, threads, what)


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
