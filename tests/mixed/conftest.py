"""Fixtures of the mixed-cluster tests."""

from __future__ import annotations

import pytest
from agreement_support import pricing_in_small_chunks


@pytest.fixture
def small_price_chunks():
    """The planner prices 2 configurations at a time (agreement_support.pricing_in_small_chunks):
    the agreement tests' instances are smaller than one of its chunks."""
    with pricing_in_small_chunks():
        yield
