"""docs/mixed-clusters.md's figures for a tensor-parallel degree per group (search.tp_per_group) are
the bundled instances' as the goldens hold them (tests/goldens/bundled.json: the default space,
tp per group on) and as the planner finds them with one tp for every group: the paragraph's
times, p90 times and gain are read from the docs and checked against those plans."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.simulate import simulate
from paraplan.solver.solve import solve

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = json.loads((ROOT / "tests" / "goldens" / "bundled.json").read_text())
TWO = "instances/mixed/llama3-70b-32xA100-32xH100.yaml"
THREE = "instances/mixed/llama3-70b-3types-2sites.yaml"


def _paragraph() -> str:
    text = (ROOT / "docs" / "mixed-clusters.md").read_text()
    return re.sub(r"\s+", " ", re.search(r"On 32 A100 \+ 32 H100 this gives.*?It enlarges", text, re.S).group(0))


def _golden(rel: str):
    """(instance, golden plan, its p90 objective) of a bundled mixed instance."""
    inst = load_instance(ROOT / rel)
    golden = GOLDENS[f"{rel}:nominal"]
    return inst, plan_from_mapping(golden["plan"], inst), golden["objective_s"]


def test_two_types_tp_per_group_gain_as_documented():
    text = _paragraph()
    m = re.search(r"tp 8 on the A100 stage and tp 4 on the H100 stages, ([\d.]+)% faster than the best"
                  r" plan with one tp \(([\d.]+) s against ([\d.]+) s predicted, p90 ([\d.]+) s against"
                  r" ([\d.]+) s", text)
    gain, per_group, one, per_group_p90, one_p90 = map(float, m.groups())
    inst, plan, p90 = _golden(TWO)
    assert {g.name: plan.tp_of(i) for i, g in enumerate(inst.cluster.groups)} == {"a100": 8, "h100": 4}
    assert per_group == round(simulate(inst, plan).iter_time_s, 2) and per_group_p90 == round(p90, 2)
    res = solve(dataclasses.replace(inst, search=dataclasses.replace(inst.search, tp_per_group=False)))
    assert one == round(res.breakdown.iter_time_s, 2) and one_p90 == round(res.quantile_s, 2)
    assert gain == round(100 * (1 - simulate(inst, plan).iter_time_s / res.breakdown.iter_time_s), 1)


def test_three_types_keep_one_tp_as_documented():
    # "either way": the golden optimum, over the space with a tp per group, runs one tp on every
    # group, so it lies in the one-tp space too and is that space's optimum as well
    m = re.search(r"three-type 64-node instance the optimum keeps tp (\d+) on every group \(([\d.]+) s,"
                  r" p90 ([\d.]+) s, either way\)", _paragraph())
    tp, predicted, p90_doc = int(m.group(1)), float(m.group(2)), float(m.group(3))
    inst, plan, p90 = _golden(THREE)
    assert plan.tp_degrees == (tp,)
    assert predicted == round(simulate(inst, plan).iter_time_s, 2) and p90_doc == round(p90, 2)
