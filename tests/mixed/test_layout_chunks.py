"""A stage-wise layout's bound per v reads its split in chunks of v layers (solver/bounds/layouts.
_chunk_terms, _chunk_syncs; issue 33): an interleaved stage holds a multiple of v layers, at
least v, so the slow stages of a pipeline through several GPU types hold more layers than the
balanced split of single layers gives them. On the 4 types x 16 nodes row the configurations
listed below the optimum were mostly interleaved (v = 2 to 10 on 8 or 16 stages) and their
bound that reads memory, with its memory caps left out, was 9-14% above their layout's bound
for their ZeRO stage and v: it read the chunks.

Read per ZeRO stage and v with the syncs (by which the search prunes each listed configuration),
not in the layouts' keys. Checked here against numbers derived by hand, and, on the bundled
two-type toy (v up to 5, with and without the embedding / loss slots), that the chunks raise
some bounds and leave the keys as they were. That each bound is
at most its configurations' optima is checked on the same toy by tests/mixed/test_layout_syncs.py
(per ZeRO stage and v, against the split DP's optimum of every configuration) and
tests/mixed/test_partial_layouts.py (the layouts' keys)."""

from __future__ import annotations

import numpy as np

from paraplan.cost.readers.instance import load_instance
from paraplan.solver.bounds import layouts
from paraplan.solver.bounds.layouts import partial_bounds_s
from paraplan.solver.space import declared_partials


def test_chunk_terms_by_hand():
    # two stages of floors 1 and 1.5 s a layer, no output layer, 8 layers in chunks of v = 4:
    # each stage holds one chunk, so the slowest stage is 4 x 1.5 = 6 s (single layers: 5 on
    # the first, 3 on the second, max(5, 4.5) = 5 s) and the sum 4 + 6 = 10 s (8 x 1 = 8 s
    # with every layer on the cheaper stage)
    t, h = np.array([[[1.0, 1.5]]]), np.zeros((1, 1))
    A, S = layouts._chunk_terms(t, h, 8, 4, [((0, 0),)])
    assert A.tolist() == [[6.0]] and S.tolist() == [[10.0]]
    # the loss as a slot on the last stage, chunks of v = 3 over 8 + 1 = 9 slots: (2, 1) chunks
    # hold 6 and 2 decoder layers, max(6, 3) = 6 s, sum 9 s; (1, 2) hold 3 and 5, max 7.5 s,
    # sum 10.5 s: A = 6, S = 9 (a' = (0, -1.5): -1.5 + 3 x 2.5 + (9 - 6) x 1)
    A, S = layouts._chunk_terms(t, h, 8, 3, [((0, 1),)])
    assert A.tolist() == [[6.0]] and S.tolist() == [[9.0]]
    # a row of two modes takes the least of them: (0, 1) at v = 4 reads floor(9 / 4) = 2
    # chunks, one a stage: max(4, -1.5 + 6) = 4.5 s, sum 4 + 4.5 = 8.5 s
    A, S = layouts._chunk_terms(t, h, 8, 4, [((0, 0), (0, 1))])
    assert A.tolist() == [[4.5]] and S.tolist() == [[8.5]]


def test_chunks_raise_some_bounds_of_interleaved_layouts(monkeypatch):
    inst = load_instance("instances/mixed/tiny-2types.yaml")
    parts = [p for p in declared_partials(inst) if p.dp is not None]

    def per_mode() -> tuple[np.ndarray, dict]:
        per_block: dict = {}
        keys = partial_bounds_s(inst, parts, [0], "max", (), per_block=per_block)
        partial_bounds_s(inst, parts, [0], "max", (), per_block=per_block, layer_memo={})
        return keys, per_block

    keys, got = per_mode()
    monkeypatch.setattr(layouts, "_chunk_terms", lambda t, h, L, v, modes: (np.zeros(t.shape[:2]),) * 2)
    monkeypatch.setattr(layouts, "_chunk_syncs", lambda items, blk, zs, vs, L: np.zeros((len(blk), 1)))
    keys_apart, apart = per_mode()
    assert got.keys() == apart.keys()
    assert all(got[k] >= apart[k] * (1 - 1e-9) for k in got)
    raised = [k for k in got if len(k) > 4 and k[-1] > 1 and got[k] > apart[k] * (1 + 1e-9)]
    assert raised
    # the keys (read without the syncs) read no chunks: the search's order is unchanged
    assert np.array_equal(keys, keys_apart)
