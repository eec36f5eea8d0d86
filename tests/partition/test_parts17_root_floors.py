"""A layer-plan root's priced floor read ahead with other roots' (solver/class_partitions.
root_floor, list_root, _read_floors; search._LayerPlans._priced_out), and a node keyed again
keeping its floor (search._LayerPlans._children; issue 33, row 4).

The floor is OuterChoices.priced_floors([None]) (checked against the exact split DP by
test_parts13_priced_floors); here the batched reading is checked against it read alone, one
outer at a time, float for float:
- _read_floors of a random subset of the layer-plan outers of tiny-2types at tp 4 and of the
  two-site instance with a Llama-3 70B-wide layer (lone and several classes, pipelines of
  several depths in one batch), in a random order, equals each outer's priced_floors alone;
- root_floor, the roots listed at their optimistic keys in one memo and asked in key order at
  random bars (as the search's heap brings them up), gives each root its floor alone, reads
  each root at most once, and reads ahead only roots keyed at most the bar;
- a first-level node keyed again by its linked key keeps the floor read for it, equal to the
  floor read afresh float for float, and its own children read theirs afresh;
- planted faults: the rows' floors handed to the wrong outers (the batch reversed), a root's
  floor read at another's key, and a node's floor carried to its children change some answer.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import tiny2  # noqa: E402
from test_plan_sync import WIDE, two_sites  # noqa: E402

from paraplan.cost.class_coefficients import class_outers  # noqa: E402
from paraplan.solver import class_partitions as CP  # noqa: E402
from paraplan.solver import search as search_mod  # noqa: E402
from paraplan.solver.space import declared_outers  # noqa: E402


def _roots(inst, memo: dict) -> list:
    """(optimistic key, OuterChoices) of every outer of `inst` with layer plans beyond
    all-Megatron's that fits, sharing `memo` (as the search's outers do)."""
    out = []
    for i, o in enumerate(declared_outers(inst)):
        ch = CP.OuterChoices(inst, o, [0], search_mod.placer(inst, o), class_outers(inst.job, o),
                             lambda coeffs, o=o: search_mod.problem_of(inst, o, "nominal", coeffs, prescaled=True),
                             memo=memo)
        if ch.total > 1 and ch.optimistic(stop_unfit=True) is not None:
            out.append(((ch.optimistic_bound(), i, 1), ch))
    return out


def _instances():
    return (tiny2((8, 8), (4,), 8, 32), two_sites((8, 8), (4,), 8, 32, 100, WIDE))


def test_floors_read_together_equal_each_read_alone():
    rng = np.random.default_rng(17)
    checked = finite = depths = faults = 0
    for inst in _instances():
        roots = [ch for _, ch in _roots(inst, {})]
        alone = {id(ch): float(ch.priced_floors([None])[0]) for ch in roots}
        depths = max(depths, len({ch.o.classes[0].stage_groups.__len__() for ch in roots}))
        for _ in range(6):
            pick = [roots[j] for j in rng.permutation(len(roots))[:int(rng.integers(2, len(roots) + 1))]]
            got = CP._read_floors(pick)
            assert [np.float64(f).tobytes() for f in got] == [np.float64(alone[id(ch)]).tobytes() for ch in pick]
            finite += sum(math.isfinite(f) for f in got)
            checked += len(pick)
            faults += got[::-1] != [alone[id(ch)] for ch in pick]
    assert checked >= 50 and finite >= 20 and depths > 1 and faults > 0


def _come_up(roots: list, bars: list, fault: bool = False) -> tuple[list, list, int]:
    """Each root listed (list_root), then asked for its root_floor in key order at the bar of
    `bars` at its turn (skipped above it: the search stops first): (root, floor) per root
    asked, (root, bar) per root read, and how many asked were read ahead. `fault`: each root
    asked for the next root's floor."""
    reads, bar_now = [], [math.inf]
    real = CP._read_floors

    def counted(outers):
        reads.extend((ch, bar_now[0]) for ch in outers)
        return real(outers)
    CP._read_floors = counted
    try:
        for key, ch in roots:
            CP.list_root(ch, key)
        got, before = [], 0
        for r, ((key, ch), bar) in enumerate(zip(roots, bars)):
            if key[0] > bar:
                continue
            bar_now[0] = bar * (1 + CP.REL_TOL)
            asked = roots[(r + 1) % len(roots)][1] if fault else ch
            n = len(reads)
            got.append((ch, CP.root_floor(asked, bar_now[0])))
            before += len(reads) == n
        return got, reads, before
    finally:
        CP._read_floors = real


def test_roots_come_up_with_their_own_floors():
    checked = ahead = faults = skipped = 0
    for inst in _instances():
        for falling in (False, True):
            roots = sorted(_roots(inst, {}), key=lambda t: t[0])
            alone = {id(ch): float(ch.priced_floors([None])[0]) for _, ch in roots}
            keys = np.array([k[0] for k, _ in roots])
            # a bar above every key, or one falling from the keys' 80th percentile to their median
            bars = np.linspace(np.quantile(keys, 0.8), np.median(keys), len(keys)) if falling else \
                np.full(len(keys), keys.max() * 1.01)
            got, reads, before = _come_up(roots, bars.tolist())
            assert [np.float64(f).tobytes() for _, f in got] == [np.float64(alone[id(ch)]).tobytes() for ch, _ in got]
            assert len({id(ch) for ch, _ in reads}) == len(reads)  # each root read once at most
            key_of = {id(ch): k[0] for k, ch in roots}
            assert all(key_of[id(ch)] <= bar for ch, bar in reads)  # only roots that can still win
            checked += len(got)
            ahead += before
            skipped += len(got) < len(roots)
            fresh = sorted(_roots(inst, {}), key=lambda t: t[0])
            bad, _, _ = _come_up(fresh, bars.tolist(), fault=True)
            faults += [f for _, f in bad] != [alone[id(ch)] for ch, _ in got]
    assert checked >= 30 and ahead > 0 and skipped > 0 and faults > 0


def test_a_node_keyed_again_keeps_the_floor_read_for_it():
    # a first-level node comes up and comes back keyed by its linked key (the same plans): its
    # child keeps its floor (_LayerPlans._children), equal to the floor read afresh; its own
    # children (other plans) read theirs, and the parent's floor carried to them is caught
    again = finite = faults = 0
    for inst in _instances():
        for _, ch in _roots(inst, {}):
            if len(ch.o.classes) != 1:
                continue
            for lb, kid in ch.expand(math.inf, None).nodes[:4]:
                floor = float(ch.priced_floors([kid])[0])
                node = search_mod._LayerPlans(ch, (lb, 0, 1), inst, "nominal", False, node=kid, priced_s=floor)
                for step in range(2):  # its linked key, then its own step
                    lst = ch.expand(math.inf, node.node)
                    kids = node._children(lst.nodes, math.inf, SimpleNamespace(pruned_by_bound=0))
                    fresh = ch.priced_floors([sub for _, sub in lst.nodes])
                    assert np.array([k.priced_s for k in kids]).tobytes() == fresh.tobytes()
                    again += sum(sub.sets == node.node.sets for _, sub in lst.nodes)
                    finite += np.isfinite(fresh).sum()
                    faults += step == 1 and any(f != node.priced_s for f in fresh.tolist())
                    if not kids:
                        break
                    node = kids[0]
    assert again > 0 and finite > 0 and faults > 0
