"""What the planner minimises: the point prediction of the iteration time (`mean`) or a
quantile of it under the cost model's out-of-sample error (`pNN`, cost/trust.py
objective_factor). Parsed here, apart from cost/trust.py, so the records can validate it."""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace

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


def copied_with(record, **changes):
    """dataclasses.replace(record, **changes), made without re-running the record's generated
    __init__ where that only sets the fields (_plain: a dataclass with a __dict__, no
    __post_init__ and every field an __init__ argument, as StageCoefficients and
    coefficients._LayerCosts): its fields copied, then `changes` set, the same record. replace
    walks fields() and sets each of some twenty fields through object.__setattr__, about 11 us
    a copy against 1.5 us, and a search over layer plans copies tens of thousands
    (scaled_times, the optimistic builds' syncs; issue 33)."""
    cls = type(record)
    plain = _PLAIN.get(cls)
    if plain is None:
        plain = _PLAIN[cls] = (is_dataclass(cls) and not hasattr(cls, "__slots__")
                               and not hasattr(cls, "__post_init__") and all(f.init for f in fields(cls)))
    if not plain or not changes.keys() <= record.__dict__.keys():  # (an unknown name: replace's TypeError)
        return replace(record, **changes)
    new = object.__new__(cls)
    kept = new.__dict__
    kept.update(record.__dict__)
    kept.update(changes)
    return new


_PLAIN: dict[type, bool] = {}  # copied_with's, per record type


def scaled_times(coeffs, factor: float):
    """`coeffs` (cost/coefficients.StageCoefficients) with every time the split problem reads
    times `factor`: an iteration's time is a sum of these times with integer multiples (micro-
    batches, layers), so the split problem's objective scales by `factor` exactly."""
    if factor == 1.0:
        return coeffs
    return copied_with(coeffs, **{name: getattr(coeffs, name) * factor for name in TIME_FIELDS})


def capped_memory(coeffs, fill_cap: float, reserve_bytes: float):
    """`coeffs` with each stage's capacity at most `fill_cap` of its GPU's HBM, which build
    (cost/coefficients.py) gives as capacity_bytes + reserve_bytes: the inner problem of a
    memory tier (solver/memory_tiers.py) admits only plans that fill HBM that far."""
    if fill_cap >= 1.0:
        return coeffs
    import numpy as np
    cap = np.minimum(coeffs.capacity_bytes, fill_cap * (coeffs.capacity_bytes + reserve_bytes))
    return copied_with(coeffs, capacity_bytes=cap)
