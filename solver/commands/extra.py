"""`paraplan compare` (two plans side by side, and why one is faster) and `paraplan memory`
(peak memory per GPU by category, as `accelerate estimate-memory` reports it)."""

from __future__ import annotations

import sys

from paraplan.cost.errors import InstanceError
from paraplan.solver.format import band_text, breakdown_json, gib, table, train_cost_json
from paraplan.solver.commands.jsonout import emit_json as _dump  # strict JSON (no NaN), printed whole
from paraplan.solver.commands.parser import HELP_BACKEND, HELP_JSON, HELP_TIME_LIMIT_S


def cmd_compare(args) -> int:
    """Two plans of one instance side by side, on every cluster: plan files of either format
    (cost/readers/plan_reader.load_plan), each simulated once."""
    from paraplan.solver.commands.inputs import read_instance
    from paraplan.cost.simulate import simulate
    from paraplan.cost.readers.plan_reader import load_plan
    from paraplan.cost.readers.plan_writer import plan_to_mapping
    from paraplan.cost.trust import plan_trust
    from paraplan.solver.plan_text import describe_plan
    from paraplan.solver.report.compare import (compare, comparison_json, fitting_train_cost, part_rows,
                                               side_rows, train_rows)

    names = (args.plan_a, args.plan_b)
    inst = read_instance(args)
    plans = [load_plan(p, inst) for p in names]
    bds = [simulate(inst, p) for p in plans]
    cmp = compare(bds[0], bds[1], ("A", "B"))
    # each plan's interval: its own distance from the published runs (cost/trust.py), so two
    # plans close in predicted time may differ in how far each can be trusted
    trusts = [plan_trust(inst, p, bd.iter_time_s) for p, bd in zip(plans, bds)]
    costs = [fitting_train_cost(inst, bd, t) for bd, t in zip(bds, trusts)]
    if args.json:
        out = {"status": "equal" if cmp.faster is None else f"{cmp.faster}_faster",
               "plans": [{"file": f, "plan": plan_to_mapping(p, inst), "iter_time_s": bd.iter_time_s,
                          "interval_s": None if t.interval_s is None else list(t.interval_s),
                          "breakdown": breakdown_json(bd), "train_cost": train_cost_json(tc)}
                         for f, p, bd, tc, t in zip(names, plans, bds, costs, trusts)],
               **comparison_json(cmp, names)}
        _dump(out)
        return 0
    print(f"{inst.name}: A = {names[0]}, B = {names[1]}")
    for tag, p in zip("AB", plans):
        print(f"{tag}  {describe_plan(p, inst)}")
    print()
    interval = [["likely measured (80%)", *(band_text(t.interval_s) for t in trusts)]]
    rows = side_rows(*bds)
    print(table(["", "A", "B"], rows[:1] + interval + rows[1:] + train_rows(*costs)))
    print()
    print(table(["critical path part", "A", "B", "B - A"], part_rows(cmp)))
    print()
    if cmp.faster is None:
        print("A and B take the same time")
    else:
        print(f"{'A' if cmp.faster == 'a' else 'B'} is {cmp.speedup:.3f}x faster; why (parts of the"
              " critical path that differ, largest first):")
        for line in cmp.reasons:
            print(f"  {line}")
    for tag, bd in zip("AB", bds):
        if not bd.fits:
            print(f"warning: {tag} does not fit memory")
    return 0


def cmd_memory(args) -> int:
    """Peak memory per GPU by category of a plan file's plan, or of the optimal plan, on every
    cluster: per stage of every class (a flat instance: its one group), each with its group's
    GPU, tp and the gradient ring of every replica (cost/memory_breakdown.py); a DualPipe plan
    per device."""
    from paraplan.cost.plan_memory import plan_memory
    from paraplan.cost.specs import PipelineSchedule
    from paraplan.cost.readers.plan_writer import plan_to_mapping
    from paraplan.solver.plan_text import describe_cluster, plan_lines, shown_as_groups

    inst, plan, where = _memory_plan(args)
    if plan is None:  # proved: nothing to estimate, and not an input error
        from paraplan.solver.commands.exit_codes import EXIT_INFEASIBLE
        print(f"paraplan: infeasible: no plan to estimate: {where}", file=sys.stderr)
        return EXIT_INFEASIBLE
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        if shown_as_groups(inst, plan):
            raise InstanceError(inst.source, "job.pipeline_schedule", "memory of a DualPipe plan is"
                                " priced on a flat cluster (cost/dualpipe.py)",
                                "write the cluster without `groups:`")
        return _memory_dualpipe(args, inst, plan, where)
    # simulate checks the plan against the instance; an asymmetric pipeline's stages each on
    # their own degree (cost/plan_memory.py)
    bd, per_class = plan_memory(inst, plan, inst.search.memory_reserve_bytes)
    rows = bd.stage_rows()  # (class, stage, group, time, memory, capacity), classes in order
    cats = [cs for stages in per_class for cs in stages]
    # a plan of one class on one group names its stages alone
    one = len(bd.classes) == 1 and len({g for _, _, g, *_ in rows}) == 1
    over = [f"{'' if one else f'class {k} '}stage {s}{'' if one else f' on {g}'} needs {gib(mem)}"
            for k, s, g, _, mem, cap in rows if mem > cap]
    return _show_memory(
        args, plan_to_mapping(plan, inst),
        [{"class": k, "stage": s, "group": g, "total_bytes": sum(cs.values()), "capacity_bytes": cap,
          "categories_bytes": cs} for (k, s, g, _, _, cap), cs in zip(rows, cats)],
        [describe_cluster(inst), f"memory per GPU of {where}", "plan  " + "\n      ".join(plan_lines(plan, inst))],
        [f"stage {s}" if one else f"class {k} stage {s} ({g})" for k, s, g, *_ in rows], cats,
        [cap for *_, cap in rows], bd.peak_mem_bytes, bd.fits, "DOES NOT FIT: " + "; ".join(over))


