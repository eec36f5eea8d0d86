"""The heterogeneous commands through main(argv): plan (nominal, --robust, --expected, -o),
exhaustive, verify, replan and timeline, and their one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paraplan.cost.specs import Cluster
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import load_plan
from paraplan.solver.commands.cli import EXIT_BAD_INPUT, main

ROOT = Path(__file__).resolve().parents[2]
TINY2 = str(ROOT / "instances/mixed/tiny-2types.yaml")
DYNAMIC = str(ROOT / "instances/mixed/llama3-8b-dynamic.yaml")
EVENT = str(ROOT / "instances/mixed/events/inter-site-degraded.yaml")
HOMOGENEOUS = str(ROOT / "instances/tiny-gpt-8xA100.yaml")


def test_plan_writes_a_plan_that_loads_back(tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    assert main(["plan", DYNAMIC, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "OPTIMAL (proved over the declared space)" in text
    inst = load_instance(DYNAMIC)
    plan = load_plan(out, inst)
    assert sum(c.replicas * c.num_micro_batches for c in plan.classes) * plan.micro_batch == 256


def test_robust_reports_regret_per_scenario(capsys):
    # the limit guards a hang: beside seven other jobs on two cores these took 170-370 s of wall
    assert main(["plan", DYNAMIC, "--robust", "--json", "--time-limit-s", "600"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["objective"] == "robust" and res["status"] == "optimal"
    per = res["per_scenario_s"]
    assert set(per) == {"nominal", "inter-site-5pct", "west-nic-50g"}
    assert res["objective_s"] == pytest.approx(max(per.values()))
    # each scenario's optimum is a lower bound of the robust plan's time there
    for r in res["regret"]:
        assert r["plan_time_s"] >= r["optimum_s"] * (1 - 1e-9)
        assert r["regret"] >= -1e-9


def test_expected_needs_probabilities_and_scenarios(capsys):
    assert main(["plan", TINY2, "--expected"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scenarios" in err
    assert main(["plan", HOMOGENEOUS, "--robust"]) == EXIT_BAD_INPUT
    assert "groups" in capsys.readouterr().err


def test_verify_agrees_on_the_tiny_mixed_instance(capsys):
    assert main(["verify", TINY2, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["agree"] and len(res["methods"]) == 3  # one JSON shape for verify (solver/commands/schema.py)


def test_replan_and_timeline(tmp_path, capsys):
    current = tmp_path / "current.yaml"
    # the predicted time (`--objective mean`): the running plan is then in the space of the
    # re-plan's objective, so it is no faster than the new optimum
    assert main(["plan", DYNAMIC, "-o", str(current), "--objective", "mean"]) == 0
    capsys.readouterr()
    new = tmp_path / "new.yaml"
    assert main(["replan", DYNAMIC, "--plan", str(current), "--event", EVENT, "--json", "--objective", "mean",
                 "-o", str(new)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["new_status"] == "optimal"
    # -o carries the instance after the event (the degraded inter-site link): the new plan file
    # alone re-simulates to the new optimum's time, which the running plan cannot reach there
    assert main(["simulate", str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iter_time_s"] == pytest.approx(r["new_s"], rel=1e-9)
    assert r["current_after_event_s"] >= r["new_s"] * (1 - 1e-9)
    assert r["pays_off"] == (r["switch_total_s"] < r["stay_total_s"])
    assert main(["timeline", DYNAMIC, "--json", "--objective", "mean"]) == 0
    t = json.loads(capsys.readouterr().out)
    assert t["iterations"] <= t["upper_bound_iterations"] * (1 + 1e-9)
    assert t["iterations"] >= max(t["static_iterations"], t["follow_iterations"]) * (1 - 1e-9)


def test_replan_with_a_plan_for_another_cluster_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("plan:\n  tp: 1\n  micro_batch: 1\n  classes:\n    - replicas: 1\n"
                   "      stages: [nowhere]\n      num_micro_batches: 256\n")
    assert main(["replan", DYNAMIC, "--plan", str(bad), "--event", EVENT]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err


def test_simulate_a_plan_on_every_scenario(tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    assert main(["plan", DYNAMIC, "--json", "-o", str(out)]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert main(["simulate", DYNAMIC, "--plan", str(out), "--json"]) == 0
    out_json = json.loads(capsys.readouterr().out)  # one JSON schema (solver/commands/schema.py)
    sim = {s["scenario"]: s for s in out_json["scenarios"]}
    assert set(sim) == {"nominal", "inter-site-5pct", "west-nic-50g"}
    # the plan was optimised for the nominal network: simulating it again gives its objective
    assert sim["nominal"]["iter_time_s"] == pytest.approx(planned["objective_s"], rel=1e-12)
    assert out_json["iter_time_s"] == sim["nominal"]["iter_time_s"]
    assert all(s["fits_memory"] for s in sim.values())


def test_single_type_commands_name_the_groups_key(tmp_path, capsys):
    # `report` used to be one of them; since issue 14 it reports mixed clusters too
    assert main(["report", TINY2, "-o", str(tmp_path / "r.html")]) == 0
    assert "Network scenarios and regret" in (tmp_path / "r.html").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["plan", HOMOGENEOUS, "--cluster", TINY2]) == EXIT_BAD_INPUT
    assert f"{TINY2}: cluster.groups: " in capsys.readouterr().err


def test_partitions_on_a_heterogeneous_cluster_are_planned_per_group(tmp_path, capsys):
    """search.tensor_partitions on a mixed cluster: a layer plan per replica class and group,
    printed per group and written to the plan file (solver/class_partitions.py)."""
    import yaml
    tree = yaml.safe_load(Path(TINY2).read_text())
    tree["search"]["tensor_partitions"] = ["megatron", "spatial_temporal"]
    tree["search"]["tp"] = [4]
    path, out = tmp_path / "parts.yaml", tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(tree))
    assert main(["plan", str(path), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "OPTIMAL" in text and "    on a100: " in text and "    on h100: " in text
    assert main(["simulate", str(path), "--plan", str(out)]) == 0


def test_replan_on_a_homogeneous_instance(tmp_path, capsys):
    """replan takes a homogeneous instance and the plan file `plan -o` wrote for it: the cluster
    is the one-group case (its group named after its GPU). Reference, derived independently: the
    planner on the homogeneous instance with the NVLink bandwidth scaled by the event's 0.1
    gives the new optimum, and the running plan re-simulated there gives its time after it."""
    import dataclasses

    import yaml

    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.readers.plan_reader import load_plan
    from paraplan.cost.simulate import simulate
    from paraplan.solver.solve import solve as plan

    tiny = str(ROOT / "instances/tiny-gpt-8xA100.yaml")
    current = tmp_path / "current.yaml"
    assert main(["plan", tiny, "-o", str(current)]) == 0
    event = tmp_path / "event.yaml"
    event.write_text(yaml.safe_dump({"event": {"name": "nvlink-slow", "remaining_hours": 100,
                                               "changes": [{"group": "A100-SXM4-80GB",
                                                            "intra_scale": 0.1}]}}))
    new = tmp_path / "new.yaml"
    capsys.readouterr()
    assert main(["replan", tiny, "--plan", str(current), "--event", str(event), "--json",
                 "-o", str(new)]) == 0
    r = json.loads(capsys.readouterr().out)
    inst = load_instance(tiny)
    cl = inst.cluster.one_group
    slow = dataclasses.replace(inst, cluster=Cluster.of(dataclasses.replace(cl, intra_node=dataclasses.replace(
        cl.intra_node, bw_bytes_per_s=cl.intra_node.bw_bytes_per_s * 0.1))))
    ref = plan(slow)
    assert r["new_status"] == "optimal"
    assert r["new_s"] == pytest.approx(ref.iter_time_s, rel=1e-9, abs=ref.tolerance_s + 1e-12)
    running = load_plan(current, inst)
    assert r["before_s"] == pytest.approx(simulate(inst, running).iter_time_s, rel=1e-9)
    assert r["current_after_event_s"] == pytest.approx(simulate(slow, running).iter_time_s, rel=1e-9)
    assert r["current_after_event_s"] > r["before_s"] * 1.01  # the event matters
    # -o writes a homogeneous plan file, which the homogeneous instance reads back
    assert simulate(slow, load_plan(new, inst)).iter_time_s == pytest.approx(r["new_s"], rel=1e-9)
    # and it carries the instance after the event, so it stands alone: `simulate NEW.yaml` prices
    # the new plan on the slowed network (the reference `slow` above), not on the original one
    capsys.readouterr()
    assert main(["simulate", str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iter_time_s"] == pytest.approx(ref.iter_time_s, rel=1e-9, abs=ref.tolerance_s + 1e-12)


def test_exhaustive_on_a_mixed_cluster_honours_its_time_limit(capsys):
    """`exhaustive --time-limit-s` on a mixed cluster (it was ignored there): stopped by the
    limit it says so, proves nothing and exits 3, as on one group; `verify` then skips it."""
    path = str(ROOT / "instances/mixed/tiny-2types.yaml")
    assert main(["exhaustive", path, "--time-limit-s", "1e-9", "--quiet"]) == 3
    assert "STOPPED by the time limit" in capsys.readouterr().out
    assert main(["exhaustive", path, "--quiet"]) == 0
    assert "STOPPED" not in capsys.readouterr().out
