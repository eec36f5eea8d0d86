"""Asymmetric pipelines (a data-parallel degree per stage, issue 33): the one search
(solver/search.py, each pipeline a node priced by solver/asymmetric_search.py) over the
pipelines alone against exhaustive search of the same space
(solver/exhaustive.exhaustive_asymmetric), and against the symmetric planner's optimum."""

from __future__ import annotations

import dataclasses
import math

import pytest
from randinst import mixed_family_instance

from oracles.cost import quantile_factor
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import load_plan, plan_from_mapping
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Framework
from paraplan.cost.trust import Features, distance_level, objective_factor_of, published_residuals
from paraplan.solver.commands.cli import main
from paraplan.solver.exhaustive import exhaustive, exhaustive_asymmetric
from paraplan.solver.memory_tiers import plan_tier
from paraplan.solver.search import _search_tier, search
from paraplan.solver.solve import solve


def _pipelines(inst, ceiling_s: float | None = None):
    """The one search over the asymmetric pipelines alone (no symmetric family listed): its
    result and the value it minimised (inf where no plan); `ceiling_s`, a plan in hand
    outside the search (one memory tier: `mean`), which prunes from the start."""
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, asymmetric_pipelines=True))
    res = (search(inst, "dp", families=()) if ceiling_s is None
           else _search_tier(inst, "dp", families=(), ceiling_s=ceiling_s))
    return res, (res.quantile_s if res.plan is not None else math.inf)


def _framework(inst, fw):
    return inst if fw is None else dataclasses.replace(inst, job=dataclasses.replace(inst.job, framework=fw))


# the random instances' toy GPUs named as two fitted dies: a toy die is validated by no row, so
# every asymmetric pipeline (pp > 1, the unknown release, the die) is at distance level 3 and
# one factor values them all; on these dies the factor moves with the plan's memory fill (on
# 1-8 GPUs the fullest published row fills 94.9% of HBM: within it 1.064, beyond it 1.120 under
# megatron), and the optima of seeds 8, 13, 20 and 24 fill beyond it
FITTED_DIES = ("A100-SXM4-80GB", "H100-SXM5-80GB")


def _quantile(inst, objective):
    if objective == "mean":
        return inst
    groups = tuple(dataclasses.replace(g, gpu=dataclasses.replace(g.gpu, name=name))
                   for g, name in zip(inst.cluster.groups, FITTED_DIES))
    return dataclasses.replace(inst, cluster=dataclasses.replace(inst.cluster, groups=groups),
                               search=dataclasses.replace(inst.search, objective=objective))


# megatron (one --recompute-num-layers for every stage) and deepspeed (any count per stage);
# the predicted time (mean) and its 90th percentile under the model's out-of-sample errors
@pytest.mark.parametrize("objective", ["mean", "p90"])
@pytest.mark.parametrize("fw", [None, Framework.DEEPSPEED])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 7, 8, 10, 11, 13, 15, 18, 19, 20, 24])
def test_branch_and_bound_matches_exhaustive(seed, fw, objective):
    # exhaustive_asymmetric values each (split, recompute) row at its own factor, read from its
    # own memory fill; the search scales whole tiers and cuts by bounds
    inst = _quantile(_framework(mixed_family_instance(seed), fw), objective)
    got, value_s = _pipelines(inst)
    best_s, plan, _, _ = exhaustive_asymmetric(inst)
    assert value_s == pytest.approx(best_s, rel=1e-12)  # inf == inf where nothing fits
    if plan is not None:  # the search's plan re-simulates to its objective, and fits
        bd = simulate(inst, got.plan)
        factor = objective_factor_of(plan_tier(inst, got.plan), got.plan)
        assert (factor == 1.0) == (objective == "mean")
        assert bd.fits and bd.iter_time_s * factor == pytest.approx(value_s, rel=1e-12)


@pytest.mark.slow  # 5-11 s each on two cores: 120-792 pipelines priced
@pytest.mark.parametrize("seed", [6, 17])
def test_branch_and_bound_matches_exhaustive_larger(seed):
    inst = mixed_family_instance(seed)
    assert _pipelines(inst)[1] == pytest.approx(exhaustive_asymmetric(inst)[0], rel=1e-12)


