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

from paraplan.cost.specs import Cluster
from paraplan.solver.commands.cli import EXIT_BAD_INPUT, main

TINY_RAW = yaml.safe_load(TINY.read_text())  # 8 A100, 8 layers, 16 heads, global batch 32
MIXED = INSTANCES / "mixed" / "tiny-2types.yaml"  # one A100 node beside one H100 node
MIXED_RAW = yaml.safe_load(MIXED.read_text())
EVENT = INSTANCES / "mixed" / "events"


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


# --- 4. a DualPipe space that can never run: an input error naming the key and the rule -----

# the tiny GPT with 8 experts (a dense first layer) on two DGX A100 nodes under DualPipe, as in
# tests/formulations/test_dualpipe.py; it plans with pp 2 and 4 (exit 0, below)
DUALPIPE_RAW = {
    "name": "tiny-dualpipe",
    "model": {"name": "tiny-moe", "layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096, "vocab": 32000,
              "seq_len": 1024, "mlp": "gelu",
              "moe": {"experts": 8, "top_k": 2, "expert_ffn": 2048, "shared_ffn": 1024, "dense_layers": 1}},
    "cluster": {"gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8, "intra_node_link": "nvlink",
                "intra_node_gbytes_per_s": 600, "nic_gbit_per_s": 200},
    "job": {"global_batch": 32, "pipeline_schedule": "dualpipe"}}

# (search section, global batch, the field refused, what the line must say). DualPipe's rule
# (cost/dualpipe.schedule_problem, DualPipe.step's assertions): pp even and >= 2, one chunk per
# stage, an even micro-batch count m >= 2 pp. m = global_batch / (dp x micro_batch) is at most
# the global batch: 6 < 2 x 4 refuses pp 4; 33 is odd, so every m dividing it is odd; 2 < 2 x 2
# leaves no pipeline at all.
DUALPIPE_NEVER = [
    ({"pp": [1]}, 32, "search.pp", "even number of pipeline stages >= 2"),
    ({"pp": [1, 2]}, 32, "search.pp", "pp=1"),
    ({"pp": [2, 6]}, 48, "search.pp", "pp=6"),  # 6 does not divide 16 GPUs: the general rule first
    ({"pp": [4]}, 6, "search.pp", "micro-batches >= 2 pp = 8"),
    ({"virtual_stages": [2]}, 32, "search.virtual_stages", "use virtual_stages 1"),
    ({"virtual_stages": [1, 2]}, 32, "search.virtual_stages", "DualPipe places two stages per device"),
    ({"max_pp": 1}, 32, "search.max_pp", "even number of pipeline stages >= 2"),
    ({}, 33, "job.global_batch", "even number of micro-batches"),
    ({}, 2, "job.global_batch", "micro-batches >= 2 pp = 4"),
]


@pytest.mark.parametrize("search, batch, field, needle", DUALPIPE_NEVER)
@pytest.mark.parametrize("command", ["plan", "exhaustive", "verify"])
def test_dualpipe_space_that_never_runs_is_an_input_error(capsys, tmp_path, command, search, batch,
                                                         field, needle):
    raw = edited(DUALPIPE_RAW, job={"global_batch": batch})
    if search:
        raw["search"] = search
    path = write_yaml(tmp_path / "dualpipe.yaml", raw)
    expect_error(capsys, [command, path], field, needle)


@pytest.mark.parametrize("override, field, needle", [
    ("virtual_stages=2", "search.virtual_stages", "use virtual_stages 1"),
    ("pp=1", "search.pp", "even number of pipeline stages >= 2"),
    ("pp=1,2,4", "search.pp", "pp=1"),
])
def test_dualpipe_search_override_that_never_runs_is_an_input_error(capsys, tmp_path, override,
                                                                    field, needle):
    # the error names the option, <--search>, not a file: run_cli's contract names files only
    path = write_yaml(tmp_path / "dualpipe.yaml", DUALPIPE_RAW)
    capsys.readouterr()
    assert main(["plan", str(path), "--search", override]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"paraplan: error: <--search>: {field}: ") and needle in err, err


def test_dualpipe_space_that_runs_still_plans(capsys, tmp_path):
    # the control: pp 2 and 4 both run DualPipe here (32 micro-batches >= 2 x 4 at dp = 1)
    from test_fuzz_loaders import run_cli
    raw = edited(DUALPIPE_RAW, search={"pp": [2, 4], "virtual_stages": [1], "tp": [1]})
    path = write_yaml(tmp_path / "dualpipe.yaml", raw)
    assert run_cli(capsys, ["plan", path])[0] == 0


