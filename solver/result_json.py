"""The JSON of results: the one JSON of a SolveResult (`plan --json`, and each job of a sweep),
and strict JSON for every document paraplan writes.

It sits below solver/commands/, so that the sweep, which writes a result per job, renders it
without importing a command. Strict JSON: NaN and infinities (which `json.dump` would write as
the invalid tokens NaN and Infinity) become null, and an integer too long for Python's int ->
str conversion (over 4,300 digits: a count of plans in an astronomical space) becomes a string
in scientific notation, as `solver.format.count` writes it.
"""

from __future__ import annotations

import math

from paraplan.solver.format import breakdown_json, count, space_json, train_cost_json, trust_json

_MAX_INT_DIGITS = 4000  # below Python's default int -> str limit (4,300 digits)


def json_safe(obj):
    """`obj` with non-finite floats as None and huge integers as scientific strings."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, int):
        return count(obj) if obj.bit_length() > _MAX_INT_DIGITS * 3.3 else obj
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def not_covered(inst, plan) -> list[str]:
    """What the plan's claim leaves out on this cluster (solver/space.not_covered): the groups
    it leaves idle among them."""
    from paraplan.solver.space import not_covered as outside
    return outside(inst, None if plan is None else {g for c in plan.classes for g in c.stage_groups})


def plan_train_cost(inst, iter_time_s: float | None, trust=None):
    """The time and cost to train (cost/train_cost.py) with the trust interval of `trust`
    (cost/trust.Trust or None); None without a plan or without job.train_tokens."""
    from paraplan.cost.train_cost import instance_train_cost
    return instance_train_cost(inst, iter_time_s, None if trust is None else trust.interval_s)


def result_json(res, inst, regs=None) -> dict:
    """The one JSON of a SolveResult (plan, sweep), on every cluster: the plan's simulated
    iteration time on the nominal network and, with job.train_tokens, its time and cost to
    train there with its trust interval; on node groups the objective's value per scenario, and
    `regs` (solver/dynamic.regrets) under --robust / --expected."""
    from paraplan.cost.readers.plan_writer import plan_to_mapping
    from paraplan.cost.model_notes import model_warnings
    from paraplan.cost.trust import plan_trust
    bd = res.breakdown
    t = None if bd is None else bd.iter_time_s
    trust = None if res.plan is None or bd is None else plan_trust(inst, res.plan, t)
    return {
        "status": res.status, "objective": res.objective, "objective_s": res.objective_s,
        # the framework release the time is for (job.framework_version, default the current)
        "framework": inst.job.framework.value, "framework_version": inst.job.release.version,
        # the dtype gradients are kept and reduced in (job.grad_reduce_dtype, default the framework's)
        "grad_reduce_dtype": inst.job.grad_reduce.value,
        "quantile": inst.search.objective, "quantile_s": res.quantile_s, "iter_time_s": t,
        "per_scenario_s": dict(zip(res.scenario_names, res.per_scenario_s or ())),
        "bound_s": res.bound_s, "gap": res.gap, "solve_time_s": res.solve_time_s, "backend": res.backend,
        "tolerance_s": res.tolerance_s,
        "space": space_json(res, not_covered(inst, res.plan)),
        "reason": res.reason or None,
        "plan": plan_to_mapping(res.plan, inst) if res.plan else None,
        "breakdown": breakdown_json(bd) if bd else None,
        "tokens_per_s": None if bd is None else bd.tokens_per_s,
        "trust": trust_json(trust),
        "model_warnings": model_warnings(inst, res.plan),
        "train_cost": train_cost_json(plan_train_cost(inst, t, trust)),
        "regret": None if regs is None else [
            {"scenario": r.scenario, "plan_time_s": r.plan_time_s, "optimum_s": r.optimum_s,
             "regret": r.regret} for r in regs],
    }
