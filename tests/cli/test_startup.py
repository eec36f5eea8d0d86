"""Issue 33, "a start-up that does not dominate": `paraplan plan` with the default backend (the
exact split DP) loads neither OR-Tools nor PuLP. OR-Tools' CP-SAT module imports pandas with it:
about 0.2 s of a fresh process's start-up that the default backend never uses (GPT-3 175B on
1,024 A100, the whole command: 2.19 -> 1.72 s of CPU, median of 5, once it moved into the
functions that solve with it). The solvers' own backends still load them, which the second
case checks, so the first cannot pass by checking the wrong module names. Nor does it load the
report's plotting library (matplotlib), the sweep's cluster scheduler (dask, distributed), the
thread pool of --threads (concurrent.futures) or the scenario objectives' module
(paraplan.solver.dynamic), each checked loaded where its own feature runs; nor the calibration's
fitter (paraplan.cost.fit: a plan reads the stored predictions and each GPU's die, cost/dies.py)
or difflib, which only a mistyped name or choice reads (the did-you-mean tests in tests/cli and
tests/instances run it); nor DualPipe's pricing (paraplan.cost.dualpipe) or the per-operator
partition problem (paraplan.formulations.partition), which only a DualPipe job and the
partition command read, each checked loaded there; nor the Hugging Face config reader
(paraplan.cost.hf_config: --hf-config), DualPipe's split problem (paraplan.formulations.dualpipe),
the layout options' families (paraplan.solver.option_families), the asymmetric pipelines' pricing
(paraplan.cost.asymmetric) or the JSON schema (paraplan.solver.commands.schema), each a real
module (test_the_watched_modules_exist); DualPipe's problem and the schema are checked loaded
where a DualPipe job and --json use them. Nor the published rows' reader and the stored
cross-validation's (paraplan.cost.calibration, paraplan.cost.crossval): a plan's band reads
what they give from cost/published/trust_table.json (cost/trust_table.py). Nor the per-operator
partitions' tables and rules (paraplan.cost.partition, paraplan.cost.partition_names) or the
layer plans' search (paraplan.solver.class_partitions), which only a search over partitions
(search.tensor_partitions) reads, checked loaded there: their records cost GPT-3 175B's plan on
1,024 A100 (the README's first command, planned here too) about 7 ms of CPU at every start. Nor
the deferred stage families' memory and recompute terms (paraplan.solver.bounds.class_memory,
paraplan.solver.bounds.stage_recompute, with option_recompute and plan_range behind them), which
only search.idle_gpus defers families for, checked loaded there, or `verify`'s verdict
(paraplan.solver.commands.verdict)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_CODE = """
import contextlib, io, json, sys
from paraplan.solver.commands.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["plan", {path!r}, "--quiet", *{argv!r}])
print(json.dumps({{"code": code, "loaded": sorted(({{m.split(".")[0] for m in sys.modules}} | set(sys.modules))
                                                & set({watched!r}))}}))
