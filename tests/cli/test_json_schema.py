"""Every command's --json output against the one schema of solver/commands/schema.py: the real commands
run in-process on small instances, and their output must conform (status present, times as
numbers of seconds, iter_time_s and breakdown on mixed clusters too)."""

import json
from pathlib import Path

import pytest
import yaml
from bundled_plans import same_worker, timeline_json

from paraplan import instances
from paraplan.solver.commands.cli import main
from paraplan.solver.commands.schema import SCHEMAS, validate

INSTANCES = Path(instances.__file__).parent
TINY = str(INSTANCES / "tiny-gpt-8xA100.yaml")
MIXED = str(INSTANCES / "mixed" / "tiny-2types.yaml")
DYNAMIC = str(INSTANCES / "mixed" / "llama3-8b-dynamic.yaml")
EVENT = str(INSTANCES / "mixed" / "events" / "inter-site-degraded.yaml")
NARROW = ["--search", "tp=1,2", "--search", "pp=1,2", "--search", "zero=0,1",
          "--search", "recompute=selective", "--search", "micro_batch=2"]


def run_json(capsys, argv, code=0):
    assert main(argv) == code
    return json.loads(capsys.readouterr().out)


def check(obj, command):
    errors = validate(obj, command)
    assert not errors, "\n".join(errors)
    assert isinstance(obj["status"], str)


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plans") / "plan.yaml"
    assert main(["plan", TINY, "-o", str(path), "--quiet"]) == 0
    return str(path)


@pytest.fixture(scope="module")
def mixed_plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plans") / "mixed.yaml"
    assert main(["plan", MIXED, "-o", str(path), "--quiet"]) == 0
    return str(path)


def test_plan(capsys):
    check(run_json(capsys, ["plan", TINY, "--json", "--quiet"]), "plan")


def test_plan_top(capsys):
    out = run_json(capsys, ["plan", TINY, "--top", "3", "--json"])
    check(out, "plan --top")
    assert [p["rank"] for p in out["plans"]] == [1, 2, 3]


def test_plan_mixed_cluster_has_iter_time_and_breakdown(capsys):
    out = run_json(capsys, ["plan", MIXED, "--json", "--quiet"])
    check(out, "plan")
    # the nominal objective is the plan's iteration time
    assert out["iter_time_s"] == pytest.approx(out["objective_s"], rel=1e-6)
    assert out["breakdown"]["iter_time_s"] == out["iter_time_s"]


def test_simulate(capsys, plan_file):
    check(run_json(capsys, ["simulate", TINY, "--plan", plan_file, "--json"]), "simulate")


def test_simulate_plan_file_alone(capsys, plan_file):
    """`plan -o` writes the plan with its instance, so the plan file alone is a simulate
    command's INSTANCE and plan: the same output as naming both."""
    both = run_json(capsys, ["simulate", TINY, "--plan", plan_file, "--json"])
    assert run_json(capsys, ["simulate", plan_file, "--json"]) == both


def test_simulate_mixed_cluster(capsys, mixed_plan_file):
    out = run_json(capsys, ["simulate", MIXED, "--plan", mixed_plan_file, "--json"])
    check(out, "simulate")
    assert out["scenarios"][0]["scenario"] == "nominal"


def test_exhaustive(capsys):
    out = run_json(capsys, ["exhaustive", TINY, "--json", "--quiet", *NARROW])
    check(out, "exhaustive")
    assert out["status"] == "optimal"


def test_exhaustive_mixed_cluster(capsys):
    check(run_json(capsys, ["exhaustive", MIXED, "--json", "--quiet"]), "exhaustive")


def test_verify(capsys):
    out = run_json(capsys, ["verify", TINY, "--json", "--quiet", *NARROW])
    check(out, "verify")
    assert out["status"] == "agree" and [m["method"] for m in out["methods"]] == ["dp", "cpsat", "milp", "exhaustive"]


def test_verify_mixed_cluster(capsys):
    check(run_json(capsys, ["verify", MIXED, "--json", "--quiet"]), "verify")


def test_accuracy(capsys):
    check(run_json(capsys, ["accuracy", "--json"]), "accuracy")


@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
@same_worker("mixed/llama3-8b-dynamic")
def test_timeline():
    # the command run once per test process with test_timeline_exact's bound check, which
    # reads the same JSON (tests/bundled_plans.py); its limit a hang guard
    check(timeline_json("mixed/llama3-8b-dynamic"), "timeline")


def test_replan(capsys, tmp_path):
    current = tmp_path / "current.yaml"
    assert main(["plan", DYNAMIC, "-o", str(current), "--quiet"]) == 0
    capsys.readouterr()
    check(run_json(capsys, ["replan", DYNAMIC, "--plan", str(current), "--event", EVENT, "--json"]),
          "replan")


