"""`paraplan export PLAN --to megatron|torchtitan|deepspeed|layout [--instance INSTANCE]
[--strict | --force] [--json] [-o FILE]`.

Writes the plan (a YAML written by `paraplan plan -o`, which carries the instance it was made
for; `--instance` overrides it and is needed for plan files without one) as the chosen
framework's settings, to stdout or FILE.

- Exact export (the target runs the plan as planned): the configuration, exit 0.
- Otherwise the closest configuration the target runs is written, and every deviation is
  reported, never dropped: after the configuration as `# paraplan: deviation: ...` comment
  lines (Megatron-LM and torchtitan; JSON has no comments, so the DeepSpeed file stays valid
  JSON without them) and on stderr. `--strict` refuses any deviation instead.
- The emitted configuration is always priced again by cost/ as the target runs it. One that
  paraplan predicts will not run as planned (it does not fit memory, or runs more than
  solver/export/common.MAX_SLOWDOWN, 5%, slower than the plan) is refused: exit 2, one line
  giving both numbers, nothing written. `--force` writes it anyway, with the reason and both
  predictions after the deviations in the file (stderr only for DeepSpeed's JSON).
- Refused in one line (exit 2) whatever the flags: a plan the target cannot run at all (a
  DualPipe plan, common.refuse_dualpipe; a model it has no layers for) and a mixed-cluster plan
  (no framework runs the stages of one job on different GPU types with different layouts).
  `--to layout` writes what can be written of such a plan instead, its per-group launch layout
  (solver/export/layout.py), on the instance its plan file carries or --instance INSTANCE.
- Whenever the emitted configuration is not the plan as planned (a deviation, or another
  framework than the plan was made for), the predicted time and memory of both are printed on
  stderr (and given in --json).
- `--json` prints one object (below) instead of the configuration; `-o` still writes the file.
Bad input raises InstanceError, which the CLI turns into exit 2 with one line.

JSON fields: `target`, `target_version`, `exact`, `strict`, `force`, `plan_framework`, `config`
(the file's text), `output` (the path written, or null), `deviations`, `notes` (lists of lines),
`will_not_run` (why it was written only under --force, or null), `plan` and `emitted`, each
with `framework`, `iter_time_s`, `interval_s` (the 80% band of the measured time, as
`simulate` gives it, or null), `peak_mem_bytes`, `capacity_bytes`, `fits`, and
`emitted.plan` (the emitted plan, in the plan-file schema).
"""

from __future__ import annotations

import json
import re
import sys

from paraplan.cost.errors import InstanceError
from paraplan.solver.export import (FORMATS, MAX_SLOWDOWN, ExportRefused, ExportResult, compare,
                                   will_not_run)
from paraplan.solver.format import gib


def render(result: ExportResult, to: str, forced: tuple[str, ...] = ()) -> str:
    """The file's text: the configuration, then the deviations and, when written under --force,
    why paraplan predicts it will not run as planned (`forced` lines), as comments where the
    format has comments."""
    prefix = FORMATS[to][1]
    if prefix is None:
        return result.text
    return (result.text + "".join(f"{prefix} paraplan: deviation: {item}\n" for item in result.unsupported)
            + "".join(f"{prefix} paraplan: forced: {item}\n" for item in forced))


def _prediction_line(label: str, framework: str, pred) -> str:
    fits = "fits" if pred.fits else "DOES NOT FIT"
    band = ("" if pred.interval_s is None else
            f" (likely measured {pred.interval_s[0]:.4g}-{pred.interval_s[1]:.4g} s, 80%)")
    return (f"{label} ({framework}): {pred.iter_time_s:.4g} s per iteration{band}, peak memory"
            f" {gib(pred.peak_mem_bytes)} of {gib(pred.capacity_bytes)} ({fits})")


# Why a plan of several replica classes or GPU types is refused: a framework's configuration is
# one layout (degrees, layer split, micro-batch count) that every rank of the job shares, and
# none of them chooses which GPU type a pipeline stage's ranks run on.
MIXED_REASON = ("no framework we export to (Megatron-LM, torchtitan, DeepSpeed) runs the stages"
                " of one job on different GPU types with different layouts: each gives every"
                " rank one layout (degrees, layer split, micro-batch count) and none places"
                " pipeline stages by GPU type")
MIXED_FIX = ("write its per-group launch layout with --to layout (with --instance INSTANCE.yaml"
             " for a plan file written without its instance), or plan for one GPU type (an"
             " instance without cluster.groups) to export it")


