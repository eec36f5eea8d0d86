"""Switch tiers above the NIC, and what a group that leaves one pays for it.

A cluster file may say that `leaf_nodes` nodes share one set of leaf switches whose uplinks
carry 1 / `leaf_oversubscription` of what those nodes' NICs can send (2.0: 2:1), and likewise
for a pod of `pod_nodes` nodes above it (Meta's Llama 3 RoCE fabric: full bisection inside
pods of 3,072 GPUs, 1:7 between pods; Dubey et al., arXiv 2407.21783, Sec. 3.3.1). Not stated:
one non-blocking fabric, as NVIDIA's DGX SuperPOD reference designs and MegaScale's three
1:1 tiers are (Jiang et al., NSDI'24, Sec. 3.6), and nothing here changes any price.

Placement: Megatron-LM's rank order (tp fastest, then cp, dp, pp), ranks filling nodes and
nodes filling leaves in order, and NCCL's rings and trees visiting nodes in rank order. A group
of ranks `stride` apart then holds `m` of its members in each block of a tier (or 1, when its
members lie further apart than a block) and crosses the block's uplinks with each of its NIC
rings (channels) once per direction: a ring enters and leaves a block once, and the nodes of
a block form one subtree of NCCL's tree, joined to the rest by one edge. Every GPU of the block
belongs to one group of the kind, all of which communicate at once (gradient, context and
expert-data-parallel groups do), so the block's uplinks carry `block_gpus / m * g` NIC-rate
flows, g the group's members per NVLink domain, against a capacity of `block_gpus / R` NICs,
R the oversubscription of the block's uplinks times that of every tier under it. Each
crossing flow thus runs at

    NIC * min(1, (m / g) / R)          (m / g: the group's NVLink domains inside one block)

and a ring or tree runs at its slowest link. Where the groups' spans do not tile a tier's
blocks (3-node stages under 4-node leaves), some group straddles each of a block's two edges,
different groups at each: the block carries twice the flows, so twice R, and m counts the
block's GPUs over the stride (the groups whose members it holds); the slowest group prices
every group of the kind, as the one link of a stage's groups. A rank-ordered ring is therefore slowed only
when the oversubscription exceeds the group's nodes per block: at 2:1 a gradient ring over
whole 16-node leaves loses nothing (Alibaba HPN puts 15:1 between its pods for this reason:
only data-parallel rings cross them; Qian et al., SIGCOMM'24), while a ring
whose members sit one per leaf gets half its NIC. An all-to-all sends a fixed share of its
network traffic to peers outside the block, slowed by that share times R (cost/moe.ep_links).

Latency: a hop that leaves a block climbs one tier more, two more switch traversals (up and
down), `tier_latency_s` per tier: 0.13-0.15 us per traversal on InfiniBand (NVIDIA
Quantum-2) and 0.5-0.9 us on Ethernet switches, so 1 us covers both; a ring step lasts as long
as its slowest hop, and the top ceil(log2(nodes)) - floor(log2(m / g)) levels of a tree cross.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.cost.errors import ConfigError

# Two more switch traversals per tier climbed (module docstring): up to 0.5 us each on
# Ethernet, 0.15 us on InfiniBand.
TIER_LATENCY_S = 1.0e-6


@dataclass(frozen=True, slots=True)
class FabricTier:
    """A block of `nodes` consecutive nodes under one set of switches whose uplinks to the tier
    above carry 1 / `oversubscription` of what the block's NICs can send (2.0: 2:1)."""

    nodes: int
    oversubscription: float = 1.0
    latency_s: float = TIER_LATENCY_S
    """extra latency of a hop per switch tier it climbs above the leaf (two traversals)"""

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.oversubscription < 1 or self.latency_s < 0:
            raise ConfigError("a fabric tier needs nodes >= 1, oversubscription >= 1 and"
                              " latency >= 0")


@dataclass(frozen=True, slots=True)
class Crossing:
    """What the tiers a group leaves do to it: the factor on each of its NIC rings' bandwidth,
    the extra latency of one ring step, and of one pass of NCCL's tree."""

    bw_factor: float = 1.0
    ring_latency_s: float = 0.0
    tree_latency_s: float = 0.0


NO_CROSSING = Crossing()


def group_crossing(tiers: tuple[FabricTier, ...], gpus_per_node: int, size: int, stride: int,
                   per_domain: int, nodes: int) -> Crossing:
    """The crossing of a group of `size` ranks `stride` apart, `per_domain` of them in each of
    its `nodes` NVLink domains (module docstring)."""
    factor, ring_s, tree_s, ratio = 1.0, 0.0, 0.0, 1.0
    span = size * stride
    for tier in tiers:
        ratio *= tier.oversubscription
        block_gpus = tier.nodes * gpus_per_node
        if span <= block_gpus and block_gpus % span == 0:
            break  # every group inside one block of this tier, so of every tier above
        # the block's GPUs are in block_gpus / m groups' worth of rings (m = block_gpus //
        # stride, or 1); where the groups' spans do not tile the blocks, the groups that
        # straddle the block's two edges are different ones: twice the flows
        domains = max(1, block_gpus // stride) / per_domain
        edges = 1 if span % block_gpus == 0 else 2
        factor = min(factor, max(1.0, domains) / (edges * ratio))
        ring_s += tier.latency_s
        levels = max(0, math.ceil(math.log2(max(nodes, 2))) - int(math.log2(max(1.0, domains))))
        tree_s += levels * tier.latency_s
    if ring_s == 0.0:
        return NO_CROSSING
    return Crossing(bw_factor=min(1.0, factor), ring_latency_s=ring_s, tree_latency_s=tree_s)


def all_to_all_crossing(tiers: tuple[FabricTier, ...], gpus_per_node: int, size: int,
                        stride: int, per_domain: int) -> Crossing:
    """The crossing of an all-to-all over `size` ranks `stride` apart, `per_domain` of them per
    NVLink domain: of the traffic it sends over its NIC the share `c` that goes to peers
    outside a block crosses uplinks of 1 / R a NIC per GPU, so the NIC traffic lasts
    max(1, c * R) times as long; its peers beyond the block are a tier's hops further."""
    worst, ratio, hop_s = 1.0, 1.0, 0.0
    span, beyond_domain = size * stride, size - per_domain
    for tier in tiers:
        ratio *= tier.oversubscription
        block_gpus = tier.nodes * gpus_per_node
        if span <= block_gpus and block_gpus % span == 0 or beyond_domain <= 0:
            break
        # the group's members in one block; where the spans do not tile the blocks, a group
        # may keep as little as one NVLink domain's members on one side of a block's edge
        m = max(1, min(size, block_gpus // stride)) if span % block_gpus == 0 else per_domain
        worst = max(worst, (size - m) / beyond_domain * ratio)
        hop_s += tier.latency_s
    if hop_s == 0.0:
        return NO_CROSSING
    return Crossing(bw_factor=1.0 / worst, ring_latency_s=hop_s)
