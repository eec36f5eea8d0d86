"""What every planner result shares: statuses, the one result record (`SolveResult`, returned
by solver/solve.py for a plan of either shape) and the flat coefficient table (for the report's frontier and the reason an instance fits nowhere).

The search itself is solver/search.py, which plans a flat instance as a one-group cluster
(solver/solve.py). Complete coefficient tables are cached per instance (TABLE_CACHE_SIZE), so a
report and an infeasibility reason of one instance price it once.

A returned plan is re-simulated by cost/simulate.py (solver/search.check_resimulation); a
mismatch with the objective beyond the quantisation tolerance raises `ResimulationMismatch`: it
would be a bug, never a user error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from paraplan.cost.coefficients import Placement, StageCoefficients, build, homogeneous_placement
from paraplan.cost.plan_specs import Plan
from paraplan.cost.simulate import Breakdown
from paraplan.cost.specs import Instance
from paraplan.cost.units import bytes_to_gib
from paraplan.solver import partition_plans
from paraplan.solver.bounds import one_class
from paraplan.solver.space import one_group_outers

OPTIMAL, FEASIBLE, INFEASIBLE, TIMEOUT = "optimal", "feasible", "infeasible", "timeout"
CUTOFF = "cutoff"  # an inner result: no split beats the cutoff (formulations/result.py)
# Relative tolerance under which two iteration times count as equal (ties, pruning, checks).
REL_TOL = 1e-9


class ResimulationMismatch(AssertionError):
    """The solver's objective and the simulator disagree: a bug in cost/ or formulations/."""


@dataclass(frozen=True)
class Ranked:
    """One of `--top`'s plans (SolveResult.ranked), re-simulated once."""

    plan: Plan
    objective_s: float  # the plan's objective (its iteration time on the nominal network)
    breakdown: Breakdown
    quantile_s: float  # what the plans are ranked by: objective_s at search.objective


@dataclass(kw_only=True)
class SolveResult:
    """What the one search returns (solve, search.search), for a plan of either shape: its
    status, plan, objective, bound and how the declared space was accounted for."""

    status: str
    # the plan: one class on every GPU of a flat cluster, any classes on a cluster of node groups
    plan: Plan | None
    # which network objective was aggregated (nominal, robust, expected) and its value for the
    # plan: the iteration time on the nominal network
    objective: str
    objective_s: float | None
    bound_s: float | None
    solve_time_s: float
    backend: str
    outer_configs: int
    plans_total: int  # complete plans in the declared space
    per_scenario_s: tuple[float, ...] | None = None
    scenario_names: tuple[str, ...] = ()
    breakdown: Breakdown | None = None
    # the `winners` best plans of distinct candidates, best first: (objective s, Plan)
    # from search.search, Ranked (re-simulated) from solve
    ranked: tuple = ()
    # what was minimised: objective_s times the plan's search.objective factor
    # (cost/trust.objective_factor; objective_s itself for `mean`); bound_s bounds this value
    quantile_s: float | None = None
    # outer configurations priced (cost/coefficients.build); the others were pruned by the
    # bound read before pricing (solver/bounds/unpriced.py), counted in pruned_by_bound
    priced: int = 0
    solved: int = 0
    pruned_by_bound: int = 0
    pruned_by_memory: int = 0
    # (outer, layer plan) pairs, or layer-plan combinations, dominated (solver/class_partitions.py)
    pruned_by_dominance: int = 0
    inner_infeasible: int = 0
    unresolved: int = 0
    tolerance_s: float = 0.0
    reason: str = ""
    log: list[str] = field(default_factory=list)

    @property
    def iter_time_s(self) -> float | None:
        """The plan's predicted iteration time (docs/python-api.md): objective_s, which is it
        on the nominal network."""
        return self.objective_s

    @property
    def gap(self) -> float | None:
        value = self.objective_s if self.quantile_s is None else self.quantile_s
        if value is None or self.bound_s is None:
            return None
        return max(0.0, (value - self.bound_s) / value)


# how many configurations are built or bounded between two looks at the clock
CLOCK_EVERY = 64


