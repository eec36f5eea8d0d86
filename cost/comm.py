"""Alpha-beta times of the collectives that parallel training issues.

Ring algorithms (Thakur, Rabenseifner & Gropp 2005; NCCL's ring): for n ranks and a payload of
B bytes (the *full* tensor), all-reduce moves 2(n-1)/n * B per rank in 2(n-1) steps; all-gather
and reduce-scatter move (n-1)/n * B in n-1 steps. Each step pays the link latency alpha.
Bandwidth is the one-direction bandwidth of the slowest link the group spans, scaled by an
achieved-efficiency factor (NCCL bus bandwidth vs. wire speed).

Rank layout follows Megatron-LM's default order: tp varies fastest, then cp, then dp, then pp.
A group whose members lie `stride` ranks apart and span `size * stride` consecutive ranks stays
inside one node iff `size * stride <= gpus_per_node`.

A group that spans nodes with g members in each node runs g rings (NCCL channels) side by side,
one through each member's NIC, so its per-rank bandwidth is min(NVLink, g * NIC): a tp=8, dp=N
gradient all-reduce (g = 1) is NIC-bound, an FSDP group over whole 8-GPU nodes (g = 8) gets the
node's aggregate NIC bandwidth (as nccl-tests' bus bandwidth on multi-node DGX systems shows).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost.specs import ClusterSpec, Link


@dataclass(frozen=True, slots=True)
class NetEfficiency:
    """Achieved fraction of wire bandwidth, fitted by cost/fit.py to the published runs.

    Both came out at the search's upper bound 1.0 (0.99 for NVLink): the published runs hide
    more communication than this model credits (e.g. partial TP overlap), and the fit pays it
    back here. Kept at 1.0 rather than letting an efficiency exceed the wire speed."""

    intra_node: float = 1.0
    inter_node: float = 1.0


def group_link(cluster: ClusterSpec, size: int, stride: int) -> tuple[Link, bool]:
    """The effective link of a group of `size` ranks `stride` apart, and whether it is inter-node."""
    if size * stride <= cluster.gpus_per_node:
        return cluster.intra_node, False
    per_node = max(1, min(size, cluster.gpus_per_node // stride))
    bw = min(cluster.intra_node.bw_bytes_per_s, per_node * cluster.inter_node.bw_bytes_per_s)
    return Link(bw_bytes_per_s=bw, latency_s=cluster.inter_node.latency_s), True


def pair_link(cluster: ClusterSpec, first_rank: int, count: int, offset: int) -> tuple[Link, bool]:
    """Link of the point-to-point transfers rank r -> r + offset for the `count` consecutive
    ranks starting at `first_rank` (e.g. one pipeline stage sending to the next). They run in
    parallel, so the slowest pair sets the pace: the NIC if any pair crosses a node boundary."""
    gpn = cluster.gpus_per_node
    r = first_rank
    # some pair crosses iff a node boundary lies strictly inside the span of one pair
    crosses = any((x // gpn) != ((x + offset) // gpn) for x in range(r, r + min(count, gpn)))
    return (cluster.inter_node, True) if crosses else (cluster.intra_node, False)


def _bw(link: Link, inter: bool, eff: NetEfficiency) -> float:
    return link.bw_bytes_per_s * (eff.inter_node if inter else eff.intra_node)


def all_reduce_time_s(n_bytes: float, n: int, link: Link, inter: bool, eff: NetEfficiency) -> float:
    if n <= 1 or n_bytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * n_bytes / _bw(link, inter, eff) + 2 * (n - 1) * link.latency_s


def all_gather_time_s(n_bytes: float, n: int, link: Link, inter: bool, eff: NetEfficiency) -> float:
    """Also the time of a reduce-scatter of the same full-tensor size."""
    if n <= 1 or n_bytes <= 0:
        return 0.0
    return (n - 1) / n * n_bytes / _bw(link, inter, eff) + (n - 1) * link.latency_s


def p2p_time_s(n_bytes: float, link: Link, inter: bool, eff: NetEfficiency) -> float:
    if n_bytes <= 0:
        return 0.0
    return n_bytes / _bw(link, inter, eff) + link.latency_s
