"""What changes the declared network: scenarios, a timeline of them, switching costs, and
network events (`paraplan replan --event`), each applied to the nominal cluster once, as read.

Probabilities (`--expected`): either no scenario gives `probability:` (every `Scenario.
probability` is None), or every one does; the nominal scenario then gets 1 minus their sum,
which must not be negative (a sum above 1 is an error).

Changes (scenarios and events), applied to the nominal cluster in two steps:

1. group changes, in order. `group: NAME` or `site: NAME` (every group on the site), then at
   least one of: `nic_gbit_per_s: X` (set) or `nic_scale: f` (multiply), and
   `intra_node_gbytes_per_s: X` (set; bidirectional as vendors quote it, halved as
   cost/readers/cluster.py halves the nominal figure) or `intra_scale: f`. The changed NIC also changes the group's diagonal
   entry and every *default* link derived from it (they are rebuilt from the changed NICs);
   links given explicitly under `cluster.links` keep their nominal figures, since they
   describe a path of their own (an inter-site fibre), not the group's NIC. To throttle such
   a link too, add a `between` change.
2. link changes, in order. `between: [x, y]` then at most one of `scale: f` (multiply the
   current bandwidth) or `gbit_per_s: X` (set it), and/or `latency_us: X` (set); at least
   one of the three.
Scales are > 0 (above 1 is an upgrade).

An event file (`paraplan replan --event EVENT.yaml`, `load_event`; its keys: docs/schema.md)
applies its changes to the instance's nominal cluster. An event sees only the loaded instance, not its file: a link between two groups that differs
from the default derived from their NICs counts as explicitly given (kept under a NIC change);
one given explicitly but equal to that default is rebuilt like a default link.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from paraplan.cost import units
from paraplan.cost.errors import InstanceError
from paraplan.cost.hf_layout import shown as _shown
from paraplan.cost.ranges import out_of_range, range_text
from paraplan.cost.specs import Cluster, Instance, Link
from paraplan.cost.specs import Period, Scenario, Switching
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.readers.fields import (Section, check_number, config_errors_as, describe,
                                          did_you_mean_or_known, list_items, optional_number)
from paraplan.cost.readers.cluster import Network


NOMINAL = "nominal"  # the name of the scenario that is the cluster as declared
_SCENARIO_KEYS = ("name", "probability", "window_h", "changes")
_PERIOD_KEYS = ("scenario", "duration_h")
SWITCHING_KEYS = ("storage_gbytes_per_s", "restart_s")
_LINK_CHANGE_KEYS = ("between", "scale", "gbit_per_s", "latency_us")
_GROUP_CHANGE_KEYS = ("group", "site", "nic_gbit_per_s", "nic_scale", "intra_node_gbytes_per_s",
                      "intra_scale")
_EVENT_FILE_KEYS = ("event",)
_EVENT_KEYS = ("name", "changes", "remaining_hours", "remaining_iterations")
_PROBABILITY_SLACK = 1e-9  # 0.7 + 0.2 + 0.1 may sum to 1.0000000000000002


def _apply_changes(net: Network, sec: Section, key: str) -> Cluster:
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
    for field, raw in list_items(sec, key, each="change"):
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


def _apply_group_change(net: Network, groups: list, ch: Section) -> None:
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
                       did_you_mean_or_known(name, known, f"{target}s"))
    members = [net.by_name[name]] if target == "group" else net.sites[name]
    nic = _set_or_scale(ch, "nic_gbit_per_s", "nic_scale")
    intra = _set_or_scale(ch, "intra_node_gbytes_per_s", "intra_scale")
    if nic is None and intra is None:
        raise ch.error(target, "the change changes nothing",
                       "add nic_gbit_per_s, nic_scale, intra_node_gbytes_per_s or"
                       " intra_scale")
    for g in members:
        inter, intra_link = groups[g].inter_node, groups[g].intra_node
        if nic is not None:
            bw = units.gbit_per_s_to_bytes_per_s(nic[1]) if nic[0] == "set" \
                else inter.bw_bytes_per_s * nic[1]
            _check_scaled(ch, "nic_scale", "nic_gbit_per_s", groups[g].name,
                          bw / units.gbit_per_s_to_bytes_per_s(1))
            inter = replace(inter, bw_bytes_per_s=bw)
        if intra is not None:
            # Bidirectional figure, halved as cost/readers/cluster.py halves the nominal one.
            bw = units.gbytes_per_s_to_bytes_per_s(intra[1]) / 2 if intra[0] == "set" \
                else intra_link.bw_bytes_per_s * intra[1]
            _check_scaled(ch, "intra_scale", "intra_node_gbytes_per_s", groups[g].name,
                          2 * bw / units.gbytes_per_s_to_bytes_per_s(1))
            intra_link = replace(intra_link, bw_bytes_per_s=bw)
        groups[g] = replace(groups[g], inter_node=inter, intra_node=intra_link)


def _apply_link_change(net: Network, between: list, ch: Section) -> None:
    """One `between:` change applied to the link matrix `between` in place (both directions)."""
    pairs, _ = net.pairs(ch)
    bw = _set_or_scale(ch, "gbit_per_s", "scale")
    latency_us = optional_number(ch, "latency_us")
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


def read_scenarios(top: Section, net: Network, nominal: Cluster) -> list[Scenario]:
    path = top.path
    out: list[Scenario] = []
    probabilities: list[tuple[str, float | None]] = []
    for field, raw in list_items(top, "scenarios", each="scenario"):
        sec = Section(raw, path, field, _SCENARIO_KEYS)
        name = sec.string("name")
        if name == NOMINAL:
            raise sec.error("name", f"'{NOMINAL}' is the declared network itself",
                            "give the scenario another name; the timeline may refer to"
                            f" '{NOMINAL}' without declaring it")
        if any(s.name == name for s in out):
            raise sec.error("name", f"a second scenario named {_shown(name)}",
                            "give every scenario its own name")
        probability = optional_number(sec, "probability")
        probabilities.append((field, probability))
        window = None
        if sec.has("window_h"):
            window = sec.list_of("window_h", lambda v, f: check_number(v, path, f, "window_h"),
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


def read_timeline(top: Section, scenarios: list[Scenario]) -> tuple[Period, ...]:
    names = [s.name for s in scenarios]
    periods = []
    for field, raw in list_items(top, "timeline", each="period"):
        sec = Section(raw, top.path, field, _PERIOD_KEYS)
        name = sec.string("scenario")
        if name not in names:
            raise sec.error("scenario", f"no scenario named {_shown(name)}",
                            did_you_mean_or_known(name, names, "scenarios"))
        duration_s = sec.number("duration_h") * units.HOUR_S
        periods.append(Period(scenario=names.index(name), duration_s=duration_s))
    return tuple(periods)


def read_switching(sec: Section) -> Switching:
    defaults = Switching()
    bw = optional_number(sec, "storage_gbytes_per_s")
    restart_s = sec.number("restart_s", defaults.restart_s)
    with config_errors_as(sec.path, sec.prefix, "correct the switching costs"):
        return Switching(storage_bw_bytes_per_s=defaults.storage_bw_bytes_per_s if bw is None
                         else units.gbytes_per_s_to_bytes_per_s(bw),
                         restart_s=restart_s)


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
    remaining_s = sec.number("remaining_hours") * units.HOUR_S if has_hours else None
    remaining_iterations = sec.integer("remaining_iterations") if has_iterations else None
    net = Network.of(inst.cluster, path)
    return (Scenario(name=name, cluster=_apply_changes(net, sec, "changes")), remaining_s,
            remaining_iterations)
