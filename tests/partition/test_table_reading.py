"""cost/partition.py: table_for shares one layer table between sites with the same site_reading
(issue 33: row 3 built 163 tables of 56 distinct contents). Every table it hands out equals the
table built on the asked site itself, array for array, over sites that differ in the fields the
reading leaves out (dp link, expert links, the site's own tp) and in those it keeps (GPU, tp and
cp links: there the tables differ, so a reading that dropped one would hand out a wrong table)."""

import dataclasses

import numpy as np
import pytest
from partition_support import instance_and_site

from paraplan.cost import partition as P
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.specs import Link

NET = NetEfficiency(intra_node=0.8, inter_node=0.7, overlap_slowdown=0.0, call_latency_s=2e-6)
ARRAYS = ("unary", "pair", "ring_overlapped", "compute", "inter_node", "pair_inter_node",
          "replicated_params", "grad_sync_s", "pair_hidden")


def _same_table(a: P.LayerTable, b: P.LayerTable) -> bool:
    if a.candidates != b.candidates or a.base != b.base:
        return False
    for field in ARRAYS:
        x, y = getattr(a, field), getattr(b, field)
        if x.keys() != y.keys() or not all(np.array_equal(x[k], y[k]) for k in x):
            return False
    return True


def _outers(o):
    # cp = 2 puts the site's cp link into the table's base (the ring's exposed steps)
    return (o, dataclasses.replace(o, sequence_parallel=True),
            dataclasses.replace(o, cp=2, dp=o.dp // 2, sequence_parallel=True))


def _variants(site, rng):
    """Sites that differ from `site` in random left-out fields, and in each kept field."""
    def link(inter):
        return Link(bw_bytes_per_s=float(rng.uniform(1e9, 2e11)), latency_s=float(rng.uniform(1e-6, 2e-5))), inter
    left_out = [dataclasses.replace(site, dp_link=link(bool(rng.integers(2)))),
                dataclasses.replace(site, edp_link=link(True), etp_link=link(False)),
                dataclasses.replace(site, tp=8, dp_link=link(True))]
    kept = [dataclasses.replace(site, tp_link=link(site.tp_link[1])),
            dataclasses.replace(site, cp_link=link(True)),
            dataclasses.replace(site, gpu=dataclasses.replace(site.gpu, hbm_bw_bytes_per_s=float(rng.uniform(5e11, 3e12))))]
    return left_out, kept


def _mismatches(seed: int) -> int:
    """Tables table_for hands out that differ from the asked site's own; asserts the kept fields
    change the table (so that a reading dropping one of them shows up here)."""
    rng = np.random.default_rng(seed)
    bad = 0
    for tp in (4, 8):
        inst, o, site = instance_and_site(tp=tp, nodes=4)
        for outer in _outers(o):
            P.table_for(inst, outer, site, NET)  # the first site of its reading builds the table
            left_out, kept = _variants(site, rng)
            for other in kept:
                assert not _same_table(P.layer_table(inst, outer, other, NET), P.layer_table(inst, outer, site, NET)) \
                    or (other.cp_link != site.cp_link and outer.cp == 1)
            for other in left_out + kept:
                bad += not _same_table(P.table_for(inst, outer, other, NET), P.layer_table(inst, outer, other, NET))
    return bad


@pytest.mark.parametrize("seed", range(3))
def test_shared_tables_equal_the_asked_sites_own(seed):
    assert _mismatches(seed) == 0


def test_a_reading_without_the_cp_link_hands_out_wrong_tables(monkeypatch):
    # planted fault: a reading that leaves out the cp link shares a table across cp links
    monkeypatch.setattr(P, "site_reading", lambda inst, site: (site.gpu, site.tp_link))
    monkeypatch.setattr(P, "_BY_READING", {})
    monkeypatch.setattr(P, "_TABLES", {})
    assert _mismatches(0) > 0


def test_sites_of_one_reading_share_a_table():
    inst, o, site = instance_and_site(tp=4)
    other = dataclasses.replace(site, dp_link=(Link(bw_bytes_per_s=1e9, latency_s=1e-5), True))
    assert P.table_for(inst, o, other, NET) is P.table_for(inst, o, site, NET)
