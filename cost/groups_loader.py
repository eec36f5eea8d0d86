"""Heterogeneous instances, network events and heterogeneous plans, read from YAML.

The same rules as cost/loader.py, whose readers this module reuses: units in the key names,
converted once here; every problem is one `InstanceError(path, field, problem, fix)` naming the
file and the dotted field; typed strictly; unknown keys are errors with a "did you mean" hint.

Which loader? `is_groups_mapping(data)` (or `is_groups_file(path)`): a file is heterogeneous
when its `cluster:` mapping holds a `groups:` key. The CLI reads the file once with
`cost.loader.read_yaml`, asks `is_groups_mapping`, and calls `cluster_instance_from_mapping`
or the homogeneous loader.

Instance file (required unless a default is given)::

    name: llama3-70b-32xA100-32xH100
    model: {...}                     # exactly as in cost/loader.py
    job: {...}                       # exactly as in cost/loader.py
    gpu_types: {...}                 # optional, as in cost/loader.py
    search: {...}                    # optional, the keys of cost/loader.py's `search:`
    cluster:
      groups:                        # one or more node groups, each homogeneous
        - name: h100                 # unique among the groups
          site: east                 # default: the group's own name
          gpu: H100-SXM5-80GB        # then exactly the homogeneous cluster keys: gpu, nodes,
          nodes: 4                   #   gpus_per_node, intra_node_link, intra_node_gbytes_per_s,
          gpus_per_node: 8           #   intra_node_latency_us, nic_gbit_per_s,
          intra_node_gbytes_per_s: 900   # inter_node_latency_us (same units and defaults)
          nic_gbit_per_s: 400
      links:                         # optional
        - between: [east, west]      # two group or site names
          gbit_per_s: 100            # per GPU, one direction
          latency_us: 2000           # default: the larger inter_node latency of the two groups
    scenarios:                       # optional; the declared network as it is is "nominal"
      - name: inter-site-25pct       # unique, not "nominal"
        probability: 0.2             # optional, in [0, 1]; all scenarios give one or none does
        window_h: [18, 24]           # optional, hours of the day in [0, 24], informational
        changes:                     # non-empty list; syntax under "Changes" below
          - between: [east, west]
            scale: 0.25
    timeline:                        # optional; periods in order
      - scenario: nominal            # "nominal" or a declared scenario's name
        duration_h: 8                # hours, > 0
    switching:                       # optional; defaults as in cost/plan_specs.Switching
      storage_gbytes_per_s: 10       # aggregate checkpoint-storage bandwidth, GB/s
      restart_s: 120                 # seconds to stop and relaunch the job

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

Probabilities (`--expected`): either no scenario gives `probability:` (every `Scenario.
probability` is None), or every one does; the nominal scenario then gets 1 minus their sum,
which must not be negative (a sum above 1 is an error).

Changes (scenarios and events), applied to the nominal cluster in two steps:

1. group changes, in order. `group: NAME` or `site: NAME` (every group on the site), then at
   least one of: `nic_gbit_per_s: X` (set) or `nic_scale: f` (multiply), and
   `intra_node_gbytes_per_s: X` (set; bidirectional as vendors quote it, halved as in
   cost/loader.py) or `intra_scale: f`. The changed NIC also changes the group's diagonal
   entry and every *default* link derived from it (they are rebuilt from the changed NICs);
   links given explicitly under `cluster.links` keep their nominal figures, since they
   describe a path of their own (an inter-site fibre), not the group's NIC. To throttle such
   a link too, add a `between` change.
2. link changes, in order. `between: [x, y]` then at most one of `scale: f` (multiply the
   current bandwidth) or `gbit_per_s: X` (set it), and/or `latency_us: X` (set); at least
   one of the three.
Scales are > 0 (above 1 is an upgrade).

Event file (`paraplan replan --event EVENT.yaml`, `load_event`)::

    event:
      name: inter-site-degraded      # default: the file's stem
      changes: [...]                 # as above, applied to the instance's nominal cluster
      remaining_hours: 200           # exactly one of remaining_hours (> 0) and
      remaining_iterations: 5000     #   remaining_iterations (integer >= 1)

An event sees only the loaded instance, not its file: a link between two groups that differs
from the default derived from their NICs counts as explicitly given (kept under a NIC change);
one given explicitly but equal to that default is rebuilt like a default link.

Plan file, at top level or under a `plan:` key::

    tp: 8                            # tensor parallelism, all classes: inside a node or whole nodes
    micro_batch: 1
    sequence_parallel: false         # default false
    recompute: selective             # none | selective | full, default none (full as in
                                     #   cost/loader.py: every layer fully recomputed)
    zero: 1                          # 0 | 1 | 2 | 3, default 0 (where the framework runs it)
    ep: 1                            # expert parallel degree (MoE models), default 1
    etp: 1                           # expert tensor parallel degree (MoE models), default: tp
    family: stage                    # stage | replica | mixed, default stage
    classes:                         # non-empty list of replica classes
      - replicas: 2
        stages: [h100, h100, a100]   # the group name hosting each pipeline stage
        num_micro_batches: 32        # per replica and iteration
        layers_per_stage: [30, 30, 20]   # default: cost/loader.default_layer_split
        full_recompute_layers: [0, 0, 0] # default all 0, or layers_per_stage for full
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from paraplan.cost import units
from paraplan.cost.errors import InstanceError
from paraplan.cost.framework_rules import unpriced_reason
from paraplan.cost.pipeline_split import megatron_split
from paraplan.cost.specs import Instance
from paraplan.cost.plan_specs import Cluster, Plan, NodeGroup, Period, ReplicaClass, Scenario, Switching
from paraplan.cost.hf_config import shown as _shown
from paraplan.cost.loader import (CLUSTER_KEYS, JOB_KEYS, MODEL_KEYS, RECOMPUTE_FULL, SEARCH_KEYS, Section,
                         catalogue_with_gpu_types, check_job_options, check_moe_overlaps, check_number,
                         cluster_from_section, check_gpu_prices,
                         check_mla_job, check_gpu_features, config_errors_as, default_layer_split, describe, did_you_mean,
                         enum_values, is_group_plan_mapping, job_from_section, load_instance_parts,
                         model_from_section,
                         plan_from_mapping, plan_partitions, plan_zero_bubble, read_yaml,
                         release_search_of, search_from_section, check_int)
from paraplan.cost.ranges import out_of_range, range_text
from paraplan.cost.schedule import TorchSchedule
from paraplan.cost.schedule import schedule_problem as torch_schedule_problem
from paraplan.cost.space_rules import groups_search_refusal, split_slots_run
from paraplan.cost.specs import (Attention, GpuSpec, Link, PipelineSchedule,
                                 Recompute, SearchSpace)

# Hours appear only in timeline and event files; cost/units.py has no hour constant yet.
_HOUR_S = 3600.0
NOMINAL = "nominal"  # the name of the scenario that is the cluster as declared
FAMILIES = ("stage", "replica", "mixed")  # cost/plan_specs.Plan.family

_TOP_KEYS = ("name", "model", "cluster", "job", "gpu_types", "search", "scenarios", "timeline",
             "switching")
_HETERO_CLUSTER_KEYS = ("groups", "links")
_GROUP_KEYS = ("name", "site", *CLUSTER_KEYS)
_LINK_KEYS = ("between", "gbit_per_s", "latency_us")
_SCENARIO_KEYS = ("name", "probability", "window_h", "changes")
_PERIOD_KEYS = ("scenario", "duration_h")
_SWITCHING_KEYS = ("storage_gbytes_per_s", "restart_s")
_LINK_CHANGE_KEYS = ("between", "scale", "gbit_per_s", "latency_us")
_GROUP_CHANGE_KEYS = ("group", "site", "nic_gbit_per_s", "nic_scale", "intra_node_gbytes_per_s",
                      "intra_scale")
_EVENT_FILE_KEYS = ("event",)
_EVENT_KEYS = ("name", "changes", "remaining_hours", "remaining_iterations")
_PLAN_KEYS = ("tp", "cp", "virtual_stages", "micro_batch", "sequence_parallel", "recompute", "zero", "family",
              "ep", "etp", "embedding_in_split", "loss_in_split", "zero_bubble", "classes")
_CLASS_KEYS = ("replicas", "stages", "num_micro_batches", "layers_per_stage",
               "full_recompute_layers", "partitions")
_ABSENT = object()  # default of keys that may be left out; an explicit null is still refused
_MAX_ITEMS = 4096  # groups, links, scenarios, periods, changes, classes
_PROBABILITY_SLACK = 1e-9  # 0.7 + 0.2 + 0.1 may sum to 1.0000000000000002


# --- which loader --------------------------------------------------------------------------

def is_groups_mapping(data: Any) -> bool:
    """True when `data` (a whole instance file, as read) describes node groups."""
    return (isinstance(data, dict) and isinstance(data.get("cluster"), dict)
            and "groups" in data["cluster"])


def is_groups_file(path: str | Path) -> bool:
    """True when the instance file at `path` is heterogeneous (reads it; InstanceError when it
    is not valid YAML)."""
    return is_groups_mapping(read_yaml(path))


# --- instances -----------------------------------------------------------------------------

def load_cluster_instance(path: str | Path) -> Instance:
    """The instance file at `path` as a cluster of node groups, read once: a node-group file as
    written, a flat one (cost/loader.py) as its one group (cost/specs.Cluster.of)."""
    data = read_yaml(path)
    if is_groups_mapping(data):
        return cluster_instance_from_mapping(data, path)
    return load_instance_parts(path, hf_config=None, cluster=None, job=None, data=data)


def cluster_instance_from_mapping(data: Any, path: str | Path = "<memory>") -> Instance:
    """The instance described by `data`, a whole heterogeneous instance file as read."""
    path = str(path)
    top = Section(data, path, "", _TOP_KEYS)
    name = top.string("name")
    gpus = catalogue_with_gpu_types(top)
    model = model_from_section(top.section("model", MODEL_KEYS), name)
    job = job_from_section(top.section("job", JOB_KEYS))
    check_mla_job(path, job, model)
    if job.pipeline_schedule is not PipelineSchedule.ONE_F_ONE_B:
        raise InstanceError(path, "job.pipeline_schedule", "DualPipe is planned and priced for"
                            " one GPU type only (cost/dualpipe.py: a device holds two stages, which"
                            " on a mixed cluster could sit on different GPU types)",
                            "remove pipeline_schedule, or plan a homogeneous cluster")
    search = search_from_section(top.section("search", SEARCH_KEYS)) if top.has("search") else None
    released = release_search_of(path, search or SearchSpace(), job, frozenset(top.raw.get("search") or ()))
    search = released if search is not None or released != SearchSpace() else None

    net = _network(top.section("cluster", _HETERO_CLUSTER_KEYS), gpus)
    check_gpu_features(path, job, tuple(g.cluster.gpu for g in net.groups))
    check_gpu_prices(path, job, tuple(g.cluster.gpu for g in net.groups))
    check_moe_overlaps(path, job, model, search or SearchSpace())  # as a homogeneous file's
    check_job_options(path, job, model, search or SearchSpace())
    if search is not None:  # listed values no plan on these groups can use
        refusal = groups_search_refusal(search, model, [g.cluster for g in net.groups],
                                        frozenset(top.raw["search"]), job.attention is Attention.FLASH,
                                        split_slots_run(job, search))
        if refusal is not None:
            raise InstanceError(path, f"search.{refusal.key}", refusal.problem, refusal.fix)
    nominal = net.cluster()
    scenarios = [Scenario(name=NOMINAL, cluster=nominal)]
    if top.has("scenarios"):
        scenarios = _scenarios(top, net, nominal)
    timeline = _timeline(top, scenarios) if top.has("timeline") else ()
    switching = _switching(top.section("switching", _SWITCHING_KEYS)) \
        if top.has("switching") else Switching()
    kw = {} if search is None else {"search": search}
    return Instance(name=name, model=model, cluster=nominal, job=job,
                          scenarios=tuple(scenarios), timeline=timeline, switching=switching,
                          source=path, **kw)


# --- groups, sites and links ---------------------------------------------------------------

class _Network:
    """The nominal groups and the explicitly given links, from which every scenario's
    Cluster is built (module docstring, "Changes")."""

    def __init__(self, path: str, groups: list[NodeGroup],
                 explicit: dict[tuple[int, int], Link]):
        self.path, self.groups, self.explicit = path, groups, explicit
        self.by_name = {x.name: i for i, x in enumerate(groups)}
        self.sites: dict[str, list[int]] = {}
        for i, x in enumerate(groups):
            self.sites.setdefault(x.site, []).append(i)

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
                            _did_you_mean(value, known, "groups and sites"))

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
        x, y = groups[a].cluster.inter_node, groups[b].cluster.inter_node
        return Link(bw_bytes_per_s=min(x.bw_bytes_per_s, y.bw_bytes_per_s),
                    latency_s=max(x.latency_s, y.latency_s))

    def matrix(self, groups: list[NodeGroup]) -> list[list[Link]]:
        n = len(groups)
        return [[groups[a].cluster.inter_node if a == b else
                 self.explicit.get((min(a, b), max(a, b))) or self.default_link(a, b, groups)
                 for b in range(n)] for a in range(n)]

    def cluster(self, groups: list[NodeGroup] | None = None,
                between: list[list[Link]] | None = None) -> Cluster:
        groups = self.groups if groups is None else groups
        between = self.matrix(groups) if between is None else between
        with config_errors_as(self.path, "cluster", "correct the cluster description"):
            return Cluster(groups=tuple(groups),
                                 between=tuple(tuple(row) for row in between))


def _did_you_mean(name: str, known, what: str) -> str:
    """A fix for an unknown name: the closest known one, else the list of them."""
    return did_you_mean(name, known) or f"the {what} are: " + ", ".join(sorted(known))


def _items(sec: Section, key: str, *, each: str) -> list[tuple[str, Any]]:
    """(dotted field, raw item) for each entry of the non-empty list under `key`; `each`
    names one entry for the messages."""
    if not sec.has(key):
        raise sec.error(key, f"missing required key '{key}'",
                        f"add '{key}:' with one '- ...' entry per {each}")
    value = sec.raw[key]
    if not isinstance(value, list) or not value:
        got = "an empty list" if value == [] else describe(value)
        raise sec.error(key, f"expected a non-empty list, got {got}",
                        f"write one '- ...' entry per {each}")
    if len(value) > _MAX_ITEMS:
        raise sec.error(key, f"has {len(value)} entries", f"list at most {_MAX_ITEMS}")
    return [(f"{sec.field(key)}[{i}]", item) for i, item in enumerate(value)]


def _network(sec: Section, gpus: dict[str, GpuSpec]) -> _Network:
    path = sec.path
    groups: list[NodeGroup] = []
    for field, raw in _items(sec, "groups", each="group"):
        item = Section(raw, path, field, _GROUP_KEYS)
        name = item.string("name")
        if any(x.name == name for x in groups):
            raise item.error("name", f"a second group named {_shown(name)}",
                             "give every node group its own name")
        groups.append(NodeGroup(name=name, site=item.string("site", name),
                                cluster=cluster_from_section(item, gpus)))
    by_name = {x.name: x for x in groups}
    for i, x in enumerate(groups):
        owner = by_name.get(x.site)
        if owner is not None and owner is not x:
            raise InstanceError(path, f"cluster.groups[{i}].site",
                                f"site {_shown(x.site)} is also the name of group"
                                f" {_shown(owner.name)}, so `between:` could not tell them"
                                " apart", "name sites differently from groups (a site may"
                                " share its name only with its one group)")

    net = _Network(path, groups, {})
    if sec.has("links"):
        given: dict[tuple[int, int], tuple[int, str]] = {}  # pair -> (specificity, field)
        for field, raw in _items(sec, "links", each="link"):
            item = Section(raw, path, field, _LINK_KEYS)
            pairs, specificity = net.pairs(item)
            bw = units.gbit_per_s_to_bytes_per_s(item.number("gbit_per_s"))
            latency_us = _optional_number(item, "latency_us")
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


# --- scenarios, timeline, switching --------------------------------------------------------

def _apply_changes(net: _Network, sec: Section, key: str) -> Cluster:
    """The nominal cluster with the change list under `sec[key]` applied (module docstring)."""
    group_changes, link_changes = _sorted_changes(sec, key)
    groups = list(net.groups)
    for ch in group_changes:
        _apply_group_change(net, groups, ch)
    between = net.matrix(groups)
    for ch in link_changes:
        _apply_link_change(net, between, ch)
    return net.cluster(groups, between)


def _sorted_changes(sec: Section, key: str) -> tuple[list[Section], list[Section]]:
    """The change list under `sec[key]` as (group or site changes, link changes)."""
    path = sec.path
    group_changes, link_changes = [], []
    for field, raw in _items(sec, key, each="change"):
        if isinstance(raw, dict) and "between" in raw:
            link_changes.append(Section(raw, path, field, _LINK_CHANGE_KEYS))
        elif isinstance(raw, dict) and ("group" in raw or "site" in raw):
            group_changes.append(Section(raw, path, field, _GROUP_CHANGE_KEYS))
        else:
            raise InstanceError(path, field, "a change names no `between:`, `group:` or `site:`"
                                if isinstance(raw, dict) else
                                f"expected a mapping, got {describe(raw)}",
                                "write '- between: [x, y]' with scale or gbit_per_s, or"
                                " '- group: NAME' with nic_gbit_per_s, nic_scale,"
                                " intra_node_gbytes_per_s or intra_scale")
    return group_changes, link_changes


def _apply_group_change(net: _Network, groups: list, ch: Section) -> None:
    """One `group:` or `site:` change applied to `groups` in place: its members' NIC and NVLink."""
    if ch.has("group") and ch.has("site"):
        raise ch.error("site", "a change names both a group and a site",
                       "keep one of `group:` and `site:`")
    target = "group" if ch.has("group") else "site"
    name = ch.string(target)
    if target == "group" and name not in net.by_name or \
            target == "site" and name not in net.sites:
        known = tuple(net.by_name if target == "group" else net.sites)
        raise ch.error(target, f"no {target} named {_shown(name)}",
                       _did_you_mean(name, known, f"{target}s"))
    members = [net.by_name[name]] if target == "group" else net.sites[name]
    nic = _set_or_scale(ch, "nic_gbit_per_s", "nic_scale")
    intra = _set_or_scale(ch, "intra_node_gbytes_per_s", "intra_scale")
    if nic is None and intra is None:
        raise ch.error(target, "the change changes nothing",
                       "add nic_gbit_per_s, nic_scale, intra_node_gbytes_per_s or"
                       " intra_scale")
    for g in members:
        c = groups[g].cluster
        inter, intra_link = c.inter_node, c.intra_node
        if nic is not None:
            bw = units.gbit_per_s_to_bytes_per_s(nic[1]) if nic[0] == "set" \
                else inter.bw_bytes_per_s * nic[1]
            _check_scaled(ch, "nic_scale", "nic_gbit_per_s", groups[g].name,
                          bw / units.gbit_per_s_to_bytes_per_s(1))
            inter = replace(inter, bw_bytes_per_s=bw)
        if intra is not None:
            # Bidirectional figure, halved as cost/loader.py does for the nominal one.
            bw = units.gbytes_per_s_to_bytes_per_s(intra[1]) / 2 if intra[0] == "set" \
                else intra_link.bw_bytes_per_s * intra[1]
            _check_scaled(ch, "intra_scale", "intra_node_gbytes_per_s", groups[g].name,
                          2 * bw / units.gbytes_per_s_to_bytes_per_s(1))
            intra_link = replace(intra_link, bw_bytes_per_s=bw)
        groups[g] = replace(groups[g], cluster=replace(c, inter_node=inter,
                                                       intra_node=intra_link))


