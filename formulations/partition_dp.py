"""Segmented dynamic programme for the per-layer partition problem (PrimePar Sec. 5, Eqs. 11-14),
the second exact method next to formulations/partition.py's MILP.

The operators of a layer form chains cut at the residual stream (PrimePar cuts its 13-node
block at the residual branch points): the attention chain qkv -> attn_core -> attn_out and the
MLP chain mlp_in -> mlp_out share no edge; both meet the stream, whose layout is itself a
choice (the *cut* operator: the one operator whose edges join non-neighbours, here the four
edges (stream, qkv), (stream, attn_out), (stream, mlp_in), (stream, mlp_out)). For each
layout s of the cut, the cut's edges become unary costs of the operators they meet (their
row s), and the chains no longer share anything: inside a segment, Bellman's recursion over
the chain (Eq. 11) runs on *labels* instead of scalars: a label is (time_s, act_bytes,
buffer_bytes, replicated_params, grad_sync_s, choice) and, per state (the last operator's
partition), only labels not dominated in all five are kept. Time, activations, replicated
parameters and sync add along the chain and the buffer is a running max; all five are
monotone, so a dominated prefix can never complete into a non-dominated plan and the kept
labels are exactly the Pareto set of that segment given s. Segments are then merged (Eqs.
13-14: here a sum, since the cut's layout is fixed), the cut's own costs added, and the union
over the cut's layouts filtered again: every plan fixes one layout s, so the union of the
per-layout Pareto sets contains the whole Pareto set.

`pareto_front` returns the exact Pareto set of (time, activations, workspace, replicated
parameters, sync); `min_time` the optimum under caps, i.e. the MILP's epsilon-constraint problem.
"""

from __future__ import annotations

from paraplan.formulations.partition import PartitionProblem, PartitionResult

Label = tuple[float, float, float, float, float, tuple[int, ...]]
_DIMS = 5  # the criteria of a label, before its choice


def _dominates(a: Label, b: Label) -> bool:
    return all(a[k] <= b[k] for k in range(_DIMS))


def _prune(labels: list[Label]) -> list[Label]:
    """Keep the non-dominated labels; among equal vectors the first (enumeration order)."""
    labels = sorted(labels, key=lambda x: x[:_DIMS])
    kept: list[Label] = []
    for lab in labels:
        if not any(_dominates(k, lab) for k in kept):
            kept.append(lab)
    return kept


def cut_operator(pb: PartitionProblem) -> str | None:
    """The operator whose edges join non-neighbours in pb.ops (at most one: the residual
    stream), or None when every edge joins consecutive operators."""
    pos = {o: i for i, o in enumerate(pb.ops)}
    far_edges = [(a, b) for a, b in pb.edges if pos[b] != pos[a] + 1]
    if not far_edges:
        return None
    cut = [o for o in far_edges[0] if all(o in e for e in far_edges)]
    assert len(cut) == 1, "the segmented DP supports one cut operator (the residual stream)"
    return cut[0]


def segments(pb: PartitionProblem) -> list[list[str]]:
    """Maximal chains of consecutive operators (the cut operator left out) linked by edges;
    every edge not at the cut joins neighbours."""
    cut = cut_operator(pb)
    ops = [o for o in pb.ops if o != cut]
    pos = {o: i for i, o in enumerate(ops)}
    linked = {e for e in pb.edges if cut not in e}
    for a, b in linked:
        assert pos[b] == pos[a] + 1, "the segmented DP needs every edge between consecutive operators"
    out = [[ops[0]]]
    for prev, o in zip(ops, ops[1:]):
        if (prev, o) in linked:
            out[-1].append(o)
        else:
            out.append([o])
    return out


def _given_cut(pb: PartitionProblem, cut: str, s: int) -> dict[str, list]:
    """Per operator (cut excluded), its unary time with the cut's edges at layout s folded in."""
    time = {o: [float(x) for x in pb.time_s[o]] for o in pb.ops if o != cut}
    for a, b in pb.edges:
        if a == cut:
            time[b] = [x + float(y) for x, y in zip(time[b], pb.edge_time_s[(a, b)][s, :])]
        elif b == cut:
            time[a] = [x + float(y) for x, y in zip(time[a], pb.edge_time_s[(a, b)][:, s])]
    return time


def _segment_front(pb: PartitionProblem, seg: list[str], time: dict[str, list]) -> list[Label]:
    first = seg[0]
    states = {p: [(time[first][p], float(pb.act_bytes[first][p]),
                   float(pb.buffer_bytes[first][p]), float(pb.replicated_params[first][p]),
                   float(pb.grad_sync_s[first][p]), (p,))] for p in range(len(pb.time_s[first]))}
    for prev, o in zip(seg, seg[1:]):
        e = pb.edge_time_s[(prev, o)]
        new = {}
        for k in range(len(pb.time_s[o])):
            cand = [(t + float(e[p, k]) + time[o][k], a + float(pb.act_bytes[o][k]),
                     max(w, float(pb.buffer_bytes[o][k])), r + float(pb.replicated_params[o][k]),
                     g + float(pb.grad_sync_s[o][k]), ch + (k,))
                    for p, labs in states.items() for (t, a, w, r, g, ch) in labs]
            new[k] = _prune(cand)
        states = new
    return _prune([lab for labs in states.values() for lab in labs])


def pareto_front(pb: PartitionProblem) -> list[tuple]:
    """Exact Pareto set over all per-operator plans: (time_s, act_bytes, ws_bytes,
    replicated_params, grad_sync_s, choice) rows, sorted."""
    segs = segments(pb)
    cut = cut_operator(pb)
    layouts = range(len(pb.time_s[cut])) if cut is not None else [None]
    union: list[Label] = []
    for s in layouts:
        if cut is None:
            time = {o: [float(x) for x in pb.time_s[o]] for o in pb.ops}
            front: list[Label] = [(pb.base_time_s, pb.base_act_bytes, 0.0, 0.0, 0.0, ())]
        else:
            time = _given_cut(pb, cut, s)
            front = [(pb.base_time_s + float(pb.time_s[cut][s]),
                      pb.base_act_bytes + float(pb.act_bytes[cut][s]), float(pb.buffer_bytes[cut][s]),
                      float(pb.replicated_params[cut][s]), float(pb.grad_sync_s[cut][s]), (s,))]
        for seg in segs:
            part = _segment_front(pb, seg, time)
            front = _prune([(t1 + t2, a1 + a2, max(w1, w2), r1 + r2, g1 + g2, c1 + c2)
                            for (t1, a1, w1, r1, g1, c1) in front for (t2, a2, w2, r2, g2, c2) in part])
        union += front
    front = _prune(union)
    out = []
    order = ([cut] if cut is not None else []) + [o for seg in segs for o in seg]
    for lab in front:
        choice = dict(zip(order, lab[-1]))
        # re-evaluate in the problem's fixed order so DP and MILP report identical floats
        out.append((*pb.evaluate(choice), choice))
    return sorted(out, key=lambda x: x[:_DIMS])


def min_time(pb: PartitionProblem, act_cap_bytes: float = float("inf"),
             ws_cap_bytes: float = float("inf"), params_cap: float = float("inf"),
             sync_cap_s: float = float("inf")) -> PartitionResult:
    """The MILP's problem, solved from the Pareto set: the fastest plan within the caps."""
    for t, a, w, r, g, choice in pareto_front(pb):  # sorted by time
        if a <= act_cap_bytes and w <= ws_cap_bytes and r <= params_cap and g <= sync_cap_s:
            return PartitionResult("optimal", choice, t, a, w, r, g)
    return PartitionResult("infeasible", None, None, None, None)
