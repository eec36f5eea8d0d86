"""`paraplan` command line. Each sub-command lives in a small function; bad input exits 2 with
one line naming the file, field and fix, never a traceback."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

from cost.errors import ConfigError, InstanceError
from formulations.result import SolverError
from solver.inputs import add_instance_args, load_from_args

EXIT_BAD_INPUT = 2
EXIT_SOLVER = 3  # a solver backend is missing or crashed


def _emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def cmd_simulate(args) -> int:
    from cost.loader import load_plan
    from cost.simulate import simulate
    from solver import hetero_commands
    from solver.format import breakdown_json, breakdown_text

    if hetero_commands.is_hetero(args):
        return hetero_commands.cmd_simulate(args)
    inst = load_from_args(args)
    plan = load_plan(args.plan, inst)
    try:
        bd = simulate(inst, plan)
    except ConfigError as e:
        raise InstanceError(args.plan, "plan", str(e), "make the plan consistent with the instance")
    if args.json:
        _emit_json(breakdown_json(bd))
    else:
        print(f"{inst.name}: {inst.model.name} on {inst.cluster.num_gpus} x {inst.cluster.gpu.name}")
        print(breakdown_text(bd))
    return 0


def cmd_accuracy(args) -> int:
    from cost.calibration import load_rows, mape, predict_rows
    from solver.format import table

    try:
        rows = load_rows(args.file)
    except (OSError, ConfigError) as e:
        raise InstanceError(args.file, "<file>", str(e), "pass a file in the calibration schema")
    except Exception as e:  # malformed YAML and the like: still one line, exit 2
        raise InstanceError(args.file, "<file>", f"cannot read: {e}".splitlines()[0],
                            "pass a file in the calibration schema")
    try:
        results = predict_rows(rows)
    except (KeyError, TypeError) as e:
        raise InstanceError(args.file, f"row field {e}", "missing or of the wrong type",
                            "follow shared/calibration/README.md's schema")
    modelled = [r for r in results if r.error is not None]
    skipped = [r for r in results if r.error is None]
    by_gpu = defaultdict(list)
    for r in modelled:
        by_gpu[r.gpu].append(r)
    if args.json:
        _emit_json({
            "rows": [{"id": r.id, "predicted_iter_time_s": r.predicted_iter_time_s,
                      "measured_iter_time_s": r.measured_iter_time_s, "error": r.error,
                      "fits_memory": r.fits_memory} for r in modelled],
            "mape": mape(results),
            "mape_by_gpu": {g: mape(rs) for g, rs in sorted(by_gpu.items())},
            "not_modelled": [{"id": r.id, "reason": r.reason} for r in skipped],
        })
        return 0
    print(table(["row", "gpu", "predicted", "measured", "error", "fits memory"],
                [[r.id, r.gpu, f"{r.predicted_iter_time_s:.3f} s", f"{r.measured_iter_time_s:.3f} s",
                  f"{100 * r.error:+.1f}%", "yes" if r.fits_memory else "NO (model says OOM)"]
                 for r in modelled], align="llrrrl"))
    print()
    print(table(["gpu", "rows", "MAPE"], [[g, str(len(rs)), f"{100 * mape(rs):.1f}%"]
                                          for g, rs in sorted(by_gpu.items())]))
    for r in skipped:
        print(f"not modelled: {r.id}: {r.reason}")
    oom = sum(1 for r in modelled if not r.fits_memory)
    print(f"\nMAPE {100 * mape(results):.2f}% over {len(modelled)} rows"
          f" ({len(skipped)} not modelled; {oom} predicted not to fit memory although they ran)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="paraplan", description="Provably optimal parallel training plans.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("simulate", help="predict one iteration of a given plan")
    add_instance_args(s)
    s.add_argument("--plan", required=True, help="plan YAML (as written by `paraplan plan -o`)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_simulate)

    a = sub.add_parser("accuracy", help="predict published runs and report the error (MAPE)")
    a.add_argument("file", help="rows in the schema of shared/calibration/README.md")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_accuracy)

    from solver import commands, export_cmd, partition_cmd, report, sweep
    commands.register(sub)
    export_cmd.register(sub)
    partition_cmd.register(sub)
    report.register(sub)
    sweep.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InstanceError as e:
        print(f"paraplan: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SolverError as e:
        other = "milp" if getattr(args, "backend", "cpsat") == "cpsat" else "cpsat"
        print(f"paraplan: solver error: {e} (try --backend {other})".replace("\n", " "), file=sys.stderr)
        return EXIT_SOLVER
    except KeyboardInterrupt:
        print("paraplan: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (e.g. `paraplan plan --json | head`)
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
