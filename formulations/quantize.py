"""Integer scaling of a layer-split problem, shared by the integer formulations (cpsat.py, and
split_dp.py, which must see exactly the same integers). The rounding rules, their error bound E
and why memory is rounded conservatively are documented with the model in cpsat.py's docstring
("Quantisation", "Tolerance"). Kept apart from cpsat.py so that split_dp.py runs without
loading OR-Tools.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost.coefficients import StageCoefficients

TIME_QUANTUM_S = 1e-9  # finest time quantum: 1 ns
OBJECTIVE_LIMIT_QUANTA = 2**40  # scaled objective stays well inside int64 and exact in a double
MEM_QUANTUM_BYTES = 2**10  # 1 KiB

_ARRAYS = ("layer_time_s", "recompute_time_s", "stage_time_s", "layer_sync_time_s",
           "stage_sync_time_s", "layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes",
           "stage_mem_bytes", "capacity_bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantizedCoefficients:
    """The integer parameters of the model (int64 arrays of shape (pp,)) and their quanta."""

    time_quantum_s: float
    mem_quantum_bytes: int
    max_recompute: int  # R
    stage_time_q: np.ndarray  # â
    layer_time_q: np.ndarray  # t̂
    recompute_time_q: np.ndarray  # û
    stage_sync_q: np.ndarray  # ê
    layer_sync_q: np.ndarray  # ĝ
    stage_mem_q: np.ndarray  # b̂, rounded up
    layer_mem_q: np.ndarray  # ŵ, rounded up
    recompute_saving_q: np.ndarray  # ĥ, rounded down
    capacity_q: np.ndarray  # K̂, rounded down
    objective_error_s: float  # E: max |q Ẑ(x)/v - Z(x)| over all splits x


def quantize(c: StageCoefficients, allow_full_recompute: bool = True) -> QuantizedCoefficients:
    """Round the coefficients to integers: times to nearest, memory use up, capacity down."""
    pp, L, m, v = c.pp, c.layers, c.outer.num_micro_batches, c.outer.virtual_stages
    R = L if allow_full_recompute else 0
    for name in _ARRAYS:
        if not np.all(np.isfinite(getattr(c, name))):
            raise ValueError(f"StageCoefficients.{name} has a non-finite entry: {getattr(c, name)}")

    t_stage_ub = np.abs(c.stage_time_s) + L * np.abs(c.layer_time_s) + R * np.abs(c.recompute_time_s)
    d_stage_ub = np.abs(c.stage_sync_time_s) + L * np.abs(c.layer_sync_time_s)
    objective_ub_s = (v * m - 1 + pp) * t_stage_ub.max() + v * d_stage_ub.max()
    q = TIME_QUANTUM_S
    while objective_ub_s / q > OBJECTIVE_LIMIT_QUANTA:
        q *= 2

    mu = MEM_QUANTUM_BYTES
    layer_mem = c.layer_state_bytes + c.layer_act_bytes
    saving = c.layer_act_bytes - c.layer_ckpt_bytes

    def nearest(x: np.ndarray) -> np.ndarray:
        return np.rint(np.asarray(x, float) / q).astype(np.int64)

    multipliers = (v * m - 1) * (1 + L + R) + (pp + L + R) + v * (1 + L)
    return QuantizedCoefficients(
        time_quantum_s=q, mem_quantum_bytes=mu, max_recompute=R,
        stage_time_q=nearest(c.stage_time_s), layer_time_q=nearest(c.layer_time_s),
        recompute_time_q=nearest(c.recompute_time_s),
        stage_sync_q=nearest(c.stage_sync_time_s), layer_sync_q=nearest(c.layer_sync_time_s),
        stage_mem_q=np.ceil(c.stage_mem_bytes / mu).astype(np.int64),
        layer_mem_q=np.ceil(layer_mem / mu).astype(np.int64),
        recompute_saving_q=np.floor(saving / mu).astype(np.int64),
        capacity_q=np.floor(c.capacity_bytes / mu).astype(np.int64),
        objective_error_s=q * multipliers / v,
    )


