"""The listing's parts shared by content and the MoE rows shared by site (issue 33: DeepSeek-V3
on 2,048 H800 with idle GPUs lists 31,243 class layouts, each its own (replicas, depth)).

solver/space._Listing._invariants keeps each part it reads (expert layouts, slot modes, the
(sp, ZeRO, v) modes, the pairing) once per what it reads and shares it between layouts of equal
content (_interned), and keys the tallies by those parts' ids; solver/bounds/layouts._MoeRows
keys a block's rows by its site first and shares them between every block of that site and
expert layouts. Either could share too far (two contents under one id, two sites under one
row), which would list or bound a layout by another's. The references are independent of the
sharing: a fresh listing (nothing shared) per class layout, and each partial layout bounded
with a memo of its own; each check is run once with a planted fault to show it can fail."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_moelazy_partial_bound import _instance

from paraplan.solver import space
from paraplan.solver.bounds import layouts
from paraplan.solver.bounds.layouts import partial_bounds_s

SEEDS = (0, 1, 2, 3)


def _fields(b) -> tuple:
    """What a block lists (OuterBlock.specs, its tally) beside its classes and micro-batch."""
    return (b.vs, b.modes_left, b.layouts, b.slots_of_v, b.paired, b.unpaired, b.tally.counts, b.tally.first)


def _listing_mismatches(inst) -> int:
    """Blocks of the shared listing (declared_partials) that differ from a fresh listing of
    their class layout, read with nothing shared (a _Listing of its own per layout)."""
    parts = space.declared_partials(inst)
    lst = parts[0].listing
    bad = seen = 0
    for p in parts:
        for b in p.blocks():
            used = sorted({g for c in b.classes for g in c.stage_groups})
            tpg = dict(b.group_tp) if b.group_tp else {g: b.tp for g in used}
            fresh = space._Listing(inst, False, lst.modes, lst.rules)
            got = {blk.micro_batch: blk for blk in fresh.shape_blocks(b.family, tpg, b.cp, b.classes)}
            seen += 1
            bad += b.micro_batch not in got or _fields(got[b.micro_batch]) != _fields(b)
    assert seen
    return bad


def _bound_mismatches(inst) -> int:
    """Partial layouts whose bound read with every other (one memo, rows shared between them)
    differs from the bound read alone (a memo of its own)."""
    parts = space.declared_partials(inst)
    idx = list(range(len(inst.scenarios)))
    shared = partial_bounds_s(inst, parts, idx, "max", (), {}, {})
    alone = np.array([partial_bounds_s(inst, [p], idx, "max", (), {}, {})[0] for p in parts])
    return int(np.sum(~np.isclose(shared, alone, rtol=1e-12, atol=0.0) & ~(np.isinf(shared) & np.isinf(alone))))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("one_group", (True, False))
def test_shared_listing_equals_fresh_listing(seed, one_group):
    assert _listing_mismatches(_instance(seed, True, one_group)) == 0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("one_group", (True, False))
def test_moe_rows_shared_by_site_bound_as_alone(seed, one_group):
    assert _bound_mismatches(_instance(seed, True, one_group)) == 0


def test_a_part_shared_across_contents_is_caught(monkeypatch):
    # planted: the expert layouts shared by kind alone, whatever their content (the first
    # replica count's layouts read for every other)
    real = space._Listing._interned

    def too_far(self, kind, value, content):
        return real(self, kind, value, "any" if kind == "layouts" else content)

    monkeypatch.setattr(space._Listing, "_interned", too_far)
    assert sum(_listing_mismatches(_instance(seed, True, True)) for seed in SEEDS) > 0


def test_rows_shared_across_sites_are_caught(monkeypatch):
    # planted: a block's rows shared by its expert layouts and v values alone, across sites
    # (other micro-batch sizes, depths, tp, cp)
    real = layouts._MoeRows.block_rows

    def too_far(self, inst, b, vs, place, e, l_, memo):
        planted = self.__dict__.setdefault("planted", {})
        key = (id(b.layouts), vs)
        if key not in planted:
            planted[key] = real(self, inst, b, vs, place, e, l_, memo)
        return planted[key]

    monkeypatch.setattr(layouts._MoeRows, "block_rows", too_far)
    assert sum(_bound_mismatches(_instance(seed, True, True)) for seed in SEEDS) > 0
