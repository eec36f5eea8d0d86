"""cost/: the attention work each context-parallel rank does, counted the way Transformer
Engine's ring attention (AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/attention/
dot_product_attention/context_parallel.py, read at d0067d0) splits it, against what
cost/flops.layer_matmuls prices.

Megatron-core's load balancing cuts the sequence into 2 cp chunks of c = s / (2 cp) tokens and
gives rank r chunks r and 2cp-1-r. Step i of the ring holds the K, V of rank (r - i) mod cp and
calls the kernel once (per direction) on one of three sections:
  i == 0 ("diagonal"): all 2c local queries on all 2c local keys, causal;
  0 < i <= r ("lower-triangle"): all 2c queries on the first c of the keys, unmasked;
  i > r ("upper-triangle"): the second c queries on all 2c keys, unmasked.
"""

import pytest

from paraplan.cost.flops import layer_matmuls
from tests.cost.test_model_layout import tiny


def te_rank_pairs(s: int, cp: int, r: int) -> list[int]:
    """Query-key pairs rank r computes at each ring step, by listing TE's sections chunk by chunk
    and each chunk pair's mask: a chunk against an earlier chunk all c^2 pairs, against itself
    (causal) c(c+1)/2, against a later one none."""
    c = s // (2 * cp)
    mine = (r, 2 * cp - 1 - r)

    def pairs(q_chunks, k_chunks, causal):
        total = 0
        for qc in q_chunks:
            for kc in k_chunks:
                if not causal or qc > kc:
                    total += c * c
                elif qc == kc:
                    total += c * (c + 1) // 2
        return total

    steps = []
    for i in range(cp):
        theirs = ((r - i) % cp, 2 * cp - 1 - (r - i) % cp)
        if i == 0:
            steps.append(pairs(mine, mine, causal=True))
        elif i <= r:
            steps.append(pairs(mine, theirs[:1], causal=False))
        else:
            steps.append(pairs(mine[1:], theirs, causal=False))
    return steps


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_every_rank_and_step_does_one_cp_th_of_the_causal_scores(cp):
    # s = 16 cp tokens: c = 8. Diagonal: 2 self-blocks of 8 x 9 / 2 = 36 and the later chunk on
    # the earlier one, 64: 136. Every other step: 2c x c = c x 2c = 128 (the diagonal step's
    # extra 8 are its 2 diagonals of 4: the causal kernel keeps each query's own key).
    s = 16 * cp
    for r in range(cp):
        steps = te_rank_pairs(s, cp, r)
        assert steps == [136] + [128] * (cp - 1)
    # layer_matmuls prices a rank's core as its s / cp queries on all s keys at the causal
    # fraction 1/2: QK^T 2 x (s/cp) x s x q and PV 2 x (s/cp) x s x o FLOPs, halved. TE's pairs
    # times 2 FLOPs x (q + o) per pair give that plus the two self-blocks' c/2 pairs each beyond
    # c^2/2 (the kept diagonal: s/(2cp) pairs in all), which the model does not count
    m = tiny(seq_len=s)
    q, _, _, o = m.attention_widths
    te_flops = sum(te_rank_pairs(s, cp, 0)) * 2 * (q + o)
    priced = layer_matmuls(m, 1, 1, cp).attention_core
    assert priced == pytest.approx(2 * (s // cp) * s * (q + o) / 2)
    assert te_flops - priced == 2 * (q + o) * (s // (2 * cp))
