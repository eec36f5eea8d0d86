"""Per-stage linear coefficients of one outer configuration: the simulator's contract with the
formulations and with exhaustive search.

For an `Outer` (degrees, micro-batching, modes), every quantity of an iteration is linear in
the per-stage layer counts n_s and full-recompute counts r_s, apart from two maxima:

    T_s   = stage_time_s[s] + n_s*layer_time_s[s] + r_s*recompute_time_s[s]
            (one micro-batch, forward + backward, on stage s, exposed communication included)
    D_s   = stage_sync_time_s[s] + n_s*layer_sync_time_s[s]
            (after the last backward: exposed gradient sync, parameter gather, optimizer step)
    M_s   = stage_mem_bytes[s] + n_s*(layer_state_bytes[s] + layer_act_bytes[s])
            - r_s*(layer_act_bytes[s] - layer_ckpt_bytes[s])           <= capacity_bytes[s]
    iteration_time = (m - 1/v) * max_s T_s + sum_s T_s / v + max_s D_s

(see cost/schedule.py for the schedule term). Shapes are (pp,). Per-layer parts are kept by
name so a breakdown can be reported without re-deriving anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache

import numpy as np

from paraplan.cost import comm, memory, moe, moe_params, scale, zero_bubble
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.framework import (behaviour, bucket_calls, gather_calls, grad_reduce_overlaps,
                                      recompute_regather_params, recompute_stops_early)
from paraplan.cost.flops import (BF16_BYTES, fp8_cast_elements, layer_elementwise_bytes, layer_matmuls,
                        layer_param_tensors, layer_params, layer_weight_sizes, logits_flops,
                        replicated_layer_params, tp_gather_width)
from paraplan.cost.flops import embedding_params, gemm_output_elements, torchtitan_sac_recomputed_flops
from paraplan.cost.flops import moe_attention_view, moe_dense_view
from paraplan.cost.errors import ConfigError
from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost.objective import copied_with
from paraplan.cost.pipeline_split import slot_relief_bytes
from paraplan.cost.stage_memory import memory_base, plan_memory, stage_columns, stage_values
from paraplan.cost.specs import (Attention, NodeGroup, Framework, GpuSpec, Instance, JobSpec, Link, ModelSpec,
                        Outer, PipelineSchedule, Precision, Recompute, RecomputeModule, ZeroBubble)

# Backward of a linear layer = input-gradient + weight-gradient matmuls of the forward's size.
BACKWARD_LINEAR_FACTOR = 2.0
# FlashAttention backward: recomputes QK^T, then dV, dP, dQ, dK: 5 matmuls vs 2 forward.
BACKWARD_FLASH_FACTOR = 2.5
# Elementwise kernels: backward reads the saved input and the output gradient and writes the
# input gradient: about twice the forward traffic.
BACKWARD_ELEMENTWISE_FACTOR = 2.0
# Adam step traffic per parameter shard: read+write fp32 master, m, v (24), read fp32 grad (4),
# write bf16 weight (2).
ADAM_STEP_BYTES_PER_PARAM = 30
# Transformer Engine's fused cast-transpose: read a bf16 element, write it as FP8 twice (the
# row-major copy and the transpose the weight-gradient GEMM needs): 2 + 1 + 1 bytes.
FP8_CAST_BYTES_PER_ELEMENT = 4
# Unfused attention moves the b*a*s*s score tensor through HBM six times forward: the QK^T GEMM
# writes it, the fused scale-mask-softmax reads and writes it, dropout reads and writes it, and
# the PV GEMM reads it (both GEMMs have K = head dim, so that traffic is not hidden by their
# FLOPs); backward twice that (BACKWARD_LINEAR_FACTOR).
STANDARD_ATTENTION_SCORE_PASSES = 6
# the key length of FlashAttention-2's benchmark point (GpuSpec.fa2_benchmark_flops_per_s: 8k
# tokens, causal, head dim 128), where the key-length curve below is read against it
ATTENTION_BENCHMARK_KEYS = 8192
# FlashAttention's throughput grows with the key length of a call: a kernel launch and the
# pipeline fill of each tile are fixed costs. eff(n) = attention_eff * n / (n + n_half), n_half =
# 300 keys. FlashAttention-2 on A100, causal, head dim 128, forward + backward (Dao 2023, arXiv
# 2307.08691, Fig. 4 (d)): 99, 133, 155, 173, 182, 189 TFLOP/s at 512, 1k, 2k, 4k, 8k, 16k keys.
# Scaled through its 2k point, n / (n + 300) follows that curve within 8% from 1k to 16k keys
# (0.89, 1, 1.07, 1.11, 1.13 of 2k's rate against the figure's 0.86, 1, 1.12, 1.17, 1.22: a
# little fast below 2k, slow above) and is 13% fast at 512. The four panels of Figs. 4 and 7
# (A100, H100; head dim 64, 128) are each fitted best at n_half = 480-550 (within 1%), but the
# model with 500 (with Fig. 4 (d)'s 182 for cost/fit.py's A100 point, every fitted value
# refitted) cross-validated no better: leave-one-family-out MAPE 5.43% -> 5.6%, MosaicML 5.3% ->
# 5.7%, torchtitan 8.0% -> 8.3%, NeMo 5.2% -> 4.9%, coverage 84.9% -> 84.1%; it is kept.
# Context parallelism pays it per ring step, priced at seq_len / cp keys. Transformer Engine's
# ring (AttnFuncWithCPAndKVP2P, read at d0067d0) calls the kernel once per step and direction:
# step 0 causal on the rank's s/cp queries and keys; the others unmasked, on s/cp queries and
# the s/(2cp) keys of the sender's first chunk, or on the rank's second chunk's s/(2cp) queries
# and all s/cp keys. The curve was read on causal calls, whose query rows see n/2 keys on
# average; an unmasked call of n keys sits near the causal curve's 2n: s/cp for the first kind
# (as priced), 2s/cp for the second (priced slower). Pricing every step at s/(2cp) or at 2s/cp
# moves the long-context MoE anchors with cp > 1 (32k-128k) by at most 1 point (docs/moe.md).
ATTENTION_HALF_KEYS = 300
# Ring attention (context parallelism) merges each step's partial result into the running one:
# forward, out = out * exp(lse - lse') + out_step * exp(lse_step - lse') on an fp32 accumulator
# (read 4 + write 4) from the step's bf16 output (read 2) per output element; backward adds each
# step's dQ into an fp32 accumulator (read 4 + write 4 + read 2 of the step's bf16 dQ) and dK,
# dV into the block that travels on (the same bytes). Transformer Engine's
# AttnFuncWithCPAndKVP2P and torch's _templated_ring_attention both merge per step this way.
CP_MERGE_BYTES_PER_ELEMENT = 10


class StageParts(Sequence):
    """Each stage's named extras (seconds per micro-batch), read as a list of dicts
    (`parts[s][name]`), made on demand from per-stage columns: the planner builds coefficients
    for thousands of configurations and reads the names only for the plans it reports."""

    __slots__ = ("_pp", "_cols")

    def __init__(self, pp: int):
        self._pp = pp
        self._cols: list[tuple[str, object]] = []  # (name, a list of pp values or {stage: value})

    def add(self, name: str, values) -> None:
        """A column: a value per stage (a list), or for some stages ({stage: value})."""
        self._cols.append((name, values))

    def totals(self) -> np.ndarray:
        """Each stage's sum of its parts, added in the order they were added (as summing the
        stage's dict would)."""
        out = np.zeros(self._pp)
        for _, values in self._cols:
            if isinstance(values, dict):
                for s, x in values.items():
                    out[s] += x
            else:
                out += values
        return out

    def __len__(self) -> int:
        return self._pp

    def __getitem__(self, s):
        if isinstance(s, slice):
            return [self[i] for i in range(*s.indices(self._pp))]
        if s < 0:
            s += self._pp
        if not 0 <= s < self._pp:
            raise IndexError(s)
        out = {}
        for name, values in self._cols:
            if isinstance(values, dict):
                if s in values:
                    out[name] = values[s]
            else:
                out[name] = values[s]
        return out


@dataclass(frozen=True)
class StageCoefficients:
    """One outer configuration's cost terms per stage and layer: the arrays formulations read."""
    outer: Outer
    layers: int
    layer_time_s: np.ndarray
    recompute_time_s: np.ndarray
    stage_time_s: np.ndarray
    layer_sync_time_s: np.ndarray
    stage_sync_time_s: np.ndarray
    layer_state_bytes: np.ndarray
    layer_act_bytes: np.ndarray
    layer_ckpt_bytes: np.ndarray
    stage_mem_bytes: np.ndarray
    capacity_bytes: np.ndarray
    # named parts, per micro-batch (layer_parts sum to layer_time_s, etc.), for breakdowns
    layer_parts: dict[str, float] = field(default_factory=dict)
    stage_parts: list[dict[str, float]] = field(default_factory=list)
    overlapped_per_layer_s: dict[str, float] = field(default_factory=dict)
    in_flight: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # per-operator tensor partitions the layer terms were priced with (cost/partition.py);
    # empty: Megatron 1-D (megatron_layer)
    partitions: tuple[tuple[str, str], ...] = ()
    # layers stage 0's first model chunk must hold (n_0 / v >= this): an MoE model's dense
    # prefix, priced on the first stage (build); 1 otherwise, the formulations' k_s >= 1
    first_chunk_min_layers: int = 1
    # the parts of stage_mem_bytes that are stashed activations (times in_flight, with the
    # fragmentation allowance) and parameter state beyond the layer columns: the dense
    # prefix's difference from as many MoE layers, on the first stage (zeros otherwise). A
    # schedule holding another number of micro-batches (cost/dualpipe.py) rescales the former
    stage_act_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    stage_state_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # per stage, the time one layer takes out of the stage's pass through the fill and drain
    # under a zero-bubble schedule (k W per layer, cost/zero_bubble.py); empty: 1F1B / interleaved
    layer_drain_saving_s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def pp(self) -> int:
        return self.outer.pp


def in_flight_micro_batches(pp: int, m: int, v: int) -> np.ndarray:
    """Micro-batches whose activations stage s holds at its peak, in units of a whole stage.

    1F1B: stage s runs pp-s forwards before its first backward (Narayanan et al. SC'21, Sec 2.2).
    Interleaved: Megatron-LM warms up 2*(pp-s-1) + (v-1)*pp chunks, then holds one more; each
    chunk is 1/v of the stage's layers.
    """
    return _in_flight(pp, m, v).copy()  # a copy: callers may scale theirs in place


@lru_cache(maxsize=4096)
def _in_flight(pp: int, m: int, v: int) -> np.ndarray:
    """in_flight_micro_batches, computed once per (pp, m, v): build and the bounds before
    pricing ask for a few hundred distinct ones thousands of times (issue 33)."""
    s = np.arange(pp)
    if v == 1:
        out = np.minimum(pp - s, m).astype(float)
    else:
        out = np.minimum(2 * (pp - s - 1) + (v - 1) * pp + 1, m * v) / v
    out.flags.writeable = False
    return out


def a2a_overlap_warmup_chunks(pp: int, m: int, v: int) -> np.ndarray:
    """Per stage, the model-chunk forwards Megatron-core runs alone before its combined 1F1B
    steady state with --overlap-moe-expert-parallel-comm (and as many backwards alone after
    it): without a pipeline the first micro-batch's forward
    (combined_1f1b_schedule_for_no_pipelining); interleaved, the usual warm-up
    2 (pp - s - 1) + (v - 1) pp plus the one extra forward the overlap schedules
    (schedules.py, get_pp_rank_microbatches), never more than the m v chunks there are."""
    if pp == 1:
        return np.array([min(1, m)], float)
    s = np.arange(pp)
    return np.minimum(2 * (pp - s - 1) + (v - 1) * pp + 1, m * v).astype(float)


def _mm_time_s(flops: float, gpu) -> float:
    """Achieved-efficiency model: eff(F) = eff_max * F / (F + F_half), i.e. a fixed per-call
    cost of F_half FLOPs at full speed. Small matmuls (small h, tp-split, short sequences) run
    less efficiently; large ones approach eff_max."""
    return (flops + gpu.matmul_half_flops) / (gpu.peak_flops_per_s * gpu.matmul_eff_max)


def fp8_matmul_time_s(flops: float, gpu) -> float:
    """An FP8 GEMM (Transformer Engine / torchao float8 linears): the same size model against
    the FP8 tensor-core peak and its own achieved efficiency."""
    if gpu.peak_fp8_flops_per_s is None:
        raise ConfigError(f"{gpu.name} has no FP8 tensor cores: train it in bf16")
    return (flops + gpu.matmul_half_flops) / (gpu.peak_fp8_flops_per_s * gpu.fp8_matmul_eff_max)


def _mem_time_s(n_bytes: float, gpu) -> float:
    return n_bytes / (gpu.hbm_bw_bytes_per_s * gpu.memory_eff)


# public names for other cost modules that price kernels the same way
matmul_time_s = _mm_time_s
memory_time_s = _mem_time_s


