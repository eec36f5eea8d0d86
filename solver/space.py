"""The declared space of plans (cost/plan_specs.py), enumerated once.

A plan = an outer configuration (`ClassOuter`: tp, cp, micro-batch size, sequence parallel, base
recompute mode, ZeRO stage, and the replica classes' shapes) + per class its micro-batch count,
layer split and per-stage full-recompute counts (the inner problem, formulations/multiclass.py).

Two families of class shapes (a third, "mixed", with search.mixed_families, below), over every
non-empty subset U of the node groups, listed and counted in solver/class_layouts.py:

- "stage" (stage-wise heterogeneity): one class of dp identical replicas whose pipeline passes
  through the groups of U in some order, c_g consecutive stages on group g, with
  dp * tp_g * cp * c_g = GPUs of g (every GPU of a used group works; with search.idle_gpus
  <= GPUs of g, any dp and c_g >= 1 that fit); pp = sum c_g. Every order of U
  is a separate configuration (the first stage holds the embedding, the last the output layer).
  With search.tp_per_group (the default) each group of U takes its own tp_g, every combination
  of each group's admissible values (ClassOuter.group_tp; e.g. tp 8 on A100 stages beside tp 4
  on H100 stages), and the hand-off between stages of different tp reshards the activation
  (cost/coefficients.build); otherwise one tp for every group.
- "replica" (replica-wise heterogeneity): on each group g of U, 1 to search.classes_per_group
  classes (default 1), class k with x_k replicas of pp_k stages all on g,
  sum_k x_k * tp * cp * pp_k = GPUs of g (with search.idle_gpus <= GPUs of g; group_shares:
  one order per multiset of classes);
  classes take different micro-batch counts. At least two classes in all: a lone class on one
  group is the stage family's plan. With classes_per_group 1 this needs |U| >= 2; with more,
  replicas of different depths may share one group (e.g. on 8 GPUs, 2 replicas of pp 2 beside
  1 of pp 4), or two classes of one shape run different micro-batch counts. The layouts grow
  as a power of classes_per_group (replica_layouts counts them; a search that lists partial
  layouts sets them up under a bound as it reaches them, solver/option_families.py; a space
  listed whole is refused above MAX_LAYOUTS before listing, space_layouts).

search.idle_gpus (default false) lets a used group leave GPUs idle, in both families: a group
of 3 nodes may run a pipeline, or a batch split, that only 2 divide. The idle GPUs sit after
the busy ones in the group (cost/class_coefficients.class_placement); a group with no stage is
idle as before. It multiplies the layouts by the stage counts each group may take.

Rules shared with the homogeneous space (a one-group cluster), one implementation each: tp a power
of two dividing the heads (or a multiple of the KV heads) and the GPUs per node of every used
group, or with search.tp_across_nodes its GPUs in whole nodes (cost/space_rules.group_tp_problem);
cp a power of two (or search.cp's values) dividing seq_len and, with tp, every used group's GPUs
(cost/space_rules.cp_problem, within search.max_cp), one cp for every group as one tp;
pp_g <= layers and within search.pp / max_pp (no other cap); sequence parallel only with tp > 1
and tp * cp dividing seq_len; selective recompute only with standard attention; ZeRO 0-3 where
the job's framework runs it (cost/framework_rules.py, checked for every class: its tp, its stage
count, its replicas; e.g. Megatron-LM's ZeRO-2/3 are its FSDP paths, which refuse pipelines, so
a mixed cluster gets them on single-stage classes only). ZeRO shards over every replica and
context-parallel rank of the plan, as the gradient ring spans them (so it needs
replicas * cp > 1). MoE models (cost/space_rules.expert_layouts, moe_problem): one expert-parallel
degree ep and one expert tensor-parallel degree etp (default: tp and 1, space_rules.etp_values) for every class,
ep dividing the experts and ep * etp every class's tp * replicas * cp (an expert group lies
inside one class's ranks of one stage, on one group, as on one group: parallel folding);
the expert-data-parallel ring spans every replica's copy of the same experts. Micro-batch sizes: the divisors of the global batch that split it between
the replicas, within search.max_micro_batch, capped from memory by the homogeneous rule
(capped_micro_batches and micro_batch_lower_bound_parts below; micro_batch_values says how a
class spanning groups is bounded). A lone class runs the count the batch gives it,
fewer micro-batches than stages included, as on one group; with search.uniform_split (which
reaches the class planner only from a homogeneous instance, cost/specs.Instance.flat: a
mixed-cluster file listing it is refused) the planner searches even
layer splits, the homogeneous rule. So a
one-group cluster's space is the homogeneous space, outer configuration for outer configuration
and plan for plan (the goldens keep the space sizes).

Rules that stay specific to plans of several classes, and why: one tp for every class (a
layer's gradients are reduced in one ring over every replica of every class, and replicas with
different tp hold different shards of the layer, which that ring cannot reduce; so the
replica family and a tp per group exclude each other, cost/plan_specs.Plan.check_against);
every replica runs at least as
many micro-batches as it has stages (1F1B steady state), and with interleaving (v > 1) a
multiple of its stage count and at least twice it, and a pipeline-free replica whose
micro-batches the expert all-to-all overlap pairs (job.moe_a2a_overlap with ep > 1) at least 2:
memory then does not depend on how the batch
is split between classes (cost/class_coefficients.class_outer), which lets one set of
coefficients price every split; one cp and v for every group (one ClassOuter); no
uniform_split on several groups (the loader refuses it instead of dropping it). The micro-batch
counts satisfy micro_batch * sum_k replicas_k * m_k = global_batch.

search.mixed_families (default false) adds a third family, "mixed" (_mixed_shapes): a
stage-wise class of dp replicas across a subset S of U (>= 2 groups, c_g stages on g, every
order of S, one tp for every class as in the replica family), followed by replica-wise classes
(group_shares, up to classes_per_group per group) on what it leaves of each group of U: every
GPU, or with idle_gpus at most that, at least one replica class, every group of U hosting a
class. Classes sit one after another on a group (class_placement), the stage-wise one first.
mixed_layouts counts the family without listing it.

Embedding / loss layer slots (cost/pipeline_split.py R4; Megatron-core's
--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split, core 0.11.0):
for a job whose release runs them (cost/space_rules.split_slots_run) every v > 1 comes with the
modes (embedding_in_split, loss_in_split) for which v divides layers + the slots counted
(space_rules.slot_modes; unflagged first, so a tie keeps the plan without them), each stage
holding at least one chunk. A mode, like v, rather than a choice inside the split: Megatron
takes the flags once per job, the mode decides which counts each stage may hold (v k, or v k - 1
on a flagged end stage) while the split models stay the same integer models with a fixed
offset per stage, and the bounds read it as a relaxation in whole chunks
(solver/bounds/one_class.slot_relaxation). So v need only divide layers, layers + 1 or layers
+ 2: 126 layers run v 8 on pp 8.

Outside the space by default, so a proof does not cover them unless the option is on: a group
used in part (search.idle_gpus), a stage-wise class beside replica-wise classes
(search.mixed_families), more replica classes on one group than search.classes_per_group. The
options are off by default because each grows the layouts as a power (a search sets them up
under a bound, solver/option_families.py, but with all three on 32 A100 + 32 H100 is not proved
within 10 s; MAX_LAYOUTS refuses the largest listed whole); cost prices every such plan (simulate takes them), and `plan` names each kind the
cluster can run beside its claim (not_covered below), first a group the optimum leaves idle.

`uniform=True` is the "uniform split" baseline: every group used, even layer splits, and the
same micro-batch count on every replica.

A DualPipe job (job.pipeline_schedule: dualpipe, one GPU type) keeps, in the same order, the
configurations DualPipe runs: one replica class, an even stage count, one chunk per stage and
an even micro-batch count of at least twice the stages (cost/dualpipe.schedule_problem); each
one's split is formulations/dualpipe.py's problem, not the 1F1B one.

Micro-batch cap from memory (no fixed cap). A micro-batch b is kept iff this lower bound on
some stage's peak memory fits the GPU (`hbm - memory_reserve`), for the most favourable
sequence-parallel flag and ZeRO stage the framework admits with (tp, cp, pp, dp), per replica
class and group (micro_batch_values):
    LB(b) = runtime + f * workspace(b)
            + max( f * logits(b) + state + f * ckpt(b),      the last stage: >= 1 layer + logits
                   ceil(L/pp) * (state + f * ckpt(b)) )      the stage holding the most layers
where state = layer_state_bytes at that ZeRO stage (plus cached fp8 weights), ckpt(b) =
checkpoint_activation_bytes, runtime = runtime_bytes and f = 1 + ALLOCATOR_FRAGMENTATION, all
as cost/memory.py and cost/coefficients.py price them. Why it is a lower bound on every plan with this outer: every stage holds
>= 1 layer and some stage holds >= ceil(L/pp); a layer costs at least its state plus, when fully
recomputed, its input checkpoint times the stage's in-flight micro-batches, which is >= 1 for
every stage and schedule (cost/coefficients.in_flight_micro_batches: min(pp-s, m) >= 1 for
1F1B; (2(pp-s-1) + (v-1)pp + 1)/v >= 1 and m*v/v >= 1 interleaved), and full recomputation
(act >= ckpt) is the least a layer can keep; the runtime allowance and the backward workspace
are on every stage, the logits on the last; every other term (embeddings, the ZeRO-3 gathered
layers, replicated weights of token-split partitions) is >= 0 and left out. LB is increasing in
b, so the kept values are the divisors up to a cap. The smallest divisor is always kept, so an
instance that fits nowhere is reported by its memory need (solver/planner.infeasible_reason)
rather than as an empty space.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from paraplan.cost import memory
from paraplan.cost.moe import pairs_unpipelined_micro_batches
from paraplan.cost.flops import moe_attention_view
from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost import recompute_patterns
from paraplan.cost.framework_rules import recompute_pattern, rules_for
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.class_coefficients import class_outer
from paraplan.cost.plan_specs import ClassOuter
from paraplan.cost.space_rules import expert_layouts, expert_ranks_modulus, moe_problem, slot_modes, split_slots_run
from paraplan.cost.schedule import TorchSchedule
from paraplan.cost.schedule import schedule_problem as torch_schedule_problem
from paraplan.cost.specs import Attention, Framework, Instance, Outer, PipelineSchedule, ZeroBubble
from paraplan.solver.class_layouts import (FAMILIES, divisors, check_layouts, class_shapes, cp_values,
                                           replica_shapes, stage_replicas, stage_representatives,
                                           stage_shapes, tp_choices)
from paraplan.solver.partition_plans import enabled as partitions_enabled

# Micro-batch vectors are enumerated with numpy; a space needing more is refused up front.
MAX_MICRO_BATCH_VECTORS = 5_000_000


def micro_batch_lower_bound_parts(inst: Instance, *, tp: int, cp: int, pp: int, dp: int,
                                  micro_batch: int, sp: bool, zero: int,
                                  zero_ranks: int | None = None) -> tuple[float, float]:
    """LB(b) of the module docstring in its two parts, per GPU: (the last stage's, the fullest
    stage's). `zero_ranks`: the ranks ZeRO shards over (default dp * cp; a mixed-cluster class
    shards over every replica of the plan)."""
    return _parts_of(micro_batch_lower_bound_terms(
        inst, tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=micro_batch, sp=sp, zero=zero, zero_ranks=zero_ranks),
        inst.model.layers, pp)


def _parts_of(terms: tuple, layers: int, pp: int) -> tuple:
    """micro_batch_lower_bound_parts of its terms (micro_batch_lower_bound_terms): floats, or
    numpy arrays of several micro-batch sizes (fits_each), summed alike."""
    every_stage, logits, state, ckpt = terms
    last_stage = logits + state + ckpt
    fullest_stage = -(-layers // pp) * (state + ckpt)
    return every_stage + last_stage, every_stage + fullest_stage


# per instance, {what micro_batch_lower_bound_terms reads: its terms}: the listing's
# micro-batch caps and the memory proof before pricing (solver/bounds/memory.py) ask for the
# same terms (GPT-3 175B on 1,024 A100: 8,274 asks, 4,162 distinct)
_LB_TERMS = IdentityCache(64)  # a few instances per process, many in a test session


def micro_batch_lower_bound_terms(inst: Instance, *, tp: int, cp: int, pp: int, dp: int,
                                  micro_batch: int, sp: bool, zero: int,
                                  zero_ranks: int | None = None) -> tuple[float, float, float, float]:
    """The terms of micro_batch_lower_bound_parts, per GPU: (on every stage: the runtime
    allowance and the backward workspace; on the last: the logits; per layer: its state, and
    its input checkpoint for one micro-batch in flight). They read dp only as the ZeRO ranks'
    default."""
    ranks = dp * cp if zero_ranks is None else zero_ranks
    memo = _lb_memo(inst)
    key = (tp, cp, pp, micro_batch, sp, zero, ranks)
    terms = memo.get(key)
    if terms is None:
        terms = memo[key] = _lower_bound_terms(inst, tp, cp, pp, micro_batch, sp, zero, ranks)
    return terms


def _lb_memo(inst: Instance) -> dict:
    """`inst`'s entry of _LB_TERMS: (tp, cp, pp, micro_batch, sp, zero, ranks) -> its terms."""
    return _LB_TERMS.read(id(inst), inst, dict)


