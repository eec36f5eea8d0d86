"""Full readings of solver/class_partitions.py's OuterChoices: every candidate at once, and the
groups a choice keeps read one choice at a time."""

from __future__ import annotations

from paraplan.solver.class_partitions import Listing, OuterChoices


def kept_groups(ch: OuterChoices, x, cut: float) -> list:
    """(from OuterChoices._kept_groups) (group position, coefficients per scenario) of the
    groups of choice x's plans by replicated parameters (_split_bound, ascending count) that
    _bounded keeps at `cut` (class_kept_groups of x alone)."""
    return class_kept_groups(ch, x[0], [x], cut)[x]


def class_kept_groups(ch: OuterChoices, k: int, xs: list, cut: float) -> dict:
    """(from OuterChoices._class_kept_groups) Per choice x of class k in `xs`:
    kept_groups(ch, x, cut), every group of each span kept at SPLIT_SPANS read (the groups
    _split_bound would read with every span split). A span at the optimistic terms of all its
    plans is below each of its groups, so where the span is above `cut` each of its groups
    is, and it is dropped unsplit; the groups kept are those the groups read one by one keep
    (on 32 A100 + 32 H100 with the three options, 2,131 of 16,832 groups were kept, 606 of
    1,052 choices kept none)."""
    first = ch._class_spans(k, xs, {x: ch._groups_of(x)[3] for x in xs}, cut)
    out = {x: [(a, c) for (a, b), c in first.get(x, []) if b - a == 1] for x in xs}
    groups = {x: [(j, j + 1) for (a, b), _ in first.get(x, []) if b - a > 1 for j in range(a, b)] for x in xs}
    for x, got in ch._class_spans(k, xs, groups, cut).items():
        out[x] += [(a, c) for (a, _), c in got]
    return {x: sorted(got, key=lambda t: t[0]) for x, got in out.items()}


def expand_all(ch: OuterChoices, upper_s: float) -> Listing:
    """(from OuterChoices.expand_all) expand, then every child it leaves, until none is left:
    every candidate at once."""
    out, todo = Listing(), [None]
    while todo:
        got = ch.expand(upper_s, todo.pop())
        out.candidates += got.candidates
        out.pruned_by_bound += got.pruned_by_bound
        out.pruned_by_memory += got.pruned_by_memory
        out.pruned_by_dominance += got.pruned_by_dominance
        todo += [sub for _, sub in got.nodes]
    out.candidates.sort(key=lambda c: (c[0], c[1]))
    return out