@dataclass(frozen=True, slots=True)
class Site:
    """Where one pipeline stage runs: its GPU type and the links its groups use.

    Each link comes with whether it is inter-node (which network efficiency applies)."""

    gpu: GpuSpec
    tp_link: tuple[Link, bool]
    cp_link: tuple[Link, bool]
    dp_link: tuple[Link, bool]
    # MoE plans with ep > 1 (cost/moe.py): the expert-parallel all-to-all's links and the
    # expert-data-parallel group's link; None: the site's dp_link stands for both
    ep_links: moe.EpLinks | None = None
    edp_link: tuple[Link, bool] | None = None
    # parallel folding (etp != tp): the expert tensor-parallel group's link; None: tp_link
    etp_link: tuple[Link, bool] | None = None
    # the stage's tensor-parallel degree where it differs from the outer configuration's (a
    # mixed cluster with a tp per node group, cost/class_coefficients.py); None: the outer's
    tp: int | None = None


def stage_outer(o: Outer, site: Site) -> Outer:
    """The Outer that prices a layer on `site`: `o` with the site's own tp, if it has one."""
    if site.tp is None or site.tp == o.tp:
        return o
    return _STAGE_OUTERS.read((id(o), site.tp), o, replace, o, tp=site.tp)


# stage_outer of recent (Outer, tp), by the Outer's identity (held in the entry): build asks for
# it per distinct site of every configuration, and a dataclass replace re-runs the validation
_STAGE_OUTERS = IdentityCache(4096)


@dataclass(frozen=True, slots=True)
class Placement:
    """Per-stage sites and per-edge pipeline links of one outer configuration.

    `edges[i]` is the link of the hand-off between the stages of `edge_pairs[i]`; `tie` the
    link between first and last stage (tied embeddings); `dp_ranks` the size of the gradient
    ring, which spans every replica of the stage (dp*cp on a homogeneous cluster)."""

    sites: tuple[Site, ...]
    edge_pairs: tuple[tuple[int, int], ...]
    edges: tuple[tuple[Link, bool], ...]
    tie: tuple[Link, bool]
    dp_ranks: int


def tp_overlap_exposed(comm_s: float, gemm_s: float, tp: int) -> float:
    """Exposed seconds of one tensor-parallel collective that Transformer Engine's userbuffers
    pipeline with the GEMM beside it: the GEMM and the collective are split into tp chunks and
    chunk i's transfer runs under chunk i+-1's GEMM (Wang et al., ASPLOS'23, "Overlap
    communication with dependent computation via decomposition"; TE's split all-gather and
    reduce-scatter overlap). The chunk at the end of the pipeline has nothing to hide behind,
    and a transfer longer than the GEMM shows the rest."""
    return max(comm_s - gemm_s, comm_s / tp)


def early_stopped_s(m: ModelSpec, b: int, tp: int, cp: int, sp: bool, gpu: GpuSpec, mlp_out_flops: float,
                    tp_f: float, fp8: bool) -> float:
    """Forward seconds of one layer that a non-reentrant checkpoint does not replay
    (cost/framework.Behaviour.recompute_early_stop): the MLP-out GEMM and its output store, its
    tensor-parallel collective (one of the forward's two all-reduces, or of its four sequence-
    parallel collectives), and the residual add (read 2 tensors, write 1) after it."""
    t = b * m.seq_len / cp
    gemm = (fp8_matmul_time_s if fp8 else _mm_time_s)(mlp_out_flops, gpu)
    store = _mem_time_s(BF16_BYTES * t * m.hidden / (tp if sp else 1), gpu)
    add = _mem_time_s(3 * BF16_BYTES * t * m.hidden / (tp if sp else 1), gpu)
    return gemm + store + add + (tp_f / (4 if sp else 2) if tp > 1 else 0.0)


def tp_backward_exposed(tp_f: float, qkv_gemm_s: float, mlp_in_gemm_s: float,
                        sp: bool) -> tuple[float, float]:
    """(exposed, hidden) seconds of one layer's backward tensor-parallel communication where the
    framework overlaps it as Megatron-LM's column-parallel linears do
    (tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication; on by default,
    --no-async-tensor-model-parallel-allreduce turns it off). `tp_f` is the forward's time
    (2 all-reduces, or with sequence parallelism 4 collectives of a quarter each).

    Without sequence parallelism the row-parallel linears (attention-out, MLP-out) need no
    backward communication and each column-parallel one (QKV, MLP-in) all-reduces its input
    gradient while its weight-gradient GEMM runs (as long as the forward GEMM). With sequence
    parallelism the gradients of the row-parallel outputs are all-gathered before their backward
    GEMMs can start (exposed); each column-parallel linear all-gathers its saved input shard
    again behind its input-gradient GEMM and reduce-scatters the input gradient behind its
    weight-gradient GEMM: 6 collectives against the forward's 4."""
    if sp:
        one = tp_f / 4
        exposed = 2 * one + sum(2 * max(0.0, one - g) for g in (qkv_gemm_s, mlp_in_gemm_s))
        return exposed, 6 * one - exposed
    one = tp_f / 2
    exposed = sum(max(0.0, one - g) for g in (qkv_gemm_s, mlp_in_gemm_s))
    return exposed, 2 * one - exposed


# homogeneous_placement of recent (cluster, degrees): build prices a configuration given no
# placement in the cluster's own rank order, and the configurations of one pipeline shape
# (micro-batch sizes and counts, modes) share it, and with its Site objects the layer costs
# build keeps per site. Keyed by the cluster's identity (held in the entry, so that its id is
# not reused while the entry lives) and what the placement reads of the Outer.
_PLACEMENTS = IdentityCache(4096)


def homogeneous_placement(cl: NodeGroup, o: Outer) -> Placement:
    key = (id(cl), o.tp, o.cp, o.dp, o.pp, o.virtual_stages > 1, o.ep, o.etp)
    return _PLACEMENTS.read(key, cl, _homogeneous_placement, cl, o)


def _homogeneous_placement(cl: NodeGroup, o: Outer) -> Placement:
    block = o.tp * o.cp * o.dp  # consecutive ranks of one pipeline stage
    site = Site(gpu=cl.gpu, tp_link=comm.group_link(cl, o.tp, 1),
                cp_link=comm.group_link(cl, o.cp, o.tp),
                dp_link=comm.group_link(cl, o.dp * o.cp, o.tp))
    etp = o.expert_tp
    if o.ep > 1 or o.etp is not None:  # expert ranks (cost/moe.py): etp consecutive ones, ep of
        # them etp apart, expert-data-parallel ones etp*ep apart
        site = replace(site, ep_links=moe.ep_links(cl, o.ep, etp),
                       edp_link=comm.group_link(cl, moe.edp_ranks(o.dp * o.cp, o), etp * o.ep),
                       etp_link=comm.group_link(cl, etp, 1) if o.etp is not None else None)
    pp = o.pp
    pairs = [(s, s + 1) for s in range(pp - 1)] + ([(pp - 1, 0)] if o.virtual_stages > 1 and pp > 1 else [])
    edges = tuple(comm.pair_link(cl, a * block, block, (z - a) * block) for a, z in pairs)
    return Placement(sites=(site,) * pp, edge_pairs=tuple(pairs), edges=edges,
                     tie=comm.pair_link(cl, 0, block, (pp - 1) * block), dp_ranks=o.dp * o.cp)


@dataclass(frozen=True)
class LayerTerms:
    """One transformer layer, one micro-batch, on one GPU of a stage: the costs that depend on
    how the layer's operators are partitioned over the tensor-parallel group.

    `fwd_s`/`bwd_s` include the exposed tensor/context-parallel communication; `parts` split
    fwd+bwd by name (they sum to fwd_s + bwd_s); `rc_fwd_s` is the forward a full recompute
    replays. Memory: `act_bytes` stashed for backward, `ckpt_bytes` kept when fully recomputed,
    `workspace_bytes` transient while the layer runs (backward buffers, double buffers).
    Per iteration: `replicated_params` weight parameters a GPU holds beyond its 1/tp share
    (latent attention's down projections; operators split by tokens, cost/partition.py: their
    weights, gradients and optimizer state
    are replicated over the group, and they join the layer's data-parallel gradient sync and
    optimizer step), `grad_sync_s` the all-reduce of those weights' gradients over the group,
    which precedes the data-parallel sync (0 for Megatron's splits)."""

    fwd_s: float
    bwd_s: float
    rc_fwd_s: float
    parts: dict[str, float]
    overlapped: dict[str, float]
    act_bytes: float
    ckpt_bytes: float
    workspace_bytes: float
    replicated_params: float = 0.0
    grad_sync_s: float = 0.0
    per_iteration_s: float = 0.0  # compute once per iteration (FP8 weight casts a framework caches)
    # MoE: routed-expert weight parameters a GPU holds (its experts / ep, each 1/tp), whose
    # gradients are reduced over the expert-data-parallel group (cost/moe.py)
    expert_params: float = 0.0
    # MoE with job.moe_a2a_overlap: the all-to-all seconds (forward + backward) a steady-state
    # pair of micro-batches hides; the schedule's unpaired warm-up forwards and cool-down
    # backwards cannot hide them (build charges those once per iteration)
    a2a_hidden_s: float = 0.0


def moe_layer(inst: Instance, o: Outer, site: Site, net: NetEfficiency) -> LayerTerms:
    """One MoE layer under Megatron 1-D tensor parallelism: its attention view (attention and
    shared MLP, cost/flops.moe_attention_view) as a dense layer, plus cost/moe.py's router,
    experts, permutation, all-to-all and the routed tokens' tp collectives (all exposed: the
    token dispatcher's collectives are not overlapped). Without a shared MLP, the MLP's half of
    the view's exposed tp communication is replaced by the routed tokens' pair (an
    approximation in backward, where the view overlaps its collectives unevenly)."""
    m = inst.model
    lt = _expert_free("view", inst, o, site, net, 0,
                      lambda: megatron_layer(_with_model(inst, moe_attention_view(m)), o, site, net))
    mm = fp8_matmul_time_s if inst.job.precision is Precision.FP8 else _mm_time_s
    x = moe.expert_terms(inst, o, site.gpu, site.etp_link or site.tp_link,
                         site.ep_links or site.dp_link, net, mm, _mem_time_s)
    per_iteration_s = lt.per_iteration_s
    if inst.job.precision is Precision.FP8:  # the experts' stand-alone casts (moe.py)
        cast_f, cast_b, cast_w = (_mem_time_s(FP8_CAST_BYTES_PER_ELEMENT * n, site.gpu)
                                  for n in moe.expert_fp8_cast_elements(m, o))
        if behaviour(inst.job.framework).fp8_weight_cache:
            per_iteration_s += cast_w
        else:
            cast_f += cast_w
        x = replace(x, compute_f_s=x.compute_f_s + cast_f, compute_b_s=x.compute_b_s + cast_b)
    view_mlp_tp = 0.0 if m.moe.shared_ffn else lt.parts["tp_comm"] / 2
    tp_f = x.tp_f_s - view_mlp_tp / 2
    tp_b = x.tp_b_s - view_mlp_tp / 2
    parts = dict(lt.parts)
    parts["compute"] += x.compute_f_s + x.compute_b_s
    parts["tp_comm"] += tp_f + tp_b
    overlapped = dict(lt.overlapped)
    a2a_f, a2a_b, hidden = x.a2a_f_s, x.a2a_b_s, 0.0
    if ((moe.a2a_overlap_applies(inst.job, o) or moe.dualpipe_applies(inst.job, o))
            and x.a2a_f_s + x.a2a_b_s > 0):
        # combined 1F1B, or DualPipe's forward/backward chunk pairs (cost/dualpipe.py): the
        # all-to-alls hide behind the paired micro-batch's compute; what
        # shows is split between the directions in proportion (cost/moe.a2a_overlap_split).
        # The hidden seconds slow that compute by NetEfficiency.overlap_slowdown (_layer_costs).
        exposed, hidden = moe.a2a_overlap_split(x.a2a_f_s + x.a2a_b_s, parts["compute"],
                                                moe.a2a_hidden_fraction(inst.job, o))
        share = exposed / (x.a2a_f_s + x.a2a_b_s)
        a2a_f, a2a_b = x.a2a_f_s * share, x.a2a_b_s * share
        overlapped["ep_a2a"] = hidden
    elif moe.shared_overlap_applies(inst.job, o):
        # the shared expert's GEMMs run on their own stream while the all-to-alls are in
        # flight, in each direction (cost/moe.shared_mlp_times_s); the rest shows
        sh_f, sh_b = moe.shared_mlp_times_s(m, o, site.gpu, mm)
        a2a_f, hid_f = moe.a2a_overlap_split(x.a2a_f_s, sh_f)
        a2a_b, hid_b = moe.a2a_overlap_split(x.a2a_b_s, sh_b)
        overlapped["ep_a2a"] = hid_f + hid_b
    fwd = lt.fwd_s + x.compute_f_s + a2a_f + tp_f
    bwd = lt.bwd_s + x.compute_b_s + a2a_b + tp_b
    parts["ep_a2a"] = a2a_f + a2a_b
    return LayerTerms(fwd_s=fwd, bwd_s=bwd, rc_fwd_s=lt.rc_fwd_s + fwd - lt.fwd_s, parts=parts,
                      overlapped=overlapped, act_bytes=lt.act_bytes + x.act_bytes,
                      ckpt_bytes=lt.ckpt_bytes, workspace_bytes=lt.workspace_bytes,
                      per_iteration_s=per_iteration_s, expert_params=x.params,
                      a2a_hidden_s=hidden)


