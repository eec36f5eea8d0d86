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
output layer is read: on some case the brute force with it exceeds the brute force without.

Interleaved (v > 1; issue 33), each stage holds whole chunks of v: its decoder layers plus the
slot it counts (the embedding on stage 0, the loss on the last, where a slot mode of v flags it)
a multiple of v (cost/pipeline_split.chunk_problem), at interleaving's in-flight counts
(cost/coefficients.in_flight_micro_batches at the least count a class of several runs, 2 pp):
- slowest_in_chunks_s against brute force over every split whose counts are allowed;
- stage_class_slowest_s at v against brute force over every split chunk_problem accepts for
  some slot mode of v (cost/space_rules.slot_modes), the ends the mode flags relieved.
Each must be at most the brute force and equal to it on most cases (the bound reads the union
of the slot modes' counts and reliefs, its one relaxation), and the chunks must be read: on
some case the brute force in chunks exceeds the brute force at single layers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from test_partitions_lazy import OPTIONS, tiny2
from test_plan_bound_admissible import WIDE

from paraplan.cost.coefficients import in_flight_micro_batches
from paraplan.cost.pipeline_split import chunk_problem
from paraplan.cost.space_rules import slot_modes, split_slots_run
from paraplan.solver import search as search_mod
from paraplan.solver.bounds.option_recompute import (RecomputeFloor, chunk_counts, slowest_in_chunks_s,
                                                     slowest_stage_each_s, stage_class_slowest_s)


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


def _brute_in(layers, rows, ok) -> float:
    """min over the splits `ok(split)` accepts of max_s _stage_time; rows: per stage (room,
    held, freed, f, rho, head)."""
    best = math.inf
    for split in _splits(layers, len(rows)):
        if ok(split):
            best = min(best, max(_stage_time(n, *row) for n, row in zip(split, rows)))
    return best


def _brute(layers, rows) -> float:
    """_brute_in over every split."""
    return _brute_in(layers, rows, lambda split: True)


def _random_stages(rng, stages: int, room_lo: float, room_hi: float):
    """(f, rho, held, freed, room, head) of `stages` drawn stages: per-layer times f and
    recompute shares rho, an in-flight count falling from the first stage to the last (held
    and freed memory per layer grow with it), one room for all in [room_lo, room_hi), and an
    output-layer head on the last stage only."""
    f = rng.uniform(0.5, 2.0, stages)
    rho = rng.uniform(0.2, 1.0, stages)
    flight = np.arange(stages, 0, -1, dtype=float)
    a, c, state = rng.uniform(1.0, 3.0), rng.uniform(0.1, 0.5), rng.uniform(0.5, 2.0)
    room = np.full(stages, rng.uniform(room_lo, room_hi))
    head = np.zeros(stages)
    head[-1] = rng.uniform(0.0, 2.5)
    return f, rho, state + flight * a, flight * (a - c), room, head


def test_slowest_stage_with_the_output_layer_is_the_brute_force_split():
    rng = np.random.default_rng(33)
    exact = headed = cases = 0
    for _ in range(300):
        stages, layers = int(rng.integers(2, 5)), int(rng.integers(5, 11))
        f, rho, held, freed, room, head = _random_stages(rng, stages, 2.0, 30.0)
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


def _stage_wise(inst) -> tuple:
    """What the stage-wise class tests read of `inst` at tp 1, cp 1: the search's partials, their
    family bounds, its recompute floor, the pipeline ZeRO stages, the layers, tp, cp, the GPUs in
    all and the (sp, ZeRO) modes."""
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    rc = RecomputeFloor(lazy.fb)
    zeros, tp, cp = lazy.ob.pipe_zeros, 1, 1
    return (lazy, lazy.fb, rc, zeros, inst.model.layers, tp, cp, sum(g.num_gpus for g in inst.cluster.groups),
            list(itertools.product(rc.sps(tp, cp), zeros)))


def test_stage_wise_class_reads_each_order_at_its_places():
    # a Llama-3 70B-wide layer and vocabulary on tiny-2types (memory binds at a few layers a
    # stage; the output layer is about a layer's time), the options on
    inst = tiny2((4, 4), (1,), 6, 16, model=dict(WIDE, vocab=128256), **OPTIONS)
    lazy, fb, rc, zeros, L, tp, cp, most, modes = _stage_wise(inst)
    exact = headed = cases = 0
    for counts in [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 2)]:
        got = stage_class_slowest_s(rc, dict(zip((0, 1), counts)), tp, cp, zeros, most)[0]
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


