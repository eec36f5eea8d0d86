"""instance_to_mapping writes every instance the reader accepts, flat or of node groups, such
that the reader rebuilds an equal Instance (cost/readers/instance_writer.py, cluster_writer.py).

The check is independent of the writer: the records the reader built from the bundled file are
compared field by field (dataclass equality: groups, link matrices, every scenario's resolved
cluster, the timeline, the switching costs) with those it builds from the written mapping, after
a YAML round trip, as a plan file carries it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paraplan.cost import units
from paraplan.cost.readers.instance import instance_from_mapping, load_instance
from paraplan.cost.readers.instance_writer import instance_to_mapping

ROOT = Path(__file__).resolve().parents[2]
# every instance file bundled: instances/**/*.yaml but the part files (clusters/, jobs/), the
# sweep and the network events, which are not instances
_NOT_INSTANCES = {"clusters", "jobs", "sweeps", "events"}
BUNDLED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "instances").rglob("*.yaml")
                 if not _NOT_INSTANCES & set(p.relative_to(ROOT).parts))


def _round_trip(inst):
    text = yaml.safe_dump(instance_to_mapping(inst), sort_keys=False)
    return instance_from_mapping(yaml.safe_load(text), inst.source)


def test_the_bundled_instances_include_every_cluster_kind():
    # the parametrised check below covers flat files and node groups with sites, links,
    # scenarios, a timeline and switching costs; an empty glob would make it pass vacuously
    kinds = {len(load_instance(ROOT / p).cluster.groups) > 1 for p in BUNDLED}
    assert kinds == {True, False}
    assert any(load_instance(ROOT / p).timeline for p in BUNDLED)


@pytest.mark.parametrize("path", BUNDLED)
def test_every_bundled_instance_round_trips(path):
    inst = load_instance(ROOT / path)
    assert _round_trip(inst) == inst


def test_a_mixed_instance_is_written_as_node_groups():
    # instances/mixed/llama3-8b-dynamic.yaml: two groups on two sites, the inter-site link given
    # (100 Gbit/s, 1,000 us), two scenarios and a four-period timeline
    inst = load_instance(ROOT / "instances/mixed/llama3-8b-dynamic.yaml")
    out = instance_to_mapping(inst)
    assert [g["name"] for g in out["cluster"]["groups"]] == ["h100", "a100"]
    assert [g["site"] for g in out["cluster"]["groups"]] == ["east", "west"]
    # (latencies are written as the seconds they hold divided by 1e-6, as a flat file writes
    # them: 0.001 s reads 1000.0000000000001 us, which converts back to the same 0.001 s)
    assert out["cluster"]["links"] == [{"between": ["h100", "a100"], "gbit_per_s": 100.0,
                                        "latency_us": pytest.approx(1000.0)}]
    # scenario 'west-nic-50g': site west's NIC set to 50 Gbit/s (its one group, a100), and the
    # inter-site link set to 50 Gbit/s (given under cluster.links, so the NIC change keeps it at
    # 100 and the link change is written); latency unchanged at 1,000 us
    west = out["scenarios"][1]
    assert west["changes"] == [{"group": "a100", "nic_gbit_per_s": 50.0},
                               {"between": ["h100", "a100"], "gbit_per_s": 50.0,
                                "latency_us": pytest.approx(1000.0)}]
    # 'inter-site-5pct' scales the 100 Gbit/s link by 0.05: 5 Gbit/s
    assert out["scenarios"][0]["changes"][0]["gbit_per_s"] == pytest.approx(5.0)
    assert [p["duration_h"] for p in out["timeline"]] == [2, 2, 14, 6]
    assert out["switching"] == {"storage_gbytes_per_s": 20.0, "restart_s": 180}


def test_a_default_link_is_left_out_and_a_scenario_of_no_change_still_lists_one():
    # instances/mixed/tiny-2types.yaml gives no link: the two nodes meet at the slower NIC,
    # 200 Gbit/s, the default, so none is written
    from dataclasses import replace
    from paraplan.cost.specs import Scenario
    inst = load_instance(ROOT / "instances/mixed/tiny-2types.yaml")
    assert "links" not in instance_to_mapping(inst)["cluster"]
    same = replace(inst, scenarios=(*inst.scenarios, Scenario(name="same", cluster=inst.cluster)))
    assert _round_trip(same) == same


def test_a_one_group_instance_that_a_flat_file_cannot_write_is_written_as_a_group():
    # a group named other than its GPU, or switching costs, exist only in the group form
    from dataclasses import replace
    from paraplan.cost.specs import Cluster, Switching
    inst = load_instance(ROOT / "instances/tiny-gpt-8xA100.yaml")
    named = replace(inst, cluster=Cluster.of(replace(inst.cluster.one_group, name="rack1",
                                                     site="dc")))
    assert instance_to_mapping(named)["cluster"]["groups"][0]["name"] == "rack1"
    assert _round_trip(named) == named
    slow = replace(inst, switching=Switching(storage_bw_bytes_per_s=units.gbytes_per_s_to_bytes_per_s(2.5)))
    assert instance_to_mapping(slow)["switching"] == {"storage_gbytes_per_s": 2.5}
    assert _round_trip(slow) == slow
