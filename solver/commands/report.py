"""`paraplan report`: plan the instance as `plan` does (solver/solve.py, on every cluster), then
render the page (solver/report/page.build_report, which only renders)."""

from __future__ import annotations

import sys
import time

from paraplan.solver.format import likely_text, seconds
from paraplan.solver.outputs import check_output_path, write_text


def cmd_report(args) -> int:
    from paraplan.cost.specs import PipelineSchedule
    from paraplan.solver.commands.exit_codes import status_code
    from paraplan.solver.commands.inputs import read_instance
    from paraplan.cost.readers.plan_reader import load_plan
    from paraplan.solver.commands.planning import _top_instance, progress_printer
    from paraplan.solver.planner import coefficient_table
    from paraplan.solver.plan_text import shown_as_groups
    from paraplan.solver.report.page import build_report
    from paraplan.solver.solve import solve

    check_output_path(args.output, "-o/--output")  # before anything is solved
    progress = progress_printer(args)
    inst, objective, backend = _top_instance(args, read_instance(args))
    user_plan = load_plan(args.plan, inst) if args.plan else None
    t0 = time.perf_counter()
    res = solve(inst, backend, args.time_limit_s, progress=progress, objective=objective)
    if progress:
        progress.done()
    regs = None
    if res.plan is not None and len(inst.scenarios) > 1:
        from paraplan.solver.dynamic import regrets, scenario_optima
        regs = regrets(inst, res.plan, scenario_optima(inst, backend, args.time_limit_s), res.per_scenario_s)
    # the frontier (one class on one group, 1F1B) keeps to the same limit: a prefix of the
    # configurations past it, and the caption counts the points it drew
    frontier = not shown_as_groups(inst) and inst.job.pipeline_schedule is not PipelineSchedule.DUALPIPE
    coeffs = coefficient_table(inst, deadline=t0 + args.time_limit_s) if frontier else []
    page = build_report(inst, res, coeffs=coeffs, regrets=regs, user_plan=user_plan,
                        user_plan_label=args.plan or "")
    write_text(args.output, page, "-o/--output")
    what = res.reason
    if res.objective_s is not None:  # a robust or expected objective aggregates the scenarios
        what = ("iteration" if res.objective == "nominal" else f"{res.objective} objective") + f" {seconds(res.objective_s)}"
    if res.plan is not None and res.objective == "nominal":  # the band the page shows, as `plan` prints it
        from paraplan.cost.trust import plan_trust
        band = plan_trust(inst, res.plan, res.objective_s).interval_s
        what += likely_text(band)
    print(f"wrote {args.output}: {inst.name}, {res.status}, {what}", file=sys.stdout)
    return status_code(res.status)


def register(sub) -> None:
    from paraplan.solver.commands.planning import add_progress_arg, _add_objective_args
    from paraplan.solver.commands.inputs import add_instance_args

    r = sub.add_parser("report", help="HTML report of the optimal plan (evidence, timeline,"
                                      " breakdown, memory, frontier; mixed clusters: scenarios)")
    add_instance_args(r)
    r.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    r.add_argument("--plan", help="your own plan YAML, compared with the optimum")
    r.add_argument("--backend", choices=("dp", "cpsat", "milp"), default="dp")
    r.add_argument("--time-limit-s", type=float, default=60.0)
    _add_objective_args(r)
    add_progress_arg(r)
    r.set_defaults(func=cmd_report)