def test_partition(capsys):
    check(run_json(capsys, ["partition", TINY, "--tp", "4", "--json"]), "partition")


def test_memory(capsys, plan_file):
    check(run_json(capsys, ["memory", TINY, "--plan", plan_file, "--json"]), "memory")


def test_compare(capsys, plan_file, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"plan": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2,
                                              "recompute": "selective"}}), encoding="utf-8")
    check(run_json(capsys, ["compare", plan_file, str(other), "--instance", TINY, "--json"]), "compare")


def test_bench_quick(capsys, tmp_path):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--quiet", "--json", str(out)]) == 0
    check(json.loads(out.read_text()), "bench")


@pytest.mark.slow  # 5.9 s of CPU (issue 32)
def test_bench_hetero(capsys, tmp_path, monkeypatch):
    # the bundled mixed clusters take about 2 minutes; the smallest one shows the shape
    from paraplan.solver.bench import mixed as mixed_bench
    monkeypatch.setattr(mixed_bench, "INSTANCES", ["tiny-2types"])
    monkeypatch.setattr(mixed_bench, "GROWTH_TYPES", 1)  # one growth row (a second each)
    monkeypatch.setattr(mixed_bench, "ISSUE", ())  # issue 33's rows take a minute each
    out = tmp_path / "hb.json"
    assert main(["bench", "--mixed", "--quiet", "--json", str(out)]) == 0
    check(json.loads(out.read_text()), "bench --mixed")


def test_validator_catches_what_the_issue_reported():
    # the three inconsistencies of issue 14 each fail the schema
    assert validate({"agree": True, "iter_time_s": {"cpsat": 1.0},  # verify's old shape
                     "methods": [{"method": "cpsat", "status": "optimal", "iter_time_s": "1.0",
                                  "time": "0.12 s"}]}, "verify")
    assert validate({"iter_time_s": 1.0, "candidates": 1, "outer_configs": 1, "solve_time_s": 1.0,
                     "plan": None}, "exhaustive")  # no status
    old_mixed = {k: None for k in SCHEMAS["plan"] if k != "iter_time_s"}
    assert any("iter_time_s: missing" in e for e in validate(old_mixed, "plan"))


def test_every_printed_document_carries_the_one_schema_version(capsys, plan_file):
    # one shape for a one-group plan and a mixed cluster's: both open with the same version
    from paraplan.solver.commands.schema import SCHEMA_VERSION
    flat = run_json(capsys, ["simulate", TINY, "--plan", plan_file, "--json"])
    mixed = run_json(capsys, ["plan", MIXED, "--json", "--quiet"])
    assert list(flat)[0] == list(mixed)[0] == "schema_version"
    assert flat["schema_version"] == mixed["schema_version"] == SCHEMA_VERSION == 2
    assert "schema_version: missing" in " ".join(validate({k: v for k, v in flat.items()
                                                           if k != "schema_version"}, "simulate"))


def test_one_breakdown_shape_on_every_cluster(capsys, plan_file):
    # schema 2: a flat plan's breakdown and a mixed cluster's have the same keys, per stage and
    # per class too, and on both the critical path's parts add up to pipeline + sync = iteration
    # (cost/simulate.critical_path: the slowest stage's work, the bubble, the sync)
    flat = run_json(capsys, ["simulate", TINY, "--plan", plan_file, "--json"])["breakdown"]
    mixed = run_json(capsys, ["plan", MIXED, "--json", "--quiet"])["breakdown"]
    assert set(flat) == set(mixed)
    assert set(flat["stages"][0]) == set(mixed["stages"][0])
    assert set(flat["classes"][0]) == set(mixed["classes"][0])
    for bd in (flat, mixed):
        t = bd["iter_time_s"]
        assert sum(bd["exposed_s"].values()) == pytest.approx(t, rel=1e-9)
        assert bd["pipeline_s"] + bd["sync_s"] == pytest.approx(t, rel=1e-12)
    # a flat plan is one class on its one group, every GPU used
    assert len(flat["classes"]) == 1 and flat["idle_gpus"] == 0
    assert len({st["group"] for st in flat["stages"]}) == 1


def test_schema_printout(capsys):
    """`python -m paraplan.solver.commands.schema`, where every --json help points: a section
    per command, and in it each of the command's required top-level fields at the margin."""
    import runpy
    import warnings
    with warnings.catch_warnings():  # the module is already imported by this file
        warnings.simplefilter("ignore", RuntimeWarning)
        runpy.run_module("paraplan.solver.commands.schema", run_name="__main__")
    sections = dict(part.split("\n", 1) for part in capsys.readouterr().out.split("## ")[1:])
    assert set(sections) == set(SCHEMAS)
    for name, spec in SCHEMAS.items():
        lines = sections[name].splitlines()
        assert {line.split(":")[0] for line in lines if line and not line.startswith(" ")} >= set(spec), name
