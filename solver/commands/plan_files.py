"""Plan files of either format, for the commands that take plans (compare, memory, report --plan).

A homogeneous instance's plan of one class on every GPU is a `Plan`, priced stage by stage
(cost/simulate.simulate), its trust interval from its own features (cost/trust.plan_trust); any
other plan, or any plan of a node-group file, is a `ClassPlan` on the instance as node groups
(cost/simulate.simulate_classes, cost/trust.class_plan_trust). Until cost/ holds one plan record
(issue 32), this module is the one place that tells the two apart, so that each command has one
path: read the plans, simulate each once, render.
"""

from __future__ import annotations

from paraplan.cost.loader import is_group_plan_mapping, read_yaml
from paraplan.cost.plan_specs import ClusterInstance
from paraplan.cost.specs import Plan


def read_plans(paths, read):
    """(instance, plans) of the plan files at `paths` for the instance `read` (as
    read_instance read it): one-class plans of a homogeneous instance when every file is in
    the one-class format, else every plan as a ClassPlan on the instance as node groups."""
    from paraplan.cost.groups_loader import class_plan_from_data
    from paraplan.cost.loader import plan_from_mapping
    from paraplan.solver.commands.groups import as_groups, from_group_file

    data = [read_yaml(p) for p in paths]  # each file read once
    if not from_group_file(read) and not any(is_group_plan_mapping(d) for d in data):
        return read, [plan_from_mapping(d, read, str(p)) for d, p in zip(data, paths)]
    inst = as_groups(read)
    return inst, [class_plan_from_data(d, inst, p) for d, p in zip(data, paths)]


def simulate_plan(inst, plan):
    """The plan's breakdown, simulated once (either kind has iter_time_s, exposed_s, fits,
    peak_mem_bytes, tokens_per_s and mfu)."""
    from paraplan.cost.simulate import simulate, simulate_classes
    if isinstance(plan, Plan):
        return simulate(inst, plan, reserve_bytes=inst.search.memory_reserve_bytes)
    return simulate_classes(inst, plan)


def plan_line(plan, inst) -> str:
    """The plan in one line, as `plan` prints it."""
    from paraplan.solver.commands import plan_text
    return plan_text.plan_line(plan) if isinstance(plan, Plan) else plan_text.describe_plan(plan, inst)


def plan_mapping(plan, inst) -> dict:
    """The plan as its plan file writes it."""
    from paraplan.cost.groups_loader import class_plan_to_mapping
    from paraplan.cost.loader import plan_to_mapping
    return plan_to_mapping(plan) if isinstance(plan, Plan) else class_plan_to_mapping(plan, inst)


def plan_file(inst, plan, read) -> dict:
    """The plan file's mapping, as `plan -o` writes it (`read`: the instance as read_instance
    read it; `inst`: as planned)."""
    from paraplan.cost.loader import plan_file_mapping
    from paraplan.solver.commands import groups
    return plan_file_mapping(read, plan) if isinstance(plan, Plan) else groups.plan_file(inst, plan, read)


def breakdown_json(bd) -> dict:
    """The breakdown's JSON (solver/commands/schema.BREAKDOWN) for either kind."""
    from paraplan.solver import format as fmt
    from paraplan.solver.commands import groups
    return groups.breakdown_json(bd) if hasattr(bd, "classes") else fmt.breakdown_json(bd)


def not_covered(inst, plan) -> list[str]:
    """What the plan's claim leaves out (solver/space.not_covered): a flat instance as the
    search plans it, one group, never idle; on node groups, the groups the plan leaves idle."""
    from paraplan.cost.groups_loader import as_one_group
    from paraplan.solver.commands import groups
    from paraplan.solver.space import not_covered as outside
    return groups.not_covered(inst, plan) if isinstance(inst, ClusterInstance) else outside(as_one_group(inst))


def model_warnings(inst, plan) -> list[str]:
    """What the model's pricing leaves out, for the plan where it is one class (a plan of
    several classes differs class by class: cost/model_notes.model_warnings)."""
    from paraplan.cost.model_notes import model_warnings as notes
    return notes(inst, plan if isinstance(plan, Plan) else None)


def plan_trust(inst, plan, predicted_s: float):
    """How far to trust the plan's predicted time (cost/trust.py)."""
    from paraplan.cost import trust
    if isinstance(plan, Plan):
        return trust.plan_trust(inst, plan, predicted_s)
    return trust.class_plan_trust(inst, plan, predicted_s)
