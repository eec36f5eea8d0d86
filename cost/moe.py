"""Mixture-of-experts layers with expert parallelism: what one MoE layer adds to its attention
part (priced as a dense layer whose MLP is the shared MLP: cost/flops.moe_attention_view).

Layout (Megatron-core's, the framework paraplan exports MoE plans to; Megatron-LM d98e8a64dd,
megatron/core/parallel_state.py initialize_model_parallel): the attention part of a pipeline
stage runs on tp x cp x dp GPUs (rank order tp-cp-ep-dp-pp, tp fastest), the expert part on
the same GPUs laid out as etp x ep x edp (its expert rank generator's order tp-ep-dp-pp with
tp = --expert-tensor-parallel-size, cp folded away), so etp * ep * edp = tp * cp * dp: MoE
"parallel folding" (D. Liu et al., arXiv 2504.14960). etp (plan.etp; default tp, Megatron-core's
default when --expert-tensor-parallel-size is not given) consecutive ranks split each expert's
GEMMs; the ep ranks of an expert-parallel group lie etp apart, and may so span tp and cp ranks
of the attention layout as well as dp ones; each holds experts / ep whole experts. The
expert-data-parallel group over which expert gradients are reduced (and sharded by the
distributed optimizer) is edp = tp*cp*dp / (ep*etp) ranks, etp*ep apart (edp_ranks). With
tp > 1 Megatron-core requires sequence parallelism (cost/space_rules.moe_problem), and what
etp x ep may be is cost/specs.moe_fold_problem.

Tokens between the two layouts: no re-layout is needed. With sequence parallelism (or tp = 1)
each rank holds its own 1/tp share of its replica's cp shard of tokens, b s / (cp tp) of them,
and the dispatcher routes exactly those: the all-to-all over the ep group sends each rank's
own tokens' top_k copies to the ranks holding their experts, then the all-gather over the etp
group gives every etp rank the copies its etp peers received (megatron/core/transformer/moe/
token_dispatcher.py, MoEAlltoAllTokenDispatcher: its tp group is the expert tp group,
pg_collection.expt_tp, so with etp < tp the gather and the reduce-scatter shrink to etp).
One ep rank's experts (on its etp group) therefore see the copies of etp x ep ranks' tokens,
etp times one rank's: routed = k b s / cp x etp / tp (routed_tokens x fold; with etp = tp, one
replica's whole cp shard, as before parallel folding). Per rank of the etp group, before the
all-gather, routed / etp copies: what it sends in the all-to-all and permutes.

Per layer, one micro-batch, forward (backward: twice the GEMMs and elementwise passes, and the
same collectives again; Megatron-core's MoEAlltoAllTokenDispatcher):
    router       a hidden x experts GEMM on each rank's tokens, softmax and top-k
    dispatch     each rank sends its tokens' top_k copies to the ranks holding their experts:
                 an all-to-all over the ep group (routed / etp copies per rank), then an
                 all-gather over etp (the expert's GEMMs are etp-split, so every etp rank
                 needs every routed token)
    experts      experts / ep separate expert MLPs per rank, each on its share of the routed
                 tokens (routed / (experts / ep)), ffn split over etp, each GEMM priced by
                 the size-dependent matmul efficiency
                 (cost/coefficients.matmul_time_s: a small per-expert GEMM pays the fixed
                 per-call cost), plus the host's loop over the local experts that each
                 grouped call (GROUPED_CALLS) runs before its GEMMs (expert_host_s): what
                 makes many small experts per rank slow
    combine      reduce-scatter over etp, then the all-to-all back, and the probability-weighted
                 sum of each token's top_k outputs
    permutation  gathering routed copies into expert order and scattering them back: two
                 memory-bound passes that each read and write the rank's routed / etp copies;
                 with the all-to-all dispatcher and several experts a rank, two more over the
                 routed copies it received, sorting them by local expert and back
                 (CHUNK_SORT_PASSES)

Memory per GPU: expert weights (and their gradients and optimizer state, sharded over the
edp group by ZeRO 1-2) experts / ep x 3 (SwiGLU; 2 for GELU) x hidden x expert_ffn / etp;
stashed per micro-batch: the routed copies at full width (routed x hidden: the wgrad of MLP-in
reads them on every etp rank), MLP-in outputs and the activation's output (their 1/etp share),
the permuted probabilities the weighted activation applies, and the router's fp32
probabilities (on the rank's own tokens); the combine stashes nothing (expert_act_bytes).

Load imbalance: routing is never perfectly even, and the busiest ep rank sets the pace of
every collective and GEMM above. `imbalance` (busiest rank's routed tokens / mean) multiplies
the routed tokens of the expert GEMMs, the permutation and the all-to-all when ep > 1; a
capacity factor caps it (tokens beyond an expert's capacity are dropped). With ep = 1 every
rank runs every expert on its own tokens' top_k copies, exactly k x its tokens however they
are routed, so no factor applies. Default DEFAULT_IMBALANCE below.

The all-to-all's traffic to peers inside the NVLink domain (cluster.domain_gpus) goes over
NVLink, the rest over the GPU's own NIC; the two run at once, so the slower sets the time.

With job.moe_dispatcher: deepep (DeepSeek's DeepEP normal kernels, deepseek-ai/DeepEP at
edbb1bc; DeepSeek-V3 report, arXiv 2412.19437 Sec. 3.2.2) a token crosses the network once per
destination NVLink domain, to the rank with its own in-domain index, which forwards it over
NVLink to the ranks holding its experts there (DeepEP's get_dispatch_layout counts a token once
per RDMA rank, is_in_rdma_rank, and once per destination rank); with node-limited routing
(model.moe.max_nodes_per_token, M) a token reaches at most M domains (deepep_copies). In an
FP8 job the dispatch-direction all-to-alls (forward dispatch, and in backward the gradient of
the combine, which DeepEP runs with its dispatch kernel) carry FP8 with one fp32 scale per 128
elements, the combine-direction ones bf16 (DeepEP's README: DeepSeek-V3's pretraining setting,
"FP8 dispatching and BF16 combining"; tests/test_internode.py's fp8_factor (1 + 4/128) / 2).
The network copies flow at the NIC's rate, or, over one or two remote domains, at DeepEP's
measured single-peer rate times their count (DEEPEP_PEER_BYTES_PER_S, deepep_network_bytes_per_s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from paraplan.cost import comm, fabric, memory, moe_params
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import BF16_BYTES
from paraplan.cost.specs import (NodeGroup, GpuSpec, Instance, Link, Mlp, MoeDispatcher,
                                 OffloadModule, Outer, PipelineSchedule, Precision, RecomputeModule)

# Busiest expert-parallel rank's routed tokens over the mean (1 + MaxVio, Wang et al. 2024,
# arXiv 2408.15664) under dropless routing not forced to balance: fitted to the MoE anchors
# (cost/moe_params.py FITTED.dropless_imbalance, cost/moe_fit.py); set model.moe.imbalance to
# override. `paraplan plan --sensitivity` moves it over IMBALANCE_RANGE.
DEFAULT_IMBALANCE = moe_params.FITTED.dropless_imbalance
# The range `paraplan plan --sensitivity` re-solves an MoE plan over: 1.0, perfectly even
# routing (the busiest rank can carry no less than the mean), to 2.2, which covers every
# imbalance the published forced-balance / dropless pairs imply (the value that reproduces a
# pair's measured throughput ratio on its published plan, cost/published/moe.yaml
# imbalance_default.range): Mixtral 8x22B 1.07, Qwen3-235B 1.72 at 16k up to 2.13 at 128k
# tokens. No per-rank statistic was transcribed; these are read back through this model.
IMBALANCE_RANGE = (1.0, 2.2)
# What a rank stashes for backward is priced at the mean rank's routed copies, not the busiest's.
# The imbalance is a TIME factor: every dispatch / combine all-to-all waits for the rank that
# received the most copies of THAT layer and micro-batch, so time sums the per-collective maxima
# (E[max over ep ranks] per layer). A rank's memory peak instead sums its own copies over every
# (layer, micro-batch) it holds stashed at once: on DeepSeek-V3's DualPipe layout 8 layers
# (two 4-layer stages) times the in-flight micro-batches (cost/dualpipe.py), each layer routing
# to other experts. The busiest rank of one collective is not the busiest of the next, so the
# excess of a sum of n draws shrinks as 1/sqrt(n): with a per-collective maximum of 1.2 over 64
# ranks (a relative spread of 0.2 / 2.4, 2.4 the expected maximum of 64 normal draws), about
# 1 + 0.2 / sqrt(n), under 1.01 for n >= 400 independent draws and at most 1.07 if the skew
# persisted over a whole step's micro-batches (n = 8 layers). DeepSeek-V3's auxiliary-loss-free
# balancing (arXiv 2412.19437 Sec. 2.1.2) adjusts each expert's routing bias after every step
# precisely against such persistent skew. The 1.0 here is therefore the low end of a documented
# 1.0-1.07 range on that layout; the published layout's own fit (tests/cost/test_memory_options.py)
# is what checks it. A capacity factor caps the copies as before (routed_tokens).
STASH_IMBALANCE = 1.0
# Router logits and probabilities are fp32 in Megatron-core (--moe-router-dtype fp32 for
# stability; DeepSeek-V3 computes its gate in fp32 too): 4 bytes per token x expert, written by
# the router GEMM, read and written by softmax / top-k.
ROUTER_LOGIT_BYTES = 4
# Permute and unpermute: each reads and writes every routed copy's hidden vector once.
PERMUTE_PASSES = 2
# Megatron-core's all-to-all dispatcher permutes a rank's copies by destination rank, and after
# the all-to-all (and the etp all-gather) sorts the copies it received by local expert, the
# chunks of each source rank regrouped expert by expert; the combine sorts them back before
# the reverse all-to-all ("Permutation 2": MoEAlltoAllTokenDispatcher.dispatch_postprocess and
# combine_preprocess, moe_utils.sort_chunks_by_idxs, run whenever the rank holds more than one
# expert; Megatron-LM megatron/core/transformer/moe/token_dispatcher.py). Each reads and writes
# every received copy's hidden vector once. DeepEP's dispatch hands the received tokens to the
# flex dispatcher's one permute by expert (MoEFlexTokenDispatcher), which PERMUTE_PASSES prices.
CHUNK_SORT_PASSES = 2


def chunk_sort_passes(job, local_experts: int) -> int:
    """Memory passes over a rank's received copies that sort them by local expert and back
    (CHUNK_SORT_PASSES): the all-to-all dispatcher's, where the rank holds several experts."""
    return CHUNK_SORT_PASSES if job.moe_dispatcher is MoeDispatcher.ALLTOALL and local_experts > 1 else 0


