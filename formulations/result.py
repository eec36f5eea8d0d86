"""The one result record every split formulation returns, and the backend error."""

from __future__ import annotations

import math
from dataclasses import dataclass

STATUSES = ("optimal", "feasible", "infeasible", "timeout", "cutoff")


class SolverError(RuntimeError):
    """A solver backend is missing, crashed, or returned something unusable.

    Not for "no split fits" (that is the status "infeasible") nor for a time limit (status
    "timeout"): this is the backend failing, and the message names the backend.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitResult:
    """Outcome of one layer-split solve.

    status
        "optimal"    the solver proved the split optimal (see the backend's docstring for the
                     quantisation tolerance that "proved" carries);
        "feasible"   a split was found, optimality not proved;
        "infeasible" the solver proved that no split fits in memory (bound_s = inf);
        "timeout"    nothing found within the limit;
        "cutoff"     asked for splits faster than a cutoff, the solver proved there is none
                     (bound_s > the cutoff; formulations/split_dp.py only).
    layers_per_stage, full_recompute_layers
        the split (n_s, r_s), shape (pp,), or None when no split was found.
    objective_s
        iteration time of the returned split re-evaluated by `cost.schedule.iteration_time_s`
        (never the solver's own, scaled value); None when no split was found.
    bound_s
        a valid lower bound in seconds on the optimal iteration time of this outer
        configuration, or None when the backend gave none; inf when infeasible.
    wall_time_s
        model building plus solving, in wall-clock seconds.
    backend
        "cpsat", "cbc", "scip" or "highs".
    quantum_s
        time quantum of the integer model (CP-SAT); 0.0 for the floating-point MILP backends.
    """

    status: str
    layers_per_stage: tuple[int, ...] | None
    full_recompute_layers: tuple[int, ...] | None
    objective_s: float | None
    bound_s: float | None
    wall_time_s: float
    backend: str
    quantum_s: float

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"SplitResult.status must be one of {STATUSES}, got {self.status!r}")
        found = self.status in ("optimal", "feasible")
        has_split = (self.layers_per_stage is not None and self.full_recompute_layers is not None
                     and self.objective_s is not None)
        if found != has_split:
            raise ValueError(f"SplitResult: status {self.status!r} requires a split and objective_s "
                             f"exactly when a solution was found")
        if self.status == "infeasible" and self.bound_s != math.inf:
            raise ValueError("SplitResult: an infeasible result carries bound_s = inf")

    @property
    def gap_s(self) -> float | None:
        """objective_s - bound_s, or None when either is missing."""
        if self.objective_s is None or self.bound_s is None:
            return None
        return self.objective_s - self.bound_s
