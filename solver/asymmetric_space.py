"""The declared space of asymmetric pipelines (search.asymmetric_pipelines; cost/asymmetric.py).

An asymmetric pipeline passes through two node groups or more, each used whole, its stages on
each group in one block (every order of the groups is listed), as the stage family's pipelines
do (solver/class_layouts.stage_shapes); but each stage s takes its own data-parallel degree d_s
of its group's tp: the degrees of the k_g stages on group g are an ordered composition of
gpus_g / tp_g into k_g positive parts, where the stage family gives each the same part. Every
d_s divides the global batch's micro-batches (each of stage s's ranks runs M / d_s of them).

The modes (micro-batch size, sequence parallelism, selective recompute, ZeRO stage) and the tp
per group are those the declared space lists for the stage family's pipelines of >= 2 stages
on the same groups (solver/space.declared_outers: the job framework's rules, the tp and ZeRO
rules), restricted to what cost/asymmetric.py prices: cp 1, v 1, no zero-bubble schedule, no
embedding / loss slot. Symmetric layouts (every d_s equal) are listed too: the space holds
those stage-family pipelines, so its optimum is never worse than theirs.
"""

from __future__ import annotations

import itertools
import math

from paraplan.cost.asymmetric import pipeline, refusal
from paraplan.cost.plan_specs import ClassOuter
from paraplan.cost.framework_rules import recompute_pattern
from paraplan.cost.recompute_patterns import RecomputePattern, options, parameter_count
from paraplan.cost.specs import Instance
from paraplan.solver.class_layouts import pp_allowed
from paraplan.solver.space import declared_outers

import numpy as np


def _priced_here(o) -> bool:
    """Whether a stage-family outer's modes are ones cost/asymmetric.py prices."""
    return (len(o.classes) == 1 and o.classes[0].pp >= 2 and o.cp == 1 and o.virtual_stages == 1
            and o.zero_bubble is None and o.ep == 1 and o.etp is None
            and not o.embedding_in_split and not o.loss_in_split
            and len(set(o.classes[0].stage_groups)) >= 2)


def _modes(inst: Instance) -> dict:
    """{(groups used, tp per group): [(micro_batch, sp, recompute, zero), ...]} in the order the
    declared space lists them."""
    out: dict = {}
    for o in declared_outers(inst, families=("stage",)):
        if not _priced_here(o):
            continue
        used = tuple(sorted(set(o.classes[0].stage_groups)))
        key = (used, tuple((g, o.tp_of(g)) for g in used))
        mode = (o.micro_batch, o.sequence_parallel, o.recompute, o.zero)
        seen = out.setdefault(key, [])
        if mode not in seen:
            seen.append(mode)
    return out


def _degree_splits(units: int, k: int):
    """Ordered compositions of `units` into k positive parts, lexicographic."""
    for cut in itertools.combinations(range(1, units), k - 1):
        yield tuple(b - a for a, b in zip((0,) + cut, cut + (units,)))


def _layouts(inst: Instance, used: tuple[int, ...], tpg: dict[int, int]):
    """(stage_groups, stage_dp) of every asymmetric pipeline on the groups `used`, whole."""
    units = _units(inst, used, tpg)
    for counts in _stage_counts(inst, units):
        for order in itertools.permutations(range(len(used))):
            groups = tuple(g for i in order for g in [used[i]] * counts[i])
            for parts in itertools.product(*[_degree_splits(units[i], counts[i]) for i in order]):
                yield groups, tuple(d for p in parts for d in p)


def _units(inst: Instance, used: tuple[int, ...], tpg: dict[int, int]) -> list[int]:
    return [inst.cluster.groups[g].num_gpus // tpg[g] for g in used]


def _stage_counts(inst: Instance, units: list[int]):
    """Per group, how many stages it hosts (each >= 1 rank), within the pp rule."""
    for counts in itertools.product(*[range(1, min(u, inst.model.layers) + 1) for u in units]):
        if pp_allowed(inst, sum(counts)):
            yield counts


def count_outers(inst: Instance) -> tuple[int, int]:
    """(pipelines, (split, recompute-free) rows) asymmetric_outers would list, before the
    batch-divisibility rule, counted without listing: per stage-count vector, every group
    order times each group's ordered degree splits C(u_g - 1, k_g - 1), times the modes; each
    pipeline's layer splits C(L - 1, pp - 1)."""
    L, outers, rows = inst.model.layers, 0, 0
    for (used, gtp), modes in _modes(inst).items():
        units = _units(inst, used, dict(gtp))
        for counts in _stage_counts(inst, units):
            n = (math.factorial(len(used)) * len(modes)
                 * math.prod(math.comb(u - 1, k - 1) for u, k in zip(units, counts)))
            outers += n
            rows += n * math.comb(L - 1, sum(counts) - 1)
    return outers, rows


def asymmetric_outers(inst: Instance) -> list[ClassOuter]:
    """Every asymmetric pipeline of the declared space (module docstring), in a fixed order
    (groups and tp in declared order, stage counts, group orders, degrees, modes) that also
    breaks ties."""
    out = []
    for (used, gtp), modes in _modes(inst).items():
        tpg = dict(gtp)
        tp = tpg[used[0]]
        group_tp = gtp if len(set(tpg.values())) > 1 else ()
        for groups, dps in _layouts(inst, used, tpg):
            for mb, sp, rc, z in modes:
                ao = pipeline(stage_groups=groups, stage_dp=dps, tp=tp, group_tp=group_tp,
                                     micro_batch=mb, sequence_parallel=sp, recompute=rc, zero=z)
                if refusal(inst, ao) is None:
                    out.append(ao)
    return out


def recompute_choices(inst: Instance, ao: ClassOuter):
    """(pattern, values): the per-stage recompute counts the job's framework runs on `ao`,
    as the declared space lists them (space.recompute_rows at v 1): None (no full recompute:
    r = 0), PER_STAGE (every count 0..n_s on each stage), or a pattern and its P parameter
    values, value i giving every stage r_s = values[i][n_s] (v 1, no slot: a stage's count
    depends on its own layers alone)."""
    if not inst.search.full_recompute:
        return None, None
    pattern = recompute_pattern(inst.job.framework, ao.recompute, inst.search.partial_recompute)
    if pattern is RecomputePattern.PER_STAGE:
        return pattern, None
    top = inst.model.layers - ao.classes[0].pp + 1  # the most layers a stage can hold
    ns = np.arange(top + 1, dtype=np.int64).reshape(-1, 1)  # each n as a one-stage split
    table = options(pattern, ns, 1, False, False, top, top)[:, :, 0]  # (P, top + 1)
    assert table.shape[0] == parameter_count(pattern, top, top)
    return pattern, table
