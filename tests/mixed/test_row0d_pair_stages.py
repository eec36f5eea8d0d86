"""A popped stage-wise block's (ZeRO stage, v) pairs read their syncs cheapest first, each
reading only while the pair can still reach the search's bar (solver/bounds/layouts._pair_bounds,
_read_syncs; issue 33: on the 4 types x 16 nodes row, of 20,958 pairs read, 5,088 lay past the
bar without syncs and 14,934 with the syncs in layers, so only 6,024 read them in chunks of v).

Each reading (the least sync split in layers, then A, S and the syncs in chunks of v, then the
joint reading) only raises a pair's bound, so a pair past the bar after one stays past it and,
at most its full bound, still bounds its configurations. Checked on the bundled two-type toy,
whose space runs every v (so the chunks are read), at bars between the pairs' full bounds: a
pair whose full bound (read with no bar) is at most the bar gets it, one past the bar keeps a
bound past the bar and at most the full one, and some pairs skip the syncs altogether and some
skip the chunks (the stages bite: the test fails if every pair reads everything)."""

from __future__ import annotations

import pytest
from test_row0c_live_blocks import _read, _stage_wise

from paraplan.solver.bounds import layouts


def test_pairs_past_the_bar_skip_the_dearer_readings_and_stay_past_it(monkeypatch):
    inst, parts = _stage_wise()
    _, full = _read(inst, parts)
    pairs = {k: lb for k, lb in full.items() if len(k) > 4}
    rows = {"layers": 0, "chunks": 0}
    least_split, chunk_syncs = layouts._least_sync_split, layouts._chunk_syncs

    def counted_split(g, d, slots, L):
        rows["layers"] += len(g)
        return least_split(g, d, slots, L)

    def counted_chunks(items, blk, zs, vs, L):
        rows["chunks"] += len(blk)
        return chunk_syncs(items, blk, zs, vs, L)

    monkeypatch.setattr(layouts, "_least_sync_split", counted_split)
    monkeypatch.setattr(layouts, "_chunk_syncs", counted_chunks)
    skipped_syncs = skipped_chunks = False
    values = sorted(set(pairs.values()))
    for bar in values[::max(1, len(values) // 12)]:
        rows.update(layers=0, chunks=0)
        _, got = _read(inst, parts, bar)
        read = [k for k in pairs if k in got]
        for k in read:
            if pairs[k] <= bar:
                # (the joint reading rounds a row by the rows read with it: a few ulps)
                assert got[k] == pytest.approx(pairs[k], rel=1e-12, abs=0.0)
            else:
                assert bar < got[k] <= pairs[k] * (1 + 1e-12)
        skipped_syncs |= rows["layers"] < len(read)
        skipped_chunks |= rows["chunks"] < rows["layers"]
    assert skipped_syncs and skipped_chunks
