"""Issue 13 as properties: nothing absurd gets a proof, nothing is lost.

Each class of the issue is a property over generated mutations, not a list of files:
  1. a number outside its physical range (cost/ranges.py), in any numeric field of any input
     file kind, is refused with one line naming the field and the range; one inside it is never
     refused for its range;
  2. a `search:` value whose own rule the instance breaks is refused naming the value; a value
     some plan can use is never refused (checked against an independent enumeration of the
     degree factorisations); an empty space is reported as empty by exhaustive search too;
  3. calibration rows whose heads do not divide the hidden size are refused as instances are,
     the message not wrapped twice; `accuracy --json` is strict JSON;
  4. output paths are checked before any solve; a full disk during a sweep is one line and
     --resume leaves the CSV and the JSON lines in agreement; sweep outputs that are not regular
     files are refused; a SIGKILLed sweep leaves no process behind; counts of any size print;
     --json is one whole strict document.

PARAPLAN_FUZZ_EXAMPLES scales the number of examples (default: the suite's budget).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from paraplan import instances
from paraplan.cost.calibration import load_rows
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.scenarios import event_from_mapping
from paraplan.cost.readers.instance import instance_from_mapping
from paraplan.cost.readers.instance import load_instance, load_instance_parts
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.ranges import RANGES
from paraplan.solver.sweep import run as sweep
from paraplan.solver.commands.cli import EXIT_BAD_INPUT, main
from paraplan.solver.commands.exit_codes import EXIT_INFEASIBLE
from paraplan.solver.format import count
from paraplan.solver.commands.jsonout import emit_json

from test_fuzz_loaders import CALIBRATION_ROW, LLAMA3_8B, run_cli, write_yaml

INSTANCES = Path(instances.__file__).parent
TINY = INSTANCES / "tiny-gpt-8xA100.yaml"  # 8 layers, 16 heads, seq 1024, 8 A100 in one node
TINY_TREE = yaml.safe_load(TINY.read_text(encoding="utf-8"))
HETERO_TREE = yaml.safe_load((INSTANCES / "mixed" / "tiny-2types.yaml").read_text(encoding="utf-8"))
LLAMA_TREE = json.loads(LLAMA3_8B.read_text(encoding="utf-8"))
CLUSTER = INSTANCES / "clusters" / "dgx-a100-16nodes.yaml"
JOB = INSTANCES / "jobs" / "pretrain-4m-tokens.yaml"

EXAMPLES = int(os.environ.get("PARAPLAN_FUZZ_EXAMPLES", "0")) or None


def fuzz(n: int):
    return settings(max_examples=EXAMPLES or n, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.filter_too_much])


# --- 1. physical ranges ----------------------------------------------------------------------

# Every numeric field of every input kind: (document, dotted path of a leaf, quantity). The
# documents are complete and valid, so the mutated field is the only thing wrong with them.
GPU = {"peak_tflops_bf16": 100, "peak_tflops_fp8": 200, "hbm_gib": 48, "hbm_gbytes_per_s": 1000,
       "matmul_eff_max": 0.7, "matmul_half_gflops": 1, "memory_eff": 0.7, "attention_eff": 0.4,
       "fp8_matmul_eff_max": 0.6}
INSTANCE_DOC = copy.deepcopy(TINY_TREE)
INSTANCE_DOC["model"]["dropout"] = 0.1
INSTANCE_DOC["cluster"].update(intra_node_latency_us=5, inter_node_latency_us=10)
INSTANCE_DOC["gpu_types"] = {"MyGPU": GPU}
INSTANCE_DOC["search"] = {"tp": [1, 2], "pp": [1, 2], "cp": [1], "micro_batch": [1],
                          "virtual_stages": [1], "zero": [0, 1], "max_micro_batch": 8,
                          "max_pp": 8, "max_cp": 8, "memory_reserve_gib": 1}
HETERO_DOC = copy.deepcopy(HETERO_TREE)
HETERO_DOC["cluster"]["groups"][0]["site"] = "east"
HETERO_DOC["cluster"]["groups"][1]["site"] = "west"
HETERO_DOC["cluster"]["links"] = [{"between": ["east", "west"], "gbit_per_s": 100,
                                   "latency_us": 1000}]
HETERO_DOC["scenarios"] = [{"name": "cut", "probability": 0.2, "window_h": [18, 24], "changes": [
    {"between": ["east", "west"], "scale": 0.5, "latency_us": 2000},
    {"group": "a100", "nic_scale": 0.5, "intra_scale": 0.5}]},
    {"name": "set", "probability": 0.1, "changes": [
        {"group": "h100", "nic_gbit_per_s": 100, "intra_node_gbytes_per_s": 300},
        {"between": ["east", "west"], "gbit_per_s": 10}]}]
HETERO_DOC["timeline"] = [{"scenario": "nominal", "duration_h": 8}, {"scenario": "cut",
                                                                      "duration_h": 2}]
HETERO_DOC["switching"] = {"storage_gbytes_per_s": 10, "restart_s": 60}
EVENT_DOC = {"event": {"name": "cut", "changes": [{"between": ["east", "west"], "scale": 0.5}],
                       "remaining_hours": 10}}
EVENT_ITER_DOC = {"event": {"name": "cut", "changes": [{"group": "a100", "nic_scale": 0.5}],
                            "remaining_iterations": 1000}}
PLAN_DOC = {"tp": 2, "pp": 2, "dp": 2, "cp": 1, "micro_batch": 1, "num_micro_batches": 16,
            "zero": 1, "virtual_stages": 1, "layers_per_stage": [4, 4],
            "full_recompute_layers": [0, 1]}
HF_QUANTITY = {"num_hidden_layers": "layers", "hidden_size": "hidden",
               "num_attention_heads": "heads", "num_key_value_heads": "kv_heads",
               "intermediate_size": "ffn", "vocab_size": "vocab",
               "max_position_embeddings": "seq_len"}


def _numeric_leaves(tree, prefix=()):
    """(path, key) of every number in `tree`; list items carry their list's key."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in items:
        path = prefix + (key,)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            name = key if isinstance(key, str) else prefix[-1]
            yield path, name
        elif isinstance(value, (dict, list)):
            yield from _numeric_leaves(value, path)


