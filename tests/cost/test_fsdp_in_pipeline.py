"""FSDP (ZeRO-3) inside a pipeline, priced as torchtitan runs it (cost/memory.py's docstring:
gathered once per step, gradients accumulated unsharded until the step's REDUCE_GRAD) and
refused for the frameworks that do not run it (cost/framework_rules.unpriced_reason)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from paraplan.cost import comm
from paraplan.cost.coefficients import ADAM_STEP_BYTES_PER_PARAM, build, homogeneous_placement, memory_time_s
from paraplan.cost.framework_rules import FRAMEWORK_RULES, unpriced_reason
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Framework, Outer
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.planner import OPTIMAL
from paraplan.solver.solve import solve

ROOT = Path(__file__).resolve().parents[2]

# Llama-3 8B's transformer block (instances/llama3-8b-64xH100.yaml: h 4096, 32 heads of 128, 8
# KV heads, ffn 14336, SwiGLU, two RMSNorms): Q and O 4096^2 each, K and V 4096 x 1024 each,
# gate, up and down 4096 x 14336 each, norms 2 x 4096
LLAMA8B_BLOCK_PARAMS = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
assert LLAMA8B_BLOCK_PARAMS == 218_112_000


def _torchtitan(tmp_path: Path, name: str, **search) -> Path:
    raw = yaml.safe_load((ROOT / "instances" / f"{name}.yaml").read_text())
    raw["job"]["framework"] = "torchtitan"
    if search:
        raw["search"] = {**raw.get("search", {}), **search}
    path = tmp_path / f"{name}-torchtitan.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _outer(zero: int, pp: int, dp: int, m: int) -> Outer:
    return Outer(tp=1, pp=pp, dp=dp, cp=1, micro_batch=1, num_micro_batches=m,
                 sequence_parallel=False, zero=zero, virtual_stages=1)


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory):
    return load_instance(_torchtitan(tmp_path_factory.mktemp("tt"), "llama3-8b-64xH100"))


def test_a_stage_holds_its_gathered_weights_and_accumulated_gradients(llama8b):
    # per parameter: the FSDP shards (fp32 parameter 4 + fp32 gradient 4 + Adam moments 8) over
    # dp = 32, plus what stays unsharded through the step: the bf16 gathered weight (2) and the
    # fp32 accumulated gradient (4): 218,112,000 x (16/32 + 6) = 1,417,728,000 bytes per layer;
    # without a pipeline (gathered per micro-batch) the shards alone, 16/64 at dp 64
    c = build(llama8b, _outer(3, 2, 32, 16))
    assert c.layer_state_bytes == pytest.approx([218_112_000 * 6.5] * 2, rel=1e-12)
    flat = build(llama8b, _outer(3, 1, 64, 8))
    assert flat.layer_state_bytes == pytest.approx([218_112_000 * 16 / 64], rel=1e-12)


def test_no_collective_runs_per_micro_batch(llama8b):
    # a layer's per-micro-batch time is its compute alone, as without ZeRO-3 (ZeRO-1 has no
    # per-layer collective in its micro-batches either); the once-per-step terms do not grow
    # with the micro-batch count
    z3 = build(llama8b, _outer(3, 2, 32, 16))
    z1 = build(llama8b, _outer(1, 2, 32, 16))
    assert z3.layer_time_s == pytest.approx(z1.layer_time_s, rel=1e-12)
    assert "zero3_unhidden" not in {k for part in z3.stage_parts for k in part}
    z3_long = build(llama8b, _outer(3, 2, 32, 64))
    assert z3_long.layer_sync_time_s == pytest.approx(z3.layer_sync_time_s, rel=1e-12)
    assert z3_long.stage_sync_time_s == pytest.approx(z3.stage_sync_time_s, rel=1e-12)


def test_the_step_reduce_scatters_each_layer_once_behind_nothing(llama8b):
    # torch's REDUCE_GRAD after the stage's last backward: each layer's fp32 gradient
    # reduce-scattered over the 32 ranks, all of it exposed (no backward left to hide it), then
    # the Adam step over the layer's 1/32 shard
    o = _outer(3, 2, 32, 16)
    c = build(llama8b, o)
    site = homogeneous_placement(llama8b.cluster.one_group, o).sites[0]
    link, inter = site.dp_link
    rs = comm.all_gather_time_s(LLAMA8B_BLOCK_PARAMS * 4, 32, link, inter, comm.NetEfficiency(), 1)
    step = memory_time_s(LLAMA8B_BLOCK_PARAMS / 32 * ADAM_STEP_BYTES_PER_PARAM, site.gpu)
    assert c.layer_sync_time_s[0] == pytest.approx(rs + step, rel=1e-9)


def test_the_first_forward_gathers_are_paid_once_in_the_fill(llama8b):
    # the step's first forward on stage s waits for stage s - 1's, and each stage's first
    # block is gathered with nothing before it: the fill carries at least both stages' first
    # gathers (218,112,000 bf16 parameters over 32 ranks each), and every stage's once-per-step
    # term carries the fill, so each is at least that; the same with 64 micro-batches
    o = _outer(3, 2, 32, 16)
    c = build(llama8b, o)
    link, inter = homogeneous_placement(llama8b.cluster.one_group, o).sites[0].dp_link
    first_blocks = 2 * comm.all_gather_time_s(LLAMA8B_BLOCK_PARAMS * 2, 32, link, inter, comm.NetEfficiency(), 1)
    assert (c.stage_sync_time_s >= first_blocks).all()
    assert build(llama8b, _outer(3, 2, 32, 64)).stage_sync_time_s == pytest.approx(c.stage_sync_time_s)
    # interleaved (v = 2): each of the 4 model chunks is an FSDP root of its own, so 2 more
    # first blocks gathered with nothing before them; the L layers' exposure is the same
    inter = build(llama8b, Outer(tp=1, pp=2, dp=32, cp=1, micro_batch=1, num_micro_batches=16,
                                 sequence_parallel=False, zero=3, virtual_stages=2))
    assert inter.stage_sync_time_s - c.stage_sync_time_s == pytest.approx([first_blocks] * 2, rel=1e-9)


@pytest.mark.parametrize("framework,zero,priced", [
    (Framework.TORCHTITAN, 3, True),  # runs it: priced once per step
    (Framework.TORCHTITAN, 2, False),  # its "never" policy runs as ZeRO-3 inside a pipeline
    (Framework.MEGATRON, 2, False), (Framework.MEGATRON, 3, False),  # arguments.py asserts
    (Framework.DEEPSPEED, 3, False),  # PipelineEngine asserts stage < 2
    (Framework.COMPOSER, 3, False),  # no pipeline
])
def test_fsdp_inside_a_pipeline_priced_or_refused_by_the_framework_rule(framework, zero, priced):
    reason = unpriced_reason(framework, zero, 4)
    assert (reason is None) == priced
    assert FRAMEWORK_RULES[framework].admits(tp=1, pp=4, cp=1, dp=8, sp=False, zero=zero, v=1) == priced
    if framework is Framework.TORCHTITAN and not priced:
        assert "use zero 3 or 0 with pp > 1" in reason
    assert unpriced_reason(framework, zero, 1) is None


def test_export_keeps_parameters_gathered_through_the_step(llama8b):
    # torchtitan's "default" policy with pp > 1 is reshard_after_forward=False (apply_fsdp);
    # "always" would gather every micro-batch, which the plan was not priced with
    from paraplan.solver.export import to_torchtitan
    plan = plan_from_mapping(dict(tp=1, pp=2, dp=32, cp=1, micro_batch=1, num_micro_batches=16,
                                  sequence_parallel=False, zero=3, virtual_stages=1, recompute="none",
                                  layers_per_stage=[16, 16], full_recompute_layers=[0, 0]), llama8b)
    par = tomllib.loads(to_torchtitan(llama8b, plan).text)["parallelism"]
    assert par["fsdp_reshard_after_forward"] == "default"
    assert par["pipeline_parallel_degree"] == 2 and par["data_parallel_shard_degree"] == 32


def test_exhaustive_search_agrees_on_a_small_torchtitan_pipeline(tmp_path):
    # the tiny GPT on one node, torchtitan, ZeRO-3 and pp 2 only: every split and recompute
    # count enumerated (no pruning) must give the planner's optimum, which re-simulates to it
    inst = load_instance(_torchtitan(tmp_path, "tiny-gpt-8xA100", pp=[2], zero=[3]))
    ex = exhaustive(inst)
    assert ex.plan is not None and ex.plan.pp == 2 and ex.plan.zero == 3
    for backend in ("dp", "cpsat", "milp"):
        res = solve(inst, backend=backend, time_limit_s=60)
        assert res.status == OPTIMAL
        tol = 1e-6 * ex.iter_time_s + res.tolerance_s
        assert res.iter_time_s == pytest.approx(ex.iter_time_s, abs=tol)
        bd = simulate(inst, res.plan, reserve_bytes=inst.search.memory_reserve_bytes)
        assert bd.iter_time_s == pytest.approx(res.iter_time_s, abs=tol)


def test_one_group_prices_it_like_one_homogeneous_cluster(tmp_path):
    # one model of the problem: the class planner (cost/class_coefficients.py on a one-group
    # cluster) prices FSDP inside a pipeline through the same build, so its optimum is the time
    # the homogeneous simulator gives its plan
    from paraplan.cost.specs import Instance
    from paraplan.solver.search import search
    inst = load_instance(_torchtitan(tmp_path, "tiny-gpt-8xA100", pp=[2], zero=[3]))
    het = search(inst)
    assert het.status == "optimal" and het.plan.pp == 2 and het.plan.zero == 3
    bd = simulate(inst, het.plan, reserve_bytes=inst.search.memory_reserve_bytes)
    assert bd.fits and bd.iter_time_s == pytest.approx(het.objective_s, rel=1e-9)
    assert het.objective_s == pytest.approx(exhaustive(inst).iter_time_s, rel=1e-9)


def test_a_mixed_cluster_plans_it_as_exhaustive_search_does(tmp_path):
    # one model of the problem on two GPU types (instances/mixed/tiny-2types.yaml: 8 A100 + 8
    # H100), torchtitan with ZeRO-3 only: the class planner's optimum equals brute force over
    # the same declared space (solver/exhaustive.exhaustive); the optimum pipelines
    # (a stage on each group) with FSDP inside it
    from paraplan.cost.readers.instance import load_instance
    from paraplan.solver.exhaustive import exhaustive
    from paraplan.solver.search import search
    raw = yaml.safe_load((ROOT / "instances/mixed/tiny-2types.yaml").read_text())
    raw["job"]["framework"] = "torchtitan"
    raw["search"]["zero"] = [3]
    path = tmp_path / "tiny-2types-torchtitan.yaml"
    path.write_text(yaml.safe_dump(raw))
    inst = load_instance(path)
    ex = exhaustive(inst)
    res = search(inst)
    assert res.status == "optimal" and ex.plan is not None
    assert res.objective_s == pytest.approx(ex.iter_time_s, rel=1e-9)
    assert res.plan.zero == 3 and max(len(c.stage_groups) for c in res.plan.classes) == 2
