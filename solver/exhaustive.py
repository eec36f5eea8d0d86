"""Exhaustive search over the declared space: every outer configuration, every layer-plan
combination (with per-operator partitions: every plan on every class and group, no dominance),
every micro-batch vector, every layer split (in multiples of the virtual stages) and every
per-stage count of fully recomputed layers of every replica class, evaluated with the
vectorised simulator (cost/schedule.py), no pruning of any kind: the brute-force check of the
planner's optimality proofs. It shares solver/space.py with the planner, so its optimum
is the one the planner must match; a homogeneous instance is searched as a one-group cluster
(`exhaustive`), whose space is the homogeneous one.

Per class, all (split, recompute) rows are evaluated at once with numpy on every scenario
(slowest stage, sum of stages, slowest sync, fits), stored stage-major with the sync priced
once per split (_Rows); classes are then combined by brute force
over the product of their feasible rows and the micro-batch vectors. A lone class (every
homogeneous instance) is evaluated in blocks of about ROW_BLOCK rows instead, its best row
per micro-batch vector kept across blocks in row order: the same rows, values and first
minimum as all at once, in bounded memory (one class shape of the 64-GPU x 17-layer ladder
rung has tens of millions of rows).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from paraplan.cost import asymmetric, recompute_patterns, schedule
from paraplan.cost.framework_rules import recompute_pattern
from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.plan_specs import Plan
from paraplan.cost.errors import ConfigError
from paraplan.cost.specs import Instance
from paraplan.cost.pipeline_split import slot_offsets
from paraplan.cost.trust import FILL_REL_TOL, memory_fill_caps, objective_factor_of
from paraplan.solver import memory_tiers
from paraplan.solver.asymmetric_space import asymmetric_outers
from paraplan.solver.bounds.one_class import slots_of
from paraplan.solver.class_partitions import all_partitions
from paraplan.solver.search import (_plan_of, dualpipe_problem, placer, plan_time_s, priced_for, problem_of,
                                    scenario_weights)
from paraplan.solver.space import (count_splits, dualpipe_job, declared_outers, micro_batch_vectors,
                                   pattern_values, recompute_rows, summarize)

DEFAULT_MAX_CANDIDATES = 20_000_000
# (split, recompute) rows of a lone class evaluated at a time
ROW_BLOCK = 1_000_000
# lone classes of one shape evaluated together, each block of rows built once for all of them
LONE_CHUNK = 64
# splits listed at a time where a class shape has more than ROW_BLOCK rows (_composition_blocks):
# about 0.1 s of listing between two looks at the clock
STREAM_SPLITS = 1 << 16
# measured on the 2-core reference machine: candidates evaluated per second (for estimates)
ESTIMATED_RATE_PER_S = 3_000_000


class SpaceTooLarge(ValueError):
    pass


@dataclass
class ExhaustiveResult:
    """Brute force's answer on every instance kind (a flat one searched as its one group)."""

    plan: Plan | None
    objective_s: float | None  # the plan's time (SolveResult.objective_s)
    candidates: int
    outer_configs: int
    wall_time_s: float
    feasible: int = 0  # candidates that fit memory
    complete: bool = True  # False: the time limit stopped it; the plan is only the best seen
    quantile_s: float | None = None  # what was minimised (SolveResult.quantile_s)

    @property
    def iter_time_s(self) -> float | None:
        """The plan's time, as SolveResult.iter_time_s names it."""
        return self.objective_s


@lru_cache(maxsize=256)
def compositions(layers: int, pp: int, v: int, slots: tuple[bool, bool] = (False, False)) -> np.ndarray:
    """All splits of `layers` into pp positive multiples of v, shape (K, pp), lexicographic;
    with `slots` (the embedding / loss counted as a layer slot), of layers + slots into
    multiples of v, less the first / last stage's slot (cost/pipeline_split.slot_offsets):
    _composition_blocks's splits in one array."""
    return np.vstack([np.zeros((0, pp)), *_composition_blocks(layers, pp, v, sys.maxsize, slots)])


def _composition_blocks(layers: int, pp: int, v: int, block: int, slots: tuple[bool, bool] = (False, False)):
    """compositions(layers, pp, v) in consecutive blocks of at most `block` splits, in the same
    order, each listed when it is read: DeepSeek-V3's 61 layers on 16 stages have ~5e13 splits,
    which compositions() built whole, past any time limit (exhaustive --time-limit-s 2 ran > 120 s)."""
    chunks = (layers + sum(slots)) // v
    off = np.array(slot_offsets(pp, *slots), float)
    cuts = itertools.combinations(range(1, chunks), pp - 1)
    while part := list(itertools.islice(cuts, block)):
        c = np.array(part, float).reshape(len(part), pp - 1)
        edges = np.hstack([np.zeros((len(part), 1)), c, np.full((len(part), 1), float(chunks))])
        yield v * np.diff(edges, axis=1) - off if any(slots) else v * np.diff(edges, axis=1)


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.t0, self.last = total, enabled, time.perf_counter(), 0.0

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if not self.enabled or (now - self.last < 0.5 and done < self.total):
            return
        self.last = now
        frac = done / self.total if self.total else 1.0
        elapsed = now - self.t0
        eta = elapsed / frac - elapsed if frac > 0 else float("inf")
        bar = "#" * int(30 * frac)
        sys.stderr.write(f"\r[{bar:<30}] {100 * frac:5.1f}%  {done:,}/{self.total:,}"
                         f"  elapsed {elapsed:6.1f} s  eta {eta:6.1f} s")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