# The rows of one tile of a grouped GEMM's M axis: DeepGEMM's contiguous grouped layout aligns
# each expert's segment to its M block of 128 rows (deepseek-ai/DeepGEMM README,
# get_mk_alignment_for_contiguous_layout), the tile height of the Hopper and Blackwell GEMM
# kernels; an expert's rows fill whole tiles, half a tile wasted on average.
GROUPED_GEMM_TILE_ROWS = 128


def padded_tokens(tokens_per_expert: float) -> float:
    """The rows one expert's grouped GEMM computes for `tokens_per_expert` routed copies: its
    last tile half empty on average (GROUPED_GEMM_TILE_ROWS); none for an expert without rows."""
    return tokens_per_expert + GROUPED_GEMM_TILE_ROWS / 2 if tokens_per_expert > 0 else 0.0


# Grouped calls of one MoE layer's experts per pass: Megatron-core's TEGroupedMLP runs MLP-in
# (its gate fused in for SwiGLU: one GroupedLinear of width 2 x ffn) and MLP-out as two
# Transformer Engine GroupedLinear layers (megatron/core/transformer/moe/experts.py), each one
# loop over the rank's local experts.
GROUPED_CALLS = 2


def expert_host_s(local_experts: int, per_expert_call_s: float) -> float:
    """Host seconds of one pass's GROUPED_CALLS grouped calls over `local_experts` experts (one
    loop of a backward's input or weight gradients counts as a pass), at `per_expert_call_s`
    per expert and call (cost/moe_params.py expert_gemm_issue_s).

    Priced beside the expert GEMMs, not under them. Transformer Engine's GroupedLinear
    (transformer_engine/pytorch/module/grouped_linear.py at d0067d0) runs, per call, a host
    loop over the experts before the first GEMM: forward splits and quantizes each expert's
    input (_split_quantize), looks up each expert's cached weight copy (quantize_weight, a
    Python loop) and allocates the output, then issues the GEMMs (general_grouped_gemm, one
    cuBLASLt call per expert); backward first gathers each expert's main-gradient buffer and
    quantizer and splits the output gradient, then runs the input- and the weight-gradient
    GEMM loops. The device reaches the call with no queued work to hide that loop under: the
    dispatcher synchronised the host with it for the tokens per expert, which the call needs
    on the host (Megatron-core's MoEAlltoAllTokenDispatcher.preprocess, the cuda_sync_point
    before the all-to-all; DeepEP's dispatch waits on the host for its receive counts). So the
    call takes the host loop plus its GEMMs. Backward needs no sync, but the host is ahead
    only by what it queued before, and a pass whose expert loops outlast their GEMMs leaves it
    nothing queued, so backward's loops are priced alike. A single launch for all experts
    (DeepGEMM's) or a CUDA graph has no such loop: 0."""
    return GROUPED_CALLS * local_experts * per_expert_call_s


