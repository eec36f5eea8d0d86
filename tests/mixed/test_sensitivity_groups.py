"""`plan --sensitivity` on a mixed cluster (solver/sensitivity.py): every fitted parameter of
each GPU type the cluster holds moves, and the plan's time moves the way the physics says."""

from __future__ import annotations

import json

from paraplan.solver.commands.cli import main

MIXED = "instances/mixed/tiny-2types.yaml"  # A100 and H100 groups


def test_sensitivity_on_a_mixed_cluster_moves_each_gpu_types_parameters(capsys):
    assert main(["plan", MIXED, "--sensitivity", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    cases = {(c["parameter"], c["end"]): c for c in out["sensitivity"]["cases"]}
    # cost/fit.parameter_table of one A100 and one H100 die: a GEMM efficiency per die, then the
    # shared memory efficiency, attention fraction and the global half-efficiency size
    assert sorted({p for p, _ in cases}) == sorted(["A100.matmul_eff_max", "H100.matmul_eff_max",
                                                    "memory_eff", "attention_of_fa2_benchmark",
                                                    "matmul_half_flops"])
    used = {g for c in out["plan"]["classes"] for g in c["stages"]}
    nominal = out["iter_time_s"]
    for die, group in (("A100", "a100"), ("H100", "h100")):
        low, high = cases[(f"{die}.matmul_eff_max", "low")], cases[(f"{die}.matmul_eff_max", "high")]
        # a lower peak GEMM efficiency makes every GEMM on that GPU type slower and a higher one
        # faster (cost/efficiency.py: time ~ 1 / matmul_eff_max), so the plan's time brackets
        # its nominal time strictly where the plan runs stages on that type
        if group in used:
            assert high["plan_iter_time_s"] < nominal < low["plan_iter_time_s"]
        for c in (low, high):  # a plan that loses names the winner, which is faster on that instance
            if not c["stays_optimal"]:
                ours = c["plan_iter_time_s"]
                assert c["best_plan"] and (ours is None or c["best_iter_time_s"] < ours)
