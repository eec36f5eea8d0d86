"""Formulations: models built from cost/ coefficient arrays, solved exactly.

The planner's inner problem (micro-batch counts, layer splits and recompute counts of one or
more replica classes, over one or more network scenarios):

    multiclass.py        the problem and its CP-SAT model
    multiclass_milp.py   its MILP, through PuLP/CBC or SCIP / HiGHS (milp.py's modelling calls)
    quantize.py          the integer model of one class's layer split and its rounding
    split_dp.py          that integer model solved exactly without a solver: bottleneck
                         enumeration + dynamic programme over the stages (polynomial); the inner
                         solver of a lone class on one network
    timeline.py          the multi-period plan of a bandwidth timeline

The per-layer problem of per-operator tensor partitions (one partition per operator,
resharding between neighbours, memory caps) has two exact methods over the same arrays
(`formulations.partition.PartitionProblem`, built from cost/partition.py's LayerTable):

    partition.py     MILP (SCIP) with linearised resharding products, under epsilon-constraint caps
    partition_dp.py  PrimePar's segmented dynamic programme, exact Pareto labels

Formulations never import model or hardware specs: they consume the coefficient arrays only,
so the backends (and exhaustive search) are interchangeable and must agree.
"""