def test_slowest_in_chunks_is_the_brute_force_split():
    rng = np.random.default_rng(3301)
    exact = chunked = cases = 0
    for _ in range(300):
        stages, v = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        layers = int(rng.integers(stages * v, stages * v + 7))
        # the slots each end may count beside its layers (a nonempty subset of {0, 1})
        first, last = (frozenset(((0,), (1,), (0, 1))[i]) for i in rng.integers(0, 3, 2).tolist())
        f, rho, held, freed, room, head = _random_stages(rng, stages, 4.0, 40.0)
        allowed = chunk_counts(layers, stages, v, first, last)
        got = float(slowest_in_chunks_s(room[None], held[None], (held / freed)[None], layers, f[None, None],
                                        rho[None, None], allowed, head[None, None])[0, 0])
        rows = list(zip(room, held, freed, f, rho, head))

        def whole(split):  # each stage's layers and a slot it may count fill whole chunks of v
            offs = [first if s == 0 else last if s == stages - 1 else {0} for s in range(stages)]
            return all(any((n + o) % v == 0 for o in off) for n, off in zip(split, offs))
        want = _brute_in(layers, rows, whole)
        if not math.isfinite(want):  # no split (the counts sum to the layers only above them): any got
            continue
        cases += 1
        assert got <= want * (1 + 1e-12), (got, want)
        exact += got >= want * (1 - 1e-12)
        chunked += want > _brute(layers, rows) * (1 + 1e-9)
    assert cases > 100 and exact > cases * 0.9 and chunked > cases // 4


@pytest.mark.parametrize("partitions", [False, True])
def test_stage_wise_class_at_v_reads_whole_chunks_at_interleaved_counts(partitions):
    # as test_stage_wise_class_reads_each_order_at_its_places, 12 layers; without per-operator
    # partitions the release runs the slots (v = 2 and 3: modes with the embedding or loss)
    keys = dict(OPTIONS, virtual_stages=[1, 2, 3, 4]) | ({} if partitions else {"tensor_partitions": ["megatron"]})
    inst = tiny2((4, 4), (1,), 12, 32, model=dict(WIDE, vocab=128256), **keys)
    assert split_slots_run(inst.job, inst.search) is not partitions
    lazy, fb, rc, zeros, L, tp, cp, most, modes = _stage_wise(inst)
    exact = chunked = cases = 0
    vs = (2, 3, 4)
    for counts in [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3)]:
        pp = sum(counts)
        got = stage_class_slowest_s(rc, dict(zip((0, 1), counts)), tp, cp, zeros, most, vs)
        for vi, v in enumerate(vs):
            flight = in_flight_micro_batches(pp, 2 * pp, v)  # a class of several runs >= 2 pp
            slots = slot_modes(L, v, split_slots_run(inst.job, inst.search))
            for bi, b in enumerate(fb.mbs.astype(int).tolist()):
                for si in range(len(fb.idx)):
                    want = single = math.inf
                    for (e, l), order in itertools.product(slots, itertools.permutations((0, 1))):
                        groups = [g for g in order for _ in range(counts[g])]
                        for sp, z in modes:
                            rows = []
                            for s, g in enumerate(groups):
                                room, state, a, c = rc.stage_terms(g, tp, cp, pp, b, sp, z, most)
                                end = s == 0 and e or s == pp - 1 and l  # a short chunk: its state alone
                                rows.append((room, state if end else state + flight[s] * a,
                                             0.0 if end else flight[s] * (a - c), fb.floor(g, tp, cp)[bi, si],
                                             rc.rc_fwd_s(g, tp, cp)[bi, si],
                                             rc.head_s(g, tp, cp)[bi, si] if s == pp - 1 else 0.0))
                            want = min(want, _brute_in(L, rows, lambda split: chunk_problem(split, v, e, l) is None))
                            single = min(single, _brute(L, rows))
                    value = float(got[vi, bi, si])
                    if not math.isfinite(want):
                        continue
                    cases += 1
                    assert value <= want * (1 + 1e-12), (counts, v, b, value, want)
                    exact += value >= want * (1 - 1e-12)
                    chunked += want > single * (1 + 1e-9)
    assert cases > 10 and exact > cases * 0.75 and chunked > 0
