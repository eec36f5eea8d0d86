"""The search chooses Megatron-core's embedding / loss layer slots (cost/pipeline_split.py R4,
--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split, core 0.11.0):
Llama-3.1 405B's 126 layers on pp 8 are planned with v 8, which no split of whole 8-layer
chunks allows (126 = 8 x 15.75), and plan and export say so."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from paraplan.cost.specs import Instance
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.pipeline_split import megatron_split
from paraplan.cost.simulate import simulate
from paraplan.cost.space_rules import slot_modes, split_slots_run
from paraplan.solver.solve import solve
from paraplan.solver.plan_text import plan_line
from paraplan.solver.export import FORMATS
from paraplan.solver.planner import OPTIMAL
from paraplan.solver.space import virtual_stage_values

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inst405():
    """The bundled 405B instance on pp 8 and v 8 only, its other choices narrowed to keep the
    search short (tp 8 in a node, no cp, micro-batch 1, ZeRO-1, sequence parallel)."""
    inst = load_instance(ROOT / "instances/llama3-405b-16384xH100.yaml")
    return replace(inst, search=replace(inst.search, pp=(8,), virtual_stages=(8,), tp=(8,), cp=(1,),
                                        micro_batch=(1,), zero=(1,), sequence_parallel=(True,)))


def test_the_slots_that_make_v8_split_126_layers():
    # (126 + e + l) % 8 == 0 needs e + l = 2: both slots, 128 = 8 stages x 8 chunks x 2 slots
    assert slot_modes(126, 8, True) == [(True, True)]
    assert slot_modes(126, 8, False) == []
    # v 2: 126 is even, so no slot or both; v 3 divides 126 (and 128 no): no slot only
    assert slot_modes(126, 2, True) == [(False, False), (True, True)]
    assert slot_modes(126, 3, True) == [(False, False)]
    # Megatron-core's own split with both flags: 16 slots a rank, less the embedding on rank 0
    # and the loss on rank 7
    assert megatron_split(126, 8, 8, embedding=True, loss=True) == (15, 16, 16, 16, 16, 16, 16, 15)


def test_releases_before_the_flags_keep_whole_chunks(inst405):
    # NeMo 24.07 (2024) predates Megatron-core 0.11.0 (2025-02): no slots, so no v 8 on 126
    old = replace(inst405, job=replace(inst405.job, framework_version="nemo-24.07"))
    assert split_slots_run(inst405.job, inst405.search) and not split_slots_run(old.job, old.search)
    shapes = (type("Shape", (), {"pp": 8})(),)
    assert virtual_stage_values(inst405, shapes) == [8]
    assert virtual_stage_values(old, shapes) == []


def test_llama31_405b_on_pp8_is_planned_with_v8_and_both_slots(inst405):
    res = solve(inst405)  # about 1 s
    assert res.status == OPTIMAL
    p = res.plan
    assert (p.pp, p.virtual_stages, p.embedding_in_split, p.loss_in_split) == (8, 8, True, True)
    # the chunk rule by hand: every stage holds a multiple of 8 slots, the embedding's on
    # stage 0 and the loss's on stage 7; 126 layers in all
    slots = np.array(p.layers_per_stage) + np.array([1, 0, 0, 0, 0, 0, 0, 1])
    assert sum(p.layers_per_stage) == 126 and not (slots % 8).any()
    # the plan re-simulates to its objective, the short chunks' memory included
    bd = simulate(inst405, p, reserve_bytes=inst405.search.memory_reserve_bytes)
    assert bd.fits and bd.iter_time_s == pytest.approx(res.iter_time_s, rel=1e-12)
    assert "embedding_in_split loss_in_split" in plan_line(p)
    text = FORMATS["megatron"][0](inst405, p).text
    if p.layers_per_stage == megatron_split(126, 8, 8, embedding=True, loss=True):
        assert "--account-for-embedding-in-pipeline-split" in text
        assert "--account-for-loss-in-pipeline-split" in text
    else:  # another count per rank: only the layout places it, E and L in their slots
        assert '--pipeline-model-parallel-layout "E,' in text and ',L"' in text
