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

Each recomputed layer repeats its forward, rc_fwd (coefficients._layer_costs: recompute_time =
rc_fwd + ZeRO-3's extra exposure, 0 at ZeRO 0-2 and in a pipeline, where ZeRO-3's gathers run once
per step), at least the least over sp and the recompute modes. So the class's stage times sum to
at least L f_g + h_g + R rho_lo, and its slowest stage to at least that / pp: the class prices
like one on the floor f'_g(pp) = f_g + R rho_lo / L; with A*, option_families.py's derivation
(which reads only A_k >= A_lo and S_k >= S_lo) takes A_lo = A* and S_lo = L f_g + h_g + R rho_lo
(class_terms). A class of one stage at ZeRO-3 is given no recompute (its recompute may
hide ZeRO-3 traffic), nor a class of an MoE model.

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
from paraplan.cost.specs import Attention, Recompute
from paraplan.cost.plan_specs import ClassOuter, ClassShape
from paraplan.solver.bounds.plan_range import plan_range
from paraplan.solver.bounds.unpriced import stage_floor_terms
from paraplan.solver.partition_plans import enabled as partitions_enabled
from paraplan.solver.space import micro_batch_lower_bound_terms


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

    def stash_bytes(self, g: int, b: int, tp: int, cp: int, sp: bool) -> float:
        """a: one layer's least stash for one micro-batch on group g, fragmentation included:
        Megatron's, or with per-operator partitions the least of it and every layer plan's
        (plan_range.py; the stash is the one memory term a plan may hold less of). Kept by what it
        reads (not pp, ZeRO or the ranks, which _rows asks it at)."""
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

    def _row(self, g: int, tp: int, cp: int, pp: int, b: int, sp: bool, z: int, most_ranks: int) -> tuple:
        """(key, (room, held, slope)) of one (micro-batch size, sp, ZeRO) of _rows, arrays of pp;
        `key` what the row reads: (g, tp, cp, pp, b, sp) and its terms room, state and c
        (stage_terms), so that rows alike at other ranks or ZeRO stages (the ranks enter only
        through ZeRO's sharding of the state and the ring's existence, both ranks >= 2 cp) are
        built, and read by class_terms, once (issue 33: GPT-3 175B / 1,024 A100 with
        classes_per_group 2 read them at each family's and layout's ranks)."""
        room, state, a, c = self.stage_terms(g, tp, cp, pp, b, sp, z, most_ranks)
        key = ("row", g, tp, cp, pp, b, sp, room, state, c)
        got = self.memo.get(key)
        if got is None:
            flight = np.arange(pp, 0, -1, dtype=float)  # pp - s
            held = state + flight * a
            slope = held / (flight * (a - c))
            if self.fb.slot_c > 0:  # the end stages: their state alone (module docstring)
                held[[0, -1]], slope[[0, -1]] = state, np.inf
            got = self.memo[key] = (np.full(pp, room), held, slope)
        return key, got

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

    def _keyed_rows(self, g: int, tp: int, cp: int, pp: int, zeros: tuple, most_ranks: int) -> list[list[tuple]]:
        """Per micro-batch size, per (sp, ZeRO) allowed: _row's (key, row)."""
        key = ("rows", g, tp, cp, pp, zeros, most_ranks)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = [[self._row(g, tp, cp, pp, b, sp, z, most_ranks)
                                     for sp, z in itertools.product(self.sps(tp, cp), zeros)]
                                    for b in self.fb.mbs.astype(int).tolist()]
        return got

    def _rows(self, g: int, tp: int, cp: int, pp: int, zeros: tuple, most_ranks: int) -> list[list[tuple]]:
        """Per micro-batch size, per (sp, ZeRO) allowed: (room, held, slope) of the class's
        stages (module docstring), arrays of pp."""
        return [[row for _, row in rows] for rows in self._keyed_rows(g, tp, cp, pp, zeros, most_ranks)]

    def _slowest_rows(self, keyed: list[tuple], no_rc: bool) -> None:
        """Memoise, per row (_row's (key, row), all of one pp) not read yet, its A* at
        its group's floor and recompute (none with `no_rc`) per scenario, as a list: every such
        row in one pass (slowest_stage_each_s)."""
        todo = {k: row for k, row in keyed if ("slowest", k, no_rc) not in self.memo}
        if not todo:
            return
        fs, rhos, heads = [], [], []
        for k in todo:
            g, tp, cp, pp, bi = k[1], k[2], k[3], k[4], self._mb_index(k[5])
            f = self.fb.floor(g, tp, cp)[bi]
            fs.append(f)
            rhos.append(0.0 * f if no_rc else self.rc_fwd_s(g, tp, cp)[bi])
            head = np.zeros((len(f), pp))
            head[:, -1] = self.head_s(g, tp, cp)[bi]  # the output layer, on the last stage
            heads.append(head)
        keys, rows = list(todo), list(todo.values())
        for lo in range(0, len(keys), 32):  # a few MB of (k, stages, layers) arrays a pass
            part = slice(lo, lo + 32)
            room, held, slope = (np.stack([row[x] for row in rows[part]]) for x in range(3))
            got = slowest_stage_each_s(room, held, slope, int(self.inst.model.layers), np.stack(fs[part])[..., None],
                                       np.stack(rhos[part])[..., None], head=np.stack(heads[part]))
            for k, each in zip(keys[part], got.tolist()):
                self.memo["slowest", k, no_rc] = each

    def _mb_index(self, b: int) -> int:
        got = self.memo.get(("mb index",))
        if got is None:
            got = self.memo["mb index",] = {x: i for i, x in enumerate(self.fb.mbs.astype(int).tolist())}
        return got[b]

    def least_layers(self, g: int, tp: int, cp: int, pp: int, zeros: tuple, most_ranks: int) -> np.ndarray:
        """(micro-batch sizes,): R, the fewest layers a class of pp stages on group g at tp and
        cp recomputes in any layout (ZeRO of `zeros` over at most `most_ranks` ranks)."""
        keyed = self._keyed_rows(g, tp, cp, pp, zeros, most_ranks)
        todo = {k: row for per_mb in keyed for k, row in per_mb if ("least", k) not in self.memo}
        if todo:
            # every row's free room at once; least_recomputed's greedy only where it is short
            # of the layers (the same arithmetic per row: issue 33, 86,180 rows on GPT-3 175B)
            room, held = (np.stack([row[x] for row in todo.values()]) for x in range(2))
            free = np.maximum(room, 0.0) / held
            L = float(self.inst.model.layers)
            for i, (k, row) in enumerate(todo.items()):
                self.memo["least", k] = 0.0 if L - free[i].sum() <= 0 else least_recomputed(*row, L)
        return np.array([min((self.memo["least", k] for k, _ in per_mb), default=np.inf) for per_mb in keyed])

    def _plain(self, g: int, tp: int, cp: int, pp: int, zeros: tuple) -> bool:
        """Whether nothing of this module is read for the class (RecomputeFloor.class_terms)."""
        inst = self.inst
        return inst.model.moe is not None or not zeros or pp == 1 and 3 in zeros and len(zeros) == 1

    def class_terms(self, g: int, tp: int, cp: int, pp: int, zeros: tuple, most_ranks: int) -> tuple:
        """(rate, bubble), each (micro-batch sizes, scenarios): a replica of pp stages on group g
        adds L / A* to option_families.py's D and S_lo / A* - 1 to its B (A* its slowest stage's
        least time, slowest_stage_each_s; S_lo = L f_g + R rho_lo the least sum of its stage times):
        its derivation reads only A_k >= A* and S_k >= S_lo. On the plain floor (A* = L f_g /
        pp) they are pp / f_g and pp - 1. A class of one stage at ZeRO-3 is read with rho = 0
        (its recompute may hide ZeRO-3's traffic)."""
        key = ("terms", g, tp, cp, pp, zeros, most_ranks)
        got = self.memo.get(key)
        if got is not None:
            return got
        f = self.fb.floor(g, tp, cp)
        L = float(self.inst.model.layers)
        if self._plain(g, tp, cp, pp, zeros):
            got = self.memo[key] = (pp / f, np.full(f.shape, pp - 1.0))
            return got
        no_rc = pp == 1 and 3 in zeros
        rows = self._keyed_rows(g, tp, cp, pp, zeros, most_ranks)
        # what the terms read beyond the class's group, tp, cp and pp: its rows (the ranks and
        # ZeRO stages only through them) and whether recompute is read, so layouts and families
        # whose rows are alike share one reading
        read = ("terms read", g, tp, cp, pp, no_rc, tuple(tuple(k for k, _ in per_mb) for per_mb in rows))
        got = self.memo.get(read)
        if got is None:
            rho = 0.0 * f if no_rc else self.rc_fwd_s(g, tp, cp)
            r = self.least_layers(g, tp, cp, pp, zeros, most_ranks)
            least = L * f / pp
            slowest = np.full(f.shape, np.inf)
            self._slowest_rows([x for per_mb in rows for x in per_mb], no_rc)
            for bi, per_mb in enumerate(rows):
                each = [self.memo["slowest", k, no_rc] for k, _ in per_mb]
                for si in range(f.shape[1]):
                    for x in each:
                        slowest[bi, si] = min(slowest[bi, si], x[si])
            head = self.head_s(g, tp, cp)
            slowest = np.maximum(slowest, least + head / pp)  # (a relaxation never below the plain floor's)
            total = L * f + head + np.where(np.isfinite(r), r, 0.0)[:, None] * rho
            with np.errstate(divide="ignore", invalid="ignore"):
                rate = np.where(np.isfinite(slowest), L / slowest, 0.0)
                bubble = np.where(np.isfinite(slowest), total / slowest - 1.0, pp - 1.0)
            got = self.memo[read] = (rate, np.minimum(bubble, pp - 1.0))
        self.memo[key] = got
        return got

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


