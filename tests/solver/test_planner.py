"""Cross-checks of the exact planner: on seeded random small instances, CP-SAT, MILP and
exhaustive search (which enumerates every split and recompute count with no pruning) must find
the same optimal iteration time; every returned plan re-simulates to its objective and fits.

The expected optimum of each instance is derived independently, by the exhaustive search."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cost import units
from cost.loader import load_instance
from cost.simulate import simulate
from cost.specs import ClusterSpec, GpuSpec, Instance, JobSpec, Link, Mlp, ModelSpec, SearchSpace
from solver.exhaustive import exhaustive
from solver.planner import INFEASIBLE, OPTIMAL, plan
from solver.space import outer_configs, summarize

ROOT = Path(__file__).resolve().parents[2]
N_RANDOM = 36


def random_instance(seed: int) -> Instance:
    """Small models on 1-2 nodes of a GPU whose memory is small enough that memory binds:
    capacity is drawn around the model-state size, so recompute and splits matter."""
    rng = random.Random(seed)
    heads = rng.choice([4, 8])
    hidden = heads * rng.choice([32, 64])
    layers = rng.randint(2, 8)
    seq = rng.choice([128, 256, 512])
    model = ModelSpec(name=f"rand{seed}", layers=layers, hidden=hidden, heads=heads,
                      kv_heads=rng.choice([heads, heads // 2]), ffn=4 * hidden,
                      vocab=rng.choice([1000, 8000]), seq_len=seq,
                      mlp=rng.choice([Mlp.GELU, Mlp.SWIGLU]), tied_embeddings=rng.random() < 0.3)
    gpu = GpuSpec(name="toy", peak_flops_per_s=rng.choice([50e12, 300e12]),
                  hbm_bytes=rng.choice([1.05, 1.2, 1.5, 3.0]) * 2**30,
                  hbm_bw_bytes_per_s=1e12)
    gpn = rng.choice([2, 4])
    nodes = rng.choice([1, 2])
    cluster = ClusterSpec(gpu=gpu, nodes=nodes, gpus_per_node=gpn,
                          intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                          inter_node=Link(bw_bytes_per_s=rng.choice([3e9, 25e9]), latency_s=1e-5))
    gb = gpn * nodes * rng.choice([1, 2, 4])
    space = SearchSpace(micro_batch=(1, 2), virtual_stages=(1, 2), cp=(1, 2),
                        memory_reserve_bytes=0.0)
    return Instance(name=f"rand{seed}", model=model, cluster=cluster,
                    job=JobSpec(global_batch=gb), search=space)


def _small_enough(inst: Instance) -> bool:
    return summarize(inst, outer_configs(inst)).splits_total <= 300_000


SEEDS = [s for s in range(200) if _small_enough(random_instance(s))][:N_RANDOM]


def test_enough_random_instances():
    assert len(SEEDS) == N_RANDOM


@pytest.mark.parametrize("seed", SEEDS)
def test_cpsat_milp_exhaustive_agree(seed):
    inst = random_instance(seed)
    ex = exhaustive(inst)
    rc = plan(inst, backend="cpsat", time_limit_s=60)
    rm = plan(inst, backend="milp", time_limit_s=60)
    if ex.plan is None:
        assert rc.status == INFEASIBLE and rm.status == INFEASIBLE
        assert rc.plan is None and rm.plan is None
        return
    assert rc.status == OPTIMAL and rm.status == OPTIMAL
    tol = 1e-6 * ex.iter_time_s + rc.tolerance_s
    assert rc.iter_time_s == pytest.approx(ex.iter_time_s, abs=tol)
    assert rm.iter_time_s == pytest.approx(ex.iter_time_s, abs=tol)
    for res in (rc, rm):
        assert res.bound_s <= res.iter_time_s + tol
        bd = simulate(inst, res.plan, reserve_bytes=inst.search.memory_reserve_bytes)
        assert bd.iter_time_s == pytest.approx(res.iter_time_s, abs=tol)
        assert bd.fits


def test_random_instances_exercise_the_interesting_cases():
    """The agreement test is only strong if some optima use non-uniform splits or recompute
    and some instances are infeasible; check the seeds cover these."""
    kinds = set()
    for seed in SEEDS:
        inst = random_instance(seed)
        ex = exhaustive(inst)
        if ex.plan is None:
            kinds.add("infeasible")
            continue
        if len(set(ex.plan.layers_per_stage)) > 1:
            kinds.add("non-uniform split")
        if any(ex.plan.full_recompute_layers):
            kinds.add("recompute")
        if ex.plan.pp > 1:
            kinds.add("pipeline")
    assert {"infeasible", "recompute", "pipeline"} <= kinds


def test_model_that_fits_nowhere_reports_infeasible_with_numbers():
    inst = load_instance(ROOT / "instances" / "tiny-gpt-8xA100.yaml")
    tiny_gpu = GpuSpec(name="toy-256MiB", peak_flops_per_s=1e14, hbm_bytes=256 * 2**20,
                       hbm_bw_bytes_per_s=1e12)
    from dataclasses import replace
    inst = replace(inst, cluster=replace(inst.cluster, gpu=tiny_gpu))
    res = plan(inst, backend="cpsat")
    assert res.status == INFEASIBLE and res.plan is None
    assert "GiB" in res.reason and "toy-256MiB" in res.reason


def test_time_limited_run_never_claims_optimal():
    inst = load_instance(ROOT / "instances" / "gpt3-175b-1024xA100.yaml")
    res = plan(inst, backend="cpsat", time_limit_s=1e-9)
    assert res.status != OPTIMAL
    if res.plan is not None:
        assert res.bound_s < res.iter_time_s


def test_bundled_instances_plan_and_resimulate():
    for name in ("tiny-gpt-8xA100", "small-gpt-16xA100"):
        inst = load_instance(ROOT / "instances" / f"{name}.yaml")
        res = plan(inst, backend="cpsat")
        assert res.status == OPTIMAL
        assert res.breakdown.iter_time_s == pytest.approx(res.iter_time_s, rel=1e-9, abs=res.tolerance_s)
