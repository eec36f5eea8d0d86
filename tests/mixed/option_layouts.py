"""Every option family of a search expanded with no cutoff, as test_option_bound_admissible.py
and test_partitions_lazy.py check their bounds against what the families set up."""

from __future__ import annotations

from paraplan.solver import search as search_mod
from paraplan.solver.option_families import OptionFamily


def option_family_layouts(lazy):
    """(family index, node, partial layout) for every class layout an option family of `lazy`
    (search._Partials) sets up, each family opened and every partial choice expanded with no
    cutoff: `node` is the choice's node in lazy.ob, whose bound keyed the layouts it set up."""
    for f, fam in enumerate(lazy.families):
        if not isinstance(fam, OptionFamily):
            continue
        nodes = lazy.open_family(f, lambda lb: True)
        while nodes:
            kids = []
            for ch in nodes:
                start = len(lazy.partials)
                node = lazy.ob.nodes[ch.index]
                kids += [n for n in lazy.set_up([ch]) if isinstance(n, search_mod._Choice)]
                for part in lazy.partials[start:]:
                    yield f, node, part
            nodes = kids
