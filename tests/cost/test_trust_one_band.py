"""One trust band for every plan shape (cost/trust.plan_trust, issue 32): a flat plan file's plan
read on its flat instance, and the same plan read as the one-class group form (the instance with
search.idle_gpus, which a flat file cannot write: Instance.flat is False, the plan a class
mapping), get the same band, release and warnings; the memory fill the band counts is one
pricing whose one-class case is the flat plan file's; the warnings read every class and GPU type.

The golden plans (tests/goldens/bundled.json) are read as frozen, so nothing is planned here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from paraplan.cost import schedule
from paraplan.cost.coefficients import build
from paraplan.cost.memory_fill import peak_memory_fraction
from paraplan.cost.partition import plan_layer_fn
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.simulate import simulate
from paraplan.cost.trust import (MFU_RECORD_MIN_GPUS, mfu_record_warning, objective_factor_of, plan_trust,
                                 published_residuals, unvalidated_warnings)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "goldens" / "bundled.json").read_text())


def _golden(rel: str):
    """(instance, its frozen optimal plan) of bundled instance file `rel`."""
    inst = load_instance(ROOT / rel)
    return inst, plan_from_mapping(GOLDEN[f"{rel}:nominal"]["plan"], inst)


def _group_form(inst, plan):
    """The same instance with idle GPUs allowed (not flat: plans are written as classes) and the
    plan read back through its class mapping, as a plan file of that instance holds it."""
    g = dataclasses.replace(inst, search=dataclasses.replace(inst.search, idle_gpus=True))
    mapping = plan_to_mapping(plan, g)
    assert not g.flat and "classes" in mapping
    return g, plan_from_mapping(mapping, g)


# each flat case exercises a line of the reading: ZeRO-1, the MFU record and the memory headroom
# (GPT-3 on 256 H100); a GPU type no row calibrates (H200); a mixture-of-experts model (its
# anchors' band and line); per-operator partitions on a die with no fitted rows (V100)
FLAT = ("instances/tiny-gpt-8xA100.yaml", "instances/gpt3-175b-256xH100.yaml",
        "instances/llama3-8b-128xH200.yaml", "instances/mixtral-8x7b-64xH100.yaml",
        "instances/primepar/primepar-opt-175b-32xV100.yaml")


@pytest.mark.parametrize("rel", FLAT)
def test_a_flat_plan_and_its_one_class_group_form_read_the_same_band(rel):
    inst, plan = _golden(rel)
    g, gplan = _group_form(inst, plan)
    t = simulate(inst, plan).iter_time_s
    assert simulate(g, gplan).iter_time_s == t  # the same plan, priced the same
    flat, group = plan_trust(inst, plan, t), plan_trust(g, gplan, t)
    assert flat == group
    # the release the job runs, named in the band's features, never an unknown one
    assert "release unknown" not in group.group and group.release.startswith(inst.job.framework.value)


def test_the_group_form_carries_the_flat_plan_s_warnings():
    # GPT-3 175B on 256 H100 (its golden plan: ZeRO-1, MFU 49.9% above the H100 record 44.1%,
    # 80.6% of HBM, which 2 published rows of 256-1023 GPUs reach): before issue 32 the group
    # form of the same plan carried the ZeRO line alone
    inst, plan = _golden("instances/gpt3-175b-256xH100.yaml")
    g, gplan = _group_form(inst, plan)
    warnings = plan_trust(g, gplan, simulate(g, gplan).iter_time_s).warnings
    assert [w.split(" ")[0] for w in warnings] == ["zero=1", "MFU", "peak"]


@pytest.mark.parametrize("rel", FLAT + ("instances/primepar/primepar-bloom-176b-32xV100.yaml",
                                        "instances/llama3-70b-512xH100.yaml"))
def test_the_one_class_fill_is_the_flat_plan_file_s(rel):
    # the fill before issue 32 priced a flat plan by its own route: build() of the plan's flat
    # Outer on the homogeneous placement with its layer plan, stage memory over capacity at no
    # reserve. The one pricing for every shape (class_coefficients) must give it bit for bit
    inst, plan = _golden(rel)
    c = build(inst, plan.flat_outer, layer_fn=plan_layer_fn(plan.partitions))
    flat = float(np.max(schedule.stage_mem_bytes(c, np.array(plan.layers_per_stage, float),
                                                 np.array(plan.full_recompute_layers, float)) / c.capacity_bytes))
    assert peak_memory_fraction(inst, plan) == flat
    g, gplan = _group_form(inst, plan)
    assert peak_memory_fraction(g, gplan) == flat


@pytest.mark.parametrize("rel", ("instances/mixed/tiny-2types.yaml", "instances/mixed/llama3-70b-3types-2sites.yaml"))
def test_a_mixed_plan_s_fill_is_its_fullest_simulated_stage(rel):
    # simulate prices every stage of every class with its times (its own route through the
    # coefficients): the fill is the largest memory over capacity among them, at no reserve
    inst, plan = _golden(rel)
    stages = simulate(inst, plan, reserve_bytes=0.0).stages
    assert len({s.group for s in stages}) > 1
    assert peak_memory_fraction(inst, plan) == pytest.approx(max(s.mem_bytes / s.capacity_bytes for s in stages),
                                                            rel=1e-12)


def test_a_mixed_plan_s_p90_band_ends_at_its_p90_time():
    # the band's upper end over the predicted time is the objective's factor of the plan at its
    # memory tier (objective_factor_of), for a one-class plan on every GPU of a flat instance, its
    # group form and a plan over three GPU types: read from the band's quantile on one side and
    # the planner's quantile factor on the other
    from paraplan.solver.memory_tiers import plan_tier
    cases = [_golden("instances/gpt3-175b-256xH100.yaml"), _golden("instances/mixed/llama3-70b-3types-2sites.yaml")]
    cases.append(_group_form(*cases[0]))
    for inst, plan in cases:
        assert inst.search.objective == "p90"
        t = simulate(inst, plan).iter_time_s
        hi = plan_trust(inst, plan, t).interval_s[1]
        assert hi == pytest.approx(t * objective_factor_of(plan_tier(inst, plan), plan), rel=1e-12)


def test_the_mfu_record_of_a_plan_on_two_dies_weighs_each_die_by_its_peak():
    # Llama 3 70B on 2 sites (golden plan: tp 4, 32 replicas of 4 stages on a100-80g, a100-80g,
    # a100-40g, h100): 2 x 32 x 4 = 256 A100-80GB, 128 A100-40GB (both die A100) and 128 H100.
    # With P_A = 384 x peak(A100), P_H = 128 x peak(H100) and made-up records r_A = 0.50,
    # r_H = 0.40, the plan's GPUs at their records give MFU (P_A r_A + P_H r_H) / (P_A + P_H);
    # a time for an MFU 0.01 above it warns, one 0.001 below does not, nor any time where a
    # die the plan runs on has no record
    from paraplan.cost.flops import model_flops_per_token
    inst, plan = _golden("instances/mixed/llama3-70b-3types-2sites.yaml")
    assert inst.cluster.num_gpus >= MFU_RECORD_MIN_GPUS
    peak = {g.name: g.gpu.peak_flops_per_s for g in inst.cluster.groups}
    p_a = 256 * peak["a100-80g"] + 128 * peak["a100-40g"]
    p_h = 128 * peak["h100"]
    best = (p_a * 0.50 + p_h * 0.40) / (p_a + p_h)
    work = inst.job.global_batch * inst.model.seq_len * model_flops_per_token(inst.model)

    def time_for(mfu):
        return work / (mfu * (p_a + p_h))
    records = {("A100", "bf16"): (0.50, "row-a"), ("H100", "bf16"): (0.40, "row-h")}
    (line,) = mfu_record_warning(inst, plan, time_for(best + 0.01), records)
    assert line.startswith(f"MFU {100 * (best + 0.01):.1f}% is 1.0 points above the best MFU published on"
                           " A100 and H100 (bf16)")
    assert "A100 50.0%, row-a; H100 40.0%, row-h" in line
    assert mfu_record_warning(inst, plan, time_for(best - 0.001), records) == []
    assert mfu_record_warning(inst, plan, time_for(0.99), {("A100", "bf16"): (0.5, "row-a")}) == []


def test_each_gpu_type_the_plan_runs_on_is_checked_for_rows():
    # tiny-2types with its A100 group's GPU made an H200 (no published row ran one): its golden
    # plan (stages on both groups) gets the H200's line and none for the H100; the same plan
    # with both stages on the H100 group (the H200 idle) gets none
    from paraplan.cost.readers.gpus import load_catalogue
    inst, plan = _golden("instances/mixed/tiny-2types.yaml")
    h200 = load_catalogue()["H200-SXM-141GB"]
    a100, h100 = inst.cluster.groups
    cluster = dataclasses.replace(inst.cluster, groups=(dataclasses.replace(a100, gpu=h200), h100))
    inst = dataclasses.replace(inst, cluster=cluster)
    res = published_residuals()
    assert {c.stage_groups for c in plan.classes} == {(0, 1)}
    assert [w.split(":")[0] for w in unvalidated_warnings(inst, plan, res)] == ["H200-SXM-141GB"]
    on_h100 = dataclasses.replace(plan, classes=tuple(dataclasses.replace(c, stage_groups=(1, 1))
                                                      for c in plan.classes))
    assert unvalidated_warnings(inst, on_h100, res) == []


@pytest.mark.parametrize("rel", FLAT)
def test_a_flat_plan_and_its_group_form_give_the_same_model_lines(rel):
    # cost/model_notes reads one class at a time for every plan shape, so the plan lines of a
    # flat plan and of its one-class group form come from the same rules on the same class
    from paraplan.cost.model_notes import model_warnings
    inst, plan = _golden(rel)
    g, gplan = _group_form(inst, plan)
    assert model_warnings(g, gplan) == model_warnings(inst, plan)


def test_model_lines_read_every_class():
    # The tiny GPT (8 layers, one A100 group) with 4 of its 8 layers on a 256-token window: the
    # window line applies to a plan where some class runs more than one pipeline stage (a stage
    # may then hold more or fewer windowed layers than its share: the rule's condition). Two
    # classes of one stage each have no such line; the same plan whose second class runs two
    # stages has it, whichever class it is.
    from paraplan.cost.model_notes import model_warnings
    inst, plan = _golden("instances/tiny-gpt-8xA100.yaml")
    model = dataclasses.replace(inst.model, sliding_window_tokens=256, sliding_window_layers=4)
    g, gplan = _group_form(dataclasses.replace(inst, model=model), plan)
    one_stage = dataclasses.replace(gplan.classes[0], replicas=4)
    two_stages = dataclasses.replace(one_stage, replicas=2, stage_groups=(0, 0), layers_per_stage=(4, 4),
                                     full_recompute_layers=(0, 0))
    line = "4 of 8 layers attend to a 256-token window"
    for classes, expected in (((one_stage, one_stage), False), ((one_stage, two_stages), True),
                              ((two_stages, one_stage), True)):
        lines = model_warnings(g, dataclasses.replace(gplan, classes=classes))
        assert any(w.startswith(line) for w in lines) is expected
