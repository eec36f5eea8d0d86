"""Formulations of the layer-split problem of one outer configuration.

Each module turns `cost.coefficients.StageCoefficients` (per-stage arrays, shape (pp,)) into a
model for one solver family and returns a `formulations.result.SplitResult`:

    cpsat.py     CP-SAT (OR-Tools), integer model with explicit, conservative quantisation
    quantize.py  that rounding, shared with split_dp.py
    split_dp.py  the same integer model solved exactly without a solver: bottleneck
                 enumeration + dynamic programme over the stages (polynomial)
    milp.py      MILP through PuLP/CBC, or SCIP / HiGHS through OR-Tools' linear solver wrapper

The per-layer problem of per-operator tensor partitions (one partition per operator,
resharding between neighbours, memory caps) has two exact methods over the same arrays
(`formulations.partition.PartitionProblem`, built from cost/partition.py's LayerTable):

    partition.py     MILP (SCIP) with linearised resharding products, epsilon-constraint front
    partition_dp.py  PrimePar's segmented dynamic programme, exact Pareto labels

Formulations never import model or hardware specs: they consume the coefficient arrays only,
so the backends (and exhaustive search) are interchangeable and must agree.
"""
