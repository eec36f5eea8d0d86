"""search.idle_gpus on one group (issue 33): the stage families' keys read all at once, and an
opened family's slowest stage with forced recompute read only where it can matter.

- stage_families.one_group_rough keys every (cp, dp) family of the group in one pass. Its rows
  are _combos' expressions, elementwise per tp choice, so each family's key must be the very
  float its own call gives (_combos with the slowest stage and the refusals off): checked on
  every family of a 24-GPU group, with interleaving (the v > 1 terms) and memory that binds.
- FamilyBounds.choices under idle GPUs reads the slowest stage only for the choices whose bound
  without it can still win: it must return what reading it for every choice returns (the
  choices kept and their bounds, to the bit), at bars that keep all, some and none of them.
Each check can fail: the keys differ across families (a key read from the wrong family's rows
would show), the slowest stage raises some choice's bound (so reading it for too few choices
would show), and at some bar a choice kept without it is dropped with it."""

from __future__ import annotations

import dataclasses

import numpy as np
from test_idle_one_group import one_group_instance
from test_stage_families import _every_family_opened

from paraplan.solver.bounds import stage_families as sf
from paraplan.solver.search import scenario_weights
from paraplan.solver.space import partials_and_families


def _instance():
    """test_idle_one_group's toy GPUs, four nodes of them (24 GPUs: dp 1 to 24 at cp 1, to 12
    at cp 2), tp 1, 2 or 4, interleaving, ZeRO 0 to 3 and a batch of 48."""
    inst = one_group_instance(hbm_gib=2.0)
    group = dataclasses.replace(inst.cluster.groups[0], nodes=4)
    cluster = dataclasses.replace(inst.cluster, groups=(group,))
    search = dataclasses.replace(inst.search, virtual_stages=(1, 2), zero=(0, 1, 3), tp=(1, 2, 4), cp=(1, 2),
                                 micro_batch=(1, 2, 4))
    return dataclasses.replace(inst, cluster=cluster, search=search,
                               job=dataclasses.replace(inst.job, global_batch=48))


def _families(inst):
    idx, agg, weights = scenario_weights(inst, "nominal")
    _, lst, deferred = partials_and_families(inst, defer_stage=True, defer_options=True)
    fams = [f for f in sf.stage_families(inst, [d for d in deferred if d[2] == "stage"])
            if isinstance(f, sf.StageFamily)]
    return fams, lambda: sf.FamilyBounds(inst, idx, agg, weights, {}, lst.modes)


def test_the_batched_keys_are_each_familys_own_call():
    inst = _instance()
    fams, fresh = _families(inst)
    assert len({(f.cp, f.dp) for f in fams}) == len(fams) > 30 and {f.cp for f in fams} == {1, 2}
    batched, alone = fresh(), fresh()
    got = [batched.rough_bound(f) for f in fams]
    assert set(batched.roughs) == set(fams)  # read by one_group_rough, not family by family
    for fam, key in zip(fams, got):
        _, bounds, _ = alone._combos(fam, recompute=False, refusals=False)
        assert key == ((float(bounds.min()), True) if bounds.size else (float("inf"), False)), fam
    finite = [k for k, _ in got if np.isfinite(k)]
    assert len(set(finite)) > len(finite) // 2  # the keys tell the families apart


