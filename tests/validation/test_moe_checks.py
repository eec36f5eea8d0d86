"""The fine-grained MoE checks (cost/published/moe_checks.yaml): published runs of many small
experts priced as they ran and never fitted, so their errors are out of sample by
construction."""

from __future__ import annotations

import pytest

from paraplan.cost import moe_fit
from paraplan.cost.moe_anchors import anchor_rows, check_rows, price

ROWS = check_rows()


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_recorded_prediction_is_todays_price(row):
    # the recorded prediction is what the model prices now: a pricing change that moves a
    # check shows in this file's diff
    assert row["paraplan_prediction"] == price(row).recorded()


def test_checks_are_not_anchors_and_not_fitted():
    # a check the fit read would no longer be out of sample
    anchors = {r["id"] for r in anchor_rows()}
    fitted = {r["id"] for r in moe_fit.fitted_rows()}
    assert all(r["id"] not in anchors | fitted for r in ROWS)


def test_qwen3_30b_routed_work_per_copy_is_a_quarter_of_qwen3_235b():
    # what the file's header says makes the check fine-grained: per routed copy the expert
    # GEMMs do 2 x 3 x hidden x expert_ffn FLOPs (SwiGLU: gate, up, out), 2 x 3 x 2,048 x 768 =
    # 9.44 MFLOP for Qwen3-30B-A3B against 2 x 3 x 4,096 x 1,536 = 37.7 MFLOP for Qwen3-235B
    from paraplan.cost.moe_anchors import anchor_instance
    small = anchor_instance(ROWS[0]).model
    assert (small.hidden, small.moe.expert_ffn, small.moe.experts, small.moe.top_k) == (2048, 768, 128, 8)
    assert 2 * 3 * small.hidden * small.moe.expert_ffn == pytest.approx(9.437e6, rel=1e-3)
