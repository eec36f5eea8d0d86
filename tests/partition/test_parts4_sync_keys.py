"""plan_sync.layer_sync_floors keyed by the ring's shape (plan_sync.ring_shape) in place of the
classes' shapes, on test_plan_sync's two-site instances with the three layout options (several
classes per outer, sharing groups), and on one with two nodes of 2 GPUs per group (where the
GPUs a shared group's ring spans decide whether it stays inside a node).

Checked against what is computed without the shared key:
- ring_shape reads all the gradient ring reads: outers of one ring shape have one
  class_coefficients._ring_link on every group (the link itself, computed from the classes);
- every outer's least sync (plan_sync.least_sync_s) read through one memo shared by all the
  outers equals the same read with a memo of its own (no entry another outer wrote), and
  equals the reading keyed by the classes' shapes (layer_sync_floors without `ring`);
- the shared key is read: some entries are read by outers whose classes differ.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import OPTIONS  # noqa: E402
from test_plan_sync import CASES, two_sites  # noqa: E402
from test_partitions_lazy import TINY2  # noqa: E402

from oracles.bounds import least_sync_s  # noqa: E402
from paraplan.cost.class_coefficients import _ring_link, class_outers  # noqa: E402
from paraplan.cost.comm import NetEfficiency  # noqa: E402
from paraplan.cost.readers.instance import instance_from_mapping  # noqa: E402
from paraplan.cost.readers.strict_yaml import read_yaml  # noqa: E402
from paraplan.solver.bounds import plan_sync  # noqa: E402
from paraplan.solver.space import declared_outers  # noqa: E402


def _two_nodes():
    """tiny-2types with two nodes of 2 GPUs per group, tp 1 or 2 per group, partitions and the
    options on."""
    d = read_yaml(TINY2)
    for g in d["cluster"]["groups"]:
        g["nodes"], g["gpus_per_node"] = 2, 2
    d["job"]["global_batch"] = 16
    d["search"] = {"micro_batch": [2], "tp": [1, 2], "tp_per_group": True, "zero": [1],
                   "sequence_parallel": [False], "tensor_partitions": ["megatron", "spatial_temporal"], **OPTIONS}
    d["name"] = "tiny2-two-nodes"
    return instance_from_mapping(d, "<two nodes>")


CASES = (*CASES, "two nodes")
IDS = ("tiny", "wide", "two-nodes")


def _outers(case):
    inst = _two_nodes() if case == "two nodes" else two_sites(*case, **OPTIONS)
    outers = [o for o in declared_outers(inst) if plan_sync.applies(inst, o)]
    assert sum(len(o.classes) > 1 for o in outers) > 10
    return inst, outers


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_one_ring_shape_one_ring_link(case):
    inst, outers = _outers(case)
    by_shape = defaultdict(list)
    for o in outers:
        by_shape[plan_sync.ring_shape(o)].append(o)
    cluster = inst.cluster
    shared = 0
    for shape, same in by_shape.items():
        if shape is None:
            continue
        for g in range(len(cluster.groups)):
            assert len({_ring_link(cluster, o, g) for o in same}) == 1, (shape, g)
        shared += len({o.classes for o in same}) > 1
    assert shared > 0  # some shape is read by outers of other classes


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_shared_memo_reads_what_each_outer_reads_alone(case):
    inst, outers = _outers(case)
    shared, by_classes = {}, {}  # memos keyed by the ring's shape and by the classes' shapes
    net = NetEfficiency()
    for o in outers:
        got = least_sync_s(inst, o, 0, shared)
        assert got == least_sync_s(inst, o, 0, {})
        # the floors per (class, group) keyed by the classes' shapes (no ring given)
        for co, c in zip(class_outers(inst.job, o), o.classes):
            for g in set(c.stage_groups):
                alone = plan_sync.layer_sync_floors(inst, o, co, 0, g, {}, net)
                plan_sync.layer_sync_floors(inst, o, co, 0, g, by_classes, net)
                assert plan_sync.layer_sync_floors(inst, o, co, 0, g, shared, net, plan_sync.ring_shape(o)) == alone
    # some entry was read by outers of other classes: fewer entries than keyed by the classes
    def entries(memo):
        return sum(1 for key in memo if key[0] == "plan sync")
    assert entries(shared) < entries(by_classes)
