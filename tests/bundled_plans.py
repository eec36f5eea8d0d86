"""Bundled instances whose optimum several test files read, each read and solved once per test
process (issue 32). The same call, solve(inst, backend) on one thread, was made by:

- tests/goldens (the flat bundled goldens: backend dp, the instance's own objective),
- tests/validation/test_moe_plausibility.py (the MoE optima, under 1F1B and under DualPipe),
- tests/formulations/test_dualpipe.py (the Qwen3-235B DualPipe row's DP reference),
- tests/robustness/test_determinism.py (Llama-3 70B's first one-thread solve),
- tests/solver/test_zero_bubble_planning.py and tests/cli/test_zero_bubble_export.py (Llama-3
  70B with job.framework torchtitan, backend dp: about 2.5 s of CPU each),

about 35 s of CPU solved twice over (Qwen3-235B DualPipe alone about 18 s); and the same
`paraplan timeline` of the bundled dynamic instance by tests/cli/test_json_schema.py (its JSON's
shape) and tests/mixed/test_timeline_exact.py (its gap to the bound). A cache in one
process helps only the tests that run in it, so each test that reads one of SHARED carries
`same_worker(name)`, an xdist_group mark: tests/conftest.py collects the marked tests first,
side by side, where pytest-xdist's worksteal scheduling (pyproject.toml) starts one worker on
them (and `--dist loadgroup` would keep each group on one worker by itself). Results are
shared, so read only."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from pathlib import Path

import pytest

from paraplan.cost.readers.instance import load_instance
from paraplan.solver.solve import solve

ROOT = Path(__file__).resolve().parents[1]
# the bundled instances more than one test file solves (file names under instances/, no suffix)
SHARED = ("qwen3-235b-a22b-256xH100", "deepseek-v3-shaped-2048xH800", "deepseek-v3-shaped-1152xGB200",
          "llama3-70b-512xH100")
# the bundled instances whose `paraplan timeline --json` more than one test file reads
TIMELINES = ("mixed/llama3-8b-dynamic",)
# a guard against a hang, not part of any check: under load a proof's wall time grows with the
# jobs sharing a core (Qwen3-235B under DualPipe took 77 s of wall for ~35 s of CPU at load 7);
# every reader asserts the status it needs (optimal)
GUARD_LIMIT_S = 600.0


def bundled_instance(name: str, dualpipe: bool = False, torchtitan: bool = False):
    """instances/<name>.yaml, read once per test process; with `dualpipe`, under DeepSeek's
    DualPipe schedule as `paraplan bench` runs it (solver/bench/ladder.dualpipe_instance); with
    `torchtitan`, its job's framework torchtitan (the file's job states none: the instance the
    file reads as with `framework: torchtitan` in its job, but its source path)."""
    return _instance(name, bool(dualpipe), bool(torchtitan))


def bundled_optimum(name: str, backend: str = "dp", dualpipe: bool = False, torchtitan: bool = False):
    """solve(bundled_instance(name, dualpipe, torchtitan), backend) on one thread (solve's
    default) at the instance's own objective, once per test process. Read only: the result is
    shared."""
    return _optimum(name, backend, bool(dualpipe), bool(torchtitan))


# the caches take every argument positionally: lru_cache keys f(a) and f(a, default) apart
@functools.lru_cache(maxsize=None)
def _instance(name: str, dualpipe: bool, torchtitan: bool):
    assert not (dualpipe and torchtitan)
    if dualpipe:
        from paraplan.solver.bench.ladder import dualpipe_instance
        return dualpipe_instance(name)
    inst = load_instance(ROOT / "instances" / f"{name}.yaml")
    if torchtitan:
        import dataclasses

        from paraplan.cost.specs import Framework
        assert inst.job.framework is Framework.MEGATRON and inst.job.framework_version is None
        inst = dataclasses.replace(inst, job=dataclasses.replace(inst.job, framework=Framework.TORCHTITAN))
    return inst


@functools.lru_cache(maxsize=None)
def _optimum(name: str, backend: str, dualpipe: bool, torchtitan: bool):
    return solve(_instance(name, dualpipe, torchtitan), backend, time_limit_s=GUARD_LIMIT_S)


def timeline_json(name: str) -> dict:
    """`paraplan timeline instances/<name>.yaml --json --quiet` (backend cpsat, the command's
    default) under a hang guard, run once per test process; each call parses the printed JSON
    afresh, so a reader may change what it gets."""
    return json.loads(_timeline_text(name))


@functools.lru_cache(maxsize=None)
def _timeline_text(name: str) -> str:
    from paraplan.solver.commands.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["timeline", str(ROOT / "instances" / f"{name}.yaml"), "--json", "--quiet",
                     "--time-limit-s", str(GUARD_LIMIT_S)])
    assert code == 0, (name, code)
    return out.getvalue()


def same_worker(name: str):
    """The mark that puts a test reading bundled_optimum(name, ...) beside the other tests
    reading it (xdist_group, read by tests/conftest.py; no-op with -n 0)."""
    assert name in SHARED + TIMELINES, name
    return pytest.mark.xdist_group(f"bundled-{name}")
