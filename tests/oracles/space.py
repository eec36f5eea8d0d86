"""Full readings of solver/space.py: the size of a declared space."""

from __future__ import annotations

from paraplan.cost.specs import Instance
from paraplan.solver.space import one_group_summary


def one_group_plans_total(inst: Instance) -> int:
    """(from solver/space.py) Complete plans of a homogeneous instance's declared space
    (one_group_summary)."""
    return one_group_summary(inst).plans_total