def test_an_incumbent_prunes_without_changing_the_answer():
    inst = mixed_family_instance(10)
    free, free_s = _pipelines(inst)
    cut, cut_s = _pipelines(inst, ceiling_s=free_s * (1 + 1e-9))
    assert cut_s == free_s and cut.solved <= free.solved
    # a plan in hand no pipeline beats: nothing returned, proved by the bounds
    assert _pipelines(inst, ceiling_s=free_s * 0.5)[0].plan is None


def test_asymmetric_beats_every_symmetric_plan_on_seed_3():
    # 2 + 1 GPUs of one toy type (300 TFLOP/s, 3 GiB), 4 layers, batch 24: the symmetric
    # optimum over the whole declared space (mixed families included, by exhaustive search) is
    # a replica class of 2 on the pair beside 1 on the lone GPU, each holding the whole model,
    # 10.270 ms; the asymmetric pipeline puts 1 layer (and the embedding) on the lone GPU, d 1,
    # and 3 (and the output layer) on the pair as dp 2, each of its ranks 6 of the 12
    # micro-batches of 2: 10.013 ms, 2.5% faster
    inst = mixed_family_instance(3)
    sym = exhaustive(inst).objective_s
    got, value_s = _pipelines(inst)
    assert got.plan.classes[0].stage_dp == (1, 2) and got.plan.classes[0].layers_per_stage == (1, 3)
    assert sym == pytest.approx(10.270e-3, abs=1e-6) and value_s == pytest.approx(10.013e-3, abs=1e-6)


def test_equal_degree_optimum_is_a_symmetric_plan():
    # where no degree split pays (seed 8: 1 + 1 GPUs, a degree of 1 per stage is the only
    # one), the asymmetric optimum is the symmetric stage-wise pipeline's, which exhaustive
    # search of the symmetric space also finds
    inst = mixed_family_instance(8)
    got, value_s = _pipelines(inst)
    assert set(got.plan.classes[0].stage_dp) == {1}
    assert value_s == pytest.approx(exhaustive(inst).objective_s, rel=1e-12)


def test_one_search_keeps_the_symmetric_plan_on_a_tie():
    # seed 8 with the option on: the pipelines are nodes of the one search, counted among its
    # outer configurations beside the symmetric space's; its best pipeline (degrees 1, 1) is
    # the symmetric stage-wise plan, of the same value, and the tie rule keeps the symmetric
    # plan (as the symmetric space was kept when the pipelines were searched after it)
    from paraplan.solver.asymmetric_space import asymmetric_outers
    inst = mixed_family_instance(8)
    on = dataclasses.replace(inst, search=dataclasses.replace(inst.search, asymmetric_pipelines=True))
    sym, res = solve(inst), solve(on)
    assert res.outer_configs == sym.outer_configs + len(asymmetric_outers(on)) > sym.outer_configs
    assert not res.plan.classes[0].stage_dp and res.plan == sym.plan
    assert res.quantile_s == pytest.approx(_pipelines(inst)[1], rel=1e-12)


# The 2 + 1 GPUs of seed 3 as an instance file (toy GPUs: 300 TFLOP/s, 3 GiB, 1,000 GB/s; NVLink
# 100 GB/s per direction, 200 Gbit/s NICs, the group link at the slower NIC)
INSTANCE = """
name: asym-2plus1
model: {name: mix3, layers: 4, hidden: 512, heads: 8, ffn: 2048, vocab: 8000, seq_len: 512, mlp: gelu}
gpu_types:
  toy: {peak_tflops_bf16: 300, hbm_gib: 3, hbm_gbytes_per_s: 1000}
cluster:
  groups:
    - {name: pair, gpu: toy, nodes: 1, gpus_per_node: 2, intra_node_gbytes_per_s: 200, nic_gbit_per_s: 200}
    - {name: lone, gpu: toy, nodes: 1, gpus_per_node: 1, intra_node_gbytes_per_s: 200, nic_gbit_per_s: 200}
job: {global_batch: 24}
search:
  micro_batch: [1, 2]
  zero: [0, 1]
  virtual_stages: [1]
  cp: [1]
  tp: [1]
  objective: mean
  memory_reserve_gib: 0
"""


