"""The `cluster:` section in either form: one GPU type (one NodeGroup, the one-group case) or
node groups and the links between them (a Cluster).

Links are stored one direction per GPU: the NVLink figure is halved (900 GB/s -> 450e9 bytes/s)
and the NIC figure is only converted (400 Gbit/s -> 50e9 bytes/s).

Names in `between` (links and changes): a group's name means that group; otherwise a site's
name means every group on that site. A site may share its name with a group only when that
group is the site's only one (the default `site:`), so a name never means two different sets.
`between: [x, y]` covers every pair of distinct groups (a, b), a in x and b in y; `[east, east]`
covers the pairs inside site east. A pair covered by no pair at all is an error.

Links between groups (`Cluster.between`, symmetric, per GPU and one direction):

- not given: the slower of the two groups' NICs, and the larger of their inter-node latencies;
- given between sites: applies to every pair of groups across them;
- a more specific link overrides a less specific one: one naming two groups overrides one
  naming a group and a site, which overrides one naming two sites. Two links of the same
  specificity covering the same pair are an error;
- the diagonal repeats each group's own NIC link (`cluster.inter_node`).
"""

from __future__ import annotations

from typing import Any

from paraplan.cost import units
from paraplan.cost.errors import InstanceError
from paraplan.cost.hf_layout import shown as _shown
from paraplan.cost.ranges import out_of_range
from paraplan.cost.fabric import TIER_LATENCY_S, FabricTier
from paraplan.cost.specs import Cluster, GpuSpec, Link, NodeGroup
from paraplan.cost.readers.fields import (Section, config_errors_as, describe, did_you_mean,
                                          did_you_mean_or_known, list_items, optional_number)


CLUSTER_KEYS = ("gpu", "nodes", "gpus_per_node", "intra_node_link", "intra_node_gbytes_per_s",
                 "intra_node_latency_us", "nic_gbit_per_s", "inter_node_latency_us",
                 "nvlink_domain_gpus", "leaf_nodes", "leaf_oversubscription", "pod_nodes",
                 "pod_oversubscription", "tier_latency_us")
_LINK_KINDS = ("nvlink", "pcie")


