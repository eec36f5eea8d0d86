"""One reader per file kind (issue 32): a flat plan file and the same plan written as its one
replica class read to one record, so every command answers them alike; the rules that held
for one form only now hold for both.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from export_support import export, golden_plan_file
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping

ROOT = Path(__file__).resolve().parents[2]
TINY = "instances/tiny-gpt-8xA100.yaml"  # 8 layers, 16 heads, global batch 32, one node of 8 A100


def _as_one_class(path: Path) -> Path:
    """The flat plan file at `path` rewritten as its one replica class (the group format), the
    instance it carries unchanged."""
    data = yaml.safe_load(path.read_text())
    flat, group = data["plan"], data["instance"]["cluster"]["gpu"]  # the one group, named after its GPU
    one = {"replicas": flat.pop("dp"), "stages": [group] * flat.pop("pp"),
           "num_micro_batches": flat.pop("num_micro_batches"),
           "layers_per_stage": flat.pop("layers_per_stage")}
    if "full_recompute_layers" in flat:
        one["full_recompute_layers"] = flat.pop("full_recompute_layers")
    out = path.with_name("one-class.yaml")
    out.write_text(yaml.safe_dump({"plan": {**flat, "classes": [one]}, "instance": data["instance"]},
                                  sort_keys=False))
    return out


def test_a_flat_plan_and_its_one_class_form_export_the_same_configuration(tmp_path, capsys):
    flat = golden_plan_file(tmp_path, TINY)
    one = _as_one_class(flat)
    inst = load_instance(ROOT / TINY)
    assert plan_from_mapping(yaml.safe_load(one.read_text()), inst) == \
        plan_from_mapping(yaml.safe_load(flat.read_text()), inst)
    codes = []
    for to in ("megatron", "torchtitan", "deepspeed"):  # before: the one-class file was refused
        (code, out, err), got_one = export(capsys, flat, "--to", to), export(capsys, one, "--to", to)
        assert got_one == (code, out, err.replace(str(flat), str(one))), to
        codes.append(code)
    assert 0 in codes  # at least one target writes a configuration
    # and --to layout refuses both alike: one class on one GPU type is one configuration
    for path in (flat, one):
        code, out, err = export(capsys, path, "--to", "layout")
        assert code == 2 and out == "" and "--to layout" in err and "--to megatron" in err


def test_interleaving_needs_a_pipeline_in_either_form():
    # virtual_stages 2 on a one-stage pipeline has no second model chunk to interleave: refused
    # in the flat form before, and now in the class form too (it was read, and priced)
    inst = load_instance(ROOT / TINY)
    group = inst.cluster.groups[0].name
    forms = ({"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1, "virtual_stages": 2},
             {"tp": 2, "micro_batch": 1, "virtual_stages": 2,
              "classes": [{"replicas": 4, "stages": [group], "num_micro_batches": 8}]})
    for mapping in forms:
        with pytest.raises(InstanceError) as info:
            plan_from_mapping(mapping, inst, "p.yaml")
        assert info.value.field == "plan" and "virtual_stages=2 needs pp > 1" in str(info.value)


def test_an_instance_is_checked_in_one_order_in_either_form(tmp_path):
    # a file with two errors names the same one first whether its cluster is flat or groups
    for rel in (TINY, "instances/mixed/tiny-2types.yaml"):
        data = yaml.safe_load((ROOT / rel).read_text())
        data["model"]["layers"] = "x"
        data.setdefault("search", {})["zero"] = [9]
        path = tmp_path / Path(rel).name
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(InstanceError) as info:
            load_instance(path)
        assert info.value.field == "search.zero[0]", rel
