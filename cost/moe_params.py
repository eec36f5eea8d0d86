"""The fitted parameters of the mixture-of-experts cost model (cost/moe.py): one record, its
physical ranges, and the values in force.

Each parameter prices something fine-grained experts cost that no dense row exercises, so it
is fitted to the MoE anchors (cost/published/moe.yaml) by cost/moe_fit.py, inside the range
below, and judged by leave-one-table-out cross-validation there; never per row or per source.
A fitted value on its bound means the model misses something the parameter is absorbing
(`paraplan accuracy --moe` says so).

| parameter | range | what bounds it |
|---|---|---|
| dropless_imbalance | 1.07-2.2 | busiest expert-parallel rank's routed tokens over the mean under dropless routing that is not forced to balance (1 + MaxVio per rank, L. Wang et al., arXiv 2408.15664): from the smallest imbalance a published forced-balance / dropless pair implies (Mixtral 8x22B, 1.07: every published pair measured dropless routing slower than forced, so 1.0, a tie, contradicts all of them; with 1.0 allowed the fit took it, tied every pair and priced DeepSeek-V3's DualPipe optimum 10% faster than DeepSeek measured) to above the largest (Qwen3-235B at 128k, 1.86; cost/published/moe.yaml imbalance_default.range, tests/validation/test_moe_anchor.py). Runs forced to balance, or with a capacity factor, set model.moe.imbalance / capacity_factor and do not read it |
| combined_1f1b_hidden_fraction | 0.0-1.0 | the share of the all-to-all time that fits under the paired compute which Megatron-core's combined 1F1B (--overlap-moe-expert-parallel-comm) actually hides: 0 hides nothing, 1 everything that fits; measured 0.45-0.47 from the one published pair that differs only in the overlap (Megatron-MoE-ModelZoo Qwen3-235B H100 table, cost/moe.py) |
| grouped_gemm_eff | 0.5-1.0 | achieved efficiency of an expert's GEMM inside a grouped GEMM over a dense GEMM of the same FLOPs: DeepGEMM's grouped contiguous layout reaches 1,233-1,297 TFLOP/s on H800 FP8 against up to 1,550 for its plain GEMMs (0.80-0.84; deepseek-ai/DeepGEMM README, performance tables); Transformer Engine's GroupedLinear issues one GEMM per expert on several streams (transformer_engine/pytorch/module/grouped_linear.py), no better; below 0.5 a grouped GEMM would lose to running the experts one after another at dense efficiency |
| layer_fixed_s | 0-3e-3 s | exposed host-side time per MoE layer per micro-batch (forward and backward together): dropless routing syncs the device to learn the tokens per expert (Megatron-core's MoEAlltoAllTokenDispatcher.preprocess moves the counts to the host for the all-to-all split sizes and the grouped GEMM), which drains the GPU's queue, so the launches of the router, permutation and grouped-GEMM kernels that follow (tens per layer, 4-10 us each: CUDA's launch latency) show. 3 ms is three hundred such launches at 10 us, more than a layer issues besides its expert GEMMs (expert_gemm_issue_s prices those); 0 when everything is captured in CUDA graphs |
| expert_gemm_issue_s | 0-3.34e-5 s | host time per local expert in one grouped call, beside the call's GEMMs: Megatron-core's TEGroupedMLP runs MLP-in (with the gate) and MLP-out as Transformer Engine GroupedLinear layers, each of which loops over the rank's local experts on the host before its first GEMM (forward: split and quantize each expert's input, look up each cached weight copy, allocate the output; backward: gather each expert's main-gradient buffer and quantizer, split the output gradient), then issues one cuBLASLt GEMM per expert (transformer_engine/pytorch/module/grouped_linear.py at d0067d0; TE issue 1499: these CPU overheads dominate the GEMMs). The device, synchronised with the host by the dispatcher for the tokens per expert, waits for that loop, so a call takes local experts x this plus its GEMMs (cost/moe.expert_host_s). 0 is one launch for all experts with no host loop (DeepGEMM's grouped GEMM, or a CUDA graph); the upper end is the one published per-expert measurement of the loop: 8 experts of 128 tokens (N = K = 2048, NVFP4 on B200) take 0.267 ms, 33.4 us an expert with its GEMM under it (TE PR 3134, benchmark_grouped_linear.py; 0.069 ms as one CUTLASS launch), which bounds the host loop alone from above |

Grouped-GEMM tile padding (cost/moe.py GROUPED_GEMM_TILE_ROWS) is not fitted: it is the tile
height of the Hopper/Blackwell GEMM kernels.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeParams:
    """The mixture-of-experts cost model's fitted parameters, each checked against its range."""
    dropless_imbalance: float
    combined_1f1b_hidden_fraction: float
    grouped_gemm_eff: float
    layer_fixed_s: float
    expert_gemm_issue_s: float

    def __post_init__(self) -> None:
        for f in fields(self):
            lo, hi = RANGES[f.name]
            value = getattr(self, f.name)
            assert lo <= value <= hi, f"{f.name} {value} outside its physical range [{lo}, {hi}]"

    def on_bound(self, rel_tol: float = 1e-9) -> dict[str, str]:
        """name -> 'lower' | 'upper' for each value on its range's bound."""
        out = {}
        for f in fields(self):
            lo, hi = RANGES[f.name]
            value = getattr(self, f.name)
            span = (hi - lo) * rel_tol
            if value <= lo + span:
                out[f.name] = "lower"
            elif value >= hi - span:
                out[f.name] = "upper"
        return out


# (lo, hi) of each parameter, in its own unit (module docstring table says why)
RANGES: dict[str, tuple[float, float]] = {
    "dropless_imbalance": (1.07, 2.2),
    "combined_1f1b_hidden_fraction": (0.0, 1.0),
    "grouped_gemm_eff": (0.5, 1.0),
    "layer_fixed_s": (0.0, 3e-3),
    "expert_gemm_issue_s": (0.0, 3.34e-5),
}

# What the MoE cost model used before any of them was fitted: the assumed imbalance 1.1, the
# fraction measured from the one overlap pair, grouped GEMMs at dense efficiency, no fixed cost,
# no host time per expert GEMM.
# Each cross-validation fold starts its search here (cost/moe_fit.py).
UNFITTED = MoeParams(dropless_imbalance=1.1, combined_1f1b_hidden_fraction=0.46,
                     grouped_gemm_eff=1.0, layer_fixed_s=0.0, expert_gemm_issue_s=0.0)

# Fitted on every MoE anchor table (cost/moe_fit.fit over all of them; `paraplan accuracy --moe
# --write` records the folds in cost/published/moe_crossval.yaml, and
# tests/validation/test_moe_fit.py checks the fit still lands here).
FITTED = MoeParams(dropless_imbalance=1.1, combined_1f1b_hidden_fraction=0.8,
                   grouped_gemm_eff=1.0, layer_fixed_s=0.0, expert_gemm_issue_s=3e-5)

_ACTIVE: ContextVar[MoeParams] = ContextVar("moe_params", default=FITTED)


def active() -> MoeParams:
    """The parameters the MoE cost model prices with: FITTED, unless `using` overrides them."""
    return _ACTIVE.get()


@contextmanager
def using(params: MoeParams):
    """Price with `params` inside the block (cost/moe_fit.py's folds). cost/coefficients keys
    its memos of what reads them (an MoE layer's costs) by the parameters in force as well as
    by the instance, so one instance may be priced under many."""
    token = _ACTIVE.set(params)
    try:
        yield params
    finally:
        _ACTIVE.reset(token)