def _apply_link_change(net: _Network, between: list, ch: Section) -> None:
    """One `between:` change applied to the link matrix `between` in place (both directions)."""
    pairs, _ = net.pairs(ch)
    bw = _set_or_scale(ch, "gbit_per_s", "scale")
    latency_us = _optional_number(ch, "latency_us")
    if bw is None and latency_us is None:
        raise ch.error("between", "the change changes nothing",
                       "add `scale: f` (multiply) or `gbit_per_s: X` (set the bandwidth),"
                       " and/or `latency_us: X`")
    for a, b in pairs:
        link = between[a][b]
        new_bw = link.bw_bytes_per_s if bw is None else \
            units.gbit_per_s_to_bytes_per_s(bw[1]) if bw[0] == "set" \
            else link.bw_bytes_per_s * bw[1]
        _check_scaled(ch, "scale", "gbit_per_s",
                      f"{net.groups[a].name}-{net.groups[b].name}",
                      new_bw / units.gbit_per_s_to_bytes_per_s(1))
        latency_s = link.latency_s if latency_us is None else units.us_to_s(latency_us)
        between[a][b] = between[b][a] = Link(bw_bytes_per_s=new_bw, latency_s=latency_s)


def _check_scaled(sec: Section, key: str, quantity: str, what: str, value: float) -> None:
    """A bandwidth after a change (scales compound) stays in its quantity's physical range."""
    if sec.has(key) and out_of_range(quantity, value) is not None:
        raise sec.error(key, f"scales the {quantity} of {_shown(what)} to {value:.6g}, outside"
                        f" its {range_text(quantity)}", "give a scale that keeps the bandwidth"
                        " in its range, or set the figure itself")


