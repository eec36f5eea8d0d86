"""Commands on an asymmetric pipeline's plan (a data-parallel degree per stage, issue 32 with
33): `memory`, `report`, `verify`, `replan`, `--top`, `--sensitivity` and `export --to layout`
read it as they read a symmetric plan, each against a number derived apart from
cost/asymmetric.py's own code path."""

from __future__ import annotations

import json

import pytest
import yaml
from test_asymmetric_pipelines import INSTANCE

from paraplan.cost.class_coefficients import class_coefficients
from paraplan.cost.memory_breakdown import CATEGORIES, class_categories_bytes
from paraplan.cost.plan_specs import Plan, ReplicaClass
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import load_plan
from paraplan.cost.readers.scenarios import load_event
from paraplan.cost.simulate import simulate
from paraplan.solver.commands.cli import EXIT_BAD_INPUT, main
from paraplan.solver.dynamic import replan
from paraplan.solver.exhaustive import exhaustive

ON = "  asymmetric_pipelines: true\n"
LONE = "    - {name: lone, gpu: toy, nodes: 1, gpus_per_node: 1, intra_node_gbytes_per_s: 200, nic_gbit_per_s: 200}\n"
# the same cluster with a second pair in place of the lone GPU: 2 + 2 GPUs of one toy type
TWO_PAIRS = INSTANCE.replace(LONE, LONE.replace("lone", "pair2").replace("gpus_per_node: 1", "gpus_per_node: 2"))


def _files(tmp_path, text: str = INSTANCE + ON) -> tuple[str, str]:
    """The instance file and its `plan -o` file (the asymmetric optimum on the 2 + 1 GPUs:
    stage 0 on the lone GPU, degree 1; stage 1 on the pair, degree 2; layers [1, 3])."""
    inst, plan = tmp_path / "inst.yaml", tmp_path / "plan.yaml"
    inst.write_text(text)
    assert main(["plan", str(inst), "-o", str(plan)]) == 0
    return str(inst), str(plan)


