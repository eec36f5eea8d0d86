"""Plausibility where the MoE optimum lands: each bundled MoE instance's proved optimum must not
promise more tokens per second per GPU than the fastest published run of the same model (the
same Megatron-LM FLOPs per token: shape and sequence length) on the same GPU die in the same
precision family, with a 5% margin. The reference is measured, not modelled (the anchors of
cost/published/moe.yaml: model TFLOP/s per GPU over Megatron-LM's FLOPs per token, or the
DeepSeek-V3 report's GPU hours per trillion tokens). A planner that exploits an optimistic
error of the cost model lands above that line first (tests/validation/test_plausibility.py
does the same for the dense workloads, in MFU).

Seen today: Qwen3-235B on 256 H100 (bf16) plans at 1,500 tokens/s per GPU against the best
published 2,162 (320 TF/GPU, forced balance and CUDA graphs); DeepSeek-V3 on 2,048 H800 (FP8)
at 1,354 against 1,543 (DeepSeek's DualPipe run); the GB200 instance at 3,311 against 4,908
(Megatron-Bridge 26.08: 1,276 TF/GPU). Mixtral 8x7B has no published run of its own shape.
Under DualPipe (job.pipeline_schedule: dualpipe, as `paraplan bench` runs them): Qwen3-235B
1,511 (its best plan at the time limit), the GB200 instance 3,872; DeepSeek-V3 on H800 is open
(OPEN below: 1,716, 11.2% above, with Transformer Engine's attention at cuDNN's benchmark).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bundled_plans import SHARED, bundled_instance, bundled_optimum, same_worker

from paraplan.cost.fit import die
from paraplan.cost.flops import megatron_flops_per_token
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.moe_anchors import anchor_instance, anchor_rows
from paraplan.solver.planner import OPTIMAL

ROOT = Path(__file__).resolve().parents[2]
MARGIN = 0.05
BUNDLED = ["qwen3-235b-a22b-256xH100", "deepseek-v3-shaped-2048xH800", "deepseek-v3-shaped-1152xGB200"]


def _family(precision: str) -> str:
    return "fp8" if "fp8" in precision else precision  # MXFP8 and blockwise FP8 price as FP8


def _published_tokens_per_s_per_gpu(row: dict, flops_per_token: float) -> float:
    measured = row["measured"]
    if measured["metric"] == "model_tflops_per_gpu":
        return measured["value"] * 1e12 / flops_per_token
    return row["derived"]["tokens_per_s_per_gpu"]  # the DeepSeek-V3 report's GPU hours


def _best_published(inst) -> tuple[float, str] | None:
    """(tokens/s per GPU, row id) of the fastest published run of inst's workload, or None."""
    want = megatron_flops_per_token(inst.model)
    best = None
    for row in anchor_rows():
        if not row.get("paraplan_instance") or row.get("host_bound") or not row.get("config"):
            continue
        a = anchor_instance(row)
        if (abs(megatron_flops_per_token(a.model) / want - 1) > 1e-9
                or die(a.cluster.gpu.name) != die(inst.cluster.gpu.name)  # H800 priced as H100
                or _family(row["config"]["precision"]) != _family(inst.job.precision.value)):
            continue
        got = _published_tokens_per_s_per_gpu(row, want)
        if best is None or got > best[0]:
            best = (got, row["id"])
    return best


