"""What a proof does not cover: the kinds of plan the declared space leaves out
(solver/hetero_space.not_covered), said by `plan` beside its claim (issue 12: where a rule of the
space stays, the CLI says so when it bites)."""

import dataclasses
import json

from paraplan.cost.hetero_loader import load_hetero_instance
from paraplan.cost.hetero_simulate import simulate_hetero
from paraplan.cost.hetero_specs import HeteroPlan, ReplicaClass
from paraplan.cost.specs import Recompute
from paraplan.solver.commands.cli import main
from paraplan.solver.hetero_space import hetero_outers, not_covered

TINY = "instances/hetero/tiny-2types.yaml"  # one 8-GPU A100 node + one 8-GPU H100 node
THREE = "instances/hetero/llama3-70b-3types-2sites.yaml"  # three groups
PART = "some GPUs of a used group idle (search.idle_gpus)"
SHARED = "two replica classes on one group (search.classes_per_group)"
MIXED = "a stage-wise class beside replica-wise classes (search.mixed_families)"


def test_rules_named_where_the_cluster_has_a_plan_they_exclude():
    tiny = load_hetero_instance(TINY)
    assert not_covered(tiny, {0, 1}) == [PART, SHARED, MIXED]
    assert not_covered(load_hetero_instance(THREE), {0, 1, 2}) == [PART, SHARED, MIXED]


def test_an_idle_group_is_named_first():
    tiny = load_hetero_instance(TINY)
    out = not_covered(tiny, {0})  # the plan leaves group 1 (h100) idle: the rule shows there
    assert out[0].startswith("part of group 'h100' (idle in this plan")
    assert out[1:] == [PART, SHARED, MIXED]


def test_the_excluded_plans_are_real_plans_the_cost_model_prices():
    """Two classes on the A100 node (4 replicas of one stage, 2 of two stages, tp 1) and the
    H100 node idle: a valid plan (check_against) that simulate prices, whose outer
    configuration the space does not list: what the printed line warns of."""
    tiny = load_hetero_instance(TINY)
    plan = HeteroPlan(tp=1, micro_batch=1, recompute=Recompute.NONE, family="replica", classes=(
        ReplicaClass(replicas=4, stage_groups=(0,), num_micro_batches=4, layers_per_stage=(8,),
                     full_recompute_layers=(0,)),
        ReplicaClass(replicas=2, stage_groups=(0, 0), num_micro_batches=8, layers_per_stage=(4, 4),
                     full_recompute_layers=(0, 0))))
    # 4 x 4 + 2 x 8 = 32 sequences = the job's global batch at micro-batch 1
    assert tiny.job.global_batch == 32
    bd = simulate_hetero(tiny, plan)
    assert bd.iter_time_s > 0 and bd.idle_gpus == 8
    assert plan.outer not in hetero_outers(tiny)
    # and the key the line names brings it in
    two = dataclasses.replace(tiny, search=dataclasses.replace(tiny.search, classes_per_group=2,
                                                                tp=(1,), micro_batch=(1,)))
    assert plan.outer in hetero_outers(two)


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