# FP8 dispatch bytes per element: one e4m3 byte plus one fp32 scale per 128 elements (DeepSeek-V3's
# 1 x 128 activation tiles; DeepEP tests/test_internode.py: fp8_factor = (1 + 4 / 128) / 2 of bf16)
FP8_DISPATCH_BYTES_PER_ELEMENT = 1 + 4 / 128

# What DeepEP's normal (training) kernels of its V1 (and NVIDIA's HybridEP, which paraplan prices
# as DeepEP) move to ONE remote NVLink domain per second, per GPU: 21.5 GB/s. The sender streams
# a token into a ring of receive slots per channel and remote rank
# (num_max_rdma_chunked_recv_tokens, csrc/kernels/internode.cu) and may refill a slot only after
# the remote forwarder has drained it and written the head back over RDMA, so the bytes in
# flight to one peer are capped and a single peer is served at that window over its round
# trip, whatever the wire: rate = min(NIC, remote domains x this). Measured: DeepEP's V1 table
# (docs/legacy.md; H800, one CX7 400 Gbit/s NIC a GPU, 4,096 tokens, hidden 7,168, top-8)
# gives EP16 over 2 nodes 43 GB/s of "RDMA" traffic, a logical rate that counts a token once
# per node it reaches, its own node included (tests/test_internode.py num_rdma_token_sent; the
# V2 README: "logical bandwidth ... contains local rank traffic"), so half of it, 21.5 GB/s,
# crossed the wire to the one remote node: 0.43 of the NIC. The same counting on EP32 and
# EP64 (3 and 7 remote nodes) gives 58 x 3/4 = 43.5 and 51 x 7/8 = 44.6 GB/s on the wire,
# NIC-bound (0.87-0.89), as 3 x 21.5 exceeds the NIC. Other two-node V1 measurements put the
# single peer at 19-31 GB/s: 2 x 8 H200 with CX7, 38.2-44.4 GB/s logical (deepseek-ai/DeepEP
# issue 493), and Tencent's IBGDA multi-QP rework on H800, 47 (dispatch) and 62 (combine)
# (DeepEP e0eaaf9's README; DeepSeek kept 43 for EP16: "almost the same on our H800 server",
# PR 130); HybridEP on 2 x 8 B300, 40.4-44.4 GB/s logical, kernel only (DeepEP issue 590), and
# NVIDIA's own tracking issue limits HybridEP to EP 8 on 8-GPU NVLink nodes until EP > 8 is
# tuned (NVIDIA-NeMo/Megatron-Bridge issue 2883). Not the wire: NVSHMEM's put benchmark
# reaches ~47 GB/s between two H100 nodes (DeepEP issue 155), NCCL's all-to-all reaches the
# NIC on two nodes (nccl-tests issue 130; Megatron's all-to-all dispatcher is priced at the
# NIC, all_to_all_time_s), and DeepEP's V2 (April 2026, not what the priced runs used) reaches
# 90 and 81 GB/s logical on 2 H100-class nodes, 45 and 40.5 on the wire.
DEEPEP_PEER_BYTES_PER_S = 21.5e9