def _optional_number(sec: Section, key: str) -> float | None:
    """The number under `key`, or None when the key is absent (a null is refused)."""
    value = sec.number(key, _ABSENT)
    return None if value is _ABSENT else value


def _set_or_scale(sec: Section, set_key: str, scale_key: str) -> tuple[str, float] | None:
    """("set", value in the key's unit) or ("scale", factor), or None when neither is given."""
    if sec.has(set_key) and sec.has(scale_key):
        raise sec.error(scale_key, f"both {set_key} and {scale_key} are given",
                        f"keep one: {set_key} sets the figure, {scale_key} multiplies it")
    if sec.has(set_key):
        return "set", sec.number(set_key)
    if sec.has(scale_key):
        return "scale", sec.number(scale_key)
    return None


def _scenarios(top: Section, net: _Network, nominal: Cluster) -> list[Scenario]:
    path = top.path
    out: list[Scenario] = []
    probabilities: list[tuple[str, float | None]] = []
    for field, raw in _items(top, "scenarios", each="scenario"):
        sec = Section(raw, path, field, _SCENARIO_KEYS)
        name = sec.string("name")
        if name == NOMINAL:
            raise sec.error("name", f"'{NOMINAL}' is the declared network itself",
                            "give the scenario another name; the timeline may refer to"
                            f" '{NOMINAL}' without declaring it")
        if any(s.name == name for s in out):
            raise sec.error("name", f"a second scenario named {_shown(name)}",
                            "give every scenario its own name")
        probability = _optional_number(sec, "probability")
        probabilities.append((field, probability))
        window = None
        if sec.has("window_h"):
            window = sec.list_of("window_h", lambda v, f: _hour_of_day(path, v, f),
                                 "hours of the day")
            if len(window) != 2 or window[0] == window[1]:
                raise sec.error("window_h", f"expected two different hours, got {list(window)}",
                                "write [start, end], e.g. [18, 24]")
        out.append(Scenario(name=name, cluster=_apply_changes(net, sec, "changes"),
                            probability=probability, window_h=window))

    given = [p for _, p in probabilities if p is not None]
    nominal_probability = None
    if given:
        missing = [f for f, p in probabilities if p is None]
        if missing:
            raise InstanceError(path, f"{missing[0]}.probability", "some scenarios give a"
                                " probability and this one does not",
                                "give every scenario a probability, or none")
        total = sum(given)
        if total > 1 + _PROBABILITY_SLACK:
            raise InstanceError(path, "scenarios", f"the probabilities sum to {total:g}, above 1",
                                "lower them; the nominal network gets 1 minus their sum")
        nominal_probability = max(0.0, 1.0 - total)
    return [Scenario(name=NOMINAL, cluster=nominal, probability=nominal_probability), *out]


