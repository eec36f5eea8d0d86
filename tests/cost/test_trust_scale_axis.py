"""The trust band's scale axis (cost/trust.py, `scale_slow_log_quantile`) and its width.

Every expected value is derived by hand in the comments from the hand-made residuals below."""

import math

import pytest

from oracles.cost import quantile_factor
from paraplan.cost.trust import (SCALE_AXIS_MIN_GPUS, Features, Residual, coverage_report, nested_bands,
                                 random_effects_log_quantile, relative_width, trust_for)

Z_10 = -1.2815516  # the standard normal's 10th percentile


def _f(**kw) -> Features:
    base = dict(family="", framework="megatron", framework_version="core_v0.19.0", gpu="A100-SXM4-80GB",
                num_gpus=512, zero=0, cp=1, pp=1, precision="bf16", activations="stored")
    return Features(**{**base, **kw})


def _rows(family: str, logs, num_gpus: int = 512) -> list[Residual]:
    return [Residual(id=f"{family}{i}", features=_f(family=family, num_gpus=num_gpus), error=math.expm1(x))
            for i, x in enumerate(logs)]


def test_random_effects_quantile_by_hand():
    # A: -0.1, +0.1 (mean 0.0); B: 0.2, 0.4 (mean 0.3). mu = 0.15; tau^2 = the sample variance
    # of (0.0, 0.3) = 0.045; sigma^2 = the squares about each mean, 4 x 0.01 = 0.04, over
    # n - K = 2 -> 0.02. A new family's run: sd sqrt(0.045 x (1 + 1/2) + 0.02) = sqrt(0.0875)
    # = 0.295804; its 10th percentile 0.15 - 1.2815516 x 0.295804 = -0.229088
    pool = _rows("A", (-0.1, 0.1)) + _rows("B", (0.2, 0.4))
    assert random_effects_log_quantile(pool, 0.1) == pytest.approx(-0.229088, abs=1e-6)
    assert random_effects_log_quantile(pool, 0.5) == pytest.approx(0.15)
    # one family (no spread of offsets to read), or one row per family (no spread within): none
    assert random_effects_log_quantile(_rows("A", (-0.1, 0.1)), 0.1) is None
    assert random_effects_log_quantile(_rows("A", (0.0,)) + _rows("B", (0.3,)), 0.1) is None


def test_the_slow_end_of_a_plan_at_scale_reaches_the_runs_at_scale():
    # A, B: 15 rows each on 64 GPUs, log error 0.0. D: 14 rows on 512 GPUs, 7 at -0.1 and 7 at
    # +0.1; E: 14 rows on 2,048 GPUs, 7 at 0.2 and 7 at 0.4. Same die, framework and release
    # everywhere: a plan on 512 or 64 GPUs has 3+ rows of each in its scale band -> level 0, and
    # its pool is every row, each family a quarter (an A or B row 1/60, a D or E row 1/56).
    # Sorted: D's seven -0.1 fill cumulative 0 .. 1/8, their midpoints 1/112 .. 13/112, so the
    # 10th percentile is -0.1; E's seven 0.4 fill 7/8 .. 1, midpoints from 7/8 + 1/112 = 0.884,
    # so the 90th is 0.4. The level's band: [-0.1, 0.4].
    # The runs on 256+ GPUs: D (mean 0.0) and E (mean 0.3); tau^2 = 0.045, sigma^2 = 28 x 0.01
    # / (28 - 2) = 0.0107692; sd sqrt(0.045 x 1.5 + 0.0107692) = 0.279766; 10th percentile
    # 0.15 - 1.2815516 x 0.279766 = -0.208535, below -0.1: the slow end of a 10 s prediction on
    # 512 GPUs is 10 e^0.208535 = 12.3187 s, the fast end 10 e^-0.4 = 6.7032 s
    res = _rows("A", [0.0] * 15, 64) + _rows("B", [0.0] * 15, 64) + _rows("D", [-0.1] * 7 + [0.1] * 7) \
        + _rows("E", [0.2] * 7 + [0.4] * 7, 2048)
    t = trust_for(_f(), 10.0, res)
    assert t.interval_s == pytest.approx((6.7032, 12.3187), abs=1e-4)
    assert "scale axis" in t.group
    assert quantile_factor(_f(), 0.9, res) == pytest.approx(math.exp(0.208535), abs=1e-6)
    # below SCALE_AXIS_MIN_GPUS the level's band alone: [10 e^-0.4, 10 e^0.1], p90 factor e^0.1
    small = _f(num_gpus=64)
    assert SCALE_AXIS_MIN_GPUS == 256 and small.num_gpus < SCALE_AXIS_MIN_GPUS
    assert trust_for(small, 10.0, res).interval_s == pytest.approx((10 * math.exp(-0.4), 10 * math.exp(0.1)))
    assert quantile_factor(small, 0.9, res) == pytest.approx(math.exp(0.1))
    # the fast side and a quantile under 0.5 are the level's (the axis holds the slow end only):
    # the p10 factor is exp(-r_90) = e^-0.4 both ways
    assert quantile_factor(_f(), 0.1, res) == pytest.approx(math.exp(-0.4))