def _set(tree, path, value):
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


def _field(path) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


KINDS = {
    "instance": (INSTANCE_DOC, lambda p, d: load_instance(write_yaml(p / "i.yaml", d))),
    "hetero": (HETERO_DOC, lambda p, d: instance_from_mapping(d, "h.yaml")),
    "event": (EVENT_DOC, lambda p, d: event_from_mapping(d, _cluster_instance(), "e.yaml")),
    "event-iterations": (EVENT_ITER_DOC, lambda p, d: event_from_mapping(d, _cluster_instance(), "e.yaml")),
    "plan": (PLAN_DOC, lambda p, d: plan_from_mapping(d, load_instance(TINY), "plan.yaml")),
    "calibration": ([CALIBRATION_ROW], lambda p, d: load_rows(str(write_yaml(p / "r.yaml", d)))),
    "sweep": ({"name": "s", "time_limit_s": 60, "threads": 1, "seq_len": 1024,
               "models": [str(TINY)], "clusters": [str(CLUSTER)], "jobs": [str(JOB)]},
              lambda p, d: sweep.load_sweep(write_yaml(p / "s.yaml", d))),
    "hf-config": ({k: v for k, v in LLAMA_TREE.items()},
                  lambda p, d: load_instance_parts(None, hf_config=_json(p, d), cluster=CLUSTER,
                                                   job=JOB)),
}


def _cluster_instance():
    return instance_from_mapping(HETERO_DOC, "h.yaml")


def _json(folder: Path, data) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