"""
# what a plan with the default backend never uses (module docstring)
WATCHED = ("ortools", "pulp", "pandas", "matplotlib", "dask", "distributed", "concurrent.futures",
           "paraplan.solver.dynamic", "paraplan.cost.fit", "difflib", "paraplan.cost.dualpipe",
           "paraplan.formulations.partition", "paraplan.cost.hf_config", "paraplan.formulations.dualpipe",
           "paraplan.solver.option_families", "paraplan.cost.asymmetric", "paraplan.solver.commands.schema",
           "paraplan.cost.calibration", "paraplan.cost.crossval", "paraplan.cost.partition",
           "paraplan.cost.partition_names", "paraplan.solver.class_partitions",
           "paraplan.solver.bounds.class_memory", "paraplan.solver.bounds.stage_recompute",
           "paraplan.solver.commands.verdict")


def _loaded(path: Path, argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _CODE.format(path=str(path), argv=argv, watched=WATCHED)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["tiny-gpt-8xA100.yaml", "mixtral-8x7b-64xH100.yaml", "gpt3-175b-1024xA100.yaml"])
def test_the_default_backend_imports_no_solver_library(name):
    got = _loaded(ROOT / "instances" / name, [])
    assert got == {"code": 0, "loaded": []}, got


@pytest.mark.slow  # a subprocess a backend, about 2 s of CPU each (most of it the start-up)
@pytest.mark.parametrize("backend,library", [("dp", "ortools"), ("cpsat", "ortools"), ("milp", "pulp")])
def test_a_solver_backend_still_imports_its_library(backend, library, tmp_path):
    # a mixed cluster: its configurations of several replica classes are solved by CP-SAT (the
    # split DP takes a lone class only, so "dp" hands them to CP-SAT) or by the MILP. On the
    # bundled one-GPU-type instances the tight bound and the DP's cutoff prune every
    # configuration before a solver runs, whatever the backend, and so they do on the bundled
    # tiny-2types (34 priced, 0 solved; its plan one pipeline over both nodes). With tp 8 alone
    # each node holds one stage, so a plan is one replica piped across the two nodes or a
    # replica on each (two classes, the batch split between them by a solver): 6 of its 40
    # configurations are solved in each backend and the plan chosen is two classes of 6 and 10
    # micro-batches, so each backend loads its library to solve (this test ran the three-type,
    # two-site llama3-70b file before: 26-29 s of CPU for the three)
    from dataclasses import replace

    import yaml

    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.readers.instance_writer import instance_to_mapping
    inst = load_instance(ROOT / "instances" / "mixed" / "tiny-2types.yaml")
    path = tmp_path / "tiny-2types-tp8.yaml"
    path.write_text(yaml.safe_dump(instance_to_mapping(replace(inst, search=replace(inst.search, tp=(8,)))),
                                   sort_keys=False))
    got = _loaded(path, ["--backend", backend])
    assert got["code"] == 0 and library in got["loaded"], got


@pytest.mark.parametrize("argv,module", [(["--threads", "2"], "concurrent.futures"),
                                         (["--robust"], "paraplan.solver.dynamic"),
                                         (["--json"], "paraplan.solver.commands.schema")])
def test_a_feature_still_imports_its_module(argv, module):
    # the thread pool where --threads asks for it; the regret table's module under a scenario
    # objective (the 8B file's bandwidth scenarios)
    got = _loaded(ROOT / "instances" / "mixed" / "llama3-8b-dynamic.yaml", argv)
    assert got["code"] == 0 and module in got["loaded"], got


def test_a_search_over_partitions_still_imports_them():
    # the tiny GPT at tp 4 with per-operator partitions: its plan splits attn.qkv K@node, so the
    # tables priced it (a watched name that the search never loaded would pass the first test
    # whatever it imports)
    got = _loaded(ROOT / "instances" / "tiny-gpt-8xA100.yaml",
                  ["--search", "tensor_partitions=megatron,spatial_temporal", "--search", "tp=4"])
    assert got["code"] == 0, got
    assert {"paraplan.cost.partition", "paraplan.cost.partition_names",
            "paraplan.solver.class_partitions"} <= set(got["loaded"]), got


def test_deferred_stage_families_still_import_their_terms():
    # with search.idle_gpus the tiny GPT's one-group stage families are deferred, each with its
    # memory floor and recompute rows (solver/bounds/stage_families.py)
    got = _loaded(ROOT / "instances" / "tiny-gpt-8xA100.yaml", ["--search", "idle_gpus=true"])
    assert got["code"] == 0, got
    assert {"paraplan.solver.bounds.class_memory", "paraplan.solver.bounds.stage_recompute"} <= set(got["loaded"]), got


def test_a_dualpipe_job_still_imports_its_pricing(tmp_path):
    # tests/formulations/test_dualpipe.py's tiny MoE under DualPipe
    from tests.formulations.test_dualpipe import TINY_DUALPIPE
    path = tmp_path / "tiny-dualpipe.yaml"
    path.write_text(TINY_DUALPIPE)
    got = _loaded(path, [])
    assert got["code"] == 0 and {"paraplan.cost.dualpipe", "paraplan.formulations.dualpipe"} <= set(got["loaded"]), got


def test_the_watched_modules_exist():
    # a watched paraplan module that was renamed would pass the first test by never loading
    import importlib.util
    for name in WATCHED:
        if name.startswith("paraplan."):
            assert importlib.util.find_spec(name) is not None, name


def test_the_partition_command_still_imports_its_problem():
    # `paraplan partition` solves the per-operator problem of one layer (tp 4 on the tiny GPT)
    code = ("import contextlib, io, sys\n"
            "from paraplan.solver.commands.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    code = main(['partition', {str(ROOT / 'instances' / 'tiny-gpt-8xA100.yaml')!r}, '--tp', '4'])\n"
            "print(code, 'paraplan.formulations.partition' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0 True"


def test_the_watched_libraries_are_the_ones_the_code_imports():
    # the report's figures import matplotlib and the sweep's scheduler distributed (which loads
    # dask), the formulations OR-Tools and PuLP, inside the functions that use them: the names
    # the plan test watches are those
    import ast
    names = set()
    for path in [*(ROOT / "solver").rglob("*.py"), *(ROOT / "formulations").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
    assert {"matplotlib", "distributed", "ortools", "pulp", "concurrent"} <= names


def test_command_modules_lists_what_each_module_registers():
    # cli.COMMAND_MODULES lets a command line import only its command's module: each module must
    # register exactly the commands the table gives it, and every command must be in the table
    # (else `paraplan <command>` would fail to parse without the whole parser)
    import argparse

    from paraplan.solver.commands import cli
    from paraplan.solver.commands.parser import COMMAND_ORDER

    seen = {"simulate"}
    for mod, names in cli.COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers(dest="command")
        __import__(mod, fromlist=["register"]).register(sub)
        assert set(sub.choices) == set(names), mod
        seen |= set(names)
    assert seen == set(COMMAND_ORDER)
    # a command line naming one command registers only its module's commands
    sub = next(a for a in cli.build_parser(["plan"])._actions if a.dest == "command")
    assert set(sub.choices) == {"simulate", *dict(cli.COMMAND_MODULES)["paraplan.solver.commands.planning"]}


def test_plan_loads_no_other_command_module():
    # the sweep runner, the report page and the export writers are other commands' modules
    code = ("import contextlib, io, sys\n"
            "from paraplan.solver.commands.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main(['plan', {str(ROOT / 'instances' / 'tiny-gpt-8xA100.yaml')!r}, '--quiet'])\n"
            "print(sorted(m for m in sys.modules if m in ('paraplan.solver.sweep.run',"
            " 'paraplan.solver.report.page', 'paraplan.solver.commands.export', 'importlib.metadata')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_command_line_freezes_the_collector_for_its_exit_and_a_caller_with_argv_does_not():
    # cli._freeze_for_exit: after the process's own command (argv from sys.argv, as the console
    # script and `python -m` call main) the collector's objects are frozen, so that the
    # interpreter's exit does not search them for cycles; a caller passing its own argv (the
    # tests' in-process commands) keeps its collector whole
    tiny = str(ROOT / "instances" / "tiny-gpt-8xA100.yaml")
    code = ("import contextlib, gc, io, sys\n"
            "from paraplan.solver.commands.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    a = main(['plan', {tiny!r}, '--quiet'])\n"
            "    frozen_with_argv = gc.get_freeze_count()\n"
            f"    sys.argv = ['paraplan', 'plan', {tiny!r}, '--quiet']\n"
            "    b = main()\n"
            "print(a, b, frozen_with_argv, gc.get_freeze_count() > 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0 0 0 True"
