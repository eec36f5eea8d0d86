"""The class layouts that search.classes_per_group, search.idle_gpus and search.mixed_families
add (issue 33), set up under a bound as the search reaches them instead of counted and listed
whole: on 32 A100 + 32 H100 the three together list 1.5e9 class layouts (class_layouts.
space_layouts), which no listing survives, while a bound per layout leaves few that can win.

An *option family* is (family, groups used, tp, cp) of the replica family (every class layout
of class_layouts.replica_options: 1 to classes_per_group classes per group, idle GPUs of a group
a count) or of the mixed family (class_layouts._mixed_shapes: a stage-wise class across a subset
S of the groups beside replica classes on what it leaves). The search keeps each family on its
heap keyed by its least bound (at most every one of its layouts', below) and, when the family
comes up, enumerates only the layouts whose bound can still win: a branch and bound over the
groups, each group's ways to host its classes grouped by what the bound reads of them
(_Profile), a partial choice of the first groups bounded with the rest relaxed (_relaxed) and
dropped, with every completion, where that bound cannot win. Symmetry is the listing's own:
classes on one group are a multiset (class_layouts.group_shares), idle GPUs a count, the k!
orders of a stage-wise class share one bound.

**The bound of one layout** (per scenario and micro-batch size b, M = global batch / b; f_g the
least layer floor of a stage on group g at tp, cp and b, stage_families.FamilyBounds.floor).
Class k of x_k replicas runs m_k micro-batches with Z >= (m_k - 1/v) A_k + S_k / v for the
layout's bound Z (batched.relaxed_s's second bound on the floors, which layouts.py's bound of
each of the layout's blocks is at least), A_k the least over splits of its slowest stage and
S_k the sum of its stages (S_k >= 0), so
    m_k <= (Z - S_k/v) / A_k + 1/v <= Z / A_lo - S_lo / (v A_lo) + 1/v
for any A_lo <= A_k, S_lo <= S_k (Z >= S_k / v). With n_s layers on stage s (sum L) at
t_s >= f_g(s): A_k >= L / sum_s 1/t_s >= L / R_k, R_k = sum_g c_g / f_g for c_g stages on g.
- a replica class (pp_k stages on g): R_k = pp_k / f_g, S_lo = L f_g, so S_lo / A_lo = pp_k:
  m_k <= Z R_k / L - (pp_k - 1) / v (stage_families.replica_combos' bound);
- the stage-wise class of the mixed family: S_k >= L min_g f_g + h_min (its last stage runs the
  output layer, at least the least h_g of its groups, option_recompute.RecomputeFloor.head_s;
  the embedding / loss slots change no layer's time), so m_k <= Z R_k / L - (S_lo R_k / L - 1) / v.
Summed with weights x_k and sum_k x_k m_k = M, at the layout's v (one for all its classes):
    Z >= L (M + B_v / v) / D_v,   D_v = sum_k x_k R_k(v),   B_v = sum_k x_k b_k(v),
b_k the bubbles above. v = 1 needs m_k >= pp_k (several classes: space._count_form_of), so
M >= P = sum_k x_k pp_k; v > 1 needs every pp_k > 1 and m_k >= 2 pp_k, so M >= 2 P. The bound
is read apart at each v of OptionBounds.vs (1, and every v > 1 a class of two stages may run,
space.virtual_stage_values: each layout's v is one of them) and is its least over them: a
class that cannot run v (v pp_k above the layers and slots, option_recompute.runs_v) adds no
rate and an infinite bubble there, so a layout is read only at the v its classes run. At v > 1
each class's terms are its own at v (issue 33: read at v = 1's for every v, the keys of the
option nodes under the optimum of 32 A100 + 32 H100 with the three options were 7-18% below
their v = 1 reading, held by interleaving alone): its stages hold whole chunks of v layers
(Llama-3 70B's 80 layers on 5 stages at v = 16: 16 on each, whatever their groups' speeds) at
interleaving's in-flight counts, which hold more (option_recompute.py, "Interleaving"), and
A_lo >= S_lo / pp_k (a slowest stage is at least the mean); each bubble is scaled by
option_recompute.kept_share (1 - k w under a zero-bubble schedule, 1 without). Aggregated over
scenarios as the objective (max or weights >= 0: monotone) at each v and micro-batch size, the
least over both (a plan runs one of each in every scenario), times the least quantile factor
of the layouts (FamilyBounds.factor: the groups used, cp, deepest class 1 or 2). A layout of
one class is not in these families (inf).

**What the floors leave out** (issue 33: on 32 A100 + 32 H100 with the three options the
bound above started at 7.3 s against an optimum of 11.1 s). Two terms raise it, admissibly:
- the memory a class's group holds (solver/bounds/option_recompute.py): a replica class of pp
  stages on g cannot balance its layers where its early stages, holding pp - s micro-batches,
  run out of memory; its slowest stage then takes at least A* >= L f_g / pp (each stage holding
  what its memory allows for free, then at a recompute per layer it frees, the last stage also
  running the output layer h_g), and its stage times sum to at least S_lo = L f_g + h_g + R rho
  (R the fewest layers any split recomputes). The derivation above reads only A_k >= A_lo and
  S_k >= S_lo, so each such class adds L / A* to D and S_lo / A* - 1 (<= pp - 1) to B; a mixed
  layout's stage-wise class adds L / A* with A* the least over the orders of its groups, each
  stage at its place's in-flight count (option_recompute.stage_class_slowest_s). Both are read
  at most ZeRO ranks on inner nodes and at the layout's own replicas times cp on a node of
  every group chosen (_at_ranks; issue 33: on 32 A100 + 32 H100 the output layer, ~1.1 layers'
  time on Llama-3 70B, and the stage-wise class at its layout's ranks and places took the
  option nodes expanded under the optimum from 10,655 to 2,971);
- the gradient sync after the last backward (solver/bounds/option_sync.py): the plan's time is
  its slowest pipeline plus its slowest stage's sync (class_coefficients.iteration_time_s), and
  the stage holding the most layers of the shallowest class holds L / pp_min of them, each
  reducing its gradients over the ring every replica joins (the group link, on >= 2 groups),
  at the least exposure any ZeRO stage allows: the bound adds L y / pp_min (y the floor of one
  layer's sync at the layout's fewest ranks, >= 2 cp). A layout of one-stage classes may run
  ZeRO-3 instead, which syncs nothing after the backward but gathers and reduce-scatters every
  layer per micro-batch: its floors are raised to at least 2 ag + rs
  (SyncFloor.zero3_layer_s) and the bound is the lesser of the two readings (_bound).
- the pipeline hand-offs (option_recompute.RecomputeFloor.hand_off_s, cost/class_coefficients.
  least_hand_off_s): every stage of a replica class of pp >= 2 stages touches an edge, each
  edge paid by both its stages (pp - 1 edges, pp at v > 1), so each stage's time carries at
  least e (the least edge of its group at tp, cp, b) and the stage times 2 (pp - 1) e more: A*
  and S_lo read them (issue 33: GPT-3 175B / 1,024 A100's pipelined roots with
  classes_per_group 2 were read at 18.0-18.6 s against the optimum's 19.47 s; the output layer
  h_g and these raise the floors' reading, _plain_terms, too). Where a zero-bubble schedule
  shapes the stage terms (v > 1) neither is read.
The pipeline part and the sync are bounded apart (each at its least over the modes), so their
sum is at most the plan's time; both multiply by the same quantile factor as the plan.
With per-operator partitions (search.tensor_partitions) f_g is the layer plans' floor
(FamilyBounds.layer_plans) and both terms are read at what holds for every layer plan of the
class's tp group (solver/bounds/plan_range.py: the least stash and recomputed forward, the
largest backward; every other term a plan holds is at least Megatron's), so the bound holds for
every layer-plan combination of every layout; memory in _fits is not read (it reads Megatron's
stash).

**A mixed family's roots** (thousands on 32 A100 + 32 H100: one per subset, dp and stage
counts) are first keyed with their stage-wise class on the plain floors at every v (R = sum_g
c_g / f_g, and A_lo >= S_lo / pp at v > 1); a root is read whole, with the memory its groups
hold at each v, when it comes up (OptionBounds._whole) and put back at that key where it is
higher. Each key is a bound of the root's layouts. A replica family's root, when its family is
opened, reads the memory its classes' groups hold only at the v where its reading on the floors
alone can still win (OptionBounds._root), the floors' terms at the others: each a bound at its v.

**The bound of a partial choice** (_relaxed): Z above falls with D and grows with B_v and with P
(through the conditions on M); a completion adds, per group left, at most that group's largest
D over its ways, at least its least B (_rates; each at every v) and its least stage slots; and its classes
are all deep only if some way of each group left is. Bounding with those is at most every
completion's bound; the sync's pp_min is at most each chosen class's stages, each group left's
deepest shallowest class and, with fewer than two classes chosen, some group left's deepest
class, and its ranks at least the replicas chosen plus each group left's fewest. So a family,
or a partial choice, whose bound cannot beat a plan's value holds no layout that can, and the search's answer, with its tie rule (each layout keeps the
rank of its place in the full listing, _rank_fields), is that of the full listing.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from paraplan.cost.framework_rules import rules_for
from paraplan.cost.plan_specs import ClassShape
from paraplan.solver.bounds.option_recompute import (RecomputeFloor, kept_share, runs_v, stage_class_slowest_s,
                                                     zero_bubble_runs)
from paraplan.solver.bounds.option_sync import SyncFloor
from paraplan.solver.class_layouts import MAX_LAYOUTS, pp_allowed, group_shares, too_many_layouts
from paraplan.solver.space import Partial, micro_batch_lower_bound_parts, partial_rank, virtual_stage_values


WAYS_A_PASS = 2048  # ways OptionBounds._profile_rates reads in one pass at most


@dataclass(frozen=True)
class OptionFamily:
    """The class layouts of `family` ("replica" or "mixed") on the groups `used` at one tp and
    cp; `at`: (family, subset, tp choice, cp) indices of space.partials_and_families' loops."""

    family: str
    used: tuple[int, ...]
    tp: int
    cp: int
    at: tuple[int, int, int, int]


