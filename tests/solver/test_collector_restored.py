"""The collector's settings around a search (solver/collector.fewer_collections): raised while it
runs, and restored after it, also when the search fails. Nothing is frozen (gc.freeze): a search's
objects are walked once as they survive their young collection, and with the middle generation
rarely collected no full collection walks them again, so freezing would save nothing and would
keep their cycles from being freed."""

from __future__ import annotations

import gc

import pytest

from paraplan.solver import search as search_module
from paraplan.solver.collector import MIDDLE_THRESHOLD, YOUNG_THRESHOLD


class PlantedFault(Exception):
    pass


def test_a_failing_search_restores_the_thresholds_and_freezes_nothing(monkeypatch):
    seen = []

    def tiers(*args, **kwargs):
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        raise PlantedFault  # the search fails halfway: the settings must still come back
    monkeypatch.setattr(search_module.memory_tiers, "search_tiers", tiers)
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    try:
        gc.set_threshold(700, 10, 10)  # CPython's defaults
        with pytest.raises(PlantedFault):
            search_module.search(None)
        assert seen == [((YOUNG_THRESHOLD, MIDDLE_THRESHOLD, 10), frozen)]
        assert gc.get_threshold() == (700, 10, 10)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.set_threshold(*before)


def test_a_callers_higher_thresholds_are_kept(monkeypatch):
    seen = []
    monkeypatch.setattr(search_module.memory_tiers, "search_tiers",
                        lambda *args, **kwargs: seen.append(gc.get_threshold()))
    before = gc.get_threshold()
    try:
        gc.set_threshold(YOUNG_THRESHOLD * 2, MIDDLE_THRESHOLD * 2, 5)
        search_module.search(None)
        assert seen == [(YOUNG_THRESHOLD * 2, MIDDLE_THRESHOLD * 2, 5)]
        assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, MIDDLE_THRESHOLD * 2, 5)
    finally:
        gc.set_threshold(*before)
