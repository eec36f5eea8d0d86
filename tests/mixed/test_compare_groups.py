"""`compare` and `report --plan` on a mixed cluster: two plans of replica classes side by side."""

from __future__ import annotations

import json

import pytest

from paraplan.solver.commands.cli import main

MIXED = "instances/mixed/tiny-2types.yaml"  # A100 and H100 groups


def _json(capsys, argv) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_two_plans_of_a_mixed_cluster(tmp_path, capsys):
    assert main(["plan", MIXED, "--top", "2", "-o", str(tmp_path / "m.yaml"), "--quiet"]) == 0
    capsys.readouterr()
    a, b = tmp_path / "m-1.yaml", tmp_path / "m-2.yaml"
    times = [_json(capsys, ["simulate", MIXED, "--plan", str(p)])["iter_time_s"] for p in (a, b)]
    out = _json(capsys, ["compare", str(a), str(b), "--instance", MIXED])
    assert [p["iter_time_s"] for p in out["plans"]] == pytest.approx(times, rel=1e-12)
    # the parts sum to each plan's iteration time (cost/simulate.Breakdown.exposed_s)
    for k, side in enumerate(("a_s", "b_s")):
        assert sum(p[side] for p in out["parts"]) == pytest.approx(times[k], rel=1e-9)
    assert out["faster"] == (str(a) if times[0] < times[1] else str(b))
    assert all(p["interval_s"][0] < p["iter_time_s"] < p["interval_s"][1] for p in out["plans"])
    # report --plan: #2 lies in the declared space, so the proved optimum is no slower
    page = tmp_path / "r.html"
    assert main(["report", MIXED, "--plan", str(b), "-o", str(page), "--quiet"]) == 0
    text = page.read_text()
    assert "Your plan vs the optimum" in text and "Your plan is" not in text.split("Your plan vs")[1][:200]
