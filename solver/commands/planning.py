"""Planner sub-commands: plan, exhaustive, verify, bench, calibrate."""

from __future__ import annotations

import sys

from paraplan.cost.errors import InstanceError
from paraplan.solver.format import (breakdown_json, breakdown_text, grad_reduce_line, trust_lines,
                                    seconds, table, train_cost_cells, train_cost_json, train_lines)
from paraplan.solver.commands.jsonout import emit_json as _emit_json
from paraplan.solver.outputs import check_output_path, plan_file, write_plan_file
from paraplan.solver.commands.inputs import (add_instance_args, progress_enabled, read_instance,
                                             read_calibration_files)
from paraplan.solver.commands.exit_codes import EXIT_INFEASIBLE, status_code
from paraplan.solver.commands.parser import (HELP_BACKEND, HELP_JSON, HELP_MAX_CANDIDATES,
                                          HELP_THREADS, HELP_TIME_LIMIT_S)
from paraplan.solver.plan_text import (describe_cluster, describe_plan, evidence, objective_text, plan_lines,
                                       sensitivity_text, shown_as_groups)
from paraplan.solver.result_json import plan_train_cost, result_json


def progress_printer(args):
    """A solver/progress.Printer on stderr when stderr is a terminal or --progress was given
    (never with --quiet), else None."""
    from paraplan.solver.progress import Printer
    return Printer() if progress_enabled(args) else None


def add_progress_arg(parser) -> None:
    parser.add_argument("--progress", action="store_true",
                        help="show search progress on stderr even when it is not a terminal")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def cmd_plan(args) -> int:
    """`paraplan plan` on every cluster: the instance read once, planned by the one entry
    (solver/solve.py) for the objective asked for, its plan re-simulated once on each network the
    objective reads, shown by the one renderer of each part (solver/plan_text.py)."""
    from paraplan.solver.commands import groups
    from paraplan.solver.solve import solve

    log = progress_printer(args)
    check_output_path(args.output, "-o/--output")  # before anything is solved
    read = read_instance(args)  # the instance file is read once (tests/cli/test_plan_once.py)
    if getattr(args, "sensitivity", False) and args.top is not None:
        raise InstanceError("<arguments>", "--sensitivity", "is not offered with --top",
                            "run --sensitivity without --top, on the plan you pick")
    if args.within is not None and args.top is None:
        raise InstanceError("<arguments>", "--within", "needs --top K",
                            "add --top K, e.g. --top 5 --within 3")
    try:
        if args.top is not None:
            return cmd_plan_top(args, read)
        inst, objective, backend = _top_instance(args, read)
        res = solve(inst, backend, args.time_limit_s, getattr(args, "threads", 1), log, objective)
    finally:
        if log:
            log.done()
    regs = None
    if objective != "nominal" and res.plan is not None:
        # imported here: the network timeline's module (solver/dynamic.py) and its choice
        # formulation serve only the scenario objectives (issue 33, start-up)
        from paraplan.solver.dynamic import regrets, scenario_optima
        # the plan's times as the search's re-simulation priced them on every scenario
        regs = regrets(inst, res.plan, scenario_optima(inst, backend, args.time_limit_s), res.per_scenario_s)
    sens = None
    if getattr(args, "sensitivity", False) and res.plan is not None:
        sens = groups.plan_sensitivity(args, inst, res.plan, backend, objective)
    if args.json:
        out = result_json(res, inst, regs)
        if sens is not None:
            out["sensitivity"] = sens
        _emit_json(out)
    else:
        _show_plan(inst, res)
        if regs:
            print("\n" + table(["scenario", "this plan", "scenario's optimum", "status", "regret"],
                               groups.regret_rows(regs), align="lrrlr"))
        if sens is not None:
            print("\n" + sensitivity_text(sens))
    if args.output and res.plan is not None:  # after the result is shown: a full disk loses nothing
        bound = "none" if res.bound_s is None else f"{res.bound_s:.6g} s"
        value = ("iteration" if objective == "nominal" else f"{objective} objective") + f" {res.objective_s:.6g} s"
        # a flat plan carries its instance, so that export and simulate need no instance file
        write_plan_file(args.output, f"# paraplan plan for {inst.name}: {res.status}, {value},"
                        f" bound {bound}, backend {res.backend}\n", plan_file(inst, res.plan, read))
    return status_code(res.status)


