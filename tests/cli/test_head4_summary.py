"""The space's size read from the partial layouts' tallies (solver/space.summarize_partials:
per layout's degrees and tally the recompute-pattern values times layer splits summed once per
(v, paired), times each block's micro-batch vectors; issue 33: GPT-3 175B / 1,024 A100's summary
128 -> 67 million instructions) against the same count over every outer configuration listed
(space.summarize, outer by outer), on the kinds of space that take each factor: GPT-3's one
group (the README's first plan), the embedding / loss slots, an MoE model whose all-to-all
overlap pairs micro-batches. The mixed-cluster families are
tests/mixed/test_partial_layouts.py's. (Torch's zero-bubble variants and DualPipe's
configurations are listed outer by outer, not as partial layouts: search._lists_partials.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from randinst import random_cluster_instance, slot_instance

from paraplan.cost.readers.instance import load_instance
from paraplan.solver.space import declared_outers, declared_partials, summarize, summarize_partials

ROOT = Path(__file__).resolve().parents[2]


def _paired(inst):
    # Megatron-core's all-to-all overlap: its pipeline-free classes run >= 2 micro-batches
    # (space._count_form's `paired`)
    return replace(inst, job=replace(inst.job, moe_a2a_overlap=True))


def _instances():
    from tests.mixed.test_moe_mixed import moe_cluster_instance
    return [load_instance(ROOT / "instances/gpt3-175b-1024xA100.yaml"), slot_instance(3), slot_instance(7),
            _paired(moe_cluster_instance(3)),
            _paired(moe_cluster_instance(11)),
            random_cluster_instance(2)]


@pytest.mark.slow  # about 6 s: GPT-3's 29,858 outers counted one by one
def test_the_tallied_summary_counts_every_listed_outer():
    plans = set()
    for inst in _instances():
        got = summarize_partials(inst, declared_partials(inst))
        assert got == summarize(inst, declared_outers(inst)), inst.name
        plans.add(got.plans_total)
    assert len(plans) == 6 and 0 not in plans  # spaces of their own, none empty
