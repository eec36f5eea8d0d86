"""StageRecompute.slowest_s reads no micro-batch size at which the family's lone class has no
configuration (stage_recompute.runs_micro_batch, issue 33): there _combos bounds the choice by
inf whatever the term is. Checked against reading every size: on every stage family of a
24-GPU group with idle GPUs (dp 1 to 24 over a batch of 48, so most dp leave some sizes
without a whole micro-batch count), memory that binds and interleaving, each family's bounds,
valid masks and every valid z1 / zv must be the very floats of the unmasked read. A planted
mask that also skips a size with configurations must change some bound (the term matters)."""

from __future__ import annotations

import numpy as np
import pytest
from test_idle3_one_group_batched import _families, _instance

from paraplan.solver.bounds import stage_recompute


def _read_all(fams, fresh):
    fb = fresh()
    out = []
    for fam in fams:
        index, bounds, terms = fb._combos(fam, recompute=True, refusals=True)
        z1, zv, _, _, valid, _ = terms
        out.append((index, bounds, valid, np.where(valid, z1, 0.0), np.where(valid, zv, 0.0)))
    return out


def _same(a, b) -> bool:
    return all(len(x) == len(y) and all(np.array_equal(p, q, equal_nan=True) for p, q in zip(x, y))
               for x, y in zip(a, b))


@pytest.fixture(scope="module")
def setup():
    inst = _instance()
    fams, fresh = _families(inst)
    gb = inst.job.global_batch
    skipped = {(f.dp, b) for f in fams for b in (1, 2, 4) if not stage_recompute.runs_micro_batch(gb, b, f.dp)}
    assert len(skipped) > 10  # the mask is exercised
    return fams, fresh


def test_masked_sizes_change_no_bound(setup, monkeypatch):
    fams, fresh = setup
    masked = _read_all(fams, fresh)
    monkeypatch.setattr(stage_recompute, "runs_micro_batch", lambda gb, b, dp: True)
    assert _same(masked, _read_all(fams, fresh))


def test_a_mask_on_a_size_that_runs_is_caught(setup, monkeypatch):
    fams, fresh = setup
    masked = _read_all(fams, fresh)
    plain = stage_recompute.runs_micro_batch
    # planted: micro-batch 1 skipped where it runs
    monkeypatch.setattr(stage_recompute, "runs_micro_batch", lambda gb, b, dp: b != 1 and plain(gb, b, dp))
    assert not _same(masked, _read_all(fams, fresh))
