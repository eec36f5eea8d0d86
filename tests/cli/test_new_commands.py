"""The commands and options added for issue 14: plan --top K, --search overrides, compare,
memory, --version, progress, simulate's exit status, sweep --dask-scheduler, bench's ratio."""

import io
import json
import itertools
from pathlib import Path

import numpy as np
import pytest
import yaml

from paraplan import instances
from paraplan.cost import memory, schedule
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.search import override_search
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.pipeline_split import chunk_problem
from paraplan.cost.memory_breakdown import CATEGORIES, stage_categories_bytes
from paraplan.solver.commands.cli import EXIT_BAD_INPUT, main
from paraplan.solver.solve import solve as plan
from paraplan.solver.planner import coefficient_table
from paraplan.solver.report.page import plan_coefficients
from paraplan.solver.solve import solve

INSTANCES = Path(instances.__file__).parent
TINY = str(INSTANCES / "tiny-gpt-8xA100.yaml")


def one_line_error(capsys, code, *needles):
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err, err


# --- plan --top K -----------------------------------------------------------------------------

def brute_force_ranking(inst):
    """Every outer configuration's best (split, recompute) by enumeration: the independent
    derivation of the top-K list."""
    best = []
    for c in coefficient_table(inst):
        p, v = c.pp, c.outer.virtual_stages
        e, l = c.outer.embedding_in_split, c.outer.loss_in_split
        vals = []
        for n in itertools.product(range(1, inst.model.layers + 1), repeat=p):
            # v equal chunks of slots per stage, the embedding / loss taking one where counted
            if sum(n) != inst.model.layers or chunk_problem(n, v, e, l):
                continue
            for r in itertools.product(*[range(k + 1) for k in n]):
                na, ra = np.array(n, float), np.array(r, float)
                if schedule.fits(c, na, ra):
                    vals.append(float(schedule.iteration_time_s(c, na, ra)))
        if vals:
            best.append(min(vals))
    return sorted(best)


def test_top_k_equals_brute_force_ranking():
    # the predicted time (objective mean), which brute_force_ranking ranks by: the default p90
    # scales each configuration by its trust band (pp 1 and pp 2 differ), which can reorder
    # near-equal plans (pp 2 with the embedding / loss slots entered the top six)
    inst = override_search(load_instance(TINY), {"tp": [1, 2], "pp": [1, 2], "zero": [0, 1],
                                                 "recompute": ["selective"], "micro_batch": [2, 4],
                                                 "objective": "mean"})
    ranking = brute_force_ranking(inst)
    res = solve(inst, "cpsat", winners=6)
    assert res.status == "optimal"
    got = [r.objective_s for r in res.ranked]
    assert got == pytest.approx(ranking[:6], rel=1e-6)
    assert len({r.plan.outer for r in res.ranked}) == 6  # distinct outer configurations
    assert got[0] == pytest.approx(plan(inst).iter_time_s, rel=1e-9)  # the planner's optimum
    within = solve(inst, "cpsat", winners=50, within_pct=2.0)
    expected = [t for t in ranking if t <= ranking[0] * 1.02 * (1 + 1e-9)]
    assert [r.objective_s for r in within.ranked] == pytest.approx(expected, rel=1e-6)


