"""job.grad_reduce_dtype: the dtype data-parallel gradients are kept and reduced in (cost/specs.py
GradReduceDtype), priced in memory (cost/memory.state_layout) and in the gradient reduction's
bytes (cost/coefficients.py), stated by published rows (ran: grad_reduce_dtype) and refused where
the framework cannot run it. Expected values are derived by hand in the comments.

The published row: Megatron-Bridge's Llama-3.1 405B FP8 recipe on 1,024 H100
(tests/data/published/megatron-bridge-405b.yaml), which sets ddp.grad_reduce_in_fp32 = False
(Megatron-Bridge perf_recipes/_common.py _benchmark_common, 067f987).
"""

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from paraplan.cost import memory
from paraplan.cost.calibration import load_rows, predict_rows, row_to_instance_plan
from paraplan.cost.errors import ConfigError, InstanceError
from tests.job_files import tiny_with_job
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Framework, GradReduceDtype, JobSpec, Optimizer, Precision

ROOT = Path(__file__).resolve().parents[2]
BRIDGE_405B = ROOT / "tests" / "data" / "published" / "megatron-bridge-405b.yaml"
GIB = 2**30


def _row_both_ways():
    """The 405B row as it ran (bf16 reduction) and its twin reducing in fp32."""
    (row,) = load_rows(str(BRIDGE_405B))
    inst, plan = row_to_instance_plan(row, load_catalogue())
    fp32 = replace(inst, job=replace(inst.job, grad_reduce_dtype=GradReduceDtype.FP32))
    return inst, fp32, plan


def test_the_405b_row_states_a_bf16_reduction():
    inst, _, _ = _row_both_ways()
    assert inst.job.grad_reduce is GradReduceDtype.BF16


def test_405b_main_gradient_buffer_in_bf16_saves_two_bytes_a_parameter():
    # Llama-3.1 405B: h = 16384, 128 heads of 128, 8 KV heads (kv width 1024), SwiGLU FFN 53248.
    # One layer: Q and O 2 x 16384^2 = 536,870,912; K, V 2 x 16384 x 1024 = 33,554,432; MLP
    # 3 x 16384 x 53248 = 2,617,245,696; two RMSNorms 2 x 16384 = 32,768: 3,187,703,808, of which
    # a GPU holds 1/tp = 1/8: 398,462,976. The distributed optimizer (ZeRO-1) leaves the gradient
    # buffer unsharded, so a bf16 main_grad holds 4 - 2 = 2 bytes a parameter fewer:
    #   middle stages, 16 layers: 2 x 16 x 398,462,976 = 12,750,815,232 bytes (11.875 GiB)
    #   stage 0, 15 layers + the embedding 128256 x 16384 / 8 = 262,668,288:
    #       2 x (15 x 398,462,976 + 262,668,288) = 12,479,225,856
    #   stage 7, 15 layers + the output layer 262,668,288 and final norm 16384 / 8 = 2,048:
    #       2 x (5,976,944,640 + 262,668,288 + 2,048) = 12,479,229,952
    bf16, fp32, plan = _row_both_ways()
    a, b = simulate(fp32, plan), simulate(bf16, plan)
    saved = [x.mem_bytes - y.mem_bytes for x, y in zip(a.stages, b.stages)]
    assert saved[0] == pytest.approx(12_479_225_856, rel=1e-12)
    assert saved[1:7] == pytest.approx([12_750_815_232] * 6, rel=1e-12)
    assert saved[7] == pytest.approx(12_479_229_952, rel=1e-12)
    # the run ran on 80 GB H100s: with fp32 main gradients it would not have fit, as it ran it does
    assert not a.fits and b.fits
    assert b.peak_mem_bytes < 80 * GIB < a.peak_mem_bytes