def _memory_dualpipe(args, inst, plan, where: str) -> int:
    """`memory` of a DualPipe plan: one column per device, which holds stages d and
    pp - 1 - d (cost/dualpipe.device_categories_bytes)."""
    from paraplan.cost import dualpipe
    from paraplan.cost.readers.plan_writer import plan_to_mapping
    from paraplan.solver.plan_text import describe_cluster, plan_lines

    reserve = inst.search.memory_reserve_bytes
    it = dualpipe.iteration(inst, plan, reserve_bytes=reserve)
    cats = dualpipe.device_categories_bytes(inst, plan, reserve_bytes=reserve)
    return _show_memory(
        args, plan_to_mapping(plan),
        [{"stage": d, "total_bytes": sum(cs.values()), "categories_bytes": cs} for d, cs in enumerate(cats)],
        [describe_cluster(inst), f"memory per GPU of {where} (DualPipe: device d holds stages d and pp - 1 - d)",
         "plan  " + "\n      ".join(plan_lines(plan, inst))],
        [f"device {d}" for d in range(len(cats))], cats, it.capacity_bytes,
        float(it.mem_bytes.max()), bool((it.mem_bytes <= it.capacity_bytes).all()), "DOES NOT FIT")


def _show_memory(args, plan_mapping: dict, stages: list[dict], head: list[str], columns: list[str],
                 cats: list[dict[str, float]], capacity_bytes, peak_bytes: float, fits: bool,
                 does_not_fit: str) -> int:
    """`memory`'s output and exit status, for a plan's stages and a DualPipe plan's devices
    alike: the JSON (`stages`, one record per column) or the text (`head`, then one column
    per stage or device, then the peak line, `does_not_fit` where it does not fit)."""
    capacity = min(capacity_bytes)
    if args.json:
        _dump({"status": "fits" if fits else "out_of_memory", "plan": plan_mapping,
               "capacity_bytes": capacity, "peak_mem_bytes": peak_bytes, "fits_memory": fits,
               "stages": stages})
        return 0 if fits else 1
    print("\n".join(head))
    print()
    print(_category_table(columns, cats, capacity_bytes))
    print()
    print(f"peak {gib(peak_bytes)} of {gib(capacity)} usable: " + ("fits" if fits else does_not_fit))
    return 0 if fits else 1


def _memory_plan(args):
    """(instance, plan, where it came from) for `memory`: the plan file read as `simulate`
    reads it, or the instance planned as `plan` plans it; with no plan (proved infeasible) the
    reason in place of `where`."""
    from paraplan.solver.commands.inputs import read_instance
    from paraplan.cost.readers.plan_reader import load_plan

    read = read_instance(args, args.plan is not None)  # a DualPipe plan file
    if args.plan:
        return read, load_plan(args.plan, read), args.plan
    from paraplan.solver.solve import solve
    res = solve(read, backend=args.backend, time_limit_s=args.time_limit_s)
    if res.status == "infeasible":
        return read, None, res.reason
    if res.plan is None:
        raise InstanceError(read.source, "plan", f"no plan to estimate ({res.status}): {res.reason}",
                            "pass a plan with --plan")
    return read, res.plan, f"the optimal plan ({res.status})"


def _category_table(columns: list[str], cats: list[dict[str, float]], capacity_bytes) -> str:
    from paraplan.cost.memory_breakdown import CATEGORIES
    rows = [[k] + [gib(cs[k]) for cs in cats] for k in CATEGORIES]
    rows.append(["total"] + [gib(sum(cs.values())) for cs in cats])
    rows.append(["usable capacity"] + [gib(x) for x in capacity_bytes])
    return table(["per GPU"] + columns, rows)


def register(sub) -> None:
    from paraplan.solver.commands.inputs import add_instance_args

    c = sub.add_parser("compare", help="two plans of one instance side by side, and why one is faster")
    c.add_argument("plan_a", metavar="PLAN_A", help="plan YAML (as written by `paraplan plan -o`)")
    c.add_argument("plan_b", metavar="PLAN_B", help="plan YAML")
    c.add_argument("--instance", required=True, metavar="INSTANCE", help="instance YAML")
    c.add_argument("--json", action="store_true", help=HELP_JSON)
    c.set_defaults(func=cmd_compare)

    m = sub.add_parser("memory", help="peak memory per GPU by category (weights, grads, optimizer,"
                                      " activations, logits, workspace, runtime)")
    add_instance_args(m)
    m.add_argument("--plan", help="plan YAML (default: solve for the optimal plan)")
    m.add_argument("--backend", choices=("dp", "cpsat", "milp"), default="dp", help=HELP_BACKEND)
    m.add_argument("--time-limit-s", type=float, default=60.0, help=HELP_TIME_LIMIT_S)
    m.add_argument("--json", action="store_true", help=HELP_JSON)
    m.set_defaults(func=cmd_memory)
