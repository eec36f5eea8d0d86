"""Per-stage coefficients of a plan: one `StageCoefficients` per replica class.

A class's stage s runs on GPUs of group `stage_groups[s]`, so its compute, memory capacity and
tensor-parallel link are that group's (cost/coefficients.py prices a layer per `Site`). Where
a class's GPUs sit inside a group follows Megatron-LM's rank order there: tp fastest, then cp,
then the class's replicas, then its stages on that group, classes one after another (with one
class on one group, the homogeneous placement: coefficients.homogeneous_placement).

Links:
- pipeline hand-off between two stages on one group: the group's NVLink or NIC (comm.pair_link);
  between groups: the group link `between[a][b]` (per GPU, one direction);
- gradient ring of a stage: with one class, every replica's copy of the stage is on the same
  group, so the ring stays there (comm.group_link). With several classes, the replicas holding
  a layer sit on several groups, so each ring crosses them: its bandwidth is the slowest of the
  groups' own rings and the group links between them, its latency the largest;
- every replica synchronises with every other: the ring has `replicas` * cp members in all
  (each context-parallel rank holds the whole stage's weights, as on one group);
- MoE with ep > 1: a stage's expert all-to-all runs among ep of its ranks, etp apart (the
  expert tensor parallel degree, tp by default), on the stage's group (cost/moe.ep_links of
  that group's cluster); the expert gradients' ring spans the replicas * cp * tp / (ep * etp)
  ranks holding the same experts, etp * ep apart, across groups as the gradient ring does. An MoE model's dense prefix is priced as dense layers on each class's
  first stage (coefficients._dense_prefix_costs), which the multi-class formulations keep in its first
  model chunk, as on one group.

With several classes, each replica of class k runs `num_micro_batches` >= its stage count, so
1F1B's in-flight count of stage s is pp_k - s whatever the micro-batch count
(cost/coefficients.in_flight_micro_batches): memory does not depend on how the batch is split
between classes. A lone class's count is fixed by the batch and may be below its stage count,
as on one group: it is priced at that count (min(pp - s, m) in flight).
"""

from __future__ import annotations

import operator
from dataclasses import replace

import numpy as np

from paraplan.cost import comm, moe, schedule
from paraplan.cost.coefficients import Placement, Site, StageCoefficients, build, megatron_layer
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError
from paraplan.cost.flops import BF16_BYTES
from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost.specs import Cluster, ModelSpec, NodeGroup
from paraplan.cost.plan_specs import ClassOuter
from paraplan.cost.specs import Instance, Link, Outer


def class_outer(ho: ClassOuter, k: int, num_micro_batches: int | None = None,
                paired: bool = False) -> Outer:
    """The homogeneous Outer that prices class k, each replica running `num_micro_batches`.

    Before the split is solved a class's count is a decision of the inner problem, not known:
    None then prices the class for every count m >= its stage count at once (1F1B holds
    min(pp - s, m) = pp - s micro-batches on stage s, cost/coefficients.in_flight_micro_batches,
    so no coefficient depends on m), and records m = pp, the smallest count the space allows.
    Such coefficients give a pipeline time only through `replica_time_s(c, m, ...)`; a plan's
    own coefficients (simulate, report) carry its real counts, so that
    `schedule.iteration_time_s` on them is the class's time.

    With interleaving (v > 1) stage s holds min(2 (pp - s - 1) + (v - 1) pp + 1, m v) chunks,
    the uncapped count for every m >= 2 pp: None then records m = 2 pp, exact for every
    m >= 2 pp and an over-estimate of memory at m = pp (a class of several, whose count is a
    decision, runs at least 2 pp, solver/space.py; a lone class is priced at its count).

    `paired` (cost/moe.pairs_unpipelined_micro_batches): the expert all-to-all overlap's
    combined 1F1B holds min(2, m) micro-batches on a pipeline-free class, so None records m = 2
    there, the smallest count the space then allows it (solver/space._count_form)."""
    c = ho.classes[k]
    v = ho.virtual_stages
    least = 2 if paired and v == 1 else 1
    m = max(c.pp if v == 1 else 2 * c.pp, least) if num_micro_batches is None else num_micro_batches
    if m < c.pp and len(ho.classes) > 1:
        raise ValueError(f"class {k} has {c.pp} stages and {m} micro-batches; with several"
                         f" classes 1F1B needs >= {c.pp}")
    key = (_OUTER_MODES(ho), c.pp, c.replicas, m)
    hit = _CLASS_OUTERS.get(key)
    if hit is None:
        if len(_CLASS_OUTERS) >= CLASS_OUTERS_KEPT:
            _CLASS_OUTERS.clear()
        hit = _CLASS_OUTERS[key] = Outer(
            tp=ho.tp, pp=c.pp, dp=c.replicas, cp=ho.cp, micro_batch=ho.micro_batch, num_micro_batches=m,
            virtual_stages=v, sequence_parallel=ho.sequence_parallel, recompute=ho.recompute, zero=ho.zero,
            ep=ho.ep, etp=ho.etp, embedding_in_split=ho.embedding_in_split, loss_in_split=ho.loss_in_split,
            zero_bubble=ho.zero_bubble)
    return hit


