"""Replica classes that no completion fits in memory, proved before their layouts are set up
(issue 33: on 8 GPU types a class too shallow to hold Llama-3 70B on its group's GPUs sat in
the best layouts of the families' throughput bound, stage_families.py).

A layout family (stage_families.py) is bounded before its class layouts or tp choices are
listed. This module proves, per class of a replica family's group option and per tp choice of
a stage family, that no configuration holding it fits memory, whatever the rest of the plan:
the family's bound then leaves that option or choice out (inf), and it is never set up.

The proof is solver/bounds/memory.py's, read at the least any completion can need. On stage s
of a class (group g_s at its tp), n layers take at least
    LB_s(n) = every + [s first or last] embedding state + [s last] logits + n (state + f_s ckpt)
(memory.py's module docstring derives each term from cost/stage_memory and cost/memory), and
the class fits only if every stage holds a layer and the stages hold L in all. Each term is
taken at its least over what the rest of the plan may choose:
- the micro-batch size b: the least the space offers (stage_families.FamilyBounds.mbs, a
  superset of every layout's). The logits, backward workspace and checkpoint grow with b, and
  f_s b does not fall with b (f_s = min(pp - s, m) with m b = the replica's share of the batch,
  or interleaved min(X_s, m v) / v), so LB_s at the least b and m = floor(batch / (b dp)) is at
  most LB_s at any b the plan runs;
- the sequence-parallel flag, the ZeRO stage and v: every value the space and the framework
  (cost/framework_rules.admits) allow for this class alone is tried (a superset of what a
  plan of several classes admits: space._sp_zero_values checks every class), and the class
  fits if any one does;
- the ranks ZeRO shards over (every replica of the plan times cp): the state and embedding
  state fall with them and the runtime allowance (NCCL communicators) grows, so each is read
  at its own end of the range the family allows (a replica family: from one replica per
  group used to the most its groups hold at its tp and cp);
- f_s: a class of several runs m >= pp micro-batches (2 pp with v > 1), where 1F1B holds
  exactly pp - s on stage s (cost/class_coefficients.class_outer prices it so); a lone class
  through groups holds min(pp - s, m) at its stage's place, which the groups' order fixes: a
  group of c_g stages holds at most the layers its stages would hold at the c_g least values
  of f (and its fullest stage is at least at the c_g-th least), so a choice is refused only
  where even those do not reach L (or do not give each stage a layer). The embedding state
  and logits of a pipeline through groups are left out (they are >= 0: their stage's group
  is the order's);
- with the embedding / loss as layer slots (v > 1 with a slot mode), an end stage's short
  chunk can hold up to a layer's activations less (cost/pipeline_split.slot_relief_bytes):
  as memory.py, only the test before issue 33 (one micro-batch in flight, no embedding state,
  the last stage's one layer and the fullest stage's ceil(L / pp)).
Every term of LB_s is then at most its value in any configuration holding the class, so a
class refused here is refused by memory.py for every such configuration, and by build's
no_split_fits after pricing (tests/mixed/test_class_memory.py checks that on random clusters
by building every configuration the refused options hold). Only where search lists partial
layouts (a dense model, not DualPipe nor torch's zero-bubble schedules: search._lists_partials)
are families set up at all.

**Per-operator partitions** (search.tensor_partitions; `layer_plans`). A stage may then run any
layer plan of its tp group (cost/partition.layer_terms), priced by cost/stage_memory with the
plan's terms. LB_s reads none of the stash (act_bytes, the one memory term a plan may hold less
of than Megatron's layer): of a layer it reads the state, the backward workspace and the input
checkpoint, and a plan's are at least Megatron's (solver/bounds/plan_range.py's docstring: the
state adds replicated_params x bytes per parameter >= 0 to the 1/tp share and the fp8 copies,
the workspace adds the largest double buffer >= 0 to Megatron's, the checkpoint is Megatron's);
the runtime allowance, the logits and the embedding state are no layer's. So LB_s is at most
its value under every layer-plan combination, and a class refused without the slots is refused
for every one. The slots' test (one micro-batch in flight) rests on a layer's stash as it
relieves an end stage's short chunk (cost/pipeline_split.slot_relief_bytes reads max(act, ckpt)
per layer), which a plan may hold more of than Megatron's layer: with layer plans a slot mode
is taken to fit (never refused), which only keeps more.
"""

from __future__ import annotations

import math

import numpy as np

from paraplan.cost import memory
from paraplan.cost.coefficients import in_flight_micro_batches
from paraplan.cost.framework_rules import rules_for
from paraplan.cost.plan_specs import ClassShape
from paraplan.solver.bounds.memory import layers_within
from paraplan.solver.space import micro_batch_lower_bound_terms, slot_modes_of, virtual_stage_values


