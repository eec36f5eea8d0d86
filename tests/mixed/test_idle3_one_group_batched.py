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
