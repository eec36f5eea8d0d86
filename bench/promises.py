"""The optimum's promise over the published run (issue 31; tests/validation/test_plausibility.py):
every bundled published workload on 256+ GPUs re-planned at the default objective (p90), only
the parallel configuration free; per workload the fastest published run's measured time over
the optimum's p90 time, with the optimum's memory fill and p90 factor.

    .venv/bin/python bench/promises.py [--json OUT]
"""

from __future__ import annotations

import json
import sys

import numpy as np

from paraplan.cost.calibration import row_to_instance_plan
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.trust import fastest_published_runs, plan_memory_fill
from paraplan.solver.solve import solve


def main(argv: list[str]) -> int:
    out = {}
    for row in fastest_published_runs():
        inst, _ = row_to_instance_plan(row, load_catalogue())
        res = solve(inst, time_limit_s=600)
        fill = plan_memory_fill(inst, res.plan)
        promise = float(row["measured"]["iter_time_s"]) / res.quantile_s
        out[row["id"]] = {"status": res.status, "promise": promise, "fill": fill,
                          "factor": res.quantile_s / res.objective_s, "p90_s": res.quantile_s}
        print(f"{row['id']:48s} {res.status:8s} promise {promise:.3f}x fill {100 * fill:.1f}%"
              f" factor {res.quantile_s / res.objective_s:.3f}", flush=True)
    v = np.array([x["promise"] for x in out.values()])
    print(f"{len(v)} workloads: median {np.median(v):.3f}x, p90 {np.percentile(v, 90):.3f}x, max {v.max():.3f}x,"
          f" {int((v > 1.4).sum())} above 1.4x")
    if len(argv) == 2 and argv[0] == "--json":
        with open(argv[1], "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
