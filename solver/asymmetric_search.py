"""An asymmetric pipeline (search.asymmetric_pipelines) as a node of the one search
(solver/search.py): its pricing, its bound and the search of its layer split.

Every asymmetric pipeline of the declared space (solver/asymmetric_space.py) is a node of the
planner's one branch and bound, beside the symmetric configurations, sharing their heap, their
incumbent (the K best plans in hand, search.Winners) and their tie rule: it is priced here
(`priced`: cost/asymmetric.coefficients) and keyed by cost/asymmetric.lower_bound_s, at most
the step time of each of its splits, and its split is searched (`best_plan`) only when the
search reaches that bound and it can still beat the K-th plan in hand, as a symmetric
configuration's split is solved (the split DP, CP-SAT or the MILP) only then.

The split of one pipeline: the step time is S + max_s (m_s - 1) T_s + max_s D_s with S = sum_s
T_s (cost/asymmetric.py's max_s [m_s T_s + S - T_s] rewritten), every term non-decreasing as
stages are added. A depth-first search chooses (n_s, r_s) stage by stage; the value of the
stages chosen so far plus each stage left at its least time (one layer, no recompute: S grows
by it, (m_s - 1) T_s and the sync can only add) is at most the value of every completion, so a
branch whose value is not below the best is cut. A stage whose memory does not fit is skipped.
With a framework's recompute pattern (one parameter for every stage) the search runs once per
parameter value. Exact: the same (split, recompute) rows exhaustive search lists
(solver/exhaustive.exhaustive_asymmetric), with cuts that only drop rows that cannot win.

Under a quantile objective (search.objective pNN) a pipeline is priced as search.problem_of
prices a configuration at the search's memory tier (solver/memory_tiers.py): every time scaled
by the objective's factor of the pipeline there (cost/trust.objective_factor_of: the GPU types
of its stages, its ZeRO stage, cp, pp and the cluster's GPU count, at the tier's fill) and each
stage's capacity capped at the tier's fill (cost/objective.scaled_times, capped_memory). The
step time is a sum of the scaled times with integer multiples, so the scaled step time is the
factor times the unscaled one, and the factor times lower_bound_s bounds every split's: the
relaxation and the tiers of memory_tiers.search_tiers read a pipeline as any configuration.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from paraplan.cost.asymmetric import AsymmetricCoefficients, coefficients, lower_bound_s, plan_of, symmetric_twin
from paraplan.cost.errors import InstanceError
from paraplan.cost.objective import capped_memory, scaled_times
from paraplan.cost.plan_specs import ClassOuter, Plan
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.specs import Instance
from paraplan.cost.trust import objective_factor_of
from paraplan.solver.asymmetric_space import asymmetric_outers, count_outers, recompute_choices
from paraplan.solver.class_layouts import MAX_LAYOUTS

# most layer splits (without recompute counts) the asymmetric pipelines may hold: exhaustive
# search's default cap (solver/exhaustive.DEFAULT_MAX_CANDIDATES), which its agreement tests
# stay far below; the search lists and prices every pipeline, and the split search's cuts are
# not proved to visit fewer than all splits
MAX_SPLITS = 20_000_000


@dataclass(frozen=True, slots=True)
class Pipeline:
    """One asymmetric pipeline priced at the search's memory tier (module docstring)."""

    outer: ClassOuter
    coeffs: AsymmetricCoefficients  # its times scaled, its capacities capped
    bound_s: float  # at most the (scaled) step time of every split


def priced(inst: Instance) -> list[Pipeline]:
    """Every asymmetric pipeline of the declared space, in its listing order (which breaks
    ties), priced and bounded at `inst`'s memory tier (module docstring); refused where the
    space is too large (size_problem)."""
    cap, reserve = inst.search.memory_fill_cap, inst.search.memory_reserve_bytes
    out = []
    for ao, ac in _listed(dataclasses.replace(inst, search=dataclasses.replace(
            inst.search, memory_fill_cap=1.0, factor_memory_fill=None))):
        f = objective_factor_of(inst, ao)
        rows = capped_memory(scaled_times(ac.rows, f), cap, reserve)
        out.append(Pipeline(ao, dataclasses.replace(ac, rows=rows), f * lower_bound_s(ac, inst.model.layers)))
    return out


@functools.lru_cache(maxsize=1)
def _listed(inst: Instance) -> tuple[tuple[ClassOuter, AsymmetricCoefficients], ...]:
    """Every pipeline of `inst` (at no memory tier) with its unscaled coefficients: the same at
    every tier (a tier scales the times and caps the capacities, `priced`), so kept for the
    next tier's search of the same instance (solver/memory_tiers.search_tiers runs up to three)."""
    size_problem(inst)
    reserve = inst.search.memory_reserve_bytes
    return tuple((ao, coefficients(inst, ao, reserve_bytes=reserve)) for ao in asymmetric_outers(inst))


