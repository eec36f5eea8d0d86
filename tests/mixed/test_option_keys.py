"""The slowest stage the option families' keys read (solver/bounds/option_recompute.py, issue
33), against brute force over every integer split of the layers:

- slowest_stage_each_s with a stage term on the last stage (the output layer): on random stages
  (floors, recompute, memory rows, output layer), the least over every split (each stage >= 1
  layer) of the slowest stage's time t_s(n) = head_s + n f_s + rho_s ceil(recomputed), with the
  recomputed layers that stage's memory forces, re-derived here from the module docstring's
  inequality;
- stage_class_slowest_s (a mixed layout's stage-wise class through two groups): the least over
  the orders of its groups, each stage at its place's in-flight count (pp - s), the two end
  stages relieved where the space runs the embedding / loss slots, the output layer on the
  last stage's group, every (sp, ZeRO) row of the memory terms.

Each computed A* must be at most the brute force (a bound), and equal to it wherever the
brute-force optimum is not held by a first layer (the one term the module reads weaker, see
slowest_stage_each_s), so a key raised by a few per cent fails here. Both also assert that the
output layer is read: on some case the brute force with it exceeds the brute force without."""

from __future__ import annotations

import itertools
import math

import numpy as np
from test_partitions_lazy import OPTIONS, tiny2
from test_plan_bound_admissible import WIDE

from paraplan.solver import search as search_mod
from paraplan.solver.bounds.option_recompute import RecomputeFloor, slowest_stage_each_s, stage_class_slowest_s


def _splits(layers: int, stages: int):
    """Every split of `layers` into `stages` parts of at least one."""
    for cut in itertools.combinations(range(1, layers), stages - 1):
        yield [b - a for a, b in zip((0, *cut), (*cut, layers))]


def _stage_time(n: int, room: float, held: float, freed: float, f: float, rho: float, head: float) -> float:
    """A stage's least time with n layers: held bytes per layer none recomputed, `freed` what
    recomputing one frees (0: none, the relieved end stages), room the bytes left for them; it
    recomputes r >= (n held - room) / freed of them, at most n (inf where even that overflows)."""
    over = n * held - room
    if over <= 0:
        return head + n * f
    if freed <= 0 or over > n * freed * (1 + 1e-12):
        return math.inf
    return head + n * f + rho * math.ceil(over / freed - 1e-9)


def _brute(layers, rows) -> float:
    """min over splits of max_s _stage_time; rows: per stage (room, held, freed, f, rho, head)."""
    best = math.inf
    for split in _splits(layers, len(rows)):
        best = min(best, max(_stage_time(n, *row) for n, row in zip(split, rows)))
    return best


def test_slowest_stage_with_the_output_layer_is_the_brute_force_split():
    rng = np.random.default_rng(33)
    exact = headed = cases = 0
    for _ in range(300):
        stages, layers = int(rng.integers(2, 5)), int(rng.integers(5, 11))
        f = rng.uniform(0.5, 2.0, stages)
        rho = rng.uniform(0.2, 1.0, stages)
        flight = np.arange(stages, 0, -1, dtype=float)
        a, c, state = rng.uniform(1.0, 3.0), rng.uniform(0.1, 0.5), rng.uniform(0.5, 2.0)
        held = state + flight * a
        freed = flight * (a - c)
        room = np.full(stages, rng.uniform(2.0, 30.0))
        head = np.zeros(stages)
        head[-1] = rng.uniform(0.0, 2.5)
        got = float(slowest_stage_each_s(room[None], held[None], (held / freed)[None], layers, f[None, None],
                                         rho[None, None], head=head[None, None])[0, 0])
        rows = list(zip(room, held, freed, f, rho, head))
        want = _brute(layers, rows)
        if not math.isfinite(want):
            assert not math.isfinite(got)
            continue
        cases += 1
        assert got <= want * (1 + 1e-12), (got, want)
        # exact wherever no stage's first layer holds the optimum (the term read weaker)
        first = max(_stage_time(1, *row) for row in rows)
        if first < want:
            assert got >= want * (1 - 1e-12), (got, want)
            exact += 1
        headed += want > _brute(layers, [row[:5] + (0.0,) for row in rows]) * (1 + 1e-9)
    assert cases > 100 and exact > cases // 2 and headed > 0


def test_stage_wise_class_reads_each_order_at_its_places():
    # a Llama-3 70B-wide layer and vocabulary on tiny-2types (memory binds at a few layers a
    # stage; the output layer is about a layer's time), the options on
    inst = tiny2((4, 4), (1,), 6, 16, model=dict(WIDE, vocab=128256), **OPTIONS)
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    fb = lazy.fb
    rc = RecomputeFloor(fb)
    zeros, L, tp, cp = lazy.ob.pipe_zeros, inst.model.layers, 1, 1
    most = sum(g.num_gpus for g in inst.cluster.groups)
    modes = list(itertools.product(rc.sps(tp, cp), zeros))
    exact = headed = cases = 0
    for counts in [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 2)]:
        got = stage_class_slowest_s(rc, dict(zip((0, 1), counts)), tp, cp, zeros, most)
        pp = sum(counts)
        for bi, b in enumerate(fb.mbs.astype(int).tolist()):
            for si in range(len(fb.idx)):
                want = plain = math.inf
                for order in itertools.permutations((0, 1)):
                    groups = [g for g in order for _ in range(counts[g])]
                    for sp, z in modes:
                        rows = []
                        for s, g in enumerate(groups):
                            room, state, a, c = rc.stage_terms(g, tp, cp, pp, b, sp, z, most)
                            end = fb.slot_c > 0 and s in (0, pp - 1)  # relieved: its state alone
                            held = state if end else state + (pp - s) * a
                            freed = 0.0 if end else (pp - s) * (a - c)
                            rows.append((room, held, freed, fb.floor(g, tp, cp)[bi, si], rc.rc_fwd_s(g, tp, cp)[bi, si],
                                         rc.head_s(g, tp, cp)[bi, si] if s == pp - 1 else 0.0))
                        want = min(want, _brute(L, rows))
                        plain = min(plain, _brute(L, [row[:5] + (0.0,) for row in rows]))
                value = float(got[bi, si])
                if not math.isfinite(want):
                    continue
                cases += 1
                assert value <= want * (1 + 1e-12), (counts, b, value, want)
                exact += value >= want * (1 - 1e-12)
                headed += want > plain * (1 + 1e-9)
    assert cases > 0 and exact > cases // 2 and headed > 0
