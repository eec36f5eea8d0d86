"""Test oracles: the full readings the tests check the product's fast readings against.

Each was a product function that only tests called (issue 32); it moved here unchanged, so it
stays an independent reading of the same number. One module per source area; an oracle may
import its source module's private helpers (those stay in the product, which uses them).
The product never imports from tests/ (tests/test_oracles_stay_in_tests.py)."""
