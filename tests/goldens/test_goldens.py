"""Every bundled instance and every random agreement instance re-planned against its frozen
optimum (tests/goldens/*.json, written by tests/goldens/cases.py from main at 52886f2, before
the planners' merge).

The goldens guard the merge of the homogeneous and heterogeneous planners (issue 12): an answer
may change only where the declared space grew, and then only to a faster plan. So, per case:
- the space never shrinks (outer configurations and complete plans at least the frozen counts);
- where it did not grow, the status, the optimum (within the quantisation tolerance) and the
  plan are the frozen ones;
- where it grew, the optimum is at most the frozen one (within the tolerance), and a case that
  was feasible stays feasible.
A change of the cost model (cost/) moves optima for another reason: the commit that makes it
re-freezes the goldens from the code before the change with the new cost model, i.e. runs
`python tests/goldens/cases.py` on that commit, and says so.
"""

from __future__ import annotations

import pytest
from bundled_plans import SHARED, bundled_instance, bundled_optimum, same_worker
from goldens import cases

GOLDEN_NAMES = ("bundled", "random_homogeneous", "random_mixed")
SLOW_S = 2.0  # bundled instances planning longer than this (cases.BUNDLED) are marked slow


def _compare(frozen: dict, new: dict) -> None:
    assert new["outer_configs"] >= frozen["outer_configs"], "the declared space lost outer configurations"
    assert new["plans"] >= frozen["plans"], "the declared space lost plans"
    grew = new["outer_configs"] > frozen["outer_configs"] or new["plans"] > frozen["plans"]
    tol = max(frozen["tolerance_s"], new["tolerance_s"])
    if frozen["objective_s"] is None:
        assert grew or new["status"] == frozen["status"], (new["status"], frozen["status"])
        assert grew or new["objective_s"] is None
        return
    assert new["objective_s"] is not None, f"was {frozen['status']}, now {new['status']}"
    slack = tol + 1e-9 * frozen["objective_s"]
    assert new["objective_s"] <= frozen["objective_s"] + slack, (new["objective_s"], frozen["objective_s"])
    if not grew:
        assert new["status"] == frozen["status"]
        assert new["objective_s"] == pytest.approx(frozen["objective_s"], abs=slack)
        assert new["plan"] == frozen["plan"]


def _bundled_params():
    out = []
    for key in cases.load_golden("bundled"):
        rel, _ = key.rsplit(":", 1)
        marks = [pytest.mark.slow] if cases.BUNDLED[rel] > SLOW_S else []
        if _shared(rel):
            marks.append(same_worker(_shared(rel)))
        out.append(pytest.param(key, marks=marks, id=key))
    return out


def _shared(rel: str) -> str | None:
    """The bundled_plans.SHARED name of instance file `rel`, or None. Each is a flat instance
    (no node groups), whose golden is cases.plan_bundled's dp solve at the instance's own
    objective: bundled_optimum's call."""
    name = rel.removeprefix("instances/").removesuffix(".yaml")
    return name if name in SHARED else None


@pytest.mark.parametrize("key", _bundled_params())
def test_bundled_instance_keeps_its_optimum(key):
    rel, objective = key.rsplit(":", 1)
    if _shared(rel):  # the same solve that other test files read (tests/bundled_plans.py)
        assert objective == "nominal" and not cases._written_with_groups(rel)
        new = cases.record_of(bundled_instance(_shared(rel)), bundled_optimum(_shared(rel)))
    else:
        new = cases.plan_bundled(rel, objective)
    _compare(cases.load_golden("bundled")[key], new)


@pytest.mark.parametrize("seed", list(cases.load_golden("random_homogeneous")))
def test_random_homogeneous_instance_keeps_its_optimum(seed):
    _compare(cases.load_golden("random_homogeneous")[seed], cases.plan_random_homogeneous(int(seed)))


@pytest.mark.parametrize("key", list(cases.load_golden("random_mixed")))
def test_random_mixed_instance_keeps_its_optimum(key):
    seed, objective = key.split(":")
    _compare(cases.load_golden("random_mixed")[key], cases.plan_random_cluster(int(seed), objective))


def test_goldens_cover_every_bundled_instance_and_the_hard_cases():
    """The goldens are not vacuous: every bundled instance file is frozen, and the random ones
    include infeasible instances, pipelines and multi-class mixed-cluster plans."""
    frozen_files = {key.rsplit(":", 1)[0] for key in cases.load_golden("bundled")}
    on_disk = {str(p.relative_to(cases.ROOT)) for d in ("instances", "instances/mixed", "instances/primepar")
               for p in (cases.ROOT / d).glob("*.yaml")}
    assert frozen_files == on_disk
    homo = cases.load_golden("random_homogeneous").values()
    assert any(r["plan"] is None for r in homo) and any(r["plan"] and r["plan"]["pp"] > 1 for r in homo)
    het = cases.load_golden("random_mixed").values()
    assert any(r["plan"] and len(r["plan"]["classes"]) > 1 for r in het)
    assert any(r["plan"] is None for r in het)
