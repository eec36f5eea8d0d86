"""The golden cases: every bundled instance and the random agreement instances, re-planned.

`python tests/goldens/cases.py` re-freezes tests/goldens/*.json from the current code. Do it only
for a change of the cost model (cost/), never to make a planner change pass: where the space
grew, test_goldens.py accepts faster optima against the old files as they are.

A golden records, per case: the status, the optimal objective (seconds), the quantisation
tolerance, the size of the declared space (outer configurations and complete plans) and the plan
as its plan file writes it. The space size tells test_goldens.py whether the space grew (a
faster optimum is then allowed) or not (the same optimum and the same plan are required).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: randinst lives in tests/
    sys.path.insert(0, str(HERE.parent))

# Bundled instances, and the CPU seconds of their slowest golden case (its planning alone: on an
# idle core, its wall time), measured at 2492a29 (issue 32, tests/goldens/test_goldens.py run
# with per-test CPU clocks; the cases that outran the 60 s limit under load planned again alone).
# The ones above ~2 s are marked slow in test_goldens.py.
BUNDLED = {
    "instances/tiny-gpt-8xA100.yaml": 0.05,
    "instances/small-gpt-16xA100.yaml": 0.07,
    "instances/llama3-8b-64xH100.yaml": 0.14,
    "instances/llama3-8b-128xH200.yaml": 0.17,
    "instances/llama3-70b-512xH100.yaml": 1.4,
    "instances/llama3-405b-16384xH100.yaml": 1.4,
    "instances/gpt3-175b-256xH100.yaml": 1.3,
    "instances/gpt3-175b-1024xA100.yaml": 1.1,
    "instances/primepar/primepar-bloom-176b-32xV100.yaml": 1.3,
    "instances/primepar/primepar-opt-175b-32xV100.yaml": 1.2,
    "instances/primepar/primepar-llama2-70b-32xV100.yaml": 1.9,
    "instances/mixed/tiny-2types.yaml": 0.22,
    "instances/mixed/llama3-8b-dynamic.yaml": 8.8,  # robust; nominal 0.9
    "instances/mixed/llama3-70b-32xA100-32xH100.yaml": 13.0,
    "instances/mixed/llama3-70b-3types-2sites.yaml": 15.9,
    # mixture-of-experts instances (issue 15)
    "instances/mixtral-8x7b-64xH100.yaml": 2.9,
    "instances/qwen3-235b-a22b-256xH100.yaml": 10.5,
    "instances/deepseek-v3-shaped-2048xH800.yaml": 3.6,
    "instances/deepseek-v3-shaped-1152xGB200.yaml": 1.7,
}
# the planning limit of a golden case, far above the slowest idle proof (BUNDLED): under load a
# proof's wall time grows with the number of jobs sharing a core, and a golden is never a
# time-limited answer
GUARD_LIMIT_S = 600.0
# Random agreement instances: tests/robustness/test_agreement.py's seeds (homogeneous) and
# tests/mixed/test_mixed_agreement.py's (mixed clusters, every objective).
HETERO_OBJECTIVES = ("nominal", "robust", "expected")
HETERO_SEEDS = range(40)


def _record(inst, objective: str = "nominal", backend: str = "dp") -> dict:
    """A case planned by the one entry (solver/solve.py), its plan as its plan file writes it."""
    from paraplan.solver.solve import solve

    # objective_s: what was minimised (search.objective). The limit only guards against a hang:
    # every golden is proved (optimal or infeasible), and the 60 s default ran out on the
    # slowest bundled instances when seven other jobs shared the two cores (status feasible)
    return record_of(inst, solve(inst, backend, time_limit_s=GUARD_LIMIT_S, objective=objective))


def record_of(inst, res) -> dict:
    """The golden record of `res`, a SolveResult of `inst`."""
    from paraplan.cost.readers.plan_writer import plan_to_mapping

    plan = None if res.plan is None else plan_to_mapping(res.plan, inst)
    return {"status": res.status, "objective_s": res.quantile_s, "tolerance_s": res.tolerance_s,
            "outer_configs": res.outer_configs, "plans": res.plans_total, "plan": plan}


def bundled_cases() -> list[tuple[str, str]]:
    """(instance file, objective) of every bundled golden; mixed clusters with scenarios are
    planned for every objective their scenarios allow."""
    from paraplan.cost.readers.instance import load_instance

    out = []
    for rel in BUNDLED:
        if not _written_with_groups(rel):
            out.append((rel, "nominal"))
            continue
        inst = load_instance(ROOT / rel)
        out.append((rel, "nominal"))
        if len(inst.scenarios) > 1:
            out.append((rel, "robust"))
            if all(s.probability is not None for s in inst.scenarios):
                out.append((rel, "expected"))
    return out


def _written_with_groups(rel: str) -> bool:
    """Whether the bundled file lists node groups (`cluster:` with `groups:`): its goldens were
    planned with CP-SAT."""
    from paraplan.cost.readers.cluster import is_groups_mapping
    from paraplan.cost.readers.strict_yaml import read_yaml
    return is_groups_mapping(read_yaml(ROOT / rel))


def plan_bundled(rel: str, objective: str) -> dict:
    from paraplan.cost.readers.instance import load_instance

    inst = load_instance(ROOT / rel)
    return _record(inst, objective, "cpsat") if _written_with_groups(rel) else _record(inst)


def homogeneous_seeds() -> list[int]:
    from robustness.test_agreement import agreement_seeds
    return list(agreement_seeds())


def plan_random_homogeneous(seed: int) -> dict:
    from randinst import random_instance
    return _record(random_instance(seed, variant=True))


def plan_random_cluster(seed: int, objective: str) -> dict:
    from randinst import random_cluster_instance
    return _record(random_cluster_instance(seed), objective, "cpsat")


def compute_all() -> dict[str, dict[str, dict]]:
    return {
        "bundled": {f"{rel}:{obj}": plan_bundled(rel, obj) for rel, obj in bundled_cases()},
        "random_homogeneous": {str(s): plan_random_homogeneous(s) for s in homogeneous_seeds()},
        "random_mixed": {f"{s}:{obj}": plan_random_cluster(s, obj)
                          for s in HETERO_SEEDS for obj in HETERO_OBJECTIVES},
    }


def golden_path(name: str) -> Path:
    return HERE / f"{name}.json"


def load_golden(name: str) -> dict[str, dict]:
    return json.loads(golden_path(name).read_text())


if __name__ == "__main__":
    for name, records in compute_all().items():
        golden_path(name).write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        print(f"wrote {golden_path(name)} ({len(records)} cases)")