# --- 5. `paraplan partition` refuses MoE and latent-attention models as `plan` does ----------

@pytest.mark.parametrize("instance, field, needle", [
    ("mixtral-8x7b-64xH100.yaml", "model.moe", "MoE layers"),
    ("qwen3-235b-a22b-256xH100.yaml", "model.moe", "MoE layers"),
    ("deepseek-v3-shaped-2048xH800.yaml", "model.mla", "latent attention"),
])
def test_partition_refuses_what_plan_refuses(capsys, instance, field, needle):
    # one rule (cost/space_rules.per_operator_problem): plan's refusal of search
    # tensor_partitions: [spatial_temporal] on the same model says the same problem
    path = INSTANCES / instance
    line = expect_error(capsys, ["partition", path, "--tp", "4"], field, needle)
    problem = line.split(f": {field}: ")[1].split(" (cost/partition.py")[0]
    capsys.readouterr()
    assert main(["plan", str(path), "--search", "tensor_partitions=spatial_temporal"]) == EXIT_BAD_INPUT
    assert f"search.tensor_partitions: {problem} (fix: " in capsys.readouterr().err


# --- 6. two spellings of the expert count in a Hugging Face config ---------------------------

MIXTRAL_HF = Path(__file__).parents[1] / "data" / "hf" / "mixtral-8x7b" / "config.json"  # 8 experts
CLUSTER_H100 = INSTANCES / "clusters" / "dgx-h100-32nodes.yaml"
JOB_4M = INSTANCES / "jobs" / "pretrain-4m-tokens.yaml"


def _hf_with(tmp_path: Path, **extra) -> Path:
    import json
    raw = json.loads(MIXTRAL_HF.read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw, **extra}))
    return path


@pytest.mark.parametrize("extra, second", [
    ({"num_experts": 16}, "num_experts"), ({"n_routed_experts": 4}, "n_routed_experts"),
    ({"moe_num_experts": 0}, "moe_num_experts"), ({"num_experts": "8"}, "num_experts"),
    ({"num_experts": 8, "n_routed_experts": 7}, "n_routed_experts"),
])
def test_disagreeing_expert_counts_are_refused_naming_both(capsys, tmp_path, extra, second):
    hf = _hf_with(tmp_path, **extra)
    line = expect_error(capsys, ["plan", "--hf-config", hf, "--cluster", CLUSTER_H100, "--job", JOB_4M],
                        second, "num_local_experts gives 8", "disagree")
    assert line.startswith(f"paraplan: error: {hf}: ")


@pytest.mark.parametrize("extra", [{"num_experts": 8}, {"n_routed_experts": 8, "moe_num_experts": 8},
                                   {"num_experts": None}])
def test_agreeing_expert_counts_load(tmp_path, extra):
    from paraplan.cost.hf_config import model_from_hf_config
    assert model_from_hf_config(_hf_with(tmp_path, **extra)).moe.experts == 8


# --- 7. a value just past a range edge is shown past it --------------------------------------

def _edges():
    """(quantity, edge, side) of every non-integer range's finite edges (a lower edge of 0 is
    refused as 'must be >= 0, got <value>', never rounded onto it)."""
    from paraplan.cost.ranges import RANGES
    return [pytest.param(q, edge, side, id=f"{q}-{side}")
            for q, r in sorted(RANGES.items()) if not r.integer
            for edge, side in ((r.hi, 1), (r.lo, -1)) if edge > 0]


@pytest.mark.parametrize("quantity, edge, side", _edges())
def test_a_value_past_an_edge_is_shown_past_it(quantity, edge, side):
    # the value is the edge moved outwards by 10^-3, 10^-9 of itself and by one float step:
    # the number printed must read back on the same side of the edge, never as the edge itself
    import math
    import re
    from paraplan.cost.ranges import out_of_range
    for value in (edge * (1 + side * 1e-3), edge * (1 + side * 1e-9), math.nextafter(edge, side * math.inf)):
        message = out_of_range(quantity, value)
        printed = float(re.match(r"(\S+) is ", message).group(1).replace(",", ""))
        assert printed != edge and (printed > edge) == (side > 0), message


