"""GPU dies: GPUs that share a compute die (A100-SXM4-40GB and -80GB) share the efficiency
parameters the calibration fits (cost/fit.py), and the trust band counts rows per die
(cost/trust.py). Apart from cost/fit.py so that reading a die does not load the fitter (issue 33,
start-up: a plan reads dies, it never fits)."""

from __future__ import annotations

from functools import lru_cache

MIN_ROWS_PER_DIE = 5  # fewer rows than this leave a die at its catalogue values (cost/fit.py)


# kept per name: the trust band and the planner's quantile factor compare each feature's die with
# every published row's (47,000 reads in a plan of GPT-3 175B on 1,024 A100, issue 33)
@lru_cache(maxsize=None)
def die(name: str) -> str:
    """GPUs that share a compute die share efficiency parameters (A100-SXM4-40GB/-80GB)."""
    return name.split("-")[0]