def _show_plan(inst, res) -> None:
    """`plan`'s text of a SolveResult: the instance, the evidence, the model's warnings, the
    plan, its trust, dtype and cost to train, then its breakdown."""
    from paraplan.cost.model_notes import model_warnings
    from paraplan.cost.trust import plan_trust

    # the time the trust band and the cost to train are read at: a flat plan's predicted time, a
    # cluster's plan's on the nominal network (objective_s is a robust or expected aggregate)
    t = res.iter_time_s if inst.flat or res.breakdown is None else res.breakdown.iter_time_s
    trust = None if res.plan is None else plan_trust(inst, res.plan, t)
    print(describe_cluster(inst))
    print(evidence(res, inst))
    for line in model_warnings(inst, res.plan):
        print(f"warning     model: {line}")
    if res.plan is None:
        return
    print("plan        " + "\n            ".join(plan_lines(res.plan, inst)))
    for line in trust_lines(trust):
        print(line)
    print(grad_reduce_line(inst.job))
    for line in train_lines(plan_train_cost(inst, t, trust)):
        print(line)
    print()
    print(breakdown_text(res.breakdown))


def cmd_plan_top(args, read) -> int:
    """`paraplan plan --top K [--within PCT]` on every cluster (`read`: as read_instance read
    it): the K best plans of distinct outer configurations by the one search with K winners
    (solver/solve.py), for the objective asked for, each re-simulated once."""
    from paraplan.cost.readers.plan_writer import plan_to_mapping
    from paraplan.cost.trust import plan_trust
    from paraplan.solver.solve import solve

    inst, objective, backend = _top_instance(args, read)
    res = solve(inst, backend, args.time_limit_s, getattr(args, "threads", 1), objective=objective,
                winners=args.top, within_pct=args.within)
    best = res.ranked[0].quantile_s if res.ranked else None
    # each plan's trust interval (its own distance from the published runs, as `compare` reads
    # it), printed beside its time and used for the time to train at its simulated time
    trusts = [plan_trust(inst, r.plan, r.breakdown.iter_time_s) for r in res.ranked]
    # None without job.train_tokens (cost/train_cost.train_cost)
    costs = [plan_train_cost(inst, r.breakdown.iter_time_s, t) for r, t in zip(res.ranked, trusts)]
    if args.json:
        if args.output:  # the files are named in the text output only
            _write_top_plans(args, inst, read, res, objective)
        _emit_json({"status": "optimal" if proved(res) else "feasible", "objective": objective,
                    "solve_time_s": res.solve_time_s, "solved": res.solved,
                    "plans": [{"rank": i + 1, "objective_s": r.objective_s, "quantile_s": r.quantile_s,
                               "iter_time_s": r.breakdown.iter_time_s, "vs_best": r.quantile_s / best - 1,
                               "interval_s": None if t.interval_s is None else list(t.interval_s),
                               "plan": plan_to_mapping(r.plan, inst),
                               "breakdown": breakdown_json(r.breakdown),
                               "train_cost": train_cost_json(tc)}
                              for i, (r, tc, t) in enumerate(zip(res.ranked, costs, trusts))]})
        return _top_code(res)
    within = f" within {args.within:g}% of the optimum" if args.within is not None else ""
    network = "" if objective == "nominal" else f", {objective} objective"
    claim = ("proved: no other outer configuration's best plan belongs in this list"
             if proved(res) else "NOT proved (time limit): the list may be incomplete")
    print(f"{inst.name}: the {args.top} best plans with distinct outer configurations{within}{network}"
          f" ({res.solved:,} of {res.outer_configs:,} configurations solved exactly,"
          f" {res.solve_time_s:.2f} s; {claim})")
    cells = [train_cost_cells(tc) if tc is not None else [] for tc in costs]
    train_heads = [name for name, _ in cells[0]] if cells and cells[0] else []
    quantile = inst.search.objective != "mean"  # ranked by the quantile: show it beside the time
    rows = [[str(i + 1), seconds(r.objective_s), *([seconds(r.quantile_s)] if quantile else []),
             "-" if t.interval_s is None else f"{seconds(t.interval_s[0])} .. {seconds(t.interval_s[1])}",
             f"{100 * (r.quantile_s / best - 1):+.2f}%", f"{r.breakdown.tokens_per_s:,.0f}",
             *(value for _, value in c), describe_plan(r.plan, inst)]
            for i, (r, c, t) in enumerate(zip(res.ranked, cells, trusts))]
    heads = ["#", "iteration" if objective == "nominal" else objective,
             *([inst.search.objective] if quantile else []), "likely measured (80%)", "vs best", "tokens/s"]
    print(table([*heads, *train_heads, "plan"], rows, align="l" + "r" * (len(heads) - 1 + len(train_heads)) + "l"))
    if not res.ranked:  # under a limit that stopped it, nothing is proved about memory
        print("no plan fits memory" if proved(res) else "no plan found before the time limit")
    for path in _write_top_plans(args, inst, read, res, objective) if args.output else []:
        print(f"wrote {path}")
    return _top_code(res)