def test_a_value_past_an_edge_through_the_cli(capsys, tmp_path):
    # the case: 10000.001 Gbit/s against the NIC range's 10,000
    path = write_yaml(tmp_path / "nic.yaml", edited(TINY_RAW, cluster={"nic_gbit_per_s": 10000.001}))
    expect_error(capsys, ["plan", path], "cluster.nic_gbit_per_s", "10000.001 is larger than 10,000")


# --- 3. the Python API checks what its docstrings promise ------------------------------------

@pytest.fixture(scope="module")
def tiny_api():
    """The tiny instance and its plan result, through solver/api.py."""
    from paraplan.solver import api
    inst = api.load_instance(TINY)
    return api, inst, api.plan(inst)


# each function, and its arguments with one replaced by a path, None or a value of another kind
WRONG = ["instances/tiny-gpt-8xA100.yaml", TINY, None, 3, {"tp": 2}]


def _api_calls(inst, res):
    """(function, argument name, args, kwargs) with `BAD` standing for the wrong value."""
    return [("plan", "inst", ("BAD",), {}), ("plan", "backend", (inst,), {"backend": "BAD"}),
            ("plan", "time_limit_s", (inst,), {"time_limit_s": "BAD"}),
            ("simulate", "inst", ("BAD", res.plan), {}), ("simulate", "plan", (inst, "BAD"), {}),
            ("top_k", "inst", ("BAD", 3), {}), ("top_k", "k", (inst, "BAD"), {}),
            ("top_k", "within_pct", (inst, 3), {"within_pct": "BAD"}),
            ("memory_by_category", "inst", ("BAD", res.plan), {}),
            ("memory_by_category", "plan", (inst, "BAD"), {}),
            ("build_report", "inst", ("BAD", res), {}), ("build_report", "result", (inst, "BAD"), {})]


@pytest.mark.parametrize("bad", WRONG, ids=["path", "Path", "None", "int", "dict"])
def test_api_names_the_argument_of_the_wrong_kind(tiny_api, bad):
    from paraplan.cost.errors import InstanceError
    api, inst, res = tiny_api
    for func, arg, args, kwargs in _api_calls(inst, res):
        if (bad == 3 and arg in ("k", "time_limit_s", "within_pct")) or (bad is None and arg == "within_pct"):
            continue  # 3 is a good k, time limit and percentage; None is "no percentage"
        args = tuple(bad if a == "BAD" else a for a in args)
        kwargs = {k: bad if v == "BAD" else v for k, v in kwargs.items()}
        with pytest.raises(InstanceError, match=rf"^<api>: {func}\({arg}\): .* \(fix: ") as e:
            getattr(api, func)(*args, **kwargs)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("backend", ["gurobi", "DP", "", "cplex"])
def test_api_refuses_an_unknown_backend(tiny_api, backend):
    # the tiny instance's planner settles every configuration before any backend runs, so an
    # unchecked name came back "optimal"
    from paraplan.cost.errors import InstanceError
    api, inst, _ = tiny_api
    for call in (lambda: api.plan(inst, backend=backend), lambda: api.top_k(inst, 2, backend=backend)):
        with pytest.raises(InstanceError, match=r"\((backend)\): unknown backend .*fix: use one of dp, cpsat, milp"):
            call()


def test_api_refuses_a_plan_of_another_instance(tiny_api):
    # a plan of the tiny instance (8 GPUs) on the same instance with two nodes is a
    # ConfigError inside; the API says it in one InstanceError naming the argument
    from dataclasses import replace
    from paraplan.cost.errors import InstanceError
    api, inst, res = tiny_api
    other = replace(inst, cluster=Cluster.of(replace(inst.cluster.one_group, nodes=2)))
    for func in ("simulate", "memory_by_category"):
        with pytest.raises(InstanceError, match=rf"^<api>: {func}\(plan\): tp\*pp\*dp\*cp = 8 but the cluster has 16"):
            getattr(api, func)(other, res.plan)


def test_api_still_answers_good_arguments(tiny_api):
    api, inst, res = tiny_api
    assert res.status == "optimal"
    assert api.simulate(inst, res.plan).iter_time_s == pytest.approx(res.iter_time_s, rel=1e-9)
    assert len(api.memory_by_category(inst, res.plan)) == res.plan.pp
    assert len(api.top_k(inst, 2).ranked) == 2
    assert api.build_report(inst, res).lstrip().lower().startswith("<!doctype html>")