# what megatron_layer reads of a dense model's Outer (besides the site): configurations equal in
# these price a dense layer alike (solver/bounds/unpriced.py keys its floors by them;
# tests/cost/test_layer_floor.py checks the other fields change nothing)
DENSE_LAYER_FIELDS = ("tp", "cp", "micro_batch", "sequence_parallel", "recompute")
# and of an MoE model's (moe_layer): its expert layout, and the pipeline, which decides whether
# the all-to-all overlaps apply (moe.a2a_overlap_applies, moe.dualpipe_applies)
MOE_LAYER_FIELDS = DENSE_LAYER_FIELDS + ("ep", "etp", "pp", "virtual_stages")


def module_recompute_s(job, m: ModelSpec, b: int, tp: int, cp: int, sp: bool, gpu: GpuSpec,
                       mms) -> float:
    """Seconds one layer spends in backward rebuilding what job.recompute_modules discards
    (cost/specs.RecomputeModule), one micro-batch: `layernorm` reruns each norm, a
    memory-bound pass reading its bf16 input and writing its output (th/r each); `mla_up_proj`
    reruns the up projections' GEMMs (the column-parallel calls of attention_projections) and
    writes Q, K and V (2t(q + k + v)/tp). The experts' `moe_act` is priced in cost/moe.py."""
    if not job.recompute_modules:
        return 0.0
    t = b * m.seq_len / cp
    r = tp if sp else 1
    out = 0.0
    if RecomputeModule.LAYERNORM in job.recompute_modules:
        norms = 1 if m.parallel_blocks else m.norms_per_layer
        out += _mem_time_s(norms * 2 * BF16_BYTES * t * m.hidden / r, gpu)
    if RecomputeModule.MLA_UP_PROJ in job.recompute_modules and m.mla is not None:
        mm = fp8_matmul_time_s if job.precision is Precision.FP8 else _mm_time_s
        n = len(mms.attn_in)
        out += sum(mm(f, gpu) for f, rep in zip(mms.linear_calls[:n], mms.attn_in_replicated)
                   if f and not rep)
        q, k, v, _ = m.attention_widths
        out += _mem_time_s(BF16_BYTES * t * (q + k + v) / tp, gpu)
    return out


def attention_efficiency(job, gpu: GpuSpec, keys: float) -> float:
    """Achieved fraction of the bf16 peak of the fused attention core, in calls of `keys` keys.

    Transformer Engine (Behaviour.te_fused_attention) runs at the benchmark of the kernel it
    calls: cuDNN's fused attention (job.cudnn_attention, its default, preferred on Hopper and
    newer), cudnn_attention_speedup times FlashAttention-2's, or Dao's FlashAttention-2
    (GpuSpec.fa2_benchmark_flops_per_s, read at ATTENTION_BENCHMARK_KEYS). Measured so by two
    sets of published runs: NeMo 24.07's H100 rows (FlashAttention-2 through TE) come out within
    -5..+6% priced at it, and Megatron-core's long-context Qwen3-235B anchors (cuDNN, 16k-128k
    tokens) need about cuDNN's own benchmark (docs/moe.md, "Long context"). The other
    frameworks' training steps reach one fitted fraction of FlashAttention-2's benchmark
    (attention_eff, cost/fit.py), whatever kernel they call; what costs them the rest is not
    identified. A GPU without a published benchmark runs at attention_eff under every
    framework. Both follow the key-length curve n / (n + ATTENTION_HALF_KEYS). Where cuDNN is
    measured per call length (GpuSpec.cudnn_attention_flops_per_s_by_keys: Blackwell, whose
    cuDNN lead over FlashAttention-2 grows with length), its cuDNN path runs at that curve
    instead (cudnn_measured_flops_per_s)."""
    curve = keys / (keys + ATTENTION_HALF_KEYS)
    if not behaviour(job.framework).te_fused_attention:
        return gpu.attention_eff * curve
    measured = gpu.cudnn_attention_flops_per_s_by_keys
    if job.cudnn_attention and measured:
        return cudnn_measured_flops_per_s(measured, keys) / gpu.peak_flops_per_s
    speedup = gpu.cudnn_attention_speedup if job.cudnn_attention else 1.0
    if gpu.fa2_benchmark_flops_per_s is None:
        return gpu.attention_eff * curve * speedup
    at_benchmark = ATTENTION_BENCHMARK_KEYS / (ATTENTION_BENCHMARK_KEYS + ATTENTION_HALF_KEYS)
    return gpu.fa2_benchmark_flops_per_s / gpu.peak_flops_per_s * curve / at_benchmark * speedup


def cudnn_measured_flops_per_s(points: tuple[tuple[int, float], ...], keys: float) -> float:
    """cuDNN's attention throughput in calls of `keys` keys from its measured (keys, FLOP/s)
    points: linear in log2(keys) between two points (the benchmark doubles the length from row
    to row); beyond the longest, the longest's (the kernel is saturated there: B200 1.33-1.45
    PFLOP/s from 16k to 128k keys); below the shortest, the shortest's on the key-length curve
    n / (n + ATTENTION_HALF_KEYS), which a shorter call's fixed costs follow."""
    ks = [k for k, _ in points]
    fs = [f for _, f in points]
    if keys <= ks[0]:
        return fs[0] * (keys / (keys + ATTENTION_HALF_KEYS)) / (ks[0] / (ks[0] + ATTENTION_HALF_KEYS))
    if keys >= ks[-1]:
        return fs[-1]
    return float(np.interp(np.log2(keys), np.log2(ks), fs))


def megatron_layer(inst: Instance, o: Outer, site: Site, net: NetEfficiency) -> LayerTerms:
    """Megatron-LM 1-D tensor parallelism (column-then-row splits, optional sequence parallel)."""
    if inst.model.moe is not None:
        return moe_layer(inst, o, site, net)
    m, gpu = inst.model, site.gpu
    tp, cp, b, sp = o.tp, o.cp, o.micro_batch, o.sequence_parallel
    flash = inst.job.attention is Attention.FLASH
    tokens = b * m.seq_len / cp
    tp_link, tp_inter = site.tp_link
    cp_link, cp_inter = site.cp_link

    mms = layer_matmuls(m, b, tp, cp, sp)
    fp8 = inst.job.precision is Precision.FP8
    mm = fp8_matmul_time_s if fp8 else _mm_time_s
    fwb = behaviour(inst.job.framework)
    # each linear call's forward GEMM seconds (0 for an absent call: adding it changes no sum)
    gemm = [mm(f, gpu) if f else 0.0 for f in mms.linear_calls]
    lin_f = sum(gemm)
    keys = m.seq_len / cp  # keys per kernel call (one ring step with cp > 1)
    attn_eff = attention_efficiency(inst.job, gpu, keys)
    attn_f = mms.attention_core / (gpu.peak_flops_per_s * attn_eff)
    if flash:
        attn_b = BACKWARD_FLASH_FACTOR * attn_f
    else:
        attn_f = 2 * _mm_time_s(mms.attention_core / 2, gpu)
        # the b x heads x s x s scores: tokens (= b * s / cp local queries) x s keys per head
        score_bytes = STANDARD_ATTENTION_SCORE_PASSES * BF16_BYTES * m.heads / tp * tokens * m.seq_len
        attn_f += _mem_time_s(score_bytes, gpu)
        attn_b = BACKWARD_LINEAR_FACTOR * attn_f
    elem_f = _mem_time_s(layer_elementwise_bytes(m, b, tp, cp, sp), gpu)
    cast_f = cast_b = weight_cast = 0.0
    if fp8:  # stand-alone casts to FP8 (with the transposes the other GEMM of backward reads)
        cast_elems_f, cast_elems_b, cast_elems_w = fp8_cast_elements(
            m, b, tp, cp, fwb.fp8_dynamic_scaling, fwb.fp8_fused_input_casts, sp)
        cast_f = _mem_time_s(FP8_CAST_BYTES_PER_ELEMENT * cast_elems_f, gpu)
        cast_b = _mem_time_s(FP8_CAST_BYTES_PER_ELEMENT * cast_elems_b, gpu)
        weight_cast = _mem_time_s(FP8_CAST_BYTES_PER_ELEMENT * cast_elems_w, gpu)
        if not fwb.fp8_weight_cache:  # cast again by every micro-batch's forward
            cast_f, weight_cast = cast_f + weight_cast, 0.0
    epi_f, epi_b = gemm_output_elements(m, b, tp, cp, sp)  # GEMM output stores (its docstring)
    compute_f = lin_f + attn_f + elem_f + cast_f + _mem_time_s(BF16_BYTES * epi_f, gpu)
    compute_b = (BACKWARD_LINEAR_FACTOR * lin_f + attn_b + BACKWARD_ELEMENTWISE_FACTOR * elem_f + cast_b
                 + _mem_time_s(BF16_BYTES * epi_b, gpu))

    # tensor parallel: 2 all-reduces forward, 2 backward (with sp: all-gather + reduce-scatter
    # pairs of the same ring volume); the forward's are on the critical path (Megatron-LM's
    # default, no TP overlap); the backward's as the framework runs them (tp_backward_exposed).
    # Latent attention gathers its latents instead of the layer input (flops.tp_gather_width):
    # its pair is priced as one all-reduce of the mean of the two widths
    act_bytes = tokens * m.hidden * BF16_BYTES
    tp_f = 2 * comm.all_reduce_time_s(act_bytes, tp, tp_link, tp_inter, net, tree=False)
    if m.mla is not None:
        attn_bytes = tokens * (tp_gather_width(m) + m.hidden) / 2 * BF16_BYTES
        tp_f = tp_f / 2 + comm.all_reduce_time_s(attn_bytes, tp, tp_link, tp_inter, net, tree=False)
    tp_b = tp_f
    tp_hid_f = tp_hid_b = 0.0
    if tp > 1 and fwb.tp_backward_async and not (inst.job.tp_comm_overlap and sp and not tp_inter):
        col, _, mlp_in, _ = mms.groups(gemm)
        tp_b, tp_hid_b = tp_backward_exposed(tp_f, col, mlp_in, sp)
    if inst.job.tp_comm_overlap and sp and tp > 1 and not tp_inter:
        # with sequence parallelism the 2 all-reduces are 4 collectives of equal time (all-gather
        # before QKV and MLP-in, reduce-scatter after attention-out and MLP-out), each pipelined
        # with the GEMM beside it; backward pairs them with the dgrad + wgrad GEMMs
        beside = mms.groups(gemm)
        one = tp_f / len(beside)
        exp_f = sum(tp_overlap_exposed(one, g, tp) for g in beside)
        exp_b = sum(tp_overlap_exposed(one, BACKWARD_LINEAR_FACTOR * g, tp) for g in beside)
        tp_hid_f, tp_hid_b = tp_f - exp_f, tp_b - exp_b
        tp_f, tp_b = exp_f, exp_b

    # context parallel: a ring of cp - 1 steps (Liu et al. 2023, Ring Attention; Megatron-core
    # / Transformer Engine and torch context_parallel). Causal load balance (each rank holds
    # sequence chunks i and 2cp-1-i) gives every step 1/cp of the attention core
    # (tests/cost/test_cp_attention_work.py counts Transformer Engine's sections). Each step
    # computes on the block in hand while the next K,V block arrives (double buffering: one
    # block ahead, no more), so a step's transfer hides only behind that step's attention;
    # backward also sends dK, dV on. Merging each step's partial output (forward) and
    # accumulating dQ, dK, dV (backward) are memory-bound passes (CP_MERGE_BYTES_PER_ELEMENT).
    q_w, k_w, v_w, o_w = m.attention_widths
    kv_bytes = tokens * (k_w + v_w) / min(tp, m.kv_heads) * BF16_BYTES
    cp_f = cp_b = cp_exp_f = cp_exp_b = 0.0
    if cp > 1:
        steps = cp - 1
        step_f = comm.p2p_time_s(kv_bytes, cp_link, cp_inter, net)
        step_b = 2 * step_f
        cp_f, cp_b = steps * step_f, steps * step_b
        cp_exp_f = steps * max(0.0, step_f - attn_f / cp)
        cp_exp_b = steps * max(0.0, step_b - attn_b / cp)
        merge_f = _mem_time_s(steps * CP_MERGE_BYTES_PER_ELEMENT * tokens * o_w / tp, gpu)
        merge_b = _mem_time_s(steps * CP_MERGE_BYTES_PER_ELEMENT * tokens * (q_w + k_w + v_w) / tp, gpu)
        compute_f += merge_f
        compute_b += merge_b

    selective_extra = 0.0
    if o.recompute is Recompute.SELECTIVE:
        if inst.job.framework is Framework.TORCHTITAN:
            # op-level selective AC: every other mm and every op outside its save list (the
            # norms, rotary, activation, residual adds) run again before backward
            selective_extra = elem_f + sum(mm(f, gpu) for f in torchtitan_sac_recomputed_flops(m, b, tp, cp))
        elif not flash:  # Megatron: the attention core is recomputed (Korthikanti et al.)
            selective_extra = attn_f
    # job.recompute_modules: what the output-discarding checkpoints rebuild before backward
    selective_extra += module_recompute_s(inst.job, m, b, tp, cp, sp, gpu, mms)
    fwd = compute_f + tp_f + cp_exp_f
    bwd = compute_b + tp_b + cp_exp_b + selective_extra
    # what a full recompute replays: the forward, less what the framework's checkpoint stops
    # before (cost/framework.recompute_stops_early: the MLP-out GEMM with its output store and its
    # share of the forward's tensor-parallel collectives, and the residual add after it)
    rc_fwd = fwd - selective_extra
    if recompute_stops_early(inst.job):
        rc_fwd -= early_stopped_s(m, b, tp, cp, sp, gpu, mms.linear_calls[-1], tp_f, fp8)
    fw, prec = inst.job.framework, inst.job.precision
    act1 = (memory.layer_activation_bytes(m, b, tp, cp, sp, flash, fw, prec)
            if o.recompute is Recompute.NONE else memory.selective_activation_bytes(m, b, tp, cp, sp, fw, prec))
    act1 -= memory.job_activation_savings_bytes(m, b, tp, cp, sp, inst.job)
    # latent attention's down projections are whole on every tp rank (flops.attention_projections):
    # held beyond the 1/tp share, and under sequence parallelism their gradients (each rank's
    # from its own tokens) are summed over the tp group once per iteration before the
    # data-parallel sync (Megatron-core finalize_model_grads: params marked sequence_parallel)
    rep = replicated_layer_params(m)
    rep_params = rep * (1 - 1 / tp)
    rep_sync = (comm.all_reduce_time_s(rep * inst.job.grad_reduce.bytes, tp, tp_link, tp_inter, net)
                if rep_params and sp else 0.0)
    return LayerTerms(
        fwd_s=fwd, bwd_s=bwd, rc_fwd_s=rc_fwd,
        parts={"compute": compute_f + compute_b + selective_extra, "tp_comm": tp_f + tp_b,
               "cp_comm_exposed": cp_exp_f + cp_exp_b},
        overlapped={"cp_comm": cp_f + cp_b - cp_exp_f - cp_exp_b, "tp_comm": tp_hid_f + tp_hid_b},
        act_bytes=act1, ckpt_bytes=memory.checkpoint_activation_bytes(m, b, tp, cp, sp),
        workspace_bytes=memory.backward_workspace_bytes(m, b, tp, cp), per_iteration_s=weight_cast,
        replicated_params=rep_params, grad_sync_s=rep_sync)


