"""Full readings of solver/bounds/: what the batched and memoised bounds must equal."""

from __future__ import annotations

import dataclasses

import numpy as np

from paraplan.cost import coefficients
from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.plan_specs import ClassOuter, ClassShape
from paraplan.solver.bounds.one_class import slot_relaxation
from paraplan.solver.bounds.plan_sync import _least_sync_up_to
from paraplan.solver.bounds.stage_families import FamilyBounds, StageFamily
from paraplan.solver.bounds.twins import _plain
from paraplan.solver.bounds.unpriced_memory import _floor_rows


def max_layers_per_stage(c: StageCoefficients) -> np.ndarray:
    """(from solver/bounds/one_class.py) Per stage, the most layers that fit memory, of the
    slot relaxation."""
    c = slot_relaxation(c)  # (of the relaxation: with the slots, a cap on n_s + o_s)
    return coefficients.max_layers_per_stage(c.layer_state_bytes, c.layer_act_bytes, c.layer_ckpt_bytes,
                                             c.capacity_bytes, c.stage_mem_bytes, c.outer.virtual_stages,
                                             c.layers)


def least_levels(rows: list[list[tuple[np.ndarray, np.ndarray]]], need: int) -> np.ndarray:
    """(from solver/bounds/plan_bottleneck.py) Per row (the group_steps of each of a class's
    groups), the least level Z at which the groups hold `need` chunks together, each at its
    first step at least: inf where none does."""
    out = np.full(len(rows), np.inf)
    for r, steps in enumerate(rows):
        if any(not z.size for z, _ in steps) or sum(int(c[-1]) for _, c in steps) < need:
            continue
        lo = max(float(z[0]) for z, _ in steps)
        at = np.unique(np.concatenate([z for z, _ in steps]))
        at = at[at >= lo]
        total = sum(c[np.searchsorted(z, at, side="right") - 1] for z, c in steps)
        out[r] = at[np.argmax(total >= need)]
    return out


def least_sums(rows: list[list[np.ndarray]], need: int) -> np.ndarray:
    """(from solver/bounds/plan_bottleneck.py) Per row (the group_sums of each of a class's
    groups), the least total over the counts the groups can hold `need` chunks in (each
    group's own least sum at its count, min-plus convolved): inf where none."""
    c = np.arange(need + 1)
    back = c[:, None] - c[None, :]  # [c, a]: the count left to the next group, a <= c
    below = back >= 0
    back = np.where(below, back, 0)
    out = np.full(len(rows), np.inf)
    for r, sums in enumerate(rows):
        acc = sums[0]
        for h in sums[1:-1]:  # acc'[c] = min over a <= c of acc[a] + h[c - a]
            acc = np.where(below, acc[None, :] + h[back], np.inf).min(1)
        out[r] = (acc + sums[-1][::-1]).min() if len(sums) > 1 else acc[need]
    return out


def least_sync_s(inst, o, i: int, memo: dict) -> float:
    """(from solver/bounds/plan_sync.py) D of outer `o` on scenario i (_least_sync_up_to,
    read in full)."""
    return _least_sync_up_to(inst, o, [i], "max", _NO_WEIGHTS, memo)


_NO_WEIGHTS = np.zeros(0)  # a worst case's (_aggregate reads none)


def combos(fb: FamilyBounds, fam: StageFamily) -> tuple[np.ndarray, np.ndarray]:
    """(from solver/bounds/stage_families.py, FamilyBounds.combos) (index in tp_choices, bound)
    of each of the family's tp choices, in declared order (tp_choices: the product of the
    groups' tp_values), all at once."""
    index, bound, _ = fb._combos(fam)
    return index, bound


def lone_key(o: ClassOuter):
    """(from solver/bounds/twins.py) The key of a one-class, one-stage configuration `o` (its
    settings, its group and replicas), or None where it is not one or the claim does not
    cover it."""
    if len(o.classes) != 1 or not _plain(o):
        return None
    c = o.classes[0]
    if c.pp != 1 or c.stage_dp:
        return None
    return dataclasses.replace(o, family="", classes=(ClassShape(replicas=c.replicas, stage_groups=c.stage_groups),))


def floor_coefficients(inst, o, k: int, co, idx: list[int], memo: dict, layer_memo: dict, net, slow: float,
                       reserve: float) -> list[StageCoefficients]:
    """(from solver/bounds/unpriced_memory.py, _floor_coefficients) Per scenario of `idx`,
    _class_rows' coefficients of class k of `o` before the slot relaxation, capped at the
    memory tier (_floor_rows' coefficients)."""
    return [c_floor for c_floor, _ in _floor_rows(inst, o, k, co, idx, memo, layer_memo, net, slow, reserve)]
