"""Per-operator tensor partitions per replica class and group, inside the class planner
(search.tensor_partitions on any cluster, issue 12).

Every (replica class k, group g hosting some of k's stages) chooses one layer plan
(cost/partition.py) for k's stages on g, recorded as `ReplicaClass.partitions`. A candidate of
the class planner (solver/search.py) is an outer configuration plus one plan per
(k, g); its inner problem (micro-batches, split, recompute) is unchanged.

Exactness. cost/coefficients.build prices each stage from its own site's layer terms, and
class_placement gives each group its own site, so a stage's coefficients depend on the layer
plan of its own (k, g) only, monotonically in the plan's vector as solver/partition_plans.py's
docstring shows. So per (k, g) only the plans no other plan dominates on the site of every
scenario the objective reads are kept (partition_plans.joint_front; Megatron's plan is
always listed, as on one group), and no combination is built before it is bounded. Bounds
are solver/bounds/one_class.tight_class_terms (memory caps, forced recompute; many rows at once), per
class, then combined over classes and scenarios as batched.lower_bounds_s does
(_combination_bounds):

1. optimistic: every (k, g) at partition_plans.optimistic_terms of all its plans gives
   coefficients below those of every combination; memory-infeasible: none fits. Otherwise
   their bound keys the outer's combinations as one node of the planner's branch and bound,
   expanded (steps 2 and 3) only when it can still beat the incumbent U found by then. When
   it first comes up it is keyed again (root_key_again, _split_bound): each open choice's
   plans split by their replicated parameters, each group at its own optimistic terms, and
   every combination of groups bounded as step 2 bounds buckets; dropped above U, pushed back
   where the key rose (the optimistic terms take a layer's time from the token-split plans,
   which replicate weights, and its memory from those that do not);
2. per (k, g): its kept plans sorted by layer time and bounded in buckets of LEVELS[0]
   plans (a bucket's optimistic terms, every other choice optimistic); then the surviving
   buckets of every choice together, as step 3 bounds plans (a combination of buckets bounds
   every combination of their plans). Each surviving combination of buckets is a node of the
   planner's branch and bound keyed by its bound (a Subset), expanded only when it comes up
   and can still win: its buckets split into those of the next level and bounded again, and
   at the last level each plan priced once (cost/coefficients.build, kept for every node)
   and bounded alone; above U or memory-infeasible: dropped. A bucket's optimistic terms
   take its time from one plan and its memory from another (the fastest plans replicate
   weights, so hold fewer layers), so a node that comes up is first keyed again (_linked)
   with each class's slowest stage and stages' sum read over every combination of its
   buckets' plans, each plan priced (solver/bounds/plan_bottleneck.py: exact, group by group;
   only the plans no other of the bucket is below in what the stage levels read), and its
   slowest sync at the buckets' sync coefficients with each plan's own layer caps (read in
   one batch with the outer's other nodes whose plans are all priced by then, _linked_now;
   a node holding buckets whose plans are priced beside others whose plans are not is read
   first with those priced only, each other bucket as one plan at its coefficients, and
   dropped unpriced when that is above U: _pseudo_steps);
   its children are keyed so from the start (_linked_terms); the root's are not (their plans
   would be priced for nodes that never come up). On the three-type, two-site row the keys of the
   lowest first-level nodes of 8 configurations rose from 15.56-15.65 s to 16.22-16.51 s
   (13-27 ms each), the least bound over each one's combinations of plans being 16.41-16.63 s
   (measured after 20 s). (Bounding every combination of
   every surviving plan at once held 323 x 939 x 67 = 2e7 rows on the three-type, two-site
   Llama-3 70B with partitions, 6-7 GB, against an early incumbent of 18.0 s that the
   lowest-bound buckets, listed first, soon lowered);
3. every combination of a last-level node's remaining plans bounded at once (numpy): the per-stage arrays of
   a class come row by row from its groups' plan builds (stage s's rows from its own group's
   plan); only those that can still win get assembled coefficients (nothing is priced again)
   and become candidates, keyed by that bound. A lone class (its micro-batch count fixed)
   must also pass one_class.coupled_above, which bounds its slowest stage and slowest sync
   together (on a mixed cluster the split that balances stage times can load the stages
   whose gradient sync is slow: measured, most combinations the bound alone kept are cut).

Keys are (bound, outer index, combination index), the index counting in mixed radix over the
(k, g) choices in (class, group) order, each numbered Megatron first and then its kept plans:
one class on one group lists the homogeneous planner's (outer, layer plan) pairs in the same
order (partition_plans.partition_coefficients). In the planner, a lone class is then tried
against the incumbent by the exact DP with a cutoff before it is solved.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import math
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from paraplan.cost import partition as P
from paraplan.cost.coefficients import (StageCoefficients, backward_lowers_only_syncs, build, build_plans,
                                        build_and_backward_syncs, build_syncs)
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost.class_coefficients import class_layer_fn, on_group
from paraplan.cost.objective import capped_memory, copied_with, scaled_times
from paraplan.cost.trust import objective_factor_of
from paraplan.solver.bounds.one_class import (BOTTLENECK_BLOCK_FLOATS, FLOAT_SAFETY, coupled_above,
                                               memory_infeasible, stage_levels, tight_class_terms,
                                               tight_class_terms_of_blocks)
from paraplan.solver.bounds.plan_bottleneck import (group_steps, group_sums, held_chunks, least_levels_picked,
                                                    least_sums_picked, level_front, sync_levels)
from paraplan.solver.bounds.batched import relaxed_s
from paraplan.solver.bounds.fill_drain import priced_bounds_s
from paraplan.solver.partition_plans import (elementwise_min, enabled, joint_front, stage_arrays,
                                             optimistic_terms, plan_rows, plans_per_outer, table_terms)

REL_TOL = 1e-9  # as solver/planner.REL_TOL: a bound equal to U within it is not pruned
LEVELS = (32, 8)  # plans per bucket at each level of step 2, largest first
SPLIT_SPANS = 4  # spans of replicated-parameter groups root_key_again bounds first, and per split
# (_split_bound; on the three-type, two-site row 2, 3 and 8 read slower: more rounds, or more builds)
GRID_CAP = 200_000  # bucket combinations step 2 bounds at once (numpy rows)
MEGATRON = ()  # a (class, group) choice that ReplicaClass.partitions leaves out
# the arrays of a stage one_class.stage_levels reads (with capacity_bytes): memory, as priced on
# the first scenario (it does not depend on the network), and times, on each (_class_arrays)
_MEMORY = ("layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes", "stage_mem_bytes")
_TIMES = ("stage_time_s", "layer_time_s", "recompute_time_s")
_SYNCS = ("stage_sync_time_s", "layer_sync_time_s")  # beside them, what tight_class_terms reads


@dataclass
class Listing:
    """What expanding one outer configuration gave: candidates (lower bound, combination index,
    coefficients [scenario][class], partitions per class in ReplicaClass.partitions form) and
    the combinations pruned."""

    candidates: list = field(default_factory=list)
    pruned_by_bound: int = 0
    pruned_by_memory: int = 0
    pruned_by_dominance: int = 0
    nodes: list = field(default_factory=list)  # (bound, Subset) still to expand


@dataclass(frozen=True)
class Subset:
    """Some combinations of an outer's layer plans: per (k, g) choice the plan positions it may
    take (0 first where Megatron's is one), cut into buckets of LEVELS[level] when expanded
    (single plans past the last level); `bound` at most each combination's (-inf: unbounded)."""

    sets: tuple
    level: int
    bound: float
    linked: bool = False  # `bound` reads each class's slowest stage over its plans (OuterChoices._linked)

    @property
    def weight(self) -> int:
        """Its combinations, all-Megatron left out (the outer's own candidate)."""
        return math.prod(len(x) for x in self.sets) - all(x[0] == 0 for x in self.sets)


def _recorded(plan: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((op, plan[op]) for op in P.PLAN_OPS if op in plan)


def _kept_plans(cg, where, net) -> tuple[list, list[np.ndarray]]:
    """The plans of a choice beyond Megatron's (partition_plans.joint_front, in its order), in
    ReplicaClass.partitions form, and their rows per triple of `where`; kept per front (outers
    that share their tables and sync thresholds share it: recording the plans of each root
    again was about 8% of a root's expansion on the three-type, two-site row)."""
    key, front, front_rows = joint_front(cg, where, net)
    hit = _KEPT.get(key)
    if hit is None or hit[0] is not front:
        mine = [i for i, p in enumerate(front) if not P.is_megatron(p)]
        if len(_KEPT) >= _KEPT_MAX:
            _KEPT.clear()
        hit = _KEPT[key] = (front, [_recorded(front[i]) for i in mine], np.array(mine, int))
    return list(hit[1]), [r[hit[2]] for r in front_rows]


# _kept_plans' by joint_front's key, each holding its front (so its identity is checked)
_KEPT: dict = {}
_KEPT_MAX = 4096


def _const(terms):
    return lambda *_: terms


def _assemble(base: StageCoefficients, parts) -> StageCoefficients:
    """`base` with the stage rows of each (mask, coefficients) in `parts` taken from those."""
    if not parts:
        return base
    fields = stage_arrays(base)
    arrays = {f: getattr(base, f).copy() for f in fields}
    for mask, c in parts:
        for f in fields:
            arrays[f][mask] = getattr(c, f)[mask]
    return dataclasses.replace(base, **arrays)


def _choices(o):
    """(k, g) pairs in (class, ascending group) order."""
    return [(k, g) for k, c in enumerate(o.classes) for g in sorted(set(c.stage_groups))]


def _on_group(co, o, g: int):
    """`co` (an outer of `o`) with group g's tensor-parallel degree (ClassOuter.tp_of): the
    layer plans of a (class, group) choice are those of its own tp group."""
    t = o.tp_of(g)
    return co if t == co.tp else dataclasses.replace(co, tp=t)


def partition_count(inst, o) -> int:
    """Number of layer-plan combinations of outer `o` in the declared space (1 without
    per-operator partitions): every (class, group) takes any plan of its tp group."""
    if not enabled(inst):
        return 1
    # what the count reads of `o` (_counted): its classes' groups, the tp of each group, its
    # ZeRO stage and sp flag; the classes tuple is a layout's, shared by its outers, so kept by
    # identity (the search asks per outer, 54,650 times on 32 A100 + 32 H100 with partitions
    # and the three layout options: about 4 us each to read _counted's key)
    key = (id(o.classes), o.tp, o.group_tp, o.zero, o.sequence_parallel)
    return _BY_SHAPE.read(key, o.classes, _counted, inst, o)


def _counted(inst, o) -> int:
    """partition_count, read: a choice's plans read only its tp group, ZeRO stage (token
    splits) and sp flag (partition_plans.plans_per_outer), counted once per such key, not per
    outer (the three-type, two-site Llama-3 70B counts 92,866 outers, each several times)."""
    tps = tuple(o.tp_of(g) for _, g in _choices(o))
    key = (tps, o.zero, o.sequence_parallel)
    got = _COUNTS.get(key)
    if got is None:
        got = _COUNTS[key] = math.prod(plans_per_outer(inst, _on_group(o, o, g)) for _, g in _choices(o))
    return got


_COUNTS: dict[tuple, int] = {}  # _counted's, by (tp per choice, ZeRO stage, sp)
# partition_count's by (the classes' identity, tp, group tps, ZeRO stage, sp), each entry
# holding its classes tuple
_BY_SHAPE = IdentityCache(4096)


@functools.lru_cache(maxsize=4096)
def _spans_of(a: int, b: int, parts: int) -> tuple[tuple[int, int], ...]:
    """Groups a .. b - 1 (of _plan_groups' ascending replicated parameters) cut into at most
    `parts` spans of consecutive groups, (first, past the last) each; kept per (a, b, parts)
    (np.linspace cost about 20 us, asked per open choice of every root the re-key reads)."""
    cuts = np.linspace(a, b, min(parts, b - a) + 1).round().astype(int).tolist()
    return tuple(zip(cuts[:-1], cuts[1:]))


class _HashedKey(tuple):
    """A tuple whose hash is computed once (a class key's placement and outer hash their nested
    records field by field on every read: about 5 us a key)."""

    def __new__(cls, items: tuple):
        out = super().__new__(cls, items)
        out.hash_value = tuple.__hash__(out)
        return out

    def __hash__(self) -> int:
        return self.hash_value


def _interned(memo: dict, key: tuple) -> tuple:
    """`key` as the memo's first copy of it (hash kept): the memo's keys that hold a class key
    are then hashed from the kept hash and compared by identity, not field by field (issue 33:
    row 3 reads about 22,000 of them)."""
    got = _HashedKey(key)
    return memo.setdefault(("class key", got), got)


class _Builds(dict):
    """A dict whose missing entries are built by `make(*key)` when first read, then kept."""

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key):
        got = self[key] = self.make(*key)
        return got


class OuterChoices:
    """The layer-plan choices of one outer configuration: its optimistic coefficients (step 1
    of the module docstring) and, on demand, the combinations that can still win (`expand`).

    `placed(i, k)`: class k's Placement on scenario i; `co`: each class's priced Outer
    (cost/class_coefficients.class_outers); `problem_of(coeffs)`: the inner problem
    (formulations/multiclass.MultiClassProblem) of coefficients [scenario position][class],
    already scaled by the quantile objective's factor (`factor`)."""

    def __init__(self, inst, o, scenarios: list[int], placed, co: list, problem_of,
                 uniform: bool = False, net: NetEfficiency = NetEfficiency(), memo: dict | None = None):
        self.inst, self.o, self.scenarios, self.placed, self.net = inst, o, scenarios, placed, net
        # what a class's optimistic terms read, kept across the outers of one search that share
        # the class (_class_key): `memo`, the search's, or this outer's own
        self.memo = {} if memo is None else memo
        self.problem_of, self.uniform = problem_of, uniform
        self.co = co
        self.keys = keys = _choices(o)
        self.cg = {(k, g): _on_group(self.co[k], o, g) for k, g in keys}  # per choice: its tp
        self.first_stage = {(k, g): o.classes[k].stage_groups.index(g) for k, g in keys}
        # per choice: which of its class's stages lie on its group (read once its plans are)
        self.masks = _Builds(lambda k, g: np.array(o.classes[k].stage_groups) == g)
        # (scenario, group) -> the group's instance alone, made when first read: most outers'
        # optimistic builds read only their open choices' (and those hit the memo)
        self.ginst = _Builds(lambda i, g: inst.group_alone(g, inst.scenarios[i].cluster))
        # (k, g) choices with more than Megatron's plan
        self.open = [(k, g) for k, g in keys if P.spatial_temporal_allowed(self.cg[k, g])]
        self.total = partition_count(inst, o)  # combinations, dominated ones included
        self.opt: dict = {}
        # (scenario position, class) -> the class's all-Megatron build, built when first read: a
        # class with open choices reads it only once its combinations are expanded (_step), which
        # most outers' never are (their optimistic bound cannot win)
        self.meg = _Builds(self._megatron)
        self.problem = None  # the MultiClassProblem of the optimistic coefficients
        self._opt_cache: dict = {}
        # the quantile objective's factor and the memory tier's cap (search.problem_of): every
        # build here is scaled and capped so, so the bounds and the listed candidates are in the
        # objective's seconds; `problem_of` takes them as they are
        self.factor = objective_factor_of(inst, o)
        self._keys: dict = {}  # _class_key's, per (scenario position, class)
        self.root_key = -math.inf  # optimistic_bound's
        self.split_read = False  # whether root_key_again was read
        self._plan_group_cache: dict = {}  # _groups_of's, per open choice
        # (the re-key's bar, per open choice the group positions of _plan_groups some combination
        # it read at most that bar may hold) (_least_and_live); None: not read, or every group
        self.live_groups: tuple | None = None

    def _megatron(self, si: int, k: int) -> StageCoefficients:
        """Class k's all-Megatron build on scenario position si, kept in the memo (_class_key)."""
        key = ("megatron", self._class_key(si, k))
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._build(self.inst, self.co[k], self.net, self.inst.search.memory_reserve_bytes,
                                               placement=self.placed(self.scenarios[si], k))
        return got

    def _build(self, *args, **kwargs) -> StageCoefficients:
        s = self.inst.search
        return capped_memory(scaled_times(build(*args, **kwargs), self.factor), s.memory_fill_cap,
                             s.memory_reserve_bytes)

    def _build_plans(self, i: int, k: int, layer_fns) -> list[StageCoefficients]:
        """_build of class k on scenario i under each of `layer_fns`, in one pass (build_plans)."""
        s = self.inst.search
        return [capped_memory(scaled_times(c, self.factor), s.memory_fill_cap, s.memory_reserve_bytes)
                for c in build_plans(self.inst, self.co[k], layer_fns, self.net, s.memory_reserve_bytes,
                                     placement=self.placed(i, k))]

    def _where(self, k: int, g: int) -> list:
        """(instance priced with, site, ring ranks) of choice (k, g) per scenario."""
        return [(self.ginst[i, g], self.placed(i, k).sites[self.first_stage[k, g]],
                 self.placed(i, k).dp_ranks) for i in self.scenarios]

    def _layer_fn(self, i: int, k: int, by_group: dict):
        return class_layer_fn(self.placed(i, k), self.o.classes[k].stage_groups, by_group)

    def optimistic(self, stop_unfit: bool = False) -> list[list[StageCoefficients]] | None:
        """Step 1: every open choice at the optimistic terms of all its plans (the minimum over
        all plans is the minimum over the non-dominated ones; the largest backward time can only
        be larger, which lowers the bound), coefficients [scenario position][class].
        `stop_unfit`: None as soon as a class on the first scenario fits no split at these
        coefficients (one_class.memory_infeasible: then no combination fits, and the caller
        drops them all), the classes after it not built (issue 33: these builds were 42% of
        the three-type, two-site row's samples). A class's are kept in the search's memo by
        what they read (_class_key)."""
        for si in range(len(self.scenarios)):
            for k in range(len(self.o.classes)):
                key = ("optimistic", self._class_key(si, k))
                got = self.memo.get(key)
                if got is None:
                    got = self.memo[key] = self._optimistic_class(si, k)
                self.opt[si, k] = got[0]
                if stop_unfit and si == 0 and got[1]:
                    return None
        self.problem = self.problem_of(self._with({}))
        return self._with({})

    def _optimistic_class(self, si: int, k: int) -> tuple[StageCoefficients, bool]:
        """Class k's optimistic coefficients on scenario position si (optimistic), and whether
        they fit no split (one_class.memory_infeasible)."""
        lo_fns, hi_fns = {}, {}
        i = self.scenarios[si]
        sites = self.placed(i, k).sites
        for kk, g in self.open:
            if kk != k:
                continue
            # (_where's entry for scenario i alone)
            table = P.table_for(self.ginst[i, g], self.cg[k, g], sites[self.first_stage[k, g]], self.net)
            lo_t, hi_t = table_terms(table, P.token_split_allowed(self.cg[k, g]))
            lo_fns[g], hi_fns[g] = _const(lo_t), _const(hi_t)
        c = self._below(i, k, lo_fns, hi_fns) if lo_fns else self.meg[si, k]
        return c, memory_infeasible(c)

    def _class_key(self, si: int, k: int) -> tuple:
        """What class k's builds on scenario position si read beyond the search's instance: its
        priced Outer, its placement (by value: outers that differ in another class's shape
        often place it alike), its groups and each one's tp (its choices' tables: the group's
        instance, its tp group, the site of its first stage), the quantile factor the builds
        are scaled by and the network efficiency. On 32 A100 + 32 H100 with partitions and the
        three layout options the 9,742 classes of the 3,613 outers read set up are 3,743 keys."""
        got = self._keys.get((si, k))
        if got is None:
            i = self.scenarios[si]
            got = self._keys[si, k] = _interned(self.memo, (
                i, self.co[k], self.placed(i, k), self.o.classes[k].stage_groups,
                tuple(self.cg[x].tp for x in self.keys if x[0] == k), self.factor, self.net))
        return got

    def optimistic_bound(self) -> float:
        """A lower bound of every combination (step 1), with memory caps and forced recompute
        (tight_class_terms); optimistic() first."""
        self.root_key = float(self._combination_bounds([self._opt_terms(k) for k in range(len(self.o.classes))])[0])
        return self.root_key

    def priced_floors(self, nodes: list) -> np.ndarray:
        """Per node of `nodes` (None: the root's, every combination), for a lone class of the
        worst-case objective, a lower bound of the optimum of each of its combinations:
        fill_drain.priced_bounds_s (the slowest stage and the stages' sum read together, as
        search._cannot_win_alone reads a priced candidate) at coefficients below each
        combination's on every array (the root's: the optimistic ones; a node's: its class
        assembled from _node_store, each choice's stages at its entry's coefficients), the
        worst over the scenarios, all in one read (one at a time, 1.6 ms each on the
        three-type, two-site row; 0.24 ms a row in a batch). Below each combination's own
        bound: that reads a_s + n_s t_s and d_s + n_s g_s, each non-decreasing in every
        array, over the splits within the caps memory allows, and memory below raises the
        caps (more splits, a least no larger). -inf where it does not apply: several classes,
        a weighted objective, a zero-bubble schedule (its drain credit, read at savings below
        a plan's, could be smaller than the plan's), or a node with a bucket not priced yet
        (none is priced for it). optimistic() first."""
        out = np.full(len(nodes), -math.inf)
        at, rows = _floor_rows(self, nodes)
        if rows:
            out[at] = priced_bounds_s(rows, self.problem.allow_full_recompute).reshape(-1, len(self.scenarios)).max(1)
        return out

    def forget(self, node: "Subset") -> None:
        """Drop what is kept for `node`, not to be expanded (search's _LayerPlans: its linked
        key is then never read, alone or in a batch)."""
        for kept in (self.unlinked, self.kid_terms, self.linked_keys):
            kept.pop(node.sets, None)

    def root_key_again(self, upper_s: float) -> float:
        """The root's key read again before it is expanded (_split_bound, once): at least
        optimistic_bound's, at most every combination's; inf where none can beat `upper_s`.
        A root above the bar is then dropped before its plans are recorded and bucketed (the
        search's _LayerPlans.expand; expand itself does not read it)."""
        self.split_read = True
        return max(self.root_key, self._split_bound(upper_s * (1 + REL_TOL)))

    def _split_bound(self, cut: float) -> float:
        """A lower bound of every combination beyond all-Megatron, read before any plan is
        recorded (step 1 split): each open choice's plans (every plan of its table, a superset
        of the kept ones) split by their replicated parameters into groups, each group read at
        its optimistic terms (partition_plans.optimistic_coefficients: below each of its
        plans'), and every combination of the groups (and Megatron's build) bounded as step 2
        bounds a combination of buckets: the least over them is at most every combination's
        bound. The optimistic key takes a layer's time from the token-split plans, which
        replicate weights, and its memory from those that do not; a group's plans hold one
        replicated-parameter count, so its time and its state bytes come from plans alike.

        Read coarse first: each choice's groups in SPLIT_SPANS spans of consecutive groups,
        each span at the optimistic terms of all its plans (below each of its groups': the
        terms are the least over the span's plans, the backward the largest), the spans each
        choice keeps with every other choice optimistic (_class_spans) bounded in every
        combination (_live_spans); a span is split (into SPLIT_SPANS spans again, down to
        single groups) only where some combination holding it may fit and is bounded at most
        `cut`. A combination of groups lies in the combination of their spans, whose bound is
        at most its own (tight_class_terms, coupled_above and batched.relaxed_s are
        non-decreasing in every array), so a span left whole holds only combinations above
        `cut`: where the least is at most `cut` it is the same float as with every kept group
        split (tests/oracles/class_partitions.class_kept_groups,
        tests/partition/test_parts10_coarse_spans.py), and above it
        the value is above it too. On the three-type, two-site row 449 of the 500 roots the
        re-key drops are dropped on their spans, none of their groups built (span builds
        16,624 -> 8,000)."""
        spans = {x: self._groups_of(x)[3] for x in self.open}
        while True:
            kept, store = self._kept_spans(spans, cut)
            wide = math.prod(len(v) for v in kept.values()) > GRID_CAP
            if all(b - a == 1 for x in self.open for a, b in kept[x][1:]):
                return self.root_key if wide else self._least_and_live(kept, store, cut)
            # past GRID_CAP every kept span is split unread (a span may be kept where none of its
            # groups is: the groups' grid may be within the cap)
            live = {x: kept[x][1:] for x in self.open} if wide else self._live_spans(kept, store, cut)
            if not isinstance(live, dict):
                return live
            parts = max(SPLIT_SPANS, 2)
            spans = {x: [sub for a, b in live[x] for sub in _spans_of(a, b, parts)] for x in self.open}

    def _kept_spans(self, spans: dict, cut: float) -> tuple[dict, dict]:
        """(kept, store) of the spans of spans[x] each open choice x keeps (_class_spans): kept[x]
        Megatron's 0 and then the spans, store[k, g, span] their coefficients per scenario."""
        store, kept = {}, {x: [0] for x in self.keys}
        for k in sorted({x[0] for x in self.open}):
            for x, got in self._class_spans(k, [x for x in self.open if x[0] == k], spans, cut).items():
                for span, c in got:
                    store[x[0], x[1], span] = c
                    kept[x].append(span)
        return kept, store

    def _least_and_live(self, kept: dict, store: dict, cut: float) -> float:
        """_groups_least, and where it is at most `cut`, per open choice the groups some
        combination at most `cut` may hold (live_groups: the root's plans in no other group are
        in no combination that can win, _root)."""
        live: dict = {}
        got = self._groups_least(kept, store, cut, live)
        if got <= cut:
            self.live_groups = cut, {x: {a for a, _ in live.get(x, [])} for x in self.open}
        return got

    def _groups_least(self, kept: dict, store: dict, cut: float, live: dict | None = None) -> float:
        """_split_bound's least over the combinations of single groups kept[x] (_grid_least; a
        zero-bubble schedule's: _grid's bound of each). `live`: filled as _grid_least fills it."""
        if any(self.meg[si, k].layer_drain_saving_s.size for si in range(len(self.scenarios))
               for k in range(len(self.o.classes))):
            grid, picks, fits, quick, megatron = self._grid(kept, store, cut)  # (_grid_least: its floors)
            alive = fits & ~megatron
            if live is not None:
                live.update(self._entries_in(kept, grid, picks, alive & (quick <= cut)))
            return float(quick[alive].min()) if alive.any() else math.inf
        return self._grid_least(kept, store, cut, live)

    def _live_spans(self, kept: dict, store: dict, cut: float) -> dict | float:
        """Per open choice x, the spans of kept[x] (entries beyond Megatron's, (first group,
        past the last)) that some combination of _grid may fit and bounds at most `cut` holds;
        where none does, the least bound of those that may fit (inf: none), a value above
        `cut` (_split_bound)."""
        grid, picks, fits, quick, megatron = self._grid(kept, store, cut)
        alive = fits & ~megatron
        live = alive & (quick <= cut)
        if not live.any():
            return float(quick[alive].min()) if alive.any() else math.inf
        return self._entries_in(kept, grid, picks, live)

    def _span_key(self, x, values: np.ndarray, a: int, b: int) -> tuple:
        """The memo's key of _span_coeffs(x, .., values, a, b): what class k's builds read
        (_class_key, per scenario), the group and the span's least and largest counts."""
        k, g = x
        return ("split", tuple(self._class_key(si, k) for si in range(len(self.scenarios))), g,
                float(values[a]), float(values[b - 1]))

    def _build_spans(self, k: int, items: list) -> None:
        """_span_coeffs of each (x, a, b) of `items` (choices of class k) not in the memo yet,
        built into it in one batch per scenario (_spans_below: the same floats as one _below
        each, tests/partition/test_parts15_span_batch.py). One build at a time cost a lookup
        of the outer's priced parts (cost/coefficients._outer_parts, hashing the Outer) and a
        re-read of the layer costs at the backward per span."""
        todo: dict = {}
        for x, a, b in items:
            per, rep, values, _ = self._groups_of(x)
            key = self._span_key(x, values, a, b)
            if key not in todo and key not in self.memo:
                todo[key] = (x[1], self._span_terms(per, rep, values, a, b))
        if not todo:
            return
        built = [self._spans_below(si, k, [(g, terms[si]) for g, terms in todo.values()])
                 for si in range(len(self.scenarios))]
        for r, key in enumerate(todo):
            self.memo[key] = [per_si[r] for per_si in built]

    def _spans_below(self, si: int, k: int, batch: list) -> list[StageCoefficients]:
        """_below(i, k, {g: lo}, {g: hi}) on scenario position si of each (g, (lo, hi)) of
        `batch` (LayerTerms), in one build_plans read (and one build_syncs read of the
        backwards where those lower only the syncs), float for float: build_plans and
        build_syncs give each layer function's numbers as one build of it alone, and
        build_and_backward_syncs' syncs are build_syncs' (cost/coefficients.py)."""
        i = self.scenarios[si]
        lo_fns = [self._layer_fn(i, k, {g: _const(lo)}) for g, (lo, _) in batch]
        hi_fns = [self._layer_fn(i, k, {g: _const(hi)}) for g, (_, hi) in batch]
        if not backward_lowers_only_syncs(self.inst, self.co[k]):
            built = self._build_plans(i, k, [f for pair in zip(lo_fns, hi_fns) for f in pair])
            return [elementwise_min(lo, hi) for lo, hi in zip(built[::2], built[1::2])]
        s = self.inst.search
        syncs = build_syncs(self.inst, self.co[k], hi_fns, self.net, s.memory_reserve_bytes,
                            placement=self.placed(i, k))
        return [dataclasses.replace(lo, layer_sync_time_s=np.minimum(lo.layer_sync_time_s, layer_sync * self.factor),
                                    stage_sync_time_s=np.minimum(lo.stage_sync_time_s, stage_sync * self.factor))
                for lo, (layer_sync, stage_sync) in zip(self._build_plans(i, k, lo_fns), syncs)]

    # _span_terms' by (each scenario's table and plan rows, the span's counts), each entry holding
    # those tables and rows (so that their ids name them while it lives)
    _SPAN_TERMS: dict = {}
    _SPAN_TERMS_MAX = 16384

    @staticmethod
    def _span_terms(per: list, rep: np.ndarray, values: np.ndarray, a: int, b: int) -> list:
        """Per scenario, partition_plans.optimistic_terms of the plans of its table (`per`:
        (table, plan rows) each, _plan_groups) whose replicated parameters are values[a:b],
        kept by the tables and rows: the outers that share a group's tables read the same
        spans (on the three-type, two-site row 5,004 span builds read 156 distinct terms), and
        one LayerTerms object each lets cost/coefficients keep its layer costs by identity."""
        owners = tuple(o for pair in per for o in pair)
        key = (tuple(id(o) for o in owners), float(values[a]), float(values[b - 1]))
        kept = OuterChoices._SPAN_TERMS
        hit = kept.get(key)
        if hit is not None and all(h is o for h, o in zip(hit[0], owners)):
            return hit[1]
        mask = (rep >= values[a]) & (rep <= values[b - 1])
        got = [optimistic_terms(t, r[mask]) for t, r in per]
        if len(kept) >= OuterChoices._SPAN_TERMS_MAX:
            kept.clear()
        kept[key] = (owners, got)
        return got

    def _entries_in(self, kept: dict, grid: np.ndarray, picks: list, rows: np.ndarray) -> dict:
        """Per open choice x, the entries of kept[x] beyond Megatron's that the combinations of
        `grid` at `rows` (a mask) hold."""
        out = {}
        for k in range(len(self.o.classes)):
            used = picks[k][np.unique(grid[rows, k])]
            for col, x in enumerate([y for y in self.keys if y[0] == k]):
                if x in self.open:
                    out[x] = [kept[x][j] for j in np.unique(used[:, col]).tolist() if j]
        return out

    def _grid_least(self, kept: dict, store: dict, cut: float, live: dict | None = None) -> float:
        """The least of _grid's bound over its combinations that may fit, all-Megatron's left
        out (inf where none; where it is above `cut`, some value above it), each class's terms
        read only for the combinations that can hold it. Each class's picks are first keyed by
        floors of their terms (_pick_floors: at most each pick's), combined as _grid combines
        terms (batched.relaxed_s is non-decreasing in every A, S and D: raising one raises
        the least Z of its bound, which reads each Z - D - S_k / v >= 0); then, in rounds, the
        lowest combinations not read yet have their classes' own terms read (_class_terms,
        and for a lone class one_class.coupled_above as _grid reads it), until none left unread
        is keyed at most the least read (nor at most `cut`): each of those is at least its key,
        so the least read is _grid's least. On the three-type, two-site row the re-key's grids
        held 1,000-3,800 picks of one class, every one read before. `live`: where the least is
        at most `cut`, filled with _entries_in of the combinations not proved above it (each
        value a lower bound of its own)."""
        K = len(self.o.classes)
        members, picks, grid, dead = self._picks_grid(kept)  # dead: all-Megatron, then unfit
        terms = [self._pick_floors(k, members[k], kept, picks[k], store) for k in range(K)]
        read = [np.zeros(len(pk), bool) for pk in picks]
        coupled = self._coupled_reads()
        batch, checked = 16, np.zeros(len(grid), bool)  # checked: coupled_above read
        while True:
            dead |= ~np.all([terms[k][3][grid[:, k]] for k in range(K)], axis=0)
            value = np.where(dead, np.inf, self._combination_bounds(
                [tuple(x[grid[:, k]] for x in terms[k][:3]) for k in range(K)]))
            done = np.all([read[k][grid[:, k]] for k in range(K)], axis=0)
            # a row's value is its own once read and, for a lone class at most `cut`, checked
            final = done & (checked | (value > cut)) if coupled else done
            best = float(value[final].min()) if final.any() else math.inf
            todo = np.flatnonzero(~final & (value <= min(best, cut)))
            if not len(todo):
                if live is not None and best <= cut:
                    live.update(self._entries_in(kept, grid, picks, ~dead & (value <= cut)))
                alive = value[~dead]
                return best if best <= cut or not len(alive) else float(alive.min())
            if len(todo) > batch:
                todo = todo[np.argpartition(value[todo], batch)[:batch]]
            batch *= 2
            check = todo[done[todo]]  # read: K = 1, grid row = pick row
            if len(check):
                dead[check[self._coupled_out(members[0], kept, picks[0][check], store,
                                             tuple(x[check] for x in terms[0][:3]), cut)]] = True
                checked[check] = True
            for k in range(K):
                self._read_picks(k, members[k], kept, picks[k], store, terms[k], read[k], grid[todo, k])

    def _read_picks(self, k: int, members: list, kept: dict, picks: np.ndarray, store: dict, terms: tuple,
                    read: np.ndarray, rows: np.ndarray) -> None:
        """Class k's own terms (_class_terms) of its picks at `rows` not read yet, written over
        their floors in `terms` (_grid_least), marked in `read`."""
        new = np.unique(rows)
        new = new[~read[new]]
        if len(new):
            got = self._class_terms(k, members, kept, picks[new], store, self.meg)
            for mine, x in zip(terms, got):
                mine[new] = x
            read[new] = True

    def _pick_floors(self, k: int, members: list, kept: dict, picks: np.ndarray, store: dict) -> tuple:
        """(A, S, D, fits) of _class_terms at most those of each of class k's `picks`, read on
        fewer rows: per pair of its choices (per choice where it has two), every pair of their
        entries with every other choice at the elementwise minimum of its entries' coefficients
        (below each of them: tight_class_terms is non-decreasing in every array, as the buckets'
        bounds read), so each term is at most the pick's at those entries; a pick's floors are
        the largest over its pairs, and it may fit only where each pair's may (writable)."""
        S, n = len(self.scenarios), len(members)
        temp, tkept = dict(store), dict(kept)
        for x in members:
            low = [self.meg[si, k] for si in range(S)]
            for j in kept[x][1:]:
                low = [elementwise_min(a, b) for a, b in zip(low, store[x[0], x[1], j])]
            temp[x[0], x[1], "floor"] = low
            tkept[x] = list(kept[x]) + ["floor"]
        if n <= 1:
            return tuple(t.copy() for t in self._class_terms(k, members, kept, picks, store, self.meg))
        floor = np.array([len(kept[y]) for y in members])  # each choice's "floor" position
        pairs = [list(c) for c in itertools.combinations(range(n), min(2, n - 1))]
        blocks = []  # per pair: its rows (every pair of its entries, the others at "floor")
        for cols in pairs:
            own = np.array(list(itertools.product(*(range(len(kept[members[c]])) for c in cols))), int)
            rows = np.repeat(floor[None, :], len(own), 0)
            rows[:, cols] = own
            blocks.append(rows)
        # one read for every pair (each read of _class_terms costs as much as some hundred rows)
        a, sm, d, f = self._class_terms(k, members, tkept, np.concatenate(blocks), temp, self.meg)
        A = np.full((len(picks), S), -np.inf)
        Sm, D, fits = A.copy(), A.copy(), np.ones(len(picks), bool)
        start = 0
        for cols, rows in zip(pairs, blocks):
            at = start + np.ravel_multi_index(tuple(picks[:, c] for c in cols), [len(kept[members[c]]) for c in cols])
            A, Sm, D = np.maximum(A, a[at]), np.maximum(Sm, sm[at]), np.maximum(D, d[at])
            fits &= f[at]
            start += len(rows)
        return A, Sm, D, fits

    def _class_spans(self, k: int, xs: list, spans: dict, cut: float) -> dict:
        """Per choice x of class k in `xs`: ((first group, past the last), coefficients per
        scenario) of the spans of spans[x] that _bounded keeps at `cut` (every other choice
        optimistic), in their order; every choice's spans bounded in one read (_bounded_many:
        one call per class and round, not per choice; on the three-type, two-site row the
        re-key read 813 choices in 1,562 rounds, each a few spans). A span's coefficients are
        kept in the search's memo (_span_coeffs), those not kept yet built in one batch per
        scenario (_build_spans)."""
        xs = [x for x in xs if spans.get(x)]
        self._build_spans(k, [(x, a, b) for x in xs for a, b in spans[x]])
        coeffs = {x: [self._span_coeffs(x, *self._groups_of(x)[:3], a, b) for a, b in spans[x]] for x in xs}
        ok = self._bounded_many(k, [(x[1], coeffs[x]) for x in xs], cut) if xs else []
        return {x: [(ab, c) for ab, c, y in zip(spans[x], coeffs[x], y_x) if y] for x, y_x in zip(xs, ok)}

    def _groups_of(self, x) -> tuple:
        """_plan_groups of choice x, kept per outer."""
        got = self._plan_group_cache.get(x)
        if got is None:
            got = self._plan_group_cache[x] = self._plan_groups(x)
        return got

    def _plan_groups(self, x) -> tuple:
        """(per scenario the table and its plans' rows, each plan's replicated parameters, their
        distinct values ascending, the first round's spans of those values) of choice x
        (tests/oracles/class_partitions.class_kept_groups)."""
        per = []
        for ginst, site, _ in self._where(*x):
            table = P.table_for(ginst, self.cg[x], site, self.net)
            per.append((table, plan_rows(table, P.token_split_allowed(self.cg[x]))))
        # one split for every scenario: the plans are the same rows in each table
        # (partition_plans.joint_front), their replicated parameters the model's
        rep = per[0][1][:, P.VECTOR.index("replicated_params")]
        values = np.unique(rep)
        n = len(values)
        return per, rep, values, _spans_of(0, n, SPLIT_SPANS)

    def _span_coeffs(self, x, per: list, rep: np.ndarray, values: np.ndarray, a: int, b: int) -> list:
        """Class k's coefficients per scenario with choice x = (k, g) at the optimistic terms of
        its plans whose replicated parameters are values[a:b] (tests/oracles/class_partitions.kept_groups),
        kept in the search's memo (_build_spans)."""
        key = self._span_key(x, values, a, b)
        got = self.memo.get(key)
        if got is None:
            self._build_spans(x[0], [(x, a, b)])
            got = self.memo[key]
        return got

    def _with(self, cls: dict[int, list[StageCoefficients]]) -> list[list[StageCoefficients]]:
        K, S = len(self.o.classes), len(self.scenarios)
        return [[cls[k][si] if k in cls else self.opt[si, k] for k in range(K)] for si in range(S)]

    def expand(self, upper_s: float, node: "Subset | None" = None, deadline: float | None = None) -> Listing:
        """One step of steps 2 and 3 (module docstring) against the incumbent `upper_s`, on
        `node` (None: every combination; optimistic() first): its children that can still win
        (Listing.nodes) or, at the last level, its candidates, keyed by step 3's vectorised
        bound (a valid lower bound of each). `deadline` (a time.perf_counter() value): read
        between the step's builds; past it the node comes back whole as its one child, with its
        bound, for the search to leave open (one outer's step builds a coefficient set per
        bucket of every choice: the three-type, two-site row overran its limit inside one)."""
        out = Listing()
        cut = upper_s * (1 + REL_TOL)
        if node is None:
            node = self._root(out, cut)
            self.bucket_bounds: dict = {}  # (k, g, bucket) -> (fits, bound) of _bucketed's reads
        elif not node.linked and node.level >= 1:
            # keyed by its buckets' optimistic coefficients: first keyed again by its linked
            # bound, expanded only when it comes up again under that key and can still win
            lb = max(node.bound, self._linked_now(node, cut))
            if lb > cut:
                out.pruned_by_bound += node.weight
            else:
                out.nodes.append((lb, dataclasses.replace(node, bound=lb, linked=True)))
            return out
        self._step(node, cut, out, deadline)
        return out

    def _root(self, out: Listing, cut: float = math.inf) -> "Subset":
        """Every combination beyond all-Megatron as one Subset (each open choice's kept plans
        sorted by layer time: buckets of neighbours bound tightly); dominated ones counted.
        Where the re-key read at a bar at least `cut` keeps live groups (_least_and_live), a
        plan of no live group is left out, its combinations counted pruned: each lies in a
        combination of groups proved above that bar or unfit (on the three-type, two-site row
        87,083 plans -> 75,472, the roots' first-level nodes 4,993 -> 2,631;
        tests/partition/test_parts10_live_groups.py)."""
        self.plans = plans = {x: [MEGATRON] for x in self.keys}
        self.rows = rows = {}  # per open choice and scenario: the vectors of plans[k, g][1:]
        for k, g in self.open:
            recorded, rows[k, g] = _kept_plans(self.cg[k, g], self._where(k, g), self.net)
            plans[k, g] += recorded
        listed = math.prod(len(plans[x]) for x in self.keys)
        out.pruned_by_dominance = self.total - listed
        self.priced: dict = {}  # (k, g, bucket of plan positions) -> its coefficients per scenario
        self.plan_steps: dict = {}  # ((k, g), plan positions) -> _steps
        self.plan_syncs: dict = {}  # ((k, g), bucket entry, scenario position, pseudo) -> _sync_steps
        self.pseudo_steps: dict = {}  # ((k, g), bucket entry) -> _pseudo_steps
        self.unlinked: dict = {}  # Subset.sets -> its node, of the nodes listed not linked (_linked_now)
        self.kid_terms: dict = {}  # Subset.sets -> its parent's _class_terms rows of it, per class (_linked)
        self.linked_keys: dict = {}  # Subset.sets -> _linked of a node not come up yet
        radix = [len(plans[x]) for x in self.keys]
        self.strides = [math.prod(radix[i + 1:]) for i in range(len(self.keys))]
        sets = []
        for x in self.keys:
            order = sorted(range(1, len(plans[x])), key=lambda j: rows[x][0][j - 1, 0] + rows[x][0][j - 1, 1])
            if self.live_groups is not None and cut <= self.live_groups[0] and x in self.open:
                order = [j for j, y in zip(order, self._in_live_group(x, order)) if y]
            sets.append((0, *order))
        # the combinations holding a plan of no live group: above the re-key's bar, which is at
        # least the bar now (it only falls)
        out.pruned_by_bound += listed - math.prod(len(x) for x in sets)
        return Subset(tuple(sets), 0, -math.inf)

    def _in_live_group(self, x, order: list) -> np.ndarray:
        """Per plan position of `order` (in self.plans[x]), whether its group by replicated
        parameters (_plan_groups) is one of live_groups[x]; a plan whose count is not one of the
        groups' (none measured) is kept."""
        values = self._groups_of(x)[2]
        rep = self.rows[x][0][np.array(order, int) - 1, P.VECTOR.index("replicated_params")]
        at = np.minimum(np.searchsorted(values, rep), len(values) - 1)
        live = np.array(sorted(self.live_groups[1][x]), int)
        return (values[at] != rep) | np.isin(at, live)

    def _coeffs(self, x, bucket: tuple) -> list[StageCoefficients]:
        """Coefficients per scenario below those of every plan of `bucket` (_price_buckets), once each."""
        key = (x[0], x[1], bucket)
        if key not in self.priced:
            self._price_buckets(x, [bucket])
        return self.priced[key]

    def _step(self, node: "Subset", cut: float, out: Listing, deadline: float | None = None) -> None:
        """Node's plans per choice cut into buckets of its level's size (LEVELS; single plans at
        the last level), each bucket bounded with every other choice optimistic, then every
        combination of the surviving buckets bounded at once (GRID_CAP rows at most: else the
        node is split on its choice of the most buckets, unbounded); each combination that can
        still win becomes a child node or, at the last level, a candidate. A bucket's
        coefficients are below each of its plans', so a combination of buckets bounds every
        combination of their plans, and what is dropped cannot win."""
        keys = self.keys
        leaf = node.level >= len(LEVELS)
        got = self._bucketed(node, cut, 1 if leaf else LEVELS[node.level], deadline)
        if got is None:
            out.nodes.append((node.bound, node))  # past the deadline: left whole (expand)
            return
        tokens, store, mega = got
        entries = {x: ([(0,)] if mega[x] else []) + tokens[x] for x in keys}
        if math.prod(len(v) for v in entries.values()) > GRID_CAP:
            self._split_wide(node, entries, out)
            return
        if any(not (mega[x] or tokens[x]) for x in keys):  # a choice keeps none of its plans
            out.pruned_by_bound += node.weight
            return
        kept = {x: [0] + tokens[x] for x in keys}
        # the root's combinations are read again one node at a time, as each comes up (expand):
        # reading them all with the root (measured on the three-type, two-site row: 250 ms a
        # root against 80, 175 roots in 60 s against 286, bound 15.89 s against 16.06 s) prices
        # the plans of many that never come up
        linked = 1 <= node.level < len(LEVELS)
        grid, picks, terms, fits, quick, megatron = self._grid_terms(kept, store, cut, linked, mega)
        members = [[x for x in keys if x[0] == k] for k in range(len(self.o.classes))]
        own, weight = ~megatron, self._weights(grid, picks, members, tokens)
        chosen = own & fits & (quick <= cut)
        out.pruned_by_memory += int(weight[own & ~fits].sum())
        out.pruned_by_bound += node.weight - int(weight[own & ~fits].sum()) - int(weight[chosen].sum())
        if leaf:
            self._candidates(grid[chosen], quick[chosen], picks, members, kept, store, out)
        else:
            self._children(node, grid[chosen], quick[chosen], picks, terms, members, kept, linked, out)

    def _bucketed(self, node: "Subset", cut: float, size: int, deadline: float | None):
        """_step's buckets: per choice, the buckets of `size` plans of node's plans that may win
        with every other choice optimistic (tokens), their coefficients (store[k, g, bucket]),
        and whether the node holds Megatron's plan (mega); None past `deadline`. Each class's
        buckets are bounded in one read (_bounded_many: each row as _bounded reads it alone;
        on the three-type, two-site row 716 reads -> 281), and a bucket's bound is kept for the
        outer's other nodes that hold it (it reads only the bucket's coefficients and the
        optimistic builds: on that row 5,273 buckets bounded, 3,059 of them distinct; the
        siblings of a node bucket its choices' plans alike)."""
        tokens, store, mega, per = {x: [] for x in self.keys}, {}, {}, {}
        for x, plans in zip(self.keys, node.sets):
            if deadline is not None and time.perf_counter() > deadline:
                return None
            mega[x] = plans[0] == 0
            mine = plans[1:] if mega[x] else plans
            buckets = [tuple(mine[b:b + size]) for b in range(0, len(mine), size)]
            self._price_buckets(x, buckets)
            per[x] = (buckets, [self._coeffs(x, bk) for bk in buckets])
        _read_bucket_bounds(self, per)
        for x, (buckets, coeffs) in per.items():
            ok = [fits and bound <= cut for fits, bound in (self.bucket_bounds[x[0], x[1], bk] for bk in buckets)]
            store.update({(x[0], x[1], bk): c for bk, c, y in zip(buckets, coeffs, ok) if y})
            tokens[x] = [bk for bk, y in zip(buckets, ok) if y]
        return tokens, store, mega

    def _split_wide(self, node: "Subset", entries: dict, out: Listing) -> None:
        """Node split on its choice of the most entries (_step, past GRID_CAP), unbounded."""
        keys = self.keys
        x = max(keys, key=lambda y: len(entries[y]))
        kids = [Subset(tuple(e if y == x else sum(entries[y], ()) for y in keys), node.level, node.bound,
                       node.linked) for e in entries[x]]
        kids = [c for c in kids if c.weight]
        out.pruned_by_bound += node.weight - sum(c.weight for c in kids)
        out.nodes += [(node.bound, c) for c in kids]

    def _weights(self, grid, picks, members: list, tokens: dict) -> np.ndarray:
        """Per row of _step's grid, the combinations of plans it stands for."""
        width = {x: np.array([1] + [len(t) for t in tokens[x]]) for x in self.keys}
        weight = np.ones(len(grid), np.int64)
        for k, mine in enumerate(members):
            w = np.ones(len(picks[k]), np.int64)
            for col, x in enumerate(mine):
                w *= width[x][picks[k][:, col]]
            weight *= w[grid[:, k]]
        return weight

    def _children(self, node: "Subset", rows, bounds, picks, terms, members: list, kept: dict, linked: bool,
                  out: Listing) -> None:
        """_step's chosen `rows` (with their `bounds`) as nodes of the next level; those not
        linked keep their class terms (kid_terms: _linked reads them, not again)."""
        keys, K = self.keys, len(self.o.classes)
        for row, lb in zip(rows, bounds):
            sets = [None] * len(keys)
            for k in range(K):
                for x, c in zip(members[k], picks[k][row[k]]):
                    sets[keys.index(x)] = kept[x][c] if c else (0,)
            kid = Subset(tuple(sets), node.level + 1, float(lb), linked)
            out.nodes.append((float(lb), kid))
            if not linked:
                self.unlinked[kid.sets] = kid
                self.kid_terms[kid.sets] = [tuple(t[row[k]] for t in terms[k]) for k in range(K)]

    def _candidates(self, rows, bounds, picks, members: list, kept: dict, store: dict, out: Listing) -> None:
        """_step's chosen `rows` at the last level (with their `bounds`) as candidates: each
        class's coefficients assembled from its plans' builds (nothing priced again)."""
        keys, K, S = self.keys, len(self.o.classes), len(self.scenarios)
        class_cache: dict[tuple[int, int], list[StageCoefficients]] = {}
        masks, plans = self.masks, self.plans
        for row, lb in zip(rows, bounds):
            combo, cls = [0] * len(keys), {}
            for k in range(K):
                toks = [kept[x][c] if c else () for x, c in zip(members[k], picks[k][row[k]])]
                for x, t in zip(members[k], toks):
                    combo[keys.index(x)] = t[0] if t else 0
                if (k, row[k]) not in class_cache:
                    parts = [(masks[x], store[x[0], x[1], t]) for x, t in zip(members[k], toks) if t]
                    class_cache[k, row[k]] = [_assemble(self.meg[si, k], [(mk, c[si]) for mk, c in parts])
                                              for si in range(S)]
                cls[k] = class_cache[k, row[k]]
            index = sum(j * st for j, st in zip(combo, self.strides))
            parts = tuple(tuple((g, plans[k, g][combo[i]]) for i, (kk, g) in enumerate(keys)
                                if kk == k and combo[i]) for k in range(K))
            out.candidates.append((float(lb), index, self._with(cls), parts))

    def _price_buckets(self, x, buckets: list[tuple]) -> None:
        """Coefficients per scenario below those of every plan of each bucket of `buckets` (tuples
        of positions in self.plans[x], beyond Megatron's) of choice x = (k, g), kept in
        self.priced[k, g, bucket]: a lone plan's own build; else the elementwise minimum of two
        builds at the bucket's optimistic terms (partition_plans.optimistic_coefficients, as
        _below). Those not kept yet are built in one pass per scenario (build_plans: float for
        float one build each; 1,000-3,000 single plans a second pass on the three-type,
        two-site row against about 700 built one at a time)."""
        k, g = x
        missing = [b for b in dict.fromkeys(buckets) if (k, g, b) not in self.priced]
        if not missing:
            return
        per = []
        for si, (i, (ginst, site, _)) in enumerate(zip(self.scenarios, self._where(k, g))):
            fns = []
            for b in missing:
                if len(b) == 1:
                    fns.append({g: on_group(P.partition_layer_fn(dict(self.plans[x][b[0]])), self.ginst[i, g])})
                else:
                    lo_t, hi_t = optimistic_terms(P.table_for(ginst, self.cg[x], site, self.net),
                                                  self.rows[x][si][np.array(b) - 1])
                    fns += [{g: _const(lo_t)}, {g: _const(hi_t)}]
            built = iter(self._build_plans(i, k, [self._layer_fn(i, k, f) for f in fns]))
            per.append([next(built) if len(b) == 1 else elementwise_min(next(built), next(built)) for b in missing])
        for r, b in enumerate(missing):
            self.priced[k, g, b] = [c[r] for c in per]

    def _below(self, i: int, k: int, lo_fns: dict, hi_fns: dict) -> StageCoefficients:
        """Class k on scenario i with each group g of the dicts at optimistic terms: the
        elementwise minimum of a build at lo_fns[g] (every term least) and one at hi_fns[g]
        (the backward at its largest), below every plan those terms bound
        (partition_plans.optimistic_coefficients, per group). The two terms differ only in
        the backward, so where that lowers no array but the two syncs
        (coefficients.backward_lowers_only_syncs) only those are read of the second, its layer
        costs re-read of the first's at its backward (coefficients.build_and_backward_syncs,
        scaled as _build_plans scales them): the same arrays, float for float."""
        if not backward_lowers_only_syncs(self.inst, self.co[k]):
            lo, hi = self._build_plans(i, k, [self._layer_fn(i, k, fns) for fns in (lo_fns, hi_fns)])
            return elementwise_min(lo, hi)
        s, pl = self.inst.search, self.placed(i, k)
        groups = self.o.classes[k].stage_groups
        lo, (layer_sync, stage_sync) = build_and_backward_syncs(
            self.inst, self.co[k], class_layer_fn(pl, groups, lo_fns), class_layer_fn(pl, groups, hi_fns), self.net,
            s.memory_reserve_bytes, placement=pl)
        lo = capped_memory(scaled_times(lo, self.factor), s.memory_fill_cap, s.memory_reserve_bytes)
        return copied_with(lo, layer_sync_time_s=np.minimum(lo.layer_sync_time_s, layer_sync * self.factor),
                           stage_sync_time_s=np.minimum(lo.stage_sync_time_s, stage_sync * self.factor))

    def _grid(self, kept: dict, store: dict, cut: float, linked: bool = False):
        """_grid_terms less its class terms: (grid, picks, fits, quick, megatron)."""
        grid, picks, _, fits, quick, megatron = self._grid_terms(kept, store, cut, linked)
        return grid, picks, fits, quick, megatron

    def _grid_terms(self, kept: dict, store: dict, cut: float, linked: bool = False, mega: dict | None = None):
        """Every combination of the entries kept[x] of each choice x (0: Megatron's plan, the
        class's base build; j > 0: the coefficients store[k, g, j]): its rows (combinations x
        classes, each a row of that class's picks), the picks per class (rows of positions in
        kept, in its choices' order), and per combination whether it may fit memory, its
        vectorised bound (inf where a lone class is proved above `cut` by coupling its slowest
        stage and sync, _coupled_out), and whether it is all-Megatron; after the picks, each
        class's (A, S, D, fits) per pick (_class_terms). `linked`: the combinations
        that can still win read again with each class's slowest stage over its buckets' plans
        (_linked_terms). `mega`: as _picks_grid's (_step: a node's rows take Megatron's plan
        only where it holds it, the others are not its own and never read)."""
        K = len(self.o.classes)
        members, picks, grid, megatron = self._picks_grid(kept, mega)
        terms = [self._class_terms(k, members[k], kept, picks[k], store, self.meg) for k in range(K)]

        def bounded():
            fits = np.all([terms[k][3][grid[:, k]] for k in range(K)], axis=0)
            return fits, self._combination_bounds([tuple(x[grid[:, k]] for x in terms[k][:3]) for k in range(K)])
        fits, quick = bounded()
        if linked:  # the combinations that can still win, read again (the others stay dropped)
            alive = fits & ~megatron & (quick <= cut)
            for k in range(K):
                rows = np.unique(grid[alive, k])
                if len(rows):
                    terms[k] = self._linked_terms(k, members[k], kept, picks[k], terms[k], rows, store)
            fits, quick = bounded()
        if self._coupled_reads():
            rows = np.flatnonzero(fits & ~megatron & (quick <= cut))  # K = 1: grid row = pick row
            if len(rows):
                out = self._coupled_out(members[0], kept, picks[0][rows], store,
                                        tuple(x[rows] for x in terms[0][:3]), cut)
                quick = quick.copy()
                quick[rows[out]] = np.inf
        return grid, picks, terms, fits, quick, megatron

    def _picks_grid(self, kept: dict, mega: dict | None = None) -> tuple:
        """(members, picks, grid, megatron) of the combinations of the entries kept[x] of each
        choice x: each class's choices, its picks (rows of positions in kept, in its choices'
        order), the combinations (rows of one pick per class) and which is all-Megatron.
        `mega`: per choice whether Megatron's plan (position 0) is its to pick (all: None)."""
        K = len(self.o.classes)
        members = [[x for x in self.keys if x[0] == k] for k in range(K)]
        first = {x: 0 if mega is None or mega[x] else 1 for x in self.keys}
        picks = [np.array(list(itertools.product(*(range(first[x], len(kept[x])) for x in members[k]))), int)
                 .reshape(-1, len(members[k])) for k in range(K)]
        grid = np.stack(np.meshgrid(*[np.arange(len(x)) for x in picks], indexing="ij"), -1).reshape(-1, K)
        megatron = np.all([(picks[k] == 0).all(1)[grid[:, k]] for k in range(K)], axis=0)
        return members, picks, grid, megatron

    def _coupled_reads(self) -> bool:
        """Whether a combination's bound may be read again by one_class.coupled_above (_grid):
        a lone class, each scenario's time at most the objective."""
        p = self.problem
        return p.classes == 1 and (p.objective == "max" or len(self.scenarios) == 1)

    def _bounded(self, k: int, g: int, coeffs: list, cut: float) -> np.ndarray:
        """Which of `coeffs` (each per scenario, class k with group g's stages priced by one
        plan or bucket) may fit memory and bound at most `cut`, every other choice optimistic."""
        return self._bounded_many(k, [(g, coeffs)], cut)[0]

    def _bounded_many(self, k: int, batch: list, cut: float) -> list[np.ndarray]:
        """_bounded of each (g, coeffs) of `batch` (distinct groups g of class k), in one read:
        one row per entry, its own group's stages from its coefficients and every other stage
        from the optimistic build (position 0 of every other member), as _bounded reads it
        alone; tight_class_terms and _combination_bounds read each row on its own, so the
        floats are the same (tests/partition/test_parts7_bounded_batch.py)."""
        members = [(k, g) for g, _ in batch]
        sizes = [len(coeffs) for _, coeffs in batch]
        tmp = {(k, g, j + 1): c for g, coeffs in batch for j, c in enumerate(coeffs)}
        kept = {x: list(range(n + 1)) for x, n in zip(members, sizes)}
        picks = np.zeros((sum(sizes), len(members)), int)
        start = 0
        for col, n in enumerate(sizes):
            picks[start:start + n, col] = np.arange(1, n + 1)
            start += n
        if not len(picks):
            return [np.zeros(0, bool) for _ in batch]
        fits, bounds = _fits_and_bounds(self, k, members, kept, picks, tmp)
        ok = fits & (bounds <= cut)
        return np.split(ok, np.cumsum(sizes)[:-1])

    def _opt_terms(self, k: int):
        """(A, S, D) of class k at its optimistic coefficients, arrays (1, scenarios)."""
        if k not in self._opt_cache:
            key = self._opt_terms_key(k)
            got = self.memo.get(key)
            if got is None:
                read, arrays = self._opt_blocks(k)
                got = self.memo[key] = _scenario_terms(arrays, [tight_class_terms(a, *read) for a in arrays],
                                                       read[0])[:3]
            self._opt_cache[k] = got
        return self._opt_cache[k]

    def _opt_terms_key(self, k: int) -> tuple:
        """The memo's key of _opt_terms(k): what class k's optimistic builds read."""
        return ("optimistic terms", tuple(self._class_key(si, k) for si in range(len(self.scenarios))))

    def _opt_blocks(self, k: int) -> tuple[tuple, list[dict]]:
        """((L, v, full recompute), its arrays per scenario position): what _opt_terms(k)
        gives tight_class_terms, one row each (_class_terms with no member)."""
        read = (self.inst.model.layers, self.o.virtual_stages, self.inst.search.full_recompute)
        return read, [self._class_arrays(k, [], {}, np.zeros((1, 0), int), {}, self.opt, si)
                      for si in range(len(self.scenarios))]

    def _class_arrays(self, k: int, members: list, kept: dict, picks: np.ndarray, priced, base, si: int):
        """The stage arrays (one_class.TIGHT_ARRAYS, each (choices, pp)) of class k on scenario
        position si per choice of its layer plans (_class_terms): memory as priced on the first
        scenario (it does not depend on the network), times on si. Every array of an entry is
        gathered in one read, and per row only each member's own stages (a grid's rows are
        many: on the three-type, two-site row these reads were 8% of a profiled run with every
        stage gathered per row and then masked; its 9,015 reads 1.84 s of CPU with a gather per
        array, 0.98 s with one per entry)."""
        C, drain = len(picks), bool(base[si, k].layer_drain_saving_s.size)  # drain: a zero-bubble schedule
        names = _MEMORY + _TIMES + _SYNCS + (("layer_drain_saving_s",) if drain else ())

        def block(first, here) -> np.ndarray:  # an entry's arrays (names, pp), its builds on 0 and si
            return np.array([getattr(first if f in _MEMORY else here, f) for f in names])
        mine = block(base[0, k], base[si, k])
        out = np.repeat(mine[:, None, :], C, axis=1)  # (names, choices, pp): each name's rows contiguous
        for col, x in enumerate(members):
            mask = self.masks[x]
            entries = [priced[x[0], x[1], j] for j in kept[x][1:]]
            stack = np.stack([mine[:, mask]] + [block(e[0], e[si])[:, mask] for e in entries], 1)
            out[:, :, mask] = stack[:, picks[:, col]]
        got = dict(zip(_MEMORY, out))
        got["capacity_bytes"] = np.broadcast_to(base[0, k].capacity_bytes, (C, base[0, k].pp))
        got.update(zip(names[len(_MEMORY):], out[len(_MEMORY):]))
        return got

    def _class_terms(self, k: int, members: list, kept: dict, picks: np.ndarray, priced, base):
        """Per choice of class k's layer plans (row c of `picks`: for each (k, g) of `members`,
        a position in kept[k, g], which starts with Megatron's plan 0, the `base` coefficients;
        plan j > 0 is the build priced[k, g, j]; the stages of other groups from `base`): its (A, S, D) lower bounds per scenario, arrays (choices,
        scenarios): the slowest stage, the sum of the stages and the slowest sync of any split
        that fits memory (tight_class_terms), and whether one can, vectorised over the choices."""
        L, v = self.inst.model.layers, self.o.virtual_stages
        arrays = [self._class_arrays(k, members, kept, picks, priced, base, si) for si in range(len(self.scenarios))]
        return _scenario_terms(arrays, [tight_class_terms(a, L, v, self.inst.search.full_recompute)
                                        for a in arrays], L)

    def _linked_now(self, node: "Subset", cut: float = math.inf) -> float:
        """_linked of `node`, read when it comes up: kept from an earlier call, or read now, and
        then, in one batch, that of every node of this outer not linked yet whose buckets' plans
        are all priced by then (reading them costs no build: one at a time, each cost 1-2 ms on
        the three-type, two-site row, 10 times the batch's share; linking the root's children
        when listed priced every plan of them, and that row's bound fell 0.15 s at 30 s of CPU)."""
        self.unlinked.pop(node.sets, None)
        got = self.linked_keys.pop(node.sets, None)
        if got is not None:
            return got
        try:
            return self._linked_read(node, cut)
        finally:
            self.kid_terms.pop(node.sets, None)

    def _linked_read(self, node: "Subset", cut: float) -> float:
        """_linked_now's read of a node not read in a batch before (its steps there)."""
        if self._partly_priced(node):
            # read first with the plans priced by now, each other bucket as one plan at its
            # coefficients (_pseudo_steps): a bound of every combination too, so above `cut`
            # the node is dropped without pricing the rest
            got = float(self._linked([node], priced_only=True)[0])
            if got > cut:
                return got
        steps = len(self.plan_steps)
        got = float(self._linked([node])[0])
        # a node becomes ready only as plan_steps grows: none did when this read priced nothing
        # (the scan itself read every unlinked node: about 8% of these reads on the three-type,
        # two-site row)
        ready = [n for n in self.unlinked.values()
                 if all((x, e or (0,)) in self.plan_steps for x, e in zip(self.keys, n.sets))] \
            if len(self.plan_steps) > steps else []
        if ready:
            for n, lb in zip(ready, self._linked(ready)):
                self.linked_keys[n.sets] = float(lb)
                del self.unlinked[n.sets]
                self.kid_terms.pop(n.sets, None)
        return got

    def _partly_priced(self, node: "Subset") -> bool:
        """Whether some bucket of `node` beyond Megatron's plan has its plans priced (_steps),
        and some has not: then _linked's read with priced_only costs no build and reads more
        than the node's key."""
        done = [(x, e or (0,)) in self.plan_steps for x, e in zip(self.keys, node.sets)]
        return not all(done) and any(d and any(e) for d, e in zip(done, node.sets))

    def _linked(self, nodes: list, priced_only: bool = False) -> np.ndarray:
        """Per node of `nodes`, a lower bound of every combination of it: each class's slowest
        stage, stages' sum and slowest sync read over the combinations of its choices' plans
        (_linked_reads), each at least its term at the node's coefficients per choice
        (_node_store); all nodes at once. The terms at the node's coefficients are those its
        parent's _step read for it (kid_terms: the same arrays, row by row) where each node
        has them, else read here."""
        per = []
        memo = [self.kid_terms.get(n.sets) for n in nodes]
        memo = None if any(m is None for m in memo) else memo
        for k in range(len(self.o.classes)):
            members = [x for x in self.keys if x[0] == k]
            store, kept = {}, {x: [0] for x in members}
            picks = np.zeros((len(nodes), len(members)), int)
            for r, node in enumerate(nodes):
                sets = dict(zip(self.keys, node.sets))
                store.update(self._node_store(k, sets))
                for col, x in enumerate(members):
                    if sets[x] not in kept[x][1:]:
                        kept[x].append(sets[x])
                    picks[r, col] = kept[x].index(sets[x], 1)
            terms = self._class_terms(k, members, kept, picks, store, self.meg) if memo is None else \
                tuple(np.stack([m[k][i] for m in memo]) for i in range(4))
            per.append(self._linked_terms(k, members, kept, picks, terms, np.arange(len(nodes)), store,
                                          priced_only)[:3])
        return self._combination_bounds(per)

    def _node_store(self, k: int, sets: dict) -> dict:
        """Per choice x of class k, its coefficients in a node holding plans sets[x] (per
        scenario, below each of its plans': Megatron's build, a bucket's optimistic
        coefficients, or where it holds both their elementwise minimum), as store[k, g, sets[x]]."""
        S = len(self.scenarios)
        store = {}
        for x in (y for y in self.keys if y[0] == k):
            mine = tuple(p for p in sets[x] if p)
            if not mine:
                store[x[0], x[1], sets[x]] = [self.meg[si, k] for si in range(S)]
                continue
            c = self._coeffs(x, mine)
            store[x[0], x[1], sets[x]] = c if len(mine) == len(sets[x]) else \
                [elementwise_min(self.meg[si, k], c[si]) for si in range(S)]
        return store

    def _linked_terms(self, k: int, members: list, kept: dict, picks: np.ndarray, terms, rows: np.ndarray, store,
                      priced_only: bool = False):
        """_class_terms' `terms` (A, S, D, fits) of the choices `picks` with, at `rows`, the
        slowest stage and the stages' sum at least the least over the combinations of the plans
        of each choice's bucket (_linked_reads), and fitting only where one of them can
        (members: every choice of class k; 0 in kept: Megatron's plan, as _class_terms reads it
        with the all-Megatron builds as base)."""
        A, Sm, D, fits = terms
        most = max(len(kept[x][j] or (0,)) for col, x in enumerate(members)
                   for j in np.unique(picks[rows, col]).tolist())
        if most * len(self.o.classes[k].stage_groups) * (self.inst.model.layers // self.o.virtual_stages) \
                > BOTTLENECK_BLOCK_FLOATS:  # (stage_levels lists every chunk count: as one_class bounds blocks)
            return terms
        A, Sm, D, fits = A.copy(), Sm.copy(), D.copy(), fits.copy()
        for si in range(len(self.scenarios)):
            tau, sigma, delta = self._linked_reads(k, members, kept, picks[rows], store, si, priced_only)
            A[rows, si] = np.maximum(A[rows, si], tau)
            # under a zero-bubble schedule _class_terms' sum term is less its drain credit: kept
            if not self.meg[si, k].layer_drain_saving_s.size:
                Sm[rows, si] = np.maximum(Sm[rows, si], sigma)
            D[rows, si] = np.maximum(D[rows, si], delta)
        fits[rows] &= np.isfinite(A[rows]).all(1)
        return A, Sm, D, fits

    def _linked_reads(self, k: int, members: list, kept: dict, picks: np.ndarray, store, si: int,
                      priced_only: bool = False):
        """Per choice of class k's buckets (row c of `picks`, positions in kept[x] of each choice
        x of `members`, every choice of the class; 0: Megatron's plan, else a tuple of plan
        positions, whose coefficients are store[k, g, tuple]), over every combination of their
        plans on scenario position si (solver/bounds/plan_bottleneck.py): the least
        slowest-stage term tau*, the least sum of the stages of any split in whole chunks, and
        the least slowest sync delta* with each stage's sync at the bucket's coefficients and
        its chunks at each plan's own, each lowered by FLOAT_SAFETY as tight_class_terms' are.
        `priced_only`: a bucket whose plans are not priced yet is read as one plan at its
        coefficients store[k, g, entry] (_pseudo_steps), nothing priced: each term then at most
        the least over its combinations too (plan_bottleneck's module docstring)."""
        assert {g for _, g in members} == set(self.o.classes[k].stage_groups)

        def pseudo(x, j) -> bool:
            return priced_only and (x, kept[x][j] or (0,)) not in self.plan_steps
        # each column's entries read once, the rows as positions among them (plan_bottleneck's
        # *_picked: every row in one batch)
        used = [np.unique(picks[:, col], return_inverse=True) for col in range(len(members))]
        at = np.stack([inv.reshape(-1) for _, inv in used], 1).reshape(picks.shape)
        steps = [[(self._pseudo_steps(x, kept[x][j], store) if pseudo(x, j) else self._steps(x, kept[x][j] or (0,)))[si]
                  for j in js.tolist()] for x, (js, _) in zip(members, used)]
        syncs = [[self._sync_steps(x, kept[x][j], store, si, pseudo(x, j)) for j in js.tolist()]
                 for x, (js, _) in zip(members, used)]
        need = self.inst.model.layers // self.o.virtual_stages
        tau, delta = _least_levels_both([[e[0] for e in col] for col in steps], syncs, at, need)
        sigma = least_sums_picked([[e[1] for e in col] for col in steps], at, need)
        return tau * (1 - FLOAT_SAFETY), sigma * (1 - FLOAT_SAFETY), delta * (1 - FLOAT_SAFETY)

    def _sync_steps(self, x, entry, store, si: int, pseudo: bool = False):
        """plan_bottleneck.group_steps of choice x's sync levels (sync_levels) under `entry` (0:
        Megatron's plan; a tuple of plan positions, its coefficients store[k, g, entry]) on
        scenario position si, each plan's stages holding their own chunks; kept per (x, entry)."""
        key = (x, entry, si, pseudo)
        got = self.plan_syncs.get(key)
        if got is None:
            c = self.meg[si, x[0]] if entry == 0 else store[x[0], x[1], entry][si]
            mask, v = self.masks[x], self.o.virtual_stages
            held = (self._pseudo_steps(x, entry, store) if pseudo else self._steps(x, entry or (0,)))[si][2]
            got = self.plan_syncs[key] = group_steps(sync_levels(held, c.stage_sync_time_s[mask],
                                                                 c.layer_sync_time_s[mask], v,
                                                                 self.inst.model.layers // v))
        return got

    def _steps(self, x, plans: tuple) -> list:
        """Per scenario position, plan_bottleneck's group_steps and group_sums of choice x's
        stages over the plans of `plans` (positions in self.plans[x], 0: Megatron's); kept per
        (x, plans)."""
        key = (x, plans)
        got = self.plan_steps.get(key)
        if got is None:
            L, v = self.inst.model.layers, self.o.virtual_stages
            levels = [stage_levels(a, L, v, self.inst.search.full_recompute)
                      for a in self._plan_arrays(x, self._level_front(x, plans))]
            got = self.plan_steps[key] = [(group_steps(lv), group_sums(lv, L // v), held_chunks(lv)) for lv in levels]
        return got

    def _pseudo_steps(self, x, entry, store) -> list:
        """_steps of choice x's bucket `entry` (a tuple of plan positions) read as one plan at its
        coefficients store[k, g, entry] (below each of its plans', partition_plans.
        optimistic_coefficients): its stage levels are at most each plan's on every stage, so
        its steps hold at least the chunks any of them does within every level, and its sums
        are at most theirs (plan_bottleneck's module docstring); no plan priced. Kept per
        (x, entry)."""
        key = (x, entry)
        got = self.pseudo_steps.get(key)
        if got is None:
            k, mask = x[0], self.masks[x]
            L, v = self.inst.model.layers, self.o.virtual_stages
            c = store[k, x[1], entry]
            cap = self.meg[0, k].capacity_bytes[mask]
            got = []
            for si in range(len(self.scenarios)):
                arrays = {f: getattr(c[0 if f in _MEMORY else si], f)[mask][None, :] for f in _MEMORY + _TIMES}
                arrays["capacity_bytes"] = cap[None, :]
                lv = stage_levels(arrays, L, v, self.inst.search.full_recompute)
                got.append((group_steps(lv), group_sums(lv, L // v), held_chunks(lv)))
            self.pseudo_steps[key] = got
        return got

    def _level_front(self, x, plans: tuple) -> tuple:
        """`plans` less those another of them is below in the columns the stage levels read
        (plan_bottleneck.level_front: the group's steps are the front's), Megatron's kept."""
        mine = np.array([p for p in plans if p], int)
        if len(mine) < 2:
            return plans
        keep = level_front([r[mine - 1] for r in self.rows[x]], P.VECTOR)
        return tuple(p for p in plans if not p) + tuple(mine[keep].tolist())

    def _plan_arrays(self, x, plans: tuple) -> list[dict]:
        """Per scenario position, the arrays one_class.stage_levels reads of choice x's stages
        under each plan of `plans` (rows in that order; 0: Megatron's build): memory as priced
        on the first scenario, times on each, capacity from Megatron's build, as _class_arrays
        reads them. Each plan's builds are those the last level reads (_price_buckets: the
        plans not priced yet in one pass; the last level prices them no more)."""
        k, g = x
        mask = self.masks[x]
        self._price_buckets(x, [(p,) for p in plans if p])
        per = [self.meg[si, k] for si in range(len(self.scenarios))]
        builds = [per if p == 0 else self.priced[k, g, (p,)] for p in plans]
        cap = self.meg[0, k].capacity_bytes[mask]
        out = []
        for si in range(len(self.scenarios)):
            arrays = {f: np.stack([getattr(c[0 if f in _MEMORY else si], f)[mask] for c in builds])
                      for f in _MEMORY + _TIMES}
            arrays["capacity_bytes"] = np.broadcast_to(cap, arrays["layer_time_s"].shape)
            out.append(arrays)
        return out

    def _coupled_out(self, members: list, kept: dict, picks: np.ndarray, store, terms, cut: float) -> np.ndarray:
        """For a lone class (its micro-batch count fixed): which choices (rows of `picks`, with
        their _class_terms `terms`) one_class.coupled_above proves above `cut` on some
        scenario, each scenario's time being at most the objective ("max", or one scenario)."""
        p, L, v = self.problem, self.inst.model.layers, self.o.virtual_stages
        m = p.total_micro_batches / p.replicas[0]
        out = np.zeros(len(picks), bool)
        for si in range(len(self.scenarios)):
            arrays = self._class_arrays(0, members, kept, picks, store, self.meg, si)
            out |= coupled_above(arrays, L, v, m, self.inst.search.full_recompute,
                                 tuple(x[:, si] for x in terms[:3]), cut)
        return out

    def _combination_bounds(self, per_class) -> np.ndarray:
        """A lower bound of batched.lower_bounds_s for every combination at once:
        `per_class[k]` = (A, S, D) of class k's choice in each combination, arrays
        (combinations, scenarios). The same relaxation (batched.relaxed_s) per scenario; a
        weighted objective takes the weighted sum of the per-scenario bounds (the minimum of a
        sum is at least the sum of the minima). A lone class's arrays are read as they are (a
        stack of one, the largest of one sync), and the unfit rows' stand-ins only where some
        term is not finite: the same floats (issue 33: 5,410 calls on the three-type, two-site
        row, mostly of one class and one row, about 60% of their time numpy's per call)."""
        p = self.problem
        x = np.array(p.replicas, float)
        lo = np.array([p.min_micro_batches(k) for k in range(p.classes)], float)
        if len(per_class) == 1:
            A, Sm, D = (np.asarray(y)[..., None] for y in per_class[0])
        else:
            A = np.stack([c[0] for c in per_class], -1)  # (combinations, scenarios, classes)
            Sm = np.stack([c[1] for c in per_class], -1)
            D = np.max(np.stack([c[2] for c in per_class], -1), -1)[..., None]
        hopeless = ~(np.isfinite(A).all(-1) & np.isfinite(Sm).all(-1) & np.isfinite(D[..., 0]))
        unfit = hopeless.any()
        if unfit:  # no fitting split: inf below
            A, Sm, D = (np.where(np.isfinite(y), y, 1.0) for y in (A, Sm, D))
        per = relaxed_s(A, Sm, D, x, lo, p.total_micro_batches, p.virtual_stages, self.uniform)
        if unfit:
            per = np.where(hopeless, np.inf, per)
        if p.objective == "max":
            return per.max(-1) * (1 - FLOAT_SAFETY)
        return per @ np.asarray(p.weights) * (1 - FLOAT_SAFETY)


def read_optimistic_terms(outers: list[OuterChoices]) -> None:
    """_opt_terms of every class of `outers` (each optimistic() first), read into the memo in
    one tight_class_terms_of_blocks call per (L, v, full recompute): the same floats as one
    call each (each row's own, tests/partition/test_parts14_opt_terms_batch.py). On the
    three-type, two-site row about 3,000 of these reads carry one row of 4-16 stages, most of
    their cost numpy's per call; the search reads the outers of a node split by its syncs
    here, each before it comes up (search._LayerPlans' key reads them from the memo)."""
    groups: dict = {}
    for ch in outers:
        for k in range(len(ch.o.classes)):
            key = ch._opt_terms_key(k)
            if k in ch._opt_cache or key in ch.memo:
                continue
            read, arrays = ch._opt_blocks(k)
            groups.setdefault(read, {}).setdefault(key, (ch.memo, arrays))
    for (L, v, full), by_key in groups.items():
        terms = iter(tight_class_terms_of_blocks([a for _, arrays in by_key.values() for a in arrays], L, v, full))
        for key, (memo, arrays) in by_key.items():
            memo[key] = _scenario_terms(arrays, [next(terms) for _ in arrays], L)[:3]


def _scenario_terms(arrays: list[dict], terms: list[tuple], L: int) -> tuple:
    """(A, S, D, fits) of one class's choices from its arrays and tight_class_terms per
    scenario position (_class_terms): arrays (choices, scenarios), the sum term less the drain
    credit under a zero-bubble schedule, and whether a choice fits (memory is priced on the
    first scenario, so every scenario's fits are the same)."""
    A, Sm, D = [], [], []
    for a, (tau, sigma, delta, _) in zip(arrays, terms):
        if "layer_drain_saving_s" in a:
            # under torch's zero-bubble schedules the sum term reads the passes T_s - k W_s
            # (one_class.drain_credit_s): sum_s n_s k w t_s <= L max_s k w t_s, per choice;
            # the pacing rows (v m - 1) T_s + k W_s stay above (v m - 1) max T
            sigma = sigma - L * a["layer_drain_saving_s"].max(axis=1)
        A.append(tau), Sm.append(sigma), D.append(delta)
    return np.array(A).T, np.array(Sm).T, np.array(D).T, terms[-1][3]


def all_partitions(inst, o, placed, co: list, net: NetEfficiency = NetEfficiency()):
    """Every layer-plan combination of `o` (no dominance, no pruning: exhaustive search), as
    partitions per class (ReplicaClass.partitions form), all-Megatron first."""
    K = len(o.classes)
    keys = _choices(o)
    options = []
    for k, g in keys:
        opts = [MEGATRON]
        cg = _on_group(co[k], o, g)
        if enabled(inst) and P.spatial_temporal_allowed(cg):
            site = placed(0, k).sites[o.classes[k].stage_groups.index(g)]
            table = P.table_for(inst.group_alone(g, inst.cluster), cg, site, net)
            idx, _ = P.all_plans(table)
            for row in idx:
                plan = P.plan_from_indices(table, row)
                if not P.is_megatron(plan) and P.plan_allowed(plan, cg):
                    opts.append(_recorded(plan))
        options.append(opts)
    for combo in itertools.product(*options):
        yield tuple(tuple((g, combo[i]) for i, (kk, g) in enumerate(keys) if kk == k and combo[i])
                    for k in range(K))


def _least_levels_both(first: list, second: list, picks: np.ndarray, need: int) -> tuple:
    """least_levels_picked of the rows `picks` over the entries `first` and over `second` (the
    same columns), in one call: the second's rows pick past the first's entries of each column.
    The same floats as two calls: a row's sum of counts is constant between its own entries'
    steps, so the least level of any union of levels holding those steps where it reaches `need`
    is one of them (least_levels_picked's docstring), and the union here holds them all; the
    rows are read apart (issue 33: _linked_reads read the two apart, 825 pairs of calls on the
    three-type, two-site row)."""
    offsets = np.array([len(col) for col in first], int)
    got = least_levels_picked([a + b for a, b in zip(first, second)], np.vstack([picks, picks + offsets]), need)
    return got[:len(picks)], got[len(picks):]


def _floor_rows(ch: OuterChoices, nodes: list) -> tuple[list[int], list]:
    """OuterChoices.priced_floors' rows: (the positions in `nodes` it reads, and their
    coefficients, one per scenario position each: the root's optimistic ones, or a node's
    class assembled from _node_store); none where it does not apply."""
    S, p = len(ch.scenarios), ch.problem
    if len(ch.o.classes) != 1 or p.objective == "weighted" or ch.opt[0, 0].layer_drain_saving_s.size:
        return [], []
    at, rows = [], []
    for r, node in enumerate(nodes):
        if node is None:
            rows += [ch.opt[si, 0] for si in range(S)]
        elif all(not any(e) or (0, x[1], tuple(q for q in e if q)) in ch.priced for x, e in zip(ch.keys, node.sets)):
            store = ch._node_store(0, dict(zip(ch.keys, node.sets)))
            rows += [_assemble(ch.meg[si, 0], [(ch.masks[x], store[0, x[1], e][si])
                                               for x, e in zip(ch.keys, node.sets)]) for si in range(S)]
        else:
            continue
        at.append(r)
    return at, rows


ROOT_FLOORS_AHEAD = 32  # roots whose priced floors root_floor reads in one call, at most
# the search memo's keys (OuterChoices.memo): the roots listed by list_root, a heap by key; the
# floors read ahead, by the outer's id (with a weak reference to it); the ids of the roots read
_ROOTS, _FLOORS, _READ = ("roots listed",), ("root floors read ahead",), ("root floors read",)


def list_root(ch: OuterChoices, key: tuple) -> None:
    """Lists the root of `ch` (set up, its priced floor not read), keyed by its search key, for
    root_floor to read its floor ahead with another's; by a weak reference (a root read alone
    or dropped stays listed until a read passes its key, but keeps none of its builds)."""
    heapq.heappush(ch.memo.setdefault(_ROOTS, []), (key, id(ch), weakref.ref(ch)))


def root_floor(ch: OuterChoices, cut: float) -> float:
    """ch.priced_floors([None])[0], as its root comes up: read ahead with another root's (kept
    until it comes up), or read now with those of up to ROOT_FLOORS_AHEAD - 1 roots listed
    (list_root) whose keys are at most `cut`, least keys first, in one priced_bounds_s call:
    each row's own floats (test_parts17_root_floors.py). A root keyed at most the bar comes
    up unless the bar falls below its key first (the heap pops least keys first), so few of
    these reads are wasted: none on the three-type, two-site row, whose 590 roots' floors were
    read one call each (fill_drain's work per call was most of their cost)."""
    kept, done = ch.memo.setdefault(_FLOORS, {}), ch.memo.setdefault(_READ, set())
    got = kept.pop(id(ch), None)
    if got is not None and got[0]() is ch:
        return got[1]
    heap, batch = ch.memo.get(_ROOTS, []), [ch]
    done.add(id(ch))
    while heap and len(batch) < ROOT_FLOORS_AHEAD and heap[0][0][0] <= cut:
        other = heapq.heappop(heap)[2]()
        if other is not None and id(other) not in done and not other.split_read:
            done.add(id(other))
            batch.append(other)
    floors = _read_floors(batch)
    kept.update((id(other), (weakref.ref(other), f)) for other, f in zip(batch[1:], floors[1:]))
    return floors[0]


def _read_floors(outers: list[OuterChoices]) -> list[float]:
    """priced_floors([None])[0] of each of `outers`, their rows in one priced_bounds_s call per
    allow_full_recompute (the rows are read apart: the same floats)."""
    out = [-math.inf] * len(outers)
    by: dict = {}
    for r, ch in enumerate(outers):
        rows = _floor_rows(ch, [None])[1]
        if rows:
            by.setdefault(ch.problem.allow_full_recompute, []).append((r, rows))
    for full, items in by.items():
        got = priced_bounds_s([c for _, rows in items for c in rows], full)
        ends = np.cumsum([len(rows) for _, rows in items])
        for (r, _), part in zip(items, np.split(got, ends[:-1])):
            out[r] = float(part.max())
    return out


def _fits_and_bounds(ch: OuterChoices, k: int, members: list, kept: dict, picks: np.ndarray, tmp: dict) -> tuple:
    """OuterChoices._bounded_many's rows read: per row of `picks` (class k's choices `members`
    at positions in `kept`, coefficients in `tmp`, every other stage and class optimistic)
    whether it may fit memory, and its bound (_combination_bounds)."""
    A, Sm, D, fits = ch._class_terms(k, members, kept, picks, tmp, ch.opt)
    per = [(A, Sm, D) if kk == k else tuple(np.broadcast_to(x, (len(picks),) + x.shape[1:])
                                            for x in ch._opt_terms(kk))
           for kk in range(len(ch.o.classes))]
    return fits, ch._combination_bounds(per)


def _read_bucket_bounds(ch: OuterChoices, per: dict) -> None:
    """(fits, bound) of each bucket of `per` (choice -> (buckets, their coefficients), as
    _bucketed lists them) not read yet for this outer, into ch.bucket_bounds: one read per
    class of its missing buckets, each row as _bounded_many reads it (each row on its own: the
    same floats read alone or with others)."""
    for k in range(len(ch.o.classes)):
        missing = {x: [(bk, c) for bk, c in zip(*per[x]) if (x[0], x[1], bk) not in ch.bucket_bounds]
                   for x in per if x[0] == k}
        missing = {x: v for x, v in missing.items() if v}
        if not missing:
            continue
        members, sizes = list(missing), [len(v) for v in missing.values()]
        tmp = {(k, x[1], j + 1): c for x, v in missing.items() for j, (_, c) in enumerate(v)}
        kept = {x: list(range(n + 1)) for x, n in zip(members, sizes)}
        picks = np.zeros((sum(sizes), len(members)), int)
        picks[np.arange(sum(sizes)), np.repeat(np.arange(len(members)), sizes)] = \
            np.concatenate([np.arange(1, n + 1) for n in sizes])
        fits, bounds = _fits_and_bounds(ch, k, members, kept, picks, tmp)
        rows = ((x[0], x[1], bk) for x, v in missing.items() for bk, _ in v)
        ch.bucket_bounds.update(zip(rows, zip(fits.tolist(), bounds.tolist())))

