"""Sub-commands for changing networks, and the objectives and scenarios they read.

`plan`, `exhaustive` and `verify` (solver/commands/planning.py) read the objective asked for
with the helpers here (`class_instance`, `load_mixed`), and every command shows its instance,
evidence and plan with the one renderer of each (solver/plan_text.py); `replan` and
`timeline` are their own commands.
Every command reads its instance file once (commands/inputs.read_instance) and hands on what
it read.
"""

from __future__ import annotations

import sys

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.solver.format import band_text, likely_text, seconds, table
from paraplan.solver.commands.inputs import add_objective_arg
from paraplan.solver.commands.jsonout import emit_json
from paraplan.solver.outputs import check_output_path, plan_file, write_plan_file
from paraplan.solver.commands.parser import HELP_BACKEND_MIXED, HELP_JSON, HELP_TIME_LIMIT_S
from paraplan.solver.plan_text import describe_cluster, describe_plan, evidence, plan_lines, shown_as_groups


def no_scenarios(args) -> None:
    """Refuse --robust / --expected on a homogeneous file: it declares no network scenarios."""
    objective = objective_of(args)
    if objective != "nominal":
        raise InstanceError(args.instance or "<arguments>", "scenarios",
                            f"--{objective} needs network scenarios, which only the group format has",
                            "write the cluster as `groups:` with `scenarios:` (see instances/mixed/)")


def class_instance(args):
    """(instance, objective): the instance the arguments name and the objective asked for,
    nominal on an instance shown in the flat format (shown_as_groups)."""
    from paraplan.solver.commands.inputs import read_instance
    read = read_instance(args)
    if shown_as_groups(read):
        return load_mixed(args, read)
    no_scenarios(args)
    return read, "nominal"


def objective_of(args) -> str:
    return "robust" if getattr(args, "robust", False) else (
        "expected" if getattr(args, "expected", False) else "nominal")


def load_mixed(args, read):
    """The instance the arguments name (`read`: as read_instance read it) as a cluster of node
    groups, and the objective asked for, which its scenarios must allow."""
    if not read.written_as_groups:
        no_scenarios(args)
    inst, objective = read, objective_of(args)
    if objective == "nominal":
        return inst, objective
    if len(inst.scenarios) < 2:
        raise InstanceError(inst.source, "scenarios", f"--{objective} needs network scenarios",
                            "add a `scenarios:` section (see instances/mixed/llama3-8b-dynamic.yaml)")
    if objective == "expected" and any(s.probability is None for s in inst.scenarios):
        raise InstanceError(inst.source, "scenarios", "--expected needs a probability on every scenario",
                            "give each scenario a `probability:` (nominal gets the rest)")
    return inst, objective


def regret_rows(regs) -> list[list[str]]:
    return [[r.scenario, seconds(r.plan_time_s), seconds(r.optimum_s), r.optimum_status,
             f"{100 * r.regret:+.2f}%"] for r in regs]


def plan_sensitivity(args, inst, plan, backend: str, objective: str = "nominal") -> dict:
    """--sensitivity of `plan` on `inst`, both as the planner plans them (a cluster of node
    groups, a plan of replica classes; solver/sensitivity.py), re-planned by the backend that
    planned it, with the arguments' time limit and threads."""
    from paraplan.solver.sensitivity import sensitivity
    return sensitivity(inst, plan, objective, backend, args.time_limit_s, getattr(args, "threads", 1),
                       describe_plan)


def cmd_replan(args) -> int:
    from paraplan.cost.readers.scenarios import load_event
    from paraplan.cost.readers.plan_reader import load_plan
    from paraplan.solver.dynamic import replan
    from paraplan.solver.commands.inputs import read_instance

    check_output_path(args.output, "-o/--output")  # before anything is solved
    inst = read_instance(args)  # a homogeneous cluster is the one-group case: its group is named after its GPU
    current = load_plan(args.plan, inst)
    event, remaining_s, remaining_it = load_event(args.event, inst)
    r = replan(inst, current, event, remaining_s, remaining_it, args.backend, args.time_limit_s)
    after = inst.with_cluster(event.cluster)  # the instance on the network after the event
    try:
        return _show_replan(args, inst, r, _replan_trusts(after, current, r))
    finally:  # after the result is shown: a full disk loses nothing
        if args.output and r.new.plan is not None:
            header = (f"# paraplan replan of {inst.name} after {event.name}: {r.new.status},"
                      f" {r.new.objective_s:.6g} s per iteration\n")
            # with the instance after the event (the cluster the new plan runs on), so that the
            # file reads back alone: `simulate NEW.yaml` prices the new plan on the changed network
            write_plan_file(args.output, header, plan_file(after, r.new.plan, after))


