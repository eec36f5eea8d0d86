"""`paraplan plan --top K [--within PCT]` on node groups: the one search with K winners
(solver/search.Winners), whose bar is the K-th best instead of the best (issue 32).

The reference is the same search asked for more winners than there are configurations: its bar
then stays infinite, so no bound, cutoff or probe prunes anything and every configuration is
solved exactly; that ranking's first entry is checked against exhaustive search, which shares
none of the branch and bound. --top K must be its first K entries, and --within PCT those of
them at most PCT% slower than the best.
"""

import json

import pytest

from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.search import override_search
from paraplan.solver.commands.cli import main
from paraplan.solver.commands.schema import validate
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search

MIXED = "instances/mixed/tiny-2types.yaml"
# 24 outer configurations (tp 4 or 8 per group, zero 1, sp on, 2 recompute modes, stage- and
# replica-wise classes): the unpruned ranking takes under a second
NARROW = {"zero": [1], "sequence_parallel": [True]}


@pytest.fixture(scope="module")
def ranking():
    inst = override_search(load_instance(MIXED), NARROW)
    every = search(inst, "cpsat", 120.0, winners=10_000, resimulate=False)
    assert every.status == "optimal" and every.solved == every.outer_configs == len(every.ranked)
    return inst, [val for val, _ in every.ranked]


def test_top_k_is_the_prefix_of_the_unpruned_ranking(ranking):
    inst, values = ranking
    # the values ranked are what was minimised (search.objective: quantile_s)
    assert values[0] == pytest.approx(exhaustive(inst).quantile_s, rel=1e-9)
    top = search(inst, "cpsat", 120.0, winners=5, resimulate=False)
    assert [val for val, _ in top.ranked] == pytest.approx(values[:5], rel=1e-6)
    assert len({plan.outer for _, plan in top.ranked}) == 5  # distinct outer configurations
    assert top.solved < len(values)  # and it pruned: the bar did its work


def test_within_keeps_only_the_plans_close_to_the_best(ranking):
    inst, values = ranking
    close = search(inst, "cpsat", 120.0, winners=10, within_pct=8.0, resimulate=False)
    expected = [v for v in values[:10] if v <= values[0] * 1.08 * (1 + 1e-9)]  # 5 of them
    assert 1 < len(expected) < 10  # the percentage cuts inside the list
    assert [val for val, _ in close.ranked] == pytest.approx(expected, rel=1e-6)


def test_plan_top_on_node_groups_prints_schema_json(capsys):
    argv = ["plan", MIXED, "--search", "zero=1", "--search", "sequence_parallel=true"]
    assert main(argv + ["--json"]) == 0
    best_s = json.loads(capsys.readouterr().out)["objective_s"]
    assert main(argv + ["--top", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not validate(out, "plan --top")
    assert [p["rank"] for p in out["plans"]] == [1, 2, 3]
    assert out["plans"][0]["objective_s"] == pytest.approx(best_s, rel=1e-9)  # plan's own optimum
    assert main(["plan", MIXED, "--within", "3"]) == 2  # --within alone is still refused
    assert "needs --top K" in capsys.readouterr().err
