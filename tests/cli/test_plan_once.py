"""One `paraplan plan` reads its instance file once and simulates its plan once (issue 32).

Before issue 32 a plan of a homogeneous instance read the file 4 times (twice to learn whether
it holds node groups, twice to build the instance) and re-simulated the plan with both
simulators, and `--robust` priced its plan on every scenario twice (the search's re-simulation,
then the regret table). One simulator prices every plan (cost/simulate.simulate). The counts
below are what one run needs: one read to build the instance, and one simulation of each plan
shown on each network its objective reads (solver/search.check_resimulation, whose breakdown
`plan` prints).
"""

from __future__ import annotations

import builtins
import os
import sys
from pathlib import Path

import pytest

from paraplan.cost import simulate
from paraplan.solver.commands.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _count_reads_and_simulations(monkeypatch, path: Path, extra: list[str]) -> tuple[int, list]:
    """Run `paraplan plan PATH EXTRA` counting the opens of PATH, and recording each call of
    the simulator as (plan, network; None: the nominal one) wherever a module bound it
    (every loaded paraplan module's name for it is replaced, cost.simulate's own included, so
    that a module imported later binds the counting one)."""
    reads, calls = [0], []
    target = os.path.realpath(path)
    real_open = builtins.open
    real = simulate.simulate

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.realpath(file) == target:
            reads[0] += 1
        return real_open(file, *args, **kwargs)

    def counting(inst, plan, *args, **kwargs):
        calls.append((plan, kwargs.get("cluster")))
        return real(inst, plan, *args, **kwargs)

    import paraplan.solver.solve  # noqa: F401  (the route `plan` takes, loaded before patching)
    import paraplan.solver.commands.planning  # noqa: F401
    for mod in [m for k, m in sys.modules.items() if k.startswith("paraplan.") and m is not None]:
        for attr, value in list(vars(mod).items()):
            if value is real:
                monkeypatch.setattr(mod, attr, counting)
    monkeypatch.setattr(builtins, "open", counting_open)
    assert main(["plan", str(path), "--quiet", *extra]) == 0
    return reads[0], calls


@pytest.mark.parametrize("rel, extra, simulations", [
    ("instances/tiny-gpt-8xA100.yaml", [], 1),  # homogeneous: its one group, one class
    ("instances/tiny-gpt-8xA100.yaml", ["--json", "-o", "{tmp}/plan.yaml"], 1),
    ("instances/mixed/tiny-2types.yaml", [], 1),  # two GPU types
    ("instances/tiny-gpt-8xA100.yaml", ["--top", "3"], 3),  # three plans, each once
    # its 3 scenarios: the plan once on each, and each scenario's own optimum (the regret
    # table's reference, searched on that network alone) once there; the regret table reads
    # the plan's times from its re-simulation (9 calls when it priced them again)
    # (10.4 s of CPU: slow, issue 32)
    pytest.param("instances/mixed/llama3-8b-dynamic.yaml", ["--robust"], 3 + 3, marks=pytest.mark.slow),
])
def test_plan_reads_its_instance_once_and_simulates_its_plan_once(monkeypatch, capsys, tmp_path, rel,
                                                                   extra, simulations):
    reads, calls = _count_reads_and_simulations(monkeypatch, ROOT / rel,
                                                [x.format(tmp=tmp_path) for x in extra])
    capsys.readouterr()
    assert reads == 1
    assert len(calls) == simulations
