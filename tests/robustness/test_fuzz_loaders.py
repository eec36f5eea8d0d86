"""Bad input of any shape: `paraplan` exits 2 with one stderr line, never a traceback or a hang.

Contract (solver/commands/cli.py, cost/readers/): a run either succeeds (exit 0) or exits 2 with exactly
one stderr line, `paraplan: error: FILE: FIELD: problem (fix: ...)`, FIELD being `<file>` for
whole-file problems. Hypothesis drives the CLI in-process with
  (a) mutations of instances/tiny-gpt-8xA100.yaml (a value replaced, a key deleted or added),
  (b) random bytes and YAML-like text in every file role,
  (c) mutations of tests/data/hf/llama-3-8b/config.json,
  (d) random plan mappings,
  (e) mutations of a calibration row (`paraplan accuracy`);
then explicit cases: empty, oversized and binary files, YAML bombs, deep nesting, 1e30 GPUs,
NaN, unicode keys, tabs, duplicate keys. The size, alias and depth limits tested here are
documented in cost/readers/.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paraplan import instances
from paraplan.cost.calibration import load_rows
from paraplan.cost.errors import InstanceError
from paraplan.cost.hf_config import MAX_HF_CONFIG_BYTES
from paraplan.cost.readers.strict_yaml import MAX_FILE_BYTES, MAX_YAML_DEPTH
from paraplan.solver.commands.cli import EXIT_BAD_INPUT, main
from paraplan.solver.commands.exit_codes import EXIT_INFEASIBLE, EXIT_ROWS_REFUSED

INSTANCES = Path(instances.__file__).parent
TINY = INSTANCES / "tiny-gpt-8xA100.yaml"  # 8 x A100 in one node, 8 layers, global batch 32
CLUSTER = INSTANCES / "clusters" / "dgx-a100-16nodes.yaml"  # 128 A100
JOB = INSTANCES / "jobs" / "pretrain-4m-tokens.yaml"  # global batch 512
LLAMA3_8B = Path(__file__).parents[1] / "data" / "hf" / "llama-3-8b" / "config.json"

TINY_PLAN = {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1}  # 8 GPUs, 32 = 2 x 1 x 16
LLAMA_PLAN = {"tp": 8, "pp": 2, "dp": 8, "micro_batch": 1}  # 128 GPUs, 32 layers, batch 512

# A synthetic calibration row (shared/calibration/README.md's schema), not a published one.
CALIBRATION_ROW = {
    "id": "synthetic-1", "source": "made up for this test, 2024", "precision": "bf16",
    "model": {"layers": 8, "hidden": 1024, "heads": 16, "kv_heads": 16, "ffn": 4096,
              "vocab": 32000, "seq_len": 1024, "mlp": "gelu"},
    "cluster": {"gpu": "A100-SXM4-80GB", "num_gpus": 8, "gpus_per_node": 8,
                "intra_node_GBps_per_gpu": 600, "inter_node_Gbps_per_gpu": 200},
    "config": {"tp": 2, "pp": 2, "dp": 2, "cp": 1, "micro_batch": 1, "global_batch": 32,
               "recompute": "selective", "virtual_stages": None, "sequence_parallel": True,
               "zero": 0},
    "measured": {"iter_time_s": 0.05, "iter_time_kind": "measured", "mfu": None,
                 "tflops_per_gpu": None, "peak_mem_gib": None},
}

FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


# --- running the CLI -------------------------------------------------------------------------

def run_cli(capsys, argv, *, ok=(0,)) -> tuple[int, str]:
    """main(argv)'s exit status and stderr, asserting the contract: a status in `ok`, or 2 with
    one `FILE: FIELD: problem (fix: ...)` line naming one of the files given (or <arguments>)."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out
    if code in ok:
        return code, err
    assert code == EXIT_BAD_INPUT, (code, err)
    lines = err.splitlines()  # str.splitlines also splits on \r, \x1c, \u2028, ...
    assert len(lines) == 1, err
    line = lines[0]
    assert any(line.startswith(f"paraplan: error: {name}: ")
               for name in [*map(str, argv), "<arguments>"]), line
    assert line.endswith(")") and " (fix: " in line, line
    return code, line


def expect_error(capsys, argv, field: str, *needles: str) -> str:
    code, line = run_cli(capsys, argv, ok=())
    assert f": {field}: " in line, line
    for needle in needles:
        assert needle in line, line
    return line


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data, allow_nan=True, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture
def tiny_plan(tmp_path) -> Path:
    return write_yaml(tmp_path / "tiny-plan.yaml", TINY_PLAN)


@pytest.fixture
def llama_plan(tmp_path) -> Path:
    return write_yaml(tmp_path / "llama-plan.yaml", LLAMA_PLAN)


