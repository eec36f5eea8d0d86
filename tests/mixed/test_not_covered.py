"""What a proof does not cover: the kinds of plan the declared space leaves out
(solver/space.not_covered), said by `plan` beside its claim (issue 12: where a rule of the
space stays, the CLI says so when it bites)."""

import dataclasses
import json

import pytest

from paraplan.cost.specs import Instance
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.simulate import simulate
from paraplan.cost.plan_specs import Plan, ReplicaClass
from paraplan.cost.specs import Recompute
from paraplan.solver.commands.cli import main
from paraplan.solver.space import declared_outers, not_covered

TINY = "instances/mixed/tiny-2types.yaml"  # one 8-GPU A100 node + one 8-GPU H100 node
THREE = "instances/mixed/llama3-70b-3types-2sites.yaml"  # three groups
PART = "some GPUs of a used group idle (search.idle_gpus)"
SHARED = "two replica classes on one group (search.classes_per_group)"
MIXED = "a stage-wise class beside replica-wise classes (search.mixed_families)"


def test_rules_named_where_the_cluster_has_a_plan_they_exclude():
    tiny = load_instance(TINY)
    assert not_covered(tiny, {0, 1}) == [PART, SHARED, MIXED]
    assert not_covered(load_instance(THREE), {0, 1, 2}) == [PART, SHARED, MIXED]


def test_an_idle_group_is_named_first():
    tiny = load_instance(TINY)
    out = not_covered(tiny, {0})  # the plan leaves group 1 (h100) idle: the rule shows there
    assert out[0].startswith("part of group 'h100' (idle in this plan")
    assert out[1:] == [PART, SHARED, MIXED]


def test_the_excluded_plans_are_real_plans_the_cost_model_prices():
    """Two classes on the A100 node (4 replicas of one stage, 2 of two stages, tp 1) and the
    H100 node idle: a valid plan (check_against) that simulate prices, whose outer
    configuration the space does not list: what the printed line warns of."""
    tiny = load_instance(TINY)
    plan = Plan(tp=1, micro_batch=1, recompute=Recompute.NONE, family="replica", classes=(
        ReplicaClass(replicas=4, stage_groups=(0,), num_micro_batches=4, layers_per_stage=(8,),
                     full_recompute_layers=(0,)),
        ReplicaClass(replicas=2, stage_groups=(0, 0), num_micro_batches=8, layers_per_stage=(4, 4),
                     full_recompute_layers=(0, 0))))
    # 4 x 4 + 2 x 8 = 32 sequences = the job's global batch at micro-batch 1
    assert tiny.job.global_batch == 32
    bd = simulate(tiny, plan)
    assert bd.iter_time_s > 0 and bd.idle_gpus == 8
    assert plan.outer not in declared_outers(tiny)
    # and the key the line names brings it in
    two = dataclasses.replace(tiny, search=dataclasses.replace(tiny.search, classes_per_group=2,
                                                                tp=(1,), micro_batch=(1,)))
    assert plan.outer in declared_outers(two)


