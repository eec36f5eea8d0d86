"""Issue 33, a set-up that does each piece of its work once: the listing of the space
(solver/space.py) and the memory proof before pricing (solver/bounds/memory.py) keep what they
compute by what it reads, so a plan computes each distinct piece once however often it is
asked for. Counted, not timed (the machine is shared): on a bundled instance, the pieces
computed equal the distinct pieces asked for, and fewer than the asks (else the memo is not
exercised and the test proves nothing). Before the memos, GPT-3 175B / 1,024 A100 computed
1,885 tallies for 24 distinct ones and 8,274 lower-bound memory terms for 4,162; of its 4,176
terms, 781 distinct activation terms and 181 runtime allowances."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from paraplan.cost.readers.instance import load_instance
from paraplan.solver import space
from paraplan.solver.search import search

ROOT = Path(__file__).resolve().parents[2]


def _canon(x):
    """A hashable value equal for equal inputs (sets and dicts in a fixed order)."""
    if isinstance(x, dict):
        return ("dict", tuple(sorted((repr(k), _canon(v)) for k, v in x.items())))
    if isinstance(x, (set, frozenset)):
        return ("set", tuple(sorted(map(repr, x))))
    if isinstance(x, (tuple, list)):
        return tuple(_canon(v) for v in x)
    return x


@pytest.mark.parametrize("name", ["llama3-8b-64xH100.yaml", "gpt3-175b-1024xA100.yaml"])
def test_the_setup_computes_each_distinct_piece_once(name, monkeypatch):
    inst = load_instance(ROOT / "instances" / name)
    asked = {"terms": 0, "tally": 0}
    computed = {"terms": [], "tally": [], "caps": []}
    terms, tally_of, lb_memo = space._lower_bound_terms, space.Tally.of.__func__, space._lb_memo

    def counted_terms(*args):
        computed["terms"].append(args[1:])  # all it reads beside the instance
        return terms(*args)

    class Asked:
        """The instance's memo of terms, every lookup in it counted as an ask: the listing's
        micro-batch caps look the terms up there themselves, the memory proof through
        micro_batch_lower_bound_terms."""

        def __init__(self, memo: dict):
            self.memo = memo

        def get(self, key):
            asked["terms"] += 1
            return self.memo.get(key)

        def __setitem__(self, key, value):
            self.memo[key] = value

    def counted_tally(cls, fields):
        computed["tally"].append(_canon(fields))
        return tally_of(cls, fields)

    monkeypatch.setattr(space, "_lower_bound_terms", counted_terms)
    monkeypatch.setattr(space, "_lb_memo", lambda inst_: Asked(lb_memo(inst_)))
    shape_blocks = space._Listing.shape_blocks

    def counted_blocks(self, *args):
        got = shape_blocks(self, *args)
        asked["tally"] += len(got)  # each block lists by its tally
        return got

    # of each terms computed, the activation terms and the runtime allowance read fewer of its
    # arguments (the micro-batch, tp, cp, sp; tp, cp, the ring, pp): each computed once per those
    acts, runtime = space.memory.checkpoint_activation_bytes, space.memory.runtime_bytes

    def from_terms() -> bool:  # the pricing reads these too: only the listing's are counted
        return sys._getframe(2).f_code is terms.__code__

    def counted_acts(m, b, tp, cp, sp):
        if from_terms():
            computed["acts"].append((id(m), b, tp, cp, sp))
        return acts(m, b, tp, cp, sp)

    def counted_runtime(*args):
        if from_terms():
            computed["runtime"].append(args)
        return runtime(*args)

    computed["acts"], computed["runtime"] = [], []
    monkeypatch.setattr(space.memory, "checkpoint_activation_bytes", counted_acts)
    monkeypatch.setattr(space.memory, "runtime_bytes", counted_runtime)
    monkeypatch.setattr(space.Tally, "of", classmethod(counted_tally))
    monkeypatch.setattr(space._Listing, "shape_blocks", counted_blocks)
    res = search(inst, backend="dp", time_limit_s=600, resimulate=False)
    assert res.status == "optimal"
    # each distinct piece computed once over the listing, its bounds and the search's chunks
    assert len(computed["terms"]) == len(set(computed["terms"])) < asked["terms"]
    assert len(computed["tally"]) == len(set(computed["tally"])) < asked["tally"]
    for piece in ("acts", "runtime"):
        assert len(computed[piece]) == len(set(computed[piece])) < len(computed["terms"])