LEAVES = [(kind, path, HF_QUANTITY.get(name, name) if kind == "hf-config" else name)
          for kind, (doc, _) in KINDS.items() for path, name in _numeric_leaves(doc)
          if kind != "hf-config" or name in HF_QUANTITY]


def test_every_numeric_field_has_a_range():
    # one table for every loader: each number any bundled example holds has a row
    missing = sorted({q for _, _, q in LEAVES if q not in RANGES})
    assert not missing, missing
    assert len(LEAVES) >= 60  # the documents above reach every numeric key of every kind


@st.composite
def outside(draw, quantity: str):
    """A value outside `quantity`'s range, of its type: just beyond a bound, far beyond (1e-300
    of the lower bound, 1e300), or negative."""
    r = RANGES[quantity]
    if r.integer:
        below = [r.lo - draw(st.integers(1, 10**6))] if r.lo > -10**9 else []
        above = [r.hi + draw(st.integers(1, 10**6)), r.hi * 1000, 10**draw(st.integers(10, 80))]
        return draw(st.sampled_from(below + above))
    below = [-draw(st.floats(1e-300, 1e300)), -1.0]
    if r.lo > 0:
        below += [r.lo * draw(st.floats(1e-300, 0.999)), 1e-300]
    above = [r.hi * draw(st.floats(1.001, 1e6)), 1e300, r.hi + 1]
    return draw(st.sampled_from(below + above))


@st.composite
def inside(draw, quantity: str):
    r = RANGES[quantity]
    if r.integer:
        return draw(st.integers(int(r.lo), int(min(r.hi, r.lo + 10**6))))
    return draw(st.one_of(st.floats(r.lo, r.hi), st.sampled_from([r.lo, r.hi])))


@fuzz(300)
@given(data=st.data())
def test_value_outside_its_range_is_refused_naming_the_range(tmp_path, data):
    kind, path, quantity = data.draw(st.sampled_from(LEAVES))
    doc, load = KINDS[kind]
    doc = copy.deepcopy(doc)
    value = data.draw(outside(quantity))
    _set(doc, path, value)
    with pytest.raises(InstanceError) as err:
        load(tmp_path, doc)
    e = err.value
    assert "physical range" in e.problem, (kind, path, value, str(e))
    assert e.field.endswith(_field(path[1:] if kind == "calibration" else path)) or \
        e.field == path[-1], (kind, path, str(e))
    assert "\n" not in str(e)


@fuzz(200)
@given(data=st.data())
def test_value_inside_its_range_is_never_refused_for_its_range(tmp_path, data):
    kind, path, quantity = data.draw(st.sampled_from(LEAVES))
    doc, load = KINDS[kind]
    doc = copy.deepcopy(doc)
    _set(doc, path, data.draw(inside(quantity)))
    try:
        load(tmp_path, doc)
    except InstanceError as e:  # another rule may refuse it (hidden % heads, ...), not its range
        if e.problem.startswith("scales the"):
            return  # the scaled bandwidth left its range: test_scaled_bandwidth_stays_in_its_range
        assert "physical range" not in e.problem or not e.field.endswith(str(path[-1])), str(e)


@fuzz(60)
@given(scale=st.floats(0.001, 1000), key=st.sampled_from(["nic_scale", "intra_scale"]))
def test_scaled_bandwidth_stays_in_its_range(scale, key):
    # a100: NIC 200 Gbit/s (range 1 to 10,000), NVLink 600 GB/s (range 1 to 100,000)
    nominal, quantity = (200.0, "nic_gbit_per_s") if key == "nic_scale" else \
        (600.0, "intra_node_gbytes_per_s")
    doc = {"event": {"changes": [{"group": "a100", key: scale}], "remaining_hours": 1}}
    r = RANGES[quantity]
    inside_range = r.lo <= nominal * scale <= r.hi
    try:
        event_from_mapping(doc, _cluster_instance(), "e.yaml")
        assert inside_range
    except InstanceError as e:
        assert not inside_range and e.field == f"event.changes[0].{key}", str(e)


