"""cost/readers/plan_reader.py: a plan's layer split given as Megatron-core takes it (first/last stage counts,
the embedding/loss counted as layers), and the errors of a split that cannot be cut into equal
model chunks, each naming the file, the field and the fix."""

from pathlib import Path

import pytest
import yaml

from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import load_plan, plan_from_mapping
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inst14(tmp_path_factory):
    """small-gpt-16xA100 (16 GPUs, batch 64) with 14 layers: with the embedding and loss
    counted, 16 slots, 4 per stage on pp 4."""
    text = (ROOT / "instances" / "small-gpt-16xA100.yaml").read_text()
    path = tmp_path_factory.mktemp("inst") / "small14.yaml"
    path.write_text(text.replace("  layers: 12\n", "  layers: 14\n"))
    return load_instance(path)


BASE = {"tp": 1, "pp": 4, "dp": 4, "micro_batch": 1, "virtual_stages": 2}


def write(tmp_path, **plan) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"plan": {**BASE, **plan}}))
    return path


def test_accounted_split_is_read_priced_and_written_back(tmp_path, inst14):
    # 14 + 2 = 16 slots, 4 per stage: [3, 4, 4, 3]; v 2: chunks of 2 slots.
    plan = load_plan(write(tmp_path, embedding_in_split=True, loss_in_split=True), inst14)
    assert plan.layers_per_stage == (3, 4, 4, 3)
    assert plan.chunk_layers == ((1, 2), (2, 2), (2, 2), (2, 1))
    bd = simulate(inst14, plan)
    assert [s.layers for s in bd.stages] == [3, 4, 4, 3]
    again = plan_from_mapping(plan_to_mapping(plan), inst14)
    assert again == plan and plan_to_mapping(plan)["embedding_in_split"] is True


def test_first_and_last_counts_give_the_split(tmp_path, inst14):
    # 14 - 2 - 4 = 8 middle layers over 2 middle stages: [2, 4, 4, 4]
    plan = load_plan(write(tmp_path, first_stage_layers=2, last_stage_layers=4), inst14)
    assert plan.layers_per_stage == (2, 4, 4, 4)
    assert "first_stage_layers" not in plan_to_mapping(plan)  # written as layers_per_stage


@pytest.mark.parametrize("plan, field, words, fix", [
    # 3 layers on the first stage do not fill 2 equal chunks
    (dict(first_stage_layers=3), "plan.first_stage_layers", "not a multiple of virtual_stages=2",
     "give counts Megatron-core can split"),
    # 7 layers on stage 0 without the embedding counted: 7 slots, odd
    (dict(layers_per_stage=[3, 4, 4, 3]), "plan.layers_per_stage", "stage 0 holds 3",
     "embedding_in_split"),
    # only the embedding counted: the last stage's 3 layers are 3 slots
    (dict(layers_per_stage=[3, 4, 4, 3], embedding_in_split=True), "plan.layers_per_stage",
     "stage 3 holds 3", "loss_in_split"),
    # 14 + 1 = 15 slots do not divide over 4 stages
    (dict(embedding_in_split=True), "plan.embedding_in_split", "divisible by pp=4",
     "layers_per_stage"),
    (dict(layers_per_stage=[4, 4, 4, 2], first_stage_layers=4), "plan.first_stage_layers",
     "beside layers_per_stage", "remove first_stage_layers"),
    (dict(first_stage_layers=2, embedding_in_split=True), "plan.first_stage_layers",
     "together with", "Megatron-core"),
])
def test_split_errors_name_file_field_and_fix(tmp_path, inst14, plan, field, words, fix):
    path = write(tmp_path, **plan)
    with pytest.raises(InstanceError) as e:
        load_plan(path, inst14)
    assert e.value.path == str(path) and e.value.field == field
    assert words in e.value.problem and fix in e.value.fix


def test_accounting_without_a_pipeline_is_refused(tmp_path, inst14):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"plan": {"tp": 4, "pp": 1, "dp": 4, "micro_batch": 1,
                                             "loss_in_split": True}}))
    with pytest.raises(InstanceError) as e:
        load_plan(path, inst14)
    assert e.value.field == "plan.loss_in_split" and "pp = 1" in e.value.problem