def _top_instance(args, read):
    """(instance, objective, backend) --top plans: a flat instance as it is, on the nominal
    network; one shown as node groups (solver/plan_text.shown_as_groups) with the objective
    asked for, by the multi-class formulations (dp solves the single-class split only)."""
    from paraplan.solver.commands import groups
    if not shown_as_groups(read):
        groups.no_scenarios(args)
        return read, "nominal", args.backend
    inst, objective = groups.load_mixed(args, read)
    return inst, objective, "milp" if args.backend == "milp" else "cpsat"


def _top_code(res) -> int:
    """--top's exit status: EXIT_INFEASIBLE when it proved that no plan fits, 3 when the time
    limit stopped it before any plan (status_code's 'timeout')."""
    if res.ranked:
        return 0
    return EXIT_INFEASIBLE if proved(res) else status_code("timeout")


def proved(res) -> bool:
    """Whether --top's list is proved to be the K best: the search settled every configuration
    (optimal), or proved that none fits (infeasible)."""
    return res.status in ("optimal", "infeasible")


def _write_top_plans(args, inst, read, res, objective: str) -> list[str]:
    """-o FILE with --top K: plan k goes to FILE's stem + '-k' (plans-1.yaml, plans-2.yaml, ...),
    each a plan file like plan -o writes (solver/outputs.plan_file)."""
    from pathlib import Path

    out = Path(args.output)
    paths = []
    for k, r in enumerate(res.ranked, start=1):
        path = str(out.with_name(f"{out.stem}-{k}{out.suffix}"))
        header = (f"# paraplan plan {k} of the {len(res.ranked)} best for {inst.name}:"
                  f" {objective} objective {r.objective_s:.6g} s\n")
        write_plan_file(path, header, plan_file(inst, r.plan, read))
        paths.append(path)
    return paths


def cmd_exhaustive(args) -> int:
    """Brute force over the declared space: one search on one group and on mixed clusters, a
    one-group file shown as its homogeneous plan."""
    from paraplan.cost.readers.plan_writer import plan_to_mapping
    from paraplan.solver.commands.groups import class_instance
    from paraplan.solver.exhaustive import SpaceTooLarge, exhaustive

    inst, objective = class_instance(args)
    try:  # progress bar and time limit alike on every cluster
        res = exhaustive(inst, objective, max_candidates=args.max_candidates,
                                progress=progress_enabled(args), time_limit_s=args.time_limit_s)
    except SpaceTooLarge as e:
        raise InstanceError(inst.source, "search", str(e),
                            "narrow the space under 'search:' or raise --max-candidates")
    status = ("optimal" if res.plan else "infeasible") if res.complete else "timeout"
    reason = None if res.plan is not None else exhaustive_reason(inst, res.outer_configs)
    iter_time_s = trust = None
    if res.plan is not None:  # the best plan's predicted time and how far to trust it, as `plan` prints them
        from paraplan.cost.simulate import simulate
        from paraplan.cost.trust import plan_trust
        # a cluster's objective_s may aggregate its networks: its time on the nominal one
        iter_time_s = res.objective_s if inst.flat else simulate(inst, res.plan).iter_time_s
        trust = plan_trust(inst, res.plan, iter_time_s)
    if args.json:
        _emit_json({"status": status, "complete": res.complete, "objective": objective,
                    "objective_s": res.objective_s, "iter_time_s": iter_time_s,
                    "interval_s": None if trust is None or trust.interval_s is None else list(trust.interval_s),
                    "candidates": res.candidates, "feasible": res.feasible,
                    "outer_configs": res.outer_configs, "solve_time_s": res.wall_time_s,
                    "reason": reason if res.complete else "stopped by the time limit: nothing is proved",
                    "plan": plan_to_mapping(res.plan, inst) if res.plan else None})
        return status_code(status)
    print(f"{res.candidates:,} candidates ({res.outer_configs:,} outer configs), {res.feasible:,} fit memory,"
          f" {res.wall_time_s:.2f} s")
    if not res.complete:  # stopped by the time limit: nothing is proved
        print(f"STOPPED by the time limit ({args.time_limit_s:g} s) after {res.candidates:,} candidates:"
              " nothing is proved; the best seen is shown")
        if res.plan is None:
            print("no plan seen yet")
    if res.plan is None:
        if res.complete:
            print(reason)
    else:
        quantile = (f"; {seconds(res.quantile_s)} at {inst.search.objective}, the value minimised"
                    if inst.search.objective != "mean" and res.quantile_s is not None else "")
        network = "the nominal network" if len(inst.scenarios) > 1 else None
        print(f"best        {seconds(res.objective_s)} {objective_text(objective, len(inst.scenarios), network)}"
              + quantile)
        print("plan        " + "\n            ".join(plan_lines(res.plan, inst)))
        print(trust_lines(trust)[0])
    return status_code(status)


