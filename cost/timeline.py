"""Event-level timeline of one training iteration under the (interleaved) 1F1B schedule.

The planner optimises the closed-form iteration time of cost/schedule.py. This module replays
the same per-stage coefficients as a dependency-driven list schedule, for drawing a Gantt chart
and as an independent check of that formula.

Per-micro-batch work of stage s (T_s, R_s = r_s * recompute_time_s[s], P_s = the stage's
pipeline p2p time `stage_parts[s]["pp_p2p"]`, all from cost/coefficients.py) is split into
passes. The coefficients keep forward and backward summed, so the split is an approximation:

    W_s        = T_s - R_s - P_s                      (compute + exposed tp/cp/ZeRO comm)
    forward    = W_s * 1 / (1 + BACKWARD_LINEAR_FACTOR)        (= W_s / 3)
    backward   = W_s * BACKWARD_LINEAR_FACTOR / (1 + BACKWARD_LINEAR_FACTOR)   (= 2 W_s / 3)
    recompute  = R_s, run just before the backward it serves
    send/recv  = P_s / 2 after the forward (activations) and P_s / 2 after the backward
                 (gradients)

The 1/3 : 2/3 ratio is that of the linear layers (backward = input- plus weight-gradient
matmuls, Narayanan et al. SC'21 Sec. 3.5); attention and elementwise kernels deviate a little.
With v > 1 virtual stages every pass is split evenly into v chunks of 1/v of these times, as
in the formula's sum_s T_s / v term.

Order of operations on each stage (Megatron-LM `schedules.py`, Narayanan et al. Sec. 2.2):
stage s runs w_s warm-up forwards, then alternates one forward and one backward, then drains
the remaining w_s backwards, with w_s = p - s - 1 for 1F1B and 2(p - s - 1) + (v - 1) p for
the interleaved schedule (capped at m v). The k-th forward (and backward) on a stage is
chunk (k // p) mod v (backward: counted from the last chunk) of micro-batch
(k // (p v)) p + k mod p. Dependencies: a forward needs the same micro-batch's forward of the
previous model chunk (stage s-1, or stage p-1's previous chunk); a backward needs the backward
of the next model chunk. Each operation starts when both its dependency and its stage are free.
After a stage's last backward comes its gradient sync + optimizer step, D_s.

For stages with equal T_s and D_s the makespan is (m + (p - 1)/v) T + D, exactly the
closed form; for unequal stages the two differ (the formula charges the bottleneck m times and
every other stage once, the replay resolves the actual waits).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.coefficients import BACKWARD_LINEAR_FACTOR, StageCoefficients

FORWARD_SHARE = 1.0 / (1.0 + BACKWARD_LINEAR_FACTOR)


class EventKind(str, Enum):
    FORWARD = "forward"
    BACKWARD = "backward"
    RECOMPUTE = "recompute"
    SEND_RECV = "send/recv"
    GRAD_SYNC_OPTIMIZER = "grad sync + optimizer"


@dataclass(frozen=True, slots=True)
class Event:
    stage: int
    kind: EventKind
    start_s: float
    end_s: float
    micro_batch: int | None  # None for the once-per-iteration gradient sync + optimizer step
    chunk: int = 0  # model chunk (virtual stage) on this pipeline stage, 0..v-1
    in_backward: bool = False  # part of a backward pass (its recompute, backward, send/recv)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class _Op:
    forward: bool
    micro_batch: int
    chunk: int


def _stage_order(s: int, p: int, m: int, v: int) -> list[_Op]:
    total = m * v
    warmup = min(total, p - s - 1 if v == 1 else 2 * (p - s - 1) + (v - 1) * p)

    def op(k: int, forward: bool) -> _Op:
        chunk = (k // p) % v
        return _Op(forward, (k // (p * v)) * p + k % p, chunk if forward else v - 1 - chunk)

    order = [op(k, True) for k in range(warmup)]
    for j in range(total - warmup):
        order += [op(warmup + j, True), op(j, False)]
    order += [op(k, False) for k in range(total - warmup, total)]
    return order


def _dependency(s: int, o: _Op, p: int, v: int) -> tuple[int, bool, int, int] | None:
    """(stage, forward, micro_batch, chunk) that must finish before `o` runs on stage s."""
    if o.forward:
        if s > 0:
            return s - 1, True, o.micro_batch, o.chunk
        return (p - 1, True, o.micro_batch, o.chunk - 1) if o.chunk > 0 else None
    if s < p - 1:
        return s + 1, False, o.micro_batch, o.chunk
    if o.chunk < v - 1:
        return 0, False, o.micro_batch, o.chunk + 1
    return s, True, o.micro_batch, o.chunk


def one_f_one_b_events(c: StageCoefficients, n, r) -> list[Event]:
    """Every event of one iteration for split n (pp,) layers and r (pp,) fully recomputed
    layers, on the schedule the plan's `virtual_stages` selects (1F1B, or interleaved 1F1B)."""
    p, m, v = c.pp, c.outer.num_micro_batches, c.outer.virtual_stages
    if v > 1 and m % p:
        raise ValueError(f"the interleaved schedule needs micro-batches ({m}) divisible by pp ({p})")
    orders = {(s, 0): _stage_order(s, p, m, v) for s in range(p)}
    return _replay(c, orders, _pass_times(c, n, r, v), v)


