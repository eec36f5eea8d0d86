"""The memos that keep pricing from redoing work (issues 32 and 33) return what the functions
compute: keyed by identity, an equal model of another identity is computed again and a changed
one is not served a stale value; what a caller may change in place is a copy."""

from dataclasses import replace

from paraplan.cost import coefficients as C
from paraplan.cost.flops import layer_matmuls
from paraplan.cost.specs import ModelSpec


def _model(hidden: int) -> ModelSpec:
    return ModelSpec(name="t", layers=4, hidden=hidden, heads=2, kv_heads=2, ffn=4 * hidden,
                     vocab=64, seq_len=8)


def test_layer_counts_follow_the_model_not_its_name():
    # attention-out GEMM: tokens x (2 x output width) x hidden / tp FLOPs, tokens = b s / cp = 8,
    # output width = heads x head_dim = hidden: 8 x 32 x 16 = 4,096 at hidden 16, and
    # 8 x 64 x 32 = 16,384 at hidden 32 (the same name, another model)
    small = _model(16)
    assert layer_matmuls(small, 1, 1, 1).attn_out == 4096
    wide = replace(small, hidden=32, ffn=128)
    assert layer_matmuls(wide, 1, 1, 1).attn_out == 16384
    equal = replace(small)  # equal to `small`, another object: computed again, the same value
    assert equal is not small and layer_matmuls(equal, 1, 1, 1).attn_out == 4096
    # tp 2 halves it (another key of the same model)
    assert layer_matmuls(small, 1, 2, 1).attn_out == 2048


def test_in_flight_micro_batches_is_a_copy():
    # 1F1B, pp 4, m 8: stage s holds min(pp - s, m) = 4, 3, 2, 1; interleaved v 2: chunks
    # min(2 (pp - s - 1) + (v - 1) pp + 1, m v) = 11, 9, 7, 5, over v: 5.5, 4.5, 3.5, 2.5
    first = C.in_flight_micro_batches(4, 8, 1)
    assert first.tolist() == [4.0, 3.0, 2.0, 1.0]
    first *= 10  # a caller scaling its own array in place
    assert C.in_flight_micro_batches(4, 8, 1).tolist() == [4.0, 3.0, 2.0, 1.0]
    assert C.in_flight_micro_batches(4, 8, 2).tolist() == [5.5, 4.5, 3.5, 2.5]