def test_a_row_at_scale_is_judged_with_the_scale_axis_built_without_its_family():
    # P: -0.1, 0.0, 0.1; Q: 0.1, 0.2, 0.3; R: three rows at -0.12; all on 512 GPUs, alike but for
    # the family: each row has 6 rows of the other families in its band -> level 0, its pool the
    # other two families. An R row's pool, P and Q, a sixth each: sorted -0.1, 0.0, 0.1, 0.1,
    # 0.2, 0.3 at midpoints 1/12, 3/12, ..., 11/12. The 10th percentile interpolates from 1/12
    # (-0.1) to 3/12 (0.0): -0.1 + (0.1 - 1/12) / (1/6) x 0.1 = -0.09; the 90th from 9/12 (0.2)
    # to 11/12 (0.3): 0.29. The scale axis from P and Q: means 0.0 and 0.2, tau^2 = 0.02,
    # sigma^2 = 4 x 0.01 / (6 - 2) = 0.01, sd sqrt(0.02 x 1.5 + 0.01) = 0.2, 10th percentile
    # 0.1 - 1.2815516 x 0.2 = -0.156310: the band [-0.156310, 0.29] holds R's -0.12, which the
    # level's band alone, [-0.09, 0.29], misses.
    res = _rows("P", (-0.1, 0.0, 0.1)) + _rows("Q", (0.1, 0.2, 0.3)) + _rows("R", (-0.12,) * 3)
    lo, hi = nested_bands(res)[-1]
    assert (lo, hi) == pytest.approx((-0.156310, 0.29), abs=1e-6)
    assert coverage_report(res).by_family[-1] == ("R", 3, 1.0)
    # the same rows on 64 GPUs: no scale axis, R's band is the level's and misses
    small = [Residual(id=r.id, features=_f(family=r.features.family, num_gpus=64), error=r.error) for r in res]
    assert nested_bands(small)[-1] == pytest.approx((-0.09, 0.29))
    assert coverage_report(small).by_family[-1] == ("R", 3, 0.0)


def test_relative_width_and_the_median_width():
    # the band [p e^-r_hi, p e^-r_lo]: r_lo = -0.1, r_hi = 0.2 -> width e^0.1 - e^-0.2 = 1.105171 - 0.818731 = 0.286440
    assert relative_width(-0.1, 0.2) == pytest.approx(0.286440, abs=1e-6)
    # In the R case above on 64 GPUs, every row's band (its pool the other two families):
    # P's from Q and R: sorted -0.12 x 3 (midpoints 1/12, 3/12, 5/12), 0.1, 0.2, 0.3 (7/12,
    # 9/12, 11/12): r_10 = -0.12, r_90 = 0.2 + 0.15 x 6 x 0.1 = 0.29 -> width
    # e^0.12 - e^-0.29 = 1.127497 - 0.748264 = 0.379233. Q's from P and R: -0.12 x 3, -0.1,
    # 0.0, 0.1: r_10 = -0.12, r_90 = 0.0 + 0.9 x 0.1 = 0.09 -> e^0.12 - e^-0.09 = 0.213566.
    # R's: [-0.09, 0.29] -> e^0.09 - e^-0.29 = 1.094174 - 0.748264 = 0.345910. Nine rows,
    # three of each: sorted 0.2136 x 3, 0.3459 x 3, 0.3792 x 3, the median (fifth) 0.345910
    small = [Residual(id=f"{fam}{i}", features=_f(family=fam, num_gpus=64), error=math.expm1(x))
             for fam, logs in (("P", (-0.1, 0.0, 0.1)), ("Q", (0.1, 0.2, 0.3)), ("R", (-0.12,) * 3))
             for i, x in enumerate(logs)]
    bands = nested_bands(small)
    assert bands[0] == pytest.approx((-0.12, 0.29)) and bands[3] == pytest.approx((-0.12, 0.09))
    assert coverage_report(small).median_width == pytest.approx(0.345910, abs=1e-6)