# class_outer's Outers by all they read: the modes of the configuration (_OUTER_MODES, read in
# C), the class's stage count and replicas, and its count. Building a frozen Outer (its
# __post_init__ checks) was 1.7% of the 8 x 8 row's CPU (issue 33: 18,173 class_outers calls,
# the classes of 10,304 several-class configurations, whose shapes repeat across stage orders);
# a record is immutable, so one object serves every equal ask
CLASS_OUTERS_KEPT = 65_536
_CLASS_OUTERS: dict[tuple, Outer] = {}
_OUTER_MODES = operator.attrgetter("tp", "cp", "micro_batch", "virtual_stages", "sequence_parallel", "recompute",
                                   "zero", "ep", "etp", "embedding_in_split", "loss_in_split", "zero_bubble")


def class_outers(job, ho: ClassOuter) -> list[Outer]:
    """Each class's Outer as the inner problem prices it (class_outer): a lone class at the
    count the batch gives it (fixed; with interleaving its memory depends on it at m = pp),
    several classes, whose counts are decisions, at None, paired where the expert all-to-all
    overlap runs combined 1F1B on their pipeline-free classes
    (moe.pairs_unpipelined_micro_batches)."""
    K = len(ho.classes)
    if K == 1:
        return [class_outer(ho, 0, job.global_batch // ho.micro_batch // ho.classes[0].replicas)]
    paired = moe.pairs_unpipelined_micro_batches(job, ho.ep)
    return [class_outer(ho, k, None, paired) for k in range(K)]


# _ring_link of several classes by the cluster's identity (held in the entry, so that its id is
# not reused while it lives) and what the ring reads of the configuration: their ring is one for
# all their groups, and each class's placement and each group's sync asked for it again (8 GPU
# types x 8 nodes: 27,346 calls for 8,352 rings; issue 33)
_RINGS = IdentityCache(65536)


def _ring_link(hc: Cluster, ho: ClassOuter, stage_group: int, ep: int = 1,
               etp: int | None = None) -> tuple[Link, bool]:
    """_ring_of, kept in _RINGS for several classes (a lone class's reads one group link)."""
    if len(ho.classes) == 1:
        return _ring_of(hc, ho, stage_group, ep, etp)
    key = (id(hc), ho.classes, ho.tp, ho.group_tp, ho.cp, ep, etp)
    return _RINGS.read(key, hc, _ring_of, hc, ho, stage_group, ep, etp)


def _ring_of(hc: Cluster, ho: ClassOuter, stage_group: int, ep: int = 1,
             etp: int | None = None) -> tuple[Link, bool]:
    """The gradient ring's link; with `ep` > 1 or an expert tensor-parallel degree `etp` the
    expert-data-parallel ring's: the ranks holding the same experts, tp / (ep * etp) of the
    ring's members per member, etp * ep apart (as on one group,
    coefficients.homogeneous_placement; cost/moe.edp_ranks)."""
    def degrees(g: int) -> tuple[int, int]:  # (tp, etp) of the stages on group g
        return ho.tp_of(g), ho.tp_of(g) if etp is None else etp
    G = len(hc.groups)
    members, span, sharing = [0] * G, [0] * G, [0] * G
    for c in ho.classes:
        for g in set(c.stage_groups):
            tg, te = degrees(g)
            members[g] += c.replicas * ho.cp * tg // (ep * te)
            span[g] += c.replicas * ho.cp * tg * c.stage_groups.count(g)
            sharing[g] += 1
    if len(ho.classes) == 1:
        cl = hc.groups[stage_group]
        tg, te = degrees(stage_group)
        return comm.group_link(cl, ho.classes[0].replicas * ho.cp * tg // (ep * te), te * ep)
    used = [g for g in range(G) if members[g]]
    links = [_spread_link(hc.groups[g], members[g], span[g], degrees(g)[1] * ep)
             if sharing[g] > 1 else comm.group_link(hc.groups[g], members[g], degrees(g)[1] * ep)
             for g in used]
    links += [(hc.between[a][b], True) for a in used for b in used if a != b]
    bw = min(link.bw_bytes_per_s for link, _ in links)
    latency = max(link.latency_s for link, _ in links)
    return Link(bw_bytes_per_s=bw, latency_s=latency), len(used) > 1 or any(i for _, i in links)


def _spread_link(cluster, members: int, span: int, stride: int) -> tuple[Link, bool]:
    """The ring part on a group that hosts several classes: one stage of each, whose GPUs lie in
    that class's block (class_placement lays the classes' blocks one after another), so its
    `members` are spread over the `span` GPUs of every class's stages on the group, not adjacent.
    Inside one NVLink domain iff the whole span is; else spread evenly over the span (which
    stage of a class holds a layer depends on the split, not known here)."""
    if span <= cluster.domain_gpus:
        return cluster.intra_node, False
    return comm.group_link(cluster, members, max(stride, -(-span // members)))


def class_placement(hc: Cluster, ho: ClassOuter, k: int) -> Placement:
    c = ho.classes[k]
    unit = [ho.tp_of(g) * ho.cp for g in range(len(hc.groups))]  # GPUs of one replica's stage
    # first GPU of this class inside each group: after the classes listed before it
    base = [0] * len(hc.groups)
    for earlier in ho.classes[:k]:
        for g in earlier.stage_groups:
            base[g] += earlier.replicas * unit[g]
    local = []  # (group, first rank of the stage inside the group)
    seen = [0] * len(hc.groups)
    for g in c.stage_groups:
        local.append((g, base[g] + seen[g] * c.replicas * unit[g]))
        seen[g] += 1

    memo: dict[tuple[int, int, int], tuple[Link, bool]] = {}

    def hand_off(s: int, z: int) -> tuple[Link, bool]:
        (ga, ra), (gz, rz) = local[s], local[z]
        if ga != gz:
            return hc.between[ga][gz], True
        gpn = hc.groups[ga].domain_gpus
        key = (ga, ra % gpn, rz - ra)  # whether a hand-off crosses a domain repeats with it
        if key not in memo:
            memo[key] = comm.pair_link(hc.groups[ga], ra, c.replicas * unit[ga], rz - ra)
        return memo[key]

    site_of = {g: _placed_site(hc, ho, g) for g in set(c.stage_groups)}
    sites = [site_of[g] for g in c.stage_groups]
    # interleaving: the last stage hands each chunk back to the first (as on one group)
    wrap = ((c.pp - 1, 0),) if ho.virtual_stages > 1 and c.pp > 1 else ()
    pairs = tuple((s, s + 1) for s in range(c.pp - 1)) + wrap
    return Placement(sites=tuple(sites), edge_pairs=pairs, edges=tuple(hand_off(a, z) for a, z in pairs),
                     tie=hand_off(0, c.pp - 1), dp_ranks=ho.replicas * ho.cp)


def least_hand_off_s(m: ModelSpec, group: NodeGroup, tp: int, cp: int, micro_batch: int, sp: bool, v: int,
                     net: NetEfficiency = NetEfficiency()) -> float:
    """The least pipeline hand-off seconds per micro-batch one stage pays in a class of two
    stages or more whose stages all lie on `group` at tp and cp, whatever its replicas and its
    place among the classes (coefficients._pipeline_p2p_s on class_placement): every stage
    touches an edge, each edge costs v (p2p of emb_io / tp + the receivers' tp all-gather, none
    with sp or tp 1). An edge inside one group runs over comm.pair_link's NVLink or NIC: where a
    stage's tp x cp GPUs fill a domain, its hand-offs (offset >= a domain) always cross it, so
    the NIC; else the cheaper of the two. Priced as build prices it, without the slowest rank's
    wait (>= 0): at most each edge of every such class."""
    emb_io = micro_batch * m.seq_len / cp * m.hidden * BF16_BYTES
    links = [(group.inter_node, True)]
    if tp * cp < group.domain_gpus:
        links.append((group.intra_node, False))
    regather = 0.0 if tp == 1 or sp else comm.all_gather_time_s(emb_io, tp, *comm.group_link(group, tp, 1), net)
    return v * (min(comm.p2p_time_s(emb_io / tp, link, inter, net) for link, inter in links) + regather)


def group_site(hc: Cluster, ho: ClassOuter, g: int, rings: bool = True) -> Site:
    """The site of `ho`'s stages on group g: its GPU, its tensor, context and expert parallel
    links, and (`rings`) the gradient rings across the classes (_ring_link). Without `rings`
    the tp link stands in for the data-parallel one: what is left is all that
    coefficients.layer_time_floor_s reads, from the group alone."""
    cl, t = hc.groups[g], ho.tp_of(g)
    tp_link = comm.group_link(cl, t, 1)
    dp_link, edp_link = ring_links(hc, ho, g) if rings else (tp_link, None)
    site = Site(gpu=cl.gpu, tp_link=tp_link, cp_link=comm.group_link(cl, ho.cp, t), dp_link=dp_link,
                tp=t if ho.group_tp else None)
    if ho.ep > 1 or ho.etp is not None:  # the ep group: ep ranks of one stage of this
        # class, etp apart (the group's tp unless folded), on this group (cost/moe.py)
        e = t if ho.etp is None else ho.etp
        site = replace(site, ep_links=moe.ep_links(cl, ho.ep, e), edp_link=edp_link,
                       etp_link=comm.group_link(cl, ho.etp, 1) if ho.etp is not None else None)
    return site


def ring_links(hc: Cluster, ho: ClassOuter, g: int) -> tuple[tuple[Link, bool], tuple[Link, bool] | None]:
    """(dp_link, edp_link) of group_site(hc, ho, g): the gradient ring's link and, with an expert
    layout (ep > 1 or an etp), the expert-data-parallel ring's (else None), without the rest of
    the site (the bound that reads memory reads only these of several classes' shared ring)."""
    edp = _ring_link(hc, ho, g, ho.ep, ho.etp) if ho.ep > 1 or ho.etp is not None else None
    return _ring_link(hc, ho, g), edp


# class_placement's interned group_site by the network's identity (held in the entry) and what
# the site reads of the configuration: the group's tp, cp, whether tp is per group, the expert
# layout and the ring (a lone class's replicas; several classes' shapes at each group's tp:
# _ring_link). The bound before pricing places 2,166 classes on the 8 x 8 row (issue 33), each
# site built and hashed again before
_PLACED_SITES = IdentityCache(65536)


def _placed_site(hc: Cluster, ho: ClassOuter, g: int) -> Site:
    """_intern(g, group_site(hc, ho, g)), kept in _PLACED_SITES."""
    ring = ho.classes[0].replicas if len(ho.classes) == 1 else (ho.classes, ho.tp, ho.group_tp)
    key = (id(hc), g, ho.tp_of(g), ho.cp, bool(ho.group_tp), ho.ep, ho.etp, ring)
    return _PLACED_SITES.read(key, hc, lambda: _intern(g, group_site(hc, ho, g)))


_SITES: dict[tuple[int, Site], Site] = {}


def _intern(group: int, site: Site) -> Site:
    """One object per distinct site of a group, so that the configurations pricing a group's
    stages alike (one class shape in each order of its groups) share it, and with it the layer
    costs cost/coefficients.build keeps per site. Per group: class_layer_fn tells a stage's
    group by its site object, and two groups may have equal sites."""
    if len(_SITES) >= 65536:
        _SITES.clear()
    return _SITES.setdefault((group, site), site)


def class_layer_fn(pl: Placement, stage_groups: tuple[int, ...], by_group: dict):
    """A `layer_fn` for cost/coefficients.build that prices each stage with the layer_fn of
    the group hosting it (`by_group`: group -> layer_fn; a group not in it: Megatron 1-D).
    class_placement gives every group its own Site object, so the stage's site says its group."""
    if not by_group:
        return megatron_layer
    fn_of = {id(pl.sites[s]): by_group.get(g, megatron_layer) for s, g in enumerate(stage_groups)}

    def layer_fn(inst, o, site, net):
        return fn_of[id(site)](inst, o, site, net)
    # build reads it to price a Megatron stage through its shared layer costs
    layer_fn.by_site = fn_of
    return layer_fn


def on_group(layer_fn, group_inst: Instance):
    """`layer_fn` priced with `group_inst` whatever instance build passes."""
    return lambda _inst, o, site, net: layer_fn(group_inst, o, site, net)


def partitions_layer_fn(inst, hc: Cluster, pl: Placement, stage_groups: tuple[int, ...],
                        partitions) -> object:
    """class_layer_fn of a class's recorded partitions ((group, layer plan), ...) on network hc."""
    if not partitions:
        return megatron_layer
    # imported here: the per-operator partition tables serve only a class with partitions, and a
    # plan without them (every plan by default) need not create their records (issue 33, start-up)
    from paraplan.cost.partition import plan_layer_fn
    return class_layer_fn(pl, stage_groups, {
        g: on_group(plan_layer_fn(parts), _group_alone(inst, g, hc)) for g, parts in partitions})


# Instance.group_alone of recent (instance, group, network), one object each: pricing a class's
# partitions asks for it per configuration, and cost/partition.py keeps a group's layer tables
# by the instance's identity (table_for). Each entry holds its instance and network.
_GROUP_ALONE = IdentityCache(1024)


def _group_alone(inst: Instance, g: int, hc: Cluster) -> Instance:
    return _GROUP_ALONE.read_pair((id(inst), g, id(hc)), inst, hc, Instance.group_alone, inst, g, hc)


def class_coefficients(inst, hc: Cluster, ho: ClassOuter, net: NetEfficiency = NetEfficiency(),
                       reserve_bytes: float = 0.0,
                       num_micro_batches: tuple[int, ...] | None = None,
                       partitions: tuple | None = None,
                       placements: tuple[Placement, ...] | None = None) -> list[StageCoefficients]:
    """One StageCoefficients per class of `ho` on network `hc` (`inst`: model and job), each
    class running `num_micro_batches[k]` per replica (None: not yet chosen, see class_outer)
    with the layer plans `partitions[k]` (ReplicaClass.partitions; None: Megatron 1-D), placed
    as `placements[k]` where the caller has class_placement(hc, ho, k) already (None: placed here)."""
    if any(c.stage_dp for c in ho.classes):
        raise ConfigError("an asymmetric pipeline (stage_dp) is priced by cost/asymmetric.py")
    K = len(ho.classes)
    counts = (None,) * K if num_micro_batches is None else num_micro_batches
    parts = ((),) * K if partitions is None else partitions
    out = []
    for k in range(K):
        pl = class_placement(hc, ho, k) if placements is None else placements[k]
        out.append(build(inst, class_outer(ho, k, counts[k]), net, reserve_bytes, placement=pl,
                         layer_fn=partitions_layer_fn(inst, hc, pl, ho.classes[k].stage_groups, parts[k])))
    return out


def replica_time_s(c: StageCoefficients, m: int, n: np.ndarray, r: np.ndarray, v: int = 1) -> float:
    """One replica's pipeline time: 1F1B (interleaved with v > 1) over its stages, m micro-batches."""
    return float(schedule.pipeline_time_s(schedule.stage_times_s(c, n, r), m, v,
                                          schedule.drain_savings_s(c, np.asarray(n, float))))


def iteration_time_s(coeffs: list[StageCoefficients], m: list[int], n: list[np.ndarray],
                     r: list[np.ndarray], v: int = 1) -> float:
    """Slowest replica's pipeline plus the slowest stage's post-backward sync and step."""
    return (max(replica_time_s(c, mk, nk, rk, v) for c, mk, nk, rk in zip(coeffs, m, n, r))
            + max(float(schedule.sync_times_s(c, nk).max()) for c, nk in zip(coeffs, n)))