@dataclass(frozen=True)
class _Rows:
    """(split, recompute) rows of one class shape, stored stage-major: nT and rT (pp, rows)
    (the per-stage reductions below run along contiguous rows, several times faster than
    along a short last axis); `splits` (K, pp) the distinct layer splits and `of` (rows,) the
    split of each row, so what depends on the split alone (the gradient sync) is priced once
    per split."""

    nT: np.ndarray
    rT: np.ndarray
    splits: np.ndarray
    of: np.ndarray
    param: np.ndarray | None = None  # (rows,) the pattern's parameter value of each row


def _rows_of(splits: np.ndarray, recompute, v: int = 1, slots: tuple[bool, bool] = (False, False)) -> _Rows:
    """The rows of `splits`, each split's recompute counts r (0 <= r_s <= n_s) in lexicographic
    order (built stage-major directly: np.indices' grid); with a framework's pattern
    (space.recompute_rows), one row per parameter value, in cost/recompute_patterns.options'
    order."""
    pp = splits.shape[1]
    if isinstance(recompute, tuple):
        pattern, top_n, top_c = recompute
        r = recompute_patterns.options(pattern, splits.astype(np.int64), v, *slots, top_n, top_c)  # (P, K, pp)
        P = r.shape[0]
        rT = np.transpose(r, (2, 1, 0)).reshape(pp, -1).astype(float)  # split-major, values inside
        out = _Rows(nT=np.repeat(splits.T, P, axis=1), rT=rT, splits=splits,
                    of=np.repeat(np.arange(len(splits)), P), param=np.tile(np.arange(P), len(splits)))
        for x in (out.nT, out.rT, out.splits, out.of, out.param):
            x.setflags(write=False)
        return out
    if recompute:
        rT = np.concatenate([np.indices((n + 1).astype(int)).reshape(pp, -1) for n in splits], axis=1).astype(float)
        counts = np.prod(splits + 1, axis=1).astype(int)
    else:
        rT, counts = np.zeros((pp, len(splits))), np.ones(len(splits), int)
    of = np.repeat(np.arange(len(splits)), counts)
    out = _Rows(nT=np.repeat(splits.T, counts, axis=1), rT=rT, splits=splits, of=of)
    for x in (out.nT, out.rT, out.splits, out.of):
        x.setflags(write=False)
    return out


@lru_cache(maxsize=64)
def _split_rows(layers: int, pp: int, v: int, uniform: bool, recompute: bool,
                slots: tuple[bool, bool] = (False, False)) -> _Rows:
    """Every (layer split n, recompute counts r) row of one class shape. They depend on the
    shape alone, not on the outer configuration, so they are built once per shape (read-only)
    rather than once per configuration."""
    if uniform:
        from paraplan.cost.readers.plan_reader import default_layer_split
        splits = np.array([default_layer_split(layers, pp, v)], float)
    else:
        splits = compositions(layers, pp, v, slots)
    return _rows_of(splits, recompute, v, slots)


def _split_row_blocks(layers: int, pp: int, v: int, uniform: bool, recompute: bool,
                      slots: tuple[bool, bool] = (False, False)):
    """_split_rows of one class shape in blocks of whole splits, about ROW_BLOCK rows each, in
    the same row order; a shape of at most ROW_BLOCK rows is one block, built once
    (_split_rows' cache), a larger one is built block by block each time (its rows are what
    does not fit in memory)."""
    if uniform or count_splits(layers, pp, v, recompute, uniform, slots) <= ROW_BLOCK:
        yield _split_rows(layers, pp, v, uniform, recompute, slots)
        return
    block, size = [], 0
    for splits in _composition_blocks(layers, pp, v, STREAM_SPLITS, slots):
        if not recompute or isinstance(recompute, tuple):  # a split is a row, or pattern_values rows
            yield _rows_of(splits, recompute, v, slots)
            continue
        for n in splits:
            block.append(n)
            size += int(np.prod(n + 1))
            if size >= ROW_BLOCK:
                yield _rows_of(np.array(block), recompute)
                block, size = [], 0
    if block:
        yield _rows_of(np.array(block), recompute)