def _hour_of_day(path: str, value: Any, field: str) -> float:
    return check_number(value, path, field, "window_h")


def _timeline(top: Section, scenarios: list[Scenario]) -> tuple[Period, ...]:
    names = [s.name for s in scenarios]
    periods = []
    for field, raw in _items(top, "timeline", each="period"):
        sec = Section(raw, top.path, field, _PERIOD_KEYS)
        name = sec.string("scenario")
        if name not in names:
            raise sec.error("scenario", f"no scenario named {_shown(name)}",
                            _did_you_mean(name, names, "scenarios"))
        duration_s = sec.number("duration_h") * _HOUR_S
        periods.append(Period(scenario=names.index(name), duration_s=duration_s))
    return tuple(periods)


def _switching(sec: Section) -> Switching:
    defaults = Switching()
    bw = _optional_number(sec, "storage_gbytes_per_s")
    restart_s = sec.number("restart_s", defaults.restart_s)
    with config_errors_as(sec.path, sec.prefix, "correct the switching costs"):
        return Switching(storage_bw_bytes_per_s=defaults.storage_bw_bytes_per_s if bw is None
                         else units.gbytes_per_s_to_bytes_per_s(bw),
                         restart_s=restart_s)


# --- events --------------------------------------------------------------------------------

def load_event(path: str | Path,
               inst: Instance) -> tuple[Scenario, float | None, int | None]:
    """The network event in `path` (module docstring) applied to `inst`'s nominal cluster:
    (the scenario it makes, remaining seconds or None, remaining iterations or None); exactly
    one of the two is given."""
    return event_from_mapping(read_yaml(path), inst, path)