def _memory_json(capsys, inst: str, plan: str) -> dict:
    capsys.readouterr()
    assert main(["memory", inst, "--plan", plan, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _symmetric_categories(inst, plan: Plan) -> list[dict[str, float]]:
    """The symmetric route: class_coefficients + class_categories_bytes of one class."""
    coeffs = class_coefficients(inst, inst.cluster, plan.outer, reserve_bytes=inst.search.memory_reserve_bytes,
                                num_micro_batches=tuple(k.num_micro_batches for k in plan.classes))
    return class_categories_bytes(inst, plan, coeffs)[0]


def test_memory_per_stage_against_the_symmetric_pipelines(tmp_path, capsys):
    # The 2 + 1 plan: M = 24 / 2 = 12 micro-batches; stage 0 (lone, d 1) runs m_0 = 12, stage
    # 1 (pair, d 2) m_1 = 6 per rank. In flight (1F1B keeps one micro-batch per rank
    # downstream): h_0 = ceil((1 + 2) / 1) = 3, h_1 = ceil(2 / 2) = 1.
    # Stage 1 is stage 1 of the symmetric pipeline [lone, pair] with 2 replicas x 6
    # micro-batches: its state sharded over the same 2 ranks (zero 0: not sharded), and 1F1B's
    # min(6, pp - 1) = 1 in flight, so every category is that plan's.
    # Stage 0 against the one-replica pipeline x 12: the same state (one rank), 1F1B's
    # min(12, pp - 0) = 2 in flight where the asymmetric rank holds 3: activations x 3 / 2, the
    # rest (weights, grads, optimizer, logits, workspace, runtime on one rank) equal.
    path, out = _files(tmp_path)
    inst = load_instance(path)
    got = _memory_json(capsys, path, out)["stages"]
    assert [(s["stage"], s["group"]) for s in got] == [(0, "lone"), (1, "pair")]

    def sym(replicas: int, m: int) -> list[dict[str, float]]:
        return _symmetric_categories(inst, Plan(tp=1, micro_batch=2, family="stage", classes=(ReplicaClass(
            replicas=replicas, stage_groups=(1, 0), num_micro_batches=m, layers_per_stage=(1, 3),
            full_recompute_layers=(0, 0)),)))

    one, two = sym(1, 12)[0], sym(2, 6)[1]
    for cat in CATEGORIES:
        assert got[1]["categories_bytes"][cat] == pytest.approx(two[cat], rel=1e-12, abs=1e-3)
        want = one[cat] * (1.5 if cat == "activations" else 1.0)
        assert got[0]["categories_bytes"][cat] == pytest.approx(want, rel=1e-12, abs=1e-3)
    assert one["activations"] > 0  # the factor is tested on a real number
    # each stage's categories sum to simulate's memory of that stage
    bd = simulate(inst, load_plan(out, inst))
    for s, row in zip(bd.classes[0].stages, got):
        assert sum(row["categories_bytes"].values()) == pytest.approx(row["total_bytes"], rel=1e-12)
        assert row["total_bytes"] == pytest.approx(row_mem := s.mem_bytes, rel=1e-12) and row_mem > 0


def test_equal_degrees_are_the_symmetric_plans_memory(tmp_path, capsys):
    # 2 + 2 GPUs: the asymmetric pipeline with degrees [2, 2] is the symmetric plan of 2
    # replicas of [pair, pair2] x 6 micro-batches (h_s = ceil((4 - 2 s) / 2) = 2 - s = 1F1B's
    # min(m, pp - s)): `memory` of the two plan files agree category by category, and
    # `simulate` on the time
    inst = tmp_path / "inst.yaml"
    inst.write_text(TWO_PAIRS)
    base = {"tp": 1, "micro_batch": 2, "zero": 0, "family": "stage"}
    cls = {"stages": ["pair", "pair2"], "layers_per_stage": [2, 2], "full_recompute_layers": [0, 0]}
    files = []
    for name, extra in (("asym", {"replicas": 1, "num_micro_batches": 12, "stage_dp": [2, 2]}),
                        ("sym", {"replicas": 2, "num_micro_batches": 6})):
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump({"plan": {**base, "classes": [{**cls, **extra}]}}))
        files.append(str(f))
    asym, sym = (_memory_json(capsys, str(inst), f) for f in files)
    assert asym["plan"]["classes"][0]["stage_dp"] == [2, 2]
    for a, s in zip(asym["stages"], sym["stages"], strict=True):
        for cat in CATEGORIES:
            assert a["categories_bytes"][cat] == pytest.approx(s["categories_bytes"][cat], rel=1e-12, abs=1e-3)
    loaded = load_instance(str(inst))
    ta, ts = (simulate(loaded, load_plan(f, loaded)).iter_time_s for f in files)
    assert ta == pytest.approx(ts, rel=1e-12)


def test_verify_searches_the_space_exhaustive_search_lists(tmp_path, capsys):
    # CP-SAT and MILP search the symmetric space; with asymmetric_pipelines verify joins the
    # asymmetric search to each, as `plan` does, so the three agree on the union's optimum:
    # the asymmetric pipeline's 10.013 ms (tests/mixed/test_asymmetric_pipelines.py, seed 3's
    # instance), not the symmetric 10.270 ms
    path = tmp_path / "inst.yaml"
    path.write_text(INSTANCE + ON)
    capsys.readouterr()
    assert main(["verify", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["methods"]
    assert {r["method"] for r in rows} == {"cpsat", "milp", "exhaustive"}
    for r in rows:
        assert r["iter_time_s"] == pytest.approx(10.013e-3, abs=1e-6)


def test_replan_searches_both_kinds(tmp_path):
    # the pair's NICs halved: the new plan is the optimum of both spaces on the changed
    # network, which exhaustive search of that network finds; the running asymmetric plan is in
    # that space, so the new plan is never slower than staying
    path, out = _files(tmp_path)
    event = tmp_path / "ev.yaml"
    event.write_text("event:\n  name: pair-nic-halved\n  changes:\n    - {group: pair, nic_scale: 0.5}\n"
                     "  remaining_hours: 10\n")
    inst = load_instance(path)
    ev, remaining_s, remaining_it = load_event(str(event), inst)
    r = replan(inst, load_plan(out, inst), ev, remaining_s, remaining_it)
    changed = inst.with_cluster(ev.cluster)
    assert r.new.objective_s == pytest.approx(exhaustive(changed).objective_s, rel=1e-12)
    assert r.new.objective_s <= r.current_time_s * (1 + 1e-12)


def test_layout_gives_each_stage_its_ranks(tmp_path, capsys):
    # ranks by group in the instance's order: pair 0-1, lone 2. Stage 0 on lone, degree 1:
    # rank [2, 2], 12 micro-batches; stage 1 on pair, degree 2 at tp 1: ranks [0, 1], 12 / 2 =
    # 6 micro-batches per rank; every GPU used once
    path, out = _files(tmp_path)
    capsys.readouterr()
    assert main(["export", out, "--instance", path, "--to", "layout", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["layout"]["classes"][0]
    assert c["ranks"] == [[[2, 2], [0, 1]]]
    assert [(s["data_parallel"], s["micro_batches_per_rank"]) for s in c["stages"]] == [(1, 12), (2, 6)]


def test_what_stays_refused_names_its_reason(tmp_path, capsys):
    path, out = _files(tmp_path)
    capsys.readouterr()
    # a framework export: none of Megatron-LM, torchtitan, DeepSpeed places stages by GPU type
    assert main(["export", out, "--instance", path, "--to", "megatron"]) == EXIT_BAD_INPUT
    assert "different GPU types" in capsys.readouterr().err


def test_the_replay_with_equal_degrees_is_the_symmetric_replay(tmp_path):
    # degrees [2, 2] on 2 + 2 GPUs: micro-batch j runs on rank j mod 2 of both stages, so each
    # rank pair is one replica of the symmetric plan (2 replicas x 6 micro-batches): rank 0's
    # events are that replica's, micro-batch 2i in place of i
    from paraplan.cost import timeline
    path = tmp_path / "inst.yaml"
    path.write_text(TWO_PAIRS)
    inst = load_instance(str(path))
    cls = dict(stage_groups=(0, 1), layers_per_stage=(2, 2), full_recompute_layers=(0, 0))
    asym = Plan(tp=1, micro_batch=2, family="stage",
                classes=(ReplicaClass(replicas=1, stage_dp=(2, 2), num_micro_batches=12, **cls),))
    sym = Plan(tp=1, micro_batch=2, family="stage", classes=(ReplicaClass(replicas=2, num_micro_batches=6, **cls),))
    (a,), (s,) = timeline.plan_events(inst, asym, 0.0), timeline.plan_events(inst, sym, 0.0)
    key = lambda e: (e.stage, e.kind, e.start_s, e.end_s)  # noqa: E731
    assert len(a) == len(s) > 0
    for ea, es in zip(sorted(a, key=key), sorted(s, key=key)):
        assert (ea.stage, ea.kind) == (es.stage, es.kind)
        assert (ea.start_s, ea.end_s) == pytest.approx((es.start_s, es.end_s), rel=1e-12, abs=1e-15)
        assert ea.micro_batch == (None if es.micro_batch is None else 2 * es.micro_batch)


def test_report_draws_each_stages_ranks(tmp_path, capsys):
    # the optimum of the 2 + 1 instance and, on the symmetric instance, the same plan as the
    # user's: stage 0 is 1 rank of 12 micro-batches, stage 1 2 ranks of 24 / 2 / 2 = 6
    path, out = _files(tmp_path)
    sym = tmp_path / "sym.yaml"
    sym.write_text(INSTANCE)
    for args in ([path], [str(sym), "--plan", out]):
        page = tmp_path / "r.html"
        assert main(["report", *args, "-o", str(page)]) == 0
        text = page.read_text()
        assert "data-parallel ranks/stage [1,2]" in text
        if len(args) == 1:  # the optimum's own Gantt
            assert "stage 0: 1 rank of 12 micro-batches, stage 1: 2 ranks of 6 micro-batches" in text


def test_sensitivity_replans_over_both_kinds(tmp_path):
    # each moved instance's best is the optimum of both spaces, which exhaustive search of
    # that instance lists (it joins exhaustive_asymmetric); the asymmetric plan stays optimal
    # wherever its own time is that best
    from paraplan.solver.sensitivity import moved_instances, sensitivity
    path, out = _files(tmp_path)
    inst = load_instance(path)
    plan = load_plan(out, inst)
    cases = sensitivity(inst, plan, "nominal", "cpsat", 60.0, 1, lambda p, i: "")["cases"]
    moved = {(name, end): m for name, end, _, m in moved_instances(inst)}
    assert len(cases) == len(moved) > 0
    for c in cases:
        best = exhaustive(moved[c["parameter"], c["end"]]).objective_s
        assert c["best_iter_time_s"] == pytest.approx(best, rel=1e-12)
        assert c["stays_optimal"] == (c["plan_iter_time_s"] <= best * (1 + 1e-9))


def test_top_ranks_both_spaces(tmp_path):
    # --top 4 on the 2 + 1 GPUs: first the asymmetric optimum (10.013 ms, the union's optimum
    # by exhaustive search), then the symmetric space's 3 best in its own order (10.270,
    # 10.336 and 10.653 ms); the asymmetric pipeline of degrees [1, 1, 1] on [pair, pair, lone]
    # is the symmetric 1-replica pipeline (its twin, 10.336 ms) and is listed once
    from paraplan.solver.solve import solve
    path = tmp_path / "inst.yaml"
    path.write_text(INSTANCE + ON)
    sym_path = tmp_path / "sym.yaml"
    sym_path.write_text(INSTANCE)
    inst, sym = load_instance(str(path)), load_instance(str(sym_path))
    got = solve(inst, winners=4).ranked
    want = solve(sym, winners=3).ranked
    assert got[0].plan.classes[0].stage_dp == (1, 2)
    assert got[0].objective_s == pytest.approx(exhaustive(inst).objective_s, rel=1e-12)
    assert got[0].objective_s == pytest.approx(10.013e-3, abs=1e-6)
    assert [r.plan for r in got[1:]] == [r.plan for r in want]
    assert [r.objective_s for r in got[1:]] == pytest.approx([r.objective_s for r in want], rel=1e-12)
    assert len({r.plan for r in got}) == 4
    # --within 3: at most 10.013 x 1.03 = 10.313 ms: the asymmetric optimum and the 10.270 ms class
    close = solve(inst, winners=4, within_pct=3.0).ranked
    assert [r.plan for r in close] == [got[0].plan, got[1].plan]
