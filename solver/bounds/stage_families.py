"""A lower bound of every stage-wise partial layout on a set of groups, at one cp and dp, before
its tensor-parallel degree per group is chosen (issue 33: with search.tp_per_group the tp
choices of a pipeline through k groups number about 4^k, so a space listed whole grows as 4^types).

A *stage family* is (the groups used, cp, dp): the stage-wise partial layouts
(solver/space.stage_partial) of every tp per group that admits that cp and dp. The search keeps
each family on its heap, keyed by the bound below, and sets up only the tp choices whose bound,
with their own tp fixed, can still beat the incumbent, each then bounded as any partial layout
(layouts.partial_bounds_s) and listed only when it comes up.

Per scenario and micro-batch size b, let f_g(t) be the least layer floor of a stage on group g at
tp t, cp and b over the sequence-parallel flags that tp admits and the recompute modes
(unpriced.stage_floor_terms, the floor layouts.stage_bound_rows takes the least of, over a
superset of the flags), and r_g(t) = dp c*_g / f_g(t), c*_g = min(floor(N_g / (t cp dp)), pp's
cap) the most stages group g holds (N_g / (t cp dp), N_g the group's GPUs, without
search.idle_gpus, where it divides), so that a layout that idles GPUs is bounded by those it
can use (GPT-3 175B on 1,024 A100 with idle GPUs: 111 of the 3,836 partial layouts on its one
group are set up). A block of the
family (dp replicas, c_g stages on g, c_g <= c*_g; fewer with search.idle_gpus) is
bounded in stage_bound_rows by, per v,
    Z_v = (m - 1/v) A + S / v,   m = (global batch / b) / dp >= 1
(batched.relaxed_s of one class, its second bound). There A = min over integer splits of
max_s (a_s + n_s t_s) with a_s >= 0, t_s >= f_g(t_g) for a stage s on g; as max_s n_s t_s <= A
gives n_s <= A / t_s and sum_s n_s = L,
    A >= A0 = L / sum_s (1 / t_s) >= L dp / sum_g r_g(t_g),
and as every stage holds a layer (n_s >= 1), A >= max_s t_s >= the largest f_g(t_g) of the
groups used (a pipeline through a slow group waits on its stage however few layers it holds).
At v = 1 the bound reads S = sum_s (a_s + n_s t_s) >= sum_g c_g f_g(t_g) + (L - pp) t_min
(each stage one layer at least, the rest at the least floor; with search.idle_gpus one stage
per group): a deep pipeline of few micro-batches (8 types: 26 stages, 8 micro-batches) pays
each stage's floor. This is more than the bound before pricing's S (sum_s a_s + L t_min), so a
family's or choice's key may exceed the priced key of a configuration it holds, but never that
configuration's value; the key is lowered by FAMILY_MARGIN (1e-6, far above the tie tolerance
planner.REL_TOL, 1e-9), so a family holding a plan that ties the incumbent is still opened,
and the tie rule reads that plan's own key as in the full listing. When a family is opened,
the v = 1 term of each tp choice that can still win is raised further to fill_drain.
fill_drain_relaxed_s of its stages (FamilyBounds.fill_drain_choices: the slowest stage and the
sum read together, at most every configuration's pipeline at v = 1), under the same margin.
S = h + L t_min - e (t_max - t_min) - l (t_last - t_min) with h >= 0 and the slot flags e, l in
{0, 1}, both 0 at v = 1 (space._slot_modes_of), so S >= S0 = L t_min - c_v (t_max - t_min) with
c_1 = 0 and c_v = 2 for v > 1 where the job runs the slots (else 0), t_min >= the least f_g(t_g)
and t_max <= the largest over the family's groups. Z_v grows with A (m - 1/v >= 0) and S, so
Z_v >= (m - 1/v) A0 + S0 / v, which for v >= 2 is linear in 1/v on [1/v_max, 1/2]: the least over
the block's v is at least the least of this at v = 1, 2 and v_max (search.virtual_stages' largest,
else the layers plus two). Where a group's tp is not yet chosen, r_g is its largest and f_g its
least / largest over the tp values left (every term above moves the bound down with r_g up and
t_min down, t_max up). Over scenarios the bound is aggregated as the search's objective does
(max, or a weighted sum with weights >= 0: both monotone), times the least quantile factor of
the family's ZeRO stages and depths (the factor reads the GPU types used, ZeRO, cp and the
deepest class: min(pp, 2) = 2 for a class through two groups or more, 1 or 2 on one group:
_depths), and the least over b (every micro-batch size the space may offer, a superset of each
block's). So the bound is at most each block's
bound, so at most each partial layout's (the least of its blocks'), so at most every
configuration's bound before pricing: a family or a tp choice whose bound cannot beat a plan's
value holds no configuration that can, and the search's answer, with its tie rule, is that of
the full listing.

Where the space runs v = 1 only and no idle GPUs (8 types: 2,717 families keyed before the
search, up to 4^8 tp choices each), a family is keyed instead by FamilyBounds.fill_drain_family:
the same fill-and-drain relaxation with each group at any of its tp values (its least floor,
least stage count and largest count / floor), at most every tp choice's fill_drain_choices
bound without listing the choices, under the same margin; the choices are computed only for a
family the search opens.

The gradient sync after the last backward, max_s (d_s + n_s g_s), adds to every
configuration's time, and a tp choice's least syncs per group (FamilyBounds.syncs: build's
per-layer sync g_g and a floor of its stage sync d_g, the least over the flags, modes and ZeRO
stages) bound it: an opened family's choices are raised by it read apart from the pipeline
(apart_choices), and a choice the search pops against a bar by the two read together
(joint_keys: fill_drain.fill_drain_sync_s, the least over integer splits of the pipeline and
its slowest sync), about 2 ms a choice, so only as it comes up. On 8 types x 8 nodes the split
that balances the pipeline piles layers on the fastest groups, whose syncs then lead: the
choice of the row's optimum was keyed 1.98 s without syncs, 2.10 s with them read together,
against its 2.21 s at p90.

Memory raises A further: a stage holding many micro-batches in flight holds few layers unless it
recomputes, and each recomputed layer repeats its forward. stage_recompute.py reads, per tp
choice and b, the least slowest stage A* of any split that fits with the recompute it forces
(each group's stages at their least in-flight counts, every memory term at its least over the
modes and layer plans), once at v = 1 and once with the slots' end-stage relief for v > 1; A
is at least A* too, so A0 is read as max(A0, A*) in each term, in a family of at most
RECOMPUTE_CHOICES tp choices (32 A100 + 32 H100 with
partitions and the three options: 18 of the 63 stage families keyed below the optimum's 11.84 s
at p90, 6 now).

A tp choice or class-layout option that solver/bounds/class_memory.py proves unable to fit
memory in any order, micro-batch size, mode or ZeRO stage is bounded inf: its configurations
are all refused by memory (before or after pricing), so none is a candidate and the tie rule
reads none of them. With per-operator partitions every floor is the layer plans'
(unpriced.stage_floor_terms' layer_plans), and class_memory.py's proof holds for every layer
plan (its module docstring: it reads no stash, and every term it reads is at most each plan's,
solver/bounds/plan_range.py): each bound then holds for every layer-plan combination too.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.plan_specs import ClassOuter, ClassShape
from paraplan.cost.space_rules import cp_problem, split_slots_run
from paraplan.cost.specs import Attention
from paraplan.cost.trust import objective_factor_of
from paraplan.solver.bounds.fill_drain import fill_drain_relaxed_s, fill_drain_sync_s
from paraplan.solver.bounds.unpriced import stage_floor_terms
from paraplan.solver.bounds.unpriced_memory import layer_terms, sync_terms
from paraplan.solver.class_layouts import (_powers_of_two, cp_values, divisors, replica_options, tp_choices,
                                           tp_values)
from paraplan.solver.partition_plans import enabled as partitions_enabled


# the most tp choices of a stage family whose slowest stage with forced recompute is read
# (stage_recompute.py: one pass per choice and micro-batch size, about 0.3 ms each); a family of
# more is bounded without it, a lower bound still (8 types: up to 4^8 choices, opened whole;
# at 64, 4 types' growth row took 1.93-2.02 s of CPU against 1.36-1.48 s without the term, and
# 1.34-1.39 s at 16, which holds two groups at four tp values each: the 32 + 32 rows' families)
RECOMPUTE_CHOICES = 16

# the most of a stage family's opened tp choices whose pipeline and sync joint_keys reads ahead
# in one call with a popped choice's (_joint_rows: numpy's per-call work, not the rows, is what a
# call of a few rows costs)
JOINT_AHEAD = 16


def group_factor(inst, used, zero: int, cp: int, depth: int, memo: dict) -> float:
    """trust.objective_factor_of of a configuration on the groups `used` at ZeRO `zero`, cp and
    deepest class `depth`, as the largest of each group's alone: the factor is the largest
    quantile factor over the GPU types used (trust.objective_factor), each read at the same
    cluster size, so of many subsets of many types each type is read once (8 types: 2,024
    subsets' factors at 70 ms each before)."""
    out = 0.0
    for g in used:
        key = ("group factor", g, zero, min(cp, 2), min(depth, 2))
        if key not in memo:
            memo[key] = objective_factor_of(inst, SimpleNamespace(
                classes=(ClassShape(replicas=1, stage_groups=(g,) * min(depth, 2)),), zero=zero, cp=cp))
        out = max(out, memo[key])
    return out


def _depths(fam) -> tuple[int, ...]:
    """The deepest class's min(pp, 2) over the pipelines of StageFamily `fam`, as the quantile
    factor reads it (group_factor): 2 through two groups or more (a stage per group at least);
    on one group (a family only with search.idle_gpus) one stage or several, so both: which
    factor is the lesser is the published rows' to say (cost/trust.objective_factor reads pp > 1
    as a distance feature), and the key takes the least of the two."""
    return (2,) if len(fam.used) > 1 else (1, 2)


@dataclass(frozen=True)
class StageFamily:
    """The stage-wise partial layouts of dp replicas on the groups `used` at cp, over every tp
    per group in `tps` (per used group, (index in its tp_values, tp) of the values that admit
    this cp and dp); `at`: (family index, subset index) of declared_partials' loops."""

    used: tuple[int, ...]
    cp: int
    dp: int
    tps: tuple[tuple[tuple[int, int], ...], ...]
    at: tuple[int, int]


@dataclass(frozen=True)
class ReplicaFamily:
    """The replica family's layouts on the groups `used` at one tp and cp (every class layout
    of class_layouts.class_shapes); `at`: (family, subset, tp choice, cp) indices of
    declared_partials' loops."""

    used: tuple[int, ...]
    tp: int
    cp: int
    at: tuple[int, int, int, int]


def stage_families(inst, deferred: list) -> list:
    """The families (StageFamily, ReplicaFamily) of the (family index, subset index, family,
    groups) that space.partials_and_families deferred: of the stage family every cp and dp
    some tp per group admits, of the replica family every tp and cp."""
    out = []
    for fi, si, family, used in deferred:
        if family == "replica":
            out += [ReplicaFamily(used, tpg[used[0]], cp, (fi, si, ti, ci))
                    for ti, tpg in enumerate(tp_choices(inst, used, family))
                    for ci, cp in enumerate(cp_values(inst, used, tpg))]
        else:
            out += _stage_families(inst, fi, si, used)
    return out


def _stage_families(inst, fi: int, si: int, used: tuple[int, ...]) -> list[StageFamily]:
    s, m = inst.search, inst.model
    flash = inst.job.attention is Attention.FLASH
    idle = s.idle_gpus
    out = []
    gpus = {g: inst.cluster.groups[g].num_gpus for g in used}
    per = {g: list(enumerate(tp_values(inst, (g,)))) for g in used}
    cps = s.cp if s.cp is not None else _powers_of_two(max(gpus.values()))
    for cp in cps:
        ok = {g: [(i, t) for i, t in per[g]
                  if cp_problem(cp, m, gpus[g] // t, s.max_cp, flash) is None and (idle or gpus[g] % (t * cp) == 0)]
              for g in used}
        if not all(ok.values()):
            continue
        slots = {g: {gpus[g] // (t * cp) for _, t in ok[g]} for g in used}
        most = min(max(x) for x in slots.values())
        dps = range(1, most + 1) if idle else sorted({d for g in used for x in slots[g] for d in divisors(x)})
        for dp in dps:
            tps = tuple(tuple((i, t) for i, t in ok[g]
                              if (dp <= gpus[g] // (t * cp) if idle else (gpus[g] // (t * cp)) % dp == 0))
                        for g in used)
            if all(tps):
                out.append(StageFamily(used, cp, dp, tps, (fi, si)))
    return out


@dataclass
class FamilyBounds:
    """The module's bound of stage families and of their tp choices, on scenarios `idx`
    aggregated as `agg`; `memo`: unpriced.floor_bounds_s's (the floors are shared)."""

    inst: object
    idx: list
    agg: str
    weights: tuple
    memo: dict
    recompute: tuple  # the listing's recompute modes
    floors: dict = field(default_factory=dict)  # (g, tp, cp) -> (mb sizes, scenarios) least floors
    factors: dict = field(default_factory=dict)
    group_tps: dict = field(default_factory=dict)  # g -> tp_values(inst, (g,)), read once (tpg_at)
    # (g, tp, cp, dp, tp per group) -> (g, d) least syncs (mb sizes, scenarios) (syncs); their
    # layers' terms and syncs as unpriced_memory keeps them
    sync_floors: dict = field(default_factory=dict)
    layer_memo: dict = field(default_factory=dict)
    # family -> (grid position, mb index) -> (scenarios,) fill_drain_sync_s (_joint_rows);
    # family -> its opened choices' grid positions, least bound first (choices), and those
    # whose rows were read (or read ahead) already
    joint_memo: dict = field(default_factory=dict)
    opened: dict = field(default_factory=dict)
    read_ahead: dict = field(default_factory=dict)
    # family -> grid position -> what joint_keys reads of the choice before the bar (_fronts:
    # a _Front; _front_syncs: apart, its bound and the sync rows), kept as choices are read ahead
    fronts: dict = field(default_factory=dict)
    front_syncs: dict = field(default_factory=dict)
    roughs: dict = field(default_factory=dict)  # one-group StageFamily -> rough_bound (one_group_rough)

    def __post_init__(self) -> None:
        inst = self.inst
        s, gb, L = inst.search, inst.job.global_batch, inst.model.layers
        mbs = ([b for b in s.micro_batch if gb % b == 0] if s.micro_batch is not None else
               [d for d in divisors(gb) if s.max_micro_batch is None or d <= s.max_micro_batch])
        self.mbs = np.array(mbs, float)
        slots = split_slots_run(inst.job, s)
        self.v_max = max(s.virtual_stages) if s.virtual_stages is not None else L + 2 * slots
        self.slot_c = 2.0 if slots else 0.0
        # with per-operator partitions, the layer plans' floors; class_memory.py's proof holds
        # for every layer plan (its module docstring)
        self.layer_plans = partitions_enabled(inst)
        # imported here: a search without deferred families (no search.idle_gpus) builds none
        # of these, and GPT-3 175B's plan reads stage_families' group_factor only (issue 33)
        from paraplan.solver.bounds.class_memory import ClassMemory
        from paraplan.solver.bounds.stage_recompute import StageRecompute
        self.memory = ClassMemory(inst, int(self.mbs.min()), self.layer_plans) if len(self.mbs) else None
        self.stage_recompute = StageRecompute(self)

    def floor(self, g: int, tp: int, cp: int) -> np.ndarray:
        """(micro-batch sizes, scenarios): f_g(tp) of the module docstring."""
        key = (g, tp, cp)
        got = self.floors.get(key)
        if got is None:
            inst = self.inst
            sps = [sp for sp in inst.search.sequence_parallel
                   if not (sp and (tp == 1 or inst.model.seq_len % (tp * cp)))] or [False]
            got = np.full((len(self.mbs), len(self.idx)), np.inf)
            for bi, b in enumerate(self.mbs.astype(int).tolist()):
                for sp, rc in itertools.product(sps, self.recompute):
                    o = ClassOuter(tp=tp, cp=cp, micro_batch=b, sequence_parallel=sp, recompute=rc,
                                   classes=(ClassShape(replicas=1, stage_groups=(g,)),))
                    for si, i in enumerate(self.idx):
                        floor = stage_floor_terms(inst, i, o, 0, g, self.layer_plans, self.memo)[0]
                        got[bi, si] = min(got[bi, si], floor)
            self.floors[key] = got
        return got

    def syncs(self, g: int, tp: int, cp: int, dp: int, per_group: bool) -> tuple[np.ndarray, np.ndarray]:
        """(g_g, d_g), each (micro-batch sizes, scenarios): the least per-layer and stage
        gradient sync (unpriced_memory.sync_terms: cost/coefficients.sync_floor_s, build's
        per-layer sync and a floor of its stage sync) of a stage on group g at tp, cp, over the
        sequence-parallel flags tp admits, the recompute modes and the ZeRO stages the space
        offers, of a lone class of dp replicas through two groups or more (its ring lies in
        its group: class_coefficients._ring_link reads the group, tp, cp and dp; of the
        pipeline the sync reads whether it has one stage, ZeRO-3's gathers and the reduction's
        overlap, pp > 1 and v = 1 here). `per_group`: whether the choice's tp differs between
        its groups (ClassOuter.group_tp set, as space.shape_blocks sets it)."""
        key = (g, tp, cp, dp, per_group)
        got = self.sync_floors.get(key)
        if got is None:
            inst, net = self.inst, NetEfficiency()
            sps = [sp for sp in inst.search.sequence_parallel
                   if not (sp and (tp == 1 or inst.model.seq_len % (tp * cp)))] or [False]
            gs = np.full((len(self.mbs), len(self.idx)), np.inf)
            ds = np.full((len(self.mbs), len(self.idx)), np.inf)
            # the other group only makes the class a pipeline (its ring and layer read group g)
            other = next(h for h in range(len(inst.cluster.groups)) if h != g)
            for bi, b in enumerate(self.mbs.astype(int).tolist()):
                for sp, rc, z in itertools.product(sps, self.recompute, inst.search.zero):
                    o = ClassOuter(tp=tp, cp=cp, micro_batch=b, sequence_parallel=sp, recompute=rc, zero=z,
                                   group_tp=((g, tp),) if per_group else (),
                                   classes=(ClassShape(replicas=dp, stage_groups=(g, other)),))
                    co = class_outers(inst.job, o)[0]
                    for si, i in enumerate(self.idx):
                        lt = layer_terms(inst, o, co, i, g, self.memo, self.layer_memo, net)[0]
                        gg, dd = sync_terms(inst, o, co, i, g, lt, self.layer_memo, net)
                        gs[bi, si], ds[bi, si] = min(gs[bi, si], gg), min(ds[bi, si], dd)
            got = self.sync_floors[key] = (gs, ds)
        return got

    def factor(self, used: tuple[int, ...], cp: int, depths: tuple[int, ...]) -> float:
        """The least quantile factor over the ZeRO stages and the deepest classes `depths`
        (group_factor: of the groups used, ZeRO, cp and min(deepest pp, 2))."""
        key = (used, cp, depths)
        if key not in self.factors:
            self.factors[key] = min(group_factor(self.inst, used, z, cp, d, self.factors)
                                    for z in self.inst.search.zero for d in depths)
        return self.factors[key]

    def family_bound(self, fam) -> float:
        """The bound of every partial layout of a StageFamily or ReplicaFamily."""
        return self.replica_bound(fam) if isinstance(fam, ReplicaFamily) else self.bound(fam)

    def replica_bound(self, fam: ReplicaFamily) -> float:
        """At most the least bound of the family's class layouts (replica_combos), without
        listing them: replica_combos' z grows with each class layout's bubble sum_k x_k (pp_k -
        1) and falls with its rate sum_g U_g / f_g, and its least term is the largest over the
        groups of each group's own; so each group's least bubble, largest rate and least such
        term over its options (those class_memory.py leaves; none: inf) give at most every
        layout's z, and where M is below the least stage slots sum_g min U_g (or twice that at
        v > 1) no layout has a pipeline (inf). Per b, aggregated, the least over b, times the
        factor, as replica_combos (8 types: 988 families keyed, 2.6 s of CPU for their class
        layouts' grids)."""
        inst = self.inst
        L, gb = inst.model.layers, inst.job.global_batch
        every = replica_options(inst, dict.fromkeys(fam.used, fam.tp), fam.used, fam.cp)
        groups = inst.cluster.groups
        ranks = (fam.cp * len(fam.used), fam.cp * sum(groups[g].num_gpus // (fam.tp * fam.cp) for g in fam.used))
        bubble = slots = 0.0
        den, least = 0.0, np.zeros((len(self.mbs), len(self.idx)))
        for g, opts in zip(fam.used, every):
            kept = [o for o in opts if self.memory is None or not any(
                self.memory.replica_class_refused(g, fam.tp, fam.cp, c.pp, ranks) for c in o)]
            if not kept:
                return float("inf")
            f = self.floor(g, fam.tp, fam.cp)
            bubble += min(sum(c.replicas * (c.pp - 1) for c in o) for o in kept)
            u = [sum(c.replicas * c.pp for c in o) for o in kept]
            slots += min(u)
            den = den + max(u) / f
            least = np.maximum(least, L * min(max(2 - 1 / c.pp for c in o) for o in kept) * f)
        M = np.floor(gb / self.mbs)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(M >= slots, L * (M + bubble) / den, np.inf)
            if self.v_max >= 2:
                z = np.minimum(z, np.where(M >= 2 * slots, L * (M + bubble / self.v_max) / den, np.inf))
            z = np.maximum(z, least)
        z = np.where(np.isnan(z), np.inf, z)
        per_mb = z.max(axis=1) if self.agg == "max" else z @ np.asarray(self.weights, float)
        return float(per_mb.min() * self.factor(fam.used, fam.cp, (1, 2)))

    def replica_combos(self, fam: ReplicaFamily) -> tuple[np.ndarray, np.ndarray]:
        """(index in the product of class_layouts.replica_options, bound) of each of the
        family's class layouts, all at once. Per scenario and micro-batch size b (M = global
        batch / b), a class k of x_k replicas and pp_k stages on group g has A_k >= L f_g / pp_k
        (the mean of its stages' a_s + n_s t_s, the slots relaxed as in unpriced._slot_row)
        and S_k >= L f_g, so batched.relaxed_s's second bound, which grows with every A_k and
        S_k, is at least
            L (M + sum_k x_k (pp_k - 1) / v) / sum_g U_g / f_g,   U_g = sum_(k on g) x_k pp_k;
        v = 1 needs m_k >= pp_k (several classes: space._count_form_of), so M >= sum_g U_g, and
        v > 1 needs every pp_k > 1 and m_k >= 2 pp_k, so M >= 2 sum_g U_g, its least at v_max.
        Its first bound, max_k (lo_k - 1/v) A_k + S_k / v (every class runs its least count),
        is at least max_k L f_g (2 - 1/pp_k): at v = 1, (pp_k - 1) L f_g / pp_k + L f_g, and at
        v > 1 (lo_k = 2 pp_k) L f_g (2 + (1 - 1/pp_k) / v), more (on 8 GPU types a V100 class of
        one stage running its one micro-batch of all 80 layers: the layouts of pp 1 that led
        the throughput bound at 1.2 s are at 2.8 s). An option (a group's classes) with a class
        class_memory.py refuses is left out (its layouts' bound is inf: not returned)."""
        inst = self.inst
        L, gb = inst.model.layers, inst.job.global_batch
        every = replica_options(inst, dict.fromkeys(fam.used, fam.tp), fam.used, fam.cp)
        groups = inst.cluster.groups
        ranks = (fam.cp * len(fam.used), fam.cp * sum(groups[g].num_gpus // (fam.tp * fam.cp) for g in fam.used))
        kept = [[i for i, o in enumerate(opts) if self.memory is None or not any(
            self.memory.replica_class_refused(g, fam.tp, fam.cp, c.pp, ranks) for c in o)]
            for g, opts in zip(fam.used, every)]
        if not all(kept):
            return np.zeros(0, np.int64), np.zeros(0)
        options = [[opts[i] for i in kp] for opts, kp in zip(every, kept)]
        grid = np.indices([len(o) for o in options]).reshape(len(options), -1)
        index = np.zeros(grid.shape[1], np.int64)  # in the product of every option
        for k, (opts, kp) in enumerate(zip(every, kept)):
            index = index * len(opts) + np.array(kp, np.int64)[grid[k]]
        bubble = np.zeros(grid.shape[1])
        slots = np.zeros(grid.shape[1])
        least = np.zeros((grid.shape[1], len(self.mbs), len(self.idx)))  # max_k L f_g (2 - 1/pp_k)
        classes = np.zeros(grid.shape[1], np.int64)
        deep = np.ones(grid.shape[1], bool)
        den = 0.0
        for k, (g, opts) in enumerate(zip(fam.used, options)):
            sel = grid[k]
            u = np.array([sum(c.replicas * c.pp for c in o) for o in opts], float)[sel]
            bubble += np.array([sum(c.replicas * (c.pp - 1) for c in o) for o in opts], float)[sel]
            classes += np.array([len(o) for o in opts])[sel]
            deep &= np.array([all(c.pp > 1 for c in o) for o in opts])[sel]
            slots += u
            f = self.floor(g, fam.tp, fam.cp)
            den = den + u[:, None, None] / f[None]
            deepest = np.array([max(2 - 1 / c.pp for c in o) for o in opts])
            least = np.maximum(least, (L * deepest[:, None, None] * f[None])[sel])
        M = np.floor(gb / self.mbs)[None, :, None]
        s_ = slots[:, None, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(M >= s_, L * (M + bubble[:, None, None]) / den, np.inf)
            if self.v_max >= 2:
                z = np.minimum(z, np.where(deep[:, None, None] & (M >= 2 * s_),
                                           L * (M + bubble[:, None, None] / self.v_max) / den, np.inf))
            z = np.maximum(z, least)
        z = np.where(np.isnan(z) | (classes < 2)[:, None, None], np.inf, z)
        per_mb = z.max(axis=2) if self.agg == "max" else z @ np.asarray(self.weights, float)
        return index, per_mb.min(axis=1) * self.factor(fam.used, fam.cp, (1, 2))

    def replica_at(self, fam: ReplicaFamily, x: int) -> tuple:
        """The class layout of index x (replica_combos) of the family."""
        key = ("options", fam)
        options = self.factors.get(key)
        if options is None:
            options = self.factors[key] = replica_options(self.inst, dict.fromkeys(fam.used, fam.tp), fam.used, fam.cp)
        picks, rest = [], x
        for opts in reversed(options):
            rest, i = divmod(rest, len(opts))
            picks.append(opts[i])
        return tuple(c for group in reversed(picks) for c in group)

    def rough_bound(self, fam) -> tuple[float, bool]:
        """(at most family_bound, whether it may be less): where family_bound reads a stage
        family's tp choices (_combos), the least of its choices' bounds without their slowest
        stage with forced recompute and without class_memory's refusals (_combos' `recompute`,
        `refusals`), each at most the choice's own (_combos' `least`: every term grows with the
        slowest stage, float rounding included; a refusal only makes a choice's bound inf), so
        at most the family's bound; elsewhere family_bound itself (False). The search keys its
        families by it and reads family_bound only for those that come up (search._Family.rough;
        issue 33: the 4 x 16 row keyed 396 stage families, 1.0 s of CPU, 0.1 s of it without
        their slowest stages, and opened 77)."""
        if isinstance(fam, ReplicaFamily) or not self.inst.search.idle_gpus and self.v_max < 2:
            return self.family_bound(fam), False
        if len(fam.used) == 1 and self.agg == "max":  # (one_group_rough: every dp at once)
            got = self.roughs.get(fam)
            if got is None:
                self.roughs.update(one_group_rough(self, _stage_families(self.inst, *fam.at, fam.used)))
                got = self.roughs.get(fam)
            if got is not None:
                return got
        _, bounds, _ = self._combos(fam, recompute=False, refusals=False)
        return (float(bounds.min()), True) if bounds.size else (float("inf"), False)

    def bound(self, fam: StageFamily) -> float:
        """A bound of every tp choice of the family: at v = 1 only and without idle GPUs,
        fill_drain_family (each group at any of its tp values, read without listing the
        choices); else the least bound of its tp choices (combos)."""
        if not self.inst.search.idle_gpus and self.v_max < 2:
            return self.fill_drain_family(fam)
        _, bounds, _ = self._combos(fam, least=True)
        return float(bounds.min()) if bounds.size else float("inf")

    def fill_drain_family(self, fam: StageFamily) -> float:
        """At most every tp choice's fill_drain_choices bound at v = 1, without computing each
        (8 types: families of up to 4^8 tp choices, 2,717 families keyed before the search).
        A choice's pipeline at v = 1 is at least fill_drain_relaxed_s of its stages (group g's
        c_g(t_g) stages at the floor f_g(t_g): fill_drain_choices), the least over real Z and
        n (layers per group) of (m - 1) Z + sum_g f_g n_g with c_g <= n_g <= c_g Z / f_g and
        sum_g n_g = L. Each constraint and cost only loosens with f_g, c_g and c_g / f_g
        replaced by their least, least and largest over the group's tp values left in the
        family, so the same problem on those (fill_drain_relaxed_s with `rate`) is at most the
        choice's, at every Z; where the least c_g over all groups exceeds L, no choice has a
        pipeline (inf). Per micro-batch size b, at the lone class's m = (global batch / b) / dp
        >= 1, aggregated over scenarios, the least over b, times the family's least quantile
        factor, as combos. Memory is not read (class_memory's refusals only raise a choice)."""
        inst, L, gb = self.inst, self.inst.model.layers, self.inst.job.global_batch
        nb, ns = len(self.mbs), len(self.idx)
        G = len(fam.used)
        lo, count, rate = np.empty((nb, ns, G)), np.empty(G), np.empty((nb, ns, G))
        for k, g in enumerate(fam.used):
            tps = [t for _, t in fam.tps[k]]
            n = inst.cluster.groups[g].num_gpus
            c = np.array([n // (t * fam.cp * fam.dp) for t in tps], float)
            fs = np.stack([self.floor(g, t, fam.cp) for t in tps])  # (tps, mbs, scenarios)
            with np.errstate(divide="ignore"):
                lo[:, :, k], rate[:, :, k] = fs.min(axis=0), (c[:, None, None] / fs).max(axis=0)
            count[k] = c.min()
        m = np.floor(gb / self.mbs) / fam.dp  # (mbs,)
        rows = np.repeat(m, ns)
        j = fill_drain_relaxed_s(lo.reshape(-1, G), np.broadcast_to(count, (nb * ns, G)), L,
                                 np.maximum(rows, 1.0), rate.reshape(-1, G)).reshape(nb, ns)
        z = np.where((m >= 1)[:, None] & ~np.isnan(j), j, np.inf)
        per_mb = z.max(axis=1) if self.agg == "max" else z @ np.asarray(self.weights, float)
        return float(per_mb.min() * self.factor(fam.used, fam.cp, _depths(fam)))

    def _combos(self, fam: StageFamily, least: bool = False, only: np.ndarray | None = None,
                recompute: bool = True, refusals: bool = True) -> tuple[np.ndarray, np.ndarray, tuple | None]:
        """combos, and the terms fill_drain_choices reads: (z at v = 1, z's least at v > 1,
        the choices' stages per group (choices, groups), floors (choices, groups, mbs,
        scenarios), whether each (choice, mb) holds a configuration, the quantile factor).
        `least` (bound's): only the least of the bounds is exact, and no terms: under a worst
        case over scenarios each choice's bound without its slowest stage with forced recompute
        (stage_recompute.py; 0 in its place) is at most its own (every term grows with it, float
        rounding included), so the choices are read with it best first, and the others, at
        least the least so far, not (issue 33: the 4 x 16 row keyed 396 stage families at set-up,
        up to 16 choices each, and opened 77; the term read one choice at a time is the same
        float, stage_recompute's memo keeps it per choice). `only`: the choices at these
        positions of the family's grid alone, without the slowest stage with forced
        recompute where not `recompute` (joint_keys), and without class_memory's refusals
        where not `refusals` (rough_bound: a refused choice's bound is inf)."""
        inst = self.inst
        s, L, gb = inst.search, inst.model.layers, inst.job.global_batch
        sizes = [len(v) for v in self._group_tps(fam)]
        shape = [len(o) for o in fam.tps]
        # (groups, choices): np.indices' rows, or of `only` its columns alone (the same numbers)
        grid = (np.indices(shape).reshape(len(fam.used), -1) if only is None
                else np.stack(np.unravel_index(np.asarray(only, np.int64), shape)).reshape(len(fam.used), -1))
        rate, lo, hi, held = 0.0, np.inf, -np.inf, 0.0
        most = min(L, s.max_pp if s.max_pp is not None else L)
        stages = np.zeros(grid.shape[1], np.int64)
        index = np.zeros(grid.shape[1], np.int64)
        per_group, floors, tp_of = [], [], []
        for k, g in enumerate(fam.used):
            tps = np.array([t for _, t in fam.tps[k]])
            tp_of.append(tps[grid[k]])
            at = np.array([i for i, _ in fam.tps[k]])
            fs = np.stack([self.floor(g, int(t), fam.cp) for t in tps])[grid[k]]  # (choices, mbs, scenarios)
            n = inst.cluster.groups[g].num_gpus
            per_group.append(n // (tps[grid[k]] * fam.cp * fam.dp))
            floors.append(fs)
            # r_g: the most stages g holds at dp replicas (whole ones, within the depth's cap;
            # n / (t cp) without idle GPUs), so a layout that idles GPUs is bounded by those it uses
            held_most = np.minimum(n // (tps[grid[k]] * fam.cp * fam.dp), most) * fam.dp
            rate = rate + held_most[:, None, None] / fs
            lo, hi = np.minimum(lo, fs), np.maximum(hi, fs)
            stages += n // (tps[grid[k]] * fam.cp * fam.dp)
            # its stages each hold a layer (one stage at least with idle GPUs)
            least_held = np.ones(grid.shape[1]) if s.idle_gpus else n // (tps[grid[k]] * fam.cp * fam.dp)
            held = held + least_held[:, None, None] * fs
            index = index * sizes[k] + at[grid[k]]
        # a pipeline's depth: its stages exactly, or with idle GPUs at least one per group
        pp = np.full_like(stages, len(fam.used)) if s.idle_gpus else stages
        # (with idle GPUs pp is only a least depth: search.pp is read on the exact one only)
        ok = (pp <= most) & (np.isin(pp, s.pp) if s.pp is not None and not s.idle_gpus else True)
        m = (np.floor(gb / self.mbs) / fam.dp)[None, :, None]
        tp_of, places = np.stack(tp_of, axis=1), np.stack(per_group, axis=1)
        # no replica without a micro-batch, nor a split of the batch that leaves some over (the
        # lone class runs M / dp: space.has_micro_batch_split); 0 x inf (floors of no plan) is
        # no bound either
        if refusals:
            ok &= ~(self._stage_refused(fam, grid, stages) if only is None else self._refused_each(fam, grid, stages))
        factor = self.factor(fam.used, fam.cp, _depths(fam))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            a0 = np.maximum(L * fam.dp / rate, hi)  # and every stage holds a layer: A >= max_s t_s
            s0 = L * lo - self.slot_c * (hi - lo)
        # v > 1: on one group with idle GPUs, the depth divides m (interleaved_a)
        a0v, deep_ok, zg = ((a0, np.ones((grid.shape[1], 1, 1), bool), np.full((grid.shape[1], 1, 1), -np.inf))
                            if not (s.idle_gpus and len(fam.used) == 1) else
                            interleaved_a(L, m, np.minimum(per_group[0], most), lo, hi, self.slot_c, self.v_max))

        def bounds_at(sel, slow1, slow_v) -> tuple:
            """(z1, zv, valid, bound) of the choices `sel` with their slowest stages read
            (slow1 at v = 1, slow_v at v > 1; element by element, so any selection's floats are
            those of every choice at once)."""
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                # v = 1: no slots, any m >= 1 (a lone class); S >= sum_s t_s + (L - pp) t_min
                z1 = (m - 1) * np.maximum(a0[sel], slow1) + held[sel] + (L - pp[sel])[:, None, None] * lo[sel]
                # v > 1: m a multiple of pp (space._count_form_of)
                zv = np.full_like(z1, np.inf)
                deep = (m >= pp[sel][:, None, None]) & deep_ok[sel]
                if self.v_max >= 2:
                    for v in (2.0, float(self.v_max)):
                        zv = np.where(deep, np.minimum(zv, (m - 1 / v) * np.maximum(a0v[sel], slow_v) + s0[sel] / v), zv)
                    zv = np.maximum(zv, zg[sel])
                z = np.minimum(z1, zv)
            valid = (m >= 1) & (m == np.floor(m)) & ~np.isnan(z) & ok[sel][:, None, None]
            z = np.where(valid, z, np.inf)
            per_mb = z.max(axis=2) if self.agg == "max" else z @ np.asarray(self.weights, float)
            return z1, zv, valid, per_mb.min(axis=1) * factor

        def slowest(sel) -> tuple:
            """The slowest stage that memory and the recompute it forces allow (stage_recompute.py),
            at v = 1 and, with the slots' end-stage relief, at v > 1, of the choices `sel`."""
            sr = self.stage_recompute
            slow1 = sr.slowest_s(fam.used, tp_of[sel], places[sel], fam.cp, fam.dp, s.idle_gpus, False)
            return slow1, (sr.slowest_s(fam.used, tp_of[sel], places[sel], fam.cp, fam.dp, s.idle_gpus, True)
                           if self.slot_c else slow1)

        everything = slice(None)
        if grid.shape[1] > RECOMPUTE_CHOICES or not recompute:  # not read: the bound without it
            z1, zv, valid, bounds = bounds_at(everything, 0.0, 0.0)
        elif least and self.agg == "max":
            lower = bounds_at(everything, 0.0, 0.0)[3]
            best = np.inf
            for c in np.argsort(lower, kind="stable").tolist():
                if not lower[c] < best:
                    break
                best = min(best, float(bounds_at([c], *slowest([c]))[3][0]))
            return index, np.array([best]) if len(index) else np.zeros(0), None
        else:
            z1, zv, valid, bounds = bounds_at(everything, *slowest(everything))
        terms = (z1, zv, np.stack(per_group, axis=1), np.stack(floors, axis=1), valid, factor)
        return index, bounds, terms

    def fill_drain_choices(self, fam: StageFamily, keep: list[int], terms: tuple,
                           pipeline: np.ndarray | None = None) -> np.ndarray:
        """The bound of each tp choice `keep` (positions in combos' order) with its v = 1 term
        raised to fill_drain.fill_drain_relaxed_s (at most J) of its stages (group g's c_g stages each at its floor
        f_g, the output layer's term >= 0 left out: J grows with every a_s), at its lone class's
        m = (global batch / b) / dp micro-batches: the configuration's pipeline at v = 1 is at
        least J (fill_drain's module docstring), as it is at least the v = 1 term, so at least
        their larger; the least over v, the scenarios' aggregate, the least over b and the
        factor as combos. Without search.idle_gpus only (there c_g is a least count).
        `pipeline`: the choices' J (_pipelines) where the caller has it."""
        k = np.asarray(keep, np.int64)
        j = self._pipelines(fam, k, terms) if pipeline is None else pipeline
        return self._per_b(terms, k, j).min(axis=1)

    def _rows(self, fam: StageFamily, k: np.ndarray, terms: tuple) -> tuple:
        """Per row (choices x mbs x scenarios) of the choices at positions `k`: the floors t
        and stage counts (rows, groups), and the lone class's micro-batches m (at least 1)."""
        _, _, counts, floors, _, _ = terms
        C, G = len(k), counts.shape[1]
        nb, ns = floors.shape[2], floors.shape[3]
        t = np.moveaxis(floors[k], 1, -1).reshape(-1, G)  # (choices x mbs x scenarios, groups)
        count = np.repeat(counts[k].astype(float), nb * ns, axis=0)
        m = np.maximum(np.tile(np.repeat(np.floor(self.inst.job.global_batch / self.mbs) / fam.dp, ns), C), 1.0)
        return t, count, m

    def _pipelines(self, fam: StageFamily, k: np.ndarray, terms: tuple) -> np.ndarray:
        """(choices, mbs, scenarios): fill_drain_relaxed_s of the floors of the choices at
        positions `k` (fill_drain_choices' J; _sync_rows' pipeline), read once where a caller
        reads both (row by row: a selection's floats are those of every choice at once)."""
        t, count, m = self._rows(fam, k, terms)
        nb, ns = terms[3].shape[2], terms[3].shape[3]
        return fill_drain_relaxed_s(t, count, self.inst.model.layers, m).reshape(len(k), nb, ns)

    def _choice_syncs(self, fam: StageFamily, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(g, d) of syncs per choice of positions `k` (combos' order) and group, each
        (choices, groups, micro-batch sizes, scenarios)."""
        G, nb, ns = len(fam.used), len(self.mbs), len(self.idx)
        # each choice's tp per group (combos' order: np.indices over fam.tps, the last fastest)
        at = np.unravel_index(np.asarray(k, np.int64), [len(x) for x in fam.tps])
        tp = np.stack([np.array([t for _, t in fam.tps[x]])[at[x]] for x in range(G)], axis=1)  # (choices, groups)
        per_group = (tp != tp[:, :1]).any(axis=1)  # the choice's tp differs between its groups
        gs, ds = np.empty((len(k), G, nb, ns)), np.empty((len(k), G, nb, ns))
        if not len(k):
            return gs, ds
        # each group's syncs read once per (tp value, per_group) present, then gathered per
        # choice: the same floats as one call per (choice, group) (8 types: 217,102 choices
        # opened at 20 s of CPU, 1.4 million calls)
        for x, g in enumerate(fam.used):
            code = 2 * at[x] + per_group  # (tp index, flag)
            present = np.bincount(code, minlength=2 * len(fam.tps[x])) > 0
            got = [self.syncs(g, fam.tps[x][c // 2][1], fam.cp, fam.dp, bool(c % 2))
                   for c in np.flatnonzero(present).tolist()]
            back = (np.cumsum(present) - 1)[code]  # each choice's row of `got`
            gs[:, x] = np.array([g_ for g_, _ in got])[back]
            ds[:, x] = np.array([d_ for _, d_ in got])[back]
        return gs, ds

    def _sync_rows(self, fam: StageFamily, k: np.ndarray, terms: tuple, grid: np.ndarray | None = None,
                   pipeline: np.ndarray | None = None) -> tuple:
        """What apart_choices and joint_keys read of the choices at positions `k` of `terms`
        (combos' rows): per row (choices x mbs x scenarios, groups) the floors t, stage
        counts, syncs g and d (syncs), and per row m (the lone class's micro-batches); per
        (choices, mbs, scenarios) fill_drain_relaxed_s of the floors and the least slowest sync
        over real splits. `grid`: the choices' positions in the family's grid, which the syncs
        read (tp per group); None where `terms` are the whole grid's (then `k` itself). joint_keys'
        terms are its popped choices' alone (combos' `only`): read at `k` the syncs were the
        grid's first choices', not theirs (found by the row1c helper). `pipeline`: _pipelines
        of `k` where the caller has it."""
        _, _, counts, floors, _, _ = terms
        L = self.inst.model.layers
        C, G = len(k), counts.shape[1]
        nb, ns = floors.shape[2], floors.shape[3]
        gs, ds = self._choice_syncs(fam, k if grid is None else grid)
        c = counts[k].astype(float)[:, :, None, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            least_sync = np.maximum((ds + gs).max(axis=1), (L + (c * ds / gs).sum(axis=1)) / (c / gs).sum(axis=1))
        least_sync = np.where(np.isnan(least_sync), 0.0, least_sync)  # (no bound)
        t, count, m = self._rows(fam, k, terms)
        if pipeline is None:
            pipeline = fill_drain_relaxed_s(t, count, L, m).reshape(C, nb, ns)
        g_, d_ = (np.moveaxis(x, 1, -1).reshape(-1, G) for x in (gs, ds))
        return t, count, g_, d_, m, pipeline, least_sync

    def _per_b(self, terms: tuple, k: np.ndarray, j: np.ndarray) -> np.ndarray:
        """(choices, mbs): the bound of the choices at positions `k` with their v = 1 term
        raised to j (choices, mbs, scenarios): the least over v, aggregated over the scenarios,
        times the factor, as combos."""
        z1, zv, _, _, valid, factor = terms
        with np.errstate(invalid="ignore"):
            z = np.minimum(np.maximum(z1[k], j), zv[k])
        z = np.where(valid[k] & ~np.isnan(z), z, np.inf)
        return (z.max(axis=2) if self.agg == "max" else z @ np.asarray(self.weights, float)) * factor

    def apart_choices(self, fam: StageFamily, keep: list[int], terms: tuple, can_win,
                      pipeline: np.ndarray | None = None) -> np.ndarray:
        """The bound of each tp choice `keep` (positions in combos' order) with its v = 1 term
        raised by its gradient sync read apart from its pipeline. A configuration's time at
        v = 1 is (m - 1) max_s T_s + sum_s T_s + max_s D_s, T_s >= n_s f_s and D_s >= d_s +
        n_s g_s on its own split n (group g's c_g stages at its floor f_g and its least syncs
        g_g, d_g: syncs; every flag, mode and ZeRO stage it may run has floors, syncs and stage
        terms at least these), m = (global batch / b) / dp: so at least fill_drain_relaxed_s of
        the floors (fill_drain_choices' J) plus the least slowest sync over real splits
        n_s >= 1, max(max_g (d_g + g_g), (L + sum_g c_g d_g / g_g) / sum_g c_g / g_g)
        (fill_drain_sync_s' first level). The least over v, the scenarios' aggregate, the least
        over b and the factor as combos. Without search.idle_gpus only (there c_g is a least
        count), through two groups or more (the syncs are read at pp > 1). Read only for the
        choices it may prune (_can_rise); 0 for the others. `pipeline`: _pipelines of `keep`
        where the caller has it."""
        k = np.asarray(keep, np.int64)
        out = np.zeros(len(k))  # (no bound: the caller's stands)
        read = self._can_rise(terms, k, can_win)
        if len(read):
            *_, pipeline, least_sync = self._sync_rows(fam, k[read], terms,
                                                       pipeline=None if pipeline is None else pipeline[read])
            out[read] = self._per_b(terms, k[read], pipeline + least_sync).min(axis=1)
        return out

    def reads_syncs(self, fam) -> bool:
        """Whether the tp choices of `fam` read their syncs (apart_choices, joint_keys): a
        stage family's through two groups or more, where the space runs v = 1 alone and no
        idle GPUs (the syncs raise the v = 1 term only; on the 4 x 16 row, which interleaves,
        reading them cost 3-8 s of CPU and pruned nothing the layouts' keys do not)."""
        return (isinstance(fam, StageFamily) and len(fam.used) > 1 and self.v_max < 2
                and not self.inst.search.idle_gpus)

    def _can_rise(self, terms: tuple, k: np.ndarray, can_win) -> np.ndarray:
        """The positions in `k` (choices of combos' order) whose bound with their v = 1 term
        raised without end cannot win (`can_win`): the others' sync, which only raises that
        term, cannot prune them (where the space interleaves, their v > 1 term holds: the 4 x
        16 row, where reading every opened choice's syncs cost 14 s of CPU for nothing)."""
        C, nb, ns = len(k), len(self.mbs), len(self.idx)
        top = self._per_b(terms, k, np.full((C, nb, ns), np.inf)).min(axis=1)
        return np.setdiff1d(np.arange(C), _winning(top, can_win))

    def joint_keys(self, fam: StageFamily, indices: list[int], can_win) -> np.ndarray:
        """The bound of each tp choice of `indices` (tp_choices' order) read as choices reads
        it (combos without the slowest stage with forced recompute, which the choice's key
        may hold: the caller keeps the larger; fill_drain_choices, apart_choices), and then, for each (choice, b) whose
        bound can still win (`can_win`), with its pipeline and slowest sync read together:
        fill_drain.fill_drain_sync_s of its stages (apart_choices' floors and syncs), the least
        over integer splits of (m - 1) max_s n_s f_s + sum_s n_s f_s + max_s (d_s + n_s g_s),
        at most each configuration's time at v = 1 by apart_choices' argument, as
        layouts._joint_rows reads a listed layout's (the split that balances the pipeline piles
        layers on the fastest groups, whose syncs then lead: issue 33, 8 types x 8 nodes). It
        costs about 2 ms a choice, so the search reads it as it pops a choice
        (search._Search._open_family), not for every choice of an opened family. Without
        search.idle_gpus only, through two groups or more; inf where the choice holds no
        configuration."""
        pos = self._positions(fam, indices)
        bounds, apart, terms, rows, arrays = self._joint_front(fam, pos, can_win)
        if rows is None:  # (none it may prune)
            return bounds
        if len(rows):
            ci, bi = np.unravel_index(rows, apart.shape[:2])
            j = self._joint_rows(fam, pos, ci, bi, arrays, can_win)
            apart[ci, bi] = np.maximum(apart[ci, bi], j)
            bounds = np.maximum(bounds, self._per_b(terms, np.arange(len(pos)), apart).min(axis=1))
        return bounds

    def _joint_front(self, fam: StageFamily, pos: np.ndarray, can_win) -> tuple:
        """What joint_keys reads of the choices at grid positions `pos` before their pipeline
        and sync are read together: (their bounds with fill_drain_choices and apart_choices,
        apart (choices, mbs, scenarios), their terms, the (choice, b) positions in apart's
        first two axes to read together, _sync_rows' row arrays (t, count, g, d, m)); rows
        None where none of them may be pruned (_can_rise). What does not read the bar is kept
        per grid position (_fronts, _front_syncs)."""
        bounds, top, terms, pipeline = self._fronts(fam, pos)
        if not len(np.setdiff1d(np.arange(len(pos)), _winning(top.min(axis=1), can_win))):  # (_can_rise)
            return bounds, None, terms, None, None
        apart, got, arrays = self._front_syncs(fam, pos, terms, pipeline)
        bounds = np.maximum(bounds, got.min(axis=1))
        # the (choice, b) that can still win apart, but not with their v = 1 term raised
        # without end (_can_rise); none without a bar (there it prunes nothing)
        rows = (np.setdiff1d(_winning(got.ravel(), can_win), _winning(top.ravel(), can_win))
                if not can_win(np.inf) else np.zeros(0, np.int64))
        return bounds, apart, terms, rows, arrays

    def _fronts(self, fam: StageFamily, pos: np.ndarray) -> tuple:
        """Of the choices at grid positions `pos`: their bounds with fill_drain_choices, their
        bound with the v = 1 term raised without end (choices, mbs), their terms and pipelines
        (_pipelines), each choice's kept in `fronts` by family and position. Every float is the
        choice's own whatever choices are read with it (combos' `only` and _pipelines read
        elementwise or row by row, the refusals at the choice's own depth: _refused_each), so
        a choice read ahead (_joint_rows) is not set up again when it is popped (8 types x 8
        nodes: _combos called 1,896 -> 551 times, _joint_front 11% -> 4% of the row's profile)."""
        memo = self.fronts.setdefault(fam, {})
        todo = np.array([p for p in dict.fromkeys(pos.tolist()) if p not in memo], np.int64)
        if len(todo):
            # (the slowest stage with forced recompute not read: the choice's own key may hold
            # it; read per popped choice it was 15% of the 4 x 16 row's CPU)
            _, bounds, terms = self._combos(fam, only=todo, recompute=False)
            k = np.arange(len(todo))
            pipeline = self._pipelines(fam, k, terms)  # (fill_drain_choices' and _sync_rows')
            bounds = np.maximum(bounds, self.fill_drain_choices(fam, k.tolist(), terms, pipeline))
            top = self._per_b(terms, k, np.full(pipeline.shape, np.inf))
            for r, p in enumerate(todo.tolist()):
                memo[p] = _Front(bounds[r], top[r], tuple(x[r] for x in terms[:5]), terms[5], pipeline[r])
        fronts = [memo[p] for p in pos.tolist()]
        terms = (*(np.stack([f.terms[x] for f in fronts]) for x in range(5)), fronts[0].factor)
        return (np.array([f.bound for f in fronts]), np.stack([f.top for f in fronts]), terms,
                np.stack([f.pipeline for f in fronts]))

    def _front_syncs(self, fam: StageFamily, pos: np.ndarray, terms: tuple, pipeline: np.ndarray) -> tuple:
        """Of the choices at grid positions `pos` (_fronts' terms and pipelines): apart
        (choices, mbs, scenarios: the pipeline plus the least slowest sync), its bound (choices,
        mbs) and _sync_rows' row arrays (t, count, g, d, m), each choice's kept in its front
        (rows choice by choice: _sync_rows reads each choice's rows alone)."""
        memo = self.front_syncs.setdefault(fam, {})
        todo = [r for r, p in enumerate(pos.tolist()) if p not in memo]
        if todo:
            k = np.array(todo, np.int64)
            t, count, g_, d_, m, _, least_sync = self._sync_rows(fam, k, terms, pos[k], pipeline[k])
            apart = pipeline[k] + least_sync
            got = self._per_b(terms, k, apart)
            per = apart.shape[1] * apart.shape[2]  # rows a choice
            for r, p in enumerate(pos[k].tolist()):
                rows = slice(r * per, (r + 1) * per)
                memo[p] = (apart[r], got[r], tuple(x[rows] for x in (t, count, g_, d_, m)))
        syncs = [memo[p] for p in pos.tolist()]
        arrays = tuple(np.concatenate([s[2][x] for s in syncs]) for x in range(5))
        return np.stack([s[0] for s in syncs]), np.stack([s[1] for s in syncs]), arrays

    def _joint_rows(self, fam: StageFamily, pos: np.ndarray, ci: np.ndarray, bi: np.ndarray, arrays: tuple,
                    can_win) -> np.ndarray:
        """(rows, scenarios): fill_drain.fill_drain_sync_s of the (choice ci, b bi) rows of the
        choices at grid positions `pos` (_joint_front's row `arrays`), each kept in joint_memo by
        its family, grid position and b. Where one is not kept yet, the rows of up to
        JOINT_AHEAD more of the family's opened choices (choices' `opened`, least bound first,
        not yet read) that _joint_front would read now are read in the same call: the search
        pops a family's choices one at a time (8 types x 8 nodes: 1,518 rows in 1,461 calls,
        about 4 ms each, nearly all of it numpy's per-call work over the sync levels), and a
        row's floats are its own (fill_drain_sync_s reads row by row), so a kept row is the
        float the popped choice's own call gives, whatever was read with it."""
        memo = self.joint_memo.setdefault(fam, {})
        keys = list(zip(pos[ci].tolist(), bi.tolist()))
        todo = [r for r, key in enumerate(keys) if key not in memo]
        if todo:
            at = np.array(todo)
            batch = [(arrays, ci[at], bi[at], [keys[r] for r in todo])]
            done = self.read_ahead.setdefault(fam, set())
            done.update(pos.tolist())
            ahead = np.array([p for p in self.opened.get(fam, ()) if p not in done][:JOINT_AHEAD], np.int64)
            done.update(ahead.tolist())
            if len(ahead):
                _, a_apart, _, a_rows, a_arrays = self._joint_front(fam, ahead, can_win)
                if a_rows is not None and len(a_rows):
                    a_ci, a_bi = np.unravel_index(a_rows, a_apart.shape[:2])
                    batch.append((a_arrays, a_ci, a_bi, list(zip(ahead[a_ci].tolist(), a_bi.tolist()))))
            self._read_joint(memo, batch)
        return np.array([memo[key] for key in keys])

    def _read_joint(self, memo: dict, batch: list) -> None:
        """fill_drain_sync_s of every (row arrays, ci, bi, keys) of `batch` in one call, each
        (choice, b)'s scenarios kept in `memo` by its key."""
        ns, nb, L = len(self.idx), len(self.mbs), self.inst.model.layers
        arrays = []
        for (t, count, g_, d_, m), ci, bi, _ in batch:
            pick = ((ci[:, None] * nb + bi[:, None]) * ns + np.arange(ns)[None, :]).ravel()  # their rows
            arrays.append((t[pick], count[pick], m[pick], d_[pick], g_[pick]))
        t, count, m, d_, g_ = (np.concatenate(x) for x in zip(*arrays))
        j = fill_drain_sync_s(np.zeros(t.shape), t, count, L, m, None, d_, g_, np.ones(len(t)))
        for key, row in zip((key for *_, keys in batch for key in keys), j.reshape(-1, ns)):
            memo[key] = row

    def _positions(self, fam: StageFamily, indices: list[int]) -> np.ndarray:
        """The positions in the family's grid (combos' order) of its tp choices `indices`
        (tp_choices' order: the product of each group's tp_values)."""
        values = self._group_tps(fam)
        at = np.unravel_index(np.asarray(indices, np.int64), [len(v) for v in values])
        where = [np.array([dict((i, p) for p, (i, _) in enumerate(fam.tps[x])).get(i, -1) for i in range(len(values[x]))])
                 for x in range(len(fam.used))]
        return np.ravel_multi_index(tuple(where[x][at[x]] for x in range(len(fam.used))),
                                    [len(x) for x in fam.tps])

    def _group_tps(self, fam: StageFamily) -> list:
        """tp_values of each group `fam` uses, read once per group (group_tps)."""
        return [self.group_tps.get(g) or self.group_tps.setdefault(g, tp_values(self.inst, (g,))) for g in fam.used]

    def _refused_each(self, fam: StageFamily, grid: np.ndarray, stages: np.ndarray) -> np.ndarray:
        """_stage_refused of each choice of the grid as if read alone (its depth its own, not
        the least of those read with it): the choices read per distinct depth, each read's
        floats elementwise, so a choice's refusal is the same whatever choices share the call
        (joint_keys keeps the fronts of choices read ahead: _fronts)."""
        out = np.zeros(grid.shape[1], bool)
        for pp in np.unique(stages).tolist():
            at = np.flatnonzero(stages == pp)
            out[at] = self._stage_refused(fam, grid[:, at], stages[at])
        return out

    def _stage_refused(self, fam: StageFamily, grid: np.ndarray, stages: np.ndarray) -> np.ndarray:
        """Per tp choice of the grid (groups, choices), whether no order of its pipeline fits
        memory (class_memory.py: each group's stages at the least in-flight counts, the depth at
        the family's least, each group in its own best mode)."""
        out = np.zeros(grid.shape[1], bool)
        if self.memory is None or self.inst.search.idle_gpus or not grid.shape[1]:
            return out
        cm, L, groups = self.memory, self.inst.model.layers, self.inst.cluster.groups
        m = self.inst.job.global_batch // int(self.mbs.min()) // fam.dp
        pp = int(stages.min())
        modes = cm.stage_modes([t for tps in fam.tps for _, t in tps], fam.cp, pp, fam.dp)
        # each group at its own best mode (a relaxation of one mode for all: stage_group_best)
        held, last_ok, full_ok = 0.0, np.zeros(grid.shape[1], bool), np.zeros(grid.shape[1], bool)
        for k, g in enumerate(fam.used):
            n = groups[g].num_gpus
            rows = np.array([cm.stage_group_best(g, t, fam.cp, fam.dp, n // (t * fam.cp * fam.dp), pp, m, modes)
                             for _, t in fam.tps[k]], float)[grid[k]]
            held = held + rows[:, 0]
            last_ok |= rows[:, 1] >= 1
            full_ok |= rows[:, 2] >= -(-L // np.maximum(stages, 1))
        fits = (held >= L) | (last_ok & full_ok)
        return ~fits

    def choices(self, fam, can_win) -> list[tuple[int, float]]:
        """(index, bound) of the family's tp choices (a StageFamily) or class layouts (a
        ReplicaFamily) whose bound can still win (`can_win(bound)`, true below some bound and
        false above it, as the search's test against its bar is), in declared order."""
        if isinstance(fam, ReplicaFamily):
            index, bounds = self.replica_combos(fam)
            keep = _winning(bounds, can_win)
            return list(zip(index[keep].tolist(), bounds[keep].tolist()))
        if self.inst.search.idle_gpus:
            return self._idle_choices(fam, can_win)
        index, bounds, terms = self._combos(fam)
        keep = _winning(bounds, can_win)
        if len(keep) and not self.inst.search.idle_gpus:
            bounds = bounds.copy()
            pipeline = self._pipelines(fam, keep, terms)  # (fill_drain_choices' and apart_choices')
            bounds[keep] = np.maximum(bounds[keep], self.fill_drain_choices(fam, keep.tolist(), terms, pipeline))
            won = _winning(bounds[keep], can_win)
            keep = keep[won]
            if len(keep) and self.reads_syncs(fam):
                bounds[keep] = np.maximum(bounds[keep], self.apart_choices(fam, keep.tolist(), terms, can_win,
                                                                           pipeline[won]))
                keep = keep[_winning(bounds[keep], can_win)]
            if self.reads_syncs(fam):  # (joint_keys reads their rows ahead, least bound first)
                self.opened[fam] = keep[np.argsort(bounds[keep], kind="stable")].tolist()
        return list(zip(index[keep].tolist(), bounds[keep].tolist()))

    def _idle_choices(self, fam: StageFamily, can_win) -> list[tuple[int, float]]:
        """choices of a stage family under search.idle_gpus (its bounds are _combos' alone): the
        slowest stage with forced recompute is read only for the choices whose bound without it
        can still win. That bound is at most the choice's own (every term grows with the
        slowest stage, float rounding included: _combos' `least`), so a choice it leaves out
        cannot win, and those kept get the floats of the whole grid's call (_combos' `only`
        reads elementwise, the refusals none with idle GPUs; a family of more than
        RECOMPUTE_CHOICES choices reads no such term either way; issue 33)."""
        index, bounds, _ = self._combos(fam, recompute=False)
        keep = _winning(bounds, can_win)
        if len(keep) and math.prod(len(x) for x in fam.tps) <= RECOMPUTE_CHOICES:
            bounds = bounds.copy()
            bounds[keep] = self._combos(fam, only=keep)[1]
            keep = keep[_winning(bounds[keep], can_win)]
        return list(zip(index[keep].tolist(), bounds[keep].tolist()))

    def tpg_at(self, fam: StageFamily, ti: int) -> dict:
        """The tp per group of the tp choice of index ti (tp_choices' order)."""
        values = self._group_tps(fam)
        tpg, rest = {}, ti
        for k in range(len(fam.used) - 1, -1, -1):
            rest, i = divmod(rest, len(values[k]))
            tpg[fam.used[k]] = values[k][i]
        return dict(sorted(tpg.items()))


@dataclass(frozen=True)
class _Front:
    """What joint_keys reads of one tp choice before its syncs and the bar (FamilyBounds._fronts):
    its bound with fill_drain_choices, its bound with the v = 1 term raised without end (mbs,),
    its rows of combos' terms (z1, zv, stages per group, floors, valid), the family's quantile
    factor and its pipeline (mbs, scenarios)."""

    bound: float
    top: np.ndarray
    terms: tuple
    factor: float
    pipeline: np.ndarray


def _winning(bounds: np.ndarray, can_win) -> np.ndarray:
    """The positions, in order, of `bounds` that can still win: `can_win` read on the distinct
    values by bisection (it holds below some bound and fails above it), not once per choice
    (8 types: 651,456 tests of the search's bar in one run)."""
    values = np.unique(bounds)  # sorted; inf and nan last
    lo, hi = 0, len(values)  # can_win holds on values[:lo] and fails on values[hi:]
    while lo < hi:
        mid = (lo + hi) // 2
        if can_win(float(values[mid])):
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(bounds <= values[lo - 1])


# rows (tp choices of one-group stage families) one_group_rough reads in one pass: each row holds
# (micro-batch sizes x scenarios) floats in a handful of arrays (Llama-3.1 405B on 16,384 H100:
# 32,766 families of up to 5 choices)
ROUGH_ROWS = 4096


def one_group_rough(fb: FamilyBounds, fams: list[StageFamily]) -> dict:
    """fb.rough_bound of each one-group StageFamily of `fams` under a worst case over scenarios,
    read for all of them at once: _combos' reading with recompute and refusals off, whose floats
    are elementwise per tp choice (its tp, dp and floors) and per (choice, micro-batch size), so
    the rows of many families stacked give each the floats of its own call (search.idle_gpus on
    one group: a family per (cp, dp), dp from 1 to the most the group holds; Llama-3.1 405B on
    16,384 H100 keyed 32,766 families, 0.36 ms of numpy's per-call work each)."""
    out: dict = {}
    batch: list[StageFamily] = []
    rows = 0
    for fam in fams:
        batch.append(fam)
        rows += len(fam.tps[0])
        if rows >= ROUGH_ROWS:
            out.update(_rough_rows(fb, batch))
            batch, rows = [], 0
    if batch:
        out.update(_rough_rows(fb, batch))
    return out


def _rough_rows(fb: FamilyBounds, fams: list[StageFamily]) -> dict:
    """one_group_rough of `fams` in one pass: _combos(fam, recompute=False, refusals=False)'s
    expressions, one row per (family, tp choice), with search.idle_gpus' one stage a group at
    least (pp 1: held = f, the depth's cap passes) and the bound at 0 slowest stage."""
    inst = fb.inst
    s, L, gb = inst.search, inst.model.layers, inst.job.global_batch
    most = min(L, s.max_pp if s.max_pp is not None else L)
    g = fams[0].used[0]
    n = inst.cluster.groups[g].num_gpus
    t = np.array([t for f in fams for _, t in f.tps[0]])
    dp = np.array([f.dp for f in fams for _ in f.tps[0]])
    cp = np.array([f.cp for f in fams for _ in f.tps[0]])
    # the few (tp, cp) and cp values, each read once
    width = int(cp.max()) + 1
    keys, at = np.unique(t * width + cp, return_inverse=True)
    fs = np.stack([fb.floor(g, x // width, x % width) for x in keys.tolist()])[at.ravel()]  # (rows, mbs, scenarios)
    cps, by_cp = np.unique(cp, return_inverse=True)
    held_most = np.minimum(n // (t * cp * dp), most) * dp
    rate = 0.0 + held_most[:, None, None] / fs
    lo, hi = np.minimum(np.inf, fs), np.maximum(-np.inf, fs)
    held = 0.0 + np.ones(len(t))[:, None, None] * fs
    pp = np.ones(len(t), np.int64)
    m = np.floor(gb / fb.mbs)[None, :, None] / dp[:, None, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a0 = np.maximum((L * dp)[:, None, None] / rate, hi)
        s0 = L * lo - fb.slot_c * (hi - lo)
        z1 = (m - 1) * np.maximum(a0, 0.0) + held + (L - pp)[:, None, None] * lo
        zv = np.full_like(z1, np.inf)
        a0v, deep_ok, zg = interleaved_a(L, m, np.minimum(n // (t * cp * dp), most), lo, hi, fb.slot_c, fb.v_max)
        deep = (m >= pp[:, None, None]) & deep_ok
        if fb.v_max >= 2:
            for v in (2.0, float(fb.v_max)):
                zv = np.where(deep, np.minimum(zv, (m - 1 / v) * np.maximum(a0v, 0.0) + s0 / v), zv)
            zv = np.maximum(zv, zg)
        z = np.minimum(z1, zv)
    valid = (m >= 1) & (m == np.floor(m)) & ~np.isnan(z) & (pp <= most)[:, None, None]
    # each row's bound, times its family's factor (of cp: one group, both depths), and each
    # family's least over its rows (every family has a row: stage_families keeps none without)
    factor = np.array([fb.factor(fams[0].used, c, (1, 2)) for c in cps.tolist()])[by_cp.ravel()]
    bounds = np.where(valid, z, np.inf).max(axis=2).min(axis=1) * factor
    starts = np.cumsum([0] + [len(f.tps[0]) for f in fams[:-1]])
    return {fam: (lb, True) for fam, lb in zip(fams, np.minimum.reduceat(bounds, starts).tolist())}


def interleaved_a(L: int, m: np.ndarray, places: np.ndarray, f: np.ndarray, hi: np.ndarray, slots: float,
                  v_max: int) -> tuple:
    """(A's floor at v > 1 (choices, mbs, scenarios), whether some depth runs v > 1 (choices,
    mbs, 1), a floor of Z_v itself (choices, mbs, scenarios)) of the tp choices of a one-group
    stage family under search.idle_gpus: `m` the lone class's micro-batch count per micro-batch
    size ((1 or choices, mbs, 1)), `places` the stages each choice's group holds (choices,:
    min(N / (t cp dp), the depth's cap)), `f` its layer floor and `hi` the largest (choices,
    mbs, scenarios), `slots` the layer slots the job may run (0 or 2) and `v_max` the module's.
    A configuration at v > 1 is a pipeline of pp stages, 2 <= pp <= places (space.
    virtual_stage_values: every class has a pipeline), whose count m is a multiple of pp
    (space._count_form_of: Megatron-LM's interleaved schedule), so pp <= P(m), the largest
    divisor of m in [2, places] (none: no configuration at v > 1), and v pp <= L + slots
    (space.slot_modes_of: every stage holds a chunk), v <= v_max. Its stages all sit on the
    group, each at least its floor f, so A = min over integer splits of max_s (a_s + n_s t_s)
    >= max_s n_s f >= L f / pp >= L f / P(m), with the slots' relaxation too (n_s the model's
    own layers, sum L: stage_bound_rows), and A >= hi as _combos reads it; and on one group
    S >= S0 = L f (t_min = t_max). So its Z_v = (m - 1/v) A + S / v >= L f ((m - 1/v) / pp +
    1 / v), whose least over its v (linear in 1/v) is at v = 2 or the most v its pp admits:
    the least of that over the depths pp the count admits (G, _interleaved_g) times L f is at
    most the Z_v of every configuration at v > 1. The module's A0 = L f / places is at most
    these: the bound at v > 1 only rises (Llama-3.1 405B on 16,384 H100 at dp 2048 and tp 2:
    one micro-batch a replica, so no depth runs v > 1, where A0 had read a 4-stage interleaved
    pipeline; GPT-3 175B on 1,024 A100 at dp 16, cp 2, tp 1: 96 micro-batches, 32 stages at v
    <= 3, where v_max had read the bubble away)."""
    rows = max(len(places), m.shape[0])
    counts = np.broadcast_to(np.where(m == np.floor(m), m, 0)[..., 0], (rows, m.shape[1])).astype(np.int64)
    cap = np.broadcast_to(np.asarray(places, np.int64)[:, None], counts.shape)
    width = int(cap.max(initial=0)) + 1  # (each (count, places) pair as one integer: np.unique in 1-D)
    keys, inverse = np.unique((counts * width + cap).ravel(), return_inverse=True)
    read = [(_deepest(x, c), _interleaved_g(x, c, L, int(slots), v_max))
            for x, c in zip((keys // width).tolist(), (keys % width).tolist())]
    most = np.array([d for d, _ in read], np.int64)[inverse.ravel()].reshape(counts.shape)[..., None]
    g = np.array([x for _, x in read])[inverse.ravel()].reshape(counts.shape)[..., None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = np.maximum(L * f / np.where(most >= 2, most, 1), hi)
        zg = (L * f) * g
    return a, most >= 2, zg


def _deepest(count: int, places: int) -> int:
    """The largest divisor of `count` in [2, places], 0 where none (interleaved_a)."""
    return next((d for d in range(min(count, places), 1, -1) if count % d == 0), 0)


@functools.lru_cache(maxsize=65536)
def _interleaved_g(count: int, places: int, layers: int, slots: int, v_max: int) -> float:
    """G of interleaved_a: the least over the depths pp in [2, places] dividing `count` and the
    v in [2, min(v_max, (layers + slots) // pp)] of (count - 1/v) / pp + 1/v (at v = 2 or the
    most: linear in 1/v); inf where no (pp, v) is left."""
    best = float("inf")
    for pp in range(2, min(count, places) + 1):
        most = min(v_max, (layers + slots) // pp)
        if count % pp or most < 2:
            continue
        best = min(best, *((count - 1 / v) / pp + 1 / v for v in (2, most)))
    return best