def every_role(tmp_path: Path, bad: Path) -> list[list]:
    """argv that read `bad` in each file role: instance, plan, cluster, job, HF config,
    calibration rows."""
    plan = write_yaml(tmp_path / "role-plan.yaml", TINY_PLAN)
    llama_plan = write_yaml(tmp_path / "role-llama-plan.yaml", LLAMA_PLAN)
    return [
        ["simulate", bad, "--plan", plan],
        ["simulate", TINY, "--plan", bad],
        ["simulate", TINY, "--cluster", bad, "--plan", plan],
        ["simulate", TINY, "--job", bad, "--plan", plan],
        ["simulate", "--hf-config", bad, "--cluster", CLUSTER, "--job", JOB, "--plan", llama_plan],
        ["accuracy", bad],
    ]


# --- strategies ------------------------------------------------------------------------------

SPECIAL_VALUES = [0, -1, 1, 2, 3, 8, 16, 10**9, 10**9 + 1, 10**30, -(10**30), 1e30, 1e-300,
                  0.5, -0.0, math.nan, math.inf, -math.inf, True, False, None, "", " ", "8",
                  "1e3", "nvlink", "pcie", "bf16", "gelu", "swiglu", "full", "A100-SXM4-80GB",
                  "模型", "a\nb", "\u2028", "\x00", "\t"]
SCALARS = st.one_of(st.sampled_from(SPECIAL_VALUES), st.integers(), st.floats(),
                    st.text(max_size=12), st.booleans(), st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8)
# Values a careful user might write, so that many mutants load and reach the simulator and the
# planner with odd but valid sizes.
PLAUSIBLE = st.one_of(
    st.integers(1, 64), st.sampled_from([128, 1024, 4096, 32000, 10**6, 10**9]),
    st.floats(1e-3, 1e9), st.booleans(), st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1,
                                                  max_size=3, unique=True),
    st.sampled_from(["nvlink", "pcie", "bf16", "fp16", "gelu", "swiglu", "flash", "standard",
                     "adam", "none", "selective", "H100-SXM5-80GB", "MI300X", "L40S"]))
KEYS = st.one_of(st.text(min_size=1, max_size=10),
                 st.sampled_from(["ünïcödé", "层数", "🚀", "nodes ", "Nodes", "hbm_gb", "\t",
                                  "a\nb", "plan", "<<"]))
SIZES = st.one_of(st.integers(1, 64), st.sampled_from([128, 1024, 4096, 32000, 10**6, 10**9]))
SMALL_LISTS = st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3, unique=True)
# Every instance key (docs/schema.md) with values of its own type, mostly valid.
INSTANCE_VALUES = {
    ("model",): {"layers": st.integers(1, 64), "hidden": st.sampled_from([64, 256, 1024, 4096]),
                 "heads": st.sampled_from([1, 2, 4, 8, 16]), "kv_heads": st.sampled_from([1, 2, 4]),
                 "ffn": SIZES, "vocab": SIZES, "seq_len": st.sampled_from([1, 128, 1024, 8192]),
                 "mlp": st.sampled_from(["gelu", "swiglu"]), "tied_embeddings": st.booleans(),
                 "name": st.text(min_size=1, max_size=8)},
    ("cluster",): {"gpu": st.sampled_from(["A100-SXM4-40GB", "H100-SXM5-80GB", "MI300X", "L40S",
                                           "V100-SXM-32GB"]),
                   "nodes": st.integers(1, 4), "gpus_per_node": st.sampled_from([1, 2, 4, 8]),
                   "intra_node_link": st.sampled_from(["nvlink", "pcie"]),
                   "intra_node_gbytes_per_s": st.floats(1e-3, 1e9),
                   "intra_node_latency_us": st.floats(0, 1e6),
                   "nic_gbit_per_s": st.floats(1e-3, 1e9),
                   "inter_node_latency_us": st.floats(0, 1e6)},
    ("job",): {"global_batch": st.sampled_from([1, 8, 32, 64, 1024]),
               "precision": st.sampled_from(["bf16", "fp16"]),
               "attention": st.sampled_from(["flash", "standard"])},
    ("search",): {"tp": SMALL_LISTS, "pp": SMALL_LISTS, "cp": SMALL_LISTS,
                  "micro_batch": SMALL_LISTS, "virtual_stages": SMALL_LISTS,
                  "zero": st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
                  "recompute": st.lists(st.sampled_from(["none", "selective"]), min_size=1,
                                        max_size=2, unique=True),
                  "sequence_parallel": st.lists(st.booleans(), min_size=1, max_size=2,
                                                unique=True),
                  "max_micro_batch": st.integers(1, 32), "max_pp": st.integers(1, 16),
                  "max_cp": st.integers(1, 8), "full_recompute": st.booleans(),
                  "uniform_split": st.booleans(), "tp_across_nodes": st.booleans(),
                  "memory_reserve_gib": st.floats(0, 100)},
}


@st.composite
def plausible_instances(draw, edits: int = 2):
    """TINY with a few keys set to values of their own type: most of these load, and reach the
    simulator and the planner with odd but valid sizes."""
    tree = copy.deepcopy(TINY_TREE)
    tree["search"] = {}
    for _ in range(draw(st.integers(1, edits))):
        section = draw(st.sampled_from(sorted(INSTANCE_VALUES)))
        key = draw(st.sampled_from(sorted(INSTANCE_VALUES[section])))
        _at(tree, section)[key] = draw(INSTANCE_VALUES[section][key])
    return tree


