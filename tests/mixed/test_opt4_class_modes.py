"""Two readings of option_recompute.py that must not change a float (issue 33, opt4):

- stage_class_slowest_s reads only the (sp, ZeRO) modes _class_modes keeps: each mode another
  dominates at every group and micro-batch size (the same stash a and recomputed input c, at
  least its room, at most its state) is left out, and a repeat read once. Every stage time
  t_s(n) = head + n f + rho ceil((n (state + F a) - room) / (F (a - c))) of a dominated mode
  is at least the dominating one's (each operation is monotone in room and state; the floors,
  recompute and output layer read no mode), so the least over the modes, A*, is the same. The
  independent reading is stage_class_slowest_s with every mode read (_class_modes replaced by
  the identity), on tiny-2types with ZeRO 0, 1 and 2, sp on and off, two micro-batch sizes and
  every v a class of its depth runs; a planted fault (a mode that dominates nothing left out)
  must be caught, and some mode must be left out (else the check reads nothing).
- RecomputeFloor._slowest_rows reads a class's rows at several v > 1 in one pass, each row with
  its own v's mask of chunks (_passes), where each pass read one v: each row's A* is its own
  (every time and order is read per row), so the memo holds the same floats as one pass per v.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_partitions_lazy import OPTIONS, tiny2
from test_plan_bound_admissible import WIDE

from paraplan.solver import search as search_mod
from paraplan.solver.bounds import option_recompute
from paraplan.solver.bounds.option_recompute import (V_ROWS_APART, RecomputeFloor, _class_modes, interleavings,
                                                     stage_class_slowest_s)

KEYS = dict(OPTIONS, zero=[0, 1, 2], sequence_parallel=[False, True], micro_batch=[1, 2],
            virtual_stages=[1, 2, 3, 4])


def _inst(tps):
    # a Llama-3 70B-wide layer on tiny-2types: memory binds at a few layers a stage
    return tiny2((4, 4), tps, 12, 32, model=dict(WIDE, vocab=128256), **KEYS)


def _floor(inst) -> RecomputeFloor:
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    return RecomputeFloor(lazy.fb)


def _every_mode(terms):
    return list(range(terms.shape[2]))


def test_class_modes_keeps_one_of_each_and_drops_only_dominated():
    # random (groups, mbs, modes, 4) terms with planted repeats and dominated modes: each mode
    # left out is a repeat of a kept one or dominated by one, and no kept mode is either
    rng = np.random.default_rng(3304)
    dropped = 0
    for _ in range(300):
        groups, mbs, n = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 5))
        terms = rng.integers(1, 4, (groups, mbs, n, 4)).astype(float)
        for _ in range(int(rng.integers(0, 3))):  # a repeat, or a mode raised in state / lowered in room
            k = int(rng.integers(0, terms.shape[2]))
            extra = terms[:, :, k:k + 1].copy()
            extra[..., int(rng.integers(0, 2))] += rng.choice([0.0, 1.0]) * (1 - 2 * (rng.random() < 0.5))
            terms = np.concatenate([terms, extra], axis=2)
        kept = _class_modes(terms)
        room, state, a, c = (terms[..., i] for i in range(4))

        def covers(k, m):  # k's every stage time at most m's
            return bool((a[:, :, k] == a[:, :, m]).all() and (c[:, :, k] == c[:, :, m]).all()
                        and (room[:, :, k] >= room[:, :, m]).all() and (state[:, :, k] <= state[:, :, m]).all())
        for m in range(terms.shape[2]):
            if m in kept:
                assert not any(covers(k, m) and (k < m or not covers(m, k)) for k in range(terms.shape[2]) if k != m)
            else:
                assert any(covers(k, m) for k in kept), (m, kept)
                dropped += 1
    assert dropped > 50


@pytest.mark.parametrize("tp", [1, 2])
def test_stage_class_slowest_reads_the_least_of_every_mode(tp, monkeypatch):
    inst = _inst((1, 2))
    rc = _floor(inst)
    zeros, cp = (0, 1, 2), 1
    most = sum(g.num_gpus for g in inst.cluster.groups) // tp
    cases, left_out, caught = 0, 0, 0
    for counts in [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3)]:
        pp = sum(counts)
        vs = (1, *interleavings(rc, pp))
        cls = dict(zip((0, 1), counts))
        got = stage_class_slowest_s(rc, cls, tp, cp, zeros, most, vs)
        # each reading on a fresh floor: the modes kept are read once a depth (_class_reads)
        with monkeypatch.context() as m:
            m.setattr(option_recompute, "_class_modes", _every_mode)
            want = stage_class_slowest_s(_floor(inst), cls, tp, cp, zeros, most, vs)
        with monkeypatch.context() as m:  # the planted fault: the first mode (ZeRO-0, sp off) alone
            m.setattr(option_recompute, "_class_modes", lambda terms: [0])
            fault = stage_class_slowest_s(_floor(inst), cls, tp, cp, zeros, most, vs)
        assert np.array_equal(got, want), (counts, got, want)
        modes = list(itertools.product(rc.sps(tp, cp), zeros))
        terms = np.array([[[rc.stage_terms(g, tp, cp, pp, b, sp, z, most) for sp, z in modes]
                           for b in rc.fb.mbs.astype(int).tolist()] for g in cls])
        left_out += len(_class_modes(terms)) < len(modes)
        caught += not np.array_equal(fault, want)
        cases += 1
    assert cases == 5 and left_out > 0 and caught > 0


def test_slowest_rows_of_several_v_in_one_pass_are_each_their_own(monkeypatch):
    inst = _inst((1, 2))

    def per_v(todo, interleaved):  # one pass per (pp, v), as before _passes
        by_v: dict = {}
        for k in todo:
            if (len(k) > 10) is interleaved:
                by_v.setdefault((k[4], k[10] if interleaved else 1), []).append(k)
        return [(pp, keys) for (pp, _), keys in by_v.items()]

    def read(passes):
        rc = _floor(inst)
        if passes is not None:
            monkeypatch.setattr(RecomputeFloor, "_passes", staticmethod(passes))
        for tp, pp in itertools.product((1, 2), (2, 3, 4)):
            most = sum(g.num_gpus for g in inst.cluster.groups) // tp
            for g in (0, 1):
                rc.class_terms(g, tp, 1, pp, (0, 1, 2), most, 2)  # every v > 1 of the class in one call
        return {k: v for k, v in rc.memo.items() if k[0] == "slowest"}

    joint = read(None)
    apart = read(per_v)
    assert joint.keys() == apart.keys() and len({k[1][10] for k in joint if len(k[1]) > 10}) > 1
    assert all(joint[k] == apart[k] for k in joint)
    assert V_ROWS_APART > 4  # (the tiny classes hold a few rows a v: every v read in one pass)
