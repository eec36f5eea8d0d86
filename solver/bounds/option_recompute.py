"""The least full recomputation memory forces on a replica class of an option family (issue 33:
on 32 A100 + 32 H100 the families' bound, solver/option_families.py, priced each layer at its
group's floor f_g, stage_families.FamilyBounds.floor, the least over the recompute modes, while a
Llama-3 70B class at tp 1 or 2 cannot hold its layers' activations without recomputing many).

A replica class of pp stages on group g, in a layout of several classes, holds pp - s
micro-batches in flight on stage s with 1F1B (class_coefficients.class_outer; interleaved,
cost/coefficients.in_flight_micro_batches holds at least as many), so stage s holding n_s layers
of which r_s are fully recomputed needs (cost/stage_memory, cost/schedule.stage_mem_bytes)
    M_s = stage_mem + n_s (state + f_s a) - r_s f_s (a - c) <= cap,   f_s = pp - s,
a, c one micro-batch's stash of a layer without full recompute and of a recomputed one (its
input), allocator fragmentation included. Each term is read at its least over what a layout
may choose at the micro-batch size b: stage_mem at least the runtime allowance and backward
workspace (space.micro_batch_lower_bound_terms' `every`, its allowance at the fewest ranks, 2 cp),
state at the most ranks ZeRO may shard over (every stage slot of the groups used, times cp), a
at the least of the listing's recompute modes less the job's storage savings (as
coefficients.megatron_layer), sp and ZeRO at each value allowed, the least kept. With the
embedding or loss as a layer slot (interleaving) the end stages' short chunks correct their
stash (cost/schedule.uneven_chunk_mem_bytes), so where the space runs slots the two end stages
are read with no stash at all (only their state: n_s state <= room_s). So
    r_s >= rho_s(n_s) = clip((n_s (state + f_s a) - room_s) / (f_s (a - c)), 0, n_s),
room_s = cap - every, a convex piecewise-linear function of n_s (0 up to room_s / (state + f_s
a), then slope (state + f_s a) / (f_s (a - c)) until every layer is recomputed, beyond which the
stage cannot hold n_s). The fewest recomputed layers of the class, R = min sum_s rho_s(n_s) over
real n_s >= 0 summing to L, is a relaxation of every integer split's; it fills each stage to its
free room, then spends the rest on the stages of least slope, each up to what it holds with every
layer recomputed (a greedy that is optimal for a sum of convex functions under one sum).

**The slowest stage.** Memory also keeps a class from balancing its layers: its early stages,
holding the most micro-batches, hold few layers unless they recompute. A stage of n layers
(an integer, >= 1) recomputes an integer r >= rho_s(n) of them, so it takes at least t_s(n) =
n f_g + rho ceil(rho_s(n)); the least A at which the stages hold L, each the most n with
t_s(n) <= A (slowest_stage_each_s), is at most the slowest stage time of any split that fits:
A* >= L f_g / pp (on Llama-3 70B at tp 1, a stage holding 31 micro-batches holds one layer
where the continuous relaxation gives it 1.6). The last stage also runs the output layer (the
logits GEMM and loss, h_g >= 0: unpriced.stage_floor_terms' a_last, the least over the sp flags
and recompute modes, head_s), so its t_s(n) is h_g + n f_g + ...: on Llama-3 70B (a 128,256-word
vocabulary) h_g is about 1.1 layers' time, and a class of 16 stages, 5 layers each at the
floors, has A* = 6 f_g, not 5 f_g (issue 33). A mixed layout's stage-wise class through several
groups (stage_class_slowest_s) is read in each order of its groups, where every stage's place,
its in-flight count and the group of its last stage are known, and A* is the least over the
orders.

Every stage of a class of two stages or more also hands activations on and gradients back (build's
pp_p2p, coefficients._pipeline_p2p_s): at least one edge a stage, each at least e, the least over
the links a hand-off inside the group may take (hand_off_s), so t_s(n) carries e beside the
output layer, and the stage times sum to at least 2 (pp - 1) e more (pp edges at v > 1: the
wrap-around), each edge paid on both its stages (hand_offs_s).

Each recomputed layer repeats its forward, rc_fwd (coefficients._layer_costs: recompute_time =
rc_fwd + ZeRO-3's extra exposure, 0 at ZeRO 0-2 and in a pipeline, where ZeRO-3's gathers run once
per step), at least the least over sp and the recompute modes. So the class's stage times sum to
at least L f_g + h_g + P + R rho_lo (P the hand-offs), and its slowest stage to at least that /
pp: the class prices like one on the floor f'_g(pp) = f_g + R rho_lo / L; with A*,
option_families.py's derivation (which reads only A_k >= A_lo and S_k >= S_lo) takes A_lo = A*
and S_lo = L f_g + h_g + P + R rho_lo (class_terms). A class of one stage at ZeRO-3 is given no recompute (its recompute may
hide ZeRO-3 traffic), nor a class of an MoE model.

**Interleaving.** At v > 1 (class_terms and stage_class_slowest_s at v) a class of a layout of
several runs m >= 2 pp micro-batches, so stage s holds (2 (pp - s - 1) + (v - 1) pp + 1) / v
of them in flight (cost/coefficients.in_flight_micro_batches, uncapped there; in_flight), at
least pp - s: need and the recompute it forces only grow with the count (rho_s(n) = (n state +
n f a - room) / (f (a - c)) rises with f wherever the stage holds n at all, n state < room), so
every stage time is at least its v = 1 reading. Each stage's decoder layers n plus the slot it
counts (the embedding on stage 0, the loss on the last, each 0 or 1 by the slot modes of v,
cost/space_rules.slot_modes) fill whole chunks of v (cost/pipeline_split.chunk_problem), so a
stage holds only such n (chunk_offsets, chunk_counts; the union of the modes' counts, a
relaxation), and A* is read over those counts (slowest_in_chunks_s); the end stages a mode of
v flags are read with no stash, as above; R is read at v's counts. A* is also at least S_lo /
pp. On Llama-3 70B (80 layers) v = 4, 5, 8, 10, 16, 20 and 40 run without slots, so every
stage holds a multiple of v: 5 stages at v = 16 hold 16 layers each. Where the framework runs
zero-bubble schedules, whose drain passes, V-shaped stage order and memory differ
(zero_bubble_runs), v > 1 reads the plain floors.

With per-operator partitions (search.tensor_partitions) the class's stages may run any layer
plan of their tp group: f_g is the plans' floor (stage_families.FamilyBounds.floor), and of the
memory terms above only the stash a may be less than Megatron's layer's (the state, workspace
and checkpoint of every plan are at least Megatron's: solver/bounds/plan_range.py), so a is read
at the least of Megatron's and every plan's stash, and rho_lo at the least of every plan's
recomputed forward. Every term is then at most its value under any layer plan, and the
derivation above holds for every layer-plan combination of the class.
"""

from __future__ import annotations

import itertools

import numpy as np

from paraplan.cost import memory
from paraplan.cost.class_coefficients import least_hand_off_s
from paraplan.cost.coefficients import in_flight_micro_batches
from paraplan.cost.framework_rules import rules_for
from paraplan.cost.space_rules import slot_modes, split_slots_run
from paraplan.cost.specs import Attention, Recompute
from paraplan.cost.plan_specs import ClassOuter, ClassShape
from paraplan.cost.zero_bubble import W_PASSES_SAVED, weight_grad_share
from paraplan.solver.bounds.plan_range import plan_range
from paraplan.solver.bounds.unpriced import stage_floor_terms
from paraplan.solver.partition_plans import enabled as partitions_enabled
from paraplan.solver.space import micro_batch_lower_bound_terms, virtual_stage_values


