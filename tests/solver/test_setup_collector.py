"""The garbage collector's thresholds while paraplan plans (solver/collector.py): raised for a
search called from Python and restored after it, a caller's higher threshold kept."""

from __future__ import annotations

import gc
from pathlib import Path

from paraplan.cost.readers.instance import load_instance
from paraplan.solver import search as search_module
from paraplan.solver.collector import MIDDLE_THRESHOLD, YOUNG_THRESHOLD, fewer_collections

ROOT = Path(__file__).resolve().parents[2]


def test_raised_inside_and_restored_after():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # CPython's defaults
        with fewer_collections():
            assert gc.get_threshold() == (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, 10)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(YOUNG_THRESHOLD * 2, 5, 5)  # a caller's own, higher: kept
        with fewer_collections():
            assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, MIDDLE_THRESHOLD, 5)
        assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 5, 5)
    finally:
        gc.set_threshold(*before)


def test_a_search_runs_at_it_and_restores_it(monkeypatch):
    seen = []
    real = search_module.memory_tiers.search_tiers

    def tiers(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return real(*args, **kwargs)
    monkeypatch.setattr(search_module.memory_tiers, "search_tiers", tiers)
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        res = search_module.search(load_instance(ROOT / "instances/mixed/tiny-2types.yaml"), time_limit_s=30)
        assert res.plan is not None
        assert seen == [YOUNG_THRESHOLD]
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)