@dataclass(frozen=True)
class _LayerCosts:
    """A site's per-layer coefficients, derived from its LayerTerms plus ZeRO and dp sync."""

    layer_time: float
    recompute_time: float
    layer_sync: float
    grad_tail: float  # the last gradient bucket, exposed after the final backward
    parts: dict[str, float]
    overlapped: dict[str, float]
    terms: LayerTerms
    gather_s: float = 0.0  # ZeRO-3: one layer's parameter all-gather
    scatter_s: float = 0.0  # ZeRO-3: one layer's gradient reduce-scatter (per micro-batch)
    # FSDP inside a pipeline: a layer's gather as the step's first forward exposes it, the next
    # layer's prefetched behind it (its hidden part with the overlap slowdown)
    fill_gather_s: float = 0.0
    # what layer_sync adds up, none reading bwd_s: the whole gradient reduction (its exposed
    # part overlaps the backward where `sync_overlaps`), the weight gather after a sharded
    # step and the step itself (_costs_at_backward re-reads only bwd_s of them)
    grad_sync_s: float = 0.0
    sync_overlaps: bool = False
    after_sync_s: float = 0.0
    step_s: float = 0.0


def hidden_window(comm_s: float, prefetchable_s: float, compute_s: float) -> tuple[float, float]:
    """Exposed and hidden seconds of `comm_s` communication issued beside `compute_s` seconds
    of compute, of which only `prefetchable_s` can be issued ahead of the compute that needs
    it (the rest waits for its consumer: a bounded prefetch). Collectives on one link run one
    after the other, so their times add before they are set against the compute."""
    exposed = max(comm_s - compute_s, comm_s - prefetchable_s, 0.0)
    return exposed, comm_s - exposed


def _layer_costs(inst: Instance, o: Outer, site: Site, dp_n: int, net: NetEfficiency,
                 layer_fn) -> _LayerCosts:
    m, gpu = inst.model, site.gpu
    fw = behaviour(inst.job.framework)
    grad_bytes = inst.job.grad_reduce.bytes  # per element of every gradient reduction
    dp_link, dp_inter = site.dp_link
    lt = layer_fn(inst, o, site, net)
    fwd, bwd, rc_fwd = lt.fwd_s, lt.bwd_s, lt.rc_fwd_s
    kappa = net.overlap_slowdown

    # lp: the parameters one GPU holds, its 1/tp share plus any replicated over the group
    assert not (o.zero == 3 and lt.replicated_params), "token splits are not priced with ZeRO-3"
    lp = layer_params(m) / o.tp + lt.replicated_params
    ex = lt.expert_params  # MoE: the GPU's routed-expert weights, sharded over the edp group
    edp = moe.edp_ranks(dp_n, o) if ex else 1
    parts = dict(lt.parts)
    overlapped = dict(lt.overlapped)
    slow_terms = _overlap_slowdown_s(lt, net)

    # ZeRO-3 / FSDP, once per micro-batch: gather the layer's weights before forward and again
    # before backward (and, where the framework re-fetches, for the recompute pass), then
    # reduce-scatter its gradients; gathers are prefetched behind the neighbouring layer's
    # compute as far as the framework looks ahead (cost/framework.py). An MoE layer's routed
    # experts are sharded over the expert-data-parallel group instead (Megatron-FSDP shards
    # expert parameters over it, as the distributed optimizer does their state): their gather
    # and reduce-scatter run on that group's link, after the dense part's (one stream)
    # Inside a pipeline (memory.gathered_per_step) the same gathers and reduce-scatters run
    # once per step instead (the sync below), none per micro-batch.
    per_step = memory.gathered_per_step(o.zero, o.pp)
    ag = rs = 0.0
    z3 = {"f": (0.0, 0.0), "b": (0.0, 0.0), "b_rc": (0.0, 0.0)}
    if o.zero == 3 and (dp_n > 1 or edp > 1):
        if dp_n > 1:
            ag = comm.all_gather_time_s(lp * BF16_BYTES, dp_n, dp_link, dp_inter, net,
                                        gather_calls(fw, layer_param_tensors(m)))
            rs = comm.all_gather_time_s(lp * grad_bytes, dp_n, dp_link, dp_inter, net,
                                        bucket_calls(fw.scatter_bucket_params, lp))
        if edp > 1:
            e_link, e_inter = site.edp_link or site.dp_link
            ag += comm.all_gather_time_s(ex * BF16_BYTES, edp, e_link, e_inter, net,
                                         gather_calls(fw, moe.expert_param_tensors(m, o)))
            rs += comm.all_gather_time_s(ex * grad_bytes, edp, e_link, e_inter, net,
                                         bucket_calls(fw.scatter_bucket_params, ex))
        ahead = 1.0 if fw.prefetch_params is None else min(1.0, fw.prefetch_params / (lp + ex))
        # the recompute pass gathers the layer; the weights the framework releases before
        # backward are gathered once more (a share of the layer's calls and bytes)
        sizes = tuple(w / o.tp for w in layer_weight_sizes(m))
        gathers_rc = ag * (1 + recompute_regather_params(fw, sizes) / sum(sizes))
        z3["f"] = hidden_window(ag, ahead * ag, fwd)
        # backward: layer i's reduce-scatter is issued when its backward ends, on the same
        # data-parallel communicator as layer i-1's gather (NCCL runs a communicator's
        # collectives in issue order). A gather prefetched during layer i's backward is done
        # by then, and the reduce-scatter hides behind layer i-1; a gather issued only when
        # layer i-1 starts (no prefetch) queues behind the reduce-scatter, so both show.
        z3["b"] = hidden_window(ag + rs, ahead * (ag + rs), bwd)
        z3["b_rc"] = hidden_window(gathers_rc + rs, ahead * (gathers_rc + rs), bwd + rc_fwd)
    first_fwd = (0.0, 0.0)
    if per_step:  # the per-micro-batch windows stay empty; the gather's window is the step's first forward
        z3 = {"f": (0.0, 0.0), "b": (0.0, 0.0), "b_rc": (0.0, 0.0)}
        if ag:
            first_fwd = hidden_window(ag, ahead * ag, fwd)
    exp_f, hid_f = z3["f"]
    exp_b, hid_b = z3["b"]
    exp_rc, hid_rc = z3["b_rc"]
    z3_f = exp_f + kappa * hid_f
    z3_b = exp_b + kappa * hid_b
    z3_b_rc = exp_rc + kappa * hid_rc
    parts["zero3_comm_exposed"] = exp_f + exp_b
    parts["overlap_slowdown"] = kappa * (hid_f + hid_b) + slow_terms
    overlapped["zero3_comm"] = hid_f + hid_b

    # per layer, once per iteration: gradient sync and optimizer step
    shard = dp_n if o.zero >= 1 else 1
    step_s = _mem_time_s(lp / shard * ADAM_STEP_BYTES_PER_PARAM, gpu)
    if per_step:
        # FSDP inside a pipeline, once per step (memory.py's docstring): torch's REDUCE_GRAD
        # action runs the stage's reduce-scatters after its last backward, behind nothing of
        # its own. The gathers wait for the step's first forward (fill_gather_s; build)
        g_sync, g_exposed, ag_after, overlaps = rs, rs, 0.0, False
        step_s += _mem_time_s(ex / edp * ADAM_STEP_BYTES_PER_PARAM, gpu)
    elif o.zero == 3:
        g_sync, g_exposed, ag_after, overlaps = 0.0, 0.0, 0.0, False
        step_s += _mem_time_s(ex / edp * ADAM_STEP_BYTES_PER_PARAM, gpu)  # the expert shard's step
    else:
        gb = lp * grad_bytes
        calls = bucket_calls(fw.grad_bucket_params_zero2 if o.zero == 2 else fw.grad_bucket_params, lp)
        if o.zero == 0:
            g_sync = comm.all_reduce_time_s(gb, dp_n, dp_link, dp_inter, net, calls)
            ag_after = 0.0
        else:  # distributed optimizer: reduce-scatter grads, all-gather updated bf16 weights
            g_sync = comm.all_gather_time_s(gb, dp_n, dp_link, dp_inter, net, calls)
            ag_after = comm.all_gather_time_s(lp * BF16_BYTES, dp_n, dp_link, dp_inter, net, calls)
        # the group's weight-gradient all-reduce of token-split ops comes first (the same
        # gradients, then reduced over the data-parallel ranks); once per iteration
        g_sync += lt.grad_sync_s
        if lt.expert_params:  # MoE: expert gradients over the expert-data-parallel group
            e_sync, e_ag, e_step = _expert_sync(lt.expert_params, moe.edp_ranks(dp_n, o),
                                                site.edp_link or site.dp_link, o.zero, fw, grad_bytes,
                                                gpu, net)
            g_sync, ag_after, step_s = g_sync + e_sync, ag_after + e_ag, step_s + e_step
        # a layer's reduction overlaps the last micro-batch's backward of the layers below it,
        # where the framework release overlaps it at all (grad_reduce_overlaps)
        overlaps = _reduce_overlaps(inst.job, o)
        g_exposed = max(0.0, g_sync - bwd) if overlaps else g_sync
    g_hidden = g_sync - g_exposed
    overlapped["dp_grad_sync"] = g_hidden  # token-split ops' group all-reduce included
    # layer_time_floor_s is this less the ZeRO-3 terms (keep the two in step)
    return _LayerCosts(layer_time=fwd + bwd + z3_f + z3_b + slow_terms,
                       recompute_time=rc_fwd + z3_b_rc - z3_b,
                       layer_sync=g_exposed + kappa * g_hidden + ag_after + step_s + lt.per_iteration_s,
                       grad_tail=g_hidden, parts=parts, overlapped=overlapped, terms=lt,
                       gather_s=ag, scatter_s=0.0 if per_step else rs,
                       fill_gather_s=first_fwd[0] + kappa * first_fwd[1] if per_step else 0.0,
                       grad_sync_s=g_sync, sync_overlaps=overlaps, after_sync_s=ag_after, step_s=step_s)


def _costs_at_backward(u: _LayerCosts, lt: LayerTerms, net: NetEfficiency) -> _LayerCosts:
    """_layer_costs at `lt`, LayerTerms equal to u.terms but for bwd_s, from `u` (u's
    configuration gathers no ZeRO-3 layer per micro-batch: backward_lowers_only_syncs), the
    same floats: there bwd_s is read only by the layer time (fwd + bwd + two zero windows +
    slowdown) and the exposed gradient sync; everything else of `u` reads no bwd_s."""
    g_exposed = max(0.0, u.grad_sync_s - lt.bwd_s) if u.sync_overlaps else u.grad_sync_s
    g_hidden = u.grad_sync_s - g_exposed
    return copied_with(u, layer_time=lt.fwd_s + lt.bwd_s + 0.0 + 0.0 + _overlap_slowdown_s(lt, net),
                       layer_sync=g_exposed + net.overlap_slowdown * g_hidden + u.after_sync_s + u.step_s
                       + lt.per_iteration_s,
                       grad_tail=g_hidden, overlapped=dict(u.overlapped, dp_grad_sync=g_hidden), terms=lt)


