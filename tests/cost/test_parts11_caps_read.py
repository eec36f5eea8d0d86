"""cost/coefficients._max_layers_per_stage reads each stage's cap in fewer numpy calls (issue 33):
the memory-free pass only where some layer costs no memory, fit(n + 1) and fit(n) in one read.
Checked against the plain reading (_plain_caps below, the code before), byte for byte, on random
stages whose caps memory sets, that hold every layer, that free memory by recompute or not,
whose layers cost no memory or negative memory (a slot relaxation's), whose fixed memory passes
the capacity, at the float edge (a count whose peak equals the capacity), with inf and nan bytes,
in 1-D and 2-D. A reading that leaves the first guess uncapped (a planted fault) differs."""

import numpy as np
import pytest

from paraplan.cost import coefficients as C


def _plain_caps(state, act, ckpt, capacity, stage_mem, v: int, layers: int) -> np.ndarray:
    """The reading before (numpy calls per step: the memory-free pass always, fit twice)."""
    saving = act - ckpt
    frees = saving > 0

    def fit(n: np.ndarray) -> np.ndarray:  # cost/schedule.stage_mem_bytes with r = n where it frees
        return stage_mem + n * (state + act) - np.where(frees, n, 0.0) * saving <= capacity

    least = state + np.where(frees, ckpt, act)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.floor(np.maximum(capacity - stage_mem, 0) / least)
    # (nan_to_num's nan and +inf to `layers`; -inf, as its most negative float, clips to 0)
    n = np.clip(np.where(np.isnan(n) | (n == np.inf), layers, n), 0, layers)
    n = np.where(least > 0, n, np.where(fit(float(layers)), layers, 0))  # memory does not grow with n
    steps = 0
    while True:  # the guess moved onto the predicate, 64 steps at most
        up = (n < layers) & fit(n + 1)
        down = (n > 0) & ~fit(n)
        if not (up.any() or down.any()):
            return (n // v) * v
        assert steps < 64, "max_layers_per_stage off the predicate"
        n, steps = n + up - down, steps + 1


def _stages(rng, shape, odd: bool):
    free = rng.random() < 0.5  # some layers cost no memory (or negative memory), or none does
    state = rng.uniform(0, 2e9, shape) * (rng.choice([1.0, 1.0, 1.0, 0.0, -1.0], shape) if free else 1.0)
    act = rng.uniform(0, 3e9, shape) * (rng.choice([1.0, 1.0, 0.0], shape) if free else 1.0)
    ckpt = act * rng.choice([0.1, 0.5, 1.0, 1.5], shape)
    capacity = rng.choice([80e9, 40e9], shape)
    stage_mem = capacity - rng.uniform(-5e9, 75e9, shape)
    # at the float edge: a stage whose fixed memory leaves room for exactly k layers at their least
    edge = rng.random(shape) < 0.2
    least = state + np.where(act - ckpt > 0, ckpt, act)
    stage_mem = np.where(edge & (least > 0), capacity - rng.integers(1, 30, shape) * least, stage_mem)
    out = [state, act, ckpt, capacity, stage_mem]
    for a in out if odd else ():  # a few inf and nan bytes
        a[rng.random(shape) < 0.01] = np.inf
        a[rng.random(shape) < 0.005] = np.nan
    return out


def _read(f, arrays, v, layers):
    """f's caps, or None where its steps run out (nan bytes: no count is on the predicate)."""
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            return f(*arrays, v, layers)
    except AssertionError:
        return None


@pytest.mark.parametrize("shape", [(7,), (40, 6), (300, 3)])
def test_caps_are_the_plain_readings(shape):
    rng = np.random.default_rng(len(shape) * 1000 + shape[0])
    kinds, compared = set(), 0
    for case in range(60):
        arrays = _stages(rng, shape, odd=case % 3 == 0)
        v, layers = int(rng.choice([1, 2, 4])), int(rng.choice([8, 48, 96]))
        want, got = _read(_plain_caps, arrays, v, layers), _read(C._max_layers_per_stage, arrays, v, layers)
        assert (want is None) == (got is None)
        if want is None:
            continue
        compared += 1
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        kinds |= {int(k) for k in np.unique(np.sign(want - layers // v * v))}
        kinds.add("costly" if (arrays[0] + np.minimum(arrays[1], arrays[2]) > 0).all() else "free")
    assert kinds >= {-1, 0, "free", "costly"}  # caps memory sets, caps at every layer, both passes
    assert compared >= 40


class _NoFmin:
    """numpy whose fmin keeps its first argument (the planted fault: a guess past `layers`, or
    nan, left uncapped)."""

    @staticmethod
    def fmin(a, b):
        return a

    def __getattr__(self, name):
        return getattr(np, name)


def test_a_reading_that_leaves_the_guess_uncapped_is_caught(monkeypatch):
    rng = np.random.default_rng(3)
    arrays = _stages(rng, (200, 4), odd=False)
    want = _read(_plain_caps, arrays, 1, 48)
    assert want is not None
    monkeypatch.setattr(C, "np", _NoFmin())
    faulty = _read(C._max_layers_per_stage, arrays, 1, 48)
    assert faulty is None or faulty.tobytes() != want.tobytes()
