"""`paraplan export PLAN --to megatron|torchtitan|deepspeed --instance INSTANCE [-o FILE]`.

Writes the plan (a YAML written by `paraplan plan -o`) as the chosen framework's settings, to
stdout or FILE. What the framework cannot express is reported, never dropped: after the
configuration as `# paraplan: cannot express ...` comment lines (Megatron-LM arguments and
torchtitan TOML; JSON has no comments, so the DeepSpeed file stays valid JSON without them)
and on stderr, one line each. Exit status 0 either way; bad input raises InstanceError, which
the CLI turns into exit 2 with one line.
"""

from __future__ import annotations

import sys

from cost.errors import InstanceError
from solver.export import FORMATS, ExportResult


def render(result: ExportResult, to: str) -> str:
    """The file's text: the configuration, then the unsupported items as comments where the
    format has comments."""
    prefix = FORMATS[to][1]
    if prefix is None:
        return result.text
    return result.text + "".join(f"{prefix} paraplan: cannot express {item}\n"
                                 for item in result.unsupported)


def cmd_export(args) -> int:
    from cost.loader import load_instance, load_plan

    inst = load_instance(args.instance)
    plan = load_plan(args.plan, inst)  # InstanceError names the file when plan and instance disagree
    exporter, _ = FORMATS[args.to]
    result = exporter(inst, plan)
    if plan.partitions:  # no framework we export to has PrimePar's per-operator partitions
        from solver.partition_cmd import describe_partitions
        lines = describe_partitions(plan, inst)
        if lines:
            result.unsupported.append(
                "the per-operator tensor partitions (" + "; ".join(lines) + "): the export uses"
                f" Megatron 1-D tensor parallelism over tp={plan.tp} instead")
    text = render(result, args.to)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as e:
            raise InstanceError(args.output, "<file>", f"cannot be written ({e.strerror})",
                                "check that the directory exists and is writable") from None
    else:
        sys.stdout.write(text)
    for item in result.unsupported:
        print(f"paraplan: cannot express {item}", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="write a plan as Megatron-LM, torchtitan or DeepSpeed settings")
    p.add_argument("plan", help="plan YAML (as written by `paraplan plan -o`)")
    p.add_argument("--to", required=True, choices=tuple(FORMATS),
                   help="megatron: command-line arguments; torchtitan: v0.2.0 TOML job config;"
                        " deepspeed: JSON config")
    p.add_argument("--instance", required=True,
                   help="the instance YAML the plan was made for (global batch, seq len, layers)")
    p.add_argument("-o", "--output", help="write the configuration here instead of stdout")
    p.set_defaults(func=cmd_export)
