"""The listing keeps a layout's (sp, ZeRO, v) modes by space.sharded_ranks, not by its replica
count (with search.idle_gpus every replica count of a lone class is a layout of its own).

That is exact only while the rules read the replicas no further: checked on the rules
themselves (every framework and optimizer, over small degrees), and on the listing, where each
layout's modes and micro-batch sizes read with the shared memo equal those read afresh, with
nothing shared; a planted rule that reads the replica count otherwise must make that
comparison fail."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from paraplan.cost.framework_rules import FrameworkRules, rules_for
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.releases import Framework
from paraplan.cost.specs import Optimizer
from paraplan.solver import space

MIXTRAL = "instances/mixtral-8x7b-64xH100.yaml"


def test_rules_read_replicas_only_as_sharded_ranks():
    for fw, opt in itertools.product(Framework, Optimizer):
        rules = rules_for(fw, opt)
        for tp, pp, cp, sp, zero, v in itertools.product((1, 2, 4), (1, 2, 3), (1, 2), (False, True),
                                                          (0, 1, 2, 3), (1, 2)):
            for dp in range(1, 9):
                # a representative replica count with the same sharded_ranks: 1 or 2
                rep = 2 if space.sharded_ranks(dp, cp) else 1
                assert space.sharded_ranks(rep, cp) == space.sharded_ranks(dp, cp)
                got = rules.admits(tp=tp, pp=pp, cp=cp, dp=dp, sp=sp, zero=zero, v=v)
                assert got == rules.admits(tp=tp, pp=pp, cp=cp, dp=rep, sp=sp, zero=zero, v=v), (fw, opt, dp)


def _idle_mixtral():
    inst = load_instance(MIXTRAL)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, idle_gpus=True))


def _layouts(blocks):
    """Each class layout of the listing once, with the micro-batch sizes of its blocks."""
    out: dict = {}
    for b in blocks:
        key = (b.family, b.classes, b.tp, b.group_tp, b.cp)
        out.setdefault(key, (b, []))[1].append(b.micro_batch)
    return out.values()


def _mismatches(inst) -> int:
    """Layouts whose shared listing's modes or micro-batch sizes differ from a fresh read."""
    part = space.declared_partials(inst)
    lst = part[0].listing
    bad = 0
    for b, mbs in _layouts([blk for p in part for blk in p.blocks()]):
        used = sorted({g for c in b.classes for g in c.stage_groups})
        tpg = dict(b.group_tp) if b.group_tp else {g: b.tp for g in used}
        tps = tuple(sorted(set(tpg.values())))
        fresh = space._Listing(inst, False, lst.modes, lst.rules)  # nothing shared with any other layout
        modes = fresh._invariants(b.tp, tps, b.group_tp, b.cp, b.classes)[2]
        sizes = space.micro_batch_values(inst, tpg, b.cp, b.classes, False, {})
        bad += modes != b.modes_left or sizes != mbs
    return bad


def test_shared_modes_equal_fresh_reads():
    inst = _idle_mixtral()
    assert _mismatches(inst) == 0


def test_a_rule_reading_the_replica_count_is_caught(monkeypatch):
    # planted: ZeRO only on an even replica count, which sharded_ranks does not tell apart
    plain = FrameworkRules.admits

    def parity(self, *, tp, pp, cp, dp, sp, zero, v):
        return plain(self, tp=tp, pp=pp, cp=cp, dp=dp, sp=sp, zero=zero, v=v) and not (zero and dp % 2)

    monkeypatch.setattr(FrameworkRules, "admits", parity)
    assert _mismatches(_idle_mixtral()) > 0
