"""Per-operator tensor partitions of one transformer layer over its tensor-parallel group:
Megatron 1-D splits and PrimePar's spatial-temporal primitive P(q x q), alone or composed.

Source: H. Wang et al., "PrimePar: Efficient Spatial-temporal Tensor Partitioning for Large
Transformer Model Training", ASPLOS 2024, Sec. 3 (Eqs. 4-6, Table 1, Alg. 1). The index rules
are checked by tests/partition/test_primitive_rules.py on a numpy simulation; the Gradient
rule (Eq. 6) gives dW = I^T dY exactly only together with Table 1's last-step transfer of the
partial dW from GPU (r, c+1): the last step's block differs from the first q-1 steps'.

Operators of one layer, in order (GEMM widths for tokens T, hidden h, ffn f):
    qkv        [T,h] x [h, q+2*kv_hidden]   its output feeds the attention core (q = heads*head_dim)
    attn_core  QK^T, softmax, PV: always split by heads over the whole group (PrimePar leaves
               P on the batched matmuls open; we do not use it). Its candidates are only the
               head-to-GPU assignments (which GPU holds which head chunk), see `core_candidates`.
    attn_out   [T,q] x [q,h]                into the residual stream
    mlp_in     [T,h] x [h,f] (SwiGLU: two such GEMMs, gate and up)
    mlp_out    [T,f] x [f,h]                into the residual stream

A linear operator's partition (`OpPartition`) over a group of t = J * q^2 GPUs (rank
rho = w*q^2 + r*q + c; the fast-varying q^2 ranks form the P grid, so it stays in a node when
it fits): the weight's K columns ("K", column parallel) or N rows ("N", row parallel) are split
J ways over w (the slow ranks, e.g. across nodes), then P(q x q) runs inside each grid (q = 1:
no grid, i.e. Megatron 1-D over all t ranks). Written like PrimePar's Alg. 1 sequences:
`K` / `N` (1-D over the whole group), `P2x2`, `K2*P2x2` (K split in two, P(2x2) inside).

Token split "T": the op's input rows (tokens) are split t ways and every GPU holds the whole
weight (data parallelism over the tp group for this one operator). A linear op's GEMM is
row-separable, O[m, :] = I[m, :] W, so splitting the batch or the sequence dimension is the
same operator partition: both cut the M = b*s rows of [b*s, N] x [N, K] into t blocks, with
the same GEMM, stash, layout sizes and weight-gradient sum; one candidate "T" covers both
(its rows are those of the GPU's token slice, in any fixed order). Costs: no activation
communication inside the op; its input and output layouts are token blocks (reshards to the
replicated residual stream and to the head-split attention core go through the same cell
machinery); the weight, its gradient and its optimizer state are replicated on all t GPUs
(`replicated_params`, counted in the layer's state bytes by cost/coefficients.build), and the
weight gradient, accumulated locally over the micro-batches, is summed by one ring all-reduce
over the group per iteration (`grad_sync_s`, fp32), which runs before and like the
data-parallel gradient sync (cost/coefficients._layer_costs: overlapped with the last
micro-batch's backward, once per iteration). The attention core is not a linear op: it keeps
its head split.

The residual stream (layer input and output, the two norms, dropouts and residual adds) is
one more choice of the layer plan, `stream` (`stream_candidates`), met by qkv and mlp_in (input
from it, input gradient back) and by attn_out and mlp_out (output into it, output gradient
from it): the edges ("stream", op) of `EDGES`. Its layouts:
    replicated  every GPU holds the whole stream (Megatron without sequence parallelism)
    seq         GPU rho holds token block rho of t, all hidden columns (Megatron's sequence
                parallelism; exactly a T op's layout)
    B{q}x{q}    PrimePar's partitioned norms and element-wise operators: GPU (w, r, c) holds
                token rows r*J + w of J*q and hidden columns c of q (t = J*q^2): a sub-block
                of the P(q x q) output block (r, c), so a P op's output lands on it with no
                move and the partial sums of a composite are reduce-scattered onto it. The
                norms need per-token statistics over the hidden dimension: LayerNorm's mean and
                variance forward (2 fp32 per token) and its two per-token sums backward (2 fp32
                per token), each a ring all-reduce over the q GPUs that share the token rows
                (consecutive ranks), two norms per layer (`stream_cost`).
Every op reshards from/to the chosen layout with the same cell machinery (partial sums
reduce-scattered onto it when each holder needs its own share: Megatron's sequence-parallel
reduce-scatter), so P, T and Megatron's splits all combine with every stream layout.

Declared-space rules (documented limits of this model):
- The stream layout between layers is what the outer configuration's sequence_parallel flag
  prices at stage boundaries, checkpoints and the final norm (cost/coefficients.build): a
  whole copy without it (stream `replicated`, the only choice), a 1/t share with it (stream
  `seq` or, with spatial-temporal partitions, `B{q}x{q}`: both hold 1/t of the stream, so
  their elementwise time and norm/dropout stashes are megatron_layer's sequence-parallel ones).
- Megatron's column-parallel ops stash their input shard when the stream is split (re-gathered
  in backward, hidden, as megatron_layer assumes for sequence parallelism).
- T is not offered with ZeRO-3: FSDP would gather and reduce-scatter the replicated weight
  over the data-parallel group every micro-batch, a different gradient path than the one priced.
- Every layer uses the same partition plan (layers are identical).

Costs of one layer, one micro-batch, one GPU (all exact functions of the instance):
- compute: Megatron ops as in cost/coefficients.megatron_layer (one GEMM call per matmul);
  P(q x q): each phase (forward; backward = input-gradient and weight-gradient phases) is q
  steps of a GEMM of 1/q the op's per-GPU FLOPs, and a step takes max(GEMM, neighbour shift)
  (PrimePar Eq. 7; double-buffered, Fig. 4). The shift volumes per step are PrimePar Table 1.
- resharding between consecutive operators (PrimePar Eqs. 8-9): partial sums are all-reduced
  over the ranks that hold them, then every GPU fetches the cells of its next block that it
  lacks; time = the largest per-GPU volume / link bandwidth + one latency per distinct source
  set, on the smallest aligned rank block that contains the sources. When every holder of a
  partial block needs its own equal share of it, a reduce-scatter onto those shares is priced
  instead if faster. On Megatron's layouts this is exactly the ring all-reduce / all-gather /
  reduce-scatter of cost/comm.py. Reshards are on the critical path, forward and backward
  (megatron_layer hides part of Megatron-LM's backward collectives behind the gradient GEMMs,
  coefficients.tp_backward_exposed; a plan of Megatron's layouts is priced by megatron_layer
  itself, so this table's Megatron row is that plan with its backward collectives exposed).
- memory: each op stashes its own input block for the weight gradient; P ops need a double
  buffer for the blocks in flight (transient, added to the layer's workspace); T ops hold
  (1 - 1/t) of their weight more than a split op (state, per layer, not transient).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from paraplan.cost import comm
from paraplan.cost.coefficients import (BACKWARD_LINEAR_FACTOR, LayerTerms, Site, matmul_time_s,
                               megatron_layer)
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import BF16_BYTES
from paraplan.cost.framework import behaviour
from paraplan.cost.specs import Instance, Link, Mlp, Outer
# the closed set of partitions and a plan's rules (split out so that cost/specs.py's Plan can
# check its partitions without importing this module); is_token_split, parse_op and
# token_split_allowed are used through this module by solver/ and tests
from paraplan.cost.partition_names import (LINEAR_OPS, MAX_SPATIAL_TEMPORAL_GROUP, MEGATRON_DEFAULT,
                                  MEGATRON_STREAMS, OPS, PLAN_OPS, STREAM, OpPartition,
                                  core_candidates, is_megatron, is_token_split, op_candidates,
                                  parse_op, plan_allowed, spatial_temporal_allowed, spec_of,
                                  stream_allowed, stream_candidates, stream_grid,
                                  token_split_allowed)

DISPLAY_NAMES = {"qkv": "attn.qkv", "attn_core": "attn.core", "attn_out": "attn.out",
                 "mlp_in": "mlp.fc1", "mlp_out": "mlp.fc2", STREAM: "stream"}
# the operators whose layouts meet directly, in chain order; the stream meets the four linear
# ops at the ends of the two chains (the stream is the chains' common cut point)
CHAIN_EDGES = (("qkv", "attn_core"), ("attn_core", "attn_out"), ("mlp_in", "mlp_out"))
STREAM_EDGES = ((STREAM, "qkv"), (STREAM, "attn_out"), (STREAM, "mlp_in"), (STREAM, "mlp_out"))
EDGES = CHAIN_EDGES + STREAM_EDGES
# LayerNorm's per-token statistics: mean and variance forward, sum(g*dy) and sum(g*dy*xhat)
# backward, fp32 each; once per norm of the layer (ModelSpec.norms_per_layer)
NORM_STAT_BYTES_PER_TOKEN = 2 * 4
# weight-gradient partial sums travel in the fp32 accumulation precision (Megatron main_grad)
GRAD_ACCUM_BYTES = 4


# ---------------------------------------------------------------- layouts on a cell grid
# A [rows, cols] activation is cut into t x t cells; a layout says which cells each of the t
# GPUs holds (bool array [t, t, t]) and whether they are partial sums over the J slow ranks.


def _block_mask(t: int, rows, cols) -> np.ndarray:
    """rows(rho), cols(rho) -> (part index, parts) of each dimension held by GPU rho."""
    mask = np.zeros((t, t, t), bool)
    for rho in range(t):
        ri, rn = rows(rho)
        ci, cn = cols(rho)
        mask[rho, ri * t // rn:(ri + 1) * t // rn, ci * t // cn:(ci + 1) * t // cn] = True
    return mask


def _grid(rho: int, q: int) -> tuple[int, int, int]:
    return rho // (q * q), (rho // q) % q, rho % q


@lru_cache(maxsize=None)
def op_layout(p: OpPartition, t: int, role: str) -> tuple[np.ndarray, int]:
    """(cells, partial_over) of one tensor of a linear op at a phase boundary.

    role: "in" (input at forward step 0), "out" (output after forward), "dy" (output gradient
    at backward step 0), "dx" (input gradient after backward). PrimePar Eqs. 4-5 with t = 0 /
    the last step: in (M=r, N=r+c), out and dy (M=r, K=c), dx (M=r, N=r+c-1)."""
    if p.outer == "T":  # every tensor is a block of token rows with whole columns
        return _block_mask(t, lambda rho: (rho, t), lambda rho: (0, 1)), 1
    q, J = p.q, p.outer_parts
    skew = {"in": 0, "dx": -1}.get(role, None)
    rows = lambda rho: (_grid(rho, q)[1], q)  # noqa: E731

    def cols(rho):
        w, r, c = _grid(rho, q)
        inner = c if skew is None else (r + c + skew) % q
        n_dim_split = role in ("in", "dx")  # the N dimension of the weight
        split_outer = (p.outer == "N") == n_dim_split and p.outer != "P"
        return (w * q + inner, J * q) if split_outer else (inner, q)

    partial = 1
    if p.outer == "K" and role == "dx" or p.outer == "N" and role == "out":
        partial = J  # contraction over the outer split: partial sums over the slow ranks
    return _block_mask(t, rows, cols), partial


@lru_cache(maxsize=None)
def core_layout(name: str, t: int) -> np.ndarray:
    if name == "heads":
        return _block_mask(t, lambda rho: (0, 1), lambda rho: (rho, t))
    q = int(name.split("P")[1].rstrip("s"))

    def cols(rho):
        w, r, c = _grid(rho, q)
        inner = (r + c) % q if name.endswith("s") else c
        return ((w * q + inner) * q + r, t)
    return _block_mask(t, lambda rho: (0, 1), cols)


@lru_cache(maxsize=None)
def replicated_layout(t: int) -> np.ndarray:
    return np.ones((t, t, t), bool)


@lru_cache(maxsize=None)
def stream_layout(name: str, t: int) -> np.ndarray:
    """Cells of the [tokens, hidden] stream each GPU holds (module docstring)."""
    if name == "replicated":
        return replicated_layout(t)
    if name == "seq":
        return op_layout(OpPartition("T", t, 1), t, "in")[0]
    q = stream_grid(name)
    j = t // (q * q)

    def rows(rho):
        w, r, _ = _grid(rho, q)
        return r * j + w, j * q
    return _block_mask(t, rows, lambda rho: (_grid(rho, q)[2], q))


@dataclass(frozen=True, slots=True)
class Links:
    """Links of the tensor-parallel group's aligned rank blocks: `block[k]` for 2^k ranks."""

    block: tuple[tuple[Link, bool], ...]

    def for_size(self, size: int) -> tuple[Link, bool]:
        return self.block[max(0, size.bit_length() - 1)]


