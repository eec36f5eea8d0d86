"""Full readings of solver/search.py: one outer configuration's inner problem, built alone."""

from __future__ import annotations

from paraplan.cost.plan_specs import ClassOuter
from paraplan.cost.specs import Instance
from paraplan.formulations.multiclass import MultiClassProblem
from paraplan.solver.search import dualpipe_problem, priced_for, problem_of
from paraplan.solver.space import dualpipe_job


def problem_for(inst: Instance, o: ClassOuter, objective: str, placements: dict | None = None,
                partitions: tuple | None = None) -> MultiClassProblem:
    """(from solver/search.py) The inner problem of `o`. `placements`: see search.placer.
    `partitions`: per class, its layer plans (ReplicaClass.partitions; None: Megatron 1-D
    everywhere)."""
    if dualpipe_job(inst):
        return dualpipe_problem(inst, o)
    return problem_of(inst, o, objective, priced_for(inst, o, objective, placements, partitions))
