"""`paraplan sweep`: the command line of the sweep runner (solver/sweep/run.py, whose docstring
describes the sweep file, the results and the failures); this module parses the arguments, runs
the sweep and prints its summary.
"""

from __future__ import annotations

import argparse
import sys

from paraplan.cost.errors import InstanceError
from paraplan.solver.commands.inputs import positive_int_arg
from paraplan.solver.sweep.run import SweepOutcome, load_sweep, run_sweep


def _progress_line(outcome: SweepOutcome, in_progress: int) -> None:
    finished = sum(outcome.statuses.values())
    to_run = outcome.total - outcome.skipped
    skipped = f", {outcome.skipped} skipped as done" if outcome.skipped else ""
    sys.stderr.write(f"\r  {finished}/{to_run} jobs finished, {len(outcome.failed)} failed,"
                     f" {in_progress} in progress{skipped}  ")
    sys.stderr.flush()


def cmd_sweep(args) -> int:
    workers = positive_int_arg(args.workers, "--workers", "give the number of worker processes, e.g. --workers 4")
    if workers is not None and args.dask_scheduler is not None:
        raise InstanceError("<arguments>", "--workers", "applies to the local process pool only",
                            "drop it; with --dask-scheduler the Dask workers set the parallelism")
    sweep = load_sweep(args.sweep)
    csv_path = args.output or f"{sweep.name}.csv"
    show = not args.quiet and sys.stderr.isatty()
    outcome = run_sweep(sweep, csv_path=csv_path, jsonl_path=args.json, workers=workers,
                        cluster=args.dask_scheduler, resume=args.resume,
                        progress=_progress_line if show else None)
    if show and outcome.total > outcome.skipped:
        sys.stderr.write("\n")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(outcome.statuses.items()))
    print(f"{sweep.name}: {outcome.total} jobs; {outcome.skipped} already done"
          f"{'; ' + counts if counts else ''}; results in {csv_path}")
    for row in outcome.failed:
        print(f"failed: {row['job_id']} {row['instance']} after {row['attempts']} tries:"
              f" {row['error']}", file=sys.stderr)
    return 1 if outcome.failed else 0


class _DeprecatedCluster(argparse.Action):
    """`sweep --cluster ADDRESS`: still accepted, with one deprecation line on stderr."""

    def __call__(self, parser, namespace, values, option_string=None):
        print("paraplan: warning: `sweep --cluster` is deprecated (elsewhere --cluster is a cluster"
              " YAML); use --dask-scheduler ADDRESS", file=sys.stderr)
        setattr(namespace, self.dest, values)


def register(sub) -> None:
    s = sub.add_parser("sweep", help="plan every job of a sweep file, in parallel",
                       description="Plan every job of SWEEP (see solver/sweep/run.py for the file),"
                                   " on local worker processes or a Dask cluster; one CSV row"
                                   " per job, written as each finishes.")
    s.add_argument("sweep", metavar="SWEEP", help="sweep YAML")
    s.add_argument("--workers", metavar="N",
                   help="local worker processes (default: the CPU count divided by the"
                        " sweep's solver threads)")
    s.add_argument("--dask-scheduler", metavar="ADDRESS", dest="dask_scheduler",
                   help="run on this dask.distributed scheduler, e.g. tcp://host:8786")
    # the old spelling, deprecated: `--cluster` names a cluster YAML in every other command
    s.add_argument("--cluster", metavar="ADDRESS", dest="dask_scheduler", action=_DeprecatedCluster,
                   help=argparse.SUPPRESS)
    s.add_argument("-o", "--output", metavar="CSV", help="results CSV (default: <name>.csv)")
    s.add_argument("--json", metavar="JSONL", help="also write one JSON object per job")
    s.add_argument("--resume", action="store_true",
                   help="keep the CSV's done rows and run only the other jobs")
    s.add_argument("--quiet", action="store_true", help="no progress on stderr")
    s.set_defaults(func=cmd_sweep)
