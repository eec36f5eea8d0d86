"""One reader per file kind, one refusal table (issue 32): `load_instance` and `load_plan` read
either form (a flat file is the one-group, one-class case), `plan_to_mapping` writes the form
the instance reads, and `search_refusal` is one table of rules for one node group or many,
each refusal naming the rule that refused it."""

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.search import override_search
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.plan_specs import ReplicaClass
from paraplan.cost.space_rules import SEARCH_RULES, search_refusal
from paraplan.cost.specs import PipelineSchedule, Recompute

ROOT = Path(__file__).resolve().parents[2]
FLAT = ROOT / "instances" / "tiny-gpt-8xA100.yaml"  # 8 layers, 16 heads, one node of 8 A100
TWO = ROOT / "instances" / "mixed" / "tiny-2types.yaml"  # the same model on an A100 and an H100 node


def test_load_instance_reads_either_form_and_a_flat_file_is_one_group():
    flat, two = load_instance(FLAT), load_instance(TWO)
    assert len(flat.cluster.groups) == 1 and flat.cluster.num_gpus == 8
    assert len(two.cluster.groups) == 2 and two.cluster.num_gpus == 16
    assert flat.model == two.model  # the two files describe the same model


def test_plan_from_mapping_reads_a_flat_plan_and_its_classes_form_as_one_record():
    inst = load_instance(FLAT)
    # tp 2 x pp 2 x dp 2 = 8 GPUs; 8 layers split 4 + 4; global_batch / (dp x micro_batch)
    # micro-batches per replica
    mbs = inst.job.global_batch // 2
    flat = plan_from_mapping({"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1}, inst)
    group = inst.cluster.groups[0].name
    classes = plan_from_mapping({"tp": 2, "micro_batch": 1, "classes": [
        {"replicas": 2, "stages": [group, group], "num_micro_batches": mbs,
         "layers_per_stage": [4, 4]}]}, inst)
    assert flat == classes
    assert flat.classes == (ReplicaClass(replicas=2, stage_groups=(0, 0), num_micro_batches=mbs,
                                         layers_per_stage=(4, 4), full_recompute_layers=(0, 0)),)
    # written back in the form the instance reads: the flat one, which reads back the same
    assert "classes" not in plan_to_mapping(flat, inst)
    assert plan_from_mapping(plan_to_mapping(flat, inst), inst) == flat


def test_plan_to_mapping_writes_classes_where_the_instance_has_several_groups():
    inst = load_instance(TWO)
    names = [g.name for g in inst.cluster.groups]
    # one replica of two stages, one on each node group, tp 8 filling each node: every
    # sequence of the global batch is one micro-batch of that replica
    plan = plan_from_mapping({"tp": 8, "micro_batch": 1, "classes": [
        {"replicas": 1, "stages": names, "num_micro_batches": inst.job.global_batch,
         "layers_per_stage": [4, 4]}]}, inst)
    assert plan.classes[0].stage_groups == (0, 1)
    out = plan_to_mapping(plan, inst)
    assert out["classes"][0]["stages"] == names
    assert plan_from_mapping(out, inst) == plan


def test_each_refusal_names_its_rule_on_one_group_and_on_several():
    flat, two = load_instance(FLAT), load_instance(TWO)
    # tp = 3 divides neither the 8 GPUs of the one node nor the 16 heads: the tp rule, on one
    # group; on the two groups it divides no group's 8 GPUs either
    for inst in (flat, two):
        r = search_refusal(replace(inst.search, tp=(3,)), inst.model, inst.cluster, inst.job,
                           frozenset({"tp"}))
        assert (r.rule, r.key) == ("tp", "tp") and "tp=3" in r.problem
    # uniform_split is refused on two groups only (the mixed-cluster planner has no even split)
    space = replace(flat.search, uniform_split=True)
    assert search_refusal(space, flat.model, flat.cluster, flat.job, frozenset({"uniform_split"})) is None
    r = search_refusal(replace(two.search, uniform_split=True), two.model, two.cluster, two.job,
                       frozenset({"uniform_split"}))
    assert (r.rule, r.key) == ("uniform_split", "uniform_split")
    # a DualPipe job's pp = 1: the pp rule admits it (1 stage <= 8 layers, 1 divides 8 GPUs),
    # DualPipe's own rule does not (cost/dualpipe.schedule_problem: an even pp >= 2)
    job = replace(flat.job, pipeline_schedule=PipelineSchedule.DUALPIPE)
    r = search_refusal(replace(flat.search, pp=(1,)), flat.model, flat.cluster, job, frozenset({"pp"}))
    assert (r.rule, r.key) == ("dualpipe", "pp")


def test_the_table_lists_each_rule_once_with_a_rule_for_some_cluster():
    names = [row[0] for row in SEARCH_RULES]
    assert len(names) == len(set(names))
    assert all(row[1] is not None or row[2] is not None for row in SEARCH_RULES)


def test_override_search_refuses_by_the_same_table_on_several_groups():
    with pytest.raises(InstanceError) as e:
        override_search(load_instance(TWO), {"uniform_split": True})
    assert e.value.field == "search.uniform_split"
    assert override_search(load_instance(FLAT), {"recompute": ["none"]}).search.recompute == (Recompute.NONE,)


def test_a_node_group_file_refuses_what_its_framework_cannot_run_as_a_flat_file_does():
    # DeepSpeed has no context parallelism (cost/framework_rules.py): `cp: [2]` is refused on a
    # flat file, and now on node groups too, where it was filtered out without a word
    import yaml
    from paraplan.cost.readers.instance import instance_from_mapping
    for path in (FLAT, TWO):
        data = yaml.safe_load(path.read_text())
        data["job"]["framework"] = "deepspeed"
        data["search"] = {"cp": [2]}
        with pytest.raises(InstanceError) as e:
            instance_from_mapping(data, path)
        assert e.value.field == "search.cp" and "deepspeed" in str(e.value)


@pytest.mark.parametrize("section, words", [
    ({"moe": {"experts": 4, "top_k": 2, "expert_ffn": 256}}, "is a mixture-of-experts model"),
    ({"mla": {"q_lora_rank": None, "kv_lora_rank": 64, "qk_nope_head_dim": 16,
              "qk_rope_head_dim": 8, "v_head_dim": 16}}, "has multi-head latent attention"),
])
@pytest.mark.parametrize("path", [FLAT, TWO])
def test_either_form_refuses_megatron_only_layers_under_another_framework(tmp_path, path, section, words):
    # MoE layers and latent attention are priced as Megatron-core runs them, so a job under
    # torchtitan is refused by whichever reader reads the file: on main the node-group reader
    # let an MoE model under torchtitan through, priced as Megatron's (the flat one refused it)
    import yaml
    raw = yaml.safe_load(path.read_text())
    raw["model"].update(section)
    raw["model"].pop("kv_heads", None)  # latent attention needs kv_heads = heads
    raw["job"]["framework"] = "torchtitan"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(InstanceError) as err:
        load_instance(bad)
    assert (err.value.field, err.value.fix) == ("job.framework", "set job.framework: megatron")
    assert words in err.value.problem and err.value.problem.endswith("not torchtitan")