def test_405b_gradient_reduce_scatter_moves_half_the_bytes():
    # A middle stage's gradient reduce-scatter, once per iteration: 16 layers x 398,462,976
    # parameters over the dp x cp = 16 ranks of the distributed optimizer, 16 GPUs apart (tp x cp),
    # so one per node: each ring step crosses the 400 Gbit/s NIC, 50e9 B/s x 0.95 (cost/comm.py
    # NetEfficiency.inter_node). Ring reduce-scatter per rank: 15/16 of the bytes. In fp32 the
    # bandwidth term is 16 x 15/16 x 398,462,976 x 4 / 47.5e9 s; in bf16 half of it, so the
    # difference is 15 x 398,462,976 x 2 / 47.5e9 = 11,953,889,280 / 47.5e9 = 0.2516608269 s
    # (the call latencies are the same: the buckets count parameters, 40M each). The stage's
    # reduction outlasts its last backward in both (exposed), so the sync shows all of it.
    bf16, fp32, plan = _row_both_ways()
    a, b = simulate(fp32, plan), simulate(bf16, plan)
    assert a.stages[3].sync_time_s - b.stages[3].sync_time_s == pytest.approx(
        11_953_889_280 / 47.5e9, rel=1e-9)
    # nothing else in the iteration changed: compute, tensor and pipeline traffic are the same
    for part in ("compute", "tp_comm", "pp_p2p", "pipeline_bubble"):
        assert a.exposed_s[part] == b.exposed_s[part]


def test_the_row_is_predicted_to_fit_memory_as_it_ran():
    (row,) = load_rows(str(BRIDGE_405B))
    (res,) = predict_rows([row])
    assert res.fits_memory is True


@pytest.mark.parametrize("framework, optimizer, precision, want", [
    # Megatron-LM turns fp32 accumulation on for bf16 (megatron/training/arguments.py)
    (Framework.MEGATRON, Optimizer.ADAM, Precision.BF16, GradReduceDtype.FP32),
    (Framework.MEGATRON, Optimizer.ADAM, Precision.FP8, GradReduceDtype.FP32),
    # torchtitan: mixed_precision_reduce is float32 only
    (Framework.TORCHTITAN, Optimizer.ADAM, Precision.BF16, GradReduceDtype.FP32),
    # DeepSpeed and Composer (llm-foundry's PURE) reduce in the training dtype
    (Framework.DEEPSPEED, Optimizer.ADAM, Precision.FP16, GradReduceDtype.FP16),
    (Framework.DEEPSPEED, Optimizer.ADAM, Precision.BF16, GradReduceDtype.BF16),
    (Framework.COMPOSER, Optimizer.ADAM, Precision.BF16, GradReduceDtype.BF16),
    # NeMo's distributed_fused_adam with grad_sync_dtype bf16
    (Framework.MEGATRON, Optimizer.APEX_DISTRIBUTED_ADAM, Precision.BF16, GradReduceDtype.BF16),
])
def test_a_job_that_states_nothing_reduces_as_its_framework_does(framework, optimizer, precision, want):
    assert JobSpec(global_batch=8, framework=framework, optimizer=optimizer,
                   precision=precision).grad_reduce is want


def test_gradient_bytes_per_parameter_follow_the_reduce_dtype_where_the_framework_keeps_them():
    # Megatron: 2 bf16 weight + grad + 12 optimizer; fp32 main_grad 4 -> 18, bf16 main_grad 2 -> 16
    mega = JobSpec(global_batch=8)
    assert memory.state_bytes_per_param(0, 1, memory.state_layout(mega)) == 18
    bf16 = replace(mega, grad_reduce_dtype=GradReduceDtype.BF16)
    assert memory.state_bytes_per_param(0, 1, memory.state_layout(bf16)) == 16
    # ZeRO-1 over 8 ranks shards only the optimizer's 12: 2 + 2 + 12/8 = 5.5
    assert memory.state_bytes_per_param(1, 8, memory.state_layout(bf16)) == 5.5
    # FSDP (Composer) keeps the reduced shard in the fp32 parameter's dtype whatever it reduces in:
    # 4 + 4 + 8 = 16 either way
    for dtype in (GradReduceDtype.FP32, GradReduceDtype.BF16):
        job = JobSpec(global_batch=8, framework=Framework.COMPOSER, grad_reduce_dtype=dtype)
        assert memory.state_bytes_per_param(0, 1, memory.state_layout(job)) == 16


# --- refusals: the record, the instance loader, a published row -------------------------------

@pytest.mark.parametrize("changes, words", [
    (dict(framework=Framework.TORCHTITAN, grad_reduce_dtype=GradReduceDtype.BF16), "fp32 only"),
    (dict(framework=Framework.DEEPSPEED, grad_reduce_dtype=GradReduceDtype.FP32), "communication_data_type"),
    (dict(optimizer=Optimizer.APEX_DISTRIBUTED_ADAM, grad_reduce_dtype=GradReduceDtype.FP32), "grad_sync_dtype"),
    (dict(precision=Precision.FP16, grad_reduce_dtype=GradReduceDtype.BF16), "16-bit dtype of a fp16 job"),
    (dict(grad_reduce_dtype=GradReduceDtype.FP16), "16-bit dtype of a bf16 job"),
])
def test_the_record_refuses_what_the_framework_cannot_run(changes, words):
    with pytest.raises(ConfigError, match=words):
        JobSpec(global_batch=8, **changes)


