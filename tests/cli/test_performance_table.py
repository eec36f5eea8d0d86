"""docs/performance.md's table of the bundled large instances states their optima as the goldens
hold them (tests/goldens/bundled.json, frozen by the golden command, not by the docs): each row's
degrees and p90 time are the golden plan's and objective, its predicted time and MFU the golden
plan re-simulated (cost/simulate.py). A plan that moves fails here until the table says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = json.loads((ROOT / "tests" / "goldens" / "bundled.json").read_text())
# the table's first column -> the bundled instance
ROWS = {"GPT-3 175B, 1,024 A100-80GB": "gpt3-175b-1024xA100",
        "Llama-3 70B, 512 H100": "llama3-70b-512xH100",
        "Llama-3.1 405B (seq 8192), 16,384 H100": "llama3-405b-16384xH100",
        "DeepSeek-V3-shaped, 2,048 H800": "deepseek-v3-shaped-2048xH800",
        "Qwen3-235B-A22B, 256 H100": "qwen3-235b-a22b-256xH100",
        "Mixtral 8x7B, 64 H100": "mixtral-8x7b-64xH100"}


def _table() -> dict[str, str]:
    """The table's rows: first column -> the optimum column (the last)."""
    text = (ROOT / "docs" / "performance.md").read_text()
    section = text.split("## The bundled large instances", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ROWS:
            rows[cells[0]] = cells[-1]
    return rows


def test_the_table_has_every_row():
    assert set(_table()) == set(ROWS)


@pytest.mark.parametrize("label", sorted(ROWS))
def test_each_optimum_is_the_golden_plan(label):
    optimum = _table()[label]
    golden = GOLDENS[f"instances/{ROWS[label]}.yaml:nominal"]
    plan = golden["plan"]

    def degree(name: str) -> int:  # a degree the row leaves out is 1
        m = re.search(rf"(?:^|, ){name} (\d+)", optimum)
        return int(m.group(1)) if m else 1

    for name, key in (("tp", "tp"), ("pp", "pp"), ("v", "virtual_stages"), ("cp", "cp"), ("dp", "dp"),
                      ("ep", "ep")):
        assert degree(name) == (plan.get(key) or 1), (label, name)
    assert int(re.search(r"ZeRO-(\d)", optimum).group(1)) == plan["zero"]
    if "micro-batch" in optimum:
        assert int(re.search(r"micro-batch (\d+)", optimum).group(1)) == plan["micro_batch"]
    recomputed = re.search(r"(\d+) of (\d+) layers fully recomputed", optimum)
    assert (int(recomputed.group(1)) if recomputed else 0) == sum(plan["full_recompute_layers"])
    assert ("embedding and loss as layer slots" in optimum) == bool(
        plan.get("embedding_in_split") and plan.get("loss_in_split"))
    predicted, p90 = map(float, re.search(r": ([\d.]+) s \(p90 ([\d.]+) s\)", optimum).groups())
    assert p90 == round(golden["objective_s"], 2)
    inst = load_instance(ROOT / "instances" / f"{ROWS[label]}.yaml")
    bd = simulate(inst, plan_from_mapping(plan, inst))
    assert predicted == round(bd.iter_time_s, 2)
    assert float(re.search(r"MFU ([\d.]+)%", optimum).group(1)) == round(100 * bd.mfu, 1)
