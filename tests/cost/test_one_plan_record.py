"""One plan record (issue 32): a flat plan is the one-class case of cost/plan_specs.Plan."""

from pathlib import Path

import pytest

from paraplan import instances
from paraplan.cost.specs import Instance
from paraplan.cost.errors import ConfigError
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.plan_specs import Plan, ReplicaClass

TINY = Path(instances.__file__).parent / "tiny-gpt-8xA100.yaml"
FLAT = {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2, "recompute": "selective", "zero": 1}


def test_a_flat_file_reads_as_the_same_record_on_the_flat_instance_and_on_its_one_group():
    # before issue 32 the one-group reading went through a converter (as_class_plan); now both
    # readers return the one record, so the two must be equal field by field
    flat = load_instance(TINY)
    group = flat
    on_flat = plan_from_mapping(FLAT, flat)
    on_group = plan_from_mapping({"plan": FLAT}, group, "<memory>")
    assert on_flat == on_group
    # tiny-gpt: 8 layers, 8 GPUs, global batch 32 = dp 2 x micro-batch 2 x 8 micro-batches
    assert (on_flat.pp, on_flat.dp, on_flat.num_micro_batches) == (2, 2, 8)
    assert on_flat.layers_per_stage == (4, 4) and on_flat.num_gpus == 8
    assert on_flat.classes == (ReplicaClass(replicas=2, stage_groups=(0, 0), num_micro_batches=8,
                                            layers_per_stage=(4, 4), full_recompute_layers=(0, 0)),)
    on_group.check_against(group)
    on_flat.check_against(flat)
    assert on_flat.is_flat_on(group.cluster)
    # each file kind's writer reads back as the record it wrote
    assert plan_from_mapping(plan_to_mapping(on_flat), flat) == on_flat
    assert plan_from_mapping({"plan": plan_to_mapping(on_group, group)}, group, "<memory>") == on_group


def test_several_classes_have_no_one_class_properties_and_are_not_flat():
    flat = load_instance(TINY)
    group = flat
    two = Plan(tp=2, micro_batch=2, zero=1, family="replica", classes=(
        ReplicaClass(replicas=1, stage_groups=(0, 0), num_micro_batches=8, layers_per_stage=(4, 4),
                     full_recompute_layers=(0, 0)),
        ReplicaClass(replicas=1, stage_groups=(0, 0), num_micro_batches=8, layers_per_stage=(4, 4),
                     full_recompute_layers=(0, 0))))
    two.check_against(group)  # 2 x 2 stages x tp 2 = 8 GPUs; 2 x 8 x 2 = 32 sequences
    with pytest.raises(ValueError, match="2 replica classes"):
        two.pp
    assert not two.is_flat_on(group.cluster)
    # one instance record: the flat file's instance takes a group-format plan of two classes
    # (checked above), and a one-class plan on it must still use every GPU: 1 replica x 2 stages
    # x tp 2 = 4 of the 8 GPUs (1 x 16 micro-batches x 2 = the 32 sequences)
    half = Plan(tp=2, micro_batch=2, zero=0, classes=(
        ReplicaClass(replicas=1, stage_groups=(0, 0), num_micro_batches=16, layers_per_stage=(4, 4),
                     full_recompute_layers=(0, 0)),))
    with pytest.raises(ConfigError, match="tp\\*pp\\*dp\\*cp = 4 but the cluster has 8 GPUs"):
        half.check_against(flat)


def test_replace_flat_validates_as_flat_does():
    p = plan_from_mapping(FLAT, load_instance(TINY))
    moved = p.replace_flat(layers_per_stage=(3, 5))
    assert moved.layers_per_stage == (3, 5) and moved.dp == p.dp and moved.zero == p.zero
    with pytest.raises(ConfigError, match="needs 2 entries"):
        p.replace_flat(layers_per_stage=(8,))
    with pytest.raises(ConfigError, match="each stage needs >= 1 layer"):
        Plan.flat(tp=1, pp=2, dp=1, micro_batch=1, num_micro_batches=1, layers_per_stage=(8, 0),
                  full_recompute_layers=(0, 0))
