"""A bound before pricing that holds for every order of a stage-wise pipeline's middle groups,
read before those orders are listed.

solver/search.py lists a stage-wise partial layout (one class of dp replicas through the
groups `used`, c_g stages on group g, each group's stages consecutive) one stage order at a
time, and each listed configuration that its bound before pricing (unpriced.py) leaves below
the search's bar is settled by the bound that reads memory (unpriced_memory.py), about 1 ms
apiece. On 8 GPU types x 8 nodes (issue 33) two layouts through 7 groups (3,720 stage orders
x 4 configurations each, keyed 2.101 s and 2.111 s against a 2.208 s bar) were settled one by
one so: 89% of that bound's work, 70.6 s of a 120.5 s profiled run. What settles them is the
joint reading of the pipeline (fill_drain.pipeline_sync_bounds_s) with each stage's pipeline
hand-offs; memory does not (with every cap relaxed the bounds are equal to 2e-16).

Here, per configuration o whose class runs through k >= 3 groups, first group f and last l, a
bound B(o) of every configuration o' that differs from o only in the order of the groups
between f and l (the (k - 2)! orders of one (stage counts, first, last) at one micro-batch
size and mode). unpriced_memory's arrays of o, per scenario and stage s on group g_s:
    t_s, u_s, g_s  the layer floor, the recompute replay, the per-layer sync: read of group
                   g_s alone (its site, tp, the layer's fields), the same in every order
    d_s            the group's stage-sync floor plus placed_floor_terms' d: the end stages'
                   embedding sync and step (on f's and l's sites), the tied copy's
                   all-reduce (f's and l's tp and the link between them), FSDP's root units
                   in the fill (a sum over every stage: the end stages' on f and l, each
                   middle stage's on its own group, a multiset fixed by the layout)
    a_s            the floors' stage terms (the output layer on l), and placed_floor_terms'
                   a: the embedding on f's site, ZeRO-3's root units (per stage, its group's
                   site, the ends' parameters on f and l), times the slowest rank's factor
                   (1 + slow), and each stage's pipeline hand-offs
Every term but the hand-offs is thus fixed by the stage's group and whether it is the first
or last stage, and the stages of group g are its c_g consecutive ones in any order: the
hand-offs between two stages of one group run between the same ranks
(class_coefficients.class_placement numbers a group's stages in their order, so the j-th
hand-off inside group g is between its j-th and (j+1)-th stages in every order), and the
interleaved pipeline's wrap-around hand-off runs between l's last stage and f's first. What
the order changes is only the hand-off at each boundary between two groups' runs:
e(h, n) = v (p2p + regather) over the link between groups h and n (coefficients.hand_off_s,
_pipeline_p2p_s), charged to the last stage of h's run and the first of n's. In any order the
run of a group h != f is preceded by some group p in used \\ {h, l} (l's run is the last;
with k >= 3 not f where h = l) and the run of h != l followed by some n in used \\ {h, f}
(not l where h = f). So with
    in(h)  = min over those p of e(p, h),    out(h) = min over those n of e(h, n)
the arrays of o with each boundary hand-off replaced by in() on the receiving run's first
stage and out() on the sending run's last stage are, stage for stage, at most those of every
o' of the same first and last group, once each o' stage is matched to the o stage of the same
group and place in its run. fill_drain.pipeline_sync_bounds_s reads its stages as a multiset
(_as_kinds: kinds of equal terms) and grows with every a_s, t_s, d_s, g_s and falls as a
stage's cap grows (it is the least over splits within the caps of a form that grows with each
term). So, with every cap relaxed to L (memory only removes splits) and the recompute replay
as the memory bound reads it (t_s + u_s where u_s < 0, else t_s),
    B(o) = agg over scenarios of pipeline_sync_bounds_s(those arrays) x (1 - PRICED_SAFETY)
           x the quantile factor (trust.objective_factors: the GPU types used, ZeRO, cp and
           the depth, the same in every order) x (1 - ORDER_FREE_SAFETY)
is at most the joint reading (_lone_joint_s) of every o', hence at most the bound that reads
memory of every o' (the larger of its terms apart and that joint reading): min over the
orders of unpriced_memory's bound >= B(o). That holds where the joint reading is exact (a
pipeline of at most fill_drain.WINDOW_LEVELS levels per kind of stage, as in the tests);
past its windows the joint reading is a bound of its arrays' least, and B is still at most
the least over the splits of the arrays above, so at most every o''s least and its value:
what the search prunes by.

The stages' least hand-offs need not come from one order: their sum is at most the least
total over the orders, H = 2 min over paths f -> (the middle groups in some order) -> l of
the sum of e over the path's steps (each hand-off is charged to both its stages; Held and
Karp's programme over the subsets of the middle groups, _least_path_s). Each o' stage's
terms are at least the arrays' above and their sum is at least that sum plus
X = H - sum_s (the stages' least hand-offs) >= 0 (times 1 + slow). The form the joint reading
minimises, ((v m - 1) max_s T_s + sum_s T_s) / v + max_s (d_s + n_s g_s), grows by at least
X / v, split for split, when the stage terms grow by amounts summing to X (the slowest stage
does not fall, the sum grows by X); so the least over splits does, and the joint reading of
the arrays plus X / v is still at most every o''s least (pipeline_sync_bounds_s is a bound
of that least: X / v added to a bound of the arrays' least bounds their least plus X / v).
B adds it. ORDER_FREE_SAFETY covers the float rounding of the replaced terms and of sums in
another order (a few ulps; the search prunes only past the bar's tie band, planner.REL_TOL =
1e-9).

A configuration the search would list from such a layout with B(o) past the bar's tie band
cannot beat the bar with any key (Winners.beats), and the bar only falls: it is counted pruned
by bound and never listed (search._Search._list_layouts), as a block past its syncs' bound is;
one listed is pruned by B when it comes up to be priced (search's sync_bound) if the bar has
fallen below B since. On the 8 types x 8 nodes row, 41,856 of the 56,640 configurations B was
read for were left unlisted, and the bound that reads memory read 3,437 configurations, not
40,176 (issue 33).
Read where the bound that reads memory is (unpriced_memory.applies: dense models, no
zero-bubble schedule) and not with per-operator partitions (their layer plans sync otherwise).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from paraplan.cost.class_coefficients import class_outers, class_placement
from paraplan.cost.coefficients import hand_off_s
from paraplan.cost.plan_specs import ClassShape
from paraplan.cost.trust import objective_factors
from paraplan.solver.bounds.fill_drain import PRICED_SAFETY, pipeline_sync_bounds_s
from paraplan.solver.bounds.unpriced_memory import aggregate_s, applies, lone_class_rows

# relative margin B(o) is lowered by: its terms are sums in another order than each order's own
# (module docstring), far below the tie tolerance planner.REL_TOL (1e-9)
ORDER_FREE_SAFETY = 1e-12
# the fewest groups a pipeline runs through for the search to read B before listing its orders:
# B stands for the (k - 2)! orders of one first and last group, and reading it costs about what
# the bound that reads memory costs per configuration, so it pays only where those are many.
# Measured (issue 33): from 4 groups on, the 4 types x 16 nodes row took 56.5 s of CPU, not
# 10.7 (B read for layouts of 2 orders each); the 8 x 8 row took 26.1-27.3 s from 5 or 6 on
# (its layouts through 6 and 7 groups are what B settles). Tests lower it to three.
ORDER_FREE_GROUPS = 6


def reads(inst, o) -> bool:
    """Whether B (order_free_bounds_s) reads configuration `o`: one class through three groups
    or more, where the bound that reads memory applies."""
    return (applies(inst, o) and len(o.classes) == 1
            and len(set(o.classes[0].stage_groups)) >= 3)


def order_free_bounds_s(inst, outers: list, idx: list[int], agg: str, weights, memo: dict,
                        layer_memo: dict) -> np.ndarray:
    """B of the module docstring of each of `outers` on scenarios `idx` aggregated as `agg`
    with `weights` (search.scenario_weights): at most unpriced_memory's bound of every
    configuration that differs from it only in the order of its middle groups; 0 where B is
    not read (reads). `memo`, `layer_memo`: the floors' and the layers' (unpriced_memory's)."""
    out = np.zeros(len(outers))
    rows: dict[tuple[int, int], list] = {}  # (pp, layers) -> [(outer, scenario, arrays, v, m, extra)]
    for j, o in enumerate(outers):
        if not reads(inst, o):
            continue
        co, per = lone_class_rows(inst, o, idx, memo, layer_memo)
        for si, (i, (layers, arrays)) in enumerate(zip(idx, per)):
            slack, extra = _hand_off_slack(inst, i, o, layer_memo)
            rows.setdefault((co.pp, layers), []).append((j, si, dict(arrays, stage_time_s=arrays["stage_time_s"] + slack),
                                                         co.virtual_stages, co.num_micro_batches, extra))
    b = np.zeros((len(outers), len(idx)))
    for (_, layers), items in rows.items():
        def col(f):
            return np.stack([x[2][f] for x in items])
        a = col("stage_time_s")
        v = np.array([x[3] for x in items], float)
        got = pipeline_sync_bounds_s(a, col("layer_time_s"), col("recompute_time_s"), np.full(a.shape, float(layers)),
                                     col("stage_sync_time_s"), col("layer_sync_time_s"), v,
                                     np.array([x[4] for x in items], float), layers)
        # the hand-offs' least total over the orders beyond the stages' least, read in the sum term
        b[[x[0] for x in items], [x[1] for x in items]] = (got + np.array([x[5] for x in items]) / v) * (1 - PRICED_SAFETY)
    used = [j for j, o in enumerate(outers) if reads(inst, o)]
    if used:
        factor = objective_factors(inst, [outers[j] for j in used])
        out[used] = aggregate_s(b[used], agg, weights) * factor * (1 - ORDER_FREE_SAFETY)
    return out


def _hand_off_slack(inst, i: int, o, layer_memo: dict) -> tuple[np.ndarray, float]:
    """(per stage of o's class on scenario i, what replacing each hand-off between two groups'
    runs by its least over the orders, in() and out() of the module docstring, adds to the
    stage terms (<= 0); what the least total of those hand-offs over the orders, H, adds to
    their sum (>= 0)), both times the slowest rank's factor as placed_floor_terms scales them."""
    groups = o.classes[0].stage_groups
    f, l, used = groups[0], groups[-1], set(groups)
    edges = {(h, n): _edge_s(inst, i, o, h, n, layer_memo) for h in used for n in used if h != n}
    slow = next(iter(edges.values()))[1]
    e = {hn: x[0] for hn, x in edges.items()}
    out = np.zeros(len(groups))
    for s in range(len(groups) - 1):
        h, n = groups[s], groups[s + 1]
        if h != n:
            out[s] += min(e[h, x] for x in used - {h, f} - ({l} if h == f else set())) - e[h, n]
            out[s + 1] += min(e[x, n] for x in used - {n, l} - ({f} if n == l else set())) - e[h, n]
    least = _least_path_s(e, f, l, sorted(used - {f, l}))
    if least is None:  # too many groups for the path's least: the stages' least alone
        return out * (1 + slow), 0.0
    charged = sum(out) + sum(2 * e[h, n] for h, n in zip(groups, groups[1:]) if h != n)  # the stages' least, summed
    return out * (1 + slow), max(0.0, 2 * least - charged) * (1 + slow)


# the most middle groups (k - 2) whose least hand-off path _least_path_s reads: 2^k k^2 steps
PATH_MIDDLE_GROUPS = 10


def _least_path_s(e: dict, f: int, l: int, middle: list[int]) -> float | None:
    """The least sum of e(h, n) over the hand-offs between groups' runs of a pipeline from group
    f through every group of `middle` (in some order) to group l: H of the module docstring
    (Held and Karp's dynamic programme over the subsets of `middle`); None past
    PATH_MIDDLE_GROUPS groups."""
    k = len(middle)
    if k > PATH_MIDDLE_GROUPS:
        return None
    if not k:
        return e[f, l]
    best = {(1 << a, a): e[f, middle[a]] for a in range(k)}  # (groups passed, the last) -> least sum
    for mask in range(1, 1 << k):
        for a in range(k):
            cur = best.get((mask, a))
            if cur is None:
                continue
            for z in range(k):
                if not mask >> z & 1:
                    key = (mask | 1 << z, z)
                    best[key] = min(best.get(key, math.inf), cur + e[middle[a], middle[z]])
    return min(best[(1 << k) - 1, a] + e[middle[a], l] for a in range(k))


def _edge_s(inst, i: int, o, h: int, n: int, layer_memo: dict) -> tuple[float, float]:
    """(e(h, n), slow): the hand-off between a stage on group h and the next on group n of o's
    class on scenario i, as build charges it to each of the two, and the slowest rank's
    fraction: coefficients.hand_off_s of o's class through h and n alone (a two-stage
    pipeline's one edge), kept in `layer_memo` by what it reads."""
    key = ("order free edge", i, h, n, o.tp_of(h), o.tp_of(n), o.cp, o.micro_batch, o.sequence_parallel,
           o.classes[0].replicas, bool(o.group_tp), o.virtual_stages)
    hit = layer_memo.get(key)
    if hit is None:
        two = dataclasses.replace(o, tp=o.tp_of(h), virtual_stages=1, embedding_in_split=False, loss_in_split=False,
                                  classes=(ClassShape(replicas=o.classes[0].replicas, stage_groups=(h, n)),))
        hit = layer_memo[key] = hand_off_s(inst, class_outers(inst.job, two)[0],
                                           class_placement(inst.scenarios[i].cluster, two, 0), o.virtual_stages)
    return hit


@dataclasses.dataclass
class OrderFree:
    """B of the configurations of the stage-wise blocks a search lists, per block's
    representative key (layouts.representative_key: stage counts, last group, micro-batch
    size) and first group, read once for the first block met of each: {spec: B} of its
    OuterBlock.specs(), which every block of that key and first group lists alike (each stands
    for its other orders)."""

    inst: object
    scenarios: tuple  # search.scenario_weights' (idx, agg, weights)
    memo: dict
    layer_memo: dict
    on: bool = True  # off with per-operator partitions (the module docstring)
    kept: dict = dataclasses.field(default_factory=dict)

    def of_block(self, key: tuple, blk, bar_s: float) -> dict:
        """{spec: B} of block `blk` (representative key `key`); {} where B is not read, or
        where the search has no bar `bar_s` yet for B to pass."""
        if not self._reads(blk, bar_s):
            return {}
        k = (key, blk.classes[0].stage_groups[0])
        if k not in self.kept:
            self.read([(key, blk)], bar_s)
        return self.kept[k]

    def read(self, blocks: list, bar_s: float) -> None:
        """B of every (representative key, block) of `blocks` that of_block would read and has
        not kept yet, read in one order_free_bounds_s call, not one per block: a dived tp
        choice lists some 30 blocks through 7 groups at once (8 x 8 row: 278 calls of 4
        configurations each, 8 ms apiece, mostly numpy's per-call work). Each configuration's
        B reads its own rows; read with others, its pipeline's stage kinds may be padded with
        absent ones (fill_drain._as_kinds), whose zeros can move a sum's rounding by an ulp,
        far inside ORDER_FREE_SAFETY."""
        todo: dict[tuple, list] = {}
        for key, blk in blocks:
            k = (key, blk.classes[0].stage_groups[0])
            if k not in self.kept and k not in todo and self._reads(blk, bar_s):
                todo[k] = list(blk.specs()), blk
        if not todo:
            return
        outers = [blk.outer(*x) for specs, blk in todo.values() for x in specs]
        got = order_free_bounds_s(self.inst, outers, *self.scenarios, self.memo, self.layer_memo).tolist()
        at = 0
        for k, (specs, _) in todo.items():
            self.kept[k] = {x: lb for x, lb in zip(specs, got[at:at + len(specs)]) if lb > 0 and math.isfinite(lb)}
            at += len(specs)

    def _reads(self, blk, bar_s: float) -> bool:
        """Whether B is read for block `blk` against bar `bar_s` (of_block)."""
        groups = blk.classes[0].stage_groups
        return (self.on and not math.isinf(bar_s) and len(groups) >= ORDER_FREE_GROUPS
                and len(set(groups)) >= ORDER_FREE_GROUPS)
