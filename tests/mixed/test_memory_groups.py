"""`paraplan memory` on plans of replica classes over node groups (issue 32): the per-class,
per-stage categories of cost/memory_breakdown.class_categories_bytes."""

import json
from pathlib import Path

import numpy as np
import pytest

from paraplan import instances
from paraplan.cost.specs import Instance
from paraplan.cost import memory
from paraplan.cost.class_coefficients import class_coefficients
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.memory_breakdown import CATEGORIES, class_categories_bytes, stage_categories_bytes
from paraplan.cost.simulate import simulate
from paraplan.solver.commands.cli import main
from paraplan.solver.commands.schema import validate
from paraplan.solver.report.page import plan_coefficients

INSTANCES = Path(instances.__file__).parent
TINY = str(INSTANCES / "tiny-gpt-8xA100.yaml")
TWO_TYPES = str(INSTANCES / "mixed" / "tiny-2types.yaml")


def _class_categories(inst, plan):
    coeffs = class_coefficients(inst, inst.cluster, plan.outer, reserve_bytes=inst.search.memory_reserve_bytes,
                                num_micro_batches=tuple(k.num_micro_batches for k in plan.classes),
                                partitions=tuple(k.partitions for k in plan.classes))
    return class_categories_bytes(inst, plan, coeffs)


def test_one_group_categories_are_the_flat_ones():
    # a flat instance is its one group and a flat plan its one class: the two routes must
    # split every stage's memory alike, category by category
    flat = load_instance(TINY)
    plan = plan_from_mapping({"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2, "recompute": "selective",
                              "zero": 1}, flat)
    want = stage_categories_bytes(flat, plan, plan_coefficients(flat, plan))
    (got,) = _class_categories(flat, plan)
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-12)


def test_mixed_cluster_categories_sum_to_each_stage_and_shard_over_every_replica():
    # tiny-2types (8 A100 + 8 H100), one class of 2 replicas across both groups at tp 4, pp 2,
    # ZeRO-1 under Megatron: per parameter 2 B weights and 4 B grads on every GPU, 12 B of Adam
    # state over the 2 data-parallel ranks, so optimizer = 3 x weights and grads = 2 x weights
    # (no fp8, no experts); the runtime term is cost/memory.runtime_bytes(tp, cp, dp, pp)
    inst = load_instance(TWO_TYPES)
    plan = plan_from_mapping({"tp": 4, "micro_batch": 2, "sequence_parallel": True, "zero": 1,
                                    "recompute": "none", "classes": [
                                        {"replicas": 2, "stages": ["a100", "h100"], "num_micro_batches": 8,
                                         "layers_per_stage": [3, 5]}]}, inst)
    (cats,) = _class_categories(inst, plan)
    rows = simulate(inst, plan).stage_rows()
    assert [g for _, _, g, *_ in rows] == ["a100", "h100"]
    for cs, (_, _, _, _, mem, _) in zip(cats, rows):
        assert set(cs) == set(CATEGORIES)
        assert sum(cs.values()) == pytest.approx(mem, rel=1e-9)
        assert cs["optimizer"] == pytest.approx(3 * cs["weights"], rel=1e-9)
        assert cs["grads"] == pytest.approx(2 * cs["weights"], rel=1e-9)
        assert cs["runtime"] == memory.runtime_bytes(4, 1, 2, 2)
    assert cats[0]["logits"] == 0 and cats[1]["logits"] > 0


def test_memory_command_on_node_groups(capsys):
    # refused before issue 32 ("offered for one-class plans of a single-group cluster")
    assert main(["memory", TWO_TYPES, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not validate(out, "memory (mixed cluster)")
    assert {s["group"] for s in out["stages"]} == {"a100", "h100"}
    assert out["peak_mem_bytes"] == pytest.approx(max(s["total_bytes"] for s in out["stages"]), rel=1e-9)
    assert main(["memory", TWO_TYPES]) == 0
    text = capsys.readouterr().out
    assert "class 1 stage 0 (a100)" in text and "usable capacity" in text


def test_memory_command_on_a_flat_file_planned_as_classes(capsys):
    # a flat instance whose search asks for several classes per group is planned as its one
    # group (the plan command's route), and `memory` now shows that plan's classes
    assert main(["memory", TINY, "--search", "classes_per_group=2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not validate(out, "memory (mixed cluster)")
    assert out["stages"] and all(s["total_bytes"] <= s["capacity_bytes"] for s in out["stages"])
    assert np.isfinite(out["peak_mem_bytes"])