def _rows_until(layers: int, pp: int, v: int, uniform: bool, recompute: bool, deadline: float | None,
                slots: tuple[bool, bool] = (False, False)) -> _Rows | None:
    """_split_rows of one class shape, the large ones listed block by block (_composition_blocks)
    with a look at the clock between blocks: None when `deadline` passed first."""
    if uniform or count_splits(layers, pp, v, recompute, uniform, slots) <= ROW_BLOCK:
        return _split_rows(layers, pp, v, uniform, recompute, slots)
    parts = []
    for splits in _composition_blocks(layers, pp, v, STREAM_SPLITS, slots):
        if deadline is not None and time.perf_counter() > deadline:
            return None
        parts.append(splits)
    return _rows_of(np.concatenate(parts), recompute, v, slots)


def _class_rows(p, k: int, uniform: bool, rows: _Rows | None = None, keep_all: bool = False,
                times: tuple | None = None, scratch: tuple | None = None):
    """n, r (rows, pp) and per scenario A (max T), S (sum T), D (max sync), only rows that fit,
    and how many rows there were. `rows`: the rows to evaluate (default: every row of the
    class's shape); `keep_all`: every row instead (no copy of the rows), and in place of the
    count, (count, the mask of the rows that fit); `times`: (A, S) of these rows from another
    problem whose time terms are equal (_time_key; with keep_all only); `scratch`: two float
    arrays and a bool array of the rows' stage-major shape, written in place of temporaries
    (with keep_all only; a block of a lone class has a million rows, and fresh temporaries of
    that size cost page faults as large as the arithmetic). The same arithmetic as
    cost/schedule.py (stage_mem_bytes, fits, stage_times_s, sync_times_s), element by element,
    on stage-major arrays."""
    c0, v = p.coeffs[0][k], p.virtual_stages
    rows = (_split_rows(p.layers, c0.pp, v, uniform, _recompute_rows(p), slots_of(c0))
            if rows is None else rows)
    col = (slice(None), None)  # a per-stage coefficient against stage-major rows
    nT, rT = rows.nT, rows.rT
    if scratch is not None and not any(slots_of(c0)):  # the same operations, into `scratch`
        mem, tmp, below = scratch
        np.add(c0.stage_mem_bytes[col], np.multiply(nT, (c0.layer_state_bytes + c0.layer_act_bytes)[col], out=mem),
               out=mem)
        np.subtract(mem, np.multiply(rT, (c0.layer_act_bytes - c0.layer_ckpt_bytes)[col], out=tmp), out=mem)
        fits = np.less_equal(mem, c0.capacity_bytes[col], out=below).all(axis=0)
    else:
        mem = (c0.stage_mem_bytes[col] + nT * (c0.layer_state_bytes + c0.layer_act_bytes)[col]
               - rT * (c0.layer_act_bytes - c0.layer_ckpt_bytes)[col])
        if any(slots_of(c0)):  # the short chunks' correction (schedule.stage_mem_bytes adds it)
            mem = mem + schedule.uneven_chunk_mem_bytes(c0, nT.T, rT.T).T
        fits = (mem <= c0.capacity_bytes[col]).all(axis=0)
    ok = fits & schedule.holds_dense_prefix(c0, rows.splits)[rows.of]
    of, param = rows.of, rows.param
    if not keep_all:
        nT, rT, of = nT[:, ok], rT[:, ok], of[ok]
        param = None if param is None else param[ok]
    A, S = _stage_terms(p, k, nT, rT, scratch) if times is None else times
    D = np.array([schedule.sync_times_s(cs[k], rows.splits).max(axis=1)[of] for cs in p.coeffs])
    return nT.T, rT.T, A, S, D, (len(ok), ok) if keep_all else len(ok), param


