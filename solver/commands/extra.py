"""`paraplan compare` (two plans side by side, and why one is faster) and `paraplan memory`
(peak memory per GPU by category, as `accelerate estimate-memory` reports it)."""

from __future__ import annotations

import sys

from paraplan.cost.errors import InstanceError
from paraplan.solver.format import gib, seconds, table, train_cost_json
from paraplan.solver.commands.jsonout import emit_json as _dump  # strict JSON (no NaN), printed whole
from paraplan.solver.commands.parser import HELP_BACKEND, HELP_JSON, HELP_TIME_LIMIT_S


def _homogeneous(args, what: str, simulate_only: bool = False):
    from paraplan.solver.commands import groups as group_commands
    from paraplan.solver.commands.inputs import read_instance

    inst = read_instance(args, simulate_only)
    if group_commands.shown_as_groups(inst):
        raise InstanceError(args.instance, "cluster", f"{what} is offered for one-class plans of a"
                            " single-group cluster", "for a mixed cluster, or a search with"
                            " classes_per_group or idle_gpus, use `paraplan simulate INSTANCE --plan PLAN.yaml`")
    return inst


def cmd_compare(args) -> int:
    """Two plans of one instance side by side, on every cluster: plan files of either format
    (solver/commands/plan_files.py), each simulated once."""
    from paraplan.solver.commands.inputs import read_instance
    from paraplan.solver.commands.plan_files import (breakdown_json, plan_mapping, plan_trust,
                                                     read_plans, simulate_plan)
    from paraplan.solver.commands.plan_text import describe_plan
    from paraplan.solver.report.compare import (compare, comparison_json, fitting_train_cost, part_rows,
                                               side_rows, train_rows)

    names = (args.plan_a, args.plan_b)
    inst, plans = read_plans(names, read_instance(args))
    bds = [simulate_plan(inst, p) for p in plans]
    cmp = compare(bds[0], bds[1], ("A", "B"))
    # each plan's interval: its own distance from the published runs (cost/trust.py), so two
    # plans close in predicted time may differ in how far each can be trusted
    trusts = [plan_trust(inst, p, bd.iter_time_s) for p, bd in zip(plans, bds)]
    costs = [fitting_train_cost(inst, bd, t) for bd, t in zip(bds, trusts)]
    if args.json:
        out = {"status": "equal" if cmp.faster is None else f"{cmp.faster}_faster",
               "plans": [{"file": f, "plan": plan_mapping(p, inst), "iter_time_s": bd.iter_time_s,
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
    interval = [["likely measured (80%)", *("-" if t.interval_s is None else
                                            f"{seconds(t.interval_s[0])} .. {seconds(t.interval_s[1])}"
                                            for t in trusts)]]
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
    from paraplan.cost import dualpipe
    from paraplan.cost.loader import load_plan, plan_to_mapping
    from paraplan.cost.memory_breakdown import CATEGORIES, stage_categories_bytes
    from paraplan.cost.specs import PipelineSchedule
    from paraplan.cost.simulate import simulate
    from paraplan.solver.commands.plan_text import plan_line
    from paraplan.solver.report.page import plan_coefficients

    inst = _homogeneous(args, "memory", simulate_only=args.plan is not None)  # a DualPipe plan file
    if args.plan:
        plan, where = load_plan(args.plan, inst), args.plan
    else:
        from paraplan.solver.solve import solve
        res = solve(inst, backend=args.backend, time_limit_s=args.time_limit_s)
        if res.status == "infeasible":  # proved: nothing to estimate, and not an input error
            from paraplan.solver.commands.exit_codes import EXIT_INFEASIBLE
            print(f"paraplan: infeasible: no plan to estimate: {res.reason}", file=sys.stderr)
            return EXIT_INFEASIBLE
        if res.plan is None:
            raise InstanceError(inst.source, "plan", f"no plan to estimate ({res.status}): {res.reason}",
                                "pass a plan with --plan")
        plan, where = res.plan, f"the optimal plan ({res.status})"
    reserve = inst.search.memory_reserve_bytes
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:  # columns are devices
        it = dualpipe.iteration(inst, plan, reserve_bytes=reserve)
        c, cats, unit = it.coeffs, dualpipe.device_categories_bytes(inst, plan, reserve_bytes=reserve), "device"
        peak, fits = float(it.mem_bytes.max()), bool((it.mem_bytes <= it.capacity_bytes).all())
    else:
        c = plan_coefficients(inst, plan)
        cats, unit = stage_categories_bytes(inst, plan, c), "stage"
        bd = simulate(inst, plan, reserve_bytes=reserve, coeffs=c)
        peak, fits = bd.peak_mem_bytes, bd.fits
    cap = float(c.capacity_bytes.min())
    if args.json:
        _dump({"status": "fits" if fits else "out_of_memory", "plan": plan_to_mapping(plan),
               "capacity_bytes": cap, "peak_mem_bytes": peak, "fits_memory": fits,
               "stages": [{"stage": s, "total_bytes": sum(cs.values()), "categories_bytes": cs}
                          for s, cs in enumerate(cats)]})
        return 0 if fits else 1
    print(f"{inst.name}: memory per GPU of {where}"
          + (" (DualPipe: device d holds stages d and pp - 1 - d)" if unit == "device" else ""))
    print(f"plan  {plan_line(plan)}")
    print()
    rows = [[k] + [gib(cs[k]) for cs in cats] for k in CATEGORIES]
    rows.append(["total"] + [gib(sum(cs.values())) for cs in cats])
    rows.append(["usable capacity"] + [gib(x) for x in c.capacity_bytes])
    print(table(["per GPU"] + [f"{unit} {s}" for s in range(len(cats))], rows))
    print()
    print(f"peak {gib(peak)} of {gib(cap)} usable: " + ("fits" if fits else "DOES NOT FIT"))
    return 0 if fits else 1


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
