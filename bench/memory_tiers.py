"""The p90 planner's searches per plan and the CPU time of `paraplan plan`, per bundled instance
(issue 31; solver/memory_tiers.py).

Per instance: the memory tiers the band gives it (cost/trust.memory_fill_caps: two where its
memory fill can move a configuration's factor), the searches of the declared space its plan
took (solver/search._search_tier, counted in process: 1 where the relaxation ends the search, 3
where the tiers are searched too; searching each tier apart took one per tier), its status and
p90 value; with --base, the CPU time (user + sys of the child) of `paraplan plan FILE --quiet`
run alternately by this checkout's command and by BASE (another checkout's `paraplan`), RUNS
times each, medians.

    .venv/bin/python bench/memory_tiers.py [--base OTHER/.venv/bin/paraplan] [--runs N] [FILE ...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / ".venv" / "bin" / "paraplan"


def bundled() -> list[Path]:
    return sorted(ROOT.glob("instances/*.yaml")) + sorted(ROOT.glob("instances/mixed/*.yaml"))


def searches(path: Path) -> dict:
    """The plan's status, p90 value, memory tiers and searches, planned in process."""
    from paraplan.solver import search as search_module
    from paraplan.solver.commands.cli import main
    calls = []
    run = search_module._search_tier

    def counted(inst, *args, **kwargs):
        calls.append(inst.search.memory_fill_cap)
        return run(inst, *args, **kwargs)
    search_module._search_tier = counted
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            main(["plan", str(path), "--json"])
    finally:
        search_module._search_tier = run
    got = json.loads(out.getvalue())
    return {"status": got.get("status"), "p90_s": got.get("quantile_s", got.get("objective_s")),
            "searches": len(calls)}


def tiers(path: Path) -> int:
    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.trust import memory_fill_caps
    inst = load_instance(path)  # either form
    return len(memory_fill_caps(inst))


def cpu_s(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", help="another checkout's paraplan command, timed alternately")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    for path in args.files or bundled():
        rel = path.resolve().relative_to(ROOT)
        row = {"instance": str(rel), "tiers": tiers(path), **searches(path)}
        if args.base:
            here, base = [], []
            for _ in range(args.runs):
                base.append(cpu_s([args.base, "plan", str(path), "--quiet"]))
                here.append(cpu_s([str(HERE), "plan", str(path), "--quiet"]))
            row["cpu_s"] = round(statistics.median(here), 2)
            row["base_cpu_s"] = round(statistics.median(base), 2)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
