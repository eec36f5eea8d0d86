"""What the export tests share: a bundled instance's golden plan as a plan file, and one
`paraplan export` call with its output."""

import json
from pathlib import Path

import yaml

from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_writer import plan_file_mapping
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.solver.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = json.loads((ROOT / "tests" / "goldens" / "bundled.json").read_text())


def golden_plan_file(tmp_path: Path, instance: str) -> Path:
    """The golden plan of a bundled instance, as `paraplan plan -o` writes it (with its instance)."""
    inst = load_instance(ROOT / instance)
    plan = plan_from_mapping(GOLDENS[f"{instance}:nominal"]["plan"], inst)
    path = tmp_path / Path(instance).name
    path.write_text(yaml.safe_dump(plan_file_mapping(inst, plan), sort_keys=False))
    return path


def mean_plan_file(tmp_path: Path, instance: str) -> Path:
    """The optimum of a bundled instance planned for its predicted time (`--objective mean`, the
    objective of the golden plans the export issue measured before the default became p90), as
    `paraplan plan -o` writes it."""
    import dataclasses

    from paraplan.solver.solve import solve as plan
    inst = load_instance(ROOT / instance)
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, objective="mean"))
    path = tmp_path / Path(instance).name
    path.write_text(yaml.safe_dump(plan_file_mapping(inst, plan(inst).plan), sort_keys=False))
    return path


def export(capsys, *argv) -> tuple[int, str, str]:
    code = main(["export", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def zbv_split(plan):
    """The plan with 2 layers moved from stage 0 to the last stage: the lighter rank 0 that
    ZBV's V (output layer on rank 0) wants."""
    n = list(plan.layers_per_stage)
    n[0] -= 2
    n[-1] += 2
    return type(plan).of(plan.flat_outer, n, plan.full_recompute_layers, plan.partitions)


# Llama-3.1 405B's proved optimum before the embedding/loss layer slots entered the space (its
# golden at 9b9d6c1): pp 32, v 2, 4 layers on stages 0-30 and 2 on stage 31. The zero-bubble
# tests derive their orderings on this split (the golden is now v 4 with both slots, which
# torch's schedules place differently).
LLAMA405_V2_PLAN = {"tp": 4, "cp": 8, "dp": 16, "pp": 32, "virtual_stages": 2, "micro_batch": 1,
                    "num_micro_batches": 128, "sequence_parallel": True, "zero": 1, "recompute": "none",
                    "layers_per_stage": [4] * 31 + [2], "full_recompute_layers": [0] * 32}


def llama405_v2():
    """(instance, plan) of LLAMA405_V2_PLAN on the bundled 405B instance."""
    inst = load_instance(ROOT / "instances/llama3-405b-16384xH100.yaml")
    return inst, plan_from_mapping(LLAMA405_V2_PLAN, inst)
