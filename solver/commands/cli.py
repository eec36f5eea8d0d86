"""`paraplan` command line. Each sub-command lives in a small function; bad input exits 2 with
one line naming the file, field and fix, never a traceback."""

from __future__ import annotations

import gc

from paraplan.solver.collector import collect_less

# the collector's young generation at solver/collector.YOUNG_THRESHOLD for the whole command
# (its docstring says why), set before the imports below, so that they collect at it too
collect_less()

import argparse
import sys

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.formulations.result import SolverError
from paraplan.solver.commands.exit_codes import EPILOG
from paraplan.solver.commands.parser import HELP_JSON, Parser, order_subcommands
from paraplan.solver.commands.inputs import add_instance_args, read_instance
from paraplan.solver.commands.jsonout import emit_json as _emit_json

EXIT_BAD_INPUT = 2
EXIT_SOLVER = 3  # a solver backend is missing or crashed
EXIT_DOES_NOT_FIT = 1  # simulate: the plan is valid but does not fit memory


def _plan_given_as_instance(args) -> str:
    """The plan file given as INSTANCE (`plan -o` writes the plan with its instance, so it
    stands alone): `simulate p.yaml` is `simulate p.yaml --plan p.yaml`."""
    from paraplan.cost.readers.instance import carries_instance
    from paraplan.cost.readers.strict_yaml import read_yaml
    parts = args.hf_config or args.cluster or args.job
    if args.instance and not parts and carries_instance(read_yaml(args.instance)):
        return args.instance
    raise InstanceError(args.instance or "simulate", "--plan", "no plan given",
                        "give --plan PLAN.yaml, or as INSTANCE a plan file written by `paraplan plan -o`")


