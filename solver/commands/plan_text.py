"""Plans as text: the lines `plan`, `simulate`, `compare`, `report` and --sensitivity print."""

from __future__ import annotations

from paraplan.solver.commands.partitions import partition_lines
from paraplan.solver.format import seconds


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
    names = [g.name for g in inst.cluster.groups]
    tp = (",".join(f"{names[g]}:{t}" for g, t in plan.group_tp) if plan.group_tp else plan.tp)
    lines = [f"tp={tp}{f' cp={plan.cp}' if plan.cp > 1 else ''}"
             f"{f' virtual_stages={plan.virtual_stages}' if plan.virtual_stages > 1 else ''}"
             f"{slots_text(plan)}"
             f"{f' ep={plan.ep}' if plan.ep > 1 else ''}{f' etp={plan.etp}' if plan.etp is not None else ''}"
             f" micro_batch={plan.micro_batch} sp={'on' if plan.sequence_parallel else 'off'}"
             f" zero={plan.zero} recompute={plan.recompute.value} family={plan.family}"]
    for i, c in enumerate(plan.classes):
        lines.append(f"  class {i + 1}: {c.replicas} replica(s) x {c.num_micro_batches} micro-batches;"
                     f" stages on [{','.join(names[g] for g in c.stage_groups)}];"
                     f" layers/stage [{','.join(map(str, c.layers_per_stage))}];"
                     f" full-recompute/stage [{','.join(map(str, c.full_recompute_layers))}]")
        for g, parts in c.partitions:  # per-operator tensor partitions of its stages on g
            gpn = inst.cluster.groups[g].cluster.gpus_per_node
            lines += [f"    on {names[g]}: {x}" for x in partition_lines(parts, plan.tp_of(g), gpn)]
    return lines


def describe_plan(plan, inst) -> str:
    """One line for a plan: one class on every GPU of a flat instance or of one node group as
    `plan` prints a flat plan, else its classes."""
    if plan.is_flat_on(inst.cluster):
        return plan_line(plan)
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
