"""Planning under the cost model's uncertainty (issue 31, item 8): `search.objective` /
`plan --objective mean|pNN`, the distance levels the band comes from (cost/trust.py), and the
planner's proof under a quantile.

Hand-made residuals give the expected factors, derived in the comments; the planner's quantile
optimum is checked against exhaustive search under the same objective and against the mean
optimum, whose plan is feasible under any objective.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from oracles.cost import quantile_factor
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.objective import DEFAULT_OBJECTIVE, parse_objective
from paraplan.cost.simulate import simulate
from paraplan.cost.trust import (MIN_POOL_ROWS, Features, Residual, band_pool, distance_level, objective_factor,
                                 trust_for)
from paraplan.solver.solve import solve as plan
from paraplan.solver.commands.cli import main
from paraplan.solver.exhaustive import exhaustive
from randinst import random_instance

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "instances" / "tiny-gpt-8xA100.yaml"


def _f(**kw) -> Features:
    # every row and plan of one release (cost/releases.py) unless a test says otherwise
    base = dict(family="", framework="megatron", framework_version="core_v0.19.0", gpu="A100-SXM4-80GB", num_gpus=64, zero=0, cp=1, pp=1,
                precision="bf16", activations="stored")
    return Features(**{**base, **kw})


def test_objective_names():
    assert parse_objective("mean") is None
    assert parse_objective("p90") == pytest.approx(0.90) and parse_objective("p5") == pytest.approx(0.05)
    for bad in ("p0", "p100", "p090", "90", "P90", "median", "p9.5"):
        with pytest.raises(ValueError, match="mean' or 'pNN"):
            parse_objective(bad)
    assert DEFAULT_OBJECTIVE == "p90"


def test_distance_level_counts_unvalidated_features_at_the_plan_scale():
    # Pool: 3 rows of megatron/A100/zero=0/pp=1 at 64 GPUs (band 9-64) and 3 with pp=4 at 512 GPUs
    # (band 256-1023). A plan on 64 GPUs with pp=2 and zero=1: pp > 1 has 0 rows in its band,
    # ZeRO-1 has 0 -> 2 unvalidated; die and framework have 3 -> level 2. The same plan with
    # zero=0, pp=1: level 0. On 512 GPUs with pp=2: pp > 1 has 3 rows there, but the die and
    # framework checks count only rows in the band (3 of them: the pp=4 rows) -> level 0.
    res = ([Residual(id=f"a{i}", features=_f(family="A"), error=0.0) for i in range(3)]
           + [Residual(id=f"b{i}", features=_f(family="B", pp=4, num_gpus=512), error=0.0) for i in range(3)])
    assert distance_level(_f(pp=2, zero=1), res) == 2
    assert distance_level(_f(), res) == 0
    assert distance_level(_f(pp=2, num_gpus=512), res) == 0
    # an H100 plan on 64 GPUs: the die is unvalidated (0 rows) -> level 1
    assert distance_level(_f(gpu="H100-SXM5-80GB"), res) == 1


def test_a_release_is_validated_only_by_rows_of_that_release():
    # Pool: 3 megatron rows of nemo-24.07 and 3 of a release no source names (""), all at 64
    # GPUs with the plan's other features. A plan of nemo-24.07: its release has 3 rows -> level
    # 0. A plan of the current release core_v0.19.0: the framework has 6 rows, the release 0 ->
    # level 1, with "release=megatron core_v0.19.0" unvalidated. Rows of an unknown release
    # validate no release, not even a plan's unknown one -> level 1 without the nemo rows.
    res = ([Residual(id=f"n{i}", features=_f(family="N", framework_version="nemo-24.07"), error=0.0)
            for i in range(3)]
           + [Residual(id=f"u{i}", features=_f(family="U", framework_version=""), error=0.0) for i in range(3)])
    assert distance_level(_f(framework_version="nemo-24.07"), res) == 0
    _, level, missing = band_pool(_f(), res)
    assert level == 1 and missing == ["release=megatron core_v0.19.0"]
    unknown = [r for r in res if r.features.family == "U"]
    assert distance_level(_f(framework_version=""), unknown) == 1
    # a torchtitan plan: neither its framework nor its release has a row -> level 2
    assert distance_level(_f(framework="torchtitan", framework_version="v0.2.2"), res) == 2


def test_quantile_factor_takes_the_residuals_at_the_plan_distance_or_farther():
    # Families A and B: 15 rows each of _f() at 64 GPUs, log error 0.0; each validates all the
    # other's features -> level 0. Families D (512 GPUs) and E (2,048 GPUs): 15 rows each with
    # pp = 2 and zero = 1, log error -0.2 (the model 18% fast); no other family has a row in
    # their scale bands -> zero, pp, die, framework and release unvalidated -> level 3 (capped).
    # Every row is on A100, which 5+ rows of the other families run: every die fitted. (D and E
    # hold 30 rows, MIN_POOL_ROWS = 29 or more: their level's pool is thick enough to be read.)
    res = ([Residual(id=f"{fam}{i}", features=_f(family=fam), error=0.0) for fam in "AB" for i in range(15)]
           + [Residual(id=f"{fam}{i}", features=_f(family=fam, pp=2, zero=1, num_gpus=n), error=math.expm1(-0.2))
              for fam, n in (("D", 512), ("E", 2048)) for i in range(15)])
    # a plain plan on 64 GPUs is level 0: its pool is every row at level 0 or farther, all four
    # families, a quarter each (a row 1/60). Sorted, D's and E's -0.2 sit at midpoints 1/120 ..
    # 59/120, A's and B's 0.0 at 61/120 .. 119/120: the 10th percentile is -0.2 -> p90 factor
    # exp(0.2); the median interpolates halfway from 59/120 to 61/120 -> -0.1 -> p50 factor
    # exp(0.1)
    pool, level, missing = band_pool(_f(), res)
    assert level == 0 and missing == [] and {r.features.family for r in pool} == {"A", "B", "D", "E"}
    assert quantile_factor(_f(), 0.9, res) == pytest.approx(math.exp(0.2))
    assert quantile_factor(_f(), 0.5, res) == pytest.approx(math.exp(0.1))
    # pp = 2 and zero = 1 on 64 H100s: no row with either, nor any H100 row, at 9-64 GPUs (its
    # framework and release are A's and B's) -> level 3; its pool is D and E, every log error
    # -0.2 -> p90 and p50 factors exp(0.2): the far plan's median is the wider one
    far = _f(pp=2, zero=1, gpu="H100-SXM5-80GB")
    pool, level, missing = band_pool(far, res)
    assert level == 3 and missing == ["zero=1", "pp=2", "gpu=H100"]
    assert {r.features.family for r in pool} == {"D", "E"}
    assert quantile_factor(far, 0.9, res) == pytest.approx(math.exp(0.2))
    assert quantile_factor(far, 0.5, res) == pytest.approx(math.exp(0.2))
    # without E, level 3 holds one family (< MIN_LEVEL_FAMILIES = 2), as do levels 2 and 1 (no
    # row sits there): the pool is every level's, A, B and D, each family a third of the weight
    # (a D row 1/45). Sorted by log error, D's 15 midpoints lie at cumulative 1/90 .. 29/90, so
    # the 10th percentile is D's -0.2 -> exp(0.2)
    no_e = [r for r in res if r.features.family != "E"]
    pool, level, _ = band_pool(far, no_e)
    assert level == 3 and {r.features.family for r in pool} == {"A", "B", "D"}
    assert quantile_factor(far, 0.9, no_e) == pytest.approx(math.exp(0.2))
    # and its median (p50) lies among A and B's 0.0 (midpoints 1/3 + 1/90 .. 89/90) -> factor 1
    assert quantile_factor(far, 0.5, no_e) == pytest.approx(1.0)


def test_a_left_out_family_validates_nothing_its_band_is_built_from():
    # Four families of 15 rows at 64 GPUs: A with pp = 2 and E with cp = 2 (log error -0.2), B
    # and D plain (0.0); C, the family left out, has pp = 2 and cp = 2. A ZeRO-1 query is level 1
    # (no row has ZeRO-1). Judged within the pool A, B, D, E, A's pp > 1 and E's cp > 1 have no
    # other family's rows -> A and E are level 1, B and D level 0: the pool at level 1 or
    # farther is A and E (2 families, 30 rows >= MIN_POOL_ROWS = 29). Were C's rows counted, they
    # would validate both and every row would be level 0.
    res = [Residual(id=f"{fam}{i}", features=_f(family=fam, **kw), error=math.expm1(e))
           for fam, kw, e in (("A", dict(pp=2), -0.2), ("B", {}, 0.0), ("C", dict(pp=2, cp=2), 0.0),
                              ("D", {}, 0.0), ("E", dict(cp=2), -0.2)) for i in range(15)]
    pool, level, missing = band_pool(_f(zero=1), res, exclude_family="C")
    assert level == 1 and missing == ["zero=1"]
    assert {r.features.family for r in pool} == {"A", "E"}


def test_a_level_thinner_than_the_minimum_pool_borrows_the_next_nearer_level():
    # MIN_POOL_ROWS is the smallest n whose lowest of n draws lies below the true 10th
    # percentile with 95% probability: 1 - 0.9^n >= 0.95, 0.9^28 = 0.0523, 0.9^29 = 0.0471 -> 29
    assert 0.9 ** 28 > 0.05 >= 0.9 ** 29 and MIN_POOL_ROWS == 29
    # A and B: 15 plain rows each at 64 GPUs (band 9-64), log error 0.0: they validate each
    # other -> level 0. G: 15 rows at 64 GPUs with zero = 1 and pp = 2, log error +0.1: no other
    # family runs either at 9-64 GPUs -> level 2. D (512 GPUs) and E (2,048 GPUs): 14 rows each
    # with zero = 1 and pp = 2, log error -0.2: no other family's row in their scale bands ->
    # ZeRO-1, pp, die, framework and release unvalidated -> level 3. Every row on A100.
    # A plan on 128 GPUs (65-255: no row at all) with zero = 1, pp = 2 is level 3. Its level's
    # pool, D and E, holds 28 rows of 2 families: thin (28 < 29), so it reads the rows at level
    # 2 or farther: D, E and G, 43 rows of 3 families, a third of the weight each (a D or E row
    # 1/42, a G row 1/45). Sorted, D's and E's -0.2 sit at midpoints 1/84 .. 55/84 (= 0.655),
    # G's +0.1 at 2/3 + 1/90 (= 0.678) .. 89/90: r_10 = -0.2, r_90 = +0.1 -> the interval of a
    # 10 s prediction is [10 e^-0.1, 10 e^0.2] = [9.048, 12.214] s, and the p10 factor e^-0.1.
    def rows(e_rows):
        return ([Residual(id=f"{fam}{i}", features=_f(family=fam), error=0.0) for fam in "AB" for i in range(15)]
                + [Residual(id=f"g{i}", features=_f(family="G", zero=1, pp=2), error=math.expm1(0.1))
                   for i in range(15)]
                + [Residual(id=f"{fam}{i}", features=_f(family=fam, zero=1, pp=2, num_gpus=n),
                            error=math.expm1(-0.2)) for fam, n, k in (("D", 512, 14), ("E", 2048, e_rows))
                   for i in range(k)])
    plan = _f(zero=1, pp=2, num_gpus=128)
    res = rows(14)
    pool, level, missing = band_pool(plan, res)
    assert level == 3 and len(missing) == 5
    assert len(pool) == 43 and {r.features.family for r in pool} == {"D", "E", "G"}
    t = trust_for(plan, 10.0, res)
    assert t.interval_s == pytest.approx((10 * math.exp(-0.1), 10 * math.exp(0.2)))
    assert t.interval_s == pytest.approx((9.048, 12.214), abs=1e-3)
    assert "rows at distance level 2 or farther (level 3: fewer than 29 rows" in t.group
    assert quantile_factor(plan, 0.1, res) == pytest.approx(math.exp(-0.1))
    # one more E row: level 3 holds 29 rows, thick enough -> D and E alone, every log error
    # -0.2 -> the interval [10 e^0.2, 10 e^0.2] and the p10 factor e^0.2
    res = rows(15)
    pool, level, _ = band_pool(plan, res)
    assert len(pool) == 29 and {r.features.family for r in pool} == {"D", "E"}
    assert trust_for(plan, 10.0, res).interval_s == pytest.approx((10 * math.exp(0.2),) * 2)
    assert quantile_factor(plan, 0.1, res) == pytest.approx(math.exp(0.2))


def test_rows_on_a_die_without_fitted_efficiencies_are_kept_apart():
    # A and B: 15 rows each on A100 at 64 GPUs, log error 0.0; C: 2 rows on V100, -0.5. A and B
    # each see 15 A100 rows of another family (MIN_ROWS_PER_DIE = 5): fitted; C's V100 has no
    # other family's rows: its efficiencies stay the catalogue defaults. An A100 plan (30 rows
    # on its die, MIN_POOL_ROWS = 29 or more) takes A and B only: every log error 0 -> p90
    # factor 1. A V100 plan's
    # unfitted-die rows are C's alone (1 family < MIN_LEVEL_FAMILIES): it takes all three
    # families, a third each; C's -0.5 sits at midpoints 1/12, 3/12 -> the 10th percentile
    # is -0.5 -> exp(0.5)
    res = ([Residual(id=f"{fam}{i}", features=_f(family=fam), error=0.0) for fam in "AB" for i in range(15)]
           + [Residual(id=f"c{i}", features=_f(family="C", gpu="V100-SXM-32GB"), error=math.expm1(-0.5))
              for i in range(2)])
    assert {r.features.family for r in band_pool(_f(), res)[0]} == {"A", "B"}
    assert quantile_factor(_f(), 0.9, res) == pytest.approx(1.0)
    v100 = _f(gpu="V100-SXM-32GB")
    assert {r.features.family for r in band_pool(v100, res)[0]} == {"A", "B", "C"}
    assert quantile_factor(v100, 0.9, res) == pytest.approx(math.exp(0.5))


def test_a_memory_fill_beyond_every_row_of_its_scale_is_one_level_farther():
    # A and B: 3 rows each of _f() at 64 GPUs (band 9-64), A's filling 0.80 of HBM, B's 0.90;
    # every other feature validated for a plain plan (level 0). A plan filling 0.85: B's rows
    # fill as far (MIN_MEMORY_ROWS = 1) -> level 0; filling 0.95: no row of 9-64 GPUs does ->
    # "memory=95.0%" unvalidated, level 1. A row on 512 GPUs filling 0.99 validates nothing at
    # 9-64 GPUs (the fill is judged in the plan's scale band). No fill (a DualPipe plan):
    # nothing counted, level 0.
    res = ([Residual(id=f"a{i}", features=_f(family="A", memory_fill=0.80), error=0.0) for i in range(3)]
           + [Residual(id=f"b{i}", features=_f(family="B", memory_fill=0.90), error=0.0) for i in range(3)]
           + [Residual(id="c", features=_f(family="C", num_gpus=512, memory_fill=0.99), error=0.0)])
    assert distance_level(_f(memory_fill=0.85), res) == 0
    assert band_pool(_f(memory_fill=0.95), res)[2] == ["memory=95.0%"]
    assert distance_level(_f(memory_fill=0.95), res) == 1
    assert distance_level(_f(memory_fill=None), res) == 0
    # judged without B (a left-out family validates nothing): A's 0.80 is the fullest -> 0.85
    # is beyond it
    assert band_pool(_f(memory_fill=0.85), res, exclude_family="B")[1] == 1


def test_the_memory_tiers_cap_the_fill_at_the_fullest_row_of_the_scale():
    # the planner's tiers (cost/trust.memory_fill_caps): the fullest bundled row of the
    # instance's scale band and all of HBM. tiny-gpt runs 8 A100 (band 1-8); its cap is the
    # largest fill of the published rows there (published_memory_fractions, the same pricing
    # as every row's memory_fill), below 1
    from paraplan.cost.trust import memory_fill_caps, published_memory_fractions
    inst = load_instance(TINY)
    fullest = max(f for f, _ in published_memory_fractions("1-8"))
    assert memory_fill_caps(inst) == (fullest, 1.0) and fullest < 1.0
    # `mean` reads no band: one tier
    mean = dataclasses.replace(inst, search=dataclasses.replace(inst.search, objective="mean"))
    assert memory_fill_caps(mean) == (1.0,)


def test_a_memory_tier_caps_each_stage_at_its_share_of_hbm():
    # cost/objective.capped_memory: capacity = min(HBM - reserve, cap x HBM), HBM given as
    # capacity + reserve. 80 GiB with a 2 GiB reserve: 78 GiB; at cap 0.9, 72 GiB (0.9 x 80);
    # at cap 0.99, 79.2 GiB > 78: the reserve binds, 78 GiB
    import numpy as np
    from paraplan.cost.objective import capped_memory
    gib = 2.0 ** 30

    @dataclasses.dataclass(frozen=True)
    class Coeffs:
        capacity_bytes: np.ndarray
    c = Coeffs(capacity_bytes=np.array([78 * gib, 78 * gib]))
    assert list(capped_memory(c, 0.9, 2 * gib).capacity_bytes) == pytest.approx([72 * gib] * 2)
    assert list(capped_memory(c, 0.99, 2 * gib).capacity_bytes) == pytest.approx([78 * gib] * 2)
    assert capped_memory(c, 1.0, 2 * gib) is c


def _tight_tiny():
    """tiny-gpt widened to hidden 8192 (64 heads of 128, ffn 4 x hidden) at 4,096 tokens, one
    configuration: tp 1, pp 2, dp 4, ZeRO-0, micro-batch 4 (2 micro-batches), no selective
    recompute. Storing every activation does not fit 80 GiB less the 2 GiB reserve; the fastest
    split that fits fills more of HBM than any published row on 1-8 GPUs, so the memory tier
    decides its factor (on 8 A100 at pp 2: 1.064 within, 1.120 beyond)."""
    from paraplan.cost.specs import Recompute
    base = load_instance(TINY)
    return dataclasses.replace(
        base, model=dataclasses.replace(base.model, seq_len=4096, hidden=8192, heads=64, ffn=4 * 8192),
        search=dataclasses.replace(base.search, tp=(1,), pp=(2,), cp=(1,), zero=(0,), micro_batch=(4,),
                                   sequence_parallel=(False,), recompute=(Recompute.NONE,), virtual_stages=(1,)))


def _every_plan_value(inst) -> list[tuple[float, float, object]]:
    """(value at its own factor, time, plan) of every plan of a one-configuration instance of
    tp 1, pp 2, dp 4, ZeRO-0, no selective recompute and 2 micro-batches (_tight_tiny's and
    _relaxation_misleads' spaces), by brute force, without the planner's tiers: every split
    (n, L - n) and every count of fully recomputed layers per stage that Megatron runs (the plan
    records refuse the others) is simulated; a plan that fits is valued at its time x the
    factor of its own memory fill (_factor: the fill read off its simulated stages, judged
    against the published rows)."""
    from paraplan.cost.errors import ConfigError
    from paraplan.cost.plan_specs import Plan
    from paraplan.cost.specs import Recompute
    layers, mb = inst.model.layers, inst.search.micro_batch[0]
    values = []
    for n in range(1, layers):
        for r in ((a, b) for a in range(n + 1) for b in range(layers - n + 1)):
            try:
                p = Plan.flat(layers_per_stage=(n, layers - n), full_recompute_layers=r, tp=1, pp=2, dp=4, cp=1,
                              micro_batch=mb, sequence_parallel=False, recompute=Recompute.NONE, zero=0,
                              virtual_stages=1, num_micro_batches=2)
                bd = simulate(inst, p)
            except ConfigError:
                continue
            if bd.fits:
                values.append((bd.iter_time_s * _factor(inst, p), bd.iter_time_s, p))
    return values


class _Searches:
    """Counts the searches of the declared space (solver/search._search_tier) one plan takes:
    the relaxation, and the two memory tiers where it does not end the search."""

    def __init__(self, monkeypatch):
        from paraplan.solver import search as search_module
        self.calls: list = []
        run = search_module._search_tier

        def counted(inst, *args, **kwargs):
            self.calls.append((inst.search.memory_fill_cap, inst.search.factor_memory_fill))
            return run(inst, *args, **kwargs)
        monkeypatch.setattr(search_module, "_search_tier", counted)


def test_the_memory_aware_quantile_optimum_is_brute_force_s_over_every_plan(monkeypatch):
    # The planner's tiered optimum (solver/memory_tiers.py) must be brute force's minimum
    # (_every_plan_value) on every backend and in exhaustive search.
    from paraplan.cost.plan_specs import Plan
    from paraplan.cost.specs import Recompute
    inst = _tight_tiny()
    values = _every_plan_value(inst)
    best_value, best_time, _ = min(values, key=lambda v: v[0])
    fastest_value, fastest_time, fastest = min(values, key=lambda v: v[1])
    # the memory term bites: the fastest plan fills beyond the fullest row of 1-8 GPUs, so
    # its factor is the next level's (at the emptier tier's factor it would be valued lower)
    within = _factor(inst, Plan.flat(layers_per_stage=(4, 4), full_recompute_layers=(4, 4), tp=1, pp=2, dp=4, cp=1,
                                     micro_batch=4, sequence_parallel=False, recompute=Recompute.NONE, zero=0,
                                     virtual_stages=1, num_micro_batches=2))
    assert fastest_value / fastest_time > within * (1 + 1e-6)
    searches = _Searches(monkeypatch)
    for backend in ("dp", "cpsat", "milp"):
        res = plan(inst, backend=backend)
        assert res.status == "optimal"
        assert res.quantile_s == pytest.approx(best_value, rel=1e-6, abs=res.tolerance_s), backend
        assert res.quantile_s == pytest.approx(simulate(inst, res.plan).iter_time_s * _factor(inst, res.plan), rel=1e-9)
    # the relaxation's plan (the fastest, valued at the emptier tier's factor) fills beyond
    # the tier: the two tiers are searched too, three searches per plan
    assert len(searches.calls) == 9
    assert exhaustive(inst).quantile_s == pytest.approx(best_value, rel=1e-9)


def _relaxation_misleads():
    """tiny-gpt at 16 layers of hidden 6144 (48 heads of 128, ffn 4 x hidden) at 2,048 tokens,
    one configuration: tp 1, pp 2, dp 4, ZeRO-0, micro-batch 4 (2 micro-batches), no selective
    recompute. Each 8-layer stage must recompute some layers to fit 80 GiB less the 2 GiB
    reserve; 5 per stage is the fastest that fits and fills more of HBM than the fullest
    published row on 1-8 GPUs, 6 per stage fills less."""
    from paraplan.cost.specs import Recompute
    base = load_instance(TINY)
    return dataclasses.replace(
        base, model=dataclasses.replace(base.model, layers=16, seq_len=2048, hidden=6144, heads=48, kv_heads=48,
                                        ffn=4 * 6144),
        search=dataclasses.replace(base.search, tp=(1,), pp=(2,), cp=(1,), zero=(0,), micro_batch=(4,),
                                   sequence_parallel=(False,), recompute=(Recompute.NONE,), virtual_stages=(1,)))


def test_where_the_relaxation_s_plan_fills_beyond_the_tier_the_tiers_find_a_better_one(monkeypatch):
    # Brute force (_every_plan_value): 8 plans fit, all split (8, 8). The fastest recomputes 5
    # layers per stage (3.325 s) and fills beyond the fullest published row of 1-8 GPUs (its
    # factor is level 2's, 1.1196 on 8 A100 at pp 2); 6 per stage (3.433 s, 3.2% slower) fills
    # within it (level 1, 1.0644). 1.032 < 1.1196 / 1.0644 = 1.052, so the p90 optimum is the
    # slower plan: 3.433 x 1.0644 = 3.654 s against 3.325 x 1.1196 = 3.722 s. The relaxation
    # (every plan at 1.0644, no cap) picks the fastest, at 3.325 x 1.0644 = 3.539 s, below the
    # optimum as a relaxation must be; its plan is not valued at its own factor, so the tiers
    # are searched (three searches) and their answer replaces it.
    from paraplan.cost.trust import plan_memory_fill, memory_fill_caps
    from paraplan.solver.memory_tiers import relaxation
    inst = _relaxation_misleads()
    values = _every_plan_value(inst)
    best_value, _, best = min(values, key=lambda v: v[0])
    fastest_value, fastest_time, fastest = min(values, key=lambda v: v[1])
    assert (best.full_recompute_layers, fastest.full_recompute_layers) == ((6, 6), (5, 5))
    assert fastest_value > best_value
    cap = memory_fill_caps(inst)[0]
    relaxed = plan(relaxation(inst), backend="dp")
    assert relaxed.plan.classes[0].full_recompute_layers == (5, 5)
    assert plan_memory_fill(inst, relaxed.plan) > cap
    assert relaxed.quantile_s == pytest.approx(fastest_time * _factor(inst, best), rel=1e-9)
    assert relaxed.quantile_s < best_value
    searches = _Searches(monkeypatch)
    for backend in ("dp", "cpsat", "milp"):
        searches.calls.clear()
        res = plan(inst, backend=backend)
        assert res.status == "optimal" and len(searches.calls) == 3, backend
        assert res.plan.classes[0].full_recompute_layers == (6, 6), backend
        assert res.quantile_s == pytest.approx(best_value, rel=1e-6, abs=res.tolerance_s), backend
        assert res.bound_s <= res.quantile_s * (1 + 1e-9)
    assert exhaustive(inst).quantile_s == pytest.approx(best_value, rel=1e-9)


def test_where_the_relaxation_s_plan_fills_within_the_tier_one_search_is_the_answer(monkeypatch):
    # tiny-gpt as bundled at p90 has two memory tiers (test_the_memory_tiers_cap_...); its
    # optimum fills far less than the fullest published row of 1-8 GPUs, so the relaxation's
    # plan is valued at its own factor and ends the search: one search per plan, the answer
    # exhaustive search finds over both tiers apart
    from paraplan.cost.trust import plan_memory_fill, memory_fill_caps
    inst = load_instance(TINY)
    searches = _Searches(monkeypatch)
    res = plan(inst, backend="dp")
    assert res.status == "optimal" and len(searches.calls) == 1
    assert plan_memory_fill(inst, res.plan) <= memory_fill_caps(inst)[0]
    assert res.quantile_s == pytest.approx(exhaustive(inst).quantile_s, rel=1e-6, abs=res.tolerance_s)


def test_the_loader_and_the_command_line_take_the_objective(tmp_path, capsys):
    assert load_instance(TINY).search.objective == "p90"  # not stated: the default
    text = TINY.read_text() + "\nsearch:\n  objective: p101\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(InstanceError, match=r"search\.objective.*mean \(the predicted time\) or pNN"):
        load_instance(bad)
    assert main(["plan", str(TINY), "--objective", "p101", "--quiet"]) == 2
    assert "search.objective" in capsys.readouterr().err
    assert main(["plan", str(TINY), "--objective", "mean", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["quantile"] == "mean" and out["quantile_s"] == out["iter_time_s"]


@pytest.mark.parametrize("seed", [3, 11, 27])
def test_the_quantile_optimum_is_exhaustive_search_s_and_bounded_by_the_mean_optimum(seed):
    inst = random_instance(seed, variant=True)  # objective "mean" (tests/randinst.py)
    p90 = dataclasses.replace(inst, search=dataclasses.replace(inst.search, objective="p90"))
    mean_res, q_res, q_ex = plan(inst), plan(p90), exhaustive(p90)
    if mean_res.plan is None:
        assert q_res.plan is None and q_ex.plan is None
        return
    # exhaustive search prices every plan of the space at the quantile: the planner's optimum
    tol = q_res.tolerance_s + 1e-9 * q_ex.quantile_s
    assert q_res.quantile_s == pytest.approx(q_ex.quantile_s, abs=tol)
    # each plan's objective is its simulated time times its configuration's factor
    assert q_res.quantile_s == pytest.approx(simulate(p90, q_res.plan).iter_time_s * _factor(p90, q_res.plan),
                                              rel=1e-9)
    # the mean optimum's plan is feasible at the quantile: the quantile optimum is no worse
    # than its quantile time; and no plan's predicted time beats the mean optimum
    mean_plan_q = simulate(p90, mean_res.plan).iter_time_s * _factor(p90, mean_res.plan)
    assert q_res.quantile_s <= mean_plan_q * (1 + 1e-9) + tol
    assert q_res.iter_time_s >= mean_res.iter_time_s * (1 - 1e-9) - tol


def _factor(inst, p) -> float:
    """The quantile factor of a homogeneous plan, read off the flat records themselves (the
    planner reads it off the group form: cost/trust.objective_factor_of): its one GPU type on
    every GPU of the cluster, the plan's ZeRO stage, cp and pp, and its own memory fill (its
    fullest stage's simulated memory over HBM), which the planner's tiers never read."""
    fill = max(s.mem_bytes / s.capacity_bytes for s in simulate(inst, p, reserve_bytes=0.0).stages)
    return objective_factor(inst.search.objective, gpus=(inst.cluster.gpu.name,), num_gpus=inst.cluster.num_gpus,
                            framework=inst.job.framework.value, framework_version=inst.job.release.version,
                            precision=inst.job.precision.value, zero=p.zero, cp=p.cp, pp=p.pp,
                            moe=inst.model.moe is not None,
                            memory_fill=None if inst.model.moe is not None else fill)


@pytest.mark.slow
def test_gpt3_at_p90_is_no_worse_at_p90_than_the_mean_optimum():
    # GPT-3 175B on 1,024 A100: the p90 optimum's p90 time is at most the p90 time of the
    # mean optimum's plan (a plan of the same space), and its predicted time at least the mean
    # optimum's; each plan's p90 time is its predicted time times its configuration's factor
    inst = load_instance(ROOT / "instances" / "gpt3-175b-1024xA100.yaml")
    mean = plan(dataclasses.replace(inst, search=dataclasses.replace(inst.search, objective="mean")))
    q = plan(inst)
    assert q.quantile_s == pytest.approx(q.iter_time_s * _factor(inst, q.plan), rel=1e-9)
    assert q.quantile_s <= mean.iter_time_s * _factor(inst, mean.plan) * (1 + 1e-9)
    assert q.iter_time_s >= mean.iter_time_s * (1 - 1e-9)


def test_a_mixed_cluster_plan_prints_the_band_its_objective_took(capsys):
    # a group-format plan's interval is its least validated GPU type's band (cost/trust
    # plan_trust), the band objective_factor takes: the upper end of the 80% band is the
    # p90 time the planner minimised (quantile_s), the lower end below the predicted time
    path = ROOT / "instances" / "mixed" / "tiny-2types.yaml"
    assert main(["plan", str(path), "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["trust"]["interval_s"]
    assert hi == pytest.approx(out["quantile_s"], rel=1e-9)
    assert lo < out["objective_s"] < hi
    assert main(["plan", str(path), "--quiet"]) == 0
    assert "trust       measured time likely in" in capsys.readouterr().out


def test_the_memory_tiers_merge_to_the_lower_value_and_prove_only_when_both_are_settled():
    # solver/memory_tiers.merged on hand-made results (emptier tier first). Values 10 s (A)
    # and 9 s (B): B's plan, bound min(10, 9) = 9; optimal since both are. A tie at 10 s keeps
    # A's. B stopped by the limit with a plan at 11 s and bound 8 s: A's 10 s plan is kept
    # but the optimum is not proved (feasible), and the bound is the lesser, 8 s.
    from paraplan.solver.memory_tiers import merged
    from paraplan.solver.planner import SolveResult

    def res(status, val, bound, name):
        return SolveResult(status=status, plan=name, objective="nominal", objective_s=val, bound_s=bound,
                           solve_time_s=1.0, backend="dp", outer_configs=4, plans_total=4, quantile_s=val)
    m = merged([res("optimal", 10.0, 10.0, "A"), res("optimal", 9.0, 9.0, "B")])
    assert (m.plan, m.status, m.bound_s, m.solve_time_s) == ("B", "optimal", 9.0, 2.0)
    assert merged([res("optimal", 10.0, 10.0, "A"), res("optimal", 10.0, 10.0, "B")]).plan == "A"
    m = merged([res("optimal", 10.0, 10.0, "A"), res("feasible", 11.0, 8.0, "B")])
    assert (m.plan, m.status, m.bound_s) == ("A", "feasible", 8.0)


def test_a_ceiling_keeps_the_search_s_answer_where_it_can_win_and_settles_it_empty_where_not():
    # search's ceiling_s (the relaxation's plan in hand, solver/memory_tiers.py): the bar is at
    # most the ceiling, a tie entering. tiny-gpt at `mean` (one memory tier): its optimum is
    # exhaustive search's; under a ceiling at that value the search returns it, proved; under
    # a ceiling 1e-6 below it, where no plan of the space can be, it is settled (INFEASIBLE)
    # with no plan and says so
    from paraplan.solver.search import _search_tier
    base = load_instance(TINY)
    inst = dataclasses.replace(base, search=dataclasses.replace(base.search, objective="mean"))
    best = exhaustive(inst).quantile_s
    at = _search_tier(inst, "dp", 60.0, ceiling_s=best)
    assert at.status == "optimal" and at.quantile_s == pytest.approx(best, rel=1e-9, abs=at.tolerance_s)
    below = _search_tier(inst, "dp", 60.0, ceiling_s=best * (1 - 1e-6))
    assert below.status == "infeasible" and below.plan is None and "plan in hand" in below.reason