# the last complete tables, by instance: `verify`, `--sensitivity`'s unchanged runs and repeated
# plans of one instance price it once (StageCoefficients are frozen, and nobody writes into
# their arrays)
TABLE_CACHE_SIZE = 2
_TABLES: dict[Instance, list[StageCoefficients]] = {}


def coefficient_table(inst: Instance, deadline: float | None = None) -> list[StageCoefficients]:
    """Per-stage coefficients of every outer configuration (or (outer, layer plan) pair). With a
    deadline (time.perf_counter() value) the building stops there: the list is then a prefix.
    Complete tables are cached per instance."""
    if inst in _TABLES:
        return _TABLES[inst]
    table, whole = _build_table(inst, deadline)
    if whole:
        if len(_TABLES) >= TABLE_CACHE_SIZE:
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[inst] = table
    return table


def _build_table(inst: Instance, deadline: float | None) -> tuple[list[StageCoefficients], bool]:
    """The table and whether it is whole (the deadline did not stop it)."""
    reserve = inst.search.memory_reserve_bytes
    outers = one_group_outers(inst)
    if partition_plans.enabled(inst):  # one entry per (outer, non-dominated layer plan)
        return partition_plans.partition_coefficients(inst, outers, reserve, deadline=deadline)
    table = []
    # configurations differing only in micro-batching, modes or ZeRO share their placement
    # (homogeneous_placement reads only the degrees, ep and etp included, and whether the pipeline
    # wraps around)
    placements: dict[tuple, Placement] = {}
    for i, o in enumerate(outers):
        if deadline is not None and i % CLOCK_EVERY == 0 and time.perf_counter() > deadline:
            return table, False
        where = (o.tp, o.pp, o.dp, o.cp, o.virtual_stages > 1, o.ep, o.etp)
        if where not in placements:
            placements[where] = homogeneous_placement(inst.cluster.one_group, o)
        table.append(build(inst, o, reserve_bytes=reserve, placement=placements[where]))
    return table, True


def infeasible_reason(inst: Instance, coeffs: list[StageCoefficients]) -> str:
    if not coeffs:
        return ("the declared space is empty: no tp*pp*dp*cp factorisation of "
                f"{inst.cluster.num_gpus} GPUs satisfies the search constraints and divides the"
                f" global batch {inst.job.global_batch}")
    best = min(coeffs, key=one_class.min_peak_mem_bytes)
    o = best.outer
    need = one_class.min_peak_mem_bytes(best)
    return (f"no plan fits memory: the smallest peak need found is {bytes_to_gib(need):.1f} GiB per GPU"
            f" (tp={o.tp}, pp={o.pp}, cp={o.cp}, dp={o.dp}, micro_batch={o.micro_batch}, zero={o.zero},"
            f" every layer fully recomputed); {inst.cluster.gpu.name} has"
            f" {bytes_to_gib(best.capacity_bytes[0]):.1f} GiB usable")


def dualpipe_infeasible_reason(inst: Instance) -> str:
    """infeasible_reason for a DualPipe job, priced by cost/dualpipe.Terms (its own memory,
    which the 1F1B coefficients of `coefficient_table` do not price): the smallest device
    memory of the even split with every layer recomputed over the configurations DualPipe runs."""
    from paraplan.cost import dualpipe
    outers = one_group_outers(inst)
    if not outers:
        return infeasible_reason(inst, [])
    reserve = inst.search.memory_reserve_bytes

    def need(o) -> tuple[float, float]:
        t = dualpipe.terms(inst, o, reserve_bytes=reserve)
        n = one_class.even_split(inst.model.layers, o.pp, 1)
        return float(t.mem_bytes(n, n).max()), float(t.coeffs.capacity_bytes.min())

    needs = [(need(o), o) for o in outers]
    ((peak, capacity), o) = min(needs, key=lambda x: x[0][0])
    return (f"no plan fits memory: the smallest peak need found under DualPipe is {bytes_to_gib(peak):.1f}"
            f" GiB per GPU (tp={o.tp}, pp={o.pp}, cp={o.cp}, dp={o.dp}, micro_batch={o.micro_batch},"
            f" zero={o.zero}, every layer fully recomputed); {inst.cluster.gpu.name} has"
            f" {bytes_to_gib(capacity):.1f} GiB usable")
