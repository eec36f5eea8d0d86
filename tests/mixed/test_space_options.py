"""The three options that grow the mixed-cluster space (search.classes_per_group, idle_gpus,
mixed_families; solver/space.py) refuse what they cannot honour: a space too large to list,
said before listing it with the key and how to undo it (a homogeneous file takes them as its
one group: tests/mixed/test_one_group_options.py)."""

from __future__ import annotations

import dataclasses

import pytest

from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.solver.commands.cli import main
from paraplan.solver.class_layouts import MAX_LAYOUTS, space_layouts
from paraplan.solver.space import declared_outers

THREE = "instances/mixed/llama3-70b-3types-2sites.yaml"  # groups of 128, 256 and 128 GPUs

OPTIONS = [  # (key, value, the fix the refusal gives)
    ("classes_per_group", 2, "lower classes_per_group"),
    ("idle_gpus", True, "set idle_gpus false"),
    ("mixed_families", True, "set mixed_families false"),
]


@pytest.mark.parametrize("key, value, fix", OPTIONS)
def test_a_space_too_large_to_list_is_refused_before_listing(key, value, fix, capsys):
    # each option alone takes the three-type instance past the limit (README: 9e9 layouts with
    # classes_per_group 2 or idle_gpus, 7e8 with mixed_families); 1,587 replica layouts without.
    # Refused where the space is listed whole (declared_outers; `--top 2` ranks over it)
    inst = load_instance(THREE)
    assert space_layouts(inst) < MAX_LAYOUTS
    grown = dataclasses.replace(inst, search=dataclasses.replace(inst.search, **{key: value}))
    assert space_layouts(grown) > MAX_LAYOUTS
    with pytest.raises(InstanceError, match=f"search.{key}"):
        declared_outers(grown)
    text = str(value).lower()
    assert main(["plan", THREE, "--top", "2", "--search", f"{key}={text}"]) == 2
    assert fix in capsys.readouterr().err


def test_a_search_refuses_only_the_layouts_its_bound_leaves(monkeypatch):
    # the search that lists partial layouts sets the options' layouts up under the bound
    # (solver/option_families.py): tiny-2types with all three options holds 62 class layouts
    # (space_layouts), of which the search sets up 24 (measured; counted by the hook below); a
    # cap of that many plans it, one less refuses it naming the options
    import paraplan.solver.option_families as of
    from paraplan.solver.search import search
    inst = load_instance("instances/mixed/tiny-2types.yaml")
    grown = dataclasses.replace(inst, search=dataclasses.replace(
        inst.search, classes_per_group=2, idle_gpus=True, mixed_families=True))
    set_up = []
    real = of.OptionBounds.expand

    def counted(self, lst, x, can_win):
        nodes, parts = real(self, lst, x, can_win)
        set_up.extend(parts)
        return nodes, parts
    monkeypatch.setattr(of.OptionBounds, "expand", counted)
    assert search(grown).status == "optimal"
    n = len(set_up)
    assert 0 < n < space_layouts(grown)
    monkeypatch.setattr(of, "MAX_LAYOUTS", n)
    assert search(grown).status == "optimal"
    monkeypatch.setattr(of, "MAX_LAYOUTS", n - 1)
    with pytest.raises(InstanceError, match="search.classes_per_group and search.idle_gpus and search.mixed_families"):
        search(grown)


def test_mixed_families_on_one_group_is_refused(tmp_path, capsys):
    # a pipeline across groups needs two: on one the option would list nothing, silently
    text = open("instances/mixed/tiny-2types.yaml").read()
    one = text[:text.index("    - name: h100")] + text[text.index("job:"):]
    path = tmp_path / "one-group.yaml"
    path.write_text(one)
    assert main(["plan", str(path)]) == 0
    capsys.readouterr()
    assert main(["plan", str(path), "--search", "mixed_families=true"]) == 2
    assert "needs two node groups" in capsys.readouterr().err
