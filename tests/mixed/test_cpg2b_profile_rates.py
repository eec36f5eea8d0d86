"""OptionBounds._profile_rates and option_recompute's A* passes, read in fewer numpy calls
(issue 33, cpg2b): the same floats as the readings they replace.

- _profile_rates reads every way of a group's profiles in one pass (each way's D = 0.0 + r_1
  R_1 + r_2 R_2 ..., each profile's most D and least B by one way of every profile at a
  time). Checked against the loop it replaced (one way at a time, below, _loop_rates) on
  random one-group instances of 16 to 32 GPUs with classes_per_group 2 and idle_gpus, at the family's ranks
  and at 2, 4 and 8: every profile's arrays equal. Planted fault: each profile of several
  ways read without its last way is seen as different arrays.
- slowest_in_chunks_s and _stage_times with in-place sums and plain-index gathers: against
  the expressions they replaced (_old_stage_times, _old_tail), on drawn rows with relieved
  end stages (inf slope), with one mask and with a mask per row.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from randinst import random_instance
from test_opt3_one_mask import _rows

from paraplan.solver import search as search_mod
from paraplan.solver.bounds import option_recompute
from paraplan.solver.bounds.option_recompute import chunk_counts, slowest_in_chunks_s
from paraplan.solver.option_families import OptionFamily


def _one_group(seed: int):
    """random_instance(seed) on four times its one group's nodes (16 to 32 GPUs: profiles of
    up to 16 ways), with classes_per_group 2 and idle_gpus."""
    inst = random_instance(seed)
    group = dataclasses.replace(inst.cluster.groups[0], nodes=4 * inst.cluster.groups[0].nodes)
    return dataclasses.replace(inst, cluster=dataclasses.replace(inst.cluster, groups=(group,)),
                               search=dataclasses.replace(inst.search, classes_per_group=2, idle_gpus=True))


def _loop_rates(ob, key, fam, g, ways, qs, drop: bool = False) -> list[tuple]:
    """The reading before one pass: per profile, per way, 0.0 + r R summed class by class
    (`drop`: a profile of several ways read without its last)."""
    terms = ob.ways[("terms",) + key][1]
    shape = (len(ob.vs), len(ob.fb.mbs), len(ob.fb.idx))
    out = []
    for q in qs:
        top, least = np.zeros(shape), None
        for i in q.members[:-1] if drop and len(q.members) > 1 else q.members:
            d, b = 0.0, 0.0
            for pp, r in ways[i][1]:
                d, b = d + r * terms[pp][0], b + r * terms[pp][1]
            top = np.maximum(top, d)
            least = b if least is None else np.minimum(least, b)
        out.append((top, least + 0.0 * top))
    return out


def _same(x: list[tuple], y: list[tuple]) -> bool:
    return len(x) == len(y) and all(np.array_equal(a, c) and np.array_equal(b, d) for (a, b), (c, d) in zip(x, y))


@pytest.mark.parametrize("seed", [1, 4, 7, 11])
def test_profile_rates_are_the_loops_floats(seed):
    inst = _one_group(seed)
    parts = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    ob = parts.ob
    compared = dropped = 0
    for fam in (f for f in parts.families if isinstance(f, OptionFamily)):
        for root in ob._roots(fam):
            if root.raised:
                continue
            for j, g in enumerate(root.order):
                ways, levels = root.ways[j], root.levels[j]
                for ranks in (None, 2, 4, 8):
                    key = ob._rates_key(fam, g, ways, root.zeros, None, ranks, False)
                    got = ob._profile_rates(key, fam, g, ways, levels, None)
                    assert _same(got, _loop_rates(ob, key, fam, g, ways, levels))
                    compared += len(got)
                    dropped += not _same(got, _loop_rates(ob, key, fam, g, ways, levels, drop=True))
    assert compared > 50 and dropped > 0


def _old_stage_times(room, held, slope, cols, f, rho, head=None, counts=None):
    """_stage_times as it read before the in-place sums."""
    per_full = held - held / slope
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.where(per_full > 0, room / np.where(per_full > 0, per_full, 1.0), np.inf)
        n = np.arange(1, cols + 1, dtype=float) if counts is None else counts
        freed = (held / slope)[..., None]
        need = np.where(np.isfinite(slope)[..., None], np.maximum((n * held[..., None] - room[..., None]) / freed, 0.0),
                        np.where(n * held[..., None] <= room[..., None], 0.0, np.inf))
        t = n * f[..., None] + rho[..., None] * np.ceil(need - 1e-9)[:, None]
        if head is not None:
            t = t + head[..., None]
    return np.where((n <= np.floor(top + 1e-9)[..., None])[:, None], t, np.inf)


def test_stage_times_and_chunk_passes_are_the_old_floats():
    rng = np.random.default_rng(3304)
    finite = relieved = 0
    for stages, v, _ in itertools.product(range(2, 7), range(2, 5), range(10)):
        room, held, slope, f, rho, head = _rows(rng, int(rng.integers(1, 30)), stages)
        layers = stages * v + int(rng.integers(0, 13))
        if rng.random() < 0.5:  # relieved end stages: their state alone, no recompute
            slope[:, 0] = slope[:, -1] = np.inf
            relieved += 1
        cols = int(rng.integers(1, layers + 1))
        for counts in (None, np.arange(1, cols + 1, dtype=float)[::2]):
            old = _old_stage_times(room, held, slope, cols, f, rho, head, counts)
            new = option_recompute._stage_times(room, held, slope, cols, f, rho, head, counts)
            assert old.shape == new.shape and np.array_equal(old, new, equal_nan=True)
        first, last = (frozenset(((0,), (1,), (0, 1))[i]) for i in rng.integers(0, 3, 2).tolist())
        mask = chunk_counts(layers, stages, v, first, last)
        one = slowest_in_chunks_s(room, held, slope, layers, f, rho, mask, head)
        per_row = slowest_in_chunks_s(room, held, slope, layers, f, rho,
                                      np.broadcast_to(mask, (len(room), *mask.shape)).copy(), head)
        real = option_recompute._stage_times
        option_recompute._stage_times = _old_stage_times  # the old times under the new tail
        try:
            before = slowest_in_chunks_s(room, held, slope, layers, f, rho, mask, head)
        finally:
            option_recompute._stage_times = real
        assert np.array_equal(one, per_row) and np.array_equal(one, before)
        finite += int(np.isfinite(one).sum())
    assert finite > 300 and relieved > 30