def deepep_copies(m, ep: int, per_domain: int) -> tuple[float, float]:
    """(network, NVLink) copies of one token's hidden vector that one rank sends per DeepEP
    dispatch (or receives per combine), before imbalance (module docstring).

    Routing is taken as uniform over the ep group's ranks (balanced experts): of N = ep /
    per_domain domains, a token's top_k experts fall on N (1 - (1 - 1/N)^k) distinct domains in
    expectation, at most M with node-limited routing; its own domain is one of them with
    probability 1/N, so (N - 1)/N of them are across the network. Inside the domains reached,
    the copies go to the distinct destination ranks, R (1 - (1 - 1/R)^k) of the R ranks of
    those domains, of which (g - 1)/g are not the receiving rank itself and cross NVLink."""
    k = m.moe.top_k
    g = max(1, min(per_domain, ep))
    domains = ep / g  # a fraction where ep spans part of a domain: (N - 1)/N stays the remote share
    reached = domains * (1 - (1 - 1 / domains) ** k)
    if m.moe.max_nodes_per_token is not None:
        reached = min(reached, float(m.moe.max_nodes_per_token))
    network = reached * (domains - 1) / domains
    ranks = reached * g  # the ranks of the domains a token reaches
    nvlink = ranks * (1 - (1 - 1 / ranks) ** k) * (g - 1) / g
    return network, nvlink


def deepep_network_bytes_per_s(ep: int, links: EpLinks, net: NetEfficiency) -> float:
    """The rate one rank's DeepEP network copies flow at: the NIC's, or, with few remote NVLink
    domains, the per-peer window's (DEEPEP_PEER_BYTES_PER_S) times their count; a rank reaches
    one peer in each remote domain (the rank of its own in-domain index)."""
    g = max(1, min(links.per_domain, ep))
    remote_domains = max(1, math.ceil(ep / g) - 1)
    return min(links.inter.bw_bytes_per_s * net.inter_node, remote_domains * DEEPEP_PEER_BYTES_PER_S)


def deepep_time_s(token_bytes: float, m, ep: int, links: EpLinks, net: NetEfficiency) -> float:
    """One DeepEP dispatch or combine in which one rank's tokens hold `token_bytes` (every token
    once, its imbalance included): the network and NVLink copies (deepep_copies) flow at once,
    the slower sets the time, the network's at deepep_network_bytes_per_s; one call latency
    plus one hop's."""
    if ep <= 1 or token_bytes <= 0:
        return 0.0
    network, nvlink = deepep_copies(m, ep, links.per_domain)
    t_inter = network * token_bytes / deepep_network_bytes_per_s(ep, links, net) if network > 0 else 0.0
    t_intra = nvlink * token_bytes / (links.intra.bw_bytes_per_s * net.intra_node)
    hop = links.inter.latency_s if network > 0 else links.intra.latency_s
    return net.call_latency_s + hop + max(t_inter, t_intra)


def dualpipe_applies(job, o: Outer) -> bool:
    """Whether job.pipeline_schedule dualpipe pairs this configuration's forward and backward
    chunks so that each one's all-to-alls run under the other's compute (cost/dualpipe.py):
    a pipeline and expert parallelism."""
    return job.pipeline_schedule is PipelineSchedule.DUALPIPE and o.ep > 1 and o.pp > 1


def a2a_overlap_applies(job, o: Outer) -> bool:
    """Whether job.moe_a2a_overlap hides this outer configuration's all-to-alls: Megatron-core's
    --overlap-moe-expert-parallel-comm needs expert parallelism and, with a pipeline, the
    interleaved schedule (TransformerConfig's checks, Megatron-LM d98e8a6: "only supported with
    expert model parallelism"; "virtual_pipeline_model_parallel_size must be specified when
    pipeline_model_parallel_size > 1"). Elsewhere the plan runs, and is priced and exported,
    without it."""
    return job.moe_a2a_overlap and o.ep > 1 and (o.pp == 1 or o.virtual_stages > 1)


def pairs_unpipelined_micro_batches(job, ep: int) -> bool:
    """Whether a pipeline-free replica (pp = 1) of a configuration with these experts runs
    Megatron-core's combined 1F1B (a2a_overlap_applies), whose stashed micro-batches are
    min(2, m) (cost/coefficients.a2a_overlap_warmup_chunks + 1), not one: where a replica's
    count is a decision (a mixed cluster's classes) it runs at least 2, so that its memory does
    not depend on the count (solver/space._count_form)."""
    return job.moe_a2a_overlap and ep > 1


def shared_overlap_applies(job, o: Outer) -> bool:
    """Whether job.moe_shared_expert_overlap hides part of this configuration's all-to-alls:
    Megatron-core's --moe-shared-expert-overlap runs the shared expert on its own stream inside
    the all-to-all token dispatcher (any pipeline schedule); there is an all-to-all only with
    ep > 1."""
    return job.moe_shared_expert_overlap and o.ep > 1


def shared_mlp_times_s(m, o: Outer, gpu: GpuSpec,
                       matmul_time_s: Callable[[float, GpuSpec], float]) -> tuple[float, float]:
    """(forward, backward) seconds of the shared expert's GEMMs, one micro-batch: its MLP of
    width shared_ffn on every token of the replica's cp shard, split over tp as a dense MLP
    (backward: the input- and weight-gradient GEMMs, twice the forward). What
    --moe-shared-expert-overlap runs under the all-to-alls: fc1 and the activation during the
    dispatch, fc2 during the combine (token_dispatcher.py, shared_experts.py)."""
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    tokens = o.micro_batch * m.seq_len / o.cp
    one = 2 * tokens * m.hidden * m.moe.shared_ffn / o.tp
    f = n_in * matmul_time_s(one, gpu) + matmul_time_s(one, gpu)
    return f, 2 * f


