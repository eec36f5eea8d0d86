"""Mixture-of-experts models on mixed clusters: planned with ep = 1 (every replica holds every
expert; cost/space_rules.ep_values), priced by the same MoE layer terms as one group, and a
listed ep > 1 is refused in one line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from paraplan.cost.errors import InstanceError
from paraplan.cost.hetero_loader import homogeneous_as_hetero, load_hetero_instance
from paraplan.cost.loader import load_instance
from paraplan.cost.specs import MoeSpec
from paraplan.solver.hetero_planner import plan_hetero
from paraplan.solver.planner import plan

ROOT = Path(__file__).resolve().parents[2]
MOE = {"experts": 8, "top_k": 2, "expert_ffn": 2048, "shared_ffn": 1024}


def test_one_group_prices_an_moe_model_like_one_homogeneous_cluster_at_ep_1():
    # the tiny GPT of tiny-gpt-8xA100 with MoE layers, expert parallelism held to 1 on both
    # sides: the mixed-cluster planner (ep = 1 by its rule) must find the homogeneous optimum
    inst = load_instance(ROOT / "instances/tiny-gpt-8xA100.yaml")
    inst = replace(inst, model=replace(inst.model, moe=MoeSpec(**MOE)),
                   search=replace(inst.search, ep=(1,), zero=(0, 1, 2)))
    homo = plan(inst)
    het = plan_hetero(homogeneous_as_hetero(inst))
    assert homo.status == "optimal" and het.status == "optimal" and homo.plan.ep == 1
    tol = homo.tolerance_s + het.tolerance_s + 1e-9 * homo.iter_time_s
    assert het.objective_s == pytest.approx(homo.iter_time_s, abs=tol)


def _mixed(tmp_path, search=None) -> Path:
    raw = yaml.safe_load((ROOT / "instances/hetero/tiny-2types.yaml").read_text())
    raw["model"]["moe"] = dict(MOE)
    if search is not None:
        raw["search"] = search
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_mixed_cluster_plans_an_moe_model_with_ep_1(tmp_path):
    res = plan_hetero(load_hetero_instance(_mixed(tmp_path)))
    assert res.status == "optimal"


def test_mixed_cluster_refuses_a_listed_ep_above_1(tmp_path):
    with pytest.raises(InstanceError) as info:
        load_hetero_instance(_mixed(tmp_path, {"ep": [1, 2]}))
    assert info.value.field == "search.ep" and "\n" not in str(info.value)