def _overlap_slowdown_s(lt: LayerTerms, net: NetEfficiency) -> float:
    """Communication the layer terms already hide behind compute (the cp ring, P(q x q) shifts)
    slows that compute too."""
    return net.overlap_slowdown * sum(lt.overlapped.values())


def layer_time_floor_s(inst: Instance, o: Outer, site: Site, net: NetEfficiency = NetEfficiency(),
                       layer_fn=megatron_layer) -> float:
    """A lower bound of the layer time build gives a stage on `site` (StageCoefficients.
    layer_time_s) that reads nothing of the data-parallel ring: the layer's own forward and
    backward and the slowdown of what they overlap, without ZeRO-3's gathers and
    reduce-scatters (the only layer-time terms that read site.dp_link, each >= 0). The
    planner bounds a configuration with it before pricing its placement
    (solver/bounds/unpriced.floor_bounds_s). Both wait for the slowest of the job's ranks
    (build); an instance of one group of a mixed cluster counts fewer ranks, a lower wait."""
    lt = layer_fn(inst, o, site, net)
    slow = scale.slowest_rank_fraction(inst.cluster.num_gpus, net.rank_jitter_rel)
    return (lt.fwd_s + lt.bwd_s + _overlap_slowdown_s(lt, net)) * (1 + slow)


def sync_floor_s(inst: Instance, o: Outer, site: Site, dp_n: int, net: NetEfficiency = NetEfficiency(),
                 layer_fn=megatron_layer) -> tuple[float, float]:
    """(g, d): lower bounds of build's per-layer sync (StageCoefficients.layer_sync_time_s) and
    once-per-iteration stage sync (stage_sync_time_s) of a stage of `o` on `site` (its
    gradient ring's link) with a ring of `dp_n` ranks, priced by `layer_fn`, which the planner
    reads before pricing the configuration (solver/bounds/unpriced_memory.py). g is build's own
    term: the layer's gradient reduction (its exposed part and the overlap slowdown of its
    hidden part), the weight all-gather after a sharded step, the optimizer step and the
    per-iteration terms. d keeps of the stage's term the last bucket's exposure and the ZeRO-3
    reduce-scatter (build: grad_tail + scatter_s, on every stage) and leaves out what build adds
    on some stages, each >= 0: the embedding's sync on the end stages, FSDP's fill in a pipeline,
    the tied copy's all-reduce, the multi-token prediction layers. build's layer costs are keyed
    by whether the reduction overlaps (_shared_layer_costs), so they are this configuration's own."""
    lc = _layer_costs(inst, o, site, dp_n, net, layer_fn)
    return lc.layer_sync, lc.grad_tail + lc.scatter_s


def output_layer_time_s(inst: Instance, o: Outer, tp_last: int, gpu: GpuSpec) -> float:
    """The last stage's output layer per micro-batch on `gpu` at tp `tp_last`: the logits GEMM
    forward and backward, the loss over the logits, the GEMM's output stores and the final
    norm (build's "output_layer" stage part); it reads no link, so the planner's bound before
    placement reads it too (output_layer_floor_s)."""
    m, framework, b, cp, sp = inst.model, inst.job.framework, o.micro_batch, o.cp, o.sequence_parallel
    return _OUTPUT_LAYERS.read_pair((id(m), id(gpu), framework, b, cp, sp, tp_last), m, gpu,
                                    _output_layer_time_s, m, gpu, framework, b, cp, sp, tp_last)


def _output_layer_time_s(m: ModelSpec, gpu: GpuSpec, framework: Framework, b: int, cp: int, sp: bool,
                         tp_last: int) -> float:
    tokens = b * m.seq_len / cp
    emb_io = tokens * m.hidden * BF16_BYTES
    logits_mm = _mm_time_s(logits_flops(m, b, tp_last, cp), gpu)
    # the loss and whatever else the framework runs on the logits (cost/framework.py, loss_bytes_per_logit)
    ce_bytes = tokens * m.vocab / tp_last * behaviour(framework).loss_bytes_per_logit
    head = (1 + BACKWARD_LINEAR_FACTOR) * logits_mm + _mem_time_s(ce_bytes, gpu)
    # the logits GEMM's output store (forward) and its input gradient's (backward), as
    # flops.gemm_output_elements prices the layers' GEMMs
    head += _mem_time_s(BF16_BYTES * tokens * (m.vocab / tp_last + m.hidden), gpu)
    return head + 3 * _mem_time_s(4 * emb_io / (tp_last if sp else 1), gpu)  # final norm fwd + bwd


# output_layer_time_s of recent (model, GPU, framework, micro-batch, cp, sp, tp), by the model's
# and the GPU's identity (held in the entry): build and the bounds before pricing ask for it per
# configuration (issue 32)
_OUTPUT_LAYERS = IdentityCache(4096)


def output_layer_floor_s(inst: Instance, o: Outer, site: Site, net: NetEfficiency = NetEfficiency()) -> float:
    """A lower bound of the last stage's stage time (StageCoefficients.stage_time_s[-1]) that
    reads no link: its output layer (output_layer_time_s) times the slowest-rank wait build
    puts on every stage term. The stage's other parts (p2p hand-offs, ZeRO-3's unhidden
    gathers, multi-token prediction, and on a one-stage pipeline the embedding) are >= 0, and
    an MoE model's dense prefix, the one part that can be negative, sits on the first stage,
    which the planner's bound reads apart (dense_prefix_floor_s; on a one-stage pipeline the
    two add, as in build)."""
    slow = scale.slowest_rank_fraction(inst.cluster.num_gpus, net.rank_jitter_rel)
    return output_layer_time_s(inst, o, site.tp or o.tp, site.gpu) * (1 + slow)


def dense_layer_floor_s(inst: Instance, o: Outer, site: Site, net: NetEfficiency = NetEfficiency()) -> float:
    """layer_time_floor_s of an MoE model's dense prefix layer (its dense view,
    flops.moe_dense_view), 0 without a dense prefix. It reads of `o` only DENSE_LAYER_FIELDS:
    the planner keeps it by those (solver/bounds/unpriced.stage_floor_terms), where the MoE
    layer's floor beside it reads the expert layout and the pipeline too."""
    moe = inst.model.moe
    if moe is None or not moe.dense_layers:
        return 0.0
    return layer_time_floor_s(_with_model(inst, moe_dense_view(inst.model)), o, site, net)


def dense_prefix_floor_s(inst: Instance, o: Outer, site: Site, net: NetEfficiency = NetEfficiency(),
                         moe_floor_s: float | None = None, dense_floor_s: float | None = None) -> float:
    """A lower bound of the first stage's dense-prefix extra that reads nothing of the
    data-parallel ring (build's "dense_prefix" stage part, d x (dense layer - MoE layer), which
    is negative where the dense layer is the cheaper): d x (the dense layer's floor - the MoE
    layer's floor): exactly that extra without ZeRO-3, the only term the floors leave out. With
    ZeRO-3 a bound still: the first stage holds n >= d layers, and (n - d) x MoE layer + d x
    dense layer >= (n - d) x MoE floor + d x dense floor, which is n x MoE floor + this. 0
    without a dense prefix. `moe_floor_s`, `dense_floor_s`: the MoE layer's floor and
    dense_layer_floor_s, if the caller has them."""
    moe = inst.model.moe
    if moe is None or not moe.dense_layers:
        return 0.0
    dense = dense_layer_floor_s(inst, o, site, net) if dense_floor_s is None else dense_floor_s
    if moe_floor_s is None:
        moe_floor_s = layer_time_floor_s(inst, o, site, net)
    return moe.dense_layers * (dense - moe_floor_s)


def _expert_sync(params: float, ranks: int, link: tuple[Link, bool], zero: int, fw,
                 grad_bytes: int, gpu, net: NetEfficiency) -> tuple[float, float, float]:
    """Once per iteration, a GPU's expert weights over the expert-data-parallel group (ZeRO 0:
    all-reduce; 1 and 2: the distributed optimizer's reduce-scatter and all-gather, the state
    sharded over that group, as Megatron-core's distributed optimizer shards expert
    parameters): (gradient reduction, weight all-gather, optimizer step) seconds."""
    lk, inter = link
    gb = params * grad_bytes
    calls = bucket_calls(fw.grad_bucket_params_zero2 if zero == 2 else fw.grad_bucket_params, params)
    step = _mem_time_s(params / (ranks if zero >= 1 else 1) * ADAM_STEP_BYTES_PER_PARAM, gpu)
    if zero == 0:
        return comm.all_reduce_time_s(gb, ranks, lk, inter, net, calls), 0.0, step
    return (comm.all_gather_time_s(gb, ranks, lk, inter, net, calls),
            comm.all_gather_time_s(params * BF16_BYTES, ranks, lk, inter, net, calls), step)


# one stage row's inputs to max_layers_per_stage (their bytes, v, layers) -> its caps: the
# bound before pricing that reads memory (solver/bounds/unpriced_memory.py) computes the caps
# of build's own memory arrays, and build's no_split_fits then reads the same row again
# (GPT-3 175B on 1,024 A100: most of the configurations it prices). Each row's caps depend only
# on that row (every operation is per element), so a row cached from a batch is the caps a
# call on that row alone returns. Cleared when full: many instances in a test session.
_CAPS: dict[tuple, np.ndarray] = {}
_CAPS_MAX_ROWS = 100_000
_CAPS_BATCH_ROWS = 8  # the most rows of a batch whose rows are kept (max_layers_per_stage)


def _caps_key(state, act, ckpt, capacity, stage_mem, v: int, layers: int) -> tuple:
    return (state.tobytes(), act.tobytes(), ckpt.tobytes(), capacity.tobytes(), stage_mem.tobytes(), v, layers)


def max_layers_per_stage(state, act, ckpt, capacity, stage_mem, v: int, layers: int) -> np.ndarray:
    """Per stage, the most layers (a multiple of v, at most `layers`) that fit beside the stage's
    fixed memory with each layer at its least: its state plus its input checkpoints where full
    recomputation frees memory (per-layer bytes, in-flight micro-batches included). "Fit" is
    cost/schedule.fits's peak <= capacity evaluated with its own float operations, so a count
    whose peak equals the capacity is held: the quotient's floor, which rounding can put one
    below it, is only the first guess. One row (1-D float arrays of one shape) is read from
    the rows computed before (_CAPS); a batch of rows (2-D) leaves each of its rows there."""
    arrays = (state, act, ckpt, capacity, stage_mem)
    one_row = all(isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == np.float64 and a.shape == state.shape
                  for a in arrays)
    if one_row:
        key = _caps_key(*arrays, v, layers)
        got = _CAPS.get(key)
        if got is None:
            if len(_CAPS) >= _CAPS_MAX_ROWS:
                _CAPS.clear()
            got = _CAPS[key] = _max_layers_per_stage(*arrays, v, layers)
            got.flags.writeable = False
        return got
    n = _max_layers_per_stage(*arrays, v, layers)
    # only a batch of a few rows is kept: build reads again rows of the bounds' small batches
    # (GPT-3 175B on 1,024 A100: 63 rows of 187 kept), never those of a layer-plan grid or of
    # the tight class terms' blocks (the three-type, two-site row with partitions: 19 rows of
    # 72,615 kept from batches of over 64 rows read again, 405 of 52,727 from batches of 9 to
    # 64, each kept at about 3 us for a cap computed at about 50 us; a grid of 10^6 rows took
    # minutes and 6 GB to store)
    if n.ndim == 2 and len(n) <= _CAPS_BATCH_ROWS and all(np.asarray(a).dtype == np.float64 for a in arrays):
        # each row's bytes as one row alone would give them (C order: a row of a C-contiguous
        # array is contiguous); broadcast where a row is shared
        rows = [np.ascontiguousarray(a if np.shape(a) == n.shape else np.broadcast_to(a, n.shape)) for a in arrays]
        if len(_CAPS) + len(n) > _CAPS_MAX_ROWS:
            _CAPS.clear()
        for r in range(len(n)):
            row = n[r].copy()
            row.flags.writeable = False
            _CAPS.setdefault(_caps_key(*(a[r] for a in rows), v, layers), row)
    return n