def least_recomputed(room: np.ndarray, held: np.ndarray, slope: np.ndarray, layers: float) -> float:
    """min sum_s rho_s(n_s) over real n_s >= 0 summing to `layers` (module docstring): stage s
    holds room[s] / held[s] layers (`held`: a layer's bytes, none recomputed) for free, each one
    more at `slope[s]` recomputed layers (inf: none more), up to where every layer is
    recomputed; inf where the stages cannot hold `layers`. Arrays: (stages,)."""
    free = np.maximum(room, 0.0) / held
    left = layers - free.sum()
    if left <= 0:
        return 0.0
    # with every layer recomputed: n (held - f (a - c)) <= room, i.e. rho_s(n) = n at the most
    # n_s = room / (held - slope^-1 held): slope = held / (f (a - c)), so f (a - c) = held / slope
    per_full = held - held / slope  # held / slope = f (a - c); inf slope: held
    full = np.where(per_full > 0, np.maximum(room, 0.0) / np.where(per_full > 0, per_full, 1.0), np.inf)
    total = 0.0
    for s in np.argsort(slope, kind="stable"):
        take = min(left, max(full[s] - free[s], 0.0))
        if take <= 0:
            continue
        total += take * slope[s]
        left -= take
        if left <= 0:
            return total
    return float("inf")


ELEMENTS_A_PASS = 1 << 18  # _slowest_rows' rows x scenarios x stages x layers a pass (2 MiB an array)
# one-mask passes of this many rows or more have slowest_in_chunks_s leave out the rows that
# cannot hold the layers (GPT-3 175B cpg2: 40-47 rows a pass, most left out; Llama 3 8B: 8-23, few)
ROWS_TO_FILTER = 24
ROWS_AT_ONCE = 8  # short rows from which least_recomputed_rows runs them together (row 2: 1-2 a call)
# a class's rows at one v > 1 from which _slowest_rows reads them in a pass of their own, one mask
# for all (32 A100 + 32 H100 with the options: 4 rows a v, read with the class's other v in one
# pass; Llama 3 8B with classes_per_group 2 and idle_gpus: 8-23 rows a v, read apart)
V_ROWS_APART = 8


def least_recomputed_rows(room: np.ndarray, held: np.ndarray, slope: np.ndarray, layers: float) -> np.ndarray:
    """least_recomputed of each row of (rows, stages) arrays, the greedy run on every row at
    once, stage by stage in each row's order of slopes, with each row's arithmetic in
    least_recomputed's order, so the same floats (issue 33: 55,404 calls, a fifth of the
    memory's reading on GPT-3 175B / 1,024 A100 with classes_per_group 2)."""
    free = np.ascontiguousarray(np.maximum(room, 0.0) / held)
    # each row's sum as least_recomputed's: a C-contiguous array's reduction along its last
    # axis sums each row as the row's own sum does (pairwise, tests/mixed/test_cpg2c_chunks_held.py)
    left = layers - free.sum(axis=-1)
    total = np.zeros(len(room))
    short = left > 0
    if short.sum() < ROWS_AT_ONCE:  # a few rows: each its own greedy (numpy's per-call cost)
        for i in np.flatnonzero(short).tolist():
            total[i] = least_recomputed(room[i], held[i], slope[i], layers)
        return total
    with np.errstate(divide="ignore", invalid="ignore"):
        per_full = held - held / slope
        full = np.where(per_full > 0, np.maximum(room, 0.0) / np.where(per_full > 0, per_full, 1.0), np.inf)
    order = np.argsort(slope, axis=-1, kind="stable")
    rows = np.arange(len(room))
    active = short.copy()  # rows still short of the layers
    for col in range(room.shape[-1]):
        if not active.any():  # every row holds the layers: no later stage changes a total
            break
        s = order[:, col]
        take = np.minimum(left, np.maximum(full[rows, s] - free[rows, s], 0.0))
        step = active & (take > 0)
        with np.errstate(invalid="ignore"):
            total = np.where(step, total + take * slope[rows, s], total)
        left = np.where(step, left - take, left)
        active &= ~(step & (left <= 0))
    return np.where(active, np.inf, total)


