"""Twin classes (issue 33): a configuration whose classes are all one stage on one group, with
search.classes_per_group listing them apart, e.g. (1, x) + (1, 256 - x) replicas of Llama 3 8B
on 256 H100, is bounded below by the one-class configuration of the same settings, (1, 256).

Claim. Let T be such a configuration, classes k of x_k replicas, one stage each on group g, X =
sum_k x_k, dense (ep 1, no etp), v = 1, no zero-bubble schedule, no layer plans; O the one-class
configuration of T's settings (every _Modes field) with X replicas of one stage on g. Then
opt(T) >= opt(O) when O's inner problem is solvable, as when O was solved.

Coefficients. Each class is priced by cost/class_coefficients.class_coefficients:
- its Outer (class_outer) differs from O's in dp (x_k, not X) and the recorded count (1, not
  O's M / X); coefficients.build reads dp only through the placement's dp_ranks, which is the
  configuration's replicas times cp (class_placement: X cp for both), and the count only
  through the micro-batches in flight, min(pp - s, m) = 1 on a one-stage class with m >= 1
  (in_flight_micro_batches; the MoE all-to-all overlap and the V schedule, which read it
  otherwise, are left out above);
- its site on g: the tp and cp links are the group's; the gradient ring (_ring_link) of several
  classes sharing g is _spread_link(members sum_k x_k cp = X cp, span X cp tp, stride tp):
  intra-node where X cp tp fits one domain, else comm.group_link(X cp, max(tp, ceil(X cp tp /
  (X cp))) = tp), the one class's comm.group_link(X cp, tp) in both cases (group_link is
  intra-node exactly where size * stride fits one domain); one group, so no cross-group link;
- the tie link of a one-stage class is pair_link(..., offset 0): never crosses, for both.
So every class of T carries O's coefficient arrays c (per network scenario: each prices its own
cluster alike), and solver/search.problem_of scales them alike: the quantile objective's factor
reads the GPU types used, ZeRO, cp and the deepest class (trust.objective_factor_of), the memory
cap the search's tier; the batch M = global batch / micro-batch is the same.

Step time (formulations/multiclass.py). A one-stage class's pipeline is P_k = m_k T_k with
T_k = a + t n + u r_k (its one stage's n layers, fixed by the slots), and iteration_sigma =
max_k P_k + D with D = e + g n; the batch rule is sum_k x_k m_k = M, m_k >= 1. Take T's optimum
(m_k, r_k) and k* with m_k* >= M / X (it exists: the m_k average M / X with weights x_k). O's
count is m_O = M / X where X divides M (the only case the search reads: solver/search.
_Search._twins_may_win); O with
r = r_k* fits (k*'s stage fits with the same memory row; memory reads neither m nor the
scenario) and per scenario m_O T_k* + D <= m_k* T_k* + D <= iteration_sigma of T, so O's
objective (the max or a weighted sum with weights >= 0 over scenarios) is at most T's.

Where X does not divide M (issue 33: GPT-3 175B on 1,024 A100 with classes_per_group 2, M =
1,536 at micro-batch 1 beside X = 1,024 / tp cp replicas, where the twins were all of the 126
configurations the option priced beyond the plain search's 65), O runs no integer count, so the
search lists no O; the claim then reads O_c, the same class at the count c = ceil(M / X): k*'s
m_k* >= M / X is an integer, so m_k* >= c, and with r = r_k* O_c fits and per scenario
c T_k* + D <= m_k* T_k* + D <= iteration_sigma of T, so opt(T) >= opt(O_c). O_c's problem is
O's as priced at its floor count (>= 1 where X <= M, the one case read: below it no T has
m_k >= 1 for every class) with the count set to c in its coefficients' outer and its batch to
c X (at_count): its coefficients are O's, the count read only through the one micro-batch in
flight. Its bounds are those of O_c's own problem.

Use. Any lower bound of O's optimum (its priced bound, solver/bounds/batched.lower_bounds_s,
and its tight bound, one_class.tight_lower_bounds_s, both admissible for O's own problem; or
O's solved value less its solver's tolerance) is one of T's, and so is any of O_c's. Where it
exceeds the bar's value by more than the tie margin (REL_TOL), T's plan cannot beat the bar whatever its key
(Winners.beats), so T is pruned unpriced and the search's answer and tie rule are unchanged:
a twin that ties the bar is still priced and keyed as before.
"""

from __future__ import annotations

import dataclasses

from paraplan.cost.plan_specs import ClassOuter, ClassShape


def _plain(o: ClassOuter) -> bool:
    """The settings the claim covers (module docstring)."""
    return o.ep == 1 and o.etp is None and o.virtual_stages == 1 and o.zero_bubble is None


def twin_key(o: ClassOuter):
    """The lone_key (tests/oracles/bounds.py) of the one-class configuration that bounds `o` below (module docstring),
    or None where `o` is not twins the claim covers: >= 2 classes, each one stage on one group,
    with no per-stage degrees."""
    if len(o.classes) < 2 or not _plain(o):
        return None
    groups = {c.stage_groups for c in o.classes}
    if len(groups) != 1 or any(c.pp != 1 or c.stage_dp for c in o.classes):
        return None
    return dataclasses.replace(o, family="", classes=(ClassShape(replicas=o.replicas, stage_groups=groups.pop()),))


def at_count(p, count: int):
    """O_c's problem (module docstring): one-class problem `p` of X replicas with every replica
    running `count` micro-batches, its coefficients as priced (a one-stage class holds one
    micro-batch in flight at any count >= 1) but for the count their outer records."""
    coeffs = tuple(tuple(dataclasses.replace(c, outer=dataclasses.replace(c.outer, num_micro_batches=count))
                         for c in cs) for cs in p.coeffs)
    return dataclasses.replace(p, coeffs=coeffs, total_micro_batches=count * sum(p.replicas))
