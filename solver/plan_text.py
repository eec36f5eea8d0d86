"""Plans as text: the lines `plan`, `simulate`, `compare`, `report`, the exports' comments and
--sensitivity print, per-operator partitions included (cost/partition.py). Commands, report and
export render with it, so it sits below all three."""

from __future__ import annotations

from paraplan.cost.specs import Instance
from paraplan.cost.plan_specs import Plan
from paraplan.solver.format import seconds


def shown_as_groups(inst, plan=None) -> bool:
    """Whether `inst` (and `plan`, where given) is shown as a cluster of node groups: it is not
    flat (cost/specs.Instance.flat: several groups or networks, or a search asking for plans
    only the group format holds, SearchSpace.several_classes), or the plan is not one
    class on every GPU."""
    return not inst.flat or (plan is not None and not plan.is_flat_on(inst.cluster))


def _where(ranks_span: int, gpus_per_node: int) -> str:
    """'node' when a group of consecutive-rank span `ranks_span` fits in one node."""
    return "node" if ranks_span <= gpus_per_node else "nodes"


def describe_partitions(plan: Plan, inst: Instance) -> list[str]:
    """One line per operator, e.g. `mlp.fc1: K@nodes, P2x2@node` or `mlp.fc2: T@node` (token
    split, weights replicated on the group); [] for a Megatron plan."""
    return partition_lines(plan.partitions, plan.tp, inst.cluster.gpus_per_node)


def partition_lines(partitions, tp: int, gpn: int) -> list[str]:
    """describe_partitions of a layer plan over a tp group on nodes of `gpn` GPUs."""
    if not partitions:
        return []
    from paraplan.cost import partition as P  # a plan with partitions only (issue 33, start-up)
    if P.is_megatron(dict(partitions)):
        return []
    out = []
    for op, spec in partitions:
        if op == P.STREAM:  # a block stream (Megatron's layouts are not recorded)
            q = P.stream_grid(spec)
            out.append(f"{P.DISPLAY_NAMES[op]}: {spec}@{_where(q, gpn)} (token rows x hidden"
                       f" columns, norm statistics all-reduced over {q} GPUs)")
            continue
        if op == "attn_core":
            line = f"{P.DISPLAY_NAMES[op]}: heads@{_where(tp, gpn)}"
            if spec != "heads":
                q = spec.split("P")[1].rstrip("s")
                what = "skewed input" if spec.endswith("s") else "output"
                line += f" (chunks aligned to the P{q}x{q} {what})"
            out.append(line)
            continue
        p = P.parse_op(spec, tp)
        inner = _where(p.q * p.q, gpn)
        # the outer split's ranks are q^2 apart and span the whole group
        outer = _where(tp, gpn)
        out.append(f"{P.DISPLAY_NAMES[op]}: {p.describe((outer, inner))}")
    return out


def slots_text(p) -> str:
    """' embedding_in_split loss_in_split' for the flags a plan sets (cost/pipeline_split.py),
    and ' zero_bubble=NAME' for the zero-bubble schedule it runs (cost/zero_bubble.py)."""
    zb = f" zero_bubble={p.zero_bubble.value}" if p.zero_bubble is not None else ""
    return "".join(f" {k}" for k in ("embedding_in_split", "loss_in_split") if getattr(p, k)) + zb


def plan_line(p) -> str:
    """A homogeneous plan in one line, as `plan` prints it."""
    rc = ",".join(str(x) for x in p.full_recompute_layers)
    split = ",".join(str(x) for x in p.layers_per_stage)
    return (f"tp={p.tp} pp={p.pp} dp={p.dp} cp={p.cp} micro_batch={p.micro_batch}"
            f" micro_batches={p.num_micro_batches} sp={'on' if p.sequence_parallel else 'off'}"
            f" zero={p.zero} virtual_stages={p.virtual_stages} recompute={p.recompute.value}"
            f"{f' ep={p.ep}' if p.ep > 1 else ''}{f' etp={p.etp}' if p.etp is not None else ''}"
            f"{slots_text(p)} layers/stage=[{split}] full-recompute/stage=[{rc}]")


