"""A homogeneous cluster is a one-group mixed cluster, space for space (issue 12).

For every bundled homogeneous instance and every random homogeneous agreement instance
(tests/robustness/test_agreement.py's seeds), the class space of the instance re-written as a
one-group mixed cluster (cost/hetero_loader.homogeneous_as_hetero; solver/hetero_space.py) must
have exactly the homogeneous space's outer configurations (solver/space.py) and the same number
of complete plans, counted as each planner reports it (solver/planner.space_summary: with
per-operator partitions every outer x every layer plan). The reference is the homogeneous space
itself, enumerated independently of the class space's code; the two share only the rules moved
to one implementation (cost/space_rules.py, solver/space.capped_micro_batches and
micro_batch_lower_bound_parts), mixture-of-experts instances included (ep > 1 in both).

Equal spaces are what lets homogeneous instances be planned by the class planner: the optimum
and plan equality over the bundled instances is tests/solver/test_one_group_equals_homogeneous.py;
here it is checked on random instances whose homogeneous optimum runs fewer micro-batches than
pipeline stages, which the class space refused before (a lone class now runs the count the batch
gives it), against CP-SAT, the MILP and exhaustive search on the class side.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from goldens.cases import BUNDLED
from randinst import random_instance
from robustness.test_agreement import SEEDS

from paraplan.cost.hetero_loader import homogeneous_as_hetero
from paraplan.cost.loader import load_instance
from paraplan.solver.hetero_exhaustive import hetero_exhaustive
from paraplan.solver.hetero_planner import plan_hetero
from paraplan.solver.hetero_space import hetero_outers, summarize
from paraplan.solver.planner import plan, space_summary
from paraplan.solver.space import outer_configs

ROOT = Path(__file__).resolve().parents[2]


def _bundled_params():
    return [rel for rel in BUNDLED if not rel.startswith("instances/hetero/")]


def _homogeneous_key(o) -> tuple:
    return (o.tp, o.cp, o.pp, o.dp, o.micro_batch, o.num_micro_batches, o.sequence_parallel,
            o.zero, o.virtual_stages, o.recompute, o.ep)


def _class_key(o, global_batch: int) -> tuple:
    (c,) = o.classes  # one group: one class, stage-wise (a replica-wise plan needs >= 2 groups)
    return (o.tp, o.cp, c.pp, c.replicas, o.micro_batch, global_batch // (o.micro_batch * c.replicas),
            o.sequence_parallel, o.zero, o.virtual_stages, o.recompute, o.ep)


def _assert_same_space(inst) -> None:
    homo = outer_configs(inst)
    het_inst = homogeneous_as_hetero(inst)
    uniform = inst.search.uniform_split  # the class planner's reading of it (plan_hetero)
    het = hetero_outers(het_inst, uniform=uniform)
    gb = inst.job.global_batch
    want = sorted(map(_homogeneous_key, homo))
    got = sorted(_class_key(o, gb) for o in het)
    # Compared as counts and a few examples, never as whole lists: on failure pytest diffs two
    # lists with difflib, untruncated when the CI variable is set, and on the DeepSeek-shaped
    # instance (thousands of outers) that diff ran past CI's 90 minutes.
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    same = len(want) == len(got) and not missing and not extra
    assert same, (
        f"{len(want)} homogeneous outers, {len(got)} class outers; {len(missing)} missing, e.g."
        f" {missing[:3]}; {len(extra)} extra, e.g. {extra[:3]}")
    assert summarize(het_inst, het, uniform).plans_total == space_summary(inst, homo).splits_total


@pytest.mark.parametrize("rel", _bundled_params())
def test_bundled_one_group_space_is_the_homogeneous_space(rel):
    _assert_same_space(load_instance(ROOT / rel))


def test_random_one_group_spaces_are_the_homogeneous_spaces():
    for seed in SEEDS:
        _assert_same_space(random_instance(seed, variant=True))


# Agreement seeds whose homogeneous optimum has fewer micro-batches than stages (found by the
# homogeneous planner at the commit that made the class space equal; re-checked below, so a
# change that moves them fails here rather than silently testing m >= pp).
FEW_MICRO_BATCH_SEEDS = (1014, 1019, 1020, 1034, 1045, 1059)


@pytest.mark.parametrize("seed", FEW_MICRO_BATCH_SEEDS)
def test_one_group_plans_fewer_micro_batches_than_stages_like_the_homogeneous_planner(seed):
    inst = random_instance(seed, variant=True)
    homo = plan(inst)
    assert homo.status == "optimal" and homo.plan.num_micro_batches < homo.plan.pp
    het_inst = homogeneous_as_hetero(inst)
    ex = hetero_exhaustive(het_inst)
    for backend in ("cpsat", "milp"):
        het = plan_hetero(het_inst, backend=backend)
        assert het.status == "optimal"
        tol = homo.tolerance_s + het.tolerance_s + 1e-9 * homo.iter_time_s
        assert het.objective_s == pytest.approx(homo.iter_time_s, abs=tol)
        assert ex.objective_s == pytest.approx(homo.iter_time_s, abs=tol)
        (c,) = het.plan.classes
        assert (het.plan.tp, het.plan.cp, len(c.stage_groups), c.replicas, het.plan.micro_batch,
                c.num_micro_batches, c.layers_per_stage) == (
            homo.plan.tp, homo.plan.cp, homo.plan.pp, homo.plan.dp, homo.plan.micro_batch,
            homo.plan.num_micro_batches, homo.plan.layers_per_stage)


@pytest.mark.parametrize("rel", ["instances/tiny-gpt-8xA100.yaml", "instances/small-gpt-16xA100.yaml",
                                 "instances/primepar/primepar-bloom-176b-32xV100.yaml"])
def test_plan_command_through_the_class_planner_gives_the_homogeneous_answer(rel, monkeypatch, capsys):
    """`paraplan plan --json` with the internal switch (solver/class_route.py) on and off: the
    same status, plan, space counts and, within the quantisation tolerance, the same time."""
    import json

    from paraplan.solver.commands.cli import main

    out = {}
    for switch in ("0", "1"):
        monkeypatch.setenv("PARAPLAN_CLASS_PLANNER", switch)
        assert main(["plan", str(ROOT / rel), "--json"]) == 0
        out[switch] = json.loads(capsys.readouterr().out)
    homo, het = out["0"], out["1"]
    assert het["status"] == homo["status"] == "optimal"
    assert het["plan"] == homo["plan"]
    for key in ("outer_configs", "candidates"):
        assert het["space"][key] == homo["space"][key], key
    tol = homo["tolerance_s"] + het["tolerance_s"] + 1e-9 * homo["iter_time_s"]
    assert het["iter_time_s"] == pytest.approx(homo["iter_time_s"], abs=tol)


def test_plan_routes_dense_models_through_the_class_planner(monkeypatch, capsys):
    """The default route (solver/class_route.routes): dense and MoE models, on any number of
    threads, through the class planner; PARAPLAN_CLASS_PLANNER=0/1 force
    either; any other value is refused in one line. `paraplan plan` on small-gpt takes the class
    route unless told otherwise, with the homogeneous route's answer."""
    import json

    from paraplan.cost.errors import InstanceError
    from paraplan.solver import class_route
    from paraplan.solver.commands.cli import main

    dense = load_instance(ROOT / "instances/small-gpt-16xA100.yaml")
    moe = load_instance(ROOT / "instances/mixtral-8x7b-64xH100.yaml")
    monkeypatch.delenv(class_route.SWITCH, raising=False)
    assert class_route.routes(dense) and class_route.routes(moe)
    monkeypatch.setenv(class_route.SWITCH, "0")
    assert not class_route.routes(dense)
    monkeypatch.setenv(class_route.SWITCH, "1")
    assert class_route.routes(moe) and class_route.routes(dense)
    monkeypatch.setenv(class_route.SWITCH, "yes")
    with pytest.raises(InstanceError, match="PARAPLAN_CLASS_PLANNER"):
        class_route.routes(dense)

    calls = []
    real = class_route.plan_as_one_group
    monkeypatch.setattr(class_route, "plan_as_one_group", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = {}
    for switch in (None, "0"):
        if switch is None:
            monkeypatch.delenv(class_route.SWITCH, raising=False)
        else:
            monkeypatch.setenv(class_route.SWITCH, switch)
        assert main(["plan", str(ROOT / "instances/small-gpt-16xA100.yaml"), "--json"]) == 0
        out[switch] = json.loads(capsys.readouterr().out)
    assert calls == [1]  # the default run only
    assert out[None]["plan"] == out["0"]["plan"] and out[None]["backend"] == out["0"]["backend"] == "dp"
    assert out[None]["space"] == {**out["0"]["space"], **{k: out[None]["space"][k] for k in
                                                           ("solved", "pruned_by_bound")}}