def asymmetric_events(c: StageCoefficients, stage_dp, held, n, r) -> list[Event]:
    """Every event of one iteration of an asymmetric pipeline (cost/asymmetric.py), drawn for
    rank 0 of each stage: `c` holds its per-stage rows (AsymmetricCoefficients.rows), stage s
    has stage_dp[s] ranks, each running h_s = held[s] forwards before its first backward.

    The batch's M micro-batches go round-robin over a stage's ranks (micro-batch j on rank
    j mod d_s), each rank running its own m_s = M / d_s in 1F1B order (warm-up h_s - 1
    forwards, then one forward and one backward, then the drain), each pass timed as in
    one_f_one_b_events. Micro-batch j's forward on stage s waits for its forward on stage
    s - 1 (whichever rank ran it), its backward for its backward on stage s + 1; a stage's
    gradient sync and step follows the last backward of all its ranks."""
    total = int(c.outer.num_micro_batches * stage_dp[0])  # rows.outer is stage 0's (m_0)
    orders = {}
    for s in range(c.pp):
        for q in range(int(stage_dp[s])):
            mine = list(range(q, total, int(stage_dp[s])))
            w = int(held[s]) - 1
            order = [_Op(True, j, 0) for j in mine[:w]]
            for k in range(len(mine) - w):
                order += [_Op(True, mine[w + k], 0), _Op(False, mine[k], 0)]
            orders[s, q] = order + [_Op(False, j, 0) for j in mine[len(mine) - w:]]
    return _replay(c, orders, _pass_times(c, n, r, 1), 1)


def _pass_times(c: StageCoefficients, n, r, v: int):
    """Per stage, (forward, recompute, backward, half the p2p) seconds of one pass of one of its
    v chunks (module docstring), and its gradient sync and optimizer step D_s."""
    n, r = np.asarray(n, float), np.asarray(r, float)
    t, d = schedule.stage_times_s(c, n, r), schedule.sync_times_s(c, n)
    rc = r * c.recompute_time_s
    p2p = np.array([c.stage_parts[s].get("pp_p2p", 0.0) if c.stage_parts else 0.0 for s in range(c.pp)])
    work = t - rc - p2p
    assert (work >= -1e-12 * np.maximum(t, 1.0)).all(), "stage time below its recompute + p2p parts"
    work = np.maximum(work, 0.0)
    return work * FORWARD_SHARE / v, rc / v, work * (1 - FORWARD_SHARE) / v, p2p / (2 * v), d


def _replay(c: StageCoefficients, orders: dict, times, v: int) -> list[Event]:
    """The list schedule of `orders`, the operations each rank (stage s, rank q) runs in turn:
    each starts when its rank is free and the operation it waits for (_dependency) has ended;
    the passes of rank 0 of each stage are drawn, and a stage's gradient sync and optimizer
    step follows the last pass of all its ranks."""
    fwd, rc, bwd, half_p2p, d = times
    p = c.pp
    nxt, free = dict.fromkeys(orders, 0), dict.fromkeys(orders, 0.0)
    done: dict[tuple[int, bool, int, int], float] = {}
    events: list[Event] = []
    remaining = sum(len(o) for o in orders.values())
    while remaining:
        progressed = False
        for (s, q), order in orders.items():
            while nxt[s, q] < len(order):
                o = order[nxt[s, q]]
                dep = _dependency(s, o, p, v)
                if dep is not None and dep not in done:
                    break
                now = max(free[s, q], done[dep] if dep is not None else 0.0)
                parts = ((EventKind.FORWARD, fwd[s]),) if o.forward else ((EventKind.RECOMPUTE, rc[s]), (EventKind.BACKWARD, bwd[s]))
                for kind, dur in parts + ((EventKind.SEND_RECV, half_p2p[s]),):
                    if dur > 0 and q == 0:
                        events.append(Event(s, kind, now, now + dur, o.micro_batch, o.chunk, not o.forward))
                    now += dur
                done[s, o.forward, o.micro_batch, o.chunk] = free[s, q] = now
                nxt[s, q] += 1
                remaining -= 1
                progressed = True
        assert progressed, "the schedule deadlocked: the per-rank orders are inconsistent"
    for s in range(p):
        last = max(t for (s2, _), t in free.items() if s2 == s)
        if d[s] > 0:
            events.append(Event(s, EventKind.GRAD_SYNC_OPTIMIZER, last, last + d[s], None, in_backward=True))
    return events


def plan_events(inst, plan, reserve_bytes: float) -> list[list[Event]]:
    """Per replica class of a plan on node groups, the events of one iteration of one replica
    (a flat instance: its one group): one_f_one_b_events on the class's coefficients, or an
    asymmetric pipeline's asymmetric_events (the one place a drawing dispatches on the plan's
    shape)."""
    from paraplan.cost import asymmetric
    from paraplan.cost.class_coefficients import class_coefficients
    if asymmetric.is_asymmetric(plan.outer):
        k = plan.classes[0]
        ac = asymmetric.coefficients(inst, plan.outer, reserve_bytes=reserve_bytes)
        held = asymmetric.in_flight(k.stage_dp, tuple(int(x) for x in ac.micro_batches))
        return [asymmetric_events(ac.rows, k.stage_dp, held, k.layers_per_stage, k.full_recompute_layers)]
    coeffs = class_coefficients(inst, inst.cluster, plan.outer, reserve_bytes=reserve_bytes,
                                num_micro_batches=tuple(k.num_micro_batches for k in plan.classes))
    return [one_f_one_b_events(c, k.layers_per_stage, k.full_recompute_layers) for c, k in zip(coeffs, plan.classes)]


def makespan_s(events: list[Event]) -> float:
    return max((e.end_s for e in events), default=0.0)
