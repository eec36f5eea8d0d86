"""`paraplan export PLAN --to megatron|torchtitan|deepspeed [--instance INSTANCE] [--strict]
[--json] [-o FILE]`.

Writes the plan (a YAML written by `paraplan plan -o`, which carries the instance it was made
for; `--instance` overrides it and is needed for plan files without one) as the chosen
framework's settings, to stdout or FILE.

- Exact export (the target runs the plan as planned): the configuration, exit 0.
- Otherwise the closest configuration the target runs is written, and every deviation is
  reported, never dropped: after the configuration as `# paraplan: deviation: ...` comment
  lines (Megatron-LM and torchtitan; JSON has no comments, so the DeepSpeed file stays valid
  JSON without them) and on stderr. `--strict` refuses instead: exit 2, one line, nothing
  written.
- Whenever the emitted configuration is not the plan as planned (a deviation, or another
  framework than the plan was made for), the predicted time and memory of both are printed on
  stderr (and given in --json): the emitted one re-simulated by cost/ as the target runs it.
- `--json` prints one object (below) instead of the configuration; `-o` still writes the file.
Bad input raises InstanceError, which the CLI turns into exit 2 with one line.

JSON fields: `target`, `target_version`, `exact`, `strict`, `plan_framework`, `config` (the
file's text), `output` (the path written, or null), `deviations`, `notes` (lists of lines),
`plan` and `emitted`, each with `framework`, `iter_time_s`, `peak_mem_bytes`,
`capacity_bytes`, `fits`, and `emitted.plan` (the emitted plan, in the plan-file schema).
"""

from __future__ import annotations

import json
import sys

from paraplan.cost.errors import InstanceError
from paraplan.solver.export import FORMATS, ExportRefused, ExportResult, compare
from paraplan.solver.format import gib


def render(result: ExportResult, to: str) -> str:
    """The file's text: the configuration, then the deviations as comments where the format
    has comments."""
    prefix = FORMATS[to][1]
    if prefix is None:
        return result.text
    return result.text + "".join(f"{prefix} paraplan: deviation: {item}\n"
                                 for item in result.unsupported)


def _prediction_line(label: str, framework: str, pred) -> str:
    fits = "fits" if pred.fits else "DOES NOT FIT"
    return (f"{label} ({framework}): {pred.iter_time_s:.4g} s per iteration, peak memory"
            f" {gib(pred.peak_mem_bytes)} of {gib(pred.capacity_bytes)} ({fits})")


def _load(args):
    from paraplan.cost.loader import load_instance, load_plan, plan_file_instance

    if args.instance:
        inst = load_instance(args.instance)
    else:
        inst = plan_file_instance(args.plan)
        if inst is None:
            raise InstanceError(args.plan, "instance", "the plan file carries no instance (written"
                                " by hand, or by a paraplan before plan files carried one)",
                                "pass --instance INSTANCE.yaml, the instance the plan was made for")
    return inst, load_plan(args.plan, inst)  # InstanceError names the file when they disagree


def cmd_export(args) -> int:
    inst, plan = _load(args)
    exporter, _, version = FORMATS[args.to]
    try:
        result = exporter(inst, plan)
    except ExportRefused as e:
        raise InstanceError(args.plan, f"--to {args.to}", str(e),
                            "export to another framework") from None
    e = result.emitted
    if args.strict and not e.exact:
        more = f" (and {len(e.deviations) - 1} more)" if len(e.deviations) > 1 else ""
        raise InstanceError(args.plan, f"--to {args.to} --strict",
                            f"{args.to} cannot run the plan as planned: {e.deviations[0]}{more}",
                            f"drop --strict to get the closest {args.to} configuration, or plan"
                            f" for it (job.framework: {args.to})")
    text = render(result, args.to)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as err:
            raise InstanceError(args.output, "<file>", f"cannot be written ({err.strerror})",
                                "check that the directory exists and is writable") from None
    # another framework, a deviation, or a model the framework changes (a padded vocabulary)
    differs = e.inst != inst or e.plan != plan
    cmp = compare(inst, plan, e) if differs or args.json else None
    if args.json:
        from paraplan.cost.loader import plan_to_mapping

        def pred(p, framework):
            return {"framework": framework, "iter_time_s": p.iter_time_s,
                    "peak_mem_bytes": p.peak_mem_bytes, "capacity_bytes": p.capacity_bytes,
                    "fits": p.fits}

        out = {"target": args.to, "target_version": version, "exact": e.exact,
               "strict": bool(args.strict), "plan_framework": inst.job.framework.value,
               "config": text, "output": args.output or None,
               "deviations": list(e.deviations), "notes": list(e.notes),
               "plan": pred(cmp.plan, inst.job.framework.value),
               "emitted": {**pred(cmp.emitted, args.to), "plan": plan_to_mapping(e.plan)}}
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif not args.output:
        sys.stdout.write(text)
    for item in e.deviations:
        print(f"paraplan: deviation: {item}", file=sys.stderr)
    for item in e.notes:
        print(f"paraplan: note: {item}", file=sys.stderr)
    if cmp is not None and differs:
        print("paraplan: " + _prediction_line("the plan as planned", inst.job.framework.value,
                                              cmp.plan), file=sys.stderr)
        print("paraplan: " + _prediction_line("the emitted configuration", args.to, cmp.emitted),
              file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="write a plan as Megatron-LM, torchtitan or DeepSpeed settings")
    p.add_argument("plan", help="plan YAML (as written by `paraplan plan -o`)")
    p.add_argument("--to", required=True, choices=tuple(FORMATS),
                   help="megatron: bash snippet with the Megatron-LM arguments; torchtitan: 0.2.x"
                        " TOML job config; deepspeed: JSON config")
    p.add_argument("--instance",
                   help="the instance YAML the plan was made for (default: the one the plan file"
                        " carries)")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 2) instead of writing a configuration that differs from the plan")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: the configuration, deviations, notes and the"
                        " predicted time and memory of the plan and of the emitted configuration")
    p.add_argument("-o", "--output", help="write the configuration here instead of stdout")
    p.set_defaults(func=cmd_export)
