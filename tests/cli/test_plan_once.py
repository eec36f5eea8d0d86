"""One `paraplan plan` reads its instance file once and simulates its plan once (issue 32).

Before issue 32 a plan of a homogeneous instance read the file 4 times (twice to learn whether
it holds node groups, twice to build the instance) and re-simulated the plan with both
simulators. The counts below are what one run needs: one read to build the instance, and one
re-simulation to check the solver's objective (solver/planner.check_resimulation, whose
breakdown `plan` prints).
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
SIMULATORS = {"simulate": simulate.simulate, "simulate_classes": simulate.simulate_classes}


def _count_reads_and_simulations(monkeypatch, path: Path) -> dict[str, int]:
    """Run `paraplan plan PATH` counting the opens of PATH and the calls of each simulator,
    wherever a module bound it (every loaded paraplan module's name for it is replaced)."""
    counts = {"reads": 0, **{name: 0 for name in SIMULATORS}}
    target = os.path.realpath(path)
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.realpath(file) == target:
            counts["reads"] += 1
        return real_open(file, *args, **kwargs)

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    import paraplan.solver.solve  # noqa: F401  (the route `plan` takes, loaded before patching)
    import paraplan.solver.commands.planning  # noqa: F401
    for name, fn in SIMULATORS.items():
        wrapper = counting(name, fn)
        for mod in [m for k, m in sys.modules.items() if k.startswith("paraplan.") and m is not None]:
            for attr, value in list(vars(mod).items()):
                if value is fn:
                    monkeypatch.setattr(mod, attr, wrapper)
    monkeypatch.setattr(builtins, "open", counting_open)
    assert main(["plan", str(path)]) == 0
    return counts


@pytest.mark.parametrize("rel, simulator", [
    ("instances/tiny-gpt-8xA100.yaml", "simulate"),  # homogeneous: shown by the one-class simulator
    ("instances/hetero/tiny-2types.yaml", "simulate_classes"),  # two GPU types: by the class one
])
def test_plan_reads_its_instance_once_and_simulates_its_plan_once(monkeypatch, capsys, rel, simulator):
    counts = _count_reads_and_simulations(monkeypatch, ROOT / rel)
    capsys.readouterr()
    other = next(name for name in SIMULATORS if name != simulator)
    assert counts == {"reads": 1, simulator: 1, other: 0}