def _key_paths(tree: dict, prefix: tuple = ()):
    for key, value in tree.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _key_paths(value, prefix + (key,))


def _mapping_paths(tree: dict, prefix: tuple = ()):
    yield prefix
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _mapping_paths(value, prefix + (key,))


def _at(tree: dict, path: tuple) -> dict:
    for key in path:
        tree = tree[key]
    return tree


@st.composite
def mutations(draw, base: dict, values=VALUES, keys=KEYS, max_edits: int = 3):
    """`base` with one to `max_edits` edits: a value replaced, a key deleted, or a key added;
    rarely the whole document replaced."""
    if max_edits > 1 and draw(st.integers(0, 19)) == 0:
        return draw(values)
    tree = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_edits))):
        kind = draw(st.sampled_from(("replace", "replace", "delete", "add")))
        if kind == "add":
            where = _at(tree, draw(st.sampled_from(list(_mapping_paths(tree)))))
            where[draw(keys)] = draw(values)
            continue
        paths = list(_key_paths(tree))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _at(tree, path[:-1])
        if kind == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(values)
    return tree


TINY_TREE = yaml.safe_load(TINY.read_text(encoding="utf-8"))
LLAMA_TREE = json.loads(LLAMA3_8B.read_text(encoding="utf-8"))
HF_VALUES = st.sampled_from(["MixtralForCausalLM", "GPT2LMHeadModel", "FalconForCausalLM",
                             "BloomForCausalLM", "OPTForCausalLM", "gpt2", "falcon", "bloom",
                             ["LlamaForCausalLM"], ["FalconForCausalLM"]])

YAML_TOKENS = list("abz09:-[]{},&*!|>'\"%@`#?\t\n .<=~\\") + [
    "nodes", "plan", "tp", "model", "cluster", "&a ", "*a", "<<: ", "!!int ", "!!binary ",
    "!!timestamp ", "!!set ", "!!python/object ", "!!omap ", "!!pairs ", "!!float ", "!!bool ",
    "!!null ", "!!str ", "!!map ", "!!seq ", "!!merge ", "!<tag:yaml.org,2002:int> ",
    "%YAML 1.1\n", "%TAG !e! tag:e,2000:\n", "!e!x ", "? ", "|-\n", ">+\n",
    "---\n", "...\n", "  ", "\n  ", "0x", "1e3", "0b1", "1:20", "2024-13-45",
    ".nan", ".inf", "~", "\ufeff", "\x00", "\x85", "\u2028"]
JSON_TOKENS = list('{}[],:"0123456789.-eE \n\\') + [
    "true", "false", "null", "NaN", "Infinity", '"architectures"', '"hidden_size"', "\ufeff"]
GARBAGE = st.one_of(
    st.binary(max_size=400),
    st.text(max_size=200),
    st.lists(st.sampled_from(YAML_TOKENS), max_size=60).map("".join),
    st.lists(st.sampled_from(JSON_TOKENS), max_size=60).map("".join),
)

DEGREES = st.sampled_from([1, 2, 4, 8])
PLAN_VALUES = st.one_of(st.integers(0, 17), st.sampled_from(SPECIAL_VALUES), VALUES)
PLAN_LISTS = st.lists(st.integers(-1, 9), max_size=5)
PLAN_OPTIONAL = {  # mostly valid for TINY: 8 layers, 16 heads, global batch 32, seq_len 1024
    "cp": st.sampled_from([1, 2]), "num_micro_batches": st.sampled_from([1, 2, 4, 8, 16, 32]),
    "sequence_parallel": st.booleans(), "recompute": st.sampled_from(["none", "selective",
                                                                      "full"]),
    "zero": st.integers(0, 3), "virtual_stages": st.sampled_from([1, 2, 4]),
    "layers_per_stage": PLAN_LISTS, "full_recompute_layers": PLAN_LISTS}


