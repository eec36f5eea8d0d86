"""DeepSeek-V3's training options (issue 15): the DeepEP dispatcher with FP8 dispatch,
node-limited routing and the DualPipe schedule (cost/moe.py, cost/dualpipe.py). Each number is
derived by hand in the comments from the published configuration and the formulas' sources."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from paraplan.cost import coefficients, dualpipe, moe
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import MoeDispatcher, Outer, PipelineSchedule
from paraplan.cost.plan_specs import Plan

ROOT = Path(__file__).resolve().parents[2]
DEEPSEEK = ROOT / "instances" / "deepseek-v3-shaped-2048xH800.yaml"
MIXTRAL = ROOT / "instances" / "mixtral-8x7b-64xH100.yaml"
# DeepSeek-V3's published layout (arXiv 2412.19437 Sec. 3.2): tp 1, pp 16, ep 64, dp 128, ZeRO-1;
# 15,360 sequences / dp 128 = 120 micro-batches of one sequence
ANCHOR = Outer(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1, ep=64)


def deepseek(**job):
    """The bundled DeepSeek-V3-shaped instance with Megatron's all-to-all and unrestricted
    routing unless `job` (and with_moe) say otherwise."""
    inst = load_instance(DEEPSEEK)
    # imbalance 1.1 stated (the hand derivations below use it; the instance leaves it to the
    # fitted default, cost/moe_params.py)
    inst = replace(inst, model=replace(inst.model, moe=replace(inst.model.moe, max_nodes_per_token=None,
                                                               imbalance=1.1)))
    return replace(inst, job=replace(inst.job, **{"moe_dispatcher": MoeDispatcher.ALLTOALL, **job}))


def with_moe(inst, **moe_kw):
    return replace(inst, model=replace(inst.model, moe=replace(inst.model.moe, **moe_kw)))


def test_deepep_copies_by_hand():
    # ep 64 over 8 nodes of 8 (per_domain 8), top-8 routing, uniform over the 64 ranks.
    # Unrestricted: a token's 8 experts fall on 8 (1 - (7/8)^8) = 8 (1 - 0.343609...) =
    # 5.251129 distinct nodes, 7/8 of them remote: 4.594738 network copies.
    m = deepseek().model
    net_copies, _ = moe.deepep_copies(m, 64, 8)
    assert net_copies == pytest.approx(8 * (1 - (7 / 8) ** 8) * 7 / 8, rel=1e-12)
    assert net_copies == pytest.approx(4.594738, abs=1e-6)
    # Node-limited to M = 4 nodes (the report's Sec. 3.2.2): 4 nodes, 7/8 remote: 3.5 copies.
    # Inside the 4 nodes' 32 ranks the 8 experts fall on 32 (1 - (31/32)^8) = 32 (1 - 0.77570)
    # = 7.1776 distinct ranks, 7/8 of them not the receiving rank: 6.2804 NVLink copies.
    net_copies, nvl_copies = moe.deepep_copies(replace(m, moe=replace(m.moe, max_nodes_per_token=4)), 64, 8)
    assert net_copies == 3.5
    assert nvl_copies == pytest.approx(32 * (1 - (31 / 32) ** 8) * 7 / 8, rel=1e-12)
    assert nvl_copies == pytest.approx(6.2804, abs=1e-4)
    # One domain (ep 8 inside a node): nothing crosses the network
    assert moe.deepep_copies(m, 8, 8)[0] == 0


def test_deepep_all_to_all_time_of_the_anchor_by_hand():
    # DeepSeek-V3's layout, DeepEP with FP8 dispatch and node-limited routing (M = 4).
    # One rank's tokens: 4,096 (micro-batch 1, cp 1), imbalance 1.1 (set by deepseek()),
    # hidden 7,168 in bf16: 1.1 * 4096 * 7168 * 2 = 64,592,281.6 bytes per copy set.
    # Network: 3.5 copies over the NIC at 0.95 x 50 GB/s = 47.5 GB/s; NVLink: 6.2804 copies at
    # 0.8 x 200 GB/s = 160 GB/s: the NIC sets the time (3.5 / 47.5 > 6.28 / 160).
    # Dispatch in FP8: (1 + 4/128) / 2 of the bf16 bytes (DeepEP's fp8_factor);
    # combine in bf16. Each adds NCCL's call latency 8.4 us and one network hop 10 us.
    # Forward = dispatch + combine; backward the same again (dispatch kernel for the combine's
    # gradient in FP8, combine kernel for the dispatch's gradient in bf16).
    inst = with_moe(deepseek(moe_dispatcher=MoeDispatcher.DEEPEP), max_nodes_per_token=4)
    pl = coefficients.homogeneous_placement(inst.cluster.one_group, ANCHOR)
    site = pl.sites[1]
    x = moe.expert_terms(inst, ANCHOR, site.gpu, site.tp_link, site.ep_links, NetEfficiency(),
                         coefficients.fp8_matmul_time_s, coefficients.memory_time_s)
    copy_set = 1.1 * 4096 * 7168 * 2
    lat = 8.4e-6 + 10e-6
    dispatch = lat + 3.5 * copy_set * (1 + 4 / 128) / 2 / 47.5e9
    combine = lat + 3.5 * copy_set / 47.5e9
    assert x.a2a_f_s == pytest.approx(dispatch + combine, rel=1e-9)
    assert x.a2a_b_s == x.a2a_f_s
    # = (18.4 us + 2.4541 ms) + (18.4 us + 4.7594 ms) = 7.2503 ms
    assert x.a2a_f_s == pytest.approx(7.2503e-3, rel=1e-4)
    # against Megatron-core's all-to-all on the same layout: 8 routed copies, 56/64 of them to
    # other nodes, each bf16: 2 * (lat + 7 * copy_set / 47.5e9) = 19.07 ms forward
    plain = moe.expert_terms(deepseek(), ANCHOR, site.gpu, site.tp_link, site.ep_links, NetEfficiency(),
                             coefficients.fp8_matmul_time_s, coefficients.memory_time_s)
    assert plain.a2a_f_s == pytest.approx(2 * (lat + 7 * copy_set / 47.5e9), rel=1e-9)


def test_fp8_dispatch_only_in_fp8_jobs():
    # the same DeepEP layout in a bf16 job: both directions carry bf16, 2 x (lat + 3.5 x copy set)
    from paraplan.cost.specs import Precision
    inst = with_moe(deepseek(moe_dispatcher=MoeDispatcher.DEEPEP, precision=Precision.BF16,
                             attention_output_e5m6=False),  # (E5M6 is an FP8 job's storage)
                    max_nodes_per_token=4)
    site = coefficients.homogeneous_placement(inst.cluster.one_group, ANCHOR).sites[1]
    x = moe.expert_terms(inst, ANCHOR, site.gpu, site.tp_link, site.ep_links, NetEfficiency(),
                         coefficients.matmul_time_s, coefficients.memory_time_s)
    assert x.a2a_f_s == pytest.approx(2 * (18.4e-6 + 3.5 * 1.1 * 4096 * 7168 * 2 / 47.5e9), rel=1e-9)


def test_dualpipe_schedule_by_hand():
    # pp 4, m 8: device d holds stages d and 3 - d. T = [1, 2, 2, 1]: each device runs
    # m/2 = 4 micro-batches of each of its stages: steady = 4 x (1 + 1, 2 + 2, 2 + 2, 1 + 1)
    # = [8, 16, 16, 8]. U = [2, 3, 1, 0]: device chunks average (2+0)/2 = 1, (3+1)/2 = 2;
    # bubble = (4/2 - 1) x 2 = 2. D = [0.5, 0, 0, 0.25]: a device syncs both its stages,
    # [0.75, 0, 0, 0.75]. Iteration 16 + 2 + 0.75.
    steady, bubble, sync = dualpipe.schedule_s(np.array([1.0, 2, 2, 1]), np.array([2.0, 3, 1, 0]),
                                               np.array([0.5, 0, 0, 0.25]), 8)
    assert steady.tolist() == [8, 16, 16, 8]
    assert bubble == 2
    assert sync.tolist() == [0.75, 0, 0, 0.75]
    # The README table's comparison (deepseek-ai/DualPipe): equal chunks with F = 1, B = 2,
    # W = 1 and no communication, so F&B = F + B = 3: DualPipe's bubble (PP/2 - 1)(F&B + B - 3W)
    # = 3 x 2 = 6 on 8 stages, against 1F1B's (PP - 1)(F + B) = 7 x 3 = 21.
    t = np.full(8, 3.0)
    _, bubble, _ = dualpipe.schedule_s(t, t + 2 - 3 * 1, np.zeros(8), 16)
    assert bubble == 6
    from paraplan.cost.schedule import pipeline_time_s
    assert pipeline_time_s(t, 16, 1) - 16 * 3 == 21


def test_dualpipe_device_memory_counts_both_stages_and_one_runtime():
    # stages [10, 20, 30, 40] bytes, each with a runtime of 5 (k0 leaves it out: 5, 15, 25,
    # 35): devices (10 + 40 - 5, 20 + 30 - 5, ...), the runtime counted once
    zero = np.zeros(4)
    terms = dualpipe.Terms(coeffs=None, num_micro_batches=8, bw_s=zero, ru_s=zero,
                           k0_bytes=np.array([5.0, 15, 25, 35]), kn_bytes=zero, kr_bytes=zero, runtime_bytes=5.0)
    assert terms.mem_bytes(zero, zero).tolist() == [45, 45, 45, 45]


def _plan(inst, n, r=None, m=120, pp=16):
    o = replace(ANCHOR, pp=pp, num_micro_batches=m, dp=2048 // pp)
    return Plan.flat(**{f: getattr(o, f) for f in ("tp", "pp", "dp", "cp", "micro_batch", "num_micro_batches",
                                             "sequence_parallel", "recompute", "zero", "virtual_stages", "ep")},
                layers_per_stage=tuple(n), full_recompute_layers=tuple(r or [0] * len(n)))


def test_dualpipe_iteration_of_the_anchor_is_its_formula():
    # The anchor plan (layers [3, 4 x 14, 2], no full recompute) under DualPipe: the steady
    # state of the busiest device is m/2 (T_d + T_{15-d}) with T from the coefficients priced
    # with the pairs' overlap; the bubble (16/2 - 1) max_d (U_d + U_{15-d}) / 2 with
    # U_s = T_s + n_s B - 3 n_s W, B a layer's backward alone and W its weight-gradient GEMMs
    # (each linear's forward GEMM again); sync both stages'.
    inst = with_moe(deepseek(moe_dispatcher=MoeDispatcher.DEEPEP,
                             pipeline_schedule=PipelineSchedule.DUALPIPE), max_nodes_per_token=4)
    n = [3] + [4] * 14 + [2]
    plan = _plan(inst, n)
    it = dualpipe.iteration(inst, plan)
    c = coefficients.build(inst, ANCHOR, dualpipe=True)
    na = np.array(n, float)
    t = c.stage_time_s + na * c.layer_time_s
    site = coefficients.homogeneous_placement(inst.cluster.one_group, ANCHOR).sites[0]
    alone = replace(inst, job=replace(inst.job, pipeline_schedule=PipelineSchedule.ONE_F_ONE_B))
    b = coefficients.megatron_layer(alone, ANCHOR, site, NetEfficiency()).bwd_s
    # the layer's linear GEMMs, forward, in FP8: attention q, k, v, o and the shared expert's
    # three, then the router and the 4 local experts' 3 GEMMs each (cost/moe.expert_terms)
    from paraplan.cost.flops import layer_matmuls, moe_attention_view
    mm = coefficients.fp8_matmul_time_s
    w = sum(mm(f, site.gpu) for f in layer_matmuls(moe_attention_view(inst.model), 1, 1, 1).linear_calls if f)
    routed = 1.1 * 8 * 4096
    w += mm(2 * 4096 * 7168 * 256, site.gpu)  # router (bf16 in cost/moe? priced by the same mm)
    w += 4 * 3 * mm(2 * routed / 4 * 7168 * 2048, site.gpu)
    # and the host loop over those 4 experts that the weight-gradient GEMMs' 2 grouped calls run
    # before them (cost/moe.expert_host_s): 2 x 4 x 30 us, deferred with them
    from paraplan.cost import moe, moe_params
    w += moe.expert_host_s(4, moe_params.FITTED.expert_gemm_issue_s)
    u = t + na * b - 3 * na * w
    mi = 15 - np.arange(16)
    steady = 60 * (t + t[mi])
    bubble = 7 * ((u + u[mi]) / 2).max()
    d = c.stage_sync_time_s + na * c.layer_sync_time_s
    assert it.iter_time_s == pytest.approx(steady.max() + bubble + (d + d[mi]).max(), rel=1e-12)
    # the paired layer hides its all-to-alls: none exposed, all of them overlapped
    assert c.layer_parts["ep_a2a"] == 0 and c.overlapped_per_layer_s["ep_a2a"] > 0
    bd = simulate(inst, plan)
    assert bd.iter_time_s == it.iter_time_s
    assert bd.exposed_s["pipeline_bubble"] == pytest.approx(bubble, rel=1e-12)
    # device 1 holds stages 1 and 14: 8 layers, both stages' state, and "PP + 1" = 17 chunks of
    # activations, (16 + 1) / 2 = 8.5 micro-batches of each of its two stages; the runtime
    # allowance (CUDA context, NCCL buffers) once
    assert bd.stages[1].layers == 8
    from paraplan.cost import memory
    act = c.layer_act_bytes / c.in_flight  # one micro-batch's, with the allocator's share
    stage = c.stage_mem_bytes + na * c.layer_state_bytes + 8.5 * na * act
    runtime = memory.runtime_bytes(1, 1, 128, 16)
    assert bd.stages[1].mem_bytes == pytest.approx(stage[1] + stage[14] - runtime, rel=1e-12)


@pytest.mark.parametrize("pp,m,n", [(1, 120, [61]), (16, 30, [3] + [4] * 14 + [2]),
                                    (16, 121, [3] + [4] * 14 + [2])])
def test_dualpipe_refuses_what_its_step_asserts(pp, m, n):
    # DualPipe.step: an even number of ranks, an even number of micro-batches >= 2 x ranks
    inst = deepseek(pipeline_schedule=PipelineSchedule.DUALPIPE)
    plan = _plan(inst, n, m=m, pp=pp)
    assert dualpipe.plan_problem(plan) is not None
    with pytest.raises(ConfigError):
        dualpipe.iteration(inst, plan)


def test_the_planner_cannot_price_dualpipe_as_1f1b():
    with pytest.raises(ConfigError, match="cost/dualpipe.py"):
        coefficients.build(deepseek(pipeline_schedule=PipelineSchedule.DUALPIPE), ANCHOR)


def _write(tmp_path, raw, name="i.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("model,job,field", [
    ({"max_nodes_per_token": 0}, {}, "model.moe.max_nodes_per_token"),
    ({}, {"moe_dispatcher": "nccl"}, "job.moe_dispatcher"),
    ({}, {"pipeline_schedule": "zb1p"}, "job.pipeline_schedule"),
    ({}, {"pipeline_schedule": "dualpipe", "moe_shared_expert_overlap": True}, "job.moe_shared_expert_overlap"),
])
def test_bad_deepseek_options_are_refused(tmp_path, model, job, field):
    raw = yaml.safe_load(DEEPSEEK.read_text())
    raw["model"]["moe"].update(model)
    raw["job"].update(job)
    with pytest.raises(InstanceError) as info:
        load_instance(_write(tmp_path, raw))
    assert info.value.field == field


def test_deepep_on_a_dense_model_is_refused(tmp_path):
    raw = yaml.safe_load((ROOT / "instances" / "llama3-8b-64xH100.yaml").read_text())
    raw["job"]["moe_dispatcher"] = "deepep"
    with pytest.raises(InstanceError) as info:
        load_instance(_write(tmp_path, raw))
    assert info.value.field == "job.moe_dispatcher" and "dense" in info.value.problem


def test_options_round_trip(tmp_path):
    from paraplan.cost.readers.instance import instance_from_mapping
    inst = with_moe(deepseek(moe_dispatcher=MoeDispatcher.DEEPEP,
                             pipeline_schedule=PipelineSchedule.DUALPIPE), max_nodes_per_token=4)
    back = instance_from_mapping(instance_to_mapping(inst), "<test>")
    assert back.job == inst.job and back.model.moe == inst.model.moe


def _cli(*args) -> subprocess.CompletedProcess:
    """`paraplan ARGS` run by the console script's main() in this process: what is checked here
    is each command's answer and exit status, not the process boundary (tests/cli/test_packaging.py
    and tests/robustness/test_round3_inputs.py start real processes). Five interpreters started
    for it cost ~2 s of imports each (issue 32)."""
    from paraplan.solver.commands.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse's own refusals exit, as they would in a process
            code = e.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_plan_plans_dualpipe_other_planning_commands_refuse_it_and_simulate_prices_it(tmp_path):
    raw = yaml.safe_load(DEEPSEEK.read_text())
    raw["job"].update(pipeline_schedule="dualpipe", moe_dispatcher="deepep")
    raw["model"]["moe"]["max_nodes_per_token"] = 4
    path = _write(tmp_path, raw)
    out = _cli("partition", path, "--tp", "8")  # the 1F1B formulations' commands: one line, exit 2
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "job.pipeline_schedule" in out.stderr and "paraplan plan" in out.stderr
    out = _cli("plan", path, "--json")
    assert out.returncode == 0, out.stderr
    planned = json.loads(out.stdout)
    assert planned["status"] == "optimal"
    plan = {"plan": {"tp": 1, "pp": 16, "dp": 128, "cp": 1, "micro_batch": 1, "num_micro_batches": 120,
                     "sequence_parallel": False, "recompute": "none", "zero": 1, "virtual_stages": 1,
                     "ep": 64, "layers_per_stage": [3] + [4] * 14 + [2], "full_recompute_layers": [0] * 16}}
    pf = _write(tmp_path, plan, "p.yaml")
    out = _cli("simulate", path, "--plan", pf, "--json")
    # with DeepSeek-V3's memory savings (the bundled instance's job options) the plan fits
    assert out.returncode == 0, out.stderr
    assert '"iter_time_s"' in out.stdout
    # the report's own layout is in the declared space, so the proved optimum is no slower
    assert planned["iter_time_s"] <= json.loads(out.stdout)["iter_time_s"] * (1 + 1e-9)
    # without them it does not fit memory (exit 1, cost/dualpipe.py; README "Mixture of
    # experts") but is priced
    for key in ("optimizer", "recompute_modules", "activation_fp8_input_store", "attention_output_e5m6"):
        raw["job"].pop(key)
    out = _cli("simulate", _write(tmp_path, raw), "--plan", pf, "--json")
    assert out.returncode == 1, out.stderr
    assert '"iter_time_s"' in out.stdout
    # 30 micro-batches: fewer than DualPipe's 2 x 16 (one line, exit 2)
    bad = _write(tmp_path, dict(plan, plan=dict(plan["plan"], micro_batch=4, num_micro_batches=30)), "bad.yaml")
    out = _cli("simulate", path, "--plan", bad)
    assert out.returncode == 2 and "DualPipe needs an even number of micro-batches" in out.stderr


def test_megatron_export_refuses_dualpipe_and_writes_deepep_and_node_limited_routing(tmp_path):
    from paraplan.solver.export import ExportRefused
    from paraplan.solver.export.megatron import render, runnable
    dualpipe = with_moe(deepseek(moe_dispatcher=MoeDispatcher.DEEPEP,
                                 pipeline_schedule=PipelineSchedule.DUALPIPE), max_nodes_per_token=4)
    # Megatron-LM has no DualPipe: refused, where it was emitted as 1F1B (issue 34)
    with pytest.raises(ExportRefused, match="DualPipe"):
        runnable(dualpipe, _plan(dualpipe, [3] + [4] * 14 + [2]))
    inst = with_moe(deepseek(moe_dispatcher=MoeDispatcher.DEEPEP), max_nodes_per_token=4)
    e = runnable(inst, _plan(inst, [3] + [4] * 14 + [2]))
    assert "deepep" not in " ".join(e.deviations)  # DeepEP is Megatron-core's flex backend
    assert e.inst.job.moe_dispatcher is MoeDispatcher.DEEPEP  # re-priced with DeepEP, as emitted
    script = render(inst, e)
    # ep 64 over 8-GPU NVLink domains (H800 nodes): 64 / 8 = 8 routing groups, each token to at
    # most 4 of them (DeepSeek-V3 report Sec. 3.2.2: 8 nodes, at most 4 per token; Megatron-core's
    # DeepSeek-V3 example sets the same 8 groups / group top-k 4)
    for flag in ("--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep",
                 "--moe-router-num-groups 8", "--moe-router-group-topk 4"):
        assert flag in script, flag
    assert "--moe-token-dispatcher-type alltoall" not in script


def test_megatron_export_leaves_out_routing_groups_that_cannot_bind_or_be_expressed():
    from paraplan.solver.export.megatron import render, runnable
    # ep 8 inside one 8-GPU domain: 1 group, a limit of 4 nodes cannot bind (no flags); a limit
    # of 3 with top-k 8: Megatron takes 8 // 3 experts per group, not the model (a note)
    inst = with_moe(deepseek(), max_nodes_per_token=4)
    p = replace(_plan(inst, [3] + [4] * 14 + [2]), ep=8)
    assert "--moe-router-num-groups" not in render(inst, runnable(inst, p))
    three = with_moe(deepseek(), max_nodes_per_token=3)
    e = runnable(three, _plan(three, [3] + [4] * 14 + [2]))
    assert "--moe-router-num-groups" not in render(three, e)
    assert any("max_nodes_per_token 3" in n for n in e.notes)


def test_search_ep_on_the_command_line_is_a_list():
    # `--search ep=64` narrows the expert-parallel degrees as `search: {ep: [64]}` does (it was
    # refused as "takes one value"); the published layout on the bundled instance
    from paraplan.cost.readers.search import override_search
    from paraplan.solver.commands.inputs import search_overrides
    assert search_overrides(["ep=64"]) == {"ep": [64]}
    assert search_overrides(["ep=8,64"]) == {"ep": [8, 64]}
    inst = override_search(load_instance(DEEPSEEK), search_overrides(["ep=64", "pp=16", "tp=1", "cp=1"]))
    assert inst.search.ep == (64,) and inst.search.pp == (16,)


def test_mixed_clusters_refuse_dualpipe_and_take_deepep(tmp_path):
    # DualPipe is priced by `simulate` of one GPU type only (cost/dualpipe.py): refused on a
    # mixed cluster rather than ignored. DeepEP's dispatch is priced there (an expert group lies
    # inside one class's stage on one group: tests/mixed/test_moe_mixed.py)
    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.specs import MoeDispatcher
    raw = yaml.safe_load((ROOT / "instances" / "mixed" / "tiny-2types.yaml").read_text())
    raw["job"]["pipeline_schedule"] = "dualpipe"
    with pytest.raises(InstanceError) as info:
        load_instance(_write(tmp_path, raw, "h.yaml"))
    assert info.value.field == "job.pipeline_schedule"
    del raw["job"]["pipeline_schedule"]
    raw["model"]["moe"] = {"experts": 8, "top_k": 2, "expert_ffn": 2048}
    raw["job"]["moe_dispatcher"] = "deepep"
    inst = load_instance(_write(tmp_path, raw, "h2.yaml"))
    assert inst.job.moe_dispatcher is MoeDispatcher.DEEPEP


def test_dualpipe_shrinks_a_dense_pipelines_bubble_to_its_formula():
    # Llama-3 70B on 512 H100, pp 4, 64 micro-batches of 20 layers per stage: 1F1B's bubble is
    # (sum T - max T) = 3 T for equal stages but the last's head; DualPipe's
    # (4/2 - 1) max_d (U_d + U_{3-d}) / 2 with U = T + B - 3W of each stage: one chunk's worth,
    # and a chunk's U is below its T (B - 3W < 0: backward is 2 forwards of GEMMs, W one)
    inst = load_instance(ROOT / "instances" / "llama3-70b-512xH100.yaml")
    plan = Plan.flat(tp=2, pp=4, dp=16, cp=4, micro_batch=1, num_micro_batches=64, sequence_parallel=True,
                zero=1, layers_per_stage=(20, 20, 20, 20), full_recompute_layers=(0, 0, 0, 0))
    one = simulate(inst, plan)
    dual = simulate(replace(inst, job=replace(inst.job, pipeline_schedule=PipelineSchedule.DUALPIPE)), plan)
    t = [s.time_per_micro_batch_s for s in one.stages]
    assert one.exposed_s["pipeline_bubble"] == pytest.approx(sum(t) - max(t), rel=1e-12)
    assert 0 < dual.exposed_s["pipeline_bubble"] < max(t)
    # no all-to-all to hide: the steady state is the same work, m/2 (T_d + T_{3-d}) = m T for
    # the paired devices' average
    assert dual.exposed_s["compute"] == pytest.approx(one.exposed_s["compute"], rel=1e-12)


def test_a_search_override_on_a_group_file_is_checked_against_its_recompute_modules(tmp_path):
    # group files take recompute_modules (selective), which excludes full recomputation as in
    # Megatron-LM; `--search full_recompute=true` must be refused there as in a homogeneous file
    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.readers.search import override_search
    raw = yaml.safe_load((ROOT / "instances" / "mixed" / "tiny-2types.yaml").read_text())
    raw["model"]["moe"] = {"experts": 8, "top_k": 2, "expert_ffn": 2048}
    raw["job"]["recompute_modules"] = ["moe_act"]
    raw["search"] = {**raw.get("search", {}), "full_recompute": False}
    inst = load_instance(_write(tmp_path, raw, "h.yaml"))
    with pytest.raises(InstanceError) as info:
        override_search(inst, {"full_recompute": True})
    assert info.value.field == "job.recompute_modules"