@fuzz(40)
@given(data=st.data())
def test_out_of_range_value_is_one_line_through_the_cli(capsys, tmp_path, data):
    path, quantity = data.draw(st.sampled_from(list(_numeric_leaves(INSTANCE_DOC))))
    doc = copy.deepcopy(INSTANCE_DOC)
    _set(doc, path, data.draw(outside(quantity)))
    bad = write_yaml(tmp_path / "inst.yaml", doc)
    code, line = run_cli(capsys, ["plan", bad, "--time-limit-s", "5"], ok=())
    assert "physical range" in line and _field(path) in line, line


# --- 2. impossible search values -------------------------------------------------------------

def _factorisations(heads, kv_heads, gpus, gpn, seq_len, layers, batch, listed=None):
    """Every (tp, cp, pp, dp) a plan may use, enumerated independently of cost/space_rules.py:
    tp divides heads (kv heads divide tp or tp divides them) and the node, cp divides seq_len,
    pp <= layers, tp * cp * pp * dp = GPUs and dp divides the batch. Unless listed (`listed`:
    (key, value)), tp and cp are powers of two, the declared space's defaults (README)."""
    def allowed(key, x):
        if listed and listed[0] == key:
            return x == listed[1]
        return key == "pp" or x & (x - 1) == 0
    out = []
    for tp in (t for t in range(1, gpn + 1) if allowed("tp", t)):
        for cp in (c for c in range(1, gpus + 1) if allowed("cp", c)):
            for pp in (p for p in range(1, min(layers, gpus) + 1) if allowed("pp", p)):
                if gpus % (tp * cp * pp):
                    continue
                dp = gpus // (tp * cp * pp)
                if heads % tp or (kv_heads % tp and tp % kv_heads) or seq_len % cp or batch % dp:
                    continue
                out.append((tp, cp, pp, dp))
    return out


@st.composite
def shapes(draw):
    heads = draw(st.sampled_from([4, 6, 8, 12, 16]))
    return {"heads": heads, "kv_heads": draw(st.sampled_from([d for d in (1, 2, heads)
                                                              if heads % d == 0])),
            "hidden": heads * 64, "layers": draw(st.integers(1, 12)),
            "seq_len": draw(st.sampled_from([96, 128, 384, 1024])),
            "nodes": draw(st.integers(1, 3)), "gpus_per_node": draw(st.sampled_from([1, 2, 4, 6, 8])),
            "global_batch": draw(st.sampled_from([1, 3, 8, 12, 32]))}


def _instance_doc(shape, search):
    doc = copy.deepcopy(TINY_TREE)
    doc["model"].update({k: shape[k] for k in ("heads", "kv_heads", "hidden", "layers", "seq_len")})
    doc["cluster"].update(nodes=shape["nodes"], gpus_per_node=shape["gpus_per_node"])
    doc["job"]["global_batch"] = shape["global_batch"]
    doc["search"] = search
    return doc


@fuzz(150)
@given(shape=shapes(), key=st.sampled_from(["tp", "cp", "pp", "micro_batch"]),
       value=st.integers(1, 40))