def _replan_trusts(after, current, r) -> tuple:
    """How far to trust the running plan's time after the event and the new plan's predicted
    time (cost/trust.plan_trust on the instance after the event; None without a new plan)."""
    from paraplan.cost.trust import plan_trust
    return (plan_trust(after, current, r.current_time_s),
            None if r.new.plan is None else plan_trust(after, r.new.plan, r.new.objective_s))


def _band(trust) -> list | None:
    return None if trust is None or trust.interval_s is None else list(trust.interval_s)


def _show_replan(args, inst, r, trusts) -> int:
    from paraplan.solver.format import trust_lines
    running, new = trusts
    if args.json:
        from paraplan.cost.readers.plan_writer import plan_to_mapping
        emit_json({"status": r.new.status, "event": r.event, "before_s": r.before_time_s, "current_after_event_s": r.current_time_s,
                   "current_after_event_interval_s": _band(running),
                   "new_status": r.new.status, "new_s": r.new.objective_s, "new_interval_s": _band(new),
                   "new_bound_s": r.new.bound_s,
                   "switch_s": r.switch_s, "remaining_iterations": r.remaining_iterations,
                   "stay_total_s": r.stay_s, "switch_total_s": r.switch_total_s, "pays_off": r.pays_off,
                   "break_even_iterations": r.break_even_iterations, "solve_time_s": r.solve_time_s,
                   "new_plan": plan_to_mapping(r.new.plan, inst) if r.new.plan else None})
        return 0
    print(describe_cluster(inst))
    print(f"event       {r.event}")
    print(f"running     {seconds(r.before_time_s)} per iteration before, {seconds(r.current_time_s)} after the event"
          + likely_text(_band(running)))
    print(evidence(r.new, inst, network=f"the network after {r.event}"))
    if r.new.plan is not None:
        print("new plan    " + "\n            ".join(plan_lines(r.new.plan, inst)))
        print(trust_lines(new)[0])
    print(f"switching   {seconds(r.switch_s)} (restart + checkpoint save and resharded load)")
    print(f"remaining   {r.remaining_iterations:,.0f} iterations: stay {r.stay_s / 3600:.2f} h,"
          f" switch {r.switch_total_s / 3600:.2f} h")
    be = r.break_even_iterations
    verdict = "SWITCH: it pays off" if r.pays_off else "STAY: switching does not pay off"
    print(f"verdict     {verdict}" + (f" (break-even after {be:,.0f} iterations)" if be else
                                      " (the running plan is already optimal on the new network)"))
    print(f"answered in {r.solve_time_s:.2f} s")
    return 0


def cmd_timeline(args) -> int:
    from paraplan.solver.commands.inputs import read_instance
    from paraplan.solver.dynamic import NoTimelinePlan, plan_timeline

    inst = read_instance(args)
    if not inst.written_as_groups:
        raise InstanceError(args.instance, "timeline", "a timeline needs an instance in the group format",
                            "write the cluster as `groups:` and add `scenarios:` and `timeline:`")
    if not inst.timeline:
        raise InstanceError(inst.source, "timeline", "the instance has no timeline",
                            "add a `timeline:` list of {scenario, duration_h} periods")
    log = (lambda m: print(f"  {m}", file=sys.stderr)) if not args.quiet and sys.stderr.isatty() else None
    try:
        r = plan_timeline(inst, args.backend, args.time_limit_s, progress=log)
    except ConfigError as e:
        raise InstanceError(inst.source, "timeline", str(e), "check the timeline's scenarios")
    except NoTimelinePlan as e:
        return _no_timeline_plan(args, e)
    ch = r.choice
    runs = _period_runs(inst, r)
    periods = [[str(i + 1), inst.scenarios[p.scenario].name, f"{p.duration_s / 3600:.1f} h",
                f"#{ch.plan_per_period[i] + 1}", "yes" if i in ch.switches else "",
                seconds(r.times_s[ch.plan_per_period[i]][p.scenario]),
                band_text(band)]
               for i, (p, (_, band)) in enumerate(zip(inst.timeline, runs))]
    if args.json:
        from paraplan.cost.readers.plan_writer import plan_to_mapping
        emit_json({"status": r.status, "iterations": ch.iterations, "upper_bound_iterations":
                   r.upper_bound_iterations if r.gap is not None else None, "gap": r.gap,
                   "static_iterations": r.static_iterations,
                   "follow_iterations": r.follow_iterations, "switch_s": r.switch_s,
                   "plan_per_period": list(ch.plan_per_period), "switches": list(ch.switches),
                   "periods": [{"scenario": inst.scenarios[p.scenario].name, "plan": ch.plan_per_period[i],
                                "objective_s": r.times_s[ch.plan_per_period[i]][p.scenario],
                                "iter_time_s": t, "interval_s": band}
                               for i, (p, (t, band)) in enumerate(zip(inst.timeline, runs))],
                   "candidates": [{"label": lab, "plan": plan_to_mapping(c, inst)}
                                  for lab, c in zip(r.candidate_labels, r.candidates)],
                   "solve_time_s": r.solve_time_s})
        return 0
    print(describe_cluster(inst))
    limited = ("over the whole declared space" if r.complete else
               "(time limit: not every scenario optimum or weighted solve was proved, so the"
               " candidates may miss a better plan)")
    print(f"status      {r.status.upper()} {limited}: multi-period MILP over {len(r.candidates)} candidate"
          f" plans (every extreme point of the scenarios' times); {r.solve_time_s:.2f} s wall")
    bound = ("no upper bound (a scenario optimum has no bound within the limit)" if r.gap is None else
             f"{100 * r.gap:.3f}% below {r.upper_bound_iterations:,.1f}, every period at its scenario's"
             f" optimum with no switch")
    # iterations count at the objective's times (solver/dynamic.objective_time_s): p90 by default
    at = "predicted" if inst.search.objective == "mean" else inst.search.objective
    print(f"iterations  {ch.iterations:,.1f} over the timeline at {at} iteration times; {bound}")
    print(f"baselines   best single plan {r.static_iterations:,.1f}; always switch to the scenario's"
          f" optimum {r.follow_iterations:,.1f}; switching costs {seconds(r.switch_s)}")
    print()
    print(table(["period", "scenario", "duration", "plan", "switch", f"iteration ({at})", "likely measured (80%)"],
                periods, align="lllrlrr"))
    for i, (lab, c) in enumerate(zip(r.candidate_labels, r.candidates)):
        print(f"\nplan #{i + 1} ({lab}):\n  " + "\n  ".join(plan_lines(c, inst)))
    return 0


