"""Formulations of the layer-split problem of one outer configuration.

Each module turns `cost.coefficients.StageCoefficients` (per-stage arrays, shape (pp,)) into a
model for one solver family and returns a `formulations.result.SplitResult`:

    cpsat.py  CP-SAT (OR-Tools), integer model with explicit, conservative quantisation
    milp.py   MILP through PuLP/CBC, or SCIP / HiGHS through OR-Tools' linear solver wrapper

Formulations never import model or hardware specs: they consume the coefficient arrays only,
so the backends (and exhaustive search) are interchangeable and must agree.
"""
