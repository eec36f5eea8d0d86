"""What the planner minimises: the point prediction of the iteration time (`mean`) or a
quantile of it under the cost model's out-of-sample error (`pNN`, cost/trust.py
objective_factor). Parsed here, apart from cost/trust.py, so the records can validate it."""

from __future__ import annotations

from dataclasses import replace

# p90: the upper end of the 80% band every plan prints. The planner then proves the plan whose
# time is lowest at the point it stays under in 9 of 10 out-of-sample runs, so a configuration
# that leans on what no published run validates must win by more than its wider band (README,
# "What the planner minimises").
DEFAULT_OBJECTIVE = "p90"


def parse_objective(text: str) -> float | None:
    """`mean` -> None (the point prediction); `pNN` -> NN / 100 for NN in 1..99."""
    if text == "mean":
        return None
    digits = text[1:] if isinstance(text, str) else ""
    if text[:1] == "p" and digits.isdigit() and not digits.startswith("0") and int(digits) <= 99:
        return int(digits) / 100
    raise ValueError(f"objective must be 'mean' or 'pNN' with NN in 1..99 (e.g. p90), got {text!r}")


TIME_FIELDS = ("layer_time_s", "recompute_time_s", "stage_time_s", "layer_sync_time_s", "stage_sync_time_s",
               "layer_drain_saving_s")


def scaled_times(coeffs, factor: float):
    """`coeffs` (cost/coefficients.StageCoefficients) with every time the split problem reads
    times `factor`: an iteration's time is a sum of these times with integer multiples (micro-
    batches, layers), so the split problem's objective scales by `factor` exactly."""
    if factor == 1.0:
        return coeffs
    return replace(coeffs, **{name: getattr(coeffs, name) * factor for name in TIME_FIELDS})


def capped_memory(coeffs, fill_cap: float, reserve_bytes: float):
    """`coeffs` with each stage's capacity at most `fill_cap` of its GPU's HBM, which build
    (cost/coefficients.py) gives as capacity_bytes + reserve_bytes: the inner problem of a
    memory tier (solver/memory_tiers.py) admits only plans that fill HBM that far."""
    if fill_cap >= 1.0:
        return coeffs
    import numpy as np
    cap = np.minimum(coeffs.capacity_bytes, fill_cap * (coeffs.capacity_bytes + reserve_bytes))
    return replace(coeffs, capacity_bytes=cap)