def _lower_bound_terms(inst: Instance, tp: int, cp: int, pp: int, micro_batch: int, sp: bool, zero: int,
                       ranks: int) -> tuple[float, float, float, float]:
    memo = _lb_memo(inst)
    ckpt, workspace, logits = _activation_terms(inst, memo, micro_batch, tp, cp, sp)
    return (_runtime_term(memo, tp, cp, ranks, pp) + workspace, logits, _state_term(inst, memo, tp, zero, ranks),
            ckpt)


def _state_term(inst: Instance, memo: dict, tp: int, zero: int, ranks: int) -> float:
    """A layer's state (_lower_bound_terms): it reads only tp, ZeRO and its ranks, not the
    micro-batch, cp, pp or sp: kept by those in `memo` (GPT-3 175B / 1,024 A100: 3,851 terms)."""
    state = memo.get(("state", tp, zero, ranks))
    if state is None:
        m, fw = inst.model, inst.job.framework
        state = memo["state", tp, zero, ranks] = (memory.layer_state_bytes(m, tp, zero, ranks, _state_layout(inst.job))
                                                  + memory.fp8_weight_bytes(m, tp, inst.job.precision, fw))
    return state


def _activation_terms(inst: Instance, memo: dict, b: int, tp: int, cp: int, sp: bool) -> tuple:
    """(checkpoint, backward workspace, logits) of micro-batch size b (_lower_bound_terms): they
    read only the micro-batch, tp, cp and sp: kept by those (GPT-3 175B / 1,024 A100: 781
    activation terms of 4,176 terms)."""
    acts = memo.get(("acts", b, tp, cp, sp))
    if acts is None:
        m, fw = inst.model, inst.job.framework
        frag = 1 + memory.ALLOCATOR_FRAGMENTATION
        # an MoE layer's workspace is its attention view's (cost/coefficients.moe_layer)
        view = moe_attention_view(m) if m.moe is not None else m
        acts = memo["acts", b, tp, cp, sp] = (memory.checkpoint_activation_bytes(m, b, tp, cp, sp) * frag,
                                              memory.backward_workspace_bytes(view, b, tp, cp) * frag,
                                              memory.logits_activation_bytes(m, b, tp, cp, fw) * frag)
    return acts


