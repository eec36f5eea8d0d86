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


def test_ep16_check_all_to_all_by_hand():
    # The ep 16 run's HybridEP (priced as DeepEP) over 2 nodes of 8 H100, one 400 Gbit/s NIC a
    # GPU: a token's 8 experts (uniform over 2 nodes) reach 2 (1 - 1/2^8) = 1.99219 nodes, half
    # of them remote: 0.99609 network copies. Per layer and micro-batch, forward: the dispatch
    # of 4,096 tokens x 2,048 in FP8 with a scale per 128 (1 + 4/128 bytes an element) and the
    # combine in bf16 (2 bytes): 4,096 x 2,048 x 3.03125 = 25.43 MB, x 0.99609 = 25.33 MB;
    # backward the same again: 50.66 MB, the busiest rank's too (forced balance, imbalance 1).
    # With one remote node DeepEP's window caps the wire at 21.5 GB/s
    # (cost/moe.DEEPEP_PEER_BYTES_PER_S, below the NIC's 0.95 x 50 = 47.5): 2.3562 ms, plus 4
    # calls x (8.4 us NCCL-call + 10 us network-hop latency) = 73.6 us. Nothing hides it (no
    # all-to-all overlap, no pipeline): 48 layers x 64 micro-batches = 3,072 of them, 7.4642 s
    # exposed (at the NIC rate it was 3,072 x (1.0665 + 0.0736) ms = 3.5023 s).
    from paraplan.cost.moe_anchors import time_split
    row = next(r for r in ROWS if r["id"] == "bridge-2606-qwen3-30b-a3b-16xH100-fp8")
    copies = 2 * (1 - 0.5 ** 8) / 2
    per_layer_bytes = 2 * 4096 * 2048 * ((1 + 4 / 128) + 2) * copies
    expected_s = 48 * 64 * (per_layer_bytes / 21.5e9 + 4 * (8.4e-6 + 10e-6))
    assert expected_s == pytest.approx(7.4642, abs=1e-4)
    assert time_split(row).a2a_s == pytest.approx(expected_s, rel=1e-9)
