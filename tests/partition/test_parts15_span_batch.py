"""The root re-key's span coefficients built in one batch per class and scenario
(solver/class_partitions.OuterChoices._build_spans, _spans_below, _span_terms; issue 33, rows 3
and 4).

_span_coeffs gave each span (an open choice's plans whose replicated parameters lie in
values[a:b]) the elementwise minimum of two builds at its optimistic terms, one _below call
each: a build_and_backward_syncs read where the larger backward lowers only the syncs, else
two full builds. _build_spans reads every span not kept yet of one class in one build_plans
call (and one build_syncs call of the backwards) per scenario, each span's terms kept by its
tables (_span_terms). Checked against the fresh reading (the mask, optimistic_terms and one
_below per span: the code before), bit for bit in every array of the coefficients, on random
spans of every open choice of the layer-plan outers of two small mixed instances (ZeRO 0-3, a
pipeline or none: both of _below's paths), of a zero-bubble instance, read in random
batches and again from the memo. Planted faults (the batch's builds handed to the wrong spans;
the larger backward's syncs left out) are caught.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import _choices_of, tiny2  # noqa: E402
from test_plan_sync import two_sites  # noqa: E402
from test_zero_bubble_partitions import zero_bubble_partition_instance  # noqa: E402

from paraplan.cost.coefficients import backward_lowers_only_syncs  # noqa: E402
from paraplan.solver import class_partitions  # noqa: E402
from paraplan.solver.class_partitions import OuterChoices, _const  # noqa: E402
from paraplan.solver.partition_plans import optimistic_terms  # noqa: E402


def _instances():
    return [tiny2((8, 8), (4,), 8, 32, zero=[0, 1, 2, 3], micro_batch=[1, 2]),
            two_sites((8, 8), (4,), 4, 16, 100, None, zero=[0, 3]),
            zero_bubble_partition_instance(1)]


def _arrays(c) -> list[bytes]:
    """Every array of a StageCoefficients, as bytes (shape and every float)."""
    return [(f.name, np.asarray(getattr(c, f.name)).shape, np.asarray(getattr(c, f.name)).tobytes())
            for f in dataclasses.fields(c) if isinstance(getattr(c, f.name), np.ndarray)]


def _fresh(ch, x, a: int, b: int) -> list:
    """The code before: the span's plans masked, their optimistic terms, one _below each."""
    k, g = x
    per, rep, values, _ = ch._groups_of(x)
    mask = (rep >= values[a]) & (rep <= values[b - 1])
    return [ch._below(i, k, {g: _const(lo)}, {g: _const(hi)})
            for i, (lo, hi) in zip(ch.scenarios, [optimistic_terms(t, r[mask]) for t, r in per])]


def _draws(ch, rng: random.Random) -> dict:
    """Per class with open choices, (x, a, b) spans of its choices: the first round's and a few
    drawn at random (single groups and wider), shuffled."""
    out = {}
    for x in ch.open:
        n = len(ch._groups_of(x)[2])
        spans = list(ch._groups_of(x)[3])
        for _ in range(3):
            a = rng.randrange(n)
            spans.append((a, rng.randint(a + 1, n)))
        out.setdefault(x[0], []).extend((x, a, b) for a, b in spans)
    for items in out.values():
        rng.shuffle(items)
    return out


def _readings(seed: int, every: int = 3):
    """(fresh, batched, again) arrays per drawn span of every `every`-th layer-plan outer, and
    the paths of _below read (True: the syncs-only second build)."""
    rng = random.Random(seed)
    got, paths = [], set()
    for inst in _instances():
        for n, (o, ch) in enumerate(_choices_of(inst)):
            if n % every:
                continue
            ch.optimistic()
            for k, items in _draws(ch, rng).items():
                paths.add(backward_lowers_only_syncs(inst, ch.co[k]))
                ch.memo.clear()
                cut = rng.randrange(1, len(items) + 1)  # two batches, the second partly kept
                ch._build_spans(k, items[:cut])
                ch._build_spans(k, items)
                for x, a, b in items:
                    per, rep, values, _ = ch._groups_of(x)
                    batched = ch.memo[ch._span_key(x, values, a, b)]
                    again = ch._span_coeffs(x, per, rep, values, a, b)
                    got.append(([_arrays(c) for c in _fresh(ch, x, a, b)], [_arrays(c) for c in batched],
                                again is batched))
    return got, paths


def test_batched_spans_are_the_fresh_reading_bit_for_bit():
    got, paths = _readings(seed=15)
    assert len(got) >= 200 and paths == {True, False}
    for fresh, batched, kept in got:
        assert batched == fresh
        assert kept  # _span_coeffs answers from the memo _build_spans filled


def test_span_terms_are_kept_by_their_tables():
    inst = tiny2((8, 8), (4,), 8, 32)
    seen = 0
    for _, ch in _choices_of(inst)[:6]:
        for x in ch.open:
            per, rep, values, spans = ch._groups_of(x)
            for a, b in list(spans) + [(0, len(values))]:
                mask = (rep >= values[a]) & (rep <= values[b - 1])
                want = [optimistic_terms(t, r[mask]) for t, r in per]
                first = OuterChoices._span_terms(per, rep, values, a, b)
                assert first == want
                assert OuterChoices._span_terms(per, rep, values, a, b) is first
                # another table's rows (a copy: another object) are not read from the kept entry
                other = [(t, r.copy()) for t, r in per]
                assert OuterChoices._span_terms(other, rep, values, a, b) is not first
                seen += 1
    assert seen >= 10


def test_planted_faults_are_caught(monkeypatch):
    mine = OuterChoices._spans_below

    def shifted(self, si, k, batch):  # each span handed its neighbour's build
        out = mine(self, si, k, batch)
        return out[1:] + out[:1]
    monkeypatch.setattr(OuterChoices, "_spans_below", shifted)
    got, _ = _readings(seed=15, every=6)
    assert any(batched != fresh for fresh, batched, _ in got)
    monkeypatch.setattr(OuterChoices, "_spans_below", mine)

    def no_backward(inst, o, fns, *args, **kwargs):  # the larger backward's syncs left out
        return [(np.full(o.pp, np.inf), np.full(o.pp, np.inf)) for _ in fns]
    monkeypatch.setattr(class_partitions, "build_syncs", no_backward)
    got, _ = _readings(seed=15, every=6)
    assert any(batched != fresh for fresh, batched, _ in got)
