"""The option families (solver/option_families.py) wait for a plan in hand (solver/search.py,
_Search._hold_options), and the layouts' ZeRO ranks are read at a power of two
(option_families._ranks_read): issue 33, Llama 3 8B on 256 H100 with classes_per_group 2 set up
every two-class layout with nothing to prune against and timed out with no plan.

The order is checked where it bites: on one group the option families' bound relaxes every class
to the group's floors, below the one-class layouts' bounds, so best first would open them first.
The answer is checked against exhaustive search of the same space, on the tiny instance where two
classes beat one (tests/mixed/test_one_group_options.py's TWO_CLASSES: the held families must
still be opened and win)."""

from __future__ import annotations

import dataclasses

import pytest

from paraplan.cost.readers.instance import load_instance
from paraplan.solver import search as search_mod
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.option_families import OptionFamily, _ranks_read

pytestmark = pytest.mark.usefixtures("small_price_chunks")

TINY = "instances/tiny-gpt-8xA100.yaml"  # 8 A100 in one node
SMALL_SPACE = "search:\n  tp: [1, 2]\n  pp: [1, 2]\n  micro_batch: [1]\n"


def _two_classes(tmp_path, batch: int):
    path = tmp_path / f"tiny-batch{batch}.yaml"
    path.write_text(open(TINY).read().replace("global_batch: 32", f"global_batch: {batch}")
                    .replace("seq_len: 1024", "seq_len: 2048").rstrip("\n") + "\n" + SMALL_SPACE)
    inst = load_instance(str(path))
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=2))


@pytest.mark.parametrize("batch", [15, 32])  # 15: two classes win (test_one_group_options); 32: one does
def test_option_families_open_only_with_a_plan_in_hand_and_the_answer_is_exhaustive(batch, tmp_path, monkeypatch):
    inst = _two_classes(tmp_path, batch)
    opened = []
    original = search_mod._Search._open_family

    def spy(self, first):
        fam = self.lazy.families[first.index] if isinstance(first, search_mod._Family) else None
        if isinstance(fam, OptionFamily):
            opened.append(self.won.in_hand)
        return original(self, first)

    monkeypatch.setattr(search_mod._Search, "_open_family", spy)
    res = search_mod.search(inst, "cpsat", 120.0)
    brute = exhaustive(inst)  # every plan of the same space
    assert brute.complete and brute.plan is not None
    assert res.status == "optimal"
    assert res.objective_s == pytest.approx(brute.objective_s, rel=1e-6)
    assert opened and all(opened)  # each option family opened after a plan was found


def test_the_ranks_read_are_the_next_power_of_two_within_the_family():
    # a layout of 3 replicas is read at 4 ranks, of 4 at 4, of 5 at 8; never past the family's most
    assert [_ranks_read(r, 64) for r in (1, 2, 3, 4, 5, 33, 64)] == [1, 2, 4, 4, 8, 64, 64]
    assert _ranks_read(5, 6) == 6