# The fitted value (cost/moe_params.py; the measurement below is its unfitted start and
# bounds-check) of the fraction of the all-to-all time that fits under the paired compute which Megatron-core's
# combined 1F1B actually hides (a2a_overlap_split). Measured from the one published pair that
# differs only in the overlap: Megatron-MoE-ModelZoo's Qwen3-235B table on 256 H100 (DeepEP,
# tp 2, ep 32, pp 8, vpp 4) runs 19.7 s per step without and 17.6 s with
# --overlap-moe-expert-parallel-comm (245 and 276 TFLOP/s; cost/published/moe.yaml rows
# modelzoo-qwen3-235b-256xH100-deepep-ep32[-a2a-overlap]). Hiding all of it, paraplan priced
# the overlap at 1.31x; the fraction that reproduces the measured 1.119x (step times) or 1.127x
# (TFLOP/s, both rounded) on those plans is 0.45 or 0.47 (bisection; tests/validation/
# test_moe_anchor.py recomputes it). Physically in [0, 1]: the schedule pairs a forward chunk
# with a backward chunk layer by layer, and the dependencies inside a layer (dispatch before
# the experts, combine after them) leave part of each all-to-all without compute to run under.
# Held out, the six other published overlap runs go from +13.8% to +1.9% mean error (mean
# |error| 14.9% to 9.7%; README "Mixture of experts").
COMBINED_1F1B_HIDDEN_FRACTION = moe_params.FITTED.combined_1f1b_hidden_fraction


def a2a_hidden_fraction(job, o: Outer) -> float:
    """The share of the coverable all-to-all time the schedule that pairs this configuration's
    micro-batches hides (a2a_overlap_split): DualPipe's chunk pairs 1, Megatron-core's combined
    1F1B COMBINED_1F1B_HIDDEN_FRACTION."""
    return 1.0 if dualpipe_applies(job, o) else moe_params.active().combined_1f1b_hidden_fraction


def a2a_overlap_split(a2a_s: float, compute_s: float, hidden_fraction: float = 1.0) -> tuple[float, float]:
    """(exposed, hidden) seconds of one layer's all-to-alls, forward and backward (`a2a_s`),
    when they run beside paired compute (`compute_s`): at most what the compute covers, times
    `hidden_fraction`, hides; the rest shows. Megatron-core's combined 1F1B
    (megatron/core/pipeline_parallel/combined_1f1b.py) runs a layer's forward of one
    micro-batch with its backward of another, each one's dispatch and combine on a
    communication stream under the other's compute, and hides COMBINED_1F1B_HIDDEN_FRACTION of
    what fits; DualPipe's chunk pairs and the shared expert's stream are priced at 1."""
    hidden = hidden_fraction * min(a2a_s, compute_s)
    return a2a_s - hidden, hidden


def imbalance(m) -> float:
    """The factor applied to the busiest rank's routed tokens: the model's imbalance (default
    the fitted dropless imbalance, cost/moe_params.py), capped by its capacity factor."""
    x = m.moe.imbalance if m.moe.imbalance is not None else moe_params.active().dropless_imbalance
    cap = m.moe.capacity_factor
    return x if cap is None else min(x, cap)


@dataclass(frozen=True, slots=True)
class EpLinks:
    """What an expert-parallel all-to-all sees from one rank: the NVLink link to the
    `per_domain - 1` peers in its NVLink domain and the NIC to the others."""

    intra: Link
    inter: Link
    per_domain: int


