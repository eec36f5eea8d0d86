"""A plan file on node groups carries its instance (solver/outputs.plan_file, written by
cost/readers/instance_writer.py), so that it reads back alone: `export --to layout` without
--instance, and the plan file itself as the INSTANCE of simulate, memory and compare.

Each command's output from the plan file alone is compared with its output from the bundled
instance file, which the reader reads directly: the two agree only if the written instance
holds the same groups, links and scenarios.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_file_instance, plan_from_mapping
from paraplan.solver.commands.cli import main
from paraplan.solver.outputs import plan_file

ROOT = Path(__file__).resolve().parents[2]
TINY2 = str(ROOT / "instances/mixed/tiny-2types.yaml")
DYNAMIC = str(ROOT / "instances/mixed/llama3-8b-dynamic.yaml")
GOLDENS = json.loads((ROOT / "tests/goldens/bundled.json").read_text())


def _run(capsys, *argv) -> tuple[int, str]:
    code = main([*map(str, argv)])
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def tiny_plan_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("alone") / "p.yaml"
    assert main(["plan", TINY2, "--quiet", "-o", str(path)]) == 0
    return path


def test_plan_o_on_node_groups_writes_the_instance_beside_the_plan(tiny_plan_file):
    data = yaml.safe_load(tiny_plan_file.read_text())
    assert set(data) == {"plan", "instance"} and "classes" in data["plan"]
    carried = plan_file_instance(data, tiny_plan_file)
    assert carried == replace(load_instance(TINY2), source=str(tiny_plan_file))


@pytest.mark.parametrize("command", [["simulate", "--json"], ["memory", "--json"]])
def test_simulate_and_memory_read_the_plan_file_alone(tiny_plan_file, capsys, command):
    name, *flags = command
    alone = _run(capsys, name, tiny_plan_file, "--plan", tiny_plan_file, *flags)
    given = _run(capsys, name, TINY2, "--plan", tiny_plan_file, *flags)
    assert alone[0] == 0 and alone == given


def test_compare_and_layout_read_the_plan_file_alone(tiny_plan_file, capsys):
    code, out = _run(capsys, "compare", tiny_plan_file, tiny_plan_file, "--instance", tiny_plan_file,
                     "--json")
    assert code == 0 and json.loads(out)["status"] == "equal"
    alone = _run(capsys, "export", tiny_plan_file, "--to", "layout")
    given = _run(capsys, "export", tiny_plan_file, "--to", "layout", "--instance", TINY2)
    assert alone[0] == 0 and alone == given


def test_a_plan_file_carries_the_scenarios_simulate_prices(tmp_path, capsys):
    # llama3-8b-dynamic: the nominal network and two declared scenarios, each priced by simulate
    inst = load_instance(DYNAMIC)
    plan = plan_from_mapping(GOLDENS["instances/mixed/llama3-8b-dynamic.yaml:nominal"]["plan"], inst)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(plan_file(inst, plan, inst), sort_keys=False))
    alone = _run(capsys, "simulate", path, "--plan", path, "--json")
    given = _run(capsys, "simulate", DYNAMIC, "--plan", path, "--json")
    assert alone[0] == 0 and alone == given
    assert [s["scenario"] for s in json.loads(alone[1])["scenarios"]] == [
        "nominal", "inter-site-5pct", "west-nic-50g"]


def test_simulate_reads_a_plan_file_given_alone_as_its_plan(tiny_plan_file, capsys):
    # `simulate p.yaml` is `simulate p.yaml --plan p.yaml` (the same output, by the test above
    # equal to the bundled instance's); an instance file that holds no plan still needs --plan
    alone = _run(capsys, "simulate", tiny_plan_file, "--json")
    assert alone[0] == 0 and alone == _run(capsys, "simulate", tiny_plan_file, "--plan", tiny_plan_file, "--json")
    code = main(["simulate", TINY2])
    assert code == 2 and "--plan: no plan given" in capsys.readouterr().err
