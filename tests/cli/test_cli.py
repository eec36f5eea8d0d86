"""solver/commands/cli.py: `paraplan simulate` and `paraplan accuracy`, in-process through main(argv).

Contract (solver/commands/cli.py docstring): results on stdout; bad input exits 2 with ONE stderr line
naming the file and the field, never a traceback.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from paraplan import instances
from paraplan.solver.commands.cli import EXIT_BAD_INPUT, main

INSTANCES = Path(instances.__file__).parent
TINY = INSTANCES / "tiny-gpt-8xA100.yaml"  # 8 x A100 in one node, 8 layers, global batch 32
PUBLISHED = Path(__file__).resolve().parents[2].parent / "shared" / "calibration" / "published.yaml"

needs_published = pytest.mark.skipif(
    not PUBLISHED.is_file(),
    reason=f"{PUBLISHED} is absent: CI has ../shared beside the repository, installs without it do not")


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def plan_file(tmp_path) -> Path:
    # 2 x 2 x 2 = 8 GPUs; 32 = dp 2 * micro_batch 2 * 8 micro-batches
    return write_yaml(tmp_path / "plan.yaml", {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2,
                                               "recompute": "selective", "sequence_parallel": True})


def assert_one_line_error(capsys, code: int, *needles: str) -> str:
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# --- simulate ------------------------------------------------------------------------------

def test_simulate_prints_the_breakdown(capsys, plan_file):
    assert main(["simulate", str(TINY), "--plan", str(plan_file)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny-gpt-8xA100: tiny-gpt on 8 x A100-SXM4-80GB")
    for heading in ("time on the critical path", "iteration time", "stage", "memory", "capacity"):
        assert heading in out


def test_simulate_json_parts_sum_to_iteration_time(capsys, plan_file):
    assert main(["simulate", str(TINY), "--plan", str(plan_file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "fits"  # the one JSON schema (solver/commands/schema.py): breakdown nested
    bd = out["breakdown"]
    assert bd["iter_time_s"] == out["iter_time_s"] > 0
    assert sum(bd["exposed_s"].values()) == pytest.approx(bd["iter_time_s"], rel=1e-9)
    assert [s["stage"] for s in bd["stages"]] == [0, 1]
    assert sum(s["layers"] for s in bd["stages"]) == 8


def test_simulate_unknown_instance_key_is_one_line(capsys, tmp_path, plan_file):
    raw = yaml.safe_load(TINY.read_text(encoding="utf-8"))
    raw["model"]["hidden_size"] = 1024
    bad = write_yaml(tmp_path / "bad-instance.yaml", raw)
    code = main(["simulate", str(bad), "--plan", str(plan_file)])
    line = assert_one_line_error(capsys, code, str(bad), "model.hidden_size", "unknown key")
    assert line.startswith("paraplan: error: ")


def test_simulate_plan_with_wrong_gpu_count_is_one_line(capsys, tmp_path):
    # tp*pp*dp = 2*2*1 = 4, the instance has 8 GPUs
    plan = write_yaml(tmp_path / "plan4.yaml", {"tp": 2, "pp": 2, "dp": 1, "micro_batch": 1})
    code = main(["simulate", str(TINY), "--plan", str(plan)])
    assert_one_line_error(capsys, code, str(plan), "plan", "tp*pp*dp*cp = 4 but the cluster has 8 GPUs")


# --- accuracy ------------------------------------------------------------------------------

@needs_published
def test_accuracy_json(capsys):
    assert main(["accuracy", str(PUBLISHED), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"rows", "mape"} <= report.keys()
    assert report["rows"]
    for row in report["rows"]:
        assert {"id", "predicted_iter_time_s", "measured_iter_time_s", "error"} <= row.keys()
        assert row["error"] == pytest.approx(
            (row["predicted_iter_time_s"] - row["measured_iter_time_s"]) / row["measured_iter_time_s"])
    n_rows = len(yaml.safe_load(PUBLISHED.read_text(encoding="utf-8")))
    assert len(report["rows"]) + len(report.get("not_modelled", [])) == n_rows
    assert 0 < report["mape"] <= 0.10


# --- the installed console script ----------------------------------------------------------

@pytest.mark.skipif(shutil.which("paraplan") is None, reason="the paraplan console script is not installed")
def test_console_script_help():
    proc = subprocess.run([shutil.which("paraplan"), "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "simulate" in proc.stdout and "accuracy" in proc.stdout
