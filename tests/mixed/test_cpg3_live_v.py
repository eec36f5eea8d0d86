"""A replica family's memory read only at the v where its root's plain reading can win
(solver/option_families.OptionBounds._root's `live`, issue 33): the search with classes_per_group
2 and idle_gpus on one group proves exhaustive search's optimum (solver/exhaustive.py: every
configuration, micro-batch vector, split and recompute count, no bound), on small random
one-group instances (tests/randinst.random_instance: toy GPUs of 0.7-2.75 GiB, so memory
binds), and on some of them a root is read at some of its v and not the others."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from randinst import random_instance

from paraplan.solver import option_families
from paraplan.solver.exhaustive import SpaceTooLarge, exhaustive
from paraplan.solver.search import search

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("small_price_chunks")]

SEEDS = tuple(range(1, 41))


@functools.lru_cache(maxsize=4)
def _options_on(seed: int):
    inst = random_instance(seed)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=2, idle_gpus=True,
                                                                virtual_stages=(1, 2, 4)))


def _partial_masks(monkeypatch) -> list:
    """Record each live mask _class_terms is asked with that reads memory at some v only."""
    seen = []
    real = option_families.OptionBounds._class_terms

    def spy(self, fam, g, pp, zeros, most, raised=None, first=False, live=None):
        if live is not None and any(live) and not all(live):
            seen.append(live)
        return real(self, fam, g, pp, zeros, most, raised, first, live)
    monkeypatch.setattr(option_families.OptionBounds, "_class_terms", spy)
    return seen


@pytest.mark.parametrize("seed", SEEDS)
def test_search_proves_the_exhaustive_optimum(seed):
    inst = _options_on(seed)
    try:
        ex = exhaustive(inst, max_candidates=400_000)
    except SpaceTooLarge:
        pytest.skip("space beyond the exhaustive cap")
    assert ex.complete
    got = search(inst, backend="dp", time_limit_s=600)
    if ex.objective_s is None:
        assert got.objective_s is None
        return
    assert got.status == "optimal"
    assert abs(got.objective_s - ex.objective_s) <= got.tolerance_s + 1e-9 * ex.objective_s, (
        seed, got.objective_s, ex.objective_s)


def test_some_root_reads_memory_at_some_v_only(monkeypatch):
    seen = _partial_masks(monkeypatch)
    for seed in SEEDS[:20]:
        search(_options_on(seed), backend="dp", time_limit_s=600)
        if seen:
            break
    assert seen
