"""cost/coefficients.max_layers_per_stage keeps each row's caps (_CAPS): a row a batch of a few
rows computed is what a call on that row alone computes, and a second call on a row reads the
kept one; a larger batch keeps none."""

import numpy as np

from paraplan.cost import coefficients as C


def test_a_row_from_a_batch_is_the_row_computed_alone():
    rng = np.random.default_rng(7)
    rows, pp, v, layers = 40, 6, 2, 48
    state = rng.uniform(0, 2e9, (rows, pp))
    act = rng.uniform(0, 3e9, (rows, pp))
    ckpt = act * rng.uniform(0, 1, (rows, pp))
    capacity = np.full((rows, pp), 80e9)
    # stages with 10 GB to 80 GB free: caps that memory sets and caps at `layers` (48 layers of
    # at most 5 GB each need up to 240 GB)
    stage_mem = rng.uniform(0, 70e9, (rows, pp))
    C._CAPS.clear()
    # a batch of more than _CAPS_BATCH_ROWS rows keeps none (a grid's rows are not read again);
    # the same rows in batches of that many are each kept
    batch = C.max_layers_per_stage(state, act, ckpt, capacity, stage_mem, v, layers)
    assert rows > C._CAPS_BATCH_ROWS and len(C._CAPS) == 0
    step = C._CAPS_BATCH_ROWS
    parts = [C.max_layers_per_stage(*(a[r:r + step] for a in (state, act, ckpt, capacity, stage_mem)), v, layers)
             for r in range(0, rows, step)]
    assert np.concatenate(parts).tobytes() == batch.tobytes()
    assert len(C._CAPS) == rows
    for r in range(rows):
        one = (state[r].copy(), act[r].copy(), ckpt[r].copy(), capacity[r].copy(), stage_mem[r].copy())
        alone = C._max_layers_per_stage(*one, v, layers)  # computed, not read from _CAPS
        kept = C.max_layers_per_stage(*one, v, layers)
        assert kept.tobytes() == alone.tobytes() == batch[r].tobytes(), r
        assert C.max_layers_per_stage(*one, v, layers) is kept  # read, not computed again
    assert 0 < (batch == layers).sum() < batch.size  # both kinds of cap were checked