def group_links(inst: Instance, o: Outer, site: Site) -> Links:
    """Whole group: the site's tp link (as megatron_layer uses it). Sub-blocks of a group that
    lies in one node use the same link; of a group spanning nodes, cost/comm.group_link."""
    out, size = [], 1
    while size <= o.tp:
        if size == o.tp or not site.tp_link[1]:
            out.append(site.tp_link)
        else:
            out.append(comm.group_link(inst.cluster.one_group, size, 1))
        size *= 2
    return Links(tuple(out))


def _strided_link(inst: Instance, o: Outer, site: Site, size: int, stride: int) -> tuple[Link, bool]:
    """Link of `size` ranks `stride` apart inside the tp group: the site's tp link for the
    whole group (or any part of a group inside one node), else cost/comm.group_link (one NIC
    share per member when the members sit in different nodes)."""
    if (size == o.tp and stride == 1) or not site.tp_link[1]:
        return site.tp_link
    return comm.group_link(inst.cluster.one_group, size, stride)


def _reshard(src, dst, cell_bytes, links, net) -> tuple[float, bool]:
    """The time for every GPU to fetch the cells of `dst` it lacks in `src` (both non-partial),
    and whether the link it runs on is inter-node."""
    cells, msgs, span = _reshard_geometry(np.asarray(src, bool).tobytes(),
                                          np.asarray(dst, bool).tobytes(), src.shape)
    if not cells:
        return 0.0, False
    link, inter = links.for_size(span)
    bw = link.bw_bytes_per_s * (net.inter_node if inter else net.intra_node)
    return cells * cell_bytes / bw + msgs * link.latency_s, inter