class ClassMemory:
    """The module's proofs on `inst`, the least micro-batch size `least_mb` (what the space
    offers), each kept by what it reads; `layer_plans`: with per-operator partitions, whose
    slot modes are never refused (module docstring)."""

    def __init__(self, inst, least_mb: int, layer_plans: bool = False) -> None:
        self.inst, self.b, self.layer_plans = inst, least_mb, layer_plans
        self.rules = rules_for(inst.job.framework, inst.job.optimizer)
        self.layout = memory.state_layout(inst.job)
        self.capacity = [g.gpu.hbm_bytes - inst.search.memory_reserve_bytes for g in inst.cluster.groups]
        self.memo: dict = {}

    def _modes(self, tp: int, cp: int, pp: int, dp: int) -> list[tuple[bool, int, int, bool]]:
        """(sp, zero, v, slots) the framework admits for a class of pp stages at tp and cp with
        dp replicas in the plan (for one class of several: the most the plan may have);
        `slots`: v comes with the embedding / loss as layer slots."""
        key = ("modes", tp, cp, pp, dp)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._read_modes(tp, cp, pp, dp)
        return got

    def _read_modes(self, tp: int, cp: int, pp: int, dp: int) -> list[tuple[bool, int, int, bool]]:
        inst, s = self.inst, self.inst.search
        m = inst.model
        sps = [sp for sp in s.sequence_parallel if not (sp and (tp == 1 or m.seq_len % (tp * cp)))]
        shape = (ClassShape(replicas=1, stage_groups=(0,) * pp),)
        out = []
        for v in virtual_stage_values(inst, shape):
            for slots in sorted({any(x) for x in slot_modes_of(inst, shape, v)}):
                out += [(sp, z, v, slots) for sp in sps for z in s.zero
                        if not (z and dp * cp == 1)
                        and self.rules.admits(tp=tp, pp=pp, cp=cp, dp=dp, sp=sp, zero=z, v=v)]
        return out

    def _admitted(self, tp: int, cp: int, pp: int, dp: int) -> frozenset:
        key = ("admitted", tp, cp, pp, dp)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = frozenset(self._modes(tp, cp, pp, dp))
        return got

    def _terms(self, tp: int, cp: int, pp: int, sp: bool, zero: int, ranks: tuple[int, int]):
        """(every stage, logits, per-layer state, checkpoint, embedding state of an end stage
        holding the input embedding / the output layer / both) at the least over `ranks`
        (lo, hi): the runtime allowance read at lo, the states at hi."""
        key = ("terms", tp, cp, pp, sp, zero, ranks)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._read_terms(tp, cp, pp, sp, zero, ranks)
        return got

    def _read_terms(self, tp: int, cp: int, pp: int, sp: bool, zero: int, ranks: tuple[int, int]):
        lo = micro_batch_lower_bound_terms(self.inst, tp=tp, cp=cp, pp=pp, dp=1, micro_batch=self.b, sp=sp,
                                           zero=zero, zero_ranks=ranks[0])
        hi = micro_batch_lower_bound_terms(self.inst, tp=tp, cp=cp, pp=pp, dp=1, micro_batch=self.b, sp=sp,
                                           zero=zero, zero_ranks=ranks[1])
        m = self.inst.model
        emb = [memory.embedding_state_bytes(m, tp, zero, ranks[1], first, last, self.layout)
               for first, last in ((True, False), (False, True), (True, True))]
        return min(lo[0], hi[0]), hi[1], min(lo[2], hi[2]), hi[3], emb

    def replica_class_refused(self, g: int, tp: int, cp: int, pp: int, ranks: tuple[int, int]) -> bool:
        """Whether no plan of several classes fits a class of pp stages on group g at tp and cp
        (ZeRO over `ranks`, (least, most) of the plan's replicas times cp)."""
        key = ("replica", g, tp, cp, pp, ranks)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = not any(self._replica_fits(g, tp, cp, pp, ranks, *mode)
                                           for mode in self._modes(tp, cp, pp, ranks[1] // cp))
        return got

    def _replica_fits(self, g: int, tp: int, cp: int, pp: int, ranks, sp: bool, zero: int, v: int,
                      slots: bool) -> bool:
        L, cap = self.inst.model.layers, self.capacity[g]
        if slots and self.layer_plans:  # (module docstring: a plan's stash may relieve more)
            return True
        every, logits, state, ckpt, emb = self._terms(tp, cp, pp, sp, zero, ranks)
        if slots:  # memory.py's test with the slots: no embedding state, one micro-batch in flight
            return (layers_within(every + logits, state + ckpt, cap, L) >= 1
                    and layers_within(every, state + ckpt, cap, L) >= -(-L // pp))
        flight = in_flight_micro_batches(pp, pp if v == 1 else 2 * pp, v).tolist()
        held = []
        for s, f in enumerate(flight):
            first, last = s == 0, s == pp - 1
            base = every + (emb[2] if first and last else emb[0] if first else emb[1] if last else 0.0)
            held.append(layers_within(base + (logits if last else 0.0), state + f * ckpt, cap, L))
        return min(held) >= 1 and sum(held) >= L

    def stage_modes(self, tps: list[int], cp: int, pp: int, dp: int) -> list[tuple[bool, int, int, bool]]:
        """The modes (_modes) some of the tp values `tps` admits for a pipeline of at least pp
        stages (fewer stages admit every v more do)."""
        return sorted({x for t in set(tps) for x in self._modes(t, cp, pp, dp)})

    def stage_group_best(self, g: int, tp: int, cp: int, dp: int, count: int, pp: int, m: int,
                         modes: list) -> tuple[float, float, float]:
        """Over `modes`, each group in its own (a relaxation: a plan runs one mode on every
        group, so a choice no group-wise pick fits is refused in every mode): (the most layers
        group g's stages hold without slots, -inf where no mode gives each stage a layer; with
        the slots, the most a last stage and another stage hold, -1 where no slot mode runs)."""
        key = ("best", g, tp, cp, dp, count, pp, m, tuple(modes))
        got = self.memo.get(key)
        if got is None:
            held, last1, one = -math.inf, -1.0, -1.0
            # of the modes tp admits, those no other of the same v and slots dominates:
            # sequence parallelism and a higher ZeRO stage each hold no more (the checkpoint
            # shrinks by tp, the state with the stage; nothing else LB_s reads moves)
            admitted = self._admitted(tp, cp, pp, dp)
            top: dict = {}  # (v, slots, sp) -> the highest ZeRO stage admitted with them
            for sp, z, v, slots in modes:
                if (sp, z, v, slots) in admitted and z >= top.get((v, slots, sp), -1):
                    top[v, slots, sp] = z
            for mode in [(sp, z, v, slots) for (v, slots, sp), z in top.items()
                         if sp or top.get((v, slots, True), -1) < z]:
                h, ok, lt, on = self.stage_group(g, tp, cp, dp, count, pp, m, mode)
                if h < 0:  # tp does not admit it
                    continue
                if mode[3]:
                    last1, one = max(last1, lt), max(one, on)
                elif ok:
                    held = max(held, h)
            got = self.memo[key] = (held, last1, one)
        return got

    def stage_group(self, g: int, tp: int, cp: int, dp: int, count: int, pp: int, m: int,
                    mode: tuple[bool, int, int, bool]) -> tuple[int, bool, int, int]:
        """What group g's `count` stages at tp can hold in a pipeline of dp replicas, at least
        pp stages and m micro-batches per replica, in `mode` (sp, zero, v, slots), whatever the
        order (module docstring): (the layers they hold at the least in-flight counts, whether
        its fullest stage holds a layer, the layers a stage holds with one micro-batch in flight
        as the last stage (the logits) and elsewhere; -1 each where tp does not admit `mode`)."""
        key = ("stage", g, tp, cp, dp, count, pp, m, mode)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._stage_group(g, tp, cp, dp, count, pp, m, mode)
        return got

    def _stage_group(self, g: int, tp: int, cp: int, dp: int, count: int, pp: int, m: int, mode) -> tuple:
        sp, zero, v, slots = mode
        if mode not in self._admitted(tp, cp, pp, dp):
            return -1, False, -1, -1
        L, cap = self.inst.model.layers, self.capacity[g]
        if slots and self.layer_plans:  # never refused (module docstring): as many as there are
            return 0, True, L, L
        every, logits, state, ckpt, _ = self._terms(tp, cp, pp, sp, zero, (dp * cp, dp * cp))
        last1 = layers_within(every + logits, state + ckpt, cap, L)
        one = layers_within(every, state + ckpt, cap, L)
        if slots:
            return 0, True, last1, one
        # the least in-flight counts: the last stages' (1F1B: 1, 2, ...; interleaved at the
        # least depth pp, where the counts are least)
        flight = np.sort(in_flight_micro_batches(max(pp, count), max(m, 1), v))[:count].tolist()
        held = [layers_within(every, state + f * ckpt, cap, L) for f in flight]
        return sum(held), held[-1] >= 1, last1, one
