"""Iteration time and peak memory of layer splits, vectorised over many splits at once.

Pipeline schedule term (1F1B, Narayanan et al. SC'21 Sec. 2.2; bubble (p-1)/m of the ideal
time): with per-micro-batch stage times T_s and m micro-batches, the steady state is paced by
the slowest stage and the fill/drain passes once through every other stage,

    pipeline_time = m * max_s T_s + (sum_s T_s - max_s T_s) / v

which is (m + p - 1) * T for uniform 1F1B and m*T + (p-1)*T/v for the interleaved schedule
(Sec. 2.2.2: the bubble shrinks by the number of model chunks v). Gradient sync and the
optimizer step follow the last backward: iteration_time = pipeline_time + max_s D_s.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum

import numpy as np

from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.pipeline_split import short_chunk_factors
from paraplan.cost.pipeline_split import slot_relief_bytes as _slot_relief_bytes
from paraplan.cost.specs import ZeroBubble


def stage_times_s(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """T_s for splits n (..., pp) layers and r (..., pp) fully recomputed layers."""
    return c.stage_time_s + n * c.layer_time_s + r * c.recompute_time_s


def sync_times_s(c: StageCoefficients, n: np.ndarray) -> np.ndarray:
    return c.stage_sync_time_s + n * c.layer_sync_time_s


def stage_mem_bytes(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Peak memory per stage of splits n (..., pp) with r (..., pp) fully recomputed layers:
    the linear terms, plus uneven_chunk_mem_bytes where the outer counts the embedding or loss
    as a layer slot (c.outer.embedding_in_split / loss_in_split)."""
    linear = (c.stage_mem_bytes + n * (c.layer_state_bytes + c.layer_act_bytes)
              - r * (c.layer_act_bytes - c.layer_ckpt_bytes))
    if not (c.outer.embedding_in_split or c.outer.loss_in_split):
        return linear
    return linear + uneven_chunk_mem_bytes(c, n, r)


def uneven_chunk_factors(c: StageCoefficients) -> np.ndarray:
    """Per stage, f_s of uneven_chunk_mem_bytes (pipeline_split.short_chunk_factors)."""
    if not c.in_flight.size:  # coefficients that hold no activations in flight
        return np.zeros(c.pp)
    return short_chunk_factors(c.in_flight, c.outer.virtual_stages, c.outer.embedding_in_split,
                               c.outer.loss_in_split)


