"""cost/moe_record.py: the text edit that re-records the MoE anchors' predictions."""

import pytest

from paraplan.cost.moe_record import rerecorded

TEXT = """rows:
  - id: a
    measured: {value: 1}
    paraplan_prediction: {iter_time_s: 1.0, megatron_tflops_per_gpu: 2.0, error_pct: 3.0,
                          fits_memory: true}
  # a comment between rows stays
  - id: b
    paraplan_prediction: {iter_time_s: 9.0, megatron_tflops_per_gpu: 9.0, error_pct: 9.0,
                          fits_memory: false}
"""


def test_only_the_named_rows_prediction_changes_and_wraps_at_100_columns():
    new = {"iter_time_s": 953.26, "megatron_tflops_per_gpu": 1808.2, "error_pct": -29.7, "fits_memory": True}
    out = rerecorded(TEXT, {"b": new})
    # row a and the comment untouched; row b's mapping rewritten, its first line 97 characters
    # ("    paraplan_prediction: {" + three items), the fourth item wrapped under the brace
    assert out == TEXT.replace(
        """    paraplan_prediction: {iter_time_s: 9.0, megatron_tflops_per_gpu: 9.0, error_pct: 9.0,
                          fits_memory: false}""",
        """    paraplan_prediction: {iter_time_s: 953.26, megatron_tflops_per_gpu: 1808.2, error_pct: -29.7,
                          fits_memory: true}""")


def test_recording_the_values_a_file_holds_leaves_it_byte_identical():
    same = {"a": {"iter_time_s": 1.0, "megatron_tflops_per_gpu": 2.0, "error_pct": 3.0, "fits_memory": True}}
    assert rerecorded(TEXT, same) == TEXT


def test_an_unknown_row_is_refused():
    with pytest.raises(ValueError, match=r"no rows \['c'\]"):
        rerecorded(TEXT, {"c": {"iter_time_s": 1.0}})
