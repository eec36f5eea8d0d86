"""Plan files of either format, for the commands that take plans (compare, memory, report --plan).

Every plan is one record (cost/plan_specs.Plan). A flat instance whose plan files are all flat
is priced as the flat instance (its trust interval from the plan's own features,
cost/trust.plan_trust); any other instance as node groups (cost/trust.class_plan_trust); both by
the one simulator (cost/simulate.simulate). Which of the two a plan is, the record says
(commands/groups.shown_as_groups), so that each command has one path: read the plans, simulate
each once, render.
"""

from __future__ import annotations

from paraplan.cost.loader import read_yaml
from paraplan.solver.commands.groups import shown_as_groups


def read_plans(paths, inst) -> list:
    """The plans of the plan files at `paths` for `inst`, each file read once, in either format
    (a flat one on a one-group cluster)."""
    from paraplan.cost.groups_loader import class_plan_from_data
    return [class_plan_from_data(read_yaml(p), inst, p) for p in paths]


def plan_mapping(plan, inst) -> dict:
    """The plan as its plan file writes it."""
    from paraplan.cost.groups_loader import class_plan_to_mapping
    from paraplan.cost.loader import plan_to_mapping
    return class_plan_to_mapping(plan, inst) if shown_as_groups(inst, plan) else plan_to_mapping(plan)


def not_covered(inst, plan) -> list[str]:
    """What the plan's claim leaves out (solver/space.not_covered) on the cluster as the search
    plans it (a flat instance: its one group, which a flat plan uses whole): the groups the
    plan leaves idle, then the rules."""
    from paraplan.solver.commands import groups
    return groups.not_covered(inst, plan)


def model_warnings(inst, plan) -> list[str]:
    """What the model's pricing leaves out, for the plan where it is one class (a plan of
    several classes differs class by class: cost/model_notes.model_warnings)."""
    from paraplan.cost.model_notes import model_warnings as notes
    return notes(inst, None if shown_as_groups(inst, plan) else plan)


def plan_trust(inst, plan, predicted_s: float):
    """How far to trust the plan's predicted time (cost/trust.py)."""
    from paraplan.cost import trust
    if shown_as_groups(inst, plan):
        return trust.class_plan_trust(inst, plan, predicted_s)
    return trust.plan_trust(inst, plan, predicted_s)
