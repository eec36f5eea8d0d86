"""Issue 35, round 3 of hostile use: crashes and wrong reasons, each as a class of inputs.

Every case runs through the CLI entry point (solver/commands/cli.main) under the contract of
tests/robustness/test_fuzz_loaders.py (its run_cli / expect_error): exit 0, or exit 2 with one
stderr line `paraplan: error: FILE: FIELD: problem (fix: ...)`, never a traceback.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_fuzz_loaders import INSTANCES, TINY, expect_error, write_yaml

TINY_RAW = yaml.safe_load(TINY.read_text())  # 8 A100, 8 layers, 16 heads, global batch 32
MIXED = INSTANCES / "hetero" / "tiny-2types.yaml"  # one A100 node beside one H100 node
MIXED_RAW = yaml.safe_load(MIXED.read_text())
EVENT = INSTANCES / "hetero" / "events"


def edited(raw: dict, **sections) -> dict:
    """A deep copy of `raw` with keys of its sections replaced, e.g. job={"precision": "fp8"}."""
    out = copy.deepcopy(raw)
    for name, changes in sections.items():
        out.setdefault(name, {}).update(changes)
    return out


# --- 1. FP8 on a GPU without FP8 tensor cores: refused at load, every command ----------------

# A100 and V100 have no FP8 tensor cores (cost/gpus.yaml gives them no peak_tflops_fp8)
NO_FP8_GPUS = ["A100-SXM4-80GB", "A100-SXM4-40GB", "V100-SXM-32GB"]


def _fp8_commands(tmp_path: Path, gpu: str) -> list[tuple[list, Path]]:
    """(argv, the file named in the error) for each command that reads an instance, on an
    fp8 job on `gpu`: the flat instance through every planning and pricing command, the mixed
    cluster through plan, simulate and replan, and export of a plan file carrying the
    instance."""
    flat = write_yaml(tmp_path / "fp8.yaml", edited(TINY_RAW, cluster={"gpu": gpu}, job={"precision": "fp8"}))
    mixed_raw = edited(MIXED_RAW, job={"precision": "fp8"})
    mixed_raw["cluster"]["groups"][0]["gpu"] = gpu
    mixed = write_yaml(tmp_path / "fp8-mixed.yaml", mixed_raw)
    plan = write_yaml(tmp_path / "plan.yaml", {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1})
    carried = write_yaml(tmp_path / "carried.yaml", {
        "plan": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1},
        "instance": edited(TINY_RAW, cluster={"gpu": gpu}, job={"precision": "fp8"})})
    events = sorted(EVENT.glob("*.yaml"))
    return [(["plan", flat], flat), (["plan", flat, "--backend", "milp"], flat),
            (["exhaustive", flat], flat), (["verify", flat], flat),
            (["report", flat, "-o", tmp_path / "r.html"], flat),
            (["partition", flat, "--tp", "4"], flat), (["memory", flat, "--plan", plan], flat),
            (["simulate", flat, "--plan", plan], flat),
            (["export", plan, "--to", "megatron", "--instance", flat], flat),
            (["export", carried, "--to", "megatron"], carried),
            (["plan", mixed], mixed), (["simulate", mixed, "--plan", plan], mixed),
            (["replan", mixed, "--plan", plan, "--event", events[0]], mixed)]


@pytest.mark.parametrize("gpu", NO_FP8_GPUS)
def test_fp8_without_fp8_tensor_cores_is_refused_at_load(capsys, tmp_path, gpu):
    for argv, named in _fp8_commands(tmp_path, gpu):
        line = expect_error(capsys, argv, "job.precision", gpu, "fp8", "FP8 tensor cores")
        assert line.startswith(f"paraplan: error: {named}: "), (argv, line)
        assert "--fp8-format" not in capsys.readouterr().out


def test_fp8_on_a_gpu_with_fp8_tensor_cores_still_loads(capsys, tmp_path):
    # the refusal is about the GPU, not the precision: the same job on H100 plans (exit 0)
    from test_fuzz_loaders import run_cli
    ok = write_yaml(tmp_path / "fp8-h100.yaml", edited(TINY_RAW, cluster={"gpu": "H100-SXM5-80GB"},
                                                       job={"precision": "fp8"}))
    assert run_cli(capsys, ["plan", ok])[0] == 0


# --- 2. a standard output that cannot be written: one line, exit 2 ---------------------------

# None: a plan file of the tiny instance (tp 2, pp 2, dp 2)
FULL_STDOUT_COMMANDS = [
    pytest.param(["plan", TINY, "--json"], id="plan-json"), pytest.param(["plan", TINY], id="plan"),
    pytest.param(["exhaustive", TINY], id="exhaustive"), pytest.param(["accuracy"], id="accuracy"),
    pytest.param(["simulate", TINY, "--plan", None], id="simulate"),
    pytest.param(["memory", TINY, "--plan", None, "--json"], id="memory-json"),
    pytest.param(["export", None, "--to", "megatron", "--instance", TINY], id="export"),
]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("argv", FULL_STDOUT_COMMANDS)
def test_a_full_stdout_is_one_line_and_exit_2(tmp_path, argv):
    # a real process: /dev/full fails every write with ENOSPC, as a full disk does, and the
    # interpreter's own last flush must not fail either (it would print and exit 120)
    plan = write_yaml(tmp_path / "plan.yaml", {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1})
    args = [str(plan if a is None else a) for a in argv]
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "paraplan.solver.commands.cli", *args],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("paraplan: error: <stdout>: standard output: cannot be written"), lines
    assert "No space left on device" in lines[0] and "(fix: " in lines[0]