def test_search_value_is_refused_exactly_when_no_plan_can_use_it(tmp_path, shape, key, value):
    gpus = shape["nodes"] * shape["gpus_per_node"]
    facts = _factorisations(shape["heads"], shape["kv_heads"], gpus, shape["gpus_per_node"],
                            shape["seq_len"], shape["layers"], shape["global_batch"],
                            None if key == "micro_batch" else (key, value))
    if key == "micro_batch":
        usable = any((shape["global_batch"] // dp) % value == 0 for _, _, _, dp in facts)
        own_rule_broken = shape["global_batch"] % value != 0
    else:
        index = {"tp": 0, "cp": 1, "pp": 2}[key]
        usable = any(f[index] == value for f in facts)
        own_rule_broken = {  # the value's own rule, whatever the other degrees
            "tp": value > shape["gpus_per_node"] or gpus % value or shape["heads"] % value
            or (shape["kv_heads"] % value and value % shape["kv_heads"]),
            "cp": shape["seq_len"] % value or gpus % value,
            "pp": value > shape["layers"] or gpus % value}[key]
    path = write_yaml(tmp_path / "i.yaml", _instance_doc(shape, {key: [value]}))
    try:
        load_instance(path)
        refused = None
    except InstanceError as e:
        refused = e
    if refused is not None:
        assert refused.field == f"search.{key}" and f"{key}={value}" in refused.problem, refused
        assert not usable, f"{key}={value} is usable by {facts} but refused: {refused}"
    if own_rule_broken:
        assert refused is not None, f"{key}={value} breaks its own rule but loads ({shape})"


@fuzz(20)
@given(shape=shapes(), reserve_gib=st.floats(80, 10_000))
def test_reserve_as_large_as_the_gpu_is_refused(tmp_path, shape, reserve_gib):
    # the tiny instance's A100-SXM4-80GB has 80 GiB
    path = write_yaml(tmp_path / "i.yaml", _instance_doc(shape, {"memory_reserve_gib": reserve_gib}))
    with pytest.raises(InstanceError) as err:
        load_instance(path)
    assert err.value.field == "search.memory_reserve_gib", err.value


@fuzz(25)
@given(shape=shapes(), tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8]))
def test_exhaustive_names_an_empty_space(capsys, tmp_path, shape, tp, pp):
    doc = _instance_doc(shape, {"tp": [tp], "pp": [pp], "cp": [1]})
    path = write_yaml(tmp_path / "i.yaml", doc)
    gpus = shape["nodes"] * shape["gpus_per_node"]
    facts = [f for f in _factorisations(shape["heads"], shape["kv_heads"], gpus,
                                        shape["gpus_per_node"], shape["seq_len"], shape["layers"],
                                        shape["global_batch"]) if f[:3] == (tp, 1, pp)]
    # (tp, pp both listed: the enumeration's defaults matter only for the unlisted cp = 1)
    assume(not facts)  # every value possible alone, none of them together
    try:
        load_instance(path)
    except InstanceError:
        assume(False)  # one of the values is impossible alone: the property above
    capsys.readouterr()
    # an empty space is proved infeasible: its own exit status since issue 34 (was 0)
    assert main(["exhaustive", str(path), "--quiet"]) == EXIT_INFEASIBLE
    out = capsys.readouterr().out
    assert "the declared space is empty" in out and "no plan fits memory" not in out, out


# --- 3. calibration rows ---------------------------------------------------------------------

