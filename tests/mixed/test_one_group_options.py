"""A homogeneous file may ask for the plans only the group format holds (search.classes_per_group,
search.idle_gpus): the commands plan it as the one-group cluster it is (solver/commands/groups.
shown_as_groups), write the plan in the group format where it has several classes or idle GPUs (in
the one-class format otherwise, so export reads it), and refuse what they cannot honour.

The optima are checked against exhaustive search of the same one-group space, and against the
homogeneous optimum without the options, which they must beat on these instances."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from paraplan.cost.specs import Instance
from paraplan.cost.readers.instance import load_instance
from paraplan.solver.api import plan, search
from paraplan.solver.commands.cli import main
from paraplan.solver.exhaustive import exhaustive

pytestmark = pytest.mark.usefixtures("small_price_chunks")

TINY = "instances/tiny-gpt-8xA100.yaml"  # 8 A100 in one node, global batch 32

# (global batch, sequence length, declared space, option): tiny-gpt with a batch that divides no
# replica count of 8 GPUs but 1, where the option wins (measured; the reference below is exhaustive
# search of the same declared space). Batch 7 at 1,024 tokens, idle GPUs: 11.583 -> 11.468 ms.
# Two classes: batch 15 at 2,048 tokens, in the space tp 1-2, pp 1-2, micro-batch 1 (small
# enough to enumerate), where 1 replica of 1 micro-batch beside 7 of 2 takes 33.76 ms against the
# one-class optimum's 61.21 ms (tp 2, cp 2, 15 micro-batches). Since the dense refit
# (matmul_half_flops 6.44e9: tiny-gpt's small GEMMs cost a fixed ~10 us each) two classes only
# tie one class at 1,024 tokens and batches 3-23, where batch 7 used to win (9.18 -> 9.02 ms); the
# full space's wins (batch 15 or 23 at 2,048 tokens) are too large for exhaustive search.
SMALL_SPACE = "search:\n  tp: [1, 2]\n  pp: [1, 2]\n  micro_batch: [1]\n"
TWO_CLASSES = (15, 2048, SMALL_SPACE)
WINS = [(*TWO_CLASSES, "classes_per_group", 2), (7, 1024, "", "idle_gpus", True)]


def _file(tmp_path, batch: int, seq_len: int = 1024, space: str = "") -> str:
    path = tmp_path / f"tiny-gpt-batch{batch}-seq{seq_len}.yaml"
    path.write_text(open(TINY).read().replace("global_batch: 32", f"global_batch: {batch}")
                    .replace("seq_len: 1024", f"seq_len: {seq_len}").rstrip("\n") + "\n" + space)
    return str(path)


def _json(capsys, argv) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("batch, seq_len, space, key, value", WINS)
def test_the_options_on_a_homogeneous_file_give_the_exhaustive_optimum(batch, seq_len, space, key, value,
                                                                       tmp_path, capsys):
    path = _file(tmp_path, batch, seq_len, space)
    inst = load_instance(path)
    grown = dataclasses.replace(
        inst, search=dataclasses.replace(inst.search, **{key: value}))
    brute = exhaustive(grown)  # the independent reference: every plan of the space
    assert brute.complete and brute.plan is not None
    out = _json(capsys, ["plan", path, "--search", f"{key}={str(value).lower()}"])
    assert out["status"] == "optimal"
    assert out["objective_s"] == pytest.approx(brute.objective_s, rel=1e-6)
    before = _json(capsys, ["plan", path])  # the one-class space: slower
    assert out["objective_s"] < before["iter_time_s"] * (1 - 1e-3)


def test_a_plan_of_two_classes_is_written_in_the_group_format_and_simulates(tmp_path, capsys):
    path = _file(tmp_path, *TWO_CLASSES)
    out = tmp_path / "plan.yaml"
    planned = _json(capsys, ["plan", path, "--search", "classes_per_group=2", "-o", str(out)])
    assert len(yaml.safe_load(out.read_text())["plan"]["classes"]) == 2
    # simulate reads a group-format plan against the homogeneous file, options or not
    for extra in ([], ["--search", "classes_per_group=2"]):
        sim = _json(capsys, ["simulate", path, "--plan", str(out)] + extra)
        assert sim["iter_time_s"] == pytest.approx(planned["iter_time_s"], rel=1e-9)
    # a one-class reader names the format and where to read it
    assert main(["export", str(out), "--to", "megatron", "--instance", path]) == 2
    assert "plan.classes" in capsys.readouterr().err


def test_a_one_class_optimum_is_written_in_the_one_class_format(tmp_path, capsys):
    # tiny-gpt's optimum with two classes allowed is one class on all 8 GPUs (8 replicas): its
    # file carries the instance, as every one-class plan file does, and exports
    out = tmp_path / "plan.yaml"
    assert main(["plan", TINY, "--search", "classes_per_group=2",
                 "-o", str(out)]) == 0
    written = yaml.safe_load(out.read_text())
    assert written["plan"]["dp"] == 8 and "instance" in written
    capsys.readouterr()
    assert main(["export", str(out), "--to", "megatron"]) == 0


def test_sensitivity_is_the_same_with_the_options(capsys):
    # --sensitivity plans every instance as its groups (solver/sensitivity.py): with idle_gpus
    # the plan is shown in the group format, yet the cases (tiny-gpt's A100 parameters at the
    # ends of their ranges, cost/fit.parameter_table) and their verdicts are those of the plain
    # file, whose optimum leaves no GPU idle
    runs = []
    for extra in ([], ["--search", "idle_gpus=true"]):
        assert main(["plan", TINY, *extra, "--sensitivity", "--json", "--quiet"]) == 0
        runs.append(json.loads(capsys.readouterr().out)["sensitivity"])
    plain, idle = ([(c["parameter"], c["end"], c["value"], c["stays_optimal"]) for c in r["cases"]]
                   for r in runs)
    assert plain == idle and len(plain) == 8 and runs[0]["robust"] == runs[1]["robust"]
    # the text form prints the same cases, one line each, and the same verdict
    assert main(["plan", TINY, "--sensitivity", "--quiet"]) == 0
    text = capsys.readouterr().out.split("\nsensitivity (")[1].splitlines()[1:]
    assert [line.split(" (")[0].strip() for line in text[:-1]] == [f"{p} {e}" for p, e, _, _ in plain]
    assert [line.endswith("the plan stays optimal") for line in text[:-1]] == [x for *_, x in plain]
    assert text[-1] == ("the optimum is robust to these parameters" if runs[0]["robust"]
                        else "the optimum depends on these parameters (see above)")


def test_top_ranks_the_group_format_plans_too(capsys):
    # the one search with K winners serves --top on every plan kind (tests/mixed/test_top_groups.py)
    assert main(["plan", TINY, "--search", "idle_gpus=true", "--top", "2", "--within", "3"]) == 0
    assert "best plans with distinct outer configurations within 3%" in capsys.readouterr().out


def test_mixed_families_on_a_homogeneous_file_is_refused(capsys):
    assert main(["plan", TINY, "--search", "mixed_families=true"]) == 2
    assert "needs two node groups" in capsys.readouterr().err


def test_the_api_plans_the_options_as_the_command_does():
    # api.plan used to refuse them ("group-format plans, which a flat plan file cannot hold"),
    # a refusal of the code's seam: the record holds any classes, and solve plans them by the
    # one search, so it answers as api.search does, the same plan and time
    inst = load_instance(TINY)
    idle = dataclasses.replace(inst, search=dataclasses.replace(inst.search, idle_gpus=True))
    planned, searched = plan(idle), search(idle)
    assert planned.status == searched.status == "optimal"
    assert planned.plan == searched.plan and planned.objective_s == pytest.approx(searched.objective_s, rel=1e-9)


@pytest.mark.slow
def test_a_one_group_file_takes_the_job_options_priced_for_one_gpu_type(tmp_path, capsys):
    # the bundled DeepSeek-V3-shaped instance (DeepEP dispatch, recompute modules, fp8 activation
    # stores) written as one node group: the same cluster, so the same optimum as its homogeneous
    # file (README: 21.13 s), where these options were refused as "one GPU type only" before
    source = "instances/deepseek-v3-shaped-2048xH800.yaml"
    data = yaml.safe_load(open(source))
    data["cluster"] = {"groups": [{"name": "h800", **data["cluster"]}]}
    path = tmp_path / "one-group.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    grouped = _json(capsys, ["plan", str(path)])
    homogeneous = _json(capsys, ["plan", source])
    assert grouped["status"] == homogeneous["status"] == "optimal"
    assert grouped["objective_s"] == pytest.approx(homogeneous["iter_time_s"], rel=1e-9)


def test_compare_and_report_read_a_group_format_plan_beside_a_one_class_one(tmp_path, capsys):
    # TWO_CLASSES: the two-class optimum beats the one-class optimum (exhaustive search, above:
    # 33.76 vs 61.21 ms); compare and report --plan read both formats on the one group
    path = _file(tmp_path, *TWO_CLASSES)
    two, one = tmp_path / "two.yaml", tmp_path / "one.yaml"
    _json(capsys, ["plan", path, "--search", "classes_per_group=2", "-o", str(two)])
    _json(capsys, ["plan", path, "-o", str(one)])
    times = [_json(capsys, ["simulate", path, "--plan", str(p)])["iter_time_s"] for p in (two, one)]
    out = _json(capsys, ["compare", str(two), str(one), "--instance", path])
    assert [p["iter_time_s"] for p in out["plans"]] == pytest.approx(times, rel=1e-9)
    assert out["faster"] == str(two) and out["speedup"] == pytest.approx(times[1] / times[0], rel=1e-9)
    # the parts are a one-group class's critical path (cost/simulate.critical_path): they sum
    # to each plan's iteration time, so their differences explain the whole gap
    assert {"compute", "grad_sync_and_optimizer"} <= {p["part"] for p in out["parts"]}
    for k, side in enumerate(("a_s", "b_s")):
        assert sum(p[side] for p in out["parts"]) == pytest.approx(times[k], rel=1e-9)
    page = tmp_path / "r.html"
    assert main(["report", path, "--search", "classes_per_group=2", "--plan", str(one), "-o", str(page),
                 "--quiet"]) == 0
    # the report's verdict is the one-class plan's time over the proved optimum's (simulated above)
    assert f"The optimum is {times[1] / times[0]:.3f}x faster" in page.read_text()