def _write(tmp_path, extra: str = "  asymmetric_pipelines: true\n", name: str = "inst.yaml") -> str:
    path = tmp_path / name
    path.write_text(INSTANCE + extra)
    return str(path)


def test_plan_writes_each_stages_degree_and_simulate_reprices_it(tmp_path, capsys):
    path, out = _write(tmp_path), tmp_path / "plan.yaml"
    assert main(["plan", path, "-o", str(out)]) == 0
    assert "data-parallel ranks/stage [1,2]; stages on [lone,pair]" in capsys.readouterr().out
    inst = load_instance(path)
    plan = load_plan(str(out), inst)
    c = plan.classes[0]
    assert (c.replicas, c.stage_dp, c.num_micro_batches, c.layers_per_stage) == (1, (1, 2), 12, (1, 3))
    res = solve(inst)  # the objective, proved; the plan re-priced from its file alone
    assert res.status == "optimal" and res.bound_s == res.objective_s
    assert simulate(inst, plan).iter_time_s == pytest.approx(res.objective_s, rel=1e-12)
    assert main(["simulate", path, "--plan", str(out)]) == 0
    # exhaustive search over the union of both spaces finds the same optimum
    assert exhaustive(inst).objective_s == pytest.approx(res.objective_s, rel=1e-12)


def test_the_option_is_off_by_default_and_the_symmetric_optimum_is_slower(tmp_path):
    sym = solve(load_instance(_write(tmp_path, extra="")))
    asym = solve(load_instance(_write(tmp_path, name="asym.yaml")))
    assert not any(c.stage_dp for c in sym.plan.classes)
    assert asym.objective_s < sym.objective_s  # 10.01 ms against 10.27 ms (the docs' example)


