"""Alpha-beta times of the collectives that parallel training issues, as NCCL runs them.

Ring algorithms (Thakur, Rabenseifner & Gropp 2005; NCCL's ring): for n ranks and a payload of
B bytes (the *full* tensor), all-reduce moves 2(n-1)/n * B per rank in 2(n-1) steps; all-gather
and reduce-scatter move (n-1)/n * B in n-1 steps. Every step pays one hop's latency, so a call
over n ranks costs

    t = calls * (alpha_call + steps * alpha_hop) + bytes_per_rank / (bw * efficiency)

where `calls` is how many separate collectives the payload is issued as (a framework's bucket
or per-module granularity: cost/framework.py), alpha_call NCCL's fixed launch latency per
call, alpha_hop the latency of one ring step (all ranks send at once, so a step lasts as long
as its slowest hop: the network hop when the ring crosses nodes), and `efficiency` the
achieved bus bandwidth as a fraction of wire speed.

All-reduce over many nodes: NCCL also offers a double binary tree whose latency grows with
log2(nodes) instead of n (Sanders, Speck & Traeff 2009; NCCL 2.4's tree all-reduce) and picks
the faster of the two for each size; `all_reduce_time_s` does the same, min(ring, tree).

Rank layout follows Megatron-LM's default order: tp varies fastest, then cp, then dp, then pp.
A group whose members lie `stride` ranks apart and span `size * stride` consecutive ranks stays
inside one node iff `size * stride <= gpus_per_node`; "node" here is the NVLink domain
(`NodeGroup.domain_gpus`: the node, or a rack-scale domain such as GB200 NVL72's 72 GPUs).

A group that spans nodes with g members in each node runs g rings (NCCL channels) side by side,
one through each member's NIC, so its per-rank bandwidth is min(NVLink, g * NIC): a tp=8, dp=N
gradient all-reduce (g = 1) is NIC-bound, an FSDP group over whole 8-GPU nodes (g = 8) gets the
node's aggregate NIC bandwidth (as nccl-tests' bus bandwidth on multi-node DGX systems shows).
A cluster that states switch tiers (leaf, pod) with oversubscribed uplinks slows a group that
leaves a tier's block to its share of the uplinks, and adds the tier's hops to its latency
(cost/fabric.py); every collective's group link is decided here, so every kind pays it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.cost import fabric
from paraplan.cost.specs import NodeGroup, Link

# NCCL's fixed latency of one collective call (kernel launch, proxy hand-off), the ring
# "baseLatencies" entry of NCCL's own performance model (NVIDIA/nccl src/graph/tuning.cc,
# v2.23-v2.30, Simple protocol, which NCCL selects for the multi-megabyte payloads of training).
NCCL_CALL_LATENCY_S = 8.4e-6


@dataclass(frozen=True, slots=True)
class NetEfficiency:
    """The communication parameters of the cost model, each measured in public:

    intra_node: achieved bus bandwidth / one direction's NVLink wire speed. NVIDIA's NCCL
        maintainers quote ~370 of 450 GB/s on H100 NVLink (0.82, NVIDIA/nccl-tests#212) and
        ~160 of 200 GB/s on A800 (0.80, NVIDIA/nccl#412).
    inter_node: the same on the network: 192 GB/s all-reduce bus bandwidth on DGX A100 with
        8 x 200 Gbit/s HDR (0.96, NVIDIA/nccl#812); 46-48 GB/s per 400 Gbit/s NDR NIC
        (0.92-0.96, NVIDIA/nccl-tests#290).
    overlap_slowdown: compute seconds lost per second of communication that runs behind it.
        NCCL's kernels occupy one SM per channel and stream through HBM, so a kernel beside them
        runs slower: 18.9% on average (up to 40%) over GPT and Llama workloads on A100 and H100
        (Lee et al. 2025, arXiv 2507.03114, "Characterizing compute-communication overlap").
    call_latency_s: NCCL's fixed latency per collective call (tuning.cc, ring, Simple: 8.4 us).
    rank_jitter_rel: the relative standard deviation of one rank's step time about the mean
        rank's, which makes a job wait for its slowest rank (cost/scale.py): GPUs of one SKU
        differ by 8% on average (up to 22%) across a cluster of hundreds to 27,648 GPUs (Sinha
        et al., SC'22, arXiv 2208.11035), sigma 1.0-1.4%; 1.2%, the middle, not fitted
        (cost/fit.py says what fitting it gave).
    """

    intra_node: float = 0.80
    inter_node: float = 0.95
    overlap_slowdown: float = 0.19
    call_latency_s: float = NCCL_CALL_LATENCY_S
    rank_jitter_rel: float = 0.012


def _tree_depth_latency_s(cluster: NodeGroup, per_node: int, nodes: int) -> float:
    """One pass (reduce or broadcast) of NCCL's tree: a chain through the node's ranks, then
    ceil(log2(nodes)) network hops."""
    return ((per_node - 1) * cluster.intra_node.latency_s
            + math.ceil(math.log2(nodes)) * cluster.inter_node.latency_s)


def group_link(cluster: NodeGroup, size: int, stride: int) -> tuple[Link, bool]:
    """The effective link of a group of `size` ranks `stride` apart, and whether it is inter-node."""
    if size * stride <= cluster.domain_gpus:
        return cluster.intra_node, False
    per_node = max(1, min(size, cluster.domain_gpus // stride))
    nodes = max(2, -(-size // per_node))
    nic_bw = per_node * cluster.inter_node.bw_bytes_per_s
    hop_s, tree_s = cluster.inter_node.latency_s, _tree_depth_latency_s(cluster, per_node, nodes)
    if cluster.tiers:  # leaving a leaf or pod: its uplinks' share and hops (cost/fabric.py)
        cross = fabric.group_crossing(cluster.tiers, cluster.gpus_per_node, size, stride,
                                      per_node, nodes)
        nic_bw *= cross.bw_factor
        hop_s += cross.ring_latency_s
        tree_s += cross.tree_latency_s
    bw = min(cluster.intra_node.bw_bytes_per_s, nic_bw)
    # every rank sends at once in a ring step, so a step lasts as long as its slowest hop: the
    # network hop of the ranks that cross nodes (or switch tiers)
    return Link(bw_bytes_per_s=bw, latency_s=hop_s, tree_latency_s=tree_s), True


def pair_link(cluster: NodeGroup, first_rank: int, count: int, offset: int) -> tuple[Link, bool]:
    """Link of the point-to-point transfers rank r -> r + offset for the `count` consecutive
    ranks starting at `first_rank` (e.g. one pipeline stage sending to the next). They run in
    parallel, so the slowest pair sets the pace: the NIC if any pair crosses a node boundary."""
    gpn = cluster.domain_gpus
    r = first_rank
    # some pair crosses iff a node boundary lies strictly inside the span of one pair
    crosses = any((x // gpn) != ((x + offset) // gpn) for x in range(r, r + min(count, gpn)))
    return (cluster.inter_node, True) if crosses else (cluster.intra_node, False)


def _bw(link: Link, inter: bool, eff: NetEfficiency) -> float:
    return link.bw_bytes_per_s * (eff.inter_node if inter else eff.intra_node)


def all_reduce_time_s(n_bytes: float, n: int, link: Link, inter: bool, eff: NetEfficiency,
                      calls: float = 1.0, tree: bool = True) -> float:
    """Ring all-reduce, or NCCL's tree where the group spans nodes and the tree is faster.

    `tree=False` prices the ring alone: tensor-parallel groups, whose per-operator resharding
    (cost/partition.py) is priced as rings and must reproduce Megatron's all-reduces exactly."""
    if n <= 1 or n_bytes <= 0:
        return 0.0
    ring = (calls * (eff.call_latency_s + 2 * (n - 1) * link.latency_s)
            + 2 * (n - 1) / n * n_bytes / _bw(link, inter, eff))
    if link.tree_latency_s is None or not tree:
        return ring
    # reduce up the tree, broadcast down: 2 passes of the tree's depth; each rank sends and
    # receives the whole payload once per pass (pipelined), the ring's 2(n-1)/n * B for large n
    tree = calls * (eff.call_latency_s + 2 * link.tree_latency_s) + 2 * n_bytes / _bw(link, inter, eff)
    return min(ring, tree)


def all_gather_time_s(n_bytes: float, n: int, link: Link, inter: bool, eff: NetEfficiency,
                      calls: float = 1.0) -> float:
    """Also the time of a reduce-scatter of the same full-tensor size (NCCL runs both as rings)."""
    if n <= 1 or n_bytes <= 0:
        return 0.0
    return (calls * (eff.call_latency_s + (n - 1) * link.latency_s)
            + (n - 1) / n * n_bytes / _bw(link, inter, eff))


def p2p_time_s(n_bytes: float, link: Link, inter: bool, eff: NetEfficiency) -> float:
    if n_bytes <= 0:
        return 0.0
    return n_bytes / _bw(link, inter, eff) + link.latency_s
