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

import numpy as np

from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.pipeline_split import chunk_items_held


def stage_times_s(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """T_s for splits n (..., pp) layers and r (..., pp) fully recomputed layers."""
    return c.stage_time_s + n * c.layer_time_s + r * c.recompute_time_s


def sync_times_s(c: StageCoefficients, n: np.ndarray) -> np.ndarray:
    return c.stage_sync_time_s + n * c.layer_sync_time_s


def stage_mem_bytes(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    return (c.stage_mem_bytes + n * (c.layer_state_bytes + c.layer_act_bytes)
            - r * (c.layer_act_bytes - c.layer_ckpt_bytes))


def uneven_chunk_mem_bytes(c: StageCoefficients, n: np.ndarray, r: np.ndarray, embedding: bool,
                           loss: bool) -> np.ndarray:
    """Per stage, the activation memory stage_mem_bytes misses where a stage's chunks are not
    equal: with the embedding (loss) counted as a layer slot (cost/pipeline_split.py), stage 0's
    first (the last stage's last) chunk holds one layer fewer, while stage_mem_bytes holds every
    chunk in flight at the stage's average (n_s / v layers; c.in_flight). Exactly, the stage
    holds W = v in_flight_s chunk passes of (n_s + 1) / v layers, of which h, those of the short
    chunk (chunk_items_held), one layer fewer: W (n_s + 1) / v - h layers' activations, i.e.
    in_flight_s - h more than priced, each at the stage's average bytes per layer and pass.
    Llama-3.1 405B on pp 8, v 8, 192 micro-batches: stage 0 holds 71 passes, 15 of them of its
    first chunk: 127 layer activations where 133.1 are priced (-6.1); stage 7 holds 57, one
    of its last: 113 where 106.9 are priced (+6.1). Zero without the flags, and with v = 1."""
    pp, v = c.pp, c.outer.virtual_stages
    out = np.zeros(pp)
    if not c.in_flight.size:  # coefficients that hold no activations in flight
        return out
    for s, chunk, on in ((0, 0, embedding), (pp - 1, v - 1, loss)):
        if not on or c.in_flight[s] == 0:
            continue
        held = int(round(c.in_flight[s] * v))
        extra = c.in_flight[s] - chunk_items_held(held, pp, v, chunk)
        per_layer = ((n[s] - r[s]) * c.layer_act_bytes[s] + r[s] * c.layer_ckpt_bytes[s]) / n[s]
        out[s] += extra * per_layer / c.in_flight[s]
    return out


def pipeline_time_s(t: np.ndarray, m: int, v: int) -> np.ndarray:
    t_max = t.max(axis=-1)
    return m * t_max + (t.sum(axis=-1) - t_max) / v


def iteration_time_s(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    n, r = np.asarray(n, float), np.asarray(r, float)
    t = stage_times_s(c, n, r)
    return (pipeline_time_s(t, c.outer.num_micro_batches, c.outer.virtual_stages)
            + sync_times_s(c, n).max(axis=-1))


def holds_dense_prefix(c: StageCoefficients, n: np.ndarray) -> np.ndarray:
    """Whether stage 0's first model chunk (n_0 / v layers) holds the layers the coefficients
    price there (StageCoefficients.first_chunk_min_layers: an MoE model's dense prefix)."""
    n = np.asarray(n, float)
    return n[..., 0] >= c.outer.virtual_stages * c.first_chunk_min_layers


def fits(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Whether splits n (..., pp) with r recomputed layers fit in memory on every stage and
    are priced by `c` (holds_dense_prefix)."""
    n = np.asarray(n, float)
    mem_ok = (stage_mem_bytes(c, n, np.asarray(r, float)) <= c.capacity_bytes).all(axis=-1)
    return mem_ok & holds_dense_prefix(c, n)
