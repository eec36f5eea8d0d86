"""GPU dies: GPUs that share a compute die (A100-SXM4-40GB and -80GB) share the efficiency
parameters the calibration fits (cost/fit.py), and the trust band counts rows per die
(cost/trust.py). Apart from cost/fit.py so that reading a die does not load the fitter (issue 33,
start-up: a plan reads dies, it never fits)."""

from __future__ import annotations

MIN_ROWS_PER_DIE = 5  # fewer rows than this leave a die at its catalogue values (cost/fit.py)


def die(name: str) -> str:
    """GPUs that share a compute die share efficiency parameters (A100-SXM4-40GB/-80GB)."""
    return name.split("-")[0]
