"""A stage family is keyed first by its bound without its slowest stage with forced recompute
(stage_families.FamilyBounds.rough_bound, search._Partials.first_key) and reads its full bound
(family_key) only when it comes up (search._Search._open_family: pushed back where that raises
its key; issue 33: the 4 x 16 row keyed 396 stage families, 1.0 s of CPU, and opened 77).

The first key is admissible because it is at most the family's bound: per tp choice, _combos'
bound reads the slowest stage that memory and the recompute it forces allow as a floor of the
pipeline's slowest stage (np.maximum(a0, slowest)), and every term of the bound grows with that
floor, so the choice's bound with 0 in its place is at most its own, and the least over the
choices keeps the order. Checked here on random clusters of three or four groups of two toy GPU
types with interleaving (v 1 or 2, where the family's bound reads the term) and memory that binds:
- each family's first key is at most its bound (equal where the key reads no such term), and
  below it for some family (the term is read, so the test can fail);
- the search keyed so returns exhaustive search's optimum, and the plan of the search whose
  families are keyed by their full bound from the start, while some family's full bound is
  never read (the deferral bites)."""

from __future__ import annotations

import dataclasses

import pytest
from test_stage_families import MAX_CANDIDATES, repeated_types_instance

from paraplan.solver import search as search_mod
from paraplan.solver.bounds.stage_families import FamilyBounds
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import FAMILIES, search

SEEDS = (0, 1, 4, 9)


def _interleaved(seed: int, options: bool = False):
    """repeated_types_instance with virtual stages 1 and 2 (the family bound's v > 1 reading)."""
    inst = repeated_types_instance(seed, options)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, virtual_stages=(1, 2)))


@pytest.fixture
def deferred(monkeypatch):
    monkeypatch.setattr(search_mod, "DEFER_TP_CHOICES", 0)


@pytest.mark.parametrize("seed, options", [(s, o) for s in SEEDS for o in (False, True)])
def test_a_familys_first_key_is_at_most_its_bound(seed, options, deferred):
    inst = _interleaved(seed, options)
    lazy = search_mod._Partials.of(inst, "nominal", FAMILIES, None)
    below = 0
    for f, first in enumerate(lazy.family_bounds):
        full = lazy.family_key(f)
        if f in lazy.rough:
            assert first <= full, lazy.families[f]
            below += first < full
        else:
            assert first == full, lazy.families[f]
    assert below  # some family's key reads the slowest stage with forced recompute


@pytest.mark.slow  # exhaustive search and two searches of each seed's space: 32 s of CPU (-n 0)
def test_the_search_keyed_first_returns_the_exhaustive_optimum_and_the_full_keys_plan(monkeypatch, deferred):
    unread = 0
    for seed in SEEDS:
        inst = _interleaved(seed)
        ex = exhaustive(inst, max_candidates=MAX_CANDIDATES)
        with monkeypatch.context() as m:  # every family keyed by its full bound from the start
            m.setattr(FamilyBounds, "rough_bound", lambda self, fam: (self.family_bound(fam), False))
            full = search(inst, "cpsat", time_limit_s=120)
        read = []
        family_key = search_mod._Partials.family_key
        with monkeypatch.context() as m:
            m.setattr(search_mod._Partials, "family_key", lambda self, f: read.append(f) or family_key(self, f))
            res = search(inst, "cpsat", time_limit_s=120)
        assert (res.status, res.plan, res.objective_s) == (full.status, full.plan, full.objective_s)
        # the optimum is exhaustive search's (none where it finds none)
        assert (res.objective_s is None if ex.objective_s is None
                else abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s)
        rough = search_mod._Partials.of(inst, "nominal", FAMILIES, None).rough
        unread += len(rough - set(read))
    assert unread  # some family's full bound is never read