class RecomputeFloor:
    """f'_g(pp) of the module docstring, per micro-batch size and scenario (fb:
    stage_families.FamilyBounds: its floors, micro-batch sizes, scenarios and recompute modes)."""

    def __init__(self, fb) -> None:
        self.fb, self.inst = fb, fb.inst
        self.memo: dict = {}

    def sps(self, tp: int, cp: int) -> list[bool]:
        inst = self.inst
        return [sp for sp in inst.search.sequence_parallel
                if not (sp and (tp == 1 or inst.model.seq_len % (tp * cp)))] or [False]

    def rc_fwd_s(self, g: int, tp: int, cp: int) -> np.ndarray:
        """(micro-batch sizes, scenarios): the least forward a full recompute repeats, of
        Megatron's layer and every layer plan (plan_range.py)."""
        key = ("rc", g, tp, cp)
        got = self.memo.get(key)
        if got is None:
            fb = self.fb
            got = np.full((len(fb.mbs), len(fb.idx)), np.inf)
            for bi, b in enumerate(fb.mbs.astype(int).tolist()):
                for sp, rc in itertools.product(self.sps(tp, cp), fb.recompute):
                    for si, i in enumerate(fb.idx):
                        got[bi, si] = min(got[bi, si], plan_range(self.inst, i, g, tp, cp, b, sp, rc,
                                                                  self.memo).least_rc_fwd_s)
            got = self.memo[key] = np.maximum(got, 0.0)
        return got

    def head_s(self, g: int, tp: int, cp: int) -> np.ndarray:
        """(micro-batch sizes, scenarios): the least output layer (logits GEMM and loss) a last
        stage on group g runs, of every sp flag and recompute mode (unpriced.stage_floor_terms'
        a_last, the bound before pricing's own; layer plans leave it as Megatron's); 0 for an
        MoE model, whose classes read nothing of this module."""
        key = ("head", g, tp, cp)
        got = self.memo.get(key)
        if got is None:
            fb, inst = self.fb, self.inst
            got = np.zeros((len(fb.mbs), len(fb.idx)))
            if inst.model.moe is None:
                got[:] = np.inf
                for bi, b in enumerate(fb.mbs.astype(int).tolist()):
                    for sp, rc in itertools.product(self.sps(tp, cp), fb.recompute):
                        o = ClassOuter(tp=tp, cp=cp, micro_batch=b, sequence_parallel=sp, recompute=rc,
                                       classes=(ClassShape(replicas=1, stage_groups=(g,)),))
                        for si, i in enumerate(fb.idx):
                            got[bi, si] = min(got[bi, si], stage_floor_terms(inst, i, o, 0, g, fb.layer_plans,
                                                                             fb.memo)[2])
                got = np.maximum(got, 0.0)
            self.memo[key] = got
        return got

    def hand_off_s(self, g: int, tp: int, cp: int, v: int, sp: bool | None = None) -> np.ndarray:
        """(micro-batch sizes, scenarios): e, the least pipeline hand-off each stage of a class
        of two stages or more on group g pays per micro-batch at v (cost/class_coefficients.
        least_hand_off_s on each scenario's group; `sp` None: the least over the flags tp
        admits); 0 at v > 1 where the framework runs zero-bubble schedules, which shape the
        stage terms (zero_bubble_runs)."""
        key = ("hand-off", g, tp, cp, v, sp)
        got = self.memo.get(key)
        if got is None:
            fb, inst = self.fb, self.inst
            got = np.zeros((len(fb.mbs), len(fb.idx)))
            if v == 1 or not zero_bubble_runs(inst):
                sps = self.sps(tp, cp) if sp is None else [sp]
                for bi, b in enumerate(fb.mbs.astype(int).tolist()):
                    for si, i in enumerate(fb.idx):
                        group = inst.scenarios[i].cluster.groups[g]
                        got[bi, si] = min(least_hand_off_s(inst.model, group, tp, cp, b, x, v) for x in sps)
            self.memo[key] = got
        return got

    def hand_offs_s(self, g: int, tp: int, cp: int, pp: int, v: int) -> np.ndarray:
        """(micro-batch sizes, scenarios): the least sum of a class's stages' hand-offs: pp - 1
        edges (one more, the wrap-around, at v > 1: class_placement), each paid by both its
        stages, at hand_off_s's e; 0 for one stage."""
        if pp == 1:
            return np.zeros((len(self.fb.mbs), len(self.fb.idx)))
        return 2 * (pp - 1 + (v > 1)) * self.hand_off_s(g, tp, cp, v)

    def stash_bytes(self, g: int, b: int, tp: int, cp: int, sp: bool) -> float:
        """a: one layer's least stash for one micro-batch on group g, fragmentation included:
        Megatron's, or with per-operator partitions the least of it and every layer plan's
        (plan_range.py; the stash is the one memory term a plan may hold less of). Kept by what it
        reads (not pp, ZeRO or the ranks, which _keyed_rows asks it at)."""
        key = ("stash", g, b, tp, cp, sp)
        got = self.memo.get(key)
        if got is not None:
            return got
        m, job = self.inst.model, self.inst.job
        flash = job.attention is Attention.FLASH
        modes = {Recompute.NONE: memory.layer_activation_bytes(m, b, tp, cp, sp, flash, job.framework, job.precision),
                 Recompute.SELECTIVE: memory.selective_activation_bytes(m, b, tp, cp, sp, job.framework,
                                                                        job.precision)}
        a = min(modes.get(rc, modes[Recompute.NONE]) for rc in self.fb.recompute)
        a -= memory.job_activation_savings_bytes(m, b, tp, cp, sp, job)
        if partitions_enabled(self.inst):
            a = min([a] + [plan_range(self.inst, self.fb.idx[0], g, tp, cp, b, sp, rc, self.memo).least_act_bytes
                           for rc in self.fb.recompute])
        got = self.memo[key] = a * (1 + memory.ALLOCATOR_FRAGMENTATION)
        return got

    def _row(self, g: int, tp: int, cp: int, pp: int, b: int, sp: bool, z: int, most_ranks: int,
             v: int = 1) -> tuple:
        """(key, (room, held, slope)) of one (micro-batch size, sp, ZeRO) of _keyed_rows, arrays of pp;
        `key` what the row reads: (g, tp, cp, pp, b, sp) and its terms room, state and c
        (stage_terms), and v > 1, so that rows alike at other ranks or ZeRO stages (the ranks
        enter only through ZeRO's sharding of the state and the ring's existence, both ranks >= 2
        cp) are built, and read by class_terms, once (issue 33: GPT-3 175B / 1,024 A100 with
        classes_per_group 2 read them at each family's and layout's ranks). Each stage holds
        in_flight(pp, v) micro-batches; the end stages that v's slots relieve (relieved_ends)
        hold their state alone."""
        room, state, a, c = self.stage_terms(g, tp, cp, pp, b, sp, z, most_ranks)
        key = ("row", g, tp, cp, pp, b, sp, room, state, c) + ((v,) if v > 1 else ())
        got = self.memo.get(key)
        if got is None:
            flight, ends = self._places(pp, v)
            held = state + flight * a
            slope = held / (flight * (a - c))
            for s in ends:  # the end stages: their state alone (module docstring)
                held[s], slope[s] = state, np.inf
            got = self.memo[key] = (np.full(pp, room), held, slope)
        return key, got

    def _places(self, pp: int, v: int) -> tuple[np.ndarray, tuple[int, ...]]:
        """(in_flight(pp, v), relieved_ends(pp, v)), once per (pp, v) (read-only: shared; _row
        asked them 67,140 times on GPT-3 175B / 1,024 A100 with classes_per_group 2, each
        reading the slot modes again)."""
        key = ("places", pp, v)
        got = self.memo.get(key)
        if got is None:
            flight = in_flight(pp, v)
            flight.flags.writeable = False
            got = self.memo[key] = (flight, self.relieved_ends(pp, v))
        return got

    def relieved_ends(self, pp: int, v: int) -> tuple[int, ...]:
        """The stages read with no stash: at v = 1 both ends where the space runs the slots
        (fb.slot_c: read so at every v before v > 1 was read apart), at v > 1 stage 0 where a
        slot mode of v counts the embedding, the last stage where one counts the loss
        (chunk_offsets)."""
        if v == 1:
            return (0, pp - 1) if self.fb.slot_c > 0 else ()
        first, last = chunk_offsets(self.inst, v)
        return tuple(s for s, offs in ((0, first), (pp - 1, last)) if 1 in offs)

    def stage_terms(self, g: int, tp: int, cp: int, pp: int, b: int, sp: bool, z: int,
                    most_ranks: int) -> tuple[float, float, float, float]:
        """(room, state, a, c) of a stage on group g in a pipeline of pp stages, as _row reads
        them (each at its least over the ranks 2 cp .. most_ranks, the stash a at least c)."""
        key = ("stage terms", g, tp, cp, pp, b, sp, z, most_ranks)
        got = self.memo.get(key)
        if got is None:
            inst = self.inst
            lo = micro_batch_lower_bound_terms(inst, tp=tp, cp=cp, pp=pp, dp=1, micro_batch=b, sp=sp, zero=z,
                                               zero_ranks=2 * cp)
            hi = micro_batch_lower_bound_terms(inst, tp=tp, cp=cp, pp=pp, dp=1, micro_batch=b, sp=sp, zero=z,
                                               zero_ranks=max(most_ranks, 2 * cp))
            every, state, c = min(lo[0], hi[0]), min(lo[2], hi[2]), hi[3]
            cap = inst.cluster.groups[g].gpu.hbm_bytes - inst.search.memory_reserve_bytes
            a = max(self.stash_bytes(g, b, tp, cp, sp), c * (1 + 1e-12))  # recomputing frees >= 0
            got = self.memo[key] = (cap - every, state, a, c)
        return got

    def _keyed_rows(self, g: int, tp: int, cp: int, pp: int, zeros: tuple, most_ranks: int,
                    v: int = 1) -> list[list[tuple]]:
        """Per micro-batch size, per (sp, ZeRO) allowed: _row's (key, row) at v, less the rows
        another of the same size dominates (_undominated)."""
        key = ("rows", g, tp, cp, pp, zeros, most_ranks, v)
        got = self.memo.get(key)
        if got is None:
            modes = ("modes", g, tp, cp, pp, zeros, most_ranks)  # the undominated (sp, ZeRO), alike at every v
            if modes not in self.memo:
                self.memo[modes] = [_undominated([(sp, z, self.stage_terms(g, tp, cp, pp, b, sp, z, most_ranks))
                                                  for sp, z in itertools.product(self.sps(tp, cp), zeros)])
                                    for b in self.fb.mbs.astype(int).tolist()]
            got = self.memo[key] = [[self._row(g, tp, cp, pp, b, sp, z, most_ranks, v) for sp, z in per_mb]
                                    for b, per_mb in zip(self.fb.mbs.astype(int).tolist(), self.memo[modes])]
        return got

    def _slowest_rows(self, keyed: list[tuple], no_rc: bool) -> None:
        """Memoise, per row (_row's (key, row)) not read yet, its A* at its group's floor and
        recompute (none with `no_rc`) per scenario, as a list: the rows at v = 1 in one pass
        (slowest_stage_each_s), those at v > 1 in another (slowest_in_chunks_s, each stage's
        layers in whole chunks of its row's v, chunk_offsets), each v's rows apart, so that
        its one mask of chunks is read once for all of them."""
        todo = {k: row for k, row in keyed if ("slowest", k, no_rc) not in self.memo}
        if not todo:
            return
        L = int(self.inst.model.layers)
        # rows a pass: a few MB of (rows, scenarios, stages, layers) arrays (issue 33: 32 rows a
        # pass read GPT-3 175B / 1,024 A100's ~40 rows of a class with classes_per_group 2 in two
        # passes, 3,357 in all, mostly numpy's cost per call); each row's A* is its own (every
        # time and order is read per row), so the same floats however rows share a pass
        per_row = len(self.fb.idx) * L
        for interleaved in (False, True):
            for pp, keys in self._passes(todo, interleaved):
                step = max(1, ELEMENTS_A_PASS // (per_row * pp))
                for lo in range(0, len(keys), step):
                    part = keys[lo:lo + step]
                    got = self._slowest_part(part, todo, no_rc, L, pp)
                    for k, each in zip(part, got.tolist()):
                        self.memo["slowest", k, no_rc] = each

    @staticmethod
    def _passes(todo: dict, interleaved: bool) -> list[tuple[int, list]]:
        """_slowest_rows' rows (at v = 1, or at v > 1: `interleaved`) as (pp, rows) to read
        together: per pp, the rows of a v with V_ROWS_APART or more alone (one mask, read once
        for them all; from ROWS_TO_FILTER rows its pass leaves out those that cannot hold the
        layers, slowest_in_chunks_s), the others of every v together, each row with its own
        v's mask (v > 1 ends a row's key, _row)."""
        by_v: dict[tuple, list] = {}
        for k in todo:
            if (len(k) > 10) is interleaved:
                by_v.setdefault((k[4], k[10] if interleaved else 1), []).append(k)
        out, rest = [], {}
        for (pp, _), keys in by_v.items():
            if len(keys) >= V_ROWS_APART:
                out.append((pp, keys))
            else:
                rest.setdefault(pp, []).extend(keys)
        return out + list(rest.items())

    def _slowest_part(self, part: list[tuple], todo: dict, no_rc: bool, L: int, pp: int) -> np.ndarray:
        """(rows, scenarios): A* of rows `part` of pp stages, in one pass (_slowest_rows): at v
        = 1, or each at its own v > 1 (its key's last field) with its v's mask of chunks (a
        class's few rows at each of its v in one pass, not one pass a v: issue 33, 32 A100 +
        32 H100 with the three options read 4 rows a pass)."""
        vs = [k[10] if len(k) > 10 else 1 for k in part]
        fs, rhos, heads = zip(*(self._row_times(k[1], k[2], k[3], pp, k[5], k[6], v, no_rc)
                                for k, v in zip(part, vs)))
        room, held, slope = (np.stack([todo[k][x] for k in part]) for x in range(3))
        f, rho, head = np.stack(fs)[..., None], np.stack(rhos)[..., None], np.stack(heads)
        if vs[0] == 1:
            return slowest_stage_each_s(room, held, slope, L, f, rho, head=head)
        if len(set(vs)) == 1:  # one mask, read once for every row
            return slowest_in_chunks_s(room, held, slope, L, f, rho, self.chunks(pp, vs[0]), head)
        return slowest_in_chunks_s(room, held, slope, L, f, rho, np.stack([self.chunks(pp, v) for v in vs]), head)

    def _row_times(self, g: int, tp: int, cp: int, pp: int, b: int, sp: bool, v: int, no_rc: bool) -> tuple:
        """(f, rho, head) of a row of pp stages on group g (_slowest_part): its layers' floor and
        recompute (none with `no_rc`) per scenario, (scenarios,), and each stage's term beside
        its layers, (scenarios, pp): the output layer on the last stage, the least hand-off at sp
        and v on every stage of two or more; once for the rows alike at other ranks and ZeRO
        stages (read-only: shared)."""
        key = ("row times", g, tp, cp, pp, b, sp, v, no_rc)
        got = self.memo.get(key)
        if got is None:
            bi = self._mb_index(b)
            f = self.fb.floor(g, tp, cp)[bi]
            rho = 0.0 * f if no_rc else self.rc_fwd_s(g, tp, cp)[bi]
            head = np.zeros((len(f), pp))
            head[:, -1] = self.head_s(g, tp, cp)[bi]  # the output layer, on the last stage
            if pp > 1:  # every stage's least hand-off, at the row's sp and v
                head += self.hand_off_s(g, tp, cp, v, sp)[bi][:, None]
            got = self.memo[key] = (f, rho, head)
        return got

    def chunks(self, pp: int, v: int) -> np.ndarray:
        """chunk_counts of a class of pp stages at v on the model's layers, once per (pp, v)
        (read-only: shared; a stage-wise class's A* asked it thousands of times on 32 A100 + 32
        H100 with the three options)."""
        key = ("chunks", pp, v)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = chunk_counts(int(self.inst.model.layers), pp, v, *chunk_offsets(self.inst, v))
            got.flags.writeable = False
        return got

    def _mb_index(self, b: int) -> int:
        got = self.memo.get(("mb index",))
        if got is None:
            got = self.memo["mb index",] = {x: i for i, x in enumerate(self.fb.mbs.astype(int).tolist())}
        return got[b]

    def least_layers(self, g: int, tp: int, cp: int, pp: int, zeros: tuple, most_ranks: int,
                     v: int = 1) -> np.ndarray:
        """(micro-batch sizes,): R, the fewest layers a class of pp stages on group g at tp and
        cp recomputes in any layout at v (ZeRO of `zeros` over at most `most_ranks` ranks)."""
        keyed = self._keyed_rows(g, tp, cp, pp, zeros, most_ranks, v)
        todo = {k: row for per_mb in keyed for k, row in per_mb if ("least", k) not in self.memo}
        if todo:
            # every row's free room at once; least_recomputed's greedy only where it is short
            # of the layers (the same arithmetic per row: issue 33, 86,180 rows on GPT-3 175B)
            room, held, slope = (np.stack([row[x] for row in todo.values()]) for x in range(3))
            for k, r in zip(todo, least_recomputed_rows(room, held, slope, float(self.inst.model.layers)).tolist()):
                self.memo["least", k] = r
        return np.array([min((self.memo["least", k] for k, _ in per_mb), default=np.inf) for per_mb in keyed])

    def _plain(self, g: int, tp: int, cp: int, pp: int, zeros: tuple) -> bool:
        """Whether nothing of this module is read for the class (RecomputeFloor.class_terms)."""
        inst = self.inst
        return inst.model.moe is not None or not zeros or pp == 1 and 3 in zeros and len(zeros) == 1

    def class_terms(self, g: int, tp: int, cp: int, pp: int, zeros: tuple, most_ranks: int, v: int = 1,
                    along: tuple | None = None) -> tuple:
        """(rate, bubble), each (micro-batch sizes, scenarios): a replica of pp stages on group g
        at v adds L / A* to option_families.py's D and S_lo / A* - 1 to its B (A* its slowest
        stage's least time, slowest_stage_each_s; S_lo = L f_g + h_g + P + R rho_lo the least sum of
        its stage times): its derivation reads only A_k >= A* and S_k >= S_lo. On the plain floor
        (A* = L f_g / pp) they are pp / f_g and pp - 1. A class of one stage at ZeRO-3 is read
        with rho = 0 (its recompute may hide ZeRO-3's traffic).

        At v > 1 (module docstring, "Interleaving"): each stage holds whole chunks of v
        (slowest_in_chunks_s), at interleaving's in-flight counts (in_flight); A* is at least
        S_lo / pp (a slowest stage is at least the mean), and the bubble is kept_share times
        S_lo / A* - 1. A v that a class of pp stages cannot run (virtual_stage_values) adds
        no rate and an infinite bubble: no layout holding the class runs it. `along`: the v > 1
        whose rows are read in the same pass as v's (None: every v the class may run; the
        caller that reads only some v names them, issue 33)."""
        key = ("terms", g, tp, cp, pp, zeros, most_ranks, v)
        got = self.memo.get(key)
        if got is not None:
            return got
        f = self.fb.floor(g, tp, cp)
        L = float(self.inst.model.layers)
        if v > 1 and not runs_v(self, pp, v):
            got = self.memo[key] = (np.zeros(f.shape), np.full(f.shape, np.inf))
            return got
        kept = kept_share(self, tp, cp) if v > 1 else 1.0
        if self._plain(g, tp, cp, pp, zeros) or v > 1 and zero_bubble_runs(self.inst):
            # A_lo = S_lo / pp, S_lo = L f + the hand-offs (0 at v > 1 under zero bubble)
            got = self.memo[key] = (L * pp / (L * f + self.hand_offs_s(g, tp, cp, pp, v)),
                                    kept * np.full(f.shape, pp - 1.0))
            return got
        no_rc = pp == 1 and 3 in zeros
        rows = self._keyed_rows(g, tp, cp, pp, zeros, most_ranks, v)
        # what the terms read beyond the class's group, tp, cp and pp: its rows (the ranks and
        # ZeRO stages only through them; v > 1 in their keys) and whether recompute is read, so
        # layouts and families whose rows are alike share one reading
        read = ("terms read", g, tp, cp, pp, no_rc, tuple(tuple(k for k, _ in per_mb) for per_mb in rows))
        got = self.memo.get(read)
        if got is None:
            rho = 0.0 * f if no_rc else self.rc_fwd_s(g, tp, cp)
            r = self.least_layers(g, tp, cp, pp, zeros, most_ranks, v)
            least = L * f / pp
            slowest = self._least_slowest((g, tp, cp, pp, zeros, most_ranks), v, along, rows, no_rc, f.shape)
            head = self.head_s(g, tp, cp) + self.hand_offs_s(g, tp, cp, pp, v)
            total = L * f + head + np.where(np.isfinite(r), r, 0.0)[:, None] * rho
            if v == 1:
                slowest = np.maximum(slowest, least + head / pp)  # (a relaxation never below the plain floor's)
            else:
                slowest = np.maximum(slowest, total / pp)
            with np.errstate(divide="ignore", invalid="ignore"):
                rate = np.where(np.isfinite(slowest), L / slowest, 0.0)
                bubble = np.where(np.isfinite(slowest), total / slowest - 1.0, pp - 1.0)
            got = self.memo[read] = (rate, kept * np.minimum(bubble, pp - 1.0))
        self.memo[key] = got
        return got

    def _least_slowest(self, cls: tuple, v: int, along: tuple | None, rows: list, no_rc: bool,
                       shape: tuple) -> np.ndarray:
        """(micro-batch sizes, scenarios): A* of class `cls` (g, tp, cp, pp, zeros, most ranks)
        at v, the least over its rows (_keyed_rows at v); at v > 1 the rows of the v of
        `along` (class_terms) read in the same pass."""
        g, tp, cp, pp, zeros, most_ranks = cls
        if v > 1:  # every v > 1 asked of the class in one pass: the class's other v read next
            self._slowest_rows([x for w in interleavings(self, pp) if along is None or w == v or w in along
                                for per_mb in self._keyed_rows(g, tp, cp, pp, zeros, most_ranks, w)
                                for x in per_mb], no_rc)
        self._slowest_rows([x for per_mb in rows for x in per_mb], no_rc)
        slowest = np.full(shape, np.inf)
        for bi, per_mb in enumerate(rows):
            each = [self.memo["slowest", k, no_rc] for k, _ in per_mb]
            for si in range(shape[1]):
                for x in each:
                    slowest[bi, si] = min(slowest[bi, si], x[si])
        return slowest

    def floor(self, g: int, tp: int, cp: int, pp: int, zeros: tuple, most_ranks: int) -> np.ndarray:
        """(micro-batch sizes, scenarios): f'_g(pp) = f_g + R rho_lo / L (module docstring);
        f_g where no recompute is read (one stage at ZeRO-3, MoE) or
        no completion fits (R inf: class_memory.py refuses such a class, not this bound)."""
        f = self.fb.floor(g, tp, cp)
        if self._plain(g, tp, cp, pp, zeros) or pp == 1 and 3 in zeros:
            return f
        r = self.least_layers(g, tp, cp, pp, tuple(zeros), most_ranks)
        r = np.where(np.isfinite(r), r, 0.0)[:, None]
        return f + r * self.rc_fwd_s(g, tp, cp) / self.inst.model.layers


def _undominated(modes: list[tuple]) -> list[tuple]:
    """Of one micro-batch size's (sp, ZeRO, stage_terms' (room, state, a, c)), the (sp, ZeRO)
    of each distinct row once, less those another dominates: the same sp, a and c (so the same
    hand-off and floors), at least its room and at most its state (issue 33: ZeRO's stages
    differ in these alone, and the rows of every stage took most of GPT-3 175B / 1,024 A100's
    option keys with classes_per_group 2). Every stage time t_s(n) = n f + rho ceil((n (state
    + F a) - room) / (F (a - c))) + head is then at most the other's, in floats too (each
    operation is monotone), and so is the most a stage holds: so are A* and R, of which the
    bound reads the least over the rows."""
    out: dict[tuple, tuple] = {}
    for sp, z, terms in modes:
        out.setdefault((sp, *terms), (sp, z))
    keys = list(out)
    return [out[k] for k in keys
            if not any(x[0] == k[0] and x[3:] == k[3:] and x[1] >= k[1] and x[2] <= k[2] and x[1:3] != k[1:3]
                       for x in keys)]


def slowest_stage_each_s(room: np.ndarray, held: np.ndarray, slope: np.ndarray, layers: int, f: np.ndarray,
                         rho: np.ndarray, every_stage: bool = True, head: np.ndarray | None = None) -> np.ndarray:
    """A*: the least slowest-stage time of any split of `layers` (integers, each stage >= 1)
    over stages whose time is at least t_s(n) = n f + rho ceil(rho_s(n)) for n layers (r_s
    >= rho_s(n) recomputed, an integer; module docstring), n up to where every layer is
    recomputed: stage s holds h_s(A) = #{n >= 1 : t_s(n) <= A} layers at a time A (t_s grows
    with n), so A* is the layers-th least of every stage's t_s(1..), and at least each
    stage's t_s(1); inf where the stages cannot hold `layers`.

    Of several sets of stages at once, each at several (f, rho) (each layer's floor and
    recompute, one per stage or one for all): room, held and slope (rows, stages), f and rho
    (rows, k, stages) or (rows, k, 1); (rows, k), each row's memory read once and every row in
    one pass (issue 33: one call per row and scenario, 86,180 on GPT-3 175B / 1,024 A100 with
    classes_per_group 2, took most of its set-up).

    Only the first n layers of each stage are read where more cannot be among the layers
    least: the stages' times at their first c = ceil(layers / stages) are at most some v (each
    stage's t_s(n) >= n f_s, as its recompute term is >= 0), so at least layers times are <= v
    and the layers-th least is <= v; a time t_s(n) of n f_min > v is above it, so dropping
    every n >= v / f_min + 2 leaves the layers-th least as it was (a deep pipeline of 96
    layers reads a few of them, not 96).

    `every_stage` False: the stages are places a pipeline may leave empty (search.idle_gpus,
    solver/bounds/stage_recompute.py): no stage need hold a layer, so a stage that holds none is
    no refusal and its t_s(1) no bound; A* is then the layers-th least alone, at most that of any
    subset of the places.

    `head` (broadcast to (rows, k, stages), >= 0): a stage term a_s each stage's time carries
    beside its layers (the output layer on the last stage: t_s(n) = a_s + n f + ...). A stage of
    n layers still offers its first n times, each at most its own (t_s grows with n), so the
    layers-th least stays at most the slowest stage, and the cut above holds (t_s(n) >= n f_s).
    A stage's time is at least a_s, and at least t_s(1) less a_s where it holds a layer; t_s(1)
    itself is not read, as the last stage of a split with the loss as a layer slot may hold
    none of the model's layers (_slot_row in unpriced.py)."""
    stages = room.shape[-1]
    c = -(-layers // stages)
    # rows whose stages hold fewer than `layers` layers in all (each up to where every layer is
    # recomputed) or one stage none have fewer finite times than that: A* is inf, no time read
    per_full = held - held / slope
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.floor(np.where(per_full > 0, room / np.where(per_full > 0, per_full, 1.0), np.inf) + 1e-9)
    holds = (np.minimum(top, layers).sum(axis=-1) >= layers) & ((top >= 1).all(axis=-1) | (not every_stage))
    if not holds.all():
        out = np.full((len(room), max(f.shape[1], rho.shape[1])), np.inf)
        if holds.any():
            out[holds] = slowest_stage_each_s(room[holds], held[holds], slope[holds], layers,
                                              np.broadcast_to(f, (len(room), *f.shape[1:]))[holds],
                                              np.broadcast_to(rho, (len(room), *rho.shape[1:]))[holds], every_stage,
                                              None if head is None else
                                              np.broadcast_to(head, (len(room), *head.shape[1:]))[holds])
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        v = _stage_times(room, held, slope, c, f, rho, head).max(axis=(-2, -1))  # (rows, k); nan, inf: no cut
        fmin = np.broadcast_to(f, (*f.shape[:2], stages)).min(axis=-1)
        cut = np.where(np.isfinite(v) & np.isfinite(fmin) & (fmin > 0), np.floor(v / fmin) + 2, layers)
    cols = int(min(layers, max(c, cut.max(initial=c))))
    t = _stage_times(room, held, slope, cols, f, rho, head)  # (rows, k, stages, cols)
    kth = np.partition(t.reshape(*t.shape[:2], -1), layers - 1, axis=-1)[..., layers - 1]
    if not every_stage:
        return np.where(np.isfinite(kth), kth, np.inf)
    first = t[..., 0]
    held_one = np.isfinite(first).all(axis=-1)  # else a stage that holds no layer
    if head is not None:  # each stage at least its own term, and its first layer apart (docstring)
        ahead = np.broadcast_to(head, first.shape)
        first = np.maximum(first - ahead, ahead)
    with np.errstate(invalid="ignore"):
        return np.where(held_one & np.isfinite(kth), np.maximum(kth, first.max(axis=-1)), np.inf)


def in_flight(pp: int, v: int) -> np.ndarray:
    """Per stage, the micro-batches' worth of its layers' activations it holds at its peak in a
    class of a layout of several, whose count m is at least pp at v = 1 and 2 pp at v > 1
    (class_coefficients.class_outer): cost/coefficients.in_flight_micro_batches at that least
    count, pp - s at v = 1, (2 (pp - s - 1) + (v - 1) pp + 1) / v at v > 1 (uncapped for every
    m >= 2 pp), so the same at every count the layout may give the class."""
    return in_flight_micro_batches(pp, pp if v == 1 else 2 * pp, v)


def chunk_offsets(inst, v: int) -> tuple[frozenset, frozenset]:
    """(the slots stage 0 may count beside its decoder layers, those the last stage may): 1
    where some (embedding, loss) slot mode of v (cost/space_rules.slot_modes; no embedding
    slot for an MoE model with a dense prefix, space._slot_modes_of) counts the embedding
    (the loss) as a layer, 0 where one does not. A stage's decoder layers n plus its slot o
    fill whole chunks of v (cost/pipeline_split.chunk_problem), so n + o is a multiple of v."""
    m = inst.model
    prefix = m.moe is not None and m.moe.dense_layers > 0
    modes = [(e, l) for e, l in slot_modes(m.layers, v, split_slots_run(inst.job, inst.search))
             if not (e and prefix)]
    return frozenset(int(e) for e, _ in modes), frozenset(int(l) for _, l in modes)


def chunk_counts(layers: int, stages: int, v: int, first: frozenset, last: frozenset) -> np.ndarray:
    """(stages, layers) bool: whether stage s may hold n = 1..layers decoder layers at v (n plus
    a slot of chunk_offsets a multiple of v; the middle stages none)."""
    n = np.arange(1, layers + 1)
    out = np.tile(n % v == 0, (stages, 1))
    out[0] = np.any([(n + o) % v == 0 for o in first], axis=0) if first else False
    out[-1] = np.any([(n + o) % v == 0 for o in last], axis=0) if last else False
    return out


def interleavings(rc: RecomputeFloor, pp: int) -> tuple[int, ...]:
    """The v > 1 a class of pp stages may run (space.virtual_stage_values for that class alone:
    every layout holding it lists only such v), once per pp in rc's memo (the option keys ask it
    tens of thousands of times on 32 A100 + 32 H100)."""
    key = ("interleavings", pp)
    got = rc.memo.get(key)
    if got is None:
        got = rc.memo[key] = tuple(v for v in virtual_stage_values(rc.inst, [ClassShape(replicas=1,
                                                                                        stage_groups=(0,) * pp)])
                                   if v > 1)
    return got


def runs_v(rc: RecomputeFloor, pp: int, v: int) -> bool:
    """Whether a class of pp stages may run v (interleavings; v = 1 always)."""
    return v == 1 or v in interleavings(rc, pp)


def zero_bubble_runs(inst) -> bool:
    """Whether the job's framework runs zero-bubble schedules (FrameworkRules.zero_bubble: at v
    >= 2, space.zero_bubble_modes), whose pipeline term reads the drain passes B_s = T_s - k W_s
    and ZBVZeroBubble's V its own stage order and memory: the terms at v > 1 are then the plain
    floors' (class_terms)."""
    return bool(rules_for(inst.job.framework, inst.job.optimizer).zero_bubble)


def kept_share(rc: RecomputeFloor, tp: int, cp: int) -> np.ndarray:
    """(micro-batch sizes, 1): the least share of a stage's time its pass through the fill and
    drain keeps at v > 1: 1 - k w under a zero-bubble schedule (cost/zero_bubble.py: B_s = T_s
    - k W_s >= (1 - k w) T_s, k the passes saved, w the weight gradient's share of a layer,
    read at its largest over the sp flags tp admits), 1 where the framework runs none. The
    pipeline term m T_max + (sum_s B_s - B_max) / v is then at least (m - (1 - k w) / v) A +
    (1 - k w) S / v, so the bubble the derivation reads is scaled by it."""
    key = ("kept share", tp, cp)
    got = rc.memo.get(key)
    if got is None:
        inst, mbs = rc.inst, rc.fb.mbs.astype(int).tolist()
        got = np.ones((len(mbs), 1))
        if zero_bubble_runs(inst):
            k = max(W_PASSES_SAVED.values())
            for bi, b in enumerate(mbs):
                got[bi] = 1.0 - k * max(weight_grad_share(inst.model, b, tp, cp, sp) for sp in rc.sps(tp, cp))
        got = rc.memo[key] = np.maximum(got, 0.0)
    return got


def slowest_in_chunks_s(room: np.ndarray, held: np.ndarray, slope: np.ndarray, layers: int, f: np.ndarray,
                        rho: np.ndarray, allowed: np.ndarray, head: np.ndarray | None = None) -> np.ndarray:
    """slowest_stage_each_s where stage s may hold only the decoder-layer counts n = 1..layers
    that `allowed` ((rows,) stages, layers) marks (whole chunks of v: chunk_counts): at a time A
    stage s holds the largest marked n with t_s(n) <= A (t_s grows with n, so its marked n with
    t_s(n) <= A are a prefix of them), so A* is the least of every stage's marked times at which
    those counts sum to `layers` (each marked n standing for the n - its previous marked count
    more layers it holds), and at least each stage's time at its least marked count (every
    stage holds a chunk, of one decoder layer or more: v - 1 >= 1 where a slot fills the rest).
    Arrays as slowest_stage_each_s's; (rows, k), inf where the stages cannot hold `layers`.
    `allowed` of one mask ((stages, layers) or (1, stages, layers)) is read once for every row
    (_slowest_rows passes one v's rows at a time: issue 33, the masks' per-row reading was a
    third of GPT-3 175B / 1,024 A100's A* with classes_per_group 2); the same floats.

    Rows whose stages cannot hold `layers` in whole chunks within their memory (_chunks_held)
    are inf without their times read (issue 33: most of GPT-3 175B / 1,024 A100's rows with
    classes_per_group 2, whose infinite cut also had every count read for the others)."""
    allowed = allowed.reshape(-1, *allowed.shape[-2:])  # (1 or rows, stages, layers)
    # (a few rows, or a mask per row: the filter's own numpy calls cost more than it saves)
    if len(room) < ROWS_TO_FILTER or len(allowed) > 1:
        return _slowest_in_chunks_s(room, held, slope, layers, f, rho, allowed, head)
    holds = _chunks_held(room, held, slope, layers, f, rho, allowed, head)
    if holds.all():
        return _slowest_in_chunks_s(room, held, slope, layers, f, rho, allowed, head)
    out = np.full((len(room), max(f.shape[1], rho.shape[1], 1 if head is None else head.shape[1])), np.inf)
    if holds.any():  # each row's A* is its own: the same floats read with fewer rows
        f, rho, head = (None if x is None else np.broadcast_to(x, (len(room), *x.shape[1:]))[holds]
                        for x in (f, rho, head))
        out[holds] = _slowest_in_chunks_s(room[holds], held[holds], slope[holds], layers, f, rho, allowed, head)
    return out


def _chunks_held(room: np.ndarray, held: np.ndarray, slope: np.ndarray, layers: int, f: np.ndarray,
                 rho: np.ndarray, allowed: np.ndarray, head: np.ndarray | None) -> np.ndarray:
    """(rows,): False where slowest_in_chunks_s's A* is inf for memory alone, True elsewhere
    (and at every row where a time could be nan); `allowed` (1 or rows, stages, layers).

    _stage_times sets t_s(n) to inf past n_s = floor(top_s + 1e-9), top_s the layers stage s
    holds with every layer recomputed (the same floats here); no time is nan where every f,
    rho > 0, head, room and held are finite, held > 0 and each slope is +inf or has held /
    slope > 0 (t_s(n) = rho ceil(need) + n f + head, need finite or +inf). Then, the times
    sorted, the finite ones come first, and the layers stage s holds at finite times sum to at
    most its largest marked count up to n_s (each marked count stands for itself less its
    previous one): where those sum below `layers` the held counts reach `layers` at an
    infinite time or never, so A* is inf; and where a stage's least marked count is past n_s
    its first time, a floor of A*, is inf."""
    if not room.size:
        return np.ones(len(room), bool)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        freed = held / slope
        # (a nan among them reads as not clean: min and max carry it, and it compares False)
        clean = (rho.min() > 0 and rho.max() < np.inf and f.min() > 0 and f.max() < np.inf
                 and (head is None or -np.inf < head.min() and head.max() < np.inf)
                 and -np.inf < room.min() and room.max() < np.inf and held.min() > 0 and held.max() < np.inf
                 and bool(((freed > 0) | (slope == np.inf)).all()))
        if not clean:
            return np.ones(len(room), bool)
        per_full = held - freed
        top = np.where(per_full > 0, room / np.where(per_full > 0, per_full, 1.0), np.inf)
    at = np.maximum(np.minimum(np.floor(top + 1e-9), layers), 0).astype(int)  # (rows, stages): n_s in 0..layers
    marked = np.where(allowed, np.arange(1, layers + 1), 0)
    upto = np.concatenate([np.zeros((*allowed.shape[:2], 1), int), np.maximum.accumulate(marked, axis=-1)], axis=-1)
    most = (upto[0][np.arange(allowed.shape[1]), at] if len(allowed) == 1 else
            np.take_along_axis(upto, at[..., None], axis=-1)[..., 0])  # the largest marked n <= n_s
    least = np.argmax(allowed, axis=-1) + 1  # (1 or rows, stages): the least marked count
    return (most.sum(axis=-1) >= layers) & (least <= at).all(axis=-1)


def _slowest_in_chunks_s(room: np.ndarray, held: np.ndarray, slope: np.ndarray, layers: int, f: np.ndarray,
                         rho: np.ndarray, allowed: np.ndarray, head: np.ndarray | None) -> np.ndarray:
    """slowest_in_chunks_s of rows read in full; `allowed` (1 or rows, stages, layers)."""
    cols = _chunk_cols(room, held, slope, layers, f, rho, allowed, head)
    # only the counts some stage may hold are read (issue 33: whole chunks of v, a v-th of
    # the counts, took most of GPT-3 175B / 1,024 A100's memory reading with
    # classes_per_group 2): every count left out is marked for no stage, so its times were
    # inf and its layers none, and each marked count's previous marked one is among those kept
    keep = np.flatnonzero(allowed[..., :cols].any(axis=(0, 1)))
    if not len(keep):  # no stage holds a chunk among them (as with every count read: inf)
        return np.full((len(room), max(f.shape[1], rho.shape[1])), np.inf)
    allowed = allowed[..., keep]
    n = keep + 1
    t = _stage_times(room, held, slope, cols, f, rho, head, n.astype(float))  # (rows, k, stages, kept)
    np.copyto(t, np.inf, where=~allowed[:, None])
    marked = np.where(allowed, n, 0)
    before = np.concatenate([np.zeros((*allowed.shape[:2], 1), n.dtype),
                             np.maximum.accumulate(marked, axis=-1)[..., :-1]], axis=-1)
    more = np.where(allowed, n - before, 0).reshape(len(allowed), 1, -1)  # (1 or rows, 1, stages x layers)
    flat = t.reshape(*t.shape[:2], -1)
    # in the order of the times (ties in any order: the time read where the held counts first
    # reach the layers is the same), only the time at that place read back; one mask's
    # gathers by plain indexing (take_along_axis's checks and broadcasts were a fifth of the
    # call on GPT-3 175B / 1,024 A100 with classes_per_group 2)
    order = np.argsort(flat, axis=-1)
    one = len(allowed) == 1
    held_at = np.cumsum(more[0, 0][order] if one else np.take_along_axis(more, order, axis=-1), axis=-1)
    reach = held_at >= layers  # the stages hold the layers by then
    r, q = np.indices(reach.shape[:2], sparse=True)
    kth = np.where(reach[..., -1], flat[r, q, order[r, q, np.argmax(reach, axis=-1)]], np.inf)
    least = np.argmax(allowed, axis=-1)  # (1 or rows, stages): each stage's least marked count
    first = (t[:, :, np.arange(t.shape[2]), least[0]] if one else
             np.take_along_axis(t, np.broadcast_to(least[:, None, :, None], (*t.shape[:3], 1)), axis=-1)[..., 0])
    with np.errstate(invalid="ignore"):
        return np.maximum(kth, first.max(axis=-1))


def _chunk_cols(room: np.ndarray, held: np.ndarray, slope: np.ndarray, layers: int, f: np.ndarray, rho: np.ndarray,
                allowed: np.ndarray, head: np.ndarray | None) -> int:
    """The first counts slowest_in_chunks_s need read (as slowest_stage_each_s's cut): with
    each stage at its least marked count c_s >= ceil(layers / stages) the stages hold the
    layers, so A* is at most v, the slowest of those times, and a count n with n f_min > v
    (t_s(n) >= n f_s) is never among the times up to A*; every count where v is not finite.
    `allowed`: (1 or rows, stages, layers)."""
    stages = allowed.shape[-2]
    c = -(-layers // stages)
    n = np.arange(1, layers + 1)
    at = np.where(allowed & (n >= c), n, layers + 1).min(axis=-1)  # (1 or rows, stages): c_s
    if (at > layers).any():
        return layers
    top = int(at.max())
    counts = np.unique(at)  # the times read: each stage's at its c_s alone
    t = _stage_times(room, held, slope, top, f, rho, head, counts.astype(float))  # (rows, k, stages, counts)
    idx = np.searchsorted(counts, at)  # (1 or rows, stages): each stage's c_s among the counts
    with np.errstate(invalid="ignore"):
        v = (t[:, :, np.arange(stages), idx[0]] if len(idx) == 1 else
             np.take_along_axis(t, np.broadcast_to(idx[:, None, :, None], (*t.shape[:3], 1)), axis=-1)[..., 0]
             ).max(axis=-1)  # (rows, k)
        fmin = np.broadcast_to(f, (*f.shape[:2], stages)).min(axis=-1)
        if not (np.isfinite(v).all() and (fmin > 0).all()):
            return layers
        return int(min(layers, max(top, np.floor(v / fmin).max() + 2)))


def _stage_times(room: np.ndarray, held: np.ndarray, slope: np.ndarray, cols: int, f: np.ndarray,
                 rho: np.ndarray, head: np.ndarray | None = None, counts: np.ndarray | None = None) -> np.ndarray:
    """(rows, k, stages, cols): t_s(n) for n = 1..cols (slowest_stage_each_s), inf past where
    every layer is recomputed; `head` each stage's term (None: 0); `counts`: those n alone
    (floats, in place of 1..cols), each time the same float."""
    per_full = held - held / slope  # a layer's bytes with every layer recomputed
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.where(per_full > 0, room / np.where(per_full > 0, per_full, 1.0), np.inf)
        n = np.arange(1, cols + 1, dtype=float) if counts is None else counts  # (cols,)
        nh = n * held[..., None]  # (rows, stages, cols): n layers' bytes, none recomputed
        freed = (held / slope)[..., None]  # f_s (a - c): what recomputing one layer frees
        need = np.maximum((nh - room[..., None]) / freed, 0.0)
        finite = np.isfinite(slope)
        if not finite.all():  # a stage with no stash recomputes none while it holds n, else none can
            need = np.where(finite[..., None], need, np.where(nh <= room[..., None], 0.0, np.inf))
        need -= 1e-9
        t = rho[..., None] * np.ceil(need, out=need)[:, None]
        t = _sum_into(t, n * f[..., None])  # (a + b == b + a in floats)
        if head is not None:
            t = _sum_into(t, head[..., None])
    np.copyto(t, np.inf, where=~(n <= np.floor(top + 1e-9)[..., None])[:, None])
    return t


def _sum_into(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """t + x, written into t where it holds the broadcast shape (t a fresh array)."""
    return np.add(t, x, out=t if np.broadcast_shapes(t.shape, x.shape) == t.shape else None)


def _class_modes(terms: np.ndarray) -> list[int]:
    """Of a stage-wise class's (sp, ZeRO) modes, stage_terms' (room, state, a, c) per group,
    micro-batch size and mode (groups, mbs, modes, 4), those stage_class_slowest_s reads: each
    distinct one once, less those another dominates at every group and micro-batch size (the
    same a and c, at least its room, at most its state: _undominated's rule, read across the
    class's groups, whose floors, recompute and output layer no mode changes). Every stage
    time of a dominated mode is at least the other's, in every order and at every v, so the
    least over the modes is the same (issue 33: ZeRO-1 dominates ZeRO-0 in 32 A100 + 32 H100's
    mixed classes, whose A* at each root read whole was a tenth of its search)."""
    room, state, a, c = (np.moveaxis(terms[..., i], 2, 0).reshape(terms.shape[2], -1)[:, None] for i in range(4))
    # covers[k, m]: mode k's every stage time at most mode m's (each (modes, groups x mbs) above)
    covers = ((a == a.transpose(1, 0, 2)) & (c == c.transpose(1, 0, 2)) & (room.transpose(1, 0, 2) <= room)
              & (state.transpose(1, 0, 2) >= state)).all(axis=-1)
    repeat = covers & covers.T
    # left out: dominated by a strictly better mode, or a repeat of an earlier one
    out = ~((covers & ~repeat).any(axis=0) | np.tril(repeat, -1).any(axis=1))
    return np.flatnonzero(out).tolist()


def _class_reads(rc: RecomputeFloor, groups: tuple, tp: int, cp: int, pp: int, zeros: tuple,
                 most_ranks: int) -> tuple:
    """(stage_terms' (room, state, a, c) per group, micro-batch size and (sp, ZeRO) mode
    _class_modes keeps (groups, mbs, modes, 4); the floors, recompute and output layer per
    group (groups, mbs, scenarios)) of a stage-wise class of pp stages through `groups`: what
    stage_class_slowest_s reads of it whatever its stage counts on each group, once per class
    depth (read-only: shared; issue 33, on 32 A100 + 32 H100 with the three options its 735
    calls asked 143 depths, ranks and tp, cp, and building these took a fifth of each)."""
    key = ("class reads", groups, tp, cp, pp, zeros, most_ranks)
    got = rc.memo.get(key)
    if got is None:
        fb = rc.fb
        modes = list(itertools.product(rc.sps(tp, cp), zeros))
        mbs = fb.mbs.astype(int).tolist()
        terms = np.array([[[rc.stage_terms(g, tp, cp, pp, b, sp, z, most_ranks) for sp, z in modes] for b in mbs]
                          for g in groups])  # (groups, mbs, modes, 4)
        terms = terms[:, :, _class_modes(terms)]
        got = (terms, *(np.stack([fn(g, tp, cp) for g in groups]) for fn in (fb.floor, rc.rc_fwd_s, rc.head_s)))
        for x in got:
            x.flags.writeable = False
        rc.memo[key] = got
    return got


def stage_class_slowest_s(rc: RecomputeFloor, counts: dict, tp: int, cp: int, zeros: tuple,
                          most_ranks: int, vs: tuple = (1,)) -> np.ndarray:
    """(v of `vs`, micro-batch sizes, scenarios): A* of a stage-wise class of counts[g] stages
    on each group g at each v (a mixed layout's, beside replica classes: m >= pp, so stage s
    holds pp - s micro-batches at v = 1, in_flight(pp, v) at v > 1), the least over the orders
    of its groups (class_layouts lists the class in each: its stages on a group contiguous,
    option_families._layouts_of): in one order every stage's place, so its in-flight count, is
    known, and so are the two end stages (the slots' relief, RecomputeFloor.relieved_ends) and
    the last stage's group, whose output layer that stage runs (head_s). Each stage at its
    group's floor and recompute, memory read at the class's depth, at v > 1 its layers in whole
    chunks (slowest_in_chunks_s); the least over the (sp, ZeRO) rows, every order's and mode's
    (and every v > 1's) in one call."""
    fb, L = rc.fb, rc.inst.model.layers
    nb, ns = len(fb.mbs), len(fb.idx)
    if not zeros or any(rc._plain(g, tp, cp, c, zeros) for g, c in counts.items()):
        return np.zeros((len(vs), nb, ns))
    pp, groups = sum(counts.values()), list(counts)
    terms, floors, rcs, heads = _class_reads(rc, tuple(groups), tp, cp, pp, zeros, most_ranks)
    nm = terms.shape[2]
    orders = list(itertools.permutations(range(len(groups))))
    at = np.array([[i for i in order for _ in range(counts[groups[i]])] for order in orders])  # (orders, pp)
    shape = (len(orders), nb, nm, ns, pp)  # a row per (order, b, mode)
    room, state, a, c = np.moveaxis(terms[at], 1, -1).transpose(3, 0, 1, 2, 4)  # each (orders, mbs, modes, pp)
    f = np.broadcast_to(np.moveaxis(floors[at], 1, -1)[:, :, None], shape).reshape(-1, ns, pp)
    rho = np.broadcast_to(np.moveaxis(rcs[at], 1, -1)[:, :, None], shape).reshape(-1, ns, pp)
    head = np.zeros((len(orders), nb, ns, pp))
    head[..., -1] = heads[[order[-1] for order in orders]]  # the last stage's group's output layer
    head = np.broadcast_to(head[:, :, None], shape).reshape(-1, ns, pp)
    room = room.reshape(-1, pp)
    out = np.full((len(vs), nb, ns), np.inf)
    rows: list[tuple] = []  # per v > 1: (its place in vs, held, slope, allowed)
    for i, v in enumerate(vs):
        flight, relieved = rc._places(pp, v)
        held = state + flight * a
        slope = held / (flight * (a - c))
        relieved = list(relieved)
        held[..., relieved], slope[..., relieved] = state[..., relieved], np.inf  # (module docstring)
        held, slope = held.reshape(-1, pp), slope.reshape(-1, pp)
        if v == 1:
            each = slowest_stage_each_s(room, held, slope, L, f, rho, head=head)  # (rows, scenarios)
            out[i] = each.reshape(len(orders), nb, nm, ns).min(axis=(0, 2))
        else:
            rows.append((i, held, slope, rc.chunks(pp, v)))
    if rows:
        k = len(room)
        each = slowest_in_chunks_s(np.concatenate([room] * len(rows)), np.concatenate([x[1] for x in rows]),
                                   np.concatenate([x[2] for x in rows]), L, np.concatenate([f] * len(rows)),
                                   np.concatenate([rho] * len(rows)),
                                   np.concatenate([np.broadcast_to(x[3], (k, pp, L)) for x in rows]),
                                   np.concatenate([head] * len(rows)))
        for j, (i, *_) in enumerate(rows):
            out[i] = each[j * k:(j + 1) * k].reshape(len(orders), nb, nm, ns).min(axis=(0, 2))
    return out
