"""MILP of the per-layer partition problem: one partition per operator, resharding between
consecutive operators (Alpa-style linearised products), a memory epsilon-constraint.

Sets
    O                 operators of a layer, in order (e.g. qkv, attn_core, attn_out, mlp_in, mlp_out,
                      and the residual stream, whose candidates are its layouts)
    P_o               candidate partitions of operator o
    E ⊆ O x O         pairs of operators whose layouts meet (resharding edges; the stream meets
                      qkv, attn_out, mlp_in and mlp_out)

Parameters (`PartitionProblem`, built from cost/partition.py's LayerTable; no cost arithmetic)
    c_op  [s]       time_s[o][p]          forward + backward of o under p (the stream: its
                                          norm-statistics all-reduces)
    a_op  [bytes]   act_bytes[o][p]       activations o stashes for backward under p
    w_op  [bytes]   buffer_bytes[o][p]    transient double buffer of o under p
    r_op  [params]  replicated_params[o][p]  weight parameters o holds beyond a 1/t share
                                          (token splits replicate the weight; per layer)
    g_op  [s]       grad_sync_s[o][p]     per iteration: o's weight-gradient all-reduce over
                                          the group (token splits)
    e_ab  [s]       edge_time_s[(a,b)][p,p']   reshard of a's output to b's input (both passes)
    c0, a0, w0      the layer's time, activations and workspace that no choice changes
    A, B  [bytes]   caps on the layer's activations and workspace (epsilon-constraints)
    R, G            caps on the replicated parameters and the per-iteration sync

Variables
    x_op ∈ {0,1}                  o uses partition p
    y_abpp' ∈ [0,1]               a uses p and b uses p' (the linearised product x_ap x_bp')

Objective
    minimise  c0 + Σ_o Σ_p c_op x_op + Σ_(a,b) Σ_p,p' e_abpp' y_abpp'        (layer time, s)

Constraints
    C1_one_{o}              Σ_p x_op = 1
    C2_row_{a}_{b}_{p}      Σ_p' y_abpp' = x_ap      } with C1 these force y = x_a x_b exactly
    C3_col_{a}_{b}_{p'}     Σ_p y_abpp' = x_bp'      } (the marginals of a 0/1 outer product)
    C4_act                  a0 + Σ_o Σ_p a_op x_op <= A
    C5_buffer_{o}_{p}       w0 + w_op x_op <= B         (the workspace is a max over operators)
    C6_params               Σ_o Σ_p r_op x_op <= R
    C7_sync                 Σ_o Σ_p g_op x_op <= G

The objective is the time of one micro-batch; the replicated parameters and the
per-iteration sync are further criteria (their price depends on ZeRO, the data-parallel group
and the micro-batch count, which the joint planner knows), so the per-layer answer is the
Pareto set over (time, act, workspace, params, sync) and each point is this problem at its caps.

The returned choice is re-evaluated in floating point (`PartitionProblem.evaluate`), so the
reported time is the model's, not the backend's; "optimal" means SCIP proved optimality with
a zero relative gap. The same problem is solved by the segmented dynamic programme of
formulations/partition_dp.py; tests/partition checks that both agree on every instance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.formulations.result import SolverError

# numerics: the backend sees microseconds and MiB, so coefficients are O(1)..O(1e4)
TIME_UNIT_S = 1e-6
MEM_UNIT_BYTES = 2**20


@dataclass(frozen=True)
class PartitionProblem:
    """One partition per operator to choose: each candidate's time and memory, the op edges."""
    ops: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    labels: dict[str, tuple[str, ...]]  # candidate names, for reports
    time_s: dict[str, np.ndarray]
    act_bytes: dict[str, np.ndarray]
    buffer_bytes: dict[str, np.ndarray]
    edge_time_s: dict[tuple[str, str], np.ndarray]
    base_time_s: float
    base_act_bytes: float
    base_ws_bytes: float
    replicated_params: dict[str, np.ndarray]
    grad_sync_s: dict[str, np.ndarray]

    def evaluate(self, choice: dict[str, int]) -> tuple[float, float, float, float, float]:
        """(time_s, act_bytes, workspace_bytes, replicated_params, grad_sync_s) of one choice,
        summed in a fixed order."""
        t, a, w, r, g = self.base_time_s, self.base_act_bytes, 0.0, 0.0, 0.0
        for o in self.ops:
            t += float(self.time_s[o][choice[o]])
            a += float(self.act_bytes[o][choice[o]])
            w = max(w, float(self.buffer_bytes[o][choice[o]]))
            r += float(self.replicated_params[o][choice[o]])
            g += float(self.grad_sync_s[o][choice[o]])
        for e in self.edges:
            t += float(self.edge_time_s[e][choice[e[0]], choice[e[1]]])
        return t, a, self.base_ws_bytes + w, r, g