def plan_lines(plan, inst) -> list[str]:
    """A plan as `plan`, `simulate`, `memory`, `exhaustive`, `replan` and `timeline` print it:
    one class on every GPU of one node group in one line (plan_line) and its per-operator
    partitions, else its degrees and modes, then a line per replica class."""
    if plan.is_flat_on(inst.cluster):
        return [plan_line(plan), *describe_partitions(plan, inst)]
    names = [g.name for g in inst.cluster.groups]
    tp = (",".join(f"{names[g]}:{t}" for g, t in plan.group_tp) if plan.group_tp else plan.tp)
    lines = [f"tp={tp}{f' cp={plan.cp}' if plan.cp > 1 else ''}"
             f"{f' virtual_stages={plan.virtual_stages}' if plan.virtual_stages > 1 else ''}"
             f"{slots_text(plan)}"
             f"{f' ep={plan.ep}' if plan.ep > 1 else ''}{f' etp={plan.etp}' if plan.etp is not None else ''}"
             f" micro_batch={plan.micro_batch} sp={'on' if plan.sequence_parallel else 'off'}"
             f" zero={plan.zero} recompute={plan.recompute.value} family={plan.family}"]
    for i, c in enumerate(plan.classes):
        # an asymmetric pipeline: each stage's data-parallel ranks, each running its share
        head = (f"one pipeline x {c.num_micro_batches} micro-batches; data-parallel ranks/stage"
                f" [{','.join(map(str, c.stage_dp))}]" if c.stage_dp else
                f"{c.replicas} replica(s) x {c.num_micro_batches} micro-batches")
        lines.append(f"  class {i + 1}: {head};"
                     f" stages on [{','.join(names[g] for g in c.stage_groups)}];"
                     f" layers/stage [{','.join(map(str, c.layers_per_stage))}];"
                     f" full-recompute/stage [{','.join(map(str, c.full_recompute_layers))}]")
        for g, parts in c.partitions:  # per-operator tensor partitions of its stages on g
            gpn = inst.cluster.groups[g].gpus_per_node
            lines += [f"    on {names[g]}: {x}" for x in partition_lines(parts, plan.tp_of(g), gpn)]
    return lines


def describe_cluster(inst) -> str:
    """The instance line every command that plans or prices it starts with: its model on its
    GPUs (each node group named with its site where there are several) and its global batch."""
    groups = inst.cluster.groups
    gpus = (f"{groups[0].num_gpus} x {groups[0].gpu.name}" if len(groups) == 1 else
            " + ".join(f"{g.num_gpus} x {g.gpu.name} ({g.name}@{g.site})" for g in groups))
    return (f"{inst.name}: {inst.model.name} on {gpus},"
            f" global batch {inst.job.global_batch} x {inst.model.seq_len} tokens")


def objective_text(objective: str, scenarios: int, network: str | None = None) -> str:
    """What a plan's objective value measures: its iteration time (on `network`, named where the
    instance has several networks or an event changed it), or its worst case or expected value
    over the `scenarios` networks."""
    return {"nominal": "per iteration" + ("" if network is None else f" on {network}"),
            "robust": f"worst case over {scenarios} scenarios",
            "expected": f"expected over {scenarios} scenarios"}[objective]


def evidence(res, inst, network: str | None = None) -> str:
    """The optimality evidence of a SolveResult of `inst` (solver/format.evidence_text), as
    `plan` and `replan` print it; `network`: the one the plan was solved on, when not the
    instance's only one."""
    from paraplan.solver.format import evidence_text, quantile_phrase
    from paraplan.solver.result_json import not_covered
    if network is None and len(inst.scenarios) > 1:
        network = "the nominal network"
    what = objective_text(res.objective, len(res.scenario_names), network)
    return evidence_text(res, what + quantile_phrase(inst.search.objective, res.objective_s),
                         not_covered=not_covered(inst, res.plan))


def describe_plan(plan, inst) -> str:
    """A plan in one line (`compare`, `plan --top`, --sensitivity, the report's comparison): its
    plan_lines joined."""
    return "; ".join(x.strip() for x in plan_lines(plan, inst))


def sensitivity_text(sens: dict) -> str:
    lines = ["sensitivity (each fitted parameter at the ends of its uncertainty range, cost/fit.py;"
             " MoE: the routing imbalance from 1.0 to what the published forced/dropless pairs"
             " imply, cost/moe.py):"]
    for c in sens["cases"]:
        head = f"  {c['parameter']} {c['end']} ({c['value']:.4g}): "
        if c["stays_optimal"]:
            lines.append(head + "the plan stays optimal")
        else:
            ours = "does not fit" if c["plan_iter_time_s"] is None else seconds(c["plan_iter_time_s"])
            lines.append(head + f"{c['best_plan']} wins ({seconds(c['best_iter_time_s'])} vs this plan's {ours})")
    lines.append("the optimum is robust to these parameters" if sens["robust"]
                 else "the optimum depends on these parameters (see above)")
    return "\n".join(lines)