def ep_links(cluster: NodeGroup, ep: int, stride: int) -> EpLinks:
    """The links of an ep group whose ranks lie `stride` (the plan's etp) apart (module
    docstring)."""
    per_domain = max(1, min(ep, cluster.domain_gpus // stride)) if stride <= cluster.domain_gpus else 1
    inter = cluster.inter_node
    if cluster.tiers:  # peers beyond a leaf or pod: its uplinks' share and hops (cost/fabric.py)
        cross = fabric.all_to_all_crossing(cluster.tiers, cluster.gpus_per_node, ep, stride,
                                           per_domain)
        inter = Link(bw_bytes_per_s=inter.bw_bytes_per_s * cross.bw_factor,
                     latency_s=inter.latency_s + cross.ring_latency_s)
    return EpLinks(intra=cluster.intra_node, inter=inter, per_domain=per_domain)


def all_to_all_time_s(n_bytes: float, ep: int, links: EpLinks | tuple[Link, bool],
                      net: NetEfficiency) -> float:
    """One all-to-all in which each of `ep` ranks holds `n_bytes` and keeps 1/ep of it: NCCL's
    send/recv pairs to every peer, issued together. Traffic to the peers inside the NVLink
    domain and to those beyond it flow at once on their own links; one call latency plus one
    hop's. Given a plain (link, inter-node) pair instead (a site that states only its
    data-parallel link, e.g. a node group of a mixed cluster), all peers use that link."""
    if ep <= 1 or n_bytes <= 0:
        return 0.0
    if not isinstance(links, EpLinks):
        link, inter = links
        eff = net.inter_node if inter else net.intra_node
        return (net.call_latency_s + link.latency_s
                + (ep - 1) / ep * n_bytes / (link.bw_bytes_per_s * eff))
    g = links.per_domain
    t_intra = (g - 1) / ep * n_bytes / (links.intra.bw_bytes_per_s * net.intra_node)
    t_inter = (ep - g) / ep * n_bytes / (links.inter.bw_bytes_per_s * net.inter_node)
    hop = links.inter.latency_s if ep > g else links.intra.latency_s
    return net.call_latency_s + hop + max(t_intra, t_inter)


@dataclass(frozen=True, slots=True)
class ExpertTerms:
    """What an MoE layer adds to its attention view, one micro-batch on the busiest rank:
    compute (router, expert GEMMs, permutation, activation), the ep all-to-all and the
    routed tokens' tp all-gather + reduce-scatter, all on the critical path (with
    job.moe_a2a_overlap, cost/coefficients.moe_layer hides the all-to-all where
    a2a_overlap_applies); stashed activations; expert parameters per GPU."""

    compute_f_s: float
    compute_b_s: float
    a2a_f_s: float
    a2a_b_s: float
    tp_f_s: float
    tp_b_s: float
    act_bytes: float
    params: float  # expert weight parameters one GPU holds
    wgrad_s: float = 0.0  # backward's weight-gradient GEMMs (router and experts)


def routed_tokens(m, b: int, cp: int, ep: int, fold: float = 1.0, balanced: bool = False) -> float:
    """Routed token copies the busiest ep rank's experts process per micro-batch (the whole etp
    group's): imbalance (ep > 1) x top_k x the tokens of one replica's cp shard x `fold`, the
    etp group's share of them (fold(o): etp / tp; 1 where etp = tp). Balanced, every rank
    receives what it sends: its tokens' top_k copies, and the etp group gathers its ranks'.
    `balanced`: the mean rank's copies, without the imbalance (what a rank stashes: STASH_IMBALANCE)."""
    skew = 1.0 if ep <= 1 else (min(STASH_IMBALANCE, imbalance(m)) if balanced else imbalance(m))
    return skew * m.moe.top_k * b * m.seq_len / cp * fold


def fold(o: Outer) -> float:
    """etp / tp: how many attention tensor-parallel ranks' tokens an expert tensor-parallel
    group gathers, over tp (module docstring; etp != tp needs sequence parallelism or tp = 1,
    cost/specs.moe_fold_problem). 1 where etp = tp, whatever sequence parallelism."""
    return 1.0 if o.etp is None else o.etp / o.tp


def own_share(o: Outer) -> int:
    """Ranks of the etp group over which its routed copies are split before the all-gather
    (each rank's own tokens' copies): etp with sequence parallelism or parallel folding; 1
    with tp = etp > 1 and no sequence parallelism (every tp rank holds the replica's tokens)."""
    return o.expert_tp if (o.sequence_parallel or o.etp is not None) else 1


def edp_ranks(dp_ranks: int, o: Outer) -> int:
    """The expert-data-parallel group's size, tp * dp_ranks / (ep * etp), where `dp_ranks` is
    the stage's data x context parallel ranks (dp * cp; on a mixed cluster every replica's):
    the ranks holding the same experts (module docstring)."""
    return dp_ranks * o.tp // (o.ep * o.expert_tp)


def expert_param_tensors(m, o: Outer) -> int:
    """Weight tensors of a GPU's local experts in one MoE layer (experts / ep, each MLP-in, and
    for SwiGLU its gate, and MLP-out), as a per-tensor ZeRO-3 gather sees them
    (framework.gather_calls; Megatron-FSDP gathers a whole layer in one call); with
    `ModelSpec.expert_bias` a bias beside each."""
    return m.moe.experts // o.ep * ((2 if m.mlp is Mlp.SWIGLU else 1) + 1) * (1 + m.expert_bias)


def expert_fp8_cast_elements(m, o: Outer) -> tuple[float, float, float]:
    """Elements one GPU casts to FP8 in stand-alone kernels for one MoE layer's experts:
    (forward per micro-batch, backward per micro-batch, weights per cast pass).

    Megatron-core runs FP8 experts as Transformer Engine GroupedLinear layers (TEGroupedMLP),
    which are plain linears: nothing fuses their input casts into the producer, as
    LayerNormLinear does for the dense MLP-in. Forward casts MLP-in's input, the routed
    copies at full width on every etp rank, and MLP-out's input, the activation's output (its
    fe/etp share); backward casts the two output gradients arriving in bf16 (MLP-out's at full
    width, MLP-in's n_in x fe/etp), the same accounting as cost/flops.fp8_cast_elements gives a
    dense layer. Weights: the rank's local experts, cast as the dense weights are (once per
    iteration where the framework caches them, cost/framework.Behaviour.fp8_weight_cache)."""
    moe = m.moe
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    routed = routed_tokens(m, o.micro_batch, o.cp, o.ep, fold(o))
    fe_tp = moe.expert_ffn / o.expert_tp
    forward = routed * (m.hidden + fe_tp)
    backward = routed * (m.hidden + n_in * fe_tp)
    weights = moe.experts // o.ep * (n_in + 1) * m.hidden * fe_tp
    return forward, backward, weights


def a2a_bytes(m, o: Outer) -> float:
    """Bytes one rank puts into one dispatch (or combine) all-to-all: its own tokens' routed
    copies, bf16 (the etp group's routed copies over own_share: with sequence parallelism a
    rank's 1/tp share of the tokens, tp = etp; without it, every tp rank sends the replica's)."""
    return routed_tokens(m, o.micro_batch, o.cp, o.ep, fold(o)) * m.hidden * BF16_BYTES / own_share(o)


def expert_act_bytes(inst: Instance, o: Outer) -> float:
    """Bytes one GPU stashes for backward in one MoE layer's experts, one micro-batch.

    Megatron-core at d98e8a6 (moe/experts.py TEGroupedMLP, moe/token_dispatcher.py): the
    router's probabilities travel with the tokens (permute(..., probs=...)) and are applied in
    the experts' weighted activation (fusions/fused_bias_swiglu.weighted_bias_swiglu_impl), so
    the combine's unpermute saves only its index map and the expert outputs are not stashed.
    Stashed:
      MLP-in's input      the routed copies at full width on every etp rank (its wgrad reads
                          them), as its Transformer Engine GroupedLinear saves them: fp8 (1 byte)
                          in an FP8 job, bf16 otherwise
      activation input    MLP-in's outputs, n_in x fe/etp per copy, bf16 (1 byte with
                          job.activation_fp8_input_store, TransformerConfig activation_func_fp8_input_store)
      MLP-out's input     the activation's output, fe/etp per copy, as MLP-in's input; none with
                          job.recompute_modules moe_act (recomputed from the activation input)
      probabilities       the permuted probabilities (fp32, one per copy) and the router's
                          fp32 probabilities over all experts for the rank's own tokens."""
    m, job = inst.model, inst.job
    if RecomputeModule.MOE in job.recompute_modules:
        # the part is rerun from its input, which the layer's attention view already stashes
        # (the pre-MLP norm's input); nothing of the routed copies stays
        return 0.0
    moe = m.moe
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    fe_tp = moe.expert_ffn / o.expert_tp
    split = o.tp if o.sequence_parallel else 1
    routed = routed_tokens(m, o.micro_batch, o.cp, o.ep, fold(o), balanced=True)  # STASH_IMBALANCE
    lin_in = memory.linear_input_bytes(job.precision, job.framework)
    act_in = memory.activation_input_bytes(job)
    out = 0.0 if RecomputeModule.MOE_ACT in job.recompute_modules else lin_in * routed * fe_tp
    probs = routed * ROUTER_LOGIT_BYTES + o.micro_batch * m.seq_len / o.cp / split * moe.experts * ROUTER_LOGIT_BYTES
    inputs = _offloadable_bytes(inst, o, balanced=True)
    kept = sum(b for mod, b in inputs.items() if mod not in job.offload_modules)
    return kept + out + probs


def _offloadable_bytes(inst: Instance, o: Outer, balanced: bool = False) -> dict[OffloadModule, float]:
    """The two expert inputs of one MoE layer one GPU stashes per micro-batch (expert_act_bytes:
    MLP-in's input, the activation's input), by the offload module that names each: the busiest
    rank's (what its copies over the host link take, a time) or, `balanced`, the mean rank's
    (what a rank holds, STASH_IMBALANCE)."""
    m, job = inst.model, inst.job
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    routed = routed_tokens(m, o.micro_batch, o.cp, o.ep, fold(o), balanced=balanced)
    return {OffloadModule.EXPERT_FC1: memory.linear_input_bytes(job.precision, job.framework) * routed * m.hidden,
            OffloadModule.MOE_ACT: memory.activation_input_bytes(job) * n_in * routed * m.moe.expert_ffn / o.expert_tp}


def offload_exposed_s(inst: Instance, o: Outer, gpu: GpuSpec, compute_s: float) -> float:
    """Seconds one pass (forward or backward) of one MoE layer waits on activation offloading
    (job.offload_modules), one micro-batch: the offloaded inputs cross the GPU's host link
    (GpuSpec.host_link_bw_bytes_per_s, one direction) once each way, to the host after forward
    and back before backward. Megatron-core copies them on a side stream
    (fine_grained_activation_offloading at Megatron-LM d98e8a6), so the layer's own expert
    compute of that pass, `compute_s`, hides them and only the excess shows."""
    if not inst.job.offload_modules or RecomputeModule.MOE in inst.job.recompute_modules:
        return 0.0
    moved = sum(b for mod, b in _offloadable_bytes(inst, o).items() if mod in inst.job.offload_modules)
    return max(0.0, moved / gpu.host_link_bw_bytes_per_s - compute_s)


def expert_terms(inst: Instance, o: Outer, gpu: GpuSpec, tp_link: tuple[Link, bool],
                 links: EpLinks | tuple[Link, bool], net: NetEfficiency,
                 matmul_time_s: Callable[[float, GpuSpec], float],
                 memory_time_s: Callable[[float, GpuSpec], float]) -> ExpertTerms:
    """The expert part of one MoE layer (module docstring). `tp_link`: the expert
    tensor-parallel group's link (etp consecutive ranks). `matmul_time_s` / `memory_time_s`
    price one GEMM and one memory-bound pass as cost/coefficients does for the dense layer."""
    m = inst.model
    moe = m.moe
    tp, cp, b, sp = o.tp, o.cp, o.micro_batch, o.sequence_parallel
    etp = o.expert_tp
    h, fe = m.hidden, moe.expert_ffn
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    split = tp if sp else 1  # tokens held per rank before dispatch: 1/tp with sequence parallel
    tokens = b * m.seq_len / cp
    routed = routed_tokens(m, b, cp, o.ep, fold(o))  # the etp group's routed copies
    own = own_share(o)  # routed / own: a rank's own tokens' copies (etp = tp: routed / split)
    local = moe.experts // o.ep
    per_expert = routed / local

    router = matmul_time_s(2 * tokens / split * h * moe.experts, gpu)
    # Each expert GEMM streams its weight from HBM at least once: a GEMM of few tokens per
    # expert is bound by that read, not by its FLOPs (roofline: a weight element serves
    # 2 x tokens FLOPs, below the GPU's FLOP/byte ridge when tokens per expert are few, e.g.
    # ~128 with 128 experts on every rank). DeepGEMM's grouped GEMMs on H800 show it: at 256
    # tokens per group 932 of 1,297 TFLOP/s, reading 2 TB/s (deepseek-ai/DeepGEMM README,
    # masked layout). Forward and the input-gradient GEMMs read the weights (in fp8 under FP8,
    # cast once per iteration, as cost/memory caches them); the weight-gradient GEMMs
    # accumulate into the gradient buffer (read + write of the framework's gradient bytes).
    w = h * fe / etp  # elements of one expert's MLP-in (n_in of them) and of its MLP-out
    wb = memory.FP8_BYTES if inst.job.precision is Precision.FP8 else BF16_BYTES
    grad_rw = 2 * memory.state_layout(inst.job).grad

    params = moe_params.active()
    # A grouped GEMM runs each expert's rows in whole tiles: forward and the input gradients
    # (tokens on the GEMM's M axis) pay on average half a tile of padding per expert
    # (padded_tokens); the weight gradients have the tokens on K and pay none. Each expert GEMM
    # reaches params.grouped_gemm_eff of a dense GEMM of its FLOPs (cost/moe_params.py).
    def gemm_s(tokens: float, per_weight_bytes: float) -> float:
        return max(matmul_time_s(2 * tokens * w, gpu) / params.grouped_gemm_eff,
                   memory_time_s(w * per_weight_bytes, gpu))
    # The host loop over the local experts that each grouped call runs before its GEMMs
    # (expert_host_s: beside them, not under them); backward runs it for the input and again
    # for the weight gradients.
    issue = expert_host_s(local, params.expert_gemm_issue_s)
    gemms = local * (n_in + 1) * gemm_s(padded_tokens(per_expert), wb) + issue  # forward; input gradients the same
    gemms_w = local * (n_in + 1) * gemm_s(per_expert, grad_rw) + issue  # the weight gradients
    permute = PERMUTE_PASSES * 2 * routed / own * h * BF16_BYTES
    permute += chunk_sort_passes(inst.job, local) * 2 * routed * h * BF16_BYTES  # on what the rank received
    activation = (n_in + 1) * routed * fe / etp * BF16_BYTES
    router_elem = 3 * tokens / split * moe.experts * ROUTER_LOGIT_BYTES
    # GEMM output stores (cost/flops.gemm_output_elements): forward MLP-in and MLP-out
    # outputs, backward the input gradients
    out_f = routed * (n_in * fe / etp + h)
    out_b = routed * (n_in * h + fe / etp)
    elem = memory_time_s(permute + activation + router_elem, gpu)
    # the exposed host-side time of a dropless layer (cost/moe_params.py layer_fixed_s): one
    # third in forward, two in backward, which issues twice the kernels
    fixed = params.layer_fixed_s
    compute_f = router + gemms + elem + memory_time_s(BF16_BYTES * out_f, gpu) + fixed / 3
    compute_b = (2 * router + gemms + gemms_w + 2 * elem + memory_time_s(BF16_BYTES * out_b, gpu)
                 + 2 * fixed / 3)
    whole = RecomputeModule.MOE in inst.job.recompute_modules
    if whole:
        # the whole part rerun before backward (its forward once more, the activation with it)
        compute_b += compute_f
    elif RecomputeModule.MOE_ACT in inst.job.recompute_modules:
        # the activation rerun before backward: reads its stashed input, writes its output
        act_in = memory.activation_input_bytes(inst.job)
        compute_b += memory_time_s((act_in * n_in + BF16_BYTES) * routed * fe / etp, gpu)

    compute_f += offload_exposed_s(inst, o, gpu, compute_f)
    compute_b += offload_exposed_s(inst, o, gpu, compute_b)

    if inst.job.moe_dispatcher is MoeDispatcher.DEEPEP and isinstance(links, EpLinks):
        # every token once (imbalance included), copied as deepep_copies says
        token_bytes = routed / moe.top_k * h * BF16_BYTES / own
        fp8 = inst.job.precision is Precision.FP8
        dispatch = deepep_time_s(token_bytes * (FP8_DISPATCH_BYTES_PER_ELEMENT / BF16_BYTES if fp8 else 1),
                                 m, o.ep, links, net)
        a2a = dispatch + deepep_time_s(token_bytes, m, o.ep, links, net)
    else:
        a2a = 2 * all_to_all_time_s(a2a_bytes(m, o), o.ep, links, net)  # dispatch + combine
    link, inter = tp_link
    # the etp group's all-gather of the routed copies and the reduce-scatter of their outputs
    # (the same ring volume, comm.all_gather_time_s)
    tp_pair = 2 * comm.all_gather_time_s(routed * h * BF16_BYTES, etp, link, inter, net)

    act = expert_act_bytes(inst, o)
    params = local * (n_in + 1) * h * fe / etp
    if m.expert_bias:  # MLP-in's biases split over etp like its columns, MLP-out's whole on each
        # rank (a row-parallel bias); their FLOPs (one per output element) are not priced, and
        # cost/memory.fp8_expert_weight_bytes counts them as weights (a 1/hidden overcount)
        params += local * (n_in * fe / etp + h)
    # the weight-gradient GEMMs of backward (the router's and the experts'), each the size of
    # its forward GEMM: what DualPipe defers into the bubble (cost/dualpipe.py)
    # with the whole part recomputed, backward runs the forward's dispatch, combine and etp
    # collectives again before its own
    return ExpertTerms(compute_f_s=compute_f, compute_b_s=compute_b, a2a_f_s=a2a,
                       a2a_b_s=2 * a2a if whole else a2a, tp_f_s=tp_pair,
                       tp_b_s=2 * tp_pair if whole else tp_pair, act_bytes=act, params=params,
                       wgrad_s=router + gemms_w)