def exhaustive_reason(inst, outer_configs: int) -> str:
    """Why exhaustive search found no plan: an empty space (the planner's wording; on node
    groups the rule that emptied it), or memory."""
    if outer_configs:
        return "no plan fits memory"
    from paraplan.solver.plan_text import shown_as_groups
    if shown_as_groups(inst):
        from paraplan.solver.space import empty_space_reason
        return "the declared space is empty: " + empty_space_reason(inst)
    from paraplan.solver.planner import infeasible_reason
    return infeasible_reason(inst, [])


def cmd_verify(args) -> int:
    """The exact DP (one group), CP-SAT, MILP and exhaustive search on one instance, sharing one
    time limit; prints what was compared. Exit 0 only when all of them ran to a proof and agree."""
    from paraplan.solver.search import search
    from paraplan.solver.commands.groups import class_instance
    from paraplan.solver.commands.limits import Deadline
    from paraplan.solver.commands.verdict import exhaustive_method, report_verify

    inst, objective = class_instance(args)
    flat = inst.flat  # the exact DP solves one class on one network
    deadline = Deadline(args.time_limit_s)
    # (method, status, value minimised or None, solve time or None, note, predicted time or
    # None): the methods agree on the value each minimised (the quantile of search.objective,
    # what the proof is for; the predicted time under `mean`), the predicted time shown beside it
    methods = []
    tol = 0.0
    for backend in ("dp", "cpsat", "milp") if flat else ("cpsat", "milp"):
        if flat and deadline.expired():
            methods.append((backend, "skipped", None, None, "time limit reached before it started", None))
            continue
        res = search(inst, backend, max(deadline.remaining_s(), 1e-3), objective)
        tol = max(tol, res.tolerance_s)
        value = res.objective_s if res.quantile_s is None else res.quantile_s
        methods.append((backend, res.status, value, res.solve_time_s, "", res.objective_s))
    methods.append(exhaustive_method(inst, objective, args.max_candidates,
                                     progress_enabled(args), deadline))
    code = report_verify(args, methods, tol, objective, inst.search.objective)
    # verified (every method proved its answer, all agree) and no method found a plan
    return EXIT_INFEASIBLE if code == 0 and all(m[2] is None for m in methods) else code


def cmd_bench(args) -> int:
    check_output_path(getattr(args, "csv", None), "--csv")
    check_output_path(getattr(args, "json", None), "--json")
    if args.mixed:
        from paraplan.solver.bench.mixed import run_mixed_bench
        return run_mixed_bench(args)
    from paraplan.solver.bench.ladder import run_bench
    return run_bench(args)


def cmd_calibrate(args) -> int:
    from paraplan.cost.calibration import predict_rows
    from paraplan.cost.fit import apply_params, family_weights, fit
    from paraplan.cost.readers.gpus import load_catalogue

    rows, _ = read_calibration_files(args.file)
    cat = load_catalogue()
    result = fit(rows, cat, sweeps=args.sweeps, log=lambda m: print(m, file=sys.stderr))
    bounds = result.on_bound()
    print(table(["parameter", "start", "fitted", "physical range", "note"],
                [[p.name, f"{result.start[p.name]:.4g}", f"{result.values[p.name]:.4g}",
                  f"{p.lo:.4g} - {p.hi:.4g}",
                  f"on its {bounds[p.name]} bound: the model is missing something" if p.name in bounds else ""]
                 for p in result.params], align="lrrrl"))
    fitted_cat, net = apply_params(cat, result.values, result.params)
    preds = predict_rows(rows, fitted_cat, net)
    errs = [(w, abs(r.error)) for w, r in zip(family_weights(rows), preds) if r.error is not None]
    plain = sum(e for _, e in errs) / len(errs) if errs else float("nan")
    weighted = sum(w * e for w, e in errs) / sum(w for w, _ in errs) if errs else float("nan")
    print(f"family-weighted mean |log error| {result.start_loss:.4f} -> {result.loss:.4f};"
          f" with the fitted values MAPE {100 * plain:.2f}% over {len(errs)} rows,"
          f" family-weighted MAPE {100 * weighted:.2f}%")
    print("(copy them into cost/gpus.yaml and cost/comm.py to adopt them)")
    return 0


