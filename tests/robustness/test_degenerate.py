"""Degenerate instances get a correct answer or a precise explanation, never a crash.

Expected answers are derived by hand in each test (or by exhaustive search where noted)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paraplan.cost.specs import Cluster, NodeGroup, GpuSpec, Instance, JobSpec, Link, Mlp, ModelSpec
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.solve import solve as plan
from paraplan.solver.planner import INFEASIBLE, OPTIMAL

A100 = GpuSpec(name="A100-like", peak_flops_per_s=312e12, hbm_bytes=80 * 2**30,
               hbm_bw_bytes_per_s=2.0e12)


def instance(layers=4, gpus_per_node=8, nodes=1, global_batch=8, gpu=A100) -> Instance:
    model = ModelSpec(name="m", layers=layers, hidden=1024, heads=16, kv_heads=16, ffn=4096,
                      vocab=32000, seq_len=1024, mlp=Mlp.GELU)
    cluster = NodeGroup(gpu=gpu, nodes=nodes, gpus_per_node=gpus_per_node,
                        intra_node=Link(bw_bytes_per_s=300e9, latency_s=5e-6),
                        inter_node=Link(bw_bytes_per_s=25e9, latency_s=1e-5))
    return Instance(name="degenerate", model=model, cluster=Cluster.of(cluster), job=JobSpec(global_batch=global_batch))


def _agrees_with_exhaustive(inst):
    res = plan(inst)
    ex = exhaustive(inst)
    assert res.status == OPTIMAL
    assert res.iter_time_s == pytest.approx(ex.iter_time_s, rel=1e-9, abs=res.tolerance_s)
    return res


def test_one_gpu_one_layer_batch_one():
    # the space has exactly one outer configuration: every degree 1, micro-batch 1
    res = _agrees_with_exhaustive(instance(layers=1, gpus_per_node=1, global_batch=1))
    p = res.plan
    assert (p.tp, p.pp, p.dp, p.cp, p.micro_batch, p.num_micro_batches) == (1, 1, 1, 1, 1, 1)
    assert p.layers_per_stage == (1,)


def test_one_layer_cannot_be_pipelined():
    # pp <= layers: with one layer every plan has pp = 1, whatever the GPU count
    res = _agrees_with_exhaustive(instance(layers=1, gpus_per_node=8, global_batch=8))
    assert res.plan.pp == 1


def test_more_gpus_than_the_batch_can_use():
    # 16 GPUs, global batch 3: dp must divide 3 and tp <= 8 per node, so dp = 1 and the other
    # 16 ranks must come from tp * pp * cp (or dp = 3, which does not divide 16): still a plan
    res = _agrees_with_exhaustive(instance(layers=4, nodes=2, global_batch=3))
    assert res.plan.dp == 1 and res.plan.num_gpus == 16


def test_batch_that_no_factorisation_can_use_is_explained():
    # 16 GPUs, 1 layer, heads 16 but tp limited to 8, pp <= 1 layer, cp limited to 1 by the
    # space, batch 3 -> dp in {1, 3}: 16 = tp * dp has no solution with tp <= 8 and dp | 3
    inst = instance(layers=1, nodes=2, global_batch=3)
    inst = replace(inst, search=replace(inst.search, cp=(1,)))
    res = plan(inst)
    assert res.status == INFEASIBLE and res.plan is None
    assert "empty" in res.reason and "16 GPUs" in res.reason and "3" in res.reason


def test_model_that_fits_nowhere():
    tiny = replace(A100, name="tiny-gpu", hbm_bytes=64 * 2**20)
    res = plan(instance(gpu=tiny))
    assert res.status == INFEASIBLE
    assert "tiny-gpu" in res.reason and "GiB" in res.reason