def _stage_terms(p, k: int, nT: np.ndarray, rT: np.ndarray,
                 scratch: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per scenario A (max T) and S (sum T) of class k's stage-major rows (_class_rows), the
    stage times written into `scratch` where it is given."""
    col = (slice(None), None)
    A, S = [], []
    for cs in p.coeffs:
        c = cs[k]
        if scratch is not None and not c.layer_drain_saving_s.size:  # the same operations, in place
            t, tmp, _ = scratch
            np.add(c.stage_time_s[col], np.multiply(nT, c.layer_time_s[col], out=t), out=t)
            np.add(t, np.multiply(rT, c.recompute_time_s[col], out=tmp), out=t)
        else:
            t = c.stage_time_s[col] + nT * c.layer_time_s[col] + rT * c.recompute_time_s[col]
        if c.layer_drain_saving_s.size:  # a zero-bubble schedule: _zero_bubble_terms
            a, b = _zero_bubble_terms(p, c, t, nT)
            A.append(a), S.append(b)
        else:
            A.append(t.max(axis=0)), S.append(t.sum(axis=0))
    return np.array(A), np.array(S)


def _time_key(p, k: int) -> tuple:
    """What _stage_terms reads of p besides the rows: class k's time terms on each scenario,
    and a zero-bubble schedule's micro-batch count. Configurations that differ only in what
    memory or the gradient sync reads (ZeRO stage, the sync's ring) price equal time terms;
    with equal keys they share A and S, computed once per block of rows."""
    terms = tuple((c.stage_time_s.tobytes(), c.layer_time_s.tobytes(), c.recompute_time_s.tobytes(),
                   c.layer_drain_saving_s.tobytes()) for c in (cs[k] for cs in p.coeffs))
    return terms, p.virtual_stages, p.classes, p.total_micro_batches // p.replicas[0]


def _recompute_rows(p) -> bool | tuple:
    """The recompute rows of p's classes (space.recompute_rows: the job framework's pattern)."""
    return recompute_rows(p.allow_full_recompute, p.recompute_pattern, p.layers, p.slots, p.virtual_stages,
                          min(p.pp(k) for k in range(p.classes)))


def _zero_bubble_terms(p, c, t: np.ndarray, nT: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A, S) of stage-major stage times t under c's zero-bubble schedule, such that
    _pipeline_s_of(A, S, m, v) is cost/schedule.pipeline_time_s's max_s [m T_s + (sum B - B_s) / v],
    B_s = max(T_s - k W_s, 0), S = sum_s B_s. A lone class's m is the batch's: A = max_s
    [(v m - 1) T_s + T_s - B_s] / (v m - 1), one number a row (then (m - 1/v) A + S / v =
    max_s [v m T_s - B_s + sum B] / v). Of several classes m_k is a decision, so A keeps both
    per-stage rows, (rows, 2, pp): T_s and B_s, read per count by _pipeline_s_of."""
    v = p.virtual_stages
    b = np.maximum(t - nT * c.layer_drain_saving_s[:, None], 0.0)
    if p.classes > 1:
        return np.stack([t.T, b.T], axis=1), b.sum(axis=0)
    vm = v * (p.total_micro_batches // p.replicas[0])
    return ((vm - 1) * t + (t - b)).max(axis=0) / (vm - 1), b.sum(axis=0)


def _dualpipe_exhaustive(inst: Instance, outers: list, t0: float, deadline: float | None) -> ExhaustiveResult:
    """A DualPipe job's space (one class on one group per configuration): every split and
    recompute row of each configuration (_split_rows), its time and memory from the DualPipe
    problem's terms (search.dualpipe_problem, cost/dualpipe.terms), the first minimum
    in enumeration order kept."""
    best_val, best, done, feasible = math.inf, None, 0, 0
    for o in outers:
        if deadline is not None and time.perf_counter() > deadline:
            break
        p = dualpipe_problem(inst, o)
        for rows in _split_row_blocks(p.layers, p.pp, 1, False, p.allow_full_recompute):
            n, r = rows.nT.T, rows.rT.T  # (rows, pp)
            val, fit = p.rows(n, r)
            ok = fit & (n[:, 0] >= p.lows()[0])
            done += len(ok)
            feasible += int(ok.sum())
            if ok.any():
                i = int(np.flatnonzero(ok)[np.argmin(val[ok])])
                if val[i] < best_val * (1 - 1e-12):
                    best_val, best = float(val[i]), (o, [p.num_micro_batches], [n[i]], [r[i]])
    complete = deadline is None or time.perf_counter() <= deadline
    plan = None if best is None else _plan_of(*best)
    return ExhaustiveResult(plan=plan, quantile_s=None if best is None else best_val,
                                  objective_s=None if best is None else _time_s(inst, plan, "nominal", best_val),
                                  candidates=done, outer_configs=len(outers), wall_time_s=time.perf_counter() - t0,
                                  feasible=feasible, complete=complete)


def exhaustive(inst: Instance, objective: str = "nominal",
               max_candidates: int = DEFAULT_MAX_CANDIDATES, progress: bool = False,
               time_limit_s: float | None = None) -> ExhaustiveResult:
    """Brute force over the declared space of `inst` (module docstring), each memory tier
    apart as the search does (solver/memory_tiers.py): the lower minimised value, the emptier
    tier's on a tie; the candidates counted once (the last tier's: every plan). The tiers are
    searched side by side, each configuration and layer plan priced once for all of them."""
    t0 = time.perf_counter()
    out = _exhaustive_tiers(memory_tiers.tiers(inst), objective, max_candidates, progress, time_limit_s)
    found = [r for r in out if r.plan is not None]
    best = min(found, key=lambda r: r.quantile_s) if found else out[-1]
    res = dataclasses.replace(best, candidates=out[-1].candidates, feasible=out[-1].feasible,
                              outer_configs=out[-1].outer_configs, complete=all(r.complete for r in out))
    if inst.search.asymmetric_pipelines:  # search.asymmetric_pipelines: the union of both spaces
        res = _joined_asymmetric(inst, res, objective)
    return dataclasses.replace(res, wall_time_s=time.perf_counter() - t0)


def _joined_asymmetric(inst: Instance, res: ExhaustiveResult, objective: str) -> ExhaustiveResult:
    """`res` joined with exhaustive_asymmetric's optimum, the symmetric plan kept on a tie (as
    the one search keeps a symmetric plan on a tie, solver/search._Pipeline)."""
    if objective != "nominal":
        raise ConfigError(f"search.asymmetric_pipelines is planned on the nominal network only, not"
                          f" for the {objective} objective")
    best_s, plan, rows, outers = exhaustive_asymmetric(inst)
    more = dict(candidates=res.candidates + rows, outer_configs=res.outer_configs + outers)
    value_s = res.objective_s if res.quantile_s is None else res.quantile_s  # both at search.objective
    if plan is None or (res.plan is not None and best_s >= value_s):
        return dataclasses.replace(res, **more)
    at = memory_tiers.plan_tier(inst, plan)  # the plan's time behind its value
    return dataclasses.replace(res, plan=plan, objective_s=_time_s(at, plan, objective, best_s), quantile_s=best_s,
                               **more)


class _Tier:
    """One memory tier's brute force (_exhaustive_tiers): per (outer, layer plans) in
    enumeration order, each micro-batch vector's first minimum (value, plan parts), folded into
    the best in that order as soon as every earlier one is in (fold), so the first of equal
    optima wins as if they were evaluated one after the other, and memory stays constant in the
    plans enumerated."""

    def __init__(self, inst: Instance):
        self.inst, self.found, self.done, self.feasible = inst, {}, 0, 0
        self.best_val, self.best, self.next_i = math.inf, None, 0

    def add(self, i: int, counted: int, fit: int, minima: list) -> None:
        """Configuration i's candidates counted, those that fit, and its (value, plan parts)."""
        self.done += counted
        self.feasible += fit
        self.found[i] = minima
        self.fold()

    def fold(self) -> None:
        while self.next_i in self.found:
            for val, b in self.found.pop(self.next_i):
                if val < self.best_val * (1 - 1e-9):
                    self.best_val, self.best = float(val), b
            self.next_i += 1

    def result(self, objective: str, outers: int, t0: float, complete: bool) -> ExhaustiveResult:
        self.fold()
        val_s, chosen = self.best_val, self.best
        for i in sorted(self.found):  # stopped by the limit: those past a gap, in order
            for val, b in self.found[i]:
                if val < val_s * (1 - 1e-9):
                    val_s, chosen = float(val), b
        plan = None if chosen is None else _plan_of(*chosen)
        return ExhaustiveResult(plan=plan, quantile_s=None if chosen is None else val_s,
                                objective_s=None if chosen is None else _time_s(self.inst, plan, objective, val_s),
                                candidates=self.done, outer_configs=outers,
                                wall_time_s=time.perf_counter() - t0, feasible=self.feasible, complete=complete)


def _exhaustive_tiers(ts: list[Instance], objective: str = "nominal",
                      max_candidates: int = DEFAULT_MAX_CANDIDATES, progress: bool = False,
                      time_limit_s: float | None = None) -> list[ExhaustiveResult]:
    """Brute force over the declared space of each memory tier of `ts` (memory_tiers.tiers: one
    instance apart from search.memory_fill_cap), the tiers side by side: each (outer, layer
    plans) is priced once (search.priced_for: the coefficients do not read the tier) and each
    tier's problem made of the same coefficients (search.problem_of: its factor and its cap), so
    every tier lists, counts and keeps what it would alone. With time_limit_s (wall clock) it
    stops when the limit passes (checked per outer configuration and micro-batch vector) and
    every tier returns complete=False: then nothing is proved."""
    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + time_limit_s
    inst = ts[-1]  # every plan's tier: the space, the scenarios and their weights are every tier's
    uniform = inst.search.uniform_split  # as search
    outers = declared_outers(inst, uniform=uniform)
    total = summarize(inst, outers, uniform).plans_total
    if total > max_candidates:
        from paraplan.solver.format import count
        raise SpaceTooLarge(
            f"the declared space has {count(total)} candidates (limit {max_candidates:,});"
            f" at about {ESTIMATED_RATE_PER_S:,} per second that is ~{count(total // ESTIMATED_RATE_PER_S)} s")
    _, agg, weights = scenario_weights(inst, objective)
    if dualpipe_job(inst):  # one tier (cost/trust.memory_fill_caps: its band does not count memory)
        return [_dualpipe_exhaustive(t, outers, t0, deadline) for t in ts]
    bar = _Progress(total, progress)
    tiers = [_Tier(t) for t in ts]
    placements: dict = {}
    # lone classes by class shape, every tier's problems of a configuration together, evaluated
    # LONE_CHUNK configurations at once: each block of rows is built once for all of them
    pending: dict[tuple, list] = {}

    def flush(shape) -> bool:
        """Evaluate the pending lone classes of one shape; False when the limit passed."""
        items = pending.pop(shape)
        out = _lone_classes([(p, mvecs) for _, ps, mvecs, _, _ in items for p in ps], uniform, agg, weights,
                            deadline)
        if out is None:
            return False
        for j, (i, _, mvecs, o, parts) in enumerate(items):
            for n, tier in enumerate(tiers):
                counted, fit, best_rows = out[j * len(tiers) + n]
                tier.add(i, counted, fit, [(val, (o, mv, [n_], [r], parts))
                                           for mv, (val, n_, r) in zip(mvecs, best_rows) if n_ is not None])
        bar.update(tiers[-1].done)
        return True

    def results(complete: bool) -> list[ExhaustiveResult]:
        return [tier.result(objective, len(outers), t0, complete) for tier in tiers]

    def listed():
        """(outer, each tier's objective factor of it, read once for all its layer plans, layer plans)."""
        for o in outers:
            factors = [objective_factor_of(t, o) for t in ts]
            for parts in all_partitions(inst, o, placer(inst, o, placements), class_outers(inst.job, o)):
                yield o, factors, parts

    for i, (o, factors, parts) in enumerate(listed()):
        if deadline is not None and time.perf_counter() > deadline:
            return results(False)
        priced = priced_for(inst, o, objective, placements, parts)
        ps = [problem_of(t, o, objective, priced, factor=f) for t, f in zip(ts, factors)]
        p = ps[-1]
        mvecs = micro_batch_vectors(o.classes, p.total_micro_batches, uniform, o.virtual_stages, p.paired)
        v = o.virtual_stages
        if p.classes == 1:  # in blocks of rows, the same candidates and first minimum
            shape = (p.layers, p.coeffs[0][0].pp, v, _recompute_rows(p), slots_of(p.coeffs[0][0]))
            pending.setdefault(shape, []).append((i, ps, mvecs, o, parts))
            if len(pending[shape]) >= LONE_CHUNK and not flush(shape):
                return results(False)
            continue
        for p, tier in zip(ps, tiers):
            got = _several_classes(p, mvecs, v, uniform, agg, weights, deadline)
            if got is None:
                return results(False)
            counted, fit, minima, whole = got
            tier.add(i, counted, fit, [(val, (o, mv, n, r, parts)) for mv, (val, n, r) in zip(mvecs, minima)
                                       if n is not None])
            if not whole:
                return results(False)
        bar.update(tiers[-1].done)
    for shape in list(pending):
        if not flush(shape):
            return results(False)
    bar.update(total)
    for tier in tiers:
        assert tier.done == total, f"enumerated {tier.done} plans but the space has {total}"
    return results(True)


def _several_classes(p, mvecs, v: int, uniform: bool, agg: str, weights, deadline: float | None):
    """One outer configuration of several replica classes: (plans counted, plans that fit,
    _class_minima's minima per micro-batch vector, whether they are whole), or None when the
    time limit passed while its rows were listed."""
    rc = _recompute_rows(p)
    listed = [_rows_until(p.layers, p.coeffs[0][k].pp, v, uniform, rc, deadline,
                          slots_of(p.coeffs[0][k])) for k in range(p.classes)]
    if any(x is None for x in listed):
        return None
    rows = [_class_rows(p, k, uniform, x) for k, x in enumerate(listed)]
    P = pattern_values(rc)  # with a pattern, every class takes the same value
    counted = len(mvecs) * P * math.prod(x[5] // P for x in rows)
    fit = len(mvecs) * (math.prod(len(x[0]) for x in rows) if P == 1 else
                        sum(math.prod(int((x[6] == i).sum()) for x in rows) for i in range(P)))
    if any(len(x[0]) == 0 for x in rows):
        return counted, fit, [], True
    minima, whole = _class_minima(rows, mvecs, v, agg, weights, deadline)
    return counted, fit, minima, whole


def _class_minima(rows: list, mvecs, v: int, agg: str, weights, deadline: float | None):
    """(minima, whole): per micro-batch vector in order, (value, layers per class, recomputed
    layers per class) of the first minimum over every combination of the classes' rows
    (_class_rows) that share one value of the framework's pattern; whole is False when the
    limit passed before the last vector."""
    if rows[0][6] is None:
        return _combined_minima(rows, mvecs, v, agg, weights, deadline)
    best = [(math.inf, None, None)] * len(mvecs)
    for i in range(int(max(x[6].max(initial=-1) for x in rows)) + 1):
        sub = [tuple(y[x[6] == i] for y in x[:2]) + tuple(y[:, x[6] == i] for y in x[2:5]) + x[5:]
               for x in rows]
        if any(len(x[0]) == 0 for x in sub):
            continue
        got, whole = _combined_minima(sub, mvecs, v, agg, weights, deadline, every_plan=True)
        for j, g in enumerate(got):
            if g[0] < best[j][0]:
                best[j] = g
        if not whole:
            return best[:len(got)], False
    return best, True


def _combined_minima(rows: list, mvecs, v: int, agg: str, weights, deadline: float | None,
                     every_plan: bool = False):
    """_class_minima over every combination of the classes' rows: class k on axis k + 1 of a
    (scenarios, rows_1, ..., rows_K) array. The slowest sync does not depend on the counts, so
    it is combined once; the pipeline terms of a block of micro-batch vectors are evaluated
    together (_vector_blocks), each element by the same operations as one vector at a time, so
    the values and the first minimum of each vector are the same. A vector whose minimum is
    not below an earlier vector's of this configuration cannot become the best (exhaustive's
    fold takes a value only below the best by a relative 1e-9) and gets no plan, (value,
    None, None), unless `every_plan` (_class_minima takes the least over the pattern's values
    of each vector's minima)."""
    K = len(rows)
    dims = [rows[0][3].shape[0]] + [x[3].shape[1] for x in rows]  # S: (scenarios, rows_k)

    def axis_k(a: np.ndarray, k: int, lead: int) -> np.ndarray:  # rows of class k on axis lead + k
        shape = list(a.shape[:lead]) + [1] * K
        shape[lead + k] = a.shape[lead]
        return a.reshape(shape)

    D = None
    for k, x in enumerate(rows):
        dk = axis_k(x[4], k, 1)
        D = dk if D is None else np.maximum(D, dk)
    out, least = [], math.inf
    for lo, hi in _vector_blocks(len(mvecs), math.prod(dims)):
        if deadline is not None and time.perf_counter() > deadline:
            return out, False
        P = None
        for k, x in enumerate(rows):  # cost/schedule.pipeline_time_s of every vector of the block
            pk = axis_k(_pipeline_s_of(x[2], x[3], mvecs[lo:hi, k], v), k, 2)
            P = pk if P is None else np.maximum(P, pk)
        per = P + D  # (vectors, scenarios, rows_1, ..., rows_K)
        if agg == "max":
            vals = per.max(axis=1).reshape(hi - lo, -1)
        else:  # one vector at a time: the same dot product as evaluated alone
            w = np.asarray(weights)
            vals = np.stack([np.tensordot(w, per[i].copy(), 1).reshape(-1)
                             for i in range(hi - lo)])
        first = vals.argmin(axis=1)
        for flat, val in zip(first.tolist(), vals[np.arange(hi - lo), first].tolist()):
            if val >= least and not every_plan:
                out.append((val, None, None))
                continue
            least = val
            combo = np.unravel_index(flat, dims[1:])
            out.append((val, [rows[k][0][j].copy() for k, j in enumerate(combo)],
                        [rows[k][1][j].copy() for k, j in enumerate(combo)]))
    return out, True


# elements of one block of micro-batch vectors' (vectors, scenarios, rows_1, ..., rows_K) array
VECTOR_BLOCK_ELEMENTS = 1 << 21


def _vector_blocks(vectors: int, per_vector: int):
    """(first, end) of consecutive blocks of `vectors` micro-batch vectors, each of at most
    VECTOR_BLOCK_ELEMENTS elements of per_vector each (at least one vector a block)."""
    step = max(1, VECTOR_BLOCK_ELEMENTS // max(per_vector, 1))
    return [(lo, min(lo + step, vectors)) for lo in range(0, vectors, step)]


def _pipeline_s_of(A: np.ndarray, S: np.ndarray, m: np.ndarray, v: int) -> np.ndarray:
    """One replica's pipeline term (cost/schedule.pipeline_time_s) of every row at each count of
    `m` (vectors,), stacked on a first axis, from _class_rows' A and S: (m - 1/v) A + S / v, or
    with A's per-stage rows T_s and B_s (_zero_bubble_terms, several classes)
    max_s [m T_s - B_s / v] + S / v."""
    if A.ndim == S.ndim:
        return (m - 1 / v)[:, None, None] * A + S / v
    return (m[:, None, None, None] * A[..., 0, :] - A[..., 1, :] / v).max(axis=-1) + S / v


def _lone_classes(problems: list, uniform: bool, agg: str, weights, deadline: float | None):
    """Lone classes of one class shape, (problem, micro-batch vectors) each, evaluated on the
    shape's rows in blocks (_split_row_blocks), each block built once for all of them: per
    problem (candidates, fitting candidates, per micro-batch vector (value, n, r) of its first
    minimum over all rows in row order, n None where no row fits); None when `deadline`
    passed."""
    p0 = problems[0][0]
    c0, v = p0.coeffs[0][0], p0.virtual_stages
    best = [[(math.inf, None, None)] * len(mvecs) for _, mvecs in problems]
    counted, fit = [0] * len(problems), [0] * len(problems)
    # the problems in order of their time terms, those with equal terms together, so that one
    # (A, S) per block is alive at a time; each problem keeps its own minima, so the order in
    # which problems are evaluated does not change them
    keys = [_time_key(p, 0) for p, _ in problems]
    order = sorted(range(len(problems)), key=keys.__getitem__)
    for block in _split_row_blocks(p0.layers, c0.pp, v, uniform, _recompute_rows(p0), slots_of(c0)):
        held, times = None, None
        scratch = np.empty_like(block.nT), np.empty_like(block.nT), np.empty(block.nT.shape, bool)
        for q in order:
            p, mvecs = problems[q]
            if deadline is not None and time.perf_counter() > deadline:
                return None
            if keys[q] != held:
                held, times, pipes = keys[q], None, {}
            n, r, A, S, D, (total, ok), _ = _class_rows(p, 0, uniform, block, keep_all=True, times=times,
                                                        scratch=scratch)
            times = A, S
            fitting = int(ok.sum())
            counted[q] += len(mvecs) * total
            fit[q] += len(mvecs) * fitting
            if not fitting:
                continue
            for i, mv in enumerate(mvecs):
                m = int(mv[0])
                if m not in pipes:  # the pipeline term, shared as A and S are
                    pipes[m] = (mv[0] - 1 / v) * A + S / v
                per = pipes[m] + D  # (scenarios, rows), as exhaustive
                vals = per.max(axis=0) if agg == "max" else np.tensordot(np.asarray(weights), per, 1)
                j = int(np.argmin(np.where(ok, vals, np.inf)))  # the first fitting minimum
                if vals[j] < best[q][i][0]:  # strictly: an equal value later in row order is not first
                    # copies: a row view would keep the whole block alive
                    best[q][i] = (float(vals[j]), n[j].copy(), r[j].copy())
    return list(zip(counted, fit, best))


def _time_s(inst: Instance, plan: Plan, objective: str, value_s: float) -> float:
    """The plan's time behind the minimised value `value_s` (search.plan_time_s)."""
    return value_s if objective_factor_of(inst, plan) == 1.0 else plan_time_s(inst, plan, objective)


def exhaustive_asymmetric(inst: Instance) -> tuple[float, Plan | None, int, int]:
    """(best value, best plan, rows evaluated, pipelines listed) over every asymmetric pipeline of the declared
    space (solver/asymmetric_space.py), every layer split and every recompute row the job's
    framework runs (the rows a one-class pipeline of as many stages lists), no pruning: the
    check of solver/search.py's pipelines. A row's value is its step time times its own
    objective factor: the pipeline's factor (cost/trust.objective_factor_of) at the memory tier
    its own fill falls in (memory_tiers.plan_tier's rule: its fullest stage's memory over HBM
    within the emptier tier's cap, else the last tier's), read per row rather than per tier
    searched. The first minimum in listing order wins."""
    L, best_s, best, count = inst.model.layers, math.inf, None, 0
    reserve = inst.search.memory_reserve_bytes
    caps = memory_fill_caps(inst)
    outers = asymmetric_outers(inst)
    for ao in outers:
        ac = asymmetric.coefficients(inst, ao, reserve_bytes=reserve)
        pattern = recompute_pattern(inst.job.framework, ao.recompute, inst.search.partial_recompute)
        pp = ao.classes[0].pp
        rows = _split_rows(L, pp, 1, False, recompute_rows(inst.search.full_recompute, pattern, L, L, 1, pp))
        n, r = rows.nT.T, rows.rT.T
        mem, hbm = asymmetric.mem_bytes(ac, n, r), ac.rows.capacity_bytes + reserve
        fill = (mem / hbm).max(axis=-1)
        f_in, f_out = (objective_factor_of(memory_tiers.tier(inst, cap), ao) for cap in (caps[0], caps[-1]))
        factor = np.where(fill <= caps[0] * (1 + FILL_REL_TOL), f_in, f_out)
        ok = (mem <= np.minimum(ac.rows.capacity_bytes, caps[-1] * hbm)).all(axis=-1)
        t = np.where(ok, asymmetric.iteration_time_s(ac, n, r) * factor, math.inf)
        count += len(t)
        i = int(np.argmin(t)) if len(t) else 0
        if len(t) and t[i] < best_s:
            best_s = float(t[i])
            best = asymmetric.plan_of(inst, ao, n[i], r[i])
    return best_s, best, count, len(outers)
