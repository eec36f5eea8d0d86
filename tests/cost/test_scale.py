"""cost/scale.py: the slowest of many ranks, and how it enters an iteration.

Expected values are derived independently: the order statistic by numerical integration of
E[max of n] = integral of x * n * phi(x) * Phi(x)^(n-1) dx (not Blom's formula, which the module
uses), and the iteration by the schedule's algebra (cost/coefficients.py module docstring).
"""

from dataclasses import replace
from math import erf, exp, pi, sqrt
from pathlib import Path

import numpy as np
import pytest

from paraplan.cost.specs import Cluster
from paraplan import instances
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.scale import expected_max_standard_normal, slowest_rank_fraction
from paraplan.cost.simulate import simulate

SMALL = Path(instances.__file__).parent / "small-gpt-16xA100.yaml"


def _exact_expected_max(n: int) -> float:
    x = np.linspace(-9.0, 9.0, 20_001)
    phi = np.exp(-x * x / 2) / sqrt(2 * pi)
    cdf = 0.5 * (1 + np.vectorize(erf)(x / sqrt(2)))
    return float(np.trapezoid(x * n * phi * cdf ** (n - 1), x))


def test_one_rank_waits_for_nobody():
    assert expected_max_standard_normal(1) == 0.0
    assert slowest_rank_fraction(1, 0.02) == 0.0


def test_two_ranks_match_the_closed_form_within_blom_accuracy():
    # E[max of 2 standard normals] = 1 / sqrt(pi) = 0.5642 exactly; Blom's plotting position
    # gives Phi^-1(1.625 / 2.25) = 0.589, 4.4% high, the worst case of the approximation
    assert _exact_expected_max(2) == pytest.approx(1 / sqrt(pi), rel=1e-6)
    assert expected_max_standard_normal(2) == pytest.approx(1 / sqrt(pi), rel=0.05)


@pytest.mark.parametrize("n", [8, 64, 1024, 8192])
def test_blom_is_within_one_percent_of_the_order_statistic_at_job_sizes(n):
    # the integral: 1.4236 at 8, 2.3367 at 64, 3.2414... at 1000 (Royston 1982, Table 1)
    assert expected_max_standard_normal(n) == pytest.approx(_exact_expected_max(n), rel=0.01)


def test_growth_is_slower_than_sqrt_2_ln_n():
    # sqrt(2 ln N) is the asymptote from above: 2.04 at N = 8, 4.25 at N = 8192
    for n in (8, 8192):
        assert expected_max_standard_normal(n) < sqrt(2 * np.log(n))


def test_jitter_stretches_every_micro_batch_but_not_the_gradient_sync():
    # iteration = (m - 1/v) max T + sum T / v + max D (cost/coefficients.py): with every
    # stage time T scaled by (1 + f) and D untouched, iter' - D = (1 + f)(iter - D). The plan
    # is on 16 GPUs: f = sigma * E[max of 16 standard normals]
    inst = load_instance(SMALL)
    plan = plan_from_mapping(dict(tp=2, pp=2, dp=4, micro_batch=1), inst)
    sigma = 0.02
    still = simulate(inst, plan, NetEfficiency(rank_jitter_rel=0.0))
    jitter = simulate(inst, plan, NetEfficiency(rank_jitter_rel=sigma))
    f = sigma * _exact_expected_max(16)  # 0.02 * 1.766
    sync = still.exposed_s["grad_sync_and_optimizer"]
    assert jitter.exposed_s["grad_sync_and_optimizer"] == pytest.approx(sync)
    assert jitter.iter_time_s - sync == pytest.approx((1 + f) * (still.iter_time_s - sync), rel=2e-4)
    assert sum(jitter.exposed_s.values()) == pytest.approx(jitter.iter_time_s, rel=1e-9)
    assert jitter.exposed_s["slowest_rank"] > 0


def test_more_ranks_wait_longer():
    inst = load_instance(SMALL)
    eff = NetEfficiency(rank_jitter_rel=0.02)
    t16 = simulate(inst, plan_from_mapping(dict(tp=2, pp=2, dp=4, micro_batch=1), inst), eff)
    big = replace(inst, cluster=Cluster.of(replace(inst.cluster.one_group, nodes=inst.cluster.nodes * 64)))
    job = replace(big.job, global_batch=big.job.global_batch * 64)
    big = replace(big, job=job)
    t1024 = simulate(big, plan_from_mapping(dict(tp=2, pp=2, dp=256, micro_batch=1), big), eff)
    # same per-GPU work; the slowest of 1,024 ranks is further out than the slowest of 16
    assert t1024.exposed_s["slowest_rank"] > t16.exposed_s["slowest_rank"]