def _add_objective_args(parser) -> None:
    """--robust / --expected: optimise over the instance's network scenarios."""
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--robust", action="store_true",
                   help="minimise the worst-case iteration time over the network scenarios")
    g.add_argument("--expected", action="store_true",
                   help="minimise the probability-weighted iteration time over the scenarios")


def register(sub) -> None:
    p = sub.add_parser("plan", help="find the provably fastest plan in the declared space")
    _add_objective_args(p)
    add_instance_args(p)
    p.add_argument("--backend", choices=("dp", "cpsat", "milp"), default="dp", help=HELP_BACKEND)
    p.add_argument("--time-limit-s", type=float, default=60.0, help=HELP_TIME_LIMIT_S)
    p.add_argument("--threads", type=int, default=1, help=HELP_THREADS)
    p.add_argument("--json", action="store_true", help=HELP_JSON)
    p.add_argument("-o", "--output", help="write the plan as YAML (readable by simulate --plan);"
                   " with --top K, plan k to the file name with -k before its suffix")
    add_progress_arg(p)
    p.add_argument("--top", type=int, metavar="K",
                   help="list the K best plans with distinct outer configurations (solver/solve.py)")
    p.add_argument("--within", type=float, metavar="PCT",
                   help="with --top: only plans within PCT percent of the optimum")
    p.add_argument("--sensitivity", action="store_true",
                   help="re-solve with each fitted efficiency at the ends of its uncertainty range")
    p.set_defaults(func=cmd_plan)

    e = sub.add_parser("exhaustive", help="brute-force the same declared space")
    add_instance_args(e)
    e.add_argument("--max-candidates", type=int, default=20_000_000, help=HELP_MAX_CANDIDATES)
    e.add_argument("--time-limit-s", type=float, default=None,
                   help="stop after this many wall-clock seconds (then nothing is proved)")
    _add_objective_args(e)
    e.add_argument("--json", action="store_true", help=HELP_JSON)
    e.add_argument("--quiet", action="store_true")
    e.set_defaults(func=cmd_exhaustive)

    v = sub.add_parser("verify", help="the DP, CP-SAT, MILP and exhaustive search must agree")
    add_instance_args(v)
    v.add_argument("--time-limit-s", type=float, default=120.0,
                   help=HELP_TIME_LIMIT_S + "; the four methods share it")
    v.add_argument("--max-candidates", type=int, default=20_000_000,
                   help=HELP_MAX_CANDIDATES + " (exhaustive search is then left out)")
    _add_objective_args(v)
    v.add_argument("--json", action="store_true", help=HELP_JSON)
    v.add_argument("--quiet", action="store_true")
    v.set_defaults(func=cmd_verify)

    b = sub.add_parser("bench", help="solver vs exhaustive on a ladder of growing instances")
    b.add_argument("--max-exhaustive-s", type=float, default=600.0,
                   help="skip exhaustive search on rungs estimated to take longer")
    b.add_argument("--csv", help="also write the results as CSV")
    b.add_argument("--json", help="also write the results as JSON")
    b.add_argument("--quick", action="store_true", help="small ladder only (CI smoke run)")
    b.add_argument("--mixed", "--hetero", dest="mixed", action="store_true",  # --hetero: its old name
                   help="mixed-cluster instances: optimum vs largest group alone vs uniform split")
    b.add_argument("--quiet", action="store_true")
    b.set_defaults(func=cmd_bench)

    c = sub.add_parser("calibrate", help="re-fit the efficiency parameters to published runs, each"
                       " source family weighted equally; flags values on their physical bound")
    c.add_argument("file", nargs="*", help="calibration rows (default: both bundled files, cost/published/)")
    c.add_argument("--sweeps", type=int, default=5,
                   help="passes of the coordinate search over the parameters, each with a smaller"
                        " step (cost/fit.py)")
    c.set_defaults(func=cmd_calibrate)

    from paraplan.solver.commands import groups as group_commands
    group_commands.register(sub)
