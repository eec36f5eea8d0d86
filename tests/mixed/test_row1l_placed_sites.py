"""cost/class_coefficients.class_placement keeps each group's interned site by what group_site
reads of the configuration (_placed_site: the group's tp, cp, whether tp is per group, the
expert layout and the ring), and class_outer keeps one Outer per what it reads. On random
mixed clusters (one class per group, two per group, a tp per group), every class of every
declared configuration, placed with the caches shared in a shuffled order, has the sites
group_site builds for it afresh (equal records) and the Outer class_outer builds with its cache
emptied; ring_links is group_site's dp and edp links. A site cache keyed without the ring (a
planted fault) gives some class another configuration's ring."""

from __future__ import annotations

import dataclasses
import random

from randinst import group_tp_instance, random_cluster_instance

from paraplan.cost import class_coefficients
from paraplan.cost.class_coefficients import class_outers, class_placement, group_site, ring_links
from paraplan.solver.space import declared_outers


def _instances():
    for seed in (1, 2, 3):
        inst = random_cluster_instance(seed)
        yield inst
        yield dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=2))
    yield group_tp_instance(19)


def _mismatches() -> tuple[int, int]:
    """(classes placed, those whose sites differ from group_site's) over every instance."""
    placed = differ = 0
    for inst in _instances():
        outers = list(declared_outers(inst))
        random.Random(3).shuffle(outers)
        hc = inst.cluster
        for o in outers:
            for k, c in enumerate(o.classes):
                pl = class_placement(hc, o, k)
                placed += 1
                differ += any(site != group_site(hc, o, g) for site, g in zip(pl.sites, c.stage_groups))
    return placed, differ


def test_placed_sites_are_group_sites():
    class_coefficients._PLACED_SITES.clear()
    placed, differ = _mismatches()
    assert placed > 500 and differ == 0


def test_ring_links_are_group_sites_links():
    for inst in _instances():
        for o in list(declared_outers(inst))[:200]:
            for g in set(o.classes[0].stage_groups):
                site = group_site(inst.cluster, o, g)
                assert ring_links(inst.cluster, o, g) == (site.dp_link, site.edp_link)


def test_kept_class_outers_are_built_ones():
    for inst in _instances():
        outers = list(declared_outers(inst))
        kept = [class_outers(inst.job, o) for o in outers]
        class_coefficients._CLASS_OUTERS.clear()
        assert kept == [class_outers(inst.job, o) for o in outers]


def test_a_site_cache_without_the_ring_is_caught(monkeypatch):
    def without_ring(hc, ho, g):  # the fault: the ring left out of the key
        key = (id(hc), g, ho.tp_of(g), ho.cp, bool(ho.group_tp), ho.ep, ho.etp)
        return class_coefficients._PLACED_SITES.read(key, hc, lambda: group_site(hc, ho, g))

    class_coefficients._PLACED_SITES.clear()
    monkeypatch.setattr(class_coefficients, "_placed_site", without_ring)
    try:
        assert _mismatches()[1] > 0
    finally:
        class_coefficients._PLACED_SITES.clear()