def uneven_chunk_mem_bytes(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per stage, the activation memory the linear terms miss where a stage's chunks are not
    equal: with the embedding (loss) counted as a layer slot (cost/pipeline_split.py), stage 0's
    first (the last stage's last) chunk holds one layer fewer, while the linear terms hold every
    chunk in flight at the stage's average (n_s / v layers; c.in_flight). Exactly, the stage
    holds W = v in_flight_s chunk passes of (n_s + 1) / v layers, of which h, those of the short
    chunk (chunk_items_held), one layer fewer: W (n_s + 1) / v - h layers' activations, i.e.
    in_flight_s - h more than priced, each at the stage's average bytes per layer and pass:
        f_s ((n_s - r_s) act_s + r_s ckpt_s) / n_s,   f_s = (in_flight_s - h) / in_flight_s.
    Llama-3.1 405B on pp 8, v 8, 192 micro-batches: stage 0 holds 71 passes, 15 of them of its
    first chunk: 127 layer activations where 133.1 are priced (-6.1); stage 7 holds 57, one
    of its last: 113 where 106.9 are priced (+6.1). Zero without the flags, and with v = 1.
    f_s >= -1 (the exact count is >= 0), so the corrected memory still falls as r grows when
    ckpt < act."""
    f = uneven_chunk_factors(c)
    n, r = np.asarray(n, float), np.asarray(r, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_layer = ((n - r) * c.layer_act_bytes + r * c.layer_ckpt_bytes) / n
    return np.where(f != 0, f * np.nan_to_num(per_layer), 0.0)


def slot_relief_bytes(c: StageCoefficients, embedding: bool | None = None, loss: bool | None = None) -> np.ndarray:
    """Per stage, the most uneven_chunk_mem_bytes can take off the linear terms
    (pipeline_split.slot_relief_bytes): a linear memory row lowered by it is a relaxation.
    `embedding`, `loss`: the slot flags to read (default c.outer's)."""
    if not c.in_flight.size:
        return np.zeros(c.pp)
    o = c.outer
    return _slot_relief_bytes(c.in_flight, o.virtual_stages, o.embedding_in_split if embedding is None else embedding,
                              o.loss_in_split if loss is None else loss, c.layer_act_bytes, c.layer_ckpt_bytes)


def pipeline_time_s(t: np.ndarray, m: int, v: int, drain_saving: np.ndarray | None = None) -> np.ndarray:
    """The pipeline term for stage times t (..., pp). drain_saving (..., pp): under a zero-bubble
    schedule, the time k W_s each stage's pass through the fill and drain loses
    (cost/zero_bubble.py), so that a pass costs B_s = T_s - k W_s (never below 0). The stage
    s* that paces the pipeline is then the one whose path is longest:

        pipeline_time = max_s [ m T_s + (sum_s' B_s' - B_s) / v ]

    With no saving (1F1B, interleaved) that path is longest at the slowest stage (m >= 1/v), the
    module docstring's formula. With one, s* is the slowest stage unless another's T_s lies
    within k (W_s - W_slowest) / (v m - 1) of it: reading s* as the slowest stage alone would
    make the time jump by k (W_s* - W_s) / v where two stage times cross, and a fixed
    schedule's makespan (a longest path through its passes) is continuous in their times."""
    if drain_saving is None:
        t_max = t.max(axis=-1)
        return m * t_max + (t.sum(axis=-1) - t_max) / v
    b = np.maximum(t - drain_saving, 0.0)
    return (m * t + (b.sum(axis=-1)[..., None] - b) / v).max(axis=-1)


def drain_savings_s(c: StageCoefficients, n: np.ndarray) -> np.ndarray | None:
    """k W_s of splits n (..., pp) under c's zero-bubble schedule; None without one."""
    return c.layer_drain_saving_s * n if c.layer_drain_saving_s.size else None


def iteration_time_s(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    n, r = np.asarray(n, float), np.asarray(r, float)
    t = stage_times_s(c, n, r)
    return (pipeline_time_s(t, c.outer.num_micro_batches, c.outer.virtual_stages, drain_savings_s(c, n))
            + sync_times_s(c, n).max(axis=-1))


def first_stage_min_layers(c: StageCoefficients) -> int:
    """Fewest decoder layers stage 0 may hold so that its first model chunk holds the layers the
    coefficients price there (StageCoefficients.first_chunk_min_layers = d: an MoE model's
    dense prefix; 1 otherwise): v d. With the embedding counted as a layer slot of that chunk
    (c.outer.embedding_in_split) the chunk holds (n_0 + 1) / v - 1 layers, so v (d + 1) - 1 for
    a prefix of d > 1; without one (d = 1) the chunk may hold the embedding alone, as
    Megatron-core allows, so v - 1. (The space offers no embedding slot to an MoE model with a
    dense prefix, solver/space.py, where d = 1 would be ambiguous.)"""
    v, d = c.outer.virtual_stages, c.first_chunk_min_layers
    if not c.outer.embedding_in_split:
        return v * d
    return v * (d + 1) - 1 if d > 1 else v - 1


def holds_dense_prefix(c: StageCoefficients, n: np.ndarray) -> np.ndarray:
    """Whether stage 0's first model chunk holds the layers the coefficients price there
    (first_stage_min_layers)."""
    return n[..., 0] >= first_stage_min_layers(c)


def fits(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Whether splits n (..., pp) with r recomputed layers fit in memory on every stage and
    are priced by `c` (holds_dense_prefix)."""
    n = np.asarray(n, float)
    mem_ok = (stage_mem_bytes(c, n, np.asarray(r, float)) <= c.capacity_bytes).all(axis=-1)
    return mem_ok & holds_dense_prefix(c, n)


# --- the schedules of torch.distributed.pipelining (torchtitan's pipeline_parallel_schedule) ----
#
# torch.distributed.pipelining (read at 00722e648b, schedules.py) runs ScheduleInterleavedZeroBubble,
# the paper's interleaved ZB-H1 ("ZB1P": its warm-up holds at most the interleaved 1F1B's
# micro-batches, each W issued right after its B), and ScheduleZBVZeroBubble (exactly two
# stages per rank placed as a V: rank s holds stages s and 2p - 1 - s). Neither runs under
# torch.compile (_check_torch_compile_compatibility). Their stage terms: cost/zero_bubble.py.


class TorchSchedule(str, Enum):
    """torch.distributed.pipelining's schedule names as torchtitan's
    parallelism.pipeline_parallel_schedule takes them (get_schedule_class)."""

    ONE_F_ONE_B = "1F1B"
    INTERLEAVED_1F1B = "Interleaved1F1B"
    INTERLEAVED_ZERO_BUBBLE = "InterleavedZeroBubble"
    ZBV_ZERO_BUBBLE = "ZBVZeroBubble"

    @property
    def zero_bubble(self) -> bool:
        return self in (TorchSchedule.INTERLEAVED_ZERO_BUBBLE, TorchSchedule.ZBV_ZERO_BUBBLE)

    @property
    def mode(self) -> ZeroBubble | None:
        """The outer configuration's zero_bubble mode that runs it (None: 1F1B / interleaved)."""
        return ZeroBubble(self.value) if self.zero_bubble else None

    @classmethod
    def of(cls, outer) -> "TorchSchedule":
        """The schedule an Outer (or a plan) runs: its zero-bubble mode, else 1F1B, interleaved
        with v > 1."""
        if outer.zero_bubble is not None:
            return cls(outer.zero_bubble.value)
        return cls.INTERLEAVED_1F1B if outer.virtual_stages > 1 else cls.ONE_F_ONE_B


def schedule_problem(kind: TorchSchedule, pp: int, v: int, m: int) -> str | None:
    """Why torch.distributed.pipelining (as torchtitan 0.2 builds it) does not run `kind` with
    pp ranks, v stages per rank and m micro-batches, or None."""
    if pp < 2:
        return "a pipeline schedule needs pp >= 2"
    if kind is TorchSchedule.ONE_F_ONE_B:
        return None if v == 1 else f"1F1B runs one stage per rank, not virtual_stages={v}"
    if kind is TorchSchedule.ZBV_ZERO_BUBBLE:
        if v != 2:
            return f"ZBVZeroBubble runs exactly two stages per rank (a V), not virtual_stages={v}"
        if pp < 3:
            # not torch's rule but paraplan's: v_shaped prices the rank without the output
            # layer from a middle stage's terms
            return "paraplan prices ZBVZeroBubble with pp >= 3 (a middle stage prices the bare rank)"
        if m < 2 * pp - 1:
            # ScheduleZBVZeroBubble pads to max(2 pp - 1, m) micro-batches and idles on the rest
            return (f"ZBVZeroBubble fills its V with 2 pp - 1 = {2 * pp - 1} micro-batches;"
                    f" {m} leave it idle")
        return None
    if v < 2:
        # torchtitan 0.2's pipeline_llm: "Multi-stage schedule requires at least 2 stages per
        # rank" (torch's ZB1P would take one, ZB-H1; torchtitan does not build it so)
        return f"{kind.value} runs two or more stages per rank (virtual_stages >= 2)"
    # the interleaved schedules' rounds: max(1, m // pp) of them must divide m
    rounds = max(1, m // pp)
    if m % rounds:
        return f"{kind.value} needs the {m} micro-batches a multiple of its {rounds} rounds (m // pp)"
    return None


def with_in_flight(c: StageCoefficients, held: np.ndarray) -> StageCoefficients:
    """`c` with each stage holding `held[s]` micro-batches' activations instead of c.in_flight
    (the activation columns and the stashed part of the stage constant scale with the count,
    as cost/dualpipe.py rescales them)."""
    scale = np.asarray(held, float) / c.in_flight
    return replace(c, layer_act_bytes=c.layer_act_bytes * scale,
                   layer_ckpt_bytes=c.layer_ckpt_bytes * scale,
                   stage_mem_bytes=c.stage_mem_bytes + c.stage_act_bytes * (scale - 1),
                   stage_act_bytes=c.stage_act_bytes * scale, in_flight=np.asarray(held, float))