def cmd_simulate(args) -> int:
    """`paraplan simulate INSTANCE --plan PLAN.yaml`, a plan file of either format: the plan
    on every network of the instance (a flat instance has one), each simulated once."""
    from paraplan.cost.simulate import simulate
    from paraplan.cost.model_notes import model_warnings
    from paraplan.cost.readers.plan_reader import load_plan
    from paraplan.cost.trust import plan_trust
    from paraplan.solver.plan_text import describe_cluster, plan_lines, shown_as_groups
    from paraplan.solver.format import (breakdown_json, breakdown_text, gib, grad_reduce_line, seconds,
                                        table, trust_json, trust_lines)

    inst = read_instance(args, simulate_only=True)
    plan_path = args.plan or _plan_given_as_instance(args)
    plan = load_plan(plan_path, inst)  # the plan file is read once, either format
    grouped = shown_as_groups(inst, plan)
    networks = [(sc.name, sc.cluster) for sc in inst.scenarios] if grouped else [("nominal", None)]
    try:
        bds = [(name, simulate(inst, plan, cluster=net)) for name, net in networks]
    except ConfigError as e:
        raise InstanceError(plan_path, "plan", str(e), "make the plan consistent with the instance")
    bd = bds[0][1]
    notes = model_warnings(inst, plan)
    trust = plan_trust(inst, plan, bd.iter_time_s)  # a simulated time is a prediction like a plan's
    if args.json:
        _emit_json({"status": "fits" if bd.fits else "out_of_memory", "iter_time_s": bd.iter_time_s,
                    "grad_reduce_dtype": inst.job.grad_reduce.value,
                    "interval_s": list(trust.interval_s) if trust.interval_s else None,
                    "trust": trust_json(trust), "breakdown": breakdown_json(bd), "model_warnings": notes,
                    "scenarios": [{"scenario": name, "iter_time_s": b.iter_time_s,
                                   "tokens_per_s": b.tokens_per_s, "fits_memory": b.fits} for name, b in bds]})
    else:
        print(describe_cluster(inst))
        print("plan        " + "\n            ".join(plan_lines(plan, inst)))
        for line in notes:
            print(f"warning     model: {line}")
        print(breakdown_text(bd))
        print("\n".join(trust_lines(trust)))
        print(grad_reduce_line(inst.job))
        if len(bds) > 1:
            print("\n" + table(["scenario", "iteration", "tokens/s"],
                               [[name, seconds(b.iter_time_s), f"{b.tokens_per_s:,.0f}"] for name, b in bds],
                               align="lrr"))
    if not bd.fits:  # the numbers above are still shown: they say by how much
        several, groups = len(bd.classes) > 1, len({s.group for s in bd.stages}) > 1
        print("paraplan: the plan does not fit memory: " + "; ".join(
            f"{f'class {k} ' if several else ''}stage {s}{f' on {g}' if groups else ''} needs {gib(mem)}"
            f" of {gib(cap)} usable" for k, s, g, _, mem, cap in bd.stage_rows() if mem > cap), file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


def version() -> str:
    """The installed distribution's version (pyproject.toml), without importing anything heavy."""
    from importlib.metadata import PackageNotFoundError, version as dist_version
    try:
        return dist_version("paraplan")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """--version: the installed version, looked up only when asked for (importlib.metadata
    takes 0.02 s to load, on every command line otherwise)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show program's version number and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(f"paraplan {version()}\n", sys.stdout)
        parser.exit()


# The modules that register the sub-commands (each module's `register`), and the commands each
# registers besides "simulate" (this module's): a command line naming one of them imports only
# its module, so that `paraplan plan` does not load the sweep runner, the report page or the
# export writers (0.10 s of a fresh process's start-up, issue 33). Help, --version and an unknown
# command register every module (argparse lists them all). tests/cli/test_startup.py checks this
# table against what each module registers.
COMMAND_MODULES = (
    ("paraplan.solver.commands.accuracy", ("accuracy",)),
    ("paraplan.solver.commands.planning", ("plan", "exhaustive", "verify", "bench", "calibrate",
                                           "replan", "timeline")),
    ("paraplan.solver.commands.extra", ("compare", "memory")),
    ("paraplan.solver.commands.model", ("model",)),
    ("paraplan.solver.commands.export", ("export",)),
    ("paraplan.solver.commands.partitions", ("partition",)),
    ("paraplan.solver.commands.report", ("report",)),
    ("paraplan.solver.commands.sweep", ("sweep",)),
)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command-line parser; given `argv` whose first word names a sub-command, with only
    that sub-command's module registered (COMMAND_MODULES)."""
    import importlib
    p = Parser(prog="paraplan", description="Provably optimal parallel training plans.", epilog=EPILOG)
    p.add_argument("--version", action=_VersionAction)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("simulate", help="predict one iteration of a given plan")
    add_instance_args(s)
    s.add_argument("--plan", help="plan YAML (as written by `paraplan plan -o`); default: INSTANCE"
                                  " itself when it is such a plan file")
    s.add_argument("--json", action="store_true", help=HELP_JSON)
    s.set_defaults(func=cmd_simulate)

    named = argv[0] if argv else None
    only = [mod for mod, names in COMMAND_MODULES if named in names]
    for mod in (only or ([] if named == "simulate" else [mod for mod, _ in COMMAND_MODULES])):
        importlib.import_module(mod).register(sub)
    if not only and named != "simulate":
        order_subcommands(sub)
    return p


class StdoutError(Exception):
    """Writing the standard output failed (a full disk, a quota, a vanished terminal). Not an
    OSError, so that no handler meant for an input or output file can mistake it for one."""

    def __init__(self, err: OSError):
        self.strerror = err.strerror or type(err).__name__
        super().__init__(self.strerror)


class _GuardedStdout:
    """sys.stdout while a command runs: an OSError writing or flushing it becomes StdoutError,
    whichever command, printer or JSON writer met it. A closed pipe stays BrokenPipeError (a
    reader that stopped early, `| head`, is no error)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._guarded(self._stream.write, text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    @staticmethod
    def _guarded(call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _discard_stdout() -> None:
    """Point the standard output at /dev/null, so that the interpreter's last flush of what is
    still buffered fails no more (it would print a traceback-like warning and exit 120)."""
    import os
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (captured in tests): nothing to flush
        pass


def main(argv: list[str] | None = None) -> int:
    own = argv is None  # the process's own command line (the console script, python -m)
    argv = sys.argv[1:] if own else list(argv)
    args = build_parser(argv).parse_args(argv)
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        return _run(args)
    finally:
        sys.stdout = stdout
        if own:
            _freeze_for_exit()


def _freeze_for_exit() -> None:
    """The process ends after its command: the interpreter's exit runs the cyclic collector over
    every object still alive, 0.10-0.13 s of CPU from the end of GPT-3 175B's plan on 1,024 A100
    to the process's end, under 0.01 s frozen (issue 33). Frozen (gc.freeze), those
    objects are still freed by their reference counts as the modules are cleared, only not
    searched for cycles: what a cycle holds is left to the process's end, as it would be to a
    crash. Not for a caller of main() with its own argv (the tests' many commands in one
    process), whose memory the collector still has to keep."""
    gc.freeze()


def _run(args) -> int:
    try:
        from paraplan.solver.commands.limits import check_args
        check_args(args)
        code = args.func(args)
        sys.stdout.flush()  # a full disk often shows only here, when the buffer is written
        return code
    except InstanceError as e:
        print(f"paraplan: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StdoutError as e:
        print(f"paraplan: error: <stdout>: standard output: cannot be written ({e.strerror}), the"
              " result is lost (fix: free some space, or redirect the output to another file)",
              file=sys.stderr)
        _discard_stdout()
        return EXIT_BAD_INPUT
    except SolverError as e:
        other = "milp" if getattr(args, "backend", "dp") in ("cpsat", "dp") else "cpsat"
        print(f"paraplan: solver error: {e} (try --backend {other})".replace("\n", " "), file=sys.stderr)
        return EXIT_SOLVER
    except KeyboardInterrupt:
        print("paraplan: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (e.g. `paraplan plan --json | head`)
        _discard_stdout()
        return 0


if __name__ == "__main__":
    sys.exit(main())