def _classes(plan, inst) -> str:
    """The replica classes of `plan`, in a few words."""
    names = [g.name for g in inst.cluster.groups]
    parts = [f"{c.replicas} x [{', '.join(names[g] for g in c.stage_groups)}]" for c in plan.classes]
    return f"{len(plan.classes)} replica class{'es' if len(plan.classes) != 1 else ''} ({'; '.join(parts)})"


def _instance_and_plan(args, one_layout: bool):
    """(instance, plan) of the plan file, each read once: the instance --instance names, else the
    one the plan file carries (`plan -o` writes it beside the plan). A framework's configuration
    (`one_layout`) takes a plan of one class on every GPU of one group (Plan.is_flat_on, in
    whichever form its file writes it), refusing any other with MIXED_REASON; --to layout takes
    the others."""
    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.readers.plan_reader import plan_file_instance, plan_from_mapping
    from paraplan.cost.readers.strict_yaml import read_yaml

    data = read_yaml(args.plan)
    if args.instance:
        inst = load_instance(args.instance)
        if one_layout and len(inst.cluster.groups) > 1:
            raise InstanceError(args.instance, "cluster.groups", "a cluster of several node groups:"
                                f" {MIXED_REASON}", MIXED_FIX)
    else:
        inst = plan_file_instance(data, args.plan)
        if inst is None:
            raise InstanceError(args.plan, "instance", "the plan file carries no instance (written"
                                " by hand, or by a paraplan before plan files carried one)",
                                "pass --instance INSTANCE.yaml, the instance the plan was made for")
    plan = plan_from_mapping(data, inst, args.plan)  # InstanceError names the file when they disagree
    if one_layout and not plan.is_flat_on(inst.cluster):
        raise InstanceError(args.plan, "plan.classes", f"a plan of {_classes(plan, inst)}:"
                            f" {MIXED_REASON}", MIXED_FIX)
    if not one_layout and plan.is_flat_on(inst.cluster):
        raise InstanceError(args.plan, "--to layout", "a plan of one replica class on one GPU type"
                            " runs as one framework configuration", "export it --to megatron,"
                            " torchtitan or deepspeed")
    return inst, plan


def _why(inst, e) -> str:
    """What makes the emitted configuration differ from the plan, in a few words."""
    if e.deviations:
        first = re.split(r"[:(]", e.deviations[0])[0].strip()  # its subject, before the detail
        more = f" and {len(e.deviations) - 1} more" if len(e.deviations) > 1 else ""
        return f"it deviates from the plan: {first}{more}"
    return (f"the plan was made for {inst.job.framework.value}, and {e.inst.job.framework.value}"
            " gathers, reduces and stores differently")


def _replan(inst, to: str) -> str:
    if inst.job.framework.value != to and inst.model.moe is None:
        return f"plan for {to} (job.framework: {to})"
    if inst.job.framework.value != to:  # the loader prices experts as Megatron-core runs them only
        return "export it to megatron, which the plan's experts were priced for"
    return f"plan without the settings {to} cannot run (--force lists them)"


