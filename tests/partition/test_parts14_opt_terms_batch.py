"""class_partitions.read_optimistic_terms: the optimistic terms (A, S, D) of many outers' classes
read in one tight_class_terms_of_blocks call (issue 33, rows 3 and 4; the search reads a node's
outers so before each comes up, search._Search._read_ahead).

Checked against OuterChoices._opt_terms read one outer at a time with a memo of its own (the
code before: one tight_class_terms call per class and scenario), float for float
(tobytes), on every layer-plan outer of tiny-2types at tp 4 (several pipeline depths, so the
batch pads shallow blocks), of the two-site instance with the three layout options (several
classes), and of a zero-bubble instance (the drain credit on the sum term); and on random
inputs: each of those blocks with its arrays scaled by random factors, so that the batch's
rows hold values no outer prices. Planted faults (the batch's answers handed to the wrong
keys; the drain credit left out) are caught.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import OPTIONS, _choices_of, tiny2  # noqa: E402
from test_plan_sync import two_sites  # noqa: E402
from test_zero_bubble_partitions import zero_bubble_partition_instance  # noqa: E402
from paraplan.solver import class_partitions  # noqa: E402
from paraplan.solver.bounds.one_class import tight_class_terms, tight_class_terms_of_blocks  # noqa: E402


def _instances():
    return (tiny2((8, 8), (4,), 8, 32), two_sites((8, 8), (4,), 4, 16, 100, None, **OPTIONS),
            zero_bubble_partition_instance(1))


def _fitting(inst):
    """The OuterChoices of `inst`'s layer-plan outers whose classes all fit some split, each
    with its optimistic builds, all sharing one fresh memo."""
    memo = {}
    out = []
    for _, ch in _choices_of(inst):
        ch.memo = memo
        if ch.optimistic(stop_unfit=True) is not None:
            out.append(ch)
    return out


def _as_bytes(terms) -> list[bytes]:
    return [x.tobytes() for x in terms]


def _alone(chs) -> list[list[bytes]]:
    """Each class's _opt_terms read one at a time (a memo of its own per outer)."""
    out = []
    for ch in chs:
        ch.memo, ch._opt_cache = {}, {}
        out.append([_as_bytes(ch._opt_terms(k)) for k in range(len(ch.o.classes))])
    return out


def _batched(chs) -> list[list[bytes]]:
    """Each class's _opt_terms after one read_optimistic_terms of them all (one memo)."""
    memo = {}
    for ch in chs:
        ch.memo, ch._opt_cache = memo, {}
    class_partitions.read_optimistic_terms(chs)
    keys = [ch._opt_terms_key(k) for ch in chs for k in range(len(ch.o.classes))]
    assert all(key in memo for key in keys)  # every class read by the batch, none left to _opt_terms
    return [[_as_bytes(ch._opt_terms(k)) for k in range(len(ch.o.classes))] for ch in chs]


def test_batched_optimistic_terms_are_each_outers_alone(monkeypatch):
    seen = {"pp": set(), "classes": 0, "drain": 0}
    caught = 0
    for inst in _instances():
        chs = _fitting(inst)
        assert len(chs) > 1
        for ch in chs:
            seen["pp"] |= {c.pp for c in ch.opt.values()}
            seen["classes"] = max(seen["classes"], len(ch.o.classes))
            seen["drain"] += bool(ch.opt[0, 0].layer_drain_saving_s.size)
        want = _alone(chs)
        assert _batched(chs) == want
        # planted fault: the batch's answers handed on reversed (to the wrong keys)
        with monkeypatch.context() as m:
            m.setattr(class_partitions, "tight_class_terms_of_blocks",
                      lambda blocks, *a: tight_class_terms_of_blocks(blocks, *a)[::-1])
            caught += _batched(chs) != want
    assert len(seen["pp"]) > 1 and seen["classes"] > 1 and seen["drain"] > 0 and caught == 3


def _random_blocks(rng, chs) -> list[tuple[dict, int, int, bool]]:
    """Every optimistic block of `chs` (its arrays, L, v, full recompute) with each array
    scaled by a random factor in [0.5, 2) (memory too: some rows then fit no split)."""
    out = []
    for ch in chs:
        for k in range(len(ch.o.classes)):
            (L, v, full), arrays = ch._opt_blocks(k)
            for a in arrays:
                out.append(({name: x * rng.uniform(0.5, 2.0) for name, x in a.items()}, L, v, full))
    return out


def test_scenario_terms_read_in_a_batch_are_each_blocks_alone():
    # random inputs: the arrays of real blocks scaled at random, read in one batch per
    # (L, v, full recompute) and one at a time, through _scenario_terms (drain credit included)
    rng = np.random.default_rng(14)
    checked = caught = 0
    for inst in _instances():
        chs = _fitting(inst)
        for _ in range(5):
            blocks = _random_blocks(rng, chs)
            by_read: dict = {}
            for a, L, v, full in blocks:
                by_read.setdefault((L, v, full), []).append(a)
            for (L, v, full), arrays in by_read.items():
                together = tight_class_terms_of_blocks(arrays, L, v, full)
                for a, t in zip(arrays, together):
                    want = class_partitions._scenario_terms([a], [tight_class_terms(a, L, v, full)], L)
                    got = class_partitions._scenario_terms([a], [t], L)
                    assert _as_bytes(got) == _as_bytes(want)
                    checked += 1
                    # planted fault: the drain credit left out (caught where a block has one)
                    if "layer_drain_saving_s" in a and a["layer_drain_saving_s"].max() > 0:
                        plain = {n: x for n, x in a.items() if n != "layer_drain_saving_s"}
                        caught += _as_bytes(class_partitions._scenario_terms([plain], [t], L)) != _as_bytes(want)
    assert checked > 50 and caught > 0