def test_under_p90_the_plan_is_valued_at_its_band(tmp_path, capsys):
    # The 2 + 1 toy GPUs with 6 layers and 1.5 GiB each, planned at the default objective, p90.
    # The pipeline [lone d 1: 2 layers | pair d 2: 4 layers] beats every symmetric plan at p90
    # as well as at the predicted time. Its factor, read as every plan's (the GPU types
    # of its stages, its ZeRO stage, cp, pp, the cluster's 3 GPUs): on 3 GPUs (band 1-8) no
    # published row runs pp > 1, the toy die or release core_v0.19.0, so it is 3 features from the
    # measured runs: distance level 3, the farthest, whose pool is the same at any memory fill.
    # The factor is exp(-r_10) of that pool's log errors (quantile_factor), and
    # p90 = predicted x factor: the value minimised, the objective line, and the upper end of
    # the 80% band that plan, simulate, report and --top print.
    path = tmp_path / "p90.yaml"
    path.write_text(INSTANCE.replace("  objective: mean\n", "").replace("layers: 4", "layers: 6")
                    .replace("hbm_gib: 3", "hbm_gib: 1.5") + "  asymmetric_pipelines: true\n")
    inst = load_instance(str(path))
    assert inst.search.objective == "p90"
    res = solve(inst)
    c = res.plan.classes[0]
    assert res.status == "optimal" and (c.stage_dp, c.layers_per_stage) == ((1, 2), (2, 4))
    f = Features(family="", framework="megatron", framework_version="core_v0.19.0", gpu="toy", num_gpus=3,
                 zero=res.plan.zero, cp=1, pp=2, precision="bf16", activations="stored")
    published = published_residuals()
    assert distance_level(f, published) == 3
    factor = quantile_factor(f, 0.90, published)
    assert res.objective_s == pytest.approx(simulate(inst, res.plan).iter_time_s, rel=1e-12)
    assert res.quantile_s == pytest.approx(res.objective_s * factor, rel=1e-12)
    assert res.bound_s == res.quantile_s
    p90_ms = f"{1e3 * res.quantile_s:.1f} ms"
    out = tmp_path / "plan.yaml"
    assert main(["plan", str(path), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "data-parallel ranks/stage [1,2]" in text
    assert f"objective   {p90_ms} per iteration at p90" in text  # one network: none named
    assert f".. {p90_ms} (10th-90th percentile" in text
    assert main(["simulate", str(path), "--plan", str(out)]) == 0
    assert f".. {p90_ms} (10th-90th percentile" in capsys.readouterr().out
    assert main(["report", str(path), "--plan", str(out), "-o", str(tmp_path / "r.html")]) == 0
    assert f".. {p90_ms}, 80%)" in capsys.readouterr().out
    assert main(["plan", str(path), "--top", "2"]) == 0
    top = capsys.readouterr().out.splitlines()
    first = next(line for line in top if line.startswith("1 "))
    assert "[1,2]" in first and f"{p90_ms} " in first
    # CP-SAT and the MILP (each joined with the branch and bound) and exhaustive search agree at p90
    assert main(["verify", str(path)]) == 0
    assert "AGREE" in capsys.readouterr().out


def test_p90_can_reverse_the_mean_choice(tmp_path):
    # The 2 + 1 GPUs of INSTANCE at p90: the asymmetric pipeline (pp 2: level 3, as above) is
    # valued 10.013 ms x its factor; the replica classes (pp 1 on every GPU: pp > 1 is not used,
    # one feature fewer, level 2) 10.270 ms x theirs, the smaller factor, and they win
    path = tmp_path / "p90.yaml"
    path.write_text(INSTANCE.replace("  objective: mean\n", "") + "  asymmetric_pipelines: true\n")
    inst = load_instance(str(path))
    res, published = solve(inst), published_residuals()
    f = Features(family="", framework="megatron", framework_version="core_v0.19.0", gpu="toy", num_gpus=3,
                 zero=1, cp=1, pp=1, precision="bf16", activations="stored")
    assert distance_level(f, published) == 2 and distance_level(dataclasses.replace(f, pp=2), published) == 3
    pipeline_s = 10.013e-3 * quantile_factor(dataclasses.replace(f, pp=2), 0.90, published)
    assert not any(c.stage_dp for c in res.plan.classes) and res.plan.zero == 1
    assert res.objective_s == pytest.approx(10.270e-3, abs=1e-6)
    assert res.quantile_s == pytest.approx(res.objective_s * quantile_factor(f, 0.90, published), rel=1e-12)
    assert res.quantile_s < pipeline_s


def test_the_key_needs_two_groups(tmp_path):
    lone = "    - {name: lone, gpu: toy, nodes: 1, gpus_per_node: 1, intra_node_gbytes_per_s: 200, nic_gbit_per_s: 200}\n"
    assert lone in INSTANCE
    path = tmp_path / "one.yaml"
    path.write_text(INSTANCE.replace(lone, "") + "  asymmetric_pipelines: true\n")
    with pytest.raises(InstanceError, match="needs two node groups"):
        load_instance(str(path))


def test_plan_file_errors_name_stage_dp(tmp_path):
    inst = load_instance(_write(tmp_path))
    plan = {"plan": {"tp": 1, "micro_batch": 2, "zero": 0, "classes": [
        {"replicas": 1, "stages": ["lone", "pair"], "num_micro_batches": 12,
         "layers_per_stage": [1, 3], "stage_dp": [1, 2, 2]}]}}
    with pytest.raises(InstanceError, match="stage_dp"):
        plan_from_mapping(plan, inst, "p.yaml")
    plan["plan"]["classes"][0]["stage_dp"] = [1, 2]
    plan["plan"]["zero"] = 1  # ZeRO shards each stage over its ranks: the lone GPU has one
    with pytest.raises(InstanceError, match="stage_dp"):
        plan_from_mapping(plan, inst, "p.yaml")


def test_count_outers_counts_what_is_listed():
    # before the batch rule (every degree divides M): seeds whose M is divided by every degree
    from paraplan.solver.asymmetric_space import _layouts, _modes, count_outers
    for seed in (0, 6, 10, 17):
        inst = mixed_family_instance(seed)
        listed = sum(len(modes) * len(list(_layouts(inst, used, dict(gtp))))
                     for (used, gtp), modes in _modes(inst).items())
        assert count_outers(inst)[0] == listed


def test_a_large_space_is_refused_naming_the_key():
    # Llama-3 70B on 32 A100 + 32 H100 at tp 1 to 8: billions of degree splits
    inst = load_instance("instances/mixed/llama3-70b-32xA100-32xH100.yaml")
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, asymmetric_pipelines=True,
                                                                 objective="mean"))
    with pytest.raises(InstanceError, match="asymmetric_pipelines"):
        search(inst, families=())
