"""cost/fabric.py: switch tiers and oversubscribed uplinks, priced where a group's link is
decided (cost/comm.group_link, cost/moe.ep_links). Every expected value is derived by hand in
the comment above it from the module docstring's share `NIC x min(1, d / R)` (d: the group's
nodes inside one leaf, R: the ratio of the tiers it leaves) and never by calling the function
under test twice."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from oracles.cost import quantile_factor
from paraplan import instances
from paraplan.cost import comm, moe
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import InstanceError
from paraplan.cost.fabric import FabricTier
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Link, NodeGroup

EXACT = dict(rel=1e-12)
IDEAL = NetEfficiency(intra_node=1.0, inter_node=1.0, overlap_slowdown=0.0, call_latency_s=0.0)
NVLINK = Link(bw_bytes_per_s=300e9, latency_s=5e-6)  # DGX A100: 600 GB/s both directions / 2
NIC = Link(bw_bytes_per_s=25e9, latency_s=10e-6)  # one 200 Gbit/s HDR adapter per GPU
SMALL_GPT = Path(instances.__file__).parent / "small-gpt-16xA100.yaml"


def dgx_nodes(nodes: int, *tiers: FabricTier) -> NodeGroup:
    return NodeGroup(gpu=load_catalogue()["A100-SXM4-80GB"], nodes=nodes, gpus_per_node=8,
                     intra_node=NVLINK, inter_node=NIC, tiers=tiers)


def test_dp_ring_inside_one_leaf_is_unchanged():
    # tp=8, dp=2: ranks 0 and 8, nodes 0 and 1, both under the first 2-node leaf (16 GPUs):
    # the ring never reaches the uplinks, so the link is the non-blocking cluster's, exactly.
    flat = comm.group_link(dgx_nodes(4), size=2, stride=8)
    assert comm.group_link(dgx_nodes(4, FabricTier(nodes=2, oversubscription=2.0)), 2, 8) == flat
    assert flat[0].bw_bytes_per_s == 25e9 and flat[1]


def test_dp_ring_one_node_per_leaf_at_2_to_1():
    # tp=8, dp=4 over 4 nodes, one node per leaf (a switch per server), 2:1 uplinks. One member
    # per node, so one NIC ring; the leaf holds d = 1 of its nodes: each crossing flow gets
    # 25e9 * min(1, 1/2) = 12.5e9 bytes/s, and every ring step climbs one tier: 10 + 1 us.
    cl = dgx_nodes(4, FabricTier(nodes=1, oversubscription=2.0))
    link, inter = comm.group_link(cl, size=4, stride=8)
    assert inter and link.bw_bytes_per_s == 12.5e9 and link.latency_s == pytest.approx(11e-6)
    # a 100 MB gradient all-reduce, ring: 2*3 steps of 11 us + 2*3/4 * 1e8 / 12.5e9 = 12 ms;
    # tree: depth 2 hops of 10 us + 2 levels crossing a leaf (ceil(log2 4) - floor(log2 1))
    # of 1 us = 22 us a pass, and 2 * 1e8 / 12.5e9 = 16 ms: the ring, 12.066 ms. Non-blocking,
    # the same ring is 6 * 10 us + 6 ms = 6.06 ms: the uplinks double the bandwidth term.
    assert comm.all_reduce_time_s(1e8, 4, link, inter, IDEAL) == pytest.approx(
        6 * 11e-6 + 0.012, **EXACT)
    flat, _ = comm.group_link(dgx_nodes(4), size=4, stride=8)
    assert comm.all_reduce_time_s(1e8, 4, flat, True, IDEAL) == pytest.approx(
        6 * 10e-6 + 0.006, **EXACT)


def test_rank_ordered_ring_over_two_node_leaves_keeps_its_bandwidth_at_2_to_1():
    # the same ring with 2 nodes per leaf: it enters and leaves each leaf once, so the uplinks
    # carry 1 of the 2 nodes' flows: 25e9 * min(1, 2/2) = 25e9, only the hop is 1 us longer
    link, _ = comm.group_link(dgx_nodes(4, FabricTier(nodes=2, oversubscription=2.0)), 4, 8)
    assert link.bw_bytes_per_s == 25e9 and link.latency_s == pytest.approx(11e-6)


def test_fsdp_over_whole_nodes_at_8_to_1():
    # dp=32, stride 1: 8 members per node run 8 NIC rings (200e9 bytes/s non-blocking); a
    # 2-node leaf holds d = 16 / 8 = 2 of the group's nodes: 200e9 * min(1, 2/8) = 50e9
    link, _ = comm.group_link(dgx_nodes(4, FabricTier(nodes=2, oversubscription=8.0)), 32, 1)
    assert link.bw_bytes_per_s == 50e9


def test_pod_tier_multiplies_the_ratios_below_it():
    # tp=8, dp=8 over 8 nodes; non-blocking 2-node leaves, 4-node pods with 7:1 uplinks (as
    # Llama 3's RoCE fabric between pods). Leaving a leaf: d = 2, R = 1, no loss; leaving a
    # pod: d = 4, R = 1 * 7: 25e9 * 4/7. Two tiers climbed: 10 + 1 + 1 us a step.
    cl = dgx_nodes(8, FabricTier(nodes=2), FabricTier(nodes=4, oversubscription=7.0))
    link, _ = comm.group_link(cl, size=8, stride=8)
    assert link.bw_bytes_per_s == pytest.approx(25e9 * 4 / 7, **EXACT)
    assert link.latency_s == pytest.approx(12e-6)


def test_tp_inside_a_node_is_never_affected():
    # tp=8 stays on NVLink whatever the fabric above the NIC
    cl = dgx_nodes(4, FabricTier(nodes=1, oversubscription=100.0))
    assert comm.group_link(cl, size=8, stride=1) == (NVLINK, False)


def test_all_to_all_across_leaves():
    # ep=32 over 4 nodes, 2-node leaves at 4:1: of a rank's 24 peers beyond its node, the 16 in
    # the other leaf take c = 16/24 of its NIC bytes, over uplinks of 1/4 NIC: the NIC traffic
    # lasts max(1, 2/3 * 4) = 8/3 as long, i.e. 25e9 * 3/8; one tier climbed: 11 us.
    links = moe.ep_links(dgx_nodes(4, FabricTier(nodes=2, oversubscription=4.0)), 32, 1)
    assert links.per_domain == 8
    assert links.inter.bw_bytes_per_s == pytest.approx(25e9 * 3 / 8, **EXACT)
    assert links.inter.latency_s == pytest.approx(11e-6)
    # ep=16 fits in one 2-node leaf: the NIC as it is
    assert moe.ep_links(dgx_nodes(4, FabricTier(nodes=2, oversubscription=4.0)), 16, 1).inter == NIC


def _small_gpt(tmp_path: Path, **cluster) -> Path:
    d = yaml.safe_load(SMALL_GPT.read_text())
    d["cluster"] = {**d["cluster"], "nodes": 4, **cluster}
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


@pytest.fixture(scope="module")
def small_gpt_8_to_1(tmp_path_factory):
    """(flat, over, exhaustive(over).plan): small-gpt on 4 DGX A100 nodes, non-blocking and with
    2-node leaves at 8:1, and the oversubscribed cluster's exhaustive optimum, which the two
    tests below read: listed once per test process (issue 32). Read only."""
    from paraplan.solver.exhaustive import exhaustive
    flat = load_instance(str(_small_gpt(tmp_path_factory.mktemp("flat"))))
    over = load_instance(str(_small_gpt(tmp_path_factory.mktemp("over"), leaf_nodes=2,
                                        leaf_oversubscription=8.0)))
    return flat, over, exhaustive(over).plan


@pytest.mark.parametrize("cluster, field, says", [
    ({"leaf_nodes": 2, "leaf_oversubscription": 0.5}, "cluster.leaf_oversubscription",
     "give a value from 1 to 100"),
    ({"leaf_oversubscription": 2.0}, "cluster.leaf_oversubscription", "add leaf_nodes"),
    ({"leaf_nodes": 2, "pod_nodes": 3}, "cluster.pod_nodes", "give a multiple of 2"),
    ({"tier_latency_us": 2.0}, "cluster.tier_latency_us", "add leaf_nodes"),
])
def test_bad_fabric_keys_are_refused(tmp_path, cluster, field, says):
    path = _small_gpt(tmp_path, **cluster)
    with pytest.raises(InstanceError) as info:
        load_instance(str(path))
    assert info.value.path == str(path) and info.value.field == field
    assert says in info.value.fix


def test_planner_keeps_the_gradient_ring_inside_a_leaf_when_cheaper(small_gpt_8_to_1):
    # small-gpt on 4 DGX A100 nodes. Non-blocking, the optimum is one pipeline stage whose
    # ZeRO-3 gradient group spans all 32 GPUs. With 2-node leaves at 8:1 that group's 8 NIC
    # rings get 200e9 * 2/8 = 50e9 bytes/s (test_fsdp_over_whole_nodes_at_8_to_1), and the
    # optimum becomes a plan whose data-parallel group (one stage's tp*cp*dp consecutive ranks)
    # fits one 16-GPU leaf, the pipeline's hand-off crossing instead. Checked by exhaustive
    # search and by simulating both optima on the oversubscribed cluster.
    from paraplan.solver.exhaustive import exhaustive
    flat, over, p_over = small_gpt_8_to_1
    p_flat = exhaustive(flat).plan

    def dp_span(p):  # GPUs of one stage's data-parallel group (Megatron's rank order)
        return p.tp * p.cp * p.classes[0].replicas

    assert dp_span(p_flat) > 16 >= dp_span(p_over)
    t_flat_on_over = simulate(over, p_flat).iter_time_s
    assert simulate(over, p_over).iter_time_s < t_flat_on_over
    # the non-blocking optimum loses on the oversubscribed fabric what its rings lose there
    assert t_flat_on_over > simulate(flat, p_flat).iter_time_s


def test_a_mixed_clusters_group_states_its_own_tiers(tmp_path):
    # the keys belong to a node group, so a mixed cluster's group reads them as a flat cluster
    # does; its rings are priced by the same cost/comm.group_link (class_coefficients._ring_link)
    d = yaml.safe_load((SMALL_GPT.parent / "mixed" / "tiny-2types.yaml").read_text())
    d["cluster"]["groups"][0].update(nodes=4, leaf_nodes=2, leaf_oversubscription=8.0)
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(d))
    a100, h100 = load_instance(str(path)).cluster.groups
    assert a100.tiers == (FabricTier(nodes=2, oversubscription=8.0),) and h100.tiers == ()
    # dp=32 over the A100 group's 4 nodes: 8 rings of 25e9, 2 nodes per leaf at 8:1: 50e9
    assert comm.group_link(a100, 32, 1)[0].bw_bytes_per_s == 50e9


def test_written_instance_keeps_its_tiers(tmp_path):
    # the instance writer (export, part files) writes the tiers back as the reader reads them
    from paraplan.cost.readers.instance_writer import instance_to_mapping
    inst = load_instance(str(_small_gpt(tmp_path, leaf_nodes=2, leaf_oversubscription=8.0,
                                        pod_nodes=4, pod_oversubscription=2.0)))
    path = tmp_path / "again.yaml"
    path.write_text(yaml.safe_dump(instance_to_mapping(inst)))
    assert load_instance(str(path)).cluster == inst.cluster
    assert inst.cluster.one_group.tiers == (FabricTier(nodes=2, oversubscription=8.0),
                                            FabricTier(nodes=4, oversubscription=2.0))


def test_groups_straddling_a_leaf_edge():
    # tp=8, dp=3 on 6 nodes: each stage's gradient rings span 3 nodes, and 4-node leaves hold
    # 1 1/3 of them, so stage 1 (nodes 3-5) straddles the edge at node 4. A leaf holds
    # 32 / 8 = 4 members' worth of rings, but different groups leave by its two edges: flows
    # 2 * 8 against 32 / R NICs. At 2:1: 25e9 * min(1, 4 / (2 * 2)) = 25e9, no loss; at 4:1:
    # 25e9 * 4 / 8 = 12.5e9. Without straddling (3-node leaves tile the spans): inside.
    assert comm.group_link(dgx_nodes(6, FabricTier(nodes=4, oversubscription=2.0)), 3, 8)[0] \
        .bw_bytes_per_s == 25e9
    assert comm.group_link(dgx_nodes(6, FabricTier(nodes=4, oversubscription=4.0)), 3, 8)[0] \
        .bw_bytes_per_s == 12.5e9
    flat = comm.group_link(dgx_nodes(6), 3, 8)
    assert comm.group_link(dgx_nodes(6, FabricTier(nodes=3, oversubscription=4.0)), 3, 8) == flat


def test_an_oversubscribed_fabric_is_one_feature_farther_from_the_published_runs(small_gpt_8_to_1):
    # No published row states an oversubscribed fabric (every bundled row: Features.oversubscribed
    # False), so a plan under one is one distance level farther from them than the same plan on a
    # non-blocking fabric (cost/trust._context_uses), up to the last level. Its p90 factor is
    # therefore the published quantile factor of that level (read here from the Features alone,
    # not through the planner), and the objective the planner minimises, the band `plan` prints
    # and that level agree.
    from paraplan.cost import trust
    from paraplan.cost.objective import DEFAULT_OBJECTIVE, parse_objective
    flat, over, plan = small_gpt_8_to_1
    res = trust.published_residuals()
    assert not any(r.features.oversubscribed for r in res)
    fill = trust._fill_counted(over, trust.factor_fill(over.search))
    f_over = trust.Features(family="", framework=over.job.framework.value, gpu=over.cluster.groups[0].gpu.name,
                            num_gpus=over.cluster.num_gpus, zero=plan.zero, cp=min(plan.cp, 2),
                            pp=min(max(len(c.stage_groups) for c in plan.classes), 2), precision=over.job.precision.value, activations="stored",
                            memory_fill=fill, oversubscribed=True)
    f_flat = replace(f_over, oversubscribed=False)
    lo = trust.distance_level(f_flat, res)
    assert trust.distance_level(f_over, res) == min(lo + 1, trust.DISTANCE_LEVELS - 1)
    assert "fabric=oversubscribed" in trust.unvalidated(f_over, res)
    q = parse_objective(DEFAULT_OBJECTIVE)
    assert trust.objective_factor_of(over, plan) == pytest.approx(quantile_factor(f_over, q, res))
    assert trust.objective_factor_of(flat, plan) == pytest.approx(quantile_factor(f_flat, q, res))
    if lo + 1 < trust.DISTANCE_LEVELS:  # the farther level's band is the wider one
        assert trust.objective_factor_of(over, plan) > trust.objective_factor_of(flat, plan)
    # the printed band names the fabric among what is unvalidated (small-gpt: level 1 -> 2 here)
    t = trust.plan_trust(over, plan, simulate(over, plan).iter_time_s)
    assert "fabric=oversubscribed" in t.group
    assert "fabric" not in trust.plan_trust(flat, plan, simulate(flat, plan).iter_time_s).group
