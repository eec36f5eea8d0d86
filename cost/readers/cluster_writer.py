"""An Instance's cluster and networks written back in the instance-file schema (docs/schema.md),
such that cost/readers/instance.py rebuilds equal records: a flat `cluster:` where a flat file
writes the instance (`writes_flat`), else `cluster: groups:` with the links that differ from
their default, the scenarios, the timeline and the switching costs.

Units are converted back as cost/readers/cluster.py and scenarios.py convert them: NVLink
doubled to the vendors' bidirectional GB/s, NICs and links in Gbit/s, latencies in us, hours
for durations. A scenario is stored resolved (its cluster), so it is written as the changes that
rebuild it from the nominal network: a `group:` change per group whose NIC or NVLink differs,
then a `between:` change per pair of groups whose link still differs from what the reader
derives after those group changes (a link given under `cluster.links` keeps its figure under a
NIC change; a default one is rebuilt from the changed NICs).
"""

from __future__ import annotations

from typing import Any

from paraplan.cost import units
from paraplan.cost.specs import Cluster, Instance, Link, NodeGroup, Scenario, Switching
from paraplan.cost.readers.cluster import Network


def writes_flat(inst: Instance) -> bool:
    """Whether a flat instance file writes `inst`: one group named after its GPU on its own site
    (what a flat `cluster:` reads as), on one network, at the default switching costs."""
    if inst.written_as_groups or inst.switching != Switching():
        return False
    group = inst.cluster.one_group
    return group.name == group.gpu.name and group.site == group.name


def group_to_mapping(group: NodeGroup) -> dict:
    """A node group's keys as a flat `cluster:` (or one of `groups:`, without name and site)
    writes them."""
    out = {
        "gpu": group.gpu.name, "nodes": group.nodes, "gpus_per_node": group.gpus_per_node,
        "intra_node_link": group.intra_node_kind,
        # the reader halves the vendors' bidirectional NVLink figure
        "intra_node_gbytes_per_s": 2 * group.intra_node.bw_bytes_per_s / units.GBYTE_BYTES,
        "intra_node_latency_us": group.intra_node.latency_s / units.US_S,
        "nic_gbit_per_s": group.inter_node.bw_bytes_per_s / units.GBIT_BYTES,
        "inter_node_latency_us": group.inter_node.latency_s / units.US_S,
    }
    if group.nvlink_domain_gpus is not None:
        out["nvlink_domain_gpus"] = group.nvlink_domain_gpus
    for key, tier in zip(("leaf", "pod"), group.tiers):
        out[f"{key}_nodes"] = tier.nodes
        out[f"{key}_oversubscription"] = tier.oversubscription
        out["tier_latency_us"] = tier.latency_s / units.US_S
    return out


def groups_to_mapping(inst: Instance) -> dict[str, Any]:
    """The top-level keys of the node-group form: `cluster:` (groups, links) and, where the
    instance holds them, `scenarios:`, `timeline:` and `switching:`."""
    cluster = inst.cluster
    groups = [{"name": g.name, **({"site": g.site} if g.site != g.name else {}), **group_to_mapping(g)}
              for g in cluster.groups]
    net = Network.of(cluster, inst.source)
    links = [_link_change(cluster, a, b, link) for (a, b), link in sorted(net.explicit.items())]
    out: dict[str, Any] = {"cluster": {"groups": groups, **({"links": links} if links else {})}}
    if len(inst.scenarios) > 1:
        out["scenarios"] = [_scenario_to_mapping(sc, net) for sc in inst.scenarios[1:]]
    if inst.timeline:
        out["timeline"] = [{"scenario": inst.scenarios[p.scenario].name,
                            "duration_h": p.duration_s / units.HOUR_S} for p in inst.timeline]
    switching = _switching_to_mapping(inst.switching)
    if switching:
        out["switching"] = switching
    return out


def _link_change(cluster: Cluster, a: int, b: int, link: Link) -> dict:
    """A `between:` entry naming groups a and b and setting `link` whole (a link under
    `cluster.links`, or a scenario's link change)."""
    return {"between": [cluster.groups[a].name, cluster.groups[b].name],
            "gbit_per_s": link.bw_bytes_per_s / units.GBIT_BYTES,
            "latency_us": link.latency_s / units.US_S}


def _scenario_to_mapping(sc: Scenario, net: Network) -> dict:
    """A declared scenario as the changes that rebuild its cluster from the nominal network
    `net` (module docstring)."""
    out: dict[str, Any] = {"name": sc.name}
    if sc.probability is not None:
        out["probability"] = sc.probability
    if sc.window_h is not None:
        out["window_h"] = list(sc.window_h)
    groups = sc.cluster.groups
    changes = [ch for nominal, now in zip(net.groups, groups) if (ch := _group_change(nominal, now))]
    derived = net.matrix(list(groups))  # the links the reader derives after the group changes
    n = len(groups)
    changes += [_link_change(sc.cluster, a, b, sc.cluster.between[a][b]) for a in range(n)
                for b in range(a + 1, n) if sc.cluster.between[a][b] != derived[a][b]]
    # a scenario equal to the nominal network still lists one change (the list is required)
    out["changes"] = changes or [{"group": groups[0].name, "nic_scale": 1.0}]
    return out


def _group_change(nominal: NodeGroup, now: NodeGroup) -> dict | None:
    """The `group:` change taking `nominal`'s NIC and NVLink to `now`'s, None where neither
    differs (a change sets bandwidths only: any other difference is not a scenario's)."""
    assert (nominal.inter_node.latency_s, nominal.intra_node.latency_s) == \
        (now.inter_node.latency_s, now.intra_node.latency_s), "a scenario changes bandwidths only"
    out: dict[str, Any] = {}
    if now.inter_node.bw_bytes_per_s != nominal.inter_node.bw_bytes_per_s:
        out["nic_gbit_per_s"] = now.inter_node.bw_bytes_per_s / units.GBIT_BYTES
    if now.intra_node.bw_bytes_per_s != nominal.intra_node.bw_bytes_per_s:
        # bidirectional, halved by the reader as the nominal figure is
        out["intra_node_gbytes_per_s"] = 2 * now.intra_node.bw_bytes_per_s / units.GBYTE_BYTES
    return {"group": now.name, **out} if out else None


def _switching_to_mapping(switching: Switching) -> dict:
    """`switching:`, each key only where it differs from its default."""
    default = Switching()
    out: dict[str, Any] = {}
    if switching.storage_bw_bytes_per_s != default.storage_bw_bytes_per_s:
        out["storage_gbytes_per_s"] = switching.storage_bw_bytes_per_s / units.GBYTE_BYTES
    if switching.restart_s != default.restart_s:
        out["restart_s"] = switching.restart_s
    return out
