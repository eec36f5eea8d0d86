"""`paraplan verify` compares the methods on what each minimised, the quantile of
search.objective the proof is for (issue 31: the planner proves the optimum of the chosen
quantile), with the predicted time beside it: two methods whose plans share a predicted time
but not a p90 time disagree, and a tie in the p90 time agrees whatever the predicted times."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from paraplan.solver.commands.cli import main
from paraplan.solver.commands.verdict import EXIT_DISAGREE, report_verify

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "instances" / "tiny-gpt-8xA100.yaml"
NARROW = ["--search", "tp=1", "--search", "pp=1"]  # the tiny optimum's degrees: brute force in a second


def _json(capsys, argv) -> dict:
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_verify_compares_the_p90_value_the_planner_proved(capsys):
    planned = _json(capsys, ["plan", TINY, *NARROW, "--quiet", "--json"])
    verified = _json(capsys, ["verify", TINY, *NARROW, "--quiet", "--json"])
    assert verified["quantile"] == planned["quantile"] == "p90"
    assert verified["quantile_s"] == planned["quantile_s"]
    assert verified["iter_time_s"] == planned["iter_time_s"] < verified["quantile_s"]
    for m in verified["methods"]:  # each method's own optimum: the same value (float summation aside)
        assert m["quantile_s"] == pytest.approx(planned["quantile_s"], rel=1e-9)
        assert m["iter_time_s"] == pytest.approx(planned["iter_time_s"], rel=1e-9)
    mean = _json(capsys, ["verify", TINY, *NARROW, "--quiet", "--json", "--objective", "mean"])
    assert mean["quantile_s"] == mean["iter_time_s"] == planned["iter_time_s"]  # the mean optimum here


def test_the_verdict_reads_the_minimised_value_not_the_prediction(capsys):
    args = types.SimpleNamespace(json=False)
    # (method, status, value minimised, solve time, note, predicted time)
    same_prediction = [("dp", "optimal", 1.00, 0.1, "", 0.9), ("cpsat", "optimal", 1.10, 0.1, "", 0.9)]
    assert report_verify(args, same_prediction, 0.0, "nominal", "p90") == EXIT_DISAGREE
    same_quantile = [("dp", "optimal", 1.00, 0.1, "", 0.90), ("cpsat", "optimal", 1.00, 0.1, "", 0.95)]
    assert report_verify(args, same_quantile, 0.0, "nominal", "p90") == 0
    out = capsys.readouterr().out
    assert "iteration time at p90 (s)" in out and "predicted (s)" in out