def test_plan_says_it_in_text_and_json(capsys):
    assert main(["plan", TINY]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("not covered"))
    assert PART in line and SHARED in line and MIXED in line
    assert main(["plan", TINY, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["space"]["not_covered"] == [PART, SHARED, MIXED]


def test_one_group_plan_says_it_too(capsys):
    assert main(["plan", "instances/tiny-gpt-8xA100.yaml", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["space"]["not_covered"] == [PART, SHARED]


DUALPIPE = "the DualPipe schedule (job.pipeline_schedule: dualpipe plans over it"


def test_dualpipe_named_for_moe_models_only():
    # DualPipe's win is hiding the experts' all-to-alls (cost/dualpipe.py); on a dense model its
    # bubble, (pp/2 - 1)(F&B + B - 3W), is no smaller than interleaving's, so it is named only
    # where it can beat the space
    moe = load_instance("instances/mixtral-8x7b-64xH100.yaml")
    dense = load_instance("instances/llama3-8b-64xH100.yaml")
    assert any(x.startswith(DUALPIPE) for x in not_covered(moe))
    assert not any(x.startswith(DUALPIPE) for x in not_covered(dense))


def test_dualpipe_beats_the_proved_1f1b_optimum_on_the_deepseek_instance():
    """Why the line is there: DeepSeek-V3's own layout (tp 1, pp 16, ep 64, dp 128, 120
    micro-batches, layers [3, 4 x 14, 2]; arXiv 2412.19437 Sec. 3.1-3.3) under DualPipe, priced
    by the same cost model, is faster than the optimum proved over the 1F1B space (frozen in
    tests/goldens/bundled.json, 21.90 s): 17.80 s (DeepSeek measured 19.9 s: 180K H800 GPU hours
    per trillion tokens, 1e12 / (180,000 x 3,600) = 1,543 tokens/s per GPU, 15,360 x 4,096 /
    1,543 / 2,048)."""
    from dataclasses import replace

    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.simulate import simulate
    from paraplan.cost.specs import PipelineSchedule
    inst = load_instance("instances/deepseek-v3-shaped-2048xH800.yaml")
    dual = replace(inst, job=replace(inst.job, pipeline_schedule=PipelineSchedule.DUALPIPE))
    plan = Plan.flat(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1, ep=64,
                layers_per_stage=(3,) + (4,) * 14 + (2,), full_recompute_layers=(0,) * 16)
    golden = json.load(open("tests/goldens/bundled.json"))
    optimum_s = golden["instances/deepseek-v3-shaped-2048xH800.yaml:nominal"]["objective_s"]
    dual_s = simulate(dual, plan).iter_time_s
    measured_s = 15360 * 4096 / (1e12 / (180_000 * 3600)) / 2048
    assert dual_s < measured_s < optimum_s, (dual_s, measured_s, optimum_s)


def test_a_dualpipe_job_plans_over_dualpipe_and_proves_deepseeks_layout_optimal():
    """With job.pipeline_schedule: dualpipe the space is DualPipe's (formulations/dualpipe.py)
    and the line names 1F1B as what it leaves out. On the DeepSeek-V3 instance the proved
    optimum is DeepSeek's own layout but for ep 128 (two experts a rank, not four): 16.78 s
    against its 16.94 s, 0.9% apart, the host loop over local experts that the instance's
    Megatron-core grouped GEMM pays per expert (cost/moe.expert_host_s; DeepSeek's DeepGEMM,
    one launch, does not), with DualPipe hiding the wider all-to-all. Before that loop was
    priced beside the GEMMs the optimum was exactly DeepSeek's layout."""
    from dataclasses import replace

    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.simulate import simulate
    from paraplan.cost.specs import PipelineSchedule
    from paraplan.solver.solve import solve as plan_homogeneous
    inst = load_instance("instances/deepseek-v3-shaped-2048xH800.yaml")
    dual = replace(inst, job=replace(inst.job, pipeline_schedule=PipelineSchedule.DUALPIPE))
    lines = not_covered(dual)
    assert not any(x.startswith(DUALPIPE) for x in lines)
    assert any(x.startswith("the 1F1B and interleaved 1F1B schedules") for x in lines)
    res = plan_homogeneous(dual)
    deepseek = Plan.flat(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1, ep=64,
                    layers_per_stage=(3,) + (4,) * 14 + (2,), full_recompute_layers=(0,) * 16)
    assert res.status == "optimal"
    theirs = simulate(dual, deepseek).iter_time_s
    assert res.iter_time_s < theirs < 1.01 * res.iter_time_s
    p = res.plan
    assert (p.tp, p.pp, p.dp, p.ep, p.zero, p.num_micro_batches) == (1, 16, 128, 128, 1, 120)
    assert res.iter_time_s == pytest.approx(simulate(dual, deepseek.replace_flat(ep=128)).iter_time_s, rel=1e-9)