def test_top_k_output_and_bad_arguments(capsys):
    assert main(["plan", TINY, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "the 2 best plans" in out and "+0.00%" in out
    one_line_error(capsys, main(["plan", TINY, "--top", "0"]), "--top")
    one_line_error(capsys, main(["plan", TINY, "--within", "3"]), "--within", "--top")


# --- --search overrides -----------------------------------------------------------------------

def test_search_overrides_narrow_the_space(capsys):
    assert main(["plan", TINY, "--search", "tp=2", "--search", "pp=2", "--search", "zero=1",
                 "--json", "--quiet"]) == 0
    plan_out = json.loads(capsys.readouterr().out)["plan"]
    assert (plan_out["tp"], plan_out["pp"], plan_out["zero"]) == (2, 2, 1)


@pytest.mark.parametrize("arg, needles", [
    ("tpp=1", ("search.tpp", "did you mean 'tp'")),
    ("zero=7", ("search.zero",)),
    ("max_pp=1,2", ("search.max_pp", "one value")),
    ("tp", ("--search", "KEY=VALUE")),
    ("sequence_parallel=maybe", ("search.sequence_parallel",)),
])
def test_search_overrides_are_validated_like_the_yaml(capsys, arg, needles):
    one_line_error(capsys, main(["plan", TINY, "--search", arg]), "<--search>", *needles)


# --- simulate of a plan that does not fit ------------------------------------------------------

def test_simulate_exits_1_with_the_reason_when_the_plan_does_not_fit(capsys, tmp_path):
    inst_path = tmp_path / "small-gpu.yaml"
    data = yaml.safe_load(Path(TINY).read_text())
    data["gpu_types"] = {"Tiny-4GB": {"peak_tflops_bf16": 100, "hbm_gib": 4, "hbm_gbytes_per_s": 1000}}
    data["cluster"]["gpu"] = "Tiny-4GB"
    inst_path.write_text(yaml.safe_dump(data))
    plan_path = tmp_path / "p.yaml"
    plan_path.write_text(yaml.safe_dump({"plan": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 4,
                                                  "recompute": "none"}}))
    assert main(["simulate", str(inst_path), "--plan", str(plan_path)]) == 1
    err = capsys.readouterr().err
    assert "does not fit memory" in err and "stage 0 needs" in err and "Traceback" not in err


# --- compare and memory -------------------------------------------------------------------------

def test_compare_explains_the_difference(capsys, tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump({"plan": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 4, "zero": 1,
                                          "recompute": "none"}}))
    b.write_text(yaml.safe_dump({"plan": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2,
                                          "recompute": "selective"}}))
    assert main(["compare", str(a), str(b), "--instance", TINY]) == 0
    out = capsys.readouterr().out
    assert "x faster; why" in out and "B - A" in out


