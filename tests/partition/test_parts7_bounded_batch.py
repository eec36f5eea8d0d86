"""class_partitions.OuterChoices._bounded_many and _class_kept_groups: the root re-key's spans
of every open choice of one class bounded in one read per round (issue 33, rows 3 and 4).

Checked against the reading one choice at a time (the code before: _bounded's one-member
_class_terms, every other stage from the optimistic build, and each choice's halving run
alone): on every layer-plan outer of tiny-2types at tp 4 and of the two-site instance with
the three layout options (several classes and groups), at no cut and at cuts around the
optimistic bound (so some spans are dropped and some split), the same keep/drop answers and
the same kept groups with the same coefficient objects. The batch's (A, S, D, fits) are also
compared row for row, float for float, with each entry's one-member read. A planted fault
(each row's other members read at their first span instead of the optimistic build) is caught.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import OPTIONS, _choices_of, tiny2  # noqa: E402
from test_plan_sync import two_sites  # noqa: E402
from oracles.class_partitions import class_kept_groups  # noqa: E402


def _terms_alone(ch, k, g, coeffs):
    """(A, S, D, fits) of `coeffs` read as the one member of class k's read (the code before)."""
    tmp = {(k, g, j + 1): c for j, c in enumerate(coeffs)}
    return ch._class_terms(k, [(k, g)], {(k, g): list(range(len(coeffs) + 1))},
                           np.arange(1, len(coeffs) + 1)[:, None], tmp, ch.opt)


def _bounded_alone(ch, k, g, coeffs, cut):
    A, Sm, D, fits = _terms_alone(ch, k, g, coeffs)
    per = [(A, Sm, D) if kk == k else tuple(np.broadcast_to(x, (len(coeffs),) + x.shape[1:])
                                            for x in ch._opt_terms(kk))
           for kk in range(len(ch.o.classes))]
    return fits & (ch._combination_bounds(per) <= cut)


def _kept_alone(ch, x, cut):
    """_kept_groups of choice x read alone, every round's spans by _bounded_alone."""
    k, g = x
    per, rep, values, spans = ch._plan_groups(x)
    out = []
    while spans:
        coeffs = [ch._span_coeffs(x, per, rep, values, a, b) for a, b in spans]
        ok = _bounded_alone(ch, k, g, coeffs, cut)
        nxt = []
        for (a, b), c, y in zip(spans, coeffs, ok):
            if y and b - a == 1:
                out.append((a, c))
            elif y:
                nxt += [(j, j + 1) for j in range(a, b)]
        spans = nxt
    return sorted(out, key=lambda t: t[0])


def _first_spans(ch, x):
    """The coefficients of choice x's first-round spans (as _class_kept_groups reads them)."""
    per, rep, values, spans = ch._plan_groups(x)
    return [ch._span_coeffs(x, per, rep, values, a, b) for a, b in spans]


def _faulty_rows(ch, k, batch):
    """The batch's rows with every other member at its first entry (a planted fault)."""
    members = [(k, g) for g, _ in batch]
    tmp = {(k, g, j + 1): c for g, coeffs in batch for j, c in enumerate(coeffs)}
    kept = {x: list(range(len(c) + 1)) for x, (_, c) in zip(members, batch)}
    rows = []
    for col, (_, coeffs) in enumerate(batch):
        for j in range(len(coeffs)):
            rows.append([j + 1 if c == col else min(1, len(kept[x]) - 1) for c, x in enumerate(members)])
    return ch._class_terms(k, members, kept, np.array(rows, int), tmp, ch.opt)


def test_bounded_many_reads_each_row_as_it_reads_alone():
    checked = caught = multi = 0
    for inst in (tiny2((8, 8), (4,), 8, 32), two_sites((8, 8), (4,), 4, 16, 100, None, **OPTIONS)):
        for o, ch in _choices_of(inst):
            if ch.optimistic(stop_unfit=True) is None:
                continue
            root = ch.optimistic_bound()
            for k in sorted({x[0] for x in ch.open}):
                xs = [x for x in ch.open if x[0] == k]
                batch = [(x[1], _first_spans(ch, x)) for x in xs]
                batch = [(g, c) for g, c in batch if c]
                if not batch:
                    continue
                multi += len(batch) > 1
                for cut in (math.inf, root, root * 1.01, root * 1.05):
                    got = ch._bounded_many(k, batch, cut)
                    for (g, coeffs), y in zip(batch, got):
                        assert y.tolist() == _bounded_alone(ch, k, g, coeffs, cut).tolist()
                    # the kept groups: the same positions and the very coefficients read alone
                    together = class_kept_groups(ch, k, xs, cut)
                    for x in xs:
                        want = _kept_alone(ch, x, cut)
                        assert [(j, id(c)) for j, c in together[x]] == [(j, id(c)) for j, c in want]
                    checked += 1
                # the terms row for row, float for float, and the planted fault
                members = [(k, g) for g, _ in batch]
                sizes = [len(c) for _, c in batch]
                picks = np.zeros((sum(sizes), len(members)), int)
                at = np.cumsum([0] + sizes)
                for col, n in enumerate(sizes):
                    picks[at[col]:at[col + 1], col] = np.arange(1, n + 1)
                tmp = {(k, g, j + 1): c for g, coeffs in batch for j, c in enumerate(coeffs)}
                kept = {x: list(range(n + 1)) for x, n in zip(members, sizes)}
                whole = ch._class_terms(k, members, kept, picks, tmp, ch.opt)
                alone = [_terms_alone(ch, k, g, coeffs) for g, coeffs in batch]
                for t in range(4):
                    want = np.concatenate([a[t] for a in alone])
                    assert whole[t].tobytes() == want.tobytes()
                if len(batch) > 1:
                    bad = _faulty_rows(ch, k, batch)
                    caught += any(bad[t].tobytes() != whole[t].tobytes() for t in range(3))
    assert checked >= 20 and multi > 0 and caught > 0