def event_from_mapping(data: Any, inst: Instance,
                       path: str | Path = "<memory>") -> tuple[Scenario, float | None, int | None]:
    path = str(path)
    sec = Section(data, path, "", _EVENT_FILE_KEYS).section("event", _EVENT_KEYS)
    name = sec.string("name", Path(path).stem)
    has_hours, has_iterations = sec.has("remaining_hours"), sec.has("remaining_iterations")
    if has_hours == has_iterations:
        raise sec.error("remaining_hours", "both remaining_hours and remaining_iterations are"
                        " given" if has_hours else "neither remaining_hours nor"
                        " remaining_iterations is given",
                        "give exactly one: how long the changed network lasts")
    remaining_s = sec.number("remaining_hours") * _HOUR_S if has_hours else None
    remaining_iterations = sec.integer("remaining_iterations") if has_iterations else None
    net = _network_of(inst, path)
    return (Scenario(name=name, cluster=_apply_changes(net, sec, "changes")), remaining_s,
            remaining_iterations)


def _network_of(inst: Instance, path: str) -> _Network:
    """The instance's nominal cluster as a _Network: every link that differs from the default
    derived from the groups' NICs counts as explicitly given."""
    groups = list(inst.cluster.groups)
    net = _Network(path, groups, {})
    n = len(groups)
    for a in range(n):
        for b in range(a + 1, n):
            link = inst.cluster.between[a][b]
            if link != net.default_link(a, b, groups):
                net.explicit[(a, b)] = link
    return net