@fuzz(40)
@given(heads=st.integers(1, 64), hidden=st.integers(1, 4096), kv=st.integers(1, 64))
def test_calibration_head_shape_is_checked_as_the_instance_loader(capsys, tmp_path, heads,
                                                                   hidden, kv):
    row = copy.deepcopy(CALIBRATION_ROW)
    row["model"].update(heads=heads, hidden=hidden, kv_heads=kv)
    row["config"].update(tp=1, pp=1, dp=8, cp=1, sequence_parallel=False)
    rows = write_yaml(tmp_path / "rows.yaml", [row])
    inst = copy.deepcopy(TINY_TREE)
    inst["model"].update(heads=heads, hidden=hidden, kv_heads=kv)
    try:
        load_instance(write_yaml(tmp_path / "i.yaml", inst))
        instance_problem = None
    except InstanceError as e:
        instance_problem = e.problem
    code, line = run_cli(capsys, ["accuracy", rows])
    if instance_problem is None:
        assert code == 0
    else:
        assert code == EXIT_BAD_INPUT and instance_problem in line, (line, instance_problem)
        assert line.count(str(rows)) == 1 and line.count("(fix: ") == 1, line


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@fuzz(30)
@given(measured=st.floats(1e-4, 1e5), layers=st.integers(1, 16))
def test_accuracy_json_is_strict(capsys, tmp_path, measured, layers):
    row = copy.deepcopy(CALIBRATION_ROW)
    row["measured"]["iter_time_s"] = measured
    row["model"]["layers"] = layers
    row["config"].update(pp=1, dp=4)  # may not divide: then the row is "not modelled"
    capsys.readouterr()
    code = main(["accuracy", str(write_yaml(tmp_path / "rows.yaml", [row])), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    _strict(out)


# --- 4. tracebacks and lost work -------------------------------------------------------------

def _no_solve(monkeypatch):
    """Make every solve fail loudly: an output check must come first."""
    def boom(*a, **k):
        raise AssertionError("solved before checking the output path")
    # the modules that bind search / solve by name are imported here, before the patch, and
    # patched too: one first imported under the patch (replan's solver/dynamic.py) kept `boom`
    # for the rest of the process, and a later test's timeline met it
    from paraplan.solver import api, dynamic, search, solve
    monkeypatch.setattr(solve, "solve", boom)
    monkeypatch.setattr(solve, "search", boom)
    monkeypatch.setattr(search, "search", boom)
    monkeypatch.setattr(dynamic, "search", boom)
    monkeypatch.setattr(api, "search", boom)
    monkeypatch.setattr(api, "solve", boom)


BAD_OUTPUTS = st.sampled_from(["missing-dir/plan.yaml", "a-file/plan.yaml", "a-dir",
                               "missing/deeper/x.yaml"])


@fuzz(30)
@given(where=BAD_OUTPUTS, command=st.sampled_from(["plan", "plan-hetero", "report", "replan",
                                                   "sweep", "sweep-json"]))
def test_bad_output_path_fails_before_solving(capsys, monkeypatch, tmp_path, where, command):
    _no_solve(monkeypatch)
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    (tmp_path / "a-dir").mkdir(exist_ok=True)
    out = str(tmp_path / where)
    hetero = INSTANCES / "mixed" / "llama3-8b-dynamic.yaml"
    plan = write_yaml(tmp_path / "p.yaml", {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1})
    argv = {"plan": ["plan", TINY, "-o", out], "plan-hetero": ["plan", hetero, "-o", out],
            "report": ["report", TINY, "-o", out],
            "replan": ["replan", hetero, "--plan", plan, "--event",
                       INSTANCES / "mixed" / "events" / "inter-site-degraded.yaml", "-o", out],
            "sweep": ["sweep", INSTANCES / "sweeps" / "example.yaml", "-o", out],
            "sweep-json": ["sweep", INSTANCES / "sweeps" / "example.yaml", "-o",
                           tmp_path / "ok.csv", "--json", out]}[command]
    code, line = run_cli(capsys, argv, ok=())
    assert code == EXIT_BAD_INPUT and out in line, line


@fuzz(20)
@given(flag=st.sampled_from(["--micro-batch", "--cp"]), value=st.integers(-10**6, 0))
def test_partition_bad_arguments_are_one_line(capsys, flag, value):
    code, line = run_cli(capsys, ["partition", TINY, "--tp", "4", flag, str(value)], ok=())
    assert flag in line


@fuzz(8)
@given(target=st.sampled_from(["/dev/zero", "/dev/null", "fifo", "dir"]),
       flag=st.sampled_from(["-o", "--json"]))
def test_sweep_refuses_outputs_that_are_not_regular_files(capsys, tmp_path, target, flag):
    if target == "fifo":
        target = str(tmp_path / "fifo")
        if not os.path.exists(target):
            os.mkfifo(target)
    elif target == "dir":
        target = str(tmp_path)
    if not os.path.exists(target):
        pytest.skip(f"no {target}")
    other = ["-o", str(tmp_path / "r.csv")] if flag == "--json" else []
    start = time.perf_counter()
    code, line = run_cli(capsys, ["sweep", INSTANCES / "sweeps" / "example.yaml", flag, target,
                                  *other, "--resume"], ok=())
    assert time.perf_counter() - start < 30


def _small_sweep(folder: Path) -> Path:
    a100 = {"gpu": "A100-SXM4-80GB", "intra_node_gbytes_per_s": 600, "nic_gbit_per_s": 200}
    write_yaml(folder / "c1.yaml", {"cluster": {**a100, "nodes": 1, "gpus_per_node": 8}})
    for b in (8, 16, 32):
        write_yaml(folder / f"b{b}.yaml", {"job": {"global_batch": b}})
    return write_yaml(folder / "sweep.yaml", {"name": "s", "models": [str(TINY)],
                                              "clusters": ["c1.yaml"],
                                              "jobs": ["b8.yaml", "b16.yaml", "b32.yaml"]})


def _sweep_cli(args, fsize_bytes=None):
    def limit():  # a file-size limit fails writes with EFBIG, as a full disk fails with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if fsize_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes))
    return subprocess.run([sys.executable, "-m", "paraplan.solver.commands.cli", "sweep", *map(str, args),
                           "--quiet", "--workers", "1"], capture_output=True, text=True,
                          timeout=300, preexec_fn=limit, cwd=Path(__file__).parents[2])


@pytest.mark.slow
@settings(fuzz(3), max_examples=EXAMPLES or 3)
@given(limit_bytes=st.integers(400, 3000))
def test_full_disk_during_a_sweep_is_one_line_and_resume_agrees(tmp_path_factory, limit_bytes):
    folder = tmp_path_factory.mktemp("full")
    path = _small_sweep(folder)
    out, jl = folder / "r.csv", folder / "r.jsonl"
    done = _sweep_cli([path, "-o", out, "--json", jl], fsize_bytes=limit_bytes)
    assert "Traceback" not in done.stderr
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        assert done.returncode == EXIT_BAD_INPUT and len(lines) == 1, done.stderr
        assert "cannot write" in lines[0] and "--resume" in lines[0], lines
    again = _sweep_cli([path, "-o", out, "--json", jl, "--resume"])
    assert again.returncode == 0, again.stderr
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    records = [json.loads(x) for x in jl.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["job_id"] for r in rows) == sorted(r["job_id"] for r in records)
    assert len(rows) == 3 and {r["status"] for r in rows} == {"optimal"}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkilled_sweep_leaves_no_process_behind(tmp_path):
    path = _small_sweep(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "paraplan.solver.commands.cli", "sweep", str(path), "-o",
                             str(tmp_path / "r.csv"), "--quiet", "--workers", "2"],
                            cwd=Path(__file__).parents[2], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    children: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(children) < 3:  # 2 workers + resource tracker
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                        ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if ppid == proc.pid:
                    children.add(int(entry))
        time.sleep(0.05)
    assert children, "the sweep started no worker"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in children):
        time.sleep(0.1)
    assert not [p for p in children if _alive(p)]


@fuzz(200)
@given(digits=st.integers(1, 12_000), lead=st.integers(1, 9))
def test_counts_of_any_size_print(digits, lead):
    n = lead * 10 ** (digits - 1) + (digits > 3) * 7
    text = count(n)
    if n < 10**7:
        assert text == f"{n:,}"
    else:  # the leading digits and the exponent, derived without str(n)
        assert text.startswith(f"{lead}.") and text.endswith(f"e+{digits - 1:02d}"), text
    buf = io.StringIO()
    with redirect_stdout(buf):
        emit_json({"candidates": n, "nan": math.nan, "inf": -math.inf})
    out = _strict(buf.getvalue())
    assert out["nan"] is None and out["inf"] is None
    assert out["candidates"] == n or out["candidates"] == text