@lru_cache(maxsize=65536)  # a few hundred distinct mask pairs recur across every layer table
def _reshard_geometry(src_bytes: bytes, dst_bytes: bytes, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """_reshard's geometry, from the masks alone: the most cells one GPU fetches, the most
    distinct owner sets it fetches from (one message each), and the smallest aligned rank block
    around every GPU that holds an owner of each cell it misses (the span of the link used)."""
    src = np.frombuffer(src_bytes, bool).reshape(shape)
    dst = np.frombuffer(dst_bytes, bool).reshape(shape)
    t = shape[0]
    missing = dst & ~src
    if not missing.any():
        return 0, 0, 1
    # owners of each cell as a bitmask of GPUs; one message per distinct owner set
    assert t <= MAX_SPATIAL_TEMPORAL_GROUP  # owner sets as int64 bit masks
    weights = np.int64(1) << np.arange(t, dtype=np.int64)
    owners = np.tensordot(weights, src.astype(np.int64), axes=(0, 0))
    worst_cells, worst_msgs, span = 0, 0, 1
    for rho in range(t):
        cells = missing[rho]
        n = int(cells.sum())
        if not n:
            continue
        sets = np.unique(owners[cells])
        worst_cells = max(worst_cells, n)
        worst_msgs = max(worst_msgs, len(sets))
        # smallest aligned rank block around rho holding an owner of every missing cell
        size = 1
        for s in sets:
            members = [k for k in range(t) if (int(s) >> k) & 1]
            nearest = min(((k ^ rho).bit_length() for k in members))
            size = max(size, 1 << nearest)
        span = max(span, size)
    return worst_cells, worst_msgs, span


@dataclass(frozen=True)
class LayerContext:
    """Everything the per-operator prices of one (instance, outer, site) depend on."""

    inst: Instance
    outer: Outer
    site: Site
    net: NetEfficiency

    @property
    def tokens(self) -> float:
        return self.outer.micro_batch * self.inst.model.seq_len / self.outer.cp


def op_dims(inst: Instance) -> dict[str, tuple[int, int, int]]:
    """(N in, K out, GEMM calls) of each linear op; SwiGLU's gate and up are two calls."""
    m = inst.model
    h, f = m.hidden, m.ffn
    calls_in = 2 if m.mlp is Mlp.SWIGLU else 1
    return {"qkv": (h, m.q_hidden + 2 * m.kv_hidden, 1), "attn_out": (m.q_hidden, h, 1),
            "mlp_in": (h, f * calls_in, calls_in), "mlp_out": (f, h, 1)}


def _p2p_s(n_bytes: float, link: tuple[Link, bool], net: NetEfficiency) -> float:
    return comm.p2p_time_s(n_bytes, link[0], link[1], net)


@dataclass(frozen=True)
class OpCost:
    """One operator's time and memory under one partition of its tensors."""
    fwd_s: float
    bwd_s: float
    compute_s: float  # GEMM time, forward + backward
    ring_overlapped_s: float
    stash_bytes: float  # input block kept for the weight gradient
    buffer_bytes: float  # double buffer of the blocks in flight
    ring_inter_node: bool = False  # the P grid's ring crosses nodes
    replicated_params: float = 0.0  # weight parameters held beyond a 1/t share (T ops)
    grad_sync_s: float = 0.0  # per iteration: weight-gradient all-reduce over the group (T ops)

    @property
    def ring_exposed_s(self) -> float:
        return self.fwd_s + self.bwd_s - self.compute_s


def linear_op_cost(ctx: LayerContext, name: str, p: OpPartition) -> OpCost:
    """GEMM and neighbour-shift time of one linear op, excluding its reshards."""
    gpu, t, T = ctx.site.gpu, ctx.outer.tp, ctx.tokens
    N, K, calls = op_dims(ctx.inst)[name]
    flops = 2 * T * N * K / t / calls  # per GEMM call, per phase
    if p.outer == "T":
        # the GEMMs of a 1/t token block with the whole weight: the FLOPs of a K or N split;
        # the whole weight's fp32 gradient is ring-all-reduced over the group once per iteration
        f = calls * matmul_time_s(flops, gpu)
        link, inter = ctx.site.tp_link
        sync = comm.all_reduce_time_s(GRAD_ACCUM_BYTES * N * K, t, link, inter, ctx.net, tree=False)
        return OpCost(f, BACKWARD_LINEAR_FACTOR * f, (1 + BACKWARD_LINEAR_FACTOR) * f, 0.0,
                      BF16_BYTES * T * N / t, 0.0, replicated_params=N * K * (1 - 1 / t),
                      grad_sync_s=sync)
    n_loc = N / p.outer_parts if p.outer == "N" else N
    k_loc = K / p.outer_parts if p.outer == "K" else K
    stash = BF16_BYTES * T * n_loc / p.q ** 2
    if p.q == 1:
        f = calls * matmul_time_s(flops, gpu)
        return OpCost(f, BACKWARD_LINEAR_FACTOR * f, (1 + BACKWARD_LINEAR_FACTOR) * f, 0.0, stash, 0.0)
    q = p.q
    link = _ring_link(ctx, q)
    i_b = BF16_BYTES * T * n_loc / q ** 2
    w_b = BF16_BYTES * n_loc * k_loc / q ** 2
    o_b = BF16_BYTES * T * k_loc / q ** 2
    dw_b = GRAD_ACCUM_BYTES * n_loc * k_loc / q ** 2
    step_mm = calls * matmul_time_s(flops / q, gpu)
    # bytes received per step (PrimePar Table 1): forward, backward (input grad), gradient
    fwd_steps = [i_b + w_b] * (q - 1) + [0.0]
    bwd_steps = [o_b + w_b] * (q - 1) + [w_b]
    grad_steps = [i_b + o_b] * (q - 1) + [dw_b]

    def phase(steps):
        comm_s = [_p2p_s(x, link, ctx.net) for x in steps]
        return sum(max(step_mm, x) for x in comm_s), sum(min(step_mm, x) for x in comm_s)

    f, f_ov = phase(fwd_steps)
    b1, b1_ov = phase(bwd_steps)
    b2, b2_ov = phase(grad_steps)
    return OpCost(f, b1 + b2, 3 * q * step_mm, f_ov + b1_ov + b2_ov, stash,
                  max(fwd_steps + bwd_steps + grad_steps), link[1])


def _ring_link(ctx: LayerContext, q: int) -> tuple[Link, bool]:
    """Link of P(q x q)'s neighbour shifts. Every GPU of the grid sends a block at the same
    time, so a grid that spans nodes gets one NIC share per GPU (cluster.inter_node), not the
    multi-channel bandwidth of a ring collective (cost/comm.group_link)."""
    if not ctx.site.tp_link[1] or q * q <= ctx.inst.cluster.gpus_per_node:
        return _strided_link(ctx.inst, ctx.outer, ctx.site, q * q, 1)
    return ctx.inst.cluster.inter_node, True


def _reduce_time_s(ctx: LayerContext, p: OpPartition, block_bytes: float,
                   scatter: bool = False) -> tuple[float, bool]:
    """All-reduce (or, with `scatter`, reduce-scatter) of partial sums held by the J slow
    ranks (stride q^2), and whether it crosses nodes."""
    if p.outer_parts <= 1:
        return 0.0, False
    link = _strided_link(ctx.inst, ctx.outer, ctx.site, p.outer_parts, p.q * p.q)
    if scatter:
        return comm.all_gather_time_s(block_bytes, p.outer_parts, link[0], link[1], ctx.net), link[1]
    return comm.all_reduce_time_s(block_bytes, p.outer_parts, link[0], link[1], ctx.net, tree=False), link[1]


def _scattered(mask: np.ndarray, dst: np.ndarray, J: int, stride: int) -> np.ndarray | None:
    """The layout after a reduce-scatter inside every group of J ranks `stride` apart that
    hold the same partial cells, when each member keeps the cells of the group's block it
    needs in `dst`; None unless those needs split the block into J equal disjoint parts (then
    only the all-reduce is offered)."""
    out = np.zeros_like(mask)
    for first in range(stride):
        members = [first + w * stride for w in range(J)]
        block = mask[members[0]]
        need = [dst[m] & block for m in members]
        covered = np.zeros_like(block)
        for m, cells in zip(members, need):
            if cells.sum() * J != block.sum() or (covered & cells).any():
                return None
            covered |= cells
            out[m] = cells
    return out


def _move_split(ctx, links, src_p, src, dst, rows_cols) -> tuple[float, float]:
    """The time to reduce `src`'s partial sums (if any), then fetch the missing cells of `dst`,
    and the part of it spent on inter-node links.

    Partial sums are all-reduced over the ranks that hold them, then the missing cells are
    fetched; or, when every holder needs a distinct equal share of the block in `dst` (e.g.
    Megatron's row-parallel output onto the sequence-parallel stream), reduce-scattered onto
    those shares first (half the all-reduce's ring volume), then the rest is fetched. Both are
    schedules that deliver `dst`; the faster one is priced."""
    t = ctx.outer.tp
    rows, cols = rows_cols
    cell = BF16_BYTES * rows * cols / (t * t)
    mask, partial = src
    block_bytes = BF16_BYTES * rows * cols * mask[0].sum() / (t * t)
    red, red_inter = 0.0, False
    if partial > 1:
        red, red_inter = _reduce_time_s(ctx, src_p, block_bytes)
    fetch, fetch_inter = _reshard(mask, dst, cell, links, ctx.net)
    best = (red + fetch, red * red_inter + fetch * fetch_inter)
    if partial > 1:
        kept = _scattered(mask, dst, partial, src_p.q * src_p.q)
        if kept is not None:
            red, red_inter = _reduce_time_s(ctx, src_p, block_bytes, scatter=True)
            fetch, fetch_inter = _reshard(kept, dst, cell, links, ctx.net)
            if red + fetch < best[0]:
                best = (red + fetch, red * red_inter + fetch * fetch_inter)
    return best


@dataclass(frozen=True)
class LayerTable:
    """Per-operator costs of one layer as arrays (the formulations' input).

    `unary[op]`: array [candidates, 4] of (fwd_s, bwd_s, act_bytes, buffer_bytes) for choosing
    that candidate (op in PLAN_OPS; the stream's row is its norm statistics); `pair[(a, b)]`:
    array [cands(a), cands(b), 2] of (fwd_s, bwd_s) of the reshard between a and b (EDGES: the
    chain edges and the stream's edges to the ops that read from or write into it).
    Layer totals: time = base + sum(unary) + sum(pair); act = base_act + sum; the workspace is
    base_ws + max over ops of buffer_bytes; replicated parameters and the per-iteration
    weight-gradient sync over the group (T ops only, zero for the others and the core) are
    sums over ops."""

    candidates: dict[str, tuple]  # OpPartition per linear op, head-assignment name for the
    # core, layout name for the stream
    unary: dict[str, np.ndarray]
    pair: dict[tuple[str, str], np.ndarray]
    base: LayerTerms  # megatron_layer's terms minus its linear GEMMs and tp collectives
    ring_overlapped: dict[str, np.ndarray]  # [candidates] neighbour shifts hidden behind GEMMs
    compute: dict[str, np.ndarray]  # [candidates] GEMM time, forward + backward
    inter_node: dict[str, np.ndarray]  # [candidates] exposed time on inter-node links
    pair_inter_node: dict[tuple[str, str], np.ndarray]  # [cands(a), cands(b)] the same, per edge
    replicated_params: dict[str, np.ndarray]  # [candidates] parameters beyond a 1/t share
    grad_sync_s: dict[str, np.ndarray]  # [candidates] per iteration, weight-grad all-reduce
    # [cands(stream), cands(op)] backward collectives a framework hides behind the op's gradient
    # GEMMs (Megatron-LM's async column-parallel backward, on Megatron's layouts only)
    pair_hidden: dict[tuple[str, str], np.ndarray]


def layer_table(inst: Instance, o: Outer, site: Site, net: NetEfficiency) -> LayerTable:
    ctx = LayerContext(inst, o, site, net)
    t = o.tp
    st = spatial_temporal_allowed(o)
    links = group_links(inst, o, site)
    dims = op_dims(inst)
    cands = {op: tuple(op_candidates(t, st)) for op in LINEAR_OPS}
    cands["attn_core"] = tuple(core_candidates(t, st))
    cands[STREAM] = tuple(stream_candidates(t, o.sequence_parallel, st))

    unary, ring, compute, inter, rep, sync = _unary_terms(ctx, cands, dims, o.sequence_parallel)
    pair, pair_inter, pair_hidden = _stream_pairs(inst, ctx, links, cands, dims)
    for edge in CHAIN_EDGES:
        pair[edge], pair_inter[edge] = _chain_pair(ctx, links, cands, dims, edge)
    return LayerTable(candidates=cands, unary=unary, pair=pair, base=_base_terms(inst, o, site, net, ctx, cands, unary),
                      ring_overlapped=ring, compute=compute, inter_node=inter,
                      pair_inter_node=pair_inter, replicated_params=rep, grad_sync_s=sync,
                      pair_hidden=pair_hidden)


def _unary_terms(ctx: LayerContext, cands: dict, dims: dict, sp: bool):
    """Per op and candidate: (fwd_s, bwd_s, stash, buffer) rows, the ring's overlapped and the
    compute seconds, the exposed inter-node part, replicated parameters and gradient sync."""
    T, t = ctx.tokens, ctx.outer.tp
    unary, ring, compute, inter, rep, sync = {}, {}, {}, {}, {}, {}
    for op in PLAN_OPS:
        rep[op], sync[op] = np.zeros(len(cands[op])), np.zeros(len(cands[op]))
    for op in LINEAR_OPS:
        rows = np.zeros((len(cands[op]), 4))
        ring[op], compute[op], inter[op] = (np.zeros(len(cands[op])) for _ in range(3))
        for i, p in enumerate(cands[op]):
            c = linear_op_cost(ctx, op, p)
            stash = c.stash_bytes
            if sp and op in ("qkv", "mlp_in") and p.outer == "K" and p.q == 1:
                # Megatron-LM stashes the sequence-parallel shard of a column-parallel input
                # and all-gathers it again in backward, overlapped with the input-gradient
                # GEMM (as megatron_layer prices it: not exposed); a block stream's shard alike
                stash = BF16_BYTES * T * dims[op][0] / t
            rows[i] = (c.fwd_s, c.bwd_s, stash, c.buffer_bytes)
            ring[op][i], compute[op][i] = c.ring_overlapped_s, c.compute_s
            inter[op][i] = c.ring_exposed_s if c.ring_inter_node else 0.0
            rep[op][i], sync[op][i] = c.replicated_params, c.grad_sync_s
        unary[op] = rows
    unary["attn_core"] = np.zeros((len(cands["attn_core"]), 4))
    inter["attn_core"] = np.zeros(len(cands["attn_core"]))
    unary[STREAM] = np.zeros((len(cands[STREAM]), 4))
    inter[STREAM] = np.zeros(len(cands[STREAM]))
    for i, name in enumerate(cands[STREAM]):
        fwd, bwd, inter_s = stream_cost(ctx, name)
        unary[STREAM][i, :2] = (fwd, bwd)
        inter[STREAM][i] = inter_s
    return unary, ring, compute, inter, rep, sync


def _stream_pairs(inst: Instance, ctx: LayerContext, links, cands: dict, dims: dict):
    """(pair, pair_inter, pair_hidden) of STREAM_EDGES: the stream meets the first and last op
    of each chain."""
    T, t = ctx.tokens, ctx.outer.tp
    pair, pair_inter, pair_hidden = {}, {}, {}
    async_b = behaviour(inst.job.framework).tp_backward_async
    for a, b in STREAM_EDGES:
        N, K, _ = dims[b]
        arr = np.zeros((len(cands[a]), len(cands[b]), 2))
        arr_inter = np.zeros((len(cands[a]), len(cands[b])))
        hidden = np.zeros((len(cands[a]), len(cands[b])))
        for i, name in enumerate(cands[a]):
            R = stream_layout(name, t)
            for k, p in enumerate(cands[b]):
                if b in ("qkv", "mlp_in"):  # input from the stream, gradient back to it
                    # e.g. Megatron's sequence-parallel all-gather forward, reduce-scatter back
                    f = _move_split(ctx, links, None, (R, 1), op_layout(p, t, "in")[0], (T, N))
                    bk = _move_split(ctx, links, p, op_layout(p, t, "dx"), R, (T, N))
                    if async_b and name in MEGATRON_STREAMS and p.spec() == MEGATRON_DEFAULT[b]:
                        # Megatron's column-parallel backward (coefficients.tp_backward_exposed):
                        # the input gradient's all-reduce / reduce-scatter behind the weight-
                        # gradient GEMM and, on the split stream, the input's re-gather behind
                        # the input-gradient GEMM (each as long as one forward GEMM phase)
                        gemm = linear_op_cost(ctx, b, p).compute_s / (1 + BACKWARD_LINEAR_FACTOR)
                        moves = (bk, f) if name == "seq" else (bk,)
                        total = sum(mv[0] for mv in moves)
                        exposed = sum(max(0.0, mv[0] - gemm) for mv in moves)
                        inter_b = sum(mv[1] for mv in moves) * (exposed / total if total else 0.0)
                        arr[i, k] = (f[0], exposed)
                        arr_inter[i, k] = f[1] + inter_b
                        hidden[i, k] = total - exposed
                        continue
                else:  # output into the stream, output gradient from it
                    f = _move_split(ctx, links, p, op_layout(p, t, "out"), R, (T, K))
                    bk = _move_split(ctx, links, None, (R, 1), op_layout(p, t, "dy")[0], (T, K))
                arr[i, k] = (f[0], bk[0])
                arr_inter[i, k] = f[1] + bk[1]
        pair[(a, b)], pair_inter[(a, b)], pair_hidden[(a, b)] = arr, arr_inter, hidden
    return pair, pair_inter, pair_hidden


def _chain_pair(ctx: LayerContext, links, cands: dict, dims: dict, edge: tuple[str, str]):
    """(pair, pair_inter) of one CHAIN_EDGES edge: the re-layout between two ops of a chain."""
    a, b = edge
    T, t = ctx.tokens, ctx.outer.tp
    qkv_w, core_w, mlp_w = dims["qkv"][1], dims["attn_out"][0], dims["mlp_out"][0]
    arr = np.zeros((len(cands[a]), len(cands[b]), 2))
    arr_inter = np.zeros((len(cands[a]), len(cands[b])))
    for i, pa in enumerate(cands[a]):
        for k, pb in enumerate(cands[b]):
            if edge == ("qkv", "attn_core"):
                core = core_layout(pb, t)
                f = _move_split(ctx, links, pa, op_layout(pa, t, "out"), core, (T, qkv_w))
                bk = _move_split(ctx, links, None, (core, 1), op_layout(pa, t, "dy")[0], (T, qkv_w))
            elif edge == ("attn_core", "attn_out"):
                core = core_layout(pa, t)
                f = _move_split(ctx, links, None, (core, 1), op_layout(pb, t, "in")[0], (T, core_w))
                bk = _move_split(ctx, links, pb, op_layout(pb, t, "dx"), core, (T, core_w))
            else:  # mlp_in output -> activation function -> mlp_out input ([T, f])
                f = _move_split(ctx, links, pa, op_layout(pa, t, "out"), op_layout(pb, t, "in")[0], (T, mlp_w))
                bk = _move_split(ctx, links, pb, op_layout(pb, t, "dx"), op_layout(pa, t, "dy")[0], (T, mlp_w))
            arr[i, k] = (f[0], bk[0])
            arr_inter[i, k] = f[1] + bk[1]
    return arr, arr_inter


def _base_terms(inst: Instance, o: Outer, site: Site, net: NetEfficiency, ctx: LayerContext,
                cands: dict, unary: dict) -> LayerTerms:
    """The rest of the layer (attention core, elementwise, context parallel) as megatron_layer
    prices it: its linear GEMMs, tp collectives and linear-input stashes subtracted."""
    t, T, h = o.tp, ctx.tokens, inst.model.hidden
    mt = megatron_layer(inst, o, site, net)
    lin_f = sum(linear_op_cost(ctx, op, OpPartition("K", t, 1)).fwd_s for op in LINEAR_OPS)
    tp_link, tp_inter = site.tp_link
    tp_f = 2 * comm.all_reduce_time_s(T * h * BF16_BYTES, t, tp_link, tp_inter, net, tree=False)
    mt_stash = sum(unary[op][_index(cands[op], MEGATRON_DEFAULT[op])][2] for op in LINEAR_OPS)
    # the base holds no tp time: megatron_layer's exposed backward part is the forward's less
    # what its async backward hides (the table's pair entries carry that split themselves)
    tp_b_exposed = mt.parts["tp_comm"] - tp_f
    return LayerTerms(
        fwd_s=mt.fwd_s - lin_f - tp_f, bwd_s=mt.bwd_s - BACKWARD_LINEAR_FACTOR * lin_f - tp_b_exposed,
        rc_fwd_s=mt.rc_fwd_s - lin_f - tp_f,
        parts={"compute": mt.parts["compute"] - (1 + BACKWARD_LINEAR_FACTOR) * lin_f,
               "cp_comm_exposed": mt.parts["cp_comm_exposed"]},
        overlapped={k: v for k, v in mt.overlapped.items() if k != "tp_comm"},
        act_bytes=mt.act_bytes - mt_stash,
        ckpt_bytes=mt.ckpt_bytes, workspace_bytes=mt.workspace_bytes)


def stream_cost(ctx: LayerContext, name: str) -> tuple[float, float, float]:
    """(fwd_s, bwd_s, inter-node part) of a stream layout's own communication: a block stream's
    norm statistics (module docstring), one ring all-reduce per norm of the layer of
    NORM_STAT_BYTES_PER_TOKEN per token of a GPU's token rows (tokens / (J*q)) over the q
    consecutive ranks that share those rows, forward and again backward. Its elementwise work
    and stashes are the sequence-parallel ones, already in the layer's base (1/t each)."""
    q = stream_grid(name)
    if q == 0:
        return 0.0, 0.0, 0.0
    inst, o = ctx.inst, ctx.outer
    link, inter = _strided_link(inst, o, ctx.site, q, 1)
    rows = ctx.tokens * q / o.tp  # tokens / (J*q), J = t / q^2
    one = comm.all_reduce_time_s(NORM_STAT_BYTES_PER_TOKEN * rows, q, link, inter, ctx.net, tree=False)
    f = inst.model.norms_per_layer * one
    return f, f, 2 * f if inter else 0.0


def _index(cands: tuple, spec: str) -> int:
    for i, c in enumerate(cands):
        if (c if isinstance(c, str) else c.spec()) == spec:
            return i
    raise ValueError(f"{spec!r} is not among the candidates")


def plan_indices(table: LayerTable, plan: dict[str, str]) -> dict[str, int]:
    """Candidate index per PLAN_OPS entry; a plan without a stream uses the table's first
    (Megatron's layout for its sequence_parallel flag)."""
    specs = _spec_indices(table)
    try:
        idx = {op: specs[op][plan[op]] for op in OPS}
        idx[STREAM] = specs[STREAM][plan.get(STREAM, spec_of(table.candidates[STREAM][0]))]
    except KeyError:  # not a candidate: _index names it
        idx = {op: _index(table.candidates[op], plan[op]) for op in OPS}
        idx[STREAM] = _index(table.candidates[STREAM], plan.get(STREAM, spec_of(table.candidates[STREAM][0])))
    return idx


# per table (by identity, held in the entry): each op's candidate index by spec, for plan_indices
_SPECS: dict[int, tuple[LayerTable, dict[str, dict[str, int]]]] = {}


def _spec_indices(table: LayerTable) -> dict[str, dict[str, int]]:
    hit = _SPECS.get(id(table))
    if hit is not None and hit[0] is table:
        return hit[1]
    out = {op: {spec_of(c): i for i, c in reversed(list(enumerate(table.candidates[op])))} for op in PLAN_OPS}
    if len(_SPECS) >= 1024:
        _SPECS.clear()
    _SPECS[id(table)] = (table, out)
    return out


# columns of a layer plan's vector (all_plans)
VECTOR = ("fwd_s", "bwd_s", "act_bytes", "workspace_bytes", "replicated_params", "grad_sync_s")


@dataclass(frozen=True)
class PlanColumns:
    """Every per-operator plan of one table at once: row r is the plan of indices idx[r] (the
    product of the candidates in PLAN_OPS order, so row = sum of index x stride), each column
    an array over the rows of what layer_terms reads (issue 33: priced once per table, not once
    per plan and configuration)."""

    idx: np.ndarray  # [n, len(PLAN_OPS)]
    strides: tuple[int, ...]
    vec: np.ndarray  # [n, len(VECTOR)]
    compute: np.ndarray  # GEMM time, forward + backward, the base's included
    ring: np.ndarray  # neighbour shifts hidden behind GEMMs
    tp_inter: np.ndarray  # exposed tensor-parallel time on inter-node links
    stream_hidden: np.ndarray  # backward collectives hidden behind the stream ops' gradient GEMMs


def _plan_columns(table: LayerTable) -> PlanColumns:
    """PlanColumns of `table`, each term summed in the order one plan's sum would take (ops in
    PLAN_OPS, LINEAR_OPS or STREAM_EDGES order, then edges in EDGES order)."""
    sizes = [len(table.candidates[op]) for op in PLAN_OPS]
    idx = np.array(list(itertools.product(*[range(s) for s in sizes])), dtype=np.int64).reshape(-1, len(PLAN_OPS))
    at = {op: idx[:, k] for k, op in enumerate(PLAN_OPS)}
    n = len(idx)
    fwd = np.full(n, table.base.fwd_s)
    bwd = np.full(n, table.base.bwd_s)
    act = np.full(n, table.base.act_bytes)
    buf, rep, sync, inter = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    for op in PLAN_OPS:
        u = table.unary[op][at[op]]
        fwd += u[:, 0]
        bwd += u[:, 1]
        act += u[:, 2]
        buf = np.maximum(buf, u[:, 3])
        rep += table.replicated_params[op][at[op]]
        sync += table.grad_sync_s[op][at[op]]
        inter += table.inter_node[op][at[op]]
    edge_inter = np.zeros(n)
    for a, b in EDGES:
        e = table.pair[(a, b)][at[a], at[b]]
        fwd += e[:, 0]
        bwd += e[:, 1]
        edge_inter += table.pair_inter_node[(a, b)][at[a], at[b]]
    compute, ring, hidden = np.zeros(n), np.zeros(n), np.zeros(n)
    for op in LINEAR_OPS:
        compute += table.compute[op][at[op]]
        ring += table.ring_overlapped[op][at[op]]
    for a, b in STREAM_EDGES:
        hidden += table.pair_hidden[(a, b)][at[a], at[b]]
    return PlanColumns(idx=idx, strides=tuple(math.prod(sizes[k + 1:]) for k in range(len(sizes))),
                       vec=np.stack([fwd, bwd, act, table.base.workspace_bytes + buf, rep, sync], axis=1),
                       compute=table.base.parts["compute"] + compute, ring=ring, tp_inter=inter + edge_inter,
                       stream_hidden=hidden)


# _plan_columns of recent tables, by the table's identity (held in the entry, so that its id is
# not reused while it lives); each holds up to 36,015 rows of 11 floats
_COLUMNS: dict[int, tuple[LayerTable, PlanColumns]] = {}
_COLUMNS_MAX = 256


def plan_columns(table: LayerTable) -> PlanColumns:
    hit = _COLUMNS.get(id(table))
    if hit is not None and hit[0] is table:
        return hit[1]
    out = _plan_columns(table)
    if len(_COLUMNS) >= _COLUMNS_MAX:
        _COLUMNS.clear()
    _COLUMNS[id(table)] = (table, out)
    return out


def layer_terms(table: LayerTable, plan: dict[str, str]) -> LayerTerms:
    """LayerTerms of one per-operator plan (exposed tensor-parallel time in `tp_comm`): its row
    of the table's plan_columns."""
    cols = plan_columns(table)
    idx = plan_indices(table, plan)
    r = sum(idx[op] * st for op, st in zip(PLAN_OPS, cols.strides))
    fwd, bwd, act, ws, rep, sync = cols.vec[r]
    b = table.base
    compute = cols.compute[r]
    tp_exposed = fwd + bwd - compute - b.parts["cp_comm_exposed"]
    tp_inter = cols.tp_inter[r]
    overlapped = dict(b.overlapped)
    overlapped["tp_ring"] = cols.ring[r]
    overlapped["tp_comm"] = cols.stream_hidden[r]
    # exposed tensor-parallel time by link type: intra-node (NVLink/PCIe) and inter-node (NIC)
    return LayerTerms(fwd_s=fwd, bwd_s=bwd, rc_fwd_s=fwd - (b.fwd_s - b.rc_fwd_s),
                      parts={"compute": compute, "tp_comm_intra_node": tp_exposed - tp_inter,
                             "tp_comm_inter_node": tp_inter,
                             "cp_comm_exposed": b.parts["cp_comm_exposed"]},
                      overlapped=overlapped, act_bytes=act, ckpt_bytes=b.ckpt_bytes,
                      workspace_bytes=ws, replicated_params=rep, grad_sync_s=sync)


def all_plans(table: LayerTable) -> tuple[np.ndarray, np.ndarray]:
    """Every per-operator plan of the table: (indices [n, 6] in PLAN_OPS order, vectors [n, 6]
    in VECTOR's order), vectorised over the product of candidates (plan_columns)."""
    cols = plan_columns(table)
    return cols.idx, cols.vec


def plan_from_indices(table: LayerTable, row) -> dict[str, str]:
    """The plan of one all_plans row; Megatron's stream layout is left implicit (so Megatron
    plans and recorded partitions read as before)."""
    plan = {op: spec_of(table.candidates[op][int(k)]) for op, k in zip(PLAN_OPS, row)}
    if plan[STREAM] in MEGATRON_STREAMS:
        del plan[STREAM]
    return plan


def partition_layer_fn(plan: dict[str, str]):
    """A `layer_fn` for cost.coefficients.build that prices `plan` on every site."""
    frozen = tuple(sorted(plan.items()))

    def layer_fn(inst: Instance, o: Outer, site: Site, net: NetEfficiency) -> LayerTerms:
        return _terms(inst, o, site, net, frozen)
    return layer_fn


def _table_key(o: Outer) -> Outer:
    """The table depends on tp, cp, micro-batch, sp and recompute only."""
    return Outer(tp=o.tp, pp=1, dp=1, cp=o.cp, micro_batch=o.micro_batch, num_micro_batches=1,
                 sequence_parallel=o.sequence_parallel, recompute=o.recompute)


def site_reading(inst: Instance, site: Site) -> tuple:
    """What layer_table reads of a site: its GPU and its tp and cp links (the per-operator
    prices, group_links, _strided_link and megatron_layer read no other field of a dense
    model's site; tests/partition/test_table_reading.py checks it against tables built on
    sites that differ elsewhere). A MoE model's megatron_layer is moe_layer, which reads the
    expert links too: its whole site. Sites of one configuration that differ only in their dp
    link (issue 33 row 3: 163 table builds, 56 distinct tables) share one table."""
    if inst.model.moe is not None:
        return (site,)
    return site.gpu, site.tp_link, site.cp_link


# layer_table of recent (instance, table key, site reading, network), by value; built on the
# first site of its reading, which prices like every other site of it (site_reading)
_BY_READING: dict[tuple, LayerTable] = {}


def _cached_table(inst: Instance, o: Outer, site: Site, net: NetEfficiency) -> LayerTable:
    key = (inst, _table_key(o), site_reading(inst, site), net)
    out = _BY_READING.get(key)
    if out is None:
        out = layer_table(inst, key[1], site, net)
        if len(_BY_READING) >= 1024:
            _BY_READING.clear()
        _BY_READING[key] = out
    return out


# table_for of recent (instance, site, table key, network), kept by the instance's and the
# site's identity in front of _cached_table, whose key hashes the whole Instance and the site's
# links (their nested records) on every call: the planner asks for a group's table once per
# layer plan and configuration (issue 32: 70,267 asks, 128 tables, over tests/partition). Each
# entry holds its instance and site, so that their ids are not reused while it lives.
_TABLES: dict[tuple, tuple[Instance, Site, LayerTable]] = {}


def table_for(inst: Instance, o: Outer, site: Site, net: NetEfficiency) -> LayerTable:
    key = (id(inst), id(site), o.tp, o.cp, o.micro_batch, o.sequence_parallel, o.recompute, net)
    hit = _TABLES.get(key)
    if hit is not None and hit[0] is inst and hit[1] is site:
        return hit[2]
    out = _cached_table(inst, o, site, net)
    if len(_TABLES) >= 1024:  # no more tables alive than _cached_table keeps
        _TABLES.clear()
    _TABLES[key] = (inst, site, out)
    return out


def _terms(inst, o, site, net, frozen) -> LayerTerms:
    plan = dict(frozen)
    if is_megatron(plan):  # priced by megatron_layer itself (the table reproduces it: tested)
        return megatron_layer(inst, o, site, net)
    if not spatial_temporal_allowed(o):
        raise ValueError(f"per-operator partitions need 4 <= tp <= {MAX_SPATIAL_TEMPORAL_GROUP}")
    if not plan_allowed(plan, o):
        raise ValueError("token splits (T) are not offered with ZeRO-3")
    if not stream_allowed(plan, o):
        raise ValueError(f"stream {plan[STREAM]!r} needs sequence_parallel: the block stream"
                         " holds 1/tp of the stream between layers")
    return _plan_terms(table_for(inst, o, site, net), frozen)


# layer_terms of recent (table, plan): the planner prices one layer plan in every outer
# configuration that shares its table (solver/class_partitions.py, step 2); keyed by the table's
# identity, each entry holding its table so that the id is not reused while it lives
_PLAN_TERMS: dict[tuple[int, tuple], tuple[LayerTable, LayerTerms]] = {}


def _plan_terms(table: LayerTable, frozen: tuple) -> LayerTerms:
    hit = _PLAN_TERMS.get((id(table), frozen))
    if hit is not None and hit[0] is table:
        return hit[1]
    out = layer_terms(table, dict(frozen))
    if len(_PLAN_TERMS) >= 65536:
        _PLAN_TERMS.clear()
    _PLAN_TERMS[id(table), frozen] = (table, out)
    return out


def plan_layer_fn(partitions: tuple[tuple[str, str], ...]):
    """The `layer_fn` of a plan's recorded partitions (empty: Megatron's megatron_layer)."""
    if not partitions or is_megatron(dict(partitions)):
        return megatron_layer
    return partition_layer_fn(dict(partitions))


def grad_sync_threshold_s(inst: Instance, o: Outer, site: Site, dp_ranks: int,
                          net: NetEfficiency, replicated_params: float = 0.0,
                          grad_sync_s: float = 0.0) -> float:
    """g: the per-layer gradient sync time (the group's weight-gradient all-reduce of T ops,
    then the data-parallel sync) that a layer's backward can hide (0 with ZeRO-3 or one
    replica and no T op). cost/coefficients exposes max(0, g - bwd_s) per layer, the only
    coefficient that *falls* as a layer gets slower; read off `_layer_costs` itself (bwd 0 vs
    unbounded) so it can never drift from the coefficients."""
    from paraplan.cost.coefficients import _layer_costs

    def terms(bwd_s):
        lt = LayerTerms(fwd_s=0.0, bwd_s=bwd_s, rc_fwd_s=0.0, parts={}, overlapped={},
                        act_bytes=0.0, ckpt_bytes=0.0, workspace_bytes=0.0,
                        replicated_params=replicated_params, grad_sync_s=grad_sync_s)
        return lambda *_: lt

    lo = _layer_costs(inst, o, site, dp_ranks, net, terms(0.0)).layer_sync
    hi = _layer_costs(inst, o, site, dp_ranks, net, terms(float("inf"))).layer_sync
    return max(0.0, lo - hi)