def _no_timeline_plan(args, e) -> int:
    """`timeline` when no scenario's search returned a plan (solver/dynamic.NoTimelinePlan):
    the status and the reason, and the planning commands' exit status for it."""
    from paraplan.solver.commands.exit_codes import status_code

    if args.json:
        emit_json({"status": e.status, "solve_time_s": e.solve_time_s})
    elif e.status == "infeasible":
        print("status      INFEASIBLE: no plan in the declared space fits any scenario of the timeline")
    else:
        print(f"status      TIMEOUT: the time limit ({args.time_limit_s:g} s) stopped every scenario's"
              f" search before any plan; raise --time-limit-s")
    return status_code(e.status)


def _period_runs(inst, r) -> list[tuple[float, list | None]]:
    """Per period of the timeline, its plan's predicted time on the period's network and that
    time's 80% interval (cost/trust.plan_trust on the instance with the scenario's cluster), as
    `simulate` prints them; each (plan, scenario) priced once."""
    from paraplan.cost.simulate import simulate
    from paraplan.cost.trust import plan_trust
    seen = {}
    for i, p in enumerate(inst.timeline):
        key = (r.choice.plan_per_period[i], p.scenario)
        if key not in seen:
            plan, cluster = r.candidates[key[0]], inst.scenarios[p.scenario].cluster
            t = simulate(inst, plan, cluster=cluster).iter_time_s
            seen[key] = (t, _band(plan_trust(inst.with_cluster(cluster), plan, t)))
    return [seen[(r.choice.plan_per_period[i], p.scenario)] for i, p in enumerate(inst.timeline)]


def register(sub) -> None:
    r = sub.add_parser("replan", help="re-plan after a network event; say whether switching pays off")
    r.add_argument("instance", metavar="INSTANCE")
    r.add_argument("--plan", required=True, help="the running plan (YAML, as written by plan -o)")
    r.add_argument("--event", required=True, help="event YAML (see instances/mixed/events/)")
    r.add_argument("--backend", choices=("cpsat", "milp"), default="cpsat", help=HELP_BACKEND_MIXED)
    r.add_argument("--time-limit-s", type=float, default=60.0, help=HELP_TIME_LIMIT_S)
    r.add_argument("--json", action="store_true", help=HELP_JSON)
    r.add_argument("-o", "--output", help="write the new plan as YAML")
    add_objective_arg(r)
    r.set_defaults(func=cmd_replan)

    t = sub.add_parser("timeline", help="choose a plan per period of a bandwidth timeline")
    t.add_argument("instance", metavar="INSTANCE")
    t.add_argument("--backend", choices=("cpsat", "milp"), default="cpsat", help=HELP_BACKEND_MIXED)
    t.add_argument("--time-limit-s", type=float, default=60.0, help=HELP_TIME_LIMIT_S)
    t.add_argument("--json", action="store_true", help=HELP_JSON)
    t.add_argument("--quiet", action="store_true")
    add_objective_arg(t)
    t.set_defaults(func=cmd_timeline)
