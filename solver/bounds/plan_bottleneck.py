"""The least slowest stage of a replica class over every combination of its groups' layer plans,
read group by group (issue 33, solver/class_partitions.py's buckets of layer plans).

A class's stages on group g all run the layer plan of its (class, group) choice, and a stage's
coefficients read that plan only (class_partitions' module docstring). one_class.
tight_class_terms bounds the slowest stage of one combination by tau*, the least level Z at
which every stage holds one chunk of v layers within Z and the stages hold L // v chunks
together (stage s holds the chunks j with tau_s(j v) <= Z, a prefix: tau_s is non-decreasing,
and none past its memory cap). A bucket of plans read at its optimistic coefficients
(partition_plans.optimistic_coefficients) takes its time from one plan and its memory from
another: the fastest plans replicate weights (token splits) and so hold fewer layers. On the
three-type, two-site Llama-3 70B with partitions the bound of a combination of 32-plan buckets
was 15.56-15.61 s where the least bound over its combinations of plans was 16.41-16.60 s
(measured on its lowest first-level nodes), and its tau* term 4-5% below theirs.

The least tau* over the combinations of plans (one plan per group from its bucket B_g) is read
without listing them: at a level Z the groups hold their chunks independently (a stage's chunks
within Z read its own group's plan), so some combination holds L // v chunks within Z iff
    sum_g max_(p in B_g) C_g^p(Z) >= L // v,
with C_g^p(Z) the chunks group g's stages hold within Z under plan p (-inf where one of them
holds none). Each max_p C_g^p is a non-decreasing step function of Z (`group_steps`, a step per
chunk count at most); the least Z at which their sum reaches L // v is one of their steps
(`least_levels`). That is the least tau* over the combinations, exactly: it is at most each
combination's tau*, and so at most the slowest stage of every split of every combination that
fits memory (one_class's module docstring); inf exactly where no combination fits.
"""

from __future__ import annotations

import numpy as np


def group_steps(levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """max_p C^p of one group as steps (z, c), z and c increasing: within a level Z with
    z[i] <= Z < z[i + 1] the group's stages hold at most c[i] chunks under one plan, and under
    none below z[0] (empty: no plan fits each of its stages one chunk). `levels`: (plans,
    stages, chunks), one_class.stage_levels of the group's stages under each plan."""
    plans = levels.shape[0]
    first = levels[:, :, 0].max(1)  # every stage holds one chunk from here
    flat = np.sort(levels.reshape(plans, -1), axis=1)
    at = np.unique(flat[np.isfinite(flat)])
    if not at.size:
        return at, np.zeros(0, np.int64)
    held = np.empty((plans, at.size), np.int64)
    for p in range(plans):
        held[p] = np.searchsorted(flat[p], at, side="right")
    held[at[None, :] < first[:, None]] = -1
    best = held.max(0)  # non-decreasing: each plan's count is, from its first level on
    rise = (best >= 0) & (best > np.concatenate([[-1], best[:-1]]))
    return at[rise], best[rise]


def least_levels(rows: list[list[tuple[np.ndarray, np.ndarray]]], need: int) -> np.ndarray:
    """Per row (the group_steps of each of a class's groups), the least level Z at which the
    groups hold `need` chunks together, each at its first step at least: inf where none does."""
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