def _runtime_term(memo: dict, tp: int, cp: int, ranks: int, pp: int) -> float:
    """The runtime allowance (_lower_bound_terms): it reads only tp, cp, the ring (which spans
    `ranks`) and pp (GPT-3 175B / 1,024 A100: 181 allowances)."""
    runtime = memo.get(("runtime", tp, cp, ranks // cp, pp))
    if runtime is None:
        runtime = memo["runtime", tp, cp, ranks // cp, pp] = memory.runtime_bytes(tp, cp, ranks // cp, pp)
    return runtime


_STATE_LAYOUTS = IdentityCache(64)  # a few jobs per process, many in a test session


def _state_layout(job):
    """memory.state_layout(job), read once per job object (the listing's memory caps ask it for
    every class, group and micro-batch size: 8,324 times on GPT-3 175B's space, 0.05 s)."""
    return _STATE_LAYOUTS.read(id(job), job, memory.state_layout, job)


def capped_micro_batches(candidates: list[int], fits) -> list[int]:
    """The micro-batch cap from memory: the ascending `candidates` up to the first whose lower
    bound does not fit (`fits(b)`: LB(b) fits; LB grows with b, so no larger one fits either).
    The smallest candidate is always kept: an instance that fits nowhere is reported by its
    memory need, not as an empty space."""
    kept = candidates[:1]
    for b in candidates[1:]:
        if not fits(b):
            break
        kept.append(b)
    return kept


def recompute_rows(full_recompute: bool, pattern: RecomputePattern, layers: int, slots: int, v: int,
                   pp_min: int):
    """How exhaustive search lists the recompute counts of one outer configuration, and how
    count_splits counts them: False (none), True (every count on every stage: PER_STAGE), or
    (pattern, largest stage, largest chunk), the bounds cost/recompute_patterns.options lists a
    pattern's parameter values for, shared by the classes (one value for all of them). `slots`:
    layers + the embedding / loss slots; pp_min: the fewest stages of a class."""
    if not full_recompute:
        return False
    if pattern is RecomputePattern.PER_STAGE:
        return True
    top_chunk = slots // v - pp_min + 1
    return (pattern, v * top_chunk, top_chunk)


def pattern_values(rows) -> int:
    """The parameter values a pattern's recompute_rows key lists (1 without a pattern)."""
    if isinstance(rows, tuple):
        return recompute_patterns.parameter_count(*rows)
    return 1


def count_splits(layers: int, pp: int, v: int, full_recompute, uniform: bool,
                 slots: tuple[bool, bool] = (False, False)) -> int:
    """Exact number of (layer split, recompute counts) pairs for one outer configuration:
    compositions of layers/v chunks into pp positive parts, times prod_s (n_s + 1) recompute
    choices; computed by dynamic programming over stages. `slots`: the embedding / loss counted
    as a layer slot (cost/pipeline_split.py): (layers + slots) / v chunks, the end stage
    holding v k - 1 layers. `full_recompute`: a recompute_rows key; with a pattern, each split
    has one row per parameter value (pattern_values; rows that repeat are counted)."""
    if isinstance(full_recompute, tuple):
        return count_splits(layers, pp, v, False, uniform, slots) * pattern_values(full_recompute)
    flagged = sum(slots)
    if (layers + flagged) % v:
        return 0
    chunks = (layers + flagged) // v
    if uniform and flagged:
        raise ValueError("the uniform split baseline does not count the embedding / loss slots")
    if uniform:
        from paraplan.cost.readers.plan_reader import default_layer_split
        split = default_layer_split(layers, pp, v)
        if not full_recompute:
            return 1
        total = 1
        for n in split:
            total *= n + 1
        return total
    if not full_recompute:
        return math.comb(chunks - 1, pp - 1)  # compositions of `chunks` into pp positive parts
    # Weighted compositions: stage s with k_s chunks has v*k_s + 1 recompute counts. Per stage
    # sum_{k>=1} (v k + 1) x^k = x (1 + v - x) / (1 - x)^2, so the count is the coefficient of
    # x^chunks in x^pp (1 + v - x)^pp (1 - x)^(-2 pp):
    #   sum_j C(pp, j) (1+v)^(pp-j) (-1)^j C(chunks - pp - j + 2pp - 1, 2pp - 1)
    # A stage giving a slot to the embedding / loss has v k recompute counts, sum v k x^k =
    # v x / (1 - x)^2: with f such stages, (1 + v - x)^(pp - f) v^f in place of (1 + v - x)^pp.
    # O(pp) big-integer terms instead of an O(pp * chunks^2) dynamic programme; each term from
    # the previous one by exact small-integer steps (C(n-1, k) = C(n, k) (n - k) / n), since a
    # fresh math.comb per term took 1.4 s at a million layers on 1,024 stages.
    k = 2 * pp - 1
    q = pp - flagged  # stages without a slot
    n = chunks - pp + k  # C(n - j, k) with rest = chunks - pp - j
    binom_pp, power, binom_rest = 1, (1 + v) ** q, math.comb(n, k)
    total = 0
    for j in range(min(q, chunks - pp) + 1):
        total += (-1) ** j * binom_pp * power * binom_rest
        binom_pp = binom_pp * (q - j) // (j + 1)
        power //= 1 + v
        binom_rest = binom_rest * (n - j - k) // (n - j) if n - j > 0 else 0
    return total * v ** flagged


def declared_outers(inst: Instance, families: tuple[str, ...] = FAMILIES,
                  groups: tuple[int, ...] | None = None, uniform: bool = False) -> list[ClassOuter]:
    """Every outer configuration, in a fixed order (families, group subsets by size then index,
    tp, cp, shapes, micro_batch, sp, zero, virtual stages, recompute, (ep, etp), embedding / loss
    slots) that also breaks ties. `groups`: only plans
    using exactly these groups; `uniform`: only plans using every group."""
    out = [o for b in declared_blocks(inst, families, groups, uniform) for o in b.outers()]
    if not dualpipe_job(inst) and rules_for(inst.job.framework, inst.job.optimizer).zero_bubble:
        out = with_zero_bubble(inst, out)  # each in its place, after the outer it varies
    return out


@dataclass(frozen=True)
class OuterBlock:
    """The outer configurations of one class layout (family, groups, tp per group, cp, class
    shapes) at one micro-batch size, not yet listed: consecutive in declared_outers' order, so
    that a search may bound a block (solver/bounds/layouts.py) and list only those that can win,
    each in its place. `modes`: what the listing reads per completion (see outers())."""

    family: str
    classes: tuple
    tp: int
    group_tp: tuple
    cp: int
    micro_batch: int
    vs: tuple  # the v values some (sp, ZeRO) admits here
    modes_left: tuple  # (sp, zero, admitted v values)
    recompute: tuple  # base recompute modes
    layouts: dict  # sp -> [(ep, etp)]
    slots_of_v: dict  # v -> [(embedding_in_split, loss_in_split)]
    paired: dict  # ep -> whether the all-to-all overlap pairs micro-batches
    unpaired: bool
    tally: "Tally"  # what specs() lists, counted (shared by the blocks of equal modes)

    def specs(self):
        """(sp, zero, v, recompute, ep, etp, embedding_in_split, loss_in_split) of each outer, in
        order (what outers() builds, without building it)."""
        for sp, zero, admitted in self.modes_left:
            for v in self.vs:
                if v not in admitted:
                    continue
                for rc, (ep, etp), (emb, loss) in itertools.product(
                        self.recompute, self.layouts[sp], self.slots_of_v[v]):
                    if v == 1 and self.unpaired and self.paired[ep]:
                        continue  # no counts of >= 2 on its pp = 1 classes
                    yield sp, zero, v, rc, ep, etp, emb, loss

    def outers(self) -> list[ClassOuter]:
        return [self.outer(*x) for x in self.specs()]

    def tp_of(self, group: int) -> int:
        """The tensor-parallel degree of the stages on `group` (ClassOuter.tp_of)."""
        return dict(self.group_tp).get(group, self.tp) if self.group_tp else self.tp

    def outer(self, sp: bool, zero: int, v: int, rc, ep: int, etp, emb: bool, loss: bool) -> ClassOuter:
        return ClassOuter(tp=self.tp, cp=self.cp, micro_batch=self.micro_batch, sequence_parallel=sp,
                          recompute=rc, zero=zero, virtual_stages=v, classes=self.classes,
                          family=self.family, ep=ep, etp=etp, group_tp=self.group_tp,
                          embedding_in_split=emb, loss_in_split=loss)


@dataclass(frozen=True)
class Tally:
    """What an OuterBlock's specs() lists, without listing it: how many outers per (v, ep,
    embedding_in_split, loss_in_split, recompute mode) (those are all summarize reads of an outer
    beside its classes and micro-batch), the sequence-parallel flags, ZeRO stages, v values and embedding /
    loss slots that occur, each in order of first occurrence, and the first spec. `per_mode`:
    of each (sp, ZeRO) mode that lists some outer, in order, (sp, zero, its first spec, its
    counts): a count that reads the mode (_partition_tally) reads it once per mode, not per outer."""

    counts: dict
    sps: tuple
    zeros: tuple
    vslots: tuple  # (v, embedding_in_split, loss_in_split)
    first: tuple | None
    per_mode: tuple = ()

    @property
    def outers(self) -> int:
        return sum(self.counts.values())

    @classmethod
    def of(cls, block_fields: tuple) -> "Tally":
        counts: dict = {}
        sps, zeros, vslots = {}, {}, {}
        per_mode = []
        modes_left, vs, recompute, layouts, slots_of_v, paired, unpaired = block_fields
        for sp, zero, admitted in modes_left:
            own: dict = {}  # this mode's counts
            first = None  # this mode's first spec
            for v in vs:
                if v not in admitted:
                    continue
                for ep, etp in layouts[sp]:
                    if v == 1 and unpaired and paired[ep]:
                        continue  # as specs()
                    for emb, loss in slots_of_v[v]:
                        if not recompute:
                            continue
                        if first is None:
                            first = (sp, zero, v, recompute[0], ep, etp, emb, loss)
                        for rc in recompute:  # the framework's recompute pattern reads the mode
                            own[v, ep, emb, loss, rc] = own.get((v, ep, emb, loss, rc), 0) + 1
                        sps[sp] = zeros[zero] = vslots[v, emb, loss] = None
            if first is not None:
                per_mode.append((sp, zero, first, own))
                for key, n in own.items():
                    counts[key] = counts.get(key, 0) + n
        first = per_mode[0][2] if per_mode else None
        return cls(counts, tuple(sps), tuple(zeros), tuple(vslots), first, tuple(per_mode))


def declared_blocks(inst: Instance, families: tuple[str, ...] = FAMILIES,
                    groups: tuple[int, ...] | None = None, uniform: bool = False) -> list[OuterBlock]:
    """declared_outers in blocks (OuterBlock), in its order; a DualPipe job's blocks list only
    the configurations DualPipe runs (declared_outers filters them)."""
    out: list[OuterBlock] = [blk for part in declared_partials(inst, families, groups, uniform)
                             for blk in part.blocks()]
    if dualpipe_job(inst):  # the configurations DualPipe runs, in the same order
        out = [_DualPipeBlock(inst, b) for b in out]
    return out


@dataclass
class _Listing:
    """What the listing of one instance reads once (declared_partials): the subsets, the
    recompute modes, the framework's rules and the micro-batch caps' memory bounds."""

    inst: Instance
    uniform: bool
    modes: tuple
    rules: object
    bound_memo: dict = field(default_factory=dict)
    invariants: dict = field(default_factory=dict)  # shape_blocks' reads of a layout's degrees
    # shape_blocks' v values per micro-batch size and its tallies, kept by what they read: the
    # layouts of GPT-3 175B's space (224) repeat 24 tallies over their 1,885 micro-batch sizes
    splits: dict = field(default_factory=dict)
    tallies: dict = field(default_factory=dict)

    def shape_blocks(self, family: str, tpg: dict[int, int], cp: int, shapes) -> list[OuterBlock]:
        """The blocks (one per micro-batch size) of one class layout, in declared order."""
        inst, uniform = self.inst, self.uniform
        gb = inst.job.global_batch
        # ClassOuter's tp: the first stage's group's; group_tp where they differ
        tp = tpg[shapes[0].stage_groups[0]]
        tps = tuple(sorted(set(tpg.values())))
        group_tp = tuple(sorted(tpg.items())) if len(tps) > 1 else ()
        # all but the micro-batch sizes reads the classes' replicas and depths only: read once
        # for the layouts that share them (the orders of a stage-wise pipeline, its last group's
        # representatives in declared_partials)
        key = (tp, tps, cp, tuple((c.replicas, c.pp) for c in shapes))
        got = self.invariants.get(key)
        if got is None:
            got = self.invariants[key] = self._invariants(tp, tps, group_tp, cp, shapes)
        layouts, slots_of_v, modes_left, paired, per_mb, tally_key, split_key = got
        out = []
        for mb in micro_batch_values(inst, tpg, cp, shapes, uniform, self.bound_memo):
            if mb not in per_mb:
                # the v values and the pairing read the batch's micro-batches and what
                # has_micro_batch_split reads of the classes for each v offered (split_key)
                sk = (split_key, gb // mb)
                split = self.splits.get(sk)
                if split is None:
                    vs = tuple(v for v in slots_of_v if v == 1 or has_micro_batch_split(shapes, gb // mb, uniform, v))
                    # no counts of >= 2 on its pp = 1 classes (read only where needed)
                    unpaired = (any(paired.values()) and 1 in vs
                                and not has_micro_batch_split(shapes, gb // mb, uniform, 1, True))
                    split = self.splits[sk] = (vs, unpaired)
                vs, unpaired = split
                tally = self.tallies.get((tally_key, vs, unpaired))
                if tally is None:
                    tally = self.tallies[tally_key, vs, unpaired] = Tally.of(
                        (modes_left, vs, self.modes, layouts, slots_of_v, paired, unpaired))
                per_mb[mb] = (vs, unpaired, tally)
            vs, unpaired, tally = per_mb[mb]
            out.append(OuterBlock(family, shapes, tp, group_tp, cp, mb, vs, modes_left, self.modes,
                                  layouts, slots_of_v, paired, unpaired, tally))
        return out

    def _invariants(self, tp: int, tps: tuple, group_tp: tuple, cp: int, shapes) -> tuple:
        """(expert layouts per sp, slot modes per v, (sp, zero, admitted v) modes, pairing per
        ep, {}: the micro-batch sizes' v values, filled in by shape_blocks, the key of its
        tallies: what Tally.of reads of the layout, and the key of its v values: what
        has_micro_batch_split reads of the classes for each v offered) of a layout. Each part
        is read once per what it reads and kept as one object per value (_interned), so that
        the layouts of other replica counts share it: with search.idle_gpus every (replicas,
        depth) of a lone class is a layout of its own (DeepSeek-V3 on 2,048 H800: 31,243 of
        them), and the MoE bounds key their rows by the expert layouts' identity
        (solver/bounds/layouts._MoeRows.block_rows)."""
        replicas = sum(c.replicas for c in shapes)
        # an expert group lies inside one class's tp x dp x cp ranks
        # (cost/space_rules.expert_layouts: (ep, etp) pairs)
        ranks = math.gcd(*(c.replicas * cp for c in shapes))
        layouts, layouts_id, paired, paired_id = self._layouts_of(tp, ranks, bool(group_tp))
        pps = _depths(shapes)
        slots_of_v, slots_id = self._slots_of(pps)
        modes_left, modes_id = self._modes_of(tps, cp, replicas, pps, tuple(slots_of_v))
        # all a Tally reads of the layout, as values (each part's _interned id: equal ids, equal
        # values): layouts of other degrees share tallies
        tally_key = (modes_id, layouts_id, slots_id, paired_id)
        # has_micro_batch_split reads the count form (with the replicas in the uniform baseline):
        # layouts of other replicas and depths share it (on one group, a lone class of r replicas
        # of pp stages splits the batch as every layout of its r * pp does, v > 1)
        degrees = tuple([(c.replicas, c.pp) for c in shapes])  # all _count_form reads of them
        split_key = (tuple((v, _count_form_of(degrees, v)) for v in slots_of_v),
                     _count_form_of(degrees, 1, True) if paired_id[1] else None,
                     replicas if self.uniform else None)
        return layouts, slots_of_v, modes_left, paired, {}, tally_key, split_key

    def _interned(self, kind: str, value, content) -> tuple:
        """(the one object kept for `content` of this kind, its id: an int, equal for equal
        contents): the parts _invariants reads are shared by content, so that their keys
        (tally_key, _MoeRows' id(layouts)) tell equal values equal."""
        got = self.invariants.get((kind, content))
        if got is None:
            got = self.invariants[kind, content] = (value, len(self.invariants))
        return got

    def _layouts_of(self, tp: int, ranks: int, per_group: bool) -> tuple:
        """(expert layouts per sp, its id, pairing per ep, (its id, whether any pairs)) of a
        stage of tp over `ranks` ranks (_invariants), kept by all they read of the ranks
        (cost/space_rules.expert_ranks_modulus): with search.idle_gpus every (replicas, depth)
        of a lone class is a layout of its own, and DeepSeek-V3 on 2,048 H800 read 3,840 rank
        counts, 36 gcds (tp x ranks, K)."""
        inst = self.inst
        modulus = self.invariants.get(("expert ranks modulus", tp))
        if modulus is None:
            modulus = self.invariants["expert ranks modulus", tp] = expert_ranks_modulus(inst.model, inst.search, tp)
        key = ("layouts of", tp, math.gcd(tp * ranks, modulus), per_group)
        got = self.invariants.get(key)
        if got is None:
            # with a tp per group, experts split as each group's tp (etp = tp): a
            # folded etp would need an expert layout per group
            layouts = {sp: [(ep, etp) for ep, etp in expert_layouts(inst.model, inst.search, tp, ranks, sp)
                            if etp is None or not per_group]
                       for sp in inst.search.sequence_parallel}
            layouts, layouts_id = self._interned(
                "layouts", layouts, tuple((sp, tuple(lay)) for sp, lay in layouts.items()))
            paired = {ep: pairs_unpipelined_micro_batches(self.inst.job, ep)
                      for lay in layouts.values() for ep, _ in lay}
            paired, paired_id = self._interned("paired", paired, tuple(paired.items()))
            got = self.invariants[key] = (layouts, layouts_id, paired, (paired_id, any(paired.values())))
        return got

    def _slots_of(self, pps: tuple) -> tuple:
        """(slot modes per v, its id) of classes of depths `pps` (_invariants)."""
        key = ("slots of", pps)
        got = self.invariants.get(key)
        if got is None:
            # virtual_stage_values and slot_modes_of, what they read of the instance and the
            # classes read once
            facts, s = _slot_facts(self.inst), self.inst.search
            listed = tuple(s.virtual_stages) if s.virtual_stages is not None else None
            # the uniform-split baseline keeps the even split of whole chunks
            slots_of_v = {v: [x for x in _slot_modes_of(*facts, pps, v) if not (self.uniform and any(x))]
                          for v in _virtual_stage_values(*facts, listed, pps)}
            slots_of_v = {v: x for v, x in slots_of_v.items() if x}
            got = self.invariants[key] = self._interned(
                "slots", slots_of_v, tuple((v, tuple(x)) for v, x in slots_of_v.items()))
        return got

    def _modes_of(self, tps: tuple, cp: int, replicas: int, pps: tuple, vs_all: tuple) -> tuple:
        """((sp, zero, the v admitted with them) modes, its id) of a layout (_invariants): they
        do not depend on the micro-batch size nor on tp's place: read once per tp values, cp,
        replicas (as sharded_ranks), depths and v values."""
        mk = ("modes", tps, cp, sharded_ranks(replicas, cp), pps, vs_all)
        got = self.invariants.get(mk)
        if got is None:
            m, s, rules = self.inst.model, self.inst.search, self.rules
            modes_left = []  # (sp, zero, the v admitted with them)
            for sp in s.sequence_parallel:
                if any(sp and (t == 1 or m.seq_len % (t * cp)) or moe_problem(m, t, sp, 0) for t in tps):
                    continue
                for zero in s.zero:
                    if zero and replicas * cp == 1 or any(moe_problem(m, t, sp, zero) for t in tps):
                        continue
                    modes_left.append((sp, zero, {v for v in vs_all if all(
                        rules.admits(tp=t, pp=pp, cp=cp, dp=replicas, sp=sp, zero=zero, v=v)
                        for pp in pps for t in tps)}))
            modes_left = tuple(modes_left)
            got = self.invariants[mk] = self._interned(
                "modes", modes_left, tuple((sp, zero, frozenset(adm)) for sp, zero, adm in modes_left))
        return got


@dataclass
class Partial:
    """A partial layout: the family, the groups used, their tp and cp, and for the stage family
    the replicas dp (of the other families one class layout), with its class layouts not yet listed (blocks() lists them, in declared
    order; consecutive in declared_outers). `reps`: (orders, blocks) of representative layouts,
    each standing for `orders` layouts whose blocks list as many outers, mode for mode: a
    stage-wise pipeline through the groups in every order is represented by one order per last
    group (of the order, the micro-batch cap reads only the last stage's group and the set of
    groups, micro_batch_values; the modes, v and slots read the depth); of the other families
    each layout stands for itself (solver/bounds/layouts.py bounds each)."""

    listing: _Listing
    family: str
    used: tuple[int, ...]
    tpg: dict
    cp: int
    dp: int | None
    reps: list
    # its place in declared_outers' order: (family, subset, tp choice, cp, dp or layout) as
    # indices, in that order (partial_rank): a search that sets up partial layouts as it reaches
    # them (solver/bounds/stage_families.py) ranks them without counting those before them
    rank: int = 0

    def blocks(self) -> list[OuterBlock]:
        lst = self.listing
        if self.dp is None or len(self.used) == 1:
            # the reps are the layouts themselves: of the stage family on one group, one order
            # per stage-count vector, stage_shapes' own (its blocks are not built twice)
            return [blk for _, blks in self.reps for blk in blks]
        return [blk for shapes in stage_shapes(lst.inst, self.tpg, self.used, self.cp, self.dp)
                for blk in lst.shape_blocks(self.family, self.tpg, self.cp, shapes)]


def declared_partials(inst: Instance, families: tuple[str, ...] = FAMILIES,
                      groups: tuple[int, ...] | None = None, uniform: bool = False) -> list[Partial]:
    """The declared space as partial layouts (Partial), in declared_outers' order."""
    return partials_and_families(inst, families, groups, uniform)[0]


# bits per field of a partial layout's rank (partial_rank): each field is an index into a list
# of at most 2^RANK_FIELD_BITS entries (group subsets, tp choices, cp values, dp values, layouts)
RANK_FIELD_BITS = 64


def partial_rank(*indices: int) -> int:
    """(family, subset, tp choice, cp, dp or layout) indices as one integer whose order is their
    lexicographic order: the order of declared_partials' loops."""
    out = 0
    for i in indices:
        out = (out << RANK_FIELD_BITS) | i
    return out


def partials_and_families(inst: Instance, families: tuple[str, ...] = FAMILIES,
                          groups: tuple[int, ...] | None = None, uniform: bool = False,
                          defer_stage: bool = False, defer_options: bool = False) -> tuple[list[Partial], _Listing, list]:
    """declared_partials, and with `defer_stage` the layouts across two groups or more of the
    stage family (with a tp per group; with search.idle_gpus on one group too) and of the
    replica family left out of the list, as
    (family index, subset index, family, groups) (solver/bounds/stage_families.py sets them up
    as the search reaches them); with `defer_options` every layout of the replica and mixed
    families left out so (solver/option_families.py sets them up under its bound: no count of
    them is refused); the listing they share."""
    s = inst.search
    G = len(inst.cluster.groups)
    if not defer_options:
        check_layouts(inst)
    if groups is not None:
        subsets = [tuple(sorted(groups))]
    elif uniform:
        subsets = [tuple(range(G))]
    else:
        subsets = [u for k in range(1, G + 1) for u in itertools.combinations(range(G), k)]
    flash = inst.job.attention is Attention.FLASH
    lst = _Listing(inst, uniform, tuple(s.recompute[:1] if flash else s.recompute),
                   rules_for(inst.job.framework, inst.job.optimizer))  # the optimizer narrows ZeRO
    out: list[Partial] = []
    deferred: list = []
    for fi, family in enumerate(families):
        for si, used in enumerate(subsets):
            # with idle GPUs a stage family on one group is deferred too: it lists every replica
            # count, each with every depth it fits (GPT-3 175B on 1,024 A100: 3,836 partial
            # layouts, 18,608 class layouts), which its families' bounds mostly leave unlisted
            if defer_options and family != "stage" or defer_stage and (
                    family == "stage" and s.tp_per_group and (len(used) > 1 or s.idle_gpus)
                    or family == "replica" and len(used) > 1):
                deferred.append((fi, si, family, used))
                continue
            for ti, tpg in enumerate(tp_choices(inst, used, family)):
                for ci, cp in enumerate(cp_values(inst, used, tpg)):
                    out += layout_partials(lst, family, used, tpg, cp, (fi, si, ti, ci))
    return out, lst, deferred


def layout_partials(lst: _Listing, family: str, used: tuple[int, ...], tpg: dict, cp: int,
                     at: tuple[int, ...]) -> list[Partial]:
    """The partial layouts of one (family, groups, tp per group, cp), `at` its rank's first
    indices: of the stage family one per dp, of the others one per class layout."""
    inst = lst.inst
    if family != "stage":  # each layout its own
        shapes = (replica_shapes(inst, tpg, used, cp) if family == "replica" and (
            len(used) >= 2 or inst.search.classes_per_group > 1) else
            enumerate(class_shapes(inst, tpg, used, family, cp)))
        return [replica_partial(lst, family, used, tpg, cp, x, layout, at) for x, layout in shapes]
    return [stage_partial(lst, used, tpg, cp, dp, partial_rank(*at, x))
            for x, dp in enumerate(stage_replicas(inst, tpg, used, cp))]


def replica_partial(lst: _Listing, family: str, used: tuple[int, ...], tpg: dict, cp: int, x: int, shapes,
                    at: tuple[int, ...]) -> Partial:
    """The partial layout of one class layout `shapes` of a family other than the stage
    family, the x-th of its (family, groups, tp, cp) (`at`)."""
    return Partial(lst, family, used, tpg, cp, None, [(1, lst.shape_blocks(family, tpg, cp, shapes))],
                   partial_rank(*at, x))


def stage_partial(lst: _Listing, used: tuple[int, ...], tpg: dict, cp: int, dp: int, rank: int) -> Partial:
    """The stage family's partial layout of dp replicas on the groups `used` at tp `tpg`, cp."""
    reps = [(n, lst.shape_blocks("stage", tpg, cp, shapes))
            for n, shapes in stage_representatives(lst.inst, tpg, used, cp, dp)]
    return Partial(lst, "stage", used, tpg, cp, dp, reps, rank)


def zero_bubble_modes(inst: Instance, o: ClassOuter) -> list[ZeroBubble]:
    """The zero-bubble schedules (cost/zero_bubble.py) torch runs for configuration `o` of a
    framework that has them (FrameworkRules.zero_bubble), with any layer plan (the layer-plan
    bounds of solver/class_partitions.py take the drain credit per plan), by torch's rules on every class's
    pp, v and micro-batch count (cost/schedule.schedule_problem: v >= 2, ZBVZeroBubble v = 2 and
    m >= 2 pp - 1, priced with pp >= 3). A lone class runs the count the batch gives it; of
    several, whose counts are decisions m_k = 2 pp_k + pp_k j (formulations/multiclass.py, lo_k
    and st_k with v > 1), every value passes when the least does: m_k >= 2 pp_k > 2 pp_k - 1,
    and a multiple of pp_k is a multiple of its m_k // pp_k rounds. So each class is checked at
    its least count."""
    if o.virtual_stages < 2:
        return []
    if len(o.classes) == 1:
        counts = [inst.job.global_batch // o.micro_batch // o.classes[0].replicas]
    else:
        counts = [2 * c.pp for c in o.classes]
    # ZBVZeroBubble's V prices the output layer on the first stage from the last stage's terms
    # and the bare last rank from a middle stage's (zero_bubble.v_shaped): each pipeline on one
    # node group
    one_group = all(len(set(c.stage_groups)) == 1 for c in o.classes)
    return [k.mode for k in TorchSchedule
            if k.zero_bubble and (one_group or k is not TorchSchedule.ZBV_ZERO_BUBBLE)
            and all(torch_schedule_problem(k, c.pp, o.virtual_stages, m) is None
                    for c, m in zip(o.classes, counts))]


def with_zero_bubble(inst: Instance, outers: list[ClassOuter]) -> list[ClassOuter]:
    """`outers` with each one's zero-bubble variants (zero_bubble_modes) in its place, in the
    order of cost/schedule.TorchSchedule. Where InterleavedZeroBubble runs, the Interleaved1F1B
    configuration is left out: it is dominated. The two price the same stage terms and memory
    (ZB-H1 holds what interleaved 1F1B holds), and on every split ZB-H1's pipeline term is no
    larger: each stage's path m T_s + (sum_{s' != s} B_s') / v, B_s' = T_s' - 2 W_s' <= T_s',
    is at most m T_s + (sum_{s' != s} T_s') / v <= m T_max + (sum T - T_max) / v (m >= 1/v).
    Listed, it was priced and never won: Llama-3.1 405B on 16,384 H100 priced 2,476
    configurations with it, 1,460 without."""
    out = []
    for o in outers:
        modes = zero_bubble_modes(inst, o)
        if ZeroBubble.INTERLEAVED not in modes:
            out.append(o)
        out.extend(replace(o, zero_bubble=z) for z in modes)
    return out


class _DualPipeBlock:
    """An OuterBlock of a DualPipe job: its outers those DualPipe runs (declared_outers)."""

    def __init__(self, inst: Instance, block: OuterBlock) -> None:
        self.inst, self.block = inst, block

    def outers(self) -> list[ClassOuter]:
        # whether DualPipe runs an outer reads the block's classes and micro-batch and the
        # outer's v only: decided per v, and only the outers it runs built (issue 32: building
        # every outer to filter it was a quarter of a DualPipe search of Qwen3-235B)
        b = self.block
        runs = {v: _dualpipe_runs(self.inst, b.classes, b.micro_batch, v) for v in b.vs}
        return [b.outer(*x) for x in b.specs() if runs[x[2]]]


def sharded_ranks(replicas: int, cp: int) -> bool:
    """All that the (sp, ZeRO, v) modes of a layout read of its replicas (_sp_zero_values,
    _Listing._invariants): whether more than one data x context parallel rank holds each
    stage (ZeRO needs one to shard over; FrameworkRules.admits reads dp only as dp * cp > 1).
    With search.idle_gpus every replica count of a lone class is a layout of its own, so the
    modes are kept by this, not by the count (tests/solver/test_space_modes_key.py checks the
    rules read no more)."""
    return replicas * cp > 1


def _sp_zero_values(inst: Instance, tpg: dict[int, int], cp: int, shapes) -> tuple[list[bool], list[int]]:
    """The sequence-parallel flags and ZeRO stages some plan with these classes can run, each
    admitted with some value of the other and some v (`tpg`: group -> tp)."""
    m, s = inst.model, inst.search
    tps = sorted(set(tpg.values()))
    replicas = sum(c.replicas for c in shapes)
    rules = rules_for(inst.job.framework, inst.job.optimizer)  # the optimizer narrows ZeRO
    vs = virtual_stage_values(inst, shapes)
    sps = [sp for sp in s.sequence_parallel
           if all(not (sp and (tp == 1 or m.seq_len % (tp * cp))) and moe_problem(m, tp, sp, 0) is None
                  for tp in tps)]
    zeros = [z for z in s.zero if not (z and replicas * cp == 1)
             and all(moe_problem(m, tp, tp > 1, z) is None for tp in tps)]

    pps = _depths(shapes)  # the rules read a class's depth, not the class

    def admitted(sp: bool, z: int, v: int) -> bool:
        for pp in pps:
            for tp in tps:
                if not rules.admits(tp=tp, pp=pp, cp=cp, dp=replicas, sp=sp, zero=z, v=v):
                    return False
        return True

    sps = [sp for sp in sps if any(admitted(sp, z, v) for z in zeros for v in vs)]
    zeros = [z for z in zeros if any(admitted(sp, z, v) for sp in sps for v in vs)]
    return sps, zeros


def _degree_values(inst: Instance, tpg: dict[int, int], cp: int, shapes, tps: tuple, uniform: bool,
                   memo: dict) -> tuple[list[int], tuple | None]:
    """micro_batch_values' reading of the classes' degrees only: the candidate sizes that split
    the batch between the replicas, and the (sp flags, ZeRO stages) admitted (None with the
    user's own list), once per degrees, not per layout."""
    s, gb = inst.search, inst.job.global_batch
    degrees = ("degrees", tuple((c.replicas, c.pp) for c in shapes), tps, cp, uniform)
    if degrees not in memo:
        # each part kept by what it reads, so that degrees that share it read it once (with
        # search.idle_gpus a lone class of dp replicas takes every depth it fits, each degrees
        # of their own: GPT-3 175B on 1,024 A100 lists 18,608): the split of the batch reads
        # the count form (has_micro_batch_split; the replicas, for the uniform count), the
        # modes the replicas and the depths (_sp_zero_values)
        replicas = sum(c.replicas for c in shapes)
        split = ("splits", _count_form(shapes, 1), replicas, uniform)
        if split not in memo:
            memo[split] = splitting_sizes(shapes, gb, [b for b in s.micro_batch if gb % b == 0]
                                          if s.micro_batch is not None else
                                          [d for d in divisors(gb) if s.max_micro_batch is None or d <= s.max_micro_batch],
                                          uniform)
        # of the replicas the modes read whether some rank shards or syncs (sharded_ranks)
        modes = ("sp zero", tps, cp, sharded_ranks(replicas, cp), _depths(shapes))
        if s.micro_batch is None and modes not in memo:
            memo[modes] = _sp_zero_values(inst, tpg, cp, shapes)
        memo[degrees] = (memo[split], None if s.micro_batch is not None else memo[modes])
    return memo[degrees]


def splitting_sizes(shapes, global_batch: int, sizes: list[int], uniform: bool) -> list[int]:
    """The micro-batch sizes of `sizes` (each dividing the global batch) whose micro-batches
    split between the classes' replicas (has_micro_batch_split at v = 1), in order. Outside the
    uniform baseline every size is read from one reachability mask, up to the largest rest:
    the sums of the x_k's multiples are a set, and a longer mask holds the same sums below
    (_representable's doublings, run once rather than per size: with search.idle_gpus
    DeepSeek-V3 on 2,048 H800 read 2,048 count forms at 50 sizes each)."""
    if uniform or not sizes:
        return [b for b in sizes if has_micro_batch_split(shapes, global_batch // b, uniform)]
    x, lo, _ = _count_form(shapes, 1)
    base = sum(xk * lk for xk, lk in zip(x, lo))
    rests = [global_batch // b - base for b in sizes]
    reach = _reachable(x, max(rests))
    return [b for b, rest in zip(sizes, rests) if rest >= 0 and reach >> rest & 1]


def _reachable(x: tuple[int, ...], rest: int) -> int:
    """The bit mask of every sum of non-negative multiples of the x_k up to `rest` (bit i set:
    i is such a sum; 0 where rest < 0): _representable's mask."""
    if rest < 0:
        return 0
    mask = (1 << (rest + 1)) - 1
    reach = 1
    for xk in x:
        shift = xk
        while shift <= rest:
            reach = (reach | (reach << shift)) & mask
            shift *= 2
    return reach


def micro_batch_values(inst: Instance, tpg: dict[int, int], cp: int, shapes,
                       uniform: bool = False, bound_memo: dict | None = None) -> list[int]:
    """Micro-batch sizes of the space for these classes: the user's list, or the divisors of
    the global batch (within max_micro_batch) that split it between the replicas
    (has_micro_batch_split), capped from memory by the homogeneous rule
    (capped_micro_batches): b is kept iff, for some admitted sp flag and ZeRO
    stage, every class's lower bound (micro_batch_lower_bound_parts, with ZeRO
    sharding over every replica of the plan) fits: its last stage's on the GPU of its last
    stage's group, at that group's tp, and its fullest stage's on some group of the class, at
    that group's tp (the stage holding the most layers may sit on any of them). With one class
    on one group this is the homogeneous space's list. `tpg`: group -> tp. `bound_memo`: the
    lower bounds already read for `inst` (declared_outers shares one between the shapes: they
    depend on a class's degrees and modes, which many shapes repeat)."""
    s = inst.search
    memo = {} if bound_memo is None else bound_memo
    # what reads the classes' degrees only (the split of the batch, the sp flags and ZeRO
    # stages admitted): once per degrees, not per layout
    tps = tuple(sorted(set(tpg.values())))
    cands, sp_zero = _degree_values(inst, tpg, cp, shapes, tps, uniform, memo)
    if sp_zero is None:
        return cands
    sps, zeros = sp_zero
    if not cands or not sps or not zeros:
        return cands[:1]
    groups = inst.cluster.groups
    capacity = [g.gpu.hbm_bytes - s.memory_reserve_bytes for g in groups]
    ranks = sum(c.replicas for c in shapes) * cp
    # per class what its test reads: its last stage's group, the set of its stages' groups, its
    # depth (its replicas only as ZeRO's `ranks`), read once rather than per micro-batch size,
    # sp flag and ZeRO stage (a set of up to pp groups each time: 40% of this function on
    # GPT-3 175B / 1,024 A100)
    facts = [(c.stage_groups[-1], tuple(set(c.stage_groups)), c.pp) for c in shapes]

    # every candidate read at once (fits_each: numpy over the candidates), then capped: with
    # search.idle_gpus every replica count of a lone class is a layout of its own, and
    # DeepSeek-V3 on 2,048 H800 read 102,767 distinct (layout, size) checks one at a time
    fits = dict(zip(cands, fits_each(inst, tpg, cp, tuple(cands), sps, zeros, facts, ranks, capacity).tolist()))
    return capped_micro_batches(cands, fits.__getitem__)


def fits_each(inst: Instance, tpg: dict[int, int], cp: int, cands: tuple, sps, zeros, facts, ranks: int,
              capacity: list) -> np.ndarray:
    """Whether each micro-batch size of `cands` fits (micro_batch_values): for some sp flag and
    ZeRO stage, every class's lower bound (micro_batch_lower_bound_parts, ZeRO over `ranks`)
    fits on its last stage's group, and its fullest stage's on some group of the class (`facts`:
    per class its last stage's group, its stages' groups, its depth). The sums are _parts_of
    itself, read on float64 arrays of the sizes: the same floats."""
    memo, layers = _lb_memo(inst), inst.model.layers
    parts: dict = {}  # (tp, pp, sp, zero) -> the two parts per candidate

    def parts_of(g: int, pp: int, sp: bool, z: int) -> tuple:
        key = (tpg[g], pp, sp, z)
        got = parts.get(key)
        if got is None:
            ckpt, workspace, logits = _activation_arrays(inst, memo, cands, tpg[g], cp, sp)
            state = _state_term(inst, memo, tpg[g], z, ranks)
            every = _runtime_term(memo, tpg[g], cp, ranks, pp) + workspace
            got = parts[key] = _parts_of((every, logits, state, ckpt), layers, pp)  # on arrays
        return got

    fits = np.zeros(len(cands), dtype=bool)
    for sp in sps:
        for z in zeros:
            every_class = np.ones(len(cands), dtype=bool)
            for last, used, pp in facts:
                own = parts_of(last, pp, sp, z)
                fullest = own[1] <= capacity[last]
                for g in used:
                    if g != last:
                        fullest |= parts_of(g, pp, sp, z)[1] <= capacity[g]
                every_class &= (own[0] <= capacity[last]) & fullest
            fits |= every_class
    return fits


def _activation_arrays(inst: Instance, memo: dict, cands: tuple, tp: int, cp: int, sp: bool) -> tuple:
    """_activation_terms of each size of `cands`, as three float64 arrays, kept in `memo`."""
    key = ("acts of", cands, tp, cp, sp)
    got = memo.get(key)
    if got is None:
        rows = [_activation_terms(inst, memo, b, tp, cp, sp) for b in cands]
        got = memo[key] = tuple(np.array(col, dtype=np.float64) for col in zip(*rows))
    return got


def virtual_stage_values(inst: Instance, shapes) -> list[int]:
    """search.virtual_stages, or every v dividing the layers (or, where the release counts the
    embedding / loss as layer slots, the layers plus one or two: space_rules.slot_modes) with
    some slot mode for which v * pp_k <= the slots for every class (the homogeneous rule on each
    class: every stage holds a chunk); v > 1 only where every class has a pipeline."""
    s = inst.search
    listed = tuple(s.virtual_stages) if s.virtual_stages is not None else None
    return list(_virtual_stage_values(*_slot_facts(inst), listed, _depths(shapes)))


def slot_modes_of(inst: Instance, shapes, v: int) -> list[tuple[bool, bool]]:
    """The (embedding_in_split, loss_in_split) modes of v (space_rules.slot_modes) with which
    every class has a pipeline whose every stage holds a chunk: pp_k > 1 and v pp_k <= slots.
    No embedding slot for an MoE model with a dense prefix: the prefix is priced in stage 0's
    first chunk (schedule.first_stage_min_layers)."""
    return list(_slot_modes_of(*_slot_facts(inst), _depths(shapes), v))


# What the two functions above read of an instance and of the classes (the layers, whether an
# MoE dense prefix rules out the embedding slot, whether the release counts slots; the classes'
# stage counts), so that they are read once per distinct value: the listing asked them 7,054
# times for GPT-3 175B's 364 class shapes, with a handful of distinct answers.
def _slot_facts(inst: Instance) -> tuple[int, bool, bool]:
    m = inst.model
    return m.layers, m.moe is not None and m.moe.dense_layers > 0, split_slots_run(inst.job, inst.search)


def _depths(shapes) -> tuple[int, ...]:
    return tuple(sorted({c.pp for c in shapes}))


@lru_cache(maxsize=4096)
def _virtual_stage_values(layers: int, prefix: bool, slots: bool, listed, pps: tuple[int, ...]) -> tuple[int, ...]:
    vals = listed if listed is not None else sorted(
        set(divisors(layers)) | (set(divisors(layers + 1)) | set(divisors(layers + 2)) if slots else set()))
    return tuple(v for v in vals if v == 1 or _slot_modes_of(layers, prefix, slots, pps, v))


@lru_cache(maxsize=65536)
def _slot_modes_of(layers: int, prefix: bool, slots: bool, pps: tuple[int, ...], v: int) -> tuple[tuple[bool, bool], ...]:
    return tuple((e, l) for e, l in slot_modes(layers, v, slots)
                 if all(1 < pp and v * pp <= layers + e + l for pp in pps)
                 and not (e and prefix)) if v > 1 else ((False, False),)


def not_covered(inst: Instance, used_groups: set[int] | None = None) -> list[str]:
    """The kinds of plan this instance's cluster can run that the space leaves out (the module
    docstring's "Outside the space by default"), each with the search key that brings it in, so
    that a proof over the space says nothing about them: what `plan` prints and records beside
    its claim. `used_groups`: the groups the plan found runs on (None: no plan); a group it
    leaves idle is where the whole-group rule shows in the answer, and is named first. Each
    line names a rule only where the cluster has a plan it excludes: part of a group needs a
    group of >= 2 GPUs, one more class on one group than search.classes_per_group a group of
    more GPUs than that, a stage-wise class beside replica-wise ones two groups, one of >= 2
    GPUs (the pipeline takes one GPU of it, a replica class another)."""
    groups = inst.cluster.groups
    out = []
    if inst.search.idle_gpus:  # any part of a group is in the space, none of it too
        pass
    elif used_groups is not None:
        out += [f"part of group {g.name!r} (idle in this plan: the space uses a group whole or"
                " not at all without search.idle_gpus)" for i, g in enumerate(groups) if i not in used_groups]
    several = any(g.num_gpus >= 2 for g in groups)
    if several and not inst.search.idle_gpus:
        out.append("some GPUs of a used group idle (search.idle_gpus)")
    most = inst.search.classes_per_group
    if any(g.num_gpus > most for g in groups):  # room for one more class, one GPU each
        out.append(("two replica classes on one group" if most == 1
                    else f"more than {most} replica classes on one group") + " (search.classes_per_group)")
    if len(groups) >= 2 and several and not inst.search.mixed_families:
        out.append("a stage-wise class beside replica-wise classes (search.mixed_families)")
    if dualpipe_job(inst):
        out.append("the 1F1B and interleaved 1F1B schedules, and pipelines DualPipe cannot run (an"
                   " odd stage count, fewer than 2 micro-batches per stage, an odd micro-batch"
                   " count): job.pipeline_schedule is dualpipe (cost/dualpipe.schedule_problem)")
    elif inst.model.moe is not None and sum(g.num_gpus for g in groups) >= 2:
        out.append(DUALPIPE_NOT_COVERED)
    if inst.job.framework is Framework.TORCHTITAN and sum(g.num_gpus for g in groups) >= 2:
        out.append(ZERO_BUBBLE_NOT_COVERED + (ZBV_ACROSS_GROUPS if len(groups) >= 2 else ""))
    return out


def dualpipe_job(inst) -> bool:
    """Whether the job runs DeepSeek's DualPipe schedule (on one GPU type: the loaders refuse
    it on a mixed cluster): its space is the configurations DualPipe can run, each one class
    (cost/dualpipe.schedule_problem)."""
    return inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE


def _dualpipe_runs(inst, classes, micro_batch: int, v: int) -> bool:
    """Whether DualPipe runs an outer of these classes, micro-batch size and v."""
    from paraplan.cost.dualpipe import schedule_problem  # here: only a DualPipe job reads it
    c = classes[0]
    m = inst.job.global_batch // micro_batch // c.replicas
    return len(classes) == 1 and schedule_problem(c.pp, v, m) is None


# DeepSeek's schedule pairs one micro-batch's forward with another's backward so that each
# one's expert all-to-alls run under the other's compute (cost/dualpipe.py): on the bundled
# DeepSeek-V3 instance the report's own layout with it prices at 17.80 s per iteration against
# the 1F1B optimum's 21.90 s (README "Mixture of experts"), so a proof over 1F1B says nothing of
# it. The job key brings it in, in place of 1F1B (formulations/dualpipe.py).
DUALPIPE_NOT_COVERED = ("the DualPipe schedule (job.pipeline_schedule: dualpipe plans over it"
                        " instead of 1F1B, on one GPU type)")
# torchtitan's zero-bubble schedules are searched with one class or several, on any layer plan
# (zero_bubble_modes); what is left out: ZB-H2, which torch does not run
ZERO_BUBBLE_NOT_COVERED = "Qi et al.'s zero-bubble ZB-H2 schedule, which torch does not run"
ZBV_ACROSS_GROUPS = "; ZBVZeroBubble on a pipeline across node groups"


def empty_space_reason(inst: Instance) -> str:
    """Why `declared_outers(inst)` is empty: the first rule of EMPTY_SPACE_RULES, in enumeration
    order, that leaves no configuration (an empty space is never reported without its cause)."""
    if dualpipe_job(inst):
        from dataclasses import replace
        one_f_one_b = replace(inst, job=replace(inst.job, pipeline_schedule=PipelineSchedule.ONE_F_ONE_B))
        if declared_outers(one_f_one_b):
            return ("DualPipe runs none of the declared configurations: it needs an even stage count"
                    " pp >= 2, virtual_stages 1 and an even number of micro-batches per pipeline"
                    " >= 2 pp (cost/dualpipe.schedule_problem)")
        inst = one_f_one_b
    left = _Left(inst)
    return next((reason for rule in EMPTY_SPACE_RULES if (reason := rule(left))),
                "no combination of the declared values is a valid plan")


@dataclass
class _Left:
    """What the space's rules have left so far, stage by stage (EMPTY_SPACE_RULES fill it in)."""

    inst: Instance
    with_tp: list = field(default_factory=list)  # (groups used, tp per group)
    with_cp: list = field(default_factory=list)  # (groups used, tp per group, cp)
    shapes: list = field(default_factory=list)  # (tp of the first stage's group, cp, class shapes)


def _no_tp(left: _Left) -> str | None:
    inst = left.inst
    s, G = inst.search, len(inst.cluster.groups)
    subsets = [u for k in range(1, G + 1) for u in itertools.combinations(range(G), k)]
    left.with_tp = [(u, t) for u in subsets for fam in FAMILIES for t in tp_choices(inst, u, fam)]
    if left.with_tp:
        return None
    listed = f"no value of search.tp {list(s.tp)}" if s.tp is not None else "no power of two"
    where = "GPUs (in whole nodes)" if s.tp_across_nodes else "GPUs per node"
    return (f"{listed} divides the {inst.model.heads} heads and the {where} of a group"
            + ("" if s.tp_across_nodes else " (search.tp_across_nodes is false)"))


def _no_cp(left: _Left) -> str | None:
    s, m = left.inst.search, left.inst.model
    left.with_cp = [(u, t, c) for u, t in left.with_tp for c in cp_values(left.inst, u, t)]
    if left.with_cp:
        return None
    listed = f"no value of search.cp {list(s.cp)}" if s.cp is not None else "no power of two"
    return (f"{listed} divides the sequence length {m.seq_len} and a used group's GPUs left"
            " by tp" + (f", within search.max_cp {s.max_cp}" if s.max_cp is not None else ""))


def _no_pipeline_shape(left: _Left) -> str | None:
    inst = left.inst
    s, m = inst.search, inst.model
    shapes = [(t, c, sh) for u, t, c in left.with_cp for fam in FAMILIES
              for sh in class_shapes(inst, t, u, fam, c)]
    left.shapes = [(t[sh[0].stage_groups[0]], c, sh) for t, c, sh in shapes]  # tp: the first stage's
    if left.shapes:
        return None
    max_pp = s.max_pp if s.max_pp is not None else m.layers
    return ("no pipeline shape fits: every GPU of a used group must be replicas x tp x cp x"
            f" stages, with stages within {'search.pp ' + str(list(s.pp)) if s.pp else 'max_pp ' + str(max_pp)}"
            f" and the model's {m.layers} layers")


def _no_micro_batch_split(left: _Left) -> str | None:
    s, gb = left.inst.search, left.inst.job.global_batch
    mbs = s.micro_batch if s.micro_batch is not None else [
        d for d in divisors(gb) if s.max_micro_batch is None or d <= s.max_micro_batch]
    if any(gb % mb == 0 and has_micro_batch_split(sh, gb // mb) for _, _, sh in left.shapes for mb in mbs):
        return None
    return (f"no micro-batch size in {list(mbs)} splits the global batch {gb} between the"
            " replicas (micro_batch x sum of replicas x micro-batches; with several classes,"
            " every replica runs at least as many micro-batches as it has stages)")


def _no_virtual_stages(left: _Left) -> str | None:
    if any(virtual_stage_values(left.inst, sh) for _, _, sh in left.shapes):
        return None
    return (f"no value of search.virtual_stages {list(left.inst.search.virtual_stages or ())} fits a"
            f" pipeline shape: v > 1 needs every class pipelined with v x stages <= the model's"
            f" {left.inst.model.layers} layers, v dividing them")


def _no_sequence_parallel(left: _Left) -> str | None:
    sp, seq_len = left.inst.search.sequence_parallel, left.inst.model.seq_len
    if True not in sp and False not in sp:
        return "search.sequence_parallel lists no value"
    if False not in sp and not any(t > 1 and seq_len % (t * c) == 0 for t, c, _ in left.shapes):
        return ("search.sequence_parallel: [true] needs tp > 1 with tp * cp dividing seq_len,"
                " and no admissible tp is")
    return None


def _no_zero_to_shard(left: _Left) -> str | None:
    zero = left.inst.search.zero
    if 0 not in zero and all(c * sum(x.replicas for x in sh) == 1 for _, c, sh in left.shapes):
        return (f"search.zero {list(zero)} shards over replicas and context-parallel ranks,"
                " and every pipeline shape has one of each")
    return None


def _no_framework_mode(left: _Left) -> str | None:
    inst = left.inst
    s = inst.search
    rules = rules_for(inst.job.framework, inst.job.optimizer)  # the optimizer narrows ZeRO
    if any(rules.admits(tp=t, pp=c.pp, cp=cp, dp=sum(x.replicas for x in sh), sp=sp, zero=z, v=1)
           for t, cp, sh in left.shapes for c in sh for sp in s.sequence_parallel for z in s.zero):
        return None
    return (f"{inst.job.framework.value} runs none of the declared ZeRO stages"
            f" {list(s.zero)} and tp / sequence-parallel modes on these pipeline shapes"
            " (cost/framework_rules.py)")


# The space's rules in enumeration order, each narrowing what the previous left (`_Left`) and
# returning why nothing is left, or None: the first reason is the one reported.
EMPTY_SPACE_RULES = (_no_tp, _no_cp, _no_pipeline_shape, _no_micro_batch_split, _no_virtual_stages,
                     _no_sequence_parallel, _no_zero_to_shard, _no_framework_mode)


def paired_counts(inst: Instance, o: ClassOuter) -> bool:
    """Whether the expert all-to-all overlap pairs the micro-batches of o's pipeline-free
    classes (cost/moe.pairs_unpipelined_micro_batches): _count_form's `paired`."""
    return pairs_unpipelined_micro_batches(inst.job, o.ep)


def _count_form(shapes, v: int, paired: bool = False) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """_count_form_of, cached: the listing reads it for every micro-batch size and v of a shape
    (10,635 times on GPT-3 175B / 1,024 A100). A tuple of shapes (the listing gives a layout's
    classes one tuple) is kept by its identity (_COUNT_FORMS); _count_form_of by the classes'
    (replicas, depth), all it reads: hashing the shapes themselves hashed each class's stage
    groups anew on every call (up to 96 of them there)."""
    if type(shapes) is not tuple:  # a tuple (of frozen shapes) is immutable: its identity names its contents
        return _count_form_read(shapes, v, paired)
    return _COUNT_FORMS.read((id(shapes), v, paired), shapes, _count_form_read, shapes, v, paired)


def _count_form_read(shapes, v: int, paired: bool):
    """_count_form_of of the classes' (replicas, depth)."""
    return _count_form_of(tuple([(c.replicas, c.pp) for c in shapes]), v, paired)


_COUNT_FORMS = IdentityCache(65536)  # _count_form's (many instances in a test session)


@lru_cache(maxsize=65536)
def _count_form_of(degrees: tuple[tuple[int, int], ...], v: int, paired: bool = False
                   ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Of classes of (replicas, pp) `degrees`: (x, lo, step) with m_k = step_k * j_k, j_k >= lo_k
    and sum_k x_k j_k = total: plain 1F1B takes m_k >= pp_k with several classes, m >= 1 for a lone class (step 1); interleaving
    (v > 1) takes m_k a multiple of pp_k (Megatron-LM's interleaved schedule), and with several
    classes m_k >= 2 pp_k, where memory no longer depends on m_k
    (cost/class_coefficients.class_outer); a lone class's count is fixed by the batch.
    `paired` (paired_counts): the expert all-to-all overlap's combined 1F1B runs on the
    pipeline-free classes, which with several classes then take m_k >= 2, for the same reason
    (one micro-batch has no partner; its memory holds one, not two)."""
    if v == 1:
        least = 2 if paired else 1
        lo = (1,) if len(degrees) == 1 else tuple(max(pp, least) for _, pp in degrees)
        return tuple(r for r, _ in degrees), lo, (1,) * len(degrees)
    lo = 1 if len(degrees) == 1 else 2
    return tuple(r * pp for r, pp in degrees), (lo,) * len(degrees), tuple(pp for _, pp in degrees)


def _uniform_count(shapes, total: int, v: int, paired: bool = False) -> int | None:
    """The one count every replica runs in the uniform baseline, or None."""
    R = sum(c.replicas for c in shapes)
    x, lo, step = _count_form(shapes, v, paired)
    m = total // R
    if total % R or any(m % st or m < st * lk for st, lk in zip(step, lo)):
        return None
    return m


def has_micro_batch_split(shapes, total: int, uniform: bool = False, v: int = 1,
                          paired: bool = False) -> bool:
    """Whether micro_batch_vectors(shapes, total, uniform, v, paired) is non-empty, without
    listing it."""
    if uniform:
        return _uniform_count(shapes, total, v, paired) is not None
    x, lo, _ = _count_form(shapes, v, paired)
    rest = total - sum(xk * lk for xk, lk in zip(x, lo))
    return rest >= 0 and _representable(x, rest)


def count_micro_batch_splits(shapes, total: int, uniform: bool = False, v: int = 1,
                             paired: bool = False) -> int:
    """len(micro_batch_vectors(shapes, total, uniform, v, paired)), by counting, not listing."""
    if uniform:
        return int(has_micro_batch_split(shapes, total, True, v, paired))
    x, lo, _ = _count_form(shapes, v, paired)
    rest = total - sum(xk * lk for xk, lk in zip(x, lo))
    return _ways(x, rest) if rest >= 0 else 0


@lru_cache(maxsize=65536)
def _ways(x: tuple[int, ...], rest: int) -> int:
    """Number of (j_1..j_K) >= 0 with sum_k x_k j_k = rest (coin-change count)."""
    if len(x) == 1:  # one class: its count is rest / x_1, if whole
        return int(rest % x[0] == 0)
    if len(x) == 2:  # the first count fixes the second
        return sum(1 for j in range(rest // x[0] + 1) if (rest - j * x[0]) % x[1] == 0)
    ways = [1] + [0] * rest
    for xk in x:
        for v in range(xk, rest + 1):
            ways[v] += ways[v - xk]
    return ways[rest]


@lru_cache(maxsize=65536)
def _representable(x: tuple[int, ...], rest: int) -> bool:
    """rest = sum_k x_k j_k for some integers j_k >= 0 (bit i of `reach`: i is reachable).
    Adding any multiple of x_k is closed in doublings: after shifts by x_k, 2 x_k, 4 x_k, ...
    the set holds S + {0, ..., 2^i - 1} x_k, so log2(rest / x_k) shifts suffice (one shift per
    step took rest / x_k steps: minutes at a global batch of 2^24)."""
    return bool(_reachable(x, rest) >> rest & 1)


def micro_batch_vectors(shapes, total: int, uniform: bool = False, v: int = 1,
                        paired: bool = False) -> np.ndarray:
    """All (m_1, ..., m_K) with sum_k replicas_k * m_k = total, m_k >= pp_k with several
    classes (with v > 1: the multiples of pp_k; `paired`: m_k >= 2 at pp_k = 1; _count_form),
    shape (V, K)."""
    if uniform:
        m = _uniform_count(shapes, total, v, paired)
        return (np.zeros((0, len(shapes)), np.int64) if m is None
                else np.full((1, len(shapes)), m, np.int64))
    x, lo, step = _count_form(shapes, v, paired)
    out = _vectors(x, lo, total, False)
    return out if v == 1 else out * np.array(step, np.int64)


@lru_cache(maxsize=4096)
def _vectors(x: tuple[int, ...], lo: tuple[int, ...], total: int, uniform: bool) -> np.ndarray:
    K = len(x)
    if uniform:
        R = sum(x)
        if total % R or total // R < max(lo):
            return np.zeros((0, K), np.int64)
        return np.full((1, K), total // R, np.int64)
    if K == 1:
        return (np.array([[total // x[0]]], np.int64) if total % x[0] == 0 and total // x[0] >= lo[0]
                else np.zeros((0, 1), np.int64))
    # free choice of the first K-1 counts; the last is then fixed
    rest = total - sum(xk * lk for xk, lk in zip(x, lo))
    if rest < 0:
        return np.zeros((0, K), np.int64)
    ranges = [np.arange(lo[k], lo[k] + rest // x[k] + 1) for k in range(K - 1)]
    size = math.prod(len(r) for r in ranges)
    if size > MAX_MICRO_BATCH_VECTORS:
        raise ValueError(f"{size} micro-batch splits between {K} replica classes: narrow the space")
    grid = np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, K - 1)
    last = total - grid @ np.array(x[:-1])
    ok = (last % x[-1] == 0) & (last // x[-1] >= lo[-1])
    out = np.concatenate([grid[ok], (last[ok] // x[-1])[:, None]], axis=1)
    out.setflags(write=False)  # shared through the cache
    return out


@dataclass(frozen=True)
class SpaceSummary:
    """The size of the declared space: outer configurations and whole plans."""
    outer_configs: int
    plans_total: int  # outer configs x micro-batch splits x per-class layer splits and recompute


def _plans_per_shape(inst: Instance, classes, micro_batch: int, v: int, paired: bool, slots: tuple,
                     mode, uniform: bool, dual: bool, splits: dict) -> int:
    """Plans of one outer configuration without per-operator partitions: its micro-batch vectors
    x one value of the framework's recompute pattern for every class (recompute_rows) x each
    class's layer splits; `splits` caches the last per (pp, v, slots, recompute rows)."""
    L, rc = inst.model.layers, inst.search.full_recompute
    per = count_micro_batch_splits(classes, inst.job.global_batch // micro_batch, uniform, v, paired)
    rows = rc if dual else recompute_rows(rc, recompute_pattern(inst.job.framework, mode, inst.search.partial_recompute), L,
                                          L + sum(slots), v, min(c.pp for c in classes))
    per *= pattern_values(rows)
    each = False if isinstance(rows, tuple) else rows
    for c in classes:
        if (c.pp, v, slots, each) not in splits:
            splits[c.pp, v, slots, each] = count_splits(L, c.pp, v, each, uniform, slots)
        per *= splits[c.pp, v, slots, each]
    return per


def summarize(inst: Instance, outers: list[ClassOuter], uniform: bool = False) -> SpaceSummary:
    """plans_total counts, per outer configuration, its micro-batch vectors x per-class layer
    splits and recompute counts x layer-plan combinations (solver/class_partitions.py; 1
    without per-operator partitions)."""
    total = 0
    # outers differ mostly in sp, ZeRO and recompute mode, which change no count: count each
    # (class shapes, micro-batch, v) once (tens of thousands of outers on large instances);
    # declared_outers gives the outers of one shape one tuple object, so its id is the cheap key
    per_shape: dict[tuple, int] = {}
    splits: dict[tuple, int] = {}  # per class: depends on (pp, v, slots, recompute rows) only
    dual = dualpipe_job(inst)
    # read once per instance and per ep, not per outer (a Qwen3-235B space lists 167,326)
    parts = partitions_enabled(inst)
    if parts:  # imported here: the layer plans serve only a search over them (issue 33, start-up)
        from paraplan.solver.class_partitions import partition_count
    paired_of: dict[int, bool] = {}
    for o in outers:
        v = o.virtual_stages
        paired = paired_of.get(o.ep)
        if paired is None:
            paired = paired_of[o.ep] = paired_counts(inst, o)
        slots = (o.embedding_in_split, o.loss_in_split)
        key = (id(o.classes), o.micro_batch, v, paired, slots, o.recompute)
        if key not in per_shape:
            per_shape[key] = _plans_per_shape(inst, o.classes, o.micro_batch, v, paired, slots, o.recompute,
                                              uniform, dual, splits)
        total += per_shape[key] * (partition_count(inst, o) if parts else 1)
    return SpaceSummary(outer_configs=len(outers), plans_total=total)


def summarize_partials(inst: Instance, partials: list[Partial]) -> SpaceSummary:
    """summarize(inst, declared_outers(...)) read from the partial layouts' representatives
    (Partial.reps, each counted for the layouts it stands for), without listing the others."""
    return summarize_blocks(inst, [(n, blk) for part in partials for n, blks in part.reps for blk in blks])


def summarize_blocks(inst: Instance, weighted: list[tuple[int, OuterBlock]]) -> SpaceSummary:
    """summarize(inst, [the outers of `blocks`, each block `n` times]) read from the blocks'
    tallies (OuterBlock.tally), without listing the outers. With per-operator partitions each
    outer also counts its layer-plan combinations (partition_count, which reads its ZeRO stage
    and sp flag beside the block's tp per group: _partition_tally)."""
    parts = partitions_enabled(inst)
    tallied: dict = {}  # _partition_tally's
    dual = dualpipe_job(inst)
    outers = total = 0
    # the counts read each class's replicas and depth, the micro-batch count, v, whether the
    # expert all-to-all pairs micro-batches and the slots: each read once
    per_shape: dict[tuple, int] = {}
    splits: dict[tuple, int] = {}
    paired_of: dict[int, bool] = {}
    per_block: dict[tuple, tuple[int, int]] = {}  # with partitions: _partitioned_block_key's
    # without them a block's (outers, plans) read its classes' degrees, micro-batch count and
    # tally only, and the plans read the count through each count form's micro-batch vectors
    # (_count_weights): per (classes, tally) its forms, each form's vectors per block (the
    # blocks share their classes and tallies, alive through the call). With search.idle_gpus
    # each replica count of a lone class is a layout of its own: DeepSeek-V3 on 2,048 H800
    # summed 102,138 distinct (degrees, micro-batch, tally) blocks, at most two forms each
    forms: dict[tuple, tuple[int, tuple]] = {}
    gb = inst.job.global_batch
    for n, b in weighted:
        if parts:
            bk = _partitioned_block_key(b)
            got = per_block.get(bk)
            if got is None:
                got = per_block[bk] = _block_summary(inst, b, _partition_tally(inst, b, tallied), dual,
                                                     per_shape, splits, paired_of)
            outers += n * got[0]
            total += n * got[1]
            continue
        fk = (id(b.classes), id(b.tally))
        got = forms.get(fk)
        if got is None:
            got = forms[fk] = _count_weights(inst, b, dual, per_shape, splits, paired_of)
        count = gb // b.micro_batch
        outers += n * got[0]
        total += n * sum([weight * _ways(x, count - least) for x, least, weight in got[1] if count >= least])
    return SpaceSummary(outer_configs=outers, plans_total=total)


def _partitioned_block_key(b: OuterBlock) -> tuple:
    """All summarize_blocks reads of block b with per-operator partitions: as without them
    (degrees, micro-batch size, tally), plus the tp per choice that the layer-plan combinations
    read (_partition_tally). Row 3 of issue 33 (32 + 32 GPUs with partitions) summed 13,450
    blocks one by one."""
    return tuple([(c.replicas, c.pp) for c in b.classes]), b.micro_batch, id(b.tally), _choice_tps(b)


def _count_weights(inst: Instance, b: OuterBlock, dual: bool, per_shape: dict, splits: dict,
                   paired_of: dict) -> tuple[int, tuple]:
    """(outers, ((x, least, weight), ...)) of block b's classes and tally (summarize_blocks):
    its plans at a micro-batch count M are the sum of weight x _ways(x, M - least) over the
    count forms (x, least) with least <= M, as count_micro_batch_splits counts each (v,
    paired)'s vectors (x, lo = _count_form, least = sum_k x_k lo_k) times its tally weight
    (_tally_weights): the (v, paired) of one form summed into one weight (a lone class has two:
    v = 1 and interleaved; paired reads only several classes). Integer sums, so regrouping
    _block_summary's per-outer products changes no digit. Kept per (degrees, tally)."""
    degrees = tuple([(c.replicas, c.pp) for c in b.classes])
    fk = ("forms", degrees, id(b.tally))  # the tally is alive through summarize_blocks' call
    got = per_shape.get(fk)
    if got is None:
        wk = _weights_key(degrees, b)  # read once per what the weights read
        if wk not in per_shape:
            per_shape[wk] = _tally_weights(inst, b, dual, splits, paired_of)
        outers, weights = per_shape[wk]
        merged: dict[tuple, int] = {}
        for (v, paired), weight in weights.items():
            x, lo, _ = _count_form_of(degrees, v, paired)
            form = (x, sum(xk * lk for xk, lk in zip(x, lo)))
            merged[form] = merged.get(form, 0) + weight
        got = per_shape[fk] = (outers, tuple((x, least, w) for (x, least), w in merged.items()))
    return got


def _weights_key(degrees: tuple, b: OuterBlock) -> tuple:
    """All _tally_weights reads of block b: its classes' depths and its tally (alive through
    summarize_blocks' call). With search.idle_gpus each replica count of a lone class is a
    layout of its own: DeepSeek-V3 on 2,048 H800 read 9,099 (degrees, tally) pairs, 1,866
    (depths, tally)."""
    return "weights", tuple([pp for _, pp in degrees]), id(b.tally)


def _tally_weights(inst: Instance, b: OuterBlock, dual: bool, splits: dict, paired_of: dict) -> tuple[int, dict]:
    """Of block b's tally and classes: its outers, and per (v, paired) the sum over its outers
    there of one value of the recompute pattern per class x each class's layer splits
    (_plans_per_shape's factors but the micro-batch vectors)."""
    L, rc = inst.model.layers, inst.search.full_recompute
    pp_min = min(c.pp for c in b.classes)
    outers, weights = 0, {}
    for (v, ep, emb, loss, mode), count in b.tally.counts.items():
        outers += count
        if ep not in paired_of:
            paired_of[ep] = pairs_unpipelined_micro_batches(inst.job, ep)
        slots = (emb, loss)
        rows = rc if dual else recompute_rows(rc, recompute_pattern(inst.job.framework, mode, inst.search.partial_recompute),
                                              L, L + sum(slots), v, pp_min)
        per = count * pattern_values(rows)
        each = False if isinstance(rows, tuple) else rows
        for c in b.classes:
            if (c.pp, v, slots, each) not in splits:
                splits[c.pp, v, slots, each] = count_splits(L, c.pp, v, each, False, slots)
            per *= splits[c.pp, v, slots, each]
        weights[v, paired_of[ep]] = weights.get((v, paired_of[ep]), 0) + per
    return outers, weights


def _block_summary(inst: Instance, b: OuterBlock, combos: dict, dual: bool, per_shape: dict, splits: dict,
                   paired_of: dict) -> tuple[int, int]:
    """(outers, plans) of block b once (summarize_blocks), `combos` its (outer, layer plans)
    pairs per tally key; the memos summarize_blocks' own."""
    degrees = tuple((c.replicas, c.pp) for c in b.classes)
    outers = total = 0
    for (v, ep, emb, loss, mode), count in b.tally.counts.items():
        outers += count
        if ep not in paired_of:
            paired_of[ep] = pairs_unpipelined_micro_batches(inst.job, ep)
        paired = paired_of[ep]
        key = (degrees, b.micro_batch, v, paired, emb, loss, mode)
        per = per_shape.get(key)
        if per is None:
            per = per_shape[key] = _plans_per_shape(inst, b.classes, b.micro_batch, v, paired, (emb, loss),
                                                    mode, False, dual, splits)
        total += combos[v, ep, emb, loss, mode] * per
    return outers, total


def _partition_tally(inst: Instance, b: OuterBlock, memo: dict) -> dict:
    """Tally.counts of block b with each outer counted as its layer-plan combinations
    (partition_count): the block fixes the tp of each (class, group) choice, and the count reads
    beside it only the outer's ZeRO stage and sp flag, so one outer is built per (tp per
    choice, ZeRO, sp) of the blocks (`memo`), the first specs() lists with them (Tally.per_mode:
    of a mode listed twice, only the first that lists some outer has a first spec), and each
    mode's counts are weighted by it."""
    from paraplan.solver.class_partitions import partition_count  # layer plans only (issue 33)
    tps = _choice_tps(b)
    out: dict[tuple, int] = {}
    for sp, zero, first, counts in b.tally.per_mode:
        pc = memo.get((tps, zero, sp))
        if pc is None:
            pc = memo[tps, zero, sp] = partition_count(inst, b.outer(*first))
        for key, n in counts.items():
            out[key] = out.get(key, 0) + n * pc
    return out


def _choice_tps(b: OuterBlock) -> tuple:
    """The tp of each (class, group) choice of block b: all partition_count reads of the block
    beside an outer's ZeRO stage and sp flag (_partition_tally)."""
    return tuple(b.tp_of(g) for c in b.classes for g in sorted(set(c.stage_groups)))


def one_group_outers(inst: Instance) -> list[Outer]:
    """The declared space of a homogeneous instance (its one-group class space, searched as
    solver/solve.py plans it), each configuration as the Outer that prices it
    (cost/class_coefficients.class_outer, the lone class at the count the batch gives it)."""
    gb = inst.job.global_batch
    return [class_outer(o, 0, gb // o.micro_batch // o.classes[0].replicas)
            for o in declared_outers(inst, uniform=inst.search.uniform_split)]


def one_group_summary(inst: Instance) -> SpaceSummary:
    """The size of a homogeneous instance's declared space (summarize of its one-group class
    space: outer configurations, and plans: outer configurations x splits x recompute counts x
    layer plans)."""
    uniform = inst.search.uniform_split
    return summarize(inst, declared_outers(inst, uniform=uniform), uniform)
