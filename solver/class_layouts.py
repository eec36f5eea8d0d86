"""The class layouts of the mixed-cluster space: which replica classes (ClassShape: replicas and
the groups their stages run on) a plan over a set of node groups may run, for a tp per group and
a cp, family by family; and how many there are, counted without listing them, so that a space
too large to plan is refused before it is listed (check_layouts). The rules are the module
docstring of solver/space.py, which builds the outer configurations on these layouts."""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from paraplan.cost.errors import InstanceError
from paraplan.cost.specs import Instance
from paraplan.cost.plan_specs import ClassShape
from paraplan.cost.space_rules import cp_problem, group_tp_problem
from paraplan.cost.specs import Attention

FAMILIES = ("stage", "replica", "mixed")  # "mixed" lists nothing without search.mixed_families


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _powers_of_two(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out



def tp_values(inst: Instance, used: tuple[int, ...]) -> list[int]:
    """One tp for every group used: each group's rule (cost/space_rules.group_tp_problem, the
    homogeneous one plus whole nodes across nodes) on each of them."""
    m, s = inst.model, inst.search
    clusters = [inst.cluster.groups[g] for g in used]
    limit = min(c.num_gpus if s.tp_across_nodes else c.domain_gpus for c in clusters)
    vals = s.tp if s.tp is not None else _powers_of_two(limit)
    return [t for t in vals
            if all(group_tp_problem(t, m, c, s.tp_across_nodes) is None for c in clusters)]


def tp_choices(inst: Instance, used: tuple[int, ...], family: str) -> list[dict[int, int]]:
    """The tensor-parallel degrees of the groups `used`, as {group: tp}: one tp for every group
    (tp_values), or, for one class across several groups (the stage family) with
    search.tp_per_group, each group's own (each group's tp_values, every combination)."""
    if family != "stage" or len(used) == 1 or not inst.search.tp_per_group:
        return [dict.fromkeys(used, t) for t in tp_values(inst, used)]
    per = [tp_values(inst, (g,)) for g in used]
    return [dict(zip(used, ts)) for ts in itertools.product(*per)]


def cp_values(inst: Instance, used: tuple[int, ...], tpg: dict[int, int]) -> list[int]:
    """One cp for every group used: search.cp's values, or powers of two, each dividing seq_len
    and every used group's GPUs left by its tp (`tpg`: group -> tp; cost/space_rules.cp_problem,
    the homogeneous rule)."""
    s = inst.search
    gpus = [inst.cluster.groups[g].num_gpus // tpg[g] for g in used]
    vals = s.cp if s.cp is not None else _powers_of_two(max(min(gpus), 1))
    flash = inst.job.attention is Attention.FLASH
    return [c for c in vals if all(cp_problem(c, inst.model, n, s.max_cp, flash) is None for n in gpus)]


def pp_allowed(inst: Instance, pp: int) -> bool:
    """The homogeneous pp rule (cost/space_rules.pp_problem): at most one stage per layer,
    within search.max_pp and search.pp (no other cap, as on one group)."""
    s = inst.search
    max_pp = s.max_pp if s.max_pp is not None else inst.model.layers
    return 1 <= pp <= min(inst.model.layers, max_pp) and (s.pp is None or pp in s.pp)


def class_shapes(inst: Instance, tpg: dict[int, int], used: tuple[int, ...], family: str,
                 cp: int = 1):
    """(family, shapes) for the groups `used`, in a fixed order; a stage of a replica on group g
    is tpg[g] * cp GPUs (`units` below)."""
    gpus = [inst.cluster.groups[g].num_gpus for g in used]
    units = [tpg[g] * cp for g in used]
    idle = inst.search.idle_gpus
    if family == "stage":
        for dp in _stage_replicas(gpus, units, idle):
            yield from stage_shapes(inst, tpg, used, cp, dp)
    elif family == "replica" and (len(used) >= 2 or inst.search.classes_per_group > 1):
        for _, shapes in replica_shapes(inst, tpg, used, cp):
            yield shapes
    elif family == "mixed" and inst.search.mixed_families:
        yield from _mixed_shapes(inst, used, gpus, units)


def replica_options(inst: Instance, tpg: dict[int, int], used: tuple[int, ...], cp: int) -> list[list[tuple]]:
    """The replica family's classes per group used: each group's ways (group_shares) to host
    its classes, as tuples of ClassShape; a layout takes one of each group's."""
    idle, most = inst.search.idle_gpus, inst.search.classes_per_group
    options = []
    for g in used:
        x, u = inst.cluster.groups[g].num_gpus, tpg[g] * cp
        options.append([tuple(ClassShape(replicas=r, stage_groups=(g,) * pp) for pp, r in shares)
                        for shares in group_shares(x // u, _replica_pps(inst, x, u, idle), most, exact=not idle)])
    return options


def replica_shapes(inst: Instance, tpg: dict[int, int], used: tuple[int, ...], cp: int):
    """(index, shapes) of the replica family's layouts on the groups `used`, in class_shapes'
    order; the index is the layout's place in the product of replica_options (increasing)."""
    options = replica_options(inst, tpg, used, cp)
    for index, combo in enumerate(itertools.product(*options)):
        shapes = tuple(c for group in combo for c in group)
        if len(shapes) >= 2:  # one class on one group: the stage family's plan
            yield index, shapes


def stage_replicas(inst: Instance, tpg: dict[int, int], used: tuple[int, ...], cp: int) -> list[int]:
    """The stage family's replica counts on the groups `used` (class_shapes' outer loop)."""
    return _stage_replicas([inst.cluster.groups[g].num_gpus for g in used], [tpg[g] * cp for g in used],
                           inst.search.idle_gpus)


def _stage_count_vectors(inst: Instance, tpg: dict[int, int], used: tuple[int, ...], cp: int, dp: int):
    gpus = [inst.cluster.groups[g].num_gpus for g in used]
    units = [tpg[g] * cp for g in used]
    for counts in itertools.product(*_stage_counts(inst, gpus, units, dp, inst.search.idle_gpus)):
        if pp_allowed(inst, sum(counts)):
            yield counts


def stage_shapes(inst: Instance, tpg: dict[int, int], used: tuple[int, ...], cp: int, dp: int):
    """The stage family's layouts of dp replicas on the groups `used`, in class_shapes' order:
    per stage-count vector, every order of the groups."""
    for counts in _stage_count_vectors(inst, tpg, used, cp, dp):
        for order in itertools.permutations(range(len(used))):
            groups = tuple(g for i in order for g in [used[i]] * counts[i])
            yield (ClassShape(replicas=dp, stage_groups=groups),)


def stage_representatives(inst: Instance, tpg: dict[int, int], used: tuple[int, ...], cp: int, dp: int):
    """(orders, shapes): of stage_shapes, per stage-count vector one order per last group, the
    other groups in index order before it, standing for the (k - 1)! orders of k groups that
    end on that group."""
    k = len(used)
    for counts in _stage_count_vectors(inst, tpg, used, cp, dp):
        for g in range(k):
            order = [i for i in range(k) if i != g] + [g]
            groups = tuple(x for i in order for x in [used[i]] * counts[i])
            yield math.factorial(k - 1), (ClassShape(replicas=dp, stage_groups=groups),)


def _mixed_shapes(inst: Instance, used: tuple[int, ...], gpus: list[int], units: list[int]):
    """The mixed family on the groups `used`: a stage-wise class of dp replicas across a subset
    S of them (>= 2 groups, c_g stages on g, every order of S), then replica classes filling
    what it leaves of each used group (group_shares; with search.idle_gpus at most that), at
    least one replica class, and every group of `used` hosting a class."""
    idle, most = inst.search.idle_gpus, inst.search.classes_per_group
    if not idle and any(x % u for x, u in zip(gpus, units)):
        return  # GPUs no stage can take: idle, which only search.idle_gpus allows
    slots = dict(zip(used, (x // u for x, u in zip(gpus, units))))
    pps = {g: _replica_pps(inst, x, u, True) for g, x, u in zip(used, gpus, units)}

    def fill(g: int, left: int, optional: bool) -> list[tuple]:
        """Replica classes on what is left of group g: () for none where allowed."""
        opts = [()] if optional and (left == 0 or idle) else []
        if left:
            opts += [tuple(ClassShape(replicas=r, stage_groups=(g,) * pp) for pp, r in shares)
                     for shares in group_shares(left, [p for p in pps[g] if p <= left], most, exact=not idle)]
        return opts

    for k in range(2, len(used) + 1):
        for S in itertools.combinations(used, k):
            rest = [g for g in used if g not in S]
            for dp in range(1, min(slots[g] for g in S) + 1):
                for counts in itertools.product(*(range(1, min(slots[g] // dp, inst.model.layers) + 1) for g in S)):
                    if not pp_allowed(inst, sum(counts)):
                        continue
                    left = dict(zip(S, (slots[g] - dp * c for g, c in zip(S, counts))))
                    options = [fill(g, left[g], True) for g in S] + [fill(g, slots[g], False) for g in rest]
                    for combo in itertools.product(*options):
                        replicas = tuple(c for group in combo for c in group)
                        if not replicas:
                            continue
                        for order in itertools.permutations(range(k)):
                            stages = tuple(g for i in order for g in [S[i]] * counts[i])
                            yield (ClassShape(replicas=dp, stage_groups=stages),) + replicas


def mixed_layouts(inst: Instance, stop: int | None = None) -> int:
    """len of the mixed family's listing (_mixed_shapes) over every group subset, tp and cp,
    counted without listing: per subset S and dp a polynomial in the pipeline depth whose
    coefficients count the replica classes each stage count leaves room for."""
    if not inst.search.mixed_families:
        return 0
    idle, most = inst.search.idle_gpus, inst.search.classes_per_group
    G, total = len(inst.cluster.groups), 0
    for used in (u for k in range(2, G + 1) for u in itertools.combinations(range(G), k)):
        for tpg in tp_choices(inst, used, "mixed"):
            for cp in cp_values(inst, used, tpg):
                if not idle and any(inst.cluster.groups[g].num_gpus % (tpg[g] * cp) for g in used):
                    continue
                slots = {g: inst.cluster.groups[g].num_gpus // (tpg[g] * cp) for g in used}
                pps = {g: tuple(_replica_pps(inst, inst.cluster.groups[g].num_gpus, tpg[g] * cp, True))
                       for g in used}

                def some(g: int, left: int) -> int:  # layouts of >= 1 replica class on `left`
                    return _share_count(left, tuple(p for p in pps[g] if p <= left), most, not idle) if left else 0

                def none(left: int) -> int:  # 1 where the group may host no replica class
                    return 1 if left == 0 or idle else 0
                for k in range(2, len(used) + 1):
                    for S in itertools.combinations(used, k):
                        rest = 1
                        for g in used:
                            if g not in S:
                                rest *= some(g, slots[g])
                        for dp in range(1, min(slots[g] for g in S) + 1):
                            every = np.ones(1, dtype=object)
                            empty = np.ones(1, dtype=object)  # no replica class anywhere
                            for g in S:
                                top = min(slots[g] // dp, inst.model.layers)
                                a = np.zeros(top + 1, dtype=object)
                                e = np.zeros(top + 1, dtype=object)
                                for c in range(1, top + 1):
                                    left = slots[g] - dp * c
                                    a[c], e[c] = none(left) + some(g, left), none(left)
                                every, empty = np.convolve(every, a), np.convolve(empty, e)
                            whole = len(S) == len(used)  # else `rest` holds >= 1 class
                            n = sum(int(every[pp]) * rest - (int(empty[pp]) if whole else 0)
                                    for pp in range(len(every)) if pp_allowed(inst, pp))
                            total += n * math.factorial(k)
                            if stop is not None and total > stop:
                                return total
    return total


def _stage_replicas(gpus: list[int], units: list[int], idle: bool) -> list[int]:
    """The stage family's replica counts dp: dividing every used group's stage slots (GPUs /
    units), or with search.idle_gpus any dp that leaves each group a stage."""
    if idle:
        return list(range(1, min(x // u for x, u in zip(gpus, units)) + 1))
    if any(x % u for x, u in zip(gpus, units)):
        return []
    return divisors(math.gcd(*(x // u for x, u in zip(gpus, units))))


def _stage_counts(inst: Instance, gpus: list[int], units: list[int], dp: int,
                  idle: bool) -> list[range]:
    """Per used group, its stage counts c_g with dp replicas: the group's slots exactly, or with
    search.idle_gpus 1 to as many as fit (within the layers: pp <= layers)."""
    if not idle:
        return [range(x // (dp * u), x // (dp * u) + 1) for x, u in zip(gpus, units)]
    return [range(1, min(x // (dp * u), inst.model.layers) + 1) for x, u in zip(gpus, units)]


def _replica_pps(inst: Instance, x: int, u: int, idle: bool) -> list[int]:
    """The pipeline depths of a replica class on a group of x GPUs, u per stage."""
    if x % u and not idle:
        return []
    return [pp for pp in range(1, x // u + 1) if pp_allowed(inst, pp)]


def space_layouts(inst: Instance, stop: int | None = None) -> int:
    """How many class layouts the space lists (every group subset, tp and cp, before
    micro-batch sizes and modes multiply them): what search.classes_per_group > 1,
    search.idle_gpus and search.mixed_families make grow, counted without listing them; `stop`: return as soon as the
    count passes it."""
    total = replica_layouts(inst, stop) + mixed_layouts(inst, stop)
    if stop is not None and total > stop:
        return total
    G, idle = len(inst.cluster.groups), inst.search.idle_gpus
    for used in (u for k in range(1, G + 1) for u in itertools.combinations(range(G), k)):
        for tpg in tp_choices(inst, used, "stage"):
            for cp in cp_values(inst, used, tpg):
                gpus = [inst.cluster.groups[g].num_gpus for g in used]
                units = [tpg[g] * cp for g in used]
                for dp in _stage_replicas(gpus, units, idle):
                    # count vectors by their sum (the pipeline depth): a polynomial product
                    ways = np.ones(1, dtype=np.int64)
                    for r in _stage_counts(inst, gpus, units, dp, idle):
                        step = np.zeros(r.stop, dtype=np.int64)
                        step[r.start:] = 1
                        ways = np.convolve(ways, step)
                    ok = sum(int(n) for pp, n in enumerate(ways) if n and pp_allowed(inst, pp))
                    total += ok * math.factorial(len(used))
                    if stop is not None and total > stop:
                        return total
    return total


def replica_layouts(inst: Instance, stop: int | None = None) -> int:
    """How many replica-family class layouts the space lists (every group subset, tp and cp,
    before micro-batch sizes and modes multiply them): what search.classes_per_group > 1 makes
    grow, counted without listing them; `stop`: return as soon as the count passes it."""
    G, most, idle = len(inst.cluster.groups), inst.search.classes_per_group, inst.search.idle_gpus
    total = 0
    for used in (u for k in range(1, G + 1) for u in itertools.combinations(range(G), k)):
        if len(used) < 2 and most < 2:
            continue
        for tpg in tp_choices(inst, used, "replica"):
            for cp in cp_values(inst, used, tpg):
                n = 1
                for g in used:
                    x, u = inst.cluster.groups[g].num_gpus, tpg[g] * cp
                    pps = _replica_pps(inst, x, u, idle)
                    n *= _share_count(x // u, tuple(pps), most, not idle)
                if len(used) == 1:  # a lone class (the stage family's plan): not listed
                    n -= sum(((x // u) // pp if idle else (x // u) % pp == 0) for pp in pps)
                total += n
                if stop is not None and total > stop:
                    return total
    return total


@lru_cache(maxsize=4096)
def _share_count(units: int, pps: tuple[int, ...], most: int, exact: bool = True) -> int:
    """len(group_shares(units, pps, most, exact)), counted without listing: the multisets of 1
    to `most` (pp, replicas) pairs with sum pp * replicas = units (or <= units). ways[k, t]:
    multisets of k pairs of weight t; adding each pair in turn, any number of times (k
    ascending reuses it)."""
    ways = np.zeros((most + 1, units + 1), dtype=np.int64)
    ways[0, 0] = 1
    for pp in pps:
        for r in range(1, units // pp + 1):
            w = pp * r
            for k in range(1, most + 1):
                ways[k, w:] += ways[k - 1, :units + 1 - w]
    return int(ways[1:, units].sum() if exact else ways[1:, 1:].sum())


# Above this many class layouts (space_layouts of a space listed whole, or those a search sets
# up under the bound, solver/option_families.py) the enumeration alone takes minutes and the
# planner's outer configurations run to millions: measured on 32 A100 + 32 H100 with
# classes_per_group 2, 57,518 layouts -> 259,240 outer configurations, planned in 15 s on 2
# cores; with 3, 7.5 million layouts.
MAX_LAYOUTS = 100_000


def grown_by(inst: Instance) -> dict[str, str]:
    """The options on that grow the class layouts, each with how to turn it back."""
    s = inst.search
    return {name: undo for name, on, undo in (
        ("classes_per_group", s.classes_per_group > 1, "lower classes_per_group"),
        ("idle_gpus", s.idle_gpus, "set idle_gpus false"),
        ("mixed_families", s.mixed_families, "set mixed_families false")) if on}


def too_many_layouts(inst: Instance, what: str) -> InstanceError:
    """The refusal of a space whose class layouts to list (`what` says which) pass MAX_LAYOUTS,
    naming the options that grow them and how to narrow the space."""
    grown = grown_by(inst)
    names = " and ".join(f"search.{k}" for k in grown) or "search"
    return InstanceError(inst.source, names, f"{what} more than {MAX_LAYOUTS:,} class layouts, the most"
                         " this planner lists", f"{' or '.join(grown.values())}, or narrow search.tp,"
                         " search.pp or search.max_pp")


def check_layouts(inst: Instance) -> None:
    """Refuse, before listing it, a space listed whole (space.declared_outers) that
    search.classes_per_group, search.idle_gpus or search.mixed_families makes too large to
    plan. A search that lists the space a partial layout at a time (per-operator partitions
    included, issue 33) sets the options' layouts up under a bound instead
    (solver/option_families.py), which refuses only past MAX_LAYOUTS set up; the refusal here
    stays for the spaces no bound before listing reads (search._lists_partials: MoE, DualPipe,
    torch's zero-bubble schedules, the uniform split, --top and a running plan), which would
    otherwise list every layout."""
    if grown_by(inst) and space_layouts(inst, stop=MAX_LAYOUTS) > MAX_LAYOUTS:
        raise too_many_layouts(inst, "the space grows to")


def group_shares(units: int, pps: list[int], most: int,
                 exact: bool = True) -> list[tuple[tuple[int, int], ...]]:
    """Every way to fill a group of `units` stage slots (GPUs / (tp * cp)) with 1 to `most`
    replica classes of its own: ((pp, replicas), ...) with sum pp * replicas = units (with
    `exact` False, <= units: search.idle_gpus), pp from `pps`, in non-decreasing order (classes
    on one group are interchangeable: one order each; two classes of one shape stay distinct,
    as they may run different micro-batch counts)."""
    return list(_shares(units, tuple(pps), most, exact))


@lru_cache(maxsize=4096)
def _shares(units: int, pps: tuple[int, ...], most: int, exact: bool) -> tuple:
    out = []

    def fill(left: int, start: tuple[int, int], shares: tuple) -> None:
        if shares and (left == 0 or not exact):
            out.append(shares)
        if left == 0 or len(shares) == most:
            return
        last = exact and len(shares) + 1 == most  # the last class must take what is left
        for pp in pps:
            if pp < start[0]:  # (pp, r) >= start for no r
                continue
            first = start[1] if pp == start[0] else 1
            # with the last class the one r that empties the group, not every r tried (issue 33:
            # GPT-3 175B / 1,024 A100 with classes_per_group 2 spent 43 s of CPU here)
            rs = ((left // pp,) if left % pp == 0 else ()) if last else range(1, left // pp + 1)
            for r in rs:
                if r >= first:
                    fill(left - pp * r, (pp, r), shares + ((pp, r),))
    fill(units, (0, 0), ())
    return tuple(out)