def group_from_section(sec: Section, gpus: dict[str, GpuSpec], name: str = "",
                       site: str = "") -> NodeGroup:
    """The node group `sec` describes (a flat `cluster:` or one of `groups:`), named `name` on
    `site` ("": NodeGroup's defaults)."""
    gpu_name = sec.string("gpu")
    if gpu_name not in gpus:
        hint = did_you_mean(gpu_name, gpus)
        raise sec.error("gpu", f"unknown GPU type {_shown(gpu_name)}",
                        f"{hint + ' ' if hint else ''}known types: {', '.join(sorted(gpus))};"
                        " or define it under gpu_types")
    # Vendors quote NVLink as the sum of both directions; a transfer sees one direction.
    intra_gbytes_per_s = sec.number("intra_node_gbytes_per_s")
    intra_bw_bytes_per_s = units.gbytes_per_s_to_bytes_per_s(intra_gbytes_per_s) / 2
    nodes, gpus_per_node = sec.integer("nodes"), sec.integer("gpus_per_node")
    problem = out_of_range("num_gpus", nodes * gpus_per_node)
    if problem is not None:
        raise sec.error("nodes", f"nodes x gpus_per_node = {nodes * gpus_per_node:,} GPUs: {problem}",
                        "check nodes and gpus_per_node")
    domain = sec.integer("nvlink_domain_gpus", None)
    if domain is not None and (domain % gpus_per_node or (nodes * gpus_per_node) % domain):
        raise sec.error("nvlink_domain_gpus", f"{domain} GPUs per NVLink domain is not a whole"
                        f" number of {gpus_per_node}-GPU nodes dividing the cluster's"
                        f" {nodes * gpus_per_node} GPUs",
                        "give a multiple of gpus_per_node that divides nodes x gpus_per_node"
                        " (GB200 NVL72: gpus_per_node 4, nvlink_domain_gpus 72), or leave it out"
                        " when NVLink ends at the node")
    tiers = _tiers(sec, domain // gpus_per_node if domain else 1)
    with config_errors_as(sec.path, sec.prefix, "correct the cluster description"):
        return NodeGroup(
            name=name,
            site=site,
            gpu=gpus[gpu_name],
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            intra_node=Link(
                bw_bytes_per_s=intra_bw_bytes_per_s,
                latency_s=units.us_to_s(sec.number("intra_node_latency_us", 5.0)),
            ),
            inter_node=Link(
                bw_bytes_per_s=units.gbit_per_s_to_bytes_per_s(sec.number("nic_gbit_per_s")),
                latency_s=units.us_to_s(sec.number("inter_node_latency_us", 10.0)),
            ),
            intra_node_kind=sec.choice("intra_node_link", _LINK_KINDS, "nvlink"),
            nvlink_domain_gpus=domain,
            tiers=tiers,
        )


def _tiers(sec: Section, domain_nodes: int) -> tuple[FabricTier, ...]:
    """The switch tiers `leaf_*` and `pod_*` state (cost/fabric.py), leaf first; none: one
    non-blocking fabric."""
    latency_s = units.us_to_s(sec.number("tier_latency_us", TIER_LATENCY_S / units.US_S))
    tiers: list[FabricTier] = []
    below, below_key = domain_nodes, "the NVLink domain"
    for tier in ("leaf", "pod"):
        nodes_key, ratio_key = f"{tier}_nodes", f"{tier}_oversubscription"
        if not sec.has(nodes_key):
            if sec.has(ratio_key):
                raise sec.error(ratio_key, f"{ratio_key} without {nodes_key}",
                                f"add {nodes_key}: how many nodes share one {tier}'s switches"
                                f" (e.g. {nodes_key}: 16), or leave {ratio_key} out")
            continue
        nodes = sec.integer(nodes_key)
        if nodes % below or nodes <= (below if tiers else 0):
            raise sec.error(nodes_key, f"{nodes} nodes is not a whole number (more than one) of"
                            f" {below_key}'s {below} nodes",
                            f"give a multiple of {below} for {nodes_key}")
        tiers.append(FabricTier(nodes=nodes, oversubscription=sec.number(ratio_key, 1.0),
                                latency_s=latency_s))
        below, below_key = nodes, nodes_key
    if not tiers and sec.has("tier_latency_us"):
        raise sec.error("tier_latency_us", "tier_latency_us without switch tiers",
                        "add leaf_nodes (and leaf_oversubscription), or leave tier_latency_us out")
    return tuple(tiers)
GROUPS_CLUSTER_KEYS = ("groups", "links")
_GROUP_KEYS = ("name", "site", *CLUSTER_KEYS)
_LINK_KEYS = ("between", "gbit_per_s", "latency_us")


def is_groups_mapping(data: Any) -> bool:
    """True when `data` (a whole instance file, as read) is written in the form of node groups:
    its `cluster:` lists `groups:` or `links:`, or it declares what only that form holds
    (scenarios, a timeline, switching costs), so that a missing `groups:` is named as such."""
    return isinstance(data, dict) and (
        isinstance(data.get("cluster"), dict) and bool({"groups", "links"} & data["cluster"].keys())
        or bool({"scenarios", "timeline", "switching"} & data.keys()))


class Network:
    """The nominal groups and the explicitly given links, from which every scenario's
    Cluster is built (cost/readers/scenarios.py, "Changes")."""

    def __init__(self, path: str, groups: list[NodeGroup],
                 explicit: dict[tuple[int, int], Link]):
        self.path, self.groups, self.explicit = path, groups, explicit
        self.by_name = {x.name: i for i, x in enumerate(groups)}
        self.sites: dict[str, list[int]] = {}
        for i, x in enumerate(groups):
            self.sites.setdefault(x.site, []).append(i)

    @classmethod
    def of(cls, cluster: Cluster, path: str) -> "Network":
        """`cluster` as a Network: every link between two groups that differs from the default
        derived from their NICs counts as explicitly given (an event or a writer sees only the
        loaded records, not the file: a link given equal to its default reads as a default)."""
        groups = list(cluster.groups)
        net = cls(path, groups, {})
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                if cluster.between[a][b] != net.default_link(a, b, groups):
                    net.explicit[(a, b)] = cluster.between[a][b]
        return net

    def resolve(self, sec: Section, key: str, value: Any) -> tuple[set[int], bool]:
        """The groups a group or site name stands for, and whether it named a group."""
        field = sec.field(key)
        if not isinstance(value, str) or not value:
            raise InstanceError(self.path, field, f"expected a group or site name, got"
                                f" {describe(value)}", "write the name of a node group or site")
        if value in self.by_name:
            return {self.by_name[value]}, True
        if value in self.sites:
            return set(self.sites[value]), False
        known = sorted({*self.by_name, *self.sites})
        raise InstanceError(self.path, field, f"no group or site named {_shown(value)}",
                            did_you_mean_or_known(value, known, "groups and sites"))

    def pairs(self, sec: Section) -> tuple[list[tuple[int, int]], int]:
        """The ordered pairs (a, b), a < b, that `between:` covers, and its specificity (the
        number of its two names that are group names)."""
        if not sec.has("between"):
            raise sec.error("between", "missing required key 'between'",
                            "add 'between: [x, y]' with two group or site names")
        raw = sec.raw["between"]
        if not isinstance(raw, list) or len(raw) != 2:
            raise sec.error("between", f"expected a list of two names, got {describe(raw)}",
                            "write [group-or-site, group-or-site], e.g. [east, west]")
        (xs, gx), (ys, gy) = (self.resolve(sec, f"between[{i}]", v) for i, v in enumerate(raw))
        pairs = sorted({(min(a, b), max(a, b)) for a in xs for b in ys if a != b})
        if not pairs:
            raise sec.error("between", f"{_shown(raw[0])} and {_shown(raw[1])} cover no two"
                            " distinct groups", "name two different groups, or sites holding"
                            " different groups")
        return pairs, gx + gy

    def default_link(self, a: int, b: int, groups: list[NodeGroup]) -> Link:
        x, y = groups[a].inter_node, groups[b].inter_node
        return Link(bw_bytes_per_s=min(x.bw_bytes_per_s, y.bw_bytes_per_s),
                    latency_s=max(x.latency_s, y.latency_s))

    def matrix(self, groups: list[NodeGroup]) -> list[list[Link]]:
        n = len(groups)
        return [[groups[a].inter_node if a == b else
                 self.explicit.get((min(a, b), max(a, b))) or self.default_link(a, b, groups)
                 for b in range(n)] for a in range(n)]

    def cluster(self, groups: list[NodeGroup] | None = None,
                between: list[list[Link]] | None = None) -> Cluster:
        groups = self.groups if groups is None else groups
        between = self.matrix(groups) if between is None else between
        with config_errors_as(self.path, "cluster", "correct the cluster description"):
            return Cluster(groups=tuple(groups),
                                 between=tuple(tuple(row) for row in between))


def network_from_section(sec: Section, gpus: dict[str, GpuSpec]) -> Network:
    path = sec.path
    groups: list[NodeGroup] = []
    for field, raw in list_items(sec, "groups", each="group"):
        item = Section(raw, path, field, _GROUP_KEYS)
        name = item.string("name")
        if any(x.name == name for x in groups):
            raise item.error("name", f"a second group named {_shown(name)}",
                             "give every node group its own name")
        groups.append(group_from_section(item, gpus, name, item.string("site", name)))
    by_name = {x.name: x for x in groups}
    for i, x in enumerate(groups):
        owner = by_name.get(x.site)
        if owner is not None and owner is not x:
            raise InstanceError(path, f"cluster.groups[{i}].site",
                                f"site {_shown(x.site)} is also the name of group"
                                f" {_shown(owner.name)}, so `between:` could not tell them"
                                " apart", "name sites differently from groups (a site may"
                                " share its name only with its one group)")

    net = Network(path, groups, {})
    if sec.has("links"):
        given: dict[tuple[int, int], tuple[int, str]] = {}  # pair -> (specificity, field)
        for field, raw in list_items(sec, "links", each="link"):
            item = Section(raw, path, field, _LINK_KEYS)
            pairs, specificity = net.pairs(item)
            bw = units.gbit_per_s_to_bytes_per_s(item.number("gbit_per_s"))
            latency_us = optional_number(item, "latency_us")
            for a, b in pairs:
                before = given.get((a, b))
                if before is not None and before[0] == specificity:
                    raise item.error("between", f"sets the link between {_shown(groups[a].name)}"
                                     f" and {_shown(groups[b].name)}, as {before[1]} already"
                                     " does", "keep one of the two links")
                if before is not None and before[0] > specificity:
                    continue
                given[(a, b)] = (specificity, field)
                latency_s = net.default_link(a, b, groups).latency_s if latency_us is None \
                    else units.us_to_s(latency_us)
                net.explicit[(a, b)] = Link(bw_bytes_per_s=bw, latency_s=latency_s)
    return net
