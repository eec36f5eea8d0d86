"""What the commands that show a plan (plan, simulate, compare, memory, report --plan) say beside
its times, for a plan of any shape (cost/plan_specs.Plan): plan files are read and written by
cost/loader.load_plan / plan_to_mapping, trusted by cost/trust.plan_trust, and simulated once by
cost/simulate.simulate.
"""

from __future__ import annotations

from paraplan.solver.commands.groups import shown_as_groups


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
