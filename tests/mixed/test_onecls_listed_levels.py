"""one_class._levels lists tau* and delta* in one array when every row's values fit one block
(_listed_levels, issue 33: the class planner reads a row of 4-16 stages per call, 8,947 calls
on the three-type, two-site row), in place of _min_bottleneck over the stacked pieces. The
two must give the same floats: on random rows of 1-16 stages whose stage times have a knee
or none, whose caps bind or not, with inf and nan pieces and padded stages (`live`), the
listing is compared bit for bit with _min_bottleneck of the stacked pieces (the sync's
pieces linear: an inf knee). A listing that misreads the sync's offset d or the knee (planted
faults) gives other floats, so the comparison can fail."""

from __future__ import annotations

import numpy as np

from paraplan.solver.bounds import one_class


def _pieces(rng: np.random.Generator, rows: int, pp: int, layers: int):
    """(safe, base, slope, knee, slope2, live): caps of 0-`layers` layers (some whole, some
    padded at 0), stage times with a knee inside the caps or at inf, a few inf and nan terms."""
    def u(lo, hi):
        return rng.uniform(lo, hi, (rows, pp))
    safe = np.where(rng.random((rows, pp)) < 0.3, float(layers), np.floor(u(0, layers + 1)))
    knee = np.where(rng.random((rows, pp)) < 0.3, np.inf, u(0, layers))
    a, d = u(-0.01, 0.05), u(0.0, 0.2)
    t, g = u(0.0, 0.1), u(0.0, 0.01) * (rng.random((rows, pp)) < 0.9)
    slope2 = t + u(0.0, 0.2)
    odd = rng.random((rows, pp))
    a = np.where(odd < 0.02, np.inf, a)
    slope2 = np.where((odd > 0.98) & np.isinf(knee), np.nan, slope2)  # nan past no knee: never read
    d = np.where(odd > 0.99, np.nan, d)  # a nan sync: listed as inf
    live = np.arange(pp)[None, :] < rng.integers(1, pp + 1, rows)[:, None]
    return safe, (a, d), (t, g), knee, slope2, live


def _reference(L, v, safe, base, slope, knee, slope2, live):
    """_levels as it read before the listing: _min_bottleneck of the stacked pieces."""
    g = slope[1]
    both = one_class._min_bottleneck(L, v, np.vstack([safe, safe]), np.vstack(base), np.vstack(slope),
                                     np.vstack([knee, np.full_like(g, np.inf)]), np.vstack([slope2, g]),
                                     None if live is None else np.vstack([live, live]))
    return both[:len(g)], both[len(g):]


def _cases(seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        layers, v = int(rng.integers(4, 90)), int(rng.choice([1, 1, 2, 4]))
        pp = int(rng.integers(1, 17))
        if pp * v > layers:
            continue
        safe, base, slope, knee, slope2, live = _pieces(rng, int(rng.integers(1, 6)), pp, layers)
        if rng.random() < 0.5:
            live = None
        else:
            safe = np.where(live, safe, 0.0)  # padded stages list no level (_padded_levels)
        yield layers, v, safe, base, slope, knee, slope2, live


def _listed(L, v, safe, base, slope, knee, slope2, live):
    return one_class._listed_levels(L, v, one_class._listed_chunks(L, v, safe), safe, base, slope, knee, slope2,
                                    live)


def test_the_listing_gives_min_bottlenecks_floats():
    finite = unfit = 0
    for L, v, safe, base, slope, knee, slope2, live in _cases(0):
        assert 2 * safe.size * one_class._listed_chunks(L, v, safe) <= one_class.BOTTLENECK_BLOCK_FLOATS
        want = _reference(L, v, safe, base, slope, knee, slope2, live)
        listed = _listed(L, v, safe, base, slope, knee, slope2, live)
        for got in (listed, one_class._levels(L, v, safe, base, slope, knee, slope2, live)):
            assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(got[:2], want))
        # the stage times at v layers it reads on the way: _piecewise's at n = v
        at_v = one_class._piecewise(float(v), base[0], slope[0], knee, slope2)
        assert np.array_equal(listed[2], at_v, equal_nan=True)
        finite += int(np.isfinite(want[0]).sum() + np.isfinite(want[1]).sum())
        unfit += int(np.isinf(want[0]).sum() + np.isinf(want[1]).sum())
    assert finite > 200 and unfit > 50  # both readings occur


def test_a_listing_that_misreads_the_sync_or_the_knee_is_caught():
    moved_d = moved_knee = 0
    for L, v, safe, base, slope, knee, slope2, live in _cases(1):
        want = _reference(L, v, safe, base, slope, knee, slope2, live)
        no_d = _listed(L, v, safe, (base[0], np.zeros_like(base[1])), slope, knee, slope2, live)
        moved_d += not np.array_equal(no_d[1], want[1], equal_nan=True)
        no_knee = _listed(L, v, safe, base, slope, np.full_like(knee, np.inf), slope2, live)
        moved_knee += not np.array_equal(no_knee[0], want[0], equal_nan=True)
    assert moved_d > 20 and moved_knee > 20
