"""Exhaustive search over the heterogeneous space: every outer configuration, every layer-plan
combination (with per-operator partitions: every plan on every class and group, no dominance),
every micro-batch vector, every layer split and every recompute count of every class, no pruning. It shares
solver/hetero_space.py with the planner, so its optimum is the one the planner must match.

Per class, all (split, recompute) rows are evaluated at once with numpy on every scenario
(slowest stage, sum of stages, slowest sync, fits); classes are then combined by brute force
over the product of their feasible rows and the micro-batch vectors.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.hetero_specs import HeteroInstance, HeteroPlan
from paraplan.solver.exhaustive import SpaceTooLarge, _recompute_grid, compositions
from paraplan.solver.class_partitions import all_partitions
from paraplan.solver.hetero_planner import _plan_of, lone_count, placer, problem_for, scenario_weights
from paraplan.solver.hetero_space import FAMILIES, hetero_outers, micro_batch_vectors, summarize

DEFAULT_MAX_CANDIDATES = 5_000_000


@dataclass
class HeteroExhaustiveResult:
    plan: HeteroPlan | None
    objective_s: float | None
    candidates: int
    outer_configs: int
    wall_time_s: float


def _class_rows(p, k: int, uniform: bool):
    """n, r (rows, pp) and per scenario A (max T), S (sum T), D (max sync), only rows that fit."""
    c0, v = p.coeffs[0][k], p.virtual_stages
    if uniform:
        from paraplan.cost.loader import default_layer_split
        splits = np.array([default_layer_split(p.layers, c0.pp, v)], float)
    else:
        splits = compositions(p.layers, c0.pp, v)
    ns, rs = [], []
    for n in splits:
        r = _recompute_grid(n) if p.allow_full_recompute else np.zeros((1, c0.pp))
        ns.append(np.broadcast_to(n, r.shape)), rs.append(r)
    n, r = np.concatenate(ns), np.concatenate(rs)
    ok = schedule.fits(c0, n, r)
    n, r = n[ok], r[ok]
    A, S, D = [], [], []
    for cs in p.coeffs:
        t = schedule.stage_times_s(cs[k], n, r)
        A.append(t.max(axis=1)), S.append(t.sum(axis=1))
        D.append(schedule.sync_times_s(cs[k], n).max(axis=1))
    return n, r, np.array(A), np.array(S), np.array(D), len(ok)


def hetero_exhaustive(inst: HeteroInstance, objective: str = "nominal",
                      families: tuple[str, ...] = FAMILIES, uniform: bool = False,
                      max_candidates: int = DEFAULT_MAX_CANDIDATES) -> HeteroExhaustiveResult:
    t0 = time.perf_counter()
    uniform = uniform or inst.search.uniform_split  # as plan_hetero
    outers = hetero_outers(inst, families, None, uniform)
    total = summarize(inst, outers, uniform).plans_total
    if total > max_candidates:
        raise SpaceTooLarge(f"the heterogeneous space has {total:,} plans (limit {max_candidates:,})")
    _, agg, weights = scenario_weights(inst, objective)
    best_val, best = math.inf, None
    done = 0
    placements: dict = {}
    for o, parts in ((o, parts) for o in outers
                     for parts in all_partitions(inst, o, placer(inst, o, placements), lone_count(inst, o))):
        p = problem_for(inst, o, objective, placements=placements, partitions=parts)
        mvecs = micro_batch_vectors(o.classes, p.total_micro_batches, uniform, o.virtual_stages)
        v = o.virtual_stages
        rows = [_class_rows(p, k, uniform) for k in range(p.classes)]
        done += len(mvecs) * math.prod(x[5] for x in rows)
        if any(len(x[0]) == 0 for x in rows):
            continue
        for mv in mvecs:
            # every combination of the classes' rows at once: class k on axis k + 1
            K = len(rows)
            P = D = None
            for k, (_, _, A, S, Dk, _) in enumerate(rows):
                shape = [A.shape[0]] + [1] * K
                shape[k + 1] = A.shape[1]
                pk = ((mv[k] - 1 / v) * A + S / v).reshape(shape)  # cost/schedule.pipeline_time_s
                dk = Dk.reshape(shape)
                P = pk if P is None else np.maximum(P, pk)
                D = dk if D is None else np.maximum(D, dk)
            per = P + D  # (scenarios, rows_1, ..., rows_K)
            vals = per.max(axis=0) if agg == "max" else np.tensordot(np.asarray(weights), per, 1)
            flat = int(np.argmin(vals))
            if vals.flat[flat] < best_val * (1 - 1e-9):
                best_val = float(vals.flat[flat])
                combo = np.unravel_index(flat, vals.shape)
                best = (o, mv, [rows[k][0][j] for k, j in enumerate(combo)],
                        [rows[k][1][j] for k, j in enumerate(combo)], parts)
    assert done == total, f"enumerated {done} plans but the space has {total}"
    return HeteroExhaustiveResult(plan=None if best is None else _plan_of(*best),
                                  objective_s=None if best is None else best_val, candidates=done,
                                  outer_configs=len(outers), wall_time_s=time.perf_counter() - t0)
