"""`paraplan plan --sensitivity`: does the optimum stay optimal when the cost model's fitted
parameters move over their uncertainty?

One function for every cluster: a homogeneous instance is its one group, a plan its classes.
Each fitted parameter of the GPU types the cluster holds (cost/fit.parameter_table) is set, one
at a time, to either end of its uncertainty range (value x (1 -+ uncertainty), efficiencies
capped at 1); for a mixture-of-experts model the routing imbalance also goes to either end of
the range the published forced/dropless pairs imply (cost/moe.IMBALANCE_RANGE). Each moved
instance is planned again over the same declared space, for the same objective, and the plan
stays optimal when the re-planned optimum is the plan, or is no faster than the plan re-priced
on the moved instance (within the solver's tolerance).
"""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost.comm import NetEfficiency
from paraplan.cost.specs import Instance
from paraplan.cost.specs import Cluster
from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import NodeGroup, Link

# relative tolerance under which the plan's time ties the re-planned optimum (solver/planner.REL_TOL)
TIE_REL = 1e-9


def _scaled(link: Link, factor: float) -> Link:
    return link if factor == 1.0 else replace(link, bw_bytes_per_s=link.bw_bytes_per_s * factor)


def _moved_cluster(cluster: Cluster, cat: dict, net: NetEfficiency) -> Cluster:
    """`cluster` with each group's GPU from `cat` and, because the planner prices links at
    NetEfficiency()'s efficiencies, link bandwidths scaled by net / NetEfficiency(): NVLink by
    the intra-node efficiency, NICs and the links between groups (network paths) by the
    inter-node one."""
    base = NetEfficiency()
    intra, inter = net.intra_node / base.intra_node, net.inter_node / base.inter_node

    def moved(g: NodeGroup) -> NodeGroup:
        return replace(g, gpu=cat[g.gpu.name], intra_node=_scaled(g.intra_node, intra),
                       inter_node=_scaled(g.inter_node, inter))
    return replace(cluster, groups=tuple(moved(g) for g in cluster.groups),
                   between=tuple(tuple(_scaled(x, inter) for x in row) for row in cluster.between))


def moved_instance(inst: Instance, cat: dict, net: NetEfficiency) -> Instance:
    """The instance priced with catalogue `cat` and efficiencies `net`, on every scenario."""
    return replace(inst, cluster=_moved_cluster(inst.cluster, cat, net),
                   scenarios=tuple(replace(s, cluster=_moved_cluster(s.cluster, cat, net))
                                   for s in inst.scenarios))


def moved_instances(inst: Instance):
    """(parameter, end, value, moved instance) of every case, in a fixed order."""
    from paraplan.cost.fit import MIN_ROWS_PER_DIE, parameter_table

    net0 = NetEfficiency()
    cat0 = {g.gpu.name: g.gpu for g in inst.cluster.groups}
    for p in parameter_table([name for name in cat0 for _ in range(MIN_ROWS_PER_DIE)]):
        if not any(p.affects(name) for name in cat0):
            continue
        v0 = p.get(cat0, net0)
        for end, v in (("low", v0 * (1 - p.uncertainty_rel)), ("high", v0 * (1 + p.uncertainty_rel))):
            v = min(v, 1.0) if p.is_efficiency else v
            if v != v0:
                yield p.name, end, v, moved_instance(inst, *p.set(cat0, net0, v))
    m = inst.model
    if m.moe is not None:  # the assumed routing imbalance, at the ends of its documented range
        from paraplan.cost.moe import DEFAULT_IMBALANCE, IMBALANCE_RANGE
        v0 = m.moe.imbalance if m.moe.imbalance is not None else DEFAULT_IMBALANCE
        for end, v in zip(("low", "high"), IMBALANCE_RANGE):
            if v != v0:
                yield "model.moe.imbalance", end, v, replace(inst, model=replace(m, moe=replace(m.moe, imbalance=v)))


def sensitivity(inst: Instance, plan: Plan, objective: str, backend: str,
                time_limit_s: float, threads: int, describe) -> dict:
    """{"robust", "cases"}: each case re-plans the moved instance (solver/search.search) and says
    whether `plan` stays optimal on it; `describe(plan, inst)` writes a winning plan's line."""
    from paraplan.solver.search import search

    cases = []
    for name, end, value, moved in moved_instances(inst):
        alt = search(moved, backend, time_limit_s, objective, threads=threads)
        ours = _time_if_fits(moved, plan, objective)
        stays = (alt.plan == plan or (ours is not None and alt.objective_s is not None
                                      and ours <= alt.objective_s * (1 + TIE_REL) + alt.tolerance_s))
        cases.append({"parameter": name, "end": end, "value": value, "stays_optimal": stays,
                      "plan_iter_time_s": ours, "best_iter_time_s": alt.objective_s,
                      "best_plan": None if stays or alt.plan is None else describe(alt.plan, moved)})
    return {"robust": all(c["stays_optimal"] for c in cases), "cases": cases}


def _time_if_fits(inst: Instance, plan: Plan, objective: str) -> float | None:
    """The plan's time for the objective (its scenarios' times aggregated, solver/search.
    aggregate_s), each scenario simulated once; None where it does not fit memory on one."""
    from paraplan.cost.simulate import simulate
    from paraplan.solver.search import aggregate_s, scenario_weights

    idx, _, _ = scenario_weights(inst, objective)
    bds = [simulate(inst, plan, cluster=inst.scenarios[i].cluster) for i in idx]
    return aggregate_s(inst, objective, [bd.iter_time_s for bd in bds]) if all(bd.fits for bd in bds) else None