# --- plans ---------------------------------------------------------------------------------

def class_plan_from_mapping(mapping: Any, inst: Instance,
                             path: str | Path = "<memory>") -> Plan:
    """A Plan for `inst` from a plan mapping (bare, or wrapped as {'plan': {...}})."""
    path = str(path)
    if isinstance(mapping, dict) and list(mapping) == ["plan"]:
        mapping = mapping["plan"]
    sec = Section(mapping, path, "plan", _PLAN_KEYS)
    names = tuple(x.name for x in inst.cluster.groups)
    micro_batch = sec.integer("micro_batch")
    by_group = _group_tp(sec, names, path)  # tp: {GROUP: N, ...}, a tp per group
    tp = 0 if by_group else sec.integer("tp")
    zero, cp, v = sec.integer("zero", 0), sec.integer("cp", 1), sec.integer("virtual_stages", 1)
    recompute = sec.choice("recompute", (*enum_values(Recompute), RECOMPUTE_FULL),
                           Recompute.NONE.value)
    embedding = sec.boolean("embedding_in_split", False)
    loss = sec.boolean("loss_in_split", False)
    zero_bubble = plan_zero_bubble(sec, inst)
    classes = []
    for field, raw in _items(sec, "classes", each="class"):
        c = Section(raw, path, field, _CLASS_KEYS)
        if not c.has("stages"):
            raise c.error("stages", "missing required key 'stages'",
                          "add 'stages: [GROUP, ...]', the group hosting each pipeline stage")
        stages = c.list_of("stages", lambda v, f: _group_index(path, names, v, f),
                           "group names")
        pp = len(stages)
        layers = c.int_list("layers_per_stage", pp)
        if layers is None:
            if inst.model.layers < pp:
                raise c.error("stages", f"{pp} stages exceed the model's {inst.model.layers}"
                              " layers", "use fewer pipeline stages")
            if embedding or loss:  # Megatron-core's split with the slots (R4)
                with config_errors_as(path, field, "give layers_per_stage"):
                    layers = megatron_split(inst.model.layers, pp, v, embedding=embedding, loss=loss)
            elif inst.model.layers % v or inst.model.layers < v * pp:
                raise c.error("stages", f"{pp} stages of {v} chunks do not split the model's"
                              f" {inst.model.layers} layers", "give layers_per_stage")
            else:
                layers = default_layer_split(inst.model.layers, pp, v)
        full = c.int_list("full_recompute_layers", pp)
        if full is None:
            full = layers if recompute == RECOMPUTE_FULL else (0,) * pp
        parts = _class_partitions(c, names, stages, path)
        with config_errors_as(path, field, "correct the replica class"):
            classes.append(ReplicaClass(replicas=c.integer("replicas"), stage_groups=stages,
                                        num_micro_batches=c.integer("num_micro_batches"),
                                        layers_per_stage=layers, full_recompute_layers=full,
                                        partitions=parts))

    m = inst.model
    agree = (f"make the plan agree with instance '{inst.name}': groups {', '.join(names)},"
             f" {m.layers} layers, global_batch {inst.job.global_batch}, {m.heads} heads")
    if by_group:  # `tp` is the first stage's group's (ClassOuter.group_tp)
        first = classes[0].stage_groups[0] if classes else 0
        if first not in dict(by_group):
            raise sec.error("tp", f"names no tp for group {names[first]!r}, which hosts the first"
                            " stage", "give every group the plan uses its tp")
        tp = dict(by_group)[first]
    with config_errors_as(path, "plan", agree):
        plan = Plan(
            tp=tp, group_tp=by_group, micro_batch=micro_batch, cp=cp, virtual_stages=v,
            sequence_parallel=sec.boolean("sequence_parallel", False),
            recompute=Recompute.NONE if recompute == RECOMPUTE_FULL else Recompute(recompute),
            zero=zero, ep=sec.integer("ep", 1), etp=sec.integer("etp", None),
            classes=tuple(classes),
            family=sec.choice("family", FAMILIES, FAMILIES[0]),
            embedding_in_split=embedding, loss_in_split=loss, zero_bubble=zero_bubble,
        )
        plan.check_against(inst)
    if zero_bubble is not None:
        c0 = plan.classes[0]
        problem = ("the space plans a zero-bubble schedule for one replica class" if len(plan.classes) > 1
                   else torch_schedule_problem(TorchSchedule(zero_bubble.value), len(c0.stage_groups), v,
                                               c0.num_micro_batches))
        if problem:
            raise sec.error("zero_bubble", problem, "leave zero_bubble out, or give the plan a shape"
                            " torch runs the schedule with")
    unpriced = unpriced_reason(inst.job.framework, zero, max(len(c.stage_groups) for c in plan.classes))
    if unpriced:  # as cost/loader.plan_from_mapping: no command prices it
        problem, fix = unpriced.split("; ", 1)
        raise sec.error("zero", problem, fix + " (or plan the instance: the planner never proposes it)")
    return plan


