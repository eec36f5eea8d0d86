"""Exhaustive search over the declared space: every outer configuration, every layer split
(non-uniform, in multiples of the virtual stages) and every per-stage count of fully
recomputed layers, evaluated with the vectorised simulator (cost/schedule.py) in numpy
batches. It shares solver/space.py with the solvers, so its optimum is the one they must match.

No pruning of any kind: it is the brute-force check of the solvers' optimality proofs.
"""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.specs import Instance, Plan
from paraplan.solver.partition_plans import all_plan_coefficients, plans_per_outer
from paraplan.solver.space import outer_configs, summarize

DEFAULT_MAX_CANDIDATES = 20_000_000
# measured on the 2-core reference machine: candidates evaluated per second (for estimates)
ESTIMATED_RATE_PER_S = 3_000_000


class SpaceTooLarge(ValueError):
    pass


@dataclass
class ExhaustiveResult:
    plan: Plan | None
    iter_time_s: float | None
    candidates: int
    feasible: int
    outer_configs: int
    wall_time_s: float
    complete: bool = True  # False: the time limit stopped it; the plan is only the best seen


@lru_cache(maxsize=256)
def compositions(layers: int, pp: int, v: int) -> np.ndarray:
    """All splits of `layers` into pp positive multiples of v, shape (K, pp), lexicographic."""
    chunks = layers // v
    rows = [tuple(v * (b - a) for a, b in zip((0,) + cut, cut + (chunks,)))
            for cut in itertools.combinations(range(1, chunks), pp - 1)]
    return np.array(rows, float).reshape(-1, pp)


def _recompute_grid(n: np.ndarray) -> np.ndarray:
    """All r with 0 <= r_s <= n_s, shape (prod(n_s+1), pp)."""
    axes = [np.arange(int(k) + 1, dtype=float) for k in n]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(n))


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


def exhaustive(inst: Instance, max_candidates: int = DEFAULT_MAX_CANDIDATES,
               progress: bool = False, time_limit_s: float | None = None) -> ExhaustiveResult:
    """Brute force over the declared space. With time_limit_s (wall clock), it stops when the
    limit passes (checked per split) and returns complete=False: then nothing is proved."""
    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + time_limit_s
    s = inst.search
    outers = outer_configs(inst)
    # with per-operator tensor partitions, every layer plan of every outer (no dominance)
    total = summarize(inst, [o for o in outers for _ in range(plans_per_outer(inst, o))]).splits_total
    if total > max_candidates:
        from paraplan.solver.format import count
        est_s = count(total // ESTIMATED_RATE_PER_S)
        raise SpaceTooLarge(
            f"the declared space has {count(total)} candidates (limit {max_candidates:,});"
            f" at about {ESTIMATED_RATE_PER_S:,} per second that is ~{est_s} s")
    bar = _Progress(total, progress)
    done = feasible = 0
    best_val, best = float("inf"), None
    from paraplan.cost.loader import default_layer_split
    for o, c in ((o, c) for o in outers for c in all_plan_coefficients(inst, o)):
        v = o.virtual_stages
        if s.uniform_split:
            splits = np.array([default_layer_split(inst.model.layers, o.pp, v)], float)
        else:
            splits = compositions(inst.model.layers, o.pp, v)
        for n in splits:
            if deadline is not None and time.perf_counter() > deadline:
                return ExhaustiveResult(plan=best, iter_time_s=None if best is None else best_val,
                                        candidates=done, feasible=feasible, outer_configs=len(outers),
                                        wall_time_s=time.perf_counter() - t0, complete=False)
            r = _recompute_grid(n) if s.full_recompute else np.zeros((1, o.pp))
            nn = np.broadcast_to(n, r.shape)
            ok = schedule.fits(c, nn, r)
            done += len(r)
            if ok.any():
                t = schedule.iteration_time_s(c, nn[ok], r[ok])
                feasible += int(ok.sum())
                k = int(np.argmin(t))
                if t[k] < best_val * (1 - 1e-9):
                    best_val = float(t[k])
                    best = Plan.of(o, n, r[ok][k], c.partitions)
            bar.update(done)
    bar.update(total)
    assert done == total, f"enumerated {done} candidates but the space has {total}"
    return ExhaustiveResult(plan=best, iter_time_s=None if best is None else best_val,
                            candidates=done, feasible=feasible, outer_configs=len(outers),
                            wall_time_s=time.perf_counter() - t0)
