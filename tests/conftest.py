"""Puts tests/ on sys.path (pytest prepend mode) so test files share tests/randinst.py; runs the
tests that share a solve across files, then the longest modules, first."""

from __future__ import annotations

# The modules holding the suite's longest tests (--durations on the 2-core test machine, issue 32:
# 30 s to 2.5 min each), longest first. pytest-xdist's worksteal scheduling (pyproject.toml)
# starts each worker on its half of the collected order and lets a worker that runs dry take the
# back half of the other's queue: a long test collected last (the validation/ folder sorts last)
# could still be the one test left running at the end while the other worker idles; collected
# first, it runs beside the short tests and the run ends on short ones. Each module keeps its
# own order, so a module-scoped fixture is still built once per worker that runs the module.
LONGEST_FIRST = (
    "tests/mixed/test_many_types_agreement.py",
    "tests/validation/test_moe_fit.py",
    "tests/validation/test_crossval.py",
    "tests/partition/test_partition_solvers.py",
    "tests/formulations/test_dualpipe.py",
    "tests/mixed/test_all_options_agreement.py",
    # cases of 7-17 s of CPU (-n 0, issue 32): left in the middle of the collected order, one
    # could be the last test left running
    "tests/mixed/test_option_bound_admissible.py",
    "tests/mixed/test_stage_families.py",
    # the longest test of each, 5-7 s of CPU (-n 0, load 12-15, issue 32): the full-disk sweep,
    # the grown options on random mixed clusters, the bisection's partition split
    "tests/robustness/test_fuzz_hostile.py",
    "tests/mixed/test_mixed_agreement.py",
    "tests/mixed/test_batched_bounds.py",
)


def _group(item) -> str | None:
    """The item's xdist_group name (tests/bundled_plans.same_worker, or a module's own), or None."""
    mark = item.get_closest_marker("xdist_group")
    return None if mark is None else str(mark.args[0])


def pytest_collection_modifyitems(config, items):
    # Tests in several files that read one solve (tests/bundled_plans.py), and a module whose
    # not-vacuous check reads what each of its cases computed once per process, carry an
    # xdist_group mark: collected first, each group's tests side by side, they open the first
    # worker's half (worksteal; a steal takes the back of a queue, never its head), so the solve
    # is made once; with `--dist loadgroup` xdist itself keeps a group on one worker.
    groups: dict[str, int] = {}
    for item in items:
        if _group(item) is not None:
            groups.setdefault(_group(item), len(groups))
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def key(item) -> tuple[int, int]:
        if _group(item) is not None:
            return 0, groups[_group(item)]
        return 1, rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST))

    items.sort(key=key)  # stable: every other test keeps its collected order