def best_plan(inst: Instance, p: Pipeline, below_s: float) -> tuple[float, Plan] | None:
    """(value, plan) of pipeline `p`'s best split below `below_s`, or None."""
    got = solve_split(inst, p.outer, p.coeffs, below_s)
    return None if got is None else (got[0], plan_of(inst, p.outer, got[1], got[2]))


def twin_outer(plan: Plan) -> ClassOuter | None:
    """The symmetric configuration a plan of equal degrees is (asymmetric.symmetric_twin: the
    same plan, listed once by the search), else None."""
    twin = symmetric_twin(plan)
    return None if twin is plan else twin.outer


def _stage_options(ac: AsymmetricCoefficients, s: int, top: int, r_of) -> list[tuple]:
    """(n, r, T, D, m - 1) of stage s for n = 1..top and each recompute count r_of(n) lists,
    only those that fit the stage's memory."""
    c = ac.rows
    out = []
    for n in range(1, top + 1):
        for r in r_of(n):
            mem = (c.stage_mem_bytes[s] + n * (c.layer_state_bytes[s] + c.layer_act_bytes[s])
                   - r * (c.layer_act_bytes[s] - c.layer_ckpt_bytes[s]))
            if mem <= c.capacity_bytes[s]:
                t = c.stage_time_s[s] + n * c.layer_time_s[s] + r * c.recompute_time_s[s]
                d = c.stage_sync_time_s[s] + n * c.layer_sync_time_s[s]
                out.append((n, r, float(t), float(d)))
    return out


def _best_split(ac: AsymmetricCoefficients, layers: int, r_of, best_s: float):
    """(value, n, r) of the best split of `ac` below best_s, or None (module docstring)."""
    pp = len(ac.micro_batches)
    top = layers - pp + 1
    opts = [_stage_options(ac, s, top, r_of) for s in range(pp)]
    if any(not o for o in opts):
        return None
    c = ac.rows
    least = [float(c.stage_time_s[s] + c.layer_time_s[s]) for s in range(pp)]  # one layer, r 0
    rest = [sum(least[s:]) for s in range(pp)] + [0.0]
    mm1 = [float(x) - 1.0 for x in ac.micro_batches]
    found = [best_s, None]
    n_of, r_of_stage = [0] * pp, [0] * pp

    def dfs(s: int, left: int, S: float, P: float, D: float) -> None:
        if S + rest[s] + P + D >= found[0]:
            return
        if s == pp:
            if left == 0:
                found[0], found[1] = S + P + D, (tuple(n_of), tuple(r_of_stage))
            return
        for n, r, t, d in opts[s]:
            if n > left - (pp - s - 1) or (s == pp - 1 and n != left):
                continue
            n_of[s], r_of_stage[s] = n, r
            dfs(s + 1, left - n, S + t, max(P, mm1[s] * t), max(D, d))

    dfs(0, layers, 0.0, 0.0, 0.0)
    return None if found[1] is None else (found[0], *found[1])


def solve_split(inst: Instance, ao: ClassOuter, ac: AsymmetricCoefficients, best_s: float):
    """(value, n, r) of `ao`'s best split below best_s under the framework's recompute rows,
    or None."""
    pattern, table = recompute_choices(inst, ao)
    L = inst.model.layers
    if pattern is None:
        return _best_split(ac, L, lambda n: (0,), best_s)
    if pattern is RecomputePattern.PER_STAGE:
        return _best_split(ac, L, lambda n: range(n + 1), best_s)
    best = None
    for row in table:  # one parameter value for every stage
        got = _best_split(ac, L, lambda n, row=row: (int(row[n]),), best_s)
        if got is not None:
            best, best_s = got, got[0]
    return best


def size_problem(inst: Instance) -> None:
    """Refuse a space of asymmetric pipelines too large to list (class_layouts.MAX_LAYOUTS
    pipelines, as the option families' layouts) or to search (MAX_SPLITS layer splits),
    naming the key and how to narrow it."""
    outers, splits = count_outers(inst)
    if outers > MAX_LAYOUTS or splits > MAX_SPLITS:
        raise InstanceError(inst.source, "search.asymmetric_pipelines",
                            f"the space holds {outers:,} asymmetric pipelines and {splits:,} layer"
                            f" splits (at most {MAX_LAYOUTS:,} and {MAX_SPLITS:,}: it is searched"
                            " on small instances)", "narrow search.tp, max_pp or micro_batch, or"
                            " remove asymmetric_pipelines")
