"""Bad heterogeneous input of any shape: `paraplan` exits 0 or 2 with one stderr line naming
the file, never a traceback (the contract of solver/commands/cli.py, as tests/robustness checks for the
homogeneous files). Hypothesis mutates a small two-site instance with links, scenarios, a
timeline and switching costs, an event file and a heterogeneous plan: a value replaced, a key
deleted or added, anywhere in the tree, lists included."""

from __future__ import annotations

import copy
import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paraplan.solver.commands.cli import EXIT_BAD_INPUT, main
from paraplan.solver.commands.exit_codes import EXIT_INFEASIBLE

GROUP = {"gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 4, "intra_node_gbytes_per_s": 600,
         "nic_gbit_per_s": 200}
INSTANCE = {
    "name": "fuzz",
    "model": {"layers": 4, "hidden": 256, "heads": 4, "ffn": 1024, "vocab": 1000, "seq_len": 128,
              "mlp": "gelu"},
    "cluster": {"groups": [dict(GROUP, name="a", site="east"),
                           dict(GROUP, name="h", site="west", gpu="H100-SXM5-80GB", nic_gbit_per_s=400)],
                "links": [{"between": ["east", "west"], "gbit_per_s": 100, "latency_us": 1000}]},
    "job": {"global_batch": 16},
    "search": {"micro_batch": [1], "tp": [2, 4]},
    "scenarios": [{"name": "slow", "probability": 0.2,
                   "changes": [{"between": ["east", "west"], "scale": 0.1}]}],
    "timeline": [{"scenario": "nominal", "duration_h": 2}, {"scenario": "slow", "duration_h": 1}],
    "switching": {"storage_gbytes_per_s": 10, "restart_s": 60},
}
EVENT = {"event": {"name": "cut", "changes": [{"between": ["east", "west"], "scale": 0.5}],
                   "remaining_hours": 10}}
PLAN = {"plan": {"tp": 4, "micro_batch": 1, "family": "stage",
                 "classes": [{"replicas": 1, "stages": ["a", "h"], "num_micro_batches": 16,
                              "layers_per_stage": [1, 3]}]}}

VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2, 4, 10**9, 10**30, 1e-300, 0.5, math.nan, math.inf, True, None,
                     "", "nominal", "east", "west", "a", "h", "stage", "replica", "\x00", "模型",
                     [], {}, ["east"], ["a", "a"], ["east", "west", "x"]]),
    st.integers(), st.floats(), st.text(max_size=6))
KEYS = st.sampled_from(["name", "site", "between", "scale", "gbit_per_s", "probability", "changes",
                        "group", "nic_scale", "scenario", "duration_h", "stages", "replicas", "xyz",
                        "层", "remaining_hours", "remaining_iterations"])
FUZZ = settings(max_examples=100, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _containers(tree, path=()):
    """Paths of every mapping and list in the tree."""
    yield path
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in items:
        if isinstance(value, (dict, list)):
            yield from _containers(value, path + (key,))


def _fresh(value):
    """sampled_from hands out the same [] and {} objects: copy them, or edits would alias."""
    return copy.deepcopy(value)


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


@st.composite
def mutants(draw, base):
    tree = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        where = _at(tree, draw(st.sampled_from(list(_containers(tree)))))
        if isinstance(where, dict):
            kind = draw(st.sampled_from(("replace", "delete", "add")))
            if kind == "add" or not where:
                where[draw(KEYS)] = _fresh(draw(VALUES))
            else:
                key = draw(st.sampled_from(sorted(where, key=str)))
                if kind == "delete":
                    del where[key]
                else:
                    where[key] = _fresh(draw(VALUES))
        elif where and draw(st.booleans()):
            del where[draw(st.integers(0, len(where) - 1))]
        elif where:
            where[draw(st.integers(0, len(where) - 1))] = _fresh(draw(VALUES))
        else:
            where.append(_fresh(draw(VALUES)))
    return tree


def _run(capsys, argv, files) -> None:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    # a plan; a declared space proved empty or infeasible (a mutant may empty it: exit 4 with its
    # reason); the time limit reached before any plan (exit 3, a loaded machine): all answers
    if code in (0, EXIT_INFEASIBLE, 3):
        return
    assert code == EXIT_BAD_INPUT, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert any(lines[0].startswith(f"paraplan: error: {f}: ") for f in files), lines[0]
    assert " (fix: " in lines[0], lines[0]


def _write(path, data):
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def test_the_base_files_are_valid(tmp_path, capsys):
    inst, event, plan = (_write(tmp_path / n, d) for n, d in
                         (("i.yaml", INSTANCE), ("e.yaml", EVENT), ("p.yaml", PLAN)))
    assert main(["plan", str(inst), "--robust"]) == 0
    assert main(["replan", str(inst), "--plan", str(plan), "--event", str(event)]) == 0
    assert main(["timeline", str(inst), "--quiet"]) == 0


@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
@FUZZ
@given(tree=mutants(INSTANCE))
def test_mutated_instances(tmp_path, capsys, tree):
    inst = _write(tmp_path / "inst.yaml", tree)
    _run(capsys, ["plan", inst, "--time-limit-s", "10"], [inst])


@FUZZ
@given(event=mutants(EVENT), plan=mutants(PLAN))
def test_mutated_events_and_plans(tmp_path, capsys, event, plan):
    inst = _write(tmp_path / "inst.yaml", INSTANCE)
    ev, pl = _write(tmp_path / "event.yaml", event), _write(tmp_path / "plan.yaml", plan)
    _run(capsys, ["replan", inst, "--plan", pl, "--event", ev, "--time-limit-s", "10"], [ev, pl])