# DeepSeek-V3 on 2,048 H800 under DualPipe is above the line. It planned DeepSeek's own layout
# at 1,726 tokens/s per GPU against the 1,543 DeepSeek measured (+11.8%), DualPipe's
# all-to-alls priced as hidden whole (cost/moe.a2a_hidden_fraction); with the MoE parameters
# fitted to the anchors (cost/moe_fit.py: the fixed per-layer host time, grouped-GEMM padding)
# and the dense refit, 1,601 (+3.7%); since the host time per expert GEMM is priced
# (cost/moe_params.py expert_gemm_issue_s) the fit gives the time per MoE layer it no longer
# needs for the Qwen3 rows with 16 experts a rank back (1.5 -> 1 ms a layer and micro-batch)
# and the dropless imbalance goes 1.1 -> 1.07, which DeepSeek-V3's 4 experts a rank (ep 64 of
# 256) gain without paying the new term: 1,644 (+6.5%). With the dense refit that moved
# matmul_half_flops off its 1e8 FLOP bound (6.44e9: every expert GEMM dearer) and the dropless
# imbalance back to 1.1, 1,615 (+4.6%): under the line again. DeepSeek's run is not one of the
# fitted anchors (it has no Megatron-core plan; docs/moe.md).
# Open again since Transformer Engine's attention is priced at the benchmark of the kernel it
# calls (cudnn_attention_speedup 1.6 x FlashAttention-2's 322 TFLOP/s on H100, cost/gpus.yaml):
# the proved optimum is DeepSeek's own layout (tp 1, pp 16, ep 64, micro-batch 1) at 17.90 s,
# 1,716 tokens/s per GPU (+11.2% over 1,543), with the dropless imbalance refitted 1.1 -> 1.2
# (at 1.1 it would be 17.13 s, +16.2%: the imbalance moved it the other way). The term that moved
# it is the attention core (MLA's 192-wide Q.K, 128-wide V): with job.cudnn_attention false
# (FlashAttention-2 at its own benchmark) 19.49 s, 1,576 (+2.1%). The gate does not compare like
# with like here: the instance prices Megatron-core with Transformer Engine (framework megatron,
# cuDNN fused attention by default), while DeepSeek's 1,543 was measured on its own HAI-LLM
# framework, whose attention kernel is not published; no Megatron-core run of DeepSeek-V3 on H800
# is published to say whether cuDNN's MLA reaches its head-dim-128 benchmark there. Kept open,
# asserting it is above the line, until one is. Since Blackwell's attention is priced at NVIDIA's
# measured benchmark the MoE refit's fixed time per MoE layer is 1.5 ms (1 before): the same
# layout plans at 18.18 s, 1,690 tokens/s per GPU (+9.5%); with job.cudnn_attention false
# 19.76 s, 1,554 (+0.7%). Since Blackwell's cuDNN attention is priced per call length the refit
# gives 1 ms a layer again: 17.90 s, 1,716 (+11.2%), the same layout. Since the host loop over
# local experts is priced beside their GEMMs the refit gives no fixed time per layer and the
# dropless imbalance 1.1: DeepSeek's layout 16.94 s, 1,813 (+17.5%), and the optimum the same
# layout at ep 128 (two experts a rank), 16.78 s, 1,831 (+18.7%).
OPEN: set[str] = {"deepseek-v3-shaped-2048xH800-dualpipe"}


def _bundled(name: str) -> tuple[str, bool]:
    """(bundled file name, under DualPipe): a -dualpipe case is the bundled instance under
    DualPipe, as `paraplan bench` runs it."""
    return name.removesuffix("-dualpipe"), name.endswith("-dualpipe")


def _instance(name: str):
    base, dualpipe = _bundled(name)
    return bundled_instance(base, dualpipe=dualpipe)


def _marks(name: str) -> list:
    """slow over 5 s; on the worker of the other tests that solve the same instance where one
    does (tests/bundled_plans.py: the goldens solve the three under 1F1B, test_dualpipe.py
    Qwen3-235B under DualPipe)"""
    marks = [pytest.mark.slow] if name in SLOW else []
    shared = name in SHARED or name == "qwen3-235b-a22b-256xH100-dualpipe"
    return marks + ([same_worker(_bundled(name)[0])] if shared else [])


# over 5 s each: slow (CI runs them; -m "not slow" leaves them out)
SLOW = {"deepseek-v3-shaped-1152xGB200-dualpipe", "qwen3-235b-a22b-256xH100",
        "qwen3-235b-a22b-256xH100-dualpipe"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n))
                                  for n in BUNDLED + [f"{n}-dualpipe" for n in BUNDLED]])
def test_bundled_moe_optimum_is_plausible(name):
    inst = _instance(name)
    ref = _best_published(inst)
    assert ref is not None, f"{name}: no published run of its workload on its die"
    # the default dp backend under a hang guard (bundled_plans.GUARD_LIMIT_S), not a budget:
    # the Qwen3 DualPipe proof took 77 s of wall at load 7, past the default 60 s limit
    base, dualpipe = _bundled(name)
    res = bundled_optimum(base, "dp", dualpipe=dualpipe)
    assert res.status == OPTIMAL
    per_gpu = inst.job.global_batch * inst.model.seq_len / res.iter_time_s / inst.cluster.num_gpus
    if name in OPEN:  # the list stays true: an open case is above the line
        assert per_gpu > ref[0] * (1 + MARGIN), (name, per_gpu, ref)
    else:
        assert per_gpu <= ref[0] * (1 + MARGIN), (name, per_gpu, ref)


def test_best_published_runs_by_hand():
    # the references above, from the rows: Qwen3-235B H100 bf16: 320 TF/GPU
    # (modelzoo-qwen3-235b-256xH100-best) over its FLOPs per token; DeepSeek-V3 H800: the
    # report's 1e12 / (180,000 h x 3,600 s) = 1,543 tokens/s per GPU
    qwen = load_instance(ROOT / "instances/qwen3-235b-a22b-256xH100.yaml")
    got, rid = _best_published(qwen)
    assert rid == "modelzoo-qwen3-235b-256xH100-best"
    assert got == pytest.approx(320e12 / megatron_flops_per_token(qwen.model))
    ds = load_instance(ROOT / "instances/deepseek-v3-shaped-2048xH800.yaml")
    got, rid = _best_published(ds)
    assert rid == "deepseek-v3-2048xH800" and got == pytest.approx(1e12 / (180_000 * 3600), rel=1e-3)