@dataclass
class _Profile:
    """The ways of one group (tuples of ClassShape) that the bound reads alike: stage slots
    used U = sum x pp, bubble B = sum x (pp - 1), classes n (0, 1 or >= 2: 2), all deep, and
    the shallowest class's stages (inf for none; the replicas are U - B)."""

    slots: int
    bubble: int
    classes: int
    deep: bool
    shallow: float
    members: list


def _profiles(ways: list[tuple]) -> list[_Profile]:
    """The profiles of a group's ways, each a tuple of (pp, replicas) classes."""
    out: dict[tuple, _Profile] = {}
    for i, (_, way) in enumerate(ways):
        u = b = 0
        deep = True
        for pp, r in way:
            u += pp * r
            b += (pp - 1) * r
            deep = deep and pp > 1
        key = (u, b, min(len(way), 2), deep, float(min((pp for pp, _ in way), default=math.inf)))
        got = out.get(key)
        if got is None:
            got = out[key] = _Profile(*key, [])
        got.members.append(i)
    return list(out.values())


def _way_table(ways: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(classes (ways,), stage counts and replicas (ways, most classes)) of a group's `ways`,
    0 past a way's classes."""
    counts = np.array([len(w) for _, w in ways], int)
    k = max(int(counts.max(initial=0)), 1)
    flat = np.array([x for _, w in ways for c in w for x in c], int).reshape(-1, 2)  # every (pp, r)
    pps, reps = np.zeros((len(ways), k), int), np.zeros((len(ways), k), int)
    slot = np.arange(k) < counts[:, None]  # (row-major: each way's classes in their order)
    pps[slot], reps[slot] = flat[:, 0], flat[:, 1]
    return counts, pps, reps


def _shares(inst, room: int, optional: bool, fits) -> list[tuple]:
    """A group's ways to host replica classes on `room` stage slots (class_layouts.group_shares
    with the depths _replica_pps admits; with search.idle_gpus at most the room), with () first
    where it may host none (`optional`, and the room empty or idle GPUs allowed): the order of
    class_layouts.replica_options and _mixed_shapes' fill. Of those, the ways whose every class
    fits the group's memory (`fits(pp)`, OptionBounds._fits) are kept, with their place."""
    s = inst.search
    out = [()] if optional and (room == 0 or s.idle_gpus) else []
    if room:
        pps = [p for p in range(1, room + 1) if pp_allowed(inst, p)]
        out += group_shares(room, pps, s.classes_per_group, exact=not s.idle_gpus)
        fit = {pp: fits(pp) for pp in pps}  # (fits asked once a depth, not once a class)
        if not all(fit.values()):
            return [(i, w) for i, w in enumerate(out) if all(fit[pp] for pp, _ in w)]
    return list(enumerate(out))


@dataclass
class _Base:
    """What the layout's fixed part adds to the bound: the stage-wise class of a mixed layout
    (or nothing): D and B, each (v, mbs, scenarios) over OptionBounds.vs, P, classes."""

    d: np.ndarray | float = 0.0
    b: np.ndarray | float = 0.0
    slots: int = 0
    classes: int = 0
    replicas: int = 0
    shallow: float = math.inf  # its stages


class OptionBounds:
    """The module's bounds over the families, on the floors and factors of `fb`
    (stage_families.FamilyBounds: its floors, micro-batch sizes, v_max and factors)."""

    def __init__(self, fb) -> None:
        self.fb = fb
        inst = fb.inst
        self.inst = inst
        self.L = inst.model.layers
        self.M = np.floor(inst.job.global_batch / fb.mbs)[:, None]  # (mbs, 1)
        self.nodes: list = []  # partial choices on the search's heap (_Node; None once expanded)
        self._keyed_at: list[float] = []  # each node's bound when it was put on the heap
        self.root_memo: dict = {}
        self.listed: dict[tuple, int] = {}  # (group, tp, cp) -> its ways in the full listing
        rules = rules_for(inst.job.framework, inst.job.optimizer)
        # the ZeRO stages a plan with a pipeline runs (FrameworkRules.admits: pp > 1)
        self.pipe_zeros = tuple(z for z in inst.search.zero if z in rules.zero_with_pipeline)
        self.set_up = 0  # class layouts set up
        self.profiles: dict[int, tuple] = {}
        self.ways: dict[tuple, list] = {}
        self.sync = SyncFloor(fb)
        self.recompute = RecomputeFloor(fb)
        # the v the bound reads apart: 1, then every v > 1 a class of two stages may run (each
        # layout's v is one of these: its classes have two stages or more, and v pp <= the
        # slots, space.virtual_stage_values), as a (v, 1, 1) column
        two = [ClassShape(replicas=1, stage_groups=(0, 0))]
        self.vs = (1, *(v for v in virtual_stage_values(inst, two) if v > 1))
        self.vcol = np.array(self.vs, float)[:, None, None]

    def _profiles_of(self, ways: list[tuple]) -> list[_Profile]:
        """_profiles(ways), once per list of ways (the fills of one group and room repeat
        across the stage-wise class's replicas and stage counts; _ways keeps each list alive)."""
        return self._summary(ways)[0]

    def _summary(self, ways: list[tuple]) -> tuple:
        """(profiles, (largest slots, least bubble, least slots, some deep, least replicas,
        most shallowest-class stages)) of a group's ways."""
        got = self.profiles.get(id(ways))
        if got is None or got[0] is not ways:
            lv = _profiles(ways)
            got = self.profiles[id(ways)] = (ways, (lv, (
                max(q.slots for q in lv), min(q.bubble for q in lv), min(q.slots for q in lv),
                any(q.deep for q in lv), min(q.slots - q.bubble for q in lv), max(q.shallow for q in lv))))
        return got[1]

    def _ways(self, key: tuple, make) -> list[tuple]:
        """The ways `make()` lists, once per `key` (group, room, whether none is allowed, ...)."""
        got = self.ways.get(key)
        if got is None:
            got = self.ways[key] = make()
        return got

    # -- the bound ------------------------------------------------------------------------
    def _z(self, d, b, slots, deep, sync=0.0, per_v: bool = False, alike=0) -> np.ndarray:
        """Per micro-batch size (leading axes kept): the module's Z plus `sync`, aggregated over
        scenarios, the least over the v of OptionBounds.vs (`per_v`: each v's, a last axis
        over them). d, b: (..., v, mbs, scenarios), each v's D and B (b inf: no layout read
        runs that v); sync: (..., mbs, scenarios) or 0; slots, deep: (...) broadcastable;
        `alike` (...): the replicas X of a layout whose classes read alike (_alike), else 0,
        its M then read as X ceil(M / X) (_alike's derivation)."""
        fb, M, L, v = self.fb, self.M, self.L, self.vcol
        slots = np.asarray(slots, float)[..., None, None, None]
        deep = np.asarray(deep)[..., None, None, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            ok = np.where(v > 1, deep & (M >= 2 * slots), M >= slots)
            counts = M
            if alike.any() if isinstance(alike, np.ndarray) else alike:  # (most calls: 0)
                x = np.asarray(alike, float)[..., None, None, None]
                counts = np.where(x > 0, np.ceil(M / np.where(x > 0, x, 1.0)) * x, M)
            z = np.where(ok, L * (counts + b / v) / d, np.inf)
        sync = np.asarray(sync, float)
        z = np.where(np.isnan(z) | (z < 0), np.inf, z) + (sync[..., None, :, :] if sync.ndim >= 2 else sync)
        per = z.max(axis=-1) if fb.agg == "max" else z @ np.asarray(fb.weights, float)  # (..., v, mbs)
        return per.min(axis=-1) if per_v else per.min(axis=(-2, -1))

    def family_bound(self, fam: OptionFamily) -> float:
        """At most every layout's bound of the family: a replica family's roots' with every
        class on its group's floors alone (_class_terms' `first`: A_lo = L f_g / pp, S_lo = L
        f_g, a relaxation of its memory's terms, read when the family is opened; issue 33: on
        GPT-3 175B / 1,024 A100 with classes_per_group 2 the memory's terms at v = 1 took 12 of
        the 13 s of set-up, for the same 38 keys to three decimals); of a mixed
        family, every stage slot at its group's rate (D <= sum_g slots_g / f_g: the stage-wise
        class's c_g dp and the replica classes' slots on g add to at most g's slots), no bubble
        at v = 1 (each class's is >= 0), B >= -dp >= -(the most slots of a group) at v > 1 (each
        class's S_lo / A_lo - 1 >= -1 per replica) and P >= 2 (its stage-wise class
        runs >= 2 stages), and the sync of >= 2 replicas (two classes at least) whose shallowest
        class runs at most the most slots of a group (a replica class's stages): each relaxes
        its roots' bounds, so it is at most each."""
        if fam.family == "replica":  # its roots' on the floors alone (_class_terms' `first`)
            return min((node.bound for node in self._roots(fam, first=True)), default=float("inf"))
        groups = self.inst.cluster.groups
        u = fam.tp * fam.cp
        if not self.inst.search.idle_gpus and any(groups[g].num_gpus % u for g in fam.used):
            return float("inf")
        slots = [groups[g].num_gpus // u for g in fam.used]
        d = sum(x / self.fb.floor(g, fam.tp, fam.cp) for g, x in zip(fam.used, slots))
        sync = self._sync(fam, self.pipe_zeros, 2, float(max(slots)))
        b = np.where(self.vcol > 1, -float(max(slots)), 0.0)
        return float(self.fb.factor(fam.used, fam.cp, (1, 2)) * self._z(d, b, 2, True, sync))

    def _sync(self, fam: OptionFamily, zeros: tuple, replicas: int, shallow: float) -> np.ndarray:
        """(micro-batch sizes, scenarios): the least gradient sync after the last backward of a
        layout of at least `replicas` replicas (>= 2: two classes) whose shallowest class runs at
        most `shallow` stages, at a ZeRO stage of `zeros`: L / shallow layers on its fullest
        stage, each at option_sync.SyncFloor's floor (0 where shallow is unknown, inf)."""
        key = ("sync", fam.used, fam.tp, fam.cp, zeros, max(replicas, 2), shallow)
        got = self.ways.get(key)  # (a node's children ask a few replica counts and depths, 48,579 times
        if got is None:           # on 32 A100 + 32 H100 with the three options; read-only: shared)
            got = self.ways[key] = self._sync_read(fam, zeros, replicas, shallow)
            got.flags.writeable = False
        return got

    def _sync_read(self, fam: OptionFamily, zeros: tuple, replicas: int, shallow: float) -> np.ndarray:
        """_sync, read."""
        shape = (len(self.fb.mbs), len(self.fb.idx))
        if not math.isfinite(shallow):
            return np.zeros(shape)
        if shallow <= 0:  # no class can come: no layout completes this
            return np.full(shape, np.inf)
        y = self.sync.per_layer_s(fam.used, fam.tp, fam.cp, tuple(zeros), fam.cp * max(replicas, 2))
        return self.L * y / shallow

    def open(self, fam: OptionFamily, can_win) -> list[tuple[int, float]]:
        """(node, bound) of the family's roots whose bound can still win."""
        return [self._keep(n) for n in self._roots(fam, can_win=can_win) if can_win(n.bound)]

    def expand(self, lst, x: int, can_win) -> tuple[list[tuple[int, float]], list[Partial]]:
        """Node x's children whose bound can win: (node, bound) of partial choices (the last
        group's profiles among them, each a node of its own, so that their layouts are set up
        in the order of their bounds), and the partial layouts of the class layouts a node of
        every group's profile chosen completes."""
        node = self.nodes[x]
        self.nodes[x] = None  # expanded once
        if node.plain:  # a mixed root keyed on its stage-wise class's plain floors: read it whole
            node = self._whole(node, can_win)
            if not can_win(node.bound):
                return [], []
            if node.bound > self._keyed_at[x]:  # back on the heap at its raised key
                return [self._keep(node)], []
        if node.depth < len(node.levels) - 1:
            return self._children(node, can_win), []
        if node.depth == len(node.levels) - 1:
            return self._leaves(node, can_win), []
        out = []
        picked = [node.levels[k][i] for k, i in enumerate(node.picked)]
        # each way per group at its own terms where its profile holds several (_own_bound)
        own = node.read and math.prod(len(p.members) for p in picked) > 1
        for fields, shapes in (x for picks in itertools.product(*(p.members for p in picked))
                               if not own or can_win(self._own_bound(node, picks))
                               for x in self._layouts_of(node, picks)):
            if self.set_up >= MAX_LAYOUTS:
                raise too_many_layouts(self.inst, "the bound leaves")
            self.set_up += 1
            tpg = dict.fromkeys(node.fam.used, node.fam.tp)
            out.append(Partial(lst, node.fam.family, node.fam.used, tpg, node.fam.cp, None,
                               [(1, lst.shape_blocks(node.fam.family, tpg, node.fam.cp, shapes))],
                               partial_rank(*node.fam.at, *fields)))
        return [], out

    def _keep(self, node: "_Node") -> tuple[int, float]:
        self.nodes.append(node)
        self._keyed_at.append(node.bound)
        return len(self.nodes) - 1, node.bound

    def _whole(self, root: "_Node", can_win=lambda lb: True) -> "_Node":
        """A mixed root keyed on its stage-wise class's plain floors (_mixed_roots: read whole
        for each of the family's thousands of roots, the class's terms took most of the family's
        set-up, while most roots never come up) with the class read whole (_stage_class) and
        its bound read again: each key is a bound of the root's layouts, the plain one too (the
        floors' A_lo and S_lo are at most the class's own).

        Only at the v whose plain reading can still win is the class read whole (issue 33: on
        32 A100 + 32 H100 with the three options, a quarter of the popped roots' v; the reading
        took a third of the search): at the others its plain terms stay, each a bound at its v
        (the floors' A_lo and S_lo are at most the class's own), so the key, the least over v,
        is a bound of the root's layouts. It is not always the whole reading's: Z = L (M + B /
        v) / D need not rise as the memory lowers the class's rate (its bubble falls with it),
        so a v left plain may read above or below its whole reading
        (tests/mixed/test_optv2_live_v.py prices the layouts set up so)."""
        _, S, dp, counts = root.stage
        live = [bool(can_win(x)) for x in self._relaxed(root, root.state, 0, per_v=True).tolist()]
        d, b = self._stage_class(root.fam, S, counts, dp, live=live)
        state = (d, b + np.zeros_like(root.state[1]), *root.state[2:7], d)
        node = dataclasses.replace(root, state=state, base=(d, b), plain=False)
        node.bound = self._relaxed(node, state, 0)
        return node

    # -- the branch and bound -------------------------------------------------------------
    def _roots(self, fam: OptionFamily, first: bool = False, can_win=None) -> list["_Node"]:
        """The family's roots: a replica family's one (no class fixed), a mixed family's one per
        stage-wise class (subset S, dp, stage counts), each bounded with every group relaxed;
        `first`: a replica family's, its classes on their group's floors alone (its key before
        it comes up: most never do, and their memory's terms at every v took a fifth of 32 A100
        + 32 H100's search with the options, at v = 1 alone 12 s of GPT-3 175B / 1,024 A100's
        set-up with classes_per_group 2; _class_terms); `can_win`: a replica family's memory is
        read only at the v where its root's plain reading can win (_root)."""
        if (fam, first) not in self.root_memo:
            if fam.family == "replica":  # layouts with a pipeline, then those without (disjoint)
                roots = [self._root(fam, fam.used, _Base(), self._replica_ways(fam, True), None, self.pipe_zeros,
                                    True, first=first, can_win=can_win),
                         self._root(fam, fam.used, _Base(), self._replica_ways(fam, False), None,
                                    self.inst.search.zero, single=True, first=first, can_win=can_win)]
            else:
                roots = self._keyed_roots([n for n in self._mixed_roots(fam) if n is not None])
            self.root_memo[fam, first] = [n for n in roots if n is not None]
        return self.root_memo[fam, first]

    def _root(self, fam: OptionFamily, order: tuple, base: _Base, ways: list[list[tuple]], stage,
              zeros: tuple, pipelined: bool = False, single: bool = False, first: bool = False,
              can_win=None, keyed: bool = True) -> "_Node | None":
        """The root over `ways` (per group of `order`) beside `base`, its layouts at a ZeRO
        stage of `zeros`, bounded with every group relaxed; `pipelined`: a replica family's
        layouts with a class of pp > 1 (_replica_ways); `single`: its layouts without, whose
        ZeRO-3 is bounded apart, on the floors it raises (_bound).

        With `can_win`, the memory its classes' groups hold is read only at the v where the
        root read on the floors alone (`first`) can still win (issue 33: on GPT-3 175B / 1,024
        A100 with classes_per_group 2 the memory at every v of every stage count of the roots
        opened was a third of the search): at the others each class keeps its plain terms, a
        bound at its v as the memory's reading is (the floors' A_lo and S_lo are at most the
        class's own), so every node's bound, the least over v, is a bound of its layouts, as a
        mixed root's read whole at its live v alone (_whole); a root that can win at no v is
        its plain reading, which cannot win. `keyed` False: its bound is left to the caller
        (nan; _keyed_roots)."""
        if not all(ways):
            return None
        f = [self.fb.floor(g, fam.tp, fam.cp) for g in order]
        f3 = None
        if single and 3 in zeros and len(zeros) > 1:
            z3 = self.sync.zero3_layer_s(fam.used, fam.tp, fam.cp * max(2, len(fam.used)))
            f3, zeros = [np.maximum(fg, z3) for fg in f], tuple(z for z in zeros if z != 3)
        elif single and tuple(zeros) == (3,):
            f = [np.maximum(fg, self.sync.zero3_layer_s(fam.used, fam.tp, fam.cp * max(2, len(fam.used))))
                 for fg in f]
        levels = [self._profiles_of(w) for w in ways]
        raised = single and tuple(zeros) == (3,)
        live = None
        if can_win is not None and not first and not raised:
            plain = self._node_of(fam, order, base, ways, levels, f, f3, stage, zeros, pipelined, raised, True, None)
            live = tuple(bool(can_win(x)) for x in self._relaxed(plain, plain.state, 0, per_v=True).tolist())
            if not any(live):
                return plain
            live = self._profiles_live(plain, can_win)
        return self._node_of(fam, order, base, ways, levels, f, f3, stage, zeros, pipelined, raised, first, live,
                             keyed)

    def _profiles_live(self, plain: "_Node", can_win) -> list[list[tuple]]:
        """Per group of root `plain` (read on the floors alone), per profile, whether at each v
        a completion choosing that profile can still win: the bound of the profile with every
        other group relaxed (as _children's, the groups before it relaxed too), on the plain
        terms. Only there does _node_of read the memory its classes' groups hold (issue 33: on
        GPT-3 175B / 1,024 A100 with classes_per_group 2, every depth of the group's ways read
        at a root's live v was a third of the search, for the few profiles that win): elsewhere
        each keeps its plain terms, a bound at its v, so every bound read from the root is."""
        n = len(plain.levels)
        before = [(0.0, 0.0, 0, True, 0, math.inf, 0.0, 0.0)]  # relaxation of the groups before j
        for j in range(n - 1):
            top, _, least_p, some_deep, least_r, most_sh = self._summary(plain.ways[j])[1]
            top_d, least_bb, deepest = self._spread(plain.levels[j], plain.rates[j])
            d, b, p, deep, r, sh, d3, some = before[-1]
            before.append((d + top_d, b + least_bb, p + least_p, deep and some_deep, r + least_r, min(sh, most_sh),
                           d3 + top / plain.f3[j] if plain.f3 is not None else 0.0, max(some, deepest)))
        out = []
        for j in range(n):
            after = plain.rest[j + 1]
            rest = (before[j][0] + after[0], before[j][1] + after[1], before[j][2] + after[2],
                    before[j][3] and after[3], before[j][4] + after[4], min(before[j][5], after[5]),
                    before[j][6] + after[6], max(before[j][7], after[7]))
            qs, at = plain.levels[j], plain.state  # the profiles chosen beside the root's fixed part
            d = at[0] + np.stack([x[0] for x in plain.rates[j]])
            b = at[1] + np.stack([x[1] for x in plain.rates[j]])
            slots = at[2] + np.array([q.slots for q in qs])
            deep = at[4] & np.array([q.deep for q in qs])
            d3 = at[7] + (np.array([q.slots for q in qs])[:, None, None, None] / plain.f3[j]
                          if plain.f3 is not None else 0.0)
            syncs: dict[tuple, np.ndarray] = {}  # profiles share replicas and depths
            each = []
            for q in qs:
                state = (None, None, None, at[3] + q.classes, None, None, min(at[6], q.shallow))
                key = (at[5] + q.slots - q.bubble + rest[4], self._shallow(state, rest))
                if key not in syncs:
                    syncs[key] = self._sync(plain.fam, plain.zeros, *key)
                each.append(syncs[key])
            sync = np.stack(each)
            per_v = self._bound(plain, d + rest[0], d3 + rest[6], b + rest[1], slots + rest[2], deep & rest[3], sync,
                                per_v=True)
            # a profile that cannot win at its least v wins at none (can_win reads a bound against
            # the bar): most are read once (issue 33, Llama 3 8B / 256 H100 with both options)
            none = (False,) * per_v.shape[-1]
            out.append([tuple(bool(can_win(x)) for x in row) if can_win(min(row)) else none
                        for row in per_v.tolist()])
        return out

    def _node_of(self, fam: OptionFamily, order: tuple, base: _Base, ways: list, levels: list, f: list, f3, stage,
                 zeros: tuple, pipelined: bool, raised: bool, first: bool, live, keyed: bool = True) -> "_Node":
        """_root's node, its classes read by _rates (`first`, `live`: as _class_terms, or per
        group per profile, _profiles_live); its bound nan where not `keyed` (_keyed_roots)."""
        if isinstance(live, list):
            rates = [self._rates_live(fam, g, w, lv, zeros, each) for g, w, lv, each in zip(order, ways, levels, live)]
        else:
            rates = [self._rates(fam, g, w, lv, zeros, fg if raised else None, first=first, live=live)
                     for g, w, lv, fg in zip(order, ways, levels, f)]
        # per level, the relaxation of the levels from it on: (D, B, P, some deep, least
        # replicas, most shallowest stages: the shallowest class of a completion is no deeper
        # than the deepest shallowest class of each group left, D at ZeRO-3, the most stages
        # of a class of some group left)
        rest = [(0.0, 0.0, 0, True, 0, math.inf, 0.0, 0.0)]
        for j in reversed(range(len(ways))):
            d, b, p, deep, r, sh, d3, some = rest[0]
            top, least_b, least_p, some_deep, least_r, most_sh = self._summary(ways[j])[1]
            top_d, least_bb, deepest = self._spread(levels[j], rates[j])
            rest.insert(0, (d + top_d, b + least_bb,
                            p + least_p, deep and some_deep, r + least_r,
                            min(sh, most_sh), d3 + top / f3[j] if f3 is not None else 0.0, max(some, deepest)))
        factor = self.fb.factor(fam.used, fam.cp, (1, 2))
        zero = np.zeros((len(self.vs), len(self.fb.mbs), len(self.fb.idx)))
        state = (base.d, base.b + zero, base.slots, base.classes, True, base.replicas, base.shallow, base.d + zero)
        node = _Node(fam, order, stage, ways, levels, f, rest, factor, state, (), 0.0, pipelined, tuple(zeros), f3,
                     rates, raised, state[:2])
        node.bound = self._relaxed(node, state, 0) if keyed else math.nan
        return node

    def _keyed_roots(self, roots: list["_Node"]) -> list["_Node"]:
        """A mixed family's roots `roots` (_mixed_roots, none keyed) with their bound: _relaxed
        of each with every group relaxed, every root in one pass (issue 33: one call a root,
        2,705 roots on 32 A100 + 32 H100 with the three options, was a third of their Python).
        _z reads each root's arrays elementwise along a leading axis, so each the same floats;
        no mixed root reads ZeRO-3's raised floors (f3: _root's `single` alone)."""
        if not roots:
            return roots
        each = []
        for node in roots:
            d, b, slots, _, deep, reps, _, _ = node.state
            rest = node.rest[0]
            rd, rb, rp, rdeep, rr = rest[:5]
            each.append((d + rd, b + rb, slots + rp, deep and rdeep,
                         self._sync(node.fam, node.zeros, reps + rr, self._shallow(node.state, rest))))
        d, b, slots, deep, sync = (np.stack(x) if i in (0, 1, 4) else np.array(x) for i, x in enumerate(zip(*each)))
        assert all(node.f3 is None for node in roots)
        z = np.array([node.factor for node in roots]) * self._z(d, b, slots, deep, sync)
        for node, lb in zip(roots, z.tolist()):
            node.bound = lb
        return roots

    def _spread(self, levels: list[_Profile], rates: list[tuple]) -> tuple:
        """(the most D, the least B over a group's profiles `levels`, each v's, and the most
        stages of their shallowest classes), once per list of `rates` (_rates: thousands of a
        mixed family's roots share each group's fill; issue 33, with per-operator partitions
        a sixth of 32 A100 + 32 H100's option keys)."""
        got = self.ways.get(("spread", id(rates)))
        if got is None or got[0] is not rates:
            deepest = max((q.shallow for q in levels if math.isfinite(q.shallow)), default=0.0)
            got = self.ways["spread", id(rates)] = (rates, (np.maximum.reduce([x[0] for x in rates]),
                                                            np.minimum.reduce([x[1] for x in rates]), deepest))
        return got[1]

    def _rates(self, fam: OptionFamily, g: int, ways: list[tuple], levels: list[_Profile], zeros: tuple,
               raised=None, ranks: int | None = None, first: bool = False, live: tuple | None = None) -> list[tuple]:
        """Per profile of group g's `ways`, (the most D, the least B) its ways add, each class
        at option_recompute.RecomputeFloor.class_terms (its slowest stage's least time with
        the memory its group holds, A* >= L f_g / pp, and the least sum of its stage times),
        which the module docstring's derivation reads in place of L f_g / pp and L f_g; `raised`:
        the floor ZeRO-3 raises, where every layout runs it (one-stage classes). Z falls with D
        and grows with B, so a profile read at its ways' most D and least B is read at most at
        each's bound; `ranks`: the ZeRO ranks of the layouts read (else the most the family's
        may have: every stage slot of its groups, times cp); `live`: as _class_terms."""
        key = self._rates_key(fam, g, ways, zeros, raised, ranks, first, live)
        got = self.ways.get(key)
        if got is None or got[0] is not ways:
            got = self.ways[key] = (ways, self._profile_rates(key, fam, g, ways, levels, raised))
        return got[1]

    def _rates_live(self, fam: OptionFamily, g: int, ways: list[tuple], levels: list[_Profile], zeros: tuple,
                    live: list[tuple]) -> list[tuple]:
        """_rates with each profile's memory read at the v its `live` tuple marks (_profiles_live),
        the plain terms at the others (_class_terms)."""
        key = self._rates_key(fam, g, ways, zeros, None, None, False, tuple(live))
        got = self.ways.get(key)
        if got is None or got[0] is not ways:
            each = list(self._rates(fam, g, ways, levels, zeros, first=True))  # the root's plain reading
            alike: dict[tuple, list[int]] = {}  # the profiles read at one tuple of live v, in one pass
            for i, at in enumerate(live):
                if any(at):
                    alike.setdefault(None if all(at) else at, []).append(i)
            for one, ks in alike.items():
                read = self._profile_rates(self._rates_key(fam, g, ways, zeros, None, None, False, one), fam, g,
                                           ways, [levels[k] for k in ks], None)
                for k, x in zip(ks, read):
                    each[k] = x
            got = self.ways[key] = (ways, each)
        return got[1]

    def _rates_key(self, fam: OptionFamily, g: int, ways: list[tuple], zeros: tuple, raised, ranks: int | None,
                   first: bool, live: tuple | None = None) -> tuple:
        """_rates' memo key: keyed by the ranks read, not by whether they were asked (a layout
        at its family's most, _at_ranks: every slot a replica, reads its root's terms again)."""
        groups = self.inst.cluster.groups
        most = ranks or fam.cp * sum(groups[x].num_gpus // (fam.tp * fam.cp) for x in fam.used)
        return ("rates", id(ways), g, fam.tp, fam.cp, tuple(zeros), raised is not None, most, first, live)

    def _rate_of(self, fam: OptionFamily, g: int, ways: list[tuple], levels: list[_Profile], zeros: tuple,
                 ranks: int, i: int, live: tuple | None = None) -> tuple:
        """_rates(...)[i] at `ranks`, reading only profile i's classes where the group's other
        profiles were not read at those ranks (_at_ranks reads one profile per layout, at the
        next power of two of its replicas: issue 33, every profile's classes read at each such
        count took 40% of GPT-3 175B / 1,024 A100's search with classes_per_group 2); `live`:
        as _class_terms (the whole reading, where in hand, reads every v)."""
        key = self._rates_key(fam, g, ways, zeros, None, ranks, False)
        got = self.ways.get(key)
        if got is not None and got[0] is ways:
            return got[1][i]
        key = self._rates_key(fam, g, ways, zeros, None, ranks, False, live)
        one = self.ways.get(("rate",) + key + (i,))
        if one is None or one[0] is not ways:
            one = self.ways[("rate",) + key + (i,)] = (ways, self._profile_rate(key, fam, g, ways, levels[i], None))
        return one[1]

    def _profile_rate(self, key: tuple, fam: OptionFamily, g: int, ways: list[tuple], q: _Profile, raised) -> tuple:
        """(the most D, the least B) of profile q's ways (_rates), its classes' terms read once
        per `key` (_rates_key) and stage count."""
        return self._profile_rates(key, fam, g, ways, [q], raised)[0]

    def _profile_rates(self, key: tuple, fam: OptionFamily, g: int, ways: list[tuple], qs: list[_Profile],
                       raised) -> list[tuple]:
        """_profile_rate of each profile of `qs`, every way of theirs in one pass (issue 33: a
        loop of small arrays per way took a quarter of Llama 3 8B / 256 H100's search with
        classes_per_group 2 and idle_gpus, 498,081 ways). Each way's D is 0.0 + r_1 R_1 + r_2
        R_2 ..., its classes in their order, the same floats as the loop's, and a profile's
        most D and least B are the same whatever order its ways are read in (maximum and
        minimum; no way's D or B is -0.0, each starts from 0.0 +)."""
        terms = self.ways.get(("terms",) + key)
        if terms is None or terms[0] is not ways:
            terms = self.ways[("terms",) + key] = (ways, {})
        terms = terms[1]
        zeros, most, first, live = key[5], key[7], key[8], key[9]
        members = np.fromiter((i for q in qs for i in q.members), int)
        if not len(members):
            return []
        counts, pps, _ = self._way_arrays(ways)
        used = pps[members][np.arange(pps.shape[1]) < counts[members][:, None]]  # in the ways' order
        seen, at = np.unique(used, return_index=True)
        for pp in seen[np.argsort(at)].tolist():  # each stage count's terms in the order of first use
            if pp not in terms:
                terms[pp] = self._class_terms(fam, g, pp, zeros, most, raised, first, live)
        pps = list(terms)  # (none where every way is empty)
        shape = (len(self.vs), len(self.fb.mbs), len(self.fb.idx))
        rates, bubbles = (np.stack([terms[pp][x] for pp in pps]) if pps else np.zeros((0, *shape)) for x in (0, 1))
        place = np.zeros(max(pps, default=0) + 1, int)  # a stage count's place in rates and bubbles
        place[pps] = np.arange(len(pps))
        out: list[tuple] = []
        lo = 0
        while lo < len(qs):  # a few thousand ways a pass (a few MB: their arrays stay in cache)
            hi, count = lo, 0
            while hi < len(qs) and (hi == lo or count + len(qs[hi].members) <= WAYS_A_PASS):
                count += len(qs[hi].members)
                hi += 1
            out += self._ways_read(ways, qs[lo:hi], rates, bubbles, place)
            lo = hi
        return out

    def _ways_read(self, ways: list[tuple], qs: list[_Profile], rates: np.ndarray, bubbles: np.ndarray,
                   place: np.ndarray) -> list[tuple]:
        """_profile_rates of profiles `qs`, each stage count pp's terms rates[place[pp]] and
        bubbles[place[pp]]: each way's D and B (its classes in their order), then each
        profile's most and least over its ways, one way of every profile at a time."""
        counts, pps, reps = self._way_arrays(ways)
        sizes = np.array([len(q.members) for q in qs])
        starts = np.cumsum(sizes) - sizes
        members = np.fromiter((i for q in qs for i in q.members), int, int(sizes.sum()))
        held = counts[members]
        alike = np.unique(held).tolist()
        if len(alike) > 1 or not alike[0]:
            d, b = np.zeros((len(members), *rates.shape[1:])), np.zeros((len(members), *rates.shape[1:]))
        for count in alike:
            if not count:
                continue  # (0.0, 0.0)
            ats = np.flatnonzero(held == count) if len(alike) > 1 else slice(None)
            idx, r = place[pps[members[ats], :count]], reps[members[ats], :count, None, None, None]
            dk, bk = 0.0 + r[:, 0] * rates[idx[:, 0]], 0.0 + r[:, 0] * bubbles[idx[:, 0]]
            for j in range(1, count):
                dk += r[:, j] * rates[idx[:, j]]
                bk += r[:, j] * bubbles[idx[:, j]]
            if len(alike) > 1:
                d[ats], b[ats] = dk, bk
            else:
                d, b = dk, bk
        if sizes.max() > 16:  # (a few profiles of many ways: one reduction each)
            top, least = np.maximum.reduceat(d, starts, axis=0), np.minimum.reduceat(b, starts, axis=0)
        else:
            top, least = d[starts], b[starts]
            for j in range(1, int(sizes.max())):
                more = np.flatnonzero(sizes > j)
                top[more] = np.maximum(top[more], d[starts[more] + j])
                least[more] = np.minimum(least[more], b[starts[more] + j])
        top = np.maximum(top, 0.0)
        return list(zip(top, least + 0.0 * top))

    def _way_arrays(self, ways: list[tuple]) -> tuple:
        """(classes (ways,), stage counts and replicas (ways, most classes), replicas as
        floats, 0 past a way's classes) of a group's `ways`, once per list."""
        got = self.ways.get(("way arrays", id(ways)))
        if got is None or got[0] is not ways:
            counts, pps, reps = _way_table(ways)
            got = self.ways["way arrays", id(ways)] = (ways, (counts, pps, reps.astype(float)))
        return got[1]

    def _class_terms(self, fam: OptionFamily, g: int, pp: int, zeros: tuple, most: int, raised=None,
                     first: bool = False, live: tuple | None = None) -> tuple:
        """(rate, bubble), each (v, micro-batch sizes, scenarios) over OptionBounds.vs: a replica
        class of pp stages on group g at each v (option_recompute.RecomputeFloor.class_terms),
        or on the floor ZeRO-3 `raised` (pp / max(f_g, raised), pp - 1; a v > 1 it cannot run:
        no rate, an infinite bubble), or with `first` on its group's floor alone (_plain_terms:
        A_lo = S_lo / pp, S_lo = L f_g + h_g + its least hand-offs, each at most the class's
        own, the derivation's plain reading; the family's key, family_bound); `live`
        (a bool per v, None: all): the memory's reading at the v it marks, the plain one at the
        others (each a bound at its v: _root)."""
        key = ("class terms", g, fam.tp, fam.cp, pp, zeros, most, first, live)  # (profiles share classes)
        got = self.ways.get(key) if raised is None else None
        if got is not None:
            return got
        plain = None
        if raised is not None or first or live is not None:
            plain = self._plain_terms(fam, g, pp, raised)
        each = plain
        if raised is None and not first:
            along = None if live is None else tuple(v for v, x in zip(self.vs, live) if x)
            each = [self.recompute.class_terms(g, fam.tp, fam.cp, pp, zeros, most, v, along) if live is None or live[i]
                    else plain[i] for i, v in enumerate(self.vs)]
        got = np.stack([x[0] for x in each]), np.stack([x[1] for x in each])
        if raised is None:
            self.ways[key] = got
        return got

    def _plain_terms(self, fam: OptionFamily, g: int, pp: int, raised) -> list[tuple]:
        """Per v of OptionBounds.vs, (rate, bubble) of a replica class of pp stages on group g
        read on its floors alone (_class_terms): A_lo = S_lo / pp (a slowest stage is at least
        the mean), S_lo = L f_g + h_g + P (its layers at the floor, the output layer its last
        stage runs, RecomputeFloor.head_s, and its stages' least hand-offs, hand_offs_s: issue
        33, without them GPT-3 175B / 1,024 A100's pipelined roots with classes_per_group 2
        were read 5-8% below the plans they hold), so rate L pp / S_lo and bubble pp - 1 (at
        v > 1 times kept_share; where a zero-bubble schedule shapes the stage terms, v > 1
        reads S_lo = L f_g); on the floor ZeRO-3 `raised` (one stage), pp / max(f_g,
        raised) and pp - 1; a v the class cannot run: no rate, an infinite bubble."""
        rc, L = self.recompute, self.L
        f = self.fb.floor(g, fam.tp, fam.cp)
        kept = kept_share(rc, fam.tp, fam.cp)
        out = []
        for v in self.vs:
            if not runs_v(rc, pp, v):
                out.append((np.zeros(f.shape), np.full(f.shape, np.inf)))
                continue
            if raised is not None:
                rate = pp / np.maximum(f, raised)
            elif v > 1 and zero_bubble_runs(self.inst):  # its stage terms shaped (RecomputeFloor.class_terms)
                rate = pp / f
            else:
                rate = L * pp / (L * f + rc.head_s(g, fam.tp, fam.cp) + rc.hand_offs_s(g, fam.tp, fam.cp, pp, v))
            out.append((rate, (1.0 if v == 1 else kept) * np.full(f.shape, pp - 1.0)))
        return out

    def _replica_ways(self, fam: OptionFamily, pipelined: bool) -> list[list[tuple]]:
        """Per group its ways (class_layouts.replica_options, as (pp, replicas) shares): with
        `pipelined`, those whose classes fit at a ZeRO stage the framework runs with a pipeline
        (a layout of them needs a class of pp > 1: _leaves); else those of single-stage classes
        only, fitting at any ZeRO stage of the space. A layout with a class of pp > 1 runs one
        ZeRO stage for every class, one the framework runs with pipelines
        (FrameworkRules.admits), so each of its classes fits at such a stage; the two sets are
        disjoint and hold every layout whose classes can fit."""
        units = [self.inst.cluster.groups[g].num_gpus for g in fam.used]
        u = fam.tp * fam.cp
        if not self.inst.search.idle_gpus and any(x % u for x in units):
            return [[] for _ in fam.used]
        out = []
        for g, x in zip(fam.used, units):
            key = (g, fam.tp, fam.cp)
            if key not in self.listed:  # the full listing's ways, for the index of a layout
                self.listed[key] = len(_shares(self.inst, x // u, False, lambda pp: True))
            fits = self._fits(*key, self.pipe_zeros if pipelined else self.inst.search.zero)
            out.append(self._ways(("replica", pipelined) + key, lambda: _shares(
                self.inst, x // u, False, fits if pipelined else lambda pp: pp == 1 and fits(pp))))
        return out

    def _fits(self, g: int, tp: int, cp: int, zeros: tuple):
        """fits(pp): whether a replica class of pp stages on group g at tp and cp fits the GPU
        for some micro-batch size, sequence-parallel flag and ZeRO stage of `zeros`: the
        listing's lower bound (space.micro_batch_lower_bound_parts, its last and its fullest
        stage, both on g) at most the GPU's memory less the reserve. ZeRO shards over every
        replica of the plan times cp, at most every stage slot of the cluster (one replica
        each) times cp; the bound's state falls with those ranks and its other terms do not
        read them beyond the ring's existence (>= 2 classes: >= 2 ranks), so the bound at the
        most ranks is at most the plan's own, and a class that fails it fails in every layout
        (a plan of it is refused by memory, which build would find: the layout never wins).
        With per-operator partitions every class fits here: a layer plan may hold fewer
        activation bytes than Megatron's layer, which the listing's bound reads."""
        inst, s = self.inst, self.inst.search
        if self.fb.layer_plans:
            return lambda pp: True
        cap = inst.cluster.groups[g].gpu.hbm_bytes - s.memory_reserve_bytes
        ranks = max(2, sum(x.num_gpus // (tp * cp) for x in inst.cluster.groups) * cp)
        sps = [sp for sp in s.sequence_parallel if not (sp and (tp == 1 or inst.model.seq_len % (tp * cp)))]
        mbs = self.fb.mbs.astype(int).tolist()

        def fits(pp: int) -> bool:
            key = ("fits", g, tp, cp, pp, tuple(zeros))
            if key not in self.ways:
                self.ways[key] = any(
                    max(micro_batch_lower_bound_parts(inst, tp=tp, cp=cp, pp=pp, dp=1, micro_batch=b, sp=sp,
                                                      zero=z, zero_ranks=ranks)) <= cap
                    for b in [min(mbs)] for sp in sps for z in zeros)
            return self.ways[key]
        return fits

    def _bound(self, node: "_Node", d, d3, b, slots, deep, sync, per_v: bool = False, alike=0) -> np.ndarray:
        """node.factor times the module's Z plus `sync` on the floors (D = d), or, for a root
        whose layouts may run ZeRO-3 without a pipeline, the lesser of that and Z on the floors
        ZeRO-3 raises (D = d3, no sync: option_sync.SyncFloor.zero3_layer_s) at ZeRO-3. Arrays
        as _z's (`per_v`: each v's; `alike`: _alike's)."""
        z = self._z(d, b, slots, deep, sync, per_v, alike)
        if node.f3 is not None:
            z = np.minimum(z, self._z(d3, b, slots, deep, per_v=per_v, alike=alike))
        return node.factor * z

    @staticmethod
    def _alike(node: "_Node", slots, reps):
        """Per layout of `node` completed with stage slots `slots` and replicas `reps` (arrays
        or numbers): its replicas X where every class is one stage (slots == replicas) on the
        one group of a replica family, else 0.

        Such classes read the same terms (_class_terms of one group, tp, cp and pp = 1, at one
        reading of ranks and v: on the floors ZeRO-3 raises too), so each has one rate R and
        bubble b, and a layout of them D = X R, B = X b (a profile's most D and least B are
        then its ways' own). Each class runs m_k >= 1 micro-batches, an integer, at v = 1 (v >
        1 needs pp > 1), with m_k <= Z R / L - b (the module docstring's derivation), so m_k <=
        floor(Z R / L - b); summed, X floor(Z R / L - b) >= sum_k x_k m_k = M, so floor(Z R /
        L - b) >= ceil(M / X) and Z >= L (ceil(M / X) + b) / R = L (X ceil(M / X) + B) / D:
        the bound with M read as X ceil(M / X) >= M (issue 33: GPT-3 175B / 1,024 A100 with
        classes_per_group 2, twins of 1,024 replicas at tp 1 beside M = 1,536 were bounded at
        1.5 micro-batches a replica, not 2, and 512 layouts set up; the search's own twin
        rule, bounds/twins.py, settles them only once listed). The memory conditions (M >=
        slots) still read M."""
        if node.stage is not None or len(node.fam.used) != 1:
            return 0
        slots, reps = np.asarray(slots), np.asarray(reps)
        return np.where(slots == reps, reps, 0)

    @staticmethod
    def _shallow(state, rest) -> float:
        """The most stages the shallowest class of a completion of `state` by `rest` runs: no
        more than any class chosen, than the deepest shallowest class of each group left, and,
        with fewer than two classes chosen (a layout holds two), than some group's left."""
        sh = min(state[6], rest[5])
        return min(sh, rest[7]) if state[3] < 2 else sh

    def _relaxed(self, node: "_Node", state, j: int, per_v: bool = False):
        """The bound of `state` (the first j groups chosen) with the groups from j relaxed
        (`per_v`: each v's, an array over OptionBounds.vs)."""
        d, b, slots, _, deep, reps, _, d3 = state
        rest = node.rest[j]
        rd, rb, rp, rdeep, rr, _, rd3, _ = rest
        sync = self._sync(node.fam, node.zeros, reps + rr, self._shallow(state, rest))
        got = self._bound(node, d + rd, d3 + rd3, b + rb, slots + rp, deep and rdeep, sync, per_v)
        return got if per_v else float(got)

    @staticmethod
    def _chosen(node: "_Node", j: int, i: int) -> tuple:
        """node.state with group j's profile i chosen."""
        q = node.levels[j][i]
        d, b, slots, classes, deep, reps, sh, d3 = node.state
        rate, bubble = node.rates[j][i]
        return (d + rate, b + bubble, slots + q.slots, classes + q.classes,
                deep and q.deep, reps + q.slots - q.bubble, min(sh, q.shallow),
                d3 + q.slots / node.f3[j] if node.f3 is not None else 0.0)

    def _children(self, node: "_Node", can_win) -> list[tuple[int, float]]:
        """Node's children (one more group's profile chosen) whose bound can win: _relaxed of
        each, every profile at once (one call per child took a tenth of 32 A100 + 32 H100's
        search with the options)."""
        j = node.depth
        states = [self._chosen(node, j, i) for i in range(len(node.levels[j]))]
        if not states:
            return []
        rest = node.rest[j + 1]
        rd, rb, rp, rdeep, rr, _, rd3, _ = rest
        d, b, slots, _, deep, reps, _, d3 = (np.array(x) for x in zip(*states))
        sync = np.stack([self._sync(node.fam, node.zeros, int(r) + rr, self._shallow(state, rest))
                         for r, state in zip(reps, states)])
        zz = self._bound(node, d + rd, d3 + rd3, b + rb, slots + rp, deep & rdeep, sync)
        return [self._keep(dataclasses.replace(node, state=state, picked=node.picked + (i,), bound=lb))
                for i, (state, lb) in enumerate(zip(states, zz.tolist())) if can_win(lb)]

    def _leaves(self, node: "_Node", can_win) -> list[tuple[int, float]]:
        """(node, bound) of `node` completed by each of the last group's profiles whose bound
        can win, every profile at once."""
        qs = node.levels[-1]
        states = [self._chosen(node, len(node.levels) - 1, i) for i in range(len(qs))]
        col = [np.array(x) for x in zip(*states)]  # per state field, over the profiles
        d, b, slots, _, deep, reps, sh, d3 = col
        sync = np.stack([self._sync(node.fam, node.zeros, int(r), float(x)) for r, x in zip(reps, sh)])
        zz = self._bound(node, d, d3, b, slots, deep, sync, alike=self._alike(node, slots, reps))
        classes = node.state[3]
        pipes = sum(node.levels[k][i].bubble for k, i in enumerate(node.picked))  # > 0: a class of pp > 1
        out = []
        for i, (q, lb, state) in enumerate(zip(qs, zz.tolist(), states)):
            if classes + q.classes < 2 or not can_win(lb) or node.pipelined and pipes + q.bubble == 0:
                continue  # (a pipelined root's layout without a class of pp > 1 is the other root's)
            read: list = []
            lb = max(lb, self._at_ranks(node, i, state, sync[i], can_win, read))
            if can_win(lb):
                out.append(self._keep(dataclasses.replace(node, state=state, picked=node.picked + (i,), bound=lb,
                                                          read=tuple(read))))
        return out

    def _at_ranks(self, node: "_Node", i: int, state: tuple, sync, can_win=None, read: list | None = None) -> float:
        """The bound of `node` completed by the last group's profile i with every class read at
        the layout's own ZeRO ranks (its replicas times cp) instead of the most its family may
        have (_rates: a ring of fewer ranks shards the state less, so memory binds more); -inf
        where the floors ZeRO-3 raises are read (_root).

        With `can_win`, the memory at those ranks is read only at the v where the layout's
        bound at its family's ranks can still win (issue 33: on GPT-3 175B / 1,024 A100 with
        classes_per_group 2 the reading at every v was a third of the search): each v's is a
        bound of the layout's plans at that v, the family's and the own ranks' alike, so the
        larger of the two at each live v, the family's at the others, and the least over v is
        a bound of the layout."""
        if node.raised:
            return -math.inf
        fam, picks = node.fam, node.picked + (i,)
        ranks = _ranks_read(fam.cp * state[5], fam.cp * sum(self.inst.cluster.groups[g].num_gpus // (fam.tp * fam.cp)
                                                            for g in fam.used))
        here, live = None, None
        alike = self._alike(node, state[2], state[5])
        if can_win is not None:
            here = self._bound(node, state[0], state[7], state[1], state[2], state[4], sync, per_v=True, alike=alike)
            live = tuple(bool(can_win(x)) for x in here.tolist())
            live = None if all(live) else live
        if read is not None:  # what _own_bound reads again of each of the layouts
            read += [ranks, live, here, sync, alike]
        d, b = self._stage_at(node, ranks, live)
        for j, (g, ways, levels) in enumerate(zip(node.order, node.ways, node.levels)):
            rate, bubble = self._rate_of(fam, g, ways, levels, node.zeros, ranks, picks[j], live)
            d, b = d + rate, b + bubble
        if here is None:
            return float(self._bound(node, d, state[7], b, state[2], state[4], sync, alike=alike))
        at = self._bound(node, d, state[7], b, state[2], state[4], sync, per_v=True, alike=alike)
        return float(np.where(np.array(live or [True] * len(self.vs)), np.maximum(at, here), here).min())

    def _stage_at(self, node: "_Node", ranks: int, live: tuple | None) -> tuple:
        """(D, B) of node's fixed part (_Base) with its stage-wise class, if any, read at
        `ranks` at the v `live` marks (_stage_class)."""
        if node.stage is None:
            return node.base
        return self._stage_class(node.fam, node.stage[1], node.stage[3], node.stage[2], ranks,
                                 live=None if live is None else list(live))

    def _own_bound(self, node: "_Node", picks: tuple) -> float:
        """The bound of the layouts of one way per group (`picks`, indices into node.ways) of a
        leaf `node` (_leaves), each class at its own terms at the layout's ranks: the
        leaf's _at_ranks with each group's way's own D and B in place of its profile's most D
        and least B (_rates). A profile's ways share their stage slots, bubble, replicas,
        classes and shallowest class, so their sync, ZeRO-3 floors and conditions, but not
        their classes' rates (issue 33: on GPT-3 175B / 1,024 A100 with classes_per_group 2 a
        profile holds (4, 1) + (6, 42) beside (4, 42) + (88, 1), the one's rate and the
        other's bubble read together). At each v the way's reading is a bound of its layouts
        as its profile's is (_at_ranks, on terms read at each v, _class_terms, with the memory
        at the v `live` marks), so the larger of the two at each v, and the least over v, is
        a bound of the layouts, at least the leaf's."""
        ranks, live, here, sync, alike = node.read
        state, fam = node.state, node.fam
        d, b = self._stage_at(node, ranks, live)
        for g, ways, i in zip(node.order, node.ways, picks):
            for pp, r in ways[i][1]:
                rate, bubble = self._class_terms(fam, g, pp, node.zeros, ranks, None, False, live)
                d, b = d + r * rate, b + r * bubble
        at = self._bound(node, d, state[7], b, state[2], state[4], sync, per_v=True, alike=alike)
        return float(np.maximum(at, here).min())

    def _layouts_of(self, node: "_Node", picks: tuple):
        """(rank fields, shapes) of the layouts of one way per group (`picks`)."""
        ways, order = node.ways, node.order
        replicas = tuple(ClassShape(replicas=r, stage_groups=(g,) * pp)
                         for g, w, i in zip(order, ways, picks) for pp, r in w[i][1])
        picks = tuple(w[i][0] for w, i in zip(ways, picks))  # places in the full listing's ways
        if node.stage is None:  # the replica family: the index in the product of its ways
            index = 0
            for g, i in zip(order, picks):
                index = index * self.listed[(g, node.fam.tp, node.fam.cp)] + i
            yield (index,), replicas
            return
        if not replicas:
            return
        si, S, dp, counts = node.stage
        G, k = len(self.inst.cluster.groups), len(S)
        for oi, perm in enumerate(itertools.permutations(range(k))):
            stages = tuple(g for i in perm for g in [S[i]] * counts[i])
            fields = (si, dp, *counts, *(0,) * (G - k), *picks, *(0,) * (G - len(picks)), oi)
            yield fields, (ClassShape(replicas=dp, stage_groups=stages),) + replicas

    def _stage_class(self, fam: OptionFamily, S: tuple, counts: tuple, dp: int, ranks: int | None = None,
                     plain: bool = False, live: list | None = None) -> tuple:
        """(D, B), each (v, micro-batch sizes, scenarios) over OptionBounds.vs, that a mixed
        layout's stage-wise class of dp replicas, counts[i] stages on S[i], adds at each v: D =
        dp R, R = L / A_lo the least of the floors' (sum_g c_g / f_g) and of the memory its
        groups hold (option_recompute.stage_class_slowest_s at v: A* >= the slowest stage of
        any split that fits, 0 where none does), at v > 1 also of S_lo / pp (a slowest stage is
        at least the mean); and B = dp (S_lo / A_lo - 1) with S_lo = L f_min + the least output
        layer of its groups (its stage times sum to at least its layers at the least floor and
        its last stage's output layer, option_recompute.RecomputeFloor.head_s), at v > 1 times
        option_recompute.kept_share. A v the class cannot run (option_recompute.runs_v): no D,
        B inf. Where the framework runs zero-bubble schedules, v > 1 reads the floors' R
        alone, and so does every v with `plain` (a mixed root's first key, _mixed_roots), and
        every v that `live` (a bool per v) leaves out and no earlier call read (_whole): each
        memory reading only raises A_lo, so each is a bound. `ranks`: the ZeRO ranks its
        layouts have at most (_at_ranks), else every stage slot of the groups used times cp
        (the memo is keyed by those ranks, not by the groups used: a stage-wise class through S
        is in the families of every superset of S, whose ranks differ)."""
        groups = self.inst.cluster.groups
        most = ranks or fam.cp * sum(groups[x].num_gpus // (fam.tp * fam.cp) for x in fam.used)
        key = ("stage class", S, counts, fam.tp, fam.cp, most)  # per replica: dp scales it
        got = self.ways.get(key)
        if got is None:
            got = self.ways[key] = self._stage_class_plain(fam, S, counts)
        if not plain:
            self._stage_class_read(fam, S, counts, most, got, live)
        rates, bubbles = got["plain"] if plain else got["whole"]
        return dp * rates, dp * bubbles

    def _stage_class_plain(self, fam: OptionFamily, S: tuple, counts: tuple) -> dict:
        """_stage_class's memo entry: its terms on the floors alone at every v ("plain"), the
        same to be raised v by v by the memory its groups hold ("whole"), the v read so far
        ("read": those the memory does not raise are read from the start), and what reading
        one needs (the least sum S_lo, the kept share, the plain rates)."""
        L = self.L
        floors, least = self._stage_least(S, fam.tp, fam.cp)
        rate_lo = sum(c / f for c, f in zip(counts, floors))
        pp = sum(counts)
        kept = kept_share(self.recompute, fam.tp, fam.cp)
        runs, read = self._stage_runs(pp)
        # every v > 1 the class runs reads the same terms (the floors' A_lo: the least of the
        # rate and the mean), the others none: each v's the same floats as read one v at a time
        rates = np.zeros((len(self.vs), *rate_lo.shape))
        bubbles = np.full(rates.shape, np.inf)
        rates[0], bubbles[0] = rate_lo, 1.0 * (least * rate_lo / L - 1)
        interleaved = runs[1:]  # the v > 1 it runs
        if interleaved.any():
            rate = np.minimum(rate_lo, L * pp / least)
            rates[1:][interleaved], bubbles[1:][interleaved] = rate, kept * (least * rate / L - 1)
        return {"plain": (rates, bubbles), "whole": (rates.copy(), bubbles.copy()), "read": list(read),
                "least": least, "kept": kept}

    def _stage_least(self, S: tuple, tp: int, cp: int) -> tuple:
        """(the floors of S's groups, S_lo = L f_min + the least output layer of S's groups) of a
        stage-wise class through S (_stage_class), once per S, tp and cp (its stage counts
        change neither)."""
        key = ("stage least", S, tp, cp)
        got = self.ways.get(key)
        if got is None:
            floors = [self.fb.floor(g, tp, cp) for g in S]
            got = self.ways[key] = (floors, self.L * np.minimum.reduce(floors)
                                    + np.minimum.reduce([self.recompute.head_s(g, tp, cp) for g in S]))
        return got

    def _stage_runs(self, pp: int) -> tuple:
        """(whether a stage-wise class of pp stages runs each v of OptionBounds.vs, as a bool
        array; whether each v is read from the start, _stage_class_plain's "read": a v it does
        not run, or v > 1 under zero-bubble schedules), once per pp."""
        key = ("stage runs", pp)
        got = self.ways.get(key)
        if got is None:
            runs = np.array([v == 1 or runs_v(self.recompute, pp, v) for v in self.vs])
            zb = zero_bubble_runs(self.inst)
            got = self.ways[key] = (runs, tuple(bool(not r or v > 1 and zb) for v, r in zip(self.vs, runs)))
        return got

    def _stage_class_read(self, fam: OptionFamily, S: tuple, counts: tuple, most: int, got: dict,
                          live: list | None) -> None:
        """Raise got["whole"] (_stage_class_plain) by the memory the class's groups hold at
        every v `live` marks (None: every v) not read yet."""
        want = [v for i, v in enumerate(self.vs) if not got["read"][i] and (live is None or live[i])]
        if not want:
            return
        L = self.L
        slowest = stage_class_slowest_s(self.recompute, dict(zip(S, counts)), fam.tp, fam.cp, self.pipe_zeros,
                                        most, tuple(want))
        rates, bubbles = got["whole"]
        for v, each in zip(want, slowest):
            i = self.vs.index(v)
            with np.errstate(divide="ignore"):
                rates[i] = np.minimum(got["plain"][0][i], L / each)
            bubbles[i] = (got["kept"] if v > 1 else 1.0) * (got["least"] * rates[i] / L - 1)
            got["read"][i] = True

    def _mixed_roots(self, fam: OptionFamily):
        """The mixed family's roots, in class_layouts._mixed_shapes' order: per subset S, dp and
        stage counts, the stage-wise class fixed (its _Base) and the replica classes' ways per
        group (S's groups first, the rest after, as the listing's product takes them)."""
        inst = self.inst
        idle, most = inst.search.idle_gpus, inst.search.classes_per_group
        used, tp, cp = fam.used, fam.tp, fam.cp
        gpus = [inst.cluster.groups[g].num_gpus for g in used]
        if not idle and any(x % (tp * cp) for x in gpus):
            return
        slots = {g: x // (tp * cp) for g, x in zip(used, gpus)}

        fits = {g: self._fits(g, tp, cp, self.pipe_zeros) for g in used}  # beside a pipeline

        def fill(g: int, left: int, optional: bool) -> list[tuple]:
            return self._ways(("fill", g, tp, cp, left, optional), lambda: _shares(inst, left, optional, fits[g]))

        subsets = [S for k in range(2, len(used) + 1) for S in itertools.combinations(used, k)]
        for si, S in enumerate(subsets):
            rest = [g for g in used if g not in S]
            for dp in range(1, min(slots[g] for g in S) + 1):
                for counts in itertools.product(*(range(1, min(slots[g] // dp, inst.model.layers) + 1) for g in S)):
                    if not pp_allowed(inst, sum(counts)):
                        continue
                    d, b = self._stage_class(fam, S, counts, dp, plain=True)  # read whole when it comes up (expand)
                    base = _Base(d=d, b=b, slots=dp * sum(counts), classes=1, replicas=dp,
                                 shallow=float(sum(counts)))
                    ways = ([fill(g, slots[g] - dp * c, True) for g, c in zip(S, counts)]
                            + [fill(g, slots[g], False) for g in rest])
                    root = self._root(fam, tuple(S) + tuple(rest), base, ways, (si, S, dp, counts), self.pipe_zeros,
                                      keyed=False)  # (keyed together, _keyed_roots)
                    if root is not None:
                        root.plain = True
                    yield root


def _ranks_read(ranks: int, most: int) -> int:
    """The ZeRO ranks at which _at_ranks reads a layout of `ranks`: the next power of two, at
    most the family's `most` (issue 33: read at each layout's own, one group of 256 H100 with
    two classes per group priced the classes' terms at 600 rank counts, 30 s before a plan).
    A class's terms are read at no fewer ranks than its layout's, so at no more state per GPU
    (ZeRO shards it over them: memory.layer_state_bytes falls with the ranks; the runtime
    allowance is read at the fewest, option_recompute.RecomputeFloor._keyed_rows): it holds at least
    the layers it holds at its own ranks before recomputing, so A* and S_lo are at most its
    own, which the derivation's A_lo and S_lo may be (module docstring)."""
    return min(most, 1 << max(ranks - 1, 0).bit_length())


@dataclass
class _Node:
    """A partial choice of one family: the first `depth` groups' profiles `picked` (in `order`
    of the root: S's groups first for a mixed layout), `state` what they add to the bound
    (D, B at v = 1, B at v > 1, P, classes, all deep, replicas, shallowest class's stages),
    `bound` its relaxed bound (_relaxed)."""

    fam: OptionFamily
    order: tuple  # the groups of `ways`, in their order
    stage: tuple | None  # (S's place, S, dp, counts) of a mixed layout's stage-wise class
    ways: list
    levels: list
    f: list
    rest: list
    factor: float
    state: tuple
    picked: tuple
    bound: float
    pipelined: bool = False  # a replica family's layouts with a class of pp > 1 (_replica_ways)
    zeros: tuple = ()  # the ZeRO stages its layouts may run (the sync's floor reads them)
    f3: list | None = None  # the floors at ZeRO-3 without a pipeline, where bounded apart (_bound)
    rates: list | None = None  # per level, per profile: (most D, least B) its ways add (OptionBounds._rates)
    raised: bool = False  # its floors are those ZeRO-3 raises (_root)
    base: tuple = ()  # (D, B) of its fixed part (_Base)
    plain: bool = False  # a mixed root keyed on its stage-wise class's plain floors (OptionBounds._whole)
    read: tuple = ()  # a leaf's (ranks, live v, bound per v, sync, alike) of _at_ranks (OptionBounds._own_bound)

    @property
    def depth(self) -> int:
        return len(self.picked)


def option_families(inst, deferred: list) -> list[OptionFamily]:
    """The OptionFamily of each (family index, subset index, family, groups) that
    space.partials_and_families deferred for the options, one per tp and cp."""
    from paraplan.solver.class_layouts import cp_values, tp_choices
    s = inst.search
    return [OptionFamily(family, used, tpg[used[0]], cp, (fi, si, ti, ci))
            for fi, si, family, used in deferred
            if (family == "replica" and (len(used) >= 2 or s.classes_per_group > 1)
                or family == "mixed" and s.mixed_families and len(used) >= 2)
            for ti, tpg in enumerate(tp_choices(inst, used, family))
            for ci, cp in enumerate(cp_values(inst, used, tpg))]