@dataclass(frozen=True)
class PartitionResult:
    """A solved partition choice: each operator's candidate, its time and memory."""
    status: str  # optimal | infeasible
    choice: dict[str, int] | None
    time_s: float | None
    act_bytes: float | None
    ws_bytes: float | None
    params: float | None = None
    sync_s: float | None = None


def solve_partition_milp(pb: PartitionProblem, act_cap_bytes: float = float("inf"),
                         ws_cap_bytes: float = float("inf"), params_cap: float = float("inf"),
                         sync_cap_s: float = float("inf")) -> PartitionResult:
    from ortools.linear_solver import pywraplp

    s = pywraplp.Solver.CreateSolver("SCIP")
    s.SetNumThreads(1)
    x = {o: [s.BoolVar(f"x_{o}_{p}") for p in range(len(pb.time_s[o]))] for o in pb.ops}
    obj = s.Objective()
    for o in pb.ops:
        s.Add(sum(x[o]) == 1, f"C1_one_{o}")
        for p, v in enumerate(x[o]):
            obj.SetCoefficient(v, float(pb.time_s[o][p]) / TIME_UNIT_S)
            if pb.base_ws_bytes + pb.buffer_bytes[o][p] > ws_cap_bytes:
                s.Add(v == 0, f"C5_buffer_{o}_{p}")
    for a, b in pb.edges:
        e = pb.edge_time_s[(a, b)]
        y = [[s.NumVar(0, 1, f"y_{a}_{b}_{p}_{k}") for k in range(e.shape[1])] for p in range(e.shape[0])]
        for p in range(e.shape[0]):
            s.Add(sum(y[p]) == x[a][p], f"C2_row_{a}_{b}_{p}")
            for k in range(e.shape[1]):
                obj.SetCoefficient(y[p][k], float(e[p, k]) / TIME_UNIT_S)
        for k in range(e.shape[1]):
            s.Add(sum(y[p][k] for p in range(e.shape[0])) == x[b][k], f"C3_col_{a}_{b}_{k}")
    if np.isfinite(act_cap_bytes):
        room = (act_cap_bytes - pb.base_act_bytes) / MEM_UNIT_BYTES
        s.Add(sum(float(pb.act_bytes[o][p]) / MEM_UNIT_BYTES * v
                  for o in pb.ops for p, v in enumerate(x[o])) <= room, "C4_act")
    _per_iteration_caps(s, pb, x, params_cap, sync_cap_s)
    obj.SetMinimization()
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(params.RELATIVE_MIP_GAP, 0.0)
    status = s.Solve(params)
    if status == pywraplp.Solver.INFEASIBLE:
        return PartitionResult("infeasible", None, None, None, None)
    if status != pywraplp.Solver.OPTIMAL:
        raise SolverError(f"SCIP returned status {status} on the partition MILP")
    choice = {o: int(np.argmax([v.solution_value() for v in x[o]])) for o in pb.ops}
    return PartitionResult("optimal", choice, *pb.evaluate(choice))


# the caps of C6/C7 are met with this slack (relative): they are set to a front point's own
# value, a float sum the backend may recompute a few ulps higher; distinct plans differ by
# whole weight matrices (>= millions of parameters) and whole all-reduces (>= microseconds)
CAP_SLACK = 1e-9


def _per_iteration_caps(s, pb: PartitionProblem, x, params_cap: float, sync_cap_s: float) -> None:
    for table, cap, unit, name in ((pb.replicated_params, params_cap, MEM_UNIT_BYTES, "C6_params"),
                                   (pb.grad_sync_s, sync_cap_s, TIME_UNIT_S, "C7_sync")):
        if np.isfinite(cap):
            s.Add(sum(float(table[o][p]) / unit * v for o in pb.ops for p, v in enumerate(x[o]))
                  <= cap * (1 + CAP_SLACK) / unit, name)