def test_comparison_parts_sum_to_the_time_difference():
    # exposed parts sum to each iteration time (cost/simulate.py), so their differences sum to
    # the difference of the two times
    from paraplan.cost.simulate import simulate
    from paraplan.solver.report.compare import compare
    inst = load_instance(TINY)
    pa = plan_from_mapping({"tp": 1, "pp": 1, "dp": 8, "micro_batch": 4, "recompute": "none"}, inst)
    pb = plan_from_mapping({"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2, "recompute": "selective"}, inst)
    a, b = simulate(inst, pa), simulate(inst, pb)
    c = compare(a, b)
    assert sum(d.diff_s for d in c.parts) == pytest.approx(b.iter_time_s - a.iter_time_s, rel=1e-9)
    assert c.speedup == pytest.approx(max(a.iter_time_s, b.iter_time_s) / min(a.iter_time_s, b.iter_time_s))


def test_memory_categories_match_their_formulas():
    # tp=2, pp=2, dp=2, zero=1, Megatron: weights 2 B/param, grads 4 B/param unsharded,
    # optimizer 12 B/param over dp=2 (ZeRO-1); the runtime and logits terms are cost/memory.py's
    inst = load_instance(TINY)
    p = plan_from_mapping({"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2, "recompute": "selective",
                           "zero": 1}, inst)
    c = plan_coefficients(inst, p)
    cats = stage_categories_bytes(inst, p, c)
    total = schedule.stage_mem_bytes(c, np.array(p.layers_per_stage, float),
                                     np.array(p.full_recompute_layers, float))
    for s, cs in enumerate(cats):
        assert set(cs) == set(CATEGORIES)
        assert sum(cs.values()) == pytest.approx(total[s], rel=1e-9)
        assert cs["optimizer"] == pytest.approx(cs["weights"] * (12 / 2) / 2, rel=1e-9)
        assert cs["grads"] == pytest.approx(cs["weights"] * 4 / 2, rel=1e-9)
        assert cs["runtime"] == memory.runtime_bytes(2, 1, 2, 2)
        assert cs["workspace"] > 0
    assert cats[0]["logits"] == 0 and cats[1]["logits"] > 0


def test_memory_command(capsys, tmp_path):
    pf = tmp_path / "p.yaml"
    pf.write_text(yaml.safe_dump({"plan": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2,
                                           "recompute": "selective"}}))
    assert main(["memory", TINY, "--plan", str(pf)]) == 0
    out = capsys.readouterr().out
    for k in CATEGORIES + ("total", "usable capacity"):
        assert k in out


# --- small things ---------------------------------------------------------------------------------

def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("paraplan ")


def test_sweep_cluster_spelling_is_deprecated(capsys):
    from paraplan.solver.commands.cli import build_parser
    args = build_parser().parse_args(["sweep", "s.yaml", "--cluster", "tcp://h:1"])
    assert args.dask_scheduler == "tcp://h:1" and "deprecated" in capsys.readouterr().err
    args = build_parser().parse_args(["sweep", "s.yaml", "--dask-scheduler", "tcp://h:1"])
    assert args.dask_scheduler == "tcp://h:1"


def test_bench_ratio_is_never_0x():
    from paraplan.solver.bench.ladder import ratio_text
    assert ratio_text(0.42) == "0.42x" and ratio_text(3603.2) == "3,603x" and ratio_text(1.5) == "1.5x"


def test_progress_line_and_printer():
    from paraplan.solver.progress import Printer, search_status

    class Res:
        solved, pruned_by_memory, priced, outer_configs = 3, 2, 5, 40
    line = search_status(Res, 2.0, [1.5, 1.8])
    # bound = min(incumbent, next bound, open bounds) = 1.5; gap = (2 - 1.5) / 2 = 25%
    assert "5/40 priced" in line and "bound 1.500 s" in line and "gap 25.00%" in line
    buf = io.StringIO()
    pr = Printer(buf, tty=True)
    pr("first")
    pr.done()
    assert buf.getvalue().startswith("\r[") and buf.getvalue().endswith("\r")


def test_top_k_writes_each_plan_with_output(tmp_path, capsys):
    # -o with --top K was silently ignored; it now writes plan k to <stem>-k<suffix>, each a
    # plan file with its instance, as plan -o writes one
    out = tmp_path / "plans.yaml"
    assert main(["plan", str(INSTANCES / "small-gpt-16xA100.yaml"), "--top", "2", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    for k in (1, 2):
        path = tmp_path / f"plans-{k}.yaml"
        assert path.is_file() and f"wrote {path}" in text
        written = yaml.safe_load(path.read_text())
        assert written["instance"]["name"] == "small-gpt-16xA100" and written["plan"]["dp"] >= 1


def test_top_k_refuses_sensitivity(capsys):
    assert main(["plan", TINY, "--top", "2", "--sensitivity"]) == EXIT_BAD_INPUT
    assert "--sensitivity" in capsys.readouterr().err


def _tiny_moe(tmp_path, imbalance=None, search=None) -> str:
    """tiny-gpt with 8 experts of top-2 in every layer (a synthetic MoE, small enough that every
    --sensitivity re-solve takes a fraction of a second)."""
    raw = yaml.safe_load(Path(TINY).read_text())
    raw["model"].update(mlp="swiglu", moe={"experts": 8, "top_k": 2, "expert_ffn": 2048})
    if imbalance is not None:
        raw["model"]["moe"]["imbalance"] = imbalance
    if search is not None:
        raw["search"] = search
    path = tmp_path / "tiny-moe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("ep", [1, 8])
def test_sensitivity_moves_the_moe_imbalance_over_its_range(tmp_path, capsys, ep):
    # cost/moe.py: the imbalance multiplies the busiest rank's routed tokens only when ep > 1
    # (with ep = 1 every rank runs every expert on its own tokens), so the plan's time at the
    # range's ends (1.0 and 1.5) differs exactly when the plan shards the experts
    path = _tiny_moe(tmp_path, search={"ep": [ep]})
    assert main(["plan", path, "--sensitivity", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {c["end"]: c for c in out["sensitivity"]["cases"] if c["parameter"] == "model.moe.imbalance"}
    # the range covers the imbalance the published forced/dropless pairs imply: 1.07 (Mixtral
    # 8x22B) to 2.13 (Qwen3-235B at 128k), cost/published/moe.yaml imbalance_default.range
    assert {e: c["value"] for e, c in rows.items()} == {"low": 1.0, "high": 2.2}
    assert out["plan"].get("ep", 1) == ep  # the plan omits ep = 1
    lo, hi = rows["low"]["plan_iter_time_s"], rows["high"]["plan_iter_time_s"]
    assert (hi > lo) if ep > 1 else (hi == lo)
    # the default 1.1 lies between: the plan's own time
    assert lo <= out["iter_time_s"] <= hi


@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
def test_sensitivity_skips_the_imbalance_end_the_model_already_has(tmp_path, capsys):
    assert main(["plan", _tiny_moe(tmp_path, imbalance=2.2), "--sensitivity", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "model.moe.imbalance low (1)" in text and "model.moe.imbalance high" not in text


def test_dense_models_get_no_imbalance_case(capsys):
    assert main(["plan", TINY, "--sensitivity", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(c["parameter"] != "model.moe.imbalance" for c in out["sensitivity"]["cases"])