def _write(args, text: str, json_obj) -> None:
    """The configuration `text` to -o FILE, then on stdout the JSON object json_obj() under
    --json, else `text` where no file was given."""
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as err:
            raise InstanceError(args.output, "<file>", f"cannot be written ({err.strerror})",
                                "check that the directory exists and is writable") from None
    if args.json:
        json.dump(json_obj(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif not args.output:
        sys.stdout.write(text)


def cmd_layout(args) -> int:
    """`--to layout`: a plan in the group format as its per-group launch layout
    (solver/export/layout.py), on the instance --instance names, else the one the plan file
    carries."""
    from paraplan.solver.export.layout import LAYOUT_VERSION, layout_mapping, to_layout

    for flag in ("strict", "force"):
        if getattr(args, flag):  # never silently ignored
            raise InstanceError("<arguments>", f"--{flag}", "has no meaning with --to layout (a"
                                " layout is written as planned, nothing in it is replaced)",
                                f"drop --{flag}")
    inst, plan = _instance_and_plan(args, one_layout=False)  # a flat instance file as its one group
    text = to_layout(inst, plan)
    _write(args, text, lambda: {"target": "layout", "target_version": f"layout_version {LAYOUT_VERSION}",
                                "config": text, "output": args.output or None,
                                "layout": layout_mapping(inst, plan)})
    return 0


def cmd_export(args) -> int:
    if args.to == "layout":
        return cmd_layout(args)
    inst, plan = _instance_and_plan(args, one_layout=True)
    exporter, _, version = FORMATS[args.to]
    try:
        result = exporter(inst, plan)
    except ExportRefused as e:
        raise InstanceError(args.plan, f"--to {args.to}", str(e), e.fix) from None
    e = result.emitted
    if args.strict and not e.exact:
        more = f" (and {len(e.deviations) - 1} more)" if len(e.deviations) > 1 else ""
        raise InstanceError(args.plan, f"--to {args.to} --strict",
                            f"{args.to} cannot run the plan as planned: {e.deviations[0]}{more}",
                            f"drop --strict to get the closest {args.to} configuration, or plan"
                            f" for it (job.framework: {args.to})")
    cmp = compare(inst, plan, e)
    problem = will_not_run(cmp)
    if problem and not args.force:
        raise InstanceError(args.plan, f"--to {args.to}", "paraplan predicts the emitted"
                            f" {args.to} configuration will not run as planned ({_why(inst, e)}):"
                            f" {problem}", _replan(inst, args.to) + ", or pass --force to write it"
                            " anyway with the deviations in the file")
    # the plan as planned and the emitted configuration, each predicted (stderr, and the file
    # under --force)
    predictions = (_prediction_line("the plan as planned", inst.job.framework.value, cmp.plan),
                   _prediction_line("the emitted configuration", args.to, cmp.emitted))
    forced = () if problem is None else (f"predicted not to run as planned: {problem}", *predictions)
    text = render(result, args.to, forced)

    def pred(p, framework):
        return {"framework": framework, "iter_time_s": p.iter_time_s,
                "interval_s": None if p.interval_s is None else list(p.interval_s),
                "peak_mem_bytes": p.peak_mem_bytes, "capacity_bytes": p.capacity_bytes,
                "fits": p.fits}

    def json_obj():
        from paraplan.cost.readers.plan_writer import plan_to_mapping
        return {"target": args.to, "target_version": version, "exact": e.exact,
                "strict": bool(args.strict), "force": bool(args.force),
                "plan_framework": inst.job.framework.value,
                "config": text, "output": args.output or None,
                "deviations": list(e.deviations), "notes": list(e.notes), "will_not_run": problem,
                "plan": pred(cmp.plan, inst.job.framework.value),
                "emitted": {**pred(cmp.emitted, args.to), "plan": plan_to_mapping(e.plan)}}

    _write(args, text, json_obj)
    for item in e.deviations:
        print(f"paraplan: deviation: {item}", file=sys.stderr)
    for item in e.notes:
        print(f"paraplan: note: {item}", file=sys.stderr)
    if problem:
        print(f"paraplan: warning: written under --force, predicted not to run as planned: {problem}",
              file=sys.stderr)
    if e.inst != inst or e.plan != plan:  # another framework, a deviation, or a model it changes
        for line in predictions:
            print(f"paraplan: {line}", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="write a plan as Megatron-LM, torchtitan or DeepSpeed settings")
    p.add_argument("plan", help="plan YAML (as written by `paraplan plan -o`)")
    p.add_argument("--to", required=True, choices=(*FORMATS, "layout"),
                   help="megatron: bash snippet with the Megatron-LM arguments; torchtitan: 0.2.x"
                        " TOML job config; deepspeed: JSON config; layout: a plan of several"
                        " replica classes or GPU types as its per-group launch layout (YAML:"
                        " ranks, stages, layers, micro-batches per group; solver/export/layout.py)")
    p.add_argument("--instance",
                   help="the instance YAML the plan was made for (default: the one the plan file"
                        " carries)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--strict", action="store_true",
                      help="fail (exit 2) instead of writing a configuration that differs from the"
                           " plan in any setting")
    mode.add_argument("--force", action="store_true",
                      help="write the configuration even where paraplan predicts it will not run as"
                           " planned (does not fit memory, or more than"
                           f" {100 * MAX_SLOWDOWN:.0f}%% slower than the plan),"
                           " with the reason and both predictions as comments in the file")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: the configuration, deviations, notes and the"
                        " predicted time and memory of the plan and of the emitted configuration")
    p.add_argument("-o", "--output", help="write the configuration here instead of stdout")
    p.set_defaults(func=cmd_export)
