"""Puts tests/ on sys.path (pytest prepend mode) so test files share tests/randinst.py; runs the
longest modules first."""

from __future__ import annotations

# The modules holding the suite's longest tests (--durations on the 2-core test machine, issue 32:
# 30 s to 2.5 min each), longest first. pytest-xdist's load scheduling hands each worker a block
# of consecutive tests and then the rest as workers free up, so a long test collected last (the
# validation/ folder sorts last) runs alone at the end while the other worker idles; collected
# first, it runs beside the short tests and the run ends on short ones. Each module keeps its
# own order, so a module-scoped fixture is still built once.
LONGEST_FIRST = (
    "tests/hetero/test_many_types_agreement.py",
    "tests/validation/test_moe_fit.py",
    "tests/validation/test_crossval.py",
    "tests/partition/test_partition_solvers.py",
    "tests/formulations/test_dualpipe.py",
    "tests/hetero/test_all_options_agreement.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def key(item) -> int:
        return rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST))

    items.sort(key=key)  # stable: every other test keeps its collected order