def _stage_times(room: np.ndarray, held: np.ndarray, slope: np.ndarray, cols: int, f: np.ndarray,
                 rho: np.ndarray, head: np.ndarray | None = None) -> np.ndarray:
    """(rows, k, stages, cols): t_s(n) for n = 1..cols (slowest_stage_each_s), inf past where
    every layer is recomputed; `head` each stage's term (None: 0)."""
    per_full = held - held / slope  # a layer's bytes with every layer recomputed
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.where(per_full > 0, room / np.where(per_full > 0, per_full, 1.0), np.inf)
        n = np.arange(1, cols + 1, dtype=float)  # (cols,)
        freed = (held / slope)[..., None]  # f_s (a - c): what recomputing one layer frees
        need = np.where(np.isfinite(slope)[..., None], np.maximum((n * held[..., None] - room[..., None]) / freed, 0.0),
                        np.where(n * held[..., None] <= room[..., None], 0.0, np.inf))
        t = n * f[..., None] + rho[..., None] * np.ceil(need - 1e-9)[:, None]
        if head is not None:
            t = t + head[..., None]
    return np.where((n <= np.floor(top + 1e-9)[..., None])[:, None], t, np.inf)


def stage_class_slowest_s(rc: RecomputeFloor, counts: dict, tp: int, cp: int, zeros: tuple,
                          most_ranks: int) -> np.ndarray:
    """(micro-batch sizes, scenarios): A* of a stage-wise class of counts[g] stages on each
    group g (a mixed layout's, beside replica classes: m >= pp, so stage s holds pp - s
    micro-batches), the least over the orders of its groups (class_layouts lists the class in
    each: its stages on a group contiguous, option_families._layouts_of): in one order every
    stage's place, so its in-flight count, is known, and so are the two end stages (the slots'
    relief) and the last stage's group, whose output layer that stage runs (head_s). Each stage
    at its group's floor and recompute, memory read at the class's depth; the least over the
    (sp, ZeRO) rows, all of one call (slowest_stage_each_s)."""
    fb, L = rc.fb, rc.inst.model.layers
    if not zeros or any(rc._plain(g, tp, cp, c, zeros) for g, c in counts.items()):
        return np.zeros((len(fb.mbs), len(fb.idx)))
    pp = sum(counts.values())
    modes = list(itertools.product(rc.sps(tp, cp), zeros))
    mbs = fb.mbs.astype(int).tolist()
    terms = {(g, bi, mi): rc.stage_terms(g, tp, cp, pp, b, sp, z, most_ranks)
             for g in counts for bi, b in enumerate(mbs) for mi, (sp, z) in enumerate(modes)}
    floors = {g: fb.floor(g, tp, cp) for g in counts}
    rcs = {g: rc.rc_fwd_s(g, tp, cp) for g in counts}
    heads = {g: rc.head_s(g, tp, cp) for g in counts}
    flight = np.arange(pp, 0, -1, dtype=float)  # pp - s at place s
    rooms, helds, slopes, fs, rhos, hs, at = [], [], [], [], [], [], []
    for order in itertools.permutations(counts):
        stage_g = [g for g in order for _ in range(counts[g])]
        for bi in range(len(mbs)):
            f = np.stack([floors[g][bi] for g in stage_g], axis=-1)  # (scenarios, stages)
            rho = np.stack([rcs[g][bi] for g in stage_g], axis=-1)
            head = np.zeros_like(f)
            head[:, -1] = heads[order[-1]][bi]
            for mi in range(len(modes)):
                room, state, a, c = (np.array([terms[g, bi, mi][x] for g in stage_g]) for x in range(4))
                held = state + flight * a
                slope = held / (flight * (a - c))
                if fb.slot_c > 0:  # the end stages: their state alone (module docstring)
                    held[[0, -1]], slope[[0, -1]] = state[[0, -1]], np.inf
                rooms.append(room)
                helds.append(held)
                slopes.append(slope)
                fs.append(f)
                rhos.append(rho)
                hs.append(head)
                at.append(bi)
    each = slowest_stage_each_s(np.stack(rooms), np.stack(helds), np.stack(slopes), L, np.stack(fs), np.stack(rhos),
                                head=np.stack(hs))  # (rows, scenarios)
    out = np.full((len(fb.mbs), len(fb.idx)), np.inf)
    np.minimum.at(out, np.array(at, np.int64), each)
    return out