@st.composite
def tiny_plans(draw):
    """Plans on TINY's 8 GPUs and 8 layers, most of them valid."""
    tp = draw(DEGREES)
    pp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if tp * d <= 8]))
    plan = {"tp": tp, "pp": pp, "dp": 8 // (tp * pp), "micro_batch": draw(DEGREES)}
    plan.update(draw(st.fixed_dictionaries({}, optional={
        key: PLAN_OPTIONAL[key] for key in ("sequence_parallel", "recompute", "zero")})))
    if pp > 1 and draw(st.booleans()):
        plan["virtual_stages"] = draw(st.sampled_from([1, 2]))
    if draw(st.booleans()):
        cuts = sorted(draw(st.lists(st.integers(1, 7), min_size=pp - 1, max_size=pp - 1,
                                    unique=True)))
        split = [b - a for a, b in zip([0, *cuts], [*cuts, 8])]
        plan["layers_per_stage"] = split
        if draw(st.booleans()):
            plan["full_recompute_layers"] = [draw(st.integers(0, n)) for n in split]
    return plan


PLANS = st.one_of(
    tiny_plans(),
    st.fixed_dictionaries({"tp": DEGREES, "pp": DEGREES, "dp": DEGREES, "micro_batch": DEGREES},
                          optional=PLAN_OPTIONAL),
    st.dictionaries(st.sampled_from(["tp", "pp", "dp", "micro_batch", *PLAN_OPTIONAL]),
                    st.one_of(PLAN_VALUES, PLAN_LISTS), max_size=12),
    mutations({"plan": {**TINY_PLAN, "layers_per_stage": [4, 4], "recompute": "full"}},
              values=PLAN_VALUES),
)


# --- properties ------------------------------------------------------------------------------

@FUZZ
@given(tree=st.one_of(mutations(TINY_TREE), plausible_instances(),
                      mutations(TINY_TREE, st.one_of(PLAUSIBLE, VALUES))))
def test_mutated_instance_simulates_or_fails_in_one_line(capsys, tmp_path, tiny_plan, tree):
    inst = write_yaml(tmp_path / "instance.yaml", tree)
    run_cli(capsys, ["simulate", inst, "--plan", tiny_plan])


@pytest.mark.slow
@settings(FUZZ, max_examples=30)
@given(tree=plausible_instances())
def test_mutated_instance_plans_or_fails_in_one_line(capsys, tmp_path, tree):
    # 3: the planner found no plan within the time limit, 4 (EXIT_INFEASIBLE): it proved that
    # none fits; results rather than input errors
    run_cli(capsys, ["plan", write_yaml(tmp_path / "instance.yaml", tree), "--time-limit-s", "5"],
            ok=(0, 3, EXIT_INFEASIBLE))


@pytest.mark.slow
@FUZZ
@given(data=GARBAGE)
def test_garbage_in_every_role_fails_in_one_line(capsys, tmp_path, data):
    bad = tmp_path / "garbage"
    if isinstance(data, bytes):
        bad.write_bytes(data)
    else:
        bad.write_text(data, encoding="utf-8", errors="surrogatepass")
    for argv in every_role(tmp_path, bad):
        run_cli(capsys, argv)


@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
@FUZZ
@given(config=mutations(LLAMA_TREE, st.one_of(VALUES, PLAUSIBLE, HF_VALUES)))
def test_mutated_hf_config_simulates_or_fails_in_one_line(capsys, tmp_path, llama_plan, config):
    hf = write_json(tmp_path / "config.json", config)
    run_cli(capsys, ["simulate", "--hf-config", hf, "--cluster", CLUSTER, "--job", JOB,
                     "--seq-len", "8192", "--plan", llama_plan])


@pytest.mark.slow
@settings(FUZZ, max_examples=20)
@given(config=mutations(LLAMA_TREE, st.one_of(PLAUSIBLE, HF_VALUES), max_edits=1))
def test_mutated_hf_config_plans_or_fails_in_one_line(capsys, tmp_path, config):
    hf = write_json(tmp_path / "config.json", config)
    run_cli(capsys, ["plan", "--hf-config", hf, "--cluster", CLUSTER, "--job", JOB,
                     "--seq-len", "8192", "--time-limit-s", "5"], ok=(0, 3, EXIT_INFEASIBLE))


@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
@FUZZ
@given(plan=PLANS)
def test_random_plan_simulates_or_fails_in_one_line(capsys, tmp_path, plan):
    run_cli(capsys, ["simulate", TINY, "--plan", write_yaml(tmp_path / "plan.yaml", plan)])


@FUZZ
@given(rows=st.one_of(
    st.lists(mutations(CALIBRATION_ROW, st.one_of(VALUES, PLAUSIBLE)), min_size=1, max_size=2),
    st.lists(mutations(CALIBRATION_ROW, st.one_of(st.integers(0, 64), SIZES, st.none()),
                       max_edits=1), min_size=1, max_size=2),
    VALUES))
@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
def test_mutated_calibration_rows_score_or_fail_in_one_line(capsys, tmp_path, rows):
    # a row refused as read is listed and the rest priced: exit 1 (exit_codes.EXIT_ROWS_REFUSED)
    run_cli(capsys, ["accuracy", write_yaml(tmp_path / "rows.yaml", rows)], ok=(0, EXIT_ROWS_REFUSED))


def test_planner_keeps_its_time_limit_with_many_layers(tmp_path):
    # Found by the fuzzer: counting the space was O(pp * layers**2) before the time limit began.
    inst = tmp_path / "deep.yaml"
    inst.write_text(with_line(TINY.read_text(encoding="utf-8"), "  layers: 8\n",
                              "  layers: 1000000\n"), encoding="utf-8")
    try:  # in a subprocess, so that a regression fails rather than hangs
        done = subprocess.run([sys.executable, "-m", "paraplan.solver.commands.cli", "plan", str(inst),
                               "--time-limit-s", "5"], capture_output=True, text=True, timeout=30,
                              cwd=Path(__file__).parents[2])
    except subprocess.TimeoutExpired:
        pytest.fail("`paraplan plan --time-limit-s 5` still running after 30 s")
    assert done.returncode in (0, 3, EXIT_INFEASIBLE) and "Traceback" not in done.stderr, done.stderr


def test_planner_reports_an_astronomical_space(capsys, tmp_path):
    # Found by the fuzzer: more than 1e308 plans could not be formatted as a float.
    config = dict(LLAMA_TREE, num_hidden_layers=4096)
    run_cli(capsys, ["plan", "--hf-config", write_json(tmp_path / "config.json", config),
                     "--cluster", CLUSTER, "--job", JOB, "--seq-len", "8192", "--time-limit-s", "5"],
            ok=(0, 3, EXIT_INFEASIBLE))


# --- whole-file problems ---------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "~\n"])
def test_empty_file_in_every_role(capsys, tmp_path, text):
    bad = tmp_path / "empty.yaml"
    bad.write_text(text, encoding="utf-8")
    for argv in every_role(tmp_path, bad):
        run_cli(capsys, argv, ok=())


def test_100_mb_file_is_refused_before_it_is_read(capsys, tmp_path):
    bad = tmp_path / "huge.yaml"
    with open(bad, "wb") as fh:  # sparse: costs no disk, but reading it would cost 100 MB
        fh.write(b"name: x\n")
        fh.truncate(100 * 2**20)
    roles = every_role(tmp_path, bad)
    for argv in roles:
        start_s = time.perf_counter()
        line = expect_error(capsys, argv, "<file>", "larger than the", "MiB limit")
        assert time.perf_counter() - start_s < 1.0, line
    # Peak memory, in a fresh process whose high-water mark is only its imports': VmHWM, the
    # process's own (Linux carries ru_maxrss over from the parent's size at the fork, which
    # under xdist would hide any growth below the test worker's size).
    script = f"""
import contextlib, io
from paraplan.solver.commands.cli import main
def hwm_kib():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
    main(["simulate", {str(TINY)!r}, "--plan", {str(roles[0][-1])!r}])  # imports everything
    before_kib = hwm_kib()
    codes = [main(argv) for argv in {[[str(a) for a in argv] for argv in roles]!r}]
print(codes, hwm_kib() - before_kib)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).parents[2], check=True).stdout
    codes, growth_kib = out.rsplit("]", 1)
    assert codes == "[" + ", ".join(["2"] * len(roles)), out
    assert int(growth_kib) < 10 * 1024, out


def test_size_limit_is_exact(capsys, tmp_path, tiny_plan):
    bad = tmp_path / "padded.yaml"
    text = TINY.read_text(encoding="utf-8")
    bad.write_text(text + "#" * (MAX_FILE_BYTES - len(text.encode())), encoding="utf-8")
    run_cli(capsys, ["simulate", bad, "--plan", tiny_plan])  # at the limit: loads
    with open(bad, "ab") as fh:
        fh.write(b"#")
    expect_error(capsys, ["simulate", bad, "--plan", tiny_plan], "<file>", "larger than")


def test_endless_device_file_is_cut_off(capsys, tiny_plan):
    zero = Path("/dev/zero")
    if not zero.exists():
        pytest.skip("no /dev/zero")
    expect_error(capsys, ["simulate", zero, "--plan", tiny_plan], "<file>", "larger than")


def test_directory_and_missing_file(capsys, tmp_path, tiny_plan):
    expect_error(capsys, ["simulate", tmp_path, "--plan", tiny_plan], "<file>", "directory")
    expect_error(capsys, ["simulate", tmp_path / "absent.yaml", "--plan", tiny_plan], "<file>",
                 "not found")
    expect_error(capsys, ["accuracy", tmp_path / "absent.yaml"], "<file>", "not found")


def test_binary_garbage_in_every_role(capsys, tmp_path):
    rng = random.Random(0)
    for blob in (rng.randbytes(4096), b"\x89PNG\r\n\x1a\n" + rng.randbytes(64), b"\x00" * 64,
                 "name: x\n".encode("utf-16")):
        bad = tmp_path / "blob.bin"
        bad.write_bytes(blob)
        for argv in every_role(tmp_path, bad):
            run_cli(capsys, argv, ok=())


# --- YAML bombs and nesting ------------------------------------------------------------------

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""

# '<<' merges copy the merged keys into each mapping: 2**40 entries after 40 lines.
MERGE_BOMB = "m0: &m0 {k0: 0, k1: 1}\n" + "".join(
    f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}\n" for i in range(1, 41))


@pytest.mark.parametrize("bomb", [BILLION_LAUGHS, MERGE_BOMB], ids=["lists", "merges"])
def test_alias_bombs_are_refused(capsys, tmp_path, bomb):
    bad = tmp_path / "bomb.yaml"
    bad.write_text(bomb, encoding="utf-8")
    for argv in every_role(tmp_path, bad):
        if "--hf-config" in argv:
            continue  # JSON has no aliases
        start_s = time.perf_counter()
        expect_error(capsys, argv, "<file>", "aliases")
        assert time.perf_counter() - start_s < 2.0


def test_bomb_under_a_known_key_is_refused(capsys, tmp_path, tiny_plan):
    # Without a limit this one loads, and its error message would print 9**9 list items.
    levels = ["&l0 [" + ", ".join(["lol"] * 9) + "]"] + [
        f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bad = tmp_path / "bomb.yaml"
    bad.write_text(TINY.read_text(encoding="utf-8") + f"search:\n  recompute: [{', '.join(levels)}]\n",
                   encoding="utf-8")
    expect_error(capsys, ["simulate", bad, "--plan", tiny_plan], "<file>", "aliases")


def test_a_few_aliases_are_fine(capsys, tmp_path, tiny_plan):
    text = TINY.read_text(encoding="utf-8")
    text = text.replace("  nodes: 1\n", "  nodes: &one 1\n").replace(
        "  intra_node_link: nvlink\n", "  intra_node_link: nvlink\n  intra_node_latency_us: *one\n")
    inst = tmp_path / "aliases.yaml"
    inst.write_text(text, encoding="utf-8")
    run_cli(capsys, ["simulate", inst, "--plan", tiny_plan])


def test_recursive_alias_is_refused(capsys, tmp_path, tiny_plan):
    bad = tmp_path / "loop.yaml"
    bad.write_text("name: &x [*x]\n", encoding="utf-8")
    expect_error(capsys, ["simulate", bad, "--plan", tiny_plan], "line 1, column 11", "a cycle")


@pytest.mark.parametrize("text", ["[" * 10_000 + "]" * 10_000,
                                  "{a: " * 10_000 + "1" + "}" * 10_000,
                                  "".join(f"{' ' * i}- \n" for i in range(0, 2_000, 2))],
                         ids=["10000-deep-flow-lists", "10000-deep-flow-mappings",
                              "1000-deep-block-lists"])
def test_deep_yaml_is_refused(capsys, tmp_path, text):
    bad = tmp_path / "deep.yaml"
    bad.write_text(text, encoding="utf-8")
    for argv in every_role(tmp_path, bad):
        if "--hf-config" in argv:
            continue
        code, line = run_cli(capsys, argv, ok=())
        assert re.search(r": line \d+, column \d+: nested more than", line), line


def test_10000_deep_json_is_refused(capsys, tmp_path, llama_plan):
    bad = tmp_path / "config.json"
    for text in ("[" * 10_000 + "]" * 10_000, '{"a": ' * 10_000 + "1" + "}" * 10_000):
        bad.write_text(text, encoding="utf-8")
        expect_error(capsys, ["simulate", "--hf-config", bad, "--cluster", CLUSTER, "--job", JOB,
                              "--plan", llama_plan], "<file>", "nested")


def test_moderate_nesting_is_not_a_depth_error(capsys, tmp_path, tiny_plan):
    bad = tmp_path / "lists.yaml"
    bad.write_text("name: " + "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1) + "\n",
                   encoding="utf-8")
    line = expect_error(capsys, ["simulate", bad, "--plan", tiny_plan], "name")
    assert "nested" not in line


# --- values and keys -------------------------------------------------------------------------

def with_line(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(("old", "new", "field", "needle"), [
    ("  nodes: 1\n", "  nodes: 1.0e+30\n", "cluster.nodes", "1e+30 is absurdly large"),
    ("  nodes: 1\n", "  nodes: 1.0e30\n", "cluster.nodes", "as a number it would be absurdly"),
    ("  nodes: 1\n", "  nodes: 1e30\n", "cluster.nodes", "expected an integer, got the string"),
    ("  nodes: 1\n", "  nodes: 8e0\n", "cluster.nodes", "YAML reads 8e0 as text; write 8)"),
    ("  nodes: 1\n", "  nodes: 1000000000000000000000000000000\n", "cluster.nodes",
     "absurdly large"),
    ("  nodes: 1\n", "  nodes: " + "9" * 5000 + "\n", "line 17, column 10", "digits"),
    ("  nodes: 1\n", "  nodes: 0x" + "f" * 10_000 + "\n", "line 17, column 10", "digits"),
    ("  nodes: 1\n", "  nodes: -1\n", "cluster.nodes", "must be >= 1"),
    ("  nodes: 1\n", "  nodes: 0\n", "cluster.nodes", "must be >= 1"),
    ("  nodes: 1\n", "  nodes: !!int abc\n", "line 17, column 10", "abc"),
    ("  nodes: 1\n", "  nodes: !!timestamp 2024-13-45\n", "line 17, column 10", "timestamp"),
    ("  nodes: 1\n", "  nodes: !!bool maybe\n", "line 17, column 10", "maybe"),
    ("  nodes: 1\n", "  nodes: !!set 0\n", "line 17, column 10", "expected a mapping node"),
    ("  nodes: 1\n", "  nodes: {!!set : 1}\n", "line 17, column 11", "unhashable"),
    ("  nodes: 1\n", "  nodes: !!binary 0\n", "line 17, column 10", "base64"),
    ("  nodes: 1\n", "  nodes: !!omap 0\n", "line 17, column 10", "sequence"),
    ("  nodes: 1\n", "  nodes: !!python/object:os.system ls\n", "line 17, column 10",
     "python/object"),
    ("  nic_gbit_per_s: 200\n", "  nic_gbit_per_s: .nan\n", "cluster.nic_gbit_per_s",
     "not a finite number"),
    ("  nic_gbit_per_s: 200\n", "  nic_gbit_per_s: 1.0e+30\n", "cluster.nic_gbit_per_s",
     "larger than"),
    ("  nic_gbit_per_s: 200\n", "  nic_gbit_per_s: 2e2\n", "cluster.nic_gbit_per_s",
     "write 2.0e+2"),
    ("  nic_gbit_per_s: 200\n", "  nic_gbit_per_s: 2.0e2\n", "cluster.nic_gbit_per_s",
     "write 2.0e+2"),
    ("  nic_gbit_per_s: 200\n", "  nic_gbit_per_s: '200'\n", "cluster.nic_gbit_per_s",
     "remove the quotes"),
    ("  layers: 8\n", "  lävers: 8\n", "model.lävers", "unknown key"),
    ("  layers: 8\n", "  层数: 8\n", "model.层数", "unknown key"),
    ("  layers: 8\n", '  "lay\\ners": 8\n', "model.'lay\\ners'", "not a name"),
    ("  layers: 8\n", '  "lay\\u2028ers": 8\n', "model.'lay\\u2028ers'", "not a name"),
    ("  gpu: A100-SXM4-80GB\n", '  gpu: "A100\\nSXM4"\n', "cluster.gpu", "'A100\\nSXM4'"),
    ("  layers: 8\n", "\tlayers: 8\n", "line 8, column 1", "malformed YAML"),
    ("  layers: 8\n", "  layers: 8\n  layers: 9\n", "line 9, column 3", "duplicate key"),
    ("  layers: 8\n", "  layers: [" + "1, " * 200_000 + "1]\n", "<file>", "nodes"),
    ("job:\n", "gpu_types:\n  \"GPU\\nX\": {peak_tflops_bf16: 1, hbm_gib: 1,"
               " hbm_gbytes_per_s: 1}\njob:\n", "gpu_types.'GPU\\nX'", "not a name"),
    ("job:\n", "---\njob:\n", "line 22, column 1", "malformed YAML"),
])
def test_bad_value_or_key_names_the_field(capsys, tmp_path, tiny_plan, old, new, field, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text(with_line(TINY.read_text(encoding="utf-8"), old, new), encoding="utf-8")
    expect_error(capsys, ["simulate", bad, "--plan", tiny_plan], field, needle)


@pytest.mark.parametrize(("changes", "field", "needle"), [
    ({"num_hidden_layers": 1e30}, "num_hidden_layers", "expected an integer, got 1e+30"),
    ({"num_hidden_layers": 10**30}, "num_hidden_layers", "must be between"),
    ({"num_hidden_layers": 10**6 + 1}, "num_hidden_layers", "must be between 1 and 1,000,000"),
    ({"hidden_size": math.nan}, "hidden_size", "expected an integer, got nan"),
    ({"vocab_size": -1}, "vocab_size", "must be between"),
    ({"architectures": ["Llama\nForCausalLM"], "model_type": "lla\u2028ma"}, "architectures",
     "unsupported architecture 'Llama\\nForCausalLM' (model_type 'lla\\u2028ma')"),
    ({"num_local_experts": "8\n8"}, "num_local_experts", "mixture-of-experts"),
    ({"num_local_experts": [[[]]] * 1000, "num_experts_per_tok": 2}, "num_local_experts",
     "(a list experts, 2 per token)"),
    ({"层数": 1, "🚀": {"a": [1]}}, None, None),  # unknown keys are ignored, as transformers does
])
def test_bad_hf_value_names_the_key(capsys, tmp_path, llama_plan, changes, field, needle):
    config = json.loads(LLAMA3_8B.read_text(encoding="utf-8"))
    config.update(changes)
    argv = ["simulate", "--hf-config", write_json(tmp_path / "config.json", config), "--cluster",
            CLUSTER, "--job", JOB, "--seq-len", "8192", "--plan", llama_plan]
    if field is None:
        run_cli(capsys, argv)
        return
    expect_error(capsys, argv, field, needle)


@pytest.mark.parametrize(("text", "field", "needle"), [
    ('{"a": 1, "a": 2}', "a", "duplicate key"),
    ('{"a\\nb": 1, "a\\nb": 2}', "'a\\nb'", "duplicate key"),
    ('{"hidden_size": ' + "9" * 5000 + "}", "<file>", "digits"),
    ("\ufeff{}", "architectures", "missing"),
    ("[]", "<top level>", "expected a JSON object"),
])
def test_bad_hf_text_names_the_key(capsys, tmp_path, llama_plan, text, field, needle):
    hf = tmp_path / "config.json"
    hf.write_text(text, encoding="utf-8")
    expect_error(capsys, ["simulate", "--hf-config", hf, "--cluster", CLUSTER, "--job", JOB,
                          "--plan", llama_plan], field, needle)


def test_hf_config_size_limit(capsys, tmp_path, llama_plan):
    hf = tmp_path / "config.json"
    with open(hf, "wb") as fh:
        fh.write(b"{")
        fh.truncate(MAX_HF_CONFIG_BYTES + 1)
    expect_error(capsys, ["simulate", "--hf-config", hf, "--cluster", CLUSTER, "--job", JOB,
                          "--plan", llama_plan], "<file>", "larger than")


# --- calibration rows ------------------------------------------------------------------------

def test_calibration_row_is_scored(capsys, tmp_path):
    run_cli(capsys, ["accuracy", write_yaml(tmp_path / "rows.yaml", [CALIBRATION_ROW])])


def _row(**changes) -> dict:
    row = copy.deepcopy(CALIBRATION_ROW)
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        where = _at(row, tuple(parents))
        if value is ...:
            del where[key]
        else:
            where[key] = value
    return row


@pytest.mark.parametrize(("rows", "field", "needle"), [
    ({"id": "x"}, "<top level>", "expected a non-empty list of rows"),
    ([], "<top level>", "expected a non-empty list of rows"),
    ([[1, 2]], "[0]", "expected a mapping"),
    ([_row(measured=...)], "[0].measured", "missing required key"),
    ([_row(measured__iter_time_s="fast")], "[0].measured.iter_time_s", "expected a number"),
    ([_row(measured__iter_time_s=0)], "[0].measured.iter_time_s", "must be > 0"),
    ([_row(measured__iter_time_s=math.nan)], "[0].measured.iter_time_s", "not a finite"),
    ([_row(cluster__gpus_per_node=0)], "[0].cluster.gpus_per_node", "must be >= 1"),
    ([_row(cluster__num_gpus=10**30)], "[0].cluster.num_gpus", "absurdly large"),
    ([_row(model__layers="8")], "[0].model.layers", "expected an integer"),
    ([_row(model__mlp="relu")], "[0].model.mlp", "unknown value"),
    ([_row(config__pp=16)], "[0].config.pp", "more pipeline stages than the 8 layers"),
    ([_row(config__virtual_stages=3)], "[0].config.virtual_stages", "divide"),
    ([_row(config__zero=7)], "[0].config.zero", "must be <= 3"),
    ([_row(id=["x"])], "[0].id", "expected a non-empty string"),
    ([CALIBRATION_ROW, _row(model__层数=1)], "[1].model", None),
])
def test_bad_calibration_row_names_the_field(capsys, tmp_path, rows, field, needle):
    path = write_yaml(tmp_path / "rows.yaml", rows)
    if needle is None:  # unknown keys are tolerated: the schema lets sources add fields
        run_cli(capsys, ["accuracy", path])
        return
    with pytest.raises(InstanceError) as err:
        load_rows(str(path))
    assert (err.value.field, err.value.path) == (field, str(path))
    assert needle in err.value.problem, err.value
    # issue 13: the loader's message as it is, the file and the fix named once, not wrapped
    line = expect_error(capsys, ["accuracy", path], field, needle)
    assert line.count(str(path)) == 1 and line.count("(fix: ") == 1, line
    expect_error(capsys, ["calibrate", path], field, needle)


# --- without libyaml -------------------------------------------------------------------------

def test_pure_python_yaml_parser_keeps_the_limits(tmp_path):
    """PyYAML built without libyaml falls back to its pure-Python parser: same refusals."""
    cases = {"bomb.yaml": BILLION_LAUGHS, "deep.yaml": "[" * 10_000 + "]" * 10_000,
             "dup.yaml": "a: 1\na: 2\n", "tag.yaml": "a: !!int abc\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    script = f"""
import yaml
del yaml.CSafeLoader
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.readers.instance import load_instance
assert load_instance({str(TINY)!r}).cluster.num_gpus == 8
for name in {sorted(cases)!r}:
    try:
        read_yaml({str(tmp_path)!r} + "/" + name)
    except InstanceError as e:
        print(e.field, "|", e.problem)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).parents[2], check=True).stdout
    assert out.splitlines() == [
        "<file> | more than 100,000 nodes once aliases are expanded",
        "line 1, column 101 | nested more than 100 levels deep",
        "line 2, column 1 | duplicate key 'a'",
        "line 1, column 4 | malformed YAML: cannot read 'abc' as int (ValueError)"], out


def test_pure_python_yaml_parser_reads_every_bundled_file_alike():
    """The strict loader parses with libyaml where PyYAML has it (strict_yaml._SAFE_LOADER) and
    with the pure-Python parser otherwise: every bundled YAML file (the GPU catalogue, the
    published rows and the MoE anchors, every instance, cluster, job and sweep file) reads to
    the same data either way, compared by repr (floats, keys and their order included)."""
    root = Path(__file__).parents[2]
    files = sorted(str(p) for d in ("cost", "instances") for p in (root / d).rglob("*.yaml"))
    assert len(files) > 30
    script = f"""
import sys, yaml
if sys.argv[1] == "python":
    del yaml.CSafeLoader
from paraplan.cost.readers import strict_yaml
assert (strict_yaml._SAFE_LOADER is yaml.SafeLoader) == (sys.argv[1] == "python")
for path in {files!r}:
    big = "/published/" in path
    print(repr(strict_yaml.read_yaml(path, calibration=big)))
"""
    outs = [subprocess.run([sys.executable, "-c", script, parser], capture_output=True, text=True,
                           timeout=300, cwd=root, check=True).stdout for parser in ("libyaml", "python")]
    assert len(outs[0].splitlines()) == len(files)
    assert outs[0] == outs[1]