def _max_layers_per_stage(state, act, ckpt, capacity, stage_mem, v: int, layers: int) -> np.ndarray:
    """max_layers_per_stage, computed. Each stage's count comes from the same float operations
    as the plain reading (tests/cost/test_parts11_caps_read.py keeps it), in fewer numpy calls:
    the memory-free pass only where some layer costs no memory, fit(n + 1) and fit(n) in one
    read (issue 33: 18,113 calls on the three-type, two-site row)."""
    saving = act - ckpt
    frees = saving > 0
    held = state + act  # fit's per-layer bytes before recompute, the same float on every read

    def fit(n: np.ndarray) -> np.ndarray:  # cost/schedule.stage_mem_bytes with r = n where it frees
        return stage_mem + n * held - np.where(frees, n, 0.0) * saving <= capacity

    least = state + np.where(frees, ckpt, act)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.floor(np.maximum(capacity - stage_mem, 0) / least)
    # nan and +inf to `layers`, then into [0, layers] (-inf to 0): fmin reads nan as missing
    n = np.maximum(np.fmin(n, layers), 0)
    if not (least > 0).all():  # memory does not grow with n
        n = np.where(least > 0, n, np.where(fit(float(layers)), layers, 0))
    for _ in range(64):  # the guess is off by a float step or two: move it onto the predicate
        both = fit(np.stack((n + 1, n)))  # fit(n + 1), fit(n) in one read
        up = (n < layers) & both[0]
        down = (n > 0) & ~both[1]
        if not (up.any() or down.any()):
            break
        n = n + up - down
    else:  # (a break leaves it on the predicate: checked only where the steps ran out)
        assert not ((n < layers) & fit(n + 1) | (n > 0) & ~fit(n)).any(), "max_layers_per_stage off the predicate"
    return (n // v) * v


def no_split_fits(state, act, ckpt, capacity, stage_mem, v: int, layers: int) -> bool:
    """Whether no layer split fits memory even with every layer fully recomputed: some stage
    cannot hold one chunk of v layers, or all together cannot hold the model's layers."""
    nmax = max_layers_per_stage(state, act, ckpt, capacity, stage_mem, v, layers)
    return bool((nmax < v).any() or nmax.sum() < layers)


def _no_split_fits(o: Outer, inflight, state, act, ckpt, capacity, stage_mem, layers: int) -> bool:
    """no_split_fits for `o`'s chunk rule: v-multiples; with the embedding / loss counted as a
    layer slot (cost/pipeline_split.py), a relaxation: any count of >= 1 layer per stage, and
    stage memory lowered by what the short chunk's correction can take off
    (pipeline_split.slot_relief_bytes), so that "no split fits" stays a proof."""
    if not (o.embedding_in_split or o.loss_in_split):
        return no_split_fits(state, act, ckpt, capacity, stage_mem, o.virtual_stages, layers)
    relief = slot_relief_bytes(inflight, o.virtual_stages, o.embedding_in_split, o.loss_in_split, act, ckpt)
    return no_split_fits(state, act, ckpt, capacity, stage_mem - relief, 1, layers)


def _pipeline_p2p_s(pl: Placement, where: list[int], tps: list[int], emb_io: float, v: int, sp: bool,
                    net: NetEfficiency) -> list[float]:
    """Each stage's pipeline hand-off seconds per micro-batch (build's "pp_p2p" part): `where[s]`
    is stage s's distinct site, `tps[s]` its tp, `emb_io` one micro-batch's activation bytes."""
    pp = len(where)
    # each stage sends activations forward and receives gradients back over every edge it
    # touches; interleaving (v > 1) adds the wrap-around edge and repeats per chunk
    # Without sequence parallelism the activation is replicated on the tp ranks; each sends
    # only its 1/tp slice and the receivers all-gather it over the tp group (Narayanan et al.
    # SC'21, Sec. 4.1 "scatter/gather" optimisation; Megatron-LM's
    # scatter_gather_tensors_in_pipeline, DeepSpeed's partitioned pipe activations). With
    # sequence parallelism the slice is the whole message.
    # Between stages of different tp (a tp per node group) the activation is resharded on the
    # way: each of the tp_a senders holds 1/tp_a of it and each of the tp_b receivers needs
    # 1/tp_b, so the busier side's GPU moves emb_io / min(tp_a, tp_b) over its link; the
    # receivers then all-gather over their own tp group (each direction: the larger of the two).
    regathers: dict[int, float] = {}  # per distinct site (sites repeat)

    def regather_s(s: int) -> float:
        site = pl.sites[s]
        if id(site) not in regathers:
            t = tps[s]
            regathers[id(site)] = 0.0 if t == 1 or sp else comm.all_gather_time_s(
                emb_io, t, site.tp_link[0], site.tp_link[1], net)
        return regathers[id(site)]

    edge_times: dict[tuple, float] = {}  # links and sites repeat along a pipeline
    p2p = [0.0] * pp
    for (a, z), (link, inter) in zip(pl.edge_pairs, pl.edges):
        key = (id(link), inter, where[a], where[z])
        t_edge = edge_times.get(key)
        if t_edge is None:
            p2p_bytes = emb_io / min(tps[a], tps[z])
            t_edge = v * (comm.p2p_time_s(p2p_bytes, link, inter, net) + max(regather_s(a), regather_s(z)))
            edge_times[key] = t_edge
        p2p[a] += t_edge
        p2p[z] += t_edge
    return p2p


def _mtp_fixed_s(m: ModelSpec, site: Site, tokens: float, tp_last: int, sp: bool,
                 net: NetEfficiency) -> tuple[float, float]:
    """The layer-free parts of the last stage's multi-token prediction per micro-batch (build's
    "mtp" part, m.mtp_layers x (layer + embedding + projection + head)): per depth, embed the
    shifted tokens and norm both inputs, then project 2h -> h; (embedding, projection) seconds.
    Each depth also runs one more layer as the last stage runs its own, then the shared head
    and loss again."""
    gl, (link, inter) = site.gpu, site.tp_link
    emb_io = tokens * m.hidden * BF16_BYTES
    emb_last = _mem_time_s(5 * emb_io, gl) + comm.all_reduce_time_s(emb_io, tp_last, link, inter, net)
    proj = ((1 + BACKWARD_LINEAR_FACTOR) * _mm_time_s(2 * tokens * 2 * m.hidden * m.hidden / tp_last, gl)
            + 2 * 3 * _mem_time_s(4 * emb_io / (tp_last if sp else 1), gl))
    return emb_last, proj


def _zero3_root_s(p: float, site: Site, dp_n: int, grad_bytes: int, net: NetEfficiency) -> tuple[float, float]:
    """The layer-free part of what no ZeRO-3 prefetch hides on a stage, every micro-batch
    (build's "zero3_unhidden", the stage's first layer's gather + these two): the gather and
    reduce-scatter of the `p` embedding / output-layer parameters its GPU holds (FSDP's root
    unit)."""
    dp_link, dp_inter = site.dp_link
    return (comm.all_gather_time_s(p * BF16_BYTES, dp_n, dp_link, dp_inter, net),
            comm.all_gather_time_s(p * grad_bytes, dp_n, dp_link, dp_inter, net))


def _embedding_sync_s(p: float, site: Site, zero: int, per_step: bool, shard: int, dp_n: int,
                      grad_bytes: int, net: NetEfficiency) -> float:
    """Once per step, the gradient sync and optimizer step of the `p` embedding / output-layer
    parameters a first or last stage's GPU holds on `site` (build's stage sync)."""
    dp_link, dp_inter = site.dp_link
    step = _mem_time_s(p / shard * ADAM_STEP_BYTES_PER_PARAM, site.gpu)
    if per_step:  # the root unit's reduce-scatter; its gather is in build's fill
        sync = comm.all_gather_time_s(p * grad_bytes, dp_n, dp_link, dp_inter, net)
    elif zero == 3:
        sync = 0.0  # reduce-scattered every micro-batch (build's stage time)
    elif zero == 0:
        sync = comm.all_reduce_time_s(p * grad_bytes, dp_n, dp_link, dp_inter, net)
    else:
        sync = (comm.all_gather_time_s(p * grad_bytes, dp_n, dp_link, dp_inter, net)
                + comm.all_gather_time_s(p * BF16_BYTES, dp_n, dp_link, dp_inter, net))
    return sync + step


@dataclass(frozen=True, slots=True)
class StageExtras:
    """The stage terms of one configuration that no layer plan changes (build's stage time and
    once-per-step sync, less each plan's layer costs), per micro-batch unless said."""

    embedding_s: float  # the first stage's
    head_s: float  # the last stage's output layer
    mtp_fixed_s: tuple[float, float] | None  # _mtp_fixed_s; None without multi-token prediction
    p2p_s: list[float] | None  # each stage's pipeline hand-offs; None without a pipeline
    emb_state_params: list[float]  # embedding / output-layer parameters a stage's GPU holds
    zero3_root_s: list[tuple[float, float]] | None  # per stage, _zero3_root_s; None: no such part
    end_sync_s: dict[int, float]  # the end stages' embedding sync and step, once per step
    fill_root_s: list[float] | None  # FSDP in a pipeline: each stage's root-unit gather in the fill
    tie_s: float | None  # the tied embedding copy's gradient all-reduce, once per step
    slow: float  # the slowest rank's extra fraction (cost/scale.py)


def distinct_sites(pl: Placement, o: Outer) -> tuple[list[Site], list[int], list[int]]:
    """(the distinct sites of placement `pl`, where[s]: stage s's index among them, each
    distinct site's tp). Sites repeat (one object per group): build prices each distinct one
    once, keyed by identity, since hashing the nested frozen records per stage costs more than
    the pricing (a pipeline has tens of stages on two or three sites)."""
    index: dict[int, int] = {}
    uniq: list[Site] = []
    for site in pl.sites:
        if id(site) not in index:
            index[id(site)] = len(uniq)
            uniq.append(site)
    # each stage's tp (Site.tp: a mixed cluster may run a tp per node group)
    return uniq, [index[id(site)] for site in pl.sites], [site.tp or o.tp for site in uniq]


class _OuterParts:
    """What build reads of one configuration alone (`o` on placement `pl`, ring, network,
    reserve): the distinct sites, the in-flight micro-batches, the memory besides each layer
    plan's (stage_memory.memory_base) and the stage extras, shared by every layer plan priced
    on it (build_plans; build keeps recent ones, _OUTER_PARTS: the exhaustive search and the
    class planner price thousands of plans per configuration, issue 33). `extras` is filled
    when a first plan's memory fits (skip_if_memory_infeasible stops before the time terms)."""

    __slots__ = ("pl", "dp_n", "uniq_sites", "where", "at", "uniq_tp", "tps", "inflight", "warm", "overlap_a2a",
                 "mem", "extras")

    def __init__(self, inst: Instance, o: Outer, pl: Placement, reserve_bytes: float):
        # `uniq_sites`: the distinct sites, `where[s]` / `at[s]`: stage s's among them, so that
        # per-stage arrays are gathers (distinct_sites)
        self.pl, self.dp_n = pl, pl.dp_ranks
        self.uniq_sites, self.where, self.uniq_tp = distinct_sites(pl, o)
        self.at = np.array(self.where, np.int64)
        self.tps = [self.uniq_tp[i] for i in self.where]
        pp, mb, v = o.pp, o.num_micro_batches, o.virtual_stages
        inflight = in_flight_micro_batches(pp, mb, v)
        if o.zero_bubble is ZeroBubble.V:
            inflight = zero_bubble.v_in_flight(pp, mb)
        self.overlap_a2a = moe.a2a_overlap_applies(inst.job, o)
        self.warm = None
        if self.overlap_a2a:  # one more forward before the first backward (a2a_overlap_warmup_chunks)
            self.warm = a2a_overlap_warmup_chunks(pp, mb, v)
            inflight = np.minimum(self.warm + 1, mb * v) / v
        self.inflight = inflight
        self.mem = memory_base(inst, o, self.where, self.uniq_tp, [st.gpu.hbm_bytes for st in self.uniq_sites],
                               self.dp_n, inflight, reserve_bytes)
        self.extras: StageExtras | None = None


def placed_extras(inst: Instance, o: Outer, pl: Placement, net: NetEfficiency = NetEfficiency()) -> StageExtras:
    """build's StageExtras of `o` on placement `pl`: every stage term that reads the placement
    and no layer plan. The planner's bounds before pricing read them from here
    (solver/bounds/unpriced.placed_floor_terms): the same function as build, the same floats."""
    _, where, uniq_tp = distinct_sites(pl, o)
    return _stage_extras(inst, o, pl, where, [uniq_tp[i] for i in where], net)


def hand_off_s(inst: Instance, o: Outer, pl: Placement, v: int) -> tuple[float, float]:
    """(the pipeline hand-off between the two stages of `o` on the two-stage placement `pl` (`o`
    at v = 1), as build charges it to each of two such stages of a pipeline interleaved `v`
    ways: v times one chunk's, _pipeline_p2p_s; the slowest rank's fraction). The same float as
    any placement's with an edge between those sites at these degrees; the bound of every stage
    order reads it per pair of groups (solver/bounds/order_free)."""
    x = placed_extras(inst, o, pl)
    return v * x.p2p_s[0], x.slow


def _stage_extras(inst: Instance, o: Outer, pl: Placement, where: list[int], tps: list[int],
                  net: NetEfficiency) -> StageExtras:
    """StageExtras of `o` on placement `pl` (stage s on its distinct site where[s], at tp
    tps[s]): the embedding (first stage), output layer and multi-token prediction (last),
    pipeline hand-offs (every stage), ZeRO-3's root unit and the embedding's sync and step (end
    stages), the tied copy's all-reduce."""
    m, pp, dp_n = inst.model, o.pp, pl.dp_ranks
    tp, tp_last = tps[0], tps[-1]
    tokens = o.micro_batch * m.seq_len / o.cp
    emb_io = tokens * m.hidden * BF16_BYTES
    g0, tp0 = pl.sites[0].gpu, pl.sites[0].tp_link
    emb_f = _mem_time_s(2 * emb_io, g0) + comm.all_reduce_time_s(emb_io, tp, tp0[0], tp0[1], net)
    head = output_layer_time_s(inst, o, tp_last, pl.sites[-1].gpu)
    # only the first and last stages hold embedding parameters (middle stages: 0)
    emb_state_params = [0.0] * pp
    for s in sorted({0, pp - 1}):
        emb_state_params[s] = memory.embedding_stage_params(m, s == 0, s == pp - 1) / tps[s]
    # multi-token prediction's projections and embedding copy sync and step with them
    emb_state_params[-1] += memory.mtp_stage_params(m, pp) / tp_last
    grad_bytes = inst.job.grad_reduce.bytes
    per_step = memory.gathered_per_step(o.zero, pp)
    shard = dp_n if o.zero >= 1 else 1
    # what no prefetch can hide, every micro-batch (ZeRO-3 outside a pipeline): the
    # first layer's gather (nothing runs before it) and the embedding / output-layer weights,
    # gathered and reduce-scattered by the stages that hold them (FSDP's root unit)
    root = ([_zero3_root_s(emb_state_params[s], pl.sites[s], dp_n, grad_bytes, net) for s in range(pp)]
            if o.zero == 3 and dp_n > 1 and not per_step else None)
    fill = None
    if per_step and dp_n > 1:  # the root units' gathers in the fill (_stage_sync)
        fill = [comm.all_gather_time_s(emb_state_params[s] * BF16_BYTES, dp_n, *pl.sites[s].dp_link, net)
                for s in range(pp)]
    tie = None
    if pp > 1 and (m.tied_embeddings or m.mtp_layers):  # the embedding copy's gradients
        link, inter = pl.tie
        tie = comm.all_reduce_time_s(embedding_params(m) / min(tp, tp_last) * grad_bytes, 2, link, inter, net)
    return StageExtras(
        embedding_s=emb_f + _mem_time_s(3 * emb_io, g0), head_s=head,
        mtp_fixed_s=(_mtp_fixed_s(m, pl.sites[-1], tokens, tp_last, o.sequence_parallel, net)
                     if m.mtp_layers else None),
        p2p_s=(_pipeline_p2p_s(pl, where, tps, emb_io, o.virtual_stages, o.sequence_parallel, net)
               if pl.edges else None),  # every stage of a pipeline touches an edge
        emb_state_params=emb_state_params, zero3_root_s=root,
        end_sync_s={s: _embedding_sync_s(emb_state_params[s], pl.sites[s], o.zero, per_step, shard, dp_n,
                                         grad_bytes, net) for s in sorted({0, pp - 1})},
        fill_root_s=fill, tie_s=tie, slow=scale.slowest_rank_fraction(inst.cluster.num_gpus, net.rank_jitter_rel))


# _OuterParts of recent (instance, configuration, placement, network, reserve), by the
# instance's and the placement's identity (held in the entry, so that their ids are not reused
# while it lives) and the configuration's value (a class planner makes a new Outer per ask).
# Not by the MoE parameters in force: no part reads them (the routed tokens a rank stashes are
# the balanced copies, moe.STASH_IMBALANCE, below every dropless imbalance in range; the stage
# extras price no expert), so a fit's grid points on one instance share them (cost/moe_anchors.
# pricer: 14% of a price before, issue 32; tests/validation/test_moe_fit.py checks that
# building them reads no MoeParams on every MoE anchor)
_OUTER_PARTS = IdentityCache(4096)


def _outer_parts(inst: Instance, o: Outer, net: NetEfficiency, reserve_bytes: float,
                 placement: Placement | None) -> _OuterParts:
    pl = placement if placement is not None else homogeneous_placement(inst.cluster.one_group, o)
    key = (id(inst), o, id(pl), net, reserve_bytes)
    return _OUTER_PARTS.read_pair(key, inst, pl, _OuterParts, inst, o, pl, reserve_bytes)


def build(inst: Instance, outer: Outer, net: NetEfficiency = NetEfficiency(),
          reserve_bytes: float = 0.0, placement: Placement | None = None,
          layer_fn=megatron_layer, dualpipe: bool = False,
          skip_if_memory_infeasible: bool = False) -> StageCoefficients | None:
    """Coefficients of `outer` on `inst`. `placement` (default: the homogeneous cluster in
    Megatron-LM rank order) says which GPU and links each stage uses; `layer_fn` prices one
    layer on one site (default: Megatron 1-D tensor parallelism). A DualPipe job is priced by
    cost/dualpipe.py only (`dualpipe=True`): its schedule is not the one these coefficients
    feed the planner's formulations. `skip_if_memory_infeasible`: None instead of coefficients
    whose memory fits no split (no_split_fits), before their time terms are priced.
    build_plans of the one layer plan: what reads no plan is kept per configuration."""
    return build_plans(inst, outer, (layer_fn,), net, reserve_bytes, placement, dualpipe,
                       skip_if_memory_infeasible)[0]


def build_plans(inst: Instance, outer: Outer, layer_fns, net: NetEfficiency = NetEfficiency(),
                reserve_bytes: float = 0.0, placement: Placement | None = None, dualpipe: bool = False,
                skip_if_memory_infeasible: bool = False) -> list[StageCoefficients | None]:
    """build of `outer` with each of `layer_fns` (one per layer plan), in order: the
    configuration's own terms (_OuterParts) computed once, then each plan's layer costs,
    memory and stage terms; the same numbers, float for float, as one build per plan."""
    _refuse_dualpipe(inst, dualpipe)
    parts = _outer_parts(inst, outer, net, reserve_bytes, placement)
    return [_plan_build(inst, outer, parts, net, fn, skip_if_memory_infeasible) for fn in layer_fns]


def _refuse_dualpipe(inst: Instance, dualpipe: bool) -> None:
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE and not dualpipe:
        raise ConfigError("job.pipeline_schedule dualpipe is priced by cost/dualpipe.py (its own"
                          " terms, and its own split problem in the planner: formulations/dualpipe.py),"
                          " not by these 1F1B coefficients")


def build_syncs(inst: Instance, outer: Outer, layer_fns, net: NetEfficiency = NetEfficiency(),
                reserve_bytes: float = 0.0, placement: Placement | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """build_plans' (layer_sync_time_s, stage_sync_time_s) of each of `layer_fns`, float for
    float (the same functions), without the plans' memory, stage times or records: a bound that
    lowers only the two sync arrays by a second layer plan (class_partitions' optimistic builds,
    backward_lowers_only_syncs) reads these of it."""
    _refuse_dualpipe(inst, False)
    if outer.zero_bubble is ZeroBubble.V:  # v_shaped moves the last stage's sync: read off the build
        return [(c.layer_sync_time_s, c.stage_sync_time_s)
                for c in build_plans(inst, outer, layer_fns, net, reserve_bytes, placement)]
    parts = _outer_parts(inst, outer, net, reserve_bytes, placement)
    if parts.extras is None:
        parts.extras = _stage_extras(inst, outer, parts.pl, parts.where, parts.tps, net)
    out = []
    for fn in layer_fns:
        uniq = _plan_layer_costs(inst, outer, parts, net, fn)
        dense = _dense_prefix_costs(inst, outer, parts.pl, parts.dp_n, net, fn)
        out.append(_plan_syncs(inst.model, outer, parts, parts.extras, uniq, dense))
    return out


def build_and_backward_syncs(inst: Instance, outer: Outer, layer_fn, bwd_fn, net: NetEfficiency = NetEfficiency(),
                             reserve_bytes: float = 0.0, placement: Placement | None = None
                             ) -> tuple[StageCoefficients, tuple[np.ndarray, np.ndarray]]:
    """(build_plans of `layer_fn`, build_syncs of `bwd_fn`), float for float, where on every site
    bwd_fn's LayerTerms equal layer_fn's but for bwd_s and backward_lowers_only_syncs holds: the
    second plan's layer costs re-read only the backward of the first's (_costs_at_backward), and
    a site whose two functions are one object shares its costs (class_partitions' span builds)."""
    assert backward_lowers_only_syncs(inst, outer)
    if outer.zero_bubble is ZeroBubble.V:  # as build_syncs: v_shaped moves the last stage's sync
        return (build_plans(inst, outer, [layer_fn], net, reserve_bytes, placement)[0],
                build_syncs(inst, outer, [bwd_fn], net, reserve_bytes, placement)[0])
    _refuse_dualpipe(inst, False)
    parts = _outer_parts(inst, outer, net, reserve_bytes, placement)
    uniq = _plan_layer_costs(inst, outer, parts, net, layer_fn)
    lo = _plan_build(inst, outer, parts, net, layer_fn, False, uniq)
    lo_by, hi_by = getattr(layer_fn, "by_site", None), getattr(bwd_fn, "by_site", None)
    hi = []
    for site, u in zip(parts.uniq_sites, uniq):
        lo_f = lo_by[id(site)] if lo_by is not None else layer_fn
        hi_f = hi_by[id(site)] if hi_by is not None else bwd_fn
        hi.append(u if hi_f is lo_f else _costs_at_backward(u, hi_f(inst, stage_outer(outer, site), site, net), net))
    return lo, _plan_syncs(inst.model, outer, parts, parts.extras, hi, None)


def backward_lowers_only_syncs(inst: Instance, o: Outer) -> bool:
    """Whether raising a layer plan's bwd_s alone (LayerTerms equal but for it) leaves every
    array of build that a layer plan sets (partition_plans.stage_arrays) no lower, float for
    float, but layer_sync_time_s and stage_sync_time_s: then the elementwise minimum of the
    builds at the two backwards is the lower one's build with those two arrays at their
    minimum (build_syncs). _layer_costs reads bwd in ZeRO-3's per-micro-batch windows, which
    are zero unless ZeRO-3 gathers per micro-batch (outside a pipeline: gathered_per_step), in
    the exposed gradient sync (layer_sync, grad_tail: the sync arrays only) and in layer_time =
    fwd + bwd + 0 + 0 + slowdown, each rounded addition non-decreasing in bwd; stage times read
    the layer time only through multi-token prediction (a positive multiple, then sums, the
    slowest rank's factor and v_shaped's a[0] + (a[last] - a[mid]), a[mid] free of it), the
    drain saving k w t_s grows with it, the memory reads no time (stage_memory.plan_memory),
    and an MoE model (its dense prefix reads dense - MoE layer time) is left out."""
    return (o.zero < 3 or memory.gathered_per_step(o.zero, o.pp)) and inst.model.moe is None


def _plan_build(inst: Instance, o: Outer, parts: _OuterParts, net: NetEfficiency, layer_fn,
                skip_if_memory_infeasible: bool, uniq: list | None = None) -> StageCoefficients | None:
    """build of one layer plan (`layer_fn`) on the configuration's `parts` (its layer costs
    `uniq` where the caller has them)."""
    m = inst.model
    dp_n = parts.dp_n
    if uniq is None:
        uniq = _plan_layer_costs(inst, o, parts, net, layer_fn)
    per_stage = [uniq[i] for i in parts.where]

    # --- memory (cost/stage_memory.py: what each framework allocates)
    dense = _dense_prefix_costs(inst, o, parts.pl, dp_n, net, layer_fn)
    mem = plan_memory(inst, o, parts.mem, [x.terms for x in uniq], dp_n, None if dense is None else dense.terms)
    state, act, ckpt = mem.layer_state_bytes, mem.layer_act_bytes, mem.layer_ckpt_bytes
    stage_mem, capacity = mem.stage_mem_bytes, mem.capacity_bytes

    # (ZBVZeroBubble's V moves the output layer's memory after this: not checked on it)
    if (skip_if_memory_infeasible and o.zero_bubble is not ZeroBubble.V
            and _no_split_fits(o, parts.inflight, state, act, ckpt, capacity, stage_mem, m.layers)):
        return None  # the time terms below would only be dropped (solver/search.problems_for)

    if parts.extras is None:
        parts.extras = _stage_extras(inst, o, parts.pl, parts.where, parts.tps, net)
    x = parts.extras

    stage_parts, stage_time = _stage_time(m, o, x, per_stage)
    layer_sync, stage_sync = _plan_syncs(m, o, parts, x, uniq, dense)
    if dense is not None:  # the dense prefix's time on the first stage (above; its sync: _plan_syncs)
        dense_prefix_s = inst.model.moe.dense_layers * (dense.layer_time - per_stage[0].layer_time)
        stage_parts.add("dense_prefix", {0: dense_prefix_s})
        stage_time[0] += dense_prefix_s
    # Every barrier (tp collectives, pipeline hand-offs, the gradient reduction) waits for the
    # slowest of the job's ranks, which chain the whole job: each micro-batch's work lasts
    # (1 + slow) times the mean rank's (cost/scale.py prices slow from the per-rank jitter)
    slow = x.slow
    if slow:
        stage_parts.add("slowest_rank", slow * stage_time)
        stage_time = stage_time * (1 + slow)
    # breakdown names: the first stage's (every stage's, on a homogeneous cluster)
    first = per_stage[0]
    layer_parts = dict(first.parts, slowest_rank=slow * first.layer_time) if slow else first.parts
    layer_time, recompute_time = stage_columns([[u.layer_time for u in uniq], [u.recompute_time for u in uniq]],
                                               parts.at)
    c = StageCoefficients(
        outer=o, layers=m.layers,
        layer_time_s=layer_time * (1 + slow), recompute_time_s=recompute_time * (1 + slow),
        stage_time_s=stage_time,
        layer_sync_time_s=layer_sync, stage_sync_time_s=stage_sync,
        layer_state_bytes=state, layer_act_bytes=act, layer_ckpt_bytes=ckpt,
        stage_mem_bytes=stage_mem,
        capacity_bytes=capacity,
        layer_parts=layer_parts, stage_parts=stage_parts, overlapped_per_layer_s=first.overlapped,
        in_flight=parts.inflight.copy(),
        first_chunk_min_layers=mem.first_chunk_min_layers, stage_act_bytes=mem.stage_act_bytes,
        stage_state_bytes=mem.stage_state_bytes,
    )
    return c if o.zero_bubble is None else zero_bubble.shaped(c, m)


def _plan_layer_costs(inst: Instance, o: Outer, parts: _OuterParts, net: NetEfficiency, layer_fn) -> list:
    """One layer plan's _LayerCosts on each distinct site of the configuration's `parts`."""
    by_site = getattr(layer_fn, "by_site", None)  # a layer_fn per site (class_coefficients.class_layer_fn)
    return [_shared_layer_costs(inst, stage_outer(o, site), site, parts.dp_n, net,
                                by_site[id(site)] if by_site is not None else layer_fn)
            for site in parts.uniq_sites]


def _plan_syncs(m: ModelSpec, o: Outer, parts: _OuterParts, x: StageExtras, uniq: list,
                dense) -> tuple[np.ndarray, np.ndarray]:
    """One layer plan's per-layer and once-per-step sync of each stage (build's
    layer_sync_time_s and stage_sync_time_s before zero_bubble.shaped), from its layer costs
    on each distinct site (`uniq`) and its dense prefix's (`dense`, or None)."""
    per_stage = [uniq[i] for i in parts.where]
    # (the last bucket of each stage's layer gradients, and its per-layer sync: one gather)
    tail, layer_sync = stage_columns([[u.grad_tail + u.scatter_s for u in uniq], [u.layer_sync for u in uniq]],
                                     parts.at)
    stage_sync = _stage_sync(m, o, parts, x, uniq, per_stage, tail)
    if parts.overlap_a2a:
        # the unpaired warm-up forwards and cool-down backwards show the all-to-alls a
        # steady-state pair hides: per layer of stage s, warm_s / v of each, once per iteration
        layer_sync = layer_sync + parts.warm / o.virtual_stages * stage_values([u.terms.a2a_hidden_s for u in uniq],
                                                                               parts.at)
    if m.mtp_layers:  # the multi-token prediction layers' gradient sync and step
        stage_sync[-1] += m.mtp_layers * layer_sync[-1]
    if dense is not None:  # the dense prefix's sync on the first stage (no all-to-all to unhide)
        stage_sync[0] += m.moe.dense_layers * (dense.layer_sync - layer_sync[0])
    return layer_sync, stage_sync


def _stage_time(m: ModelSpec, o: Outer, x: StageExtras, per_stage: list) -> tuple[StageParts, np.ndarray]:
    """The stage extras of one layer plan (its per-stage layer costs `per_stage`), by name, and
    their sums per stage: embedding (first), final norm + logits + loss (last), p2p (all,
    pp > 1), ZeRO-3's unhidden gathers."""
    pp = o.pp
    stage_parts = StageParts(pp)
    stage_parts.add("embedding", {0: x.embedding_s})
    stage_parts.add("output_layer", {pp - 1: x.head_s})
    if x.mtp_fixed_s is not None:
        emb_last, proj = x.mtp_fixed_s
        stage_parts.add("mtp", {pp - 1: m.mtp_layers * (per_stage[-1].layer_time + emb_last + proj + x.head_s)})
    if x.p2p_s is not None:
        stage_parts.add("pp_p2p", x.p2p_s)
    if x.zero3_root_s is not None:
        stage_parts.add("zero3_unhidden", [per_stage[s].gather_s + ag + rs
                                           for s, (ag, rs) in enumerate(x.zero3_root_s)])
    return stage_parts, stage_parts.totals()


def _stage_sync(m: ModelSpec, o: Outer, parts: _OuterParts, x: StageExtras, uniq: list, per_stage: list,
                tail: np.ndarray) -> np.ndarray:
    """Each stage's once-per-step sync of one layer plan, before its MoE and multi-token
    prediction terms: the last bucket of layer gradients, which cannot hide behind any
    remaining backward; the embedding's sync and step on the first and last stages; FSDP's
    fill in a pipeline; the tied copy's all-reduce. `tail`: each stage's grad_tail + scatter_s
    (stage_values of its site's), added to in place."""
    stage_sync = tail
    for s, e in x.end_sync_s.items():
        stage_sync[s] = e + per_stage[s].grad_tail + per_stage[s].scatter_s
    if x.fill_root_s is not None:
        # FSDP inside a pipeline gathers on each model chunk's first forward of the step,
        # which waits for the chunks before it (the first micro-batch's path through the v pp
        # chunks): the fill carries every chunk's first block's gather (nothing runs before
        # it: each chunk is an FSDP root of its own, torchtitan's pipeline model parts), the
        # root units' (embedding, output layer) and each layer's exposed gather
        # (fill_gather_s), once. On one group that sum is the same for every split (L layers
        # in all), so every stage's once-per-step term carries it whole and the iteration pays
        # it once; on a mixed cluster each stage counts the L layers at its own site's
        # exposure (the fill's, within the dearest and cheapest sites')
        fill = 0.0
        v = o.virtual_stages
        for s in range(o.pp):
            fill += v * per_stage[s].gather_s + x.fill_root_s[s]
        stage_sync += fill + m.layers * stage_values([u.fill_gather_s for u in uniq], parts.at)
    if x.tie_s is not None:
        stage_sync[0] += x.tie_s
        stage_sync[-1] += x.tie_s
    return stage_sync


def _dense_prefix_costs(inst: Instance, o: Outer, pl: Placement, dp_n: int, net: NetEfficiency,
                        layer_fn) -> _LayerCosts | None:
    """One of an MoE model's dense prefix layers (its own FFN width, model.ffn) on the first
    stage's site, or None when there is none to price apart (a dense model, or no prefix)."""
    moe_spec = inst.model.moe
    if moe_spec is None or not moe_spec.dense_layers:
        return None

    def price() -> _LayerCosts:
        return _layer_costs(_with_model(inst, moe_dense_view(inst.model)), stage_outer(o, pl.sites[0]),
                            pl.sites[0], dp_n, net, layer_fn)
    if layer_fn is not megatron_layer:  # a per-operator layer plan: priced as it says
        return price()
    return _expert_free("prefix", inst, o, pl.sites[0], net, dp_n, price)


# Configurations that differ only in their expert degrees (ep, etp) price an MoE layer's
# attention view and a dense prefix layer identically, and the space holds several of them per
# degree and batch configuration (cost/space_rules.expert_layouts): keep those results by
# everything else they read (the instance and GPU by identity, held in the entry so that their
# ids cannot be reused while it lives). The attention view is megatron_layer alone, which reads
# DENSE_LAYER_FIELDS of the outer and no data-parallel link: kept by those, configurations that
# differ in their pipeline, ZeRO stage or rings share it too (the floors read before pricing on
# DeepSeek-V3 / 2,048 H800: 1,637 views priced, 252 distinct; issue 33).
_EXPERT_FREE = IdentityCache(4096)
_OUTER_FIELDS: dict[tuple[str, type], tuple[str, ...]] = {}


def _expert_free(kind: str, inst: Instance, o: Outer, site: Site, net: NetEfficiency, dp_n: int, price):
    names = _OUTER_FIELDS.get((kind, type(o)))
    if names is None:
        names = _OUTER_FIELDS[kind, type(o)] = (
            DENSE_LAYER_FIELDS if kind == "view" else tuple(f.name for f in fields(o) if f.name not in ("ep", "etp")))
    key = (kind, id(inst), id(site.gpu), site.tp, site.tp_link, site.cp_link,
           None if kind == "view" else site.dp_link, net, dp_n, tuple(getattr(o, n) for n in names))
    return _EXPERT_FREE.read_pair(key, inst, site.gpu, price)


# _layer_costs of recent (instance, stage outer, site, ring size, network) under Megatron 1-D
# pricing: the planner prices one class shape in every order of its groups
# (solver/space.py), and a group's site is the same object in each
# (cost/class_coefficients.class_placement interns it), so those configurations share their
# layers' costs. Keyed by identity where hashing the nested records would cost more than the
# lookup saves; each entry keeps its keys alive, so no other object takes their ids.
_LAYER_COSTS = IdentityCache(65536)


@lru_cache(maxsize=65536)
def _dense_layer_view(o: Outer) -> Outer:
    """`o` without what a dense layer's costs do not read: the memo key of _shared_layer_costs."""
    # ZeRO-3 reads whether there is a pipeline (memory.gathered_per_step: once per step inside one)
    return replace(o, pp=min(o.pp, 2) if o.zero == 3 else 1, dp=1, num_micro_batches=1, virtual_stages=1,
                   zero_bubble=None)


# grad_reduce_overlaps by (job identity, pp, v, zero), each entry holding its job: every layer
# cost and its memo key read it, and its release lookup was 1.7 of a profiled 79 s of issue
# 33's three-type, two-site row
_OVERLAPS = IdentityCache(4096)


def _reduce_overlaps(job: JobSpec, o: Outer) -> bool:
    """grad_reduce_overlaps(job, o.pp, o.virtual_stages, o.zero), kept per job."""
    key = (id(job), o.pp, o.virtual_stages, o.zero)
    return _OVERLAPS.read(key, job, grad_reduce_overlaps, job, o.pp, o.virtual_stages, o.zero)


def _shared_layer_costs(inst: Instance, o: Outer, site: Site, dp_n: int, net: NetEfficiency,
                        layer_fn) -> _LayerCosts:
    if layer_fn is not megatron_layer:  # partition layer plans: closures made per configuration
        if inst.model.moe is not None:
            return _layer_costs(inst, o, site, dp_n, net, layer_fn)
        return _plan_layer_costs_kept(inst, o, site, dp_n, net, layer_fn(inst, o, site, net))
    # a dense layer's costs read neither the pipeline (pp, v, micro-batch count) nor dp apart
    # from the ring size dp_n (megatron_layer, _layer_costs), so configurations differing only
    # there share them, except whether the gradient reduction overlaps, which reads pp and v
    # (framework.grad_reduce_overlaps: a pipeline-free ZeRO-0 plan overlaps in every Megatron-LM
    # release), so it is part of the key; an MoE layer's all-to-all overlap reads pp and v (cost/moe.py),
    # and its expert terms the MoE parameters in force (cost/moe_params.active), which a fit
    # changes on one instance (cost/moe_anchors.pricer): keyed by their identity (held in the
    # entry, as the instance is; hashing the record per lookup cost about 1 us)
    params = moe_params.active() if inst.model.moe is not None else None
    view = ((o, id(params)) if params is not None
            else (_dense_layer_view(o), _reduce_overlaps(inst.job, o)))
    key = (id(inst), id(site), view, dp_n, net)
    return _LAYER_COSTS.read_pair(key, inst, site, _layer_costs_held, inst, o, site, dp_n, net, layer_fn, params)[0]


# _layer_costs of a layer plan's LayerTerms on a dense model, by (instance, site, terms) identity
# and what megatron_layer's memo keys (_shared_layer_costs): the closures of a plan are made per
# configuration, but its terms are the ones partition._plan_terms / partition_plans.table_terms
# keep per table, so the configurations of one table that differ only in the pipeline or dp
# share them (the three-type, two-site row: 36,719 reads, 12,429 keys). Each entry holds its
# terms and (in its value) its instance and site, so that their ids are not reused while it lives.
_PLAN_LAYER_COSTS = IdentityCache(16384)


def _plan_layer_costs_kept(inst: Instance, o: Outer, site: Site, dp_n: int, net: NetEfficiency,
                           lt: LayerTerms) -> _LayerCosts:
    """_layer_costs of `o` on `site` with the layer's terms `lt` (a dense model): it reads of `o`
    only what _dense_layer_view keeps and the overlap flag, as megatron_layer's memo reads it, and
    of the layer only `lt`; the same floats, from one read per key."""
    key = (id(inst), id(site), id(lt), _dense_layer_view(o), _reduce_overlaps(inst.job, o), dp_n, net)
    hit = _PLAN_LAYER_COSTS.get(key, lt)
    if hit is not None and hit[0] is inst and hit[1] is site:
        return hit[2]
    costs = _layer_costs(inst, o, site, dp_n, net, lambda *_: lt)
    _PLAN_LAYER_COSTS.put(key, lt, (inst, site, costs))
    return costs


def _layer_costs_held(inst: Instance, o: Outer, site: Site, dp_n: int, net: NetEfficiency, layer_fn,
                      params) -> tuple[_LayerCosts, object]:
    """_layer_costs with the MoE parameters its key names by id, held in the entry beside it (so
    that no other parameters take their id while it lives)."""
    return _layer_costs(inst, o, site, dp_n, net, layer_fn), params


_INSTANCES = IdentityCache(256)


def _with_model(inst: Instance, model: ModelSpec) -> Instance:
    """`inst` with `model` (a view of its model), kept by identity as flops._cached_view keeps
    the views: pricing asks for the same one once per outer configuration."""
    return _INSTANCES.read_pair((id(inst), id(model)), inst, model, replace, inst, model=model)