def _group_tp(sec: Section, names: tuple[str, ...], path: str) -> tuple[tuple[int, int], ...]:
    """`tp: {GROUP: N, ...}` as ((group, tp), ...) by ascending group; () for `tp: N`."""
    if not isinstance(sec.raw.get("tp"), dict):
        return ()
    sub = sec.section("tp", names)
    out = tuple(sorted((names.index(n), check_int(sub.raw[n], path, sub.field(n), "tp"))
                       for n in names if sub.has(n)))
    if len(out) < 2:
        raise sec.error("tp", "a tp per group names each group the plan uses",
                        f"give each of {', '.join(names)} that the plan uses its tp, or write one"
                        " number, e.g. tp: 4")
    if len({t for _, t in out}) == 1:
        raise sec.error("tp", "a tp per group needs at least two different degrees",
                        "write one number, e.g. tp: 4, when every group runs the same")
    return out


def _class_partitions(c: Section, names: tuple[str, ...], stages: tuple[int, ...], path: str):
    """`partitions: {GROUP: {qkv: K, attn_core: heads, ...}}`: the layer plan of the class's
    stages on each group named (cost/loader's plan `partitions:`; absent: Megatron 1-D)."""
    if not c.has("partitions"):
        return ()
    used = tuple(dict.fromkeys(names[g] for g in stages))
    sub = c.section("partitions", used)
    out = []
    for name in used:
        if sub.has(name):
            parts = plan_partitions(sub, name)
            out.append((names.index(name), parts))
    return tuple(sorted(out))