@pytest.mark.parametrize("extra, words, fix", [
    ({"framework": "torchtitan", "grad_reduce_dtype": "bf16"}, "torchtitan reduces FSDP gradients in fp32 only",
     "or write fp32"),
    ({"framework": "deepspeed", "grad_reduce_dtype": "fp32"}, "does not price", "leave grad_reduce_dtype out"),
    ({"optimizer": "apex_distributed_adam", "grad_reduce_dtype": "fp32"}, "grad_sync_dtype fp32 is not priced",
     "use optimizer: adam"),
    ({"precision": "fp16", "grad_reduce_dtype": "bf16"}, "not the 16-bit dtype", "write fp16 or fp32"),
    ({"grad_reduce_dtype": "fp8"}, "unknown value", "fp32"),
    # Megatron-LM 23.04's arguments.py turns fp32 accumulation on for --bf16
    ({"framework_version": "23.04", "grad_reduce_dtype": "bf16"}, "fp32 only", "a later job.framework_version"),
])
def test_the_loader_names_file_field_and_fix(tmp_path, extra, words, fix):
    path = tiny_with_job(tmp_path, **extra)
    with pytest.raises(InstanceError) as e:
        load_instance(path)
    text = str(e.value)
    assert str(path) in text and "job.grad_reduce_dtype" in text and words in text and fix in text, text


def test_nemo_and_current_megatron_releases_reduce_in_bf16(tmp_path):
    # NeMo 24.07 sets Megatron-core's DDP config itself; core_v0.12.0 added --grad-reduce-in-bf16
    for version in ("nemo-24.07", "core_v0.12.0"):
        inst = load_instance(tiny_with_job(tmp_path, framework_version=version, grad_reduce_dtype="bf16"))
        assert inst.job.grad_reduce is GradReduceDtype.BF16


def test_a_stated_dtype_loads_and_round_trips(tmp_path):
    inst = load_instance(tiny_with_job(tmp_path, grad_reduce_dtype="bf16"))
    assert inst.job.grad_reduce_dtype is GradReduceDtype.BF16
    mapping = instance_to_mapping(inst)
    assert mapping["job"]["grad_reduce_dtype"] == "bf16"
    # a job that states nothing writes nothing: the default stays the framework's
    plain = load_instance(tiny_with_job(tmp_path))
    assert plain.job.grad_reduce_dtype is None and "grad_reduce_dtype" not in instance_to_mapping(plain)["job"]


def test_a_published_row_cannot_state_what_its_framework_cannot_run(tmp_path):
    (row,) = load_rows(str(BRIDGE_405B))
    bad = copy.deepcopy(row)
    bad["ran"]["framework"] = "torchtitan"
    bad["ran"].pop("tp_comm_overlap")
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump([bad]))
    with pytest.raises(InstanceError) as e:
        load_rows(str(path))
    text = str(e.value)
    assert "[0].ran.grad_reduce_dtype" in text and "fp32 only" in text, text


def test_the_megatron_bridge_moe_anchors_reduce_in_bf16_and_the_modelzoo_ones_in_fp32():
    # every Megatron-Bridge performance recipe runs _benchmark_common, which sets
    # ddp.grad_reduce_in_fp32 = False (perf_recipes/_common.py, d3412bf and 067f987); the
    # ModelZoo scripts pass Megatron-LM's default, fp32 main gradients (--main-grads-dtype fp32)
    from paraplan.cost.moe_anchors import anchor_instance, anchor_rows
    rows = [r for r in anchor_rows() if r.get("paraplan_instance")]
    bridge = [r for r in rows if r["source"].startswith("NVIDIA-NeMo/Megatron-Bridge")]
    zoo = [r for r in rows if r["source"].startswith("yanring/Megatron-MoE-ModelZoo")]
    assert len(bridge) == 7 and zoo
    assert all(anchor_instance(r).job.grad_reduce is GradReduceDtype.BF16 for r in bridge)
    assert all(r["config"]["grad_reduce_dtype"] == "bf16" for r in bridge)
    assert all(anchor_instance(r).job.grad_reduce is GradReduceDtype.FP32 for r in zoo)