def test_the_choices_read_lazily_are_those_read_whole():
    inst = _instance()
    fams, fresh = _families(inst)
    fb, whole = fresh(), fresh()
    raised = dropped = 0
    for fam in fams:
        index, lower, _ = whole._combos(fam, recompute=False)
        index, bounds, _ = whole._combos(fam)
        raised += int((bounds > lower).sum())
        finite = np.sort(bounds[np.isfinite(bounds)])
        for bar in [float(np.inf), *finite.tolist()[:: max(1, len(finite) // 3)], 0.0]:
            can_win = lambda lb, bar=bar: lb < bar
            keep = sf._winning(bounds, can_win)
            assert fb.choices(fam, can_win) == list(zip(index[keep].tolist(), bounds[keep].tolist())), (fam, bar)
            dropped += len(sf._winning(lower, can_win)) - len(keep)
    assert raised and dropped  # the slowest stage raises some bounds and prunes some choice


def _old_reading(L, m, places, f, hi, slots, v_max):
    """interleaved_a as the bound read before it: A0 = L f / places at every count, no floor of
    Z_v of its own."""
    rows = max(len(places), m.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.maximum(L * f / np.asarray(places, float)[:, None, None], hi)
    return a, np.ones((rows, m.shape[1], 1), bool), np.full((rows, 1, 1), -np.inf)


def _interleaved_instance():
    """_instance with v 1, 2 or 3 on 12 GPUs and a batch of 36 (counts 36 / dp with few
    divisors: dp 4 at micro-batch 1 runs 9 micro-batches, which no depth of 2 divides)."""
    inst = _instance()
    group = dataclasses.replace(inst.cluster.groups[0], nodes=2)
    return dataclasses.replace(inst, cluster=dataclasses.replace(inst.cluster, groups=(group,)),
                               search=dataclasses.replace(inst.search, virtual_stages=(1, 2, 3), cp=(1,)),
                               job=dataclasses.replace(inst.job, global_batch=36))


def test_the_interleaved_depth_floor_is_at_most_every_configurations_optimum(monkeypatch):
    """interleaved_a's floors (A >= L f / P(m), Z_v >= L f G): each configuration at v > 1 of a family (every one of
    the space, solved by the exact split DP) is at least its tp choice's and micro-batch size's
    v > 1 term (_combos' zv, which reads that floor) times the family's quantile factor; each
    family's key is at least the one read without the floors, above it for some family; and
    floors too large (planted: a depth of 2 at every count; G at pp 2 and v 2 alone) fail the
    first check."""
    from paraplan.solver import search as search_mod

    inst = _interleaved_instance()
    lazy, _, spans = _every_family_opened(inst)
    with monkeypatch.context() as m:
        m.setattr(sf, "interleaved_a", _old_reading)
        before = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
        old = [before.family_key(f) for f in range(len(before.families))]
    new = [lazy.family_key(f) for f in range(len(lazy.families))]
    assert all(n >= o for n, o in zip(new, old)) and any(n > o for n, o in zip(new, old))
    assert _interleaved_below(inst, lazy, spans) == 0
    # planted: a depth of 2 at every count (A read too large), and G read at pp 2 and v 2 alone
    for name, fault in (("_deepest", lambda count, places: 2 if count >= 2 else 0),
                        ("_interleaved_g", lambda count, places, layers, slots, v_max:
                         (count - 1 / 2) / 2 + 1 / 2 if count >= 2 and places >= 2 else float("inf"))):
        with monkeypatch.context() as m:
            m.setattr(sf, name, fault)
            planted, _, planted_spans = _every_family_opened(inst)
            assert _interleaved_below(inst, planted, planted_spans) > 0, name


def _interleaved_below(inst, lazy, spans) -> int:
    """The configurations at v > 1 whose optimum lies below their tp choice's v > 1 term
    (test above); asserts that some were solved."""
    from paraplan.solver import search as search_mod

    fb, solved, below = lazy.fb, 0, 0
    for f, a, b in spans:
        fam = lazy.families[f]
        index, _, terms = fb._combos(fam)
        zv, factor = terms[1], terms[5]
        for part in lazy.partials[a:b]:
            c = index.tolist().index(fb._group_tps(fam)[0].index(part.tpg[0]))
            outers = [o for blk in part.blocks() for o in blk.outers() if o.virtual_stages > 1]
            for o, p in zip(outers, search_mod.problems_for(inst, outers, "nominal")):
                bi = fb.mbs.tolist().index(o.micro_batch)
                lb = float(zv[c, bi, 0]) * factor
                if p is None:
                    continue
                # (an inf term says no configuration runs there: any optimum is below it)
                sr = search_mod._solve_lone_dp(p, 60.0, None, lb / (1 + 1e-9) if np.isfinite(lb) else None)
                solved += 1
                below += sr.objective_s is not None and sr.objective_s < lb * (1 - 1e-9)
    assert solved
    return below