def _group_index(path: str, names: tuple[str, ...], value: Any, field: str) -> int:
    if isinstance(value, str) and value in names:
        return names.index(value)
    shown = _shown(value) if isinstance(value, str) else describe(value)
    raise InstanceError(path, field, f"no group named {shown}",
                        _did_you_mean(value if isinstance(value, str) else "", names, "groups"))


def load_class_plan(path: str | Path, inst: Instance) -> Plan:
    """The plan file at `path` for `inst`: the group format, or on a one-group cluster also the
    flat one (a flat plan is the one-class plan on group 0)."""
    return class_plan_from_data(read_yaml(path), inst, path)


def class_plan_from_data(data: Any, inst: Instance, path: str | Path) -> Plan:
    """load_class_plan of a plan file's contents `data`, read from `path`."""
    if len(inst.cluster.groups) == 1 and not is_group_plan_mapping(data):
        return plan_from_mapping(data, inst.group_alone(0), str(path))
    return class_plan_from_mapping(data, inst, str(path))


def class_plan_to_mapping(plan: Plan, inst: Instance) -> dict:
    """Plain YAML-safe mapping that class_plan_from_mapping turns back into `plan`."""
    names = [x.name for x in inst.cluster.groups]
    all_full = plan.recompute is Recompute.NONE and all(
        c.full_recompute_layers == c.layers_per_stage for c in plan.classes)
    classes = []
    for c in plan.classes:
        item = {"replicas": c.replicas, "stages": [names[g] for g in c.stage_groups],
                "num_micro_batches": c.num_micro_batches,
                "layers_per_stage": list(c.layers_per_stage)}
        if not all_full:
            item["full_recompute_layers"] = list(c.full_recompute_layers)
        if c.partitions:
            item["partitions"] = {names[g]: dict(parts) for g, parts in c.partitions}
        classes.append(item)
    # written only where used: plans without cp or interleaving read as before
    cp = {"cp": plan.cp} if plan.cp > 1 else {}
    v = {"virtual_stages": plan.virtual_stages} if plan.virtual_stages > 1 else {}
    ep = {"ep": plan.ep} if plan.ep > 1 else {}
    etp = {"etp": plan.etp} if plan.etp is not None else {}
    slots = {k: True for k in ("embedding_in_split", "loss_in_split") if getattr(plan, k)}
    zb = {"zero_bubble": plan.zero_bubble.value} if plan.zero_bubble is not None else {}
    tp = {names[g]: t for g, t in plan.group_tp} if plan.group_tp else plan.tp
    return {"tp": tp, **cp, **v, **slots, **zb, **ep, **etp, "micro_batch": plan.micro_batch,
            "sequence_parallel": plan.sequence_parallel,
            # Only with NONE does `full` read back as the same plan (full maps to NONE).
            "recompute": RECOMPUTE_FULL if all_full else plan.recompute.value,
            "zero": plan.zero, "family": plan.family, "classes": classes}
